"""``Engine.stream`` over a RANGE_TOPK group in two stages with its rows in X zones (issue 16 item 4;
``runtime/stream.py`` ``stage_one_topk_zone``; ``operators/topk/zone_stream.py``): stage 1 is Z state partitions
``<group>#r<i>``, each every row in its state store and in its index its zone's rows plus a halo beyond each cut that
it builds from its state store and keeps across micro-batches, refilling it when a micro-batch could lower it below
kmax; it paints the Paint-Dense messages (002 §III-A) of the steps at the X it owns, and the subscription shards merge
the zones' messages (``range_zones.merge_zone_messages``) and take the best k of the zones' seeds of an added
subscription (``TopkGroup.merge_seeds``).

* Through Spark (``range_zones`` 3 and 0, both with 2 subscription shards, side by side over the same files, two
  micro-batches): the two streams' rows are equal row for row and so are the shards' logs (messages and changes);
  every subscription's view (its result before the micro-batch, each notification applied in seq order) equals a
  brute-force top-k over the table after every seq -- upserts, deletes, X-moves across the cuts and back, Y up and
  down, a key several times a micro-batch (one made worse ~300 times in the first: more than the halo's margin, so
  the zones refill their halos from their state stores), NULL X / Y, ties, rejected rows --; subscriptions added
  (one with a k no one had) and dropped while the stream runs; both streams stopped and restarted from their
  checkpoints before the second micro-batch (the zones rebuilt from every row of their state stores).
* Without Spark (hypothesis): the zones' stage-1 rows as ``stage_one_topk_zone`` makes them -- halos refilled from a
  state store's rows (``stream._stored_rows``) with a small margin --, shuffled as an exchange may, merged by the
  shard equal the whole group's stage 1 row for row, every column.
"""
from __future__ import annotations

import math
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
from sparksub.operators.shared.range_shards import rows_extra
from sparksub.operators.shared.range_zone_stream import StreamZone, merged_messages
from sparksub.operators.shared.range_zones import zone_cuts
from sparksub.operators.shared.schemas import DELETE, UPSERT
from sparksub.operators.topk import zone_stream
from sparksub.operators.topk.group import TopkGroup, TopkSnapshot
from sparksub.runtime import stream as spark_stream

sys.path.insert(0, str(Path(__file__).parent))   # the zoned aggregate stream's test: its streams, batches, logs
from test_stream_agg_zones import (  # noqa: E402
    cuts_of,
    run_class_zones,
    same_shard_logs,
    start_rows,
    zone_batch,
    zoned_engine,
)
from test_stream_range_shards_classes import check_views, rows_of  # noqa: E402

SHARDS, ZONES = 2, 3   # (3: the cuts test_stream_agg_zones.zone_batch moves keys across; a middle zone)
TOPK = "SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y LIMIT :k"
#: more updates making one row worse than a halo's margin past kmax: every zone beyond it refills
WORSE = zone_stream.MARGIN + 20


def subscribe(e: Engine, subs: dict, prefix: str, ranges: list, ks: list) -> None:
    ids = [f"t{prefix}{i}" for i in range(len(ranges))]
    e.subscribe_many(TOPK, {"id": ids, "lo": [r[0] for r in ranges], "hi": [r[1] for r in ranges], "k": ks})
    subs.update({s: ("topk", lo, hi, k) for s, (lo, hi), k in zip(ids, ranges, ks)})


def setup(spark, zones: int):
    """An engine over t with a top-k group in 2 subscription shards, its rows in ``zones`` X zones (0: whole), and
    the oracle's rows and subscriptions ``{id: ('topk', lo, hi, k)}``."""
    rnd = random.Random(16)
    e, rows, cut = zoned_engine(spark, zones)
    ranges = [(float(lo), float(lo + rnd.randint(0, 7))) for lo in (rnd.randint(-2, 14) for _ in range(8))]
    ranges += [(c, c) for c in cut] + [(c - 1.0, c) for c in cut] + [(c - 3.0, c + 3.0) for c in cut]
    ranges += [(-math.inf, math.inf), (-math.inf, 5.0), (40.0, 50.0)]
    subs: dict = {}
    subscribe(e, subs, "", ranges, [rnd.randint(1, 3) for _ in ranges])
    return e, rows, subs


def change(e: Engine, subs: dict) -> None:
    """Some subscriptions added mid-stream (across the cuts, on a cut, one with a k no one had), some dropped."""
    cut = cuts_of(start_rows())
    subscribe(e, subs, "m", [(cut[0] - 2.0, cut[-1] + 2.0), (cut[0], cut[0]), (-math.inf, cut[0])], [4, 2, 1])
    for s in ("t0", "t1"):
        e.unsubscribe(s)
        del subs[s]


def topk_batch(rnd: random.Random, f: int, rows: dict) -> list:
    """``zone_batch``'s micro-batch; in the first, then a row of the middle zone made worse :data:`WORSE` times (each
    lowers an object the outer zones' halos hold: they refill), then brought back."""
    batch = zone_batch(rnd, f, rows)
    if f:
        return batch
    cut = cuts_of(start_rows())
    key = next(k for k in sorted(rows) if rows[k][0] is not None and cut[0] <= rows[k][0] < cut[1])
    x = rows[key][0]
    batch += [{"k": key, "x": x, "y": float(i), "tag": "w"} for i in range(WORSE)]
    return batch + [{"k": key, "x": x, "y": 0.0, "tag": "w"}]


