#!/usr/bin/env python
"""End-to-end runtime benchmark (issue 16, "Measure"): every subscription class through ``Engine.publish`` and
``Engine.stream`` beside its pure operator on the same data, per-call fixed cost, rebuilds, and driver / Python
worker memory, in one run::

    python bench/runtime.py                      # full run, local[2] (73 min at load average 4-19 on 2 cores)
    python bench/runtime.py --quick              # smaller tables, batches 1K / 10K (+ 100K for RANGE_MIN
                                                 #   reformulated), few reps (~30 min under load)
    python bench/runtime.py --smoke              # toy sizes, every part: does the script run (figures meaningless)
    python bench/runtime.py --connect --quick --skip stream rss zero   # the publish part on Spark Connect
    python bench/runtime.py --master 'local-cluster[2,1,2048]' --quick   # two executor JVMs (~20 s more to start)
    python bench/runtime.py --baseline docs/benchmarks/runtime_baseline.json   # + "previous runtime" columns
    python bench/runtime.py --pause 90           # two of the 20 warm publishes after a 90 s idle pause
                                                 #   (full run: 90 by default; --quick: 0 = no pause)
    python bench/runtime.py --zero-only          # the zero-rebuild check alone, merged into the saved run
    python bench/runtime.py --zones --master 'local-cluster[2,1,2048]'   # issue 16 item 4: one group of 1M
                                                 #   subscriptions x 100K rows whole vs in 2 X zones (~12 min)

Writes (merged by run label = master + full/quick, so a local[2] full run and a local-cluster quick run sit
side by side) ``--json`` (default ``docs/benchmarks/runtime.json``), and from every run in it
``docs/benchmarks/runtime.md`` and ``docs/benchmarks/runtime.png``.  The figures of the runtime before issue 16
are in ``docs/benchmarks/runtime_baseline.json`` (written with ``--json`` pointing there).

**Classes and workloads** (fixed seeds; one engine per class, so that a publish runs that class's group only):

* RANGE_MIN (unicast and reformulated), RANGE_TOPK (k = 5, unicast, fewer subscriptions: its per-update cost
  is the highest) and RANGE_AGG (SUM, reformulated: its
  unicast rows are every subscription whose range holds the update, ~1,100 per update here): ``stock(symbol,
  risk, per)`` of bench/range_min.py (000 Table 1: X, Y uniform in [0, 10000], ranges with midpoint
  N(5000, 1500) and length |N(1000, 1000)|), updates its reflected random walk on Y with 0.5% spikes;
* FILTER: the same table and updates, ``symbol = :sym AND per BETWEEN :plo AND :phi`` (symbol uniform, PER
  range length U(0, 4000) widened to a grid of 250: few distinct predicates, ~0.2 matches per update);
* SELECT_JOIN / BAND_JOIN: bench/joins_engine.py's tables and subscriptions (003 Table 4.1's shape, range
  lengths 100; bands around 5 centres), updates = new R rows;
* EVENT: bench/events.py's stock stream and its S2/S3/S4-like CEL queries (each with its own constants),
  events with t0 = t1 = position.

**Figures.** *publish*: rows/s = batch / median wall time of ``publish(...)`` + ``count()`` of its output, after
one warm-up batch of 1K (the first call, cold, is reported apart); *pure*: the group operator's ``apply`` (the
class's public group class built from the same rows and subscriptions; events: ``event_partitions.feed_events``
into a ``FamilyEngine``) on the same batches in the same order, in this process, one core, no Spark; ratio = e2e
/ pure. *stream*: a bounded parquet file source of N micro-batches (``maxFilesPerTrigger = 1``, rows with
``_seq``) through ``Engine.stream`` into a ``noop`` sink, ``processAllAvailable()``, rows/s per micro-batch
(input rows / ``triggerExecution``) after the first, median. *fixed cost*: median wall time of a 1-row publish.
*rebuilds*: the worker cache's outcomes that ``engine.stats()["runtime"]`` reports (``runtime/replicas.py``:
``hits``, ``catch_ups``, ``rebuilds``, ``log_replayed``, with the driver's share apart), read from the counter
files under the engine's directory before and after each measured call (the files directly, as ``stats()``
sums them, since ``stats()`` itself builds every group on the driver): *worker rebuilds* = rebuilds minus the
driver's; a call that made a new base (a compaction: ``groups/<group>/<part>/<base id>``) is told apart, since
its rebuild is by design, not a cold worker.  ``stats()["runtime"]`` itself is recorded once per class.  (The
baseline, commit 2c381f8, had no such counter: its figures came from a probe wrapping the workers'
``materialize``, in this script as of commit 6b2af05.)  The stream's own counters
(``spark_stream.stream_stats``) are given where they exist. *zero-rebuild check*: 20 warm publishes of 1K per class: 18 back to back, then two rounds of
one publish per class, each after ``--pause`` seconds of idleness. *memory*: in a fresh child process per size
(10K, 100K, 1M range-MIN subscriptions on 100K rows; 3 unicast publishes of 1K, ``result()`` of one
subscription, 2 reformulated publishes of 10K; the subscriptions' inputs built as numpy columns just before
``subscribe_many`` and dropped after it, so that only the engine's growth is counted): the child's VmRSS, absolute
and net of its start, and the Python workers' (every Python process
under the Spark JVMs, from /proc; VmRSS summed, PSS beside it since forked workers share pages), per executor
JVM on ``local-cluster``, where the report gives each executor's share of the 1M-subscription group (a group is
one replica run by one task: one executor holds all of it; ``--zones`` measures item 4's split: *zones*, below).

*Zones* (``--zones``): RANGE_MIN with 1M subscriptions on 100K rows, ``Engine.range_zones = 0`` (whole) and 2 (X zones,
control/zones.py), each in a fresh child process: reformulated publishes at batches of 10K and 100K (+ the stage times
of the zoned path), each executor's Python RSS / PSS against its baseline (workers started, before any group), the
replicas' rows and subscriptions, beside the pure single core and the two zones in one process.  Each run is kept in
the JSON under ``zones`` and rendered as its own section (+ ``runtime_zones*.png``).

*Connect* (``--connect``): the same parts on ``SparkSession.builder.remote(MASTER)``, a local Spark Connect
server started by this process (tests/test_connect.py), with sparksub's session defaults.

*Targets* (issue 16), PASS / FAIL at the top of the report: driver RSS at 1M range subscriptions + 100K rows
within 100 MB of its RSS at 10K; RANGE_MIN reformulated end to end at batches of 100K >= 60% of the pure core's
rate; no class slower than ``--baseline`` at batches of 10K or more; zero worker rebuilds in 20 warm publishes,
two after a 90 s pause.

Every figure is wall clock on a shared machine: the load average is recorded per part; compare ratios
measured side by side (e2e / pure, now / previous) rather than absolute rates across runs.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the pure-operator figures are for one core

import argparse
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt_num, load_avg, log, machine, md_table  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
BASELINE_JSON = OUT_DIR / "runtime_baseline.json"
CLUSTER = "local-cluster[2,1,2048]"

RANGE_TEMPLATE = "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi"
TOPK_TEMPLATE = "SELECT * FROM stock WHERE risk BETWEEN :lo AND :hi ORDER BY per LIMIT 5"
AGG_TEMPLATE = "SELECT SUM(per) FROM stock WHERE risk BETWEEN :lo AND :hi"
FILTER_TEMPLATE = "SELECT * FROM stock WHERE symbol = :sym AND per BETWEEN :plo AND :phi"
#: FILTER subscriptions' PER range lengths are U(0, this): ~0.2 matches per update at 1 subscription per symbol
FILTER_PER_LENGTH = 4_000.0
FILTER_PER_STEP = 250.0
SJ_TEMPLATE = ("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :alo AND :ahi "
               "AND s.c BETWEEN :clo AND :chi")
BJ_TEMPLATE = "SELECT * FROM r JOIN s ON s.b - r.b BETWEEN :lo AND :hi"
TOPK_K = 5
ZERO_REBUILD_PUBLISHES = 20
SEED = 7


# ============================================================================================ sizes
@dataclass
class Sizes:
    objects: int            # rows of stock (range classes, FILTER)
    range_subs: int         # RANGE_MIN / AGG subscriptions
    topk_subs: int          # RANGE_TOPK subscriptions (its unicast index and Paint cost most per update)
    filter_subs: int
    join_rows: int          # rows of r and of s
    sj_subs: int
    bj_subs: int
    event_queries: int
    batches: list           # [(batch size, timed repetitions)]; one warm-up batch of 1K comes first
    fixed_reps: int         # 1-row publishes
    stream_batch: int
    stream_batches: int     # micro-batches (files)
    rss_subs: list          # range subscriptions per memory child
    rss_rows: int
    #: further batches for some classes only: {class: [(batch size, repetitions)]}
    extra_batches: dict = field(default_factory=dict)


def class_batches(sizes: Sizes, name: str) -> list:
    return [tuple(b) for b in sizes.batches] + [tuple(b) for b in sizes.extra_batches.get(name, [])]


FULL = Sizes(objects=100_000, range_subs=10_000, topk_subs=2_000, filter_subs=100_000, join_rows=50_000,
             sj_subs=5_000, bj_subs=1_000, event_queries=1_000, batches=[(1_000, 5), (10_000, 3), (100_000, 1)],
             fixed_reps=5, stream_batch=10_000, stream_batches=4, rss_subs=[10_000, 100_000, 1_000_000],
             rss_rows=100_000)
QUICK = Sizes(objects=20_000, range_subs=5_000, topk_subs=1_000, filter_subs=20_000, join_rows=20_000, sj_subs=2_000,
              bj_subs=500, event_queries=300, batches=[(1_000, 3), (10_000, 2)], fixed_reps=5,
              stream_batch=5_000, stream_batches=3, rss_subs=[10_000, 1_000_000], rss_rows=100_000,
              # issue 16's e2e target is at batches of 100K for this class
              extra_batches={"RANGE_MIN reformulated": [(100_000, 1)]})
#: the full run's tables and subscriptions with its batches of 10K and 100K only (--large): the figures issue 16's
#: "no class slower than today at batches of 10K or more" compares with the previous runtime's full run
LARGE = Sizes(**{**FULL.__dict__, "batches": [(10_000, 3), (100_000, 3)], "fixed_reps": 3})
#: for developing the script only (--tiny): every part on toy sizes
TINY = Sizes(objects=5_000, range_subs=1_000, topk_subs=500, filter_subs=2_000, join_rows=3_000, sj_subs=300,
             bj_subs=200,
             event_queries=100, batches=[(1_000, 2), (3_000, 1)], fixed_reps=3, stream_batch=1_000, stream_batches=3,
             rss_subs=[10_000], rss_rows=10_000, extra_batches={"RANGE_MIN reformulated": [(10_000, 1)]})


# ============================================================================================ /proc probes
def _status_kb(pid: int, field_name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_mb(pid: int | None = None) -> float:
    kb = _status_kb(pid or os.getpid(), "VmRSS")
    return (kb or 0) / 1024


def pss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _process_table() -> dict:
    """pid -> (parent pid, command line) of every process we can read."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[int(d.name)] = (ppid, cmd)
    return out


def spark_processes() -> dict:
    """This process's Spark JVMs and their Python workers, from /proc: {"driver_jvm": pid or None,
    "executors": {label: {"jvm": pid, "python": [pids]}}}.  In local mode the one executor is the driver
    JVM; on local-cluster each ``CoarseGrainedExecutorBackend`` JVM is one."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    mine, todo = [], [os.getpid()]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            mine.append(c)
            todo.append(c)
    is_java = {p for p in mine if "java" in table[p][1].split(" ", 1)[0]}
    driver = next((p for p in is_java if "SparkSubmit" in table[p][1]), None)
    executors = {}
    for p in mine:
        if p in is_java or "python" not in table[p][1].split(" ", 1)[0]:
            continue
        a = table[p][0]
        while a in table and a not in is_java and a != os.getpid():
            a = table[a][0]
        if a not in is_java:
            continue
        label = "driver JVM (local executor)" if a == driver else f"executor JVM {a}"
        executors.setdefault(label, {"jvm": a, "python": []})["python"].append(p)
    for p in is_java:
        if "CoarseGrainedExecutorBackend" in table[p][1]:
            executors.setdefault(f"executor JVM {p}", {"jvm": p, "python": []})
    return {"driver_jvm": driver, "executors": executors}


def memory_snapshot() -> dict:
    procs = spark_processes()
    per = {}
    for label, e in sorted(procs["executors"].items()):
        per[label] = {"jvm_rss_mb": rss_mb(e["jvm"]) if label.startswith("executor") else None,
                      "python_processes": len(e["python"]),
                      "python_rss_mb": sum(rss_mb(p) for p in e["python"]),
                      "python_pss_mb": sum(pss_mb(p) for p in e["python"])}
    return {"driver_rss_mb": rss_mb(),
            "driver_jvm_rss_mb": rss_mb(procs["driver_jvm"]) if procs["driver_jvm"] else None,
            "python_workers": sum(v["python_processes"] for v in per.values()),
            "python_rss_mb": sum(v["python_rss_mb"] for v in per.values()),
            "python_pss_mb": sum(v["python_pss_mb"] for v in per.values()), "executors": per}


def worker_pids() -> dict:
    """pid -> executor label of every Python worker under this process's Spark JVMs."""
    return {p: label for label, e in spark_processes()["executors"].items() for p in e["python"]}


