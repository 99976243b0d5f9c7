"""The AST of Cayuga event queries, shared by the CEL and algebra syntaxes, with a builder and unparsers.

Sources: 004 §2.1–2.2 (data model and operators), DESIGN §4 (the semantics we implement), the Cayuga
Event Language as issue 6 describes it.  The nodes are immutable, typed, hashable frozen dataclasses
(Ibis-style): structural equality is ``==``, so ``parse_cel(unparse_cel(q)) == q``.

Stream expressions (004 §2.2):

    Stream(name)                                   a named input stream
    Select(input, predicate)                       σθ        CEL FILTER{θ}(E)
    Project(input, items)                          πX (+ρ)   CEL SELECT items FROM E
    Aggregate(input, items)                        αg        CEL SELECT *, items FROM E
    Rename(input, mapping)                         ρf        (algebra only)
    Union(left, right)                             ∪         (algebra only)
    Sequence(left, right, theta)                   ;θ        CEL E1 NEXT{θ} E2
    Iteration(left, right, theta, rebind, aggregates)
                                                   μF,θ      CEL E1 FOLD{θ, rebind, aggregates} E2
    Publish(input, name)                           CEL/algebra ... PUBLISH name

Expressions (predicates are boolean expressions):

    Const(value)  Attr(name, scope)  Neg(x)  BinOp(op, l, r)  Compare(op, l, r)
    And(items)  Or(items)  Not(x)  Call(name, args)  Dur(op, value, unit)
    Param(name)    a template parameter ``:name`` (templates only: grammar.events.parse_template)

``Attr.scope`` is where an attribute is read (DESIGN §4): ``Scope.PLAIN`` (``name``: the event itself;
inside NEXT/FOLD braces an *unqualified* name, resolved as Cayuga's CEL compiler does — the left input's
(``$1.name``; in a FOLD the chain's first event) when it has the attribute, else the right input's —
by ``grammar.event_analysis.analyse_query`` against the declared schemas), ``Scope.LEFT`` (``$1.name``:
the left input, the first event of a FOLD chain), ``Scope.RIGHT`` (``$2.name``: the incoming right
event), ``Scope.LAST`` (``$.name``: the last iteration of a FOLD, 004 §2.2 "ATTi.last").  The algebra
reads a plain name inside ``SEQ[…]`` / ``MU[…]`` as the new event's (004 §2.2: ``price ≥ price.last``),
so its parser stores it as ``$2.name``.  Expression nodes carry ``pos`` (line, column in the text they
were parsed from, or None), which equality ignores.

Canonical forms, so that equal queries are equal ASTs (and round trips are exact):
- an absent predicate is ``None``; a literal ``TRUE`` as θ or rebind condition is stored as ``None``;
- inside NEXT/FOLD braces a plain ``name`` stays plain (CEL) until resolved against schemas; the algebra's
  plain ``name`` there is stored as ``$2.name``;
- ``And``/``Or`` are n-ary and flat (never an ``And`` directly inside an ``And``);
- a minus sign on a numeric literal is folded into the constant (``Neg`` never wraps a number);
- ``Const`` equality includes the Python type (``Const(1) != Const(1.0) != Const(True)``);
- CEL ``SELECT * FROM E`` is ``E`` itself; ``SELECT *, items`` is ``Aggregate``; ``SELECT items`` is
  ``Project``; an item without ``AS`` must be an attribute and takes its name.

Builder (a Python alternative to the two text syntaxes; strings given to the builder *methods* are CEL
expression text, Python values given to the expression *operators* are literals):

>>> q = stream("Stock").filter("Price > 60.5").next("Stock", on=left("Name").eq(right("Name")))
>>> q.to_cel()
'SELECT * FROM FILTER{Price > 60.5}(Stock) NEXT{$1.Name = $2.Name} Stock'
>>> q.to_algebra()
'SELECT[Price > 60.5](Stock) SEQ[$1.Name = $2.Name] Stock'

Deviations: CEL cannot spell ``Rename`` or ``Union`` (the real system has neither), so ``to_cel`` raises
``ValueError`` on them; ``DUR`` accepts ``WEEK`` besides YEAR|MONTH|DAY|HOUR|MIN|SEC (004 Table 2, S5).
"""
from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Mapping

from sparksub.errors import AnalysisError

