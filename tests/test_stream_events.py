"""Event queries on Structured Streaming (spark_event_stream): the NFA's instances in Spark's state store.
The matches must equal the oracle (cayuga_reference) over all events, as multisets: over a file source with
several files and two partitions, across a restart from the checkpoint (no loss, no repeat, a match begun
before the restart), with out-of-order events rejected; under PySpark's TwsTester the processor carries the
state across micro-batches; and, without Spark, the micro-batch function itself against the oracle on random
micro-batch splits (ticks split across micro-batches, shuffled rows, cold worker caches)."""
from __future__ import annotations

import collections
import json
import os
import random
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pytest

from sparksub.errors import AnalysisError
from sparksub.grammar.events import parse_event_query
from sparksub.operators.events import partitions as evp
from sparksub.runtime import event_stream as ses
from cayuga_reference import evaluate_queries

# a running stream's plan is where the extension only adds its pass-through node: run once (tests/conftest.py)
pytestmark = pytest.mark.catalyst_passthrough

S3 = "SELECT * FROM FILTER{Price > 1.05 * Price_1}(Stock NEXT{$1.Name = $2.Name} Stock)"
FOLD = ("SELECT * FROM (SELECT *, 1 AS cnt, Price AS sumPrice FROM Stock) FOLD{$1.Name = $2.Name, "
        "$.Price < $2.Price, $.cnt + 1 AS cnt, $.sumPrice + $2.Price AS sumPrice} Stock")
NOKEY = "SELECT * FROM Stock NEXT{$2.Price > $1.Price + 9} Stock"          # no partition key: one partition
UP = "SELECT Name, Price FROM Stock NEXT{$1.Name = $2.Name AND $2.Price > $1.Price} Stock PUBLISH Up"
PUB = "SELECT * FROM Up NEXT{$1.Name = $2.Name} Up"                       # reads a published stream: held
NAMES = ["IBM", "MSFT", "SUN", "HP", "DELL"]
SCHEMA = "Name string, Price double, t0 bigint, t1 bigint"
COLUMNS = {"Name": pa.string(), "Price": pa.float64()}


def stock_files(seed: int, files: int, per_file: int):
    """A random walk split into files; t1 grows across files (a file's first tick may repeat the previous
    file's last one); inside a file some events come before earlier-ending ones (repaired by the sort)."""
    rnd = random.Random(seed)
    price = {n: 20.0 + 5 * i for i, n in enumerate(NAMES)}
    out, t = [], 0
    for _ in range(files):
        evs = []
        for _ in range(per_file):
            n = rnd.choice(NAMES)
            price[n] = round(max(1.0, price[n] * rnd.uniform(0.93, 1.1)), 2)
            evs.append({"Name": n, "Price": price[n], "t0": t - rnd.choice([0, 0, 1]), "t1": t})
            t += rnd.choice([0, 1, 1, 2])
        for i in range(0, len(evs) - 1, 4):  # swap neighbours: disorder inside a micro-batch
            if evs[i]["t1"] < evs[i + 1]["t1"]:
                evs[i], evs[i + 1] = evs[i + 1], evs[i]
        out.append(evs)
        t = max(e["t1"] for e in evs)
    return out


def closing_events(t1: int, partitions: int):
    """One event per partition at a tick after everything: it closes the tick of held matches."""
    out, i = [], 0
    while len(out) < partitions:
        name = f"Z{i}"
        if evp.key_partition(name, partitions) == len(out):
            out.append({"Name": name, "Price": 1.0, "t0": t1, "t1": t1})
        i += 1
    return out


def oracle(queries: dict, events: list) -> collections.Counter:
    """The oracle's matches over ``events`` (list order = arrival order) as (query, attributes, t0, t1)."""
    got = evaluate_queries({q: parse_event_query(t) for q, t in queries.items()}, {"Stock": events})
    return collections.Counter((q, _attrs(m), m["t0"], m["t1"]) for q, ms in got.items() for m in ms)


def _attrs(m: dict) -> str:
    """Canonical text of a match's attributes (numbers as floats: a computed attribute is a DOUBLE column)."""
    return json.dumps({k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                       for k, v in m.items() if k not in ("t0", "t1")}, sort_keys=True)


