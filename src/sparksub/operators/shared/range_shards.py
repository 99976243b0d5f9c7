"""RANGE_TOPK, RANGE_DISTINCT and RANGE_AGG with their subscriber side split into shards: the pure parts of a
sharded range group (issue 16 item 4).  Pure (numpy, pyarrow; no pyspark).

A sharded range group runs a ``unicast`` publish in two stages (``control/range_shards.py``,
``runtime/range_shards.py``):

1. **The rows** (stage 1): the group's operator (``TopkGroup``, ``DistinctGroup``, ``AggGroup``) built from a
   snapshot that holds the table's rows and **no subscription** (:func:`rows_extra`), applying the batch in
   ``reformulated`` form.  Its messages do not depend on the subscriptions (002 §II-C, 000 §4): rectangles in
   the subscription space {(x1, x2)}.  They are **per update**, each at its update's seq -- DISTINCT's Mar
   messages and the aggregate deltas are so already; top-k's rows paint with Paint-Dense (002 §III-A), not the
   reformulated default Paint-Batch (§IV-A), whose messages are exact only at the batch's end and carry its last
   seq: the group's own unicast is each update's Paint-Dense messages routed to the subscribers they reach, so
   only per-update messages make the shards' union that output row for row.  For top-k the rows paint for every
   k of the group's subscriptions (``extra['ks']``: a subscriber only hears messages painted for its k).
   In a ``reformulated`` publish the rows run alone, in the publish's Paint variant (Paint-Batch by default, as the
   whole group), and their messages are the output (:func:`rows_mode`); the stateful shards log them.
2. **Subscription shards** (stage 2): the subscriptions split by a CRC32 of their id
   (``joins.shards.subscription_shard``, the SELECT_JOIN shards' hash: every shard gets 1/Q of them whatever the
   workload, and a subscription change touches only the shards its ids hash to).  A shard (:class:`RangeShard`)
   is the class's subscriber side -- ``XSubscribers.from_seed``, the network and the subscribers
   ``engine.deliver`` plays: each message's rectangle query in the shard's point index -- and its
   ``deliver(messages)`` is the group's unicast for its subscriptions: the same ``receive`` per seq the
   whole group's unicast calls per update.  Top-k and aggregate subscribers are **stateful** (each list, each
   exact (count, sum)): a shard's base (:class:`RangeShardBase`) is its subscriptions with their results as of
   the base (:func:`shard_bases`, from the rows' core), and its log the message batches it applied.  DISTINCT's
   shard keeps no sets (a match is a change, 000 §4: what the group's own unicast does) and logs nothing.

:class:`ShardedRangeView` is the group as ``result()``, ``stats()`` and EXPLAIN read it: the rows' operator with
each subscription's bounds from the registry.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparksub.operators.joins.shards import subscription_shard
from sparksub.operators.shared.range_zones import zones_layout
from sparksub.operators.shared.variants import Mode, variant_of

__all__ = [
    "PER_UPDATE_VARIANT",
    "RANGE_SHARD_CLASSES",
    "RangeShard",
    "RangeShardBase",
    "ShardedRangeView",
    "rows_extra",
    "rows_mode",
    "shardable",
    "shard_bases",
    "shards_layout",
]

#: the classes whose group runs in rows + subscription shards (RANGE_MIN / RANGE_MAX split their rows: zones)
RANGE_SHARD_CLASSES = ("RANGE_TOPK", "RANGE_DISTINCT", "RANGE_AGG")
#: the top-k rows' reformulated form: each update's messages at its seq (002 §III-A), as the group's unicast
PER_UPDATE_VARIANT = "Paint-Dense"


def rows_extra(kind: str, ks) -> dict:
    """The ``extra`` of a sharded group's rows snapshot (no subscription): top-k paints per update (module
    docstring) for the k values ``ks`` of the group's subscriptions."""
    if kind != "RANGE_TOPK":
        return {}
    return {"ks": sorted({int(k) for k in ks}) or [1], "variant": PER_UPDATE_VARIANT}


