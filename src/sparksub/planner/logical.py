"""sqlglot SELECT -> logical plan IR (``planner.ir``), resolving tables and columns in the catalog.

Only the translation happens here; every normalisation is a rule in ``catalyst_rules``.  A FROM with
joins resolves each column through its alias or, bare, to the one joined table that has it (ambiguous
and unknown columns are errors naming the column); each conjunct (ON or WHERE, alike for an inner join)
goes to the tables it reads: a Filter under its one table, or the Join's conditions (003 §4.3).

>>> from sparksub.grammar import parse_select
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("stock", (("symbol", "string"), ("risk", "double"), ("per", "double")), "symbol"))
>>> str(to_logical(parse_select("SELECT MIN(per) FROM stock WHERE 20 <= risk AND risk < :hi"), cat))
'Aggregate[MIN(per)](Filter[20.0 <= risk AND risk < :hi](Scan[stock]))'
"""
from __future__ import annotations

from sqlglot import exp

from sparksub.errors import AnalysisError, InvalidSubscription, UnsupportedSubscription
from sparksub.grammar.statements import position
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES, Catalog
from sparksub.planner.classes import SUPPORTED_CLASSES

__all__ = ["to_logical"]

_CMP = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_AGG = {exp.Min: "MIN", exp.Max: "MAX", exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG"}
#: the largest LIMIT k (k per subscription is an int64 column)
MAX_K = 2**63 - 1


def _located(err: AnalysisError, *nodes: exp.Expression) -> AnalysisError:
    """``err`` pointing at the first of ``nodes`` whose place in the statement's text is known (DESIGN §7:
    what and where); ``err`` itself when none is (a TRUE literal has no place of its own)."""
    if err.line is not None:
        return err
    where = next((w for w in map(position, nodes) if w is not None), None)
    return err if where is None else AnalysisError(err.message, *where)


def _unsupported(shape: str) -> UnsupportedSubscription:
    return UnsupportedSubscription(shape, SUPPORTED_CLASSES)


def _column_type(col: exp.Column, table) -> str:
    """The column's type; an unknown column is an AnalysisError pointing at it."""
    try:
        return table.type_of(col.name)
    except AnalysisError as err:
        raise _located(err, col) from None


def _kind(spark_type: str) -> str:
    return "number" if spark_type in NUMERIC_TYPES else spark_type


def _check_constant(col: exp.Expression, const: exp.Expression, table) -> None:
    """A column compared with a constant of another kind (``risk > 'abc'``, ``per = TRUE``, ``sector = 1``)
    is an AnalysisError pointing at the constant: Spark would cast one side (and fail, or compare strings
    with numbers), our operators compare values of the column's type (DESIGN §7: a type mismatch)."""
    if not isinstance(col, exp.Column) or isinstance(col.this, exp.Star):
        return
    if isinstance(const, exp.Neg):
        const = const.this
    if isinstance(const, exp.Boolean):
        kind = "boolean"
    elif isinstance(const, exp.Literal):
        kind = "string" if const.is_string else "number"
    else:
        return
    ctype = _column_type(col, table)
    if ctype not in NUMERIC_TYPES and ctype not in ("string", "boolean"):
        return  # dates and timestamps: Spark reads string constants as them
    if _kind(ctype) != kind:
        shown = const.sql(dialect="spark")
        raise _located(AnalysisError(f"column {col.name!r} of table {table.name!r} is {ctype}, compared with "
                                     f"the {kind} {shown}"), const, col)


def _operand(e: exp.Expression, table) -> ir.ColumnRef | ir.Const | ir.Param | None:
    if isinstance(e, exp.Column):
        _column_type(e, table)  # unknown column -> AnalysisError
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
    if isinstance(e, tuple(_CMP)):
        _check_constant(e.this, e.expression, table)
        _check_constant(e.expression, e.this, table)
    elif isinstance(e, exp.Between):
        _check_constant(e.this, e.args["low"], table)
        _check_constant(e.this, e.args["high"], table)
    elif isinstance(e, exp.In):
        for v in e.expressions:
            _check_constant(e.this, v, table)
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
        _column_type(col, table)
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


def _check_shape(select: exp.Expression) -> None:
    """What no class is, refused before the tables are read, as an UnsupportedSubscription naming the
    shape: set operations, WITH (a CTE is not ignored), subqueries anywhere, GROUP BY."""
    if not isinstance(select, exp.Select):
        raise _unsupported(f"{type(select).__name__}[{select.sql(dialect='spark')}] (a subscription is one SELECT)")
    with_ = select.args.get("with_") or select.args.get("with")
    if with_ is not None:
        raise _unsupported(f"With[{with_.sql(dialect='spark')}] (a common table expression)")
    for node in select.walk():
        if node is not select and isinstance(node, (exp.Query, exp.Subquery)):
            raise _unsupported(f"Subquery[{node.sql(dialect='spark')}]")
    group = select.args.get("group")
    if group is not None:
        keys = ", ".join(g.sql(dialect="spark") for g in group.expressions)
        raise _unsupported(f"GroupBy[{keys}]({select.sql(dialect='spark')})")


def to_logical(select: exp.Expression, catalog: Catalog) -> ir.Node:
    _check_shape(select)
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table):
        raise AnalysisError("a subscription reads FROM one declared table")
    if select.args.get("joins"):
        return _join_to_logical(select, from_.this, catalog)
    try:
        table = catalog.get(from_.this.name)
    except AnalysisError as err:
        raise _located(err, from_.this) from None
    node: ir.Node = ir.Scan(table.name)
    where = select.args.get("where")
    if where is not None:
        node = ir.Filter(node, tuple(_predicate(c, table) for c in _conjuncts(where.this)))
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
            _column_type(arg, table)
            column = arg.name
        else:
            for col in arg.find_all(exp.Column):
                _column_type(col, table)  # an unknown column is named first
            raise _unsupported(f"Aggregate[{agg.sql('spark')}] (an aggregate over an expression)")
        node = ir.Aggregate(node, _AGG[type(agg)], column)
    else:
        cols = []
        for p in projections:
            inner = p.unalias()
            if isinstance(inner, exp.Star):
                cols.append("*")
            elif isinstance(inner, exp.Column):
                _column_type(inner, table)
                cols.append(inner.name)
            else:
                cols.append(inner.sql("spark"))
        node = ir.Project(node, tuple(cols))
        if select.args.get("distinct"):
            node = ir.Distinct(node)
    node = _order_and_limit(node, select, table)
    return node


