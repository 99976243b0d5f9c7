"""Cayuga event queries compiled to automata, and an indexed multi-query executor (pure Python, no Spark).

Sources: 004 §2.3 (left-deep automata: start / intermediate / end nodes; filter, rebind and forward edges;
bindings and renaming), 004 §3.1–3.2 (static and dynamic predicates, affected instances, state merging),
DESIGN §4 (the semantics and the indexes paragraph), issue 6 items 3–4.  The oracle is
``cayuga_reference``: for every query this module accepts, ``NFAEngine.run`` returns
exactly what ``evaluate_queries`` returns (same events, same attributes, same t0/t1; as multisets — and
in the oracle's order, see "Order" below).

Compilation (``compile_query``).  A query is first *resolved*: every ``PUBLISH name`` below the top is cut
out into its own (internal) query publishing ``name`` and replaced by ``Stream(name)`` (004 §2.3
resubscription); a NEXT/FOLD whose right input is not a stateless pipeline over one stream (the
expression is not left-deep) gets that input published the same way as an internal stream
``_r_<query>_<k>`` (disable with ``publish_right_inputs=False`` to get ``UnsupportedSubscription``).
A UNION (algebra only) becomes two internal queries — its inputs — publishing into one internal stream
``_u_<query>_<k>`` whose events are merged at the close of each tick, left input first (the oracle's bag
order), and the UNION is replaced by that stream.  Each resolved
expression is left-deep,

    E_K = U_K(B_K(... U_1(B_1(U_0(S_0), R_1)) ..., R_K))    B_k ∈ {NEXT (;θ), FOLD (μF,θ)}

with ``U_k`` chains of unary operators (σ, π, α, ρ) and ``R_k`` stateless pipelines over one stream, and
becomes one automaton (004 §2.3): a start node, node ``k`` per ``B_k``, an end node.  The start node's
forward edge is ``U_0``'s selections (static); node ``k`` has a filter edge (self-loop, ``¬θ``), for FOLD a
rebind edge (self-loop, ``θ ∧ F``-selection, bindings ``$`` replaced, aggregates updated) and a forward
edge (``θ`` then ``U_k``: outer selections, projections; bindings extended by ``e1 ⊗ e2`` with the oracle's
renaming ``Price → Price_1``).  Every predicate is split into a **static** part (top-level conjuncts that
read only the new event and constants, 004 §3.1) and a **dynamic** part (conjuncts reading ``$1``/``$`` or
DUR; outer selections, which read the combined event).  ``Automaton`` is an immutable description of
this (nodes, edges, predicate parts as text, renaming, instance-index key, DUR bound) with ``to_dot()``.

Execution (``NFAEngine``).  Many queries over one event stream (events in end-time order):

- (a) **state merging / prefix sharing** (004 §3): a node is identified by its AST ``B_k(E_{k-1}, R_k)``
  (which contains the whole prefix), a forward edge group by ``E_k``; equal prefixes of different queries
  are one node, with one set of instances, and identical first-step predicates are evaluated once.
- (b) **static predicate index** (004 §3.2 "Evaluating static predicates"): per input stream, each
  node's *guard* (the right input's selections plus θ's static conjuncts) is indexed on one access
  conjunct — a hash per attribute for ``attr = const``, sorted bounds per attribute for ``< <= > >=`` —;
  every distinct conjunct is evaluated at most once per event; only nodes whose guard holds are visited.
  (The FILTER engine of ``operators/filters`` indexes SQL subscriptions on columns; an equivalent small
  index here was simpler than adapting it.)
- (c) **instance index** (004 §3.2 "Identifying affected instances"): θ's dynamic equality conjuncts
  ``$2-side = binding-side`` (e.g. ``$1.Name = $2.Name``, ``$2.Name = $.Name``) key a hash from the
  binding values to instances; an event visits only the bucket of its own values.  Across nodes, when
  the right input is a plain stream, one table per event-side key (``$2.Name`` on ``Stock``) maps a
  value to the nodes holding instances with it, so an event computes its key once and visits only the
  nodes and buckets it affects (their guards checked on the visit).  Instances whose key is NULL can
  never satisfy θ and are dropped (they would only ever take the filter edge).
- (d) **expiry**: a top-level ``DUR <``/``<=``/``=`` conjunct of θ, or on every path from a node to an
  output (outer selections, later nodes' θ), bounds how long an instance can still contribute; once the
  current tick makes that impossible the instance is dropped (a heap of deadlines).

``stats()`` counts the work: events, guards/conjuncts evaluated, instances visited, edge predicates
evaluated, instances created / alive / expired, nodes with and without sharing, bytes per instance
(``sys.getsizeof`` of the instance and its binding dicts).

Order.  Matches of one tick (equal ``t1``) are released when the tick closes (an event with a larger
``t1`` arrives, or ``flush()``), sorted into the oracle's order (each output carries the key ``(t1, key of
its left event)``, base events ``(t1, position)``); published streams are fed back at the close of the
tick, producers before consumers.  Events of one tick that are fed later cannot affect instances made in
that tick (``e2.t0 > e1.t1``), so this is exact.

>>> engine = NFAEngine()
>>> _ = engine.register("S3", "SELECT * FROM FILTER{Price > 1.05 * Price_1}(Stock NEXT{$1.Name = $2.Name} Stock)")
>>> engine.run({"Stock": [{"Name": "IBM", "Price": 90}, {"Name": "MSFT", "Price": 20},
...                       {"Name": "IBM", "Price": 95}]})
{'S3': [{'Name_1': 'IBM', 'Price_1': 90, 'Name': 'IBM', 'Price': 95, 't0': 0, 't1': 2}]}
>>> print(engine.automaton("S3").describe())      # doctest: +NORMALIZE_WHITESPACE
automaton S3
  node start [start] Stock
  node n1 [NEXT] Stock  index: $2.Name = $1.Name
  node end [end] S3
  edge start -> n1 [forward] static: TRUE; dynamic: TRUE
  edge n1 -> n1 [filter] static: TRUE; dynamic: $1.Name = $2.Name
  edge n1 -> end [forward] static: TRUE; dynamic: $1.Name = $2.Name; output: Price > 1.05 * Price_1;
  renaming: $1.x -> x_1 when the new event has x (and x_1 -> x_1_1 ...), the new event's attributes keep
  their names

Registration (``register``, ``compile_query``): every query is first resolved and checked against the
declared schemas (``grammar.event_analysis``, issue 15 items 2–3): unqualified names inside the braces
become ``$1.x`` / ``$2.x`` by Cayuga's rule, unknown attributes and ill-typed expressions are refused
with their position; without a schema an unqualified name inside the braces is refused.

Run-time errors (DESIGN §7; issue 15 item 3).  What the type check cannot rule out (a numeric overflow, a
LIKE pattern read from an event, anything on undeclared types) raises where it is evaluated; the executor
catches it there and charges it to the queries whose automata pass there (``EventError``, ``take_errors``):
the event is dropped at that operator, or the NEXT / FOLD step is not taken, for them alone — the oracle's
rule (``cayuga_reference``) — and every other query, sharing the stream, the static index or a prefix,
goes on.  (Queries sharing the node that raised evaluate exactly the same thing, so each alone raises too.)

Deviations from the oracle (documented, tested where it matters):
- evaluation errors: the oracle evaluates every conjunct of a pair it considers; the indexes skip pairs
  and conjuncts that cannot match (and a range index skips a string compared with a number), so an error
  the oracle reports may not be reported here — the matches are the same (an error fails the operator
  or step, as a FALSE conjunct does);
- an unknown function is an ``AnalysisError`` at compile time (the oracle raises when it evaluates it);
- ``strict`` mode of the oracle is not offered;
- a query registered while events are flowing shares the partial matches of equal prefixes already in
  progress (as merged states do in Cayuga);
- outer selections are evaluated on the combined event (which input an attribute comes from depends on
  the events' attribute sets), so the description lists them as ``output_filter`` and they are never
  indexed, even when they read only the new event (004 puts S2's ``price < 25`` on the static side);
"""
from __future__ import annotations

import heapq
import math
import operator
import pickle
import re
import sys
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from sparksub.errors import AnalysisError, UnsupportedSubscription
from sparksub.grammar.event_analysis import analyse_query, combine_attributes
from sparksub.grammar.event_ast import (
    UNIT_SECONDS, Aggregate, And, Attr, BinOp, Call, Compare, Const, Dur, Expr, Iteration, Neg,
    Not, Or, Project, Publish, Rename, Scope, Select, Sequence, Stream, StreamExpr, Union, rebuild,
    unparse_expr,
)
from sparksub.grammar.sql_like import compile_like
from sparksub.operators.events.values import COMPARISONS as _COMPARE
from sparksub.operators.events.values import FUNCTIONS, apply_typed, arithmetic, like, rename_attributes

__all__ = ["compile_query", "resolve_query", "CompiledQuery", "Automaton", "AutomatonNode",
           "AutomatonEdge", "NFAEngine", "Match", "EventError", "EVENT_SHAPES", "partition_key",
           "assigned_attributes"]

#: The shapes the compiler accepts (named in UnsupportedSubscription errors).
EVENT_SHAPES = ("left-deep NEXT/FOLD chains over stateless FILTER/SELECT/RENAME pipelines",
                "PUBLISH'd sub-queries (resubscription)",
                "non-left-deep right inputs (compiled as published intermediate streams)",
                "UNION (its inputs published into one merged stream)")

_typed = apply_typed
_UNARY = (Select, Project, Aggregate, Rename)


# ---------------------------------------------------------------------------------------------------
# Expressions: compiled to closures fn(p, l, s, d) — p the event itself / $2, l $1, s $ (last), d DUR
# Same semantics as ReferenceInterpreter._value (NULLs, Kleene logic, errors; operators/event_values).
# Queries are resolved first (grammar/event_analysis): no unqualified name is left inside the braces.
# ---------------------------------------------------------------------------------------------------

def _dur_ticks(e: Dur, seconds_per_tick: float):
    return e.value if e.unit is None else e.value * UNIT_SECONDS[e.unit] / seconds_per_tick


