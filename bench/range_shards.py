#!/usr/bin/env python
"""Range groups with their subscriptions in shards (issue 16 item 4; control/range_shards.py) against the whole
group (one task holding the rows and every subscription), through the engine and Spark ``local[2]`` or
``local-cluster[2,1,2048]`` (``--master``).

    flock /tmp/sparksub-bench.lock nice -n 5 python bench/range_shards.py --klass RANGE_TOPK     # publish
    flock /tmp/sparksub-bench.lock nice -n 5 python bench/range_shards.py --klass RANGE_MIN      # stream()
    python bench/range_shards.py --klass RANGE_AGG --quick

RANGE_TOPK, RANGE_DISTINCT and RANGE_AGG run sharded in a ``unicast`` publish (stage 1 the rows, emitting the
class's reformulated messages; stage 2 one task per shard of subscribers, each holding its subscriptions' results);
RANGE_MIN runs sharded in a ``unicast`` ``stream()`` (the stream's stateful stage the rows, the shards a second
stage of the same query).  Each form runs in a child process of its own (a fresh Spark session): load ``--rows``
rows, subscribe ``--subs`` subscriptions in bulk (ranges of X as ``bench/range_min.py``'s: centres ~N(5000, 1500),
lengths ~|N(1000, 1000)|), then ``--batches`` timed batches of ``--batch`` upserts of existing keys (each moves its
row in X and Y): publishes, each timed end to end (``publish`` + counting its checkpointed output) after one
warm-up publish, or one micro-batch each of a bounded file stream into a ``noop`` sink (the first micro-batch, which
seeds the state, reported apart).  Reported per form: rows/s, notifications/s, the driver's RSS, each Python
worker's PSS (what its tasks cache), the cache outcomes.  Writes ``docs/benchmarks/range_shards_<class>.md``, its
JSON and PNG (``--out``).
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
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
DOMAIN = 10_000.0
TEMPLATES = {
    "RANGE_TOPK": "SELECT sym, per FROM stock WHERE risk BETWEEN :lo AND :hi ORDER BY per LIMIT 5",
    "RANGE_DISTINCT": "SELECT DISTINCT sector FROM stock WHERE risk BETWEEN :lo AND :hi",
    "RANGE_AGG": "SELECT SUM(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
    "RANGE_MIN": "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
}
#: what a reformulated run's page adds (``--mode reformulated``)
REFORMULATED_NOTE = """

In a reformulated publish the sharded form runs its rows' replica alone (the publish's Paint variant, Paint-Batch):
its messages are the output, the whole group's row for row, and the subscription shards run no task -- the
messages are appended to their logs, replayed when a unicast publish next runs them.  The whole form's task holds
every subscription."""
#: what a run with the sharded form's rows in X zones adds (``--zones``)
ZONES_NOTE = """

