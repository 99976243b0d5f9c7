#!/usr/bin/env python
"""Range-MIN benchmark: S-CN (reformulated) vs S-UN (unicast) vs CN-relax vs plain Spark SQL, and the five
interfaces of 000 §2 side by side (S-UN, S-MN, CN, CN+, S-CN: messages and bytes).

Reproduces the server-side experiments of 000 / dissertation §5.5 (digest C.11: Table 5.1's workload,
Tables 5.2 / 5.3's messages per update) with this project's operators, beside what a user would do
without sparksub (a Spark SQL range join recomputing the minima per batch), in one run::

    python bench/range_min.py            # full run (~8 min on a quiet 2-core machine)
    python bench/range_min.py --quick    # smaller windows, fewer Spark batches (~3 min)
    python bench/range_min.py --interfaces-only   # part 4 alone, spliced into the existing report (~3 min)

Writes ``docs/benchmarks/range_min.md`` (tables + notes) and ``docs/benchmarks/range_min.png`` and prints
the same figures, with PASS/FAIL per target. See ``bench/README.md`` for what each figure means.

Workload (000 Table 1 / dissertation Table 5.1), all with fixed seeds:

* X (RISK) and Y (PER) domains [0, 10000]; objects uniform over the domain (float X, so X values are
  distinct and every update is non-ignorable, as in the paper's server-side runs);
* subscriptions ``MIN(per) WHERE risk BETWEEN lo AND hi``: midpoint ~ N(5000, 1500), length ~ |N(1000, 1000)|,
  both ends clipped into [0, 10000];
* updates: pick an object uniformly, random-walk its Y by N(0, 50), kept in the domain by *reflection* at
  0 and 10000 (not clipping: a clipped walk piles probability mass on exactly Y = 0, an atom that grows during
  the run, ties every nearby range's minimum at 0 and lets no spike lower it; the reflected walk keeps the
  initial uniform distribution stationary, the paper's "converges to a stationary distribution"); with
  probability 0.5% the update is a *spike* instead: Y drops to U(0, 0.01) (below every other object's Y, in
  practice) and the object's *next* update bounces it back to its old Y.  That next update is scheduled
  1-100 updates later (uniform), or earlier if the object is drawn again first; otherwise, with far fewer
  updates than objects per window, most spikes would never bounce inside the window.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the pure-operator figures are for one core

import argparse
import gc
import heapq
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from common import fmt_num, load_avg, log, machine, md_table

from sparksub.operators.range_min.cn_plus import CN_PLUS_MESSAGE_BYTES, DIAGONAL_QUERY_BYTES, CnPlusNetwork
from sparksub.operators.range_min.delivery import (MESSAGE_BYTES, MULTICAST_FANOUT, UNICAST_ROW_BYTES,
                                                   SubscriptionPoints, multicast_bytes, multicast_groups,
                                                   multicast_tree_bytes)
from sparksub.operators.range_min.group import RangeMinGroup

DOMAIN = 10_000.0
SEED_OBJECTS, SEED_SUBS, SEED_UPDATES = 11, 22, 33
SPIKE_RATE = 0.005
WALK_SIGMA = 50.0
SPIKE_LOW = 0.01
BOUNCE_MAX_DELAY = 100
#: Bytes of one CN-relax delivery: the raw update (X, new Y as float64, seq as int64) = 3 * 8.
CN_UPDATE_BYTES = 3 * 8
TEMPLATE = "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi"
MODES = ("reformulated", "unicast", "cn_relax")
LABEL = {"reformulated": "reformulated (S-CN)", "unicast": "unicast (S-UN)", "cn_relax": "CN-relax"}

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"


# ---------------------------------------------------------------------------------------- workload
def make_objects(n: int, seed: int = SEED_OBJECTS):
    r = np.random.default_rng(seed)
    keys = np.array([f"s{i}" for i in range(n)], dtype=object)
    return keys, r.uniform(0.0, DOMAIN, n), r.uniform(0.0, DOMAIN, n)


def make_subscriptions(m: int, seed: int = SEED_SUBS):
    r = np.random.default_rng(seed)
    mid = r.normal(5000.0, 1500.0, m)
    length = np.abs(r.normal(1000.0, 1000.0, m))
    lo = np.clip(mid - length / 2, 0.0, DOMAIN)
    hi = np.clip(mid + length / 2, 0.0, DOMAIN)
    ids = np.array([f"q{i}" for i in range(m)], dtype=object)
    return ids, lo, hi


@dataclass
class Stream:
    obj: np.ndarray     # object index per update
    y: np.ndarray       # new Y per update
    kind: np.ndarray    # 0 walk, 1 spike, 2 bounce

    def __len__(self) -> int:
        return int(self.obj.size)


def make_updates(ys0: np.ndarray, n: int, seed: int = SEED_UPDATES) -> Stream:
    """The update stream (see the module docstring); X never changes."""
    r = np.random.default_rng(seed)
    n_obj = ys0.size
    y = ys0.copy()
    pick = r.integers(0, n_obj, n)
    step = r.normal(0.0, WALK_SIGMA, n)
    spike = r.random(n) < SPIKE_RATE
    low = r.uniform(0.0, SPIKE_LOW, n)
    delay = r.integers(1, BOUNCE_MAX_DELAY + 1, n)
    pending: dict[int, float] = {}          # spiked object -> its Y before the spike
    due: list[tuple[int, int]] = []         # heap of (time, object) bounce slots
    out_obj = np.empty(n, np.int64)
    out_y = np.empty(n)
    out_kind = np.zeros(n, np.int8)
    for t in range(n):
        i = -1
        while due and due[0][0] <= t:
            _, j = heapq.heappop(due)
            if j in pending:                # not bounced yet by an earlier draw
                i = j
                break
        if i < 0:
            i = int(pick[t])
        if i in pending:
            y[i] = pending.pop(i)
            out_kind[t] = 2
        elif spike[t]:
            pending[i] = y[i]
            y[i] = low[t]
            heapq.heappush(due, (t + int(delay[t]), i))
            out_kind[t] = 1
        else:
            y[i] = _reflect(y[i] + step[t])
        out_obj[t] = i
        out_y[t] = y[i]
    return Stream(out_obj, out_y, out_kind)


def _reflect(v: float) -> float:
    if v < 0.0:
        v = -v
    if v > DOMAIN:
        v = 2 * DOMAIN - v
    return min(max(v, 0.0), DOMAIN)  # a step larger than the domain (never, at sigma 50) is clipped


def group_batch(keys, xs, stream: Stream, lo: int, hi: int, seq0: int = 0) -> pa.Table:
    """Updates lo..hi-1 of the stream as a RangeMinGroup batch (key, x, y, op, seq)."""
    o = stream.obj[lo:hi]
    return pa.table({
        "key": pa.array(keys[o].tolist(), pa.string()),
        "x": pa.array(xs[o], pa.float64()),
        "y": pa.array(stream.y[lo:hi], pa.float64()),
        "op": pa.array(np.zeros(hi - lo, np.int8), pa.int8()),
        "seq": pa.array(np.arange(seq0 + lo, seq0 + hi, dtype=np.int64), pa.int64()),
    })


def stock_batch(keys, xs, stream: Stream, lo: int, hi: int) -> pa.Table:
    """Updates lo..hi-1 as rows of the user's ``stock(symbol, risk, per)`` table."""
    o = stream.obj[lo:hi]
    return pa.table({"symbol": pa.array(keys[o].tolist(), pa.string()),
                     "risk": pa.array(xs[o], pa.float64()), "per": pa.array(stream.y[lo:hi], pa.float64())})


