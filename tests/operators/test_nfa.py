"""The automaton compiler and the indexed NFA executor (issue 6 items 3–4) against the reference
interpreter (the oracle, ``cayuga_reference``), on random queries and streams (hypothesis), on the issue's
examples and 004 Table 1's S1–S7, and with each multi-query optimisation switched off (004 §3): the
output never changes, only the counted work.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from event_strategies import stock_events, stream_expressions
from sparksub.errors import AnalysisError, SparksubError, UnsupportedSubscription
from sparksub.grammar.events import parse_algebra, parse_cel
from cayuga_reference import evaluate_queries
from sparksub.operators.events.nfa import NFAEngine, compile_query

_HSETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def run_engine(queries, streams, **options):
    engine = NFAEngine(**options)
    for name, q in queries.items():
        engine.register(name, q)
    return engine.run(streams), engine


def oracle(queries, streams, **options):
    return evaluate_queries({n: parse_cel(q) if isinstance(q, str) else q for n, q in queries.items()},
                            streams, **options)


def multiset(events):
    return sorted(repr(sorted(e.items(), key=lambda kv: kv[0])) for e in events)   # values of mixed types


# ---- a generator of well-typed queries over Stock (Name: str, Price: int) ----------------------------
# Pools of CEL fragments: static and dynamic conjuncts, equalities for the instance index, DUR, NULLs
# (attributes a projection removed), aggregates; the query is composed as CEL text.

NEXT_THETAS = ["", "$1.Name = $2.Name", "$2.Name = $1.Name AND $2.Price > $1.Price", "$2.Price >= 4",
               "$1.Name = $2.Name AND $2.Price < 4", "$2.Name = 'IBM'", "$1.Name = $2.Name AND DUR <= 4",
               "$2.Price > $1.Price OR $2.Name = 'MSFT'", "NOT ($2.Price = $1.Price)",
               "$2.Price = $1.Price + 1", "$2.Name = 'MSFT' AND $2.Price > 2 AND $1.Name = $2.Name"]
FOLD_THETAS = ["", "$1.Name = $2.Name", "$2.Name = $.Name AND $2.Price >= $.Price", "$2.Price != 3",
               "$1.Name = $2.Name AND DUR < 5", "$.Name = $2.Name AND $2.Price > 2", "$2.Price <= 3"]
FOLD_REBINDS = ["", "$2.Price > $.Price", "$2.Price <= $1.Price + 2", "DUR <= 3", "$2.Name = 'IBM'"]
FOLD_AGGREGATES = ["", "$.cnt + 1 AS cnt", "$.cnt + 1 AS cnt, $.total + $2.Price AS total"]
STARTS = ["Stock", "FILTER{Price < 4}(Stock)", "(SELECT *, 1 AS cnt, Price AS total FROM Stock)",
          "FILTER{Name = 'IBM'}(Stock)", "FILTER{Price >= 2 AND Price <= 5}(Stock)"]
RIGHTS = ["Stock", "FILTER{Price > 2}(Stock)", "FILTER{Name = 'MSFT' OR Price = 5}(Stock)",
          "(SELECT Name, Price FROM Stock)", "(SELECT Name, Price * 2 AS Price FROM Stock)",
          "FILTER{Name = 'IBM'}(Stock)"]
NESTED_RIGHTS = ["(SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock)",
                 "(SELECT * FROM Stock FOLD{$2.Price > $.Price, , } Stock)"]
OUTERS = [None, "FILTER{Price > Price_1}", "FILTER{DUR >= 3}", "FILTER{DUR <= 4}", "FILTER{Name = 'IBM'}",
          "SELECT Name, Price FROM", "SELECT *, Price + 1 AS up FROM", "FILTER{Price_1 < 4 AND DUR < 6}"]


@st.composite
def typed_queries(draw, max_steps: int = 3, nested: bool = True, publish: str | None = None):
    q = draw(st.sampled_from(STARTS))
    q = f"SELECT * FROM {q}"
    for k in range(draw(st.integers(0 if publish is None else 1, max_steps))):
        rights = RIGHTS + (NESTED_RIGHTS if nested else [])
        right = draw(st.sampled_from(rights))
        if draw(st.booleans()):
            op = f"NEXT{{{draw(st.sampled_from(NEXT_THETAS))}}}"
        else:
            op = (f"FOLD{{{draw(st.sampled_from(FOLD_THETAS))}, {draw(st.sampled_from(FOLD_REBINDS))}, "
                  f"{draw(st.sampled_from(FOLD_AGGREGATES))}}}")
        q = f"SELECT * FROM ({q}) {op} {right}"
        outer = draw(st.sampled_from(OUTERS))
        if outer is not None:
            q = f"SELECT * FROM {outer}({q})" if outer.startswith("FILTER") else f"{outer} ({q})"
        if publish is not None and k == 0 and draw(st.booleans()):
            q = f"SELECT * FROM ({q} PUBLISH {publish})"     # a PUBLISH inside the query
    return q


def streams_of(events):
    return {"Stock": events}


# ---- the executor equals the oracle ---------------------------------------------------------------

@_HSETTINGS
@given(typed_queries(), stock_events())
def test_random_queries_agree_with_the_oracle(query, events):
    expected = oracle({"q": query}, streams_of(events))
    got, _ = run_engine({"q": query}, streams_of(events))
    assert got["q"] == expected["q"]                      # same events, same attributes, same order


@_HSETTINGS
@given(typed_queries(max_steps=2), stock_events(), st.integers(1, 3))
def test_dur_units_and_seconds_per_tick(query, events, spt):
    query = f"SELECT * FROM FILTER{{DUR <= 1 MIN}}({query})"
    expected = oracle({"q": query}, streams_of(events), seconds_per_tick=60 / spt)
    got, _ = run_engine({"q": query}, streams_of(events), seconds_per_tick=60 / spt)
    assert got["q"] == expected["q"]


@st.composite
def query_sets(draw):
    """2–5 queries; some extend a common prefix (so prefix sharing has states to merge), one may read a
    stream another PUBLISHes (resubscription)."""
    base = draw(typed_queries(max_steps=1, nested=False))
    queries = {}
    for i in range(draw(st.integers(2, 5))):
        kind = draw(st.sampled_from(["extend", "fresh", "same", "reader"]))
        if kind == "extend":
            q = f"SELECT * FROM ({base}) NEXT{{{draw(st.sampled_from(NEXT_THETAS))}}} {draw(st.sampled_from(RIGHTS))}"
        elif kind == "same":
            q = base
        elif kind == "reader" and i > 0 and "P0" in queries.get("q0", ""):
            q = f"SELECT * FROM P0 NEXT{{{draw(st.sampled_from(NEXT_THETAS))}}} Stock"
        else:
            q = draw(typed_queries(max_steps=2, publish="P0" if i == 0 else None))
        if i == 0 and "PUBLISH" not in q and draw(st.booleans()):
            q = f"{q} PUBLISH P0"
        queries[f"q{i}"] = q
    return queries


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(query_sets(), stock_events())
def test_several_queries_at_once_equal_each_alone_and_the_oracle(queries, events):
    expected = oracle(queries, streams_of(events))
    together, engine = run_engine(queries, streams_of(events))
    assert together == expected
    for name, q in queries.items():
        if "P0" in q and "PUBLISH" not in q:
            continue                                     # reads q0's stream: not runnable alone
        alone, _ = run_engine({name: q}, streams_of(events))
        assert alone[name] == together[name]
    assert engine.stats()["nodes"] <= engine.stats()["nodes_without_sharing"]


SWITCHES = [dict(share_prefixes=False), dict(index_static=False), dict(index_instances=False),
            dict(expire=False), dict(share_prefixes=False, index_static=False, index_instances=False,
                                     expire=False)]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(query_sets(), stock_events())
def test_each_optimisation_switched_off_gives_the_same_matches(queries, events):
    indexed, _ = run_engine(queries, streams_of(events))
    for options in SWITCHES:
        plain, _ = run_engine(queries, streams_of(events), **options)
        assert plain == indexed, options


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(stream_expressions(max_leaves=4), stock_events(max_size=6))
def test_any_generated_query_compiles_or_fails_clearly_and_agrees(q, events):
    # The grammar tests' generator (untyped: many of its queries raise in the oracle; those are skipped).
    streams = {s: events for s in ("Stock", "posts", "S", "T5")}
    try:
        engine = NFAEngine()
        engine.register("q", q)
    except (AnalysisError, UnsupportedSubscription) as e:
        assert str(e)
        return
    published = set(engine._publisher)
    streams = {s: v for s, v in streams.items() if s not in published}
    try:
        expected = evaluate_queries({"q": q}, streams)
    except (SparksubError, ZeroDivisionError, RecursionError):
        assume(False)
        return
    got = engine.run(streams)
    assert multiset(got["q"]) == multiset(expected["q"])


# ---- the issue's examples and 004 Table 1 on hand-made streams ----------------------------------------

def ev(name, price, t, volume=100):
    return {"Name": name, "Price": price, "Volume": volume, "t0": t, "t1": t}


HAND_STOCK = [ev("IBM", 100, 0, 20000), ev("IBM", 95, 5), ev("MSFT", 50, 7), ev("IBM", 90, 12),
              ev("IBM", 96, 14), ev("MSFT", 20, 15), ev("IBM", 101, 16, 30000), ev("MSFT", 24, 17),
              ev("IBM", 97, 20), ev("IBM", 106, 21), ev("IBM", 107, 40), ev("MSFT", 22, 41)]

ISSUE_EXAMPLES = {
    "T5": "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock PUBLISH T5",
    "ex2": "SELECT * FROM FILTER{Price > 60.5}(Stock) NEXT{$1.Name = $2.Name} Stock",
    "ex3": "SELECT * FROM Stock FOLD{$1.Name = $2.Name AND $.Price < $2.Price, ,} Stock",
    "ex4": "SELECT * FROM (SELECT *, 1 AS cnt, Price AS sumPrice FROM Stock) FOLD{$1.Name = $2.Name, "
           "$.Price < $2.Price, $.cnt + 1 AS cnt, $.sumPrice + $2.Price AS sumPrice} Stock",
    "ex5": "SELECT Name, MaxPrice, MinPrice, Price AS FinalPrice FROM FILTER{DUR > 10min}((SELECT Name, "
           "Price_1 AS MaxPrice, Price AS MinPrice FROM FILTER{Volume > 10000}(Stock)) FOLD{$2.Name = $.Name, "
           "$2.Price < $.Price,} Stock) NEXT{$2.Name = $1.Name AND $2.Price > 1.05*$1.MinPrice} Stock",
    "ex5_intent": "SELECT Name, MaxPrice, MinPrice, Price AS FinalPrice FROM FILTER{DUR > 10min}("
                  "SELECT Name, Price_1 AS MaxPrice, Price AS MinPrice FROM FILTER{Volume > 10000}(Stock) "
                  "FOLD{$2.Name = $.Name, $2.Price < $.Price,} Stock) "
                  "NEXT{$2.Name = $1.Name AND $2.Price > 1.05*$1.MinPrice} Stock",
    "reads_T5": "SELECT * FROM T5 NEXT{$1.Name = $2.Name} Stock",
}

BLOGS = "website = 'blog1.com' OR website = 'blog2.com'"
S_QUERIES = {
    "S1": "SELECT * FROM FILTER{Name = 'IBM' AND Price > 100}(Stock)",
    "S2": "SELECT * FROM FILTER{Price < 25}(FILTER{Name = 'IBM' AND Price > 100}(Stock) NEXT{$2.Name = 'MSFT'} Stock)",
    "S3": "SELECT * FROM FILTER{Price > 1.05 * Price_1}(Stock NEXT{$1.Name = $2.Name} Stock)",
    "S4": "SELECT * FROM FILTER{DUR >= 30 MIN}(Stock FOLD{$2.Name = $1.Name, $2.Price >= $.Price, } Stock)",
    "S5": "SELECT * FROM FILTER{Price > AVG}(FILTER{DUR = 52 WEEK}((SELECT *, Price AS AVG, 1 AS COUNT "
          "FROM FILTER{Name = 'IBM'}(Stock)) FOLD{, , ($.COUNT * $.AVG + $2.Price) / ($.COUNT + 1) AS AVG, "
          "$.COUNT + 1 AS COUNT} FILTER{Name = 'IBM'}(Stock)) NEXT{$2.Name = 'IBM'} Stock)",
}
RSS_QUERIES = {
    "S6": "SELECT * FROM FILTER{website = 'military.com' AND category = 'US troop morale'}(posts) "
          f"NEXT{{contains($2.description, $1.link)}} FILTER{{{BLOGS}}}(posts)",
    "S7": f"SELECT * FROM FILTER{{({BLOGS}) AND contains(description, 'XYZ')}}(posts) "
          f"FOLD{{contains($2.description, $.link), , }} FILTER{{{BLOGS}}}(posts)",
}


def post(site, description, link, t, category=""):
    return {"website": site, "category": category, "description": description, "link": link, "t0": t, "t1": t}


POSTS = [post("military.com", "morale report", "mil.com/a1", 0, "US troop morale"),
         post("blog1.com", "about XYZ", "L0", 1), post("blog3.com", "see mil.com/a1", "b3/1", 2),
         post("blog2.com", "cites L0", "L1", 3), post("blog2.com", "read mil.com/a1", "b2/1", 4),
         post("blog1.com", "cites L1", "L3", 5), post("blog1.com", "also mil.com/a1", "b1/2", 6)]


@pytest.mark.parametrize("seconds_per_tick", [1, 60, 7 * 86400])
def test_issue_examples_and_table1_agree_with_the_oracle(seconds_per_tick):
    queries = {**ISSUE_EXAMPLES, **S_QUERIES}
    expected = oracle(queries, streams_of(HAND_STOCK), seconds_per_tick=seconds_per_tick)
    got, engine = run_engine(queries, streams_of(HAND_STOCK), seconds_per_tick=seconds_per_tick)
    assert got == expected
    rss = oracle(RSS_QUERIES, {"posts": POSTS})
    assert run_engine(RSS_QUERIES, {"posts": POSTS})[0] == rss
    assert [e["link"] for e in rss["S6"]] == ["b2/1"] and [e["link"] for e in rss["S7"]] == ["L1", "L3"]
    if seconds_per_tick == 60:   # hand-checked: the fifth example's intent fires once (see the oracle tests)
        # Large trades: IBM100@0 and IBM101@16.  The first chain falls 95@5, 90@12, then 96@14 ends it;
        # DUR > 10 keeps (0,12) (Min 90) and (0,14) (Min 96).  NEXT: after 12 the first IBM above 94.5 is
        # 96@14; after 14 the first IBM above 100.8 is 101@16.  The second chain (16,20), (16,21) is short.
        assert got["ex5_intent"] == [
            {"Name": "IBM", "MaxPrice": 100, "MinPrice": 90, "FinalPrice": 96, "t0": 0, "t1": 14},
            {"Name": "IBM", "MaxPrice": 100, "MinPrice": 96, "FinalPrice": 101, "t0": 0, "t1": 16}]
        # S2: IBM above 100 at 16, 21 and 40; the first MSFT after each: 24@17, 22@41, 22@41 (all < 25).
        assert [(e["Price_1"], e["Price"], e["t0"], e["t1"]) for e in got["S2"]] == [
            (101, 24, 16, 17), (106, 22, 21, 41), (107, 22, 40, 41)]


def test_algebra_text_and_non_left_deep_queries():
    stock = [ev("A", p, t) for t, p in enumerate([3, 1, 4, 1, 5, 9, 2, 6])]
    queries = {
        "alg": parse_algebra("SELECT[DUR >= 3](MU[SELECT[$2.Price > $.Price]; TRUE](Stock, Stock))"),
        "right_nested": parse_cel("SELECT * FROM Stock NEXT{$2.Price > $1.Price} "
                                  "(SELECT * FROM Stock NEXT{$2.Price < $1.Price} Stock)"),
        "right_fold": parse_cel("SELECT * FROM FILTER{Price < 3}(Stock) FOLD{, , } "
                                "(SELECT * FROM Stock FOLD{$2.Price > $.Price, , } Stock)"),
        "renamed": parse_algebra("PROJECT[Name, p, Price](RENAME[Price -> p](Stock) SEQ[$2.Price > $1.p] "
                                 "SELECT[Price > 1](Stock))"),
    }
    assert run_engine(queries, streams_of(stock))[0] == evaluate_queries(queries, streams_of(stock))
    untimed = [{k: v for k, v in e.items() if k not in ("t0", "t1")} for e in reversed(stock)]
    assert run_engine(queries, streams_of(untimed))[0] == evaluate_queries(queries, streams_of(untimed))


# ---- the multi-query optimisations change only the counted work ---------------------------------------

def many_names_stream(n_events=3000, n_names=300, seed=7):
    rng = random.Random(seed)
    return [{"Name": f"S{rng.randrange(n_names)}", "Price": rng.randrange(1, 100), "t0": t, "t1": t}
            for t in range(n_events)]


def test_instance_index_visits_only_affected_instances():
    events = many_names_stream(1500, 200)
    queries = {"seq": "SELECT * FROM Stock NEXT{$1.Name = $2.Name AND $2.Price > $1.Price} Stock",
               "fold": "SELECT * FROM Stock FOLD{$2.Name = $.Name, $2.Price >= $.Price, } Stock"}
    with_index, indexed = run_engine(queries, streams_of(events))
    without, plain = run_engine(queries, streams_of(events), index_instances=False)
    assert with_index == without
    visited, visited_plain = indexed.stats()["instances_visited"], plain.stats()["instances_visited"]
    assert visited * 20 < visited_plain, (visited, visited_plain)
    small = events[:300]                                 # (the oracle is quadratic)
    assert run_engine(queries, streams_of(small))[0] == oracle(queries, streams_of(small))


def test_static_index_evaluates_each_guard_only_where_it_can_hold():
    events = many_names_stream(500, 150)
    queries = {f"q{i}": f"SELECT * FROM FILTER{{Name = 'S{i}'}}(Stock) NEXT{{$2.Name = 'S{(i + 1) % 150}' "
                        f"AND $2.Price > {i % 50}}} Stock" for i in range(150)}
    with_index, indexed = run_engine(queries, streams_of(events))
    without, plain = run_engine(queries, streams_of(events), index_static=False)
    assert with_index == without
    s, p = indexed.stats(), plain.stats()
    assert s["guards_checked"] * 20 < p["guards_checked"], (s["guards_checked"], p["guards_checked"])
    assert s["conjuncts_evaluated"] * 20 < p["conjuncts_evaluated"]


def test_prefix_sharing_merges_equal_prefixes():
    events = many_names_stream(500, 20)
    prefix = "SELECT * FROM FILTER{Price > 50}(Stock) NEXT{$1.Name = $2.Name} Stock"
    queries = {f"q{i}": f"SELECT * FROM FILTER{{Price > {i}}}(({prefix}) NEXT{{$1.Name = $2.Name}} Stock)"
               for i in range(30)}
    shared, engine = run_engine(queries, streams_of(events))
    unshared, plain = run_engine(queries, streams_of(events), share_prefixes=False)
    assert shared == unshared
    s, p = engine.stats(), plain.stats()
    assert s["nodes"] == 2 and p["nodes"] == 60 == s["nodes_without_sharing"]
    assert s["instances_created"] * 10 < p["instances_created"]
    assert s["instances_visited"] * 10 < p["instances_visited"]


def test_expiry_changes_only_the_live_instances():
    events = many_names_stream(2000, 50)
    queries = {"short": "SELECT * FROM FILTER{DUR <= 5}(Stock FOLD{$2.Name = $1.Name, $2.Price > $.Price, } Stock)",
               "theta": "SELECT * FROM Stock NEXT{$1.Name = $2.Name AND $2.Price > 98 AND DUR < 4} Stock"}
    expiring, engine = run_engine(queries, streams_of(events))
    keeping, plain = run_engine(queries, streams_of(events), expire=False)
    assert expiring == keeping
    s, p = engine.stats(), plain.stats()
    assert s["instances_expired"] > 0 and p["instances_expired"] == 0
    assert s["instances_alive"] * 10 < p["instances_alive"], (s["instances_alive"], p["instances_alive"])
    assert 0 < s["bytes_per_instance"] < 4096
    assert engine.automaton("short").automata[0].nodes[1].dur_bound == 5
    assert engine.automaton("theta").automata[0].nodes[1].dur_bound == 3


# ---- the automaton description ----------------------------------------------------------------------

def test_automaton_description_splits_predicates_and_records_renaming():
    c = compile_query("S2", S_QUERIES["S2"], schemas={"Stock": ["Name", "Price"]})
    (a,) = c.automata
    assert [n.kind for n in a.nodes] == ["start", "NEXT", "end"]
    kinds = [(e.source, e.target, e.kind) for e in a.edges]
    assert kinds == [("start", "n1", "forward"), ("n1", "n1", "filter"), ("n1", "end", "forward")]
    start, filt, fwd = a.edges
    assert start.static == ("Name = 'IBM'", "Price > 100")
    assert filt.static == ("$2.Name = 'MSFT'",) and filt.dynamic == ()
    assert filt.predicate_text() == "NOT ($2.Name = 'MSFT')"
    assert fwd.output_filter == ("Price < 25",)
    assert fwd.renaming == (("Name", "Name_1"), ("Price", "Price_1"))
    s4 = compile_query("S4", S_QUERIES["S4"]).automata[0]
    rebind = [e for e in s4.edges if e.kind == "rebind"][0]
    assert rebind.dynamic == ("$2.Name = $1.Name", "$2.Price >= $.Price")
    assert s4.nodes[1].instance_index == ("$2.Name = $1.Name",)
    assert "renaming: $1.x -> x_1" in s4.describe()
    dot = s4.to_dot()
    assert dot.startswith('digraph "S4" {') and '"n1":s -> "n1":s' in dot and "style=dashed" in dot
    # a label's lines are joined by DOT's line break, not an escaped backslash that Graphviz would print
    assert 'label="n1\\nFOLD Stock\\nindex: $2.Name = $1.Name"' in dot and "\\\\" not in dot
    # A sub-query that is PUBLISHed and a non-left-deep right input become their own automata.
    nested = compile_query("q", "SELECT * FROM (FILTER{Price > 1}(Stock) PUBLISH Big) NEXT{} "
                                "(SELECT * FROM Stock NEXT{} Stock)")
    assert [a.query for a in nested.automata] == ["q", "q/Big", "q/_r_q_1"]
    assert nested.automata[0].reads == ("Big", "_r_q_1") and nested.automata[1].publishes == ("Big",)


def test_compile_errors_are_clear():
    with pytest.raises(UnsupportedSubscription, match="UNION .* publish_right_inputs=False"):
        compile_query("u", parse_algebra("Stock UNION Stock"), publish_right_inputs=False)
    with pytest.raises(UnsupportedSubscription, match="not left-deep: the right input of SEQUENCE is a SEQUENCE"):
        compile_query("n", "SELECT * FROM Stock NEXT{} (SELECT * FROM Stock NEXT{} Stock)",
                      publish_right_inputs=False)
    with pytest.raises(AnalysisError, match=r"unknown function nope\(\)"):
        compile_query("f", "SELECT * FROM FILTER{nope(Name)}(Stock)")
    engine = NFAEngine()
    engine.register("a", "SELECT * FROM Stock PUBLISH A")
    with pytest.raises(AnalysisError, match="published twice"):
        engine.register("b", "SELECT * FROM Stock PUBLISH A")
    with pytest.raises(AnalysisError, match="cycle"):
        engine.register("c", "SELECT * FROM C NEXT{} Stock PUBLISH C")
    with pytest.raises(AnalysisError, match="already registered"):
        engine.register("a", "Stock")
    engine.process("Stock", {"Name": "A", "t0": 5, "t1": 5})
    with pytest.raises(AnalysisError, match="end-time order"):
        engine.process("Stock", {"Name": "A", "t0": 4, "t1": 4})
    with pytest.raises(AnalysisError, match="unknown stream"):
        run_engine({"x": "SELECT * FROM Nope NEXT{} Stock"}, streams_of([]))


def test_process_releases_a_tick_when_it_closes():
    engine = NFAEngine()
    engine.register("s3", S_QUERIES["S3"])
    assert engine.process("Stock", ev("IBM", 100, 0)) == []
    assert engine.process("Stock", ev("IBM", 110, 1)) == []          # the match is at tick 1: not closed
    (m,) = engine.process("Stock", ev("MSFT", 1, 2))
    assert m.query == "s3" and (m.event["Price_1"], m.event["Price"], m.event["t0"], m.event["t1"]) == (100, 110, 0, 1)
    assert engine.flush() == [] and engine.instances() == 2        # IBM110@1 and MSFT1@2 wait


def test_unregister_prunes_only_what_no_other_query_shares():
    events = many_names_stream(400, 10)
    prefix = "SELECT * FROM FILTER{Price > 50}(Stock) NEXT{$1.Name = $2.Name} Stock"
    queries = {"a": f"SELECT * FROM ({prefix}) NEXT{{$1.Name = $2.Name}} Stock",
               "b": f"SELECT * FROM ({prefix}) FOLD{{$2.Price > $.Price, , }} Stock",
               "c": "SELECT * FROM FILTER{Name = 'S1'}(Stock) NEXT{} Stock PUBLISH C",
               "d": "SELECT * FROM C NEXT{$1.Name = $2.Name} Stock"}
    engine = NFAEngine()
    for name, q in queries.items():
        engine.register(name, q)
    first = engine.run(streams_of(events[:200]))
    assert engine.stats()["nodes"] == 5
    with pytest.raises(AnalysisError, match="read its stream 'C'"):
        engine.unregister("c")
    engine.unregister("a")
    engine.unregister("d")
    engine.unregister("c")
    assert engine.stats()["nodes"] == 2 and set(engine.queries) == {"b"}
    rest = engine.run(streams_of(events[200:]))
    alone, _ = run_engine({"b": queries["b"]}, streams_of(events))
    # b's matches are those of b alone (its instances were never touched by the removals)
    assert first["b"] + rest["b"] == alone["b"] and first["a"]
    engine.register("a", queries["a"])                     # registering again reuses the shared prefix
    assert engine.stats()["nodes"] == 3
    with pytest.raises(AnalysisError, match="no event query"):
        engine.unregister("zz")


def test_evaluation_errors_belong_to_the_query_that_raised():
    # Without declared types (no schemas) an ill-typed event still reaches the queries.  The evaluation
    # that raises fails for its query alone (DESIGN §7): the event is dropped at that FILTER, or the NEXT
    # step is not taken; the other queries — sharing the stream, the static index — keep every match.
    stock = [ev("IBM", 1, 0), {"Name": "IBM", "Price": "high", "t0": 1, "t1": 1}, ev("IBM", 5, 2)]
    q = {"a": "SELECT * FROM FILTER{Name = 'MSFT'}(Stock) NEXT{$2.Price * 2 > 6} Stock",  # θ on pairs only
         "b": "SELECT * FROM FILTER{Price * 2 > 6}(Stock)",           # raises on the second event
         "c": "SELECT * FROM Stock NEXT{$2.Price * 2 > $1.Price} Stock",  # raises on both pairs with 'high'
         "d": "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock"}    # never raises
    oracle_errors, engine_errors = {}, {}
    expected = evaluate_queries({n: parse_cel(t) for n, t in q.items()}, streams_of(stock), errors=oracle_errors)
    engine = NFAEngine()
    for name, text in q.items():
        engine.register(name, text)
    assert engine.run(streams_of(stock), errors=engine_errors) == expected
    assert [m["Price"] for m in expected["b"]] == [5]
    assert [(m["Price_1"], m["Price"]) for m in expected["c"]] == [(1, 5)]      # (1, 'high') skipped
    assert [(m["Price_1"], m["Price"]) for m in expected["d"]] == [(1, "high"), ("high", 5)]
    assert {n: [(e.stream, e.t1) for e in errs] for n, errs in engine_errors.items()} == {
        "a": [], "b": [("Stock", 1)], "c": [("Stock", 1), ("Stock", 2)], "d": []}
    assert "cannot apply" in engine_errors["b"][0].message
    assert {n: [t1 for _, t1, _ in errs] for n, errs in oracle_errors.items()} == {
        "a": [], "b": [1], "c": [1, 2], "d": []}
    # Documented deviation: a range index does not compare a string with numeric bounds, so the executor
    # never evaluates what the oracle reports; the matches are the same.
    q = {"e": "SELECT * FROM FILTER{Price > 3}(Stock)"}
    oracle_errors, engine_errors = {}, {}
    expected = evaluate_queries({"e": parse_cel(q["e"])}, streams_of(stock), errors=oracle_errors)
    engine = NFAEngine()
    engine.register("e", q["e"])
    assert engine.run(streams_of(stock), errors=engine_errors) == expected == {"e": [stock[2]]}
    assert len(oracle_errors["e"]) == 1 and engine_errors["e"] == []


# ---- UNION: compiled by publishing both inputs into one stream (004 §2.2 ∪) ---------------------------

@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(typed_queries(max_steps=1, nested=False), typed_queries(max_steps=2, nested=False),
       st.sampled_from(["top", "left", "right", "nested"]), stock_events())
def test_union_agrees_with_the_oracle(q1, q2, where, events):
    from sparksub.grammar.event_ast import Select, Sequence, Stream, Union
    from sparksub.grammar.events import parse_predicate
    u = Union(parse_cel(q1), parse_cel(q2))
    theta = parse_predicate("$1.Name = $2.Name")
    if where == "left":
        q = Sequence(u, Stream("Stock"), theta)
    elif where == "right":
        q = Sequence(parse_cel("SELECT * FROM FILTER{Price > 2}(Stock)"), u, theta)
    elif where == "nested":
        q = Union(u, Select(Stream("Stock"), parse_cel("SELECT * FROM FILTER{Price = 3}(Stock)").predicate))
    else:
        q = u
    expected = evaluate_queries({"q": q}, streams_of(events))
    got, engine = run_engine({"q": q}, streams_of(events))
    assert got["q"] == expected["q"]
    assert "_u_q_1" in engine.automaton("q").describe()