# ============================================================================================ cache counters
def cache_counts(e) -> dict:
    """The engine's worker-cache counters now: what ``engine.stats()["runtime"]`` reports (summed from the
    counter files under ``<engine directory>/groups``, ``runtime/replicas.py``), read from the files directly
    so that taking them does not make the driver build every group (``stats()`` asks each group's operator
    for its own counters)."""
    from sparksub.runtime import replicas
    groups = e.directory.root / "groups"
    # the base directories (groups/<group>/<part>/<base id>): a new one is a compaction or a changed group,
    # whose next task rebuilds by design (not a cold worker)
    bases = {str(p.relative_to(groups)) for p in groups.glob("*/*/*") if p.is_dir()}
    return {**replicas.read_counts(groups), "bases": bases}


def count_delta(before: dict, after: dict) -> dict:
    """Cache outcomes between two :func:`cache_counts`: the workers' (all processes but the driver's) and the
    driver's own (``result``/EXPLAIN/``deliver`` materialising on the driver)."""
    def d(k, role=None):
        a = after.get(k, 0) - (after["driver"].get(k, 0) if role == "worker" else 0)
        b = before.get(k, 0) - (before["driver"].get(k, 0) if role == "worker" else 0)
        return (after["driver"].get(k, 0) - before["driver"].get(k, 0)) if role == "driver" else a - b
    out = {"tasks": sum(d(k, "worker") for k in ("hits", "catch_ups", "rebuilds")),
           "rebuilds": d("rebuilds", "worker"), "caught_up": d("catch_ups", "worker"),
           "replayed_batches": d("log_replayed", "worker"), "driver_rebuilds": d("rebuilds", "driver"),
           "driver_caught_up": d("catch_ups", "driver"), "new_bases": len(after["bases"] - before["bases"])}
    return out


# ============================================================================================ workloads
def _range_data(sizes: Sizes, n_updates: int):
    import range_min as rm
    keys, xs, ys = rm.make_objects(sizes.objects)
    stream = rm.make_updates(ys, n_updates)
    return rm, keys, xs, ys, stream


class ClassBench:
    """One class's engine, its pure operator and its update stream (positions 0, 1, ... in order)."""

    name = ""
    klass = ""
    mode = "unicast"
    table = ""

    def engine(self, spark):
        raise NotImplementedError

    def user_rows(self, lo: int, hi: int) -> pa.Table:
        """Updates lo..hi-1 as rows of the user's table (what publish gets)."""
        raise NotImplementedError

    def pure(self):
        """A fresh pure operator with the initial rows and every subscription; returns (operator, build s)."""
        raise NotImplementedError

    def pure_apply(self, op, batch) -> int:
        """Apply one :meth:`pure_batch` to the pure operator; returns its output rows."""
        raise NotImplementedError

    def pure_batch(self, lo: int, hi: int, seq0: int):
        """The operator's batch for updates lo..hi-1 (built before the clock starts)."""
        raise NotImplementedError

    def stream_schema(self) -> str:
        raise NotImplementedError


class RangeBench(ClassBench):
    table = "stock"

    def __init__(self, name, klass, mode, template, sizes: Sizes, n_updates: int, subs: int):
        self.name, self.klass, self.mode, self.template = name, klass, mode, template
        rm, self.keys, self.xs, self.ys, self.stream = _range_data(sizes, n_updates)
        self.rm = rm
        self.ids, self.lo, self.hi = rm.make_subscriptions(subs)
        self.ids = self.ids.astype(str)
        self.subs = subs

    def engine(self, spark):
        from sparksub import Engine
        e = Engine(spark)
        e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
        e.load("stock", pa.table({"symbol": self.keys.astype(str), "risk": self.xs, "per": self.ys}))
        e.subscribe_many(self.template, {"id": self.ids, "lo": self.lo, "hi": self.hi})
        return e

    def user_rows(self, lo, hi):
        return self.rm.stock_batch(self.keys, self.xs, self.stream, lo, hi)

    def pure_batch(self, lo, hi, seq0):
        return self.rm.group_batch(self.keys, self.xs, self.stream, lo, hi, seq0 - lo)

    def pure(self):
        t0 = time.perf_counter()
        if self.klass == "RANGE_MIN":
            from sparksub.operators.range_min.group import RangeMinGroup
            g = RangeMinGroup(self.name, "stock", "risk", "per", False)
            g.points.add(self.ids.astype(object), self.lo, self.hi)
            g.load(self.keys, self.xs, self.ys)
        else:
            from sparksub.operators.agg.group import AggSnapshot
            from sparksub.operators.topk.group import TopkSnapshot
            option = False if self.klass == "RANGE_TOPK" else "sum"
            k = np.full(self.subs, TOPK_K if self.klass == "RANGE_TOPK" else 1, dtype=np.int64)
            snapshot = TopkSnapshot if self.klass == "RANGE_TOPK" else AggSnapshot
            g = snapshot(self.name, "stock", "risk", "per", option, self.ids.astype(object),
                         self.lo.copy(), self.hi.copy(), k, self.keys, self.xs.copy(), self.ys.copy()).build()
        return g, time.perf_counter() - t0

    def pure_apply(self, op, batch) -> int:
        return op.apply(batch, self.mode).num_rows

    def stream_schema(self):
        return "symbol string, risk double, per double"


class FilterBench(RangeBench):
    def __init__(self, sizes: Sizes, n_updates: int):
        super().__init__("FILTER", "FILTER", "unicast", FILTER_TEMPLATE, sizes, n_updates, 0)
        r = np.random.default_rng(SEED + 1)
        m = sizes.filter_subs
        sym = self.keys[r.integers(0, len(self.keys), m)].astype(str)
        pmid, plen = r.uniform(0, 10_000, m), r.uniform(0, FILTER_PER_LENGTH, m)
        # bounds on a grid of FILTER_PER_STEP: few distinct predicates, so phase 1 (001 §3: every predicate
        # an event satisfies) stays small and the figure is the runtime's, not a predicate-index stress test
        self.fsubs = {"id": np.array([f"f{i}" for i in range(m)]), "sym": sym,
                      "plo": np.floor((pmid - plen / 2) / FILTER_PER_STEP) * FILTER_PER_STEP,
                      "phi": np.ceil((pmid + plen / 2) / FILTER_PER_STEP) * FILTER_PER_STEP}
        self.subs = m

    def engine(self, spark):
        from sparksub import Engine
        e = Engine(spark)
        e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
        e.load("stock", pa.table({"symbol": self.keys.astype(str), "risk": self.xs, "per": self.ys}))
        e.subscribe_many(self.template, self.fsubs)
        return e

    def pure_batch(self, lo, hi, seq0):
        from sparksub.operators.shared.schemas import EVENT_PREFIX
        b = self.user_rows(lo, hi)
        return pa.table({**{EVENT_PREFIX + c: b.column(c) for c in b.column_names},
                         "op": pa.array(np.zeros(b.num_rows, np.int8), pa.int8()),
                         "seq": pa.array(np.arange(seq0, seq0 + b.num_rows, dtype=np.int64), pa.int64())})

    def pure(self):
        from sparksub.operators.filters.group import Block, FilterGroup
        t0 = time.perf_counter()
        g = FilterGroup("FILTER", "stock", [("symbol", pa.string()), ("risk", pa.float64()), ("per", pa.float64())])
        s = self.fsubs
        g.register_block(Block(s["id"].astype(object), [[("symbol", "=", s["sym"].astype(object)),
                                                          ("per", "between", (s["plo"], s["phi"]))]], ("*",)))
        return g, time.perf_counter() - t0


class JoinBench(ClassBench):
    table = "r"

    def __init__(self, klass: str, sizes: Sizes, n_updates: int):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import joins_engine as je
        from sparksub.operators.joins.router import synthetic_workload
        self.name = self.klass = klass
        rng = np.random.default_rng(3)
        n = sizes.join_rows
        if klass == "SELECT_JOIN":
            m = sizes.sj_subs
            r_rows, s_rows, q_rows = synthetic_workload(rng, n, m, a_length=100.0, c_length=100.0)
            q = np.array([x[1:] for x in q_rows])
            self.sub_cols = {"a_lo": q[:, 0], "a_hi": q[:, 1], "c_lo": q[:, 2], "c_hi": q[:, 3]}
            self.subs_param = {"id": np.array([f"q{i}" for i in range(m)]), "alo": q[:, 0], "ahi": q[:, 1],
                               "clo": q[:, 2], "chi": q[:, 3]}
        else:
            m = sizes.bj_subs
            r_rows, s_rows = je.band_tables(rng, n)
            centres = rng.uniform(-3000, 3000, 5)
            c = centres[rng.integers(0, 5, m)]
            w = np.abs(rng.normal(0, 0.0001, m))
            self.sub_cols = {"lo": c - w, "hi": c + w}
            self.subs_param = {"id": np.array([f"q{i}" for i in range(m)]), "lo": c - w, "hi": c + w}
        self.subs = m
        self.r = {"rk": np.arange(n, dtype=np.int64), "a": np.array([x[1] for x in r_rows]),
                  "b": np.array([x[2] for x in r_rows])}
        self.s = {"sk": np.arange(n, dtype=np.int64), "b": np.array([x[1] for x in s_rows]),
                  "c": np.array([x[2] for x in s_rows])}
        erng = np.random.default_rng(4)
        self.new_a = erng.uniform(0, 10_000, n_updates)
        self.new_b = (erng.integers(0, 10_001, n_updates) if klass == "SELECT_JOIN"
                      else erng.uniform(0, 10_000, n_updates))
        self.n0 = n
        self.btype = "BIGINT" if klass == "SELECT_JOIN" else "DOUBLE"

    def engine(self, spark):
        from sparksub import Engine
        e = Engine(spark)
        e.sql(f"CREATE TABLE r (rk BIGINT PRIMARY KEY, a DOUBLE, b {self.btype})")
        e.sql(f"CREATE TABLE s (sk BIGINT PRIMARY KEY, b {self.btype}, c DOUBLE)")
        e.load("r", pa.table(self.r))
        e.load("s", pa.table(self.s))
        e.subscribe_many(SJ_TEMPLATE if self.klass == "SELECT_JOIN" else BJ_TEMPLATE, self.subs_param)
        return e

    def user_rows(self, lo, hi):
        b = self.new_b[lo:hi]
        return pa.table({"rk": np.arange(self.n0 + lo, self.n0 + hi, dtype=np.int64), "a": self.new_a[lo:hi],
                         "b": pa.array(b, pa.int64() if self.klass == "SELECT_JOIN" else pa.float64())})

    def pure_batch(self, lo, hi, seq0):
        from sparksub.operators.shared.schemas import EVENT_PREFIX
        b = self.user_rows(lo, hi)
        n = b.num_rows
        return pa.table({**{EVENT_PREFIX + c: b.column(c) for c in b.column_names},
                         "op": pa.array(np.zeros(n, np.int8), pa.int8()),
                         "seq": pa.array(np.arange(seq0, seq0 + n, dtype=np.int64), pa.int64()),
                         "j_side": pa.array(np.zeros(n, np.int8), pa.int8())})

    def pure(self):
        from sparksub.operators.joins.group import JoinGroupSnapshot
        t0 = time.perf_counter()
        if self.klass == "SELECT_JOIN":
            sides = (("r", "rk", "b", ("a",)), ("s", "sk", "b", ("c",)))

            def span(*vs):
                v = np.concatenate([np.asarray(x, dtype=np.float64) for x in vs])
                return float(v.min()), float(v.max()) + 1.0
            domains = {"A": span(self.r["a"]), "C": span(self.s["c"]), "B": span(self.r["b"], self.s["b"])}
            rows = ({c: self.r[c].tolist() for c in ("rk", "b", "a")},
                    {c: self.s[c].tolist() for c in ("sk", "b", "c")})
        else:
            sides = (("r", "rk", "b", ()), ("s", "sk", "b", ()))
            domains = {}
            rows = ({c: self.r[c].tolist() for c in ("rk", "b")}, {c: self.s[c].tolist() for c in ("sk", "b")})
        snap = JoinGroupSnapshot(self.klass, self.klass, self.klass + "#0", sides, True,
                                 self.subs_param["id"].astype(object), self.sub_cols, rows, domains=domains)
        g = snap.build()
        return g, time.perf_counter() - t0

    def pure_apply(self, op, batch) -> int:
        return op.apply(batch, self.mode).num_rows

    def stream_schema(self):
        return f"rk bigint, a double, b {self.btype.lower()}"


