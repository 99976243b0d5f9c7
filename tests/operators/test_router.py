"""Tests of sparksub.operators.router: the per-tuple plan router of 003 §4.5 over select-join plans.

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
from sparksub.operators import router as router_mod
from sparksub.operators.router import (DYNAMIC, FEATURES, OPT, PAPER_PLANS, PAPER_TABLE_4_2, PLANS, CostModel,
                                       EventStats, JoinValueHistogram, Router, calibrate, default_coefficients_path,
                                       features, fit)
from sparksub.operators.select_joins import R_SIDE, S_SIDE

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
    assert features("SJ-JoinFirst-E", s) == [1.0, 10.0, 30.0]
    assert features("SJ-JoinFirst-S", s) == [1.0, 10.0, 200.0]
    assert features("SJ-SelectFirst", s) == pytest.approx([1.0, 10.0, math.log2(102), 20.0])
    assert features("SJ-Hotspot", s) == pytest.approx([1.0, 10.0, 7.0, 5.0, 4.0])
    assert features("SJ-SSI", s) == [1.0, 10.0, 12.0, 9.0]


# ----------------------------------------------------------------------------------------------------------------
# calibration
# ----------------------------------------------------------------------------------------------------------------
TRUE = {"SJ-JoinFirst-E": [3.0, 0.5, 2.0], "SJ-JoinFirst-S": [1.0, 0.25, 0.125],
        "SJ-SelectFirst": [2.0, 1.0, 3.0, 0.75], "SJ-Hotspot": [5.0, 0.2, 0.5, 4.0, 1.5],
        "SJ-SSI": [4.0, 2.0, 0.5, 0.25]}


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
    model = fit({"SJ-JoinFirst-E": (X, X @ np.array([2.0, 3.0, 0.5]))})
    assert model.coefficients["SJ-JoinFirst-E"] == pytest.approx([2.0, 3.0, 0.5])


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
