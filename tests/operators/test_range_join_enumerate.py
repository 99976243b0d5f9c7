"""Tests of sparksub.operators.range_join.enumerate against a brute-force oracle.

The oracle is plain Python loops over (parameter row, data row) pairs that implement Spark SQL's semantics of

    SELECT keys..., payload..., ROW_NUMBER() OVER (PARTITION BY keys ORDER BY __y [ASC|DESC]
                                                  [NULLS FIRST|LAST]) AS __rn
    FROM params JOIN data ON __x >=/> __lo AND __x <=/< __hi  QUALIFY __rn <= k

and ``SELECT DISTINCT keys..., __y FROM params JOIN data ON ...`` directly: Spark's comparison (integral
pairs exactly, otherwise as doubles; NaN above every number and equal to itself; -0.0 = 0.0; NULL joins
nothing; an inverted range joins nothing), the inner join with multiplicity, PARTITION BY / GROUP BY
identity (NULL keys together, NaN keys together, -0.0 with 0.0).

What is compared for top-k (ROW_NUMBER among equal ``__y`` is arbitrary in Spark):

* the set of partitions (normalised keys) and, per partition, ``__rn`` = 1..min(k, n);
* per partition the sequence of ``__y`` values for rn = 1..min(k, n) (NaN == NaN, -0.0 == 0.0, NULL placed
  as ``nulls_first`` says) -- read through a row id (``__id`` in the payload) or the ``__y`` payload column;
* every output row's payload is exactly (zero signs included) the payload of the data row it claims, and
  its key is exactly (zero sign included) the key of a parameter row that joins that data row: the multiset
  of (exact key, data row id) in the output fits within the joined pairs -- a window keeps its input row's
  own key, so -0.0 keys are compared after normalisation only for the partition identity;
* where a partition has no ties among distinct data rows (a data row pooled twice is no tie: its copies
  are identical), its full rows (payload, __rn) exactly.

DISTINCT is compared as a set of normalised rows (keys and ``__y`` as GROUP BY outputs them: one NaN,
-0.0 -> 0.0, NULL a value) with no duplicates, and no -0.0 anywhere in the output.
"""
from __future__ import annotations

import math
import random
from collections import Counter, defaultdict

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from range_join_oracle import chunked, column, is_nan as _is_nan, joins, shown_key as shown

from sparksub.operators.range_join.enumerate import range_join_distinct, range_join_topk

NAN = math.nan
INTS = [-2, -1, 0, 1, 2, 3, 2**53, 2**53 + 1]
SMALL_INTS = [-2, -1, 0, 1, 2, 3]
FLOATS = [-1.5, -1.0, -0.0, 0.0, 1.0, 2.0, 2.5, 3.0, math.inf, -math.inf, NAN, 9007199254740992.0]
FLOAT32S = [-1.5, -0.0, 0.0, 1.0, 2.5, math.inf, -math.inf, NAN]
STRINGS = ["a", "b", "c", ""]

# bound / X columns: Spark compares int vs bigint as bigint, anything with a double as double
NUMBER_TYPES = {"int64": (pa.int64(), INTS), "int32": (pa.int32(), SMALL_INTS), "float64": (pa.float64(), FLOATS)}
KEY_TYPES = {"int64": (pa.int64(), INTS[:6]), "int32": (pa.int32(), [-1, 0, 1, 2]),
             "float64": (pa.float64(), FLOATS), "string": (pa.string(), STRINGS)}
TOPK_Y_TYPES = {"int64": (pa.int64(), INTS), "int32": (pa.int32(), SMALL_INTS), "float64": (pa.float64(), FLOATS),
                "float32": (pa.float32(), FLOAT32S)}
DISTINCT_Y_TYPES = {"int64": (pa.int64(), INTS), "float64": (pa.float64(), FLOATS), "string": (pa.string(), STRINGS),
                    "float32": (pa.float32(), FLOAT32S)}
