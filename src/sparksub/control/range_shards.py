"""How many subscription shards a range group runs with (issue 16 item 4): the decision
``Engine.range_subscription_shards`` makes, shared by ``publish`` (RANGE_TOPK, RANGE_DISTINCT, RANGE_AGG: stage 1 the
group's rows, which hold no subscription and emit the class's reformulated messages -- a ``reformulated`` publish's
output; in ``unicast``, stage 2 the subscriptions by a hash of their id, each shard's subscribers a logged replica)
and ``stream()`` (RANGE_MIN / RANGE_MAX in ``unicast``: the stream's stateful stage the rows, the x1 shards a second
stage in the same query: ``runtime/stream.py``).

Why subscription shards and not X zones for these: the reformulated messages do not depend on the subscriptions
(000 §2.3.1, 002 §II-C), so the subscriber side -- each subscription's point in the subscription space and, for the
stateful classes, its current result -- splits by any partition of the subscriptions, with no second round; the
rows' side is one core.  (RANGE_MIN's publish splits its rows too, into DS-CN's X zones: ``control/zones.py``.)

Below it, :class:`RangeShardGroups`, the driver's side of ``publish`` for the three classes (a mixin of
``engine.Engine``; called from ``control/publishing.py``'s ``publish`` loop).  Per sharded group it keeps
(:class:`RangeShardState`):

* **the rows** (stage 1): one replica ``<group>#r0`` whose base is the table's rows and no subscription
  (``operators/shared/range_shards.py`` ``rows_extra``: top-k paints per update, Paint-Dense, for the group's k
  values) and whose log is the update batches it applied.  Rebuilt from the table's rows only when they changed
  behind its back (``load``, a stream's rows taken in, a publish in which the group ran whole or was skipped, a
  failed task), or past ``RANGE_SHARD_COMPACTION_ROWS`` (then a compaction: the workers' cached rows go on,
  ``replicas.new_base(continues=True)``); a subscription with a k the rows do not paint for yet is a log entry
  (``topk.group.PaintedKs``), not a new base;
* **the subscription shards** (stage 2): ``<group>#q<j>``, the subscriptions by a CRC32 of their id, each base its
  subscriptions with their results as of the base (seeded from the rows' core where the rows are cached, in a
  Spark task: ``runtime/range_shards.seed_shards``) and each log the message batches it applied, logged when the
  publish commits (a reformulated publish runs no shard: its messages are logged all the same, and a worker's
  cached shard replays them when it next runs; a subscription change waits for the next unicast publish to
  rebuild a shard).  A
  subscription change rebuilds only the bases of the shards whose subscriptions changed (the ids it added or
  dropped hash to them); a change of the rows behind the shards' back rebuilds every shard's base (their results
  would be stale); a shard's log past ``RANGE_SHARD_COMPACTION_MESSAGES`` messages gets a new base continuing it.

``result()``, ``stats()`` and EXPLAIN read a sharded group through ``ShardedRangeView``: the rows' operator (rows
only, no subscriber state) with each subscription's bounds from the registry -- on the driver, or, a group past
``driver_operator_limit``, where the rows are cached, each read a Spark task (``runtime/remote.py``).
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field

import numpy as np

from sparksub.control.zones import RANGE_ZONE_ROWS
from sparksub.operators.distinct.zones import DistinctZoneSnapshot
from sparksub.operators.joins.shards import subscription_shard
from sparksub.operators.shared.families import key_type as family_key_type
from sparksub.operators.shared.range_shards import (
    PER_UPDATE_VARIANT,
    RANGE_SHARD_CLASSES,
    ShardedRangeView,
    rows_extra,
    rows_mode,
    shard_bases,
    shardable,
)
from sparksub.operators.shared.range_zones import (
    HALO_CLASSES,
    SECOND_ROUND_CLASSES,
    ZONED_ROWS_CLASSES,
    RowsZoneSnapshot,
    ZonedRows,
    zone_cuts,
    zone_rows,
)
from sparksub.operators.shared.variants import variant_of
from sparksub.operators.topk.group import PaintedKs
from sparksub.operators.topk.zones import TopkRowsZoneSnapshot, halo_depth
from sparksub.process_memory import BULK_ROWS, release_freed_memory
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import keepalive
from sparksub.runtime import range_shards as spark_range_shards
from sparksub.runtime import remote as spark_remote
from sparksub.runtime import replicas as spark_replicas

__all__ = [
    "RANGE_SHARD_COMPACTION_MESSAGES",
    "RANGE_SHARD_COMPACTION_ROWS",
    "RANGE_SHARD_SUBSCRIPTIONS",
    "RangeShardGroups",
    "RangeShardState",
    "range_shard_count",
]

#: subscriptions of a range group from which it runs with its subscriptions in shards by default
#: (``Engine.range_subscription_shards = None``): below it one task holding them costs less than a second stage
RANGE_SHARD_SUBSCRIPTIONS = 200_000


def range_shard_count(setting, subscriptions: int, parallelism: int) -> int:
    """Subscription shards for a range group of ``subscriptions`` under the setting; 0: whole.

    >>> range_shard_count(None, 1_000, 2), range_shard_count(None, 200_000, 2), range_shard_count(4, 10, 2)
    (0, 2, 4)
    >>> range_shard_count(1, 10**6, 2), range_shard_count(0, 10**6, 2), range_shard_count(None, 10**6, 1)
    (0, 0, 0)
    """
    if setting is None:
        if subscriptions < RANGE_SHARD_SUBSCRIPTIONS:
            return 0
        setting = parallelism
    return int(setting) if int(setting) >= 2 else 0


def range_zone_count(setting, rows: int, parallelism: int) -> int:
    """X zones for a sharded group's rows (``Engine.range_zones``, the setting RANGE_MIN's zones read) over a table
    of ``rows``; 0: one replica.

    >>> range_zone_count(None, 1_000, 2), range_zone_count(None, 200_000, 2), range_zone_count(3, 10, 2)
    (0, 2, 3)
    >>> range_zone_count(1, 10**6, 2), range_zone_count(None, 10**6, 1)
    (0, 0)
    """
    if setting is None:
        if rows < RANGE_ZONE_ROWS:
            return 0
        setting = parallelism
    return int(setting) if int(setting) >= 2 else 0


#: update rows logged to a sharded group's rows replica before a new base
RANGE_SHARD_COMPACTION_ROWS = 200_000
#: message rows logged to a subscription shard before a new base: a shard's base costs a result query per
#: subscription on the driver (top-k: 100,000 subscriptions ~ 10 s), a cold worker's replay ~25 us per message, and a
#: batch of 2,000 top-k updates is ~80,000 Paint-Dense messages (bench/range_shards.py) -- so rarely
RANGE_SHARD_COMPACTION_MESSAGES = 2_000_000


@dataclass
class RangeShardState:
    """One sharded range group as the driver keeps it: its rows' replica and its subscription shards."""

    group_id: str
    table: str
    kind: str
    zones: list = field(default_factory=list)      # stage 1: <group>#r0, or one replica <group>#r<i> per X zone
    n_zones: int = 0                               # the zones asked for (repeated X values may give fewer); 0 whole
    cuts: tuple = ()                               # the zones' cut points (``shared/range_zones.py``)
    ks: frozenset = frozenset()                    # top-k: the k values the rows paint for
    log_rows: int = 0
    rows_stale: bool = True                        # the rows changed behind the replica's back
    shards: list = field(default_factory=list)     # Replica per shard (<group>#q<j>): stage 2
    n_shards: int = 0
    shard_digests: list = field(default_factory=list)   # per shard: (size, digest) of what its base holds
    shards_stale: bool = True                      # every shard's base out of date (their results are)
    stateless_shards: bool = False                 # DISTINCT's subscribers keep no state: nothing logged
    subscriptions_changed: bool = False
    rebuilds: int = 0                              # rows bases built from the table's rows
    shard_rebuilds: int = 0                        # shard bases written
    folder: str | None = None                      # this publish's messages
    timings: dict = field(default_factory=dict)    # the last publish's wall seconds per stage

    @property
    def rows(self) -> spark_replicas.Replica | None:
        """The rows' first replica (the only one unless zoned): its log length is every zone's."""
        return self.zones[0] if self.zones else None


