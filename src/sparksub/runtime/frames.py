"""DataFrame steps the engine puts around the group operators: a checked stream's rows as FILTER events,
and join notifications netted.  Spark's DataFrame API only, here because only the runtime and ``jvm/``
import pyspark (DESIGN §2, ``tests/test_layering.py``).
"""
from __future__ import annotations

from sparksub.operators.filters.group import EVENT_PREFIX
from sparksub.runtime.stream import OP_COLUMN, REASON_COLUMN, SEQ_COLUMN

__all__ = ["empty_frame", "filter_stream_events", "net_join_notifications"]


def filter_stream_events(checked_df, columns, with_reason: bool = False):
    """The rows of a checked stream (``stream.checked_updates``) as the events a FILTER group reads: each
    table column in ``columns`` as ``EVENT_PREFIX + column``, then ``op`` and ``seq``; ``with_reason``: also
    the ``reason`` a row was set aside for (``stream.known_key_updates``: a delete of an unknown key)."""
    from pyspark.sql import functions as F
    more = [F.col(REASON_COLUMN).alias("reason")] if with_reason else []
    return checked_df.select(*[F.col(c).alias(EVENT_PREFIX + c) for c in columns],
                             F.col(OP_COLUMN).alias("op"), F.col(SEQ_COLUMN).alias("seq"), *more)


def net_join_notifications(df):
    """Join notifications netted per (subscription, seq, result tuple): an insert and a delete of one pair
    in one update (a band-join S row moving between partitions) cancel; every other row passes through."""
    from pyspark.sql import functions as F
    is_join = F.col("left_key").isNotNull() & F.col("op").isin("insert", "delete")
    keys = [F.col(f"`{c}`") for c in df.columns if c != "op"]  # (selected columns may be named ``t.c``)
    sign = F.when(F.col("op") == "insert", F.lit(1)).otherwise(F.lit(-1))
    netted = (df.where(is_join).groupBy(*keys).agg(F.sum(sign).alias("_net")).where(F.col("_net") != 0)
              .withColumn("op", F.when(F.col("_net") > 0, F.lit("insert")).otherwise(F.lit("delete")))
              .select(*[F.col(f"`{c}`") for c in df.columns]))
    return df.where(~is_join).unionByName(netted).localCheckpoint(eager=True)


def empty_frame(spark, schema):
    """An empty DataFrame of the Arrow ``schema``: given as a Spark schema, since a Spark Connect client cannot
    infer one from an Arrow table without rows (``CANNOT_INFER_EMPTY_SCHEMA``)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    return spark.createDataFrame([], from_arrow_schema(schema))
