"""Issue 15 items 2–4 on the pure executors (no Spark): Cayuga's resolution of unqualified names, the
registration type check, run-time errors charged to the query that raised them, and LIKE in linear time.

Oracles: the reference interpreter (``cayuga_reference``, independent of the executors), hand-written
Python over the event lists, and a brute-force LIKE matcher written here.
"""
from __future__ import annotations

import functools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import AnalysisError
from sparksub.grammar.event_analysis import analyse_query
from sparksub.grammar.events import parse_algebra, parse_cel, parse_event_query
from sparksub.grammar.sql_like import like, like_pattern_problem
from cayuga_reference import evaluate_queries
from sparksub.operators.events.partitions import events_table, feed_events
from sparksub.operators.events.nfa import NFAEngine
from sparksub.operators.events.batch import BatchEngine
from sparksub.operators.events.families import FamilyEngine

STOCK = {"Stock": {"Name": "string", "Price": "double", "Volume": "bigint"}}


class Batched(BatchEngine):
    """The batch executor with every batch vectorised (by default tiny batches run per event), fed 3
    events at a time by ``run``."""

    def __init__(self, **options):
        super().__init__(min_batch=1, batch_size=3, **options)


EXECUTORS = (NFAEngine, FamilyEngine, Batched)


def ev(name, price, t, volume=100, **more):
    return {"Name": name, "Price": price, "Volume": volume, "t0": t, "t1": t, **more}


def run_all(queries: dict, streams: dict, schemas: dict):
    """Each executor and the oracle over the same queries: {executor name: (results, errors)}."""
    out = {}
    for cls in EXECUTORS:
        engine = cls()
        for name, text in queries.items():
            engine.register(name, text, schemas=schemas)
        errors: dict = {}
        out[cls.__name__] = (engine.run(streams, errors=errors), errors)
    errors = {}
    asts = {n: parse_event_query(t) for n, t in queries.items()}
    out["oracle"] = (evaluate_queries(asts, streams, errors=errors), errors)
    return out


# ---- item 2: unqualified names as Cayuga's compiler resolves them --------------------------------------

PAIRS = [ev("IBM", 100.0, 0), ev("MSFT", 50.0, 1), ev("IBM", 90.0, 2), ev("MSFT", 120.0, 3), ev("IBM", 95.0, 4),
         ev("ORCL", 99.0, 5), ev("IBM", 101.0, 6)]


def test_a_plain_name_in_next_is_the_left_inputs_and_the_issue_example_matches():
    # The issue's example: IBM_PAIR (published) has IBMPrice, Stock does not; `IBMPrice` is $1.IBMPrice.
    queries = {"pair": "SELECT Price AS IBMPrice FROM FILTER{Name = 'IBM'}(Stock) PUBLISH IBM_PAIR",
               "above": "SELECT * FROM IBM_PAIR NEXT{IBMPrice < $2.Price} Stock"}
    got = run_all(queries, {"Stock": PAIRS}, STOCK)
    # independent: for each IBM event, the first later event priced above it
    expected = []
    for i, a in enumerate(PAIRS):
        if a["Name"] == "IBM":
            b = next((b for b in PAIRS[i + 1:] if b["Price"] > a["Price"]), None)
            if b is not None:
                expected.append((a["Price"], b["Name"], b["Price"], a["t0"], b["t1"]))
    assert expected                                                           # it does match
    for results, errors in got.values():
        assert [(m["IBMPrice"], m["Name"], m["Price"], m["t0"], m["t1"]) for m in results["above"]] == expected
        assert not any(errors.values())


def test_a_plain_name_in_fold_is_the_first_events_and_falls_back_to_the_right_input():
    # FOLD{θ, F, …}: `Price` is the chain's first event's (not the last step's, not the new event's);
    # the left input is projected without `Volume`, so `Volume` falls back to the new event's.
    queries = {"up": "SELECT * FROM (SELECT Name, Price FROM Stock) "
                     "FOLD{Name = $2.Name AND $2.Price > Price, Volume > 150, } Stock"}
    stock = [ev("IBM", 10.0, 0), ev("IBM", 12.0, 1, 200), ev("IBM", 9.0, 2), ev("IBM", 11.0, 3, 100),
             ev("IBM", 13.0, 4, 300)]
    resolved = analyse_query(parse_cel(queries["up"]), STOCK).query.to_cel()
    assert "$1.Name = $2.Name AND $2.Price > $1.Price, $2.Volume > 150" in resolved
    got = run_all(queries, {"Stock": stock}, STOCK)
    # independent: chains from each event; a step takes the next later event priced above the FIRST
    # event; the chain continues while the new event's Volume > 150
    expected = []
    for i, first in enumerate(stock):
        for b in stock[i + 1:]:
            if b["Price"] > first["Price"]:
                expected.append((first["t0"], b["t1"]))
                if not b["Volume"] > 150:
                    break
    expected.sort(key=lambda x: x[1])
    for results, _ in got.values():
        assert sorted(((m["t0"], m["t1"]) for m in results["up"]), key=lambda x: x[1]) == expected


