"""RANGE_MIN / RANGE_MAX groups run in X zones (DS-CN, 000 §2.3.2; issue 16 item 4): the driver's side.  A part of
the Engine facade (``engine.py``; called from ``control/publishing.py``'s ``publish`` loop and group helpers).

A large range group is split so that its rows and its subscriptions are spread over partitions, one Spark task
each: ``Engine.range_zones`` zones along X (the table range-partitioned on X at equal-count cut points, as
000 §2.3.2 places tuples on the diagonal) and as many subscription shards along x1 (for unicast matching).
Each zone and each shard is a replica (``runtime/replicas.py``): a zone's base is its rows, its log its own
steps of every batch; a shard's base is its subscriptions (nothing logged).  Per publish
(``runtime/zones.py``): round 1 in one task per zone (each reads the whole batch and routes it itself:
``route_zone``); round 2 here, on the driver, over the zones' ``Round1`` records -- they are small (the
deferred steps and the edge staircases per change: a few numbers each), round 2 is cheap (it reruns only the
deferred steps, a few percent of a batch on the paper's workload), and the driver needs the records anyway to
tell a failed zone; a task for it would cost one more Spark job per publish (~0.3 s here) to save no work --
then the output stage (merge by seq range, or unicast per shard).  The three reformulated variants all run zoned:
S-CN as above; CN+ (000 §2.2.2) writes the updates themselves in round 1 and has no round 2; S-MN (000 §2.1.2)
runs the shards' S-UN first (one more job, collected: ``run_shard_entries``), then merges their entries by seq
range into the whole group's messages.

Why the state is where it is: a zone's rows never leave its replica (its base is rebuilt from the table's
rows only when they changed behind the zones' back: ``load``, a stream's rows, a batch the group did not run
zoned, a failed task, a long log); a subscription change rebuilds only the shards' bases, never the zones'.
The zone states live in this process only: a reopened engine (``Engine(path=...)``) rebuilds them from the
table's rows on first use, as it does every replica (docs/architecture.md).
"""
from __future__ import annotations

import math
import os
import pickle
import shutil
import time
import uuid
from dataclasses import dataclass, field, replace

from sparksub.operators.range_min.group import group_mode
from sparksub.operators.range_min.subscription_shards import shard_bases
from sparksub.operators.range_min.zones import (ZonedView, apply_round2, equal_count_cuts, versioned_messages,
                                               zone_bases)
from sparksub.process_memory import release_freed_memory
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import remote as spark_remote
from sparksub.runtime import replicas as spark_replicas
from sparksub.runtime import zones as spark_zones

__all__ = ["ZonedGroups", "ZonedState", "RANGE_ZONE_ROWS"]

#: rows of a range group's table from which it runs in zones by default (``Engine.range_zones = None``): below
#: it one task applies a batch faster than the two rounds' extra jobs cost
RANGE_ZONE_ROWS = 200_000
#: rows logged per zone before the zones get new bases from the table's rows
ZONE_COMPACTION_ROWS = 200_000
#: at a compaction the zones keep their cut points (their workers' caches go on) unless the largest zone holds
#: more than this many times the rows of the smallest: then new equal-count cuts rebalance them
ZONE_IMBALANCE = 2.0


@dataclass
class ZonedState:
    """One zoned group as the driver keeps it: its zone and shard replicas and what the last tasks reported."""

    group_id: str
    table: str
    maximum: bool
    n_zones: int = 0                 # the count asked for (the cut points may give fewer zones)
    zones: list = field(default_factory=list)     # Replica per zone
    cuts: list = field(default_factory=list)
    zone_rows: list = field(default_factory=list)
    n_shards: int = 0
    shards: list = field(default_factory=list)    # Replica per shard
    shard_cuts: list = field(default_factory=list)
    shard_subscriptions: list = field(default_factory=list)
    rows_stale: bool = True          # the zones no longer follow the table: rebuild their bases from its rows
    shards_stale: bool = True        # the subscriptions changed: rebuild the shards' bases
    counters: dict = field(default_factory=lambda: {"batches": 0, "updates": 0, "updates_round1": 0, "steps": 0,
                                                    "steps_round1": 0, "round2_messages": 0, "rebuilds": 0})
    zone_info: list = field(default_factory=list)  # per zone: the last task's stats, partition, process
    zone_steps: list = field(default_factory=list)  # per zone since its base: [steps, settled in round 1]
    pending: list | None = None      # this publish's round-1 records, until it commits
    timings: dict = field(default_factory=dict)   # the last publish's wall seconds per stage (stats, bench)
    folder: str | None = None        # this publish's files (batch, messages)


