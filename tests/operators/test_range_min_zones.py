"""DS-CN zones (000 §2.3.2) against the single-tree S-CN group and a brute-force recompute.

For every batch the zones must emit, message for message and in seq order, what ``RangeMinGroup`` emits in
reformulated mode; their unicast rows must be the group's; delivered to subscribers, their messages must
notify exactly the subscriptions whose recomputed MIN (MAX) changed, with the new value.  Subscription shards
must match what the single point index matches.
"""
from __future__ import annotations

import math
import pickle
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.range_min.delivery import SubscriptionPoints, Subscribers, match
from sparksub.operators.range_min.group import RangeMinGroup
from sparksub.operators.range_min.subscription_shards import shard_subscriptions
from sparksub.operators.range_min.zones import (Zone, ZonedRangeMin, apply_round1, apply_round2,
                                                equal_count_cuts, messages_table)

INF = math.inf


# ----------------------------------------------------------------------------------------------------------------
# oracles
# ----------------------------------------------------------------------------------------------------------------
def brute_value(rows: dict, lo: float, hi: float, maximum: bool):
    ys = [y for x, y in rows.values() if lo <= x <= hi]
    return (max(ys) if maximum else min(ys)) if ys else None


def brute_edges(rows: dict, lo: float, hi: float, maximum: bool):
    """A zone's edge staircases from its rows: the strict prefix minima of the per-X minima (internal sign)."""
    per_x: dict = {}
    for x, y in rows.values():
        if lo <= x < hi:
            v = -y if maximum else y
            per_x[x] = min(per_x.get(x, INF), v)

    def stair(xs):
        out, cur = [], INF
        for x in xs:
            if per_x[x] < cur:
                cur = per_x[x]
                out.append((x, cur))
        return out
    return stair(sorted(per_x)), stair(sorted(per_x, reverse=True))


def as_table(rows: list) -> pa.Table:
    return pa.table({"key": [r[0] for r in rows], "x": pa.array([r[1] for r in rows], pa.float64()),
                     "y": pa.array([r[2] for r in rows], pa.float64()),
                     "op": pa.array([r[3] for r in rows], pa.int8()),
                     "seq": pa.array([r[4] for r in rows], pa.int64())})


def check_zones(z: ZonedRangeMin, rows: dict) -> None:
    """Every zone holds exactly the rows of its interval, a valid A2B-tree and the right staircases."""
    assert z.directory == {k: x for k, (x, _) in rows.items()}
    for zone in z.zones:
        zone.core.tree.check_invariants()
        mine = {k: v for k, v in rows.items() if zone.lo <= v[0] < zone.hi}
        sign = -1 if z.maximum else 1
        assert dict(zone.core.tree._pos) == {k: (x, sign * y) for k, (x, y) in mine.items()}
        left, right = brute_edges(rows, zone.lo, zone.hi, z.maximum)
        e = zone.edges()
        assert list(zip(e.left_x, e.left_m)) == left and list(zip(e.right_x, e.right_m)) == right


# ----------------------------------------------------------------------------------------------------------------
# hypothesis: zones = single core = brute force
# ----------------------------------------------------------------------------------------------------------------
coord = st.integers(0, 12).map(float)          # few values: duplicate X and ties in Y are common
subscription = st.tuples(st.integers(-1, 13), st.integers(-1, 13)).map(
    lambda t: (min(t) if min(t) >= 0 else -INF, max(t) if max(t) <= 12 else INF))
update = st.tuples(st.sampled_from(["y", "y", "x", "insert", "delete", "null_x", "null_y"]),
                   st.integers(0, 10 ** 6), coord, coord)
cuts_st = st.one_of(
    st.integers(1, 6).map(lambda k: ("equal", k)),
    st.lists(st.integers(-1, 14), min_size=0, max_size=5).map(lambda c: ("explicit", sorted(set(c)))))