def test_unknown_attributes_are_refused_with_their_position():
    cases = [("SELECT * FROM Stock NEXT{Nope = $2.Name} Stock", "Nope", (1, 26), "neither the left input"),
             ("SELECT * FROM FILTER{Pric > 3}(Stock)", "Pric", (1, 22), "the event has Name, Price, Volume"),
             ("SELECT Name, Cost FROM Stock", "Cost", (1, 14), "the event has"),
             ("SELECT * FROM Stock NEXT{$1.Name = $2.Nme} Stock", "$2.Nme", (1, 36), "the right input has"),
             ("SELECT * FROM Stock FOLD{, $.Vol > 1, } Stock", "$.Vol", (1, 28), "$ (the last step"),
             ("SELECT *\nFROM FILTER{Price > Price_1}(Stock)", "Price_1", (2, 21), "the event has")]
    for text, attr, pos, words in cases:
        for cls in EXECUTORS:
            engine = cls()
            with pytest.raises(AnalysisError) as info:
                engine.register("q", text, schemas=STOCK)
            message = str(info.value)
            assert f"unknown attribute {attr}" in message and words in message, message
            assert (info.value.line, info.value.column) == pos and "^" in message
            assert not engine.queries


def test_without_a_schema_an_unqualified_name_in_braces_is_refused_not_guessed():
    with pytest.raises(AnalysisError, match=r"cannot resolve the unqualified attribute Name .* write \$1.Name"):
        NFAEngine().register("q", "SELECT * FROM Stock NEXT{Name = $2.Name} Stock")
    # fully qualified queries need no schema, as before
    NFAEngine().register("q", "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock")


def test_the_algebra_reads_plain_names_in_braces_as_the_new_events():
    # 004 §2.2 (S4): μ's F compares `price` (the new event's) with `price.last`
    q = parse_algebra("MU[Price >= Price.last; $2.Name = $1.Name](Stock, Stock)")
    assert q == parse_cel("SELECT * FROM Stock FOLD{$2.Name = $1.Name, $2.Price >= $.Price, } Stock")


# ---- item 3: the registration type check ----------------------------------------------------------

ILL_TYPED = [
    ("SELECT * FROM Stock NEXT{$1.Name = $2.Name AND $2.Price > 'abc'} Stock", (1, 57), "cannot compare"),
    ("SELECT * FROM FILTER{Name > 20}(Stock)", (1, 27), "cannot compare Name (a string) with 20"),
    ("SELECT * FROM FILTER{Name = 20}(Stock)", (1, 27), "cannot compare"),
    ("SELECT Name + 'x' AS s FROM Stock", (1, 8), "arithmetic '+' needs numbers"),
    ("SELECT * FROM FILTER{Name * 2 > 1}(Stock)", (1, 22), "arithmetic '*' needs numbers"),
    ("SELECT * FROM FILTER{Price LIKE 'a%'}(Stock)", (1, 22), "LIKE needs a string"),
    ("SELECT * FROM FILTER{abs(Name) > 1}(Stock)", (1, 26), "abs() needs a number"),
    ("SELECT * FROM FILTER{lower(Name, Name) = 'a'}(Stock)", (1, 22), "takes 1 argument"),
    ("SELECT * FROM FILTER{Price}(Stock)", (1, 22), "not a predicate"),
    ("SELECT * FROM FILTER{NOT Price AND TRUE}(Stock)", (1, 26), "NOT needs a predicate"),
    ("SELECT * FROM FILTER{Name LIKE 'a\\b'}(Stock)", (1, 32), "escape character"),
    ("SELECT * FROM (SELECT Name, Name AS Price FROM Stock) FOLD{, $.Price < 5, } Stock", (1, 70), "differs by event"),
    ("SELECT * FROM Stock NEXT{-$2.Name = 1} Stock", (1, 27), "unary minus needs a number"),
]


@pytest.mark.parametrize("text,pos,words", ILL_TYPED)
def test_ill_typed_queries_are_refused_at_registration_and_change_nothing(text, pos, words):
    for cls in EXECUTORS:
        engine = cls()
        engine.register("fine", "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock", schemas=STOCK)
        before = engine.snapshot()
        with pytest.raises(AnalysisError) as info:
            engine.register("bad", text, schemas=STOCK)
        assert words in str(info.value) and (info.value.line, info.value.column) == pos, str(info.value)
        assert list(engine.queries) == ["fine"] and engine.snapshot() == before
        out = engine.run({"Stock": PAIRS})
        assert out == evaluate_queries({"fine": parse_cel("SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock")},
                                       {"Stock": PAIRS})


