#!/usr/bin/env python
"""Range-DISTINCT and range-aggregate benchmark (000 §4): reformulated messages vs unicast, beside Spark SQL::

    python bench/distinct.py            # full run (<= 10 min on a 2-core machine)
    python bench/distinct.py --quick    # fewer subscriptions and updates (~2 min)

Writes ``docs/benchmarks/distinct.md`` and ``docs/benchmarks/distinct.png`` (``--out DIR`` elsewhere).

Workload (fixed seeds; the range-MIN benchmark's geometry, 000 Table 1): X in [0, 10000], objects uniform;
subscriptions ``[x1, x2]`` with midpoint N(5000, 1500) and length |N(1000, 1000)|, clipped into the domain.

* DISTINCT: ``SELECT DISTINCT cat FROM t WHERE x BETWEEN x1 AND x2``; ``cat`` is one of 50,000 categories drawn
  with Zipf-like weights 1 / (rank + 10) (a few common categories, a long tail of rare ones, so that updates do
  change DISTINCT sets); updates: half re-categorise an object (new category from the same law), half move its X
  by N(0, 50) (reflected at the domain ends);
* aggregates: ``SELECT SUM(y) FROM t WHERE x BETWEEN x1 AND x2`` (``RangeAggCore('sum')``); y uniform in
  [0, 100); updates: half change y (N(0, 5), absolute value), half move X as above.

Approaches: **S-CN** (the core's reformulated messages, routed by a content-based network: the server never
looks at a subscription), **unicast (S-UN)** (the server computes the subscriptions whose result changes and sends
one row each: ``range_distinct.notifications`` / ``range_agg.AggUnicast``), **CN-relax** for DISTINCT (the raw
update to every subscription whose range holds its old or new X), and **Spark SQL** recomputing the results of the
subscriptions whose range holds an updated X, per batch.

``AggUnicast`` is also timed against its previous implementation (one O(m) mask per message and a Python-int sum
per subscription, kept here as ``MaskUnicast``) at the largest m, and on a second workload: 10,000 tuples and
subscriptions with two uniform ends (a third of them hold any given X).
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

import numpy as np
import pyarrow as pa
from common import load_avg, log, machine, md_table

from sparksub.operators.agg import core as range_agg
from sparksub.operators.distinct import core as range_distinct
from sparksub.operators.shared.point_index import PointIndex2D
from sparksub.operators.agg.core import AggUnicast, RangeAggCore
from sparksub.operators.distinct.core import RangeDistinctCore

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
DOMAIN = 10_000.0
N_CATS = 50_000
SEED_OBJ, SEED_SUB, SEED_UPD, SEED_SAMPLE = 5, 6, 7, 8
#: ⟨OP, VALUE, INNER_L, INNER_R, OUTER_L, OUTER_R⟩: op (1 byte) + value (int64) + 4 float64 = 41 B.
DISTINCT_MSG_BYTES = 1 + 8 + 4 * 8
#: a unicast DISTINCT row: subscription id (int64) + op (1 byte) + value (int64) = 17 B.
DISTINCT_ROW_BYTES = 8 + 1 + 8
#: ⟨X, D_COUNT, D_SUM⟩ = 3 x 8 = 24 B; a unicast aggregate row: subscription id + new value = 16 B.
AGG_MSG_BYTES, AGG_ROW_BYTES = 24, 16
#: CN-relax (DISTINCT): the raw update (key, old x, new x, old value, new value) = 5 x 8 = 40 B.
RELAX_BYTES = 40


def make_objects(n: int):
    r = np.random.default_rng(SEED_OBJ)
    w = 1.0 / (np.arange(N_CATS) + 10.0)
    p = w / w.sum()
    return r.uniform(0, DOMAIN, n), r.choice(N_CATS, n, p=p), r.uniform(0, 100, n), p


def make_subs(m: int):
    r = np.random.default_rng(SEED_SUB)
    mid = r.normal(5000.0, 1500.0, m)
    ln = np.abs(r.normal(1000.0, 1000.0, m))
    return np.clip(mid - ln / 2, 0.0, DOMAIN), np.clip(mid + ln / 2, 0.0, DOMAIN)


def _reflect(v):
    v = np.abs(v)
    return np.where(v > DOMAIN, 2 * DOMAIN - v, v)


def make_updates(xs, cats, ys, p, n: int):
    """Per update (key, new x, new cat, new y); each update either moves X or changes the value (cat and y)."""
    r = np.random.default_rng(SEED_UPD)
    x, c, y = xs.copy(), cats.copy(), ys.copy()
    keys = r.integers(0, xs.size, n)
    move = r.random(n) < 0.5
    step = r.normal(0, 50, n)
    newcat = r.choice(N_CATS, n, p=p)
    dy = r.normal(0, 5, n)
    out = np.empty((n, 3))
    for t in range(n):
        i = keys[t]
        if move[t]:
            x[i] = _reflect(x[i] + step[t])
        else:
            c[i] = newcat[t]
            y[i] = abs(y[i] + dy[t])
        out[t] = x[i], c[i], y[i]
    return keys, out[:, 0], out[:, 1].astype(np.int64), out[:, 2]


class Timer:
    def __init__(self):
        self.s = 0.0
        self.c = 0.0

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *a):
        self.s += time.perf_counter() - self.t0
        self.c += time.process_time() - self.c0


# ------------------------------------------------------------------------------------------------- DISTINCT
def run_distinct(xs, cats, x1, x2, upd, n_core, n_uni, sample=200):
    keys, nx, ncat, _ = upd
    core = RangeDistinctCore()
    t0 = time.perf_counter()
    core.load(np.arange(xs.size), xs, cats)
    load_s = time.perf_counter() - t0
    pts = PointIndex2D()
    pts.add_many(np.arange(x1.size), x1, x2)
    r = np.random.default_rng(SEED_SAMPLE)
    sid = r.choice(x1.size, sample, replace=False)
    sets = [core.distinct_values(x1[j], x2[j]) for j in sid]
    sx1, sx2 = x1[sid], x2[sid]
    t_core, t_uni = Timer(), Timer()
    msgs = relax = 0
    notif = affected = 0
    exact_ok = True
    uni_rows_first = 0
    for t in range(n_core):
        i = int(keys[t])
        old = core.get(i)
        with t_core:
            out = core.upsert(i, float(nx[t]), int(ncat[t]))
        msgs += len(out.messages)
        # CN-relax: every subscription whose range holds the old or the new X
        relax += pts.stab_count(old[0]) + (pts.stab_count(float(nx[t])) if old[0] != nx[t] else 0)
        if t < n_uni:
            with t_uni:
                s_idx, m_idx = range_distinct.notifications(x1, x2, out)
            notif += s_idx.size
            affected += np.unique(s_idx).size
            uni_rows_first += s_idx.size
        # sample: apply the matching messages (vectorised match); every matching message must change the set
        for msg in out.messages:
            for q in np.flatnonzero(range_distinct._match_mask(msg, sx1, sx2)).tolist():
                s = sets[q]
                if (msg.value in s) == (msg.op == range_distinct.ADD):
                    exact_ok = False
                if msg.op == range_distinct.ADD:
                    s.add(msg.value)
                else:
                    s.discard(msg.value)
    bad = sum(1 for j, s in zip(sid, sets) if s != core.distinct_values(x1[j], x2[j]))
    return {"updates": n_core, "uni_updates": n_uni, "load_s": load_s,
            "core_us": 1e6 * t_core.s / n_core, "uni_ms": 1e3 * t_uni.s / max(n_uni, 1),
            "msgs": msgs / n_core, "notif": notif / max(n_uni, 1), "affected": affected / max(n_uni, 1),
            "relax": relax / n_core, "ignorable": core.counters["ignorable"] / n_core,
            "bad": bad, "exact_ok": exact_ok}


# ------------------------------------------------------------------------------------------------- SUM
def run_agg(xs, ys, x1, x2, upd, n_core, n_uni, sample=200):
    keys, nx, _, ny = upd
    core = RangeAggCore("sum")
    t0 = time.perf_counter()
    core.load(np.arange(xs.size), xs, ys)
    load_s = time.perf_counter() - t0
    r = np.random.default_rng(SEED_SAMPLE)
    sid = r.choice(x1.size, sample, replace=False)
    states = [core.state(x1[j], x2[j]) for j in sid]
    sx1, sx2 = x1[sid], x2[sid]
    t0 = time.perf_counter()
    uni = AggUnicast("sum", x1, x2, core)
    uni_init_s = time.perf_counter() - t0
    t_core, t_uni = Timer(), Timer()
    uni_bad = None
    msgs = 0
    max_msgs = 0
    for t in range(n_core):
        i = int(keys[t])
        with t_core:
            out = core.upsert(i, float(nx[t]), float(ny[t]))
        msgs += len(out.messages)
        max_msgs = max(max_msgs, len(out.messages))
        if t < n_uni:
            with t_uni:
                uni.apply(out)
            if t == n_uni - 1:  # every subscription's value == the recomputation
                uni_bad = mismatches(uni.values(), core.values(x1, x2))
        for msg in out.messages:
            for q in np.flatnonzero((sx1 <= msg.x) & (msg.x <= sx2)).tolist():
                states[q] = range_agg.apply((msg,), states[q], sx1[q], sx2[q])
    bad = sum(1 for j, s in zip(sid, states) if s != core.state(x1[j], x2[j]))
    return {"updates": n_core, "uni_updates": n_uni, "load_s": load_s, "uni_init_s": uni_init_s,
            "core_us": 1e6 * t_core.s / n_core, "uni_ms": 1e3 * t_uni.s / max(n_uni, 1),
            "uni_cpu_ms": 1e3 * t_uni.c / max(n_uni, 1), "uni_bad": uni_bad,
            "msgs": msgs / n_core, "max_msgs": max_msgs,
            "touched": uni.counters["touched"] / max(n_uni, 1), "notified": uni.counters["notified"] / max(n_uni, 1),
            "dropped": core.counters["dropped"] / n_core, "bad": bad}


def mismatches(a, b) -> int:
    """Entries of two SUM value arrays that differ (NaN = NULL equals NaN)."""
    return int(np.count_nonzero(~((a == b) | (np.isnan(a) & np.isnan(b)))))


class MaskUnicast:
    """``AggUnicast`` as it was before the rectangle index (commit 66cef0f), the "before" of the report: one O(m)
    mask per message, and every subscription's exact sum a Python int in an object array."""

    def __init__(self, kind, x1s, x2s, core):
        self.kind, self.x1, self.x2 = kind, np.asarray(x1s, dtype=np.float64), np.asarray(x2s, dtype=np.float64)
        self.counts, self.sums = core.states(self.x1, self.x2)
        self.counts = self.counts.astype(np.int64)

    def values(self):
        return range_agg._values_of(self.kind, self.counts, self.sums)

    def apply(self, outcome):
        msgs = outcome.messages
        masks = [(self.x1 <= m.x) & (m.x <= self.x2) for m in msgs]
        if not masks:
            return np.empty(0, dtype=np.int64), np.empty(0)
        idx = np.flatnonzero(np.logical_or.reduce(masks))
        dc = np.zeros(len(idx), dtype=np.int64)
        ds = np.zeros(len(idx), dtype=object)
        for m, mask in zip(msgs, masks):
            sel = mask[idx]
            dc[sel] += m.d_count
            ds[sel] += range_agg.exact(m.d_sum)
        old = range_agg._values_of(self.kind, self.counts[idx], self.sums[idx])
        self.counts[idx] += dc
        self.sums[idx] += ds
        new = range_agg._values_of(self.kind, self.counts[idx], self.sums[idx])
        changed = ~((old == new) | (np.isnan(old) & np.isnan(new)))
        return idx[changed], new[changed]


