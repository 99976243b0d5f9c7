"""Engine.stream for RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG and the 2-d BOX_MIN / BOX_TOPK (beside a
RANGE_MIN group on the same table): on Structured Streaming the notifications must equal the pure group operators' on the same
valid rows in the same order (unicast rows; reformulated messages, Paint-Batch per micro-batch for
top-k), malformed rows come out once as 'rejected', and under PySpark's TwsTester every path to the
cached index (seed, cache hit, catch-up from the log ring, rebuild from the state store) agrees --
including a DISTINCT over a string column, whose values live in the state as text."""
from __future__ import annotations

import json
import math
import os
import pickle
import random
from collections import Counter

import pyarrow as pa
import pytest

from sparksub import Engine
from sparksub.runtime import stream as spark_stream
from sparksub.operators.shared.schemas import DELETE, UPSERT

# a running stream's plan is where the extension only adds its pass-through node: run once (tests/conftest.py)
pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

N_FILES = 4
STREAM_SCHEMA = "k string, x string, y double, c string, z int, _op string"
X_MAX, Y_MAX = 20, 6  # small domains: ties in X and Y, repeated DISTINCT values


def workload(seed: int = 5):
    rnd = random.Random(seed)
    rows = {f"k{i:02d}": (rnd.randint(0, X_MAX), float(rnd.randint(0, Y_MAX)), rnd.choice("abcd"),
                          rnd.randint(0, 9)) for i in range(40)}
    files, live, nxt = [], dict(rows), 40
    for f in range(N_FILES):
        lines = []
        bad_at = set(rnd.sample(range(25), 2))
        for j in range(25):
            if j in bad_at:
                if rnd.random() < 0.5:
                    lines.append(({"k": f"nope{f}{j}", "_op": "delete"}, "unknown key"))
                else:
                    lines.append(({"k": rnd.choice(sorted(live)), "x": "zz", "y": 1.0, "c": "a"}, "cannot read"))
                continue
            r = rnd.random()
            if r < 0.15 and live:
                k = rnd.choice(sorted(live))
                row = {"k": k, "_op": "delete"}
            elif r < 0.3:
                k = f"k{nxt}"
                nxt += 1
                row = {"k": k, "x": rnd.randint(0, X_MAX), "y": float(rnd.randint(0, Y_MAX)), "c": rnd.choice("abcde"),
                       "z": rnd.randint(0, 9)}
            elif r < 0.38:  # a null C: the row leaves the DISTINCT ranges only
                k = rnd.choice(sorted(live))
                row = {"k": k, "x": live[k][0], "y": live[k][1], "c": None, "z": live[k][3]}
            else:  # a Y change, often with an X move and a new C
                k = rnd.choice(sorted(live))
                moved = rnd.random() < 0.4
                row = {"k": k, "x": rnd.randint(0, X_MAX) if moved else live[k][0],
                       "y": float(rnd.randint(0, Y_MAX)), "c": rnd.choice("abcde") if moved else live[k][2],
                       "z": rnd.randint(0, 9) if moved else live[k][3]}
            if row.get("_op") == "delete":
                del live[k]
            else:
                live[k] = (row["x"], row["y"], row["c"], row["z"])
            lines.append((row, None))
        files.append(lines)
    return rows, files


ROWS, FILES = workload()


def make_engine(spark) -> Engine:
    rnd = random.Random(9)
    e = Engine(spark)
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x INT, y DOUBLE, c STRING, z INT)")
    e.load("t", [{"k": k, "x": x, "y": y, "c": c, "z": z} for k, (x, y, c, z) in ROWS.items()])
    lo = [rnd.randint(-1, X_MAX) for _ in range(12)]
    e.subscribe_many("SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y LIMIT :k",
                     {"id": [f"top{i}" for i in range(12)], "lo": lo, "hi": [a + rnd.randint(0, 8) for a in lo],
                      "k": [rnd.randint(1, 4) for _ in lo]})
    e.sql("CREATE SUBSCRIPTION top_desc AS SELECT * FROM t WHERE x BETWEEN 3 AND 15 ORDER BY y DESC LIMIT 3")
    e.subscribe_many("SELECT DISTINCT c FROM t WHERE x BETWEEN :lo AND :hi",
                     {"id": [f"dc{i}" for i in range(8)], "lo": lo[:8], "hi": [a + 6 for a in lo[:8]]})
    e.sql("CREATE SUBSCRIPTION dy AS SELECT DISTINCT y FROM t WHERE x <= 12")
    e.sql("CREATE SUBSCRIPTION n AS SELECT COUNT(*) FROM t WHERE x BETWEEN 4 AND 14")
    e.subscribe_many("SELECT SUM(y) FROM t WHERE x BETWEEN :lo AND :hi",
                     {"id": [f"s{i}" for i in range(6)], "lo": lo[:6], "hi": [a + 5 for a in lo[:6]]})
    e.sql("CREATE SUBSCRIPTION m AS SELECT MIN(y) FROM t WHERE x BETWEEN 2 AND 3")
    e.subscribe_many("SELECT MAX(y) FROM t WHERE x BETWEEN :lo AND :hi AND z BETWEEN :zlo AND :zhi",
                     {"id": [f"bm{i}" for i in range(6)], "lo": lo[:6], "hi": [a + 6 for a in lo[:6]],
                      "zlo": [i for i in range(6)], "zhi": [i + 3 for i in range(6)]})
    e.sql("CREATE SUBSCRIPTION bt AS SELECT * FROM t WHERE x BETWEEN 2 AND 12 AND z <= 5 ORDER BY y LIMIT 2")
    return e


