"""A group's replica compacted under publishes (``control/publishing.py`` ``_replica``: a new base once the log
passes ``LOG_COMPACTION_ROWS``), through Spark: the notifications and results stay the brute-force oracle's,
a reformulated publish's pending deliver() side is not built on the driver by the compaction (its replica's
files are pinned, ``_keep_seed``) and is built at the first deliver(), from where the caller's messages
start, so deliver() gives the rows a unicast twin gives for the same updates."""
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

from sparksub import Engine
from sparksub.control import publishing

sys.path.insert(0, str(Path(__file__).parent))   # the sibling tests' update generators and join oracle
import test_joins_engine as tj  # noqa: E402
from test_modes_engine import batches  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

#: id -> (MIN or MAX, lo, hi) over b, of a
SUBS = {"m1": ("MIN", 0.0, 2.0), "m2": ("MIN", 1.0, 1.0), "m3": ("MAX", 0.0, 3.0), "m4": ("MAX", 2.0, 9.0)}


def engine(spark, path=None):
    e = Engine(spark, path=path)
    e.sql("CREATE TABLE r (rk BIGINT PRIMARY KEY, a DOUBLE, b DOUBLE)")
    e.load("r", [{"rk": k, "a": float(k % 3), "b": float(k % 4)} for k in range(6)])
    for q, (agg, lo, hi) in SUBS.items():
        e.subscribe(q, f"SELECT {agg}(a) FROM r WHERE b BETWEEN {lo} AND {hi}")
    return e


def oracle(rows: dict, agg: str, lo: float, hi: float):
    vals = [a for a, b in rows.values() if a is not None and b is not None and lo <= b <= hi]
    return (min(vals) if agg == "MIN" else max(vals)) if vals else None


def rows(df) -> list:
    return sorted(((r.subscription_id, r.op, r.value, r.seq) for r in df.collect()), key=repr)


def test_compactions_keep_results_and_a_pending_deliver_side(spark, monkeypatch):
    monkeypatch.setattr(publishing, "LOG_COMPACTION_ROWS", 5)   # a new base before nearly every publish
    uni, ref = engine(spark), engine(spark)
    state = {k: (float(k % 3), float(k % 4)) for k in range(6)}
    messages = []
    for batch in batches(seed=7, n=3):
        want = rows(uni.publish("r", batch))
        messages.append((ref.publish("r", batch, mode="reformulated").toArrow(), want))
        for u in batch:
            if u.get("_op") == "delete":
                state.pop(u["rk"], None)
            else:
                state[u["rk"]] = (u["a"], u["b"])
        # the compactions before these publishes built no deliver() side on the driver: it waits, pinned
        assert ref.runtime_stats()["runtime"]["driver"]["rebuilds"] == 0
    for got, want in messages:   # delivered only now, in order, from where the first reformulated publish began
        assert rows(ref.deliver(got)) == want
    for q, (agg, lo, hi) in SUBS.items():
        assert ref.result(q) == uni.result(q) == oracle(state, agg, lo, hi), q
    entry = next(iter(ref._groups.values()))
    assert entry.subscribers_seed is None and not any((ref.directory.root / "seeds").rglob("base.pickle"))


def test_a_reopen_removes_the_files_a_pending_deliver_side_pinned(spark, monkeypatch, tmp_path):
    """A durable engine left with a pending deliver() side (reformulated publishes, compactions, no deliver()) and
    then closed without a checkpoint, as a kill leaves it: the reopened engine removes the pinned files under
    ``seeds/`` (nothing reads them again) and answers as the oracle."""
    monkeypatch.setattr(publishing, "LOG_COMPACTION_ROWS", 5)
    e = engine(spark, tmp_path / "e")
    seeds = e.directory.root / "seeds"
    state = {k: (float(k % 3), float(k % 4)) for k in range(6)}
    for batch in batches(seed=7, n=3):
        e.publish("r", batch, mode="reformulated")
        for u in batch:
            if u.get("_op") == "delete":
                state.pop(u["rk"], None)
            else:
                state[u["rk"]] = (u["a"], u["b"])
    assert any(seeds.rglob("base.pickle"))
    e.close(checkpoint=False)
    reopened = Engine(spark, path=tmp_path / "e")
    assert not seeds.exists()
    for q, (agg, lo, hi) in SUBS.items():
        assert reopened.result(q) == oracle(state, agg, lo, hi), q
    reopened.close()