# ---- joins (003 §4.3: SELECT_JOIN and BAND_JOIN) ---------------------------------------------------

class _Scope:
    """The tables of a FROM with joins, and how their columns resolve: ``x.col`` through the alias (or
    table name) ``x``, a bare ``col`` to the one table that has it. A resolved column is named
    ``table.col`` (the catalog's table name, so every alias spelling plans alike), or ``alias.col`` in
    a self-join, where the table name would not say which side."""

    def __init__(self, tables: list[tuple[str, "object"]]):
        self.tables = tables  # (alias or name, TableDef), in FROM order
        names = [t.name.lower() for _, t in tables]
        self.self_join = len(set(names)) < len(names)
        seen: dict[str, str] = {}
        for alias, t in tables:
            if alias.lower() in seen:
                raise AnalysisError(f"the name {alias!r} is given to two tables in FROM "
                                    f"({seen[alias.lower()]} and {t.name}): alias one of them")
            seen[alias.lower()] = t.name

    def qualifier(self, i: int) -> str:
        alias, t = self.tables[i]
        return alias if self.self_join else t.name

    def resolve(self, col: exp.Column) -> tuple[int, str]:
        """(index of the table, column name); unknown, ambiguous or mis-qualified columns raise."""
        name, qual = col.name, col.table
        if qual:
            for i, (alias, t) in enumerate(self.tables):
                if alias.lower() == qual.lower():
                    t.type_of(name)  # unknown column -> AnalysisError naming the table
                    return i, name
            known = ", ".join(a if a == t.name else f"{a} ({t.name})" for a, t in self.tables)
            raise AnalysisError(f"unknown table or alias {qual!r} in column {qual}.{name} (FROM has: {known})")
        having = [i for i, (_, t) in enumerate(self.tables) if name in t.column_names]
        if not having:
            cols = "; ".join(f"{t.name}: {', '.join(t.column_names)}" for _, t in self.tables)
            raise AnalysisError(f"unknown column {name!r} in the joined tables ({cols})")
        if len(having) > 1:
            both = " or ".join(f"{self.tables[i][0]}.{name}" for i in having)
            raise AnalysisError(f"ambiguous column {name!r}: more than one joined table has it; "
                                f"qualify it ({both})")
        return having[0], name

    def qualified(self, col: exp.Column) -> str:
        i, name = self.resolve(col)
        return f"{self.qualifier(i)}.{name}"

    def tables_of(self, e: exp.Expression) -> set[int]:
        return {self.resolve(c)[0] for c in e.find_all(exp.Column) if not isinstance(c.this, exp.Star)}


