"""Data-sensitive processing of continuous select-joins: the per-tuple plan router of 003 §4.5.

Pure core (numpy, no pyspark) for issue 5 item 6.  Every incoming tuple is sent to a routing operator that
estimates, from cheap statistics and the tuple's own values, the cost of each of a few pre-compiled plans over
the same queries and data, and runs the cheapest one (003 §4.5: "it optimizes each incoming data as a separate
query over the database and the set of continuous queries, except that its choices are limited to a set of
pre-compiled alternatives").

Sources
-------
003 = the dissertation, chapter 4 ([AXYY06]): §4.5 (the framework), §4.5.1 (statistics and cost model),
§4.6.7 (equal-width histograms with 100 buckets for kj and ks, the least-squares fit of Table 4.2, DYNAMIC vs
the static plans vs OPT, Figures 4.13–4.21), §4.4 (SSI histograms, an alternative ks estimator).  The plans
are :mod:`sparksub.operators.joins.select`.

Statistics (003 §4.5.1, §4.6.7)
-------------------------------
For an incoming R tuple r(a, b) (an S tuple swaps the roles of (R, A) and (S, C)):

* ``kj`` — the number of S tuples joining r, i.e. the selectivity of S.B = r.b: an equal-width histogram over
  the partner's join attribute (:class:`JoinValueHistogram`, 100 buckets by default), estimate = tuples in
  b's bucket / distinct join values in it (uniform frequencies within a bucket);
* ``ks`` — the number of queries whose local selection on R.A r passes: an equal-width histogram over the
  query ranges (:class:`~sparksub.operators.shared.ssi_histograms.EqualWidthHistogram`, §4.5.1: +1 on each covered
  bucket, the covered fraction on a partly covered one; maintained in O(k) per query insert / delete), or the
  SSI histogram of §4.4 (:class:`~sparksub.operators.shared.ssi_histograms.SSIHistogram`, ``ks_histogram="ssi"``,
  rebuilt lazily after query changes since it is a static structure);
* ``g`` — the stabbing number of the hot part, read from the hotspot plan's tracker (§4.5.1: "directly
  available from the Hotspot-tracking algorithm"); the cost formula uses Σ_i √|Q^H_i| over its groups, with
  |Q^C| the scattered queries and k's (cold queries the tuple passes) estimated as ks·|Q^C|/|Q|.

Cost model (003 §4.5.1, the OUTPUT term dropped as in §4.6.7: it is the same for every plan)
-----------------------------------------------------------------------------------------------
With ``lg(x) = log2(1 + x)`` (so a tuple that joins nothing costs no join-run work, as in our plans, which
stop when kj = 0)::

    C_JoinFirst-E  = α log|S| + β kj √|Q| (+ γ kj ks)                  (R-tree probe per join result point, √n)
    C_JoinFirst-S  = α log|S| + β |Q| lg kj                            (every query searches the join run)
    C_SelectFirst  = α log|S| + β log|Q| (+ γ ks) + δ ks lg kj         (stab the R.A index, search per survivor)
    C_Hotspot      = α log|S| + β Σ_i √|Q^H_i| [kj>0] + γ log|Q^C| + δ k's lg kj (+ ε (ks − k's) lg kj)
    C_SSI          = α log|S| + β g_all lg kj + γ Σ_i √|Q_i| [kj>0] (+ δ ks lg kj)
                                                             (ours: SJ-SSI on every group, not in 4.5.1)

Deviations, each a term of the §4.5.1 shapes (:data:`FEATURES`):

* an intercept c0 (term ``"1"``) in every formula: our plans are Python + numpy, whose per-call dispatch (tens
  of µs) does not scale with log|S|, and without it the fit on workloads where |S| and |Q| grow together gave
  negative log|S| coefficients.  The paper's table has no intercept (Table 4.2's rows start at α);
* the terms marked (+): the output-sensitive parts of the index probes, which 003 §4.5.1 folds into OUTPUT
  ("the same for all approaches") but which are not the same per plan here — JoinFirst-E's R-tree reports
  every (join point, rectangle) pair, ~ kj · ks · (S.C selectivity), while SelectFirst reports one slice per
  surviving query; the priority-search-tree stab is O(log|Q| + ks), not O(log|Q|); the SSI probes of the hot
  groups search the join run once per passing hot query.  The [kj>0] factors: the hot groups are probed only
  when the tuple joins (our plans stop at kj = 0, like lg kj = 0).

The coefficients are per plan, in microseconds, fitted by least squares on timings taken on this machine by
:func:`calibrate` — the form of Table 4.2 — with every term's coefficient constrained to be >= 0 (the
intercept free; Lawson–Hanson): plain ``numpy.linalg.lstsq`` gave negative log|S| and log|Q^C| coefficients
that fit the calibration mixes but made the formulas negative on others (20K tuples × 50K queries: DYNAMIC sent
the tuples that join nothing to Hotspot, at 0.76 of OPT's time instead of 0.93; ``fit(nonnegative=False)``
restores it).  R² on one and the same calibration run (``sparksub calibrate-router`` defaults, 2,400 samples
per plan, 2 shared cores, load 2.2–3.0), the old formulas with plain least squares → the formulas above with
the constraint: JoinFirst-E 0.36 → 0.996, JoinFirst-S 0.989 → 0.989, SelectFirst 0.976 → 0.984, Hotspot
0.868 → 0.936 (0.947 unconstrained), SSI 0.468 → 0.965.  Before, JoinFirst-E's cost was badly under-estimated
for tuples passing many R.A selections (a kj = 1–10 tuple at ks ≈ 5,000 of 100K queries: 390–1,040 µs
measured, 140–530 µs estimated), so DYNAMIC sent them there instead of to Hotspot.  With every plan timed
alone per tuple on the three bench workloads below (800 tuples each, off-line, no routing cost), the best
static plan takes 1.09–1.28× the time of DYNAMIC's picks by the new coefficients, and OPT's Σ of per-tuple
minima 0.91–0.98 of it (old coefficients: 0.88–1.27× and 0.79–0.97).  A calibration file written with the
old terms no longer loads (its terms differ: :meth:`CostModel.load_or_builtin` falls back to the builtin
coefficients; re-run ``sparksub calibrate-router``).  The coefficients are stored as JSON
(:func:`default_coefficients_path`: ``$SPARKSUB_ROUTER_COEFFICIENTS`` or
``$XDG_CACHE_HOME/sparksub/router_coefficients.json``, default ``~/.cache/sparksub/...``).

Router (:class:`Router`)
------------------------
Holds one instance of every plan over *one* copy of the tables and of the query columns (each plan's
``tables`` / ``queries`` are bound to the router's, so a tuple is stored once and a query gets one slot;
each plan keeps its own indexes and work counters).  Query inserts / deletes go to every plan's indexes and to
the statistics; a data update is routed to one plan (its matches are what the update returns), then applied
to the shared tables and the kj histogram.  Modes:

* ``DYNAMIC`` — estimate every plan's cost from the statistics, run the cheapest (003 §4.5; the pick is read
  from the decision table below unless ``decision="formula"``);
* a plan name — that static plan for every tuple (the baselines of Figure 4.13);
* ``OPT`` — run *every* plan on the tuple, time each, keep the cheapest measured (the oracle of §4.6.7); its
  ``oracle_seconds`` is Σ of the per-tuple minima (the paper's simulated OPT throughput), and it also records
  which plan DYNAMIC would have picked, so ``stats()['dynamic_agrees_with_opt']`` is Figure 4.15's measure.

Decisions are counted per plan (``decisions``) and the last ``recent`` ones kept (side, plan) for EXPLAIN and
``stats()``.  Results are exactly those of the chosen plan, so every mode returns the same answers.

Decision table (003 §4.5: "the amount of optimization overhead per tuple incurred by our approach is minimal")
---------------------------------------------------------------------------------------------------------------
Every estimate the formulas read is constant per histogram bucket (kj per bucket of the partner's join-value
histogram, ks per bucket of the own-side range histogram; |S|, |Q|, the hot groups per state), so is their
argmin.  With ``decision="table"`` (the default) the router precomputes, per direction, the cheapest plan of
every (join-value bucket × ks bucket) cell — plus a row for "no partner tuple has this join value" (kj = 0
exactly, from the join-index lookup every plan starts with, f_DS: the statistics use it too) and a column for
a value outside the ks domain (ks = 0) — in one numpy pass (~1.3 ms for 101 × 101 cells × 4 plans), and a
tuple's pick is two bucket computations and a list index (~0.8 µs against ~11 µs for evaluating the formulas,
measured at 100K tuples × 10K queries).  The table is refreshed lazily: once the data and query changes since
the last refresh exceed ``refresh_fraction`` (5%) of |R| + |S| + |Q|, and at least ``refresh_min`` (256),
the next routed tuple rebuilds it (``table_refreshes`` counts them).  Between refreshes its picks are those of
the formulas at the statistics of the last refresh; right after one they equal the formula path's
(``decision="formula"``) for every tuple with the equal-width ks histogram, and at the grid's bucket midpoints
with the SSI one (whose buckets are not a grid).  A non-numeric join value has no bucket: it is routed by the
formulas (exact kj).

Measured (``bench/router_smoke.py --events 2000 --seconds 3``: 100K-tuple R and S, 2,000 incoming R tuples per
workload through ``probe_r``, every mode over the same tuples interleaved 100 at a time; tuples per second,
medians of 3 runs; coefficients from ``sparksub calibrate-router`` on this machine; 2 shared cores under load
3–6 from other processes, so only the ratios mean much).  Before = the router of commit b3e35df (formulas per
tuple, old terms, plain least squares, its own calibration file) through the same bench, runs alternated
with the after ones::

    queries:    best static           DYNAMIC  DYN/formula  OPT Σmin  OPT replayed  DYN/best  DYN/OPT  DYN/OPT repl.
    A length
    before
    10K:1000    SelectFirst  9,950      9,949       -        12,199     13,027        1.00      0.78     0.76
    100K:1000   Hotspot      2,527      1,988       -         2,327      2,476        0.79      0.88     0.78
    100K:100    SelectFirst  5,353      4,674       -         6,771      6,817        0.87      0.69     0.69
    after
    10K:1000    SelectFirst  7,283      7,966     6,343      12,539      8,844        1.12      0.64     0.87
    100K:1000   Hotspot      2,240      2,212     1,789       2,232      2,061        1.09      0.93     1.08
    100K:100    SelectFirst  5,133      7,273     5,731       8,645      6,707        1.42      0.88     1.08

(ratios: medians of the per-run ratios; the spread between runs is large, e.g. DYN/best 1.06–1.43 at 10K
queries.)  A single earlier "before" run on a quiet machine (load 0.4–0.7) gave DYN/best 0.99, 0.78, 0.77.

DYNAMIC is now at or above the best static plan on the three workloads (1.09–1.42, medians), from the cheaper
decisions (DYNAMIC/formula, the same picks with every formula evaluated per tuple, is 0.89–1.07 of the best
static plan: the table saves ~10 µs per tuple) and from the refitted terms (the picks alone: see the R²
paragraph).  DYNAMIC's breakdown: JoinFirst-E 55–60% (the ~44% of tuples that join nothing, plus small kj at
few passing selections), SelectFirst 16–41%, Hotspot 0–30%.  Against OPT: "OPT Σmin" (the paper's simulated
OPT, Σ of per-tuple minima timed inside OPT mode) stays out of reach at 10K queries (DYN/OPT 0.64, below the
issue's 80%): the minimum of four timings per tuple picks the luckiest one under load, the later plans of a
tuple run with its data in cache, and the Σ leaves out ``probe_r``'s checks and bookkeeping (~1–1.5 µs per
tuple; DYNAMIC's table lookup adds ~0.5 µs).  Routing every tuple to OPT's pick and timing it like DYNAMIC
("OPT replayed") gives 0.87 (10K queries) and 1.08 (100K): DYNAMIC's picks are as good as OPT's there, the
noise in OPT's per-tuple picks costs it as much as DYNAMIC's estimation errors.  DYNAMIC agrees with OPT on
35–48% of tuples (the paper: ~30%), mostly because for a tuple that joins nothing JoinFirst-E and -S both cost
~1 µs and OPT's pick between them is noise.

Left out: routing for band joins (003 §4.5 only says it "can be similarly implemented" and gives no cost
formulas; :mod:`sparksub.operators.joins.band` is not routed), and the per-component fit of §4.6.7 (we fit each
plan's total time against all of its terms at once: our plans are fused numpy passes whose components cannot
be timed apart without changing them).

>>> r = Router(coefficients=CostModel.builtin())
>>> r.add_query("q", a_lo=0, a_hi=10, c_lo=5, c_hi=7)
>>> r.insert_s("s1", b=1, c=6), r.insert_s("s2", b=1, c=9)
({}, {})
>>> r.insert_r("r1", a=3, b=1)
{'q': [('r1', 's1')]}
>>> sum(r.decisions.values())  # two S tuples and one R tuple routed
3
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import time
from collections import Counter, deque
from pathlib import Path
from typing import Callable, Hashable, Iterable, NamedTuple, Sequence

import numpy as np

from sparksub.errors import BadUpdate, DuplicateSubscription
from sparksub.operators.joins.select import (
    A, C, R_SIDE, S_SIDE, Matches, SelectJoinAlgorithm, SelectJoinTables, SJHotspot, SJJoinFirstE, SJJoinFirstS,
    SJSelectFirst, SJSSI, TupleInterface, _join_value, _Queries, _value)
from sparksub.operators.shared.ssi_histograms import EqualWidthHistogram, SSIHistogram

__all__ = ["DYNAMIC", "OPT", "PLANS", "PAPER_PLANS", "FEATURES", "EventStats", "CostModel", "JoinValueHistogram",
           "Router", "calibrate", "fit", "default_coefficients_path", "synthetic_workload", "features"]

DYNAMIC = "DYNAMIC"
OPT = "OPT"

#: the plans the router knows, by the paper's names
PLANS: dict[str, type[SelectJoinAlgorithm]] = {
    "SJ-JoinFirst-E": SJJoinFirstE, "SJ-JoinFirst-S": SJJoinFirstS, "SJ-SelectFirst": SJSelectFirst,
    "SJ-Hotspot": SJHotspot, "SJ-SSI": SJSSI}
#: the alternatives of 003 §4.5.1 / Figure 4.13 (the default plan set)
PAPER_PLANS = ("SJ-JoinFirst-E", "SJ-JoinFirst-S", "SJ-SelectFirst", "SJ-Hotspot")

#: the terms of each plan's cost formula (003 §4.5.1), in the order of its coefficients; ``[kj>0]`` is 1 when the
#: tuple joins something (our plans skip the join-run work otherwise); the terms beyond the paper's are marked
#: "(+)" in the module docstring
FEATURES: dict[str, tuple[str, ...]] = {
    "SJ-JoinFirst-E": ("1", "log|S|", "kj*sqrt|Q|", "kj*ks"),
    "SJ-JoinFirst-S": ("1", "log|S|", "|Q|*lg(kj)"),
    "SJ-SelectFirst": ("1", "log|S|", "log|Q|", "ks", "ks*lg(kj)"),
    "SJ-Hotspot": ("1", "log|S|", "sum_i sqrt|Q^H_i|*[kj>0]", "log|Q^C|", "k's*lg(kj)", "(ks-k's)*lg(kj)"),
    "SJ-SSI": ("1", "log|S|", "g*lg(kj)", "sum_i sqrt|Q_i|*[kj>0]", "ks*lg(kj)"),
}

#: Table 4.2 of 003 (Java, 650 MHz UltraSPARC-III; units not stated), for comparison only, aligned with
#: :data:`FEATURES` (the paper has no intercept and not our added terms: those entries are 0)
PAPER_TABLE_4_2 = {
    "SJ-JoinFirst-E": (0.0, 0.25, 4.34, 0.0), "SJ-JoinFirst-S": (0.0, 0.36, 0.17),
    "SJ-SelectFirst": (0.0, 0.64, 42.49, 0.0, 1.19), "SJ-Hotspot": (0.0, 0.19, 0.08, 70.19, 1.17, 0.0)}
#: which entries of :data:`PAPER_TABLE_4_2` are the paper's (the others are our added terms)
_PAPER_TERMS = {"SJ-JoinFirst-E": (1, 2), "SJ-JoinFirst-S": (1, 2), "SJ-SelectFirst": (1, 2, 4),
                "SJ-Hotspot": (1, 2, 3, 4)}

#: fallback coefficients (µs) when no calibration file exists: fitted by ``sparksub calibrate-router`` on the
#: development machine (2 shared cores); re-run it on yours
BUILTIN_COEFFICIENTS = {
    "SJ-JoinFirst-E": (23.03, 0.0, 0.02419, 0.01148),
    "SJ-JoinFirst-S": (-135.6, 10.1, 0.01331),
    "SJ-SelectFirst": (-60.21, 1.532, 5.789, 0.005848, 0.01441),
    "SJ-Hotspot": (31.89, 0.6144, 0.1232, 0.0, 0.1663, 0.006469),
    "SJ-SSI": (12.46, 0.0, 0.9174, 0.02604, 0.008187),
}

_ENV_PATH = "SPARKSUB_ROUTER_COEFFICIENTS"


_SIDE_LABEL = ("R", "S")  # by direction, for ``recent``


def _lg(x: float) -> float:
    return math.log2(1.0 + x)


# --------------------------------------------------------------------------------------------------------------
# Statistics (003 §4.5.1, §4.6.7)
# --------------------------------------------------------------------------------------------------------------
class EventStats(NamedTuple):
    """What the cost formulas read for one incoming tuple (003 §4.5.1's parameter table)."""

    partner_size: int  # |S| (|R| for an S tuple)
    queries: int  # |Q|
    kj: float  # partner tuples joining the tuple
    ks: float  # queries whose own-side selection the tuple passes
    hot_sqrt: float  # Σ_i √|Q^H_i| over the hot groups
    cold: int  # |Q^C|
    cold_ks: float  # k's: cold queries the tuple passes
    groups: int  # g: hot groups (the stabbing number of the hot part)
    all_groups: int  # stabbing groups of the SJ-SSI plan (all queries)
    all_sqrt: float  # Σ_i √|Q_i| over them


def _terms(plan: str, s: EventStats, lgk, joins) -> list:
    """The terms of ``plan``'s formula from ``s`` with ``lgk`` = lg(kj) and ``joins`` = [kj>0] given: scalars
    for one tuple, or numpy arrays broadcast over the cells of the decision table (the same IEEE operations
    in the same order either way, so both give bit-identical costs)."""
    log_s = math.log2(2 + s.partner_size)
    if plan == "SJ-JoinFirst-E":
        # 003 §4.5.1 f_DS + kj·f_QRS, f_QRS = √|Q|; (+) kj·ks: the R-tree reports, per join point (s.c, r.a), the
        # rectangles holding it, ~ ks × the S.C selectivity, which the coefficient absorbs
        return [1.0, log_s, s.kj * math.sqrt(s.queries), s.kj * s.ks]
    if plan == "SJ-JoinFirst-S":
        return [1.0, log_s, s.queries * lgk]
    if plan == "SJ-SelectFirst":
        # 003 §4.5.1 f_DS + f_QR + ks·O(log kj); (+) ks: the priority-search-tree stab is O(log|Q| + ks)
        return [1.0, log_s, math.log2(2 + s.queries), s.ks, s.ks * lgk]
    if plan == "SJ-Hotspot":
        # 003 §4.5.1 C_Hotspot; the hot groups are probed only when the tuple joins ([kj>0]); (+) the hot
        # queries the tuple passes, (ks − k's), each searched in the join run by the SSI probe
        return [1.0, log_s, s.hot_sqrt * joins, math.log2(2 + s.cold), s.cold_ks * lgk, (s.ks - s.cold_ks) * lgk]
    if plan == "SJ-SSI":
        return [1.0, log_s, s.all_groups * lgk, s.all_sqrt * joins, s.ks * lgk]
    raise KeyError(f"no cost formula for plan {plan!r}")


def features(plan: str, s: EventStats) -> list[float]:
    """The terms of ``plan``'s cost formula (:data:`FEATURES`) for one tuple (003 §4.5.1)."""
    return _terms(plan, s, _lg(s.kj), 1.0 if s.kj > 0 else 0.0)


class JoinValueHistogram:
    """Equal-width histogram over a table's (numeric) join attribute (003 §4.6.7: "conventional equal-width
    histograms for static table S on the join attribute"): per bucket the tuple count and the number of distinct
    join values present; ``estimate(b)`` = count / distinct of b's bucket.  Values outside ``domain`` count in
    the edge buckets.  O(1) per insert / delete.  A non-numeric join value has no estimate (None)."""

    def __init__(self, buckets: int = 100, domain=(0.0, 10_000.0)):
        self.buckets = int(buckets)
        self.lo, self.hi = float(domain[0]), float(domain[1])
        self.width = (self.hi - self.lo) / self.buckets
        self.count = [0] * self.buckets
        self.distinct = [0] * self.buckets

    def _bucket(self, b) -> int | None:
        if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)):
            return None
        j = int((float(b) - self.lo) // self.width) if self.width > 0 else 0
        return min(max(j, 0), self.buckets - 1)

    def add(self, b, new_value: bool) -> None:
        j = self._bucket(b)
        if j is not None:
            self.count[j] += 1
            self.distinct[j] += new_value

    def remove(self, b, last_of_value: bool) -> None:
        j = self._bucket(b)
        if j is not None:
            self.count[j] -= 1
            self.distinct[j] -= last_of_value

    def estimate(self, b) -> float | None:
        j = self._bucket(b)
        if j is None:
            return None
        d = self.distinct[j]
        return self.count[j] / d if d else 0.0

    @classmethod
    def from_runs(cls, runs: dict, buckets: int, domain) -> "JoinValueHistogram":
        h = cls(buckets, domain)
        for b, run in runs.items():
            j = h._bucket(b)
            if j is not None:
                h.count[j] += len(run)
                h.distinct[j] += 1
        return h


# --------------------------------------------------------------------------------------------------------------
# Cost model and its coefficients (003 §4.5.1, Table 4.2)
# --------------------------------------------------------------------------------------------------------------
class CostModel:
    """Per-plan coefficients of the §4.5.1 formulas (µs per unit of each term, :data:`FEATURES`), with the
    fit's metadata (samples, R², machine).  ``cost(plan, stats)`` is the estimated µs of one tuple."""

    def __init__(self, coefficients: dict, meta: dict | None = None):
        self.coefficients = {p: [float(v) for v in c] for p, c in coefficients.items()}
        for p, c in self.coefficients.items():
            if p not in FEATURES or len(c) != len(FEATURES[p]):
                raise ValueError(f"plan {p!r}: expected coefficients for {FEATURES.get(p)}, got {c}")
        self.meta = dict(meta or {})

    @classmethod
    def builtin(cls) -> "CostModel":
        return cls(BUILTIN_COEFFICIENTS, {"source": "builtin"})

    def cost(self, plan: str, s: EventStats) -> float:
        return sum(c * f for c, f in zip(self.coefficients[plan], features(plan, s)))

    def cost_grid(self, plan: str, s: EventStats, lgk, joins):
        """:meth:`cost` over arrays: ``s``'s kj / ks fields (and ``lgk`` = lg(kj), ``joins`` = [kj>0]) may be
        numpy arrays that broadcast together; same sum in the same order as :meth:`cost`."""
        total = 0
        for c, f in zip(self.coefficients[plan], _terms(plan, s, lgk, joins)):
            total = total + c * f
        return total

    # ---- JSON -------------------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"version": 1, "units": "microseconds", "features": {p: list(FEATURES[p]) for p in self.coefficients},
                "coefficients": self.coefficients, "meta": self.meta}

    @classmethod
    def from_json(cls, obj: dict) -> "CostModel":
        if obj.get("version") != 1:
            raise ValueError(f"unknown router coefficient file version {obj.get('version')!r}")
        for p, names in obj.get("features", {}).items():
            if tuple(names) != FEATURES.get(p):
                raise ValueError(f"plan {p!r}: the file's terms {names} are not this version's {FEATURES.get(p)}")
        return cls(obj["coefficients"], obj.get("meta"))

    def save(self, path: str | os.PathLike | None = None) -> Path:
        path = Path(path) if path is not None else default_coefficients_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2))
        tmp.replace(path)  # atomic: a router starting meanwhile reads the old file or the new one
        return path

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "CostModel":
        path = Path(path) if path is not None else default_coefficients_path()
        return cls.from_json(json.loads(Path(path).read_text()))

    @classmethod
    def load_or_builtin(cls, path: str | os.PathLike | None = None) -> "CostModel":
        try:
            return cls.load(path)
        except (OSError, ValueError, KeyError):
            return cls.builtin()

    def table(self) -> str:
        """The fitted coefficients in the form of Table 4.2."""
        lines = [f"{'plan':16s} {'term':26s} {'µs per unit':>12s}   {'Table 4.2':>9s}"]
        for p, coef in self.coefficients.items():
            paper = PAPER_TABLE_4_2.get(p, ())
            for i, (name, c) in enumerate(zip(FEATURES[p], coef)):
                ref = f"{paper[i]:9.2f}" if i in _PAPER_TERMS.get(p, ()) else " " * 9
                lines.append(f"{p if i == 0 else '':16s} {name:26s} {c:12.4f}   {ref}")
            fit_info = self.meta.get("fit", {}).get(p)
            if fit_info:
                lines.append(f"{'':16s} {'(samples, R²)':26s} {fit_info['samples']:>12,d}   {fit_info['r2']:9.3f}")
        return "\n".join(lines)


