"""``Engine.stream`` over a SELECT_JOIN group run in two stages (issue 16 item 4; ``runtime/join_stream.py``): the
stateful partitions hold the streamed rows and the static side but no subscription and emit the messages of 000
§4; one task per subscription shard matches them.

* Through Spark (one stream, three micro-batches): each micro-batch's rows equal a brute-force nested loop over
  the tables (``test_join_shards_engine``'s oracle: unicast rows with their projections, an upsert netted per
  result tuple), across upserts, deletes, duplicate keys in one micro-batch, NULL join and selection values,
  rejected rows, and subscriptions added and dropped while the stream runs (honoured from the next micro-batch,
  with no new stage-1 base); a BAND_JOIN group runs whole beside them; EXPLAIN and ``stream_stats`` show both stages.
* Without Spark (PySpark's ``TwsTester`` for the stateful partitions, the stage-2 functions called directly): the
  two stages' rows equal the whole group's processor's row for row, every column, in ``unicast`` and in
  ``reformulated`` (stage 1 alone: the same messages, ``msg_no`` included), across the same changes, published by
  the engine's own ``_publish_to_streams``.  The whole processor equals ``publish`` (``test_stream_subscriptions``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sparksub.operators.joins.group import L
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import publish_schema
from sparksub.runtime import join_stream as sjs
from sparksub.runtime import stream as spark_stream
from sparksub.runtime import stream_control
from sparksub.runtime.stream import _Deferred

sys.path.insert(0, str(Path(__file__).parent))   # the sibling tests' join oracle, update generator and comparisons
from test_join_shards_engine import (
    PROJ,
    apply_oracle,
    engines,
    gen_batch,
    subscribe_all,
    unicast_rows,
    valid,
)
from test_stream_subscriptions import _cell

STREAM_SCHEMA = "rk int, a double, b bigint, tag string, _op string, _seq bigint"
SHARDS = 2
BAND = "SELECT * FROM r JOIN s ON s.b - r.b BETWEEN 0 AND 1"   # a BAND_JOIN group: always whole
LATE = "SELECT r.a, s.c FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 0 AND 6 AND s.c <= 4"
#: j2's group (no selection on r.a) selected r.a and s.c; this one selects every column: its messages carry more
WIDE = "SELECT * FROM r JOIN s ON r.b = s.b WHERE s.c >= 5"


def setup(spark, band: bool = True):
    """An engine whose SELECT_JOIN groups run in ``SHARDS`` shards, and the oracle's state."""
    rnd = random.Random(16)
    (e,) = engines(spark, [SHARDS])
    rows = {"r": {k: {"a": float(rnd.randint(0, 6)), "b": rnd.randint(0, 3), "tag": "x"} for k in range(8)},
            "s": {k: {"b": float(rnd.randint(0, 3)), "c": float(rnd.randint(0, 6))} for k in range(8)}}
    rows["r"][8] = {"a": None, "b": 1, "tag": None}
    rows["s"][8] = {"b": None, "c": 2.0}
    rows["s"][9] = {"b": 1.0, "c": None}
    e.load("r", [{"rk": k, **v} for k, v in rows["r"].items()])
    e.load("s", [{"sk": k, **v} for k, v in rows["s"].items()])
    e.sql("CREATE SUBSCRIPTION j1 AS SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 1 AND 4 "
          "AND s.c BETWEEN 2 AND 5")
    e.sql("CREATE SUBSCRIPTION j2 AS SELECT r.a, s.c FROM s JOIN r ON s.b = r.b WHERE s.c >= 3")
    if band:
        e.sql(f"CREATE SUBSCRIPTION band AS {BAND}")
    queries = {"j1": (1, 4, 2, 5), "j2": (None, None, 3, math.inf)}   # j2: no selection on r.a, a group of its own
    specs = {"j2": PROJ}
    subscribe_all([e], rnd, queries, specs, [f"m{i}" for i in range(8)])
    return e, rows, queries, specs, rnd


