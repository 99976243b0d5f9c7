"""``Engine.stream`` over RANGE_AGG groups in two stages with their rows in X zones (issue 16 item 4;
``runtime/stream.py``, "a two-stage RANGE_AGG group's rows in X zones"; ``operators/shared/range_zone_stream.py``):
stage 1 is Z state partitions ``<group>#r<i>``, each every row in its state store and the rows of its X zone in its
index, emitting the aggregate messages at the X it owns (000 §4); the subscription shards merge the zones' messages
(``range_zones.merge_zone_messages``) and add the zones' partial seeds up (``AggGroup.merge_seeds``).

* Through Spark (``range_zones`` 3 and 0, both with 2 subscription shards, side by side over the same files): the
  two streams' rows are equal row for row; every subscription's view (its result at the start, the notifications
  applied in seq order) equals a brute force over the table after every seq -- upserts, deletes, X-moves across the
  cuts, a key several times in one micro-batch, NULL X / Y, ties, deletes of unknown keys and a malformed row (each
  out once), ranges empty, infinite, on a cut; SUM, COUNT(*) and AVG; subscriptions added (seeded by the zones'
  partial states) and dropped while the stream runs; the streams stopped and restarted from their checkpoints.
* Without Spark (hypothesis): the zones' stage-1 messages, shuffled as an exchange may, merged by the shard equal
  the whole group's stage 1 row for row, every column; the zones' partial seeds -- at the start and in a change --
  added up equal the whole group's.
"""
from __future__ import annotations

import contextlib
import math
import pickle
import random
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub import Engine
from sparksub.operators.agg.group import AggSnapshot
from sparksub.operators.shared.range_classes import RangeClassSnapshot
from sparksub.operators.shared.range_shard_stream import members_after, shard_changes
from sparksub.operators.shared.range_shards import shard_bases
from sparksub.operators.shared.range_zone_stream import (
    StreamZone,
    merged_change,
    merged_messages,
    zone_keys,
    zoned_shard_bases,
)
from sparksub.operators.shared.range_zones import zone_cuts
from sparksub.operators.shared.schemas import DELETE, UPSERT
from sparksub.runtime import stream as spark_stream

sys.path.insert(0, str(Path(__file__).parent))   # the two-stage classes' stream test: its feeding and updates
from test_stream_range_shards import two_shuffle_partitions  # noqa: E402
from test_stream_range_shards_classes import (  # noqa: E402
    STREAM_SCHEMA,
    X_MAX,
    Y_MAX,
    apply_update,
    feed,
    gen_batch,
    rows_of,
)

SHARDS, ZONES = 2, 3
TEMPLATES = {"s": ("sum", "SELECT SUM(y) FROM t WHERE x BETWEEN :lo AND :hi"),
             "c": ("count", "SELECT COUNT(*) FROM t WHERE x BETWEEN :lo AND :hi"),
             "v": ("avg", "SELECT AVG(y) FROM t WHERE x BETWEEN :lo AND :hi")}


def value(rows: dict, func: str, lo: float, hi: float):
    """Brute force over the rows whose X is in [lo, hi]: COUNT(*) (a NULL Y counts), SUM / AVG of the non-NULL Y."""
    live = [r for r in rows.values() if r[0] is not None and lo <= r[0] <= hi]
    if func == "count":
        return len(live)
    ys = [r[1] for r in live if r[1] is not None]
    if not ys:
        return None
    return sum(ys) if func == "sum" else sum(ys) / len(ys)


def subscribe(e: Engine, subs: dict, prefix: str, ranges: list) -> None:
    for letter, (func, sql) in TEMPLATES.items():
        ids = [f"{letter}{prefix}{i}" for i in range(len(ranges))]
        e.subscribe_many(sql, {"id": ids, "lo": [r[0] for r in ranges], "hi": [r[1] for r in ranges]})
        subs.update({s: (func, lo, hi) for s, (lo, hi) in zip(ids, ranges)})


def start_rows() -> dict:
    rnd = random.Random(4)
    rows = {f"k{i:02d}": (float(rnd.randint(0, X_MAX)), float(rnd.randint(0, Y_MAX)), rnd.choice("abcd"))
            for i in range(30)}
    rows["kx"], rows["ky"] = (None, 1.0, "a"), (3.0, None, "b")
    return rows


def cuts_of(rows: dict) -> tuple:
    return zone_cuts([np.nan if r[0] is None else r[0] for r in rows.values()], ZONES)


