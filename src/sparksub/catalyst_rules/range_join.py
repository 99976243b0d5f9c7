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
``operators/range_join/enumerate.py``; ``runtime/range_join.py`` builds the plan that runs them in Spark
tasks, and ``jvm/bridge.py`` hands it back to the rule).  This module reads the rule's spec and names the
plan for EXPLAIN; it is pure (no pyspark: DESIGN §2).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RangeJoinSpec", "parse_spec", "describe"]

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
