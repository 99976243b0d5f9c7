"""LeSubscribe (001 §2-§4) against a plain-Python brute-force matcher; the §3 cost model."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.filters.clustering import (CostParams, enumerate_schemas, greedy_static,
                                                   matching_cost)
from sparksub.operators.filters.le_subscribe import LeSubscribe
from sparksub.operators.filters.predicates import Pred


from filter_oracle import brute as _brute, draw_event, draw_pred, got as _got, run_steps, table as _table


# ----------------------------------------------------------------------------- strategies
@st.composite
def workloads(draw):
    n_attrs = draw(st.integers(4, 32))
    nv = draw(st.integers(2, 6))
    attrs = [f"a{i}" for i in range(n_attrs)]
    hot = attrs[: draw(st.integers(1, min(6, n_attrs)))]   # often used -> hash tables form

    def pred():
        return draw_pred(draw, draw(st.sampled_from(hot if draw(st.booleans()) else attrs)), nv)

    def conj():
        return [pred() for _ in range(draw(st.integers(0, 5)))]

    def event():
        return draw_event(draw, attrs, nv)

    steps = []
    for _ in range(draw(st.integers(1, 6))):
        steps.append(("add", [conj() for _ in range(draw(st.integers(0, 40)))]))
        steps.append(("remove", draw(st.floats(0, 0.5))))
        steps.append(("match", [event() for _ in range(draw(st.integers(1, 12)))]))
        steps.append((draw(st.sampled_from(["static", "maintain", "none"])), None))
    return attrs, steps


_SCALAR = {"=", "!=", "<", "<=", ">", ">="}


def _add(eng: LeSubscribe, slots: list, conjs: list, how: str) -> None:
    """Insert through one of the three entry points: per-row Pred lists, the [n, k] predicate
    matrix (scalar operators, None-padded rows), or one add_columns call per template."""
    if how == "matrix" and all(p.op in _SCALAR for c in conjs for p in c):
        k = max((len(c) for c in conjs), default=0)
        attrs = np.full((len(conjs), k), None, dtype=object)
        ops = np.full((len(conjs), k), "=", dtype=object)
        vals = np.zeros((len(conjs), k), dtype=np.int64)
        for i, c in enumerate(conjs):
            for j, p in enumerate(c):
                attrs[i, j], ops[i, j], vals[i, j] = p.attr, p.op, p.value[0]
        eng.add_matrix(np.array(slots, dtype=np.int64), attrs, ops, vals)
    elif how == "columns":
        groups: dict = {}
        for s, c in zip(slots, conjs):
            groups.setdefault(tuple((p.attr, p.op) for p in c), []).append((s, c))
        for template, rows in groups.items():
            cols = []
            for j, (_, op) in enumerate(template):
                vals = [c[j].value for _, c in rows]
                if op in ("is_null", "is_not_null"):
                    cols.append(None)
                elif op == "in":
                    cols.append(vals)
                elif op == "between":
                    cols.append((np.array([v[0] for v in vals]), np.array([v[1] for v in vals])))
                else:
                    cols.append(np.array([v[0] for v in vals]))
            eng.add_columns(np.array([s for s, _ in rows], dtype=np.int64), template, cols)
    else:
        eng.add(np.array(slots, dtype=np.int64), conjs)


def _run(attrs, steps, eng: LeSubscribe, rnd) -> None:
    subs = run_steps(eng, attrs, steps, rnd,
                     add=lambda slots, conjs: _add(eng, slots, conjs, rnd.choice(["list", "matrix", "columns"])))
    # a final check after everything
    evs = steps[2][1]
    assert _got(eng, evs, attrs) == _brute(subs, evs)


_SETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_SETTINGS
@given(workloads(), st.randoms(use_true_random=False))
def test_matches_brute_force_static_engine(wl, rnd):
    attrs, steps = wl
    # cheap tables so that the greedy does build multi-attribute hash tables
    eng = LeSubscribe(CostParams(i_space=0.0, K_r=0.1, C_h=0.1), dynamic=False)
    eng.bulk_unplace = rnd.choice([1, 256])   # exercise both removal paths
    _run(attrs, steps, eng, rnd)


@_SETTINGS
@given(workloads(), st.randoms(use_true_random=False))
def test_matches_brute_force_dynamic_engine(wl, rnd):
    attrs, steps = wl
    eng = LeSubscribe(CostParams(i_space=0.0, K_r=0.1, C_h=0.1), dynamic=True, maintain_every=5,
                      maintain_subs=10, bm_max=0.05, b_create=0.01, b_delete=0.005,
                      stats_halflife=50)
    eng.bulk_unplace = rnd.choice([1, 256])   # exercise both removal paths
    _run(attrs, steps, eng, rnd)


def test_bulk_entry_points_agree_and_reject_bad_input_without_side_effects():
    rng = np.random.default_rng(7)
    attrs = [f"a{i}" for i in range(12)]
    subs = _w0_like(rng, 3000)
    evs = [{a: int(rng.integers(1, 7)) for a in attrs} for _ in range(40)]
    results = []
    for how in ("list", "matrix", "columns"):
        eng = LeSubscribe(dynamic=False)
        _add(eng, list(range(len(subs))), subs, how)
        results.append(_got(eng, evs, attrs))
        assert len(eng) == len(subs)
    assert results[0] == results[1] == results[2] == _brute(dict(enumerate(subs)), evs)
    # a bad constant in the last row: nothing is added, the predicate references are undone
    eng = LeSubscribe(dynamic=False)
    eng.add_columns(np.arange(2), [("a0", "=")], [np.array([1, 2])])
    before = eng.stats()["predicates"]
    with pytest.raises(TypeError):
        eng.add_columns(np.arange(2, 5), [("a0", "="), ("a1", "<")],
                        [np.array([1, 3, 4]), np.array([1, 2, None], dtype=object)])
    assert len(eng) == 2 and eng.stats()["predicates"] == before
    with pytest.raises(ValueError, match="already subscribed"):
        eng.add_matrix(np.array([1]), ["a0"], ["="], np.array([[5]]))
    with pytest.raises(ValueError, match="add_matrix takes operators"):
        eng.add_matrix(np.array([9]), ["a0"], ["in"], np.array([[5]]))
    assert len(eng) == 2 and eng.stats()["predicates"] == before


# ----------------------------------------------------------------------------- deterministic
def _w0_like(rng, n, n_attrs=12, nv=6, fixed=(0, 1), k=5):
    subs = []
    for _ in range(n):
        others = rng.choice(np.arange(len(fixed), n_attrs), k - len(fixed), replace=False)
        at = list(fixed) + others.tolist()
        subs.append([Pred(f"a{a}", "=", (int(rng.integers(1, nv + 1)),)) for a in at])
    return subs


def test_static_greedy_builds_tables_and_lowers_cost():
    rng = np.random.default_rng(1)
    attrs = [f"a{i}" for i in range(12)]
    subs = _w0_like(rng, 3000)
    eng = LeSubscribe(dynamic=False)
    eng.add(np.arange(len(subs)), subs)
    evs = [{a: int(rng.integers(1, 7)) for a in attrs} for _ in range(200)]
    truth = _brute(dict(enumerate(subs)), evs)
    assert _got(eng, evs, attrs) == truth
    before = eng.explain()["cost"]["matching"]["total"]
    out = eng.recluster_static()
    ex = eng.explain()
    assert out["schemas"] and ex["table_schemas"]
    assert all({"a0", "a1"} <= set(s) for s in ex["table_schemas"])   # the fixed attributes
    assert ex["cost"]["matching"]["total"] < before / 4
    assert _got(eng, evs, attrs) == truth
    # a tight space bound allows fewer tables
    eng2 = LeSubscribe(dynamic=False)
    eng2.add(np.arange(len(subs)), subs)
    eng2.match(_table(evs, attrs))
    bound = eng2.explain()["cost"]["space"]["total"] + 200
    tight = eng2.recluster_static(space_bound=bound)
    assert len(tight["schemas"]) < len(out["schemas"])
    assert eng2.explain()["cost"]["space"]["total"] <= bound
    assert _got(eng2, evs, attrs) == truth


def test_dynamic_clustering_follows_shifting_event_statistics():
    """001 §4: clusters whose benefit margin grows get redistributed / new tables created."""
    rng = np.random.default_rng(2)
    attrs = [f"a{i}" for i in range(8)]
    # subscriptions: a0 = 1 plus equalities on two of a1..a7
    subs = []
    for _ in range(2000):
        others = rng.choice(np.arange(1, 8), 2, replace=False)
        subs.append([Pred("a0", "=", (1,))]
                    + [Pred(f"a{a}", "=", (int(rng.integers(1, 5)),)) for a in others])
    eng = LeSubscribe(dynamic=True, maintain_every=200, bm_max=4.0, b_create=2.0, b_delete=0.5,
                      stats_halflife=200)
    eng.add(np.arange(len(subs)), subs)
    truth_subs = dict(enumerate(subs))

    def batch(p_a0_is_1):
        return [{"a0": 1 if rng.random() < p_a0_is_1 else 2,
                 **{a: int(rng.integers(1, 5)) for a in attrs[1:]}} for _ in range(200)]

    # phase 1: a0 = 1 is rare -> single access on a0 is good, no table needed
    for _ in range(3):
        evs = batch(0.0)
        assert _got(eng, evs, attrs) == _brute(truth_subs, evs)
    tables_before = eng.stats().get("tables_created", 0)
    # phase 2: every event has a0 = 1 -> the a0 clusters' margins explode -> tables appear
    for _ in range(4):
        evs = batch(1.0)
        assert _got(eng, evs, attrs) == _brute(truth_subs, evs)
    st_ = eng.stats()
    assert st_["tables_created"] > tables_before
    assert st_["moves"] > 0
    checks_hot = eng.explain()["cost"]["matching"]["checks"]
    assert checks_hot < 2000 / 4        # far below checking every a0 = 1 subscription
    # phase 3: a0 = 1 becomes rare again -> tables lose their benefit and are dropped
    for _ in range(6):
        evs = batch(0.0)
        assert _got(eng, evs, attrs) == _brute(truth_subs, evs)
    assert eng.stats().get("tables_dropped", 0) > 0
    # deletes and inserts between re-clusterings keep the match set exact
    rm = np.arange(0, 2000, 3)
    eng.remove(rm)
    for r in rm.tolist():
        del truth_subs[r]
    evs = batch(0.5)
    assert _got(eng, evs, attrs) == _brute(truth_subs, evs)


def test_insert_delete_churn_keeps_clusters_consistent():
    rng = np.random.default_rng(3)
    attrs = [f"a{i}" for i in range(6)]
    eng = LeSubscribe(dynamic=False)
    subs: dict = {}
    nxt = 0
    for _ in range(30):
        new = _w0_like(rng, 200, n_attrs=6, nv=3, k=3)
        sl = np.arange(nxt, nxt + len(new))
        nxt += len(new)
        eng.add(sl, new)
        subs.update(zip(sl.tolist(), new))
        rm = rng.choice(sorted(subs), len(subs) // 3, replace=False)
        eng.remove(rm)
        for r in rm.tolist():
            del subs[r]
    evs = [{a: int(rng.integers(1, 4)) for a in attrs} for _ in range(50)]
    assert _got(eng, evs, attrs) == _brute(subs, evs)
    assert eng.stats()["subscriptions"] == len(subs)
    with pytest.raises(KeyError):
        eng.remove(np.array([nxt + 5]))
    with pytest.raises(ValueError):
        eng.add(np.array([next(iter(subs))]), [[Pred("a0", "=", (1,))]])


# ----------------------------------------------------------------------------- cost model
def test_example_3_1_arithmetic():
    """001 §3, Example 3.1: A, B, C with 100 equiprobable values, 1M subscriptions per nonempty
    subset of {A, B, C}, an event mentioning A and B but not C."""
    p = CostParams(single_free=False, K_check=1.0, K_pred=0.0)
    # C1: access on A, B, C only; the paper rounds each table's population to 2.33 million,
    # i.e. clusters of 23,300: two lookups and 46,600 checks
    c1 = matching_cost(table_attrs=[1, 1, 1], table_mu=[1, 1, 0],
                       cluster_nu=[1 / 100, 1 / 100, 0], cluster_n=[2.33e6 / 100] * 3,
                       cluster_width=[0, 0, 0], cluster_count=[100, 100, 100], params=p)
    assert c1["lookups"] == 2
    assert c1["checks"] == pytest.approx(46_600)
    # unrounded, 7M / 3 per table
    c1x = matching_cost([1, 1, 1], [1, 1, 0], [1 / 100, 1 / 100, 0], [7e6 / 3 / 100] * 3,
                        [0, 0, 0], p, cluster_count=[100, 100, 100])
    assert c1x["checks"] == pytest.approx(46_666.67, abs=0.01)
    # C2: tables A, B, C, AB, BC; populations A 1.5M, B 1M, C 1.5M, AB 1.5M, BC 1.5M
    pops = {"A": 1.5e6, "B": 1.0e6, "C": 1.5e6, "AB": 1.5e6, "BC": 1.5e6}
    keys = {"A": 100, "B": 100, "C": 100, "AB": 100 * 100, "BC": 100 * 100}
    assert [pops[t] / keys[t] for t in "A B C".split()] == [15_000, 10_000, 15_000]
    mu = {"A": 1, "B": 1, "C": 0, "AB": 1, "BC": 0}
    nu = {t: (1 / keys[t] if mu[t] else 0.0) for t in pops}
    # the paper prints AB/BC clusters of 1,500 (total 26,500 checks) -- its arithmetic:
    paper_sizes = {"A": 15_000, "B": 10_000, "C": 15_000, "AB": 1_500, "BC": 1_500}
    c2_paper = matching_cost([len(t) for t in pops], [mu[t] for t in pops],
                             [1.0 if mu[t] else 0.0 for t in pops],
                             [paper_sizes[t] for t in pops], [0] * 5, p)
    assert c2_paper["lookups"] == 3
    assert c2_paper["checks"] == pytest.approx(26_500)
    # ...but 1.5M subscriptions over 100 x 100 keys are clusters of 150: 25,150 checks
    c2 = matching_cost([len(t) for t in pops], [mu[t] for t in pops], [nu[t] for t in pops],
                       [pops[t] / keys[t] for t in pops], [0] * 5, p,
                       cluster_count=[keys[t] for t in pops])
    assert c2["lookups"] == 3
    assert c2["checks"] == pytest.approx(25_150)
    assert c2["checks"] < c1["checks"] and c2_paper["checks"] < c1["checks"]   # C2 preferred


def test_greedy_adds_the_profitable_schema():
    # 1,000 subscriptions with A = v, B = w (100 values each): access on A alone checks
    # 10 subscriptions per event, AB checks 0.1 -> the greedy adds AB (and nothing else)
    n = 1000
    eq_attr = np.tile([0, 1], (n, 1))
    eq_lognu = np.full((n, 2), np.log(1 / 100))
    size = np.full(n, 2)
    p = CostParams()
    enum = enumerate_schemas(eq_attr, eq_lognu, size, p)
    res = greedy_static(enum, size, np.full(n, np.inf), np.ones(len(enum.schemas)), np.inf, p)
    assert res.schemas == [(0, 1)]
    assert res.checking == pytest.approx(n / 100 / 100)
    # space bound below the cost of the table: nothing added
    res0 = greedy_static(enum, size, np.full(n, np.inf), np.ones(len(enum.schemas)),
                         space_bound=n * 1.0, params=p)
    assert res0.schemas == []
