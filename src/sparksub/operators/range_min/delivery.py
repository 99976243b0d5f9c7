"""Delivery of range-min notifications: the content-based network's role and the subscriber side.

DESIGN §5.  A range-min subscription ``[x1, x2]`` is the point ``(x1, x2)``; a reformulated message
``<NEW_VALUE, INNER_L, INNER_R, OUTER_L, OUTER_R>`` (dissertation C.5) matches it iff::

    (OUTER_L < x1 <= INNER_L) and (INNER_R <= x2 < OUTER_R)

where an infinite OUTER bound also admits an infinite subscription end (``OUTER_L = -inf`` admits
``x1 = -inf``; ``OUTER_R = +inf`` admits ``x2 = +inf``), i.e. the message is a rectangle in the
(x1, x2) plane.  Matching is one :class:`~sparksub.operators.shared.point_index.PointIndex2D` rectangle
query per message (C.9), never a scan of the subscriptions.

* :func:`message_rectangle` turns a message into the 8 query arguments.
* :class:`SubscriptionPoints` is the registry of one subscription group (ids <-> int slots, bounds,
  the point index).
* :func:`match` returns every (message, subscription) pair.
* :func:`unicast` is the server-side S-UN: one row per (update, affected subscription).
* :func:`multicast` is the server-side S-MN (000 §2.1.2): one message per (update, new value) listing the
  subscriptions it goes to (``targets``).
* :class:`Subscribers` plays the network and the subscribers for ``engine.deliver``: each subscriber
  applies its matching messages in order and reports a row when its value changed.  It takes the three
  reformulated variants (``operators/shared/variants.py``): S-CN's rectangles, S-MN's target lists, and
  CN+'s raw updates, which it routes as CN+'s network does (``cn_plus.py``, 000 §2.2.2).
* :func:`message_bytes` / :func:`unicast_bytes` / :func:`multicast_bytes` / :func:`multicast_tree_bytes`
  are the benchmark's traffic accounting.

Message columns (pyarrow Table, pandas DataFrame, or a mapping of arrays): ``inner_l, inner_r,
outer_l, outer_r`` (float64); for :func:`unicast` / :meth:`Subscribers.deliver` also ``seq`` (int64:
which update of the published batch), ``step`` (int8: 0, or 0 then 1 when an X-move was split into a
delete and an insert; default 0) and ``new_value`` (float64; NaN or null = the range became empty),
and optionally ``group_id`` (passed through).

Output of :func:`unicast` and :meth:`Subscribers.deliver`: a pyarrow Table with columns
``subscription_id`` (string), ``op`` (string, always ``'update'``), ``value`` (float64, null when the
range is empty), ``seq`` (int64) and, when the messages have one, ``group_id`` (taken from the last
matching message).  Rows are ordered by ``seq`` then by subscription slot.
"""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from sparksub.errors import DuplicateSubscription, InvalidSubscription, SparksubError, UnknownSubscription
from sparksub.operators.range_min.cn_plus import CnPlusNetwork
from sparksub.operators.shared.arrays import id_list
from sparksub.operators.shared.id_column import IdColumn
from sparksub.operators.shared.id_index import IdIndex
from sparksub.operators.shared.point_index import PointIndex2D

__all__ = [
    "MESSAGE_BYTES",
    "UNICAST_ROW_BYTES",
    "message_rectangle",
    "SubscriptionPoints",
    "match",
    "unicast",
    "Subscribers",
    "message_bytes",
    "unicast_bytes",
    "multicast",
    "multicast_groups",
    "multicast_order",
    "multicast_bytes",
    "multicast_tree_bytes",
    "MULTICAST_HEADER_BYTES",
    "MULTICAST_TARGET_BYTES",
    "MULTICAST_FANOUT",
]

#: Bytes of one reformulated message: 5 float64 fields (NEW_VALUE, INNER_L, INNER_R, OUTER_L,
#: OUTER_R) + the int64 ``seq`` = 6 * 8.  (``step`` and ``group_id`` are not counted: ``step`` is
#: implied by message order and the group is the routing TYPE field of the CBN substrate.)
MESSAGE_BYTES = 5 * 8 + 8

#: Bytes of one unicast notification: the subscription's address as an int64 + the new value
#: (float64) + ``seq`` (int64) = 3 * 8.  (The ``op`` is always ``'update'`` and is not counted.)
UNICAST_ROW_BYTES = 3 * 8


#: S-MN (000 §2.1.2): a multicast message is the new value and ``seq`` (2 x 8 bytes) plus the address of
#: every subscription it goes to (an int64 each): "the update message sent out by the server must list the
#: set of affected subscriptions".
MULTICAST_HEADER_BYTES = 2 * 8
MULTICAST_TARGET_BYTES = 8
#: the fan-out of S-MN's hierarchy of application-level multicasts (000 §5: "c is fixed at 10")
MULTICAST_FANOUT = 10


def multicast_bytes(n_messages: int, n_targets: int) -> int:
    """What the server sends for ``n_messages`` S-MN messages listing ``n_targets`` subscriptions in all."""
    return int(n_messages) * MULTICAST_HEADER_BYTES + int(n_targets) * MULTICAST_TARGET_BYTES


