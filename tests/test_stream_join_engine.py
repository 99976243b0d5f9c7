"""Stream-stream joins with a bounded state through SQL and the engine (issue 19 item 2; 003 ch. 3).

Two event streams (tables without a PRIMARY KEY), equality and band joins with local selections, published in
a few batches of many events each.  The oracle is a nested loop over the published events: every pair of an
event with an earlier-published event of the other stream that satisfies the join predicate and the
subscription's selections is one notification.  Unbounded: the notifications equal it exactly (hypothesis,
NULLs, ties, duplicates).  Bounded: they are a subset, the number missing is the MAX-subset error the engine
reports in ``stats()``, and the result tuples are exactly those of the pure ``BoundedStreamJoin`` run directly
on the same events with the same options (engine == core) -- also across a subscription added mid-stream (the
state carried into the new base).  Bad input raises a named error and changes nothing (SHOW before == after);
EXPLAIN shows the policy, the bound and the error."""
from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from sparksub import Engine
from sparksub.errors import AnalysisError, InvalidSubscription, ParseError, SparksubError, UnsupportedSubscription
from sparksub.operators.stream_joins import from_options

STREAMS = ("CREATE TABLE a (sensor STRING, loc BIGINT, temp DOUBLE, t BIGINT); "
           "CREATE TABLE b (sensor STRING, loc BIGINT, hum DOUBLE, t BIGINT)")
SEL = {"a": "temp", "b": "hum"}   # the selection column of each stream


# ---- the oracle --------------------------------------------------------------------------------------------------
def nested_loop(published, on, band=None, where=None) -> set:
    """{(left seq, right seq)} of every pair of events of a and b published in different calls (each event joins
    what the other stream published before it) with the join predicate (``on`` the column; ``band`` (lo, hi) on
    b.on - a.on, else equality; NULL joins nothing) and the selections ``where`` {(stream, column): (lo, hi)}
    (SQL: a NULL passes no range)."""
    where = where or {}

    def passes(stream, ev):
        return all(ev[c] is not None and lo <= ev[c] <= hi for (s, c), (lo, hi) in where.items() if s == stream)
    out = set()
    seen = {"a": [], "b": []}
    for stream, events in published:
        other = "b" if stream == "a" else "a"
        for seq, ev in events:
            if ev[on] is None or not passes(stream, ev):
                continue
            for pseq, pev in seen[other]:
                if pev[on] is None or not passes(other, pev):
                    continue
                av, bv = (ev[on], pev[on]) if stream == "a" else (pev[on], ev[on])
                hit = av == bv if band is None else band[0] <= bv - av <= band[1]
                if hit:
                    out.add((seq, pseq) if stream == "a" else (pseq, seq))
        seen[stream] += events
    return out


def core_run(published, on, options, band=None, where=None):
    """The pure operator on the same events, one step per publish, fed what the group keeps (the events its
    subscription's selection on their side passes): (result pairs as seq pairs, its stats)."""
    where = where or {}
    core = from_options(options, band=band, left_key=on, right_key=on)
    pairs = set()
    for stream, events in published:
        keep = [(s, e) for s, e in events if all(e[c] is not None and lo <= e[c] <= hi
                                                 for (w, c), (lo, hi) in where.items() if w == stream)]
        if not keep:
            continue
        tbl = pa.table({on: pa.array([e[on] for _, e in keep], pa.int64()),
                        "seq": pa.array([s for s, _ in keep], pa.int64())})
        out = core.apply(left=tbl) if stream == "a" else core.apply(right=tbl)
        if out.num_rows:
            pairs |= set(zip(out.column("left_seq").to_pylist(), out.column("right_seq").to_pylist()))
    return pairs, core.stats()


def publish(engine, published, stream, events):
    """Publish ``events`` (dicts) to ``stream``; note them (with their seqs) in ``published``; the output rows."""
    seq0 = engine._next_seq
    rows = engine.publish(stream, events).collect()
    assert [r.reason for r in rows if r.op in ("error", "rejected")] == []
    published.append((stream, [(seq0 + i, ev) for i, ev in enumerate(events)]))
    return rows