def _members(ids, x1, x2, k) -> tuple:
    """A shard's subscriptions in id order (what tells whether its base still holds them)."""
    order = np.argsort(np.asarray(ids, dtype=object).astype(str), kind="stable")
    return (np.asarray(ids, dtype=object)[order], np.asarray(x1)[order], np.asarray(x2)[order], np.asarray(k)[order])


def _digest(members: tuple) -> tuple[int, bytes]:
    """A shard's size and a digest of its members: what tells a changed shard, without the driver keeping a Python
    object per subscription (the registry holds them packed)."""
    ids, x1, x2, k = members
    h = hashlib.blake2b(digest_size=16)
    h.update("\0".join(map(str, ids.tolist())).encode())
    for column in (x1, x2, k):
        h.update(np.ascontiguousarray(column).tobytes())
    return len(ids), h.digest()


def _shard_members(family, reg, n_shards: int) -> list:
    """Each shard's live subscriptions ``(ids, x1, x2, k)`` in id order, from the registry."""
    slots, ids, x1, x2 = family.live(reg)
    k = family.limits(reg, slots)
    which = subscription_shard(ids.tolist(), n_shards)
    return [_members(ids[which == j], x1[which == j], x2[which == j], k[which == j]) for j in range(n_shards)]


def _shards_to_rebuild(entry, rs: RangeShardState, n_shards: int, stale: bool) -> tuple[dict, list | None, list | None]:
    """Which of the group's ``n_shards`` subscription shards get a new base before the next batch (``rs`` unchanged):
    ``({shard: continues}, members, digests)`` -- every shard when ``stale`` (the rows changed behind them, or the
    count), else those whose subscriptions changed (their digests, ``members`` and ``digests`` computed then), and
    those whose log grew past ``RANGE_SHARD_COMPACTION_MESSAGES`` (a compaction the workers' caches continue)."""
    rebuild: dict = {}   # shard -> continues (a compaction)
    members = digests = None
    if stale or rs.subscriptions_changed:
        members = _shard_members(entry.family, entry.registry, n_shards)
        digests = [_digest(m) for m in members]
        rebuild = {j: False for j in range(n_shards) if stale or digests[j] != rs.shard_digests[j]}
    for j, r in enumerate(rs.shards if not stale else []):
        if j not in rebuild and r.logged_rows > RANGE_SHARD_COMPACTION_MESSAGES:
            rebuild[j] = True
    return rebuild, members, digests


