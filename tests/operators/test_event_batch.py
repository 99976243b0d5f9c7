"""The batch executor (``operators/events/batch.py``, issue 18) against the reference interpreter (the
oracle) and ``FamilyEngine``: random query families of the vectorised shapes (NEXT with an instance key, a
slotted key or none; FOLD keyed on ``$`` or ``$1`` or not, with rebind conditions reading ``$2``, ``$``,
``$1`` and DUR; start, right and outer FILTERs with and without slots) beside families that run per
event, over random streams with NULLs, ties in t1 and intervals, fed in random batches (empty ones too),
with queries dropped and the state snapshotted mid-stream; the Arrow output against the per-match rows;
run-time errors and odd batches on the per-event path; bulk registration (``operators/events/bulk.py``).
Pure Python, no Spark.
"""
from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cayuga_reference import evaluate_queries
from sparksub.errors import AnalysisError, ParseError
from sparksub.grammar.events import parse_cel
from sparksub.operators.events.batch import BatchEngine
from sparksub.operators.events.bulk import bind_event_template
from sparksub.operators.events.families import FamilyEngine
from sparksub.operators.events.partitions import match_layout, matches_to_table

_H = settings(max_examples=35, deadline=None, suppress_health_check=list(HealthCheck))

#: Families that run vectorised ({placeholders} are each member's constants).
VECTOR = [
    # NEXT keyed on $1.Name (S3-like), a slot-free static θ conjunct, a monotone outer selection
    "SELECT * FROM FILTER{{Price > {r} * Price_1}}(FILTER{{Name = '{a}'}}(Stock) "
    "NEXT{{$1.Name = $2.Name AND ($2.Price > $2.Volume OR $2.Volume = 0)}} Stock)",
    # NEXT with a slotted key (S2-like): start equality + range, outer selection on the new event
    "SELECT * FROM FILTER{{Price < {q}}}(FILTER{{Name = '{a}' AND Price > {p}}}(Stock) NEXT{{$2.Name = '{b}'}} Stock)",
    # NEXT without a key, a start range alone, a deferred start conjunct, an outer `x op y + c`
    "SELECT * FROM FILTER{{Volume > Volume_1 + {c}}}(FILTER{{Price >= {p} AND Volume != {v}}}(Stock) "
    "NEXT{{($2.Price > 3 OR $2.Volume < 2)}} FILTER{{Price * 1 > 0}}(Stock))",
    # FOLD keyed on $ (S4-like), DUR outer selection
    "SELECT * FROM FILTER{{DUR >= {d}}}(FILTER{{Name = '{a}'}}(Stock) FOLD{{$2.Name = $.Name, $2.Price > $.Price,}} Stock)",
    # FOLD keyed on $1, rebind reading $1 and DUR, slot-free and slotted outer selections
    "SELECT * FROM FILTER{{Price_1 <= Price AND Volume >= {v}}}(FILTER{{Name = '{a}'}}(Stock) "
    "FOLD{{$1.Name = $2.Name, ($2.Price >= $1.Price OR DUR < 3),}} Stock)",
    # FOLD without key or rebind (every later event a step), start equality on Volume
    "SELECT * FROM FILTER{{Price < {q}}}(FILTER{{Volume = {v}}}(Stock) FOLD{{$2.Price * 1 >= 2, ,}} Stock)",
    # NEXT keyed on a number, start range + outer DUR
    "SELECT * FROM FILTER{{DUR <= {d}}}(FILTER{{Price > {p}}}(Stock) NEXT{{$1.Volume = $2.Volume}} Stock)",
    # keys across attributes and types (1 = 1.0): NEXT on $1.Price, FOLD re-keyed on $.Volume at each step
    "SELECT * FROM FILTER{{Name = '{a}'}}(Stock) NEXT{{$2.Volume = $1.Price}} Stock",
    "SELECT * FROM FILTER{{Price > {p}}}(Stock) FOLD{{$2.Price = $.Volume, ,}} Stock",
]
#: Families that run per event inside the batch executor (other shapes).
PER_EVENT = [
    "SELECT * FROM Stock NEXT{{$1.Name = $2.Name AND $2.Price >= $1.Price + {c} AND DUR <= {d}}} Stock",
    "SELECT * FROM Stock FOLD{{$2.Price != {p}, $2.Price > $.Price - {c}, $.cnt + 1 AS cnt}} FILTER{{Price > {q}}}(Stock)",
    "SELECT * FROM (SELECT *, 1 AS cnt FROM FILTER{{{p} <= Price}}(Stock)) FOLD{{$1.Name = $2.Name, DUR < {d}, $.cnt + 1 AS cnt}} Stock",
]