def default_coefficients_path() -> Path:
    """``$SPARKSUB_ROUTER_COEFFICIENTS``, else ``$XDG_CACHE_HOME/sparksub/router_coefficients.json`` (XDG default
    ``~/.cache``)."""
    env = os.environ.get(_ENV_PATH)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparksub" / "router_coefficients.json"


def _nonnegative_lstsq(X: np.ndarray, y: np.ndarray, free: Sequence[int] = (0,)) -> np.ndarray:
    """min ‖X c − y‖ subject to c_i >= 0 except for the columns in ``free`` (Lawson–Hanson active set, the
    columns scaled to unit norm for the tolerances)."""
    n = X.shape[1]
    scale = np.linalg.norm(X, axis=0)
    scale[scale == 0] = 1.0
    A = X / scale
    unconstrained = np.zeros(n, dtype=bool)
    unconstrained[list(free)] = True
    passive = unconstrained.copy()

    def solve(mask):
        z = np.zeros(n)
        if mask.any():
            z[mask] = np.linalg.lstsq(A[:, mask], y, rcond=None)[0]
        return z

    c = solve(passive)
    for _ in range(3 * n + 10):
        gradient = A.T @ (y - A @ c)
        entering = ~passive & (gradient > 1e-10 * max(1.0, float(np.abs(gradient).max())))
        if not entering.any():
            break
        passive[int(np.argmax(np.where(entering, gradient, -np.inf)))] = True
        while True:
            z = solve(passive)
            negative = passive & ~unconstrained & (z <= 0)
            if not negative.any():
                c = z
                break
            step = float((c[negative] / (c[negative] - z[negative])).min())
            c = c + step * (z - c)
            passive &= ~(~unconstrained & (c <= 1e-12))
            c[~passive] = 0.0
    return c / scale


