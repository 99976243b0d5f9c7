"""Subscriptions as data (issue 16 item 5): a running ``Engine.stream`` applies CREATE / DROP SUBSCRIPTION (and
``subscribe_many``) at its next micro-batch -- in an existing range group, the FILTER group, a join group, and a
range group that did not exist when the stream started -- and ``result()`` agrees with what the stream applied.

The oracle is a twin engine that ``publish``es the same rows with the same subscription changes at the same points
(the batch path, itself tested against brute force): each micro-batch's notifications must equal the twin's for
those rows.  ``result()`` after each micro-batch must equal a recompute from the rows (MIN / MAX over the range;
the join's result tuples).  A restart of the stream from its checkpoint after the changes keeps them."""
from __future__ import annotations

import json
import math
import os
import random
import warnings
from collections import Counter

import pytest

from sparksub import Engine, SparksubError
from sparksub.runtime import stream as spark_stream

# a running stream's plan is where the extension only adds its pass-through node: run once (tests/conftest.py)
pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

STREAM_SCHEMA = "k string, x int, y double, _op string, _seq bigint"
X_MAX, Y_MAX, B_MAX = 12, 40, 12
S_ROWS = {sk: {"b": float(sk % (B_MAX + 1)), "c": float((sk * 7) % 10)} for sk in range(10)}
MIN_PARAMS = {"id": ["m0", "m1", "m2", "m3"], "lo": [0, 3, 5, 9], "hi": [4, 8, 12, 12]}
JOINS = {"j0": (0.0, 20.0, 0.0, 9.0), "j1": (10.0, 40.0, 2.0, 6.0)}
JOIN_SQL = "SELECT * FROM t JOIN s ON t.x = s.b WHERE t.y BETWEEN {} AND {} AND s.c BETWEEN {} AND {}"

# the changes made between micro-batches: (before micro-batch n, statements)
ADDED = [
    "CREATE SUBSCRIPTION m_new AS SELECT MIN(y) FROM t WHERE x BETWEEN 2 AND 10",   # an existing range group
    "CREATE SUBSCRIPTION x_new AS SELECT MAX(y) FROM t WHERE x BETWEEN 1 AND 7",    # a new range group
    "CREATE SUBSCRIPTION f_new AS SELECT * FROM t WHERE y < 6",                     # the FILTER group
    "CREATE SUBSCRIPTION j_new AS " + JOIN_SQL.format(5, 35, 0, 9),                 # the join group
]
DROPPED = ["DROP SUBSCRIPTION m1", "DROP SUBSCRIPTION f0", "DROP SUBSCRIPTION j0"]
RANGES = {"m_new": (2, 10, min), "x_new": (1, 7, max)}


def workload(seed: int = 3, files: int = 4, per_file: int = 24):
    rnd = random.Random(seed)
    rows = {f"k{i:02d}": {"x": rnd.randint(0, X_MAX), "y": float(rnd.randint(0, Y_MAX))} for i in range(30)}
    out, live, nxt, seq = [], {k: dict(v) for k, v in rows.items()}, 30, 0
    for f in range(files):
        lines = []
        for j in range(per_file):
            r = rnd.random()
            if j == 3:   # a delete of a key the table does not hold: rejected, once
                row = {"k": f"gone{f}", "_op": "delete"}
            elif r < 0.15 and live:
                k = rnd.choice(sorted(live))
                row = {"k": k, "_op": "delete"}
                del live[k]
            elif r < 0.35:
                k = f"k{nxt}"
                nxt += 1
                row = {"k": k, "x": rnd.randint(0, X_MAX), "y": float(rnd.randint(0, Y_MAX))}
                live[k] = {"x": row["x"], "y": row["y"]}
            else:
                k = rnd.choice(sorted(live))
                row = {"k": k, "x": rnd.choice([live[k]["x"], rnd.randint(0, X_MAX)]), "y": float(rnd.randint(0, Y_MAX))}
                live[k] = {"x": row["x"], "y": row["y"]}
            lines.append(dict(row, _seq=seq))
            seq += 1
        # a new lowest and a new highest Y at x = 2 and 6: every MIN / MAX range holding them is notified
        for k, x, y in ((f"low{f}", 2, -1.0 - f), (f"high{f}", 6, 100.0 + f)):
            lines.append({"k": k, "x": x, "y": y, "_seq": seq})
            live[k] = {"x": x, "y": y}
            seq += 1
        out.append(lines)
    return rows, out


