"""The network and the subscribers of the range classes RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG.

What :class:`~sparksub.operators.range_min.delivery.Subscribers` is for RANGE_MIN: every subscriber's current
result plus a subscription index that plays the content-based network.  A reformulated message is a
rectangle in the subscription space {(x1, x2)} (002 §II-C, 000 §2.3.1)::

    top-k, DISTINCT:  OUTER_L < x1 <= INNER_L  and  INNER_R <= x2 < OUTER_R   (+ k = k_s for top-k)
    aggregates:       x1 <= X <= x2, the rectangle (-inf, X] x [X, +inf)       (000 §4)

(an infinite OUTER bound also admits the same infinite subscription end), so the subscriptions a
message reaches are one :class:`~sparksub.operators.shared.point_index.PointIndex2D` rectangle query
(:class:`~sparksub.operators.range_min.delivery.SubscriptionPoints`; one index per k for top-k), never a scan of
the subscriptions.  Each reached subscriber applies the message by its class's protocol:

* :class:`TopkSubscribers` - 002 §II-A: a message with object o replaces o's (x, y) if the local list
  holds o, else the list becomes the top k of list ∪ {o}; ``y = None`` (op ``DELETE``) removes o.
  Messages are applied in order (002 footnote 6).
* :class:`DistinctSubscribers` - 000 §4: ADD / REMOVE the value.  A subscription matches a message
  iff its DISTINCT set changes (``range_distinct``), so every match is one row.
* :class:`AggSubscribers` - 000 §4: add ``D_COUNT`` / ``D_SUM`` to an exact ``(count, sum)``
  (``range_agg.exact``); a row when the SQL value changed.

Use
---
``subs = subscribers_from_group(group)`` (or ``TopkSubscribers.from_group(group)`` ...) seeds every
subscriber with its current result from the group's core; ``subs.deliver(messages)`` takes the
group's reformulated messages (``range_groups.RANGE_MESSAGE_SCHEMA``, in the order the group emitted
them) and returns the unicast rows they cause, in :data:`UNICAST_ITEMS_SCHEMA` (the columns of the
group's 'unicast' mode).  Seqs are applied in ascending order (stable: messages of one seq keep their
order); every subscriber whose result changed over a seq gets its rows at that seq:

* top-k: ``enter`` / ``update`` / ``leave`` per item, from the subscriber's list before and after the
  seq (entries in the new list's order, then leaves in the old list's order);
* DISTINCT: ``add`` / ``remove`` per changed value, in message order, then subscription order;
* aggregates: one ``update`` with the new value (null = SQL NULL).

How ``deliver`` agrees with the group's 'unicast' mode
------------------------------------------------------
DISTINCT and aggregates: the group's reformulated messages are per update (each with its update's
seq), so ``deliver`` returns exactly the unicast rows of the same batch, row for row.

Top-k: the reformulated mode runs Paint-Batch over the whole publish batch (002 §IV-A; every message
carries the batch's last seq) and subscribers are exact only at the batch's end, while 'unicast'
reports every update.  ``deliver`` therefore reports each subscriber's *net* change over the batch at
that seq: with L0 / L1 a subscriber's list before / after the batch, ``deliver`` emits the rows of the
diff L0 -> L1, which is what replaying the batch's unicast rows on L0 gives (the unicast rows of a
subscriber whose list changed and changed back net to nothing, and ``deliver`` is silent for it).
So: equal final lists, and the same set of (subscriber, item, op, x, y) net changes per batch.  Given
per-update messages (one seq per update) ``deliver`` returns the unicast rows exactly.

Subscribers may be added and removed (``add`` / ``remove``); a top-k subscriber only hears messages
painted for its k, so a group's subscribers accept only the k values the group paints for (the
engine rebuilds the group, and reseeds, when the set of k values changes).  A subscription with
``x1 > x2`` (an empty range) is kept outside the index: no message reaches it and its result stays
empty.

:class:`RegionStats` records the influence-region sizes of a group's messages for EXPLAIN.
Pure (numpy / pyarrow); never imports pyspark.
"""
from __future__ import annotations

import math
from bisect import insort
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.range_min.delivery import SubscriptionPoints, message_rectangle
from sparksub.operators.agg.core import AggState, exact, to_float
from sparksub.operators.distinct.core import ADD