def _compile_expr(e: Expr, functions: Mapping[str, Callable], spt: float) -> Callable:
    if isinstance(e, Const):
        v = e.value
        return lambda p, l, s, d: v
    if isinstance(e, Attr):
        n = e.name
        if e.scope in (Scope.PLAIN, Scope.RIGHT):
            return lambda p, l, s, d: p.get(n)
        if e.scope is Scope.LEFT:
            return lambda p, l, s, d: l.get(n)
        return lambda p, l, s, d: s.get(n)
    if isinstance(e, Neg):
        f = _compile_expr(e.operand, functions, spt)

        def neg(p, l, s, d):
            v = f(p, l, s, d)
            return None if v is None else _typed(operator.neg, v)
        return neg
    if isinstance(e, BinOp):
        fa, fb = _compile_expr(e.left, functions, spt), _compile_expr(e.right, functions, spt)
        op = e.op

        def arith(p, l, s, d):
            a, b = fa(p, l, s, d), fb(p, l, s, d)
            if a is None or b is None:
                return None
            return arithmetic(op, a, b)
        return arith
    if isinstance(e, Compare):
        fa, fb = _compile_expr(e.left, functions, spt), _compile_expr(e.right, functions, spt)
        if e.op == "LIKE" and isinstance(e.right, Const) and isinstance(e.right.value, str):
            match = compile_like(e.right.value).match      # a constant pattern: compiled once

            def like_const(p, l, s, d):
                a = fa(p, l, s, d)
                if a is None:
                    return None
                if not isinstance(a, str):
                    raise AnalysisError(f"LIKE needs strings, got {a!r} LIKE {e.right.value!r}")
                return match(a)
            return like_const
        if e.op == "LIKE":
            def like_(p, l, s, d):          # a pattern read from an event: linear time (issue 15 item 4)
                a, b = fa(p, l, s, d), fb(p, l, s, d)
                if a is None or b is None:
                    return None
                return like(a, b)
            return like_
        fn = _COMPARE[e.op]

        def compare(p, l, s, d):
            a, b = fa(p, l, s, d), fb(p, l, s, d)
            if a is None or b is None:
                return None
            return _typed(fn, a, b)
        return compare
    if isinstance(e, Dur):
        fn, bound = _COMPARE[e.op], _dur_ticks(e, spt)
        return lambda p, l, s, d: fn(d, bound)
    if isinstance(e, Not):
        f = _truth(_compile_expr(e.operand, functions, spt), e.operand)

        def not_(p, l, s, d):
            v = f(p, l, s, d)
            return None if v is None else not v
        return not_
    if isinstance(e, (And, Or)):
        fs = [_truth(_compile_expr(x, functions, spt), x) for x in e.items]
        win, other = (False, True) if isinstance(e, And) else (True, False)

        def kleene(p, l, s, d):          # every item evaluated, as the oracle does
            vs = [f(p, l, s, d) for f in fs]
            return win if win in vs else (None if None in vs else other)
        return kleene
    if isinstance(e, Call):
        fn = functions.get(e.name) or functions.get(e.name.lower())
        if fn is None:
            raise AnalysisError(f"unknown function {e.name}(); known: {', '.join(sorted(functions))}")
        fs = [_compile_expr(x, functions, spt) for x in e.args]

        def call(p, l, s, d):
            args = [f(p, l, s, d) for f in fs]
            if any(a is None for a in args):
                return None
            return _typed(fn, *args)
        return call
    raise TypeError(f"not an expression: {e!r}")


def _truth(f: Callable, e: Expr) -> Callable:
    def truth(p, l, s, d):
        v = f(p, l, s, d)
        if v is not None and not isinstance(v, bool):
            raise AnalysisError(f"not a predicate: {e} is {v!r}")
        return v
    return truth


class _Conjunct(NamedTuple):
    """One top-level conjunct of a predicate and how it holds (``is True``; an And's items must be
    booleans, as the oracle's Kleene AND checks)."""

    expr: Expr
    from_and: bool


def _conjuncts(p: Expr | None) -> list[_Conjunct]:
    if p is None:
        return []
    if isinstance(p, And):
        return [_Conjunct(x, True) for x in p.items]
    return [_Conjunct(p, False)]


def _holds_fn(c: _Conjunct, functions, spt) -> Callable:
    f = _compile_expr(c.expr, functions, spt)
    if c.from_and:
        f = _truth(f, c.expr)
    return lambda p, l, s, d: f(p, l, s, d) is True


def _scopes(e: Expr) -> set[Scope]:
    return {n.scope for n in e.walk() if isinstance(n, Attr)}


def _has_dur(e: Expr) -> bool:
    return any(isinstance(n, Dur) for n in e.walk())


def _is_static(e: Expr) -> bool:
    """004 §3.1: reads only the new event's attributes and constants (DUR reads the instance's t0)."""
    return _scopes(e) <= {Scope.PLAIN, Scope.RIGHT} and not _has_dur(e)


def _map_attrs(e, fn):
    """Rebuild an expression with every Attr replaced by ``fn(attr)``."""
    if isinstance(e, Attr):
        return fn(e)
    if isinstance(e, (Const, Dur)):
        return e
    return rebuild(e, lambda x: _map_attrs(x, fn))


def _to_plain(e: Expr) -> Expr:
    return _map_attrs(e, lambda a: Attr(a.name, Scope.PLAIN))


def _dur_upper_bound(conjuncts: Iterable[_Conjunct], spt: float) -> int | None:
    """The largest DUR (ticks) that can satisfy every top-level ``DUR < / <= / = c`` conjunct."""
    bound = None
    for c in conjuncts:
        e = c.expr
        if isinstance(e, Dur) and e.op in ("<", "<=", "="):
            v = _dur_ticks(e, spt)
            b = math.ceil(v) - 1 if e.op == "<" else math.floor(v)
            bound = b if bound is None else min(bound, b)
    return bound


def _equality_key(c: _Conjunct) -> tuple[Expr, Expr] | None:
    """``$2-side = binding-side`` (004 §3.2 dynamic predicates): (event expr, binding expr) or None."""
    e = c.expr
    if not (isinstance(e, Compare) and e.op == "=") or _has_dur(e):
        return None
    for a, b in ((e.left, e.right), (e.right, e.left)):
        sa, sb = _scopes(a), _scopes(b)
        if sa and sa <= {Scope.RIGHT, Scope.PLAIN} and sb and sb <= {Scope.LEFT, Scope.LAST}:
            return a, b
    return None


# ---------------------------------------------------------------------------------------------------
# Resolution: publishes cut out, non-left-deep right inputs published, the chain decomposed
# ---------------------------------------------------------------------------------------------------

def _strip_publish(q: StreamExpr) -> tuple[StreamExpr, list[str]]:
    names = []
    while isinstance(q, Publish):
        names.append(q.name)
        q = q.input
    return q, names


def _is_pipeline(q: StreamExpr) -> bool:
    while isinstance(q, _UNARY):
        q = q.input
    return isinstance(q, Stream)


def _shape(q: StreamExpr) -> str:
    return type(q).__name__.upper()


@dataclass(frozen=True)
class ResolvedQuery:
    """One automaton's worth of query: ``expr`` (left-deep, no PUBLISH, no UNION) publishing ``publishes``."""

    name: str
    expr: StreamExpr
    publishes: tuple[str, ...]
    internal: bool
    union_side: int | None = None       # 0 / 1: one input of a UNION, merged into its one stream


def resolve_query(name: str, q: StreamExpr, *, publish_right_inputs: bool = True) -> list[ResolvedQuery]:
    """The main query first, then the internal queries its sub-PUBLISHes and non-left-deep right inputs
    became (004 §2.3: resubscription)."""
    extra: list[ResolvedQuery] = []
    safe = re.sub(r"\W", "_", name)
    counter = iter(range(1, 10**9))

    def cut(x: StreamExpr) -> StreamExpr:
        if isinstance(x, Publish):
            inner, names = _strip_publish(x)
            inner = cut(inner)
            extra.append(ResolvedQuery(f"{name}/{names[0]}", inner, tuple(names), True))
            return Stream(names[-1])
        if isinstance(x, Union):
            # 004 §2.2 ∪: each input becomes an internal query publishing into one stream, whose
            # events are merged by end time, left input first within a tick (the oracle's bag order)
            if not publish_right_inputs:
                raise UnsupportedSubscription(
                    f"UNION in an event query ({x.to_algebra()}): compiled by publishing its inputs as "
                    "one stream, which publish_right_inputs=False turns off", EVENT_SHAPES)
            stream_name = f"_u_{safe}_{next(counter)}"
            for side, inner in enumerate((x.left, x.right)):
                extra.append(ResolvedQuery(f"{name}/{stream_name}#{side}", cut(inner), (stream_name,), True, side))
            return Stream(stream_name)
        if isinstance(x, _UNARY):
            return type(x)(cut(x.input), *[getattr(x, f.name) for f in fields(x)[1:]])
        if isinstance(x, (Sequence, Iteration)):
            left = cut(x.left)
            right = cut(x.right)
            if not _is_pipeline(right):
                if not publish_right_inputs:
                    raise UnsupportedSubscription(
                        f"not left-deep: the right input of {_shape(x)} is a {_shape(_peel(right)[0])} "
                        f"({right.to_cel() if _cel_ok(right) else right.to_algebra()}); PUBLISH it as a "
                        "stream and read that stream instead", EVENT_SHAPES)
                stream_name = f"_r_{safe}_{next(counter)}"
                extra.append(ResolvedQuery(f"{name}/{stream_name}", right, (stream_name,), True))
                right = Stream(stream_name)
            return type(x)(left, right, *[getattr(x, f.name) for f in fields(x)[2:]])
        if isinstance(x, Stream):
            return x
        raise TypeError(f"not a stream expression: {x!r}")

    top, names = _strip_publish(q)
    main = ResolvedQuery(name, cut(top), tuple(names), False)
    return [main] + extra


def _cel_ok(q) -> bool:
    return not any(isinstance(n, (Rename, Union)) for n in q.walk())


def _peel(q: StreamExpr) -> tuple[StreamExpr, list[StreamExpr]]:
    """``q`` = ops[-1](...ops[0](base)): (base, ops in the order they apply)."""
    ops = []
    while isinstance(q, _UNARY):
        ops.append(q)
        q = q.input
    return q, ops[::-1]


@dataclass(frozen=True)
class _Step:
    op: Sequence | Iteration            # node key: contains the whole prefix
    right_stream: str
    right_ops: tuple                    # the right input's unary operators over right_stream
    right_expr: StreamExpr
    post_ops: tuple                     # U_k, applied to the node's output
    out_expr: StreamExpr                # E_k = U_k(B_k): the forward edge group's key