ROWS, FILES = workload()


def make_engine(spark) -> Engine:
    e = Engine(spark)
    e.join_partitions = 2
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x INT, y DOUBLE); "
          "CREATE TABLE s (sk BIGINT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    for table, key, rows in (("t", "k", ROWS), ("s", "sk", S_ROWS)):
        e.load(table, [{key: k, **v} for k, v in rows.items()])
    e.subscribe_many("SELECT MIN(y) FROM t WHERE x BETWEEN :lo AND :hi", MIN_PARAMS)
    e.sql("CREATE SUBSCRIPTION f0 AS SELECT * FROM t WHERE y > 30; "
          "CREATE SUBSCRIPTION f1 AS SELECT * FROM t WHERE x BETWEEN 4 AND 5; "
          + "; ".join(f"CREATE SUBSCRIPTION {name} AS " + JOIN_SQL.format(*b) for name, b in JOINS.items()))
    return e


# ---- comparing notifications -------------------------------------------------------------------------

def _cell(v):
    if isinstance(v, float):
        return None if math.isnan(v) else float(v)
    return v


def normalised(rows) -> Counter:
    """Notifications as a multiset of their non-null cells (the stream's output has the union of its paths'
    columns; ``reason`` words a rejection, checked apart)."""
    return Counter(tuple(sorted((k, _cell(v)) for k, v in r.items() if _cell(v) is not None and k != "reason"))
                   for r in rows)


def _publish_rows(lines):
    return [{k: v for k, v in row.items() if k != "_seq"} for row in lines]


# ---- recomputing results from the rows ---------------------------------------------------------------

def table_rows(files_applied: int) -> dict:
    rows = {k: dict(v) for k, v in ROWS.items()}
    for lines in FILES[:files_applied]:
        for row in lines:
            if row.get("_op") == "delete":
                rows.pop(row["k"], None)
            else:
                rows[row["k"]] = {"x": row["x"], "y": row["y"]}
    return rows


def range_result(rows, lo, hi, pick):
    ys = [r["y"] for r in rows.values() if lo <= r["x"] <= hi and r["y"] is not None]
    return pick(ys) if ys else None


def join_result(rows, bounds) -> set:
    a_lo, a_hi, c_lo, c_hi = bounds
    return {(k, sk) for k, r in rows.items() for sk, s in S_ROWS.items()
            if r["x"] == s["b"] and a_lo <= r["y"] <= a_hi and c_lo <= s["c"] <= c_hi}


def check_results(engine, files_applied: int, live: set) -> None:
    rows = table_rows(files_applied)
    mins = {sid: (lo, hi, min) for sid, lo, hi in zip(MIN_PARAMS["id"], MIN_PARAMS["lo"], MIN_PARAMS["hi"])}
    for sid, (lo, hi, pick) in {**mins, **RANGES}.items():
        if sid in live:
            assert engine.result(sid) == range_result(rows, lo, hi, pick), (sid, files_applied)
    joins = {**JOINS, "j_new": (5.0, 35.0, 0.0, 9.0)}
    for sid, bounds in joins.items():
        if sid in live:
            got = {(r["k"], r["sk"]) for r in engine.result(sid)}
            assert got == join_result(rows, bounds), (sid, files_applied)


