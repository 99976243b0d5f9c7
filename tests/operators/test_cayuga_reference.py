"""The reference interpreter of Cayuga event queries (DESIGN §4), on hand-worked examples and against
independent brute-force formulations (hypothesis).

Each expected output below is worked out by hand from the semantics; the comments show the reasoning.
Timestamps: ``ev(..., t)`` is an instantaneous event at tick t; ``t0``/``t1`` give an interval.
"""
from __future__ import annotations

from itertools import count

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from event_strategies import stock_events
from sparksub.errors import AnalysisError
from sparksub.grammar.events import parse_algebra, parse_cel
from cayuga_reference import (
    ReferenceInterpreter, combine_attributes, evaluate, evaluate_queries,
)


def ev(name, price, t=None, *, t0=None, t1=None, **more):
    e = {"Name": name, "Price": price, **more}
    if t is not None:
        e["t0"] = e["t1"] = t
    if t0 is not None:
        e["t0"], e["t1"] = t0, t1
    return e


def run(text, stock, **options):
    return evaluate(parse_cel(text), {"Stock": stock}, **options)


def project(outputs, *keys):
    return [tuple(o.get(k) for k in keys) for o in outputs]


# ---- sequence: first match, skipping, outer selection -------------------------------------------

def test_sequence_skips_theta_failing_events():
    stock = [ev("IBM", 100, 0), ev("MSFT", 20, 1), ev("IBM", 105, 2), ev("MSFT", 22, 3)]
    out = run("SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock", stock)
    # IBM@0: MSFT@1 fails θ and is skipped; IBM@2 is the first match -> (0, 2).
    # MSFT@1: IBM@2 skipped; MSFT@3 -> (1, 3).   IBM@2, MSFT@3: no later same-name event.
    assert out == [
        {"Name_1": "IBM", "Price_1": 100, "Name": "IBM", "Price": 105, "t0": 0, "t1": 2},
        {"Name_1": "MSFT", "Price_1": 20, "Name": "MSFT", "Price": 22, "t0": 1, "t1": 3},
    ]


def test_outer_selection_tests_the_first_match_only():
    stock = [ev("IBM", 100, 0), ev("IBM", 101, 1), ev("IBM", 110, 2)]
    # S3 (004 Table 2): σ[Price > 1.05 Price_1](S ;[same name] S).
    # IBM100@0: first match IBM101@1; 101 > 105 fails -> no output, and IBM110@2 is NOT tried.
    # IBM101@1: first match IBM110@2; 110 > 106.05 -> output (1, 2).
    outer = run("SELECT * FROM FILTER{Price > 1.05 * Price_1}(Stock NEXT{$1.Name = $2.Name} Stock)", stock)
    assert project(outer, "Price_1", "Price", "t0", "t1") == [(101, 110, 1, 2)]
    # The same condition inside θ instead skips IBM101@1 for IBM100@0: two outputs.
    inner = run("SELECT * FROM Stock NEXT{$1.Name = $2.Name AND $2.Price > 1.05 * $1.Price} Stock", stock)
    assert project(inner, "Price_1", "Price", "t0", "t1") == [(100, 110, 0, 2), (101, 110, 1, 2)]


def test_simultaneous_events_never_follow_each_other():
    stock = [ev("IBM", 1, 0), ev("IBM", 2, 0), ev("IBM", 3, 1)]
    # e2 must start after e1 ends (e1.t1 < e2.t0): the two events at tick 0 cannot be sequenced.
    # IBM1@0 -> IBM3@1;  IBM2@0 -> IBM3@1;  IBM3@1 -> nothing.
    out = run("SELECT * FROM Stock NEXT{} Stock", stock)
    assert project(out, "Price_1", "Price", "t0", "t1") == [(1, 3, 0, 1), (2, 3, 0, 1)]