@dataclass(frozen=True)
class _Chain:
    stream: str
    start_ops: tuple
    start_expr: StreamExpr              # E_0 = U_0(S_0)
    steps: tuple[_Step, ...]


def _decompose(q: StreamExpr) -> _Chain:
    steps = []
    x = q
    while True:
        base, ops = _peel(x)
        if isinstance(base, Stream):
            return _Chain(base.name, tuple(ops), x, tuple(reversed(steps)))
        if not isinstance(base, (Sequence, Iteration)):
            raise UnsupportedSubscription(f"{_shape(base)} inside an event query after resolution", EVENT_SHAPES)
        rbase, rops = _peel(base.right)
        assert isinstance(rbase, Stream), "resolve_query publishes non-pipeline right inputs"
        steps.append(_Step(base, rbase.name, tuple(rops), base.right, tuple(ops), x))
        x = base.left


# ---------------------------------------------------------------------------------------------------
# The immutable description (EXPLAIN)
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AutomatonNode:
    id: str
    kind: str                            # start | NEXT | FOLD | end
    label: str                           # the input stream / right input / outputs
    instance_index: tuple[str, ...] = ()  # "$2-side = binding-side" equalities hashing the instances
    dur_bound: int | None = None         # instances older than this (ticks) expire


@dataclass(frozen=True)
class AutomatonEdge:
    source: str
    target: str
    kind: str                            # forward | filter | rebind
    static: tuple[str, ...] = ()         # conjuncts on the new event and constants (indexed)
    dynamic: tuple[str, ...] = ()        # conjuncts reading the bindings $1 / $ or DUR
    output_filter: tuple[str, ...] = ()  # outer selections, on the combined event
    transforms: tuple[str, ...] = ()     # projections / aggregates / renames on the way
    aggregates: tuple[str, ...] = ()     # FOLD's F aggregates (forward and rebind)
    renaming: tuple[tuple[str, str], ...] = ()   # left attribute -> its name in the output
    renaming_rule: str = ""

    def predicate_text(self) -> str:
        parts = list(self.static) + list(self.dynamic) + list(self.output_filter)
        text = " AND ".join(f"({p})" if " OR " in p else p for p in parts) or "TRUE"
        return f"NOT ({text})" if self.kind == "filter" else text


_RENAMING_RULE = ("$1.x -> x_1 when the new event has x (and x_1 -> x_1_1 ...), "
                  "the new event's attributes keep their names")


def _op_text(op) -> str:
    if isinstance(op, Select):
        return f"FILTER{{{unparse_expr(op.predicate)}}}"
    if isinstance(op, Project):
        return "SELECT " + ", ".join(unparse_expr(i.expr) + ("" if isinstance(i.expr, Attr) and i.expr.name == i.name
                                                            else f" AS {i.name}") for i in op.items)
    if isinstance(op, Aggregate):
        return "SELECT *, " + ", ".join(f"{unparse_expr(i.expr)} AS {i.name}" for i in op.items)
    return "RENAME " + ", ".join(f"{o} -> {n}" for o, n in op.mapping)


@dataclass(frozen=True)
class Automaton:
    """One query's automaton (004 §2.3), as data: nodes, edges, what it reads and publishes."""

    query: str
    nodes: tuple[AutomatonNode, ...]
    edges: tuple[AutomatonEdge, ...]
    reads: tuple[str, ...]
    publishes: tuple[str, ...]
    internal: bool

    def describe(self) -> str:
        lines = [f"automaton {self.query}" + (f" PUBLISH {', '.join(self.publishes)}" if self.publishes else "")]
        for n in self.nodes:
            extra = ""
            if n.instance_index:
                extra += f"  index: {' AND '.join(n.instance_index)}"
            if n.dur_bound is not None:
                extra += f"  expires after DUR {n.dur_bound}"
            lines.append(f"  node {n.id} [{n.kind}] {n.label}{extra}")
        for e in self.edges:
            lines.append(f"  edge {e.source} -> {e.target} [{e.kind}] static: "
                         f"{' AND '.join(e.static) or 'TRUE'}; dynamic: {' AND '.join(e.dynamic) or 'TRUE'}"
                         + (f"; output: {' AND '.join(e.output_filter)}" if e.output_filter else "")
                         + (f"; aggregates: {', '.join(e.aggregates)}" if e.aggregates else "")
                         + (f"; then: {' / '.join(e.transforms)}" if e.transforms else "")
                         + (f"; renaming: {', '.join(f'{a}->{b}' for a, b in e.renaming)}" if e.renaming
                            else (f"; renaming: {e.renaming_rule}" if e.renaming_rule else "")))
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz text: filter edges drawn on top of a node, rebind edges below (004 Fig. 2)."""
        def q(*lines: str) -> str:
            # each line escaped for a DOT string, then joined by DOT's own line break (an escaped "\\n" would
            # print as a backslash and an n)
            return '"' + "\\n".join(s.replace("\\", "\\\\").replace('"', '\\"') for s in lines) + '"'
        out = [f"digraph {q(self.query)} {{", "  rankdir=LR;"]
        for n in self.nodes:
            shape = "doublecircle" if n.kind == "end" else ("point" if n.kind == "start" else "circle")
            label = [n.id, f"{n.kind} {n.label}"]
            if n.instance_index:
                label.append("index: " + " AND ".join(n.instance_index))
            out.append(f"  {q(n.id)} [shape={'box' if shape == 'point' else shape}, label={q(*label)}];")
        for e in self.edges:
            label = [e.predicate_text()]
            if e.static or e.dynamic:
                label += [f"static: {' AND '.join(e.static) or 'TRUE'}", f"dynamic: {' AND '.join(e.dynamic) or 'TRUE'}"]
            if e.aggregates:
                label.append(", ".join(e.aggregates))
            if e.renaming:
                label.append(", ".join(f"{a}->{b}" for a, b in e.renaming))
            port = {"filter": ":n", "rebind": ":s"}.get(e.kind, "")
            style = {"filter": "dashed", "rebind": "dotted"}.get(e.kind, "solid")
            out.append(f"  {q(e.source)}{port} -> {q(e.target)}{port} [label={q(*label)}, style={style}];")
        out.append("}")
        return "\n".join(out)


@dataclass(frozen=True)
class CompiledQuery:
    """A registered query: its automata, main first, then the internal (published) ones."""

    name: str
    query: StreamExpr
    automata: tuple[Automaton, ...]

    def describe(self) -> str:
        return "\n".join(a.describe() for a in self.automata)

    def to_dot(self) -> str:
        return "\n".join(a.to_dot() for a in self.automata)


def _schema_of(q: StreamExpr, schemas: Mapping[str, Iterable[str]]) -> list[str] | None:
    """The attribute names of ``q``'s events when the input schemas are known (for the renaming maps)."""
    if isinstance(q, Stream):
        s = schemas.get(q.name)
        return None if s is None else list(s)
    if isinstance(q, (Select, Publish)):
        return _schema_of(q.input, schemas)
    if isinstance(q, Project):
        return [i.name for i in q.items]
    inner = _schema_of(q.input, schemas) if isinstance(q, (Aggregate, Rename)) else None
    if isinstance(q, Aggregate):
        return None if inner is None else list(dict.fromkeys(inner + [i.name for i in q.items]))
    if isinstance(q, Rename):
        m = dict(q.mapping)
        return None if inner is None else [m.get(a, a) for a in inner]
    if isinstance(q, (Sequence, Iteration)):
        lft, rgt = _schema_of(q.left, schemas), _schema_of(q.right, schemas)
        if lft is None or rgt is None:
            return None
        out = list(combine_attributes(dict.fromkeys(lft), dict.fromkeys(rgt)))
        if isinstance(q, Iteration):
            out = list(dict.fromkeys(out + [i.name for i in q.aggregates]))
        return out
    return None


