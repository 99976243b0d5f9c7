"""RANGE_TOPK's rows in X zones with halos (``operators/topk/zones.py``; issue 16 item 4), no Spark.

Against the whole rows' operator (the group with no subscription, painting Paint-Dense per update for its k
values, 002 §III-A): batch after batch, 1-4 zones at drawn cut points (on objects' X too), the zones' messages
merged (``range_zones.merge_zone_messages``) equal the whole operator's row for row, ``msg_no`` included; each zone
then holds exactly its own rows, and a zone that replays the batch without a halo holds the same.  The halo's
depth-bounded sets equal a brute-force count of the better objects between each object and the cut.  Ties in x
and y, int and text keys, ascending and descending order, deletes, NULL rows, a key several times in a batch,
X-moves across and within cuts, k values from 1 to 4."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.shared.range_shards import rows_extra
from sparksub.operators.shared.range_zones import merge_zone_messages, zone_rows
from sparksub.operators.topk.group import TopkGroup, TopkSnapshot
from sparksub.operators.topk.zones import TopkRowsZoneSnapshot, _shallow, halo, halo_depth

_SET = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def _snapshot(rows: dict, descending: bool, ks, zone_of=None):
    keys = list(rows)
    e = np.zeros(0)
    return TopkSnapshot("g", "t", "x", "y", descending, np.zeros(0, object), e, e, np.zeros(0, np.int64),
                        np.array(keys, dtype=object), np.array([rows[k][0] for k in keys], dtype=np.float64),
                        np.array([rows[k][1] for k in keys], dtype=np.float64), extra=rows_extra("RANGE_TOPK", ks))


def _batch(rnd, key_of, seq: int, n: int, rows: dict) -> pa.Table:
    cols = {"key": [], "x": [], "y": [], "op": [], "seq": []}
    for i in range(n):
        roll = rnd.random()
        key = key_of(rnd.randint(0, 14))
        x, y = float(rnd.randint(0, 12)), float(rnd.randint(0, 4))
        if roll < 0.1:
            x = None                                    # a NULL X: the row leaves every range
        elif roll < 0.35 and key in rows:
            x = rows[key][0]                            # a Y change at the same X
        cols["key"].append(key)
        cols["x"].append(x)
        cols["y"].append(y)
        cols["op"].append(1 if roll > 0.82 else 0)
        cols["seq"].append(seq + i)
        if cols["op"][-1] == 1 or x is None:
            rows.pop(key, None)
        else:
            rows[key] = (x, y)
    key_type = pa.string() if isinstance(cols["key"][0], str) else pa.int64()
    return pa.table({"key": pa.array(cols["key"], key_type), "x": pa.array(cols["x"], pa.float64()),
                     "y": pa.array(cols["y"], pa.float64()), "op": pa.array(cols["op"], pa.int8()),
                     "seq": pa.array(cols["seq"], pa.int64())})


def _zones(rows: dict, descending: bool, ks, cuts: tuple) -> list:
    keys = np.array(list(rows), dtype=object)
    xs = np.array([rows[k][0] for k in keys], dtype=np.float64)
    ys = np.array([rows[k][1] for k in keys], dtype=np.float64)
    out = []
    for z in range(len(cuts) + 1):
        zk, zx, zy = zone_rows(keys, xs, ys, cuts, z)
        out.append(TopkRowsZoneSnapshot(_snapshot(dict(zip(zk.tolist(), zip(zx.tolist(), zy.tolist()))),
                                                  descending, ks), z, cuts).build())
    return out


def paint_zones(zones: list, batch: pa.Table, depth: int | None = None) -> pa.Table:
    """One batch through the zones as the runtime runs it: each zone's edge objects, each zone's two halos
    folded from them, each zone's messages, merged."""
    depth = halo_depth(zones[0].ks, batch.num_rows) if depth is None else depth
    edges = [z.edges(depth) for z in zones]         # (west-edge objects, east-edge objects) per zone
    parts = []
    for i, z in enumerate(zones):
        west = halo([edges[j][1] for j in range(i)], "west", depth)
        east = halo([edges[j][0] for j in range(len(zones) - 1, i, -1)], "east", depth)
        parts.append(z.apply(batch, "reformulated", west, east))
    return merge_zone_messages(parts)


def _own(zone) -> dict:
    return {k: v for k, v in zone.group.core.tree._pos.items()}


@_SET
@given(seed=st.integers(0, 10**6), n_cuts=st.integers(0, 3), descending=st.booleans(),
       ks=st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True), text_keys=st.booleans())
