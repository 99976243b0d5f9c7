"""Stream models: what a replacement policy knows about the future of a stream (003 §3.2, §3.4, §3.5).

The chapter models each input stream as a discrete-time stochastic process {X_t}: X_t is the join value of
the tuple(s) a stream produces at step t (003 §3.2).  Every policy that looks ahead (HEEB, FlowExpect, the
ECB dominance test) asks one question of the *partner* stream's model (:class:`StreamModel`):

    ``expected(t0, horizon, lo, hi)`` -> array [horizon, n]: the expected number of the stream's arrivals at
    step t0 + Δt (Δt = 1..horizon) whose join value lies in [lo_i, hi_i], given the history up to t0.

With one arrival per step this is Pr{X_{t0+Δt} ∈ [lo_i, hi_i] | history}, the summand of Lemma 9's ECB
(003 §3.4.1); an equality join asks with ``hi=None`` (the point lo_i); a band join with the partner's range.
FlowExpect also needs the distribution of each arrival still to come (``arrivals``: 003 §3.3.1, the
"undetermined nodes").  A model is *observed* with the stream's arrivals at every step (``observe``).

Models (one class each; numeric join values except :class:`StationaryModel`, which also takes text):

* :class:`StationaryModel` -- stationary, independent (003 §3.5.2): the empirical frequency of each value so
  far.  PROB_0 / LIFE_0 of [DGR03] rank by it; HEEB on it is PROB (optimal there, §3.5.2).
* :class:`ScheduleModel` -- an explicit distribution per future step (the worked example of 003 §3.3.4), and
  as :meth:`ScheduleModel.offline` the stream's known future (003 §3.5.1: Pr{X_t = a_t} = 1).
* :class:`TrendModel` -- linear trend + i.i.d. bounded noise, X_t = slope·t + offset + Y_t (003 §3.5.3 bounded
  uniform, §3.5.4 bounded normal: the moving-window sensor streams of Figure 3.1, TOWER / ROOF / FLOOR of §3.7),
  given or learnt online (running least squares + a residual histogram).
* :class:`RandomWalkModel` -- X_t = X_{t-1} + drift + Y_t (003 §3.5.5, WALK of §3.7): a function of v − x_{t0}
  only (Theorem 11(2)).
* :class:`MarkovModel` -- a finite chain over a grid of values, e.g. a discretised AR(1)
  X_t = φ0 + φ1·X_{t-1} + Y_t (003 Theorem 11(1), the REAL configuration of §3.7.5).  HEEB with L^exp has a
  closed form through the discounted Green's matrix G = (I − e^{−α}P)^{-1} (our derivation, exact for the
  chain, where the chapter approximates the surface h2 by bicubic interpolation of 25 control points):
  joining H(x → v) = G[x, v] − 1{x = v}; caching (first reference) E_x[e^{−ατ_v}] = G[x, v] / G[v, v]
  (x ≠ v), 1 − 1 / G[v, v] (x = v).
* :class:`ReferenceModel` -- the model of the reference stream R after the caching -> joining reduction of
  003 §3.2.1 (Theorem 7): a cached supply tuple s_(v,i) joins exactly the next reference of v, so its
  expected matches are the *first-reference* probabilities of Corollary 1.

All models are plain Python objects (numpy arrays inside): the operator's snapshot pickles them as they are.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "REFERENCE_MULTIPLIER",
    "MarkovModel",
    "RandomWalkModel",
    "ReferenceModel",
    "ScheduleModel",
    "StationaryModel",
    "StreamModel",
    "TrendModel",
    "bounded_normal",
    "bounded_uniform",
    "discretised_normal",
]


@runtime_checkable
class StreamModel(Protocol):
    """What the look-ahead policies ask of a stream's model (module docstring)."""

    def observe(self, t: int, keys: np.ndarray) -> None:
        """The stream's arrivals at step t (possibly none); steps come in increasing order."""

    def expected(self, t0: int, horizon: int, lo: np.ndarray, hi: np.ndarray | None = None) -> np.ndarray:
        """[horizon, n]: expected arrivals at t0 + 1 .. t0 + horizon with a value in [lo_i, hi_i] (hi None:
        equal to lo_i)."""

    def arrivals(self, t0: int, t: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The arrivals expected at step t > t0, each as (values, probabilities) (mass < 1: the rest joins
        nothing): FlowExpect's undetermined nodes (003 §3.3.1)."""


# ----------------------------------------------------------------------------------------------------------------
# discrete noise laws (003 §3.7.1: "bounded zero-mean distributions", Figure 3.8)
# ----------------------------------------------------------------------------------------------------------------
def bounded_normal(sd: float, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """A normal law N(0, sd²) discretised on the integers of [−bound, bound] and renormalised (003 §3.5.4)."""
    y = np.arange(-int(bound), int(bound) + 1, dtype=np.float64)
    p = np.exp(-0.5 * (y / float(sd)) ** 2)
    return y, p / p.sum()


def bounded_uniform(bound: int) -> tuple[np.ndarray, np.ndarray]:
    """The uniform law on the integers of [−bound, bound] (003 §3.5.3)."""
    y = np.arange(-int(bound), int(bound) + 1, dtype=np.float64)
    return y, np.full(y.size, 1.0 / y.size)


def discretised_normal(sd: float = 1.0, width: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Integer steps of a discretised N(0, sd²) (probability of [k − ½, k + ½)), cut at ±width·sd: the random
    walk steps of WALK (003 §3.7.1)."""
    k = np.arange(-math.ceil(width * sd), math.ceil(width * sd) + 1, dtype=np.float64)
    cdf = np.array([0.5 * (1.0 + math.erf((x + 0.5) / (sd * math.sqrt(2.0)))) for x in k])
    cdf0 = np.array([0.5 * (1.0 + math.erf((x - 0.5) / (sd * math.sqrt(2.0)))) for x in k])
    p = cdf - cdf0
    return k, p / p.sum()


def _range_mass(support: np.ndarray, cum: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ p(y) over the sorted ``support`` with a <= y < b (``cum`` = [0, cumsum(p)]), elementwise."""
    return cum[np.searchsorted(support, b, "left")] - cum[np.searchsorted(support, a, "left")]


def _bounds(lo, hi, grid: float | None):
    """The half-open interval [a, b) of real values that fall in [lo, hi] once snapped to ``grid`` (a value x
    snaps to grid·floor(x / grid + ½)); without a grid the closed interval, as [lo, nextafter(hi))."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = lo if hi is None else np.asarray(hi, dtype=np.float64)
    if grid:
        return lo - grid / 2.0, hi + grid / 2.0
    return lo, np.nextafter(hi, np.inf)


# ----------------------------------------------------------------------------------------------------------------
# stationary, independent (003 §3.5.2)
# ----------------------------------------------------------------------------------------------------------------
class StationaryModel:
    """The empirical distribution of the values seen so far and the arrival rate (arrivals per step): the
    past-frequency estimate of PROB_0 / LIFE_0 [DGR03] (003 §3.1), time-invariant (003 §3.5.2).  Values may
    be numbers or text; band ranges need numbers.  Memory: one counter per distinct value seen."""

    def __init__(self):
        self.counts: dict = {}
        self.total = 0
        self.first: int | None = None
        self.last: int | None = None
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def observe(self, t: int, keys) -> None:
        if self.first is None:
            self.first = t
        self.last = t
        keys = np.asarray(keys)
        if keys.size:
            c = self.counts
            if keys.size <= 16:
                for v in keys.tolist():
                    c[v] = c.get(v, 0) + 1
            else:
                vals, cnt = np.unique(keys, return_counts=True)
                for v, n in zip(vals.tolist(), cnt.tolist()):
                    c[v] = c.get(v, 0) + n
            self.total += int(keys.size)
            self._sorted = None

    @property
    def steps(self) -> int:
        return 0 if self.first is None else self.last - self.first + 1

    @property
    def rate(self) -> float:
        return self.total / self.steps if self.steps else 0.0

    def probability(self, lo, hi=None) -> np.ndarray:
        """Expected arrivals per step with a value in [lo_i, hi_i] (rate x empirical probability)."""
        lo = np.asarray(lo)
        if not self.steps:
            return np.zeros(lo.shape)
        if hi is None:
            get = self.counts.get
            return np.array([get(v, 0) for v in lo.tolist()], dtype=np.float64) / self.steps
        if self._sorted is None:
            vals = np.array(sorted(self.counts), dtype=np.float64)
            cum = np.concatenate([[0.0], np.cumsum([self.counts[v] for v in vals.tolist()])])
            self._sorted = (vals, cum)
        vals, cum = self._sorted
        a, b = _bounds(lo, hi, None)
        return _range_mass(vals, cum, a, b) / self.steps

    def expected(self, t0: int, horizon: int, lo, hi=None) -> np.ndarray:
        return np.broadcast_to(self.probability(lo, hi), (int(horizon), np.asarray(lo).size)).copy()

    def arrivals(self, t0: int, t: int) -> list:
        if not self.total:
            return []
        vals = np.array(list(self.counts))
        p = np.array(list(self.counts.values()), dtype=np.float64) / self.total
        return [(vals, p)] * max(1, round(self.rate))


# ----------------------------------------------------------------------------------------------------------------
# explicit future (003 §3.3.4 worked example; §3.5.1 offline streams)
# ----------------------------------------------------------------------------------------------------------------
class ScheduleModel:
    """A distribution for each arrival of each future step: ``steps = {t: [arrival, ...]}``, an arrival being a
    value (known for sure) or ``{value: probability}`` (total < 1: otherwise a tuple that joins nothing, the
    "–" of 003 §3.3.4).  Independent of the history (``observe`` is a no-op)."""

    def __init__(self, steps: dict):
        self.steps: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for t, arrivals in steps.items():
            out = []
            for a in arrivals:
                if isinstance(a, dict):
                    items = [(v, p) for v, p in a.items() if p > 0]
                    out.append((np.array([v for v, _ in items]), np.array([p for _, p in items], dtype=np.float64)))
                else:
                    out.append((np.array([a]), np.ones(1)))
            self.steps[int(t)] = out
        self._sure: dict | None = None     # value -> sorted steps of its sure arrivals (next_time)

    @classmethod
    def offline(cls, times, keys) -> ScheduleModel:
        """The stream's known future (003 §3.5.1): key k arrives at its time for sure (NaN / None: skipped)."""
        steps: dict = {}
        for t, k in zip(np.asarray(times).tolist(), list(keys)):
            if k is None or (isinstance(k, float) and math.isnan(k)):
                continue
            steps.setdefault(int(t), []).append(k)
        return cls(steps)

    def observe(self, t: int, keys) -> None:
        pass

    def expected(self, t0: int, horizon: int, lo, hi=None) -> np.ndarray:
        lo = np.asarray(lo)
        out = np.zeros((int(horizon), lo.size))
        numeric = lo.dtype.kind in "iuf"
        for d in range(1, int(horizon) + 1):
            for vals, p in self.steps.get(t0 + d, ()):
                if hi is None:
                    out[d - 1] += (p[None, :] * (vals[None, :] == lo[:, None])).sum(axis=1)
                elif numeric:
                    hit = (vals[None, :] >= lo[:, None]) & (vals[None, :] <= np.asarray(hi)[:, None])
                    out[d - 1] += (p[None, :] * hit).sum(axis=1)
        return out

    def arrivals(self, t0: int, t: int) -> list:
        return list(self.steps.get(int(t), ()))

    def next_time(self, value, t0: int) -> int | None:
        """The first step > t0 with an arrival of ``value`` for sure (offline streams), None if none."""
        if self._sure is None:
            sure: dict = {}
            for t in sorted(self.steps):
                for vals, p in self.steps[t]:
                    if p.size == 1 and p[0] >= 1.0:
                        sure.setdefault(vals[0].item(), []).append(t)
            self._sure = sure
        times = self._sure.get(value.item() if hasattr(value, "item") else value)
        if not times:
            return None
        i = bisect_right(times, t0)
        return times[i] if i < len(times) else None


# ----------------------------------------------------------------------------------------------------------------
# linear trend + bounded noise (003 §3.5.3, §3.5.4)
# ----------------------------------------------------------------------------------------------------------------
class TrendModel:
    """X_t = slope·t + offset + Y_t, Y_t i.i.d. with the law (``noise_values``, ``noise_probs``), ``rate``
    arrivals per step, values snapped to ``grid`` (1 for integer timestamps; None: real values).

    With ``learn=True`` the trend is re-estimated online by least squares over the observed (t, value) pairs
    with exponential forgetting (``memory`` steps), and the noise law is the histogram of the last ``memory``
    residuals (snapped to the grid), refitted every ``refit_every`` steps: the "observed statistical
    properties" of 003 §3.1.  Until ``min_points`` values have been seen the given parameters are used.

    ``expected`` is vectorised: [horizon, n] cumulative-law look-ups (searchsorted) per call.
    """

    def __init__(self, slope: float = 1.0, offset: float = 0.0, noise=None, *, rate: float = 1.0,
                 grid: float | None = 1.0, learn: bool = False, memory: int = 512, refit_every: int = 16,
                 min_points: int = 32):
        y, p = noise if noise is not None else bounded_uniform(0)
        self.slope, self.offset, self.rate, self.grid = float(slope), float(offset), float(rate), grid
        self._set_noise(np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64))
        self.learn, self.memory, self.refit_every, self.min_points = learn, int(memory), int(refit_every), int(min_points)
        # running (discounted) sums for least squares, and the last residual inputs
        self._s = np.zeros(5)             # Σw, Σw·t, Σw·v, Σw·t², Σw·t·v
        self._recent_t = np.zeros(0)
        self._recent_v = np.zeros(0)
        self._arrived = 0
        self._first: int | None = None
        self._last: int | None = None
        self._since_fit = 0

    def _set_noise(self, y: np.ndarray, p: np.ndarray) -> None:
        order = np.argsort(y, kind="stable")
        self.noise_values, self.noise_probs = y[order], p[order] / p.sum()
        self._cum = np.concatenate([[0.0], np.cumsum(self.noise_probs)])

    def center(self, t) -> np.ndarray:
        return self.slope * np.asarray(t, dtype=np.float64) + self.offset

    def observe(self, t: int, keys) -> None:
        if self._first is None:
            self._first = t
        self._last = t
        if not self.learn:
            return
        v = np.asarray(keys, dtype=np.float64)
        self._arrived += v.size
        decay = 1.0 - 1.0 / self.memory
        self._s *= decay
        if v.size:
            tt = np.full(v.size, float(t))
            self._s += [v.size, tt.sum(), v.sum(), (tt * tt).sum(), (tt * v).sum()]
            self._recent_t = np.concatenate([self._recent_t, tt])[-self.memory:]
            self._recent_v = np.concatenate([self._recent_v, v])[-self.memory:]
        self._since_fit += 1
        if self._recent_v.size >= self.min_points and self._since_fit >= self.refit_every:
            self._refit()

    def _refit(self) -> None:
        self._since_fit = 0
        w, st, sv, stt, stv = self._s
        den = w * stt - st * st
        if w > 0 and abs(den) > 1e-12 * max(1.0, w * stt):
            self.slope = (w * stv - st * sv) / den
            self.offset = (sv - self.slope * st) / w
        steps = self._last - self._first + 1
        self.rate = self._arrived / steps if steps else self.rate
        res = self._recent_v - self.center(self._recent_t)
        if self.grid:
            res = self.grid * np.floor(res / self.grid + 0.5)
        vals, cnt = np.unique(res, return_counts=True)
        self._set_noise(vals, cnt.astype(np.float64))

    def expected(self, t0: int, horizon: int, lo, hi=None) -> np.ndarray:
        a, b = _bounds(lo, hi, self.grid)
        c = self.center(t0 + np.arange(1, int(horizon) + 1))[:, None]
        return self.rate * _range_mass(self.noise_values, self._cum, a[None, :] - c, b[None, :] - c)

    def arrivals(self, t0: int, t: int) -> list:
        vals = self.center(t) + self.noise_values
        if self.grid:
            vals = self.grid * np.floor(vals / self.grid + 0.5)
        return [(vals, self.noise_probs)] * max(1, round(self.rate))

    def horizon_hint(self, lo, hi=None) -> int | None:
        """Steps after t0 beyond which no arrival can fall in any [lo_i, hi_i] (None: no such bound)."""
        if self.slope <= 0 or self._last is None:
            return None
        top = float(np.max(np.asarray(lo if hi is None else hi, dtype=np.float64))) + (self.grid or 0.0)
        first = self.center(self._last) + self.noise_values[0]
        return max(1, math.ceil((top - first) / self.slope) + 1)


# ----------------------------------------------------------------------------------------------------------------
# random walk with drift (003 §3.5.5; Theorem 11(2))
# ----------------------------------------------------------------------------------------------------------------
class RandomWalkModel:
    """X_t = X_{t−1} + drift + Y_t with integer steps Y (``steps`` = (values, probabilities)), conditioned on
    the last value seen (several arrivals in a step: their mean).  Pr{X_{t0+Δt} = v | x_{t0}} depends on
    v − x_{t0} only (003 Theorem 11(2)); the Δt-fold convolutions of the step law are computed once and
    cached (probabilities below 1e-12 trimmed)."""

    def __init__(self, steps=None, drift: float = 0.0, *, grid: float | None = 1.0, rate: float = 1.0):
        y, p = steps if steps is not None else discretised_normal(1.0)
        self.step_values = np.asarray(y, dtype=np.float64)
        self.step_probs = np.asarray(p, dtype=np.float64) / np.sum(p)
        self.drift, self.grid, self.rate = float(drift), grid, float(rate)
        self.position: float | None = None
        self._laws: list[tuple[np.ndarray, np.ndarray]] = []     # Δt-fold sums: (offsets, cumulative probs)
        self._stacked: tuple[int, np.ndarray] | None = None      # the laws on one grid (``_stack``)

    def observe(self, t: int, keys) -> None:
        keys = np.asarray(keys, dtype=np.float64)
        if keys.size:
            self.position = float(keys.mean())

    def _law(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Offsets of Y_1 + ... + Y_d (on the integer grid of the steps) and [0, cumsum(probabilities)]."""
        lo0 = int(self.step_values.min())
        base = np.zeros(int(self.step_values.max()) - lo0 + 1)
        np.add.at(base, (self.step_values - lo0).astype(np.int64), self.step_probs)
        while len(self._laws) < d:
            if self._laws:
                offs, cum = self._laws[-1]
                conv, start = np.convolve(np.diff(cum), base), int(offs[0]) + lo0
            else:
                conv, start = base, lo0
            keep = np.nonzero(conv > 1e-12)[0]
            conv, start = conv[keep[0]:keep[-1] + 1], start + int(keep[0])
            self._laws.append((start + np.arange(conv.size, dtype=np.float64),
                               np.concatenate([[0.0], np.cumsum(conv)])))
        return self._laws[d - 1]

    def _stack(self, h: int) -> tuple[int, np.ndarray]:
        """(base, C): C[d − 1, j] = Pr{Y_1 + ... + Y_d < base + j} for d = 1..h on one integer grid (cached)."""
        if self._stacked is None or self._stacked[1].shape[0] < h:
            laws = [self._law(d) for d in range(1, h + 1)]
            base = int(min(o[0] for o, _ in laws))
            width = int(max(o[-1] for o, _ in laws)) - base + 1
            C = np.ones((h, width + 1))
            for i, (offs, cum) in enumerate(laws):
                a = int(offs[0]) - base
                C[i, :a] = 0.0
                C[i, a:a + cum.size] = cum
            self._stacked = (base, C)
        return self._stacked[0], self._stacked[1][:h]

    def expected(self, t0: int, horizon: int, lo, hi=None) -> np.ndarray:
        lo = np.asarray(lo, dtype=np.float64)
        h = int(horizon)
        if self.position is None or not h:
            return np.zeros((h, lo.size))
        a, b = _bounds(lo, hi, self.grid)
        base, C = self._stack(h)
        c = (self.position + self.drift * np.arange(1, h + 1))[:, None]
        last = C.shape[1] - 1
        ia = np.clip(np.ceil(a[None, :] - c) - base, 0, last).astype(np.int64)
        ib = np.clip(np.ceil(b[None, :] - c) - base, 0, last).astype(np.int64)
        rows = np.arange(h)[:, None]
        return self.rate * (C[rows, ib] - C[rows, ia])

    def arrivals(self, t0: int, t: int) -> list:
        if self.position is None:
            return []
        offs, cum = self._law(int(t - t0))
        return [(self.position + (t - t0) * self.drift + offs, np.diff(cum))] * max(1, round(self.rate))


# ----------------------------------------------------------------------------------------------------------------
# finite Markov chains: discretised AR(1) (003 Theorem 11(1), §3.7.5)
# ----------------------------------------------------------------------------------------------------------------
class MarkovModel:
    """A Markov chain over the sorted ``grid`` of values with transition matrix ``P`` (rows sum to 1),
    conditioned on the last value seen (snapped to the nearest grid value).  One arrival per step.

    ``heeb(alpha, t0, lo, hi)`` is HEEB with L^exp(Δt) = e^{−αΔt} in closed form through the discounted
    Green's matrix G = (I − e^{−α}P)^{-1} (one inversion per α, cached): H(x → [lo, hi]) = Σ_{v ∈ [lo, hi]}
    (G − I)[x, v]; ``first_reference_heeb`` the caching form (Corollary 1 / 4): E_x[e^{−ατ_v}]."""

    def __init__(self, grid, P):
        self.grid = np.asarray(grid, dtype=np.float64)
        self.P = np.asarray(P, dtype=np.float64)
        self.state: int | None = None
        self._green: dict[float, np.ndarray] = {}
        self._green_cum: dict[float, np.ndarray] = {}

    @classmethod
    def ar1(cls, phi0: float, phi1: float, sd: float, lo: float, hi: float, step: float = 1.0) -> MarkovModel:
        """X_t = φ0 + φ1·X_{t−1} + Y_t, Y ~ N(0, sd²), on the grid lo, lo + step, ..., hi (each value the cell
        [v − step/2, v + step/2); the mass beyond the ends goes to the end cells)."""
        grid = np.arange(lo, hi + step / 2.0, step, dtype=np.float64)
        edges = np.concatenate([[-np.inf], (grid[:-1] + grid[1:]) / 2.0, [np.inf]])
        mean = phi0 + phi1 * grid
        z = (edges[None, :] - mean[:, None]) / (sd * math.sqrt(2.0))
        cdf = 0.5 * (1.0 + _erf(z))
        return cls(grid, np.diff(cdf, axis=1))

    def snap(self, v) -> np.ndarray:
        """Index of the grid value nearest to each v."""
        v = np.asarray(v, dtype=np.float64)
        i = np.clip(np.searchsorted(self.grid, v), 1, self.grid.size - 1)
        return np.where(np.abs(self.grid[i - 1] - v) <= np.abs(self.grid[i] - v), i - 1, i)

    def observe(self, t: int, keys) -> None:
        keys = np.asarray(keys, dtype=np.float64)
        if keys.size:
            self.state = int(self.snap(keys[-1:])[0])

    def _distributions(self, horizon: int) -> np.ndarray:
        pi = np.zeros(self.grid.size)
        pi[self.state] = 1.0
        out = np.empty((int(horizon), self.grid.size))
        for d in range(int(horizon)):
            pi = pi @ self.P
            out[d] = pi
        return out

    def expected(self, t0: int, horizon: int, lo, hi=None) -> np.ndarray:
        lo = np.asarray(lo, dtype=np.float64)
        if self.state is None:
            return np.zeros((int(horizon), lo.size))
        pis = self._distributions(horizon)
        cum = np.concatenate([np.zeros((pis.shape[0], 1)), np.cumsum(pis, axis=1)], axis=1)
        ia, ib = self._cells(lo, hi)
        return cum[:, ib] - cum[:, ia]

    def _cells(self, lo, hi):
        """Grid index ranges [ia, ib) of the values in [lo_i, hi_i] (hi None: the cell of lo_i, if on grid)."""
        lo = np.asarray(lo, dtype=np.float64)
        hi = lo if hi is None else np.asarray(hi, dtype=np.float64)
        return np.searchsorted(self.grid, lo, "left"), np.searchsorted(self.grid, hi, "right")

    def arrivals(self, t0: int, t: int) -> list:
        if self.state is None:
            return []
        return [(self.grid, self._distributions(t - t0)[-1])]

    def green(self, alpha: float) -> np.ndarray:
        """G = (I − e^{−α}P)^{-1} = Σ_n e^{−αn} P^n (cached per α)."""
        key = round(float(alpha), 12)
        if key not in self._green:
            n = self.grid.size
            self._green[key] = np.linalg.inv(np.eye(n) - math.exp(-alpha) * self.P)
        return self._green[key]

    def heeb(self, alpha: float, t0: int, lo, hi=None) -> np.ndarray:
        """Σ_{Δt>=1} Pr{X_{t0+Δt} ∈ [lo_i, hi_i] | x} e^{−αΔt} for every i (joining form, 003 §3.4.3)."""
        lo = np.asarray(lo, dtype=np.float64)
        if self.state is None:
            return np.zeros(lo.size)
        key = round(float(alpha), 12)
        if key not in self._green_cum:
            g = self.green(alpha) - np.eye(self.grid.size)
            self._green_cum[key] = np.concatenate([np.zeros((g.shape[0], 1)), np.cumsum(g, axis=1)], axis=1)
        row = self._green_cum[key][self.state]
        ia, ib = self._cells(lo, hi)
        return row[ib] - row[ia]

    def first_reference_heeb(self, alpha: float, values) -> np.ndarray:
        """E_x[e^{−α τ_v}], τ_v = the first step >= 1 at which the chain is at v (caching form, Corollary 1,
        with L^exp): G[x, v] / G[v, v] for x != v, 1 − 1 / G[v, v] for x = v."""
        v = self.snap(values)
        if self.state is None:
            return np.zeros(v.size)
        g = self.green(alpha)
        x = self.state
        gvv = g[v, v]
        return np.where(v == x, 1.0 - 1.0 / gvv, g[x, v] / gvv)

    def first_reference(self, horizon: int, values) -> np.ndarray:
        """[horizon, n]: Pr{the first visit of v_i after now is at t0 + Δt} (taboo iteration, O(horizon·S²)
        per value: for tests and the dominance check on small grids)."""
        v = self.snap(values)
        out = np.zeros((int(horizon), v.size))
        if self.state is None:
            return out
        for j, vi in enumerate(v.tolist()):
            q = np.zeros(self.grid.size)
            q[self.state] = 1.0
            for d in range(int(horizon)):
                q = q @ self.P
                out[d, j] = q[vi]
                q[vi] = 0.0
        return out


def _erf(z: np.ndarray) -> np.ndarray:
    """Vectorised error function (math.erf per element; infinities handled)."""
    return np.vectorize(math.erf, otypes=[np.float64])(z)


# ----------------------------------------------------------------------------------------------------------------
# the caching problem as a join (003 §3.2.1, Theorem 7; Corollary 1)
# ----------------------------------------------------------------------------------------------------------------
#: reduced join keys are code·M + occurrence (``reduction.caching_as_join``)
REFERENCE_MULTIPLIER = 1 << 32


class ReferenceModel:
    """The reference stream R of a caching problem, seen through the reduction of 003 §3.2.1: its join keys
    are (v, i) pairs encoded as v·M + i; ``base`` models the reference values v themselves (observed decoded).
    A cached supply tuple s_(v,i) joins only r_(v,i), the *next* reference of v, so its expected matches at
    t0 + Δt are Pr{the first reference of v after t0 is at t0 + Δt} (Corollary 1), and its HEEB value with
    L^exp is E[e^{−α τ_v}] (Corollary 4).  Bases: :class:`ScheduleModel` (offline: LFD, §3.5.1),
    :class:`StationaryModel` (p(1 − p)^{Δt−1}: LFU / A_0, §3.5.2), :class:`MarkovModel` (Green's matrix)."""

    def __init__(self, base, multiplier: int = REFERENCE_MULTIPLIER):
        self.base, self.multiplier = base, int(multiplier)

    def decode(self, keys) -> np.ndarray:
        return np.asarray(keys, dtype=np.int64) // self.multiplier

    def observe(self, t: int, keys) -> None:
        self.base.observe(t, self.decode(keys))

    def _p(self, values) -> np.ndarray:
        return np.clip(self.base.probability(values), 0.0, 1.0)

    def expected(self, t0: int, horizon: int, lo, hi=None) -> np.ndarray:
        if hi is not None:
            raise ValueError("ReferenceModel: the reduction is an equality join")
        v = self.decode(lo)
        h = int(horizon)
        if isinstance(self.base, MarkovModel):
            return self.base.first_reference(h, v)
        if isinstance(self.base, StationaryModel):
            p = self._p(v)
            d = np.arange(1, h + 1)[:, None]
            return p[None, :] * (1.0 - p[None, :]) ** (d - 1)
        out = np.zeros((h, v.size))
        for j, vi in enumerate(v.tolist()):
            nt = self.base.next_time(vi, t0)
            if nt is not None and nt - t0 <= h:
                out[nt - t0 - 1, j] = 1.0
        return out

    def heeb(self, alpha: float, t0: int, lo, hi=None) -> np.ndarray:
        v = self.decode(lo)
        beta = math.exp(-alpha)
        if isinstance(self.base, MarkovModel):
            return self.base.first_reference_heeb(alpha, v)
        if isinstance(self.base, StationaryModel):
            p = self._p(v)
            return p * beta / (1.0 - (1.0 - p) * beta)
        out = np.zeros(v.size)
        for j, vi in enumerate(v.tolist()):
            nt = self.base.next_time(vi, t0)
            if nt is not None:
                out[j] = beta ** (nt - t0)
        return out

    def arrivals(self, t0: int, t: int) -> list:
        raise NotImplementedError("FlowExpect over a reduced caching problem: use reduction.opt_offline_caching")