# ---- the run ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("stream_subs")
    src_dir, out_dir, ck, tmp = (str(base / n) for n in ("in", "out", "ck", "tmp"))
    for d in (src_dir, tmp):
        os.makedirs(d)
    engine, twin = make_engine(spark), make_engine(spark)
    out = {"batches": [], "twin": [], "results": []}
    live = set(MIN_PARAMS["id"]) | {"f0", "f1"} | set(JOINS)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    query = None

    def start(df):
        return (df.writeStream.format("parquet").option("path", out_dir).option("checkpointLocation", ck)
                .outputMode("append").start())

    def micro_batch(f):
        path = os.path.join(tmp, f".f{f}")
        with open(path, "w") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in FILES[f])
        os.rename(path, os.path.join(src_dir, f"part-{f:02d}.json"))
        query.processAllAvailable()
        seqs = {row["_seq"] for row in FILES[f]}
        got = [r.asDict() for r in spark.read.parquet(out_dir).collect()]
        out["batches"].append([r for r in got if r["seq"] in seqs])
        out["twin"].append([r.asDict() for r in twin.publish("t", _publish_rows(FILES[f])).collect()])
        check_results(engine, f + 1, live)   # in the fixture: a failure names the micro-batch

    def both(statements):
        for text in statements:
            engine.sql(text)
            twin.sql(text)

    try:
        src = spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(src_dir)
        df = engine.stream("t", src)
        query = start(df)
        micro_batch(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            both(ADDED)
            live |= {"m_new", "x_new", "f_new", "j_new"}
            # a top-k group: its items are columns the stream's output lacks -- a new stream hosts it
            both(["CREATE SUBSCRIPTION k_new AS SELECT k, y FROM t WHERE x BETWEEN 0 AND 12 ORDER BY y LIMIT 2"])
        out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        twin.unsubscribe("k_new")   # (the stream does not notify it: the twin neither)
        micro_batch(1)
        both(DROPPED)
        live -= {"m1", "f0", "j0"}
        micro_batch(2)
        query.stop()
        query = start(df)   # the same stream restarted from its checkpoint: the changes are kept
        micro_batch(3)
        out["stats"] = spark_stream.stream_stats(df)
    finally:
        if query is not None:
            query.stop()
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    return out


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_micro_batch_equals_publish_with_the_same_changes(run, n):
    got, want = run["batches"][n], run["twin"][n]
    assert normalised(got) == normalised(want)
    ids = Counter(r["subscription_id"] for r in got if r["subscription_id"])
    if n >= 1:   # what the changes added notifies, what they dropped does not
        assert {"m_new", "x_new", "f_new", "j_new"} <= set(ids), ids
    if n >= 2:
        assert not {"m1", "f0", "j0"} & set(ids), ids
    assert sum(r["op"] == spark_stream.REJECTED for r in got) == 1   # the unknown key, once


def test_changes_were_applied_not_restarted(run):
    stats = run["stats"]
    assert stats["groups_added"] >= 1            # the MAX group joined the running range operator
    assert stats["subscription_changes"] >= 3    # the MIN group, the join partitions (ADDED, DROPPED)
    assert any("k_new" in w or "range_topk" in w for w in run["warnings"]), run["warnings"]


def test_event_query_change_refused_while_its_stream_runs(spark, tmp_path):
    e = Engine(spark)
    e.sql("CREATE TABLE ev (sym STRING, price DOUBLE)")
    e.sql("CREATE EVENT QUERY up AS SELECT * FROM ev NEXT{$2.price > $1.price} ev")
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    src = spark.readStream.schema("sym string, price double, t0 bigint, t1 bigint").json(str(src_dir))
    df = e.stream("ev", src)
    query = df.writeStream.format("memory").queryName("ev_subs").outputMode("append").start()
    try:
        (src_dir / "a.json").write_text(json.dumps({"sym": "a", "price": 11.0, "t0": 1, "t1": 1}) + "\n")
        query.processAllAvailable()
        with pytest.raises(SparksubError, match="is running the event queries"):
            e.sql("CREATE EVENT QUERY down AS SELECT * FROM ev NEXT{$2.price < $1.price} ev")
        assert e.event_queries() == ["up"]   # nothing changed
    finally:
        query.stop()
    e.sql("CREATE EVENT QUERY down AS SELECT * FROM ev NEXT{$2.price < $1.price} ev")   # stopped: allowed
    assert e.event_queries() == ["up", "down"]
