"""Durable engines keep issue 19's state (``journal.py``, its issue-19 block): a stream-join group's kept events
(003 ch. 3) and the refresh buffer of ``Engine.max_delay`` (003 ch. 2).

The oracle is a temporary engine fed the same operations without interruption.  The durable one is reopened
twice -- once from the journal alone (``close(checkpoint=False)``: what a kill leaves), once from the checkpoint
a clean ``close()`` writes -- and must go on exactly as the oracle: the same notifications (a bounded group's
evictions depend on every event it kept), the same MAX-subset counters, the same ``pending()``.  A SIGKILL of a
child process with buffered updates, then a reopen, restores ``pending()`` exactly.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparksub import Engine

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_independent]

STREAMS = ("CREATE TABLE a (sensor STRING, loc BIGINT, temp DOUBLE, t BIGINT); "
           "CREATE TABLE b (sensor STRING, loc BIGINT, hum DOUBLE, t BIGINT)")
SUBS = {"all": "SELECT * FROM a JOIN b ON a.loc = b.loc",
        "heeb": "SELECT a.sensor, b.sensor AS bs FROM a JOIN b ON a.loc = b.loc WHERE a.temp > 28 "
                "WITH (max_state_rows = 5)",
        "band": "SELECT a.t, b.t FROM a JOIN b ON a.t BETWEEN b.t - 2 AND b.t + 2 "
                "WITH (max_state_rows = 6, state_policy = 'LFU')"}


def events(rnd, stream, n):
    col = "temp" if stream == "a" else "hum"
    return [{"sensor": f"{stream}{rnd.randrange(4)}", "loc": None if rnd.random() < 0.1 else rnd.randrange(5),
             col: float(rnd.randrange(20, 40)), "t": rnd.randrange(0, 20)} for _ in range(n)]


def notes(df) -> list:
    return sorted((r.subscription_id, int(r.left_key), int(r.right_key), int(r.seq)) for r in df.collect()
                  if r.subscription_id is not None)


def join_stats(engine) -> dict:
    stats = engine.stats()
    return {g["group"]: {k: stats[g["group"]][k] for k in ("results", "true_results", "missed", "evicted",
                                                           "state_rows", "events", "publishes")}
            for g in engine.subscription_groups()}


def test_stream_join_state_survives_reopen(spark, tmp_path):
    rnd = random.Random(4)
    steps = [("b", events(rnd, "b", 15)), ("a", events(rnd, "a", 15)), ("b", events(rnd, "b", 15)),
             ("a", events(rnd, "a", 15)), ("b", events(rnd, "b", 15)), ("a", events(rnd, "a", 15))]
    oracle = Engine(spark, catalyst=False)
    path = tmp_path / "engine"
    e = Engine(spark, catalyst=False, path=path)
    for x in (oracle, e):
        x.sql(STREAMS)
        for name, sql in SUBS.items():
            x.sql(f"CREATE SUBSCRIPTION {name} AS {sql}")
    for stream, evs in steps[:2]:
        assert notes(e.publish(stream, evs)) == notes(oracle.publish(stream, evs))

    e.close(checkpoint=False)   # the journal alone (a kill's leftovers): the kept events come from its records
    e = Engine(spark, catalyst=False, path=path)
    assert join_stats(e) == join_stats(oracle)
    stream, evs = steps[2]
    got, want = notes(e.publish(stream, evs)), notes(oracle.publish(stream, evs))
    assert got == want and len(want) > 0

    for x in (oracle, e):   # a subscription change: a new base carrying the state, then a checkpoint (close)
        x.sql("CREATE SUBSCRIPTION heeb_late AS " + SUBS["heeb"])
    stream, evs = steps[3]
    assert notes(e.publish(stream, evs)) == notes(oracle.publish(stream, evs))
    e.close()
    assert (path / "stream_joins").is_dir()
    e = Engine(spark, catalyst=False, path=path)
    assert join_stats(e) == join_stats(oracle)
    for stream, evs in steps[4:]:
        got, want = notes(e.publish(stream, evs)), notes(oracle.publish(stream, evs))
        assert got == want and len(want) > 0
    assert join_stats(e) == join_stats(oracle)
    assert any(s["missed"] > 0 for s in join_stats(e).values())   # the bounded groups did evict
    e.close()


# ---- the refresh buffer (Engine.max_delay) ---------------------------------------------------------------------
RANGES = {"s1": (0, 40), "s2": (25, 75), "s3": (60, 100)}


def stock_engine(engine):
    engine.sql("CREATE TABLE stock (sym STRING, risk DOUBLE, per DOUBLE, PRIMARY KEY (sym))")
    engine.load("stock", [{"sym": f"k{i}", "risk": float(i * 10 % 101), "per": float(i)} for i in range(12)])
    for sid, (lo, hi) in RANGES.items():
        engine.sql(f"CREATE SUBSCRIPTION {sid} AS SELECT MIN(per) FROM stock WHERE risk BETWEEN {lo} AND {hi}")
    return engine


def stock_batches(n: int, seed: int = 5):
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        batch = []
        for _ in range(rnd.randint(1, 4)):
            key = f"k{rnd.randrange(15)}"
            batch.append({"sym": key, "risk": float(rnd.randrange(101)), "per": float(rnd.randrange(-20, 20))})
        out.append(batch)
    return out


def kept(engine) -> list:
    return sorted((r.subscription_id, r.op, r.value, r.seq) for r in engine.notifications("stock").collect()
                  if r.op != "rejected")


def abandon(engine) -> None:
    """What a kill leaves: the journal as it is (``Engine.close`` would apply the buffer first)."""
    engine._journal.close(checkpoint=False)


def test_refresh_buffer_survives_reopen(spark, tmp_path):
    batches = stock_batches(8)
    path = tmp_path / "engine"
    plain = stock_engine(Engine(spark, catalyst=False))
    e = stock_engine(Engine(spark, catalyst=False, path=path))
    e.max_delay = 1e6   # the first two publishes apply at once (to time the table), the others wait
    for i, b in enumerate(batches[:7]):
        e.publish("stock", [dict(r) for r in b])
        plain.publish("stock", [dict(r) for r in b])
        if i == 3:
            e.refresh()   # applies batches 2-3: their publish commits what left the buffer
        if i == 5:
            e.checkpoint()   # batches 4-5 in the checkpoint's manifest, 6 in the journal after it
    before = e.pending()
    assert before["tables"] == {"stock": sum(len(b) for b in batches[4:7])}
    abandon(e)

    e = Engine(spark, catalyst=False, path=path)
    assert e.pending() == before   # the buffered rows and the measured costs, exactly
    e.max_delay = 1e6             # (not a journaled setting: it changes when rows apply, not the results)
    e.publish("stock", [dict(r) for r in batches[7]])
    plain.publish("stock", [dict(r) for r in batches[7]])
    e.close()   # applies the buffer
    e = Engine(spark, catalyst=False, path=path)
    assert e.pending()["tables"] == {}
    assert kept(e) == kept(plain)   # every notification once, with the unbounded engine's seqs
    for sid in RANGES:
        assert e.result(sid) == plain.result(sid)
    e.close()


CHILD = """\
import json, sys, time
sys.path.insert(0, {tests!r})
from sparksub import Engine
import test_durable_issue19 as t
# no Spark job runs here (its session is made lazily): with the table's cost given, every publish is buffered
e = t.stock_engine(Engine(catalyst=False, path=sys.argv[1]))
e.max_delay, e.refresh_costs = 1e6, {{"stock": (1e-3, 1e-2)}}
for b in t.stock_batches(5):
    e.publish("stock", b)
with open(sys.argv[2] + ".tmp", "w") as fh:
    json.dump(e.pending(), fh)
import os
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(600)
"""


def test_refresh_buffer_survives_sigkill(spark, tmp_path):
    script, path, out, log = tmp_path / "child.py", tmp_path / "engine", tmp_path / "pending.json", tmp_path / "log"
    script.write_text(CHILD.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "SPARKSUB_CATALYST": "off", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as fh:
        child = subprocess.Popen([sys.executable, str(script), str(path), str(out)], env=env, stdout=fh, stderr=fh,
                                 start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not out.exists():
            assert child.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    import json
    before = json.loads(out.read_text())
    assert before["tables"] == {"stock": sum(len(b) for b in stock_batches(5))}
    e = Engine(spark, catalyst=False, path=path)
    e.refresh_costs = {"stock": (1e-3, 1e-2)}   # (not journaled: pending()'s delay is computed with it)
    assert json.loads(json.dumps(e.pending())) == before
    plain = stock_engine(Engine(spark, catalyst=False))
    for b in stock_batches(5):
        plain.publish("stock", b)
    e.refresh()
    assert kept(e) == kept(plain)
    e.close()
