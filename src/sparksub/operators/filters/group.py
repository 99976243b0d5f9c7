"""The FILTER group operator: every FILTER subscription on one table (001).

A subscription is a DNF of ``(attr, op, constants)`` triples (``planner.classifier.bind_filter``);
each of its conjunctions is one entry of the matching engine (``operators/filters``), under an
internal slot, and the matches of a subscription's conjunctions are merged, so an event is reported
once per subscription. The notification is the event itself, projected on the columns the
subscription asked for (the other columns are null).

Pure (numpy / pyarrow); it runs inside Spark tasks through ``runtime/groups.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import DuplicateSubscription, InvalidSubscription, UnknownSubscription
from sparksub.operators.filters.le_subscribe import LeSubscribe
from sparksub.operators.filters.predicates import Pred
from sparksub.operators.shared.schemas import EVENT_PREFIX

__all__ = ["FilterGroup", "FilterSnapshot", "notification_schema"]



def notification_schema(table_columns: list[tuple[str, pa.DataType]]) -> list[tuple[str, pa.DataType]]:
    """The payload columns of a FILTER notification: the event's columns."""
    return list(table_columns)


#: One predicate of a columnar template: ``(attr, op, column)`` with ``column`` as
#: ``LeSubscribe.add_columns`` takes it (an array or scalar, a ``(lo, hi)`` pair, tuples for ``in``,
#: ``None`` for ``is_null`` / ``is_not_null``).
TemplatePred = tuple


@dataclass
class Block:
    """Subscriptions registered together: one DNF shape, the constants as columns (DESIGN §3)."""

    ids: np.ndarray                  # object array of subscription ids
    disjuncts: list                  # [[TemplatePred, ...], ...]
    projection: tuple

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> "Block":
        """The block restricted to ``rows`` (scalar constants stay scalars)."""
        return Block(self.ids[rows], [[(a, op, _take(op, col, rows)) for a, op, col in conj]
                                      for conj in self.disjuncts], self.projection)


def _take(op: str, col, rows: np.ndarray):
    if col is None or np.ndim(col) == 0 or (op == "in" and isinstance(col, tuple)):
        return col                                     # is_null, a shared constant or IN tuple
    if op == "between":
        return tuple(_take("=", c, rows) for c in col)
    if op == "in":
        return [col[r] for r in rows.tolist()]
    return np.asarray(col)[rows]


@dataclass
class FilterSnapshot:
    """What a Spark task needs to rebuild a FILTER group: its live subscriptions, as blocks."""

    group_id: str
    table: str
    columns: list  # [(name, pa.DataType)] of the table, in order
    blocks: list = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)

    def shard(self, i: int, k: int) -> "FilterSnapshot":
        """Every ``k``-th subscription from the ``i``-th on (shards for the executors, DESIGN §5)."""
        out, offset = [], 0
        for b in self.blocks:
            first = (i - offset) % k
            rows = np.arange(first, len(b), k)
            offset += len(b)
            if len(rows):
                out.append(b.take(rows))
        return FilterSnapshot(self.group_id, self.table, self.columns, out)

    def build(self) -> "FilterGroup":
        g = FilterGroup(self.group_id, self.table, self.columns)
        for b in self.blocks:
            g.register_block(b)
        return g