def test_interval_events_first_by_end_time_and_overlaps_skipped():
    stock = [ev("A", 1, t0=0, t1=2), ev("A", 2, t0=1, t1=3), ev("A", 3, t0=6, t1=9), ev("A", 4, t0=5, t1=7)]
    # Processing order (by t1): P1(0,2) P2(1,3) P4(5,7) P3(6,9).
    # P1: P2 starts at 1 <= 2 (overlaps) -> skipped; P4 starts at 5 > 2 -> (0, 7).
    # P2: P4 -> (1, 7).  P4: P3 starts at 6, not after 7.  P3: nothing later.
    out = run("SELECT * FROM Stock NEXT{} Stock", stock)
    assert project(out, "Price_1", "Price", "t0", "t1") == [(1, 4, 0, 7), (2, 4, 1, 7)]
    # DUR = t1 - t0 + 1: 8 for (0, 7), 7 for (1, 7).
    out = run("SELECT * FROM FILTER{DUR >= 8}(Stock NEXT{} Stock)", stock)
    assert project(out, "t0", "t1") == [(0, 7)]


def test_renaming_convention_for_earlier_events():
    stock = [ev("A", 1, 0, Volume=10), ev("A", 2, 1, Volume=20), ev("A", 3, 2, Volume=30)]
    out = run("Stock NEXT{} Stock NEXT{} Stock", stock)
    # ((e1 ⊗ e2) ⊗ e3): e1's attributes move twice (_1_1), e2's once (_1), e3's keep their names.
    assert out == [{"Name_1_1": "A", "Price_1_1": 1, "Volume_1_1": 10, "Name_1": "A", "Price_1": 2,
                    "Volume_1": 20, "Name": "A", "Price": 3, "Volume": 30, "t0": 0, "t1": 2}]
    # Only clashing names move; a right attribute already named x_1 pushes the left one further.
    assert combine_attributes({"a": 1, "b": 2}, {"a": 3}) == {"a_1": 1, "b": 2, "a": 3}
    assert combine_attributes({"a": 1}, {"a": 2, "a_1": 3}) == {"a_1_1": 1, "a": 2, "a_1": 3}


# ---- iteration: every step output, stop on the rebind condition ----------------------------------

ITERATION_STOCK = [ev("IBM", 10, 0), ev("IBM", 12, 1), ev("MSFT", 50, 2), ev("IBM", 15, 3),
                   ev("IBM", 13, 4), ev("IBM", 20, 5)]


def test_iteration_outputs_every_step_and_stops_when_rebind_fails():
    out = run("SELECT * FROM Stock FOLD{$1.Name = $2.Name, $2.Price > $.Price, } Stock", ITERATION_STOCK)
    # Chain from IBM10@0: 12@1 output, 12 > 10 continue; MSFT@2 fails θ, skipped; 15@3 output,
    #   continue; 13@4 output, but 13 > 15 fails: the step is output and the chain ends (20@5 unused).
    # From IBM12@1: 15@3 output, continue; 13@4 output, stop.   From MSFT50@2: no later MSFT.
    # From IBM15@3: 13@4 output, stop.   From IBM13@4: 20@5 output, continue; stream ends.
    # Sorted by t1 (ties in the order of the chains' first events).
    assert project(out, "Price_1", "Price", "t0", "t1") == [
        (10, 12, 0, 1),
        (10, 15, 0, 3), (12, 15, 1, 3),
        (10, 13, 0, 4), (12, 13, 1, 4), (15, 13, 3, 4),
        (13, 20, 4, 5),
    ]
    assert out[0] == {"Name_1": "IBM", "Price_1": 10, "Name": "IBM", "Price": 12, "t0": 0, "t1": 1}


