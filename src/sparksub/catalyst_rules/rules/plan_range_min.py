"""Plan RANGE_MIN / RANGE_MAX: ``MIN(y)`` / ``MAX(y)`` over one closed range on a numeric ``x`` becomes
the group operator node (000 §2: one A2B-tree per (table, x, y), all subscriptions as 2-d points).

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("stock", (("s", "string"), ("risk", "double"), ("per", "double")), "s"))
>>> p = ir.Aggregate(ir.Filter(ir.Scan("stock"), (ir.RangePred("risk", ir.Param("lo"), True, None, True),)), "MIN", "per")
>>> str(plan_range_min(p, cat))
'RangeMinGroupScan[MIN(per) over risk IN [:lo, unbounded] of stock]'
"""
from __future__ import annotations

from sparksub.errors import AnalysisError
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES


def closed_range(child: ir.Node) -> tuple[ir.Scan, ir.RangePred | None] | None:
    """``(scan, range)`` when ``child`` reads one table under at most one closed range predicate (the
    shape every range class shares); ``range`` is None without a WHERE; None for any other shape."""
    if isinstance(child, ir.Scan):
        return child, None
    if isinstance(child, ir.Filter) and isinstance(child.child, ir.Scan) and len(child.conjuncts) == 1 \
            and isinstance(child.conjuncts[0], ir.RangePred):
        rng = child.conjuncts[0]
        if (rng.low is not None and not rng.low_closed) or (rng.high is not None and not rng.high_closed):
            return None  # close_strict_bounds has not run
        return child.child, rng
    return None


def plan_range_min(plan: ir.Node, catalog) -> ir.Node:
    if not (isinstance(plan, ir.Aggregate) and plan.func in ("MIN", "MAX") and plan.column):
        return plan
    found = closed_range(plan.child)
    if found is None:
        return plan
    scan, rng = found
    table = catalog.get(scan.table)
    for col, role in ((plan.column, "aggregated"), (rng.column if rng else None, "range")):
        if col is not None and table.type_of(col) not in NUMERIC_TYPES:
            raise AnalysisError(f"the {role} attribute {col!r} of table {table.name!r} is "
                                f"{table.type_of(col)}, not numeric")
    if rng is None:
        # Any numeric column will do as X when every subscription covers everything: use y itself.
        return ir.RangeMinGroupScan(scan.table, plan.column, plan.column, plan.func == "MAX", None, None)
    return ir.RangeMinGroupScan(scan.table, rng.column, plan.column, plan.func == "MAX", rng.low, rng.high)
