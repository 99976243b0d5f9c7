"""Batch incremental maintenance under a response-time bound: when to apply each table's buffered updates.

Pure Python (no pyspark, no engine, no runtime) for issue 19 part 1.  Source: 003 = the dissertation,
chapter 2 ("Batch Incremental Query Result Maintenance"; digest: ``shared/notes/dissertation-ch2-3-5.md``
part A).  Section and equation numbers below are the chapter's.

Model (003 §2.2)
----------------
A view (here: every subscription group a refresh must bring up to date) is defined over tables
R_1..R_n.  Updates to R_i arrive at discrete times t = 0..T and are *buffered*; propagating k of them
costs ``f_i(k)`` (seconds), a function of k only, with f_i(0) = 0, monotone and subadditive
(f_i(x + y) <= f_i(x) + f_i(y)), so batching never costs more than applying one by one.  With k_i the
pending updates of R_i, the **response-time invariant** is Σ_i f_i(k_i) <= dT (``max_delay``) at every time
no action is taken, and after every action: whenever a refresh is requested, the view can be brought up to
date within dT.  An action A_t processes Δk_i of the pending updates of each R_i at cost Σ_i f_i(Δk_i);
it is *valid* (Definition 1) if Σ_i f_i(k_i - Δk_i) <= dT.  At the refresh time T every pending update is
applied.  Goal: a valid plan (Definition 2) of least total cost.

Time steps here are what the caller makes them: the benchmark's unit time steps, the streaming path's
micro-batches.  Arrivals at t come before the action at t (``Instance.arrivals[t]``), so the batch an action
at t applies includes them.

Plans (003 §2.3)
----------------
* **Lazy** (Definition 3, §2.3.1): act at t only if Σ_i f_i(k_i) > dT ("only when we have to"); Lemma 1:
  some lazy plan is optimal.
* **Greedy** (C2, §2.3.2): an action that touches R_i applies *all* its pending updates, so an action is a
  set of tables (:class:`Plan` stores ``(t, frozenset of table indices)``).
* **Minimal** (C3): no proper subset of an action (t < T) is valid.  :func:`minimal_actions`.
* Theorem 1: the best LGM plan costs OPT^LGM <= 2·OPT (tight, Example 1); Theorem 2: = OPT when every
  f_i(k) = a_i·k + b_i (:class:`Linear`).  Both are property tests in ``tests/scheduling/test_refresh.py``
  against an exhaustive optimum over *all* valid plans.

Algorithms (003 §2.4)
---------------------
* :func:`opt_lgm` — OPT^LGM when the arrivals and T are known: the shortest path in the DAG of §2.4.1 (a
  node = the pending counts at a time the invariant is violated, an edge = one LGM action; Theorem 3) by
  the A* search of §2.4.2 with back-pointers for the plan.
* ``SIMULATE`` (§2.4.3) — follow OPT^LGM computed for a guessed period T0 (:func:`simulate_schedule` on a
  uniform guess of the arrival rates), restarted after every refresh and repeated every T0 + 1 steps when
  no refresh comes (everything is cleared at the end of each round: Theorem 6's plan).  Theorems 5 and 6
  bound its cost by OPT_T + Σ_i b_i (T <= T0) and OPT_T + ⌈T/T0⌉·Σ_i b_i (T > T0) for linear costs.
* ``ONLINE`` (§2.4.4, eq. 2.1) — no knowledge of T: at a forced time t (steps since the last refresh),
  among the valid minimal table sets Z, take the one minimising the running average cost
  ``(B(t) + f(Z)) / (t + Δt_Z)``, B(t) being the cost spent since the last refresh and t + Δt_Z the
  predicted time of the next forced action if Z is cleared now.
* ``NAIVE`` (§2.5) — apply everything whenever the invariant would be violated; ``IMMEDIATE`` — apply
  everything at every step (no batching across steps: a stream without a bound).

Which tables' updates to apply per step, online, is :class:`RefreshScheduler` (one object per refresh
scope; ``step(pending, force)`` per micro-batch); :func:`run` drives the same object over an
:class:`Instance` to simulate a policy, so the simulated policies are the code the streaming path runs.

The A* heuristic and its admissibility (003 §2.4.2) — what we found
-------------------------------------------------------------------
The chapter's heuristic for a node x = {(R_i, k_i)} at time t, with K_i the updates of R_i still to arrive
after t and p_i = MIN{p | f_i(p) > dT}, is ::

    h(x) = Σ_i ⌊(k_i + K_i) / p_i⌋ · f_i(p_i) + f_i((k_i + K_i) mod p_i)

and the text calls it admissible and consistent.  The reasoning behind it: between actions every table
holds at most p_i - 1 pending updates (each f_i(k_i) <= Σ f <= dT), so every batch is at most p_i; and the
cheapest way to cut N updates into batches of at most p_i is ⌊N/p_i⌋ full batches and one remainder.
Checked against exhaustive search (``tests/scheduling/test_refresh.py``):

* **Linear f_i (a_i·k + b_i) and concave f_i, at most one arrival per table per step** (the chapter's
  uniform streams): admissible and consistent.  A batch is then at most p_i (p_i - 1 pending + 1 arrival),
  and for a concave f with f(0) = 0 the least cost of a partition of N into parts <= c is exactly
  ⌊N/c⌋·f(c) + f(N mod c) (moving a unit from a smaller part to a larger one never costs more), which is
  also <= f(b) + h(N - b) for every feasible first batch b: the triangle inequality of Lemma 8.
* **Bursts (more than one arrival per step), even with linear f_i: not admissible as printed.**  A batch
  can exceed p_i: p_i - 1 pending, then a burst.  One table, f(k) = k + 10, dT = 15 (p = 6), 12 updates
  arriving at t = 0 = T: the only plan applies one batch of 12 at cost 22, while h(source) = 2·f(6) = 32.
  And A* then returns non-optimal plans: f_0(k) = k + 3, f_1(k) = k, dT = 6, arrivals (3, 1) at t = 0 and
  at t = 1 = T: OPT^LGM = 11 (clear R_1 at t = 0), A* with the printed heuristic returns the plan of cost 14.
  In random small bursty instances (up to 3 tables, 0-3 arrivals per step) it returned a non-optimal plan
  in about 1 case in 15.
* **Monotone subadditive but not concave: not admissible even with unit arrivals.**  The cheapest cut of
  N = 6 into parts <= 5 under f(k) = ⌈k/2⌉ is 4 + 2 (cost 3), not 5 + 1 (cost 4).  f_0(k) = ⌈k/2⌉,
  f_1(k) = k, dT = 1, arrivals (0,0), (1,1), (1,1), (1,0), (0,1), (1,1) (T = 5): OPT^LGM = 6, A* with the
  printed heuristic returns a plan of cost 7.

Both counterexamples are tests (``tests/scheduling/test_refresh.py``), beside A* = exhaustive search over
LGM plans on random instances with linear, concave and non-concave costs, unit and bursty arrivals.

What this module uses (``heuristic="auto"``, the default): the same bound with the batch cap that holds
for any arrivals, c_i = p_i - 1 + (the largest arrival of R_i in one step) (no cap when f_i never exceeds
dT), and the exact least cost of cutting N into parts <= c_i: the closed form above when f_i is known to be
concave (:class:`Linear`, a concave :class:`Tabulated`), else a dynamic program over N.  It is a lower bound
on the remaining cost of any valid plan and satisfies h(x) <= cost(x, v) + h(v) by construction, so A* never
re-expands a node (Theorem 4) and returns OPT^LGM; it equals the chapter's formula exactly when arrivals
are at most one per step and f_i is concave.  ``heuristic="chapter"`` is the formula as printed (for the
comparison), ``"zero"`` is Dijkstra.

Deviations and choices (none changes a theorem's setting)
---------------------------------------------------------
* SIMULATE on a stream that differs from its guess (Figure 2.7): the chapter does not say what happens when
  the actual stream forces an action at a time the schedule has none, or when the scheduled set is not
  enough.  Here SIMULATE stays lazy (it acts only when forced; a round's end always clears everything) and
  at a forced step τ of the round takes the table set of the scheduled action nearest in time to τ (the
  earlier on a tie), completed, if it leaves the invariant violated, with the cheapest minimal set of the
  remaining tables.  On the arrivals it was computed for, the forced times are the schedule's own times,
  so this is the plan itself (Theorems 5-6).  Following the schedule as a *sequence* instead (the k-th
  forced action takes the k-th set) was tried: on Figure 2.7's fast or unstable streams (the benchmark's
  filter+join costs, 3 seeds) it drifted to 1.13-1.19 × OPT^LGM, against 1.02-1.06 by time.
* ONLINE's Δt_Z (the chapter does not say how it is obtained online): the pending counts after clearing Z
  grown at the observed arrival rates (mean arrivals per step since the scheduler started, or an
  exponentially weighted mean with ``rate_halflife``) until the invariant would break, capped at
  ``horizon_cap`` steps.  Ties: the cheaper set, then the smaller, then the lower table indices.
* Floating point: the invariant is checked as ``sum(loads in table order) <= dT`` everywhere (the same
  expression in the search, the replay and the scheduler).  Integer or Fraction costs are exact.

>>> costs = {"r": Linear(a=3 / 28000, b=2 / 7), "s": Linear(a=1 / 4000)}   # 003 §2.1's example, seconds
>>> sched = RefreshScheduler(costs, max_delay=0.35, policy="online")
>>> sched.step({"r": 150, "s": 150})            # 0.3393 s <= 0.35: keep buffering
frozenset()
>>> sorted(sched.step({"r": 190, "s": 190}))    # over the bound: apply S (cheap to apply, nothing to batch)
['s']
>>> sorted(sched.step({"r": 195, "s": 5}, force=True))   # a refresh: everything
['r', 's']
"""
from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from dataclasses import dataclass
from itertools import combinations
from typing import Callable, Mapping, Sequence

