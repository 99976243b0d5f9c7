"""The SparkSession ``Engine()`` makes for itself (``sparksub.spark_session``, re-exported by
``sparksub.engine``): sparksub's defaults, the Catalyst extension when it can be built, and nothing set on a
session sparksub did not create.

It lives in the runtime because only ``runtime/`` and ``jvm/`` import pyspark (DESIGN §2; ``tests/
test_layering.py``).  Its messages go to the logger ``sparksub.engine``, where ``Engine``'s own are and where
the public API documents them.
"""
from __future__ import annotations

import logging
import os

from sparksub.errors import CatalystUnavailable
from sparksub.runtime.connect import is_connect_session

__all__ = ["spark_session", "catalyst_mode", "catalyst_build_error", "SESSION_DEFAULTS", "SESSION_LOG_LEVEL"]

#: the options of the session :func:`spark_session` creates (its ``conf`` overrides them): no UI or console
#: progress bar, two shuffle partitions and tasks (small local batches), an in-memory catalog, Arrow
#: transfers, the RocksDB state store (stream state that survives restarts)
SESSION_DEFAULTS = {
    "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
#: the log level of the session :func:`spark_session` creates (Spark's INFO/WARN lines would bury ours)
SESSION_LOG_LEVEL = "ERROR"
_log = logging.getLogger("sparksub.engine")
#: why spark_session() built its session without the Catalyst extension (None: it did not)
_catalyst_build_error: str | None = None


def catalyst_mode(value=None):
    """``Engine(catalyst=...)``'s value: True, False or ``'auto'``; None reads ``$SPARKSUB_CATALYST``
    (``on``/``off``/``auto``; default ``auto``)."""
    if value is None:
        value = os.environ.get("SPARKSUB_CATALYST", "auto")
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("1", "on", "true", "yes"):
            return True
        if v in ("0", "off", "false", "no"):
            return False
        if v == "auto":
            return "auto"
        raise ValueError(f"catalyst must be True, False or 'auto', not {value!r}")
    return bool(value)


def catalyst_build_error() -> str | None:
    """Why the last :func:`spark_session` of this process built its session without the Catalyst extension
    (``catalyst='auto'`` and the extension could not be built); None when it did not."""
    return _catalyst_build_error


def spark_session(master: str = "local[*]", app_name: str = "sparksub", catalyst=None, conf: dict | None = None,
                  **options):
    """A new SparkSession for sparksub: :data:`SESSION_DEFAULTS` overridden by ``conf`` (and by ``options``,
    ``**{"spark.x": v}``), log level :data:`SESSION_LOG_LEVEL`, and, unless ``catalyst`` is False, the
    Catalyst extension (``sparksub.jvm``; built with javac on first use).  ``catalyst='auto'`` goes on
    without the extension when it cannot be built (``Engine`` says why).

    A process has one SparkContext: when one is already running, its session is returned as it is --
    nothing is set on a session sparksub did not create -- and the options not applied are logged
    (logger ``sparksub.engine``)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    global _catalyst_build_error
    conf = {**(conf or {}), **options}
    if SparkContext._active_spark_context is not None:
        running = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        if conf:
            _log.warning("spark_session: a SparkSession is already running in this process; using it as it "
                         "is (not applied: %s)", ", ".join(sorted(conf)))
        return running
    mode = catalyst_mode(catalyst)
    if mode is not False:
        from sparksub import jvm
        try:
            conf = {**jvm.extension_conf(existing_jars=conf.get("spark.jars", "")), **{
                k: v for k, v in conf.items() if k != "spark.jars"}}
        except CatalystUnavailable as err:
            if mode is True:
                raise
            _catalyst_build_error = str(err)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in {**SESSION_DEFAULTS, **conf}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if not is_connect_session(spark):  # (SPARK_REMOTE & co. make the builder's session a Connect one: no sparkContext)
        spark.sparkContext.setLogLevel(SESSION_LOG_LEVEL)  # our own session: see SESSION_LOG_LEVEL
    return spark
