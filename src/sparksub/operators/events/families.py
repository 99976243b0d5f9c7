"""Query families: event queries that differ only in their constants, run as one parameterised
automaton whose instances carry the *set of queries* they are alive for (pure Python + numpy, no Spark).

Why.  ``NFAEngine`` (``operators/nfa``) merges equal prefixes (004 §3 state merging), but two queries
that differ in a constant — ``FILTER{Name = 'IBM' AND Price > 100}(Stock) NEXT{…}`` and the same with
``'MSFT'`` and ``95`` — have different automata, so an event that starts both makes one instance per
query: with 100,000 queries from a few templates, instance creation dominates and throughput falls with
the number of queries.  DESIGN §3 (parameters as columns, as the SQL classes group subscriptions of one
template) applied to 004's automata: the queries of one *template* (the AST with the constants of its
indexable conjuncts replaced by slots) share one automaton; their constants are columns of a parameter
table; an instance holds its bindings once, plus the rows (queries) it is still alive for.

Templating (``template_of``).  In every predicate position (FILTER predicates — start, right inputs,
outer selections —, NEXT/FOLD θ, FOLD's rebind condition) each top-level conjunct of one of the forms

    x op c      c op x      x op c*y     x op y*c     x op c+y    x op y+c     x op y-c    x op c-y
    DUR op c[unit]                                      (op in = != < <= > >=, c a number or string)

— ``x``, ``y`` constant-free expressions — has its constant ``c`` replaced by a slot.  Constants
anywhere else (projections, aggregates, functions, OR / NOT, LIKE, division) stay in the template, so
queries that differ there are different families (still correct, just not grouped).  Queries whose
resolution is more than one automaton (PUBLISH, non-left-deep inputs) run in the inner ``NFAEngine``
unchanged: ``FamilyEngine`` *is* an ``NFAEngine`` that takes the single-automaton queries out.

Evaluation.  Slot-free conjuncts are evaluated once per event (static) or once per instance (dynamic),
exactly as ``NFAEngine`` does; slotted conjuncts are numpy comparisons over the instance's rows (one
vector operation per conjunct, whatever the number of queries).  On a NEXT the rows for which θ holds
move on (their first match) and leave the instance; the others stay (filter edge).  On a FOLD the rows for
which θ holds output the step, and those for which the rebind condition also holds continue with the new
bindings (in place when every row does, else as a new instance); NULL, three-valued logic, renaming, DUR
and the output order are ``NFAEngine``'s, so the matches equal the oracle's (tests).

Indexes (004 §3.2, per family).
- Start: the first FILTER's slotted ``attr = c`` conjunct hashes the rows by ``c`` and a slotted
  ``attr < / <= / > / >= c`` conjunct sorts each hash bucket by ``c``: an event finds the queries it starts
  with one dict lookup and one binary search, then the remaining slotted conjuncts filter those rows.
- Instances: θ's slot-free dynamic equality (``$1.Name = $2.Name``) keys a hash from the binding value to
  instances, as in ``NFAEngine``; else θ's slotted static equality (``$2.Name = 'B'``) keys the instance's
  rows by their ``c`` (an instance has one *entry* per distinct value): an event visits only the entries
  of its own value.  Else every instance of the node is visited.
- Expiry: a DUR upper bound in θ or on every path to the output bounds an instance's life (the largest
  constant over the family's rows).

Deviations from ``NFAEngine``: a query registered while events flow does not join instances already in
progress (its rows are not in them); slot values of one column are compared as numpy values (numbers as
int64 when every value is an int, else float64; an integer constant beyond 2**53 among floats loses
precision); a comparison of a string with a numeric slot (or the reverse; possible only on undeclared
types, the registration check refuses it otherwise) is FALSE for ``=``, TRUE for ``!=`` and an evaluation
error otherwise — charged, like every run-time error, to the rows (queries) evaluated, for them alone
(``NFAEngine._charge``; issue 15 item 3) — but only for the rows actually visited;
the queries of one family matched by one output share its event dict (treat ``Match.event`` as read-only).

>>> eng = FamilyEngine()
>>> for i, (name, r) in enumerate([("IBM", 1.05), ("IBM", 1.5), ("MSFT", 1.01)]):
...     _ = eng.register(f"q{i}", f"SELECT * FROM FILTER{{Price > {r} * Price_1}}"
...                               f"(FILTER{{Name = '{name}'}}(Stock) NEXT{{$1.Name = $2.Name}} Stock)")
>>> out = eng.run({"Stock": [{"Name": "IBM", "Price": 90}, {"Name": "MSFT", "Price": 20},
...                          {"Name": "IBM", "Price": 95}, {"Name": "IBM", "Price": 150}]})
>>> {q: [(m["Price_1"], m["Price"]) for m in ms] for q, ms in out.items()}
{'q0': [(90, 95), (95, 150)], 'q1': [(95, 150)], 'q2': []}
>>> eng.family_stats()[0]["queries"], eng.family_stats()[0]["slots"]
(3, 2)
"""
from __future__ import annotations

import heapq
import math
import pickle
import re
import sys
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from sparksub.errors import AnalysisError
from sparksub.grammar.event_ast import (
    And, Attr, BinOp, Compare, Const, Dur, Expr, Iteration, Scope, Select, Sequence, StreamExpr,
    rebuild, unparse_cel,
)
from sparksub.operators.events.nfa import (
    EventError, NFAEngine, _chain_bounds, _combine, _compile_expr, _Conjunct, _conjuncts, _decompose,
    _dur_ticks, _equality_key, _holds_fn, _is_static, _Ops, _scopes, Match, resolve_query,
)

__all__ = ["FamilyEngine", "template_of"]


# ---------------------------------------------------------------------------------------------------
# Templates: slots in place of the constants of indexable conjuncts
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Slot(Expr):
    """A constant of the template: column ``index`` of the family's parameter table."""

    index: int
    kind: str               # 'num' | 'str'


@dataclass(frozen=True, slots=True)
class _DurSlot(Expr):
    """``DUR op c[unit]`` with ``c`` in column ``index``."""

    op: str
    index: int
    unit: str | None


_CMP = ("=", "!=", "<", "<=", ">", ">=")
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NP_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
           ">=": np.greater_equal}


def _const_kind(v) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return "num"
    return "str" if isinstance(v, str) else None


