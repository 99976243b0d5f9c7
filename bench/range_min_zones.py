#!/usr/bin/env python
"""Range-MIN split into X zones (DS-CN, 000 §2.3.2) and subscriptions in shards, against the single S-CN core.

What a runtime placing one zone per partition would get, measured in one process (no Spark)::

    python bench/range_min_zones.py            # 100K rows, 100K subscriptions, 3 batches of 10K updates
    python bench/range_min_zones.py --quick    # 3 batches of 2K updates
    python bench/range_min_zones.py --out DIR  # write range_min_zones.md / .png elsewhere (default docs/benchmarks/)

Workload: ``bench/range_min.py``'s (000 Table 1: uniform objects, random-walk Y with 0.5% spikes that bounce
back; subscriptions with midpoints N(5000, 1500) and lengths |N(1000, 1000)|), same seeds.  For 1..8 zones cut
at equal-count X quantiles (:func:`~sparksub.operators.range_min.zones.equal_count_cuts`):

* the share of updates settled in round 1 (inside their zone) and of steps deferred to round 2;
* the work balance: max / mean of the steps per zone, and of the round-1 CPU time per zone;
* CPU time per update of the zones run one after another in this process, by phase (routing, round 1, round 2,
  building the message table), beside the single core (``RangeMinGroup.apply``, reformulated) on the same
  batches: the overhead of splitting.  "If parallel" = routing + the slowest zone's round 1 + round 2 + the
  table: an estimate of one batch's critical path with one zone per core, not a measurement;
* subscriptions in k shards by x1 (``subscription_shards.py``): how many shards a message visits, and the
  unicast matching time of the slowest shard beside the single point index's.

CPU time (``time.process_time``) is reported, not wall time: the machine is shared, and CPU time is what the
zones would each spend on their own core.  Every zoned batch's messages are checked equal to the single core's.

The other two reformulated variants through the engine and Spark (``--mode``; issue 16 item 4)::

    flock /tmp/sparksub-bench.lock nice -n 10 python bench/range_min_zones.py --mode s-mn     # S-MN, 000 §2.1.2
    flock /tmp/sparksub-bench.lock nice -n 10 python bench/range_min_zones.py --mode cn+      # CN+, 000 §2.2.2
    python bench/range_min_zones.py --mode s-mn --quick

A RANGE_MIN group whole (one task: every row and every subscription) against the same group in ``--zones`` X
zones (``Engine.range_zones``; S-MN adds as many x1 subscription shards), each form in a fresh child process on
``local[2]`` (``bench/forms.py``, as ``bench/range_shards.py``): load ``--rows`` rows, subscribe ``--subs``
ranges, then ``--batches`` timed ``publish(..., 'reformulated', variant=...)`` calls of ``--batch`` upserts of
existing keys (each moves its row in X and Y) after one warm-up publish, each timed end to end (publish + count of
its output).  Reported per form: the median seconds per publish, the largest Python worker's PSS (what its tasks
cache: the whole group, or one zone / one shard), the driver's RSS, the load average (``uptime``'s figures)
before and after.  Writes ``docs/benchmarks/range_min_zones_s_mn.md`` / ``range_min_zones_cn_plus.md``, their
JSON and PNG.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))   # forms, range_shards, runtime (a child's imports)
from common import fmt_num, load_avg, log, machine, md_table  # noqa: E402
from range_min import group_batch, make_objects, make_subscriptions, make_updates

from sparksub.operators.range_min.delivery import SubscriptionPoints, unicast
from sparksub.operators.range_min.group import RangeMinGroup
from sparksub.operators.range_min.subscription_shards import shard_subscriptions
from sparksub.operators.range_min.zones import ZonedRangeMin, apply_round1, apply_round2, messages_table

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
ZONES = (1, 2, 3, 4, 5, 6, 7, 8)
SHARDS = (1, 2, 4, 8)
clock = time.process_time


def run_zones(z: ZonedRangeMin, batch) -> tuple[object, dict]:
    """One batch through the zones one after another, timed by phase (what ``ZonedRangeMin.apply`` does)."""
    t0 = clock()
    routed = z.route(batch)
    t1 = clock()
    firsts, zone_s = [], []
    for zone, steps in zip(z.zones, routed.steps):
        a = clock()
        firsts.append(apply_round1(zone, steps))
        zone_s.append(clock() - a)
    t2 = clock()
    second = apply_round2([r for _, r in firsts], z.zones)
    t3 = clock()
    merged = [m for msgs, _ in firsts for m in msgs] + second
    merged.sort(key=lambda t: t[0])
    table = messages_table("bench", False, merged)
    t4 = clock()
    z._count(routed, [r for _, r in firsts])
    steps = [len(s) for s in routed.steps]
    deferred = sum(len(r.deferred) for _, r in firsts)
    return table, {"route": t1 - t0, "round1": t2 - t1, "round2": t3 - t2, "table": t4 - t3, "zone_s": zone_s,
                   "steps": steps, "deferred": deferred, "updates": routed.updates,
                   "old_values": {s: v for _, r in firsts for s, v in r.old_values.items()}}


# ---- S-MN and CN+ through the engine: the whole group vs its zones (--mode) ------------------------------------
VARIANTS = {"s-mn": "S-MN", "cn+": "CN+"}
TEMPLATE = "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi"


def engine_child(args) -> dict:
    """One form (``args.form``: whole, or sharded = zoned) of the engine benchmark, in this process."""
    import forms
    from range_shards import rows_table, subscriptions

    spark, baseline = forms.child_session(args, f"range-min-zones-{args.mode}")
    e, batches, rss0 = forms.subscribed_engine(
        spark, args, "CREATE TABLE stock (sym BIGINT PRIMARY KEY, risk DOUBLE, per DOUBLE, sector STRING)",
        rows_table, TEMPLATE, subscriptions)
    e.range_zones = args.zones if args.form == "sharded" else 0
    variant = VARIANTS[args.mode]
    t0 = time.perf_counter()
    warm = e.publish("stock", batches[0], "reformulated", variant=variant).count()
    warm_s = time.perf_counter() - t0
    times, notes = [], 0
    for b in batches[1:]:
        t0 = time.perf_counter()
        notes += e.publish("stock", b, "reformulated", variant=variant).count()
        times.append(time.perf_counter() - t0)
    n = sum(b.num_rows for b in batches[1:])
    zs = next(iter(e._zone_states.values()), None)     # the group's zones (control/zones.py), if it ran zoned
    out = {"form": args.form, "variant": variant, "rows": args.rows, "subs": args.subs, "batch": args.batch,
           "batches": args.batches, "zones": args.zones if args.form == "sharded" else 0, "warm_s": warm_s,
           "warm_notifications": warm, "times": times, "median_s": statistics.median(times), "notifications": notes,
           "rows_per_s": n / sum(times), "notes_per_s": notes / sum(times),
           "stages_s": dict(zs.timings) if zs is not None else None,
           "zoned": zs is not None and not zs.rows_stale}
    out.update({"driver_rss_subscribed_mb": rss0, **forms.memory(e, baseline, args)})
    out["largest_worker_mb"] = max(out["worker_pss_mb"], default=None)
    spark.stop()
    return out


def engine_main() -> int:
    import subprocess

    import forms
    ap = argparse.ArgumentParser(description="S-MN / CN+ publishes: a RANGE_MIN group whole vs in X zones")
    ap.add_argument("--mode", choices=sorted(VARIANTS), required=True)
    ap.add_argument("--zones", type=int, default=2, help="the zoned form's X zones (and S-MN's x1 shards)")
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    started = forms.parent_or_child(ap, __file__, engine_child, OUT_DIR, ("mode", "zones"))
    if started is None:
        return 0
    args, results = started
    uptime_end = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    variant = VARIANTS[args.mode]
    m = machine()
    whole, zoned = results
    rows = [[r["form"] if r["form"] == "whole" else f"{args.zones} X zones", fmt_num(r["median_s"], 2),
             " / ".join(fmt_num(t, 2) for t in r["times"]), fmt_num(r["warm_s"], 1),
             fmt_num(r["largest_worker_mb"], 0), " / ".join(fmt_num(x, 0) for x in r["worker_pss_mb"]),
             fmt_num(r["driver_rss_mb"], 0), f"{r['notifications']:,}", str(r["runtime"]),
             f"{r['load_before']} -> {r['load']}"] for r in results]
    head = ["form", "median s per publish", "publish s (each)", "warm-up publish s", "largest Python worker PSS MB",
            "Python workers PSS MB", "driver RSS MB", "messages (timed)", "worker cache", "load (1/5/15 min)"]
    if args.master != "local[2]":   # each executor's share: its Python processes' growth above their baseline
        for row, r in zip(rows, results):
            row.insert(6, " / ".join(fmt_num(x, 0) for x in r["executor_pss_mb"]))
        head.insert(6, "Python PSS per executor above its baseline MB")
    table = md_table(head, rows)
    stages = zoned.get("stages_s") or {}
    stage_text = ", ".join(f"{k} {v:.2f} s" for k, v in stages.items())
    how = {"S-MN": "S-MN (000 §2.1.2): the zones' S-CN rounds, then one task per x1 subscription shard writes its "
                   "S-UN entries, then one task per range of seqs merges them into the messages (`targets` in the "
                   "registry's slot order, the whole group's)",
           "CN+": "CN+ (000 §2.2.2): each zone writes its updates' CN+ messages in round 1 (the tuple's previous "
                  "state is in the zone owning its X), no round 2, no subscription shard; one task per range of "
                  "seqs merges them"}[variant]
    sizes = (("rows", 20_000), ("subs", 200_000), ("batch", 2_000), ("batches", 3), ("zones", 2))
    flags = "".join(f" --{k} {getattr(args, k)}" for k, default in sizes if getattr(args, k) != default)
    command = f"bench/range_min_zones.py --mode {args.mode}{' --quick' if args.quick else flags}"
    text = f"""# RANGE_MIN {variant} publishes: the whole group vs X zones (issue 16 item 4)

