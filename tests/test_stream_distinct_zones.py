"""``Engine.stream`` over RANGE_DISTINCT groups in two stages with their rows in X zones (issue 16 item 4;
``runtime/stream.py``, "a two-stage group's rows in X zones"; ``operators/distinct/zone_stream.py``): stage 1 is Z
state partitions ``<group>#r<i>``, each every row in its state store and the rows of its X zone in its index,
emitting its DISTINCT messages (000 §4) with the Mar ends it cannot close open and its answers to every question
another zone's message can ask; the subscription shards close the ends with the answers and merge.

* Through Spark (``range_zones`` 3 and 0, both with 2 subscription shards, side by side over the same files): a
  DISTINCT over a text column and one over a number; the two streams' rows are equal row for row, and so are the
  shards' logs (their changes); every subscription's view (its result at the start, the notifications
  applied in seq order) equals a brute force over the table after every seq -- upserts, deletes, X-moves across the
  cuts keeping their value (one no other row has), Y changes, a key several times in one micro-batch, NULL X / Y,
  unknown-key deletes; subscriptions added and dropped while the stream runs; the streams stopped and restarted from
  their checkpoints (the zones rebuilt from the state store); every range's brute force after the stream equals the
  views.
* Without Spark (hypothesis): the zones' stage-1 rows (messages and answers), shuffled as an exchange may, merged by
  the shard equal the whole group's stage 1 row for row, every column.
"""
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub import Engine
from sparksub.operators.distinct.group import DistinctSnapshot
from sparksub.operators.shared.range_zone_stream import StreamZone, merged_messages
from sparksub.operators.shared.range_zones import zone_cuts
from sparksub.operators.shared.schemas import DELETE, UPSERT
from sparksub.runtime import stream as spark_stream

sys.path.insert(0, str(Path(__file__).parent))   # the zoned aggregate stream's test: its streams, batches, logs
from test_stream_agg_zones import cuts_of, run_class_zones, start_rows, zone_batch  # noqa: E402
from test_stream_range_shards_classes import apply_update, rows_of  # noqa: E402

SHARDS, ZONES = 2, 3   # (3: the cuts test_stream_agg_zones.zone_batch moves keys across; a middle zone)
TEMPLATES = {"d": ("tag", "SELECT DISTINCT tag FROM t WHERE x BETWEEN :lo AND :hi"),
             "n": ("y", "SELECT DISTINCT y FROM t WHERE x BETWEEN :lo AND :hi")}
_COLUMN = {"tag": 2, "y": 1}


def value(rows: dict, column: str, lo: float, hi: float) -> set:
    """Brute force: the non-NULL values of ``column`` over the rows whose X is in [lo, hi]."""
    at = _COLUMN[column]
    return {r[at] for r in rows.values() if r[0] is not None and lo <= r[0] <= hi and r[at] is not None}


def subscribe(e: Engine, subs: dict, prefix: str, ranges: list) -> None:
    for letter, (column, sql) in TEMPLATES.items():
        ids = [f"{letter}{prefix}{i}" for i in range(len(ranges))]
        e.subscribe_many(sql, {"id": ids, "lo": [r[0] for r in ranges], "hi": [r[1] for r in ranges]})
        subs.update({s: (column, lo, hi) for s, (lo, hi) in zip(ids, ranges)})


def setup(spark, zones: int):
    """An engine over t with a DISTINCT tag and a DISTINCT y group in 2 subscription shards, their rows in ``zones``
    X zones (0: whole), and the oracle's rows and subscriptions."""
    rnd = random.Random(16)
    e = Engine(spark)
    e.range_subscription_shards, e.range_zones = SHARDS, zones
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE, tag STRING)")
    rows = start_rows()
    e.load("t", [{"k": k, "x": x, "y": y, "tag": tag} for k, (x, y, tag) in rows.items()])
    cut = cuts_of(rows)
    ranges = [(float(lo), float(lo + rnd.randint(0, 7))) for lo in (rnd.randint(-2, 14) for _ in range(8))]
    ranges += [(c, c) for c in cut] + [(c - 1.0, c) for c in cut] + [(c - 3.0, c + 3.0) for c in cut]
    ranges += [(-math.inf, math.inf), (-math.inf, 5.0), (40.0, 50.0)]
    subs: dict = {}
    subscribe(e, subs, "", ranges)
    return e, rows, subs


