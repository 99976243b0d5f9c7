"""``load`` and ``publish``: checking a batch, running every group on the table in Spark tasks over the replicas'
files (``runtime/groups.py``, ``runtime/replicas.py``), keeping the output and committing the batch (``journal.py``).
A part of the Engine facade (``engine.py``)."""
from __future__ import annotations

import logging
import pickle
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import (BadUpdate, InvalidArgument)
from sparksub.jvm.bridge import subscription_group
from sparksub.runtime.connect import default_parallelism
from sparksub.planner.catalog import TableDef
from sparksub.operators.contract import ONE, ROW_PARTITIONS, SUBSCRIPTION_SHARDS
from sparksub.operators.joins import group as join_groups
from sparksub.operators.registry import family_of, in_order
from sparksub.operators.shared import row_validation
from sparksub.operators.shared.schemas import (DELETE, EVENT_PREFIX, UPSERT, publish_schema)
from sparksub.operators.shared.variants import with_variant
from sparksub.process_memory import BULK_ROWS, release_freed_memory
from sparksub.row_files import RowFiles, rows_table
from sparksub.runtime import frames as spark_frames
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import keepalive
from sparksub.runtime import output as spark_output
from sparksub.runtime import remote as spark_remote
from sparksub.runtime import replicas as spark_replicas
from sparksub.control.groups import GroupEntry, TableState
from sparksub.control.inputs import to_arrow
from sparksub.control.event_queries import _rename_event_columns
from sparksub.control.inputs import arrow_type

_log = logging.getLogger("sparksub.engine")


#: Rows of updates logged per group before the base snapshot is rebuilt from the current rows.
LOG_COMPACTION_ROWS = 200_000


def _count(registry) -> int | None:
    """The registry's subscriptions (None: it does not count them)."""
    try:
        return len(registry)
    except TypeError:
        return None


def _same_layout(a, b) -> bool:
    """Whether two join partition layouts (dicts holding numpy cut points) are the same cut."""
    return pickle.dumps(a, protocol=pickle.HIGHEST_PROTOCOL) == pickle.dumps(b, protocol=pickle.HIGHEST_PROTOCOL)


def _operator_name(physicals) -> str:
    """The name Spark's EXPLAIN shows for the task function: the operator families it runs."""
    kinds = sorted({family_of(p).operator_name(p) for p in physicals})
    return "_and_".join(kinds) + ("_group" if len(kinds) == 1 else "_groups")


@dataclass(frozen=True)
class PendingSeed:
    """A deliver() side not built yet (``GroupEntry.subscribers_seed``): the replica it is built from at the
    first deliver(), and the folder of that replica's pinned files once a compaction replaced the originals."""

    replica: spark_replicas.Replica
    folder: Path | None = None