def concrete_updates(rows: dict, updates, first_key: int) -> list:
    """The drawn updates as batch rows (key, x, y, op, seq) against the evolving table (``rows`` is updated)."""
    out, nxt = [], first_key
    for seq, (kind, pick, x, y) in enumerate(updates):
        live = sorted(rows)
        if kind != "insert" and not live:
            kind = "insert"
        if kind == "insert":
            key, nxt = f"k{nxt}", nxt + 1
            row = (key, x, y, 0)
        else:
            key = live[pick % len(live)]
            row = {"y": (key, rows[key][0], y, 0), "x": (key, x, y, 0), "delete": (key, None, None, 1),
                   "null_x": (key, None, y, 0), "null_y": (key, rows[key][0], None, 0)}[kind]
        if row[3] == 1 or row[1] is None or row[2] is None:
            rows.pop(key, None)
        else:
            rows[key] = (row[1], row[2])
        out.append((*row, seq))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points=st.lists(st.tuples(coord, coord), min_size=0, max_size=16),
       subs=st.lists(subscription, min_size=1, max_size=20),
       updates=st.lists(update, min_size=1, max_size=80),
       zoning=cuts_st, maximum=st.booleans(), batch_size=st.integers(1, 40))
def test_zones_equal_the_single_core_and_brute_force(points, subs, updates, zoning, maximum, batch_size):
    rows = {f"k{i}": p for i, p in enumerate(points)}
    keys, xs, ys = list(rows), [p[0] for p in rows.values()], [p[1] for p in rows.values()]
    ids = [f"s{i}" for i in range(len(subs))]
    x1 = np.array([a for a, _ in subs])
    x2 = np.array([b for _, b in subs])
    if zoning[0] == "equal":
        zones = ZonedRangeMin.from_rows(keys, xs, ys, zoning[1], maximum)
    else:                               # explicit cuts: zones may start empty, or outside every row
        zones = ZonedRangeMin([float(c) for c in zoning[1]], maximum)
        zones.load(keys, xs, ys)
    uzones = ZonedRangeMin.restore(pickle.loads(pickle.dumps(zones.snapshot())))
    single, usingle = (RangeMinGroup("zones", "t", "x", "y", maximum) for _ in range(2))
    for g in (single, usingle):
        g.register(ids, x1, x2)
        g.load(keys, xs, ys)
    points_index = SubscriptionPoints()
    points_index.add(ids, x1, x2)
    subscribers = Subscribers()
    subscribers.add(ids, x1, x2, values=[brute_value(rows, a, b, maximum) for a, b in subs])

    final = dict(rows)
    batch = concrete_updates(final, updates, len(points))
    history = [dict(rows)]                   # the table after each update, for the brute force
    for r in batch:
        history.append(dict(history[-1]))
        if r[3] == 1 or r[1] is None or r[2] is None:
            history[-1].pop(r[0], None)
        else:
            history[-1][r[0]] = (r[1], r[2])
    assert history[-1] == final

    delivered = {}
    for start in range(0, len(batch), batch_size):
        chunk = as_table(batch[start:start + batch_size])
        got = zones.apply(chunk)
        assert got.to_pylist() == single.apply(chunk, "reformulated").to_pylist()
        assert uzones.apply(chunk, "unicast", points_index).to_pylist() == usingle.apply(chunk, "unicast").to_pylist()
        for r in subscribers.deliver(got).to_pylist():
            delivered.setdefault(r["seq"], {})[r["subscription_id"]] = r["value"]
        check_zones(zones, history[min(start + batch_size, len(batch))])
        zones = ZonedRangeMin.restore(zones.snapshot())      # a restored state carries on identically
    expected = {}
    for seq in range(len(batch)):
        before, after = history[seq], history[seq + 1]
        changed = {s: brute_value(after, a, b, maximum) for s, (a, b) in zip(ids, subs)
                   if brute_value(after, a, b, maximum) != brute_value(before, a, b, maximum)}
        if changed:
            expected[seq] = changed
    assert delivered == expected
    for s, (a, b) in zip(ids, subs):
        assert zones.range_value(a, b) == brute_value(final, a, b, maximum)
    got = zones.range_values(x1, x2)
    want = np.array([np.nan if (v := brute_value(final, a, b, maximum)) is None else v for a, b in subs])
    np.testing.assert_array_equal(got, want)
    s = uzones.stats()
    assert s["updates_round1"] <= s["updates"] and sum(z["rows"] for z in s["zones"]) == len(final)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points=st.lists(st.tuples(coord, coord), min_size=0, max_size=16),
       subs=st.lists(subscription, min_size=1, max_size=20),
       updates=st.lists(update, min_size=1, max_size=60),
       n_zones=st.integers(1, 5), maximum=st.booleans(), batch_size=st.integers(1, 30))
