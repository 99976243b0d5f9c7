"""Stream-stream joins with a bounded state (003 ch. 3; ``operators/stream_joins``), against brute force
(``tests/oracles/bounded_join_oracle.py``): the nested-loop join, classic caches, exhaustive offline optima,
FlowExpect's search space and the adaptive optimum; and the chapter's case studies (Figure 3.1, Theorem 7,
§3.3.4, §3.5.2, §3.6)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pytest
from bounded_join_oracle import (
    adaptive_optimum,
    best_predetermined,
    classic_cache,
    nested_loop,
    offline_optimum,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate, InvalidArgument, InvalidSubscription
from sparksub.operators.stream_joins import (
    FIFO,
    HEEB,
    LFU,
    LIFE,
    LRU,
    PROB,
    RAND,
    WATERMARK,
    BoundedStreamJoin,
    Candidates,
    FlowExpect,
    MarkovModel,
    Planned,
    ReferenceModel,
    ScheduleModel,
    StationaryModel,
    TrendModel,
    caching_as_join,
    flow_expect,
    from_options,
    opt_offline,
    parse_state_options,
)
from sparksub.operators.stream_joins.models import bounded_normal, bounded_uniform
from sparksub.operators.stream_joins.policies import (
    alpha_for_lifetime,
    dominated_subset,
    dominates,
    ecb,
)

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEY = st.one_of(st.none(), st.integers(0, 3))
STEP = st.tuples(st.lists(KEY, max_size=3), st.lists(KEY, max_size=3))
STEPS = st.lists(STEP, min_size=1, max_size=9)
BAND = st.one_of(st.none(), st.sampled_from([(0, 0), (-1, 1), (0, 2), (-2, -1)]))
WINDOW = st.one_of(st.none(), st.integers(0, 3))


def flat(steps, d):
    """(keys as an object array, step of each row) of side d."""
    keys, times = [], []
    for t, s in enumerate(steps):
        keys += s[d]
        times += [t] * len(s[d])
    return np.array(keys, dtype=object), np.array(times, dtype=np.int64)


def arrow_batches(steps, cuts):
    """The steps as Arrow batches (columns key, id, t), consecutive steps grouped at ``cuts``."""
    out, nxt = [], [0, 0]
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(steps)}), len(steps)]
    for a, b in itertools.pairwise(bounds):
        pair = []
        for d in (0, 1):
            keys = [k for t in range(a, b) for k in steps[t][d]]
            ts = [t for t in range(a, b) for _ in steps[t][d]]
            ids = list(range(nxt[d], nxt[d] + len(keys)))
            nxt[d] += len(keys)
            pair.append(pa.table({"key": pa.array(keys, pa.int64()), "id": pa.array(ids, pa.int64()),
                                  "t": pa.array(ts, pa.int64())}))
        out.append(pair)
    return out


def pairs_of(tables):
    t = pa.concat_tables(tables)
    return sorted(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist()))


# ---------------------------------------------------------------------------------------------------------------
# correctness against the nested loop
# ---------------------------------------------------------------------------------------------------------------
@SETTINGS
@given(STEPS, BAND, WINDOW, st.lists(st.integers(1, 8), max_size=3))
def test_unbounded_equals_nested_loop(steps, band, window, cuts):
    """With no bound the join is the nested loop (NULL keys, duplicates, ties, empty batches, batches of
    several steps through the time column), and nothing is missed."""
    truth = nested_loop(steps, band, window)
    op = BoundedStreamJoin(band=band, window=window, time_column="t", policy="LRU")
    out = []
    for left, right in arrow_batches(steps, cuts):
        out.append(op.apply(left, right))
        out.append(op.apply(left.slice(0, 0), None))            # an empty batch changes nothing
    assert pairs_of(out) == truth
    s = op.stats()
    assert s["results"] == s["true_results"] == len(truth) and s["missed"] == 0
    lk, lt = flat(steps, 0)
    rk, rt = flat(steps, 1)
    ko = BoundedStreamJoin(band=band, window=window, policy="HEEB")
    li, ri = ko.apply_keys(lk, rk, lt, rt)
    assert sorted(zip(li.tolist(), ri.tolist())) == truth


POLICY_MAKERS = {
    "LRU": LRU, "LFU": LFU, "FIFO": FIFO, "WATERMARK": WATERMARK, "RAND": lambda: RAND(3), "PROB": PROB,
    "HEEB": lambda: HEEB(lifetime=3), "FlowExpect": lambda: FlowExpect(2),
}


@SETTINGS
@given(STEPS, BAND, st.sampled_from(sorted(POLICY_MAKERS)), st.integers(0, 2), st.booleans(), st.booleans(),
       st.integers(1, 4))
def test_bounded_produces_true_results_and_counts_the_missing(steps, band, policy, cap, shared, dominance, window):
    """Under any bound and policy every produced tuple is a true result tuple, none twice, the state never
    exceeds its bound, and missed = nested loop − produced (the MAX-subset error)."""
    truth = nested_loop(steps, band, window)
    kwargs = {"shared_state_rows": cap} if shared else {"max_state_rows": cap}
    models = (ScheduleModel({}), ScheduleModel({})) if policy == "FlowExpect" else None
    op = BoundedStreamJoin(band=band, window=window, policy=POLICY_MAKERS[policy](), dominance=dominance,
                           models=models, **kwargs)
    got = []
    for t, (lks, rks) in enumerate(steps):
        li, ri = op.apply_keys(np.array(lks, dtype=object), np.array(rks, dtype=object), [t] * len(lks), [t] * len(rks))
        got += list(zip(li.tolist(), ri.tolist()))
        nl, nr = op.state_rows()
        assert (nl + nr <= cap) if shared else (nl <= cap and nr <= cap)
    assert len(set(got)) == len(got)
    true_set = set(truth)
    assert all(p in true_set for p in got)
    s = op.stats()
    assert s["results"] == len(got) and s["true_results"] == len(truth)
    assert s["missed"] == len(truth) - len(got)


def test_arrow_output_columns_and_errors():
    op = BoundedStreamJoin(left_key="ts", right_key="ts", max_state_rows=2, policy="LRU")
    out = op.apply({"ts": [1, 2, None], "a": ["x", "y", "z"]}, {"ts": [2], "b": [1.5]})
    assert out.column_names == ["left_ts", "left_a", "right_ts", "right_b"]
    assert out.to_pylist() == [{"left_ts": 2, "left_a": "y", "right_ts": 2, "right_b": 1.5}]
    assert op.apply(None, {"ts": [1, 1], "b": [0.0, 1.0]}).num_rows == 2
    assert op.stats()["null_keys"] == [1, 0]
    assert op.apply({"ts": [None], "a": ["n"]}, {"ts": []}).num_rows == 0     # NULL-only and empty (untyped) batches
    assert op.stats()["null_keys"] == [2, 0]
    with pytest.raises(BadUpdate):
        op.apply({"ts": [float("nan")], "a": ["n"]}, None)
    with pytest.raises(BadUpdate):
        op.apply({"zz": [1]}, None)
    with pytest.raises(InvalidArgument):
        op.apply_keys([1], [1])
    with pytest.raises(InvalidSubscription):
        BoundedStreamJoin(band=(2, 1))
    text = BoundedStreamJoin(policy="LRU")
    text.apply({"key": ["a", "b"]}, {"key": ["b"]})
    assert text.stats()["results"] == 1
    with pytest.raises(BadUpdate):
        text.apply({"key": [1.0]}, None)


def test_arrow_path_with_evictions_matches_the_key_path():
    """Many rows through a small bound (the stored rows get compacted): the Arrow results are the key path's."""
    rng = np.random.default_rng(9)
    steps = [(rng.integers(0, 40, 300), rng.integers(0, 40, 300)) for _ in range(6)]
    arrow = BoundedStreamJoin(max_state_rows=5, policy="WATERMARK")
    keys = BoundedStreamJoin(max_state_rows=5, policy="WATERMARK")
    nxt, got, want = [0, 0], [], []
    for lk, rk in steps:
        ids = [np.arange(nxt[d], nxt[d] + 300) for d in (0, 1)]
        nxt = [nxt[0] + 300, nxt[1] + 300]
        out = arrow.apply({"key": lk, "id": ids[0]}, {"key": rk, "id": ids[1]})
        got += list(zip(out.column("left_id").to_pylist(), out.column("right_id").to_pylist()))
        li, ri = keys.apply_keys(lk, rk)
        want += list(zip(li.tolist(), ri.tolist()))
    assert sorted(got) == sorted(want) and len(got) > 1000
    assert arrow.stores[0].num_rows < 1500


