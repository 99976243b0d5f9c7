#!/usr/bin/env python
"""The Catalyst range-join rewrite against Spark's own plan for the same SQL, in one run::

    python bench/catalyst.py            # t: 100,000 rows; q: 10K / 100K / 1M parameter rows (~40 min)
    python bench/catalyst.py --quick    # t: 20,000 rows; q: 1K / 10K / 30K, short caps (~2-3 min)
    python bench/catalyst.py --formulations topk,distinct   # only these; MERGED into the saved raw JSON

Writes ``docs/benchmarks/catalyst.md`` and ``docs/benchmarks/catalyst.png`` (``--out DIR`` elsewhere).
All formulations (the default) also measure the build and session start and write a fresh raw JSON; a subset
(``--formulations``) replaces only its own rows in the existing raw JSON (backed up first), keeps every other
row and figure as it was, records the run's own date, load and duration, and the report says which rows came
from which run.  ``--sizes`` / ``--t-rows`` override the sizes (for trying the script out).

What a user writes without us -- a table of parameters joined with the data on a range, aggregated per
parameter row -- run twice on one SparkSession built with the extension: the optimizer rule on (our group
operator, ``FlatMapCoGroupsInArrow range_join_aggregate``) and off (``spark.sparksub.rangeJoinRewrite=false``:
Spark's broadcast nested-loop join).  ``bridge.rewrites`` checks that every "ours" run was rewritten and no
Spark run was.  Four formulations:

* range-min: ``SELECT q.id, MIN(t.per) FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi GROUP BY q.id``;
* band: ``... COUNT(*), MIN(t.per) ... ON t.risk BETWEEN q.c - q.w AND q.c + q.w``, plus the bucketed
  equi-join a Spark-savvy user would write instead (t bucketed by floor(risk), each q row exploded over the
  buckets its band covers, equi-join, band re-checked), which the rule leaves alone;
* top-k: ``ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY t.per DESC) <= 5`` over range-min's join (our
  ``range_join_topk``); ROW_NUMBER among equal ``per`` is arbitrary, so only (id, per, rn) are compared;
* DISTINCT: ``SELECT DISTINCT q.id, t.grade`` over range-min's join, ``grade = CAST(per / 100 AS INT)`` (10
  values; our ``range_join_distinct``).
Top-k and DISTINCT run at the two smallest sizes only (Spark's plan at 1M would take well over 15 min).

Each timed run is ``spark.sql(QUERY).observe(...).write.format("noop").save()``: the noop sink runs the whole
plan and drops the rows; ``observe`` (Spark's ``CollectMetrics``, on every run of every plan) computes, in the
same pass, the row count, the sum of ``hash(row)`` (exact and order-independent: the result check) and the
sum of the aggregate values.  At the smallest size the result rows are also collected and compared exactly.
Spark's plan at the largest size runs under a wall-clock cap (``cancelAllJobs`` from a timer).

Also: the extension's build time (fresh caches), and session start with and without it (fresh processes).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import pyarrow as pa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt_num, load_avg, log, machine, md_table  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
RULE = "spark.sparksub.rangeJoinRewrite"

RANGE_SQL = "SELECT q.id, MIN(t.per) AS m FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi GROUP BY q.id"
BAND_SQL = ("SELECT q.id, COUNT(*) AS n, MIN(t.per) AS m FROM q JOIN t "
            "ON t.risk BETWEEN q.c - q.w AND q.c + q.w GROUP BY q.id")
BUCKETED_SQL = """SELECT qb.id, COUNT(*) AS n, MIN(tb.per) AS m
FROM (SELECT id, c, w, explode(sequence(CAST(floor(c - w) AS BIGINT), CAST(floor(c + w) AS BIGINT))) AS b
      FROM q) qb
JOIN (SELECT risk, per, CAST(floor(risk) AS BIGINT) AS b FROM t) tb
  ON tb.b = qb.b AND tb.risk BETWEEN qb.c - qb.w AND qb.c + qb.w
GROUP BY qb.id"""
TOPK_SQL = ("SELECT * FROM (SELECT q.id, t.sym, t.per, ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY t.per DESC) "
            "AS rn FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi) WHERE rn <= 5")
DISTINCT_SQL = "SELECT DISTINCT q.id, t.grade FROM q JOIN t ON t.risk BETWEEN q.lo AND q.hi"
TOPK_K = 5

FORMULATIONS = ("range", "band", "topk", "distinct")
NAMES = {"range": "range-min", "band": "band (COUNT, MIN)", "topk": "top-5 (ROW_NUMBER ≤ 5)",
         "distinct": "DISTINCT (id, grade)"}
#: per formulation: the query, the columns summed in the observed checksum, the columns hashed (None: all;
#: top-k leaves out sym, which ROW_NUMBER picks arbitrarily among equal per)
SPECS = {
    "range": (RANGE_SQL, ["m"], None),
    "band": (BAND_SQL, ["n", "m"], None),
    "topk": (TOPK_SQL, ["per", "rn"], ["id", "per", "rn"]),
    "distinct": (DISTINCT_SQL, ["grade"], None),
}
#: how many of the sizes each formulation runs (top-k and DISTINCT: the two smallest)
N_SIZES = {"range": None, "band": None, "topk": 2, "distinct": 2}

SESSION_CHILD = r"""
import sys, time
t_start = float(sys.argv[1]); catalyst = sys.argv[2] == "1"
from sparksub.engine import spark_session
spark = spark_session("local[2]", "bench-catalyst-start", catalyst=catalyst)
spark.sql("SELECT 1").collect()
ready = time.time() - t_start
from sparksub.jvm import bridge
print("RESULT", ready, bridge.loaded(spark), flush=True)
spark.stop()
"""


# ---- build and session start (before the main session: nothing else of ours running) -------------------

def measure_build(n: int) -> list[float]:
    from sparksub.jvm import build
    times = []
    for i in range(n):
        with tempfile.TemporaryDirectory(prefix="bench-catalyst-jar-") as tmp:
            t0 = time.perf_counter()
            jar = build.jar_path(cache=tmp)
            wall = time.perf_counter() - t0
            assert build.last_build_seconds is not None, "the fresh cache had a jar?"
            times.append(build.last_build_seconds)
            log(f"  build {i + 1}: {build.last_build_seconds:.2f} s (jar_path {wall:.2f} s, {jar.stat().st_size:,} B)")
    return times


def measure_session_start(n: int) -> dict:
    from sparksub.jvm import build
    build.jar_path()  # the default cache has the jar: the catalyst=True starts below do not compile
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    out = {}
    for catalyst in (False, True):
        times = []
        for i in range(n):
            t0 = time.time()
            done = subprocess.run([sys.executable, "-c", SESSION_CHILD, repr(t0), "1" if catalyst else "0"],
                                  capture_output=True, text=True, env=env, timeout=600)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT")), None)
            if line is None:
                raise RuntimeError(f"session-start child failed:\n{done.stdout}\n{done.stderr[-3000:]}")
            _, secs, loaded = line.split()
            assert loaded == str(catalyst), f"extension loaded={loaded}, wanted {catalyst}"
            times.append(float(secs))
            log(f"  session start catalyst={catalyst} {i + 1}: {float(secs):.2f} s")
        out[catalyst] = times
    return out


# ---- the query runs ----------------------------------------------------------------------------------

class Runner:
    def __init__(self, spark):
        from sparksub.jvm import bridge
        self.spark, self.bridge = spark, bridge

    def run(self, sql: str, rewrite: bool, value_cols: list[str], cap: float | None = None,
            hash_cols: list[str] | None = None) -> dict:
        """One timed noop run with observed checksums; {'s', 'fired', 'metrics', 'cancelled'}."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        spark = self.spark
        spark.conf.set(RULE, "true" if rewrite else "false")
        before = self.bridge.rewrites(spark)
        df = spark.sql(sql)
        obs = Observation("chk")
        exprs = [F.count(F.lit(1)).alias("rows"),
                 F.sum(F.hash(*[df[c] for c in (hash_cols or df.columns)])).alias("hash_sum")]
        exprs += [F.sum(df[c]).alias(f"sum_{c}") for c in value_cols]
        timer, cancelled = None, threading.Event()
        if cap is not None:
            def cancel():
                cancelled.set()
                spark.sparkContext.cancelAllJobs()
            timer = threading.Timer(cap, cancel)
            timer.daemon = True
        t0 = time.perf_counter()
        if timer:
            timer.start()
        try:
            df.observe(obs, *exprs).write.format("noop").mode("overwrite").save()
            err = None
        except Exception as e:  # noqa: BLE001 - a cancelled job surfaces as a py4j / Spark error
            err = e
        finally:
            if timer:
                timer.cancel()
        dt = time.perf_counter() - t0
        fired = self.bridge.rewrites(spark) - before
        if err is not None:
            if not cancelled.is_set():
                raise err
            self._wait_idle()
            return {"s": dt, "fired": fired, "metrics": None, "cancelled": True}
        return {"s": dt, "fired": fired, "metrics": dict(obs.get), "cancelled": False}

    def _wait_idle(self, timeout=120):
        tracker = self.spark.sparkContext.statusTracker()
        t0 = time.perf_counter()
        while tracker.getActiveJobsIds() and time.perf_counter() - t0 < timeout:
            time.sleep(0.5)

    def collect(self, sql: str, rewrite: bool, cols: list[str] | None = None) -> list[tuple]:
        self.spark.conf.set(RULE, "true" if rewrite else "false")
        df = self.spark.sql(sql)
        return sorted(tuple(r) for r in (df.select(*cols) if cols else df).collect())

    def plan(self, sql: str, rewrite: bool) -> str:
        self.spark.conf.set(RULE, "true" if rewrite else "false")
        return self.spark.sql(sql)._jdf.queryExecution().executedPlan().toString()