#: the top-k variants a sharded group's rows can paint for a reformulated publish: the subscription-oblivious
#: exact ones (002 §III-A, §IV-A).  Paint-Sparse needs the subscriptions in the server's core (§III-B), which the
#: rows do not hold; the ε forms (§IV-B) send objects ranked past k that the shards' subscribers would have to
#: drop by a rule the shards are not tested for -- a group runs those whole
SHARDED_PAINT_VARIANTS = (None, "Paint-Batch", "Paint-Dense")


def shardable(mode: str, kind: str) -> bool:
    """Whether a sharded ``kind`` group runs a ``mode`` publish in its rows and shards (else whole).

    >>> from sparksub.operators.shared.variants import with_variant
    >>> sparse = with_variant("reformulated", "paint-sparse")
    >>> shardable("unicast", "RANGE_TOPK"), shardable(sparse, "RANGE_TOPK"), shardable(sparse, "RANGE_AGG")
    (True, False, True)
    """
    if mode == "unicast":
        return True
    return mode == "reformulated" and (kind != "RANGE_TOPK" or variant_of(mode, "topk") in SHARDED_PAINT_VARIANTS)


def rows_mode(mode: str) -> str:
    """The mode a sharded group's rows apply a ``mode`` publish's batch in: for ``unicast`` plain ``reformulated``,
    the rows' own per-update form (module docstring); for ``reformulated`` the publish's variant, Paint-Batch when
    it names none -- the whole group's messages, so the output is the same.

    >>> rows_mode("unicast"), rows_mode("reformulated").variants
    ('reformulated', {'topk': 'Paint-Batch'})
    """
    if mode == "unicast":
        return "reformulated"
    return Mode("reformulated", {**getattr(mode, "variants", {}), "topk": variant_of(mode, "topk") or "Paint-Batch"})


def shards_layout(n_shards: int) -> str:
    """What EXPLAIN and ``stats()`` say of the layout."""
    return f"rows in 1 replica × {n_shards} subscription shards"


@dataclass
class RangeShardBase:
    """One subscription shard of a range group (a replica's base): its subscriptions (ids, ``[x1, x2]``, k) and
    what their subscribers start from (``seed``: the class's results as of the base, ``group.shard_seed``);
    ``subscribers_class`` and ``option`` (top-k: descending; aggregates: the function) make the subscriber side;
    ``key_type`` parses a message's ``item_key`` (``families.key_type``: int for an integral key, else its text,
as the core's keys are)."""

    group_id: str
    shard: int
    subscribers_class: type
    option: object
    key_type: Callable
    ids: np.ndarray
    x1: np.ndarray
    x2: np.ndarray
    k: np.ndarray
    seed: object = None
    stateless: bool = False

    def __len__(self) -> int:
        return len(self.ids)

    def build(self) -> RangeShard:
        return RangeShard(self)


def shard_bases(rows_group, group_id: str, ids, x1, x2, k, shards: int, key_type: Callable, only=None) -> dict:
    """``{shard: RangeShardBase}`` of the live subscriptions ``ids`` (bounds ``x1``, ``x2``, ``k``), their results
    seeded from ``rows_group``'s core as it stands (the rows' operator, no subscription); ``only``: just those
    shards."""
    ids = np.asarray(ids, dtype=object)
    x1 = np.asarray(x1, dtype=np.float64)
    x2 = np.asarray(x2, dtype=np.float64)
    k = np.asarray(k, dtype=np.int64)
    which = subscription_shard(ids.tolist(), shards)
    out = {}
    for j in range(max(1, shards)):
        if only is not None and j not in only:
            continue
        mine = np.flatnonzero(which == j)
        a, b, kk = x1[mine], x2[mine], k[mine]
        stateless = bool(rows_group.shard_stateless)
        out[j] = RangeShardBase(group_id, j, rows_group.subscribers_class, rows_group.subscriber_option(), key_type,
                                ids[mine], a, b, kk, None if stateless else rows_group.shard_seed(a, b, kk),
                                stateless)
    return out