def matches(rows, spec) -> collections.Counter:
    """The match rows as (query, attributes, t0, t1): each query's attributes from its layout columns."""
    return collections.Counter((r["query"], _attrs({a: r[c] for a, c in spec.layout.columns[r["query"]]}),
                                r["t0"], r["t1"]) for r in rows if r["op"] == ses.MATCH)


def run_files(spark, tmp_path, queries, files, *, restart_after=None, **kw):
    """Each file dropped alone and processed (one micro-batch each), optionally stopping the query after
    ``restart_after`` files and going on with a new query on the same checkpoint. Returns the output rows
    and the last query's plan."""
    inp, ck, outp = tmp_path / "in", tmp_path / "ck", tmp_path / "out"
    os.makedirs(inp, exist_ok=True)

    def start():
        src = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inp))
        df = ses.event_query_stream(src, stream="Stock", queries=queries, **kw)
        return df, (df.writeStream.format("parquet").option("path", str(outp))
                    .option("checkpointLocation", str(ck)).outputMode("append").start())

    df, q = start()
    try:
        for f, evs in enumerate(files):
            if f == restart_after:
                q.stop()
                df, q = start()  # a new run from the checkpoint: the engine restored from the state store
            tmp = tmp_path / f".f{f}"
            tmp.write_text("".join(json.dumps(e) + "\n" for e in evs))
            os.rename(tmp, inp / f"part-{f:02d}.json")
            q.processAllAvailable()
        plan = df._jdf.queryExecution().toString()
    finally:
        q.stop()
    return [r.asDict() for r in spark.read.parquet(str(outp)).collect()], plan


@pytest.mark.spark
def test_keyed_and_fold_queries_over_files_equal_the_oracle(spark, tmp_path):
    queries = {"s3": S3, "fold": FOLD, "nokey": NOKEY}
    files = stock_files(3, files=3, per_file=16)
    spec = ses.event_stream_spec("Stock", COLUMNS, queries, partitions=2)
    assert [(c.id, c.partitions, c.flush) for c in spec.classes] == [("Name@Stock", 2, True), ("u0@Stock", 1, True)]
    rows, plan = run_files(spark, tmp_path, queries, files, partitions=2)
    want = oracle(queries, [e for f in files for e in f])
    assert {q for q, *_ in want} == set(queries)  # every query matches something
    assert matches(rows, spec) == want
    assert all(r["op"] == ses.MATCH and r["reason"] is None for r in rows)
    assert {r["group_id"] for r in rows} == {"events:Name@Stock#0", "events:Name@Stock#1", "events:u0@Stock#0"}
    assert f"{ses.OPERATOR_NAME}(" in plan and f"{ses.OPERATOR_NAME}_route(" in plan


@pytest.mark.spark
def test_restart_from_the_checkpoint_neither_loses_nor_repeats(spark, tmp_path):
    queries = {"s3": S3, "fold": FOLD, "up": UP, "pub": PUB}  # one keyed class; Up read inside: held
    spec = ses.event_stream_spec("Stock", COLUMNS, queries, partitions=2)
    assert [(c.id, c.flush) for c in spec.classes] == [("Name@Stock", False)]
    files = stock_files(11, files=4, per_file=12)
    before = max(e["t1"] for f in files[:2] for e in f)
    last = max(e["t1"] for f in files for e in f)
    late = {"Name": "IBM", "Price": 50.0, "t0": 0, "t1": 0}
    files[3] = files[3][:5] + [late] + files[3][5:] + closing_events(last + 1, 2)
    rows, _ = run_files(spark, tmp_path, queries, files, restart_after=2, partitions=2)
    want = oracle(queries, [e for f in files for e in f if e is not late])
    assert matches(rows, spec) == want  # Counter equality: no loss, no repeat
    across = [k for k in want if k[0] == "s3" and k[2] <= before < k[3]]
    assert across, "the workload must have an s3 match that began before the restart"
    rejected = [r for r in rows if r["op"] == ses.REJECTED]
    assert len(rejected) == 1 and "out of order" in rejected[0]["reason"]
    assert (rejected[0]["Name"], rejected[0]["Price"], rejected[0]["t1"]) == ("IBM", 50.0, 0)


