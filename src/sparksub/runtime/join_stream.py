"""Thin Spark wrapper: join groups (SELECT_JOIN, BAND_JOIN) on Structured Streaming, as *stream-static* joins.

``Engine.stream(table, df)`` over a table that join subscriptions read: the stream updates ``table``; the join
partner is the other table's rows as of the ``stream`` call (Spark's stream-static join: the static side
does not change during the stream; publish to it and restart the stream to see its changes).  The plan::

    TransformWithStateInPySpark select_join_group_stream(...)    one state partition per (group, partition)
    +- Exchange hashpartitioning(group_id), REQUIRED_BY_STATEFUL_OPERATOR
       +- MapInArrow select_join_group_stream_route(...)         each row to its partition of every group
          +- <the checked updates: spark_stream.typed_updates>

**Partitions.**  The streamed table's rows are split by a CRC32 of their key (``join_groups.key_text``), so
an update and the row it replaces always meet in one partition; every partition holds the whole static side
and every subscription, so each partition finds all pairs of its own rows (issue 5 item 8; with the
static side replicated, neither the join value nor the band decides the partition).

**State** (Spark's state store, per partition): MapState ``rows``: key -> the row (pickled tuple of the
table's columns); ValueState ``meta``: ``(applied, rebuilds)``.  The join group operator (router or BJ-SSI
over the partition's rows, the static side and the subscriptions) is a cache in the Python worker, keyed by
(engine, stream, partition) and usable by the same streaming query run while its ``applied`` equals the
state's; otherwise -- a first task in this worker, a restart, a replayed micro-batch -- it is rebuilt from
the MapState plus the base (static side, subscriptions), a file the stream keeps under the engine's
directory (``stream_files/<stream id>/``, ``runtime/replicas.py``).  The first micro-batch seeds the MapState
with the partition's share of the engine's rows of the table (a file too).

**Subscription changes** (``stream_control``): a change of a group's subscriptions while the stream runs is a
new snapshot of the group's subscriptions in the stream's directory; each micro-batch applies the newest one
its plan pins before its rows: a cached partition takes the difference in place, as a :class:`QueryChange`
(003 §4.2.3: the partitions follow query inserts and deletes while data flows, as publish's do), a cold one is
rebuilt from the MapState, the base's static side and the new subscriptions (a change that selects other
columns of the partner's rows brings the partner's rows as of the change).  ValueState ``subs`` keeps which
change the last micro-batch applied.

**A large SELECT_JOIN group in two stages** (issue 16 item 4; ``Engine.join_subscription_shards``, the
threshold ``publish`` uses, docs/parallelism.md "SELECT_JOIN shards"): copying every subscription into every
partition is what sharding avoids, so such a group (:func:`sharded_join_group`) runs as publish's does::

    MapInArrow <name>_shards(...)                                stage 2: one task per subscription shard
    +- Exchange hashpartitioning(j_slot, Q)
       +- MapInArrow <name>_to_shards(...)                        every message to every shard of its group
          +- TransformWithStateInPySpark <name>_row_partitions(...)   stage 1: rows, static side, NO subscription
             +- Exchange hashpartitioning(group_id) ... as above

*Stage 1*: the stateful partitions are the ones above (streamed rows by key in the state store, the whole static
side in the base), built from a group without subscriptions (``JoinFamily.partition_snapshots(subscriptions=
False)``: every column of both tables), and each micro-batch's updates go through ``apply(batch,
"reformulated")``: the messages of 000 §4, one per result tuple of δ ⋈ partner (an upsert the delete of its old
row and the insert of the new, one seq) -- whatever the subscriptions, so a subscription change never touches
these partitions.  In a ``unicast`` stream the messages carry every column of both tables (``table.column``):
whatever a subscription selects, now or after a change, travels with them (publish instead logs a
``MessageColumns`` entry to its row partitions; a stream's state-store partitions have no log the driver can
append to).  In a ``reformulated`` stream the messages *are* the output (no stage 2): they carry the columns the
subscriptions select, as the whole group's do, following a change through a ``MessageColumns`` entry.

*Stage 2* (unicast; the plumbing in ``runtime/shard_stage.py``, shared with the RANGE_MIN / RANGE_MAX stream): the
subscriptions split by a CRC32 of their id into Q shards (``joins/shards.py``), each shard one Spark partition of an
``Exchange`` inside the same streaming query: a ``mapInArrow`` sends each message
to every shard of its group (a column ``j_slot``), ``repartition(Q', j_slot)`` (Q' = the shards of every such
group) brings each shard's copy to its task, and a ``mapInArrow`` matches them with ``JoinShard.unicast`` (the
R-tree of the shard's rectangles, the same netting per (seq, subscription, result tuple, output row) as the whole
group's).  ``j_slot`` takes, for shard slot i, a value Spark's hash partitioning sends to partition i
(:func:`partition_keys`), so no two shards share a task.  Why not the stateful operator's own output: a
``transformWithState`` partition is keyed by the streamed rows' key and its Spark partition fixed by the
checkpoint, while a shard must see *every* row partition's messages; a second stateful operator keyed by shard
would keep no state worth its checkpoint (a shard's truth is its base file and the change versions).  A shard
is stateless per micro-batch: its base (``JoinShardBase``: ids, rectangles, projections) is a file of the
stream's directory, the shard built from it cached in the Python worker per (stream, group, shard, change
version) and rebuilt from the file when cold (``stream_stats``: ``shard_builds``, ``shard_cache_hits``).  A
subscription change writes the shards' new bases as the stream's next change version (``stream_control.
publish_join_shards``); the micro-batches pinned to it build their shards from it, and stage 1 never notices.
Rejected rows (the operator's deletes of unknown keys) pass stage 2 once, in the first shard's task.  The union
of the shards' rows is the whole group's unicast output, row for row.

Order, ``seq`` and malformed rows as ``spark_stream``: rows apply in ``_seq`` order (else input order, ``seq
= (micro-batch id << 32) + rank``, both from ``spark_stream.checked_updates``, which also sets malformed rows
aside); a delete of an unknown key is rejected by the operator (emitted once, by the first group).  An upsert of a known key is the delete of its old row and the insert of
the new one, netted per result tuple (``join_groups``).
"""
from __future__ import annotations