def test_snapshot_restore_continues_identically():
    rng = np.random.default_rng(5)
    n = 250
    T = np.arange(n)
    lk, rk = T - 1 + rng.integers(-3, 4, n), T + rng.integers(-4, 5, n)
    models = lambda: (TrendModel(1, -1, bounded_uniform(3)), TrendModel(1, 0, bounded_uniform(4)))
    whole = BoundedStreamJoin(shared_state_rows=6, policy=HEEB(lifetime=4), models=models(), window=9, dominance=True)
    a = whole.apply_keys(lk, rk, T, T)
    part = BoundedStreamJoin(shared_state_rows=6, policy=HEEB(lifetime=4), models=models(), window=9, dominance=True)
    b1 = part.apply_keys(lk[:150], rk[:150], T[:150], T[:150])
    resumed = BoundedStreamJoin.restore(part.snapshot())
    b2 = resumed.apply_keys(lk[150:], rk[150:], T[150:], T[150:])
    assert np.array_equal(a[0], np.concatenate([b1[0], b2[0]])) and np.array_equal(a[1], np.concatenate([b1[1], b2[1]]))
    assert resumed.stats() == whole.stats()
    arrow = BoundedStreamJoin(max_state_rows=3, policy=RAND(1), time_column="t")
    arrow.apply({"key": [1, 2], "t": [0, 0]}, {"key": [2], "t": [0]})
    again = BoundedStreamJoin.restore(arrow.snapshot())
    batch = ({"key": [2, 1], "t": [1, 1]}, {"key": [1, 2], "t": [1, 2]})
    assert arrow.apply(*batch).equals(again.apply(*batch))


