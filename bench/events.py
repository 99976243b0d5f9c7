#!/usr/bin/env python
"""Event-query benchmark (issues 6 and 18, 004 §4): the batch executor vs the grouped NFA (per event) vs the
indexed NFA vs the naive NFA vs Spark SQL, on a stock stream with the S2/S3/S4-like query families of 004
Table 1, at 1,000 to 1,000,000 queries, in one run::

    python bench/events.py            # full run: 1,000 -> 1,000,000 queries, 20 s per cell (~40 min, 2 cores)
    python bench/events.py --quick    # 1,000 -> 10,000 queries, 6 s per cell (~4 min)
    python bench/events.py --no-spark # skip the Spark SQL baseline (no JVM)
    python bench/events.py --ablations  # also the indexed NFA with one optimisation off (issue 6's table)
    python bench/events.py --out DIR  # write events.md / events.png elsewhere (default docs/benchmarks/)
    python bench/events.py --engine-registration [--sizes 100000]  # that row alone (no cells, no file)

Writes ``docs/benchmarks/events.md`` (targets table first) and ``docs/benchmarks/events.png``.

**Stream.** A seeded random walk over 300 symbols ``S000..S299``: which symbol each event is follows a Zipf
popularity (weight 1/rank, so S000 is 16% of the events and S299 0.05%); each symbol's log price is a
mean-reverting walk (step = 1% × a Student-t with 4 degrees of freedom scaled to unit variance, pull 2%
a step towards the symbol's base level, base prices lognormal around 50); prices rounded to cents;
volumes lognormal (median ~665).  Events ``{"Name", "Price", "Volume", "t0", "t1"}`` with ``t0 = t1 =``
position (one tick per event).  A *history* of 100,000 earlier events (not fed to the engines) gives the
per-symbol price quantiles the thresholds are drawn from, as a user would set them from past prices.

**Queries** (one third of each family; symbols A, B drawn from the same Zipf popularity as the events; every
query has its own constants), written as CEL templates with ``:name`` parameters (issue 18 item 2):

* S2-like: ``SELECT * FROM FILTER{Price < :q}(FILTER{Name = :a AND Price > :p}(Stock) NEXT{$2.Name = :b}
  Stock)``, p = A's history quantile at U(0.97, 0.999), q = B's at U(0.005, 0.05), both to cents;
* S3-like: ``SELECT * FROM FILTER{Price > :r * Price_1}(FILTER{Name = :a}(Stock) NEXT{$1.Name = $2.Name}
  Stock)``, r ~ U(1.04, 1.25) (4 decimals);
* S4-like: ``SELECT * FROM FILTER{DUR >= :d}(FILTER{Name = :a}(Stock) FOLD{$2.Name = $.Name, $2.Price >
  $.Price,} Stock)``, d = U(15, 25) × A's mean gap in ticks (1 / its popularity).

Query sets are nested: the n-query set is the first n of one 1,000,000-query list (the quantiles are
interpolated linearly between the sorted history prices, as ``np.quantile``).

**Executors** (``EXECUTORS``): ``BatchEngine()`` ("batch executor", ``operators/events/batch.py``, the
default executor since issue 18) fed micro-batches of ``BATCH`` events as Arrow tables, its matches built as
one Arrow table of match rows per batch (``process_table``, the runtime's output); ``FamilyEngine()``
("grouped NFA", the default before), ``NFAEngine()`` with every optimisation ("indexed NFA") and with all
off ("naive NFA": every instance and every start guard checked on every event, no expiry; DESIGN §3's
baseline -- the same executor with its indexes off, so the outputs are comparable match for match), the
last three fed one event per ``process()`` call, their matches ``nfa.Match`` objects.  ``--ablations`` adds
the indexed NFA with one optimisation off.  Executors slower than useful at a size are skipped there and
the table says so (``MAX_QUERIES``; and any executor that timed fewer than ``MIN_EVENTS`` events at a size).

**Measure.** Each (executor, queries) cell runs in a fresh forked child: register the queries (timed:
queries per CPU-second, wall clock beside; RSS after registration / queries = memory per query), then feed
the fixed event sequence: a warm-up (the first 2,000 events; untimed), then a timed phase until the budget
(20 s of wall clock full, 6 s quick) or the end of the stream.  **events/s = events per CPU-second of the child process (one core's
work), the median over the timed phase's 3 equal-time windows**; the wall-clock rate of the same windows is
reported beside it (lower when other processes share the 2 cores, which they often do on this machine).
For the batch executor, events/s **excluding output** divides by the CPU seconds minus those spent
building the output table (``BatchEngine.output_seconds``: Arrow columns of the matches, the query names,
the released per-match rows of ticks split across batches).  Work per event from ``stats()`` over the timed
phase (the batch executor: (instance, event) pairs advanced and instances started).

**Registration.** The batch executor registers each family's rows with ``bind_event_template`` +
``BatchEngine.register_template`` (bulk: the template parsed once, each family analysed once; timed
together).  The other executors register ASTs one at a time with ``register()`` (the ASTs are built
beforehand from the same templates, untimed; issue 6 parsed texts: the rate of ``parse_event_query`` and of
building the ASTs from the templates are reported apart).

**Registration through the engine** (issue 18 item 2): ``Engine.register_event_queries(template, params,
names=...)`` -- one call per family, a fresh ``Engine()`` in a forked child (no Spark job: registration plans the
event classes and writes the replicas' bases, which hold each family's rows as one ``TemplateRows``), the
grammar loaded beforehand; CPU and wall seconds for the three calls together; every query then listed by
``event_queries()``.  It checks the first row of each family as ``CREATE EVENT QUERY`` does, validates every
row, writes one journal record per call and plans the classes -- the engine's whole path, beside the
executor's bulk registration above.

**Checks.** At each size every executor is compared with the one that processed the most events (the
reference), on the events both processed: matches per query (t1 below that prefix) must be equal, else the
differing queries are listed with the first differing t1.  30 queries (per family the 10 with the most
matches in the first 4,000 events in the cells, plus 4 looser S4-like queries so that FOLD has matches
there) over those 4,000 events go through the reference interpreter (``cayuga_reference.evaluate_queries``)
and the batch executor (batches of 512), ``FamilyEngine`` and ``NFAEngine``, compared output event for
output event.

**Spark SQL** (what a user would do without sparksub, for the S3 family): ``LAG(Price) OVER (PARTITION BY
Name ORDER BY t1)`` over a batch of events, joined on ``Name = A`` with a table of the S3 queries'
``(qid, A, r)``, ``Price > r * Price_1``, matches counted per query; local[2] SparkSession (both cores);
events/s = batch / median of 3 timed runs after a warm-up; its per-query counts are checked against the
executors' S3 matches on the same events.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the executors are measured on one core

import argparse
import gc
import multiprocessing as mp
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the reference interpreter is a test oracle (tests/oracles/): the bench checks the executors against it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "oracles"))
from common import fmt_num, load_avg, log, machine, md_table  # noqa: E402

from sparksub.grammar.events import parse_event_query  # noqa: E402
from sparksub.operators.events.batch import BatchEngine  # noqa: E402
from sparksub.operators.events.bulk import bind_event_template  # noqa: E402
from sparksub.operators.events.families import FamilyEngine  # noqa: E402
from sparksub.operators.events.nfa import NFAEngine  # noqa: E402
from sparksub.operators.events.partitions import MatchLayout, match_layout  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"

# ---- workload parameters
N_SYMBOLS, ZIPF_S = 300, 1.0
SIGMA, T_DF, KAPPA = 0.01, 4, 0.02          # walk: step SIGMA * t(T_DF) (unit variance), pull KAPPA to base
N_HISTORY = 100_000
SEED_STREAM, SEED_QUERIES = 1, 2
FAMILIES = ("S2", "S3", "S4")
S2_P, S2_Q = (0.97, 0.999), (0.005, 0.05)   # quantile ranges of A's / B's history prices
S3_R = (1.04, 1.25)
S4_K = (15, 25)                             # d = k × A's mean gap (ticks)
TEMPLATES = {
    "S2": "SELECT * FROM FILTER{Price < :q}(FILTER{Name = :a AND Price > :p}(Stock) NEXT{$2.Name = :b} Stock)",
    "S3": "SELECT * FROM FILTER{Price > :r * Price_1}(FILTER{Name = :a}(Stock) NEXT{$1.Name = $2.Name} Stock)",
    "S4": "SELECT * FROM FILTER{DUR >= :d}(FILTER{Name = :a}(Stock) FOLD{$2.Name = $.Name, $2.Price > $.Price,} Stock)",
}

# ---- measurement parameters
WARM_EVENTS = 2_000
WINDOWS = 3
MIN_EVENTS = 30                             # fewer timed events at a size: skipped at the larger sizes
CHECKPOINT = 16                             # events between clock readings (per-event executors)
BATCH = 4_096                               # events per micro-batch (batch executor)

EXECUTORS = {
    "batch executor": ("batch", lambda: BatchEngine()),
    "grouped NFA": ("ast", lambda: FamilyEngine()),
    "indexed NFA": ("ast", lambda: NFAEngine()),
    "naive NFA": ("ast", lambda: NFAEngine(index_static=False, index_instances=False, share_prefixes=False,
                                           expire=False)),
}
ABLATIONS = {
    "no instance index": ("ast", lambda: NFAEngine(index_instances=False)),
    "no state merging": ("ast", lambda: NFAEngine(share_prefixes=False)),
    "no static index": ("ast", lambda: NFAEngine(index_static=False)),
}
#: Sizes above which an executor is not run (issue 6's run: at 100,000 queries the indexed NFA made 162
#: events/s after registering for 52 s, the naive NFA 4 events/s; the grouped NFA needs a million ASTs).
MAX_QUERIES = {"indexed NFA": 100_000, "naive NFA": 100_000, "no instance index": 100_000,
               "no state merging": 10_000, "no static index": 100_000}
OURS = "batch executor"                     # the candidate for the targets
TODAY = "grouped NFA"                       # the executor it replaces (the figures beside)


# ------------------------------------------------------------------------------------------------ workload
def popularity(n: int = N_SYMBOLS, s: float = ZIPF_S) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def make_stream(n_events: int, n_history: int = N_HISTORY, seed: int = SEED_STREAM):
    """(events, names, popularity, history prices per name)."""
    rng = np.random.default_rng(seed)
    w = popularity()
    names = [f"S{i:03d}" for i in range(N_SYMBOLS)]
    base = rng.normal(np.log(50.0), 0.8, N_SYMBOLS)
    x, base = base.tolist(), base.tolist()
    n = n_history + n_events
    who = rng.choice(N_SYMBOLS, n, p=w).tolist()
    steps = (SIGMA * rng.standard_t(T_DF, n) / np.sqrt(T_DF / (T_DF - 2))).tolist()
    vol = np.maximum(1, np.round(rng.lognormal(6.5, 1.4, n))).astype(int).tolist()
    logp = [0.0] * n
    for i in range(n):
        k = who[i]
        x[k] = v = x[k] + steps[i] - KAPPA * (x[k] - base[k])
        logp[i] = v
    prices = np.round(np.exp(np.array(logp)), 2).tolist()
    hist: dict[str, list] = {}
    for i in range(n_history):
        hist.setdefault(names[who[i]], []).append(prices[i])
    events = [{"Name": names[who[i]], "Price": prices[i], "Volume": vol[i], "t0": j, "t1": j}
              for j, i in enumerate(range(n_history, n))]
    return events, names, w, {k: np.array(v) for k, v in hist.items()}


def _quantiles(hist: dict, names, sym: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.quantile(hist[names[s]], q)`` (linear interpolation) for each (symbol, q), vectorised per symbol."""
    out = np.empty(len(sym))
    for s in np.unique(sym).tolist():
        a = np.sort(hist[names[s]])
        sel = np.flatnonzero(sym == s)
        h = (len(a) - 1) * q[sel]
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, len(a) - 1)
        out[sel] = a[lo] + (h - lo) * (a[hi] - a[lo])
    return out


