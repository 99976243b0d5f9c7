"""Tests of sparksub.operators.joins.router: the per-tuple plan router of 003 §4.5 over select-join plans.

Oracle: enumerate every (query, R tuple, S tuple) with R.b = S.b and both local selections (003 §4.3.2).  The
router in DYNAMIC mode (with random cost coefficients, so every plan gets chosen), in OPT mode and in every
static mode, over random interleavings of R / S inserts and deletes and query inserts and deletes, must report
exactly the oracle's new (or leaving) result tuples of every affected query, in partner-value order, and nothing
for the others.  No real timing anywhere: OPT gets a fake clock, calibration a fake timer.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate, UnknownSubscription
from sparksub.operators.joins import router as router_mod
from sparksub.operators.joins.router import (FEATURES, OPT, PAPER_PLANS, PAPER_TABLE_4_2, PLANS, CostModel,
                                       EventStats, JoinValueHistogram, Router, calibrate, default_coefficients_path,
                                       features, fit)
from sparksub.operators.joins.select import R_SIDE, S_SIDE

INF = math.inf
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL_PLANS = tuple(PLANS)
#: tiny rebuild thresholds so the lazy layouts, deltas and hotspot reclassifications all get exercised
SMALL = {"SJ-JoinFirst-E": {"delta_limit": 2, "leaf_size": 2}, "SJ-SelectFirst": {"delta_limit": 2},
         "SJ-SSI": {"delta_limit": 2, "leaf_size": 2}, "SJ-Hotspot": {"alpha": 0.2, "delta_limit": 2, "leaf_size": 2}}


class FakeClock:
    """A clock that advances by a pseudo-random step on every reading (OPT's choice varies, deterministically)."""

    def __init__(self, seed=0):
        self.t = 0.0
        self.rng = np.random.default_rng(seed)

    def __call__(self):
        self.t += float(self.rng.uniform(0.5, 1.5))
        return self.t


def random_model(seed: int) -> CostModel:
    rng = np.random.default_rng(seed)
    return CostModel({p: rng.uniform(0, 5, len(FEATURES[p])).tolist() for p in ALL_PLANS}, {"source": "test"})


# ----------------------------------------------------------------------------------------------------------------
# oracle
# ----------------------------------------------------------------------------------------------------------------
class Oracle:
    def __init__(self):
        self.R, self.S, self.Q = {}, {}, {}
        self.seq = 0

    def _pairs(self, side, key, x, b):
        out = {}
        if side == "R":
            partners = sorted((row for row in self.S.items() if row[1][0] == b), key=lambda kv: (kv[1][1], kv[1][2]))
            for qid, (alo, ahi, clo, chi) in self.Q.items():
                if alo <= x <= ahi:
                    hit = [(key, k) for k, (_, c, _) in partners if clo <= c <= chi]
                    if hit:
                        out[qid] = hit
        else:
            partners = sorted((row for row in self.R.items() if row[1][0] == b), key=lambda kv: (kv[1][1], kv[1][2]))
            for qid, (alo, ahi, clo, chi) in self.Q.items():
                if clo <= x <= chi:
                    hit = [(k, key) for k, (_, a, _) in partners if alo <= a <= ahi]
                    if hit:
                        out[qid] = hit
        return out

    def insert(self, side, key, x, b):
        out = self._pairs(side, key, x, b)
        self.seq += 1
        (self.R if side == "R" else self.S)[key] = (b, x, self.seq)
        return out

    def delete(self, side, key):
        table = self.R if side == "R" else self.S
        b, x, _ = table.pop(key)
        return self._pairs(side, key, x, b)


values = st.integers(0, 12)
join_values = st.integers(0, 3)
rng_bounds = st.tuples(st.one_of(values, st.just(-INF)), st.one_of(values, st.just(INF))).map(sorted)
ops = st.lists(st.one_of(
    st.tuples(st.just("q+"), rng_bounds, rng_bounds),
    st.tuples(st.just("q-"), st.integers(0, 50)),
    st.tuples(st.just("r+"), values, join_values),
    st.tuples(st.just("s+"), join_values, values),
    st.tuples(st.just("r-"), st.integers(0, 50)),
    st.tuples(st.just("s-"), st.integers(0, 50)),
), min_size=1, max_size=40)


def run_against_oracle(router: Router, script) -> None:
    oracle = Oracle()
    n = 0
    for op in script:
        kind = op[0]
        n += 1
        if kind == "q+":
            (alo, ahi), (clo, chi) = op[1], op[2]
            if alo == INF or ahi == -INF or clo == INF or chi == -INF:
                continue
            router.add_query(f"q{n}", alo, ahi, clo, chi)
            oracle.Q[f"q{n}"] = (alo, ahi, clo, chi)
        elif kind == "q-":
            if oracle.Q:
                qid = sorted(oracle.Q)[op[1] % len(oracle.Q)]
                router.remove_query(qid)
                del oracle.Q[qid]
        elif kind == "r+":
            got = router.insert_r(f"r{n}", a=op[1], b=op[2])
            assert got == oracle.insert("R", f"r{n}", op[1], op[2])
        elif kind == "s+":
            got = router.insert_s(f"s{n}", b=op[1], c=op[2])
            assert got == oracle.insert("S", f"s{n}", op[2], op[1])
        elif kind == "r-":
            if oracle.R:
                key = sorted(oracle.R)[op[1] % len(oracle.R)]
                assert router.delete_r(key) == oracle.delete("R", key)
        elif kind == "s-":
            if oracle.S:
                key = sorted(oracle.S)[op[1] % len(oracle.S)]
                assert router.delete_s(key) == oracle.delete("S", key)
    events = sum(router.decisions.values())
    assert events == router.events
    for side in (R_SIDE, S_SIDE):
        # probes agree with the tables as they are now (tables unchanged by them)
        for b in range(4):
            m = router.probe_r(5, b) if side == R_SIDE else router.probe_s(b, 5)
            want = oracle._pairs("R" if side == R_SIDE else "S", "new", 5, b)
            got = {router.queries.qid_of[s] for s in m.slots.tolist()}
            assert got == set(want)
    hp = router.plans.get("SJ-Hotspot")
    if hp is not None:
        hp.check()


# ----------------------------------------------------------------------------------------------------------------
# correctness in every mode
# ----------------------------------------------------------------------------------------------------------------
@SETTINGS
@given(script=ops, seed=st.integers(0, 2**16))
def test_dynamic_matches_oracle(script, seed):
    r = Router(ALL_PLANS, coefficients=random_model(seed), plan_options=SMALL, buckets=4,
               domains={"A": (0, 12), "B": (0, 3), "C": (0, 12)})
    run_against_oracle(r, script)
    assert set(r.decisions) <= set(ALL_PLANS)


@SETTINGS
@given(script=ops, seed=st.integers(0, 2**16))
def test_opt_matches_oracle(script, seed):
    r = Router(ALL_PLANS, mode=OPT, coefficients=random_model(seed), plan_options=SMALL, clock=FakeClock(seed))
    run_against_oracle(r, script)
    if r.events:
        s = r.stats()
        assert 0.0 <= s["dynamic_agrees_with_opt"] <= 1.0
        assert s["oracle_seconds"] > 0


@pytest.mark.parametrize("plan", ALL_PLANS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=ops)
def test_static_modes_match_oracle(plan, script):
    r = Router(ALL_PLANS, mode=plan, coefficients=random_model(0), plan_options=SMALL)
    run_against_oracle(r, script)
    assert set(r.decisions) <= {plan}


def test_dynamic_uses_several_plans_and_counts_decisions():
    r = Router(ALL_PLANS, coefficients=random_model(3), plan_options=SMALL, recent=5)
    rng = np.random.default_rng(1)
    for i in range(40):
        r.add_query(i, *sorted(rng.uniform(0, 10, 2)), *sorted(rng.uniform(0, 10, 2)))
    for i in range(200):
        if i % 2:
            r.insert_r(("r", i), a=float(rng.uniform(0, 10)), b=int(rng.integers(0, 5)))
        else:
            r.insert_s(("s", i), b=int(rng.integers(0, 5)), c=float(rng.uniform(0, 10)))
    assert sum(r.decisions.values()) == 200
    assert len(r.recent) == 5 and all(side in "RS" and p in ALL_PLANS for side, p in r.recent)
    text = r.explain()
    assert "decisions:" in text and "recent:" in text
    st_ = r.stats()
    assert st_["events"] == 200 and st_["decisions"] == dict(r.decisions)
    r.reset_stats()
    assert not r.decisions and r.events == 0


def test_errors_apply_nothing():
    r = Router(coefficients=CostModel.builtin())
    r.add_query("q", 0, 10, 0, 10)
    r.insert_r("r", a=1, b=1)
    with pytest.raises(BadUpdate):
        r.insert_r("r", a=2, b=1)
    with pytest.raises(BadUpdate):
        r.delete_s("nope")
    with pytest.raises(UnknownSubscription):
        r.remove_query("nope")
    with pytest.raises(ValueError):
        r.set_mode("SJ-Nope")
    assert r.events == 1 and len(r.tables.R) == 1


# ----------------------------------------------------------------------------------------------------------------
# statistics and the cost model
# ----------------------------------------------------------------------------------------------------------------
def test_join_value_histogram_counts_per_distinct_value():
    h = JoinValueHistogram(buckets=2, domain=(0, 10))
    for b, new in ((1, True), (1, False), (2, True), (7, True)):
        h.add(b, new)
    assert h.estimate(1) == 1.5 and h.estimate(3) == 1.5  # 3 tuples, 2 distinct values in [0, 5)
    assert h.estimate(9) == 1.0
    h.remove(7, True)
    assert h.estimate(9) == 0.0
    assert h.estimate("x") is None


def clear_cut_router(plans=("SJ-JoinFirst-E", "SJ-JoinFirst-S", "SJ-SelectFirst")) -> Router:
    """2,000 S tuples all with b = 5000, 500 queries whose R.a ranges lie in [4000, 6000]."""
    paper = CostModel({p: PAPER_TABLE_4_2[p] for p in plans}, {"source": "Table 4.2"})
    r = Router(plans, coefficients=paper)
    rng = np.random.default_rng(0)
    r.load(s_rows=[(("s", i), 5000, float(c)) for i, c in enumerate(rng.uniform(0, 10_000, 2000))])
    r.add_queries((i, 4000 + lo, 4000 + lo + 500, c, c + 1000)
                  for i, (lo, c) in enumerate(zip(rng.uniform(0, 1500, 500), rng.uniform(0, 9000, 500))))
    return r


def test_cost_model_picks_join_first_when_nothing_joins():
    r = clear_cut_router()
    s = r.statistics(R_SIDE, 5000.0, 100)
    assert s.kj == 0.0 and s.ks > 0
    costs = r.estimate(R_SIDE, 5000.0, 100)
    assert min(costs, key=costs.get).startswith("SJ-JoinFirst")
    r.insert_r("r1", a=5000.0, b=100)
    assert r.recent[-1][1].startswith("SJ-JoinFirst")


def test_cost_model_picks_select_first_when_everything_joins_but_no_selection_passes():
    r = clear_cut_router()
    s = r.statistics(R_SIDE, 100.0, 5000)
    assert s.kj == 2000.0 and s.ks == 0.0  # every S tuple joins; no query's R.a range holds 100
    costs = r.estimate(R_SIDE, 100.0, 5000)
    assert min(costs, key=costs.get) == "SJ-SelectFirst"
    assert costs["SJ-JoinFirst-S"] > 2 * costs["SJ-SelectFirst"]
    r.insert_r("r1", a=100.0, b=5000)
    assert r.recent[-1] == ("R", "SJ-SelectFirst")
    # and the histograms' estimates are close to the exact statistics here
    exact = r.statistics(R_SIDE, 5000.0, 5000, exact=True)
    est = r.statistics(R_SIDE, 5000.0, 5000)
    assert est.kj == exact.kj
    assert abs(est.ks - exact.ks) <= 0.2 * exact.ks


def test_ssi_histogram_option_estimates_ks():
    r = Router(coefficients=CostModel.builtin(), ks_histogram="ssi", buckets=20)
    r.add_queries((i, 100 * i, 100 * i + 50, 0, 10) for i in range(50))
    assert r.statistics(R_SIDE, 1020.0, 1).ks == pytest.approx(1.0, abs=0.5)
    assert r.statistics(R_SIDE, 1070.0, 1).ks == pytest.approx(0.0, abs=0.5)


def test_features_follow_the_formulas():
    s = EventStats(partner_size=1022, queries=100, kj=3, ks=10, hot_sqrt=7.0, cold=30, cold_ks=2.0, groups=4,
                   all_groups=6, all_sqrt=9.0)
    assert features("SJ-JoinFirst-E", s) == [1.0, 10.0, 30.0, 30.0]
    assert features("SJ-JoinFirst-S", s) == [1.0, 10.0, 200.0]
    assert features("SJ-SelectFirst", s) == pytest.approx([1.0, 10.0, math.log2(102), 10.0, 20.0])
    assert features("SJ-Hotspot", s) == pytest.approx([1.0, 10.0, 7.0, 5.0, 4.0, 16.0])
    assert features("SJ-SSI", s) == [1.0, 10.0, 12.0, 9.0, 20.0]
    # nothing joins: no join-run work, and the hot groups are not probed
    s0 = s._replace(kj=0.0)
    assert features("SJ-Hotspot", s0) == pytest.approx([1.0, 10.0, 0.0, 5.0, 0.0, 0.0])
    assert features("SJ-SSI", s0) == [1.0, 10.0, 0.0, 0.0, 0.0]
    for plan, terms in FEATURES.items():
        assert len(features(plan, s)) == len(terms)


# ----------------------------------------------------------------------------------------------------------------
# calibration
# ----------------------------------------------------------------------------------------------------------------
TRUE = {"SJ-JoinFirst-E": [3.0, 0.5, 2.0, 0.01], "SJ-JoinFirst-S": [1.0, 0.25, 0.125],
        "SJ-SelectFirst": [2.0, 1.0, 3.0, 0.05, 0.75], "SJ-Hotspot": [5.0, 0.2, 0.5, 4.0, 1.5, 0.3],
        "SJ-SSI": [4.0, 2.0, 0.5, 0.25, 0.1]}


def fake_timer(plan, terms, run):
    """A plan 'costs' exactly the known linear function of its terms (the plan still runs: its answer is not
    timed but must not fail)."""
    run()
    return float(np.dot(TRUE[plan], terms))


def test_calibrate_fits_a_known_linear_cost_exactly(tmp_path):
    model = calibrate(sizes=((400, 60), (900, 200), (1500, 400)), events=25, a_lengths=(1000.0, 200.0),
                      measure=fake_timer, seed=5, plan_options={"SJ-Hotspot": {"alpha": 0.1}})
    for plan, coef in TRUE.items():
        assert model.coefficients[plan] == pytest.approx(coef, rel=1e-6, abs=1e-6), plan
        assert model.meta["fit"][plan]["r2"] == pytest.approx(1.0)
    path = model.save(tmp_path / "sub" / "coef.json")
    back = CostModel.load(path)
    assert back.coefficients == model.coefficients
    assert back.meta["fit"] == model.meta["fit"]
    assert json.loads(path.read_text())["features"]["SJ-Hotspot"] == list(FEATURES["SJ-Hotspot"])
    assert "Table 4.2" in model.table() and "SJ-SelectFirst" in model.table()


def test_fit_by_least_squares():
    X = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [1.0, 2.0, 5.0], [1.0, 3.0, 2.0]])
    model = fit({"SJ-JoinFirst-S": (X, X @ np.array([2.0, 3.0, 0.5]))})
    assert model.coefficients["SJ-JoinFirst-S"] == pytest.approx([2.0, 3.0, 0.5])


