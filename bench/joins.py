#!/usr/bin/env python
"""Select-join / band-join / router / histogram benchmark (issue 5, 003 §4.6), beside a Spark SQL baseline::

    python bench/joins.py            # full run (100 -> 100,000 queries, longer cells, 3 router workloads)
    python bench/joins.py --quick    # first cut: shorter cells, fewer points (a few minutes on 2 cores)

Writes ``docs/benchmarks/joins.md`` and ``docs/benchmarks/joins.png`` (``--out DIR`` elsewhere).

Sections (workloads after 003 Table 4.1; the OCR lost μ / σ, ours are those of the smoke scripts):

1. SJ throughput vs number of queries (Figure 4.7): R(A, B), S(B, C) 100,000 tuples each, A, C ~ U(0, 10000),
   R.B ~ U{0..10000}, S.B ~ round(N(5000, 1000)); queries ``R.A in [a1, a2] AND S.C in [c1, c2]``, A midpoints
   N(5000, 1500), C midpoints U(0, 10000), lengths |N(1000, 200)|.  Incoming R tuples through ``probe_r``
   (matches found, tables unchanged: output excluded as in 003 §4.6).  Cells: bench/select_joins_smoke.run_cell.
2. BJ throughput vs number of queries: R.B ~ U(0, 10000), S.B ~ N(5000, 1000), 100,000 tuples each; band
   queries S.B − R.B in [c − |N(0, w)|, c + |N(0, w)|] around 5 cluster centres (w = 0.01, a few pairs per
   affected query); new R tuples, ``output="count"``.  Cells: bench/joins_smoke.run.
3. Router: DYNAMIC vs each static plan vs OPT (003 §4.6.7) on 2–3 workloads (queries : R.A length).
   Cells: bench/router_smoke.run_mode.
4. Histogram error vs buckets (Figure 4.12): SSI-HIST vs EQW (and OPTIMAL on a 300-interval sample) on
   clustered query ranges (6 clusters separated by gaps, Zipf-like sizes) and on the Table 4.1 A ranges.
   Error = mean relative error of the estimated stabbing count over 5,000 uniform points.
5. Spark SQL: an update batch of R tuples joined with the query table and S (what a user does without us),
   beside SJ-SSI's ``insert_r`` on the same data.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt_num, load_avg, log, machine, md_table  # noqa: E402

import joins_smoke  # noqa: E402
import router_smoke  # noqa: E402
import select_joins_smoke as sjs  # noqa: E402
from sparksub.operators.joins import BJMJ, BJSSI, BJDOuter, BJQOuter  # noqa: E402
from sparksub.operators.router import DYNAMIC, OPT, PAPER_PLANS, CostModel, Router, synthetic_workload  # noqa: E402
from sparksub.operators.select_joins import (SJHotspot, SJJoinFirstE, SJJoinFirstS, SJNaive,  # noqa: E402
                                             SJSelectFirst, SJSSI)
from sparksub.operators.ssi import stabbing_number  # noqa: E402
from sparksub.operators.ssi_histograms import EqualWidthHistogram, OptimalHistogram, SSIHistogram  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
DOMAIN = 10_000.0

SJ_ALGOS = {
    "SJ-SSI": SJSSI,
    "SJ-Hotspot": lambda: SJHotspot(alpha=0.01),
    "SJ-SelectFirst": SJSelectFirst,
    "SJ-JoinFirst-E": SJJoinFirstE,
    "SJ-JoinFirst-S": SJJoinFirstS,
    "NAIVE": SJNaive,
}
BJ_ALGOS = {"BJ-SSI": lambda: BJSSI(output="count"), "BJ-QOuter": lambda: BJQOuter(output="count"),
            "BJ-DOuter": lambda: BJDOuter(output="count"), "BJ-MJ": lambda: BJMJ(output="count")}


# ------------------------------------------------------------------------------------------------- 1. SJ
def bench_sj(counts, tuples, events_n, seconds, seed=7):
    rng = np.random.default_rng(seed)
    data = sjs.tables(rng, tuples)
    erng = np.random.default_rng(seed + 1)
    events = list(zip(erng.uniform(0, DOMAIN, events_n).tolist(), erng.integers(0, int(DOMAIN) + 1, events_n).tolist()))
    rows = []
    for nq in counts:
        qrows = sjs.queries(np.random.default_rng(seed + 2 + nq), nq)
        tau = stabbing_number([(r[3], r[4]) for r in qrows])
        for name, make in SJ_ALGOS.items():
            r = sjs.run_cell(make, data, qrows, events, events_n, seconds)
            rows.append({"queries": nq, "algorithm": name, "tau": tau, "probe": r["probe"], "insert": r["insert"],
                         "setup": r["setup"], "visited": r["work"]["queries_visited"],
                         "results": r["work"]["results"], "affected": r["work"]["affected"]})
            log(f"  SJ {nq:>7,} {name:15s} probe/s {r['probe']:>9,.0f} insert/s {r['insert']:>9,.0f} "
                f"setup {r['setup']:.1f}s results/ev {r['work']['results']:,.1f}")
            gc.collect()
    return rows


# ------------------------------------------------------------------------------------------------- 2. BJ
def bench_bj(counts, n_data, budget, max_events, seed=5):
    args = SimpleNamespace(budget=budget, min_events=2, max_events=max_events, maint=0)
    rows = []
    for nq in counts:
        data = joins_smoke.workload(n_data, nq, 5, 0.01, seed)
        for name, make in BJ_ALGOS.items():
            r = joins_smoke.run(make, data, args, name)
            rows.append({"queries": nq, "algorithm": name, "tau": r.get("tau"), "R": r["R"]["per_s"],
                         "S": r["S"]["per_s"], "events": r["R"]["events"], "k": r["R"]["k"],
                         "setup": r["setup_s"]})
            log(f"  BJ {nq:>7,} {name:10s} R/s {r['R']['per_s']:>10,.1f} S/s {r['S']['per_s']:>10,.1f} "
                f"({r['R']['events']} ev) k {r['R']['k']:.2f} setup {r['setup_s']:.1f}s")
            gc.collect()
    return rows


# ------------------------------------------------------------------------------------------------- 3. router
def bench_router(workloads, tuples, events_n, seconds, seed=11):
    model = CostModel.load_or_builtin(None)
    out = []
    for nq, a_len in workloads:
        rng = np.random.default_rng(seed)
        r_rows, s_rows, q_rows = synthetic_workload(rng, tuples, nq, a_length=a_len)
        erng = np.random.default_rng(seed + 1)
        events = list(zip(erng.uniform(0, DOMAIN, events_n).tolist(),
                          erng.integers(0, int(DOMAIN) + 1, events_n).tolist()))
        router = Router(list(PAPER_PLANS), coefficients=model)
        router.load(r_rows, s_rows)
        router.add_queries(q_rows)
        for p in router.plans.values():
            p._probe(0, *events[0])
        res = {}
        for mode in [*PAPER_PLANS, DYNAMIC, OPT]:
            res[mode] = router_smoke.run_mode(router, mode, events, seconds)
            log(f"  router {nq:,}:{a_len:g} {mode:15s} {res[mode]['rate']:>9,.0f}/s ({res[mode]['events']} ev)")
        best = max(PAPER_PLANS, key=lambda p: res[p]["rate"])
        dec = res[DYNAMIC]["decisions"]
        tot = max(sum(dec.values()), 1)
        out.append({"queries": nq, "a_len": a_len, "rates": {m: res[m]["rate"] for m in res}, "best": best,
                    "dyn": res[DYNAMIC]["rate"], "opt": res[OPT]["rate"], "agree": res[OPT].get("agree"),
                    "decisions": {p: v / tot for p, v in dec.items()},
                    "model": model.meta.get("source", "calibration file")})
        del router
        gc.collect()
    return out


# ------------------------------------------------------------------------------------------------- 4. histograms
def clustered(rng, n, clusters=6, width=200.0):
    """Query ranges around a few popular values (Zipf-like group sizes), separated by gaps (tests' generator)."""
    centres = np.sort(rng.choice(np.arange(1, clusters * 4) * DOMAIN / (clusters * 4), clusters, replace=False))
    share = 1.0 / np.arange(1, clusters + 1)
    c = rng.choice(centres, n, p=share / share.sum())
    return np.column_stack([c - rng.uniform(0, width, n), c + rng.uniform(0, width, n)])


def table41(rng, n):
    mid = rng.normal(5000, 1500, n)
    ln = np.abs(rng.normal(1000, 200, n))
    return np.column_stack([mid - ln / 2, mid + ln / 2])


def bench_hist(n, buckets, sample_n, seed=3):
    dom = (0.0, DOMAIN)
    out = []
    for wname, gen in (("clustered (6 groups, gaps)", clustered), ("Table 4.1 A ranges", table41)):
        rng = np.random.default_rng(seed)
        ivs = gen(rng, n)
        qs = rng.uniform(0.0, DOMAIN, 5000)
        sample = ivs[rng.choice(n, sample_n, replace=False)]
        tau = stabbing_number([tuple(x) for x in ivs.tolist()])
        for k in buckets:
            t0 = time.perf_counter()
            s = SSIHistogram(ivs, k, domain=dom)
            ts = time.perf_counter() - t0
            e = EqualWidthHistogram.from_intervals(ivs, k, domain=dom)
            o = OptimalHistogram(sample, k, domain=dom)
            so = SSIHistogram(sample, k, domain=dom)
            eo = EqualWidthHistogram.from_intervals(sample, k, domain=dom)
            row = {"workload": wname, "tau": tau, "k": k, "ssi": s.error(ivs, qs), "eqw": e.error(ivs, qs),
                   "ssi_s": so.error(sample, qs), "eqw_s": eo.error(sample, qs), "opt_s": o.error(sample, qs),
                   "build_s": ts}
            out.append(row)
            log(f"  hist {wname} k={k}: SSI {row['ssi']:.3f} EQW {row['eqw']:.3f} | sample SSI {row['ssi_s']:.3f} "
                f"EQW {row['eqw_s']:.3f} OPT {row['opt_s']:.3f}")
    return out


# ------------------------------------------------------------------------------------------------- 5. Spark SQL
def bench_spark(n_tuples, nq, batch, warmup, timed, seed=21):
    from sparksub.engine import spark_session

    rng = np.random.default_rng(seed)
    ra, rb, sb, sc = sjs.tables(rng, n_tuples)
    qrows = sjs.queries(np.random.default_rng(seed + 1), nq)
    q = np.array([r[1:] for r in qrows])
    erng = np.random.default_rng(seed + 2)
    n_ev = batch * (warmup + timed)
    ea, eb = erng.uniform(0, DOMAIN, n_ev), erng.integers(0, int(DOMAIN) + 1, n_ev)
    t0 = time.perf_counter()
    spark = spark_session("local[2]", "sparksub-bench-joins")
    spark.sparkContext.setLogLevel("ERROR")
    start_s = time.perf_counter() - t0
    spark.createDataFrame(pa.table({"sid": np.arange(n_tuples), "b": sb, "c": sc})).cache() \
        .createOrReplaceTempView("s")
    spark.createDataFrame(pa.table({"qid": np.arange(nq), "a1": q[:, 0], "a2": q[:, 1], "c1": q[:, 2],
                                    "c2": q[:, 3]})).cache().createOrReplaceTempView("queries")
    spark.table("s").count()
    spark.table("queries").count()
    times, results = [], []
    for b in range(warmup + timed):
        lo, hi = b * batch, (b + 1) * batch
        t0 = time.perf_counter()
        spark.createDataFrame(pa.table({"rid": np.arange(lo, hi), "a": ea[lo:hi], "b": eb[lo:hi]})) \
            .createOrReplaceTempView("updates")
        cnt = spark.sql("""SELECT COUNT(*) AS n FROM updates u JOIN queries q ON u.a BETWEEN q.a1 AND q.a2
                           JOIN s ON s.b = u.b AND s.c BETWEEN q.c1 AND q.c2""").collect()[0]["n"]
        dt = time.perf_counter() - t0
        log(f"  Spark SQL batch {b + 1}/{warmup + timed}: {dt:.2f} s, {cnt:,} result tuples")
        if b >= warmup:
            times.append(dt)
            results.append(cnt)
    spark.stop()
    # ours: SJ-SSI on the same tables, queries and events (insert_r builds the result dicts; R grows as in a stream,
    # S fixed: Spark's join above is of each batch against the initial tables, identical since events only touch R)
    algo = SJSSI()
    sjs.load(algo, (ra, rb, sb, sc))
    algo.add_queries(qrows)
    algo.probe_r(float(ea[0]), int(eb[0]))
    ours_t, ours_res = [], []
    for b in range(warmup + timed):
        lo, hi = b * batch, (b + 1) * batch
        n = 0
        t0 = time.perf_counter()
        for i in range(lo, hi):
            out = algo.insert_r(("new", i), float(ea[i]), int(eb[i]))
            n += sum(len(v) for v in out.values())
        dt = time.perf_counter() - t0
        if b >= warmup:
            ours_t.append(dt)
            ours_res.append(n)
    med, med_o = statistics.median(times), statistics.median(ours_t)
    res = {"tuples": n_tuples, "queries": nq, "batch": batch, "warmup": warmup, "timed": timed, "start_s": start_s,
           "median_s": med, "eps": batch / med, "ours_s": med_o, "ours_eps": batch / med_o,
           "results": statistics.median(results), "agrees": results == ours_res}
    log(f"  Spark {res['eps']:,.0f} events/s vs SJ-SSI {res['ours_eps']:,.0f} events/s; results agree: {res['agrees']}")
    return res


# ------------------------------------------------------------------------------------------------- report
def plot(sj, bj, hist, router, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(12, 8.5))
    a = ax[0, 0]
    for name in SJ_ALGOS:
        pts = [(r["queries"], r["probe"]) for r in sj if r["algorithm"] == name]
        a.plot(*zip(*pts), "o-", label=name)
    a.set_title("SJ: incoming R tuples/s vs queries (Fig. 4.7-like)", fontsize=10)
    a.set_ylabel("tuples / s")
    a = ax[0, 1]
    for name in BJ_ALGOS:
        pts = [(r["queries"], r["R"]) for r in bj if r["algorithm"] == name]
        a.plot(*zip(*pts), "o-", label=name)
    a.set_title("BJ: incoming R tuples/s vs queries", fontsize=10)
    for a in (ax[0, 0], ax[0, 1]):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("queries")
    a = ax[1, 0]
    for wl in dict.fromkeys(r["workload"] for r in hist):
        rr = [r for r in hist if r["workload"] == wl]
        ks = [r["k"] for r in rr]
        l1, = a.plot(ks, [r["ssi"] for r in rr], "o-", label=f"SSI-HIST, {wl}")
        a.plot(ks, [r["eqw"] for r in rr], "s--", color=l1.get_color(), label=f"EQW, {wl}")
    a.set_yscale("log")
    a.set_xlabel("buckets")
    a.set_ylabel("mean relative error")
    a.set_title("Histogram error vs buckets (Fig. 4.12-like)", fontsize=10)
    a = ax[1, 1]
    labels = [f"{w['queries']//1000}K:{w['a_len']:g}" for w in router]
    modes = [*PAPER_PLANS, DYNAMIC, OPT]
    width = 0.8 / len(modes)
    for j, m in enumerate(modes):
        a.bar(np.arange(len(router)) + j * width, [w["rates"][m] for w in router], width, label=m)
    a.set_xticks(np.arange(len(router)) + 0.4 - width / 2)
    a.set_xticklabels(labels)
    a.set_yscale("log")
    a.set_xlabel("workload (queries : R.A length)")
    a.set_ylabel("tuples / s")
    a.set_title("Router: static plans vs DYNAMIC vs OPT", fontsize=10)
    for a in ax.flat:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def sj_rate(sj, nq, name):
    return next(r["probe"] for r in sj if r["queries"] == nq and r["algorithm"] == name)


def bj_rate(bj, nq, name):
    return next(r["R"] for r in bj if r["queries"] == nq and r["algorithm"] == name)


def make_targets(sj, bj, router, hist):
    t = []
    q0, q1 = min(r["queries"] for r in sj), max(r["queries"] for r in sj)
    a, b = sj_rate(sj, q0, "SJ-SSI"), sj_rate(sj, q1, "SJ-SSI")
    drop = 1 - b / a
    t.append((f"SJ-SSI throughput falls < 20% from {q0:,} to {q1:,} queries", drop < 0.2,
              f"{a:,.0f} -> {b:,.0f} tuples/s ({100 * drop:.0f}% drop)"))
    je, js = sj_rate(sj, q1, "SJ-JoinFirst-E"), sj_rate(sj, q1, "SJ-JoinFirst-S")
    t.append((f"SJ-JoinFirst (-E and -S) < 5% of SJ-SSI at {q1:,} queries", max(je, js) < 0.05 * b,
              f"-E {100 * je / b:.1f}%, -S {100 * js / b:.1f}%"))
    qb = max(r["queries"] for r in bj)
    s = bj_rate(bj, qb, "BJ-SSI")
    mj, qo = bj_rate(bj, qb, "BJ-MJ"), bj_rate(bj, qb, "BJ-QOuter")
    t.append((f"BJ-SSI orders of magnitude (>= 100x) above BJ-MJ and BJ-QOuter at {qb:,} queries",
              s >= 100 * mj and s >= 100 * qo, f"{s / mj:,.0f}x BJ-MJ, {s / qo:,.0f}x BJ-QOuter"))
    ok1 = all(w["dyn"] >= w["rates"][w["best"]] for w in router)
    t.append(("DYNAMIC >= the best static plan on every workload", ok1,
              ", ".join(f"{w['queries'] // 1000}K:{w['a_len']:g} {w['dyn'] / w['rates'][w['best']]:.3f}x "
                        f"({w['best']})" for w in router)))
    ok2 = all(w["dyn"] >= 0.8 * w["opt"] for w in router)
    t.append(("DYNAMIC >= 80% of OPT on every workload", ok2,
              ", ".join(f"{w['queries'] // 1000}K:{w['a_len']:g} {100 * w['dyn'] / w['opt']:.0f}%" for w in router)))
    for wl in dict.fromkeys(r["workload"] for r in hist):
        r20 = next((r for r in hist if r["workload"] == wl and r["k"] == 20), None)
        r50 = next((r for r in hist if r["workload"] == wl and r["k"] == 50), None)
        if r20 and r50:
            t.append((f"SSI-HIST error at 20 buckets < EQW's at 50 ({wl})", r20["ssi"] < r50["eqw"],
                      f"{r20['ssi']:.3f} vs {r50['eqw']:.3f}"))
    return t


def report(info, quick, cfg, sj, bj, router, hist, spark_r, targets, elapsed) -> str:
    L = ["# Join benchmark: select-joins, band joins, the plan router, SSI histograms, beside Spark SQL\n"]
    L.append(f"Generated by `python bench/joins.py{' --quick' if quick else ''}` on {info['date']} (total "
             f"{elapsed / 60:.1f} min).\n")
    if quick:
        L.append("**This is the quick mode** (a first cut of issue 5's benchmark): short timed cells "
                 f"({cfg['sj_seconds']:g} s per SJ cell, {cfg['bj_budget']:g} s per BJ cell and direction, "
                 f"{cfg['rt_seconds']:g} s per router mode), {len(cfg['router'])} router workloads, and a small Spark "
                 "baseline. The full mode (`python bench/joins.py`) runs longer cells (3 s / 3 s / 4 s), adds the "
                 "500K-query SJ and BJ points and the 100,000:1000 router workload, and more Spark batches; not yet "
                 "covered in either mode: the stabbing-group and selectivity sweeps (Figs. 4.8, 4.10), hotspot "
                 "coverage (4.9), maintenance cost (4.11) and the kj/ks decision sweeps (4.15–4.21).\n")
    L.append(f"**Machine**: {info['platform']}; {info['cpu_count']} CPUs ({info['cpu']}); Python {info['python']}, "
             f"pyspark {info['pyspark']}, numpy {info['numpy']}. Load average (1/5/15 min): {info['load_start']} at "
             f"start, {info['load_end']} at end. All our operators run pure Python on one core; throughputs are "
             f"wall-clock and shift with load, so compare ratios within a table.\n")
    L.append("**Workloads** (003 Table 4.1 shape; the OCR lost its μ / σ, ours are stated): "
             f"SJ: R(A, B), S(B, C), {cfg['sj_tuples']:,} tuples each, A, C ~ U(0, 10000), R.B ~ U{{0..10000}}, "
             "S.B ~ round(N(5000, 1000)); queries `R.A BETWEEN a1 AND a2 AND S.C BETWEEN c1 AND c2 AND R.B = S.B`, "
             "A midpoints N(5000, 1500), C midpoints U(0, 10000), both lengths |N(1000, 200)| (a tuple passes ~10% "
             "of the A selections). Events: new R tuples drawn like R, through `probe_r` (matches found, output "
             "not built, tables unchanged: 003 §4.6's output-free timing). "
             f"BJ: R.B ~ U(0, 10000), S.B ~ N(5000, 1000), {cfg['bj_tuples']:,} tuples each; band queries "
             "S.B − R.B in [c − |N(0, 0.01)|, c + |N(0, 0.01)|] around 5 centres c ~ U(−4000, 4000) (5 stabbing "
             "groups, a few pairs per affected query); new R tuples then new S tuples, `output=\"count\"`. "
             "Router: the SJ workload with R.A length 1000 or 100, plans "
             f"{', '.join(PAPER_PLANS)}; OPT's rate is events / Σ per-tuple minimum over the plans (simulated, as "
             "the paper's). Histograms: 100,000 intervals; error = mean relative error |h(x) − f(x)| / max(f(x), 1) "
             "over 5,000 uniform points; OPTIMAL is the DP on a 300-interval sample (compared with SSI/EQW built "
             "on the same sample).\n")
    L.append("## Targets\n")
    L.append(md_table(["target", "result", "measured"],
                      [[n, "**PASS**" if ok else "**FAIL**", v] for n, ok, v in targets]) + "\n")
    # 1
    L.append("## 1. Select-joins: throughput vs number of queries (Fig. 4.7)\n")
    L.append("Incoming R tuples / s through `probe_r` (and `insert_r`, which also builds the result dicts), "
             "τ = stabbing number of the C ranges, setup = registering the queries + the first probe, results / "
             "event = matched (query, S tuple) pairs. Ratio = probe/s over SJ-SSI's at the same query count.\n")
    rows = []
    for r in sj:
        ssi = sj_rate(sj, r["queries"], "SJ-SSI")
        rows.append([f"{r['queries']:,}", r["algorithm"], str(r["tau"]), fmt_num(r["probe"]), fmt_num(r["insert"]),
                     f"{r['probe'] / ssi:.3g}", fmt_num(r["setup"]), fmt_num(r["visited"]), fmt_num(r["affected"]),
                     fmt_num(r["results"])])
    L.append(md_table(["queries", "algorithm", "τ", "probe/s", "insert/s", "÷ SJ-SSI", "setup s",
                       "queries visited / event", "affected queries / event", "results / event"], rows) + "\n")
    big = [r for r in sj if r["queries"] == max(x["queries"] for x in sj) and r["algorithm"] == "SJ-SSI"][0]
    small = [r for r in sj if r["queries"] == min(x["queries"] for x in sj) and r["algorithm"] == "SJ-SSI"][0]
    L.append(f"Reading: on this workload the affected queries per event grow linearly with the query count "
             f"({fmt_num(small['affected'])} at {small['queries']:,} queries, {fmt_num(big['affected'])} at "
             f"{big['queries']:,}) and the matched pairs with them ({fmt_num(small['results'])} -> "
             f"{fmt_num(big['results'])}); `probe_r` returns one slot per affected query, so even output-free "
             "it does work proportional to the affected queries, and SJ-SSI's rate cannot stay flat here. The "
             "paper's < 20% drop presumably excludes that part entirely (or uses far more selective queries); "
             "the target is reported as measured. Cells are time-limited, so the slower algorithms average over "
             "a shorter prefix of the same events (hence slightly different results / event at 100K).\n")
    # 2
    L.append("## 2. Band joins: throughput vs number of queries\n")
    L.append("Events / s per direction (each algorithm runs until its time budget, at least 2 events), k = pairs "
             "per R event, ratio = BJ-SSI's R rate over the algorithm's.\n")
    rows = []
    for r in bj:
        s = bj_rate(bj, r["queries"], "BJ-SSI")
        rows.append([f"{r['queries']:,}", r["algorithm"], str(r["tau"] or ""), fmt_num(r["R"]), fmt_num(r["S"]),
                     str(r["events"]), fmt_num(r["k"]), f"{s / r['R']:,.3g}", fmt_num(r["setup"])])
    L.append(md_table(["queries", "algorithm", "τ", "R-tuples/s", "S-tuples/s", "R events timed", "k / event",
                       "BJ-SSI ÷", "setup s"], rows) + "\n")
    L.append("Reading: k (pairs per event, counted not built) grows with the query count, from "
             f"{fmt_num(bj[0]['k'])} at {bj[0]['queries']:,} queries to {fmt_num(bj[-1]['k'])} at "
             f"{bj[-1]['queries']:,}; BJ-SSI's per-event work follows it, so its margin over the baselines narrows "
             "as k grows. The slow baselines are timed on only a handful of events at 100K (column 'R events "
             "timed'): their rates are rough.\n")
    # 3
    L.append("## 3. Plan router: DYNAMIC vs static plans vs OPT (003 §4.6.7)\n")
    L.append(f"Incoming R tuples / s (`probe_r`), cost-model coefficients from: {router[0]['model'] if router else ''} (the calibration file if present, else the builtin ones). "
             "Decisions = DYNAMIC's share of tuples per plan; agree = share of tuples where OPT's cheapest plan is "
             "DYNAMIC's choice.\n")
    rows = []
    for w in router:
        best = w["rates"][w["best"]]
        rows.append([f"{w['queries']:,} : {w['a_len']:g}"] + [fmt_num(w["rates"][p]) for p in PAPER_PLANS]
                    + [fmt_num(w["dyn"]), fmt_num(w["opt"]), f"{w['dyn'] / best:.3f} ({w['best']})",
                       f"{w['dyn'] / w['opt']:.3f}",
                       ", ".join(f"{p} {v:.0%}" for p, v in sorted(w["decisions"].items(), key=lambda kv: -kv[1])),
                       f"{w['agree']:.0%}" if w["agree"] is not None else "n/a"])
    L.append(md_table(["queries : R.A length", *PAPER_PLANS, "DYNAMIC", "OPT", "DYN ÷ best static", "DYN ÷ OPT",
                       "DYNAMIC decisions", "agree"], rows) + "\n")
    parts = []
    for w in router:
        top = max(w["decisions"].items(), key=lambda kv: kv[1])
        parts.append(f"{w['queries']:,} : {w['a_len']:g}: fastest static plan {w['best']}, DYNAMIC's most frequent "
                     f"choice {top[0]} ({top[1]:.0%}), OPT agrees with DYNAMIC on {w['agree']:.0%} of tuples")
    L.append("Reading: " + "; ".join(parts) + ". Where DYNAMIC trails the best static plan the loss is in the cost "
             "model's decisions (its coefficients), not in routing overhead.")
    odd = [w for w in router if w["opt"] < w["rates"][w["best"]]]
    if odd:
        L.append("Caveat: OPT's simulated rate (each plan timed per tuple while all plans run on it) falls below "
                 "the best static plan's wall-clock rate on " + ", ".join(f"{w['queries']:,} : {w['a_len']:g}"
                                                                          for w in odd)
                 + ", so there DYN ÷ OPT overstates DYNAMIC; DYN ÷ best static is the reliable gauge.")
    L.append("Single short runs on shared cores: differences of a few percent are within noise.\n")
    # 4
    L.append("## 4. Histogram error vs buckets (Fig. 4.12)\n")
    rows = [[r["workload"], str(r["tau"]), str(r["k"]), f"{r['ssi']:.3f}", f"{r['eqw']:.3f}",
             f"{r['eqw'] / r['ssi']:.2f}", f"{r['ssi_s']:.3f}", f"{r['eqw_s']:.3f}", f"{r['opt_s']:.3f}",
             f"{r['build_s']:.2f}"] for r in hist]
    L.append(md_table(["workload", "τ", "buckets", "SSI-HIST", "EQW", "EQW ÷ SSI", "SSI (sample)", "EQW (sample)",
                       "OPTIMAL (sample)", "SSI build s"], rows) + "\n")
    L.append("SSI-HIST wins where the query ranges cluster with gaps between the groups (EQW smears counts into the "
             "gaps) and loses to EQW where the groups overlap into one smooth bump (the Table 4.1 A ranges), as the "
             "module's docstring measured; the targets row is reported per workload.\n")
    # 5
    L.append("## 5. Spark SQL baseline: an update batch joined with the query table\n")
    if spark_r:
        L.append(f"What a user does without us: per batch of {spark_r['batch']:,} new R tuples, "
                 "`updates JOIN queries ON u.a BETWEEN q.a1 AND q.a2 JOIN s ON s.b = u.b AND s.c BETWEEN q.c1 AND "
                 f"q.c2` (COUNT collected), on {spark_r['tuples']:,}-tuple tables and {spark_r['queries']:,} "
                 f"queries, `local[2]`, queries and S cached; {spark_r['warmup']} warm-up batch, median over "
                 f"{spark_r['timed']}. Ours: SJ-SSI `insert_r` (builds every query's new result tuples) on the same "
                 "data and events, one core.\n")
        L.append(md_table(["approach", "median s / batch", "events / s", "result tuples / batch", "ratio"], [
            ["Spark SQL join", f"{spark_r['median_s']:.2f}", fmt_num(spark_r["eps"]), f"{spark_r['results']:,}", "1"],
            ["SJ-SSI (ours)", f"{spark_r['ours_s']:.3f}", fmt_num(spark_r["ours_eps"]), f"{spark_r['results']:,}",
             f"{spark_r['ours_eps'] / spark_r['eps']:,.1f}x"]]) + "\n")
        L.append(f"Result counts per batch agree between Spark and SJ-SSI: **{spark_r['agrees']}**. Spark session "
                 f"start: {spark_r['start_s']:.1f} s (not counted).\n")
    else:
        L.append("Skipped (`--no-spark`).\n")
    L.append("![joins](joins.png)\n")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args(argv)
    quick = args.quick
    started = time.perf_counter()
    info = machine()
    info["load_start"] = load_avg()
    log(f"# join benchmark ({'quick' if quick else 'full'}) — {info['date']}; load {info['load_start']}")
    if quick:
        cfg = dict(sj_counts=[100, 1_000, 10_000, 100_000], sj_tuples=100_000, sj_events=3_000, sj_seconds=1.5,
                   bj_counts=[1_000, 10_000, 100_000], bj_tuples=100_000, bj_budget=1.0, bj_max=2_000,
                   router=[(10_000, 1000.0), (100_000, 100.0)], rt_tuples=100_000, rt_events=3_000, rt_seconds=2.5,
                   hist_buckets=[10, 20, 30, 50, 70], spark=dict(n_tuples=10_000, nq=10_000, batch=1_000, warmup=1,
                                                                 timed=2))
    else:
        cfg = dict(sj_counts=[100, 1_000, 10_000, 100_000, 500_000], sj_tuples=100_000, sj_events=5_000,
                   sj_seconds=3.0, bj_counts=[1_000, 10_000, 100_000, 500_000], bj_tuples=100_000, bj_budget=3.0,
                   bj_max=5_000, router=[(10_000, 1000.0), (100_000, 1000.0), (100_000, 100.0)], rt_tuples=100_000,
                   rt_events=3_000, rt_seconds=4.0, hist_buckets=[10, 20, 30, 50, 70, 100],
                   spark=dict(n_tuples=10_000, nq=10_000, batch=1_000, warmup=1, timed=4))
    log("\n## 4. histograms")
    hist = bench_hist(100_000, cfg["hist_buckets"], 300)
    log("\n## 1. select-joins")
    sj = bench_sj(cfg["sj_counts"], cfg["sj_tuples"], cfg["sj_events"], cfg["sj_seconds"])
    log("\n## 2. band joins")
    bj = bench_bj(cfg["bj_counts"], cfg["bj_tuples"], cfg["bj_budget"], cfg["bj_max"])
    log("\n## 3. router")
    router = bench_router(cfg["router"], cfg["rt_tuples"], cfg["rt_events"], cfg["rt_seconds"])
    spark_r = None
    if not args.no_spark:
        log("\n## 5. Spark SQL")
        spark_r = bench_spark(**cfg["spark"])
    elapsed = time.perf_counter() - started
    info["load_end"] = load_avg()
    targets = make_targets(sj, bj, router, hist)
    if spark_r:
        targets.append(("SJ-SSI faster than the Spark SQL batch join, same result counts",
                        spark_r["ours_eps"] > spark_r["eps"] and spark_r["agrees"],
                        f"{spark_r['ours_eps'] / spark_r['eps']:,.1f}x ({spark_r['ours_eps']:,.0f} vs "
                        f"{spark_r['eps']:,.0f} events/s)"))
    log("\n## Targets")
    for name, ok, val in targets:
        log(f"{'PASS' if ok else 'FAIL'}  {name}: {val}")
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "joins.png"
    plot(sj, bj, hist, router, png)
    (args.out / "joins.md").write_text(report(info, quick, cfg, sj, bj, router, hist, spark_r, targets, elapsed))
    log(f"\nwrote {args.out / 'joins.md'} and {png} ({elapsed / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