class EventBench(ClassBench):
    name = klass = "EVENT"
    table = "Stock"

    def __init__(self, sizes: Sizes, n_updates: int):
        import events as ev
        self.events, names, w, hist = ev.make_stream(n_updates)
        # events.py's workload (issue 18): a third of the queries per family, as template parameters
        self.work = ev.Workload(sizes.event_queries, names, w, hist)
        self.subs = sizes.event_queries
        self.name_col = np.array([e["Name"] for e in self.events], dtype=object)
        self.price = np.array([e["Price"] for e in self.events], dtype=np.float64)
        self.volume = np.array([e["Volume"] for e in self.events], dtype=np.int64)

    def engine(self, spark):
        from sparksub import Engine
        e = Engine(spark)
        e.sql("CREATE TABLE Stock (Name STRING, Price DOUBLE, Volume BIGINT)")
        import events as ev
        for f in ev.FAMILIES:   # one bulk registration per family (Engine.register_event_queries)
            rows = self.work.rows[f].tolist()
            if rows:
                e.register_event_queries(ev.TEMPLATES[f], self.work.params[f], [self.work.names[g] for g in rows])
        return e

    def user_rows(self, lo, hi):
        t = np.arange(lo, hi, dtype=np.int64)
        return pa.table({"Name": pa.array(self.name_col[lo:hi].tolist(), pa.string()), "Price": self.price[lo:hi],
                         "Volume": self.volume[lo:hi], "t0": t, "t1": t})

    def pure_batch(self, lo, hi, seq0):
        from sparksub.operators.events.partitions import events_table
        t = list(range(lo, hi))
        return events_table({"Name": pa.array(self.name_col[lo:hi].tolist(), pa.string()),
                             "Price": pa.array(self.price[lo:hi]), "Volume": pa.array(self.volume[lo:hi])},
                            t, t, list(range(seq0, seq0 + hi - lo)))

    def pure(self):
        from sparksub.operators.events.families import FamilyEngine
        t0 = time.perf_counter()
        ex = FamilyEngine()
        for name, ast in self.work.asts(self.subs).items():
            ex.register(name, ast)
        return ex, time.perf_counter() - t0

    def pure_apply(self, op, batch) -> int:
        from sparksub.operators.events.partitions import feed_events
        return len(feed_events(op, ["Stock"], batch))

    def stream_schema(self):
        return "Name string, Price double, Volume bigint, t0 bigint, t1 bigint"


def make_benches(sizes: Sizes, n_updates: int, only: list | None) -> list[ClassBench]:
    makers = {
        "RANGE_MIN unicast": lambda: RangeBench("RANGE_MIN unicast", "RANGE_MIN", "unicast", RANGE_TEMPLATE, sizes,
                                                n_updates, sizes.range_subs),
        "RANGE_MIN reformulated": lambda: RangeBench("RANGE_MIN reformulated", "RANGE_MIN", "reformulated",
                                                     RANGE_TEMPLATE, sizes, n_updates, sizes.range_subs),
        "RANGE_TOPK": lambda: RangeBench("RANGE_TOPK", "RANGE_TOPK", "unicast", TOPK_TEMPLATE, sizes, n_updates,
                                         sizes.topk_subs),
        "RANGE_AGG": lambda: RangeBench("RANGE_AGG", "RANGE_AGG", "reformulated", AGG_TEMPLATE, sizes, n_updates,
                                        sizes.range_subs),
        "FILTER": lambda: FilterBench(sizes, n_updates),
        "SELECT_JOIN": lambda: JoinBench("SELECT_JOIN", sizes, n_updates),
        "BAND_JOIN": lambda: JoinBench("BAND_JOIN", sizes, n_updates),
        "EVENT": lambda: EventBench(sizes, n_updates),
    }
    names = [n for n in makers if not only or any(o.lower() in n.lower() for o in only)]
    return [makers[n]() for n in names]


# ============================================================================================ measuring
def timed_publish(e, bench: ClassBench, lo: int, hi: int) -> tuple[float, int]:
    rows = bench.user_rows(lo, hi)
    t0 = time.perf_counter()
    n = e.publish(bench.table, rows, bench.mode).count()
    return time.perf_counter() - t0, n


@dataclass
class Cursor:
    """Position in a class's update stream and the seq the engine gives the next row."""
    pos: int = 0
    seq: int = 0

    def take(self, n: int) -> tuple[int, int, int]:
        lo, seq0 = self.pos, self.seq
        self.pos += n
        self.seq += n
        return lo, lo + n, seq0


def publish_part(spark, bench: ClassBench, sizes: Sizes) -> tuple[dict, object, Cursor]:
    """Registration, the cold first call, the timed batches and the 1-row calls through the engine, then
    the pure operator on the same batches in the same order."""
    res = {"class": bench.name, "klass": bench.klass, "mode": bench.mode, "subscriptions": bench.subs,
           "load_start": load_avg()}
    t0 = time.perf_counter()
    e = bench.engine(spark)
    res["register_s"] = time.perf_counter() - t0
    cur = Cursor()
    batches = class_batches(sizes, bench.name)
    plan = [("warm", 1_000, 1)] + [("batch", b, r) for b, r in batches] + [("fixed", 1, sizes.fixed_reps)]
    calls = []  # (kind, batch, lo, hi, seq0, e2e seconds, rows, cache outcomes of the call)
    counts = cache_counts(e)
    for kind, size, reps in plan:
        for _ in range(reps):
            lo, hi, seq0 = cur.take(size)
            dt, n = timed_publish(e, bench, lo, hi)
            now = cache_counts(e)
            calls.append((kind, size, lo, hi, seq0, dt, n, count_delta(counts, now)))
            counts = now
        log(f"  {bench.name}: publish {kind} {size:,} x{reps}: median "
            f"{statistics.median(c[5] for c in calls if c[0] == kind and c[1] == size):.3f} s")
    # the pure operator: same rows, same subscriptions, same batches in the same order (one core, no Spark)
    gc.collect()
    op, build_s = bench.pure()
    res["pure_build_s"] = build_s
    pure_t, pure_rows = [], []
    for kind, size, lo, hi, seq0, *_ in calls:
        batch = bench.pure_batch(lo, hi, seq0)
        t0 = time.perf_counter()
        n = bench.pure_apply(op, batch)
        pure_t.append(time.perf_counter() - t0)
        pure_rows.append(n)
    del op
    gc.collect()
    res["first_call_s"] = calls[0][5]
    res["first_call_rebuilds"] = calls[0][7]
    res["batches"] = []
    for size, _ in batches:
        idx = [i for i, c in enumerate(calls) if c[0] == "batch" and c[1] == size]
        e2e = statistics.median(calls[i][5] for i in idx)
        pure = statistics.median(pure_t[i] for i in idx)
        rb = [calls[i][7] for i in idx if calls[i][7] is not None]
        res["batches"].append({
            "batch": size, "reps": len(idx), "e2e_s": e2e, "e2e_rows_s": size / e2e,
            "e2e_times": [calls[i][5] for i in idx], "pure_s": pure, "pure_rows_s": size / pure,
            "ratio": (size / e2e) / (size / pure),
            "out_rows_per_update": sum(calls[i][6] for i in idx) / (size * len(idx)),
            "pure_out_rows_per_update": sum(pure_rows[i] for i in idx) / (size * len(idx)),
            "rebuilds": sum(r["rebuilds"] for r in rb) if rb else None,
            "caught_up": sum(r["caught_up"] for r in rb) if rb else None,
            "driver_rebuilds": sum(r["driver_rebuilds"] for r in rb) if rb else None,
            "new_bases": sum(r["new_bases"] for r in rb) if rb else None})
    idx = [i for i, c in enumerate(calls) if c[0] == "fixed"]
    res["fixed_cost_s"] = statistics.median(calls[i][5] for i in idx)
    res["fixed_times"] = [calls[i][5] for i in idx]
    res["pure_1row_s"] = statistics.median(pure_t[i] for i in idx)
    res["stats_runtime"] = _stats_runtime(e)
    res["stats_rebuild_counter"] = ", ".join(k for k in ("rebuilds", "catch_ups", "hits")
                                             if k in (res["stats_runtime"] or {})) or "not exposed"
    res["load_end"] = load_avg()
    for b in res["batches"]:
        log(f"  {bench.name} batch {b['batch']:>7,}: e2e {b['e2e_rows_s']:>9,.0f} rows/s, pure "
            f"{b['pure_rows_s']:>9,.0f} rows/s, e2e/pure {b['ratio']:.1%}, rebuilds {b['rebuilds']}, "
            f"out rows/update {b['out_rows_per_update']:.2f} (pure {b['pure_out_rows_per_update']:.2f})")
    log(f"  {bench.name}: 1-row publish {res['fixed_cost_s']:.3f} s; first call {res['first_call_s']:.2f} s; "
        f"pure build {build_s:.2f} s")
    return res, e, cur


def _stats_runtime(e) -> dict | None:
    """``engine.stats()["runtime"]`` once, at the end of a class's publishes (its totals, without per-label
    detail): the same counters the bench reads between calls, through the engine's own interface."""
    try:
        st = e.stats().get("runtime")
    except Exception as err:  # noqa: BLE001 - reported, the bench goes on
        return {"error": f"stats() failed: {type(err).__name__}: {str(err)[:200]}"}
    return {k: v for k, v in st.items() if k != "by_label"} if st else None


def zero_rebuild_part(live: list, pause: float) -> list[dict]:
    """20 warm publishes of 1K per class after one warm-up publish: with ``pause`` > 0, 18 back to back, then
    two rounds (every class once) each after ``pause`` idle seconds; without, 20 back to back.

    Back to back per class, not interleaved with the other classes: a class published only every few minutes
    loses its Python workers to Spark's 60 s idle timeout between publishes (measured once, interleaved, at
    2c381f8: ``zero_rebuild_interleaved`` in runtime_baseline.json), which is the pause case, not the warm one."""
    n = ZERO_REBUILD_PUBLISHES
    rounds = 2 if pause > 0 else 0
    out = {b.name: {"class": b.name, "design": "back-to-back", "times": [], "rebuilds": [], "caught_up": [],
                    "driver_rebuilds": [], "new_bases": [], "worker_restarts": [], "pause_s": pause,
                    "after_pause": list(range(n - rounds, n))} for b, _, _ in live}

    def one(b, e, cur, seen):
        lo, hi, _ = cur.take(1_000)
        before = cache_counts(e)
        dt, _ = timed_publish(e, b, lo, hi)
        workers = worker_pids()
        rb = count_delta(before, cache_counts(e))
        r = out[b.name]
        r["times"].append(dt)
        r["rebuilds"].append(rb["rebuilds"] if rb else None)
        r["caught_up"].append(rb["caught_up"] if rb else None)
        r["driver_rebuilds"].append(rb["driver_rebuilds"])
        r["new_bases"].append(rb["new_bases"])
        # Python workers that did not exist after this class's previous publish (idle ones die after 60 s)
        r["worker_restarts"].append(len(set(workers) - seen.get(b.name, set())))
        seen[b.name] = set(workers)

    seen: dict = {}
    for b, e, cur in live:
        lo, hi, _ = cur.take(1_000)   # warm-up: a log compaction or a cold worker after the earlier parts
        timed_publish(e, b, lo, hi)
        seen[b.name] = set(worker_pids())
        for _ in range(n - rounds):
            one(b, e, cur, seen)
        log(f"  {b.name}: {n - rounds} back-to-back publishes, rebuilds {out[b.name]['rebuilds']}")
    for k in range(rounds):
        log(f"  idle {pause:.0f} s, then one publish per class ({k + 1}/{rounds}) ...")
        time.sleep(pause)
        for b, e, cur in live:
            one(b, e, cur, seen)
    for r in out.values():
        rb = [x for x in r["rebuilds"] if x is not None]
        r["total_rebuilds"] = sum(rb) if rb else None
        r["publishes_with_rebuild"] = sum(1 for x in rb if x) if rb else None
        r["warm_rebuilds"] = sum(rb[: n - rounds]) if rb else None
        # rebuilds in publishes that made no new base: a worker that did not hold the replica (cold)
        r["cold_rebuilds"] = sum(x for x, nb in zip(r["rebuilds"], r["new_bases"]) if x and not nb)
        r["median_s"] = statistics.median(r["times"])
        r["max_s"] = max(r["times"])
        r["after_pause_s"] = [r["times"][i] for i in r["after_pause"]]
        log(f"  {r['class']}: {n} warm publishes: rebuilds {r['total_rebuilds']} in {r['publishes_with_rebuild']} "
            f"publishes ({r['warm_rebuilds']} in the back-to-back ones); median {r['median_s']:.3f} s, max "
            f"{r['max_s']:.2f} s" + (f"; after the pauses {', '.join(f'{t:.2f}' for t in r['after_pause_s'])} s"
                                     if rounds else ""))
    return list(out.values())


