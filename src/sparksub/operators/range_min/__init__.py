"""RANGE_MIN / RANGE_MAX (000 §2-3, 003 ch. 5): the core, the group operator, the subscriber side."""
