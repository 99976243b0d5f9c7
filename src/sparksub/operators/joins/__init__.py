"""SELECT_JOIN and BAND_JOIN (003 ch. 4): SSI-based continuous joins, their baselines, the router, the group operators."""