PAYLOAD = ["__id", "s", "i", "f", "__y", "__x"]


# ------------------------------------------------------------------------------------------------------------
# oracle
# ------------------------------------------------------------------------------------------------------------
def norm(v):
    """PARTITION BY / GROUP BY / ORDER BY-equality identity: NULL a value, one NaN, -0.0 == 0.0."""
    if v is None:
        return ("NULL",)
    if _is_nan(v):
        return ("NaN",)
    if isinstance(v, float):
        return v + 0.0
    return v


def exact(v):
    """Exact identity of a value as copied through unchanged: the sign of a zero counts."""
    if v is None:
        return ("NULL",)
    if _is_nan(v):
        return ("NaN",)
    if isinstance(v, float):
        return ("F", v, math.copysign(1.0, v))
    return v


def joined_pairs(params: list[dict], data: list[dict], lo_strict: bool, hi_strict: bool) -> list[tuple[int, int]]:
    return [(pi, di) for pi, p in enumerate(params) for di, d in enumerate(data)
            if joins(d["__x"], p["__lo"], p["__hi"], lo_strict, hi_strict)]


def spark_order(ys: list, descending: bool, nulls_first: bool) -> list:
    """ORDER BY y [ASC|DESC] [NULLS FIRST|LAST]: NaN the largest number, -0.0 == 0.0."""
    def key(y):
        return (1, 0) if _is_nan(y) else (0, y)
    nulls = [y for y in ys if y is None]
    values = sorted((y for y in ys if y is not None), key=key, reverse=descending)
    return nulls + values if nulls_first else values + nulls


def oracle_partitions(params, data, keys, lo_strict, hi_strict) -> dict:
    """normalised key tuple -> the joined (parameter row, data row) pairs pooled in it (with multiplicity)."""
    parts: dict = defaultdict(list)
    for pi, di in joined_pairs(params, data, lo_strict, hi_strict):
        parts[tuple(norm(params[pi][c]) for c in keys)].append((pi, di))
    return parts


# ------------------------------------------------------------------------------------------------------------
# top-k check
# ------------------------------------------------------------------------------------------------------------
def check_topk(params: pa.Table, data: pa.Table, keys, k, descending, nulls_first, lo_strict, hi_strict,
               payload) -> pa.Table:
    result = range_join_topk(params, data, keys, k, descending, nulls_first, lo_strict, hi_strict, payload)
    want_schema = pa.schema([params.schema.field(c) for c in keys] + [data.schema.field(c) for c in payload]
                            + [pa.field("__rn", pa.int32())])
    assert result.schema == want_schema, result.schema

    P, D = params.to_pylist(), data.to_pylist()
    parts = oracle_partitions(P, D, keys, lo_strict, hi_strict)
    nk = len(keys)
    got: dict = defaultdict(list)
    for values in (tuple(r) for r in zip(*(result.column(j).to_pylist() for j in range(result.num_columns)))):
        got[tuple(norm(v) for v in values[:nk])].append(values)
    assert set(got) == set(parts), (sorted(map(repr, got)), sorted(map(repr, parts)))

    for ident, pairs in parts.items():
        rows = sorted(got[ident], key=lambda r: r[-1])
        n_out = min(k, len(pairs))
        context = (ident, rows, [(P[pi], D[di]) for pi, di in pairs])
        assert [r[-1] for r in rows] == list(range(1, n_out + 1)), context

        want_ys = spark_order([D[di]["__y"] for _, di in pairs], descending, nulls_first)[:n_out]
        pay = [{c: r[nk + j] for j, c in enumerate(payload)} for r in rows]
        if "__y" in payload:
            assert [norm(p["__y"]) for p in pay] == [norm(y) for y in want_ys], context
        if "__id" in payload:
            ids = [p["__id"] for p in pay]
            assert [norm(D[i]["__y"]) for i in ids] == [norm(y) for y in want_ys], context
            for p in pay:  # payload copied exactly from the data row it names
                assert {c: exact(v) for c, v in p.items()} == {c: exact(D[p["__id"]][c]) for c in payload}, context
            # each output row is one joined (parameter row, data row) pair, keeping that parameter row's key
            have = Counter((tuple(exact(v) for v in r[:nk]), i) for r, i in zip(rows, ids))
            avail = Counter((tuple(exact(P[pi][c]) for c in keys), di) for pi, di in pairs)
            assert all(avail[c] >= n for c, n in have.items()), (have, avail, context)

        distinct_rows = sorted({di for _, di in pairs})
        if len({norm(D[di]["__y"]) for di in distinct_rows}) == len(distinct_rows):  # no ties: fully determined
            ordered = sorted(pairs, key=lambda pd: want_key(D[pd[1]]["__y"], descending, nulls_first))[:n_out]
            want_rows = [tuple(exact(D[di][c]) for c in payload) + (rn,) for rn, (_, di) in enumerate(ordered, 1)]
            got_rows = [tuple(exact(v) for v in r[nk:-1]) + (r[-1],) for r in rows]
            assert got_rows == want_rows, context
    return result