def test_iteration_with_the_condition_in_theta_skips_instead_of_stopping():
    # Issue 6 example 3: the rising condition in θ, empty F: falling events are skipped, chains never end.
    out = run("SELECT * FROM Stock FOLD{$1.Name = $2.Name AND $.Price < $2.Price, ,} Stock", ITERATION_STOCK)
    # From 10@0: 12@1, 15@3, (13@4 < 15 skipped), 20@5.  From 12@1: 15@3, 20@5.  From 15@3: 20@5.
    # From 13@4: 20@5.
    assert project(out, "Price_1", "Price", "t0", "t1") == [
        (10, 12, 0, 1),
        (10, 15, 0, 3), (12, 15, 1, 3),
        (10, 20, 0, 5), (12, 20, 1, 5), (15, 20, 3, 5), (13, 20, 4, 5),
    ]


def test_iteration_last_is_s1_before_the_first_step():
    # $.Price starts as the first event's Price (004 §2.2): the first step compares with e1.
    stock = [ev("A", 5, 0), ev("A", 4, 1), ev("A", 6, 2)]
    out = run("Stock FOLD{$2.Price > $.Price, , } Stock", stock)
    # From 5@0: 4@1 fails θ (4 > 5), 6@2 -> (0, 2).  From 4@1: 6@2 -> (1, 2).
    assert project(out, "Price_1", "Price", "t0", "t1") == [(5, 6, 0, 2), (4, 6, 1, 2)]


def test_aggregates_initialise_accumulate_finalise():
    stock = [ev("IBM", 10, 0), ev("IBM", 12, 1), ev("IBM", 11, 2)]
    fold = ("(SELECT *, 1 AS cnt, Price AS sumPrice FROM Stock) FOLD{$1.Name = $2.Name, $.Price < $2.Price, "
            "$.cnt + 1 AS cnt, $.sumPrice + $2.Price AS sumPrice} Stock")
    out = run("SELECT * FROM " + fold, stock)
    # g1 (init): cnt = 1, sumPrice = Price.  From 10@0: step 12@1: cnt 2, sumPrice 22, output; rebind
    #   10 < 12 holds, continue with $ = (Price 12, cnt 2, sumPrice 22).  Step 11@2: cnt 3, sumPrice 33,
    #   output; 12 < 11 fails: end.   From 12@1: step 11@2: cnt 2, sumPrice 23, output; end.
    assert out == [
        {"Name_1": "IBM", "Price_1": 10, "cnt": 2, "sumPrice": 22, "Name": "IBM", "Price": 12, "t0": 0, "t1": 1},
        {"Name_1": "IBM", "Price_1": 10, "cnt": 3, "sumPrice": 33, "Name": "IBM", "Price": 11, "t0": 0, "t1": 2},
        {"Name_1": "IBM", "Price_1": 12, "cnt": 2, "sumPrice": 23, "Name": "IBM", "Price": 11, "t0": 1, "t1": 2},
    ]
    # g3 (finalise) over the outputs: the average of each chain.
    final = run(f"SELECT Name, sumPrice / cnt AS avg FROM ({fold})", stock)
    assert project(final, "avg", "t0", "t1") == [(11.0, 0, 1), (11.0, 0, 2), (11.5, 1, 2)]


def test_aggregates_all_read_the_state_before_the_step():
    stock = [ev("A", 1, 0), ev("A", 2, 1), ev("A", 3, 2)]
    # a and b swap each step: both read the old $ (simultaneous assignment, as 004's g2 reads .last).
    out = run("(SELECT *, 0 AS a, 1 AS b FROM Stock) FOLD{, , $.b AS a, $.a AS b} Stock", stock)
    assert project(out, "a", "b", "t0", "t1") == [(1, 0, 0, 1), (0, 1, 0, 2), (1, 0, 1, 2)]
    # From 1@0: step 2@1 -> (a, b) = (1, 0); step 3@2 -> (0, 1).  From 2@1: step 3@2 -> (1, 0).


# ---- DUR ------------------------------------------------------------------------------------------

