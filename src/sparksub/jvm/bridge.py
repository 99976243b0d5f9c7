"""The Python side of the Catalyst extension: the callback the JVM's parser and optimizer rule call
(``Bridge`` in ``java/sparksub/Bridge.java``), and the named node our Spark wrappers put around their
Python operators.

The JVM reaches Python through py4j's callback server, as PySpark's ``foreachBatch`` does; the callback
runs our statement in the attached engine (``engine.sql``, the same code path) and answers with a
logical plan of its rows, or builds the group operator that replaces a recognised range join.
"""
from __future__ import annotations

import threading

import pyarrow as pa

from sparksub.errors import ParseError, SparksubError
from sparksub.jvm.build import EXTENSION_CLASS

__all__ = ["loaded", "attach", "subscription_group", "rewrites", "StatementBridge"]

_lock = threading.Lock()


def _jvm_class(spark):
    return spark._jvm.sparksub.SparksubExtensions


def loaded(spark) -> bool:
    """Whether ``spark`` was built with the extension (``spark.sql.extensions`` names it and its classes
    are on the driver's class path)."""
    try:
        if EXTENSION_CLASS not in (spark.conf.get("spark.sql.extensions", "") or ""):
            return False
        return _jvm_class(spark).version() == "1"
    except Exception:  # noqa: BLE001 - a py4j JavaPackage (class missing) raises on call
        return False


def attach(spark, engine) -> "StatementBridge":
    """Make ``engine`` the one ``spark.sql`` hands our statements to (the last attached wins)."""
    from pyspark.java_gateway import ensure_callback_server_started
    gateway = spark.sparkContext._gateway
    with _lock:
        ensure_callback_server_started(gateway)
        bridge = StatementBridge(spark, engine)
        _jvm_class(spark).attach(bridge)
    return bridge


def rewrites(spark) -> int:
    """How many range joins the optimizer rule has replaced in this JVM (for tests and benchmarks)."""
    return int(spark._jvm.sparksub.RangeJoinRule.rewrites())


def subscription_group(df, description: str | None):
    """``df`` (a group operator's output) inside a ``SubscriptionGroup`` node named by ``description``;
    ``df`` itself when ``description`` is None (the extension is off)."""
    if description is None:
        return df
    spark = df.sparkSession
    out = _dataframe(spark, spark._jvm.sparksub.SubscriptionGroup(description, df._jdf.queryExecution().logical()))
    for name, value in vars(df).items():  # what our wrappers hang on their DataFrames (sparksub_stream_id)
        if name.startswith("sparksub_"):
            setattr(out, name, value)
    return out


def _dataframe(spark, plan):
    """The DataFrame of a JVM ``LogicalPlan``."""
    from pyspark.sql import DataFrame
    return DataFrame(spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan), spark)


class StatementBridge:
    """Implements the Java interface ``sparksub.Bridge`` (called from the JVM)."""

    def __init__(self, spark, engine):
        self._spark, self._engine = spark, engine

    def statement(self, sql: str):
        try:
            answer = self._engine.sql(sql)
        except ParseError as err:
            return f"ParseError\t{err.line}\t{err.column}\t{err.message}"
        except SparksubError as err:
            return f"AnalysisError\t0\t0\t{type(err).__name__}: {err}"
        except Exception as err:  # noqa: BLE001 - surfaces in Spark as an AnalysisException, not a py4j trace
            return f"AnalysisError\t0\t0\t{type(err).__name__}: {err}"
        return answer_plan(self._spark, answer)

    def rewrite(self, spec: str, params, data):
        """The replacement plan (a JVM ``LogicalPlan``) for a range join the rule recognised (``spec``: its
        text; ``params``, ``data``: the two sides' plans), or None to keep Spark's.  It runs while Catalyst
        optimises: the plan is built lazily, no Spark job starts."""
        from sparksub.catalyst_rules.range_join import describe, parse_spec
        from sparksub.runtime.range_join import rewrite_range_join
        parsed = parse_spec(spec)
        out = rewrite_range_join(parsed, _dataframe(self._spark, params), _dataframe(self._spark, data))
        if out is None:
            return None
        return subscription_group(out, describe(parsed))._jdf.queryExecution().analyzed()

    class Java:
        implements = ["sparksub.Bridge"]


def answer_plan(spark, answer):
    """``engine.sql``'s answer as the logical plan ``spark.sql`` returns: None for DDL (no rows, no
    columns, as Spark's own DDL); a ``plan`` column for EXPLAIN; the DataFrame SHOW SUBSCRIPTIONS and
    SHOW SUBSCRIPTION GROUPS answer (built from Arrow columns by ``sparksub.listing``), as it is."""
    if answer is None:
        return None
    if isinstance(answer, str):
        answer = spark.createDataFrame(pa.table({"plan": pa.array([answer], pa.string())}))
    return answer._jdf.queryExecution().analyzed()