def stream_part(spark, bench: ClassBench, e, cur: Cursor, sizes: Sizes, work: Path) -> dict:
    """A bounded file source of N micro-batches through Engine.stream into a noop sink."""
    src = work / f"src_{bench.name.replace(' ', '_')}"
    ck = work / f"ck_{bench.name.replace(' ', '_')}"
    src.mkdir(parents=True)
    now = time.time() - 1000
    for j in range(sizes.stream_batches):
        lo, hi, seq0 = cur.take(sizes.stream_batch)
        path = src / f"part-{j:03d}.parquet"
        # with _seq: at 2c381f8 a FILTER stream without it fails (monotonically_increasing_id on a stream)
        rows = bench.user_rows(lo, hi)
        pq.write_table(rows.append_column("_seq", pa.array(np.arange(seq0, seq0 + rows.num_rows), pa.int64())), path)
        os.utime(path, (now + j, now + j))  # the file source takes the oldest first
    res = {"class": bench.name, "mode": bench.mode, "micro_batch": sizes.stream_batch,
           "micro_batches": sizes.stream_batches, "load_start": load_avg()}
    q = None
    try:
        sdf = spark.readStream.schema(bench.stream_schema() + ", _seq bigint").option("maxFilesPerTrigger", 1) \
            .parquet(str(src))
        out = e.stream(bench.table, sdf, bench.mode)
        t0 = time.perf_counter()
        q = out.writeStream.format("noop").option("checkpointLocation", str(ck)).outputMode("append").start()
        q.processAllAvailable()
        res["total_s"] = time.perf_counter() - t0
        prog = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
        rates = [p["numInputRows"] / max(p["durationMs"]["triggerExecution"] / 1000, 1e-9) for p in prog]
        res["rows_s_per_batch"] = rates
        res["first_batch_s"] = prog[0]["durationMs"]["triggerExecution"] / 1000 if prog else None
        res["rows_s"] = statistics.median(rates[1:]) if len(rates) > 1 else (rates[0] if rates else None)
        res["stream_stats"] = _stream_stats(out)
        log(f"  {bench.name}: stream {sizes.stream_batches} x {sizes.stream_batch:,}: median "
            f"{res['rows_s'] or 0:,.0f} rows/s after the first ({res['first_batch_s'] or 0:.1f} s); "
            f"counters {res['stream_stats']}")
    except Exception as err:  # noqa: BLE001 - a class that cannot stream is reported, not fatal
        res["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        log(f"  {bench.name}: stream failed: {res['error']}")
    finally:
        if q is not None:
            q.stop()
    res["load_end"] = load_avg()
    return res


def _stream_stats(df):
    try:
        from sparksub.runtime import stream as spark_stream
        return spark_stream.stream_stats(df)
    except Exception:  # noqa: BLE001 - only the range groups' stream has counters at this commit
        return None


# ============================================================================================ memory children
def subscription_inputs(subs: int):
    """``range_min.make_subscriptions(subs)`` -- the same seed, draws and values -- with the ids as one numpy
    unicode array rather than an object array of Python strings: a million of those are ~60 MB that pymalloc
    keeps after they are dropped, which the memory child would count as the driver's."""
    import range_min as rm
    r = np.random.default_rng(rm.SEED_SUBS)
    mid, length = r.normal(5000.0, 1500.0, subs), np.abs(r.normal(1000.0, 1000.0, subs))
    return (np.char.add("q", np.arange(subs).astype(str)),
            np.clip(mid - length / 2, 0.0, rm.DOMAIN), np.clip(mid + length / 2, 0.0, rm.DOMAIN))


def rss_child(master: str, subs: int, rows: int, connect: bool = False) -> dict:
    """In a fresh process: driver and worker memory with ``subs`` range-MIN subscriptions on ``rows`` rows."""
    import range_min as rm

    from sparksub import Engine
    out = {"subscriptions": subs, "rows": rows, "master": master}
    _, lo_ref, hi_ref = rm.make_subscriptions(1000)   # subscription_inputs keeps make_subscriptions' values
    ids, lo, hi = subscription_inputs(1000)
    assert ids[-1] == "q999" and np.array_equal(lo, lo_ref) and np.array_equal(hi, hi_ref)
    del ids, lo, hi, lo_ref, hi_ref
    # the rows and the updates are the same at every size; the subscriptions are built just before
    # subscribe_many and dropped after it (numpy buffers, given back at once), so that no measured step
    # but "inputs" holds them: the driver's growth with subscriptions is the engine's
    keys, xs, ys = rm.make_objects(rows)
    stream = rm.make_updates(ys, 40_000)
    gc.collect()
    out["driver_start_mb"] = rss_mb()
    spark = _session(master, "sparksub-bench-runtime-rss", connect)
    out["driver_session_mb"] = rss_mb()
    e = Engine(spark)
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", pa.table({"symbol": keys.astype(str), "risk": xs, "per": ys}))
    gc.collect()
    out["driver_loaded_mb"] = rss_mb()
    ids, lo, hi = subscription_inputs(subs)
    out["driver_inputs_mb"] = rss_mb()
    t0 = time.perf_counter()
    e.subscribe_many(RANGE_TEMPLATE, {"id": ids, "lo": lo, "hi": hi})
    out["subscribe_s"] = time.perf_counter() - t0
    del ids, lo, hi
    gc.collect()
    out["driver_subscribed_mb"] = rss_mb()
    # unicast first: the driver does not build the group for it (the workers do); result() then builds it on
    # the driver; a reformulated publish seeds deliver()'s subscriber side there as well
    times, pos = [], 0
    for j in range(3):
        t0 = time.perf_counter()
        e.publish("stock", rm.stock_batch(keys, xs, stream, pos, pos + 1_000), "unicast").count()
        times.append(time.perf_counter() - t0)
        pos += 1_000
    out["publish_unicast_1k_s"] = times
    gc.collect()
    out["driver_published_mb"] = rss_mb()
    out["after_publish"] = memory_snapshot()
    e.result("q0")
    gc.collect()
    out["driver_after_result_mb"] = rss_mb()
    times = []
    for j in range(2):
        t0 = time.perf_counter()
        e.publish("stock", rm.stock_batch(keys, xs, stream, pos, pos + 10_000), "reformulated").count()
        times.append(time.perf_counter() - t0)
        pos += 10_000
    out["publish_reformulated_10k_s"] = times
    gc.collect()
    out["driver_after_reformulated_mb"] = rss_mb()
    out["after_reformulated"] = memory_snapshot()
    # the replicas the group's state is in (groups/<group>/<part>): one, 'whole', while a group is one task
    groups = e.directory.root / "groups"
    out["replicas"] = sorted(str(p.relative_to(groups)) for p in groups.glob("*/*") if p.is_dir())
    out["cache"] = {k: v for k, v in cache_counts(e).items() if k not in ("by_label", "bases")}
    spark.stop()
    return out


def run_rss_children(master: str, sizes: Sizes, connect: bool = False) -> list[dict]:
    res = []
    for m in sizes.rss_subs:
        log(f"  memory child: {m:,} subscriptions x {sizes.rss_rows:,} rows on {master} ...")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "--rss-child", str(m), "--rss-rows", str(sizes.rss_rows),
                                   "--master", master] + (["--connect"] if connect else []),
                                  capture_output=True, text=True, timeout=1800, env=env)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RSS ")), None)
            if line is None:
                text = proc.stderr or proc.stdout
                # the first error line names the cause (a JVM's stack trace would bury it)
                first = next((ln for ln in text.splitlines() if "Error" in ln or "Exception" in ln), "")
                res.append({"subscriptions": m, "error": (first.strip() + " ... " + text[-400:]) if first
                            else text[-600:]})
                log(f"    failed: {res[-1]['error'][-300:]}")
                continue
            r = json.loads(line[4:])
        except subprocess.TimeoutExpired:
            res.append({"subscriptions": m, "error": "timeout"})
            continue
        r["wall_s"] = time.perf_counter() - t0
        res.append(r)
        a = r["after_publish"]
        z = r["after_reformulated"]
        log(f"    driver {r['driver_published_mb']:.0f} MB after unicast publishes, {r['driver_after_result_mb']:.0f} "
            f"MB after result(), {r['driver_after_reformulated_mb']:.0f} MB after reformulated ones; Python workers "
            f"{a['python_rss_mb']:.0f} / {z['python_rss_mb']:.0f} MB RSS in {z['python_workers']} processes; "
            + "; ".join(f"{k}: Python {v['python_rss_mb']:.0f} MB" for k, v in z["executors"].items()))
    return res


# ============================================================================================ session
def _session(master: str, app: str, connect: bool = False):
    """A classic session (sparksub's ``spark_session``), or with ``connect`` a Spark Connect client of a local
    Connect server on ``master`` (as tests/test_connect.py starts one), with the same session defaults."""
    from sparksub.runtime.session import SESSION_DEFAULTS
    conf = {}
    if master.startswith("local-cluster"):
        conf = {"spark.executorEnv.PYSPARK_PYTHON": sys.executable}
        if os.environ.get("PYTHONPATH"):
            conf["spark.executorEnv.PYTHONPATH"] = os.environ["PYTHONPATH"]
    if connect:
        from pyspark.sql import SparkSession
        builder = SparkSession.builder.remote(master).appName(app)
        # a Connect client sets session (SQL) options only: the UI and static options stay the server's
        for k, v in {**SESSION_DEFAULTS, **conf}.items():
            if k.startswith("spark.sql.") and k != "spark.sql.catalogImplementation":
                builder = builder.config(k, v)
        return builder.getOrCreate()
    from sparksub.engine import spark_session
    return spark_session(master, app, **conf)


def code_under_test() -> dict:
    """Which sparksub this process runs: its path, and the git commit (dirty or not) of its checkout."""
    import sparksub
    src = Path(sparksub.__file__).resolve().parent
    out = {"sparksub": str(src)}
    try:
        out["commit"] = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True,
                                       text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True).stdout.strip()
        out["dirty"] = bool(dirty)
    except (OSError, subprocess.CalledProcessError):
        out["commit"], out["dirty"] = None, None
    return out


def worker_code_path(spark) -> list:
    """Where the Python workers import sparksub from (must be the code under test); a DataFrame job, so that
    it runs on a Connect session too."""
    def where(batches):
        import sparksub
        for _ in batches:
            yield pa.record_batch({"path": pa.array([sparksub.__file__])})
    rows = spark.range(0, 2, 1, 2).mapInArrow(where, "path string").collect()
    return sorted({r["path"] for r in rows})


