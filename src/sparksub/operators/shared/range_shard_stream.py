"""A large RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group in a running stream, in two stages (issue 16 item 4): the
pure parts of ``runtime/stream.py``'s "a large top-k, DISTINCT or aggregate group in two stages".  Pure (numpy,
pyarrow; no pyspark).

The stages are publish's (``shared/range_shards.py``): stage 1 the group's rows, built from a base with no
subscription, emitting per-update messages (top-k: Paint-Dense, 002 §III-A, ``rows_extra``); stage 2 the
subscriptions by a CRC32 of their id, each shard a :class:`~sparksub.operators.shared.range_shards.RangeShard`.
What a stream adds is the subscriptions changing between micro-batches, and the shard's state outliving a task:

* **Members with births** (:class:`ShardMembers`, written by the engine as a change's subscription set): each id
  with its bounds, its shard and its *birth*, the change version since which it holds these bounds
  (:func:`members_after`; 0: the stream's start).  A micro-batch that moves a group from version ``p`` to ``v``
  must seed the subscriptions born after ``p`` -- whatever versions between were skipped or pruned -- and drop
  what the shard holds beyond the new set.
* **Seeds from stage 1** (:func:`shard_changes`): an added subscription's result (its top-k list, its exact
  count and sum) is the rows' as of the micro-batch that applies the change, which only stage 1 holds; stage 1
  computes them (``group.shard_seed``) before the micro-batch's rows and sends each shard one
  :class:`ShardChange` through the exchange.  DISTINCT's subscribers keep no result (000 §4): no seed.
* **The shard** (:class:`StreamRangeShard`): the ``RangeShard`` with the ids it holds; ``change`` drops and adds,
  ``unicast`` delivers a micro-batch's messages (002 §II-A: the subscriber protocol, each message in order), and
  ``replay`` re-applies a logged micro-batch (:class:`ShardLogEntry`: its change and, but for DISTINCT, its
  messages) when a worker's copy is behind or must be rebuilt.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparksub.operators.joins.shards import subscription_shard
from sparksub.operators.shared.range_shards import RangeShard, RangeShardBase

__all__ = ["MemberRecord", "ShardChange", "ShardLogEntry", "ShardMembers", "StreamRangeShard", "members_after",
           "painted_ks",
           "shard_changes", "shard_of_base"]


@dataclass
class ShardMembers:
    """A change's whole subscription set of a two-stage group (the engine writes it; stage 1 reads it): per
    subscription its id, bounds, k (1 but for top-k), shard (CRC32 of the id) and birth (the change version
    since which it holds these bounds)."""

    ids: np.ndarray
    x1: np.ndarray
    x2: np.ndarray
    k: np.ndarray
    shard: np.ndarray
    birth: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class MemberRecord:
    """The engine's record of a two-stage group's subscriptions as of its last change: ids (text, ascending) with
    their bounds, k and birth -- columns, not a Python object per subscription (issue 16 item 3: the driver's
    memory does not grow with the subscriptions by more than their constants)."""

    ids: np.ndarray
    x1: np.ndarray
    x2: np.ndarray
    k: np.ndarray
    birth: np.ndarray


def members_after(previous: MemberRecord | None, ids, x1, x2, k, version: int,
                  shards: int) -> tuple[ShardMembers, MemberRecord]:
    """The subscription set after change ``version`` and the engine's record of it: an id keeps its birth while its
    bounds and k stay (``previous``, the record before the change; None: none); a new id, or one whose bounds
    changed (dropped and created again), is born at ``version``.

    >>> _, v1 = members_after(None, ["a", "b"], [0.0, 1.0], [5.0, 6.0], [1, 1], 1, 2)
    >>> m, _ = members_after(v1, ["b", "a", "c"], [1.0, 0.5, 2.0], [6.0, 5.0, 7.0], [1, 1, 1], 2, 2)
    >>> list(zip(m.ids, m.birth.tolist()))
    [('b', 1), ('a', 2), ('c', 2)]
    """
    ids = np.asarray(ids, dtype=object)
    x1 = np.asarray(x1, dtype=np.float64)
    x2 = np.asarray(x2, dtype=np.float64)
    k = np.asarray(k, dtype=np.int64)
    text = ids.astype(str)
    births = np.full(len(ids), version, dtype=np.int64)
    if previous is not None and len(previous.ids) and len(ids):
        at = np.minimum(np.searchsorted(previous.ids, text), len(previous.ids) - 1)
        same = (previous.ids[at] == text) & (previous.x1[at] == x1) & (previous.x2[at] == x2) & (previous.k[at] == k)
        births = np.where(same, previous.birth[at], births)
    order = np.argsort(text, kind="stable")
    record = MemberRecord(text[order], x1[order], x2[order], k[order], births[order])
    which = subscription_shard(ids.tolist(), shards) if len(ids) else np.zeros(0, dtype=np.int64)
    return ShardMembers(ids, x1, x2, k, np.asarray(which, dtype=np.int64), births), record


def painted_ks(members: ShardMembers | None, ks) -> list[int]:
    """The k values stage 1 paints for (002 §II-A: a subscriber hears only messages painted for its k): those it
    started with and those of the change it applies (painting for a k no one holds costs messages, no rows)."""
    more = set() if members is None else set(members.k.tolist())
    return sorted({int(k) for k in ks} | more) or [1]


@dataclass
class ShardChange:
    """What a subscription change does to one shard, sent by stage 1 at the micro-batch that applies it:
    ``ids`` every subscription of the shard after the change (the shard drops the others) and the added ones
    (born after the version the shard was at) with their ``seed`` as of the micro-batch's start."""

    version: int
    ids: np.ndarray
    added_ids: np.ndarray
    added_x1: np.ndarray
    added_x2: np.ndarray
    added_k: np.ndarray
    seed: object = None