def repeat(runner: Runner, sql, rewrite, value_cols, *, runs, slow_s=60.0, cap=None, label="", hash_cols=None):
    """Up to ``runs`` runs (one if the first takes longer than ``slow_s``); stop at a cancelled one."""
    results = []
    for i in range(runs):
        r = runner.run(sql, rewrite, value_cols, cap=cap, hash_cols=hash_cols)
        results.append(r)
        tag = "CANCELLED at cap" if r["cancelled"] else f"{r['metrics']}"
        log(f"    {label} run {i + 1}: {r['s']:.2f} s, rewrites +{r['fired']}; {tag}")
        want_fired = rewrite and sql is not BUCKETED_SQL
        if want_fired and r["fired"] < 1:
            failure = runner.spark._jvm.sparksub.RangeJoinRule.lastFailure()
            raise AssertionError(f"the rule did not fire on: {sql}\nRangeJoinRule.lastFailure(): {failure}")
        if not want_fired and r["fired"] != 0:
            raise AssertionError(f"the rule fired with rewrite={rewrite} on: {sql}")
        if r["cancelled"] or r["s"] > slow_s:
            break
    return results


def same_metrics(a: dict | None, b: dict | None) -> bool | None:
    if a is None or b is None:
        return None
    for k in a:
        if k.startswith("sum_") and isinstance(a[k], float):
            if not math.isclose(a[k], b[k], rel_tol=1e-9):
                return False
        elif a[k] != b[k]:
            return False
    return True


def core_seconds(spark, kind: str, runs: int) -> tuple[float, int]:
    """The pure core (``range_join_aggregate`` / ``_topk`` / ``_distinct``, in the driver, one thread) on the
    same q and t: what the answer costs without Spark around it."""
    from sparksub.operators.range_join.aggregate import range_join_aggregate
    from sparksub.operators.range_join.enumerate import range_join_distinct, range_join_topk
    q = spark.table("q").toArrow()
    t = spark.table("t").toArrow()
    if kind in ("topk", "distinct"):
        params = pa.table({"id": q["id"], "__lo": q["lo"], "__hi": q["hi"]})
        if kind == "topk":
            data = pa.table({"__x": t["risk"], "__y": t["per"], "sym": t["sym"], "per": t["per"]})
            run = lambda: range_join_topk(params, data, ["id"], TOPK_K, True, False, False, False,  # noqa: E731
                                          ["sym", "per"])
        else:
            data = pa.table({"__x": t["risk"], "__y": t["grade"]})
            run = lambda: range_join_distinct(params, data, ["id"], False, False)  # noqa: E731
    elif kind == "range":
        params = pa.table({"id": q["id"], "__lo": q["lo"], "__hi": q["hi"]})
        data = pa.table({"__x": t["risk"], "__y0": t["per"]})
        aggs = ["min"]
    else:
        c, w = q["c"].to_numpy(), q["w"].to_numpy()
        params = pa.table({"id": q["id"], "__lo": c - w, "__hi": c + w})
        data = pa.table({"__x": t["risk"], "__y1": t["per"]})
        aggs = ["count_star", "min"]
    if kind in ("range", "band"):
        run = lambda: range_join_aggregate(params, data, ["id"], aggs, False, False)  # noqa: E731
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out.num_rows


def plumbing_seconds(spark, kind: str, runs: int) -> float:
    """Our plan's data flow with a Python function that returns nothing: q hashed into the shuffle
    partitions, t replicated to each, both shipped to the Python workers as Arrow -- the cost around the
    core."""
    from pyspark.sql import functions as F
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    q = spark.table("q")
    lo, hi = (("c - w", "c + w") if kind == "band" else ("lo", "hi"))
    params = q.selectExpr("id AS __k0", f"{lo} AS __lo", f"{hi} AS __hi",
                          f"CAST(pmod(xxhash64(id), {parts}) AS INT) AS __rja_part")
    # the data columns our plan ships for each formulation
    cols = {"topk": [("risk", "__x"), ("per", "__y"), ("sym", "__d0"), ("per", "__d1")],
            "distinct": [("risk", "__x"), ("grade", "__y")]}.get(kind, [("risk", "__x"), ("per", "__y0")])
    data = spark.table("t").select(*[F.col(c).alias(a) for c, a in cols],
                                   F.explode(F.sequence(F.lit(0), F.lit(parts - 1))).alias("__rja_part"))
    schema = pa.schema([("__k0", pa.int64()), ("__a0", pa.float64())])

    def nothing(left, right):
        return schema.empty_table()

    times = []
    for _ in range(runs):
        df = params.groupBy("__rja_part").cogroup(data.groupBy("__rja_part")).applyInArrow(
            nothing, "__k0 bigint, __a0 double")
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def planning_seconds(spark, sql: str, rewrite: bool, runs: int) -> float:
    """``spark.sql`` to the physical plan (analysis, optimisation -- with the rule on, its py4j call into
    Python that builds our plan -- and planning), no execution."""
    spark.conf.set(RULE, "true" if rewrite else "false")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        spark.sql(sql)._jdf.queryExecution().executedPlan()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def make_tables(spark, kind: str, n: int, t_rows: int, seed: int):
    """Register ``t`` (once) and ``q`` for (kind, n), cached and materialised."""
    prev = getattr(make_tables, "_q", None)
    if prev is not None:
        prev.unpersist(blocking=True)
    if kind != "band":  # range-min, top-k and DISTINCT: the same q
        q = (spark.range(n).selectExpr("id", f"rand({seed + 1}) * 100 AS lo", f"rand({seed + 2}) * 5 AS width")
             .selectExpr("id", "lo", "lo + width AS hi"))
    else:
        q = spark.range(n).selectExpr("id", f"rand({seed + 3}) * 100 AS c", f"rand({seed + 4}) * 0.5 AS w")
    q = q.cache()
    q.count()
    q.createOrReplaceTempView("q")
    make_tables._q = q


