"""Make every range bound closed, so that operators see only ``[x1, x2]``: ``x > a`` becomes
``x >= succ(a)``, the least value of x's type above a (``nextafter`` for floating point, ``a + 1``
after flooring for integers). Over the column's values the two are the same predicate, so the
paper's closed-range theory (000 §2.3, Theorem 1) applies unchanged. Constants fold at once;
parameters keep ``succ(:lo)``, which binding applies to the whole column with numpy.

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("t", (("k", "string"), ("x", "double"), ("n", "bigint")), "k"))
>>> f = ir.Filter(ir.Scan("t"), (ir.RangePred("x", ir.Param("lo"), False, ir.Const(5.0), True),
...                              ir.RangePred("n", ir.Const(2.5), False, None, False)))
>>> str(close_strict_bounds(f, cat))
'Filter[x IN [succ(:lo), 5.0] AND n IN [3.0, +inf)](Scan[t])'
"""
from __future__ import annotations

import dataclasses
import math

from sparksub.planner import ir
from sparksub.planner.catalog import INTEGRAL_TYPES, NUMERIC_TYPES


def succ_value(v: float, integral: bool) -> float:
    return math.floor(v) + 1.0 if integral else math.nextafter(v, math.inf)


def pred_value(v: float, integral: bool) -> float:
    return math.ceil(v) - 1.0 if integral else math.nextafter(v, -math.inf)


def _close(p: ir.RangePred, integral: bool) -> ir.RangePred:
    low, high = p.low, p.high
    if low is not None and not p.low_closed:
        low = ir.Const(succ_value(low.value, integral)) if isinstance(low, ir.Const) else ir.Succ(low, integral)
    if high is not None and not p.high_closed:
        high = ir.Const(pred_value(high.value, integral)) if isinstance(high, ir.Const) else ir.Pred(high, integral)
    return ir.RangePred(p.column, low, True, high, True)


def close_strict_bounds(plan: ir.Node, catalog) -> ir.Node:
    def rule(node: ir.Node) -> ir.Node:
        if not isinstance(node, ir.Filter):
            return node
        scan = node.child
        if not isinstance(scan, ir.Scan):
            return node
        table = catalog.get(scan.table)
        # Only numeric columns have a successor; a string range keeps its strict bound.
        conj = tuple(_close(p, table.type_of(p.column) in INTEGRAL_TYPES)
                     if isinstance(p, ir.RangePred) and table.type_of(p.column) in NUMERIC_TYPES else p
                     for p in node.conjuncts)
        return dataclasses.replace(node, conjuncts=conj) if conj != node.conjuncts else node
    return plan.transform_up(rule)
