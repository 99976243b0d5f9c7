"""A two-stage RANGE_AGG, RANGE_DISTINCT, RANGE_MIN or RANGE_TOPK group of ``stream()`` with its rows in X zones
against the same two-stage group with its rows in one state partition (issue 16 item 4; runtime/stream.py, "a
two-stage RANGE_AGG group's rows in X zones", "... RANGE_DISTINCT ...", "... RANGE_MIN / RANGE_MAX ...":
RANGE_DISTINCT's zones answer each other's open Mar ends beside their messages, RANGE_MIN's run DS-CN's round 1 and
the shards round 2, RANGE_TOPK's keep halos built from their state stores).

    flock /tmp/sparksub-bench.lock nice -n 10 python bench/stream_zones.py --zones 2
    flock /tmp/sparksub-bench.lock nice -n 10 python bench/stream_zones.py --klass RANGE_DISTINCT --zones 2
    flock /tmp/sparksub-bench.lock nice -n 10 python bench/stream_zones.py --klass RANGE_MIN --zones 2 \
        --rows 500000 --subs 50000 --batch 10000 --batches 3
    python bench/stream_zones.py --quick

Both forms run the group in two stages (``Engine.range_subscription_shards`` = ``--shards``); the "sharded" form keeps
stage 1's rows in ``--zones`` X zones (``Engine.range_zones``), the "whole" form in one state partition. Each form in
a child process of its own (a fresh Spark session): load ``--rows`` rows, subscribe ``--subs`` ``SUM`` (``--klass
RANGE_DISTINCT``: ``DISTINCT sector``, 40 sectors; ``RANGE_MIN``: ``MIN(per)``; ``RANGE_TOPK``: ``ORDER BY per LIMIT
5``) subscriptions (narrow X ranges -- centres ~U(0, 10,000), lengths ~|N(20, 20)| -- so that an update reaches tens
of subscriptions, not thousands: every update changes every range holding its old or new X), then one bounded file
stream of ``--batches`` + 1 micro-batches of ``--batch`` upserts of existing keys (each moves its row in X and Y) into
a ``noop`` sink (``RANGE_MIN``, ``RANGE_TOPK``: a parquet sink, whose rows' order-free digest -- their count and the
sum of each row's xxhash64 -- says whether both forms' outputs are equal): each micro-batch's ``triggerExecution``
time (the first, which seeds the state store, reported apart), each Python worker's PSS at the end, the notifications
the sink got (equal in both forms). Writes
``docs/benchmarks/stream_zones[_distinct|_range_min|_range_topk]_<zones>.md``, its JSON and PNG.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import forms
from common import machine
from range_shards import _stream, rows_table

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
DOMAIN = 10_000.0
TEMPLATES = {"RANGE_AGG": "SELECT SUM(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
             "RANGE_DISTINCT": "SELECT DISTINCT sector FROM stock WHERE risk BETWEEN :lo AND :hi",
             "RANGE_MIN": "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
             "RANGE_TOPK": "SELECT sym, per FROM stock WHERE risk BETWEEN :lo AND :hi ORDER BY per LIMIT 5"}
STEMS = {"RANGE_AGG": "stream_zones", "RANGE_DISTINCT": "stream_zones_distinct", "RANGE_MIN": "stream_zones_range_min",
         "RANGE_TOPK": "stream_zones_range_topk"}
#: the classes whose outputs go to a parquet sink, both forms' rows compared by an order-free digest of these columns
DIGESTS = {"RANGE_MIN": "subscription_id, seq, value",
           "RANGE_TOPK": "subscription_id, seq, op, value, item_key, item_x"}


def subscriptions(m: int) -> dict:
    r = np.random.default_rng(11)
    mid, length = r.uniform(0.0, DOMAIN, m), np.abs(r.normal(20.0, 20.0, m))
    return {"id": np.char.add("q", np.arange(m).astype(str)),
            "lo": np.clip(mid - length / 2, 0.0, DOMAIN), "hi": np.clip(mid + length / 2, 0.0, DOMAIN)}


def child(args) -> dict:
    from runtime import rss_mb

    from sparksub import Engine
    from sparksub.runtime.stream import stream_stats
    spark, baseline = forms.child_session(args, "stream-zones")
    rng = np.random.default_rng(3)
    e = Engine(spark)
    e.keep_workers_warm = None
    e.range_subscription_shards = args.shards      # both forms in two stages
    e.range_zones = args.zones if args.form == "sharded" else 0
    e.sql("CREATE TABLE stock (sym BIGINT PRIMARY KEY, risk DOUBLE, per DOUBLE, sector STRING)")
    e.load("stock", rows_table(np.arange(args.rows), rng))
    rss0 = rss_mb()
    e.subscribe_many(TEMPLATES[args.klass], subscriptions(args.subs))
    urng = np.random.default_rng(4)
    batches = [rows_table(urng.integers(0, args.rows, args.batch), urng) for _ in range(args.batches + 1)]
    out = {"form": args.form, "klass": args.klass, "zones": args.zones if args.form == "sharded" else 0,
           "rows": args.rows,
           "subs": args.subs, "batch": args.batch, "batches": args.batches}
    if args.klass in DIGESTS:   # the outputs to parquet: both forms' rows compared by their digest
        from pyspark.sql.streaming import DataStreamWriter
        sink, original = Path(tempfile.mkdtemp(prefix="stream-zones-out-")), DataStreamWriter.format

        def to_parquet(writer, _source):   # range_shards._stream's noop sink as a parquet one (read back below)
            return original(writer, "parquet").option("path", str(sink))
        with mock.patch.object(DataStreamWriter, "format", to_parquet):
            got = _stream(spark, e, batches)
        rows = spark.read.parquet(str(sink)).where("op <> 'rejected'")
        digest = rows.selectExpr("count(*) AS n",   # (a decimal sum: a long one would overflow)
                                 f"sum(CAST(xxhash64({DIGESTS[args.klass]}) AS DECIMAL(38, 0))) AS h").first()
        out["output_digest"] = [int(digest["n"]), int(digest["h"] or 0)]
    else:
        got = _stream(spark, e, batches)
    sid = next(iter(e._live_streams))
    out.update(got)
    out["stream_stats"] = stream_stats(sid)
    out.update({"driver_rss_subscribed_mb": rss0, **forms.memory(e, baseline, args)})
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--zones", type=int, default=2, help="the zoned form's X zones (Engine.range_zones)")
    ap.add_argument("--klass", choices=sorted(TEMPLATES), default="RANGE_AGG",
                    help="the group's class: RANGE_AGG (SUM), RANGE_DISTINCT, RANGE_MIN (DS-CN's two rounds across "
                         "the stages) or RANGE_TOPK (LIMIT 5; each zone's halos from its state store)")
    started = forms.parent_or_child(ap, __file__, child, OUT_DIR, ("zones", "klass"))
    if started is None:
        return
    args, results = started
    table = forms.results_table(results, args, "micro-batch", "first micro-batch")
    notes = [r.get("output_digest", r["notifications"]) for r in results]
    same = "equal" if len({str(n) for n in notes}) == 1 else "NOT EQUAL"
    m = machine()
    klass = "" if args.klass == "RANGE_AGG" else f" --klass {args.klass}"
    minimum = args.klass in DIGESTS
    sink = "a parquet sink" if minimum else "a `noop` sink"
    what = "rows and the sum of their xxhash64" if minimum else "notifications"
    title = f"{args.klass} in a stream: stage 1's rows in {args.zones} X zones vs one state partition"
    text = f"""# {title} (issue 16 item 4)

`bench/stream_zones.py{klass} --zones {args.zones}` (`flock /tmp/sparksub-bench.lock nice -n 10`): {args.rows:,} rows,
{args.subs:,} subscriptions `{TEMPLATES[args.klass]}` (X ranges: centres ~U(0, 10,000), lengths ~|N(20, 20)|), both
forms in two stages with {args.shards} subscription shards, `{args.master}`; one bounded file stream of {args.batches}
timed micro-batches of {args.batch:,} upserts of existing keys (each moves its row in X and Y) after a first one that
seeds the state store, into {sink}, each its `triggerExecution` time. "sharded" is the zoned form, "whole" the
rows in one state partition. Each form in a fresh process. Machine: {m.get('cpu', '')}, {m.get('cpu_count', '')}
cores, shared with other work (the load is in the table). Outputs of the timed micro-batches ({what}): {notes}
({same}).

{table}
"""
    forms.write_outputs(args, f"{STEMS[args.klass]}_{args.zones}", results, m, text,
                        f"{args.klass} stream: rows in X zones vs one partition", "updates/s (micro-batch)")


if __name__ == "__main__":
    main()
