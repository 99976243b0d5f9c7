"""Plan RANGE_DISTINCT: ``SELECT DISTINCT y`` over one closed range on a numeric ``x`` becomes the
DISTINCT group operator node (000 §4: Mar extended to duplicates, per (table, x, y)).

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("stock", (("s", "string"), ("risk", "double"), ("sector", "string")), "s"))
>>> scan = ir.Filter(ir.Scan("stock"), (ir.RangePred("risk", ir.Const(1.0), True, ir.Const(9.0), True),))
>>> str(plan_range_distinct(ir.Distinct(ir.Project(scan, ("sector",))), cat))
'RangeDistinctGroupScan[DISTINCT sector over risk IN [1.0, 9.0] of stock]'
"""
from __future__ import annotations

from sparksub.errors import AnalysisError
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES
from sparksub.catalyst_rules.rules.plan_range_min import closed_range


def plan_range_distinct(plan: ir.Node, catalog) -> ir.Node:
    if not (isinstance(plan, ir.Distinct) and isinstance(plan.child, ir.Project)
            and len(plan.child.columns) == 1 and plan.child.columns[0] != "*"):
        return plan
    found = closed_range(plan.child.child)
    if found is None:
        return plan
    scan, rng = found
    table = catalog.get(scan.table)
    y = plan.child.columns[0]
    table.type_of(y)
    if rng is None:
        return ir.RangeDistinctGroupScan(scan.table, table.key or y, y, None, None) \
            if table.key and table.type_of(table.key) in NUMERIC_TYPES else plan
    if table.type_of(rng.column) not in NUMERIC_TYPES:
        raise AnalysisError(f"the range attribute {rng.column!r} of table {table.name!r} is "
                            f"{table.type_of(rng.column)}, not numeric")
    return ir.RangeDistinctGroupScan(scan.table, rng.column, y, rng.low, rng.high)