def time_unicast(cls, xs, ys, x1, x2, upd, n):
    """Updates/s (wall and CPU) of a SUM unicast over the first n updates, its relaxed deliveries and value
    changes per update, and its values' mismatches with the recomputation afterwards."""
    keys, nx, _, ny = upd
    core = RangeAggCore("sum")
    core.load(np.arange(xs.size), xs, ys)
    t0 = time.perf_counter()
    uni = cls("sum", x1, x2, core)
    init_s = time.perf_counter() - t0
    tm = Timer()
    rows = 0
    for t in range(n):
        out = core.upsert(int(keys[t]), float(nx[t]), float(ny[t]))
        with tm:
            idx, _ = uni.apply(out)
        rows += idx.size
    touched = uni.counters["touched"] / n if hasattr(uni, "counters") else None
    return {"n": n, "init_s": init_s, "ups": n / tm.s, "cpu_ups": n / tm.c, "touched": touched, "rows": rows / n,
            "bad": mismatches(uni.values(), core.values(x1, x2))}


def make_uniform_subs(m: int):
    """Subscriptions with two uniform ends in [0, 10000] (sorted): a third of them hold a given X on average."""
    r = np.random.default_rng(SEED_SUB)
    a = r.uniform(0.0, DOMAIN, (2, m))
    return a.min(axis=0), a.max(axis=0)