def test_the_slot_of_a_family_never_leaks_into_an_error():
    # Without declared types a string meets a family's numeric constant: a clear message, charged to the
    # queries of that family alone (was: TypeError: not an expression: _Slot(...)).
    engine = FamilyEngine()
    for k, c in enumerate((1, 2, 3)):
        engine.register(f"f{k}", f"SELECT * FROM FILTER{{Price > {c}}}(Stock) NEXT{{$2.Price > $1.Price}} Stock")
    engine.register("other", "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock")
    stock = [ev("A", 5, 0), ev("A", "x", 1), ev("A", 6, 2)]
    errors: dict = {}
    out = engine.run({"Stock": stock}, errors=errors)
    assert out["other"] == [{"Name_1": "A", "Price_1": 5, "Volume_1": 100, "Name": "A", "Price": "x", "Volume": 100,
                             "t0": 0, "t1": 1},
                            {"Name_1": "A", "Price_1": "x", "Volume_1": 100, "Name": "A", "Price": 6, "Volume": 100,
                             "t0": 1, "t1": 2}]
    assert errors["other"] == [] and all([e.t1 for e in errors[f"f{k}"]] == [1] for k in range(3))
    assert all("_Slot" not in e.message and ":p1" in e.message for k in range(3) for e in errors[f"f{k}"])


# ---- item 3: a run-time error belongs to the query that raised it -------------------------------------

def test_a_run_time_error_is_charged_to_its_query_alone_in_every_executor():
    # After the type check a numeric overflow is still possible.  The queries share the stream, the
    # static index (Price > 2), a prefix (Stock NEXT{$1.Name = $2.Name}) and a family (its constants).
    queries = {"boom": "SELECT * FROM FILTER{Price > 2}(Stock) "
                       "NEXT{$1.Name = $2.Name AND $2.Price ^ $1.Volume > 1} Stock",
               "same_prefix": "SELECT * FROM FILTER{Price > 2}(Stock) NEXT{$1.Name = $2.Name} Stock",
               "family_1": "SELECT * FROM FILTER{Price > 2}(Stock) NEXT{$1.Name = $2.Name AND $2.Price > 3} Stock",
               "family_2": "SELECT * FROM FILTER{Price > 4}(Stock) NEXT{$1.Name = $2.Name AND $2.Price > 5} Stock",
               "outer": "SELECT Name, Price ^ Volume AS big FROM FILTER{Price > 2}(Stock)"}
    stock = [ev("IBM", 3.0, 0, 1), ev("IBM", 10.0, 1, 400), ev("IBM", 6.0, 2, 2), ev("IBM", 7.0, 3, 1)]
    got = run_all(queries, {"Stock": stock}, STOCK)
    oracle_results, oracle_errors = got["oracle"]
    for name in ("same_prefix", "family_1", "family_2"):                  # each alone: the oracle
        alone = evaluate_queries({name: parse_cel(queries[name])}, {"Stock": stock})[name]
        assert alone and oracle_results[name] == alone
    # boom: (3@0, 10@1) is fine (10^1); (10@1, 6@2) overflows (6^400): skipped, (10@1, 7@3) overflows too
    assert [(m["t0"], m["t1"]) for m in oracle_results["boom"]] == [(0, 1), (2, 3)]
    assert [t1 for _, t1, _ in oracle_errors["boom"]] == [2, 3]
    assert [m["t1"] for m in oracle_results["outer"]] == [0, 2, 3]          # 10.0 ^ 400: dropped
    for executor in ("NFAEngine", "FamilyEngine", "Batched"):
        results, errors = got[executor]
        assert results == oracle_results, executor
        assert {n: [(e.stream, e.t1) for e in errs] for n, errs in errors.items()} == {
            "boom": [("Stock", 2), ("Stock", 3)], "same_prefix": [], "family_1": [], "family_2": [],
            "outer": [("Stock", 1)]}, executor
        assert all("cannot apply ^" in e.message for e in errors["boom"] + errors["outer"])


def test_feed_events_reports_each_error_once_for_its_query_and_keeps_the_batch():
    import pyarrow as pa
    engine = FamilyEngine()
    engine.register("ok", "SELECT * FROM FILTER{Price > 1}(Stock)", schemas=STOCK)
    engine.register("boom", "SELECT * FROM FILTER{Price ^ 1000.0 > 1}(Stock)", schemas=STOCK)
    batch = events_table({"Name": pa.array(["a", "b", "c"]), "Price": pa.array([1.0, 3.0, 2.0]),
                          "Volume": pa.array([1, 1, 1])}, [0, 1, 2], [0, 1, 2], [10, 11, 12])
    errors: list = []
    matches = feed_events(engine, ["Stock"], batch, errors)
    # 3.0 ^ 1000 overflows: b is lost to `boom` alone; 2.0 ^ 1000 does not
    assert sorted((m.query, m.event["Name"]) for m in matches) == [("boom", "c"), ("ok", "b"), ("ok", "c")]
    assert [(i, e.query, e.t1) for i, e in errors] == [(1, "boom", 1)]


