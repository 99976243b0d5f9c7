"""A range-MIN group's subscriptions split into shards, for matching messages in parallel.  Pure.

Matching is the content-based network's role (000 §2.3.1; DESIGN §5): each reformulated message
⟨NEW_VALUE, INNER_L, INNER_R, OUTER_L, OUTER_R⟩ is a rectangle in the (x1, x2) plane of the subscription
points, ``OUTER_L < x1 <= INNER_L`` and ``INNER_R <= x2 < OUTER_R`` (an infinite OUTER bound closed), and
:func:`~sparksub.operators.range_min.delivery.match` answers it with one point-index query.  Every
subscription is in exactly one shard, so the matches of a message are the disjoint union of its matches in
each shard; S-UN's rows (:func:`~sparksub.operators.range_min.delivery.unicast`) are per (seq,
subscription), so they split the same way.

* ``by="x1"``: shard j holds the subscriptions with ``c_j <= x1 < c_{j+1}``, the cut points an equal-count
  histogram of x1 (as DS-CN's zones cut X, 000 §2.3.2; Meghdoot's zones are rectangles of this plane).  A
  message only goes to the shards whose x1 interval meets its ``(OUTER_L, INNER_L]``: most messages have a
  short Mar and reach one or two shards.
* ``by="hash"``: shard = crc32(id) mod k (stable across processes); balanced whatever the ranges, but every
  message goes to every shard.
"""
from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparksub.operators.range_min.delivery import SubscriptionPoints, match, unicast
from sparksub.operators.range_min.zones import equal_count_cuts
from sparksub.operators.shared.schemas import DELETE

__all__ = [
    "ShardBase",
    "ShardOperator",
    "SubscriptionShards",
    "shard_bases",
    "shard_bases_at",
    "shard_digest",
    "shard_subscriptions",
    "step0_old_values",
    "visited_shards",
]

SHARDINGS = ("x1", "hash")


class SubscriptionShards:
    """k :class:`SubscriptionPoints`, each subscription in one; ``cuts`` (x1 sharding) or crc32 (hash)."""

    def __init__(self, k: int, by: str = "x1", cuts=None):
        if int(k) != k or k < 1:
            raise ValueError(f"the number of shards must be a positive integer, got {k!r}")
        if by not in SHARDINGS:
            raise ValueError(f"unknown sharding {by!r}; expected one of {SHARDINGS}")
        self.by = by
        self.cuts = np.asarray(cuts if cuts is not None else (), dtype=np.float64)
        if by == "x1" and len(self.cuts) > k - 1:
            raise ValueError(f"{len(self.cuts)} cut points for {k} shards")
        self.shards = [SubscriptionPoints() for _ in range(int(k))]

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def shard_of(self, ids, x1) -> np.ndarray:
        """The shard of each subscription (by its x1, or by the crc32 of its id)."""
        if self.by == "hash":
            return np.array([zlib.crc32(str(i).encode()) % len(self.shards) for i in ids], dtype=np.int64)
        return np.searchsorted(self.cuts, np.asarray(x1, dtype=np.float64), side="right").astype(np.int64)

    def add(self, ids, x1, x2) -> None:
        ids = np.asarray(ids, dtype=object).reshape(-1)
        x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
        x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
        where = self.shard_of(ids, x1)
        for j, shard in enumerate(self.shards):
            sel = where == j
            if sel.any():
                shard.add(ids[sel], x1[sel], x2[sel])

    def message_shards(self, messages) -> np.ndarray:
        """A (messages x shards) boolean matrix: which shards each message must visit.  x1 sharding: the
        shards whose x1 interval meets ``(OUTER_L, INNER_L]``; hash sharding: all."""
        n = messages.num_rows
        k = len(self.shards)
        if self.by == "hash":
            return np.ones((n, k), dtype=bool)
        lo, hi = visited_shards(self.cuts, messages)
        j = np.arange(k)
        return (j >= lo[:, None]) & (j <= hi[:, None])

    def match(self, messages: pa.Table) -> list:
        """Per shard, ``(message indices, subscription ids)`` of its matches (indices into ``messages``)."""
        visit = self.message_shards(messages)
        out = []
        for j, shard in enumerate(self.shards):
            rows = np.flatnonzero(visit[:, j])
            mi, slots = match(shard, messages.take(rows))
            out.append((rows[mi], shard.ids_of(slots)))
        return out

    def unicast(self, messages: pa.Table, old_value_of_step0=None) -> list:
        """Per shard, its S-UN rows (:func:`~sparksub.operators.range_min.delivery.unicast`) for the messages
        that visit it; their union is the whole group's rows."""
        visit = self.message_shards(messages)
        return [unicast(shard, messages.take(np.flatnonzero(visit[:, j])), old_value_of_step0)
                for j, shard in enumerate(self.shards)]

    def stats(self) -> list:
        return [{"shard": j, "subscriptions": len(s)} for j, s in enumerate(self.shards)]