# ============================================================================================ report
def write_large_comparison(runs: dict, baseline: dict | None, out: Path) -> None:
    """``runtime_large.md`` / ``runtime_large.png``: a ``--large`` run (the full run's sizes, batches of 10K and 100K)
    beside the previous runtime's full run -- issue 16's "no class slower than today at batches of 10K or more"
    and its 60% target, at the same sizes on both sides."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    run = next(iter(runs["runs"].values())) if "runs" in runs else runs
    prev_run = _prev_run(baseline, "local[2] full", run["master"]) if baseline else None
    prev = {(p["class"], b["batch"]): b for p in (prev_run or {}).get("publish", []) for b in p["batches"]}
    rows, slower = [], []
    for p in run["publish"]:
        for b in p["batches"]:
            pv = prev.get((p["class"], b["batch"]))
            ratio = b["e2e_rows_s"] / pv["e2e_rows_s"] if pv else None
            if ratio is not None and ratio < 1:
                slower.append(f"{p['class']} at {b['batch']:,}: {ratio:.2f}x")
            rows.append([p["class"], f"{b['batch']:,}", f"{b['reps']}", fmt_num(b["e2e_rows_s"], 0),
                         fmt_num(b["pure_rows_s"], 0), f"{100 * b['ratio']:.1f}%", f"{b['rebuilds']}",
                         fmt_num(pv["e2e_rows_s"], 0) if pv else "-", f"{ratio:.2f}x" if ratio else "-",
                         f"{100 * pv['ratio']:.1f}%" if pv else "-"])
    table = md_table(["class", "batch", "reps", "e2e rows/s (median)", "pure rows/s", "e2e / pure", "worker rebuilds",
                      "previous e2e rows/s", "now / previous", "previous e2e / pure"], rows)
    code = run.get("code", {})
    text = (f"# Runtime benchmark at the full run's sizes, batches of 10K and 100K (`--large`)\n\n"
            f"`python bench/runtime.py --large --skip stream rss zero --baseline docs/benchmarks/runtime_baseline.json` "
            f"(`{run['argv']}`), sparksub at commit `{str(code.get('commit', ''))[:10]}`"
            f"{' (with uncommitted work of the session in the tree)' if code.get('dirty') else ''}, master "
            f"`{run['master']}`, {run['elapsed_s'] / 60:.1f} min, load average (1/5/15 min) {run['load_start']} at start, "
            f"{run['load_end']} at end: the machine's 2 cores were shared with other work.  Sizes: the full run's "
            f"(stock {run['sizes']['objects']:,} rows, {run['sizes']['range_subs']:,} RANGE_MIN / RANGE_AGG, "
            f"{run['sizes']['topk_subs']:,} RANGE_TOPK, {run['sizes']['filter_subs']:,} FILTER subscriptions; r and s "
            f"{run['sizes']['join_rows']:,} rows, {run['sizes']['sj_subs']:,} SELECT_JOIN and {run['sizes']['bj_subs']:,} "
            f"BAND_JOIN subscriptions; {run['sizes']['event_queries']:,} event queries), so *now / previous* compares "
            f"the same work: the previous runtime's full run (commit `{str((prev_run or {}).get('code', {}).get('commit', ''))[:10]}`, "
            f"load at start {(prev_run or {}).get('load_start', '-')}).\n\n{table}\n\n"
            f"Slower than the previous runtime: {', '.join(slower) or 'none'}.\n\n"
            f"![e2e rows/s now vs the previous runtime, and e2e / pure](runtime_large.png)\n")
    (out / "runtime_large.md").write_text(text)
    classes = [p["class"] for p in run["publish"]]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    for ax, batch in zip(axes, (10_000, 100_000)):
        now = [next((b["e2e_rows_s"] for b in p["batches"] if b["batch"] == batch), 0) for p in run["publish"]]
        was = [prev.get((c, batch), {}).get("e2e_rows_s", 0) for c in classes]
        pure = [next((b["pure_rows_s"] for b in p["batches"] if b["batch"] == batch), 0) for p in run["publish"]]
        x = np.arange(len(classes))
        ax.bar(x - 0.2, was, 0.4, label="previous runtime, e2e", color="#999")
        ax.bar(x + 0.2, now, 0.4, label="now, e2e", color="#2a7")
        ax.scatter(x + 0.2, pure, marker="_", s=300, color="k", label="now, pure operator")
        ax.set_yscale("log")
        ax.set_xticks(x, classes, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"publish, batches of {batch:,} (rows/s)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "runtime_large.png", dpi=90)
    plt.close(fig)


def run_label(master: str, quick: bool, connect: bool = False, smoke: bool = False, large: bool = False) -> str:
    size = 'smoke' if smoke else 'quick' if quick else 'large (full sizes, batches >= 10K)' if large else 'full'
    return f"{'Connect ' if connect else ''}{master} {size}"


def _prev_run(baseline: dict | None, label: str, master: str) -> dict | None:
    if not baseline:
        return None
    runs = baseline.get("runs", {})
    return runs.get(label) or next((r for r in runs.values() if r.get("master") == master), None)


def _ratio(a, b) -> str:
    if a is None or b is None or not b:
        return "n/a"
    return f"{a / b:.2f}x"


def _mb(v) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def report_run(run: dict) -> list[str]:
    L = []
    prev = run.get("previous")
    info = run["machine"]
    code = run["code"]
    L.append(f"## {run['label']}\n")
    argv = run["argv"].replace(str(REPO) + "/", "")
    L.append(f"`python bench/runtime.py {argv}` on {info['date']} (total {run['elapsed_s'] / 60:.1f} min), "
             f"sparksub at commit `{(code.get('commit') or '?')[:10]}`"
             f"{' (with uncommitted changes)' if code.get('dirty') else ''} ({code['sparksub']}; workers: "
             f"{', '.join(run.get('worker_code', [])) or '?'}). Master `{run['master']}`. "
             f"Load average (1/5/15 min) at start {run['load_start']}, at end {run['load_end']}"
             + (f"; previous runtime's figures from `{run['previous_source']}` (commit "
                f"`{(prev['code'].get('commit') or '?')[:10]}`, {prev['machine']['date']}, load at start "
                f"{prev['load_start']})" if prev else "") + ".\n")
    if prev and prev.get("sizes") not in (None, run["sizes"]):
        L.append("**The previous runtime's figures are from a run at other sizes** (its tables, subscriptions and "
                 "batches: `python bench/runtime.py` without `--quick`); *now / previous* compares the same class "
                 "and batch size across them, *e2e / pure* is the figure that carries over.\n")
    s = run["sizes"]
    L.append(f"Sizes: stock {s['objects']:,} rows, {s['range_subs']:,} RANGE_MIN / RANGE_AGG and "
             f"{s.get('topk_subs', s['range_subs']):,} RANGE_TOPK subscriptions, "
             f"{s['filter_subs']:,} FILTER subscriptions; r and s {s['join_rows']:,} rows each, {s['sj_subs']:,} "
             f"SELECT_JOIN and {s['bj_subs']:,} BAND_JOIN subscriptions; {s['event_queries']:,} event queries. "
             f"Batches (size x timed repetitions): {', '.join(f'{b:,} x {r}' for b, r in s['batches'])}"
             + "".join(f", and {', '.join(f'{b:,} x {r}' for b, r in v)} for {k}"
                       for k, v in (s.get('extra_batches') or {}).items()) + "; "
             f"{s['fixed_reps']} 1-row publishes.\n")

    # ---- publish
    L.append("### publish: end to end vs the pure operator\n")
    prev_pub = {(p["class"], b["batch"]): b for p in (prev or {}).get("publish", []) for b in p["batches"]}
    hdr = ["class", "mode", "batch", "e2e rows/s", "pure rows/s", "e2e / pure", "s per batch (median)",
           "out rows/update", "worker rebuilds", "load at class start"]
    if prev:
        hdr += ["previous e2e rows/s", "now / previous", "previous e2e / pure"]
    rows = []
    for p in run["publish"]:
        for b in p["batches"]:
            r = [p["class"], p["mode"], f"{b['batch']:,}", fmt_num(b["e2e_rows_s"]), fmt_num(b["pure_rows_s"]),
                 f"{100 * b['ratio']:.1f}%", f"{b['e2e_s']:.3f}", fmt_num(b["out_rows_per_update"]),
                 "n/a" if b["rebuilds"] is None else f"{b['rebuilds']} (+{b['caught_up']} caught up"
                 + (f", {b['new_bases']} new bases" if b.get("new_bases") else "") + ")",
                 p["load_start"].split("/")[0]]
            if prev:
                q = prev_pub.get((p["class"], b["batch"]))
                r += [fmt_num(q["e2e_rows_s"]) if q else "n/a", _ratio(b["e2e_rows_s"], q and q["e2e_rows_s"]),
                      f"{100 * q['ratio']:.1f}%" if q else "n/a"]
            rows.append(r)
    L.append(md_table(hdr, rows) + "\n")
    L.append("Per class: registration, the first (cold) call and the per-call fixed cost:\n")
    prev_cls = {p["class"]: p for p in (prev or {}).get("publish", [])}
    hdr = ["class", "subscriptions", "register s", "first call s", "rebuilds in the first call",
           "1-row publish s (median)", "pure 1-row ms", "pure build s", "rebuild counter in engine.stats()"]
    if prev:
        hdr += ["previous 1-row publish s", "now / previous"]
    rows = []
    for p in run["publish"]:
        fr = p.get("first_call_rebuilds")
        r = [p["class"], f"{p['subscriptions']:,}", f"{p['register_s']:.2f}", f"{p['first_call_s']:.2f}",
             "n/a" if fr is None else str(fr["rebuilds"]), f"{p['fixed_cost_s']:.3f}",
             f"{1e3 * p['pure_1row_s']:.2f}", f"{p['pure_build_s']:.2f}", p["stats_rebuild_counter"]]
        if prev:
            q = prev_cls.get(p["class"])
            r += [f"{q['fixed_cost_s']:.3f}" if q else "n/a", _ratio(p["fixed_cost_s"], q and q["fixed_cost_s"])]
        rows.append(r)
    L.append(md_table(hdr, rows) + "\n")

    # ---- stream
    if run.get("stream"):
        L.append("### stream: a bounded file source through Engine.stream\n")
        prev_st = {x["class"]: x for x in (prev or {}).get("stream", [])}
        hdr = ["class", "mode", "micro-batch rows", "micro-batches", "rows/s per micro-batch after the first (median)",
               "first micro-batch s", "all rows/s per micro-batch", "stream counters (spark_stream.stream_stats)"]
        if prev:
            hdr += ["previous rows/s", "now / previous"]
        rows = []
        for x in run["stream"]:
            if "error" in x:
                r = [x["class"], x["mode"], f"{x['micro_batch']:,}", str(x["micro_batches"]), "failed", "",
                     x["error"][:160], ""]
            else:
                st = x.get("stream_stats")
                r = [x["class"], x["mode"], f"{x['micro_batch']:,}", str(x["micro_batches"]), fmt_num(x["rows_s"]),
                     fmt_num(x["first_batch_s"]), ", ".join(fmt_num(v) for v in x["rows_s_per_batch"]),
                     ", ".join(f"{k} {v}" for k, v in st.items() if k in ("seeded", "cache_hits", "caught_up",
                                                                          "rebuilt")) if st else "none"]
            if prev:
                q = prev_st.get(x["class"])
                r += [fmt_num(q.get("rows_s")) if q else "n/a", _ratio(x.get("rows_s"), q and q.get("rows_s"))]
            rows.append(r)
        L.append(md_table(hdr, rows) + "\n")

    # ---- zero rebuilds
    if run.get("zero_rebuild"):
        z0 = run["zero_rebuild"][0]
        extra = run.get("zero_rebuild_run")
        L.append(f"### zero-rebuild check: {ZERO_REBUILD_PUBLISHES} warm publishes of 1K per class\n")
        rounds = len(z0["after_pause"]) if z0["pause_s"] else 0
        L.append(f"After one warm-up publish per class: {ZERO_REBUILD_PUBLISHES - rounds} publishes back to back "
                 f"per class" + (f", then {rounds} rounds of one publish per class, each after {z0['pause_s']:.0f} s "
                                 f"idle" if rounds else "") + ". "
                 + (f"Measured in a separate invocation (`{extra['argv']}`, {extra['date']}, "
                    f"{extra['elapsed_s'] / 60:.0f} min, load {extra['load_start']} at start, "
                    f"{extra['load_end']} at end) on fresh engines with the same sizes (one warm-up publish, no "
                    f"throughput part before). " if extra else "")
                 + "Worker rebuilds from the counters of `engine.stats()['runtime']`; new workers = Python worker processes that did not exist after the "
                   "class's previous publish (Spark ends a Python worker idle for 60 s).\n")
        L += _zero_table(run["zero_rebuild"], prev and prev.get("zero_rebuild"), back_to_back=True)
    if run.get("zero_rebuild_interleaved"):
        z0 = run["zero_rebuild_interleaved"][0]
        L.append("The same 20 publishes with the classes **interleaved** (one publish of each class in turn, "
                 f"after the throughput part; {z0['pause_s']:.0f} s idle before the 11th and the 20th round): a class "
                 "then waits for the 7 others between two of its publishes (minutes here), longer than the 60 s "
                 "after which Spark ends an idle Python worker, so most publishes find no warm worker:\n")
        L += _zero_table(run["zero_rebuild_interleaved"], None, back_to_back=False)

    # ---- memory
    if run.get("rss"):
        L.append(f"### memory: range-MIN subscriptions on {run['sizes']['rss_rows']:,} rows (a fresh process per "
                 f"size)\n")
        L.append("All in MB. Driver = the child's Python VmRSS: at its start (the rows and updates built, the same "
                 "at every size); after the SparkSession started; after `load` of the rows; with the subscriptions' "
                 "inputs built (numpy columns, dropped after `subscribe_many`); after `subscribe_many`; after 3 "
                 "unicast publishes of 1K (the workers build the group, the "
                 "driver does not); after `result()` of one subscription (which builds the group on the driver); "
                 "after 2 reformulated publishes of 10K (which seed `deliver()`'s subscriber side on the driver). "
                 "Workers = every Python process under the Spark JVMs, after the unicast publishes and after the "
                 "reformulated ones (VmRSS summed; PSS counts pages shared by forked workers once).\n")
        prev_m = {x["subscriptions"]: x for x in (prev or {}).get("rss", []) if "error" not in x}
        hdr = ["subscriptions", "driver: start", "session", "loaded", "inputs", "subscribed", "published (unicast)",
               "after result()",
               "after reformulated", "driver JVM", "Python workers RSS (PSS): unicast / reformulated",
               "per executor (reformulated): Python RSS (PSS) / executor JVM RSS",
               "publish s: unicast 1K x3, reformulated 10K x2"]
        if prev:
            hdr += ["previous driver published", "previous workers RSS"]
        rows = []
        for x in run["rss"]:
            if "error" in x:
                rows.append([f"{x['subscriptions']:,}", "failed: " + x["error"][:160].replace("\n", " ")]
                            + [""] * (len(hdr) - 2))
                continue
            a, z = x["after_publish"], x["after_reformulated"]
            per = "; ".join(f"{k}: {_mb(v['python_rss_mb'])} ({_mb(v['python_pss_mb'])})"
                            + (f" / {_mb(v['jvm_rss_mb'])}" if v["jvm_rss_mb"] else "")
                            for k, v in z["executors"].items())
            r = [f"{x['subscriptions']:,}", _mb(x["driver_start_mb"]), _mb(x["driver_session_mb"]),
                 _mb(x["driver_loaded_mb"]), _mb(x.get("driver_inputs_mb")), _mb(x["driver_subscribed_mb"]), _mb(x["driver_published_mb"]), _mb(x["driver_after_result_mb"]),
                 _mb(x["driver_after_reformulated_mb"]), _mb(z["driver_jvm_rss_mb"]),
                 f"{_mb(a['python_rss_mb'])} ({_mb(a['python_pss_mb'])}) / {_mb(z['python_rss_mb'])} "
                 f"({_mb(z['python_pss_mb'])})", per,
                 ", ".join(f"{t:.1f}" for t in x["publish_unicast_1k_s"]) + "; "
                 + ", ".join(f"{t:.1f}" for t in x["publish_reformulated_10k_s"])]
            if prev:
                q = prev_m.get(x["subscriptions"])
                r += [_mb(q["driver_published_mb"]) if q else "n/a",
                      _mb(q["after_publish"]["python_rss_mb"]) if q else "n/a"]
            rows.append(r)
        L.append(md_table(hdr, rows) + "\n")
        ok = [x for x in run["rss"] if "error" not in x]
        if len(ok) >= 2:
            lo_, hi_ = ok[0], ok[-1]
            grow = _rss_growth(lo_, hi_)
            L.append(f"Driver RSS growth from {lo_['subscriptions']:,} to {hi_['subscriptions']:,} subscriptions "
                     f"(absolute at the same step; in brackets net of each child's start): "
                     f"{grow['published']:+,.0f} ({grow['published_net']:+,.0f}) MB after the unicast publishes "
                     f"(issue 16's target: within 100 MB), {grow['result']:+,.0f} ({grow['result_net']:+,.0f}) MB "
                     f"after result(), {grow['reformulated']:+,.0f} ({grow['reformulated_net']:+,.0f}) MB after the "
                     f"reformulated publishes.\n")
    L += _executor_share(run)
    if run.get("caveats"):  # written into the JSON by hand, for what the script cannot see (concurrent runs)
        L.append("**Caveats**: " + " ".join(run["caveats"]) + "\n")
    if run.get("notes"):
        L.append("Not measured in this run: " + "; ".join(run["notes"]) + ".\n")
    return L


def _rss_growth(small: dict, big: dict) -> dict:
    """The driver's RSS growth from the small memory child to the big one at each measured step, absolute and
    net of each child's start (what the child held before the engine: its runtime and the rows' inputs)."""
    steps = {"published": "driver_published_mb", "result": "driver_after_result_mb",
             "reformulated": "driver_after_reformulated_mb"}
    out = {k: big[v] - small[v] for k, v in steps.items()}
    out.update({f"{k}_net": (big[v] - big["driver_start_mb"]) - (small[v] - small["driver_start_mb"])
                for k, v in steps.items()})
    return out


def _executor_share(run: dict) -> list[str]:
    """On local-cluster: each executor's share of the range-MIN group's memory (its Python workers' RSS after
    the reformulated publishes), per size."""
    ok = [x for x in run.get("rss") or [] if "error" not in x and len(x["after_reformulated"]["executors"]) > 1]
    if not ok:
        return []
    L = ["### each executor's share of one large range-MIN group\n",
         "A group is still **one replica run by one task** (item 4's split of a group across partitions is not in "
         "this runtime): its subscriptions and rows are all in the worker of whichever executor ran that task, "
         "and in the other executor too if a later task of the group ran there (a rebuild from the files). Per "
         "executor JVM, its Python workers after the reformulated publishes (RSS summed; PSS), their share of all "
         "Python workers' RSS, and the replicas the group's files hold:\n"]
    rows = []
    for x in ok:
        z = x["after_reformulated"]
        total = sum(v["python_rss_mb"] for v in z["executors"].values()) or 1.0
        for k, v in sorted(z["executors"].items()):
            rows.append([f"{x['subscriptions']:,} x {x['rows']:,}", k, str(v["python_processes"]),
                         f"{_mb(v['python_rss_mb'])} ({_mb(v['python_pss_mb'])})",
                         f"{100 * v['python_rss_mb'] / total:.0f}%", _mb(v["jvm_rss_mb"]),
                         ", ".join(x.get("replicas", [])) or "?"])
    L.append(md_table(["subscriptions x rows", "executor", "Python workers", "Python RSS (PSS) MB",
                       "share of Python RSS", "executor JVM RSS MB", "replicas (groups/<group>/<part>)"], rows)
             + "\n")
    return L


def _zero_table(results: list, prev: list | None, back_to_back: bool) -> list[str]:
    prev_z = {x["class"]: x for x in (prev or [])}
    multi = any(len(x.get("by_executor", {})) > 1 for x in results)
    hdr = ["class", "rebuilds (total)", "publishes with a rebuild"]
    hdr += ["rebuilds in the back-to-back publishes"] if back_to_back else []
    hdr += ["of which with no new base (cold worker)", "caught up", "new workers", "median s", "max s",
            "after the pauses s"]
    hdr += ["tasks / rebuilds per executor"] if multi else []
    hdr += ["previous rebuilds (back to back)", "previous publishes with a rebuild"] if prev else []
    rows = []
    for x in results:
        r = [x["class"], str(x["total_rebuilds"]), str(x["publishes_with_rebuild"])]
        r += [str(x.get("warm_rebuilds"))] if back_to_back else []
        r += [str(x.get("cold_rebuilds", "n/a")), str(sum(c for c in x["caught_up"] if c)),
              str(sum(x["worker_restarts"])), f"{x['median_s']:.3f}",
              f"{x['max_s']:.2f}", ", ".join(f"{t:.2f}" for t in x["after_pause_s"]) or "-"]
        if multi:
            r.append("; ".join(f"{k}: {v['tasks']} / {v['rebuilds']}" for k, v in sorted(x["by_executor"].items())))
        if prev:
            q = prev_z.get(x["class"])
            r += [f"{q['total_rebuilds']} ({q.get('warm_rebuilds')})" if q else "n/a",
                  str(q["publishes_with_rebuild"]) if q else "n/a"]
        rows.append(r)
    return [md_table(hdr, rows) + "\n"]


def _loads(run: dict) -> list[float]:
    """Every 1-minute load average the run recorded."""
    vals = [run.get("load_start"), run.get("load_end")]
    for part in ("publish", "stream"):
        for x in run.get(part) or []:
            vals += [x.get("load_start"), x.get("load_end")]
    if run.get("zero_rebuild_run"):
        vals += [run["zero_rebuild_run"]["load_start"], run["zero_rebuild_run"]["load_end"]]
    return [float(v.split("/")[0]) for v in vals if v and v != "n/a"]


def _targets(run: dict) -> list[list[str]]:
    """Issue 16's targets as this run measures them: [target, measured, PASS / FAIL / not measured]."""
    rows = []
    rss = [x for x in run.get("rss") or [] if "error" not in x]
    small = next((x for x in rss if x["subscriptions"] == 10_000), None)
    big = next((x for x in rss if x["subscriptions"] == 1_000_000), None)
    target = "driver RSS at 1M range subscriptions + 100K rows within 100 MB of its RSS at 10K"
    if small and big:
        g = _rss_growth(small, big)
        rows.append([target, f"{g['published']:+,.0f} MB after unicast publishes, {g['result']:+,.0f} MB after "
                             f"result(), {g['reformulated']:+,.0f} MB after reformulated ones (net of each child's "
                             f"start: {g['published_net']:+,.0f} / {g['result_net']:+,.0f} / "
                             f"{g['reformulated_net']:+,.0f})",
                     "PASS" if max(g["published"], g["result"], g["reformulated"]) <= 100 else "FAIL"])
    else:
        failed = [f"{x['subscriptions']:,}" for x in run.get("rss") or [] if "error" in x]
        rows.append([target, f"the memory child at {', '.join(failed)} subscriptions failed (see the memory table)"
                     if failed else "-", "not measured"])
    rm = next((p for p in run.get("publish", []) if p["class"] == "RANGE_MIN reformulated"), None)
    b = next((b for b in (rm or {}).get("batches", []) if b["batch"] == 100_000), None)
    target = "RANGE_MIN reformulated end to end at batches of 100K >= 60% of the pure core's rate"
    rows.append([target, f"{100 * b['ratio']:.1f}% ({fmt_num(b['e2e_rows_s'])} vs {fmt_num(b['pure_rows_s'])} "
                         f"rows/s)", "PASS" if b["ratio"] >= 0.6 else "FAIL"] if b else [target, "-", "not measured"])
    target = "no class slower than the previous runtime at batches of 10K or more"
    prev = run.get("previous")
    if prev:
        prev_pub = {(p["class"], q["batch"]): q for p in prev.get("publish", []) for q in p["batches"]}
        slower, compared = [], 0
        for p in run.get("publish", []):
            for q in p["batches"]:
                old = prev_pub.get((p["class"], q["batch"]))
                if q["batch"] >= 10_000 and old:
                    compared += 1
                    if q["e2e_rows_s"] < old["e2e_rows_s"]:
                        slower.append(f"{p['class']} at {q['batch']:,}: {q['e2e_rows_s'] / old['e2e_rows_s']:.2f}x")
        same = prev.get("sizes") in (None, run["sizes"])
        note = "" if same else " (the previous figures are at other table / subscription sizes: see below)"
        rows.append([target, (f"{compared} class/batch pairs compared; slower: " + ("; ".join(slower) or "none")
                              + note) if compared else "no common batch", "not measured" if not compared
                     else ("FAIL" if slower else "PASS") + ("" if same else " (sizes differ)")])
    else:
        rows.append([target, "no --baseline", "not measured"])
    z = run.get("zero_rebuild")
    target = "zero rebuilds in 20 consecutive warm publishes, two after a 90 s pause"
    if z and z[0].get("design"):
        bad = [f"{x['class']} {x['total_rebuilds']}" + (f" ({x['total_rebuilds'] - x['cold_rebuilds']} in publishes "
                                                          f"that compacted the log: a new base)"
                                                          if x.get("cold_rebuilds") is not None
                                                          and x["cold_rebuilds"] < x["total_rebuilds"] else "")
               for x in z if x["total_rebuilds"]]
        pause = z[0]["pause_s"]
        rows.append([target, f"pause {pause:.0f} s; worker rebuilds: " + (", ".join(bad) if bad else "none"),
                     ("FAIL" if bad else "PASS") + ("" if pause >= 90 else " (pause < 90 s)")])
    else:
        rows.append([target, "-", "not measured"])
    return rows


