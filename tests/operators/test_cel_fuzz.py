"""The CEL differential fuzzer (issue 15 item 3): random CEL over the grammar — NEXT / FOLD chains, FILTER,
SELECT lists, FOLD aggregates, DUR, arithmetic (with NULL-producing divisions and powers), constants, LIKE
with patterns from events (invalid ones raise at run time), unqualified names (Cayuga's rule), PUBLISH chains
read by later queries — registered together, many at once, over random streams with NULLs and intervals.

Per query, the batch executor (``BatchEngine``, the engine's default, fed small batches), ``FamilyEngine``,
``NFAEngine`` and the reference interpreter (``cayuga_reference``, the oracle, which evaluates each query on
its own) must give the same matches, in the same order.  Ill-typed queries (one bad predicate injected into a well-typed one) must be refused at
registration by both executors and change nothing: the others' matches are the oracle's over the accepted
queries alone.  Run-time errors (an invalid LIKE pattern read from an event) must be charged only to queries
the oracle also charges.  The generator tracks types itself (the oracle's ``combine_attributes`` for ⊗);
it never asks the system under test what is well typed.  Pure Python, no Spark.
"""
from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pytest
from sparksub.errors import AnalysisError
from sparksub.grammar.events import parse_cel
from cayuga_reference import combine_attributes, evaluate_queries
from sparksub.operators.events.nfa import NFAEngine
from sparksub.operators.events.batch import BatchEngine
from sparksub.operators.events.families import FamilyEngine

NUM, STR, BOOL = "num", "str", "bool"
STOCK = {"Name": STR, "Price": NUM, "Volume": NUM, "Txt": STR}
DECLARED = {"Stock": {"Name": "string", "Price": "double", "Volume": "bigint", "Txt": "string"}}
SETTINGS = settings(max_examples=130, deadline=None, suppress_health_check=list(HealthCheck))

# ---- typed expressions over an environment: {how to write it in CEL: kind} -------------------------

STRINGS = ["'IBM'", "'MSFT'", "'a'", "''", "'a%'", "'b_'"]
PATTERNS = ["'%'", "'IBM'", "'I%'", "'%S%'", "'_B_'", "'a\\%'", "'%\\_%'", "'\\\\'"]


def _refs(env, kind):
    return sorted(r for r, k in env.items() if k == kind)


@st.composite
def expr(draw, kind: str, env: dict, depth: int = 2, dur: bool = True):
    refs = _refs(env, kind)
    leaves = ["const"] + (["ref"] * 3 if refs else [])
    inner = {NUM: ["arith", "arith", "neg", "abs", "length", "pow"],
             STR: ["lower", "upper"],
             BOOL: ["cmp", "cmp", "cmp", "like", "contains", "and", "or", "not"] + (["dur"] if dur else [])}[kind]
    pick = draw(st.sampled_from(leaves + (inner if depth > 0 else [])))
    sub = lambda k: expr(k, env, depth - 1, dur)  # noqa: E731
    if pick == "ref":
        return draw(st.sampled_from(refs))
    if pick == "const":
        if kind == NUM:
            return draw(st.sampled_from(["0", "1", "2", "3.5", "4", "-1"]))
        if kind == STR:
            return draw(st.sampled_from(STRINGS))
        return draw(st.sampled_from(["TRUE", "FALSE"]))
    if pick == "arith":
        return f"({draw(sub(NUM))} {draw(st.sampled_from(['+', '-', '*', '/', '%']))} {draw(sub(NUM))})"
    if pick == "pow":                       # 0 ^ -1, (-x) ^ 0.5: NULL; small: no overflow
        return f"({draw(sub(NUM))} ^ {draw(st.sampled_from(['0', '1', '2', '-1', '0.5']))})"
    if pick == "neg":
        return f"-({draw(sub(NUM))})"
    if pick in ("abs", "length"):
        return f"{pick}({draw(sub(NUM if pick == 'abs' else STR))})"
    if pick in ("lower", "upper"):
        return f"{pick}({draw(sub(STR))})"
    if pick == "cmp":
        k = draw(st.sampled_from([NUM, NUM, STR]))
        return f"{draw(sub(k))} {draw(st.sampled_from(['=', '!=', '<', '<=', '>', '>=']))} {draw(sub(k))}"
    if pick == "like":                      # a pattern from an event may be invalid: a run-time error
        txt = [r for r in _refs(env, STR) if r.endswith("Txt")]      # the event's own text as a pattern
        pattern = draw(st.one_of(st.sampled_from(PATTERNS), sub(STR), *([st.sampled_from(txt)] if txt else [])))
        return f"{draw(sub(STR))} LIKE {pattern}"
    if pick == "contains":
        return f"contains({draw(sub(STR))}, {draw(sub(STR))})"
    if pick in ("and", "or"):
        return f"({draw(sub(BOOL))} {pick.upper()} {draw(sub(BOOL))})"
    if pick == "not":
        return f"NOT ({draw(sub(BOOL))})"
    return f"DUR {draw(st.sampled_from(['<', '<=', '>=', '>']))} {draw(st.integers(1, 4))}"


