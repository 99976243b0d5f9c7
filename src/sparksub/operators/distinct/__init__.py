"""RANGE_DISTINCT (000 §4): Mar extended to duplicates."""
