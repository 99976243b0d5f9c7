#!/usr/bin/env python
"""SELECT_JOIN with its subscriptions in shards (issue 16 item 4; control/join_shards.py) against the whole form
(every row partition holding every subscription), through the engine and Spark ``local[2]`` or ``local-cluster[2,1,2048]`` (``--master``).

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
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import forms
from common import machine

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
TEMPLATE = ("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :alo AND :ahi AND s.c BETWEEN :clo AND :chi")


def child(args) -> dict:
    spark, baseline = forms.child_session(args, "join-shards")
    from runtime import rss_mb

    from sparksub import Engine
    from sparksub.operators.joins.router import synthetic_workload
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
    gid = next(g.group_id for g in e._groups.values())
    out = {"form": args.form, "mode": args.mode, "rows": n, "subs": m, "batch": args.batch, "batches": args.batches,
           "warm_s": warm_s, "warm_notifications": warm, "times": times, "notifications": notes,
           "rows_per_s": args.batch * len(times) / sum(times), "notes_per_s": notes / sum(times),
           "driver_rss_subscribed_mb": rss0, **forms.memory(e, baseline, args)}
    js = e._join_shard_states.get(gid)
    out.update({"timings": js.timings if js is not None else {},
                "shards": js.shard_subscriptions if js is not None else []})
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    forms.add_arguments(ap, OUT_DIR)
    ap.add_argument("--mode", choices=("unicast", "reformulated"), default="unicast")
    args = forms.parse(ap)
    if args.form:
        print("RESULT " + json.dumps(child(args)))
        return
    results = forms.run_forms(__file__, args, ["--mode", args.mode])
    table = forms.results_table(results, args)
    m = machine()
    text = f"""# SELECT_JOIN: subscriptions in shards vs every partition holding them (issue 16 item 4; {args.mode} publishes)

`bench/join_shards.py` (`flock /tmp/sparksub-bench.lock nice -n 5`): {args.rows:,} rows in each of R and S,
{args.subs:,} subscriptions (003 Table 4.1's shape, A and C ranges ~100 long), `{args.master}`, 2 row partitions;
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
with much else, so its throughput is not a settled comparison on this machine.  On `local-cluster` the column
"per executor above its baseline" is each executor's Python processes' PSS less theirs before any group existed
(the issue's target: each executor holds about half of a large group's subscriptions and rows).
"""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "join_shards" if args.mode == "unicast" else f"join_shards_{args.mode}"
    stem += "" if args.master == "local[2]" else "_local_cluster"
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "machine": m, "results": results}, indent=1))
    forms.plot_forms(results, out / f"{stem}.png",
               "SELECT_JOIN: every partition holding every subscription vs subscriptions in shards")
    text += f"\n![rows/s, driver RSS and Python worker PSS, whole vs sharded]({stem}.png)\n"
    (out / f"{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
