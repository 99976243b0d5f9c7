"""What the range classes beyond MIN/MAX (RANGE_TOPK, RANGE_DISTINCT, RANGE_AGG) share: the snapshot and
the group operator's frame, the subscriber side's registry and helpers, and EXPLAIN's influence regions.

Each group holds one table's rows on (key, x, y) in its core and the subscriptions of one
(table, x, y, ...) as columns, and turns a batch of updates (in ``seq`` order) into notifications,
as :class:`~sparksub.operators.range_min.group.RangeMinGroup` does for MIN/MAX:

* ``unicast``: one row per (affected subscription, change): ``subscription_id, op, value, seq,
  group_id`` plus the item columns of ``ITEM_SCHEMA`` (which object entered / left a top-k, which
  string value joined a DISTINCT set).  The core's messages of each update are routed through the
  class's subscription index to the subscribers they reach, which apply them (002 §II-A for top-k,
  000 §4 for DISTINCT and aggregates): an update costs its messages plus the subscriptions they reach,
  never a pass over all subscriptions;
* ``reformulated``: the core's messages, whose number does not depend on the subscriptions
  (Paint-Batch over the whole batch for top-k, 002 §IV-A, so subscribers are exact at the batch's
  end; the DISTINCT Mar messages and the relaxed aggregate deltas per update, 000 §4), in
  ``RANGE_MESSAGE_SCHEMA`` (``shared/schemas.py``);
* ``none``: maintain the core only (replaying a log).

The classes live in their own packages -- ``topk/``, ``distinct/``, ``agg/``: ``core.py`` the algorithm,
``group.py`` the group operator (:class:`RangeClassGroup`'s subclass and its snapshot), ``subscribers.py``
the network and the subscribers ``engine.deliver`` plays -- and share this module.

The subscriber side: a reformulated message is a rectangle in the subscription space {(x1, x2)} (002
§II-C, 000 §2.3.1)::

    top-k, DISTINCT:  OUTER_L < x1 <= INNER_L  and  INNER_R <= x2 < OUTER_R   (+ k = k_s for top-k)
    aggregates:       x1 <= X <= x2, the rectangle (-inf, X] x [X, +inf)       (000 §4)

(an infinite OUTER bound also admits the same infinite subscription end), so the subscriptions a
message reaches are one :class:`~sparksub.operators.shared.point_index.PointIndex2D` rectangle query
(:class:`~sparksub.operators.range_min.delivery.SubscriptionPoints`; one index per k for top-k), never a
scan of the subscriptions.  Each class's ``XSubscribers.from_group(group)`` seeds every subscriber with
its current result from the group's core; ``subs.deliver(messages)`` takes the group's reformulated
messages (in the order the group emitted them) and returns the unicast rows they cause, in
``UNICAST_ITEMS_SCHEMA`` (the columns of the group's 'unicast' mode).  Seqs are applied in ascending order
(stable: messages of one seq keep their order); every subscriber whose result changed over a seq gets its
rows at that seq.  Subscribers may be added and removed (``add`` / ``remove``).  A subscription with
``x1 > x2`` (an empty range) is kept outside the index: no message reaches it and its result stays empty.

:class:`RegionStats` records the influence-region sizes of a group's messages for EXPLAIN.  Pure (numpy /
pyarrow); ``runtime/groups.py`` runs the groups in tasks.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pyarrow as pa

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.shared.arrays import id_list
from sparksub.operators.shared.schemas import DELETE, ITEM_SCHEMA, RANGE_MESSAGE_SCHEMA, UNICAST_ITEMS_SCHEMA

__all__ = ["RangeClassSnapshot", "RangeClassGroup", "RangeRegistry", "RegionStats", "Counting", "FlatLists",
           "batch_columns", "by_seq", "check_new", "is_null", "key_text", "notification_table", "rows_table",
           "update_rows", "with_range_class_columns"]


def with_range_class_columns(schema: pa.Schema, mode: str, message_extra=()) -> pa.Schema:
    """The columns a top-k / DISTINCT / aggregate / box notification adds to ``publish``'s output: the item
    columns (unicast) or the messages' (reformulated; ``message_extra``: a box message's second-attribute
    bounds, ``box/group.py``'s ``BOX_COLUMNS``), each inserted before ``reason`` unless already there."""
    extra = list(ITEM_SCHEMA) if mode == "unicast" else list(RANGE_MESSAGE_SCHEMA) + list(message_extra)
    for f in extra:
        if f.name not in schema.names:
            schema = schema.insert(len(schema) - 1, f)  # before ``reason``
    return schema