def _join_kind(j: exp.Join) -> str:
    if j.args.get("method"):
        return str(j.args["method"]).upper()  # NATURAL ...
    side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
    if side:
        return f"{side} OUTER" if kind in ("", "OUTER") else f"{side} {kind}"
    # A comma join and CROSS JOIN are the product, restricted by the WHERE: an inner join.
    return "INNER" if kind in ("", "INNER", "CROSS") else kind


def _linear(e: exp.Expression, scope: _Scope):
    """``e`` as signed column and value terms, or None when it is not a sum/difference of those."""
    if isinstance(e, exp.Paren):
        return _linear(e.this, scope)
    if isinstance(e, exp.Column) and not isinstance(e.this, exp.Star):
        return [(1, scope.qualified(e))], []
    if isinstance(e, exp.Neg):
        inner = _linear(e.this, scope)
        return None if inner is None else ([(-s, c) for s, c in inner[0]], [(-s, v) for s, v in inner[1]])
    if isinstance(e, (exp.Add, exp.Sub)):
        a, b = _linear(e.this, scope), _linear(e.expression, scope)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(e, exp.Add) else -1
        return a[0] + [(sign * s, c) for s, c in b[0]], a[1] + [(sign * s, v) for s, v in b[1]]
    if isinstance(e, exp.Literal) and not e.is_string:
        return [], [(1, ir.Const(float(e.this)))]
    if isinstance(e, exp.Placeholder):
        if not e.name:
            raise AnalysisError("positional '?' parameters are not supported: name them (:lo)")
        return [], [(1, ir.Param(e.name))]
    return None


def _join_operand(e: exp.Expression, scope: _Scope):
    lin = _linear(e, scope)
    if lin is None:
        return None
    cols, vals = lin
    if len(cols) == 1 and not vals and cols[0][0] == 1:
        return ir.ColumnRef(cols[0][1])
    if not cols and len(vals) == 1 and vals[0][0] == 1:
        return vals[0][1]
    return ir.Linear(tuple(cols), tuple(vals))


def _join_predicates(e: exp.Expression, scope: _Scope) -> list[ir.Predicate]:
    """A conjunct that reads both sides: comparisons of sums of columns and values (``x BETWEEN l AND h``
    is ``x >= l AND x <= h``, by definition), anything else opaque."""
    for cls, op in _CMP.items():
        if type(e) is cls:
            left, right = _join_operand(e.this, scope), _join_operand(e.expression, scope)
            if left is not None and right is not None:
                return [ir.Compare(left, op, right)]
    if isinstance(e, exp.Between):
        x, lo, hi = (_join_operand(e.this, scope), _join_operand(e.args["low"], scope),
                     _join_operand(e.args["high"], scope))
        if x is not None and lo is not None and hi is not None:
            return [ir.Compare(x, ">=", lo), ir.Compare(x, "<=", hi)]
    sql = e.sql(dialect="spark")
    return [ir.Opaque(f"({sql})" if isinstance(e, exp.Or) else sql)]  # parenthesised among the ANDs


