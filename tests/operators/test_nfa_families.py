"""Query families (``operators/nfa_families``): queries that differ only in constants run as one
parameterised automaton.  Checked against the reference interpreter (the oracle) on random families
(templates × random constants, with ties and NULLs), on the NFA tests' random queries, across a
snapshot/restore, with members dropped mid-stream, and for the work it saves.
"""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from event_strategies import stock_events
from sparksub.grammar.events import parse_cel
from cayuga_reference import evaluate_queries
from sparksub.operators.events.nfa import NFAEngine
from sparksub.operators.events.families import FamilyEngine, template_of
from test_nfa import typed_queries

_H = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))

# Templates with {placeholders}: every constant a family varies, in each slottable position (start
# FILTER equality + range, θ static equality, θ dynamic with arithmetic, outer selections, DUR in θ,
# outer and rebind, rebind with a slot, a right input FILTER with a slot).
TEMPLATES = [
    "SELECT * FROM FILTER{{Price < {q}}}(FILTER{{Name = '{a}' AND Price > {p}}}(Stock) NEXT{{$2.Name = '{b}'}} Stock)",
    "SELECT * FROM FILTER{{Price > {r} * Price_1}}(FILTER{{Name = '{a}'}}(Stock) NEXT{{$1.Name = $2.Name}} Stock)",
    "SELECT * FROM FILTER{{DUR >= {d}}}(FILTER{{Name = '{a}'}}(Stock) FOLD{{$2.Name = $.Name, $2.Price > $.Price,}} Stock)",
    "SELECT * FROM Stock NEXT{{$1.Name = $2.Name AND $2.Price >= $1.Price + {c} AND DUR <= {d}}} Stock",
    "SELECT * FROM Stock FOLD{{$2.Price != {p}, $2.Price > $.Price - {c}, $.cnt + 1 AS cnt}} FILTER{{Price > {q}}}(Stock)",
    "SELECT * FROM FILTER{{Price >= {p}}}(Stock) NEXT{{$2.Name = '{b}' AND $2.Price < {q}}} "
    "FILTER{{Volume > {v}}}(Stock) NEXT{{$1.Name = $2.Name}} Stock",
    "SELECT * FROM (SELECT *, 1 AS cnt FROM FILTER{{{p} <= Price}}(Stock)) "
    "FOLD{{$1.Name = $2.Name, DUR < {d}, $.cnt + 1 AS cnt}} Stock",
]


@st.composite
def families(draw):
    """2–4 templates, each with 1–6 members whose constants are drawn from small pools (ties)."""
    queries = {}
    for t in draw(st.lists(st.sampled_from(TEMPLATES), min_size=1, max_size=3)):
        for _ in range(draw(st.integers(1, 6))):
            values = dict(a=draw(st.sampled_from(["IBM", "MSFT", "ORCL"])),
                          b=draw(st.sampled_from(["IBM", "MSFT"])),
                          p=draw(st.integers(0, 6)), q=draw(st.sampled_from([2, 4, 5.5, 7])),
                          r=draw(st.sampled_from([1, 1.2, 1.5, 2])), d=draw(st.integers(1, 6)),
                          c=draw(st.sampled_from([-1, 0, 1, 2.5])), v=draw(st.sampled_from([50, 100, 150])))
            queries[f"q{len(queries)}"] = t.format(**values)
    return queries


def oracle(queries, events):
    return evaluate_queries({n: parse_cel(q) for n, q in queries.items()}, {"Stock": events})


def run(queries, events, **options):
    engine = FamilyEngine(**options)
    for n, q in queries.items():
        engine.register(n, q)
    return engine.run({"Stock": events}), engine


def with_volumes(events, seed=0):
    rnd = random.Random(seed)
    return [{**e, "Volume": rnd.choice([40, 100, 120, None])} for e in events]


@_H
@given(families(), stock_events(max_size=10, names=("IBM", "MSFT", "ORCL")))
def test_families_agree_with_the_oracle(queries, events):
    events = with_volumes(events)
    got, engine = run(queries, events)
    assert got == oracle(queries, events)                       # same events, attributes and order
    assert engine.stats()["families"] <= len(TEMPLATES)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(families(), stock_events(max_size=10, names=("IBM", "MSFT", "ORCL")))