# ---------------------------------------------------------------------------------------- helpers
def fmt_int(v) -> str:
    return f"{v:,.0f}"


def fmt_ratio(v) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    if v >= 100:
        return f"{v:,.0f}x"
    if v >= 1:
        return f"{v:.1f}x"
    if v >= 0.01:
        return f"{v:.3f}x"
    return f"{v:.2e}x"


# ---------------------------------------------------------------------------------------- part 1
@dataclass
class ModeResult:
    mode: str
    window_ups: list[float]               # updates/s per consecutive window (wall clock)
    window_cpu_ups: list[float]           # updates per CPU-second of this process, per window
    updates: int
    server_messages: int                  # messages (S-CN), rows (S-UN), updates sent (CN-relax)
    deliveries: int                       # subscriptions reached (S-CN matches = S-UN rows; CN: all containing)
    bytes: int
    mix: dict = field(default_factory=dict)

    @property
    def ups(self) -> float:
        return statistics.median(self.window_ups)

    @property
    def cpu_ups(self) -> float:
        return statistics.median(self.window_cpu_ups)

    @property
    def msgs_per_update(self) -> float:
        return self.server_messages / self.updates

    @property
    def deliveries_per_update(self) -> float:
        return self.deliveries / self.updates

    @property
    def bytes_per_update(self) -> float:
        return self.bytes / self.updates


@dataclass
class Setup:
    keys: np.ndarray
    xs: np.ndarray
    ys: np.ndarray
    points: SubscriptionPoints
    batches: list            # the stream's consecutive windows, as group batches


def run_modes(setups: dict, windows: int) -> dict:
    """Every mode on every setup: a fresh copy of the initial table per (setup, mode), the same stream,
    timed per consecutive window.  Windows are interleaved across setups (window 1 of every setup, then
    window 2, ...) so that a load change on a shared machine hits every setup alike, not just one."""
    results = {c: {} for c in setups}
    for mode in MODES:
        groups = {}
        for c, su in setups.items():
            g = RangeMinGroup("bench", "stock", "risk", "per", False)
            g.points = su.points   # apply() only reads the subscription index: the modes share one copy
            g.load(su.keys, su.xs, su.ys)
            groups[c] = g
        ups = {c: [] for c in setups}
        cpu = {c: [] for c in setups}
        rows = dict.fromkeys(setups, 0)
        gc.collect()
        for w in range(windows):
            for c, su in setups.items():
                b = su.batches[w]
                t0, c0 = time.perf_counter(), time.process_time()
                out = groups[c].apply(b, mode)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                ups[c].append(b.num_rows / dt)
                cpu[c].append(b.num_rows / max(dc, 1e-9))
                rows[c] += out.num_rows
        for c, g in groups.items():
            n = sum(b.num_rows for b in setups[c].batches)
            cnt = g.core.counters
            mix = {k: cnt[k] for k in ("ignorable", "good", "bad")}
            if mode == "reformulated":
                r = ModeResult(mode, ups[c], cpu[c], n, cnt["messages"], -1, cnt["messages"] * MESSAGE_BYTES, mix)
            elif mode == "unicast":
                r = ModeResult(mode, ups[c], cpu[c], n, rows[c], rows[c], rows[c] * UNICAST_ROW_BYTES, mix)
            else:
                d = g.counters["cn_relax_deliveries"]
                r = ModeResult(mode, ups[c], cpu[c], n, n, d, d * CN_UPDATE_BYTES, mix)
            results[c][mode] = r
        del groups
        gc.collect()
    for r in results.values():
        # a subscription matches at most one reformulated message per step (Theorems 16/17), so the
        # subscriptions the S-CN messages reach are exactly the S-UN rows
        r["reformulated"].deliveries = r["unicast"].deliveries
    return results