__all__ = ["ITEM_SCHEMA", "UNICAST_ITEMS_SCHEMA", "AggSubscribers", "DistinctSubscribers", "RegionStats",
           "TopkSubscribers", "key_text", "subscribers_from_group"]

#: Columns a range-class notification adds to ``UNICAST_SCHEMA`` (null where they do not apply).
ITEM_SCHEMA = pa.schema([("item_key", pa.string()), ("item_x", pa.float64()), ("item_text", pa.string())])

#: A range-class unicast row: ``range_min_group.UNICAST_SCHEMA`` + :data:`ITEM_SCHEMA`.
UNICAST_ITEMS_SCHEMA = pa.schema([
    ("subscription_id", pa.string()), ("op", pa.string()), ("value", pa.float64()), ("seq", pa.int64()),
    ("group_id", pa.string()), *ITEM_SCHEMA])

_INF = math.inf
_NINF = -math.inf


def key_text(key) -> str:
    """An object key as the ``item_key`` text of a row or message."""
    return key if isinstance(key, str) else str(key)


def _ids(ids) -> list:
    if isinstance(ids, str):
        raise TypeError("ids must be a sequence of strings, not a single string")
    if isinstance(ids, (pa.Array, pa.ChunkedArray)):
        return ids.to_pylist()
    if isinstance(ids, np.ndarray):
        return ids.reshape(-1).tolist()
    return list(ids)


def _check_new(ids: list, registry) -> None:
    """DuplicateSubscription naming the first id already registered or repeated in ``ids``."""
    seen: set = set()
    for sid in ids:
        if sid in registry or sid in seen:
            raise DuplicateSubscription(f"duplicate subscription id {sid!r}")
        seen.add(sid)


def _rows_table(rows: list[dict], group_id) -> pa.Table:
    out = {f.name: [r.get(f.name) for r in rows] for f in UNICAST_ITEMS_SCHEMA}
    out["group_id"] = [r.get("group_id", group_id) for r in rows]
    return pa.table(out, schema=UNICAST_ITEMS_SCHEMA)


def _by_seq(messages: pa.Table, names: Iterable[str]):
    """(seq, {name: values of that seq's messages}) in ascending seq; within a seq in ``msg_no`` order
    (the order the group emitted them) when the messages carry it, else in row order."""
    n = messages.num_rows
    if n == 0:
        return
    cols = {name: (messages.column(name).to_pylist() if name in messages.column_names else [None] * n)
            for name in names}
    seqs = np.asarray(messages.column("seq").to_pylist(), dtype=np.int64)
    msg_no = messages.column("msg_no") if "msg_no" in messages.column_names else None
    if msg_no is not None and msg_no.null_count == 0:
        order = np.lexsort((np.asarray(msg_no.to_pylist(), dtype=np.int64), seqs))
    else:
        order = np.argsort(seqs, kind="stable")
    s = seqs[order]
    cuts = np.flatnonzero(s[1:] != s[:-1]) + 1
    for part in np.split(order, cuts):
        idx = part.tolist()
        yield int(seqs[idx[0]]), {name: [c[i] for i in idx] for name, c in cols.items()}


def _null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


class _Counting:
    """Counters of the network side: ``messages`` routed, ``deliveries`` (message, subscription)
    pairs, ``max_reached`` by one message, ``notified`` (seq, subscriber) changes, ``rows``."""

    def _init_counters(self) -> None:
        self.counters = {"messages": 0, "deliveries": 0, "max_reached": 0, "notified": 0, "rows": 0}

    def _reached(self, n: int) -> None:
        c = self.counters
        c["messages"] += 1
        c["deliveries"] += n
        if n > c["max_reached"]:
            c["max_reached"] = n


# -------------------------------------------------------------------------------------------------- top-k
class _KPart:
    """The subscriptions with one k: their index and, by slot, id, row-order position and list."""

    __slots__ = ("k", "points", "lists", "pos")

    def __init__(self, k: int):
        self.k = k
        self.points = SubscriptionPoints()
        self.lists: list = []          # slot -> [(rank y, key, x, y)] best first
        self.pos: list = []            # slot -> position (the order rows come out in)

    def fit(self) -> None:
        cap = self.points.capacity
        if len(self.lists) < cap:
            self.lists.extend([None] * (cap - len(self.lists)))
            self.pos.extend([0] * (cap - len(self.pos)))