__all__ = [
    "Scope", "Node", "Expr", "Const", "Attr", "Neg", "BinOp", "Compare", "And", "Or", "Not", "Call",
    "Dur", "Param", "Item", "StreamExpr", "Stream", "Select", "Project", "Aggregate", "Rename", "Union",
    "Sequence", "Iteration", "Publish", "ARITH_OPS", "COMPARE_OPS", "DUR_UNITS", "UNIT_SECONDS",
    "stream", "attr", "left", "right", "last", "lit", "neg", "and_", "or_", "not_", "call", "contains",
    "dur", "item", "unparse_cel", "unparse_algebra", "unparse_expr", "attributes_read", "rebuild",
]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: an attribute as the builder's string arguments name it: ``name``, ``$1.name``, ``$2.name``, ``$.name``
_SCOPED_NAME = re.compile(r"(?:(?P<scope>\$[12]?)\.)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\Z")

#: Arithmetic operators (``^`` is power, right-associative).
ARITH_OPS = ("+", "-", "*", "/", "%", "^")
#: Comparison operators (``LIKE`` is SQL string matching, DESIGN §4).
COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=", "LIKE")
#: DUR units, canonical spelling (004 §2.1: durations are counted in clock ticks).
DUR_UNITS = ("YEAR", "MONTH", "WEEK", "DAY", "HOUR", "MIN", "SEC")
#: Seconds per unit (a month is 30 days, a year 365 days).
UNIT_SECONDS = {"SEC": 1, "MIN": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400,
                "MONTH": 30 * 86400, "YEAR": 365 * 86400}


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise AnalysisError(f"invalid {what} name {name!r}: expected letters, digits and _")


class Scope(enum.Enum):
    """Where an attribute is read (DESIGN §4)."""

    PLAIN = ""    # name    — the event itself; inside NEXT/FOLD braces unqualified (module docstring)
    LEFT = "$1"   # $1.name — the left input (a FOLD chain's first event)
    RIGHT = "$2"  # $2.name — the right input (the incoming event)
    LAST = "$"    # $.name  — the FOLD chain's last iteration (004 §2.2 ATTi.last)


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}     # node class -> the fields that may hold sub-nodes


class Node:
    """Base of every AST node: immutable, hashable, compared structurally."""

    __slots__ = ()

    def children(self) -> Iterator["Node"]:
        """The direct sub-nodes, in field order."""
        names = _CHILD_FIELDS.get(type(self))
        if names is None:       # (dataclasses.fields is slow; registration walks every query often)
            names = _CHILD_FIELDS[type(self)] = tuple(f.name for f in fields(self) if f.name != "pos")
        for name in names:
            v = getattr(self, name)
            if isinstance(v, Node):
                yield v
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Node):
                        yield x

    def walk(self) -> Iterator["Node"]:
        """This node and every node below it, pre-order."""
        yield self
        for c in self.children():
            yield from c.walk()


# ---------------------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------------------

class Expr(Node):
    """An expression or predicate.  Python operators build arithmetic and boolean nodes; comparisons
    are methods (``==`` stays structural equality)."""

    __slots__ = ()

    def __add__(self, o): return BinOp("+", self, _lit(o))
    def __radd__(self, o): return BinOp("+", _lit(o), self)
    def __sub__(self, o): return BinOp("-", self, _lit(o))
    def __rsub__(self, o): return BinOp("-", _lit(o), self)
    def __mul__(self, o): return BinOp("*", self, _lit(o))
    def __rmul__(self, o): return BinOp("*", _lit(o), self)
    def __truediv__(self, o): return BinOp("/", self, _lit(o))
    def __rtruediv__(self, o): return BinOp("/", _lit(o), self)
    def __mod__(self, o): return BinOp("%", self, _lit(o))
    def __rmod__(self, o): return BinOp("%", _lit(o), self)
    def __pow__(self, o): return BinOp("^", self, _lit(o))
    def __rpow__(self, o): return BinOp("^", _lit(o), self)
    def __neg__(self): return neg(self)
    def __pos__(self): return self
    def __and__(self, o): return and_(self, _lit(o))
    def __rand__(self, o): return and_(_lit(o), self)
    def __or__(self, o): return or_(self, _lit(o))
    def __ror__(self, o): return or_(_lit(o), self)
    def __invert__(self): return Not(self)

    def __bool__(self):
        raise TypeError("an event-query expression has no truth value: combine predicates with & | ~, "
                        "compare with .eq() .lt() ..., and test structure with ==")

    def eq(self, o): return Compare("=", self, _lit(o))
    def ne(self, o): return Compare("!=", self, _lit(o))
    def lt(self, o): return Compare("<", self, _lit(o))
    def le(self, o): return Compare("<=", self, _lit(o))
    def gt(self, o): return Compare(">", self, _lit(o))
    def ge(self, o): return Compare(">=", self, _lit(o))
    def like(self, o): return Compare("LIKE", self, _lit(o))

    def to_cel(self) -> str:
        return unparse_expr(self)

    def __str__(self) -> str:
        return unparse_expr(self)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True, slots=True, eq=False)
