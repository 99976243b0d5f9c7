"""The subscription classes the planner recognises, by shape (DESIGN §3's table), as an
:class:`~sparksub.errors.UnsupportedSubscription` lists them.

Its own module because both the translation to the logical plan (``planner.logical``: a shape it cannot
translate) and the classifier (``planner.classifier``: a plan no rule turned into an operator) reject with
this list, and the classifier builds on the translation.
"""
from __future__ import annotations

__all__ = ["SUPPORTED_CLASSES"]

SUPPORTED_CLASSES = (
    "RANGE_MIN (SELECT MIN(y) FROM t WHERE x BETWEEN a AND b)",
    "RANGE_MAX (SELECT MAX(y) FROM t WHERE x BETWEEN a AND b)",
    "RANGE_TOPK (SELECT cols FROM t WHERE x BETWEEN a AND b ORDER BY y [DESC] LIMIT k)",
    "RANGE_DISTINCT (SELECT DISTINCT y FROM t WHERE x BETWEEN a AND b)",
    "RANGE_AGG (SELECT COUNT(*) | SUM(y) | AVG(y) FROM t WHERE x BETWEEN a AND b)",
    "BOX_MIN (SELECT MIN(y) FROM t WHERE x1 BETWEEN a AND b AND x2 BETWEEN c AND d)",
    "BOX_MAX (SELECT MAX(y) FROM t WHERE x1 BETWEEN a AND b AND x2 BETWEEN c AND d)",
    "BOX_TOPK (SELECT cols FROM t WHERE x1 BETWEEN a AND b AND x2 BETWEEN c AND d ORDER BY y [DESC] LIMIT k)",
    "FILTER (SELECT * | cols FROM t WHERE a conjunction or DNF of attr op const, "
    "op in = != < <= > >= BETWEEN IN IS [NOT] NULL)",
    "SELECT_JOIN (SELECT * | cols FROM r JOIN s ON r.b = s.b [WHERE r.a BETWEEN a AND b] "
    "[AND s.c BETWEEN c AND d]; two different tables)",
    "BAND_JOIN (SELECT * | cols FROM r JOIN s ON s.b - r.b BETWEEN lo AND hi "
    "[WHERE range selections on r and s columns]; two different tables)",
    "STREAM_JOIN / STREAM_BAND_JOIN (SELECT * | cols FROM a JOIN b ON a.b = b.b | ON b.b - a.b BETWEEN lo AND hi "
    "[WHERE range selections] [WITH (max_state_rows = n, state_policy = 'HEEB', ...)]; two event streams)",
)
