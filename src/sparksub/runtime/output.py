"""The publish output the engine keeps in its directory (``journal.py``): a notifications DataFrame written as
one Parquet file, and kept files read back as a DataFrame.

``publish`` hands its output here once it is computed (the runtime checkpointed it: writing it does not
run the operators again).  It is collected to Arrow and written as one file, temporary name then rename
(``journal.write_parquet_atomic``): one small job, where Spark's own writer costs a commit protocol per
call (about 5x the time for a publish-sized output, measured here) and a directory of part files.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from sparksub.journal import write_parquet_atomic

__all__ = ["write_notifications", "read_notifications"]


def write_notifications(df, path, sync: bool = True) -> int:
    """Write the notifications DataFrame ``df`` to ``path`` (one Parquet file); returns its rows.  ``sync``:
    fsync before the rename (a durable engine)."""
    return write_parquet_atomic(path, df.toArrow(), sync)


def read_notifications(spark, files: list[str], since_seq: int | None, empty: pa.Schema):
    """The rows of the kept ``files`` as one DataFrame (columns merged by name; a column a file lacks is null),
    those with ``seq >= since_seq`` (and rows without a ``seq``: a replica's ``error`` row) when it is given;
    ``empty``: the schema when there is no file.  Lazy, as any file source: read it before the retention
    window passes the files (``Engine.notification_retention_rows``)."""
    from pyspark.sql import functions as F
    if not files:
        from sparksub.runtime.frames import empty_frame
        return empty_frame(spark, empty)
    try:
        df = spark.read.option("mergeSchema", "true").parquet(*files)
    except Exception:  # noqa: BLE001 - Spark cannot merge a column typed differently across files: Arrow can
        tables = [pq.read_table(f) for f in files]
        df = spark.createDataFrame(pa.concat_tables(tables, promote_options="permissive").combine_chunks())
    if since_seq is not None:
        df = df.where((F.col("seq") >= F.lit(int(since_seq))) | F.col("seq").isNull())
    return df
