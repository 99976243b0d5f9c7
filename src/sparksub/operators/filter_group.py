"""The FILTER group operator: every FILTER subscription on one table (001).

A subscription is a DNF of ``(attr, op, constants)`` triples (``planner.classifier.bind_filter``);
each of its conjunctions is one entry of the matching engine (``operators/filters``), under an
internal slot, and the matches of a subscription's conjunctions are merged, so an event is reported
once per subscription. The notification is the event itself, projected on the columns the
subscription asked for (the other columns are null).

Pure (numpy / pyarrow); it runs inside Spark tasks through ``operators/spark_groups.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import DuplicateSubscription, InvalidSubscription, UnknownSubscription
from sparksub.operators.filters.le_subscribe import LeSubscribe
from sparksub.operators.filters.predicates import Pred

__all__ = ["FilterGroup", "FilterSnapshot", "EVENT_PREFIX", "notification_schema"]

#: Event columns travel to the task under this prefix, so they never collide with the range groups'
#: batch columns (key, x, y) in the combined batch of one publish.
EVENT_PREFIX = "e__"


def notification_schema(table_columns: list[tuple[str, pa.DataType]]) -> list[tuple[str, pa.DataType]]:
    """The payload columns of a FILTER notification: the event's columns."""
    return list(table_columns)


@dataclass
class FilterSnapshot:
    group_id: str
    table: str
    columns: list  # [(name, pa.DataType)] of the table, in order
    ids: list = field(default_factory=list)
    dnfs: list = field(default_factory=list)         # per id: DNF of (attr, op, values)
    projections: list = field(default_factory=list)  # per id: tuple of column names or ('*',)

    def build(self) -> "FilterGroup":
        g = FilterGroup(self.group_id, self.table, self.columns)
        if self.ids:
            g.register(self.ids, self.dnfs, self.projections)
        return g


