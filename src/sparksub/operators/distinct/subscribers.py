"""The network and the subscribers of RANGE_DISTINCT (000 §4), for ``engine.deliver`` and the group's
unicast mode; what the range classes share is in ``shared/range_classes.py``.

A message ADDs or REMOVEs a value.  A subscription matches a message iff its DISTINCT set changes
(``distinct/core.py``), so every match is one row: ``add`` / ``remove`` per changed value, in message
order, then subscription order.  DISTINCT's reformulated messages are per update (each with its update's
seq), so ``deliver`` returns exactly the unicast rows of the same batch, row for row.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from sparksub.operators.distinct.core import ADD
from sparksub.operators.range_min.delivery import SubscriptionPoints, message_rectangle
from sparksub.operators.shared.range_classes import RangeRegistry, by_seq, rows_table

__all__ = ["DistinctSubscribers"]


class DistinctSubscribers(RangeRegistry):
    """Range-DISTINCT subscribers (000 §4) behind one subscription index; see the module docstring.

    ``keep_sets=False`` keeps no per-subscriber sets: every match is reported (a match is a change,
    ``range_distinct``), which is what the group's own unicast mode needs."""

    kind = "RANGE_DISTINCT"

    def __init__(self, *, keep_sets: bool = True, group_id: str | None = None):
        self.keep_sets = bool(keep_sets)
        self.group_id = group_id
        self.points = SubscriptionPoints()
        self._sets: list = []              # slot -> set of values
        self._empty: dict = {}             # sid -> (x1, x2) of the x1 > x2 subscriptions
        self._init_counters()

    @classmethod
    def from_group(cls, group) -> DistinctSubscribers:
        """Every subscription of a ``range_groups.DistinctGroup`` with its current set from the core."""
        subs = cls(group_id=group.group_id)
        subs.add(group.ids, group.x1, group.x2, core=group.core)
        return subs

    @classmethod
    def from_seed(cls, group_id, option, key_type, ids, x1, x2, k, seed) -> DistinctSubscribers:
        """A subscription shard's subscribers (``shared/range_shards.py``): no sets, as the group's own unicast
        side (every match of a per-update message is a change), so no seed either."""
        subs = cls(keep_sets=False, group_id=group_id)
        subs.add_seeded(ids, x1, x2, k, seed)
        return subs

    def add_seeded(self, ids, x1, x2, k, seed) -> None:
        """Subscriptions of a shard that keeps no sets (``from_seed``): nothing to seed; ``k`` and ``seed`` unused
        (the range classes' common signature)."""
        self.add(ids, x1, x2)

    def add(self, ids, x1, x2, core=None, results=None) -> None:
        """Register subscribers with their current sets: from ``core`` (a ``RangeDistinctCore``), else
        ``results`` (an iterable of values per id), else empty."""
        ids, x1, x2, sel, slots = self._register(ids, x1, x2, results)
        cap = self.points.capacity
        if len(self._sets) < cap:
            self._sets.extend([None] * (cap - len(self._sets)))
        for i, s in zip(sel.tolist(), slots.tolist()):
            if not self.keep_sets:
                continue
            if core is not None:
                self._sets[s] = set(core.distinct_values(x1[i], x2[i]))
            else:
                self._sets[s] = set(results[i]) if results is not None else set()

    def _forget(self, slots: np.ndarray) -> None:
        for s in slots.tolist():
            self._sets[s] = None

    def reseed(self, core) -> None:
        if not self.keep_sets:
            return
        for s in self.points.live_slots().tolist():
            self._sets[s] = set(core.distinct_values(self.points.x1[s], self.points.x2[s]))

    def result(self, sid) -> list:
        """The subscriber's DISTINCT values, sorted (numbers before strings, as ``DistinctGroup.result``)."""
        if sid in self._empty:
            return []
        if not self.keep_sets:
            raise ValueError("DistinctSubscribers(keep_sets=False) holds no sets")
        return sorted(self._sets[self.points.slot(sid)], key=lambda v: (isinstance(v, str), v))

    def count(self, inner_l, inner_r, outer_l, outer_r) -> int:
        return self.points.index.count(*message_rectangle(inner_l, inner_r, outer_l, outer_r))

    def receive(self, messages: Iterable, seq: int) -> list[dict]:
        """Apply one seq's messages (``range_distinct.Message`` fields: op ADD / REMOVE, value, inner_l,
        inner_r, outer_l, outer_r) in order; rows in message order, then subscription order."""
        rows: list[dict] = []
        ids_of = self.points.ids_of
        for op, value, il, ir, ol, orr in messages:
            slots = np.sort(self.points.index.query(*message_rectangle(il, ir, ol, orr)))
            self._reached(int(slots.size))
            if not slots.size:
                continue
            if self.keep_sets:       # 000 §4: ADD / REMOVE; report only a real change (match <=> change)
                sets = self._sets
                changed = []
                for s in slots.tolist():
                    st = sets[s]
                    if (value in st) != (op == ADD):
                        (st.add if op == ADD else st.discard)(value)
                        changed.append(s)
                slots = np.asarray(changed, dtype=np.int64)
            cols = {"item_text": value} if isinstance(value, str) else {"value": float(value)}
            lower = op.lower()
            for sid in ids_of(slots).tolist():
                rows.append({"subscription_id": sid, "op": lower, "seq": seq, **cols})
            self.counters["notified"] += int(slots.size)
        self.counters["rows"] += len(rows)
        return rows

    def deliver(self, messages: pa.Table) -> pa.Table:
        """The unicast rows a table of reformulated DISTINCT messages (op ADD / REMOVE, the value in
        ``item_text`` or ``new_value``, the Mar rectangle) causes."""
        rows: list[dict] = []
        names = ("op", "item_text", "new_value", "inner_l", "inner_r", "outer_l", "outer_r", "group_id")
        for seq, c in by_seq(messages, names):
            msgs = [(op.upper(), t if t is not None else v, il, ir, ol, orr)
                    for op, t, v, il, ir, ol, orr in zip(c["op"], c["item_text"], c["new_value"], c["inner_l"],
                                                         c["inner_r"], c["outer_l"], c["outer_r"])]
            gid = c["group_id"][0] if c["group_id"][0] is not None else self.group_id
            for r in self.receive(msgs, seq):
                r["group_id"] = gid
                rows.append(r)
        return rows_table(rows, self.group_id)
