"""FILTER subscriptions through the engine and Spark: matches equal a brute-force evaluation, on keyed
tables (each upsert is an event) and on append-only streams, beside range-min groups on one table."""
from __future__ import annotations

import random

import pytest

from sparksub import Engine, UnsupportedSubscription

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]   # the extension wraps publish only


def test_filters_on_an_event_stream_equal_brute_force(spark):
    rnd = random.Random(5)
    e = Engine(spark)
    e.filter_shard_size = 16  # 43 subscriptions: split into default-parallelism (2) shards, events to both
    e.sql("CREATE TABLE trades (name STRING, price DOUBLE, volume BIGINT)")
    e.sql("CREATE SUBSCRIPTION ibm AS SELECT * FROM trades WHERE name = 'IBM' AND price > 50")
    e.sql("CREATE SUBSCRIPTION big AS SELECT name, volume FROM trades WHERE volume >= 9000 OR name IN ('MSFT', 'ORCL')")
    e.sql("CREATE SUBSCRIPTION nulls AS SELECT * FROM trades WHERE price IS NULL")
    names = ["IBM", "MSFT", "ORCL", "SAP"]
    params = {"id": [f"p{i}" for i in range(40)], "n": [rnd.choice(names) for _ in range(40)],
              "lo": [rnd.randint(0, 80) for _ in range(40)]}
    params["hi"] = [lo + rnd.randint(0, 40) for lo in params["lo"]]
    e.subscribe_many("SELECT * FROM trades WHERE name = :n AND price BETWEEN :lo AND :hi", params)
    events = [{"name": rnd.choice(names), "price": None if rnd.random() < 0.1 else float(rnd.randint(0, 120)),
               "volume": rnd.randint(0, 10_000)} for _ in range(200)]
    out = e.publish("trades", events).collect()

    def subs(ev):
        hit = []
        if ev["name"] == "IBM" and ev["price"] is not None and ev["price"] > 50:
            hit.append("ibm")
        if ev["volume"] >= 9000 or ev["name"] in ("MSFT", "ORCL"):
            hit.append("big")
        if ev["price"] is None:
            hit.append("nulls")
        for i, n, lo, hi in zip(params["id"], params["n"], params["lo"], params["hi"]):
            if ev["name"] == n and ev["price"] is not None and lo <= ev["price"] <= hi:
                hit.append(i)
        return hit

    want = sorted((n, s) for n, ev in enumerate(events) for s in subs(ev))
    assert len(e._groups[("FILTER", "trades")].shards) == 2
    assert sorted((r.seq, r.subscription_id) for r in out) == want
    for r in out:
        ev = events[r.seq]
        assert r.op == "match" and r.name == ev["name"] and r.volume == ev["volume"]
        assert r.price == (None if r.subscription_id == "big" else ev["price"])  # big projects name, volume
    assert e.result("ibm") is None
    [bad] = e.publish("trades", [{"name": "IBM", "price": 1.0, "volume": 1, "_op": "delete"}]).collect()
    assert (bad.op, bad.reason) == ("rejected", "'trades' is an append-only stream: no deletes")
    with pytest.raises(UnsupportedSubscription, match="only FILTER"):
        e.sql("CREATE SUBSCRIPTION m AS SELECT MIN(price) FROM trades WHERE volume BETWEEN 1 AND 2")
    assert "Class: FILTER" in e.explain("ibm") and "MapInArrow" in e.explain("ibm")


def test_filter_and_range_min_groups_share_a_publish(spark):
    e = Engine(spark)
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", [{"symbol": "a", "risk": 10.0, "per": 5.0}, {"symbol": "b", "risk": 20.0, "per": 7.0}])
    e.sql("CREATE SUBSCRIPTION lowper AS SELECT * FROM stock WHERE per < 3")
    e.sql("CREATE SUBSCRIPTION m AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 0 AND 15")
    out = e.publish("stock", [{"symbol": "a", "risk": 10.0, "per": 2.0}, {"symbol": "b", "_op": "delete"},
                              {"symbol": "c", "risk": 50.0, "per": 1.0}]).collect()
    got = sorted((r.seq, r.subscription_id, r.op, r.value, r.symbol) for r in out)
    assert got == [(0, "lowper", "match", None, "a"), (0, "m", "update", 2.0, None),
                   (2, "lowper", "match", None, "c")]


def test_filters_on_structured_streaming_equal_brute_force(spark, tmp_path):
    """stream() serves FILTER groups too: each micro-batch is matched statelessly on every shard."""
    import json
    rnd = random.Random(11)
    e = Engine(spark)
    e.filter_shard_size = 8
    e.sql("CREATE TABLE ticks (name STRING, price DOUBLE)")
    names = ["IBM", "MSFT", "SAP"]
    params = {"id": [f"q{i}" for i in range(20)], "n": [rnd.choice(names) for _ in range(20)],
              "lo": [float(rnd.randint(0, 60)) for _ in range(20)]}
    e.subscribe_many("SELECT * FROM ticks WHERE name = :n AND price >= :lo", params)
    e.sql("CREATE SUBSCRIPTION cheap AS SELECT name FROM ticks WHERE price < 10 OR name IS NULL")
    src = tmp_path / "in"
    src.mkdir()
    events, seq = [], 0
    for f in range(3):                                   # three files: three micro-batches
        rows = []
        for _ in range(30):
            ev = {"name": rnd.choice(names + [None]), "price": float(rnd.randint(0, 100)), "_seq": seq}
            rows.append(ev)
            events.append(ev)
            seq += 1
        rows.append({"name": "IBM", "price": 1.0, "_seq": 10_000 + f, "_op": "bogus"})
        (src / f"{f}.json").write_text("\n".join(json.dumps(r) for r in rows))
    df = spark.readStream.schema("name string, price double, _seq long, _op string") \
        .option("maxFilesPerTrigger", 1).json(str(src))
    q = (e.stream("ticks", df).writeStream.format("memory").queryName("filter_stream_out")
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    out = spark.table("filter_stream_out").collect()

    def hits(ev):
        h = [i for i, n, lo in zip(params["id"], params["n"], params["lo"])
             if ev["name"] == n and ev["price"] >= lo]
        return h + (["cheap"] if ev["price"] < 10 or ev["name"] is None else [])

    want = sorted((ev["_seq"], s) for ev in events for s in hits(ev))
    assert sorted((r.seq, r.subscription_id) for r in out if r.op == "match") == want
    rejected = sorted((r.seq, r.reason) for r in out if r.op == "rejected")
    assert rejected == [(10_000 + f, "_op must be 'upsert' or 'delete', got 'bogus'") for f in range(3)]
    for r in out:
        if r.op == "match":
            assert r.name == events[r.seq]["name"]


def test_a_failing_stream_shard_s_error_row_names_its_group(spark, tmp_path):
    """stream()'s FILTER shards, one shard's state corrupted: its error row's group_id is the group's (what a user
    filters on, as in a publish), its reason names the shard; the other shard's matches still come out."""
    import json

    from tests.test_engine_spark import assert_one_error_row_names_the_group, engine_with_a_broken_filter_shard
    e, entry, broken_id = engine_with_a_broken_filter_shard(spark)
    src = tmp_path / "in"
    src.mkdir()
    (src / "0.json").write_text(json.dumps({"name": "IBM", "price": 10.0, "_seq": 1}))
    df = spark.readStream.schema("name string, price double, _seq long").json(str(src))
    q = (e.stream("trades", df).writeStream.format("memory").queryName("filter_stream_broken_shard")
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert_one_error_row_names_the_group(spark.table("filter_stream_broken_shard").collect(), entry.group_id,
                                         broken_id)
