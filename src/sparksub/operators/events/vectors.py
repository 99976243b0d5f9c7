"""Event-query expressions evaluated over columns of events (numpy / Arrow), for the batch executor
(``operators/events/batch.py``).  Pure; no Spark.

The per-event executors (``nfa``, ``families``) evaluate an expression with compiled closures over one
event's dict; the batch executor evaluates it once over a micro-batch: the events (and the bindings kept
from earlier batches) are the rows of ``Rows`` (an Arrow table plus ``t0``/``t1``), and an evaluation
context maps each scope of 004 §2.3's bindings -- the event itself / ``$2``, ``$1``, ``$`` -- to an array
of row indices (one element per event, or per (instance, event) pair).

The semantics are ``values``' (SQL NULLs, Kleene AND/OR/NOT, a predicate holds only when TRUE, a division
by zero is NULL) and must give exactly what the closures give.  Only what numpy computes exactly like
Python is vectorised: numbers (float64; integers only while every value and result stays below 2**53, so
that float64 holds them exactly), strings (object arrays: elementwise Python comparisons), booleans,
``+ - * /``, comparisons, ``DUR``, ``abs``, AND/OR/NOT.  Anything else -- other functions, LIKE, ``%``,
``^``, a column of mixed or other types, a comparison Python would refuse -- raises ``Unsupported``, and the
caller evaluates that conjunct with the closures, element by element (still exact; an ``AnalysisError``
there is a run-time evaluation error, which the batch executor hands to the per-event path).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.grammar.event_ast import And, Attr, BinOp, Call, Compare, Const, Dur, Expr, Neg, Not, Or, Scope
from sparksub.operators.events.values import COMPARISONS

__all__ = ["Rows", "Col", "V", "Ctx", "Unsupported", "evaluate", "values", "from_python", "holds", "scoped", "EXACT_INT"]

EXACT_INT = 2 ** 53          # integers below this are exact in float64

_NP_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
           ">=": np.greater_equal}


class Unsupported(Exception):
    """This expression is not vectorised here: evaluate it with the closures."""


# ---------------------------------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------------------------------

class Col:
    """One attribute over the rows: its Arrow array and, computed on demand, numpy views.  ``kind``:
    ``num`` (integers, all below 2**53, or floats), ``str``, ``bool``, ``null`` (every value NULL) or
    ``other`` (not vectorised)."""

    __slots__ = ("arrow", "kind", "integral", "_num", "_valid", "_obj", "_bool", "_codes")

    def __init__(self, arrow: pa.Array):
        self.arrow = arrow
        t = arrow.type
        self.integral = False
        if pa.types.is_integer(t):
            lo_hi = pc.min_max(arrow).as_py()
            ok = lo_hi["min"] is None or (abs(lo_hi["min"]) < EXACT_INT and abs(lo_hi["max"]) < EXACT_INT)
            self.kind, self.integral = ("num", True) if ok else ("other", False)
        elif pa.types.is_floating(t):
            self.kind = "num"
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            self.kind = "str"
        elif pa.types.is_boolean(t):
            self.kind = "bool"
        elif pa.types.is_null(t):
            self.kind = "null"
        else:
            self.kind = "other"
        self._num = self._valid = self._obj = self._bool = self._codes = None

    @property
    def valid(self) -> np.ndarray:
        if self._valid is None:
            a = self.arrow
            self._valid = (np.ones(len(a), bool) if a.null_count == 0
                           else a.is_valid().to_numpy(zero_copy_only=False))
        return self._valid

    @property
    def num(self) -> np.ndarray:
        """float64 values (NULL as 0)."""
        if self._num is None:
            a = self.arrow if self.arrow.null_count == 0 else pc.fill_null(self.arrow, 0)
            self._num = np.asarray(a.to_numpy(zero_copy_only=False), np.float64)
        return self._num

    @property
    def obj(self) -> np.ndarray:
        """Python values (NULL as None), an object array."""
        if self._obj is None:
            o = self.arrow.to_numpy(zero_copy_only=False)
            if o.dtype != object:
                o = np.asarray(self.arrow.to_pylist(), dtype=object)
            self._obj = o
        return self._obj

    @property
    def bools(self) -> np.ndarray:
        if self._bool is None:
            a = self.arrow if self.arrow.null_count == 0 else pc.fill_null(self.arrow, False)
            self._bool = np.asarray(a.to_numpy(zero_copy_only=False), bool)
        return self._bool

    def codes(self, kdict: dict) -> np.ndarray:
        """Each value's code in ``kdict`` (value -> int; Python equality, so ``1``, ``1.0`` and ``True``
        share one; new values are added), -1 for NULL and NaN (they equal nothing).  One ``kdict`` per
        executor: the codes are cached."""
        if self._codes is not None:
            return self._codes
        enc = self.arrow.dictionary_encode()
        values = enc.dictionary.to_pylist()
        lookup = np.empty(len(values) + 1, np.int64)
        for j, v in enumerate(values):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                lookup[j] = -1
            else:
                lookup[j] = kdict.setdefault(v, len(kdict))
        lookup[-1] = -1
        idx = enc.indices
        idx = (idx.to_numpy(zero_copy_only=False) if idx.null_count == 0
               else pc.fill_null(idx, len(values)).to_numpy(zero_copy_only=False))
        self._codes = lookup[np.asarray(idx, np.int64)]
        return self._codes


class Rows:
    """The rows an evaluation reads: attribute columns (an Arrow table) and the intervals."""

    def __init__(self, table: pa.Table, t0: np.ndarray, t1: np.ndarray):
        self.table, self.t0, self.t1 = table, t0, t1
        self.n = table.num_rows
        self.names = tuple(table.column_names)
        self._cols: dict[str, Col] = {}
        self._dicts: list | None = None

    def col(self, name: str) -> Col | None:
        c = self._cols.get(name)
        if c is None:
            if name not in self.table.column_names:
                return None
            c = self._cols[name] = Col(self.table.column(name).combine_chunks())
        return c

    def dicts(self) -> list[dict]:
        """Row i as the per-event executors see an event: {attribute: value}."""
        if self._dicts is None:
            cols = [self.table.column(c).to_pylist() for c in self.names]
            self._dicts = [dict(zip(self.names, vs)) for vs in zip(*cols)] if cols else [{} for _ in range(self.n)]
        return self._dicts


# ---------------------------------------------------------------------------------------------------
# Values and the evaluation context
# ---------------------------------------------------------------------------------------------------

class V:
    """A vector of values of one kind (``num``, ``str``, ``bool``, ``null``) with its validity mask."""

    __slots__ = ("kind", "vals", "valid", "integral")

    def __init__(self, kind: str, vals, valid, integral: bool = False):
        self.kind, self.vals, self.valid, self.integral = kind, vals, valid, integral


class Ctx:
    """Where each scope's attributes come from: ``lookup(attr) -> (row indices, column name) or None``
    (None: NULL), over ``n`` elements; ``d`` the DUR of each element; ``python()`` the per-event
    executors' arguments ``(p, l, s, d)`` per element, for the closure fallback; ``spt`` seconds per
    tick (DUR units); ``abs_builtin``: ``abs()`` is the built-in one (not replaced by the caller's)."""

    def __init__(self, rows: Rows, n: int, lookup: Callable, d: np.ndarray | None, python: Callable,
                 spt: float = 1, abs_builtin: bool = True):
        self.rows, self.n, self.lookup, self.d, self.python = rows, n, lookup, d, python
        self.spt, self.abs_builtin = spt, abs_builtin


def scoped(rows: Rows, idx: dict, d: np.ndarray | None, spt: float = 1, abs_builtin: bool = True) -> Ctx:
    """A context whose scopes read rows ``idx[Scope]`` (``Scope.PLAIN`` and ``Scope.RIGHT`` alike: the
    event, or ``$2``)."""
    n = len(next(iter(idx.values())))

    def lookup(a: Attr):
        sc = Scope.RIGHT if a.scope is Scope.PLAIN else a.scope
        ix = idx.get(sc)
        return None if ix is None else (ix, a.name)

    def python():
        dicts = rows.dicts()

        def pick(sc):
            ix = idx.get(sc)
            return [None] * n if ix is None else [dicts[i] for i in ix.tolist()]
        dd = [1] * n if d is None else d.tolist()
        return list(zip(pick(Scope.RIGHT), pick(Scope.LEFT), pick(Scope.LAST), dd))
    return Ctx(rows, n, lookup, d, python, spt, abs_builtin)


def _null(n: int) -> V:
    return V("null", np.zeros(n, bool), np.zeros(n, bool))


def _const(v, n: int) -> V:
    if isinstance(v, bool):
        return V("bool", np.full(n, v), np.ones(n, bool))
    if isinstance(v, (int, float)):
        if isinstance(v, int) and abs(v) >= EXACT_INT:
            raise Unsupported
        return V("num", np.full(n, float(v)), np.ones(n, bool), isinstance(v, int))
    if isinstance(v, str):
        a = np.empty(n, object)
        a[:] = v
        return V("str", a, np.ones(n, bool))
    raise Unsupported


def _attr(e: Attr, ctx: Ctx) -> V:
    src = ctx.lookup(e)
    if src is None:
        return _null(ctx.n)
    ix, name = src
    c = ctx.rows.col(name)
    if c is None or c.kind == "null":
        return _null(ctx.n)
    if c.kind == "num":
        return V("num", c.num[ix], c.valid[ix], c.integral)
    if c.kind == "str":
        return V("str", c.obj[ix], c.valid[ix])
    if c.kind == "bool":
        return V("bool", c.bools[ix], c.valid[ix])
    raise Unsupported


def _check_int(v: V) -> V:
    if v.integral and v.valid.any() and np.abs(v.vals[v.valid]).max() >= EXACT_INT:
        raise Unsupported          # Python's integers are exact beyond float64's
    return v


def _arith(e: BinOp, ctx: Ctx) -> V:
    a, b = evaluate(e.left, ctx), evaluate(e.right, ctx)
    if a.kind == "null" or b.kind == "null":
        if {a.kind, b.kind} <= {"null", "num"}:
            return _null(ctx.n)
        raise Unsupported
    if a.kind != "num" or b.kind != "num" or e.op not in "+-*/":
        raise Unsupported
    valid = a.valid & b.valid
    with np.errstate(all="ignore"):
        if e.op == "/":
            nz = b.vals != 0
            out = np.divide(a.vals, np.where(nz, b.vals, 1.0))
            return V("num", out, valid & nz)
        out = {"+": np.add, "-": np.subtract, "*": np.multiply}[e.op](a.vals, b.vals)
    return _check_int(V("num", out, valid, a.integral and b.integral))


def _compare(e: Compare, ctx: Ctx) -> V:
    if e.op == "LIKE":
        raise Unsupported
    a, b = evaluate(e.left, ctx), evaluate(e.right, ctx)
    n = ctx.n
    if "bool" in (a.kind, b.kind):
        raise Unsupported
    if a.kind == "null" or b.kind == "null":
        return _null(n)
    valid = a.valid & b.valid
    if a.kind == b.kind == "num":
        with np.errstate(all="ignore"):
            return V("bool", _NP_CMP[e.op](a.vals, b.vals), valid)
    if a.kind == b.kind == "str":
        av, bv = a.vals, b.vals
        if not valid.all():                # NULLs never reach Python's comparison
            av, bv = np.where(valid, av, ""), np.where(valid, bv, "")
        return V("bool", np.asarray(_NP_CMP[e.op](av, bv), bool), valid)
    if e.op in ("=", "!="):                # a number and a string: never equal (Python)
        return V("bool", np.full(n, e.op == "!="), valid)
    raise Unsupported                      # Python refuses to order them: an evaluation error


def _logic(e, ctx: Ctx) -> V:
    n = ctx.n
    if isinstance(e, Not):
        v = evaluate(e.operand, ctx)
        if v.kind == "null":
            return v
        if v.kind != "bool":
            raise Unsupported
        return V("bool", ~v.vals, v.valid)
    t = np.ones(n, bool)       # every item valid and TRUE (AND) / FALSE (OR)
    hit = np.zeros(n, bool)    # some item valid and FALSE (AND) / TRUE (OR)
    win = isinstance(e, Or)
    for x in e.items:          # every item evaluated, as the oracle does
        v = evaluate(x, ctx)
        if v.kind == "null":
            t[:] = False
            continue
        if v.kind != "bool":
            raise Unsupported
        decided = v.valid & (v.vals == win)
        hit |= decided
        t &= v.valid & (v.vals != win)
    if win:                    # OR: TRUE if some TRUE; FALSE if all FALSE; else NULL
        return V("bool", hit.copy(), hit | t)
    return V("bool", ~hit & t, hit | t)


def evaluate(e: Expr, ctx: Ctx) -> V:
    """``e`` over the context's elements (raises ``Unsupported``)."""
    if isinstance(e, Const):
        return _const(e.value, ctx.n)
    if isinstance(e, Attr):
        return _attr(e, ctx)
    if isinstance(e, BinOp):
        return _arith(e, ctx)
    if isinstance(e, Compare):
        return _compare(e, ctx)
    if isinstance(e, Dur):
        if ctx.d is None:
            raise Unsupported
        from sparksub.operators.events.nfa import _dur_ticks
        return V("bool", COMPARISONS[e.op](ctx.d, _dur_ticks(e, ctx.spt)), np.ones(ctx.n, bool))
    if isinstance(e, (And, Or, Not)):
        return _logic(e, ctx)
    if isinstance(e, Neg):
        return _unary(e.operand, ctx, np.negative)
    if isinstance(e, Call) and e.name.lower() == "abs" and len(e.args) == 1 and ctx.abs_builtin:
        return _unary(e.args[0], ctx, np.abs)
    raise Unsupported


def _unary(x: Expr, ctx: Ctx, fn) -> V:
    """A numeric function of one operand (NULL in, NULL out)."""
    v = evaluate(x, ctx)
    if v.kind == "null":
        return v
    if v.kind != "num":
        raise Unsupported
    return V("num", fn(v.vals), v.valid, v.integral)


def values(e: Expr, ctx: Ctx, fn: Callable) -> V:
    """``e``'s values, vectorised or, if not, with the closure ``fn(p, l, s, d)`` per element (which may
    raise ``AnalysisError``); a mix of kinds there raises ``Unsupported``."""
    try:
        return evaluate(e, ctx)
    except Unsupported:
        pass
    out = [fn(*args) for args in ctx.python()]
    return from_python(out)


def from_python(out: list) -> V:
    """Python values (one kind, or None) as a ``V``; a mix of kinds raises ``Unsupported``."""
    n = len(out)
    kinds = {("bool" if isinstance(v, bool) else "num" if isinstance(v, (int, float)) else
              "str" if isinstance(v, str) else "other") for v in out if v is not None}
    valid = np.fromiter((v is not None for v in out), bool, n)
    if not kinds:
        return _null(n)
    if len(kinds) > 1 or "other" in kinds:
        raise Unsupported
    (kind,) = kinds
    if kind == "num":
        if any(isinstance(v, int) and abs(v) >= EXACT_INT for v in out if v is not None):
            raise Unsupported
        vals = np.fromiter((0.0 if v is None else float(v) for v in out), np.float64, n)
        return V("num", vals, valid, all(isinstance(v, int) for v in out if v is not None))
    if kind == "bool":
        return V("bool", np.fromiter((bool(v) for v in out), bool, n), valid)
    vals = np.empty(n, object)
    vals[:] = out
    return V("str", vals, valid)


def holds(expr: Expr, from_and: bool, ctx: Ctx, fn: Callable) -> np.ndarray:
    """Where the conjunct holds (is TRUE), as ``nfa._holds_fn`` decides it: vectorised, or with the
    compiled holds-closure ``fn`` element by element (an ``AnalysisError`` propagates)."""
    try:
        v = evaluate(expr, ctx)
        if v.kind == "bool":
            return v.vals & v.valid
        if v.kind == "null" or not from_and:     # a non-boolean is never TRUE ...
            return np.zeros(ctx.n, bool)
        raise Unsupported                        # ... but inside an AND it is an error (nfa._truth)
    except Unsupported:
        return np.fromiter((fn(*args) for args in ctx.python()), bool, ctx.n)

