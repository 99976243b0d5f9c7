"""Tests of sparksub.operators.shared.ssi: canonical stabbing partition (003 §4.2.1, Lemma 10), the dynamic
(1+ε)-approximate partition (§4.2.3, Lemma 12 + refinements, Theorem 13) and α-hotspot tracking (§4.2.2,
invariants (I1)-(I3), Theorem 12).

Oracles: the minimum stabbing number by exhaustive search over candidate points (small sets), and the paper's
literal left-end scan for the canonical partition.
"""
from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import DuplicateSubscription, InvalidSubscription, UnknownSubscription
from sparksub.operators.shared.ssi import (DynamicStabbingPartition, HotspotTracker, canonical_partition,
                                    stabbing_number)

INF = math.inf
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------------------------------
# oracles and strategies
# ----------------------------------------------------------------------------------------------------------------
def brute_tau(intervals) -> int:
    """Smallest number of points stabbing every interval: some optimal set uses only interval ends (shift each
    point right to the nearest right end, or left to a left end when the right end is +inf)."""
    ivs = list(intervals)
    if not ivs:
        return 0
    cands = sorted({v for iv in ivs for v in iv if math.isfinite(v)} | {0.0})
    for k in range(1, len(ivs) + 1):
        for pts in itertools.combinations(cands, k):
            if all(any(lo <= p <= hi for p in pts) for lo, hi in ivs):
                return k
    raise AssertionError("unreachable")


def paper_left_scan(intervals: dict) -> list[set]:
    """003 §4.2.1 as written: scan by increasing left end, keep the common intersection of the list, output
    the list as a group at the first interval that does not overlap it."""
    out, cur, clo, chi = [], set(), -INF, INF
    for iid, (lo, hi) in sorted(intervals.items(), key=lambda kv: (kv[1][0], kv[1][1])):
        if cur and lo > chi:
            out.append(cur)
            cur, clo, chi = set(), -INF, INF
        cur.add(iid)
        clo, chi = max(clo, lo), min(chi, hi)
    if cur:
        out.append(cur)
    return out


# small integer grid: many ties, duplicates and degenerate [a, a] intervals; sometimes an infinite end
_end = st.integers(0, 12).map(float)
_interval = st.one_of(
    st.tuples(_end, st.integers(0, 4)).map(lambda t: (t[0], t[0] + t[1])),
    st.tuples(_end, st.integers(0, 1)).map(lambda t: (t[0], t[0] + 0.5 * t[1])),
    _end.map(lambda x: (-INF, x)),
    _end.map(lambda x: (x, INF)),
)
_finite_interval = st.tuples(_end, st.integers(0, 4)).map(lambda t: (t[0], t[0] + t[1]))


def _ops(interval_strategy, max_size=60):
    """Random workloads: ("ins", (lo, hi)) or ("del", k) = delete the k-th live id (mod the live count)."""
    op = st.one_of(st.tuples(st.just("ins"), interval_strategy),
                   st.tuples(st.just("del"), st.integers(0, 10 ** 6)))
    return st.lists(op, max_size=max_size)


def play(ops, insert, delete, after):
    live = {}
    nid = 0
    for kind, arg in ops:
        if kind == "ins":
            insert(nid, *arg)
            live[nid] = arg
            nid += 1
        elif live:
            k = sorted(live)[arg % len(live)]
            delete(k)
            del live[k]
        after(live)
    return live


# ----------------------------------------------------------------------------------------------------------------
# Lemma 10: the canonical partition
# ----------------------------------------------------------------------------------------------------------------
@SETTINGS
@given(st.lists(_interval, max_size=7))
def test_canonical_partition_is_optimal_and_stabbed(ivs):
    groups = canonical_partition(ivs)
    assert len(groups) == brute_tau(ivs) == stabbing_number(ivs)
    seen = sorted(i for g in groups for i in g.members)
    assert seen == list(range(len(ivs)))
    for g in groups:
        assert math.isfinite(g.point)
        assert g.lo == max(ivs[i][0] for i in g.members) and g.hi == min(ivs[i][1] for i in g.members)
        assert g.lo <= g.point <= g.hi
        assert all(ivs[i][0] <= g.point <= ivs[i][1] for i in g.members)
    assert [g.point for g in groups] == sorted(g.point for g in groups)


@SETTINGS
@given(st.lists(_interval, max_size=40))
def test_canonical_partition_equals_the_papers_left_scan(ivs):
    mapping = {f"q{i}": iv for i, iv in enumerate(ivs)}
    mine = sorted(sorted(g.members) for g in canonical_partition(mapping))
    assert mine == sorted(sorted(g) for g in paper_left_scan(mapping))