def want_key(y, descending: bool, nulls_first: bool):
    """Sort key equivalent to spark_order for one column's values (used where there are no ties)."""
    if y is None:
        return (0 if nulls_first else 2,)
    v = (1, 0) if _is_nan(y) else (0, y)
    if descending:
        v = (-v[0], -v[1])
    return (1, v)


# ------------------------------------------------------------------------------------------------------------
# DISTINCT check
# ------------------------------------------------------------------------------------------------------------
def check_distinct(params: pa.Table, data: pa.Table, keys, lo_strict, hi_strict) -> pa.Table:
    result = range_join_distinct(params, data, keys, lo_strict, hi_strict)
    want_schema = pa.schema([params.schema.field(c) for c in keys] + [data.schema.field("__y")])
    assert result.schema == want_schema, result.schema

    P, D = params.to_pylist(), data.to_pylist()
    expected = {tuple(norm(P[pi][c]) for c in keys) + (norm(D[di]["__y"]),)
                for pi, di in joined_pairs(P, D, lo_strict, hi_strict)}
    got_rows = [tuple(r.values()) for r in result.to_pylist()]
    got = Counter(tuple(norm(v) for v in r) for r in got_rows)
    assert set(got) == expected, (got_rows, expected)
    assert all(n == 1 for n in got.values()), got_rows  # DISTINCT: no duplicates
    for r in got_rows:  # output as GROUP BY shows it: no -0.0
        for v in r:
            assert exact(v) == exact(shown(v)), r
    return result


# ------------------------------------------------------------------------------------------------------------
# strategies
# ------------------------------------------------------------------------------------------------------------


def draw_params(draw, n_p: int, null_p: float) -> tuple[pa.Table, list[str]]:
    n_keys = draw(st.integers(1, 2))
    keys = [f"k{j}" for j in range(n_keys)]
    cols = {}
    for c in keys:
        t, grid = KEY_TYPES[draw(st.sampled_from(sorted(KEY_TYPES)))]
        cols[c] = pa.array(column(draw, grid, n_p, null_p), t)
    for c in ("__lo", "__hi"):
        t, grid = NUMBER_TYPES[draw(st.sampled_from(sorted(NUMBER_TYPES)))]
        cols[c] = pa.array(column(draw, grid, n_p, null_p), t)
    if draw(st.booleans()):  # column order is not fixed
        cols = dict(reversed(list(cols.items())))
    return chunked(pa.table(cols), draw), keys


def draw_y(draw, types: dict, n_d: int, null_p: float) -> pa.Array:
    t, grid = types[draw(st.sampled_from(sorted(types)))]
    if pa.types.is_string(t) or not draw(st.integers(0, 2)) == 0:
        return pa.array(column(draw, grid, n_d, null_p), t)
    # all distinct, no NULL: the full top-k rows are determined
    if pa.types.is_integer(t):
        values = draw(st.permutations(list(range(-n_d, n_d))))[:n_d]
    else:
        pool = [float(v) / 2 for v in range(-n_d, n_d)] + [NAN, math.inf, -math.inf]
        values = draw(st.permutations(pool))[:n_d]
    return pa.array(values, t)