def zoned_engine(spark, zones: int) -> tuple:
    """An engine over t holding :func:`start_rows`, a range group in 2 subscription shards with its rows in ``zones`` X
    zones (``Engine.range_zones``; 0: whole); (the engine, the rows, their cuts)."""
    e = Engine(spark)
    e.range_subscription_shards, e.range_zones = SHARDS, zones
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE, tag STRING)")
    rows = start_rows()
    e.load("t", [{"k": k, "x": x, "y": y, "tag": tag} for k, (x, y, tag) in rows.items()])
    return e, rows, cuts_of(rows)


def setup(spark, zones: int):
    """An engine over t with SUM, COUNT(*) and AVG groups in 2 subscription shards, their rows in ``zones`` X zones
    (``Engine.range_zones``; 0: whole), and the oracle's rows and subscriptions."""
    rnd = random.Random(16)
    e, rows, cut = zoned_engine(spark, zones)
    ranges = [(float(lo), float(lo + rnd.randint(0, 7))) for lo in (rnd.randint(-2, X_MAX) for _ in range(8))]
    ranges += [(c, c) for c in cut] + [(c - 1.0, c) for c in cut] + [(c, c + 2.0) for c in cut]   # on the cuts
    ranges += [(4.0, 4.0), (-math.inf, math.inf), (-math.inf, 5.0), (40.0, 50.0)]   # 40-50: no row
    subs: dict = {}
    subscribe(e, subs, "", ranges)
    return e, rows, subs, rnd


def change(e: Engine, subs: dict) -> None:
    """Some subscriptions added (on a cut, across the cuts), some dropped, one created again with other bounds."""
    cut = cuts_of(start_rows())
    subscribe(e, subs, "n", [(cut[0], cut[-1]), (0.0, 0.0), (-math.inf, cut[0])])
    for letter, (func, sql) in TEMPLATES.items():
        e.unsubscribe(f"{letter}0")
        del subs[f"{letter}0"]
        e.unsubscribe(f"{letter}1")
        e.subscribe_many(sql, {"id": [f"{letter}1"], "lo": [cut[0] - 2.0], "hi": [cut[-1] + 1.0]})
        subs[f"{letter}1"] = (func, cut[0] - 2.0, cut[-1] + 1.0)


def zone_batch(rnd: random.Random, f: int, rows: dict) -> list:
    """``gen_batch``'s micro-batch (unknown-key delete, a ±inf row, NULL X / Y, deletes, new keys, X-moves, a key
    four times) and X-moves across each cut and back."""
    batch = gen_batch(rnd, f, rows)
    cut = cuts_of(start_rows())
    for i, c in enumerate(cut):
        key = sorted(rows)[5 + i + f]
        batch += [{"k": key, "x": c - 1.0, "y": 2.0, "tag": "a"}, {"k": key, "x": c, "y": 3.0, "tag": "a"},
                  {"k": key, "x": c - 0.5, "y": 1.0, "tag": "a"}]
    return batch


def check_views(rows: dict, subs: dict, batch: list, seq0: int, notes: list) -> set:
    """Each subscription's view (its brute-force result at the start, then its notifications in seq order) equals
    the brute force after every seq (an AVG too: the exact sum over the count, correctly rounded either way);
    ``batch`` applied to ``rows``; the rejected seqs."""
    assert {r["op"] for r in notes} <= {"update"} and {r["subscription_id"] for r in notes} <= set(subs)
    views = {s: value(rows, *subs[s]) for s in subs}
    rejected = set()
    for seq, u in enumerate(batch, seq0):
        mine = [r for r in notes if r["seq"] == seq]
        if not apply_update(rows, u):
            rejected.add(seq)
            assert not mine, (seq, u)
            continue
        views.update({r["subscription_id"]: r["value"] for r in mine})
        assert views == {s: value(rows, *subs[s]) for s in subs}, (seq, u)
    return rejected


# ---- through Spark -----------------------------------------------------------------------------------------------
def shard_logs(df) -> dict:
    """(group, shard, micro-batch) -> what the shard's task logged (``ShardLogEntry``: the change it applied, the
    messages it delivered) in the stream's directory."""
    root = Path(spark_stream.stream_directory(df.sparksub_stream_id)) / "range_class_shards"
    out = {}
    for path in root.glob("*/*/log-*.pickle"):
        with open(path, "rb") as fh:
            out[(path.parent.parent.name, path.parent.name, path.stem)] = pickle.load(fh)
    return out


