"""``Engine.stream`` over RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG groups run in two stages (issue 16 item 4;
``runtime/stream.py``, "a large top-k, DISTINCT or aggregate group in two stages"): the stateful stage holds the rows
and no subscription and emits per-update messages (top-k: Paint-Dense, 002 §III-A); one task per subscription shard
(CRC32 of the id) delivers them to its subscribers, whose state (top-k lists, exact counts and sums) lives in the
stream's directory -- a base and one log file per micro-batch -- and in the workers' caches.

* Through Spark (``range_subscription_shards`` 2 and 0 side by side over the same files): the two streams' rows are
  equal row for row; every subscription's view (its result before the micro-batch, the notifications applied in seq
  order) equals a brute force over the table after every seq, across upserts, deletes, X-moves, a key several times
  in one micro-batch, NULL X / Y / tag, ties, ranges no row is in, infinite bounds and rejected rows; subscriptions
  added and dropped while the stream runs (the added seeded by stage 1); the stream stopped and restarted from its
  checkpoint goes on equal.
* Without Spark (PySpark's ``TwsTester`` for the stateful operator, the stage-2 functions called directly; hypothesis
  draws the micro-batches and the workers' fates -- a cold worker, one left behind, a replayed micro-batch, a
  compaction): the two stages' rows equal the whole group's processor's, every column.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import random
import sys
from collections import Counter
from pathlib import Path
from unittest import mock

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub import Engine
from sparksub.operators.shared.range_classes import RangeClassSnapshot
from sparksub.operators.shared.range_shard_stream import members_after, shard_changes
from sparksub.operators.shared.schemas import DELETE, UPSERT, mode_schema, with_reason
from sparksub.runtime import stream as spark_stream
from sparksub.runtime import stream_control

sys.path.insert(0, str(Path(__file__).parent))   # the RANGE_MIN two-stage test's stage 2 without Spark, its helpers
from test_stream_range_shards import _cell, stage_two, two_shuffle_partitions

STREAM_SCHEMA = "k string, x double, y double, tag string, _op string, _seq bigint"
SHARDS = 2
X_MAX, Y_MAX = 14, 5   # small domains: ties in X and in Y, repeated tags
TOPK = "SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y LIMIT :k"
DISTINCT = "SELECT DISTINCT tag FROM t WHERE x BETWEEN :lo AND :hi"
SUM = "SELECT SUM(y) FROM t WHERE x BETWEEN :lo AND :hi"
KINDS = {"t": "topk", "d": "distinct", "a": "sum"}


def bounds(rnd: random.Random, n: int) -> list:
    """Short and long ranges, a point range, infinite bounds, a range no row is in."""
    out = [(float(lo), float(lo + rnd.randint(0, 7))) for lo in (rnd.randint(-2, X_MAX) for _ in range(n))]
    return out + [(4.0, 4.0), (-math.inf, math.inf), (-math.inf, 5.0), (40.0, 50.0)]


def subscribe(e: Engine, subs: dict, prefix: str, ranges: list, ks: list) -> None:
    """``ranges`` as subscriptions ``<kind><prefix><i>`` of each class (top-k with ``ks``), in ``e`` and the
    oracle's ``subs`` (id -> (kind, lo, hi, k))."""
    for letter, sql in (("t", TOPK), ("d", DISTINCT), ("a", SUM)):
        ids = [f"{letter}{prefix}{i}" for i in range(len(ranges))]
        params = {"id": ids, "lo": [r[0] for r in ranges], "hi": [r[1] for r in ranges]}
        if letter == "t":
            params["k"] = ks
        e.subscribe_many(sql, params)
        subs.update({s: (KINDS[letter], lo, hi, k) for s, (lo, hi), k in zip(ids, ranges, ks)})