import dataclasses
import functools
import pickle
import re
import uuid
import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.runtime import shard_stage, stateful, stream_control
from sparksub.runtime import stream as spark_stream
from sparksub.operators.shared.schemas import EVENT_PREFIX
from sparksub.operators.joins.group import (JOIN_MESSAGE_SCHEMA, MessageColumns, QueryChange, key_text,
                                            message_column, side_columns)
from sparksub.operators.joins.shards import JoinShard
from sparksub.operators.shared.row_validation import REJECTED
from sparksub.operators.shared.schemas import DELETE, UPSERT
from sparksub.runtime.stream import _loaded

__all__ = ["JoinStreamGroup", "run_join_stream", "key_partition", "partition_keys", "sharded_join_group"]

#: join partitions cached per Python worker
CACHE_ENTRIES = 16
#: (engine uid, stream id, partition id) -> (query id, run id, applied, (group, change version)): stateful.StreamCache
_CACHE: dict = {}
_WORKER = stateful.StreamCache(CACHE_ENTRIES, lambda: _CACHE)
#: subscription shards (stage 2) cached per Python worker: Spark ties no shard to a worker, so a worker may meet
#: each shard of a group in turn
SHARD_CACHE_ENTRIES = 8
#: (engine uid, stream id, group id, shard, change version) -> JoinShard: stateful.StreamCache.shared
_SHARDS: dict = {}
_SHARD_WORKER = stateful.StreamCache(SHARD_CACHE_ENTRIES, lambda: _SHARDS)
#: the column that sends a message's copy to its shard's Spark partition (stage 2)
SLOT_COLUMN = shard_stage.SLOT_COLUMN
partition_keys = shard_stage.partition_keys


def key_partition(key, partitions: int) -> int:
    """The partition of a streamed row: CRC32 of its key as text (the same in every process)."""
    return zlib.crc32(key_text(key).encode("utf-8")) % partitions if partitions > 1 else 0


