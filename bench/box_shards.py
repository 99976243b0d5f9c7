#!/usr/bin/env python
"""Box groups with their subscriptions in shards, the rows copied in each (issue 16 item 4; control/box_shards.py)
against the whole group (one task holding the rows, every subscription and their kept results), through the engine
and Spark ``local[2]`` (or ``local-cluster[2,1,2048]``: ``--master``).

    flock /tmp/sparksub-bench.lock nice -n 5 python bench/box_shards.py                    # BOX_MIN
    flock /tmp/sparksub-bench.lock nice -n 5 python bench/box_shards.py --klass BOX_TOPK   # LIMIT 5
    python bench/box_shards.py --quick
    flock /tmp/sparksub-bench.lock nice -n 5 python bench/box_shards.py --klass BOX_TOPK --path stream   # stream()

Each form runs in a child process of its own (a fresh Spark session, ``bench/forms.py``): load ``--rows`` rows
(x, x2 uniform on [0, 10,000]^2, y ~N(50, 15)), subscribe ``--subs`` box subscriptions in bulk (each side centred
~N(5000, 1500), of length ~|N(500, 500)|), then ``--batches`` timed batches of ``--batch`` upserts of existing keys
(each moves its row in x, x2 and y) through ``publish(..., 'unicast')``, each timed end to end (``publish`` +
counting its output) after one warm-up publish (which builds the kept results).  Reported per form: rows/s,
notifications/s, the driver's RSS, each Python worker's PSS (what its tasks cache), the cache outcomes.  Writes
``docs/benchmarks/box_shards.md`` (BOX_MIN; ``box_shards_box_topk.md`` for BOX_TOPK), its JSON and PNG (``--out``).

``--path stream``: the batches as one micro-batch each of a bounded file stream through ``Engine.stream(...,
'unicast')`` into a ``noop`` sink (``runtime/stream.py``: the sharded form's group one state partition per shard, the
rows copied in each), each its ``triggerExecution`` time, the first (which seeds the state) apart; the Python workers'
RSS and PSS taken while the query still runs, the stream's own counters in place of the worker cache's.  Writes
``box_shards_stream[_box_topk].md``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import forms
from common import machine
from range_shards import DOMAIN, OUT_DIR, _publishes

TEMPLATES = {
    "BOX_MIN": "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi AND beta BETWEEN :lo2 AND :hi2",
    "BOX_TOPK": "SELECT sym, per FROM stock WHERE risk BETWEEN :lo AND :hi AND beta BETWEEN :lo2 AND :hi2 "
                "ORDER BY per LIMIT 5",
}


def rows_table(keys: np.ndarray, rng) -> pa.Table:
    n = len(keys)
    return pa.table({"sym": keys.astype(np.int64), "risk": rng.uniform(0.0, DOMAIN, n),
                     "beta": rng.uniform(0.0, DOMAIN, n), "per": rng.normal(50.0, 15.0, n).round(3)})


def subscriptions(m: int) -> dict:
    r = np.random.default_rng(11)
    out = {"id": np.char.add("q", np.arange(m).astype(str))}
    for lo, hi in (("lo", "hi"), ("lo2", "hi2")):
        mid, length = r.normal(5000.0, 1500.0, m), np.abs(r.normal(500.0, 500.0, m))
        out[lo], out[hi] = np.clip(mid - length / 2, 0.0, DOMAIN), np.clip(mid + length / 2, 0.0, DOMAIN)
    return out


def child(args) -> dict:
    spark, baseline = forms.child_session(args, "box-shards")
    e, batches, rss0 = forms.subscribed_engine(
        spark, args, "CREATE TABLE stock (sym BIGINT PRIMARY KEY, risk DOUBLE, beta DOUBLE, per DOUBLE)",
        rows_table, TEMPLATES[args.klass], subscriptions)
    out = {"form": args.form, "klass": args.klass, "rows": args.rows, "subs": args.subs, "batch": args.batch,
           "batches": args.batches, "driver_rss_subscribed_mb": rss0}
    if args.path == "stream":
        out.update(_stream(spark, e, batches, args))
    else:   # the timed publishes as the range shards' benchmark times them
        out.update({**_publishes(e, batches), **forms.memory(e, baseline, args)})
    spark.stop()
    return out


def _stream(spark, e, batches: list, args) -> dict:
    """The batches as a bounded parquet file stream (one file a micro-batch) through ``e.stream(...)`` into a noop
    sink: each micro-batch's ``triggerExecution`` time (the first seeds the state); the Python workers' RSS and PSS
    while the query runs (their cached partitions: a whole group, or one shard), the stream's counters."""
    from common import load_avg
    from runtime import pss_mb, rss_mb, worker_pids

    from sparksub.runtime.stream import stream_stats
    sdf, ck = forms.file_stream(spark, batches, "sym bigint, risk double, beta double, per double", "box-shards-")
    df = e.stream("stock", sdf)
    q = df.writeStream.format("noop").option("checkpointLocation", str(ck)).outputMode("append").start()
    try:
        q.processAllAvailable()
        workers = sorted(((pss_mb(p), rss_mb(p)) for p in worker_pids()), reverse=True)
        prog = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
    finally:
        q.stop()
    times = [p["durationMs"]["triggerExecution"] / 1000 for p in prog]
    rows = [p["numInputRows"] for p in prog]
    counters = stream_stats(df)
    timed = max(sum(times[1:]), 1e-9)
    return {"path": "stream", "warm_s": times[0] if times else None, "times": times[1:],
            "rows_per_s": sum(rows[1:]) / timed if len(times) > 1 else None,
            "median_rows_per_s": statistics.median(r / t for r, t in zip(rows[1:], times[1:])) if len(times) > 1
            else None, "notifications": counters["notifications"], "notes_per_s": counters["notifications"] / timed,
            "warm_notifications": None, "driver_rss_mb": rss_mb(), "worker_pss_mb": [w[0] for w in workers],
            "worker_rss_mb": [w[1] for w in workers], "executor_pss_mb": [], "master": args.master,
            "runtime": {k: counters[k] for k in ("seeded", "cache_hits", "caught_up", "rebuilt", "shard_builds",
                                                 "shard_cache_hits")}, "load": load_avg()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--klass", choices=sorted(TEMPLATES), default="BOX_MIN")
    ap.add_argument("--path", choices=["publish", "stream"], default="publish",
                    help="publish calls, or micro-batches of a bounded file stream through Engine.stream")
    started = forms.parent_or_child(ap, __file__, child, OUT_DIR, ("klass", "path"))
    if started is None:
        return
    args, results = started
    if args.path == "stream":
        return _stream_report(args, results)
    table = forms.results_table(results, args, "publish", "warm-up publish")
    m = machine()
    whole, sharded = results
    text = f"""# {args.klass}: subscriptions in shards, the rows copied in each, vs the whole group (issue 16 item 4)

`bench/box_shards.py --klass {args.klass}` (`flock /tmp/sparksub-bench.lock nice -n 5`): {args.rows:,} rows (x, x2
uniform on [0, 10,000]², y ~N(50, 15)), {args.subs:,} subscriptions `{TEMPLATES[args.klass]}` (each side centred
~N(5000, 1500), of length ~|N(500, 500)|), `{args.master}`; {args.batches} timed `publish(..., 'unicast')` calls of
{args.batch:,} upserts of existing keys (each moves its row in x, x2 and y), each timed end to end (publish + count of
its output) after one warm-up publish, which builds the kept results.  Each form in a fresh process.  Machine:
{m.get('cpu', '')}, {m.get('cpu_count', '')} cores, shared with other work (the load is in the table).

{table}

Notifications in the timed publishes: whole {whole['notifications']:,}, sharded {sharded['notifications']:,}; in the
warm-up publish {whole['warm_notifications']:,} and {sharded['warm_notifications']:,}
(`tests/test_box_shards_engine.py` checks the two forms row for row).  The driver's RSS is taken after `stats()`.  A
Python worker of the whole form caches the group with every subscription and its kept result; of the sharded form,
one shard: {args.subs // args.shards:,} subscriptions or so and their kept results, and **every row** (the rows are
copied in each shard, as BAND_JOIN copies its subscriptions).  The shards run in publish's one job, one task each, so
each update is applied by every shard's cores (the rows' work is repeated, the subscriptions' work split); on 2
shared cores the throughput is not a settled comparison.
"""
    stem = "box_shards" if args.klass == "BOX_MIN" else f"box_shards_{args.klass.lower()}"
    forms.write_outputs(args, stem, results, m, text, f"{args.klass}: the whole group vs its subscriptions in shards",
                        "updates/s (publish + count)")


def _stream_report(args, results: list) -> None:
    table = forms.results_table(results, args, "micro-batch", "first micro-batch")
    m = machine()
    whole, sharded = results
    largest = " vs ".join(f"{r['worker_rss_mb'][0]:,.0f} MB RSS / {r['worker_pss_mb'][0]:,.0f} MB PSS"
                          for r in results)
    text = f"""# {args.klass} in a stream: subscriptions in shards, the rows copied in each, vs the whole group \
(issue 16 item 4)

`bench/box_shards.py --klass {args.klass} --path stream` (`flock /tmp/sparksub-bench.lock nice -n 5`): {args.rows:,}
rows (x, x2 uniform on [0, 10,000]², y ~N(50, 15)), {args.subs:,} subscriptions `{TEMPLATES[args.klass]}` (each side
centred ~N(5000, 1500), of length ~|N(500, 500)|), `{args.master}`; {args.batches} timed micro-batches of {args.batch:,}
upserts of existing keys (each moves its row in x, x2 and y) of one bounded file stream through
`Engine.stream(..., 'unicast')` into a `noop` sink (one file a trigger), each its `triggerExecution` time; the first
micro-batch seeds the state store (every row written into each state partition) and is reported apart.  Each form in
a fresh process.  Machine: {m.get('cpu', '')}, {m.get('cpu_count', '')} cores, shared with other work (the load is in
the table).

{table}

Notifications in the timed micro-batches (the stream's counters): whole {whole['notifications']:,}, sharded
{sharded['notifications']:,} (`tests/test_stream_box_shards.py` checks the two forms row for row).  The Python
workers' memory is taken while the query still runs (after its last micro-batch); the largest worker, whole vs
sharded: {largest}.  A worker of the whole form caches the group with every subscription and its kept result; of the
sharded form, one shard's partition: {args.subs // args.shards:,} subscriptions or so and their kept results, and
**every row** (each shard's state partition holds them too).  "worker cache" is the stream's counters: a partition
rebuilt (from its state store rows) or caught up (from its log ring) in a timed micro-batch is one whose task Spark
gave to a Python worker that had not cached it, or had cached it micro-batches ago -- Spark ties no state partition
to a worker, and such a micro-batch pays the shard's rebuild.
"""
    stem = "box_shards_stream" if args.klass == "BOX_MIN" else f"box_shards_stream_{args.klass.lower()}"
    forms.write_outputs(args, stem, results, m, text,
                        f"{args.klass} stream: the whole group vs its subscriptions in shards", "updates/s (stream)")


if __name__ == "__main__":
    main()
