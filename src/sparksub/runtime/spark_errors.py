"""Spark's own errors, recognised: PySpark's parse and analysis exceptions as ours, and Spark's parser asked
about one of its statements without running it.

``engine.sql`` checks every statement of a script before it runs any (DESIGN §7), Spark's statements too,
and reports a bad one at its line and column in the script.  Placing the error is the grammar's
(``grammar/script.py``: :func:`spark_message_error`, :func:`in_script`); telling PySpark's exceptions
apart is here, because only the runtime and ``jvm/`` import pyspark (DESIGN §2, ``tests/test_layering.py``).
"""
from __future__ import annotations

from sparksub.errors import SparksubError
from sparksub.grammar.script import spark_message_error

__all__ = ["is_spark_error", "spark_error", "spark_parse"]


def is_spark_error(err: BaseException) -> bool:
    """Whether ``err`` is one of PySpark's own errors (a statement Spark ran failed): its message is for
    the user, its traceback is not."""
    from pyspark.errors import PySparkException
    return isinstance(err, PySparkException)


def spark_error(err: BaseException, source: str) -> SparksubError | None:
    """A PySpark parse or analysis error of the Spark statement ``source`` as ours (ParseError /
    AnalysisError at Spark's line and position in ``source``, so that ``in_script`` can place it in the
    script); None for any other exception."""
    from pyspark.errors import AnalysisException, ParseException
    if not isinstance(err, (ParseException, AnalysisException)):
        return None
    return spark_message_error(str(err), source, syntax=isinstance(err, ParseException))


def spark_parse(spark, source: str) -> None:
    """Spark's parser's verdict on one of Spark's own statements (nothing runs): returns when it parses,
    raises PySpark's exception (a ``ParseException`` for a syntax error) when not.  A session without a
    JVM parser to ask (Spark Connect) returns at once: Spark's verdict comes when the statement runs."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return
    from py4j.protocol import Py4JJavaError
    try:
        jsession.sessionState().sqlParser().parsePlan(source)
    except Py4JJavaError as err:  # PySpark converts the JVM's exceptions it raises, not those of a bare call
        from pyspark.errors.exceptions.captured import convert_exception
        raise convert_exception(err.java_exception) from None