def _constant_free(e: Expr) -> bool:
    return not any(isinstance(n, (Const, Dur)) for n in e.walk()) and any(isinstance(n, Attr) for n in e.walk())


class _Templater:
    def __init__(self):
        self.values: list = []
        self.kinds: list[str] = []

    def slot(self, v, kind) -> _Slot:
        self.values.append(v)
        self.kinds.append(kind)
        return _Slot(len(self.values) - 1, kind)

    def term(self, e: Expr) -> Expr | None:
        """``c``, ``c*y``, ``y*c``, ``c+y``, ``y+c``, ``y-c``, ``c-y`` with the constant slotted, else None."""
        if isinstance(e, Const) and _const_kind(e.value):
            return self.slot(e.value, _const_kind(e.value))
        if isinstance(e, BinOp) and e.op in "+-*":
            for c, y, left in ((e.left, e.right, True), (e.right, e.left, False)):
                if isinstance(c, Const) and _const_kind(c.value) == "num" and _constant_free(y):
                    s = self.slot(c.value, "num")
                    return BinOp(e.op, s, y) if left else BinOp(e.op, y, s)
        return None

    def conjunct(self, e: Expr) -> Expr:
        if isinstance(e, Dur):
            self.values.append(e.value)
            self.kinds.append("num")
            return _DurSlot(e.op, len(self.values) - 1, e.unit)
        if isinstance(e, Compare) and e.op in _CMP:
            for a, b, right in ((e.left, e.right, True), (e.right, e.left, False)):
                if _constant_free(a):
                    t = self.term(b)
                    if t is not None:
                        return Compare(e.op, a, t) if right else Compare(e.op, t, a)
        return e

    def predicate(self, p: Expr | None) -> Expr | None:
        if p is None:
            return None
        if isinstance(p, And):
            return And(tuple(self.conjunct(x) for x in p.items))
        return self.conjunct(p)

    def query(self, q: StreamExpr) -> StreamExpr:
        return _map_predicates(q, self.predicate)


def _map_predicates(q: StreamExpr, fn) -> StreamExpr:
    """``q`` rebuilt with ``fn`` applied to every predicate (FILTER predicates, θ, rebind conditions):
    the only places slots go."""
    values = {}
    for f in fields(q):
        v = getattr(q, f.name)
        if isinstance(v, StreamExpr):
            v = _map_predicates(v, fn)
        elif f.name in ("predicate", "theta", "rebind") and isinstance(q, (Select, Sequence, Iteration)):
            v = None if v is None else fn(v)
        values[f.name] = v
    return type(q)(**values)


def template_of(q: StreamExpr) -> tuple[StreamExpr, list, list[str]]:
    """(template, slot values, slot kinds): ``q`` with the constants of its indexable conjuncts slotted.

    >>> from sparksub.grammar.events import parse_cel
    >>> t, values, kinds = template_of(parse_cel("SELECT * FROM FILTER{Name = 'IBM' AND Price > 100}(Stock)"))
    >>> values, kinds
    (['IBM', 100], ['str', 'num'])
    >>> t == template_of(parse_cel("SELECT * FROM FILTER{Name = 'X' AND Price > 5.5}(Stock)"))[0]
    True
    """
    t = _Templater()
    return t.query(q), t.values, t.kinds


# ---------------------------------------------------------------------------------------------------
# Slotted conjuncts, vectorised over rows
# ---------------------------------------------------------------------------------------------------

def _has_slot(e: Expr) -> bool:
    return any(isinstance(n, (_Slot, _DurSlot)) for n in e.walk())


class _Vec:
    """One slotted conjunct: ``holds(fam, rows, p, l, s, d) -> bool array`` (TRUE only; NULL is False)."""

    __slots__ = ("expr", "op", "scalar", "slot", "kind", "arith", "other", "dur", "static", "reads")

    def __init__(self, e: Expr, fns, spt):
        self.expr, self.dur, self.arith, self.other = e, isinstance(e, _DurSlot), None, None
        self.static = False
        self.reads = frozenset(n.name for n in e.walk() if isinstance(n, Attr))
        if self.dur:
            self.op, self.slot, self.kind = e.op, e.index, "num"
            self.scalar = None
            return
        if _has_slot(e.right):                       # normal form: scalar OP term
            a, t, self.op = e.left, e.right, e.op
        else:
            a, t, self.op = e.right, e.left, _FLIP[e.op]
        self.scalar = _compile_expr(a, fns, spt)
        scopes = _scopes(a)
        if isinstance(t, _Slot):
            self.slot, self.kind = t.index, t.kind
        else:                                       # BinOp(op, slot, y) or BinOp(op, y, slot)
            slot_left = isinstance(t.left, _Slot)
            s, y = (t.left, t.right) if slot_left else (t.right, t.left)
            self.slot, self.kind = s.index, "num"
            self.other = _compile_expr(y, fns, spt)
            self.arith = (t.op, slot_left)
            scopes = scopes | _scopes(y)
        self.static = scopes <= {Scope.PLAIN, Scope.RIGHT}

    def holds(self, fam: "_Family", rows: np.ndarray, p, l, s, d) -> np.ndarray:
        col = fam.column(self.slot, rows, self.dur)
        if self.dur:
            return _NP_CMP[self.op](d, col)
        a = self.scalar(p, l, s, d)
        if a is None:
            return np.zeros(len(rows), bool)
        if self.arith is not None:
            y = self.other(p, l, s, d)
            if y is None:
                return np.zeros(len(rows), bool)
            if not _is_num(y):
                raise AnalysisError(f"cannot apply {self.arith[0]} to a number and {y!r} in {_slot_text(self.expr)}")
            op, slot_left = self.arith
            if op == "+":
                col = col + y
            elif op == "*":
                col = col * y
            else:
                col = col - y if slot_left else y - col
        if (self.kind == "num") != _is_num(a):
            if self.op in ("=", "!="):
                return np.full(len(rows), self.op == "!=")
            raise AnalysisError(f"cannot compare {a!r} with the constants of {_slot_text(self.expr)}")
        return _NP_CMP[self.op](a, col)


def _is_num(v) -> bool:
    return isinstance(v, (int, float))          # bool included: Python compares True with numbers


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