@st.composite
def topk_cases(draw):
    null_p = draw(st.sampled_from([0.0, 0.1, 0.3]))
    n_p, n_d = draw(st.integers(0, 30)), draw(st.integers(0, 30))
    params, keys = draw_params(draw, n_p, null_p)
    x_t, x_grid = NUMBER_TYPES[draw(st.sampled_from(sorted(NUMBER_TYPES)))]
    data = pa.table({
        "__x": pa.array(column(draw, x_grid, n_d, null_p), x_t),
        "__y": draw_y(draw, TOPK_Y_TYPES, n_d, null_p),
        "__id": pa.array(range(n_d), pa.int64()),
        "s": pa.array(column(draw, STRINGS, n_d, 0.2), pa.string()),
        "i": pa.array(column(draw, SMALL_INTS, n_d, 0.2), pa.int32()),
        "f": pa.array(column(draw, FLOATS, n_d, 0.2), pa.float64()),
    })
    payload = draw(st.lists(st.sampled_from(PAYLOAD), unique=True, max_size=len(PAYLOAD)))
    if "__id" not in payload and draw(st.integers(0, 4)) > 0:
        payload.insert(draw(st.integers(0, len(payload))), "__id")
    return (params, chunked(data, draw), keys, draw(st.integers(1, 6)), draw(st.booleans()), draw(st.booleans()),
            draw(st.booleans()), draw(st.booleans()), payload)


@st.composite
def distinct_cases(draw):
    null_p = draw(st.sampled_from([0.0, 0.1, 0.3]))
    n_p, n_d = draw(st.integers(0, 30)), draw(st.integers(0, 30))
    params, keys = draw_params(draw, n_p, null_p)
    x_t, x_grid = NUMBER_TYPES[draw(st.sampled_from(sorted(NUMBER_TYPES)))]
    data = pa.table({"__x": pa.array(column(draw, x_grid, n_d, null_p), x_t),
                     "__y": draw_y(draw, DISTINCT_Y_TYPES, n_d, null_p)})
    return params, chunked(data, draw), keys, draw(st.booleans()), draw(st.booleans())


# ------------------------------------------------------------------------------------------------------------
# tests: top-k
# ------------------------------------------------------------------------------------------------------------
@settings(max_examples=250, deadline=None)
@given(topk_cases())
def test_topk_matches_oracle(case):
    check_topk(*case)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("nulls_first", [False, True])
@settings(max_examples=60, deadline=None)
@given(case=topk_cases())
def test_topk_each_order(case, descending, nulls_first):
    params, data, keys, k, _, _, lo_strict, hi_strict, payload = case
    check_topk(params, data, keys, k, descending, nulls_first, lo_strict, hi_strict, payload)


def test_topk_docstring_example():
    params = pa.table({"k": ["a", "a", "b"], "__lo": [1, 6, 9], "__hi": [3, 7, 9]})
    data = pa.table({"__x": [1, 2, 3, 6, 7], "__y": [5.0, 1.0, 5.0, None, 2.0], "s": list("vwxyz")})
    out = range_join_topk(params, data, ["k"], 2, False, True, False, False, ["s"])
    assert out.to_pylist() == [{"k": "a", "s": "y", "__rn": 1}, {"k": "a", "s": "w", "__rn": 2}]


