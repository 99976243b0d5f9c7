"""Merge range predicates on the same column into one: ``a <= x AND x <= b`` is ``x IN [a, b]``.

Two lower (or two upper) bounds merge only when both are constants (the tighter wins); with a
parameter the predicate is left alone, and the classifier then names the shape it cannot serve.

>>> from sparksub.planner import ir
>>> lo = ir.RangePred("x", ir.Const(1.0), True, None, False)
>>> hi = ir.RangePred("x", None, False, ir.Const(9.0), False)
>>> str(merge_ranges(ir.Filter(ir.Scan("t"), (lo, hi)), None))
'Filter[x IN [1.0, 9.0)](Scan[t])'
"""
from __future__ import annotations

import dataclasses

from sparksub.planner import ir


def _tighter(a, a_closed, b, b_closed, lower: bool):
    """The tighter of two bounds on one side, or None when it cannot be decided statically."""
    if a is None:
        return b, b_closed
    if b is None:
        return a, a_closed
    if isinstance(a, ir.Const) and isinstance(b, ir.Const):
        if a.value == b.value:
            return a, a_closed and b_closed
        pick_a = (a.value > b.value) if lower else (a.value < b.value)
        return (a, a_closed) if pick_a else (b, b_closed)
    return None


def _merge(p: ir.RangePred, q: ir.RangePred) -> ir.RangePred | None:
    low = _tighter(p.low, p.low_closed, q.low, q.low_closed, lower=True)
    high = _tighter(p.high, p.high_closed, q.high, q.high_closed, lower=False)
    if low is None or high is None:
        return None
    return ir.RangePred(p.column, low[0], low[1], high[0], high[1])


def merge_ranges(plan: ir.Node, catalog) -> ir.Node:
    def rule(node: ir.Node) -> ir.Node:
        if not isinstance(node, ir.Filter):
            return node
        out: list[ir.Predicate] = []
        for p in node.conjuncts:
            if isinstance(p, ir.RangePred):
                for i, q in enumerate(out):
                    if isinstance(q, ir.RangePred) and q.column == p.column:
                        merged = _merge(q, p)
                        if merged is not None:
                            out[i] = merged
                            break
                else:
                    out.append(p)
            else:
                out.append(p)
        conj = tuple(out)
        return dataclasses.replace(node, conjuncts=conj) if conj != node.conjuncts else node
    return plan.transform_up(rule)
