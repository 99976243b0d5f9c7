"""``stream``: the engine's groups and event classes over a Structured Streaming source (``runtime/stream.py``,
``runtime/join_stream.py``, ``runtime/event_stream.py``), and the engine following its streams -- subscription changes
published to them, the rows they applied taken in (``runtime/stream_control.py``).  A part of the Engine facade."""
from __future__ import annotations

import dataclasses
import pickle
import uuid
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import (InvalidArgument,
                             SparksubError)
from sparksub.jvm.bridge import subscription_group
from sparksub.control.range_shards import range_shard_count, range_zone_count
from sparksub.operators.box.stream_shards import changed_shards, stream_shard_bases
from sparksub.operators.shared.families import key_type as family_key_type
from sparksub.operators.shared.range_shard_stream import members_after
from sparksub.operators.shared.range_shards import RANGE_SHARD_CLASSES, rows_extra
from sparksub.operators.shared.range_zone_stream import ZONED_STREAM_CLASSES, StreamZone, zone_keys
from sparksub.operators.shared.range_zones import HALO_CLASSES, zone_cuts
from sparksub.operators.contract import ONE, ROW_PARTITIONS, SUBSCRIPTION_SHARDS
from sparksub.operators.range_min.group import RangeMinGroup
from sparksub.operators.range_min.subscription_shards import shard_bases, shard_bases_at, shard_digest
from sparksub.operators.shared.schemas import (DELETE, mode_schema, publish_schema,
                                               with_reason)
from sparksub.runtime import frames as spark_frames
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import range_shards as spark_range_shards
from sparksub.runtime import replicas as spark_replicas
from sparksub.runtime import stream as spark_stream
from sparksub.runtime import stream_control
from sparksub.operators.shared.variants import with_variant
from sparksub.control.groups import GroupEntry, TableState
from sparksub.control.event_queries import _rename_event_columns
from sparksub.control.inputs import arrow_type
from sparksub.control.publishing import _operator_name


def _check_streaming(df) -> None:
    """``stream`` runs over a streaming DataFrame (``spark.readStream``...); anything else is refused here,
    not deep inside Structured Streaming."""
    if getattr(df, "isStreaming", False) is not True:
        kind = "a batch DataFrame (use publish)" if hasattr(df, "isStreaming") else f"a {type(df).__name__}"
        raise InvalidArgument(f"stream() takes a streaming DataFrame (spark.readStream...), got {kind}")


def _stream_stream(entry) -> bool:
    """Whether ``entry`` is a stream-stream join group (operators/stream_joins: the family that carries its state)."""
    return getattr(entry.family, "carry_state", None) is not None


def _zoned_specs(group_id: str, part: tuple, stream_id: str) -> dict:
    """``run_stream``'s entries of a two-stage group: one per X zone, keyed by the zone's state partition key, when
    ``part`` has a sixth element ``{zone key: StreamZone}`` (counted in the stream's ``zones``); else ``part`` whole."""
    zones = part[5] if len(part) > 5 else {}
    if zones:
        spark_stream._STATS[stream_id].add({"zones": len(zones)})
    return {key: (*part[:5], zone) for key, zone in zones.items()} or {group_id: part}


