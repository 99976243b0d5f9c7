"""Buffered publishing under a response-time bound through the engine (issue 19 part 1; control/refreshing.py).
Oracles: the same publishes on an engine without a bound (max_delay = None) and the MIN recomputed from the
rows; the bound itself against the engine's measured costs."""
from __future__ import annotations

import random

import pytest

from sparksub import Engine
from sparksub.errors import BadUpdate, InvalidArgument

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

RANGES = {"s1": (0, 40), "s2": (25, 75), "s3": (60, 100), "s4": (50, 50)}


def _engine(spark, **settings):
    engine = Engine(spark)
    engine.sql("CREATE TABLE stock (sym STRING, risk DOUBLE, per DOUBLE, PRIMARY KEY (sym))")
    engine.load("stock", [{"sym": f"k{i}", "risk": float(i * 10 % 101), "per": float(i)} for i in range(12)])
    for sid, (lo, hi) in RANGES.items():
        engine.sql(f"CREATE SUBSCRIPTION {sid} AS SELECT MIN(per) FROM stock WHERE risk BETWEEN {lo} AND {hi}")
    for k, v in settings.items():
        setattr(engine, k, v)
    return engine


def _batches(seed: int, n: int):
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        batch = []
        for _ in range(rnd.randint(1, 5)):
            key = f"k{rnd.randrange(15)}"
            if rnd.random() < 0.2:
                batch.append({"sym": key, "_op": "delete"})
            else:   # ties and a null PER among them
                batch.append({"sym": key, "risk": float(rnd.choice([0, 25, 50, 50, 75, 100, rnd.randrange(101)])),
                              "per": rnd.choice([None, 1.0, 1.0, float(rnd.randrange(-20, 20))])})
        out.append(batch)
    return out


def _in_order(notes):
    return sorted(notes, key=lambda n: (n[0], n[3], n[1], n[2] is None, n[2] or 0.0))


def _notes(df):
    return _in_order((r["subscription_id"], r["op"], r["value"], r["seq"]) for r in df.collect() if r["op"] != "rejected")


def _brute_min(rows: dict, lo, hi):
    vals = [per for risk, per in rows.values() if risk is not None and per is not None and lo <= risk <= hi]
    return min(vals) if vals else None


def test_buffered_publishes_give_the_unbounded_engines_notifications_and_results(spark):
    batches = _batches(7, 7)
    plain = _engine(spark)
    buffered = _engine(spark, max_delay=1e6)
    want, got = [], []
    rows = {f"k{i}": (float(i * 10 % 101), float(i)) for i in range(12)}
    for b in batches:
        want += _notes(plain.publish("stock", [dict(r) for r in b]))
        got += _notes(buffered.publish("stock", [dict(r) for r in b]))
        for r in b:
            if r.get("_op") == "delete":
                rows.pop(r["sym"], None)
            else:
                rows[r["sym"]] = (r["risk"], r["per"])
    pending = buffered.pending()
    # the first two applies of a table are timed (its cost function); a bound of 1e6 s keeps the rest buffered
    assert pending["tables"] == {"stock": sum(len(b) for b in batches[2:])}
    assert pending["costs"]["stock"]["samples"] == 2 and pending["delay"] <= 1e6
    # result() is a refresh: the buffered updates apply first
    assert buffered.result("s2") == _brute_min(rows, *RANGES["s2"])
    assert buffered.pending()["tables"] == {}
    kept = _notes(buffered.notifications("stock"))
    assert kept == _in_order(want)                      # every notification, once, with the unbounded engine's seqs
    assert set(got) <= set(kept)                     # what the publishes returned: the part applied then
    for sid, (lo, hi) in RANGES.items():
        assert buffered.result(sid) == plain.result(sid) == _brute_min(rows, lo, hi)


def test_the_bound_holds_after_every_publish_and_a_zero_bound_applies_everything(spark):
    engine = _engine(spark, max_delay=0.0, refresh_policy="naive")
    for b in _batches(3, 4):
        engine.publish("stock", b).count()
        assert engine.pending()["tables"] == {}      # f(k) > 0 for any k: nothing may stay buffered
    costs = engine.pending()["costs"]["stock"]
    bound = 1.5 * (costs["a"] + costs["b"])          # one batch fits, two batches' start-up costs do not
    engine.max_delay = bound
    engine.refresh_policy = "online"
    for b in _batches(4, 4):
        engine.publish("stock", b).count()
        assert engine.pending()["delay"] <= bound