class Workload:
    """n queries, a third of each family, as template parameters: ``names`` (global order), ``family`` (index
    into FAMILIES per query), per family the parameter columns and the global indexes of its rows."""

    def __init__(self, n: int, names, w, hist, seed: int = SEED_QUERIES):
        rng = np.random.default_rng(seed)
        fam = rng.integers(0, 3, n)
        A = rng.choice(len(names), n, p=w)
        B = rng.choice(len(names), n, p=w)
        u, v = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
        self.family = fam
        self.names = [f"{FAMILIES[f]}_{i:07d}" for i, f in enumerate(fam.tolist())]
        self.rows = {f: np.flatnonzero(fam == k) for k, f in enumerate(FAMILIES)}
        cents = lambda x: [float(f"{y:.2f}") for y in x.tolist()]  # noqa: E731 (as the texts spelled them)
        i2, i3, i4 = self.rows["S2"], self.rows["S3"], self.rows["S4"]
        sym = lambda ix: [names[k] for k in ix.tolist()]  # noqa: E731
        self.params = {
            "S2": {"q": cents(_quantiles(hist, names, B[i2], S2_Q[0] + v[i2] * (S2_Q[1] - S2_Q[0]))),
                   "a": sym(A[i2]),
                   "p": cents(_quantiles(hist, names, A[i2], S2_P[0] + u[i2] * (S2_P[1] - S2_P[0]))),
                   "b": sym(B[i2])},
            "S3": {"r": [float(f"{S3_R[0] + x * (S3_R[1] - S3_R[0]):.4f}") for x in u[i3].tolist()],
                   "a": sym(A[i3])},
            "S4": {"d": [int(round((S4_K[0] + x * (S4_K[1] - S4_K[0])) / w[a])) for x, a in
                         zip(u[i4].tolist(), A[i4].tolist())],
                   "a": sym(A[i4])},
        }
        self.row_of = np.empty(n, np.int64)         # a query's row within its family
        for f in FAMILIES:
            self.row_of[self.rows[f]] = np.arange(len(self.rows[f]))

    def prefix(self, n: int) -> dict[str, int]:
        """Per family, how many of its rows are among the first n queries."""
        return {f: int(np.searchsorted(self.rows[f], n)) for f in FAMILIES}

    def bound(self, f: str, k: int):
        """Family f's first k queries, bound (``bulk.bind_event_template``)."""
        cols = {c: v[:k] for c, v in self.params[f].items()}
        return bind_event_template(TEMPLATES[f], cols, names=[self.names[g] for g in self.rows[f][:k].tolist()])

    def asts(self, n: int, only: str | None = None) -> dict:
        """The first n queries as ASTs, in global order (family ``only``'s alone if given)."""
        k = self.prefix(n)
        bound = {f: self.bound(f, k[f]) for f in FAMILIES if only in (None, f)}
        return {self.names[g]: bound[FAMILIES[f]][int(self.row_of[g])]
                for g, f in enumerate(self.family[:n].tolist()) if FAMILIES[f] in bound}

    def s3_params(self) -> dict[str, tuple]:
        p = self.params["S3"]
        return {self.names[g]: (a, r) for g, a, r in zip(self.rows["S3"].tolist(), p["a"], p["r"])}


def family(qname: str) -> str:
    return qname[:2]


# ------------------------------------------------------------------------------------------------ one cell
def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _stat(st: dict, key: str):
    v = st.get(key)
    return v if isinstance(v, (int, float)) else None


