"""Smoke benchmark of the per-tuple plan router (003 §4.5, §4.6.7, Figures 4.13–4.14): throughput of incoming R
tuples under DYNAMIC, each static plan and OPT, and DYNAMIC's decision breakdown, on Table 4.1-shaped
workloads at 100K-tuple tables.  Not the full bench/joins.py (issue 5).

Workloads (:func:`sparksub.operators.joins.router.synthetic_workload`; the OCR of Table 4.1 lost μ / σ, the values
are bench/select_joins_smoke.py's): R.A, S.C ~ Uni(0, 10000), R.B ~ Uni{0..10000}, S.B ~ round(N(5000, 1000));
query A midpoints N(5000, 1500), C midpoints Uni(0, 10000), lengths |N(L, L/5)| with L = 1000 (an incoming
tuple passes ~10% of the R.A selections) or 100 (~1%).  Incoming R tuples drawn like R.

Per mode: ``probe_r`` (matches found, tables unchanged: output excluded as in 003 §4.6) over the same events,
up to ``--events`` or ``--seconds`` per mode; the modes interleaved ``--chunk`` events at a time (the order
rotating), so that load from other processes on the 2 shared cores hits every mode alike; ``--repeats``
such runs, the median rate kept.  DYNAMIC reads its picks from the router's decision table; "DYNAMIC/formula"
evaluates every cost formula per tuple instead (the same picks up to the table's lazy refresh, plus the
per-tuple cost of the formulas; shown only for a router that has ``set_decision``).  OPT runs every plan on
each tuple and keeps the cheapest measured; its throughput is events / Σ per-tuple minimum (the paper's
simulated OPT), its wall time is not.  That Σ leaves out everything outside the plans (``probe_r``'s checks,
the routing bookkeeping) and times the later plans of a tuple with its data already in cache, so
"OPT/replay" also routes every tuple to OPT's pick for it and times that like DYNAMIC (wall clock through
``probe_r``): the throughput a router that always picked OPT's plan would get.  Coefficients: the calibration
file (``sparksub calibrate-router``), else the builtin ones.

    python bench/router_smoke.py                          # the three workloads below
    python bench/router_smoke.py --workloads 10000:1000 --seconds 2
    python bench/router_smoke.py --events 2000 --seconds 3    # router.py's figures: 3 runs, medians
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import load_avg  # noqa: E402

from sparksub.operators.joins.router import (DYNAMIC, OPT, PAPER_PLANS, CostModel, Router,  # noqa: E402
                                       default_coefficients_path, synthetic_workload)

DOMAIN = 10_000
DYNAMIC_FORMULA = "DYNAMIC/formula"
OPT_REPLAY = "OPT/replay"


def _configure(router: Router, mode: str) -> None:
    if hasattr(router, "set_decision"):  # absent from the router before the decision table
        router.set_decision("formula" if mode == DYNAMIC_FORMULA else "table")
    router.set_mode(DYNAMIC if mode == DYNAMIC_FORMULA else mode)


def run_interleaved(router: Router, modes: list[str], events, seconds: float, chunk: int) -> dict:
    """Every mode over the same events, interleaved chunk by chunk (``chunk`` events per mode in turn, the
    order rotating), until the events or ``seconds`` × len(modes) run out: a load burst from other processes
    on the shared cores then slows every mode alike instead of whichever ran during it."""
    acc = {m: {"events": 0, "wall": 0.0, "decisions": Counter(), "oracle": 0.0, "agree": 0} for m in modes}
    rotating = [m for m in modes if m != OPT]
    gc.collect()
    gc.freeze()
    deadline = time.perf_counter() + seconds * len(modes)
    for k, i in enumerate(range(0, len(events), chunk)):
        part = events[i:i + chunk]
        picks = []
        # OPT first (its picks are OPT/replay's), then the others in rotating order
        for mode in [OPT] + rotating[k % len(rotating):] + rotating[:k % len(rotating)]:
            router.reset_stats()
            if mode == OPT_REPLAY:  # OPT's picks routed and timed like DYNAMIC's
                t0 = time.perf_counter()
                for (a, b), pick in zip(part, picks):
                    router.set_mode(pick)
                    router.probe_r(a, b)
            else:
                _configure(router, mode)
                t0 = time.perf_counter()
                if mode == OPT:
                    for a, b in part:
                        router.probe_r(a, b)
                        picks.append(router.recent[-1][1])
                else:
                    for a, b in part:
                        router.probe_r(a, b)
            a_ = acc[mode]
            a_["wall"] += time.perf_counter() - t0
            a_["events"] += len(part)
            a_["decisions"].update(router.decisions)
            if mode == OPT:
                a_["oracle"] += router.oracle_seconds
                a_["agree"] += router.opt_agreements
        if time.perf_counter() > deadline:
            break
    gc.unfreeze()
    out = {}
    for mode, a_ in acc.items():
        n = a_["events"]
        res = {"events": n, "wall": a_["wall"], "rate": n / a_["wall"], "decisions": dict(a_["decisions"])}
        if mode == OPT:
            res["rate"] = n / a_["oracle"]
            res["agree"] = a_["agree"] / n
        out[mode] = res
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
    ap.add_argument("--repeats", type=int, default=1, help="rounds over all modes; the median rate is reported")
    ap.add_argument("--chunk", type=int, default=100, help="events per mode in turn (interleaving)")
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
        modes = [*plans, DYNAMIC, *([DYNAMIC_FORMULA] if hasattr(router, "set_decision") else []), OPT,
                 OPT_REPLAY]
        runs = {mode: [] for mode in modes}
        for _ in range(args.repeats):
            for mode, res in run_interleaved(router, modes, events, args.seconds, args.chunk).items():
                runs[mode].append(res)
        rows = {}
        for mode in modes:
            rates = [r["rate"] for r in runs[mode]]
            res = dict(runs[mode][-1], rate=statistics.median(rates))
            rows[mode] = res
            total = sum(res["decisions"].values())
            share = ", ".join(f"{p} {v / total:.0%}" for p, v in sorted(res["decisions"].items(),
                                                                         key=lambda kv: -kv[1]))
            extra = f"  agrees with DYNAMIC {res['agree']:.0%}" if mode == OPT else ""
            spread = f" [{min(rates):,.0f}-{max(rates):,.0f}]" if len(rates) > 1 else ""
            print(f"  {mode:16s} {res['rate']:>9,.0f} tuples/s{spread}  ({res['events']:,} events)"
                  + (f"  decisions: {share}" if mode in (DYNAMIC, DYNAMIC_FORMULA, OPT) else "") + extra, flush=True)
        best = max(plans, key=lambda p: rows[p]["rate"])
        dyn, opt = rows[DYNAMIC]["rate"], rows[OPT]["rate"]
        dyn_f = rows[DYNAMIC_FORMULA]["rate"] if DYNAMIC_FORMULA in rows else float("nan")
        replay = rows[OPT_REPLAY]["rate"]
        summary.append((spec, best, rows[best]["rate"], dyn, dyn_f, opt, replay))
        print(f"  DYNAMIC / best static ({best}) = {dyn / rows[best]['rate']:.2f}, DYNAMIC / OPT = {dyn / opt:.2f},"
              f" DYNAMIC / OPT replayed = {dyn / replay:.2f} (DYNAMIC/formula / best static ="
              f" {dyn_f / rows[best]['rate']:.2f}); decision-table refreshes {getattr(router, 'table_refreshes', '-')}")
    print("\nworkload (queries:A length) | best static | best static/s | DYNAMIC/s | DYNAMIC/formula/s | OPT/s"
          " | OPT replayed/s | DYN/best | DYN/OPT | DYN/OPT replayed")
    for spec, best, b, d, df, o, rp in summary:
        print(f"{spec} | {best} | {b:,.0f} | {d:,.0f} | {df:,.0f} | {o:,.0f} | {rp:,.0f} | {d / b:.2f} | {d / o:.2f}"
              f" | {d / rp:.2f}")
    print(f"\nload average at end: {load_avg()}")


if __name__ == "__main__":
    main()
