"""``Engine.stream`` over BOX_MIN / BOX_MAX / BOX_TOPK groups in subscription shards (issue 16 item 4;
``runtime/stream.py``, "a large box group in subscription shards"; ``operators/box/stream_shards.py``): past
``range_subscription_shards`` a box group runs in Q state partitions ``<group>#b<j>``, each every row of the table and
the subscriptions whose id hashes to j (publish's CRC32), so the union of their rows is the whole group's.

* Without Spark (PySpark's ``TwsTester`` for the stateful operator, the stream's own router; hypothesis draws the
  micro-batches, the mode and the workers' fates -- a cold worker, one left behind): the shards' rows equal the
  whole group's processor's, row for row, every column, across subscriptions added and dropped by the engine's
  own ``_publish_to_streams``; each shard's index holds exactly the subscriptions publish's hash gives it, and a
  change is published only to the shards its ids hash to; a rejected row comes out once.
* Through Spark (``range_subscription_shards`` 2 and 0 side by side over the same files): the two streams' rows are
  equal row for row; each subscription's view (its result at the start, the notifications applied in seq order)
  equals a brute force over the table's rows after every micro-batch, across upserts, deletes, NULLs, ties, boxes
  no row is in, infinite boxes, a key several times in one micro-batch, malformed rows (each out once); a
  subscription added and one dropped while the stream runs; the stream stopped and restarted from its checkpoint.
"""
from __future__ import annotations

import copy
import math
import pickle
import random
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparksub.operators.box.stream_shards import shard_keys, spark_partition
from sparksub.operators.joins.shards import subscription_shard
from sparksub.operators.shared.schemas import DELETE, UPSERT, mode_schema, with_reason
from sparksub.runtime import stream as spark_stream
from sparksub.runtime import stream_control

sys.path.insert(0, str(Path(__file__).parent))   # the box shards' engine test: templates, oracle, local views
from test_box_shards_engine import TEMPLATES, box_groups, make_engines, oracle, replay, subscribe  # noqa: E402
from test_stream_range_shards import two_shuffle_partitions  # noqa: E402
from test_stream_range_shards_classes import feed  # noqa: E402

SHARDS = 2
STREAM_SCHEMA = "id int, a double, b double, v double, _op string, _seq bigint"
MIN_NEW = "SELECT MIN(v) FROM pts WHERE a BETWEEN 0 AND 5 AND b >= 1"


def start_rows(rnd: random.Random) -> dict:
    rows = {key: {"a": float(rnd.randint(0, 8)), "b": float(rnd.randint(0, 8)), "v": float(rnd.randint(0, 3))}
            for key in range(8)}
    rows[8] = {"a": None, "b": 1.0, "v": 0.0}
    rows[9] = {"a": 2.0, "b": 2.0, "v": None}
    return rows


def engines(spark, settings_: list, rnd: random.Random):
    """Engines over pts (``range_subscription_shards`` per ``settings_``) with the same rows and box subscriptions
    of the four templates (BOX_MIN, BOX_MAX, BOX_TOPK ascending and descending): boxes empty, infinite, ties."""
    engs = make_engines(spark, settings_)
    rows = start_rows(rnd)
    for e in engs:
        e.load("pts", [{"id": key, **r} for key, r in rows.items()])
    queries: dict = {}
    subscribe(engs, rnd, queries, "p", 6)
    return engs, rows, queries


def new_min_id(shard: int) -> str:
    """A new BOX_MIN subscription id that hashes to ``shard``."""
    return next(f"mnz{i}" for i in range(100) if subscription_shard([f"mnz{i}"], SHARDS)[0] == shard)


def change(engs: list, queries: dict) -> tuple:
    """A BOX_MIN subscription dropped and one added, both hashing to one shard (the other's subscriptions stay as they
    were: the change must not reach it); returns (dropped, added)."""
    dropped = "mnp1"
    added = new_min_id(int(subscription_shard([dropped], SHARDS)[0]))
    for e in engs:
        e.unsubscribe(dropped)
        e.subscribe(added, MIN_NEW)
    del queries[dropped]
    queries[added] = ("min", False, (0.0, 5.0, 1.0, math.inf), 1)
    return dropped, added