class ZonedGroups:
    """The Engine's zoned range groups (a mixin of ``engine.Engine``, before the mixins whose methods it follows:
    ``_changed``, ``_rows_changed``)."""

    @property
    def _zone_states(self) -> dict:
        return self.__dict__.setdefault("_zone_state_map", {})

    # ---- which groups run zoned -----------------------------------------------------------------------
    def _zone_count(self, state, entry, mode) -> int:
        """How many zones ``entry`` runs in for this publish; 0: whole (one task).  RANGE_MIN / RANGE_MAX, in
        unicast or any reformulated variant (S-CN, S-MN, CN+)."""
        if entry.family.name != "range_min" or group_mode(mode) not in ("unicast", "reformulated", "multicast",
                                                                         "cn_plus"):
            return 0
        z = getattr(self, "range_zones", None)
        if z is None:
            try:
                rows = len(state.rows)
            except TypeError:   # rows kept off the driver: the zones' own count, if it ran zoned before
                zs = self._zone_states.get(entry.group_id)
                rows = sum(zs.zone_rows) if zs is not None else 0
            if rows < RANGE_ZONE_ROWS:
                return 0
            z = self._parallelism()
        return int(z) if int(z) >= 2 else 0

    def _zones_select(self, state, groups, mode) -> dict:
        """``{group id: zones}`` of the groups that run zoned in this publish.  A zoned group that does not (it
        runs whole now, or has no subscriptions and is skipped) misses this batch: its zones are rebuilt from
        the rows when it runs zoned again."""
        chosen = {}
        for e in groups:
            n = self._zone_count(state, e, mode)
            if n:
                chosen[e.group_id] = n
        table = state.definition.name.lower()
        for gid, zs in self._zone_states.items():
            if zs.table == table and gid not in chosen:
                zs.rows_stale = True
        return chosen

    # ---- the engine's methods it follows --------------------------------------------------------------
    def _changed(self, entry, subscriptions: bool = False) -> None:
        super()._changed(entry, subscriptions)
        zs = self._zone_states.get(entry.group_id)
        if zs is not None and subscriptions:
            zs.shards_stale = True    # new shard bases; the zones' are unchanged (they hold no subscription)

    def _rows_changed(self, table: str) -> None:
        for zs in self._zone_states.values():
            if zs.table == table.lower():
                zs.rows_stale = True
        super()._rows_changed(table)

    # ---- the replicas ----------------------------------------------------------------------------------
    def _zone_replicas(self, entry, n_zones: int) -> ZonedState:
        """The group's zones, their bases rebuilt from the table's rows when stale (or the log grew long)."""
        gid = entry.group_id
        zs = self._zone_states.get(gid)
        if zs is None:
            zs = self._zone_states[gid] = ZonedState(gid, entry.family.tables(entry.physical)[0],
                                                     bool(entry.physical.maximum))
        long_log = any(r.logged_rows > ZONE_COMPACTION_ROWS for r in zs.zones)
        if zs.rows_stale or zs.n_zones != n_zones or long_log or not zs.zones:
            keys, xs, ys = entry.family.table_rows(entry.physical, self._tables)
            cuts = bases = None
            if not (zs.rows_stale or zs.n_zones != n_zones or not zs.zones):
                # only the logs' length: at the same cut points each zone's new base is the zone with its log
                # applied, so the workers' cached zones go on (replicas.new_base ``continues``) -- unless the
                # zones grew out of balance, which new equal-count cuts mend
                cuts, bases = zone_bases(gid, keys, xs, ys, n_zones, zs.maximum, cuts=zs.cuts)
                sizes = [len(b.snapshot.keys) for b in bases]
                if len(bases) != len(zs.zones) or max(sizes) > ZONE_IMBALANCE * max(1, min(sizes)):
                    cuts = bases = None
            continues = bases is not None
            if bases is None:
                cuts, bases = zone_bases(gid, keys, xs, ys, n_zones, zs.maximum)
            zs.zones = self._new_bases(f"{gid}#z", bases, zs.zones, continues)
            zs.cuts, zs.n_zones, zs.rows_stale = cuts.tolist(), n_zones, False
            zs.zone_rows = [len(b.snapshot.keys) for b in bases]
            zs.zone_info = [{} for _ in bases]
            zs.zone_steps = [[0, 0] for _ in bases]
            zs.counters["rebuilds"] += 1
        return zs

    def _new_bases(self, prefix: str, bases: list, old: list, continues: bool = False) -> list:
        """Replicas ``<prefix><i>`` with the new ``bases``, each superseding the old one at its index (whose files
        go); old ones past the new count are discarded.  ``continues``: each base is the old one at its index with
        its log applied (a compaction at the same cuts)."""
        out = [spark_replicas.new_base(self.directory, self.uid, f"{prefix}{i}", b,
                                       replaces=old[i] if i < len(old) else None, continues=continues)
               for i, b in enumerate(bases)]
        for r in old[len(bases):]:
            spark_replicas.discard(r)
        # the table's rows and the pickles the bases were built from are freed; new bases are rare, so always
        # (process_memory.py: glibc and Arrow's pool keep freed pages otherwise)
        release_freed_memory()
        return out

    def _shard_replicas(self, entry, zs: ZonedState, n_shards: int) -> list:
        """The group's subscription shards (by x1), their bases rebuilt when the subscriptions changed."""
        if zs.shards_stale or zs.n_shards != n_shards or not zs.shards:
            slots, ids, x1, x2 = entry.family.live(entry.registry)
            # each subscription's registry slot: S-MN lists a message's targets in that order (merge_multicast)
            cuts, bases = shard_bases(ids, x1, x2, n_shards, ranks=slots)
            zs.shards = self._new_bases(f"{entry.group_id}#s", bases, zs.shards)
            zs.shard_cuts, zs.n_shards, zs.shards_stale = cuts.tolist(), n_shards, False
            zs.shard_subscriptions = [len(b.ids) for b in bases]
        return zs.shards

    # ---- EXPLAIN ---------------------------------------------------------------------------------------
    def _spark_jobs(self, physical, entry) -> list:
        """EXPLAIN's Spark jobs of a group that runs zoned (``Publishing._spark_jobs``): round 1, a task per zone
        (round 2 is the driver's), then the output, a task per subscription shard -- the zones and shards the next
        publish runs (those recorded, else as it would cut them), built as :meth:`_zones_run` builds them."""
        state = self._tables.get(entry.family.tables(entry.physical)[0]) if entry is not None else None
        n_zones = self._zone_count(state, entry, "unicast") if state is not None else 0
        if not n_zones:
            return super()._spark_jobs(physical, entry)
        gid, zs = entry.group_id, self._zone_states.get(entry.group_id)
        if zs is not None and zs.zones and zs.n_zones == n_zones:
            zones = list(zs.zones)
        else:   # not cut yet: as zone_bases will cut the table's X (repeated values give fewer zones)
            _, xs, _ = entry.family.table_rows(entry.physical, self._tables)
            zones = [self._explain_replica(f"{gid}#z{i}") for i in range(len(equal_count_cuts(xs, n_zones)) + 1)]
        if zs is not None and zs.shards and not zs.shards_stale and zs.n_shards == len(zones):
            shards = list(zs.shards)
        else:   # as shard_bases will cut the subscriptions' x1
            _, _, x1, _ = entry.family.live(entry.registry)
            shards = [self._explain_replica(f"{gid}#s{j}") for j in range(len(equal_count_cuts(x1, len(zones))) + 1)]
        maximum = bool(entry.physical.maximum)
        tasks = [spark_zones.ZoneTask(gid, i, maximum, r, "") for i, r in enumerate(zones)]
        parts = [spark_zones.OutputPart(gid, "", shard=r) for r in shards]
        schema = self._explain_schema(physical)
        return self._explained_jobs(physical, entry, [
            (f"round 1 in {spark_groups.counted(len(zones), 'X zone')} (a task per zone; round 2 on the driver)",
             lambda: spark_zones.round1_frame(self.spark, tasks)),
            (f"{spark_groups.counted(len(shards), 'subscription shard')} by x1 (a task per shard: unicast matching)",
             lambda: spark_zones.output_frame(self.spark, parts, "unicast", schema))])

    # ---- one publish -----------------------------------------------------------------------------------
    def _zones_run(self, entries: list, zoned: dict, group_batches: dict, mode, schema):
        """Run ``entries`` (zoned groups) over their batches: round 1 in Spark, round 2 here, the output stage
        (lazy, checkpointed).  Returns ``(DataFrame, failed group ids)``."""
        form = group_mode(mode)      # unicast, or the variant: reformulated (S-CN), multicast (S-MN), cn_plus (CN+)
        tasks, spans = [], {}
        for e in entries:   # a failed publish's files, if any, first
            shutil.rmtree(self.directory.area("groups", e.group_id, "publish"), ignore_errors=True)
        for e in entries:
            zs = self._zone_replicas(e, zoned[e.group_id])
            folder = self.directory.area("groups", e.group_id, "publish", uuid.uuid4().hex)
            zs.folder, zs.pending = str(folder), None
            spark_zones.write_table(os.path.join(zs.folder, spark_zones.BATCH_FILE), group_batches[e.group_id])
            start = len(tasks)
            tasks += [spark_zones.ZoneTask(e.group_id, i, zs.maximum, r, zs.folder, form == "cn_plus")
                      for i, r in enumerate(zs.zones)]
            spans[e.group_id] = (start, len(tasks))
        t0 = time.perf_counter()
        records = spark_zones.run_round1(self.spark, tasks)
        t1 = time.perf_counter()
        parts, ranges, errors, shard_parts = [], {}, {}, []
        for e in entries:
            zs = self._zone_states[e.group_id]
            mine = sorted(records[spans[e.group_id][0]:spans[e.group_id][1]], key=lambda r: r["zone"])
            seqs = group_batches[e.group_id].column("seq").to_numpy()
            seq_lo, seq_hi = (int(seqs.min()), int(seqs.max()) + 1) if seqs.size else (0, 0)
            ranges[e.group_id] = (seq_lo, seq_hi)
            error = next((r["error"] for r in mine if "error" in r), None)
            if error is not None:   # DESIGN §7: the group's 'error' row; rebuilt from the rows next time
                errors[e.group_id] = error
                continue
            round1 = [r["round1"] for r in mine]
            # CN+ (000 §2.2.2) sends the updates themselves: round 1 wrote every message, no step is deferred
            second = [] if form == "cn_plus" else apply_round2(round1)
            old_values = {s: v for r in round1 for s, v in r.old_values.items()}
            if second:
                spark_zones.write_table(os.path.join(zs.folder, spark_zones.ROUND2_FILE),
                                        versioned_messages(e.group_id, zs.maximum, second))
            with open(os.path.join(zs.folder, spark_zones.META_FILE), "wb") as fh:
                pickle.dump(old_values, fh, protocol=pickle.HIGHEST_PROTOCOL)
            zs.pending = mine
            self._zones_count(zs, mine, round1, second, old_values)
            if form in ("unicast", "multicast"):
                shards = [spark_zones.OutputPart(e.group_id, zs.folder, seq_lo, shard=r)
                          for r in self._shard_replicas(e, zs, len(zs.zones))]
                (parts if form == "unicast" else shard_parts).extend(shards)
        t2 = time.perf_counter()
        if shard_parts:   # S-MN: each shard's S-UN entries first (000 §2.1.2: a message lists its subscriptions)
            for rec in spark_zones.run_shard_entries(self.spark, shard_parts):
                if "error" in rec:
                    errors.setdefault(rec["group_id"], rec["error"])
        t3 = time.perf_counter()
        for e in entries:
            zs = self._zone_states[e.group_id]
            seq_lo, seq_hi = ranges[e.group_id]
            if e.group_id in errors:
                parts.append(spark_zones.OutputPart(e.group_id, zs.folder, seq_lo, error=errors[e.group_id]))
            elif form != "unicast":   # one task per range of seqs, in seq order: a seq's messages stay in batch order
                variant = {"reformulated": spark_zones.S_CN, "multicast": spark_zones.S_MN,
                           "cn_plus": spark_zones.CN_PLUS}[form]
                k = max(1, min(len(zs.zones), seq_hi - seq_lo))
                bounds = [seq_lo + (seq_hi - seq_lo) * j // k for j in range(k + 1)]
                parts += [spark_zones.OutputPart(e.group_id, zs.folder, bounds[j], bounds[j + 1], form=variant,
                                                 maximum=zs.maximum) for j in range(k)]
        df = spark_zones.output_frame(self.spark, parts, mode, schema).localCheckpoint(eager=False)
        failed = spark_groups.failed_groups(df)    # the one job that computes the output stage
        t4 = time.perf_counter()
        for e in entries:
            self._zone_states[e.group_id].timings = {"round1_job_s": t1 - t0, "round2_driver_s": t2 - t1,
                                                     "shards_job_s": t3 - t2, "output_job_s": t4 - t3}
        return df, failed

    @staticmethod
    def _zones_count(zs: ZonedState, records: list, round1: list, second: list, old_values: dict) -> None:
        steps = sum(r["steps"] for r in records)
        deferred = sum(len(r.deferred) for r in round1)
        updates = steps - len(old_values)            # an X-move is two steps, anything else one
        deferred_updates = len({d.version // 2 for r in round1 for d in r.deferred})
        c = zs.counters
        c["batches"] += 1
        c["updates"] += updates
        c["updates_round1"] += updates - deferred_updates
        c["steps"] += steps
        c["steps_round1"] += steps - deferred
        c["round2_messages"] += sum(len(m) for _, _, _, m in second)
        for counts, rec, r in zip(zs.zone_steps, records, round1):
            counts[0] += rec["steps"]
            counts[1] += rec["steps"] - len(r.deferred)

    def _zones_commit(self, entry, failed: set, mode) -> None:
        """After the batch committed: each zone's replica moves past the log entry its task wrote; a failed
        group's zones are rebuilt from the rows next time.  The whole-group replica (``stream()``, a publish run whole)
        no longer follows the table: it is rebuilt from the rows when next used."""
        zs = self._zone_states[entry.group_id]
        entry.version += 1
        entry.base_stale = True
        if entry.group_id in failed or zs.pending is None:
            zs.rows_stale = True
        else:
            zs.zones = [replace(r, log_length=r.log_length + 1, logged_rows=r.logged_rows + rec["steps"])
                        for r, rec in zip(zs.zones, zs.pending)]
            zs.zone_rows = [rec["rows"] for rec in zs.pending]
            zs.zone_info = [{k: rec.get(k) for k in ("partition", "pid", "executor", "stats", "core")}
                            for rec in zs.pending]
            if mode == "reformulated" and entry.subscribers is not None:   # any variant: deliver() takes them
                entry.subscribers_version = entry.version
        zs.pending = None

    def _zones_done(self, entries) -> None:
        """The publish's files are no longer read (its output is checkpointed and kept)."""
        for e in entries:
            zs = self._zone_states.get(e.group_id)
            if zs is not None and zs.folder is not None:
                shutil.rmtree(zs.folder, ignore_errors=True)
                zs.folder = None

    # ---- reading a zoned group on the driver --------------------------------------------------------------
    def _zoned_view(self, entry):
        """The group as of now through its zones (``result``, the ``deliver()`` seed, EXPLAIN, stats), or None
        when it does not run zoned now (its whole-group replica is then the state)."""
        zs = self._zone_states.get(entry.group_id)
        if zs is None or zs.rows_stale or not zs.zones:
            return None

        def zones():
            out = []
            for r in zs.zones:
                op = spark_replicas.materialize(r)
                spark_replicas.remember(r, r.log_length, op)
                out.append(op.zone)
            return out
        info = {"cuts": zs.cuts, "zone_rows": zs.zone_rows, "timings": dict(zs.timings), "shard_cuts": zs.shard_cuts,
                "shard_subscriptions": zs.shard_subscriptions, "counters": dict(zs.counters),
                "zones": [{"zone": i, "lo": lo, "hi": hi, "rows": n, "logged_rows": r.logged_rows,
                           "steps": steps, "round1_share": settled / steps if steps else None, **info}
                          for i, (lo, hi, n, r, info, (steps, settled)) in enumerate(zip(
                              [-math.inf, *zs.cuts], [*zs.cuts, math.inf], zs.zone_rows, zs.zones, zs.zone_info,
                              zs.zone_steps))],
                "shards": [{"shard": j, "subscriptions": n} for j, n in enumerate(zs.shard_subscriptions)]}
        each = None
        if self._read_in_place(self._tables[entry.family.tables(entry.physical)[0]], entry):
            # past driver_operator_limit: each read runs where the zones live, one task per zone (runtime/remote.py);
            # the driver holds the answers, never the zones (issue 16 item 3)
            each = lambda path, args: spark_remote.call_on_each(   # noqa: E731
                self.spark, zs.zones, ("zone",) + tuple(path), args)
        return ZonedView(entry.group_id, zs.maximum, entry.registry, zones, info, each)