def multicast_tree_bytes(slots: np.ndarray, n_slots: int, fanout: int = MULTICAST_FANOUT,
                         gateways: int | None = None) -> int:
    """The bytes one S-MN message costs over the hierarchy of 000 §2.1.2: a tree of fan-out ``fanout``, the
    server at the root, every hop to a subtree holding targets carrying the header and the targets below it
    (a non-leaf node "would not be able to tell which children to forward the message to" otherwise).
    Leaves: the subscriptions by slot, or with ``gateways`` the overlay nodes hosting them (slot modulo
    ``gateways``; 000 §5 has 1,000 and does not count the gateway-to-subscriber hop).  Placement in the tree
    has nothing to do with the ranges, as 000 builds it from network coordinates."""
    slots = np.asarray(slots, dtype=np.int64)
    if not slots.size:
        return 0
    if gateways is not None:
        slots, n_slots = slots % gateways, gateways
    total, width = 0, 1
    while True:
        groups = np.unique(slots // width).size
        total += groups * MULTICAST_HEADER_BYTES + slots.size * MULTICAST_TARGET_BYTES
        if width * fanout >= max(int(n_slots), 1):
            return total
        width *= fanout


def message_bytes(n_messages: int) -> int:
    """Traffic of ``n_messages`` reformulated messages (``MESSAGE_BYTES`` = 48 bytes each)."""
    return int(n_messages) * MESSAGE_BYTES


def unicast_bytes(n_rows: int) -> int:
    """Traffic of ``n_rows`` unicast notifications (``UNICAST_ROW_BYTES`` = 24 bytes each)."""
    return int(n_rows) * UNICAST_ROW_BYTES


def message_rectangle(inner_l: float, inner_r: float, outer_l: float, outer_r: float) -> tuple:
    """The 8 :meth:`PointIndex2D.query` arguments of a message's rectangle.

    ``(x1_lo, x1_lo_closed, x1_hi, x1_hi_closed, x2_lo, x2_lo_closed, x2_hi, x2_hi_closed)`` for
    ``OUTER_L < x1 <= INNER_L`` and ``INNER_R <= x2 < OUTER_R``, with the outer bound closed when it is
    infinite (so that ``OUTER_L = -inf`` admits ``x1 = -inf`` and ``OUTER_R = +inf`` admits
    ``x2 = +inf``).

    >>> message_rectangle(40.0, 40.0, 20.0, 100.0)
    (20.0, False, 40.0, True, 40.0, True, 100.0, False)
    >>> message_rectangle(5.0, 5.0, float('-inf'), float('inf'))
    (-inf, True, 5.0, True, 5.0, True, inf, True)
    """
    inner_l, inner_r = float(inner_l), float(inner_r)
    outer_l, outer_r = float(outer_l), float(outer_r)
    return (outer_l, outer_l == -np.inf, inner_l, True,
            inner_r, True, outer_r, outer_r == np.inf)


# ---------------------------------------------------------------------------------- registry
def _to_float(values) -> np.ndarray:
    """float64 numpy array; nulls become NaN."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    if hasattr(values, "to_numpy"):                     # pandas
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.asarray(values, dtype=np.float64).reshape(-1)


class SubscriptionPoints:
    """Registry of one subscription group: string ids <-> int slots, bounds, and the point index.

    Slots are dense non-negative ints; freed slots are reused (most recently freed first).

    >>> sp = SubscriptionPoints()
    >>> sp.add(["a", "b"], [1.0, -np.inf], [3.0, 2.0]).tolist()
    [0, 1]
    >>> sp.bounds("b"), len(sp), "a" in sp
    ((-inf, 2.0), 2, True)
    """

    def __init__(self, bucket_size: int | None = None, merge_threshold: int | None = None):
        self._index_options = {"bucket_size": bucket_size, "merge_threshold": merge_threshold}
        self._index: PointIndex2D | None = None   # built on first use: the driver's registry never queries it
        self._ids = IdIndex()                     # id -> slot (no dict: issue 16, the driver's memory)
        self._cap = 0
        self._id_of = IdColumn()                  # slot -> id, packed UTF-8 (not a Python string per slot)
        self.x1 = np.empty(0, dtype=np.float64)
        self.x2 = np.empty(0, dtype=np.float64)
        self._next = 0           # slots [0, _next) have been handed out at least once
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, sid) -> bool:
        return isinstance(sid, str) and self._ids.lookup(np.array([sid], dtype=object), self._id_of)[0] >= 0

    def lookup(self, ids) -> np.ndarray:
        """The slot of each of ``ids``, -1 where not registered (one vectorised lookup)."""
        id_arr = np.empty(len(ids), dtype=object)
        id_arr[:] = list(ids)
        return self._ids.lookup(id_arr, self._id_of)

    def known(self, ids) -> np.ndarray:
        """Whether each of ``ids`` is registered."""
        return self.lookup(ids) >= 0

    def __iter__(self):
        return iter(self._id_of[self.live_slots()].tolist())

    def __getstate__(self):
        # a snapshot (pickled into a replica's base file) carries no point index: it is rebuilt on first use
        state = dict(self.__dict__)
        state["_index"] = None
        return state

    def __setstate__(self, state):
        # a base file written before the packed column held the ids as an object array
        if isinstance(state.get("_id_of"), np.ndarray):
            state["_id_of"] = IdColumn.from_objects(state["_id_of"])
        self.__dict__.update(state)

    @property
    def index(self) -> PointIndex2D:
        """The point index over the live subscriptions (``(x1, x2)`` points: 000 §3.3), built on first use."""
        if self._index is None:
            index = PointIndex2D(**self._index_options)
            slots = self.live_slots()
            if slots.size:
                index.add_many(slots, self.x1[slots], self.x2[slots])
            self._index = index
        return self._index

    @property
    def capacity(self) -> int:
        """Length of the slot-indexed columns (``x1``, ``x2``, ids); slots are < capacity."""
        return self._cap

    def _grow(self, need: int) -> None:
        if need <= self._cap:
            return
        cap = max(need, 2 * self._cap, 16)
        self._id_of.grow(cap)
        x1 = np.full(cap, np.nan)
        x1[: self._cap] = self.x1
        x2 = np.full(cap, np.nan)
        x2[: self._cap] = self.x2
        self.x1, self.x2, self._cap = x1, x2, cap

    def add(self, ids, x1, x2) -> np.ndarray:
        """Register subscriptions ``[x1[i], x2[i]]`` under ``ids[i]``; returns their slots.

        Raises :class:`DuplicateSubscription` naming the first id that is already registered or
        repeated in the batch, and :class:`InvalidSubscription` for a NaN bound or ``x1 > x2``;
        in both cases nothing is registered.
        """
        ids = id_list(ids)
        x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
        x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
        n = len(ids)
        if x1.size != n or x2.size != n:
            raise ValueError(f"length mismatch: {n} ids, {x1.size} x1, {x2.size} x2")
        if n == 0:
            return np.empty(0, dtype=np.int64)
        # --- validate everything before touching any state
        for sid in ids:
            if not isinstance(sid, str):
                raise TypeError(f"subscription ids must be strings, got {sid!r}")
        id_arr = np.empty(n, dtype=object)
        id_arr[:] = ids
        known = self._ids.lookup(id_arr, self._id_of) >= 0
        if known.any() or len(set(ids)) != n:
            seen: set = set()
            for i, sid in enumerate(ids):
                if known[i] or sid in seen:
                    raise DuplicateSubscription(f"duplicate subscription id {sid!r}")
                seen.add(sid)
        bad = np.isnan(x1) | np.isnan(x2) | (x1 > x2)
        if bad.any():
            i = int(np.argmax(bad))
            what = "NaN bound" if (np.isnan(x1[i]) or np.isnan(x2[i])) else "inverted range"
            raise InvalidSubscription(
                f"subscription {ids[i]!r}: {what} [{x1[i]!r}, {x2[i]!r}]")
        # --- allocate slots: reuse freed ones first, then fresh ones
        k = min(len(self._free), n)
        reused = np.array(self._free[len(self._free) - k:][::-1], dtype=np.int64)
        fresh = np.arange(self._next, self._next + (n - k), dtype=np.int64)
        slots = np.concatenate([reused, fresh])
        self._grow(self._next + (n - k))
        if self._index is not None:
            self._index.add_many(slots, x1, x2)    # may only fail on internal inconsistency
        del self._free[len(self._free) - k:]
        self._next += n - k
        self.x1[slots] = x1
        self.x2[slots] = x2
        self._id_of.set(slots, id_arr)
        self._ids.add(id_arr, slots, self._id_of)
        return slots

    def remove(self, ids) -> np.ndarray:
        """Unregister subscriptions; returns their (now free) slots.

        Raises :class:`UnknownSubscription` naming the first id that is not registered (or repeated
        in the batch); nothing is removed then.
        """
        ids = id_list(ids)
        if not ids:
            return np.empty(0, dtype=np.int64)
        slots = self.slots_of(ids)
        if len(set(ids)) != len(ids):
            seen: set = set()
            for sid in ids:
                if sid in seen:
                    raise UnknownSubscription(
                        f"unknown subscription id {sid!r} (repeated in the batch)")
                seen.add(sid)
        if self._index is not None:
            self._index.remove_many(slots)
        self._ids.remove(slots, self._id_of)
        self._id_of.remove(slots)
        self.x1[slots] = np.nan
        self.x2[slots] = np.nan
        self._free.extend(slots.tolist())
        return slots

    def slot(self, sid: str) -> int:
        """The slot of one id (:class:`UnknownSubscription` if absent)."""
        return int(self.slots_of([sid])[0])

    def slots_of(self, ids) -> np.ndarray:
        """Slots of several ids (:class:`UnknownSubscription` naming the first unknown one)."""
        ids = id_list(ids)
        slots = self.lookup(ids)
        if (slots < 0).any():
            raise UnknownSubscription(f"unknown subscription id {ids[int(np.argmax(slots < 0))]!r}")
        return slots

    def bounds(self, sid: str) -> tuple[float, float]:
        """``(x1, x2)`` of one subscription."""
        s = self.slot(sid)
        return float(self.x1[s]), float(self.x2[s])

    def ids_of(self, slots) -> np.ndarray:
        """Ids (object array of str) of the given slots."""
        return self._id_of[np.asarray(slots, dtype=np.int64)]

    def id_array(self, slots) -> pa.Array:
        """Ids of the given slots as an Arrow string array, read from the packed column without a Python string
        per id (notification rows)."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if self._id_of.plain:
            return self._id_of.take(slots).cast(pa.string())
        return pa.array(self.ids_of(slots).tolist(), type=pa.string())   # raises on an id with no UTF-8 form

    def live_slots(self) -> np.ndarray:
        """Slots of every registered subscription, ascending."""
        return np.sort(self._ids.slots())


# ---------------------------------------------------------------------------------- messages
def _num_rows(messages) -> int:
    if isinstance(messages, (pa.Table, pa.RecordBatch)):
        return messages.num_rows
    if isinstance(messages, Mapping):
        for v in messages.values():
            return len(v)
        return 0
    return len(messages)          # pandas DataFrame


def _has(messages, name: str) -> bool:
    if isinstance(messages, (pa.Table, pa.RecordBatch)):
        return name in messages.schema.names
    if isinstance(messages, Mapping):
        return name in messages
    return name in getattr(messages, "columns", ())


def _col(messages, name: str, dtype=np.float64, default=None) -> np.ndarray:
    """One message column as a numpy array; float nulls become NaN."""
    if not _has(messages, name):
        if default is None:
            raise KeyError(f"messages have no column {name!r}")
        return np.full(_num_rows(messages), default, dtype=dtype)
    c = messages[name] if not isinstance(messages, (pa.Table, pa.RecordBatch)) \
        else messages.column(name)
    if isinstance(c, (pa.Array, pa.ChunkedArray)):
        if np.dtype(dtype).kind == "f":
            c = c.cast(pa.float64()).to_numpy(zero_copy_only=False)
        else:
            if c.null_count:
                raise ValueError(f"message column {name!r} has nulls")
            c = c.to_numpy(zero_copy_only=False)
    elif hasattr(c, "to_numpy"):                                 # pandas
        c = c.to_numpy(dtype=dtype, na_value=np.nan) if np.dtype(dtype).kind == "f" \
            else c.to_numpy()
    return np.asarray(c, dtype=dtype).reshape(-1)


def _group_col(messages):
    if not _has(messages, "group_id"):
        return None
    c = messages.column("group_id") if isinstance(messages, (pa.Table, pa.RecordBatch)) \
        else messages["group_id"]
    if isinstance(c, pa.ChunkedArray):
        c = c.combine_chunks()
    if not isinstance(c, pa.Array):
        c = pa.array(np.asarray(c).tolist() if hasattr(c, "__len__") else c)
    return c


def match(points: SubscriptionPoints, messages) -> tuple[np.ndarray, np.ndarray]:
    """All (message, subscription) pairs: ``(msg_index, slots)``, both int64, equal length.

    One index query per message.  Pairs are ordered by message, then by slot.  A message with a NaN
    bound matches nothing.
    """
    il = _col(messages, "inner_l")
    ir = _col(messages, "inner_r")
    ol = _col(messages, "outer_l")
    orr = _col(messages, "outer_r")
    q = points.index.query
    outs, lens = [], np.zeros(il.size, dtype=np.int64)
    for i in range(il.size):
        s = q(*message_rectangle(il[i], ir[i], ol[i], orr[i]))
        if s.size:
            s.sort()
            outs.append(s)
            lens[i] = s.size
    if not outs:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.repeat(np.arange(il.size, dtype=np.int64), lens), np.concatenate(outs)


def _nan_eq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) | (np.isnan(a) & np.isnan(b))


