"""Event queries checked against the declared stream schemas before anything runs (issue 15 items 2–3,
DESIGN §4 and §7): unqualified names resolved as Cayuga does, every attribute checked to exist, every
predicate, arithmetic expression, function call and SELECT item type-checked.  Pure (no Spark); the one
function every registration path calls (``Engine.register_event_query``, ``NFAEngine.register``,
``FamilyEngine.register``, ``compile_query`` with schemas), so the executors only ever see resolved,
well-typed queries.

**Name resolution** (Cayuga's CEL compiler).  Inside ``NEXT{θ}`` an unqualified ``x`` is the left input's
(``$1.x``); inside ``FOLD{θ, F, aggregates}`` it is the chain's first event's (``$1.x`` too).  When the
left input has no ``x`` but the right input (the new event) does, it is ``$2.x``; when neither has it, the
query is refused (``AnalysisError`` naming the attribute, where it is — line and column when the query
came as text — and what each side has).  The algebra's ``SEQ[θ]`` / ``MU[F; θ]`` read a plain name as
the new event's (004 §2.2: ``price ≥ price.last``); its parser stores ``$2.x``, which this check then
requires the right input to have.  An unknown attribute anywhere else — a ``FILTER{}`` / ``SELECT[]``
predicate, a SELECT list, ``$1.x`` / ``$2.x`` / ``$.x``, a RENAME — is refused the same way.  Without a
schema for a stream (``schemas`` None, or a stream it does not list) its attributes are not checked, and an
unqualified name that needs that schema to be resolved is refused ("write $1.x or $2.x").

**Types.**  A declared type is one of the kinds NUMBER (integers, floating point, decimals), STRING,
BOOLEAN, or another type's own name (``timestamp``, ``date`` …: comparable only with itself); an
attribute without a declared type (a schema given as names only) is of unknown kind and passes every
check.  Rules (Spark SQL's, without implicit casts): arithmetic (``+ - * / % ^``, unary minus) needs
numbers; comparisons need two values of one kind (a number with a string, or with a boolean, is refused —
also for ``=``); ``LIKE`` needs strings (a constant pattern must be valid: ``grammar/sql_like``); AND /
OR / NOT and every predicate position (FILTER, θ, F's selection) need booleans; the built-in functions
have fixed signatures (``FUNCTION_TYPES``); functions registered by the caller are not checked.  An
attribute that may hold values of different kinds (a UNION of streams that type it differently, or a
FOLD's ``$.x`` that the first event, the new event and an aggregate type differently) is refused where a
kind is required.

What remains possible at run time: a numeric overflow (``10.0 ^ 400``), an invalid LIKE pattern read from
an event, a caller's function raising, and anything on streams without declared types; the executors
charge such an error to the query that raised it (``operators/event_values``).

>>> from sparksub.grammar.events import parse_cel
>>> stock = {"Stock": {"Name": "string", "Price": "double"}, "Pair": {"IBMPrice": "double"}}
>>> analyse_query(parse_cel("SELECT * FROM Pair NEXT{IBMPrice < $2.Price} Stock"), stock).query.to_cel()
'SELECT * FROM Pair NEXT{$1.IBMPrice < $2.Price} Stock'
>>> text = "SELECT * FROM FILTER{Name > 20}(Stock)"
>>> try:
...     analyse_query(parse_cel(text), stock, name="e", text=text)
... except AnalysisError as err:
...     print(err)
event query 'e': cannot compare Name (a string) with 20 (a number) in FILTER{Name > 20} (line 1, column 27)
  SELECT * FROM FILTER{Name > 20}(Stock)
                            ^
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from sparksub.errors import AnalysisError
from sparksub.grammar.event_ast import (
    Aggregate, And, Attr, BinOp, Call, Compare, Const, Dur, Expr, Item, Iteration, Neg, Not, Or, Project,
    Publish, Rename, Scope, Select, Sequence, Stream, StreamExpr, Union, unparse_expr,
)
from sparksub.grammar.sql_like import like_pattern_problem

__all__ = ["NUMBER", "STRING", "BOOLEAN", "MIXED", "FUNCTION_TYPES", "AnalysedQuery", "analyse_query",
           "kind_of_type", "combine_attributes"]

NUMBER, STRING, BOOLEAN = "number", "string", "boolean"
#: The kind of an attribute whose values may be of different kinds.
MIXED = "mixed"
#: Built-in functions: (argument kinds, result kind).  ``operators/event_values.FUNCTIONS`` runs them.
FUNCTION_TYPES = {"contains": ((STRING, STRING), BOOLEAN), "lower": ((STRING,), STRING),
                  "upper": ((STRING,), STRING), "length": ((STRING,), NUMBER), "abs": ((NUMBER,), NUMBER)}

_NUMERIC_WORDS = ("int", "long", "short", "byte", "double", "float", "decimal", "number", "halffloat")


def kind_of_type(t: Any) -> str | None:
    """The kind of a declared type: a pyarrow type, a Spark / SQL type name, a Python type or a kind; None
    for an unknown (or NULL) type."""
    if t is None:
        return None
    if isinstance(t, type):
        if issubclass(t, bool):
            return BOOLEAN
        if issubclass(t, (int, float)):
            return NUMBER
        return STRING if issubclass(t, str) else t.__name__
    s = str(t).strip().lower()
    if s in (NUMBER, STRING, BOOLEAN, MIXED):
        return s
    if s in ("", "null", "void", "none", "na"):
        return None
    if s.startswith("bool"):
        return BOOLEAN
    if s in ("string", "large_string", "utf8", "large_utf8", "str", "text") or s.startswith(("varchar", "char")):
        return STRING
    if any(w in s for w in _NUMERIC_WORDS) and not s.startswith(("timestamp", "date", "time", "interval")):
        return NUMBER
    return s.split("[", 1)[0].split("(", 1)[0]


def _kind_text(k) -> str:
    return {None: "of unknown type", MIXED: "a number or a string (it differs by event)",
            NUMBER: "a number", STRING: "a string", BOOLEAN: "a boolean"}.get(k, f"a {k}")


def _unify(*kinds):
    """The kind of a value that is one of ``kinds`` (None — unknown — absorbs; two kinds give MIXED)."""
    out = _UNSET
    for k in kinds:
        if k is _UNSET:
            continue
        if k is None or out is None:
            out = None
        elif out is _UNSET:
            out = k
        elif out != k:
            out = MIXED
    return None if out is _UNSET else out


_UNSET = object()            # an aggregate not typed yet (FOLD's fixpoint)


def combine_attributes(left: Mapping, right: Mapping) -> dict:
    """The attributes of ``e1 ⊗ e2`` (004 §2.3's renaming function, as the Cayuga system names them):
    the right event's keep their names; a left attribute the right also has gets ``_1`` appended, and so,
    recursively, does a left attribute named like the new name; left attributes come first.

    >>> combine_attributes({"Name": "IBM", "Price": 90}, {"Name": "IBM", "Price": 95})
    {'Name_1': 'IBM', 'Price_1': 90, 'Name': 'IBM', 'Price': 95}
    """
    moved = {a for a in left if a in right}
    frontier = list(moved)
    while frontier:                      # x moved to x_1, so a left x_1 moves on to x_1_1, ...
        nxt = frontier.pop() + "_1"
        if nxt in left and nxt not in moved:
            moved.add(nxt)
            frontier.append(nxt)
    taken = set(right) | {a for a in left if a not in moved}
    out = {}
    for a, v in left.items():
        if a in moved:
            n = a + "_1"
            while n in taken:            # only when the right event itself has names like x_1
                n += "_1"
            taken.add(n)
        else:
            n = a
        out[n] = v
    out.update(right)
    return out


@dataclass(frozen=True)
class AnalysedQuery:
    """A checked query: ``query`` with every unqualified name inside NEXT / FOLD braces resolved to
    ``$1`` / ``$2``; its output ``attributes`` (name -> kind, or None when an input's schema is unknown);
    the streams it PUBLISHes with theirs."""

    query: StreamExpr
    attributes: dict | None
    published: dict = field(default_factory=dict)


def analyse_query(query: StreamExpr, schemas: Mapping[str, Any] | None, *, name: str = "query",
                  text: str | None = None, functions: Iterable[str] | None = None) -> AnalysedQuery:
    """Resolve and check ``query`` (see the module docstring) against ``schemas``: stream name -> its
    attributes, as a mapping attribute -> declared type (``kind_of_type``) or an iterable of names (kinds
    unknown); None: no schema is known.  ``functions``: the names of the caller's own functions, besides
    the built-ins.  ``text`` (the query as written) makes the errors show the line with a caret.  Raises
    ``AnalysisError``; returns the ``AnalysedQuery``."""
    return _Analyser(schemas, name, text, functions).run(query)


class _Ctx:
    """Where an expression is evaluated: one event (``plain``) or a NEXT / FOLD step (``left``, ``right``,
    ``last``).  A schema is a dict name -> kind, or None when unknown.  ``where`` names the construct (for
    messages: computed only when one is needed)."""

    __slots__ = ("pair", "plain", "left", "right", "last", "_where")

    def __init__(self, where, plain=None, pair=False, left=None, right=None, last=None):
        self._where, self.plain, self.pair, self.left, self.right, self.last = where, plain, pair, left, right, last

    @property
    def where(self) -> str:
        return self._where() if callable(self._where) else self._where


def _same(new: tuple, old: tuple) -> bool:
    """Whether a rebuilt node's parts are the very objects it had (then the node itself is kept: nothing
    was resolved below it, and rebuilding would rerun its checks)."""
    return len(new) == len(old) and all(a is b for a, b in zip(new, old))


class _Analyser:
    def __init__(self, schemas, name, text, functions):
        self.schemas = None if schemas is None else {s: self._schema(v) for s, v in schemas.items()}
        self.name, self.text = name, text
        self.functions = {f.lower() for f in functions or ()}
        self.published: dict[str, dict | None] = {}

    @staticmethod
    def _schema(v) -> dict | None:
        if v is None:
            return None
        if isinstance(v, Mapping):
            return {str(a): kind_of_type(t) for a, t in v.items()}
        return {str(a): None for a in v}

    # ---- errors ------------------------------------------------------------------------------------
    def fail(self, message: str, node) -> AnalysisError:
        """The error, at the node's (line, column) in the query's text when it came as text."""
        line, column = _position(node) or (None, None)
        return AnalysisError(f"event query {self.name!r}: {message}", self.text, line, column)

    # ---- streams -----------------------------------------------------------------------------------
    def run(self, query: StreamExpr) -> AnalysedQuery:
        resolved, attrs = self.stream(query)
        return AnalysedQuery(resolved, attrs, dict(self.published))

    def stream(self, q: StreamExpr):
        """(q with its names resolved, its output schema)."""
        if isinstance(q, Stream):
            if q.name in self.published:
                return q, self.published[q.name]
            if self.schemas is None:
                return q, None
            return q, self.schemas.get(q.name)
        if isinstance(q, Publish):
            inner, attrs = self.stream(q.input)
            self.published[q.name] = attrs
            return (q if inner is q.input else Publish(inner, q.name)), attrs
        if isinstance(q, Select):
            inner, attrs = self.stream(q.input)
            ctx = _Ctx(lambda: f"FILTER{{{unparse_expr(q.predicate)}}}", plain=attrs)
            pred = self.predicate(q.predicate, ctx)
            return (q if _same((inner, pred), (q.input, q.predicate)) else Select(inner, pred)), attrs
        if isinstance(q, (Project, Aggregate)):
            inner, attrs = self.stream(q.input)
            what = "SELECT" if isinstance(q, Project) else "SELECT *,"
            items, kinds = [], {}
            for it in q.items:
                def shown(it=it):
                    text = unparse_expr(it.expr) + ("" if it.expr == Attr(it.name) else f" AS {it.name}")
                    return f"the SELECT list ({what} {text})"
                e, k = self.expr(it.expr, _Ctx(shown, plain=attrs))
                items.append(it if e is it.expr else Item(e, it.name))
                kinds[it.name] = k
            out = q if _same((inner, *items), (q.input, *q.items)) else type(q)(inner, tuple(items))
            return out, (kinds if isinstance(q, Project) else None if attrs is None else {**attrs, **kinds})
        if isinstance(q, Rename):
            inner, attrs = self.stream(q.input)
            if attrs is None:
                return (q if inner is q.input else Rename(inner, q.mapping)), None
            mapping = dict(q.mapping)
            for old, new in q.mapping:
                if old not in attrs:
                    raise self.fail(f"RENAME[{old} -> {new}]: unknown attribute {old}; the input has "
                                    f"{_names(attrs)}", None)
            out = {}
            for a, k in attrs.items():
                n = mapping.get(a, a)
                if n in out:
                    raise self.fail(f"RENAME: two attributes named {n!r} after renaming ({_names(attrs)})", None)
                out[n] = k
            return (q if inner is q.input else Rename(inner, q.mapping)), out
        if isinstance(q, Union):
            left, la = self.stream(q.left)
            right, ra = self.stream(q.right)
            out = q if _same((left, right), (q.left, q.right)) else Union(left, right)
            if la is None or ra is None:
                return out, None
            return out, {a: _unify(la.get(a, _UNSET), ra.get(a, _UNSET)) for a in {**la, **ra}}
        if isinstance(q, Sequence):
            left, la = self.stream(q.left)
            right, ra = self.stream(q.right)
            theta = None
            if q.theta is not None:
                ctx = _Ctx(lambda: f"NEXT{{{unparse_expr(q.theta)}}}", pair=True, left=la, right=ra)
                theta = self.predicate(q.theta, ctx)
            out = None if la is None or ra is None else combine_attributes(la, ra)
            same = _same((left, right, theta), (q.left, q.right, q.theta))
            return (q if same else Sequence(left, right, theta)), out
        if isinstance(q, Iteration):
            return self.iteration(q)
        raise TypeError(f"not a stream expression: {q!r}")

    def iteration(self, q: Iteration):
        left, la = self.stream(q.left)
        right, ra = self.stream(q.right)
        def where():
            return "FOLD{" + ", ".join(["" if q.theta is None else unparse_expr(q.theta),
                                        "" if q.rebind is None else unparse_expr(q.rebind)]
                                       + [f"{unparse_expr(i.expr)} AS {i.name}" for i in q.aggregates]) + "}"
        aggs: dict = {i.name: _UNSET for i in q.aggregates}
        items = list(q.aggregates)
        for _ in range(3):               # $.x may read an aggregate: type them until they settle
            last = self._last(la, ra, aggs)
            ctx = _Ctx(where, pair=True, left=la, right=ra, last=last)
            new, items = {}, []
            for it in q.aggregates:
                e, k = self.expr(it.expr, ctx)
                items.append(it if e is it.expr else Item(e, it.name))
                new[it.name] = k
            if new == aggs:
                break
            aggs = new
        ctx = _Ctx(where, pair=True, left=la, right=ra, last=self._last(la, ra, aggs))
        theta = None if q.theta is None else self.predicate(q.theta, ctx)
        rebind = None if q.rebind is None else self.predicate(q.rebind, ctx)
        out = None
        if la is not None and ra is not None:
            out = {**combine_attributes(la, ra), **{a: (None if k is _UNSET else k) for a, k in aggs.items()}}
        if _same((left, right, theta, rebind, *items), (q.left, q.right, q.theta, q.rebind, *q.aggregates)):
            return q, out
        return Iteration(left, right, theta, rebind, tuple(items)), out

    @staticmethod
    def _last(la, ra, aggs) -> dict | None:
        """``$``: the first event's attributes, updated by each step with the new event's and the
        aggregates (004 §2.2 ``.last``)."""
        if la is None or ra is None:
            return None
        names = dict.fromkeys([*la, *ra, *aggs])
        return {a: _unify(la.get(a, _UNSET), ra.get(a, _UNSET), aggs.get(a, _UNSET)) for a in names}

    # ---- expressions -------------------------------------------------------------------------------
    def predicate(self, p: Expr, ctx: _Ctx) -> Expr:
        e, k = self.expr(p, ctx)
        if k not in (BOOLEAN, None):
            raise self.fail(f"{unparse_expr(p)} is not a predicate ({_kind_text(k)}) in {ctx.where}", p)
        return e

    def boolean(self, e: Expr, ctx: _Ctx, what: str) -> Expr:
        out, k = self.expr(e, ctx)
        if k not in (BOOLEAN, None):
            raise self.fail(f"{what} needs a predicate, but {unparse_expr(e)} is {_kind_text(k)}, in {ctx.where}", e)
        return out

    def attr(self, a: Attr, ctx: _Ctx):
        if not ctx.pair:
            return a, self.lookup(a, ctx.plain, a.name, ctx, "the event")
        if a.scope is Scope.PLAIN:
            a = self.resolve(a, ctx)
        if a.scope is Scope.LEFT:
            return a, self.lookup(a, ctx.left, f"$1.{a.name}", ctx, "the left input")
        if a.scope is Scope.RIGHT:
            return a, self.lookup(a, ctx.right, f"$2.{a.name}", ctx, "the right input")
        return a, self.lookup(a, ctx.last, f"$.{a.name}", ctx, "$ (the last step: the first event, the new "
                                                                "events and the aggregates)")

    def lookup(self, a: Attr, schema, ref: str, ctx: _Ctx, side: str):
        if schema is None:
            return None
        if a.name not in schema:
            raise self.fail(f"unknown attribute {ref} in {ctx.where}: {side} has {_names(schema)}", a)
        return schema[a.name]

    def resolve(self, a: Attr, ctx: _Ctx) -> Attr:
        """Cayuga's rule for an unqualified name inside NEXT / FOLD braces: the left input's (a FOLD's
        first event), else the right input's."""
        left, right, n = ctx.left, ctx.right, a.name
        if left is not None and n in left:
            return Attr(n, Scope.LEFT, pos=a.pos)
        if left is None and (right is None or n in right):
            raise self.fail(f"cannot resolve the unqualified attribute {n} in {ctx.where}: the left input's "
                            f"schema is unknown (Cayuga reads {n} as $1.{n} when the left input has it, else "
                            f"$2.{n}); declare the stream's schema or write $1.{n} / $2.{n}", a)
        if left is None:                   # the right input has no such attribute: only the left can
            return Attr(n, Scope.LEFT, pos=a.pos)
        if right is None or n in right:
            return Attr(n, Scope.RIGHT, pos=a.pos)
        raise self.fail(f"unknown attribute {n} in {ctx.where}: neither the left input ({_names(left)}) nor "
                        f"the right input ({_names(right)}) has it", a)

    def expr(self, e: Expr, ctx: _Ctx):
        """(e with its names resolved, its kind)."""
        if isinstance(e, Const):
            v = e.value
            return e, (BOOLEAN if isinstance(v, bool) else STRING if isinstance(v, str) else NUMBER)
        if isinstance(e, Attr):
            return self.attr(e, ctx)
        if isinstance(e, Dur):
            return e, BOOLEAN
        if isinstance(e, Neg):
            x, k = self.expr(e.operand, ctx)
            self.need(NUMBER, k, e.operand, ctx, "unary minus")
            return (e if x is e.operand else Neg(x, pos=e.pos)), NUMBER
        if isinstance(e, BinOp):
            (a, ka), (b, kb) = self.expr(e.left, ctx), self.expr(e.right, ctx)
            for side, k in ((e.left, ka), (e.right, kb)):
                if k not in (NUMBER, None):
                    raise self.fail(f"arithmetic {e.op!r} needs numbers, but {unparse_expr(side)} is "
                                    f"{_kind_text(k)}, in {ctx.where}", side if _position(side) else e)
            return (e if _same((a, b), (e.left, e.right)) else BinOp(e.op, a, b, pos=e.pos)), NUMBER
        if isinstance(e, Compare):
            (a, ka), (b, kb) = self.expr(e.left, ctx), self.expr(e.right, ctx)
            if e.op == "LIKE":
                for side, k in ((e.left, ka), (e.right, kb)):
                    self.need(STRING, k, side, ctx, "LIKE")
                if isinstance(b, Const) and isinstance(b.value, str):
                    problem = like_pattern_problem(b.value)
                    if problem:
                        raise self.fail(f"{problem}, in {ctx.where}", e.right)
            elif ka is not None and kb is not None and (ka != kb or MIXED in (ka, kb)):
                raise self.fail(f"cannot compare {unparse_expr(e.left)} ({_kind_text(ka)}) with "
                                f"{unparse_expr(e.right)} ({_kind_text(kb)}) in {ctx.where}", e)
            return (e if _same((a, b), (e.left, e.right)) else Compare(e.op, a, b, pos=e.pos)), BOOLEAN
        if isinstance(e, Not):
            x = self.boolean(e.operand, ctx, "NOT")
            return (e if x is e.operand else Not(x)), BOOLEAN
        if isinstance(e, (And, Or)):
            word = "AND" if isinstance(e, And) else "OR"
            items = tuple(self.boolean(x, ctx, word) for x in e.items)
            return (e if _same(items, e.items) else type(e)(items)), BOOLEAN
        if isinstance(e, Call):
            args = [self.expr(x, ctx) for x in e.args]
            new = tuple(x for x, _ in args)
            out = e if _same(new, e.args) else Call(e.name, new, pos=e.pos)
            low = e.name.lower()
            if low in self.functions or e.name in self.functions:
                return out, None                   # the caller's own function: not typed
            sig = FUNCTION_TYPES.get(low)
            if sig is None:
                raise self.fail(f"unknown function {e.name}() in {ctx.where}; known: "
                                f"{', '.join(sorted(set(FUNCTION_TYPES) | self.functions))}", e)
            params, result = sig
            if len(args) != len(params):
                raise self.fail(f"{e.name}() takes {len(params)} argument(s), got {len(args)}, in {ctx.where}", e)
            for x, (_, k), want in zip(e.args, args, params):
                self.need(want, k, x, ctx, f"{e.name}()")
            return out, result
        raise TypeError(f"not an expression: {e!r}")

    def need(self, want: str, k, node: Expr, ctx: _Ctx, what: str) -> None:
        if k is not None and k != want:
            raise self.fail(f"{what} needs {_kind_text(want)}, but {unparse_expr(node)} is {_kind_text(k)}, "
                            f"in {ctx.where}", node)


def _names(schema: Mapping) -> str:
    names = list(schema)
    return ", ".join(names[:20]) + (", …" if len(names) > 20 else "") if names else "no attributes"


def _position(node) -> tuple[int, int] | None:
    """The (line, column) of ``node`` or, for nodes without one (AND, OR, NOT), of the first node below."""
    if node is None:
        return None
    for n in node.walk():
        pos = getattr(n, "pos", None)
        if pos is not None:
            return pos
    return None
