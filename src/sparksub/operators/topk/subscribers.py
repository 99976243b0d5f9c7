"""The network and the subscribers of RANGE_TOPK (002 §II-A), for ``engine.deliver`` and the group's unicast
mode; what the range classes share is in ``shared/range_classes.py`` (its docstring: the message rectangle,
the use).

A message with object o replaces o's (x, y) if the local list holds o, else the list becomes the top k of
list ∪ {o}; ``y = None`` (op ``DELETE``) removes o.  Messages are applied in order (002 footnote 6).  A
subscriber whose list changed over a seq gets ``enter`` / ``update`` / ``leave`` rows per item, from its
list before and after the seq (entries in the new list's order, then leaves in the old list's order).

How ``deliver`` agrees with the group's 'unicast' mode: the reformulated mode runs Paint-Batch over the
whole publish batch (002 §IV-A; every message carries the batch's last seq) and subscribers are exact only
at the batch's end, while 'unicast' reports every update.  ``deliver`` therefore reports each subscriber's
*net* change over the batch at that seq: with L0 / L1 a subscriber's list before / after the batch,
``deliver`` emits the rows of the diff L0 -> L1, which is what replaying the batch's unicast rows on L0
gives (the unicast rows of a subscriber whose list changed and changed back net to nothing, and
``deliver`` is silent for it).  So: equal final lists, and the same set of (subscriber, item, op, x, y) net
changes per batch.  Given per-update messages (one seq per update) ``deliver`` returns the unicast rows
exactly.

A top-k subscriber only hears messages painted for its k, so a group's subscribers accept only the k
values the group paints for (the engine rebuilds the group, and reseeds, when the set of k values
changes).  Pure (numpy / pyarrow).
"""
from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable, Iterable
from operator import itemgetter

import numpy as np
import pyarrow as pa

from sparksub.errors import UnknownSubscription
from sparksub.operators.range_min.delivery import SubscriptionPoints, message_rectangle
from sparksub.operators.shared.arrays import id_list
from sparksub.operators.shared.range_classes import Counting, by_seq, check_new, is_null, key_text, rows_table

__all__ = ["TopkSubscribers"]

_INF = math.inf
_NINF = -math.inf


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


class TopkSubscribers(Counting):
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

    @classmethod
    def from_seed(cls, group_id, descending, key_type: Callable, ids, x1, x2, k, seed) -> TopkSubscribers:
        """A subscription shard's subscribers (``shared/range_shards.py``): ``seed`` their lists [(key, x, y)]
        as of the shard's base; any k (the rows' group paints for every k of the group)."""
        subs = cls(descending, key_type=key_type, group_id=group_id)
        subs.add(ids, x1, x2, k, results=seed)
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
        ids = id_list(ids)
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
        check_new(ids, self)
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
        ids = id_list(ids)
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
        # a subscriber lives in the part of its k: each part's messages, in order, go through its index
        # in one query (PointIndex2D.query_many), which keeps every subscriber's messages in order
        by_part: dict = {}
        parts = self._parts
        for m in messages:
            k = m[0]
            for part in parts.values() if k is None else (parts.get(int(k)),):
                if part is not None:
                    by_part.setdefault(part, []).append(m)
        rank = self._rank
        reached = self._reached
        changed: list = []             # (row-order position, part, slot, the list before the seq)
        for part, msgs in by_part.items():
            # message_rectangle's query, written out (a call per message costs more than the rest of
            # routing one): OUTER_L < x1 <= INNER_L and INNER_R <= x2 < OUTER_R, an infinite outer bound closed
            found, offsets = part.points.index.query_many(
                [(ol, ol == _NINF, il, True, ir, True, orr, orr == _INF) for _, il, ir, ol, orr, _, _, _ in msgs])
            if not found.size:
                for _ in msgs:
                    reached(0)
                continue
            found = found.tolist()
            lists, kk = part.lists, part.k
            before: dict = {}          # slot -> its list before the seq
            for n, (_, _, _, _, _, key, x, y) in enumerate(msgs):
                a, b = offsets[n], offsets[n + 1]
                reached(b - a)
                entry = None if y is None else (rank(y), key, x, y)
                for s in found[a:b]:
                    lst = lists[s]
                    if s not in before:
                        before[s] = lst[:]
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
            pos = part.pos
            changed += [(pos[s], part, s, old) for s, old in before.items() if lists[s] != old]
        if not changed:
            return []
        changed.sort(key=itemgetter(0))
        # the ids of the notified subscribers, one lookup per part
        ids: dict = {}
        for part in {c[1] for c in changed}:
            slots = [c[2] for c in changed if c[1] is part]
            ids.update(zip(((part, s) for s in slots), part.points.ids_of(slots).tolist()))
        rows: list[dict] = []
        add = rows.append
        for _, part, s, old in changed:
            sid = ids[(part, s)]
            was = {e[1]: e for e in old}
            for e in part.lists[s]:
                key = e[1]
                prev = was.pop(key, None)
                if prev is None or prev[2] != e[2] or prev[3] != e[3]:
                    add({"subscription_id": sid, "op": "enter" if prev is None else "update", "value": e[3],
                         "seq": seq, "item_key": key_text(key), "item_x": e[2]})
            for e in old:              # what is left of the old list left it
                if e[1] in was:
                    add({"subscription_id": sid, "op": "leave", "value": e[3], "seq": seq,
                         "item_key": key_text(e[1]), "item_x": e[2]})
        self.counters["notified"] += len(changed)
        self.counters["rows"] += len(rows)
        return rows

    def deliver(self, messages: pa.Table) -> pa.Table:
        """The unicast rows (:data:`UNICAST_ITEMS_SCHEMA`) a table of reformulated top-k messages
        (``RANGE_MESSAGE_SCHEMA``: op PUT / DELETE, k, new_value, item_key, item_x, the rectangle) causes."""
        parse = self.key_type
        rows: list[dict] = []
        names = ("op", "k", "new_value", "item_key", "item_x", "inner_l", "inner_r", "outer_l", "outer_r",
                 "group_id")
        for seq, c in by_seq(messages, names):
            msgs = [(k, il, ir, ol, orr, parse(key), x, None if op == "DELETE" or is_null(y) else y)
                    for op, k, y, key, x, il, ir, ol, orr in zip(c["op"], c["k"], c["new_value"], c["item_key"],
                                                                 c["item_x"], c["inner_l"], c["inner_r"],
                                                                 c["outer_l"], c["outer_r"])]
            gid = c["group_id"][0] if c["group_id"][0] is not None else self.group_id
            for r in self.receive(msgs, seq):
                r["group_id"] = gid
                rows.append(r)
        return rows_table(rows, self.group_id)