def published_shards(directory) -> set:
    """The state partitions the stream's changes were published to (``changes/<key>/``)."""
    where = Path(directory) / "changes"
    return {stream_control._unsafe(p.name) for p in where.iterdir()} if where.is_dir() else set()


def cells(rows) -> Counter:
    return Counter(tuple(sorted((k, None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()))
                   for r in rows)


def test_the_shards_keys_land_in_state_partitions_of_their_own():
    """Spark's ``pmod(hash(key), n)`` (checked against Spark for 300 random keys, ASCII and not, n in 2, 3, 7, 200):
    here the values Spark gave; the shards' keys salted until each has a partition of its own."""
    group = "box_topk:stock.per@risk,beta"
    assert [spark_partition(k, 2) for k in (f"{group}#b0", f"{group}#b1", group)] == [0, 0, 0]   # (Spark's)
    for q, n in ((2, 2), (3, 3), (2, 200), (4, 7)):
        keys = shard_keys(group, q, n)
        assert len({spark_partition(k, n) for k in keys}) == q and keys[0] == f"{group}#b0", (q, n, keys)
    assert shard_keys(group, 3, 2) == [f"{group}#b{j}" for j in range(3)]   # more shards than partitions: as named


# ---- without Spark: the shards' partitions against the whole group's processor, row for row -----------------------
class Counters:
    def __init__(self):
        self.value = Counter()

    def add(self, d: dict) -> None:
        self.value.update(d)


_ROUTED = pa.schema([("group_id", pa.string()), ("key", pa.int64()), ("x", pa.float64()), ("y", pa.float64()),
                     ("t", pa.string()), ("x2", pa.float64()), ("op", pa.string()), ("ord", pa.int64()),
                     ("reason", pa.string())])


def processors(e, tmp_path, mode: str) -> dict:
    """The whole groups' processor and the same groups in shards (``TwsTester``), the engine publishing its changes
    to both as to running streams of its own."""
    from pyspark.sql.streaming.tws_tester import TwsTester
    state = e._tables["pts"]
    entries = box_groups(e)
    wide = e._output_schema(with_reason(mode_schema(mode)), mode, entries, state.definition)
    testers = {}
    for how in ("whole", "sharded"):
        (tmp_path / how).mkdir()
        live = stream_control.LiveStream(how, "pts", str(tmp_path / how), mode,
                                         ranges={g.group_id for g in entries})
        groups = {}
        for n, g in enumerate(entries):
            x, y, text, x2 = g.family.stream_columns(g.physical, state.definition)
            if how == "whole":
                groups[g.group_id] = spark_stream.GroupSpec(g.group_id, x, y,
                                                            spark_stream._Deferred(e._box_snapshot(g)), text, x2)
                continue
            for key, (x, y, base, text, x2, j) in e._box_stream_shards(state, g, SHARDS, tmp_path / how, n, live,
                                                                        SHARDS).items():
                groups[key] = spark_stream.GroupSpec(key, x, y, base, text, x2, box_shard=j)
        e._live_streams[how] = live
        spec = spark_stream.StreamSpec(e.uid, how, "pts", "bigint", mode, wide, groups, min(groups), True, Counters(),
                                       stream_control.StreamControl(tmp_path / how, e.uid, how), "id")
        testers[how] = (spec, TwsTester(spark_stream._processor_class()(spec)), live)
    return testers


def checked(batch: list, seq0: int) -> pa.Table:
    """A micro-batch as ``checked_updates`` hands the valid rows on (deletes of unknown keys among them: the operator
    finds those)."""
    return pa.table({"id": pa.array([u["id"] for u in batch], pa.int64()),
                     **{c: pa.array([u.get(c) for u in batch], pa.float64()) for c in ("a", "b", "v")},
                     spark_stream.OP_COLUMN: pa.array([DELETE if u.get("_op") == "delete" else UPSERT for u in batch],
                                                      pa.int8()),
                     spark_stream.SEQ_COLUMN: pa.array(range(seq0, seq0 + len(batch)), pa.int64()),
                     spark_stream.REASON_COLUMN: pa.nulls(len(batch), pa.string())})


def micro_batch(testers: dict, batch: list, seq0: int, f: int) -> dict:
    """Micro-batch ``f`` through both processors, routed by the stream's own router (every row to every key)."""
    table = checked(batch, seq0)
    out = {}
    with mock.patch.object(stream_control, "batch_id", lambda: f):
        for how, (spec, tester, _) in testers.items():
            route = spark_stream._route_function(spec, _ROUTED, "route")
            routed = pa.Table.from_batches(list(route(iter(table.to_batches()))), schema=_ROUTED).to_pandas()
            got = []
            for gid, frame in routed.groupby("group_id", sort=True):
                got.append(tester.testInPandas(gid, frame.drop(columns="group_id").reset_index(drop=True)))
            assert sorted(routed["group_id"].unique()) == sorted(spec.groups)   # every row to every key
            out[how] = pd.concat(got, ignore_index=True).to_dict("records") if got else []
    return out


def check_shard_indexes(e, spec, live) -> None:
    """Each shard's cached index holds exactly the subscriptions publish's hash gives it; together, the group's."""
    for g in box_groups(e):
        held = []
        for j, key in enumerate(live.box_shards[g.group_id].keys):
            cached = spark_stream._CACHE.get((e.uid, key, spec.stream_id))
            if cached is None:
                continue
            ids = list(cached[3][0].ids)
            assert (subscription_shard(ids, SHARDS) == j).all(), (g.group_id, j, ids)
            held += ids
        _, live_ids, _, _ = g.family.live(g.registry)
        if len(held) or not len(live_ids):
            assert sorted(held) == sorted(live_ids.tolist()), g.group_id


_UPDATES = st.lists(st.tuples(st.integers(0, 13), st.sampled_from(["upsert", "delete", "null_a", "null_b", "null_v"]),
                              st.integers(0, 8), st.integers(0, 8), st.integers(0, 3)), min_size=1, max_size=16)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(_UPDATES, st.sampled_from(["same worker", "cold worker", "behind"])), min_size=1,
                        max_size=3),
       cut=st.integers(0, 2), mode=st.sampled_from(["unicast", "reformulated"]), seed=st.integers(0, 3))
