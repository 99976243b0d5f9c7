"""Issue 15 item 6: FILTER and BAND_JOIN have no reformulated form; ``publish(..., mode='reformulated')`` and
``stream(..., mode='reformulated')`` must return their unicast rows beside the other groups' messages (never
drop them), and ``deliver`` must pass them through.  Oracle: the same updates published in unicast mode to a
twin engine -- their rows must be equal, column for column."""
from __future__ import annotations

import json
import random

import pytest

from sparksub import Engine

pytestmark = pytest.mark.spark

SUBS = {
    "f1": "SELECT rk, a FROM r WHERE a > 1",
    "f2": "SELECT * FROM r WHERE b IS NULL OR a = 0",
    "n1": "SELECT r.rk, s.sk, r.a AS ra FROM r JOIN s ON s.b - r.b BETWEEN 0 AND 1",
    "n2": "SELECT * FROM r JOIN s ON s.b - r.b BETWEEN -1 AND 0 WHERE r.a <= 2",
    "j1": "SELECT r.rk AS x, s.c FROM r JOIN s ON r.b = s.b",        # has messages
    "m1": "SELECT MIN(a) FROM r WHERE b BETWEEN 0 AND 2",             # has messages
}
UNICAST_ONLY = {"f1", "f2", "n1", "n2"}
#: the columns the rows of the unicast-only subscriptions carry (FILTER: the event; BAND_JOIN: the result
#: tuple's keys and selected columns)
CARRIED = ["subscription_id", "op", "seq", "group_id", "rk", "a", "b", "left_key", "right_key", "sk", "ra",
           "r.b", "s.b", "c"]


def engine(spark):
    e = Engine(spark)
    e.join_partitions = 2
    e.sql("CREATE TABLE r (rk BIGINT PRIMARY KEY, a DOUBLE, b DOUBLE)")
    e.sql("CREATE TABLE s (sk BIGINT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    e.load("s", [{"sk": k, "b": float(k % 4), "c": float(k)} for k in range(6)])
    for q, sql in SUBS.items():
        e.subscribe(q, sql)
    return e


def batches(seed=4, n=3):
    rnd = random.Random(seed)
    live, out = set(), []
    for _ in range(n):
        batch = []
        for _ in range(6):
            k = rnd.randint(0, 5)
            if k in live and rnd.random() < 0.2:
                batch.append({"rk": k, "_op": "delete"})
                live.discard(k)
            else:
                batch.append({"rk": k, "a": rnd.choice([None, 0.0, 1.0, 2.0, 3.0]),
                              "b": rnd.choice([None, 0.0, 1.0, 2.0, 3.0])})
                live.add(k)
        out.append(batch)
    return out


def unicast_only(rows) -> list:
    def v(r, c):
        x = r.get(c)
        return None if x is None or x != x else x
    return sorted((tuple(v(r, c) for c in CARRIED) for r in rows if r.get("subscription_id") in UNICAST_ONLY),
                  key=repr)


def test_reformulated_publish_returns_filter_and_band_join_rows(spark):
    uni, ref = engine(spark), engine(spark)
    for batch in batches():
        want = unicast_only([r.asDict() for r in uni.publish("r", batch).collect()])
        msgs = ref.publish("r", batch, mode="reformulated")
        got = [r.asDict() for r in msgs.collect()]
        assert want and unicast_only(got) == want
        # the other groups still send messages (no subscription_id), and deliver passes the unicast rows through
        assert any(r["subscription_id"] is None for r in got)
        assert unicast_only([r.asDict() for r in ref.deliver(msgs).collect()]) == want
    for q in ("n1", "n2"):
        assert ref.result(q) == uni.result(q)


@pytest.mark.catalyst_passthrough   # a stream: the extension only adds its pass-through node (run once)
def test_reformulated_stream_returns_filter_and_band_join_rows(spark, tmp_path):
    rows = [dict(u, _seq=i) for i, u in enumerate(u for b in batches(seed=8, n=2) for u in b)]
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "part-0.json").write_text("".join(json.dumps(u) + "\n" for u in rows))
    outs = {}
    for mode in ("unicast", "reformulated"):
        e = engine(spark)
        src = spark.readStream.schema("rk bigint, a double, b double, _op string, _seq bigint").json(str(inp))
        q = (e.stream("r", src, mode=mode).writeStream.format("memory").queryName(f"h2_{mode}")
             .outputMode("append").start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        outs[mode] = [r.asDict() for r in spark.table(f"h2_{mode}").collect()]
    assert unicast_only(outs["unicast"]) and unicast_only(outs["reformulated"]) == unicast_only(outs["unicast"])