class RangeShardGroups:
    """The Engine's sharded RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG groups (a mixin of ``engine.Engine``, before the
    mixins whose methods it follows: ``_changed``, ``_rows_changed``, ``_zoned_view``)."""

    @property
    def _range_shard_states(self) -> dict:
        return self.__dict__.setdefault("_range_shard_state_map", {})

    # ---- which groups run sharded ----------------------------------------------------------------------
    def _range_shard_count(self, entry, mode) -> int:
        """How many subscription shards ``entry`` runs with in a ``mode`` publish; 0: whole (a reformulated
        publish in a variant whose server needs the subscriptions: ``range_shards.shardable``).  A group whose rows
        run in X zones has one shard at least: the zones hold no subscription."""
        klass = getattr(entry.physical, "klass", None)
        if klass not in RANGE_SHARD_CLASSES or not shardable(mode, klass):
            return 0
        if klass in HALO_CLASSES and self._rows_zone_count(entry) and \
                variant_of(rows_mode(mode), "topk") not in (None, PER_UPDATE_VARIANT):   # (None: unicast's)
            return 0   # zoned top-k rows paint per update only: Paint-Batch's messages span the zones (002 §IV-A)
        shards = range_shard_count(getattr(self, "range_subscription_shards", None), len(entry.registry),
                                   self._parallelism())
        return shards or (1 if self._rows_zone_count(entry) else 0)

    def _range_shards_select(self, state, groups, mode) -> dict:
        """``{group id: shards}`` of the groups on ``state``'s table that run sharded in this publish.  One that
        does not (it runs whole now, or is skipped) misses the batch: its rows and shards are rebuilt from the rows
        when it runs sharded again."""
        counts = {e.group_id: self._range_shard_count(e, mode) for e in groups}
        chosen = {gid: n for gid, n in counts.items() if n}
        table = state.definition.name.lower()
        for rs in self._range_shard_states.values():
            rs.rows_stale |= rs.table == table and rs.group_id not in chosen
        return chosen

    # ---- the engine's methods it follows --------------------------------------------------------------
    def _changed(self, entry, subscriptions: bool = False) -> None:
        super()._changed(entry, subscriptions)
        rs = self._range_shard_states.get(entry.group_id)
        if rs is not None and subscriptions:
            rs.subscriptions_changed = True    # the shards whose members changed get new bases; never the rows

    def _rows_changed(self, table: str) -> None:
        for rs in self._range_shard_states.values():
            if rs.table == table.lower():
                rs.rows_stale = True
        super()._rows_changed(table)

    def _zoned_view(self, entry):
        """A sharded range group as of now (``result``, EXPLAIN, stats) through its rows and the registry; else
        the zones' view, if any (``control/zones.py``)."""
        rs = self._range_shard_states.get(entry.group_id)
        if rs is None or rs.rows_stale or rs.rows is None:
            return super()._zoned_view(entry)
        rows_group = self._range_rows_group(entry, rs)
        reg, family = entry.registry, entry.family

        def bounds_of(sub_id):
            slot = reg.slot(sub_id)
            return float(reg.x1[slot]), float(reg.x2[slot]), int(family.limits(reg, np.array([slot]))[0])
        if rs.shards and not rs.subscriptions_changed:
            sizes = [n for n, _ in rs.shard_digests]
        else:
            _, ids, _, _ = family.live(reg)
            sizes = np.bincount(subscription_shard(ids.tolist(), max(rs.n_shards, 1)),
                                minlength=max(rs.n_shards, 1)).tolist()
        shards = [{"shard": j, "subscriptions": int(n), "logged_messages": r.logged_rows}
                  for j, (n, r) in enumerate(zip(sizes, rs.shards))] or \
            [{"shard": j, "subscriptions": int(n)} for j, n in enumerate(sizes)]
        info = {"rows_replicas": [r.replica_id for r in rs.zones], "rows_rebuilds": rs.rebuilds,
                "shard_rebuilds": rs.shard_rebuilds,
                "timings": dict(rs.timings)}
        return ShardedRangeView(rows_group, bounds_of, len(reg), shards, info, len(rs.zones) if rs.cuts else 0)

    def _subscribers_of(self, entry):
        """deliver()'s subscriber side of a sharded group: one shard of every subscription, seeded from the rows'
        core (what each shard's base is); else the engine's."""
        view = self._zoned_view(entry) if entry.group_id in self._range_shard_states else None
        if not isinstance(view, ShardedRangeView):
            return super()._subscribers_of(entry)
        rs = self._range_shard_states[entry.group_id]
        slots, ids, x1, x2 = entry.family.live(entry.registry)
        key_type = family_key_type(self._tables[rs.table].definition)
        k = entry.family.limits(entry.registry, slots)
        if isinstance(view.rows_group, spark_remote.RemoteOperator):   # read in place: seeded where the rows are
            base = spark_range_shards.seeded_base(self.spark, rs.rows, entry.group_id, key_type, ids, x1, x2, k)
        else:
            base = shard_bases(view.rows_group, entry.group_id, ids, x1, x2, k, 1, key_type)[0]
        return base.build().subscribers

    # ---- the replicas ----------------------------------------------------------------------------------
    def _range_state(self, entry) -> RangeShardState:
        rs = self._range_shard_states.get(entry.group_id)
        if rs is None:
            rs = self._range_shard_states[entry.group_id] = RangeShardState(
                entry.group_id, entry.family.tables(entry.physical)[0], entry.physical.klass)
        return rs

    def _rows_zone_count(self, entry) -> int:
        """How many X zones a sharded group's rows run in; 0: one replica (``range_zones.ZONED_ROWS_CLASSES``:
        RANGE_AGG, whose messages need no second round, RANGE_DISTINCT, whose zones run one:
        ``distinct/zones.py``, and RANGE_TOPK, whose zones paint with halos: ``topk/zones.py``)."""
        if entry.physical.klass not in ZONED_ROWS_CLASSES:
            return 0
        setting = getattr(self, "range_zones", None)
        if entry.physical.klass in HALO_CLASSES and setting is None:
            # top-k zones only when asked for: each publish pays the edges' job and a reformulated publish in
            # Paint-Batch runs the group whole (its zones rebuilt after), so no table size makes them a default
            return 0
        table = self._tables[entry.family.tables(entry.physical)[0]]
        try:
            rows = len(table.rows)
        except TypeError:   # rows kept off the driver
            rows = RANGE_ZONE_ROWS
        return range_zone_count(setting, rows, self._parallelism())

    def _range_rows(self, entry) -> RangeShardState:
        """The group's rows (stage 1: one replica, or one per X zone), the bases rebuilt from the table's rows
        when stale or (a compaction) when the log grew long; a k the rows do not paint for yet is a log entry
        (``PaintedKs``)."""
        rs = self._range_state(entry)
        family, node = entry.family, entry.physical
        slots = entry.registry.live_slots()
        ks = frozenset(family.limits(entry.registry, slots).tolist()) if rs.kind == "RANGE_TOPK" else frozenset()
        n_zones = self._rows_zone_count(entry)
        if rs.rows is None or rs.rows_stale or rs.log_rows > RANGE_SHARD_COMPACTION_ROWS or rs.n_zones != n_zones:
            # the rows changed behind the replicas' back (else: only the log's length, or the count of zones asked --
            # the new bases are the old state with its log applied, nothing else changed)
            changed = rs.rows is None or rs.rows_stale
            rs.ks = ks if changed else ks | rs.ks
            keys, xs, ys = family.table_rows(node, self._tables, text=family.object_values)
            empty = np.zeros(0)

            def snapshot(keys, xs, ys):
                return family.snapshot_class(entry.group_id, node.table, node.x, node.y, family.option(node),
                                             np.zeros(0, dtype=object), empty, empty, np.zeros(0, dtype=np.int64),
                                             keys, xs, ys, extra=rows_extra(rs.kind, rs.ks))
            # a compaction keeps the cut points, so the workers' cached zones go on; else equal-count cuts now
            # (none when the rows have fewer than two X values: the rows in one replica until the next new bases)
            cuts = rs.cuts if not changed and rs.n_zones == n_zones and rs.cuts else \
                zone_cuts(xs, n_zones) if n_zones else ()
            # a DISTINCT zone records its steps per seq for the second round (``distinct/zones.py``); a top-k zone
            # paints with its neighbours' halos (``topk/zones.py``)
            zone_base = DistinctZoneSnapshot if rs.kind in SECOND_ROUND_CLASSES else \
                TopkRowsZoneSnapshot if rs.kind in HALO_CLASSES else RowsZoneSnapshot
            bases = [zone_base(snapshot(*zone_rows(keys, xs, ys, cuts, z)), z, cuts)
                     for z in range(len(cuts) + 1)] if cuts else [snapshot(keys, xs, ys)]
            # a worker's cached rows continue if the layout is the same and they paint for every k the new base does
            continues = not changed and cuts == rs.cuts and ks <= rs.ks
            old = rs.zones if len(rs.zones) == len(bases) else []
            if not old:    # another count of zones: the old replicas' files go
                for r in rs.zones:
                    spark_replicas.discard(r)
            rs.zones = [spark_replicas.new_base(self.directory, self.uid, f"{entry.group_id}#r{z}", base,
                                                replaces=old[z] if old else None, continues=continues,
                                                one_per_worker=True)
                        for z, base in enumerate(bases)]
            rs.cuts, rs.n_zones = cuts, n_zones
            if len(keys) >= BULK_ROWS:
                release_freed_memory()   # the rows' columns and the bases' pickles are freed (process_memory.py)
            if changed:
                rs.shards_stale = True     # the shards' results were of the rows as they were
                rs.rebuilds += 1
            rs.rows_stale, rs.log_rows = False, 0
        elif not ks <= rs.ks:
            # a subscription with a new k: the rows paint for it from now on, a log entry, no new base
            rs.ks = ks | rs.ks
            rs.zones = [r.append(PaintedKs(tuple(sorted(rs.ks)))) for r in rs.zones]
        return rs

    def _range_rows_group(self, entry, rs: RangeShardState):
        """The rows' operator as of now: in this (driver) process (the runtime's cache + log replay), or, a group
        past ``driver_operator_limit``, where the rows are cached -- each call a Spark task (``runtime/remote.py``)."""
        remote = self._read_in_place(self._tables[rs.table], entry)
        if rs.cuts:    # the zones read as one operator (``range_zones.ZonedRows``)
            if remote:
                return spark_range_shards.remote_zones(self.spark, rs.zones, entry.family.snapshot_class.group_class,
                                                       entry.family.option(entry.physical), rs.cuts)
            return ZonedRows.of_zones([self._rows_operator(r) for r in rs.zones])
        if remote:
            return spark_remote.RemoteOperator(self.spark, rs.rows)
        return self._rows_operator(rs.rows)

    @staticmethod
    def _rows_operator(replica):
        group = spark_replicas.materialize(replica)
        spark_replicas.remember(replica, replica.log_length, group)
        return group

    def _range_shard_replicas(self, entry, rs: RangeShardState, n_shards: int) -> list:
        """The group's subscription shards (stage 2) as of before this batch: a new base for each shard whose
        subscriptions changed (every shard when the rows changed behind them or the count changed), or whose log
        grew long (a compaction the workers' cached shards continue)."""
        family, reg = entry.family, entry.registry
        if rs.n_shards != n_shards or len(rs.shards) != n_shards:
            rs.shards_stale = True
        rebuild, members, digests = _shards_to_rebuild(entry, rs, n_shards, rs.shards_stale)
        if digests is not None:
            rs.shard_digests = digests
        if rebuild:
            key_type = family_key_type(self._tables[rs.table].definition)
            m = members if members is not None else _shard_members(family, reg, n_shards)
            old = rs.shards if len(rs.shards) == n_shards else []
            if not old:    # another shard count: every id moves, the old shards' files go
                for r in rs.shards:
                    spark_replicas.discard(r)
            new = list(old) + [None] * (n_shards - len(old))
            places = {j: (spark_replicas.base_place(self.directory, f"{entry.group_id}#q{j}"), *m[j])
                      for j in sorted(rebuild)}
            # seeded where the rows are cached, not here: the driver holds neither the rows' core nor a result
            # (zoned rows: each zone's partial states, merged in zone 0's task)
            seeds = str(self.directory.area("groups", entry.group_id, "seeds"))
            stateless = entry.family.snapshot_class.group_class.shard_stateless
            rs.stateless_shards = spark_range_shards.seed_shards(self.spark, rs.zones, entry.group_id, key_type,
                                                                 places, seeds, stateless=stateless)
            for j in sorted(rebuild):
                new[j] = spark_replicas.adopt_base(self.uid, f"{entry.group_id}#q{j}", places[j][0],
                                                   replaces=old[j] if j < len(old) else None, continues=rebuild[j])
                rs.shard_rebuilds += 1
            rs.shards = new
            release_freed_memory()   # the members' ids and bounds built for the seeds are freed (process_memory.py)
        rs.n_shards, rs.shards_stale, rs.subscriptions_changed = n_shards, False, False
        return rs.shards

    # ---- EXPLAIN ---------------------------------------------------------------------------------------
    def _spark_jobs(self, physical, entry) -> list:
        """EXPLAIN's Spark jobs of a group that runs with its subscriptions in shards (``Publishing._spark_jobs``), as
        :meth:`_range_shards_run` runs them: the shards whose bases it rebuilds seeded where the rows are cached
        (``runtime/range_shards.seed_shards``: one job, or two over X zones); a top-k group in X zones writes its
        zones' edges (a task per zone); the rows (a task per X zone, else one); a DISTINCT group in X zones its
        second round (a task per zone); then the subscription shards (a task per shard).  The zones and shards the
        next publish runs: those recorded, else as it would make them."""
        n_shards = self._range_shard_count(entry, "unicast") if entry is not None else 0
        if not n_shards:
            return super()._spark_jobs(physical, entry)
        gid, kind = entry.group_id, entry.physical.klass
        rs = self._range_shard_states.get(gid)
        n_zones = self._rows_zone_count(entry)
        if rs is not None and rs.zones and rs.n_zones == n_zones:
            rows = list(rs.zones)
        else:   # not cut yet: as _range_rows will cut the table's X (repeated values give fewer zones)
            _, xs, _ = entry.family.table_rows(entry.physical, self._tables, text=entry.family.object_values)
            rows = [self._explain_replica(f"{gid}#r{z}") for z in range(len(zone_cuts(xs, n_zones)) + 1 if n_zones
                                                                        else 1)]
        by_id = {r.replica_id: r for r in rows}
        batches = {rid: spark_groups.one_row_batch() for rid in by_id}
        folders = dict.fromkeys(by_id, "")
        shards = [spark_range_shards.ShardPart(gid, "", shard=self._explain_replica(f"{gid}#q{j}"))
                  for j in range(n_shards)]
        schema = self._explain_schema(physical)
        zoned = len(rows) > 1
        where = spark_groups.counted(len(rows), "X zone") if zoned else "one replica"
        jobs = []
        # shards whose bases the publish rebuilds are seeded first, where the rows are (as _range_shard_replicas)
        state = rs or RangeShardState(gid, entry.family.tables(entry.physical)[0], kind)
        stale = rs is None or rs.rows is None or rs.rows_stale or rs.shards_stale or rs.n_shards != n_shards or \
            len(rs.shards) != n_shards
        rebuilt = len(_shards_to_rebuild(entry, state, n_shards, stale)[0])
        if rebuilt:
            stateless = entry.family.snapshot_class.group_class.shard_stateless
            seeds = spark_range_shards.seed_frames(self.spark, rows, stateless)
            titles = [f"partial states of {spark_groups.counted(len(rows) - 1, 'X zone')} for the rebuilt shards "
                      f"(a task per zone)"] if len(seeds) > 1 else []
            titles.append(f"seeds of {spark_groups.counted(rebuilt, 'rebuilt subscription shard')}, where the rows "
                          f"are cached (one task)")
            jobs += list(zip(titles, seeds))
        if zoned and kind in HALO_CLASSES:
            jobs.append((f"edge objects of {where} (a task per zone: what the zones' halos fold)",
                         lambda: spark_range_shards.zone_edges_frame(self.spark, rows, {gid: 1}, {gid: ""})))
        jobs.append((f"rows in {where}, no subscription (a task {'per zone' if zoned else 'for them'}: "
                     f"the per-update messages)",
                     lambda: spark_range_shards.rows_frame(self.spark, by_id, batches, folders, rows_mode("unicast"))))
        if zoned and kind in SECOND_ROUND_CLASSES:
            jobs.append((f"round 2 of the {where} (a task per zone: the open Mar ends)",
                         lambda: spark_range_shards.second_round_frame(self.spark, by_id, folders)))
        jobs.append((f"{spark_groups.counted(n_shards, 'subscription shard')} (a task per shard: unicast matching)",
                     lambda: spark_range_shards.output_frame(self.spark, shards, schema)))
        return self._explained_jobs(physical, entry, jobs)

    # ---- one publish (unicast: two stages) ---------------------------------------------------------------
    def _range_shards_run(self, entries: list, sharded: dict, group_batches: dict, schema, mode="unicast"):
        """Stage 1 (the rows, collected) and stage 2 (the subscription shards, lazy, checkpointed) of the sharded
        range groups in ``entries`` over their batches; a ``reformulated`` publish: stage 1's messages are the
        output, no shard runs.  Returns ``(DataFrame, failed group ids)``."""
        replicas, tables, folders, seq_of, parts_of = {}, {}, {}, {}, {}
        for e in entries:
            rs = self._range_rows(e)
            # a reformulated publish leaves the shards as they are: a subscription change waits for the next
            # unicast publish to rebuild the shards it touched (seeded from the rows then), and the others log
            # this publish's messages
            parts_of[e.group_id] = self._range_shard_replicas(e, rs, sharded[e.group_id]) if mode == "unicast" else []
            rs.folder, first_seq = spark_range_shards.publish_folder(self.directory, e.group_id)
            batch = group_batches[e.group_id]
            seq_of[e.group_id] = first_seq(batch)
            for r in rs.zones:    # every zone reads the whole batch and routes it itself (range_zones.zone_batch)
                replicas[r.replica_id], tables[r.replica_id], folders[r.replica_id] = r, batch, rs.folder
        t_start = time.perf_counter()
        edge_errors = self._range_zone_edges(entries, group_batches)
        for rid in edge_errors:   # a zone without its halos would paint wrongly: its group fails (DESIGN §7)
            replicas.pop(rid), tables.pop(rid)
        t0 = time.perf_counter()
        records = spark_range_shards.run_rows(self.spark, replicas, tables, folders,
                                              keepalive.slots_of(self.spark) or 1, rows_mode(mode)) if tables else {}
        records.update({rid: (error, 0) for rid, error in edge_errors.items()})
        t_rows = time.perf_counter()
        self._range_zones_second_round(entries, group_batches, records)
        t1 = time.perf_counter()
        parts = []
        for e in entries:
            rs = self._range_shard_states[e.group_id]
            error = next((records[r.replica_id][0] for r in rs.zones
                          if records.get(r.replica_id, (None, 0))[0] is not None), None)
            if error is not None or mode != "unicast":
                # DESIGN §7: the group's 'error' row, its rows and shards rebuilt next time; or the group's
                # reformulated output, its messages
                parts.append(spark_range_shards.ShardPart(e.group_id, rs.folder, seq_of[e.group_id], error=error))
                continue
            parts += [spark_range_shards.ShardPart(e.group_id, rs.folder, seq_of[e.group_id], shard=r)
                      for r in parts_of[e.group_id]]
        frame = spark_range_shards.output_frame if mode == "unicast" else spark_range_shards.messages_frame
        df = frame(self.spark, parts, schema).localCheckpoint(eager=False)
        failed = spark_groups.failed_groups(df)    # the one job that computes stage 2
        t2 = time.perf_counter()
        for e in entries:
            rs = self._range_shard_states[e.group_id]
            zoned = bool(rs.cuts)
            rs.timings = {**({"edges_job_s": t0 - t_start} if rs.kind in HALO_CLASSES and zoned else {}),
                          "rows_job_s": t_rows - t0,
                          **({"second_round_job_s": t1 - t_rows} if rs.kind in SECOND_ROUND_CLASSES and zoned else {}),
                          "shards_job_s": t2 - t1}
        return df, failed

    def _range_zone_edges(self, entries: list, group_batches: dict) -> dict:
        """Before the zones run: each zone of a top-k group in X zones (``range_zones.HALO_CLASSES``) with a batch
        writes its edge objects of depth kmax + B into the group's publish folder, one job for every group
        (``topk/zones.py``: what the other zones' halos are folded from).  ``{zone replica id: error}`` of every
        zone of a group one of whose zones failed."""
        zones, depths, folders = [], {}, {}
        for e in entries:
            rs = self._range_shard_states[e.group_id]
            batch = group_batches[e.group_id]
            if rs.kind in HALO_CLASSES and rs.cuts and batch.num_rows:
                zones += rs.zones
                depths[e.group_id], folders[e.group_id] = halo_depth(rs.ks, batch.num_rows), rs.folder
                os.makedirs(rs.folder, exist_ok=True)
        if not zones:
            return {}
        written = spark_range_shards.write_zone_edges(self.spark, zones, depths, folders,
                                                      keepalive.slots_of(self.spark) or 1)
        errors = {}
        for e in entries:
            rs = self._range_shard_states[e.group_id]
            error = next((f"{r.replica_id}: {written[r.replica_id]}" for r in rs.zones
                          if written.get(r.replica_id) is not None), None)
            if error is not None:
                errors.update({r.replica_id: f"edge objects: {error}" for r in rs.zones})
        return errors

    def _range_zones_second_round(self, entries: list, group_batches: dict, records: dict) -> None:
        """Round 2 of the groups whose zones' messages have open ends (``range_zones.SECOND_ROUND_CLASSES``: a
        DISTINCT Mar end with no tuple of the value in its zone), one job over their zones, each where round 1 left
        it: the zones' replicas with the batch logged ahead of the commit (which logs it again, the same file), so
        that a worker that lost its zone rebuilds it at the batch's end.  A zone's failure is its group's
        (``records``)."""
        ahead, folders = {}, {}
        for e in entries:
            rs = self._range_shard_states[e.group_id]
            batch = group_batches[e.group_id]
            if rs.kind not in SECOND_ROUND_CLASSES or not rs.cuts or not batch.num_rows or \
                    any(records.get(r.replica_id, (None, 0))[0] is not None for r in rs.zones):
                continue
            for r in rs.zones:
                ahead[r.replica_id], folders[r.replica_id] = r.append(batch), rs.folder
        if not ahead:
            return
        errors = spark_range_shards.run_second_round(self.spark, ahead, folders, keepalive.slots_of(self.spark) or 1)
        for rid, error in errors.items():
            if error is not None:
                records[rid] = (error, 0)

    def _range_shards_commit(self, entry, group_batch, failed: set, rows: int, mode="unicast") -> None:
        """After the batch committed: the rows' replica logs the batch and each stateful shard the messages it
        delivered (unicast: their tasks moved their caches one step; reformulated: no shard ran, a worker's cached
        shard replays the entry when it next runs); a failed group's rows and shards are rebuilt from the rows next
        time.  The whole group's replica (every subscription) no longer follows the table."""
        rs = self._range_shard_states[entry.group_id]
        entry.version += 1
        entry.base_stale = True
        if entry.group_id in failed:
            rs.rows_stale = True
            return
        if group_batch.num_rows:
            rs.zones = [r.append(group_batch) for r in rs.zones]
            rs.log_rows += rows
        # read back only for shards that log them (none built yet: a group that ran reformulated publishes only)
        logs = rs.folder and rs.shards and not rs.stateless_shards
        messages = spark_range_shards.messages_in(rs.folder) if logs else None
        if messages is not None:
            messages = messages.replace_schema_metadata(None)
            rs.shards = [r.append(messages) for r in rs.shards]
            if messages.num_rows >= BULK_ROWS:
                del messages
                release_freed_memory()   # the messages read back are freed; Arrow's pool would keep their pages
        if mode == "reformulated" and (entry.subscribers is not None or entry.subscribers_seed is not None):
            entry.subscribers_version = entry.version   # deliver()'s side follows these messages

    def _range_shards_done(self, entries) -> None:
        """The publish's message files are no longer read (its output is checkpointed and kept)."""
        states = [self._range_shard_states.get(e.group_id) for e in entries]
        for rs in [rs for rs in states if rs is not None and rs.folder is not None]:
            spark_groups.remove_folder(rs.folder)
            rs.folder = None