# ------------------------------------------------------------------------------------------------- Spark SQL
def spark_baseline(n_obj, m, batch, warmup, timed):
    from sparksub.engine import spark_session

    xs, cats, ys, p = make_objects(n_obj)
    x1, x2 = make_subs(m)
    upd = make_updates(xs, cats, ys, p, batch * (warmup + timed))
    keys, nx, ncat, ny = upd
    t0 = time.perf_counter()
    spark = spark_session("local[2]", "sparksub-bench-distinct")
    spark.sparkContext.setLogLevel("ERROR")
    start_s = time.perf_counter() - t0
    spark.createDataFrame(pa.table({"okey": np.arange(n_obj), "x": xs, "cat": cats, "y": ys})) \
        .localCheckpoint().createOrReplaceTempView("t")
    spark.createDataFrame(pa.table({"sub_id": np.arange(m), "x1": x1, "x2": x2})).cache() \
        .createOrReplaceTempView("subs")
    spark.table("subs").count()
    q = """SELECT c.sub_id, sort_array(collect_set(t.cat)) AS cats, SUM(t.y) AS s
           FROM {cand} c LEFT JOIN t ON t.x BETWEEN c.x1 AND c.x2 GROUP BY c.sub_id"""
    t0 = time.perf_counter()
    spark.sql(q.format(cand="subs")).localCheckpoint().createOrReplaceTempView("prev")
    initial_s = time.perf_counter() - t0
    times, cands, ch_d, ch_s = [], [], [], []
    for b in range(warmup + timed):
        a, z = b * batch, (b + 1) * batch
        k = keys[a:z]
        t0 = time.perf_counter()
        spark.createDataFrame(pa.table({"okey": k, "old_x": xs[k], "x": nx[a:z], "cat": ncat[a:z], "y": ny[a:z],
                                        "seq": np.arange(a, z)})).createOrReplaceTempView("updates")
        spark.sql("""SELECT t.okey, COALESCE(u.x, t.x) AS x, COALESCE(u.cat, t.cat) AS cat, COALESCE(u.y, t.y) AS y
                     FROM t LEFT JOIN (SELECT okey, max_by(x, seq) AS x, max_by(cat, seq) AS cat, max_by(y, seq) AS y
                     FROM updates GROUP BY okey) u ON t.okey = u.okey""").localCheckpoint().createOrReplaceTempView("t")
        spark.sql("""SELECT s.* FROM subs s LEFT SEMI JOIN updates u
                     ON (u.x BETWEEN s.x1 AND s.x2) OR (u.old_x BETWEEN s.x1 AND s.x2)""").createOrReplaceTempView("cand")
        new = spark.sql(q.format(cand="cand")).localCheckpoint()
        new.createOrReplaceTempView("new")
        row = spark.sql("""SELECT SUM(CASE WHEN NOT (n.cats <=> p.cats) THEN 1 ELSE 0 END) AS d,
                                  SUM(CASE WHEN NOT (n.s <=> p.s) THEN 1 ELSE 0 END) AS s, COUNT(*) AS c
                           FROM new n JOIN prev p ON n.sub_id = p.sub_id""").collect()[0]
        spark.sql("""SELECT p.sub_id, COALESCE(n.cats, p.cats) AS cats, CASE WHEN n.sub_id IS NULL THEN p.s ELSE n.s END
                     AS s FROM prev p LEFT JOIN new n ON p.sub_id = n.sub_id""").localCheckpoint() \
            .createOrReplaceTempView("prev")
        dt = time.perf_counter() - t0
        # the (per-batch) pre-update X of the later batches: objects moved in earlier batches
        xs = xs.copy()
        xs[k] = nx[a:z]
        if b >= warmup:
            times.append(dt)
            cands.append(row["c"])
            ch_d.append(row["d"])
            ch_s.append(row["s"])
        log(f"  Spark SQL batch {b + 1}/{warmup + timed}: {dt:.1f} s, {row['c']:,} candidates, {row['d']:,} DISTINCT "
            f"and {row['s']:,} SUM results changed")
    final = {r["sub_id"]: set(r["cats"]) for r in spark.sql("SELECT * FROM prev WHERE sub_id < 100").collect()}
    spark.stop()
    med = statistics.median(times)
    res = {"objects": n_obj, "subs": m, "batch": batch, "warmup": warmup, "timed": timed, "start_s": start_s,
           "initial_s": initial_s, "median_s": med, "ups": batch / med, "candidates": statistics.median(cands),
           "changed_d": statistics.median(ch_d), "changed_s": statistics.median(ch_s)}
    # ours on the same data and batches (pure, one core): both cores, S-CN
    xs0, cats0, ys0, _ = make_objects(n_obj)
    dc, ac = RangeDistinctCore(), RangeAggCore("sum")
    dc.load(np.arange(n_obj), xs0, cats0)
    ac.load(np.arange(n_obj), xs0, ys0)
    ts = []
    for b in range(warmup + timed):
        t0 = time.perf_counter()
        for t in range(b * batch, (b + 1) * batch):
            i = int(keys[t])
            dc.upsert(i, float(nx[t]), int(ncat[t]))
            ac.upsert(i, float(nx[t]), float(ny[t]))
        if b >= warmup:
            ts.append(time.perf_counter() - t0)
    med_o = statistics.median(ts)
    res["ours_ups"] = batch / med_o
    res["ours_s"] = med_o
    res["agrees"] = all(dc.distinct_values(x1[s], x2[s]) == final[s] for s in final)
    log(f"  ours (DISTINCT + SUM cores): {batch / med_o:,.0f} updates/s; agrees with Spark: {res['agrees']}")
    return res


