"""Parsers for Cayuga event queries: the Cayuga Event Language (``cel.lark``) and the ASCII algebra of
004 §2.2 (``algebra.lark``), both to the AST of ``event_ast`` (DESIGN §4).

Each grammar is built once, at import, as a lark LALR parser.  Errors are ``sparksub.errors.ParseError``
with line, column, the offending line and a caret, and name what was expected:

>>> parse_cel("SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock PUBLISH T5")
Publish(input=Sequence(left=Stream(name='Stock'), right=Stream(name='Stock'), theta=Compare(op='=', left=Attr(name='Name', scope=<Scope.LEFT: '$1'>), right=Attr(name='Name', scope=<Scope.RIGHT: '$2'>))), name='T5')
>>> parse_algebra("Stock SEQ[$1.Name = $2.Name] Stock PUBLISH T5") == parse_cel(
...     "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock PUBLISH T5")
True
>>> try:
...     parse_cel("SELECT * FROM Stock NEXT{$1.Name = } Stock")
... except ParseError as e:
...     print(e)
CEL syntax error: unexpected '}'; expected an expression: '(', '+', '-', FALSE, TRUE, a $1./$2./$. attribute, a name, a number, a string (line 1, column 36)
  SELECT * FROM Stock NEXT{$1.Name = } Stock
                                     ^

Checks beyond the grammar (positioned at the construct): an item without ``AS`` must be an attribute;
``$1``/``$2``/``$`` only inside NEXT/FOLD braces (``$`` only in FOLD); no attribute defined twice.
"""
from __future__ import annotations

from importlib import resources

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError
from lark.lexer import PatternStr

from sparksub.errors import AnalysisError, ParseError
from sparksub.grammar import event_ast as _event_ast
from sparksub.grammar.event_ast import (
    Aggregate, And, Attr, Call, Compare, Const, Dur, Item, Iteration, Not, Or, Param, Project, Publish, Rename,
    Scope, Select, Sequence, Stream, StreamExpr, Union, BinOp, Expr, Neg, _plain_to_right, neg,
)

__all__ = ["parse_cel", "parse_algebra", "parse_event_query", "parse_predicate", "parse_template", "ParseError",
           "CEL_PARSER", "ALGEBRA_PARSER"]


def _load(name: str) -> Lark:
    text = resources.files("sparksub.grammar").joinpath(name).read_text(encoding="utf-8")
    return Lark(text, parser="lalr", start=["query", "pred"], propagate_positions=True,
                maybe_placeholders=True)


CEL_PARSER = _load("cel.lark")
ALGEBRA_PARSER = _load("algebra.lark")

_UNITS = {"YEAR": "YEAR", "MONTH": "MONTH", "WEEK": "WEEK", "DAY": "DAY", "HOUR": "HOUR",
          "MIN": "MIN", "MINUTE": "MIN", "SEC": "SEC", "SECOND": "SEC"}
_COMPARE = {"<>": "!=", "==": "="}


def _unit(tok: str | None) -> str | None:
    if tok is None:
        return None
    u = str(tok).upper()
    return _UNITS.get(u, _UNITS.get(u[:-1]))  # plural


class _Fail(Exception):
    """A check failed at a node: carries the message and the lark meta (or token) position."""

    def __init__(self, message: str, where):
        super().__init__(message)
        self.message, self.where = message, where


def _pos(meta) -> tuple[int, int] | None:
    """(line, column) of a parse-tree node or token, for the positioned errors of ``event_analysis``."""
    line = getattr(meta, "line", None)
    return None if line is None or getattr(meta, "empty", False) else (line, meta.column)


def _at(where, fn, *args):
    """``fn(*args)``, turning an AnalysisError from a node's checks into a positioned failure."""
    try:
        return fn(*args)
    except AnalysisError as e:
        raise _Fail(str(e), where) from None