# ---------------------------------------------------------------------------------------------------------------
# the optima: OPT-offline and FlowExpect against exhaustive search
# ---------------------------------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.lists(st.one_of(st.none(), st.integers(0, 2)), max_size=2),
                          st.lists(st.one_of(st.none(), st.integers(0, 2)), max_size=2)), min_size=1, max_size=5),
       st.sampled_from([None, (0, 1)]), st.integers(0, 2), st.booleans())
def test_opt_offline_is_the_exhaustive_optimum_and_replays(steps, band, cap, shared):
    lk, lt = flat(steps, 0)
    rk, rt = flat(steps, 1)
    kw = {"shared_state_rows": cap} if shared else {"max_state_rows": cap}
    plan = opt_offline(lk, rk, lt, rt, band=band, **kw)
    best = offline_optimum(steps, caps=(cap, cap), shared=cap if shared else None, band=band)
    assert plan.results == best
    assert plan.true_results == len(nested_loop(steps, band))
    op = BoundedStreamJoin(band=band, policy=Planned(plan), **kw)
    op.apply_keys(lk, rk, lt, rt)
    assert op.stats()["results"] == best


def _cands(t0, sides, keys, models, band=None):
    n = len(keys)
    return Candidates(t0, np.array(sides, dtype=np.int8), np.array(keys, dtype=np.float64), np.zeros(n),
                      np.zeros(n), np.zeros(n), np.arange(n), np.zeros(n), models=models, band=band)