def by_subscription(rows) -> dict:
    out: dict = {}
    for r in rows:
        if r.subscription_id is not None:
            out.setdefault(r.subscription_id, []).append((int(r.left_key), int(r.right_key)))
    return out


def events_of(rnd, stream, n, locs=4, null=0.1):
    col = SEL[stream]
    return [{"sensor": f"{stream}{rnd.randrange(5)}",
             "loc": None if rnd.random() < null else rnd.randrange(locs),
             col: None if rnd.random() < null else float(rnd.randrange(20, 41)),
             "t": rnd.randrange(0, 30)} for _ in range(n)]


# ---- unbounded: exactly the nested loop --------------------------------------------------------------------------
@st.composite
def unbounded_case(draw):
    """Publishes alternating between the streams (a few, each many events: NULLs, repeated join values, whole
    duplicate events) and a few subscriptions' selection bounds."""
    loc = st.one_of(st.none(), st.integers(0, 3))
    val = st.one_of(st.none(), st.integers(20, 40).map(float))
    published = []
    for i in range(3):
        stream = "ab"[i % 2]
        evs = draw(st.lists(st.fixed_dictionaries({"sensor": st.sampled_from(["x", "y"]), "loc": loc,
                                                   SEL[stream]: val, "t": st.integers(0, 12)}),
                            min_size=1, max_size=25))
        evs += evs[:draw(st.integers(0, 3))]             # duplicates
        published.append((stream, evs))
    lo = draw(st.integers(20, 40))
    return published, float(lo), float(lo + draw(st.integers(0, 15)))


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
@settings(max_examples=2, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate),  # no shrinking
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=unbounded_case())
def test_unbounded_equals_the_nested_loop(spark, case):
    published_in, lo, hi = case
    e = Engine(spark)
    e.sql(STREAMS)
    e.sql("CREATE SUBSCRIPTION eq_all AS SELECT * FROM a JOIN b ON a.loc = b.loc")
    e.sql(f"CREATE SUBSCRIPTION eq_sel AS SELECT a.sensor, b.sensor AS bs, temp FROM b JOIN a ON b.loc = a.loc "
          f"WHERE a.temp BETWEEN {lo} AND {hi} AND b.hum >= {lo}")
    e.sql("CREATE SUBSCRIPTION band AS SELECT * FROM a JOIN b ON a.t BETWEEN b.t - 2 AND b.t + 1 WHERE b.hum < 35")
    assert {g["class"] for g in e.subscription_groups()} == {"STREAM_JOIN", "STREAM_BAND_JOIN"}
    assert len({g["group"] for g in e.subscription_groups()}) == 2   # eq_all, eq_sel: one group (selections differ)
    published, got = [], {}
    for stream, evs in published_in:
        rows = publish(e, published, stream, evs)
        for sub, pairs in by_subscription(rows).items():
            got.setdefault(sub, []).extend(pairs)
        event = {seq: ev for _, evs2 in published for seq, ev in evs2}
        for r in rows:   # the subscription's selected columns, from the pair's events, under their names
            if r.subscription_id == "eq_sel":
                left, right = event[int(r.left_key)], event[int(r.right_key)]
                assert (r["sensor"], r["bs"], r["temp"]) == (left["sensor"], right["sensor"], left["temp"])
            elif r.subscription_id == "band":
                assert (r["a.t"], r["b.t"]) == (event[int(r.left_key)]["t"], event[int(r.right_key)]["t"])
    want = {"eq_all": nested_loop(published, "loc"),
            "eq_sel": nested_loop(published, "loc", where={("a", "temp"): (lo, hi), ("b", "hum"): (lo, math.inf)}),
            "band": nested_loop(published, "t", band=(-1.0, 2.0), where={("b", "hum"): (-math.inf, 34.999999)})}
    for sub, pairs in want.items():
        assert sorted(got.get(sub, [])) == sorted(pairs), sub        # exactly, and each pair once
    stats = e.stats()
    for g in e.subscription_groups():
        assert stats[g["group"]]["missed"] == 0 and stats[g["group"]]["budget"] == "unbounded"