class Publishing:
    """The Engine's publishing (a mixin of ``engine.Engine``: its methods use the engine's state)."""

    # ---- data -----------------------------------------------------------------------------------------
    def load(self, table: str, data) -> int:
        """Set the initial state of ``table`` (rows replace rows with the same key). No notifications."""
        n = self._load(table, data)
        if n >= BULK_ROWS:   # its temporaries are gone now: give their pages back (process_memory.py)
            release_freed_memory()
        return n

    def _load(self, table: str, data) -> int:
        with self._lock:
            state = self._table(table)
            batch, reasons, _ = self._validated(state, data)
            bad = next((i for i, r in enumerate(reasons) if r is not None), None)
            if bad is not None:  # initial state: all or nothing (there is no output to set a row aside in)
                raise BadUpdate(f"load into {state.definition.name!r}: {reasons[bad]}", bad)
            self._journal.load(state.definition, batch)   # the commit point
            self._apply_rows(state, batch)
            for entry in self._groups_on(state):
                self._changed(entry, subscriptions=True)  # rebuild bases from the new rows
            return batch.num_rows

    def publish(self, table: str, updates, mode: str = "unicast", *, variant=None, batch_id=None):
        """Apply ``updates`` in order and return the notifications as a Spark DataFrame.

        ``mode``: ``'unicast'`` (one row per affected subscription: subscription_id, op, value, seq,
        group_id) or ``'reformulated'`` (the messages: group_id, seq, step, op, new_value, inner_l,
        inner_r, outer_l, outer_r); both end with a nullable ``reason``. ``variant`` (with ``'reformulated'``
        only; a name or a list of names, one per family: ``operators/shared/variants.py``) chooses how the
        reformulated form is built: ``'S-CN'`` (default), ``'S-MN'`` (column ``targets``) or ``'CN+'`` (column
        ``item_key``) for RANGE_MIN / RANGE_MAX groups (000 §2); ``'Paint-Batch'`` (default),
        ``'Paint-Batch-Sparse'``, ``'Paint-Dense'``, ``'Paint-Sparse'``, ``'Paint-Dense(ε)'``,
        ``'Paint-Sparse(ε)'`` for top-k groups (002); ``deliver`` takes every variant's messages.
        FILTER and BAND_JOIN groups have no
        reformulated form: in that mode their unicast rows (with ``subscription_id``) come out beside the
        messages, and ``deliver`` passes them through. A join notification carries its subscription's
        selected columns under their names (DESIGN §1; ``left_key``/``right_key``, the result tuple's keys,
        stay as a deprecated alias). Should a group's operator fail,
        its notifications for this batch are replaced by one ``op = 'error'`` row whose ``reason``
        names the failure, the other groups are unaffected, and the failed group is rebuilt from the
        table's rows on its next use (DESIGN §7).

        A malformed row (``operators/shared/row_validation.py``: a null key, an unknown ``_op``, NaN or ±inf in a
        numeric column, a value that does not cast to its column's type, a delete of a key the table does
        not hold -- counting earlier rows of the batch) is set aside: it comes out as a row with ``op =
        'rejected'``, its ``seq`` and ``reason``, exactly as ``stream`` emits it, and the other rows apply.
        A malformed batch (an unknown column, no key column, an upsert batch lacking a column) raises
        ``BadUpdate`` and changes nothing.

        On an event stream (a table without a key) the rows are events: each has an interval — integer
        ``t0``/``t1`` columns, or ``t0 = t1 = n`` for the n-th event published to the stream (0-based,
        across calls) — and the output holds, beside the FILTER notifications, the matches of the event
        queries reading the stream: ``op = 'match'``, ``query`` (the event query), one column per output
        attribute over those queries (``event_partitions``: names and types), ``t0``, ``t1``.  Within a
        call events are processed in (t1, row) order, inside Spark tasks (``spark_events``; one executor
        per partition of each event class).  A malformed event (NULL t0/t1, t0 > t1, a t1 before the
        largest t1 of an earlier call) comes out as an ``op = 'rejected'`` row with its ``seq``, columns
        and ``reason``, and is set aside (FILTER subscriptions do not see it either); the others go on.
        Some events are set aside for one event class only (a ``rejected`` row with the class as
        ``group_id``): in a class reading several streams, one older than what the class already processed
        (a class needs its streams in end-time order); in a class one of whose queries reads a PUBLISHed
        stream, one continuing the tick an earlier call ended with (its matches could differ from the
        oracle's: publish a tick's events in one call).
        An event on which an event query raises (an ill-typed comparison) is set aside for its class (none
        of the class's queries sees it): a ``rejected`` row with ``group_id`` = the replica and the error as
        ``reason``.  A replica whose executor fails altogether yields an ``op = 'error'`` row and its batch
        is dropped for it alone.
        Event queries have one output form: their rows come out in either ``mode``.

        The output is kept in the engine's directory before the call returns (``notifications()``), and the
        commit is journaled (a durable engine: ``Engine(path=...)``).  ``batch_id`` (a string or an integer)
        makes the call idempotent, as a Structured Streaming sink's batch id: a batch id already committed
        -- before a kill, in an earlier process -- is not applied again; the call returns the output kept
        for it (an empty DataFrame once the retention window passed it).  ``committed(batch_id)`` tells.

        With ``Engine.max_delay`` set (seconds), a keyed table's updates are buffered and the refresh scheduler
        decides which tables' buffers to apply at this call (003 ch. 2; ``control/refreshing.py``,
        docs/refresh.md): the output holds what was applied now.
        """
        if self._buffering(table):   # Engine.max_delay: buffered under a response-time bound (control/refreshing.py)
            return self._publish_buffered(table, updates, mode, variant, batch_id)
        df, rows = self._publish(table, updates, mode, variant, batch_id)
        if rows >= BULK_ROWS:   # its temporaries are gone now: give their pages back (process_memory.py)
            release_freed_memory()
        return df

    def _publish(self, table: str, updates, mode: str, variant, batch_id):
        """``publish`` (not buffered): ``(output, rows in the batch)``."""
        schema = publish_schema(mode)
        mode = with_variant(mode, variant)   # ValueError / InvalidArgument before any change
        if batch_id is not None and (isinstance(batch_id, bool) or not isinstance(batch_id, (str, int))):
            raise InvalidArgument(f"publish(batch_id=...) takes a string or an integer, got {batch_id!r}")
        with self._lock:
            state = self._table(table)
            if batch_id is not None and self._journal.committed(batch_id) is not None:
                return self._kept_output(state, batch_id, schema), 0
            batch, reasons, ticks = self._validated(state, updates)
            times = None
            if state.definition.key is None:
                times = self._event_times(state, batch.num_rows, reasons, ticks)
                reasons = np.array(times["reasons"], dtype=object)
            n_rows = batch.num_rows
            all_seqs = np.arange(self._next_seq, self._next_seq + n_rows, dtype=np.int64)
            all_batch = batch
            seqs = all_seqs
            ok = np.fromiter((r is None for r in reasons), dtype=bool, count=n_rows)
            if not ok.all():  # set aside (DESIGN §7): the rejected rows come out below, the rest goes on
                batch, seqs = batch.filter(pa.array(ok)), all_seqs[ok]
            groups = self._groups_on(state)
            # every family adds its notifications' columns (FILTER and BAND_JOIN have no reformulated form: in
            # that mode they answer with their unicast rows beside the messages, issue 15 item 6, and deliver()
            # passes them through)
            schema = self._output_schema(schema, mode, groups, state.definition)
            self._net_join_rows = False
            group_batches = {e.group_id: e.family.group_batch(e.physical, state.definition, batch, seqs)
                             for e in groups if e.family.placement != ROW_PARTITIONS}
            zoned = self._zones_select(state, groups, mode)   # range groups split into X zones (control/zones.py)
            # SELECT_JOIN groups with their subscriptions in shards (control/join_shards.py): row partitions without
            # subscriptions, then (unicast) one task per subscription shard
            sharded = self._join_shards_select(state, groups)
            two_stage = set(sharded) if mode == "unicast" else set()
            # RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG groups with their subscriptions in shards
            # (control/range_shards.py): the rows' messages, then (unicast) one task per shard
            range_sharded = self._range_shards_select(state, groups, mode)
            # BOX_MIN / BOX_MAX / BOX_TOPK groups in subscription shards, the rows copied in each
            # (control/box_shards.py): one replica per shard in the job below, each seeing the group's whole batch
            box_sharded = self._box_shards_select(state, groups, mode)
            replicas, parts, owner = {}, [], {}
            for e in groups:
                if e.group_id in zoned:   # its zones as of before this batch (the deliver() seed reads them)
                    self._zone_replicas(e, zoned[e.group_id])
                if mode == "reformulated" and e.family.reformulated(e.physical):
                    self._sync_subscribers(e, mode)
                if e.group_id in zoned or e.group_id in range_sharded:
                    continue
                if e.group_id in sharded:
                    # its row partitions (no subscriptions); reformulated: their messages are the output, in
                    # the job below; unicast: stage 1 then the shards (_join_shards_run)
                    js = self._join_row_partitions(e)
                    group_batches[e.group_id] = self._join_batch(state, e, batch, seqs, js.layout, "r")
                    if e.group_id in two_stage:
                        continue
                    for rid, replica in js.partitions.items():
                        replicas[rid] = replica
                        owner[rid] = e.group_id
                    parts.append(group_batches[e.group_id])
                    continue
                if e.family.placement == ROW_PARTITIONS:
                    # one replica per partition; the rows are routed to their partitions (join_groups)
                    for rid, replica in self._join_replicas(e).items():
                        replicas[rid] = replica
                        owner[rid] = e.group_id
                    group_batches[e.group_id] = self._join_batch(state, e, batch, seqs)
                    parts.append(group_batches[e.group_id])
                    continue
                # A range group is one replica; a FILTER group one per shard, each shard seeing
                # every event (001 is stateless per event: shards only split the subscriptions); a sharded box
                # group one per subscription shard, each seeing the group's batch too (control/box_shards.py).
                shards = box_sharded.get(e.group_id) or self._replicas(state, e)
                for rid, replica in shards.items():  # as of before this batch
                    replicas[rid] = replica
                    owner[rid] = e.group_id
                    b = group_batches[e.group_id]
                    parts.append(b.append_column("group_id", pa.array([rid] * b.num_rows, pa.string())))
            write_whole = None   # the whole groups' job, when its tasks keep the output themselves (below)
            if groups:
                df, failed = None, set()
                whole = [e for e in groups if e.group_id not in zoned and e.group_id not in two_stage
                         and e.group_id not in range_sharded]
                if whole:
                    combined = pa.concat_tables(parts, promote_options="default")
                    name = _operator_name(e.physical for e in whole)
                    if not (zoned or two_stage or range_sharded or self._net_join_rows or times is not None
                            or not ok.all()):
                        # only whole groups: their tasks write the kept output themselves, in the one job
                        # (runtime/groups.py write_groups); df gives the columns, never run
                        df = spark_groups.groups_frame(self.spark, schema)
                        write_whole = (combined, name)
                    else:
                        describe = self._describe([(e.physical, e) for e in whole], mode)
                        df, failed = spark_groups.run_groups(self.spark, replicas, combined, mode, schema,
                                                             name, describe, owners=owner)
                    if self._net_join_rows:
                        df = spark_frames.net_join_notifications(df)
                if zoned:
                    zdf, zfailed = self._zones_run([e for e in groups if e.group_id in zoned], zoned, group_batches,
                                                   mode, schema)
                    df, failed = (zdf if df is None else df.unionByName(zdf)), failed | zfailed
                if two_stage:
                    sdf, sfailed = self._join_shards_run([e for e in groups if e.group_id in two_stage], sharded,
                                                         group_batches, schema)
                    df, failed = (sdf if df is None else df.unionByName(sdf)), failed | sfailed
                if range_sharded:
                    rdf, rfailed = self._range_shards_run([e for e in groups if e.group_id in range_sharded],
                                                          range_sharded, group_batches, schema, mode)
                    df, failed = (rdf if df is None else df.unionByName(rdf)), failed | rfailed
                df = _rename_event_columns(df, state.definition)
            else:
                df, failed = None if times is not None else spark_frames.empty_frame(self.spark, schema), set()
            event_commit = None
            if times is not None:
                df, event_commit = self._with_event_part(state, df, schema, all_batch, all_seqs, times)
            elif not ok.all():  # a keyed table's malformed rows, as a stream emits them (row_validation)
                rejected = row_validation.rejected_rows(schema, all_seqs[~ok], reasons[~ok])
                df = df.unionByName(_rename_event_columns(self.spark.createDataFrame(rejected), state.definition),
                                    allowMissingColumns=True)
            # Only now, with the notifications computed -- and kept, with the rows the batch applies
            # (journal.py) -- does the batch become part of the state.
            failed_written = set()
            if write_whole is not None:
                def write(path):
                    return spark_groups.write_groups(self.spark, replicas, write_whole[0], mode, schema, path,
                                                     df.columns, self._journal.durable, failed_written,
                                                     write_whole[1], owners=owner)
            else:
                def write(path):
                    return spark_output.write_notifications(df, path, self._journal.durable, failed_written)
            kept = self._journal.publish_begin(state.definition, self._next_seq, n_rows, batch, batch_id, write)
            failed |= failed_written   # the error rows name their groups (runtime/groups.py _error_batch)
            # the caller reads the kept files: the operators never run again for this output
            df = spark_output.read_written(self.spark, self._journal.notification_path(kept), df.schema)
            self._apply_rows(state, batch)
            self._next_seq += n_rows
            if event_commit is not None:
                event_commit()
            for e in groups:  # the batch is now part of every group's state: log it
                if e.group_id in zoned:
                    self._zones_commit(e, failed, mode)   # each zone's task logged its steps: move past them
                    continue
                if e.group_id in range_sharded:   # its rows log the batch, its shards the messages
                    self._range_shards_commit(e, group_batches[e.group_id], failed, batch.num_rows, mode)
                    continue
                if e.group_id in box_sharded:   # each shard logs the batch
                    self._box_shards_commit(e, group_batches[e.group_id], failed, mode, batch.num_rows)
                    continue
                if e.group_id in sharded:   # its row partitions log their parts of the batch
                    self._join_shards_commit(e, group_batches[e.group_id], failed, mode, batch.num_rows)
                    continue
                if e.group_id in failed:
                    # Its 'error' row is in the output; rebuild it from the rows next time (DESIGN §7).
                    e.base_stale = True
                    e.version += 1
                    continue
                if e.family.stateless:
                    continue  # stateless: nothing to log
                if e.family.placement == ROW_PARTITIONS:
                    jb = group_batches[e.group_id]
                    for rid, replica in list(e.shards.items()):
                        mine = jb.filter(pc.equal(jb.column("group_id"), rid))
                        if mine.num_rows:  # a task ran for this partition and moved its cache one step
                            e.shards[rid] = replica.append(mine)
                    e.log_rows += batch.num_rows
                    e.version += 1
                    if mode == "reformulated" and (e.subscribers is not None or e.subscribers_seed is not None):
                        e.subscribers_version = e.version
                    continue
                e.replica = e.replica.append(group_batches[e.group_id])
                e.log_rows += batch.num_rows
                e.version += 1
                if mode == "reformulated" and (e.subscribers is not None or e.subscribers_seed is not None):
                    e.subscribers_version = e.version
            self._journal.publish_commit(kept, state.definition)   # the commit point (journal.py)
            self._zones_done(e for e in groups if e.group_id in zoned)
            self._join_shards_done(e for e in groups if e.group_id in two_stage)
            self._range_shards_done(e for e in groups if e.group_id in range_sharded)
            if self.catalyst and df is not None:
                # The operators ran once, above, and their output was kept (what df reads): the node on top
                # keeps saying in df.explain() which groups produced these rows.
                events = self._event_classes_on(state.definition) if times is not None else []
                what = [d for d in (self._describe([(e.physical, e) for e in groups], mode),
                                    self._describe_events(events, "batch")) if d]
                df = subscription_group(df, f"publish to {state.definition.name} (ran once, kept): "
                                            + ("; ".join(what) or "no groups"))
            if groups or times is not None:   # the workers now cache these groups: keep them alive (keepalive.py)
                keepalive.touch(self.spark, self._parallelism(), self.keep_workers_warm, self.keep_workers_warm_for)
            return df, n_rows

    def _kept_output(self, state: TableState, batch_id, schema: pa.Schema):
        """``publish``'s answer for a batch id already committed: the output kept for it."""
        kept = self._journal.committed(batch_id)
        if kept["table"] != state.definition.name.lower():
            raise InvalidArgument(f"publish(batch_id={batch_id!r}): that batch id was committed for table "
                                  f"{kept['table']!r}, not {state.definition.name!r}")
        path = self._journal.notification_path(kept)
        if path is None:
            _log.warning("publish(batch_id=%r): committed before; its output is past the retention window "
                         "(notification_retention_rows) and no longer kept", batch_id)
        return spark_output.read_notifications(self.spark, [str(path)] if path else [], None, schema)

    def _validated(self, state: TableState, data) -> tuple[pa.Table, np.ndarray, tuple | None]:
        """``(batch, reasons, ticks)``: the batch cast to the table's schema plus an int8 ``op``; per row why
        it is set aside (None: valid) -- ``row_validation.check_rows``, the checks every stream path makes
        too, and, in a keyed table, a delete of a key it does not hold (as of the rows before it); and an
        event stream's given ``(t0, t1)`` (None: not given).  Batch-level errors raise BadUpdate before any
        change (DESIGN §7)."""
        tdef = state.definition
        shape = row_validation.RowShape.of(tdef)
        checked = row_validation.check_rows(to_arrow(data), shape)
        reasons = checked.reasons
        if tdef.key is not None:
            keys = checked.columns[tdef.key].to_pylist()
            deleted = [keys[i] for i in np.flatnonzero(np.asarray(checked.ops) == DELETE).tolist()
                       if reasons[i] is None]
            held = dict(zip(deleted, state.rows.contains_many(deleted).tolist())) if deleted else {}
            pending = {}
            for i, k in enumerate(keys if deleted else ()):   # only a delete can be set aside here
                if reasons[i] is not None:
                    continue
                if checked.ops[i] == DELETE:
                    if not (pending[k] if k in pending else held[k]):
                        reasons[i] = row_validation.unknown_key_reason(k, tdef.name)
                        continue
                    pending[k] = False
                else:
                    pending[k] = True
        ticks = (checked.t0, checked.t1) if checked.t0 is not None else None
        return checked.table(shape), reasons, ticks

    def _apply_rows(self, state: TableState, batch: pa.Table) -> None:
        if state.definition.key is None:
            return  # events are not kept
        state.rows.apply(batch)   # row_store.py: one lookup of the batch's keys, then the rows in order
        if state.files is not None and state.files.append(batch):   # the live view's files (row_files.py)
            state.files.reset(rows_table(state.definition, state.rows))

    def _row_files(self, state: TableState) -> RowFiles:
        """The table's rows as files Spark reads (``row_files.py``): written from the rows on first use, then
        kept current by every batch applied."""
        if state.files is None:
            state.files = RowFiles(self.directory.area("tables", state.definition.name.lower()), state.definition)
            state.files.reset(rows_table(state.definition, state.rows))
        return state.files

    def _live_view(self, name: str) -> None:
        """Make ``name`` a temporary view of the table's current rows, live: Spark analyses a SQL view again at
        each use, and so lists the table's files again (``row_files.py``).  An event stream keeps no rows: its
        view is empty."""
        state = self._table(name)
        tdef = state.definition
        if tdef.key is None:
            self.table(name).createOrReplaceTempView(tdef.name)
            return
        self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{tdef.name.replace('`', '``')}` AS "
                       + self._row_files(state).current_sql())

    def _snapshot(self, state: TableState, entry: GroupEntry):
        """The base the group's operator is rebuilt from (``family.snapshot``: its subscriptions and rows)."""
        return entry.family.snapshot(entry.registry, entry.physical, entry.group_id, self._tables)

    def _replica(self, state: TableState, entry: GroupEntry) -> spark_replicas.Replica:
        """The group's replica: its base snapshot and log in files under the engine's directory
        (``runtime/replicas.py``); a new base when subscriptions or loaded rows changed or the log grew past
        LOG_COMPACTION_ROWS, the superseded base and log files deleted."""
        if entry.replica is None or entry.base_stale or entry.log_rows > LOG_COMPACTION_ROWS:
            # only the log's length: the new base is the old one with its log applied, nothing else changed
            compaction = entry.replica is not None and not entry.base_stale
            self._keep_seed(entry)   # a pending deliver() side reads the base about to be replaced
            snapshot = self._snapshot(state, entry)
            # issue 19 item 2 (stream joins): a family whose state lives only in its replica -- the engine keeps
            # no rows of a stream -- carries the operator as of now into the new base
            carry = getattr(entry.family, "carry_state", None)
            if carry is not None and entry.replica is not None:
                snapshot = carry(snapshot, spark_replicas.materialize(entry.replica))
            entry.replica = spark_replicas.new_base(self.directory, self.uid, entry.group_id,
                                                    snapshot, replaces=entry.replica, continues=compaction)
            entry.log_rows = 0
            entry.base_stale = False
            del snapshot
            if len(state.rows) + (_count(entry.registry) or 0) >= BULK_ROWS:
                release_freed_memory()   # the snapshot's copies and its pickle are freed (process_memory.py)
        return entry.replica

    def _replicas(self, state: TableState, entry: GroupEntry) -> dict:
        """What the tasks of one publish need for this group, by the batch's group_id."""
        if entry.family.placement != SUBSCRIPTION_SHARDS:
            return {entry.group_id: self._replica(state, entry)}
        if entry.shards is None or entry.base_stale:
            superseded = list((entry.shards or {}).values())
            snap = self._snapshot(state, entry)
            k = max(1, min(-(-len(snap) // self.filter_shard_size), self._parallelism()))
            entry.shards = {}
            for i in range(k):
                part = snap.shard(i, k) if k > 1 else snap
                rid = f"{entry.group_id}#{i}"
                entry.shards[rid] = spark_replicas.new_base(self.directory, self.uid, rid, part)
            for old in superseded:
                spark_replicas.discard(old)
            entry.base_stale = False
        return entry.shards

    def _materialized(self, state: TableState, entry: GroupEntry, in_place: bool = False):
        """The group as of now, in this (driver) process: from the worker-style cache + log replay."""
        if entry.family.stateless:
            return entry.registry  # stateless: the registry is the whole operator (operators/contract.py)
        view = self._zoned_view(entry)   # a range group running in X zones: read through them (control/zones.py)
        if view is not None:
            return view
        replica = self._replica(state, entry)
        if in_place and self._read_in_place(state, entry):
            # a large group is read where the publishes left it, a worker's cache, one Spark task per call
            # (runtime/remote.py): the driver holds the answers, never the group (issue 16 item 3)
            return spark_remote.RemoteOperator(self.spark, replica)
        group = spark_replicas.materialize(replica)
        spark_replicas.remember(replica, replica.log_length, group)
        return group

    def _read_in_place(self, state: TableState, entry: GroupEntry) -> bool:
        """Whether ``entry`` is past ``driver_operator_limit`` (its subscriptions plus its table's rows; a
        registry that does not count its subscriptions is read on the driver)."""
        limit = self.driver_operator_limit
        n = _count(entry.registry)
        return limit is not None and n is not None and n + len(state.rows) > limit

    def _sync_subscribers(self, entry: GroupEntry, mode: str = "reformulated") -> None:
        """Seed the deliver() side with every subscriber's current result, unless it is in step (and was seeded
        for the variant ``mode`` names for the group's family: CN+'s side keeps a copy of the table, which only
        CN+'s messages keep up to date)."""
        variant = getattr(mode, "variants", {}).get(entry.family.name)
        if (entry.subscribers is not None or entry.subscribers_seed is not None) \
                and entry.subscribers_version == entry.version and entry.subscribers_variant == variant:
            return
        entry.subscribers_version, entry.subscribers_variant = entry.version, variant
        if entry.family.placement == ONE and not entry.family.stateless and self._zoned_view(entry) is None:
            # Seeded at the first deliver(), from the replica as it stands now -- before this batch; a new base
            # pins its files for it (_keep_seed) rather than building it (issue 16 item 3: a caller who never
            # calls deliver() never has every subscriber's result on the driver).
            replica = self._replica(self._tables[entry.family.tables(entry.physical)[0]], entry)
            self._drop_seed(entry)
            entry.subscribers, entry.subscribers_seed = None, PendingSeed(replica)
            return
        self._drop_seed(entry)
        entry.subscribers = self._subscribers_of(entry)

    def _seeded(self, entry: GroupEntry) -> None:
        """Build the deliver() side a reformulated publish left pending (``subscribers_seed``), if any."""
        seed = entry.subscribers_seed
        if seed is not None:
            entry.subscribers = entry.family.subscribers(entry.registry, entry.physical,
                                                         lambda: self._replica_operator(seed.replica), self._tables)
            self._drop_seed(entry)

    def _keep_seed(self, entry: GroupEntry) -> None:
        """Before the replica's files are replaced: a pending deliver() side keeps hard links to the ones it
        reads (``replicas.pin``) rather than being built now -- on the driver, the whole group -- by a publish
        whose caller may never call deliver()."""
        seed = entry.subscribers_seed
        if seed is not None and seed.folder is None and seed.replica.directory == entry.replica.directory:
            folder = self.directory.area("seeds", entry.group_id, uuid.uuid4().hex)
            entry.subscribers_seed = PendingSeed(spark_replicas.pin(seed.replica, folder), folder)

    @staticmethod
    def _drop_seed(entry: GroupEntry) -> None:
        seed, entry.subscribers_seed = entry.subscribers_seed, None
        if seed is not None and seed.folder is not None:
            shutil.rmtree(seed.folder, ignore_errors=True)

    @staticmethod
    def _replica_operator(replica: spark_replicas.Replica):
        group = spark_replicas.materialize(replica)
        spark_replicas.remember(replica, replica.log_length, group)
        return group

    def _subscribers_of(self, entry: GroupEntry):
        """The group's subscriber side as of now (``family.subscribers``; the operator materialised if needed)."""
        return entry.family.subscribers(entry.registry, entry.physical, lambda: self._operator(entry), self._tables)

    def _operator(self, entry: GroupEntry, in_place: bool = False):
        """The group's operator as of now, in this (driver) process (the runtime's cache + log replay): a join's
        partitions by replica id, else the one operator (FILTER: its registry)."""
        for name in entry.family.tables(entry.physical):
            self._follow_streams(self._tables[name])   # result() agrees with what the streams applied
        if entry.family.placement == ROW_PARTITIONS:
            return self._join_partitions_materialized(entry)
        return self._materialized(self._tables[entry.family.tables(entry.physical)[0]], entry, in_place)

    @staticmethod
    def _output_schema(schema: pa.Schema, mode: str, groups, table: TableDef) -> pa.Schema:
        """``schema`` (``publish``'s or ``stream``'s) with the columns the notifications of ``groups`` on
        ``table`` add, family by family in the registry's order (``operators/registry.py``)."""
        for family, members in in_order(groups, lambda e: e.physical):
            schema = family.output_schema(schema, mode, [(e.physical, e.registry) for e in members], table)
        return schema

    def _parallelism(self) -> int:
        """``parallelism``, else the session's ``spark.default.parallelism``, else 2 (no ``sparkContext``: Connect)."""
        return max(1, int(self.parallelism)) if self.parallelism is not None else default_parallelism(self.spark)

    # ---- EXPLAIN: the Spark jobs of a publish ----------------------------------------------------------------
    def _spark_jobs(self, physical, entry) -> list:
        """EXPLAIN's Spark jobs of the next ``unicast`` publish of the group ``entry`` (None: a SELECT no group holds
        yet), in the order it runs them: ``[(what, frame)]`` for ``runtime/groups.jobs_text``, each ``frame()``
        built by the runtime's own function for that job, over placeholder replicas and batches (never run).  Here
        the group's one job, as it always showed (``what`` None); the mixins of the groups that run split
        (``control/box_shards.py``, ``range_shards.py``, ``join_shards.py``, ``zones.py``) answer before this one for
        a group that runs split now and pass the others on."""
        rids = self._explain_replica_ids(entry)
        what = None   # one replica: the plan alone, as it always showed
        if rids is not None and len(rids) > 1:
            what = f"{spark_groups.counted(len(rids), 'join partition')}, each with every subscription" \
                if entry.family.placement == ROW_PARTITIONS else \
                f"{spark_groups.counted(len(rids), 'subscription shard')}, each seeing the whole batch"
            what += " (a task per replica)"
        return [(what, lambda: self._group_job_frame(physical, entry, rids))]

    def _explain_replica_ids(self, entry) -> list | None:
        """The replicas the group's job runs in the next publish (None: the default, one): a join group's partitions
        (``_join_replicas``) and a FILTER group's shards (``_replicas``) as recorded, else as they would be made."""
        if entry is None or entry.family.placement == ONE:
            return None
        if entry.shards and not entry.base_stale:
            return sorted(entry.shards)
        if entry.family.placement == ROW_PARTITIONS:
            return [f"{entry.group_id}#{i}" for i in range(self._join_partition_count())]
        k = max(1, min(-(-(_count(entry.registry) or 0) // self.filter_shard_size), self._parallelism()))
        return [f"{entry.group_id}#{i}" for i in range(k)] if k > 1 else [entry.group_id]

    def _group_job_frame(self, physical, entry, rids=None):
        """publish's ordinary job for the group (``runtime/groups.plan_frame``): one partition per replica of
        ``rids`` (default the group's one -- a join: its first partition), each given one placeholder row."""
        gid = entry.group_id if entry else "(new group)"
        family = family_of(physical)
        tdef = self.catalog.get(family.tables(physical)[0])
        # One placeholder row: an empty local relation would let Spark optimise the exchange away.
        row = pa.table({c: pa.nulls(1, arrow_type(t)) for c, t in tdef.columns}).append_column(
            "op", pa.array([UPSERT], pa.int8()))
        sample = family.group_batch(physical, tdef, row, np.zeros(1, dtype=np.int64))
        if rids is None:
            rids = [f"{gid}#0" if family.placement == ROW_PARTITIONS else gid]
        sample = pa.concat_tables([sample.append_column("group_id", pa.array([rid], pa.string())) for rid in rids])
        return spark_groups.plan_frame(self.spark, {rid: self._explain_replica(rid) for rid in rids}, sample,
                                       "unicast", self._explain_schema(physical), _operator_name([physical]),
                                       self._describe([(physical, entry)], "unicast", physical))

    def _explain_replica(self, replica_id: str) -> spark_replicas.Replica:
        """A placeholder replica for EXPLAIN's plans: no files, never run."""
        return spark_replicas.Replica(self.uid, replica_id, "", "explain")

    def _explain_schema(self, physical) -> pa.Schema:
        """A unicast publish's output columns for the group (what its output job's plan lists)."""
        family = family_of(physical)
        return family.output_schema(publish_schema("unicast"), "unicast", [(physical, None)],
                                    self.catalog.get(family.tables(physical)[0]))

    def _explained_jobs(self, physical, entry, jobs: list) -> list:
        """A split group's ``jobs`` with the last -- its output's -- under the Catalyst extension's
        ``SubscriptionGroup`` node naming the group, as the whole group's one job is (the extension off: as they
        are)."""
        describe = self._describe([(physical, entry)], "unicast", physical)
        if describe is None or not jobs:
            return jobs
        what, frame = jobs[-1]
        return [*jobs[:-1], (what, lambda: subscription_group(frame(), describe))]

    # ---- join groups (SELECT_JOIN, BAND_JOIN: operators/joins/group.py) ---------------------------------------
    def _join_partition_count(self) -> int:
        return max(1, int(self.join_partitions)) if self.join_partitions is not None else self._parallelism()

    def _join_replicas(self, entry: GroupEntry) -> dict:
        """One replica per partition, each with its base (its rows and every subscription) and its log."""
        if entry.shards is not None and not entry.base_stale and entry.log_rows <= LOG_COMPACTION_ROWS:
            return entry.shards
        superseded = dict(entry.shards or {})   # their files go once the new bases are written
        compaction = bool(superseded) and not entry.base_stale
        layout, snaps = entry.family.partition_snapshots(entry.registry, entry.physical, entry.group_id, self._tables,
                                                         self._join_partition_count(), self.join_router_mode)
        # only the logs' length, and cut as before: each new base is its partition with its log applied, so the
        # workers' cached partitions go on (replicas.new_base ``continues``)
        continues = compaction and set(snaps) == set(superseded) and _same_layout(layout, entry.registry.layout)
        entry.shards = {}
        for rid, snap in snaps.items():
            entry.shards[rid] = spark_replicas.new_base(self.directory, self.uid, rid, snap,
                                                        replaces=superseded.pop(rid) if continues else None,
                                                        continues=continues)
        for old in superseded.values():
            spark_replicas.discard(old)
        entry.registry.layout = layout
        entry.base_stale = False
        entry.log_rows = 0
        return entry.shards

    def _join_batch(self, state: TableState, entry: GroupEntry, batch: pa.Table, seqs, layout: dict | None = None,
                    prefix: str = "") -> pa.Table:
        """The batch for a join group's partitions: an upsert of a known key becomes the delete of its old row
        and the insert of the new one (one seq; they may go to different partitions), each row routed to its
        partition(s) (``group_id`` = the partition's replica id, ``<group>#<prefix><partition>``; ``layout``:
        the partitions', default the whole group's)."""
        tdef = state.definition
        names = tdef.column_names
        side = entry.family.side_of(entry.physical, tdef)
        layout = entry.registry.layout if layout is None else layout
        ki = names.index(tdef.key)
        cols = list(zip(*(batch.column(c).to_pylist() for c in names))) if batch.num_rows else []
        ops = batch.column("op").to_numpy()
        out_rows, out_ops, out_seqs, out_parts = [], [], [], []

        def emit(row, op, seq):
            for part in entry.family.targets(entry.physical, layout, side, row, names):
                out_rows.append(row)
                out_ops.append(op)
                out_seqs.append(seq)
                out_parts.append(f"{entry.group_id}#{prefix}{part}")

        pending: dict = {}
        keys = [row[ki] for row in cols]
        held = dict(zip(keys, state.rows.get_many(keys))) if cols else {}
        for i, row in enumerate(cols):
            key = row[ki]
            old = pending[key] if key in pending else held[key]
            if old is not None:
                emit(old, DELETE, int(seqs[i]))
            if ops[i] == DELETE:
                pending[key] = None
            else:
                emit(row, UPSERT, int(seqs[i]))
                pending[key] = row
                if old is not None and side == join_groups.R and layout["kind"] == "BAND_JOIN" and \
                        entry.family.targets(entry.physical, layout, side, old, names) != \
                        entry.family.targets(entry.physical, layout, side, row, names):
                    # an S row moving to another partition: a pair it keeps is deleted in one partition and
                    # inserted in the other; publish nets them (the only case no partition can)
                    self._net_join_rows = True
        columns = list(zip(*out_rows)) if out_rows else [[] for _ in names]
        out = {EVENT_PREFIX + c: pa.array(list(v), arrow_type(t)) for (c, t), v in zip(tdef.columns, columns)}
        return pa.table({**out, "op": pa.array(out_ops, pa.int8()), "seq": pa.array(out_seqs, pa.int64()),
                         "j_side": pa.array([side] * len(out_ops), pa.int8()),
                         "group_id": pa.array(out_parts, pa.string())})

    def _join_partitions_materialized(self, entry: GroupEntry) -> dict:
        """Every partition of a join group as of now, in this (driver) process (cache + log replay); a sharded
        SELECT_JOIN group's row partitions (``control/join_shards.py``: ``ShardedJoinView``)."""
        view = self._join_sharded_view(entry)
        if view is not None:
            return view
        out = {}
        for rid, replica in self._join_replicas(entry).items():
            group = spark_replicas.materialize(replica)
            spark_replicas.remember(replica, replica.log_length, group)
            out[rid] = group
        return out