@dataclass
class RangeClassSnapshot:
    """A range-class group's definition, subscriptions and the table's rows (what Spark broadcasts);
    subclassed per class (``TopkSnapshot``, ``DistinctSnapshot``, ``AggSnapshot``)."""

    group_id: str
    table: str
    x: str
    y: str | None
    option: object       # descending (top-k) | func (agg) | None
    sub_ids: np.ndarray
    sub_x1: np.ndarray
    sub_x2: np.ndarray
    sub_k: np.ndarray | None
    keys: np.ndarray
    xs: np.ndarray
    ys: np.ndarray
    extra: dict = field(default_factory=dict)

    #: the class (RANGE_TOPK | RANGE_DISTINCT | RANGE_AGG) and its group operator: set by each family's
    #: snapshot (``topk/group.py`` ...), which is what a task unpickles
    kind: ClassVar[str] = ""
    group_class: ClassVar[type]

    def build(self):
        g = self.group_class(self)
        g.load(self.keys, self.xs, self.ys)
        return g


class RangeClassGroup:
    """The group operator's frame every range class shares (module docstring): the subscriptions as columns,
    ``apply`` over a batch in ``seq`` order, the influence regions seen; each class adds its core."""

    stateless = False
    kind = ""

    def __init__(self, snap: RangeClassSnapshot):
        self.group_id, self.table, self.x, self.y = snap.group_id, snap.table, snap.x, snap.y
        self.ids = np.asarray(snap.sub_ids, dtype=object)
        self.x1 = np.asarray(snap.sub_x1, dtype=np.float64)
        self.x2 = np.asarray(snap.sub_x2, dtype=np.float64)
        self.slot = {sid: i for i, sid in enumerate(self.ids.tolist())}
        self._stale = False
        self.counters = {"batches": 0, "unicast_rows": 0, "reformulated_messages": 0, "unicast_updates": 0}
        self.regions = RegionStats()   # influence-region sizes of the core's messages (EXPLAIN)
        self.subscribers = None        # the class's subscriber side: the index and, where kept, each result

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, sub_id) -> bool:
        return sub_id in self.slot

    @staticmethod
    def _valid(xs, ys) -> np.ndarray:
        """Rows in some range: a null (NaN / None) X or Y is in none (SQL ignores it)."""
        xs = np.asarray(xs, dtype=np.float64)
        bad_y = np.fromiter((y is None or (isinstance(y, float) and y != y) for y in np.asarray(ys, dtype=object)),
                            dtype=bool, count=len(xs))
        return ~(np.isnan(xs) | bad_y)

    def apply(self, batch, mode: str = "unicast") -> pa.Table:
        """Apply one batch of updates (``key, x, y, op, seq``) in ``seq`` order (module docstring)."""
        if mode not in ("unicast", "reformulated", "none"):
            raise ValueError(f"unknown mode {mode!r} for {self.kind}; expected 'unicast' or 'reformulated'")
        cols = batch_columns(batch, text=self.kind == "RANGE_DISTINCT")
        self.counters["batches"] += 1
        if mode != "unicast":
            # the per-subscription unicast state does not follow a replay or a reformulated batch:
            # recomputed from the core when next needed
            self._stale = True
        elif self._stale:
            self._resync()
            self._stale = False
        rows: list = []
        tables: list = []    # columnar chunks of unicast rows, the dict rows before each flushed (in order)
        if mode == "reformulated" and self._batched(mode):
            rows = self._batch_messages(cols)
            self.counters["reformulated_messages"] += len(rows)
            return notification_table(rows, RANGE_MESSAGE_SCHEMA, self.group_id)
        for key, x, y, op, seq in zip(cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]):
            null = x is None or x != x or y is None or (isinstance(y, float) and y != y)
            prev = self._x_of(key)
            if op == DELETE or null:
                if prev is None:
                    continue
                outcome = self._delete(key)
            else:
                outcome = self._upsert(key, float(x), y)
            self._observe(outcome.messages)
            if mode == "unicast":
                self.counters["unicast_updates"] += 1
            if mode != "none":
                got = self._notifications(outcome, int(seq), mode)
                if isinstance(got, pa.Table):    # an aggregate's unicast, columnar (``update_rows``)
                    if rows:
                        tables.append(notification_table(rows, UNICAST_ITEMS_SCHEMA, self.group_id))
                        rows = []
                    tables.append(got)
                else:
                    rows.extend(got)
        if mode == "none":
            return RANGE_MESSAGE_SCHEMA.empty_table()
        schema = RANGE_MESSAGE_SCHEMA if mode == "reformulated" else UNICAST_ITEMS_SCHEMA
        out = notification_table(rows, schema, self.group_id)
        if tables:
            out = pa.concat_tables([*tables, out])
        self.counters["reformulated_messages" if mode == "reformulated" else "unicast_rows"] += out.num_rows
        return out

    def _batched(self, mode) -> bool:
        """Whether the reformulated form covers the whole batch at once (``_batch_messages``: top-k's
        Paint-Batch) rather than each update at its seq; a class may decide per mode (its variant)."""
        return hasattr(self, "_batch_messages")

    def _x_of(self, key):
        """The X a row has in the core (every core's ``get`` gives ``(x, y)``), or None."""
        r = self.core.get(key)
        return None if r is None else r[0]

    def _resync(self) -> None:
        """Rebuild what unicast keeps per subscription from the core (after a log replay)."""

    def _observe(self, messages) -> None:
        """Record the rectangles of the core's messages (every mode: a replay counts too)."""
        observe = self.regions.observe
        for m in messages:
            observe(*self._rectangle(m))

    def _explain_network(self, messages_per_update: float) -> dict:
        """The EXPLAIN lines every range class shares: the influence regions of the messages so far (this
        copy of the group: a replayed log counts), their reach in the subscription index and the expected
        traffic per update (keys in a fixed order)."""
        mean, top, n = self.regions.reach(self._count)
        return {
            "influence regions": self.regions.extent(self._extent_name),
            "subscriptions reached per message (index count, last messages)":
                f"mean {mean:.2f} / max {top} over {n} messages",
            # deliveries = messages x reach: what the network hands to subscribers per update
            "expected per update (messages / deliveries)":
                f"{messages_per_update:.3f} / {messages_per_update * mean:.3f}",
        }

    def stats(self) -> dict:
        return {**self.core.counters, **self.counters, "subscriptions": len(self), "tuples": len(self.core)}

    # ---- the subscriber side in shards (``shared/range_shards.py``) -------------------------------------
    #: the class's subscriber side (``XSubscribers.from_seed`` builds a shard's) and whether it keeps a result
    #: per subscription (DISTINCT's does not: a match is a change, 000 §4)
    subscribers_class: ClassVar[type]
    shard_stateless: ClassVar[bool] = False

    def result(self, sub_id):
        i = self.slot[sub_id]
        return self.result_of(self.x1[i], self.x2[i], int(self.k[i]) if getattr(self, "k", None) is not None else 1)

    def result_of(self, x1: float, x2: float, k: int = 1):
        """The result of a subscription ``[x1, x2]`` (top-k: and ``k``) over the core's rows now, registered or
        not (a sharded group's rows hold no subscription: ``result()`` reads the bounds from the registry)."""
        raise NotImplementedError  # abstract: each class's core

    def shard_seed(self, x1: np.ndarray, x2: np.ndarray, k: np.ndarray):
        """What a subscription shard's subscribers start from, per subscription ``(x1, x2, k)``: their results
        over the core's rows now (``XSubscribers.from_seed``); none by default (DISTINCT's keep no result)."""

    def subscriber_option(self):
        """What the class's subscriber side reads beyond the ranges (top-k: descending; aggregates: the function);
        nothing by default."""