def test_flowexpect_counterexample_of_section_3_3_4():
    """003 §3.3.4: cache size 1 holding R(1); at t0 R "–" and S(2) arrive.  FlowExpect's best predetermined
    sequence keeps R(1) (0.8 + 0.8 = 1.6 > 1.5), yet the adaptive strategy earns 1.75."""
    t0, none = 10, 99.0
    mr = ScheduleModel({t0 + 1: [2], t0 + 2: [3], t0 + 3: [{2: 0.5}]})
    ms = ScheduleModel({t0 + 1: [{3: 0.5}], t0 + 2: [{1: 0.8}], t0 + 3: [{1: 0.8}]})
    cand = _cands(t0, [0, 0, 1], [1, none, 2], (mr, ms))
    value, keep = flow_expect(cand, 1, 3)
    assert value == pytest.approx(1.6) and keep.tolist() == [0]
    future = {1: ([{2: 1.0}], [{3: 0.5}]), 2: ([{3: 1.0}], [{1: 0.8}]), 3: ([{2: 0.5}], [{1: 0.8}])}
    cache = [(0, 1), (0, none), (1, 2)]
    best, firsts = best_predetermined(cache, future, 1, 3)
    assert best == pytest.approx(1.6) and firsts == {frozenset({0})}
    assert adaptive_optimum(cache, future, 1, 3) == pytest.approx(1.75)
    # through the operator: R(1) cached at step t0 - 1, then R "–" and S(2) at t0: FlowExpect keeps R(1)
    op = BoundedStreamJoin(shared_state_rows=1, policy=FlowExpect(3), models=(mr, ms))
    op.apply_keys([1.0], None, [t0 - 1])
    op.apply_keys([none], [2.0], [t0], [t0])
    c = op.candidates()
    assert c.key.tolist() == [1.0] and op.policy.last_value == pytest.approx(1.6)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 3)), min_size=1, max_size=4), st.integers(1, 2),
       st.integers(1, 3), st.data())
def test_flowexpect_equals_the_best_predetermined_sequence(cache, capacity, lookahead, data):
    """The min-cost flow finds the exhaustive optimum over predetermined sequences (003 Theorem 8), and its
    first decision is one of the optimal ones."""
    dist = st.dictionaries(st.integers(1, 3), st.sampled_from([0.25, 0.5]), max_size=2).filter(lambda d: sum(d.values()) <= 1)
    future = {}
    for t in range(1, lookahead + 1):
        future[t] = tuple(data.draw(st.lists(dist, max_size=1)) for _ in (0, 1))
    t0 = 5
    models = tuple(ScheduleModel({t0 + t: future[t][d] for t in future}) for d in (0, 1))
    cand = _cands(t0, [s for s, _ in cache], [k for _, k in cache], models)
    value, keep = flow_expect(cand, capacity, lookahead)
    best, firsts = best_predetermined(cache, future, capacity, lookahead)
    assert value == pytest.approx(best, abs=1e-9)
    kept = frozenset(keep.tolist())
    assert any(kept <= f or f <= kept for f in firsts)


# ---------------------------------------------------------------------------------------------------------------
# Theorem 7: caching reduced to joining (003 §3.2.1)
# ---------------------------------------------------------------------------------------------------------------
def test_reduction_of_the_chapter_example():
    r, s = caching_as_join([0, 1, 0, 2, 0])          # "a b a c a"
    dec = lambda keys: [(int(k) >> 32, int(k) & 0xFFFFFFFF) for k in keys]
    assert dec(r) == [(0, 0), (1, 0), (0, 1), (2, 0), (0, 2)]
    assert dec(s) == [(0, 1), (1, 1), (0, 2), (2, 1), (0, 3)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(1, 3))
