"""Thin Spark wrapper: stream-stream join groups (STREAM_JOIN, STREAM_BAND_JOIN; 003 ch. 3) on Structured Streaming.

``Engine.stream(table, df)`` over an event stream that a stream-join group reads: every micro-batch is one
*step* of the bounded join (003 §3.2: discrete time, a step's arrivals), exactly as one ``publish`` of the
micro-batch's rows is -- its events join the other stream's kept events, then enter their own side's state,
whose bound the group's replacement policy keeps.  The plan::

    TransformWithStateInPySpark stream_join_stream(...)     one state partition per group
    +- Exchange hashpartitioning(group_id), REQUIRED_BY_STATEFUL_OPERATOR
       +- MapInArrow stream_join_stream_route(...)          every valid row to every stream-join group
          +- <the checked updates: spark_stream.checked_updates, valid rows>

**One partition per group**: the state's bound is the group's and one policy decides over a whole side
(003 §3.4: the replacement decision compares every kept row), as a ``publish`` runs the group in one task.

**State** (Spark's state store): ValueState ``core``: the group's kept events, the policy's and models'
statistics, the audit log and the counters -- ``StreamJoinSnapshot.carrying`` pickled, rewritten after each
micro-batch (its size is the state's, which ``max_state_rows`` bounds); ValueState ``meta``: ``(applied,
rebuilds)``; ValueState ``subs``: the subscription change the last micro-batch applied.  A replayed or
retried micro-batch reads the state as of before it (the state store is versioned by micro-batch), so it
decides, evicts and emits exactly as its first attempt did.  The operator is cached in the Python worker,
keyed by (engine, stream, group) and used only by the same query run at the same ``applied`` count;
otherwise it is restored from ``core``.  The first micro-batch of a new checkpoint starts from the group as it
was when ``stream`` was called (the events published before: a file in the stream's directory).

**Subscription changes** (``stream_control``): a change of the group's subscriptions while the stream runs is
a new snapshot of its subscriptions; the micro-batch that applies it first rebuilds the group with them,
carrying its state (the kept events exist nowhere else), as a new base does in ``publish``.

What a stream on one stream of the join does not see: the other stream's events that arrive after ``stream``
was called (a ``publish`` to it changes the engine's group, not the stream's copy) -- the stream owns its
state from the start; and the engine does not follow the stream's events (as for event queries: an event
stream keeps no rows in the engine).  ``docs/bounded_joins.md``, "Streaming".
"""
from __future__ import annotations

import dataclasses
import functools
import pickle
import uuid
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from sparksub.operators.shared.schemas import EVENT_PREFIX
from sparksub.runtime import stateful, stream_control
from sparksub.runtime import stream as spark_stream
from sparksub.runtime.stream import SEQ_COLUMN, _loaded

__all__ = ["StreamJoinStreamGroup", "StreamJoinStreamSpec", "StreamJoinState", "run_stream_join_stream",
           "apply_stream_join_micro_batch"]

#: stream-join groups cached per Python worker (each a whole operator)
CACHE_ENTRIES = 8
#: (engine uid, stream id, group id) -> (query id, run id, applied, (group, change version)): stateful.StreamCache
_CACHE: dict = {}
_WORKER = stateful.StreamCache(CACHE_ENTRIES, lambda: _CACHE)
#: the routed rows' seq column (no leading underscore: PySpark's state API renames those)
_SEQ = "j_seq"


@dataclass
class StreamJoinStreamGroup:
    """One stream-join group as the stream needs it."""
    group_id: str
    side: int        # which stream of the join the streamed table is (0 left, 1 right)
    base: object     # StreamJoinSnapshot carrying the group's state at ``stream``: a replicas.StoredValue / _Deferred

    def snapshot(self):
        return _loaded(self.base.get())


@dataclass
class StreamJoinStreamSpec:
    engine_uid: str
    stream_id: str
    table: str
    columns: tuple       # the streamed table's columns
    mode: str
    schema: pa.Schema    # the output schema, ending with ``reason``
    groups: dict         # group_id -> StreamJoinStreamGroup
    stats: object = None     # the stream's counters (spark_stream.stream_stats), or None
    control: object = None   # the stream's directory (stream_control.StreamControl): subscription changes


@dataclass
class StreamJoinState:
    """A group's state variables (the state store's handles; in tests, any look-alike)."""
    core: object     # ValueState (pickled {"core": bytes, "counters": dict},)
    meta: object     # ValueState (applied, rebuilds)
    subs: object = None


def _state_variables(spec: StreamJoinStreamSpec) -> dict:
    """A group's state on the one stream runtime (``stateful``): its kept state, counters and subscriptions."""
    return {"core": stateful.value_state("state binary"), "meta": stateful.META, "subs": stateful.SUBS}


def _processor_class():
    """The stream-join groups' processor, constructed as ``(spec)`` (tests drive it with ``TwsTester``)."""
    return functools.partial(stateful.processor_class(), STREAM_JOIN_GROUPS)