#: the subscription changes, in order: made between micro-batches (which ones before which: a test's schedule)
CHANGES = ("added and dropped", "bulk and DROP")


def change(e, rnd, queries, specs, step: str) -> None:
    """One of ``CHANGES`` to the engine ``e``'s subscriptions and to the oracle's ``queries`` / ``specs``."""
    if step == "added and dropped":   # a subscription in each group and one dropped while the stream runs
        e.subscribe("late", LATE)
        e.subscribe("wide", WIDE)
        e.unsubscribe("m0")
        del queries["m0"]
        queries["late"], specs["late"] = (0, 6, -math.inf, 4), PROJ
        queries["wide"] = (None, None, 5, math.inf)
    else:   # the bulk path and a DROP
        subscribe_all([e], rnd, queries, specs, [f"n{i}" for i in range(3)])
        e.sql("DROP SUBSCRIPTION j1")
        del queries["j1"]


def micro_batches(e, rnd, rows, queries, specs, schedule):
    """Micro-batches of updates to r, made one at a time (a generator), ``schedule[f]`` the ``CHANGES`` made before
    micro-batch f: each ``(batch, seq0, the oracle's rows, rejected seqs)``."""
    for f, steps in enumerate(schedule):
        for step in steps:
            change(e, rnd, queries, specs, step)
        batch = gen_batch(rnd, "r", 12, rows)
        if f == 0:   # the same key three times in one micro-batch, moving in and out of the ranges
            batch += [{"rk": 2, "a": 2.0, "b": 1, "tag": "p"}, {"rk": 2, "a": 9.0, "b": 1, "tag": "q"},
                      {"rk": 2, "a": 3.0, "b": 2, "tag": None}]
        seq0 = 100 * (f + 1)
        live = set(rows["r"])
        rejected = set()
        for i, u in enumerate(batch):
            if not valid(u) or (u.get("_op") == "delete" and u["rk"] not in live):
                rejected.add(seq0 + i)
            elif u.get("_op") == "delete":
                live.discard(u["rk"])
            else:
                live.add(u["rk"])
        yield batch, seq0, apply_oracle(rows, "r", batch, queries, specs, seq0), rejected


class AsRow(dict):
    """A collected row as a dict that ``test_join_shards_engine``'s comparison reads like a pyspark Row."""
    __getattr__ = dict.__getitem__


def join_rows(rows) -> list:
    """The select-join groups' notifications (the band join's and the rejected rows apart)."""
    return [AsRow(r) for r in rows if r["op"] in ("insert", "delete") and r["subscription_id"] != "band"]


