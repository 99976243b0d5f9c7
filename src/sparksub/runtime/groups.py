"""Thin Spark wrapper: run group operators inside Spark tasks (Arrow batches, ``mapInArrow``).

A group's state lives where its tasks run. The driver keeps the conceptual database (the rows) and
each group's subscriptions; what a task needs is shipped as a :class:`GroupReplica`: a *base*
snapshot (a Spark broadcast, rebuilt only when subscriptions change or the log grows long) plus the
*log* of update batches applied since. A Python worker caches the materialised group between tasks,
keyed by (engine, group, base, log position), so a warm worker applies only the new batch; a cold one
(a new executor, a restarted worker, a recomputed partition) rebuilds from base + log. Either way the
output is the same: the operator is deterministic, so recomputing a partition is safe.

One partition per group (000 §2.3.2: a range-min group's updates are sequential — each update's
classification depends on the previous ones; DS-CN, the distributed variant, is in docs/).
"""
from __future__ import annotations

import pickle
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from sparksub.jvm.bridge import subscription_group
from sparksub.operators.shared import row_validation
from sparksub.operators.range_min.group import GroupSnapshot, RangeMinGroup

__all__ = ["GroupReplica", "materialize", "remember", "run_groups", "plan_string"]

# Worker-process cache: (engine_uid, group_id) -> (base_id, log_position, group).
_CACHE: dict[tuple[str, str], tuple[str, int, RangeMinGroup]] = {}


@dataclass
class GroupReplica:
    """How to rebuild one group anywhere: base snapshot + the update log since it."""
    engine_uid: str
    group_id: str
    base_id: str
    base: object  # a pyspark Broadcast of pickled GroupSnapshot bytes, or the bytes themselves
    log: list = field(default_factory=list)  # pyarrow Tables (key, x, y, op, seq), oldest first

    def base_snapshot(self) -> GroupSnapshot:
        raw = self.base.value if hasattr(self.base, "value") else self.base
        return pickle.loads(raw)


def new_base_id() -> str:
    return uuid.uuid4().hex


def materialize(replica: GroupReplica) -> RangeMinGroup:
    """The group with every logged batch applied. Removes it from the cache: the caller puts it back
    with :func:`remember` once the next batch succeeded, so a task that fails half-way never leaves a
    half-applied group behind."""
    upto = len(replica.log)
    entry = _CACHE.pop((replica.engine_uid, replica.group_id), None)
    if entry is not None and entry[0] == replica.base_id and entry[1] <= upto:
        _, applied, group = entry
    else:
        group, applied = replica.base_snapshot().build(), 0
    if not group.stateless:
        for batch in replica.log[applied:upto]:
            group.apply(batch, "none")
    return group


def remember(replica: GroupReplica, position: int, group: RangeMinGroup) -> None:
    _CACHE[(replica.engine_uid, replica.group_id)] = (replica.base_id, position, group)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in the job's output schema: the groups of one table may differ in columns (a FILTER
    group's rows carry the event, a range group's a value); what a group lacks is null."""
    return pa.table({f.name: table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema}, schema=schema)


def _error_batch(schema: pa.Schema, gid: str, seq: int, err: Exception) -> pa.RecordBatch:
    row = {f.name: [None] for f in schema}
    row.update(group_id=[gid], op=["error"], seq=[seq], reason=[f"{type(err).__name__}: {err}"])
    return pa.RecordBatch.from_pydict(row, schema=schema)


def _operator(replicas: dict[str, GroupReplica], mode: str, schema: pa.Schema, failures=None,
              name: str = "range_min_group"):
    """The task body. ``schema`` ends with a nullable ``reason``; a group whose operator fails yields
    one ``op = 'error'`` row naming the failure instead of its notifications, and is reported through
    ``failures`` (an accumulator), so that the other groups' notifications still come out (DESIGN §7)."""
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
            except Exception as err:  # noqa: BLE001 - reported as a row and to the driver
                if failures is not None:
                    failures.add({gid})
                yield _error_batch(schema, gid, int(table.column("seq")[0].as_py()), err)
                continue
            remember(replica, len(replica.log) + 1, group)
            for rb in _conform(out, schema).to_batches():
                yield rb
    range_min_group_operator.__name__ = f"{name}_{mode}"  # what Spark's EXPLAIN prints
    return range_min_group_operator


class _SetUnion(AccumulatorParam):
    """Accumulator of the ids of groups whose operator failed."""

    def zero(self, value):
        return set()

    def addInPlace(self, a, b):
        return a | b


def run_groups(spark, replicas: dict[str, GroupReplica], batch: pa.Table, mode: str, schema: pa.Schema,
               name: str = "range_min_group", describe: str | None = None):
    """Run ``batch`` (columns group_id, key, x, y, op, seq) through each group's operator in Spark.

    Returns ``(DataFrame, failed group ids)``; the DataFrame is checkpointed locally, so the operator
    runs exactly once per call. ``schema`` must end with the nullable ``reason`` column.
    """
    failures = spark.sparkContext.accumulator(set(), _SetUnion())
    out = _plan(spark, replicas, batch, mode, schema, failures, name, describe).localCheckpoint(eager=True)
    return out, set(failures.value)


def plan_string(spark, replicas: dict[str, GroupReplica], batch: pa.Table, mode: str, schema: pa.Schema,
                name: str = "range_min_group", describe: str | None = None) -> str:
    """Spark's physical plan for running ``batch`` through the groups (not executed)."""
    df = _plan(spark, replicas, batch, mode, schema, None, name, describe)
    return df._jdf.queryExecution().executedPlan().treeString()


def _plan(spark, replicas, batch: pa.Table, mode: str, schema: pa.Schema, failures=None,
          name: str = "range_min_group", describe: str | None = None):
    # One partition per group, rows in seq order within it. One chunk: pyspark 4.3's
    # createDataFrame(pa.Table) drops the chunk that follows an empty one.
    df = spark.createDataFrame(batch.combine_chunks())
    df = df.repartition(max(len(replicas), 1), "group_id").sortWithinPartitions("group_id", "seq")
    return subscription_group(df.mapInArrow(_operator(replicas, mode, schema, failures, name), _ddl(schema)),
                              describe)


def stream_groups(events, replicas: dict[str, GroupReplica], mode: str, schema: pa.Schema,
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
    return df.mapInArrow(_operator(replicas, mode, schema, None, name), _ddl(schema))


def _ddl(schema: pa.Schema) -> str:
    names = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int8(): "tinyint",
             pa.bool_(): "boolean", pa.timestamp("us"): "timestamp", pa.date32(): "date"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)