The sharded form's rows run in {zones} X zones (`Engine.range_zones`; operators/shared/range_zones.py): a task per
zone, each holding the rows of its X range and emitting the messages at the X it owns, so no worker holds every
row either{distinct}."""
#: RANGE_DISTINCT's zones close their open Mar ends in a second job (operators/distinct/zones.py)
DISTINCT_ZONES_NOTE = (" (RANGE_DISTINCT: a second job over the zones answers the Mar ends no tuple of the value in "
                       "the message's zone closes, as of the message's seq; operators/distinct/zones.py)")
SECTORS = np.array([f"sector{i:02d}" for i in range(40)])


def rows_table(keys: np.ndarray, rng) -> pa.Table:
    n = len(keys)
    return pa.table({"sym": keys.astype(np.int64), "risk": rng.uniform(0.0, DOMAIN, n),
                     "per": rng.normal(50.0, 15.0, n).round(3), "sector": SECTORS[rng.integers(0, len(SECTORS), n)]})


def subscriptions(m: int) -> dict:
    r = np.random.default_rng(11)
    mid, length = r.normal(5000.0, 1500.0, m), np.abs(r.normal(1000.0, 1000.0, m))
    return {"id": np.char.add("q", np.arange(m).astype(str)),
            "lo": np.clip(mid - length / 2, 0.0, DOMAIN), "hi": np.clip(mid + length / 2, 0.0, DOMAIN)}


def child(args) -> dict:
    spark, baseline = forms.child_session(args, "range-shards")
    e, batches, rss0 = forms.subscribed_engine(
        spark, args, "CREATE TABLE stock (sym BIGINT PRIMARY KEY, risk DOUBLE, per DOUBLE, sector STRING)",
        rows_table, TEMPLATES[args.klass], subscriptions)
    # the sharded form's RANGE_AGG / RANGE_DISTINCT rows in X zones (0: one replica); the whole form's never (the
    # default, None, would split a table of RANGE_ZONE_ROWS rows or more and run the group zoned, one shard)
    e.range_zones = args.zones if args.form == "sharded" else 0
    out = {"form": args.form, "klass": args.klass, "rows": args.rows, "subs": args.subs, "batch": args.batch,
           "batches": args.batches}
    if args.klass == "RANGE_MIN":
        out.update(_stream(spark, e, batches))
    else:
        out.update(_publishes(e, batches, args.mode))
    out.update({"driver_rss_subscribed_mb": rss0, **forms.memory(e, baseline, args)})
    spark.stop()
    return out


def _publishes(e, batches: list, mode: str = "unicast") -> dict:
    t0 = time.perf_counter()
    warm = e.publish("stock", batches[0], mode).count()
    warm_s = time.perf_counter() - t0
    times, notes, stages = [], 0, []
    digest = hashlib.blake2b(digest_size=12)
    for b in batches[1:]:
        t0 = time.perf_counter()
        df = e.publish("stock", b, mode)
        notes += df.count()
        times.append(time.perf_counter() - t0)
        # the sharded form's wall seconds per job (control/range_shards.py: rows, second round, shards / output)
        stages.append({k: round(v, 3) for rs in e._range_shard_states.values() for k, v in rs.timings.items()})
        if mode == "reformulated":   # the messages themselves, in (seq, msg_no) order: equal in both forms
            digest.update(_messages_digest(df))
    n = sum(b.num_rows for b in batches[1:])
    return {"path": "publish", "warm_s": warm_s, "warm_notifications": warm, "times": times, "notifications": notes,
            "rows_per_s": n / sum(times), "notes_per_s": notes / sum(times), "stage_timings": stages,
            **({"messages_digest": digest.hexdigest()} if mode == "reformulated" else {})}


def _messages_digest(df) -> bytes:
    """A digest of a reformulated publish's checkpointed output (every column but the timing-free ones), not timed."""
    rows = sorted(tuple(r) for r in df.select("seq", "msg_no", "op", "new_value", "item_text", "inner_l", "inner_r",
                                              "outer_l", "outer_r").collect())
    return repr(rows).encode()