class TopkSubscribers(_Counting):
    """Range top-k subscribers (002 §II-A) behind a per-k subscription index; see the module docstring.

    ``descending``: the group's ``ORDER BY y DESC``.  ``key_type`` parses the ``item_key`` text of a
    message back into the object key the server ranks ties by (``str``, ``int`` or a callable): ties in
    y are broken by the key, so an int-keyed table must rank 2 before 10.  ``ks``: the k values the
    publisher paints for (None: any); :meth:`add` refuses other k values, which no message would reach.
    """

    kind = "RANGE_TOPK"

    def __init__(self, descending: bool = False, *, key_type: Callable = str, ks: Iterable[int] | None = None,
                 group_id: str | None = None):
        self.descending = bool(descending)
        self.key_type = key_type
        self.ks = None if ks is None else frozenset(int(k) for k in ks)
        self.group_id = group_id
        self._parts: dict[int, _KPart] = {}
        self._where: dict = {}             # sid -> (k, slot); slot -1 = empty range, kept off the index
        self._empty: dict = {}             # sid -> (x1, x2, position) of the x1 > x2 subscriptions
        self._next_pos = 0
        self._init_counters()

    @classmethod
    def from_group(cls, group, key_type: Callable | None = None) -> TopkSubscribers:
        """Every subscription of a ``range_groups.TopkGroup`` with its current top-k from the group's core.

        ``key_type`` defaults to the type of the core's keys (``int`` if it holds an int key, else
        ``str``); pass the table's key type when the core may be empty."""
        core = group.core
        if key_type is None:
            any_key = core.top_k(_NINF, _INF, 1)
            key_type = int if any_key and isinstance(any_key[0][0], (int, np.integer)) else str
        # the group's core paints for the k values of its subscriptions, or k = 1 without any
        subs = cls(group.descending, key_type=key_type, ks=set(group.k.tolist()) or {1}, group_id=group.group_id)
        subs.add(group.ids, group.x1, group.x2, group.k, core=core)
        return subs

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, sid) -> bool:
        return sid in self._where

    def _rank(self, y: float) -> float:
        return -y if self.descending else y

    def _entries(self, items) -> list:
        return sorted((self._rank(float(y)), key, float(x), float(y)) for key, x, y in items)

    def add(self, ids, x1, x2, k, core=None, results=None) -> None:
        """Register subscribers (x1, x2, k) with their current lists: from ``core`` (a ``topk.TopkCore``),
        else ``results`` ([(key, x, y)] per id), else empty.  Checks everything before registering."""
        ids = _ids(ids)
        x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
        x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
        ks = np.asarray(k, dtype=np.int64).reshape(-1)
        if not len(ids) == x1.size == x2.size == ks.size:
            raise ValueError(f"length mismatch: {len(ids)} ids, {x1.size} x1, {x2.size} x2, {ks.size} k")
        if (ks < 1).any():
            raise ValueError("k must be >= 1")
        if self.ks is not None and not set(ks.tolist()) <= self.ks:
            raise ValueError(f"k {sorted(set(ks.tolist()) - self.ks)} not painted by the publisher "
                             f"(it paints k in {sorted(self.ks)}): rebuild the group and reseed")
        if results is not None and len(results) != len(ids):
            raise ValueError(f"length mismatch: {len(ids)} ids, {len(results)} results")
        _check_new(ids, self)
        pos = np.arange(self._next_pos, self._next_pos + len(ids))
        self._next_pos += len(ids)
        if core is not None:
            lists = [self._entries(core.top_k(a, b, int(kk))) for a, b, kk in zip(x1, x2, ks)]
        elif results is not None:
            lists = [self._entries(r) for r in results]
        else:
            lists = [[] for _ in ids]
        empty = ~(x1 <= x2)
        for i in np.flatnonzero(empty).tolist():
            self._empty[ids[i]] = (float(x1[i]), float(x2[i]), int(pos[i]))
            self._where[ids[i]] = (int(ks[i]), -1)
        for kk in np.unique(ks[~empty]).tolist():
            sel = np.flatnonzero((ks == kk) & ~empty)
            part = self._parts.get(kk)
            if part is None:
                part = self._parts[kk] = _KPart(kk)
            slots = part.points.add([ids[i] for i in sel.tolist()], x1[sel], x2[sel])
            if sel.size > 1:
                part.points.index.rebuild()   # a bulk add: all of it into the static part of the index
            part.fit()
            for i, s in zip(sel.tolist(), slots.tolist()):
                part.lists[s] = lists[i]
                part.pos[s] = int(pos[i])
                self._where[ids[i]] = (kk, s)

    def remove(self, ids) -> None:
        ids = _ids(ids)
        for sid in ids:
            if sid not in self._where:
                raise UnknownSubscription(f"unknown subscription id {sid!r}")
        for sid in ids:
            k, slot = self._where.pop(sid)
            if slot < 0:
                del self._empty[sid]
                continue
            part = self._parts[k]
            part.points.remove([sid])
            part.lists[slot] = None

    def reseed(self, core) -> None:
        """Every subscriber's list recomputed from ``core`` (after the subscribers fell out of step)."""
        for part in self._parts.values():
            for s in part.points.live_slots().tolist():
                a, b = part.points.x1[s], part.points.x2[s]
                part.lists[s] = self._entries(core.top_k(a, b, part.k))

    def result(self, sid) -> list[tuple]:
        """The subscriber's list [(key, x, y)], best first."""
        if sid not in self._where:
            raise UnknownSubscription(f"unknown subscription id {sid!r}")
        k, slot = self._where[sid]
        return [] if slot < 0 else [(key, x, y) for _, key, x, y in self._parts[k].lists[slot]]

    def count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        """How many subscriptions a message (k, rectangle) reaches (index count; k None = every k)."""
        parts = self._parts.values() if k is None else [p for p in (self._parts.get(int(k)),) if p]
        rect = message_rectangle(inner_l, inner_r, outer_l, outer_r)
        return sum(p.points.index.count(*rect) for p in parts)

    def receive(self, messages: Iterable, seq: int) -> list[dict]:
        """Apply one seq's messages (``topk.TopkMessage`` fields: k, inner_l, inner_r, outer_l, outer_r,
        key, x, y; y None = deletion), in order, to the subscribers each reaches; return the rows of
        the subscribers whose list changed over the seq (module docstring)."""
        touched: dict = {}             # (part, slot) -> the list before the seq
        rank = self._rank
        for k, il, ir, ol, orr, key, x, y in messages:
            rect = message_rectangle(il, ir, ol, orr)
            parts = self._parts.values() if k is None else [p for p in (self._parts.get(int(k)),) if p]
            entry = None if y is None else (rank(y), key, x, y)
            for part in parts:
                slots = part.points.index.query(*rect).tolist()
                self._reached(len(slots))
                lists, kk = part.lists, part.k
                for s in slots:
                    lst = lists[s]
                    if (part, s) not in touched:
                        touched[(part, s)] = lst[:]
                    # 002 §II-A: o already listed -> its value is replaced; else top k of list ∪ {o}
                    for j, e in enumerate(lst):
                        if e[1] == key:
                            del lst[j]
                            held = True
                            break
                    else:
                        held = False
                    if entry is None:
                        continue
                    insort(lst, entry)
                    if not held and len(lst) > kk:
                        lst.pop()
        rows: list[dict] = []
        for (part, s), old in sorted(touched.items(), key=lambda t: t[0][0].pos[t[0][1]]):
            new = part.lists[s]
            if new == old:
                continue
            self.counters["notified"] += 1
            sid = part.points.ids_of([s])[0]
            before = {e[1]: (e[2], e[3]) for e in old}
            after = {e[1]: (e[2], e[3]) for e in new}
            for key, (x, y) in after.items():
                prev = before.get(key)
                if prev != (x, y):
                    rows.append({"subscription_id": sid, "op": "enter" if prev is None else "update",
                                 "value": y, "seq": seq, "item_key": key_text(key), "item_x": x})
            for key, (x, y) in before.items():
                if key not in after:
                    rows.append({"subscription_id": sid, "op": "leave", "value": y, "seq": seq,
                                 "item_key": key_text(key), "item_x": x})
        self.counters["rows"] += len(rows)
        return rows

    def deliver(self, messages: pa.Table) -> pa.Table:
        """The unicast rows (:data:`UNICAST_ITEMS_SCHEMA`) a table of reformulated top-k messages
        (``RANGE_MESSAGE_SCHEMA``: op PUT / DELETE, k, new_value, item_key, item_x, the rectangle) causes."""
        parse = self.key_type
        rows: list[dict] = []
        names = ("op", "k", "new_value", "item_key", "item_x", "inner_l", "inner_r", "outer_l", "outer_r",
                 "group_id")
        for seq, c in _by_seq(messages, names):
            msgs = [(k, il, ir, ol, orr, parse(key), x, None if op == "DELETE" or _null(y) else y)
                    for op, k, y, key, x, il, ir, ol, orr in zip(c["op"], c["k"], c["new_value"], c["item_key"],
                                                                 c["item_x"], c["inner_l"], c["inner_r"],
                                                                 c["outer_l"], c["outer_r"])]
            gid = c["group_id"][0] if c["group_id"][0] is not None else self.group_id
            for r in self.receive(msgs, seq):
                r["group_id"] = gid
                rows.append(r)
        return _rows_table(rows, self.group_id)