# ---- bounded: a subset, the error counted, engine == core --------------------------------------------------------
@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_bounded_subset_error_and_engine_equals_core(spark):
    rnd = random.Random(19)
    e = Engine(spark)
    e.sql(STREAMS)
    subs = {  # name -> (SQL, options, selections, join column, band)
        "heeb": ("SELECT a.sensor, b.sensor FROM a JOIN b ON a.loc = b.loc WHERE a.temp > 30 "
                 "WITH (max_state_rows = 6, state_policy = 'HEEB')",
                 {"max_state_rows": 6, "state_policy": "HEEB"}, {("a", "temp"): (30.000000000000004, math.inf)},
                 "loc", None),
        "lru": ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = 5, state_policy = 'LRU')",
                {"max_state_rows": 5, "state_policy": "LRU"}, {}, "loc", None),
        "prob": ("SELECT * FROM a JOIN b ON a.loc = b.loc WHERE b.hum BETWEEN 25 AND 38 "
                 "WITH (max_state_rows = 4, state_policy = 'PROB', state_dominance = true)",
                 {"max_state_rows": 4, "state_policy": "PROB", "state_dominance": True},
                 {("b", "hum"): (25.0, 38.0)}, "loc", None),
        "band": ("SELECT a.t, b.t FROM a JOIN b ON a.t BETWEEN b.t - 5 AND b.t + 5 WITH (max_state_rows = 8)",
                 {"max_state_rows": 8}, {}, "t", (-5.0, 5.0)),
    }
    for name, (sql, *_rest) in subs.items():
        e.sql(f"CREATE SUBSCRIPTION {name} AS {sql}")
    assert len({g["group"] for g in e.subscription_groups()}) == 4
    published, got = [], {}
    for i in range(6):
        stream = "ab"[i % 2]
        if i == 3:   # a subscription added mid-stream: a new base, which carries the state as it is
            e.sql(f"CREATE SUBSCRIPTION heeb_late AS {subs['heeb'][0]}")
        rows = publish(e, published, stream, events_of(rnd, stream, 40, locs=6, null=0.05))
        for sub, pairs in by_subscription(rows).items():
            got.setdefault(sub, []).extend(pairs)
    stats = e.stats()
    gid = {r["name"]: r["group"] for r in e.subscription_table().to_pylist()}
    assert gid["heeb_late"] == gid["heeb"]
    for name, (_, options, where, on, band) in subs.items():
        mine = got.get(name, [])
        assert len(set(mine)) == len(mine)
        truth = nested_loop(published, on, band=band, where=where)
        assert set(mine) <= truth, name
        s = stats[gid[name]]
        assert s["missed"] == len(truth) - len(mine) > 0, name          # the MAX-subset error, exactly
        core_pairs, core_stats = core_run(published, on, options, band=band, where=where)
        assert set(mine) == core_pairs, name                             # engine == core
        assert (s["missed"], s["results"], s["evicted"]) == \
            (core_stats["missed"], core_stats["results"], core_stats["evicted"]), name
    late_from = published[3][1][0][0]   # the late subscription sees the pairs of events published after it
    assert sorted(got["heeb_late"]) == sorted(p for p in got["heeb"] if max(p) >= late_from)
    text = e.explain("heeb")
    assert "HEEB" in text and "max_state_rows=6" in text
    assert f"{stats[gid['heeb']]['missed']:,} of" in text and "MAX-subset" in text
    assert "PROB" in e.sql("EXPLAIN SUBSCRIPTION prob") and "dominance" in e.explain("prob")