def fit(samples: dict[str, tuple[Sequence, Sequence]], meta: dict | None = None, *,
        nonnegative: bool = True) -> CostModel:
    """Least-squares coefficients per plan (003 §4.6.7, Table 4.2) from ``{plan: (feature rows, µs)}``.

    ``nonnegative``: every term's coefficient >= 0 (the intercept is free): a unit of any term costs time, as
    all of Table 4.2's entries; plain least squares gave negative ones (log|S|, log|Q^C|) that made the
    formulas go negative when extrapolated to other (|S|, |Q|) mixes, routing tuples to the wrong plan."""
    coefficients, info = {}, {}
    for plan, (X, y) in samples.items():
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if nonnegative:
            coef = _nonnegative_lstsq(X, y)
        else:
            coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        pred = X @ coef
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
        coefficients[plan] = coef.tolist()
        info[plan] = {"samples": int(y.size), "r2": r2, "mean_us": float(y.mean())}
    return CostModel(coefficients, {**(meta or {}), "fit": info,
                                    "fit_method": "nonnegative least squares" if nonnegative else "least squares"})


# --------------------------------------------------------------------------------------------------------------
# The router (003 §4.5)
# --------------------------------------------------------------------------------------------------------------
def _bound(cls: type[SelectJoinAlgorithm], tables: SelectJoinTables, queries: _Queries, **kwargs):
    """An instance of ``cls`` whose ``tables`` and ``queries`` are the router's shared ones: a subclass whose
    two attributes are read-only properties (the base ``__init__``'s own assignments are ignored), so every
    index the plan builds in its ``__init__`` already points at the shared query columns."""
    shared = type(f"Routed{cls.__name__}", (cls,), {
        "tables": property(lambda self: tables, lambda self, value: None),
        "queries": property(lambda self: queries, lambda self, value: None)})
    return shared(**kwargs)


