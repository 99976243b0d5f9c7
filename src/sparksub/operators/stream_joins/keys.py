"""Join keys: normalisation, the equality / band match on sorted keys, and the audit log of keys seen.

Join values are compared as SELECT_JOIN / BAND_JOIN compare them (``joins/group.py``
``canonical_join_value``): float64 when numeric, else text; NULL joins nothing; a NaN join value is a bad
row (:class:`~sparksub.errors.BadUpdate`), as in ``joins/select.py``.  The band predicate is BAND_JOIN's
(``joins/band.py``, 003 §4.3): ``lo <= right − left <= hi`` evaluated in float64, with the search bounds
fixed up against the exact predicate (``right − left`` is monotone in ``right``, so each match set is one
run of the sorted keys).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import BadUpdate
from sparksub.operators.shared.arrays import concat_ranges

__all__ = ["KeyLog", "arrow_keys", "join_bounds", "join_pairs", "normalize"]


def normalize(keys, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid mask) of a key column given as numpy / list: numbers -> float64, text -> str; None ->
    NULL; NaN -> :class:`BadUpdate`."""
    k = np.asarray(keys)
    if k.dtype.kind in "iub":
        return k.astype(np.float64), np.ones(k.size, dtype=bool)
    if k.dtype.kind == "f":
        if np.isnan(k).any():
            raise BadUpdate(f"{what}: NaN join value")
        return k.astype(np.float64, copy=False), np.ones(k.size, dtype=bool)
    if k.dtype.kind == "U":
        return k, np.ones(k.size, dtype=bool)
    items = k.tolist()
    valid = np.array([x is not None for x in items], dtype=bool)
    vals = [x for x in items if x is not None]
    if vals and all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in vals):
        out = np.zeros(k.size)
        out[valid] = np.asarray(vals, dtype=np.float64)
        if np.isnan(out[valid]).any():
            raise BadUpdate(f"{what}: NaN join value")
        return out, valid
    if any(not isinstance(x, str) for x in vals):
        raise BadUpdate(f"{what}: join values must be numbers or text, got {type(next(x for x in vals if not isinstance(x, str))).__name__}")
    out = np.array([x if x is not None else "" for x in items], dtype=str) if items else np.zeros(0, dtype=str)
    return out, valid