def test_without_indexes_or_expiry_the_matches_are_the_same(queries, events):
    events = with_volumes(events)
    indexed, _ = run(queries, events)
    for options in (dict(index_instances=False), dict(expire=False), dict(group=False)):
        assert run(queries, events, **options)[0] == indexed, options


@_H
@given(typed_queries(), stock_events())
def test_the_nfa_tests_random_queries_agree_with_the_oracle(query, events):
    got, _ = run({"q": query}, events)
    assert got["q"] == oracle({"q": query}, events)["q"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(families(), stock_events(max_size=12, names=("IBM", "MSFT", "ORCL")), st.data())
def test_snapshot_and_restore_mid_stream_change_nothing(queries, events, data):
    events = with_volumes(events)
    expected, _ = run(queries, events)
    cuts = set(data.draw(st.lists(st.integers(0, len(events)), max_size=3)))

    def fresh():
        e = FamilyEngine()
        for n, q in queries.items():
            e.register(n, q)
        return e
    engine, out = fresh(), {n: [] for n in queries}
    for i, e in enumerate(sorted(events, key=lambda e: e["t1"])):
        if i in cuts:
            state = engine.snapshot()
            engine = fresh()
            engine.restore(state)
        for m in engine.process("Stock", e):
            out[m.query].append(m.event)
    for m in engine.flush():
        out[m.query].append(m.event)
    assert out == expected


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(families(), stock_events(max_size=12, names=("IBM", "MSFT", "ORCL")), st.data())
def test_dropping_members_mid_stream_leaves_the_others_unchanged(queries, events, data):
    events = with_volumes(events)
    expected, _ = run(queries, events)
    drop = data.draw(st.sets(st.sampled_from(sorted(queries))))
    at = data.draw(st.integers(0, len(events)))
    engine = FamilyEngine()
    for n, q in queries.items():
        engine.register(n, q)
    out = {n: [] for n in queries}
    for i, e in enumerate(sorted(events, key=lambda e: e["t1"])):
        if i == at:
            for n in drop:
                engine.unregister(n)
        for m in engine.process("Stock", e):
            out[m.query].append(m.event)
    for m in engine.flush():
        out[m.query].append(m.event)
    for n in queries:
        if n not in drop:
            assert out[n] == expected[n]


def test_templates_slot_only_indexable_constants():
    t1, v1, _ = template_of(parse_cel("SELECT * FROM FILTER{Name = 'IBM' AND contains(Name, 'I')}(Stock)"))
    t2, v2, _ = template_of(parse_cel("SELECT * FROM FILTER{Name = 'MSFT' AND contains(Name, 'I')}(Stock)"))
    t3, _, _ = template_of(parse_cel("SELECT * FROM FILTER{Name = 'MSFT' AND contains(Name, 'M')}(Stock)"))
    assert (v1, v2) == (["IBM"], ["MSFT"]) and t1 == t2 and t1 != t3     # function arguments stay


def test_a_family_creates_one_instance_per_event_not_per_query():
    rnd = random.Random(3)
    names = [f"S{i}" for i in range(20)]
    queries = {f"q{i}": f"SELECT * FROM FILTER{{Price > {rnd.uniform(1.01, 1.2):.3f} * Price_1}}"
                        f"(FILTER{{Name = '{rnd.choice(names)}' AND Price > {rnd.randint(50, 150)}}}(Stock) "
                        f"NEXT{{$1.Name = $2.Name}} Stock)"
               for i in range(400)}
    price = {n: 100.0 for n in names}
    events = []
    for t in range(600):
        n = rnd.choice(names)
        price[n] *= rnd.uniform(0.9, 1.15)
        events.append({"Name": n, "Price": round(price[n], 2), "t0": t, "t1": t})
    grouped, g = run(queries, events)
    plain = NFAEngine()
    for n, q in queries.items():
        plain.register(n, q)
    assert plain.run({"Stock": events}) == grouped
    assert sum(map(len, grouped.values())) > 100
    sg, sp = g.stats(), plain.stats()
    assert sg["families"] == 1 and sg["instances_created"] <= 600 < sp["instances_created"]
    info = g.family_of("q0")
    assert info["queries"] == 400 and info["start_index"].startswith("hash on")