def _windows(marks, ts, c0, extra=None) -> tuple[list, list, list]:
    """Median-able rates over WINDOWS equal-time windows of the timed phase: (wall, CPU, CPU minus
    ``extra`` seconds) events per second; ``marks``: (events, wall, cpu[, extra]) readings."""
    if len(marks) < 2:
        return [], [], []
    idx = np.array([m[0] for m in marks], float)
    tt = np.array([m[1] for m in marks]) - ts
    cc = np.array([m[2] for m in marks]) - c0
    edges = np.linspace(0, tt[-1], WINDOWS + 1)
    at = np.interp(edges, tt, idx)
    ct = np.interp(edges, tt, cc)
    rates = [(at[k + 1] - at[k]) / (edges[k + 1] - edges[k]) for k in range(WINDOWS) if edges[k + 1] > edges[k]]
    cpu = [(at[k + 1] - at[k]) / (ct[k + 1] - ct[k]) for k in range(WINDOWS) if ct[k + 1] > ct[k]]
    net = []
    if extra is not None:
        xt = np.interp(edges, tt, np.array([m[3] for m in marks]) - marks[0][3])
        net = [(at[k + 1] - at[k]) / (ct[k + 1] - ct[k] - (xt[k + 1] - xt[k])) for k in range(WINDOWS)
               if ct[k + 1] - ct[k] - (xt[k + 1] - xt[k]) > 0]
    return rates, cpu, net


def _per_event(st0: dict, st1: dict, timed: int, keys) -> dict:
    per = {}
    for key in keys:
        a, b = _stat(st0, key), _stat(st1, key)
        per[key] = (b - a) / timed if (a is not None and b is not None and timed) else None
    return per


def run_cell(make, asts: dict, events: list, budget: float) -> dict:
    """A per-event executor: register (plain ``register()``, one query at a time), warm up, time; returns
    figures and the matches as (query, t1) arrays."""
    gc.collect()
    rss0 = _rss_mb()
    eng = make()
    t, c = time.perf_counter(), time.process_time()
    for k, a in asts.items():
        eng.register(k, a)
    reg_s, reg_cpu = time.perf_counter() - t, time.process_time() - c
    rss_reg = _rss_mb()
    proc = eng.process
    mq: list = []
    mt: list = []
    n_ev = len(events)
    i = 0
    t0 = time.perf_counter()
    while i < min(WARM_EVENTS, n_ev):               # warm-up
        for m in proc("Stock", events[i]):
            mq.append(m.query)
            mt.append(m.event["t1"])
        i += 1
        if time.perf_counter() - t0 > budget / 4:
            break
    warm = i
    st0 = eng.stats()
    marks = []
    c0 = time.process_time()
    ts = time.perf_counter()
    marks.append((i, ts, c0))
    while i < n_ev:                                  # timed phase
        for m in proc("Stock", events[i]):
            mq.append(m.query)
            mt.append(m.event["t1"])
        i += 1
        if i % CHECKPOINT == 0:
            now = time.perf_counter()
            marks.append((i, now, time.process_time()))
            if now - ts >= budget:
                break
    te, ce = time.perf_counter(), time.process_time()
    if marks[-1][0] != i:
        marks.append((i, te, ce))
    for m in eng.flush():
        mq.append(m.query)
        mt.append(m.event["t1"])
    st1 = eng.stats()
    timed, wall, cpu = i - warm, te - ts, ce - c0
    rates, rates_cpu, _ = _windows(marks, ts, c0)
    return {"register_s": reg_s, "register_cpu": reg_cpu, "warm": warm, "events": i, "timed": timed,
            "wall": wall, "cpu": cpu,
            "eps_wall": statistics.median(rates) if rates else (timed / wall if wall else None),
            "eps": statistics.median(rates_cpu) if rates_cpu else (timed / cpu if cpu > 0 else None),
            "rates_cpu": rates_cpu,
            "per_event": _per_event(st0, st1, timed, ("instances_visited", "edges_evaluated", "instances_created")),
            "alive": _stat(st1, "instances_alive"), "bytes_per_instance": _stat(st1, "bytes_per_instance"),
            "rss_reg_mb": rss_reg - rss0, "rss_end_mb": _rss_mb() - rss0, "mq": mq, "mt": np.array(mt, np.int64)}


def _layout(names) -> MatchLayout:
    """The match rows' layout for these queries (every query of the three families outputs the same six
    attributes: one shared column tuple)."""
    types = [("Name", pa.string()), ("Price", pa.float64()), ("Volume", pa.int64())]
    one = match_layout({"q": {**{a + "_1": t for a, t in types}, **dict(types)}}, types)
    pairs = one.columns["q"]
    return MatchLayout(one.attributes, dict.fromkeys(names, pairs))


def run_batch_cell(make, work: Workload, n: int, table: pa.Table, budget: float) -> dict:
    """The batch executor: bulk registration (bind + register_template, timed), micro-batches of BATCH
    events as Arrow tables, matches as Arrow match rows (``process_table``)."""
    gc.collect()
    rss0 = _rss_mb()
    eng = make()
    k = work.prefix(n)
    t, c = time.perf_counter(), time.process_time()
    for f in FAMILIES:
        if k[f]:
            eng.register_template(work.bound(f, k[f]))
    reg_s, reg_cpu = time.perf_counter() - t, time.process_time() - c
    rss_reg = _rss_mb()
    layout = _layout(work.names[:n])
    schema = layout.schema()
    outs = []
    n_ev = table.num_rows
    i = min(WARM_EVENTS, n_ev)                       # warm-up: one batch
    outs.append(eng.process_table("Stock", table.slice(0, i), layout, "g", schema).select(["query", "t1"]))
    warm = i
    st0 = eng.stats()
    c0, ts = time.process_time(), time.perf_counter()
    o0 = eng.output_seconds
    marks = [(i, ts, c0, o0)]
    while i < n_ev:                                  # timed phase
        out = eng.process_table("Stock", table.slice(i, BATCH), layout, "g", schema)
        outs.append(out.select(["query", "t1"]))
        i = min(i + BATCH, n_ev)
        now = time.perf_counter()
        marks.append((i, now, time.process_time(), eng.output_seconds))
        if now - ts >= budget:
            break
    te, ce = time.perf_counter(), time.process_time()
    out_s = eng.output_seconds - o0
    tail = eng.flush()
    st1 = eng.stats()
    timed, wall, cpu = i - warm, te - ts, ce - c0
    rates, rates_cpu, rates_net = _windows(marks, ts, c0, extra=True)
    qindex = {q: j for j, q in enumerate(work.names[:n])}
    mq = [m.query for m in tail]
    mt = [m.event["t1"] for m in tail]
    for o in outs:
        mq.extend(o.column("query").to_pylist())
        mt.extend(o.column("t1").to_pylist())
    return {"register_s": reg_s, "register_cpu": reg_cpu, "warm": warm, "events": i, "timed": timed,
            "wall": wall, "cpu": cpu, "output_s": out_s,
            "eps_wall": statistics.median(rates) if rates else (timed / wall if wall else None),
            "eps": statistics.median(rates_cpu) if rates_cpu else (timed / cpu if cpu > 0 else None),
            "eps_net": statistics.median(rates_net) if rates_net else
            (timed / (cpu - out_s) if cpu > out_s else None),
            "rates_cpu": rates_cpu,
            "per_event": {"instances_visited": _per_event(st0, st1, timed, ("vec_pairs",))["vec_pairs"],
                          "instances_created": _per_event(st0, st1, timed, ("vec_instances",))["vec_instances"],
                          "edges_evaluated": None},
            "alive": _stat(st1, "instances_alive"), "bytes_per_instance": _stat(st1, "bytes_per_instance"),
            "vectorised": _stat(st1, "vectorised_families"), "fallbacks": _stat(st1, "vec_fallbacks"),
            "rss_reg_mb": rss_reg - rss0, "rss_end_mb": _rss_mb() - rss0,
            "mq": [qindex[q] for q in mq], "mt": np.array(mt, np.int64)}