class Const(Expr):
    """A literal: int, float (finite), str or bool."""

    value: int | float | str | bool
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        if not isinstance(self.value, (int, float, str, bool)):
            raise AnalysisError(f"unsupported constant {self.value!r}")
        if isinstance(self.value, float) and not math.isfinite(self.value):
            raise AnalysisError(f"constant {self.value!r} is not finite")

    def __eq__(self, other):
        return (type(other) is Const and type(self.value) is type(other.value)
                and self.value == other.value)

    def __hash__(self):
        return hash((Const, type(self.value), self.value))

    def __repr__(self):
        return f"Const({self.value!r})"


@dataclass(frozen=True, slots=True)
class Attr(Expr):
    """An attribute reference ``name``, ``$1.name``, ``$2.name`` or ``$.name``."""

    name: str
    scope: Scope = Scope.PLAIN
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        _check_name(self.name, "attribute")
        if not isinstance(self.scope, Scope):
            raise AnalysisError(f"invalid scope {self.scope!r}")


@dataclass(frozen=True, slots=True)
class Neg(Expr):
    """Unary minus on a non-literal (literals carry their sign: ``Const(-3)``)."""

    operand: Expr
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        if isinstance(self.operand, Const) and _is_number(self.operand.value):
            raise AnalysisError("Neg of a numeric literal: write Const(-v) (or use neg())")


@dataclass(frozen=True, slots=True)
class BinOp(Expr):
    """Arithmetic ``left op right``, op in ``+ - * / % ^``."""

    op: str
    left: Expr
    right: Expr
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        if self.op not in ARITH_OPS:
            raise AnalysisError(f"unknown arithmetic operator {self.op!r}")


@dataclass(frozen=True, slots=True)
class Compare(Expr):
    """``left op right``, op in ``= != < <= > >= LIKE``."""

    op: str
    left: Expr
    right: Expr
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        if self.op not in COMPARE_OPS:
            raise AnalysisError(f"unknown comparison {self.op!r}")


def _flatten(cls, items) -> tuple:
    out: list = []
    for x in items:
        if isinstance(x, cls):
            out.extend(x.items)
        else:
            out.append(x)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class And(Expr):
    """Conjunction of two or more predicates (flat)."""

    items: tuple[Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "items", _flatten(And, self.items))
        if len(self.items) < 2:
            raise AnalysisError("And needs two or more operands (use and_())")


@dataclass(frozen=True, slots=True)
class Or(Expr):
    """Disjunction of two or more predicates (flat)."""

    items: tuple[Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "items", _flatten(Or, self.items))
        if len(self.items) < 2:
            raise AnalysisError("Or needs two or more operands (use or_())")


@dataclass(frozen=True, slots=True)
class Not(Expr):
    operand: Expr


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A function call, e.g. ``contains(description, link)`` (004 Table 2, S6)."""

    name: str
    args: tuple[Expr, ...] = ()
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        _check_name(self.name, "function")
        object.__setattr__(self, "args", tuple(self.args))


@dataclass(frozen=True, slots=True)
class Dur(Expr):
    """``DUR op value [unit]``: the event's duration t1 - t0 + 1 in ticks (004 §2.1)."""

    op: str
    value: int | float
    unit: str | None = None
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        if self.op not in COMPARE_OPS or self.op == "LIKE":
            raise AnalysisError(f"unknown DUR comparison {self.op!r}")
        if isinstance(self.value, Param):       # a template's ``DUR op :d`` (bound before analysis)
            return
        if not _is_number(self.value) or not math.isfinite(self.value) or self.value < 0:
            raise AnalysisError(f"DUR needs a non-negative number, got {self.value!r}")
        if self.unit is not None and self.unit not in DUR_UNITS:
            raise AnalysisError(f"unknown DUR unit {self.unit!r}; expected one of {', '.join(DUR_UNITS)}")