@example(batches=[([(1, "upsert", 2, 2, 0), (13, "upsert", 3, 3, 1)], "same worker"),
                  ([(k, "upsert", k % 6, 1 + k % 5, k % 4) for k in range(12)] + [(3, "delete", 0, 0, 0)],
                   "same worker")], cut=0, mode="reformulated", seed=0)   # the new k's messages from shard 0
def test_shards_equal_the_whole_processor_row_for_row(tmp_path_factory, batches, cut, mode, seed):
    (e,), _, queries = engines(None, [SHARDS], random.Random(seed))
    testers = processors(e, tmp_path_factory.mktemp("tws"), mode)
    sharded_spec, _, live = testers["sharded"]
    spark_stream._CACHE.clear()
    left_behind = None
    for f, (drawn, fate) in enumerate(batches):
        if f == cut:
            dropped, added = change([e], queries)
            group = e._find_group(added).group_id
            touched = {live.box_shards[group].keys[int(subscription_shard([s], SHARDS)[0])] for s in (dropped, added)}
            assert published_shards(live.directory) == touched   # the change reaches its ids' shards only
        if f == cut + 1:   # a top-k subscription with a k no one had, in shard 1: shard 0 paints for it too
            was = published_shards(live.directory)
            new_k = next(f"taz{i}" for i in range(100) if subscription_shard([f"taz{i}"], SHARDS)[0] == 1)
            e.subscribe_many(TEMPLATES["ta"][0], {"id": [new_k], "a1": [0.0], "a2": [6.0], "b1": [-math.inf],
                                                  "b2": [math.inf], "k": [7]})
            group = e._find_group(new_k).group_id
            assert published_shards(live.directory) - was == set(live.box_shards[group].keys)
        if fate == "cold worker":
            spark_stream._CACHE.clear()
        elif fate == "behind" and left_behind is not None:   # a worker that last ran the partitions a while ago
            spark_stream._CACHE.clear()
            spark_stream._CACHE.update(pickle.loads(left_behind))
        left_behind = pickle.dumps(spark_stream._CACHE) if f % 2 == 0 else left_behind
        batch = [{"id": key, "_op": "delete"} if kind == "delete" else
                 {"id": key, "a": None if kind == "null_a" else float(a), "b": None if kind == "null_b" else float(b),
                  "v": None if kind == "null_v" else float(v)} for key, kind, a, b, v in drawn]
        out = micro_batch(testers, batch, 1000 * (f + 1), f)
        assert cells(out["sharded"]) == cells(out["whole"]), (f, fate, mode)
        rejected = [r["seq"] for r in out["sharded"] if r["op"] == "rejected"]
        assert len(rejected) == len(set(rejected))   # a delete of an unknown key: once, not per shard
        check_shard_indexes(e, sharded_spec, live)
    stats = sharded_spec.stats.value
    assert stats["shard_builds"] >= 2 * len(box_groups(e))   # every shard built once at least


