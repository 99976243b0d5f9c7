"""Spark SQL's comparison semantics for the range-join oracles (test_range_join_aggregate,
test_range_join_enumerate): plain Python, independent of the cores under test; and the strategies' shared
pieces."""
from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import strategies as st


def is_nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def spark_cmp(u, v) -> int:
    """Spark's three-way comparison of two non-NULL numbers (SQLOrderingUtil.compareDoubles after promotion;
    int pairs exactly): NaN above every number and equal to NaN."""
    if isinstance(u, int) and isinstance(v, int):
        return (u > v) - (u < v)
    u, v = float(u), float(v)
    if u == v or (math.isnan(u) and math.isnan(v)):
        return 0
    if math.isnan(u):
        return 1
    if math.isnan(v):
        return -1
    return -1 if u < v else 1


def joins(x, lo, hi, lo_strict: bool, hi_strict: bool) -> bool:
    """``x >= lo AND x <= hi`` (``>`` / ``<`` when strict) in Spark: NULL joins nothing."""
    if x is None or lo is None or hi is None:
        return False
    c_lo, c_hi = spark_cmp(x, lo), spark_cmp(x, hi)
    return (c_lo > 0 if lo_strict else c_lo >= 0) and (c_hi < 0 if hi_strict else c_hi <= 0)


def shown_key(v):
    """The value Spark's GROUP BY / DISTINCT returns for a key: one NaN, -0.0 as 0.0."""
    if is_nan(v):
        return math.nan
    if isinstance(v, float):
        return v + 0.0
    return v


def column(draw, grid, n: int, null_p: float) -> list:
    """n values drawn from ``grid``, each NULL with probability ``null_p``."""
    return [None if draw(st.floats(0, 1)) < null_p else draw(st.sampled_from(grid)) for _ in range(n)]


def chunked(table: pa.Table, draw) -> pa.Table:
    """Sometimes split a table into several chunks (the Spark side hands over several record batches)."""
    if table.num_rows < 2 or not draw(st.booleans()):
        return table
    cut = draw(st.integers(1, table.num_rows - 1))
    return pa.concat_tables([table.slice(0, cut), table.slice(cut)])