def seq_of(file_no: int, line: int) -> int:
    return (file_no << 32) + line  # what the derived order gives line ``line`` of micro-batch ``file_no``


def expected(mode: str):
    """The pure group operators (built from the engine's snapshots, fed through the engine's own batch
    shaping) on the valid rows of every file, as a multiset; and the rejected rows' reasons by seq."""
    e = make_engine(None)
    state = e._tables["t"]
    groups = {entry.group_id: (entry, e._snapshot(state, entry).build()) for entry in e._groups.values()}
    notes, rejected = Counter(), {}
    for f, lines in enumerate(FILES):
        valid = [(j, row) for j, (row, bad) in enumerate(lines) if bad is None]
        rejected.update({seq_of(f, j): bad for j, (row, bad) in enumerate(lines) if bad is not None})
        batch = pa.table({
            "k": pa.array([r["k"] for _, r in valid], pa.string()),
            "x": pa.array([r.get("x") for _, r in valid], pa.int64()),
            "y": pa.array([r.get("y") for _, r in valid], pa.float64()),
            "c": pa.array([r.get("c") for _, r in valid], pa.string()),
            "z": pa.array([r.get("z") for _, r in valid], pa.int64()),
            "op": pa.array([DELETE if r.get("_op") == "delete" else UPSERT for _, r in valid], pa.int8()),
        })
        seqs = [seq_of(f, j) for j, _ in valid]
        for entry, group in groups.values():
            out = group.apply(entry.family.group_batch(entry.physical, state.definition, batch, seqs), mode)
            notes.update(_key(r) for r in out.to_pylist())
    return notes, rejected, len(groups)


def _key(row: dict) -> tuple:
    """A notification as a hashable tuple: null columns dropped (the stream's output has the union of
    the groups' columns), NaN as null."""
    out = []
    for k, v in row.items():
        if k == "reason" or v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out.append((k, float(v) if isinstance(v, float) else v))
    return tuple(sorted(out))


def _notes(rows):
    return Counter(_key(r) for r in rows if r["op"] != spark_stream.REJECTED)


def _check_rejected(rows, want):
    got = {r["seq"]: r["reason"] for r in rows if r["op"] == spark_stream.REJECTED}
    assert len(got) == sum(r["op"] == spark_stream.REJECTED for r in rows)  # each once, not once per group
    assert set(got) == set(want)
    for seq, reason in got.items():
        assert want[seq] in reason, (seq, reason)


def drop_file(directory: str, file_no: int, tmp: str) -> None:
    path = os.path.join(tmp, f".f{file_no}.tmp")
    with open(path, "w") as fh:
        for row, _ in FILES[file_no]:
            fh.write(json.dumps(row) + "\n")
    os.rename(path, os.path.join(directory, f"part-{file_no:02d}.json"))


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """A unicast and a reformulated stream side by side, one file per micro-batch."""
    base = tmp_path_factory.mktemp("stream_rc")
    out, live, dfs = {}, {}, {}
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    os.makedirs(base / "tmp")
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        for mode in ("unicast", "reformulated"):
            os.makedirs(base / f"in_{mode}")
            src = spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(str(base / f"in_{mode}"))
            dfs[mode] = make_engine(spark).stream("t", src, mode=mode)
            live[mode] = (dfs[mode].writeStream.format("parquet").option("path", str(base / f"out_{mode}"))
                          .option("checkpointLocation", str(base / f"ck_{mode}")).outputMode("append").start())
        for f in range(N_FILES):
            for mode, q in live.items():
                drop_file(str(base / f"in_{mode}"), f, str(base / "tmp"))
                if f == 0:   # one query's first micro-batch at a time (tests/test_stream.py: runs)
                    q.processAllAvailable()
            for q in live.values():
                q.processAllAvailable()
        out["plan"] = live["unicast"].lastProgress and dfs["unicast"]._jdf.queryExecution().toString()
    finally:
        for q in live.values():
            q.stop()
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    for mode in live:
        out[mode] = [r.asDict() for r in spark.read.parquet(str(base / f"out_{mode}")).collect()]
        out["stats_" + mode] = spark_stream.stream_stats(dfs[mode])
    return out