class FilterGroup:
    #: No state beyond the subscriptions: a replica never replays the update log (spark_groups).
    stateless = True

    def __init__(self, group_id: str, table: str, columns: list, matcher_factory=LeSubscribe):
        self.group_id, self.table, self.columns = group_id, table, list(columns)
        self.matcher = matcher_factory()
        self._slots_of: dict[str, list[int]] = {}   # id -> internal slots (one per conjunction)
        self._owner: list[int] = []                 # internal slot -> subscription number (or -1)
        self._ids: list[str | None] = []            # subscription number -> id
        self._number: dict[str, int] = {}
        self._proj: list[tuple] = []                # subscription number -> projection
        self._dnf: list = []
        self._free_slots: list[int] = []
        self.counters = {"events": 0, "matches": 0, "batches": 0}

    # ---- registration ---------------------------------------------------------------------------
    def register(self, ids, dnfs, projections) -> None:
        ids = [str(i) for i in ids]
        seen = set()
        for i in ids:
            if i in self._number or i in seen:
                raise DuplicateSubscription(f"subscription {i!r} already exists")
            seen.add(i)
        names = {c for c, _ in self.columns}
        for i, proj in zip(ids, projections):
            bad = [c for c in proj if c != "*" and c not in names]
            if bad:
                raise InvalidSubscription(f"subscription {i!r} projects unknown columns {bad}")
        slots, conjunctions = [], []
        for i, dnf, proj in zip(ids, dnfs, projections):
            number = len(self._ids)
            self._ids.append(i)
            self._number[i] = number
            self._proj.append(tuple(proj))
            self._dnf.append(dnf)
            mine = []
            for conj in dnf:
                slot = self._free_slots.pop() if self._free_slots else len(self._owner)
                if slot == len(self._owner):
                    self._owner.append(number)
                else:
                    self._owner[slot] = number
                mine.append(slot)
                slots.append(slot)
                conjunctions.append([Pred(a, op, tuple(v)) for a, op, v in conj])
            self._slots_of[i] = mine
        if slots:
            self.matcher.add(np.asarray(slots, dtype=np.int64), conjunctions)

    def unregister(self, ids) -> None:
        ids = [str(i) for i in ids]
        for i in ids:
            if i not in self._number:
                raise UnknownSubscription(f"no subscription {i!r}")
        slots = []
        for i in ids:
            number = self._number.pop(i)
            self._ids[number] = None
            for s in self._slots_of.pop(i):
                self._owner[s] = -1
                self._free_slots.append(s)
                slots.append(s)
        if slots:
            self.matcher.remove(np.asarray(slots, dtype=np.int64))

    # The registry interface the engine uses for every group (as delivery.SubscriptionPoints offers).
    def add(self, ids, dnfs, projections) -> np.ndarray:
        start = len(self._ids)
        self.register(ids, dnfs, projections)
        return np.arange(start, len(self._ids), dtype=np.int64)

    def remove(self, ids) -> None:
        self.unregister(ids)

    def live_slots(self) -> np.ndarray:
        return np.asarray([n for n, i in enumerate(self._ids) if i is not None], dtype=np.int64)

    def ids_of(self, slots) -> np.ndarray:
        return np.asarray([self._ids[n] for n in np.asarray(slots).tolist()], dtype=object)

    def __contains__(self, sub_id) -> bool:
        return sub_id in self._number

    def __len__(self) -> int:
        return len(self._number)

    def snapshot(self) -> FilterSnapshot:
        live = [n for n, i in enumerate(self._ids) if i is not None]
        return FilterSnapshot(self.group_id, self.table, self.columns, [self._ids[n] for n in live],
                              [self._dnf[n] for n in live], [self._proj[n] for n in live])

    # ---- matching -------------------------------------------------------------------------------
    def match(self, events: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(event row, subscription number) pairs, each once, sorted by event then subscription."""
        ev, slot = self.matcher.match(events)
        if ev.size == 0:
            return ev, slot
        owner = np.asarray(self._owner, dtype=np.int64)[slot]
        pairs = np.unique(np.stack([ev, owner], axis=1), axis=0)  # a DNF's conjunctions may all match
        return pairs[:, 0], pairs[:, 1]

    def apply(self, batch: pa.Table, mode: str = "unicast") -> pa.Table:
        """``batch``: the table's columns (prefixed :data:`EVENT_PREFIX`), ``op`` and ``seq``.
        Every upsert row is an event (a deleted row is not: it matches nothing)."""
        self.counters["batches"] += 1
        events = pa.table({c: batch.column(EVENT_PREFIX + c) for c, _ in self.columns
                           if EVENT_PREFIX + c in batch.column_names})
        is_event = pc.equal(batch.column("op"), 0)
        rows = np.flatnonzero(is_event.to_numpy(zero_copy_only=False))
        events = events.take(pa.array(rows)) if rows.size != batch.num_rows else events
        self.counters["events"] += events.num_rows
        ev, number = self.match(events)
        self.counters["matches"] += int(ev.size)
        if mode == "none":
            ev = ev[:0]
            number = number[:0]
        seq = batch.column("seq").to_numpy(zero_copy_only=False)[rows][ev]
        out = {
            "subscription_id": pa.array([self._ids[n] for n in number.tolist()], pa.string()),
            "op": pa.array(["match"] * ev.size, pa.string()),
            "seq": pa.array(seq, pa.int64()),
            "group_id": pa.array([self.group_id] * ev.size, pa.string()),
        }
        taken = events.take(pa.array(ev, pa.int64()))
        projections = [self._proj[n] for n in number.tolist()]
        for c, typ in self.columns:
            col = taken.column(c) if c in taken.column_names else pa.nulls(ev.size, typ)
            keep = np.fromiter((("*" in p) or (c in p) for p in projections), dtype=bool, count=ev.size)
            out[EVENT_PREFIX + c] = pc.if_else(pa.array(keep), col, pa.nulls(ev.size, col.type)) \
                if ev.size and not keep.all() else col
        return pa.table(out)

    # ---- introspection --------------------------------------------------------------------------
    def explain(self) -> dict:
        engine = self.matcher.explain() if hasattr(self.matcher, "explain") else {}
        return {"class": "FILTER", "group": self.group_id, "subscriptions": len(self),
                "conjunctions": len(self._owner) - len(self._free_slots),
                "algorithm": f"{type(self.matcher).__name__} (001 two-phase matching)",
                **{f"engine {k}": v for k, v in engine.items()}}

    def stats(self) -> dict:
        return {**self.counters, "subscriptions": len(self),
                **(self.matcher.stats() if hasattr(self.matcher, "stats") else {})}
