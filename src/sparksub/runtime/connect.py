"""Spark Connect: recognised, and refused until the runtime is Connect-clean.

The runtime reaches the JVM through py4j (``sparkContext``, broadcasts, ``_jdf`` and the Catalyst
extension's callback), which a Connect client does not have: an engine on a Connect session would take
DDL and subscriptions and then fail at its first ``publish``.  So ``Engine`` refuses the session at once,
saying what to use instead.  Recognised by the class's module (``pyspark.sql.connect.session``), so
nothing of Connect is imported (its dependencies — grpcio and friends — may be missing).
"""
from __future__ import annotations

from sparksub.errors import SparkConnectUnsupported

__all__ = ["is_connect_session", "refuse_connect_session"]


def is_connect_session(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client session (``SparkSession.builder.remote(...)``,
    ``SPARK_REMOTE``, ``spark.api.mode=connect``) rather than a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def refuse_connect_session(spark, embedded: bool = False) -> None:
    """Raise :class:`SparkConnectUnsupported` when ``spark`` is a Connect session.  ``embedded``: the
    session is the one ``Engine()`` made itself (the environment asked for Connect)."""
    if not is_connect_session(spark):
        return
    how = ("Engine() built its embedded session with SparkSession.builder, and this environment (SPARK_API_MODE "
           "or spark.api.mode=connect, SPARK_REMOTE, SPARK_CONNECT_MODE_ENABLED) turned it into a Spark Connect "
           "session; unset those, or pass a classic SparkSession" if embedded else
           "Engine(spark) was given a Spark Connect session (SparkSession.builder.remote(...)); pass a classic "
           "SparkSession instead")
    raise SparkConnectUnsupported(
        f"sparksub does not run on Spark Connect yet: {how} (sparksub.Engine() makes an embedded local one; "
        f"for a cluster, SparkSession.builder.master(<master URL>).getOrCreate(), without .remote() or "
        f"SPARK_REMOTE). Until the runtime is Connect-clean, it needs a classic session's py4j gateway "
        f"(sparkContext, broadcasts, the Catalyst extension) and would fail at the first publish.")