@pytest.mark.parametrize("mode", ["unicast", "reformulated"])
def test_stream_equals_pure_group_operators(runs, mode):
    want, want_rejected, n_groups = expected(mode)
    got = runs[mode]
    kinds = Counter(r["group_id"].split(":")[0] for r in got if r["op"] != spark_stream.REJECTED)
    # every class notified something, so each one's agreement below is tested
    assert {"range_topk", "range_distinct", "count", "sum", "range_min", "box_max", "box_topk"} <= set(kinds), kinds
    assert _notes(got) == want
    _check_rejected(got, want_rejected)
    stats = runs["stats_" + mode]
    assert stats["seeded"] == n_groups and stats["micro_batches"] == n_groups * N_FILES
    assert stats["notifications"] == sum(want.values())


def test_stream_plan_names_the_operator_families(runs):
    assert "box_min_and_box_topk_and_range_agg_and_range_distinct_and_range_min_and_range_topk_groups_stream" \
        in runs["plan"]


# ---- the stateful processor under TwsTester (no SparkSession): every path to the index agrees --------

class _Stats(Counter):
    def add(self, d):
        self.update(d)


def _frames(file_no: int, gspec) -> "object":
    """What the Spark side hands one group's operator for one file (SQL-level checks already made)."""
    import pandas as pd
    recs = []
    for j, (row, bad) in enumerate(FILES[file_no]):
        x = row.get("x")
        y = 0.0 if gspec.y is None else (None if gspec.text else row.get(gspec.y))
        recs.append({"key": row["k"], "x": float(x) if isinstance(x, int) else None, "y": y,
                     "t": row.get(gspec.y) if gspec.text else None,
                     "x2": float(row["z"]) if gspec.x2 and row.get("z") is not None else None,
                     "op": (row.get("_op") or "").lower() or None, "ord": j,
                     "reason": bad if bad not in (None, "unknown key") else None})
    return pd.DataFrame(recs)


@pytest.mark.parametrize("schedule", ["one worker", "two workers", "restarts"])
def test_operator_paths_agree(schedule):
    from pyspark.sql.streaming.tws_tester import TwsTester

    from sparksub.operators.shared.range_classes import with_range_class_columns
    from sparksub.operators.shared.schemas import publish_schema
    e = make_engine(None)
    state = e._tables["t"]
    groups = {}
    for entry in e._groups.values():
        x, y, y_is_text, x2 = entry.family.stream_columns(entry.physical, state.definition)
        groups[entry.group_id] = spark_stream.GroupSpec(
            entry.group_id, x, y, spark_stream._Deferred(pickle.dumps(e._snapshot(state, entry))), y_is_text, x2)
    assert any(g.text for g in groups.values())  # the string DISTINCT is among them
    stats = _Stats()
    schema = with_range_class_columns(publish_schema("unicast"), "unicast")
    spec = spark_stream.StreamSpec(e.uid, "s1", "t", "string", "unicast", schema, groups, min(groups), False, stats)
    tester = TwsTester(spark_stream._processor_class()(spec))
    workers = [{}, {}]
    saved = spark_stream._CACHE
    got = []
    try:
        for f in range(N_FILES):
            if schedule == "one worker":
                spark_stream._CACHE = workers[0]
            elif schedule == "two workers":  # 0 1 1 0: behind by one or two micro-batches
                spark_stream._CACHE = workers[[0, 1, 1, 0][f]]
            else:  # a fresh worker every other micro-batch: rebuild from the state store
                spark_stream._CACHE = {} if f % 2 else workers[0]
            for g in sorted(groups):
                got.extend(tester.testInPandas(g, _frames(f, groups[g])).to_dict("records"))
    finally:
        spark_stream._CACHE = saved
    want, want_rejected, n_groups = expected("unicast")
    assert _notes(got) == want
    _check_rejected(got, want_rejected)
    path = {"one worker": "cache_hits", "two workers": "caught_up", "restarts": "rebuilt"}[schedule]
    assert stats[path] >= n_groups, dict(stats)
    # the string DISTINCT keeps its values as text in the state store
    text_gid = next(g for g, s in groups.items() if s.text)
    final = {}
    for k, (x, y, c, z) in ROWS.items():
        final[k] = c
    for lines in FILES:
        for row, bad in lines:
            if bad is None:
                if row.get("_op") == "delete":
                    del final[row["k"]]
                else:
                    final[row["k"]] = row["c"]
    assert {k: t for (k,), (_, _, t, _) in tester.peekMapState("rows", text_gid).items()} == final
    box_gid = next(g for g, s in groups.items() if s.x2)  # and a box group its second attribute
    assert all(x2 is not None for (_, _, _, x2) in tester.peekMapState("rows", box_gid).values())