def bench_formulation(runner, spark, kind, sizes, *, t_rows, runs, spark_cap, core_runs, seed):
    sql, value_cols, hash_cols = SPECS[kind]
    rows = []
    prev_spark = None  # (n, seconds) of the last finished Spark-plan size, for the extrapolation
    for idx, n in enumerate(sizes):
        log(f"  [{kind}] N = {n:,} (load {load_avg()})")
        make_tables(spark, kind, n, t_rows, seed)
        row = {"kind": kind, "n": n, "load_start": load_avg()}
        ours = repeat(runner, sql, True, value_cols, runs=runs, slow_s=float("inf"), label="ours",
                      hash_cols=hash_cols)
        row["ours_runs"] = [r["s"] for r in ours]
        row["ours_s"] = statistics.median(row["ours_runs"])
        row["ours_first_s"] = ours[0]["s"]
        m_ours = ours[-1]["metrics"]
        row["rows_out"] = m_ours["rows"]
        assert all(same_metrics(r["metrics"], m_ours) for r in ours), "our runs disagree with each other"
        largest = idx == len(sizes) - 1
        cap = spark_cap if largest else None
        sp = repeat(runner, sql, False, value_cols, runs=runs, cap=cap, label="Spark's plan", hash_cols=hash_cols)
        finished = [r for r in sp if not r["cancelled"]]
        row["spark_runs"] = [r["s"] for r in sp]
        row["spark_cancelled"] = not finished
        row["spark_cap"] = cap
        row["spark_s"] = statistics.median([r["s"] for r in finished]) if finished else None
        row["spark_extrapolated_s"] = None
        if not finished and prev_spark is not None:
            row["spark_extrapolated_s"] = prev_spark[1] * n / prev_spark[0]
        if finished:
            prev_spark = (n, row["spark_s"])
        row["equal_checksum"] = same_metrics(m_ours, finished[-1]["metrics"]) if finished else None
        row["equal_rows"] = None
        if idx == 0:  # the smallest size: every row (top-k: its determined columns), exactly
            got, want = runner.collect(sql, True, hash_cols), runner.collect(sql, False, hash_cols)
            row["equal_rows"] = got == want
            log(f"    rows compared exactly{' on ' + str(hash_cols) if hash_cols else ''}: {len(got):,} vs "
                f"{len(want):,}, equal {got == want}")
            if hash_cols:  # for the log only: do the arbitrary columns happen to agree too?
                log(f"    ... and on every column: {runner.collect(sql, True) == runner.collect(sql, False)}")
        row["metrics_ours"], row["metrics_spark"] = m_ours, (finished[-1]["metrics"] if finished else None)
        if kind == "band":
            bk = repeat(runner, BUCKETED_SQL, False, value_cols, runs=runs, cap=spark_cap, label="bucketed SQL")
            bfin = [r for r in bk if not r["cancelled"]]
            row["bucketed_runs"] = [r["s"] for r in bk]
            row["bucketed_s"] = statistics.median([r["s"] for r in bfin]) if bfin else None
            row["bucketed_equal"] = same_metrics(m_ours, bfin[-1]["metrics"]) if bfin else None
        row["core_s"], core_rows = core_seconds(spark, kind, core_runs)
        row["plumbing_s"] = plumbing_seconds(spark, kind, runs)
        row["plan_on_s"] = planning_seconds(spark, sql, True, runs)
        row["plan_off_s"] = planning_seconds(spark, sql, False, runs)
        assert core_rows == row["rows_out"], (core_rows, row["rows_out"])
        row["load_end"] = load_avg()
        log(f"  -> ours {row['ours_s']:.2f} s, Spark's plan {row['spark_s']}, core {row['core_s']:.3f} s; "
            f"checksum equal {row['equal_checksum']}; "
            f"plumbing {row['plumbing_s']:.2f} s, planning on/off {row['plan_on_s']:.2f}/{row['plan_off_s']:.2f} s")
        rows.append(row)
    return rows


# ---- report ------------------------------------------------------------------------------------------

def spark_cell(r) -> str:
    if r["spark_s"] is not None:
        return fmt_num(r["spark_s"])
    out = f"> {r['spark_cap']:.0f} (cancelled)"
    if r["spark_extrapolated_s"]:
        out += f"; linear extrapolation ~{fmt_num(r['spark_extrapolated_s'])} (not measured"
        out += "; below the cap, so only a lower bound)" if r["spark_extrapolated_s"] < r["spark_cap"] else ")"
    return out


def ratio_cell(r) -> str:
    if r["spark_s"] is not None:
        return f"{r['spark_s'] / r['ours_s']:,.1f}x"
    out = f"> {r['spark_cap'] / r['ours_s']:,.0f}x"
    if r["spark_extrapolated_s"] and r["spark_extrapolated_s"] > r["spark_cap"]:
        out += f" (~{r['spark_extrapolated_s'] / r['ours_s']:,.0f}x extrapolated)"
    return out


def yn(v) -> str:
    return "n.a." if v is None else ("yes" if v else "NO")