def arrow_keys(col: pa.ChunkedArray | pa.Array, what: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`normalize` for an Arrow column (nulls -> NULL)."""
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    t = col.type
    if pa.types.is_null(t):                           # a column of NULLs only (e.g. from a dict of Nones)
        return np.zeros(len(col)), valid
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t):
        vals = pc.fill_null(pc.cast(col, pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        if np.isnan(vals[valid]).any():
            raise BadUpdate(f"{what}: NaN join value")
        return vals.astype(np.float64, copy=False), valid
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        vals = pc.fill_null(col, "").to_numpy(zero_copy_only=False).astype(str)
        return vals, valid
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        vals = pc.fill_null(pc.cast(pc.cast(col, pa.int64()), pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        return vals, valid
    raise BadUpdate(f"{what}: unsupported join column type {t}")


def join_bounds(sorted_keys: np.ndarray, a: np.ndarray, band: tuple[float, float] | None, side: int):
    """For each key a_i of side ``side`` (0 = left, 1 = right), the run [start_i, end_i) of ``sorted_keys``
    (the partner's keys, sorted) that it joins: equal keys, or lo <= right − left <= hi."""
    if band is None:
        return np.searchsorted(sorted_keys, a, "left"), np.searchsorted(sorted_keys, a, "right")
    lo, hi = band
    if side == 0:                                   # partner = right: r − a in [lo, hi]
        lo_t, hi_t = a + lo, a + hi
        ok_lo = lambda r, i: r - a[i] >= lo
        ok_hi = lambda r, i: r - a[i] <= hi
    else:                                           # partner = left: a − l in [lo, hi], l in [a − hi, a − lo]
        lo_t, hi_t = a - hi, a - lo
        ok_lo = lambda l, i: a[i] - l <= hi
        ok_hi = lambda l, i: a[i] - l >= lo
    slack = 4.0 * np.spacing(np.maximum(np.abs(a), max((abs(x) for x in band if np.isfinite(x)), default=0.0)))
    start = np.searchsorted(sorted_keys, lo_t - slack, "left")
    end = np.searchsorted(sorted_keys, hi_t + slack, "right")
    idx = np.arange(a.size)
    while True:                                     # first position satisfying the lower predicate
        m = (start < end)
        m[m] = ~ok_lo(sorted_keys[start[m]], idx[m])
        if not m.any():
            break
        start[m] += 1
    while True:                                     # last position satisfying the upper predicate
        m = (end > start)
        m[m] = ~ok_hi(sorted_keys[end[m] - 1], idx[m])
        if not m.any():
            break
        end[m] -= 1
    return start, np.maximum(end, start)


def join_pairs(a: np.ndarray, b: np.ndarray, band, side_a: int = 0, b_order: np.ndarray | None = None):
    """All (i, j) with a_i (side ``side_a``) joining b_j (the other side), grouped by i."""
    if not a.size or not b.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if a.size * b.size <= 4096:                       # small: one comparison matrix beats sorting
        if band is None:
            hit = a[:, None] == b[None, :]
        else:
            d = (b[None, :] - a[:, None]) if side_a == 0 else (a[:, None] - b[None, :])
            hit = (d >= band[0]) & (d <= band[1])
        return np.nonzero(hit)
    order = np.argsort(b, kind="stable") if b_order is None else b_order
    start, end = join_bounds(b[order], a, band, side_a)
    cnt = end - start
    return np.repeat(np.arange(a.size), cnt), order[concat_ranges(start, cnt)]


class KeyLog:
    """Every key one side has produced (the MAX-subset audit: true results = what an unbounded state would
    have joined).  Without a window: sorted chunks merged by size (an LSM: O(log n) chunks, a count is one
    ``join_bounds`` per chunk, no pairs built).  With a window of w steps: the keys of the last w steps in
    arrival order (older ones dropped), compared at once when few, else sorted per count.  Memory: one key
    per row seen (within the window)."""

    def __init__(self, window: int | None = None):
        self.window = window
        self.chunks: list[np.ndarray] = []
        self.keys = np.zeros(0)
        self.times = np.zeros(0, dtype=np.int64)
        self.rows = 0

    def count(self, a: np.ndarray, band, side_a: int, t: int) -> np.ndarray:
        """For each key a_i of side ``side_a`` arriving at step t, how many logged partner keys it joins."""
        if not a.size:
            return np.zeros(0, dtype=np.int64)
        if self.window is None:
            out = np.zeros(a.size, dtype=np.int64)
            for k in self.chunks:
                s, e = join_bounds(k, a, band, side_a)
                out += e - s
            return out
        cut = int(np.searchsorted(self.times, t - self.window, "left"))
        if cut:
            self.keys, self.times = self.keys[cut:], self.times[cut:]
            self.rows = int(self.keys.size)
        if not self.keys.size:
            return np.zeros(a.size, dtype=np.int64)
        if a.size * self.keys.size <= 65536:
            k = self.keys[None, :]
            if band is None:
                hit = k == a[:, None]
            else:
                d = (k - a[:, None]) if side_a == 0 else (a[:, None] - k)
                hit = (d >= band[0]) & (d <= band[1])
            return hit.sum(axis=1).astype(np.int64)
        s, e = join_bounds(np.sort(self.keys, kind="stable"), a, band, side_a)
        return (e - s).astype(np.int64)

    def add(self, keys: np.ndarray, t: int) -> None:
        if not keys.size:
            return
        self.rows += keys.size
        if self.window is not None:
            self.keys = np.concatenate([self.keys.astype(keys.dtype) if not self.keys.size else self.keys, keys])
            self.times = np.concatenate([self.times, np.full(keys.size, t, dtype=np.int64)])
            return
        self.chunks.append(np.sort(keys, kind="stable"))
        while len(self.chunks) > 1 and self.chunks[-2].size <= 2 * self.chunks[-1].size:
            top = self.chunks.pop()
            self.chunks[-1] = np.sort(np.concatenate([self.chunks[-1], top]), kind="stable")
