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

import numpy as np
from sqlglot import exp

from sparksub.catalyst_rules import RuleExecutor
from sparksub.catalyst_rules.executor import RuleApplication
from sparksub.catalyst_rules.rules import BATCHES
from sparksub.catalyst_rules.rules.close_strict_bounds import pred_value, succ_value
from sparksub.errors import InvalidSubscription, UnsupportedSubscription
from sparksub.planner import ir
from sparksub.planner.catalog import Catalog
from sparksub.planner.logical import to_logical

__all__ = ["SUPPORTED_CLASSES", "Planned", "plan_subscription", "bind_range", "bind_filter", "parameters_of"]

SUPPORTED_CLASSES = (
    "RANGE_MIN (SELECT MIN(y) FROM t WHERE x BETWEEN a AND b)",
    "RANGE_MAX (SELECT MAX(y) FROM t WHERE x BETWEEN a AND b)",
    "FILTER (SELECT * | cols FROM t WHERE a conjunction or DNF of attr op const, "
    "op in = != < <= > >= BETWEEN IN IS [NOT] NULL)",
)
OPERATOR_NODES = (ir.RangeMinGroupScan, ir.FilterGroupScan)

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
    logical = to_logical(select, catalog)
    physical, trace = _EXECUTOR.execute(logical, catalog)
    if not isinstance(physical, OPERATOR_NODES):
        raise UnsupportedSubscription(ir.shape_of(physical), SUPPORTED_CLASSES)
    # Constant ranges are checked here; parameter ranges when bound.
    lo, hi = getattr(physical, "low", None), getattr(physical, "high", None)
    if isinstance(lo, ir.Const) and isinstance(hi, ir.Const) and lo.value > hi.value:
        raise InvalidSubscription(f"empty range: {physical.x} from {lo.value} to {hi.value} "
                                  f"(the lower bound exceeds the upper) in: {select.sql('spark')}")
    return Planned(select.sql(dialect="spark"), logical, physical, tuple(trace))


def parameters_of(node: ir.Node) -> tuple[str, ...]:
    """Named parameters a physical node reads, in order of appearance."""
    out: list[str] = []

    def walk(v):
        if isinstance(v, ir.Param):
            out.append(v.name)
        elif isinstance(v, (ir.Succ, ir.Pred)):
            walk(v.of)
    if isinstance(node, ir.RangeMinGroupScan):
        walk(node.low)
        walk(node.high)
    elif isinstance(node, ir.FilterGroupScan):
        for conj in node.disjuncts:
            for _, _, values in conj:
                for v in values:
                    walk(v)
    return tuple(dict.fromkeys(out))


def _eval(v: ir.Value | None, params: dict[str, np.ndarray], n: int, default: float) -> np.ndarray:
    if v is None:
        return np.full(n, default)
    if isinstance(v, ir.Const):
        return np.full(n, v.value, dtype=np.float64)
    if isinstance(v, ir.Param):
        if v.name not in params:
            raise InvalidSubscription(f"missing parameter column {v.name!r} (needed for :{v.name})")
        col = np.asarray(params[v.name])
        try:
            col = col.astype(np.float64)
        except (TypeError, ValueError):
            raise InvalidSubscription(f"parameter {v.name!r} is not numeric (dtype {col.dtype})") from None
        if col.shape != (n,):
            raise InvalidSubscription(f"parameter {v.name!r} has {col.size} values, expected {n}")
        return col
    inner = _eval(v.of, params, n, default)
    if isinstance(v, ir.Succ):
        return np.floor(inner) + 1.0 if v.integral else np.nextafter(inner, np.inf)
    return np.ceil(inner) - 1.0 if v.integral else np.nextafter(inner, -np.inf)


def bind_range(node: ir.RangeMinGroupScan, params: dict[str, np.ndarray], n: int,
               ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The closed ranges [x1, x2] of ``n`` subscriptions, as float64 columns (±inf for open ends).

    Raises :class:`InvalidSubscription` naming the first offending subscription (NaN, or x1 > x2).
    """
    x1 = _eval(node.low, params, n, -np.inf)
    x2 = _eval(node.high, params, n, np.inf)
    bad = np.isnan(x1) | np.isnan(x2) | (x1 > x2)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        who = f"subscription {ids[i]!r}" if ids is not None else f"row {i}"
        why = "a NaN/null bound" if np.isnan(x1[i]) or np.isnan(x2[i]) else \
            f"an empty range (lower bound {x1[i]} > upper bound {x2[i]})"
        raise InvalidSubscription(f"{who} has {why} on {node.x}")
    return x1, x2


def bind_filter(node: ir.FilterGroupScan, params: dict[str, np.ndarray], n: int,
                ids: np.ndarray | None = None) -> list[tuple[tuple[tuple[str, str, tuple], ...], ...]]:
    """Each of ``n`` subscriptions as a DNF of ``(attr, op, constants)`` triples, parameters bound.

    A BETWEEN with ``lo > hi`` is an empty range: :class:`InvalidSubscription` naming the subscription.
    """
    columns = {}
    for name in parameters_of(node):
        if name not in params:
            raise InvalidSubscription(f"missing parameter column {name!r} (needed for :{name})")
        col = np.asarray(params[name], dtype=object)
        if col.shape != (n,):
            raise InvalidSubscription(f"parameter {name!r} has {col.size} values, expected {n}")
        columns[name] = col.tolist()

    def value(v, i):
        if isinstance(v, ir.Const):
            return v.value
        if isinstance(v, ir.Param):
            return columns[v.name][i]
        inner = float(value(v.of, i))
        return succ_value(inner, v.integral) if isinstance(v, ir.Succ) else pred_value(inner, v.integral)

    out = []
    for i in range(n):
        dnf = []
        for conj in node.disjuncts:
            triples = []
            for attr, op, vals in conj:
                bound = tuple(value(v, i) for v in vals)
                if any(b is None or (isinstance(b, float) and b != b) for b in bound):
                    who = f"subscription {ids[i]!r}" if ids is not None else f"row {i}"
                    raise InvalidSubscription(f"{who} has a NULL/NaN constant in {attr} {op}")
                if op == "between" and _gt(bound[0], bound[1]):
                    who = f"subscription {ids[i]!r}" if ids is not None else f"row {i}"
                    raise InvalidSubscription(f"{who} has an empty range on {attr}: {bound[0]!r} > {bound[1]!r}")
                triples.append((attr, op, bound))
            dnf.append(tuple(triples))
        out.append(tuple(dnf))
    return out


def _gt(a, b) -> bool:
    try:
        return a > b
    except TypeError:
        return False