@dataclass(frozen=True, slots=True)
class Param(Expr):
    """A template parameter ``:name`` in a constant's place (``grammar.events.parse_template``): only a
    template holds it; ``operators/events/bulk.bind_event_template`` replaces it by each row's value
    before anything analyses the query.  Allowed wherever a constant is, and as a ``DUR`` bound."""

    name: str
    pos: tuple | None = field(default=None, compare=False, repr=False)   # (line, column) in the text

    def __post_init__(self):
        _check_name(self.name, "parameter")


@dataclass(frozen=True, slots=True)
class Item(Node):
    """One output attribute: ``expr AS name`` (a SELECT-list entry or an aggregate term)."""

    expr: Expr
    name: str

    def __post_init__(self):
        _check_name(self.name, "attribute")


# ---------------------------------------------------------------------------------------------------
# Stream expressions
# ---------------------------------------------------------------------------------------------------

def attributes_read(e: Expr) -> Iterator[Attr]:
    """Every attribute reference in an expression."""
    for n in e.walk():
        if isinstance(n, Attr):
            yield n


def _check_scopes(exprs, allowed: set, where: str) -> None:
    for e in exprs:
        if e is None:
            continue
        for a in attributes_read(e):
            if a.scope not in allowed:
                ref = f"{a.scope.value}.{a.name}"
                if where == "NEXT":
                    raise AnalysisError(f"{ref}: `$.` (the last iteration) is defined only inside FOLD")
                raise AnalysisError(f"{ref}: $1/$2/$ are defined only inside NEXT{{...}} or FOLD{{...}}; "
                                    f"in {where} write the attribute's plain name")


def _check_items(items: tuple, what: str) -> None:
    if not items:
        raise AnalysisError(f"{what} needs at least one item")
    seen = set()
    for it in items:
        if not isinstance(it, Item):
            raise AnalysisError(f"{what} items must be Item, got {it!r}")
        if it.name in seen:
            raise AnalysisError(f"{what}: attribute {it.name!r} is defined twice")
        seen.add(it.name)


def _canonical_pred(p: Expr | None) -> Expr | None:
    return None if p == Const(True) else p


def _plain_to_right(e):
    """A plain name as the incoming event's, ``$2.name`` (the algebra's reading inside SEQ / MU, 004 §2.2)."""
    if e is None:
        return None
    if isinstance(e, Attr):
        return Attr(e.name, Scope.RIGHT, pos=e.pos) if e.scope is Scope.PLAIN else e
    if isinstance(e, Item):
        return Item(_plain_to_right(e.expr), e.name)
    if isinstance(e, Const | Dur):
        return e
    return rebuild(e, _plain_to_right)


def rebuild(node: Node, fn) -> Node:
    """``node`` with ``fn`` applied to each direct sub-node (fields and tuples of fields), rebuilt."""
    values = {}
    for f in fields(node):
        v = getattr(node, f.name)
        if isinstance(v, Node):
            v = fn(v)
        elif isinstance(v, tuple):
            v = tuple(fn(x) if isinstance(x, Node) else x for x in v)
        values[f.name] = v
    return type(node)(**values)


