"""The logical and physical plan IR: small, immutable, typed nodes (in the manner of Ibis).

A subscription's SELECT becomes a tree of these nodes (``planner.logical``); rewrite rules
(``catalyst_rules``) map trees to trees; the classifier reads the final tree. Nodes are frozen
dataclasses, so a rule can never mutate its input, and ``str(node)`` is a stable one-line rendering
used by EXPLAIN and by the golden rule fixtures.

>>> plan = Aggregate(Filter(Scan("stock"), (Between("risk", Const(20.0), Const(60.0)),)), "MIN", "per")
>>> str(plan)
'Aggregate[MIN(per)](Filter[risk BETWEEN 20.0 AND 60.0](Scan[stock]))'
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Union

__all__ = [
    "Const", "Param", "Succ", "Pred", "Neg", "Value", "ColumnRef", "Linear", "Compare", "Between", "RangePred",
    "InList", "IsNull", "Or", "Opaque", "FilterGroupScan", "SelectJoinGroupScan", "BandJoinGroupScan",
    "Predicate", "Node", "Scan", "Filter", "Aggregate", "Project", "Distinct", "Sort", "Limit", "Join",
    "RangeMinGroupScan", "RangeTopkGroupScan", "RangeDistinctGroupScan", "RangeAggGroupScan",
    "BoxMinGroupScan", "BoxTopkGroupScan", "StreamJoinGroupScan", "render_value", "shape_of",
]


# ---- values: what a bound of a range can be ------------------------------------------------------

@dataclass(frozen=True)
class Const:
    value: float | str

    def __str__(self) -> str:
        if isinstance(self.value, str) or not math.isinf(self.value):
            return repr(self.value)
        return "+inf" if self.value > 0 else "-inf"


@dataclass(frozen=True)
class Param:
    """A named template parameter (``:lo``); bound per subscription from a column of ``params``."""
    name: str

    def __str__(self) -> str:
        return f":{self.name}"


@dataclass(frozen=True)
class Succ:
    """The least value of the column's type above ``of`` (``x > a`` becomes ``x >= Succ(a)``)."""
    of: "Value"
    integral: bool

    def __str__(self) -> str:
        return f"succ({self.of})"


@dataclass(frozen=True)
class Pred:
    """The greatest value of the column's type below ``of`` (``x < b`` becomes ``x <= Pred(b)``)."""
    of: "Value"
    integral: bool

    def __str__(self) -> str:
        return f"pred({self.of})"


@dataclass(frozen=True)
class Neg:
    """``-of``: a negated parameter (a band ``R.b - S.b BETWEEN :lo AND :hi`` is ``S.b - R.b`` in
    [-:hi, -:lo]); constants are negated at once, so ``of`` is never a :class:`Const`."""
    of: "Value"

    def __str__(self) -> str:
        return f"-{self.of}"


Value = Union[Const, Param, Succ, Pred, Neg]


def render_value(v: Value | None, *, anonymous: bool = False) -> str:
    if v is None:
        return "unbounded"
    if anonymous and isinstance(v, Const):
        return "?"
    if isinstance(v, Neg):
        return f"-{render_value(v.of, anonymous=anonymous)}"
    if isinstance(v, (Succ, Pred)):
        return f"{type(v).__name__.lower()}({render_value(v.of, anonymous=anonymous)})"
    return str(v)


# ---- predicates -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ColumnRef:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Linear:
    """A sum of signed columns and signed values, ``s.b - r.b + :lo``: an operand of a join condition
    (003 §4.3: the band ``S.B - R.B IN rangeB``).  ``columns`` are (sign, qualified name) pairs,
    ``values`` (sign, value) pairs, each sign +1 or -1, in the order written."""
    columns: tuple[tuple[int, str], ...]
    values: tuple[tuple[int, "Value"], ...] = ()

    def __str__(self) -> str:
        out = ""
        for sign, term in self.columns + self.values:
            if not out:
                out = ("-" if sign < 0 else "") + str(term)
            else:
                out += (" - " if sign < 0 else " + ") + str(term)
        return out or "0"


@dataclass(frozen=True)
class Compare:
    """``left op right``; the rules move the column to the left."""
    left: Union[ColumnRef, Const, Param, Linear]
    op: str  # one of = != < <= > >=
    right: Union[ColumnRef, Const, Param, Linear]

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class Between:
    column: str
    low: Value
    high: Value

    def __str__(self) -> str:
        return f"{self.column} BETWEEN {self.low} AND {self.high}"