def _stream(spark, e, batches: list) -> dict:
    """One file per micro-batch (``maxFilesPerTrigger`` 1), oldest first; a noop sink counts nothing, so the
    notifications are counted by the stream's own counters."""
    sdf, ck = forms.file_stream(spark, batches, "sym bigint, risk double, per double, sector string",
                                "range-shards-")
    q = e.stream("stock", sdf).writeStream.format("noop").option("checkpointLocation", str(ck)) \
        .outputMode("append").start()
    try:
        q.processAllAvailable()
        prog = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
        times = [p["durationMs"]["triggerExecution"] / 1000 for p in prog]
        rows = [p["numInputRows"] for p in prog]
        outs = [p.get("sink", {}).get("numOutputRows", -1) for p in prog]
        return {"path": "stream", "warm_s": times[0] if times else None, "times": times[1:],
                "rows_per_s": sum(rows[1:]) / max(sum(times[1:]), 1e-9) if len(times) > 1 else None,
                "median_rows_per_s": statistics.median(r / t for r, t in zip(rows[1:], times[1:]))
                if len(times) > 1 else None, "notifications": sum(x for x in outs[1:] if x >= 0),
                "notes_per_s": sum(x for x in outs[1:] if x >= 0) / max(sum(times[1:]), 1e-9)}
    finally:
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--klass", choices=sorted(TEMPLATES), default="RANGE_TOPK")
    ap.add_argument("--mode", choices=["unicast", "reformulated"], default="unicast",
                    help="publish's mode (RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG): a reformulated publish of the "
                         "sharded form runs the rows alone")
    ap.add_argument("--zones", type=int, default=0,
                    help="RANGE_AGG / RANGE_DISTINCT: the sharded form's rows in this many X zones "
                         "(Engine.range_zones; 0: one replica)")
    started = forms.parent_or_child(ap, __file__, child, OUT_DIR, ("klass", "mode", "zones"))
    if started is None:
        return
    args, results = started
    path = results[0]["path"]
    unit = "publish" if path == "publish" else "micro-batch"
    table = forms.results_table(results, args, unit, f"first {unit}")
    m = machine()
    how = (f"`publish(..., '{args.mode}')` calls, each timed end to end (publish + count of its output) after one "
           "warm-up publish" if path == "publish" else
           "micro-batches of one bounded file stream through `Engine.stream(..., 'unicast')` into a `noop` sink (one "
           "file a trigger), each its `triggerExecution` time; the first micro-batch seeds the state store and is "
           "reported apart")
    reformulated = path == "publish" and args.mode == "reformulated"
    if reformulated:   # no subscriber side runs: the output is the rows' messages (control/range_shards.py)
        path = "publish, reformulated"
    text = f"""# {args.klass}: subscriptions in shards vs the whole group ({path}; issue 16 item 4)

`bench/range_shards.py --klass {args.klass}{' --mode reformulated' if reformulated else ''}\
{f' --zones {args.zones}' if args.zones else ''}`
(`flock /tmp/sparksub-bench.lock nice -n 5`): {args.rows:,} rows,
{args.subs:,} subscriptions `{TEMPLATES[args.klass]}` (X ranges: centres ~N(5000, 1500), lengths ~|N(1000, 1000)|
over [0, 10,000]), `{args.master}`; {args.batches} timed batches of {args.batch:,} upserts of existing keys (each
moves its row in X and Y): {how}.  Each form in a fresh process.  Machine: {m.get('cpu', '')},
{m.get('cpu_count', '')} cores, shared with other work (the load is in the table).

{table}

Notifications in the timed batches: whole {results[0]['notifications']:,}, sharded {results[1]['notifications']:,}
(`tests/test_range_shards_engine.py` / `tests/test_stream_range_shards.py` check the two forms row for row).  The
driver's RSS is taken after `stats()`.  A Python worker of the whole form caches the group with every
subscription; of the sharded form, the rows' replica (no subscription) or one shard's subscribers
({args.subs // args.shards:,} each), so a worker's share of the subscription side falls with the shard count.  The
sharded form pays a second stage per batch (the messages written between the stages); on 2 shared cores its
throughput is not a settled comparison.{REFORMULATED_NOTE if reformulated else ""}\
{ZONES_NOTE.format(zones=args.zones, distinct=DISTINCT_ZONES_NOTE if args.klass == "RANGE_DISTINCT" else "")
 if args.zones else ""}{_digests(results)}
"""
    stem = f"range_shards_{args.klass.lower()}" + ("_reformulated" if reformulated else "") + \
        (f"_{args.zones}_zones" if args.zones else "")
    forms.write_outputs(args, stem, results, m, text,
                        f"{args.klass}: the whole group vs its subscriptions in shards ({path})", f"updates/s ({path})")


def _digests(results: list) -> str:
    got = [r.get("messages_digest") for r in results]
    if None in got:
        return ""
    return (f"\n\nThe timed publishes' messages (every message column, in (seq, msg_no) order) "
            f"{'are equal in both forms' if len(set(got)) == 1 else 'DIFFER'}: digests {' / '.join(got)}.")


if __name__ == "__main__":
    main()