def _child(conn, name, n, budget):
    try:
        kind, make = {**EXECUTORS, **ABLATIONS}[name]
        if kind == "batch":
            r = run_batch_cell(make, _WORK, n, _TABLE, budget)
        else:
            asts = _WORK.asts(n)
            gc.collect()
            r = run_cell(make, asts, _EVENTS, budget)
            qindex = {q: j for j, q in enumerate(_WORK.names[:n])}
            r["mq"] = [qindex[q] for q in r["mq"]]
        r["queries"] = n
        r["mq"] = np.array(r["mq"], dtype=np.int64)
        conn.send(("ok", r))
    except BaseException as e:  # noqa: BLE001 - reported in the table
        import traceback
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"))
    finally:
        conn.close()


# set by main() before forking: the children inherit them
_WORK: Workload | None = None
_EVENTS: list = []
_TABLE: pa.Table | None = None


def run_in_child(name, n, budget, timeout) -> dict:
    """One cell in a forked child: the first n queries."""
    ctx = mp.get_context("fork")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(b, name, n, budget))
    p.start()
    b.close()
    out = None
    if a.poll(timeout):
        try:
            out = a.recv()
        except EOFError:
            out = None
    if p.is_alive():
        p.join(5)
    if p.is_alive():
        p.kill()
        p.join()
    a.close()
    if out is None:
        return {"skipped": f"killed after {timeout:,.0f} s (exit code {p.exitcode})"}
    status, r = out
    if status != "ok":
        return {"error": r}
    return r


# ---------------------------------------------------------------------------------------------- oracle
def _engine_registration_child(conn, n):
    try:
        from sparksub import Engine
        from sparksub.grammar.events import parse_template
        for f in FAMILIES:                          # the grammar loaded (once per process), untimed
            parse_template(TEMPLATES[f])
        engine = Engine()
        engine.event_partitions = 2
        engine.sql("CREATE TABLE Stock (Name STRING, Price DOUBLE, Volume BIGINT)")
        k = _WORK.prefix(n)
        calls = [(TEMPLATES[f], {c: v[:k[f]] for c, v in _WORK.params[f].items()},
                  [_WORK.names[g] for g in _WORK.rows[f][:k[f]].tolist()]) for f in FAMILIES]
        gc.collect()
        rss0 = _rss_mb()
        c0, t0 = time.process_time(), time.perf_counter()
        for template, cols, names in calls:
            engine.register_event_queries(template, cols, names=names)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        listed = len(engine.event_queries())
        conn.send({"n": n, "cpu": cpu, "wall": wall, "listed": listed, "rss_mb": _rss_mb() - rss0,
                   "classes": len(engine._event_classes)})
    except Exception as e:  # noqa: BLE001
        import traceback
        conn.send({"n": n, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})
    finally:
        conn.close()


