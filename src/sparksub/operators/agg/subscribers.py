"""The network and the subscribers of RANGE_AGG (000 §4), for ``engine.deliver`` and the group's unicast
mode; what the range classes share is in ``shared/range_classes.py``.

A message adds ``D_COUNT`` / ``D_SUM`` to an exact ``(count, sum)`` (``agg/core.py``'s ``exact``) of every
range holding its X; a subscriber gets one ``update`` row when its SQL value changed (null = SQL NULL).
The aggregate messages are per update (each with its update's seq), so ``deliver`` returns exactly the
unicast rows of the same batch, row for row.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from sparksub.operators.agg.core import AggState, exact, to_float
from sparksub.operators.range_min.delivery import SubscriptionPoints
from sparksub.operators.shared.range_classes import RangeRegistry, by_seq, rows_table, update_rows

__all__ = ["AggSubscribers"]


_to_float_many = np.frompyfunc(to_float, 2, 1)


def _agg_values(func: str, counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """SQL values of exact states as float64, NaN = NULL (COUNT: the count)."""
    if func == "count":
        return counts.astype(np.float64)
    out = np.full(len(counts), np.nan)
    nz = np.flatnonzero(counts != 0)
    if nz.size:
        den = np.ones(nz.size, dtype=np.int64) if func == "sum" else counts[nz]
        out[nz] = _to_float_many(sums[nz], den.astype(object)).astype(np.float64)
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
        self.sums = np.zeros(0, dtype=object)
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
            s = np.zeros(cap, dtype=object)
            s[: self.sums.size] = self.sums
            self.counts, self.sums = c, s

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
            self.sums[slots] = s
        elif states is not None and slots.size:
            self.counts[slots] = np.asarray(states[0], dtype=np.int64)[sel]
            self.sums[slots] = np.asarray(states[1], dtype=object)[sel]
        else:
            self.counts[slots] = 0
            self.sums[slots] = 0

    def _forget(self, slots: np.ndarray) -> None:
        self.counts[slots] = 0
        self.sums[slots] = 0

    def reseed(self, core) -> None:
        slots = self.points.live_slots()
        if slots.size:
            c, s = core.states(self.points.x1[slots], self.points.x2[slots])
            self.counts[slots] = c
            self.sums[slots] = s

    def state(self, sid) -> AggState:
        if sid in self._empty:
            return AggState()
        s = self.points.slot(sid)
        return AggState(int(self.counts[s]), int(self.sums[s]))

    def result(self, sid):
        """The SQL value: COUNT an int; SUM / AVG a float, None when the range is empty."""
        return self.state(sid).value(self.func)

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
                hits.append((slots, int(dc), exact(float(ds))))
        if not hits:
            return None
        idx = np.unique(np.concatenate([h[0] for h in hits]))
        old = _agg_values(self.func, self.counts[idx], self.sums[idx])
        for slots, dc, ds in hits:              # slots are distinct within one query
            if dc:
                self.counts[slots] += dc
            if ds and self.func != "count":     # a COUNT subscriber's sum is not kept (range_agg)
                self.sums[slots] += ds
        new = _agg_values(self.func, self.counts[idx], self.sums[idx])
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
