"""The fast paths of RANGE_TOPK's pure operator against brute force: ``TopkIndex.first_k`` and ``min_y`` read
as numpy slices of the A2B-tree's leaves with the segment tree between them (002 §II-B), ``min_y``'s ``below``
bound (the Paint-Dense sweep's stop, §III-A), and ``PointIndex2D.query_many`` (one bounding-box query for a
seq's messages).

Small leaves (capacity 4) make the ranges span many leaves, read ones and runs of others between them; x and y
come from a few values, so x's are shared and y's tie (broken by key)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.shared.point_index import PointIndex2D
from sparksub.operators.topk.core import TopkIndex

INF = math.inf
XS = [0.0, 1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
ENDS = [-INF, -1.0, 0.0, 0.5, 2.0, 2.5, 3.0, 6.0, 7.5, 9.0, 12.0, 13.0, INF]
YS = [-3.0, 0.0, 1.0, 1.5, 2.0, 4.0]


def brute_first_k(objects: dict, x0, y0, key0, leftward, k):
    side = [(x, y, key) for key, (x, y) in objects.items()
            if (x < x0 if leftward else x > x0) and (y, key) < (y0, key0)]
    side.sort(key=lambda o: (-o[0] if leftward else o[0], o[1], o[2]))  # nearest first, at one x by rank value
    return side[:k]


def brute_min_y(objects: dict, lo, hi, closed, y0, key0, below):
    inside = [(y, key, x) for key, (x, y) in objects.items()
              if (lo <= x <= hi if closed else lo < x < hi) and (y, key) > (y0, key0)
              and (below is None or (y, key) < below)]
    return min(inside, default=None)


ops = st.lists(st.tuples(st.sampled_from(["put", "put", "put", "del"]), st.integers(0, 60), st.sampled_from(XS),
                         st.sampled_from(YS)), min_size=1, max_size=120)
queries = st.lists(st.tuples(st.sampled_from(ENDS), st.sampled_from(ENDS), st.booleans(),
                             st.sampled_from([-INF, *YS]), st.integers(-1, 61),
                             st.one_of(st.none(), st.tuples(st.sampled_from(YS), st.integers(0, 61)))),
                   min_size=1, max_size=30)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, queries=queries, str_keys=st.booleans())
def test_first_k_and_min_y_match_brute_force(ops, queries, str_keys):
    key = (lambda i: f"k{i:02d}") if str_keys else (lambda i: i)
    tree = TopkIndex(4)
    objects: dict = {}
    for op, i, x, y in ops:
        k = key(i)
        if k in objects:
            tree.remove(k)
            del objects[k]
        if op == "put":
            tree.insert(k, x, y)
            objects[k] = (x, y)
    tree.check_invariants()
    for lo, hi, closed, y0, i0, below in queries:
        k0 = key(i0)
        bound = None if below is None else (below[0], key(below[1]))
        assert tree.min_y(lo, hi, closed, y0, k0, bound) == brute_min_y(objects, lo, hi, closed, y0, k0, bound), \
            (lo, hi, closed, y0, k0, bound)
        for leftward in (True, False):  # lo as x0, i0 % 7 as k (0 included)
            assert tree.first_k(lo, y0, k0, leftward, i0 % 7) == brute_first_k(objects, lo, y0, k0, leftward, i0 % 7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 400), seed=st.integers(0, 2 ** 16))
def test_top_matches_brute_force_on_wide_ranges(n, seed):
    """Many distinct x's and a few y's: ranges across dozens of leaves, runs of leaves above the threshold."""
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 300, n).astype(float)
    ys = rng.integers(0, 20, n).astype(float)
    tree = TopkIndex(4)
    tree.bulk_load(list(range(n)), xs, ys)
    objects = {i: (x, y) for i, (x, y) in enumerate(zip(xs.tolist(), ys.tolist()))}
    for _ in range(20):
        lo, hi = sorted(rng.choice([-INF, *range(-5, 305, 7), INF], 2).tolist())
        got = tree.top(lo, hi, 6)
        want = sorted((y, key, x) for key, (x, y) in objects.items() if lo <= x <= hi)[:6]
        assert got == want


bound = st.sampled_from([-INF, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, INF, math.nan])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points=st.lists(st.tuples(st.sampled_from([-INF, -1.0, 0.0, 1.0, 2.0, 3.0, INF]),
                                 st.sampled_from([-INF, -1.0, 0.0, 1.0, 2.0, 3.0, INF])), max_size=40),
       removed=st.sets(st.integers(0, 39)), merge=st.integers(1, 8), bucket=st.integers(1, 5),
       rects=st.lists(st.tuples(bound, st.booleans(), bound, st.booleans(), bound, st.booleans(), bound,
                                st.booleans()), max_size=12),
       cells=st.sampled_from([None, 1, 4]))
def test_query_many_matches_query(points, removed, merge, bucket, rects, cells):
    """Static part, delta and tombstones; open and closed bounds at ±inf, NaN bounds; ``cells`` makes the
    bounding boxes crowded, so the rectangles are split into halves down to one."""
    with pytest.MonkeyPatch.context() as mp:
        if cells is not None:
            mp.setattr("sparksub.operators.shared.point_index._MANY_CELLS", cells)
        check_query_many(points, removed, merge, bucket, rects)


def check_query_many(points, removed, merge, bucket, rects):
    idx = PointIndex2D(bucket_size=bucket, merge_threshold=merge)
    half = len(points) // 2
    for lo, hi in ((0, half), (half, len(points))):   # two adds: a static part and a delta
        if lo < hi:
            idx.add_many(np.arange(lo, hi), [p[0] for p in points[lo:hi]], [p[1] for p in points[lo:hi]])
    gone = sorted(i for i in removed if i < len(points))
    idx.remove_many(np.array(gone, dtype=np.int64))
    slots, offsets = idx.query_many(rects)
    assert len(offsets) == len(rects) + 1 and offsets[-1] == len(slots)
    for n, rect in enumerate(rects):
        assert sorted(slots[offsets[n]:offsets[n + 1]].tolist()) == sorted(idx.query(*rect).tolist()), rect