# -------------------------------------------------------------------------------------------------- DISTINCT
class _RangeRegistry(_Counting):
    """Subscribers over ``[x1, x2]`` behind one ``SubscriptionPoints`` index (DISTINCT, aggregates):
    registration and removal; an ``x1 > x2`` subscription stays outside the index with an empty
    result. Subclasses keep per-slot state and drop it in :meth:`_forget`."""

    def __len__(self) -> int:
        return len(self.points) + len(self._empty)

    def __contains__(self, sid) -> bool:
        return sid in self.points or sid in self._empty

    def _register(self, ids, x1, x2, results=None):
        """Add the subscriptions (all checked first): ``(ids, x1, x2, sel, slots)`` with ``sel`` the
        positions that went into the index and ``slots`` their slots."""
        ids = _ids(ids)
        x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
        x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
        if not len(ids) == x1.size == x2.size:
            raise ValueError(f"length mismatch: {len(ids)} ids, {x1.size} x1, {x2.size} x2")
        if results is not None and len(results) != len(ids):
            raise ValueError(f"length mismatch: {len(ids)} ids, {len(results)} results")
        _check_new(ids, self)
        empty = ~(x1 <= x2)
        sel = np.flatnonzero(~empty)
        slots = self.points.add([ids[i] for i in sel.tolist()], x1[sel], x2[sel])
        if sel.size > 1:
            self.points.index.rebuild()
        for i in np.flatnonzero(empty).tolist():
            self._empty[ids[i]] = (float(x1[i]), float(x2[i]))
        return ids, x1, x2, sel, slots

    def remove(self, ids) -> None:
        ids = _ids(ids)
        unknown = [s for s in ids if s not in self]
        if unknown:
            raise UnknownSubscription(f"unknown subscription id {unknown[0]!r}")
        gone = [s for s in ids if s in self._empty]
        for s in gone:
            del self._empty[s]
        self._forget(self.points.remove([s for s in ids if s not in gone]))

    def _forget(self, slots: np.ndarray) -> None:
        raise NotImplementedError  # abstract: the subclass's per-slot state