def _perf_seconds(fn: Callable):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


class Router(TupleInterface):
    """The routing operator of 003 §4.5 over select-join plans (module docstring).

    ``plans``: names from :data:`PLANS` (default :data:`PAPER_PLANS`); ``mode``: :data:`DYNAMIC`, :data:`OPT`
    or a plan name; ``coefficients``: a :class:`CostModel` (default: the calibration file, else builtin);
    ``buckets`` / ``domains``: the histograms' buckets and domains (``{"A": .., "B": .., "C": ..}``, default
    [0, 10000] each, Table 4.1); ``ks_histogram``: ``"eqw"`` or ``"ssi"``; ``recent``: choices kept;
    ``clock``: the OPT mode's timer; ``plan_options``: keyword arguments per plan name (e.g.
    ``{"SJ-Hotspot": {"alpha": 0.01}}``); ``decision``: ``"table"`` (DYNAMIC reads its pick from the decision
    table, refreshed once more than ``refresh_fraction`` × (|R| + |S| + |Q|) changes, at least
    ``refresh_min``, happened since the last refresh) or ``"formula"`` (every formula evaluated per tuple).
    Same interface as a :class:`SelectJoinAlgorithm`."""

    def __init__(self, plans: Iterable[str] = PAPER_PLANS, *, mode: str = DYNAMIC, coefficients: CostModel | None = None,
                 buckets: int = 100, domains: dict | None = None, ks_histogram: str = "eqw", recent: int = 1000,
                 clock: Callable[[], float] = time.perf_counter, plan_options: dict | None = None,
                 decision: str = "table", refresh_fraction: float = 0.05, refresh_min: int = 256):
        self.plan_names = tuple(plans)
        for p in self.plan_names:
            if p not in PLANS:
                raise ValueError(f"unknown plan {p!r}; known: {sorted(PLANS)}")
        if not self.plan_names:
            raise ValueError("a router needs at least one plan")
        self.tables = SelectJoinTables()
        self.queries = _Queries()
        opts = plan_options or {}
        self.plans = {p: _bound(PLANS[p], self.tables, self.queries, **opts.get(p, {})) for p in self.plan_names}
        self.model = coefficients if coefficients is not None else CostModel.load_or_builtin()
        missing = [p for p in self.plan_names if p not in self.model.coefficients]
        if missing:
            raise ValueError(f"no cost coefficients for {missing}")
        self.mode = mode
        self.set_mode(mode)
        if ks_histogram not in ("eqw", "ssi"):
            raise ValueError("ks_histogram must be 'eqw' or 'ssi'")
        self.ks_histogram = ks_histogram
        self.set_decision(decision)
        self.refresh_fraction = float(refresh_fraction)
        self.refresh_min = int(refresh_min)
        self.buckets = int(buckets)
        dom = {"A": (0.0, 10_000.0), "B": (0.0, 10_000.0), "C": (0.0, 10_000.0), **(domains or {})}
        self.domains = dom
        self.clock = clock
        # kj: per table, the histogram of its join values (read for tuples of the other table)
        self.join_hist = [JoinValueHistogram(buckets, dom["B"]), JoinValueHistogram(buckets, dom["B"])]
        # ks: per direction, over the own-side ranges (R.A for R tuples, S.C for S tuples)
        self.range_hist = [EqualWidthHistogram(buckets, dom["A"]), EqualWidthHistogram(buckets, dom["C"])]
        self._ssi_hist: list = [None, None]
        self._hot_cache: list = [None, None]
        self._ssi_cache: list = [None, None]
        self.decisions: Counter = Counter()
        self.recent: deque = deque(maxlen=recent)
        self.events = 0
        self.oracle_seconds = 0.0
        self.opt_agreements = 0
        # the decision table (003 §4.5 routing made a lookup): per direction, the flat row-major list of plan
        # names over (kj row, ks column); rebuilt lazily once ``changes`` passes ``_refresh_at``
        self._plan_order = tuple(self.plan_names)
        self.decision_tables: list = [None, None]
        self.changes = 0  # data / query changes since the last refresh
        self._refresh_at = 0  # so the first routed tuple builds the table
        self.table_refreshes = 0
        self._partner_runs = (self.tables.S.runs, self.tables.R.runs)  # by direction (never rebound)

    # ---- configuration ----------------------------------------------------------------------------------------
    def set_mode(self, mode: str) -> None:
        if mode not in (DYNAMIC, OPT) and mode not in self.plan_names:
            raise ValueError(f"mode must be DYNAMIC, OPT or one of {self.plan_names}, not {mode!r}")
        self.mode = mode

    def set_decision(self, decision: str) -> None:
        """``"table"``: DYNAMIC reads the decision table; ``"formula"``: it evaluates every formula per tuple."""
        if decision not in ("table", "formula"):
            raise ValueError("decision must be 'table' or 'formula'")
        self.decision = decision
        self._by_table = decision == "table" and len(self.plan_names) > 1

    def reset_stats(self) -> None:
        self.decisions.clear()
        self.recent.clear()
        self.events = 0
        self.oracle_seconds = 0.0
        self.opt_agreements = 0

    # ---- queries: to every plan and to the statistics ---------------------------------------------------------
    def __len__(self) -> int:
        return len(self.queries)

    def add_query(self, qid: Hashable, a_lo=-math.inf, a_hi=math.inf, c_lo=-math.inf, c_hi=math.inf) -> None:
        bounds = self.queries.validate(qid, a_lo, a_hi, c_lo, c_hi)
        slot = self.queries.add(qid, *bounds)
        for plan in self.plans.values():
            plan._index_add(slot)
        self.range_hist[R_SIDE].add(bounds[0], bounds[1])
        self.range_hist[S_SIDE].add(bounds[2], bounds[3])
        self._queries_changed()
        self.changes += 1

    def add_queries(self, rows: Iterable) -> None:
        """Register many ``(qid, a_lo, a_hi, c_lo, c_hi)`` rows (all validated first)."""
        seen, checked = set(), []
        for qid, *bounds in rows:
            if qid in seen:
                raise DuplicateSubscription(f"query id {qid!r} appears twice")
            seen.add(qid)
            checked.append((qid, *self.queries.validate(qid, *bounds)))
        slots = np.fromiter((self.queries.add(*row) for row in checked), dtype=np.int64, count=len(checked))
        for plan in self.plans.values():
            plan._index_add_many(slots)
        self._rebuild_range_hists()
        self.changes += len(checked)

    def remove_query(self, qid: Hashable) -> None:
        slot = self.queries.remove(qid)
        for plan in self.plans.values():
            plan._index_remove(slot)
        q = self.queries
        self.range_hist[R_SIDE].remove(q.lo[A, slot], q.hi[A, slot])
        self.range_hist[S_SIDE].remove(q.lo[C, slot], q.hi[C, slot])
        self._queries_changed()
        self.changes += 1

    def query(self, qid):
        return next(iter(self.plans.values())).query(qid)

    def _queries_changed(self) -> None:
        self._ssi_hist = [None, None]
        self._hot_cache = [None, None]
        self._ssi_cache = [None, None]

    def _rebuild_range_hists(self) -> None:
        q = self.queries
        live = q.live()
        for d, (coord, dom) in enumerate(((A, "A"), (C, "C"))):
            lo, hi = q.lo[coord][live], q.hi[coord][live]
            h = EqualWidthHistogram(self.buckets, self.domains[dom])
            if live.size:
                h = EqualWidthHistogram.from_intervals(list(zip(lo.tolist(), hi.tolist())), self.buckets,
                                                       self.domains[dom])
            self.range_hist[d] = h
        self._queries_changed()

    # ---- data -------------------------------------------------------------------------------------------------
    def load(self, r_rows: Iterable = (), s_rows: Iterable = ()) -> None:
        """Bulk-load ``(key, a, b)`` R rows and ``(key, b, c)`` S rows with no events (no query is notified)."""
        before = len(self.tables.R) + len(self.tables.S)
        for key, a, b in r_rows:
            self.tables.R.insert(key, _value(a), _join_value(b))
        for key, b, c in s_rows:
            self.tables.S.insert(key, _value(c), _join_value(b))
        self.changes += len(self.tables.R) + len(self.tables.S) - before
        for d in (R_SIDE, S_SIDE):
            self.join_hist[d] = JoinValueHistogram.from_runs(self.tables.table(d).runs, self.buckets,
                                                             self.domains["B"])

    # insert_r / delete_r / insert_s / delete_s / probe_r / probe_s: select_joins.TupleInterface
    def _matches(self, d: int, x: float, b) -> Matches:
        """The matches of a tuple through the routed plan, tables unchanged."""
        return self._route(d, x, b)[1]

    def update(self, side: str, insert: bool, key: Hashable, x=None, b=None) -> None:
        """Apply an update (``side`` 'R' / 'S'; a delete needs only the key) without finding its matches:
        the reformulated mode, where the network matches the messages (000 §4), keeps the tables and the
        statistics current but routes nothing."""
        self._process(R_SIDE if side == "R" else S_SIDE, insert, key, x, b, route=False)

    def _process(self, d: int, insert: bool, key, x, b, *, route: bool = True) -> dict:
        table = self.tables.table(d)
        try:
            if insert:
                x = _value(x, "R.a" if d == R_SIDE else "S.c")
                b = _join_value(b)
                if key in table.rows:
                    raise BadUpdate(f"{table.name}: duplicate key {key!r}")
            else:
                x, b = table.lookup(key)
        except TypeError:
            raise BadUpdate(f"{table.name}: key {key!r} is not hashable") from None
        plan, m = self._route(d, x, b) if route else (None, None)
        runs = table.runs
        if insert:
            new_value = b not in runs
            table.insert(key, x, b)
            self.join_hist[d].add(b, new_value)
        else:
            table.delete(key)
            self.join_hist[d].remove(b, b not in runs)
        self.changes += 1
        return plan._emit(d, key, m) if route else {}

    # ---- statistics -------------------------------------------------------------------------------------------
    def _ks(self, d: int, x: float) -> float:
        if self.ks_histogram == "ssi":
            h = self._ssi_hist[d]
            if h is None:
                q = self.queries
                live = q.live()
                coord = A if d == R_SIDE else C
                lo, hi = q.lo[coord][live], q.hi[coord][live]
                if not live.size:
                    return 0.0
                dom = self.domains["A" if d == R_SIDE else "C"]
                h = self._ssi_hist[d] = SSIHistogram(list(zip(np.clip(lo, *dom).tolist(), np.clip(hi, *dom).tolist())),
                                                     self.buckets, domain=dom)
            return float(h.estimate(x))
        h = self.range_hist[d]
        d0, d1 = h.domain
        if not d0 <= x <= d1:
            return 0.0
        j = min(int((x - d0) / (d1 - d0) * h.buckets), h.buckets - 1)
        return float(h.values[j])

    def _hot_part(self, d: int) -> tuple[float, int, int]:
        """(Σ√|Q^H_i|, |Q^C|, g) of the hotspot plan in direction d, cached until the queries change."""
        plan = self.plans.get("SJ-Hotspot")
        if plan is None:
            return 0.0, len(self.queries), 0
        cached = self._hot_cache[d]
        if cached is None:
            sizes = [len(g.members) for g in plan.trackers[d].hotspots()]
            hot = sum(sizes)
            cached = self._hot_cache[d] = (sum(math.sqrt(n) for n in sizes), len(self.queries) - hot, len(sizes))
        return cached

    def _ssi_part(self, d: int) -> tuple[int, float]:
        plan = self.plans.get("SJ-SSI")
        if plan is None:
            return 0, 0.0
        cached = self._ssi_cache[d]
        if cached is None:
            part = plan.partitions[d]
            sizes = [part.group_size(g.gid) for g in part.groups()]
            cached = self._ssi_cache[d] = (len(sizes), sum(math.sqrt(n) for n in sizes))
        return cached

    def statistics(self, d: int, x: float, b, *, exact: bool = False) -> EventStats:
        """The estimates the cost formulas read for a tuple with own value x and join value b arriving on side d
        (``exact``: the true kj, ks and k's instead of the histograms — for calibration and tests)."""
        partner = self.tables.partner(d)
        run = partner.runs.get(b)
        if exact or run is None:
            # no run: kj = 0 exactly, read off the join index (the O(1) lookup f_DS every plan starts with)
            kj = float(len(run)) if run is not None else 0.0
        else:
            kj = self.join_hist[1 - d].estimate(b)
            if kj is None:  # a non-numeric join value: the join index gives the exact count in O(1)
                kj = float(len(run))
        n = len(self.queries)
        hot_sqrt, cold, groups = self._hot_part(d)
        all_groups, all_sqrt = self._ssi_part(d)
        if exact:
            q = self.queries
            live = q.live()
            coord = A if d == R_SIDE else C
            inside = (q.lo[coord][live] <= x) & (x <= q.hi[coord][live])
            ks = float(inside.sum())
            hp = self.plans.get("SJ-Hotspot")
            cold_ks = float(hp.scattered_index[d].stab_count(x)) if hp is not None else ks
        else:
            ks = self._ks(d, x)
            cold_ks = ks * cold / n if n else 0.0
        return EventStats(len(partner), n, kj, ks, hot_sqrt, cold, cold_ks, groups, all_groups, all_sqrt)

    def estimate(self, d: int, x: float, b, *, exact: bool = False) -> dict[str, float]:
        """Estimated µs per plan for one tuple (003 §4.5.1)."""
        s = self.statistics(d, x, b, exact=exact)
        return {p: self.model.cost(p, s) for p in self.plan_names}

    def choose(self, d: int, x: float, b) -> str:
        """DYNAMIC's pick by the formulas: the plan with the lowest estimated cost (ties: the order of
        ``plans``)."""
        if len(self.plan_names) == 1:
            return self.plan_names[0]
        costs = self.estimate(d, x, b)
        return min(self.plan_names, key=costs.__getitem__)

    # ---- the decision table ------------------------------------------------------------------------------------
    # 003 §4.5 keeps the routing overhead "minimal compared with the cost-saving potential".  The estimates
    # are constant per histogram bucket (kj per bucket of the partner's join histogram, ks per bucket of the
    # own-side range histogram, the rest per state of the tables and queries), so the argmin of the
    # formulas is too: it is precomputed for every (kj row, ks column) cell and a tuple's pick is two bucket
    # computations and a list index.  Rows: the partner's join-value buckets, then one row for "no partner
    # tuple has this join value" (kj = 0 exactly: the join index lookup every plan does first).  Columns: the
    # ks buckets, then one for a value outside the domain (ks = 0).
    def refresh_decision_table(self) -> None:
        """Recompute both directions' decision tables from the current statistics (done lazily by
        :meth:`_route` once the data and queries drifted by ``refresh_fraction``)."""
        for d in (R_SIDE, S_SIDE):
            self.decision_tables[d] = self._build_decision_table(d)
        self.changes = 0
        size = len(self.tables.R) + len(self.tables.S) + len(self.queries)
        self._refresh_at = max(self.refresh_min, self.refresh_fraction * size)
        self.table_refreshes += 1

    def _ks_columns(self, d: int) -> tuple[list[float], tuple[float, float], int]:
        """ks per column (last: outside the domain), the ks grid's domain and buckets."""
        if self.ks_histogram == "eqw":
            h = self.range_hist[d]
            return h.values.tolist() + [0.0], h.domain, h.buckets
        # the SSI histogram's buckets are not a grid: read it at the midpoints of an equal-width grid
        d0, d1 = self.domains["A" if d == R_SIDE else "C"]
        k = self.buckets
        width = (d1 - d0) / k
        return [self._ks(d, d0 + (j + 0.5) * width) for j in range(k)] + [0.0], (float(d0), float(d1)), k

    def _build_decision_table(self, d: int) -> tuple:
        jh = self.join_hist[1 - d]
        kj_rows = [jh.count[j] / jh.distinct[j] if jh.distinct[j] else 0.0 for j in range(jh.buckets)] + [0.0]
        ks_cols, (x0, x1), x_buckets = self._ks_columns(d)
        kj = np.array(kj_rows).reshape(-1, 1)
        ks = np.array(ks_cols).reshape(1, -1)
        lgk = np.array([_lg(v) for v in kj_rows]).reshape(-1, 1)
        joins = (kj > 0).astype(np.float64)
        n = len(self.queries)
        hot_sqrt, cold, groups = self._hot_part(d)
        all_groups, all_sqrt = self._ssi_part(d)
        cold_ks = ks * cold / n if n else np.zeros_like(ks)  # as statistics(): k's = ks·|Q^C|/|Q|
        s = EventStats(len(self.tables.partner(d)), n, kj, ks, hot_sqrt, cold, cold_ks, groups, all_groups,
                       all_sqrt)
        shape = (kj.size, ks.size)
        costs = np.stack([np.broadcast_to(np.asarray(self.model.cost_grid(p, s, lgk, joins), dtype=np.float64),
                                          shape) for p in self._plan_order])
        pick = costs.argmin(axis=0)  # first minimum: ties go to the order of ``plans``, as choose()
        names = [self._plan_order[i] for i in pick.ravel().tolist()]
        return (names, ks.size, jh.lo, jh.width, jh.buckets, x0, x1, x_buckets)

    def table_choice(self, d: int, x: float, b) -> str:
        """DYNAMIC's pick from the decision table (refreshed first if the statistics drifted)."""
        if self.changes >= self._refresh_at:
            self.refresh_decision_table()
        names, n_cols, b0, b_width, b_buckets, x0, x1, x_buckets = self.decision_tables[d]
        if self._partner_runs[d].get(b) is None:
            row = b_buckets
        else:
            tb = type(b)
            if tb is int or tb is float:  # JoinValueHistogram._bucket without its type checks
                row = int((b - b0) // b_width) if b_width > 0 else 0
                row = 0 if row < 0 else (b_buckets - 1 if row >= b_buckets else row)
            else:
                row = self.join_hist[1 - d]._bucket(b)
                if row is None:  # a non-numeric join value: no bucket, the formulas with the exact kj
                    return self.choose(d, x, b)
        if x0 <= x <= x1:  # the bucket of _ks
            col = int((x - x0) / (x1 - x0) * x_buckets)
            if col >= x_buckets:
                col = x_buckets - 1
        else:
            col = x_buckets
        return names[row * n_cols + col]

    # ---- routing ----------------------------------------------------------------------------------------------
    def _route(self, d: int, x: float, b) -> tuple[SelectJoinAlgorithm, Matches]:
        mode = self.mode
        self.events += 1
        if mode == DYNAMIC:
            name = self.table_choice(d, x, b) if self._by_table else self.choose(d, x, b)
            plan = self.plans[name]
            m = plan._probe(d, x, b)
        elif mode == OPT:
            dynamic_pick = self.table_choice(d, x, b) if self._by_table else self.choose(d, x, b)
            best = None
            for pname, p in self.plans.items():
                t0 = self.clock()
                pm = p._probe(d, x, b)
                dt = self.clock() - t0
                if best is None or dt < best[0]:
                    best = (dt, pname, p, pm)
            dt, name, plan, m = best
            self.oracle_seconds += dt
            self.opt_agreements += dynamic_pick == name
        else:
            name = mode
            plan = self.plans[name]
            m = plan._probe(d, x, b)
        self.decisions[name] += 1
        self.recent.append((_SIDE_LABEL[d], name))
        return plan, m

    # ---- reporting --------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        out = {"algorithm": "Router", "mode": self.mode, "plans": list(self.plan_names),
               "queries": len(self.queries), "R": len(self.tables.R), "S": len(self.tables.S),
               "events": self.events, "decisions": dict(self.decisions),
               "recent": list(self.recent)[-20:],
               "hot_groups": tuple(self._hot_part(d)[2] for d in (R_SIDE, S_SIDE)),
               "coefficients": self.model.meta.get("source", "calibrated"),
               "decision": self.decision, "table_refreshes": self.table_refreshes,
               "changes_since_refresh": self.changes}
        if self.mode == OPT and self.events:
            out["oracle_seconds"] = self.oracle_seconds
            out["dynamic_agrees_with_opt"] = self.opt_agreements / self.events
        out["plan_counters"] = {p: dict(plan.counters) for p, plan in self.plans.items()}
        return out

    def explain(self) -> str:
        s = self.stats()
        total = sum(self.decisions.values()) or 1
        share = ", ".join(f"{p} {self.decisions.get(p, 0)} ({self.decisions.get(p, 0) / total:.0%})"
                          for p in self.plan_names)
        recent = " ".join(f"{side}:{p}" for side, p in list(self.recent)[-10:])
        lines = [f"Router[{self.mode}] over {len(self.plan_names)} plans, {s['queries']} queries, "
                 f"|R|={s['R']} |S|={s['S']}, hot groups (R, S) = {s['hot_groups']}",
                 f"  decided by: {self.decision} ({self.table_refreshes} table refreshes)",
                 f"  decisions: {share}",
                 f"  recent: {recent or '-'}"]
        if "dynamic_agrees_with_opt" in s:
            lines.append(f"  DYNAMIC agrees with OPT on {s['dynamic_agrees_with_opt']:.0%} of tuples")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Synthetic workload (003 Table 4.1) and calibration (003 §4.6.7)
