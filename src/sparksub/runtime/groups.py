"""Thin Spark wrapper: run group operators inside Spark tasks (Arrow batches, ``mapInArrow``).

A group's state lives in files under the engine's directory (``runtime/replicas.py``): a *base* snapshot,
rebuilt only when subscriptions change or the log grows long, plus the *log* of update batches applied
since.  What a task needs is a :class:`~sparksub.runtime.replicas.Replica` -- the base's path, its id and
the log length, small whatever the group's size.  A Python worker caches the materialised group between
tasks, keyed by (engine, group) and checked against (base, log position), so a warm worker applies only the
new batch; a cold one (a new executor, a restarted worker, a recomputed partition) rebuilds from the files.
Either way the output is the same: the operator is deterministic, so recomputing a partition is safe.

One task per group replica (000 §2.3.2: a range-min group's updates are sequential -- each update's
classification depends on the previous ones; DS-CN, the distributed variant, is in docs/).  Which task runs
which replica is decided in the task (:func:`placed_frame`, ``runtime/placement.py``): it claims the replica its
Python worker already caches, since Spark binds no partition to a worker (PythonWorkerFactory hands idle workers
out FIFO) and a replica that lands on another worker is rebuilt.

Only DataFrame APIs Spark Connect has: a failed group is read from the checkpointed output (its ``op =
'error'`` row), not from an accumulator; the plan's text comes from :func:`plan_text`.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass

import pyarrow as pa

from sparksub.jvm.bridge import subscription_group
from sparksub.operators.shared import row_validation
from sparksub.runtime import keepalive, placement
from sparksub.runtime.connect import is_connect_session
from sparksub.runtime.replicas import _CACHE, Replica, keep_one_per_group, materialize, remember  # noqa: F401 (_CACHE: bench probe)

__all__ = ["materialize", "remember", "run_groups", "write_groups", "groups_frame", "plan_string", "plan_text",
           "failed_groups", "placed_frame", "split_batch", "plan_frame", "jobs_text", "one_row_batch", "counted"]


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in the job's output schema: the groups of one table may differ in columns (a FILTER
    group's rows carry the event, a range group's a value); what a group lacks is null."""
    return pa.table({f.name: table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema}, schema=schema)


def _error_batch(schema: pa.Schema, gid: str, seq: int, err: Exception, replica_id: str | None = None
                 ) -> pa.RecordBatch:
    """The ``op = 'error'`` row of group ``gid``; a failed shard or partition of it (``replica_id``) is named in
    the reason, the row's ``group_id`` stays the group's (DESIGN §7: what a user filters on)."""
    row = {f.name: [None] for f in schema}
    where = f"in {replica_id}: " if replica_id and replica_id != gid else ""
    row.update(group_id=[gid], op=["error"], seq=[seq], reason=[f"{where}{type(err).__name__}: {err}"])
    return pa.RecordBatch.from_pydict(row, schema=schema)


def _run_group(replica: Replica, table: pa.Table, mode: str, schema: pa.Schema, group_id: str | None = None):
    """One group's (replica's) rows, sorted by seq, through its operator: its notifications in ``schema``, or
    one ``op = 'error'`` row naming the failure (the driver reads the failed groups from those rows:
    :func:`failed_groups`), so that the other groups' notifications still come out (DESIGN §7).  ``group_id``:
    the group a shard or partition replica belongs to (default: the replica is the group)."""
    gid = group_id or replica.replica_id
    if "reason" in table.column_names:   # a stream's rows set aside upstream (stream_groups): emit them
        bad = pa.compute.is_valid(table.column("reason"))
        rejected = table.filter(bad)
        if rejected.num_rows:
            yield from row_validation.rejected_rows(schema, rejected.column("seq"),
                                                    rejected.column("reason").to_pylist()).to_batches()
        table = table.filter(pa.compute.invert(bad)).drop_columns(["reason"])
        if not table.num_rows:
            return
    try:
        if replica.one_per_worker:   # a sharded SELECT_JOIN's row partition, reformulated: as in stage 1's job
            keep_one_per_group(replica)
        group = materialize(replica)
        out = group.apply(table, mode)
    except Exception as err:  # noqa: BLE001 - reported as a row, which the driver reads
        yield _error_batch(schema, gid, int(table.column("seq")[0].as_py()), err, replica.replica_id)
        return
    # a stateless group (FILTER) logs nothing: it stays at the replica's position and the next task hits
    remember(replica, replica.log_length + (0 if getattr(group, "stateless", False) else 1), group)
    yield from _conform(out, schema).to_batches()


