"""PointIndex2D against a brute-force numpy mask (hypothesis + seeded numpy runs)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.shared.point_index import PointIndex2D

INF = np.inf
POOL = [-INF, -2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, INF]          # ties and infinite ends
BOUNDS = POOL + [-1.5, 0.25, 2.5, 1e300, -1e300]


def brute(model: dict, q) -> np.ndarray:
    x1l, c1, x1h, c2, x2l, c3, x2h, c4 = q
    if not model:
        return np.empty(0, dtype=np.int64)
    slots = np.fromiter(model.keys(), dtype=np.int64)
    a = np.array([p[0] for p in model.values()])
    b = np.array([p[1] for p in model.values()])
    m = (a >= x1l if c1 else a > x1l) & (a <= x1h if c2 else a < x1h)
    m &= (b >= x2l if c3 else b > x2l) & (b <= x2h if c4 else b < x2h)
    return np.sort(slots[m])


rects = st.tuples(st.sampled_from(BOUNDS), st.booleans(), st.sampled_from(BOUNDS), st.booleans(),
                  st.sampled_from(BOUNDS), st.booleans(), st.sampled_from(BOUNDS), st.booleans())


def check_all(idx: PointIndex2D, model: dict, queries) -> None:
    assert len(idx) == len(model)
    for q in queries:
        got = idx.query(*q)
        assert got.dtype == np.int64
        assert np.array_equal(np.sort(got), brute(model, q)), q
        assert idx.count(*q) == got.size
    for x in (-INF, -1.0, 0.5, 1.0, 2.0, INF):
        expect = brute(model, (-INF, True, x, True, x, True, INF, True))
        assert np.array_equal(np.sort(idx.stab(x)), expect)
        assert idx.stab_count(x) == expect.size


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), bucket=st.integers(1, 6), thr=st.integers(1, 12))
def test_interleaved_add_remove_query(data, bucket, thr):
    idx = PointIndex2D(bucket_size=bucket, merge_threshold=thr)
    model: dict[int, tuple[float, float]] = {}
    for _ in range(data.draw(st.integers(1, 8), label="rounds")):
        free = [s for s in range(30) if s not in model]          # small slot space: reuse
        if free and data.draw(st.booleans(), label="add?"):
            k = data.draw(st.integers(1, min(len(free), 10)), label="k")
            slots = data.draw(st.permutations(free), label="perm")[:k]
            pts = data.draw(st.lists(st.tuples(st.sampled_from(POOL), st.sampled_from(POOL)),
                                     min_size=k, max_size=k), label="pts")
            idx.add_many(np.array(slots, dtype=np.int64), [p[0] for p in pts], [p[1] for p in pts])
            model.update(zip(slots, pts))
        elif model:
            present = sorted(model)
            k = data.draw(st.integers(1, len(present)), label="kr")
            gone = data.draw(st.permutations(present), label="rperm")[:k]
            idx.remove_many(np.array(gone, dtype=np.int64))
            for s in gone:
                del model[s]
        check_all(idx, model, data.draw(st.lists(rects, min_size=1, max_size=6), label="queries"))
        sl, x1, x2 = idx.points()
        assert sorted(sl.tolist()) == sorted(model)


def test_seeded_large_with_merges():
    rng = np.random.default_rng(7)
    idx = PointIndex2D(bucket_size=64, merge_threshold=500)
    model: dict[int, tuple[float, float]] = {}
    vals = np.concatenate([[-INF, INF], np.arange(50.0)])
    next_slot = 0
    for rnd in range(25):
        n = int(rng.integers(1, 900))
        free = [s for s in range(next_slot) if s not in model]
        reuse = free[: n // 2]
        slots = np.array(reuse + list(range(next_slot, next_slot + n - len(reuse))), dtype=np.int64)
        next_slot += n - len(reuse)
        a = rng.choice(vals, n)
        b = rng.choice(vals, n)
        idx.add_many(slots, a, b)
        model.update(zip(slots.tolist(), zip(a.tolist(), b.tolist())))
        if rnd % 2:
            present = np.fromiter(model, dtype=np.int64)
            gone = rng.choice(present, size=int(rng.integers(1, present.size)), replace=False)
            idx.remove_many(gone)
            for s in gone.tolist():
                del model[s]
        qs = []
        for _ in range(20):
            lo1, hi1, lo2, hi2 = rng.choice(np.concatenate([vals, [10.5, 20.5]]), 4)
            c = rng.integers(0, 2, 4).astype(bool)
            qs.append((lo1, c[0], hi1, c[1], lo2, c[2], hi2, c[3]))
        check_all(idx, model, qs)
    st_ = idx.stats()
    assert st_["points"] == len(model) and st_["merges"] > 3 and st_["queries"] > 0
    assert {"buckets", "delta_size", "points_reported"} <= set(st_)


def test_default_thresholds_bulk_and_singles():
    rng = np.random.default_rng(3)
    idx = PointIndex2D()
    n = 20_000
    a = np.round(rng.uniform(0, 1000, n))
    b = a + np.round(rng.exponential(30, n))
    a[:50] = -INF
    b[50:100] = INF
    idx.add_many(np.arange(n), a, b)
    model = dict(zip(range(n), zip(a.tolist(), b.tolist())))
    assert idx.stats()["delta_size"] == 0 and idx.stats()["buckets"] > 10
    for i in range(n, n + 300):                      # single inserts stay in the delta
        x = float(rng.uniform(0, 1000))
        idx.add_many([i], [x], [x + 5])
        model[i] = (x, x + 5)
    assert 0 < idx.stats()["delta_size"] <= 4096
    qs = [(-INF, True, 500.0, True, 500.0, True, INF, True),
          (-INF, False, 100.0, True, 120.0, True, INF, False),
          (200.0, False, 300.0, True, 250.0, True, 400.0, False),
          (-INF, True, -INF, True, -INF, True, INF, True),
          (0.0, True, 1000.0, True, INF, True, INF, True)]
    check_all(idx, model, qs)


def test_errors_leave_index_unchanged():
    idx = PointIndex2D(merge_threshold=2)
    idx.add_many(np.array([0, 1, 2]), [0.0, 1.0, 2.0], [5.0, 5.0, 5.0])
    q = (-INF, True, INF, True, -INF, True, INF, True)
    before = np.sort(idx.query(*q))
    with pytest.raises(ValueError):
        idx.add_many([3, 3], [0.0, 0.0], [1.0, 1.0])          # duplicate within the batch
    with pytest.raises(ValueError):
        idx.add_many([4, 1], [0.0, 0.0], [1.0, 1.0])          # already present
    with pytest.raises(ValueError):
        idx.add_many([5], [np.nan], [1.0])
    with pytest.raises(ValueError):
        idx.add_many([-1], [0.0], [1.0])
    with pytest.raises(KeyError):
        idx.remove_many([0, 9])
    with pytest.raises(ValueError):
        idx.remove_many([0, 0])
    assert len(idx) == 3 and np.array_equal(np.sort(idx.query(*q)), before)
    assert idx.query(np.nan, True, INF, True, -INF, True, INF, True).size == 0


def test_empty_index():
    idx = PointIndex2D()
    assert len(idx) == 0 and idx.query(-INF, True, INF, True, -INF, True, INF, True).size == 0
    assert idx.stab_count(0.0) == 0
    idx.add_many([], [], [])
    idx.add_many([1], [0.0], [0.0])
    idx.remove_many([1])
    idx.rebuild()
    assert len(idx) == 0 and idx.stab(0.0).size == 0