def test_theorem_7_hits_equal_join_results(refs, k):
    """H(C0, R, P) = J(C0, R, S, P) for reasonable policies: the join (R's state bound to 0, S's to k, a
    joined supply row dead) produces as many results as the cache has hits -- LRU (and FIFO, which is LRU
    on supply rows), LFU (PROB on reference frequencies: A_0, §3.5.2), LFD (OPT-offline, and HEEB on the
    known future, §3.5.1)."""
    r, s = caching_as_join(refs)
    T = np.arange(len(refs))

    def join(policy, models=None):
        op = BoundedStreamJoin(max_state_rows=(0, k), unique_keys=True, policy=policy, models=models)
        op.apply_keys(r, s, T, T)
        return op.stats()["results"]

    lru, lfu, lfd = (classic_cache(refs, k, p) for p in ("LRU", "LFU", "LFD"))
    assert join(LRU()) == lru and join(FIFO()) == lru
    assert join(PROB(models=(ReferenceModel(StationaryModel()), ReferenceModel(StationaryModel())))) == lfu
    assert opt_offline(r, s, T, T, max_state_rows=(0, k)).results == lfd
    known = ReferenceModel(ScheduleModel.offline(T, refs))
    assert join(HEEB(lifetime=3), models=(known, None)) == lfd


# ---------------------------------------------------------------------------------------------------------------
# Figure 3.1: the moving-window sensor join (003 §3.1, §3.4.1, §3.5.4, Appendix A.16)
# ---------------------------------------------------------------------------------------------------------------
LATENCY = 5


def sensor_models():
    """S: timestamps N(now − latency, 1.5²) bounded at ±4; R: noisier (sd 3, ±8) and 2 steps behind."""
    return (TrendModel(1.0, -LATENCY - 2, bounded_normal(3.0, 8)), TrendModel(1.0, -LATENCY, bounded_normal(1.5, 4)))


def sensor_streams(n, seed):
    rng = np.random.default_rng(seed)
    mr, ms = sensor_models()
    T = np.arange(n)
    r = T - LATENCY - 2 + rng.choice(mr.noise_values, n, p=mr.noise_probs)
    s = T - LATENCY + rng.choice(ms.noise_values, n, p=ms.noise_probs)
    return T, r, s


def test_figure_3_1_three_cached_tuples():
    """x at the peak of S's pdf, y just passed by it (it joined S before), z ahead of it.  B_x strongly dominates B_y
    (Appendix A.16) while B_x and B_z cross (Figure 3.3): HEEB discards y whatever its lifetime, prefers x
    (immediate benefit) with a short lifetime and z (long-term benefit) with a long one; PROB_0, which
    predicts from the past, keeps y (it has joined S before) and discards z (never seen)."""
    T, _, s = sensor_streams(101, 0)
    t0 = 100
    peak = t0 + 1 - LATENCY
    x, y, z = float(peak - 1), float(peak - 5), float(peak + 6)
    kept = {}
    for name, policy in (("short", HEEB(lifetime=2)), ("long", HEEB(lifetime=50)), ("PROB", PROB())):
        op = BoundedStreamJoin(max_state_rows=(2, 0), policy=policy, models=sensor_models())
        op.apply_keys(None, s[:t0], None, T[:t0])
        op.apply_keys([x, y, z], s[t0:t0 + 1], [t0] * 3, [t0])
        kept[name] = set(op.candidates((0,)).key.tolist())
        if name == "PROB":
            seen = policy.models[1].counts
            assert seen.get(y, 0) > 0 and seen.get(z, 0) == 0
    assert kept["short"] == kept["long"] == {x, z}
    assert y in kept["PROB"] and z not in kept["PROB"]
    mr, ms = sensor_models()
    ms.observe(t0, s[t0:t0 + 1])
    cand = _cands(t0, [0, 0, 0], [x, y, z], (mr, ms))
    B = ecb(cand, 30)
    assert dominates(B[:, 0], B[:, 1], strongly=True)
    assert not dominates(B[:, 0], B[:, 2]) and not dominates(B[:, 2], B[:, 0])
    assert dominated_subset(B, 1).tolist() == [1]                  # y: a provably optimal discard
    assert dominated_subset(B, 2).tolist() == [1]                  # {x, z}: incomparable, left to HEEB
    short, long_ = HEEB(lifetime=2).score(cand), HEEB(lifetime=50).score(cand)
    assert short[0] > short[2] and long_[2] > long_[0]


