"""Range joins that list rows rather than fold them: per parameter key, the top k data rows of its ranges,
or the distinct values in them -- answered from an index on the data, no nested loop.

Pure core (numpy + pyarrow, no pyspark) of two plain-SQL formulations a Catalyst rule recognises (the
Java side hands over the two tables with fixed column names; ``spark_range_join`` runs them in Spark)::

    -- top-k (002's range top-k, one per parameter row, pooled per key)
    SELECT * FROM (SELECT q.k..., t.d..., ROW_NUMBER() OVER (PARTITION BY q.k... ORDER BY t.y [DESC]) AS rn
                   FROM q JOIN t ON t.x BETWEEN q.lo AND q.hi) WHERE rn <= k
    -- DISTINCT (000 §4's range DISTINCT)
    SELECT DISTINCT q.k..., t.y FROM q JOIN t ON t.x BETWEEN q.lo AND q.hi

Both use the index of ``range_join_aggregate``: the data sorted by X once, each parameter row's joined rows
one slice ``[a, b)`` of it; then a range-minimum sparse table over a per-position number, and every slice is
*enumerated* by splitting at minima -- the same technique twice:

* top-k: the number is the row's rank in the ``ORDER BY`` order.  The smallest rank in ``[a, b)`` is the
  first row; removing it splits the slice in two, whose minima are the candidates for the second; and so on
  (k rounds, each a vectorised step over all parameter rows: O(k^2) per parameter row, independent of the
  slice's length).
* DISTINCT: the number is the position of the previous row with the same Y (-1 if none).  A row is the first
  of its value inside ``[a, b)`` iff that position is < a; the minimum of an interval decides whether any row
  of it is, and the interval splits at it (Muthukrishnan's document listing: O(1) work per value reported,
  plus one per parameter row).  Ties are broken by a fixed random permutation, so the splitting tree stays
  shallow and the vectorised rounds few.

Spark semantics reproduced: INNER join (a key that joins nothing is absent), NULL X or bound joins nothing,
the comparison types of ``range_join_aggregate``; parameter rows with the same key pool their joined rows
with multiplicity (a data row joined by two of them counts twice); ``ORDER BY`` puts NULLs first ascending
and last descending unless told, NaN above every number; ``ROW_NUMBER`` among equal Ys picks any of them
(Spark does too: only the Y values and row numbers are determined); a top-k row keeps its parameter row's own
key value, as a window does, while DISTINCT's keys and values are normalised as GROUP BY's (-0.0 -> 0.0, one
NaN, NULL a value).

>>> import pyarrow as pa
>>> params = pa.table({"k": ["a", "a", "b"], "__lo": [1, 6, 9], "__hi": [3, 7, 9]})
>>> data = pa.table({"__x": [1, 2, 3, 6, 7], "__y": [5.0, 1.0, 5.0, None, 2.0], "s": list("vwxyz")})
>>> range_join_topk(params, data, ["k"], 2, False, True, False, False, ["s"]).to_pylist()
[{'k': 'a', 's': 'y', '__rn': 1}, {'k': 'a', 's': 'w', '__rn': 2}]
>>> sorted(range_join_distinct(params, data, ["k"], False, False).to_pylist(), key=str)
[{'k': 'a', '__y': 1.0}, {'k': 'a', '__y': 2.0}, {'k': 'a', '__y': 5.0}, {'k': 'a', '__y': None}]
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.operators.range_join.aggregate import (column_values, factorise, joined_slices, number_column,
                                                     sparse_query, sparse_table)

__all__ = ["range_join_topk", "range_join_distinct"]


def range_join_topk(params: pa.Table, data: pa.Table, keys: list[str], k: int, descending: bool,
                    nulls_first: bool, lo_strict: bool, hi_strict: bool, payload: list[str]) -> pa.Table:
    """Per key, its first ``k`` joined data rows in ``ORDER BY __y`` order (``descending``, ``nulls_first``)
    with their ``ROW_NUMBER`` 1..k: the key columns, the ``payload`` columns of ``data``, ``__rn`` (int32)."""
    keys, payload = list(keys), list(payload)
    _need_keys(keys)
    if k < 1:
        raise ValueError(f"k must be >= 1, not {k}")
    fields = ([params.schema.field(c) for c in keys] + [data.schema.field(c) for c in payload]
              + [pa.field("__rn", pa.int32())])
    order, rows, a, b = joined_slices(params, data, lo_strict, hi_strict)
    if len(rows) == 0:
        return pa.schema(fields).empty_table()
    m = len(order)
    yv, y_null = column_values(number_column(data, "__y"))
    yv, y_null = yv[order], y_null[order]
    valued = np.flatnonzero(~y_null)
    by_y = valued[np.argsort(yv[valued], kind="stable")]  # NaN last: the largest, as in Spark
    if descending:
        by_y = by_y[::-1]
    nulls = np.flatnonzero(y_null)
    seq = np.concatenate([nulls, by_y] if nulls_first else [by_y, nulls])  # rank -> index position
    rank = np.empty(m, dtype=np.int64)
    rank[seq] = np.arange(m, dtype=np.int64)
    table = sparse_table(rank, np.minimum)

    # Candidate intervals per parameter row; column r + 1 is first used in round r.  m means "empty".
    q = len(rows)
    lo = np.zeros((q, k + 1), dtype=np.int64)
    hi = np.zeros((q, k + 1), dtype=np.int64)
    best = np.full((q, k + 1), m, dtype=np.int64)
    lo[:, 0], hi[:, 0], best[:, 0] = a, b, sparse_query(table, np.minimum, a, b)
    taken = np.full((q, k), m, dtype=np.int64)
    every = np.arange(q)
    for r in range(k):
        pick = np.argmin(best, axis=1)
        got = best[every, pick]
        taken[:, r] = got
        live = np.flatnonzero(got < m)
        if not live.size:
            break
        pick, pos = pick[live], seq[got[live]]
        l0, h0 = lo[live, pick], hi[live, pick]
        lo[live, pick], hi[live, pick], best[live, pick] = l0, pos, _minimum(table, l0, pos, m)
        lo[live, r + 1], hi[live, r + 1], best[live, r + 1] = pos + 1, h0, _minimum(table, pos + 1, h0, m)

    # Pool per key (with multiplicity) and keep the first k of each key by rank.
    row_of, rank_of = np.nonzero(taken < m)
    rank_of = taken[row_of, rank_of]
    _, gid = factorise([params.column(c).take(pa.array(rows)) for c in keys])
    g = gid[row_of]
    by = np.lexsort((rank_of, g))
    g, row_of, rank_of = g[by], row_of[by], rank_of[by]
    start = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    within = np.arange(len(g)) - np.repeat(start, np.diff(np.r_[start, len(g)]))
    keep = within < k
    param_rows = pa.array(rows[row_of[keep]])
    data_rows = pa.array(order[seq[rank_of[keep]]])
    columns = ([params.column(c).take(param_rows) for c in keys] + [data.column(c).take(data_rows) for c in payload]
               + [pa.array(within[keep] + 1, pa.int32())])
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def range_join_distinct(params: pa.Table, data: pa.Table, keys: list[str], lo_strict: bool,
                        hi_strict: bool) -> pa.Table:
    """Per key, the distinct ``__y`` values of its joined data rows: the key columns and ``__y`` (any
    type), normalised as GROUP BY outputs them."""
    keys = list(keys)
    _need_keys(keys)
    fields = [params.schema.field(c) for c in keys] + [data.schema.field("__y")]
    order, rows, a, b = joined_slices(params, data, lo_strict, hi_strict)
    if len(rows) == 0:
        return pa.schema(fields).empty_table()
    m = len(order)
    (y_out,), code = factorise([data.column("__y").take(pa.array(order))])
    # previous position with the same value (-1: none), then a random tie-break so minima split evenly
    by_code = np.lexsort((np.arange(m), code))
    prev = np.full(m, -1, dtype=np.int64)
    same = code[by_code[1:]] == code[by_code[:-1]]
    prev[by_code[1:][same]] = by_code[:-1][same]
    perm = np.random.default_rng(0).permutation(m).astype(np.int64)
    inverse = np.empty(m, dtype=np.int64)
    inverse[perm] = np.arange(m, dtype=np.int64)
    table = sparse_table((prev + 1) * m + perm, np.minimum)

    found_row, found_pos = [], []
    item, start, l, h = np.arange(len(rows)), a, a, b  # work items: (parameter row, its a, interval)
    while item.size:
        v = sparse_query(table, np.minimum, l, h)
        pos, before = inverse[v % m], v // m - 1
        hit = before < start  # the interval holds a first occurrence, its minimum one among them
        item, start, l, h, pos = item[hit], start[hit], l[hit], h[hit], pos[hit]
        found_row.append(item)
        found_pos.append(pos)
        left, right = pos > l, h > pos + 1
        item = np.concatenate([item[left], item[right]])
        start = np.concatenate([start[left], start[right]])
        l, h = np.concatenate([l[left], pos[right] + 1]), np.concatenate([pos[left], h[right]])
    row_of, pos_of = np.concatenate(found_row), np.concatenate(found_pos)

    key_cols, gid = factorise([params.column(c).take(pa.array(rows)) for c in keys])
    pair = np.unique(np.stack([gid[row_of], code[pos_of]], axis=1), axis=0, return_index=True)[1]
    columns = [c.take(pa.array(row_of[pair])) for c in key_cols] + [y_out.take(pa.array(pos_of[pair]))]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _need_keys(keys: list[str]) -> None:
    if not keys:  # the Catalyst rule only fires with PARTITION BY / GROUP BY columns of the parameter side
        raise ValueError("a range join per key needs at least one key column")


def _minimum(table: np.ndarray, l: np.ndarray, h: np.ndarray, empty: int) -> np.ndarray:
    """The smallest rank in [l, h) per row, ``empty`` where the interval is."""
    out = np.full(len(l), empty, dtype=np.int64)
    some = h > l
    out[some] = sparse_query(table, np.minimum, l[some], h[some])
    return out