__all__ = ["CostFunction", "Linear", "Tabulated", "cost_properties", "Instance", "Plan", "Outcome",
           "SearchResult", "minimal_actions", "is_forced", "evaluate", "opt_lgm", "heuristic_at",
           "batch_caps", "chapter_p", "RefreshScheduler", "POLICIES", "run", "simulate_schedule",
           "uniform_arrivals", "bursty_arrivals", "MAX_TABLES"]

#: ONLINE enumerates the subsets of the tables at every forced step (003 §2.4.4: O(2^n), "n is small")
MAX_TABLES = 12

#: f_i: the cost (seconds) of applying k pending updates of one table; f(0) = 0, monotone, subadditive
CostFunction = Callable[[int], float]


# ---------------------------------------------------------------------------------------------------------------
# Cost functions (003 §2.2; linear ones §2.3.3)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Linear:
    """f(k) = a·k + b for k >= 1, f(0) = 0 (003 §2.3.3: b a start-up cost, a a per-update cost).
    Monotone, subadditive and concave on ℕ for a >= 0, b >= 0.

    >>> Linear(2, 5)(0), Linear(2, 5)(3)
    (0, 11)
    """

    a: float
    b: float = 0

    def __post_init__(self):
        if not (self.a >= 0 and self.b >= 0):
            raise ValueError(f"a linear cost needs a >= 0 and b >= 0, not a={self.a!r}, b={self.b!r}")

    concave = True   # on ℕ with f(0) = 0: increments a + b, a, a, ... never grow

    def __call__(self, k: int) -> float:
        return 0 if k <= 0 else self.a * k + self.b


