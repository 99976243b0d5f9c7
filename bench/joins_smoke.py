"""Quick throughput check of the band-join operators (not the full benchmark: that is ``bench/joins.py``).

Workload, after 003 Table 4.1 (§4.6.1) with continuous values: R.B ~ U(0, 10000) and S.B ~ N(5000, 1000), 100,000
tuples each; ``--groups`` cluster centres c ~ U(−4000, 4000) and each query S.B − R.B ∈ [c − |N(0, w)|,
c + |N(0, w)|] around one of them, so the queries fall into that many stabbing groups whatever their number.
The paper's bands are long and its values integers, so nearly every query would gain pairs from every tuple
and the output (which §4.6 excludes from its timings) would dominate; ``w`` (default 0.01) keeps it to a few
pairs per affected query, and the table prints k per event.  Events: new R-tuples drawn like R (the paper's
stream), then as many new S-tuples (the other direction).

Each algorithm runs events until ``--budget`` seconds or ``--max-events`` (at least ``--min-events``), in
``output="count"`` mode (pairs found, not built: the paper's "excluding output") and BJ-SSI also with pairs.
Maintenance: ``--maint`` query insertions and deletions (half each) after the events, seconds per operation.

    python bench/joins_smoke.py                      # 100K × 1K / 10K / 100K queries, ~3-5 min
    python bench/joins_smoke.py --queries 1000 --budget 1
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt_num, load_avg, log, md_table  # noqa: E402

from sparksub.operators.joins.band import BJSSI, BJDOuter, BJMJ, BJQOuter  # noqa: E402


def workload(n_data: int, n_queries: int, groups: int, width: float, seed: int):
    rng = np.random.default_rng(seed)
    r = rng.uniform(0, 10000, n_data)
    s = rng.normal(5000, 1000, n_data)
    centres = rng.uniform(-4000, 4000, groups)
    c = centres[rng.integers(0, groups, n_queries)]
    lo = c - np.abs(rng.normal(0, width, n_queries))
    hi = c + np.abs(rng.normal(0, width, n_queries))
    ev_r = rng.uniform(0, 10000, 100_000)
    ev_s = rng.normal(5000, 1000, 100_000)
    # query churn for the maintenance measurement: new queries drawn like the others
    c2 = centres[rng.integers(0, groups, 100_000)]
    m_lo = c2 - np.abs(rng.normal(0, width, 100_000))
    m_hi = c2 + np.abs(rng.normal(0, width, 100_000))
    return r, s, lo, hi, ev_r, ev_s, m_lo, m_hi


def run(make, data, args, label, sides=("R", "S"), per_event=False):
    """One algorithm: setup, then new R tuples (and S tuples) until ``args.budget`` s or ``args.max_events``.
    ``per_event``: also each event's seconds and affected queries (``row[side]["times"]`` / ``["aff"]``)."""
    r, s, lo, hi, ev_r, ev_s, m_lo, m_hi = data
    t0 = time.perf_counter()
    p = make()
    p.add_queries({i: (float(a), float(b)) for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist()))})
    p.load_r([(("r", i), v) for i, v in enumerate(r.tolist())])
    p.load_s([(("s", i), v) for i, v in enumerate(s.tolist())])
    setup = time.perf_counter() - t0
    row = {"algorithm": label, "queries": len(lo), "setup_s": setup}
    for side, values, insert in (("R", ev_r, p.insert_r), ("S", ev_s, p.insert_s)):
        if side not in sides:
            continue
        p.reset_counters()
        c = p.counters
        n = 0
        times, aff = [], []
        pc = time.perf_counter
        t0 = pc()
        if per_event:
            while n < args.max_events and (n < args.min_events or pc() - t0 < args.budget):
                a0 = c["affected"]
                t1 = pc()
                insert((side + "new", n), float(values[n]))
                times.append(pc() - t1)
                aff.append(c["affected"] - a0)
                n += 1
        else:
            while n < args.max_events and (n < args.min_events or pc() - t0 < args.budget):
                insert((side + "new", n), float(values[n]))
                n += 1
        dt = pc() - t0
        row[side] = {"events": n, "per_s": n / dt, "k": c["pairs"] / n, "affected": c["affected"] / n,
                     "work": p.work / n, "probes": (c["data_probes"] + c["query_probes"]) / n,
                     "times": times, "aff": aff}
        index = p.r_index if side == "R" else p.s_index
        for j in range(n):  # back to the loaded state for the next direction (no reporting)
            index.remove((side + "new", j))
    if args.maint:
        base = len(lo)
        t0 = time.perf_counter()
        for j in range(args.maint // 2):
            p.add_query(base + j, float(m_lo[j]), float(m_hi[j]))
        for j in range(args.maint // 2):
            p.remove_query(j)
        row["maint_us"] = (time.perf_counter() - t0) / args.maint * 1e6
    if hasattr(p, "stabbing_number"):
        row["tau"] = p.stabbing_number
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=int, default=100_000)
    ap.add_argument("--queries", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--width", type=float, default=0.01)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per algorithm and direction")
    ap.add_argument("--min-events", type=int, default=2)
    ap.add_argument("--max-events", type=int, default=5000)
    ap.add_argument("--maint", type=int, default=1000, help="query inserts + deletes to time (0 = skip)")
    ap.add_argument("--algorithms", nargs="+",
                    default=["BJ-SSI", "BJ-SSI/pairs", "BJ-QOuter", "BJ-DOuter", "BJ-MJ"])
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    makers = {"BJ-SSI": lambda: BJSSI(output="count"), "BJ-SSI/pairs": lambda: BJSSI(output="pairs"),
              "BJ-QOuter": lambda: BJQOuter(output="count"), "BJ-DOuter": lambda: BJDOuter(output="count"),
              "BJ-MJ": lambda: BJMJ(output="count")}
    log(f"load average at start {load_avg()}; |R| = |S| = {args.data}, {args.groups} query clusters, w = {args.width}")
    rows = []
    for nq in args.queries:
        data = workload(args.data, nq, args.groups, args.width, args.seed)
        for name in args.algorithms:
            row = run(makers[name], data, args, name)
            rows.append(row)
            log(f"{nq:>7} {name:<13} R: {fmt_num(row['R']['per_s'])}/s ({row['R']['events']} ev, "
                f"k {fmt_num(row['R']['k'])}, work {fmt_num(row['R']['work'])})  "
                f"S: {fmt_num(row['S']['per_s'])}/s  τ {row.get('tau', '')}  setup {fmt_num(row['setup_s'])} s  "
                f"maint {fmt_num(row.get('maint_us'))} µs")
    header = ["queries", "algorithm", "τ", "R-tuples/s", "S-tuples/s", "k / event", "affected / event",
              "work / event", "probes / event", "maint µs/op", "setup s"]
    table = [[f"{r['queries']:,}", r["algorithm"], str(r.get("tau", "")), fmt_num(r["R"]["per_s"]),
              fmt_num(r["S"]["per_s"]), fmt_num(r["R"]["k"]), fmt_num(r["R"]["affected"]), fmt_num(r["R"]["work"]),
              fmt_num(r["R"]["probes"]), fmt_num(r.get("maint_us")), fmt_num(r["setup_s"])] for r in rows]
    print()
    print(md_table(header, table))
    log(f"load average at end {load_avg()}")


if __name__ == "__main__":
    main()
