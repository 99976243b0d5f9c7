"""The same code on a real cluster: a ``local-cluster`` master starts separate executor JVMs and Python
workers, so nothing may rely on driver-process state leaking into tasks. Runs in a subprocess (one
SparkSession per process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# run once (.ci/run's first pass, with the extension): what this test is about is separate executors, and the
# second pass covers the engine without the extension on local[2]
pytestmark = [pytest.mark.spark, pytest.mark.catalyst_independent]

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from sparksub import Engine, spark_session
    spark = spark_session("local-cluster[2,1,1024]", "sparksub-cluster-test",
                          **{"spark.executorEnv.PYSPARK_PYTHON": sys.executable})
    def run(**settings):
        e = Engine(spark)
        for name, value in settings.items():
            setattr(e, name, value)
        e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
        e.load("stock", {"symbol": ["t2", "t3", "t4", "t5", "t6", "t8"], "risk": [20., 30., 40., 50., 70., 100.],
                         "per": [3., 8., 12., 5., 6., 2.]})
        e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                         {"id": ["s1", "s2", "s3", "s4"], "lo": [25., 35., 45., 0.], "hi": [55., 75., 60., 200.]})
        e.sql("CREATE SUBSCRIPTION top AS SELECT MAX(per) FROM stock WHERE risk >= 30")
        e.subscribe_many("SELECT SUM(per) FROM stock WHERE risk BETWEEN :lo AND :hi",    # RANGE_AGG: rows in zones
                         {"id": ["a1", "a2"], "lo": [25., 0.], "hi": [55., 200.]})
        e.subscribe_many("SELECT symbol, per FROM stock WHERE risk BETWEEN :lo AND :hi ORDER BY per LIMIT 2",
                         {"id": ["k1", "k2", "k3"], "lo": [0., 35., 60.], "hi": [60., 200., 65.]})
        out, tops, sums = [], [], []
        for update in ({"symbol": "t5", "risk": 50., "per": 9.}, {"symbol": "t4", "risk": 40., "per": 4.},
                       {"symbol": "t3", "risk": 65., "per": 1.}):
            rows = e.publish("stock", [update]).collect()
            out.append(sorted((r.subscription_id, r.value) for r in rows if r.subscription_id[0] not in "ka"))
            sums.append(sorted((r.subscription_id, r.value) for r in rows if r.subscription_id.startswith("a")))
            tops.append(sorted((r.subscription_id, r.op, r.item_key, r.value) for r in rows
                               if r.subscription_id.startswith("k")))
        msgs = e.publish("stock", [{"symbol": "t6", "_op": "delete"}], mode="reformulated")
        delivered = e.deliver(msgs).collect()
        out.append(sorted((r.subscription_id, r.value) for r in delivered if r.subscription_id[0] not in "ka"))
        sums.append(sorted((r.subscription_id, r.value) for r in delivered if r.subscription_id.startswith("a")))
        # a select-join over two tables, partitioned by the join value across the two executors
        e.sql("CREATE TABLE held (hid INT PRIMARY KEY, symbol STRING, qty DOUBLE)")
        e.sql("CREATE SUBSCRIPTION big AS SELECT * FROM held h JOIN stock s ON h.symbol = s.symbol "
              "WHERE h.qty >= 10 AND s.per <= 8")
        joins = []
        for table, update in (("held", {"hid": 1, "symbol": "t2", "qty": 50.}),
                              ("held", {"hid": 2, "symbol": "t8", "qty": 5.}),
                              ("stock", {"symbol": "t2", "risk": 20., "per": 9.})):
            joins.append(sorted((r.subscription_id, r.op, r.left_key, r.right_key)
                                for r in e.publish(table, [update]).collect() if r.subscription_id == "big"))
        layouts = sorted(str(v["layout"]) for v in e.stats().values() if isinstance(v, dict) and "layout" in v)
        return e, {"notes": out, "tops": tops, "joins": joins, "sums": sums, "layouts": layouts}

    # the workload with every split forced: X zones and their x1 shards, the range classes' and the select-join's
    # subscription shards, each replica in its own task on either executor; then whole (the engine spark.sql's
    # statements below reach is the session's last)
    _, split = run(range_zones=2, range_subscription_shards=2, join_subscription_shards=2)
    e, whole = run()
    # the Catalyst extension (shipped to the executors by spark.jars): a statement through spark.sql, our
    # node in Spark's plan, and the range-join rewrite equal to Spark's own plan
    from sparksub.jvm import bridge
    catalyst = {"loaded": bridge.loaded(spark)}
    if catalyst["loaded"]:
        spark.sql("CREATE SUBSCRIPTION viasql AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 10 AND 45")
        e.sql("CREATE SUBSCRIPTION direct AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 10 AND 45")
        catalyst["node"] = "SubscriptionGroupExec" in spark.sql("EXPLAIN SUBSCRIPTION viasql").collect()[0].plan
        catalyst["results"] = [e.result("viasql"), e.result("direct")]
        e.table("stock").createOrReplaceTempView("t")
        spark.createDataFrame([(1, 10.0, 45.0), (2, 0.0, 200.0), (3, 500.0, 600.0), (1, 60.0, 80.0)],
                              "id INT, lo DOUBLE, hi DOUBLE").createOrReplaceTempView("q")
        sql = "SELECT q.id, MIN(t.per), COUNT(*) FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi GROUP BY q.id"
        answers = []
        for on in ("true", "false"):
            spark.conf.set("spark.sparksub.rangeJoinRewrite", on)
            before = bridge.rewrites(spark)
            answers.append([sorted(map(list, spark.sql(sql).collect())), bridge.rewrites(spark) - before])
        catalyst["rewrite"] = answers
    print("RESULT " + json.dumps({**whole, "split": split, "catalyst": catalyst,
                                  "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()}))
""")