def batch_columns(batch, text: bool = False) -> dict:
    """``key, x, y, op, seq`` as Python lists; ``text``: y from ``y_text`` where the engine put a
    string column's values (DISTINCT takes strings; other groups of the batch see nulls there)."""
    if not isinstance(batch, pa.Table):
        batch = pa.table(dict(batch))
    out = {name: batch.column(name).to_pylist() for name in ("key", "x", "y", "op", "seq")}
    if text and "y_text" in batch.column_names:
        out["y"] = [t if t is not None else y for t, y in zip(batch.column("y_text").to_pylist(), out["y"])]
    return out


def notification_table(rows: list[dict], schema: pa.Schema, group_id) -> pa.Table:
    """A batch's notification rows (dicts; a column a row lacks is null there) as ``schema``'s table, every
    row in ``group_id`` and, where the schema has ``msg_no``, numbered in order.  The rows go through Arrow as
    one struct array: its loop over the dicts takes a third of the time of a Python pass per column."""
    n = len(rows)
    filled = {"group_id": pa.array([group_id] * n, schema.field("group_id").type),
              "msg_no": pa.array(np.arange(n, dtype=np.int64), pa.int64())}
    fields = [f for f in schema if f.name not in filled]
    given = dict(zip([f.name for f in fields], pa.array(rows, type=pa.struct(fields)).flatten()))
    return pa.Table.from_arrays([given[f.name] if f.name in given else filled[f.name] for f in schema],
                                schema=schema)