# ---- item 4: LIKE, linear, Spark SQL's semantics ------------------------------------------------------

def brute_like(text: str, pattern: str) -> bool:
    """Spark SQL LIKE by exhaustive recursion over (text, pattern) positions (memoised)."""
    tokens, i = [], 0
    while i < len(pattern):
        if pattern[i] == "\\":
            tokens.append(("lit", pattern[i + 1]))
            i += 2
        else:
            tokens.append(("any",) if pattern[i] == "_" else ("star",) if pattern[i] == "%" else ("lit", pattern[i]))
            i += 1

    @functools.lru_cache(maxsize=None)
    def match(a: int, b: int) -> bool:
        if b == len(tokens):
            return a == len(text)
        kind = tokens[b][0]
        if kind == "star":
            return match(a, b + 1) or (a < len(text) and match(a + 1, b))
        return a < len(text) and (kind == "any" or text[a] == tokens[b][1]) and match(a + 1, b + 1)
    return match(0, 0)


patterns = st.lists(st.sampled_from(["a", "b", "%", "_", "\\%", "\\_", "\\\\", "\n"]), max_size=7).map("".join)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet="ab%_\\\n", max_size=9), patterns)
def test_like_equals_a_brute_force_matcher(text, pattern):
    assert like_pattern_problem(pattern) is None
    assert like(text, pattern) == brute_like(text, pattern)


@pytest.mark.parametrize("pattern", ["a\\", "a\\b", "\\a%"])
def test_misplaced_escapes_are_invalid_patterns(pattern):
    assert like_pattern_problem(pattern) and "escape" in like_pattern_problem(pattern)
    with pytest.raises(AnalysisError, match="escape"):
        like("ab", pattern)


def test_like_with_a_pattern_from_an_event_is_linear():
    # The issue's case: 12 `%a` pairs against 40 characters (a backtracking regex took over 20 s).
    text, pattern = "a" * 39 + "b", "%a" * 12
    queries = {"q": "SELECT * FROM Docs NEXT{$2.Txt LIKE $1.Pat} Docs",
               "bad": "SELECT * FROM Docs NEXT{$2.Txt LIKE $1.Pat AND $2.Txt = 'never'} Docs"}
    docs = {"Docs": {"Txt": "string", "Pat": "string"}}
    stream = [{"Txt": "x", "Pat": pattern, "t0": 0, "t1": 0}] + \
             [{"Txt": text, "Pat": "", "t0": t, "t1": t} for t in range(1, 30)] + \
             [{"Txt": text[:-1], "Pat": "", "t0": 30, "t1": 30}]
    started = time.perf_counter()
    for cls in EXECUTORS:
        engine = cls()
        for name, q in queries.items():
            engine.register(name, q, schemas=docs)
        out = engine.run({"Docs": stream})
        assert [(m["t0"], m["t1"]) for m in out["q"]] == [(0, 30)] and out["bad"] == []
    assert time.perf_counter() - started < 2.0               # a hang guard, not a benchmark
    assert brute_like(text[:-1], pattern) and not brute_like(text, pattern)


def test_a_bad_pattern_read_from_an_event_is_charged_to_its_query():
    docs = {"Docs": {"Txt": "string", "Pat": "string"}}
    queries = {"like": "SELECT * FROM Docs NEXT{$2.Txt LIKE $1.Pat} Docs",
               "plain": "SELECT * FROM Docs NEXT{$2.Txt = $1.Txt} Docs"}
    stream = [{"Txt": "a", "Pat": "a\\", "t0": 0, "t1": 0}, {"Txt": "a", "Pat": "%", "t0": 1, "t1": 1},
              {"Txt": "a", "Pat": "", "t0": 2, "t1": 2}]
    got = run_all(queries, {"Docs": stream}, docs)
    expected = got["oracle"][0]
    assert [(m["t0"], m["t1"]) for m in expected["like"]] == [(1, 2)]           # (0, ·): invalid pattern
    assert [(m["t0"], m["t1"]) for m in expected["plain"]] == [(0, 1), (1, 2)]
    for executor in ("NFAEngine", "FamilyEngine", "Batched"):
        results, errors = got[executor]
        assert results == expected
        assert [e.t1 for e in errors["like"]] == [1, 2] and errors["plain"] == []
