"""``Engine.stream`` over RANGE_MIN / RANGE_MAX groups in two stages with their rows in X zones (issue 16 item 4;
``operators/range_min/zone_stream.py``; ``runtime/stream.py``, "a two-stage RANGE_AGG group's rows in X zones" and its
RANGE_MIN paragraph): stage 1 is Z state partitions ``<group>#r<i>``, each every row in its state store and its X
zone's rows in its A2B-tree, running DS-CN's round 1 (000 §2.3.2) over its part of the micro-batch; every x1
subscription shard gets the settled messages that can reach it and every zone's ``Round1``, runs round 2 for the
deferred steps and merges before S-UN.

Through Spark (``range_zones`` 3 and 0, both with 2 subscription shards, side by side over the same files, two
micro-batches): every subscription's view (its value before the micro-batch, each notification applied in seq order)
equals a brute-force MIN / MAX over the table after every seq -- upserts, deletes, X-moves across the cuts and back, a
key several times in one micro-batch, NULL X and Y, ties, rejected rows (each out once), ranges on the cuts, infinite,
empty --, subscriptions added and dropped while the stream runs; the zoned stream's rows equal the whole two-stage
group's row for row; a RANGE_MAX group zoned beside the RANGE_MIN one.  Without Spark:
tests/operators/test_range_min_zone_stream.py.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from sparksub import Engine
from sparksub.operators.shared.range_zones import zone_cuts
from sparksub.runtime import stream as spark_stream

sys.path.insert(0, str(Path(__file__).parent))   # the two-stage MIN stream's test: its updates, oracle and feeding
from test_stream_range_shards import (  # noqa: E402
    MAX_SQL,
    MIN_SQL,
    STREAM_SCHEMA,
    X_MAX,
    Y_MAX,
    change,
    check_views,
    gen_batch,
    ranges,
    subscribe,
    two_shuffle_partitions,
    valid,
    value,
)
from test_stream_range_shards_classes import feed, rows_of  # noqa: E402

SHARDS, ZONES = 2, 3


def start_rows() -> dict:
    rnd = random.Random(16)
    rows = {f"k{i:02d}": (float(rnd.randint(0, X_MAX)), float(rnd.randint(0, Y_MAX))) for i in range(40)}
    rows["kx"], rows["ky"] = (None, 1.0), (3.0, None)   # in no range, but deletable
    return rows


def cuts_of(rows: dict) -> tuple:
    return zone_cuts([float("nan") if x is None else x for x, _ in rows.values()], ZONES)


def setup(spark, zones: int):
    """An engine over t with a MIN and a MAX group in 2 subscription shards, their rows in ``zones`` X zones
    (``Engine.range_zones``; 0: whole), and the oracle's rows and subscriptions ``{id: (lo, hi, min|max)}``."""
    rnd = random.Random(7)
    e = Engine(spark)
    e.range_subscription_shards, e.range_zones = SHARDS, zones
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE)")
    rows = start_rows()
    e.load("t", [{"k": k, "x": x, "y": y} for k, (x, y) in rows.items()])
    mins, maxs = ranges(rnd, "m", 16), ranges(rnd, "M", 8)
    for c in cuts_of(rows):   # ranges on the cuts and across them
        mins.update({f"m_on{c:g}": (c, c), f"m_to{c:g}": (c - 1.0, c), f"m_from{c:g}": (c, c + 2.0)})
        maxs.update({f"M_on{c:g}": (c, c), f"M_across{c:g}": (c - 3.0, c + 3.0)})
    subscribe(e, MIN_SQL, mins)
    subscribe(e, MAX_SQL, maxs)
    subs = {**{i: (*b, min) for i, b in mins.items()}, **{i: (*b, max) for i, b in maxs.items()}}
    return e, rows, subs, rnd