class StreamExpr(Node):
    """A stream expression, with the builder methods."""

    __slots__ = ()

    def filter(self, predicate) -> "Select":
        """σθ (CEL ``FILTER{θ}``)."""
        return Select(self, _pred(predicate))

    def select(self, *items, **named) -> "Project":
        """πX: keep exactly these items (CEL ``SELECT items FROM``).  ``"Name"``, ``item(e, "n")`` or
        ``n=expr``."""
        return Project(self, _items(items, named))

    project = select

    def aggregate(self, *items, **named) -> "Aggregate":
        """αg: add or replace attributes (CEL ``SELECT *, items FROM``)."""
        return Aggregate(self, _items(items, named))

    def rename(self, mapping: Mapping[str, str] | None = None, **named) -> "Rename":
        """ρf: rename attributes, ``{"Price": "MinPrice"}``."""
        pairs = tuple((dict(mapping or {}) | named).items())
        return Rename(self, pairs)

    def union(self, other) -> "Union":
        return Union(self, _stream(other))

    def next(self, other, on=None) -> "Sequence":
        """``self ;θ other`` (CEL ``NEXT{θ}``)."""
        return Sequence(self, _stream(other), _pred(on))

    def fold(self, other, on=None, rebind=None, aggregates=None) -> "Iteration":
        """``μF,θ(self, other)`` (CEL ``FOLD{θ, rebind, aggregates}``); aggregates as for ``aggregate``."""
        aggs = _items((), dict(aggregates)) if isinstance(aggregates, Mapping) else \
            _items(tuple(aggregates or ()), {}, allow_empty=True)
        return Iteration(self, _stream(other), _pred(on), _pred(rebind), aggs)

    def publish(self, name: str) -> "Publish":
        return Publish(self, name)

    def to_cel(self) -> str:
        return unparse_cel(self)

    def to_algebra(self) -> str:
        return unparse_algebra(self)

    def streams(self) -> set[str]:
        """The names of the input streams this expression reads."""
        return {n.name for n in self.walk() if isinstance(n, Stream)}


@dataclass(frozen=True, slots=True)
class Stream(StreamExpr):
    name: str

    def __post_init__(self):
        _check_name(self.name, "stream")


@dataclass(frozen=True, slots=True)
class Select(StreamExpr):
    """σθ(input): the events satisfying the predicate (plain attribute names only)."""

    input: StreamExpr
    predicate: Expr

    def __post_init__(self):
        _check_scopes([self.predicate], {Scope.PLAIN}, "FILTER")


@dataclass(frozen=True, slots=True)
class Project(StreamExpr):
    """πX(input) with computed items: each output event has exactly ``items``."""

    input: StreamExpr
    items: tuple[Item, ...]

    def __post_init__(self):
        object.__setattr__(self, "items", tuple(self.items))
        _check_items(self.items, "SELECT")
        _check_scopes([i.expr for i in self.items], {Scope.PLAIN}, "SELECT")


@dataclass(frozen=True, slots=True)
class Aggregate(StreamExpr):
    """αg(input): every attribute of the input plus ``items`` (an item replaces a same-named one)."""

    input: StreamExpr
    items: tuple[Item, ...]

    def __post_init__(self):
        object.__setattr__(self, "items", tuple(self.items))
        _check_items(self.items, "SELECT *,")
        _check_scopes([i.expr for i in self.items], {Scope.PLAIN}, "SELECT")


@dataclass(frozen=True, slots=True)
class Rename(StreamExpr):
    """ρf(input): ``mapping`` is ((old, new), ...)."""

    input: StreamExpr
    mapping: tuple[tuple[str, str], ...]

    def __post_init__(self):
        object.__setattr__(self, "mapping", tuple(tuple(p) for p in self.mapping))
        if not self.mapping:
            raise AnalysisError("RENAME needs at least one pair")
        olds = [o for o, _ in self.mapping]
        news = [n for _, n in self.mapping]
        for n in olds + news:
            _check_name(n, "attribute")
        if len(set(olds)) != len(olds) or len(set(news)) != len(news):
            raise AnalysisError(f"RENAME: an attribute is renamed twice or two to one name: {self.mapping}")


@dataclass(frozen=True, slots=True)
class Union(StreamExpr):
    left: StreamExpr
    right: StreamExpr


@dataclass(frozen=True, slots=True)
class Sequence(StreamExpr):
    """``left ;θ right`` (004 §2.2, DESIGN §4): each left event with the first later right event
    satisfying θ.  θ reads ``$1`` (left), ``$2`` (right) and unqualified names (the left's if it has
    them, else the right's: Cayuga's rule, resolved against schemas); ``None`` is TRUE."""

    left: StreamExpr
    right: StreamExpr
    theta: Expr | None = None

    def __post_init__(self):
        object.__setattr__(self, "theta", _canonical_pred(self.theta))
        _check_scopes([self.theta], {Scope.PLAIN, Scope.LEFT, Scope.RIGHT}, "NEXT")