@st.composite
def bad_predicate(draw, env: dict) -> str:
    """A predicate the registration type check must refuse (whatever the schema)."""
    nums, strs = _refs(env, NUM), _refs(env, STR)
    options = ["'a' > 1", "(1 + 'x') > 2", "NOT 3", "abs('x') > 1", "contains(1, 'a')", "'a' LIKE 'b\\c'",
               "TRUE = 1", "Zzz_unknown = 1", "2"]
    if nums:
        n = draw(st.sampled_from(nums))
        options += [f"{n} > 'abc'", f"{n} LIKE 'a%'", n, f"{n} = TRUE"]
    if strs:
        s = draw(st.sampled_from(strs))
        options += [f"{s} > 20", f"({s} * 2) > 1", f"-{s} = 1", f"length({s}, {s}) > 1"]
    return draw(st.sampled_from(options))


# ---- schemas of stream expressions (the oracle's renaming) ---------------------------------------------

def pair_env(left: dict, right: dict, last: dict | None = None) -> dict:
    env = {f"$1.{a}": k for a, k in left.items()}
    env.update({f"$2.{a}": k for a, k in right.items()})
    for a in {**right, **left}:             # unqualified: the left input's first (Cayuga), else the right's
        env[a] = left[a] if a in left else right[a]
    if last is not None:
        env.update({f"$.{a}": k for a, k in last.items()})
    return env


@st.composite
def predicate(draw, env, bad_slot, dur=True):
    if bad_slot[0]:                         # the one ill-typed predicate of a refused query
        bad_slot[0] = False
        return draw(bad_predicate(env))
    return draw(expr(BOOL, env, 2, dur))


@st.composite
def source(draw, published: dict, bad_slot) -> tuple[str, dict]:
    """A stateless input: a stream (Stock or a published one), perhaps filtered or with computed items."""
    name = draw(st.sampled_from(["Stock", "Stock"] + sorted(published)))
    schema = dict(STOCK if name == "Stock" else published[name])
    text = name
    shape = draw(st.sampled_from(["bare", "bare", "filter", "extend", "project"]))
    if shape == "filter":
        text = f"FILTER{{{draw(predicate(schema, bad_slot))}}}({text})"
    elif shape == "extend":
        kind = draw(st.sampled_from([NUM, STR, BOOL]))
        text = f"(SELECT *, {draw(expr(kind, schema, 1, False))} AS x{len(schema)}, 1 AS cnt FROM {text})"
        schema = {**schema, f"x{len(schema)}": kind, "cnt": NUM}
    elif shape == "project":
        keep = draw(st.lists(st.sampled_from(sorted(schema)), min_size=1, max_size=3, unique=True))
        text = f"(SELECT {', '.join(keep)} FROM {text})"
        schema = {a: schema[a] for a in keep}
    return text, schema


@st.composite
def query(draw, published: dict, bad: bool, max_steps: int = 2) -> tuple[str, dict]:
    """(CEL text, output schema); ``bad``: exactly one predicate is ill-typed."""
    bad_slot = [bad]
    text, schema = draw(source(published, bad_slot))
    steps = draw(st.integers(0, max_steps))
    for _ in range(steps):
        if draw(st.integers(0, 5)) == 0:    # not left-deep: the right input is a NEXT of its own
            right = "(SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock)"
            rschema = combine_attributes(STOCK, STOCK)
        else:
            right, rschema = draw(source(published, bad_slot))
        if draw(st.booleans()):
            theta = draw(st.sampled_from(["", "$1.Name = $2.Name AND "] if "Name" in schema and "Name" in rschema
                                         else [""]))
            theta += draw(st.one_of(st.just("TRUE"), predicate(pair_env(schema, rschema), bad_slot)))
            text = f"SELECT * FROM ({text}) NEXT{{{theta}}} {right}"
            schema = combine_attributes(schema, rschema)
        else:
            aggs, agg_kinds = [], {}
            if schema.get("cnt") == NUM:
                aggs.append("$.cnt + 1 AS cnt")
                agg_kinds["cnt"] = NUM
            last = {a: k for a, k in {**rschema, **schema}.items()
                    if rschema.get(a, k) == schema.get(a, k)}              # $.x of one kind only
            if draw(st.booleans()):
                kind = draw(st.sampled_from([NUM, STR]))
                aggs.append(f"{draw(expr(kind, pair_env(schema, rschema, last), 1, False))} AS g{len(schema)}")
                agg_kinds[f"g{len(schema)}"] = kind
            env = pair_env(schema, rschema, {**last, **{a: k for a, k in agg_kinds.items()
                                                        if last.get(a, k) == k}})
            theta = draw(st.one_of(st.just(""), predicate(env, bad_slot)))
            rebind = draw(st.one_of(st.just(""), predicate(env, bad_slot)))
            text = f"SELECT * FROM ({text}) FOLD{{{theta}, {rebind}, {', '.join(aggs)}}} {right}"
            schema = {**combine_attributes(schema, rschema), **agg_kinds}
        outer = draw(st.sampled_from(["", "", "filter", "dur"]))
        if outer == "filter":
            text = f"SELECT * FROM FILTER{{{draw(predicate(schema, bad_slot))}}}({text})"
        elif outer == "dur":
            text = f"SELECT * FROM FILTER{{DUR <= {draw(st.integers(1, 5))}}}({text})"
    if bad_slot[0]:                          # no predicate position came up: an outer FILTER
        text = f"SELECT * FROM FILTER{{{draw(bad_predicate(schema))}}}({text})"
    if not text.startswith("SELECT"):
        text = f"SELECT * FROM {text}"
    return text, schema