def test_publish_on_a_local_cluster(tmp_path):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    result = json.loads(line[len("RESULT "):])
    assert result["executors"] == 3  # the driver's block manager and two executors
    # Worked out by hand on the Figure 1 points (see test_engine_spark.FIG1):
    assert result["notes"] == [
        [["s1", 8.0], ["s2", 6.0], ["s3", 9.0]],      # t5: 5 -> 9, a bad update exposing 8, 6 and 9
        [["s1", 4.0], ["s2", 4.0], ["top", 9.0]],     # t4: 12 -> 4; the maximum falls to t5's 9
        [["s2", 1.0], ["s4", 1.0]],                   # t3 moves 30 -> 65 and drops to 1
        [],                                           # t6 deleted: no minimum or maximum changes
    ]
    # stock's catalog order puts it first: it is the join's left (R) table; t2's PER 3 <= 8 until it moves to 9
    assert result["joins"] == [[["big", "insert", "t2", "1"]], [], [["big", "delete", "t2", "1"]]]
    # top-2 by per, recomputed from the table after each update: each subscription's list, followed through its
    # enter / leave rows, is the recomputation's
    table = {"t2": (20., 3.), "t3": (30., 8.), "t4": (40., 12.), "t5": (50., 5.), "t6": (70., 6.), "t8": (100., 2.)}
    ranges = {"k1": (0., 60.), "k2": (35., 200.), "k3": (60., 65.)}

    def top2(lo, hi):
        return {k for _, k in sorted((per, k) for k, (risk, per) in table.items() if lo <= risk <= hi)[:2]}
    held = {sid: top2(*r) for sid, r in ranges.items()}
    for (key, risk, per), step in zip((("t5", 50., 9.), ("t4", 40., 4.), ("t3", 65., 1.)), result["tops"]):
        table[key] = (risk, per)
        for sid, op, item, _ in step:
            assert op in ("enter", "leave", "update"), op
            if op == "enter":
                held[sid].add(item)
            elif op == "leave":
                held[sid].discard(item)
        assert held == {sid: top2(*r) for sid, r in ranges.items()}, (key, step)
    assert all(result["tops"])   # each update changed some list
    # SUM(per) over [25, 55] and [0, 200], by hand: 25 and 36 as loaded
    assert result["sums"] == [[["a1", 29.0], ["a2", 40.0]], [["a1", 21.0], ["a2", 32.0]], [["a1", 13.0], ["a2", 25.0]],
                              [["a2", 19.0]]]
    assert "rows in 2 X zones × 2 subscription shards" in result["split"]["layouts"]   # the sums ran zoned
    # every split gives the whole groups' rows, row for row
    assert {k: result["split"][k] for k in ("notes", "tops", "joins", "sums")} == \
        {k: result[k] for k in ("notes", "tops", "joins", "sums")}
    catalyst = result["catalyst"]
    if os.environ.get("SPARKSUB_CATALYST", "auto").lower() not in ("0", "off", "false", "no"):
        assert catalyst["loaded"] and catalyst["node"]
        assert catalyst["results"][0] == catalyst["results"][1]
        (ours, fired), (sparks, fired_off) = catalyst["rewrite"]
        assert fired >= 1 and fired_off == 0 and ours == sparks and len(ours) == 2