@dataclass(frozen=True)
class RangePred:
    """``low <= column <= high`` (closed after normalisation); ``None`` is an open end."""
    column: str
    low: Value | None
    low_closed: bool
    high: Value | None
    high_closed: bool

    def __str__(self) -> str:
        lo = "(-inf" if self.low is None else ("[" if self.low_closed else "(") + str(self.low)
        hi = "+inf)" if self.high is None else str(self.high) + ("]" if self.high_closed else ")")
        return f"{self.column} IN {lo}, {hi}"


@dataclass(frozen=True)
class InList:
    """``column IN (v1, v2, ...)``."""
    column: str
    values: tuple["Value", ...]

    def __str__(self) -> str:
        return f"{self.column} IN ({', '.join(str(v) for v in self.values)})"


@dataclass(frozen=True)
class IsNull:
    """``column IS NULL`` (``negated``: ``IS NOT NULL``)."""
    column: str
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.column} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class Or:
    """A disjunction of conjunctions (DNF), each conjunction a tuple of predicates."""
    disjuncts: tuple[tuple["Predicate", ...], ...]

    def __str__(self) -> str:
        return " OR ".join("(" + " AND ".join(str(p) for p in c) + ")" for c in self.disjuncts)


@dataclass(frozen=True)
class Opaque:
    """A predicate outside the range forms (OR, IN, functions, column-to-column): kept as SQL text."""
    sql: str

    def __str__(self) -> str:
        return self.sql


Predicate = Union[Compare, Between, RangePred, InList, IsNull, Or, Opaque]


# ---- plan nodes -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    @property
    def children(self) -> tuple["Node", ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                     if isinstance(getattr(self, f.name), Node))

    def with_children(self, children: tuple["Node", ...]) -> "Node":
        it = iter(children)
        changes = {f.name: next(it) for f in dataclasses.fields(self) if isinstance(getattr(self, f.name), Node)}
        return dataclasses.replace(self, **changes) if changes else self

    def transform_up(self, fn) -> "Node":
        """Apply ``fn`` bottom-up (Catalyst's ``transformUp``); ``fn`` returns a node (maybe the same)."""
        kids = tuple(c.transform_up(fn) for c in self.children)
        node = self.with_children(kids) if kids != self.children else self
        return fn(node)

    def args_str(self) -> str:
        return ""

    def __str__(self) -> str:
        inner = ", ".join(str(c) for c in self.children)
        return f"{type(self).__name__}[{self.args_str()}]" + (f"({inner})" if inner else "")


@dataclass(frozen=True)
class Scan(Node):
    table: str

    def args_str(self) -> str:
        return self.table


@dataclass(frozen=True)
class Filter(Node):
    child: Node
    conjuncts: tuple[Predicate, ...]

    def args_str(self) -> str:
        return " AND ".join(str(p) for p in self.conjuncts)


@dataclass(frozen=True)
class Aggregate(Node):
    child: Node
    func: str  # MIN MAX COUNT SUM AVG ...
    column: str | None  # None for COUNT(*)

    def args_str(self) -> str:
        return f"{self.func}({self.column or '*'})"


@dataclass(frozen=True)
class Project(Node):
    child: Node
    columns: tuple[str, ...]

    def args_str(self) -> str:
        return ", ".join(self.columns)


@dataclass(frozen=True)
class Distinct(Node):
    child: Node


@dataclass(frozen=True)
class Sort(Node):
    child: Node
    keys: tuple[tuple[str, bool], ...]  # (column, descending)

    def args_str(self) -> str:
        return ", ".join(c + (" DESC" if d else "") for c, d in self.keys)


@dataclass(frozen=True)
class Limit(Node):
    child: Node
    n: Value

    def args_str(self) -> str:
        return str(self.n)


@dataclass(frozen=True)
class Join(Node):
    """``left JOIN right`` on the conjunction ``conditions`` (the conjuncts that read both sides, with
    qualified column names ``table.column``); a conjunct that reads one side is a Filter under that
    side. ``kind`` is INNER (also for ``FROM r, s`` and CROSS JOIN) or what else was written (LEFT,
    NATURAL, ...), which no class serves."""
    left: Node
    right: Node
    conditions: tuple[Predicate, ...]
    kind: str = "INNER"

    def args_str(self) -> str:
        cond = " AND ".join(str(p) for p in self.conditions) or "TRUE"
        return cond if self.kind == "INNER" else f"{self.kind}: {cond}"