def windows_of(keys, xs, stream: Stream, windows: int) -> list:
    edges = np.linspace(0, len(stream), windows + 1).astype(int)
    return [group_batch(keys, xs, stream, int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


# ---------------------------------------------------------------------------------------- part 2
def spark_sql_baseline(spark, keys, xs, ys, sub_ids, lo, hi, stream: Stream, batch: int,
                       warmup: int, timed: int) -> dict:
    """What a user would do without sparksub: per batch of updates, find the candidate subscriptions with a
    range join, recompute their minima with a range join + GROUP BY against the updated table, and compare
    with the previous minima."""
    spark.createDataFrame(pa.table({"symbol": keys.astype(str), "risk": xs, "per": ys})) \
        .localCheckpoint().createOrReplaceTempView("stock")
    spark.createDataFrame(pa.table({"id": sub_ids.astype(str), "lo": lo, "hi": hi})) \
        .cache().createOrReplaceTempView("subs")
    spark.table("subs").count()
    t0 = time.perf_counter()
    prev = spark.sql("SELECT s.id, MIN(st.per) AS m FROM subs s LEFT JOIN stock st "
                     "ON st.risk BETWEEN s.lo AND s.hi GROUP BY s.id").localCheckpoint()
    prev.createOrReplaceTempView("prev")
    initial_s = time.perf_counter() - t0
    times, cands, changes = [], [], []
    for b in range(warmup + timed):
        a, z = b * batch, (b + 1) * batch
        o = stream.obj[a:z]
        t0 = time.perf_counter()
        # X never moves in this workload, but the query handles a moved X (old_risk) as a user would have to
        spark.createDataFrame(pa.table({
            "symbol": keys[o].astype(str), "old_risk": xs[o], "risk": xs[o], "per": stream.y[a:z],
            "seq": np.arange(a, z, dtype=np.int64)})).createOrReplaceTempView("updates")
        spark.sql("""SELECT st.symbol, COALESCE(l.risk, st.risk) AS risk, COALESCE(l.per, st.per) AS per
                     FROM stock st LEFT JOIN (SELECT symbol, max_by(risk, seq) AS risk, max_by(per, seq) AS per
                                              FROM updates GROUP BY symbol) l ON st.symbol = l.symbol""") \
            .localCheckpoint().createOrReplaceTempView("stock")
        spark.sql("""SELECT DISTINCT s.id, s.lo, s.hi FROM subs s JOIN updates u
                     ON (u.risk BETWEEN s.lo AND s.hi) OR (u.old_risk BETWEEN s.lo AND s.hi)""") \
            .createOrReplaceTempView("cand")
        new = spark.sql("SELECT c.id, MIN(st.per) AS m FROM cand c LEFT JOIN stock st "
                        "ON st.risk BETWEEN c.lo AND c.hi GROUP BY c.id").localCheckpoint()
        new.createOrReplaceTempView("new")
        n_changes = spark.sql("SELECT n.id FROM new n JOIN prev p ON n.id = p.id "
                              "WHERE NOT (n.m <=> p.m)").count()
        prev = spark.sql("SELECT p.id, COALESCE(n.m, p.m) AS m FROM prev p LEFT JOIN new n "
                         "ON p.id = n.id").localCheckpoint()
        prev.createOrReplaceTempView("prev")
        dt = time.perf_counter() - t0
        n_cand = new.count()
        if b >= warmup:
            times.append(dt)
            cands.append(n_cand)
            changes.append(n_changes)
    med = statistics.median(times)
    return {"objects": keys.size, "subs": sub_ids.size, "batch": batch, "warmup": warmup, "timed": timed,
            "initial_s": initial_s, "batch_s": times, "median_s": med, "ups": batch / med,
            "candidates": statistics.median(cands), "changes": statistics.median(changes)}


def operator_batches(keys, xs, ys, sub_ids, lo, hi, stream: Stream, batch: int, warmup: int, timed: int,
                     mode: str) -> dict:
    """Our pure operator on the Spark SQL baseline's workload and batches (one core, no Spark)."""
    g = RangeMinGroup("bench", "stock", "risk", "per", False)
    g.register(sub_ids, lo, hi)
    g.load(keys, xs, ys)
    times, rows = [], 0
    for b in range(warmup + timed):
        bt = group_batch(keys, xs, stream, b * batch, (b + 1) * batch)
        t0 = time.perf_counter()
        out = g.apply(bt, mode)
        dt = time.perf_counter() - t0
        if b >= warmup:
            times.append(dt)
            rows += out.num_rows
    med = statistics.median(times)
    return {"mode": mode, "median_s": med, "ups": batch / med, "rows_per_update": rows / (timed * batch)}


def engine_publish(spark, keys, xs, ys, sub_ids, lo, hi, stream: Stream, plan: list[tuple[int, int, int]],
                   mode: str) -> list[dict]:
    """Engine.publish (our operator inside Spark tasks). ``plan``: (batch size, warm-up batches, timed)."""
    from sparksub.engine import Engine

    e = Engine(spark)
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", pa.table({"symbol": keys.astype(str), "risk": xs, "per": ys}))
    e.subscribe_many(TEMPLATE, {"id": sub_ids.astype(str), "lo": lo, "hi": hi})
    pos, out, first = 0, [], None
    for size, warmup, timed in plan:
        times, rows = [], 0
        for b in range(warmup + timed):
            upd = stock_batch(keys, xs, stream, pos, pos + size)
            pos += size
            t0 = time.perf_counter()
            n = e.publish("stock", upd, mode).count()
            dt = time.perf_counter() - t0
            if first is None:
                first = dt
            if b >= warmup:
                times.append(dt)
                rows += n
        med = statistics.median(times)
        out.append({"mode": mode, "batch": size, "batch_s": times, "median_s": med, "ups": size / med,
                    "rows_per_update": rows / (timed * size), "first_call_s": first})
    return out


# ---------------------------------------------------------------------------------------- part 3
def registration(n_subs: int, reps: int) -> dict:
    from sparksub.engine import Engine

    ids, lo, hi = make_subscriptions(n_subs)
    ids = ids.astype(str)
    times = []
    for _ in range(reps):
        e = Engine()  # no SparkSession is created: registration is driver-side only
        e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
        gc.collect()
        t0 = time.perf_counter()
        n = e.subscribe_many(TEMPLATE, {"id": ids, "lo": lo, "hi": hi})
        times.append(time.perf_counter() - t0)
        assert n == n_subs and e._spark is None
        del e
    return {"subs": n_subs, "times": times, "median_s": statistics.median(times)}


# ---------------------------------------------------------------------------------------- part 4
#: the five interfaces of 000 §2, in the order of its conclusion's table
INTERFACES = ("S-UN", "S-MN", "CN", "CN+", "S-CN")
IF_LABEL = {"S-UN": "S-UN (unicast)", "S-MN": "S-MN (multicast, 000 §2.1.2)", "CN": "CN (CN-relax, §2.2.1)",
            "CN+": "CN+ (cutoff routing, §2.2.2)", "S-CN": "S-CN (reformulated, §2.3.1)"}
#: 000 §7's table (network traffic, subscriber state), for the report
PAPER_TRAFFIC = {"S-UN": ("Very high", "None"), "S-MN": ("Very high", "None"), "CN": ("High", "High"),
                 "CN+": ("Medium", "Medium"), "S-CN": ("Low", "Low")}
IF_MARK_BEGIN, IF_MARK_END = "<!-- interfaces:begin -->", "<!-- interfaces:end -->"
#: S-MN's hierarchy spans the overlay nodes hosting the subscriptions: 000 §5 has 1,000 (and c = 10)
GATEWAYS = 1_000


def run_interfaces(configs, n_updates: int, windows: int = 3) -> dict:
    """Every interface of 000 §2 on the same stream (per configuration), counted (part 4).

    S-CN, S-UN, S-MN: one pass of ``RangeMinGroup.apply(..., 'reformulated')``; its messages matched to the
    subscriptions give S-UN's rows and S-MN's messages (``delivery.multicast_groups``: S-UN's rows grouped by
    (update, new value), 000 §2.1.2) and their bytes over a fan-out-10 hierarchy (``multicast_tree_bytes``).
    CN and CN+: one pass of ``apply(..., 'cn_plus')``, each update routed by CN+'s network in counting mode
    (``cn_plus.CnPlusNetwork(keep_state=False)``: reached subscriptions, cutoffs, diagonal queries; CN's
    deliveries are its ``stabbed``, every range holding X)."""
    out = {}
    for n_obj, n_sub in configs:
        keys, xs, ys = make_objects(n_obj)
        stream = make_updates(ys, n_updates)
        lo_hi = make_subscriptions(n_sub)
        pts = SubscriptionPoints()
        pts.add(*lo_hi)
        batches = windows_of(keys, xs, stream, windows)
        t0 = time.perf_counter()
        g = RangeMinGroup("bench", "stock", "risk", "per", False)
        g.points = pts
        g.load(keys, xs, ys)
        scn = smn = targets = tree = 0
        for b in batches:
            m = g.apply(b, "reformulated")
            scn += m.num_rows
            seq, _, _, starts, sl = multicast_groups(pts, m)
            smn += int(seq.size)
            targets += int(sl.size)
            tree += sum(multicast_tree_bytes(sl[a:z], n_sub, gateways=GATEWAYS)
                        for a, z in zip(starts[:-1].tolist(), starts[1:].tolist()))
        s_time = time.perf_counter() - t0
        t0 = time.perf_counter()
        g2 = RangeMinGroup("bench", "stock", "risk", "per", False)
        g2.points = pts
        g2.load(keys, xs, ys)
        net = CnPlusNetwork(pts, keep_state=False)
        net.load(keys, xs, ys)
        for b in batches:
            m = g2.apply(b, "cn_plus")
            for k, x, y in zip(m.column("item_key").to_pylist(), m.column("inner_l").to_pylist(),
                               m.column("new_value").to_pylist()):
                net.route(k, x, y)
        cn_time = time.perf_counter() - t0
        sx = np.sort(xs)
        in_range = np.searchsorted(sx, lo_hi[2], "right") - np.searchsorted(sx, lo_hi[1], "left")
        out[(n_obj, n_sub)] = {"updates": n_updates, "scn_messages": scn, "smn_messages": smn, "targets": targets,
                               "tree_bytes": tree, "cn": dict(net.counters), "tuples_per_range": float(in_range.mean()),
                               "s_time": s_time, "cn_time": cn_time, "mix": dict(g.core.counters)}
        log(f"{n_obj:>9,} objects x {n_sub:>9,} subs ({n_updates:,} updates): S-CN {scn / n_updates:.2f} msg/upd, "
            f"S-UN {targets / n_updates:,.1f} rows/upd, S-MN {smn / n_updates:.3f} msg/upd "
            f"({multicast_bytes(smn, targets) / n_updates:,.0f} B/upd), CN {net.counters['stabbed'] / n_updates:,.0f} "
            f"deliv/upd, CN+ {net.counters['deliveries'] / n_updates:,.1f} deliv/upd "
            f"({net.counters['cutoffs'] / n_updates:.2f} cutoffs, {net.counters['queries'] / n_updates:,.1f} "
            f"queries); {s_time:.1f} s + {cn_time:.1f} s")
    return out


def interface_rows(r: dict) -> tuple[dict, int]:
    """Per interface: server messages, server bytes, subscriptions reached, and the traffic beyond that only
    it has (S-MN: over its hierarchy; CN+: its diagonal queries), totals over the run; and the run's updates."""
    c = r["cn"]
    aff = r["targets"]
    return {
        "S-UN": (aff, aff * UNICAST_ROW_BYTES, aff, None),
        "S-MN": (r["smn_messages"], multicast_bytes(r["smn_messages"], aff), aff, r["tree_bytes"]),
        "CN": (c["messages"], c["messages"] * CN_UPDATE_BYTES, c["stabbed"], None),
        "CN+": (c["messages"], c["messages"] * CN_PLUS_MESSAGE_BYTES, c["deliveries"],
                c["queries"] * DIAGONAL_QUERY_BYTES),
        "S-CN": (r["scn_messages"], r["scn_messages"] * MESSAGE_BYTES, aff, None),
    }, r["updates"]


def interfaces_section(info: dict, res: dict, n_updates: int, quick: bool, only: bool) -> str:
    L = [IF_MARK_BEGIN, "## 4. The interfaces of 000 §2: S-UN, S-MN, CN, CN+, S-CN\n"]
    if only:
        L.append(f"Generated by `python bench/range_min.py --interfaces-only{' --quick' if quick else ''}` on "
                 f"{info['date']} (load average {info['load_start']} at start, {info.get('load_end', '?')} at "
                 f"end); the rest of this report is from the run named at the top.\n")
    L.append(f"Counted, not timed: the workload of part 1 (fresh seeds' stream of {n_updates:,} updates per "
             f"configuration, 0.5% spikes), every interface on the same updates. **S-CN** sends the reformulated "
             f"messages ({MESSAGE_BYTES} B); **S-UN** one row per affected subscription ({UNICAST_ROW_BYTES} B); "
             f"**S-MN** one multicast message per (update, new value) -- S-UN's rows grouped by update message, "
             f"000 §2.1.2 -- listing its subscriptions (16 B + 8 B per subscription), carried over a hierarchy of "
             f"application-level multicasts of fan-out {MULTICAST_FANOUT} (000 §5: c = 10) whose every hop "
             f"carries the subscriptions below it; **CN** relays the raw update ({CN_UPDATE_BYTES} B) to every "
             f"range holding its X; **CN+** routes the raw update with its cutoff point ({CN_PLUS_MESSAGE_BYTES} B) "
             f"to the affected subscriptions plus those that cut it off (their witness: 000 §2.2.2's cutoff "
             f"property), and the subscribers whose minimum rose or left ask the network's copy of the table "
             f"for their new one ({DIAGONAL_QUERY_BYTES} B per diagonal query: the increasing updates 000 left "
             f"out). Server messages / bytes: what the server injects (CN, CN+: no server -- the update enters the "
             f"network at its event point, counted as one message). Subscriptions reached: the deliveries (for "
             f"S-CN and S-MN exactly the affected ones, 000 Theorem 1). S-MN's hierarchy spans {GATEWAYS:,} "
             f"overlay nodes (the subscriptions spread over them by slot, as 000 §5's 1,000 nodes). The paper's "
             f"traffic counts bytes between overlay nodes, subscriptions at their CAN zone's owner; CAN zones and "
             f"routing hops are not modelled here, so compare down a column, not across.\n")
    rows = []
    for cfg, r in res.items():
        vals, n = interface_rows(r)
        for name in INTERFACES:
            msgs, sbytes, reached, extra = vals[name]
            state = {"CN": f"{r['tuples_per_range']:,.0f} tuples", "CN+": "1 tuple (+ the table in the network)"
                     }.get(name, "1 value")
            more = {"S-MN": "over the hierarchy", "CN+": "diagonal queries"}.get(name)
            rows.append([f"{cfg[0]:,}", f"{cfg[1]:,}", IF_LABEL[name], fmt_num(msgs / n), fmt_num(sbytes / n),
                         fmt_num(reached / n), f"{fmt_num(extra / n)} ({more})" if more else "-", state,
                         " / ".join(PAPER_TRAFFIC[name])])
    L.append(md_table(["objects", "subscriptions", "interface", "server messages/update", "server bytes/update",
                       "subscriptions reached/update", "more bytes/update", "kept per subscriber",
                       "paper (000 §7): traffic / subscriber state"], rows) + "\n")
    rows = []
    for cfg, r in res.items():
        c = r["cn"]
        n = r["updates"]
        nd = max(c["messages_decreasing"], 1)
        aff_d = c["deliveries_decreasing"] - c["cutoffs_decreasing"]
        red = 1 - c["deliveries_decreasing"] / max(c["stabbed_decreasing"], 1)
        rows.append([f"{cfg[0]:,}", f"{cfg[1]:,}", f"{c['messages_decreasing']:,} of {c['messages']:,}",
                     fmt_num(c["stabbed_decreasing"] / nd), fmt_num(c["deliveries_decreasing"] / nd),
                     f"{100 * red:.2f}%", f"{100 * c['cutoffs_decreasing'] / max(aff_d, 1):.2f}%",
                     fmt_num(c["cutoffs"] / n), fmt_num(c["queries"] / max(c["messages"] - c["messages_decreasing"], 1)),
                     f"{100 * r['smn_messages'] / max(r['scn_messages'], 1):.1f}%",
                     f"{r['tree_bytes'] / max(multicast_bytes(r['smn_messages'], r['targets']), 1):.1f}x"])
    L.append("CN+ on the decreasing updates (what 000 §5 measured it on), and S-MN against S-CN:\n")
    L.append(md_table(["objects", "subscriptions", "decreasing updates", "CN deliveries/update",
                       "CN+ deliveries/update", "CN+ traffic saved over CN (paper: > 98%)",
                       "CN+ reached beyond the affected, as % of S-CN's (paper: ~2%)", "CN+ cutoffs/update (all)",
                       "CN+ diagonal queries per increasing update", "S-MN messages as % of S-CN's",
                       "S-MN hierarchy bytes / server bytes"], rows) + "\n")
    L.append("Paper (000): S-CN ~2.1 messages/update and unicast 654 (100K tuples, 500K subscriptions) to 1,441 "
             "(10K tuples, 1M subscriptions) messages/update (Tables 2-3); multicast needs 50-70% more server "
             "time than S-CN and the most network traffic, \"because the set of affected subscriptions needs to be "
             "encoded in each message, even though the number of multicast messages may be small\"; CN+ "
             "(decreasing updates only) saves \"more than 98%\" of CN's traffic and is \"around 2% less "
             "effective\" than S-CN's Mar-based stop (§5). Here S-MN sends fewer messages than S-CN (most of S-CN's "
             "messages reach no subscription, and S-MN sends nothing then) but bytes in proportion to the "
             "subscriptions reached, and more over its hierarchy; CN+ reaches the affected subscriptions plus a "
             "few that cut it off, and pays for the increasing updates with one diagonal query per affected "
             "subscription.\n")
    L.append("![interfaces](range_min_interfaces.png)\n")
    L.append(IF_MARK_END)
    return "\n".join(L)


def plot_interfaces(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfgs = list(res)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    width = 0.8 / len(cfgs)
    titles = ["server messages / update", "server bytes / update", "subscriptions reached / update"]
    for j, (a, title) in enumerate(zip(axes, titles)):
        for i, cfg in enumerate(cfgs):
            vals, n = interface_rows(res[cfg])
            ys = [max(vals[name][j] / n, 1e-3) for name in INTERFACES]
            a.bar(np.arange(len(INTERFACES)) + (i - (len(cfgs) - 1) / 2) * width, ys, width,
                  label=f"{cfg[0] // 1000}K objects x {cfg[1] / 1e6:g}M subs")
        a.set_yscale("log")
        a.set_xticks(range(len(INTERFACES)))
        a.set_xticklabels(INTERFACES)
        a.set_title(title, fontsize=10)
        a.grid(True, axis="y", which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("The interfaces of 000 §2 on the same updates (log scale)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def splice_interfaces(md_path: Path, section: str) -> None:
    """Put part 4 into an existing report: in place of its previous version, else before the notes."""
    text = md_path.read_text() if md_path.exists() else ""
    if IF_MARK_BEGIN in text and IF_MARK_END in text:
        a = text.index(IF_MARK_BEGIN)
        z = text.index(IF_MARK_END) + len(IF_MARK_END)
        text = text[:a] + section + text[z:]
    elif "\n## Notes" in text:
        a = text.index("\n## Notes")
        text = text[:a] + "\n" + section + "\n" + text[a:]
    else:
        text += "\n" + section + "\n"
    md_path.write_text(text)


# ---------------------------------------------------------------------------------------- report
def plot(configs, res, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = [(n, m) for (n, m) in configs if n == max(c[0] for c in configs)]
    small = [(n, m) for (n, m) in configs if (n, m) not in main]
    colors = {"reformulated": "tab:blue", "unicast": "tab:orange", "cn_relax": "tab:green"}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.6))
    xs = [m for _, m in main]
    for mode in MODES:
        a1.plot(xs, [res[c][mode].ups for c in main], "o-", color=colors[mode], label=LABEL[mode])
        a2.plot(xs, [res[c][mode].deliveries_per_update if mode == "cn_relax" else
                     res[c][mode].msgs_per_update for c in main], "o-", color=colors[mode],
                label=LABEL[mode] + (" (deliveries)" if mode == "cn_relax" else ""))
        for c in small:
            a1.plot([c[1]], [res[c][mode].ups], "s", mfc="none", color=colors[mode])
            a2.plot([c[1]], [res[c][mode].deliveries_per_update if mode == "cn_relax" else
                             res[c][mode].msgs_per_update], "s", mfc="none", color=colors[mode])
    n_main = main[0][0] if main else 0
    a1.axhline(20_000, color="grey", ls=":", lw=1, label="target 20,000 updates/s")
    a1.set_xlabel("subscriptions")
    a1.set_ylabel("updates / s (one core, median of 3 windows)")
    a1.set_title(f"Server throughput ({n_main:,} objects; hollow squares: "
                 f"{small[0][0]:,} objects)" if small else f"Server throughput ({n_main:,} objects)",
                 fontsize=10)
    a1.set_yscale("log")
    a1.legend(fontsize=8)
    a2.set_yscale("log")
    a2.set_xlabel("subscriptions")
    a2.set_ylabel("messages / update (log)")
    a2.set_title("Server messages per update (CN-relax: subscriber deliveries)", fontsize=10)
    a2.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 0.2))
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
        a.set_xticks(xs)
        a.set_xticklabels([f"{m / 1e6:g}M" if m >= 1_000_000 else f"{m // 1000:,}K" for m in xs])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller windows and fewer batches (~2-3 min)")
    ap.add_argument("--no-spark", action="store_true", help="skip part 2 (Spark SQL and Engine.publish)")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="where to write range_min.md / .png")
    ap.add_argument("--interfaces-only", action="store_true",
                    help="run part 4 alone (the interfaces of 000 §2) and splice it into the existing report")
    args = ap.parse_args(argv)
    quick = args.quick
    started = time.perf_counter()
    info = machine()
    info["load_start"] = load_avg()
    if_updates = 2_000 if quick else 6_000
    if_configs = [(100_000, 100_000), (100_000, 1_000_000), (10_000, 1_000_000)]
    if args.interfaces_only:
        log(f"# range-min benchmark, part 4 only ({'quick' if quick else 'full'}) — {info['date']}; load average "
            f"{info['load_start']}")
        res_if = run_interfaces(if_configs, if_updates)
        info["load_end"] = load_avg()
        args.out.mkdir(parents=True, exist_ok=True)
        plot_interfaces(res_if, args.out / "range_min_interfaces.png")
        splice_interfaces(args.out / "range_min.md", interfaces_section(info, res_if, if_updates, quick, True))
        log(f"wrote part 4 into {args.out / 'range_min.md'} and {args.out / 'range_min_interfaces.png'} "
            f"({(time.perf_counter() - started) / 60:.1f} min)")
        return 0
    log(f"# range-min benchmark ({'quick' if quick else 'full'}) — {info['date']}")
    log(f"machine: {info['platform']}; {info['cpu_count']} CPUs; {info['cpu']}; Python {info['python']}, "
        f"pyspark {info['pyspark']}; load average (1/5/15 min) at start {info['load_start']}")

    # ---- part 1 -------------------------------------------------------------------------------
    n_updates = 9_000 if quick else 30_000
    windows = 3
    configs = [(100_000, 100_000), (100_000, 250_000), (100_000, 500_000), (100_000, 1_000_000),
               (10_000, 1_000_000)]
    log(f"\n## 1. Server time and messages per update ({n_updates:,} updates per run, "
        f"{windows} consecutive windows of {n_updates // windows:,})")
    objs, subs_, streams, setups, reg_times = {}, {}, {}, {}, {}
    wk, wx, wy = make_objects(10_000, seed=99)
    wpts = SubscriptionPoints()
    wpts.add(*make_subscriptions(10_000, seed=98))
    run_modes({"warm-up": Setup(wk, wx, wy, wpts, windows_of(wk, wx, make_updates(wy, 3_000, seed=97), 3))},
              windows)  # warm-up, untimed
    del wpts
    for n_obj, n_sub in configs:
        if n_obj not in objs:
            objs[n_obj] = make_objects(n_obj)
            streams[n_obj] = make_updates(objs[n_obj][2], n_updates)
        if n_sub not in subs_:
            subs_[n_sub] = make_subscriptions(n_sub)
        keys, xs, ys = objs[n_obj]
        pts = SubscriptionPoints()
        t0 = time.perf_counter()
        pts.add(*subs_[n_sub])
        reg_times[(n_obj, n_sub)] = time.perf_counter() - t0
        setups[(n_obj, n_sub)] = Setup(keys, xs, ys, pts, windows_of(keys, xs, streams[n_obj], windows))
    del subs_
    res = run_modes(setups, windows)
    del setups
    for (n_obj, n_sub), r in res.items():
        log(f"{n_obj:>9,} objects x {n_sub:>9,} subs: " + "; ".join(
            f"{m} {r[m].ups:>9,.0f} upd/s ({r[m].cpu_ups:,.0f}/CPU-s), {r[m].msgs_per_update:,.2f} msg/upd, "
            f"{r[m].deliveries_per_update:,.1f} deliv/upd" for m in MODES))
    kinds = np.bincount(streams[100_000].kind, minlength=3)
    gc.collect()

    # ---- part 4 (counted, not timed) -------------------------------------------------------------
    log(f"\n## 4. The interfaces of 000 §2 ({if_updates:,} updates per configuration)")
    res_if = run_interfaces(if_configs, if_updates)
    gc.collect()

    # ---- part 3 (before Spark starts: no JVM competing for the cores) ----------------------------
    reg_n = 1_000_000
    log(f"\n## 3. Registration: Engine().subscribe_many of {reg_n:,} subscriptions")
    reg = registration(reg_n, 1 if quick else 3)
    log(f"{reg['median_s']:.2f} s (runs: {', '.join(f'{t:.2f}' for t in reg['times'])})")
    gc.collect()

    # ---- part 2 -------------------------------------------------------------------------------
    sql_runs: list[dict] = []   # per scale: Spark SQL + our pure operators on the same batches
    pub_res: list[dict] = []
    if not args.no_spark:
        from sparksub.engine import spark_session

        s_batch = 1_000
        # (objects, subscriptions, warm-up batches, timed batches); the second scale is ~10x the pairs
        sql_scales = [(10_000, 10_000, 1, 2 if quick else 3)] + ([] if quick else [(10_000, 100_000, 0, 2)])
        pub_scales = [(10_000, 10_000, [(1_000, 1, 2 if quick else 3), (10_000, 0, 1 if quick else 3)])]
        if not quick:
            pub_scales.append((100_000, 1_000_000, [(1_000, 1, 3), (10_000, 0, 2)]))
        log(f"\n## 2. Without sparksub: Spark SQL (local[2]), batches of {s_batch:,}")
        t0 = time.perf_counter()
        spark = spark_session("local[2]", "sparksub-bench-range-min")
        spark_start = time.perf_counter() - t0

        def data(n_obj, n_sub, n_upd):
            keys, xs, ys = objs[n_obj] if n_obj in objs else make_objects(n_obj)
            stream = streams.get(n_obj)
            if stream is None or len(stream) < n_upd:
                stream = make_updates(ys, max(n_upd, n_updates))
            return keys, xs, ys, stream, make_subscriptions(n_sub)

        for n_obj, n_sub, warm, timed in sql_scales:
            keys, xs, ys, stream, (ids, lo, hi) = data(n_obj, n_sub, (warm + timed) * s_batch)
            r = spark_sql_baseline(spark, keys, xs, ys, ids, lo, hi, stream, s_batch, warm, timed)
            r["spark_start_s"] = spark_start
            r["ops"] = {m: operator_batches(keys, xs, ys, ids, lo, hi, stream, s_batch, warm, timed, m)
                        for m in ("reformulated", "unicast")}
            sql_runs.append(r)
            log(f"{n_obj:,} objects x {n_sub:,} subs: Spark SQL {r['ups']:,.0f} updates/s (median "
                f"{r['median_s']:.2f} s per batch of {s_batch:,}; initial minima {r['initial_s']:.1f} s; "
                f"~{r['candidates']:,.0f} candidate subs and {r['changes']:,.0f} changed minima per batch)")
            for m, o in r["ops"].items():
                log(f"    our {m} operator (pure, one core): {o['ups']:,.0f} updates/s = "
                    f"{o['ups'] / r['ups']:,.0f}x Spark SQL")
        for n_obj, n_sub, plan in pub_scales:
            keys, xs, ys, stream, (ids, lo, hi) = data(n_obj, n_sub, sum(b * (w + t) for b, w, t in plan))
            for mode in ("reformulated", "unicast"):
                for r in engine_publish(spark, keys, xs, ys, ids, lo, hi, stream, plan, mode):
                    r.update(objects=n_obj, subs=n_sub)
                    pub_res.append(r)
                    log(f"Engine.publish {n_obj:,} x {n_sub:,} {mode}, batches of {r['batch']:,}: "
                        f"{r['ups']:,.0f} updates/s (median {r['median_s']:.2f} s per batch; first call "
                        f"{r['first_call_s']:.1f} s)")
                gc.collect()
        spark.stop()

    info["load_end"] = load_avg()
    elapsed = time.perf_counter() - started
    log(f"\nload average at end {info['load_end']}; total {elapsed / 60:.1f} min")

    # ---- targets -----------------------------------------------------------------------------
    big = (100_000, 1_000_000)
    main_cfgs = [c for c in configs if c[0] == 100_000]
    refo = [res[c]["reformulated"].ups for c in main_cfgs]
    ratio_big = res[big]["reformulated"].msgs_per_update / res[big]["unicast"].msgs_per_update
    flat = min(refo) / max(refo)
    targets = [
        ("reformulated >= 20,000 updates/s at 100K objects x 1M subscriptions (one core)",
         res[big]["reformulated"].ups >= 20_000,
         f"{res[big]['reformulated'].ups:,.0f} updates/s wall ({res[big]['reformulated'].cpu_ups:,.0f} per CPU-s)"),
        ("reformulated throughput flat as subscriptions grow 100K -> 1M (slowest >= 0.8 x fastest)",
         flat >= 0.8, f"slowest/fastest = {flat:.2f} ({', '.join(f'{v:,.0f}' for v in refo)})"),
        ("reformulated messages <= 1% of unicast at 100K objects x 1M subscriptions",
         ratio_big <= 0.01, f"{100 * ratio_big:.2f}%"),
        (f"Engine().subscribe_many of {reg_n:,} subscriptions <= 10 s", reg["median_s"] <= 10,
         f"{reg['median_s']:.2f} s"),
    ]
    log("\n## Targets")
    for name, ok, val in targets:
        log(f"{'PASS' if ok else 'FAIL'}  {name}: {val}")

    # ---- write the report ---------------------------------------------------------------------
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "range_min.png"
    plot(configs, res, png)
    plot_interfaces(res_if, args.out / "range_min_interfaces.png")
    md = report(info, quick, n_updates, windows, configs, res, kinds, reg_times, reg, sql_runs, pub_res,
                targets, elapsed, interfaces_section(info, res_if, if_updates, quick, False))
    (args.out / "range_min.md").write_text(md)
    log(f"\nwrote {args.out / 'range_min.md'} and {png}")
    return 0


def _pub_row(r, pub_res, sql_ups) -> list[str]:
    note = f"{r['rows_per_update']:.2f} output rows/update"
    if r is next(q for q in pub_res if (q["objects"], q["subs"], q["mode"]) == (r["objects"], r["subs"], r["mode"])):
        note += f"; first call (snapshot broadcast, cold worker) {r['first_call_s']:.2f} s"
    return [f"{r['objects']:,} x {r['subs']:,}", f"Engine.publish, {LABEL[r['mode']]}", f"{r['batch']:,}",
            fmt_int(r["ups"]), f"{r['median_s']:.2f}", fmt_ratio(r["ups"] / sql_ups) if sql_ups else "n/a", note]


def report(info, quick, n_updates, windows, configs, res, kinds, reg_times, reg, sql_runs, pub_res,
           targets, elapsed, part4: str = "") -> str:
    L = []
    L.append("# Range-MIN benchmark: S-CN (reformulated) vs S-UN (unicast) vs CN-relax vs Spark SQL; S-MN and CN+\n")
    L.append(f"Generated by `python bench/range_min.py{' --quick' if quick else ''}` on {info['date']} "
             f"(total {elapsed / 60:.1f} min).\n")
    L.append(f"**Machine**: {info['platform']}; {info['cpu_count']} CPUs ({info['cpu']}); Python "
             f"{info['python']}, pyspark {info['pyspark']}, numpy {info['numpy']}, pyarrow {info['pyarrow']}. "
             f"Load average (1/5/15 min): {info['load_start']} at start, {info['load_end']} at end "
             f"(other processes may have shared the 2 cores; ratios measured side by side are the robust "
             f"figures).\n")
    L.append("**Workload** (000 Table 1 / dissertation Table 5.1, fixed seeds): X (`risk`) and Y (`per`) in "
             "[0, 10000]; objects uniform (float X); subscription midpoints N(5000, 1500), lengths "
             "|N(1000, 1000)| clipped into the domain; updates = per-object random walk on Y (step N(0, 50), "
             f"reflected at the domain ends), 0.5% spikes (Y -> U(0, {SPIKE_LOW})) whose object's next update "
             f"(1-100 updates later) bounces back to the old Y. Stream mix: {kinds[0]:,} walk / {kinds[1]:,} spike / {kinds[2]:,} bounce "
             f"updates out of {int(kinds.sum()):,}.\n")

    L.append("## Targets\n")
    L.append(md_table(["target", "result", "measured"],
                      [[n, "**PASS**" if ok else "**FAIL**", v] for n, ok, v in targets]) + "\n")

    L.append("## 1. Server time and messages per update\n")
    L.append(f"Pure operators (`RangeMinGroup.apply`), one Python process, no Spark. Each mode starts from a "
             f"fresh copy of the same initial table and processes the same {n_updates:,} updates as "
             f"{windows} consecutive windows of {n_updates // windows:,} (one `apply` call each; the windows of the "
             f"different configurations are interleaved in time, so load changes on the machine hit them alike); "
             f"**updates/s is the median of the {windows} windows** (wall clock); µs/update is its inverse; updates "
             f"per CPU-s divides by the CPU time this process used instead (less sensitive to other processes "
             f"sharing the cores). Messages = what the server sends: "
             f"reformulated messages ({MESSAGE_BYTES} B), unicast rows ({UNICAST_ROW_BYTES} B), and for CN-relax "
             f"the raw update once ({CN_UPDATE_BYTES} B), which the network delivers to every subscription "
             f"whose range holds its X. Deliveries = subscriptions reached.\n")
    rows = []
    for c in configs:
        r = res[c]
        for m in MODES:
            x = r[m]
            rows.append([f"{c[0]:,}", f"{c[1]:,}", LABEL[m], fmt_int(x.ups), fmt_int(x.cpu_ups),
                         fmt_num(1e6 / x.ups, 1),
                         ", ".join(fmt_int(v) for v in x.window_ups),
                         fmt_num(x.msgs_per_update), fmt_num(x.deliveries_per_update),
                         fmt_num(x.bytes_per_update) if m != "cn_relax" else
                         f"{fmt_num(CN_UPDATE_BYTES)} sent / {fmt_num(x.bytes_per_update)} delivered"])
    L.append(md_table(["objects", "subscriptions", "mode", "updates/s (median)", "updates per CPU-s", "µs/update", "windows (updates/s)",
                       "server messages/update", "deliveries/update", "bytes/update"], rows) + "\n")

    L.append("Ratios (same workload, side by side):\n")
    rows = []
    for c in configs:
        r = res[c]
        rf, un, cn = r["reformulated"], r["unicast"], r["cn_relax"]
        mix = rf.mix
        tot = max(sum(mix.values()), 1)
        rows.append([f"{c[0]:,}", f"{c[1]:,}",
                     f"{100 * rf.msgs_per_update / un.msgs_per_update:.2f}%",
                     fmt_ratio(rf.ups / un.ups), f"{100 * rf.bytes_per_update / un.bytes_per_update:.2f}%",
                     fmt_ratio(cn.deliveries_per_update / rf.deliveries_per_update),
                     fmt_ratio(cn.deliveries_per_update / rf.msgs_per_update),
                     fmt_ratio(rf.ups / cn.ups),
                     f"{100 * mix['good'] / tot:.1f}% / {100 * mix['bad'] / tot:.2f}% / "
                     f"{100 * mix['ignorable'] / tot:.2f}%",
                     f"{reg_times[c]:.2f}"])
    L.append(md_table(["objects", "subscriptions", "reformulated msgs as % of unicast rows",
                       "time: reformulated speed-up over unicast", "reformulated bytes as % of unicast",
                       "CN-relax deliveries / S-CN deliveries", "CN-relax deliveries / S-CN messages",
                       "time: reformulated speed-up over CN-relax", "mix good / bad / ignorable",
                       "index build (s)"], rows) + "\n")
    L.append("Paper (dissertation Tables 5.2/5.3): S-CN ~2.1 messages/update, S-UN 303 (200K subs) to 1,441 "
             "(1M subs) with 10K tuples, 654 with 100K tuples and 500K subs.\n")

    L.append("## 2. What a user would do without sparksub\n")
    if not sql_runs:
        L.append("(skipped: `--no-spark`)\n")
    else:
        s0 = sql_runs[0]
        L.append(f"Spark SQL, `local[2]`, at scales it finishes (after {s0['batch']:,} updates nearly every "
                 f"subscription is a candidate, so each batch recomputes an objects x subscriptions range join), "
                 f"batches of {s0['batch']:,} updates; the first scale has {s0['warmup']} warm-up batch, then "
                 f"the median of the timed batches. Per batch: register the updates as a temp view, merge them "
                 f"into `stock` (checkpointed), `subs JOIN updates ON risk BETWEEN lo AND hi` (new or old X) -> "
                 f"candidate subscriptions, `candidates JOIN stock ON risk BETWEEN lo AND hi GROUP BY id` -> their "
                 f"minima, compare with the previous minima (changes) and keep the new ones (checkpointed). "
                 f"Spark plans both range joins as broadcast nested-loop joins. It yields one net change per "
                 f"subscription per batch, not one per update. Our pure operators run on the same data, stream and "
                 f"batches (one core, same warm-up and median). `Engine.publish` runs our operator inside Spark "
                 f"tasks (`mapInArrow`, one partition per group), including validation, the driver's copy of the "
                 f"table, the DataFrame and `count()` of the result. SparkSession start: "
                 f"{s0['spark_start_s']:.1f} s.\n")
        rows = []
        for s in sql_runs:
            scale = f"{s['objects']:,} x {s['subs']:,}"
            rows.append([scale, "Spark SQL (range joins, recompute minima)", f"{s['batch']:,}", fmt_int(s["ups"]),
                         f"{s['median_s']:.2f}", "1x",
                         f"{s['timed']} timed batches; ~{s['candidates']:,.0f} candidate subs and "
                         f"{s['changes']:,.0f} changed minima per batch; initial minima {s['initial_s']:.1f} s"])
            for m, r in s["ops"].items():
                rows.append([scale, f"our {LABEL[m]} operator, pure", f"{s['batch']:,}", fmt_int(r["ups"]),
                             f"{r['median_s']:.3f}", fmt_ratio(r["ups"] / s["ups"]),
                             f"{r['rows_per_update']:.2f} output rows/update"])
            for r in pub_res:
                if (r["objects"], r["subs"]) != (s["objects"], s["subs"]):
                    continue
                rows.append(_pub_row(r, pub_res, s["ups"]))
        for r in pub_res:
            if not any((r["objects"], r["subs"]) == (s["objects"], s["subs"]) for s in sql_runs):
                rows.append(_pub_row(r, pub_res, None))
        L.append(md_table(["objects x subs", "approach", "batch", "updates/s", "s per batch (median)",
                           "vs Spark SQL", "notes"], rows) + "\n")
        pure = s0["ops"]["reformulated"]["ups"]
        pubs = {(r["objects"], r["subs"], r["mode"], r["batch"]): r for r in pub_res}
        p = pubs.get((s0["objects"], s0["subs"], "reformulated", 1000))
        if p is not None:
            L.append(f"Spark overhead: at {s0['objects']:,} x {s0['subs']:,} a batch of 1,000 takes "
                     f"{p['median_s']:.2f} s through `Engine.publish` (reformulated) against {1000 / pure:.3f} s "
                     f"in the pure operator, i.e. ~{p['median_s'] - 1000 / pure:.2f} s of per-call cost (job "
                     f"scheduling, Arrow round trips, driver-side validation and bookkeeping).\n")
        big_pure = res.get((100_000, 1_000_000), {}).get("unicast")
        p = pubs.get((100_000, 1_000_000, "unicast", 10_000))
        if p is not None and big_pure is not None:
            n_rows = p["rows_per_update"] * p["batch"]
            extra = p["median_s"] - p["batch"] / big_pure.ups
            L.append(f"Unicast through Spark at 100,000 x 1,000,000: a batch of 10,000 produces ~{n_rows / 1e6:.1f}M "
                     f"rows and takes {p['median_s']:.1f} s against ~{p['batch'] / big_pure.ups:.1f} s in the pure "
                     f"operator (part 1's rate), so Spark adds ~{extra:.0f} s, ~{1e6 * extra / n_rows:.1f} µs per "
                     f"output row (moving the Arrow rows to the JVM and checkpointing them).\n")
        last = sql_runs[-1]
        pairs = last["objects"] * last["candidates"]
        rate = pairs / last["median_s"]
        est = 100_000 * 100_000 * (last["candidates"] / last["subs"]) / rate
        L.append(f"Spark SQL's cost is the recompute join: ~{pairs / 1e6:,.0f}M (object, candidate) pairs per batch "
                 f"at {last['objects']:,} x {last['subs']:,}, ~{rate / 1e6:,.0f}M pairs/s. At 100,000 x 100,000 "
                 f"that would be ~{est:,.0f} s per batch of 1,000 (~{1000 / est:.1f} updates/s; extrapolated, "
                 f"not run).\n")

    L.append("## 3. Registration\n")
    L.append(f"`Engine().subscribe_many(template, {{id, lo, hi}})` of {reg['subs']:,} subscriptions (planning "
             f"the template once, binding the parameters, building the group's point index; no SparkSession): "
             f"**{reg['median_s']:.2f} s** (median of {len(reg['times'])}: "
             f"{', '.join(f'{t:.2f}' for t in reg['times'])}). Target <= 10 s.\n")

    if part4:
        L.append(part4 + "\n")
    L.append("## Notes\n")
    rf_big = res[(100_000, 1_000_000)]["reformulated"]
    n_bad = max(rf_big.mix["bad"], 1)
    bad_msgs = (rf_big.server_messages - rf_big.mix["good"]) / n_bad
    L.append("* **reformulated (S-CN)**: the server classifies each update (ignorable / good / bad) on the A2B-tree "
             "and emits messages <NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R> without looking at a subscription; "
             "a content-based network would route each message to the subscriptions it matches. Its cost does "
             "not depend on the number of subscriptions.\n"
             "* **unicast (S-UN)**: the same messages, matched by the server against the subscriptions' 2-d point "
             "index; one row per affected subscription. Cost grows with the affected subscriptions.\n"
             "* **CN-relax (the CN baseline)**: the raw update is sent once and the network delivers it to every "
             "subscription whose range contains its X (old or new), ignorable or not; we count those deliveries "
             "with the point index (a stab count per update), which is what the time column measures. In a real "
             "CN the server only forwards the update, so its server time is not the cost that matters; its "
             "deliveries are.\n"
             "* **Spark SQL**: what a user would write with plain Spark; see §2 for the queries.\n"
             f"* S-CN sends {rf_big.msgs_per_update:.2f} messages/update here against the paper's ~2.1: "
             f"{100 * rf_big.mix['good'] / max(sum(rf_big.mix.values()), 1):.1f}% of the updates are good (one "
             f"message each) and the bad ones (Y increases that change a minimum, bounces) emit "
             f"~{bad_msgs:.1f} messages each (peak + hull points). The paper's walk is not specified beyond "
             f"\"random walk\", so its good/bad mix may differ.\n"
             f"* S-UN rows/update are close to the paper: {res[(100_000, 500_000)]['unicast'].msgs_per_update:,.0f} "
             f"at 100K objects x 500K subscriptions (paper: 654) and "
             f"{res[(10_000, 1_000_000)]['unicast'].msgs_per_update:,.0f} at 10K x 1M (paper: 1,441). As in "
             f"the paper, the smaller database gives more affected subscriptions per update and the gap to S-CN "
             f"widens.\n")
    L.append("![updates/s and messages/update](range_min.png)\n")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