def _operator(replicas: dict[str, Replica], mode: str, schema: pa.Schema, name: str = "range_min_group",
              owners: dict[str, str] | None = None):
    """The task body of a hash-partitioned job (``stream_groups``): rows arrive grouped by group_id (a shard's
    replica id; ``owners``: replica id -> its group, which a failed shard's error row names)."""
    owners = owners or {}
    def range_min_group_operator(batches):
        pending: dict[str, list[pa.RecordBatch]] = {}
        for rb in batches:
            for gid in pa.compute.unique(rb.column("group_id")).to_pylist():
                part = rb.filter(pa.compute.equal(rb.column("group_id"), gid))
                pending.setdefault(gid, []).append(part)
        for gid, parts in pending.items():
            yield from _run_group(replicas[gid], pa.Table.from_batches(parts).sort_by("seq"), mode, schema,
                                  owners.get(gid))
    range_min_group_operator.__name__ = f"{name}_{mode}"  # what Spark's EXPLAIN prints
    return range_min_group_operator


# ---- placed jobs: one task claims each replica (runtime/placement.py) ------------------------------------

#: a job's replica batches up to this many bytes in all travel in the task closure; above, one Arrow file per
#: replica in the job's folder, which only the task that claims the replica reads (every task unpickles the
#: whole closure: measured here, a 1K-row batch (40 KB) pickles and unpickles in 0.3 ms against 0.5 ms to write
#: and read its file, a 10K-row one (400 KB) in 1.4 ms against 0.8 ms)
INLINE_BYTES = 1 << 17


@dataclass(frozen=True)
class _Placed:
    """What every task of a placed job gets: the replicas (by index), their batches (inline) or the folder's
    files, the claim board and the number of tasks."""

    replicas: tuple
    tables: tuple | None
    folder: str
    n_tasks: int
    holders: tuple


def placed_frame(spark, replicas: dict[str, Replica], tables: dict[str, pa.Table], body, ddl: str, name: str,
                 slots: int = 1, stage: bool = True):
    """``(DataFrame, folder)``: a job of explicit partitions (``spark.range(0, n, 1, n)``) in which each
    replica of ``tables`` (its batch, sorted as its operator takes it) runs in exactly one task, the one that
    claims it -- preferably a task whose Python worker already caches it (``placement.claim``).  Spark binds no
    partition to a worker: PythonWorkerFactory hands the idle workers out FIFO, so with a hash of the replica
    id (the previous plan) a replica ran on whichever worker came next, and rebuilt when that was not the one
    that held it.  ``slots`` (the keep-alive's, one per task slot): the job runs ``slots - 1`` tasks more than
    replicas, so that a single-replica group's job reaches the worker that holds it among the idle ones, and a
    task that finds only other workers' replicas left can leave them to those workers' next tasks; the tasks
    left without a replica end empty after the others (``placement.linger``).  ``body(replica, table)``
    yields the task's record batches.  ``stage`` False: nothing is written and no empty task added (a plan to
    show, not to run: EXPLAIN shows one partition per replica).  The caller removes ``folder`` once the job
    ran; ``tempfile`` holds the board of a job without replicas (an empty batch)."""
    rids = sorted(r for r, t in tables.items() if t.num_rows)
    reps = tuple(replicas[r] for r in rids)
    parts = [tables[r] for r in rids]
    # the job's board and batches: beside the first replica's base (one file system, as the replica files)
    folder = os.path.join(reps[0].directory if reps else tempfile.gettempdir(), "jobs", uuid.uuid4().hex)
    inline = not stage or sum(t.nbytes for t in parts) <= INLINE_BYTES
    if stage:
        os.makedirs(folder, exist_ok=True)
        if not inline:
            for j, t in enumerate(parts):
                write_table(os.path.join(folder, f"b{j}.arrow"), t)
    # slots - 1 tasks more than replicas: a task that lands on a worker holding none of the replicas left can
    # then wait for the one that holds it (placement.claim) instead of having to take it; a plan shown: one
    # partition per replica
    n = max(len(reps) + (max(int(slots), 1) - 1 if stage else 0), 1)
    spec = _Placed(reps, tuple(parts) if inline else None, folder, n,
                   tuple(placement.holder_path(r) for r in reps))

    def task(batches):
        for rb in batches:
            for i in rb.column("id").to_pylist():
                yield from _placed_task(spec, i, body)
    task.__name__ = name   # what Spark's EXPLAIN prints
    return spark.range(0, n, 1, n).mapInArrow(task, ddl), folder