class RangeShard:
    """A shard's subscribers for stage 2 (module docstring): ``unicast(messages)`` -> the unicast rows
    (``UNICAST_ITEMS_SCHEMA``) of its subscriptions for one publish's per-update messages; ``apply`` replays a
    logged message batch (the worker cache's catch-up and rebuild)."""

    def __init__(self, base: RangeShardBase):
        # the base is not kept: its seed (every subscriber's result) would double what the subscribers hold
        self.shard = base.shard
        self.group_id = base.group_id
        self.stateless = base.stateless
        self.subscribers = base.subscribers_class.from_seed(base.group_id, base.option, base.key_type, base.ids,
                                                            base.x1, base.x2, base.k, base.seed)
        self.messages = 0
        self.notifications = 0

    def __len__(self) -> int:
        return len(self.subscribers)

    def apply(self, messages: pa.Table, mode: str = "none") -> None:
        """A logged message batch: the subscribers follow it (its rows were the output of its publish)."""
        if self.stateless:
            raise TypeError("a stateless subscription shard takes no log entries")
        self.subscribers.deliver(messages)

    def unicast(self, messages: pa.Table) -> pa.Table:
        out = self.subscribers.deliver(messages)
        self.messages += messages.num_rows
        self.notifications += out.num_rows
        return out

    def stats(self) -> dict:
        return {"shard": self.shard, "subscriptions": len(self), "messages": self.messages,
                "notifications": self.notifications, **self.subscribers.counters}


class ShardedRangeView:
    """A sharded range group as ``result()``, ``stats()`` and EXPLAIN read it: ``rows_group`` (the rows' operator,
    no subscription) answers a subscription's result from its bounds in the registry (``bounds_of(id)`` ->
    ``(x1, x2, k)``), as the whole group's ``result`` does from its own columns; ``shards``: per shard its
    ``{"shard", "subscriptions", ...}``; ``zones``: how many X zones the rows are split into (0: one replica;
    ``rows_group`` then is their ``range_zones.ZonedRows``)."""

    def __init__(self, rows_group, bounds_of: Callable, subscriptions: int, shards: list, info: dict | None = None,
                 zones: int = 0):
        self.rows_group = rows_group
        self.bounds_of = bounds_of
        self.subscriptions = subscriptions
        self.shards = shards
        self.info = dict(info or {})
        self.zones = zones

    def __len__(self) -> int:
        return self.subscriptions

    def result(self, sub_id):
        x1, x2, k = self.bounds_of(sub_id)
        return self.rows_group.result_of(x1, x2, k)

    def _layout(self) -> dict:
        sizes = [s["subscriptions"] for s in self.shards]
        layout = zones_layout(self.zones, len(self.shards)) if self.zones else shards_layout(len(self.shards))
        return {"layout": layout, "subscription_shards": len(self.shards),
                "shard_subscriptions": sizes}

    def stats(self) -> dict:
        return {**self.rows_group.stats(), "subscriptions": self.subscriptions, **self._layout(),
                "shards": list(self.shards), **self.info}

    def explain(self) -> dict:
        lines = dict(self.rows_group.explain())
        layout = self._layout()
        lines["subscriptions"] = self.subscriptions
        lines["layout"] = (f"{layout['layout']} (issue 16 item 4): stage 1 the rows, no subscription, emit the "
                           f"per-update messages{' (a task per X zone)' if self.zones else ''}; stage 2 the "
                           f"subscriptions by a hash of their id, each shard "
                           f"its subscribers' results and their point index")
        lines["subscription index"] = (f"per shard, a 2-d point index over (x1, x2) (shard sizes "
                                       f"{layout['shard_subscriptions']}): one rectangle query per message")
        lines["subscriptions reached per message (index count, last messages)"] = "counted in the shards"
        return lines