@st.composite
def workloads(draw):
    """Queries in registration order — (name, text, well typed) — and a stream of Stock events."""
    published: dict = {}
    queries = []
    for i in range(draw(st.integers(2, 6))):
        bad = draw(st.integers(0, 3)) == 0
        text, schema = draw(query(published, bad))
        if not bad and draw(st.integers(0, 2)) == 0:
            text = f"{text} PUBLISH P{i}"            # read by the queries after it
            published[f"P{i}"] = schema
        queries.append((f"q{i}", text, not bad))
    events, t1 = [], 0
    for _ in range(draw(st.integers(0, 12))):
        t1 += draw(st.integers(0, 2))
        events.append({"Name": draw(st.sampled_from(["IBM", "MSFT"])),
                       "Price": draw(st.one_of(st.none(), st.sampled_from([1.0, 2.0, 3.0, 4.5, 6.0]))),
                       "Volume": draw(st.sampled_from([0, 1, 3])),
                       "Txt": draw(st.sampled_from(["IBM", "a%", "ab", "", "a\\", "%\\_", "\\a%", "MSFT"])),
                       "t0": max(0, t1 - draw(st.integers(0, 2))), "t1": t1})
    return queries, events


# ---- the differential check ------------------------------------------------------------------------

class Batched(BatchEngine):
    """The batch executor (issue 18) with every batch vectorised, fed 4 events at a time by ``run``."""

    def __init__(self, **options):
        super().__init__(min_batch=1, batch_size=4, **options)


def _run(cls, queries, events):
    engine = cls()
    for name, text, ok in queries:
        if ok:
            engine.register(name, text, schemas=DECLARED)
            continue
        before = sorted(engine.queries)
        with pytest.raises(AnalysisError):
            engine.register(name, text, schemas=DECLARED)
        assert sorted(engine.queries) == before
    errors: dict = {}
    return engine.run({"Stock": events}, errors=errors), errors


#: found by this test (2026-11-27): the batch executor's vectorised family over a stream a query publishes never saw
#: the published events (PUBLISH runs on the per-event path), so a NEXT over P0 matched nothing
_PUBLISHED_NEXT = ([("q0", "SELECT * FROM Stock PUBLISH P0", True), ("q3", "SELECT * FROM (P0) NEXT{TRUE} P0", True)],
                   [{"Name": "IBM", "Price": None, "Volume": 0, "Txt": "IBM", "t0": t, "t1": t} for t in (0, 1)])


@SETTINGS
@given(workloads())
@example(workload=_PUBLISHED_NEXT)
def test_random_cel_agrees_across_executors_and_the_oracle_per_query(workload):
    queries, events = workload
    accepted = {name: parse_cel(text) for name, text, ok in queries if ok}
    oracle_errors: dict = {}
    expected = evaluate_queries(accepted, {"Stock": events}, errors=oracle_errors)
    charged = {(q, t1) for q, errs in oracle_errors.items() for _, t1, _ in errs}
    for cls in (FamilyEngine, NFAEngine, Batched):
        got, errors = _run(cls, queries, events)
        assert set(got) == set(accepted)
        for name in accepted:                       # per query: the same matches, in the oracle's order
            assert got[name] == expected[name], (cls.__name__, name, dict(queries=queries))
        assert {(q, e.t1) for q, errs in errors.items() for e in errs} <= charged, cls.__name__