def test_s4_dur_in_minutes_and_the_step_that_breaks_the_run():
    # A tick is a minute (seconds_per_tick=60), so `30 MIN` is 30 ticks.
    stock = [ev("IBM", 10, 0), ev("IBM", 11, 10), ev("IBM", 12, 20), ev("IBM", 13, 31), ev("IBM", 9, 40)]
    out = run("SELECT * FROM FILTER{DUR >= 30 MIN}(Stock FOLD{$2.Name = $1.Name, $2.Price >= $.Price, } Stock)",
              stock, seconds_per_tick=60)
    # Chain from 10@0: steps end at 10, 20, 31 (DUR 32 ✓) and 40 (9 >= 13 fails: the step is still
    # output, DUR 41 ✓, and the chain ends — DESIGN §4).  From 11@10: ..., (10, 40) DUR 31 ✓.
    # From 12@20: (20, 31) DUR 12, (20, 40) DUR 21.  From 13@31: (31, 40) DUR 10.
    assert project(out, "Price_1", "Price", "t0", "t1") == [(10, 13, 0, 31), (10, 9, 0, 40), (11, 9, 10, 40)]


def test_dur_units_convert_to_ticks():
    stock = [ev("A", 1, t0=0, t1=599), ev("A", 1, t0=0, t1=600)]
    # DUR is 600 and 601 ticks; a tick is a second by default.
    assert project(run("FILTER{DUR > 10min}(Stock)", stock), "t1") == [(600,)]
    assert project(run("FILTER{DUR > 10min}(Stock)", stock, seconds_per_tick=0.5), "t1") == []
    assert project(run("FILTER{DUR = 601}(Stock)", stock), "t1") == [(600,)]


# ---- the issue's fifth example ---------------------------------------------------------------------

FIFTH_STOCK = [ev("IBM", 100, 0, Volume=20000), ev("IBM", 95, 5, Volume=100), ev("MSFT", 50, 7, Volume=100),
               ev("IBM", 90, 12, Volume=100), ev("IBM", 96, 14, Volume=100), ev("IBM", 97, 20, Volume=100)]


def test_fifth_example_with_the_select_over_the_fold():
    # The intent of issue 6's fifth example (monotonic fall for > 10 minutes after a large trade, then a
    # 5% rise): the SELECT renaming Price_1/Price applies to the FOLD's output.  A tick is a minute.
    text = ("SELECT Name, MaxPrice, MinPrice, Price AS FinalPrice FROM FILTER{DUR > 10min}("
            "SELECT Name, Price_1 AS MaxPrice, Price AS MinPrice FROM FILTER{Volume > 10000}(Stock) "
            "FOLD{$2.Name = $.Name, $2.Price < $.Price,} Stock) "
            "NEXT{$2.Name = $1.Name AND $2.Price > 1.05*$1.MinPrice} Stock")
    out = run(text, FIFTH_STOCK, seconds_per_tick=60)
    # Large trade: IBM100@0 only.  Its chain: 95@5 (output, 95 < 100 continue), MSFT skipped,
    # 90@12 (output, continue), 96@14 (output; 96 < 90 fails: end).  SELECT: (Max, Min) = (100, 95) on
    # (0,5), (100, 90) on (0,12), (100, 96) on (0,14).  DUR > 10: DUR 6 dropped; 13 and 15 kept.
    # NEXT: (0,12) Min 90 needs > 94.5: the first IBM after 12 is 96@14 -> match (0, 14).
    #       (0,14) Min 96 needs > 100.8: 97@20 fails and is skipped; no output.
    assert out == [{"Name": "IBM", "MaxPrice": 100, "MinPrice": 90, "FinalPrice": 96, "t0": 0, "t1": 14}]