# ---- bad input: a named error, nothing changed -------------------------------------------------------------------
BAD = [
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_rows = 3)", InvalidSubscription, "unknown stream-join option"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = 0)", InvalidSubscription, "positive integer"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = -4)", InvalidSubscription, "max_state_rows"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = 2.5)", InvalidSubscription, "max_state_rows"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = 'many')", InvalidSubscription, "'many'"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (state_policy = 'MRU')", InvalidSubscription, "unknown policy 'MRU'"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (state_policy = 'LIFE')", InvalidSubscription, "state_window"),
    ("SELECT * FROM a JOIN b ON b.sensor - a.sensor BETWEEN 0 AND 1", AnalysisError, "'sensor' of table 'a' is string"),
    ("SELECT * FROM a JOIN b ON a.sensor = b.loc", AnalysisError, "a.sensor (string) and b.loc (bigint)"),
    ("SELECT * FROM a JOIN k ON a.loc = k.loc", UnsupportedSubscription, "keyed table 'k' with the event stream 'a'"),
    ("SELECT * FROM k WHERE loc > 3 WITH (max_state_rows = 3)", InvalidSubscription, "not for FILTER"),
    ("SELECT * FROM a JOIN b ON b.t - a.t BETWEEN :lo AND 3", InvalidSubscription, "constants, not parameters"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows)", ParseError, "Expected = after"),
    ("SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = 3, max_state_rows = 4)", ParseError, "twice"),
]


@pytest.mark.parametrize("sql,error,words", BAD)
def test_bad_input_is_named_and_changes_nothing(sql, error, words):
    e = Engine(catalyst=False)   # nothing here runs a Spark job
    e.sql(STREAMS + "; CREATE TABLE k (id BIGINT PRIMARY KEY, loc BIGINT)")
    e.sql("CREATE SUBSCRIPTION ok AS SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = 3)")
    def state():
        return (e.subscription_table(), e.subscription_groups(), {k: len(g.registry) for k, g in e._groups.items()})
    before = state()
    with pytest.raises(error) as err:
        e.sql(f"CREATE SUBSCRIPTION bad AS {sql}")
    assert words in str(err.value)
    with pytest.raises(SparksubError):    # in a script: checked before anything runs
        e.sql(f"CREATE SUBSCRIPTION fine AS SELECT * FROM a JOIN b ON a.loc = b.loc; CREATE SUBSCRIPTION bad AS {sql}")
    with pytest.raises(error):
        e.subscribe("bad2", sql)
    assert state() == before


def test_options_round_trip_through_the_template_and_show():
    """The options are part of the plan's SQL (what a durable engine journals and replays) and of the group: two
    bounds are two groups; SHOW lists the bound with the selections."""
    e = Engine(catalyst=False)
    e.sql(STREAMS)
    e.subscribe_many("SELECT * FROM a JOIN b ON a.loc = b.loc WHERE a.temp BETWEEN :lo AND :hi "
                     "WITH (max_state_rows = 10, state_policy = 'LFU')",
                     {"id": ["p", "q"], "lo": [20.0, 30.0], "hi": [25.0, 40.0]})
    e.sql("CREATE SUBSCRIPTION r AS SELECT * FROM a JOIN b ON a.loc = b.loc WITH (max_state_rows = 11)")
    groups = {g["group"] for g in e.subscription_groups()}
    assert len(groups) == 2 and all(g.startswith("stream_join:a.loc=b.loc") for g in groups)
    show = {r["name"]: r for r in e.subscription_table().to_pylist()}
    assert show["p"]["class"] == "STREAM_JOIN" and '"a.temp": [20, 25]' in show["p"]["parameters"]
    assert '"max_state_rows": 10' in show["p"]["parameters"] and '"LFU"' in show["q"]["parameters"]
    sql = e._records["r"]   # a single subscription keeps its SELECT, which EXPLAIN plans again
    assert sql.endswith("WITH (max_state_rows = 11)")
    assert e._plan(sql).physical.group_key == e._find_group("r").physical.group_key