def _placed_task(spec: _Placed, i: int, body):
    os.makedirs(spec.folder, exist_ok=True)
    j = placement.claim(spec.folder, i, len(spec.replicas), placement.held(spec.replicas), n_tasks=spec.n_tasks,
                        holders=spec.holders, note=spec.holders)
    if j is None:
        placement.linger(spec.folder, len(spec.replicas))
        return
    try:
        table = spec.tables[j] if spec.tables is not None else read_table(os.path.join(spec.folder, f"b{j}.arrow"))
        yield from body(spec.replicas[j], table)
    finally:   # even when the task fails: the job's empty tasks linger until every claimed replica is done
        placement.done(spec.folder, j)


def split_batch(batch: pa.Table, column: str, sort_keys: list, drop: bool = False) -> dict[str, pa.Table]:
    """``batch`` by the replica id in ``column`` (``drop``: without it), each part sorted by ``sort_keys``."""
    if not batch.num_rows:
        return {}
    ids = batch.column(column)
    out = {}
    for rid in pa.compute.unique(ids).to_pylist():
        part = batch.filter(pa.compute.equal(ids, rid))
        part = part.drop_columns([column]) if drop else part
        out[rid] = part.sort_by([(k, "ascending") for k in sort_keys]).combine_chunks()
    return out


def write_table(path: str, table: pa.Table) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with pa.OSFile(tmp, "wb") as fh, pa.ipc.new_file(fh, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)


def read_table(path: str) -> pa.Table:
    with pa.OSFile(path) as fh:
        return pa.ipc.open_file(fh).read_all()


def remove_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def run_groups(spark, replicas: dict[str, Replica], batch: pa.Table, mode: str, schema: pa.Schema,
               name: str = "range_min_group", describe: str | None = None, slots: int | None = None,
               owners: dict[str, str] | None = None):
    """Run ``batch`` (columns group_id, key, x, y, op, seq) through each group's operator in Spark.

    Returns ``(DataFrame, failed group ids)``; the DataFrame is checkpointed locally (Spark Connect has
    ``localCheckpoint`` too), so the operator runs exactly once per call, and the failed groups are read
    from its ``error`` rows: that read is the one job, which computes the checkpointed partitions (kept for
    every later action; a lazy local checkpoint saves a second job).  Each replica runs in the task that
    claims it (:func:`placed_frame`), whose batch the job's folder holds until the job ran.  ``schema`` must
    end with the nullable ``reason`` column; ``slots``: the least number of tasks (default: the session
    keep-alive's, ``keepalive.slots_of``); ``owners``: replica id -> its group, for a shard's or a partition's
    error row.  ``publish`` uses :func:`write_groups` when only whole groups run.
    """
    df, folder = _placed(spark, replicas, batch, mode, schema, name, describe, slots, stage=True, owners=owners)
    try:
        out = df.localCheckpoint(eager=False)
        return out, failed_groups(out)
    finally:
        remove_folder(folder)


