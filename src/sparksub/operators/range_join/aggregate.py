"""Range-join aggregation: every parameter row's range aggregate over one data table, answered at once.

Pure core (numpy + pyarrow, no pyspark) of the plain-SQL formulation that a Catalyst rule recognises and
replaces (the Java side hands over two tables with fixed column names; ``spark_range_join`` is the Spark
wrapper)::

    SELECT q.k..., AGG_0(t.y_0) AS __a0, AGG_1(t.y_1) AS __a1, ...
    FROM q JOIN t ON t.x >= q.lo AND t.x <= q.hi          -- either bound may be strict: > / <
    GROUP BY q.k...

``params`` holds the key columns and ``__lo``, ``__hi``; ``data`` holds ``__x`` and ``__y{i}`` (the column
aggregate ``i`` reads; absent for ``count_star``).  Aggregates: ``min``, ``max``, ``count_star``, ``count``,
``sum`` (integral Y only).

Algorithm
---------
One query per subscription over an index on the data: the parameter rows are the subscriptions, the data
table is indexed once and every parameter row asks it one range query, instead of the nested-loop join
Spark would run (O(|q| * |t|)).

* The data rows with a non-NULL X are sorted by X once (numpy's order: NaN last, which is Spark's order --
  NaN above every double, NaN = NaN, -0.0 = 0.0).  A parameter row's joined rows are then one contiguous
  slice ``[a, b)`` of that order: ``a`` / ``b`` come from ``np.searchsorted`` (side ``left`` / ``right``
  picks ``>=`` vs ``>`` and ``<`` vs ``<=``), for all parameter rows in one vectorised call.  numpy's
  searchsorted uses the same NaN-aware comparison as its sort, so NaN bounds behave as in Spark: ``x >= NaN``
  holds only for x = NaN, ``x <= NaN`` always, ``x < NaN`` for every non-NaN x.  An inverted range gives
  ``a >= b``, i.e. nothing.
* MIN / MAX: a sparse table per aggregate (level j holds the op over the 2**j rows starting at i; O(n log n)
  build), so a slice of length L is the op of two overlapping blocks of length 2**floor(log2 L): O(1) per
  parameter row.  COUNT / SUM: prefix counts / sums, one difference per parameter row.
* GROUP BY: parameter rows with the same key pool their joined rows.  Each range answer is already an
  aggregate of its slice, and MIN of MINs, sums of COUNTs / SUMs are the pooled answer (overlapping slices of
  two parameter rows are both counted, as the join counts a data row once per parameter row it joins).  Keys
  are factorised to integer codes and the per-row answers combined with ``ufunc.reduceat`` over the rows
  sorted by code.  No Python loop runs per parameter row or per data row.

Memory: the sparse table is ``ceil(log2 n)`` int64/float64 rows of n (100K data rows: 17 x 800 KB per
MIN/MAX aggregate); per parameter row a handful of int64 arrays.

Spark semantics reproduced
--------------------------
* INNER join: a key none of whose parameter rows joins a data row is absent from the result.  NULL x, lo or
  hi joins nothing.
* Comparisons: int64 against int64 exactly; anything involving float64 in float64 (Spark casts BIGINT to
  DOUBLE, as ``astype`` does).  Each bound is promoted on its own.
* MIN / MAX ignore NULL Y; NaN is the largest value (``np.fmin`` skips NaN unless all are NaN; ``np.maximum``
  propagates it).  NULL Y is replaced by a neutral sentinel and the non-NULL count decides NULL results.
  COUNT(*) counts joined rows, COUNT(y) non-NULL Y; SUM of integral Y is NULL when every Y is NULL (int64
  arithmetic wraps, so prefix differences are exact whenever the true sum fits, as Spark assumes).
* SUM over floating-point Y raises ``ValueError``: Spark adds doubles in its own (partition) order, so prefix
  differences would not reproduce its rounding.
* Keys: NULLs group together, NaNs group together, -0.0 and 0.0 are one group and come out as 0.0 (Spark's
  NormalizeFloatingNumbers).  At least one key column is required (no GROUP BY is a global aggregate, which
  returns one row even for an empty join: a different operator).
* Not reproducible: the sign of a zero MIN / MAX when both -0.0 and 0.0 are in range (Spark returns whichever
  it meets first; they compare equal).

>>> import pyarrow as pa
>>> params = pa.table({"k": ["a", "a", "b", "c"], "__lo": [1, 5, 2, None], "__hi": [2, 9, 1, 9]})
>>> data = pa.table({"__x": [1, 2, 6, 7], "__y0": [10.0, 3.0, None, 4.0], "__y2": [1, 1, 1, None]})
>>> out = range_join_aggregate(params, data, ["k"], ["min", "count_star", "sum"], False, False)
>>> out.to_pylist()  # "b" has an inverted range, "c" a NULL bound: neither joins
[{'k': 'a', '__a0': 3.0, '__a1': 4, '__a2': 3}]
>>> range_join_aggregate(params, data, ["k"], ["max"], True, False).to_pylist()  # x > lo: x = 1 is out
[{'k': 'a', '__a0': 4.0}]
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["range_join_aggregate", "AGGREGATES", "joined_slices", "factorise", "sparse_table", "sparse_query",
           "number_column", "column_values"]

AGGREGATES = ("min", "max", "count_star", "count", "sum")
_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min


def range_join_aggregate(params: pa.Table, data: pa.Table, keys: list[str], aggregates: list[str],
                         lo_strict: bool, hi_strict: bool) -> pa.Table:
    """``SELECT keys..., agg_i(__y{i}) AS __a{i} FROM params JOIN data ON __x >= __lo AND __x <= __hi
    GROUP BY keys`` with Spark's semantics (module docstring); ``lo_strict`` / ``hi_strict`` make the bounds
    ``>`` / ``<``.  Result: the key columns (names and types of ``params``) then ``__a{i}`` (min / max: the Y
    column's type; count_star / count / sum: int64); row order unspecified.

    >>> p = pa.table({"k": [1, 1, None], "__lo": [0.5, 3.0, 0.0], "__hi": [2.0, 3.0, float("nan")]})
    >>> d = pa.table({"__x": [1, 2, 3, None], "__y0": [5, None, 7, 1], "__y1": [5, None, 7, 1]})
    >>> range_join_aggregate(p, d, ["k"], ["min", "count"], False, False).sort_by("k").to_pylist()
    [{'k': 1, '__a0': 5, '__a1': 2}, {'k': None, '__a0': 5, '__a1': 2}]
    """
    keys, aggregates = list(keys), list(aggregates)
    _check(params, data, keys, aggregates)
    ys = [None if a == "count_star" else _number_column(data, f"__y{i}") for i, a in enumerate(aggregates)]
    for a, y in zip(aggregates, ys):
        if a == "sum" and not pa.types.is_integer(y.type):
            raise ValueError("sum over floating point is not exact; not rewritten")
    out_fields = [params.schema.field(k) for k in keys] + [
        pa.field(f"__a{i}", ys[i].type if a in ("min", "max") else pa.int64()) for i, a in enumerate(aggregates)]

    order, rows, a, b = joined_slices(params, data, lo_strict, hi_strict)
    if len(rows) == 0:
        return pa.Table.from_arrays([pa.array([], f.type) for f in out_fields], schema=pa.schema(out_fields))

    # -- group the joined parameter rows by key --------------------------------------------------------------
    key_table = params.select(keys).take(pa.array(rows))
    key_cols, gid = _factorise([key_table.column(k) for k in keys])
    by_group = np.argsort(gid, kind="stable")
    g = gid[by_group]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    a, b = a[by_group], b[by_group]
    first = pa.array(by_group[starts])
    out = [c.take(first) for c in key_cols]

    # -- per aggregate: range answers per parameter row, pooled per key -----------------------------------
    n_joined = b - a
    for agg, y in zip(aggregates, ys):
        if agg == "count_star":
            out.append(pa.array(np.add.reduceat(n_joined, starts), pa.int64()))
            continue
        yv, y_null = _values(y)
        yv, y_valid = yv[order], ~y_null[order]
        count = np.add.reduceat(_prefix_diff(y_valid.astype(np.int64), a, b), starts)
        if agg == "count":
            out.append(pa.array(count, pa.int64()))
            continue
        empty = count == 0
        if agg == "sum":
            total = np.add.reduceat(_prefix_diff(np.where(y_valid, yv, 0), a, b), starts)
            out.append(pa.array(total, pa.int64(), mask=empty))
            continue
        op, neutral = _min_max(agg, yv.dtype)
        table = _sparse_table(np.where(y_valid, yv, neutral), op)
        value = op.reduceat(_sparse_query(table, op, a, b), starts)
        out.append(pa.array(value, mask=empty).cast(y.type))
    return pa.Table.from_arrays(out, schema=pa.schema(out_fields))


def joined_slices(params: pa.Table, data: pa.Table, lo_strict: bool, hi_strict: bool):
    """The index and every parameter row's slice of it: ``(order, rows, a, b)`` -- ``order`` the data rows
    with a non-NULL ``__x`` sorted by it (NaN last), ``rows`` the parameter rows that join something, and
    for each of them the slice ``order[a:b]`` (b > a) of the data rows it joins."""
    x = _number_column(data, "__x")
    x_int = pa.types.is_integer(x.type)
    xv, x_null = _values(x)
    keep = np.flatnonzero(~x_null)
    order = keep[np.argsort(xv[keep], kind="stable")]
    xs = xv[order]
    a, lo_null = _search(xs, x_int, _number_column(params, "__lo"), "right" if lo_strict else "left")
    b, hi_null = _search(xs, x_int, _number_column(params, "__hi"), "left" if hi_strict else "right")
    rows = np.flatnonzero(~lo_null & ~hi_null & (b > a))
    return order, rows, a[rows], b[rows]


# ------------------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------------------
def _check(params: pa.Table, data: pa.Table, keys: list[str], aggregates: list[str]) -> None:
    if not keys:
        raise ValueError("range_join_aggregate needs at least one key column (no GROUP BY is a global "
                         "aggregate, which returns a row even for an empty join)")
    for k in keys:
        if k not in params.column_names:
            raise ValueError(f"key column {k!r} not in params {params.column_names}")
        if k in ("__lo", "__hi") or k in {f"__a{i}" for i in range(len(aggregates))}:
            raise ValueError(f"key column {k!r} clashes with the operator's own column names")
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key columns {keys}")
    for a in aggregates:
        if a not in AGGREGATES:
            raise ValueError(f"unknown aggregate {a!r}; one of {AGGREGATES}")


def _number_column(table: pa.Table, name: str) -> pa.ChunkedArray:
    if name not in table.column_names:
        raise ValueError(f"column {name!r} missing; columns: {table.column_names}")
    col = table.column(name)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise TypeError(f"column {name!r} must be integral or floating point, not {col.type}")
    return col


def _values(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64 / float64 with NULLs as 0, NULL mask)."""
    null = col.is_null().to_numpy(zero_copy_only=False).astype(bool, copy=False)
    dtype = np.int64 if pa.types.is_integer(col.type) else np.float64
    values = pc.fill_null(col, 0).to_numpy().astype(dtype, copy=False) if len(col) else np.empty(0, dtype)
    return values, null


def _search(xs: np.ndarray, x_int: bool, bound: pa.ChunkedArray, side: str) -> tuple[np.ndarray, np.ndarray]:
    """searchsorted of every bound into the sorted X, in the comparison type Spark uses for the pair
    (int64 only when both are integral)."""
    v, null = _values(bound)
    if not (x_int and v.dtype == np.int64):
        xs, v = xs.astype(np.float64, copy=False), v.astype(np.float64, copy=False)
    return np.searchsorted(xs, v, side=side).astype(np.int64, copy=False), null


# ------------------------------------------------------------------------------------------------------------
# range structures
# ------------------------------------------------------------------------------------------------------------
def _prefix_diff(v: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum(v[a:b]) per row via prefix sums (int64 wraps: exact whenever the true sum fits)."""
    prefix = np.zeros(len(v) + 1, dtype=v.dtype)
    np.cumsum(v, out=prefix[1:])
    return prefix[b] - prefix[a]


def _min_max(agg: str, dtype: np.dtype) -> tuple[np.ufunc, object]:
    """The combining ufunc and the value a NULL Y becomes (neutral for it; the non-NULL count tells NULL
    results apart).  NaN is the largest value: fmin returns NaN only if both are NaN, maximum propagates it;
    so a NULL is NaN for MIN and -inf for MAX."""
    if np.issubdtype(dtype, np.integer):
        return (np.minimum, _I64_MAX) if agg == "min" else (np.maximum, _I64_MIN)
    return (np.fmin, np.nan) if agg == "min" else (np.maximum, -np.inf)


def _sparse_table(v: np.ndarray, op: np.ufunc) -> np.ndarray:
    """Level j, entry i = op over v[i : i + 2**j] (entries running past the end are never queried)."""
    n = len(v)
    levels = max(1, n.bit_length())
    table = np.empty((levels, n), dtype=v.dtype)
    table[0] = v
    for j in range(1, levels):
        h = 1 << (j - 1)
        op(table[j - 1, :n - h], table[j - 1, h:], out=table[j, :n - h])
        table[j, n - h:] = table[j - 1, n - h:]
    return table


def _sparse_query(table: np.ndarray, op: np.ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """op over v[a:b] per row (b > a): two overlapping blocks of length 2**floor(log2(b - a))."""
    level = np.frexp((b - a).astype(np.float64))[1] - 1  # exact floor(log2) for lengths < 2**53
    return op(table[level, a], table[level, b - (np.int64(1) << level)])


# ------------------------------------------------------------------------------------------------------------
# GROUP BY
# ------------------------------------------------------------------------------------------------------------
def _factorise(cols: list[pa.ChunkedArray]) -> tuple[list[pa.Array], np.ndarray]:
    """(the key columns as output -- floats normalised --, a group id per row).  Codes of several columns
    are combined pairwise and re-compressed with np.unique, so they stay below the row count."""
    out, gid = [], None
    for col in cols:
        col = _normalise(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
        out.append(col)
        codes, card = _codes(col)
        gid = codes if gid is None else np.unique(gid * card + codes, return_inverse=True)[1].reshape(-1)
    return out, np.asarray(gid, dtype=np.int64)


def _normalise(col: pa.Array) -> pa.Array:
    """-0.0 -> 0.0 and one NaN bit pattern, as Spark normalises floating-point grouping keys."""
    if not pa.types.is_floating(col.type):
        return col
    null = col.is_null().to_numpy(zero_copy_only=False)
    v = pc.fill_null(col, 0).to_numpy(zero_copy_only=False) + 0.0  # -0.0 + 0.0 == +0.0
    v = np.where(np.isnan(v), np.nan, v)
    return pa.array(v, mask=null).cast(col.type)


def _codes(col: pa.Array) -> tuple[np.ndarray, int]:
    """Integer codes in [0, card) with one code for NULL."""
    if pa.types.is_null(col.type):
        return np.zeros(len(col), dtype=np.int64), 1
    enc = pc.dictionary_encode(col)
    card = len(enc.dictionary) + 1
    codes = pc.fill_null(enc.indices.cast(pa.int64()), card - 1).to_numpy(zero_copy_only=False)
    return codes.astype(np.int64, copy=False), card


# the helpers the other range-join operators share (operators/range_join/enumerate.py)
factorise, sparse_table, sparse_query, number_column, column_values = (
    _factorise, _sparse_table, _sparse_query, _number_column, _values)