def test_figure_3_1_sensor_join_heeb_beats_the_past_based_heuristics():
    """The moving-window sensor join end to end (003 §3.5.4: linear trend, bounded normal noise): HEEB with
    the streams' model produces more results than PROB, LIFE, LRU and RAND, and dominance never contradicts
    it (Theorem 10), all at most OPT-offline."""
    T, r, s = sensor_streams(300, 1)
    life = 2 * (3.0 + 1.5)                      # the time for f(t) to rise by twice the noise sd (§3.5.4)
    res = {}
    for name, pol, dom in (("HEEB", HEEB(lifetime=life), False), ("HEEB+dom", HEEB(lifetime=life), True),
                           ("PROB", PROB(), False), ("LIFE", LIFE(), False), ("LRU", LRU(), False),
                           ("RAND", RAND(0), False)):
        op = BoundedStreamJoin(max_state_rows=4, policy=pol, models=sensor_models(), window=16, dominance=dom)
        op.apply_keys(r, s, T, T)
        res[name] = op.stats()["results"]
    best = opt_offline(r, s, T, T, max_state_rows=4, window=16).results
    assert res["HEEB"] == res["HEEB+dom"]
    assert best >= res["HEEB"] > max(res["PROB"], res["LIFE"], res["LRU"], res["RAND"])


# ---------------------------------------------------------------------------------------------------------------
# stationary streams (003 §3.5.2) and sliding windows (003 §3.6)
# ---------------------------------------------------------------------------------------------------------------
def test_stationary_example_heeb_is_prob_and_beats_lru():
    """Stationary independent streams: every ECB is p·Δt, so dominance settles every decision and HEEB ranks
    as PROB (its optimal policy, §3.5.2): the same results, at least LRU's."""
    rng = np.random.default_rng(2)
    p = 1.0 / np.arange(1, 21)
    p /= p.sum()
    n = 300
    T = np.arange(n)
    lk, rk = rng.choice(20, n, p=p).astype(float), rng.choice(20, n, p=p).astype(float)
    res = {}
    for name, pol, dom in (("HEEB", HEEB(lifetime=8), True), ("PROB", PROB(), False), ("LRU", LRU(), False)):
        op = BoundedStreamJoin(max_state_rows=4, policy=pol, dominance=dom)
        op.apply_keys(lk, rk, T, T)
        res[name] = op.stats()
    dom = res["HEEB"]["dominance"]
    assert dom["settled"] == dom["decisions"] > 0
    assert res["HEEB"]["results"] == res["PROB"]["results"]
    assert res["HEEB"]["results"] >= 1.5 * res["LRU"]["results"]


def test_sliding_window_example_of_section_3_6():
    """x1 (p = 0.50, 1 step left), x2 (0.49, 50), x3 (0.01, 51): PROB prefers x1 to x2, LIFE x3 to x1,
    HEEB with L^exp cut at the window ranks x2, x1, x3."""
    t0, w = 100, 60
    probs = {1.0: 0.50, 2.0: 0.49, 3.0: 0.01}
    model = ScheduleModel({t: [probs] for t in range(t0 + 1, t0 + 80)})
    arrival = np.array([t0 + 1 - w, t0 + 50 - w, t0 + 51 - w], dtype=np.float64)
    cand = Candidates(t0, np.zeros(3, dtype=np.int8), np.array([1.0, 2.0, 3.0]), arrival, arrival, np.zeros(3),
                      np.arange(3), arrival, models=(None, model), window=w)
    assert cand.remaining().tolist() == [1, 50, 51]
    prob = PROB(models=(model, model)).score(cand)
    life = LIFE(models=(model, model)).score(cand)
    heeb = HEEB(lifetime=10).score(cand)
    assert prob[0] > prob[1] and life[2] > life[0]
    assert heeb[1] > heeb[0] > heeb[2]


