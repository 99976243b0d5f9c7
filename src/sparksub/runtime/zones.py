"""Range-MIN / range-MAX groups split into X zones in Spark (DS-CN, 000 §2.3.2; issue 16 item 4).

The pure parts are ``operators/range_min/zones.py`` (a zone, its router, the two rounds) and
``operators/range_min/subscription_shards.py`` (subscriptions by x1); the driver's orchestration is
``control/zones.py``.  This module is the Spark side, two stages per publish:

* **Round 1** (:func:`run_round1`, one job, collected): one task per zone, each over its own replica
  (``runtime/replicas.py``: base = the zone's rows, log = its own steps of each batch, worker cache).  Every
  zone task reads the group's *whole* batch from one file and builds its own steps from it
  (``route_zone``: a zone knows the keys it holds, so no key -> x directory exists anywhere), logs them as
  the replica's next log file, applies them (``apply_round1``), writes its round-1 messages to a file and
  returns its ``Round1`` record (deferred steps, edge staircases per version: a few numbers per change),
  pickled, to the driver, which runs round 2.
* **Output** (:func:`output_frame`, lazy, checkpointed by the caller): reformulated -- one task per range of
  seqs merges every zone's and round 2's messages into batch order (so a seq's messages stay in the core's
  (step, message) order, which ``deliver()`` relies on); unicast -- one task per subscription shard (its own
  replica: the shard's point index) matches the messages that visit it (S-UN, 000 §3.3), so subscriptions are
  split as the rows are, never copied into every zone.

Partitions are explicit: ``spark.range(0, n, 1, n)`` puts row i alone in partition i, so task i runs part
i and no two zones (or shards) ever share a task (hash-partitioning replica ids let 8 replicas collide into
4-5 tasks).  Only DataFrame APIs Spark Connect has; files under the engine's directory carry the batch and
the messages between the stages (one file system, as for every replica: docs/architecture.md).
"""
from __future__ import annotations

import glob
import os
import pickle
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.range_min.zones import merge_messages, steps_table, versioned_messages
from sparksub.runtime import placement
from sparksub.runtime.groups import _conform, _ddl, _error_batch, read_table, write_table
from sparksub.runtime.replicas import Replica, keep_one_per_group, materialize, remember

__all__ = ["ZoneTask", "OutputPart", "run_round1", "output_frame", "write_table", "read_table",
           "ROUND2_FILE", "META_FILE"]

BATCH_FILE = "batch.arrow"
ROUND2_FILE = "m-round2.arrow"
META_FILE = "meta.pickle"       # the X-moves' old Y by seq (unicast's no-op rule; fix_steps' moved set)


@dataclass(frozen=True)
class ZoneTask:
    """One round-1 task: a zone's replica, the group's whole batch and where its messages go."""

    group_id: str
    zone: int
    maximum: bool
    replica: Replica
    folder: str          # the publish's folder for this group: batch.arrow in, m-<zone>.arrow out


@dataclass(frozen=True)
class OutputPart:
    """One output task: merge ``folder``'s messages for seqs ``[seq_lo, seq_hi)`` (reformulated), or match
    them against one subscription shard (unicast: ``shard``); ``error``: the group failed in round 1 (one
    ``op = 'error'`` row)."""

    group_id: str
    folder: str
    seq_lo: int = 0
    seq_hi: int = 0
    shard: Replica | None = None
    error: str | None = None


def _task_place() -> dict:
    """Where a task ran: its partition and process (stats: one zone per task, each executor's share)."""
    try:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else None
    except ImportError:
        part = None
    return {"partition": part, "pid": os.getpid(), "executor": os.environ.get("SPARK_EXECUTOR_ID")}