# ---- physical nodes (one per operator family) ------------------------------------------------------

@dataclass(frozen=True)
class RangeMinGroupScan(Node):
    """RANGE_MIN / RANGE_MAX: ``MIN(y)`` (``MAX(y)``) over ``x`` in the closed range [low, high].

    Every subscription with the same (table, x, y, MIN|MAX) shares one group operator, whatever its
    constants: ``low``/``high`` say where each subscription's ends come from (a constant, a parameter
    column, or unbounded), and ``bind`` turns them into numpy columns.
    """
    table: str
    x: str
    y: str
    maximum: bool
    low: Value | None
    high: Value | None

    @property
    def klass(self) -> str:
        return "RANGE_MAX" if self.maximum else "RANGE_MIN"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.table, self.x, self.y)

    def args_str(self) -> str:
        return (f"{'MAX' if self.maximum else 'MIN'}({self.y}) over {self.x} IN "
                f"[{render_value(self.low)}, {render_value(self.high)}] of {self.table}")


@dataclass(frozen=True)
class RangeTopkGroupScan(Node):
    """RANGE_TOPK: ``SELECT cols FROM t WHERE x BETWEEN low AND high ORDER BY y [DESC] LIMIT k`` (002).

    One group per (table, x, y, order); ``k`` is a constant or a per-subscription parameter (the
    operator keeps one sweep for the largest k in use, 002 §II-A read per k).  Ties in y are broken
    by the table's key, ascending, in both orders."""
    table: str
    x: str
    y: str
    descending: bool
    low: Value | None
    high: Value | None
    k: Value
    columns: tuple[str, ...]

    klass = "RANGE_TOPK"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.table, self.x, self.y, self.descending)

    def args_str(self) -> str:
        return (f"TOP {render_value(self.k)} BY {self.y}{' DESC' if self.descending else ''} over {self.x} IN "
                f"[{render_value(self.low)}, {render_value(self.high)}] of {self.table}")


@dataclass(frozen=True)
class RangeDistinctGroupScan(Node):
    """RANGE_DISTINCT: ``SELECT DISTINCT y FROM t WHERE x BETWEEN low AND high`` (000 §4: Mar over
    the tuples sharing a y value)."""
    table: str
    x: str
    y: str
    low: Value | None
    high: Value | None

    klass = "RANGE_DISTINCT"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.table, self.x, self.y)

    def args_str(self) -> str:
        return f"DISTINCT {self.y} over {self.x} IN [{render_value(self.low)}, {render_value(self.high)}] of {self.table}"


@dataclass(frozen=True)
class RangeAggGroupScan(Node):
    """RANGE_AGG: ``SELECT COUNT(*) | SUM(y) | AVG(y) FROM t WHERE x BETWEEN low AND high`` (000 §4:
    relaxed range subscriptions; ``y`` is None for COUNT)."""
    table: str
    x: str
    y: str | None
    func: str
    low: Value | None
    high: Value | None

    klass = "RANGE_AGG"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.table, self.x, self.y, self.func)

    def args_str(self) -> str:
        return (f"{self.func}({self.y or '*'}) over {self.x} IN [{render_value(self.low)}, "
                f"{render_value(self.high)}] of {self.table}")


def _box_str(x: str, low, high, x2: str, low2, high2) -> str:
    return (f"{x} IN [{render_value(low)}, {render_value(high)}] AND "
            f"{x2} IN [{render_value(low2)}, {render_value(high2)}]")


@dataclass(frozen=True)
class BoxMinGroupScan(Node):
    """BOX_MIN / BOX_MAX: ``MIN(y)`` (``MAX(y)``) over the 2-d box ``x IN [low, high] AND x2 IN
    [low2, high2]`` (002 §IV-C: a box subscription is the point (low, high, low2, high2) of the 4-d
    subscription space; 000 §4: Mar in higher dimensions).

    As :class:`RangeMinGroupScan`, with a second range attribute: one group per (table, x, x2, y,
    MIN|MAX); ``x`` is the range attribute declared first in the table, whatever the WHERE order,
    so both spellings share a group.  ``low2``/``high2`` bound ``x2`` as ``low``/``high`` bound ``x``.
    """
    table: str
    x: str
    x2: str
    y: str
    maximum: bool
    low: Value | None
    high: Value | None
    low2: Value | None
    high2: Value | None

    @property
    def klass(self) -> str:
        return "BOX_MAX" if self.maximum else "BOX_MIN"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.table, self.x, self.x2, self.y)

    def args_str(self) -> str:
        return (f"{'MAX' if self.maximum else 'MIN'}({self.y}) over "
                f"{_box_str(self.x, self.low, self.high, self.x2, self.low2, self.high2)} of {self.table}")


