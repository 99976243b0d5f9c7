"""Classify a subscription from its plan's shape, and bind its constants into numpy columns.

``plan_subscription`` runs SELECT -> logical plan -> rule batches -> physical node; a plan the rules
could not turn into an operator node is rejected with :class:`UnsupportedSubscription` naming its
shape. A *template* is the physical node with every constant blanked; subscriptions with equal group
keys share one operator instance, their constants held as columns (DESIGN §3).

>>> from sparksub.grammar import parse_select
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog(); cat.add(TableDef("stock", (("s", "string"), ("risk", "double"), ("per", "double")), "s"))
>>> p = plan_subscription(parse_select("SELECT MAX(per) FROM stock WHERE risk > 20 AND 60 >= risk"), cat)
>>> p.klass, p.physical.group_key, bind_range(p.physical, {}, 1)[0].tolist()
('RANGE_MAX', ('RANGE_MAX', 'stock', 'risk', 'per'), [20.000000000000004])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from sqlglot import exp

from sparksub.catalyst_rules import RuleExecutor
from sparksub.catalyst_rules.executor import RuleApplication
from sparksub.catalyst_rules.rules import BATCHES
from sparksub.catalyst_rules.rules.plan_select_join import join_sides, qualified_column, side_ranges
from sparksub.errors import AnalysisError, InvalidSubscription, UnsupportedSubscription
from sparksub.grammar.statements import options_of, options_text
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES, Catalog
from sparksub.planner.classes import SUPPORTED_CLASSES
from sparksub.planner.logical import to_logical

__all__ = ["SUPPORTED_CLASSES", "Planned", "plan_subscription", "bind_range", "bind_box", "bind_filter_columns",
           "bind_select_join", "bind_band_join", "BandJoinBounds", "bind_stream_join", "parameters_of"]

_JOIN_NODES = (ir.SelectJoinGroupScan, ir.BandJoinGroupScan)
OPERATOR_NODES = (ir.RangeMinGroupScan, ir.RangeTopkGroupScan, ir.RangeDistinctGroupScan,
                  ir.RangeAggGroupScan, ir.BoxMinGroupScan, ir.BoxTopkGroupScan, ir.FilterGroupScan,
                  ir.StreamJoinGroupScan) + _JOIN_NODES
_BOX_NODES = (ir.BoxMinGroupScan, ir.BoxTopkGroupScan)

_EXECUTOR = RuleExecutor(BATCHES)


@dataclass(frozen=True)
class Planned:
    sql: str
    logical: ir.Node
    physical: ir.Node
    trace: tuple[RuleApplication, ...]

    @property
    def klass(self) -> str:
        return self.physical.klass

    @property
    def template(self) -> str:
        """The shape shared by the group: the physical plan with constants blanked."""
        return ir.shape_of(self.physical)


def plan_subscription(select: exp.Expression, catalog: Catalog) -> Planned:
    options = options_of(select)   # WITH (...) after the SELECT (grammar/statements.py)
    logical = to_logical(select, catalog)
    physical, trace = _EXECUTOR.execute(logical, catalog)
    physical = _as_stream_join(physical, catalog, options)
    if not isinstance(physical, OPERATOR_NODES):
        raise UnsupportedSubscription(ir.shape_of(physical), SUPPORTED_CLASSES)
    # Constant ranges are checked here; parameter ranges when bound.
    if isinstance(physical, _JOIN_NODES):
        ranges = _join_ranges(physical)
    elif isinstance(physical, ir.StreamJoinGroupScan):
        ranges = [(f"{t}.{col}", lo, hi) for t, where in ((physical.left, physical.left_where),
                                                           (physical.right, physical.right_where))
                  for col, lo, hi in where]
    else:
        ranges = [(getattr(physical, "x", None), getattr(physical, "low", None), getattr(physical, "high", None))]
    if isinstance(physical, _BOX_NODES):
        ranges.append((physical.x2, physical.low2, physical.high2))
    for x, lo, hi in ranges:
        if isinstance(lo, ir.Const) and isinstance(hi, ir.Const) and lo.value > hi.value:
            raise InvalidSubscription(f"empty range: {x} from {lo.value} to {hi.value} "
                                      f"(the lower bound exceeds the upper) in: {select.sql('spark')}")
    return Planned(select.sql(dialect="spark") + options_text(options), logical, physical, tuple(trace))


# ---- stream-stream joins (issue 19 item 2; 003 ch. 3) -------------------------------------------------------------
def _join_tables(physical: ir.Node, catalog: Catalog) -> tuple[str, str] | None:
    """The two tables of a planned join node, or of a two-table join no rule planned; None for the rest."""
    if isinstance(physical, _JOIN_NODES):
        return physical.left, physical.right
    sides = join_sides(physical, catalog)
    return None if sides is None else (sides.left, sides.right)


def _as_stream_join(physical: ir.Node, catalog: Catalog, options: dict) -> ir.Node:
    """A join of two event streams (tables without a PRIMARY KEY) as the stream-join node (both sides in a
    bounded state, 003 ch. 3), with the subscription's ``WITH (...)`` options; any other plan as it is.  A join
    of a keyed table with a stream, and options on anything but a stream join, are refused by name."""
    tables = _join_tables(physical, catalog)
    streams = [] if tables is None else [t for t in tables if catalog.get(t).key is None]
    if not streams:
        if options:
            what = physical.klass if isinstance(physical, OPERATOR_NODES) else "this subscription"
            raise InvalidSubscription(f"WITH ({', '.join(options)}): options are for joins of two event streams "
                                      f"(a bounded join state, 003 ch. 3), not for {what}")
        return physical
    if len(streams) == 1:
        keyed = next(t for t in tables if t not in streams)
        raise UnsupportedSubscription(
            f"a join of the keyed table {keyed!r} with the event stream {streams[0]!r} (a stream-stream join needs "
            f"two event streams -- tables without a PRIMARY KEY --, a keyed join two tables with one)",
            SUPPORTED_CLASSES)
    node = _stream_join_node(physical, catalog)
    if node is None:
        return physical   # not a join shape a stream join serves: rejected as unsupported, naming its shape
    left, right = catalog.get(node.left), catalog.get(node.right)
    kinds = ["number" if t.type_of(c) in NUMERIC_TYPES else t.type_of(c)
             for t, c in ((left, node.left_on), (right, node.right_on))]
    if kinds[0] != kinds[1] or kinds[0] not in ("number", "string"):
        raise AnalysisError(f"the stream join columns {node.left}.{node.left_on} ({left.type_of(node.left_on)}) and "
                            f"{node.right}.{node.right_on} ({right.type_of(node.right_on)}): an equality join "
                            f"compares numbers with numbers or strings with strings")
    return ir.StreamJoinGroupScan(node.left, node.right, node.left_on, node.right_on, node.band, node.left_where,
                                  node.right_where, node.columns, tuple(sorted(options.items())))


def _stream_join_node(physical: ir.Node, catalog: Catalog) -> ir.StreamJoinGroupScan | None:
    """The stream-join node of a planned SELECT_JOIN / BAND_JOIN node or of an equality join no rule planned
    (several range selections on one side); None for any other shape."""
    if isinstance(physical, ir.SelectJoinGroupScan):
        p = physical
        lw = ((p.a, p.a_low, p.a_high),) if p.a else ()
        rw = ((p.c, p.c_low, p.c_high),) if p.c else ()
        return ir.StreamJoinGroupScan(p.left, p.right, p.left_on, p.right_on, None, lw, rw, p.columns)
    if isinstance(physical, ir.BandJoinGroupScan):
        p = physical
        ends = []
        for end, default in ((p.low, -np.inf), (p.high, np.inf)):
            if end is not None and not isinstance(end, ir.Const):
                raise InvalidSubscription(
                    f"the band {p.right}.{p.right_on} - {p.left}.{p.left_on} of a stream-stream join is its state's "
                    f"join predicate: give constants, not parameters ({ir.render_value(end)})")
            ends.append(default if end is None else float(end.value))
        return ir.StreamJoinGroupScan(p.left, p.right, p.left_on, p.right_on, (ends[0], ends[1]), p.left_where,
                                      p.right_where, p.columns)
    sides = join_sides(physical, catalog)
    if sides is None or len(sides.conditions) != 1:
        return None
    cond = sides.conditions[0]
    if not (isinstance(cond, ir.Compare) and cond.op == "=" and isinstance(cond.left, ir.ColumnRef)
            and isinstance(cond.right, ir.ColumnRef)):
        return None
    ends = [qualified_column(cond.left.name, sides), qualified_column(cond.right.name, sides)]
    if None in ends or ends[0][0] == ends[1][0]:
        return None
    (_, left_on), (_, right_on) = sorted(ends)
    lw = side_ranges(sides.left, sides.left_conjuncts, catalog)
    rw = side_ranges(sides.right, sides.right_conjuncts, catalog)
    if lw is None or rw is None:
        return None
    return ir.StreamJoinGroupScan(sides.left, sides.right, left_on, right_on, None, lw, rw, sides.columns)


def bind_stream_join(node: ir.StreamJoinGroupScan, params: dict[str, np.ndarray], n: int,
                     ids: np.ndarray | None = None) -> tuple[dict, dict]:
    """The local selections of ``n`` stream-join subscriptions of one template, per side ``{column: (low
    column, high column)}`` (float64, ±inf for an open end), each checked as :func:`bind_range` checks one
    and required to hold a real value, naming the subscription and ``table.column``."""
    sides = []
    for table, where in ((node.left, node.left_where), (node.right, node.right_where)):
        bound = {col: _bind_bounds(low, high, f"{table}.{col}", params, n, ids) for col, low, high in where}
        for col, (lo, hi) in bound.items():
            _check_real(lo, hi, f"range on {table}.{col}", ids)
        sides.append(bound)
    return sides[0], sides[1]


def _join_ranges(node) -> list[tuple[str, ir.Value | None, ir.Value | None]]:
    """(what, low, high) of every closed range of a join node: the band first, then the selections,
    each named ``table.column`` (the band ``s.b - r.b``)."""
    if isinstance(node, ir.SelectJoinGroupScan):
        sel = [(node.left, node.a, node.a_low, node.a_high), (node.right, node.c, node.c_low, node.c_high)]
        return [(f"{t}.{col}", lo, hi) for t, col, lo, hi in sel if col is not None]
    band = (f"{node.right}.{node.right_on} - {node.left}.{node.left_on}", node.low, node.high)
    return [band] + [(f"{t}.{col}", lo, hi) for t, where in ((node.left, node.left_where),
                                                              (node.right, node.right_where))
                     for col, lo, hi in where]


def parameters_of(node: ir.Node) -> tuple[str, ...]:
    """Named parameters a physical node reads, in order of appearance."""
    out: list[str] = []

    def walk(v):
        if isinstance(v, ir.Param):
            out.append(v.name)
        elif isinstance(v, (ir.Succ, ir.Pred, ir.Neg)):
            walk(v.of)
    if isinstance(node, (ir.RangeMinGroupScan, ir.RangeTopkGroupScan, ir.RangeDistinctGroupScan,
                         ir.RangeAggGroupScan) + _BOX_NODES):
        walk(node.low)
        walk(node.high)
        if isinstance(node, _BOX_NODES):
            walk(node.low2)
            walk(node.high2)
        if isinstance(node, (ir.RangeTopkGroupScan, ir.BoxTopkGroupScan)):
            walk(node.k)
    elif isinstance(node, _JOIN_NODES):
        for _, lo, hi in _join_ranges(node):
            walk(lo)
            walk(hi)
    elif isinstance(node, ir.StreamJoinGroupScan):
        for _, lo, hi in node.left_where + node.right_where:
            walk(lo)
            walk(hi)
    elif isinstance(node, ir.FilterGroupScan):
        for conj in node.disjuncts:
            for _, _, values in conj:
                for v in values:
                    walk(v)
    return tuple(dict.fromkeys(out))


def _who(ids, i: int) -> str:
    return f"subscription {ids[i]!r}" if ids is not None else f"row {i}"


def numeric_parameter(name: str, col, ids=None) -> np.ndarray:
    """A parameter column bound where a number belongs, as float64 (None -> NaN, for the callers' NULL
    checks).  Booleans (``True`` is not 1.0 here), strings and numbers beyond DOUBLE's range are refused
    with an InvalidSubscription naming the first offending subscription and value."""
    col = np.asarray(col)
    if col.dtype.kind in "iuf":
        return col.astype(np.float64)
    values = col.tolist()
    bad = 0  # a column of booleans, strings, dates: its first row names the problem
    if col.dtype.kind == "O":
        bad = next((i for i, x in enumerate(values) if x is not None and (
            isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)))), None)
        if bad is None:
            out = np.empty(len(values), dtype=np.float64)
            for i, x in enumerate(values):
                try:
                    out[i] = np.nan if x is None else float(x)
                except OverflowError:
                    raise InvalidSubscription(f"{_who(ids, i)} binds parameter :{name} to {str(x)[:30]}..., "
                                              f"beyond the range of DOUBLE") from None
            return out
    if not values:
        return np.zeros(0, dtype=np.float64)
    x = values[bad]
    raise InvalidSubscription(f"{_who(ids, bad)} binds parameter :{name} to {x!r:.40} "
                              f"({type(x).__name__}), not a number")


def _eval(v: ir.Value | None, params: dict[str, np.ndarray], n: int, default: float, ids=None) -> np.ndarray:
    if v is None:
        return np.full(n, default)
    if isinstance(v, ir.Const):
        return np.full(n, v.value, dtype=np.float64)
    if isinstance(v, ir.Param):
        if v.name not in params:
            raise InvalidSubscription(f"missing parameter column {v.name!r} (needed for :{v.name})")
        col = np.asarray(params[v.name])
        if col.shape != (n,):
            raise InvalidSubscription(f"parameter {v.name!r} has {col.size} values, expected {n}")
        return numeric_parameter(v.name, col, ids)
    if isinstance(v, ir.Neg):
        # -(-inf) would be +inf: an absent end never reaches here (None is handled above).
        return -_eval(v.of, params, n, default, ids)
    return _step(v, _eval(v.of, params, n, default, ids))


def _step(v: ir.Succ | ir.Pred, inner) -> np.ndarray:
    """The closed bound a strict one stands for, elementwise (``close_strict_bounds``)."""
    inner = np.asarray(inner, dtype=np.float64)
    if isinstance(v, ir.Succ):
        return np.floor(inner) + 1.0 if v.integral else np.nextafter(inner, np.inf)
    return np.ceil(inner) - 1.0 if v.integral else np.nextafter(inner, -np.inf)


def bind_range(node: ir.RangeMinGroupScan, params: dict[str, np.ndarray], n: int,
               ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The closed ranges [x1, x2] of ``n`` subscriptions, as float64 columns (±inf for open ends).

    Raises :class:`InvalidSubscription` naming the first offending subscription (NaN, or x1 > x2).
    For a box node: its range on ``x`` (:func:`bind_box` binds both).
    """
    return _bind_bounds(node.low, node.high, node.x, params, n, ids)


