"""A two-stage RANGE_TOPK stream group's X zones, each keeping its own halo (``operators/topk/zone_stream.py``; issue
16 item 4), without Spark.

Against the whole rows' operator (the group with no subscription painting Paint-Dense per update for its k values,
002 §III-A): 1-4 zones at drawn cut points, micro-batch after micro-batch (inserts, deletes, Y up and down, X-moves
within and across the cuts, ties in X and Y, NULL X and Y, deletes of unknown keys, a key several times a batch,
ascending and descending, a new larger k between batches), margins small enough that the halos run short and are
refilled from the table's rows, and extras enough that they are pruned; a zone left behind that replays a
micro-batch with no message (a worker's catch-up) and one rebuilt from the table's rows go on with the others.  Each
micro-batch: the zones' messages merged (``range_zones.merge_zone_messages``) equal the whole operator's row for row,
``msg_no`` included; after it, each zone's index holds its own rows exactly, holds every other object at its true
place, and holds every object of true depth < its guarantee beyond each cut (a brute-force depth count).
"""
from __future__ import annotations

import copy
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_topk_zones import _depths, _snapshot

from sparksub.operators.shared.range_zones import merge_zone_messages
from sparksub.operators.shared.schemas import DELETE, UPSERT
from sparksub.operators.topk.group import TopkGroup
from sparksub.operators.topk.zone_stream import TopkStreamZone

_SET = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))

_X = st.one_of(st.integers(0, 12).map(float), st.just(None))
_Y = st.one_of(st.integers(0, 4).map(float), st.just(None))
#: (key, delete?, x, y): keys repeat within and across batches (X-moves, Y changes, deletes, unknown-key deletes)
_UPDATE = st.tuples(st.integers(0, 64), st.integers(0, 9).map(lambda r: r == 0), _X, _Y)


def _arrays(rows: dict) -> tuple:
    """Every row of the table (a zone's state store) as (keys, xs, ys), NaN for NULL."""
    keys = list(rows)
    return (np.array(keys, dtype=object),
            np.array([np.nan if rows[k][0] is None else rows[k][0] for k in keys], dtype=np.float64),
            np.array([np.nan if rows[k][1] is None else rows[k][1] for k in keys], dtype=np.float64))


def _table(updates: list, seq0: int) -> pa.Table:
    return pa.table({"key": pa.array([k for k, *_ in updates], pa.int64()),
                     "x": pa.array([np.nan if x is None else x for _, _, x, _ in updates], pa.float64()),
                     "y": pa.array([np.nan if y is None else y for *_, y in updates], pa.float64()),
                     "op": pa.array([DELETE if d else UPSERT for _, d, *_ in updates], pa.int8()),
                     "seq": pa.array(np.arange(seq0, seq0 + len(updates)), pa.int64())})


def _applied(rows: dict, updates: list) -> None:
    for key, delete, x, y in updates:
        if delete:
            rows.pop(key, None)
        else:
            rows[key] = (x, y)


def check_index(zone: TopkStreamZone, rows: dict) -> None:
    """The zone's index after a micro-batch: its own rows exactly, every object it holds at its true place (the
    core's sign), and every object of true depth < each side's guarantee beyond that cut (brute force)."""
    sign = -1.0 if zone.group.core.descending else 1.0
    true = {k: (x, sign * y) for k, (x, y) in rows.items() if x is not None and y is not None}
    held = dict(zone.group.core.tree._pos)
    assert {k: v for k, v in held.items() if zone.lo <= v[0] < zone.hi} == \
        {k: v for k, v in true.items() if zone.lo <= v[0] < zone.hi}
    assert all(true.get(k) == v for k, v in held.items())
    for side in zone.sides:
        items = [(x, y, k) for k, (x, y) in true.items() if side.beyond(x)]
        depths = _depths(items, "east" if side.toward == "west" else "west")
        missing = [it for it, d in depths.items() if d < side.guarantee and it[2] not in held]
        assert not missing, (side, missing)


def run_zones(start: dict, batches: list, cuts: tuple, descending: bool, ks: list, margin: int, rnd: random.Random,
              new_k: int | None = None, check_every: int = 1) -> tuple:
    """The micro-batches through the whole operator and the zones as the stream runs them, each checked on the way;
    (the zones' refills, their prunes)."""
    rows = dict(start)
    whole = _snapshot(rows, descending, ks).build()
    zones = [TopkStreamZone(_snapshot(rows, descending, ks), z, cuts, margin=margin)
             for z in range(len(cuts) + 1)]
    for z in zones:
        check_index(z, rows)
    for b, updates in enumerate(batches):
        if new_k is not None and b == 1:   # a subscription with a new k: every zone paints for it from now on
            for core in [whole.core] + [z.group.core for z in zones]:
                core.paint_for(sorted(set(ks) | {new_k}))
        batch = _table(updates, 1000 * (b + 1))
        before = _arrays(rows)
        want = whole.apply(batch, "reformulated")
        fate = rnd.random()
        parts = []
        for i, z in enumerate(zones):
            if fate < 0.15 and i == 0:   # a worker left behind: its copy replays the batch, no message, goes on
                behind = copy.deepcopy(z)
            z.ensure(batch, lambda: before)
            parts.append(z.apply(batch, "reformulated"))
            if fate < 0.15 and i == 0:
                behind.apply(batch, "none")
                zones[0] = behind
        assert merge_zone_messages(parts).to_pylist() == want.to_pylist(), b
        _applied(rows, updates)
        if 0.15 <= fate < 0.25:   # a cold worker: the last zone rebuilt from the state store's rows
            zones[-1] = TopkStreamZone(_snapshot(rows, descending, ks if new_k is None or b < 1 else ks + [new_k]),
                                       len(cuts), cuts, margin=margin)
        for z in zones if (b + 1) % check_every == 0 or b == len(batches) - 1 else ():
            check_index(z, rows)
    return sum(z.refills for z in zones), sum(z.prunes for z in zones)