def change(e: Engine, subs: dict) -> None:
    """Some subscriptions added mid-stream (across the cuts, one point on a cut), some dropped."""
    cut = cuts_of(start_rows())
    subscribe(e, subs, "m", [(cut[0] - 2.0, cut[-1] + 2.0), (cut[0], cut[0]), (-math.inf, cut[0])])
    for letter in TEMPLATES:
        e.unsubscribe(f"{letter}0")
        del subs[f"{letter}0"]


def distinct_batch(rnd: random.Random, f: int, rows: dict) -> list:
    """``zone_batch``'s micro-batch and, per cut, a key with a value no other row has moving across it and back: the
    zone it left answers the ADD's left end with the X it left (as of before the seq) or with nothing (after)."""
    batch = zone_batch(rnd, f, rows)
    for i, c in enumerate(cuts_of(start_rows())):
        key, y, tag = sorted(rows)[10 + i + f], 100.0 + f, f"u{f}"
        batch += [{"k": key, "x": c - 1.0, "y": y, "tag": tag}, {"k": key, "x": c, "y": y, "tag": tag},
                  {"k": key, "x": c - 0.5, "y": y, "tag": tag}]
    return batch


def check_views(rows: dict, subs: dict, batch: list, seq0: int, notes: list) -> tuple:
    """Each subscription's view (its brute force at the start, then its add / remove rows in seq order) equals the
    brute force after every seq; ``batch`` applied to ``rows``; (the rejected seqs, the views at the end)."""
    assert {r["op"] for r in notes} <= {"add", "remove"} and {r["subscription_id"] for r in notes} <= set(subs)
    views = {s: value(rows, *subs[s]) for s in subs}
    rejected = set()
    for seq, u in enumerate(batch, seq0):
        mine = [r for r in notes if r["seq"] == seq]
        if not apply_update(rows, u):
            rejected.add(seq)
            assert not mine, (seq, u)
            continue
        for r in mine:
            v = r["item_text"] if subs[r["subscription_id"]][0] == "tag" else r["value"]
            assert (v in views[r["subscription_id"]]) == (r["op"] == "remove"), (seq, r)   # each a change
            (views[r["subscription_id"]].add if r["op"] == "add" else views[r["subscription_id"]].discard)(v)
        assert views == {s: value(rows, *subs[s]) for s in subs}, (seq, u)
    return rejected, views