class DistinctSubscribers(_RangeRegistry):
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
        for seq, c in _by_seq(messages, names):
            msgs = [(op.upper(), t if t is not None else v, il, ir, ol, orr)
                    for op, t, v, il, ir, ol, orr in zip(c["op"], c["item_text"], c["new_value"], c["inner_l"],
                                                         c["inner_r"], c["outer_l"], c["outer_r"])]
            gid = c["group_id"][0] if c["group_id"][0] is not None else self.group_id
            for r in self.receive(msgs, seq):
                r["group_id"] = gid
                rows.append(r)
        return _rows_table(rows, self.group_id)


# -------------------------------------------------------------------------------------------------- aggregates
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


class AggSubscribers(_RangeRegistry):
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

    def add(self, ids, x1, x2, core=None) -> None:
        """Register subscribers with their current state from ``core`` (a ``RangeAggCore``), else empty."""
        ids, x1, x2, sel, slots = self._register(ids, x1, x2)
        self._fit()
        if core is not None and slots.size:
            c, s = core.states(x1[sel], x2[sel])
            self.counts[slots] = c
            self.sums[slots] = s
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

    def receive(self, messages: Iterable, seq: int) -> list[dict]:
        """Apply one seq's messages (``range_agg.Message`` fields: x, d_count, d_sum) to the ranges holding
        their X (000 §4); one ``update`` row per subscription whose value changed, in subscription order."""
        hits = []
        for x, dc, ds in messages:
            slots = self.points.index.stab(x)      # the rectangle (-inf, X] x [X, +inf)
            self._reached(int(slots.size))
            if slots.size:
                hits.append((slots, int(dc), exact(float(ds))))
        if not hits:
            return []
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
        rows = [{"subscription_id": sid, "op": "update", "seq": seq, "value": None if v != v else v}
                for sid, v in zip(self.points.ids_of(idx).tolist(), new.tolist())]
        self.counters["notified"] += len(rows)
        self.counters["rows"] += len(rows)
        return rows

    def deliver(self, messages: pa.Table) -> pa.Table:
        """The unicast rows a table of reformulated aggregate messages (op DELTA, X in ``inner_l``,
        ``d_count``, D_SUM in ``new_value``) causes."""
        rows: list[dict] = []
        for seq, c in _by_seq(messages, ("inner_l", "d_count", "new_value", "group_id")):
            gid = c["group_id"][0] if c["group_id"][0] is not None else self.group_id
            for r in self.receive(zip(c["inner_l"], c["d_count"], c["new_value"]), seq):
                r["group_id"] = gid
                rows.append(r)
        return _rows_table(rows, self.group_id)