@dataclass
class JoinStreamGroup:
    """One join group as the stream needs it."""
    group_id: str
    side: int          # the side of the join the streamed table is (join_groups.L / R)
    partitions: int
    base: object       # JoinGroupSnapshot: the static side's rows, the subscriptions, no streamed rows
    initial: object    # {key: row tuple} of the streamed table when the stream starts
    # (each a replicas.StoredValue -- a file under the engine's directory -- or a stream._Deferred)
    # a group run in two stages (:func:`sharded_join_group`; its base then holds no subscription): its subscription
    # shards' bases (stage 2; none in a reformulated stream), each stored as ``base``; None: the group runs whole
    shards: tuple | None = None
    message_fields: tuple = ()   # the columns its stage-1 messages carry (unicast: every column of both tables)

    def snapshot(self):
        return _loaded(self.base.get())

    def initial_rows(self) -> dict:
        return _loaded(self.initial.get())


def sharded_join_group(group_id: str, side: int, partitions: int, row_partition, initial, shard_bases: dict,
                       mode: str, store) -> JoinStreamGroup:
    """A SELECT_JOIN group the stream runs in two stages (module docstring).  ``row_partition``: the group as one
    row partition without subscriptions (``JoinFamily.partition_snapshots(subscriptions=False)``), stored without
    the streamed side's rows (the state store holds them); ``shard_bases``: {shard: ``JoinShardBase``};
    ``store(suffix, value)``: the stored value (a file of the stream's directory)."""
    rows = list(row_partition.rows)
    rows[side] = {c: [] for c in rows[side]}
    # unicast: the messages carry every column of both tables to the shards; reformulated: they are the output,
    # carrying what the subscriptions select (as the whole group's)
    payload = None if mode == "unicast" else row_partition.message_payload
    base = dataclasses.replace(row_partition, rows=tuple(rows), message_payload=payload)
    fields = tuple(pa.field(EVENT_PREFIX + message_column(s[0], c), base.payload_types[(d, c)])
                   for d, s in enumerate(base.sides) for c in s[4]) if payload is None else ()
    return JoinStreamGroup(group_id, side, partitions, store("", base), initial,
                           tuple(store(f"-q{j}", b) for j, b in sorted(shard_bases.items())), fields)


@dataclass
class JoinStreamSpec:
    engine_uid: str
    stream_id: str
    table: str
    columns: tuple     # the streamed table's columns (row tuple order) and their arrow types
    arrow_types: tuple
    key: str
    key_type: str
    mode: str
    schema: pa.Schema  # the output schema, ending with ``reason``
    groups: dict       # group_id -> JoinStreamGroup
    primary: str
    seq_given: bool
    stats: object = None  # the stream's counters (spark_stream.stream_stats: seeded, cache_hits, rebuilt), or None
    control: object = None  # the stream's directory (``stream_control.StreamControl``): subscription changes


def run_join_stream(spark, streaming_df, table_def, groups: dict, mode: str, schema: pa.Schema, arrow_types,
                    engine_uid: str, name: str = "select_join_group_stream", stream_id: str | None = None,
                    control=None):
    """The streaming DataFrame of the join groups' notifications (``schema``: the output columns, ending with
    ``reason``); ``groups``: group_id -> :class:`JoinStreamGroup`; ``stream_id``: whose counters
    (``spark_stream.new_stream_id``) count its partitions' cache hits and rebuilds; ``control``: the stream's
    directory, through which the engine changes the groups' subscriptions while the stream runs."""
    from pyspark.sql.types import StringType, StructField, StructType

    u = spark_stream.typed_updates(streaming_df, table_def)
    names = table_def.column_names
    rows = u.df.select(*[u.typed[c].alias(c) for c in names], u.key.alias("j_key"), u.op.alias("j_op"),
                       u.order.alias("j_ord"), u.reason.alias("j_reason"))
    spec = JoinStreamSpec(engine_uid, stream_id or uuid.uuid4().hex, table_def.name, tuple(names), tuple(arrow_types),
                          table_def.key, u.key_type, mode, schema, groups, min(groups), u.seq_given,
                          spark_stream._STATS.get(stream_id) if stream_id is not None else None, control)
    routed_schema = StructType(list(rows.schema.fields) + [StructField("group_id", StringType(), False)])

    def stateful_partitions(part: JoinStreamSpec, operator: str):
        routed = rows.mapInArrow(_route_function(part, operator), routed_schema)
        return stateful.run(routed.groupBy("group_id"), JOIN_PARTITIONS, part, stateful.output_ddl(part.schema),
                            operator)
    whole = {gid: g for gid, g in groups.items() if g.shards is None}
    split = {gid: g for gid, g in groups.items() if g.shards is not None}
    outs = [stateful_partitions(dataclasses.replace(spec, groups=whole), name)] if whole else []
    if split:   # (the group ``primary`` says a rejection once, in whichever operator runs it)
        if mode == "unicast":
            first = dataclasses.replace(spec, groups=split, schema=_message_schema(split))
            outs.append(_shard_stage(stateful_partitions(first, f"{name}_row_partitions"), first, schema, name))
        else:   # the row partitions' messages are the output
            outs.append(stateful_partitions(dataclasses.replace(spec, groups=split), f"{name}_row_partitions"))
    out = outs[0]
    for more in outs[1:]:
        out = out.unionByName(more)
    return out


