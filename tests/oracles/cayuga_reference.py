"""Reference interpreter for Cayuga event queries: the oracle the automaton engine is tested against.

Evaluates the AST of ``sparksub.grammar.event_ast`` directly, operator by operator, over finite lists of
events, written for clarity, not speed (quadratic and worse).  Pure Python; no Spark.  Sources: 004
§2.1–2.2 (data model, operators), DESIGN §4 (the semantics we implement — read it first).

Events.  An input event is a mapping of attribute values plus optional integer ``t0``/``t1`` (its
interval, ``t0 <= t1``); an event without them is the n-th event of its list (0-based) and gets
``t0 = t1 = n`` (DESIGN §1).  Every stream is processed in order of ``t1`` (004 §2.1); events with equal
``t1`` keep their list order.  Output events are dicts of attributes plus ``t0`` and ``t1``.
``DUR = t1 - t0 + 1`` ticks; ``DUR op v UNIT`` compares with ``v * UNIT_SECONDS[UNIT] /
seconds_per_tick`` ticks (``seconds_per_tick`` defaults to 1: a tick is a second).

Operators (each evaluated on the full output of its inputs):

- ``Select`` / ``Project`` / ``Aggregate`` / ``Rename``: per event, timestamps kept (004 §2.2).
  ``Aggregate`` adds or replaces attributes.  ``Union``: both inputs merged by ``t1`` (a bag).
- ``Sequence(S1, S2, θ)`` (``;θ``, CEL ``NEXT``): for each ``e1`` in S1, the **first** ``e2`` of S2 in
  processing order with ``e2.t0 > e1.t1`` and ``θ(e1, e2)``; events failing θ are skipped.  Output
  ``e1 ⊗ e2`` with interval ``(e1.t0, e2.t1)``.  At most one output per ``e1``, so an outer ``Select``
  tests that first match only and is never retried on a later event (DESIGN §4).
- ``Iteration(S1, S2, θ, rebind, aggregates)`` (``μF,θ``, CEL ``FOLD``): a chain starts at each ``e1``
  in S1.  Each step takes the next event ``e2`` of S2 (``e2.t0 >`` the chain's ``t1``) satisfying θ —
  failing events are skipped — and **outputs** ``first ⊗ e2`` with the aggregates applied, interval
  ``(e1.t0, e2.t1)``.  The chain continues from that step iff ``rebind`` (F's selection) holds; otherwise
  the step is still output and the chain ends (DESIGN §4: forward edge θ, rebind edge θ ∧ F).
  Only S1's attributes (``first``) and the most recent step (``$``) are remembered (004 §2.2).

Scopes inside NEXT/FOLD braces: ``$1.x`` is the left event (for FOLD the chain's first event, with its
initial aggregate values), ``$2.x`` the incoming right event, an unqualified ``x`` the left event's ``x``
when the left event has that attribute, else the right event's (Cayuga's CEL compiler reads a plain name
as the left input's; the algebra's parser stores its plain names there as ``$2.x``), ``$.x`` the last
iteration:
initially the first event's ``x`` (004 §2.2 "Initially, this value is equivalent to the corresponding
attribute in S1"), after each continued step updated with the step's right event and aggregate values.
θ, ``rebind`` and every aggregate are evaluated on the state *before* the step (so two aggregates
``$.c + 1 AS c, $.s + $2.Price AS s`` both read the old ``$``), as 004 §2.2's ``g2`` reads ``.last``.
``DUR`` inside the braces is the duration of the would-be output ``(first.t0 .. e2.t1)``.

Aggregates (004 §2.2 ``α_{g3}(μ_{α_{g2}F,θ}(α_{g1}(S1), S2))``): ``g1`` is an ``Aggregate`` (CEL
``SELECT *, 1 AS cnt FROM``) on S1, ``g2`` the FOLD aggregates, ``g3`` an ``Aggregate``/``Project`` on the
result.  Deviation from the literal recursive equation ``μ = (S1;θS2) ∪ μ(F(S1;θS2), S2)``, whose step
outputs would lag the aggregates by one step: each output step here carries the aggregates updated with
that step's event (so ``cnt`` counts the events of the chain, as CEL FOLD users expect).  For the
automaton this means: the forward edge out of a FOLD node applies the aggregate functions exactly as its
rebind edge does (both evaluated on the instance's bindings before the event).

Consequences worth knowing (DESIGN §4 taken literally): the step on which F's selection fails is still
output, so 004's S4 (``σ_{DUR≥30min}(μ_{price ≥ price.last, θ1})``) also reports the chain up to the
event that broke the rise (see the tests); put a condition in θ to skip such events instead.

Renaming (``e1 ⊗ e2``; as the Cayuga system, 004 §2.3 "attribute renaming function"): the right event's
attributes keep their names; a left attribute whose name the right event also has gets ``_1`` appended,
and so, recursively, does a left attribute named like the new name (``x_1`` when ``x`` moved), so that
``Stock NEXT Stock NEXT Stock`` has ``Price_1_1`` (first), ``Price_1`` (second), ``Price`` (third).  A
renamed attribute that would still collide gets further ``_1`` suffixes.  Left attributes come first.

Nulls.  A missing attribute reads as NULL (``strict=True`` makes that an ``AnalysisError``, except ``$.x``
before the chain has bound ``x``); arithmetic and comparisons with NULL are NULL; a division or modulo by
zero, ``0 ^ negative`` and a power without a real result (``(-8) ^ 0.5``) are NULL; AND/OR/NOT are
three-valued (Kleene); a predicate holds only if it is TRUE (SQL).  Functions: ``contains(text,
pattern)`` (004 §2.2), ``lower``, ``upper``, ``length``, ``abs``; ``LIKE`` as Spark SQL's (``_`` one
character, ``%`` any run, ``\\`` escapes ``_``, ``%`` and itself; any other escape is an error).

Evaluation errors (an operation on values of the wrong type, a numeric overflow, a bad LIKE pattern read
from an event).  DESIGN §7: a run-time error belongs to the query that raised it.  Here it makes the
evaluation that raised fail for that operator and event only: a FILTER's event, or a SELECT list's
event, is dropped from that operator's output; a NEXT / FOLD step whose θ, F's selection or aggregates
raise is not taken (the event is skipped by that chain, as if θ failed); an outer selection over a
NEXT / FOLD drops that output.  Each error is recorded in ``errors`` (``(t0, t1, message)`` of the event
evaluated); nothing else changes.  (Unknown functions and ``strict`` mode's unknown attributes are
errors of the query, not of an event: they raise.)

>>> from sparksub.grammar.events import parse_cel
>>> q = parse_cel("SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock")
>>> evaluate(q, {"Stock": [{"Name": "IBM", "Price": 90}, {"Name": "MSFT", "Price": 20},
...                        {"Name": "IBM", "Price": 95}]})
[{'Name_1': 'IBM', 'Price_1': 90, 'Name': 'IBM', 'Price': 95, 't0': 0, 't1': 2}]
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from sparksub.errors import AnalysisError
from sparksub.grammar.event_ast import (
    UNIT_SECONDS, Aggregate, And, Attr, BinOp, Call, Compare, Const, Dur, Expr, Iteration, Neg, Not,
    Or, Project, Publish, Rename, Scope, Select, Sequence, Stream, StreamExpr, Union,
)

__all__ = ["evaluate", "evaluate_queries", "ReferenceInterpreter", "combine_attributes", "FUNCTIONS"]

TIMESTAMPS = ("t0", "t1")


def _attrs(e: Mapping) -> dict:
    """The attribute values of an event (without its timestamps)."""
    return {k: v for k, v in e.items() if k not in TIMESTAMPS}


def _event(attrs: Mapping, t0: int, t1: int) -> dict:
    return {**attrs, "t0": t0, "t1": t1}


def _by_end_time(events: Iterable[dict]) -> list[dict]:
    """Processing order (004 §2.1): by t1, ties in their given order (a stable sort)."""
    return sorted(events, key=lambda e: e["t1"])


def combine_attributes(left: Mapping, right: Mapping) -> dict:
    """The attributes of ``e1 ⊗ e2`` (see the module docstring for the renaming convention).

    >>> combine_attributes({"Name": "IBM", "Price": 90}, {"Name": "IBM", "Price": 95})
    {'Name_1': 'IBM', 'Price_1': 90, 'Name': 'IBM', 'Price': 95}
    >>> list(combine_attributes({"Price_1": 1, "Price": 2, "Vol": 7}, {"Price": 3}))
    ['Price_1_1', 'Price_1', 'Vol', 'Price']
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