@dataclass(frozen=True)
class Tabulated:
    """A measured cost curve (003 §2.5 interpolates its measured points, Figure 2.4): ``points`` = ((k, cost),
    ...) for k >= 1, linearly interpolated, f(0) = 0, flat below the first point, extended beyond the last by
    its last segment's slope; made monotone (each cost at least the previous one).  ``concave`` says whether
    the interpolant is concave on ℕ (then :func:`opt_lgm` uses the closed-form bound).

    >>> f = Tabulated(((1, 4.0), (10, 6.0), (20, 7.0)))
    >>> f(0), f(1), f(10), f(15), f(30), f.concave
    (0, 4.0, 6.0, 6.5, 8.0, True)
    >>> Tabulated(((1, 4.0), (10, 5.0), (20, 7.0))).concave     # slopes 1/9 then 1/5
    False
    """

    points: tuple

    def __post_init__(self):
        pts = sorted((int(k), float(c)) for k, c in self.points)
        if not pts or pts[0][0] < 1 or len({k for k, _ in pts}) != len(pts):
            raise ValueError("a tabulated cost needs distinct batch sizes >= 1")
        best, mono = -math.inf, []
        for k, c in pts:
            best = max(best, c)
            if best < 0:
                raise ValueError("costs are >= 0")
            mono.append((k, best))
        object.__setattr__(self, "points", tuple(mono))

    def __call__(self, k: int) -> float:
        if k <= 0:
            return 0
        pts = self.points
        if k <= pts[0][0]:
            return pts[0][1]
        for (k0, c0), (k1, c1) in zip(pts, pts[1:]):
            if k <= k1:
                return c0 + (c1 - c0) * (k - k0) / (k1 - k0)
        if len(pts) == 1:
            return pts[0][1]
        (k0, c0), (k1, c1) = pts[-2], pts[-1]
        return c1 + (c1 - c0) * (k - k1) / (k1 - k0)

    @property
    def concave(self) -> bool:
        # increments f(k+1) - f(k) on ℕ: f(1) first (from f(0) = 0), then flat up to the first point, then each
        # segment's slope; concave iff they never grow
        pts = self.points
        incs = [pts[0][1]] + ([0.0] if pts[0][0] > 1 else [])
        incs += [(c1 - c0) / (k1 - k0) for (k0, c0), (k1, c1) in zip(pts, pts[1:])]
        return all(x >= y for x, y in zip(incs, incs[1:]))


def cost_properties(f: CostFunction, upto: int) -> dict[str, bool]:
    """Which of 003 §2.2's assumptions ``f`` satisfies on 0..upto: ``zero`` (f(0) = 0), ``monotone``,
    ``subadditive`` (every x + y <= upto; O(upto²)) and ``concave`` (increments never grow).

    >>> cost_properties(lambda k: -(-k // 2), 12)      # ⌈k/2⌉: subadditive, not concave
    {'zero': True, 'monotone': True, 'subadditive': True, 'concave': False}
    """
    v = [f(k) for k in range(upto + 1)]
    inc = [y - x for x, y in zip(v, v[1:])]
    return {"zero": v[0] == 0, "monotone": all(d >= 0 for d in inc),
            "subadditive": all(v[x + y] <= v[x] + v[y] for x in range(upto + 1) for y in range(x, upto + 1 - x)),
            "concave": all(x >= y for x, y in zip(inc, inc[1:]))}


# ---------------------------------------------------------------------------------------------------------------
# Problem instances and plans (003 §2.2, Table 2.1)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Instance:
    """One problem of 003 §2.2: the cost functions f_i, the bound dT (``max_delay``) and the arrivals,
    ``arrivals[t][i]`` = updates of table i arriving at t = 0..T (T = ``horizon``, the refresh time)."""

    costs: tuple
    max_delay: float
    arrivals: tuple
    names: tuple = ()

    def __post_init__(self):
        costs = tuple(self.costs)
        arrivals = tuple(tuple(int(x) for x in row) for row in self.arrivals)
        n = len(costs)
        if not 1 <= n <= MAX_TABLES:
            raise ValueError(f"1 to {MAX_TABLES} tables, not {n}")
        if not arrivals or any(len(row) != n or min(row) < 0 for row in arrivals):
            raise ValueError("arrivals: one row of n counts >= 0 per time step, at least one step")
        if not self.max_delay >= 0:
            raise ValueError(f"max_delay must be >= 0, not {self.max_delay!r}")
        names = tuple(self.names) or tuple(range(n))
        if len(names) != n:
            raise ValueError("one name per table")
        object.__setattr__(self, "costs", costs)
        object.__setattr__(self, "arrivals", arrivals)
        object.__setattr__(self, "names", names)

    @property
    def n(self) -> int:
        return len(self.costs)

    @property
    def horizon(self) -> int:
        return len(self.arrivals) - 1

    @property
    def updates(self) -> int:
        return sum(map(sum, self.arrivals))

    def prefix(self, horizon: int) -> "Instance":
        """The same problem with the refresh at ``horizon`` (<= T) instead of T."""
        return Instance(self.costs, self.max_delay, self.arrivals[:horizon + 1], self.names)


def _loads(costs: Sequence[CostFunction], k: Sequence[int]) -> list:
    return [f(x) for f, x in zip(costs, k)]


def _fits(values, bound) -> bool:
    """The response-time invariant on a list of per-table loads (003 §2.2): one expression everywhere."""
    return sum(values) <= bound