def setup(spark, shards: int):
    """An engine over t with a top-k, a DISTINCT and a SUM group (``shards`` subscription shards each), and the
    oracle's rows and subscriptions; the same for every ``shards``."""
    rnd = random.Random(16)
    e = Engine(spark)
    e.range_subscription_shards = shards
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE, tag STRING)")
    rows = {f"k{i:02d}": (float(rnd.randint(0, X_MAX)), float(rnd.randint(0, Y_MAX)), rnd.choice("abcd"))
            for i in range(30)}
    rows["kx"], rows["ky"], rows["kt"] = (None, 1.0, "a"), (3.0, None, "b"), (3.0, 2.0, None)
    e.load("t", [{"k": k, "x": x, "y": y, "tag": tag} for k, (x, y, tag) in rows.items()])
    subs: dict = {}
    ranges = bounds(rnd, 14)
    subscribe(e, subs, "", ranges, [rnd.randint(1, 3) for _ in ranges])
    return e, rows, subs, rnd


def change(e: Engine, subs: dict, step: int) -> None:
    """Subscription change ``step`` to ``e`` and the oracle's ``subs``: some added (one with a k no one had), some
    dropped, one dropped and created again with other bounds."""
    if step == 1:
        subscribe(e, subs, "n", [(2.0, 9.0), (0.0, 0.0), (-math.inf, 3.0)], [2, 4, 1])
        for letter in "tda":
            e.unsubscribe(f"{letter}0")
            del subs[f"{letter}0"]
            e.unsubscribe(f"{letter}1")
        for letter, sql in (("t", TOPK), ("d", DISTINCT), ("a", SUM)):
            params = {"id": [f"{letter}1"], "lo": [5.0], "hi": [12.0]}
            if letter == "t":
                params["k"] = [3]
            e.subscribe_many(sql, params)
            subs[f"{letter}1"] = (KINDS[letter], 5.0, 12.0, 3)
    else:
        e.unsubscribe("tn0")
        del subs["tn0"]
        subscribe(e, subs, "m", [(6.0, 6.0), (1.0, 13.0)], [1, 2])


def gen_batch(rnd: random.Random, f: int, rows: dict) -> list:
    """One micro-batch of updates to t (the oracle's ``rows`` are not changed here)."""
    live = dict(rows)
    batch = []
    for j in range(24):
        r = rnd.random()
        key = rnd.choice(sorted(live))
        if j == 2:
            u = {"k": f"gone{f}", "_op": "delete"}                                         # unknown key: rejected
        elif j == 5:
            u = {"k": key, "x": 3.0, "y": math.inf, "tag": "a"}                           # ±inf: rejected
        elif j == 7:
            u = {"k": key, "x": None, "y": 2.0, "tag": "b"}                               # NULL X
        elif j == 9:
            u = {"k": key, "x": 5.0, "y": None, "tag": None}                              # NULL Y, NULL tag
        elif r < 0.15:
            u = {"k": key, "_op": "delete"}
        elif r < 0.3:
            u = {"k": f"n{f}_{j}", "x": float(rnd.randint(0, X_MAX)), "y": float(rnd.randint(0, Y_MAX)),
                 "tag": rnd.choice("abcde")}
        else:   # a Y change, often an X-move, a new tag
            x = live[key][0] if rnd.random() < 0.5 and live[key][0] is not None else float(rnd.randint(0, X_MAX))
            u = {"k": key, "x": x, "y": float(rnd.randint(0, Y_MAX)), "tag": rnd.choice("abcd")}
        if u.get("_op") == "delete":
            live.pop(u["k"], None)
        elif valid(u, live):
            live[u["k"]] = (u["x"], u["y"], u["tag"])
        batch.append(u)
    k = sorted(rows)[f + 1]   # one key several times: in, out of every range (NULL X), an X-move back in
    batch += [{"k": k, "x": 2.0, "y": 0.0, "tag": "z"}, {"k": k, "x": None, "y": 0.0, "tag": "z"},
              {"k": k, "x": 12.0, "y": 1.0, "tag": "y"}, {"k": k, "x": 3.0, "y": 1.0, "tag": "z"}]
    return batch


def valid(u: dict, rows: dict) -> bool:
    if u.get("_op") == "delete":
        return u["k"] in rows
    return not (isinstance(u.get("y"), float) and math.isinf(u["y"]))


