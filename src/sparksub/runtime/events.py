"""Thin Spark wrapper: event queries run inside Spark tasks (``mapInArrow``), one executor per replica.

The pure parts (plan, routing hash, output schema, match rows, replica bases) are in
``operators/events/partitions.py``; this module holds what needs Spark: the replicas (a broadcast base +
the log of event batches that reached them), the worker-process cache, the task function and the job.

A replica is one partition of an event class (``event_partitions.event_partition_plan``).  As for the
subscription groups (``spark_groups``), its state lives where its tasks run: a Python worker caches the
materialised executor between tasks, keyed by (engine, replica) and checked against (base id, log
position), so a warm worker feeds only the new batch; a cold one (new executor, restarted worker,
recomputed partition) rebuilds from the base and replays the log with the matches discarded.  Either way
the output is the same (the executor is deterministic).  A replica whose executor fails yields one
``op = 'error'`` row naming the failure instead of its matches — the other replicas' matches still come
out (DESIGN §7) — and its batch is not logged: the next task rebuilds it from base + log.  A run-time
evaluation error (a numeric overflow, say: the registration check refuses ill-typed queries) belongs to
the query that raised it: the executor charges it to that query alone, which yields one ``op =
'rejected'`` row naming the query (``query``) and the event; every other query of the replica keeps the
event, and the batch is logged whole (a replay meets the same error and drops it again).

The job: the events, one row per (event, replica it reaches) with the replica id in ``replica``, are
repartitioned by ``replica``, sorted by (replica, t1, seq) within each partition, and run by
``mapInArrow(event_query_nfa)`` — the name Spark's EXPLAIN prints.
"""
from __future__ import annotations

import pickle
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from sparksub.jvm.bridge import subscription_group
from sparksub.operators.events.partitions import (MatchLayout, ReplicaBase, feed_events, matches_to_table,
                                                 rejected_events_table)

__all__ = ["EventReplica", "new_base_id", "materialize", "remember", "run_event_queries", "event_plan_string",
           "OPERATOR_NAME"]

#: The task function's name (what Spark's EXPLAIN shows for the operator).
OPERATOR_NAME = "event_query_nfa"

# Worker-process cache: (engine_uid, replica_id) -> (base_id, log position, executor).
_CACHE: dict[tuple[str, str], tuple[str, int, object]] = {}


@dataclass
class EventReplica:
    """How to rebuild one replica anywhere: its base (a Broadcast of pickled ``ReplicaBase``, or the
    bytes) and the batches fed since, as ``(stream names, events table)``, oldest first."""

    engine_uid: str
    replica_id: str
    base_id: str
    base: object
    log: list = field(default_factory=list)

    def base_value(self) -> ReplicaBase:
        raw = self.base.value if hasattr(self.base, "value") else self.base
        return pickle.loads(raw)

    def logged_events(self) -> int:
        return sum(t.num_rows for _, t in self.log)


def new_base_id() -> str:
    return uuid.uuid4().hex


def materialize(replica: EventReplica):
    """The replica's executor with every logged batch fed (matches discarded).  Removes it from the
    cache: the caller puts it back with :func:`remember` once its next batch succeeded, so a task that
    fails half-way never leaves a half-fed executor behind."""
    upto = len(replica.log)
    entry = _CACHE.pop((replica.engine_uid, replica.replica_id), None)
    if entry is not None and entry[0] == replica.base_id and entry[1] <= upto:
        _, applied, executor = entry
    else:
        executor, applied = replica.base_value().build(), 0
    for streams, events in replica.log[applied:upto]:
        feed_events(executor, streams, events)
    return executor


def remember(replica: EventReplica, position: int, executor) -> None:
    _CACHE[(replica.engine_uid, replica.replica_id)] = (replica.base_id, position, executor)


