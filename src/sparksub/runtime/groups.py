"""Thin Spark wrapper: run group operators inside Spark tasks (Arrow batches, ``mapInArrow``).

A group's state lives in files under the engine's directory (``runtime/replicas.py``): a *base* snapshot,
rebuilt only when subscriptions change or the log grows long, plus the *log* of update batches applied
since.  What a task needs is a :class:`~sparksub.runtime.replicas.Replica` -- the base's path, its id and
the log length, small whatever the group's size.  A Python worker caches the materialised group between
tasks, keyed by (engine, group) and checked against (base, log position), so a warm worker applies only the
new batch; a cold one (a new executor, a restarted worker, a recomputed partition) rebuilds from the files.
Either way the output is the same: the operator is deterministic, so recomputing a partition is safe.

One partition per group (000 §2.3.2: a range-min group's updates are sequential -- each update's
classification depends on the previous ones; DS-CN, the distributed variant, is in docs/).

Only DataFrame APIs Spark Connect has: a failed group is read from the checkpointed output (its ``op =
'error'`` row), not from an accumulator; the plan's text comes from :func:`plan_text`.
"""
from __future__ import annotations

import pyarrow as pa

from sparksub.jvm.bridge import subscription_group
from sparksub.operators.shared import row_validation
from sparksub.runtime.connect import is_connect_session
from sparksub.runtime.replicas import _CACHE, Replica, materialize, remember  # noqa: F401 (_CACHE: bench probe)

__all__ = ["materialize", "remember", "run_groups", "plan_string", "plan_text", "failed_groups"]


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in the job's output schema: the groups of one table may differ in columns (a FILTER
    group's rows carry the event, a range group's a value); what a group lacks is null."""
    return pa.table({f.name: table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema}, schema=schema)


def _error_batch(schema: pa.Schema, gid: str, seq: int, err: Exception) -> pa.RecordBatch:
    row = {f.name: [None] for f in schema}
    row.update(group_id=[gid], op=["error"], seq=[seq], reason=[f"{type(err).__name__}: {err}"])
    return pa.RecordBatch.from_pydict(row, schema=schema)


def _operator(replicas: dict[str, Replica], mode: str, schema: pa.Schema, name: str = "range_min_group"):
    """The task body. ``schema`` ends with a nullable ``reason``; a group whose operator fails yields
    one ``op = 'error'`` row naming the failure instead of its notifications (the driver reads the failed
    groups from those rows: :func:`failed_groups`), so that the other groups' notifications still come out
    (DESIGN §7)."""
    def range_min_group_operator(batches):
        # Rows arrive grouped by group_id (one partition per group) and sorted by seq.
        pending: dict[str, list[pa.RecordBatch]] = {}
        for rb in batches:
            for gid in pa.compute.unique(rb.column("group_id")).to_pylist():
                part = rb.filter(pa.compute.equal(rb.column("group_id"), gid))
                pending.setdefault(gid, []).append(part)
        for gid, parts in pending.items():
            replica = replicas[gid]
            table = pa.Table.from_batches(parts).sort_by("seq")
            if "reason" in table.column_names:   # a stream's rows set aside upstream (stream_groups): emit them
                bad = pa.compute.is_valid(table.column("reason"))
                rejected = table.filter(bad)
                if rejected.num_rows:
                    yield from row_validation.rejected_rows(schema, rejected.column("seq"),
                                                            rejected.column("reason").to_pylist()).to_batches()
                table = table.filter(pa.compute.invert(bad)).drop_columns(["reason"])
                if not table.num_rows:
                    continue
            try:
                group = materialize(replica)
                out = group.apply(table, mode)
            except Exception as err:  # noqa: BLE001 - reported as a row, which the driver reads
                yield _error_batch(schema, gid, int(table.column("seq")[0].as_py()), err)
                continue
            # a stateless group (FILTER) logs nothing: it stays at the replica's position and the next task hits
            remember(replica, replica.log_length + (0 if getattr(group, "stateless", False) else 1), group)
            for rb in _conform(out, schema).to_batches():
                yield rb
    range_min_group_operator.__name__ = f"{name}_{mode}"  # what Spark's EXPLAIN prints
    return range_min_group_operator


def run_groups(spark, replicas: dict[str, Replica], batch: pa.Table, mode: str, schema: pa.Schema,
               name: str = "range_min_group", describe: str | None = None):
    """Run ``batch`` (columns group_id, key, x, y, op, seq) through each group's operator in Spark.

    Returns ``(DataFrame, failed group ids)``; the DataFrame is checkpointed locally (Spark Connect has
    ``localCheckpoint`` too), so the operator runs exactly once per call, and the failed groups are read
    from its ``error`` rows: that read is the one job, which computes the checkpointed partitions (kept for
    every later action; a lazy local checkpoint saves a second job). ``schema`` must end with the nullable
    ``reason`` column.
    """
    out = _plan(spark, replicas, batch, mode, schema, name, describe).localCheckpoint(eager=False)
    return out, failed_groups(out)


def failed_groups(df) -> set:
    """The ``group_id`` of every ``op = 'error'`` row of ``df`` (a checkpointed output: a small job)."""
    from pyspark.sql import functions as F
    return {r[0] for r in df.where(F.col("op") == "error").select("group_id").collect()}


def plan_string(spark, replicas: dict[str, Replica], batch: pa.Table, mode: str, schema: pa.Schema,
                name: str = "range_min_group", describe: str | None = None) -> str:
    """Spark's physical plan for running ``batch`` through the groups (not executed)."""
    return plan_text(_plan(spark, replicas, batch, mode, schema, name, describe))