# ---- through Spark ----------------------------------------------------------------------------------------------
def gen_batch(rnd: random.Random, f: int, rows: dict) -> list:
    """A micro-batch: upserts, deletes (of unknown keys too), NULL a / b / v, ties in v, one key several times, a
    malformed row (±inf), a null key."""
    out = []
    for _ in range(14):
        key = rnd.randint(0, 13)
        roll = rnd.random()
        if roll < 0.15:
            out.append({"id": key, "_op": "delete"})
            continue
        out.append({"id": key, "a": None if roll < 0.2 else float(rnd.randint(0, 8)),
                    "b": None if 0.2 <= roll < 0.25 else float(rnd.randint(0, 8)),
                    "v": None if 0.25 <= roll < 0.3 else float(rnd.randint(0, 3))})
    k = sorted(rows)[f]
    out += [{"id": k, "a": 1.0, "b": 1.0, "v": 0.0}, {"id": k, "a": None, "b": 1.0, "v": 0.0},
            {"id": k, "a": 4.0, "b": 4.0, "v": 1.0}, {"id": 5, "a": 1.0, "b": 1.0, "v": math.inf},
            {"id": None, "a": 1.0, "b": 1.0, "v": 1.0}, {"id": 1000 + f, "_op": "delete"}]
    return out