def test_topk_nan_null_ordering():
    params = pa.table({"k": [0], "__lo": pa.array([-10.0]), "__hi": pa.array([NAN])})  # x <= NaN: everything
    data = pa.table({"__x": pa.array([1.0, 2.0, 3.0, NAN, 5.0]),
                     "__y": pa.array([math.inf, NAN, None, -math.inf, 0.0])})

    def ys(descending, nulls_first, k=5):
        out = range_join_topk(params, data, ["k"], k, descending, nulls_first, False, False, ["__y"])
        return [norm(v) for v in out.column("__y").to_pylist()]

    assert ys(False, True) == [("NULL",), -math.inf, 0.0, math.inf, ("NaN",)]
    assert ys(False, False) == [-math.inf, 0.0, math.inf, ("NaN",), ("NULL",)]
    assert ys(True, False) == [("NaN",), math.inf, 0.0, -math.inf, ("NULL",)]
    assert ys(True, True) == [("NULL",), ("NaN",), math.inf, 0.0, -math.inf]
    assert ys(True, True, k=2) == [("NULL",), ("NaN",)]


def test_topk_pools_duplicate_parameter_rows_with_multiplicity():
    # two parameter rows of key 0.0 / -0.0 (one partition) both join x = 1: that row appears twice
    params = pa.table({"k": pa.array([0.0, -0.0, 1.0]), "__lo": [0, 1, 5], "__hi": [1, 2, 9]})
    data = pa.table({"__x": [0, 1, 2, 9], "__y": [30, 10, 20, 5], "__id": [0, 1, 2, 3]})
    out = range_join_topk(params, data, ["k"], 3, False, True, False, False, ["__id"])
    rows = sorted(((norm(r["k"]), r["__rn"], r["__id"]) for r in out.to_pylist()), key=repr)
    assert rows == sorted([(0.0, 1, 1), (0.0, 2, 1), (0.0, 3, 2), (1.0, 1, 3)], key=repr)
    check_topk(params, data, ["k"], 3, False, True, False, False, ["__id"])


@pytest.mark.parametrize("k", [0, -1, -5])
def test_topk_k_below_one_raises(k):
    params = pa.table({"k": [1], "__lo": [0], "__hi": [5]})
    data = pa.table({"__x": [1], "__y": [1]})
    with pytest.raises(ValueError):
        range_join_topk(params, data, ["k"], k, False, True, False, False, [])


def test_topk_empty_inputs_keep_schema():
    params = pa.table({"k": pa.array([], pa.string()), "__lo": pa.array([], pa.int64()),
                       "__hi": pa.array([], pa.int64())})
    data = pa.table({"__x": pa.array([], pa.float64()), "__y": pa.array([], pa.float64()),
                     "s": pa.array([], pa.string())})
    out = range_join_topk(params, data, ["k"], 3, True, False, False, True, ["s", "__y"])
    assert out.num_rows == 0
    assert out.schema == pa.schema([("k", pa.string()), ("s", pa.string()), ("__y", pa.float64()),
                                    ("__rn", pa.int32())])


# ------------------------------------------------------------------------------------------------------------
# tests: DISTINCT
# ------------------------------------------------------------------------------------------------------------
@settings(max_examples=250, deadline=None)
@given(distinct_cases())
def test_distinct_matches_oracle(case):
    check_distinct(*case)


def test_distinct_docstring_example():
    params = pa.table({"k": ["a", "a", "b"], "__lo": [1, 6, 9], "__hi": [3, 7, 9]})
    data = pa.table({"__x": [1, 2, 3, 6, 7], "__y": [5.0, 1.0, 5.0, None, 2.0]})
    out = range_join_distinct(params, data, ["k"], False, False)
    assert sorted(out.to_pylist(), key=str) == [{"k": "a", "__y": 1.0}, {"k": "a", "__y": 2.0},
                                                {"k": "a", "__y": 5.0}, {"k": "a", "__y": None}]


def test_distinct_normalises_zero_and_nan():
    params = pa.table({"k": pa.array([-0.0, 0.0, NAN, NAN]), "__lo": [0, 0, 0, 0], "__hi": [9, 9, 9, 9]})
    data = pa.table({"__x": [1, 2, 3, 4], "__y": pa.array([-0.0, 0.0, NAN, float("-nan")])})
    out = check_distinct(params, data, ["k"], False, False)
    assert out.num_rows == 4  # keys {0.0, NaN} x values {0.0, NaN}