def _resolve(points: SubscriptionPoints, messages):
    """Match, then collapse to one entry per (seq, slot).

    Returns ``(seq, slot, final_value, final_msg, both_steps)`` arrays sorted by (seq, slot), where
    ``final_*`` come from the last matching message in (step, message order) and ``both_steps`` says
    the subscription was matched in step 0 and in step 1 of that seq.
    """
    mi, sl = match(points, messages)
    e = np.empty(0, dtype=np.int64)
    if mi.size == 0:
        return e, e, np.empty(0), e, np.empty(0, dtype=bool)
    seq = _col(messages, "seq", np.int64, default=0)[mi]
    step = _col(messages, "step", np.int64, default=0)[mi]
    # sort pairs by (seq, slot, step, message index); the last of each group is the final one
    order = np.lexsort((mi, step, sl, seq))
    seq, sl, step, mi = seq[order], sl[order], step[order], mi[order]
    new_group = np.ones(seq.size, dtype=bool)
    new_group[1:] = (seq[1:] != seq[:-1]) | (sl[1:] != sl[:-1])
    starts = np.flatnonzero(new_group)
    lasts = np.append(starts[1:] - 1, seq.size - 1)
    both = (step[starts] == 0) & (step[lasts] == 1)
    value = _col(messages, "new_value")[mi[lasts]]
    return seq[starts], sl[starts], value, mi[lasts], both