def test_zoned_cn_plus_and_s_mn_equal_the_single_core_and_brute_force(points, subs, updates, n_zones, maximum,
                                                                     batch_size):
    """The other two reformulated variants through the zones: CN+ (000 §2.2.2, round 1 only) and S-MN (000 §2.1.2)
    give the single group's messages row for row; delivered, every subscriber ends at the recomputed MIN / MAX."""
    rows = {f"k{i}": p for i, p in enumerate(points)}
    keys, xs, ys = list(rows), [p[0] for p in rows.values()], [p[1] for p in rows.values()]
    ids = [f"s{i}" for i in range(len(subs))]
    x1, x2 = np.array([a for a, _ in subs]), np.array([b for _, b in subs])
    points_index = SubscriptionPoints()
    points_index.add(ids, x1, x2)
    final = dict(rows)
    batch = concrete_updates(final, updates, len(points))
    for mode in ("cn_plus", "multicast"):
        zones = ZonedRangeMin.from_rows(keys, xs, ys, n_zones, maximum)
        single = RangeMinGroup("zones", "t", "x", "y", maximum)
        single.register(ids, x1, x2)
        single.load(keys, xs, ys)
        subscribers = Subscribers()
        subscribers.add(ids, x1, x2, values=[brute_value(rows, a, b, maximum) for a, b in subs])
        subscribers.attach_table(keys, xs, ys, maximum)
        for start in range(0, len(batch), batch_size):
            chunk = as_table(batch[start:start + batch_size])
            got = zones.apply(chunk, mode, points_index)
            assert got.to_pylist() == single.apply(chunk, mode).to_pylist()
            subscribers.deliver(got)
        want = [brute_value(final, a, b, maximum) for a, b in subs]
        assert [None if v != v else v for v in subscribers.values_of(ids).tolist()] == want
        check_zones(zones, final)
        if mode == "cn_plus":       # nothing deferred: CN+ reads no other zone
            assert zones.stats()["updates_round1"] == zones.stats()["updates"]


# ----------------------------------------------------------------------------------------------------------------
# deterministic cases
# ----------------------------------------------------------------------------------------------------------------
def _walk(n_rows: int, n_updates: int, seed: int):
    """Uniform rows, then a random walk of Y (the paper's workload in small, 000 Table 1), some spikes."""
    r = random.Random(seed)
    rows = {f"o{i}": (r.uniform(0, 1000), r.uniform(0, 1000)) for i in range(n_rows)}
    start = dict(rows)
    batch = []
    for seq in range(n_updates):
        k = f"o{r.randrange(n_rows)}"
        x, y = rows[k]
        y = r.uniform(0, 0.01) if r.random() < 0.005 else min(max(y + r.gauss(0, 5), 0.0), 1000.0)
        rows[k] = (x, y)
        batch.append((k, x, y, 0, seq))
    return start, rows, batch


def test_random_walk_mostly_settles_in_round_1_about_98_percent():
    """3,000 rows in 4 equal-count zones, 3,000 random-walk updates in batches of 500: equal to the single core.
    About 98% of the updates are settled inside their zone in round 1 on this seed (reported, not asserted: it
    is a property of the workload); both rounds must have run."""
    start, final, batch = _walk(3000, 3000, seed=5)
    zones = ZonedRangeMin.from_rows(list(start), [p[0] for p in start.values()], [p[1] for p in start.values()], 4)
    single = RangeMinGroup("zones", "t", "x", "y", False)
    single.load(list(start), [p[0] for p in start.values()], [p[1] for p in start.values()])
    for a in range(0, len(batch), 500):
        chunk = as_table(batch[a:a + 500])
        assert zones.apply(chunk).equals(single.apply(chunk, "reformulated"))
    check_zones(zones, final)
    s = zones.stats()
    assert 0 < s["updates_round1"] < s["updates"] == 3000
    assert all(z["round1_steps"] > 0 for z in s["zones"])
    assert [z["rows"] for z in s["zones"]] == [750] * 4


