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
changes).

How the lists are kept (issue 16 item 4: a subscription shard of a large group should hold its share, not
most of it): flat, per k, in slot × k arrays -- y, x and a key code into one key table of the subscribers
(code -> key, key -> code) -- with a length per slot; about 20 bytes an item where a tuple of Python floats
was ~170.  A seq's messages are applied to the lists of the subscribers they reach, read out as Python
lists for the seq (the §II-A protocol on ≤ k items) and written back when changed.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable, Iterable
from itertools import pairwise
from operator import itemgetter

import numpy as np
import pyarrow as pa

from sparksub.errors import UnknownSubscription
from sparksub.operators.range_min.delivery import SubscriptionPoints, message_rectangle
from sparksub.operators.shared.arrays import id_list
from sparksub.operators.shared.range_classes import (
    Counting,
    by_seq,
    check_new,
    is_null,
    key_text,
)
from sparksub.operators.shared.schemas import UNICAST_ITEMS_SCHEMA
from sparksub.process_memory import release_freed_memory

__all__ = ["TopkLists", "TopkSubscribers"]

_INF = math.inf
_NINF = -math.inf


class TopkLists:
    """Lists of ``(key, x, y)`` items kept flat, as a read-only sequence of lists: the items of list i are
    ``offsets[i]:offsets[i + 1]`` of ``key_codes`` (into ``keys``, one object per distinct key), ``xs`` and ``ys``.
    A subscription shard's seed (``group.shard_seed``): a 100,000-subscription shard's top-5 lists hold 500,000
    items but ~20,000 distinct keys, and a Python object per item key was most of a worker's peak while it built
    the shard from them (what the allocator keeps after a build counts in the worker's memory)."""

    def __init__(self, lists):
        lists = lists if isinstance(lists, list) else list(lists)
        self.offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        self.offsets[1:] = np.cumsum([len(items) for items in lists])
        code_of: dict = {}
        self.key_codes = np.array([code_of.setdefault(item[0], len(code_of)) for items in lists for item in items],
                                  dtype=np.int32)
        self.keys = np.empty(len(code_of), dtype=object)
        self.keys[:] = list(code_of)
        self.xs = np.array([item[1] for items in lists for item in items], dtype=np.float64)
        self.ys = np.array([item[2] for items in lists for item in items], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> list[tuple]:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return list(zip(self.keys[self.key_codes[a:b]].tolist(), self.xs[a:b].tolist(), self.ys[a:b].tolist()))


class _KeyTable:
    """The object keys the subscribers' lists hold, as int32 codes: ``keys[code]`` and ``code_of(key)``.  Codes
    are handed out as keys arrive and never reused while the table lives; :meth:`compacted` drops the keys no
    list holds any more (a table that only grew would keep every key a message ever carried)."""

    __slots__ = ("codes", "keys")

    def __init__(self, keys=()):
        self.keys: list = list(keys)
        self.codes: dict = {key: code for code, key in enumerate(self.keys)}

    def __len__(self) -> int:
        return len(self.keys)

    def code_of(self, key) -> int:
        code = self.codes.get(key)
        if code is None:
            code = self.codes[key] = len(self.keys)
            self.keys.append(key)
        return code

    def compacted(self, held: np.ndarray) -> tuple:
        """A table of the keys of codes ``held`` (ascending, unique) and each old code's new one (-1: dropped)."""
        remap = np.full(len(self.keys), -1, dtype=np.int32)
        remap[held] = np.arange(held.size, dtype=np.int32)
        keys = self.keys
        return _KeyTable(keys[c] for c in held.tolist()), remap


class _KPart:
    """The subscriptions with one k: their point index and, by slot, their row-order position and top-k list,
    flat (module docstring): item j of slot s's list, best first, is ``(ys[s, j], xs[s, j], key_codes[s, j])``
    for j < ``lengths[s]``."""

    __slots__ = ("k", "key_codes", "lengths", "points", "pos", "xs", "ys")

    def __init__(self, k: int):
        self.k = k
        self.points = SubscriptionPoints()
        self.pos = np.zeros(0, dtype=np.int64)              # slot -> position (the order rows come out in)
        self.lengths = np.zeros(0, dtype=np.int32)
        self.ys = np.zeros((0, k), dtype=np.float64)
        self.xs = np.zeros((0, k), dtype=np.float64)
        self.key_codes = np.zeros((0, k), dtype=np.int32)

    def fit(self) -> None:
        """The columns as long as the index's slots (which grow by doubling)."""
        cap, have = self.points.capacity, self.lengths.size
        if have >= cap:
            return
        grow = cap - have
        self.pos = np.concatenate([self.pos, np.zeros(grow, dtype=np.int64)])
        self.lengths = np.concatenate([self.lengths, np.zeros(grow, dtype=np.int32)])
        self.ys = np.concatenate([self.ys, np.zeros((grow, self.k), dtype=np.float64)])
        self.xs = np.concatenate([self.xs, np.zeros((grow, self.k), dtype=np.float64)])
        self.key_codes = np.concatenate([self.key_codes, np.zeros((grow, self.k), dtype=np.int32)])

    def read(self, slots: list, keys: list, descending: bool) -> list:
        """The lists of ``slots`` as Python lists of ``(rank y, key, x, y)``, best first (what the §II-A protocol
        and the row diff work on; tuples compare as the server ranks: by y, ties by key)."""
        lengths = self.lengths[slots].tolist()
        ys, xs, codes = self.ys[slots].tolist(), self.xs[slots].tolist(), self.key_codes[slots].tolist()
        sign = -1.0 if descending else 1.0
        return [[(sign * y, keys[c], x, y) for y, x, c in zip(ys[i][:n], xs[i][:n], codes[i][:n])]
                for i, n in enumerate(lengths)]

    def write(self, slots: np.ndarray, lengths: np.ndarray, ys: np.ndarray, xs: np.ndarray,
              codes: np.ndarray) -> None:
        """Set the lists of ``slots`` from flat items (``lengths[i]`` items of slot i, in order, best first)."""
        if np.any(lengths > self.k):
            raise ValueError(f"a list longer than k = {self.k}")
        self.lengths[slots] = lengths
        row = np.repeat(slots, lengths)
        col = np.arange(row.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        self.ys[row, col], self.xs[row, col], self.key_codes[row, col] = ys, xs, codes

    def write_lists(self, slots: list, lists: list, table: _KeyTable) -> None:
        """Set the lists of ``slots`` from Python lists of ``(rank y, key, x, y)``."""
        items = [e for lst in lists for e in lst]
        code_of = table.code_of
        self.write(np.asarray(slots, dtype=np.int64), np.array([len(lst) for lst in lists], dtype=np.int64),
                   np.array([e[3] for e in items], dtype=np.float64), np.array([e[2] for e in items], dtype=np.float64),
                   np.array([code_of(e[1]) for e in items], dtype=np.int32))

    def held_codes(self) -> np.ndarray:
        """The key codes of every item in a list (a freed slot's length is 0)."""
        return self.key_codes[np.arange(self.k) < self.lengths[:, None]]


class TopkSubscribers(Counting):
    """Range top-k subscribers (002 §II-A) behind a per-k subscription index; see the module docstring.

    ``descending``: the group's ``ORDER BY y DESC``.  ``key_type`` parses the ``item_key`` text of a
    message back into the object key the server ranks ties by (``str``, ``int`` or a callable): ties in
    y are broken by the key, so an int-keyed table must rank 2 before 10.  ``ks``: the k values the
    publisher paints for (None: any); :meth:`add` refuses other k values, which no message would reach.
    """

    kind = "RANGE_TOPK"
    #: the key table is compacted when it holds this many keys more than twice those held after the last time
    KEY_TABLE_SLACK = 4096
    #: messages :meth:`deliver` turns into Python objects at a time (whole seqs)
    DELIVER_CHUNK_MESSAGES = 4096

    def __init__(self, descending: bool = False, *, key_type: Callable = str, ks: Iterable[int] | None = None,
                 group_id: str | None = None):
        self.descending = bool(descending)
        self.key_type = key_type
        self.ks = None if ks is None else frozenset(int(k) for k in ks)
        self.group_id = group_id
        self._parts: dict[int, _KPart] = {}
        self._keys = _KeyTable()
        self._keys_after_compaction = 0
        self._empty: dict = {}             # sid -> (k, position) of the x1 > x2 subscriptions, kept off the index
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
        subs.add_seeded(ids, x1, x2, k, seed)
        release_freed_memory()
        return subs

    def add_seeded(self, ids, x1, x2, k, seed) -> None:
        """Subscriptions with their lists as ``seed`` gives them (``group.shard_seed``: as of now), the way every
        range class's subscribers take seeded subscriptions (a shard's base, a stream shard's change)."""
        self.add(ids, x1, x2, k, results=seed)

    def __len__(self) -> int:
        return sum(len(p.points) for p in self._parts.values()) + len(self._empty)

    def __contains__(self, sid) -> bool:
        return sid in self._empty or any(sid in p.points for p in self._parts.values())

    def _locate(self, ids: list) -> tuple:
        """Per id its part's k (0: none) and slot (-1: not in an index), one vectorised lookup per part."""
        ks = np.zeros(len(ids), dtype=np.int64)
        slots = np.full(len(ids), -1, dtype=np.int64)
        if ids and all(isinstance(sid, str) for sid in ids):
            for k, part in self._parts.items():
                found = part.points.lookup(ids)
                hit = found >= 0
                ks[hit], slots[hit] = k, found[hit]
        return ks, slots

    def _sorted_flat(self, lists) -> tuple:
        """Lists of ``(key, x, y)`` items (a :class:`TopkLists` or any sequence of lists) as flat sorted items:
        (lengths, ys, xs, key codes), each list best first -- by rank y, ties by key (then x, y: as tuples sort)
        -- the keys coded in the key table."""
        flat = lists if isinstance(lists, TopkLists) else TopkLists(lists)
        lengths = np.diff(flat.offsets)
        if not flat.key_codes.size:
            return lengths, flat.ys, flat.xs, np.zeros(0, dtype=np.int32)
        distinct = flat.keys.tolist()
        key_order = np.empty(len(distinct), dtype=np.int64)   # a tie in y goes to the lower key
        key_order[sorted(range(len(distinct)), key=distinct.__getitem__)] = np.arange(len(distinct))
        owner = np.repeat(np.arange(lengths.size), lengths)
        rank = -flat.ys if self.descending else flat.ys
        order = np.lexsort((flat.ys, flat.xs, key_order[flat.key_codes], rank, owner))
        codes = np.array([self._keys.code_of(key) for key in distinct], dtype=np.int32)[flat.key_codes]
        return lengths, flat.ys[order], flat.xs[order], codes[order]

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
        known = self._locate(ids)[1] >= 0
        if known.any() or len(set(ids)) != len(ids) or any(sid in self._empty for sid in ids):
            check_new(ids, self)       # names the first id registered or repeated
        empty = ~(x1 <= x2)
        if core is not None:
            results = TopkLists(core.top_k(a, b, kk) if ok else []
                                for a, b, kk, ok in zip(x1.tolist(), x2.tolist(), ks.tolist(), (~empty).tolist()))
        lengths, ys, xs, codes = self._sorted_flat(results if results is not None else [[]] * len(ids))
        # a subscriber's items are ys[starts[i]:starts[i] + lengths[i]] (and xs, codes)
        starts = np.cumsum(lengths) - lengths
        if (lengths[~empty] > ks[~empty]).any():
            raise ValueError("a subscriber's list is longer than its k")
        pos = np.arange(self._next_pos, self._next_pos + len(ids))
        self._next_pos += len(ids)
        for i in np.flatnonzero(empty).tolist():
            self._empty[ids[i]] = (int(ks[i]), int(pos[i]))
        for kk in np.unique(ks[~empty]).tolist():
            sel = np.flatnonzero((ks == kk) & ~empty)
            part = self._parts.get(kk)
            if part is None:
                part = self._parts[kk] = _KPart(kk)
            slots = part.points.add([ids[i] for i in sel.tolist()], x1[sel], x2[sel])
            if sel.size > 1:
                part.points.index.rebuild()   # a bulk add: all of it into the static part of the index
            part.fit()
            part.pos[slots] = pos[sel]
            n = lengths[sel]
            items = np.repeat(starts[sel], n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
            part.write(slots, n, ys[items], xs[items], codes[items])
        # the seeds' keys are held: the table grows past them before a compaction has anything to drop
        self._keys_after_compaction = len(self._keys)

    def remove(self, ids) -> None:
        ids = id_list(ids)
        ks, slots = self._locate(ids)
        for sid, slot in zip(ids, slots.tolist()):
            if slot < 0 and sid not in self._empty:
                raise UnknownSubscription(f"unknown subscription id {sid!r}")
        for kk, part in self._parts.items():
            mine = [sid for sid, pk in zip(ids, ks.tolist()) if pk == kk]
            if mine:
                part.lengths[part.points.remove(mine)] = 0
        for sid, slot in zip(ids, slots.tolist()):
            if slot < 0:
                del self._empty[sid]

    def reseed(self, core) -> None:
        """Every subscriber's list recomputed from ``core`` (after the subscribers fell out of step)."""
        for part in self._parts.values():
            slots = part.points.live_slots()
            lists = TopkLists(core.top_k(a, b, part.k)
                              for a, b in zip(part.points.x1[slots].tolist(), part.points.x2[slots].tolist()))
            part.write(slots, *self._sorted_flat(lists))

    def result(self, sid) -> list[tuple]:
        """The subscriber's list [(key, x, y)], best first."""
        ks, slots = self._locate([sid])
        if slots[0] < 0:
            if sid in self._empty:
                return []
            raise UnknownSubscription(f"unknown subscription id {sid!r}")
        part = self._parts[int(ks[0])]
        return [(key, x, y) for _, key, x, y in part.read([int(slots[0])], self._keys.keys, self.descending)[0]]

    def count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        """How many subscriptions a message (k, rectangle) reaches (index count; k None = every k)."""
        parts = self._parts.values() if k is None else [p for p in (self._parts.get(int(k)),) if p]
        rect = message_rectangle(inner_l, inner_r, outer_l, outer_r)
        return sum(p.points.index.count(*rect) for p in parts)

    def receive(self, messages: Iterable, seq: int) -> list[dict]:
        """Apply one seq's messages (``topk.TopkMessage`` fields: k, inner_l, inner_r, outer_l, outer_r,
        key, x, y; y None = deletion), in order, to the subscribers each reaches; return the rows of
        the subscribers whose list changed over the seq (module docstring)."""
        rows = _Rows()
        self._receive(messages, seq, rows)
        return rows.dicts()

    def _receive(self, messages: Iterable, seq: int, rows: _Rows) -> None:
        """:meth:`receive`, its rows added to ``rows``."""
        # a subscriber lives in the part of its k: each part's messages, in order, go through its index
        # in one query (PointIndex2D.query_many), which keeps every subscriber's messages in order
        by_part: dict = {}
        parts = self._parts
        for m in messages:
            k = m[0]
            for part in parts.values() if k is None else (parts.get(int(k)),):
                if part is not None:
                    by_part.setdefault(part, []).append(m)
        rank = -1.0 if self.descending else 1.0
        reached = self._reached
        changed: list = []             # (row-order position, part, slot, the list before the seq, after it)
        for part, msgs in by_part.items():
            # message_rectangle's query, written out (a call per message costs more than the rest of
            # routing one): OUTER_L < x1 <= INNER_L and INNER_R <= x2 < OUTER_R, an infinite outer bound closed
            found, offsets = part.points.index.query_many(
                [(ol, ol == _NINF, il, True, ir, True, orr, orr == _INF) for _, il, ir, ol, orr, _, _, _ in msgs])
            if not found.size:
                for _ in msgs:
                    reached(0)
                continue
            # the reached subscribers' lists as Python lists for the seq (module docstring)
            touched = np.unique(found).tolist()
            lists = dict(zip(touched, part.read(touched, self._keys.keys, self.descending)))
            before = {s: lst[:] for s, lst in lists.items()}
            found = found.tolist()
            kk = part.k
            for n, (_, _, _, _, _, key, x, y) in enumerate(msgs):
                a, b = offsets[n], offsets[n + 1]
                reached(b - a)
                entry = None if y is None else (rank * y, key, x, y)
                for s in found[a:b]:
                    lst = lists[s]
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
            mine = [(s, before[s], lst) for s, lst in lists.items() if lst != before[s]]
            if mine:
                part.write_lists([c[0] for c in mine], [c[2] for c in mine], self._keys)
                pos = part.pos[[c[0] for c in mine]].tolist()
                changed += [(p, part, s, old, new) for p, (s, old, new) in zip(pos, mine)]
        if not changed:
            return
        self._compact_keys()
        changed.sort(key=itemgetter(0))
        # the ids of the notified subscribers, one lookup per part
        ids: dict = {}
        for part in {c[1] for c in changed}:
            slots = [c[2] for c in changed if c[1] is part]
            ids.update(zip(((part, s) for s in slots), part.points.ids_of(slots).tolist()))
        before_rows = len(rows)
        for _, part, s, old, new in changed:
            sid = ids[(part, s)]
            was = {e[1]: e for e in old}
            for e in new:
                key = e[1]
                prev = was.pop(key, None)
                if prev is None or prev[2] != e[2] or prev[3] != e[3]:
                    rows.add(sid, "enter" if prev is None else "update", e[3], seq, key_text(key), e[2])
            for e in old:              # what is left of the old list left it
                if e[1] in was:
                    rows.add(sid, "leave", e[3], seq, key_text(e[1]), e[2])
        self.counters["notified"] += len(changed)
        self.counters["rows"] += len(rows) - before_rows

    def _compact_keys(self) -> None:
        """Drop the keys no list holds from the key table once it grew well past what the lists hold."""
        if len(self._keys) <= 2 * self._keys_after_compaction + self.KEY_TABLE_SLACK:
            return
        held = np.unique(np.concatenate([np.zeros(0, dtype=np.int32)] +
                                        [p.held_codes() for p in self._parts.values()]))
        self._keys, remap = self._keys.compacted(held)
        for part in self._parts.values():
            live = np.arange(part.k) < part.lengths[:, None]
            part.key_codes[live] = remap[part.key_codes[live]]
            part.key_codes[~live] = 0
        self._keys_after_compaction = len(self._keys)

    def deliver(self, messages: pa.Table) -> pa.Table:
        """The unicast rows (:data:`UNICAST_ITEMS_SCHEMA`) a table of reformulated top-k messages
        (``RANGE_MESSAGE_SCHEMA``: op PUT / DELETE, k, new_value, item_key, item_x, the rectangle) causes."""
        # a few thousand messages at a time, whole seqs, each chunk's rows to Arrow before the next: a shard's
        # publish is ~80,000 messages and ~200,000 rows, which as Python objects all at once were a worker's
        # peak -- and what the allocator keeps after it (issue 16 item 4)
        tables = [self._deliver_seqs(chunk) for chunk in seq_chunks(messages, self.DELIVER_CHUNK_MESSAGES)]
        if len(tables) > 1:
            release_freed_memory()
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0] if tables else _Rows().table()

    def _deliver_seqs(self, messages: pa.Table) -> pa.Table:
        parse = self.key_type
        rows = _Rows()
        names = ("op", "k", "new_value", "item_key", "item_x", "inner_l", "inner_r", "outer_l", "outer_r",
                 "group_id")
        for seq, c in by_seq(messages, names):
            msgs = [(k, il, ir, ol, orr, parse(key), x, None if op == "DELETE" or is_null(y) else y)
                    for op, k, y, key, x, il, ir, ol, orr in zip(c["op"], c["k"], c["new_value"], c["item_key"],
                                                                 c["item_x"], c["inner_l"], c["inner_r"],
                                                                 c["outer_l"], c["outer_r"])]
            gid = c["group_id"][0] if c["group_id"][0] is not None else self.group_id
            start = len(rows)
            self._receive(msgs, seq, rows)
            rows.group_ids.extend([gid] * (len(rows) - start))
        return rows.table()


def seq_chunks(messages: pa.Table, size: int):
    """``messages`` in slices of about ``size`` rows, in ascending seq, never splitting a seq (``by_seq`` orders
    each seq's messages by ``msg_no``, which a slice keeps; with a null ``msg_no`` the table's row order, so the
    column is dropped and every slice falls back to it, as the whole table would)."""
    n = messages.num_rows
    if n <= size:
        if n:
            yield messages
        return
    if "msg_no" in messages.column_names and messages.column("msg_no").null_count:
        messages = messages.drop_columns(["msg_no"])
    seqs = messages.column("seq").to_numpy()
    if (np.diff(seqs) < 0).any():
        order = np.argsort(seqs, kind="stable")
        messages, seqs = messages.take(order), seqs[order]
    starts = np.flatnonzero(np.r_[True, seqs[1:] != seqs[:-1]])       # where each seq's rows begin
    # cut at the first seq start at or after each multiple of size
    cuts = np.unique(starts[np.minimum(np.searchsorted(starts, np.arange(size, n, size)), starts.size - 1)])
    bounds = [0] + [int(c) for c in cuts if c > 0] + [n]
    for a, b in pairwise(bounds):
        if b > a:
            yield messages.slice(a, b - a)


class _Rows:
    """Unicast rows as columns (a shard's output is hundreds of thousands of rows a publish: a dict per row
    was most of a shard task's memory at its peak)."""

    __slots__ = ("group_ids", "item_key", "item_x", "op", "seq", "subscription_id", "value")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.op)

    def add(self, sid, op: str, value, seq: int, item_key: str, item_x) -> None:
        self.subscription_id.append(sid)
        self.op.append(op)
        self.value.append(value)
        self.seq.append(seq)
        self.item_key.append(item_key)
        self.item_x.append(item_x)

    def dicts(self) -> list[dict]:
        return [{"subscription_id": sid, "op": op, "value": v, "seq": seq, "item_key": key, "item_x": x}
                for sid, op, v, seq, key, x in zip(self.subscription_id, self.op, self.value, self.seq,
                                                   self.item_key, self.item_x)]

    def table(self) -> pa.Table:
        """The rows as a table of ``UNICAST_ITEMS_SCHEMA`` (``item_text`` null: top-k rows carry none)."""
        n = len(self)
        given = {"subscription_id": self.subscription_id, "op": self.op, "value": self.value, "seq": self.seq,
                 "group_id": self.group_ids, "item_key": self.item_key, "item_x": self.item_x}
        return pa.Table.from_arrays([pa.array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type)
                                     for f in UNICAST_ITEMS_SCHEMA], schema=UNICAST_ITEMS_SCHEMA)