@st.composite
def families(draw, templates=VECTOR + PER_EVENT):
    """Query name -> CEL: 1-4 templates with 1-5 members each, constants from small pools (ties)."""
    queries = {}
    for t in draw(st.lists(st.sampled_from(templates), min_size=1, max_size=4)):
        for _ in range(draw(st.integers(1, 5))):
            values = dict(a=draw(st.sampled_from(["IBM", "MSFT", "ORCL"])), b=draw(st.sampled_from(["IBM", "MSFT"])),
                          p=draw(st.integers(0, 6)), q=draw(st.sampled_from([2, 4, 5.5, 7])),
                          r=draw(st.sampled_from([0.5, 1, 1.2, 2])), d=draw(st.integers(1, 6)),
                          c=draw(st.sampled_from([-1, 0, 1, 2.5])), v=draw(st.sampled_from([0, 1, 3])))
            queries[f"q{len(queries)}"] = t.format(**values)
    return queries


@st.composite
def streams(draw, max_size: int = 14):
    """Stock events in end-time order: ties in t1, intervals, NULL prices, names and volumes."""
    events, t1 = [], 0
    for _ in range(draw(st.integers(0, max_size))):
        t1 += draw(st.integers(0, 2))
        events.append({"Name": draw(st.sampled_from(["IBM", "MSFT", "ORCL", "IBM", None])),
                       "Price": draw(st.sampled_from([1, 2.0, 3, 4.5, 6, None])),
                       "Volume": draw(st.sampled_from([0, 1, 3, None])),
                       "t0": max(0, t1 - draw(st.sampled_from([0, 0, 1, 2]))), "t1": t1})
    return events


def oracle(queries, events):
    return evaluate_queries({n: parse_cel(q) for n, q in queries.items()}, {"Stock": events})


def engine(queries, cls=BatchEngine, **options):
    if cls is BatchEngine:                  # every batch vectorised (tiny ones run per event by default)
        options.setdefault("min_batch", 1)
    e = cls(**options)
    for n, q in queries.items():
        e.register(n, q)
    return e


def cuts(draw, n):
    """Random batch boundaries over n events (empty batches included)."""
    sizes, left = [], n
    while left > 0:
        k = draw(st.integers(0, min(left, 6)))
        sizes.append(k)
        left -= k
    return sizes


def feed(e, events, sizes, drop=(), at=None, snapshot_at=None, rebuild=None):
    """Feed ``events`` in batches of ``sizes``; before batch ``at`` unregister ``drop``; before batch
    ``snapshot_at`` snapshot and restore into ``rebuild()``.  Matches per query."""
    out: dict = {}
    i = 0
    for k, size in enumerate(sizes + [0]):
        if k == at:
            for q in drop:
                e.unregister(q)
        if k == snapshot_at:
            state = e.snapshot()
            e = rebuild()
            e.restore(state)
        batch = events[i:i + size]
        got = e.process_batch("Stock", batch) if hasattr(e, "process_batch") else \
            [m for ev in batch for m in e.process("Stock", ev)]
        for m in got:
            out.setdefault(m.query, []).append(m.event)
        i += size
    for m in e.flush():
        out.setdefault(m.query, []).append(m.event)
    return out, e


@_H
@given(families(), streams(), st.data())
def test_batches_agree_with_the_oracle_and_the_family_engine(queries, events, data):
    expected = oracle(queries, events)
    sizes = cuts(data.draw, len(events))
    min_batch = data.draw(st.sampled_from([1, 1, 3]))     # 3: small batches switch to the per-event path
    got, e = feed(engine(queries, min_batch=min_batch), events, sizes)
    for q in queries:
        assert got.get(q, []) == expected[q], (q, queries[q], sizes)
    assert engine(queries, FamilyEngine).run({"Stock": events}) == expected