def plan_text(df) -> str:
    """``df``'s physical plan as text: the executed plan's tree on a classic session (through the JVM), the
    ``simple`` EXPLAIN's physical plan on Spark Connect (which has no ``_jdf``)."""
    if is_connect_session(df.sparkSession):
        text = df._explain_string(mode="simple")
        head = "== Physical Plan =="
        return text.split(head, 1)[1].strip("\n") + "\n" if head in text else text
    return df._jdf.queryExecution().executedPlan().treeString()


def _plan(spark, replicas, batch: pa.Table, mode: str, schema: pa.Schema, name: str = "range_min_group",
          describe: str | None = None):
    # One partition per group, rows in seq order within it. One chunk: pyspark 4.3's
    # createDataFrame(pa.Table) drops the chunk that follows an empty one.
    df = spark.createDataFrame(batch.combine_chunks())
    df = df.repartition(max(len(replicas), 1), "group_id").sortWithinPartitions("group_id", "seq")
    return subscription_group(df.mapInArrow(_operator(replicas, mode, schema, name), _ddl(schema)), describe)


def stream_groups(events, replicas: dict[str, Replica], mode: str, schema: pa.Schema,
                  name: str = "filter_group"):
    """Stateless groups (FILTER) over a streaming DataFrame of events (columns group_id-free:
    the batch columns but ``group_id``; with a ``reason`` column, the rows that have one come out once as
    ``rejected``).  Every event goes to every shard (001 is stateless per
    event: shards only split the subscriptions), one partition per shard, as ``run_groups``;
    nothing is kept between micro-batches, so no state store is involved."""
    from pyspark.sql import functions as F
    rids = sorted(replicas)
    shards = F.array(*[F.lit(r) for r in rids])
    if "reason" in events.columns:   # rows set aside upstream (their reason): to the first shard, which emits them
        shards = F.when(F.col("reason").isNull(), shards).otherwise(F.array(F.lit(rids[0])))
    df = events.withColumn("group_id", F.explode(shards))
    df = df.repartition(max(len(rids), 1), "group_id")
    return df.mapInArrow(_operator(replicas, mode, schema, name), _ddl(schema))


def _ddl(schema: pa.Schema) -> str:
    names = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int8(): "tinyint",
             pa.bool_(): "boolean", pa.timestamp("us"): "timestamp", pa.date32(): "date"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)