def _message_schema(groups: dict) -> pa.Schema:
    """Stage 1's output in a unicast stream: the messages (``JOIN_MESSAGE_SCHEMA`` and the columns they carry)
    and ``reason`` (a rejected row)."""
    fields = {f.name: f for f in JOIN_MESSAGE_SCHEMA}
    for g in groups.values():
        for f in g.message_fields:
            fields.setdefault(f.name, f.with_name(_between_stages(f.name)))
    return pa.schema([*fields.values(), pa.field("reason", pa.string())])


def _between_stages(column: str) -> str:
    """A message column's name between the stages: without its dot (``table.column``), which a ``mapInArrow``
    over the stateful operator's output would read as a field of a struct (``%`` escaped first, so that
    :func:`_message_column_name` undoes it exactly)."""
    return column.replace("%", "%25").replace(".", "%2E")


def _message_column_name(column: str) -> str:
    return re.sub("%(25|2E)", lambda m: "%" if m.group(1) == "25" else ".", column)


def _shard_stage(messages, spec: JoinStreamSpec, schema: pa.Schema, name: str):
    """Stage 2 over stage 1's ``messages`` (module docstring; ``shard_stage``): every message to every shard of its
    group, one Spark partition per shard, each matched by its shard; the unicast rows in ``schema``."""
    slots = [(gid, j) for gid in sorted(spec.groups) for j in range(len(spec.groups[gid].shards))]
    return shard_stage.shard_stage(messages, spec.schema, len(slots), _shard_targets(slots),
                                   _shard_match(spec, slots, schema), schema, name)


def _fan_out_function(slots: list, keys: list, name: str):
    """Stage 2's fan-out (``shard_stage.fan_out_function``) of ``slots`` [(group, shard)] at ``keys``."""
    return shard_stage.fan_out_function(keys, _shard_targets(slots), name)


def _shard_function(spec: JoinStreamSpec, slot_of: dict, schema: pa.Schema, name: str):
    """Stage 2's shard tasks (``shard_stage.shard_function``); ``slot_of``: partition key -> (group, shard)."""
    keys = list(slot_of)
    return shard_stage.shard_function(keys, _shard_match(spec, [slot_of[k] for k in keys], schema), name)


def _shard_targets(slots: list):
    by_group: dict = {}
    for i, (gid, _) in enumerate(slots):
        by_group.setdefault(gid, []).append(i)

    def targets(rb):
        """Each message to every shard of its group; a rejected row to the first shard only."""
        rejected = pc.fill_null(pc.equal(rb.column("op"), REJECTED), False)
        gids = rb.column("group_id")
        if pc.any(rejected).as_py():
            yield rb.filter(rejected), 0
        for gid, mine in by_group.items():
            rows = rb.filter(pc.and_(pc.fill_null(pc.equal(gids, gid), False), pc.invert(rejected)))
            for i in mine if rows.num_rows else ():
                yield rows, i
    return targets