def is_forced(costs: Sequence[CostFunction], pending: Sequence[int], max_delay: float) -> bool:
    """Whether a lazy plan must act now (Definition 3): Σ_i f_i(k_i) > dT."""
    return not _fits(_loads(costs, pending), max_delay)


def _minimal(loads: list, bound) -> list[frozenset]:
    """The valid minimal table sets (C2 + C3, Definition 1) given the loads f_i(k_i): ``[frozenset()]`` when
    nothing is forced; else every Z with Σ_{i∉Z} f_i(k_i) <= dT and no proper subset valid, smallest first.
    A table with load 0 is in no minimal set (removing it keeps the set valid)."""
    n = len(loads)
    if _fits(loads, bound):
        return [frozenset()]
    positive = [i for i in range(n) if loads[i] > 0]
    found: list[frozenset] = []
    for r in range(1, len(positive) + 1):
        for z in combinations(positive, r):
            zs = frozenset(z)
            # a valid proper subset contains a smaller minimal set, found earlier
            if any(w < zs for w in found):
                continue
            if _fits([loads[i] for i in range(n) if i not in zs], bound):
                found.append(zs)
    return found


def minimal_actions(costs: Sequence[CostFunction], pending: Sequence[int], max_delay: float) -> list[frozenset]:
    """The LGM actions available with ``pending`` updates per table (003 §2.3.2, C1-C3): the sets of tables
    whose full clearance is valid and minimal; ``[frozenset()]`` (no action) when the invariant holds.

    >>> minimal_actions([Linear(1, 5), Linear(1, 5)], [4, 4], 10)     # 9 + 9 > 10: clear either one
    [frozenset({0}), frozenset({1})]
    """
    return _minimal(_loads(costs, pending), max_delay)


@dataclass(frozen=True)
class Plan:
    """A greedy plan (003 §2.2, C2): ``actions`` = ((t, tables), ...) for t < ``horizon`` in increasing t, each a
    non-empty frozenset of table indices whose pending updates are all applied at t; at ``horizon`` (the
    refresh) every pending update is applied."""

    horizon: int
    actions: tuple = ()

    def __post_init__(self):
        acts = tuple((int(t), frozenset(z)) for t, z in self.actions if z)
        ts = [t for t, _ in acts]
        if ts != sorted(set(ts)) or (ts and not 0 <= ts[0] <= ts[-1] < self.horizon):
            raise ValueError("actions at distinct increasing times 0 <= t < horizon")
        object.__setattr__(self, "actions", acts)

    def steps(self) -> list[frozenset]:
        """The per-step decisions t = 0..horizon-1 (empty set: keep buffering)."""
        out = [frozenset()] * self.horizon
        for t, z in self.actions:
            out[t] = z
        return out

    def at(self, t: int) -> frozenset:
        for u, z in self.actions:
            if u == t:
                return z
        return frozenset()


@dataclass(frozen=True)
class Outcome:
    """A plan replayed on an instance (:func:`evaluate`, :func:`run`).  ``valid``: every state left between
    steps meets the bound (Definition 2); ``max_leftover`` its largest load; ``lazy`` / ``minimal``: C1 / C3
    (greedy holds by construction); ``batches[i]`` the batch sizes applied to table i, the refresh's last."""

    cost: float
    plan: Plan
    updates: int
    batches: tuple
    max_leftover: float
    valid: bool
    lazy: bool
    minimal: bool
    refresh_cost: float

    @property
    def per_update(self) -> float:
        return self.cost / self.updates if self.updates else 0.0

    @property
    def actions(self) -> int:
        return len(self.plan.actions)


def evaluate(instance: Instance, plan: Plan | Sequence) -> Outcome:
    """Replay ``plan`` (a :class:`Plan` or per-step table sets) on ``instance``: its cost, whether it is valid
    and LGM.  Independent of how the plan was found, so it is what the tests check every algorithm with."""
    if not isinstance(plan, Plan):
        plan = Plan(instance.horizon, tuple(enumerate(plan)))
    if plan.horizon != instance.horizon:
        raise ValueError(f"a plan for horizon {plan.horizon} on an instance of horizon {instance.horizon}")
    costs, bound, n = instance.costs, instance.max_delay, instance.n
    decisions = dict(plan.actions)
    k = [0] * n
    cost, worst, valid, lazy, minimal = 0, 0, True, True, True
    batches: list[list[int]] = [[] for _ in range(n)]
    refresh = 0
    for t, row in enumerate(instance.arrivals):
        k = [x + a for x, a in zip(k, row)]
        loads = _loads(costs, k)
        z = frozenset(range(n)) if t == instance.horizon else decisions.get(t, frozenset())
        if t < instance.horizon and z:
            lazy &= not _fits(loads, bound)
            minimal &= z in _minimal(loads, bound)
        step = 0
        for i in sorted(z):
            if k[i]:
                step += loads[i]
                batches[i].append(k[i])
                k[i] = 0
        cost += step
        if t == instance.horizon:
            refresh = step
        else:
            left = [loads[i] if k[i] else 0 for i in range(n)]
            worst = max(worst, sum(left))
            valid &= _fits(left, bound)
    return Outcome(cost, plan, instance.updates, tuple(map(tuple, batches)), worst, valid, lazy, minimal, refresh)


# ---------------------------------------------------------------------------------------------------------------
# OPT^LGM: the graph model (003 §2.4.1) searched with A* (§2.4.2)
# ---------------------------------------------------------------------------------------------------------------
def chapter_p(f: CostFunction, max_delay: float, limit: int) -> int | None:
    """p = MIN{p | f(p) > dT} (003 §2.4.2: one more than the most updates of the table that can stay
    pending), searched in 1..limit (f is monotone); None when f(limit) <= dT."""
    if f(limit) <= max_delay:
        return None
    lo, hi = 0, limit          # f(lo) <= dT < f(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if f(mid) > max_delay:
            hi = mid
        else:
            lo = mid
    return hi