def write_report(data: dict, md_path: Path, png_path: Path) -> None:
    L = ["# Runtime benchmark: end to end through Spark vs the pure operators\n"]
    L.append("Generated by `bench/runtime.py` (see `bench/README.md`): every subscription class through "
             "`Engine.publish` and `Engine.stream` beside its pure group operator on the same data, per-call fixed "
             "cost, rebuilds, driver and Python-worker memory (issue 16, \"Measure\"). Each section below is one run "
             "(the JSON beside this file holds them; a later run with `--baseline FILE` adds the previous runtime's "
             "figures and ratios).\n")
    runs = data.get("runs", {})
    if data.get("zones"):
        when = ", ".join(f"{m} {z['machine']['date']}" for m, z in data["zones"].items())
        L.append(f"The per-run sections below are from the previous runs (each gives its date and commit); the "
                 f"section \"Range groups split into X zones\" (issue 16 item 4, `--zones`) is from the latest run "
                 f"({when}).\n")
    for run in runs.values():
        if run.get("baseline_note"):
            L.append(run["baseline_note"] + "\n")
            break
    m = next(iter(runs.values()))["machine"] if runs else None
    if m:
        L.append(f"**Machine**: {m['platform']}; {m['cpu_count']} CPUs ({m['cpu']}); Python {m['python']}, pyspark "
                 f"{m['pyspark']}, numpy {m['numpy']}, pyarrow {m['pyarrow']}.\n")
    loads = [v for r in runs.values() for v in _loads(r)]
    if loads:
        L.append(f"**Load**: every run shared the machine's 2 cores with other work: the 1-minute load average "
                 f"recorded during the runs ranged from {min(loads):.1f} to {max(loads):.1f}. The figures are wall "
                 f"clock under that load: absolute rates are low and noisy; the ratios measured side by side (e2e / "
                 f"pure, now / previous) are the robust figures.\n")
    order = sorted(runs.values(), key=lambda r: (r.get("connect", False), r["quick"], r["master"] != "local[2]"))
    L.append("## Issue 16's targets\n")
    for run in order:
        L.append(f"**{run['label']}** ({run['machine']['date']}, load {run['load_start']} at start):\n")
        L += [f"* **{status}**: {target}: {measured}" for target, measured, status in _targets(run)]
        L.append("")
    L.append("![e2e vs pure rows/s per class and batch; memory](runtime.png)\n")
    for run in order:
        L += report_run(run)
    L += _zones_section(data, png_path.parent)
    L.append(textwrap.dedent("""\
        ## How to read it

        * **e2e / pure** is the share of the pure core's rate the engine keeps end to end: validation and the
          driver's copy of the table, building the batch, the Spark job (one task per group or partition),
          Arrow round trips, the worker-side operator, the checkpoint of the output and `count()`. The pure
          operator runs the same batches on one core with no Spark.
        * **worker rebuilds**: from `engine.stats()["runtime"]`'s counters (the files under the engine's
          directory), around each call: tasks whose Python worker did not hold the replica (or held another
          base) and built it from the base file plus the whole log; *caught up*: tasks whose worker held it
          behind and replayed the log entries it missed; *new bases*: the call compacted a log (range groups past
          200,000 logged rows, `LOG_COMPACTION_ROWS`; an event partition past 20,000 events,
          `EVENT_LOG_COMPACTION`) or changed the group, so the next task rebuilds by design. With `local[2]` an
          executor has two Python workers: a task can land on the one that never held the replica (a rebuild).
        * **stream**: micro-batch rates exclude the first micro-batch (it seeds the state from the engine's rows).
        * Timings are wall clock on a shared 2-core machine: compare the ratios within a run, not absolute rates
          across runs.
        """))
    md_path.write_text("\n".join(L))
    _plot(order, png_path)