def apply_update(rows: dict, u: dict) -> bool:
    """``u`` applied to the oracle's ``rows`` if valid; whether it was."""
    if not valid(u, rows):
        return False
    if u.get("_op") == "delete":
        del rows[u["k"]]
    else:
        rows[u["k"]] = (u["x"], u["y"], u["tag"])
    return True


def value(rows: dict, kind: str, lo: float, hi: float, k: int):
    """Brute force over the rows whose X is in [lo, hi]: the top-k keys by (y, key), the set of tags, SUM(y)."""
    live = {key: r for key, r in rows.items() if r[0] is not None and lo <= r[0] <= hi}
    if kind == "topk":
        return [key for _, key in sorted((r[1], key) for key, r in live.items() if r[1] is not None)[:k]]
    if kind == "distinct":
        return {r[2] for r in live.values() if r[2] is not None}
    ys = [r[1] for r in live.values() if r[1] is not None]
    return sum(ys) if ys else None


class View:
    """A subscriber's local copy of its result, the notifications applied to it (a top-k as key -> y)."""

    def __init__(self, kind: str, start):
        self.kind = kind
        self.items = ({key: None for key in start} if kind == "topk" else set(start) if kind == "distinct"
                      else start)

    def apply(self, r: dict) -> None:
        if r["op"] in ("enter", "update") and self.kind == "topk":
            self.items[r["item_key"]] = r["value"]
        elif r["op"] == "leave":
            del self.items[r["item_key"]]
        elif r["op"] == "add":
            self.items.add(r["item_text"])
        elif r["op"] == "remove":
            self.items.discard(r["item_text"])
        else:
            assert r["op"] == "update", r
            self.items = r["value"]

    def result(self, rows: dict, k: int):
        if self.kind == "topk":   # the local list's keys in the table's order (its y, then key)
            return [key for _, key in sorted((rows[key][1], key) for key in self.items)][:k]
        return self.items


def check_views(rows: dict, subs: dict, batch: list, seq0: int, notes: list) -> set:
    """Each subscription's view after every seq equals the brute force (module docstring); applies ``batch`` to
    ``rows``; returns the rejected seqs."""
    views = {s: View(kind, value(rows, kind, lo, hi, k)) for s, (kind, lo, hi, k) in subs.items()}
    by_seq: dict = {}
    for r in notes:
        by_seq.setdefault(r["seq"], []).append(r)
    assert {r["subscription_id"] for r in notes} <= set(subs)
    rejected = set()
    for seq, u in enumerate(batch, seq0):
        if not apply_update(rows, u):
            rejected.add(seq)
            assert seq not in by_seq
            continue
        for r in by_seq.get(seq, []):
            views[r["subscription_id"]].apply(r)
        for s, (kind, lo, hi, k) in subs.items():
            got, want = views[s].result(rows, k), value(rows, kind, lo, hi, k)
            assert got == want, (seq, u, s, got, want)
    return rejected


def rows_of(table_rows) -> Counter:
    return Counter(tuple(sorted((k, _cell(v)) for k, v in r.items())) for r in table_rows)