@dataclass(frozen=True)
class BoxTopkGroupScan(Node):
    """BOX_TOPK: ``SELECT cols FROM t WHERE x BETWEEN low AND high AND x2 BETWEEN low2 AND high2
    ORDER BY y [DESC] LIMIT k`` (002 §IV-C: Paint-Dense lifted to 2-d boxes).

    As :class:`RangeTopkGroupScan`, with a second range attribute (``x`` declared first in the
    table): one group per (table, x, x2, y, order); ``k`` a constant or a per-subscription
    parameter; ties in y broken by the table's key, ascending, in both orders."""
    table: str
    x: str
    x2: str
    y: str
    descending: bool
    low: Value | None
    high: Value | None
    low2: Value | None
    high2: Value | None
    k: Value
    columns: tuple[str, ...]

    klass = "BOX_TOPK"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.table, self.x, self.x2, self.y, self.descending)

    def args_str(self) -> str:
        return (f"TOP {render_value(self.k)} BY {self.y}{' DESC' if self.descending else ''} over "
                f"{_box_str(self.x, self.low, self.high, self.x2, self.low2, self.high2)} of {self.table}")


@dataclass(frozen=True)
class FilterGroupScan(Node):
    """FILTER: a stateless selection ``SELECT cols FROM t WHERE`` a disjunction of conjunctions of
    ``attr op value`` (001). One group per table; ``disjuncts`` is the subscription's DNF, each
    predicate an ``(attr, op, values)`` triple with op in = != < <= > >= between in is_null
    is_not_null; ``columns`` the projection (``('*',)`` for all)."""
    table: str
    columns: tuple[str, ...]
    disjuncts: tuple[tuple[tuple[str, str, tuple], ...], ...]

    klass = "FILTER"

    @property
    def group_key(self) -> tuple:
        return ("FILTER", self.table)

    def args_str(self) -> str:
        ors = " OR ".join("(" + " AND ".join(
            f"{a} {op} {', '.join(str(v) for v in vals)}".rstrip() for a, op, vals in conj) + ")"
            for conj in self.disjuncts) or "TRUE"
        return f"{', '.join(self.columns)} of {self.table} WHERE {ors}"


def _where_str(table: str, ranges) -> list[str]:
    return [f"{table}.{col} IN [{render_value(lo)}, {render_value(hi)}]" for col, lo, hi in ranges]


@dataclass(frozen=True)
class SelectJoinGroupScan(Node):
    """SELECT_JOIN: ``SELECT cols FROM R JOIN S ON R.b = S.b WHERE R.a BETWEEN a_low AND a_high AND S.c
    BETWEEN c_low AND c_high`` (003 §4.3: the equality join with local selections
    ``σ_{A∈rangeA} R ⋈_{R.B=S.B} σ_{C∈rangeC} S``, the rectangle rangeC x rangeA of §4.3.2).

    ``left`` (R) is the table the catalog declares first, whatever the FROM order, so both orders
    share a group; ``left_on``/``right_on`` are the join columns of R and S, ``a``/``c`` the selection
    columns of R and S (None when that side has no selection; its ends are then None too, i.e.
    unbounded), each end a constant, a parameter or None.  ``columns`` is the projection with
    qualified names (``r.a``, ``s.*``) or ``('*',)``.  One group per (R, S, join columns, selection
    columns): the SJ-SSI of the group holds every subscription's rectangle (003 §4.3.2)."""
    left: str
    right: str
    left_on: str
    right_on: str
    a: str | None
    a_low: Value | None
    a_high: Value | None
    c: str | None
    c_low: Value | None
    c_high: Value | None
    columns: tuple[str, ...]

    klass = "SELECT_JOIN"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.left, self.right, self.left_on, self.right_on, self.a, self.c)

    def args_str(self) -> str:
        where = (_where_str(self.left, ((self.a, self.a_low, self.a_high),) if self.a else ())
                 + _where_str(self.right, ((self.c, self.c_low, self.c_high),) if self.c else ()))
        return (f"{', '.join(self.columns)} of {self.left} JOIN {self.right} ON {self.left}.{self.left_on} = "
                f"{self.right}.{self.right_on} WHERE {' AND '.join(where) or 'TRUE'}")


