"""The group operators and the subscriber side shared by RANGE_TOPK, RANGE_DISTINCT and RANGE_AGG."""