def test_join_partitions_compacted_under_publishes_keep_the_oracle(spark, monkeypatch):
    """A SELECT_JOIN group's partitions get new bases as their logs grow (cut as before, so the workers' cached
    partitions go on from the old ones): the notifications stay the nested loop's, update by update."""
    monkeypatch.setattr(publishing, "LOG_COMPACTION_ROWS", 5)
    rnd = random.Random(11)
    e = Engine(spark)
    e.join_partitions = 2
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b BIGINT)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    rows = {"r": {k: {"a": float(rnd.randint(0, 6)), "b": rnd.randint(0, 3)} for k in range(6)},
            "s": {k: {"b": float(rnd.randint(0, 3)), "c": float(rnd.randint(0, 6))} for k in range(6)}}
    e.load("r", [{"rk": k, **v} for k, v in rows["r"].items()])
    e.load("s", [{"sk": k, **v} for k, v in rows["s"].items()])
    e.sql("CREATE SUBSCRIPTION j1 AS SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 1 AND 4 AND s.c >= 2")
    e.sql("CREATE SUBSCRIPTION j2 AS SELECT * FROM r JOIN s ON r.b = s.b")
    queries = {"j1": (1, 4, 2, math.inf), "j2": (-math.inf, math.inf, -math.inf, math.inf)}
    gens = {"r": {"a": lambda g: float(g.randint(0, 6)), "b": lambda g: g.randint(0, 3)},
            "s": {"b": lambda g: float(g.randint(0, 3)), "c": lambda g: float(g.randint(0, 6))}}
    e.result("j1")
    entry = next(g for g in e._groups.values() if g.group_id.startswith("select_join"))
    bases = {rid: r.base_id for rid, r in entry.shards.items()}
    for step in range(4):
        table = "rs"[step % 2]
        batch = tj.random_batch(rnd, rows[table], table + "k", gens[table], 7)
        tj.publish_and_check(e, table, batch, rows, tj.sj_result, queries)
    assert all(entry.shards[rid].base_id != b for rid, b in bases.items())   # compacted
    assert all(r.continues is not None for r in entry.shards.values())       # cut as before: continued


def test_zones_compacted_at_their_cuts_keep_the_brute_force(spark, monkeypatch):
    """A zoned range group's zones get new bases as their logs grow, at the same cut points (so the workers'
    cached zones go on): every change of a subscription's MIN is notified with the recomputed value, and
    ``result()`` is the recomputed MIN at the end."""
    import test_zones_engine as tz
    from sparksub.control import zones

    monkeypatch.setattr(zones, "ZONE_COMPACTION_ROWS", 8)
    monkeypatch.setattr(zones, "ZONE_IMBALANCE", 1e9)   # keep the cuts whatever the workload's skew
    rows, updates = tz.workload(23, n_batches=3)
    rnd = random.Random(4)
    subs = {f"s{i}": tuple(sorted((float(rnd.randint(-2, 32)), float(rnd.randint(-2, 32))))) for i in range(20)}
    _, e = tz.engines(spark, rows, subs, False, zones=2)
    state = dict(rows)
    cuts = None
    for n, batch in enumerate(updates):
        got = e.publish("stock", batch).collect()
        zs = next(iter(e._zone_states.values()))
        cuts = cuts or list(zs.cuts)
        before = dict(state)
        tz.apply_rows(state, batch)
        notified = {}
        for r in sorted((r for r in got if r.op not in ("rejected", "error")), key=lambda r: r.seq):
            notified[r.subscription_id] = r.value
        for s, (lo, hi) in subs.items():
            want = tz.oracle(state, lo, hi, False)
            if want != tz.oracle(before, lo, hi, False):
                assert notified.get(s, "none") == want, (n, s)
    for s, (lo, hi) in subs.items():
        assert e.result(s) == tz.oracle(state, lo, hi, False), s
    assert zs.cuts == cuts and all(r.continues is not None for r in zs.zones)   # compacted at the same cuts