def _old_values(old_value_of_step0, seqs: np.ndarray) -> np.ndarray:
    """``old_value`` per entry of ``seqs`` (NaN where unknown)."""
    out = np.full(seqs.size, np.nan)
    if old_value_of_step0 is None or seqs.size == 0:
        return out
    if isinstance(old_value_of_step0, Mapping):
        # Vectorised lookup: a matched row per affected subscription can be millions per batch.
        known = {s: v for s, v in old_value_of_step0.items() if v is not None}
        if not known:
            return out
        keys = np.fromiter(known.keys(), dtype=np.int64, count=len(known))
        vals = np.fromiter(known.values(), dtype=np.float64, count=len(known))
        order = np.argsort(keys)
        keys, vals = keys[order], vals[order]
        pos = np.minimum(np.searchsorted(keys, seqs), keys.size - 1)
        hit = keys[pos] == seqs
        out[hit] = vals[pos[hit]]
        return out
    arr = old_value_of_step0
    if isinstance(arr, (pa.Array, pa.ChunkedArray)):
        arr = arr.cast(pa.float64()).to_numpy(zero_copy_only=False)
    arr = np.asarray(arr, dtype=np.float64).reshape(-1)
    ok = (seqs >= 0) & (seqs < arr.size)
    out[ok] = arr[seqs[ok]]
    return out


