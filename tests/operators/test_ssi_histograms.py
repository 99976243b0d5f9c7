"""Tests of sparksub.operators.shared.ssi_histograms: SSI-HIST (003 §4.4), EQW-HIST (§4.5.1) and OPTIMAL (§4.6.6).

Oracles: exact stabbing counts by brute force, exhaustive bucketings for the DP, per-bucket overlap sums for EQW.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import InvalidSubscription
from sparksub.operators.shared.ssi import canonical_partition
from sparksub.operators.shared.ssi_histograms import (EqualWidthHistogram, OptimalHistogram, SSIHistogram, _allocate,
                                               kmeans_1d, mean_relative_error, stab_counts)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# small grid: ties, duplicates, degenerate intervals
_end = st.integers(0, 15).map(float)
_interval = st.one_of(
    st.tuples(_end, st.integers(0, 5)).map(lambda t: (t[0], t[0] + t[1])),
    st.tuples(_end, st.integers(0, 3)).map(lambda t: (t[0], t[0] + 0.25 * t[1])),
)
_intervals = st.lists(_interval, min_size=1, max_size=25)


def brute_counts(ivs, xs):
    return np.array([sum(lo <= x <= hi for lo, hi in ivs) for x in xs], dtype=float)


def probe_points(ivs):
    """Every endpoint, every midpoint between consecutive distinct endpoints, and points outside."""
    ends = sorted({v for iv in ivs for v in iv})
    mids = [(a + b) / 2 for a, b in zip(ends, ends[1:])]
    return np.array(ends + mids + [ends[0] - 1, ends[-1] + 1, ends[0] - 1e-9, ends[-1] + 1e-9])


def clustered(rng, n, clusters=6, domain=10_000.0, width=200.0):
    """Query ranges around a few popular values (003 §4.2.2: Zipf-like group sizes), separated by gaps."""
    centres = np.sort(rng.choice(np.arange(1, clusters * 4) * domain / (clusters * 4), clusters, replace=False))
    share = 1.0 / np.arange(1, clusters + 1)
    c = rng.choice(centres, n, p=share / share.sum())
    return np.column_stack([c - rng.uniform(0, width, n), c + rng.uniform(0, width, n)])


# ----------------------------------------------------------------------------------------------------------------
# exact counts and the error measures
# ----------------------------------------------------------------------------------------------------------------
@SETTINGS
@given(_intervals)
def test_stab_counts_brute_force(ivs):
    xs = probe_points(ivs)
    assert (stab_counts(ivs, xs) == brute_counts(ivs, xs)).all()


def test_mean_relative_error_measure():
    assert mean_relative_error([2, 0, 5], [4, 0, 5]) == pytest.approx((0.5 + 0 + 0) / 3)
    assert mean_relative_error([3], [0]) == 3.0  # nothing stabbed: absolute error
    assert mean_relative_error([], []) == 0.0
    assert mean_relative_error([3, 1], [0, 2], skip_zero=True) == 0.5


def test_invalid_inputs():
    with pytest.raises(InvalidSubscription):
        SSIHistogram([(0, math.inf)], 4)
    with pytest.raises(InvalidSubscription):
        OptimalHistogram([(2, 1)], 4)
    with pytest.raises(InvalidSubscription):
        EqualWidthHistogram.from_intervals([(math.nan, 1)], 4)
    with pytest.raises(ValueError):
        EqualWidthHistogram(4, (1, 1))
    with pytest.raises(ValueError):
        EqualWidthHistogram(0, (0, 1))
    with pytest.raises(ValueError):
        SSIHistogram([(0, 1)], 3, weights="nope")
    with pytest.raises(ValueError):
        OptimalHistogram(clustered(np.random.default_rng(0), 2000), 3, max_runs=100)


def test_empty_and_zero_budget():
    for h in (SSIHistogram([], 5), OptimalHistogram([], 5), SSIHistogram([(0, 1), (5, 6)], 0)):
        assert (h.estimate(np.array([0.0, 0.5, 5.5])) == 0).all()
    assert SSIHistogram([(0, 1)], 3).estimate(0.5) == 1.0


# ----------------------------------------------------------------------------------------------------------------
# exactness with enough buckets
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", SSIHistogram.WEIGHTS)
@SETTINGS
@given(_intervals, st.integers(0, 5))
def test_ssi_hist_exact_with_enough_buckets(weights, ivs, extra):
    """Every group side gets one bucket per breakpoint (distinct end value) at budget >= needed_buckets."""
    s = SSIHistogram(ivs, 0)
    groups = canonical_partition(ivs)
    # the need is the distinct left ends plus the distinct right ends beyond the point, per group
    need = sum(len({ivs[i][0] for i in g.members}) + len({ivs[i][1] for i in g.members if ivs[i][1] > g.point})
               for g in groups)
    assert s.needed_buckets == need <= 2 * len(ivs)
    for k in (need + extra, 2 * len(ivs)):
        h = SSIHistogram(ivs, k, weights=weights)
        assert h.buckets == need
        xs = probe_points(ivs)
        assert (h.estimate(xs) == brute_counts(ivs, xs)).all()
        assert h.e2(ivs) == 0.0 and h.error(ivs, xs) == 0.0


@SETTINGS
@given(_intervals, st.integers(0, 5))
def test_optimal_exact_with_enough_buckets(ivs, extra):
    o = OptimalHistogram(ivs, 1)
    h = OptimalHistogram(ivs, o.needed_buckets + extra)
    xs = probe_points(ivs)
    assert (h.estimate(xs) == brute_counts(ivs, xs)).all()
    assert h.e2(ivs) == 0.0


@SETTINGS
@given(_intervals, st.integers(1, 12))
def test_bucket_budgets_respected(ivs, k):
    s = SSIHistogram(ivs, k)
    assert s.buckets <= k and s.allocation.sum() <= k
    assert OptimalHistogram(ivs, k).buckets <= k
    assert EqualWidthHistogram.from_intervals(ivs, k).buckets == k
    # estimates are finite and never negative
    xs = probe_points(ivs)
    for h in (s, OptimalHistogram(ivs, k)):
        est = h.estimate(xs)
        assert np.isfinite(est).all() and (est >= -1e-9).all()


# ----------------------------------------------------------------------------------------------------------------
# building blocks: k-means (Lemma 14), bucket allotment
# ----------------------------------------------------------------------------------------------------------------
def test_kmeans_1d():
    y = np.array([1.0, 2.0, 3.0, 100.0, 101.0, 102.0])
    w = np.ones(6)
    starts, centers = kmeans_1d(y, w, 2)
    assert starts.tolist() == [0, 3, 6] and centers.tolist() == [2.0, 101.0]
    starts, centers = kmeans_1d(y, w, 10)  # k >= m: every value its own cluster, exact
    assert starts.tolist() == list(range(7)) and centers.tolist() == y.tolist()
    # weights pull the centre: Σ w (y - c)² is minimised by the weighted mean
    starts, centers = kmeans_1d(np.array([1.0, 3.0]), np.array([3.0, 1.0]), 1)
    assert centers.tolist() == [1.5]
    # zero weights: unweighted mean
    assert kmeans_1d(np.array([2.0, 4.0]), np.zeros(2), 1)[1].tolist() == [3.0]


@SETTINGS
@given(st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=40),
       st.lists(st.floats(0, 10, allow_nan=False), min_size=40, max_size=40), st.integers(1, 8))
def test_kmeans_1d_clusters_are_contiguous_and_no_worse_than_one_cluster(ys, ws, k):
    y = np.sort(np.array(ys))
    w = np.array(ws[:len(y)])
    starts, centers = kmeans_1d(y, w, k)
    assert starts[0] == 0 and starts[-1] == len(y) and (np.diff(starts) > 0).all()
    assert len(centers) == len(starts) - 1 <= k
    cost = sum(float((w[a:b] * (y[a:b] - c) ** 2).sum()) for a, b, c in zip(starts[:-1], starts[1:], centers))
    c1 = kmeans_1d(y, w, 1)[1][0]
    assert cost <= float((w * (y - c1) ** 2).sum()) * (1 + 1e-9) + 1e-9


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 50)), min_size=1, max_size=12), st.integers(0, 40))
def test_allocate_buckets_by_group_size(groups, budget):
    caps = np.array([c for c, _ in groups])
    weights = np.array([float(w) for _, w in groups])
    alloc = _allocate(budget, caps, weights)
    assert (alloc >= 0).all() and (alloc <= caps).all()
    assert alloc.sum() == min(budget, caps.sum())
    active = caps > 0
    if budget >= active.sum():
        assert (alloc[active] >= 1).all()
    # proportional to cardinality: a heavier group with room never gets fewer buckets than a lighter one
    for i, j in itertools.permutations(range(len(groups)), 2):
        if weights[i] > weights[j] and caps[i] > alloc[i] and caps[j] > 0:
            assert alloc[i] >= alloc[j] - 1


# ----------------------------------------------------------------------------------------------------------------
# EQW-HIST (003 §4.5.1)
# ----------------------------------------------------------------------------------------------------------------
@SETTINGS
@given(_intervals, st.integers(1, 10))
def test_eqw_values_are_covered_fractions_and_incremental(ivs, k):
    d0 = min(lo for lo, _ in ivs)
    d1 = max(hi for _, hi in ivs)
    if d0 == d1:
        d1 = d0 + 1
    h = EqualWidthHistogram.from_intervals(ivs, k, domain=(d0, d1))
    inc = EqualWidthHistogram(k, (d0, d1))
    for lo, hi in ivs:
        inc.add(lo, hi)
    edges = np.linspace(d0, d1, k + 1)
    want = [sum(max(0.0, min(hi, b) - max(lo, a)) for lo, hi in ivs) / (b - a) for a, b in zip(edges, edges[1:])]
    assert np.allclose(h.values, want) and np.allclose(inc.values, want)
    for lo, hi in ivs:
        inc.remove(lo, hi)
    assert np.allclose(inc.values, 0.0)
    assert h.estimate(d0 - 1) == 0.0 and h.estimate(d1 + 1) == 0.0
    assert h.estimate(d1) == pytest.approx(want[-1])


# ----------------------------------------------------------------------------------------------------------------
# OPTIMAL: the DP is optimal (brute force) and never worse than EQW
# ----------------------------------------------------------------------------------------------------------------
@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 9), st.floats(0, 3, allow_nan=False)), min_size=2, max_size=8),
       st.integers(1, 4))
def test_dp_matches_exhaustive_bucketings(runs, k):
    y = np.array([float(a) for a, _ in runs])
    w = np.array([b for _, b in runs])
    m = len(y)
    k = min(k, m - 1)

    def cost(labels_starts):
        tot = 0.0
        for a, b in zip(labels_starts[:-1], labels_starts[1:]):
            sw = w[a:b].sum()
            if sw > 0:
                c = (w[a:b] * y[a:b]).sum() / sw
                tot += float((w[a:b] * (y[a:b] - c) ** 2).sum())
        return tot

    best = min(cost([0, *cuts, m]) for r in range(k) for cuts in itertools.combinations(range(1, m), r))
    labels = OptimalHistogram._dp(y, w, k)
    starts = [0, *(np.flatnonzero(np.diff(labels)) + 1).tolist(), m]
    assert len(starts) - 1 <= k
    assert cost(starts) == pytest.approx(best, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("relative", [True, False])
@SETTINGS
@given(_intervals, st.integers(1, 10))
def test_optimal_never_worse_than_eqw(relative, ivs, k):
    """Lemma 13: boundaries at breakpoints lose nothing, so the DP beats every k-bucket step function in E2
    (and, with ``relative=False``, in plain squared error)."""
    o = OptimalHistogram(ivs, k, relative=relative)
    e = EqualWidthHistogram.from_intervals(ivs, k)
    assert o.e2(ivs, relative=relative) <= e.e2(ivs, relative=relative) * (1 + 1e-9) + 1e-12


# ----------------------------------------------------------------------------------------------------------------
# clustered query ranges: SSI-HIST beats EQW, OPTIMAL beats both (Figure 4.12's ordering)
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", ["group", "total"])
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("buckets", [20, 30, 50])
def test_ssi_hist_beats_eqw_on_clustered_ranges(seed, buckets, weights):
    rng = np.random.default_rng(seed)
    ivs = clustered(rng, 3000)
    domain = (0.0, 10_000.0)
    queries = rng.uniform(*domain, 5000)  # uniformly distributed stabbing queries (003 §4.6.6)
    s = SSIHistogram(ivs, buckets, domain=domain, weights=weights)
    e = EqualWidthHistogram.from_intervals(ivs, buckets, domain=domain)
    assert s.buckets <= buckets
    assert s.error(ivs, queries) < e.error(ivs, queries)
    assert s.error(ivs, queries, skip_zero=True) < e.error(ivs, queries, skip_zero=True)
    assert s.e2(ivs, domain) < e.e2(ivs, domain)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("buckets", [20, 50])
def test_optimal_beats_both_on_a_clustered_sample(seed, buckets):
    """OPTIMAL on a sample, as in 003 §4.6.6 (the DP is too slow for the full set)."""
    rng = np.random.default_rng(100 + seed)
    ivs = clustered(rng, 3000)
    sample = ivs[rng.choice(len(ivs), 300, replace=False)]
    domain = (0.0, 10_000.0)
    queries = rng.uniform(*domain, 5000)
    o = OptimalHistogram(sample, buckets, domain=domain)
    s = SSIHistogram(sample, buckets, domain=domain)
    e = EqualWidthHistogram.from_intervals(sample, buckets, domain=domain)
    assert o.e2(sample, domain) <= s.e2(sample, domain)
    assert o.e2(sample, domain) <= e.e2(sample, domain)
    assert o.error(sample, queries) <= s.error(sample, queries)
    assert o.error(sample, queries) <= e.error(sample, queries)
