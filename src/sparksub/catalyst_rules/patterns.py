"""Rule patterns: declare a rewrite by what it does to one node or one predicate, get a plan rule.

>>> from sparksub.planner import ir
>>> negate = {"<": ">=", ">=": "<"}
>>> flip = conjunct_rule("flip", lambda p: ir.Compare(p.left, negate[p.op], p.right))
>>> str(flip(ir.Filter(ir.Scan("t"), (ir.Compare(ir.ColumnRef("x"), "<", ir.Const(1.0)),)), None))
'Filter[x >= 1.0](Scan[t])'
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from sparksub.planner import ir

__all__ = ["conjunct_rule"]


def conjunct_rule(name: str, rewrite: Callable[[ir.Predicate], ir.Predicate]):
    """A rule that rewrites every conjunct of every Filter with ``rewrite`` (a predicate -> predicate
    function) — inside the branches of an OR too —, bottom-up, leaving nodes it does not change
    untouched (so the executor sees equality)."""
    def on_predicate(p: ir.Predicate) -> ir.Predicate:
        if isinstance(p, ir.Or):
            branches = tuple(tuple(on_predicate(q) for q in conj) for conj in p.disjuncts)
            return ir.Or(branches) if branches != p.disjuncts else p
        return rewrite(p)

    def rule(plan: ir.Node, catalog) -> ir.Node:
        def on_node(node: ir.Node) -> ir.Node:
            if isinstance(node, ir.Filter):
                conj = tuple(on_predicate(p) for p in node.conjuncts)
                if conj != node.conjuncts:
                    return dataclasses.replace(node, conjuncts=conj)
            return node
        return plan.transform_up(on_node)
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = rewrite.__doc__
    return rule
