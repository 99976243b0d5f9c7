"""Plan RANGE_AGG: ``COUNT(*)`` / ``SUM(y)`` / ``AVG(y)`` over one closed range on a numeric ``x``
becomes the aggregate group operator node (000 §4: relaxed range subscriptions).  ``COUNT(x)`` of
the range attribute is ``COUNT(*)`` (a row with a NULL x is in no range).

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("stock", (("s", "string"), ("risk", "double"), ("per", "double")), "s"))
>>> scan = ir.Filter(ir.Scan("stock"), (ir.RangePred("risk", ir.Param("lo"), True, ir.Param("hi"), True),))
>>> str(plan_range_agg(ir.Aggregate(scan, "AVG", "per"), cat))
'RangeAggGroupScan[AVG(per) over risk IN [:lo, :hi] of stock]'
"""
from __future__ import annotations

from sparksub.errors import AnalysisError
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES
from sparksub.catalyst_rules.rules.plan_range_min import closed_range


def plan_range_agg(plan: ir.Node, catalog) -> ir.Node:
    if not (isinstance(plan, ir.Aggregate) and plan.func in ("COUNT", "SUM", "AVG")):
        return plan
    found = closed_range(plan.child)
    if found is None:
        return plan
    scan, rng = found
    table = catalog.get(scan.table)
    y = plan.column
    if plan.func == "COUNT":
        if y is not None and (rng is None or y != rng.column):
            return plan                      # COUNT(col) counts non-NULL col: not a range count
        y = None
    elif table.type_of(y) not in NUMERIC_TYPES:
        raise AnalysisError(f"the aggregated attribute {y!r} of table {table.name!r} is "
                            f"{table.type_of(y)}, not numeric")
    if rng is None:
        x = y if y is not None else (table.key if table.key and table.type_of(table.key) in NUMERIC_TYPES else None)
        if x is None:
            return plan
        return ir.RangeAggGroupScan(scan.table, x, y, plan.func, None, None)
    if table.type_of(rng.column) not in NUMERIC_TYPES:
        raise AnalysisError(f"the range attribute {rng.column!r} of table {table.name!r} is "
                            f"{table.type_of(rng.column)}, not numeric")
    return ir.RangeAggGroupScan(scan.table, rng.column, y, plan.func, rng.low, rng.high)