class FilterGroup:
    #: No state beyond the subscriptions: a replica never replays the update log (spark_groups).
    stateless = True

    def __init__(self, group_id: str, table: str, columns: list, matcher_factory=LeSubscribe):
        self.group_id, self.table, self.columns = group_id, table, list(columns)
        self.matcher = matcher_factory()
        self._ids: list[str | None] = []            # subscription number -> id (None: gone)
        self._number: dict[str, int] = {}
        self._proj: list[tuple] = []                # subscription number -> projection
        self._block_of = np.zeros(0, dtype=np.int64)    # number -> block, row in it
        self._row_of = np.zeros(0, dtype=np.int64)
        self._first_slot = np.zeros(0, dtype=np.int64)  # number -> slots first + stride * d
        self._stride = np.zeros(0, dtype=np.int64)
        self._nslots = np.zeros(0, dtype=np.int64)
        self._owner = np.zeros(0, dtype=np.int64)       # internal slot -> number (-1: free)
        self._n_slots = 0
        self._free_slots: list[int] = []
        self._blocks: list[Block] = []
        self.counters = {"events": 0, "matches": 0, "batches": 0}

    # ---- registration ---------------------------------------------------------------------------
    def register(self, ids, dnfs, projections) -> None:
        """Register subscriptions given row by row (a DNF of ``(attr, op, values)`` triples each).
        Rows of one shape and projection become one block; all or nothing."""
        ids = [str(i) for i in ids]
        self._check_ids(ids)
        groups: dict = {}
        for i, dnf, proj in zip(ids, dnfs, projections):
            shape = (tuple(tuple((a, op, len(v)) for a, op, v in conj) for conj in dnf), tuple(proj))
            groups.setdefault(shape, []).append((i, dnf))
        done = []
        try:
            for (shape, proj), rows in groups.items():
                disjuncts = []
                for d, conj in enumerate(shape):
                    preds = []
                    for j, (a, op, _) in enumerate(conj):
                        vals = [dnf[d][j][2] for _, dnf in rows]
                        preds.append((a, op, _column(op, vals)))
                    disjuncts.append(preds)
                block = Block(np.array([i for i, _ in rows], dtype=object), disjuncts, proj)
                self.register_block(block)
                done.append(block)
        except Exception:
            for block in done:
                self.unregister(block.ids.tolist())
            raise

    def register_block(self, block: Block) -> None:
        """Register ``len(block)`` subscriptions of one DNF shape at once (vectorised; 1M in
        seconds).  Checks everything first: a bad id, projection or constant adds nothing."""
        n = len(block)
        if n == 0:
            return
        ids = block.ids.tolist()
        self._check_ids(ids)
        names = {c for c, _ in self.columns}
        bad = [c for c in block.projection if c != "*" and c not in names]
        if bad:
            raise InvalidSubscription(f"subscription {ids[0]!r} projects unknown columns {bad}")
        D = len(block.disjuncts)
        base_number = len(self._ids)
        numbers = np.arange(base_number, base_number + n, dtype=np.int64)
        if D == 1 and len(self._free_slots) >= n:    # reuse freed slots (churn keeps arrays small)
            slots_d = [np.array([self._free_slots.pop() for _ in range(n)], dtype=np.int64)]
            first, stride = slots_d[0], np.ones(n, dtype=np.int64)
        else:                                          # slot of (row i, disjunct d) = base + d*n + i
            base = self._n_slots
            slots_d = [np.arange(base + d * n, base + (d + 1) * n, dtype=np.int64) for d in range(D)]
            first, stride = np.arange(base, base + n, dtype=np.int64), np.full(n, n, dtype=np.int64)
        added = []
        try:
            for slots, conj in zip(slots_d, block.disjuncts):
                self._add_to_matcher(slots, conj, n)
                added.append(slots)
        except Exception:
            for slots in added:
                self.matcher.remove(slots)
            raise
        self._n_slots = max([self._n_slots] + [int(s.max()) + 1 for s in slots_d])
        top = max(self._n_slots, 1)
        if len(self._owner) < top:
            grown = np.full(max(top, 2 * len(self._owner)), -1, dtype=np.int64)
            grown[: len(self._owner)] = self._owner
            self._owner = grown
        for slots in slots_d:
            self._owner[slots] = numbers
        self._ids.extend(ids)
        self._number.update(zip(ids, numbers.tolist()))
        self._proj.extend([tuple(block.projection)] * n)
        self._blocks.append(block)
        bid = len(self._blocks) - 1
        # per-number columns grow geometrically: many single subscriptions stay O(1) each
        end = base_number + n
        if end > len(self._block_of):
            cap = max(end, 2 * len(self._block_of), 16)
            for name in ("_block_of", "_row_of", "_first_slot", "_stride", "_nslots"):
                old = getattr(self, name)
                grown = np.zeros(cap, dtype=np.int64)
                grown[: len(old)] = old
                setattr(self, name, grown)
        self._block_of[base_number:end] = bid
        self._row_of[base_number:end] = np.arange(n)
        self._first_slot[base_number:end] = first
        self._stride[base_number:end] = stride
        self._nslots[base_number:end] = D

    def _add_to_matcher(self, slots: np.ndarray, conj: list, n: int) -> None:
        template = [(a, op) for a, op, _ in conj]
        cols = [col for _, _, col in conj]
        if hasattr(self.matcher, "add_columns"):
            self.matcher.add_columns(slots, template, cols)
        else:                                          # a baseline matcher: row by row
            self.matcher.add(slots, _rows(template, cols, n))

    def _check_ids(self, ids: list) -> None:
        seen = set()
        for i in ids:
            if i in self._number or i in seen:
                raise DuplicateSubscription(f"subscription {i!r} already exists")
            seen.add(i)

    def unregister(self, ids) -> None:
        ids = [str(i) for i in ids]
        for i in ids:
            if i not in self._number:
                raise UnknownSubscription(f"no subscription {i!r}")
        numbers = np.array([self._number.pop(i) for i in ids], dtype=np.int64)
        for n in numbers.tolist():
            self._ids[n] = None
        if not len(numbers):
            return
        per = self._nslots[numbers]
        rep = np.repeat(numbers, per)
        d = np.arange(len(rep)) - np.repeat(np.cumsum(per) - per, per)
        slots = self._first_slot[rep] + self._stride[rep] * d
        self._owner[slots] = -1
        self._free_slots.extend(slots.tolist())
        if len(slots):
            self.matcher.remove(slots)

    # The registry interface the engine uses for every group (as delivery.SubscriptionPoints offers).
    def add(self, ids, dnfs, projections) -> np.ndarray:
        start = len(self._ids)
        self.register(ids, dnfs, projections)
        return np.arange(start, len(self._ids), dtype=np.int64)

    def add_block(self, block: Block) -> np.ndarray:
        start = len(self._ids)
        self.register_block(block)
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
        """The live subscriptions, block by block (columns sliced, nothing expanded per row)."""
        live = np.flatnonzero(np.fromiter((i is not None for i in self._ids), dtype=bool, count=len(self._ids)))
        blocks, rows = self._block_of[live], self._row_of[live]
        order = np.lexsort((rows, blocks))               # live rows grouped by block, in row order
        blocks, rows = blocks[order], rows[order]
        starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]]) if len(blocks) else blocks
        out = []
        for a, b in zip(starts.tolist(), np.r_[starts[1:], len(blocks)].tolist()):
            block = self._blocks[int(blocks[a])]
            out.append(block if b - a == len(block) else block.take(rows[a:b]))
        return FilterSnapshot(self.group_id, self.table, self.columns, out)

    # ---- matching -------------------------------------------------------------------------------
    def match(self, events: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(event row, subscription number) pairs, each once, sorted by event then subscription."""
        ev, slot = self.matcher.match(events)
        if ev.size == 0:
            return ev, slot
        owner = self._owner[slot]
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
                "conjunctions": int((self._owner[: self._n_slots] >= 0).sum()),
                "algorithm": f"{type(self.matcher).__name__} (001 two-phase matching)",
                **{f"engine {k}": v for k, v in engine.items()}}

    def stats(self) -> dict:
        return {**self.counters, "subscriptions": len(self),
                **(self.matcher.stats() if hasattr(self.matcher, "stats") else {})}


def _column(op: str, vals: list):
    """Row constants (tuples, as in a DNF triple) -> one ``add_columns`` column."""
    if op in ("is_null", "is_not_null"):
        return None
    if op == "in":
        return [tuple(v) for v in vals]
    if op == "between":
        return (_array([v[0] for v in vals]), _array([v[1] for v in vals]))
    return _array([v[0] for v in vals])


def _array(values: list) -> np.ndarray:
    a = np.empty(len(values), dtype=object)
    a[:] = values
    kinds = {type(v) for v in values}
    if kinds <= {int} or kinds <= {int, float} or kinds <= {float}:
        return np.asarray(values)            # numeric: a typed array factorises faster
    return a


def _rows(template: list, cols: list, n: int) -> list:
    """Expand a columnar template to per-row Pred lists (for matchers without add_columns)."""
    rows: list = [[] for _ in range(n)]
    for (a, op), col in zip(template, cols):
        for i in range(n):
            if col is None:
                v = ()
            elif op == "between":
                lo, hi = col
                v = (_at(lo, i), _at(hi, i))
            elif op == "in":
                v = tuple(col) if isinstance(col, tuple) else tuple(col[i])
            else:
                v = (_at(col, i),)
            rows[i].append(Pred(a, op, v))
    return rows


def _at(col, i: int):
    if np.ndim(col) == 0:
        return col.item() if isinstance(col, np.generic) else col
    v = col[i]
    return v.item() if isinstance(v, np.generic) else v