@dataclass(frozen=True, slots=True)
class Iteration(StreamExpr):
    """``μF,θ(left, right)`` (004 §2.2, DESIGN §4).  θ (``theta``) picks the next event of a chain;
    ``rebind`` (F's selection) decides whether the chain continues; ``aggregates`` (F's α) update
    attributes at each step.  All read ``$1`` (first event), ``$`` (last iteration), ``$2`` (new event)
    and unqualified names (the first event's if it has them, else the new event's: Cayuga's rule).
    ``None`` predicates are TRUE."""

    left: StreamExpr
    right: StreamExpr
    theta: Expr | None = None
    rebind: Expr | None = None
    aggregates: tuple[Item, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "theta", _canonical_pred(self.theta))
        object.__setattr__(self, "rebind", _canonical_pred(self.rebind))
        object.__setattr__(self, "aggregates", tuple(self.aggregates))
        if self.aggregates:
            _check_items(self.aggregates, "FOLD aggregates")


@dataclass(frozen=True, slots=True)
class Publish(StreamExpr):
    """``input PUBLISH name``: the output is also a named stream other queries can read."""

    input: StreamExpr
    name: str

    def __post_init__(self):
        _check_name(self.name, "stream")


# ---------------------------------------------------------------------------------------------------
# Builder functions
# ---------------------------------------------------------------------------------------------------

def stream(name: str) -> Stream:
    return Stream(name)


def attr(name: str) -> Attr:
    """A plain attribute ``name``."""
    return Attr(name, Scope.PLAIN)


def left(name: str) -> Attr:
    """``$1.name``."""
    return Attr(name, Scope.LEFT)


def right(name: str) -> Attr:
    """``$2.name``."""
    return Attr(name, Scope.RIGHT)


def last(name: str) -> Attr:
    """``$.name`` (004 §2.2 ``name.last``)."""
    return Attr(name, Scope.LAST)


def lit(value) -> Const:
    return Const(value)


def neg(x) -> Expr:
    """Unary minus, folded into numeric literals."""
    x = _lit(x)
    if isinstance(x, Const) and _is_number(x.value):
        return Const(-x.value)
    return Neg(x)


def and_(*ps) -> Expr:
    ps = tuple(_lit(p) for p in ps)
    return ps[0] if len(ps) == 1 else And(ps)


def or_(*ps) -> Expr:
    ps = tuple(_lit(p) for p in ps)
    return ps[0] if len(ps) == 1 else Or(ps)


def not_(p) -> Not:
    return Not(_lit(p))


def call(name: str, *args) -> Call:
    return Call(name, tuple(_lit(a) for a in args))


def contains(text, pattern) -> Call:
    """``contains(text, pattern)``: substring match (004 §2.2)."""
    return call("contains", text, pattern)


def dur(op: str, value, unit: str | None = None) -> Dur:
    return Dur(op, value, unit.upper() if unit else None)


def item(expr, name: str | None = None) -> Item:
    """``expr AS name``; a bare attribute (or its name as a string) keeps its name."""
    e = _expr(expr)
    if name is None:
        if not isinstance(e, Attr):
            raise AnalysisError(f"{unparse_expr(e)} needs a name (AS ...)")
        name = e.name
    return Item(e, name)


def _lit(x) -> Expr:
    return x if isinstance(x, Expr) else Const(x)


#: The CEL expression parser (``grammar.events.parse_predicate``), registered by that module when it is
#: imported (the package always imports it): the parser builds these nodes, so this module cannot import it
#: without a cycle.
PREDICATE_PARSER = None


