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
import pytest

from sparksub.errors import AnalysisError
from sparksub.grammar.events import parse_event_query
from sparksub.operators import spark_event_stream as ses
from sparksub.operators.cayuga_reference import evaluate_queries

S3 = "SELECT * FROM FILTER{Price > 1.05 * Price_1}(Stock NEXT{$1.Name = $2.Name} Stock)"
FOLD = ("SELECT * FROM (SELECT *, 1 AS cnt, Price AS sumPrice FROM Stock) FOLD{$1.Name = $2.Name, "
        "$.Price < $2.Price, $.cnt + 1 AS cnt, $.sumPrice + $2.Price AS sumPrice} Stock")
NOKEY = "SELECT * FROM Stock NEXT{$2.Price > $1.Price + 9} Stock"          # no partition key: one partition
UP = "SELECT Name, Price FROM Stock NEXT{$1.Name = $2.Name AND $2.Price > $1.Price} Stock PUBLISH Up"
PUB = "SELECT * FROM Up NEXT{$1.Name = $2.Name} Up"                       # reads a published stream: held
NAMES = ["IBM", "MSFT", "SUN", "HP", "DELL"]
SCHEMA = "Name string, Price double, t0 bigint, t1 bigint"


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
        if ses.event_partition(name, partitions) == len(out):
            out.append({"Name": name, "Price": 1.0, "t0": t1, "t1": t1})
        i += 1
    return out


def oracle(queries: dict, events: list) -> collections.Counter:
    """The oracle's matches over ``events`` (list order = arrival order) as (query, json, t0, t1)."""
    got = evaluate_queries({q: parse_event_query(t) for q, t in queries.items()}, {"Stock": events})
    return collections.Counter((q, _attrs(m), m["t0"], m["t1"]) for q, ms in got.items() for m in ms)


def _attrs(m: dict) -> str:
    return json.dumps({k: v for k, v in m.items() if k not in ("t0", "t1")}, sort_keys=True)


def matches(rows) -> collections.Counter:
    return collections.Counter((r["query"], json.dumps(json.loads(r["binding"]), sort_keys=True), r["t0"], r["t1"])
                               for r in rows if r["op"] == ses.MATCH)


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
    attrs = "Name_1 string, Price_1 double, Name string, Price double, cnt bigint, sumPrice double"
    spec = ses.event_stream_spec("Stock", ["Name", "Price"], [False, False], queries, partitions=2)
    assert [(g.group_id, g.partitions, g.flush) for g in spec.groups] == [("Name", 2, True), ("*", 1, True)]
    rows, plan = run_files(spark, tmp_path, queries, files, partitions=2, attributes=attrs)
    cols = [c.split()[0] for c in attrs.split(", ")]
    got = collections.Counter((r["query"], tuple(r[c] for c in cols), r["t0"], r["t1"]) for r in rows)
    want_raw = evaluate_queries({q: parse_event_query(t) for q, t in queries.items()},
                                {"Stock": [e for f in files for e in f]})
    want = collections.Counter((q, tuple(None if m.get(c) is None else m[c] for c in cols), m["t0"], m["t1"])
                               for q, ms in want_raw.items() for m in ms)
    assert {q for q, *_ in want} == set(queries)  # every query matches something
    assert got == want
    assert all(r["op"] == ses.MATCH and r["reason"] is None for r in rows)
    assert "event_query_nfa_stream" in plan and "event_query_nfa_stream_route" in plan


@pytest.mark.spark
def test_restart_from_the_checkpoint_neither_loses_nor_repeats(spark, tmp_path):
    queries = {"s3": S3, "fold": FOLD, "up": UP, "pub": PUB}  # one keyed group; Up read inside: held
    files = stock_files(11, files=4, per_file=12)
    before = max(e["t1"] for f in files[:2] for e in f)
    last = max(e["t1"] for f in files for e in f)
    late = {"Name": "IBM", "Price": 50.0, "t0": 0, "t1": 0}
    files[3] = files[3][:5] + [late] + files[3][5:] + closing_events(last + 1, 2)
    rows, _ = run_files(spark, tmp_path, queries, files, restart_after=2, partitions=2)
    want = oracle(queries, [e for f in files for e in f if e is not late])
    assert matches(rows) == want  # Counter equality: no loss, no repeat
    across = [k for k in want if k[0] == "s3" and k[2] <= before < k[3]]
    assert across, "the workload must have an s3 match that began before the restart"
    rejected = [r for r in rows if r["op"] == ses.REJECTED]
    assert len(rejected) == 1 and rejected[0]["t1"] == 0 and "out of order" in rejected[0]["reason"]
    assert json.loads(rejected[0]["binding"]) == {"Name": "IBM", "Price": 50.0}


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
    """rid -> the partition's rows of one micro-batch, as the router makes them."""
    out = collections.defaultdict(list)
    for n, e in enumerate(events):
        for g in spec.groups:
            p = ses.event_partition(e.get("Name"), g.partitions) if g.key else 0
            out[f"{g.group_id}#{p}"].append({"a0": e.get("Name"), "a1": e.get("Price"), "ev_t0": e.get("t0"),
                                             "ev_t1": e.get("t1"), "ev_ord": first_ord + n})
    return {rid: pd.DataFrame(rows, columns=["a0", "a1", "ev_t0", "ev_t1", "ev_ord"]) for rid, rows in out.items()}