class Streaming:
    """The Engine's streaming (a mixin of ``engine.Engine``: its methods use the engine's state)."""

    def stream(self, table: str, streaming_df, mode: str = "unicast", *, variant=None):
        """Run the subscriptions on ``table`` over a stream of updates: a streaming DataFrame of
        notifications (Structured Streaming; ``runtime/stream.py``).

        ``streaming_df`` has the table's columns, an optional ``_op`` (``'upsert'`` default, or
        ``'delete'``) and an optional integer ``_seq``. Rows of one micro-batch apply in ``_seq`` order
        (notifications carry ``seq = _seq``); without ``_seq``, in input order (input partitions in
        turn, each in row order; ``seq = (micro-batch id << 32) + rank``; deterministic when a
        file source replays a micro-batch) -- for every class alike. Output: ``publish``'s columns for
        ``mode`` plus a nullable ``reason`` (``variant``: as ``publish``'s). Every row is checked first, by the
        check ``publish`` makes
        (``row_validation``): a malformed row (null key, NaN or ±inf in a numeric column, a value of the
        wrong type, an unknown ``_op``, a delete of an unknown key, a null or inverted event interval)
        does not stop the stream: it is emitted once as a row with ``op = 'rejected'``, its ``seq`` and
        the ``reason`` ``publish`` gives (other columns null; an event's columns and interval on an
        event stream), and counted (``spark_stream.stream_stats(df)``). State (the rows per group) lives in
        Spark's state store and survives restarts from the checkpoint; for a new checkpoint the initial rows
        are the engine's when ``stream`` is called.  The checkpoint is the one given to ``writeStream``;
        ``checkpoint_location(name)`` is one inside the engine's directory, which holds the catalog a
        restarted stream is built from (the checkpoint holds its state).

        **Subscriptions are data** (``runtime/stream_control.py``): a ``CREATE`` / ``DROP SUBSCRIPTION``,
        ``subscribe_many`` or ``unsubscribe`` while the stream runs is published to the stream's directory before
        it returns, and every micro-batch that starts after that applies it before its rows -- in a range group
        the stream hosts, the FILTER group, a join group; so is a new range group (a new template's first
        subscription) when the stream started with a range operator whose output has the group's columns.  A
        group the stream cannot host (a new FILTER or join group, a range group whose notifications have other
        columns) gets a ``RuntimeWarning``: a stream started after it notifies it.  A restart of the stream
        from its checkpoint keeps every change.  Event queries are planned into the stream's operators when it
        starts: ``CREATE`` / ``DROP EVENT QUERY`` on its table is refused while it runs.

        **The engine follows the stream**: each micro-batch's valid rows go to a file of the stream's directory,
        and the engine takes them in (as a publish commits a batch: the table's rows, every group, the journal
        of a durable engine) before ``result``, EXPLAIN, ``stats``, ``publish``, ``table`` or a new group's base
        reads its state -- so ``result(id)`` agrees with what the stream applied.  It follows the streams it
        built itself, and one reopened on a durable directory first takes in what the streams of the engine before
        it there applied (``_adopt_streams``); an engine that restarts a checkpoint of a stream whose files are in
        another engine's directory knows the rows that stream applied only as far as its own directory does.  A
        ``publish`` to the table while a stream runs changes the engine's rows, not the stream's state.

        Range groups (MIN/MAX, top-k, DISTINCT, aggregates) are one stateful operator
        (``transformWithStateInPandas``, one state partition per group); a micro-batch is one batch
        for them, so in ``'reformulated'`` mode a top-k group sends Paint-Batch's messages for the
        whole micro-batch (002 §IV-A), each carrying the micro-batch's last ``seq``.  In a ``'unicast'`` stream a
        RANGE_MIN / RANGE_MAX / RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group past
        ``Engine.range_subscription_shards`` (decided here, when the stream starts) runs in two stages: its state
        partition holds the rows and no subscription and emits their messages (S-CN's; top-k, DISTINCT and
        aggregates: per update, as publish's sharded groups), and one task per subscription shard (x1 shards;
        top-k, DISTINCT, aggregates: by a hash of the id, each shard's results kept in the stream's directory)
        matches them, in the same streaming query (``runtime/stream.py``); the output is the same, row for row.  Such
        a RANGE_AGG or RANGE_DISTINCT group over ``Engine.range_zones`` rows or more (publish's rule, fixed here) keeps
        its rows in X zones, a state partition each, whose messages the shards merge (a DISTINCT message's Mar ends
        closed there with the zones' answers: ``operators/shared/range_zone_stream.py``); a RANGE_MIN / RANGE_MAX
        group too, each zone running DS-CN's round 1 and the shards round 2 and the merge
        (``operators/range_min/zone_stream.py``); a RANGE_TOPK group when ``Engine.range_zones`` names a count, each
        zone keeping halos of the objects beyond its cuts (``operators/topk/zone_stream.py``).  A
        BOX_MIN / BOX_MAX / BOX_TOPK group past the same setting (either mode) runs as one state partition per
        subscription shard, each every row and the subscriptions whose id hashes to it, as publish's box shards.

        Join groups (SELECT_JOIN, BAND_JOIN) that read the table run as *stream-static* joins
        (``runtime/join_stream.py``): the stream updates this table, the join partner is the other
        table's rows as of the ``stream`` call (as of a subscription change that needs more of its columns);
        the streamed rows live in the state store, partitioned by
        key. BAND_JOIN has no reformulated form: with ``mode='reformulated'`` its unicast rows come out.

        FILTER groups on the table (unicast rows in either mode) are stateless: each micro-batch is matched on every
        shard as a ``publish`` batch is, and their notifications (with the event's columns) are
        unioned with the range groups' (same ``seq``).

        Stream-stream join groups (STREAM_JOIN, STREAM_BAND_JOIN: two event streams, 003 ch. 3) on the table: each
        micro-batch is one step of the bounded join, as one ``publish`` of its rows
        (``runtime/stream_join_stream.py``); the state -- both streams' kept events -- starts as the engine's group
        has it now and lives in the state store.  Unicast rows in either mode.

        With ``Engine.max_delay`` set, a keyed table's stream buffers its valid rows and the refresh scheduler
        decides per micro-batch whether they apply now (003 ch. 2; ``scheduling/stream_gate.py``, decisions kept per
        micro-batch id, so a replay decides the same): ``refresh_costs[table]`` or the table's measured cost, fixed
        now; ``refresh()`` asks the stream to apply everything at its next micro-batch.
        """
        _check_streaming(streaming_df)
        schema = mode_schema(mode)  # run_stream adds the ``reason`` column
        mode = with_variant(mode, variant)
        with self._lock:
            state = self._table(table)
            groups = self._groups_on(state)
            event_classes = self._event_classes_on(state.definition) if state.definition.key is None else []
            if not groups and not event_classes:
                raise SparksubError(f"no subscriptions or event queries on table {table!r}: a stream hosts the "
                                    f"groups registered when it starts (and their later subscriptions)")
            joins = [e for e in groups if e.family.placement == ROW_PARTITIONS]
            filters = [e for e in groups if e.family.placement == SUBSCRIPTION_SHARDS]
            # stream-stream joins (003 ch. 3): one step of the bounded join per micro-batch (_stream_stream_joins)
            sjoins = [e for e in groups if _stream_stream(e)]
            ranges = [e for e in groups if e not in filters and e not in joins and e not in sjoins]
            # One row check for every path, the one publish makes (row_validation): malformed rows come out
            # once, from it, with their reason; the paths see the valid rows, numbered (seq) alike.
            name = _operator_name(e.physical for e in groups) + "_stream" if groups else "event_query_nfa_stream"
            # the stream's files (the bases it starts from, its counters, the subscription changes and the rows it
            # applied: runtime/stream_control.py): stream_files/<id>/ of the engine's directory
            stream_id, files = uuid.uuid4().hex, self.directory.area("stream_files")
            control = stream_control.StreamControl(files / stream_id, self.uid, stream_id)
            keyed = state.definition.key is not None
            # Engine.max_delay: the refresh scheduler decides per micro-batch what applies (issue 19 item 1)
            gate = self._stream_gate(state, control)
            checked = spark_stream.checked_updates(streaming_df, state.definition, name,
                                                   control if keyed else None, gate)   # (rows the engine follows)
            valid = spark_stream.valid_updates(checked)
            spark_stream.new_stream_id(files, owner=self.directory, stream_id=stream_id)   # (a good stream: its files)
            where = spark_stream.stream_directory(stream_id)
            live = stream_control.LiveStream(stream_id, state.definition.name.lower(), where, mode)
            stream_control.note_followed(where, live.table, live.absorbed)   # (a reopened engine follows it on)
            live.refresh_gate = gate   # (refresh() asks it to apply everything; pending() reads it)
            outs = []
            if event_classes:
                outs.append(subscription_group(self._stream_events(state, event_classes, valid, where, stream_id,
                                                                   control),
                                               self._describe_events(event_classes, "stream")))
                live.events = True
            # (FILTER and BAND_JOIN have no reformulated form: in that mode they stream their unicast rows,
            # issue 15 item 6)
            streamed_joins = joins
            if streamed_joins:
                # a SELECT_JOIN group publish() runs sharded runs in two stages (runtime/join_stream.py)
                live.join_shards = {e.group_id: n for e in streamed_joins if (n := self._join_shard_count(e))}
                joined = self._stream_joins(state, streamed_joins, valid, mode, where, stream_id, control,
                                            live.join_shards)
                if ranges:  # a delete of an unknown key: the range groups (which hold every row) say it once
                    joined = joined.where(joined.op != "rejected")
                outs.append(subscription_group(joined,
                                               self._describe([(e.physical, e) for e in streamed_joins],
                                                              f"stream {mode}")))
                live.joins = {e.group_id: e.family.side_of(e.physical, state.definition) for e in streamed_joins}
            if filters:
                # a keyed table's rows live in the range or join groups' state; without them, FILTER keeps the keys
                check_keys = keyed and not ranges and not joins
                outs.append(subscription_group(self._stream_filters(state, filters, valid, check_keys, where,
                                                                    control),
                                               self._describe([(e.physical, e) for e in filters], "stream unicast")))
                live.filter_group, live.filter_shards = filters[0].group_id, len(filters[0].shards)
            if ranges:
                specs, staged = {}, {}
                for n, e in enumerate(ranges):
                    shards = self._range_stream_shard_count(e, mode)
                    partitions = int(self.spark.conf.get("spark.sql.shuffle.partitions"))
                    if shards and e.family.name == "range_min":   # a large group in two stages (runtime/stream.py;
                        #  its rows past Engine.range_zones in X zones, DS-CN's round 1 each, round 2 in the shards)
                        part, staged[e.group_id], live.range_shards[e.group_id] = \
                            self._range_stream_stages(state, e, shards, where, n, partitions)
                        specs.update(_zoned_specs(e.group_id, part, stream_id))
                        continue
                    if shards:   # top-k, DISTINCT, aggregates: their shards by a hash of the id (DISTINCT's and
                        #          aggregates' rows past Engine.range_zones in X zones, a state partition each)
                        part, staged[e.group_id], live.range_class_shards[e.group_id] = \
                            self._range_class_stream_stages(state, e, shards, where, n, partitions)
                        specs.update(_zoned_specs(e.group_id, part, stream_id))
                        continue
                    boxes = self._box_shard_count(e)
                    if boxes:   # a large box group: a state partition per subscription shard, every row in each
                        specs.update(self._box_stream_shards(state, e, boxes, where, n, live, partitions))
                        continue
                    if e.replica is not None and e.replica.log_length:
                        e.base_stale = True  # the stream seeds its state from the base: make it current
                    x, y, y_is_text, x2 = e.family.stream_columns(e.physical, state.definition)
                    # the stream's own link to the base file: the engine's compaction may replace the group's
                    base = spark_replicas.pin(self._replica(state, e), where)
                    specs[e.group_id] = (x, y, spark_replicas.StoredValue(base.base_path), y_is_text, x2)
                wide = self._output_schema(with_reason(schema), mode, ranges, state.definition)
                schema = wide.remove(wide.get_field_index("reason"))  # run_stream appends it
                ranges_out = spark_stream.run_stream(self.spark, valid, state.definition, specs, mode, schema,
                                                     self.uid, _operator_name(e.physical for e in ranges) + "_stream",
                                                     stream_id, control, staged)
                outs.append(subscription_group(ranges_out, self._describe([(e.physical, e) for e in ranges],
                                                                          f"stream {mode}")))
                live.ranges, live.range_schema = {e.group_id for e in ranges}, wide
            if sjoins:
                outs.append(subscription_group(self._stream_stream_joins(state, sjoins, valid, mode, where, stream_id,
                                                                         control),
                                               self._describe([(e.physical, e) for e in sjoins], f"stream {mode}")))
                live.ranges.update(e.group_id for e in sjoins)   # (their subscription changes: _publish_to_streams)
            if not outs:
                raise SparksubError(f"stream(): the FILTER / BAND_JOIN subscriptions on {table!r} have no "
                                    f"{mode!r} form; use mode='unicast'")
            out = outs[0]
            for more in outs[1:] + [spark_stream.rejected_updates(checked, state.definition, stream_id, name)]:
                out = out.unionByName(more, allowMissingColumns=True)
            out.sparksub_stream_id = stream_id  # for spark_stream.stream_stats(out)
            self._live_streams[stream_id] = live   # from now on, changes of its groups are published to it
            return out

    def _range_stream_shard_count(self, entry, mode: str) -> int:
        """How many subscription shards a RANGE_MIN / RANGE_MAX / RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group runs
        with in a ``mode`` stream (0: whole): ``Engine.range_subscription_shards``, in a unicast stream (a
        reformulated one has no subscription side)."""
        klass = getattr(entry.physical, "klass", None)
        if mode != "unicast" or (entry.family.name != "range_min" and klass not in RANGE_SHARD_CLASSES):
            return 0
        return range_shard_count(getattr(self, "range_subscription_shards", None), len(entry.registry),
                                 self._parallelism())

    def _range_stream_stages(self, state: TableState, entry, shards: int, where, n: int, partitions: int = 0) -> tuple:
        """A RANGE_MIN / RANGE_MAX group the stream runs in two stages (``runtime/stream.py``, "a large group in
        two stages"): ``(its run_stream entry, (cuts, its shards' stored bases), its stream_control.RangeShards)``.
        Stage 1's base holds the table's rows and no subscription; the subscriptions go to x1 shards at
        equal-count cuts, which the stream keeps while it runs (a subscription change rewrites only the shards it
        touches).  Over ``Engine.range_zones`` rows or more (as publish's zones) stage 1 is X zones (the entry's sixth
        element ``{zone key: StreamZone}``, as :meth:`_range_class_stream_stages`'), each running DS-CN's round 1
        over its part of a micro-batch, the shards round 2 (``operators/range_min/zone_stream.py``)."""
        snap = self._snapshot(state, entry)
        rows_only = dataclasses.replace(snap, sub_ids=np.empty(0, dtype=object), sub_x1=np.empty(0),
                                        sub_x2=np.empty(0))
        base = spark_replicas.write_value(f"{where}/range-{n}.pickle", rows_only)
        zones = self._stream_zones(entry, snap.xs, RangeMinGroup, partitions)
        del snap, rows_only
        _, ids, x1, x2 = entry.family.live(entry.registry)
        cuts, bases = shard_bases(ids, x1, x2, shards)
        stored = [spark_replicas.write_value(f"{where}/range-{n}-s{j}.pickle", b) for j, b in enumerate(bases)]
        record = stream_control.RangeShards(tuple(cuts.tolist()), [shard_digest(b) for b in bases],
                                            [v.path for v in stored], [0] * len(bases))
        x, y, y_is_text, x2 = entry.family.stream_columns(entry.physical, state.definition)
        part = (x, y, base, y_is_text, x2, zones) if zones else (x, y, base, y_is_text, x2)
        return part, (record.cuts, stored), record

    def _range_class_stream_stages(self, state: TableState, entry, shards: int, where, n: int,
                                   partitions: int = 0) -> tuple:
        """A RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group the stream runs in two stages (``runtime/stream.py``, "a
        large top-k, DISTINCT or aggregate group in two stages"): ``(its run_stream entry, (None, its shards' stored
        bases, the k values stage 1 paints for), its stream_control.RangeClassShards)``.  A RANGE_AGG / RANGE_DISTINCT
        group over ``Engine.range_zones`` rows or more (``range_zone_count``, as publish's) keeps stage 1's rows in X
        zones (its entry's sixth element ``{zone key: StreamZone}``): one key per zone (``range_zone_stream.zone_keys``,
        each in a state partition of its own among the stream's ``partitions`` where it can), at equal-count cuts of
        the table's X now, its shards seeded from the zones' partial states (``stream.seed_zoned_stream_shards``;
        DISTINCT's subscribers start from nothing).  Stage
        1's base holds the table's rows and no subscription (``rows_extra``: top-k paints per update, Paint-Dense,
        002 §III-A); the subscriptions go to shards by a CRC32 of their id, as publish's (``shared/range_shards.py``),
        each base its subscriptions with their results as of now, seeded in a Spark task from the rows' base, as
        publish's shards are seeded where the rows are (``runtime/range_shards.seed_stream_shards``)."""
        family = entry.family
        snap = self._snapshot(state, entry)
        ks = sorted(set(np.asarray(snap.sub_k).tolist())) if entry.physical.klass == "RANGE_TOPK" else []
        empty = np.empty(0)
        rows_only = dataclasses.replace(snap, sub_ids=np.empty(0, dtype=object), sub_x1=empty, sub_x2=empty,
                                        sub_k=np.empty(0, dtype=np.int64),
                                        extra={**snap.extra, **rows_extra(entry.physical.klass, ks)})
        base = spark_replicas.write_value(f"{where}/range-{n}.pickle", rows_only)
        ids, x1, x2, k = snap.sub_ids, snap.sub_x1, snap.sub_x2, snap.sub_k
        key_type = family_key_type(state.definition)
        zones = self._stream_zones(entry, snap.xs, type(snap).group_class, partitions, snap.option)
        del snap, rows_only
        paths = [f"{where}/range-{n}-q{j}.pickle" for j in range(shards)]
        if zones:
            stored = spark_stream.seed_zoned_stream_shards(self.spark, base, list(zones.values()), entry.group_id,
                                                           key_type, ids, x1, x2, k, paths)
        else:
            stored = spark_range_shards.seed_stream_shards(self.spark, base, entry.group_id, key_type, ids, x1, x2,
                                                           k, paths)
        _, record = members_after(None, ids, x1, x2, k, 0, shards)
        x, y, y_is_text, x2_column = family.stream_columns(entry.physical, state.definition)
        part = (x, y, base, y_is_text, x2_column, zones) if zones else (x, y, base, y_is_text, x2_column)
        return part, (None, stored, ks), stream_control.RangeClassShards(shards, record)

    def _stream_zones(self, entry, xs, group_class: type, partitions: int, option=None) -> dict:
        """``{state partition key: StreamZone}`` of a two-stage group's X zones in a stream (``Engine.range_zones``
        over the table's rows now, as publish's ``range_zone_count``; the classes of ``ZONED_STREAM_CLASSES``),
        cut at equal-count points of ``xs`` (fewer zones when values repeat; ``group_class`` merges their partial
        states, ranked by ``option``: top-k's descending); {} for one.  Top-k zones only when asked for (the
        setting a count), as publish's: each zone applies every update and keeps its halos, and on one executor the
        zones measured no gain (docs/parallelism.md, "RANGE_TOPK's rows in X zones in a stream")."""
        if entry.physical.klass not in ZONED_STREAM_CLASSES:
            return {}
        setting = getattr(self, "range_zones", None)
        if entry.physical.klass in HALO_CLASSES and setting is None:
            return {}
        wanted = range_zone_count(setting, len(xs), self._parallelism())
        cuts = zone_cuts(xs, wanted) if wanted else ()
        if not cuts:
            return {}
        keys = zone_keys(entry.group_id, len(cuts) + 1, partitions)
        return {key: StreamZone(entry.group_id, i, len(cuts) + 1, cuts, group_class, option)
                for i, key in enumerate(keys)}

    def _box_stream_shards(self, state: TableState, entry, shards: int, where, n: int, live, partitions: int) -> dict:
        """A BOX_MIN / BOX_MAX / BOX_TOPK group the stream runs in ``shards`` subscription shards
        (``runtime/stream.py``, "a large box group in subscription shards"): ``{shard key: its run_stream entry}``,
        each shard's base the group's rows and the subscriptions whose id hashes to it (publish's split,
        ``box.shards.shard_snapshots``), each key in a state partition of its own among the stream's ``partitions``
        where it can (``box.stream_shards.shard_keys``); its ``BoxStreamShards`` recorded in ``live`` (a change then
        reaches only the shards it touches)."""
        parts, record = stream_shard_bases(self._box_snapshot(entry), shards, partitions)
        live.box_shards[entry.group_id] = record
        x, y, y_is_text, x2 = entry.family.stream_columns(entry.physical, state.definition)
        return {record.keys[j]: (x, y, spark_replicas.write_value(f"{where}/box-{n}-b{j}.pickle", part),
                                               y_is_text, x2, j) for j, part in parts.items()}

    def _stream_events(self, state: TableState, classes: list, streaming_df, where=None, stream_id=None,
                       control=None):
        """Event queries over a stream (``runtime/event_stream.py``): the streaming DataFrame needs
        integer ``t0``/``t1`` columns (no global arrival order exists across micro-batches); ``_seq``, if
        present, orders events of equal ``t1``.  Each partition's executor lives in the state store
        (restart-safe); a new checkpoint starts from the engine's executors as they are now.  The
        stream's events do not flow back into the engine (``matches`` does not see them)."""
        from sparksub.runtime import event_stream as ses
        tdef = state.definition
        members = [q for c in classes for q in c.cls.queries]
        spec = ses.event_stream_spec(
            tdef.name, {c: arrow_type(t) for c, t in tdef.columns if c not in ("t0", "t1")},
            {q: self._event_queries[q].query for q in members},
            seconds_per_tick=self.event_seconds_per_tick, executor=self.event_executor,
            plan=self._event_plan, layout=self._event_layout(tdef, members),
            spellings={c.cls.id: self._event_spellings(c.cls, tdef) for c in classes},
            initial={rid: ex.snapshot() for c in classes for rid, ex in self._event_executors(c).items()},
            store=where, stats=spark_stream._STATS.get(stream_id), control=control)
        return ses.run_event_stream(streaming_df, spec, order=spark_stream.SEQ_COLUMN)

    def _stream_filters(self, state: TableState, entries: list, checked_df, check_keys: bool = False, where=None,
                        control=None):
        """FILTER groups on a stream of valid rows (``spark_stream.checked_updates``): stateless, so each
        micro-batch is matched like a ``publish`` batch (events to every shard; a delete matches nothing).
        ``check_keys``: no other path keeps the keyed table's rows, so the keys are kept here
        (``spark_stream.known_key_updates``) and a delete of an unknown key comes out ``rejected``.  ``control``:
        the stream's directory, whose subscription changes the shards' tasks take (``stream_control.LiveReplicas``)."""
        tdef = state.definition
        schema = self._output_schema(publish_schema("unicast"), "unicast", entries, tdef)
        if check_keys:
            keys = spark_replicas.write_value(f"{where}/keys.pickle", set(state.rows)) if where is not None \
                else spark_stream._Deferred(pickle.dumps(set(state.rows), protocol=pickle.HIGHEST_PROTOCOL))
            checked_df = spark_stream.known_key_updates(checked_df, tdef, keys,
                                                        _operator_name(e.physical for e in entries) + "_stream")
        events = spark_frames.filter_stream_events(checked_df, tdef.column_names, with_reason=check_keys)
        replicas, owners = {}, {}
        for e in entries:
            for rid, r in self._replicas(state, e).items():
                replicas[rid] = r if where is None else spark_replicas.pin(r, where)   # (files the stream keeps)
                owners[rid] = e.group_id
        if control is not None:
            replicas = stream_control.LiveReplicas(replicas, control)
        out = spark_groups.stream_groups(events, replicas, "unicast", schema,
                                         _operator_name(e.physical for e in entries), owners)
        return _rename_event_columns(out, tdef)

    def _stream_joins(self, state: TableState, entries: list, streaming_df, mode: str, where=None,
                      stream_id: str | None = None, control=None, shards=None):
        """Join groups on a stream of updates to one of their tables: stream-static joins (the partner is
        the other table's rows now), state per partition of the streamed rows (spark_join_stream).  The
        bases and the initial rows go to files in ``where`` (the stream's directory)."""
        from sparksub.runtime.join_stream import (
            JoinStreamGroup,
            run_join_stream,
            sharded_join_group,
        )
        from sparksub.runtime.stream import _Deferred

        def stored(name: str, value):
            return (spark_replicas.write_value(f"{where}/{name}", value) if where is not None
                    else _Deferred(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))
        tdef = state.definition
        parts = self._join_partition_count()
        initial = stored("join-initial.pickle", dict(state.rows.items()))
        specs = {}
        for n, e in enumerate(entries):
            side = e.family.side_of(e.physical, tdef)
            if e.group_id in (shards or {}):   # ``shards``: group -> its subscription shards (two stages)
                _, one = e.family.partition_snapshots(e.registry, e.physical, e.group_id, self._tables, 1,
                                                      self.join_router_mode, subscriptions=False)
                bases = e.family.shard_bases(e.registry, e.physical, shards[e.group_id]) if mode == "unicast" else {}
                specs[e.group_id] = sharded_join_group(e.group_id, side, parts, one.popitem()[1], initial, bases, mode,
                                                       lambda suffix, v, n=n: stored(f"join-{n}{suffix}.pickle", v))
                continue
            snap = e.family.stream_snapshot(e.registry, e.physical, e.group_id, self._tables, side,
                                            self.join_router_mode)
            specs[e.group_id] = JoinStreamGroup(e.group_id, side, parts, stored(f"join-{n}.pickle", snap), initial)
        # (a band join answers with its unicast rows in either mode, issue 15 item 6)
        schema = self._output_schema(publish_schema(mode), mode, entries, tdef)
        return _rename_event_columns(run_join_stream(self.spark, streaming_df, tdef, specs, mode, schema,
                               [arrow_type(t) for _, t in tdef.columns], self.uid,
                               _operator_name(e.physical for e in entries) + "_stream", stream_id, control), tdef)

    def _stream_stream_joins(self, state: TableState, entries: list, valid_df, mode: str, where=None,
                             stream_id: str | None = None, control=None):
        """Stream-stream join groups (STREAM_JOIN, STREAM_BAND_JOIN) on a stream of one of their event streams
        (``runtime/stream_join_stream.py``): each micro-batch is one step of the bounded join (003 §3.2), as one
        ``publish`` of its rows; the group's state -- the kept events of both streams, the policy's statistics --
        starts as the engine's group has it now (the events published before) and lives in the state store."""
        from sparksub.runtime.stream_join_stream import StreamJoinStreamGroup, run_stream_join_stream
        tdef = state.definition
        specs = {}
        for n, e in enumerate(entries):
            # the kept events exist only in the group's replica: the stream's base carries them (carry_state)
            snap = e.family.carry_state(self._snapshot(state, e), self._materialized(state, e))
            base = (spark_replicas.write_value(f"{where}/stream-join-{n}.pickle", snap) if where is not None
                    else spark_stream._Deferred(pickle.dumps(snap, protocol=pickle.HIGHEST_PROTOCOL)))
            specs[e.group_id] = StreamJoinStreamGroup(e.group_id, e.family.side_of(e.physical, tdef), base)
        schema = self._output_schema(publish_schema(mode), mode, entries, tdef)   # (publish's columns end with reason)
        out = run_stream_join_stream(valid_df, tdef, specs, mode, schema, self.uid,
                                     _operator_name(e.physical for e in entries) + "_stream", stream_id, control)
        return _rename_event_columns(out, tdef)

    # ---- subscriptions as data: the streams this engine built follow its changes (runtime/stream_control.py) ----
    def _publish_to_streams(self, entry: GroupEntry) -> None:
        """Publish ``entry``'s subscriptions, as they are now, to every stream over one of its tables that hosts the
        group (a new change version); a range group a stream's range operator does not host yet joins it when
        its output has the group's columns.  Any other new group needs a new stream: said once, as a warning."""
        tables = entry.family.tables(entry.physical)
        gid, placement = entry.group_id, entry.family.placement
        for live in self._live_streams.values():
            if live.table not in tables:
                continue
            state = self._tables[live.table]
            if placement == ROW_PARTITIONS and gid in live.join_shards:   # two stages (runtime/join_stream.py)
                bases = entry.family.shard_bases(entry.registry, entry.physical, live.join_shards[gid]) \
                    if live.mode == "unicast" else {}
                stream_control.publish_join_shards(live.directory, gid, live.next_version(),
                                                   entry.family.message_payload(entry.registry, entry.physical), bases)
            elif placement == ROW_PARTITIONS and gid in live.joins:
                snap = entry.family.stream_snapshot(entry.registry, entry.physical, gid, self._tables,
                                                    live.joins[gid], self.join_router_mode)
                stream_control.publish_subscriptions(live.directory, gid, live.next_version(), snap)
            elif placement == SUBSCRIPTION_SHARDS and gid == live.filter_group:
                snap, k = self._snapshot(state, entry), live.filter_shards   # cut as the stream's shards are
                stream_control.publish_shards(live.directory, gid, live.next_version(),
                                              [snap.shard(i, k) if k > 1 else snap for i in range(k)])
            elif placement == ONE and gid in live.range_shards:   # two stages: the shards alone (runtime/stream.py)
                record = live.range_shards[gid]
                _, ids, x1, x2 = entry.family.live(entry.registry)
                bases = shard_bases_at(ids, x1, x2, record.cuts)
                stream_control.publish_range_shards(live.directory, gid, live.next_version(), record, bases,
                                                    [shard_digest(b) for b in bases])
            elif placement == ONE and gid in live.range_class_shards:   # two stages: the set with births
                record = live.range_class_shards[gid]
                slots, ids, x1, x2 = entry.family.live(entry.registry)
                version = live.next_version()
                members, record.members = members_after(record.members, ids, x1, x2,
                                                        entry.family.limits(entry.registry, slots), version,
                                                        record.shards)
                stream_control.publish_subscriptions(live.directory, gid, version, members)
            elif placement == ONE and gid in live.box_shards:   # in shards: only those the change touches
                # (no rows: the stream has them)
                snap = entry.family.snapshot(entry.registry, entry.physical, gid,
                                             {live.table: TableState(state.definition)})
                record = live.box_shards[gid]
                changed = changed_shards(record, snap)
                version = live.next_version() if changed else 0
                for j, part in changed.items():
                    stream_control.publish_subscriptions(live.directory, record.keys[j], version, part)
            elif placement == ONE and gid in live.ranges:
                # (no rows: the stream has them)
                snap = entry.family.snapshot(entry.registry, entry.physical, gid,
                                             {live.table: TableState(state.definition)})
                stream_control.publish_subscriptions(live.directory, gid, live.next_version(), snap)
            elif placement == ONE and live.range_schema is not None and not _stream_stream(entry) \
                    and self._fits_stream(live, entry, state):
                self._add_stream_group(live, entry, state)
            elif gid not in live.warned:
                live.warned.add(gid)
                warnings.warn(f"stream {live.stream_id} over {state.definition.name!r} started without the "
                              f"{entry.physical.klass} group {gid!r} (or without an operator its notifications "
                              f"fit): its subscriptions are notified by a stream started after them "
                              f"(engine.stream(...) again; the checkpoint keeps the others' state)",
                              RuntimeWarning, stacklevel=4)

    def _fits_stream(self, live, entry: GroupEntry, state: TableState) -> bool:
        """Whether the range operator of stream ``live`` can host ``entry``: its output has the group's columns."""
        wanted = self._output_schema(with_reason(mode_schema(live.mode)), live.mode, [entry], state.definition)
        have = live.range_schema
        return all(have.get_field_index(f.name) >= 0 and have.field(f.name).type == f.type for f in wanted)

    def _add_stream_group(self, live, entry: GroupEntry, state: TableState) -> None:
        """A range group the stream hosts from its next micro-batch on: its base holds every row the stream has
        applied so far (followed first) and the micro-batch it is as of, so the stream's task replays the rows of
        any micro-batch between (``stream.GroupSpec.as_of``)."""
        self._follow_streams(state)
        if entry.replica is not None and entry.replica.log_length:
            entry.base_stale = True  # the task seeds from the base alone: make it current
        base = spark_replicas.pin(self._replica(state, entry), live.directory)
        x, y, y_is_text, x2 = entry.family.stream_columns(entry.physical, state.definition)
        stream_control.publish_group(live.directory, spark_stream.GroupSpec(
            entry.group_id, x, y, spark_replicas.StoredValue(base.base_path), y_is_text, x2,
            version=live.version, as_of=live.absorbed))
        live.ranges.add(entry.group_id)

    def _follow_streams(self, state: TableState) -> None:
        """Take in the rows the streams over ``state``'s table applied since last time (``applied/<micro-batch>``
        files, ``stream_control``), as a publish commits a batch: the table's rows, every group's log (a join's
        partitions routed), journaled (a durable engine keeps them).  A delete of a key the table does not hold
        is dropped, as the stream rejected it.  So ``result()``, EXPLAIN, ``stats()``, a new base and ``publish``
        see the streams' rows.  The streams an engine before this one built on the directory (``_adopt_streams``)
        come first: their micro-batches came before any this engine's streams ran."""
        if state.definition.key is None or self._following:
            return
        name = state.definition.name.lower()
        streams = [(True, s) for s in self._adopted_streams.values() if s.table == name]
        streams += [(False, s) for s in self._live_streams.values() if s.table == name]
        if not streams:
            return
        self._following = True
        try:
            for adopted, live in streams:
                for batch_id, rows in stream_control.applied_batches(live.directory, live.absorbed):
                    if rows.num_rows:
                        self._absorb(state, rows)
                    live.absorbed = batch_id
                    stream_control.note_followed(live.directory, live.table, batch_id)
                stream_control.forget_applied(live.directory, live.absorbed)
                if adopted:   # (its query ran under an engine that is gone: nothing more comes)
                    del self._adopted_streams[live.stream_id]
        finally:
            self._following = False

    def _adopt_streams(self) -> None:
        """The streams an engine before this one built on its directory whose applied rows it did not take in
        (``stream_control.followed``: the table and the last micro-batch it took in) -- it was closed, or killed,
        while they ran or before it followed them.  They are taken in before anything reads their table
        (``_follow_streams``), so ``result()`` agrees with what they applied, and a stream restarted from its
        checkpoint starts its new shards and groups from the rows its state store holds."""
        root = self.directory.area("stream_files")
        found = []
        for where in (p for p in root.iterdir() if p.is_dir()):
            noted = stream_control.followed(where)
            since = None if noted is None or noted[0] not in self._tables else \
                stream_control.unfollowed_since(where, noted[1])
            if since is not None:
                found.append((since, where, noted))
        for _, where, (table, absorbed) in sorted(found):   # (the oldest rows first: streams of one table in turn)
            adopted = stream_control.LiveStream(where.name, table, str(where))
            adopted.absorbed = absorbed
            self._adopted_streams[where.name] = adopted

    def _absorb(self, state: TableState, rows: pa.Table) -> None:
        """One micro-batch's applied rows (``checked_updates``' columns) into the engine's state
        (``_follow_streams``)."""
        tdef = state.definition
        ops = pc.if_else(pc.equal(rows.column(spark_stream.OP_COLUMN), DELETE), "delete", "upsert")
        batch, reasons, _ = self._validated(state, rows.select(tdef.column_names).append_column("_op", ops))
        ok = np.fromiter((r is None for r in reasons), dtype=bool, count=len(reasons))
        batch = batch.filter(pa.array(ok))
        seqs = rows.column(spark_stream.SEQ_COLUMN).to_numpy()[ok]
        if not batch.num_rows:
            return
        logged = {}   # group -> its batch, computed against the rows before this one (as publish does)
        for e in self._groups_on(state):
            if e.family.stateless or e.base_stale:
                continue   # (a stale base is rebuilt from the rows)
            if e.family.placement == ROW_PARTITIONS and e.shards is not None:
                logged[e.group_id] = (e, self._join_batch(state, e, batch, seqs))
            elif e.family.placement != ROW_PARTITIONS and e.replica is not None:
                logged[e.group_id] = (e, e.family.group_batch(e.physical, tdef, batch, seqs))
        self._journal.load(tdef, batch)
        self._apply_rows(state, batch)
        for e, gb in logged.values():
            if e.family.placement == ROW_PARTITIONS:
                for rid, replica in list(e.shards.items()):
                    mine = gb.filter(pc.equal(gb.column("group_id"), rid))
                    if mine.num_rows:
                        e.shards[rid] = replica.append(mine)
            else:
                e.replica = e.replica.append(gb)
            e.log_rows += batch.num_rows
            e.version += 1
        self._rows_changed(tdef.name)