@v_args(meta=True)
class _ExprBuilder(Transformer):
    """Parse tree → AST for the expression part both grammars share."""

    def or_(self, meta, c):
        return Or((c[0], c[1]))

    def and_(self, meta, c):
        return And((c[0], c[1]))

    def not_(self, meta, c):
        return Not(c[0])

    def compare(self, meta, c):
        op = str(c[1])
        return Compare(_COMPARE.get(op, op), c[0], c[2], pos=_pos(c[1]))

    def like(self, meta, c):
        return Compare("LIKE", c[0], c[1], pos=_pos(meta))

    def dur(self, meta, c):
        op = str(c[0])
        value = self.param(meta, [c[1]]) if c[1].type == "PARAM" else _number(c[1])
        return _at(meta, Dur, _COMPARE.get(op, op), value, _unit(c[2]), _pos(meta))

    def param(self, meta, c):
        return Param(str(c[0])[1:], pos=_pos(c[0]))

    def binop(self, meta, c):
        return BinOp(str(c[1]), c[0], c[2], pos=_pos(c[1]))

    def neg(self, meta, c):
        x = neg(c[1])
        return Neg(x.operand, pos=_pos(meta)) if isinstance(x, Neg) else x

    def pos(self, meta, c):
        return c[1]

    def number(self, meta, c):
        return Const(_number(c[0]), pos=_pos(c[0]))

    def string(self, meta, c):
        return Const(str(c[0])[1:-1].replace("''", "'"), pos=_pos(c[0]))

    def true(self, meta, c):
        return Const(True, pos=_pos(meta))

    def false(self, meta, c):
        return Const(False, pos=_pos(meta))

    def plain_attr(self, meta, c):
        return Attr(str(c[0]), Scope.PLAIN, pos=_pos(c[0]))

    def scoped_attr(self, meta, c):
        prefix, name = str(c[0]).split(".", 1)
        return Attr(name, Scope(prefix), pos=_pos(c[0]))

    def last_attr(self, meta, c):
        return Attr(str(c[0]), Scope.LAST, pos=_pos(c[0]))

    def call(self, meta, c):
        args = tuple(a for a in c[1:] if a is not None)
        return Call(str(c[0]), args, pos=_pos(c[0]))

    # ---- shared stream pieces ----
    def select_item(self, meta, c):
        e, name = c
        if name is None:
            if not isinstance(e, Attr):
                raise _Fail("this expression needs a name: write `<expr> AS name`", meta)
            name = e.name
        return Item(e, str(name))

    def publish_clause(self, meta, c):
        return str(c[0])

    def stream(self, meta, c):
        return Stream(str(c[0]))


def _number(tok) -> int | float:
    s = str(tok)
    return float(s) if any(ch in s for ch in ".eE") else int(s)


def _publish(q: StreamExpr, name):
    return q if name is None else Publish(q, name)


@v_args(meta=True)
class _CelBuilder(_ExprBuilder):
    """Parse tree → AST for cel.lark."""

    def query(self, meta, c):
        select, q, publish = c
        if select is not None:
            kind, items, where = select
            if items:
                q = _at(where, Aggregate if kind == "star" else Project, q, tuple(items))
        return _publish(q, publish)

    def select_clause(self, meta, c):
        return c[0]

    def select_star(self, meta, c):
        return ("star", c[1:], meta)

    def select_items(self, meta, c):
        return ("items", c, meta)

    def next(self, meta, c):
        left, kw, theta, right = c
        return _at(kw, Sequence, left, right, theta)

    def fold(self, meta, c):
        left, kw, theta, rebind, aggs, right = c
        return _at(kw, Iteration, left, right, theta, rebind, tuple(aggs or ()))

    def agg_list(self, meta, c):
        return list(c)

    def unary(self, meta, c):
        *filters, q = c
        for kw, pred in reversed(filters):   # FILTER{a} FILTER{b} S = σa(σb(S))
            q = _at(kw, Select, q, pred)
        return q

    def filter_prefix(self, meta, c):
        return (c[0], c[1])


