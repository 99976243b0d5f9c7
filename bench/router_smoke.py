"""Smoke benchmark of the per-tuple plan router (003 §4.5, §4.6.7, Figures 4.13–4.14): throughput of incoming R
tuples under DYNAMIC, each static plan and OPT, and DYNAMIC's decision breakdown, on Table 4.1-shaped
workloads at 100K-tuple tables.  Not the full bench/joins.py (issue 5).

Workloads (:func:`sparksub.operators.router.synthetic_workload`; the OCR of Table 4.1 lost μ / σ, the values
are bench/select_joins_smoke.py's): R.A, S.C ~ Uni(0, 10000), R.B ~ Uni{0..10000}, S.B ~ round(N(5000, 1000));
query A midpoints N(5000, 1500), C midpoints Uni(0, 10000), lengths |N(L, L/5)| with L = 1000 (an incoming
tuple passes ~10% of the R.A selections) or 100 (~1%).  Incoming R tuples drawn like R.

Per mode: ``probe_r`` (matches found, tables unchanged: output excluded as in 003 §4.6) over the same events,
up to ``--events`` or ``--seconds``.  OPT runs every plan on each tuple and keeps the cheapest measured; its
throughput is events / Σ per-tuple minimum (the paper's simulated OPT), its wall time is not.  Coefficients:
the calibration file (``sparksub calibrate-router``), else the builtin ones.

    python bench/router_smoke.py                          # the three workloads below
    python bench/router_smoke.py --workloads 10000:1000 --seconds 2
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import load_avg  # noqa: E402

from sparksub.operators.router import (DYNAMIC, OPT, PAPER_PLANS, CostModel, Router,  # noqa: E402
                                       default_coefficients_path, synthetic_workload)

DOMAIN = 10_000


def run_mode(router: Router, mode: str, events, seconds: float) -> dict:
    router.set_mode(mode)
    router.reset_stats()
    gc.collect()
    gc.freeze()
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    for a, b in events:
        router.probe_r(a, b)
        n += 1
        if time.perf_counter() > deadline:
            break
    wall = time.perf_counter() - t0
    gc.unfreeze()
    out = {"events": n, "wall": wall, "rate": n / wall, "decisions": dict(router.decisions)}
    if mode == OPT:
        out["rate"] = n / router.oracle_seconds
        out["agree"] = router.opt_agreements / n
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="10000:1000,100000:1000,100000:100",
                    help="comma-separated QUERIES:A_LENGTH (default: %(default)s)")
    ap.add_argument("--tuples", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=3_000)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--plans", default=",".join(PAPER_PLANS))
    ap.add_argument("--coefficients", help="JSON file (default: the calibration file, else builtin)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args(argv)
    model = CostModel.load_or_builtin(args.coefficients)
    src = args.coefficients or (default_coefficients_path() if model.meta.get("source") != "builtin" else "builtin")
    plans = args.plans.split(",")
    print(f"load average at start: {load_avg()}  (2 shared cores: compare ratios)  coefficients: {src}", flush=True)
    summary = []
    for spec in args.workloads.split(","):
        nq, a_len = spec.split(":")
        nq, a_len = int(nq), float(a_len)
        rng = np.random.default_rng(args.seed)
        r_rows, s_rows, q_rows = synthetic_workload(rng, args.tuples, nq, a_length=a_len)
        erng = np.random.default_rng(args.seed + 1)
        events = list(zip(erng.uniform(0, DOMAIN, args.events).tolist(),
                          erng.integers(0, DOMAIN + 1, args.events).tolist()))
        t0 = time.perf_counter()
        router = Router(plans, coefficients=model)
        router.load(r_rows, s_rows)
        router.add_queries(q_rows)
        for p in router.plans.values():  # lazy layouts
            p._probe(0, *events[0])
        print(f"\n{args.tuples:,} tuples, {nq:,} queries, R.A length {a_len:g}: setup {time.perf_counter() - t0:.1f} s,"
              f" hot groups {router.stats()['hot_groups'][0]}", flush=True)
        rows = {}
        for mode in [*plans, DYNAMIC, OPT]:
            res = run_mode(router, mode, events, args.seconds)
            rows[mode] = res
            total = sum(res["decisions"].values())
            share = ", ".join(f"{p} {v / total:.0%}" for p, v in sorted(res["decisions"].items(),
                                                                         key=lambda kv: -kv[1]))
            extra = f"  agrees with DYNAMIC {res['agree']:.0%}" if mode == OPT else ""
            print(f"  {mode:16s} {res['rate']:>9,.0f} tuples/s  ({res['events']:,} events)"
                  + (f"  decisions: {share}" if mode in (DYNAMIC, OPT) else "") + extra, flush=True)
        best = max(plans, key=lambda p: rows[p]["rate"])
        dyn, opt = rows[DYNAMIC]["rate"], rows[OPT]["rate"]
        summary.append((spec, best, rows[best]["rate"], dyn, opt))
        print(f"  DYNAMIC / best static ({best}) = {dyn / rows[best]['rate']:.2f}, DYNAMIC / OPT = {dyn / opt:.2f}")
    print("\nworkload (queries:A length) | best static | best static/s | DYNAMIC/s | OPT/s | DYN/best | DYN/OPT")
    for spec, best, b, d, o in summary:
        print(f"{spec} | {best} | {b:,.0f} | {d:,.0f} | {o:,.0f} | {d / b:.2f} | {d / o:.2f}")
    print(f"\nload average at end: {load_avg()}")


if __name__ == "__main__":
    main()
