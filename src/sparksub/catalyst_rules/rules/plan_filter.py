"""Plan FILTER: ``SELECT * | cols FROM t WHERE`` a conjunction (or a disjunction of conjunctions) of
``attr op value`` becomes the FILTER group node (001: every subscription is a set of predicates,
matched in two phases by the group's engine). ORs among the conjuncts are multiplied out into DNF,
up to :data:`MAX_DISJUNCTS` conjunctions.

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("ev", (("name", "string"), ("price", "double")), None))
>>> p = ir.Project(ir.Filter(ir.Scan("ev"), (ir.Compare(ir.ColumnRef("name"), "=", ir.Const("IBM")),
...                                          ir.RangePred("price", ir.Const(10.0), True, None, False))), ("*",))
>>> str(plan_filter(p, cat))
"FilterGroupScan[* of ev WHERE (name = 'IBM' AND price >= 10.0)]"
"""
from __future__ import annotations

import itertools

from sparksub.planner import ir

MAX_DISJUNCTS = 64


def _triples(p: ir.Predicate) -> list[tuple] | None:
    """One predicate as a conjunction of (attr, op, values) triples; None if it is not a filter predicate."""
    if isinstance(p, ir.RangePred):
        out = []
        if p.low is not None and p.high is not None and p.low_closed and p.high_closed:
            return [(p.column, "between", (p.low, p.high))]
        if p.low is not None:
            out.append((p.column, ">=" if p.low_closed else ">", (p.low,)))
        if p.high is not None:
            out.append((p.column, "<=" if p.high_closed else "<", (p.high,)))
        return out
    if isinstance(p, ir.Compare) and isinstance(p.left, ir.ColumnRef) and isinstance(p.right, (ir.Const, ir.Param)):
        return [(p.left.name, p.op, (p.right,))]
    if isinstance(p, ir.InList):
        return [(p.column, "in", p.values)]
    if isinstance(p, ir.IsNull):
        return [(p.column, "is_not_null" if p.negated else "is_null", ())]
    return None


def _dnf(conjuncts) -> tuple | None:
    plain, ors = [], []
    for p in conjuncts:
        if isinstance(p, ir.Or):
            branches = []
            for conj in p.disjuncts:
                inner = _dnf(conj)
                if inner is None:
                    return None
                branches.extend(inner)
            ors.append(branches)
        else:
            t = _triples(p)
            if t is None:
                return None
            plain.extend(t)
    out = []
    for combo in itertools.product(*ors):
        out.append(tuple(plain) + tuple(t for conj in combo for t in conj))
        if len(out) > MAX_DISJUNCTS:
            return None
    return tuple(out)


def plan_filter(plan: ir.Node, catalog) -> ir.Node:
    if not isinstance(plan, ir.Project) or any(c != "*" and not c.isidentifier() for c in plan.columns):
        return plan
    child = plan.child
    if isinstance(child, ir.Scan):
        return ir.FilterGroupScan(child.table, plan.columns, ((),))
    if not (isinstance(child, ir.Filter) and isinstance(child.child, ir.Scan)):
        return plan
    dnf = _dnf(child.conjuncts)
    if dnf is None:
        return plan
    return ir.FilterGroupScan(child.child.table, plan.columns, dnf)