class _EvalError(AnalysisError):
    """An evaluation error of one event (the module docstring): caught where it happens, recorded."""


def _contains(text, pattern):
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise _EvalError(f"contains() needs two strings, got {text!r}, {pattern!r}")
    return pattern in text


def _length(x):
    return len(x)


#: Functions callable from predicates; each returns NULL on a NULL argument.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "contains": _contains, "lower": str.lower, "upper": str.upper, "length": _length, "abs": abs,
}

_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
          "%": operator.mod, "^": operator.pow}
_COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}


def _like(text: str, pattern: str) -> bool:
    """Spark SQL LIKE, by dynamic programming over (pattern token, text prefix): written for clarity,
    independently of the executors' matcher (``grammar/sql_like``)."""
    tokens, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 == len(pattern) or pattern[i + 1] not in "_%\\":
                raise _EvalError(f"invalid LIKE pattern {pattern!r}: a misplaced escape character")
            tokens.append(("char", pattern[i + 1]))
            i += 2
            continue
        tokens.append(("many",) if ch == "%" else ("one",) if ch == "_" else ("char", ch))
        i += 1
    ok = [True] + [False] * len(text)            # ok[j]: the tokens so far match text[:j]
    for tok in tokens:
        if tok[0] == "many":
            nxt = ok[:]
            for j in range(1, len(text) + 1):
                nxt[j] = nxt[j] or nxt[j - 1]
        else:
            nxt = [False] + [ok[j - 1] and (tok[0] == "one" or text[j - 1] == tok[1])
                             for j in range(1, len(text) + 1)]
        ok = nxt
    return ok[len(text)]