def batch_caps(instance: Instance) -> list[int | None]:
    """The largest batch of each table any valid plan can apply: p_i - 1 pending between steps plus the
    largest arrival in one step (None: no cap below the table's total)."""
    out = []
    for i, f in enumerate(instance.costs):
        total = sum(row[i] for row in instance.arrivals)
        p = chapter_p(f, instance.max_delay, max(total, 1))
        out.append(None if p is None else p - 1 + max(row[i] for row in instance.arrivals))
    return out


class _PartitionBound:
    """L(N) = the least Σ f(b_j) over cuts of N updates into batches b_j <= cap: the closed form
    ⌊N/cap⌋·f(cap) + f(N mod cap) when f is concave (or the chapter's formula, asked for), and f(N) when
    there is no cap (a concave f with f(0) = 0 is subadditive: one batch is cheapest); else a dynamic
    program (which stays a lower bound even for an f that is not subadditive)."""

    def __init__(self, f: CostFunction, cap: int | None, total: int, closed_form: bool):
        self.f, self.cap = f, cap
        self.table = None
        if not closed_form:
            cap = max(cap if cap is not None else total, 1)
            self.cap = cap
            fs = [f(b) for b in range(cap + 1)]
            best = [0] * (total + 1)
            for m in range(1, total + 1):
                best[m] = min(fs[b] + best[m - b] for b in range(1, min(cap, m) + 1))
            self.table = best

    def __call__(self, m: int) -> float:
        if m <= 0:
            return 0
        if self.cap is None:
            return self.f(m)
        if self.table is not None:
            return self.table[m]
        c = max(self.cap, 1)
        q, r = divmod(m, c)
        return q * self.f(c) + self.f(r)


def _heuristic(instance: Instance, kind: str) -> Callable[[int, tuple], float]:
    """h(t, k) for the node with pending ``k`` at time t (003 §2.4.2): Σ_i L_i(k_i + K_i), K_i the arrivals
    after t.  ``kind``: 'auto' (admissible and consistent for any f: module docstring), 'chapter' (the
    printed formula), 'zero'."""
    n, T = instance.n, instance.horizon
    if kind == "zero":
        return lambda t, k: 0
    if kind not in ("auto", "chapter"):
        raise ValueError(f"heuristic must be 'auto', 'chapter' or 'zero', not {kind!r}")
    after = [[0] * n for _ in range(T + 2)]       # after[t][i] = arrivals of table i at times >= t
    for t in range(T, -1, -1):
        after[t] = [x + a for x, a in zip(after[t + 1], instance.arrivals[t])]
    totals = after[0]
    if kind == "auto":
        caps = batch_caps(instance)
        bounds = [_PartitionBound(f, c, totals[i], closed_form=getattr(f, "concave", False) is True)
                  for i, (f, c) in enumerate(zip(instance.costs, caps))]
    else:
        bounds = [_PartitionBound(f, chapter_p(f, instance.max_delay, max(totals[i], 1)), totals[i], True)
                  for i, f in enumerate(instance.costs)]

    def h(t: int, k: tuple) -> float:
        rest = after[t + 1]
        return sum(b(x + r) for b, x, r in zip(bounds, k, rest))
    return h


def heuristic_at(instance: Instance, t: int, pending: Sequence[int], kind: str = "auto") -> float:
    """The A* heuristic (003 §2.4.2) of the node with ``pending`` updates (this step's arrivals included) at
    time ``t``: a lower bound on the cost still to pay (for ``kind='auto'``)."""
    return _heuristic(instance, kind)(t, tuple(pending))


class _Advance:
    """From the counts ``left`` after the action at t - 1, take arrivals until the invariant is violated (the
    next node of 003 §2.4.1) or the refresh time T is reached: ``(time, pending counts)``.  The pending counts
    only grow between actions and every f_i is monotone, so "violated by time u" is monotone in u: a galloping
    then binary search over u on cumulative arrivals, O(log gap) evaluations of the f_i."""

    def __init__(self, instance: Instance):
        self.costs, self.bound, self.T = instance.costs, instance.max_delay, instance.horizon
        cum = [(0,) * instance.n]
        for row in instance.arrivals:
            cum.append(tuple(x + a for x, a in zip(cum[-1], row)))
        self.cum = cum                     # cum[u] = arrivals before time u

    def state(self, t: int, left: tuple, u: int) -> tuple:
        lo, hi = self.cum[t], self.cum[u + 1]
        return tuple(x + b - a for x, a, b in zip(left, lo, hi))

    def forced(self, t: int, left: tuple, u: int) -> bool:
        # _fits(loads of state(t, left, u)) inlined: the same additions in the same order
        total = 0
        for f, x, a, b in zip(self.costs, left, self.cum[t], self.cum[u + 1]):
            total += f(x + b - a)
        return not total <= self.bound

    def __call__(self, t: int, left: tuple) -> tuple[int, tuple]:
        T = self.T
        if t == T or self.forced(t, left, t):
            return t, self.state(t, left, t)
        lo, step = t, 1                          # not forced at lo
        while True:
            hi = min(lo + step, T)
            if self.forced(t, left, hi):
                break
            if hi == T:
                return T, self.state(t, left, T)
            lo, step = hi, step * 2
        while hi - lo > 1:                       # forced at hi, not at lo
            mid = (lo + hi) // 2
            if self.forced(t, left, mid):
                hi = mid
            else:
                lo = mid
        return hi, self.state(t, left, hi)