def engine_registration(n: int, timeout: float = 600) -> dict:
    """``Engine.register_event_queries`` of the first n queries (one call per family) in a forked child:
    {n, cpu, wall, listed, rss_mb, classes} or {n, error}."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_engine_registration_child, args=(child, n))
    p.start()
    child.close()
    out = parent.recv() if parent.poll(timeout) else {"n": n, "error": f"no answer in {timeout:.0f} s"}
    p.join(5)
    if p.is_alive():
        p.kill()
    return out


def _engine_registration_line(r: dict) -> str:
    if "error" in r:
        return f"Engine.register_event_queries at {r['n']:,}: {r['error'].splitlines()[0]}"
    return (f"Engine.register_event_queries at {r['n']:,} queries: {r['cpu']:.2f} CPU-s ({r['wall']:.2f} s wall; "
            f"{r['n'] / r['cpu']:,.0f} queries/CPU-s), {r['listed']:,} listed, {r['classes']} event classes, "
            f"+{r['rss_mb']:,.0f} MB")


def oracle_check(work: Workload, events: list, matched: list, per_family: int = 10, n_events: int = 4000) -> dict:
    """Per family, up to `per_family` queries that matched in the first `n_events` events in a cell
    (`matched`, most matches first), topped up with the first queries of the list; plus 4 looser S4-like
    queries.  The reference interpreter against each executor."""
    from cayuga_reference import evaluate_queries
    pool = work.names[:20_000]
    pick = []
    for f in FAMILIES:
        mine = [k for k in matched if family(k) == f][:per_family]
        mine += [k for k in pool if family(k) == f and k not in mine][:per_family - len(mine)]
        pick += mine
    index = {q: g for g, q in enumerate(work.names)}
    bound = {f: work.bound(f, max([int(work.row_of[index[q]]) + 1 for q in pick if family(q) == f], default=0))
             for f in FAMILIES}
    asts = {q: bound[family(q)][int(work.row_of[index[q]])] for q in pick}
    # S4 matches are rare early in the stream: a few looser S4-like queries (d = 3-6 gaps) on the most
    # popular symbols, for the oracle check only
    w = popularity()
    for k in range(4):
        asts[f"S4_x{k}"] = parse_event_query(
            f"SELECT * FROM FILTER{{DUR >= {int(round((3 + k) / w[k]))}}}(FILTER{{Name = 'S{k:03d}'}}(Stock) "
            f"FOLD{{$2.Name = $.Name, $2.Price > $.Price,}} Stock)")
    ev = events[:n_events]
    t = time.perf_counter()
    ref = evaluate_queries(asts, {"Stock": ev})
    t_ref = time.perf_counter() - t
    bad = {}
    for name, eng in (("batch executor", BatchEngine()), ("grouped NFA", FamilyEngine()), ("indexed NFA", NFAEngine())):
        for k, a in asts.items():
            eng.register(k, a)
        got = eng.run({"Stock": ev}, batch_size=512) if isinstance(eng, BatchEngine) else eng.run({"Stock": ev})
        bad[name] = [k for k in asts if ref.get(k) != got.get(k)]
    per = Counter()
    for k in asts:
        per[family(k)] += len(ref[k])
    return {"queries": len(asts), "events": len(ev), "matches": dict(per), "identical": not any(bad.values()),
            "bad": {k: v for k, v in bad.items() if v}, "ref_s": t_ref, "executors": list(bad)}


# ----------------------------------------------------------------------------------------------- Spark
def spark_baseline(events: list, s3_params: dict, names_at: dict, batch: int, repeats: int, cells: dict) -> list:
    """For each size: the S3 queries among the first n, LAG + join over the first `batch` events."""
    import pandas as pd

    from sparksub.engine import spark_session
    t = time.perf_counter()
    spark = spark_session("local[2]", "sparksub-bench-events")
    start_s = time.perf_counter() - t
    ev = pd.DataFrame({"Name": [e["Name"] for e in events[:batch]], "Price": [e["Price"] for e in events[:batch]],
                       "t1": [e["t1"] for e in events[:batch]]})
    edf = spark.createDataFrame(ev).cache()
    edf.count()
    edf.createOrReplaceTempView("ev")
    out = []
    for n, qnames in names_at.items():
        s3 = [q for q in qnames if q in s3_params]
        qdf = spark.createDataFrame(pd.DataFrame({"qid": s3, "A": [s3_params[q][0] for q in s3],
                                                  "r": [s3_params[q][1] for q in s3]})).cache()
        qdf.count()
        qdf.createOrReplaceTempView("qs")
        sql = ("SELECT q.qid, count(*) AS n FROM (SELECT Name, Price, t1, LAG(Price) OVER (PARTITION BY Name "
               "ORDER BY t1) AS Price_1 FROM ev) e JOIN qs q ON e.Name = q.A "
               "WHERE e.Price > q.r * e.Price_1 GROUP BY q.qid")
        t = time.perf_counter()
        res = spark.sql(sql).collect()
        first = time.perf_counter() - t
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            res = spark.sql(sql).collect()
            times.append(time.perf_counter() - t)
        counts = {r["qid"]: r["n"] for r in res}
        med = statistics.median(times)
        rec = {"n": n, "s3_queries": len(s3), "batch": batch, "first_s": first, "median_s": med, "times": times,
               "eps": batch / med, "matches": sum(counts.values()), "start_s": start_s}
        cmp_ = []                          # consistency with the executors at this size, on the same events
        for name, c in cells.get(n, {}).items():
            if "mq" not in c or name not in (OURS, TODAY):
                continue
            upto = min(batch, c["events"])
            if upto < batch:
                sub = spark.sql(sql.replace("FROM ev)", f"FROM ev WHERE t1 < {upto})")).collect()
                want = {r["qid"]: r["n"] for r in sub}
            else:
                want = counts
            got = Counter()
            for qi in c["mq"][c["mt"] < upto].tolist():
                q = _WORK.names[qi]
                if q in s3_params:
                    got[q] += 1
            diff = sorted(q for q in set(got) | set(want) if got.get(q, 0) != want.get(q, 0))
            cmp_.append({"executor": name, "events": upto, "spark": sum(want.values()), "nfa": sum(got.values()),
                         "diff": diff})
        rec["compare"] = cmp_
        out.append(rec)
        log(f"  Spark SQL {n:>9,} queries ({len(s3):,} S3): {batch / med:>9,.0f} events/s (median of {repeats}; "
            f"first {first:.1f} s), {rec['matches']:,} matches; "
            + "; ".join(f"{c['executor']}: {c['nfa']:,} on {c['events']:,} ev "
                        f"{'=' if not c['diff'] else '≠'} {c['spark']:,}" for c in cmp_))
        qdf.unpersist()
    spark.stop()
    return out


# ------------------------------------------------------------------------------------------ consistency
def consistency(cells_n: dict) -> dict:
    """Compare each executor at one size with the one that processed the most events (the reference), on
    the events both processed: matches per query with t1 below that prefix."""
    ran = {k: c for k, c in cells_n.items() if "mq" in c}
    if not ran:
        return {}
    ref_name = max(ran, key=lambda k: ran[k]["events"])     # first in EXECUTORS order on ties
    ref = ran[ref_name]

    def per_query(c, upto):
        return Counter(c["mq"][c["mt"] < upto].tolist())

    fam = Counter()
    for qi, v in per_query(ref, ref["events"]).items():
        fam[family(_WORK.names[qi])] += v
    upto, diffs = {}, {}
    for k, c in ran.items():
        if k == ref_name:
            continue
        u = upto[k] = min(c["events"], ref["events"])
        a, b = per_query(ref, u), per_query(c, u)
        bad = sorted(q for q in set(a) | set(b) if a.get(q, 0) != b.get(q, 0))
        if bad:
            diffs[k] = [(_WORK.names[q], a.get(q, 0), b.get(q, 0), _first_diff(ref, c, q, u)) for q in bad[:10]] + \
                       ([("…", len(bad), None, None)] if len(bad) > 10 else [])
    return {"reference": ref_name, "events": ref["events"], "families": fam, "upto": upto, "diffs": diffs}


def _first_diff(a: dict, b: dict, q: int, upto: int):
    ta = sorted(a["mt"][(a["mq"] == q) & (a["mt"] < upto)].tolist())
    tb = sorted(b["mt"][(b["mq"] == q) & (b["mt"] < upto)].tolist())
    for x, y in zip(ta, tb):
        if x != y:
            return min(x, y)
    return (ta[len(tb)] if len(ta) > len(tb) else tb[len(ta)]) if len(ta) != len(tb) else None


# ----------------------------------------------------------------------------------------------- report
STYLE = {"batch executor": ("D", "-", "C3"), "grouped NFA": ("*", "-", "C1"), "indexed NFA": ("o", "-", "C0"),
         "naive NFA": ("x", ":", "C7"), "no instance index": ("s", "--", "C2"), "no state merging": ("^", "--", "C4"),
         "no static index": ("v", "--", "C5")}


def plot(cells: dict, sizes, names, spark: list, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 6))
    for j, name in enumerate(names):
        xs = [n for n in sizes if cells.get(n, {}).get(name, {}).get("eps")]
        if not xs:
            continue
        mk, ls, col = STYLE.get(name, ("D", "-", f"C{5 + j % 3}"))
        ax.plot(xs, [cells[n][name]["eps"] for n in xs], marker=mk, ls=ls, color=col,
                label=name + (" (with output)" if name == OURS else ""))
        ax.plot(xs, [cells[n][name].get("eps_wall") or np.nan for n in xs], marker=mk, ls="none", color=col,
                alpha=0.35, ms=4)
        if name == OURS:
            ax.plot(xs, [cells[n][name].get("eps_net") or np.nan for n in xs], marker=mk, ls="--", color=col,
                    alpha=0.7, label=f"{name}, excluding output building")
        bx.plot(xs, [n / cells[n][name]["register_cpu"] for n in xs], marker=mk, ls=ls, color=col,
                label=name + (" (bulk: template + parameter table)" if name == OURS else " (register() per query)"))
    if spark:
        ax.plot([s["n"] for s in spark], [s["eps"] for s in spark], "kP", ms=9,
                label=f"Spark SQL, S3 family only (LAG + join, local[2], wall clock, batch {spark[0]['batch']:,})")
    ax.plot([100_000], [20_000], "r_", ms=24, mew=2.5, label="targets: 20,000 (with output) / 50,000 at 100,000")
    ax.plot([100_000], [50_000], "r_", ms=24, mew=2.5)
    ax.plot([1_000_000], [5_000], "r_", ms=24, mew=2.5, label="target: 5,000 events/s at 1,000,000")
    bx.plot([100_000], [10_000], "r_", ms=24, mew=2.5, label="target: 100,000 queries in 10 s")
    for a in (ax, bx):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("active queries (⅓ each S2-, S3-, S4-like)")
        a.grid(True, which="both", alpha=0.3)
    ax.set_ylabel("events per CPU-second (median of 3 windows, one core)")
    ax.set_title("(a) throughput vs active queries (faint dots: wall clock)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    bx.set_ylabel("queries registered per CPU-second")
    bx.set_title("(b) registration rate")
    bx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def git_state() -> str:
    """HEAD of the checkout, and whether the executor modules actually imported (which may come from
    elsewhere, e.g. an export of a commit on PYTHONPATH) are HEAD's files."""
    import subprocess
    repo = Path(__file__).resolve().parent.parent
    mods = [sys.modules[m] for m in ("sparksub.operators.events.nfa", "sparksub.operators.events.families",
                                     "sparksub.operators.events.batch", "sparksub.operators.events.bulk",
                                     "sparksub.operators.events.vectors") if m in sys.modules]

    def git(*a):
        return subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True, timeout=10).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        changed = []
        for m in mods:
            rel = "src/" + m.__name__.replace(".", "/") + ".py"
            if git("hash-object", m.__file__) != git("rev-parse", f"HEAD:{rel}"):
                changed.append(Path(m.__file__).name)
        src = Path(mods[0].__file__).resolve().parents[2] if mods else None
        where = "" if src is None or src == repo / "src" else f" (package imported from {src})"
        return f"commit {head}" + (f" with uncommitted changes in {', '.join(changed)}" if changed
                                   else ": executor modules identical to HEAD's") + where
    except (OSError, subprocess.SubprocessError):
        return "git state unknown"