def test_fifth_example_as_written_runs():
    # As written, the SELECT renaming applies to FILTER{Volume > 10000}(Stock), which has no Price_1 and,
    # after the projection, no Price: MaxPrice is NULL and the FOLD's $.Price is unbound at the first
    # step, so its rebind condition is NULL and every chain ends after one step: 95@5, DUR 6 <= 10.
    out = run(ISSUE_FIFTH := (
        "SELECT Name, MaxPrice, MinPrice, Price AS FinalPrice FROM FILTER{DUR > 10min}((SELECT Name, "
        "Price_1 AS MaxPrice, Price AS MinPrice FROM FILTER{Volume > 10000}(Stock)) FOLD{$2.Name = $.Name, "
        "$2.Price < $.Price,} Stock) NEXT{$2.Name = $1.Name AND $2.Price > 1.05*$1.MinPrice} Stock"),
        FIFTH_STOCK, seconds_per_tick=60)
    assert out == []
    with pytest.raises(AnalysisError, match="Price_1"):
        run(ISSUE_FIFTH, FIFTH_STOCK, strict=True)


# ---- 004 Table 1: S2, S5, S6, S7 on small streams --------------------------------------------------

def test_s2_first_msft_after_ibm():
    stock = [ev("IBM", 101, 0), ev("MSFT", 30, 1), ev("MSFT", 20, 2), ev("IBM", 105, 3), ev("MSFT", 24, 4)]
    out = run("SELECT * FROM FILTER{Price < 25}(FILTER{Name = 'IBM' AND Price > 100}(Stock) "
              "NEXT{$2.Name = 'MSFT'} Stock)", stock)
    # IBM101@0: the first MSFT after it is 30@1, not below 25: no output (MSFT20@2 is not tried).
    # IBM105@3: the first MSFT after it is 24@4 -> output.
    assert project(out, "Price_1", "Price", "t0", "t1") == [(105, 24, 3, 4)]


def test_s5_next_ibm_above_its_52_week_average():
    stock = [ev("IBM", 10, 0), ev("MSFT", 99, 5), ev("IBM", 20, 51), ev("IBM", 16, 60)]
    text = ("SELECT * FROM FILTER{Price > AVG}(FILTER{DUR = 52 WEEK}((SELECT *, Price AS AVG, 1 AS COUNT "
            "FROM FILTER{Name = 'IBM'}(Stock)) FOLD{, , ($.COUNT * $.AVG + $2.Price) / ($.COUNT + 1) AS AVG, "
            "$.COUNT + 1 AS COUNT} FILTER{Name = 'IBM'}(Stock)) NEXT{$2.Name = 'IBM'} Stock)")
    out = run(text, stock, seconds_per_tick=7 * 86400)   # a tick is a week
    # Chains over IBM only (θ = TRUE): from 10@0: 20@51 -> AVG (1*10 + 20)/2 = 15, COUNT 2, DUR 52 ✓;
    # 16@60 -> DUR 61.  From 20@51: 16@60 -> DUR 10.  Kept: (0, 51) with AVG 15.
    # NEXT: the first IBM after week 51 is 16@60; 16 > 15 -> output.  Attributes: e1's moved twice.
    assert out == [{"Name_1_1": "IBM", "Price_1_1": 10, "AVG": 15.0, "COUNT": 2, "Name_1": "IBM",
                    "Price_1": 20, "Name": "IBM", "Price": 16, "t0": 0, "t1": 60}]


def post(site, description, link, t, category=""):
    return {"website": site, "category": category, "description": description, "link": link, "t0": t, "t1": t}


BLOGS = "website = 'blog1.com' OR website = 'blog2.com'"


def test_s6_first_blog_post_referencing_the_article():
    posts = [post("military.com", "morale report", "mil.com/a1", 0, "US troop morale"),
             post("blog3.com", "see mil.com/a1", "b3/1", 1),       # not one of my blogs
             post("blog1.com", "nothing", "b1/1", 2),              # θ fails: skipped
             post("blog2.com", "read mil.com/a1", "b2/1", 3),      # the first match
             post("blog1.com", "also mil.com/a1", "b1/2", 4)]      # not the first
    out = evaluate(parse_cel(
        "SELECT * FROM FILTER{website = 'military.com' AND category = 'US troop morale'}(posts) "
        f"NEXT{{contains($2.description, $1.link)}} FILTER{{{BLOGS}}}(posts)"), {"posts": posts})
    assert project(out, "link_1", "website", "link", "t0", "t1") == [("mil.com/a1", "blog2.com", "b2/1", 0, 3)]


