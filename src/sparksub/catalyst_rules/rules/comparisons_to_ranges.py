"""Turn ``x BETWEEN a AND b`` and ``x op v`` (op in < <= > >=) into range predicates.

>>> from sparksub.planner import ir
>>> f = ir.Filter(ir.Scan("t"), (ir.Between("x", ir.Const(1.0), ir.Param("hi")), ir.Compare(ir.ColumnRef("y"), "<", ir.Const(5.0))))
>>> str(comparisons_to_ranges(f, None))
'Filter[x IN [1.0, :hi] AND y IN (-inf, 5.0)](Scan[t])'
"""
from __future__ import annotations

from sparksub.catalyst_rules.patterns import conjunct_rule
from sparksub.planner import ir


def _to_range(p: ir.Predicate) -> ir.Predicate:
    if isinstance(p, ir.Between):
        return ir.RangePred(p.column, p.low, True, p.high, True)
    if isinstance(p, ir.Compare) and isinstance(p.left, ir.ColumnRef) \
            and isinstance(p.right, (ir.Const, ir.Param)) and p.op in ("<", "<=", ">", ">="):
        col, v = p.left.name, p.right
        if p.op in (">", ">="):
            return ir.RangePred(col, v, p.op == ">=", None, False)
        return ir.RangePred(col, None, False, v, p.op == "<=")
    return p


comparisons_to_ranges = conjunct_rule("comparisons_to_ranges", _to_range)
