"""``Engine.stream`` over a RANGE_MIN / RANGE_MAX group run in two stages (issue 16 item 4; ``runtime/stream.py``, "a
large RANGE_MIN / RANGE_MAX group in two stages"): the stateful stage holds the rows and no subscription and emits
S-CN's messages (000 §2.3.1) with each X-move's old Y; one task per x1 subscription shard matches them (S-UN).

* Through Spark (one stream per engine, two micro-batches, ``range_subscription_shards`` 2 and 0 side by side
  over the same files): every subscription's view -- its value before the micro-batch, each notification applied in
  seq order -- equals a brute-force MIN / MAX over the table after every seq, across upserts, deletes, X-moves, a key
  several times in one micro-batch, NULL X and Y, ±inf (a rejected row; an infinite subscription bound), ties,
  rows in no range, rejected rows, subscriptions added and dropped while the stream runs (honoured from the next
  micro-batch, with no new stage-1 base, only the touched shards rewritten); the two stages' rows equal the whole
  group's row for row; a RANGE_AGG group runs whole beside them; EXPLAIN and ``stream_stats`` show both stages.
* Without Spark (PySpark's ``TwsTester`` for the stateful operator, the stage-2 functions called directly; hypothesis
  draws the micro-batches): the two stages' rows equal the whole group's processor's, every column, across
  subscription changes published by the engine's own ``_publish_to_streams``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub import Engine
from sparksub.errors import InvalidSubscription
from sparksub.operators.range_min.subscription_shards import step0_old_values
from sparksub.operators.shared.schemas import UNICAST_SCHEMA
from sparksub.runtime import shard_stage, stream_control
from sparksub.runtime import stream as spark_stream

STREAM_SCHEMA = "k string, x double, y double, _op string, _seq bigint"
SHARDS = 2
X_MAX, Y_MAX = 16, 5   # small domains: ties in X and in Y
MIN_SQL = "SELECT MIN(y) FROM t WHERE x BETWEEN :lo AND :hi"
MAX_SQL = "SELECT MAX(y) FROM t WHERE x BETWEEN :lo AND :hi"


def ranges(rnd: random.Random, prefix: str, n: int) -> dict:
    """``n`` subscriptions' bounds: short and long ranges, a point range, infinite bounds, a range no row is in."""
    out = {f"{prefix}{i}": (float(lo), float(lo + rnd.randint(0, 8))) for i, lo in
           enumerate(rnd.randint(-2, X_MAX) for _ in range(n))}
    out[f"{prefix}_point"] = (4.0, 4.0)
    out[f"{prefix}_all"] = (-math.inf, math.inf)
    out[f"{prefix}_left"] = (-math.inf, 6.0)
    out[f"{prefix}_far"] = (50.0, 60.0)
    return out


def subscribe(e: Engine, sql: str, bounds: dict) -> None:
    ids = sorted(bounds)
    e.subscribe_many(sql, {"id": ids, "lo": [bounds[i][0] for i in ids], "hi": [bounds[i][1] for i in ids]})


def setup(spark, shards: int):
    """An engine over t (MIN and MAX groups in ``shards`` subscription shards, a COUNT group whole) and the
    oracle's subscriptions ``{id: (lo, hi, min|max)}``; the same for every ``shards``."""
    rnd = random.Random(16)
    e = Engine(spark)
    e.range_subscription_shards = shards
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE)")
    rows = {f"k{i:02d}": (float(rnd.randint(0, X_MAX)), float(rnd.randint(0, Y_MAX))) for i in range(40)}
    rows["kx"], rows["ky"] = (None, 1.0), (3.0, None)   # in no range, but deletable
    e.load("t", [{"k": k, "x": x, "y": y} for k, (x, y) in rows.items()])
    mins, maxs = ranges(rnd, "m", 24), ranges(rnd, "M", 10)
    subscribe(e, MIN_SQL, mins)
    subscribe(e, MAX_SQL, maxs)
    e.sql("CREATE SUBSCRIPTION n AS SELECT COUNT(*) FROM t WHERE x BETWEEN 2 AND 9")   # RANGE_AGG: whole
    subs = {**{i: (*b, min) for i, b in mins.items()}, **{i: (*b, max) for i, b in maxs.items()}}
    return e, rows, subs, rnd


