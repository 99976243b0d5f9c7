"""The Python half of the range-join rewrite (``jvm/java/sparksub/RangeJoinRule.java``).

The Java rule recognises, in an optimised Spark plan, the plain-SQL formulation of a subscription group
— a table of parameters joined with a data table on ``x`` between two bounds computed from a parameter
row, then per parameter key an aggregate, the distinct values, or the top k rows::

    SELECT q.id, MIN(t.per) FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi GROUP BY q.id
    SELECT DISTINCT q.id, t.per FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi
    SELECT * FROM (SELECT q.id, t.symbol, t.per,
                          ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY t.per DESC) AS rn
                   FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi) WHERE rn <= 3

and hands us the two sides with fixed column names (parameters ``__k0.., __lo, __hi``; data ``__x`` and
``__y0..`` / ``__y`` / ``__y, __d0..``).  Spark would run a nested-loop join, |q| x |t| comparisons; we
answer every parameter row at once from an index on the data (``operators/range_join/aggregate.py``,
``operators/range_join/enumerate.py``; ``spark_range_join.py`` runs them in Spark tasks).  This module only
turns the rule's spec into that plan, named for EXPLAIN.  It runs while Catalyst optimises, so it builds the
plan lazily and starts no Spark job.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RangeJoinSpec", "parse_spec", "rewrite_range_join", "describe"]

_CLASS_OF = {"min": "RANGE_MIN", "max": "RANGE_MAX", "count_star": "RANGE_AGG", "count": "RANGE_AGG",
             "sum": "RANGE_AGG"}


@dataclass(frozen=True)
class RangeJoinSpec:
    """What the Java rule recognised (its ``spec`` text, one ``key=value`` per line)."""
    kind: str  # aggregate | distinct | topk
    keys: tuple[str, ...]
    lo_strict: bool
    hi_strict: bool
    x: str
    lo: str
    hi: str
    group_by: tuple[str, ...]
    aggregates: tuple[str, ...] = ()  # aggregate
    result_types: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    y: str = ""  # distinct
    k: int = 0  # topk
    descending: bool = False
    nulls_first: bool = True
    payload: int = 0
    order_by: str = ""


def parse_spec(text: str) -> RangeJoinSpec:
    """
    >>> s = parse_spec("kind=aggregate\\nkeys=__k0\\naggregates=min\\nresult_types=DOUBLE\\nlo_strict=false\\n"
    ...                "hi_strict=true\\nx=t.risk\\nlo=q.lo\\nhi=q.hi\\nfunctions=min(t.per)\\ngroup_by=q.id")
    >>> s.aggregates, s.hi_strict, describe(s)
    (('min',), True, 'RANGE_MIN rewritten from a range join: template SELECT q.id, min(t.per) WHERE t.risk >= :lo AND t.risk < :hi GROUP BY q.id, one subscription per parameter row; algorithm: data sorted on t.risk + sparse table, one O(1) range query per parameter row (range_join_aggregate); mode: batch')
    """
    f = dict(line.split("=", 1) for line in text.split("\n") if line)
    seq = lambda key, sep=",": tuple(v for v in f.get(key, "").split(sep) if v)  # noqa: E731
    flag = lambda key, default="false": f.get(key, default) == "true"  # noqa: E731
    return RangeJoinSpec(f.get("kind", "aggregate"), seq("keys"), flag("lo_strict"), flag("hi_strict"), f["x"],
                         f["lo"], f["hi"], seq("group_by", "\x01"), seq("aggregates"), seq("result_types"),
                         seq("functions", "\x01"), f.get("y", ""), int(f.get("k", 0)), flag("descending"),
                         flag("nulls_first", "true"), int(f.get("payload", 0)), f.get("order_by", ""))


def describe(spec: RangeJoinSpec) -> str:
    """The ``SubscriptionGroup`` node's text: class, template, group size, algorithm, mode."""
    where = (f"WHERE {spec.x} {'>' if spec.lo_strict else '>='} :lo AND "
             f"{spec.x} {'<' if spec.hi_strict else '<='} :hi")
    keys = ", ".join(spec.group_by)
    size = "one subscription per parameter row"
    if spec.kind == "distinct":
        return (f"RANGE_DISTINCT rewritten from a range join: template SELECT DISTINCT {keys}, {spec.y} {where}, "
                f"{size}; algorithm: data sorted on {spec.x} + sparse table of previous occurrences, each "
                f"parameter row's distinct values listed in O(1) per value (range_join_enumerate); mode: batch")
    if spec.kind == "topk":
        return (f"RANGE_TOPK rewritten from a range join: template ROW_NUMBER() OVER (PARTITION BY {keys} "
                f"ORDER BY {spec.order_by}) <= {spec.k} {where}, {size}; algorithm: data sorted on {spec.x} + "
                f"sparse table of ranks, the k first rows per parameter row by splitting at minima, O(k^2) "
                f"(range_join_enumerate); mode: batch")
    classes = sorted({_CLASS_OF[a] for a in spec.aggregates}) or ["RANGE_AGG"]
    structures = []
    if {"min", "max"} & set(spec.aggregates):
        structures.append("sparse table")
    if {"count", "count_star", "sum"} & set(spec.aggregates) or not spec.aggregates:
        structures.append("prefix sums")
    return (f"{'/'.join(classes)} rewritten from a range join: template SELECT {keys}"
            f"{''.join(', ' + f for f in spec.functions)} {where} GROUP BY {keys}, {size}; algorithm: data "
            f"sorted on {spec.x} + {' + '.join(structures)}, one O(1) range query per parameter row "
            f"(range_join_aggregate); mode: batch")


def _numeric(df, column: str):
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType
    t = df.schema[column].dataType
    return df.withColumn(column, F.col(column).cast("double" if isinstance(t, (DoubleType, FloatType)) else "bigint"))


def rewrite_range_join(spark, spec_text: str, params_plan, data_plan):
    """The replacement plan (a JVM ``LogicalPlan``) for the rule, or None to keep Spark's."""
    from pyspark.sql import DataFrame

    from sparksub.jvm.bridge import subscription_group
    from sparksub.runtime import range_join as srj

    spec = parse_spec(spec_text)
    of_rows = spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows
    params = DataFrame(of_rows(spark._jsparkSession, params_plan), spark)
    data = DataFrame(of_rows(spark._jsparkSession, data_plan), spark)
    # The analyser made x and the bounds one type; the cores compare int64 exactly or float64.
    for column in ("__lo", "__hi"):
        params = _numeric(params, column)
    data = _numeric(data, "__x")
    keys = list(spec.keys)
    try:
        if spec.kind == "distinct":
            out = srj.range_join_distinct_df(params, data, keys, spec.lo_strict, spec.hi_strict)
        elif spec.kind == "topk":
            out = srj.range_join_topk_df(params, _numeric(data, "__y"), keys, spec.k, spec.descending,
                                         spec.nulls_first, spec.lo_strict, spec.hi_strict,
                                         [f"__d{i}" for i in range(spec.payload)])
        else:
            for i, kind in enumerate(spec.aggregates):
                if kind != "count_star":
                    data = _numeric(data, f"__y{i}")
            out = srj.range_join_aggregate_df(params, data, keys, list(spec.aggregates), spec.lo_strict,
                                              spec.hi_strict, [t.lower() for t in spec.result_types])
    except ValueError:  # a shape the core declines (e.g. a float SUM): Spark's plan stays
        return None
    return subscription_group(out, describe(spec))._jdf.queryExecution().analyzed()