# ---- through Spark -----------------------------------------------------------------------------------------------
def feed(spark, where: tuple, batch: list, seq0: int, queries: dict, outputs: dict) -> dict:
    """``batch`` (``_seq`` from ``seq0``) as a new file of the source (``where``: its directory, a scratch directory,
    the file's name), every query run to its end: each stream's rows of those seqs (``outputs``: its parquet)."""
    src, tmp, name = where
    scratch = os.path.join(tmp, f".{name}")
    with open(scratch, "w") as fh:
        fh.writelines(json.dumps({**u, "_seq": seq}) + "\n" for seq, u in enumerate(batch, seq0))
    os.rename(scratch, os.path.join(src, name))
    for q in queries.values():
        q.processAllAvailable()
    return {n: [{k: _cell(v) for k, v in r.asDict().items()} for r in spark.read.parquet(d).collect()
                if seq0 <= r.seq < seq0 + len(batch)] for n, d in outputs.items()}


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """Two streams over the same files (2 shards, whole); changes before micro-batches 1 and 2; the streams stopped
    after micro-batch 1 and restarted from their checkpoints for micro-batch 2."""
    src, tmp = (str(tmp_path_factory.mktemp(f"classes_{n}")) for n in ("in", "tmp"))
    engines = {n: setup(spark, n) for n in (SHARDS, 0)}
    got = {"batches": [], "whole": [], "stats": []}
    queries, frames = {}, {}

    def start(n):
        df, out_dir, ck = frames[n]
        queries[n] = (df.writeStream.format("parquet").option("path", out_dir).option("checkpointLocation", ck)
                      .outputMode("append").start())
    with two_shuffle_partitions(spark):
        try:
            for n, (e, *_) in engines.items():
                # the sharded stream seeds its shards in a Spark task from the rows' base: the driver builds no
                # rows' core (RangeClassSnapshot.build refused here, in the driver's process only)
                with mock.patch.object(RangeClassSnapshot, "build", side_effect=AssertionError("built on the driver")) \
                        if n == SHARDS else contextlib.nullcontext():
                    df = e.stream("t", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1)
                                  .json(src))
                frames[n] = (df, *(str(tmp_path_factory.mktemp(f"classes_{n}_{d}")) for d in ("out", "ck")))
                start(n)
            _, rows, subs, rnd = engines[SHARDS]
            for f in range(3):
                if f in (1, 2):
                    for other, _, other_subs, _ in engines.values():
                        change(other, other_subs, f)
                if f == 2:   # a restart from the checkpoint: the shards' state from the stream's files
                    for n, query in list(queries.items()):
                        query.stop()
                        start(n)
                batch, seq0 = gen_batch(rnd, f, rows), 1000 * (f + 1)
                out = feed(spark, (src, tmp, f"part-{f}.json"), batch, seq0, queries,
                           {n: d for n, (_, d, _) in frames.items()})
                got["batches"].append((dict(rows), dict(subs), batch, seq0, out[SHARDS]))
                got["whole"].append(out[0])
                got["stats"].append(spark_stream.stream_stats(frames[SHARDS][0]))
                for u in batch:
                    apply_update(rows, u)
            got["plan"] = frames[SHARDS][0]._jdf.queryExecution().toString()
            got["live"] = next(iter(engines[SHARDS][0]._live_streams.values()))
        finally:
            for q in queries.values():
                q.stop()
    return got


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_every_view_equals_the_brute_force_and_the_whole_groups_rows(run):
    for f, (rows, subs, batch, seq0, out) in enumerate(run["batches"]):
        notes = [r for r in out if r["op"] != "rejected"]
        rejected = check_views(dict(rows), subs, batch, seq0, notes)
        assert sorted(r["seq"] for r in out if r["op"] == "rejected") == sorted(rejected)   # each once
        assert {s[0] for s in (r["subscription_id"] for r in notes)} == set("tda"), f   # every class notifies
        if f >= 1:   # the changes from the next micro-batch: the added notify, the dropped do not
            assert {"t0", "d0", "a0"}.isdisjoint(r["subscription_id"] for r in notes)
            assert {"tn0", "dn0", "an0"} & {r["subscription_id"] for r in notes}
        assert rows_of(out) == rows_of(run["whole"][f]), f


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_two_stages_in_the_plan_and_the_counters(run):
    missing = [op for op in ("TransformWithStateInPySpark", "_to_shards", "RepartitionByExpression [j_slot", "_shards")
               if op not in run["plan"]]
    assert not missing, (missing, run["plan"])
    assert set(run["live"].range_class_shards) == set(run["live"].ranges)   # every group in two stages
    first, *_, last = run["stats"]
    assert first["shard_builds"] >= 1 and first["notifications"] >= 1
    assert last["subscription_changes"] >= 3          # the three groups, twice
    assert last["shard_builds"] > first["shard_builds"]   # the restart rebuilt the shards from their files