@_SET
@given(start=st.dictionaries(st.integers(0, 59), st.tuples(_X, _Y), min_size=1, max_size=45),
       batches=st.lists(st.lists(_UPDATE, min_size=1, max_size=14), min_size=1, max_size=4),
       cuts=st.lists(st.integers(1, 11).map(float), max_size=3, unique=True).map(lambda c: tuple(sorted(c))),
       descending=st.booleans(), ks=st.lists(st.integers(1, 3), min_size=1, max_size=2, unique=True),
       margin=st.integers(0, 4), new_k=st.one_of(st.none(), st.integers(2, 5)), seed=st.integers(0, 10**6))
def test_zones_paint_the_whole_groups_messages_and_keep_their_halos(start, batches, cuts, descending, ks, margin,
                                                                   new_k, seed):
    run_zones(start, batches, cuts, descending, sorted(ks), margin, random.Random(seed), new_k)


def test_a_long_run_refills_and_prunes():
    """Many micro-batches of random moves over 3 zones with a small margin: the halos run short and are refilled from
    the table's rows, extras are pruned, and every micro-batch is the whole operator's."""
    rnd = random.Random(5)
    start = {k: (float(rnd.randint(0, 600)), float(rnd.randint(0, 200))) for k in range(1500)}
    batches = [[(rnd.randint(0, 1600), rnd.random() < 0.1, float(rnd.randint(0, 600)), float(rnd.randint(0, 200)))
                for _ in range(12)] for _ in range(40)]
    refills, prunes = run_zones(start, batches, (200.0, 400.0), False, [2, 3], 1, random.Random(1), check_every=10)
    assert refills >= 3 and prunes >= 1, (refills, prunes)


def test_painting_without_ensure_refuses_a_batch_its_halo_cannot_paint():
    rows = {1: (1.0, 0.0), 2: (2.0, 1.0), 3: (5.0, 0.0), 4: (6.0, 2.0)}
    zone = TopkStreamZone(_snapshot(rows, False, [1]), 1, (4.0,), margin=0)
    batch = _table([(2, True, None, None)], 10)   # the west halo's one object (depth 0 < kmax 1) deleted
    with pytest.raises(RuntimeError, match="too shallow"):
        zone.apply(batch, "reformulated")
    assert zone.ensure(batch, lambda: _arrays(rows)) and zone.refills == 1


def test_a_zones_seed_is_its_own_rows():
    """A subscription added mid-stream is seeded from each zone's own rows (not its halo): the best k of the zones'
    lists is the whole index's."""
    rnd = random.Random(3)
    rows = {k: (float(rnd.randint(0, 12)), float(rnd.randint(0, 4))) for k in range(30)}
    whole = _snapshot(rows, True, [3]).build()
    zones = [TopkStreamZone(_snapshot(rows, True, [3]), z, (4.0, 8.0)) for z in range(3)]
    x1, x2 = np.array([0.0, 3.0, 4.0, -np.inf, 9.0]), np.array([12.0, 8.0, 4.0, np.inf, 2.0])
    k = np.array([3, 2, 3, 1, 2])
    merged = TopkGroup.merge_seeds([z.group.shard_seed(x1, x2, k) for z in zones], True, k)
    assert list(merged) == list(whole.shard_seed(x1, x2, k))


def test_replays_wear_the_halo_to_nothing_and_the_next_painting_refills():
    """Zones left behind replay micro-batches (no message, no state store to read): zone 1's west guarantee falls
    below zero and that side is pruned to nothing; the next painting refills it from the rows and the zones' messages
    are the whole operator's."""
    rows = {k: (float(k % 10), float(k % 4)) for k in range(40)}
    whole = _snapshot(rows, False, [2]).build()
    zones = [TopkStreamZone(_snapshot(rows, False, [2]), z, (5.0,), margin=0) for z in range(2)]
    for b in range(3):   # every west row made worse: each lowers an object of zone 1's west halo
        updates = [(k, False, float(k % 10), 9.0 + b) for k in range(40) if k % 10 < 5]
        batch = _table(updates, 100 * (b + 1))
        for z in [whole, *zones]:
            z.apply(batch, "none")
        _applied(rows, updates)
    assert zones[1].sides[0].guarantee < 0 and zones[1].halo_sizes() == [0]
    updates = [(3, True, None, None), (12, False, 4.0, 0.0), (1, False, 6.0, 1.0)]
    batch = _table(updates, 1000)
    want = whole.apply(batch, "reformulated")
    assert [z.ensure(batch, lambda: _arrays(rows)) for z in zones] == [False, True]
    assert merge_zone_messages([z.apply(batch, "reformulated") for z in zones]).to_pylist() == want.to_pylist()
    _applied(rows, updates)
    for z in zones:
        check_index(z, rows)