def _join_to_logical(select: exp.Select, first: exp.Table, catalog: Catalog) -> ir.Node:
    joins = select.args["joins"]
    tables = []
    for t in [first] + [j.this for j in joins]:
        if not isinstance(t, exp.Table):
            raise AnalysisError("a subscription joins declared tables, not subqueries")
        tdef = catalog.get(t.name)
        tables.append((t.alias_or_name, tdef))
    scope = _Scope(tables)
    kinds = [_join_kind(j) for j in joins]
    conjuncts = [c for j in joins for c in _conjuncts(j.args.get("on"))]
    for j in joins:
        for ident in j.args.get("using") or []:  # JOIN s USING (b): r.b = s.b
            name = ident.name
            owners = [i for i, (_, t) in enumerate(tables) if name in t.column_names]
            if len(owners) != 2:
                raise AnalysisError(f"USING ({name}): the column must be in exactly two joined tables")
            conjuncts.append(exp.EQ(this=exp.column(name, scope.tables[owners[0]][0]),
                                    expression=exp.column(name, scope.tables[owners[1]][0])))
    where = _conjuncts(select.args["where"].this) if select.args.get("where") is not None else []
    inner = all(k == "INNER" for k in kinds)
    side_preds: list[list[ir.Predicate]] = [[] for _ in tables]
    cross: list[ir.Predicate] = []
    top: list[ir.Predicate] = []
    # Inner-join semantics make ON and WHERE conjuncts interchangeable: each one goes to the tables it
    # reads (one table: a local selection, 003 §4.3 σ_{A∈rangeA} R; both: the join condition).
    for c in conjuncts + (where if inner else []):
        readers = scope.tables_of(c)
        if len(readers) == 1:
            i = readers.pop()
            side_preds[i].append(_predicate(c, tables[i][1]))
        else:
            cross.extend(_join_predicates(c, scope))
    if not inner:  # an outer join's WHERE is not its ON: kept above the join, unplanned
        top = [p for c in where for p in _join_predicates(c, scope)]
    sides = [ir.Filter(ir.Scan(t.name), tuple(ps)) if ps else ir.Scan(t.name)
             for (_, t), ps in zip(tables, side_preds)]
    node: ir.Node = sides[0]
    for i, kind in enumerate(kinds, start=1):
        node = ir.Join(node, sides[i], tuple(cross) if i == len(kinds) else (), kind)
    if top:
        node = ir.Filter(node, tuple(top))
    cols = []
    aggs = [p for p in select.expressions if type(p.unalias()) in _AGG]
    if aggs:
        agg = select.expressions[0].unalias()
        if len(select.expressions) != 1:
            return ir.Project(ir.Aggregate(node, "MULTI", None), (", ".join(p.sql("spark") for p in select.expressions),))
        arg = agg.this
        column = None if arg is None or isinstance(arg, exp.Star) else \
            scope.qualified(arg) if isinstance(arg, exp.Column) else arg.sql("spark")
        node = ir.Aggregate(node, _AGG[type(agg)], column)
    else:
        for p in select.expressions:
            e = p.unalias()
            if isinstance(e, exp.Star):
                cols.append("*")
            elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
                cols.append(_star_of(e, scope))
            elif isinstance(e, exp.Column):
                cols.append(scope.qualified(e))
            else:
                scope.tables_of(e)  # unknown / ambiguous columns fail here too
                cols.append(e.sql("spark"))
        node = ir.Project(node, tuple(cols))
        if select.args.get("distinct"):
            node = ir.Distinct(node)
    node = _order_and_limit(node, select, tables[0][1])
    return node


def _star_of(e: exp.Column, scope: _Scope) -> str:
    """``x.*``: all columns of the table named or aliased ``x``."""
    for i, (alias, _) in enumerate(scope.tables):
        if alias.lower() == e.table.lower():
            return f"{scope.qualifier(i)}.*"
    raise AnalysisError(f"unknown table or alias {e.table!r} in {e.table}.*")


def _order_and_limit(node, select: exp.Select, table):
    """ORDER BY and LIMIT over ``node`` (a LIMIT that is not a constant or a parameter becomes NaN, which the
    classifier rejects)."""
    order = select.args.get("order")
    if order is not None:
        node = ir.Sort(node, tuple((o.this.sql("spark"), bool(o.args.get("desc"))) for o in order.expressions))
    limit = select.args.get("limit")
    if limit is not None:
        lit = limit.expression
        if isinstance(lit, exp.Literal) and not lit.is_string:
            try:
                k = int(lit.this)   # exactly: 2**63 is one more than the largest k, but equal as a float
            except ValueError:
                k = float(lit.this)
            if k > MAX_K:
                raise InvalidSubscription(f"LIMIT {lit.this[:40]}: k is a positive integer up to {MAX_K}")
        n = _operand(limit.expression, table)
        node = ir.Limit(node, n if isinstance(n, (ir.Const, ir.Param)) else ir.Const(float("nan")))
    return node