def verdict(ok) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def make_targets(cells: dict, sizes, spark: list, engine_reg: dict | None = None) -> list:
    def cell(n, name=OURS):
        return cells.get(n, {}).get(name, {})

    def today(n, key="eps"):
        v = cell(n, TODAY).get(key)
        return f"; {TODAY}: {v:,.0f}" if v else f"; {TODAY}: {_why(cell(n, TODAY)) if cell(n, TODAY) else 'not run'}"
    T = []
    for n, key, goal, what in ((100_000, "eps", 20_000, "with output"),
                               (100_000, "eps_net", 50_000, "excluding the time spent building output"),
                               (1_000_000, "eps", 5_000, "with output")):
        c = cell(n)
        v = c.get(key)
        T.append((f"≥ {goal:,} events/s at {n:,} queries on one core, {what} ({OURS})",
                  (v >= goal) if v else None,
                  (f"{v:,.0f} events/s" if v else ("not measured: " + _why(c) if c else "size not run"))
                  + (today(n) if key == "eps" else "")))
    c = cell(100_000)
    r = c.get("register_cpu")
    T.append((f"registration of 100,000 queries ≤ 10 s ({OURS}, bulk: bind_event_template + register_template; "
              "CPU seconds, wall beside)",
              (r <= 10) if r else None,
              (f"{r:,.1f} CPU-s ({c['register_s']:,.1f} s wall; {100_000 / r:,.0f} queries/CPU-s)" if r
               else "not measured")
              + (f"; {TODAY} register() per query: {cell(100_000, TODAY)['register_cpu']:,.1f} CPU-s"
                 if cell(100_000, TODAY).get("register_cpu") else "")))
    e = (engine_reg or {}).get(100_000) or {}
    T.append(("registration of 100,000 queries ≤ 10 s through the engine (Engine.register_event_queries, "
              "three calls; CPU seconds, wall beside)",
              (e["cpu"] <= 10) if e.get("cpu") else None,
              (f"{e['cpu']:,.1f} CPU-s ({e['wall']:,.1f} s wall; {100_000 / e['cpu']:,.0f} queries/CPU-s)"
               if e.get("cpu") else ("not measured: " + e["error"].splitlines()[0] if e.get("error")
                                     else "not measured"))))
    lo, hi = cell(1_000).get("eps"), cell(100_000).get("eps")
    T.append((f"flat from 1,000 to 100,000: events/s at 100,000 ≥ 0.8 × at 1,000 ({OURS}; issue 6)",
              (hi / lo >= 0.8) if (lo and hi) else None,
              f"{hi:,.0f} / {lo:,.0f} = {hi / lo:.2f}" if (lo and hi) else "not measured"))
    sp = {s["n"]: s for s in spark}
    s = sp.get(100_000)
    T.append((f"Spark SQL baseline (LAG + join, S3 family only, both cores) beaten at 100,000 queries ({OURS}, "
              "all three families, one core)",
              (hi > s["eps"]) if (hi and s) else None,
              f"{hi:,.0f} vs {s['eps']:,.0f} events/s ({hi / s['eps']:.1f}×)" if (hi and s) else "not measured"))
    return T


def _why(c: dict) -> str:
    return c.get("skipped") or (c.get("error", "").splitlines() or ["not run"])[0]