def _split(conjs: list[_Conjunct]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    st = tuple(unparse_expr(c.expr) for c in conjs if _is_static(c.expr))
    dy = tuple(unparse_expr(c.expr) for c in conjs if not _is_static(c.expr))
    return st, dy


def _describe(rq: ResolvedQuery, chain: _Chain, schemas, spt: float, bounds: list) -> Automaton:
    nodes = [AutomatonNode("start", "start", chain.stream + "".join(f" | {_op_text(o)}" for o in chain.start_ops))]
    edges = []
    first_target = "n1" if chain.steps else "end"
    sel = [c for o in chain.start_ops if isinstance(o, Select) for c in _conjuncts(o.predicate)]
    edges.append(AutomatonEdge("start", first_target, "forward", static=_split(sel)[0] + _split(sel)[1],
                               transforms=tuple(_op_text(o) for o in chain.start_ops if not isinstance(o, Select))))
    for k, step in enumerate(chain.steps, 1):
        op, nid = step.op, f"n{k}"
        target = f"n{k + 1}" if k < len(chain.steps) else "end"
        theta = _conjuncts(op.theta)
        right_sel = [c for o in step.right_ops if isinstance(o, Select) for c in _conjuncts(o.predicate)]
        st, dy = _split(theta)
        st = tuple(unparse_expr(c.expr) for c in right_sel) + st
        index = tuple(f"{unparse_expr(a)} = {unparse_expr(b)}" for a, b in filter(None, map(_equality_key, theta)))
        kind = "NEXT" if isinstance(op, Sequence) else "FOLD"
        label = step.right_stream + "".join(f" | {_op_text(o)}" for o in step.right_ops)
        nodes.append(AutomatonNode(nid, kind, label, index, bounds[k - 1]))
        edges.append(AutomatonEdge(nid, nid, "filter", static=st, dynamic=dy))
        aggs = ()
        if isinstance(op, Iteration):
            aggs = tuple(f"{unparse_expr(i.expr)} AS {i.name}" for i in op.aggregates)
            rst, rdy = _split(_conjuncts(op.rebind))
            edges.append(AutomatonEdge(nid, nid, "rebind", static=st + rst, dynamic=dy + rdy, aggregates=aggs))
        renaming, rule = (), _RENAMING_RULE
        lsch, rsch = _schema_of(op.left, schemas or {}), _schema_of(op.right, schemas or {})
        if lsch is not None and rsch is not None:
            combined = combine_attributes({a: a for a in lsch}, dict.fromkeys(rsch))
            renaming = tuple((v, n) for n, v in combined.items() if v is not None and v != n)
            rule = ""
        outer = tuple(unparse_expr(o.predicate) for o in step.post_ops if isinstance(o, Select))
        edges.append(AutomatonEdge(nid, target, "forward", static=st, dynamic=dy, output_filter=outer,
                                   transforms=tuple(_op_text(o) for o in step.post_ops if not isinstance(o, Select)),
                                   aggregates=aggs, renaming=renaming, renaming_rule=rule))
    outs = ", ".join(rq.publishes) if rq.internal else \
        rq.name + (f" PUBLISH {', '.join(rq.publishes)}" if rq.publishes else "")
    nodes.append(AutomatonNode("end", "end", outs))
    reads = tuple(sorted({chain.stream} | {s.right_stream for s in chain.steps}))
    return Automaton(rq.name, tuple(nodes), tuple(edges), reads, rq.publishes, rq.internal)


def _chain_bounds(chain: _Chain, spt: float) -> list[int | None]:
    """Per node: the DUR bound of one query alone (θ's, or every path's to the output)."""
    bounds: list[int | None] = [None] * len(chain.steps)
    after = None                                            # bound of the rest of the chain
    for k in range(len(chain.steps) - 1, -1, -1):
        step = chain.steps[k]
        outer = _dur_upper_bound([c for o in step.post_ops if isinstance(o, Select)
                                  for c in _conjuncts(o.predicate)], spt)
        path = _min_bound(outer, after)
        b = _min_bound(_dur_upper_bound(_conjuncts(step.op.theta), spt), path)
        bounds[k] = after = b
    return bounds


def _min_bound(a, b):
    return b if a is None else (a if b is None else min(a, b))


def analyse(name: str, query: StreamExpr | str, schemas: Mapping | None = None,
            functions: Mapping[str, Callable] | None = None):
    """``grammar.event_analysis.analyse_query`` of a query given as text or AST: its unqualified names
    resolved (Cayuga's rule), names and types checked against ``schemas`` (stream -> {attribute: type}
    or attribute names; None: unknown).  Returns the ``AnalysedQuery``; raises ``AnalysisError``."""
    text = None
    if isinstance(query, str):
        from sparksub.grammar.events import parse_event_query
        text, query = query, parse_event_query(query)
    if not isinstance(query, StreamExpr):
        raise AnalysisError(f"not an event query: {query!r}")
    return analyse_query(query, schemas, name=name, text=text,
                         functions=[f for f in (functions or {}) if f not in FUNCTIONS])


def compile_query(name: str, query: StreamExpr | str, *, schemas: Mapping[str, Iterable[str]] | None = None,
                  seconds_per_tick: float = 1, functions: Mapping[str, Callable] | None = None,
                  publish_right_inputs: bool = True) -> CompiledQuery:
    """Compile one query (AST or CEL/algebra text) to its automata; raises a clear sparksub error for
    shapes without an automaton (UNION or non-left-deep with ``publish_right_inputs=False``), unknown
    functions, and what ``analyse`` refuses.  ``schemas`` (stream -> attribute names, or {attribute:
    type}) resolves unqualified names, checks names and types, and makes the renaming maps concrete."""
    query = analyse(name, query, schemas, functions).query
    fns = {**FUNCTIONS, **(functions or {})}
    automata = []
    for rq in resolve_query(name, query, publish_right_inputs=publish_right_inputs):
        for n in rq.expr.walk():                        # unknown functions: a compile-time error
            if isinstance(n, Call) and not (fns.get(n.name) or fns.get(n.name.lower())):
                raise AnalysisError(f"unknown function {n.name}() in event query {name!r}; "
                                    f"known: {', '.join(sorted(fns))}")
        chain = _decompose(rq.expr)
        automata.append(_describe(rq, chain, schemas, seconds_per_tick, _chain_bounds(chain, seconds_per_tick)))
    return CompiledQuery(name, query, tuple(automata))


def assigned_attributes(query: StreamExpr) -> frozenset:
    """Attributes some operator of ``query`` assigns a new value (a projection item ``x AS A`` other than
    ``A`` itself, an aggregate term, either side of a renaming, a FOLD aggregate)."""
    out: set[str] = set()
    for n in query.walk():
        if isinstance(n, Project):
            out.update(i.name for i in n.items if i.expr != Attr(i.name))
        elif isinstance(n, Aggregate):
            out.update(i.name for i in n.items)
        elif isinstance(n, Rename):
            out.update(a for pair in n.mapping for a in pair)
        elif isinstance(n, Iteration):
            out.update(i.name for i in n.aggregates)
    return frozenset(out)


def partition_key(query: StreamExpr | str, *, publish_right_inputs: bool = True) -> str | None:
    """The attribute ``A`` by whose value the query's events can be partitioned (DESIGN §6: "the
    parameter key for event queries with an equality parameter"), or None.

    ``A`` qualifies when every NEXT / FOLD of every automaton the query resolves to has a top-level θ
    conjunct ``$2.A = $1.A`` (or ``= $.A``) — so every event an instance ever combines has the same
    ``A`` as the instance's first event — and no operator anywhere assigns ``A`` (a projection item
    ``x AS A`` other than ``A`` itself, an aggregate term, a renaming): then every event, raw or
    published inside the query, carries the ``A`` of its partition.  A query without NEXT / FOLD is
    stateless and has no key (any partitioning works; callers put it with the unkeyed queries).

    >>> partition_key("SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock")
    'Name'
    >>> partition_key("SELECT * FROM Stock NEXT{$2.Price > $1.Price} Stock") is None
    True
    """
    if isinstance(query, str):
        from sparksub.grammar.events import parse_event_query
        query = parse_event_query(query)
    keys: set[str] | None = None
    assigned: set[str] = set()
    for rq in resolve_query("q", query, publish_right_inputs=publish_right_inputs):
        assigned |= assigned_attributes(rq.expr)
        for n in rq.expr.walk():
            if isinstance(n, (Sequence, Iteration)):
                mine = set()
                for c in _conjuncts(n.theta):
                    k = _equality_key(c)
                    if k and isinstance(k[0], Attr) and isinstance(k[1], Attr) and k[0].name == k[1].name:
                        mine.add(k[0].name)
                keys = mine if keys is None else keys & mine
    if not keys:
        return None
    keys -= assigned
    return min(keys) if keys else None


# ---------------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------------

class Match(NamedTuple):
    """One match: the query's name and its output event (attributes plus t0, t1)."""

    query: str
    event: dict


class EventError(NamedTuple):
    """A run-time evaluation error charged to the query that raised it (DESIGN §7): the event it was
    evaluating (its stream — an input stream or a published one — and interval) and the message.  The
    evaluation that raised failed for that query alone: the event was dropped at that operator, or the
    NEXT / FOLD step was not taken (``cayuga_reference``'s module docstring); nothing else changed."""

    query: str
    stream: str
    t0: int
    t1: int
    message: str


class _Raised(NamedTuple):
    """A memoised evaluation that raised (a static conjunct, a source's operators)."""

    error: AnalysisError


_RENAME_PLANS: dict = {}


def _combine(left: dict, right: dict) -> dict:
    """``combine_attributes`` with its renaming plan cached per pair of attribute lists."""
    sig = (tuple(left), tuple(right))
    plan = _RENAME_PLANS.get(sig)
    if plan is None:
        if len(_RENAME_PLANS) > 10000:
            _RENAME_PLANS.clear()
        plan = _RENAME_PLANS[sig] = tuple(combine_attributes(dict.fromkeys(left), dict.fromkeys(right)))[:len(left)]
    out = dict(zip(plan, left.values()))
    out.update(right)
    return out


class _Ops:
    """A chain of unary operators, compiled (σ, π, α, ρ of 004 §2.2), applied to one event."""

    __slots__ = ("ops",)

    def __init__(self, ops, fns, spt):
        compiled = []
        for o in ops:
            if isinstance(o, Select):
                compiled.append(("select", [_holds_fn(c, fns, spt) for c in _conjuncts(o.predicate)]))
            elif isinstance(o, (Project, Aggregate)):
                compiled.append((type(o).__name__, [(i.name, _compile_expr(i.expr, fns, spt)) for i in o.items]))
            else:
                compiled.append(("rename", dict(o.mapping)))
        self.ops = compiled

    def apply(self, attrs: dict, t0: int, t1: int) -> dict | None:
        d = t1 - t0 + 1
        for kind, x in self.ops:
            if kind == "select":
                for f in x:
                    if not f(attrs, None, None, d):
                        return None
            elif kind == "Project":
                attrs = {n: f(attrs, None, None, d) for n, f in x}
            elif kind == "Aggregate":
                attrs = {**attrs, **{n: f(attrs, None, None, d) for n, f in x}}
            else:
                attrs = rename_attributes(attrs, x)
        return attrs


class _Source:
    """A stateless pipeline over one input stream: leading selections (indexed as static conjuncts of
    the consumers' guards) and the remaining operators, memoised per event."""

    def __init__(self, key, stream: str, ops: tuple, fns, spt):
        self.key, self.stream = key, stream
        lead = 0
        while lead < len(ops) and isinstance(ops[lead], Select):
            lead += 1
        self.guard = [c for o in ops[:lead] for c in _conjuncts(o.predicate)]
        self.guard_fns = [_holds_fn(c, fns, spt) for c in self.guard]
        self.post = _Ops(ops[lead:], fns, spt)
        self.pure = lead == len(ops)          # no transformation: output attributes = the event's


class _Instance:
    __slots__ = ("node", "left", "last", "t0", "t1", "key", "serial", "bucket", "alive")

    def size(self) -> int:
        n = sys.getsizeof(self) + sys.getsizeof(self.left)
        return n + (sys.getsizeof(self.last) if self.last is not None and self.last is not self.left else 0)


class _Group:
    """Forward edges out of a node (or the start) that share their operators U_k (keyed by E_k)."""

    def __init__(self, key, ops: _Ops, upper: int | None):
        self.key, self.ops, self.upper = key, ops, upper
        self.successors: list[_Node] = []
        self.outputs: list[str] = []


class _Node:
    """A merged automaton state (004 §3): one per distinct ``B_k(E_{k-1}, R_k)``."""

    def __init__(self, key, step: _Step, source: _Source, fns, spt):
        op = step.op
        self.key, self.fold = key, isinstance(op, Iteration)
        self.source = source
        theta = _conjuncts(op.theta)
        self.theta_bound = _dur_upper_bound(theta, spt)
        static = [c for c in theta if _is_static(c.expr)]
        dynamic = [c for c in theta if not _is_static(c.expr)]
        if source.pure:   # θ's static conjuncts read the raw event: they join the guard (indexed)
            self.guard = source.guard + [_Conjunct(_to_plain(c.expr), c.from_and) for c in static]
            self.residual = []
        else:
            self.guard = source.guard
            self.residual = [_holds_fn(c, fns, spt) for c in static]
        self.dynamic = [_holds_fn(c, fns, spt) for c in dynamic]
        self.all_theta = [_holds_fn(c, fns, spt) for c in theta]
        self.static_on_raw = [_holds_fn(_Conjunct(_to_plain(c.expr), c.from_and), fns, spt) for c in static] \
            if source.pure else self.residual
        rebind = getattr(op, "rebind", None)
        self.rebind = None if rebind is None else _holds_fn(_Conjunct(rebind, False), fns, spt)
        self.aggregates = [(i.name, _compile_expr(i.expr, fns, spt)) for i in getattr(op, "aggregates", ())]
        eqs = [k for k in map(_equality_key, theta) if k]
        self.event_key = [_compile_expr(a, fns, spt) for a, _ in eqs]
        self.instance_key = [_compile_expr(b, fns, spt) for _, b in eqs]
        self.key_reads_last = any(Scope.LAST in _scopes(b) for _, b in eqs)
        self.key_signature = tuple(_to_plain(a) for a, _ in eqs)   # the event side, on the raw event
        self.keyed: _KeyedNodes | None = None
        self.guard_ids: tuple[int, ...] = ()
        self.groups: dict[Any, _Group] = {}
        self.buckets: dict[Any, dict[int, _Instance]] = {}
        self.count = 0
        self.bound: int | None = None


_UNINDEXED = object()          # the bucket of instances whose key could not be hashed
_UNION_FEED = "\x00union:"     # _close_tick: the pseudo-query feeding a UNION's merged stream
_NOKEY = object()              # _step: the event's key is not computed yet
_ALL = object()                # _step: visit every bucket


class _KeyedNodes:
    """004 §3.2 "Identifying affected instances", across nodes: for one event-side key (e.g. ``$2.Name``
    on one stream), key value -> the nodes holding instances with that binding value.  An event
    computes its key once and visits only those nodes (and only that bucket in each)."""

    def __init__(self, key_fns):
        self.key_fns = key_fns
        self.by_key: dict[Any, dict[_Node, None]] = {}
        self.unindexed: dict[_Node, None] = {}

    def nodes(self) -> list:
        out = dict(self.unindexed)
        for d in self.by_key.values():
            out.update(d)
        return list(out)
_ERROR = object()              # a guard conjunct whose evaluation raised


class _StaticIndex:
    """Per input stream: guards (conjunctions on the raw event) indexed on one access conjunct each
    (004 §3.2 "Evaluating static predicates"); every conjunct evaluated at most once per event."""

    _FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}

    def __init__(self, fns, spt):
        self.fns, self.spt = fns, spt
        self.conj_ids: dict[_Conjunct, int] = {}
        self.conj_fns: list[Callable] = []
        self.guard_ids: dict[tuple, int] = {}
        self.guards: list[tuple[int, ...]] = []
        self.consumers: list[list] = []
        self.always: list[int] = []
        self.deferrable: set[int] = set()        # conjuncts taken from θ (evaluated only on pairs)
        self.eq: dict[str, dict[Any, list[int]]] = {}
        self.ranges: dict[tuple[str, str, bool], tuple[list, list]] = {}  # (attr, op, is_str) -> (sorted c, gid)

    def conjunct(self, c: _Conjunct) -> int:
        i = self.conj_ids.get(c)
        if i is None:
            i = self.conj_ids[c] = len(self.conj_fns)
            self.conj_fns.append(_holds_fn(c, self.fns, self.spt))
        return i

    def add(self, guard: list[_Conjunct], consumer, deferrable: int = 0) -> None:
        """``guard``'s last ``deferrable`` conjuncts come from θ: their errors are deferred."""
        ids = tuple(self.conjunct(c) for c in guard)
        self.deferrable.update(ids[len(ids) - deferrable:] if deferrable else ())
        gid = self.guard_ids.get(ids)
        if gid is None:
            gid = self.guard_ids[ids] = len(self.guards)
            self.guards.append(ids)
            self.consumers.append([])
            self._index(gid, guard)
        self.consumers[gid].append(consumer)

    def remove(self, consumer) -> None:
        """Detach a consumer; a guard left without consumers leaves the index."""
        for ids, gid in list(self.guard_ids.items()):
            if consumer in self.consumers[gid]:
                self.consumers[gid].remove(consumer)
                if not self.consumers[gid]:
                    del self.guard_ids[ids]
                    self._unindex(gid)
                return

    def _unindex(self, gid) -> None:
        if gid in self.always:
            self.always.remove(gid)
        for table in self.eq.values():
            for gids in table.values():
                if gid in gids:
                    gids.remove(gid)
        for cs, gs in self.ranges.values():
            if gid in gs:
                i = gs.index(gid)
                del cs[i], gs[i]

    def _index(self, gid, guard) -> None:
        access = None
        for c in guard:                               # prefer an equality, then a range
            a = self._access(c.expr)
            if a and (access is None or (a[1] == "=" and access[1] != "=")):
                access = a
        if access is None:
            self.always.append(gid)
        elif access[1] == "=":
            self.eq.setdefault(access[0], {}).setdefault(access[2], []).append(gid)
        else:
            name, op, c = access
            cs, gs = self.ranges.setdefault((name, op, isinstance(c, str)), ([], []))
            i = bisect_right(cs, c)
            cs.insert(i, c)
            gs.insert(i, gid)

    def _access(self, e):
        if not isinstance(e, Compare) or e.op not in self._FLIP:
            return None
        for a, b, op in ((e.left, e.right, e.op), (e.right, e.left, self._FLIP[e.op])):
            if isinstance(a, Attr) and isinstance(b, Const) and (op == "=" or not isinstance(b.value, bool)):
                return a.name, op, b.value
        return None

    def candidates(self, ev: dict) -> Iterable[int]:
        yield from self.always
        for name, table in self.eq.items():
            v = ev.get(name)
            if v is None:
                continue
            try:
                yield from table.get(v, ())
            except TypeError:                      # unhashable value: no constant equals it
                pass
        for (name, op, is_str), (cs, gs) in self.ranges.items():
            v = ev.get(name)
            if v is None or isinstance(v, str) != is_str or (isinstance(v, float) and math.isnan(v)):
                continue
            if not is_str and not isinstance(v, (int, float)):
                continue
            if op == ">":          # v > c: the constants below v
                yield from gs[:bisect_left(cs, v)]
            elif op == ">=":
                yield from gs[:bisect_right(cs, v)]
            elif op == "<":
                yield from gs[bisect_right(cs, v):]
            else:
                yield from gs[bisect_left(cs, v):]