def _round1_task(tasks: list):
    def zone_round1(batches):
        for rb in batches:
            for i in rb.column("id").to_pylist():
                t = tasks[i]
                try:
                    # the zone this task's worker holds, else its own, else any left (placement.claim: one
                    # task per zone; Spark gives these partitions no worker affinity)
                    siblings = {u.zone: u for u in tasks if u.group_id == t.group_id}
                    order = sorted(siblings)
                    held = placement.held([siblings[z].replica for z in order])
                    t = siblings[order[placement.claim(t.folder, i, len(order), held + [order.index(t.zone)],
                                                       kind="z")]]
                    batch = read_table(os.path.join(t.folder, BATCH_FILE))
                    keep_one_per_group(t.replica)
                    op = materialize(t.replica)
                    steps = op.route(batch)
                    # the zone's log entry: its own steps (a retried task rewrites the same file); the driver
                    # advances the replica past it only when the publish commits
                    t.replica.append(steps_table(batch, steps))
                    msgs, r1 = op.round1(steps)
                    write_table(os.path.join(t.folder, f"m-{t.zone}.arrow"),
                                versioned_messages(t.group_id, t.maximum, msgs))
                    remember(t.replica, t.replica.log_length + 1, op)
                    rec = {"zone": t.zone, "round1": r1, "steps": len(steps), "rows": len(op.zone), "stats": dict(op.zone.stats),
                           "core": dict(op.zone.core.counters), **_task_place()}
                except Exception as err:  # noqa: BLE001 - reported to the driver: the group's 'error' row
                    rec = {"zone": t.zone, "error": f"{type(err).__name__}: {err}", **_task_place()}
                yield pa.RecordBatch.from_pydict(
                    {"part": [i], "payload": [pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)]},
                    schema=pa.schema([("part", pa.int64()), ("payload", pa.binary())]))
    return zone_round1


def run_round1(spark, tasks: list) -> list[dict]:
    """Round 1 of every zone of ``tasks`` (one task each, explicit partitions); their records (``zone``: the zone
    the task claimed), by task.  Sort a group's records by ``zone``."""
    n = len(tasks)
    rows = spark.range(0, n, 1, n).mapInArrow(_round1_task(tasks), "part bigint, payload binary").collect()
    out: list = [None] * n
    for r in rows:
        out[r["part"]] = pickle.loads(r["payload"])
    return out


def _messages(folder: str, seq_lo: int | None = None, seq_hi: int | None = None) -> tuple[pa.Table, dict]:
    """Every zone's round-1 messages and round 2's, merged into batch order (``merge_messages``), and the
    X-moves' old values; only seqs in ``[seq_lo, seq_hi)`` when given."""
    with open(os.path.join(folder, META_FILE), "rb") as fh:
        old_values = pickle.load(fh)
    tables = []
    for path in sorted(glob.glob(os.path.join(folder, "m-*.arrow"))):
        t = read_table(path)
        if seq_lo is not None and t.num_rows:
            s = t.column("seq")
            t = t.filter(pc.and_(pc.greater_equal(s, seq_lo), pc.less(s, seq_hi)))
        tables.append(t)
    return merge_messages(tables, set(old_values)), old_values


def _output_task(parts: list, mode: str, schema: pa.Schema):
    def zone_output(batches):
        for rb in batches:
            for i in rb.column("id").to_pylist():
                p = parts[i]
                if p.error is not None:
                    yield _error_batch(schema, p.group_id, p.seq_lo, RuntimeError(p.error))
                    continue
                try:
                    if p.shard is None:
                        out, _ = _messages(p.folder, p.seq_lo, p.seq_hi)
                    else:
                        siblings = {q.shard.replica_id: q for q in parts if q.group_id == p.group_id and q.shard}
                        order = sorted(siblings, key=lambda rid: int(rid.rpartition("#s")[2]))
                        held = placement.held([siblings[rid].shard for rid in order])
                        p = siblings[order[placement.claim(p.folder, i, len(order),
                                                           held + [order.index(p.shard.replica_id)], kind="s")]]
                        keep_one_per_group(p.shard)
                        shard = materialize(p.shard)
                        messages, old_values = _messages(p.folder)
                        out = shard.unicast(messages, old_values)
                        remember(p.shard, p.shard.log_length, shard)   # no log: the next task hits
                except Exception as err:  # noqa: BLE001 - reported as a row, which the driver reads
                    yield _error_batch(schema, p.group_id, p.seq_lo, err)
                    continue
                yield from _conform(out, schema).to_batches()
    zone_output.__name__ = f"range_min_zones_{'merge' if mode == 'reformulated' else 'shards'}_{mode}"
    return zone_output


def output_frame(spark, parts: list, mode: str, schema: pa.Schema):
    """The zoned groups' notifications: one task per part (explicit partitions), lazily."""
    n = len(parts)
    return spark.range(0, n, 1, n).mapInArrow(_output_task(parts, mode, schema), _ddl(schema))