def _rows(points: SubscriptionPoints, messages, seq, slots, value, msg) -> pa.Table:
    cols = {
        "subscription_id": points.id_array(slots),
        "op": pa.array(["update"] * int(slots.size), type=pa.string()),
        "value": pa.array(value.astype(np.float64), type=pa.float64(), mask=np.isnan(value)),
        "seq": pa.array(seq.astype(np.int64), type=pa.int64()),
    }
    g = _group_col(messages)
    if g is not None:
        cols["group_id"] = g.take(pa.array(msg, type=pa.int64()))
    return pa.table(cols)


def unicast(points: SubscriptionPoints, messages, old_value_of_step0=None) -> pa.Table:
    """Server-side S-UN: turn one batch's reformulated messages into one row per affected subscription.

    For each ``seq``, each matched subscription gets one row carrying the ``new_value`` of its last
    matching message in (step, message order).  A subscription matched in both step 0 and step 1 of
    an X-move whose final value equals the seq's ``old_value`` (the moved tuple's old Y) had a net
    no-op and gets no row.  ``old_value_of_step0`` maps seq -> old value: a dict, or an array indexed
    by seq (NaN / None / missing = unknown: no suppression for that seq).
    """
    seq, sl, value, msg = _unicast_entries(points, messages, old_value_of_step0)
    return _rows(points, messages, seq, sl, value, msg)


def _unicast_entries(points: SubscriptionPoints, messages, old_value_of_step0=None):
    """:func:`unicast`'s entries: ``(seq, slot, value, msg)`` arrays, one per (seq, changed subscription)."""
    seq, sl, value, msg, both = _resolve(points, messages)
    if seq.size:
        suppress = both & (value == _old_values(old_value_of_step0, seq))   # NaN old = unknown
        keep = ~suppress
        seq, sl, value, msg = seq[keep], sl[keep], value[keep], msg[keep]
    return seq, sl, value, msg


def multicast_groups(points: SubscriptionPoints, messages, old_value_of_step0=None):
    """S-MN's messages as arrays: ``(seq, value, msg, starts, slots)`` -- message i is ``seq[i]``, new
    ``value[i]`` (NaN = empty) to the subscriptions ``slots[starts[i]:starts[i + 1]]`` (ascending), ``msg[i]``
    the reformulated message it came from (for ``group_id`` / ``op``)."""
    return multicast_order(*_unicast_entries(points, messages, old_value_of_step0))


def multicast_order(seq, sl, value, msg):
    """S-UN's entries ``(seq, slot, value, msg)`` grouped into S-MN's messages, :func:`multicast_groups`' result:
    the messages by ``(seq, non-empty before empty, value)``, each one's slots ascending.  A group split into
    subscription shards merges its shards' entries through this same function, with the group's registry slots
    for ``sl`` (``subscription_shards.merge_multicast``), so both list targets in one order."""
    seq, sl, value, msg = (np.asarray(a) for a in (seq, sl, value, msg))
    if not seq.size:
        e = np.empty(0, dtype=np.int64)
        return e, np.empty(0), e, np.zeros(1, dtype=np.int64), e
    empty = np.isnan(value)
    vkey = np.where(empty, 0.0, value)
    order = np.lexsort((sl, vkey, empty, seq))
    seq, sl, vkey, empty, value, msg = seq[order], sl[order], vkey[order], empty[order], value[order], msg[order]
    new = np.ones(seq.size, dtype=bool)
    new[1:] = (seq[1:] != seq[:-1]) | (vkey[1:] != vkey[:-1]) | (empty[1:] != empty[:-1])
    first = np.flatnonzero(new)
    starts = np.append(first, seq.size)
    return seq[first], value[first], msg[first], starts, sl


