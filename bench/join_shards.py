#!/usr/bin/env python
"""SELECT_JOIN with its subscriptions in shards (issue 16 item 4; control/join_shards.py) against the whole form
(every row partition holding every subscription), through the engine and Spark ``local[2]``.

    flock /tmp/sparksub-bench.lock nice -n 5 python bench/join_shards.py            # 20K rows x 200K subscriptions
    python bench/join_shards.py --quick                                            # 5K rows x 20K subscriptions

Each form runs in a child process of its own (a fresh Spark session: the caches and the memory are its own):
load R and S, subscribe the subscriptions in bulk (003 Table 4.1's shape: ``router.synthetic_workload``, A and C
ranges of length ~100), one warm-up publish (the bases built), then ``--batches`` publishes of ``--batch`` new R
rows each, unicast, each timed end to end (``publish`` + counting its checkpointed output).  Reported per form:
rows/s and notifications/s over the timed publishes, the driver's RSS, each Python worker's PSS (the replicas its
tasks cache: a row partition with every subscription, or a row partition without any and one shard), and the
cache outcomes.  Writes ``docs/benchmarks/join_shards.md`` (``--out``); the machine's load is in the table.
``--mode reformulated``: the publishes return the row partitions' messages (no stage 2; the sharded form's row
partitions then run in publish's ordinary job, one per worker: ``Replica.one_per_worker``), written to
``join_shards_reformulated.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt_num, load_avg, machine, md_table

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
TEMPLATE = ("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :alo AND :ahi AND s.c BETWEEN :clo AND :chi")


def child(args) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from runtime import memory_snapshot, pss_mb, rss_mb, worker_pids

    from sparksub import Engine
    from sparksub.engine import spark_session
    from sparksub.operators.joins.router import synthetic_workload
    spark = spark_session("local[2]", f"join-shards-{args.form}")
    rng = np.random.default_rng(3)
    n, m = args.rows, args.subs
    r_rows, s_rows, q_rows = synthetic_workload(rng, n, m, a_length=100.0, c_length=100.0)
    q = np.array([x[1:] for x in q_rows])
    e = Engine(spark)
    e.keep_workers_warm = None
    e.join_partitions = 2
    e.join_subscription_shards = args.shards if args.form == "sharded" else 0
    e.sql("CREATE TABLE r (rk BIGINT PRIMARY KEY, a DOUBLE, b BIGINT)")
    e.sql("CREATE TABLE s (sk BIGINT PRIMARY KEY, b BIGINT, c DOUBLE)")
    e.load("r", pa.table({"rk": np.arange(n, dtype=np.int64), "a": [x[1] for x in r_rows],
                          "b": np.array([x[2] for x in r_rows], dtype=np.int64)}))
    e.load("s", pa.table({"sk": np.arange(n, dtype=np.int64), "b": np.array([x[1] for x in s_rows], dtype=np.int64),
                          "c": [x[2] for x in s_rows]}))
    rss0 = rss_mb()
    e.subscribe_many(TEMPLATE, {"id": np.array([f"q{i}" for i in range(m)]), "alo": q[:, 0], "ahi": q[:, 1],
                                "clo": q[:, 2], "chi": q[:, 3]})
    erng = np.random.default_rng(4)
    total = args.batch * (args.batches + 1)
    new_a, new_b = erng.uniform(0, 10_000, total), erng.normal(5000, 1000, total).round().astype(np.int64)

    def batch(i):
        lo, hi = i * args.batch, (i + 1) * args.batch
        return pa.table({"rk": np.arange(n + lo, n + hi, dtype=np.int64), "a": new_a[lo:hi], "b": new_b[lo:hi]})
    t0 = time.perf_counter()
    warm = e.publish("r", batch(0), mode=args.mode).count()
    warm_s = time.perf_counter() - t0
    times, notes = [], 0
    for i in range(1, args.batches + 1):
        t0 = time.perf_counter()
        notes += e.publish("r", batch(i), mode=args.mode).count()
        times.append(time.perf_counter() - t0)
    mem = memory_snapshot()
    per_worker = sorted((pss_mb(p) for p in worker_pids()), reverse=True)
    gid = next(g.group_id for g in e._groups.values())
    st = e.stats()
    js = e._join_shard_states.get(gid)
    out = {"form": args.form, "mode": args.mode, "rows": n, "subs": m, "batch": args.batch, "batches": args.batches,
           "warm_s": warm_s, "warm_notifications": warm, "times": times, "notifications": notes,
           "rows_per_s": args.batch * len(times) / sum(times), "notes_per_s": notes / sum(times),
           "driver_rss_mb": rss_mb(), "driver_rss_subscribed_mb": rss0,
           "python_pss_mb": mem["python_pss_mb"], "worker_pss_mb": per_worker,
           "runtime": {k: st["runtime"].get(k) for k in ("hits", "catch_ups", "rebuilds")},
           "timings": js.timings if js is not None else {},
           "shards": js.shard_subscriptions if js is not None else [],
           "load": load_avg()}
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--subs", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=2_000)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(OUT_DIR))
    ap.add_argument("--form", choices=("whole", "sharded"))
    ap.add_argument("--mode", choices=("unicast", "reformulated"), default="unicast")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.subs, args.batch, args.batches = 5_000, 20_000, 500, 2
    if args.form:
        print("RESULT " + json.dumps(child(args)))
        return
    results = []
    for form in ("whole", "sharded"):
        cmd = [sys.executable, __file__, "--form", form, "--rows", str(args.rows), "--subs", str(args.subs),
               "--batch", str(args.batch), "--batches", str(args.batches), "--shards", str(args.shards),
               "--mode", args.mode]
        before = load_avg()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
            raise SystemExit(f"{form}: no result")
        res = json.loads(line[7:])
        res["load_before"] = before
        results.append(res)
        print(json.dumps(res), flush=True)
    rows = [[r["form"] + (f" ({args.shards} shards)" if r["form"] == "sharded" else ""),
             fmt_num(r["rows_per_s"], 0), fmt_num(r["notes_per_s"], 0),
             " / ".join(fmt_num(t, 2) for t in r["times"]), fmt_num(r["warm_s"], 1),
             fmt_num(r["driver_rss_mb"], 0), " / ".join(fmt_num(x, 0) for x in r["worker_pss_mb"]),
             str(r["runtime"]), f"{r['load_before']} -> {r['load']}"] for r in results]
    table = md_table(["form", "rows/s", "notifications/s", "publish s (each)", "warm-up s", "driver RSS MB",
                      "Python workers PSS MB", "worker cache", "load (1/5/15 min)"], rows)
    m = machine()
    text = f"""# SELECT_JOIN: subscriptions in shards vs every partition holding them (issue 16 item 4; {args.mode} publishes)