# ---------------------------------------------------------------------------------------------------
# A family: the template's automaton and the parameter table
# ---------------------------------------------------------------------------------------------------

class _Pipe:
    """A chain of unary operators with slotted FILTER conjuncts set aside: ``run(event)`` applies the
    slot-free part and returns (event or None, [(vec conjunct, the event it reads)])."""

    def __init__(self, ops, fns, spt):
        self.steps = []
        for o in ops:
            if isinstance(o, Select):
                conj = _conjuncts(o.predicate)
                self.steps.append(("select", [_holds_fn(c, fns, spt) for c in conj if not _has_slot(c.expr)],
                                   [_Vec(c.expr, fns, spt) for c in conj if _has_slot(c.expr)]))
            else:
                self.steps.append(("ops", _Ops((o,), fns, spt), None))

    def run(self, attrs: dict, t0: int, t1: int):
        vecs = []
        d = t1 - t0 + 1
        for kind, a, b in self.steps:
            if kind == "select":
                for f in a:
                    if not f(attrs, None, None, d):
                        return None, vecs
                vecs.extend((v, attrs) for v in b)
            else:
                attrs = a.apply(attrs, t0, t1)
                if attrs is None:
                    return None, vecs
        return attrs, vecs


class _FNode:
    """Node k of a family's automaton (004 §2.3), with its instance entries."""

    def __init__(self, fam: "_Family", k: int, step, fns, spt):
        op = step.op
        self.fam, self.k, self.fold = fam, k, isinstance(op, Iteration)
        self.stream = step.right_stream
        self.right = _Pipe(step.right_ops, fns, spt)
        theta = _conjuncts(op.theta)
        plain = [c for c in theta if not _has_slot(c.expr)]
        self.theta_static = [_holds_fn(c, fns, spt) for c in plain if _is_static(c.expr)]
        self.theta_dynamic = [_holds_fn(c, fns, spt) for c in plain if not _is_static(c.expr)]
        # in a keyed bucket θ's key equalities hold already (non-NULL, hash-equal = Python-equal)
        self.theta_unkeyed = [_holds_fn(c, fns, spt) for c in plain
                              if not _is_static(c.expr) and not _equality_key(c)]
        self.theta = [_holds_fn(c, fns, spt) for c in plain]
        self.theta_vec = [_Vec(c.expr, fns, spt) for c in theta if _has_slot(c.expr)]
        rebind = getattr(op, "rebind", None)
        self.rebind, self.rebind_vec = None, []          # None: every step continues
        if rebind is not None and not _has_slot(rebind):
            self.rebind = _holds_fn(_Conjunct(rebind, False), fns, spt)
        elif rebind is not None:
            conj = _conjuncts(rebind)
            plain = [_holds_fn(c, fns, spt) for c in conj if not _has_slot(c.expr)]
            self.rebind = lambda p, l, s, d: all([f(p, l, s, d) for f in plain])
            self.rebind_vec = [_Vec(c.expr, fns, spt) for c in conj if _has_slot(c.expr)]
        self.aggregates = [(i.name, _compile_expr(i.expr, fns, spt)) for i in getattr(op, "aggregates", ())]
        self.post = _Pipe(step.post_ops, fns, spt)
        # instance index (004 §3.2): a slot-free dynamic equality, else a slotted static equality
        eqs = [k for k in map(_equality_key, [c for c in theta if not _has_slot(c.expr)]) if k]
        self.event_key = [_compile_expr(a, fns, spt) for a, _ in eqs]
        self.instance_key = [_compile_expr(b, fns, spt) for _, b in eqs]
        self.key_reads_last = any(Scope.LAST in _scopes(b) for _, b in eqs)
        self.slot_key = None
        if not eqs:
            for v in self.theta_vec:
                if v.static and v.op == "=" and v.arith is None and not v.dur:
                    self.slot_key = v
                    break
        # in the slot key's bucket its equality holds already (dict equality = numpy's on one type)
        self.theta_vec_rest = [v for v in self.theta_vec if v is not self.slot_key]
        first = self.post.steps[0] if self.post.steps and self.post.steps[0][0] == "select" else None
        self.post_first_vecs = [v for v in first[2] if not v.dur] if first else []
        self.post_early = list(first[2]) if first else []
        self.buckets: dict[Any, dict[int, list]] = {}
        self.count = 0
        self.bound: int | None = None


class _Instance:
    __slots__ = ("node", "left", "last", "t0", "t1", "key", "serial", "entries", "alive")