def multicast(points: SubscriptionPoints, messages, old_value_of_step0=None) -> pa.Table:
    """Server-side S-MN (000 §2.1.2): "after the server computes all subscription updates, it checks to see
    which subset of the affected subscriptions share the same update message, and sends out this message to
    the multicast group consisting precisely of these subscriptions" -- one message per (seq, new value) of
    :func:`unicast`'s rows, its subscriptions listed in ``targets`` (a JSON array of ids, by slot).

    Columns: ``seq``, ``step`` (0), ``op`` (the reformulated messages' op, default ``NEW_MIN``),
    ``new_value`` (null = the range became empty), ``targets`` and, when the messages have one,
    ``group_id``; the rectangle columns are null (a multicast names its subscriptions instead)."""
    seq, value, msg, starts, sl = multicast_groups(points, messages, old_value_of_step0)
    n = int(seq.size)
    ids = points.ids_of(sl).tolist()
    targets = [json.dumps(ids[a:b]) for a, b in zip(starts[:-1].tolist(), starts[1:].tolist())]
    if _has(messages, "op"):
        texts = _texts(messages, "op")
        ops = [texts[m] or "NEW_MIN" for m in msg.tolist()]
    else:
        ops = ["NEW_MIN"] * n
    nulls = pa.nulls(n, pa.float64())
    cols = {"seq": pa.array(seq, pa.int64()), "step": pa.array(np.zeros(n, np.int8), pa.int8()),
            "op": pa.array(ops, pa.string()),
            "new_value": pa.array(value, pa.float64(), mask=np.isnan(value)),
            "inner_l": nulls, "inner_r": nulls, "outer_l": nulls, "outer_r": nulls,
            "targets": pa.array(targets, pa.string())}
    g = _group_col(messages)
    if g is not None:
        cols["group_id"] = g.take(pa.array(msg, type=pa.int64()))
    return pa.table(cols)


