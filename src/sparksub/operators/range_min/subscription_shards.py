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
import json
import math
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparksub.operators.range_min.delivery import (SubscriptionPoints, _unicast_entries, match, multicast_order,
                                                   unicast)
from sparksub.operators.range_min.group import MULTICAST_SCHEMA
from sparksub.operators.range_min.zones import equal_count_cuts
from sparksub.operators.shared.schemas import DELETE

__all__ = [
    "ShardBase",
    "ShardOperator",
    "MULTICAST_ENTRY_SCHEMA",
    "merge_multicast",
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
    #: each subscription's slot in the group's registry (S-MN: the whole group lists a message's targets in
    #: that order, so the shards' lists merge back into it); None: not known (a stream's shards)
    ranks: np.ndarray | None = None

    def build(self) -> ShardOperator:
        return ShardOperator(self)


class ShardOperator:
    """A shard's point index, matching the messages that visit it (its x1 interval meets ``(OUTER_L,
    INNER_L]``: :meth:`SubscriptionShards.message_shards`' rule)."""

    stateless = True

    def __init__(self, base: ShardBase):
        self.index, self.cuts = base.index, np.asarray(base.cuts, dtype=np.float64)
        self.points = SubscriptionPoints()
        self.ranks = None       # by this shard's slot: the subscription's registry slot (S-MN's order)
        if len(base.ids):
            slots = self.points.add(base.ids, base.x1, base.x2)
            if base.ranks is not None:
                self.ranks = np.empty(self.points.capacity, dtype=np.int64)
                self.ranks[slots] = np.asarray(base.ranks, dtype=np.int64)

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

    def multicast_entries(self, messages: pa.Table, old_value_of_step0=None) -> pa.Table:
        """This shard's part of S-MN (000 §2.1.2): S-UN's entries of its subscriptions (the rows
        :meth:`unicast` gives, before they become rows), each with its registry slot (``rank``) --
        :data:`MULTICAST_ENTRY_SCHEMA`, for :func:`merge_multicast`.  A message of the whole group lists the
        subscriptions that share one (seq, new value): they may sit in several shards, so the shards hand
        their entries on instead of grouping them themselves."""
        if self.ranks is None and len(self.points):
            raise ValueError(f"shard {self.index} has no registry slots: S-MN cannot order its targets")
        seq, sl, value, _ = _unicast_entries(self.points, self.visiting(messages), old_value_of_step0)
        return pa.table({"seq": pa.array(seq, pa.int64()),
                         "rank": pa.array(self.ranks[sl] if sl.size else np.empty(0, np.int64), pa.int64()),
                         "value": pa.array(np.asarray(value, dtype=np.float64), pa.float64()),
                         "id": self.points.id_array(sl)}, schema=MULTICAST_ENTRY_SCHEMA)


#: one S-UN entry of a shard on its way to S-MN's merge: the seq, the subscription's registry slot and id, its
#: new value (NaN: the range became empty)
MULTICAST_ENTRY_SCHEMA = pa.schema([("seq", pa.int64()), ("rank", pa.int64()), ("value", pa.float64()),
                                    ("id", pa.string())])


def merge_multicast(tables, group_id: str, maximum: bool) -> pa.Table:
    """S-MN's messages (``MULTICAST_SCHEMA``, as ``RangeMinGroup.apply(..., 'multicast')`` gives them) from the
    shards' entries (:meth:`ShardOperator.multicast_entries`, any seqs in any order).  Every subscription is in
    one shard, so the entries are the whole group's S-UN entries, each once; grouped by
    ``delivery.multicast_order`` -- the whole group's own grouping -- with registry slots in place of the whole
    group's slots: the whole group's points are built from the registry's live subscriptions in slot order
    (``family.live``), so both orders agree, and every message and every ``targets`` list equals the whole
    group's."""
    tables = [t for t in tables if t.num_rows]
    t = pa.concat_tables(tables) if tables else MULTICAST_ENTRY_SCHEMA.empty_table()
    seq = t.column("seq").to_numpy()
    rank = t.column("rank").to_numpy()
    value = t.column("value").to_numpy(zero_copy_only=False)
    seq, value, _, starts, listed = multicast_order(seq, rank, value, np.zeros(seq.size, dtype=np.int64))
    n = int(seq.size)
    # the targets come back as ranks; a rank names one subscription, so any of its entries gives its id
    known, entry = np.unique(rank, return_index=True)
    ids = t.column("id").take(pa.array(entry[np.searchsorted(known, listed)], pa.int64())).to_pylist()
    targets = [json.dumps(ids[a:b]) for a, b in zip(starts[:-1].tolist(), starts[1:].tolist())]
    nulls = pa.nulls(n, pa.float64())
    return pa.table({
        "group_id": pa.array([group_id] * n, pa.string()), "seq": pa.array(seq, pa.int64()),
        "step": pa.array(np.zeros(n, np.int8), pa.int8()),
        "op": pa.array(["NEW_MAX" if maximum else "NEW_MIN"] * n, pa.string()),
        "new_value": pa.array(value, pa.float64(), mask=np.isnan(value)),
        "inner_l": nulls, "inner_r": nulls, "outer_l": nulls, "outer_r": nulls,
        "targets": pa.array(targets, pa.string())}, schema=MULTICAST_SCHEMA)


def shard_bases(ids, x1, x2, k: int, ranks=None) -> tuple[np.ndarray, list]:
    """``(cuts, [ShardBase, …])``: subscriptions cut into (at most) ``k`` shards at equal-count x1 cut points
    (fewer when x1 values repeat: :func:`equal_count_cuts`); ``ranks``: their registry slots (S-MN)."""
    cuts = equal_count_cuts(np.asarray(x1, dtype=np.float64).reshape(-1), k)
    return cuts, shard_bases_at(ids, x1, x2, cuts, ranks)


def shard_bases_at(ids, x1, x2, cuts, ranks=None) -> list:
    """The subscriptions cut at the given x1 ``cuts`` (``len(cuts) + 1`` shards, some maybe empty): a stream keeps
    the cuts it started with, so a subscription change moves no subscription between shards and leaves the
    shards it does not touch as they were."""
    ids = np.asarray(ids, dtype=object).reshape(-1)
    x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
    x2 = np.asarray(x2, dtype=np.float64).reshape(-1)
    cuts = np.asarray(cuts, dtype=np.float64).reshape(-1)
    where = np.searchsorted(cuts, x1, side="right")
    ranks = None if ranks is None else np.asarray(ranks, dtype=np.int64).reshape(-1)
    return [ShardBase(j, cuts, ids[where == j], x1[where == j].copy(), x2[where == j].copy(),
                      None if ranks is None else ranks[where == j].copy())
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