def test_distinct_empty_inputs_keep_schema():
    params = pa.table({"k": pa.array([], pa.int32()), "__lo": pa.array([], pa.float64()),
                       "__hi": pa.array([], pa.int64())})
    data = pa.table({"__x": pa.array([], pa.int64()), "__y": pa.array([], pa.string())})
    out = range_join_distinct(params, data, ["k"], True, False)
    assert out.num_rows == 0
    assert out.schema == pa.schema([("k", pa.int32()), ("__y", pa.string())])


# ------------------------------------------------------------------------------------------------------------
# larger deterministic instances (deep sparse tables, many vectorised rounds)
# ------------------------------------------------------------------------------------------------------------
def large_instance(seed: int, y_kind: str) -> tuple[pa.Table, pa.Table]:
    rng = random.Random(seed)
    n_p, n_d = 500, 2000
    floats = [float(v) / 2 for v in range(-100, 100)] + [NAN, math.inf, -math.inf, -0.0]

    def pick(grid, null_p=0.03):
        return None if rng.random() < null_p else rng.choice(grid)

    lo = [pick(list(range(-100, 100))) for _ in range(n_p)]
    hi = [None if v is None else v + rng.choice([-3, 0, 1, 5, 20, 60]) for v in lo]
    params = pa.table({"k": pa.array([pick(["a", "b", "c", "d", "e", "f", "g"]) for _ in range(n_p)]),
                       "k2": pa.array([pick([0.0, -0.0, 1.0, NAN]) for _ in range(n_p)], pa.float64()),
                       "__lo": pa.array(lo, pa.int64()),
                       "__hi": pa.array([None if v is None else float(v) for v in hi], pa.float64())})
    if y_kind == "float":
        y = pa.array([pick(floats, 0.05) for _ in range(n_d)], pa.float64())
    elif y_kind == "int":
        y = pa.array([pick(list(range(-30, 30)), 0.05) for _ in range(n_d)], pa.int64())
    else:
        y = pa.array([pick([f"v{j}" for j in range(40)], 0.05) for _ in range(n_d)], pa.string())
    data = pa.table({"__x": pa.array([pick(list(range(-100, 100)) + [NAN]) for _ in range(n_d)], pa.float64()),
                     "__y": y,
                     "__id": pa.array(range(n_d), pa.int64()),
                     "s": pa.array([pick(STRINGS, 0.2) for _ in range(n_d)], pa.string())})
    return params, data


@pytest.mark.parametrize("seed,y_kind,descending,nulls_first", [(0, "float", False, True), (1, "int", True, False),
                                                                (2, "float", True, True)])
def test_topk_large(seed, y_kind, descending, nulls_first):
    params, data = large_instance(seed, y_kind)
    out = check_topk(params, data, ["k", "k2"], 5, descending, nulls_first, seed == 1, seed == 2,
                     ["s", "__id", "__y"])
    assert out.num_rows > 50


def test_topk_large_distinct_ys_full_rows():
    """All Y distinct and non-NULL: every partition's full rows are compared."""
    params, data = large_instance(3, "int")
    perm = list(range(data.num_rows))
    random.Random(3).shuffle(perm)
    data = data.set_column(1, "__y", pa.array(perm, pa.int64()))
    out = check_topk(params, data, ["k"], 5, False, True, False, False, ["__id", "s"])
    assert out.num_rows > 20


@pytest.mark.parametrize("seed,y_kind", [(4, "float"), (5, "int"), (6, "string")])
def test_distinct_large(seed, y_kind):
    params, data = large_instance(seed, y_kind)
    out = check_distinct(params, data.select(["__x", "__y"]), ["k", "k2"], seed == 5, seed == 6)
    assert out.num_rows > 50
