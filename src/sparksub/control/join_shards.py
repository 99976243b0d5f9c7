"""SELECT_JOIN groups with their subscriptions split into shards (issue 16 item 4): the driver's side.  A part of the
Engine facade (``engine.py``; called from ``control/publishing.py``'s ``publish`` loop and its join helpers).

A large SELECT_JOIN group (``Engine.join_subscription_shards``) runs in two stages instead of P partitions that
each hold every subscription:

* **row partitions** (stage 1): R and S rows by a hash of the join value, as today, but with no subscription
  (``JoinFamily.partition_snapshots(subscriptions=False)``): each update meets its join partners and yields the
  reformulated messages of 000 §4.  In ``reformulated`` mode they are the output (publish's ordinary job runs
  them); in ``unicast`` mode they go to files under the publish's folder;
* **subscription shards** (stage 2, unicast only): the subscriptions by a hash of their id
  (``operators/joins/shards.py``), each shard an R-tree of its rectangles, matching every message of the batch.

Each row partition and each shard is a replica (``runtime/replicas.py``): a row partition's base is its rows, its
log the batches it applied; a shard's base is its subscriptions (nothing logged).  A subscription change
(``subscribe``, ``subscribe_many``, ``unsubscribe``, DROP) rebuilds only the bases of the shards its ids hash
to -- never a row partition's: they hold no subscription, and every column of both tables, so no projection a
new subscription selects is missing.  The row partitions are rebuilt from the table's rows only when the rows
changed behind their back: ``load``, a stream's rows taken in, a publish in which the group ran whole or was
skipped (no subscriptions), a failed task, a log past ``LOG_COMPACTION_ROWS``.

``result()``, ``stats()`` and EXPLAIN read the row partitions on the driver, or -- a group past
``driver_operator_limit`` -- where they live, one placed task per partition (``runtime/remote.py``), as a zoned
group is read (``control/zones.py``): the driver then holds the answers, never the rows (issue 16 item 3).
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc

from sparksub.operators.contract import ROW_PARTITIONS
from sparksub.operators.joins.group import SELECT_JOIN, MessageColumns, ShardedJoinView
from sparksub.operators.joins.shards import RowPartitionsInPlace, subscription_shard
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import join_shards as spark_join_shards
from sparksub.runtime import keepalive
from sparksub.runtime import remote as spark_remote
from sparksub.runtime import replicas as spark_replicas

__all__ = ["JOIN_SHARD_SUBSCRIPTIONS", "JoinShardGroups", "JoinShardState"]

#: subscriptions of a SELECT_JOIN group from which it runs with its subscriptions in shards by default
#: (``Engine.join_subscription_shards = None``): below it every partition holding the subscriptions costs less
#: than a second job per publish
JOIN_SHARD_SUBSCRIPTIONS = 200_000
#: rows logged to the row partitions before their bases are rebuilt from the table's rows
JOIN_SHARD_COMPACTION_ROWS = 200_000


@dataclass
class JoinShardState:
    """One sharded SELECT_JOIN group as the driver keeps it: its row partitions and subscription shards."""

    group_id: str
    layout: dict | None = None
    partitions: dict = field(default_factory=dict)   # replica id (<group>#r<i>) -> Replica: stage 1
    n_partitions: int = 0
    log_rows: int = 0
    rows_stale: bool = True
    shards: list = field(default_factory=list)       # Replica per shard (<group>#q<j>): stage 2
    n_shards: int = 0
    shard_subscriptions: list = field(default_factory=list)
    stale_shards: set | None = None                  # shards whose base is out of date (None: all)
    rebuilds: int = 0                                # row partition bases built from the tables' rows (as zones')
    message_payload: tuple | None = None             # the columns the partitions' messages carry, per side
    folder: str | None = None                        # this publish's messages (unicast)
    timings: dict = field(default_factory=dict)      # the last publish's wall seconds per stage


class JoinShardGroups:
    """The Engine's sharded SELECT_JOIN groups (a mixin of ``engine.Engine``, before the mixins whose methods it
    follows: ``_changed``, ``_rows_changed``)."""

    @property
    def _join_shard_states(self) -> dict:
        return self.__dict__.setdefault("_join_shard_state_map", {})

    # ---- which groups run sharded ----------------------------------------------------------------------
    def _join_shard_count(self, entry) -> int:
        """How many subscription shards ``entry`` runs with; 0: whole (every partition holds every subscription)."""
        if entry.family.placement != ROW_PARTITIONS or getattr(entry.physical, "klass", None) != SELECT_JOIN:
            return 0
        q = getattr(self, "join_subscription_shards", None)
        if q is None:
            if len(entry.registry) < JOIN_SHARD_SUBSCRIPTIONS:
                return 0
            q = self._parallelism()
        return int(q) if int(q) >= 2 else 0

    def _join_shards_select(self, state, groups) -> dict:
        """``{group id: shards}`` of the groups on ``state``'s table that run sharded in this publish.  A sharded
        group that does not (it runs whole now, or is skipped) misses the batch: its row partitions are rebuilt
        from the rows when it runs sharded again."""
        chosen = {}
        for e in groups:
            n = self._join_shard_count(e)
            if n:
                chosen[e.group_id] = n
        table = state.definition.name.lower()
        for e in self._groups.values():
            js = self._join_shard_states.get(e.group_id)
            if js is not None and e.group_id not in chosen and table in e.family.tables(e.physical):
                js.rows_stale = True
        return chosen

    # ---- the engine's methods it follows --------------------------------------------------------------
    def _changed(self, entry, subscriptions: bool = False) -> None:
        change = getattr(entry.registry, "pending_change", None)   # read before the partitions' path takes it
        super()._changed(entry, subscriptions)
        js = self._join_shard_states.get(entry.group_id)
        if js is None or not subscriptions or js.stale_shards is None:
            return
        if change is None:
            js.stale_shards = None
            return
        # only the shards the changed ids hash to get a new base; the row partitions hold no subscription
        ids = [*np.asarray(change.add_ids, dtype=object).tolist(), *list(change.remove_ids)]
        js.stale_shards |= set(subscription_shard(ids, js.n_shards).tolist()) if js.n_shards else set()

    def _rows_changed(self, table: str) -> None:
        for e in self._groups.values():
            js = self._join_shard_states.get(e.group_id)
            if js is not None and table.lower() in e.family.tables(e.physical):
                js.rows_stale = True
        super()._rows_changed(table)

    # ---- the replicas ----------------------------------------------------------------------------------
    def _join_shard_state(self, entry) -> JoinShardState:
        js = self._join_shard_states.get(entry.group_id)
        if js is None:
            js = self._join_shard_states[entry.group_id] = JoinShardState(entry.group_id)
        return js

    def _join_row_partitions(self, entry) -> JoinShardState:
        """The group's row partitions (stage 1), their bases rebuilt from the tables' rows when stale."""
        js = self._join_shard_state(entry)
        n = self._join_partition_count()
        if js.rows_stale or js.n_partitions != n or not js.partitions or js.log_rows > JOIN_SHARD_COMPACTION_ROWS:
            layout, snaps = entry.family.partition_snapshots(entry.registry, entry.physical, entry.group_id,
                                                             self._tables, n, self.join_router_mode,
                                                             subscriptions=False, rid_prefix="r")
            old = js.partitions
            # one row partition per group in a worker, in stage 1's job and in publish's ordinary job alike
            js.partitions = {rid: spark_replicas.new_base(self.directory, self.uid, rid, snap, replaces=old.get(rid),
                                                          one_per_worker=True)
                             for rid, snap in snaps.items()}
            for rid, r in old.items():
                if rid not in js.partitions:
                    spark_replicas.discard(r)
            js.layout, js.n_partitions, js.rows_stale, js.log_rows = layout, n, False, 0
            js.rebuilds += 1
            js.message_payload = entry.family.message_payload(entry.registry, entry.physical)
        payload = entry.family.message_payload(entry.registry, entry.physical)
        if payload != js.message_payload:
            # the subscriptions select other columns: the partitions' messages follow, through their logs (they
            # hold every column already: no new base)
            change = MessageColumns(payload)
            js.partitions = {rid: r.append(change) for rid, r in js.partitions.items()}
            js.message_payload = payload
        return js

    def _join_shard_replicas(self, entry, js: JoinShardState, n_shards: int) -> list:
        """The group's subscription shards (stage 2), the stale ones' bases rebuilt from the registry."""
        if js.n_shards != n_shards or not js.shards:
            js.stale_shards = None
        if js.stale_shards is None or js.stale_shards:
            only = None if js.stale_shards is None else set(js.stale_shards)
            bases = entry.family.shard_bases(entry.registry, entry.physical, n_shards, only)
            old = js.shards if js.n_shards == n_shards else []
            new = list(old) + [None] * (n_shards - len(old))
            counts = list(js.shard_subscriptions) + [0] * (n_shards - len(js.shard_subscriptions))
            for j, base in bases.items():
                new[j] = spark_replicas.new_base(self.directory, self.uid, f"{entry.group_id}#q{j}", base,
                                                 replaces=old[j] if j < len(old) else None)
                counts[j] = len(base)
            if js.n_shards != n_shards:
                for r in js.shards[n_shards:]:
                    spark_replicas.discard(r)
            js.shards, js.n_shards, js.stale_shards = new, n_shards, set()
            js.shard_subscriptions = counts[:n_shards]
        return js.shards

    # ---- EXPLAIN ---------------------------------------------------------------------------------------
    def _spark_jobs(self, physical, entry) -> list:
        """EXPLAIN's Spark jobs of a group that runs with its subscriptions in shards (``Publishing._spark_jobs``), as
        :meth:`_join_shards_run` runs them: the row partitions (a task per partition the batch reaches: each shown),
        then the subscription shards (a task per shard)."""
        n_shards = self._join_shard_count(entry) if entry is not None else 0
        if not n_shards:
            return super()._spark_jobs(physical, entry)
        gid, js = entry.group_id, self._join_shard_states.get(entry.group_id)
        n = self._join_partition_count()
        rids = sorted(js.partitions) if js is not None and js.partitions and js.n_partitions == n else \
            [f"{gid}#r{i}" for i in range(n)]
        replicas = {rid: self._explain_replica(rid) for rid in rids}
        batches = {rid: spark_groups.one_row_batch() for rid in rids}
        folders = dict.fromkeys(rids, "")
        shards = [spark_join_shards.ShardPart(gid, "", shard=self._explain_replica(f"{gid}#q{j}"))
                  for j in range(n_shards)]
        schema = self._explain_schema(physical)
        return self._explained_jobs(physical, entry, [
            (f"{spark_groups.counted(len(rids), 'row partition')}, no subscription (a task per partition: the "
             f"messages of 000 §4)",
             lambda: spark_join_shards.row_partitions_frame(self.spark, replicas, batches, folders, stage=False)[0]),
            (f"{spark_groups.counted(n_shards, 'subscription shard')} (a task per shard: unicast matching)",
             lambda: spark_join_shards.output_frame(self.spark, shards, schema))])

    # ---- one publish (unicast: two stages) ---------------------------------------------------------------
    def _join_shards_run(self, entries: list, sharded: dict, group_batches: dict, schema):
        """Stage 1 (row partitions, collected) and stage 2 (subscription shards, lazy, checkpointed) of the
        sharded groups in ``entries`` over their batches (``group_batches``: routed to ``<group>#r<i>``).
        Returns ``(DataFrame, failed group ids)``."""
        replicas, tables, folders, seq_of = {}, {}, {}, {}
        for e in entries:
            js = self._join_shard_states[e.group_id]
            js.folder, first_seq = spark_join_shards.publish_folder(self.directory, e.group_id)
            jb = group_batches[e.group_id]
            seq_of[e.group_id] = first_seq(jb)
            for rid, t in spark_groups.split_batch(jb, "group_id", ["seq"], drop=True).items():
                replicas[rid], tables[rid], folders[rid] = js.partitions[rid], t, js.folder
        t0 = time.perf_counter()
        records = spark_join_shards.run_row_partitions(self.spark, replicas, tables, folders,
                                                       keepalive.slots_of(self.spark) or 1) if tables else {}
        t1 = time.perf_counter()
        parts = []
        for e in entries:
            js = self._join_shard_states[e.group_id]
            error = next((err for rid, (err, _) in records.items() if err and rid in js.partitions), None)
            if error is not None:   # DESIGN §7: the group's 'error' row; its partitions rebuilt from the rows
                parts.append(spark_join_shards.ShardPart(e.group_id, js.folder, seq_of[e.group_id], error=error))
                continue
            parts += [spark_join_shards.ShardPart(e.group_id, js.folder, seq_of[e.group_id], shard=r)
                      for r in self._join_shard_replicas(e, js, sharded[e.group_id])]
        df = spark_join_shards.output_frame(self.spark, parts, schema).localCheckpoint(eager=False)
        failed = spark_groups.failed_groups(df)    # the one job that computes stage 2
        t2 = time.perf_counter()
        for e in entries:
            self._join_shard_states[e.group_id].timings = {"row_partitions_job_s": t1 - t0,
                                                           "shards_job_s": t2 - t1}
        return df, failed

    def _join_shards_commit(self, entry, group_batch, failed: set, mode, rows: int) -> None:
        """After the batch committed: each row partition's replica logs its part of the batch (its task moved its
        cache one step); a failed group's partitions are rebuilt from the rows next time.  The whole group's
        partitions (every subscription in each) no longer follow the table: rebuilt when next used."""
        js = self._join_shard_states[entry.group_id]
        entry.version += 1
        entry.base_stale = True
        if entry.group_id in failed:
            js.rows_stale = True
            return
        for rid, replica in list(js.partitions.items()):
            mine = group_batch.filter(pc.equal(group_batch.column("group_id"), rid))
            if mine.num_rows:
                js.partitions[rid] = replica.append(mine)
        js.log_rows += rows
        if mode == "reformulated" and (entry.subscribers is not None or entry.subscribers_seed is not None):
            entry.subscribers_version = entry.version

    def _join_shards_done(self, entries) -> None:
        """The publish's message files are no longer read (its output is checkpointed and kept)."""
        for e in entries:
            js = self._join_shard_states.get(e.group_id)
            if js is not None and js.folder is not None:
                shutil.rmtree(js.folder, ignore_errors=True)
                js.folder = None

    # ---- reading a sharded group (on the driver, or where it lives) -----------------------------------------
    def _join_sharded_view(self, entry):
        """The group as of now through its row partitions (``result``, EXPLAIN, stats), or None when it is not run
        sharded (its whole partitions are then the state): built on the driver (``ShardedJoinView``), or, past
        ``driver_operator_limit``, read where the partitions live (``RowPartitionsInPlace``)."""
        js = self._join_shard_states.get(entry.group_id)
        q = self._join_shard_count(entry)
        if not q and (js is None or js.rows_stale or not js.partitions):
            return None
        js = self._join_row_partitions(entry)
        reg = entry.registry
        n_shards = q or js.n_shards or 1
        if js.n_shards == n_shards and js.shards and js.stale_shards == set():
            counts = list(js.shard_subscriptions)
        else:
            ids, _ = reg.rows()
            counts = np.bincount(subscription_shard(ids.tolist(), n_shards), minlength=n_shards).tolist()
        shards = [{"shard": j, "subscriptions": int(c)} for j, c in enumerate(counts)]

        def bounds_of(sub_id):
            slot = reg.slot_of(sub_id)
            return tuple(float(reg.columns[k][slot]) for k in ("a_lo", "a_hi", "c_lo", "c_hi"))

        def outputs_of(sub_id):
            return reg.outputs.of(np.array([reg.slot_of(sub_id)]))[0]
        if any(self._read_in_place(self._tables[t], entry) for t in entry.family.tables(entry.physical)):
            # past driver_operator_limit (its subscriptions and either table's rows): each read runs where the
            # row partitions live, one placed task per partition (runtime/remote.py), as a zoned group's; the
            # driver holds the answers, never the rows (issue 16 item 3)
            replicas = list(js.partitions.values())

            def each(function, args):
                return spark_remote.call_on_each(self.spark, replicas, (), args, name="select_join_row_partition",
                                                 function=function)
            return RowPartitionsInPlace(list(js.partitions), each, bounds_of, outputs_of, len(reg), shards)
        groups = {}
        for rid, replica in js.partitions.items():
            g = spark_replicas.materialize(replica)
            spark_replicas.remember(replica, replica.log_length, g)
            groups[rid] = g
        return ShardedJoinView(groups, bounds_of, outputs_of, len(reg), shards)