def _arith(op: str, a, b):
    if op in "/%" and b == 0:
        return None                              # division by zero: NULL
    try:
        v = _ARITH[op](a, b)
    except ZeroDivisionError:                    # 0 ^ negative
        return None
    except (TypeError, ValueError, OverflowError) as exc:
        raise _EvalError(f"cannot apply {op} to {a!r} and {b!r}: {exc}") from None
    return None if isinstance(v, complex) else v    # no real result: NULL


@dataclass(frozen=True)
class _Context:
    """What an expression can read: ``plain`` names, ``$1``, ``$2``, ``$``, and DUR in ticks."""

    plain: Mapping | None
    duration: int
    left: Mapping | None = None
    right: Mapping | None = None
    last: Mapping | None = None


class ReferenceInterpreter:
    """Evaluates one query at a time over ``streams`` (name → list of events).  ``published`` collects
    the output of every ``PUBLISH name`` evaluated so far."""

    def __init__(self, streams: Mapping[str, Iterable[Mapping]], *, seconds_per_tick: float = 1,
                 strict: bool = False, functions: Mapping[str, Callable] | None = None):
        self.streams = streams
        self.seconds_per_tick = seconds_per_tick
        self.strict = strict
        self.functions = {**FUNCTIONS, **(functions or {})}
        self.published: dict[str, list[dict]] = {}
        #: evaluation errors (the module docstring): (t0, t1, message) of the event evaluated
        self.errors: list[tuple[int, int, str]] = []

    def _error(self, err: AnalysisError, t0: int, t1: int) -> None:
        self.errors.append((t0, t1, str(err)))

    # ---- streams -------------------------------------------------------------------------------
    def evaluate(self, q: StreamExpr) -> list[dict]:
        """The output events of ``q``, in processing order (by t1; ties in the order produced)."""
        method = getattr(self, "_eval_" + type(q).__name__, None)
        if method is None:
            raise TypeError(f"not a stream expression: {q!r}")
        return method(q)

    def _eval_Stream(self, q: Stream) -> list[dict]:
        if q.name in self.streams:
            raw = self.streams[q.name]
        elif q.name in self.published:
            raw = self.published[q.name]
        else:
            raise AnalysisError(f"unknown stream {q.name!r}; known: {sorted(set(self.streams) | set(self.published))}")
        events = []
        for n, e in enumerate(raw):
            t0, t1 = e.get("t0"), e.get("t1")
            if t0 is None and t1 is None:
                t0 = t1 = n                                  # DESIGN §1: the n-th event
            elif t0 is None or t1 is None:
                t0 = t1 = t1 if t0 is None else t0           # an instantaneous event
            if not (isinstance(t0, int) and isinstance(t1, int)) or t0 > t1:
                raise AnalysisError(f"event {n} of {q.name!r}: needs integer t0 <= t1, got ({t0!r}, {t1!r})")
            events.append(_event(_attrs(e), t0, t1))
        return _by_end_time(events)

    def _eval_Select(self, q: Select) -> list[dict]:                       # 004 §2.2 σθ
        out = []
        for e in self.evaluate(q.input):
            try:
                if self._holds(q.predicate, self._single(e)):
                    out.append(e)
            except _EvalError as err:              # the event is dropped here (module docstring)
                self._error(err, e["t0"], e["t1"])
        return out

    def _eval_Project(self, q: Project) -> list[dict]:                     # 004 §2.2 πX (with ρ)
        out = []
        for e in self.evaluate(q.input):
            ctx = self._single(e)
            try:
                out.append(_event({i.name: self._value(i.expr, ctx) for i in q.items}, e["t0"], e["t1"]))
            except _EvalError as err:
                self._error(err, e["t0"], e["t1"])
        return out

    def _eval_Aggregate(self, q: Aggregate) -> list[dict]:                 # 004 §2.2 αg
        out = []
        for e in self.evaluate(q.input):
            ctx = self._single(e)
            try:
                added = {i.name: self._value(i.expr, ctx) for i in q.items}
            except _EvalError as err:
                self._error(err, e["t0"], e["t1"])
                continue
            out.append(_event({**_attrs(e), **added}, e["t0"], e["t1"]))
        return out

    def _eval_Rename(self, q: Rename) -> list[dict]:                       # 004 §2.2 ρf
        mapping = dict(q.mapping)
        out = []
        for e in self.evaluate(q.input):
            a = _attrs(e)
            missing = [o for o in mapping if o not in a]
            if missing and self.strict:
                raise AnalysisError(f"RENAME: unknown attribute(s) {missing}; the event has {sorted(a)}")
            out.append(_event(rename_attributes(a, mapping), e["t0"], e["t1"]))
        return out

    def _eval_Union(self, q: Union) -> list[dict]:                         # 004 §2.2 ∪ (a bag)
        return _by_end_time(self.evaluate(q.left) + self.evaluate(q.right))

    def _eval_Publish(self, q: Publish) -> list[dict]:
        out = self.evaluate(q.input)
        self.published[q.name] = out
        return out

    def _eval_Sequence(self, q: Sequence) -> list[dict]:                   # 004 §2.2 ;θ, DESIGN §4
        rights = self.evaluate(q.right)
        out = []
        for e1 in self.evaluate(q.left):
            a1 = _attrs(e1)
            for e2 in rights:                      # in processing order: the first match wins
                if e2["t0"] <= e1["t1"]:           # must start after e1 ends (simultaneous: never)
                    continue
                a2 = _attrs(e2)
                ctx = _Context(plain=a2, left=a1, right=a2, duration=e2["t1"] - e1["t0"] + 1)
                try:
                    holds = self._holds(q.theta, ctx)
                except _EvalError as err:          # θ raised: this event is skipped, as if θ failed
                    self._error(err, e1["t0"], e2["t1"])
                    continue
                if holds:
                    out.append(_event(combine_attributes(a1, a2), e1["t0"], e2["t1"]))
                    break                          # θ-failing events before it were skipped
        return _by_end_time(out)

    def _eval_Iteration(self, q: Iteration) -> list[dict]:                 # 004 §2.2 μF,θ, DESIGN §4
        rights = self.evaluate(q.right)
        out = []
        for e1 in self.evaluate(q.left):
            first = _attrs(e1)                     # S1's values: $1, and the left part of each output
            last = dict(first)                     # $: initially S1's values (004 §2.2 ".last")
            t0, t1 = e1["t0"], e1["t1"]            # the chain's interval so far
            for e2 in rights:
                if e2["t0"] <= t1:
                    continue
                a2 = _attrs(e2)
                ctx = _Context(plain=a2, left=first, right=a2, last=last, duration=e2["t1"] - t0 + 1)
                try:
                    if not self._holds(q.theta, ctx):
                        continue                   # filter edge: skipped, the chain waits
                    aggregates = {i.name: self._value(i.expr, ctx) for i in q.aggregates}
                    ends = q.rebind is not None and not self._holds(q.rebind, ctx)
                except _EvalError as err:          # the step raised: not taken, as if θ failed
                    self._error(err, t0, e2["t1"])
                    continue
                out.append(_event({**combine_attributes(first, a2), **aggregates}, t0, e2["t1"]))
                if ends:
                    break                          # forward edge only: output, the chain ends
                last = {**last, **a2, **aggregates}   # rebind edge: the chain continues from here
                t1 = e2["t1"]
        return _by_end_time(out)

    # ---- expressions ---------------------------------------------------------------------------
    @staticmethod
    def _single(e: Mapping) -> _Context:
        return _Context(plain=_attrs(e), duration=e["t1"] - e["t0"] + 1)

    def _holds(self, p: Expr | None, ctx: _Context) -> bool:
        """A predicate holds iff it is TRUE (NULL does not hold); ``None`` is TRUE."""
        return p is None or self._value(p, ctx) is True

    def _lookup(self, a: Attr, ctx: _Context):
        if a.scope is Scope.PLAIN and ctx.left is not None:
            # inside NEXT / FOLD braces: the left event's (a chain's first event's) if it has the
            # attribute, else the right event's (Cayuga's CEL compiler)
            source = ctx.left if a.name in ctx.left else ctx.right
        else:
            source = {Scope.PLAIN: ctx.plain, Scope.LEFT: ctx.left, Scope.RIGHT: ctx.right,
                      Scope.LAST: ctx.last}[a.scope]
        ref = a.name if a.scope is Scope.PLAIN else f"{a.scope.value}.{a.name}"
        if source is None:
            raise AnalysisError(f"{ref} cannot be read here")
        if a.name in source:
            return source[a.name]
        if self.strict and a.scope is not Scope.LAST:
            raise AnalysisError(f"unknown attribute {ref}; the event has {sorted(source)}")
        return None

    def _value(self, e: Expr, ctx: _Context):
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Attr):
            return self._lookup(e, ctx)
        if isinstance(e, Neg):
            v = self._value(e.operand, ctx)
            return None if v is None else self._typed(operator.neg, v)
        if isinstance(e, BinOp):
            a, b = self._value(e.left, ctx), self._value(e.right, ctx)
            if a is None or b is None:
                return None
            return _arith(e.op, a, b)
        if isinstance(e, Compare):
            a, b = self._value(e.left, ctx), self._value(e.right, ctx)
            if a is None or b is None:
                return None
            if e.op == "LIKE":
                if not (isinstance(a, str) and isinstance(b, str)):
                    raise _EvalError(f"LIKE needs strings, got {a!r} LIKE {b!r}")
                return _like(a, b)
            return self._typed(_COMPARE[e.op], a, b)
        if isinstance(e, Dur):
            bound = e.value if e.unit is None else e.value * UNIT_SECONDS[e.unit] / self.seconds_per_tick
            return _COMPARE[e.op](ctx.duration, bound)
        if isinstance(e, Not):
            v = self._truth(e.operand, ctx)
            return None if v is None else not v
        if isinstance(e, And):                                    # Kleene: FALSE wins, then NULL
            vs = [self._truth(x, ctx) for x in e.items]
            return False if False in vs else (None if None in vs else True)
        if isinstance(e, Or):                                     # Kleene: TRUE wins, then NULL
            vs = [self._truth(x, ctx) for x in e.items]
            return True if True in vs else (None if None in vs else False)
        if isinstance(e, Call):
            fn = self.functions.get(e.name) or self.functions.get(e.name.lower())
            if fn is None:
                raise AnalysisError(f"unknown function {e.name}(); known: {', '.join(sorted(self.functions))}")
            args = [self._value(x, ctx) for x in e.args]
            if any(x is None for x in args):
                return None
            return self._typed(fn, *args)
        raise TypeError(f"not an expression: {e!r}")

    def _truth(self, e: Expr, ctx: _Context):
        v = self._value(e, ctx)
        if v is not None and not isinstance(v, bool):
            raise _EvalError(f"not a predicate: {e} is {v!r}")
        return v

    @staticmethod
    def _typed(fn, *args):
        try:
            return fn(*args)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise _EvalError(f"cannot apply {getattr(fn, '__name__', fn)} to {args!r}: {exc}") from None


