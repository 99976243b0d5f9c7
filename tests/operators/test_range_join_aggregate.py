"""Tests of sparksub.operators.range_join.aggregate against a brute-force oracle.

Oracle: plain Python nested loops over (parameter row, data row) pairs implementing Spark SQL's semantics of
``SELECT keys, agg_i(y_i) FROM params JOIN data ON x >= lo AND x <= hi GROUP BY keys`` directly: Spark's
comparison (int64 pairs exactly, otherwise as doubles; NaN above everything and equal to itself; NULL joins
nothing), the inner join, then grouping (NULL keys together, NaN keys together, -0.0 = 0.0 shown as 0.0) and
MIN / MAX / COUNT(*) / COUNT / SUM over the pooled joined rows (NULL Y ignored, NaN the largest value).
Tables come from small value grids so ties, duplicates, NULLs and NaNs are frequent.
"""
from __future__ import annotations

import math
import random
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from range_join_oracle import chunked, column, is_nan as _is_nan, joins, shown_key

from sparksub.operators.range_join.aggregate import range_join_aggregate

AGGS = ["min", "max", "count_star", "count", "sum"]
NAN = math.nan
INTS = [-2, -1, 0, 1, 2, 3, 2**53, 2**53 + 1]
FLOATS = [-1.5, -1.0, -0.0, 0.0, 1.0, 2.0, 2.5, 3.0, math.inf, -math.inf, NAN, 9007199254740992.0]
STRINGS = ["a", "b", "c", ""]


# ------------------------------------------------------------------------------------------------------------
# oracle
# ------------------------------------------------------------------------------------------------------------
def group_key(v):
    """Hashable grouping identity of one key value."""
    if _is_nan(v):
        return ("NaN",)
    if isinstance(v, float):
        return v + 0.0
    return v


def aggregate(agg: str, ys: list):
    vals = [y for y in ys if y is not None]
    if agg == "count_star":
        return len(ys)
    if agg == "count":
        return len(vals)
    if not vals:
        return None
    if agg == "sum":
        return sum(vals)
    non_nan = [v for v in vals if not _is_nan(v)]
    if agg == "min":
        return min(non_nan) if non_nan else NAN
    return NAN if len(non_nan) < len(vals) else max(vals)


def oracle(params: list[dict], data: list[dict], keys: list[str], aggs: list[str], lo_strict: bool,
           hi_strict: bool) -> list[tuple]:
    groups: dict = {}  # identity -> (shown key, [joined data rows])
    for p in params:
        ident = tuple(group_key(p[k]) for k in keys)
        for d in data:
            if joins(d["__x"], p["__lo"], p["__hi"], lo_strict, hi_strict):
                groups.setdefault(ident, (tuple(shown_key(p[k]) for k in keys), []))[1].append(d)
    return [shown + tuple(aggregate(a, [d.get(f"__y{i}") for d in rows]) for i, a in enumerate(aggs))
            for shown, rows in groups.values()]


# ------------------------------------------------------------------------------------------------------------
# comparison
# ------------------------------------------------------------------------------------------------------------
def canon(row) -> tuple:
    """NaN == NaN; None distinct from every value; -0.0 == 0.0 (Python's == already)."""
    return tuple(("NaN",) if _is_nan(v) else ("NULL",) if v is None else v for v in row)


def assert_same(result: pa.Table, expected: list[tuple], keys: list[str]) -> None:
    got = [tuple(r.values()) for r in result.to_pylist()]
    assert Counter(map(canon, got)) == Counter(map(canon, expected)), (got, expected)
    for r in got:  # a -0.0 key group is shown as 0.0
        for v in r[:len(keys)]:
            assert not (isinstance(v, float) and v == 0 and math.copysign(1, v) < 0), r


# ------------------------------------------------------------------------------------------------------------
# strategies
# ------------------------------------------------------------------------------------------------------------
NUMBER_TYPES = {"int64": (pa.int64(), INTS), "float64": (pa.float64(), FLOATS)}
KEY_TYPES = {"int64": (pa.int64(), INTS[:6]), "int32": (pa.int32(), [-1, 0, 1, 2]), "float64": (pa.float64(), FLOATS),
             "string": (pa.string(), STRINGS)}


@st.composite
def cases(draw, aggs=None):
    n_keys = draw(st.integers(1, 2))
    keys = [f"k{j}" for j in range(n_keys)]
    key_types = [draw(st.sampled_from(sorted(KEY_TYPES))) for _ in keys]
    aggs = aggs if aggs is not None else draw(st.lists(st.sampled_from(AGGS), min_size=1, max_size=4))
    x_t, lo_t, hi_t = (draw(st.sampled_from(sorted(NUMBER_TYPES))) for _ in range(3))
    y_ts = ["int64" if a == "sum" else draw(st.sampled_from(sorted(NUMBER_TYPES))) for a in aggs]
    null_p = draw(st.sampled_from([0.0, 0.1, 0.3]))
    n_p, n_d = draw(st.integers(0, 30)), draw(st.integers(0, 30))

    pcols = {k: (KEY_TYPES[t][0], column(draw, KEY_TYPES[t][1], n_p, null_p)) for k, t in zip(keys, key_types)}
    pcols["__lo"] = (NUMBER_TYPES[lo_t][0], column(draw, NUMBER_TYPES[lo_t][1], n_p, null_p))
    pcols["__hi"] = (NUMBER_TYPES[hi_t][0], column(draw, NUMBER_TYPES[hi_t][1], n_p, null_p))
    dcols = {"__x": (NUMBER_TYPES[x_t][0], column(draw, NUMBER_TYPES[x_t][1], n_d, null_p))}
    for i, (a, t) in enumerate(zip(aggs, y_ts)):
        if a != "count_star" or draw(st.booleans()):  # count_star's column may be absent
            dcols[f"__y{i}"] = (NUMBER_TYPES[t][0], column(draw, NUMBER_TYPES[t][1], n_d, null_p))
    params = pa.table({c: pa.array(v, t) for c, (t, v) in pcols.items()})
    data = pa.table({c: pa.array(v, t) for c, (t, v) in dcols.items()})
    return chunked(params, draw), chunked(data, draw), keys, aggs, draw(st.booleans()), draw(st.booleans())