@v_args(meta=True)
class _AlgebraBuilder(_ExprBuilder):
    """Parse tree → AST for algebra.lark."""

    def query(self, meta, c):
        return _publish(c[0], c[1])

    def union(self, meta, c):
        return Union(c[0], c[2])

    # Inside SEQ[…] / MU[…] a plain name is the new event's (004 §2.2: μ's F compares ``price`` with
    # ``price.last``), unlike CEL's unqualified names (the left input's first): stored as ``$2.name``.
    def seq_infix(self, meta, c):
        left, kw, theta, right = c
        return _at(kw, Sequence, left, right, _plain_to_right(theta))

    def seq_prefix(self, meta, c):
        kw, theta, left, right = c
        return _at(kw, Sequence, left, right, _plain_to_right(theta))

    def select(self, meta, c):
        return _at(c[0], Select, c[2], c[1])

    def project(self, meta, c):
        return _at(c[0], Project, c[2], tuple(c[1]))

    def aggregate(self, meta, c):
        return _at(c[0], Aggregate, c[2], tuple(c[1]))

    def rename(self, meta, c):
        return _at(c[0], Rename, c[-1], tuple(c[1:-1]))

    def rename_pair(self, meta, c):
        return (str(c[0]), str(c[1]))

    def item_list(self, meta, c):
        return list(c)

    def mu(self, meta, c):
        kw, (rebind, aggs), theta, left, right = c
        return _at(kw, Iteration, left, right, _plain_to_right(theta), _plain_to_right(rebind),
                   tuple(_plain_to_right(i) for i in aggs))

    def f_identity(self, meta, c):
        return (None, ())

    def f_predicate(self, meta, c):
        return (c[0], ())

    def f_select(self, meta, c):
        return ("select", c[1], c[0])

    def f_agg(self, meta, c):
        return ("agg", c[1], c[0])

    def f_parts(self, meta, c):
        rebind, aggs, seen = None, (), set()
        for kind, value, kw in c:
            if kind in seen:
                raise _Fail(f"F has two {'SELECT' if kind == 'select' else 'AGG'} parts; "
                            f"combine them into one", kw)
            seen.add(kind)
            if kind == "select":
                rebind = value
            else:
                aggs = tuple(value)
        return (rebind, aggs)


_CEL_BUILDER = _CelBuilder()
_ALGEBRA_BUILDER = _AlgebraBuilder()

# Readable names for the regexp terminals in "expected ..." lists.
_TERMINAL_NAMES = {
    "NAME": "a name", "NUMBER": "a number", "STRING": "a string", "SCOPED_ATTR": "a $1./$2./$. attribute",
    "COMP_OP": "a comparison (= != < <= > >=)", "UNIT": "a unit (YEAR MONTH WEEK DAY HOUR MIN SEC)",
    "UNION": "UNION", "SEQ": "SEQ", "SELECT": "SELECT", "PROJECT": "PROJECT", "RENAME": "RENAME",
    "AGG": "AGG", "MU": "MU", "$END": "end of input",
}
_EXPR_START = {"LPAR", "MINUS", "PLUS", "NUMBER", "STRING", "TRUE", "FALSE", "NAME", "SCOPED_ATTR"}


def _terminal_name(parser: Lark, name: str) -> str:
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    try:
        pattern = parser.get_terminal(name).pattern
    except KeyError:
        return name
    if isinstance(pattern, PatternStr):
        v = pattern.value
        return v.upper() if v.isalpha() else repr(v)
    return name