def report(info, args, sizes, names, cells, cons, oracle, spark, rates, targets, elapsed, path: Path) -> None:
    cmd = "python bench/events.py" + (" --quick" if args.quick else "") + (" --no-spark" if args.no_spark else "") \
        + (" --ablations" if args.ablations else "")
    L = ["# Event queries benchmark: batch executor vs grouped NFA vs indexed NFA vs naive NFA vs Spark SQL (004 §4)\n",
         f"Generated by `{cmd}` on {info['date']} ({elapsed / 60:.1f} min). Issues 6 and 18; DESIGN §8. "
         "Script: `bench/events.py` (its docstring has every parameter).\n",
         (f"**Machine**: {info['platform']}; {info['cpu_count']} CPUs; {info['cpu']}; Python {info['python']}, "
          f"numpy {info['numpy']}, pyarrow {info['pyarrow']}, pyspark {info['pyspark']}. Load average (1/5/15 "
          f"min): {info['load_start']} at start, {info['load_end']} at end (above ~1.5 on 2 cores, other "
          "processes shared the cores: the figures are then pessimistic, the CPU-second rates less so than the "
          "wall-clock ones). Executors are pure Python on one core, each cell in a fresh forked child. Code: "
          f"{info['git']}.\n"),
         ("**Workload**: a seeded random walk over 300 symbols with Zipf popularity (1/rank: S000 16% of the "
          "events, S299 0.05%), mean-reverting log prices with Student-t steps (1%), lognormal volumes; events "
          "`{Name, Price, Volume, t0, t1}`, t0 = t1 = position. Queries, one third per family, each with its own "
          "constants (symbols drawn from the same Zipf popularity; thresholds from a 100,000-event price history), "
          "registered from CEL templates with `:name` parameters:\n"),
         f"* **S2-like** `{TEMPLATES['S2']}`: p = A's price quantile at U{S2_P}, q = B's at U{S2_Q};",
         f"* **S3-like** `{TEMPLATES['S3']}`: r ~ U{S3_R};",
         f"* **S4-like** `{TEMPLATES['S4']}`: d = U{S4_K} × A's mean gap in ticks (a rise over ~15–25 of A's "
         "events; the step that breaks the rise is output too, DESIGN §4).\n",
         "Query sets are nested (the n-query set is the first n of one list).\n",
         (f"**Measure**: each cell registers the queries, then feeds the same event sequence: the **batch "
          f"executor** (`BatchEngine`, `operators/events/batch.py`) micro-batches of {BATCH:,} events as Arrow "
          "tables, its matches built per batch as an Arrow table of match rows (`process_table`: what the "
          "runtime returns); the others one event per `process()` call, matches as `nfa.Match` objects. A "
          f"warm-up (the first {WARM_EVENTS:,} events, untimed), then a timed phase of {args.budget:g} s or "
          f"until the stream ({args.events:,} events) ends. **events/s = events per CPU-second of the child "
          f"process (one core's work), the median over {WINDOWS} equal-time windows of the timed phase** (min–max "
          "of the windows beside it); the wall-clock rate of the same windows beside it. \"Excluding output\": "
          "the CPU seconds spent building the output table (`BatchEngine.output_seconds`) taken out. Slow "
          "executors are timed on fewer events and in a younger state (fewer instances alive), which flatters "
          f"them; one that timed fewer than {MIN_EVENTS} events at a size is skipped at the larger ones, and "
          "each is run only up to the size where it still makes sense (table). Memory per query = RSS growth of "
          "the child over registration / queries.\n"),
         "## Targets\n",
         "Issue 18: **≥ 20,000 events/s at 100,000 queries on one core with output, ≥ 50,000 without; at "
         "1,000,000 queries ≥ 5,000 with output; registration of 100,000 queries ≤ 10 s; the Spark SQL baseline "
         f"beaten on the same families**. Beside each, the {TODAY}'s figure (the executor it replaces).\n",
         md_table(["target", "result", "value"], [[n, f"**{verdict(ok)}**", v] for n, ok, v in targets]) + "\n"]

    # ---- main table
    L.append("## Throughput, work and memory per executor and size\n")
    rows = []
    for n in sizes:
        cn = cons.get(n, {})
        for name in names:
            c = cells.get(n, {}).get(name)
            if c is None:
                continue
            if "eps" not in c:
                rows.append([f"{n:,}", name, f"skipped: {_why(c)}"] + [""] * 11)
                continue
            pe = c["per_event"]
            ok = "—"
            if cn:
                if name == cn["reference"]:
                    ok = "reference"
                else:
                    ok = ("✗ differs" if name in cn["diffs"] else "✓") + f" on {cn['upto'][name]:,} ev"
            rates_ = c["rates_cpu"]
            out_share = f"{c['output_s'] / c['cpu']:.0%}" if c.get("output_s") is not None and c["cpu"] else "n/a"
            rows.append([f"{n:,}", name, f"**{c['eps']:,.0f}**",
                         f"**{c['eps_net']:,.0f}** ({out_share} output)" if c.get("eps_net") else "n/a",
                         f"{min(rates_):,.0f}–{max(rates_):,.0f}" if rates_ else "",
                         f"{c['eps_wall']:,.0f}" if c.get("eps_wall") else "n/a",
                         f"{c['timed']:,} ({c['warm']:,})",
                         f"{n / c['register_cpu']:,.0f} ({c['register_cpu']:,.1f} CPU-s)",
                         f"{c['rss_reg_mb'] * 2 ** 20 / n:,.0f}",
                         fmt_num(pe.get("instances_visited")), fmt_num(pe.get("instances_created")),
                         f"{c['alive']:,}" if c.get("alive") is not None else "n/a",
                         f"{len(c['mq']) / c['events']:.2f}", ok])
    L.append(md_table(["queries", "executor", "events/CPU-s (median), with output", "excluding output",
                       "windows min–max", "events/s wall clock", "timed events (warm-up)",
                       "register queries/CPU-s", "bytes/query (RSS)", "instances visited/event",
                       "instances created/event", "instances alive (end)", "matches/event", "same matches"], rows)
             + "\n")
    L.append("![events/s vs queries](events.png)\n")
    L.append("\"Instances visited\" for the batch executor are the (instance, event) steps it advanced (a NEXT "
             "instance's first match, a FOLD chain's steps), per event; for the per-event executors the instances "
             "their indexes led an event to.\n")

    # ---- ratios
    L.append("### Ratios at the same size (events/s)\n")
    rr = []
    for n in sizes:
        ours = cells.get(n, {}).get(OURS, {}).get("eps")
        if not ours:
            continue
        parts = [f"{ours / o:,.1f}× {other}" for other in names if other != OURS
                 and (o := cells.get(n, {}).get(other, {}).get("eps"))]
        rr.append([f"{n:,}", OURS, "; ".join(parts)])
    L.append(md_table(["queries", "executor", "speed-up over"], rr) + "\n")

    # ---- matches
    L.append("### Matches and consistency\n")
    L.append("Matches of the reference (the executor that processed the most events at that size) over those "
             "events, per family. Every other executor's matches per query are compared with the reference's on "
             "the events both processed (the \"same matches\" column above gives that prefix); a difference "
             "would be a bug and is listed below.\n")
    mr = []
    for n in sizes:
        cn = cons.get(n)
        if not cn:
            continue
        fc = cn["families"]
        up = cn["events"]
        mr.append([f"{n:,}", f"{up:,}", cn["reference"]] +
                  [f"{fc.get(f, 0):,} ({fc.get(f, 0) / up:.3f})" for f in FAMILIES] +
                  [f"{sum(fc.values()) / up:.3f}", str(1 + len(cn["upto"])),
                   "all equal" if not cn["diffs"] else "**DIFFER: " + ", ".join(cn["diffs"]) + "**"])
    L.append(md_table(["queries", "events (reference)", "reference", "S2 matches (/event)", "S3 matches (/event)",
                       "S4 matches (/event)", "matches/event", "executors compared", "per-query counts"], mr) + "\n")
    for n in sizes:
        cn = cons.get(n)
        if cn and cn["diffs"]:
            for name, lst in cn["diffs"].items():
                L.append(f"* **{n:,} queries, {name} vs {cn['reference']}** (query, reference count, its count, "
                         f"first differing t1): " + "; ".join(f"{q} {a} vs {b} (t1 {t})" for q, a, b, t in lst))
            L.append("")
    if oracle:
        L.append(f"Oracle: {oracle['queries']} queries (10 per family: those with the most matches in these events "
                 "in the cells; plus 4 looser S4-like queries, d = 3–6 mean gaps on the 4 most popular symbols, so "
                 f"that FOLD has matches) over the first {oracle['events']:,} events through "
                 f"`cayuga_reference.evaluate_queries` ({oracle['ref_s']:.1f} s) and {', '.join(oracle['executors'])} "
                 "(the batch executor in batches of 512): "
                 + ("**identical output events**" if oracle["identical"] else f"**DIFFER: {oracle['bad']}**")
                 + f" (matches {oracle['matches']}).\n")

    errs = [(n, name, c["error"]) for n in sizes for name, c in cells.get(n, {}).items() if "error" in c]
    if errs:
        L.append("### Errors\n")
        for n, name, e in errs:
            L.append(f"* {n:,} queries, {name}:\n\n```\n{e}\n```\n")

    # ---- registration
    L.append("## Registration\n")
    L.append("The batch executor registers each family with `bind_event_template(template, parameter columns, "
             "names=...)` + `BatchEngine.register_template` (`operators/events/bulk.py`: the template parsed once; "
             "the rows of one value-kind signature analysed once; each row a row of the family's parameter table; "
             "its AST built when first asked for); the time includes binding. The other executors take ASTs "
             "with `register()`, one query at a time (the ASTs built beforehand, untimed). Beside them, per "
             f"query: parsing the text with `parse_event_query` {rates['parse']:,.0f} queries/CPU-s (issue 6's path: "
             f"{rates['parse_n']:,} texts), building every AST from a bound template "
             f"{rates['ast']:,.0f} queries/CPU-s ({rates['ast_n']:,} ASTs).\n")
    for r in rates.get("engine", {}).values():
        L.append(f"Through the engine: {_engine_registration_line(r)} (`Engine.register_event_queries`, one call per "
                 "family: the first row of each checked as CREATE EVENT QUERY does, every row validated, one journal "
                 "record per call, the event classes planned; `--engine-registration` runs this row alone).\n")
    rr, hdr = [], ["executor"]
    for n in sizes:
        hdr.append(f"{n:,}: queries/CPU-s (CPU s; wall s)")
    for name in names:
        row = [name]
        for n in sizes:
            c = cells.get(n, {}).get(name, {})
            row.append(f"{n / c['register_cpu']:,.0f} ({c['register_cpu']:,.1f}; {c['register_s']:,.1f})"
                       if "register_cpu" in c else "—")
        rr.append(row)
    L.append(md_table(hdr, rr) + "\n")

    # ---- Spark
    if spark:
        L.append("## Spark SQL (what a user would do without sparksub), S3 family\n")
        L.append("`LAG(Price) OVER (PARTITION BY Name ORDER BY t1)` over a batch of events (a cached DataFrame), "
                 "joined on `Name = A` with a table of the S3 queries' `(qid, A, r)` (the S3 queries among the "
                 "first n), `Price > r * Price_1`, `count(*)` per query, `collect()`; local[2] SparkSession (both "
                 f"cores; start {spark[0]['start_s']:.1f} s). events/s = batch / median of the timed runs (after "
                 "one warm-up run). Our columns run all three families on one core, so the comparison flatters "
                 "Spark.\n")
        rows = []
        for s in spark:
            cmp_ = "; ".join(f"{c['executor']}: {c['nfa']:,} vs Spark {c['spark']:,} on {c['events']:,} ev "
                             + ("✓" if not c["diff"] else f"✗ {len(c['diff'])} queries differ, e.g. {c['diff'][:5]}")
                             for c in s["compare"])
            ours = cells.get(s["n"], {}).get(OURS, {}).get("eps")
            rows.append([f"{s['n']:,}", f"{s['s3_queries']:,}", f"{s['batch']:,}", f"**{s['eps']:,.0f}**",
                         f"{s['median_s']:.2f} ({', '.join(f'{t:.2f}' for t in s['times'])})", f"{s['first_s']:.1f}",
                         f"{s['matches']:,}", f"{ours / s['eps']:.2f}×" if ours else "n/a", cmp_])
        L.append(md_table(["queries", "S3 queries", "batch (events)", "events/s", "median s (runs)",
                           "first run s", "S3 matches in batch", f"{OURS} (all families) / Spark",
                           "S3 matches vs executors (same events)"], rows) + "\n")

    L.append("## Notes\n")
    L.append("* Matches are released when their tick closes; consistency compares matches with t1 below the "
             "common prefix, after `flush()`.\n"
             "* The batch executor runs every family of these three shapes vectorised (`stats()`: "
             "`vectorised_families`, `vec_fallbacks` 0 here); queries of other shapes run on its per-event path, "
             "which is `FamilyEngine`'s.\n"
             "* Spark SQL gets the whole batch at once on both cores; the per-event executors one event per call "
             "on one core; the batch executor micro-batches on one core.\n"
             "* The naive NFA is `NFAEngine(index_static=False, index_instances=False, share_prefixes=False, "
             "expire=False)`: every start guard and every instance is checked on every event (DESIGN §3's "
             "baseline), on the same code path as the indexed engine.\n"
             "* Issue 6's run (2026-11-22, load 1.6–5 on the same VM) measured the grouped NFA at 17,641 / 12,006 / "
             "7,491 events/CPU-s at 1,000 / 10,000 / 100,000 queries; the grouped NFA's figures here are lower "
             "(the VM was busier: see the load average), which is why the ratios, measured side by side, are the "
             "figures to compare.\n")
    path.write_text("\n".join(L) + "\n")


