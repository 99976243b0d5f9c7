"""What the benchmarks of a group's whole form against its sharded form share (``bench/join_shards.py``,
``bench/range_shards.py``): the arguments, each form's child process with its own Spark session, the memory each
child reports (the driver's RSS, each Python worker's PSS, each executor's growth above its baseline on
``local-cluster``), the Markdown table and the three-panel plot."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import fmt_num, load_avg, md_table

BENCH = Path(__file__).resolve().parent
FORMS = ("whole", "sharded")


def add_arguments(ap, out_dir: Path, *, rows: int = 20_000, subs: int = 200_000, batch: int = 2_000,
                  batches: int = 3) -> None:
    ap.add_argument("--rows", type=int, default=rows)
    ap.add_argument("--subs", type=int, default=subs)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--batches", type=int, default=batches)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--master", default="local[2]", help="local[2] or local-cluster[2,1,2048]: each executor's "
                    "Python memory is reported apart")
    ap.add_argument("--quick", action="store_true", help="5K rows, 20K subscriptions, 2 batches of 500")
    ap.add_argument("--out", default=str(out_dir))
    ap.add_argument("--form", choices=FORMS, help="(internal) run one form in this process")


def parse(ap, argv=None):
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.subs, args.batch, args.batches = 5_000, 20_000, 500, 2
    return args


def run_forms(script: str, args, extra: list) -> list:
    """Run ``script --form F`` for each form in a child process of its own (a fresh Spark session: its caches and
    memory are its own) and return each child's ``RESULT {json}`` line, with the load before it."""
    argv = ["--rows", str(args.rows), "--subs", str(args.subs), "--batch", str(args.batch), "--batches",
            str(args.batches), "--shards", str(args.shards), "--master", args.master, *extra]
    results = []
    for form in FORMS:
        before = load_avg()
        proc = subprocess.run([sys.executable, script, "--form", form, *argv], capture_output=True, text=True,
                              check=False)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
            raise SystemExit(f"{form}: no result")
        res = json.loads(line[7:])
        res["load_before"] = before
        results.append(res)
        print(json.dumps(res), flush=True)
    return results


def parent_or_child(ap, script: str, child, out_dir: Path, passed: tuple = ("klass",)):
    """A whole-vs-sharded benchmark's start: parse ``ap``; as a child (``--form``), print ``child(args)``'s result
    and return None; as the parent, ``(args, results)`` of both forms, each run in a fresh process
    (:func:`run_forms`) with the script's own options ``passed`` on to it."""
    add_arguments(ap, out_dir)
    args = parse(ap)
    if args.form:
        print("RESULT " + json.dumps(child(args)))
        return None
    return args, run_forms(script, args, [a for name in passed for a in (f"--{name}", str(getattr(args, name)))])


def write_outputs(args, stem: str, results: list, machine: dict, text: str, title: str, rate_title: str) -> None:
    """The benchmark's Markdown (``text`` and the plot), JSON and PNG under ``args.out``, named
    ``<stem>[_local_cluster]``."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem += "" if args.master == "local[2]" else "_local_cluster"
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "machine": machine, "results": results},
                                                 indent=1))
    plot_forms(results, out / f"{stem}.png", title, rate_title=rate_title)
    text += f"\n![rows/s, driver RSS and Python worker PSS, whole vs sharded]({stem}.png)\n"
    (out / f"{stem}.md").write_text(text)
    print(text)


def child_session(args, app: str):
    """The child's Spark session on ``args.master`` and, on ``local-cluster``, each executor's Python memory before
    any group exists (``runtime._python_baseline``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # the executors unpickle _python_baseline's function from bench/runtime.py: bench/ on their path
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))
    from runtime import _python_baseline, _session
    spark = _session(args.master, f"{app}-{args.form}")
    return spark, (_python_baseline(spark) if args.master != "local[2]" else None)


def file_stream(spark, batches: list, schema: str, prefix: str) -> tuple:
    """The batches as a bounded parquet file stream, one file a micro-batch, oldest first (``maxFilesPerTrigger``
    1): ``(streaming DataFrame, a checkpoint directory)``."""
    import pyarrow.parquet as pq
    work = Path(tempfile.mkdtemp(prefix=prefix))
    src, ck = work / "src", work / "ck"
    src.mkdir()
    now = time.time() - 1000
    for j, b in enumerate(batches):
        path = src / f"part-{j:03d}.parquet"
        pq.write_table(b, path)
        os.utime(path, (now + j, now + j))
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src)), ck