def _plot(runs: list, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    main = next((r for r in runs if not r["quick"]), runs[0] if runs else None)
    if main is None:
        return
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    classes = [p["class"] for p in main["publish"]]
    batches = sorted({q["batch"] for p in main["publish"] for q in p["batches"]})
    width = 0.8 / max(len(batches), 1)
    x = np.arange(len(classes))
    ax = axes[0]
    for j, b in enumerate(batches):
        e2e = [next((q["e2e_rows_s"] for q in p["batches"] if q["batch"] == b), np.nan) for p in main["publish"]]
        pure = [next((q["pure_rows_s"] for q in p["batches"] if q["batch"] == b), np.nan) for p in main["publish"]]
        ax.bar(x + j * width, e2e, width, label=f"e2e, batch {b:,}")
        ax.plot(x + j * width, pure, "k_", ms=12, mew=2, label="pure operator" if j == 0 else None)
    ax.set_yscale("log")
    ax.set_xticks(x + width * (len(batches) - 1) / 2)
    ax.set_xticklabels(classes, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("rows / s")
    ax.set_title(f"publish: e2e (bars) vs pure (dashes), {main['label']}", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    for j, b in enumerate(batches):
        ratio = [100 * next((q["ratio"] for q in p["batches"] if q["batch"] == b), np.nan) for p in main["publish"]]
        ax.bar(x + j * width, ratio, width, label=f"batch {b:,}")
    ax.axhline(60, color="grey", ls=":", lw=1, label="issue 16 target for RANGE_MIN reformulated at 100K (60%)")
    ax.set_yscale("log")
    ax.set_xticks(x + width * (len(batches) - 1) / 2)
    ax.set_xticklabels(classes, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("e2e / pure (%)")
    ax.set_title("share of the pure core's rate kept end to end", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax = axes[2]
    for run, style in zip(runs, ("o-", "s--", "^:", "d-.")):
        ok = [r for r in run.get("rss", []) if "error" not in r]
        if not ok:
            continue
        m = [r["subscriptions"] for r in ok]
        ax.plot(m, [r["driver_published_mb"] for r in ok], style, label=f"driver after unicast, {run['label']}")
        ax.plot(m, [r["driver_after_reformulated_mb"] for r in ok], style, alpha=0.7,
                label=f"driver after reformulated, {run['label']}")
        ax.plot(m, [r["after_reformulated"]["python_rss_mb"] for r in ok], style, alpha=0.4,
                label=f"Python workers (RSS sum), {run['label']}")
    ax.set_xscale("log")
    ax.set_xlabel("range-MIN subscriptions (100K rows)")
    ax.set_ylabel("MB")
    ax.set_title("memory: driver and Python workers", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    for a in axes:
        a.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ============================================================================================ main
def zero_only(args, sizes: Sizes, pause: float) -> int:
    """``--zero-only``: the zero-rebuild check alone, on fresh engines, merged into the run of the same label in
    ``--json`` (an earlier result without a design mark, the interleaved one, is kept beside it)."""
    label = run_label(args.master, args.quick, args.connect, args.tiny)
    data = json.loads(args.json.read_text()) if args.json.exists() else {"runs": {}}
    if label not in data["runs"]:
        raise SystemExit(f"--zero-only: no run {label!r} in {args.json} to merge into")
    started, info, load0 = time.perf_counter(), machine(), load_avg()
    work = Path(tempfile.mkdtemp(prefix="sparksub-bench-runtime-"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        benches = make_benches(sizes, 1_000 * (ZERO_REBUILD_PUBLISHES + 2), args.only)
        spark = _session(args.master, "sparksub-bench-runtime", args.connect)
        live = []
        for b in benches:
            log(f"registering {b.name} ...")
            live.append((b, b.engine(spark), Cursor()))
        log(f"\n## zero-rebuild check ({ZERO_REBUILD_PUBLISHES} warm publishes per class, pause {pause:.0f} s)")
        results = zero_rebuild_part(live, pause)
        live.clear()
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run = data["runs"][label]
    if run.get("zero_rebuild") and not run["zero_rebuild"][0].get("design"):
        run["zero_rebuild_interleaved"] = run["zero_rebuild"]
    run["zero_rebuild"] = results
    run["zero_rebuild_run"] = {"argv": "python bench/runtime.py " + " ".join(sys.argv[1:]).replace(str(REPO) + "/", ""),
                               "date": info["date"], "load_start": load0, "load_end": load_avg(),
                               "elapsed_s": time.perf_counter() - started}
    args.json.write_text(json.dumps(data, indent=1, default=str))
    write_report(data, args.out / "runtime.md", args.out / "runtime.png")
    log(f"merged into {args.json} ({label}); wrote {args.out / 'runtime.md'}")
    return 0


# ============================================================================================ zones (item 4)
#: the zones part (``--zones``): a large range-MIN group split into X zones (DS-CN, 000 §2.3.2; control/zones.py)
#: against the same group run whole, each in a fresh child process on ``--master``
ZONES_SUBS, ZONES_ROWS = 1_000_000, 100_000
ZONES_BATCHES = [(10_000, 3), (100_000, 2)]
if os.environ.get("SPARKSUB_BENCH_ZONES_SMOKE"):    # does the part run (figures meaningless)
    ZONES_ROWS, ZONES_BATCHES = 10_000, [(2_000, 1), (5_000, 1)]
ZONES_WARM = [(1_000, "unicast"), (1_000, "reformulated")]


def _zones_updates(rows: int, batches: list):
    import range_min as rm
    keys, xs, ys = rm.make_objects(rows)
    n = sum(b for b, _ in ZONES_WARM) + sum(b * r for b, r in batches)
    return rm, keys, xs, ys, rm.make_updates(ys, n)


def zones_child(master: str, subs: int, rows: int, zones: int, batches: list) -> dict:
    """In a fresh process: one range-MIN group of ``subs`` subscriptions on ``rows`` rows, ``zones`` X zones (0:
    whole, one task); warm-up publishes, then timed reformulated publishes (+ ``count()``), the worker-cache
    outcomes around them, each executor's Python memory and what each replica holds."""
    from sparksub import Engine
    rm, keys, xs, ys, stream = _zones_updates(rows, batches)
    ids, lo, hi = rm.make_subscriptions(subs)
    out = {"subscriptions": subs, "rows": rows, "zones": zones, "master": master, "load_start": load_avg()}
    spark = _session(master, "sparksub-bench-runtime-zones")
    out["memory_baseline"] = _python_baseline(spark)
    e = Engine(spark)
    e.range_zones = zones
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", pa.table({"symbol": keys.astype(str), "risk": xs, "per": ys}))
    e.subscribe_many(RANGE_TEMPLATE, {"id": ids.astype(str), "lo": lo, "hi": hi})
    del ids, lo, hi
    pos, warm = 0, []
    for b, mode in ZONES_WARM:
        t0 = time.perf_counter()
        e.publish("stock", rm.stock_batch(keys, xs, stream, pos, pos + b), mode).count()
        warm.append({"rows": b, "mode": mode, "s": time.perf_counter() - t0})
        pos += b
    out["warm"] = warm
    before = cache_counts(e)
    timed = []
    gid = next(iter(ent.group_id for ent in e._groups.values()))
    for b, reps in batches:
        ts, stages = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            e.publish("stock", rm.stock_batch(keys, xs, stream, pos, pos + b), "reformulated").count()
            ts.append(time.perf_counter() - t0)
            zs = e._zone_states.get(gid)
            if zs is not None and zones:
                stages.append(dict(zs.timings))
            pos += b
        timed.append({"batch": b, "s": ts, "rows_per_s": b / statistics.median(ts), "load": load_avg(),
                      "zone_stages_s": stages})
        log(f"    zones={zones} batch {b:,}: {b / statistics.median(ts):,.0f} rows/s ({ts})")
    out["timed"] = timed
    out["cache"] = count_delta(before, cache_counts(e))
    out["memory"] = memory_snapshot()
    zs = e._zone_states.get(gid)
    if zs is not None and zones:
        out["zone_rows"], out["cuts"] = zs.zone_rows, zs.cuts
        out["shard_subscriptions"] = zs.shard_subscriptions
        where = worker_pids()   # the Python worker's pid -> its executor JVM
        out["zone_tasks"] = [{"partition": z.get("partition"), "pid": z.get("pid"),
                              "executor": where.get(z.get("pid"), "?")} for z in zs.zone_info]
        c = zs.counters
        out["round1_fraction"] = c["updates_round1"] / c["updates"] if c["updates"] else None
    else:
        out["zone_rows"], out["shard_subscriptions"] = [rows], [subs]
    out["load_end"] = load_avg()
    spark.stop()
    return out


def _touch_workers(batches):
    import sparksub.runtime.zones  # noqa: F401 - what a zone task imports
    for rb in batches:
        yield rb


def _python_baseline(spark) -> dict:
    """Each executor's Python memory with workers started and sparksub's runtime imported, before any group
    exists: a few two-task jobs (so that both executors run one), then a snapshot."""
    for _ in range(4):
        spark.range(0, 2, 1, 2).mapInArrow(_touch_workers, "id bigint").collect()
    return memory_snapshot()


def executor_python_growth(mem: dict, baseline: dict | None) -> list:
    """Each executor's Python workers' PSS above its baseline (``_python_baseline``), MB, largest first: what the
    executor's tasks cache.  Without a baseline, each executor's PSS."""
    base = (baseline or {}).get("executors", {})
    return sorted((v["python_pss_mb"] - base.get(label, {}).get("python_pss_mb", 0.0)
                   for label, v in mem["executors"].items()), reverse=True)


def zones_pure(rows: int, batches: list) -> dict:
    """The pure cores on the same batches, one core, no Spark: the single S-CN group (``RangeMinGroup``,
    reformulated) and two zones run one after the other in this process (``ZonedRangeMin``)."""
    import range_min as rm
    from sparksub.operators.range_min.group import RangeMinGroup
    from sparksub.operators.range_min.zones import ZonedRangeMin
    _, keys, xs, ys, stream = _zones_updates(rows, batches)
    single = RangeMinGroup("g", "stock", "risk", "per", False)
    single.load(keys, xs, ys)
    zoned = ZonedRangeMin.from_rows(keys, xs, ys, 2)
    pos = 0
    for b, _ in ZONES_WARM:
        batch = rm.group_batch(keys, xs, stream, pos, pos + b, pos)
        single.apply(batch, "reformulated")
        zoned.apply(batch)
        pos += b
    out = []
    for b, reps in batches:
        t_single, t_zoned = [], []
        for _ in range(reps):
            batch = rm.group_batch(keys, xs, stream, pos, pos + b, pos)
            t0 = time.perf_counter()
            single.apply(batch, "reformulated")
            t_single.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            zoned.apply(batch)
            t_zoned.append(time.perf_counter() - t0)
            pos += b
        out.append({"batch": b, "single_rows_per_s": b / statistics.median(t_single),
                    "zoned_rows_per_s": b / statistics.median(t_zoned)})
    return {"batches": out, "round1_fraction": zoned.stats()["round1_fraction"], "load": load_avg()}


def run_zones(args) -> int:
    """``--zones``: whole vs zoned children on ``--master``, the pure cores, merged into ``--json`` under
    ``zones`` and rendered as a section of runtime.md (+ runtime_zones.png)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    subs = args.zones_subs or ZONES_SUBS
    res = {"master": args.master, "machine": machine(), "code": code_under_test(), "load_start": load_avg(),
           "subscriptions": subs, "rows": ZONES_ROWS, "children": []}
    log(f"# zones part on {args.master}: {subs:,} subscriptions x {ZONES_ROWS:,} rows; load {res['load_start']}")
    res["pure"] = zones_pure(ZONES_ROWS, ZONES_BATCHES)
    log(f"  pure: {res['pure']}")
    for z in (0, 2):
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        proc = subprocess.run([sys.executable, __file__, "--zones-child", str(z), "--zones-subs", str(subs),
                               "--master", args.master], capture_output=True, text=True, timeout=3600, env=env)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ZONES ")), None)
        if line is None:
            res["children"].append({"zones": z, "error": (proc.stderr or proc.stdout)[-800:]})
            log(f"  zones={z} failed: {res['children'][-1]['error']}")
            continue
        res["children"].append(json.loads(line[6:]))
        log(f"  zones={z}: {res['children'][-1]['timed']}")
    res["load_end"] = load_avg()
    data = json.loads(args.json.read_text()) if args.json.exists() else {"runs": {}}
    data.setdefault("zones", {})[f"{args.master} {res['machine']['date']}"] = res
    args.json.write_text(json.dumps(data, indent=1, default=str))
    write_report(data, args.out / "runtime.md", args.out / "runtime.png")
    return 0


def _zones_section(data: dict, out_dir: Path) -> list[str]:
    L = []
    for n, (master, z) in enumerate(data.get("zones", {}).items()):
        master = z["master"]
        L.append(f"## Range groups split into X zones (issue 16 item 4; DS-CN, 000 §2.3.2) — {master}, "
                 f"{z['machine']['date']}\n")
        code = z["code"]
        code = f"{code.get('commit', '?')[:9]}{' + uncommitted changes' if code.get('dirty') else ''}"
        L.append(f"Run {z['machine']['date']} (sparksub {code}), load average {z['load_start']} at start, "
                 f"{z['load_end']} at end (2 cores shared with other work; wall clock). One RANGE_MIN group of "
                 f"{z['subscriptions']:,} subscriptions on {z['rows']:,} rows (bench/range_min.py's workload), in a "
                 f"fresh child process per configuration: *whole* = one replica run by one task (`range_zones = 0`), "
                 f"*2 zones* = `range_zones = 2` (two X zones, two x1 subscription shards; control/zones.py). After "
                 f"warm-up publishes (1K unicast, 1K reformulated), reformulated publishes + `count()`; rows/s = "
                 f"batch / median wall time. *pure*: the same batches in one process, no Spark: the single S-CN core "
                 f"(`RangeMinGroup.apply`) and the two zones one after the other (`ZonedRangeMin.apply`).\n")
        kids = {c["zones"]: c for c in z["children"] if "error" not in c}
        pure = {p["batch"]: p for p in z["pure"]["batches"]}
        rows = []
        for b, _ in ZONES_BATCHES:
            w = next((t for t in kids.get(0, {}).get("timed", []) if t["batch"] == b), None)
            t2 = next((t for t in kids.get(2, {}).get("timed", []) if t["batch"] == b), None)
            p = pure.get(b, {})
            single = p.get("single_rows_per_s")
            rows.append([f"{b:,}", fmt_num(w["rows_per_s"]) if w else "–", fmt_num(t2["rows_per_s"]) if t2 else "–",
                         fmt_num(single) if single else "–", fmt_num(p.get("zoned_rows_per_s")) if p else "–",
                         _ratio(w["rows_per_s"], single) if w and single else "–",
                         _ratio(t2["rows_per_s"], single) if t2 and single else "–"])
        L.append(md_table(["batch", "e2e whole rows/s", "e2e 2 zones rows/s", "pure single core rows/s",
                       "pure 2 zones (1 process) rows/s", "whole / pure", "2 zones / pure"], rows))
        L.append("")
        mem = []
        for zc, c in sorted(kids.items()):
            base = c.get("memory_baseline", {}).get("executors", {})
            for label, ex in sorted(c["memory"]["executors"].items()):
                b = base.get(label, {})
                mem.append(["whole" if zc == 0 else f"{zc} zones", label, str(ex["python_processes"]),
                            _mb(ex["python_rss_mb"]), _mb(ex["python_pss_mb"]),
                            _mb(b.get("python_pss_mb")) if b else "–",
                            _mb(ex["python_pss_mb"] - b["python_pss_mb"]) if b else "–"])
        L.append("Memory after the timed publishes (each executor's Python workers, from /proc; PSS counts shared "
                 "pages once). *Baseline*: the same executor's Python PSS after the session started and a few "
                 "two-task jobs had started its workers and imported sparksub's runtime, before any group existed; "
                 "*above baseline* is what the group's state (and the tasks' transient buffers) adds:\n")
        L.append(md_table(["configuration", "executor", "Python processes", "Python RSS", "Python PSS",
                           "baseline PSS", "PSS above baseline"], mem))
        L.append("")
        for zc, c in sorted(kids.items()):
            what = (f"rows per zone {c['zone_rows']} (cut at X = {[round(x, 1) for x in c.get('cuts', [])]}), "
                    f"subscriptions per shard {c['shard_subscriptions']}, zone tasks {c.get('zone_tasks')}, round 1 "
                    f"settled {c['round1_fraction']:.1%} of the updates" if zc else
                    f"one replica: {c['zone_rows'][0]:,} rows and {c['shard_subscriptions'][0]:,} subscriptions")
            L.append(f"* **{'whole' if zc == 0 else f'{zc} zones'}**: {what}; worker cache over the timed publishes "
                     f"{c['cache']}; warm-up {[round(w['s'], 1) for w in c['warm']]} s.")
        for c in z["children"]:
            if "error" in c:
                L.append(f"* zones={c['zones']} failed: `{c['error'][-300:]}`")
        stages = [(zc, t["batch"], s) for zc, c in kids.items() for t in c.get("timed", [])
                   for s in t.get("zone_stages_s", [])]
        if stages:
            L.append("* **2 zones, wall seconds per stage** of each timed publish (round 1: the Spark job + collecting "
                     "the records; round 2: on the driver, with writing the files; output: the merge job, computing "
                     "the checkpoint): " + "; ".join(
                         f"{b:,}: {s['round1_job_s']:.2f} / {s['round2_driver_s']:.2f} / {s['output_job_s']:.2f}"
                         for _, b, s in stages) + ".")
        for note in z.get("notes", []):
            L.append(f"* {note}")
        name = "runtime_zones.png" if n == 0 else f"runtime_zones_{n}.png"
        L.append(f"\n![zones vs whole]({name})\n")
        _plot_zones(z, out_dir / name)
    return L


def _plot_zones(z: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kids = {c["zones"]: c for c in z["children"] if "error" not in c}
    fig, (a, m) = plt.subplots(1, 2, figsize=(11, 4))
    bs = [b for b, _ in ZONES_BATCHES]
    xs = np.arange(len(bs))
    series = [("e2e whole", [next((t["rows_per_s"] for t in kids.get(0, {}).get("timed", []) if t["batch"] == b), 0)
                             for b in bs]),
              ("e2e 2 zones", [next((t["rows_per_s"] for t in kids.get(2, {}).get("timed", []) if t["batch"] == b), 0)
                               for b in bs]),
              ("pure single core", [p["single_rows_per_s"] for p in z["pure"]["batches"]]),
              ("pure 2 zones, 1 process", [p["zoned_rows_per_s"] for p in z["pure"]["batches"]])]
    for i, (name, v) in enumerate(series):
        a.bar(xs + (i - 1.5) * 0.2, v, 0.2, label=name)
    a.set_xticks(xs, [f"{b:,}" for b in bs])
    a.set_xlabel("batch (updates)")
    a.set_ylabel("rows/s (reformulated)")
    a.legend(fontsize=8, loc="upper left")
    a.set_title(f"RANGE_MIN, {z['rows']:,} rows, {z['subscriptions']:,} subscriptions")
    labels, rss = [], []
    for zc, c in sorted(kids.items()):
        for label, ex in sorted(c["memory"]["executors"].items()):
            labels.append(f"{'whole' if zc == 0 else f'{zc} zones'}\n{label.replace('executor JVM ', 'exec ')}")
            rss.append(ex["python_pss_mb"])
    m.bar(range(len(rss)), rss)
    m.set_xticks(range(len(rss)), labels, fontsize=7)
    m.set_ylabel("Python PSS per executor (MB)")
    m.set_title(z["master"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller tables, batches 1K / 10K, few reps")
    ap.add_argument("--large", action="store_true",
                    help="the full run's sizes, batches of 10K and 100K only (the previous runtime comparison)")
    ap.add_argument("--connect", action="store_true",
                    help="on a Spark Connect session (SparkSession.builder.remote(MASTER): a local Connect server)")
    ap.add_argument("--master", default="local[2]", help=f"Spark master (default local[2]; or '{CLUSTER}')")
    ap.add_argument("--pause", type=float, default=None,
                    help="idle seconds before 2 of the 20 warm publishes (default: 90 full, 0 with --quick)")
    ap.add_argument("--baseline", type=Path, help="JSON of the previous runtime: adds its figures and ratios")
    ap.add_argument("--json", type=Path, default=OUT_DIR / "runtime.json",
                    help="the JSON to merge this run into (default docs/benchmarks/runtime.json)")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="where runtime.md / runtime.png go")
    ap.add_argument("--only", nargs="*", help="run only these classes (substring match), for development")
    ap.add_argument("--skip", nargs="*", default=[], choices=["stream", "rss", "zero"], help="skip parts")
    ap.add_argument("--zero-only", action="store_true",
                    help="only the zero-rebuild check, on fresh engines, merged into this label's run in --json")
    ap.add_argument("--render-only", action="store_true", help="rewrite runtime.md / runtime.png from --json")
    ap.add_argument("--render-large", type=Path, metavar="JSON",
                    help="write runtime_large.md / runtime_large.png (now vs the --baseline run) from a --large run's JSON")
    ap.add_argument("--smoke", "--tiny", dest="tiny", action="store_true",
                    help="toy sizes, every part: checks the script runs (its figures mean nothing)")
    ap.add_argument("--zones", action="store_true",
                    help="only the zones part (issue 16 item 4): a 1M-subscription group whole vs in 2 X zones")
    ap.add_argument("--zones-subs", type=int, default=None, help="subscriptions of the zones part (default 1M)")
    ap.add_argument("--zones-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rss-rows", type=int, default=100_000, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.zones_child is not None:
        print("ZONES " + json.dumps(zones_child(args.master, args.zones_subs or ZONES_SUBS, ZONES_ROWS,
                                                args.zones_child, ZONES_BATCHES), default=str), flush=True)
        return 0
    if args.zones:
        return run_zones(args)
    if args.rss_child:
        print("RSS " + json.dumps(rss_child(args.master, args.rss_child, args.rss_rows, args.connect)), flush=True)
        return 0
    sizes = TINY if args.tiny else QUICK if args.quick else LARGE if args.large else FULL
    pause = args.pause if args.pause is not None else (0.0 if args.quick else 90.0)
    if args.render_large:
        write_large_comparison(json.loads(args.render_large.read_text()),
                               json.loads(args.baseline.read_text()) if args.baseline else None, args.out)
        return 0
    if args.render_only:
        write_report(json.loads(args.json.read_text()), args.out / "runtime.md", args.out / "runtime.png")
        return 0
    if args.zero_only:
        return zero_only(args, sizes, pause)
    started = time.perf_counter()
    info = machine()
    label = run_label(args.master, args.quick, args.connect, args.tiny, args.large)
    code = code_under_test()
    run = {"label": label, "master": args.master, "quick": args.quick, "connect": args.connect, "machine": info,
           "code": code,
           "argv": " ".join(sys.argv[1:]), "load_start": load_avg(), "sizes": sizes.__dict__, "notes": []}
    log(f"# runtime benchmark ({label}) — {info['date']}; sparksub {code}; load {run['load_start']}")
    work = Path(tempfile.mkdtemp(prefix="sparksub-bench-runtime-"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        n_updates = (1_000 + sum(b * r for b, r in sizes.batches) + sizes.fixed_reps
                     + max([sum(b * r for b, r in x) for x in sizes.extra_batches.values()] or [0])
                     + 1_000 * (ZERO_REBUILD_PUBLISHES + 1) + sizes.stream_batch * sizes.stream_batches + 1_000)
        log(f"building workloads ({n_updates:,} updates per class) ...")
        benches = make_benches(sizes, n_updates, args.only)
        t0 = time.perf_counter()
        spark = _session(args.master, "sparksub-bench-runtime", args.connect)
        run["spark_start_s"] = time.perf_counter() - t0
        run["worker_code"] = worker_code_path(spark)
        log(f"SparkSession {args.master} in {run['spark_start_s']:.1f} s; workers import {run['worker_code']}")
        if args.master.startswith("local-cluster"):
            run["executors"] = {k: v["jvm"] for k, v in spark_processes()["executors"].items()}
        # ---- publish
        run["publish"], live = [], []
        for b in benches:
            log(f"\n## {b.name}: publish (load {load_avg()})")
            try:
                res, e, cur = publish_part(spark, b, sizes)
            except Exception as err:  # noqa: BLE001 - a class that fails is reported; the others go on
                msg = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
                log(f"  {b.name}: publish failed: {msg}")
                run["notes"].append(f"{b.name} (publish failed: {msg})")
                continue
            run["publish"].append(res)
            live.append((b, e, cur))
        # ---- zero rebuilds
        if "zero" not in args.skip:
            log(f"\n## zero-rebuild check ({ZERO_REBUILD_PUBLISHES} warm publishes per class, pause {pause:.0f} s)")
            run["zero_rebuild"] = zero_rebuild_part(live, pause)
        # ---- stream
        if "stream" not in args.skip:
            run["stream"] = []
            for b, e, cur in live:
                log(f"\n## {b.name}: stream (load {load_avg()})")
                run["stream"].append(stream_part(spark, b, e, cur, sizes, work))
        live.clear()
        spark.stop()
        # ---- memory
        if "rss" not in args.skip:
            log(f"\n## memory ({args.master})")
            run["rss"] = run_rss_children(args.master, sizes, args.connect)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run["load_end"] = load_avg()
    run["elapsed_s"] = time.perf_counter() - started
    if args.quick:
        run["notes"].append("batches of 100K but for " + ", ".join(sizes.extra_batches) if sizes.extra_batches
                            else "batches of 100K (full run only)")
    if pause <= 0:
        run["notes"].append("the 90 s idle-worker case (no --pause)")
    if any(p["stats_rebuild_counter"] == "not exposed" for p in run["publish"]):
        run["notes"].append("a rebuild counter from engine.stats() (engine.stats()['runtime'] did not answer)")
    # ---- previous runtime
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    prev = _prev_run(baseline, label, args.master)
    if prev is not None:
        run["previous"] = {k: prev.get(k) for k in ("publish", "stream", "zero_rebuild", "rss", "code", "machine",
                                                     "load_start", "label", "sizes")}
        run["previous_source"] = str(args.baseline)
    elif args.baseline:
        run["notes"].append(f"no run for {args.master} in {args.baseline}")
    data = json.loads(args.json.read_text()) if args.json.exists() else {"runs": {}}
    data["runs"][label] = run
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1, default=str))
    args.out.mkdir(parents=True, exist_ok=True)
    write_report(data, args.out / "runtime.md", args.out / "runtime.png")
    log(f"\nload average at end {run['load_end']}; total {run['elapsed_s'] / 60:.1f} min; wrote {args.json}, "
        f"{args.out / 'runtime.md'}, {args.out / 'runtime.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