def test_bad_settings_and_batches_buffer_nothing(spark):
    engine = _engine(spark, max_delay=-1)
    with pytest.raises(InvalidArgument, match="max_delay"):
        engine.publish("stock", [{"sym": "k1", "risk": 1.0, "per": 1.0}])
    engine.max_delay, engine.refresh_policy = 10.0, "fastest"
    with pytest.raises(InvalidArgument, match="refresh_policy"):
        engine.publish("stock", [{"sym": "k1", "risk": 1.0, "per": 1.0}])
    engine.refresh_policy = "online"
    with pytest.raises(InvalidArgument, match="batch_id"):
        engine.publish("stock", [{"sym": "k1", "risk": 1.0, "per": 1.0}], batch_id=1)
    with pytest.raises(BadUpdate, match="nope"):
        engine.publish("stock", [{"sym": "k1", "nope": 1.0}])
    assert engine.pending()["tables"] == {}
    assert engine.result("s1") == _brute_min({f"k{i}": (float(i * 10 % 101), float(i)) for i in range(12)}, 0, 40)


# ---- the refresh scheduler in a stream's micro-batches (issue 19 item 1; scheduling/stream_gate.py) ----------
def test_stream_micro_batches_apply_what_the_scheduler_releases(spark, tmp_path):
    """A stream over the table with ``max_delay`` set: per micro-batch, the lazy plan of the table's cost
    (f(k) = k s, dT = 10 s: at most 10 rows stay buffered) decides what applies; ``refresh()`` makes the next
    micro-batch apply everything.  Oracles: the lazy rule on the arrival counts (the one-table LGM plan) and the
    MIN recomputed from the initial rows plus exactly the rows released so far."""
    import json
    import os

    engine = _engine(spark, max_delay=10.0, refresh_costs={"stock": (1.0, 0.0)})
    rnd = random.Random(19)
    files = [[{"sym": f"k{rnd.randrange(15)}", "risk": float(rnd.randrange(101)), "per": float(rnd.randrange(-30, 30))}
              for _ in range(n)] for n in (4, 4, 4, 4, 1)]
    rows = {f"k{i}": (float(i * 10 % 101), float(i)) for i in range(12)}
    src_dir, tmp = tmp_path / "in", tmp_path / "tmp"
    src_dir.mkdir()
    tmp.mkdir()
    src = spark.readStream.schema("sym string, risk double, per double").option("maxFilesPerTrigger", 1) \
        .json(str(src_dir))
    out = engine.stream("stock", src)
    q = (out.writeStream.format("memory").queryName("gated_stock").outputMode("append")
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    buffered, released_seqs = [], set()
    try:
        for b, evs in enumerate(files):
            if b == 4:
                engine.refresh()   # the next micro-batch applies everything buffered
            path = tmp / f"{b}.json"
            path.write_text("".join(json.dumps(r) + "\n" for r in evs))
            os.rename(path, src_dir / f"part-{b:02d}.json")
            q.processAllAvailable()
            buffered += [(b, j, r) for j, r in enumerate(evs)]
            if b == 4 or len(buffered) > 10:           # the oracle: lazy, forced at the refresh
                for bb, j, r in buffered:
                    rows[r["sym"]] = (r["risk"], r["per"])
                    released_seqs.add((bb << 32) + j)
                buffered = []
            (stream,) = engine.pending()["streams"].values()
            assert (stream["batch"], stream["buffered"]) == (b, len(buffered))
            assert stream["load"] <= 10.0
            for sid, (lo, hi) in RANGES.items():
                assert engine.result(sid) == _brute_min(rows, lo, hi), (b, sid)
        notes = spark.table("gated_stock").collect()
    finally:
        q.stop()
    assert {r["seq"] for r in notes if r["op"] != "rejected"} <= released_seqs
    assert len(released_seqs) == sum(map(len, files))


def test_stream_gate_settings_are_checked_before_the_stream_exists(spark, tmp_path):
    engine = _engine(spark, max_delay=5.0)
    src = spark.readStream.schema("sym string, risk double, per double").json(str(tmp_path))
    with pytest.raises(InvalidArgument, match="refresh_costs\\['stock'\\]"):   # nothing measured nor given
        engine.stream("stock", src)
    engine.refresh_costs = {"stock": (1.0, -2.0)}
    with pytest.raises(InvalidArgument, match="refresh_costs\\['stock'\\] = \\(1.0, -2.0\\)"):
        engine.stream("stock", src)
    engine.refresh_costs = {"nosuch": (1.0, 0.0)}
    with pytest.raises(Exception, match="nosuch"):
        engine.stream("stock", src)
    assert engine._live_streams == {} and engine.pending()["streams"] == {}