def test_the_vector_templates_run_vectorised_and_the_others_per_event():
    values = dict(a="IBM", b="IBM", p=1, q=2, r=1.5, d=1, c=1, v=1)
    for t in VECTOR + PER_EVENT:
        assert engine({"q": t.format(**values)}).vectorised_families() == (t in VECTOR), t


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(families(VECTOR), streams(), st.data())
def test_dropping_queries_mid_stream_and_snapshots(queries, events, data):
    expected = oracle(queries, events)
    sizes = cuts(data.draw, len(events))
    drop = data.draw(st.sets(st.sampled_from(sorted(queries))))
    at = data.draw(st.integers(0, len(sizes)))
    got, _ = feed(engine(queries), events, sizes, drop, at)
    for q in queries:
        if q not in drop:
            assert got.get(q, []) == expected[q], q
    snap = data.draw(st.integers(0, len(sizes)))
    source, target = data.draw(st.sampled_from([(BatchEngine, BatchEngine), (BatchEngine, FamilyEngine),
                                                (FamilyEngine, BatchEngine)]))
    got, _ = feed(engine(queries, source), events, sizes, snapshot_at=snap, rebuild=lambda: engine(queries, target))
    for q in queries:
        assert got.get(q, []) == expected[q], (q, source.__name__, target.__name__)


