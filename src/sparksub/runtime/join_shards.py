"""SELECT_JOIN groups with their subscriptions split into shards, in Spark (issue 16 item 4): the two stages of a
``unicast`` publish.  The pure parts are ``operators/joins/shards.py`` (a shard, its R-tree of rectangles) and the
row partitions of ``operators/joins/group.py``; the driver's orchestration is ``control/join_shards.py``.

* **Stage 1** (:func:`run_row_partitions`, one job, collected): one task per row partition (``groups.placed_frame``:
  explicit partitions, each replica claimed by exactly one task, preferably the one whose worker caches it; one
  replica per task).  A row partition holds R and S rows by a hash of the join value and **no subscription**; its
  task applies the partition's part of the batch in ``reformulated`` form and writes the messages (000 §4: one per
  result tuple of δ ⋈ partner) to ``<publish folder>/m-<partition>.arrow``.  It returns only a failure, if any.
  (In ``reformulated`` mode these messages are the output, and the row partitions run in publish's ordinary job:
  no second stage.)
* **Stage 2** (:func:`output_frame`, lazy, checkpointed by the caller): one task per subscription shard (explicit
  partitions ``spark.range(0, n, 1, n)``, the shard claimed through ``placement.claim``: never two in one task).
  Each reads every row partition's messages of the publish and matches them against its own subscriptions (the
  shard's replica: its rectangles in an R-tree, cached by the worker like any replica), emitting the unicast rows.

A Python worker keeps one row partition and one shard per group (``replicas.keep_one_per_group``, as the zones), so
an executor holds its share of the group, not all of it.

Only DataFrame APIs Spark Connect has; files under the engine's directory carry the messages between the stages
(one file system, as for every replica: docs/architecture.md).
"""
from __future__ import annotations

import glob
import os
import shutil
import uuid
from dataclasses import dataclass

import pyarrow as pa

from sparksub.operators.distinct.zones import merge_closed
from sparksub.operators.shared.range_zones import merge_zone_messages
from sparksub.runtime import placement
from sparksub.runtime.groups import (
    _conform,
    _ddl,
    _error_batch,
    placed_frame,
    read_table,
    remove_folder,
    write_table,
)
from sparksub.runtime.replicas import Replica, keep_one_per_group, materialize, remember

__all__ = ["ShardPart", "answer_file", "messages_in", "output_frame", "publish_folder", "row_partitions_frame",
           "run_row_partitions", "zone_messages"]

_STAGE1_SCHEMA = pa.schema([("replica", pa.string()), ("error", pa.string()), ("messages", pa.int64())])


@dataclass(frozen=True)
class ShardPart:
    """One stage-2 task: match ``folder``'s messages against one subscription shard (``shard``; None: the messages
    are the output); ``error``: the group failed in stage 1 (one ``op = 'error'`` row, ``seq`` its batch's
    first)."""

    group_id: str
    folder: str
    seq: int = 0
    shard: Replica | None = None
    error: str | None = None


def publish_folder(directory, group_id: str) -> tuple[str, object]:
    """A new folder for one publish's messages of a sharded group (``groups/<group>/publish/<id>``, under the engine's
    ``directory``), the folders of earlier publishes removed (a failed one's); and ``first_seq(batch)``, the seq of
    the group's ``op = 'error'`` row should it fail."""
    shutil.rmtree(directory.area("groups", group_id, "publish"), ignore_errors=True)
    return str(directory.area("groups", group_id, "publish", uuid.uuid4().hex)), _first_seq


def _first_seq(batch: pa.Table) -> int:
    seqs = batch.column("seq").to_numpy()
    return int(seqs.min()) if seqs.size else 0


def _message_file(folder: str, replica: Replica) -> str:
    return os.path.join(folder, f"m-{replica.replica_id.rpartition('#')[2]}.arrow")


def _row_partition_body(folders: dict, mode: str = "reformulated"):
    def body(replica: Replica, table: pa.Table):
        try:
            keep_one_per_group(replica)   # one row partition per group in a worker: an executor holds its share
            group = materialize(replica)
            prepare = getattr(group, "prepare", None)   # a top-k zone's halos, from the edges written before
            if prepare is not None:
                prepare(folders[replica.replica_id])
            messages = group.apply(table, mode)   # 000 §4: the messages, whatever the subscriptions
            write_table(_message_file(folders[replica.replica_id], replica), messages)
            remember(replica, replica.log_length + 1, group)   # the driver logs the batch when the publish commits
            row = {"replica": [replica.replica_id], "error": [None], "messages": [messages.num_rows]}
        except Exception as err:  # noqa: BLE001 - reported to the driver: the group's 'error' row
            row = {"replica": [replica.replica_id], "error": [f"{type(err).__name__}: {err}"], "messages": [0]}
        yield pa.RecordBatch.from_pydict(row, schema=_STAGE1_SCHEMA)
    return body