def change(e: Engine, subs: dict, step: int) -> None:
    """Subscription change ``step`` (1, 2) to ``e`` and to the oracle's ``subs``."""
    if step == 1:   # added and dropped, one statement each, in both groups
        e.sql("CREATE SUBSCRIPTION late AS SELECT MIN(y) FROM t WHERE x BETWEEN 3 AND 11")
        e.sql("CREATE SUBSCRIPTION late_max AS SELECT MAX(y) FROM t WHERE x BETWEEN 0 AND 2")
        e.unsubscribe("m0")
        e.sql("DROP SUBSCRIPTION M1")
        subs.update(late=(3.0, 11.0, min), late_max=(0.0, 2.0, max))
        del subs["m0"], subs["M1"]
        with pytest.raises(InvalidSubscription):   # an empty range x1 > x2 is refused and changes nothing
            e.sql("CREATE SUBSCRIPTION empty AS SELECT MIN(y) FROM t WHERE x BETWEEN 9 AND 2")
    elif step == 2:   # the bulk path: ranges inside the first shard only (the others keep their files)
        bulk = {f"b{i}": (-5.0 - i, -4.0 + i / 4) for i in range(4)}
        subscribe(e, MIN_SQL, bulk)
        subs.update({i: (*b, min) for i, b in bulk.items()})


def gen_batch(rnd: random.Random, f: int, rows: dict) -> list:
    """One micro-batch of updates to t (the oracle's ``rows`` are not changed here)."""
    live = dict(rows)
    batch = []
    for j in range(26):
        r = rnd.random()
        if j == 2:
            u = {"k": f"gone{f}", "_op": "delete"}                                  # unknown key: rejected
        elif j == 5:
            u = {"k": rnd.choice(sorted(live)), "x": 3.0, "y": math.inf}            # ±inf: rejected
        elif j == 7:
            u = {"k": rnd.choice(sorted(live)), "x": None, "y": 2.0}                # NULL X: leaves every range
        elif j == 9:
            u = {"k": rnd.choice(sorted(live)), "x": 5.0, "y": None}                # NULL Y
        elif r < 0.15 and live:
            u = {"k": rnd.choice(sorted(live)), "_op": "delete"}
        elif r < 0.3:
            u = {"k": f"n{f}_{j}", "x": float(rnd.randint(0, X_MAX)), "y": float(rnd.randint(0, Y_MAX))}
        else:   # a Y change, often an X-move
            k = rnd.choice(sorted(live))
            x = live[k][0] if rnd.random() < 0.5 and live[k][0] is not None else float(rnd.randint(0, X_MAX))
            u = {"k": k, "x": x, "y": float(rnd.randint(0, Y_MAX))}
        if u.get("_op") == "delete":
            live.pop(u["k"], None)
        elif "x" in u and not (isinstance(u["y"], float) and math.isinf(u["y"])):
            live[u["k"]] = (u["x"], u["y"])
        batch.append(u)
    # the same key several times in one micro-batch: in, out of every range (NULL X), an X-move back in
    k = sorted(rows)[f + 1]
    batch += [{"k": k, "x": 2.0, "y": 0.0}, {"k": k, "x": None, "y": 0.0}, {"k": k, "x": 12.0, "y": 1.0},
              {"k": k, "x": 3.0, "y": 1.0}]
    return batch


def valid(u: dict, rows: dict) -> bool:
    if u.get("_op") == "delete":
        return u["k"] in rows
    return not any(isinstance(u.get(c), float) and math.isinf(u[c]) for c in ("x", "y"))