def visited_shards(cuts, messages) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` per message: the x1 shards (at ``cuts``) from ``lo`` to ``hi`` are those whose x1 interval meets
    the message's ``(OUTER_L, INNER_L]``, the only ones that can hold a subscription it matches."""
    cuts = np.asarray(cuts, dtype=np.float64)
    lo = np.searchsorted(cuts, messages.column("outer_l").to_numpy(zero_copy_only=False), side="right")
    hi = np.searchsorted(cuts, messages.column("inner_l").to_numpy(zero_copy_only=False), side="right")
    return lo, hi   # (the shard holding OUTER_L holds the x1 just above it too)


def shard_subscriptions(points: SubscriptionPoints, k: int, by: str = "x1") -> SubscriptionShards:
    """Split a group's subscriptions into ``k`` shards, by x1 (equal-count cuts) or by a hash of the id."""
    slots = points.live_slots()
    x1 = points.x1[slots]
    cuts = equal_count_cuts(x1, k) if by == "x1" else None
    shards = SubscriptionShards(k, by, cuts)
    shards.add(points.ids_of(slots), x1, points.x2[slots])
    return shards


# ---- one shard as a runtime replica (runtime/zones.py: one Spark task per shard) -------------------------------
@dataclass
class ShardBase:
    """One x1 shard's base (pickled in its replica's base file): its subscriptions and the shards' cut points.
    Built anew whenever the group's subscriptions change; a batch never changes it (nothing is logged)."""

    index: int
    cuts: np.ndarray
    ids: np.ndarray
    x1: np.ndarray
    x2: np.ndarray

    def build(self) -> ShardOperator:
        return ShardOperator(self)


class ShardOperator:
    """A shard's point index, matching the messages that visit it (its x1 interval meets ``(OUTER_L,
    INNER_L]``: :meth:`SubscriptionShards.message_shards`' rule)."""

    stateless = True

    def __init__(self, base: ShardBase):
        self.index, self.cuts = base.index, np.asarray(base.cuts, dtype=np.float64)
        self.points = SubscriptionPoints()
        if len(base.ids):
            self.points.add(base.ids, base.x1, base.x2)

    def __len__(self) -> int:
        return len(self.points)

    def visiting(self, messages: pa.Table) -> pa.Table:
        if not messages.num_rows:
            return messages
        lo, hi = visited_shards(self.cuts, messages)
        return messages.filter(pa.array((lo <= self.index) & (self.index <= hi)))

    def unicast(self, messages: pa.Table, old_value_of_step0=None) -> pa.Table:
        """S-UN's rows of this shard's subscriptions (``delivery.unicast``) for one batch's messages (in batch
        order); the union over the shards is the whole group's rows."""
        return unicast(self.points, self.visiting(messages), old_value_of_step0)


def shard_bases(ids, x1, x2, k: int) -> tuple[np.ndarray, list]:
    """``(cuts, [ShardBase, …])``: subscriptions cut into (at most) ``k`` shards at equal-count x1 cut points
    (fewer when x1 values repeat: :func:`equal_count_cuts`)."""
    cuts = equal_count_cuts(np.asarray(x1, dtype=np.float64).reshape(-1), k)
    return cuts, shard_bases_at(ids, x1, x2, cuts)


def shard_bases_at(ids, x1, x2, cuts) -> list:
    """The subscriptions cut at the given x1 ``cuts`` (``len(cuts) + 1`` shards, some maybe empty): a stream keeps
    the cuts it started with, so a subscription change moves no subscription between shards and leaves the
    shards it does not touch as they were."""
    ids = np.asarray(ids, dtype=object).reshape(-1)
    x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
    x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
    cuts = np.asarray(cuts, dtype=np.float64).reshape(-1)
    where = np.searchsorted(cuts, x1, side="right")
    return [ShardBase(j, cuts, ids[where == j], x1[where == j].copy(), x2[where == j].copy())
            for j in range(len(cuts) + 1)]


def shard_digest(base: ShardBase) -> bytes:
    """A digest of a shard's subscriptions (ids and bounds, in any order): equal digests, the same shard -- what a
    subscription change compares to write only the shards it touched."""
    order = np.argsort(base.ids.astype(str), kind="stable") if len(base.ids) else np.empty(0, dtype=np.int64)
    h = hashlib.blake2b(digest_size=16)
    h.update("\x1f".join(str(i) for i in base.ids[order]).encode("utf-8"))
    h.update(np.ascontiguousarray(base.x1[order], dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(base.x2[order], dtype=np.float64).tobytes())
    h.update(np.asarray(base.cuts, dtype=np.float64).tobytes())
    return h.digest()


def step0_old_values(core, keys, xs, ys, ops, seqs) -> dict:
    """``{seq: the moved tuple's old Y}`` for the X-moves of one batch about to be applied to ``core`` (a
    ``RangeMinCore``, before the batch): what :func:`~sparksub.operators.range_min.delivery.unicast` needs beside
    the messages to drop a subscription's net no-op across an X-move's two steps (000 §2.3: an X-update is a
    deletion at the old X, then an insertion at the new; digest C.8).  The rule of ``RangeMinGroup.apply``: an
    upsert with a non-null X and Y of a key the core holds (as of that row of the batch) at another X.  Read
    where the messages are made (a stream's stage 1) and carried with them to the subscription shards."""
    cur: dict = {}
    out: dict = {}
    for k, x, y, op, seq in zip(keys, xs, ys, ops, seqs):
        prev = cur[k] if k in cur else core.get(k)
        if op == DELETE or math.isnan(x) or math.isnan(y):   # a null X or Y leaves every range
            cur[k] = None
            continue
        if prev is not None and prev[0] != x:
            out[int(seq)] = float(prev[1])
        cur[k] = (x, y)
    return out