@dataclass(frozen=True)
class SearchResult:
    """OPT^LGM by A* (:func:`opt_lgm`): its ``cost`` and ``plan``; ``expanded`` / ``generated`` nodes;
    ``h_source`` the heuristic at the source (a lower bound on ``cost`` when admissible)."""

    cost: float
    plan: Plan
    expanded: int
    generated: int
    h_source: float
    heuristic: str


_DEST = (-1, ())


def opt_lgm(instance: Instance, heuristic: str = "auto") -> SearchResult:
    """The least-cost lazy, greedy, minimal plan (OPT^LGM, 003 §2.3.2) for known arrivals and refresh time:
    the shortest source → destination path of the DAG of §2.4.1 (Theorem 3) by A-SEARCH (§2.4.2) with
    back-pointers.  A node is (time, pending counts) at a time the invariant is violated, or at T; its edges
    are the minimal valid actions (at T: the refresh, to the destination).  The search keeps the frontier in a
    heap and each node's best known g; with a consistent heuristic a node is expanded once (Theorem 4).

    >>> inst = Instance([Linear(1, 8), Linear(2)], 12, [(1, 1)] * 6)   # R: start-up cost; S: per update
    >>> res = opt_lgm(inst)
    >>> res.cost, res.plan.actions
    (34, ((1, frozenset({0})), (2, frozenset({1})), (4, frozenset({1}))))
    >>> run(inst, "naive").cost, run(inst, "online").cost, run(inst, "immediate").cost
    (42, 34, 66)
    """
    h = _heuristic(instance, heuristic)
    # every f_i tabulated once (a list lookup in the inner loops: the same values, so the same sums)
    totals = [sum(row[i] for row in instance.arrivals) for i in range(instance.n)]
    instance = Instance(tuple([f(k) for k in range(m + 1)].__getitem__ for f, m in zip(instance.costs, totals)),
                        instance.max_delay, instance.arrivals, instance.names)
    costs, bound, T, n = instance.costs, instance.max_delay, instance.horizon, instance.n
    advance = _Advance(instance)
    source = advance(0, (0,) * n)
    h0 = h(*source)
    g: dict = {source: 0}
    parent: dict = {source: None}
    heap = [(h0, 0, 0, source)]
    closed: set = set()
    tick = expanded = generated = 0
    while heap:
        _, _, _, node = heapq.heappop(heap)
        if node in closed:
            continue
        if node == _DEST:
            break
        closed.add(node)
        expanded += 1
        t, k = node
        gx = g[node]
        loads = _loads(costs, k)
        if t == T:                                   # the refresh: one edge, everything (003 §2.4.1)
            edges = [(frozenset(i for i in range(n) if k[i]), sum(loads), _DEST)]
        else:
            edges = []
            for z in _minimal(loads, bound):
                left = tuple(0 if i in z else x for i, x in enumerate(k))
                edges.append((z, sum(loads[i] for i in sorted(z)), advance(t + 1, left)))
        for z, c, v in edges:
            gv = gx + c
            if v in closed and gv >= g[v]:
                continue
            if gv < g.get(v, math.inf):
                g[v] = gv
                parent[v] = (node, z)
                generated += 1
                tick += 1
                closed.discard(v)   # only with an inconsistent heuristic ('chapter' on bursts)
                heapq.heappush(heap, (gv + (0 if v == _DEST else h(*v)), -gv, tick, v))
    actions = []
    node = _DEST
    while parent.get(node) is not None:
        prev, z = parent[node]
        if prev[0] < T:
            actions.append((prev[0], z))
        node = prev
    return SearchResult(g[_DEST], Plan(T, tuple(reversed(actions))), expanded, generated, h0, heuristic)


# ---------------------------------------------------------------------------------------------------------------
# Online: the scheduler the streaming path runs per micro-batch (NAIVE, ONLINE, SIMULATE, IMMEDIATE)
# ---------------------------------------------------------------------------------------------------------------
POLICIES = ("online", "simulate", "naive", "immediate")