class Streams:
    """Each engine's stream of t over one bounded file source, written to parquet with a checkpoint; ``restart()``
    stops every query and starts it again from its checkpoint."""

    def __init__(self, spark, tmp_path_factory, engines: dict, refuse_driver_build: int):
        self.src = str(tmp_path_factory.mktemp("agg_zones_in"))
        self.tmp = str(tmp_path_factory.mktemp("agg_zones_tmp"))
        self.frames, self.queries = {}, {}
        for n, (e, *_) in engines.items():
            # the zones' seeds are added up in a Spark task: the driver builds no rows' core
            refused = mock.patch.object(RangeClassSnapshot, "build", side_effect=AssertionError("built on the driver"))
            with refused if n == refuse_driver_build else contextlib.nullcontext():
                df = e.stream("t", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1)
                              .json(self.src))
            self.frames[n] = (df, *(str(tmp_path_factory.mktemp(f"agg_zones_{n}_{d}")) for d in ("out", "ck")))
            self._start(n)

    def _start(self, n) -> None:
        df, out_dir, ck = self.frames[n]
        writer = df.writeStream.format("parquet").option("path", out_dir).option("checkpointLocation", ck)
        self.queries[n] = writer.outputMode("append").start()

    def restart(self) -> None:
        for n, query in list(self.queries.items()):
            query.stop()
            self._start(n)

    def feed(self, spark, batch: list, seq0: int, f: int) -> dict:
        return feed(spark, (self.src, self.tmp, f"part-{f}.json"), batch, seq0, self.queries,
                    {n: d for n, (_, d, _) in self.frames.items()})

    def stop(self) -> None:
        for q in self.queries.values():
            q.stop()


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """Two streams over the same files (rows in 3 X zones, whole); before micro-batch 1 a change, and the streams
    stopped and restarted from their checkpoints."""
    engines = {n: setup(spark, n) for n in (ZONES, 0)}
    got = {"batches": [], "whole": [], "stats": [],
           "start": {n: {s: e.result(s) for s in subs} for n, (e, _, subs, _) in engines.items()}}
    _, rows, subs, rnd = engines[ZONES]

    def change_all():
        for other, _, other_subs, _ in engines.values():
            change(other, other_subs)
    return run_zoned_and_whole(spark, tmp_path_factory, engines, rows, subs, lambda f: zone_batch(rnd, f, rows),
                               change_all, got)


def run_class_zones(spark, tmp_path_factory, setup, change, batch_of) -> dict:
    """A zoned class's module run (the DISTINCT and top-k zones' tests): ``setup(spark, zones)`` -> (engine, rows,
    subs) for the zoned engine (:data:`ZONES`) and the whole one (0), ``change(engine, subs)`` to each before
    micro-batch 1, ``batch_of(rnd, f, rows)`` the micro-batches (:func:`run_zoned_and_whole`); ``end``: the table
    after them."""
    engines = {n: setup(spark, n) for n in (ZONES, 0)}
    got = {"batches": [], "whole": [], "stats": []}
    _, rows, subs = engines[ZONES]
    rnd = random.Random(7)

    def change_all():
        for other, _, other_subs in engines.values():
            change(other, other_subs)
    run_zoned_and_whole(spark, tmp_path_factory, engines, rows, subs, lambda f: batch_of(rnd, f, rows), change_all,
                        got)
    got["end"] = dict(rows)
    return got


