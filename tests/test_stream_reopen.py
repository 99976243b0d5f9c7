"""A stream restarted from its checkpoint by an engine reopened on the durable directory (issue 16 item 6;
``control/streaming.py`` ``_adopt_streams``, ``runtime/stream_control.py`` ``followed.json``).

The engine takes in the rows its streams applied only when something reads the table (``_follow_streams``).  An
engine closed (or killed) before that left them in the stream's ``applied/`` files, and the engine reopened on the
directory did not know them: its ``result()`` answered from the rows before the stream, and a stream restarted from
the checkpoint started its new subscription shards from those stale rows -- wrong notifications, found by running a
reopened engine beside an uninterrupted one.  Now each stream's directory says its table and the last micro-batch the
engine took in, and a reopened engine takes in the rest before anything reads the table.

Through Spark, over the same files: an uninterrupted engine's stream (the groups whole), and a durable engine's
stream (top-k, DISTINCT and SUM in 2 subscription shards) stopped after a micro-batch, the engine closed without
a checkpoint (the next open replays its journal, as after a kill) and reopened with the groups' rows now in 3 X zones
(the reopened stream's other split: new state partitions, seeded from the engine's rows), subscriptions added, the
stream restarted from its checkpoint for two more.  The restarted lineage's rows equal the uninterrupted stream's,
row for row; every view equals a brute force after every seq; ``result()`` of the reopened engine equals the brute
force over the table.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparksub import Engine
from sparksub.runtime import stream as spark_stream

sys.path.insert(0, str(Path(__file__).parent))   # the two-stage classes' stream test: its feeding and oracle
from test_stream_range_shards import two_shuffle_partitions  # noqa: E402
from test_stream_range_shards_classes import (  # noqa: E402
    DISTINCT,
    STREAM_SCHEMA,
    SUM,
    TOPK,
    apply_update,
    change,
    check_views,
    feed,
    gen_batch,
    rows_of,
    setup,
    value,
)


def durable(spark, path: Path, zones: int) -> Engine:
    e = Engine(spark, path=str(path))
    e.range_subscription_shards, e.range_zones = 2, zones
    return e


def start(e: Engine, spark, src: str, out: str, checkpoint: str):
    df = e.stream("t", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(src))
    query = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .outputMode("append").start())
    return df, query


def result_value(kind: str, got):
    """``Engine.result`` as the oracle's ``value`` gives it: top-k keys in rank order, the set of tags, the sum."""
    if kind == "topk":
        return [r["k"] for r in got]
    if kind == "distinct":
        return set(got)
    return got


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """A micro-batch through the first engine's stream, two through the reopened engine's; the uninterrupted
    engine's stream beside them throughout."""
    src, tmp, outs = (str(tmp_path_factory.mktemp(f"reopen_{n}")) for n in ("in", "tmp", "out"))
    path = tmp_path_factory.mktemp("reopen_engine") / "e"
    whole, rows, subs, rnd = setup(spark, 0)
    first = durable(spark, path, 0)
    # the same table and subscriptions as the uninterrupted engine's
    first.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE, tag STRING)")
    first.load("t", [{"k": k, "x": x, "y": y, "tag": tag} for k, (x, y, tag) in rows.items()])
    for letter, sql in (("t", TOPK), ("d", DISTINCT), ("a", SUM)):
        ids = sorted((s for s in subs if s[0] == letter), key=lambda s: int(s[1:]))
        params = {"id": ids, "lo": [subs[s][1] for s in ids], "hi": [subs[s][2] for s in ids]}
        first.subscribe_many(sql, {**params, "k": [subs[s][3] for s in ids]} if letter == "t" else params)
    got = {"batches": [], "whole": []}
    checkpoint = first.checkpoint_location("t_stream")
    with two_shuffle_partitions(spark):
        queries = {}
        try:
            _, queries["whole"] = start(whole, spark, src, f"{outs}/whole", f"{outs}/whole_ck")
            _, queries["durable"] = start(first, spark, src, f"{outs}/durable", checkpoint)
            for f in range(3):
                if f == 1:   # stopped, closed as after a kill (the journal replayed at the next open), reopened
                    queries.pop("durable").stop()
                    first.close(checkpoint=False)
                    reopened = durable(spark, path, 3)
                    for e, s in ((reopened, dict(subs)), (whole, subs)):   # (the oracle's: the last)
                        change(e, s, 1)
                    df, queries["durable"] = start(reopened, spark, src, f"{outs}/durable", checkpoint)
                batch, seq0 = gen_batch(rnd, f, rows), 1000 * (f + 1)
                out = feed(spark, (src, tmp, f"part-{f}.json"), batch, seq0, queries,
                           {"whole": f"{outs}/whole", "durable": f"{outs}/durable"})
                got["batches"].append((dict(rows), dict(subs), batch, seq0, out["durable"]))
                got["whole"].append(out["whole"])
                for u in batch:
                    apply_update(rows, u)
            got["stats"] = spark_stream.stream_stats(df)
            got["rows"], got["subs"] = rows, subs
            got["results"] = {s: reopened.result(s) for s in subs}
        finally:
            for q in queries.values():
                q.stop()
    return got


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_the_restarted_stream_goes_on_as_an_uninterrupted_one(run):
    assert run["stats"]["zones"] > 0   # (the reopened engine's stream split the rows: new partitions, seeded)
    for f, ((rows, subs, batch, seq0, out), whole) in enumerate(zip(run["batches"], run["whole"])):
        assert rows_of(out) == rows_of(whole), f
        notes = [r for r in out if r["op"] != "rejected"]
        rejected = check_views(dict(rows), subs, batch, seq0, notes)
        assert sorted(r["seq"] for r in out if r["op"] == "rejected") == sorted(rejected), f


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_the_reopened_engine_has_what_both_streams_applied(run):
    rows = run["rows"]
    for s, (kind, lo, hi, k) in run["subs"].items():
        assert result_value(kind, run["results"][s]) == value(rows, kind, lo, hi, k), s