def test_coefficient_paths_and_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKSUB_ROUTER_COEFFICIENTS", str(tmp_path / "c.json"))
    assert default_coefficients_path() == tmp_path / "c.json"
    assert CostModel.load_or_builtin().meta["source"] == "builtin"  # no file yet
    CostModel({p: TRUE[p] for p in PAPER_PLANS}, {"source": "mine"}).save()
    assert Router().model.meta["source"] == "mine"
    monkeypatch.delenv("SPARKSUB_ROUTER_COEFFICIENTS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_coefficients_path() == tmp_path / "cache" / "sparksub" / "router_coefficients.json"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "features": {"SJ-JoinFirst-E": ["x"]},
                               "coefficients": {"SJ-JoinFirst-E": [1.0]}}))
    with pytest.raises(ValueError):
        CostModel.load(bad)


def test_cli_calibrate_router_writes_the_table(tmp_path, monkeypatch, capsys):
    from sparksub.cli import main
    monkeypatch.setattr(router_mod, "_perf_seconds", lambda fn: (fn(), 1e-5))  # no real timing
    out = tmp_path / "coef.json"
    assert main(["calibrate-router", "--sizes", "300x40,600x80", "--events", "5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SJ-JoinFirst-E" in text and str(out) in text
    model = CostModel.load(out)
    assert set(model.coefficients) == set(PLANS)


# ----------------------------------------------------------------------------------------------------------------
# the decision table (003 §4.5: routing as two bucket lookups)
# ----------------------------------------------------------------------------------------------------------------
def replay(router: Router, script) -> list:
    """Apply ``script`` (the ``ops`` strategy's operations) and return every answer, in order."""
    out, R, S, Q = [], [], [], []
    for n, op in enumerate(script):
        kind = op[0]
        if kind == "q+":
            (alo, ahi), (clo, chi) = op[1], op[2]
            if alo == INF or ahi == -INF or clo == INF or chi == -INF:
                continue
            router.add_query(f"q{n}", alo, ahi, clo, chi)
            Q.append(f"q{n}")
        elif kind == "q-" and Q:
            router.remove_query(Q.pop(op[1] % len(Q)))
        elif kind == "r+":
            out.append(router.insert_r(f"r{n}", a=op[1], b=op[2]))
            R.append(f"r{n}")
        elif kind == "s+":
            out.append(router.insert_s(f"s{n}", b=op[1], c=op[2]))
            S.append(f"s{n}")
        elif kind == "r-" and R:
            out.append(router.delete_r(R.pop(op[1] % len(R))))
        elif kind == "s-" and S:
            out.append(router.delete_s(S.pop(op[1] % len(S))))
    for b in range(4):
        for m in (router.probe_r(5, b), router.probe_s(b, 5)):
            out.append(sorted((router.queries.qid_of[s], i, j) for s, i, j in
                              zip(m.slots.tolist(), m.starts.tolist(), m.stops.tolist())))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=ops, seed=st.integers(0, 2**16), refresh_min=st.integers(1, 8))
def test_decision_table_router_returns_what_every_static_plan_returns(script, seed, refresh_min):
    table = Router(ALL_PLANS, coefficients=random_model(seed), plan_options=SMALL, buckets=4,
                   domains={"A": (0, 12), "B": (0, 3), "C": (0, 12)}, refresh_min=refresh_min)
    want = replay(table, script)
    assert table.decision == "table" and sum(table.decisions.values()) == table.events
    for plan in ALL_PLANS:
        assert replay(Router(ALL_PLANS, mode=plan, coefficients=random_model(seed), plan_options=SMALL),
                      script) == want, plan
    formula = Router(ALL_PLANS, coefficients=random_model(seed), plan_options=SMALL, decision="formula")
    assert replay(formula, script) == want
    assert formula.table_refreshes == 0


def random_router(seed: int, *, ks_histogram="eqw", n_r=300, n_s=300, n_q=80, **kwargs) -> Router:
    """Integer join values in [0, 60) over 10 buckets of width 6 (some values absent), selections in [0, 100]."""
    rng = np.random.default_rng(seed)
    r = Router(ALL_PLANS, coefficients=random_model(seed), plan_options=SMALL, buckets=10, ks_histogram=ks_histogram,
               domains={"A": (0, 100), "B": (0, 60), "C": (0, 100)}, **kwargs)
    r.load([(("r", i), float(rng.uniform(0, 100)), int(rng.integers(0, 45))) for i in range(n_r)],
           [(("s", i), int(rng.integers(15, 60)), float(rng.uniform(0, 100))) for i in range(n_s)])
    r.add_queries((i, *sorted(rng.uniform(-10, 110, 2)), *sorted(rng.uniform(-10, 110, 2))) for i in range(n_q))
    return r


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_table_decisions_equal_the_formulas_after_a_refresh(seed):
    """With equal-width ks histograms every estimate is constant per bucket, so a fresh table's pick is the
    formulas' pick for every tuple; checked at every cell's representatives and at random tuples."""
    r = random_router(seed)
    rng = np.random.default_rng(seed + 1)
    for step in range(3):
        r.refresh_decision_table()
        for d in (R_SIDE, S_SIDE):
            partner_runs = r.tables.partner(d).runs
            # a representative of every (join-value bucket, ks bucket) cell, the "no partner" row and the
            # "outside the domain" column
            for b in [*range(0, 60, 6), *range(3, 60, 6), 70, -5]:
                for x in [*(10 * j + 5.0 for j in range(10)), 0.0, 100.0, -1.0, 101.0]:
                    assert r.table_choice(d, x, b) == r.choose(d, x, b), (d, x, b, b in partner_runs)
            for x, b in zip(rng.uniform(-20, 120, 200).tolist(), rng.integers(-5, 70, 200).tolist()):
                assert r.table_choice(d, x, b) == r.choose(d, x, b)
        # drift: data and queries change, then the next refresh must follow
        for i in range(40):
            r.insert_s(("s+", step, i), b=int(rng.integers(0, 60)), c=float(rng.uniform(0, 100)))
            r.delete_r(next(iter(r.tables.R.rows)))
        r.remove_query(next(iter(r.queries.slot_of)))
        r.add_query(("q+", step), *sorted(rng.uniform(0, 100, 2)), *sorted(rng.uniform(0, 100, 2)))


def test_table_decisions_with_a_non_numeric_join_value_use_the_formulas():
    r = random_router(0)
    r.insert_s("sx", b="x", c=50.0)
    for x in (5.0, 50.0, 95.0):
        assert r.table_choice(R_SIDE, x, "x") == r.choose(R_SIDE, x, "x")


def test_ssi_ks_histogram_table_equals_the_formulas_at_the_grid_midpoints():
    r = random_router(5, ks_histogram="ssi")
    r.refresh_decision_table()
    for d in (R_SIDE, S_SIDE):
        for b in (20, 30, 40, 70):
            for x in (10 * j + 5.0 for j in range(10)):
                assert r.table_choice(d, x, b) == r.choose(d, x, b)


def test_table_refreshes_lazily_when_the_statistics_drift():
    r = random_router(1, refresh_fraction=0.1, refresh_min=16)
    assert r.table_refreshes == 0 and r.decision_tables == [None, None]
    r.probe_r(50.0, 30)  # the first routed tuple builds the table
    assert r.table_refreshes == 1
    size = len(r.tables.R) + len(r.tables.S) + len(r.queries)  # 680: refresh after 68 changes
    for i in range(500):  # probes change nothing: no refresh
        r.probe_r(float(i % 100), i % 60)
        r.probe_s(i % 60, float(i % 100))
    assert r.table_refreshes == 1 and r.changes == 0
    rng = np.random.default_rng(0)
    n = 0
    while r.table_refreshes == 1:
        r.insert_r(("new", n), a=float(rng.uniform(0, 100)), b=int(rng.integers(0, 60)))
        n += 1
    assert n == int(0.1 * size) + 1  # the change that passed the threshold was routed by a refresh
    assert r.stats()["table_refreshes"] == 2
    # query changes count too
    before = r.table_refreshes
    for i in range(80):
        r.add_query(("nq", i), 0, 50, 0, 50)
    r.probe_r(10.0, 30)
    assert r.table_refreshes == before + 1


def test_stats_report_decisions_per_plan_and_the_table():
    r = random_router(2)
    rng = np.random.default_rng(3)
    for i in range(300):
        r.insert_r(("x", i), a=float(rng.uniform(0, 100)), b=int(rng.integers(0, 60)))
    s = r.stats()
    assert sum(s["decisions"].values()) == s["events"] == 300
    assert set(s["decisions"]) <= set(ALL_PLANS) and len(s["decisions"]) >= 2
    assert s["decision"] == "table" and s["table_refreshes"] >= 2
    assert "table refreshes" in r.explain()
    with pytest.raises(ValueError):
        Router(decision="nope")


def test_table_and_formula_routers_decide_alike_on_a_stream():
    """Refreshing before every tuple (refresh_fraction 0, refresh_min 0), the table router's decisions are the
    formula router's, tuple by tuple."""
    rows = []
    rng = np.random.default_rng(7)
    for i in range(200):
        rows.append(("r" if i % 2 else "s", i, float(rng.uniform(0, 100)), int(rng.integers(0, 60))))
    routers = [random_router(4, decision="table", refresh_fraction=0.0, refresh_min=0),
               random_router(4, decision="formula")]
    for r in routers:
        r.reset_stats()
        for side, i, x, b in rows:
            (r.insert_r(("n", i), a=x, b=b) if side == "r" else r.insert_s(("n", i), b=b, c=x))
    assert list(routers[0].recent) == list(routers[1].recent)
    assert routers[0].table_refreshes >= 200


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_nonnegative_fit_is_the_best_fit_with_nonnegative_terms(seed):
    """Against brute force: the least-squares fit over every support of the constrained columns, kept if its
    coefficients are >= 0 (the intercept, column 0, is free)."""
    from itertools import combinations
    rng = np.random.default_rng(seed)
    X = np.c_[np.ones(25), rng.uniform(0, 10, (25, 3))]
    y = X @ rng.normal(0, 2, 4) + rng.normal(0, 1, 25)
    best = None
    for k in range(4):
        for support in combinations((1, 2, 3), k):
            cols = [0, *support]
            c = np.zeros(4)
            c[cols] = np.linalg.lstsq(X[:, cols], y, rcond=None)[0]
            if (c[1:] >= -1e-12).all():
                res = float(((X @ c - y) ** 2).sum())
                best = res if best is None else min(best, res)
    got = router_mod._nonnegative_lstsq(X, y)
    assert (got[1:] >= 0).all()
    assert float(((X @ got - y) ** 2).sum()) == pytest.approx(best, rel=1e-9, abs=1e-9)
    model = fit({"SJ-SelectFirst": (np.c_[X, X[:, 1] * X[:, 2]], y)})
    assert min(model.coefficients["SJ-SelectFirst"][1:]) >= 0
    assert model.meta["fit_method"] == "nonnegative least squares"
