"""Put the column on the left of every comparison: ``20 <= risk`` becomes ``risk >= 20``.

>>> from sparksub.planner import ir
>>> f = ir.Filter(ir.Scan("t"), (ir.Compare(ir.Const(20.0), "<=", ir.ColumnRef("x")),))
>>> str(orient_comparisons(f, None))
'Filter[x >= 20.0](Scan[t])'
"""
from __future__ import annotations

import dataclasses

from sparksub.planner import ir

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


def _orient(p: ir.Predicate) -> ir.Predicate:
    if isinstance(p, ir.Compare) and not isinstance(p.left, ir.ColumnRef) and isinstance(p.right, ir.ColumnRef):
        return ir.Compare(p.right, _FLIP[p.op], p.left)
    return p


def orient_comparisons(plan: ir.Node, catalog) -> ir.Node:
    def rule(node: ir.Node) -> ir.Node:
        if isinstance(node, ir.Filter):
            conj = tuple(_orient(p) for p in node.conjuncts)
            if conj != node.conjuncts:
                return dataclasses.replace(node, conjuncts=conj)
        return node
    return plan.transform_up(rule)