def value(rows: dict, lo: float, hi: float, agg):
    """Brute force: MIN / MAX of Y over the rows whose X is in [lo, hi] (NULL X or Y: in no range)."""
    got = [y for x, y in rows.values() if x is not None and y is not None and lo <= x <= hi]
    return agg(got) if got else None


def check_views(rows: dict, subs: dict, batch: list, seq0: int, notes: list) -> set:
    """Each subscription's view (its value before the micro-batch, ``notes`` applied in seq order, at most one per
    (subscription, seq)) equals the brute force after every seq; applies ``batch`` to ``rows``; the rejected seqs."""
    by_seq: dict = {}
    for r in notes:
        assert (r["subscription_id"], r["seq"]) not in by_seq.setdefault(r["seq"], {}), r
        by_seq[r["seq"]][r["subscription_id"]] = r["value"]
    assert {s for seen in by_seq.values() for s in seen} <= set(subs)
    view = {s: value(rows, lo, hi, agg) for s, (lo, hi, agg) in subs.items()}
    rejected = set()
    for i, u in enumerate(batch):
        seq = seq0 + i
        if not valid(u, rows):
            rejected.add(seq)
            assert seq not in by_seq
            continue
        if u.get("_op") == "delete":
            del rows[u["k"]]
        else:
            rows[u["k"]] = (u["x"], u["y"])
        view.update(by_seq.get(seq, {}))
        want = {s: value(rows, lo, hi, agg) for s, (lo, hi, agg) in subs.items()}
        assert view == want, (seq, u, {s: (view[s], want[s]) for s in want if view[s] != want[s]})
    return rejected


def _cell(v):
    return None if isinstance(v, float) and math.isnan(v) else v


def range_notes(rows) -> list:
    return [r for r in rows if r["op"] == "update" and r["subscription_id"] != "n"]


# ---- through Spark -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """Two streams over the same files, ``range_subscription_shards`` 2 and 0; the changes between micro-batches."""
    src, tmp = (str(tmp_path_factory.mktemp(f"range_shards_{n}")) for n in ("in", "tmp"))
    engines = {n: setup(spark, n) for n in (SHARDS, 0)}
    got = {"batches": [], "whole": [], "stats": [], "bases": []}
    queries, frames = {}, {}
    with two_shuffle_partitions(spark), stopped_at_the_end(queries):
        for n, (e, *_) in engines.items():
            out_dir, ck = (str(tmp_path_factory.mktemp(f"range_shards_{n}_{d}")) for d in ("out", "ck"))
            df = e.stream("t", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(src))
            frames[n] = (df, out_dir)
            queries[n] = (df.writeStream.format("parquet").option("path", out_dir).option("checkpointLocation", ck)
                          .outputMode("append").start())
        e, rows, subs, rnd = engines[SHARDS]
        where = Path(spark_stream.stream_directory(frames[SHARDS][0].sparksub_stream_id))

        def files():
            return {str(p.relative_to(where)): (p.stat().st_ino, p.stat().st_mtime_ns)
                    for p in where.rglob("*.pickle") if "changes" in p.parts or p.name.startswith("range-")}
        for f in range(2):   # two micro-batches (CI time): every change between them
            for step in (1, 2) if f else ():
                for other, _, other_subs, _ in engines.values():
                    change(other, other_subs, step)
            got["bases"].append(files())
            batch = gen_batch(rnd, f, rows)
            seq0 = 1000 * (f + 1)
            path = os.path.join(tmp, f".f{f}")
            with open(path, "w") as fh:
                fh.writelines(json.dumps({**u, "_seq": seq0 + i}) + "\n" for i, u in enumerate(batch))
            os.rename(path, os.path.join(src, f"part-{f}.json"))
            for q in queries.values():
                q.processAllAvailable()
            seqs = range(seq0, seq0 + len(batch))
            out = {n: [{k: _cell(v) for k, v in r.asDict().items()} for r in spark.read.parquet(d).collect()
                       if r.seq in seqs] for n, (_, d) in frames.items()}
            got["batches"].append((dict(rows), dict(subs), batch, seq0, out[SHARDS]))
            got["whole"].append(out[0])
            got["stats"].append(spark_stream.stream_stats(frames[SHARDS][0]))
            for u in batch:   # the oracle's table after the micro-batch
                if valid(u, rows) and u.get("_op") == "delete":
                    del rows[u["k"]]
                elif valid(u, rows):
                    rows[u["k"]] = (u["x"], u["y"])
        got["bases"].append(files())
        got["plan"] = frames[SHARDS][0]._jdf.queryExecution().toString()
        got["live"] = next(iter(e._live_streams.values()))
        got["results"] = {s: e.result(s) for s in subs}
        got["final"] = (dict(rows), dict(subs))
    return got