# ---- through Spark -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """Two streams over the same files (rows in 3 X zones, whole); before micro-batch 1 a change, and the streams
    stopped and restarted from their checkpoints."""
    return run_class_zones(spark, tmp_path_factory, setup, change, distinct_batch)


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_every_view_equals_the_brute_force_and_the_whole_groups_rows(run):
    for f, (rows, subs, batch, seq0, out) in enumerate(run["batches"]):
        notes = [r for r in out if r["op"] != "rejected"]
        rejected, views = check_views(dict(rows), subs, batch, seq0, notes)
        assert sorted(r["seq"] for r in out if r["op"] == "rejected") == sorted(rejected), f   # each once
        assert {r["subscription_id"][0] for r in notes} == set(TEMPLATES), f   # both groups notify
        if f == 1:   # the change: the added notify, the dropped do not
            assert {"d0", "n0"}.isdisjoint(r["subscription_id"] for r in notes)
            assert {r["subscription_id"] for r in notes} & {"dm0", "nm0", "dm2", "nm2"}
        assert rows_of(out) == rows_of(run["whole"][f]), f
    # after the stream: every view equals the brute force recomputed from the table
    assert views == {s: value(run["end"], *subs[s]) for s in subs}


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_the_zones_and_their_answers_in_the_counters_and_the_shards(run):
    zoned, whole = run["logs"][ZONES], run["logs"][0]
    # a DISTINCT shard logs its change alone (its subscribers keep nothing): the same in both streams
    assert set(zoned) == set(whole) and len(zoned) == 2 * len(TEMPLATES) * SHARDS
    for where, entry in whole.items():
        assert zoned[where].messages is None and entry.messages is None
        assert (zoned[where].change is None) == (entry.change is None), where
        if entry.change is not None:
            assert zoned[where].change.ids.tolist() == entry.change.ids.tolist(), where
    first, last = run["stats"]
    assert first["zones"] == ZONES * len(TEMPLATES)
    assert first["zone_batches"] == ZONES * len(TEMPLATES) and last["zone_batches"] == 2 * ZONES * len(TEMPLATES)
    assert last["zone_builds"] > first["zone_builds"]   # the restart rebuilt the zones from the state store


# ---- without Spark: the zones' rows merged equal the whole group's ----------------------------------------------
def distinct_rows(keys, xs, ys) -> DistinctSnapshot:
    e = np.empty(0)
    return DistinctSnapshot("g", "t", "x", "y", None, np.empty(0, dtype=object), e, e, np.empty(0, dtype=np.int64),
                            np.asarray(keys, dtype=object), np.asarray(xs, dtype=np.float64),
                            np.asarray(ys, dtype=object))


_X = st.one_of(st.integers(0, 9).map(float), st.just(None))
_Y = st.one_of(st.sampled_from(["a", "b", "c"]), st.just(None))
_ROWS = st.dictionaries(st.integers(0, 15), st.tuples(_X, _Y), min_size=2, max_size=16)
#: (key, delete?, x, y): keys repeat (X-moves, deletes, NULLs, a key several times)
_BATCH = st.lists(st.tuples(st.integers(0, 19), st.booleans(), _X, _Y), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=_ROWS, batches=st.lists(_BATCH, min_size=1, max_size=3), n_zones=st.sampled_from([2, 3, 4]),
       shuffle=st.randoms(use_true_random=False))
def test_zones_answers_and_merge_equal_the_whole_group(start, batches, n_zones, shuffle):
    """Stage 1 as each zone partition runs it (its operator from every row, ``stream._built``; the keys' old rows
    from its "state store", every row of the table) and stage 2's merge, against the whole group's stage 1."""
    table = {f"k{k}": (x, y) for k, (x, y) in start.items()}
    keys = list(table)
    snap = distinct_rows(keys, [np.nan if x is None else x for x, _ in table.values()], [y for _, y in table.values()])
    whole = snap.build()
    cuts = zone_cuts(snap.xs, n_zones)
    zones = [spark_stream._built(spark_stream.GroupSpec(f"g#r{i}", "x", "y", None, text=True,
                                                        zone=StreamZone("g", i, len(cuts) + 1, cuts, type(whole))),
                                 snap) for i in range(len(cuts) + 1)]
    for b, rows_batch in enumerate(batches):
        batch = pa.table({"key": pa.array([f"k{k}" for k, *_ in rows_batch], pa.string()),
                          "x": pa.array([np.nan if x is None else x for _, _, x, _ in rows_batch], pa.float64()),
                          "y": pa.nulls(len(rows_batch), pa.float64()),
                          "op": pa.array([DELETE if d else UPSERT for _, d, *_ in rows_batch], pa.int8()),
                          "seq": pa.array(np.arange(1000 * (b + 1), 1000 * (b + 1) + len(rows_batch)), pa.int64()),
                          "y_text": pa.array([y for *_, y in rows_batch], pa.string())})
        stored = {k: (x, None, y, None) for k, (x, y) in table.items()}   # as the state store holds a text row
        expected = spark_stream.stage_one_classes(whole, batch)
        stage1 = pa.concat_tables([spark_stream.stage_one_distinct_zone(z, batch, stored.get, True) for z in zones])
        stage1 = stage1.take(pa.array(shuffle.sample(range(stage1.num_rows), stage1.num_rows), pa.int64()))
        merged = merged_messages(stage1.sort_by("m_msg_no"), stage1.column_names)
        assert merged.to_pylist() == expected.to_pylist(), b
        for key, d, x, y in rows_batch:
            if d or x is None or y is None:
                table.pop(f"k{key}", None)
            else:
                table[f"k{key}"] = (x, y)