# ---- without a cluster --------------------------------------------------------------------------------

class _Value:
    """A ValueState look-alike."""

    def __init__(self):
        self.value = None

    def exists(self):
        return self.value is not None

    def get(self):
        return self.value

    def update(self, v):
        self.value = v


def frames(spec, events: list, first_ord: int = 0) -> dict:
    """replica id -> its rows of one micro-batch, as the router makes them."""
    out = collections.defaultdict(list)
    for n, e in enumerate(events):
        for c in spec.classes:
            p = evp.key_partition(e.get("Name"), c.partitions) if c.key else 0
            out[evp.replica_id(c.id, p)].append({"a0": e.get("Name"), "a1": e.get("Price"), "ev_t0": e.get("t0"),
                                                 "ev_t1": e.get("t1"), "ev_ord": first_ord + n})
    return {rid: pd.DataFrame(rows, columns=["a0", "a1", "ev_t0", "ev_t1", "ev_ord"]) for rid, rows in out.items()}


@pytest.mark.parametrize("schedule", ["one worker", "restarts"])
def test_processor_under_tws_tester_carries_the_state(schedule):
    from pyspark.sql.streaming.tws_tester import TwsTester

    queries = {"s3": S3, "fold": FOLD, "nokey": NOKEY}
    spec = ses.event_stream_spec("Stock", COLUMNS, queries, partitions=2)
    files = stock_files(5, files=4, per_file=10)
    tester = TwsTester(ses._processor_class()(spec))
    saved, ses._CACHE = ses._CACHE, {}
    got, n = [], 0
    try:
        for evs in files:
            if schedule == "restarts":
                ses._CACHE.clear()  # a new worker: the executor restored from the state
            for rid, pdf in sorted(frames(spec, evs, n).items()):
                got.extend(tester.testInPandas(rid, pdf).to_dict("records"))
            n += len(evs)
        fp, applied, tick, snap = tester.peekValueState("nfa", "events:Name@Stock#0")
    finally:
        ses._CACHE = saved
    assert fp == spec.classes[0].fingerprint and applied == len(files) and isinstance(snap, bytes)
    assert tick == max(e["t1"] for f in files for e in f if evp.key_partition(e["Name"], 2) == 0)
    assert matches(got, spec) == oracle(queries, [e for f in files for e in f])


def test_rejected_rows_and_the_stream_goes_on():
    queries = {"s3": S3, "up": UP, "pub": PUB}
    spec = ses.event_stream_spec("Stock", COLUMNS, queries, partitions=1)
    assert [(c.id, c.flush) for c in spec.classes] == [("Name@Stock", False)]  # Up is read inside: held
    state = _Value()
    batches = [
        [{"Name": "IBM", "Price": 10.0, "t0": 1, "t1": 1}, {"Name": "IBM", "Price": 12.0, "t0": 4, "t1": 5}],
        [{"Name": "IBM", "Price": 13.0, "t0": 2, "t1": 3},                 # t1 3 < tick 5: rejected
         {"Name": "IBM", "Price": 14.0, "t0": None, "t1": None},           # no timestamps
         {"Name": "IBM", "Price": 15.0, "t0": 7, "t1": 6},                 # t0 > t1
         {"Name": "IBM", "Price": 16.0, "t0": 5, "t1": 5},                 # same tick as the last: accepted
         {"Name": "IBM", "Price": 18.0, "t0": None, "t1": 8}],             # a null t0: rejected, as publish does
        [{"Name": "IBM", "Price": 19.0, "t0": 9, "t1": 9}],
    ]
    rows, n = [], 0
    for evs in batches:
        for rid, pdf in frames(spec, evs, n).items():
            rows.extend(ses.apply_event_micro_batch(spec, rid, pdf, state, ordered=True).to_dict("records"))
        n += len(evs)
    rejected = sorted((r["Price"], r["seq"], r["reason"]) for r in rows if r["op"] == ses.REJECTED)
    assert [(p, q) for p, q, _ in rejected] == [(13.0, 2), (14.0, 3), (15.0, 4), (18.0, 6)]
    assert "out of order: t1=3 arrived after t1=5" in rejected[0][2]
    assert "null t0" in rejected[1][2] and "t0=7 > t1=6" in rejected[2][2] and "null t0" in rejected[3][2]
    good = [e for b in batches for e in b if e["Price"] not in (13.0, 14.0, 15.0, 18.0)]
    want = oracle(queries, good)
    # the last tick (9) is held (Up is read inside the class) until a later t1 reaches the replica
    assert matches(rows, spec) == collections.Counter({k: c for k, c in want.items() if k[3] < 9})
    assert state.value[2] == 9