# ------------------------------------------------------------------------------------------------- report
def plot(rows, path: Path, before=None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
    ms = [r["m"] for r in rows]
    a1.plot(ms, [r["d"]["msgs"] for r in rows], "o-", label="DISTINCT S-CN messages")
    a1.plot(ms, [r["d"]["notif"] for r in rows], "o-", label="DISTINCT unicast rows")
    a1.plot(ms, [r["d"]["relax"] for r in rows], "o-", label="DISTINCT CN-relax deliveries")
    a1.plot(ms, [r["a"]["msgs"] for r in rows], "s--", label="SUM S-CN messages")
    a1.plot(ms, [r["a"]["notified"] for r in rows], "s--", label="SUM unicast rows (value changed)")
    a1.set_yscale("log")
    a1.set_xscale("log")
    a1.set_xlabel("subscriptions")
    a1.set_ylabel("per update")
    a1.set_title("Messages / rows / deliveries per update", fontsize=10)
    a1.legend(fontsize=8)
    a2.plot(ms, [1e6 / r["d"]["core_us"] for r in rows], "o-", label="DISTINCT S-CN core")
    a2.plot(ms, [1e3 / r["d"]["uni_ms"] for r in rows], "o-", label="DISTINCT unicast")
    a2.plot(ms, [1e6 / r["a"]["core_us"] for r in rows], "s--", label="SUM S-CN core")
    a2.plot(ms, [1e3 / r["a"]["uni_ms"] for r in rows], "s--", label="SUM unicast (AggUnicast)")
    a2.plot(ms, [1e3 / r["a"]["uni_cpu_ms"] for r in rows], "s:", label="SUM unicast (AggUnicast), CPU time")
    if before:
        a2.plot([ms[-1]], [before["ups"]], "kx", markersize=9, label="SUM unicast before (one mask per message)")
    a2.set_yscale("log")
    a2.set_xscale("log")
    a2.set_xlabel("subscriptions")
    a2.set_ylabel("updates / s (one core)")
    a2.set_title("Server throughput", fontsize=10)
    a2.legend(fontsize=8)
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
    log(f"# range-DISTINCT / range-SUM benchmark ({'quick' if quick else 'full'}) — {info['date']}; "
        f"load {info['load_start']}")
    n_obj = 100_000
    if quick:
        ms, n_core, n_uni, n_agg_uni, n_before, n_unif = [100_000, 200_000], 5_000, 300, 500, 5, 300
        sp = dict(n_obj=5_000, m=2_000, batch=500, warmup=1, timed=1)
    else:
        ms, n_core, n_uni, n_agg_uni, n_before, n_unif = [100_000, 300_000, 1_000_000], 10_000, 500, 2_000, 10, 1_000
        sp = dict(n_obj=10_000, m=5_000, batch=1_000, warmup=1, timed=2)
    xs, cats, ys, p = make_objects(n_obj)
    upd = make_updates(xs, cats, ys, p, n_core)
    x1a, x2a = make_subs(max(ms))
    rows = []
    for m in ms:
        x1, x2 = x1a[:m].copy(), x2a[:m].copy()
        d = run_distinct(xs, cats, x1, x2, upd, n_core, n_uni)
        a = run_agg(xs, ys, x1, x2, upd, n_core, n_agg_uni)
        rows.append({"m": m, "d": d, "a": a})
        log(f"{n_obj:,} objects x {m:,} subs: DISTINCT S-CN {d['msgs']:.2f} msg/upd ({d['core_us']:.0f} µs), unicast "
            f"{d['notif']:,.1f} rows/upd ({d['uni_ms']:.1f} ms), CN-relax {d['relax']:,.0f} deliveries; SUM S-CN "
            f"{a['msgs']:.2f} msg/upd ({a['core_us']:.0f} µs), unicast touched {a['touched']:,.0f} / notified "
            f"{a['notified']:,.0f} ({a['uni_ms']:.2f} ms, CPU {a['uni_cpu_ms']:.2f} ms); sample mismatches "
            f"{d['bad']} / {a['bad']}; AggUnicast vs recomputation {a['uni_bad']}")
        gc.collect()
    # AggUnicast before -> after at the largest m (same load), and on uniform subscriptions over 10,000 tuples
    m = ms[-1]
    x1, x2 = x1a[:m].copy(), x2a[:m].copy()
    before = time_unicast(MaskUnicast, xs, ys, x1, x2, upd, n_before)
    log(f"AggUnicast before (MaskUnicast), {m:,} subs: {before['ups']:.2f} updates/s (CPU {before['cpu_ups']:.2f}) "
        f"over {n_before} updates; mismatches {before['bad']}")
    gc.collect()
    uxs, ucats, uys, up_ = make_objects(10_000)
    uupd = make_updates(uxs, ucats, uys, up_, n_unif)
    ux1, ux2 = make_uniform_subs(m)
    unif = time_unicast(AggUnicast, uxs, uys, ux1, ux2, uupd, n_unif)
    log(f"AggUnicast, 10,000 tuples x {m:,} uniform subscriptions: {unif['ups']:,.0f} updates/s (CPU "
        f"{unif['cpu_ups']:,.0f}), touched {unif['touched']:,.0f} / notified {unif['rows']:,.0f} per update; "
        f"mismatches {unif['bad']}")
    del x1, x2, ux1, ux2
    gc.collect()
    agg_uni_bad = sum(r["a"]["uni_bad"] for r in rows) + before["bad"] + unif["bad"]
    spark_r = None
    if not args.no_spark:
        log(f"\n## Spark SQL: {sp['n_obj']:,} objects x {sp['m']:,} subscriptions, batches of {sp['batch']:,}")
        spark_r = spark_baseline(**sp)
    elapsed = time.perf_counter() - started
    info["load_end"] = load_avg()
    big = rows[-1]
    targets = [
        ("RangeAggCore: <= 2 messages per update (every update)", all(r["a"]["max_msgs"] <= 2 for r in rows),
         f"max {max(r['a']['max_msgs'] for r in rows)}, mean {big['a']['msgs']:.2f}"),
        ("RangeDistinctCore: <= 2 messages per update, independent of m",
         all(r["d"]["msgs"] <= 2 for r in rows) and len({round(r['d']['msgs'], 9) for r in rows}) == 1,
         ", ".join(f"{r['d']['msgs']:.3f}" for r in rows)),
        (f"DISTINCT S-CN messages <= 10% of unicast rows at {big['m']:,} subscriptions",
         big["d"]["msgs"] <= 0.1 * big["d"]["notif"], f"{100 * big['d']['msgs'] / max(big['d']['notif'], 1e-9):.1f}%"),
        ("correctness: 200 sampled subscribers equal the recomputation (DISTINCT and SUM, every m); a DISTINCT "
         "subscriber matches a message iff its set changes; AggUnicast values equal the recomputation (every "
         "subscription, every m and workload)",
         all(r["d"]["bad"] == 0 and r["a"]["bad"] == 0 and r["d"]["exact_ok"] for r in rows) and agg_uni_bad == 0,
         f"{sum(r['d']['bad'] + r['a']['bad'] for r in rows)} + {agg_uni_bad} mismatches"),
    ]
    if spark_r:
        targets.append(("our cores faster than the Spark SQL recomputation and agreeing with it",
                        spark_r["ours_ups"] > spark_r["ups"] and spark_r["agrees"],
                        f"{spark_r['ours_ups'] / spark_r['ups']:,.0f}x"))
    log("\n## Targets")
    for name, ok, val in targets:
        log(f"{'PASS' if ok else 'FAIL'}  {name}: {val}")
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "distinct.png"
    plot(rows, png, before)
    (args.out / "distinct.md").write_text(report(info, quick, n_obj, rows, n_core, n_uni, n_agg_uni, spark_r,
                                                 targets, agg_uni_bad, elapsed, before, unif))
    log(f"\nwrote {args.out / 'distinct.md'} and {png} ({elapsed / 60:.1f} min)")
    return 0


#: AggUnicast at 1,000,000 subscriptions in the last report before the rectangle index (docs/benchmarks/distinct.md
#: of commit 66cef0f): wall-clock updates/s over 60 updates, and the load average at its start.
PREVIOUS_1M = {"date": "2026-11-22 13:50 UTC", "ups": 1.3, "updates": 60, "load": "6.63/6.41/5.69"}


def report(info, quick, n_obj, rows, n_core, n_uni, n_agg_uni, spark_r, targets, agg_uni_bad, elapsed, before,
           unif) -> str:
    L = ["# Range-DISTINCT and range-SUM benchmark: S-CN messages vs unicast vs CN-relax vs Spark SQL\n"]
    L.append(f"Generated by `python bench/distinct.py{' --quick' if quick else ''}` on {info['date']} (total "
             f"{elapsed / 60:.1f} min).\n")
    L.append(f"**Machine**: {info['platform']}; {info['cpu_count']} CPUs ({info['cpu']}); Python {info['python']}, "
             f"pyspark {info['pyspark']}, numpy {info['numpy']}. Load average (1/5/15 min): {info['load_start']} at "
             f"start, {info['load_end']} at end (other benchmarks shared the 2 cores; counts do not depend on load, "
             f"times do).\n")
    L.append(f"**Workload**: {n_obj:,} objects, X uniform in [0, 10000]; subscriptions with midpoint N(5000, 1500), "
             f"length |N(1000, 1000)| (the range-MIN benchmark's); DISTINCT over {N_CATS:,} categories drawn with "
             f"weights 1/(rank + 10); SUM over y uniform in [0, 100). Updates: half move X by N(0, 50) (reflected), "
             f"half change the value (new category, y + N(0, 5) in absolute value). S-CN figures over {n_core:,} "
             f"updates; unicast over the first {n_uni:,} (DISTINCT) / {n_agg_uni:,} (SUM) of them. Sizes: DISTINCT message {DISTINCT_MSG_BYTES} B (op, value, 4 float64), "
             f"unicast row {DISTINCT_ROW_BYTES} B (sub id, op, value); SUM message {AGG_MSG_BYTES} B (X, ΔCOUNT, ΔSUM), "
             f"unicast row {AGG_ROW_BYTES} B (sub id, new value); CN-relax update {RELAX_BYTES} B.\n")
    L.append("## Targets\n")
    L.append(md_table(["target", "result", "measured"],
                      [[n, "**PASS**" if ok else "**FAIL**", v] for n, ok, v in targets]) + "\n")
    L.append("## 1. Range-DISTINCT (`RangeDistinctCore`)\n")
    L.append("Per update: S-CN messages (the server's output, independent of m), unicast rows "
             "(`range_distinct.notifications`: (subscription, message) pairs = value additions/removals delivered), "
             "affected subscriptions (sets that change), CN-relax deliveries (subscriptions whose range holds the old "
             "or new X). Times: one core, pure Python.\n")
    rows_ = []
    for r in rows:
        d = r["d"]
        rows_.append([f"{r['m']:,}", f"{d['msgs']:.3f}", f"{d['notif']:,.1f}", f"{d['affected']:,.1f}",
                      f"{d['relax']:,.0f}", f"{d['msgs'] * DISTINCT_MSG_BYTES:,.1f} / "
                      f"{d['notif'] * DISTINCT_ROW_BYTES:,.0f} / {d['relax'] * RELAX_BYTES:,.0f}",
                      f"{100 * d['msgs'] / max(d['notif'], 1e-9):.2f}%", f"{100 * d['ignorable']:.1f}%",
                      f"{1e6 / d['core_us']:,.0f}", f"{1e3 / d['uni_ms']:,.0f}", "ok" if d["bad"] == 0 and d["exact_ok"]
                      else "**wrong**"])
    L.append(md_table(["subscriptions", "S-CN msgs/upd", "unicast rows/upd", "affected subs/upd",
                       "CN-relax deliveries/upd", "bytes/upd S-CN / unicast / CN-relax delivered", "S-CN as % of unicast",
                       "ignorable updates", "S-CN updates/s", "unicast updates/s", "200-subscriber check"], rows_) + "\n")
    L.append("## 2. Range-SUM (`RangeAggCore('sum')`, `AggUnicast`)\n")
    L.append("Per update: S-CN messages (at most 2: old and new X; the network delivers each to every range holding "
             "its X, the relaxed subscription), unicast touched (subscriptions reached = the relaxed deliveries) and "
             "notified (rows: results that changed).\n")
    rows_ = []
    for r in rows:
        a = r["a"]
        rows_.append([f"{r['m']:,}", f"{a['msgs']:.3f} (max {a['max_msgs']})", f"{a['touched']:,.0f}",
                      f"{a['notified']:,.0f}", f"{a['msgs'] * AGG_MSG_BYTES:,.1f} / {a['notified'] * AGG_ROW_BYTES:,.0f}",
                      f"{1e6 / a['core_us']:,.0f}", f"{1e3 / a['uni_ms']:,.0f}", f"{1e3 / a['uni_cpu_ms']:,.0f}",
                      f"{a['uni_init_s']:.1f}", "ok" if a["bad"] == 0 and a["uni_bad"] == 0 else "**wrong**"])
    L.append(md_table(["subscriptions", "S-CN msgs/upd", "unicast touched/upd", "unicast rows (changed)/upd",
                       "bytes/upd S-CN / unicast", "S-CN updates/s", "unicast updates/s", "unicast updates/s (CPU)",
                       "AggUnicast init (s)", "checks"], rows_) + "\n")
    L.append(f"Checks: the 200 sampled subscribers, and AggUnicast's values for every subscription after its "
             f"{n_agg_uni:,} updates, equal the recomputation ({agg_uni_bad} AggUnicast mismatches in all runs). "
             f"Unicast time is wall-clock (as every time here) and, beside it, the process CPU time: with other "
             f"work on the 2 cores the two differ.\n")
    m = rows[-1]["m"]
    L.append(f"### AggUnicast at {m:,} subscriptions: before → after\n")
    L.append("Before: one O(m) mask per message and a Python-int exact sum per subscription (object arrays). "
             "After: the update's (at most two) messages cut the subscription points (x1, x2) into at most three "
             "disjoint rectangles (old X only, new X only, both), each with one net delta; the state is laid out "
             "so that a rectangle is a few contiguous runs of it (x1-sorted buckets of 32 sqrt(m), x2-sorted "
             "inside; narrow slivers read off the x1 / x2 order), counts are int64 and exact sums are pairs of "
             "floats updated by vectorised error-free additions (a Python int only where a sum does not fit a "
             "pair). A rectangle with a zero net delta (an X-move's 'both' part when Y did not change) is only "
             "counted. Same data and updates as above; the before row runs in this same process and load.\n")
    a = rows[-1]["a"]
    prev = PREVIOUS_1M if m == 1_000_000 else None
    table = []
    if prev:
        table.append([f"before, previous report ({prev['date']}, load {prev['load']})", f"{prev['ups']:.1f}", "n/a",
                      f"{prev['updates']}", "-"])
    table.append(["before (`MaskUnicast`, this run)", f"{before['ups']:.2f}", f"{before['cpu_ups']:.2f}",
                  f"{before['n']}", "ok" if before["bad"] == 0 else "**wrong**"])
    table.append(["after (`AggUnicast`, this run)", f"{1e3 / a['uni_ms']:,.0f}", f"{1e3 / a['uni_cpu_ms']:,.0f}",
                  f"{a['uni_updates']:,}", "ok" if a["uni_bad"] == 0 else "**wrong**"])
    L.append(md_table(["AggUnicast, SUM", "updates/s (wall)", "updates/s (CPU)", "updates timed",
                       "values == recomputation"], table) + "\n")
    L.append(f"Speed-up in this run: {1e3 / a['uni_ms'] / before['ups']:,.0f}x wall-clock, "
             f"{1e3 / a['uni_cpu_ms'] / before['cpu_ups']:,.0f}x CPU. Goal 1,000 updates/s: "
             f"{'met' if 1e3 / a['uni_ms'] >= 1000 else 'not met'} on wall-clock time, "
             f"{'met' if 1e3 / a['uni_cpu_ms'] >= 1000 else 'not met'} on CPU time. The work per update is "
             f"O(1) numpy passes per subscription whose state changes: {a['notified']:,.0f} result rows per update "
             f"here (every reached sum moves on a Y change), so the rate is bounded by writing those rows, not by "
             f"finding them.\n")
    L.append(f"**Uniform subscriptions over 10,000 tuples** ({m:,} subscriptions with two uniform ends, so a third of "
             f"them hold a given X; same update law, {unif['n']:,} updates): {unif['ups']:,.0f} updates/s wall-clock, "
             f"{unif['cpu_ups']:,.0f} CPU; {unif['touched']:,.0f} relaxed deliveries and {unif['rows']:,.0f} result "
             f"rows per update; init {unif['init_s']:.1f} s; values == recomputation: "
             f"{'ok' if unif['bad'] == 0 else '**wrong**'}. At 1,000 updates/s that workload would have to emit "
             f"{unif['rows'] * 1000 / 1e6:,.0f} million changed values per second.\n")
    L.append("## 3. What a user would do without sparksub: Spark SQL\n")
    if not spark_r:
        L.append("(skipped: `--no-spark`)\n")
    else:
        s = spark_r
        L.append(f"Spark SQL on `local[2]`, {s['objects']:,} objects x {s['subs']:,} subscriptions, batches of "
                 f"{s['batch']:,} updates, {s['warmup']} warm-up batch then the median of {s['timed']}. Per batch: "
                 f"merge the updates into `t` (checkpointed); candidates = subscriptions whose range holds an updated "
                 f"old or new X (`LEFT SEMI JOIN`); `candidates LEFT JOIN t ON x BETWEEN x1 AND x2 GROUP BY sub_id` "
                 f"with `sort_array(collect_set(cat))` and `SUM(y)`; compare with the previous results and keep them. "
                 f"Ours: `RangeDistinctCore` + `RangeAggCore('sum')` on the same updates (S-CN: the messages are the "
                 f"output). SparkSession start {s['start_s']:.1f} s, initial results {s['initial_s']:.1f} s.\n")
        L.append(md_table(["approach", "updates/s", "s per batch (median)", "vs Spark SQL", "notes"], [
            ["Spark SQL (range join, collect_set + SUM)", f"{s['ups']:,.0f}", f"{s['median_s']:.2f}", "1x",
             f"~{s['candidates']:,.0f} candidates, {s['changed_d']:,.0f} DISTINCT / {s['changed_s']:,.0f} SUM "
             f"results changed per batch"],
            ["ours: DISTINCT + SUM cores (both per update)", f"{s['ours_ups']:,.0f}", f"{s['ours_s']:.3f}",
             f"{s['ours_ups'] / s['ups']:,.0f}x", f"final DISTINCT sets of subscriptions 0-99 agree with Spark: "
                                                  f"{s['agrees']}"]]) + "\n")
    L.append("![messages per update and throughput](distinct.png)\n")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
