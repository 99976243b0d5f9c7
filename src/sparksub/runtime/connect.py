"""Spark Connect: recognised, and served by the same runtime as a classic session (issue 16 item 7).

The data path uses only DataFrame APIs a Connect client has: each group's state in files under the engine's
directory (``runtime/replicas.py``) rather than broadcasts, failed groups read from the output rather than
an accumulator, counters in files, ``localCheckpoint`` (Spark Connect has it since 4.0), the partition
count from the session's conf (``spark.default.parallelism``) rather than ``sparkContext``, and plan text
through :func:`sparksub.runtime.groups.plan_text`.  What stays classic-only is the Catalyst extension
(``jvm/``: ``spark.sql`` running our statements, EXPLAIN's ``SubscriptionGroup`` node, the range-join
rewrite), which reaches the JVM through py4j: on a Connect session the engine runs without it and says why
(``Engine.catalyst_reason``).  Recognised by the class's module (``pyspark.sql.connect.session``), so
nothing of Connect is imported (its dependencies -- grpcio and friends -- may be missing).
"""
from __future__ import annotations

__all__ = ["is_connect_session", "CATALYST_ON_CONNECT", "default_parallelism"]

#: why a Connect session runs without the Catalyst extension (Engine.catalyst_reason)
CATALYST_ON_CONNECT = ("a Spark Connect session: the Catalyst extension (spark.sql running sparksub's statements, "
                       "EXPLAIN's SubscriptionGroup node, the range-join rewrite) needs a classic session's py4j "
                       "gateway; publish, stream, result and EXPLAIN SUBSCRIPTION work without it")


def is_connect_session(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client session (``SparkSession.builder.remote(...)``,
    ``SPARK_REMOTE``, ``spark.api.mode=connect``) rather than a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark, fallback: int = 2) -> int:
    """The session's ``spark.default.parallelism`` (its conf, which a Connect client can read), else
    ``fallback``: how many partitions a join or event class and FILTER shards get unless the engine sets it."""
    try:
        value = spark.conf.get("spark.default.parallelism", None)
    except Exception:  # noqa: BLE001 - a conf the server does not expose: the fallback
        value = None
    try:
        return max(1, int(value)) if value is not None else fallback
    except (TypeError, ValueError):
        return fallback