def test_the_benchmark_families_over_a_long_stream_match_the_family_engine():
    rnd = random.Random(7)
    names = [f"S{i}" for i in range(6)]
    queries = {}
    for i in range(120):
        a, b = rnd.choice(names), rnd.choice(names)
        queries[f"q{i}"] = [
            f"SELECT * FROM FILTER{{Price > {rnd.uniform(1.0, 1.1):.3f} * Price_1}}(FILTER{{Name = '{a}'}}(Stock) "
            f"NEXT{{$1.Name = $2.Name}} Stock)",
            f"SELECT * FROM FILTER{{Price < {rnd.randint(85, 100)}}}(FILTER{{Name = '{a}' AND Price > "
            f"{rnd.randint(100, 115)}}}(Stock) NEXT{{$2.Name = '{b}'}} Stock)",
            f"SELECT * FROM FILTER{{DUR >= {rnd.randint(2, 12)}}}(FILTER{{Name = '{a}'}}(Stock) "
            f"FOLD{{$2.Name = $.Name, $2.Price > $.Price,}} Stock)"][i % 3]
    price = {n: 100.0 for n in names}
    events = []
    for t in range(560):
        n = rnd.choice(names)
        price[n] = max(50.0, min(150.0, price[n] * rnd.uniform(0.93, 1.08)))
        events.append({"Name": n, "Price": round(price[n], 2), "Volume": rnd.randint(1, 9), "t0": max(0, t // 2 * 2 - t % 3), "t1": t // 2 * 2})
    want = engine(queries, FamilyEngine).run({"Stock": events})
    e = engine(queries)
    assert e.vectorised_families() == 3
    for size in (7, 4096):
        e = engine(queries)
        assert e.run({"Stock": events}, batch_size=size) == want, size
    e = engine(queries, min_batch=24)       # one event at a time: the per-event path, then batches again
    got = {q: [] for q in queries}
    for k in range(0, len(events), 50):     # chunks of 50 alternately per event and as one batch
        chunk = events[k:k + 50]
        ms = [m for ev in chunk for m in e.process("Stock", ev)] if k % 100 else e.process_batch("Stock", chunk)
        for m in ms:
            got[m.query].append(m.event)
    for m in e.flush():
        got[m.query].append(m.event)
    assert got == want
    assert sum(map(len, want.values())) > 300
    assert e.stats()["vec_fallbacks"] == 0


def test_the_arrow_output_equals_the_match_rows():
    queries = {f"q{i}": t.format(a="IBM", b="MSFT", p=1, q=6, r=1, d=2, c=0, v=1)
               for i, t in enumerate(VECTOR + PER_EVENT)}
    rnd = random.Random(1)
    events = [{"Name": rnd.choice(["IBM", "MSFT"]), "Price": float(rnd.randint(1, 6)), "Volume": rnd.randint(0, 3),
               "t0": t, "t1": t} for t in range(200)]
    types = {"Name": pa.string(), "Price": pa.float64(), "Volume": pa.int64()}
    attrs = {}
    a = engine(queries)
    for q in queries:
        out = {}
        for k, v in types.items():
            out[k + "_1"], out[k] = v, v
        attrs[q] = out
    attrs[f"q{len(VECTOR) + 1}"] = {**attrs[f"q{len(VECTOR) + 1}"], "cnt": pa.float64()}
    attrs[f"q{len(VECTOR) + 2}"] = {**attrs[f"q{len(VECTOR) + 2}"], "cnt": pa.float64(), "cnt_1": pa.float64()}
    layout = match_layout(attrs, list(types.items()))
    b = engine(queries)
    table = pa.Table.from_pylist(events, schema=pa.schema([*types.items(), ("t0", pa.int64()), ("t1", pa.int64())]))
    got = [a.process_table("Stock", table.slice(i, 37), layout, "g") for i in range(0, 200, 37)]
    got.append(matches_to_table(a.flush(), layout, "g"))
    want = matches_to_table(b.process_batch("Stock", events) + b.flush(), layout, "g")
    got = pa.concat_tables(got)
    assert got.num_rows == want.num_rows > 100

    def per_query(t):
        out: dict = {}
        for r in t.to_pylist():
            out.setdefault(r["query"], []).append(r)
        return out
    assert per_query(got) == per_query(want)


def test_errors_and_odd_batches_take_the_per_event_path():
    q = {"ok": "SELECT * FROM FILTER{Price > 1}(Stock) NEXT{$1.Name = $2.Name} Stock",
         "like": "SELECT * FROM Stock NEXT{$1.Name = $2.Name AND $2.Txt LIKE $2.Pat} Stock"}
    events = [{"Name": "a", "Price": 2.0, "Txt": "x", "Pat": "x", "t0": 0, "t1": 0},
              {"Name": "a", "Price": 3.0, "Txt": "x", "Pat": "x\\", "t0": 1, "t1": 1},   # invalid pattern
              {"Name": "a", "Price": 4.0, "Txt": "y", "Pat": "%", "t0": 2, "t1": 2}]
    e, f = engine(q), engine(q, FamilyEngine)
    assert e.vectorised_families() == 2
    errors_e, errors_f = {}, {}
    assert e.run({"Stock": events}, errors=errors_e) == f.run({"Stock": events}, errors=errors_f)
    assert [(x.query, x.t1) for x in errors_e["like"]] == [(x.query, x.t1) for x in errors_f["like"]] != []
    assert e.stats()["vec_fallbacks"] >= 1
    # events without the same attributes, mixed types: per event, same matches
    odd = [{"Name": "a", "Price": 2, "t0": 0, "t1": 0}, {"Name": "a", "Price": "x", "t0": 1, "t1": 1},
           {"Name": "a", "t0": 2, "t1": 2}, {"Name": "a", "Price": 5, "Extra": 1, "t0": 3, "t1": 3}]
    qs = {"n": "SELECT * FROM FILTER{Name = 'a'}(Stock) NEXT{$1.Name = $2.Name} Stock"}
    assert engine(qs).run({"Stock": odd}, batch_size=4) == engine(qs, FamilyEngine).run({"Stock": odd})
    with pytest.raises(AnalysisError, match="end-time order"):
        e.process_batch("Stock", [{"Name": "a", "Price": 1.0, "Txt": "", "Pat": "", "t0": 0, "t1": 0}])


def test_bulk_binding_and_registration():
    template = "SELECT * FROM FILTER{Price > :r * Price_1}(FILTER{Name = :a}(Stock) NEXT{$1.Name = $2.Name} Stock)"
    params = {"a": ["IBM", "MSFT", "IBM"], "r": [1.05, 1, 2], "qid": ["x", "y", "z"]}
    bound = bind_event_template(template, params, names="qid")
    assert [q.to_cel() for q in bound] == [
        parse_cel(template.replace(":r", str(r)).replace(":a", f"'{a}'")).to_cel()
        for a, r in zip(params["a"], params["r"])]
    e, f = BatchEngine(), FamilyEngine()
    assert e.register_template(bound) == ["x", "y", "z"]
    for n, q in zip(bound.names, bound):
        f.register(n, q)
    events = [{"Name": n, "Price": p} for n, p in [("IBM", 10), ("MSFT", 5), ("IBM", 11), ("MSFT", 6), ("IBM", 30)]]
    assert e.run({"Stock": events}) == f.run({"Stock": events})
    assert e.automaton("z").describe() == f.automaton("z").describe()
    assert e.family_of("y")["queries"] == 3
    bad = [({"a": ["IBM", None], "r": [1, 2]}, "row 1: parameter :a is NULL"),
           ({"a": ["IBM"], "r": [float("nan")]}, "row 0: parameter :r is nan"),
           ({"a": ["IBM"]}, "parameter :r has no column"),
           ({"a": ["IBM"], "r": [1], "zz": [1]}, "'zz' of the parameter table is not a parameter"),
           ({"a": ["IBM", "X"], "r": [1]}, "different lengths"),
           ({"a": [["IBM"]], "r": [1]}, r"row 0: parameter :a is \['IBM'\]")]
    for p, msg in bad:
        with pytest.raises(AnalysisError, match=msg):
            bind_event_template(template, p)
    with pytest.raises(ParseError, match="parameter :r outside a template"):
        parse_cel(template)
    with pytest.raises(AnalysisError, match="DUR bound and must not be negative"):
        bind_event_template("SELECT * FROM FILTER{DUR > :d}(Stock)", {"d": [1, -1]})
    with pytest.raises(AnalysisError, match="row 1: query name 'x' is also the name of row 0"):
        bind_event_template(template, {"a": ["I", "J"], "r": [1, 2]}, names=["x", "x"])
    # a value of the wrong type for its place: refused by the type check, naming the row; nothing stays
    g = BatchEngine()
    typed = bind_event_template(template, {"a": ["IBM", "MSFT"], "r": [1, "high"]}, names=["u", "v"])
    with pytest.raises(AnalysisError, match=r"query 'v' \(row 1\) with .*:r = 'high'.*needs numbers"):
        g.register_template(typed, schemas={"Stock": {"Name": "string", "Price": "double"}})
    assert not g.queries
    with pytest.raises(AnalysisError, match="already registered"):
        e.register_template(bound)


def test_the_first_match_search_against_brute_force():
    """``_Matcher``: the first event with the key and ``t0 > T``, by binary search and by its lookup table."""
    import numpy as np
    from sparksub.operators.events.batch import _Matcher
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, k = int(rng.integers(0, 40)), int(rng.integers(1, 6))
        keys = rng.integers(-1, k, n)                       # -1: NULL, equals nothing
        t1 = np.sort(rng.integers(0, 20, n))
        t0 = np.maximum(0, t1 - rng.integers(0, 3, n))      # intervals: t0 not sorted
        q = int(rng.integers(0, 30))
        qk, T = rng.integers(-1, k + 2, q), rng.integers(-1, 22, q)
        want = np.array([next((i for i in range(n) if keys[i] == a >= 0 and t0[i] > t), -1) for a, t in zip(qk, T)],
                        np.int64)
        m = _Matcher(keys, t0, np.unique(t0), k + 2)
        assert (m.first(qk, m.rank(T)) == want).all()
        rep = 3000 // max(q, 1) + 1                           # many queries: the (group, rank) table
        m = _Matcher(keys, t0, np.unique(t0), k + 2)
        assert (m.first(np.repeat(qk, rep), m.rank(np.repeat(T, rep))) == np.repeat(want, rep)).all()


def test_feed_events_and_the_table_path_with_the_batch_executor():
    from sparksub.operators.events.partitions import events_table, feed_events, feed_events_table
    q = {"up": "SELECT * FROM FILTER{Price > 1.5 * Price_1}(FILTER{Name = 'a'}(Stock) NEXT{$1.Name = $2.Name} Stock)",
         "boom": "SELECT * FROM FILTER{Price ^ 1000.0 > 1}(Stock)"}
    batch = events_table({"Name": pa.array(["a", "b", "a", "a"]), "Price": pa.array([1.0, 3.0, 2.0, 4.0]),
                          "Volume": pa.array([1, 1, 1, 1])}, [0, 1, 2, 2], [0, 1, 2, 3], [10, 13, 11, 12])
    got = {}
    for cls in (FamilyEngine, BatchEngine):
        errors: list = []
        got[cls] = (sorted((m.query, m.event["t1"]) for m in feed_events(engine(q, cls), ["Stock"], batch, errors)),
                    [(i, e.query, e.t1) for i, e in errors])
    assert got[BatchEngine] == got[FamilyEngine] and got[BatchEngine][1] == [(1, "boom", 1), (3, "boom", 3)]
    layout = match_layout({"up": {"Name_1": pa.string(), "Price_1": pa.float64(), "Volume_1": pa.int64(),
                                  "Name": pa.string(), "Price": pa.float64(), "Volume": pa.int64()},
                           "boom": {"Name": pa.string(), "Price": pa.float64(), "Volume": pa.int64()}})
    table = feed_events_table(engine(q), ["Stock"], batch, layout, "g")
    want = matches_to_table(feed_events(engine(q, FamilyEngine), ["Stock"], batch), layout, "g")
    key = lambda r: (r["query"], r["t1"], r["t0"])  # noqa: E731
    assert sorted(table.to_pylist(), key=key) == sorted(want.to_pylist(), key=key)
