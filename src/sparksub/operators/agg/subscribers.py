"""The network and the subscribers of RANGE_AGG (000 §4), for ``engine.deliver`` and the group's unicast
mode; what the range classes share is in ``shared/range_classes.py``.

A message adds ``D_COUNT`` / ``D_SUM`` to an exact ``(count, sum)`` (``agg/core.py``'s ``exact``) of every
range holding its X; a subscriber gets one ``update`` row when its SQL value changed (null = SQL NULL).
The aggregate messages are per update (each with its update's seq), so ``deliver`` returns exactly the
unicast rows of the same batch, row for row.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from sparksub.operators.agg.core import AggState, _avg_exact, _avg_of, _dd_add, _dd_of, exact, to_float
from sparksub.operators.range_min.delivery import SubscriptionPoints
from sparksub.operators.shared.range_classes import RangeRegistry, by_seq, rows_table, update_rows

__all__ = ["AggSubscribers", "ExactSums"]


class ExactSums:
    """Exact range sums of a set of slots (``agg/core.py``'s ``exact`` scale): a normalised double-double ``(h, l)``
    per slot, ``h`` the correctly rounded SUM, and an exact Python int only where a pair cannot hold the sum (``h``
    NaN marks it), as :class:`~sparksub.operators.agg.core.AggUnicast` keeps the whole group's.  A subscriber's
    value is then read from ``h`` (SUM) or a vectorised correctly rounded division (AVG) instead of a Python
    int's true division per subscription, which took ~60% of a shard's ``deliver`` (docs/parallelism.md).

    >>> from sparksub.operators.agg.core import exact
    >>> sums = ExactSums(); sums.fit(3)
    >>> sums.add(np.array([0, 1]), 1e16); sums.add(np.array([0, 2]), 1.0)
    >>> sums.exact(0) == exact(1e16) + exact(1.0), sums.h[:3].tolist()
    (True, [1e+16, 1e+16, 1.0])
    >>> sums.add(np.array([0]), 2.0 ** -80)  # three floats' worth: slot 0 falls back to an exact int
    >>> sums.exact(0) == exact(1e16) + exact(1.0) + exact(2.0 ** -80), sorted(sums.big)
    (True, [0])
    >>> sums.values("avg", np.array([0, 2]), np.array([2, 1])).tolist()  # just above the tie 5e15 + 0.5
    [5000000000000001.0, 1.0]
    """

    def __init__(self):
        self.h = np.zeros(0)
        self.l = np.zeros(0)
        self.big: dict[int, int] = {}

    def fit(self, capacity: int) -> None:
        if self.h.size < capacity:
            h, l = np.zeros(capacity), np.zeros(capacity)
            h[: self.h.size], l[: self.l.size] = self.h, self.l
            self.h, self.l = h, l

    def set(self, slots: np.ndarray, sums) -> None:
        """Slots ``slots`` hold the exact scaled sums ``sums`` (Python ints)."""
        for slot, v in zip(slots.tolist(), sums):
            self._set_exact(slot, int(v))

    def clear(self, slots: np.ndarray) -> None:
        self.h[slots] = 0.0
        self.l[slots] = 0.0
        for slot in slots.tolist():
            self.big.pop(slot, None)

    def _set_exact(self, slot: int, v: int) -> None:
        dd = _dd_of(v)
        if dd is None:
            self.h[slot], self.l[slot] = math.nan, 0.0
            self.big[slot] = v
        else:
            self.h[slot], self.l[slot] = dd
            self.big.pop(slot, None)

    def exact(self, slot: int) -> int:
        v = self.big.get(slot)
        return exact(float(self.h[slot])) + exact(float(self.l[slot])) if v is None else v

    def add(self, slots: np.ndarray, d: float) -> None:
        """Add the float ``d`` exactly to the sums at ``slots`` (distinct): one vectorised error-free addition,
        Python ints only where the pair cannot hold the result or held none."""
        h0, l0 = self.h[slots], self.l[slots]
        h, l, bad = _dd_add(h0, l0, d)
        self.h[slots], self.l[slots] = h, l
        for i in bad.tolist():
            slot = int(slots[i])
            old = self.big.get(slot)
            if old is None:  # the pair held the old sum exactly
                old = exact(float(h0[i])) + exact(float(l0[i]))
            self._set_exact(slot, old + exact(d))

    def values(self, func: str, slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """SQL values of ``slots`` with their ``counts``: float64, NaN = NULL (an empty range)."""
        h = self.h[slots]
        if func == "sum":
            out = h.copy()
            if self.big:  # (NaN: an exact-int fallback)
                for i in np.flatnonzero(np.isnan(h)).tolist():
                    out[i] = to_float(self.big[int(slots[i])])
        else:  # the correctly rounded mean where the pair's error bound is certain, else exactly (AggUnicast's)
            c = np.maximum(counts, 1)
            l = self.l[slots]
            out, ok = _avg_of(h, l, c)
            unsure = np.flatnonzero(~ok)
            if unsure.size:
                v, ok2 = _avg_exact(h[unsure], l[unsure], c[unsure])
                out[unsure[ok2]] = v[ok2]
                for i in unsure[~ok2].tolist():
                    out[i] = to_float(self.exact(int(slots[i])), int(c[i]))
        out[counts == 0] = math.nan
        return out


class AggSubscribers(RangeRegistry):
    """Range COUNT / SUM / AVG subscribers (000 §4) behind one subscription index; see the module
    docstring.  State per slot: the exact count and ``range_agg.exact`` sum of the range."""

    kind = "RANGE_AGG"

    def __init__(self, func: str, *, group_id: str | None = None):
        self.func = str(func).lower()
        self.group_id = group_id
        self.points = SubscriptionPoints()
        self.counts = np.zeros(0, dtype=np.int64)
        self.sums = ExactSums()            # a COUNT subscriber's stay 0 (range_agg keeps no COUNT sums)
        self._empty: dict = {}             # sid -> (x1, x2) of the x1 > x2 subscriptions
        self._init_counters()

    @classmethod
    def from_group(cls, group) -> AggSubscribers:
        """Every subscription of a ``range_groups.AggGroup`` with its current state from the core."""
        subs = cls(group.func, group_id=group.group_id)
        subs.add(group.ids, group.x1, group.x2, core=group.core)
        return subs

    def _fit(self) -> None:
        cap = self.points.capacity
        if self.counts.size < cap:
            c = np.zeros(cap, dtype=np.int64)
            c[: self.counts.size] = self.counts
            self.counts = c
        self.sums.fit(cap)

    @classmethod
    def from_seed(cls, group_id, func, key_type, ids, x1, x2, k, seed) -> AggSubscribers:
        """A subscription shard's subscribers (``shared/range_shards.py``): ``seed`` their exact states
        ``(counts, scaled sums)`` as of the shard's base."""
        subs = cls(func, group_id=group_id)
        subs.add_seeded(ids, x1, x2, k, seed)
        return subs

    def add_seeded(self, ids, x1, x2, k, seed) -> None:
        """Subscriptions with their exact states as ``seed`` gives them (``group.shard_seed``); ``k`` unused (the
        range classes' common signature)."""
        self.add(ids, x1, x2, states=seed)

    def add(self, ids, x1, x2, core=None, states=None) -> None:
        """Register subscribers with their current state from ``core`` (a ``RangeAggCore``), else from ``states``
        (``(counts, scaled sums)`` per id), else empty."""
        ids, x1, x2, sel, slots = self._register(ids, x1, x2)
        self._fit()
        if core is not None and slots.size:
            c, s = core.states(x1[sel], x2[sel])
            self.counts[slots] = c
            self.sums.set(slots, s)
        elif states is not None and slots.size:
            self.counts[slots] = np.asarray(states[0], dtype=np.int64)[sel]
            self.sums.set(slots, np.asarray(states[1], dtype=object)[sel])
        else:
            self.counts[slots] = 0
            self.sums.clear(slots)

    def _forget(self, slots: np.ndarray) -> None:
        self.counts[slots] = 0
        self.sums.clear(slots)

    def reseed(self, core) -> None:
        slots = self.points.live_slots()
        if slots.size:
            c, s = core.states(self.points.x1[slots], self.points.x2[slots])
            self.counts[slots] = c
            self.sums.set(slots, s)

    def state(self, sid) -> AggState:
        if sid in self._empty:
            return AggState()
        s = self.points.slot(sid)
        return AggState(int(self.counts[s]), self.sums.exact(s))

    def result(self, sid):
        """The SQL value: COUNT an int; SUM / AVG a float, None when the range is empty."""
        return self.state(sid).value(self.func)

    def _values(self, slots: np.ndarray) -> np.ndarray:
        """SQL values of ``slots`` as float64, NaN = NULL (COUNT: the count)."""
        counts = self.counts[slots]
        return counts.astype(np.float64) if self.func == "count" else self.sums.values(self.func, slots, counts)

    def count(self, x: float) -> int:
        return self.points.index.stab_count(x)

    def receive(self, messages: Iterable, seq: int, group_id=None) -> pa.Table | None:
        """Apply one seq's messages (``range_agg.Message`` fields: x, d_count, d_sum) to the ranges holding
        their X (000 §4); one ``update`` row per subscription whose value changed, in subscription order, as
        columns (``range_classes.update_rows``; None: no row)."""
        hits = []
        for x, dc, ds in messages:
            slots = self.points.index.stab(x)      # the rectangle (-inf, X] x [X, +inf)
            self._reached(int(slots.size))
            if slots.size:
                hits.append((slots, int(dc), float(ds)))
        if not hits:
            return None
        idx = np.unique(np.concatenate([h[0] for h in hits]))
        old = self._values(idx)
        for slots, dc, ds in hits:              # slots are distinct within one query
            if dc:
                self.counts[slots] += dc
            if ds and self.func != "count":     # a COUNT subscriber's sum is not kept (range_agg)
                self.sums.add(slots, ds)
        new = self._values(idx)
        changed = ~((old == new) | (np.isnan(old) & np.isnan(new)))
        idx, new = idx[changed], new[changed]
        self.counters["notified"] += int(idx.size)
        self.counters["rows"] += int(idx.size)
        if not idx.size:
            return None
        return update_rows(self.points.ids_of(idx), new, seq, group_id or self.group_id)

    def deliver(self, messages: pa.Table) -> pa.Table:
        """The unicast rows a table of reformulated aggregate messages (op DELTA, X in ``inner_l``,
        ``d_count``, D_SUM in ``new_value``) causes."""
        parts = []
        for seq, c in by_seq(messages, ("inner_l", "d_count", "new_value", "group_id")):
            out = self.receive(zip(c["inner_l"], c["d_count"], c["new_value"]), seq, c["group_id"][0])
            if out is not None:
                parts.append(out)
        return pa.concat_tables(parts) if parts else rows_table([], self.group_id)