# --------------------------------------------------------------------------------------------------------------
DOMAIN = 10_000


def synthetic_workload(rng: np.random.Generator, n_tuples: int, n_queries: int, *, a_length: float = 1000.0,
                       c_length: float = 1000.0):
    """Tables and queries of 003 Table 4.1's shape (the OCR lost μ / σ; these are bench/select_joins_smoke.py's):
    R.A, S.C ~ Uni(0, 10000), R.B ~ Uni{0..10000}, S.B ~ round(N(5000, 1000)); query A midpoints N(5000, 1500),
    C midpoints Uni(0, 10000), lengths |N(len, len/5)|.  Returns (r_rows, s_rows, query_rows)."""
    ra = rng.uniform(0, DOMAIN, n_tuples)
    rb = rng.integers(0, DOMAIN + 1, n_tuples)
    sb = np.clip(np.rint(rng.normal(5000, 1000, n_tuples)), 0, DOMAIN).astype(np.int64)
    sc = rng.uniform(0, DOMAIN, n_tuples)
    amid = rng.normal(5000, 1500, n_queries)
    alen = np.abs(rng.normal(a_length, a_length / 5, n_queries))
    cmid = rng.uniform(0, DOMAIN, n_queries)
    clen = np.abs(rng.normal(c_length, c_length / 5, n_queries))
    r_rows = [(("r", i), a, b) for i, (a, b) in enumerate(zip(ra.tolist(), rb.tolist()))]
    s_rows = [(("s", i), b, c) for i, (b, c) in enumerate(zip(sb.tolist(), sc.tolist()))]
    q_rows = [(i, a - la / 2, a + la / 2, c - lc / 2, c + lc / 2)
              for i, (a, la, c, lc) in enumerate(zip(amid.tolist(), alen.tolist(), cmid.tolist(), clen.tolist()))]
    return r_rows, s_rows, q_rows