@contextlib.contextmanager
def two_shuffle_partitions(spark):
    """The streams' state partitions: two (CI time), the session's setting back afterwards."""
    was = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", was)


@contextlib.contextmanager
def stopped_at_the_end(queries: dict):
    try:
        yield queries
    finally:
        for query in queries.values():
            query.stop()


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
@pytest.mark.parametrize("f", [0, 1])
def test_each_micro_batch_equals_the_brute_force(run, f):
    rows, subs, batch, seq0, out = run["batches"][f]
    rejected = check_views(dict(rows), subs, batch, seq0, range_notes(out))
    assert sorted(r["seq"] for r in out if r["op"] == "rejected") == sorted(rejected)   # each once
    assert range_notes(out) and any(r["subscription_id"] == "n" for r in out)   # the COUNT group, whole, beside
    if f:   # the changes are honoured from the next micro-batch
        assert not {"m0", "M1"} & {r["subscription_id"] for r in range_notes(out)}


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
@pytest.mark.parametrize("f", [0, 1])
def test_two_stages_equal_the_whole_group_row_for_row(run, f):
    sharded, whole = run["batches"][f][4], run["whole"][f]
    assert Counter(tuple(sorted(r.items())) for r in sharded) == Counter(tuple(sorted(r.items())) for r in whole)


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_two_stages_in_the_plan_the_counters_and_the_files(run):
    plan = run["plan"]
    for operator in ("_to_shards", "_shards", "TransformWithStateInPySpark"):
        assert operator in plan, (operator, plan)
    assert "RepartitionByExpression [j_slot" in plan, plan
    live = run["live"]
    assert len(live.range_shards) == 2 and all(len(r.origins) == SHARDS for r in live.range_shards.values())
    first, *_, last = run["stats"]
    assert first["shard_builds"] >= 1 and first["notifications"] >= 1
    assert last["shard_builds"] > first["shard_builds"]     # the changes' versions built new shards
    before, *_, end = run["bases"]
    stage1 = {p: v for p, v in before.items() if "changes" not in p and "-s" not in p}
    assert stage1 and all(end[p] == v for p, v in stage1.items())   # no change wrote a stage-1 base
    # the bulk change touched the first shard of the MIN group only: the second is its previous file, linked
    gid = next(g for g in live.range_shards if g.startswith("range_min"))
    record = live.range_shards[gid]
    assert record.origins[0] == live.version and record.origins[1] < live.version, record.origins
    linked = next(v for p, v in end.items() if f"{live.version:010d}" in p and p.endswith("1/base.pickle"))
    assert sum(v[0] == linked[0] for v in end.values()) >= 2     # the same inode: a hard link, not a new file
    rows, subs = run["final"]
    for s, (lo, hi, agg) in subs.items():   # result() follows the stream
        assert run["results"][s] == value(rows, lo, hi, agg), s


# ---- without Spark: the two stages against the whole group's processor, row for row -----------------------------
def frame(batch: list, seq0: int) -> pd.DataFrame:
    """A group's rows of one micro-batch as the stateful operator hands them in (valid rows: the row check sets
    the others aside; a delete of an unknown key reaches the operator, which rejects it)."""
    recs = [{"key": u["k"], "x": u.get("x"), "y": u.get("y"), "t": None, "x2": None,
             "op": u.get("_op") or "upsert", "ord": seq0 + i, "reason": None}
            for i, u in enumerate(batch) if u.get("_op") == "delete" or valid(u, {})]
    return pd.DataFrame.from_records(recs, columns=["key", "x", "y", "t", "x2", "op", "ord", "reason"])