def test_canonical_partition_examples():
    assert canonical_partition([]) == []
    g = canonical_partition({"a": (0, 10), "b": (1, 2), "c": (3, 4), "d": (3.5, 9)})
    assert [(x.point, x.members) for x in g] == [(2.0, ("a", "b")), (4.0, ("c", "d"))]
    # duplicates and degenerate intervals: one group; the point is the smallest right end
    assert [(x.point, len(x.members)) for x in canonical_partition([(5, 5), (5, 5), (4, 6)])] == [(5.0, 3)]
    # open ranges get a finite point
    assert canonical_partition([(-INF, INF)])[0].point == 0.0
    assert canonical_partition([(3, INF), (7, INF)])[0].point == 7.0


@pytest.mark.parametrize("bad", [(2, 1), (math.nan, 1), (0, math.nan), (INF, INF), (-INF, -INF)])
def test_invalid_intervals(bad):
    with pytest.raises(InvalidSubscription):
        canonical_partition([bad])
    with pytest.raises(InvalidSubscription):
        DynamicStabbingPartition().insert(1, *bad)
    with pytest.raises(InvalidSubscription):
        HotspotTracker(0.2).insert(1, *bad)


def test_ids_errors():
    d = DynamicStabbingPartition()
    d.insert("a", 0, 1)
    with pytest.raises(DuplicateSubscription):
        d.insert("a", 0, 1)
    with pytest.raises(UnknownSubscription):
        d.delete("b")
    h = HotspotTracker(0.3)
    h.insert("a", 0, 1)
    with pytest.raises(DuplicateSubscription):
        h.insert("a", 2, 3)
    with pytest.raises(UnknownSubscription):
        h.delete("b")
    assert len(h) == 1
    h.check_invariants()
    with pytest.raises(ValueError):
        HotspotTracker(0)
    with pytest.raises(ValueError):
        DynamicStabbingPartition(0)


# ----------------------------------------------------------------------------------------------------------------
# Lemma 12 and refinements: size <= (1+ε)τ(I) and every group stabbed after every operation
# ----------------------------------------------------------------------------------------------------------------
VARIANTS = [(j, t) for j in DynamicStabbingPartition.JOINS for t in DynamicStabbingPartition.TRIGGERS]


@pytest.mark.parametrize("join,trigger", VARIANTS)
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 2.0])
@SETTINGS
@given(ops=_ops(_interval))
def test_dynamic_partition_bound_after_every_operation(join, trigger, epsilon, ops):
    d = DynamicStabbingPartition(epsilon, join=join, trigger=trigger)
    last = {}

    def insert(iid, lo, hi):
        ch = d.insert(iid, lo, hi)
        assert ch.gid == d.group_of(iid)
        last["ch"] = ch

    def after(live):
        tau = stabbing_number(live)
        d.check(tau)  # stabbed, indexes, |P| <= (1+ε)τ(I)
        assert d.stabbing_number <= (1 + epsilon) * tau + 1e-9
        assert d.tau_lower_bound <= tau
        assert len(d) == len(live)
        assert {iid: d.interval(iid) for iid in live} == live
        assert sorted(p for p, _ in d.stabbing_points()) == [g.point for g in d.groups()]

    play(ops, insert, d.delete, after)


@pytest.mark.parametrize("trigger", DynamicStabbingPartition.TRIGGERS)
@SETTINGS
@given(ops=_ops(_finite_interval, max_size=80))
def test_theorem13_between_reconstructions_one_group_per_operation(trigger, ops):
    """003 Theorem 13: before a reconstruction each insertion or deletion affects at most one group."""
    d = DynamicStabbingPartition(0.5, trigger=trigger)
    state = {}

    def snap():
        return {g.gid: (g.point, frozenset(g.members)) for g in d.groups()}

    def insert(iid, lo, hi):
        before = snap()
        ch = d.insert(iid, lo, hi)
        state["cmp"] = (before, ch)

    def delete(iid):
        before = snap()
        ch = d.delete(iid)
        state["cmp"] = (before, ch)

    def after(live):
        if "cmp" not in state:
            return
        before, ch = state.pop("cmp")
        if ch.rebuilt:
            return
        now = snap()
        changed = {g for g in before.keys() | now.keys() if before.get(g) != now.get(g)}
        assert changed <= {ch.gid}

    play(ops, insert, delete, after)


