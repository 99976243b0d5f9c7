"""RANGE_AGG (000 §4): COUNT / SUM / AVG over relaxed range subscriptions."""
