"""Refresh scheduling under a response-time bound (src/sparksub/scheduling/refresh.py, 003 ch. 2) against
exhaustive oracles: the motivating example of 003 §2.1, A* (§2.4.2) = the best LGM plan found by enumerating
every LGM plan, Theorems 1-2 (§2.3) and 5-6 (§2.4.3) against the optimum over *all* valid plans (a dynamic
program over the pending counts), Example 1's tightness, the printed heuristic's counterexamples, and the
response-time bound for every plan every algorithm makes.  Costs are integers or Fractions where the
oracles compare costs for equality."""
from __future__ import annotations

import math
import random
from fractions import Fraction as F
from itertools import combinations, product

import pytest
from hypothesis import given, settings, strategies as st

from sparksub.scheduling.measure import fit_linear, fit_tabulated, medians, time_batches
from sparksub.scheduling.refresh import (POLICIES, Instance, Linear, Plan, RefreshScheduler, Tabulated,
                                         bursty_arrivals, cost_properties, evaluate, heuristic_at, minimal_actions,
                                         opt_lgm, run, simulate_schedule, uniform_arrivals)

FAST = settings(max_examples=40, deadline=None)


# ---- cost functions the tests draw (integers: exact comparisons) ---------------------------------------------
class Step:
    """f(k) = ⌈k/m⌉·c: monotone, subadditive, not concave (m > 1)."""

    def __init__(self, m, c):
        self.m, self.c = m, c

    def __call__(self, k):
        return -(-k // self.m) * self.c

    def __repr__(self):
        return f"Step({self.m}, {self.c})"


class MinLinear:
    """f(k) = min(a1·k, b + a2·k) for k >= 1: concave (a callable without ``concave``: the DP bound)."""

    def __init__(self, a1, b, a2):
        self.a1, self.b, self.a2 = a1, b, a2

    def __call__(self, k):
        return 0 if k <= 0 else min(self.a1 * k, self.b + self.a2 * k)

    def __repr__(self):
        return f"MinLinear({self.a1}, {self.b}, {self.a2})"


linear_st = st.builds(Linear, st.integers(1, 4), st.integers(0, 8))
concave_st = st.one_of(linear_st, st.builds(MinLinear, st.integers(2, 5), st.integers(1, 6), st.integers(0, 1)),
                       st.builds(lambda b, k1, c1: Tabulated(((1, b), (k1, b + c1), (k1 + 4, b + c1 + 1))),
                                 st.integers(1, 5), st.integers(2, 4), st.integers(1, 3))
                       .filter(lambda f: f.concave))
subadditive_st = st.one_of(concave_st, st.builds(Step, st.integers(2, 3), st.integers(1, 3)))


@st.composite
def instances(draw, costs=subadditive_st, n=(1, 3), horizon=(0, 7), burst=None, delay=(0, 10)):
    k = draw(st.integers(*n))
    fs = tuple(draw(costs) for _ in range(k))
    top = draw(st.sampled_from((1, 3))) if burst is None else (3 if burst else 1)
    T = draw(st.integers(*horizon))
    arrivals = tuple(tuple(draw(st.integers(0, top)) for _ in range(k)) for _ in range(T + 1))
    return Instance(fs, draw(st.integers(*delay)), arrivals)


# ---- oracles ----------------------------------------------------------------------------------------------------
def _valid(fs, keep, dT) -> bool:
    return sum(f(x) for f, x in zip(fs, keep)) <= dT


def exhaustive_lgm(inst: Instance) -> float:
    """OPT^LGM by enumerating every lazy, greedy, minimal plan (003 §2.3.2, C1-C3, read off the definitions)."""
    fs, dT, T = inst.costs, inst.max_delay, inst.horizon

    def go(t, left):
        k = tuple(x + a for x, a in zip(left, inst.arrivals[t]))
        if t == T:
            return sum(f(x) for f, x in zip(fs, k))
        if _valid(fs, k, dT):                          # lazy: no action unless forced
            return go(t + 1, k)
        best = math.inf
        tables = range(len(k))
        for r in range(1, len(k) + 1):
            for z in combinations(tables, r):
                def rest(zz):
                    return [0 if i in zz else k[i] for i in tables]
                if not _valid(fs, rest(z), dT):
                    continue
                if any(_valid(fs, rest(set(z) - {i}), dT) for i in z):     # not minimal
                    continue
                best = min(best, sum(fs[i](k[i]) for i in z) + go(t + 1, tuple(rest(z))))
        return best
    return go(0, (0,) * inst.n)


def exhaustive_opt(inst: Instance) -> float:
    """OPT over *all* valid plans (003 §2.2, Definitions 1-2: any part of the pending updates may be applied):
    a dynamic program over the counts left after each step."""
    fs, dT, T = inst.costs, inst.max_delay, inst.horizon
    most = [max((x for x in range(sum(r[i] for r in inst.arrivals) + 1) if f(x) <= dT), default=0)
            for i, f in enumerate(fs)]
    states = {(0,) * inst.n: 0}
    for t, row in enumerate(inst.arrivals):
        new: dict = {}
        for left, c in states.items():
            k = tuple(x + a for x, a in zip(left, row))
            if t == T:
                new[()] = min(new.get((), math.inf), c + sum(f(x) for f, x in zip(fs, k)))
                continue
            for keep in product(*(range(min(x, m) + 1) for x, m in zip(k, most))):
                if _valid(fs, keep, dT):
                    cost = c + sum(f(x - y) for f, x, y in zip(fs, k, keep))
                    if cost < new.get(keep, math.inf):
                        new[keep] = cost
        states = new
    return states[()]


# ---- 003 §2.1: the motivating example -------------------------------------------------------------------------
# c_ΔS: 0.25 ms per S tuple; c_ΔR through the two points the text gives: c_ΔR(180) + c_ΔS(180) = 0.35 s (naive:
# 180 of each per 0.35 s refresh) and c_ΔR(600) = 0.35 s ("0.35 seconds every 600 R tuples")
F_S = Linear(F(1, 4000))
F_R = Linear(F(3, 28000), F(2, 7))
BOUND = F(35, 100)


def test_motivating_example_arithmetic_is_the_chapters():
    assert F_R(600) == BOUND and F_R(180) + F_S(180) == BOUND
    naive_ms = BOUND / 360 * 1000                       # "0.35 seconds ... for roughly every 360 modifications"
    mixed_ms = (F_S(1) * 1000 + F_R(600) / 600 * 1000) / 2   # "0.25 ms for each tuple of S ... 0.58 ms per tuple"
    assert round(float(F_R(600) / 600 * 1000), 2) == 0.58
    assert (round(float(naive_ms), 2), round(float(mixed_ms), 2)) == (0.97, 0.42)
    assert mixed_ms == F(5, 12)


def test_motivating_example_on_the_model():
    """The same costs, one R and one S modification per step, dT = 0.35 s.  NAIVE applies both batches of 181
    whenever the bound would break: 0.968 ms per modification.  OPT^LGM, ONLINE and SIMULATE apply S whenever
    the bound would break and R only every ~600 steps: exactly the chapter's 5/12 ms (0.42) over two R cycles
    (S has no start-up cost, so how S is batched does not matter: Theorem 2's Σ p_i·b_i is R's)."""
    T = 181 * 12 - 1                                     # whole NAIVE cycles: its refresh is one more cycle
    inst = Instance((F_R, F_S), BOUND, uniform_arrivals((1, 1), T))
    naive = run(inst, "naive")
    assert naive.batches == ((181,) * 12, (181,) * 12)
    assert naive.per_update == (F_R(181) + F_S(181)) / 362
    assert round(float(naive.per_update * 1000), 2) == 0.97
    T = 2 * 600 - 1                                      # two R cycles
    inst = Instance((F_R, F_S), BOUND, uniform_arrivals((1, 1), T))
    best = opt_lgm(inst)
    assert evaluate(inst, best.plan).cost == best.cost
    online = run(inst, "online")
    simulate = run(inst, "simulate", schedule=simulate_schedule((F_R, F_S), BOUND, (1, 1), T))
    for out in (best, online, simulate):
        assert out.cost / inst.updates * 1000 == F(5, 12)
        assert round(float(out.cost / inst.updates * 1000), 2) == 0.42
    assert online.batches[0] == (601, 599)
    assert run(inst, "naive").per_update > 2 * online.per_update


# ---- 003 §2.4.2: A* = the best LGM plan ------------------------------------------------------------------------
@FAST
@given(instances())
def test_astar_equals_exhaustive_search_over_lgm_plans(inst):
    res = opt_lgm(inst)
    assert res.cost == pytest.approx(exhaustive_lgm(inst), rel=1e-9, abs=1e-12)
    out = evaluate(inst, res.plan)
    assert out.cost == pytest.approx(res.cost, rel=1e-9, abs=1e-12)
    assert out.valid and out.lazy and out.minimal
    assert res.h_source <= res.cost + 1e-9                 # admissible at the source
    assert opt_lgm(inst, "zero").cost == pytest.approx(res.cost, rel=1e-9, abs=1e-12)


@FAST
@given(instances(costs=concave_st.filter(lambda f: getattr(f, "concave", False)), burst=False))
def test_the_printed_heuristic_is_ours_for_concave_costs_and_unit_arrivals(inst):
    """Where the chapter's heuristic is admissible (module docstring: one arrival per table and step, concave
    f_i) it is the bound A* uses by default."""
    inst = Instance(inst.costs, inst.max_delay, uniform_arrivals((1,) * inst.n, inst.horizon))
    assert opt_lgm(inst, "chapter").cost == opt_lgm(inst).cost
    for t in range(inst.horizon + 1):
        k = [sum(r[i] for r in inst.arrivals[:t + 1]) % 3 for i in range(inst.n)]
        assert heuristic_at(inst, t, k, "chapter") == pytest.approx(heuristic_at(inst, t, k, "auto"))


def test_the_printed_heuristic_overestimates_with_bursts_and_non_concave_costs():
    # one table, a burst: one batch of 12 at cost 22, h = 2·f(6) = 32 (p = 6)
    burst = Instance((Linear(1, 10),), 15, ((12,),))
    assert opt_lgm(burst).cost == 22 and heuristic_at(burst, 0, (12,), "chapter") == 32
    assert heuristic_at(burst, 0, (12,)) <= 22
    # A* misled by it: OPT^LGM = 11 (apply R_1 at t = 0), the printed heuristic's A* returns 14
    two = Instance((Linear(1, 3), Linear(1, 0)), 6, ((3, 1), (3, 1)))
    assert exhaustive_lgm(two) == opt_lgm(two).cost == 11
    assert opt_lgm(two, "chapter").cost == 14
    # unit arrivals, f_0 = ⌈k/2⌉ (subadditive, not concave): OPT^LGM = 6, the printed heuristic's A* 7
    unit = Instance((Step(2, 1), Linear(1, 0)), 1, ((0, 0), (1, 1), (1, 1), (1, 0), (0, 1), (1, 1)))
    assert exhaustive_lgm(unit) == opt_lgm(unit).cost == 6
    assert opt_lgm(unit, "chapter").cost == 7
    assert cost_properties(Step(2, 1), 20) == {"zero": True, "monotone": True, "subadditive": True,
                                               "concave": False}


def test_astar_stays_exact_when_a_cost_is_not_subadditive():
    """Outside the model (f(3) = 4 > f(2) + f(1) = 3.5) the bound is a dynamic program, still a lower bound."""
    f = Tabulated(((1, 1.0), (3, 4.0), (7, 5.0)))
    assert not cost_properties(f, 7)["subadditive"] and not f.concave
    inst = Instance((Step(3, 1), f, MinLinear(2, 1, 1)), 6,
                    ((1, 0, 1), (1, 0, 1), (0, 1, 1), (0, 0, 0), (0, 1, 1), (1, 1, 1), (0, 0, 1)))
    res = opt_lgm(inst)
    assert res.cost == exhaustive_lgm(inst) == 11.5 and res.h_source <= res.cost


# ---- 003 §2.3: Theorems 1-2 and Example 1 against the optimum over all valid plans -----------------------------
@FAST
@given(instances(costs=linear_st, n=(1, 2), horizon=(0, 6)))
def test_theorem_2_linear_costs_lgm_is_optimal(inst):
    assert opt_lgm(inst).cost == exhaustive_opt(inst)


@FAST
@given(instances(n=(1, 2), horizon=(0, 6)))
def test_theorem_1_lgm_within_twice_the_optimum(inst):
    opt = exhaustive_opt(inst)
    assert opt <= opt_lgm(inst).cost + 1e-9
    assert opt_lgm(inst).cost <= 2 * opt + 1e-9


@pytest.mark.parametrize("eps,m", [(F(1, 2), 1), (F(1, 2), 2), (F(1, 4), 2)])
def test_example_1_the_bound_of_theorem_1_is_tight(eps, m):
    """003 §2.3.2, Example 1: f(x) = (εx/2)·dT up to 2/ε, (1 + ε/2)·dT beyond; 2/ε + 1 updates at each of
    t = 0..2m-1: OPT^LGM = (2 + ε)·m·dT, OPT <= (1 + ε)·m·dT."""
    dT = 8
    cut = int(2 / eps)

    def f(x):
        return 0 if x <= 0 else (eps * x / 2 * dT if x <= cut else (1 + eps / 2) * dT)
    inst = Instance((f,), dT, [(cut + 1,)] * (2 * m))
    assert opt_lgm(inst).cost == exhaustive_lgm(inst) == (2 + eps) * m * dT
    opt = exhaustive_opt(inst)
    assert opt <= (1 + eps) * m * dT
    assert opt_lgm(inst).cost >= (2 - eps) * opt


# ---- 003 §2.4.3: Theorems 5-6 (SIMULATE, linear costs) ---------------------------------------------------------
@FAST
@given(instances(costs=linear_st, n=(1, 2), horizon=(1, 7)), st.data())
def test_theorem_5_following_the_plan_for_a_later_t0(inst, data):
    T = data.draw(st.integers(0, inst.horizon))
    schedule = opt_lgm(inst).plan                      # OPT^LGM for T0 = inst.horizon
    short = inst.prefix(T)
    cost = run(short, "simulate", schedule=schedule).cost
    assert cost <= exhaustive_opt(short) + sum(f.b for f in inst.costs)


@FAST
@given(instances(costs=linear_st, n=(1, 2), horizon=(1, 4)), st.data())
def test_theorem_6_repeating_the_plan_for_an_earlier_t0(inst, data):
    """Arrivals repeating with the round (T0 + 1 steps), so that repeating OPT^LGM_T0 is Theorem 6's plan."""
    T0, P = inst.horizon, inst.horizon + 1
    T = data.draw(st.integers(T0 + 1, 3 * P))
    long = Instance(inst.costs, inst.max_delay, [inst.arrivals[t % P] for t in range(T + 1)])
    cost = run(long, "simulate", schedule=opt_lgm(inst).plan).cost
    rounds = T // P + 1
    assert rounds <= math.ceil(T / T0)
    assert cost <= exhaustive_opt(long) + rounds * sum(f.b for f in inst.costs)


def test_simulate_on_its_own_arrivals_is_the_plan():
    inst = Instance((Linear(1, 8), Linear(2, 1)), 12, bursty_arrivals(random.Random(3), 40, 2, 0.9, 1, 2))
    best = opt_lgm(inst)
    out = run(inst, "simulate", schedule=best.plan)
    assert out.plan == best.plan and out.cost == best.cost


# ---- the bound: every plan of every algorithm ----------------------------------------------------------------
@FAST
@given(instances(horizon=(0, 12), delay=(0, 14)), st.integers(1, 6))
def test_every_plan_meets_the_response_time_bound(inst, t0):
    schedule = simulate_schedule(inst.costs, inst.max_delay, (1,) * inst.n, t0)
    outs = {p: run(inst, p, **({"schedule": schedule} if p == "simulate" else {})) for p in POLICIES}
    outs["opt_lgm"] = evaluate(inst, opt_lgm(inst).plan)
    for name, out in outs.items():
        assert out.valid and out.max_leftover <= inst.max_delay, name
    assert outs["online"].lazy and outs["online"].minimal
    assert outs["naive"].lazy
    # everything each plan applies adds up to every update, once
    for out in outs.values():
        assert [sum(b) for b in out.batches] == [sum(r[i] for r in inst.arrivals) for i in range(inst.n)]


# ---- the scheduler's API (what the streaming path calls per micro-batch) ----------------------------------------
def test_scheduler_step_contract():
    sched = RefreshScheduler({"r": F_R, "s": F_S}, BOUND)
    assert sched.step({"r": 100, "s": 100}) == frozenset()
    assert sched.step({"r": 185}) == frozenset()                          # a missing table has none pending
    z = sched.step({"r": 190, "s": 200})                                 # 0.356 s > 0.35 s: forced
    assert len(z) == 1 and sched.load({n: x for n, x in {"r": 190, "s": 200}.items() if n not in z}) <= BOUND
    assert sched.step({"r": 0, "s": 3}, force=True) == {"s"}              # a refresh: every pending table
    assert sched.step({}, force=True) == frozenset()
    s = sched.stats()
    assert s["refreshes"] == 2 and s["steps"] == 5 and s["max_leftover"] <= BOUND
    assert s["batches"]["s"] >= 1 and s["applied"]["s"] >= 3
    with pytest.raises(ValueError, match="'t'"):
        sched.step({"t": 1})
    with pytest.raises(ValueError, match="policy"):
        RefreshScheduler({"r": F_R}, 1, "lazy")
    with pytest.raises(ValueError, match="schedule"):
        RefreshScheduler({"r": F_R}, 1, "simulate")
    with pytest.raises(ValueError, match="max_delay"):
        RefreshScheduler({"r": F_R}, -1)


def test_scheduler_infers_arrivals_and_rates():
    sched = RefreshScheduler([Linear(1, 0), Linear(1, 0)], 100, "online")
    for step in range(1, 5):
        sched.step_counts([2 * step, 3 * step])               # nothing applied: 2 and 3 arrive per step
    assert sched.rates() == {0: 2.0, 1: 3.0}
    assert sched.next_forced([0, 0]) == 21                     # 5 per step: 105 > 100 at step 21
    ewma = RefreshScheduler([Linear(1, 0)], 100, rate_halflife=1)
    for x in (4, 4, 4, 0):
        ewma.step_counts([x], force=True)
    assert ewma.rates()[0] == pytest.approx(4 * 0.5 + 0 * 0.5)


def test_online_beats_naive_on_asymmetric_costs():
    """003 §2.1's asymmetry: R with a start-up cost, S per update."""
    inst = Instance((Linear(1, 20), Linear(3)), 30, uniform_arrivals((1, 1), 200))
    opt, online, naive = opt_lgm(inst).cost, run(inst, "online").cost, run(inst, "naive").cost
    assert opt <= online < naive


def test_plans_and_instances_are_checked():
    with pytest.raises(ValueError):
        Plan(3, ((2, {0}), (1, {1})))
    with pytest.raises(ValueError):
        Plan(3, ((3, {0}),))
    with pytest.raises(ValueError):
        Instance((Linear(1),), 1, ((1, 2),))
    with pytest.raises(ValueError):
        Linear(-1, 0)
    assert minimal_actions([Linear(1, 5), Linear(1, 5)], [1, 1], 20) == [frozenset()]
    assert minimal_actions([Linear(1, 5), Linear(1, 5), Linear(0, 0)], [4, 4, 9], 10) == [{0}, {1}]
    assert Plan(4, ((1, {0}),)).steps() == [frozenset(), {0}, frozenset(), frozenset()]


# ---- the measurement helper -------------------------------------------------------------------------------------
def test_time_batches_and_fits():
    clock = iter(range(1000)).__next__
    calls = []
    samples = time_batches(calls.append, lambda k: k, (1, 5), repeats=2, warmup=1, clock=clock,
                           undo=lambda b: calls.append(-b))
    assert calls == [1, -1, 5, -5] * 3 and samples == {1: [1, 1], 5: [1, 1]}
    f, r2 = fit_linear({k: [3 * k + 40, 3 * k + 40] for k in (1, 10, 100)})
    assert f.a == pytest.approx(3) and f.b == pytest.approx(40) and r2 == pytest.approx(1)
    flat, _ = fit_linear({1: 5.0, 10: 4.0, 100: 4.5})
    assert flat.a >= 0 and flat.b >= 0
    assert fit_tabulated({1: [2.0], 10: [3.0]})(5) == pytest.approx(2 + 4 / 9)
    assert medians({1: [3.0, 1.0, 2.0], 2: 4.0}) == {1: 2.0, 2: 4.0}