def test_one_zone_at_a_time_as_partitions_would_run():
    """The runtime's path: each zone restored alone from its snapshot, round 1 zone by zone in any order, the
    round-1 outputs pickled (they cross partitions), round 2 on them: the single core's messages."""
    start, final, batch = _walk(400, 600, seed=9)
    keys, xs, ys = list(start), [p[0] for p in start.values()], [p[1] for p in start.values()]
    router = ZonedRangeMin.from_rows(keys, xs, ys, 5, maximum=True)
    parts = [Zone.restore(pickle.loads(pickle.dumps(s))) for s in router.snapshot().zones]
    single = RangeMinGroup("zones", "t", "x", "y", True)
    single.load(keys, xs, ys)
    for a in range(0, len(batch), 150):
        chunk = as_table(batch[a:a + 150])
        routed = router.route(chunk)
        firsts = {}
        for i in (3, 0, 4, 2, 1):
            msgs, r1 = apply_round1(parts[i], routed.steps[i])
            firsts[i] = (msgs, pickle.loads(pickle.dumps(r1)))
        second = apply_round2([r1 for _, r1 in firsts.values()])
        merged = sorted([m for msgs, _ in firsts.values() for m in msgs] + second, key=lambda t: t[0])
        assert messages_table("zones", True, merged).equals(single.apply(chunk, "reformulated"))
    assert sum(len(p) for p in parts) == len(final)


def test_an_emptied_zone_is_crossed_by_the_walks():
    """The middle zone loses every row; updates beside it then read across it (round 2), and it refills."""
    keys = [f"k{i}" for i in range(9)]
    xs = [1.0, 2.0, 3.0, 11.0, 12.0, 13.0, 21.0, 22.0, 23.0]
    ys = [5.0, 7.0, 6.0, 1.0, 9.0, 2.0, 8.0, 3.0, 4.0]
    zones = ZonedRangeMin([10.0, 20.0])
    zones.load(keys, xs, ys)
    single = RangeMinGroup("zones", "t", "x", "y", False)
    single.load(keys, xs, ys)
    rows = [("k3", None, None, 1, 0), ("k4", None, None, 1, 1), ("k5", 30.0, 0.5, 0, 2),   # zone 1 emptied
            ("k1", 2.0, 9.5, 0, 3), ("k7", 22.0, 9.0, 0, 4), ("k0", 1.0, 0.1, 0, 5),        # walks cross it
            ("k9", 15.0, 2.5, 0, 6), ("k8", 23.0, 0.2, 0, 7)]                               # refill, cross again
    for a in range(0, len(rows), 3):
        chunk = as_table(rows[a:a + 3])
        assert zones.apply(chunk).to_pylist() == single.apply(chunk, "reformulated").to_pylist()
    assert zones.stats()["zones"][1]["rows"] == 1
    assert sum(z["round2_steps"] for z in zones.stats()["zones"]) > 0


@pytest.mark.parametrize("mirror", [False, True])
@pytest.mark.parametrize("maximum", [False, True])
def test_a_hull_walks_through_a_whole_zone_into_the_next(maximum, mirror):
    """A bad update in an outer zone whose hull takes the middle zone's staircase (minimum 6, just above the
    update's old Y of 5) and ends in the far zone (Y 4 <= 5): round 2 must read both zones at the step's
    version.  ``mirror`` flips X (the walk goes left), ``maximum`` flips Y."""
    at = (lambda x: 30.0 - x) if mirror else (lambda x: x)
    sign = -1.0 if maximum else 1.0
    keys, xs, ys = ["a", "b", "c", "d", "e"], [at(x) for x in (5.0, 12.0, 15.0, 25.0, 2.0)], \
        [sign * y for y in (5.0, 7.0, 6.0, 4.0, 1.0)]
    zones = ZonedRangeMin([10.0, 20.0], maximum)
    zones.load(keys, xs, ys)
    single = RangeMinGroup("zones", "t", "x", "y", maximum)
    single.load(keys, xs, ys)
    chunk = as_table([("d", at(25.0), sign * 4.5, 0, 0), ("a", at(5.0), sign * 9.0, 0, 1),
                      ("d", at(25.0), sign * 4.0, 0, 2)])
    got = zones.apply(chunk).to_pylist()
    assert got == single.apply(chunk, "reformulated").to_pylist()
    far = [m["outer_l"] if mirror else m["outer_r"] for m in got if m["seq"] == 1]
    assert at(25.0) in far                                  # the walk ended in the far zone
    assert zones.stats()["zones"][2 if mirror else 0]["round2_steps"] == 1       # a's update, in round 2