# ---------------------------------------------------------------------------------------------------------------
# HEEB's computation (003 §3.4.3 - 3.4.4, Theorem 11)
# ---------------------------------------------------------------------------------------------------------------
def test_heeb_time_incremental_recurrence_on_a_trend():
    """Corollary 3: H_{x,t0} = e^α H_{x,t0−1} − Pr{X_t0 = v_x} (independent streams, L^exp)."""
    m = TrendModel(1.0, 0.0, bounded_normal(2.0, 6))
    alpha = alpha_for_lifetime(5)
    v = np.array([3.0, 10.0, 14.0])
    h = lambda t0: np.exp(-alpha * np.arange(1, 200)) @ m.expected(t0, 199, v)
    now = m.expected(9, 1, v)[0]                      # Pr{X_10 = v}
    assert np.allclose(h(10), math.exp(alpha) * h(9) - now)


def test_markov_green_closed_forms_equal_direct_sums():
    """AR(1) on a grid: HEEB's joining form Σ_Δt P^Δt(x, v) e^{−αΔt} and caching form E_x[e^{−ατ_v}] from
    the discounted Green's matrix equal the direct sums (Theorem 11(1), Corollary 1 / 4)."""
    m = MarkovModel.ar1(2.0, 0.7, 1.5, 0.0, 12.0)
    m.observe(0, [5.0])
    alpha = 0.3
    v = m.grid[[2, 5, 7, 11]]
    w = np.exp(-alpha * np.arange(1, 301))
    assert np.allclose(m.heeb(alpha, 0, v), w @ m.expected(0, 300, v))
    assert np.allclose(m.first_reference_heeb(alpha, v), w @ m.first_reference(300, v))
    ref = ReferenceModel(m, multiplier=1 << 32)
    assert np.allclose(ref.heeb(alpha, 0, (np.array([2, 5, 7, 11]) << 32) + 1), m.first_reference_heeb(alpha, v))


def test_learnt_trend_model_recovers_the_trend():
    rng = np.random.default_rng(4)
    m = TrendModel(0.0, 0.0, bounded_uniform(0), learn=True, memory=400)
    for t in range(600):
        m.observe(t, [2.0 * t + 7 + rng.integers(-3, 4)])
    assert m.slope == pytest.approx(2.0, abs=0.02) and m.offset == pytest.approx(7.0, abs=8.0)
    assert m.noise_values.min() >= -6 and m.noise_values.max() <= 6


# ---------------------------------------------------------------------------------------------------------------
# options, stats, explain
# ---------------------------------------------------------------------------------------------------------------
def test_options_and_explain():
    o = parse_state_options({"MAX_STATE_ROWS": "10/20", "state_policy": "heeb", "state_dominance": "true",
                             "state_window": 30})
    assert o == {"max_state_rows": (10, 20), "state_policy": "HEEB", "state_dominance": True, "state_window": 30}
    for bad in ({"max_state_rows": -1}, {"state_policy": "mru"}, {"max_state_rows": 1, "shared_state_rows": 2},
                {"state_policy": "LIFE"}, {"nope": 1}, {"state_audit": "maybe"}):
        with pytest.raises(InvalidSubscription):
            parse_state_options(bad)
    op = from_options({"max_state_rows": 2}, band=(-1, 1), defaults={"state_policy": "LRU", "state_window": 5})
    op.apply_keys([1.0, 2.0, 3.0], [2.0], [0, 0, 0], [0])
    op.apply_keys(None, [1.0, 3.0], None, [1, 1])
    s = op.stats()
    assert s["policy"] == "LRU" and s["results"] + s["missed"] == s["true_results"] == 3 + 4
    text = op.explain()
    assert "max_state_rows=2/2" in text and "missed" in text and "sliding window: 5" in text