def _shard_match(spec: JoinStreamSpec, slots: list, schema: pa.Schema):
    def match(i: int, part: pa.Table):
        """A shard's copy of a micro-batch's messages -> its subscriptions' unicast rows (``JoinShard.unicast``)."""
        gid, j = slots[i]
        rejected = pc.equal(part.column("op"), REJECTED)
        if pc.any(rejected).as_py():
            rows = part.filter(rejected)
            yield stateful.output_table(schema, None, rows.column("seq").to_pylist(),
                                        rows.column("reason").to_pylist(), group_id=gid)
        messages = part.filter(pc.invert(rejected))
        messages = messages.rename_columns([_message_column_name(c) for c in messages.column_names])
        if messages.num_rows:
            yield stateful.output_table(schema, _shard(spec, gid, j).unicast(messages))
    return match


def _shard(spec: JoinStreamSpec, gid: str, j: int) -> JoinShard:
    """Shard ``j`` of group ``gid`` with the subscriptions of the micro-batch's change version: the worker's, else
    built from its base file (the stream's start, or the change's)."""
    version = spec.control.version(gid, stream_control.batch_id()) if spec.control is not None else 0

    def build():
        base = spec.groups[gid].shards[j].get() if not version else spec.control.join_shard(gid, version, j)
        return JoinShard(_loaded(base))
    return shard_stage.cached_shard(_SHARD_WORKER, spec.stats, (spec.engine_uid, spec.stream_id, gid, j, version),
                                    build)


def _route_function(spec: JoinStreamSpec, name: str):
    groups = sorted((gid, g.partitions) for gid, g in spec.groups.items())

    def route(batches):
        """Every row to its key's partition of every join group (column ``group_id`` = partition id)."""
        for rb in batches:
            keys = rb.column("j_key").to_pylist()
            for gid, parts in groups:
                rids = [f"{gid}#{key_partition(k, parts)}" for k in keys]
                yield rb.append_column("group_id", pa.array(rids, pa.string()))
    route.__name__ = f"{name}_route"
    return route


@dataclass
class JoinStreamState:
    """A partition's state variables (the state store's handles; in tests, any look-alike)."""
    rows: object   # MapState key -> (pickled row tuple,)
    meta: object   # ValueState (applied, rebuilds)
    subs: object = None  # ValueState (stream id, change version): the subscriptions the last micro-batch applied


def _state_variables(spec: JoinStreamSpec) -> dict:
    """A partition's state on the one stream runtime (``stateful``): its rows, counters and subscriptions."""
    return {"rows": stateful.map_state(f"key {spec.key_type}", "row binary"), "meta": stateful.META,
            "subs": stateful.SUBS}


def _processor_class():
    """The join partitions' processor, constructed as ``(spec)`` (tests drive it with ``TwsTester``)."""
    return functools.partial(stateful.processor_class(), JOIN_PARTITIONS)