def calibration_events(rng: np.random.Generator, n: int) -> list[tuple[float, int]]:
    """Incoming R tuples spread over kj and ks: a and b uniform over the domain (kj runs from 0 in the tails of
    S.B to its peak, ks from 0 to the peak of the A midpoints), as the §4.6.7 sweeps of Figures 4.16–4.19."""
    return list(zip(rng.uniform(0, DOMAIN, n).tolist(), rng.integers(0, DOMAIN + 1, n).tolist()))


def calibrate(*, sizes: Sequence[tuple[int, int]] = ((20_000, 2_000), (50_000, 5_000), (10_000, 20_000)),
              events: int = 300, plans: Iterable[str] = tuple(PLANS), seed: int = 0, repeats: int = 3,
              a_lengths: Sequence[float] = (1000.0, 200.0),
              measure: Callable[[str, list, Callable], float] | None = None, plan_options: dict | None = None,
              progress: Callable[[str], None] | None = None) -> CostModel:
    """Fit every plan's coefficients on this machine (003 §4.6.7, Table 4.2).

    For each (tuples, queries) in ``sizes`` and each mean R.A range length in ``a_lengths`` (so ks varies
    beyond what one workload gives), build a :class:`Router` over a :func:`synthetic_workload`, then for each
    of ``events`` incoming R tuples and each plan record the cost-formula terms (exact kj, ks, k's: the fit
    should not absorb histogram errors) and the plan's time for ``probe_r`` (minimum of ``repeats`` runs, in
    µs); then least squares per plan.  ``measure(plan, terms, run) -> µs`` replaces the timing (tests inject a
    fake timer through it); ``plan_options`` as :class:`Router`'s.  Save the result with :meth:`CostModel.save`."""
    plans = tuple(plans)
    rng = np.random.default_rng(seed)
    samples = {p: ([], []) for p in plans}
    if measure is None:
        def measure(plan, terms, run):
            best = math.inf
            for _ in range(repeats):
                _, dt = _perf_seconds(run)
                best = min(best, dt)
            return best * 1e6
    t_start = time.perf_counter()
    for n_tuples, n_queries in sizes:
        for a_length in a_lengths:
            r_rows, s_rows, q_rows = synthetic_workload(rng, n_tuples, n_queries, a_length=a_length)
            router = Router(plans, coefficients=CostModel.builtin(), plan_options=plan_options)
            router.load(r_rows, s_rows)
            router.add_queries(q_rows)
            evs = calibration_events(rng, events)
            for p in router.plans.values():  # build the lazy layouts outside the timings
                p._probe(R_SIDE, *evs[0])
            for a, b in evs:
                s = router.statistics(R_SIDE, a, b, exact=True)
                for name in plans:
                    plan = router.plans[name]
                    terms = features(name, s)
                    samples[name][0].append(terms)
                    samples[name][1].append(measure(name, terms, lambda: plan._probe(R_SIDE, a, b)))
            if progress:
                progress(f"{n_tuples:,} tuples x {n_queries:,} queries (A length {a_length:g}): {events} events "
                         f"x {len(plans)} plans, {time.perf_counter() - t_start:.1f} s")
    meta = {"source": "calibrate", "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "sizes": [list(s) for s in sizes], "events": events, "repeats": repeats,
            "a_lengths": list(a_lengths), "seed": seed}
    return fit(samples, meta)
