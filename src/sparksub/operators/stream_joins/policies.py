"""Replacement policies for a bounded join state: one small protocol, the chapter's heuristics and baselines
(003 §3.3 - §3.6), and the ECB dominance test (003 §3.4.2).

When a budget of the join state is over its bound after a step, the operator hands the policy the
*candidates* (the cached tuples plus the step's arrivals of the sides sharing that budget, as a
:class:`Candidates` view) and the capacity; the policy returns the candidates to keep
(:class:`ReplacementPolicy`).  Most policies only rank (:class:`ScoredPolicy`: higher score = keep; ties:
the older arrival goes first, then the lower row id).

========================  ==================================================================================
policy                    discards ...
========================  ==================================================================================
:class:`HEEB`             the lowest H_x = Σ_Δt Pr{partner arrival at t0 + Δt matches x} · L(Δt), L(Δt) =
                          e^{−αΔt} (003 §3.4.3, the heuristic of estimated expected benefit; α from the mean
                          lifetime 1 / (1 − e^{−α}), §3.4.3, default the cache size as in §3.5.5 / §3.7.5);
                          L = 0 once x leaves a sliding window (§3.6).  Agrees with every dominance decision
                          (Theorem 10).
:class:`PROB`             the lowest probability that the next partner arrival matches (PROB_0 of [DGR03]:
                          past frequencies, 003 §3.1), optimal for stationary independent streams (§3.5.2).
:class:`LIFE`             the lowest (that probability) x (remaining lifetime in the sliding window) [DGR03].
:class:`LRU`              the tuple that produced a result (or arrived) least recently.
:class:`LFU`              the tuple that produced the fewest results so far.
:class:`RAND`             a random tuple (003 §3.7.2).
:class:`FIFO`             the oldest arrival: "keep the last W rows" by arrival.
:class:`WATERMARK`        the smallest event time: what Spark's watermark-based state eviction keeps under a
                          row bound (the rows of the latest event times).
:class:`FlowExpect`       the tuples off the best predetermined decision sequence over the look-ahead,
                          found by min-cost flow (003 §3.3; costly: small cases and the yardstick).
:class:`Planned`          what an :class:`~sparksub.operators.stream_joins.flow.OfflinePlan` drops (replays
                          OPT-offline).
========================  ==================================================================================

ECB dominance (003 §3.4.2): B_x(Δt) = expected results of x over [t0 + 1, t0 + Δt] (Lemma 9); B_x dominates
B_y if B_x(Δt) >= B_y(Δt) for every Δt.  :func:`dominated_subset` finds the largest set V of at most k'
candidates such that every candidate outside V dominates every one inside (Corollary 2): some optimal
algorithm discards V.  The operator applies it before the policy when ``dominance=True`` and counts the
decisions it settles (proven optimal) -- over the horizon it evaluates (``dominance_horizon``), where a
model's support ends the curves are exact.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from sparksub.operators.stream_joins.flow import OfflinePlan, flow_expect
from sparksub.operators.stream_joins.models import StationaryModel

__all__ = [
    "FIFO",
    "HEEB",
    "LFU",
    "LIFE",
    "LRU",
    "POLICIES",
    "PROB",
    "RAND",
    "WATERMARK",
    "Candidates",
    "FlowExpect",
    "Planned",
    "ReplacementPolicy",
    "ScoredPolicy",
    "alpha_for_lifetime",
    "dominated_subset",
    "dominates",
    "ecb",
    "make_policy",
]


def alpha_for_lifetime(lifetime: float) -> float:
    """α with mean lifetime 1 / (1 − e^{−α}) = ``lifetime`` (003 §3.4.3); lifetime <= 1 keeps one step."""
    lifetime = float(lifetime)
    return -math.log(1.0 - 1.0 / lifetime) if lifetime > 1.0 else 20.0


@dataclass
class Candidates:
    """The tuples one decision chooses among (cached + the step's arrivals of ``budget_sides``), as columns.

    ``side`` 0 = left (R), 1 = right (S); ``key`` their join values; ``arrival`` / ``last_use`` steps;
    ``hits`` results produced so far; ``rid`` row ids (per side, in arrival order); ``event_time`` what
    WATERMARK orders by.  ``models[d]`` predicts side d's arrivals (None: unknown); ``band`` (lo, hi) for
    lo <= right − left <= hi, None for equality; ``window`` the sliding window in steps (None: none).
    """
    t0: int
    side: np.ndarray
    key: np.ndarray
    arrival: np.ndarray
    last_use: np.ndarray
    hits: np.ndarray
    rid: np.ndarray
    event_time: np.ndarray
    models: tuple = (None, None)
    band: tuple | None = None
    window: int | None = None
    budget_sides: tuple = (0, 1)
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return int(self.side.size)

    def subset(self, idx: np.ndarray) -> Candidates:
        c = Candidates(self.t0, self.side[idx], self.key[idx], self.arrival[idx], self.last_use[idx],
                       self.hits[idx], self.rid[idx], self.event_time[idx], self.models, self.band, self.window,
                       self.budget_sides)
        c._cache = {h: m[:, idx] for h, m in self._cache.items()}
        return c

    def ranges(self, d: int, values) -> tuple[np.ndarray, np.ndarray | None]:
        """The partner join values a side-``d`` value matches: itself (equality) or its band."""
        if self.band is None:
            return np.asarray(values), None
        v = np.asarray(values, dtype=np.float64)
        lo, hi = self.band
        return (v + lo, v + hi) if d == 0 else (v - hi, v - lo)

    def remaining(self) -> np.ndarray:
        """Steps each candidate can still join in the sliding window (inf without one)."""
        if self.window is None:
            return np.full(self.n, np.inf)
        return (self.window - (self.t0 - self.arrival)).astype(np.float64)

    def expected(self, horizon: int) -> np.ndarray:
        """[horizon, n]: expected matches of each candidate at t0 + 1 .. t0 + horizon, from its partner's
        model (zeros where unknown), cut where it leaves the window (003 §3.6)."""
        horizon = int(horizon)
        if horizon in self._cache:
            return self._cache[horizon]
        out = np.zeros((horizon, self.n))
        for d in (0, 1):
            sel = np.flatnonzero(self.side == d)
            partner = self.models[1 - d]
            if sel.size and partner is not None and horizon:
                lo, hi = self.ranges(d, self.key[sel])
                out[:, sel] = partner.expected(self.t0, horizon, lo, hi)
        if self.window is not None:
            out[np.arange(1, horizon + 1)[:, None] > self.remaining()[None, :]] = 0.0
        self._cache[horizon] = out
        return out

    def horizon_hint(self) -> int | None:
        """The steps after which no candidate can match any more, when the partner models bound it."""
        hints = []
        for d in (0, 1):
            sel = np.flatnonzero(self.side == d)
            if not sel.size:
                continue
            partner = self.models[1 - d]
            hint = getattr(partner, "horizon_hint", None)
            h = hint(*self.ranges(d, self.key[sel])) if hint is not None else None
            if h is None:
                return None
            hints.append(h)
        if self.window is not None:
            hints.append(int(self.window) + 1)
        return max(hints) if hints else 0


# ----------------------------------------------------------------------------------------------------------------
# the protocol
# ----------------------------------------------------------------------------------------------------------------
@runtime_checkable
class ReplacementPolicy(Protocol):
    """What the operator asks of a policy (module docstring)."""

    name: str

    def keep(self, cand: Candidates, capacity: int) -> np.ndarray:
        """Indices (into ``cand``) of the at most ``capacity`` candidates to keep."""

    def observe(self, t: int, left_keys: np.ndarray, right_keys: np.ndarray) -> None:
        """Every step's arrivals (non-NULL keys), before its decisions."""

    def describe(self) -> str:
        """One line for EXPLAIN."""


class ScoredPolicy(ABC):
    """A policy that ranks: keeps the ``capacity`` highest scores (ties: newer arrival, then higher row id)."""

    name = "SCORED"
    needs_models = False

    def observe(self, t: int, left_keys, right_keys) -> None:
        pass

    @abstractmethod
    def score(self, cand: Candidates) -> np.ndarray:
        """Higher = more worth keeping."""

    def keep(self, cand: Candidates, capacity: int) -> np.ndarray:
        if cand.n <= capacity:
            return np.arange(cand.n)
        order = np.lexsort((cand.rid, cand.arrival, np.asarray(self.score(cand), dtype=np.float64)))
        return np.sort(order[cand.n - capacity:]) if capacity > 0 else np.zeros(0, dtype=np.int64)

    def describe(self) -> str:
        return self.name


class _ByColumn(ScoredPolicy):
    """Ranks by one column of the candidates (``column``)."""
    column = ""

    def score(self, cand):
        return getattr(cand, self.column)


class LRU(_ByColumn):
    """Least recently used: the last step at which the tuple produced a result (or arrived)."""
    name, column = "LRU", "last_use"


class LFU(_ByColumn):
    """Least frequently used: the results the tuple has produced so far."""
    name, column = "LFU", "hits"


class FIFO(_ByColumn):
    """Keep the last rows by arrival."""
    name, column = "FIFO", "arrival"


class WATERMARK(_ByColumn):
    """Keep the latest event times (Spark's watermark eviction, under a row bound)."""
    name, column = "WATERMARK", "event_time"


class RAND(ScoredPolicy):
    """Discard at random (003 §3.7.2); its generator is part of the operator's snapshot."""
    name = "RAND"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def score(self, cand):
        return self.rng.random(cand.n)

    def describe(self):
        return f"RAND(seed={self.seed})"


class PROB(ScoredPolicy):
    """PROB_0 [DGR03] (003 §3.1): the probability that the next partner arrival matches, from the partner's
    past frequencies (a :class:`~sparksub.operators.stream_joins.models.StationaryModel` per side, kept by
    the policy), or from ``models`` = (left, right) when given."""
    name = "PROB"

    def __init__(self, models=None):
        self.own = models is None
        self.models = (StationaryModel(), StationaryModel()) if models is None else tuple(models)

    def observe(self, t, left_keys, right_keys):
        self.models[0].observe(t, left_keys)
        self.models[1].observe(t, right_keys)

    def probability(self, cand: Candidates) -> np.ndarray:
        p = np.zeros(cand.n)
        for d in (0, 1):
            sel = np.flatnonzero(cand.side == d)
            if sel.size:
                p[sel] = self.models[1 - d].expected(cand.t0, 1, *cand.ranges(d, cand.key[sel]))[0]
        return p

    def score(self, cand):
        return self.probability(cand)

    def describe(self):
        return f"{self.name} (next-step match probability from {'past frequencies' if self.own else 'the given models'})"


class LIFE(PROB):
    """LIFE_0 [DGR03]: PROB's probability x the remaining lifetime in the sliding window (needs a window)."""
    name = "LIFE"

    def score(self, cand):
        if cand.window is None:
            raise ValueError("LIFE needs a sliding window (state_window / window=...)")
        return self.probability(cand) * np.maximum(cand.remaining(), 0.0)


class HEEB(ScoredPolicy):
    """The heuristic of estimated expected benefit (003 §3.4.3) with L^exp(Δt) = e^{−αΔt}:
    H_x = Σ_{Δt>=1} E[matches of x at t0 + Δt] · e^{−αΔt} (Lemma 9's summands; caching form through
    :class:`~sparksub.operators.stream_joins.models.ReferenceModel`).  α = ``alpha``, else from the mean
    ``lifetime`` (1 / (1 − e^{−α}) = lifetime), else from the cache size (003 §3.5.5, §3.7.5).  The sum runs
    to the horizon where e^{−αΔt} < ``tol`` (or the partner model's support ends, or ``max_horizon``); a
    model with a closed form (``heeb``: Markov chains, the reduction) is asked directly when there is no
    window.  Uses the operator's models (default: past frequencies, where HEEB ranks as PROB: §3.5.2)."""
    name = "HEEB"
    needs_models = True

    def __init__(self, lifetime: float | None = None, *, alpha: float | None = None, tol: float = 1e-4,
                 max_horizon: int = 400):
        self.lifetime, self.alpha, self.tol, self.max_horizon = lifetime, alpha, float(tol), int(max_horizon)
        self._capacity = None

    def alpha_for(self, capacity: int | None = None) -> float:
        if self.alpha is not None:
            return float(self.alpha)
        life = self.lifetime if self.lifetime is not None else max(2, capacity or self._capacity or 2)
        return alpha_for_lifetime(life)

    def horizon(self, cand: Candidates, alpha: float) -> int:
        h = min(self.max_horizon, max(1, math.ceil(-math.log(self.tol) / alpha)))
        hint = cand.horizon_hint()
        return max(1, min(h, hint)) if hint is not None else h

    def score(self, cand):
        alpha = self.alpha_for()
        fast = cand.window is None and all(
            hasattr(cand.models[1 - d], "heeb") for d in (0, 1) if np.any(cand.side == d))
        if fast:
            out = np.zeros(cand.n)
            for d in (0, 1):
                sel = np.flatnonzero(cand.side == d)
                if sel.size:
                    out[sel] = cand.models[1 - d].heeb(alpha, cand.t0, *cand.ranges(d, cand.key[sel]))
            return out
        h = self.horizon(cand, alpha)
        weights = np.exp(-alpha * np.arange(1, h + 1))
        return weights @ cand.expected(h)

    def keep(self, cand, capacity):
        self._capacity = capacity                       # the default lifetime: this budget's size
        return super().keep(cand, capacity)

    def describe(self):
        if self.alpha is not None:
            return f"HEEB (L^exp, alpha={self.alpha:.4g})"
        life = f"lifetime={self.lifetime:g}" if self.lifetime is not None else "lifetime=cache size"
        return f"HEEB (L^exp, {life}, alpha={self.alpha_for():.4g})"


class FlowExpect:
    """FlowExpect (003 §3.3): at every decision, the best predetermined sequence of decisions over the next
    ``lookahead`` steps by min-cost flow (:func:`~sparksub.operators.stream_joins.flow.flow_expect`), of
    which it follows the first.  Needs models that give the arrivals to come (``arrivals``).  Costly:
    O((k + l)·l) nodes per step (003 Appendix A.4)."""
    name = "FlowExpect"
    needs_models = True

    def __init__(self, lookahead: int = 5):
        self.lookahead = int(lookahead)
        self.solves = 0
        self.last_value = 0.0

    def observe(self, t, left_keys, right_keys):
        pass

    def keep(self, cand, capacity):
        if cand.n <= capacity:
            return np.arange(cand.n)
        self.solves += 1
        self.last_value, keep = flow_expect(cand, capacity, self.lookahead)
        if keep.size < capacity:                         # slots the flow leaves empty: fill with the rest
            rest = np.setdiff1d(np.arange(cand.n), keep)
            order = np.lexsort((cand.rid[rest], cand.arrival[rest]))
            keep = np.sort(np.concatenate([keep, rest[order[rest.size - (capacity - keep.size):]]]))
        return keep

    def describe(self):
        return f"FlowExpect (look-ahead {self.lookahead}; {self.solves} min-cost flows solved)"


class Planned(ScoredPolicy):
    """Replays an :class:`~sparksub.operators.stream_joins.flow.OfflinePlan` (OPT-offline): keeps a row until
    the step whose decision the plan drops it at."""
    name = "OPT-offline"

    def __init__(self, plan: OfflinePlan):
        self.plan = plan

    def score(self, cand):
        out = np.zeros(cand.n)
        for d in (0, 1):
            sel = np.flatnonzero(cand.side == d)
            if sel.size:
                exits = self.plan.exits[d]
                rid = cand.rid[sel]
                inside = rid < exits.size
                out[sel[inside]] = (exits[rid[inside]] > cand.t0).astype(np.float64)
        return out


#: policy name -> class (the SQL / engine option ``state_policy``)
POLICIES = {"HEEB": HEEB, "PROB": PROB, "LIFE": LIFE, "LRU": LRU, "LFU": LFU, "RAND": RAND, "FIFO": FIFO,
            "WATERMARK": WATERMARK, "FLOWEXPECT": FlowExpect}


def make_policy(policy, **kwargs):
    """A policy from a name (case-insensitive, :data:`POLICIES`) or an instance (returned as is)."""
    if not isinstance(policy, str):
        return policy
    try:
        cls = POLICIES[policy.upper()]
    except KeyError:
        raise ValueError(f"unknown state policy {policy!r}; expected one of {', '.join(POLICIES)}") from None
    return cls(**kwargs)


# ----------------------------------------------------------------------------------------------------------------
# ECB dominance (003 §3.4.2)
# ----------------------------------------------------------------------------------------------------------------
def ecb(cand: Candidates, horizon: int) -> np.ndarray:
    """[horizon, n]: B_x(Δt) for Δt = 1..horizon (Lemma 9: the cumulative expected matches)."""
    return np.cumsum(cand.expected(horizon), axis=0)


def dominates(bx: np.ndarray, by: np.ndarray, *, strongly: bool = False, tol: float = 1e-12) -> bool:
    """B_x dominates B_y: B_x(Δt) >= B_y(Δt) for every Δt (strongly: > everywhere)."""
    return bool(np.all(bx > by + tol)) if strongly else bool(np.all(bx >= by - tol))


def dominated_subset(B: np.ndarray, max_size: int, tol: float = 1e-12) -> np.ndarray:
    """The largest V (at most ``max_size`` columns of the ECB matrix ``B`` [horizon, n]) such that every
    column outside V dominates every column inside (003 Corollary 2); empty when there is none.  The
    candidates for V are the prefixes of the order by (B(horizon), ΣB): a dominated set never has a member
    above a non-member in that order (ties aside)."""
    n = B.shape[1]
    max_size = min(int(max_size), n)
    if max_size <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((B.sum(axis=0), B[-1]))
    for m in range(max_size, 0, -1):
        inside, outside = order[:m], order[m:]
        if not outside.size:
            return inside
        # every outside column >= the pointwise max of the inside columns
        if np.all(B[:, outside].min(axis=1) >= B[:, inside].max(axis=1) - tol):
            return np.sort(inside)
    return np.zeros(0, dtype=np.int64)
