"""Plan SELECT_JOIN: ``SELECT cols FROM R JOIN S ON R.b = S.b`` with at most one closed range selection
on each side becomes the select-join group node (003 §4.3: ``σ_{A∈rangeA} R ⋈_{R.B=S.B} σ_{C∈rangeC} S``,
a rectangle rangeC x rangeA of the product space S.C x R.A, §4.3.2; either selection may be absent).

R is the table the catalog declares first, whatever the FROM order or the side of ``=`` each column
is written on, so every spelling of one join shares a group (as ``plan_box_range`` orders its two
attributes).  Only an inner join of two different tables whose one condition is the equality of a
column of each matches, under a plain projection: a second condition, a non-equality, an OR, two
ranges on one side, an equality selection, a third table, a self-join (the operators keep R and S as
two inputs, and a tuple of a self-join would be both at once), DISTINCT, ORDER BY, LIMIT or an
aggregate stay unplanned.

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog()
>>> cat.add(TableDef("r", (("rid", "string"), ("a", "double"), ("b", "bigint")), "rid"))
>>> cat.add(TableDef("s", (("sid", "string"), ("b", "bigint"), ("c", "double")), "sid"))
>>> j = ir.Join(ir.Scan("s"), ir.Filter(ir.Scan("r"), (ir.RangePred("a", ir.Param("lo"), True, ir.Const(5.0), True),)),
...             (ir.Compare(ir.ColumnRef("s.b"), "=", ir.ColumnRef("r.b")),))
>>> str(plan_select_join(ir.Project(j, ("r.a", "s.*")), cat))
'SelectJoinGroupScan[r.a, s.* of r JOIN s ON r.b = s.b WHERE r.a IN [:lo, 5.0]]'
"""
from __future__ import annotations

from typing import NamedTuple

from sparksub.errors import AnalysisError
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES


class JoinSides(NamedTuple):
    """An inner join of two different tables under a projection, R (declared first) and S."""
    left: str
    right: str
    left_conjuncts: tuple
    right_conjuncts: tuple
    conditions: tuple
    columns: tuple[str, ...]


def _side(node: ir.Node) -> tuple[str, tuple] | None:
    if isinstance(node, ir.Scan):
        return node.table, ()
    if isinstance(node, ir.Filter) and isinstance(node.child, ir.Scan):
        return node.child.table, node.conjuncts
    return None


def join_sides(plan: ir.Node, catalog) -> JoinSides | None:
    """The parts of ``Project(Join(side, side))`` (a side a Scan or a Filter over one), an INNER join
    of two different tables, with R the table the catalog declares first; None for any other shape
    (three tables, outer joins, self-joins, DISTINCT/ORDER BY/LIMIT/aggregates above the join)."""
    if not (isinstance(plan, ir.Project) and isinstance(plan.child, ir.Join) and plan.child.kind == "INNER"):
        return None
    join = plan.child
    a, b = _side(join.left), _side(join.right)
    if a is None or b is None or a[0].lower() == b[0].lower():
        return None
    order = [t.name.lower() for t in catalog]
    if order.index(a[0].lower()) > order.index(b[0].lower()):
        a, b = b, a
    tables = {a[0]: catalog.get(a[0]), b[0]: catalog.get(b[0])}
    for col in plan.columns:
        qual, _, name = col.partition(".")
        if col != "*" and not (qual in tables and (name == "*" or name in tables[qual].column_names)):
            return None  # an expression (r.a + s.c) or anything else not a column
    return JoinSides(a[0], b[0], a[1], b[1], join.conditions, plan.columns)


def qualified_column(name: str, sides: JoinSides) -> tuple[int, str] | None:
    """``table.col`` as (0 for R / 1 for S, col)."""
    qual, _, col = name.partition(".")
    return (0, col) if qual == sides.left else (1, col) if qual == sides.right else None


def side_ranges(table: str, conjuncts: tuple, catalog) -> tuple[tuple[str, ir.Value | None, ir.Value | None], ...] | None:
    """One side's selection as closed ranges ``(column, low, high)`` on distinct numeric columns, in
    the table's column order; None when a conjunct is anything else (an equality, an OR, a strict
    string bound, two unmerged ranges on one column)."""
    out = {}
    tdef = catalog.get(table)
    for p in conjuncts:
        if not isinstance(p, ir.RangePred) or p.column in out:
            return None
        if (p.low is not None and not p.low_closed) or (p.high is not None and not p.high_closed):
            return None  # close_strict_bounds has not run, or a string kept its strict bound
        out[p.column] = (p.column, p.low, p.high)
    for col in out:
        if tdef.type_of(col) not in NUMERIC_TYPES:
            raise AnalysisError(f"the selection attribute {col!r} of table {tdef.name!r} is "
                                f"{tdef.type_of(col)}, not numeric")
    return tuple(out[c] for c in tdef.column_names if c in out)


def plan_select_join(plan: ir.Node, catalog) -> ir.Node:
    sides = join_sides(plan, catalog)
    if sides is None or len(sides.conditions) != 1:
        return plan
    cond = sides.conditions[0]
    if not (isinstance(cond, ir.Compare) and cond.op == "=" and isinstance(cond.left, ir.ColumnRef)
            and isinstance(cond.right, ir.ColumnRef)):
        return plan
    ends = [qualified_column(cond.left.name, sides), qualified_column(cond.right.name, sides)]
    if None in ends or ends[0][0] == ends[1][0]:
        return plan  # both columns of one table: a selection, not a join condition
    (_, left_on), (_, right_on) = sorted(ends)
    # 003 §4.3.2: one range per side (rangeA on R, rangeC on S); either may be absent.
    ra = side_ranges(sides.left, sides.left_conjuncts, catalog)
    sc = side_ranges(sides.right, sides.right_conjuncts, catalog)
    if ra is None or sc is None or len(ra) > 1 or len(sc) > 1:
        return plan
    a, a_low, a_high = ra[0] if ra else (None, None, None)
    c, c_low, c_high = sc[0] if sc else (None, None, None)
    return ir.SelectJoinGroupScan(sides.left, sides.right, left_on, right_on, a, a_low, a_high,
                                  c, c_low, c_high, sides.columns)