def _expr(x) -> Expr:
    """Builder-method argument: an Expr as it is; a string as CEL expression text (an attribute name such
    as ``Price`` or ``$1.Name`` directly, anything else through the registered parser); any other value as
    a literal."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        m = _SCOPED_NAME.match(x.strip())
        if m is not None:
            return Attr(m.group("name"), Scope(m.group("scope") or ""))
        if PREDICATE_PARSER is None:  # pragma: no cover - sparksub's __init__ imports grammar.events
            raise AnalysisError(f"builder argument {x!r}: import sparksub.grammar.events to parse CEL text")
        return PREDICATE_PARSER(x)
    return Const(x)


def _pred(p) -> Expr | None:
    return None if p is None else _expr(p)


def _stream(s) -> StreamExpr:
    if isinstance(s, StreamExpr):
        return s
    if isinstance(s, str):
        return Stream(s)
    raise AnalysisError(f"not a stream expression: {s!r}")


def _items(items, named, allow_empty: bool = False) -> tuple[Item, ...]:
    out = [x if isinstance(x, Item) else item(x) for x in items]
    out += [item(e, n) for n, e in named.items()]
    if not out and not allow_empty:
        raise AnalysisError("at least one item is needed")
    return tuple(out)


# ---------------------------------------------------------------------------------------------------
# Unparsers
# ---------------------------------------------------------------------------------------------------

# Precedence levels of the grammar (cel.lark / algebra.lark): a child is parenthesised when its level
# is below the level its position requires.
_OR, _AND, _NOT, _CMP, _SUM, _PRODUCT, _SIGNED, _POWER, _PRIMARY = range(1, 10)


def _number_text(v: int | float) -> str:
    return repr(v)


def _render(e: Expr, dialect: str) -> tuple[str, int]:
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, bool):
            return ("TRUE" if v else "FALSE"), _PRIMARY
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'", _PRIMARY
        t = _number_text(v)
        return t, (_SIGNED if t.startswith("-") else _PRIMARY)
    if isinstance(e, Attr):
        return (e.name if e.scope is Scope.PLAIN else f"{e.scope.value}.{e.name}"), _PRIMARY
    if isinstance(e, Call):
        return f"{e.name}({', '.join(_wrap(a, _OR, dialect) for a in e.args)})", _PRIMARY
    if isinstance(e, Neg):
        t = _wrap(e.operand, _SIGNED, dialect)
        if t.startswith("-"):  # never emit `--` (a comment)
            t = f"({t})"
        return "-" + t, _SIGNED
    if isinstance(e, BinOp):
        if e.op == "^":
            return f"{_wrap(e.left, _PRIMARY, dialect)} ^ {_wrap(e.right, _SIGNED, dialect)}", _POWER
        level = _SUM if e.op in "+-" else _PRODUCT
        return f"{_wrap(e.left, level, dialect)} {e.op} {_wrap(e.right, level + 1, dialect)}", level
    if isinstance(e, Compare):
        return f"{_wrap(e.left, _SUM, dialect)} {e.op} {_wrap(e.right, _SUM, dialect)}", _CMP
    if isinstance(e, Param):
        return f":{e.name}", _PRIMARY
    if isinstance(e, Dur):
        value = f":{e.value.name}" if isinstance(e.value, Param) else _number_text(e.value)
        return f"DUR {e.op} {value}" + (f" {e.unit}" if e.unit else ""), _CMP
    if isinstance(e, Not):
        return "NOT " + _wrap(e.operand, _NOT, dialect), _NOT
    if isinstance(e, And):
        return " AND ".join(_wrap(x, _NOT, dialect) for x in e.items), _AND
    if isinstance(e, Or):
        return " OR ".join(_wrap(x, _AND, dialect) for x in e.items), _OR
    raise TypeError(f"not an expression: {e!r}")


def _wrap(e: Expr, level: int, dialect: str) -> str:
    t, p = _render(e, dialect)
    return t if p >= level else f"({t})"


def unparse_expr(e: Expr, dialect: str = "cel") -> str:
    """An expression as text (the same in CEL and the algebra)."""
    return _render(e, dialect)[0]


def _opt(p: Expr | None) -> str:
    return "" if p is None else unparse_expr(p)


def _item_text(it: Item) -> str:
    e = unparse_expr(it.expr)
    if isinstance(it.expr, Attr) and it.expr.name == it.name:
        return e
    return f"{e} AS {it.name}"


def _items_text(items) -> str:
    return ", ".join(_item_text(i) for i in items)


def unparse_cel(q: StreamExpr) -> str:
    """The query as Cayuga Event Language text (``parse_cel`` of it gives ``q`` back)."""
    return _cel_query(q, top=True)


def _cel_query(q: StreamExpr, top: bool = False) -> str:
    if isinstance(q, Publish):  # a Publish directly inside a Publish needs its own parentheses
        inner = (("SELECT * FROM " if top else "") + _cel_unary(q.input)) if isinstance(q.input, Publish) \
            else _cel_query(q.input, top)
        return f"{inner} PUBLISH {q.name}"
    if isinstance(q, Project):
        return f"SELECT {_items_text(q.items)} FROM {_cel_chain(q.input)}"
    if isinstance(q, Aggregate):
        return f"SELECT *, {_items_text(q.items)} FROM {_cel_chain(q.input)}"
    return ("SELECT * FROM " if top else "") + _cel_chain(q)


def _cel_chain(q: StreamExpr) -> str:
    if isinstance(q, Sequence):
        return f"{_cel_chain(q.left)} NEXT{{{_opt(q.theta)}}} {_cel_unary(q.right)}"
    if isinstance(q, Iteration):
        aggs = _items_text(q.aggregates)
        return (f"{_cel_chain(q.left)} FOLD{{{_opt(q.theta)}, {_opt(q.rebind)}, {aggs}}} "
                f"{_cel_unary(q.right)}")
    return _cel_unary(q)


def _cel_unary(q: StreamExpr) -> str:
    if isinstance(q, Stream):
        return q.name
    if isinstance(q, Select):
        return f"FILTER{{{unparse_expr(q.predicate)}}}({_cel_query(q.input)})"
    if isinstance(q, (Rename, Union)):
        raise ValueError(f"{type(q).__name__} has no CEL spelling (the Cayuga Event Language has no "
                         f"{'RENAME' if isinstance(q, Rename) else 'UNION'}); use unparse_algebra")
    return f"({_cel_query(q)})"


def unparse_algebra(q: StreamExpr) -> str:
    """The query in the ASCII algebra (``parse_algebra`` of it gives ``q`` back)."""
    if isinstance(q, Publish):
        return f"{_alg_union(q.input)} PUBLISH {q.name}"
    return _alg_union(q)


def _alg_union(q: StreamExpr) -> str:
    if isinstance(q, Union):
        return f"{_alg_union(q.left)} UNION {_alg_seq(q.right)}"
    return _alg_seq(q)


def _braces_plain(q: StreamExpr) -> None:
    """The algebra reads a plain name inside SEQ / MU as ``$2.name``: an unqualified CEL name (left first)
    has no algebra spelling until it is resolved."""
    exprs = [q.theta] + ([q.rebind] + [i.expr for i in q.aggregates] if isinstance(q, Iteration) else [])
    for e in exprs:
        for a in (attributes_read(e) if e is not None else ()):
            if a.scope is Scope.PLAIN:
                op = "NEXT" if isinstance(q, Sequence) else "FOLD"
                raise ValueError(f"the unqualified attribute {a.name} inside {op}"
                                 f"{{...}} has no algebra spelling (the algebra reads a plain name there as "
                                 f"$2.{a.name}); resolve the query's names first "
                                 f"(grammar.event_analysis.analyse_query) or write $1.{a.name} / $2.{a.name}")


def _alg_seq(q: StreamExpr) -> str:
    if isinstance(q, Sequence):
        _braces_plain(q)
        return f"{_alg_seq(q.left)} SEQ[{_opt(q.theta)}] {_alg_unary(q.right)}"
    return _alg_unary(q)


def _alg_unary(q: StreamExpr) -> str:
    if isinstance(q, Stream):
        return q.name
    if isinstance(q, Select):
        return f"SELECT[{unparse_expr(q.predicate)}]({unparse_algebra(q.input)})"
    if isinstance(q, Project):
        return f"PROJECT[{_items_text(q.items)}]({unparse_algebra(q.input)})"
    if isinstance(q, Aggregate):
        return f"AGG[{_items_text(q.items)}]({unparse_algebra(q.input)})"
    if isinstance(q, Rename):
        pairs = ", ".join(f"{o} -> {n}" for o, n in q.mapping)
        return f"RENAME[{pairs}]({unparse_algebra(q.input)})"
    if isinstance(q, Iteration):
        _braces_plain(q)
        f = " ".join(([f"SELECT[{unparse_expr(q.rebind)}]"] if q.rebind is not None else [])
                     + ([f"AGG[{_items_text(q.aggregates)}]"] if q.aggregates else [])) or "ID"
        return f"MU[{f}; {_opt(q.theta)}]({unparse_algebra(q.left)}, {unparse_algebra(q.right)})"
    return f"({unparse_algebra(q)})"

