"""Range joins of a parameter table (the Catalyst rewrite's cores): aggregates, top-k and DISTINCT."""