def stage_two(spec, schema: pa.Schema):
    """Stage 2 as the streaming query runs it, without Spark: the fan-out, Spark's exchange by ``j_slot`` (here a
    grouping by key), each slot's task."""
    slots = [(gid, j) for gid in sorted(spec.groups) for j in range(len(spec.groups[gid].shards))]
    keys = shard_stage.partition_keys(len(slots))
    fan_out = shard_stage.fan_out_function(keys, spark_stream._range_targets(spec, slots), "to_shards")
    tasks = shard_stage.shard_function(keys, spark_stream._range_match(spec, slots, schema), "shards")

    def run(stage1: pa.Table) -> pa.Table:
        fanned = pa.Table.from_batches([rb for b in stage1.to_batches() for rb in fan_out(iter([b]))],
                                       schema=stage1.schema.append(pa.field(shard_stage.SLOT_COLUMN, pa.int32())))
        slot = fanned.column(shard_stage.SLOT_COLUMN)
        assert set(pc.unique(slot).to_pylist()) <= set(keys)
        out = [rb for key in keys for rb in tasks(fanned.filter(pc.equal(slot, key)).to_batches())]
        return pa.Table.from_batches(out, schema=schema) if out else schema.empty_table()
    return run


def processors(e: Engine, tmp_path) -> dict:
    """The whole groups' processor and stage 1 of the same groups in two stages (``TwsTester``), with the engine
    publishing its changes to both as to running streams of its own."""
    from pyspark.sql.streaming.tws_tester import TwsTester
    state = e._tables["t"]
    entries = [g for g in e._groups.values() if g.family.name == "range_min"]
    schema = spark_stream.output_schema(UNICAST_SCHEMA)
    out = {}
    for how in ("whole", "sharded"):
        where = tmp_path / how
        where.mkdir()
        live = stream_control.LiveStream(how, "t", str(where), "unicast", ranges={g.group_id for g in entries})
        groups = {}
        for n, g in enumerate(entries):
            if how == "whole":
                snap = e._snapshot(state, g)
                groups[g.group_id] = spark_stream.GroupSpec(g.group_id, "x", "y", spark_stream._Deferred(snap))
            else:
                (x, y, base, _, _), (cuts, stored), live.range_shards[g.group_id] = \
                    e._range_stream_stages(state, g, SHARDS, where, n)
                groups[g.group_id] = spark_stream.GroupSpec(g.group_id, x, y, base, shards=tuple(stored), cuts=cuts)
        e._live_streams[how] = live
        control = stream_control.StreamControl(where, e.uid, how)
        spec = spark_stream.StreamSpec(e.uid, how, "t", "string", "unicast", schema, groups, min(groups), True,
                                       None, control, "k")
        if how == "sharded":
            spec = dataclasses.replace(spec, schema=pa.schema([*schema, *spark_stream.MESSAGE_FIELDS]))
        out[how] = (spec, TwsTester(spark_stream._processor_class()(spec)))
    return out


def micro_batch(testers: dict, batch: list, seq0: int, stage2) -> dict:
    out = {}
    for how, (spec, tester) in testers.items():
        got = [tester.testInPandas(gid, frame(batch, seq0)) for gid in sorted(spec.groups)]
        out[how] = pa.Table.from_pandas(pd.concat(got, ignore_index=True), schema=spec.schema, preserve_index=False)
    out["sharded"] = stage2(out["sharded"])
    return out


def cells(table: pa.Table) -> Counter:
    return Counter(tuple(sorted((k, _cell(v)) for k, v in r.items())) for r in table.to_pylist())