def bind_box(node: ir.BoxMinGroupScan | ir.BoxTopkGroupScan, params: dict[str, np.ndarray], n: int,
             ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The closed boxes of ``n`` box subscriptions as four float64 columns ``(x_low, x_high, x2_low,
    x2_high)`` (±inf for open ends): the ``sub_p1, sub_q1, sub_p2, sub_q2`` of a
    :class:`~sparksub.operators.box.group.BoxClassSnapshot`.  Both ranges are checked as
    :func:`bind_range` checks one, naming the subscription and the attribute."""
    x_lo, x_hi = _bind_bounds(node.low, node.high, node.x, params, n, ids)
    x2_lo, x2_hi = _bind_bounds(node.low2, node.high2, node.x2, params, n, ids)
    return x_lo, x_hi, x2_lo, x2_hi


def _bind_bounds(low, high, column: str, params, n: int, ids) -> tuple[np.ndarray, np.ndarray]:
    x1 = _eval(low, params, n, -np.inf, ids)
    x2 = _eval(high, params, n, np.inf, ids)
    bad = np.isnan(x1) | np.isnan(x2) | (x1 > x2)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        who = f"subscription {ids[i]!r}" if ids is not None else f"row {i}"
        why = "a NaN/null bound" if np.isnan(x1[i]) or np.isnan(x2[i]) else \
            f"an empty range (lower bound {x1[i]} > upper bound {x2[i]})"
        raise InvalidSubscription(f"{who} has {why} on {column}")
    return x1, x2


def bind_select_join(node: ir.SelectJoinGroupScan, params: dict[str, np.ndarray], n: int,
                     ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rectangles of ``n`` SELECT_JOIN subscriptions as four float64 columns ``(a_low, a_high,
    c_low, c_high)``: the closed range on R's selection column ``node.a`` and on S's ``node.c`` (003
    §4.3.2: rangeA_i, rangeC_i), ±inf for open ends and for an absent selection -- the
    ``(qid, a_lo, a_hi, c_lo, c_hi)`` rows of ``SelectJoinAlgorithm.add_queries``.  Both ranges are
    checked as :func:`bind_range` checks one (NaN, lower > upper; and neither may be [+inf, +inf] or
    [-inf, -inf], which the operator rejects), naming the subscription and the column (``r.a``)."""
    a_lo, a_hi = _bind_bounds(node.a_low, node.a_high, f"{node.left}.{node.a}", params, n, ids)
    c_lo, c_hi = _bind_bounds(node.c_low, node.c_high, f"{node.right}.{node.c}", params, n, ids)
    _check_real(a_lo, a_hi, f"range on {node.left}.{node.a}", ids)
    _check_real(c_lo, c_hi, f"range on {node.right}.{node.c}", ids)
    return a_lo, a_hi, c_lo, c_hi


def _check_real(lo: np.ndarray, hi: np.ndarray, what: str, ids) -> None:
    """[+inf, +inf] and [-inf, -inf] pass the checks of a range yet hold no real value; the join
    operators (003 §4.2: stabbing partitions of real intervals) reject them, so binding does, by name."""
    bad = np.flatnonzero((lo == np.inf) | (hi == -np.inf))
    if bad.size:
        i = int(bad[0])
        who = f"subscription {ids[i]!r}" if ids is not None else f"row {i}"
        raise InvalidSubscription(f"{who} has a {what} [{lo[i]}, {hi[i]}] that contains no real value")


class BandJoinBounds(NamedTuple):
    """Bound BAND_JOIN subscriptions: the band on ``S.b - R.b`` as two float64 columns (003 §4.3:
    rangeB_i), and each local selection as ``{column: (low column, high column)}`` per side (±inf
    for an open end), in the order of the node's ``left_where`` / ``right_where``."""
    low: np.ndarray
    high: np.ndarray
    left_where: dict[str, tuple[np.ndarray, np.ndarray]]
    right_where: dict[str, tuple[np.ndarray, np.ndarray]]


def bind_band_join(node: ir.BandJoinGroupScan, params: dict[str, np.ndarray], n: int,
                   ids: np.ndarray | None = None) -> BandJoinBounds:
    """The bands and selections of ``n`` BAND_JOIN subscriptions of one template, as columns
    (:class:`BandJoinBounds`).  Every range is checked as :func:`bind_range` checks one (NaN, lower >
    upper), naming the subscription and the column; every range must also contain a real value (not
    [+inf, +inf] nor [-inf, -inf]), as ``BandJoinProcessor.add_query`` requires."""
    what = f"{node.right}.{node.right_on} - {node.left}.{node.left_on}"
    lo, hi = _bind_bounds(node.low, node.high, what, params, n, ids)
    _check_real(lo, hi, f"band on {what}", ids)
    sides = []
    for table, where in ((node.left, node.left_where), (node.right, node.right_where)):
        bound = {col: _bind_bounds(low, high, f"{table}.{col}", params, n, ids) for col, low, high in where}
        for col, (l, h) in bound.items():
            _check_real(l, h, f"range on {table}.{col}", ids)
        sides.append(bound)
    return BandJoinBounds(lo, hi, sides[0], sides[1])


def bind_filter_columns(node: ir.FilterGroupScan, params: dict[str, np.ndarray], n: int,
                        ids: np.ndarray | None = None, types: dict[str, str] | None = None) -> list[list[tuple]]:
    """The constants of ``n`` FILTER subscriptions of one template, bound: each disjunct as a list of
    ``(attr, op, column)`` with the constants as columns (scalars where the template fixes them),
    the form ``FilterGroup.register_block`` takes.  NULL/NaN constants and empty BETWEEN ranges
    raise :class:`InvalidSubscription` naming the first offending subscription; nothing is bound
    row by row.  ``types`` (column -> Spark type, the table's): a parameter compared with a numeric
    column must hold numbers (not booleans), one compared with a string column strings.
    """
    columns = {}
    compared = _parameter_columns(node)
    for name in parameters_of(node):
        if name not in params:
            raise InvalidSubscription(f"missing parameter column {name!r} (needed for :{name})")
        col = np.asarray(params[name])
        if col.shape != (n,):
            raise InvalidSubscription(f"parameter {name!r} has {col.size} values, expected {n}")
        for attr in compared.get(name, ()):
            _check_parameter_type(name, col, attr, (types or {}).get(attr), ids)
        bad = np.flatnonzero(_is_missing(col))
        if len(bad):
            who = f"subscription {ids[bad[0]]!r}" if ids is not None else f"row {bad[0]}"
            raise InvalidSubscription(f"{who} has a NULL/NaN value for parameter :{name}")
        columns[name] = col

    def value(v):
        if isinstance(v, ir.Const):
            return v.value
        if isinstance(v, ir.Param):
            return columns[v.name]
        return _step(v, value(v.of))

    out = []
    for conj in node.disjuncts:
        preds = []
        for attr, op, vals in conj:
            if op in ("is_null", "is_not_null"):
                preds.append((attr, op, None))
            elif op == "in":
                bound = [value(v) for v in vals]
                if all(np.ndim(b) == 0 for b in bound):
                    preds.append((attr, op, tuple(bound)))
                else:
                    cols = [np.broadcast_to(np.asarray(b, dtype=object), (n,)) for b in bound]
                    preds.append((attr, op, list(zip(*cols))))
            elif op == "between":
                lo, hi = value(vals[0]), value(vals[1])
                try:
                    empty = np.flatnonzero(np.broadcast_to(np.asarray(lo) > np.asarray(hi), (n,)))
                except TypeError:                   # a string bound against a number: no order
                    empty = []
                if len(empty):
                    i = int(empty[0])
                    who = f"subscription {ids[i]!r}" if ids is not None else f"row {i}"
                    lo_i = lo if np.ndim(lo) == 0 else lo[i]
                    hi_i = hi if np.ndim(hi) == 0 else hi[i]
                    raise InvalidSubscription(f"{who} has an empty range on {attr}: {lo_i!r} > {hi_i!r}")
                preds.append((attr, op, (lo, hi)))
            else:
                preds.append((attr, op, value(vals[0])))
        out.append(preds)
    return out


def _parameter_columns(node: ir.FilterGroupScan) -> dict[str, set[str]]:
    """Per parameter, the columns a FILTER template compares it with."""
    out: dict[str, set[str]] = {}

    def param_of(v):
        while isinstance(v, (ir.Succ, ir.Pred, ir.Neg)):
            v = v.of
        return v.name if isinstance(v, ir.Param) else None
    for conj in node.disjuncts:
        for attr, _, values in conj:
            for v in values:
                if param_of(v) is not None:
                    out.setdefault(param_of(v), set()).add(attr)
    return out


def _check_parameter_type(name: str, col: np.ndarray, attr: str, spark_type: str | None, ids) -> None:
    """A FILTER parameter's values against the type of the column they are compared with (the literal
    check is ``logical._check_constant``'s)."""
    if spark_type in NUMERIC_TYPES:
        numeric_parameter(name, col, ids)
        return
    if spark_type != "string":
        return  # booleans, dates: left to the filter core
    if col.dtype.kind in "US":
        return
    values = col.tolist()
    bad = next((i for i, x in enumerate(values) if x is not None and not isinstance(x, str)
                and not (isinstance(x, float) and x != x)), None)
    if bad is not None:
        x = values[bad]
        raise InvalidSubscription(f"{_who(ids, bad)} binds parameter :{name} to {x!r:.40} "
                                  f"({type(x).__name__}), but column {attr!r} is a string")


def _is_missing(col: np.ndarray) -> np.ndarray:
    if col.dtype == object:
        return np.fromiter((v is None or (isinstance(v, float) and v != v) for v in col.tolist()),
                           dtype=bool, count=col.size)
    if col.dtype.kind == "f":
        return np.isnan(col)
    return np.zeros(col.shape, dtype=bool)
