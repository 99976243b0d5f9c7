"""BOX_MIN / BOX_MAX / BOX_TOPK groups with their subscriptions split into shards, the rows copied in each (issue 16
item 4): the driver's side.  A part of the Engine facade (``engine.py``; called from ``control/publishing.py``'s
``publish`` loop).  The pure parts -- the shards' bases, the sharded view -- are ``operators/box/shards.py``.

A box group past the setting ``Engine.range_subscription_shards`` (``control/range_shards.range_shard_count``:
None -> whole below 200,000 subscriptions, ``parallelism`` shards from there; an int >= 2 forces; 0 / 1 whole)
runs, in either mode, as Q replicas ``<group>#b<j>``: each a whole box group over the subscriptions whose id
hashes to shard j and every row of the table -- its base a ``BoxClassSnapshot`` of them, its log the update batches,
exactly like the whole group's replica.  They run in ``publish``'s ordinary job, as FILTER's shards do: one placed
task per shard (``runtime/groups.placed_frame``), each seeing the group's whole batch; a Python worker keeps one
shard per group (``Replica.one_per_worker`` -> ``replicas.keep_one_per_group``), so an executor holds its share of
the subscriptions and their kept results -- and a copy of the rows.  Unicast: the shards' rows together are the
whole group's; reformulated: shard 0 alone sends the messages (they depend only on the rows, 002 §II-C).

Per sharded group the driver keeps (:class:`BoxShardState`) the shards' replicas and, per shard, the subscriptions
its base holds.  A subscription change rebuilds only the bases of the shards whose subscriptions changed (the ids it
added or dropped hash to them; and shard 0 when the group's set of top-k k values changed: its messages are sent
for every k in use); a change of the rows behind the shards' back (``load``, a stream's rows taken in, a publish in
which the group ran whole or was skipped, a failed task) rebuilds every shard from the table's rows; a log past
``LOG_COMPACTION_ROWS`` rows gets new bases that continue the workers' caches.  While sharded the whole group's
replica does not follow the table (it is rebuilt from the rows should the group run whole again).

``result()``, ``stats()`` and EXPLAIN read the shard a subscription hashes to (``ShardedBoxView``): on the driver
(cache + log replay) or, for a group past ``driver_operator_limit``, where the shards live -- one placed task per
shard read (``runtime/remote.call_on_each``), the driver holding the answers, never the shards (issue 16 item 3).
The ``deliver()`` side (reformulated) is seeded from the shards as they stand before the batch, their files pinned
(``replicas.pin``) and built at the first ``deliver()``, as the whole group's (``publishing.PendingSeed``).

In a ``stream()`` the same shards are state partitions ``<group>#b<j>`` of the stream's stateful operator
(``control/streaming.py`` ``_box_stream_shards``, ``operators/box/stream_shards.py``, ``runtime/stream.py``).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sparksub.control.publishing import LOG_COMPACTION_ROWS
from sparksub.control.range_shards import range_shard_count
from sparksub.operators.box.group import BoxSubscribers
from sparksub.operators.box.shards import (
    BOX_SHARD_CLASSES,
    ShardedBoxView,
    shard_digests,
    shard_snapshots,
)
from sparksub.operators.joins.shards import subscription_shard
from sparksub.operators.shared.families import key_type as family_key_type
from sparksub.process_memory import BULK_ROWS, release_freed_memory
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import remote as spark_remote
from sparksub.runtime import replicas as spark_replicas

__all__ = ["BoxShardGroups", "BoxShardState", "BoxShardsSeed"]


@dataclass
class BoxShardState:
    """One sharded box group as the driver keeps it: its shards' replicas (``<group>#b<j>``)."""

    group_id: str
    table: str
    shards: list = field(default_factory=list)      # Replica per shard
    members: list = field(default_factory=list)     # per shard: (subscriptions, digest) its base holds
    ks: tuple = ()                                   # BOX_TOPK: the group's k values shard 0 sends messages for
    bases: list = field(default_factory=list)       # per shard: bases written (a subscription change: only its)
    log_rows: int = 0
    stale: bool = True                               # the rows changed behind the shards' back: every base anew
    subscriptions_changed: bool = False


@dataclass(frozen=True)
class BoxShardsSeed:
    """A sharded group's ``deliver()`` side not built yet: its shards as of the reformulated publish that seeded it,
    their files linked into ``folder`` (``replicas.pin``: compactions and rebuilds do not remove them)."""

    replicas: tuple
    folder: Path