def zone_batch(rnd: random.Random, f: int, rows: dict) -> list:
    """``gen_batch``'s micro-batch (an unknown-key delete, a ±inf row, NULL X / Y, deletes, new keys, X-moves, a key
    four times), X-moves across each cut and back, and a new extreme at a cut, moved across it, deleted (walks across
    the zones: round 2; an X-move's old Y)."""
    batch = gen_batch(rnd, f, rows)
    for i, c in enumerate(cuts_of(start_rows())):
        key = sorted(rows)[10 + i + f]
        batch += [{"k": key, "x": c - 1.0, "y": 2.0}, {"k": key, "x": c, "y": 3.0}, {"k": key, "x": c - 0.5, "y": 1.0}]
        # a new minimum on the cut, moved across it at the same Y (a range holding both X: no row, 000 §2.3), deleted
        batch += [{"k": f"low{f}_{i}", "x": c, "y": -1.0 - i}, {"k": f"high{f}_{i}", "x": c - 0.5, "y": 9.0 + i},
                  {"k": f"low{f}_{i}", "x": c - 0.5, "y": -1.0 - i}, {"k": f"low{f}_{i}", "_op": "delete"}]
    return batch


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """Two streams over the same files (rows in 3 X zones, whole); a subscription change before micro-batch 1."""
    src, tmp = (str(tmp_path_factory.mktemp(f"min_zones_{n}")) for n in ("in", "tmp"))
    engines = {n: setup(spark, n) for n in (ZONES, 0)}
    got = {"batches": [], "whole": [], "stats": []}
    queries, frames = {}, {}
    _, rows, subs, rnd = engines[ZONES]
    with two_shuffle_partitions(spark):
        try:
            for n, (e, *_) in engines.items():
                df = e.stream("t", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(src))
                out_dir, ck = (str(tmp_path_factory.mktemp(f"min_zones_{n}_{d}")) for d in ("out", "ck"))
                frames[n] = (df, out_dir)
                queries[n] = (df.writeStream.format("parquet").option("path", out_dir)
                              .option("checkpointLocation", ck).outputMode("append").start())
            for f in range(2):
                if f == 1:   # subscriptions added and dropped while the stream runs
                    for other, _, other_subs, _ in engines.values():
                        change(other, other_subs, 1)
                batch, seq0 = zone_batch(rnd, f, rows), 1000 * (f + 1)
                out = feed(spark, (src, tmp, f"part-{f}.json"), batch, seq0, queries,
                           {n: d for n, (_, d) in frames.items()})
                got["batches"].append((dict(rows), dict(subs), batch, seq0, out[ZONES]))
                got["whole"].append(out[0])
                got["stats"].append(spark_stream.stream_stats(frames[ZONES][0]))
                for u in batch:   # the oracle's table after the micro-batch
                    if valid(u, rows) and u.get("_op") == "delete":
                        del rows[u["k"]]
                    elif valid(u, rows):
                        rows[u["k"]] = (u["x"], u["y"])
            got["results"] = {s: engines[ZONES][0].result(s) for s in subs}
        finally:
            for q in queries.values():
                q.stop()
    got["final"] = (dict(rows), dict(subs))
    return got


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_every_view_equals_the_brute_force_and_the_whole_groups_rows(run):
    for f, (rows, subs, batch, seq0, out) in enumerate(run["batches"]):
        notes = [r for r in out if r["op"] == "update"]
        rejected = check_views(dict(rows), subs, batch, seq0, notes)
        assert sorted(r["seq"] for r in out if r["op"] == "rejected") == sorted(rejected), f   # each once
        assert {subs[r["subscription_id"]][2] for r in notes} == {min, max}, f   # the MIN and the MAX group notify
        if f == 1:   # the change from micro-batch 1 on: the added notify, the dropped do not
            assert {"m0", "M1"}.isdisjoint(r["subscription_id"] for r in notes)
            assert {"late", "late_max"} & {r["subscription_id"] for r in notes}
        assert rows_of(out) == rows_of(run["whole"][f]), f
    rows, subs = run["final"]   # the engine followed the stream
    assert run["results"] == {s: value(rows, lo, hi, agg) for s, (lo, hi, agg) in subs.items()}


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_the_zones_in_the_counters(run):
    first, last = run["stats"]
    assert first["zones"] == 2 * ZONES   # the MIN and the MAX group, 3 zone partitions each
    assert first["zone_batches"] == 2 * ZONES and first["zone_builds"] == 2 * ZONES
    assert last["zone_batches"] == 4 * ZONES
    assert last["shard_builds"] >= 2 * SHARDS