class RefreshScheduler:
    """Which tables' buffered updates to apply now, per step (micro-batch), under ``max_delay`` (dT, seconds).

    ``costs``: table name -> f_i (seconds for a batch of k updates; :class:`Linear`, :class:`Tabulated` or any
    monotone subadditive callable), or a sequence (names 0..n-1).  ``policy``: ``'online'`` (003 §2.4.4,
    eq. 2.1), ``'simulate'`` (§2.4.3; needs ``schedule``, a :class:`Plan` from :func:`simulate_schedule` /
    :func:`opt_lgm` over the same tables in the same order), ``'naive'`` (§2.5) or ``'immediate'``.

    Per step, :meth:`step` takes the pending counts (everything buffered, this step's arrivals included) and
    returns the tables to apply *now, all of their pending updates*; the caller applies exactly those and keeps
    the rest buffered.  Guarantee: afterwards Σ f_i(pending of the others) <= max_delay, so a refresh requested
    before the next step completes within the bound.  ``force=True`` (a refresh: a notification is due,
    ``result()`` is read) returns every table with pending updates and starts a new period (ONLINE's B(t) and
    t, SIMULATE's round).  Arrivals are inferred as ``pending - (what was left last step)``; they feed ONLINE's
    rate estimate.  Not thread-safe: one scheduler per refresh scope, called from one thread.
    """

    def __init__(self, costs: Mapping | Sequence, max_delay: float, policy: str = "online", *,
                 schedule: Plan | None = None, rate_halflife: float | None = None, horizon_cap: int = 1_000_000):
        if isinstance(costs, Mapping):
            self.names = tuple(costs)
            self.costs = tuple(costs.values())
        else:
            self.costs = tuple(costs)
            self.names = tuple(range(len(self.costs)))
        n = len(self.costs)
        if not 1 <= n <= MAX_TABLES:
            raise ValueError(f"1 to {MAX_TABLES} tables, not {n}")
        if not (isinstance(max_delay, (int, float)) or hasattr(max_delay, "numerator")) or not max_delay >= 0:
            raise ValueError(f"max_delay must be a number >= 0 (seconds), not {max_delay!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        if policy == "simulate":
            if schedule is None:
                raise ValueError("policy 'simulate' needs a schedule (simulate_schedule(...))")
            if any(i >= n for _, z in schedule.actions for i in z):
                raise ValueError("the schedule names a table index the scheduler does not have")
        if rate_halflife is not None and not rate_halflife > 0:
            raise ValueError("rate_halflife must be > 0 steps")
        self.index = {name: i for i, name in enumerate(self.names)}
        self.max_delay = max_delay
        self.policy = policy
        self.schedule = schedule
        self._times = [t for t, _ in schedule.actions] if schedule is not None else []
        self._sets = [z for _, z in schedule.actions] if schedule is not None else []
        self._alpha = None if rate_halflife is None else 1 - 2 ** (-1 / rate_halflife)
        self.horizon_cap = int(horizon_cap)
        self._left = [0] * n          # pending counts after the last decision
        self._rates = [0.0] * n       # arrivals per step (ONLINE's estimate)
        self._arrived = [0] * n
        self._steps_seen = 0
        self._elapsed = 0             # steps since the last refresh (003 §2.4.4's t)
        self._spent = 0               # cost since the last refresh (B(t))
        self._round_step = -1         # SIMULATE: step in this round (0..T0)
        self.counters = {"steps": 0, "forced": 0, "refreshes": 0, "model_cost": 0, "max_leftover": 0,
                         "batches": [0] * n, "applied": [0] * n}

    # ---- the per-step decision ------------------------------------------------------------------------------
    def step(self, pending: Mapping, force: bool = False) -> frozenset:
        """The tables (names) whose pending updates to apply now; ``pending``: name -> buffered count (a
        missing name: 0).  See the class docstring for the contract."""
        unknown = [name for name in pending if name not in self.index]
        if unknown:
            raise ValueError(f"no cost function for table(s) {', '.join(map(repr, unknown))}")
        counts = [0] * len(self.names)
        for name, x in pending.items():
            counts[self.index[name]] = x
        return frozenset(self.names[i] for i in self.step_counts(counts, force))

    def applied_outside(self, name) -> None:
        """The caller applied table ``name``'s pending updates between steps (a refresh of that table alone):
        nothing of it is left, so the next step's arrivals are counted from 0."""
        self._left[self.index[name]] = 0

    def step_counts(self, pending: Sequence[int], force: bool = False) -> frozenset:
        """:meth:`step` with the counts as a sequence in table order; returns table indices."""
        n = len(self.costs)
        if len(pending) != n:
            raise ValueError(f"{n} pending counts expected, got {len(pending)}")
        k = [int(x) for x in pending]
        if min(k) < 0:
            raise ValueError("pending counts are >= 0")
        self._observe(k)
        loads = _loads(self.costs, k)
        forced = not _fits(loads, self.max_delay)
        if force:
            z = frozenset(i for i in range(n) if k[i])
        elif self.policy == "immediate":
            z = frozenset(i for i in range(n) if k[i])
        elif self.policy == "simulate":
            z = self._simulate(k, loads, forced)
        elif not forced:
            z = frozenset()
        elif self.policy == "naive":
            z = frozenset(i for i in range(n) if k[i])
        else:
            z = self._online(k, loads)
        z = frozenset(i for i in z if k[i])
        cost = sum(loads[i] for i in sorted(z))
        c = self.counters
        c["steps"] += 1
        c["forced"] += forced
        c["model_cost"] += cost
        for i in z:
            c["batches"][i] += 1
            c["applied"][i] += k[i]
        self._left = [0 if i in z else x for i, x in enumerate(k)]
        if force:
            c["refreshes"] += 1
            self._elapsed, self._spent, self._round_step = 0, 0, -1
        else:
            left = [loads[i] if self._left[i] else 0 for i in range(n)]
            c["max_leftover"] = max(c["max_leftover"], sum(left))
            self._spent += cost
        return z

    def _observe(self, k: list[int]) -> None:
        self._elapsed += 1
        self._steps_seen += 1
        for i, (x, was) in enumerate(zip(k, self._left)):
            a = max(x - was, 0)
            self._arrived[i] += a
            if self._alpha is None:
                self._rates[i] = self._arrived[i] / self._steps_seen
            elif self._steps_seen == 1:
                self._rates[i] = float(a)
            else:
                self._rates[i] += self._alpha * (a - self._rates[i])

    # 003 §2.4.4, eq. 2.1: min over valid minimal Z of (B(t) + f(Z)) / (t + Δt_Z)
    def _online(self, k: list[int], loads: list) -> frozenset:
        best, best_key = frozenset(), None
        for z in _minimal(loads, self.max_delay):
            fz = sum(loads[i] for i in sorted(z))
            left = [0 if i in z else x for i, x in enumerate(k)]
            dt = self.next_forced(left)
            key = ((self._spent + fz) / (self._elapsed + dt), fz, len(z), sorted(z))
            if best_key is None or key < best_key:
                best, best_key = z, key
        return best

    def next_forced(self, left: Sequence[int]) -> int:
        """ONLINE's Δt: steps until the invariant would break again from the counts ``left``, the tables
        growing at the estimated rates (arrivals per step), at most ``horizon_cap``."""
        costs, rates, bound = self.costs, self._rates, self.max_delay

        def over(s: int) -> bool:
            return not _fits([f(x + math.floor(r * s + 0.5)) for f, x, r in zip(costs, left, rates)], bound)
        if over(1):
            return 1
        lo, hi = 1, 2
        while not over(hi):
            if hi >= self.horizon_cap:
                return self.horizon_cap
            lo, hi = hi, min(hi * 2, self.horizon_cap)
        while hi - lo > 1:            # over(lo) is false, over(hi) true
            mid = (lo + hi) // 2
            if over(mid):
                hi = mid
            else:
                lo = mid
        return hi

    # 003 §2.4.3: follow OPT^LGM for the guessed T0, round after round (module docstring: on other arrivals)
    def _simulate(self, k: list[int], loads: list, forced: bool) -> frozenset:
        self._round_step += 1
        tau = self._round_step
        if tau == self.schedule.horizon:          # the end of a round: clear everything (Theorem 6)
            self._round_step = -1
            return frozenset(range(len(k)))
        if not forced:
            return frozenset()
        z = frozenset()
        if self._times:                           # the scheduled action nearest in time (the earlier on a tie)
            j = bisect_left(self._times, tau)
            near = [x for x in (j - 1, j) if 0 <= x < len(self._times)]
            z = self._sets[min(near, key=lambda x: (abs(self._times[x] - tau), x))]
        z = frozenset(i for i in z if k[i])
        rest = [loads[i] if i not in z else 0 for i in range(len(k))]
        if not _fits(rest, self.max_delay):   # the schedule's set is not enough here: the cheapest completion
            z |= min(_minimal(rest, self.max_delay), key=lambda w: (sum(rest[i] for i in sorted(w)), len(w), sorted(w)))
        return z

    # ---- reading ------------------------------------------------------------------------------------------
    def load(self, pending: Mapping) -> float:
        """Σ f_i(pending_i): the predicted seconds to apply everything buffered (a refresh's cost)."""
        return sum(self.costs[self.index[name]](x) for name, x in pending.items())

    def rates(self) -> dict:
        """The estimated arrivals per step of each table (ONLINE's Δt)."""
        return dict(zip(self.names, self._rates))

    def stats(self) -> dict:
        """Counters since creation: steps, forced steps (the invariant would have broken), refreshes, the model
        cost applied (Σ f_i(batch), seconds), the largest load left buffered after a step, and per table the
        batches applied and the updates they held."""
        c = self.counters
        return {"policy": self.policy, "max_delay": self.max_delay, "steps": c["steps"], "forced": c["forced"],
                "refreshes": c["refreshes"], "model_cost": c["model_cost"], "max_leftover": c["max_leftover"],
                "batches": dict(zip(self.names, c["batches"])), "applied": dict(zip(self.names, c["applied"]))}


def run(instance: Instance, policy: str | RefreshScheduler = "online", **options) -> Outcome:
    """Simulate an online policy on ``instance``: a :class:`RefreshScheduler` (a fresh one for a policy name,
    ``options`` passed on) stepped through the arrivals, ``force=True`` at the refresh time T; the decisions
    replayed by :func:`evaluate`."""
    sched = policy if isinstance(policy, RefreshScheduler) else \
        RefreshScheduler(instance.costs, instance.max_delay, policy, **options)
    k = [0] * instance.n
    steps = []
    for t, row in enumerate(instance.arrivals):
        k = [x + a for x, a in zip(k, row)]
        z = sched.step_counts(k, force=t == instance.horizon)
        if t < instance.horizon:
            steps.append(z)
        k = [0 if i in z else x for i, x in enumerate(k)]
    return evaluate(instance, Plan(instance.horizon, tuple(enumerate(steps))))


# ---------------------------------------------------------------------------------------------------------------
# Arrival sequences (003 §2.5) and SIMULATE's schedule (§2.4.3)
# ---------------------------------------------------------------------------------------------------------------
def uniform_arrivals(rates: Sequence[float], horizon: int) -> tuple:
    """Arrivals at t = 0..horizon at constant ``rates`` per step (003 §2.5's uniform sequences are rate 1:
    one update per table per step); a fractional rate spreads its updates evenly (⌊(t+1)r⌋ - ⌊t·r⌋)."""
    return tuple(tuple(math.floor((t + 1) * r + 1e-9) - math.floor(t * r + 1e-9) for r in rates)
                 for t in range(horizon + 1))


def bursty_arrivals(rng: random.Random, horizon: int, n: int, p: float, mu: float = 1.0,
                    sigma: float = 1.0) -> tuple:
    """003 §2.5's non-uniform streams (Figure 2.7): per table and step, independently, X = 0 with probability
    1 - p, else k ~ Y | Y > 0 with Y ~ N(mu, sigma²) rounded to an integer (rejection sampling).  Uniform is
    p = 1, mu = 1, sigma = 0."""
    def one() -> int:
        if rng.random() >= p:
            return 0
        while True:
            y = round(rng.gauss(mu, sigma))
            if y > 0:
                return y
    return tuple(tuple(one() for _ in range(n)) for _ in range(horizon + 1))


def simulate_schedule(costs: Sequence[CostFunction], max_delay: float, rates: Sequence[float], horizon: int,
                      heuristic: str = "auto") -> Plan:
    """SIMULATE's schedule (003 §2.4.3, §2.5): OPT^LGM for the guessed period T0 = ``horizon`` on uniform
    arrivals at ``rates`` per step (§2.5 uses rate 1 and T0 = 500)."""
    return opt_lgm(Instance(tuple(costs), max_delay, uniform_arrivals(rates, horizon)), heuristic).plan