def run_stream_join_stream(valid_df, table_def, groups: dict, mode: str, schema: pa.Schema, engine_uid: str,
                           name: str = "stream_join_stream", stream_id: str | None = None, control=None):
    """The streaming DataFrame of the stream-join groups' notifications (``schema``: the output columns, ending
    with ``reason``).  ``valid_df``: ``spark_stream.valid_updates(checked_updates(...))``; ``groups``: group_id
    -> :class:`StreamJoinStreamGroup`."""
    from pyspark.sql.types import StringType, StructField, StructType

    names = table_def.column_names
    rows = valid_df.select(*names, SEQ_COLUMN)
    spec = StreamJoinStreamSpec(engine_uid, stream_id or uuid.uuid4().hex, table_def.name, tuple(names), mode,
                                schema, groups, spark_stream._STATS.get(stream_id) if stream_id else None, control)
    fields = [StructField(f.name if f.name != SEQ_COLUMN else _SEQ, f.dataType, f.nullable)
              for f in rows.schema.fields]
    routed = rows.mapInArrow(_route_function(sorted(groups), f"{name}_route"),
                             StructType(fields + [StructField("group_id", StringType(), False)]))
    return stateful.run(routed.groupBy("group_id"), STREAM_JOIN_GROUPS, spec, stateful.output_ddl(schema), name)


def _route_function(group_ids: list, name: str):
    def route(batches):
        """Every row to every stream-join group (column ``group_id``); the seq column renamed."""
        for rb in batches:
            if not rb.num_rows:
                continue
            names = [n if n != SEQ_COLUMN else _SEQ for n in rb.schema.names]
            rb = pa.RecordBatch.from_arrays(rb.columns, names=names)
            for gid in group_ids:
                yield rb.append_column("group_id", pa.array([gid] * rb.num_rows, pa.string()))
    route.__name__ = name
    return route


def apply_stream_join_micro_batch(spec: StreamJoinStreamSpec, gid: str, pdf: pd.DataFrame,
                                  state: StreamJoinState) -> pd.DataFrame:
    """One micro-batch of one group (``pdf``: the table's columns and ``j_seq``): one step of the bounded join,
    in seq order, as ``publish`` of the same rows applies it (``StreamJoinGroup.apply``)."""
    gs = spec.groups[gid]
    pdf = pdf.iloc[np.argsort(pdf[_SEQ].to_numpy(), kind="stable")]
    ident = (spec.engine_uid, spec.stream_id, gid)
    version = spec.control.version(gid, stream_control.batch_id()) if spec.control is not None else 0
    group, applied, rebuilds, how = _group_for(spec, gs, state, ident, version)
    changed = stateful.note_subscriptions(state.subs, spec.stream_id, version)
    n = len(pdf)
    cols = {EVENT_PREFIX + c: pa.array(pdf[c], from_pandas=True) for c in spec.columns}
    batch = pa.table({**cols, "op": pa.array(np.zeros(n, dtype=np.int8)),
                      "seq": pa.array(pdf[_SEQ].to_numpy(dtype=np.int64)),
                      "j_side": pa.array(np.full(n, gs.side, dtype=np.int8))})
    notes = group.apply(batch, spec.mode)
    state.core.update((_state_blob(group),))
    stateful.close_partition(state.meta, _WORKER, ident, applied, rebuilds, (group, version))
    out = stateful.output_table(spec.schema, notes)
    if spec.stats is not None:
        spec.stats.add({"micro_batches": 1, how: 1, "subscription_changes": changed, "updates": n,
                        "notifications": out.num_rows})
    return out.to_pandas()


STREAM_JOIN_GROUPS = stateful.StreamKind(_state_variables, StreamJoinState, apply_stream_join_micro_batch)


def _state_blob(group) -> bytes:
    return pickle.dumps({"core": group.core.snapshot(), "counters": group.counters},
                        protocol=pickle.HIGHEST_PROTOCOL)


def _group_for(spec: StreamJoinStreamSpec, gs: StreamJoinStreamGroup, state: StreamJoinState, ident, version: int):
    """(group, applied, rebuilds, how): the group as of the state store, with the subscriptions of the stream's
    change ``version`` (0: the base's); ``how`` one of seeded / cache_hits / rebuilt."""
    got = stateful.open_partition(state.meta, _WORKER, ident)
    if got is None:   # a new checkpoint: the group as the engine had it at ``stream``
        snap = gs.snapshot()
        if version:
            snap = dataclasses.replace(_subscriptions(spec, gs, version), core=snap.core, counters=snap.counters)
        return snap.build(), 0, 0, "seeded"
    applied, rebuilds = got.applied, got.rebuilds
    if got.cached is not None and got.cached[0] == applied:
        group, had = got.cached[1]
        if had == version:
            return group, applied, rebuilds, "cache_hits"
        # a subscription change: the new subscriptions carrying the state as it is (a new base in publish)
        return _subscriptions(spec, gs, version).carrying(group).build(), applied, rebuilds, "cache_hits"
    saved = pickle.loads(state.core.get()[0])
    snap = dataclasses.replace(_subscriptions(spec, gs, version), core=saved["core"], counters=saved["counters"])
    return snap.build(), applied, rebuilds + 1, "rebuilt"


def _subscriptions(spec: StreamJoinStreamSpec, gs: StreamJoinStreamGroup, version: int):
    """The group's snapshot with the subscriptions of change ``version`` (0: the base's)."""
    return gs.snapshot() if not version else spec.control.subscriptions(gs.group_id, version)