def write_groups(spark, replicas: dict[str, Replica], batch: pa.Table, mode: str, schema: pa.Schema, path,
                 names: list[str], sync: bool, failed: set, name: str = "range_min_group",
                 slots: int | None = None, owners: dict[str, str] | None = None) -> int:
    """:func:`run_groups`'s job whose tasks also keep their output: each writes its replica's notifications,
    under the output's column ``names``, as one part of the kept directory ``path`` (``output.write_directory``)
    and sends back only its row count and failed groups (added to ``failed``).  One job and one Python worker
    per task: the operators run once, their output goes from their tasks to the kept files, and no second
    worker of the task takes the replica's holder from placement by claim (``output.py``).  Returns the rows."""
    from sparksub.runtime import output

    if slots is None:
        slots = keepalive.slots_of(spark) or 1
    tables = split_batch(batch, "group_id", ["seq"])
    index = {rid: j for j, rid in enumerate(sorted(tables))}   # part files in replica order, as run_groups' rows

    def fill(folder) -> int:
        def body(replica: Replica, table: pa.Table):
            parts = [b for b in _run_group(replica, table, mode, schema, (owners or {}).get(replica.replica_id))
                     if b.num_rows]
            rows, bad = 0, []
            if parts:
                out = pa.Table.from_batches(parts).rename_columns(names)
                bad = output.write_part(folder, f"part-{index[replica.replica_id]:05d}.parquet", out, sync)
                rows = out.num_rows
            yield pa.RecordBatch.from_pydict({"rows": [rows], "failed": [bad]}, schema=output.WRITTEN)
        df, board = placed_frame(spark, replicas, tables, body, "rows bigint, failed array<string>",
                                 f"{name}_{mode}", slots)
        try:
            counts = df.collect()
        finally:
            remove_folder(board)
        failed.update(g for r in counts for g in (r[1] or ()))
        return sum(r[0] for r in counts)
    return output.write_directory(path, sync, fill,
                                  lambda: pa.schema([f.with_name(n) for f, n in zip(schema, names)]))


#: (session id, DDL) -> an empty DataFrame of those columns (:func:`groups_frame`): bounded, and checked against its
#: session (an id can be reused once a session is gone)
_EMPTY_FRAMES: dict = {}
_EMPTY_FRAMES_KEPT = 64


def groups_frame(spark, schema: pa.Schema):
    """An empty DataFrame with :func:`run_groups`'s columns and types, for a publish whose output
    :func:`write_groups` writes: only its schema is read.  Not the placed plan itself: building a
    ``mapInArrow`` (pickling and broadcasting the task) cost 0.17 s of a 100K-row publish for nothing.  Made once
    per session and columns: ``createDataFrame`` costs ~70 ms a call (a JVM round trip and a plan)."""
    ddl = _ddl(schema)
    key = (id(spark), ddl)
    df = _EMPTY_FRAMES.get(key)
    if df is None or df.sparkSession is not spark:
        if len(_EMPTY_FRAMES) >= _EMPTY_FRAMES_KEPT:
            _EMPTY_FRAMES.clear()
        df = _EMPTY_FRAMES[key] = spark.createDataFrame([], ddl)
    return df


def failed_groups(df) -> set:
    """The ``group_id`` of every ``op = 'error'`` row of ``df`` (a checkpointed output: a small job)."""
    from pyspark.sql import functions as F
    return {r[0] for r in df.where(F.col("op") == "error").select("group_id").collect()}


def plan_string(spark, replicas: dict[str, Replica], batch: pa.Table, mode: str, schema: pa.Schema,
                name: str = "range_min_group", describe: str | None = None) -> str:
    """Spark's physical plan for running ``batch`` through the groups (not executed)."""
    return plan_text(plan_frame(spark, replicas, batch, mode, schema, name, describe))


def plan_frame(spark, replicas: dict[str, Replica], batch: pa.Table, mode: str, schema: pa.Schema,
               name: str = "range_min_group", describe: str | None = None):
    """The DataFrame of :func:`run_groups`' job over ``batch`` (nothing written, not to run): one partition per
    replica with rows in ``batch`` -- what EXPLAIN shows of a group's job."""
    return _placed(spark, replicas, batch, mode, schema, name, describe, stage=False)[0]