def apply_join_micro_batch(spec: JoinStreamSpec, rid: str, pdf: pd.DataFrame, state: JoinStreamState) -> pd.DataFrame:
    """Apply one micro-batch of one join partition (``pdf``: the table's columns, j_key, j_op, j_ord, j_reason;
    PySpark's state API renames columns that start with an underscore)."""
    gid, part = rid.rsplit("#", 1)
    gs = spec.groups[gid]
    pdf = pdf.iloc[np.argsort(pdf["j_ord"].to_numpy(), kind="stable")]
    ident = (spec.engine_uid, spec.stream_id, rid)
    version = _version(spec, gs)
    group, applied, rebuilds, how = _group_for(spec, gs, rid, int(part), state, ident, version)
    changed = stateful.note_subscriptions(state.subs, spec.stream_id, version)
    if spec.stats is not None:
        spec.stats.add({"micro_batches": 1, how: 1, "subscription_changes": changed})

    n = len(pdf)
    keys = pdf["j_key"].tolist()
    ops = pdf["j_op"].tolist()
    reasons = pdf["j_reason"].tolist()
    values = [pdf[c].tolist() for c in spec.columns]
    seqs = (pdf["j_ord"].to_numpy(dtype=np.int64) if spec.seq_given
            else (np.int64(applied) << np.int64(32)) + np.arange(n, dtype=np.int64))
    final: dict = {}  # key -> new row tuple or None: the state writes of this micro-batch
    out_rows, out_ops, out_seqs = [], [], []
    rej_seq, rej_reason = [], []

    def emit(row, op, seq):
        out_rows.append(row)
        out_ops.append(op)
        out_seqs.append(seq)

    integral = [pa.types.is_integer(t) for t in spec.arrow_types]
    for i in range(n):
        reason = reasons[i]
        if reason is None or reason != reason:
            k = keys[i]
            if k in final:
                old = final[k]
            else:
                got = state.rows.getValue((k,)) if state.rows.containsKey((k,)) else None
                old = pickle.loads(got[0]) if got is not None else None
            if ops[i] == "delete":
                if old is None:
                    reason = f"delete of unknown key {k!r} from {spec.table!r}"
                else:
                    emit(old, DELETE, int(seqs[i]))
                    final[k] = None
            else:
                new = tuple(_plain(col[i], whole) for col, whole in zip(values, integral))
                if old is not None:
                    emit(old, DELETE, int(seqs[i]))
                emit(new, UPSERT, int(seqs[i]))
                final[k] = new
        if reason is not None and reason == reason and gid == spec.primary:
            rej_seq.append(None if seqs[i] == spark_stream._NO_SEQ else int(seqs[i]))
            rej_reason.append(str(reason))
    # a row partition (stage 1) yields the messages of 000 §4, whatever the stream's mode
    mode = "reformulated" if gs.shards is not None else spec.mode
    notes = group.apply(_batch(spec, gs, out_rows, out_ops, out_seqs), mode) if out_rows else None
    if notes is not None and gs.shards is not None and spec.mode == "unicast":   # to stage 2
        notes = notes.rename_columns([_between_stages(c) for c in notes.column_names])
    for k, v in final.items():
        if v is None:
            state.rows.removeKey((k,))
        else:
            state.rows.updateValue((k,), (pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL),))
    stateful.close_partition(state.meta, _WORKER, ident, applied, rebuilds, (group, version))
    return stateful.output_table(spec.schema, notes, rej_seq, rej_reason, group_id=gid).to_pandas()


JOIN_PARTITIONS = stateful.StreamKind(_state_variables, JoinStreamState, apply_join_micro_batch)


def _version(spec: JoinStreamSpec, gs: JoinStreamGroup) -> int:
    """The stream's change version of ``gs``'s subscriptions this micro-batch applies (``stream_control``); 0 in a
    row partition of a unicast stream: it holds no subscription and its messages carry every column."""
    if spec.control is None or (gs.shards is not None and spec.mode == "unicast"):
        return 0
    return spec.control.version(gs.group_id, stream_control.batch_id())


