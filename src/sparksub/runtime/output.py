"""The publish output the engine keeps in its directory (``journal.py``): a notifications DataFrame written by
the Spark tasks that hold it, and kept files read back as a DataFrame.

``publish`` hands its output here once it is computed.  In the common case -- only groups run whole, no
row set aside -- the tasks that run the group operators write their own parts (``groups.write_groups``): one
job, no checkpoint of the output and no second job to write it (those cost 0.5-0.8 s of a 4.5 s publish of
100K rows, measured here).  Otherwise the runtime checkpointed the output and :func:`write_notifications`
writes it in a job of its own: a writer over the operators' frame in the same stage would run in a second
Python worker of each task, taken from the same FIFO of idle workers, and break placement by claim
(``runtime/placement.py``: the holder of a replica would be handed to a writer).  Each task writes its
partition as one Parquet file (temporary name, then rename) into a directory that is renamed into place when
every task is done; the driver receives one row count per partition and the groups whose operator failed
(their ``op = 'error'`` rows), never the rows (issue 16 item 3: at 1M unicast subscriptions collecting the
output on the driver ran its JVM out of heap).  Spark's own writer would cost a commit protocol per call
(about 5x the time for a publish-sized output, measured here); a retried or speculative task rewrites the
same file with the same rows, so the directory is the same whichever attempt wins.
"""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from sparksub.journal import fsync_dir, read_kept, write_parquet_atomic

__all__ = ["write_notifications", "write_directory", "write_part", "read_written", "read_notifications"]

#: the file a publish without rows keeps: its schema, so that the directory reads as a table
EMPTY_PART = "part-empty.parquet"


#: what each writing task returns: its rows, and the ``group_id`` of its ``op = 'error'`` rows
WRITTEN = pa.schema([("rows", pa.int64()), ("failed", pa.list_(pa.string()))])


def _partition_writer(folder: str, names: list[str], sync: bool):
    """The task body: this partition's rows, under their ``names``, into ``folder/part-<partition>.parquet``;
    yields its row count and the groups of its ``error`` rows."""
    def write_partition(batches):
        from pyspark import TaskContext
        batches = [b for b in batches if b.num_rows]
        failed = []
        if batches:
            part = TaskContext.get().partitionId()
            table = pa.Table.from_batches(batches).rename_columns(names)
            failed = write_part(folder, f"part-{part:05d}.parquet", table, sync)
        yield pa.RecordBatch.from_pydict({"rows": [sum(b.num_rows for b in batches)], "failed": [failed]},
                                         schema=WRITTEN)
    return write_partition


def write_notifications(df, path, sync: bool = True, failed: set | None = None) -> int:
    """Write the notifications DataFrame ``df`` from its tasks into the directory ``path`` (one Parquet file
    per non-empty partition; ``EMPTY_PART`` when there is no row); returns its rows.  ``sync``: fsync the
    files and the directories (a durable engine).  ``failed``: a set to which the ``group_id`` of every
    ``op = 'error'`` row is added (a group whose operator failed in this job).  A directory left at ``path``
    by a publish that never committed (a kill) is replaced: committed names are never reused
    (``journal.publish_begin``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    def fill(tmp: Path) -> int:
        # positional names into the task: mapInArrow resolves the columns by name, and a join's selected
        # columns are qualified (``stock.symbol``), which it would read as a struct field
        names = df.columns
        positional = df.toDF(*[f"_{i}" for i in range(len(names))])
        counts = positional.mapInArrow(_partition_writer(str(tmp), names, sync),
                                       "rows bigint, failed array<string>").collect()
        if failed is not None:
            failed.update(g for r in counts for g in (r[1] or ()))
        return sum(r[0] for r in counts)
    return write_directory(path, sync, fill, lambda: to_arrow_schema(df.schema))


def write_directory(path, sync: bool, fill, empty_schema) -> int:
    """Make the kept directory ``path``: ``fill(folder)`` writes its part files into a temporary folder and
    returns their rows (``EMPTY_PART``, of ``empty_schema()``, when none), which is then renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.mkdir()
    try:
        rows = fill(tmp)
        if not rows:
            write_parquet_atomic(tmp / EMPTY_PART, empty_schema().empty_table(), sync)
        if sync:
            fsync_dir(tmp)
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if sync:
        fsync_dir(path.parent)
    return rows


def write_part(folder, name: str, table: pa.Table, sync: bool) -> list:
    """One task's part file of a kept directory (``folder/name``): the groups of its ``op = 'error'`` rows."""
    failed = []
    if "op" in table.column_names and "group_id" in table.column_names:
        errors = table.filter(pc.equal(table.column("op"), "error"))
        failed = sorted(set(errors.column("group_id").drop_null().to_pylist()))
    write_parquet_atomic(Path(folder) / name, table, sync)
    return failed


def read_written(spark, path, schema):
    """The output :func:`write_notifications` just kept at ``path``, as a DataFrame of the Spark ``schema`` it
    was written with (given, so that reading it infers nothing: no footer is read before an action), its rows
    in the order the writing job's partitions held them: one read per file, in partition order, unioned --
    Spark's file scan would pack the files largest first, and a reformulated output is in batch order
    (``deliver()`` and the callers read a seq's messages in the core's order)."""
    from functools import reduce
    files = sorted(p.name for p in Path(path).iterdir() if p.name.startswith("part-"))
    reads = [spark.read.schema(schema).parquet(str(Path(path) / f)) for f in files]
    return reduce(lambda a, b: a.union(b), reads)


def read_notifications(spark, files: list[str], since_seq: int | None, empty: pa.Schema):
    """The rows of the kept ``files`` (a publish's directory, or a single file as engines before issue 16 item 3
    kept them) as one DataFrame (columns merged by name; a column a file lacks is null), those with ``seq >=
    since_seq`` (and rows without a ``seq``: a replica's ``error`` row) when it is given; ``empty``: the schema
    when there is no file.  Lazy, as any file source: read it before the retention window passes the files
    (``Engine.notification_retention_rows``)."""
    from pyspark.sql import functions as F
    if not files:
        from sparksub.runtime.frames import empty_frame
        return empty_frame(spark, empty)
    try:
        df = spark.read.option("mergeSchema", "true").parquet(*files)
    except Exception:  # noqa: BLE001 - Spark cannot merge a column typed differently across files: Arrow can
        tables = [read_kept(f) for f in files]
        df = spark.createDataFrame(pa.concat_tables(tables, promote_options="permissive").combine_chunks())
    if since_seq is not None:
        df = df.where((F.col("seq") >= F.lit(int(since_seq))) | F.col("seq").isNull())
    return df