class BoxShardGroups:
    """The Engine's sharded box groups (a mixin of ``engine.Engine``, before the mixins whose methods it follows:
    ``_changed``, ``_rows_changed``, ``_zoned_view``, ``_sync_subscribers``, ``_seeded``)."""

    @property
    def _box_shard_states(self) -> dict:
        return self.__dict__.setdefault("_box_shard_state_map", {})

    # ---- which groups run sharded ----------------------------------------------------------------------
    def _box_shard_count(self, entry) -> int:
        """How many subscription shards the box group ``entry`` runs with; 0: whole."""
        if getattr(entry.physical, "klass", None) not in BOX_SHARD_CLASSES:
            return 0
        return range_shard_count(getattr(self, "range_subscription_shards", None), len(entry.registry),
                                 self._parallelism())

    def _box_shards_select(self, state, groups, mode) -> dict:
        """``{group id: shard replicas}`` of the box groups on ``state``'s table that run sharded in this publish,
        as of before its batch.  One that does not (it runs whole now, or is skipped) misses the batch: its shards
        are rebuilt from the rows when it runs sharded again."""
        chosen = {}
        for e in groups:
            n = self._box_shard_count(e)
            if n:
                chosen[e.group_id] = {r.replica_id: r for r in self._box_shard_replicas(state, e, n)}
        table = state.definition.name.lower()
        for bs in self._box_shard_states.values():
            bs.stale |= bs.table == table and bs.group_id not in chosen
        return chosen

    # ---- the engine's methods it follows --------------------------------------------------------------
    def _changed(self, entry, subscriptions: bool = False) -> None:
        super()._changed(entry, subscriptions)
        bs = self._box_shard_states.get(entry.group_id)
        if bs is not None and subscriptions:
            bs.subscriptions_changed = True    # the shards whose subscriptions changed get new bases, only they

    def _rows_changed(self, table: str) -> None:
        for bs in self._box_shard_states.values():
            if bs.table == table.lower():
                bs.stale = True
        super()._rows_changed(table)

    def _zoned_view(self, entry):
        """A sharded box group as of now (``result``, EXPLAIN, stats): each subscription read from its shard;
        else the next mixin's view, if any."""
        bs = self._box_shard_states.get(entry.group_id)
        if bs is None or bs.stale or not bs.shards:
            return super()._zoned_view(entry)
        shards = list(bs.shards)
        state = self._tables[bs.table]
        if self._read_in_place(state, entry):
            # past driver_operator_limit: each read runs where the shards live, one placed task per shard read
            # (runtime/remote.py); the driver holds the answers, never the shards (issue 16 item 3)
            def read(which, method, args):
                return spark_remote.call_on_each(self.spark, [shards[j] for j in which], (method,), args,
                                                 name="box_shard")
        else:
            def read(which, method, args):
                return [getattr(self._replica_operator(shards[j]), method)(*args) for j in which]
        sizes = [n for n, _ in bs.members]
        if bs.subscriptions_changed:   # not rebuilt yet: the registry's count per shard, the bases' logs as they are
            _, ids, _, _ = entry.family.live(entry.registry)
            sizes = np.bincount(subscription_shard(ids.tolist(), len(shards)), minlength=len(shards)).tolist()
        per_shard = [{"shard": j, "subscriptions": n, "bases": b, "logged_rows": r.logged_rows}
                     for j, (n, b, r) in enumerate(zip(sizes, bs.bases, shards))]
        return ShardedBoxView(read, len(entry.registry), per_shard, {"shard_replicas": [r.replica_id for r in shards]})

    def _sync_subscribers(self, entry, mode: str = "reformulated") -> None:
        """A sharded group's ``deliver()`` side: seeded from its shards as of before this batch, built at the first
        ``deliver()`` (as the whole group's: a caller who never calls ``deliver()`` never has every subscriber's
        result on the driver)."""
        bs = self._box_shard_states.get(entry.group_id)
        if bs is None or bs.stale or not bs.shards:
            return super()._sync_subscribers(entry, mode)
        variant = getattr(mode, "variants", {}).get(entry.family.name)
        if (entry.subscribers is not None or entry.subscribers_seed is not None) \
                and entry.subscribers_version == entry.version and entry.subscribers_variant == variant:
            return
        entry.subscribers_version, entry.subscribers_variant = entry.version, variant
        self._drop_seed(entry)
        folder = self.directory.area("seeds", entry.group_id, uuid.uuid4().hex)
        entry.subscribers = None
        entry.subscribers_seed = BoxShardsSeed(tuple(spark_replicas.pin(r, folder) for r in bs.shards), folder)

    def _seeded(self, entry) -> None:
        seed = entry.subscribers_seed
        if not isinstance(seed, BoxShardsSeed):
            return super()._seeded(entry)
        # each receiver depends only on its box and the messages (000 §4): the shards' receivers side by side
        key_type = family_key_type(self._tables[entry.family.tables(entry.physical)[0]].definition)
        entry.subscribers = BoxSubscribers.merged([BoxSubscribers(self._replica_operator(r), key_type)
                                                   for r in seed.replicas])
        self._drop_seed(entry)

    # ---- the replicas ----------------------------------------------------------------------------------
    def _box_snapshot(self, entry):
        """The whole group's snapshot (``family.snapshot``: every live subscription, the table's rows now)."""
        return entry.family.snapshot(entry.registry, entry.physical, entry.group_id, self._tables)

    def _box_shard_replicas(self, state, entry, n_shards: int) -> list:
        """The group's shards as of before this batch: a new base for each shard whose subscriptions changed (every
        shard when the rows changed behind them or the count changed), or -- a compaction the workers' caches
        continue -- every shard when the log grew past ``LOG_COMPACTION_ROWS``."""
        bs = self._box_shard_states.get(entry.group_id)
        if bs is None:
            bs = self._box_shard_states[entry.group_id] = BoxShardState(entry.group_id,
                                                                          entry.family.tables(entry.physical)[0])
        if len(bs.shards) != n_shards:
            bs.stale = True
        long_log = bs.log_rows > LOG_COMPACTION_ROWS
        if not (bs.stale or bs.subscriptions_changed or long_log):
            return bs.shards
        snap = self._box_snapshot(entry)
        members = shard_digests(snap, n_shards)
        ks = tuple(sorted({int(k) for k in snap.sub_k})) if snap.sub_k is not None else ()
        # shard -> whether its new base continues the old one (a compaction: the old base with its log applied,
        # nothing else changed, so a worker's cached shard goes on: replicas.new_base ``continues``)
        if bs.stale:
            rebuild = dict.fromkeys(range(n_shards), False)
        else:
            changed = {j for j in range(n_shards) if members[j] != bs.members[j]}
            if ks != bs.ks:
                changed.add(0)   # shard 0 sends the messages for every k of the group
            rebuild = {j: j not in changed for j in range(n_shards) if j in changed or long_log}
        old = bs.shards if len(bs.shards) == n_shards else []
        if not old:   # another shard count: every id moves, the old shards' files go
            for r in bs.shards:
                spark_replicas.discard(r)
            bs.bases = [0] * n_shards
        new = list(old) or [None] * n_shards
        for j, part in shard_snapshots(snap, n_shards, only=set(rebuild)).items():
            new[j] = spark_replicas.new_base(self.directory, self.uid, f"{entry.group_id}#b{j}", part,
                                             replaces=old[j] if old else None, continues=rebuild[j],
                                             one_per_worker=True)
            bs.bases[j] += 1
        snap = part = None   # (the shards are in their files now)
        if len(state.rows) + len(entry.registry) >= BULK_ROWS:
            release_freed_memory()   # the snapshot's copies and the shards' pickles are freed (process_memory.py)
        bs.shards, bs.members, bs.ks = new, members, ks
        if len(rebuild) == n_shards:   # every log starts anew (else the longest goes on)
            bs.log_rows = 0
        bs.stale, bs.subscriptions_changed = False, False
        return bs.shards

    # ---- EXPLAIN ---------------------------------------------------------------------------------------
    def _spark_jobs(self, physical, entry) -> list:
        """EXPLAIN's Spark job of a group that runs in subscription shards (``Publishing._spark_jobs``): publish's
        ordinary job, a task per shard, each with the group's whole batch."""
        n_shards = self._box_shard_count(entry) if entry is not None else 0
        if not n_shards:
            return super()._spark_jobs(physical, entry)
        rids = [f"{entry.group_id}#b{j}" for j in range(n_shards)]
        return [(f"{spark_groups.counted(n_shards, 'subscription shard')}, each with every row (a task per shard)",
                 lambda: self._group_job_frame(physical, entry, rids))]

    # ---- one publish -------------------------------------------------------------------------------------
    def _box_shards_commit(self, entry, group_batch, failed: set, mode, rows: int) -> None:
        """After the batch committed: each shard logs the batch (its task moved its cache one step); a failed
        group's shards are rebuilt from the rows next time.  The whole group's replica no longer follows the
        table."""
        bs = self._box_shard_states[entry.group_id]
        entry.version += 1
        entry.base_stale = True
        if entry.group_id in failed:
            bs.stale = True
            return
        if group_batch.num_rows:
            bs.shards = [r.append(group_batch) for r in bs.shards]
            bs.log_rows += rows
        if mode == "reformulated" and (entry.subscribers is not None or entry.subscribers_seed is not None):
            entry.subscribers_version = entry.version