def run_zoned_and_whole(spark, tmp_path_factory, engines: dict, rows: dict, subs: dict, batch_of, change_all,
                        got: dict) -> dict:
    """Two micro-batches (``batch_of(f)``) through the zoned stream (``engines[zones]``, its key the zone count) and
    the whole one (``engines[0]``); before the second, ``change_all()`` and both streams restarted from their
    checkpoints (the zones' rows from the state store).  ``got`` gains, per micro-batch, the rows and subscriptions
    before it, the batch, its first seq and the zoned output (``batches``), the whole output (``whole``), the zoned
    stream's stats (``stats``), and the shards' logs at the end (``logs``); ``rows`` ends as the table."""
    zones = max(engines)
    with two_shuffle_partitions(spark):
        streams = None
        try:
            streams = Streams(spark, tmp_path_factory, engines, zones)
            for f in range(2):
                if f == 1:
                    change_all()
                    streams.restart()
                batch, seq0 = batch_of(f), 1000 * (f + 1)
                out = streams.feed(spark, batch, seq0, f)
                got["batches"].append((dict(rows), dict(subs), batch, seq0, out[zones]))
                got["whole"].append(out[0])
                got["stats"].append(spark_stream.stream_stats(streams.frames[zones][0]))
                for u in batch:
                    apply_update(rows, u)
            got["logs"] = {n: shard_logs(df) for n, (df, *_) in streams.frames.items()}
        finally:
            if streams is not None:
                streams.stop()
    return got


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_every_view_equals_the_brute_force_and_the_whole_groups_rows(run):
    _, subs0, *_ = run["batches"][0]
    start_rows_ = run["batches"][0][0]
    assert {s: value(start_rows_, *subs0[s]) for s in subs0} == run["start"][ZONES]   # (the oracle's semantics)
    for f, (rows, subs, batch, seq0, out) in enumerate(run["batches"]):
        notes = [r for r in out if r["op"] != "rejected"]
        rejected = check_views(dict(rows), subs, batch, seq0, notes)
        assert sorted(r["seq"] for r in out if r["op"] == "rejected") == sorted(rejected), f   # each once
        assert {r["subscription_id"][0] for r in notes} == set(TEMPLATES), f   # every function notifies
        if f >= 1:   # the change from micro-batch 1 on: the added notify, the dropped do not
            assert {"s0", "c0", "v0"}.isdisjoint(r["subscription_id"] for r in notes)
            assert {"sn0", "cn0", "vn0"} & {r["subscription_id"] for r in notes}
        assert rows_of(out) == rows_of(run["whole"][f]), f


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_each_shard_got_the_whole_groups_messages_and_changes(run):
    """What a shard delivered and logged -- the zones' messages merged, the zones' partial seeds of a change added
    up -- is the whole group's stage 1's, row for row and in order (an aggregate subscriber adds a seq's deltas in
    any order: the rows alone would not tell a shard that skipped the merge)."""
    zoned, whole = run["logs"][ZONES], run["logs"][0]
    assert len(zoned) == 2 * len(TEMPLATES) * SHARDS
    assert same_shard_logs(zoned, whole, lambda seed: [np.asarray(a).tolist() for a in seed]) == \
        len(TEMPLATES) * SHARDS


def same_shard_logs(zoned: dict, whole: dict, seed_rows) -> int:
    """Assert the zoned stream's shards logged what the whole one's did (``shard_logs``): the messages row for row,
    the changes' ids and their seeds (``seed_rows(seed)``: comparable); the changes."""
    assert set(zoned) == set(whole)
    changes = 0
    for where, entry in whole.items():
        got = zoned[where]
        assert got.messages.to_pylist() == entry.messages.to_pylist(), where
        assert (got.change is None) == (entry.change is None), where
        if entry.change is not None:
            changes += 1
            assert got.change.ids.tolist() == entry.change.ids.tolist(), where
            assert got.change.added_ids.tolist() == entry.change.added_ids.tolist(), where
            assert seed_rows(got.change.seed or ()) == seed_rows(entry.change.seed or ()), where
    return changes


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_the_zones_in_the_counters(run):
    first, *_, last = run["stats"]
    assert first["zones"] == ZONES * len(TEMPLATES)   # 3 zone partitions per group
    assert first["zone_batches"] == ZONES * len(TEMPLATES) and first["zone_builds"] == ZONES * len(TEMPLATES)
    assert last["zone_batches"] == 2 * ZONES * len(TEMPLATES)
    assert last["zone_builds"] > first["zone_builds"]   # the restart rebuilt the zones from the state store
    assert last["subscription_changes"] >= ZONES * len(TEMPLATES)


# ---- without Spark: the zones' messages and seeds merged equal the whole group's ---------------------------------
def agg_rows(keys, xs, ys, func: str = "sum") -> AggSnapshot:
    """A RANGE_AGG rows snapshot (no subscription)."""
    e = np.empty(0)
    return AggSnapshot("g", "t", "x", None if func == "count" else "y", func, np.empty(0, dtype=object), e, e,
                       np.empty(0, dtype=np.int64), np.asarray(keys, dtype=object), np.asarray(xs, dtype=np.float64),
                       np.asarray(ys, dtype=np.float64))


def zone_groups(snap: AggSnapshot, n_zones: int) -> list:
    """Each zone's operator as a stream partition builds it from every row (``stream._built``)."""
    cuts = zone_cuts(snap.xs, n_zones)
    zones = [StreamZone("g", i, len(cuts) + 1, cuts, type(snap).group_class) for i in range(len(cuts) + 1)]
    return [spark_stream._built(spark_stream.GroupSpec(f"g#r{z.zone}", "x", "y", None, zone=z), snap)
            for z in zones], cuts


_X = st.one_of(st.integers(0, 9).map(float), st.just(None))
_Y = st.one_of(st.integers(-3, 5).map(float), st.just(None))
_ROWS = st.dictionaries(st.integers(0, 15), st.tuples(_X, _Y), min_size=2, max_size=16)
#: (key, delete?, x, y): keys repeat (X-moves, deletes, NULLs, a key several times)
_BATCH = st.lists(st.tuples(st.integers(0, 19), st.booleans(), _X, _Y), min_size=1, max_size=30)