def _plain(v, integral: bool):
    """A pandas cell as the plain Python value the engine's rows hold: a null (NaN in a float column) ->
    None; an integer column with nulls arrives as floats -> ints again."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if integral and isinstance(v, float):
        return int(v)
    return v


def _batch(spec: JoinStreamSpec, gs: JoinStreamGroup, rows, ops, seqs) -> pa.Table:
    cols = list(zip(*rows))
    out = {EVENT_PREFIX + c: pa.array(list(v), t) for c, t, v in zip(spec.columns, spec.arrow_types, cols)}
    return pa.table({**out, "op": pa.array(ops, pa.int8()), "seq": pa.array(seqs, pa.int64()),
                     "j_side": pa.array([gs.side] * len(ops), pa.int8())})


def _group_for(spec, gs: JoinStreamGroup, rid: str, part: int, state: JoinStreamState, ident, version: int = 0):
    """(group, applied, rebuilds, how): the partition's operator as of the state store, with the
    subscriptions of the stream's change ``version`` (0: the base's); ``how`` one of seeded / cache_hits /
    rebuilt (spark_stream.STAT_NAMES; a cached operator that takes a change in place is a cache hit)."""
    got = stateful.open_partition(state.meta, _WORKER, ident)
    if got is None:  # first micro-batch: seed the state with this partition's rows
        mine = {k: row for k, row in gs.initial_rows().items() if key_partition(k, gs.partitions) == part}
        for k, row in mine.items():
            state.rows.updateValue((k,), (pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL),))
        return _build(spec, gs, rid, mine.values(), _subscriptions(spec, gs, version)), 0, 0, "seeded"
    applied, rebuilds = got.applied, got.rebuilds
    if got.cached is not None and got.cached[0] == applied:
        group, had = got.cached[1]
        if had == version:
            return group, applied, rebuilds, "cache_hits"
        # 003 §4.2.3: the partition follows query inserts and deletes while data flows, as publish's do; a row
        # partition only the columns its messages carry
        change = MessageColumns(_subscriptions(spec, gs, version).message_payload) if gs.shards is not None \
            else query_change(_subscriptions(spec, gs, had), _subscriptions(spec, gs, version))
        if change is not None:
            group.apply(change, "none")
            return group, applied, rebuilds, "cache_hits"
    rows = [pickle.loads(v[0]) for _, v in state.rows.iterator()]
    return _build(spec, gs, rid, rows, _subscriptions(spec, gs, version)), applied, rebuilds + 1, "rebuilt"


def _subscriptions(spec: JoinStreamSpec, gs: JoinStreamGroup, version: int):
    """The group's subscriptions as of the stream's change ``version``: the base, or the change's snapshot
    (``stream_control``) with the base's static side when it selects the same columns."""
    base = gs.snapshot()
    if not version:
        return base
    if gs.shards is not None:   # a row partition: no subscription; its messages carry what they select (000 §4)
        return dataclasses.replace(base, message_payload=spec.control.message_payload(gs.group_id, version))
    change = spec.control.subscriptions(gs.group_id, version)
    if tuple(change.sides) != tuple(base.sides):
        return change   # new columns of the partner's rows: the change's static side has them (as of the change)
    return dataclasses.replace(change, rows=base.rows, domains=base.domains)


def query_change(old, new) -> QueryChange | None:
    """The :class:`QueryChange` that takes a partition from the subscriptions of snapshot ``old`` to those of
    ``new`` (a subscription whose constants or output changed leaves and comes back); None when the partitions'
    rows would need other columns (a new base)."""
    if tuple(old.sides) != tuple(new.sides) or set(old.sub_columns) != set(new.sub_columns):
        return None

    def rows(snap):
        outs = list(snap.sub_outputs) if len(snap.sub_outputs) else [()] * len(snap.sub_ids)
        cols = {c: np.asarray(v, dtype=np.float64) for c, v in snap.sub_columns.items()}
        return {sid: (tuple(cols[c][i] for c in sorted(cols)), outs[i]) for i, sid in enumerate(snap.sub_ids.tolist())}

    before, after = rows(old), rows(new)
    same = {sid for sid, v in after.items() if sid in before and _same(before[sid], v)}
    removed = tuple(sid for sid in before if sid not in same)
    idx = [i for i, sid in enumerate(new.sub_ids.tolist()) if sid not in same]
    pick = np.asarray(idx, dtype=np.int64)
    outputs = [new.sub_outputs[i] for i in idx] if len(new.sub_outputs) else []
    return QueryChange(np.asarray(new.sub_ids, dtype=object)[pick],
                       {c: np.asarray(v, dtype=np.float64)[pick] for c, v in new.sub_columns.items()},
                       removed, outputs, dict(new.output_types))


def _same(a: tuple, b: tuple) -> bool:
    """Two subscriptions' (constants, output) alike (NaN equals NaN: an open bound)."""
    return a[1] == b[1] and all(x == y or (x != x and y != y) for x, y in zip(a[0], b[0]))


def _build(spec: JoinStreamSpec, gs: JoinStreamGroup, rid: str, rows, subs=None):
    """The partition's operator: the base (static side, subscriptions; ``subs``: as of a change) with the
    streamed side's rows."""
    snap = subs if subs is not None else gs.snapshot()
    wanted = side_columns(snap.sides[gs.side])
    idx = [spec.columns.index(c) for c in wanted]
    rows = list(rows)
    streamed = {c: [r[i] for r in rows] for c, i in zip(wanted, idx)}
    tables = list(snap.rows)
    tables[gs.side] = streamed
    return dataclasses.replace(snap, partition_id=rid, rows=tuple(tables)).build()