class NFAEngine:
    """Runs many compiled event queries over event streams, with the multi-query optimisations of
    004 §3 (each can be switched off to measure it; the output never changes)."""

    def __init__(self, *, seconds_per_tick: float = 1, share_prefixes: bool = True, index_static: bool = True,
                 index_instances: bool = True, expire: bool = True, publish_right_inputs: bool = True,
                 functions: Mapping[str, Callable] | None = None):
        self.spt = seconds_per_tick
        self.share_prefixes, self.index_static = share_prefixes, index_static
        self.index_instances, self.expire = index_instances, expire
        self.publish_right_inputs = publish_right_inputs
        self.fns = {**FUNCTIONS, **(functions or {})}
        self.queries: dict[str, CompiledQuery] = {}
        self._resolved: dict[str, ResolvedQuery] = {}     # every automaton (user and internal) by name
        self._publisher: dict[str, str] = {}              # stream -> resolved query publishing it
        self._union_sides: dict[str, list] = {}           # UNION stream -> its two input queries
        self._union_buffer: dict[str, dict] = {}          # UNION stream -> side -> events of this tick
        self._readers: dict[str, set] = {}                # stream -> resolved queries reading it
        self._depth: dict[str, int] = {}                  # resolved query -> 1 + depth of what it reads
        self._dirty: set[str] = set()                     # resolved queries with matches this tick
        self._index: dict[str, _StaticIndex] = {}
        self._keyed: dict[str, dict[tuple, _KeyedNodes]] = {}   # stream -> event-side key -> nodes
        self._sources: dict[Any, _Source] = {}
        self._starts: dict[Any, _Group] = {}
        self._nodes: dict[Any, _Node] = {}
        self._pending_out: dict[str, list] = {}
        self._released: list[Match] = []
        self._pending_inst: list[_Instance] = []
        self._owned: dict[str, list[str]] = {}            # user query -> its resolved queries
        self._positions: dict[str, int] = {}
        self._expiry: list = []
        self._tick: int | None = None
        self._serial = 0
        self._nodes_unshared = 0
        self._user_of: dict[str, str] = {}                # resolved query -> the user query owning it
        self._published_schemas: dict[str, Any] = {}      # stream -> its attributes (kinds), for readers
        self._errors: dict[tuple, EventError] = {}        # evaluation errors not yet taken
        self._current: tuple = ("", 0, 0)                 # (stream, t0, t1) of the event being ingested
        self._s = dict(events=0, guards_checked=0, conjuncts_evaluated=0, nodes_visited=0,
                       instances_visited=0, edges_evaluated=0, instances_created=0, instances_expired=0,
                       instances_unmatchable=0, matches=0, evaluation_errors=0)

    # ---- registration ------------------------------------------------------------------------------
    def register(self, name: str, query: StreamExpr | str, *, schemas=None) -> CompiledQuery:
        """Compile and add a query (AST or CEL/algebra text); returns its description.  ``schemas``
        (stream -> {attribute: type}, or attribute names): the query is resolved and checked against
        them and the streams earlier queries PUBLISH (``analyse``); without a schema, an unqualified
        name inside NEXT / FOLD braces cannot be resolved and is refused."""
        if name in self.queries:
            raise AnalysisError(f"event query {name!r} is already registered")
        analysed = self._analyse(name, query, schemas)
        compiled = compile_query(name, analysed.query, schemas=schemas, seconds_per_tick=self.spt,
                                 functions=self.fns, publish_right_inputs=self.publish_right_inputs)
        resolved = resolve_query(name, compiled.query, publish_right_inputs=self.publish_right_inputs)
        for rq in resolved:
            for p in rq.publishes:
                if p in self._publisher or (rq.union_side is None and sum(p in r.publishes for r in resolved) > 1):
                    raise AnalysisError(f"stream {p!r} is published twice")
        producers = dict(self._publisher)
        for rq in resolved:
            producers.update({p: rq.name for p in rq.publishes if p not in producers or rq.union_side is None})
        if any(s in producers for rq in resolved for s in rq.expr.streams()):   # else no cycle is possible
            self._check_acyclic(producers, {**self._resolved, **{r.name: r for r in resolved}},
                                [r.name for r in resolved])
        for rq in resolved:
            if rq.union_side is not None:
                self._union_sides.setdefault(rq.publishes[0], [None, None])[rq.union_side] = rq.name
        for rq in resolved:
            self._add(rq)
            self._user_of[rq.name] = name
        self.queries[name] = compiled
        self._owned[name] = [rq.name for rq in resolved]
        self._published_schemas.update(analysed.published)
        self._publisher = producers
        self._reorder([rq.name for rq in resolved])
        self._recompute_bounds(resolved)
        return compiled

    def _analyse(self, name: str, query, schemas):
        """``analyse`` against ``schemas`` and the streams registered queries PUBLISH (refused: raises)."""
        known = dict(self._published_schemas) if schemas is None else {**self._published_schemas, **schemas}
        return analyse(name, query, known or None, self.fns)

    @staticmethod
    def _check_acyclic(producers, resolved, new=None) -> None:
        """No query reads (through published streams) what it publishes.  Only paths from the ``new``
        queries are followed: the registered ones were acyclic before."""
        state: dict[str, int] = {}
        publishers: dict[str, list] = {}
        for r, rq in resolved.items():
            for s in rq.publishes:
                publishers.setdefault(s, []).append(r)

        def visit(qn):
            if state.get(qn) == 2:
                return
            if state.get(qn) == 1:
                raise AnalysisError(f"event queries read each other's published streams in a cycle (at {qn!r})")
            state[qn] = 1
            for s in resolved[qn].expr.streams():
                if s in producers:
                    for p in publishers.get(s) or [producers[s]]:
                        visit(p)            # (every input of a UNION publishes its stream)
            state[qn] = 2
        for qn in (resolved if new is None else new):
            visit(qn)

    def _reorder(self, new: list[str] | None = None) -> None:
        """Depths (producers before consumers) for ``_close_tick``.  With ``new`` (queries just added)
        only theirs are computed, unless one of them publishes a stream older queries read."""
        if new is not None:
            fresh = set(new)
            published = {p for qn in new for p in self._resolved[qn].publishes}
            if not any(q not in fresh for p in published for q in self._readers.get(p, ())):
                depth = self._depth
                for qn in new:
                    depth.pop(qn, None)
            else:
                depth = {}
        else:
            depth = {}

        def d(qn):
            if qn not in depth:
                depth[qn] = 1 + max([producer(s) for s in self._resolved[qn].expr.streams()
                                     if s in self._publisher] or [0])
            return depth[qn]

        def producer(s):            # a UNION's stream is fed after both its inputs: a half-step later
            sides = self._union_sides.get(s)
            if sides is None:
                return d(self._publisher[s])
            depth[_UNION_FEED + s] = max(d(q) for q in sides) + 0.5
            return depth[_UNION_FEED + s]
        for qn in (self._resolved if new is None or depth is not self._depth else new):
            d(qn)
        for s in self._union_sides:
            if _UNION_FEED + s not in depth:
                producer(s)
        self._depth = depth

    def _key(self, qname, ast):
        return ast if self.share_prefixes else (qname, ast)

    def _source(self, qname, stream, ops, expr) -> _Source:
        key = self._key(qname, expr)
        s = self._sources.get(key)
        if s is None:
            s = self._sources[key] = _Source(key, stream, ops, self.fns, self.spt)
        return s

    def _static(self, stream) -> _StaticIndex:
        if stream not in self._index:
            self._index[stream] = _StaticIndex(self.fns, self.spt)
        return self._index[stream]

    def _group(self, table: dict, qname, expr, ops) -> _Group:
        key = self._key(qname, expr)
        g = table.get(key)
        if g is None:
            conj = [c for o in ops if isinstance(o, Select) for c in _conjuncts(o.predicate)]
            g = table[key] = _Group(key, _Ops(ops, self.fns, self.spt), _dur_upper_bound(conj, self.spt))
        return g

    def _add(self, rq: ResolvedQuery) -> None:
        chain = _decompose(rq.expr)
        self._resolved[rq.name] = rq
        for st in rq.expr.streams():
            self._readers.setdefault(st, set()).add(rq.name)
        self._pending_out.setdefault(rq.name, [])
        self._nodes_unshared += len(chain.steps)
        src = self._source(rq.name, chain.stream, chain.start_ops, chain.start_expr)
        is_new = self._key(rq.name, chain.start_expr) not in self._starts
        group = self._group(self._starts, rq.name, chain.start_expr, ())
        if is_new:
            group.source = src
            self._static(chain.stream).add(src.guard, group)
        prev = group
        for step in chain.steps:
            key = self._key(rq.name, step.op)
            node = self._nodes.get(key)
            if node is None:
                rsrc = self._source(rq.name, step.right_stream, step.right_ops, step.right_expr)
                node = self._nodes[key] = _Node(key, step, rsrc, self.fns, self.spt)
                index = self._static(step.right_stream)
                n_theta = len(node.guard) - len(rsrc.guard)
                if self.index_instances and rsrc.pure and node.key_signature:
                    # keyed: found through its instances' binding values, guard checked per visit
                    node.guard_ids = tuple(index.conjunct(c) for c in node.guard)
                    index.deferrable.update(node.guard_ids[len(node.guard_ids) - n_theta:] if n_theta else ())
                    table = self._keyed.setdefault(step.right_stream, {})
                    if node.key_signature not in table:
                        table[node.key_signature] = _KeyedNodes(
                            [_compile_expr(e, self.fns, self.spt) for e in node.key_signature])
                    node.keyed = table[node.key_signature]
                else:
                    index.add(node.guard, node, n_theta)
            if node not in prev.successors:
                prev.successors.append(node)
            prev = self._group(node.groups, rq.name, step.out_expr, step.post_ops)
        if rq.name not in prev.outputs:
            prev.outputs.append(rq.name)

    def _recompute_bounds(self, paths: list | None = None) -> None:
        """004 §3-style expiry (d): a node's bound is θ's DUR bound, else the loosest over its forward
        groups of (the group's outer DUR bound, the tightest continuation).  ``paths`` (resolved queries
        just added): only their nodes change — a node's bound depends on its successors, which are on
        the same path or unchanged — so only those are recomputed, last node first."""
        if paths is not None:
            for rq in paths:
                for step in reversed(_decompose(rq.expr).steps):
                    n = self._nodes[self._key(rq.name, step.op)]
                    n.bound = self._node_bound(n, lambda x: x.bound)
            return
        done: dict[int, int | None] = {}

        def node_bound(n: _Node):
            if id(n) not in done:
                done[id(n)] = n.bound = self._node_bound(n, node_bound)
            return done[id(n)]
        for n in self._nodes.values():
            node_bound(n)

    @staticmethod
    def _node_bound(n: _Node, successor_bound) -> int | None:
        worst = -1
        for g in n.groups.values():
            conts = [successor_bound(s) for s in g.successors] + ([None] if g.outputs else [])
            cont = None if (None in conts or not conts) else max(conts)
            b = _min_bound(g.upper, cont)
            if b is None:
                return n.theta_bound
            worst = max(worst, b)
        return _min_bound(n.theta_bound, worst)

    def unregister(self, name: str) -> None:
        """Remove a query: its outputs, and the nodes, edges and instances no other query shares."""
        if name not in self.queries:
            raise AnalysisError(f"no event query {name!r}")
        owned = set(self._owned[name])
        for qn in owned:
            for p in self._resolved[qn].publishes:
                readers = [r for r in self._readers.get(p, ()) if r not in owned]
                if readers:
                    raise AnalysisError(f"cannot drop {name!r}: {sorted(readers)} read its stream {p!r}")
        paths = []
        for qn in owned:
            rq = self._resolved.pop(qn)
            self._user_of.pop(qn, None)
            paths.append([self._key(qn, step.op) for step in _decompose(rq.expr).steps])
            self._depth.pop(qn, None)
            for st in rq.expr.streams():
                self._readers.get(st, set()).discard(qn)
            for p in rq.publishes:
                self._publisher.pop(p, None)
                self._published_schemas.pop(p, None)
                self._union_sides.pop(p, None)
                self._depth.pop(_UNION_FEED + p, None)
            self._pending_out.pop(qn, None)
            self._dirty.discard(qn)
            self._nodes_unshared -= self._drop_path(rq)
        del self.queries[name], self._owned[name]
        # Nothing left reads what the dropped queries published (checked above), so no other depth
        # changes; only the nodes left on the dropped paths can get tighter expiry bounds.
        for keys in paths:
            for k in reversed(keys):
                n = self._nodes.get(k)
                if n is not None:
                    n.bound = self._node_bound(n, lambda x: x.bound)

    def _drop_path(self, rq: ResolvedQuery) -> int:
        """Detach ``rq`` from its path of groups and nodes, pruning what nothing else uses."""
        chain = _decompose(rq.expr)
        start_key = self._key(rq.name, chain.start_expr)
        path = [(self._starts, start_key, self._starts[start_key])]
        for step in chain.steps:
            node = self._nodes[self._key(rq.name, step.op)]
            gkey = self._key(rq.name, step.out_expr)
            path.append((node.groups, gkey, node.groups[gkey]))
        _, _, last_group = path[-1]
        if rq.name in last_group.outputs:
            last_group.outputs.remove(rq.name)
        for k in range(len(path) - 1, -1, -1):
            table, gkey, g = path[k]
            if g.outputs or g.successors:
                break
            del table[gkey]
            if k == 0:
                self._index[chain.stream].remove(g)
                break
            node = self._nodes[self._key(rq.name, chain.steps[k - 1].op)]
            if node.groups:
                break
            for b in node.buckets.values():          # the node's instances go with it
                for inst in b.values():
                    inst.alive = False
            node.buckets.clear()
            if node.keyed is not None:
                node.keyed.unindexed.pop(node, None)
                for v in list(node.keyed.by_key):
                    node.keyed.by_key[v].pop(node, None)
                    if not node.keyed.by_key[v]:
                        del node.keyed.by_key[v]
            else:
                self._index[chain.steps[k - 1].right_stream].remove(node)
            node.count = 0
            del self._nodes[node.key]
            path[k - 1][2].successors.remove(node)
        return len(chain.steps)

    # ---- running ------------------------------------------------------------------------------------
    def process(self, stream: str, event: Mapping) -> list[Match]:
        """Feed one event (attributes plus integer t0 <= t1; events in end-time order across streams).
        Returns the matches released so far: those of ticks that this event closed."""
        t0, t1 = event.get("t0"), event.get("t1")
        if t0 is None and t1 is None:
            raise AnalysisError("NFAEngine.process needs events with t0/t1 (run() numbers them like the oracle)")
        if t0 is None or t1 is None:
            t0 = t1 = t1 if t0 is None else t0
        if not (isinstance(t0, int) and isinstance(t1, int)) or t0 > t1:
            raise AnalysisError(f"event of {stream!r}: needs integer t0 <= t1, got ({t0!r}, {t1!r})")
        if stream in self._publisher:
            raise AnalysisError(f"stream {stream!r} is published by query {self._publisher[stream]!r}")
        if self._tick is not None and t1 < self._tick:
            raise AnalysisError(f"events must arrive in end-time order: t1={t1} after t1={self._tick}")
        if self._tick is not None and t1 > self._tick:
            self._close_tick()
        if self._tick != t1:
            self._tick = t1
            self._expire(t1)
        attrs = {k: v for k, v in event.items() if k not in ("t0", "t1")}
        self._ingest(stream, attrs, t0, t1)
        out, self._released = self._released, []
        return out

    def flush(self) -> list[Match]:
        """Close the current tick: release its matches (and feed its published events)."""
        if self._tick is not None:
            self._close_tick()
        out, self._released = self._released, []
        return out

    def take_errors(self) -> list[EventError]:
        """The evaluation errors since the last call, one per (query, event evaluated), in order: each
        charged to the query that raised it (DESIGN §7; ``EventError``)."""
        out = list(self._errors.values())
        self._errors.clear()
        return out

    def _charge(self, where, error: AnalysisError) -> None:
        """An evaluation at ``where`` (a start group, a node, a forward group) raised on the event being
        ingested: it failed for the queries whose automata pass there, and only for them."""
        stream, t0, t1 = self._current
        self._s["evaluation_errors"] = self._s.get("evaluation_errors", 0) + 1
        for q in self._queries_below(where):
            self._errors.setdefault((q, stream, t0, t1), EventError(q, stream, t0, t1, str(error)))

    def _queries_below(self, where) -> list[str]:
        """The user queries whose outputs are reachable from a group or node (prefix sharing: all of
        them evaluate exactly what raised there, so each alone would have raised too)."""
        out: dict[str, None] = {}
        todo, seen = [where], set()
        while todo:
            x = todo.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if isinstance(x, _Group):
                out.update((self._user_of.get(q, q), None) for q in x.outputs)
                todo.extend(x.successors)
            else:
                todo.extend(x.groups.values())
        return list(out)

    def run(self, streams: Mapping[str, Iterable[Mapping]], errors: dict | None = None) -> dict[str, list[dict]]:
        """Like ``cayuga_reference.evaluate_queries``: every registered query over finite streams
        (events without t0/t1 are the n-th of their list; each stream ordered by t1, stable).
        Returns query name -> output events in the oracle's order; ``errors``, if given, receives
        query name -> its ``EventError``s."""
        merged = self._merged(streams)
        results: dict[str, list[dict]] = {q: [] for q in self.queries}
        for *_, name, e in merged:
            for m in self.process(name, e):
                results[m.query].append(m.event)
        return self._finish_run(results, errors)

    def _merged(self, streams: Mapping[str, Iterable[Mapping]]) -> list[tuple]:
        """``run``'s input: every event as (t1, stream order, n, stream, event with t0/t1), in processing
        order (each stream by t1, stable; streams in turn within a tick)."""
        for s in streams:
            if s in self._publisher:
                raise AnalysisError(f"stream {s!r} is published twice (or is an input stream)")
        for rq in self._resolved.values():
            for s in rq.expr.streams():
                if s not in streams and s not in self._publisher:
                    raise AnalysisError(f"unknown stream {s!r}; known: {sorted(set(streams) | set(self._publisher))}")
        merged = []
        for order, (name, events) in enumerate(streams.items()):
            for n, e in enumerate(events):
                t0, t1 = e.get("t0"), e.get("t1")
                if t0 is None and t1 is None:
                    t0 = t1 = n
                elif t0 is None or t1 is None:
                    t0 = t1 = t1 if t0 is None else t0
                if not (isinstance(t0, int) and isinstance(t1, int)) or t0 > t1:
                    raise AnalysisError(f"event {n} of {name!r}: needs integer t0 <= t1, got ({t0!r}, {t1!r})")
                merged.append((t1, order, n, name, {**e, "t0": t0, "t1": t1}))
        merged.sort(key=lambda x: x[:3])
        return merged

    def _finish_run(self, results: dict, errors: dict | None) -> dict[str, list[dict]]:
        """``run``'s end: flush, and the errors by query."""
        for m in self.flush():
            results[m.query].append(m.event)
        taken = self.take_errors()
        if errors is not None:
            for q in self.queries:
                errors.setdefault(q, [])
            for err in taken:
                errors.setdefault(err.query, []).append(err)
        return results

    def _expire(self, now: int) -> None:
        self._expire_heap(self._expiry, now, self._remove)

    def _expire_heap(self, heap: list, now: int, remove) -> None:
        """Pop the instances whose deadline passed: ``remove`` those still bound to expire (a node's
        bound may have loosened since: then the instance goes back with its new deadline)."""
        while heap and heap[0][0] < now:
            _, _, inst = heapq.heappop(heap)
            if not inst.alive:
                continue
            b = inst.node.bound
            if b is not None and now > inst.t0 + b - 1:
                remove(inst)
                self._s["instances_expired"] += 1
            elif b is not None:
                heapq.heappush(heap, (inst.t0 + b - 1, inst.serial, inst))

    def _ingest(self, stream: str, attrs: dict, t0: int, t1: int) -> None:
        index = self._index.get(stream)
        pos = self._positions.get(stream, 0)
        self._positions[stream] = pos + 1
        self._s["events"] += 1
        if index is None:
            return
        self._current = (stream, t0, t1)
        key = (t1, pos)
        conj_memo: dict[int, bool] = {}
        out_memo: dict[Any, dict | None] = {}
        s = self._s
        fns = index.conj_fns
        if self.index_static:
            gids = index.candidates(attrs)
        else:
            gids = range(len(index.guards))
        seen = set()
        d = t1 - t0 + 1

        def guard(cids) -> tuple[bool, bool, AnalysisError | None]:
            """(holds, deferred, error) of a conjunction of the event's static conjuncts, each evaluated
            once per event.  A FILTER conjunct that raises fails the guard with its error (charged to the
            guard's consumers); one of θ's is deferred: evaluated again on pairs only, as the oracle does."""
            s["guards_checked"] += 1
            deferred = False
            for cid in cids:
                v = conj_memo.get(cid)
                if v is None:
                    s["conjuncts_evaluated"] += 1
                    try:
                        v = fns[cid](attrs, None, None, d)
                    except AnalysisError as err:
                        v = _ERROR if cid in index.deferrable else _Raised(err)
                    conj_memo[cid] = v
                if v is _ERROR:
                    deferred = True
                elif type(v) is _Raised:
                    return False, deferred, v.error
                elif not v:
                    return False, deferred, None
            return True, deferred, None

        def source_guard(src) -> bool:
            """The source's own selections, evaluated again when a θ conjunct of the guard raised."""
            return all([f(attrs, None, None, d) for f in src.guard_fns])

        for gid in gids:
            if gid in seen:
                continue
            seen.add(gid)
            ok, deferred, err = guard(index.guards[gid])
            if err is not None:
                for consumer in index.consumers[gid]:
                    self._charge(consumer, err)
            if not ok:
                continue
            for consumer in index.consumers[gid]:
                src = consumer.source
                try:
                    if deferred and not source_guard(src):
                        continue
                    if not src.post.ops:
                        r = attrs
                    elif id(src) in out_memo:
                        r = out_memo[id(src)]
                    else:
                        r = out_memo[id(src)] = src.post.apply(attrs, t0, t1)
                except AnalysisError as raised:
                    r = out_memo[id(src)] = _Raised(raised)
                if type(r) is _Raised:
                    self._charge(consumer, r.error)       # dropped at the source's operators
                    continue
                if r is None:
                    continue
                if isinstance(consumer, _Group):
                    self._fire(consumer, r, t0, t1, key)
                else:
                    self._step(consumer, r, t0, t1, deferred)
        for reg in self._keyed.get(stream, {}).values():
            try:
                k = tuple(f(attrs, None, None, 1) for f in reg.key_fns)
                if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in k):
                    nodes = list(reg.unindexed)
                else:
                    nodes = list({**reg.by_key.get(k, {}), **reg.unindexed})
            except (AnalysisError, TypeError):
                k, nodes = _ALL, reg.nodes()
            for node in nodes:
                ok, deferred, err = guard(node.guard_ids)
                if err is not None:
                    self._charge(node, err)
                try:
                    if ok and deferred and not source_guard(node.source):
                        ok = False
                except AnalysisError as raised:
                    self._charge(node, raised)
                    ok = False
                if ok:
                    self._step(node, attrs, t0, t1, deferred, k)
        for inst in self._pending_inst:
            self._insert(inst)
        self._pending_inst = []

    def _step(self, node: _Node, r: dict, t0: int, t1: int, deferred: bool = False, key=_NOKEY) -> None:
        """An event of the node's right input at every affected instance (004 §2.3 edges)."""
        s = self._s
        s["nodes_visited"] += 1
        if not node.count:
            return
        theta = node.dynamic
        if not self.index_static or deferred:
            theta = node.all_theta
        else:
            for f in node.residual:
                s["edges_evaluated"] += 1
                try:
                    if not f(r, None, None, 1):
                        return
                except AnalysisError:       # evaluated again, per instance, as the oracle does
                    theta = node.all_theta
                    break
        if key is _ALL:
            buckets = list(node.buckets.values())
        elif key is not _NOKEY:
            buckets = [node.buckets.get(key, {}), node.buckets.get(_UNINDEXED, {})]
        elif self.index_instances and node.event_key:
            try:
                k = tuple(f(r, None, None, 1) for f in node.event_key)
                if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in k):
                    buckets = [node.buckets.get(_UNINDEXED, {})]
                else:
                    buckets = [node.buckets.get(k, {}), node.buckets.get(_UNINDEXED, {})]
            except (AnalysisError, TypeError):
                buckets = list(node.buckets.values())
        else:
            buckets = list(node.buckets.values())
        for bucket in buckets:
            for inst in list(bucket.values()):
                if not inst.alive:
                    continue
                s["instances_visited"] += 1
                if t0 <= inst.t1:                   # e2 must start after the instance's t1
                    continue
                d = t1 - inst.t0 + 1
                s["edges_evaluated"] += 1
                left, last = inst.left, inst.last
                try:
                    if not all([f(r, left, last, d) for f in theta]):   # all evaluated, as the oracle's AND
                        continue                    # filter edge (¬θ): bindings unchanged
                    if node.fold:
                        aggs = {n: f(r, left, last, d) for n, f in node.aggregates}
                        rebind = node.rebind is None or node.rebind(r, left, last, d)
                except AnalysisError as err:        # the step raised: not taken, for this node's queries
                    self._charge(node, err)
                    continue
                if not node.fold:                   # NEXT: first match only, the instance moves on
                    self._remove(inst)
                    self._forward(node, _combine(left, r), inst.t0, t1, (t1, inst.key))
                    continue
                if node.rebind is not None:
                    s["edges_evaluated"] += 1
                out = _combine(left, r)
                if aggs:
                    out.update(aggs)
                self._forward(node, out, inst.t0, t1, (t1, inst.key))
                if rebind:                          # rebind edge: $ replaced, the chain continues
                    inst.last = {**last, **r, **aggs}
                    inst.t1 = t1
                    if node.key_reads_last and self.index_instances and node.event_key:
                        self._remove(inst)
                        inst.alive = True
                        self._insert(inst, fresh=False)
                else:                               # only the forward edge: the chain ends
                    self._remove(inst)

    def _forward(self, node: _Node, attrs: dict, t0: int, t1: int, key) -> None:
        for g in node.groups.values():
            self._s["edges_evaluated"] += 1
            self._fire(g, attrs, t0, t1, key)

    def _fire(self, g: _Group, attrs: dict, t0: int, t1: int, key) -> None:
        try:
            out = g.ops.apply(attrs, t0, t1) if g.ops.ops else attrs
        except AnalysisError as err:        # an outer selection / projection raised: this output is dropped
            self._charge(g, err)
            return
        if out is None:
            return
        for n in g.successors:
            inst = _Instance()
            inst.node, inst.left, inst.t0, inst.t1, inst.key = n, out, t0, t1, key
            inst.last = dict(out) if n.fold else None
            inst.alive = True
            self._pending_inst.append(inst)
        for qn in g.outputs:
            self._pending_out[qn].append((key, {**out, "t0": t0, "t1": t1}))
            self._dirty.add(qn)

    def _insert(self, inst: _Instance, fresh: bool = True) -> None:
        node = inst.node
        if fresh:
            self._serial += 1
            inst.serial = self._serial
            self._s["instances_created"] += 1
            if self.expire and node.bound is not None:
                if self._tick is not None and self._tick > inst.t0 + node.bound - 1:
                    self._s["instances_expired"] += 1
                    inst.alive = False
                    return
                heapq.heappush(self._expiry, (inst.t0 + node.bound - 1, inst.serial, inst))
        if self.index_instances and node.instance_key:
            try:
                k = tuple(f(None, inst.left, inst.last, 1) for f in node.instance_key)
                if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in k):
                    self._s["instances_unmatchable"] += 1     # θ's equality can never be TRUE
                    inst.alive = False
                    return
                hash(k)
            except (AnalysisError, TypeError):
                k = _UNINDEXED
        else:
            k = None
        inst.bucket = k
        bucket = node.buckets.get(k)
        if bucket is None:
            bucket = node.buckets[k] = {}
            if node.keyed is not None:
                if k is _UNINDEXED:
                    node.keyed.unindexed[node] = None
                else:
                    node.keyed.by_key.setdefault(k, {})[node] = None
        bucket[inst.serial] = inst
        node.count += 1

    def _remove(self, inst: _Instance) -> None:
        if not inst.alive:
            return
        inst.alive = False
        node = inst.node
        bucket = node.buckets.get(inst.bucket)
        if bucket is not None and bucket.pop(inst.serial, None) is not None:
            node.count -= 1
            if not bucket:
                del node.buckets[inst.bucket]
                if node.keyed is not None:
                    if inst.bucket is _UNINDEXED:
                        node.keyed.unindexed.pop(node, None)
                    else:
                        nodes = node.keyed.by_key.get(inst.bucket)
                        if nodes is not None:
                            nodes.pop(node, None)
                            if not nodes:
                                del node.keyed.by_key[inst.bucket]

    def _close_tick(self) -> None:
        """Release the tick's matches in the oracle's order; feed published streams, producers first."""
        dirty = self._dirty
        while dirty:                        # only the queries with matches this tick, producers first
            qn = min(dirty, key=self._depth.__getitem__) if len(dirty) > 1 else next(iter(dirty))
            dirty.discard(qn)
            if qn.startswith(_UNION_FEED):          # both inputs of a UNION are in: feed their merge
                p = qn[len(_UNION_FEED):]
                buffered = self._union_buffer.pop(p, {})
                for e in buffered.get(0, []) + buffered.get(1, []):
                    self._ingest(p, {k: v for k, v in e.items() if k not in ("t0", "t1")}, e["t0"], e["t1"])
                continue
            pending = self._pending_out[qn]
            self._pending_out[qn] = []
            pending.sort(key=lambda x: x[0])
            rq = self._resolved[qn]
            events = [e for _, e in pending]
            if rq.union_side is not None:
                p = rq.publishes[0]
                self._union_buffer.setdefault(p, {}).setdefault(rq.union_side, []).extend(events)
                dirty.add(_UNION_FEED + p)
                continue
            for p in rq.publishes:
                for e in events:
                    self._ingest(p, {k: v for k, v in e.items() if k not in ("t0", "t1")}, e["t0"], e["t1"])
            if not rq.internal:
                self._s["matches"] += len(events)
                self._released.extend(Match(qn, e) for e in events)

    # ---- state (for Spark state stores and checkpoints) ---------------------------------------------
    def snapshot(self) -> bytes:
        """The run-time state — live instances, the current tick, stream positions, matches not yet
        released — without the queries: ``restore`` it into an engine with the same queries registered
        (a Spark task rebuilds the engine from the query texts and restores the state it kept)."""
        insts = [(n.key, i.left, i.last, i.t0, i.t1, i.key, i.serial)
                 for n in self._nodes.values() for b in n.buckets.values() for i in b.values() if i.alive]
        state = dict(version=1, queries=sorted(self.queries), instances=insts, tick=self._tick,
                     positions=dict(self._positions), serial=self._serial,
                     pending_out={q: list(v) for q, v in self._pending_out.items() if v},
                     dirty=sorted(self._dirty), released=list(self._released), stats=dict(self._s))
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, data: bytes) -> None:
        """Replace the run-time state by a ``snapshot``'s; the registered queries must be the same."""
        state = pickle.loads(data)
        if state.get("version") != 1:
            raise AnalysisError("not an NFAEngine snapshot (or one of another version)")
        if state["queries"] != sorted(self.queries):
            raise AnalysisError(f"snapshot of queries {state['queries']} restored into an engine with "
                                f"{sorted(self.queries)}")
        for n in self._nodes.values():
            for b in n.buckets.values():
                for i in b.values():
                    i.alive = False
            n.buckets.clear()
            n.count = 0
            if n.keyed is not None:
                n.keyed.by_key.clear()
                n.keyed.unindexed.clear()
        self._expiry = []
        for key, left, last, t0, t1, okey, serial in state["instances"]:
            node = self._nodes[key]
            inst = _Instance()
            inst.node, inst.left, inst.last, inst.t0, inst.t1, inst.key, inst.serial = \
                node, left, last, t0, t1, okey, serial
            inst.alive = True
            if self.expire and node.bound is not None:
                heapq.heappush(self._expiry, (t0 + node.bound - 1, serial, inst))
            self._insert(inst, fresh=False)
        self._tick, self._positions, self._serial = state["tick"], dict(state["positions"]), state["serial"]
        self._pending_out = {q: list(state["pending_out"].get(q, ())) for q in self._resolved}
        self._dirty = set(state["dirty"]) & set(self._resolved)
        self._released = list(state["released"])
        self._s = dict(state["stats"])

    # ---- inspection ---------------------------------------------------------------------------------
    def automaton(self, name: str) -> CompiledQuery:
        return self.queries[name]

    def instances(self) -> int:
        return sum(n.count for n in self._nodes.values())

    def static_index(self) -> dict[str, list[str]]:
        """Per input stream, the static index's access tables and how many guards each holds (EXPLAIN)."""
        out = {}
        for stream in sorted(self._index):
            ix = self._index[stream]
            items = [f"hash on {attr} ({n})" for attr, table in sorted(ix.eq.items())
                     if (n := sum(len(g) for g in table.values()))]
            items += [f"sorted bounds on {attr} {op} ({len(gs)})"
                      for (attr, op, _), (_, gs) in sorted(ix.ranges.items(), key=str) if gs]
            if ix.always:
                items.append(f"every event ({len(ix.always)})")
            out[stream] = items
        return out

    def stats(self) -> dict:
        """Work counters (see the module docstring) and the state held."""
        live = [i for n in self._nodes.values() for b in n.buckets.values() for i in b.values()]
        sample = live[:: max(1, len(live) // 1000)]
        return {**self._s, "queries": len(self.queries), "automata": len(self._resolved),
                "nodes": len(self._nodes), "nodes_without_sharing": self._nodes_unshared,
                "start_groups": len(self._starts), "instances_alive": len(live),
                "bytes_per_instance": (sum(i.size() for i in sample) / len(sample)) if sample else 0.0}
