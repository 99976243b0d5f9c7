"""The Python half of the range-join rewrite (``jvm/java/sparksub/RangeJoinRule.java``).

The Java rule recognises, in an optimised Spark plan, the plain-SQL formulation of a subscription group
— a table of parameters joined with a data table on ``x`` between two bounds computed from a parameter
row, aggregated per parameter key::

    SELECT q.id, MIN(t.per) FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi GROUP BY q.id

and hands us the two sides with fixed column names (parameters ``__k0.., __lo, __hi``; data ``__x,
__y0..``).  Spark would run it as a nested-loop join, |q| x |t| comparisons; we answer every parameter row
at once from an index on the data (``operators/range_join_aggregate.py``; ``spark_range_join.py`` runs it
in Spark tasks).  This module only turns the rule's spec into that plan, named for EXPLAIN.  It runs while
Catalyst optimises, so it builds the plan lazily and starts no Spark job.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RangeJoinSpec", "parse_spec", "rewrite_range_join", "describe"]

_CLASS_OF = {"min": "RANGE_MIN", "max": "RANGE_MAX", "count_star": "RANGE_AGG", "count": "RANGE_AGG",
             "sum": "RANGE_AGG"}


@dataclass(frozen=True)
class RangeJoinSpec:
    """What the Java rule recognised (its ``spec`` text, one ``key=value`` per line)."""
    keys: tuple[str, ...]
    aggregates: tuple[str, ...]
    result_types: tuple[str, ...]
    lo_strict: bool
    hi_strict: bool
    x: str
    lo: str
    hi: str
    functions: tuple[str, ...]
    group_by: tuple[str, ...]


def parse_spec(text: str) -> RangeJoinSpec:
    """
    >>> s = parse_spec("keys=__k0\\naggregates=min\\nresult_types=DOUBLE\\nlo_strict=false\\nhi_strict=true\\n"
    ...                "x=t.risk\\nlo=q.lo\\nhi=q.hi\\nfunctions=min(t.per)\\ngroup_by=q.id")
    >>> s.aggregates, s.hi_strict, describe(s)
    (('min',), True, 'RANGE_MIN rewritten from a range join: template SELECT q.id, min(t.per) WHERE t.risk >= :lo AND t.risk < :hi GROUP BY q.id, one subscription per parameter row; algorithm: data sorted on t.risk + sparse table, one O(1) range query per parameter row (range_join_aggregate); mode: batch')
    """
    f = dict(line.split("=", 1) for line in text.split("\n") if line)
    seq = lambda key, sep=",": tuple(v for v in f.get(key, "").split(sep) if v)  # noqa: E731
    return RangeJoinSpec(seq("keys"), seq("aggregates"), seq("result_types"), f["lo_strict"] == "true",
                         f["hi_strict"] == "true", f["x"], f["lo"], f["hi"], seq("functions", "\x01"),
                         seq("group_by", "\x01"))


def describe(spec: RangeJoinSpec) -> str:
    """The ``SubscriptionGroup`` node's text: class, template, group size, algorithm, mode."""
    classes = sorted({_CLASS_OF[a] for a in spec.aggregates})
    lo = f"{spec.x} {'>' if spec.lo_strict else '>='} :lo"
    hi = f"{spec.x} {'<' if spec.hi_strict else '<='} :hi"
    structures = []
    if {"min", "max"} & set(spec.aggregates):
        structures.append("sparse table")
    if {"count", "count_star", "sum"} & set(spec.aggregates):
        structures.append("prefix sums")
    return (f"{'/'.join(classes)} rewritten from a range join: template SELECT {', '.join(spec.group_by)}, "
            f"{', '.join(spec.functions)} WHERE {lo} AND {hi} GROUP BY {', '.join(spec.group_by)}, "
            f"one subscription per parameter row; algorithm: data sorted on {spec.x} + "
            f"{' + '.join(structures)}, one O(1) range query per parameter row (range_join_aggregate); "
            f"mode: batch")


def _numeric(df, column: str):
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType
    t = df.schema[column].dataType
    return df.withColumn(column, F.col(column).cast("double" if isinstance(t, (DoubleType, FloatType)) else "bigint"))


def rewrite_range_join(spark, spec_text: str, params_plan, data_plan):
    """The replacement plan (a JVM ``LogicalPlan``) for the rule, or None to keep Spark's."""
    from pyspark.sql import DataFrame

    from sparksub.jvm.bridge import subscription_group
    from sparksub.operators.spark_range_join import range_join_aggregate_df

    spec = parse_spec(spec_text)
    jvm = spark._jvm
    of_rows = jvm.org.apache.spark.sql.classic.Dataset.ofRows
    params = DataFrame(of_rows(spark._jsparkSession, params_plan), spark)
    data = DataFrame(of_rows(spark._jsparkSession, data_plan), spark)
    # The analyser made x and the bounds one type; the core compares int64 exactly or float64.
    for column in ("__lo", "__hi"):
        params = _numeric(params, column)
    data = _numeric(data, "__x")
    for i, kind in enumerate(spec.aggregates):
        if kind != "count_star":
            data = _numeric(data, f"__y{i}")
    try:
        out = range_join_aggregate_df(params, data, list(spec.keys), list(spec.aggregates), spec.lo_strict,
                                      spec.hi_strict, [t.lower() for t in spec.result_types])
    except ValueError:  # a shape the core declines (e.g. a float SUM): Spark's plan stays
        return None
    return subscription_group(out, describe(spec))._jdf.queryExecution().analyzed()