def run_row_partitions(spark, replicas: dict, tables: dict, folders: dict, slots: int = 1,
                       name: str = "select_join_row_partitions_reformulated", mode: str = "reformulated") -> dict:
    """Stage 1 of every sharded group's row partitions (``tables``: replica id -> its part of the batch, sorted by
    seq; ``folders``: replica id -> the group's publish folder): ``{replica id: (error or None, messages)}`` of
    the partitions that ran.  (A sharded range group's rows run here too: ``runtime/range_shards.py``; ``mode``:
    the reformulated form they apply the batch in, a variant in it.)"""
    df, board = row_partitions_frame(spark, replicas, tables, folders, slots, name, mode)
    try:
        return {r["replica"]: (r["error"], r["messages"]) for r in df.collect()}
    finally:
        remove_folder(board)


def row_partitions_frame(spark, replicas: dict, tables: dict, folders: dict, slots: int = 1,
                         name: str = "select_join_row_partitions_reformulated", mode: str = "reformulated",
                         stage: bool = True):
    """:func:`run_row_partitions`'s job, ``(DataFrame, board folder)`` (``groups.placed_frame``); ``stage`` False:
    nothing written, not to run -- the plan EXPLAIN shows, one partition per replica with a batch."""
    return placed_frame(spark, replicas, tables, _row_partition_body(folders, mode), _ddl_of(_STAGE1_SCHEMA),
                        name, slots, stage)


def messages_in(folder: str) -> pa.Table | None:
    """Every row partition's messages of one publish (None: none was written); a range group's X zones' merged in
    the whole group's order (``range_zones.merge_zone_messages``), a DISTINCT zone's open Mar ends closed first with
    the second round's answers where it wrote them (``distinct/zones.py``: ``a-r<i>.arrow``)."""
    answers = sorted(glob.glob(os.path.join(folder, "a-*.arrow")))
    if answers:
        return merge_closed(zone_messages(folder), [read_table(p) for p in answers])
    return merge_zone_messages([read_table(p) for p in sorted(glob.glob(os.path.join(folder, "m-*.arrow")))])


def zone_messages(folder: str) -> dict:
    """A zoned range group's round-1 messages of one publish: zone index -> its table (``m-r<i>.arrow``)."""
    return {int(os.path.basename(p)[3:-6]): read_table(p) for p in glob.glob(os.path.join(folder, "m-r*.arrow"))}


def answer_file(folder: str, zone: int) -> str:
    """Where a DISTINCT zone writes its second round's answers (read by :func:`messages_in`)."""
    return os.path.join(folder, f"a-r{zone}.arrow")


def _shard_task(parts: list, schema: pa.Schema):
    def select_join_shards_unicast(batches):
        for rb in batches:
            for i in rb.column("id").to_pylist():
                p = parts[i]
                if p.error is not None:
                    yield _error_batch(schema, p.group_id, p.seq, RuntimeError(p.error))
                    continue
                if p.shard is None:   # no second stage: the messages are the output (runtime/range_shards.py)
                    messages = messages_in(p.folder)
                    if messages is not None and messages.num_rows:
                        yield from _conform(messages, schema).to_batches()
                    continue
                try:
                    # the shard this task's worker holds, else its own, else any left (placement.claim: one task
                    # per shard; Spark gives these partitions no worker affinity)
                    siblings = [q for q in parts if q.group_id == p.group_id and q.shard is not None]
                    held = placement.held([q.shard for q in siblings])
                    p = siblings[placement.claim(p.folder, i, len(siblings),
                                                 held + [siblings.index(p)], kind="q")]
                    keep_one_per_group(p.shard)   # and one subscription shard
                    shard = materialize(p.shard)
                    messages = messages_in(p.folder)
                    out = shard.unicast(messages) if messages is not None else None
                    # a stateless shard has no log: the next task hits; a stateful one (a range group's
                    # subscribers) moved one step, which the driver logs when the publish commits
                    step = 0 if getattr(shard, "stateless", False) or messages is None else 1
                    remember(p.shard, p.shard.log_length + step, shard)
                except Exception as err:  # noqa: BLE001 - reported as a row, which the driver reads
                    yield _error_batch(schema, p.group_id, p.seq, err)
                    continue
                if out is not None and out.num_rows:
                    yield from _conform(out, schema).to_batches()
    return select_join_shards_unicast


def output_frame(spark, parts: list, schema: pa.Schema, name: str = "select_join_shards_unicast"):
    """The sharded groups' unicast rows: one task per shard (explicit partitions), lazily; ``name``: what Spark's
    EXPLAIN prints for the task."""
    n = len(parts)
    task = _shard_task(parts, schema)
    task.__name__ = name
    return spark.range(0, n, 1, n).mapInArrow(task, _ddl(schema))


def _ddl_of(schema: pa.Schema) -> str:
    return ", ".join(f"`{f.name}` {'bigint' if f.type == pa.int64() else 'string'}" for f in schema)