# ---- without Spark: the two stages against the whole group's processor, row for row -----------------------------
def processors(e: Engine, tmp_path) -> dict:
    """The whole groups' processor and stage 1 of the same groups in two stages (``TwsTester``), the engine
    publishing its changes to both as to running streams of its own."""
    from pyspark.sql.streaming.tws_tester import TwsTester
    state = e._tables["t"]
    entries = list(e._groups.values())
    columns = {g.group_id: g.family.stream_columns(g.physical, state.definition) for g in entries}

    def whole(where, live) -> dict:
        return {g.group_id: spark_stream.GroupSpec(g.group_id, *columns[g.group_id][:2],
                                                   spark_stream._Deferred(e._snapshot(state, g)),
                                                   *columns[g.group_id][2:]) for g in entries}

    def two_stages(where, live) -> dict:
        out = {}
        for n, g in enumerate(entries):
            (x, y, base, text, x2), (_, stored, ks), live.range_class_shards[g.group_id] = \
                e._range_class_stream_stages(state, g, SHARDS, where, n)
            out[g.group_id] = spark_stream.GroupSpec(g.group_id, x, y, base, text, x2, shards=tuple(stored),
                                                     hashed=True, ks=tuple(ks))
        return out
    wide = e._output_schema(with_reason(mode_schema("unicast")), "unicast", entries, state.definition)
    testers = {}
    for how, make in (("whole", whole), ("sharded", two_stages)):
        (tmp_path / how).mkdir()
        live = stream_control.LiveStream(how, "t", str(tmp_path / how), "unicast", ranges=set(columns))
        groups = make(tmp_path / how, live)
        e._live_streams[how] = live
        spec = spark_stream.stage_one_spec(spark_stream.StreamSpec(
            e.uid, how, "t", "string", "unicast", wide, groups, min(groups), True, None,
            stream_control.StreamControl(tmp_path / how, e.uid, how), "k"))
        testers[how] = (spec, TwsTester(spark_stream._processor_class()(spec)))
    return testers


def checked(batch: list, seq0: int) -> pa.Table:
    """A micro-batch as ``checked_updates`` hands it on (the row check's rejections left out: the operator sees only
    valid rows, and deletes, whose key it checks)."""
    recs = [u for u in batch if u.get("_op") == "delete" or valid(u, {})]
    seqs = [seq0 + i for i, u in enumerate(batch) if u.get("_op") == "delete" or valid(u, {})]
    return pa.table({"k": pa.array([u["k"] for u in recs], pa.string()),
                     "x": pa.array([u.get("x") for u in recs], pa.float64()),
                     "y": pa.array([u.get("y") for u in recs], pa.float64()),
                     "tag": pa.array([u.get("tag") for u in recs], pa.string()),
                     spark_stream.OP_COLUMN: pa.array([DELETE if u.get("_op") == "delete" else UPSERT for u in recs],
                                                      pa.int8()),
                     spark_stream.SEQ_COLUMN: pa.array(seqs, pa.int64()),
                     spark_stream.REASON_COLUMN: pa.nulls(len(recs), pa.string())})


def micro_batch(testers: dict, batch: list, seq0: int, f: int, stage2, fate: str) -> dict:
    """Micro-batch ``f`` through both processors; stage 2 after what ``fate`` makes of the workers' shards."""
    table = checked(batch, seq0)
    out = {}
    with mock.patch.object(stream_control, "batch_id", lambda: f):
        for how, (spec, tester) in testers.items():
            got = []
            for gid in sorted(spec.groups):
                frame = pd.DataFrame(spark_stream.routed_rows(table, spec.groups[gid], "k")).assign(group_id=gid)
                got.append(tester.testInPandas(gid, frame[["key", "x", "y", "t", "x2", "op", "ord", "reason"]]))
            out[how] = pa.Table.from_pandas(pd.concat(got, ignore_index=True), schema=spec.schema, preserve_index=False)
        stage1 = out["sharded"]
        if fate == "cold worker":
            spark_stream._CLASS_SHARDS.clear()
        out["sharded"] = stage2(stage1)
        if fate == "replayed":   # the worker's shards are ahead: a replay rebuilds them from the files
            again = stage2(stage1)
            assert rows_of(again.to_pylist()) == rows_of(out["sharded"].to_pylist())
    return out