class _Family:
    """The queries of one template: parameter columns, the start index, the nodes."""

    def __init__(self, template: StreamExpr, kinds: list[str], engine: "FamilyEngine"):
        self.template, self.kinds, self.engine = template, kinds, engine
        fns, spt = engine.fns, engine.spt
        chain = _decompose(template)
        self.chain = chain
        self.stream = chain.stream
        self.start = _Pipe(chain.start_ops, fns, spt)
        self.nodes = [_FNode(self, k, step, fns, spt) for k, step in enumerate(chain.steps, 1)]
        self.names: list[str] = []
        self.values: list[list] = [[] for _ in kinds]
        self.live_list: list[bool] = []
        self.n_live = 0
        self._cols: list[np.ndarray] | None = None
        self._dur_cols: dict[int, np.ndarray] = {}
        self._codes: dict[int, tuple] = {}
        self._live: np.ndarray | None = None
        self._start_index = None
        # the start index: an equality and a range on the first FILTER's slotted conjuncts
        first = self.start.steps[0] if self.start.steps and self.start.steps[0][0] == "select" else None
        self.access_eq = self.access_range = None
        if first is not None:
            for v in first[2]:
                if v.arith is None and not v.dur and v.static:
                    if v.op == "=" and self.access_eq is None:
                        self.access_eq = v
                    elif v.op in ("<", "<=", ">", ">=") and v.kind == "num" and self.access_range is None:
                        self.access_range = v
        self.example: str | None = None
        self.bounds_dirty = True

    # ---- the parameter table ----------------------------------------------------------------------
    def add(self, name: str, values: list) -> int:
        for col, v in zip(self.values, values):
            col.append(v)
        self.names.append(name)
        self.live_list.append(True)
        self.n_live += 1
        self._dirty()
        return len(self.names) - 1

    def add_many(self, names: list[str], columns: list[list]) -> int:
        """``add`` for many rows at once (``columns``: one list of values per slot); the first new row."""
        first = len(self.names)
        for col, values in zip(self.values, columns):
            col.extend(values)
        self.names.extend(names)
        self.live_list.extend([True] * len(names))
        self.n_live += len(names)
        self._dirty()
        return first

    def drop(self, row: int) -> None:
        self.live_list[row] = False
        self.n_live -= 1
        self._dirty()

    def _dirty(self):
        self._cols, self._live, self._start_index = None, None, None
        self._dur_cols = {}
        self._codes = {}
        self.bounds_dirty = True

    def columns(self) -> list[np.ndarray]:
        if self._cols is None:
            cols = []
            for vals, kind in zip(self.values, self.kinds):
                if kind == "str":
                    a = np.empty(len(vals), object)
                    a[:] = vals
                elif all(isinstance(v, int) for v in vals) and all(abs(v) < 2 ** 62 for v in vals):
                    a = np.asarray(vals, np.int64)
                else:
                    a = np.asarray(vals, np.float64)
                cols.append(a)
            self._cols = cols
        return self._cols

    def codes(self, i: int) -> tuple[np.ndarray, list]:
        """Column ``i`` as integer codes and the distinct values (Python equality: 1 == 1.0)."""
        cached = self._codes.get(i)
        if cached is None:
            ids: dict = {}
            codes = np.fromiter((ids.setdefault(v, len(ids)) for v in self.values[i]), np.int64, len(self.values[i]))
            cached = self._codes[i] = (codes, list(ids))
        return cached

    def column(self, i: int, rows: np.ndarray, dur: bool) -> np.ndarray:
        if dur:
            c = self._dur_cols.get(i)
            if c is None:
                unit = self._dur_unit(i)
                spt = self.engine.spt
                c = self._dur_cols[i] = np.asarray(
                    [_dur_ticks(Dur("=", v, unit), spt) for v in self.values[i]], np.float64)
            return c[rows]
        return self.columns()[i][rows]

    def _dur_unit(self, i):
        for n in self.template.walk():
            if isinstance(n, _DurSlot) and n.index == i:
                return n.unit
        return None

    def live(self) -> np.ndarray:
        if self._live is None:
            self._live = np.asarray(self.live_list, bool)
        return self._live

    def alive(self, rows: np.ndarray) -> np.ndarray:
        return rows if self.n_live == len(self.names) else rows[self.live()[rows]]

    # ---- the start index ---------------------------------------------------------------------------
    def start_rows(self, attrs: dict) -> tuple[np.ndarray, list]:
        """The live rows the event can start, and the access conjuncts the index answered."""
        idx = self._start_index
        if idx is None:
            idx = self._start_index = self._build_start_index()
        eq, rng = self.access_eq, self.access_range
        d = 1
        buckets, always = idx
        if eq is not None:
            a = eq.scalar(attrs, None, None, d)
            if a is None or _nan(a):
                return _EMPTY, [eq]
            try:
                b = buckets.get(a)
            except TypeError:
                b = None
            if b is None:
                return _EMPTY, [eq]
        else:
            b = always
        keys, rows = b
        used = [eq] if eq is not None else []
        if rng is not None:
            a = rng.scalar(attrs, None, None, d)
            if a is None or _nan(a) or isinstance(a, bool) or not isinstance(a, (int, float)):
                return rows, used           # the range conjunct is checked as a vector
            op = rng.op                     # a OP slot  <=>  slot FLIP(OP) a
            if op == ">":                   # slot < a
                rows = rows[:np.searchsorted(keys, a, "left")]
            elif op == ">=":
                rows = rows[:np.searchsorted(keys, a, "right")]
            elif op == "<":                 # slot > a
                rows = rows[np.searchsorted(keys, a, "right"):]
            else:
                rows = rows[np.searchsorted(keys, a, "left"):]
            used.append(rng)
        return rows, used

    def _build_start_index(self):
        live = np.flatnonzero(self.live())
        cols = self.columns()

        def sort(rows):
            if self.access_range is None:
                return None, rows
            keys = cols[self.access_range.slot][rows]
            order = np.argsort(keys, kind="stable")
            return keys[order], rows[order]
        if self.access_eq is None:
            return {}, sort(live)
        groups: dict[Any, list] = {}
        for r, v in zip(live.tolist(), cols[self.access_eq.slot][live].tolist()):
            groups.setdefault(v, []).append(r)
        return {v: sort(np.asarray(rs, np.int64)) for v, rs in groups.items()}, (None, _EMPTY)


_EMPTY = np.zeros(0, np.int64)
_UNINDEXED = ("__unindexed__",)


def _node_rows(node: "_FNode") -> np.ndarray:
    """The rows (queries) with an entry at ``node``."""
    parts = [rows for b in node.buckets.values() for _, rows in b.values()]
    return np.unique(np.concatenate(parts)) if parts else _EMPTY


# ---------------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------------