def test_bad_input_changes_nothing():
    zones = ZonedRangeMin([5.0])
    zones.load(["a", "b"], [1.0, 7.0], [3.0, 4.0])
    before = zones.snapshot()
    with pytest.raises(BadUpdate, match=r"seq 11 \(key 'c'\).*non-finite"):
        zones.apply(as_table([("a", 2.0, 1.0, 0, 10), ("c", INF, 1.0, 0, 11)]))
    assert zones.directory == {"a": 1.0, "b": 7.0}
    assert [z.keys.tolist() for z in zones.snapshot().zones] == [z.keys.tolist() for z in before.zones]
    with pytest.raises(ValueError, match="strictly increasing"):
        ZonedRangeMin([3.0, 3.0])
    with pytest.raises(ValueError, match="finite"):
        ZonedRangeMin([INF])
    with pytest.raises(ValueError, match="outside"):
        Zone(0, 2, -INF, 5.0).load(["a"], [6.0], [1.0])
    with pytest.raises(ValueError, match="round-1 output of every zone"):
        apply_round2([apply_round1(zones.zones[0], [])[1]])


@given(values=st.lists(st.one_of(st.floats(-1e6, 1e6), st.integers(0, 3).map(float)), min_size=0, max_size=300),
       k=st.integers(1, 9))
def test_equal_count_cuts_balance_the_zones(values, k):
    cuts = equal_count_cuts(values, k)
    assert len(cuts) <= k - 1 and (np.diff(cuts) > 0).all()
    counts = np.bincount(np.searchsorted(cuts, values, side="right"), minlength=len(cuts) + 1)
    assert len(values) == 0 or (counts > 0).all()          # cuts are values of the data: no zone starts empty
    if len(set(values)) == len(values) and len(values) >= k:
        assert len(cuts) == k - 1 and counts.max() - counts.min() <= 1
    elif len(set(values)) >= k:
        assert len(cuts) >= 1 or k == 1


# ----------------------------------------------------------------------------------------------------------------
# subscriptions in shards
# ----------------------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(subs=st.lists(subscription, min_size=1, max_size=40), k=st.integers(1, 6),
       by=st.sampled_from(["x1", "hash"]), points=st.lists(st.tuples(coord, coord), min_size=1, max_size=14),
       updates=st.lists(update, min_size=1, max_size=30))
def test_shards_match_what_the_single_index_matches(subs, k, by, points, updates):
    ids = [f"s{i}" for i in range(len(subs))]
    x1 = np.array([a for a, _ in subs])
    x2 = np.array([b for _, b in subs])
    rows = {f"k{i}": p for i, p in enumerate(points)}
    keys, xs, ys = list(rows), [p[0] for p in rows.values()], [p[1] for p in rows.values()]
    single = RangeMinGroup("g", "t", "x", "y", False)          # the one point index: the reference
    single.register(ids, x1, x2)
    single.load(keys, xs, ys)
    zones = ZonedRangeMin.from_rows(keys, xs, ys, 3)           # gives the messages and the X-moves' old Y
    shards = shard_subscriptions(single.points, k, by)
    assert sorted(i for s in shards.shards for i in s) == sorted(ids)
    batch = as_table(concrete_updates(rows, updates, len(points)))
    routed = zones.route(batch)
    firsts = [apply_round1(z, s) for z, s in zip(zones.zones, routed.steps)]
    merged = sorted([m for msgs, _ in firsts for m in msgs] + apply_round2([r for _, r in firsts]),
                    key=lambda t: t[0])
    messages = messages_table("g", False, merged)
    old_values = {s: v for _, r in firsts for s, v in r.old_values.items()}

    mi, slots = match(single.points, messages)
    want = set(zip(mi.tolist(), single.points.ids_of(slots).tolist()))
    got = [(int(m), s) for msg_idx, sids in shards.match(messages) for m, s in zip(msg_idx, sids)]
    assert len(got) == len(set(got)) and set(got) == want
    by_row = (lambda r: (r["seq"], r["subscription_id"], r["value"]))
    union = sorted(by_row(r) for t in shards.unicast(messages, old_values) for r in t.to_pylist())
    assert union == sorted(by_row(r) for r in single.apply(batch, "unicast").to_pylist())