def equal_cell(r) -> str:
    parts = []
    if r["equal_rows"] is not None:
        parts.append(f"{yn(r['equal_rows'])} (all rows{': id, per, rn' if r['kind'] == 'topk' else ''})")
    parts.append(f"{yn(r['equal_checksum'])} (checksum)" if r["equal_checksum"] is not None else "n.a.")
    return "; ".join(parts)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    titles = {"range": "range-min: t.risk BETWEEN q.lo AND q.hi",
              "band": "band: t.risk BETWEEN q.c - q.w AND q.c + q.w",
              "topk": "top-5: ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY t.per DESC) <= 5",
              "distinct": "SELECT DISTINCT q.id, t.grade (10 values)"}
    kinds = [k for k in FORMULATIONS if any(r["kind"] == k for r in rows)]
    ncols = 2 if len(kinds) > 1 else 1
    nrows = math.ceil(len(kinds) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 4.3 * nrows), squeeze=False)
    for ax in axes.flat[len(kinds):]:
        ax.set_visible(False)
    for ax, kind in zip(axes.flat, kinds):
        title = titles[kind]
        rs = [r for r in rows if r["kind"] == kind]
        if rs[0].get("run"):
            title += f"\n(separate run, {rs[0]['run']})"
        if not rs:
            continue
        x = [r["n"] for r in rs]
        ax.plot(x, [r["ours_s"] for r in rs], "o-", color="C0", label="rule on: our operator (rewritten)")
        fin = [r for r in rs if r["spark_s"] is not None]
        ax.plot([r["n"] for r in fin], [r["spark_s"] for r in fin], "s-", color="C3",
                label="rule off: Spark's plan (nested-loop join)")
        for r in rs:
            if r["spark_s"] is None:
                ax.plot([r["n"]], [r["spark_cap"]], "^", color="C3", markersize=9,
                        label=f"Spark's plan cancelled at {r['spark_cap']:.0f} s (> cap)")
                if r["spark_extrapolated_s"] and fin:
                    ax.plot([fin[-1]["n"], r["n"]], [fin[-1]["spark_s"], r["spark_extrapolated_s"]], ":",
                            color="C3", label="Spark's plan, linear extrapolation (not measured)")
        if kind == "band":
            bk = [r for r in rs if r.get("bucketed_s") is not None]
            ax.plot([r["n"] for r in bk], [r["bucketed_s"] for r in bk], "D--", color="C2",
                    label="bucketed equi-join SQL (Spark)")
        ax.plot(x, [r["core_s"] for r in rs], "x:", color="C7", label="core alone (driver, 1 thread)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("parameter rows N (|t| = %s)" % f"{rs[0]['t_rows']:,}")
        ax.set_ylabel("seconds (median)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def sizes_of(kind: str, sizes: list[int]) -> list[int]:
    return sizes[:N_SIZES[kind]] if N_SIZES[kind] else list(sizes)


def first_lines(plan: str, stop: str) -> str:
    """The plan's lines down to the first one containing ``stop`` (the part that shows the algorithm)."""
    out = []
    for line in plan.strip().splitlines():
        out.append(line)
        if stop in line:
            break
    return "\n".join(out)


def measure(quick: bool, formulations=FORMULATIONS, t_rows=None, sizes=None, spark_cap=None) -> dict:
    if quick:
        t_rows0, sizes0, runs, spark_cap0, n_build, n_start, core_runs = 20_000, [1_000, 10_000, 30_000], 2, 3.0, 1, 1, 1
    else:
        t_rows0, sizes0, runs, spark_cap0, n_build, n_start, core_runs = 100_000, [10_000, 100_000, 1_000_000], 3, 900.0, 3, 3, 3
    t_rows, sizes = t_rows or t_rows0, sizes or sizes0
    spark_cap = spark_cap if spark_cap is not None else spark_cap0
    full = set(formulations) == set(FORMULATIONS)
    seed = 7
    res = {"quick": quick, "t_rows": t_rows, "sizes": sizes, "runs": runs, "spark_cap": spark_cap,
           "formulations": list(formulations), "machine": machine(), "load0": load_avg()}
    t_all = time.perf_counter()

    if full:
        res.update(n_build=n_build, n_start=n_start)
        log(f"extension build x{n_build} (load {load_avg()})")
        res["build_times"] = measure_build(n_build)
        log(f"session start x{n_start} each (load {load_avg()})")
        starts = measure_session_start(n_start)
        res["start_off"], res["start_on"] = starts[False], starts[True]

    from sparksub import Engine
    from sparksub.engine import spark_session
    spark = spark_session("local[2]", "bench-catalyst", catalyst=True)
    Engine(spark)  # attaches the bridge the rule calls
    runner = Runner(spark)
    # grade is derived from per (10 values, for DISTINCT): sym, risk and per are what they were without it
    t = (spark.range(t_rows).selectExpr("id AS sym", f"rand({seed}) * 100 AS risk",
                                        f"rand({seed + 10}) * 1000 AS per")
         .selectExpr("sym", "risk", "per", "CAST(per / 100 AS INT) AS grade").cache())
    t.count()
    t.createOrReplaceTempView("t")

    # plans at the smallest size, before anything runs
    res["plans"] = {}
    for kind in formulations:
        if kind == "band":
            continue
        make_tables(spark, kind, sizes[0], t_rows, seed)
        sql = SPECS[kind][0]
        ours, theirs = runner.plan(sql, True), runner.plan(sql, False)
        log(ours)
        log(theirs)
        if kind == "range":
            res["plan_ours"], res["plan_spark"] = ours, theirs
        else:
            res["plans"][kind] = [ours, theirs]

    rows = []
    for kind in formulations:
        rows += bench_formulation(runner, spark, kind, sizes_of(kind, sizes), t_rows=t_rows, runs=runs,
                                  spark_cap=spark_cap, core_runs=core_runs, seed=seed)
    for r in rows:
        r["t_rows"] = t_rows
    spark.conf.unset(RULE)
    res["rows"] = rows
    res["elapsed"] = time.perf_counter() - t_all
    res["load1"] = load_avg()
    spark.stop()
    return res


def merge(old: dict, new: dict) -> dict:
    """``new`` (a run of some formulations) into ``old`` (the saved measurements): ``new``'s formulations'
    rows replace theirs, every other row and figure stays as it was; the run's own date, load, duration and
    settings are kept under ``extra_runs`` and each of its rows names it (``run``)."""
    if old.get("quick") != new["quick"] or old.get("t_rows") != new["t_rows"]:
        raise SystemExit(f"refusing to merge: the saved run has quick={old.get('quick')}, t_rows={old.get('t_rows')}; "
                         f"this one quick={new['quick']}, t_rows={new['t_rows']}")
    run_id = new["machine"]["date"]
    kinds = set(new["formulations"])
    out = dict(old)
    extra = dict(old.get("extra_runs", {}))
    extra[run_id] = {k: new[k] for k in ("formulations", "machine", "load0", "load1", "elapsed", "t_rows", "sizes",
                                         "runs", "spark_cap", "plans")}
    if new.get("note"):
        extra[run_id]["note"] = new["note"]
    for r in new["rows"]:
        r["run"] = run_id
    rows = [r for r in old["rows"] if r["kind"] not in kinds] + new["rows"]
    out["rows"] = sorted(rows, key=lambda r: (FORMULATIONS.index(r["kind"]), r["n"]))
    if "range" in kinds:
        out["plan_ours"], out["plan_spark"] = new["plan_ours"], new["plan_spark"]
    used = {r.get("run") for r in out["rows"]}
    out["extra_runs"] = {k: v for k, v in extra.items() if k in used}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--raw", type=Path, default=None,
                    help="JSON file for the measurements (default: bench-catalyst[-quick].json in the temp dir)")
    ap.add_argument("--from-raw", action="store_true", help="rewrite the report from --raw without measuring")
    ap.add_argument("--formulations", default=",".join(FORMULATIONS),
                    help=f"comma-separated subset of {','.join(FORMULATIONS)} (default: all); a subset is merged "
                         "into the existing --raw file (backed up first), replacing only its own rows")
    ap.add_argument("--sizes", default=None, help="comma-separated N values (default: by --quick)")
    ap.add_argument("--t-rows", type=int, default=None, help="rows of t (default: by --quick)")
    ap.add_argument("--note", default=None,
                    help="what else the machine was doing during the run, printed with the run in the report")
    ap.add_argument("--spark-cap", type=float, default=None,
                    help="wall-clock cap (s) on Spark's plan at each formulation's largest size")
    args = ap.parse_args(argv)
    formulations = [f.strip() for f in args.formulations.split(",") if f.strip()]
    unknown = [f for f in formulations if f not in FORMULATIONS]
    if unknown or not formulations:
        ap.error(f"unknown formulation(s) {unknown}; choose from {','.join(FORMULATIONS)}")
    formulations = [f for f in FORMULATIONS if f in formulations]
    raw = args.raw or Path(tempfile.gettempdir()) / f"bench-catalyst{'-quick' if args.quick else ''}.json"
    if args.from_raw:
        res = json.loads(raw.read_text())
    else:
        subset = set(formulations) != set(FORMULATIONS)
        if subset and not raw.exists():
            ap.error(f"--formulations {args.formulations} merges into {raw}, which does not exist: "
                     "run all formulations first (or point --raw at the saved measurements)")
        sizes = [int(v) for v in args.sizes.split(",")] if args.sizes else None
        res = measure(args.quick, formulations, t_rows=args.t_rows, sizes=sizes, spark_cap=args.spark_cap)
        if args.note:
            res["note"] = args.note
        if subset:
            old = json.loads(raw.read_text())
            backup = raw.with_name(f"{raw.stem}.{time.strftime('%Y%m%d-%H%M%S')}.bak.json")
            backup.write_text(raw.read_text())
            log(f"saved measurements backed up to {backup}")
            res = merge(old, res)
        raw.write_text(json.dumps(res, indent=1, default=str))
        log(f"measurements saved to {raw}")
    args.out.mkdir(parents=True, exist_ok=True)
    plot(res["rows"], args.out / "catalyst.png")
    (args.out / "catalyst.md").write_text(report(res))
    log(f"wrote {args.out / 'catalyst.md'} and catalyst.png")
    return 0


def crossover(rs) -> str:
    """Where Spark's plan would catch up with ours: the line a + b N through Spark's two smallest finished
    sizes, solved for our floor (our fastest median at any size) -- an estimate, and said so."""
    fin = [r for r in rs if r["spark_s"] is not None]
    if len(fin) < 2:
        return ""
    (n0, s0), (n1, s1) = (fin[0]["n"], fin[0]["spark_s"]), (fin[1]["n"], fin[1]["spark_s"])
    b = (s1 - s0) / (n1 - n0)
    a = s0 - b * n0
    floor = min(r["ours_s"] for r in rs)
    if b <= 0:
        return ""
    head = (f"the line through Spark's two smallest sizes is {fmt_num(a)} s + {b * 1e3:.2f} ms per parameter "
            f"row; our floor (fastest median) is {fmt_num(floor)} s")
    if a >= floor:
        return head + (": the line never gets below it, so no crossover shows at this |t| — every measured size "
                       "favours ours (the intercept is an extrapolation, not measured)")
    n_star = (floor - a) / b
    return head + (f", reached at N ≈ {n_star:,.0f} (|q|·|t| ≈ {n_star * rs[0]['t_rows']:.0e} comparisons): only "
                   f"below that would Spark's plan be as fast — an extrapolation, not measured; every measured "
                   f"size favours ours")


def reading(res: dict) -> str:
    rows, t_rows = res["rows"], res["t_rows"]
    out = []
    for kind, label in (("range", "Range-min"), ("band", "Band")):
        rs = [r for r in rows if r["kind"] == kind]
        last = rs[-1]
        ns = ", ".join(f"{r['n']:,}" for r in rs)
        sp = ", ".join(f"{fmt_num(r['spark_s'])} s" if r["spark_s"] is not None else
                       f"> {r['spark_cap']:.0f} s (cancelled)" for r in rs)
        per_row = ", ".join(f"{1e3 * r['spark_s'] / r['n']:.2f}" for r in rs if r["spark_s"] is not None)
        text = (f"**{label}.** For N = {ns}, ours takes {', '.join(fmt_num(r['ours_s']) + ' s' for r in rs)} and "
                f"Spark's plan {sp} ({per_row} ms per parameter row where it finished): the nested loop makes "
                f"|q| × |t| comparisons and aggregates every joined pair, so it grows linearly with N, while ours "
                f"sorts t once per shuffle partition and answers every parameter row with two binary searches and "
                f"O(1) lookups (sparse table for MIN, prefix counts for COUNT). At N = {last['n']:,} ours is "
                f"{ratio_cell(last)} faster, {fmt_num(last['n'] / last['ours_s'])} parameter rows/s.")
        if last["spark_s"] is None and last["spark_extrapolated_s"]:
            if last["spark_extrapolated_s"] < last["spark_cap"]:
                text += (f" The linear extrapolation from N = {rs[-2]['n']:,} ({fmt_num(last['spark_extrapolated_s'])} s) "
                         f"is below the {last['spark_cap']:.0f} s the cancelled run had already used, so it is a lower "
                         f"bound here, not an estimate; that run shared the cores with other work (load "
                         f"{last['load_start']} → {last['load_end']}).")
            else:
                text += (f" Linear extrapolation from N = {rs[-2]['n']:,}: ~{fmt_num(last['spark_extrapolated_s'])} s "
                         f"(not measured).")
        elif last["spark_s"] is not None and len(rs) > 1 and rs[-2]["spark_s"]:
            lin = rs[-2]["spark_s"] * last["n"] / rs[-2]["n"]
            if last["spark_s"] < 0.85 * lin:
                text += (f" Spark's N = {last['n']:,} run took less than linear scaling from N = {rs[-2]['n']:,} "
                         f"predicts ({fmt_num(lin)} s): the machine's other work eased during it (load "
                         f"{last['load_start']} → {last['load_end']}), the likely reason, so its per-row cost is not "
                         f"comparable with the smaller sizes'.")
        xo = crossover(rs)
        if xo:
            text += f" Crossover: {xo}."
        if kind == "band":
            bk = [r for r in rs if r.get("bucketed_s")]
            if bk:
                bx = ", ".join(f"{r['bucketed_s'] / r['ours_s']:.1f}x" for r in bk)
                sb = ", ".join(f"{r['spark_s'] / r['bucketed_s']:.0f}x" for r in bk if r["spark_s"])
                text += (" The bucketed equi-join — the index a user builds by hand — is the best plain Spark SQL "
                         f"here: {', '.join(fmt_num(r['bucketed_s']) + ' s' for r in bk)}, {sb} faster than Spark's "
                         f"plan for the same question but still {bx} our time. It checks every t row of the one or two "
                         f"1-wide buckets a band touches (~{t_rows // 100:,} rows per bucket), so it too grows "
                         f"linearly with N, and its bucket width has to suit the data and the band widths.")
        out.append(text)
    rr = [r for r in rows if r["kind"] in ("range", "band")]
    rng = [r for r in rr if r["kind"] == "range"]
    big = max(rr, key=lambda r: (r["n"], r["core_s"]))
    mid = [r for r in rr if r["n"] < big["n"]]
    out.append(
        "**What our time is.** Up to N = "
        f"{max(r['n'] for r in mid):,} it is almost all fixed cost, not the algorithm: the core alone needs "
        f"{fmt_num(min(r['core_s'] for r in mid), 3)}–{fmt_num(max(r['core_s'] for r in mid), 3)} s "
        f"({max(100 * r['core_s'] / r['ours_s'] for r in mid):.0f}% of ours at most), while planning with the rule on "
        f"takes {fmt_num(min(r['plan_on_s'] for r in mid))}–{fmt_num(max(r['plan_on_s'] for r in mid))} s "
        f"per query (against {fmt_num(min(r['plan_off_s'] for r in mid))}–{fmt_num(max(r['plan_off_s'] for r in mid))} s "
        f"with it off: the optimizer's py4j call into Python, which builds our plan as DataFrames) and our plan's data "
        f"flow with an empty Python function {fmt_num(min(r['plumbing_s'] for r in mid))}–"
        f"{fmt_num(max(r['plumbing_s'] for r in mid))} s (q hashed and shuffled, t replicated "
        f"into each partition, both sorted by part and handed to the Python workers as Arrow). At N = "
        f"{big['n']:,} the per-row work shows: the core alone (one thread, all of q) takes "
        f"{' / '.join(fmt_num(r['core_s']) + ' s' for r in rr if r['n'] == big['n'])} and the data flow "
        f"{' / '.join(fmt_num(r['plumbing_s']) + ' s' for r in rr if r['n'] == big['n'])} (range-min / band); our plan "
        f"runs the core in two tasks on half of q each. The first run of the session "
        f"({fmt_num(rng[0]['ours_first_s'])} s, then {', '.join(fmt_num(s) for s in rng[0]['ours_runs'][1:])} s, "
        f"range-min N = {rng[0]['n']:,}) also starts the Python workers and warms the JVM, which is why that row's "
        f"median is above the N = {rng[1]['n']:,} row's (most likely): a one-off query pays this start once.")
    marks = {run_id: "†" * (i + 1) for i, (run_id, _) in enumerate(extra_runs(res))}
    enum = enumerate_reading(res)
    if enum:
        out.append(enum)
    b_med = statistics.median(res["build_times"])
    d = statistics.median(res["start_on"]) - statistics.median(res["start_off"])
    spread = max(max(res["start_on"]) - min(res["start_on"]), max(res["start_off"]) - min(res["start_off"]))
    out.append(
        f"**Build and start.** The jar builds in {fmt_num(b_med)} s (javac dominates), once per Spark version "
        f"and source hash, then comes from the cache. A session with the extension reached its first query "
        f"{fmt_num(abs(d))} s {'later' if d >= 0 else 'sooner'} than one without (medians of {res['n_start']} fresh "
        f"processes each), inside the {fmt_num(spread)} s spread between runs of one setting: no measurable start-up "
        f"cost under this load.")
    out.append(
        f"**Load.** Other work (tests) shared the two cores for most of the run (load average {res['load0']} at "
        f"start, {res['load1']} at end; each row's range is in the first table), which slows every plan; the "
        f"ratios within a row are the figures to compare, and the long Spark runs saw the most variation."
        + "".join(f" The later run of {' and '.join(NAMES[k] for k in meta['formulations'])} ({run_id}) saw load "
                  f"{meta['load0']} at start and {meta['load1']} at end"
                  + (f" ({marks.get(run_id, '†')}: what else ran)" if meta.get("note") else "") + "."
                  for run_id, meta in extra_runs(res)))
    return "\n\n".join(out)


def extra_runs(res: dict) -> list[tuple[str, dict]]:
    """The later runs merged into ``res`` (``--formulations``), oldest first, that still have rows."""
    used = {r.get("run") for r in res["rows"]}
    return sorted(((k, v) for k, v in res.get("extra_runs", {}).items() if k in used), key=lambda kv: kv[0])


def enum_plans(res: dict, kind: str) -> list[str] | None:
    """[rule on, rule off] plan of ``kind`` at its smallest size, from whichever run measured it."""
    for r in res["rows"]:
        if r["kind"] == kind:
            meta = res.get("extra_runs", {}).get(r.get("run"), res)
            return meta.get("plans", {}).get(kind)
    return None


def enumerate_reading(res: dict) -> str:
    """The Reading paragraph on top-k and DISTINCT (empty when neither was measured)."""
    rows = res["rows"]
    tk = [r for r in rows if r["kind"] == "topk"]
    ds = [r for r in rows if r["kind"] == "distinct"]
    if not tk and not ds:
        return ""
    runs = sorted({r["run"] for r in tk + ds if r.get("run")})
    when = f" (measured in the later run of {', '.join(runs)})" if runs else ""

    def figures(rs, label):
        ns = ", ".join(f"{r['n']:,}" for r in rs)
        sp = ", ".join(f"{fmt_num(r['spark_s'])} s" if r["spark_s"] is not None else
                       f"> {r['spark_cap']:.0f} s (cancelled)" for r in rs)
        return (f"{label}, N = {ns}: ours takes {', '.join(fmt_num(r['ours_s']) + ' s' for r in rs)}, Spark's "
                f"plan {sp} ({', '.join(ratio_cell(r) for r in rs)})")

    parts = [figures(rs, label) for rs, label in ((tk, "Top-5"), (ds, "DISTINCT")) if rs]
    text = (f"**Top-5 and DISTINCT**{when}. The same join as range-min (same q, same t), with a different head. "
            + "; ".join(parts) + ". ")
    heads = []
    if tk:
        plan = (enum_plans(res, "topk") or ["", ""])[1]
        heads.append("for top-5, sorts every joined pair by (id, per DESC)"
                     + (" so that WindowGroupLimit can keep 5 rows per id before the shuffle (ROW_NUMBER runs after "
                        "it)" if "WindowGroupLimit" in plan else " for ROW_NUMBER"))
        if len(tk) > 1 and tk[0]["spark_s"] and tk[-1]["spark_s"]:
            g, ng = tk[-1]["spark_s"] / tk[0]["spark_s"], tk[-1]["n"] / tk[0]["n"]
            if g > 1.1 * ng:
                heads[-1] += (f" — its time grew faster than N, ×{g:.1f} for ×{ng:.0f} N (a sort of all joined pairs "
                              f"is more than linear), so the crossover line below is rough")
    if ds:
        heads.append("for DISTINCT, hash-aggregates every joined pair on (id, grade)")
    text += (f"Spark's plan is again the nested loop — |q| × |t| comparisons, ~2.5% of t (~{res['t_rows'] // 40:,} "
             f"rows) joined per parameter row — and then, {'; '.join(heads)}. Ours lists each parameter row's "
             "answer from the index instead of its joined rows: the top 5 by splitting its slice at rank minima "
             "(O(k²) per parameter row), the distinct grades by splitting at previous-occurrence minima (O(1) per "
             "value listed), whatever the slice's length.")
    for rs, label, per in ((tk, "Top-5", "5"), (ds, "DISTINCT", "up to 10")):
        if not rs:
            continue
        last = rs[-1]
        flow = f"the data flow with an empty Python function {fmt_num(last['plumbing_s'])} s"
        if last["plumbing_s"] > last["ours_s"]:
            flow += (" (more than ours' whole median, which includes that data flow: this median was disturbed, "
                     "not a cost of the plan)")
        text += (f" {label} at N = {last['n']:,}: {last['rows_out']:,} result rows ({per} per parameter row, against "
                 f"one for range-min); ours is {ratio_cell(last)} faster, "
                 f"{fmt_num(last['n'] / last['ours_s'])} parameter rows/s; the core alone takes "
                 f"{fmt_num(last['core_s'], 3)} s ({100 * last['core_s'] / last['ours_s']:.0f}% of ours), {flow} "
                 f"and planning with the rule on {fmt_num(last['plan_on_s'])} s.")
        xo = crossover(rs)
        if xo:
            text += f" Crossover ({label}): {xo}."
    # the same join measured in two runs: say how far apart the runs' Spark times are
    for r in reversed(ds or tk):
        same = next((o for o in rows if o["kind"] == "range" and o["n"] == r["n"] and o.get("run") != r.get("run")
                     and o["spark_s"]), None)
        if same and r.get("run") and r["spark_s"] and r["spark_s"] < 0.75 * same["spark_s"]:
            text += (f" Spark's plan for {NAMES[r['kind']].split(' (')[0]} at N = {r['n']:,} ({fmt_num(r['spark_s'])} s) "
                     f"took {r['spark_s'] / same['spark_s']:.0%} of range-min's {fmt_num(same['spark_s'])} s at the "
                     f"same N — the same join and comparisons, another aggregate — in the first run, which shared "
                     f"the cores with tests throughout (the load averages of both runs also count the benchmark's "
                     f"own work, so they look alike): most likely that, and the reason rows of different runs are not "
                     f"compared with each other.")
            break
    return text


def report(res: dict) -> str:
    rows, sizes, runs, spark_cap, t_rows = res["rows"], res["sizes"], res["runs"], res["spark_cap"], res["t_rows"]
    info, build_times, n_build, n_start = res["machine"], res["build_times"], res["n_build"], res["n_start"]
    starts = {False: res["start_off"], True: res["start_on"]}
    plan_ours, plan_spark = res["plan_ours"].strip(), res["plan_spark"].strip()
    elapsed, load0, load1 = res["elapsed"], res["load0"], res["load1"]
    main_rows, cost_rows = [], []
    later = extra_runs(res)
    marks = {run_id: "†" * (i + 1) for i, (run_id, _) in enumerate(later)}
    for r in rows:
        name = NAMES[r["kind"]] + (f" {marks[r['run']]}" if r.get("run") else "")
        band = r["kind"] == "band"
        main_rows.append([
            name, f"{r['n']:,}", f"{r['rows_out']:,}", fmt_num(r["ours_s"]), spark_cell(r),
            (fmt_num(r["bucketed_s"]) if r.get("bucketed_s") else "n.a.") if band else "—",
            ratio_cell(r),
            (f"{r['bucketed_s'] / r['ours_s']:,.1f}x" if r.get("bucketed_s") else "n.a.") if band else "—",
            fmt_num(r["n"] / r["ours_s"]),
            equal_cell(r) + (f"; bucketed: {yn(r['bucketed_equal'])} (checksum)" if band else ""),
            f"{r['load_start']} → {r['load_end']}"])
        cost_rows.append([
            name, f"{r['n']:,}", fmt_num(r["ours_s"]), fmt_num(r["ours_first_s"]), fmt_num(r["plan_on_s"]),
            fmt_num(r["plan_off_s"]), fmt_num(r["plumbing_s"]), fmt_num(r["core_s"], 3),
            f"{100 * r['core_s'] / r['ours_s']:.0f}%"])
    table = md_table(["formulation", "N (q rows)", "result rows", "ours s", "Spark's plan s", "bucketed Spark SQL s",
                      "Spark's plan ÷ ours", "bucketed ÷ ours", "ours: parameter rows/s", "results equal",
                      "load at start → end"], main_rows)
    cost_table = md_table(["formulation", "N", "ours s (median)", "ours, first run s", "planning, rule on s",
                           "planning, rule off s", "our plan's data flow, empty Python function s",
                           "core alone s", "core ÷ ours"], cost_rows)
    later_notes = []
    for run_id, meta in later:
        first = next(r for r in rows if r.get("run") == run_id)
        ns = ", ".join(f"{n:,}" for n in sorted({r["n"] for r in rows if r.get("run") == run_id}))
        same = all(meta["machine"].get(k) == info.get(k) for k in ("platform", "cpu_count", "cpu", "python",
                                                                    "pyspark", "numpy", "pyarrow"))
        m = meta["machine"]
        later_notes.append(
            f"{marks[run_id]} Measured in a separate, later run: `python bench/catalyst.py --formulations "
            f"{','.join(meta['formulations'])}` on {run_id} (total {meta['elapsed'] / 60:.1f} min; load average "
            f"{meta['load0']} at start, {meta['load1']} at end), merged into the saved measurements; "
            + ("same machine and versions" if same else
               f"{m['platform']}, Python {m['python']}, pyspark {m['pyspark']}, numpy {m['numpy']}, pyarrow "
               f"{m['pyarrow']}")
            + f"; same protocol, same q (range-min's) and t, N = {ns} only"
            + (f"; Spark's plan at each formulation's largest N under a {meta['spark_cap']:,.0f} s safety cap ("
               + ("reached: see the cell" if any(r["spark_cancelled"] for r in rows if r.get("run") == run_id)
                  else "not reached") + ")" if meta.get("spark_cap") else "")
            + f". Its first run ({NAMES[first['kind']]}, N = {first['n']:,}, ours: {fmt_num(first['ours_first_s'])} s) "
            f"started that session's Python workers. {meta['note'].rstrip('.') + '. ' if meta.get('note') else ''}"
            f"Its figures are not from the same minutes as the other rows': compare within a row.")
    later_text = ("\n\n" + "\n\n".join(later_notes)) if later_notes else ""
    kinds = {r["kind"] for r in rows}
    enum = kinds & {"topk", "distinct"}
    enum_sql = "".join(f"\n-- {NAMES[k]}\n{SPECS[k][0]}" for k in ("topk", "distinct") if k in kinds)
    enum_workload = ""
    if enum:
        grade_run = ("the later run's t" if later and all(r.get("run") for r in rows if r["kind"] in enum)
                     else "t")
        enum_workload = (
            f" {' and '.join({'topk': 'Top-5', 'distinct': 'DISTINCT'}[k] for k in ('topk', 'distinct') if k in kinds)}"
            f" use range-min's q at N = "
            f"{', '.join(f'{n:,}' for n in sorted({r['n'] for r in rows if r['kind'] in enum}))} only (Spark's plan "
            f"at 1M would take well over 15 minutes); {grade_run} has one more column, `grade = CAST(per / 100 AS "
            f"INT)` (10 values, 0–9), derived from `per` in a second projection, so `sym`, `risk` and `per` keep "
            f"their values (same seeds).")
    enum_protocol = ""
    if "topk" in kinds:
        enum_protocol = (" Top-5: `ROW_NUMBER` among equal `per` picks any row (in Spark as in ours), so its "
                         "comparison — the exact rows at the smallest size and `SUM(hash(…))` — covers only the "
                         "determined columns (id, per, rn), not `sym`; the sums are of `per` and `rn`.")
    enum_plan_text = ""
    if any(enum_plans(res, k) for k in enum):
        short = {"topk": "top-5", "distinct": "DISTINCT"}
        heading = " and ".join(short[k] for k in ("topk", "distinct") if k in enum)
        enum_plan_text = f"\n\n## Plans ({heading}, before execution)"
    for k in ("topk", "distinct"):
        pl = enum_plans(res, k) if k in kinds else None
        if pl:
            n0 = min(r["n"] for r in rows if r["kind"] == k)
            enum_plan_text += (
                f"\n\n{NAMES[k]}, N = {n0:,}, down to our operator (rule on) and to the join (rule off):\n\n"
                f"```\n{first_lines(pl[0], 'FlatMapCoGroupsInArrow')}\n```\n\n"
                f"```\n{first_lines(pl[1], 'BroadcastNestedLoopJoin')}\n```")
    runs_lines = "\n".join(
        f"- {r['kind']} N={r['n']:,}: ours {', '.join(f'{s:.2f}' for s in r['ours_runs'])}; Spark's plan "
        f"{', '.join(f'{s:.1f}' for s in r['spark_runs'])}{' (cancelled)' if r['spark_cancelled'] else ''}"
        + (f"; bucketed {', '.join(f'{s:.2f}' for s in r['bucketed_runs'])}" if r["kind"] == "band" else "")
        for r in rows)
    build_table = md_table(["what", "median s", "runs s"], [
        ["extension jar: javac + zip, fresh cache", fmt_num(statistics.median(build_times)),
         ", ".join(f"{s:.2f}" for s in build_times)],
        ["session start to first `SELECT 1`, `catalyst=False`", fmt_num(statistics.median(starts[False])),
         ", ".join(f"{s:.2f}" for s in starts[False])],
        ["session start to first `SELECT 1`, `catalyst=True` (jar cached)", fmt_num(statistics.median(starts[True])),
         ", ".join(f"{s:.2f}" for s in starts[True])],
        ["difference (extension's cost at start)", fmt_num(statistics.median(starts[True]) - statistics.median(starts[False])), ""],
    ])
    text = f"""# The Catalyst range-join rewrite vs Spark's plan for the same SQL

Generated by `python bench/catalyst.py{' --quick' if res['quick'] else ''}` on {info['date']} (total {elapsed / 60:.1f} min){''.join(f"; the {' and '.join(NAMES[k] for k in meta['formulations'])} rows ({marks[run_id]}) by a separate, later run on {run_id} ({meta['elapsed'] / 60:.1f} min)" for run_id, meta in later)}.

**Machine**: {info['platform']}; {info['cpu_count']} CPUs ({info['cpu']}); Python {info['python']}, pyspark {info['pyspark']}, numpy {info['numpy']}, pyarrow {info['pyarrow']}. Load average at start {load0}, at end {load1} (other work shared the two cores; each row below has its own load range: compare within a row).{' ' + res['note'] if res.get('note') else ''}

**Workload**: one SparkSession, `local[2]` (`spark_session(catalyst=True)`, 2 shuffle partitions, AQE on), with `sparksub.Engine(spark)` attached. Data `t(sym, risk, per)`: {t_rows:,} rows, `risk ~ U(0, 100)`, `per ~ U(0, 1000)` (doubles), `sym` the row id. Parameters `q`, N rows: range-min `q(id, lo, hi)`, `lo ~ U(0, 100)`, `hi = lo + U(0, 5)` (~2.5% of t per row); band `q(id, c, w)`, `c ~ U(0, 100)`, `w ~ U(0, 0.5)` (~0.5% of t per row). Both generated in Spark (`spark.range` + `rand(seed)`), cached and counted before timing, registered as temp views.{enum_workload} Queries:

```sql
-- range-min
{RANGE_SQL}
-- band
{BAND_SQL}
-- band, bucketed equi-join (what a user who knows Spark writes instead; the rule does not claim it)
{BUCKETED_SQL}{enum_sql}
```

"ours" = the rule on (rewritten into `FlatMapCoGroupsInArrow range_join_aggregate`{'; top-5 / DISTINCT: `range_join_topk` / `range_join_distinct`' if enum else ''}); "Spark's plan" = `spark.conf.set("{RULE}", "false")`, the same SQL on Spark's broadcast nested-loop join. `bridge.rewrites` was asserted to grow on every "ours" run and not on any Spark run (nor on the bucketed one). Timed: `spark.sql(Q).observe(…).write.format("noop").mode("overwrite").save()` — the whole plan, result rows dropped; `observe` adds the row count, `SUM(hash(row))` and the sum of each aggregate to the same pass on every plan (a few µs per output row). Ours: median of {runs} runs (first run listed apart: it also starts the Python workers). Spark's plan: median of {runs} runs, one if a run takes over 60 s; at N = {sizes[-1]:,} under a {spark_cap:.0f} s wall-clock cap (a timer calls `cancelAllJobs`); a cancelled cell shows the cap and, separately and labelled, the previous size's time scaled linearly in N (the nested loop is |q| × |t| comparisons). "results equal": at N = {sizes[0]:,} all result rows collected from both plans and compared exactly; at every size where both finished, row count and `SUM(hash(id, aggregates…))` equal exactly and the sum of the values to 1e-9.{enum_protocol} "core alone" = the pure operator (`range_join_aggregate`{' / `range_join_topk` / `range_join_distinct`' if enum else ''} on the same q and t as Arrow tables, in the driver, one thread, no Spark): the answer's own cost.

{table}{later_text}

Individual runs (s):
{runs_lines}

Where our time goes (medians; same session, same tables): "planning" = `spark.sql(Q)` to the physical plan,
no execution (rule on: includes the optimizer's py4j call into Python that builds our plan); "data flow" =
our plan with the Python function replaced by one that returns nothing — q hashed into the 2 shuffle
partitions, t replicated into each, both sorted by part and shipped to the Python workers as Arrow, the
Spark jobs around it; "core alone" = `range_join_aggregate`{' (top-5 / DISTINCT: `range_join_topk` / `range_join_distinct`)' if enum else ''} on the same q and t in the driver, one thread.

{cost_table}

## Extension build and session start

{build_table}

Build: `build.jar_path(cache=<fresh temp dir>)`, i.e. `javac` over the five sources against pyspark's jars, then the jar zipped (`build.last_build_seconds`); {n_build} fresh caches. Session start: a fresh `python` process per run ({n_start} per setting, `PYSPARK_PYTHON` = this interpreter), timed from just before the process is spawned to the first `spark.sql("SELECT 1").collect()` returning — interpreter start, imports, JVM launch and the session; with `catalyst=True` the jar comes from the cache (the normal case after the first use) and the child checks that the extension is loaded.

## Plans (range-min, N = {sizes[0]:,}, before execution)

Rule on:

```
{plan_ours}
```

Rule off (Spark's plan):

```
{plan_spark}
```{enum_plan_text}

## Reading

{reading(res)}
"""
    return text


if __name__ == "__main__":
    sys.exit(main())