`{command}` (`flock /tmp/sparksub-bench.lock nice -n
10`): {args.rows:,} rows, {args.subs:,} subscriptions `{TEMPLATE}` (X ranges: centres ~N(5000, 1500), lengths
~|N(1000, 1000)| over [0, 10,000]), `{args.master}`; {args.batches} timed `publish(..., 'reformulated',
variant='{variant}')` calls of {args.batch:,} upserts of existing keys (each moves its row in X and Y), each timed end
to end (publish + count of its output) after one warm-up publish.  Each form in a fresh process.  Machine:
{m.get('cpu', '')}, {m.get('cpu_count', '')} cores, shared with other work: `uptime` before the run
`{uptime}`, after `{uptime_end}`.

Zoned: {how}.  The zoned form's stages in its last publish: {stage_text or 'n/a'}.

{table}

Messages in the timed batches: whole {whole['notifications']:,}, zoned {zoned['notifications']:,}
(`tests/test_zones_engine.py` checks the two forms row for row).  A Python worker of the whole form caches the
group with every row and every subscription; of the zoned form, one zone's rows (about {args.rows // args.zones:,})
{'or one shard of the subscriptions (about ' + f'{args.subs // args.zones:,})' if variant == 'S-MN' else
 '(CN+ runs no subscription shard: the subscribers route its messages themselves)'}.  The zoned form runs
{'three' if variant == 'S-MN' else 'two'} Spark jobs per publish before its output is written (round 1;
{'the shards; ' if variant == 'S-MN' else ''}the merge: their times above), where the whole form's one task writes
the kept output itself in one job; on 2 shared cores its time per publish is not a settled comparison, the
largest worker's memory is the robust figure.  The zoned form's driver builds the zones' and shards' bases from the
table's rows and the registry (its RSS above).
"""
    stem = "range_min_zones_" + {"s-mn": "s_mn", "cn+": "cn_plus"}[args.mode] + ("_quick" if args.quick else "")
    forms.write_outputs(args, stem, results, m, text, f"RANGE_MIN {variant}: the whole group vs X zones",
                        f"updates/s ({variant} publish + count)")
    return 0


def main(argv=None) -> int:
    if "--mode" in (sys.argv[1:] if argv is None else argv) or any(
            a.startswith("--mode=") for a in (sys.argv[1:] if argv is None else argv)):
        return engine_main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 batches of 2K updates")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args(argv)
    n_rows, n_subs = 100_000, 100_000
    batch, n_batches = (2_000 if args.quick else 10_000), 3
    info = machine()
    info["load_start"] = load_avg()
    started = time.perf_counter()
    log(f"# range-min zones benchmark — {info['date']}; {info['platform']}; {info['cpu_count']} CPUs; "
        f"{info['cpu']}; load average at start {info['load_start']}")

    keys, xs, ys = make_objects(n_rows)
    sub_ids, lo, hi = make_subscriptions(n_subs)
    stream = make_updates(ys, batch * n_batches)
    batches = [group_batch(keys, xs, stream, a, a + batch) for a in range(0, batch * n_batches, batch)]
    points = SubscriptionPoints()
    points.add(sub_ids, lo, hi)

    # ---- zones vs the single core, batches interleaved so that a load change hits every configuration alike
    single = RangeMinGroup("bench", "stock", "risk", "per", False)
    single.load(keys, xs, ys)
    zoned = {k: ZonedRangeMin.from_rows(keys, xs, ys, k, group_id="bench") for k in ZONES}
    single_s, per_k = [], {k: [] for k in ZONES}
    last_messages = last_old = None
    # The cyclic garbage collector is off while timing and runs between batches: a full collection walks all nine
    # copies of the table held here (~60 ms each time) and lands in whichever zone happens to be running.
    gc.collect()
    gc.freeze()
    gc.disable()
    for b in batches:
        a = clock()
        want = single.apply(b, "reformulated")
        single_s.append(clock() - a)
        for k, z in zoned.items():
            got, t = run_zones(z, b)
            if not got.equals(want):
                raise AssertionError(f"{k} zones: messages differ from the single core's")
            per_k[k].append(t)
            if k == max(ZONES):
                last_messages, last_old = got, t["old_values"]
        gc.collect()
        log(f"batch of {b.num_rows:,}: single {b.num_rows / single_s[-1]:,.0f} upd/CPU-s; zones " + ", ".join(
            f"{k}: {b.num_rows / sum(per_k[k][-1][p] for p in ('route', 'round1', 'round2', 'table')):,.0f}"
            for k in ZONES))
    single_ups = statistics.median(batch / s for s in single_s)
    rows = []
    for k in ZONES:
        ts, z = per_k[k], zoned[k]
        total = [sum(t[p] for p in ("route", "round1", "round2", "table")) for t in ts]
        crit = [t["route"] + max(t["zone_s"]) + t["round2"] + t["table"] for t in ts]
        steps = np.sum([t["steps"] for t in ts], axis=0)
        zone_cpu = np.sum([t["zone_s"] for t in ts], axis=0)
        deferred = sum(t["deferred"] for t in ts)
        s = z.stats()
        rows.append({
            "zones": k, "cuts": z.cuts.tolist(), "rows": [zz["rows"] for zz in s["zones"]],
            "round1_fraction": s["round1_fraction"], "steps": int(steps.sum()), "deferred": deferred,
            "step_balance": float(steps.max() / steps.mean()), "cpu_balance": float(zone_cpu.max() / zone_cpu.mean()),
            "ups": statistics.median(batch / t for t in total), "crit_ups": statistics.median(batch / c for c in crit),
            "route_us": 1e6 * sum(t["route"] for t in ts) / (batch * n_batches),
            "round1_us": 1e6 * sum(t["round1"] for t in ts) / (batch * n_batches),
            "round2_us_per_step": 1e6 * sum(t["round2"] for t in ts) / max(deferred, 1),
            "table_us": 1e6 * sum(t["table"] for t in ts) / (batch * n_batches),
            "staircases": [zz["staircase_lengths"] for zz in s["zones"]],
        })
        r = rows[-1]
        log(f"{k} zones: {100 * r['round1_fraction']:.2f}% of updates in round 1 ({deferred} steps deferred); "
            f"balance steps {r['step_balance']:.2f}, CPU {r['cpu_balance']:.2f}; {r['ups']:,.0f} upd/CPU-s in "
            f"sequence ({r['ups'] / single_ups:.2f}x single), {r['crit_ups']:,.0f} if parallel")
    del zoned
    gc.enable()
    gc.collect()

    # ---- subscriptions in shards: the last batch's messages (8 zones), unicast per shard vs the single index
    shard_rows = []
    a = clock()
    want = unicast(points, last_messages, last_old)
    single_match_s = clock() - a
    want_rows = sorted(zip(want.column("seq").to_pylist(), want.column("subscription_id").to_pylist()))
    for k in SHARDS:
        for by in ("x1", "hash"):
            shards = shard_subscriptions(points, k, by)
            visits = shards.message_shards(last_messages)
            per_shard = []
            got = []
            for j, shard in enumerate(shards.shards):
                sel = last_messages.take(np.flatnonzero(visits[:, j]))
                a = clock()
                part = unicast(shard, sel, last_old)
                per_shard.append(clock() - a)
                got += zip(part.column("seq").to_pylist(), part.column("subscription_id").to_pylist())
            if sorted(got) != want_rows:
                raise AssertionError(f"{k} shards by {by}: unicast rows differ from the single index's")
            sizes = [len(s) for s in shards.shards]
            shard_rows.append({"shards": k, "by": by, "sizes": (min(sizes), max(sizes)),
                               "visits": float(visits.sum(axis=1).mean()), "max_s": max(per_shard),
                               "sum_s": sum(per_shard), "single_s": single_match_s, "rows": len(want_rows),
                               "messages": last_messages.num_rows})
            r = shard_rows[-1]
            log(f"{k} shards by {by}: {r['visits']:.2f} shards per message; slowest shard {r['max_s']:.3f} s, "
                f"all {r['sum_s']:.3f} s, single index {single_match_s:.3f} s")

    info["load_end"] = load_avg()
    elapsed = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "range_min_zones.png"
    plot(rows, single_ups, shard_rows, png)
    (args.out / "range_min_zones.md").write_text(
        report(info, args.quick, n_rows, n_subs, batch, n_batches, single_ups, rows, shard_rows, elapsed))
    log(f"wrote {args.out / 'range_min_zones.md'} and {png} ({elapsed / 60:.1f} min; load at end {info['load_end']})")
    return 0


def plot(rows, single_ups, shard_rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [r["zones"] for r in rows]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.4))
    a1.axhline(single_ups, color="grey", ls="--", label="single core (RangeMinGroup)")
    a1.plot(ks, [r["ups"] for r in rows], "o-", label="zones one after another (one process)")
    a1.plot(ks, [r["crit_ups"] for r in rows], "s:", label="if parallel: route + slowest zone + round 2 + table")
    a1.set_xlabel("zones")
    a1.set_ylabel("updates per CPU-second")
    a1.set_title("Reformulated (S-CN) throughput", fontsize=10)
    a1.legend(fontsize=8)
    a2.plot(ks, [100 * r["round1_fraction"] for r in rows], "o-", color="tab:green")
    a2.set_ylim(min(90, min(100 * r["round1_fraction"] for r in rows) - 1), 100.5)
    a2.set_xlabel("zones")
    a2.set_ylabel("% of updates settled in round 1", color="tab:green")
    b2 = a2.twinx()
    b2.plot(ks, [r["step_balance"] for r in rows], "s--", color="tab:purple", label="steps")
    b2.plot(ks, [r["cpu_balance"] for r in rows], "^:", color="tab:red", label="round-1 CPU")
    b2.set_ylabel("max / mean per zone")
    b2.legend(fontsize=8, loc="lower right")
    a2.set_title("Round 1 share and work balance", fontsize=10)
    for by, style in (("x1", "o-"), ("hash", "s--")):
        sr = [r for r in shard_rows if r["by"] == by]
        a3.plot([r["shards"] for r in sr], [r["max_s"] / r["single_s"] for r in sr], style,
                label=f"by {by}: slowest shard / single index")
        a3.plot([r["shards"] for r in sr], [r["visits"] for r in sr], style, alpha=0.4,
                label=f"by {by}: shards per message")
    a3.set_xlabel("subscription shards")
    a3.set_title("Unicast matching in shards (last batch)", fontsize=10)
    a3.legend(fontsize=8)
    for a in (a1, a2, a3):
        a.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(info, quick, n_rows, n_subs, batch, n_batches, single_ups, rows, shard_rows, elapsed) -> str:
    L = ["# Range-MIN in X zones (DS-CN) and subscriptions in shards\n"]
    L.append(f"Generated by `python bench/range_min_zones.py{' --quick' if quick else ''}` on {info['date']} "
             f"(total {elapsed / 60:.1f} min).\n")
    L.append(f"**Machine**: {info['platform']}; {info['cpu_count']} CPUs ({info['cpu']}); Python {info['python']}, "
             f"numpy {info['numpy']}, pyarrow {info['pyarrow']}. **Load** average (1/5/15 min): "
             f"{info['load_start']} at start, {info['load_end']} at end: the machine was shared with other "
             f"processes, so every figure is CPU time of this process (`time.process_time`), not wall time, and "
             f"the ratios measured side by side are the robust figures (even CPU time varies under such load: "
             f"the 1-shard rows below repeat the single index's computation, so their difference is this run's "
             f"noise). Python's cyclic garbage collector is "
             f"off during the timed calls of part 1 and runs between batches (untimed): this process holds nine "
             f"copies of the table, and a full collection (~60 ms) would land in whichever zone is running.\n")
    L.append(f"**Workload**: `bench/range_min.py`'s (000 Table 1, same seeds): {n_rows:,} rows, {n_subs:,} "
             f"subscriptions, {n_batches} batches of {batch:,} updates (random-walk Y, 0.5% spikes bouncing back; "
             f"X never moves). Zones cut at equal-count quantiles of X. Every zoned batch's messages were checked "
             f"equal to the single core's.\n")
    L.append("## Zones (000 §2.3.2)\n")
    L.append("Round 1 = the steps whose FINDs all stay inside their zone (settled by the zone alone, in parallel "
             "with the other zones); round 2 = the steps whose walk crosses into another zone, reformulated on "
             "the zones' edge staircases at the step's version (`zones.py`). Balance = max / mean over zones. "
             "CPU µs per update by phase, zones run one after another in one process; **if parallel** = routing "
             "+ the slowest zone's round 1 + round 2 + the message table, i.e. one batch's critical path with one "
             "zone per core (an estimate from the measured parts, not a parallel run).\n")
    tab = []
    for r in rows:
        tab.append([str(r["zones"]), f"{min(r['rows']):,}-{max(r['rows']):,}",
                    f"{100 * r['round1_fraction']:.2f}%", f"{r['deferred']:,} / {r['steps']:,}",
                    f"{r['step_balance']:.2f}", f"{r['cpu_balance']:.2f}",
                    fmt_num(r["route_us"]), fmt_num(r["round1_us"]), fmt_num(r["round2_us_per_step"]),
                    fmt_num(r["table_us"]), f"{r['ups']:,.0f}", f"{r['ups'] / single_ups:.2f}x",
                    f"{r['crit_ups']:,.0f}", f"{r['crit_ups'] / single_ups:.2f}x"])
    L.append(md_table(["zones", "rows per zone", "updates settled in round 1", "steps deferred / all",
                       "step balance", "round-1 CPU balance", "route µs/upd", "round 1 µs/upd",
                       "round 2 µs per deferred step", "table µs/upd", "updates/CPU-s in sequence",
                       "vs single", "if parallel (est.)", "vs single"], tab) + "\n")
    L.append(f"Single core (`RangeMinGroup.apply`, reformulated) on the same batches: **{single_ups:,.0f} "
             f"updates per CPU-second** (median of the {n_batches} batches; it includes building its message "
             f"table).\n")
    st = ", ".join(f"{r['zones']} zones: {r['staircases']}" for r in rows if r["zones"] in (2, 8))
    L.append(f"Edge staircase lengths (left, right) per zone at the end: {st}.\n")
    L.append("## Subscriptions in shards\n")
    s0 = shard_rows[0]
    L.append(f"The last batch's {s0['messages']:,} messages (8 zones) matched against {n_subs:,} subscriptions: "
             f"S-UN (`unicast`) on the single point index vs per shard, {s0['rows']:,} rows either way (checked "
             f"equal as sets). By x1, a message visits only the shards whose x1 interval meets its "
             f"(OUTER_L, INNER_L]; by hash it visits all.\n")
    tab = [[str(r["shards"]), r["by"], f"{r['sizes'][0]:,}-{r['sizes'][1]:,}", f"{r['visits']:.2f}",
            f"{r['max_s']:.3f}", f"{r['sum_s']:.3f}", f"{r['single_s']:.3f}", f"{r['max_s'] / r['single_s']:.2f}"]
           for r in shard_rows]
    L.append(md_table(["shards", "by", "subscriptions per shard", "shards visited per message",
                       "slowest shard (CPU s)", "all shards (CPU s)", "single index (CPU s)",
                       "slowest / single"], tab) + "\n")
    L.append("## Notes\n")
    L.append("* A step is deferred only if its own walk crosses a boundary; its state change is applied in round "
             "1 (a step changes only its own zone, at its own x), so the zone's later updates stay in round 1 "
             "and the round-1 share does not depend on the batch size. The paper's DS-CN runs saw the same "
             "locality: the diagonal traversal usually takes very few hops, and 87% of events made no traffic "
             "(000's evaluation, Figures 6 and 12).\n"
             "* The overhead of the split in one process is routing (a key directory and a bisect per update), "
             "keeping the edge staircases (two bisects per step; a rescan when a record changes) and the merge "
             "of the zones' messages; the zones' round 1 does the single core's work on smaller trees.\n"
             "* Round 2 rebuilds a small A2B-tree per deferred step (the records its walks can read: a few "
             "tens of points), so its cost per step is several times an ordinary update's; spikes and their "
             "bounces, whose Mar is large, are most of it.\n"
             "* \"If parallel\" counts routing, round 2 and the message table as serial. Each could be split "
             "further: routing by key (a shuffle), round 2 per deferred step (each reads only round-1 records, "
             "never another deferred step), the table per zone. The serial part is why the estimate grows "
             "more slowly than the number of zones.\n")
    L.append("![throughput, round-1 share, balance, shards](range_min_zones.png)\n")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