# ---- through Spark -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """One stream over r: two micro-batches, the subscription changes between them."""
    src, out_dir, ck, tmp = (str(tmp_path_factory.mktemp(f"join_shards_{n}")) for n in ("in", "out", "ck", "tmp"))
    e, rows, queries, specs, rnd = setup(spark)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    got = {"batches": [], "want": [], "rejected": [], "stats": [], "specs": specs}
    query = None
    try:
        df = e.stream("r", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(src))
        query = (df.writeStream.format("parquet").option("path", out_dir).option("checkpointLocation", ck)
                 .outputMode("append").start())
        where = Path(spark_stream.stream_directory(df.sparksub_stream_id))
        stage1 = {p.name: p.stat().st_mtime_ns for p in where.glob("join-*.pickle") if "-q" not in p.name}
        # two micro-batches (CI time): every change between them
        for f, (batch, seq0, want, rejected) in enumerate(micro_batches(e, rnd, rows, queries, specs, [(), CHANGES])):
            path = os.path.join(tmp, f".f{f}")
            with open(path, "w") as fh:
                fh.writelines(json.dumps({**u, "_seq": seq0 + i}) + "\n" for i, u in enumerate(batch))
            os.rename(path, os.path.join(src, f"part-{f}.json"))
            query.processAllAvailable()
            seqs = range(seq0, seq0 + len(batch))
            got["batches"].append([r.asDict() for r in spark.read.parquet(out_dir).collect() if r.seq in seqs])
            got["want"].append(want)
            got["rejected"].append(rejected)
            got["stats"].append(spark_stream.stream_stats(df))
        got["stage1"] = (stage1, {p.name: p.stat().st_mtime_ns for p in where.glob("join-*.pickle")
                                  if "-q" not in p.name})
        got["plan"] = df._jdf.queryExecution().toString()
        got["live"] = next(iter(e._live_streams.values()))
        got["groups"] = {g.group_id for g in e._groups.values() if g.group_id.startswith("select_join")}
    finally:
        if query is not None:
            query.stop()
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    return got


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
@pytest.mark.parametrize("f", [0, 1])
def test_each_micro_batch_equals_the_nested_loop(run, f):
    got = run["batches"][f]
    assert unicast_rows(join_rows(got), run["specs"]) == run["want"][f]
    assert sorted(r["seq"] for r in got if r["op"] == "rejected") == sorted(run["rejected"][f])   # each once
    subs = Counter(r["subscription_id"] for r in join_rows(got))
    if f == 1:   # the changes are honoured from the next micro-batch
        assert {"late", "wide"} <= set(subs) and not {"m0", "j1"} & set(subs), subs
    assert any(r["subscription_id"] == "band" for r in got)    # the band join group, whole, beside the two stages


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_two_stages_in_the_plan_and_the_counters(run):
    plan = run["plan"]
    name = "band_join_and_select_join_groups_stream"
    for operator in (f"{name}_row_partitions", f"{name}_to_shards", f"{name}_shards", name):
        assert operator in plan, (operator, plan)
    assert "RepartitionByExpression [j_slot" in plan, plan
    assert run["live"].join_shards == {gid: SHARDS for gid in run["groups"]}
    first, *_, last = run["stats"]
    assert first["shard_builds"] >= 1 and first["micro_batches"] >= 1
    assert last["shard_builds"] > first["shard_builds"]     # the changes' versions built new shards
    before, after = run["stage1"]
    assert before == after and before                      # a subscription change wrote no stage-1 base


@pytest.mark.spark
@pytest.mark.catalyst_independent
def test_partition_keys_are_sparks_hash_partitions(spark):
    for n in (1, 2, 3, 5, 8):
        keys = sjs.partition_keys(n)
        got = spark.createDataFrame([(k,) for k in keys], "k int").selectExpr(f"pmod(hash(k), {n}) AS p").collect()
        assert [r.p for r in got] == list(range(n))


# ---- without Spark: the two stages against the whole group's processor, row for row -----------------------------
def frames(batch, seq0: int, rid: str, parts: int) -> pd.DataFrame:
    """A partition's rows of one micro-batch as the stateful operator hands them in (valid rows only: the
    stream's row check sets the others aside before)."""
    part = int(rid.rsplit("#", 1)[1])
    recs = [{"rk": u["rk"], "a": u.get("a"), "b": u.get("b"), "tag": u.get("tag"), "j_key": u["rk"],
             "j_op": u.get("_op"), "j_ord": seq0 + i, "j_reason": None}
            for i, u in enumerate(batch) if valid(u) and sjs.key_partition(u["rk"], parts) == part]
    return pd.DataFrame.from_records(recs, columns=["rk", "a", "b", "tag", "j_key", "j_op", "j_ord", "j_reason"])


def cells(rows) -> Counter:
    """Rows as a multiset of all their cells (a null float read back from pandas as NaN is None)."""
    return Counter(tuple(sorted((k, _cell(v)) for k, v in r.items())) for r in rows)


