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
* The other two reformulated variants.  **CN+** (000 §2.2.2): the zones' round 1 writes CN+'s messages (the
  updates themselves, ``cn_plus_round1``; no round 2), merged per range of seqs as S-CN's are.  **S-MN** (000
  §2.1.2): a message lists every subscription that takes one new value in one update, and those may sit in
  several shards, so one more job runs between round 2 and the output (:func:`run_shard_entries`, collected):
  one task per subscription shard writes its S-UN entries, with each subscription's registry slot
  (``ShardOperator.multicast_entries``); then one task per range of seqs merges every shard's entries into
  S-MN's messages (``merge_multicast``: the whole group's messages, its ``targets`` lists in its order).

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

from sparksub.operators.range_min.group import CN_PLUS_SCHEMA
from sparksub.operators.range_min.subscription_shards import merge_multicast
from sparksub.operators.range_min.zones import merge_messages, steps_table
from sparksub.operators.shared.schemas import MESSAGE_SCHEMA
from sparksub.runtime import placement
from sparksub.runtime.groups import _conform, _ddl, _error_batch, read_table, write_table
from sparksub.runtime.replicas import Replica, keep_one_per_group, materialize, remember

__all__ = ["ZoneTask", "OutputPart", "run_round1", "run_shard_entries", "output_frame", "write_table", "read_table",
           "ROUND2_FILE", "META_FILE", "S_CN", "S_MN", "CN_PLUS", "round1_frame"]

BATCH_FILE = "batch.arrow"
ROUND2_FILE = "m-round2.arrow"
META_FILE = "meta.pickle"       # the X-moves' old Y by seq (unicast's no-op rule; fix_steps' moved set)
#: what a reformulated part merges (``OutputPart.form``): S-CN's or CN+'s messages, or S-MN's shard entries
S_CN, S_MN, CN_PLUS = "S-CN", "S-MN", "CN+"


@dataclass(frozen=True)
class ZoneTask:
    """One round-1 task: a zone's replica, the group's whole batch and where its messages go."""

    group_id: str
    zone: int
    maximum: bool
    replica: Replica
    folder: str          # the publish's folder for this group: batch.arrow in, m-<zone>.arrow out
    cn_plus: bool = False   # write CN+'s messages (000 §2.2.2), not S-CN's


@dataclass(frozen=True)
class OutputPart:
    """One output task: merge ``folder``'s messages for seqs ``[seq_lo, seq_hi)`` (reformulated: ``form``
    S-CN or CN+; S-MN merges the shards' entries instead), or match them against one subscription shard
    (unicast: ``shard``; the S-MN shard job's tasks are parts with a ``shard`` too); ``error``: the group
    failed in round 1 or in a shard (one ``op = 'error'`` row)."""

    group_id: str
    folder: str
    seq_lo: int = 0
    seq_hi: int = 0
    shard: Replica | None = None
    error: str | None = None
    form: str = S_CN
    maximum: bool = False


def _task_place() -> dict:
    """Where a task ran: its partition and process (stats: one zone per task, each executor's share)."""
    try:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else None
    except ImportError:
        part = None
    return {"partition": part, "pid": os.getpid(), "executor": os.environ.get("SPARK_EXECUTOR_ID")}


def _collected_frame(spark, n: int, body, name: str):
    """:func:`_collected`'s job, not run: one task per part ``0..n-1`` (explicit partitions), each returning
    ``body(part)``, a small record, pickled to the driver; a part that raises returns ``{"error": ..., **fields}``
    (``body.fields(part)``: what names it), which the driver turns into the group's 'error' row (DESIGN §7).
    EXPLAIN shows this frame's plan (``control/zones.py``)."""
    def task(batches):
        for rb in batches:
            for i in rb.column("id").to_pylist():
                try:
                    rec = body(i)
                except Exception as err:  # noqa: BLE001 - reported to the driver: the group's 'error' row
                    rec = {**body.fields(i), "error": f"{type(err).__name__}: {err}", **_task_place()}
                yield pa.RecordBatch.from_pydict(
                    {"part": [i], "payload": [pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)]},
                    schema=pa.schema([("part", pa.int64()), ("payload", pa.binary())]))
    task.__name__ = name
    return spark.range(0, n, 1, n).mapInArrow(task, "part bigint, payload binary")


def _collected(spark, n: int, body, name: str) -> list[dict]:
    """:func:`_collected_frame`'s job run: the records, by part."""
    out: list = [None] * n
    for r in _collected_frame(spark, n, body, name).collect():
        out[r["part"]] = pickle.loads(r["payload"])
    return out


class _Part:
    """A :func:`_collected` job's work on part i of ``items``; ``field``: the item's attribute naming it in an error
    record."""

    field = ""

    def __init__(self, items: list):
        self.items = items

    def fields(self, i: int) -> dict:
        return {self.field: getattr(self.items[i], self.field)}