def test_micro_batch_splits_equal_the_oracle():
    """Random splits into micro-batches (a tick split across two of them), rows shuffled inside a
    micro-batch, worker caches dropped at random: classes that flush (no published stream read inside)
    and classes that hold (one is read) give the oracle's matches."""
    queries = {"s3": S3, "fold": FOLD, "nokey": NOKEY, "up": UP, "pub": PUB}
    spec = ses.event_stream_spec("Stock", COLUMNS, queries, partitions=3)
    assert [(c.id, c.partitions, c.flush) for c in spec.classes] == [("Name@Stock", 3, False), ("u0@Stock", 1, True)]
    saved, ses._CACHE = ses._CACHE, {}
    try:
        for seed in range(25):
            rnd = random.Random(seed)
            evs = sorted(stock_files(seed, files=1, per_file=rnd.randint(5, 40))[0], key=lambda e: e["t1"])
            evs += closing_events(evs[-1]["t1"] + 1, 3)  # releases what held classes hold: all is compared
            states = collections.defaultdict(_Value)
            got, i = [], 0
            while i < len(evs):
                k = rnd.randint(1, 8)
                parts = list(frames(spec, evs[i:i + k], i).items())
                rnd.shuffle(parts)
                for rid, pdf in parts:
                    if rnd.random() < 0.3:
                        ses._CACHE.clear()
                    pdf = pdf.sample(frac=1, random_state=seed)
                    got.extend(ses.apply_event_micro_batch(spec, rid, pdf, states[rid]).to_dict("records"))
                i += k
            assert matches(got, spec) == oracle(queries, evs), seed
    finally:
        ses._CACHE = saved


def test_a_tick_split_across_micro_batches_is_held_when_a_published_stream_is_read():
    """Why classes that read a published stream hold their last tick: flushed, the split tick 5 feeds Up's
    events of tick 5 in two parts, and pub's first match after Up(A, 5) is Up(A, 2) instead of Up(A, 3)."""
    prices = [(4, 1), (5, 2), (2, 3), (1, 4), (2, 5), (1, 5), (3, 5)]
    evs = [{"Name": "A", "Price": float(p), "t0": t, "t1": t} for p, t in prices]
    batches = [evs[:6], evs[6:] + closing_events(6, 1)]
    queries = {"up": UP, "pub": PUB}
    want = oracle(queries, [e for b in batches for e in b])
    for flush, exact in ((None, True), (True, False)):
        spec = ses.event_stream_spec("Stock", COLUMNS, queries, flush=flush)
        state, rows, n = _Value(), [], 0
        for b in batches:
            for rid, pdf in frames(spec, b, n).items():
                rows.extend(ses.apply_event_micro_batch(spec, rid, pdf, state).to_dict("records"))
            n += len(b)
        assert (matches(rows, spec) == want) is exact, flush