def test_s7_chain_of_references():
    posts = [post("blog1.com", "about XYZ", "L0", 0),
             post("blog2.com", "cites L0", "L1", 1),
             post("blog3.com", "cites L1", "L2", 2),      # not one of my blogs
             post("blog1.com", "cites L1", "L3", 3),
             post("blog2.com", "cites L0", "L4", 4)]      # references L0, not the previous post L3
    q = parse_algebra(f"MU[ID; contains($2.description, link.last)](SELECT[({BLOGS}) AND "
                      f"contains(description, 'XYZ')](posts), SELECT[{BLOGS}](posts))")
    out = evaluate(q, {"posts": posts})
    # Chain from post 0 ($.link = L0): post 1 cites L0 -> output, $.link = L1; post 3 cites L1 ->
    # output, $.link = L3; post 4 does not cite L3 -> skipped.  F = ID: the chain never stops.
    assert project(out, "link_1", "link", "t0", "t1") == [("L0", "L1", 0, 1), ("L0", "L3", 0, 3)]


# ---- other operators, PUBLISH, data handling -------------------------------------------------------

def test_union_rename_project_in_the_algebra():
    stock = [ev("IBM", 1, 0), ev("MSFT", 2, 1), ev("IBM", 3, 2)]
    q = parse_algebra("PROJECT[Name, p * 10 AS p10](RENAME[Price -> p](SELECT[Name = 'MSFT'](Stock) "
                      "UNION SELECT[Price = 3](Stock)))")
    assert evaluate(q, {"Stock": stock}) == [{"Name": "MSFT", "p10": 20, "t0": 1, "t1": 1},
                                             {"Name": "IBM", "p10": 30, "t0": 2, "t1": 2}]


def test_published_stream_feeds_another_query():
    stock = [ev("IBM", 101, 0), ev("IBM", 90, 1), ev("IBM", 102, 2)]
    queries = {"big": parse_cel("SELECT * FROM FILTER{Price > 100}(Stock) PUBLISH Big"),
               "after": parse_cel("SELECT * FROM Big NEXT{$1.Name = $2.Name} Stock")}
    out = evaluate_queries(dict(reversed(queries.items())), {"Stock": stock})   # order does not matter
    inline = run("SELECT * FROM FILTER{Price > 100}(Stock) NEXT{$1.Name = $2.Name} Stock", stock)
    assert out["after"] == inline == [{"Name_1": "IBM", "Price_1": 101, "Name": "IBM", "Price": 90, "t0": 0, "t1": 1}]
    assert project(out["big"], "Price") == [(101,), (102,)]


def test_events_without_timestamps_and_unsorted_input():
    # Without t0/t1 the n-th event is at tick n; input is processed by t1 whatever its list order.
    assert project(run("Stock NEXT{} Stock", [ev("A", 1), ev("A", 2)]), "Price_1", "Price", "t0", "t1") == [(1, 2, 0, 1)]
    out = run("Stock NEXT{} Stock", [ev("A", 2, 5), ev("A", 1, 3)])
    assert project(out, "Price_1", "Price") == [(1, 2)]
    with pytest.raises(AnalysisError, match="t0 <= t1"):
        run("Stock", [ev("A", 1, t0=3, t1=2)])
    with pytest.raises(AnalysisError, match="unknown stream"):
        evaluate(parse_cel("Nope"), {})