@pytest.mark.parametrize("mode", ["unicast", "reformulated"])
def test_two_stages_equal_the_whole_group_row_for_row(tmp_path, mode):
    from pyspark.sql.streaming.tws_tester import TwsTester
    e, rows, queries, specs, rnd = setup(None, band=False)
    state, parts = e._tables["r"], 2
    tdef = state.definition
    entries = [g for g in e._groups.values() if g.group_id.startswith("select_join")]
    schema = e._output_schema(publish_schema(mode), mode, entries, tdef)
    initial = _Deferred(dict(state.rows))
    lives, testers = {}, {}
    for how in ("whole", "sharded"):
        groups = {}
        for g in entries:
            if how == "whole":
                snap = g.family.stream_snapshot(g.registry, g.physical, g.group_id, e._tables, L)
                groups[g.group_id] = sjs.JoinStreamGroup(g.group_id, L, parts, _Deferred(snap), initial)
            else:
                _, one = g.family.partition_snapshots(g.registry, g.physical, g.group_id, e._tables, 1,
                                                      subscriptions=False)
                bases = g.family.shard_bases(g.registry, g.physical, SHARDS) if mode == "unicast" else {}
                groups[g.group_id] = sjs.sharded_join_group(g.group_id, L, parts, one.popitem()[1], initial, bases,
                                                            mode, lambda _suffix, v: _Deferred(v))
        # the engine publishes its changes to the stream's directory, as to a running stream of its own
        live = lives[how] = stream_control.LiveStream(
            how, "r", str(tmp_path / how), mode, joins=dict.fromkeys(groups, L),
            join_shards=dict.fromkeys(groups, SHARDS) if how == "sharded" else {})
        e._live_streams[how] = live
        control = stream_control.StreamControl(live.directory, e.uid, how)
        spec = sjs.JoinStreamSpec(e.uid, how, "r", tdef.column_names, tuple(arrow_type(t) for _, t in tdef.columns),
                                  "rk", "int", mode, schema, groups, min(groups), True, None, control)
        if how == "sharded" and mode == "unicast":
            spec = dataclasses.replace(spec, schema=sjs._message_schema(groups))
        testers[how] = (spec, TwsTester(sjs._processor_class()(spec)))
    stage2 = stage_two(testers["sharded"][0], schema) if mode == "unicast" else None
    schedule = [(), *((step,) for step in CHANGES)]   # a change before each micro-batch but the first
    for f, (batch, seq0, _, _) in enumerate(micro_batches(e, rnd, rows, queries, specs, schedule)):
        out = {}
        for how, (spec, tester) in testers.items():
            got = [tester.testInPandas(f"{gid}#{p}", frames(batch, seq0, f"{gid}#{p}", parts))
                   for gid in sorted(spec.groups) for p in range(parts)]
            out[how] = pa.Table.from_pandas(pd.concat(got, ignore_index=True), schema=spec.schema, preserve_index=False)
        sharded = stage2(out["sharded"]) if stage2 is not None else out["sharded"]
        assert sharded.schema == out["whole"].schema
        assert cells(sharded.to_pylist()) == cells(out["whole"].to_pylist()), f
        assert out["whole"].num_rows
    assert lives["sharded"].version == lives["whole"].version >= 2       # the changes reached both


def stage_two(spec, schema: pa.Schema):
    """Stage 2 as the streaming query runs it, without Spark: the fan-out, Spark's exchange by ``j_slot`` (here a
    grouping), each shard's task."""
    slots = [(gid, j) for gid in sorted(spec.groups) for j in range(len(spec.groups[gid].shards))]
    keys = sjs.partition_keys(len(slots))
    fan_out = sjs._fan_out_function(slots, keys, "to_shards")
    match = sjs._shard_function(spec, dict(zip(keys, slots)), schema, "shards")

    def run(messages: pa.Table) -> pa.Table:
        fanned = [rb for b in messages.to_batches() for rb in fan_out(iter([b]))]
        by_slot: dict = {}
        for rb in fanned:
            for key in set(rb.column(sjs.SLOT_COLUMN).to_pylist()):
                by_slot.setdefault(key, []).append(rb.filter(pc.equal(rb.column(sjs.SLOT_COLUMN), key)))
        assert set(by_slot) <= set(keys)
        out = [rb for key in sorted(by_slot) for rb in match(iter(by_slot[key]))]
        return pa.Table.from_batches(out, schema=schema) if out else schema.empty_table()
    return run