def _table(rows_batch: list, seq0: int) -> pa.Table:
    return pa.table({"key": pa.array([f"k{k}" for k, *_ in rows_batch], pa.string()),
                     "x": pa.array([np.nan if x is None else x for _, _, x, _ in rows_batch], pa.float64()),
                     "y": pa.array([np.nan if y is None else y for *_, y in rows_batch], pa.float64()),
                     "op": pa.array([DELETE if d else UPSERT for _, d, *_ in rows_batch], pa.int8()),
                     "seq": pa.array(np.arange(seq0, seq0 + len(rows_batch)), pa.int64())})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=_ROWS, batches=st.lists(_BATCH, min_size=1, max_size=3), n_zones=st.sampled_from([2, 3]),
       func=st.sampled_from(["sum", "count", "avg"]), shuffle=st.randoms(use_true_random=False))
def test_zones_merged_equal_the_whole_group(start, batches, n_zones, func, shuffle):
    keys = [f"k{k}" for k in start]
    xs = [np.nan if x is None else x for x, _ in start.values()]
    # (COUNT(*)'s Y is a constant 0 in a stream: only a NULL X leaves the ranges, stream.routed_rows)
    ys = [0.0 if func == "count" else np.nan if y is None else y for _, y in start.values()]
    snap = agg_rows(keys, xs, ys, func)
    whole = snap.build()
    zones, cuts = zone_groups(snap, n_zones)
    ids = [f"s{i}" for i in range(12)]
    x1 = [-math.inf, 0.0, 2.0, 3.0, 4.0, 9.0, 5.0, *(list(cuts) + [1.0] * 5)[:5]]
    x2 = [math.inf, 0.0, 7.0, 3.0, 9.0, 9.0, 1.0, *(list(cuts) + [4.0] * 5)[:5]]
    k = [1] * len(ids)
    # the start: the shards' seeds added up over the zones, one core at a time
    for key, x, y in zip(keys, xs, ys):   # each zone's index holds exactly its rows (a NULL X or Y: none)
        held = [z.zone for z in zones if z.group.core.get(key) is not None]
        assert held == ([] if x != x or y != y else [int(np.searchsorted(cuts, x, "right"))])
    got = zoned_shard_bases(iter([z.group for z in zones]), "g", ids, x1, x2, k, SHARDS, str, cuts)
    want = shard_bases(whole, "g", ids, x1, x2, k, SHARDS, str)
    for j in want:
        assert got[j].ids.tolist() == want[j].ids.tolist()
        assert [a.tolist() for a in got[j].seed] == [a.tolist() for a in want[j].seed], j
    for b, rows_batch in enumerate(batches):
        # a change: each zone's partial seeds of the added, added up by the shard
        members, _ = members_after(None, ids, x1, x2, k, b + 1, SHARDS)
        want_change = shard_changes(whole, members, b, b + 1, SHARDS)
        per_zone = [shard_changes(z.group, members, b, b + 1, SHARDS) for z in zones]
        for j, w in want_change.items():
            c = merged_change([p[j] for p in per_zone], type(whole).merge_seeds)
            assert c.added_ids.tolist() == w.added_ids.tolist() and c.ids.tolist() == w.ids.tolist()
            assert [a.tolist() for a in c.seed] == [a.tolist() for a in w.seed], j
        # the micro-batch: every zone reads all of it; the shard gets the zones' rows in any order and merges
        batch = _table([(key, d, x, 0.0 if func == "count" else y) for key, d, x, y in rows_batch], 1000 * (b + 1))
        expected = spark_stream.stage_one_classes(whole, batch)
        parts = [spark_stream.stage_one_zone(z, batch) for z in zones]
        stage1 = pa.concat_tables(parts)
        stage1 = stage1.take(pa.array(shuffle.sample(range(stage1.num_rows), stage1.num_rows), pa.int64()))
        merged = merged_messages(stage1.sort_by("m_msg_no"), stage1.column_names)
        assert merged.to_pylist() == expected.to_pylist(), b


def test_zone_keys_are_in_state_partitions_of_their_own():
    from sparksub.operators.box.stream_shards import spark_partition
    for n, partitions in ((2, 2), (3, 4), (3, 200)):
        keys = zone_keys("g1", n, partitions)
        assert len({spark_partition(key, partitions) for key in keys}) == n, keys
        assert [key.split("~")[0] for key in keys] == [f"g1#r{i}" for i in range(n)]
    assert zone_keys("g1", 3, 2) == ["g1#r0", "g1#r1", "g1#r2"]   # more zones than partitions: as named