# ---------------------------------------------------------------------------------- subscribers
class Subscribers:
    """The network plus the subscribers: a registry and each subscriber's current value.

    ``values`` is slot-indexed (NaN = empty range / no minimum yet).  :meth:`deliver` takes the messages of
    any reformulated variant (``operators/shared/variants.py``), reports the subscribers whose value changed
    in the unicast form, and keeps every value right:

    * S-CN (000 §2.3.1): each message is routed through the index to the subscribers its rectangle holds,
      which apply their matching messages in order;
    * S-MN (000 §2.1.2; a ``targets`` column): each message goes to the subscriptions it lists;
    * CN+ (000 §2.2.2; op ``CN_PLUS``): each message is an update, routed by :class:`~sparksub.operators.
      range_min.cn_plus.CnPlusNetwork` -- the subscribers' witnesses and the table the network keeps along
      its diagonal, built on the first CN+ message from the table given to :meth:`attach_table` when the
      subscribers were seeded.  That copy must follow every update, so CN+ messages after messages of another
      variant (whose updates it did not see) raise: re-seed (the engine does when the variant changes).
    """

    def __init__(self, points: SubscriptionPoints | None = None, *,
                 bucket_size: int | None = None, merge_threshold: int | None = None):
        self.points = points if points is not None else SubscriptionPoints(
            bucket_size=bucket_size, merge_threshold=merge_threshold)
        self._values = np.full(self.points.capacity, np.nan)
        self._table = None            # (keys, xs, ys, maximum) as of the seeding: CN+'s diagonal
        self._network = None          # the CN+ network, once built
        self._cn_plus_in_step = True  # no message of another variant since the seeding / the network's start

    def _fit(self) -> None:
        cap = self.points.capacity
        if self._values.size < cap:
            v = np.full(cap, np.nan)
            v[: self._values.size] = self._values
            self._values = v

    def __len__(self) -> int:
        return len(self.points)

    def __contains__(self, sid) -> bool:
        return sid in self.points

    @property
    def counters(self) -> dict:
        """CN+'s network counters (``cn_plus.CnPlusNetwork``), empty before the first CN+ message."""
        return dict(self._network.counters) if self._network is not None else {}

    def attach_table(self, keys, xs, ys, maximum: bool = False) -> None:
        """The group's table as of the subscribers' values (user sign; NaN = null): what CN+'s network keeps
        along its diagonal (000 §2.2.2, footnote 1)."""
        self._table = (list(keys), np.asarray(xs, dtype=np.float64).copy(),
                       np.asarray(ys, dtype=np.float64).copy(), bool(maximum))
        self._network = None
        self._cn_plus_in_step = True

    def add(self, ids, x1, x2, values=None) -> np.ndarray:
        """Register subscribers (see :meth:`SubscriptionPoints.add`) with initial values (default NaN)."""
        ids = id_list(ids)
        if values is not None:
            values = _to_float(values) if hasattr(values, "dtype") or isinstance(
                values, (pa.Array, pa.ChunkedArray)) else np.array(
                [np.nan if v is None else v for v in values], dtype=np.float64)
            if values.size != len(ids):
                raise ValueError(f"length mismatch: {len(ids)} ids, {values.size} values")
        slots = self.points.add(ids, x1, x2)
        self._fit()
        self._values[slots] = np.nan if values is None else values
        if self._network is not None:
            self._network.seed(slots)
        return slots

    def remove(self, ids) -> np.ndarray:
        slots = self.points.remove(ids)
        self._values[slots] = np.nan
        return slots
    def set_values(self, ids, values) -> None:
        """Set current values (NaN or None = empty); :class:`UnknownSubscription` if an id is absent."""
        slots = self.points.slots_of(ids)
        if values is None or np.isscalar(values):
            vals = np.full(slots.size, np.nan if values is None else float(values))
        elif isinstance(values, (np.ndarray, pa.Array, pa.ChunkedArray)) or hasattr(values, "dtype"):
            vals = _to_float(values)
        else:
            vals = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        if vals.size != slots.size:
            raise ValueError(f"length mismatch: {slots.size} ids, {vals.size} values")
        self._fit()
        self._values[slots] = vals

    def value(self, sid: str) -> float:
        """Current value of one subscriber (NaN = empty)."""
        return float(self._values[self.points.slot(sid)])

    def values_of(self, ids) -> np.ndarray:
        return self._values[self.points.slots_of(ids)].copy()

    def deliver(self, messages) -> pa.Table:
        """Apply a batch of messages of any reformulated variant (class docstring); return the unicast rows of
        the subscribers whose value changed.

        Seqs are applied in ascending order.  In each seq every reached subscriber ends with the value its
        messages give it (S-CN: its last matching message in (step, message order)); a row is emitted only if
        that differs from its value before the seq (NaN equals NaN).  Messages of different variants are taken
        in runs of seqs, in seq order."""
        self._fit()
        kind = _kinds(messages)
        if kind.size == 0:
            e = np.empty(0, dtype=np.int64)
            return _rows(self.points, messages, e, e, np.empty(0), e)
        if (kind == kind[0]).all():
            return self._deliver_kind(messages, int(kind[0]))
        seq = _col(messages, "seq", np.int64, default=0)
        order = np.argsort(seq, kind="stable")
        table = _as_table(messages).take(pa.array(order))
        kind, seq = kind[order], seq[order]
        cut = np.flatnonzero(kind[1:] != kind[:-1]) + 1
        outs = [self._deliver_kind(table.slice(a, b - a), int(kind[a]))
                for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, kind.size].tolist())]
        return pa.concat_tables(outs, promote_options="default")

    def _deliver_kind(self, messages, kind: int) -> pa.Table:
        if kind == _CN_PLUS:
            return self._deliver_cn_plus(messages)
        self._cn_plus_in_step = False     # CN+'s diagonal does not see these updates
        if kind == _S_MN:
            return self._deliver_multicast(messages)
        return self._deliver_rectangles(messages)

    def _deliver_rectangles(self, messages) -> pa.Table:
        """S-CN: match each message's rectangle in the index (000 §2.3.1)."""
        seq, sl, value, msg, _ = _resolve(self.points, messages)
        if seq.size == 0:
            return _rows(self.points, messages, seq, sl, value, msg)
        # value before each (seq, slot): the previous final of the same slot, else the current value
        o = np.lexsort((seq, sl))
        sl_o, val_o = sl[o], value[o]
        prev = self._values[sl_o].copy()
        same = np.zeros(sl_o.size, dtype=bool)
        same[1:] = sl_o[1:] == sl_o[:-1]
        prev[1:][same[1:]] = val_o[:-1][same[1:]]
        changed_o = ~_nan_eq(val_o, prev)
        changed = np.empty_like(changed_o)
        changed[o] = changed_o
        # final value per slot = its last entry in (slot, seq) order
        last = np.ones(sl_o.size, dtype=bool)
        last[:-1] = sl_o[1:] != sl_o[:-1]
        self._values[sl_o[last]] = val_o[last]
        return _rows(self.points, messages, seq[changed], sl[changed], value[changed], msg[changed])

    def _deliver_multicast(self, messages) -> pa.Table:
        """S-MN: each message's listed subscriptions take its value (000 §2.1.2); ids no longer registered
        (removed since) are skipped."""
        seq = _col(messages, "seq", np.int64, default=0)
        value = _col(messages, "new_value")
        targets = _texts(messages, "targets")
        seqs, slots, values, msgs = [], [], [], []
        for i in np.argsort(seq, kind="stable").tolist():
            listed = json.loads(targets[i])
            s = self.points.lookup(listed)
            s = s[s >= 0]
            slots.append(s)
            seqs.append(np.full(len(s), seq[i], dtype=np.int64))
            values.append(np.full(len(s), value[i]))
            msgs.append(np.full(len(s), i, dtype=np.int64))
        return self._settle(messages, *(np.concatenate(a) if a else np.empty(0, dtype=np.int64)
                                        for a in (seqs, slots, values, msgs)))

    def _settle(self, messages, seq, sl, value, msg) -> pa.Table:
        """Entries ``(seq, slot, value, msg)`` in application order: each slot ends a seq with its last
        entry's value; rows for the slots whose value differs from before the seq, by (seq, slot)."""
        if not seq.size:
            return _rows(self.points, messages, seq, sl, value.astype(np.float64), msg)
        o = np.lexsort((np.arange(seq.size), sl, seq))
        seq, sl, value, msg = seq[o], sl[o], value.astype(np.float64)[o], msg[o]
        last = np.ones(seq.size, dtype=bool)
        last[:-1] = (seq[1:] != seq[:-1]) | (sl[1:] != sl[:-1])
        seq, sl, value, msg = seq[last], sl[last], value[last], msg[last]
        keep = np.zeros(seq.size, dtype=bool)
        for i, s in enumerate(sl.tolist()):      # in seq order: each compares with the value it had
            if not _nan_eq(np.array([value[i]]), self._values[s:s + 1])[0]:
                keep[i] = True
                self._values[s] = value[i]
        return _rows(self.points, messages, seq[keep], sl[keep], value[keep], msg[keep])

    def _cn_plus(self):
        if self._network is not None and self._cn_plus_in_step:
            return self._network
        if self._table is None:
            raise SparksubError("CN+ messages need the table CN+'s network keeps along its diagonal (000 "
                                "§2.2.2): seed the subscribers with attach_table()")
        if not self._cn_plus_in_step:
            raise SparksubError("CN+ messages after messages of another variant: CN+'s network did not see "
                                "those updates; seed the subscribers again (publish with variant='CN+' "
                                "from the start)")
        keys, xs, ys, maximum = self._table
        net = CnPlusNetwork(self.points, maximum)
        net.load(keys, xs, ys)
        live = self.points.live_slots()
        if not _nan_eq(net.values(live), self._values[live]).all():
            raise SparksubError("CN+: the table attached does not give the subscribers' values")
        self._network = net
        return net

    def _deliver_cn_plus(self, messages) -> pa.Table:
        """CN+: each message is an update ⟨key, X, NEW_VALUE⟩ routed by the network (``cn_plus.py``)."""
        net = self._cn_plus()
        seq = _col(messages, "seq", np.int64, default=0)
        step = _col(messages, "step", np.int64, default=0)
        x = _col(messages, "inner_l")
        value = _col(messages, "new_value")
        keys = _texts(messages, "item_key")
        seqs, slots, values, msgs = [], [], [], []
        for i in np.lexsort((np.arange(seq.size), step, seq)).tolist():
            for route, wy in net.route(keys[i], x[i], None if np.isnan(value[i]) else value[i]):
                if route.affected.size:
                    v = wy.astype(np.float64)
                    v[v == np.inf] = np.nan
                    slots.append(route.affected)
                    values.append(-v if net.maximum else v)
                    seqs.append(np.full(route.affected.size, seq[i], dtype=np.int64))
                    msgs.append(np.full(route.affected.size, i, dtype=np.int64))
        return self._settle(messages, *(np.concatenate(a) if a else np.empty(0, dtype=np.int64)
                                        for a in (seqs, slots, values, msgs)))