#: (key, kind, x, y): Y mostly beyond the loaded rows' (0..5), so that the drawn rows are the minima and maxima;
#: ``move``: Y = -8 whatever is drawn, so that a key drawn twice is an X-move of a minimum that keeps its Y
_UPDATES = st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["upsert", "move", "delete", "null_x", "null_y"]),
                              st.integers(0, 12), st.integers(-6, 9)), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_UPDATES, min_size=1, max_size=3), cut=st.integers(0, 2))
def test_two_stages_equal_the_whole_processor_row_for_row(tmp_path_factory, batches, cut):
    """Hypothesis draws up to three micro-batches (keys repeat within one: X-moves, ties, NULLs, deletes of known
    and unknown keys); before micro-batch ``cut`` the engine adds and drops subscriptions."""
    e, _, subs, _ = setup(None, SHARDS)
    testers = processors(e, tmp_path_factory.mktemp("tws"))
    stage2 = stage_two(testers["sharded"][0], spark_stream.output_schema(UNICAST_SCHEMA))
    for f, drawn in enumerate(batches):
        if f == cut:
            change(e, subs, 1)
            change(e, subs, 2)
        batch = []
        for key, kind, x, y in drawn:
            k = f"k{key:02d}"
            batch.append({"k": k, "_op": "delete"} if kind == "delete" else
                         {"k": k, "x": None if kind == "null_x" else float(x),
                          "y": None if kind == "null_y" else -8.0 if kind == "move" else float(y)})
        out = micro_batch(testers, batch, 1000 * (f + 1), stage2)
        assert out["sharded"].schema == out["whole"].schema
        assert cells(out["sharded"]) == cells(out["whole"]), f


def test_an_x_move_that_changes_no_result_notifies_no_one(tmp_path):
    """000 §2.3 / digest C.8: an X-move is a deletion, then an insertion; a subscription both steps reach whose value
    ends where it was gets no row -- in stage 2 as in the whole group, from the old Y stage 1 carries."""
    e, _, subs, _ = setup(None, SHARDS)
    testers = processors(e, tmp_path)
    stage2 = stage_two(testers["sharded"][0], spark_stream.output_schema(UNICAST_SCHEMA))
    out = [micro_batch(testers, batch, seq0, stage2) for batch, seq0 in
           (([{"k": "u", "x": 4.0, "y": -10.0}, {"k": "v", "x": 7.0, "y": 10.0}], 100),
            ([{"k": "u", "x": 5.0, "y": -10.0}, {"k": "v", "x": 6.0, "y": 10.0}], 200))]
    for got in out:
        assert cells(got["sharded"]) == cells(got["whole"])
    moved = {r["subscription_id"] for r in out[1]["sharded"].to_pylist()}
    assert moved   # the ranges holding one of the two X
    both = [s for s, (lo, hi, agg) in subs.items() if lo <= 4.0 <= hi and lo <= 5.0 <= hi and agg is min]
    both += [s for s, (lo, hi, agg) in subs.items() if lo <= 6.0 <= hi and lo <= 7.0 <= hi and agg is max]
    assert both and not moved & set(both)


def test_step0_old_values_follow_the_batch():
    """The X-moves' old Y of one batch, as the core will see each row: a move, a Y change in place, a key moved
    twice, a NULL X (leaves: the next upsert is an insert), a delete then a re-insert."""
    from sparksub.operators.range_min.core import RangeMinCore
    core = RangeMinCore(False)
    core.load(np.array(["a", "b", "c"], dtype=object), np.array([1.0, 2.0, 3.0]), np.array([5.0, 6.0, 7.0]))
    keys = ["a", "b", "a", "c", "c", "b", "b"]
    xs = np.array([4.0, 2.0, 8.0, np.nan, 9.0, 0.0, 1.0])
    ys = np.array([1.0, 0.0, 2.0, 1.0, 3.0, 0.0, 4.0])
    ops = np.array([0, 0, 0, 0, 0, 1, 0], dtype=np.int8)
    assert step0_old_values(core, keys, xs, ys, ops, np.arange(7)) == {0: 5.0, 2: 1.0}