# ---- through Spark -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """Two streams over the same files (rows in 3 X zones, whole); before micro-batch 1 a change, and the streams
    stopped and restarted from their checkpoints."""
    return run_class_zones(spark, tmp_path_factory, setup, change, topk_batch)


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_every_view_equals_the_brute_force_and_the_whole_groups_rows(run):
    for f, (rows, subs, batch, seq0, out) in enumerate(run["batches"]):
        notes = [r for r in out if r["op"] != "rejected"]
        rejected = check_views(dict(rows), subs, batch, seq0, notes)
        assert sorted(r["seq"] for r in out if r["op"] == "rejected") == sorted(rejected), f   # each once
        if f == 1:   # the change: the added notify, the dropped do not
            assert {"t0", "t1"}.isdisjoint(r["subscription_id"] for r in notes)
            assert {r["subscription_id"] for r in notes} & {"tm0", "tm2"}
        assert rows_of(out) == rows_of(run["whole"][f]), f


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_each_shard_got_the_whole_groups_messages_and_changes(run):
    """What a shard delivered and logged -- the zones' messages merged, the best k of the zones' seeds of a change --
    is the whole group's stage 1's, row for row and in order."""
    zoned, whole = run["logs"][ZONES], run["logs"][0]
    assert len(zoned) == 2 * SHARDS and same_shard_logs(zoned, whole, list) == SHARDS


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_the_zones_and_their_refills_in_the_counters(run):
    first, last = run["stats"]
    assert first["zones"] == ZONES
    assert first["zone_batches"] == ZONES and first["zone_builds"] == ZONES
    assert last["zone_batches"] == 2 * ZONES
    assert last["zone_builds"] > first["zone_builds"]   # the restart rebuilt the zones from the state store
    # the row made worse WORSE times in the first micro-batch lies in the middle zone: the outer two refill
    assert first["halo_refills"] == 2 and last["halo_refills"] == 2


# ---- without Spark: the zones' rows merged equal the whole group's ----------------------------------------------
class _Store:
    """A zone's state store's rows (``MapState.iterator``'s shape): every row of the table."""

    def __init__(self, table: dict):
        self.table = table

    def iterator(self):
        return (((k,), (x, y, None, None)) for k, (x, y) in self.table.items())


def _snapshot(table: dict, descending: bool, ks) -> TopkSnapshot:
    keys = list(table)
    e = np.empty(0)
    return TopkSnapshot("g", "t", "x", "y", descending, np.empty(0, dtype=object), e, e, np.empty(0, dtype=np.int64),
                        np.asarray(keys, dtype=object),
                        np.array([np.nan if table[k][0] is None else table[k][0] for k in keys], dtype=np.float64),
                        np.array([np.nan if table[k][1] is None else table[k][1] for k in keys], dtype=np.float64),
                        extra=rows_extra("RANGE_TOPK", ks))


_X = st.one_of(st.integers(0, 9).map(float), st.just(None))
_Y = st.one_of(st.integers(0, 4).map(float), st.just(None))
_ROWS = st.dictionaries(st.integers(0, 15), st.tuples(_X, _Y), min_size=2, max_size=16)
#: (key, delete?, x, y): keys repeat (X-moves, deletes, NULLs, a key several times)
_BATCH = st.lists(st.tuples(st.integers(0, 19), st.booleans(), _X, _Y), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=_ROWS, batches=st.lists(_BATCH, min_size=1, max_size=3), n_zones=st.sampled_from([2, 3, 4]),
       descending=st.booleans(), k=st.integers(1, 3), shuffle=st.randoms(use_true_random=False))
def test_zones_stage_one_merged_equals_the_whole_group(start, batches, n_zones, descending, k, shuffle):
    """Stage 1 as each zone partition runs it (its operator from every row, ``stream._built``; its halos refilled
    from its "state store", every row of the table, with a margin of 1) and stage 2's merge, against the whole
    group's stage 1."""
    table = {f"k{key}": row for key, row in start.items()}
    snap = _snapshot(table, descending, [k])
    whole = snap.build()
    cuts = zone_cuts(snap.xs, n_zones)
    with mock.patch.object(zone_stream, "MARGIN", 1):
        zones = [spark_stream._built(spark_stream.GroupSpec(
            f"g#r{i}", "x", "y", None, zone=StreamZone("g", i, len(cuts) + 1, cuts, TopkGroup, descending)), snap)
            for i in range(len(cuts) + 1)]
    for b, rows_batch in enumerate(batches):
        batch = pa.table({"key": pa.array([f"k{key}" for key, *_ in rows_batch], pa.string()),
                          "x": pa.array([np.nan if x is None else x for _, _, x, _ in rows_batch], pa.float64()),
                          "y": pa.array([np.nan if y is None else y for *_, y in rows_batch], pa.float64()),
                          "op": pa.array([DELETE if d else UPSERT for _, d, *_ in rows_batch], pa.int8()),
                          "seq": pa.array(np.arange(1000 * (b + 1), 1000 * (b + 1) + len(rows_batch)), pa.int64())})
        expected = spark_stream.stage_one_classes(whole, batch)
        store = _Store(dict(table))
        stage1 = pa.concat_tables([spark_stream.stage_one_topk_zone(
            z, batch, lambda: spark_stream._stored_rows(store, False)[:3]) for z in zones])
        stage1 = stage1.take(pa.array(shuffle.sample(range(stage1.num_rows), stage1.num_rows), pa.int64()))
        merged = merged_messages(stage1.sort_by("m_msg_no"), stage1.column_names)
        assert merged.to_pylist() == expected.to_pylist(), b
        for key, d, x, y in rows_batch:
            if d or x is None or y is None:
                table.pop(f"k{key}", None)
            else:
                table[f"k{key}"] = (x, y)
