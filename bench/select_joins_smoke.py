"""Smoke benchmark of the select-join algorithms (003 §4.6.2): throughput of incoming R tuples at 100K-tuple tables
and 100 / 10K / 100K queries, on Table 4.1-like distributions.  Not the full bench/joins.py (issue 5).

Workload (003 Table 4.1; the OCR lost the μ / σ values, these are ours and stated here):
  R(A, B): 100,000 tuples, A ~ Uni(0, 10000), B ~ Uni{0..10000}; incoming R tuples drawn the same way.
  S(B, C): 100,000 tuples, B ~ round(Normal(5000, 1000)) clipped to [0, 10000], C ~ Uni(0, 10000).
  Queries: rangeA midpoint ~ Normal(5000, 1500), rangeC midpoint ~ Uni(0, 10000), both lengths
  ~ |Normal(1000, 200)|: an incoming tuple passes ~10% of the R.A selections (as in 003 §4.6.2, Figure 4.7)
  and the stabbing number of the C ranges is ~27 at 100K queries ("roughly 30").

Per algorithm and query count: ``probe/s`` = incoming R tuples per second through ``probe_r`` (finds every
affected query and its slice of the join run, tables unchanged: the output-free timing of 003 §4.6),
``insert/s`` = through ``insert_r`` (also builds the ``{qid: [(r, s), ...]}`` dicts and inserts the tuple),
``setup s`` = registering the queries plus the first probe (layouts built lazily), and the work counters per
event.  ``--a-length 100`` makes the R.a selections ~10x more selective (003 Figure 4.8(iii)).  The cyclic
GC is frozen after each cell's setup (gc.freeze): the timings are of the algorithms, not of GC passes over
the tables.  Each cell runs up to ``--events`` events or ``--seconds`` seconds, whichever comes first.

    python bench/select_joins_smoke.py                     # 100 / 10K / 100K queries, all algorithms
    python bench/select_joins_smoke.py --queries 100,10000 --seconds 1
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt_num, load_avg, md_table  # noqa: E402

from sparksub.operators.joins.select import (SJHotspot, SJJoinFirstE, SJJoinFirstS, SJNaive,  # noqa: E402
                                             SJReformulated, SJSelectFirst, SJSSI)
from sparksub.operators.shared.ssi import stabbing_number  # noqa: E402

DOMAIN = 10_000
ALGOS = {
    "NAIVE": SJNaive,
    "SJ-JoinFirst-S": SJJoinFirstS,
    "SJ-JoinFirst-E": SJJoinFirstE,
    "SJ-SelectFirst": SJSelectFirst,
    "SJ-SSI": SJSSI,
    "Hotspot(α=0.01)": lambda: SJHotspot(alpha=0.01),
    "Reformulated": SJReformulated,
}
#: the reformulated mode evaluates every (message, subscription) pair in Python: only at small query counts
REFORMULATED_MAX_QUERIES = 1_000


def tables(rng, n: int):
    ra = rng.uniform(0, DOMAIN, n)
    rb = rng.integers(0, DOMAIN + 1, n)
    sb = np.clip(np.rint(rng.normal(5000, 1000, n)), 0, DOMAIN).astype(np.int64)
    sc = rng.uniform(0, DOMAIN, n)
    return ra, rb, sb, sc


def queries(rng, n: int, a_length: float = 1000.0):
    amid = rng.normal(5000, 1500, n)
    alen = np.abs(rng.normal(a_length, a_length / 5, n))
    cmid = rng.uniform(0, DOMAIN, n)
    clen = np.abs(rng.normal(1000, 200, n))
    return [(i, a - la / 2, a + la / 2, c - lc / 2, c + lc / 2)
            for i, (a, la, c, lc) in enumerate(zip(amid.tolist(), alen.tolist(), cmid.tolist(), clen.tolist()))]


def load(algo, data) -> None:
    """Bulk-load the base tables straight into the join indexes (no events: the queries come later)."""
    ra, rb, sb, sc = data
    R, S = algo.tables.R, algo.tables.S
    for i, (a, b) in enumerate(zip(ra.tolist(), rb.tolist())):
        R.insert(("r", i), a, b)
    for i, (b, c) in enumerate(zip(sb.tolist(), sc.tolist())):
        S.insert(("s", i), c, b)


def run_cell(make, data, qrows, events, max_events: int, seconds: float, *, insert: bool = True,
             per_event: bool = False) -> dict:
    """One algorithm on one workload: setup, then ``probe_r`` over ``events`` for up to ``seconds`` (and
    ``insert_r`` for half as long unless ``insert=False``).  ``per_event``: also return each probe's seconds,
    affected queries and join-run length (``times`` / ``affected`` / ``kj``; bench/joins.py's output split)."""
    algo = make()
    load(algo, data)
    t0 = time.perf_counter()
    algo.add_queries(qrows)
    a0, b0 = events[0]
    algo.probe_r(a0, b0)  # builds lazy layouts
    setup = time.perf_counter() - t0
    # the tables and indexes hold millions of objects: keep the cyclic GC from re-scanning them on every
    # collection triggered by the result lists (what the timings should not measure)
    gc.collect()
    gc.freeze()
    before = dict(algo.counters)
    n = 0
    times, affected, kj = [], [], []
    pc = time.perf_counter
    t0 = pc()
    deadline = t0 + seconds
    if per_event:
        for a, b in events[:max_events]:
            t1 = pc()
            m = algo.probe_r(a, b)
            t2 = pc()
            times.append(t2 - t1)
            affected.append(m.slots.size)
            kj.append(len(m.run) if m.run is not None else 0)
            n += 1
            if t2 > deadline:
                break
    else:
        for a, b in events[:max_events]:
            algo.probe_r(a, b)
            n += 1
            if pc() > deadline:
                break
    probe_rate = n / (pc() - t0)
    work = {k: (algo.counters[k] - before[k]) / n for k in before}
    if not insert:
        gc.unfreeze()
        return {"setup": setup, "probe": probe_rate, "insert": None, "work": work, "stats": algo.stats(),
                "times": times, "affected": affected, "kj": kj}
    m = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds / 2
    for i, (a, b) in enumerate(events[:max_events]):
        algo.insert_r(("new", i), a, b)
        m += 1
        if time.perf_counter() > deadline:
            break
    insert_rate = m / (time.perf_counter() - t0)
    gc.unfreeze()
    return {"setup": setup, "probe": probe_rate, "insert": insert_rate, "work": work, "stats": algo.stats(),
            "times": times, "affected": affected, "kj": kj}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", default="100,10000,100000")
    ap.add_argument("--tuples", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=5_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--algorithms", default=",".join(ALGOS))
    ap.add_argument("--a-length", type=float, default=1000.0,
                    help="mean length of the R.a ranges (sd = mean/5); 1000 = ~10%% selectivity, 100 = ~1%%")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    data = tables(rng, args.tuples)
    erng = np.random.default_rng(args.seed + 1)
    events = list(zip(erng.uniform(0, DOMAIN, args.events).tolist(),
                      erng.integers(0, DOMAIN + 1, args.events).tolist()))
    counts = [int(x) for x in args.queries.split(",")]
    names = args.algorithms.split(",")
    print(f"load average at start: {load_avg()}  (2 shared cores: compare ratios, not absolute rates)", flush=True)
    rows = []
    for nq in counts:
        qrows = queries(np.random.default_rng(args.seed + 2 + nq), nq, args.a_length)
        tau = stabbing_number([(r[3], r[4]) for r in qrows])
        print(f"\n{nq:,} queries: τ(C ranges) = {tau}", flush=True)
        for name in names:
            if name == "Reformulated" and nq > REFORMULATED_MAX_QUERIES:
                continue
            r = run_cell(ALGOS[name], data, qrows, events, args.events, args.seconds)
            w = r["work"]
            extra = ""
            if name == "SJ-SSI":
                extra = f" groups={r['stats']['layout_groups'][0]}"
            elif name.startswith("Hotspot"):
                s = r["stats"]
                extra = f" hotspots={s['hotspots'][0]} hot={s['hot_queries'][0]} scattered={s['scattered_queries'][0]}"
            print(f"  {name:16s} probe/s {r['probe']:>9,.0f}  insert/s {r['insert']:>9,.0f}  setup {r['setup']:6.2f}s"
                  f"  per event: probes {w['index_probes']:,.1f} visited {w['queries_visited']:,.1f}"
                  f" nodes {w['nodes_visited']:,.1f} results {w['results']:,.1f} affected {w['affected']:,.1f}"
                  + extra, flush=True)
            rows.append([f"{nq:,}", name, fmt_num(r["probe"]), fmt_num(r["insert"]), fmt_num(r["setup"]),
                         fmt_num(w["index_probes"]), fmt_num(w["queries_visited"]), fmt_num(w["results"])])
    print()
    print(md_table(["queries", "algorithm", "probe/s", "insert/s", "setup s", "probes/event", "visited/event",
                    "results/event"], rows))
    print(f"\nload average at end: {load_avg()}")


if __name__ == "__main__":
    main()
