"""A dynamic 2-d point index answering orthogonal rectangle queries (numpy only).

Range-min subscriptions ``[x1, x2]`` are points in the (x1, x2) plane and a reformulated
message is a rectangle in that plane (dissertation C.5, C.9), so the content-based network's
matching step is a rectangle query over the subscription points.  The paper uses an
external-memory kd-tree (O(sqrt(M/B) + J/B) per query); this is the in-memory, vectorised
analogue with the same sqrt shape:

* **Static part**, rebuilt in bulk.  The points are sorted by x1 and cut into buckets of
  ``bucket_size`` consecutive points (default ``max(256, isqrt(M))``); inside a bucket they are
  sorted by x2.  Each point carries the global int64 key ``bucket * (M + 1) + rank(x2)``, where
  ``rank(x2)`` is the point's position in x2 order, so the key array is sorted and
  one ``np.searchsorted`` locates the x2-slice of *every* covered bucket at once.  A query
  binary-searches its x1 range to a run of buckets, maps its x2 bounds into rank space once,
  finds each bucket's slice with that one vectorised search, gathers the slices, and masks
  only the (at most two) partially covered end buckets by x1.  Cost:
  O(#buckets in range * log M + J) vectorised work for J reported points.
* **Dynamic delta**: recent inserts are appended to plain arrays and scanned with a mask;
  deletes set a tombstone (static part) or clear a live flag (delta).  When the delta holds
  more than ``merge_threshold`` entries (default ``max(4096, M // 16)``), or the static part
  holds more than ``max(merge_threshold, M // 4)`` tombstones, everything live is rebuilt into
  a new static part.  Rebuilds are amortised: never one per insert.

Slots are non-negative int64 ids (dense is best: the slot -> location map is an array as long
as the largest slot).  Coordinates are float64; ``-inf``/``+inf`` are ordinary values and
bounds are compared exactly as floats (a closed bound at ``-inf`` includes ``x1 = -inf``, an
open one excludes it).  NaN coordinates are rejected.

>>> idx = PointIndex2D()
>>> idx.add_many(np.array([0, 1, 2]), np.array([-np.inf, 1.0, 2.0]), np.array([5.0, 3.0, np.inf]))
>>> sorted(idx.query(-np.inf, True, 1.0, True, 3.0, True, np.inf, False).tolist())
[0, 1]
>>> sorted(idx.stab(2.5).tolist())
[0, 1, 2]
>>> idx.remove_many(np.array([1])); len(idx)
2
"""
from __future__ import annotations

from math import inf as _INF
from math import isnan, isqrt
from math import nan as _NAN
from math import nextafter as _nextafter

import numpy as np

from sparksub.operators.shared.arrays import concat_ranges

__all__ = ["PointIndex2D"]

_EMPTY_I = np.empty(0, dtype=np.int64)
_EMPTY_F = np.empty(0, dtype=np.float64)

_NINF = -_INF

# location codes in the slot map
_ABSENT, _STATIC, _DELTA = 0, 1, 2

# query_many tests each rectangle on its bounding box's points up to this many rectangle-point pairs
_MANY_CELLS = 1 << 15


def _lower(a: np.ndarray, v: float, closed: bool) -> np.ndarray:
    return a >= v if closed else a > v


def _upper(a: np.ndarray, v: float, closed: bool) -> np.ndarray:
    return a <= v if closed else a < v