# -------------------------------------------------------------------------------------------------- subscribers
class FlatLists:
    """Lists of ``(key, x, y)`` items kept flat -- the items of list i are ``keys[offsets[i]:offsets[i+1]]`` and the
    same slices of ``xs`` and ``ys`` -- as a read-only sequence of lists.  A subscription shard's seed of top-k
    results (``shared/range_shards.py``): a few arrays pickle and load in a fraction of the time and memory of a
    list of tuples per subscription, which a worker would hold beside the subscribers it builds from them."""

    def __init__(self, lists):
        lists = list(lists)
        self.offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        self.offsets[1:] = np.cumsum([len(items) for items in lists])
        flat = [item for items in lists for item in items]
        self.keys = np.array([item[0] for item in flat], dtype=object)
        self.xs = np.array([item[1] for item in flat], dtype=np.float64)
        self.ys = np.array([item[2] for item in flat], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> list[tuple]:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return list(zip(self.keys[a:b].tolist(), self.xs[a:b].tolist(), self.ys[a:b].tolist()))


def key_text(key) -> str:
    """An object key as the ``item_key`` text of a row or message."""
    return key if isinstance(key, str) else str(key)


def check_new(ids: list, registry) -> None:
    """DuplicateSubscription naming the first id already registered or repeated in ``ids``."""
    seen: set = set()
    for sid in ids:
        if sid in registry or sid in seen:
            raise DuplicateSubscription(f"duplicate subscription id {sid!r}")
        seen.add(sid)


def update_rows(ids, values, seqs, group_ids) -> pa.Table:
    """``update`` rows (``UNICAST_ITEMS_SCHEMA``) of the subscriptions ``ids`` with their new ``values`` (float; NaN:
    SQL NULL), at ``seqs`` and in ``group_ids`` (a value each, or one for every row), built column by column: an
    aggregate's unicast is a row per subscription whose range holds an update's X, millions a batch, where a
    dict per row took ~300 bytes and most of the time (docs/parallelism.md, RANGE_AGG in X zones).

    >>> t = update_rows(["a", "b"], [2.5, float("nan")], 7, "g")
    >>> t.column("value").to_pylist(), t.column("op").to_pylist(), t.column("seq").to_pylist(), t.schema.names[-1]
    ([2.5, None], ['update', 'update'], [7, 7], 'item_text')
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(values)

    def column(v, type_):
        if isinstance(v, (np.ndarray, list, pa.Array)):
            return pa.array(v, type_)
        return pa.array([v], type_).take(pa.array(np.zeros(n, dtype=np.int64)))
    cols = {"subscription_id": pa.array(np.asarray(ids, dtype=object), pa.string()),
            "op": column("update", pa.string()), "value": pa.array(values, pa.float64(), mask=np.isnan(values)),
            "seq": column(seqs, pa.int64()), "group_id": column(group_ids, pa.string())}
    schema = UNICAST_ITEMS_SCHEMA
    return pa.Table.from_arrays([cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in schema],
                                schema=schema)


def rows_table(rows: list[dict], group_id) -> pa.Table:
    """Unicast rows (dicts; a column a row lacks is null, ``group_id`` defaults to ``group_id``) as a table of
    ``UNICAST_ITEMS_SCHEMA``: through one struct array, as :func:`notification_table` (a subscription shard's
    output, ``shared/range_shards.py``, is all of them)."""
    schema = UNICAST_ITEMS_SCHEMA
    fields = [f for f in schema if f.name != "group_id"]
    given = dict(zip([f.name for f in fields], pa.array(rows, type=pa.struct(fields)).flatten()))
    given["group_id"] = pa.array([r.get("group_id", group_id) for r in rows], schema.field("group_id").type)
    return pa.Table.from_arrays([given[f.name] for f in schema], schema=schema)


def by_seq(messages: pa.Table, names: Iterable[str]):
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


def is_null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


class Counting:
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


class RangeRegistry(Counting):
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
        ids = id_list(ids)
        x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
        x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
        if not len(ids) == x1.size == x2.size:
            raise ValueError(f"length mismatch: {len(ids)} ids, {x1.size} x1, {x2.size} x2")
        if results is not None and len(results) != len(ids):
            raise ValueError(f"length mismatch: {len(ids)} ids, {len(results)} results")
        check_new(ids, self)
        empty = ~(x1 <= x2)
        sel = np.flatnonzero(~empty)
        slots = self.points.add([ids[i] for i in sel.tolist()], x1[sel], x2[sel])
        if sel.size > 1:
            self.points.index.rebuild()
        for i in np.flatnonzero(empty).tolist():
            self._empty[ids[i]] = (float(x1[i]), float(x2[i]))
        return ids, x1, x2, sel, slots

    def remove(self, ids) -> None:
        ids = id_list(ids)
        unknown = [s for s in ids if s not in self]
        if unknown:
            raise UnknownSubscription(f"unknown subscription id {unknown[0]!r}")
        gone = [s for s in ids if s in self._empty]
        for s in gone:
            del self._empty[s]
        self._forget(self.points.remove([s for s in ids if s not in gone]))

    def _forget(self, slots: np.ndarray) -> None:
        raise NotImplementedError  # abstract: the subclass's per-slot state


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
            if v != math.inf and v == v:
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