def test_lemma12_count_trigger_rebuild_period():
    """Plain Lemma 12: singleton insertions, a rebuild once more than ε·τ_0/(ε+2) operations happened."""
    d = DynamicStabbingPartition(1.0, join="none", trigger="count")
    for i in range(30):  # disjoint intervals: τ = number of intervals
        d.insert(i, 10 * i, 10 * i + 1)
    r0 = d.counters["rebuilds"]
    assert d.stabbing_number == 30
    d.rebuild()
    # τ_0 = 30, ε = 1: rebuild after more than 10 operations
    for i in range(10):
        d.insert(100 + i, 5, 5.5)  # all stabbed by 5: τ grows by one at most
        assert not d.counters["rebuilds"] > r0 + 1
    assert d.stabbing_number == 40
    d.insert(200, 5, 5.5)
    assert d.counters["rebuilds"] == r0 + 2
    assert d.stabbing_number == stabbing_number({k: d.interval(k) for k in [*range(30), *range(100, 110), 200]})


@SETTINGS
@given(st.lists(_interval, min_size=1, max_size=30))
def test_witnesses_are_pairwise_disjoint(ivs):
    """The witness trigger's lower bound: after a rebuild, one interval per canonical group (its smallest
    right end), pairwise disjoint, so τ(I) >= the witnesses left."""
    d = DynamicStabbingPartition(0.5, trigger="witness")
    for i, iv in enumerate(ivs):
        d.insert(i, *iv)
    d.rebuild()
    w = sorted((ivs[i] for i in d._tracked), key=lambda iv: iv[0])
    assert len(w) == d.stabbing_number == stabbing_number(ivs)
    assert all(a[1] < b[0] for a, b in zip(w, w[1:]))


def test_witness_trigger_rebuilds_less_than_the_papers_relaxed_trigger():
    rng = random.Random(5)
    ivs = {}
    for i in range(3000):
        c = rng.randrange(20) * 100
        ivs[i] = (c - rng.uniform(0, 30), c + rng.uniform(0, 30))
    rebuilds = {}
    for trigger in ("witness", "relaxed"):
        d = DynamicStabbingPartition(0.5, trigger=trigger)
        for i, iv in ivs.items():
            d.insert(i, *iv)
        before = d.counters["rebuilds"]
        for i in rng.sample(sorted(ivs), 1500):
            d.delete(i)
        d.check()
        rebuilds[trigger] = d.counters["rebuilds"] - before
    assert rebuilds["witness"] * 5 <= rebuilds["relaxed"]


def test_join_refinements():
    d = DynamicStabbingPartition(1.0)
    for i, iv in enumerate([(0, 10), (2, 8)]):
        d.insert(i, *iv)
    (g,) = d.groups()
    assert g.point == 8.0 and (g.lo, g.hi) == (2.0, 8.0)
    ch = d.insert(2, 1, 5)  # misses the point 8 but overlaps [2, 8]: joins, point moves to 5
    assert ch.point_moved and not ch.rebuilt and d.group(ch.gid).point == 5.0
    assert d.stabbing_number == 1
    ch = d.insert(3, 4.5, 4.5)  # a degenerate interval inside the intersection [2, 5]
    assert d.stabbing_number == 1 and d.group(ch.gid).point == 4.5
    d.check()
    p = DynamicStabbingPartition(1.0, join="point")
    p.insert(0, 0, 10)
    p.insert(1, 11, 12)
    p.insert(2, 1, 5)  # 10 does not stab it; point-only join opens a group
    assert p.counters["singletons"] >= 2