def test_nulls_are_three_valued_and_strict_mode_names_the_attribute():
    stock = [ev("A", 1, 0), {"Name": "B", "Price": None, "t0": 1, "t1": 1}]
    assert project(run("FILTER{Price > 0}(Stock)", stock), "Name") == [("A",)]
    assert project(run("FILTER{NOT (Price > 0)}(Stock)", stock), "Name") == []          # NOT NULL is NULL
    assert project(run("FILTER{Price > 0 OR Name = 'B'}(Stock)", stock), "Name") == [("A",), ("B",)]
    assert run("FILTER{Missing = 1}(Stock)", stock) == []
    with pytest.raises(AnalysisError, match="unknown attribute Missing"):
        run("FILTER{Missing = 1}(Stock)", stock, strict=True)
    with pytest.raises(AnalysisError, match="unknown function"):
        run("FILTER{nope(Name)}(Stock)", stock)
    assert project(run("FILTER{Name LIKE 'A%'}(Stock)", stock), "Name") == [("A",)]
    assert project(run("SELECT Name, Price / 0 AS z FROM Stock", stock), "z") == [(None,), (None,)]


# ---- cross-checks against independent formulations (hypothesis) ------------------------------------

# θ of a sequence: CEL text and the same condition as Python on (e1, e2).
SEQ_THETAS = [
    ("", lambda a, b: True),
    ("$1.Name = $2.Name", lambda a, b: a["Name"] == b["Name"]),
    ("$1.Name = $2.Name AND $2.Price > $1.Price", lambda a, b: a["Name"] == b["Name"] and b["Price"] > a["Price"]),
    ("$2.Price >= 4 OR $2.Name = 'MSFT'", lambda a, b: b["Price"] >= 4 or b["Name"] == "MSFT"),
]
# outer selections on the output (CEL text, Python on (e1, e2, t0, t1)).
SEQ_OUTER = [
    (None, lambda a, b, t0, t1: True),
    ("Price > Price_1", lambda a, b, t0, t1: b["Price"] > a["Price"]),
    ("DUR <= 3", lambda a, b, t0, t1: t1 - t0 + 1 <= 3),
]
LEFT_FILTERS = [(None, lambda e: True), ("Price < 4", lambda e: e["Price"] < 4)]

_HSETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


def _with_ids(events):
    ids = count()
    return [{**e, "id": next(ids)} for e in events]


def _sequence_query(theta, outer, left_filter) -> str:
    left = f"FILTER{{{left_filter}}}(Stock)" if left_filter else "Stock"
    seq = f"{left} NEXT{{{theta}}} Stock"
    return f"FILTER{{{outer}}}({seq})" if outer else seq


@_HSETTINGS
@given(stock_events(), st.sampled_from(SEQ_THETAS), st.sampled_from(SEQ_OUTER), st.sampled_from(LEFT_FILTERS))
def test_sequence_against_nested_loop_enumeration(events, theta, outer, left_filter):
    events = _with_ids(events)
    got = run(_sequence_query(theta[0], outer[0], left_filter[0]), events)
    # Declaratively: (e1, e2) with e2 after e1 satisfying θ, and no e2' satisfying θ after e1 processed
    # before e2; then the outer selection on that pair.
    order = sorted(events, key=lambda e: e["t1"])
    position = {e["id"]: i for i, e in enumerate(order)}
    expected = []
    for e1 in events:
        if not left_filter[1](e1):
            continue
        candidates = [e2 for e2 in events if e2["t0"] > e1["t1"] and theta[1](e1, e2)]
        if candidates:
            e2 = min(candidates, key=lambda e: position[e["id"]])
            if outer[1](e1, e2, e1["t0"], e2["t1"]):
                expected.append((e1["id"], e2["id"], e1["t0"], e2["t1"]))
    assert sorted(project(got, "id_1", "id", "t0", "t1")) == sorted(expected)