class _Round1(_Part):
    """Round 1 of task ``i``'s zone."""

    field = "zone"

    def __call__(self, i: int) -> dict:
        tasks = self.items
        t = tasks[i]
        # the zone this task's worker holds, else its own, else any left (placement.claim: one task per zone;
        # Spark gives these partitions no worker affinity)
        siblings = {u.zone: u for u in tasks if u.group_id == t.group_id}
        order = sorted(siblings)
        held = placement.held([siblings[z].replica for z in order])
        t = siblings[order[placement.claim(t.folder, i, len(order), held + [order.index(t.zone)], kind="z")]]
        batch = read_table(os.path.join(t.folder, BATCH_FILE))
        keep_one_per_group(t.replica)
        op = materialize(t.replica)
        steps = op.route(batch)
        # the zone's log entry: its own steps (a retried task rewrites the same file); the driver advances the
        # replica past it only when the publish commits
        t.replica.append(steps_table(batch, steps))
        msgs, r1 = op.round1_messages(steps, t.cn_plus)
        write_table(os.path.join(t.folder, f"m-{t.zone}.arrow"), msgs)
        remember(t.replica, t.replica.log_length + 1, op)
        return {"zone": t.zone, "round1": r1, "steps": len(steps), "rows": len(op.zone),
                "stats": dict(op.zone.stats), "core": dict(op.zone.core.counters), **_task_place()}


#: round 1's task, as Spark's EXPLAIN prints it
ROUND1_NAME = "range_min_zones_round1"


def run_round1(spark, tasks: list) -> list[dict]:
    """Round 1 of every zone of ``tasks`` (one task each, explicit partitions); their records (``zone``: the zone
    the task claimed), by task.  Sort a group's records by ``zone``."""
    return _collected(spark, len(tasks), _Round1(tasks), ROUND1_NAME)


def round1_frame(spark, tasks: list):
    """:func:`run_round1`'s job, not run: what EXPLAIN shows of a zoned group's round 1 (placeholder tasks do)."""
    return _collected_frame(spark, len(tasks), _Round1(tasks), ROUND1_NAME)


def _tables(folder: str, pattern: str, seq_lo: int | None, seq_hi: int | None) -> list:
    """The tables of ``folder`` named ``pattern``; only their seqs in ``[seq_lo, seq_hi)`` when given."""
    tables = []
    for path in sorted(glob.glob(os.path.join(folder, pattern))):
        t = read_table(path)
        if seq_lo is not None and t.num_rows:
            s = t.column("seq")
            t = t.filter(pc.and_(pc.greater_equal(s, seq_lo), pc.less(s, seq_hi)))
        tables.append(t)
    return tables


def _messages(folder: str, seq_lo: int | None = None, seq_hi: int | None = None,
              form: str = S_CN) -> tuple[pa.Table, dict]:
    """Every zone's round-1 messages and round 2's, merged into batch order (``merge_messages``), and the
    X-moves' old values; only seqs in ``[seq_lo, seq_hi)`` when given."""
    with open(os.path.join(folder, META_FILE), "rb") as fh:
        old_values = pickle.load(fh)
    schema = CN_PLUS_SCHEMA if form == CN_PLUS else MESSAGE_SCHEMA
    return merge_messages(_tables(folder, "m-*.arrow", seq_lo, seq_hi), set(old_values), schema), old_values


def _claimed_shard(parts: list, i: int, kind: str):
    """The part (one of its group's shards) task ``i`` runs: the shard this task's worker holds, else its own,
    else any left (``placement.claim``: one task per shard; Spark gives these partitions no worker affinity)."""
    p = parts[i]
    siblings = {q.shard.replica_id: q for q in parts if q.group_id == p.group_id and q.shard}
    order = sorted(siblings, key=lambda rid: int(rid.rpartition("#s")[2]))
    held = placement.held([siblings[rid].shard for rid in order])
    return siblings[order[placement.claim(p.folder, i, len(order), held + [order.index(p.shard.replica_id)],
                                          kind=kind)]]


class _ShardEntries(_Part):
    """S-MN: the S-UN entries of task ``i``'s subscription shard."""

    field = "group_id"

    def __call__(self, i: int) -> dict:
        p = _claimed_shard(self.items, i, "t")
        index = int(p.shard.replica_id.rpartition("#s")[2])   # its entries' file: t-<shard>
        keep_one_per_group(p.shard)
        shard = materialize(p.shard)
        messages, old_values = _messages(p.folder)
        entries = shard.multicast_entries(messages, old_values)
        write_table(os.path.join(p.folder, f"t-{index}.arrow"), entries)
        remember(p.shard, p.shard.log_length, shard)   # no log: the next task hits
        return {"group_id": p.group_id, "shard": index, "entries": entries.num_rows, **_task_place()}


def run_shard_entries(spark, parts: list) -> list[dict]:
    """S-MN's shard job: one task per subscription shard of ``parts`` (``OutputPart`` with ``shard``), each writing
    its S-UN entries (``t-<shard>.arrow``) for the output's merge; their records (``error`` when one failed)."""
    return _collected(spark, len(parts), _ShardEntries(parts), "range_min_zones_shards_multicast")


def _output_task(parts: list, mode: str, schema: pa.Schema):
    def zone_output(batches):
        for rb in batches:
            for i in rb.column("id").to_pylist():
                p = parts[i]
                if p.error is not None:
                    yield _error_batch(schema, p.group_id, p.seq_lo, RuntimeError(p.error))
                    continue
                try:
                    if p.shard is None and p.form == S_MN:   # the shards' entries, written by run_shard_entries
                        out = merge_multicast(_tables(p.folder, "t-*.arrow", p.seq_lo, p.seq_hi), p.group_id,
                                              p.maximum)
                    elif p.shard is None:
                        out, _ = _messages(p.folder, p.seq_lo, p.seq_hi, p.form)
                    else:
                        p = _claimed_shard(parts, i, "s")
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