class PointIndex2D:
    """Dynamic index of 2-d points ``(x1, x2)`` keyed by int slot, for rectangle queries.

    Parameters
    ----------
    bucket_size:
        Points per static bucket; ``None`` = ``max(256, isqrt(M))`` at each rebuild.
    merge_threshold:
        Delta size that triggers a rebuild; ``None`` = ``max(4096, M // 16)`` (M = static size).
        Tests pass a small number to force frequent merges.
    """

    def __init__(self, bucket_size: int | None = None, merge_threshold: int | None = None):
        if bucket_size is not None and bucket_size < 1:
            raise ValueError("bucket_size must be >= 1")
        if merge_threshold is not None and merge_threshold < 1:
            raise ValueError("merge_threshold must be >= 1")
        self._bucket_size_arg = bucket_size
        self._merge_threshold_arg = merge_threshold
        # slot -> (where, pos)
        self._where = np.zeros(0, dtype=np.int8)
        self._pos = np.zeros(0, dtype=np.int64)
        # static part (layout order: by bucket, then x2)
        self._M = 0
        self._B = 1
        self._K = 1
        self._x1_sorted = _EMPTY_F      # x1 in x1 order (for binary search)
        self._x2_sorted = _EMPTY_F      # x2 in x2 order (rank space)
        self._s_key = _EMPTY_I
        self._s_x1 = _EMPTY_F
        self._s_x2 = _EMPTY_F
        self._s_slot = _EMPTY_I
        self._s_dead = np.zeros(0, dtype=bool)
        self._s_ndead = 0
        # delta part (append-only between merges)
        self._d_x1 = np.empty(16, dtype=np.float64)
        self._d_x2 = np.empty(16, dtype=np.float64)
        self._d_slot = np.empty(16, dtype=np.int64)
        self._d_alive = np.zeros(16, dtype=bool)
        self._d_n = 0
        self._d_live = 0
        # statistics
        self._n_queries = 0
        self._n_reported = 0
        self._n_merges = 0

    # ------------------------------------------------------------------ size / stats
    def __len__(self) -> int:
        return (self._M - self._s_ndead) + self._d_live

    def __contains__(self, slot) -> bool:
        s = int(slot)
        return 0 <= s < len(self._where) and self._where[s] != _ABSENT

    def stats(self) -> dict:
        """Counters: points, static/delta sizes, buckets, tombstones, merges, queries, points reported."""
        nb = (self._M + self._B - 1) // self._B if self._M else 0
        return {
            "points": len(self),
            "static_points": self._M,
            "static_tombstones": self._s_ndead,
            "buckets": nb,
            "bucket_size": self._B if self._M else 0,
            "delta_size": self._d_n,
            "delta_live": self._d_live,
            "merge_threshold": self._threshold(),
            "merges": self._n_merges,
            "queries": self._n_queries,
            "points_reported": self._n_reported,
        }

    def _threshold(self) -> int:
        if self._merge_threshold_arg is not None:
            return self._merge_threshold_arg
        return max(4096, self._M // 16)

    # ------------------------------------------------------------------ updates
    def _grow_slot_map(self, max_slot: int) -> None:
        n = len(self._where)
        if max_slot < n:
            return
        new_n = max(max_slot + 1, 2 * n, 64)
        w = np.zeros(new_n, dtype=np.int8)
        w[:n] = self._where
        p = np.zeros(new_n, dtype=np.int64)
        p[:n] = self._pos
        self._where, self._pos = w, p

    @staticmethod
    def _check_slots(slots) -> np.ndarray:
        slots = np.asarray(slots)
        if slots.ndim != 1:
            slots = slots.reshape(-1)
        if slots.size and not np.issubdtype(slots.dtype, np.integer):
            raise TypeError(f"slots must be integers, got dtype {slots.dtype}")
        slots = slots.astype(np.int64, copy=False)
        if slots.size and int(slots.min()) < 0:
            raise ValueError(f"slots must be non-negative, got {int(slots.min())}")
        if slots.size > 1:
            mx = int(slots.max())
            if mx <= 8 * slots.size + (1 << 16):             # dense: O(max slot) counting
                c = np.bincount(slots, minlength=0)
                if c.max() > 1:
                    raise ValueError(f"duplicate slot {int(np.argmax(c > 1))} in batch")
            else:
                s = np.sort(slots)
                d = np.flatnonzero(s[1:] == s[:-1])
                if d.size:
                    raise ValueError(f"duplicate slot {int(s[d[0]])} in batch")
        return slots

    def add_many(self, slots, x1, x2) -> None:
        """Insert points; every slot must be absent (ValueError otherwise, nothing inserted)."""
        slots = self._check_slots(slots)
        x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
        x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
        n = slots.size
        if x1.size != n or x2.size != n:
            raise ValueError(f"length mismatch: {n} slots, {x1.size} x1, {x2.size} x2")
        if n == 0:
            return
        if np.isnan(x1).any() or np.isnan(x2).any():
            raise ValueError("NaN coordinate")
        mx = int(slots.max())
        if mx < len(self._where):
            present = self._where[slots] != _ABSENT
            if present.any():
                raise ValueError(f"slot {int(slots[np.argmax(present)])} already present")
        self._grow_slot_map(mx)
        if self._d_n + n > self._threshold():        # bulk: straight into a rebuilt static part
            self._rebuild((slots, x1, x2))
            return
        # append to the delta
        need = self._d_n + n
        if need > len(self._d_x1):
            cap = max(need, 2 * len(self._d_x1))
            for name, dt in (("_d_x1", np.float64), ("_d_x2", np.float64),
                             ("_d_slot", np.int64), ("_d_alive", bool)):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=dt)
                new[: self._d_n] = old[: self._d_n]
                setattr(self, name, new)
        a, b = self._d_n, need
        self._d_x1[a:b] = x1
        self._d_x2[a:b] = x2
        self._d_slot[a:b] = slots
        self._d_alive[a:b] = True
        self._where[slots] = _DELTA
        self._pos[slots] = np.arange(a, b, dtype=np.int64)
        self._d_n = need
        self._d_live += n
        self._maybe_merge()

    def remove_many(self, slots) -> None:
        """Delete points by slot; every slot must be present (KeyError otherwise, nothing removed)."""
        slots = self._check_slots(slots)
        if slots.size == 0:
            return
        mx = int(slots.max())
        if mx >= len(self._where):
            bad = slots[slots >= len(self._where)][0]
            raise KeyError(f"slot {int(bad)} not present")
        w = self._where[slots]
        absent = w == _ABSENT
        if absent.any():
            raise KeyError(f"slot {int(slots[np.argmax(absent)])} not present")
        pos = self._pos[slots]
        st = w == _STATIC
        sp = pos[st]
        self._s_dead[sp] = True
        self._s_ndead += int(sp.size)
        dp = pos[~st]
        self._d_alive[dp] = False
        self._d_live -= int(dp.size)
        self._where[slots] = _ABSENT
        self._maybe_merge()

    def _maybe_merge(self) -> None:
        thr = self._threshold()
        if self._d_n > thr or self._s_ndead > max(thr, self._M // 4):
            self.rebuild()

    def rebuild(self) -> None:
        """Merge the delta and drop tombstones: rebuild the static part from every live point."""
        self._rebuild(None)

    def _rebuild(self, extra) -> None:
        dn = self._d_n
        dal = self._d_alive[:dn]
        parts = [[], [], []]
        if self._M:
            keep = None if self._s_ndead == 0 else ~self._s_dead
            for p, arr in zip(parts, (self._s_slot, self._s_x1, self._s_x2)):
                p.append(arr if keep is None else arr[keep])
        if self._d_live:
            for p, arr in zip(parts, (self._d_slot, self._d_x1, self._d_x2)):
                p.append(arr[:dn][dal])
        if extra is not None:
            for p, arr in zip(parts, extra):
                p.append(arr)
        sl, x1, x2 = (np.concatenate(p) if len(p) > 1 else (p[0] if p else a)
                      for p, a in zip(parts, (_EMPTY_I, _EMPTY_F, _EMPTY_F)))
        self._build(sl, x1, x2)
        self._d_n = 0
        self._d_live = 0
        self._d_alive[:] = False
        if len(self._d_x1) > 4 * max(16, self._threshold()):   # release a huge delta buffer
            cap = max(16, self._threshold())
            self._d_x1 = np.empty(cap, dtype=np.float64)
            self._d_x2 = np.empty(cap, dtype=np.float64)
            self._d_slot = np.empty(cap, dtype=np.int64)
            self._d_alive = np.zeros(cap, dtype=bool)
        self._n_merges += 1

    def _build(self, slots: np.ndarray, x1: np.ndarray, x2: np.ndarray) -> None:
        M = int(slots.size)
        self._M = M
        self._s_ndead = 0
        if M == 0:
            self._B, self._K = 1, 1
            self._x1_sorted = self._x2_sorted = self._s_x1 = self._s_x2 = _EMPTY_F
            self._s_key = self._s_slot = _EMPTY_I
            self._s_dead = np.zeros(0, dtype=bool)
            return
        B = self._bucket_size_arg or max(256, isqrt(M))
        K = M + 1
        nb = (M + B - 1) // B
        # bucket of each point = its position in x1 order // B (ties in x1 may straddle buckets)
        o1 = np.argsort(x1)
        bucket = np.empty(M, dtype=np.int16 if nb < 2 ** 15 else np.int64)
        bucket[o1] = np.arange(M, dtype=np.int64) // B
        # rank(x2) = position in x2 order.  Tied x2 values get distinct but adjacent ranks
        # [first, last]; a bound mapped with searchsorted 'left'/'right' on the sorted x2 lands at
        # first / last + 1, so open and closed bounds split ties exactly as float comparisons do.
        o2 = np.argsort(x2)
        # layout = x2 order, stably regrouped by bucket (a radix sort for int16 bucket ids)
        lay = o2[np.argsort(bucket[o2], kind="stable")]
        rank = np.empty(M, dtype=np.int64)
        rank[o2] = np.arange(M, dtype=np.int64)
        self._B, self._K = B, K
        self._x1_sorted = x1[o1]
        self._x2_sorted = x2[o2]
        self._s_key = bucket[lay].astype(np.int64) * K + rank[lay]
        self._s_x1 = x1[lay]
        self._s_x2 = x2[lay]
        self._s_slot = slots[lay]
        self._s_dead = np.zeros(M, dtype=bool)
        self._where[self._s_slot] = _STATIC
        self._pos[self._s_slot] = np.arange(M, dtype=np.int64)

    # ------------------------------------------------------------------ queries
    def _static_candidates(self, x1_lo, x1_lo_closed, x1_hi, x1_hi_closed,
                           x2_lo, x2_lo_closed, x2_hi, x2_hi_closed) -> np.ndarray:
        """Positions (layout order) of static points in the rectangle, tombstones included."""
        M = self._M
        if M == 0:
            return _EMPTY_I
        xs = self._x1_sorted
        p_lo = int(np.searchsorted(xs, x1_lo, "left" if x1_lo_closed else "right"))
        p_hi = int(np.searchsorted(xs, x1_hi, "right" if x1_hi_closed else "left"))
        if p_lo >= p_hi:
            return _EMPTY_I
        s2 = self._x2_sorted
        r_lo = int(np.searchsorted(s2, x2_lo, "left" if x2_lo_closed else "right"))
        r_hi = int(np.searchsorted(s2, x2_hi, "right" if x2_hi_closed else "left"))
        if r_lo >= r_hi:
            return _EMPTY_I
        B, K = self._B, self._K
        ba, bb = p_lo // B, (p_hi - 1) // B
        base = np.arange(ba, bb + 1, dtype=np.int64) * K
        key = self._s_key
        starts = np.searchsorted(key, base + r_lo, "left")
        ends = np.searchsorted(key, base + r_hi, "left")
        lengths = ends - starts
        idx = concat_ranges(starts, lengths)
        if idx.size == 0:
            return idx
        first_partial = p_lo > ba * B
        last_partial = p_hi < min((bb + 1) * B, M)
        if first_partial or last_partial:
            keep = np.ones(idx.size, dtype=bool)
            segs = []
            if first_partial:
                segs.append((0, int(lengths[0])))
            if last_partial and (bb != ba or not first_partial):
                segs.append((idx.size - int(lengths[-1]), idx.size))
            for a, b in segs:
                v = self._s_x1[idx[a:b]]
                keep[a:b] = _lower(v, x1_lo, x1_lo_closed) & _upper(v, x1_hi, x1_hi_closed)
            idx = idx[keep]
        return idx

    def _delta_mask(self, x1_lo, x1_lo_closed, x1_hi, x1_hi_closed,
                    x2_lo, x2_lo_closed, x2_hi, x2_hi_closed) -> np.ndarray:
        n = self._d_n
        a = self._d_x1[:n]
        b = self._d_x2[:n]
        m = self._d_alive[:n].copy()
        m &= _lower(a, x1_lo, x1_lo_closed)
        m &= _upper(a, x1_hi, x1_hi_closed)
        m &= _lower(b, x2_lo, x2_lo_closed)
        m &= _upper(b, x2_hi, x2_hi_closed)
        return m

    def query(self, x1_lo: float, x1_lo_closed: bool, x1_hi: float, x1_hi_closed: bool,
              x2_lo: float, x2_lo_closed: bool, x2_hi: float, x2_hi_closed: bool) -> np.ndarray:
        """Slots of the points with x1 in the x1 interval and x2 in the x2 interval (int64, unordered).

        Each bound is a float (±inf allowed) with a flag: closed (``<=``/``>=``) or open (``<``/``>``).
        A NaN bound matches nothing (IEEE comparisons).
        """
        args = (float(x1_lo), bool(x1_lo_closed), float(x1_hi), bool(x1_hi_closed),
                float(x2_lo), bool(x2_lo_closed), float(x2_hi), bool(x2_hi_closed))
        self._n_queries += 1
        if args[0] != args[0] or args[2] != args[2] or args[4] != args[4] or args[6] != args[6]:
            return _EMPTY_I.copy()
        idx = self._static_candidates(*args)
        if self._s_ndead and idx.size:
            idx = idx[~self._s_dead[idx]]
        out = self._s_slot[idx]
        if self._d_n:
            dm = self._delta_mask(*args)
            if dm.any():
                out = np.concatenate([out, self._d_slot[: self._d_n][dm]])
        self._n_reported += int(out.size)
        return out

    def query_many(self, rects) -> tuple[np.ndarray, list[int]]:
        """:meth:`query` for several rectangles, each given as its 8 arguments: ``(slots, offsets)``,
        rectangle i's slots being ``slots[offsets[i]:offsets[i + 1]]`` (each part unordered).

        One query of the rectangles' bounding box finds the candidates, and each rectangle is then
        tested on them in one vectorised comparison: the messages of one update lie close together,
        so matching them costs one index query rather than one per message.  When the box holds too
        many points for that (more than ``_MANY_CELLS`` rectangle-point pairs), each half of the
        rectangles (in the given order: neighbours) is matched on its own box.
        """
        rects = list(rects)
        m = len(rects)
        self._n_queries += m
        # the box with every bound closed holds every rectangle; a NaN bound matches nothing, so it has
        # no say in the box (min / max pass a NaN on or not depending on its place)
        sides = [[float(r[i]) for r in rects] for i in (0, 2, 4, 6)]
        if any(map(isnan, map(sum, sides))):  # a NaN somewhere (or inf - inf: then nothing is dropped)
            sides = [[v for v in side if not isnan(v)] for side in sides]
        box = (min(sides[0], default=_INF), max(sides[1], default=_NINF), min(sides[2], default=_INF),
               max(sides[3], default=_NINF))
        if not (box[0] <= box[1] and box[2] <= box[3]):
            return _EMPTY_I.copy(), [0] * (m + 1)
        args = (box[0], True, box[1], True, box[2], True, box[3], True)
        idx = self._static_candidates(*args)
        if self._s_ndead and idx.size:
            idx = idx[~self._s_dead[idx]]
        c_slot, c_x1, c_x2 = self._s_slot[idx], self._s_x1[idx], self._s_x2[idx]
        if self._d_n:
            dm = self._delta_mask(*args)
            if dm.any():
                n = self._d_n
                c_slot = np.concatenate([c_slot, self._d_slot[:n][dm]])
                c_x1 = np.concatenate([c_x1, self._d_x1[:n][dm]])
                c_x2 = np.concatenate([c_x2, self._d_x2[:n][dm]])
        if not c_slot.size:
            return _EMPTY_I.copy(), [0] * (m + 1)
        if m > 1 and m * c_slot.size > _MANY_CELLS:
            h = m // 2
            self._n_queries -= m
            first, off1 = self.query_many(rects[:h])
            second, off2 = self.query_many(rects[h:])
            return np.concatenate([first, second]), off1 + [off1[-1] + o for o in off2[1:]]
        # every bound closed: an open one moves to the next float inward (exact), an open one at the
        # infinity it opens towards admits nothing, and so does a NaN (the empty box: lo = inf, hi = -inf)
        closed = []
        for a, ac, b, bc, c, cc, d, dc in rects:
            a, b, c, d = float(a), float(b), float(c), float(d)
            if not ac:
                a = _nextafter(a, _INF) if a != _INF else _NAN
            if not bc:
                b = _nextafter(b, _NINF) if b != _NINF else _NAN
            if not cc:
                c = _nextafter(c, _INF) if c != _INF else _NAN
            if not dc:
                d = _nextafter(d, _NINF) if d != _NINF else _NAN
            if isnan(a) or isnan(b) or isnan(c) or isnan(d):
                a = c = _INF
                b = d = _NINF
            closed.append((a, b, c, d))
        bounds = np.array(closed).T[:, :, None]
        inside = (c_x1 >= bounds[0]) & (c_x1 <= bounds[1]) & (c_x2 >= bounds[2]) & (c_x2 <= bounds[3])
        rect, pos = np.nonzero(inside)
        out = c_slot[pos]
        self._n_reported += int(out.size)
        return out, [0, *np.cumsum(np.bincount(rect, minlength=m)).tolist()]

    def count(self, x1_lo: float, x1_lo_closed: bool, x1_hi: float, x1_hi_closed: bool,
              x2_lo: float, x2_lo_closed: bool, x2_hi: float, x2_hi_closed: bool) -> int:
        """Number of points :meth:`query` would report (without materialising slots)."""
        args = (float(x1_lo), bool(x1_lo_closed), float(x1_hi), bool(x1_hi_closed),
                float(x2_lo), bool(x2_lo_closed), float(x2_hi), bool(x2_hi_closed))
        self._n_queries += 1
        if args[0] != args[0] or args[2] != args[2] or args[4] != args[4] or args[6] != args[6]:
            return 0
        idx = self._static_candidates(*args)
        c = int(idx.size) if not self._s_ndead else int(idx.size - np.count_nonzero(self._s_dead[idx]))
        if self._d_n:
            c += int(np.count_nonzero(self._delta_mask(*args)))
        return c

    def stab(self, x: float) -> np.ndarray:
        """Slots of the points with ``x1 <= x <= x2`` (the ranges containing x)."""
        return self.query(-np.inf, True, x, True, x, True, np.inf, True)

    def stab_count(self, x: float) -> int:
        """Number of points with ``x1 <= x <= x2``."""
        return self.count(-np.inf, True, x, True, x, True, np.inf, True)

    def points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All live points as ``(slots, x1, x2)`` (unordered); for debugging and tests."""
        keep = ~self._s_dead
        dn = self._d_n
        dal = self._d_alive[:dn]
        return (np.concatenate([self._s_slot[keep], self._d_slot[:dn][dal]]),
                np.concatenate([self._s_x1[keep], self._d_x1[:dn][dal]]),
                np.concatenate([self._s_x2[keep], self._d_x2[:dn][dal]]))
