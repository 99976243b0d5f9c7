"""Plan RANGE_TOPK: ``ORDER BY y [DESC] LIMIT k`` over one closed range on a numeric ``x`` becomes the
top-k group operator node (002: one object index per (table, x, y, order), subscriptions as points
(x1, x2) with their k).

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("stock", (("s", "string"), ("risk", "double"), ("per", "double")), "s"))
>>> scan = ir.Filter(ir.Scan("stock"), (ir.RangePred("risk", ir.Param("lo"), True, ir.Const(9.0), True),))
>>> p = ir.Limit(ir.Sort(ir.Project(scan, ("*",)), (("per", True),)), ir.Param("k"))
>>> str(plan_range_topk(p, cat))
'RangeTopkGroupScan[TOP :k BY per DESC over risk IN [:lo, 9.0] of stock]'
"""
from __future__ import annotations

import math

from sparksub.errors import AnalysisError, InvalidSubscription
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES
from sparksub.catalyst_rules.rules.plan_range_min import closed_range


def plan_range_topk(plan: ir.Node, catalog) -> ir.Node:
    if not (isinstance(plan, ir.Limit) and isinstance(plan.child, ir.Sort)
            and isinstance(plan.child.child, ir.Project) and len(plan.child.keys) == 1):
        return plan
    (y, descending), = plan.child.keys
    found = closed_range(plan.child.child.child)
    if found is None:
        return plan
    scan, rng = found
    table = catalog.get(scan.table)
    for col, role in ((y, "ORDER BY"), (rng.column if rng else None, "range")):
        if col is not None and table.type_of(col) not in NUMERIC_TYPES:
            raise AnalysisError(f"the {role} attribute {col!r} of table {table.name!r} is "
                                f"{table.type_of(col)}, not numeric")
    k = plan.n
    if isinstance(k, ir.Const) and not (isinstance(k.value, float) and k.value >= 1
                                        and not math.isinf(k.value) and k.value == int(k.value)):
        raise InvalidSubscription(f"LIMIT must be a positive integer or a parameter, got {k}")
    x = rng.column if rng else y
    return ir.RangeTopkGroupScan(scan.table, x, y, descending, rng.low if rng else None,
                                 rng.high if rng else None, k, plan.child.child.columns)