def one_row_batch() -> pa.Table:
    """A one-row batch: a placed job gives a replica a partition only when its batch has rows (a job whose tasks
    read no batch; a plan EXPLAIN shows, never run)."""
    return pa.table({"seq": pa.array([0], pa.int64())})


def counted(n: int, noun: str) -> str:
    """``n noun``, the noun plural unless ``n`` is 1 (a job's heading in EXPLAIN: "1 subscription shard").

    >>> counted(1, "X zone"), counted(2, "subscription shard")
    ('1 X zone', '2 subscription shards')
    """
    return f"{n} {noun}{'' if n == 1 else 's'}"


def jobs_text(jobs: list) -> str:
    """EXPLAIN's Spark section: ``jobs``, ``[(what, frame)]`` in the order a publish runs them, ``frame()`` the job's
    DataFrame (never executed).  One job whose ``what`` is None (a whole group): its plan alone; else each plan under
    ``-- job i of n: what --``.  A job whose plan cannot be built says why, in its place; the others still show
    (EXPLAIN must not fail because Spark is unavailable)."""
    out = []
    for i, (what, frame) in enumerate(jobs, 1):
        try:
            text = plan_text(frame())
        except Exception as err:  # noqa: BLE001 - said in the job's place
            text = f"(Spark plan unavailable: {err})"
        out.append(text if what is None and len(jobs) == 1 else f"-- job {i} of {len(jobs)}: {what} --\n{text}")
    return "\n".join(t.rstrip("\n") for t in out)


def plan_text(df) -> str:
    """``df``'s physical plan as text: the executed plan's tree on a classic session (through the JVM), the
    ``simple`` EXPLAIN's physical plan on Spark Connect (which has no ``_jdf``)."""
    if is_connect_session(df.sparkSession):
        text = df._explain_string(mode="simple")
        head = "== Physical Plan =="
        return text.split(head, 1)[1].strip("\n") + "\n" if head in text else text
    return df._jdf.queryExecution().executedPlan().treeString()


def _placed(spark, replicas, batch: pa.Table, mode: str, schema: pa.Schema, name: str = "range_min_group",
            describe: str | None = None, slots: int | None = None, stage: bool = True,
            owners: dict[str, str] | None = None):
    # One task per group replica, its rows in seq order (split on the driver: a task reads only its own).
    if slots is None:
        slots = keepalive.slots_of(spark) or 1
    tables = split_batch(batch, "group_id", ["seq"])
    owners = owners or {}
    df, folder = placed_frame(spark, replicas, tables,
                              lambda r, t: _run_group(r, t, mode, schema, owners.get(r.replica_id)), _ddl(schema),
                              f"{name}_{mode}", slots, stage)
    return subscription_group(df, describe), folder


def stream_groups(events, replicas: dict[str, Replica], mode: str, schema: pa.Schema,
                  name: str = "filter_group", owners: dict[str, str] | None = None):
    """Stateless groups (FILTER) over a streaming DataFrame of events (columns group_id-free:
    the batch columns but ``group_id``; with a ``reason`` column, the rows that have one come out once as
    ``rejected``).  Every event goes to every shard (001 is stateless per
    event: shards only split the subscriptions), one partition per shard, as ``run_groups``;
    nothing is kept between micro-batches, so no state store is involved.  ``owners``: replica id -> its group
    (a failed shard's error row names its group, the shard in its reason, as in a publish)."""
    from pyspark.sql import functions as F
    rids = sorted(replicas)
    shards = F.array(*[F.lit(r) for r in rids])
    if "reason" in events.columns:   # rows set aside upstream (their reason): to the first shard, which emits them
        shards = F.when(F.col("reason").isNull(), shards).otherwise(F.array(F.lit(rids[0])))
    df = events.withColumn("group_id", F.explode(shards))
    df = df.repartition(max(len(rids), 1), "group_id")
    return df.mapInArrow(_operator(replicas, mode, schema, name, owners), _ddl(schema))


def _ddl(schema: pa.Schema) -> str:
    names = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int8(): "tinyint",
             pa.bool_(): "boolean", pa.timestamp("us"): "timestamp", pa.date32(): "date"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)