#: (key, kind, x, y, tag): keys repeat within a micro-batch (X-moves, ties, NULLs, deletes of known and unknown keys)
_UPDATES = st.lists(st.tuples(st.integers(0, 34), st.sampled_from(["upsert", "delete", "null_x", "null_y"]),
                              st.integers(0, X_MAX), st.integers(-2, 7), st.sampled_from("abcz")), min_size=1,
                    max_size=25)
_FATES = st.sampled_from(["same worker", "cold worker", "replayed", "behind"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(_UPDATES, _FATES), min_size=1, max_size=4), cut=st.integers(0, 3),
       compaction=st.sampled_from([2, 64]))
def test_two_stages_equal_the_whole_processor_row_for_row(tmp_path_factory, batches, cut, compaction):
    """Before micro-batch ``cut`` the engine adds and drops subscriptions (one created again with other bounds);
    each micro-batch's stage 2 runs on the worker as ``fate`` leaves it; compactions every ``compaction``."""
    e, _, subs, _ = setup(None, SHARDS)
    testers = processors(e, tmp_path_factory.mktemp("tws"))
    wide = testers["whole"][0].schema
    stage2 = stage_two(testers["sharded"][0], wide)
    spark_stream._CLASS_SHARDS.clear()
    left_behind = None
    with mock.patch.object(spark_stream, "SHARD_COMPACTION_BATCHES", compaction):
        for f, (drawn, fate) in enumerate(batches):
            if f == cut:
                change(e, subs, 1)
            if f == cut + 1:
                change(e, subs, 2)
            if fate == "behind" and left_behind is not None:   # a worker that last ran the shards a while ago
                spark_stream._CLASS_SHARDS.clear()
                spark_stream._CLASS_SHARDS.update(pickle.loads(left_behind))
            left_behind = pickle.dumps(spark_stream._CLASS_SHARDS) if f % 2 == 0 else left_behind
            batch = [{"k": f"k{key:02d}", "_op": "delete"} if kind == "delete" else
                     {"k": f"k{key:02d}", "x": None if kind == "null_x" else float(x),
                      "y": None if kind == "null_y" else float(y), "tag": tag}
                     for key, kind, x, y, tag in drawn]
            out = micro_batch(testers, batch, 1000 * (f + 1), f, stage2, fate)
            assert rows_of(out["sharded"].to_pylist()) == rows_of(out["whole"].to_pylist()), (f, fate)


def test_births_name_what_a_change_adds_whatever_versions_were_skipped():
    """An id keeps its birth while its bounds stay; created again with other bounds it is born again: a micro-batch
    that jumps from change 1 to 3 seeds exactly the ids born after 1, and every shard learns its ids."""
    e, *_ = setup(None, SHARDS)
    group = next(g for g in e._groups.values() if g.physical.klass == "RANGE_AGG")
    rows = e._snapshot(e._tables["t"], group).build()
    _, v1 = members_after(None, ["a", "b", "c"], [0.0, 1.0, 2.0], [5.0, 6.0, 7.0], [1, 1, 1], 1, SHARDS)
    _, v2 = members_after(v1, ["a", "b"], [0.0, 1.0], [5.0, 6.0], [1, 1], 2, SHARDS)
    m3, v3 = members_after(v2, ["a", "b", "d"], [0.0, 3.0, 4.0], [5.0, 6.0, 9.0], [1, 1, 1], 3, SHARDS)
    assert dict(zip(v3.ids.tolist(), v3.birth.tolist())) == {"a": 1, "b": 3, "d": 3}
    changes = shard_changes(rows, m3, 1, 3, SHARDS)
    assert sorted(s for c in changes.values() for s in c.added_ids.tolist()) == ["b", "d"]
    assert sorted(s for c in changes.values() for s in c.ids.tolist()) == ["a", "b", "d"]
    for c in changes.values():   # the seeds: the exact (count, sum) of each added range now
        assert len(c.seed[0]) == len(c.added_ids)
