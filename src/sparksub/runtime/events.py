"""Thin Spark wrapper: event queries run inside Spark tasks (``mapInArrow``), one executor per replica.

The pure parts (plan, routing hash, output schema, match rows, replica bases) are in
``operators/events/partitions.py``; this module holds what needs Spark: the task function and the job.
A replica is one partition of an event class (``event_partitions.event_partition_plan``), its state in
files as every group's (``runtime/replicas.py``: a base ``ReplicaBase`` + the log of event batches that
reached it, each fed under its stream names), cached in the Python worker between tasks; a cold worker
rebuilds from the files and replays the log with the matches discarded.  Either way the output is the same
(the executor is deterministic).  A replica whose executor fails yields one ``op = 'error'`` row naming
the failure instead of its matches -- the other replicas' matches still come out (DESIGN §7) -- and its
batch is not logged: the next task rebuilds it from base + log.  A run-time evaluation error (a numeric
overflow, say: the registration check refuses ill-typed queries) belongs to the query that raised it:
the executor charges it to that query alone, which yields one ``op = 'rejected'`` row naming the query
(``query``) and the event; every other query of the replica keeps the event, and the batch is logged
whole (a replay meets the same error and drops it again).

The job: the events, one row per (event, replica it reaches) with the replica id in ``replica``, are
repartitioned by ``replica``, sorted by (replica, t1, seq) within each partition, and run by
``mapInArrow(event_query_nfa)`` — the name Spark's EXPLAIN prints.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sparksub.jvm.bridge import subscription_group
from sparksub.operators.events.partitions import MatchLayout, feed_events_table, rejected_events_table
from sparksub.runtime.groups import plan_text
from sparksub.runtime.replicas import _CACHE, Replica, materialize, remember  # noqa: F401 (_CACHE: bench probe)

__all__ = ["materialize", "remember", "run_event_queries", "event_plan_string", "OPERATOR_NAME"]

#: The task function's name (what Spark's EXPLAIN shows for the operator).
OPERATOR_NAME = "event_query_nfa"


def _feed(replica: Replica, streams: tuple, events: pa.Table, layout: MatchLayout, schema: pa.Schema):
    """Feed a batch to the replica's executor: (executor, output rows).  The matches come as Arrow columns
    built for the whole batch (``feed_events_table``: the batch executor's ``process_table``, issue 18 item
    3), no dict per match; each run-time evaluation error is charged to the query that raised it: a
    ``rejected`` row naming that query and the event (the other queries keep the event)."""
    executor = materialize(replica)
    errors: list = []
    out = feed_events_table(executor, streams, events, layout, replica.replica_id, schema, errors)
    if errors:
        out = pa.concat_tables([out, rejected_events_table(events, errors, schema, replica.replica_id)])
    return executor, out


def _error_table(schema: pa.Schema, rid: str, err: Exception) -> pa.Table:
    row = {f.name: [None] for f in schema}
    row.update(group_id=[rid], op=["error"], reason=[f"{type(err).__name__}: {err}"])
    return pa.table(row, schema=schema)


def _operator(replicas: dict[str, Replica], streams: dict[str, tuple], layout: MatchLayout,
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
                executor, out = _feed(replica, streams[rid], events, layout, schema)
            except Exception as err:  # noqa: BLE001 - reported as a row; the replica rebuilds next time
                yield from _error_table(schema, rid, err).to_batches()
                continue
            remember(replica, replica.log_length + 1, executor)
            yield from out.to_batches()
    event_query_nfa.__name__ = OPERATOR_NAME
    return event_query_nfa


def _plan(spark, replicas, batch: pa.Table, streams, layout, schema, describe: str | None = None):
    # One chunk: pyspark 4.3's createDataFrame(pa.Table) drops the chunk that follows an empty one.
    df = spark.createDataFrame(batch.combine_chunks())
    n = max(len(set(batch.column("replica").to_pylist())) if batch.num_rows else 1, 1)
    df = df.repartition(n, "replica").sortWithinPartitions("replica", "t1", "seq")
    return subscription_group(df.mapInArrow(_operator(replicas, streams, layout, schema), _ddl(schema)), describe)


def run_event_queries(spark, replicas: dict[str, Replica], batch: pa.Table, streams: dict[str, tuple],
                      layout: MatchLayout, describe: str | None = None) -> pa.Table:
    """Run ``batch`` (``event_partitions.events_table`` columns plus ``replica``) through the replicas it
    names, in Spark; returns the output rows (``layout.schema()``: match rows and ``error`` rows),
    collected: each replica's rows in release order, replicas one after another.  ``streams``: replica
    id -> the stream names to feed its events under; ``describe``: the ``SubscriptionGroup`` node's text
    (the Catalyst extension; None: no node)."""
    schema = layout.schema()
    return _plan(spark, replicas, batch, streams, layout, schema, describe).toArrow().cast(schema)


def event_plan_string(spark, replicas: dict[str, Replica], batch: pa.Table, streams: dict[str, tuple],
                      layout: MatchLayout, describe: str | None = None) -> str:
    """Spark's physical plan of the job (not executed)."""
    return plan_text(_plan(spark, replicas, batch, streams, layout, layout.schema(), describe))


_DDL = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int32(): "int",
        pa.int16(): "smallint", pa.int8(): "tinyint", pa.bool_(): "boolean", pa.float32(): "float",
        pa.timestamp("us"): "timestamp", pa.date32(): "date"}


def _ddl(schema: pa.Schema) -> str:
    return ", ".join(f"`{f.name}` {_DDL.get(f.type, 'string')}" for f in schema)