def subscribers_from_group(group, **kwargs):
    """The subscriber side of a range-class group (``range_groups``), seeded from its core."""
    cls = {"RANGE_TOPK": TopkSubscribers, "RANGE_DISTINCT": DistinctSubscribers,
           "RANGE_AGG": AggSubscribers}[group.kind]
    return cls.from_group(group, **kwargs)


# -------------------------------------------------------------------------------------------------- EXPLAIN
class RegionStats:
    """Influence-region sizes of the messages a group emitted (every mode, replays included).

    A message is a rectangle ``(OUTER_L, INNER_L] x [INNER_R, OUTER_R)`` of the subscription space
    (002 §II-C: for top-k a tile of an influence region; 000 §4: for DISTINCT the Mar, for aggregates
    the quadrant ``(-inf, X] x [X, +inf)``).  Kept, each summed over the messages where it is finite:
    the x1 side ``INNER_L - OUTER_L``, the x2 side ``OUTER_R - INNER_R``, the X extent
    ``OUTER_R - OUTER_L`` (the widest range the message reaches; the Mar width for DISTINCT) and the area
    (side x side); and the last ``sample`` rectangles, whose reach (the subscriptions inside) EXPLAIN
    counts in the subscription index.
    """

    def __init__(self, sample: int = 1024):
        self.messages = 0
        self.sums = {"x1 side": 0.0, "x2 side": 0.0, "extent": 0.0, "area": 0.0}
        self.finite = {"x1 side": 0, "x2 side": 0, "extent": 0, "area": 0}
        self.recent: deque = deque(maxlen=sample)

    def observe(self, k, inner_l: float, inner_r: float, outer_l: float, outer_r: float) -> None:
        self.messages += 1
        sums, finite = self.sums, self.finite
        a = inner_l - outer_l
        b = outer_r - inner_r
        for name, v in (("x1 side", a), ("x2 side", b), ("extent", outer_r - outer_l), ("area", a * b)):
            if v != _INF and v == v:
                sums[name] += v
                finite[name] += 1
        self.recent.append((k, inner_l, inner_r, outer_l, outer_r))

    def mean(self, name: str) -> float | None:
        """Mean of one measure over the messages where it is finite (None: none is)."""
        return self.sums[name] / self.finite[name] if self.finite[name] else None

    def extent(self, name: str = "X extent") -> str:
        """The means as EXPLAIN prints them; ``name`` is what the X extent is called."""
        def part(label, key, formula):
            m = self.mean(key)
            if m is None:
                return f"{label} {formula} " + ("unbounded" if self.messages else "-")
            return f"{label} {formula} mean {m:.4g} over {self.finite[key]}"
        return "; ".join([f"{self.messages} messages", part(name, "extent", "(OUTER_R - OUTER_L)"),
                          part("area", "area", "(x1 side * x2 side)"),
                          part("x1 side", "x1 side", "(INNER_L - OUTER_L)"),
                          part("x2 side", "x2 side", "(OUTER_R - INNER_R)")])

    def reach(self, count: Callable) -> tuple[float, int, int]:
        """(mean, max, n) subscriptions reached per message over the sampled rectangles;
        ``count(k, inner_l, inner_r, outer_l, outer_r)`` counts one in the subscription index."""
        n = len(self.recent)
        if not n:
            return 0.0, 0, 0
        reached = [count(*r) for r in self.recent]
        return sum(reached) / n, max(reached), n