# -------------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    global _WORK, _EVENTS, _TABLE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--ablations", action="store_true", help="also the indexed NFA with one optimisation off")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--budget", type=float, default=None, help="timed seconds per cell")
    ap.add_argument("--events", type=int, default=None, help="events in the stream")
    ap.add_argument("--sizes", type=str, default=None, help="comma-separated query counts")
    ap.add_argument("--only", type=str, default=None, help="comma-separated executor names")
    ap.add_argument("--engine-registration", action="store_true",
                    help="only Engine.register_event_queries at --sizes (default 100,000); prints, writes nothing")
    args = ap.parse_args(argv)
    if args.engine_registration:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [100_000]
        _, symbols, w, hist = make_stream(1_000)
        _WORK = Workload(max(sizes), symbols, w, hist)
        log(f"{git_state()}; load {load_avg()}")
        for n in sizes:
            log(_engine_registration_line(engine_registration(n)))
        return 0
    quick = args.quick
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else \
        ([1_000, 10_000] if quick else [1_000, 10_000, 100_000, 1_000_000])
    args.budget = args.budget or (6.0 if quick else 20.0)
    args.events = args.events or (100_000 if quick else 400_000)
    names = list(EXECUTORS) + (list(ABLATIONS) if args.ablations else [])
    if args.only:
        names = [s.strip() for s in args.only.split(",")]
    t_all = time.perf_counter()
    info = machine()
    info["load_start"] = load_avg()
    info["git"] = git_state()
    log(f"{info['git']}; machine: {info['cpu']} × {info['cpu_count']}; load {info['load_start']}; executors {names}")

    t = time.perf_counter()
    events, symbols, w, hist = make_stream(args.events)
    _WORK = Workload(max(sizes), symbols, w, hist)
    _EVENTS = events
    _TABLE = pa.Table.from_pylist(events)
    log(f"stream of {len(events):,} events and {max(sizes):,} queries generated in {time.perf_counter() - t:.1f} s")
    rates = {}
    k = min(2_000, max(sizes))                      # issue 6's path, for the record: parsing texts
    texts = [q.to_cel() for q in _WORK.asts(k).values()]
    c = time.process_time()
    for text in texts:
        parse_event_query(text)
    rates.update(parse=k / (time.process_time() - c), parse_n=k)
    k = min(100_000, max(sizes))
    c = time.process_time()
    _ = [q for f in FAMILIES for q in _WORK.bound(f, _WORK.prefix(k)[f]).queries]
    rates.update(ast=k / (time.process_time() - c), ast_n=k)
    del _
    log(f"parse_event_query: {rates['parse']:,.0f} queries/CPU-s; ASTs from bound templates: {rates['ast']:,.0f}/CPU-s")
    engine_reg = {}
    for n in [n for n in sizes if n <= 100_000][-1:]:
        engine_reg[n] = engine_registration(n)
        log(_engine_registration_line(engine_reg[n]))
    rates["engine"] = engine_reg

    cells: dict = {}
    cons: dict = {}
    stop: dict[str, str] = {}
    timeout = (1800 if not quick else 300) + 4 * args.budget
    for n in sizes:
        cells[n] = {}
        for name in names:
            cap = MAX_QUERIES.get(name)
            if cap is not None and n > cap:
                cells[n][name] = {"skipped": f"not run above {cap:,} queries (would take too long: see the "
                                             f"rates at {cap:,})"}
                log(f"  {n:>9,} {name:18s} {cells[n][name]['skipped']}")
                continue
            if name in stop:
                cells[n][name] = {"skipped": stop[name]}
                log(f"  {n:>9,} {name:18s} skipped: {stop[name]}")
                continue
            r = run_in_child(name, n, args.budget, timeout)
            cells[n][name] = r
            if "eps" in r:
                net = f"; excluding output {r['eps_net']:,.0f}" if r.get("eps_net") else ""
                log(f"  {n:>9,} {name:18s} {r['eps']:>9,.1f} ev/CPU-s{net} (wall {r['eps_wall'] or 0:,.0f}/s) "
                    f"timed {r['timed']:,} warm {r['warm']:,}; register {n / r['register_cpu']:,.0f} q/CPU-s "
                    f"({r['register_cpu']:.1f} CPU-s, {r['register_s']:.1f} s wall); {r['rss_reg_mb'] * 2 ** 20 / n:,.0f} B/query; matches "
                    f"{len(r['mq']):,}; alive {r['alive']}; visited/ev {fmt_num(r['per_event'].get('instances_visited'))}"
                    + (f"; vectorised families {r['vectorised']}, fallbacks {r['fallbacks']}"
                       if r.get("vectorised") is not None else ""))
                if r["timed"] < MIN_EVENTS:
                    stop[name] = f"< {MIN_EVENTS} timed events in {args.budget:g} s at {n:,}"
            else:
                log(f"  {n:>9,} {name:18s} {_why(r)}")
                stop[name] = f"{'failed' if 'error' in r else 'killed'} at {n:,}"
        cons[n] = consistency(cells[n])
        if cons[n]:
            c = cons[n]
            log(f"  consistency at {n:,} against {c['reference']} ({c['events']:,} events): "
                + ("all equal" if not c["diffs"] else f"DIFFER: {c['diffs']}")
                + f"; its matches {dict(c['families'])}")

    log("oracle check (cayuga_reference) ...")
    hits = Counter()
    for n in sizes:
        for c in cells[n].values():
            if "mq" in c:
                hits.update(c["mq"][c["mt"] < 4000].tolist())
    oracle = oracle_check(_WORK, events, [_WORK.names[q] for q, _ in hits.most_common()])
    log(f"  {oracle['queries']} queries × {oracle['events']:,} events: "
        + ("identical" if oracle["identical"] else f"DIFFER {oracle['bad']}") + f", matches {oracle['matches']}")

    spark = []
    if not args.no_spark:
        log("Spark SQL baseline (S3 family) ...")
        spark_sizes = [n for n in (1_000, 10_000, 100_000) if n in sizes]
        batch = 20_000 if quick else 100_000
        try:
            spark = spark_baseline(events, _WORK.s3_params(), {n: _WORK.names[:n] for n in spark_sizes}, batch, 3,
                                   cells)
        except Exception as e:  # noqa: BLE001
            log(f"  Spark SQL failed: {type(e).__name__}: {e}")
    info["load_end"] = load_avg()
    elapsed = time.perf_counter() - t_all
    targets = make_targets(cells, sizes, spark, engine_reg)
    log("")
    for name, ok, val in targets:
        log(f"{verdict(ok)}  {name}: {val}")
    args.out.mkdir(parents=True, exist_ok=True)
    plot(cells, sizes, names, spark, args.out / "events.png")
    report(info, args, sizes, names, cells, cons, oracle, spark, rates, targets, elapsed, args.out / "events.md")
    log(f"load average at end {info['load_end']}; total {elapsed / 60:.1f} min; wrote {args.out / 'events.md'}, "
        f"{args.out / 'events.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