def test_zones_paint_the_whole_groups_messages_row_for_row(seed, n_cuts, descending, ks, text_keys):
    rnd = random.Random(seed)
    key_of = (lambda i: f"k{i}") if text_keys else (lambda i: i)
    rows: dict = {}
    _batch(rnd, key_of, 0, 10, rows)                     # the starting rows
    cuts = tuple(sorted(rnd.sample(range(1, 12), n_cuts)))
    whole = _snapshot(rows, descending, ks).build()
    zones = _zones(rows, descending, ks, tuple(float(c) for c in cuts))
    seq = 100
    for _ in range(rnd.randint(1, 4)):
        before = [(z.group.core.tree._pos.copy()) for z in zones]
        batch = _batch(rnd, key_of, seq, rnd.randint(1, 12), rows)
        seq += 100
        want = whole.apply(batch, "reformulated")
        got = paint_zones(zones, batch)
        assert got.to_pylist() == want.to_pylist()
        # each zone holds exactly its own rows, in the core's sign (a descending core negates y)
        held = {k: v for k, v in whole.core.tree._pos.items()}
        for z in zones:
            assert _own(z) == {k: v for k, v in held.items() if z.lo <= v[0] < z.hi}
        # results read through the zones (each zone's top-k lists merged) equal the whole index's
        x1 = np.array([float(rnd.randint(-1, 12)) for _ in range(6)] + [-np.inf, 3.0])
        x2 = np.array([a + rnd.randint(-1, 8) for a in x1[:6]] + [np.inf, 3.0])
        k = np.array([rnd.choice(ks) for _ in x1], dtype=np.int64)
        merged = TopkGroup.merge_seeds([z.shard_seed(x1, x2, k) for z in zones], descending, k)
        assert list(merged) == [whole.result_of(a, b, int(kk)) if a <= b else [] for a, b, kk in zip(x1, x2, k)]
        # a zone replaying the batch (no halo, no message) reaches the same rows
        for z, pos in zip(zones, before):
            replayed = TopkRowsZoneSnapshot(_snapshot({}, descending, ks), z.zone, z.cuts).build()
            replayed.group.core.load_halo([(x, y, k) for k, (x, y) in pos.items()])
            replayed.apply(batch, "none")
            assert _own(replayed) == _own(z)


def _depths(items, cut_side: str) -> dict:
    """Brute force: per item, the better-ranked items between it and the cut (those at its X ranking first)."""
    out = {}
    for it in items:
        x, rank = it[0], (it[1], it[2])
        out[it] = sum(1 for o in items if o is not it and (o[1], o[2]) < rank
                      and (o[0] >= x if cut_side == "east" else o[0] <= x))
    return out


@_SET
@given(st.lists(st.tuples(st.integers(0, 6).map(float), st.integers(0, 3).map(float)), max_size=25),
       st.integers(1, 5), st.sampled_from(["west", "east"]), st.integers(1, 4))
def test_halo_holds_exactly_the_objects_shallower_than_its_depth(points, depth, toward, n_zones):
    """``toward='west'``: looking west from a cut east of every item (an east halo's mirror likewise); split into
    zones at x boundaries, the fold of the zones' edge sets gives the same set as the brute force over all."""
    items = [(x, y, f"k{i}") for i, (x, y) in enumerate(points)]
    depths = _depths(items, "east" if toward == "west" else "west")
    want = {it for it, d in depths.items() if d < depth}
    assert set(_shallow(items, toward, depth)) == want
    bounds = sorted({x for x, _, _ in items})[1:][: n_zones - 1]
    zones = [[it for it in items if sum(it[0] >= b for b in bounds) == z] for z in range(len(bounds) + 1)]
    farthest_first = zones if toward == "west" else zones[::-1]
    assert set(halo([_shallow(z, toward, depth) for z in farthest_first], toward, depth)) == want


def test_a_halo_only_kmax_deep_misses_what_the_batch_exposes():
    """The halo's ``+ B`` is needed: a zone whose halo holds the k best west of its cut paints a lowering step
    wrongly once the batch has deleted those (a deliberate break of ``halo_depth``, found by the property test)."""
    rows = {8: (6.0, 0.0), 9: (2.0, 1.0), 3: (4.0, 2.0), 2: (8.0, 2.0)}
    # 8 leaves x = 6 (zone 1's deletion step) for x = 5 with y = 4 (zone 0's insertion step): zone 0's first_k
    # east of 5 then meets 2 at x = 8, which was one deep behind 8 before the batch -- outside a halo 1 deep
    batch = pa.table({"key": pa.array([9, 11, 8], pa.int64()), "x": pa.array([9.0, 1.0, 5.0]),
                      "y": pa.array([0.0, 1.0, 4.0]), "op": pa.array([1, 0, 0], pa.int8()),
                      "seq": pa.array([100, 101, 102], pa.int64())})
    whole = _snapshot(rows, False, [1]).build()
    want = whole.apply(batch, "reformulated").to_pylist()
    assert paint_zones(_zones(rows, False, [1], (6.0,)), batch).to_pylist() == want
    shallow = paint_zones(_zones(rows, False, [1], (6.0,)), batch, depth=1).to_pylist()
    assert shallow != want
