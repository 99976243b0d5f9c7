"""Put the column on the left of every comparison: ``20 <= risk`` becomes ``risk >= 20``.

>>> from sparksub.planner import ir
>>> f = ir.Filter(ir.Scan("t"), (ir.Compare(ir.Const(20.0), "<=", ir.ColumnRef("x")),))
>>> str(orient_comparisons(f, None))
'Filter[x >= 20.0](Scan[t])'
"""
from __future__ import annotations

from sparksub.catalyst_rules.patterns import conjunct_rule
from sparksub.planner import ir

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


def _orient(p: ir.Predicate) -> ir.Predicate:
    if isinstance(p, ir.Compare) and not isinstance(p.left, ir.ColumnRef) and isinstance(p.right, ir.ColumnRef):
        return ir.Compare(p.right, _FLIP[p.op], p.left)
    return p


orient_comparisons = conjunct_rule("orient_comparisons", _orient)
