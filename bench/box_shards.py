#!/usr/bin/env python
"""Box groups with their subscriptions in shards, the rows copied in each (issue 16 item 4; control/box_shards.py)
against the whole group (one task holding the rows, every subscription and their kept results), through the engine
and Spark ``local[2]`` (or ``local-cluster[2,1,2048]``: ``--master``).

    flock /tmp/sparksub-bench.lock nice -n 5 python bench/box_shards.py                    # BOX_MIN
    flock /tmp/sparksub-bench.lock nice -n 5 python bench/box_shards.py --klass BOX_TOPK   # LIMIT 5
    python bench/box_shards.py --quick

Each form runs in a child process of its own (a fresh Spark session, ``bench/forms.py``): load ``--rows`` rows
(x, x2 uniform on [0, 10,000]^2, y ~N(50, 15)), subscribe ``--subs`` box subscriptions in bulk (each side centred
~N(5000, 1500), of length ~|N(500, 500)|), then ``--batches`` timed batches of ``--batch`` upserts of existing keys
(each moves its row in x, x2 and y) through ``publish(..., 'unicast')``, each timed end to end (``publish`` +
counting its output) after one warm-up publish (which builds the kept results).  Reported per form: rows/s,
notifications/s, the driver's RSS, each Python worker's PSS (what its tasks cache), the cache outcomes.  Writes
``docs/benchmarks/box_shards.md`` (BOX_MIN; ``box_shards_box_topk.md`` for BOX_TOPK), its JSON and PNG (``--out``).
"""
from __future__ import annotations

import argparse
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
    # the timed publishes as the range shards' benchmark times them
    out = {"form": args.form, "klass": args.klass, "rows": args.rows, "subs": args.subs, "batch": args.batch,
           "batches": args.batches, **_publishes(e, batches)}
    out.update({"driver_rss_subscribed_mb": rss0, **forms.memory(e, baseline, args)})
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--klass", choices=sorted(TEMPLATES), default="BOX_MIN")
    started = forms.parent_or_child(ap, __file__, child, OUT_DIR)
    if started is None:
        return
    args, results = started
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


if __name__ == "__main__":
    main()