def rename_attributes(attrs: Mapping, mapping: Mapping) -> dict:
    """004 §2.2 ρ on one event's attributes; two attributes renamed alike are an ``AnalysisError``."""
    renamed = {}
    for k, v in attrs.items():
        n = mapping.get(k, k)
        if n in renamed:
            raise AnalysisError(f"RENAME: two attributes named {n!r} after renaming")
        renamed[n] = v
    return renamed


def evaluate(q: StreamExpr, streams: Mapping[str, Iterable[Mapping]], **options) -> list[dict]:
    """The output events of one query (see ``ReferenceInterpreter`` for the options)."""
    return ReferenceInterpreter(streams, **options).evaluate(q)


def evaluate_queries(queries: Mapping[str, StreamExpr], streams: Mapping[str, Iterable[Mapping]],
                     errors: dict | None = None, **options) -> dict[str, list[dict]]:
    """Several queries, where one may read what another PUBLISHes (resubscription, 004 §2.3): each
    query is evaluated after the queries whose published streams it reads.  Returns name → outputs;
    ``errors``, if given, receives name → the query's evaluation errors (``ReferenceInterpreter.errors``)."""
    producers: dict[str, str] = {}
    for qname, q in queries.items():
        for n in q.walk():
            if isinstance(n, Publish):
                if n.name in streams or producers.get(n.name, qname) != qname:
                    raise AnalysisError(f"stream {n.name!r} is published twice (or is an input stream)")
                producers[n.name] = qname
    available = dict(streams)
    results: dict[str, list[dict]] = {}
    running: set[str] = set()

    def run(qname: str) -> None:
        if qname in results:
            return
        if qname in running:
            raise AnalysisError(f"queries read each other's published streams in a cycle (at {qname!r})")
        running.add(qname)
        for s in sorted(queries[qname].streams()):
            if s not in streams and s in producers and producers[s] != qname:
                run(producers[s])
        interpreter = ReferenceInterpreter(available, **options)
        results[qname] = interpreter.evaluate(queries[qname])
        available.update(interpreter.published)
        if errors is not None:
            errors[qname] = interpreter.errors
        running.discard(qname)

    for qname in queries:
        run(qname)
    return results