class FamilyEngine(NFAEngine):
    """``NFAEngine`` whose single-automaton queries run grouped by template (see the module docstring).
    Same API: register / unregister / process / flush / run / automaton / stats / snapshot / restore."""

    def __init__(self, *, group: bool = True, **options):
        super().__init__(**options)
        self.group = group
        self._families: dict[Any, _Family] = {}
        self._member: dict[str, tuple[_Family, int]] = {}
        self._fam_by_stream: dict[str, list[_Family]] = {}
        self._fnodes_by_stream: dict[str, list[_FNode]] = {}
        self._fam_pending_out: list = []
        self._fam_pending_inst: list = []
        self._fam_expiry: list = []
        self._fam_serial = 0
        self._entry_serial = 0

    # ---- registration ------------------------------------------------------------------------------
    def register(self, name: str, query, *, schemas=None):
        if not self.group:
            return super().register(name, query, schemas=schemas)
        if name in self.queries:
            raise AnalysisError(f"event query {name!r} is already registered")
        ast = self._analyse(name, query, schemas).query          # resolved, names and types checked
        resolved = resolve_query(name, ast, publish_right_inputs=self.publish_right_inputs)
        if len(resolved) != 1 or resolved[0].publishes:
            return super().register(name, ast, schemas=schemas)
        template, values, kinds = template_of(resolved[0].expr)
        key = (template, tuple(kinds))
        fam = self._families.get(key)
        if fam is None:
            from sparksub.operators.events.nfa import compile_query
            compile_query(name, ast, seconds_per_tick=self.spt, functions=self.fns)   # errors, checks
            fam = _Family(template, kinds, self)
            fam.example = name
            self._families[key] = fam
            self._fam_by_stream.setdefault(fam.stream, []).append(fam)
            for n in fam.nodes:
                self._fnodes_by_stream.setdefault(n.stream, []).append(n)
        row = fam.add(name, values)
        self._member[name] = (fam, row)
        self.queries[name] = _LazyCompiled(name, ast, self)
        return self.queries[name]

    def unregister(self, name: str) -> None:
        if name not in self._member:
            return super().unregister(name)
        fam, row = self._member.pop(name)
        fam.drop(row)
        del self.queries[name]
        if not fam.n_live:                          # its instances go with it
            for n in fam.nodes:
                for b in list(n.buckets.values()):
                    for inst, _ in list(b.values()):
                        inst.alive = False
                n.buckets.clear()
                n.count = 0

    def _family_bounds(self, fam: _Family) -> None:
        """Expiry bounds: the template's, with each DUR slot at its largest value (the loosest)."""
        fam.bounds_dirty = False
        if not fam.nodes:
            return
        if fam.n_live == 0:
            for n in fam.nodes:
                n.bound = None
            return
        live = fam.live()

        def _fill(e):
            if isinstance(e, _DurSlot):
                vals = np.asarray(fam.values[e.index], np.float64)[live]
                return Dur(e.op, float(vals.max()), e.unit)
            if isinstance(e, And):
                return And(tuple(_fill(x) for x in e.items))
            return e if not _has_slot(e) else Const(0)
        chain = _decompose(_map_predicates(fam.template, _fill))
        bounds = _chain_bounds(chain, self.spt) if self.expire else [None] * len(fam.nodes)
        for n, b in zip(fam.nodes, bounds):
            n.bound = b

    def automaton(self, name: str):
        q = self.queries[name]
        return q.compiled() if isinstance(q, _LazyCompiled) else q

    # ---- running (NFAEngine's hooks) ---------------------------------------------------------------
    def _ingest(self, stream: str, attrs: dict, t0: int, t1: int) -> None:
        pos = self._positions.get(stream, 0)
        super()._ingest(stream, attrs, t0, t1)
        self._current = (stream, t0, t1)
        fams = self._fam_by_stream.get(stream)
        if fams:
            for fam in fams:
                if fam.n_live:
                    self._fam_start(fam, attrs, t0, t1, (t1, pos))
        nodes = self._fnodes_by_stream.get(stream)
        if nodes:
            for node in nodes:
                if node.count:
                    self._fam_visit(node, attrs, t0, t1)
        if self._fam_pending_inst:
            for inst, rows, fresh in self._fam_pending_inst:
                self._fam_insert(inst, rows, fresh)
            self._fam_pending_inst = []

    def _charge_rows(self, fam: _Family, rows, error: AnalysisError) -> None:
        """An evaluation for ``rows`` of a family raised on the event being ingested: it failed for those
        queries alone (DESIGN §7; ``NFAEngine._charge``)."""
        stream, t0, t1 = self._current
        self._s["evaluation_errors"] = self._s.get("evaluation_errors", 0) + 1
        rows = np.flatnonzero(fam.live()) if rows is None else fam.alive(np.asarray(rows, np.int64))
        for r in rows.tolist():
            q = fam.names[r]
            self._errors.setdefault((q, stream, t0, t1), EventError(q, stream, t0, t1, str(error)))

    def _fam_start(self, fam: _Family, attrs: dict, t0: int, t1: int, key) -> None:
        s = self._s
        s["guards_checked"] += 1
        if fam.bounds_dirty:
            self._family_bounds(fam)
        rows = None
        try:
            rows, used = fam.start_rows(attrs)
            if not len(rows):
                return
            out, vecs = fam.start.run(attrs, t0, t1)      # the slot-free conjuncts and the transforms
            if out is None:
                return
            d = t1 - t0 + 1
            for v, ev in vecs:
                if v not in used:                       # the index answered the access conjuncts
                    s["conjuncts_evaluated"] += 1
                    rows = rows[v.holds(fam, rows, ev, None, None, d)]
                    if not len(rows):
                        return
        except AnalysisError as err:                    # the start filter raised: no start for these rows
            self._charge_rows(fam, rows, err)
            return
        rows = fam.alive(rows)
        if len(rows):
            self._fam_emit(fam, 0, out, t0, t1, key, rows)

    def _fam_emit(self, fam: _Family, k: int, out: dict, t0: int, t1: int, key, rows: np.ndarray) -> None:
        """The forward edge into node k+1, or the end node's output."""
        if k < len(fam.nodes):
            node = fam.nodes[k]
            inst = _Instance()
            inst.node, inst.left, inst.t0, inst.t1, inst.key = node, out, t0, t1, key
            inst.last = dict(out) if node.fold else None
            inst.alive, inst.entries = True, {}
            self._fam_pending_inst.append((inst, rows, True))
            return
        names = fam.names
        pending = self._fam_pending_out
        event = {**out, "t0": t0, "t1": t1}     # one dict for the queries of one output (read-only)
        for r in rows.tolist():
            pending.append((key, names[r], event))

    def _fam_insert(self, inst: _Instance, rows: np.ndarray, fresh: bool = True) -> None:
        node = inst.node
        rows = node.fam.alive(rows)
        if not len(rows):
            return
        if fresh:
            self._fam_serial += 1
            inst.serial = self._fam_serial
            self._s["instances_created"] += 1
            if self.expire and node.bound is not None:
                deadline = inst.t0 + node.bound - 1
                if self._tick is not None and self._tick > deadline:
                    self._s["instances_expired"] += 1
                    inst.alive = False
                    return
                heapq.heappush(self._fam_expiry, (deadline, inst.serial, inst))
        if node.event_key and self.index_instances:
            try:
                k = tuple(f(None, inst.left, inst.last, 1) for f in node.instance_key)
                if any(x is None or _nan(x) for x in k):
                    self._s["instances_unmatchable"] += 1
                    inst.alive = False
                    return
                hash(k)
            except (AnalysisError, TypeError):
                k = _UNINDEXED
            self._fam_add_entry(inst, k, rows)
        elif node.slot_key is not None and self.index_instances:
            if len(rows) == 1:
                self._fam_add_entry(inst, node.fam.columns()[node.slot_key.slot][rows[0]], rows)
            else:                                   # one entry per distinct constant (numpy grouping)
                codes, values = node.fam.codes(node.slot_key.slot)
                c = codes[rows]
                order = np.argsort(c, kind="stable")
                c, ordered = c[order], rows[order]
                starts = [0, *(np.flatnonzero(c[1:] != c[:-1]) + 1).tolist()]
                ends = starts[1:] + [len(c)]
                for a, b, code in zip(starts, ends, c[starts].tolist()):
                    self._fam_add_entry(inst, values[code], ordered[a:b])
        else:
            self._fam_add_entry(inst, None, rows)

    def _fam_add_entry(self, inst: _Instance, k, rows: np.ndarray) -> None:
        node = inst.node
        self._entry_serial += 1
        eid = self._entry_serial
        try:
            bucket = node.buckets.get(k)
        except TypeError:
            k = _UNINDEXED
            bucket = node.buckets.get(k)
        if bucket is None:
            bucket = node.buckets[k] = {}
        bucket[eid] = [inst, rows]
        inst.entries[eid] = k
        node.count += 1

    def _fam_drop_entry(self, inst: _Instance, eid: int) -> None:
        node = inst.node
        k = inst.entries.pop(eid)
        bucket = node.buckets.get(k)
        if bucket is not None and bucket.pop(eid, None) is not None:
            node.count -= 1
            if not bucket:
                del node.buckets[k]
        if not inst.entries:
            inst.alive = False

    def _fam_kill(self, inst: _Instance) -> None:
        for eid in list(inst.entries):
            self._fam_drop_entry(inst, eid)
        inst.alive = False

    def _fam_visit(self, node: _FNode, attrs: dict, t0: int, t1: int) -> None:
        """An event of the node's right input at every affected entry (004 §2.3 edges)."""
        s = self._s
        s["nodes_visited"] += 1
        try:
            r, right_vecs = node.right.run(attrs, t0, t1)
        except AnalysisError as err:                # dropped from the right input of this node's rows
            self._charge_rows(node.fam, _node_rows(node), err)
            return
        if r is None:
            return
        theta = node.theta_dynamic
        try:
            for f in node.theta_static:
                s["edges_evaluated"] += 1
                if not f(r, None, None, 1):
                    return
        except AnalysisError:
            theta = node.theta                      # evaluated again per instance, as the oracle does
        if not self.index_instances:
            buckets = list(node.buckets.values())
        elif node.event_key:
            keyed = None
            try:
                k = tuple(f(r, None, None, 1) for f in node.event_key)
                if not any(x is None or _nan(x) for x in k):
                    keyed = node.buckets.get(k)
                buckets = [node.buckets.get(_UNINDEXED)]
            except (AnalysisError, TypeError):
                buckets = list(node.buckets.values())
            if keyed:
                self._fam_entries(node, keyed, r, right_vecs,
                                  node.theta_unkeyed if theta is node.theta_dynamic else theta, node.theta_vec, t0, t1)
        elif node.slot_key is not None:
            try:
                v = node.slot_key.scalar(r, None, None, 1)
                keyed = None if v is None or _nan(v) else node.buckets.get(v)
            except (AnalysisError, TypeError):
                keyed = None
                buckets = list(node.buckets.values())
            else:
                buckets = [node.buckets.get(_UNINDEXED)]
                if keyed:
                    if not node.fold and not theta and not node.theta_vec_rest and not right_vecs:
                        self._fam_consume_bucket(node, v, keyed, r, t0, t1)
                    else:
                        self._fam_entries(node, keyed, r, right_vecs, theta, node.theta_vec_rest, t0, t1)
        else:
            buckets = list(node.buckets.values())
        for bucket in buckets:
            if bucket:
                self._fam_entries(node, bucket, r, right_vecs, theta, node.theta_vec, t0, t1)

    def _fam_consume_bucket(self, node: _FNode, v, bucket: dict, r: dict, t0: int, t1: int) -> None:
        """A NEXT whose θ is just the slot key's equality: every entry of the event's bucket takes its
        first match now.  The outer selection's slotted conjuncts that read only the new event are
        evaluated once over all the entries' rows; only entries with a surviving row go forward."""
        s = self._s
        taken, keep = [], {}
        for eid, entry in bucket.items():          # the whole bucket at once (_fam_drop_entry inlined)
            inst = entry[0]
            entries = inst.entries
            if eid not in entries:
                continue
            if t0 > inst.t1:
                taken.append(entry)
                del entries[eid]
                if not entries:
                    inst.alive = False
            else:
                keep[eid] = entry
        node.count -= len(bucket) - len(keep)
        if keep:
            node.buckets[v] = keep
        else:
            del node.buckets[v]
        s["instances_visited"] += len(taken)
        s["edges_evaluated"] += len(taken)
        if not taken:
            return
        fam = node.fam
        keys = r.keys()
        r_only = [v for v in node.post_first_vecs if v.reads <= keys]
        if r_only and len(taken) > 1:
            sizes = np.fromiter((len(e[1]) for e in taken), np.int64, len(taken))
            rows = np.concatenate([e[1] for e in taken])
            ok = np.ones(len(rows), bool)
            try:
                for vec in r_only:
                    ok &= vec.holds(fam, rows, r, None, None, 1)
            except AnalysisError as err:            # the outer selection raised: these outputs are dropped
                self._charge_rows(fam, rows, err)
                return
            alive = np.add.reduceat(ok, np.concatenate(([0], np.cumsum(sizes)[:-1]))) > 0
            taken = [e for e, a in zip(taken, alive) if a]
        for inst, rows in taken:
            self._fam_forward(node, inst.left, r, None, inst.t0, t1, (t1, inst.key), rows)

    def _fam_entries(self, node: _FNode, bucket: dict, r: dict, right_vecs, theta, theta_vec,
                     t0: int, t1: int) -> None:
        s = self._s
        fam = node.fam
        de = t1 - t0 + 1
        for eid, entry in list(bucket.items()):
            inst, rows = entry
            if not inst.alive or eid not in inst.entries:
                continue
            s["instances_visited"] += 1
            if t0 <= inst.t1:                   # e2 must start after the instance's t1
                continue
            d = t1 - inst.t0 + 1
            left, last = inst.left, inst.last
            s["edges_evaluated"] += 1
            charged = rows                      # the rows an error here is charged to
            try:
                if not all([f(r, left, last, d) for f in theta]):
                    continue                    # filter edge for every row
                if right_vecs or theta_vec:
                    hold = np.ones(len(rows), bool)
                    for v, ev in right_vecs:
                        hold &= v.holds(fam, rows, ev, None, None, de)
                    for v in theta_vec:
                        hold &= v.holds(fam, rows, r, left, last, d)
                    if not hold.any():
                        continue
                    moving, staying = rows[hold], rows[~hold]
                else:
                    moving, staying = rows, _EMPTY
                if node.fold:                   # the step's aggregates and F's selection, before any change
                    charged = moving
                    aggs = {n: f(r, left, last, d) for n, f in node.aggregates}
                    stops = node.rebind is not None and not node.rebind(r, left, last, d)
                    if not stops and node.rebind_vec:
                        keep = np.ones(len(moving), bool)
                        for v in node.rebind_vec:
                            keep &= v.holds(fam, moving, r, left, last, d)
            except AnalysisError as err:        # the step raised: not taken, for these rows alone
                self._charge_rows(fam, charged, err)
                continue
            if not node.fold:                   # NEXT: the moving rows' first match
                if len(staying):
                    entry[1] = staying
                else:
                    self._fam_drop_entry(inst, eid)
                self._fam_forward(node, left, r, None, inst.t0, t1, (t1, inst.key), moving)
                continue
            if node.rebind is None and not node.rebind_vec:
                cont = moving
            else:
                s["edges_evaluated"] += 1
                if stops:
                    cont = _EMPTY
                elif node.rebind_vec:
                    cont = moving[keep]
                else:
                    cont = moving
            self._fam_forward(node, left, r, aggs, inst.t0, t1, (t1, inst.key), moving)
            if not len(cont) and not len(staying):
                self._fam_drop_entry(inst, eid)   # the chain ends for every row
                continue
            new_last = {**last, **r, **aggs}
            if not len(staying) and len(cont) == len(moving) and len(inst.entries) == 1:
                inst.last, inst.t1 = new_last, t1     # rebind edge: every row continues
                if node.key_reads_last and node.event_key and self.index_instances:
                    try:
                        same = tuple(f(None, left, new_last, 1) for f in node.instance_key) == inst.entries[eid]
                    except (AnalysisError, TypeError):
                        same = False
                    if not same:                        # re-keyed on the new $ values
                        self._fam_drop_entry(inst, eid)
                        inst.alive, inst.entries = True, {}
                        self._fam_pending_inst.append((inst, rows, False))
                continue
            if len(staying):
                entry[1] = staying
            else:
                self._fam_drop_entry(inst, eid)
            if len(cont):                       # the continuing rows: a new instance, new bindings
                new = _Instance()
                new.node, new.left, new.last, new.t0, new.t1, new.key = node, left, new_last, inst.t0, t1, inst.key
                new.alive, new.entries = True, {}
                self._fam_pending_inst.append((new, cont, True))

    def _fam_forward(self, node: _FNode, left: dict, r: dict, aggs, t0: int, t1: int, key,
                     rows: np.ndarray) -> None:
        """The forward edge: bindings combined (renamed), the outer selections, the next node.  The
        outer FILTER's slotted DUR conjuncts, and those reading only the new event, are tried on the
        rows first: most steps of a chain end there, before any binding is built."""
        fam = node.fam
        self._s["edges_evaluated"] += 1
        d = t1 - t0 + 1
        try:
            if node.post_early:
                keys = r.keys()
                for v in node.post_early:
                    if v.dur or (v.reads <= keys and not (aggs and not v.reads.isdisjoint(aggs))):
                        rows = rows[v.holds(fam, rows, r, None, None, d)]
                        if not len(rows):
                            return
            out = _combine(left, r)
            if aggs:
                out.update(aggs)
            out, vecs = node.post.run(out, t0, t1)
            if out is None:
                return
            for v, ev in vecs:
                rows = rows[v.holds(fam, rows, ev, None, None, d)]
                if not len(rows):
                    return
        except AnalysisError as err:            # an outer selection / projection raised: output dropped
            self._charge_rows(fam, rows, err)
            return
        self._fam_emit(fam, node.k, out, t0, t1, key, fam.alive(rows))

    def _expire(self, now: int) -> None:
        super()._expire(now)
        self._expire_heap(self._fam_expiry, now, self._fam_kill)

    def _close_tick(self) -> None:
        super()._close_tick()
        pending = self._fam_pending_out
        if pending:
            self._fam_pending_out = []
            by_query: dict[str, list] = {}
            for key, q, e in pending:
                by_query.setdefault(q, []).append((key, e))
            for q, items in by_query.items():         # the oracle's order within each query
                items.sort(key=lambda x: x[0])
                self._released.extend(Match(q, e) for _, e in items)
            self._s["matches"] += len(pending)

    # ---- inspection ----------------------------------------------------------------------------------
    def instances(self) -> int:
        return super().instances() + len(self._fam_live())

    def _fam_live(self) -> list:
        seen = {}
        for fam in self._families.values():
            for n in fam.nodes:
                for b in n.buckets.values():
                    for inst, rows in b.values():
                        if inst.alive:
                            seen[id(inst)] = inst
        return list(seen.values())

    def family_of(self, name: str) -> dict | None:
        """The family a query runs in (None: it runs in the inner NFAEngine)."""
        m = self._member.get(name)
        if m is None:
            return None
        fam, row = m
        return {"family": fam.example, "queries": fam.n_live, "row": row, "slots": len(fam.kinds),
                "parameters": [fam.values[i][row] for i in range(len(fam.kinds))],
                "start_index": _access_text(fam), "instance_index": [_node_index_text(n) for n in fam.nodes],
                "template": _template_text(fam.template)}

    def family_stats(self) -> list[dict]:
        out = []
        for fam in self._families.values():
            if fam.n_live:
                out.append({"family": fam.example, "queries": fam.n_live, "slots": len(fam.kinds),
                            "stream": fam.stream, "nodes": len(fam.nodes),
                            "entries": sum(n.count for n in fam.nodes),
                            "start_index": _access_text(fam),
                            "instance_index": [_node_index_text(n) for n in fam.nodes]})
        return out

    def stats(self) -> dict:
        st = super().stats()
        live = self._fam_live()
        rows = sum(len(r) for fam in self._families.values() for n in fam.nodes
                   for b in n.buckets.values() for _, r in b.values())
        st["families"] = len([f for f in self._families.values() if f.n_live])
        st["family_queries"] = sum(f.n_live for f in self._families.values())
        st["family_instances_alive"] = len(live)
        st["family_rows_alive"] = rows
        if live:
            sample = live[:: max(1, len(live) // 1000)]
            size = sum(_inst_size(i) for i in sample) / len(sample)
            n_all = st["instances_alive"] + len(live)
            st["bytes_per_instance"] = (st["bytes_per_instance"] * st["instances_alive"] + size * len(live)) / n_all
            st["instances_alive"] = n_all
        return st

    # ---- state ---------------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        base = super().snapshot()
        fams = {}
        for key, fam in self._families.items():
            insts = {}
            for k, n in enumerate(fam.nodes):
                for b in n.buckets.values():
                    for inst, rows in b.values():
                        if inst.alive:
                            rec = insts.setdefault(id(inst), [k, inst.left, inst.last, inst.t0, inst.t1, inst.key,
                                                              inst.serial, []])
                            rec[7].append([fam.names[r] for r in rows.tolist()])
            fams[key] = list(insts.values())
        return pickle.dumps({"base": base, "families": fams, "pending": self._fam_pending_out,
                             "serial": self._fam_serial}, protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, data: bytes) -> None:
        state = pickle.loads(data)
        super().restore(state["base"])
        self._fam_expiry = []
        for key, fam in self._families.items():
            for n in fam.nodes:
                n.buckets.clear()
                n.count = 0
            index = {name: row for row, name in enumerate(fam.names) if fam.live_list[row]}
            for k, left, last, t0, t1, okey, serial, row_lists in state["families"].get(key, ()):
                node = fam.nodes[k]
                inst = _Instance()
                inst.node, inst.left, inst.last, inst.t0, inst.t1, inst.key, inst.serial = \
                    node, left, last, t0, t1, okey, serial
                inst.alive, inst.entries = True, {}
                if self.expire and node.bound is not None:
                    heapq.heappush(self._fam_expiry, (t0 + node.bound - 1, serial, inst))
                for names in row_lists:
                    rows = np.asarray([index[q] for q in names if q in index], np.int64)
                    if len(rows):
                        self._fam_insert(inst, rows, fresh=False)
        self._fam_pending_out = list(state["pending"])
        self._fam_serial = state["serial"]


_DICT_SLOTS = 112      # bytes: an entry's two dict slots (its bucket and the instance's map), about


def _inst_size(inst: _Instance) -> int:
    """Bytes an instance holds: itself, its bindings, and per entry the entry, its rows, two dict slots."""
    n = sys.getsizeof(inst) + sys.getsizeof(inst.left) + sys.getsizeof(inst.entries)
    if inst.last is not None:
        n += sys.getsizeof(inst.last)
    for eid, k in inst.entries.items():
        entry = inst.node.buckets[k][eid]
        n += sys.getsizeof(entry) + entry[1].nbytes + _DICT_SLOTS
    return n


class _LazyCompiled:
    """A family member's description, compiled on demand (registration stays cheap)."""

    __slots__ = ("name", "query", "_engine", "_c")

    def __init__(self, name, query, engine):
        self.name, self.query, self._engine, self._c = name, query, engine, None

    def compiled(self):
        if self._c is None:
            from sparksub.operators.events.nfa import compile_query
            if not isinstance(self.query, StreamExpr):      # bulk registration: built on demand (bulk.py)
                self.query = self.query()
            self._c = compile_query(self.name, self.query, seconds_per_tick=self._engine.spt,
                                    functions=self._engine.fns)
        return self._c

    def describe(self) -> str:
        return self.compiled().describe()

    def to_dot(self) -> str:
        return self.compiled().to_dot()

    @property
    def automata(self):
        return self.compiled().automata


def _slot_text(e: Expr) -> str:
    if isinstance(e, _Slot):
        return f":p{e.index + 1}"
    if isinstance(e, _DurSlot):
        return f"DUR {e.op} :p{e.index + 1}" + (e.unit or "")
    if isinstance(e, BinOp):
        return f"{_slot_text(e.left)} {e.op} {_slot_text(e.right)}"
    if isinstance(e, Compare):
        return f"{_slot_text(e.left)} {e.op} {_slot_text(e.right)}"
    from sparksub.grammar.event_ast import unparse_expr
    return unparse_expr(e)


def _vec_text(v: _Vec) -> str:
    return _slot_text(v.expr)


def _access_text(fam: _Family) -> str:
    parts = [f"hash on {_vec_text(fam.access_eq)}"] if fam.access_eq else []
    if fam.access_range:
        parts.append(f"sorted on {_vec_text(fam.access_range)}")
    return " + ".join(parts) or "none (every query's start is checked as a vector)"


def _node_index_text(n: _FNode) -> str:
    if n.event_key:
        return "hash on the binding value (θ's equality)"
    if n.slot_key is not None:
        return f"rows keyed by {_vec_text(n.slot_key)}"
    return "none (every instance visited)"


def _template_text(t: StreamExpr) -> str:
    """The template with slots as ``:p1, :p2 …`` (best effort: CEL with placeholders)."""
    def _placeholder(e):
        if isinstance(e, _Slot):
            return Attr(f"_p{e.index + 1}")
        if isinstance(e, _DurSlot):
            return Compare(e.op, Attr("DUR"), Attr(f"_p{e.index + 1}" + (f"_{e.unit}" if e.unit else "")))
        return rebuild(e, _placeholder)
    try:
        text = re.sub(r"(\$\d?\.)?_p(\d+)", r":p\2", unparse_cel(_map_predicates(t, _placeholder)))
        return re.sub(r":p(\d+)_([A-Za-z]+)", r":p\1 \2", text)            # DUR >= :p1 MIN
    except Exception:                       # noqa: BLE001 — a description only
        return repr(t)
