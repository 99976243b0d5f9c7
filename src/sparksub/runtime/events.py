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

The job: the events, one row per (event, replica it reaches) with the replica id in ``replica``, are split by
``replica`` on the driver, each replica's sorted by (t1, seq), and run by ``mapInArrow(event_query_nfa)`` — the
name Spark's EXPLAIN prints — over explicit partitions, each task claiming one replica (``groups.placed_frame``).
"""
from __future__ import annotations

import pyarrow as pa

from sparksub.jvm.bridge import subscription_group
from sparksub.operators.events.partitions import MatchLayout, feed_events_table, rejected_events_table
from sparksub.runtime import keepalive
from sparksub.runtime.groups import placed_frame, plan_text, remove_folder, split_batch
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


def _run_replica(replica: Replica, streams: tuple, events: pa.Table, layout: MatchLayout, schema: pa.Schema):
    """One replica's events, in (t1, seq) order: materialise, feed, flush, emit the matches as rows of
    ``schema`` (or one ``error`` row; the replica rebuilds next time)."""
    try:
        executor, out = _feed(replica, streams, events, layout, schema)
    except Exception as err:  # noqa: BLE001 - reported as a row; the replica rebuilds next time
        yield from _error_table(schema, replica.replica_id, err).to_batches()
        return
    remember(replica, replica.log_length + 1, executor)
    yield from out.to_batches()


def _plan(spark, replicas, batch: pa.Table, streams, layout, schema, describe: str | None = None,
          stage: bool = True):
    # One task per replica, the one that claims it (groups.placed_frame: the task whose Python worker caches
    # the replica, where there is one -- Spark's PythonWorkerFactory gives no worker affinity).
    tables = split_batch(batch, "replica", ["t1", "seq"], drop=True)
    df, folder = placed_frame(spark, replicas, tables,
                              lambda r, t: _run_replica(r, streams[r.replica_id], t, layout, schema), _ddl(schema),
                              OPERATOR_NAME, keepalive.slots_of(spark) or 1, stage)
    return subscription_group(df, describe), folder


def run_event_queries(spark, replicas: dict[str, Replica], batch: pa.Table, streams: dict[str, tuple],
                      layout: MatchLayout, describe: str | None = None) -> pa.Table:
    """Run ``batch`` (``event_partitions.events_table`` columns plus ``replica``) through the replicas it
    names, in Spark; returns the output rows (``layout.schema()``: match rows and ``error`` rows),
    collected: each replica's rows in release order, replicas one after another.  ``streams``: replica
    id -> the stream names to feed its events under; ``describe``: the ``SubscriptionGroup`` node's text
    (the Catalyst extension; None: no node)."""
    schema = layout.schema()
    df, folder = _plan(spark, replicas, batch, streams, layout, schema, describe)
    try:
        return df.toArrow().cast(schema)
    finally:
        remove_folder(folder)


def event_plan_string(spark, replicas: dict[str, Replica], batch: pa.Table, streams: dict[str, tuple],
                      layout: MatchLayout, describe: str | None = None) -> str:
    """Spark's physical plan of the job (not executed)."""
    return plan_text(_plan(spark, replicas, batch, streams, layout, layout.schema(), describe, stage=False)[0])


_DDL = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int32(): "int",
        pa.int16(): "smallint", pa.int8(): "tinyint", pa.bool_(): "boolean", pa.float32(): "float",
        pa.timestamp("us"): "timestamp", pa.date32(): "date"}


def _ddl(schema: pa.Schema) -> str:
    return ", ".join(f"`{f.name}` {_DDL.get(f.type, 'string')}" for f in schema)