def apply_batch(rows: dict, batch: list) -> set:
    """``batch`` applied to the oracle's rows; the positions rejected (malformed, or a delete of an unknown key)."""
    rejected = set()
    for i, u in enumerate(batch):
        if u["id"] is None or (u.get("v") is not None and math.isinf(u["v"])) or \
                (u.get("_op") == "delete" and u["id"] not in rows):
            rejected.add(i)
        elif u.get("_op") == "delete":
            del rows[u["id"]]
        else:
            rows[u["id"]] = {c: u[c] for c in ("a", "b", "v")}
    return rejected


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """Two streams over the same files (2 shards, whole); a change before micro-batch 1; the streams stopped after
    micro-batch 1 and restarted from their checkpoints for micro-batch 2."""
    src, tmp = (str(tmp_path_factory.mktemp(f"box_{n}")) for n in ("in", "tmp"))
    rnd = random.Random(7)
    (sharded, whole), rows, queries = engines(spark, [SHARDS, 0], rnd)
    local = {sid: ({w["id"]: w["v"] for w in oracle(rows, *q)} if q[0] == "topk" else oracle(rows, *q))
             for sid, q in queries.items()}
    got = {"batches": [], "stats": []}
    queries_, frames = {}, {}

    def start(n):
        df, out_dir, ck = frames[n]
        queries_[n] = (df.writeStream.format("parquet").option("path", out_dir).option("checkpointLocation", ck)
                       .outputMode("append").start())
    with two_shuffle_partitions(spark):
        try:
            for n, e in ((SHARDS, sharded), (0, whole)):
                df = e.stream("pts", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1).json(src))
                frames[n] = (df, *(str(tmp_path_factory.mktemp(f"box_{n}_{d}")) for d in ("out", "ck")))
                start(n)
            for f in range(3):
                step = {}
                if f == 1:
                    step["dropped"], step["added"] = change([sharded, whole], queries)
                    local.pop(step["dropped"])
                    local[step["added"]] = oracle(rows, *queries[step["added"]])
                    step["published"] = published_shards(next(iter(sharded._live_streams.values())).directory)
                if f == 2:   # a restart from the checkpoint: each shard's state from the state store
                    for n, query in list(queries_.items()):
                        query.stop()
                        start(n)
                batch, seq0 = gen_batch(rnd, f, rows), 1000 * (f + 1)
                out = {n: [SimpleNamespace(**r) for r in rs]   # (each stream's rows, read as the replay reads them)
                       for n, rs in feed(spark, (src, tmp, f"part-{f}.json"), batch, seq0, queries_,
                                         {n: d for n, (_, d, _) in frames.items()}).items()}
                rejected = apply_batch(rows, batch)
                replay(local, sorted((r for r in out[SHARDS] if r.op != "rejected"), key=lambda r: r.seq))
                views = {sid: (copy.deepcopy(local.get(sid)), oracle(rows, *q)) for sid, q in queries.items()}
                got["batches"].append({**step, "out": out, "rejected": {seq0 + i for i in rejected}, "seq0": seq0,
                                       "views": views,
                                       "kinds": {sid: q[:2] for sid, q in queries.items()}})
                got["stats"].append(spark_stream.stream_stats(frames[SHARDS][0]))
            got["live"] = next(iter(sharded._live_streams.values()))
            got["groups"] = {g.group_id for g in box_groups(sharded)}
            got["added_group"] = sharded._find_group(got["batches"][1]["added"]).group_id
        finally:
            for q in queries_.values():
                q.stop()
    return got


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_the_shards_rows_equal_the_whole_groups_and_the_brute_force(run):
    for f, b in enumerate(run["batches"]):
        sharded, whole = b["out"][SHARDS], b["out"][0]
        assert cells(vars(r) for r in sharded) == cells(vars(r) for r in whole), f
        rejected = [r.seq for r in sharded if r.op == "rejected"]
        assert sorted(rejected) == sorted(b["rejected"]), f    # each once: not per shard
        assert {r.subscription_id for r in sharded if r.op != "rejected"} - set(b["views"]) == set(), f
        for sid, (mine, want) in b["views"].items():
            kind, desc = b["kinds"][sid]
            if kind == "topk":
                mine = [{"id": key, "v": v} for key, v in
                        sorted((mine or {}).items(), key=lambda kv: ((-1 if desc else 1) * kv[1], kv[0]))]
            assert mine == want, (f, sid)


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_a_change_reaches_its_shards_and_the_counters_show_them(run):
    b = run["batches"][1]
    keys = run["live"].box_shards[run["added_group"]].keys
    touched = {keys[int(subscription_shard([s], SHARDS)[0])] for s in (b["dropped"], b["added"])}
    assert b["published"] == touched
    assert set(run["live"].box_shards) == run["groups"]
    for gid in run["groups"]:   # each shard in a state partition of its own (two: two_shuffle_partitions)
        keys = run["live"].box_shards[gid].keys
        assert len(keys) == SHARDS and sorted(spark_partition(k, 2) for k in keys) == [0, 1], keys
    assert not any(b["added"] == r.subscription_id for r in run["batches"][0]["out"][SHARDS])
    assert any(b["added"] == r.subscription_id for c in run["batches"][1:] for r in c["out"][SHARDS]) or \
        b["views"][b["added"]][1] is None
    assert not any(b["dropped"] == r.subscription_id for c in run["batches"][1:] for r in c["out"][SHARDS])
    first, second, last = run["stats"]
    assert first["shard_builds"] == SHARDS * len(run["groups"])   # each shard seeded from its base
    assert second["subscription_changes"] == 1   # the one shard the change touched, no other
    assert last["shard_builds"] > second["shard_builds"]   # the restart rebuilt the shards from the state store
    assert first["rejected"] == len(run["batches"][0]["rejected"])   # each once