def shard_changes(rows_group, members: ShardMembers, since: int, version: int, shards: int) -> dict:
    """``{shard: ShardChange}`` for a micro-batch that moves the group from change ``since`` to ``version``: every
    shard gets one (it may have subscriptions to drop); the subscriptions born after ``since`` are seeded from
    ``rows_group`` (stage 1's rows as they stand, before the micro-batch's rows: the whole group applies a change
    before its rows too)."""
    added = members.birth > since
    out = {}
    for j in range(shards):
        mine = members.shard == j
        new = np.flatnonzero(mine & added)
        x1, x2, k = members.x1[new], members.x2[new], members.k[new]
        seed = None if rows_group.shard_stateless or not len(new) else rows_group.shard_seed(x1, x2, k)
        out[j] = ShardChange(version, members.ids[mine], members.ids[new], x1, x2, k, seed)
    return out


@dataclass
class ShardLogEntry:
    """One micro-batch of a shard as its task logged it: the change it applied first (or None) and the messages it
    delivered (None for DISTINCT, whose subscribers keep nothing the messages change)."""

    change: ShardChange | None
    messages: pa.Table | None


class StreamRangeShard:
    """A subscription shard of a stream's two-stage group: the class's subscribers (``RangeShard``) and the ids
    they hold, in the order they came (a drop removes in that order: the same on every replay)."""

    def __init__(self, base: RangeShardBase):
        self.shard: RangeShard = base.build()
        self.members = dict.fromkeys(base.ids.tolist())

    def __len__(self) -> int:
        return len(self.members)

    @property
    def stateless(self) -> bool:
        return self.shard.stateless

    def change(self, change: ShardChange) -> None:
        keep = set(change.ids.tolist())
        again = set(change.added_ids.tolist())    # created again with other bounds: out, then in
        gone = [s for s in self.members if s not in keep or s in again]
        subs = self.shard.subscribers
        if gone:
            subs.remove(gone)
        for s in gone:
            del self.members[s]
        if len(change.added_ids):
            subs.add_seeded(change.added_ids, change.added_x1, change.added_x2, change.added_k, change.seed)
            self.members.update(dict.fromkeys(change.added_ids.tolist()))

    def unicast(self, messages: pa.Table) -> pa.Table:
        return self.shard.unicast(messages)

    def replay(self, entry: ShardLogEntry) -> None:
        if entry.change is not None:
            self.change(entry.change)
        if entry.messages is not None and entry.messages.num_rows:
            self.shard.apply(entry.messages)


def shard_of_base(base) -> StreamRangeShard:
    """A shard from its base file's value: the stream's start (a ``RangeShardBase``) or a compaction (itself)."""
    return base if isinstance(base, StreamRangeShard) else StreamRangeShard(base)