def subscribed_engine(spark, args, table_ddl: str, rows_table, template: str, subscriptions) -> tuple:
    """The child's engine in its form (``args.form``: whole, or ``args.shards`` subscription shards), the table
    loaded with ``args.rows`` rows (``rows_table(keys, rng)``), ``template``'s ``args.subs`` subscriptions
    (``subscriptions(m)``), and the batches to publish (the first a warm-up): ``(engine, batches, the driver's RSS
    before subscribing)``."""
    from runtime import rss_mb

    from sparksub import Engine
    rng = np.random.default_rng(3)
    e = Engine(spark)
    e.keep_workers_warm = None
    e.range_subscription_shards = args.shards if args.form == "sharded" else 0
    e.sql(table_ddl)
    e.load("stock", rows_table(np.arange(args.rows), rng))
    rss0 = rss_mb()
    e.subscribe_many(template, subscriptions(args.subs))
    urng = np.random.default_rng(4)
    batches = [rows_table(urng.integers(0, args.rows, args.batch), urng) for _ in range(args.batches + 1)]
    return e, batches, rss0


def memory(e, baseline, args) -> dict:
    """What the child holds at its end: every Python worker's PSS and each executor's Python growth above its
    baseline (both before ``stats()``, which reads a large group where it lives -- a Spark task that builds the
    whole group in a worker when none caches it, as a stream's groups are not: measured after it, that worker was
    the largest in every stream run), the driver's RSS (after ``stats()``), the worker-cache outcomes."""
    from runtime import (
        executor_python_growth,
        memory_snapshot,
        pss_mb,
        rss_mb,
        worker_pids,
    )
    mem = memory_snapshot()
    workers = sorted((pss_mb(p) for p in worker_pids()), reverse=True)
    st = e.stats()
    return {"driver_rss_mb": rss_mb(), "python_pss_mb": mem["python_pss_mb"], "master": args.master,
            "executor_pss_mb": executor_python_growth(mem, baseline), "worker_pss_mb": workers,
            "runtime": {k: st["runtime"].get(k) for k in ("hits", "catch_ups", "rebuilds")}, "load": load_avg()}


def results_table(results: list, args, unit: str = "publish", first: str = "warm-up") -> str:
    zones = f", {args.zones} X zones" if getattr(args, "zones", 0) else ""
    rows = [[r["form"] + (f" ({args.shards} shards{zones})" if r["form"] == "sharded" else ""),
             fmt_num(r["rows_per_s"], 0), fmt_num(r["notes_per_s"], 0),
             " / ".join(fmt_num(t, 2) for t in r["times"]), fmt_num(r["warm_s"], 1),
             fmt_num(r["driver_rss_mb"], 0), " / ".join(fmt_num(x, 0) for x in r["worker_pss_mb"]),
             " / ".join(fmt_num(x, 0) for x in r["executor_pss_mb"]),
             str(r["runtime"]), f"{r['load_before']} -> {r['load']}"] for r in results]
    growth = "Python PSS per executor" + (" above its baseline" if args.master != "local[2]" else "") + " MB"
    return md_table(["form", "rows/s", "notifications/s", f"{unit} s (each)", f"{first} s", "driver RSS MB",
                     "Python workers PSS MB", growth, "worker cache", "load (1/5/15 min)"], rows)


def plot_forms(results: list, path, title: str, rate_title: str = "updates/s (publish + count)",
               rss_title: str = "driver RSS after stats(), MB") -> None:
    """Three panels per form (a whole group vs its sharded form): rows/s, the driver's RSS, each Python worker's
    PSS (``rows_per_s``, ``driver_rss_mb``, ``worker_pss_mb`` of each result)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    forms = [r["form"] for r in results]
    colours = ["#2a7" if f == "sharded" else "#888" for f in forms]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    axes[0].bar(forms, [r["rows_per_s"] for r in results], color=colours)
    axes[0].set_title(rate_title)
    axes[1].bar(forms, [r["driver_rss_mb"] for r in results], color=colours)
    axes[1].set_title(rss_title)
    width = 0.8 / max(1, max(len(r["worker_pss_mb"]) for r in results))
    for i, r in enumerate(results):
        for j, v in enumerate(r["worker_pss_mb"]):
            axes[2].bar(i + (j - 1) * width, v, width, color=colours[i])
    axes[2].set_xticks(range(len(forms)), forms)
    axes[2].set_title("Python workers' PSS, MB")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