`bench/join_shards.py` (`flock /tmp/sparksub-bench.lock nice -n 5`): {args.rows:,} rows in each of R and S,
{args.subs:,} subscriptions (003 Table 4.1's shape, A and C ranges ~100 long), `local[2]`, 2 row partitions;
{args.batches} timed {args.mode} publishes of {args.batch:,} new R rows each after one warm-up publish, each timed end to
end (publish + count of its output).  Each form in a fresh process.  Machine: {m.get('cpu', '')}, {m.get('cpu_count', '')}
cores, shared with other work (the load is in the table).

{table}

Timings of the sharded form's last publish: {json.dumps(results[1].get('timings', {}))}; subscriptions per shard:
{results[1].get('shards')}.  Notifications per timed publish: {results[0]['notifications'] // max(1, args.batches):,}
(the same in both forms; `tests/test_join_shards_engine.py` checks them row for row).

The driver's RSS is taken after `stats()`, which reads the group on the driver: the whole form materialises its
partitions there (each with every subscription), the sharded form its row partitions only (no subscription).

What the figures say: the whole form's Python workers each cache a row partition holding every subscription
(router indexes of {args.subs:,} rectangles per partition: both workers pay for the whole set); the sharded form's
workers cache a row partition without subscriptions and one shard's R-tree ({args.subs // args.shards:,} each),
so a worker's share falls with the shard count.  The sharded form pays a second Spark job per publish (stage 2)
and writes the messages to files between the stages; on 2 shared cores the two stages' tasks cannot overlap
with much else, so its throughput is not a settled comparison on this machine.
"""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "join_shards" if args.mode == "unicast" else f"join_shards_{args.mode}"
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "machine": m, "results": results}, indent=1))
    plot(results, out / f"{stem}.png")
    text += f"\n![rows/s, driver RSS and Python worker PSS, whole vs sharded]({stem}.png)\n"
    (out / f"{stem}.md").write_text(text)
    print(text)


def plot(results: list, path: Path) -> None:
    """Three panels, whole vs sharded: rows/s, the driver's RSS, each Python worker's PSS."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    forms = [r["form"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    axes[0].bar(forms, [r["rows_per_s"] for r in results], color=["#888", "#2a7"])
    axes[0].set_title("updates/s (publish + count)")
    axes[1].bar(forms, [r["driver_rss_mb"] for r in results], color=["#888", "#2a7"])
    axes[1].set_title("driver RSS after stats(), MB")
    width = 0.8 / max(len(r["worker_pss_mb"]) for r in results)
    for i, r in enumerate(results):
        for j, v in enumerate(r["worker_pss_mb"]):
            axes[2].bar(i + (j - 1) * width, v, width, color="#2a7" if r["form"] == "sharded" else "#888")
    axes[2].set_xticks(range(len(forms)), forms)
    axes[2].set_title("Python workers' PSS, MB")
    fig.suptitle("SELECT_JOIN: every partition holding every subscription vs subscriptions in shards")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