_S_CN, _S_MN, _CN_PLUS = 0, 1, 2


def _as_table(messages) -> pa.Table:
    if isinstance(messages, pa.Table):
        return messages
    if isinstance(messages, pa.RecordBatch):
        return pa.Table.from_batches([messages])
    if isinstance(messages, Mapping):
        return pa.table({k: pa.array(v) if not isinstance(v, (pa.Array, pa.ChunkedArray)) else v
                         for k, v in messages.items()})
    return pa.Table.from_pandas(messages, preserve_index=False)


def _kinds(messages) -> np.ndarray:
    """Per message its variant: S-MN when it lists ``targets``, CN+ when its op is ``CN_PLUS``, else S-CN."""
    n = _num_rows(messages)
    kind = np.full(n, _S_CN, dtype=np.int8)
    if _has(messages, "targets"):
        kind[np.fromiter((t is not None for t in _texts(messages, "targets")), dtype=bool, count=n)] = _S_MN
    if _has(messages, "op"):
        kind[np.fromiter((o == "CN_PLUS" for o in _texts(messages, "op")), dtype=bool, count=n)] = _CN_PLUS
    return kind


def _texts(messages, name: str) -> list:
    """A text column as a list, None for a null (or NaN: pandas) or when the column is absent."""
    if not _has(messages, name):
        return [None] * _num_rows(messages)
    c = messages.column(name) if isinstance(messages, (pa.Table, pa.RecordBatch)) else messages[name]
    values = c.to_pylist() if isinstance(c, (pa.Array, pa.ChunkedArray)) else list(c)
    return [None if v is None or (isinstance(v, float) and v != v) else v for v in values]