def check(params: pa.Table, data: pa.Table, keys, aggs, lo_strict, hi_strict) -> pa.Table:
    result = range_join_aggregate(params, data, keys, aggs, lo_strict, hi_strict)
    expected = oracle(params.to_pylist(), data.to_pylist(), keys, aggs, lo_strict, hi_strict)
    assert_same(result, expected, keys)
    want = [params.schema.field(k).type for k in keys] + [
        data.schema.field(f"__y{i}").type if a in ("min", "max") else pa.int64() for i, a in enumerate(aggs)]
    assert result.column_names == keys + [f"__a{i}" for i in range(len(aggs))]
    assert result.schema.types == want
    return result


# ------------------------------------------------------------------------------------------------------------
# tests
# ------------------------------------------------------------------------------------------------------------
@settings(max_examples=600, deadline=None)
@given(cases())
def test_matches_oracle(case):
    check(*case)


@pytest.mark.parametrize("agg", AGGS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_each_aggregate(agg, data):
    check(*data.draw(cases(aggs=[agg])))


@settings(max_examples=100, deadline=None)
@given(cases(aggs=["min", "max", "count_star", "count", "sum", "min", "max"]))
def test_all_aggregates_at_once(case):
    check(*case)


@pytest.mark.parametrize("seed", range(4))
def test_larger_tables_deep_sparse_table(seed):
    """Hundreds of rows: sparse-table levels beyond what the small hypothesis tables reach."""
    rng = random.Random(seed)
    n_p, n_d = 150, 400
    floats = [float(v) for v in range(-50, 50)] + [NAN, math.inf]

    def pick(grid, null_p=0.05):
        return None if rng.random() < null_p else rng.choice(grid)

    params = pa.table({"k": pa.array([pick(["a", "b", "c", "d", "e"]) for _ in range(n_p)]),
                       "__lo": pa.array([pick(list(range(-60, 50))) for _ in range(n_p)], pa.int64()),
                       "__hi": pa.array([pick(floats) for _ in range(n_p)], pa.float64())})
    data = pa.table({"__x": pa.array([pick(list(range(-50, 50))) for _ in range(n_d)], pa.int64()),
                     "__y0": pa.array([pick(floats, 0.2) for _ in range(n_d)], pa.float64()),
                     "__y1": pa.array([pick(floats, 0.2) for _ in range(n_d)], pa.float64()),
                     "__y3": pa.array([pick(list(range(-9, 9)), 0.2) for _ in range(n_d)], pa.int64()),
                     "__y4": pa.array([pick(list(range(-9, 9)), 0.2) for _ in range(n_d)], pa.int64())})
    check(params, data, ["k"], ["min", "max", "count_star", "sum", "min"], seed % 2 == 0, seed >= 2)


def test_nan_bounds_follow_spark_ordering():
    data = pa.table({"__x": pa.array([1.0, NAN, None]), "__y0": pa.array([1, 1, 1])})

    def count(lo, hi, lo_strict=False, hi_strict=False):
        params = pa.table({"k": [0], "__lo": pa.array([lo], pa.float64()), "__hi": pa.array([hi], pa.float64())})
        out = range_join_aggregate(params, data, ["k"], ["count_star"], lo_strict, hi_strict)
        return out.column("__a0").to_pylist() or [0]

    assert count(0.0, NAN) == [2]                 # x <= NaN always
    assert count(0.0, NAN, hi_strict=True) == [1]  # x < NaN: every non-NaN
    assert count(NAN, NAN) == [1]                 # x >= NaN only for NaN
    assert count(NAN, NAN, lo_strict=True) == [0]
    assert count(2.0, 1.0) == [0]                 # inverted


def test_float_sum_raises():
    params = pa.table({"k": [1], "__lo": [0], "__hi": [5]})
    data = pa.table({"__x": [1], "__y0": pa.array([1.5])})
    with pytest.raises(ValueError, match="sum over floating point is not exact"):
        range_join_aggregate(params, data, ["k"], ["sum"], False, False)


def test_empty_inputs_keep_schema():
    params = pa.table({"k": pa.array([], pa.string()), "__lo": pa.array([], pa.int64()),
                       "__hi": pa.array([], pa.int64())})
    data = pa.table({"__x": pa.array([], pa.float64()), "__y0": pa.array([], pa.float64())})
    out = range_join_aggregate(params, data, ["k"], ["max", "count_star"], False, True)
    assert out.num_rows == 0
    assert out.schema == pa.schema([("k", pa.string()), ("__a0", pa.float64()), ("__a1", pa.int64())])