def test_rebuild_keeps_ids_of_unchanged_groups():
    d = DynamicStabbingPartition(0.5, join="none", trigger="count")
    for i in range(4):
        d.insert(("a", i), 0, 1)
        d.insert(("b", i), 5, 6)
    d.rebuild()
    before = {frozenset(g.members): g.gid for g in d.groups()}
    d.rebuild()
    assert {frozenset(g.members): g.gid for g in d.groups()} == before
    assert d.last_rebuild == (frozenset(), frozenset())
    # a singleton; τ_0 = 2 allows no operation without a rebuild, which merges it into the "a" group
    ch = d.insert("c", 0.5, 5.5)
    assert ch.rebuilt
    after = {frozenset(g.members): g.gid for g in d.groups()}
    b_members = frozenset(("b", i) for i in range(4))
    assert after[b_members] == before[b_members]
    a_members = frozenset([*(("a", i) for i in range(4)), "c"])
    dropped, created = d.last_rebuild
    assert created == {after[a_members]} and after[a_members] not in before.values()
    assert before[frozenset(("a", i) for i in range(4))] in dropped


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), max_size=30), st.data())
def test_group_operations_keep_the_bound(pairs, data):
    d = DynamicStabbingPartition(0.3)
    live = {}
    for i, (a, w) in enumerate(pairs):
        d.insert(i, a, a + w)
        live[i] = (a, a + w)
    d.check()
    nid = 1000
    for _ in range(10):
        if d.stabbing_number and data.draw(st.booleans()):
            gid = data.draw(st.sampled_from([g.gid for g in d.groups()]))
            members = d.remove_group(gid)
            for k in members:
                del live[k]
        else:
            c = data.draw(st.integers(0, 20))
            members = {nid + j: (c - j, c + j) for j in range(3)}
            nid += 3
            ch = d.insert_group(members, point=c)
            live.update(members)
            if not ch.rebuilt:
                assert d.group(ch.gid).point == c
        d.check(stabbing_number(live))
    with pytest.raises(InvalidSubscription):
        d.insert_group({"x": (0, 1), "y": (2, 3)})


# ----------------------------------------------------------------------------------------------------------------
# Theorem 12: hotspot invariants (I1)-(I3) after every operation
# ----------------------------------------------------------------------------------------------------------------
_clustered = st.one_of(
    st.sampled_from([3.0, 3.0, 3.0, 8.0, 8.0]).flatmap(
        lambda c: st.tuples(st.integers(0, 2), st.integers(0, 2)).map(lambda t: (c - t[0], c + t[1]))),
    _interval)