def test_a_new_checkpoint_starts_from_the_initial_snapshots():
    """``initial`` (the engine's executors when the stream starts) seeds replicas that have no state."""
    queries = {"s3": S3, "fold": FOLD}
    evs = sorted(stock_files(2, files=1, per_file=30)[0], key=lambda e: e["t1"])
    cut = next(i for i in range(15, len(evs)) if evs[i]["t1"] > evs[i - 1]["t1"])
    plain = ses.event_stream_spec("Stock", COLUMNS, queries, partitions=2)
    initial = {}
    for rid in ("events:Name@Stock#0", "events:Name@Stock#1"):
        ex = plain.classes[0].base.build()
        for e in evs[:cut]:
            if evp.replica_id("Name@Stock", evp.key_partition(e["Name"], 2)) == rid:
                ex.process("Stock", dict(e))
        ex.flush()
        initial[rid] = ex.snapshot()
    spec = ses.event_stream_spec("Stock", COLUMNS, queries, partitions=2, initial=initial)
    states, rows = collections.defaultdict(_Value), []
    for rid, pdf in frames(spec, evs[cut:], cut).items():
        rows.extend(ses.apply_event_micro_batch(spec, rid, pdf, states[rid]).to_dict("records"))
    want = collections.Counter({k: c for k, c in oracle(queries, evs).items() if k[3] >= evs[cut]["t1"]})
    assert any(k[2] < evs[cut]["t1"] for k in want)  # some match began before the stream
    assert matches(rows, spec) == want


def test_a_restart_with_other_queries_fails_clearly():
    spec = ses.event_stream_spec("Stock", COLUMNS, {"s3": S3}, partitions=1)
    other = ses.event_stream_spec("Stock", COLUMNS, {"s3": S3, "fold": FOLD}, partitions=1)
    state = _Value()
    (rid, pdf), = frames(spec, [{"Name": "IBM", "Price": 10.0, "t0": 1, "t1": 1}]).items()
    ses.apply_event_micro_batch(spec, rid, pdf, state)
    with pytest.raises(AnalysisError, match="another set of event queries"):
        ses.apply_event_micro_batch(other, rid, pdf, state)


def test_spec_errors():
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType
    no_times = SimpleNamespace(schema=StructType([StructField("Name", StringType()), StructField("Price", DoubleType())]))
    with pytest.raises(AnalysisError, match="needs integer columns t0 and t1"):
        ses.event_query_stream(no_times, stream="Stock", queries={"s3": S3})
    with pytest.raises(AnalysisError, match="unknown stream 'Other'"):
        ses.event_stream_spec("Stock", COLUMNS, {"q": "SELECT * FROM Other NEXT{$1.Name = $2.Name} Other"})


@pytest.mark.spark
def test_engine_stream_goes_on_from_where_publish_left_the_queries(spark, tmp_path):
    """``engine.stream`` on an event stream: the state store starts from the engine's executors (matches
    begun by ``publish`` complete in the stream), and publish + stream together equal the oracle."""
    from sparksub import Engine
    engine = Engine(spark)
    engine.event_partitions = 2
    engine.sql("CREATE TABLE Stock (Name STRING, Price DOUBLE)")
    queries = {"s3": S3, "fold": FOLD, "nokey": NOKEY}
    for n, q in queries.items():
        engine.register_event_query(n, q)
    files = stock_files(11, files=3, per_file=14)
    first = sorted(files[0], key=lambda e: e["t1"])
    engine.publish("Stock", first)
    got = collections.Counter((q, _attrs(m), m["t0"], m["t1"]) for q in queries for m in engine.matches(q))
    inp, ck, outp = tmp_path / "in", tmp_path / "ck", tmp_path / "out"
    os.makedirs(inp)
    src = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inp))
    df = engine.stream("Stock", src)
    q = df.writeStream.format("parquet").option("path", str(outp)).option("checkpointLocation", str(ck)).start()
    try:
        for f, evs in enumerate(files[1:]):
            (tmp_path / f".f{f}").write_text("".join(json.dumps(e) + "\n" for e in evs))
            os.rename(tmp_path / f".f{f}", inp / f"part-{f:02d}.json")
            q.processAllAvailable()
    finally:
        q.stop()
    layout = engine._event_layout(engine._table("Stock").definition, list(queries))
    rows = [r.asDict() for r in spark.read.parquet(str(outp)).collect()]
    got += collections.Counter((r["query"], _attrs({a: r[c] for a, c in layout.columns[r["query"]]}), r["t0"], r["t1"])
                               for r in rows if r["op"] == ses.MATCH)
    want = oracle(queries, first + [e for f in files[1:] for e in f])
    assert got == want
    switch = max(e["t1"] for e in first)
    began_before = [k for k in want if k[2] <= switch < k[3]]
    assert began_before, "a match must span the switch from publish to stream"
