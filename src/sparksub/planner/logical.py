"""sqlglot SELECT -> logical plan IR (``planner.ir``), resolving tables and columns in the catalog.

Only the translation happens here; every normalisation is a rule in ``catalyst_rules``.

>>> from sparksub.grammar import parse_select
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("stock", (("symbol", "string"), ("risk", "double"), ("per", "double")), "symbol"))
>>> str(to_logical(parse_select("SELECT MIN(per) FROM stock WHERE 20 <= risk AND risk < :hi"), cat))
'Aggregate[MIN(per)](Filter[20.0 <= risk AND risk < :hi](Scan[stock]))'
"""
from __future__ import annotations

from sqlglot import exp

from sparksub.errors import AnalysisError
from sparksub.planner import ir
from sparksub.planner.catalog import Catalog

__all__ = ["to_logical"]

_CMP = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_AGG = {exp.Min: "MIN", exp.Max: "MAX", exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG"}


def _operand(e: exp.Expression, table) -> ir.ColumnRef | ir.Const | ir.Param | None:
    if isinstance(e, exp.Column):
        table.type_of(e.name)  # unknown column -> AnalysisError
        return ir.ColumnRef(e.name)
    if isinstance(e, exp.Paren):
        return _operand(e.this, table)
    if isinstance(e, exp.Literal):
        return ir.Const(e.this if e.is_string else float(e.this))
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        return ir.Const(-float(e.this.this))
    if isinstance(e, exp.Placeholder):
        if not e.name:
            raise AnalysisError("positional '?' parameters are not supported: name them (:lo)")
        return ir.Param(e.name)
    return None


def _predicate(e: exp.Expression, table) -> ir.Predicate:
    for cls, op in _CMP.items():
        if type(e) is cls:
            left, right = _operand(e.this, table), _operand(e.expression, table)
            if left is not None and right is not None:
                return ir.Compare(left, op, right)
    if isinstance(e, exp.In) and not e.args.get("query"):
        col = _operand(e.this, table)
        vals = [_operand(v, table) for v in e.expressions]
        if isinstance(col, ir.ColumnRef) and vals and all(isinstance(v, (ir.Const, ir.Param)) for v in vals):
            return ir.InList(col.name, tuple(vals))
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null) and isinstance(e.this, exp.Column):
        table.type_of(e.this.name)
        return ir.IsNull(e.this.name)
    if isinstance(e, exp.Not) and isinstance(e.this, exp.Is) and isinstance(e.this.expression, exp.Null) \
            and isinstance(e.this.this, exp.Column):
        table.type_of(e.this.this.name)
        return ir.IsNull(e.this.this.name, negated=True)
    if isinstance(e, exp.Or):
        disjuncts = []
        for branch in _disjuncts(e):
            conj = tuple(_predicate(c, table) for c in _conjuncts(branch))
            if any(isinstance(p, (ir.Or, ir.Opaque)) for p in conj):
                break  # nested OR inside AND inside OR: not flattened; left opaque
            disjuncts.append(conj)
        else:
            return ir.Or(tuple(disjuncts))
    if isinstance(e, exp.Between):
        col, low, high = (_operand(e.this, table), _operand(e.args["low"], table),
                          _operand(e.args["high"], table))
        if isinstance(col, ir.ColumnRef) and isinstance(low, (ir.Const, ir.Param)) \
                and isinstance(high, (ir.Const, ir.Param)):
            return ir.Between(col.name, low, high)
    for col in e.find_all(exp.Column):
        table.type_of(col.name)
    return ir.Opaque(e.sql(dialect="spark"))


def _disjuncts(e: exp.Expression) -> list[exp.Expression]:
    if isinstance(e, exp.Paren):
        return _disjuncts(e.this)
    if isinstance(e, exp.Or):
        return _disjuncts(e.this) + _disjuncts(e.expression)
    return [e]


def _conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]


def to_logical(select: exp.Expression, catalog: Catalog) -> ir.Node:
    if not isinstance(select, exp.Select):
        raise AnalysisError(f"a subscription is a single SELECT, not {type(select).__name__}")
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table):
        raise AnalysisError("a subscription reads FROM one declared table")
    table = catalog.get(from_.this.name)
    node: ir.Node = ir.Scan(table.name)
    if select.args.get("joins"):
        j = select.args["joins"][0]
        right = catalog.get(j.this.name) if isinstance(j.this, exp.Table) else None
        node = ir.Join(node, ir.Scan(right.name if right else "?"), (j.args.get("on") or exp.true()).sql("spark"))
    where = select.args.get("where")
    if where is not None:
        node = ir.Filter(node, tuple(_predicate(c, table) for c in _conjuncts(where.this)))
    if select.args.get("group"):
        raise AnalysisError("GROUP BY subscriptions are not supported")
    projections = select.expressions
    aggs = [p for p in projections if type(p.unalias()) in _AGG]
    if aggs:
        if len(projections) != 1:
            names = ", ".join(p.sql("spark") for p in projections)
            return ir.Project(ir.Aggregate(node, "MULTI", None), (names,))
        agg = projections[0].unalias()
        arg = agg.this
        if isinstance(arg, exp.Star) or arg is None:
            column = None
        elif isinstance(arg, exp.Column):
            table.type_of(arg.name)
            column = arg.name
        else:
            raise AnalysisError(f"aggregate over an expression is not supported: {agg.sql('spark')}")
        node = ir.Aggregate(node, _AGG[type(agg)], column)
    else:
        cols = []
        for p in projections:
            inner = p.unalias()
            if isinstance(inner, exp.Star):
                cols.append("*")
            elif isinstance(inner, exp.Column):
                table.type_of(inner.name)
                cols.append(inner.name)
            else:
                cols.append(inner.sql("spark"))
        node = ir.Project(node, tuple(cols))
        if select.args.get("distinct"):
            node = ir.Distinct(node)
    order = select.args.get("order")
    if order is not None:
        node = ir.Sort(node, tuple((o.this.sql("spark"), bool(o.args.get("desc"))) for o in order.expressions))
    limit = select.args.get("limit")
    if limit is not None:
        n = _operand(limit.expression, table)
        node = ir.Limit(node, n if isinstance(n, (ir.Const, ir.Param)) else ir.Const(float("nan")))
    return node
