"""Plan BAND_JOIN: ``SELECT cols FROM R JOIN S ON S.b - R.b BETWEEN lo AND hi`` with optional closed
range selections on either side becomes the band-join group node (003 §4.3: ``R ⋈_{S.B-R.B∈rangeB}
S``; §4.3 Example 2 adds local selections).

Every join conjunct is a comparison of sums of columns and values; moved to one side it must read
``S.b - R.b op v`` for one column of each table (the same two in every conjunct) and at most one
parameter (or constants only).  So the band may be spelled ``S.b - R.b BETWEEN lo AND hi``,
``R.b BETWEEN S.b - hi AND S.b - lo``, ``S.b BETWEEN R.b + lo AND R.b + hi``, ``R.b - S.b BETWEEN
-hi AND -lo``, two comparisons (``S.b >= R.b + lo AND S.b <= R.b + hi``), or ``S.b = R.b + d``
(the band [d, d]); one comparison alone is a band with one open end.  R is the table the catalog
declares first; a band written as R - S is negated (:class:`~sparksub.planner.ir.Neg` for a
parameter).  Strict bounds close on the type of the difference (integral when both join columns
are), as ``close_strict_bounds`` does for selections.  Two bounds on one end merge when both are
constants (the tighter wins), as ``merge_ranges`` does.

Not bands: the plain equality ``R.b = S.b`` (SELECT_JOIN, ``plan_select_join``), ``!=``, sums
``R.b + S.b``, multiples, two different column pairs, a constant added to a parameter, ORs, three
tables, self-joins and anything above the projection (aggregates, DISTINCT, ORDER BY, LIMIT).

>>> from sparksub.planner import ir
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog()
>>> cat.add(TableDef("r", (("rid", "string"), ("a", "double"), ("b", "double")), "rid"))
>>> cat.add(TableDef("s", (("sid", "string"), ("b", "double"), ("c", "double")), "sid"))
>>> rb_minus_sb = ir.Linear(((1, "r.b"), (-1, "s.b")))
>>> j = ir.Join(ir.Scan("r"), ir.Scan("s"), (ir.Compare(rb_minus_sb, ">=", ir.Param("lo")),
...                                          ir.Compare(rb_minus_sb, "<", ir.Const(3.0))))
>>> str(plan_band_join(ir.Project(j, ("*",)), cat))
'BandJoinGroupScan[* of r JOIN s ON s.b - r.b IN [-2.9999999999999996, -:lo] WHERE TRUE]'
"""
from __future__ import annotations

from sparksub.catalyst_rules.rules.close_strict_bounds import pred_value, succ_value
from sparksub.catalyst_rules.rules.plan_select_join import join_sides, qualified_column, side_ranges
from sparksub.errors import AnalysisError
from sparksub.planner import ir
from sparksub.planner.catalog import INTEGRAL_TYPES, NUMERIC_TYPES

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


def _terms(operand) -> tuple[dict[str, int], list[tuple[int, ir.Value]]] | None:
    if isinstance(operand, ir.ColumnRef):
        return {operand.name: 1}, []
    if isinstance(operand, (ir.Const, ir.Param)):
        return {}, [(1, operand)]
    if isinstance(operand, ir.Linear):
        cols: dict[str, int] = {}
        for sign, name in operand.columns:
            cols[name] = cols.get(name, 0) + sign
        return cols, list(operand.values)
    return None


def _fold(values: list[tuple[int, ir.Value]]) -> ir.Value | None:
    """The sum of signed values as one value: constants fold; one parameter alone stays (negated if
    subtracted); a parameter plus a constant, or two parameters, have no value form (None)."""
    total, params = 0.0, []
    for sign, v in values:
        if isinstance(v, ir.Const) and not isinstance(v.value, str):
            total += sign * v.value
        elif isinstance(v, ir.Param):
            params.append(v if sign > 0 else ir.Neg(v))
        else:
            return None
    if not params:
        return ir.Const(total + 0.0)  # + 0.0: no -0.0 in templates
    return params[0] if len(params) == 1 and total == 0.0 else None