@pytest.mark.parametrize("alpha", [0.1, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("trigger", DynamicStabbingPartition.TRIGGERS)
@SETTINGS
@given(ops=_ops(_clustered, max_size=80))
def test_hotspot_invariants_after_every_operation(alpha, trigger, ops):
    h = HotspotTracker(alpha, 0.5, trigger=trigger)

    def insert(iid, lo, hi):
        up = h.insert(iid, lo, hi)
        assert up.gid == h.group_of(iid) and up.hot == h.is_hot(iid)

    def after(live):
        h.check_invariants(stabbing_number(live))
        assert h.intervals() == live
        n = len(live)
        # (I1) read from the outside: every α-hotspot of 𝓘 is in 𝓘_H, nothing below (α/2)|I| is
        for g in h.scattered():
            assert len(g.members) < alpha * n
        for g in h.hotspots():
            assert len(g.members) >= alpha * n / 2
            assert all(h.is_hot(i) for i in g.members)
        assert len(h.hotspots()) <= 2 / alpha

    play(ops, insert, h.delete, after)


def test_hotspot_promote_and_demote():
    h = HotspotTracker(0.5, 1.0)
    h.insert("a", 0, 2)
    assert h.is_hot("a") and h.counters["promotions"] == 1 and h.moves == 1
    up = h.insert("b", 1, 3)  # joins the hot group (common intersection [1, 2])
    assert up.hot and h.counters["hot_inserts"] == 1
    for i in range(4):  # scattered intervals elsewhere; the hot group has 2 of 6 >= (α/2)·6 = 1.5
        h.insert(f"s{i}", 100 + 10 * i, 101 + 10 * i)
    assert len(h.hotspots()) == 1
    up = h.insert("s9", 500, 501)  # 2 < (α/2)·7 = 1.75? no: still hot
    assert not up.demoted
    for i in range(5):
        h.insert(f"t{i}", 1000 + 10 * i, 1001 + 10 * i)
    # 2 < 0.25·12: demoted back into S, keeping its id and point
    assert not h.hotspots() and h.counters["demotions"] == 1
    assert h.group_of("a") == h.group_of("b")
    h.check_invariants()
    for i in range(5):
        h.delete(f"t{i}")
    for i in range(4):
        h.delete(f"s{i}")
    h.delete("s9")
    # only [0,2] and [1,3] remain: one group of 2 >= α·2, promoted again
    assert [sorted(g.members) for g in h.hotspots()] == [["a", "b"]]
    h.check_invariants()
    h.delete("a")
    h.delete("b")
    assert len(h) == 0 and not h.hotspots() and not h.scattered()
    h.check_invariants()


def _run(h, steps, rng, state, scatter=0.3, p_del=0.45, drift_every=0):
    """Random inserts / deletes: 70% clustered around ``state["centres"]``, 30% short scattered intervals."""
    live = state["live"]
    for _ in range(steps):
        t = state["t"]
        state["t"] += 1
        if drift_every and t and t % drift_every == 0:
            # the hotspots move (003 §4.2: interests shift with the season)
            state["centres"] = [rng.uniform(0, 1000) for _ in state["centres"]]
        if live and rng.random() < p_del:
            j = rng.randrange(len(live))
            iid = live[j]
            live[j] = live[-1]
            live.pop()
            h.delete(iid)
        else:
            if rng.random() < scatter:
                a = rng.uniform(0, 1000)
                lo, hi = a, a + rng.uniform(0, 3)
            else:
                c = rng.choice(state["centres"])
                lo, hi = c - rng.uniform(0, 20), c + rng.uniform(0, 20)
            h.insert(state["t"], lo, hi)
            live.append(state["t"])


@pytest.mark.parametrize("alpha,drift", [(0.05, 0), (0.1, 2000), (0.2, 500), (0.4, 300)])
def test_amortised_moves_per_operation_long_run(alpha, drift):
    """(I3): intervals moving into or out of S, amortised, are at most 5 per update (credit argument of
    Theorem 12's proof) — measured on 20,000 random operations with drifting hotspots."""
    rng = random.Random(7)
    h = HotspotTracker(alpha, 0.5)
    steps = 20_000
    state = {"live": [], "t": 0, "centres": [rng.uniform(0, 1000) for _ in range(4)]}
    for chunk in range(10):
        _run(h, steps // 10, rng, state, drift_every=drift)
        h.check_invariants()
    c = h.counters
    ops = c["inserts"] + c["deletes"]
    assert h.moves <= h.credits + 1e-6 <= 5 * c["inserts"] + 2 * c["deletes"] + 1e-6
    assert h.moves / ops <= 5
    print(f"\nα={alpha} drift={drift}: {ops} ops, {h.moves} moves ({h.moves / ops:.3f}/op), "
          f"credits {h.credits / ops:.3f}/op, promotions {c['promotions']}, demotions {c['demotions']}, "
          f"S rebuilds {h.scattered_partition.counters['rebuilds']}")


def test_amortised_moves_adversarial_threshold_oscillation():
    """A group hovering at the promotion threshold: the α vs α/2 hysteresis of (I1) keeps moves bounded."""
    alpha = 0.25
    h = HotspotTracker(alpha, 0.5)
    nid = 0
    for i in range(40):  # scattered background: disjoint unit intervals
        h.insert(("bg", i), 100 * i + 50, 100 * i + 51)
    cluster = []
    for rnd in range(300):
        # grow a cluster until it is promoted, then shrink it until it is demoted, repeatedly
        while not (cluster and h.is_hot(cluster[0])):
            h.insert(nid, 10, 20)
            cluster.append(nid)
            nid += 1
        while cluster and h.is_hot(cluster[0]):
            h.delete(cluster.pop())
    h.check_invariants()
    c = h.counters
    ops = c["inserts"] + c["deletes"]
    assert c["promotions"] >= 300 and c["demotions"] >= 299
    assert h.moves <= 5 * c["inserts"] + 2 * c["deletes"]
    print(f"\noscillation: {ops} ops, {h.moves} moves ({h.moves / ops:.3f}/op)")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), min_size=0, max_size=60),
       st.sampled_from([0.05, 0.2, 0.5]))
def test_bulk_loads_keep_the_invariants(spans, alpha):
    """insert_many into an empty partition / tracker: the canonical partition (size τ), invariants I1–I3, and
    afterwards the same behaviour under single inserts and deletes."""
    items = [(i, float(lo), float(lo + w)) for i, (lo, w) in enumerate(spans)]
    part = DynamicStabbingPartition(0.5)
    part.insert_many(items)
    part.check()
    assert part.stabbing_number == stabbing_number({i: (lo, hi) for i, lo, hi in items}) if items else True
    h = HotspotTracker(alpha, 0.5)
    h.insert_many(items)
    h.check_invariants()
    for i, lo, hi in items[: len(items) // 2]:
        h.delete(i)
        h.check_invariants()
    h.insert_many([(100 + i, lo, hi) for i, lo, hi in items[:5]])  # non-empty: one by one
    h.check_invariants()
    with pytest.raises(DuplicateSubscription):
        h.insert_many([(999, 0.0, 1.0), (999, 0.0, 1.0)])
    assert 999 not in h  # all checked first: nothing inserted