def _feed(replica: EventReplica, streams: tuple, events: pa.Table, schema: pa.Schema):
    """Feed a batch to the replica's executor: (executor, matches, rejected rows or None).  Each run-time
    evaluation error is charged to the query that raised it (``feed_events``): a ``rejected`` row naming
    that query and the event; the other queries keep the event."""
    executor = materialize(replica)
    errors: list = []
    matches = feed_events(executor, streams, events, errors)
    if not errors:
        return executor, matches, None
    return executor, matches, rejected_events_table(events, errors, schema, replica.replica_id)


def _error_table(schema: pa.Schema, rid: str, err: Exception) -> pa.Table:
    row = {f.name: [None] for f in schema}
    row.update(group_id=[rid], op=["error"], reason=[f"{type(err).__name__}: {err}"])
    return pa.table(row, schema=schema)


def _operator(replicas: dict[str, EventReplica], streams: dict[str, tuple], layout: MatchLayout,
              schema: pa.Schema):
    """The task body: per replica in its rows, materialise, feed the batch in (t1, seq) order, flush,
    emit the matches as rows of ``schema``."""
    def event_query_nfa(batches):
        pending: dict[str, list[pa.RecordBatch]] = {}
        for rb in batches:
            for rid in pc.unique(rb.column("replica")).to_pylist():
                pending.setdefault(rid, []).append(rb.filter(pc.equal(rb.column("replica"), rid)))
        for rid, parts in pending.items():
            replica = replicas[rid]
            events = pa.Table.from_batches(parts).drop_columns(["replica"])
            try:
                executor, matches, rejected = _feed(replica, streams[rid], events, schema)
                out = matches_to_table(matches, layout, rid, schema)
                if rejected is not None:
                    out = pa.concat_tables([out, rejected])
            except Exception as err:  # noqa: BLE001 - reported as a row; the replica rebuilds next time
                yield from _error_table(schema, rid, err).to_batches()
                continue
            remember(replica, len(replica.log) + 1, executor)
            yield from out.to_batches()
    event_query_nfa.__name__ = OPERATOR_NAME
    return event_query_nfa


def _plan(spark, replicas, batch: pa.Table, streams, layout, schema, describe: str | None = None):
    # One chunk: pyspark 4.3's createDataFrame(pa.Table) drops the chunk that follows an empty one.
    df = spark.createDataFrame(batch.combine_chunks())
    n = max(len(set(batch.column("replica").to_pylist())) if batch.num_rows else 1, 1)
    df = df.repartition(n, "replica").sortWithinPartitions("replica", "t1", "seq")
    return subscription_group(df.mapInArrow(_operator(replicas, streams, layout, schema), _ddl(schema)), describe)


def run_event_queries(spark, replicas: dict[str, EventReplica], batch: pa.Table, streams: dict[str, tuple],
                      layout: MatchLayout, describe: str | None = None) -> pa.Table:
    """Run ``batch`` (``event_partitions.events_table`` columns plus ``replica``) through the replicas it
    names, in Spark; returns the output rows (``layout.schema()``: match rows and ``error`` rows),
    collected: each replica's rows in release order, replicas one after another.  ``streams``: replica
    id -> the stream names to feed its events under; ``describe``: the ``SubscriptionGroup`` node's text
    (the Catalyst extension; None: no node)."""
    schema = layout.schema()
    return _plan(spark, replicas, batch, streams, layout, schema, describe).toArrow().cast(schema)


def event_plan_string(spark, replicas: dict[str, EventReplica], batch: pa.Table, streams: dict[str, tuple],
                      layout: MatchLayout, describe: str | None = None) -> str:
    """Spark's physical plan of the job (not executed)."""
    df = _plan(spark, replicas, batch, streams, layout, layout.schema(), describe)
    return df._jdf.queryExecution().executedPlan().treeString()


_DDL = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int32(): "int",
        pa.int16(): "smallint", pa.int8(): "tinyint", pa.bool_(): "boolean", pa.float32(): "float",
        pa.timestamp("us"): "timestamp", pa.date32(): "date"}


def _ddl(schema: pa.Schema) -> str:
    return ", ".join(f"`{f.name}` {_DDL.get(f.type, 'string')}" for f in schema)