@pytest.mark.parametrize("schedule", ["one worker", "restarts"])
def test_processor_under_tws_tester_carries_the_state(schedule):
    from pyspark.sql.streaming.tws_tester import TwsTester

    queries = {"s3": S3, "fold": FOLD, "nokey": NOKEY}
    spec = ses.event_stream_spec("Stock", ["Name", "Price"], [False, False], queries, partitions=2)
    files = stock_files(5, files=4, per_file=10)
    tester = TwsTester(ses._processor_class()(spec))
    saved, ses._CACHE = ses._CACHE, {}
    got, n = [], 0
    try:
        for f, evs in enumerate(files):
            if schedule == "restarts":
                ses._CACHE.clear()  # a new worker: the engine restored from the state
            for rid, pdf in sorted(frames(spec, evs, n).items()):
                got.extend(tester.testInPandas(rid, pdf).to_dict("records"))
            n += len(evs)
        fp, applied, tick, snap = tester.peekValueState("nfa", "Name#0")
    finally:
        ses._CACHE = saved
    assert fp == spec.groups[0].fingerprint and applied == len(files) and isinstance(snap, bytes)
    assert matches(got) == oracle(queries, [e for f in files for e in f])


def test_rejected_rows_and_the_stream_goes_on():
    queries = {"s3": S3, "up": UP, "pub": PUB}
    spec = ses.event_stream_spec("Stock", ["Name", "Price"], [False, False], queries, partitions=1)
    assert [(g.group_id, g.flush) for g in spec.groups] == [("*", False)]  # Up is read inside: held
    state = _Value()
    batches = [
        [{"Name": "IBM", "Price": 10.0, "t0": 1, "t1": 1}, {"Name": "IBM", "Price": 12.0, "t0": 4, "t1": 5}],
        [{"Name": "IBM", "Price": 13.0, "t0": 2, "t1": 3},                 # t1 3 < tick 5: rejected
         {"Name": "IBM", "Price": 14.0, "t0": None, "t1": None},           # no timestamps
         {"Name": "IBM", "Price": 15.0, "t0": 7, "t1": 6},                 # t0 > t1
         {"Name": "IBM", "Price": 16.0, "t0": 5, "t1": 5},                 # same tick as the last: accepted
         {"Name": "IBM", "Price": 18.0, "t0": None, "t1": 8}],             # instantaneous
        [{"Name": "IBM", "Price": 19.0, "t0": 9, "t1": 9}],
    ]
    rows, n = [], 0
    for evs in batches:
        for rid, pdf in frames(spec, evs, n).items():
            rows.extend(ses.apply_event_micro_batch(spec, rid, pdf, state).to_dict("records"))
        n += len(evs)
    rejected = [(None if pd.isna(r["t1"]) else r["t1"], r["reason"]) for r in rows if r["op"] == ses.REJECTED]
    assert sorted(t for t, _ in rejected if t is not None) == [3, 6] and len(rejected) == 3
    reasons = " | ".join(r for _, r in rejected)
    assert "out of order: t1=3 arrived after t1=5" in reasons and "t0=7 > t1=6" in reasons and "both are null" in reasons
    good = [e for b in batches for e in b if e["Price"] not in (13.0, 14.0, 15.0)]
    for e in good:
        if e["t0"] is None:
            e["t0"] = e["t1"]
    want = oracle(queries, good)
    # the last tick (9) is held (Up is read inside the group) until a later t1 reaches the partition
    assert matches(rows) == collections.Counter({k: c for k, c in want.items() if k[3] < 9})
    assert state.value[2] == 9


def test_micro_batch_splits_equal_the_oracle():
    """Random splits into micro-batches (a tick split across two of them), rows shuffled inside a
    micro-batch, worker caches dropped at random: flushed groups (no published stream read inside) and
    held groups (one) give the oracle's matches."""
    queries = {"s3": S3, "fold": FOLD, "nokey": NOKEY, "up": UP, "pub": PUB}
    spec = ses.event_stream_spec("Stock", ["Name", "Price"], [False, False], queries, partitions=3)
    assert [(g.group_id, g.partitions, g.flush) for g in spec.groups] == [("Name", 3, False), ("*", 1, True)]
    saved, ses._CACHE = ses._CACHE, {}
    try:
        for seed in range(25):
            rnd = random.Random(seed)
            evs = sorted(stock_files(seed, files=1, per_file=rnd.randint(5, 40))[0], key=lambda e: e["t1"])
            evs += closing_events(evs[-1]["t1"] + 1, 3)  # releases what held groups hold: all is compared
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
            assert matches(got) == oracle(queries, evs), seed
    finally:
        ses._CACHE = saved


def test_a_restart_with_other_queries_fails_clearly():
    spec = ses.event_stream_spec("Stock", ["Name", "Price"], [False, False], {"s3": S3}, partitions=1)
    other = ses.event_stream_spec("Stock", ["Name", "Price"], [False, False], {"s3": S3, "nokey": NOKEY},
                                  partitions=1)
    state = _Value()
    evs = [{"Name": "IBM", "Price": 10.0, "t0": 1, "t1": 1}]
    (rid, pdf), = frames(spec, evs).items()
    ses.apply_event_micro_batch(spec, rid, pdf, state)
    with pytest.raises(AnalysisError, match="another set of event queries"):
        ses.apply_event_micro_batch(other, rid, pdf, state)


def test_plan_errors():
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType
    no_times = SimpleNamespace(schema=StructType([StructField("Name", StringType()), StructField("Price", DoubleType())]))
    with pytest.raises(AnalysisError, match="needs integer columns t0 and t1"):
        ses.event_query_stream(no_times, stream="Stock", queries={"s3": S3})
    with pytest.raises(AnalysisError, match="reads stream"):
        ses.event_stream_spec("Stock", ["Name"], [False], {"q": "SELECT * FROM Other NEXT{$1.Name = $2.Name} Other"})
    with pytest.raises(AnalysisError, match="collide"):
        ses.event_stream_spec("Stock", ["Name"], [False], {"s3": S3},
                              attributes=StructType([StructField("query", StringType())]))