@_HSETTINGS
@given(stock_events(), st.sampled_from(SEQ_THETAS), st.sampled_from(SEQ_OUTER), st.sampled_from(LEFT_FILTERS))
def test_sequence_against_event_at_a_time_automaton(events, theta, outer, left_filter):
    events = _with_ids(events)
    got = run(_sequence_query(theta[0], outer[0], left_filter[0]), events)
    # As the automaton (DESIGN §4): events in t1 order; each waiting instance takes the forward edge
    # (θ ∧ outer selection), is dropped if θ holds but the outer selection fails, else the filter edge.
    waiting, emitted = [], []
    for e in sorted(events, key=lambda e: e["t1"]):
        still = []
        for e1 in waiting:
            if e["t0"] > e1["t1"] and theta[1](e1, e):
                if outer[1](e1, e, e1["t0"], e["t1"]):
                    emitted.append((e1["id"], e["id"], e1["t0"], e["t1"]))
            else:
                still.append(e1)
        waiting = still + ([e] if left_filter[1](e) else [])
    assert sorted(project(got, "id_1", "id", "t0", "t1")) == sorted(emitted)


# θ and rebind of an iteration: CEL text and Python on (first, last, new).
FOLD_THETAS = [
    ("", lambda f, l, e: True),
    ("$1.Name = $2.Name", lambda f, l, e: f["Name"] == e["Name"]),
    ("$2.Name = $.Name AND $2.Price >= $.Price", lambda f, l, e: e["Name"] == l["Name"] and e["Price"] >= l["Price"]),
]
FOLD_REBINDS = [
    ("", lambda f, l, e: True),
    ("$2.Price > $.Price", lambda f, l, e: e["Price"] > l["Price"]),
    ("$2.Price <= $1.Price + 2", lambda f, l, e: e["Price"] <= f["Price"] + 2),
]


@_HSETTINGS
@given(stock_events(max_size=8), st.sampled_from(FOLD_THETAS), st.sampled_from(FOLD_REBINDS), st.booleans())
def test_iteration_against_event_at_a_time_automaton(events, theta, rebind, dur_filter):
    events = _with_ids(events)
    text = (f"(SELECT *, 1 AS cnt, Price AS total FROM Stock) FOLD{{{theta[0]}, {rebind[0]}, "
            f"$.cnt + 1 AS cnt, $.total + $2.Price AS total}} Stock")
    if dur_filter:
        text = f"FILTER{{DUR >= 3}}({text})"
    got = run(text, events)
    # As the automaton: an instance holds (first, last, t0, t1).  On an event after it satisfying θ it
    # takes the forward edge (an output with the updated aggregates) and, if the rebind condition also
    # holds, the rebind edge (bindings replaced); otherwise it stays (filter edge).
    instances, emitted = [], []
    for e in sorted(events, key=lambda e: e["t1"]):
        kept = []
        for first, last, t0, t1 in instances:
            if e["t0"] > t1 and theta[1](first, last, e):
                cnt, total = last["cnt"] + 1, last["total"] + e["Price"]
                if not dur_filter or e["t1"] - t0 + 1 >= 3:
                    emitted.append((first["id"], e["id"], cnt, total, t0, e["t1"]))
                if rebind[1](first, last, e):
                    kept.append((first, {**last, **e, "cnt": cnt, "total": total}, t0, e["t1"]))
            else:
                kept.append((first, last, t0, t1))
        start = {**e, "cnt": 1, "total": e["Price"]}
        instances = kept + [(start, start, e["t0"], e["t1"])]
    assert sorted(project(got, "id_1", "id", "cnt", "total", "t0", "t1")) == sorted(emitted)


def test_interpreter_keeps_published_streams():
    interpreter = ReferenceInterpreter({"Stock": [ev("A", 1, 0)]})
    interpreter.evaluate(parse_cel("SELECT Name FROM Stock PUBLISH Names"))
    assert interpreter.published == {"Names": [{"Name": "A", "t0": 0, "t1": 0}]}