@dataclass(frozen=True)
class BandJoinGroupScan(Node):
    """BAND_JOIN: ``SELECT cols FROM R JOIN S ON S.b - R.b BETWEEN low AND high`` with optional local
    range selections on either side (003 §4.3: ``R ⋈_{S.B-R.B∈rangeB} S``; Example 2 adds the
    selections).

    ``left`` (R) is the table the catalog declares first; the band is always on ``S.right_on -
    R.left_on`` (a spelling with R - S is negated: :class:`Neg` for parameters), closed, an end None
    when unbounded.  ``left_where``/``right_where`` are conjunctions of closed ranges ``(column, low,
    high)`` on R's and S's columns, in the table's column order.  One group per (R, S, join columns):
    the BJ-SSI indexes the bands only; the selections are per-query filters (003 §4.3.1)."""
    left: str
    right: str
    left_on: str
    right_on: str
    low: Value | None
    high: Value | None
    left_where: tuple[tuple[str, Value | None, Value | None], ...]
    right_where: tuple[tuple[str, Value | None, Value | None], ...]
    columns: tuple[str, ...]

    klass = "BAND_JOIN"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.left, self.right, self.left_on, self.right_on)

    def args_str(self) -> str:
        where = _where_str(self.left, self.left_where) + _where_str(self.right, self.right_where)
        return (f"{', '.join(self.columns)} of {self.left} JOIN {self.right} ON {self.right}.{self.right_on} - "
                f"{self.left}.{self.left_on} IN [{render_value(self.low)}, {render_value(self.high)}] "
                f"WHERE {' AND '.join(where) or 'TRUE'}")


@dataclass(frozen=True)
class StreamJoinGroupScan(Node):
    """STREAM_JOIN / STREAM_BAND_JOIN: a join of two *event streams* (tables without a PRIMARY KEY) whose two
    sides are kept in a state bounded by ``max_state_rows`` (003 ch. 3: the join state as a bounded cache;
    issue 19 item 2): ``SELECT cols FROM R JOIN S ON R.b = S.b`` (equality) or ``ON S.b - R.b BETWEEN lo AND
    hi`` (band), with optional local range selections on either side.

    ``left`` (R) is the stream the catalog declares first.  ``band`` is None for the equality join, else the
    closed band ``(lo, hi)`` on ``S.right_on - R.left_on`` as constants: it is the state's join predicate, so
    it is part of the group.  ``left_where`` / ``right_where`` are closed ranges ``(column, low, high)`` per
    side, constants or parameters (per subscription, as BAND_JOIN's).  ``options`` are the subscription's
    ``WITH (...)`` options (``(name, value)`` pairs, sorted): the state's bound and replacement policy, part
    of the group (one state per bound and policy).  One group per (streams, join predicate, options); the
    subscriptions of a group differ in their selections' constants."""
    left: str
    right: str
    left_on: str
    right_on: str
    band: tuple[float, float] | None
    left_where: tuple[tuple[str, Value | None, Value | None], ...]
    right_where: tuple[tuple[str, Value | None, Value | None], ...]
    columns: tuple[str, ...]
    options: tuple[tuple[str, object], ...] = ()

    @property
    def klass(self) -> str:
        return "STREAM_JOIN" if self.band is None else "STREAM_BAND_JOIN"

    @property
    def group_key(self) -> tuple:
        return (self.klass, self.left, self.right, self.left_on, self.right_on, self.band, self.options)

    def args_str(self) -> str:
        where = _where_str(self.left, self.left_where) + _where_str(self.right, self.right_where)
        if self.band is None:
            on = f"{self.left}.{self.left_on} = {self.right}.{self.right_on}"
        else:
            on = (f"{self.right}.{self.right_on} - {self.left}.{self.left_on} IN "
                  f"[{render_value(Const(self.band[0]))}, {render_value(Const(self.band[1]))}]")
        opts = f" WITH ({', '.join(f'{k}={v!r}' for k, v in self.options)})" if self.options else ""
        return (f"{', '.join(self.columns)} of stream {self.left} JOIN stream {self.right} ON {on} "
                f"WHERE {' AND '.join(where) or 'TRUE'}{opts}")


def shape_of(node: Node) -> str:
    """The plan with its constants blanked: how an unsupported subscription is named in errors."""
    text = str(node)
    # Constants render as Python reprs; blank anything that parses as a number.
    import re
    return re.sub(r"(?<![\w:])-?\d+(\.\d+)?(e[+-]?\d+)?", "?", text)