def _expected(parser: Lark, names) -> str:
    names = set(names) - {"PARAM"}           # a template's :name (parse_template): not offered to queries
    prefix = ""
    if _EXPR_START <= names | {"TRUE", "FALSE"} and "NAME" in names and "NUMBER" in names:
        prefix = "an expression: "
    shown = sorted({_terminal_name(parser, n) for n in names})
    return prefix + ", ".join(shown)


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _parse(parser: Lark, builder: Transformer, text: str, start: str, what: str, params: bool = False):
    if not isinstance(text, str):
        raise TypeError(f"expected query text, got {type(text).__name__}")
    try:
        tree = parser.parse(text, start=start)
    except UnexpectedToken as e:
        tok: Token = e.token
        if tok.type == "$END":
            line, col = _end_position(text)
            found = "end of input"
        else:
            line, col = tok.line, tok.column
            found = repr(str(tok))
        raise ParseError(f"{what} syntax error: unexpected {found}; expected {_expected(parser, e.expected)}",
                         text, line, col) from None
    except UnexpectedCharacters as e:
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        allowed = _expected(parser, e.allowed) if e.allowed else "something else"
        raise ParseError(f"{what} syntax error: unexpected character {ch!r}; expected {allowed}",
                         text, e.line, e.column) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark errors
        raise ParseError(f"{what} syntax error: {e}", text, getattr(e, "line", 1) or 1,
                         getattr(e, "column", 1) or 1) from None
    try:
        out = builder.transform(tree)
    except VisitError as e:
        err = e.orig_exc
        if isinstance(err, _Fail):
            w = err.where
            line = getattr(w, "line", None) or 1
            col = getattr(w, "column", None) or 1
            raise ParseError(f"{what} error: {err.message}", text, line, col) from None
        raise err from None
    if not params and ":" in text:
        found = [n for n in out.walk() if isinstance(n, Param)]
        if found:                               # the first in the text
            n = min(found, key=lambda p: p.pos or (1, 1))
            line, col = n.pos or (1, 1)
            raise ParseError(f"{what} error: parameter :{n.name} outside a template (a query with :name "
                             f"parameters is a template: bind it to a table of values with "
                             f"register_event_queries(template, params))", text, line, col)
    return out


def parse_cel(text: str) -> StreamExpr:
    """A Cayuga Event Language query → AST."""
    return _parse(CEL_PARSER, _CEL_BUILDER, text, "query", "CEL")


def parse_algebra(text: str) -> StreamExpr:
    """An ASCII (or Greek) algebra expression of 004 §2.2 → AST."""
    return _parse(ALGEBRA_PARSER, _ALGEBRA_BUILDER, text, "query", "algebra")


def parse_template(text: str) -> StreamExpr:
    """A query *template*: CEL (or algebra) text whose constants may be parameters ``:name`` -- in any
    constant's place (``Price > :p``, ``Name = :sym``, ``:r * Price_1``) and as a DUR bound (``DUR >= :d
    MIN``) -- parsed once to an AST with ``Param`` nodes; ``operators/events/bulk.bind_event_template``
    substitutes each row of a parameter table into it (``Engine.register_event_queries``).  The other
    parsers refuse parameters.

    >>> parse_template("SELECT * FROM FILTER{Name = :sym AND Price > :p}(Stock)").to_cel()
    'SELECT * FROM FILTER{Name = :sym AND Price > :p}(Stock)'
    """
    try:
        return _parse(CEL_PARSER, _CEL_BUILDER, text, "query", "CEL", params=True)
    except ParseError as cel_error:
        try:
            return _parse(ALGEBRA_PARSER, _ALGEBRA_BUILDER, text, "query", "algebra", params=True)
        except ParseError as algebra_error:
            raise max((cel_error, algebra_error), key=lambda e: (e.line, e.column)) from None


def parse_predicate(text: str, syntax: str = "cel") -> Expr:
    """A predicate or expression alone (the builder's string arguments)."""
    if syntax == "cel":
        return _parse(CEL_PARSER, _CEL_BUILDER, text, "pred", "CEL")
    return _parse(ALGEBRA_PARSER, _ALGEBRA_BUILDER, text, "pred", "algebra")


def parse_event_query(text: str) -> StreamExpr:
    """CEL or algebra, whichever parses (``CREATE EVENT QUERY name AS <text>``, DESIGN §1).  If neither
    does, the error of the parse that got further is raised."""
    try:
        return parse_cel(text)
    except ParseError as cel_error:
        try:
            return parse_algebra(text)
        except ParseError as algebra_error:
            raise max((cel_error, algebra_error), key=lambda e: (e.line, e.column)) from None


# The builder's string arguments are CEL text (event_ast._expr); the AST module cannot import this one.
_event_ast.PREDICATE_PARSER = parse_predicate
