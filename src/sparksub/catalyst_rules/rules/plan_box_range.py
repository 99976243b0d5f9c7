"""Plan BOX_MIN / BOX_MAX and BOX_TOPK: ``MIN(y)`` / ``MAX(y)``, or ``ORDER BY y [DESC] LIMIT k``,
over a closed 2-d box (two closed ranges on two different numeric attributes) becomes the box
group operator node (002 §IV-C: a box ``[l1, r1] x [l2, r2]`` is the point (l1, r1, l2, r2) of the
4-d subscription space and each object an orthant there; 000 §4: Mar and Hull in 2-d).

The two attributes are put in the table's column order (``x`` the one declared first), so the two
WHERE orders of one box plan to the same node and share a group.  Only exactly two range conjuncts
match: a third attribute, an OR, an equality or two unmerged ranges on one column stay unplanned
(and a box of ``SELECT *`` without ORDER BY / LIMIT is FILTER, planned later by ``plan_filter``).

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("t", (("s", "string"), ("a", "double"), ("b", "double"), ("y", "double")), "s"))
>>> box = ir.Filter(ir.Scan("t"), (ir.RangePred("b", ir.Param("lo"), True, ir.Param("hi"), True),
...                                ir.RangePred("a", ir.Const(1.0), True, None, True)))
>>> str(plan_box_range(ir.Aggregate(box, "MIN", "y"), cat))
'BoxMinGroupScan[MIN(y) over a IN [1.0, unbounded] AND b IN [:lo, :hi] of t]'
>>> str(plan_box_range(ir.Limit(ir.Sort(ir.Project(box, ("*",)), (("y", True),)), ir.Param("k")), cat))
'BoxTopkGroupScan[TOP :k BY y DESC over a IN [1.0, unbounded] AND b IN [:lo, :hi] of t]'
"""
from __future__ import annotations

import math

from sparksub.errors import AnalysisError, InvalidSubscription
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES


def closed_box(child: ir.Node, catalog) -> tuple[ir.Scan, ir.RangePred, ir.RangePred] | None:
    """``(scan, range on x, range on x2)`` when ``child`` reads one table under exactly two closed
    range predicates on two different columns, in the table's column order; None for any other
    shape (the 1-d shapes included: ``plan_range_min.closed_range`` takes those)."""
    if not (isinstance(child, ir.Filter) and isinstance(child.child, ir.Scan) and len(child.conjuncts) == 2):
        return None
    a, b = child.conjuncts
    if not (isinstance(a, ir.RangePred) and isinstance(b, ir.RangePred)) or a.column == b.column:
        return None  # two unmerged ranges on one column (parameters on one side) are not a box
    for rng in (a, b):
        if (rng.low is not None and not rng.low_closed) or (rng.high is not None and not rng.high_closed):
            return None  # close_strict_bounds has not run (or a string range kept its strict bound)
    names = catalog.get(child.child.table).column_names
    if names.index(a.column) > names.index(b.column):
        a, b = b, a
    return child.child, a, b


def _check_numeric(table, roles) -> None:
    for col, role in roles:
        if table.type_of(col) not in NUMERIC_TYPES:
            raise AnalysisError(f"the {role} attribute {col!r} of table {table.name!r} is "
                                f"{table.type_of(col)}, not numeric")


def plan_box_range(plan: ir.Node, catalog) -> ir.Node:
    if isinstance(plan, ir.Aggregate) and plan.func in ("MIN", "MAX") and plan.column:
        found = closed_box(plan.child, catalog)
        if found is None:
            return plan
        scan, rx, rx2 = found
        _check_numeric(catalog.get(scan.table), ((plan.column, "aggregated"), (rx.column, "range"),
                                                 (rx2.column, "range")))
        return ir.BoxMinGroupScan(scan.table, rx.column, rx2.column, plan.column, plan.func == "MAX",
                                  rx.low, rx.high, rx2.low, rx2.high)
    if isinstance(plan, ir.Limit) and isinstance(plan.child, ir.Sort) \
            and isinstance(plan.child.child, ir.Project) and len(plan.child.keys) == 1:
        found = closed_box(plan.child.child.child, catalog)
        if found is None:
            return plan
        scan, rx, rx2 = found
        (y, descending), = plan.child.keys
        _check_numeric(catalog.get(scan.table), ((y, "ORDER BY"), (rx.column, "range"), (rx2.column, "range")))
        k = plan.n
        # as plan_range_topk: a constant LIMIT is checked here, a :k parameter when bound
        if isinstance(k, ir.Const) and not (isinstance(k.value, float) and k.value >= 1
                                            and not math.isinf(k.value) and k.value == int(k.value)):
            raise InvalidSubscription(f"LIMIT must be a positive integer or a parameter, got {k}")
        return ir.BoxTopkGroupScan(scan.table, rx.column, rx2.column, y, descending, rx.low, rx.high,
                                   rx2.low, rx2.high, k, plan.child.child.columns)
    return plan