def _band_bound(cond, sides) -> tuple[tuple[str, str], str, ir.Value] | None:
    """One conjunct as ``((R column, S column), op, v)`` meaning ``S.col - R.col op v``; None if it is
    not of that form."""
    if not isinstance(cond, ir.Compare) or cond.op not in _FLIP:
        return None
    left, right = _terms(cond.left), _terms(cond.right)
    if left is None or right is None:
        return None
    cols = dict(left[0])
    for name, sign in right[0].items():
        cols[name] = cols.get(name, 0) - sign
    cols = {name: sign for name, sign in cols.items() if sign}
    values = left[1] + [(-sign, v) for sign, v in right[1]]  # left - right op 0
    if len(cols) != 2:
        return None
    where = {qualified_column(name, sides): sign for name, sign in cols.items()}
    if None in where or {side for side, _ in where} != {0, 1}:
        return None
    (r_col, r_sign), = [(col, sign) for (side, col), sign in where.items() if side == 0]
    (s_col, s_sign), = [(col, sign) for (side, col), sign in where.items() if side == 1]
    if {r_sign, s_sign} != {1, -1}:
        return None  # R.b + S.b, 2·S.b - R.b, ...: not a difference
    op = cond.op
    if s_sign < 0:  # R.b - S.b + V op 0  <=>  S.b - R.b - V (flipped op) 0
        op, values = _FLIP[op], [(-sign, v) for sign, v in values]
    bound = _fold([(-sign, v) for sign, v in values])  # S.b - R.b op -V
    return None if bound is None else ((r_col, s_col), op, bound)


def _tightest(bounds: list[ir.Value], lower: bool) -> ir.Value | None | bool:
    """The tighter of several bounds on one end: None for none, False when it cannot be decided
    statically (a parameter beside another bound)."""
    if not bounds:
        return None
    if len(bounds) == 1:
        return bounds[0]
    if all(isinstance(b, ir.Const) for b in bounds):
        return (max if lower else min)(bounds, key=lambda b: b.value)
    return False


def plan_band_join(plan: ir.Node, catalog) -> ir.Node:
    sides = join_sides(plan, catalog)
    if sides is None or not sides.conditions:
        return plan
    found = []
    for cond in sides.conditions:
        if isinstance(cond, ir.Compare) and cond.op == "=" and isinstance(cond.left, ir.ColumnRef) \
                and isinstance(cond.right, ir.ColumnRef):
            return plan  # R.b = S.b is the equality join of plan_select_join, not the band [0, 0]
        b = _band_bound(cond, sides)
        if b is None:
            return plan
        found.append(b)
    pairs = {pair for pair, _, _ in found}
    if len(pairs) != 1:
        return plan  # two different column pairs: not one band
    (r_col, s_col), = pairs
    r_def, s_def = catalog.get(sides.left), catalog.get(sides.right)
    for tdef, col in ((r_def, r_col), (s_def, s_col)):
        if tdef.type_of(col) not in NUMERIC_TYPES:
            raise AnalysisError(f"the band join attribute {col!r} of table {tdef.name!r} is "
                                f"{tdef.type_of(col)}, not numeric")
    # s.b - r.b is integral only when both are (003 §4.3: rangeB over the numeric domain of B).
    integral = r_def.type_of(r_col) in INTEGRAL_TYPES and s_def.type_of(s_col) in INTEGRAL_TYPES
    lows, highs = [], []
    for _, op, v in found:
        if op in ("=", ">=", ">"):
            lows.append(v if op != ">" else ir.Const(succ_value(v.value, integral))
                        if isinstance(v, ir.Const) else ir.Succ(v, integral))
        if op in ("=", "<=", "<"):
            highs.append(v if op != "<" else ir.Const(pred_value(v.value, integral))
                         if isinstance(v, ir.Const) else ir.Pred(v, integral))
    low, high = _tightest(lows, lower=True), _tightest(highs, lower=False)
    if low is False or high is False:
        return plan
    rw = side_ranges(sides.left, sides.left_conjuncts, catalog)
    sw = side_ranges(sides.right, sides.right_conjuncts, catalog)
    if rw is None or sw is None:
        return plan
    return ir.BandJoinGroupScan(sides.left, sides.right, r_col, s_col, low, high, rw, sw, sides.columns)
