"""Tests of sparksub.operators.agg.core against a brute-force oracle.

Oracle: a plain dict ``key -> (x, y)``; COUNT / SUM / AVG over every subscription range are recomputed from it
after every update with exact rational arithmetic (``fractions.Fraction``), then rounded once to float; the
module must agree *exactly* (000 §4; SQL: COUNT of nothing = 0, SUM / AVG of nothing = NULL).  Every subscriber's
state is maintained only from the messages via the subscriber-side :func:`apply`.
"""
from __future__ import annotations

import contextlib
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.agg import core as ra  # private helpers: white-box checks of the unicast's arithmetic
from sparksub.operators.agg.core import (
    AggState,
    AggUnicast,
    Message,
    RangeAggCore,
    apply,
    exact,
    matches,
    to_float,
    touched,
)

INF = math.inf


# ----------------------------------------------------------------------------------------------------------------
# brute-force oracle
# ----------------------------------------------------------------------------------------------------------------
def _round(fr: Fraction) -> float:
    try:
        return float(fr)
    except OverflowError:
        return INF if fr > 0 else -INF


def oracle_value(kind: str, points: dict, x1: float, x2: float):
    ys = [y for (x, y) in points.values() if x1 <= x <= x2]
    if kind == "count":
        return len(ys)
    if not ys:
        return None
    total = sum((Fraction(y) for y in ys), Fraction(0))
    return _round(total if kind == "sum" else total / len(ys))


def as_array_value(v):
    return np.nan if v is None else v


def same_array_value(g, e) -> bool:
    """Equal, or both NaN (NULL in a float64 result array)."""
    return g == e or (math.isnan(g) and math.isnan(e))


# ----------------------------------------------------------------------------------------------------------------
# worked examples
# ----------------------------------------------------------------------------------------------------------------
def test_sql_semantics_of_empty_ranges():
    for kind, empty in (("count", 0), ("sum", None), ("avg", None)):
        core = RangeAggCore(kind)
        assert core.value(0, 10) == empty and core.value(5, 1) == empty
        core.upsert("a", 3, 0.0)
        assert core.value(0, 10) == (1 if kind == "count" else 0.0)
        assert core.value(4, 10) == empty and core.value(float("nan"), 10) == empty
        v = core.values([0, 4, 5, np.nan], [10, 10, 1, 10])
        if kind == "count":
            assert v.dtype == np.int64 and v.tolist() == [1, 0, 0, 0]
        else:
            assert v[0] == 0.0 and np.isnan(v[1:]).all()
    with pytest.raises(ValueError, match="unknown aggregate kind"):
        RangeAggCore("min")


def test_sums_are_exact():
    core = RangeAggCore("sum")
    core.load(["a", "b", "c"], [1.0, 2.0, 3.0], [1e16, 1.0, -1e16])
    assert core.value(-INF, INF) == 1.0  # float left-to-right gives 0.0
    assert core.value(1, 2) == 1e16 + 1.0 == 1e16
    core.upsert("d", 4.0, 1e308)
    core.upsert("e", 4.0, 1e308)
    assert core.value(4, 4) == INF
    avg = RangeAggCore("avg")
    avg.load(["d", "e"], [4.0, 4.0], [1e308, 1e308])
    assert avg.value(-INF, INF) == 1e308  # the float sum overflows; the exact mean does not
    out = avg.upsert("d", 4.0, 5e-324)  # inexact difference -> the two-message form
    assert out.messages == (Message(4.0, -1, -1e308), Message(4.0, 1, 5e-324))
    assert avg.value(0, 5) == 5e307


def test_message_forms_and_drops():
    core = RangeAggCore("avg")
    assert core.upsert("k", 1, 2.0).messages == (Message(1.0, 1, 2.0),)
    out = core.upsert("k", 1, 2.5)
    assert out.kind == "y_update" and out.messages == (Message(1.0, 0, 0.5),)
    out = core.upsert("k", 1, 2.5)
    assert out.kind == "unchanged" and out.dropped
    out = core.upsert("k", 7, 3.0)
    assert out.kind == "x_move" and out.messages == (Message(1.0, -1, -2.5), Message(7.0, 1, 3.0))
    assert core.delete("k").messages == (Message(7.0, -1, -3.0),)
    assert {k: core.counters[k] for k in ("updates", "messages", "dropped")} == {"updates": 5, "messages": 5, "dropped": 1}
    cnt = RangeAggCore("count")
    cnt.upsert("k", 1, 2.0)
    out = cnt.upsert("k", 1, 9.0)  # a Y change cannot affect COUNT
    assert out.kind == "y_update" and out.dropped and cnt.get("k") == (1.0, 9.0)
    assert matches(Message(1.0, 1, 0.0), 1.0, 1.0) and not matches(Message(1.0, 1, 0.0), 1.5, INF)


def test_unicast_reports_only_value_changes():
    core = RangeAggCore("count")
    core.load(["a", "b"], [1.0, 5.0], [1.0, 1.0])
    uni = AggUnicast("count", [0.0, 0.0, 4.0, 8.0], [2.0, 9.0, 6.0, 9.0], core)
    assert uni.values().tolist() == [1, 2, 1, 0]
    out = core.upsert("a", 5.0, 1.0)  # 1 -> 5: the range [0, 9] holds both X: touched but unchanged
    assert touched(uni.x1, uni.x2, out).tolist() == [0, 1, 2]
    idx, vals = uni.apply(out)
    assert sorted(zip(idx.tolist(), vals.tolist())) == [(0, 0), (2, 2)]  # (indices in no particular order)
    assert uni.counters == {"touched": 3, "notified": 2}
    idx, vals = uni.apply(())
    assert idx.tolist() == [] and vals.tolist() == []


def test_bad_input():
    core = RangeAggCore("sum")
    with pytest.raises(BadUpdate, match="'k1'"):
        core.upsert("k1", float("nan"), 1.0)
    with pytest.raises(BadUpdate, match="'k2'"):
        core.upsert("k2", 1.0, INF)
    with pytest.raises(BadUpdate, match="'k3'"):
        core.upsert("k3", 1.0, "2.0")
    with pytest.raises(BadUpdate, match="'k4'"):
        core.upsert("k4", None, 1.0)
    with pytest.raises(BadUpdate, match="unknown key 'nope'"):
        core.delete("nope")
    with pytest.raises(BadUpdate, match=r"duplicate key 'a'.*row 1"):
        core.load(["a", "a"], [0.0, 1.0], [1.0, 2.0])
    with pytest.raises(BadUpdate, match=r"row 0"):
        core.load(["z"], [1.0], [np.nan])
    assert len(core) == 0 and core.counters["updates"] == 0


# ----------------------------------------------------------------------------------------------------------------
# Hypothesis / random: messages, subscriber states and unicast vs oracle
# ----------------------------------------------------------------------------------------------------------------
ENDS = [-INF, -1, 0, 0.5, 1, 2, 2.5, 3, 4, 5, 6, INF]
KEYS = [0, 1, 2, 3, 4, 5, "k0", "k1"]
YS = [0.0, 1.0, -1.0, 0.1, 2.5, 3.0, 1e16, -1e16, 1e308, -1e308, 5e-324]

keys_st = st.sampled_from(KEYS)
xs_st = st.integers(0, 5)
ys_st = st.sampled_from(YS)
op_st = st.one_of(
    st.tuples(st.just("up"), keys_st, xs_st, ys_st),
    st.tuples(st.just("xmove"), keys_st, xs_st),
    st.tuples(st.just("yup"), keys_st, ys_st),
    st.tuples(st.just("del"), keys_st),
)
sub_st = st.tuples(st.sampled_from(ENDS), st.sampled_from(ENDS)).map(lambda t: (min(t), max(t)))


def _same(a, b) -> bool:
    return a == b or (a is None and b is None)


def run_scenario(kind, init, ops, subs, bucket_size=64):
    core = RangeAggCore(kind, bucket_size=bucket_size)
    points: dict = {}
    for k, x, y in init:
        if k not in points:
            points[k] = (float(x), float(y))
    core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    states = [AggState(*core.state(x1, x2)) for x1, x2 in subs]
    x1s = np.array([s[0] for s in subs], dtype=float)
    x2s = np.array([s[1] for s in subs], dtype=float)
    uni = AggUnicast(kind, x1s, x2s, core)
    for op in ops:
        key = op[1]
        old = points.get(key)
        if op[0] == "del":
            if old is None:
                with pytest.raises(BadUpdate):
                    core.delete(key)
                continue
            out = core.delete(key)
            new_points = {k: v for k, v in points.items() if k != key}
            new = None
        else:
            if op[0] == "up":
                _, _, x, y = op
            elif old is None:
                continue
            elif op[0] == "xmove":
                x, y = op[2], old[1]
            else:
                x, y = old[0], op[2]
            new = (float(x), float(y))
            out = core.upsert(key, *new)
            new_points = dict(points)
            new_points[key] = new
        # at most two messages; drops exactly as 000 §4 says
        assert len(out.messages) <= 2
        if old is not None and new is not None and old[0] == new[0] and (old[1] == new[1] or kind == "count"):
            assert out.dropped
        else:
            assert 1 <= len(out.messages)
        for m in out.messages:
            assert isinstance(m.d_count, int) and math.isfinite(m.d_sum)
        changed, reached = set(), set()
        for i, (x1, x2) in enumerate(subs):
            before = oracle_value(kind, points, x1, x2)
            after = oracle_value(kind, new_points, x1, x2)
            assert _same(states[i].value(kind), before)
            # relaxed range subscription: touched iff the old or the new X is in range (and not dropped)
            in_range = (old is not None and x1 <= old[0] <= x2) or (new is not None and x1 <= new[0] <= x2)
            hit = any(matches(m, x1, x2) for m in out.messages)
            assert hit == (in_range and not out.dropped)
            if hit:
                reached.add(i)
            states[i] = apply(out.messages, states[i], x1, x2)
            assert _same(states[i].value(kind), after), (op, x1, x2, before, after, out)
            ys = [Fraction(y) for x, y in new_points.values() if x1 <= x <= x2]
            assert states[i].count == len(ys)
            if kind != "count":  # COUNT subscribers are not sent Y changes, so their sum is not maintained
                assert Fraction(states[i].scaled_sum, 1 << 1074) == sum(ys)
            assert _same(core.value(x1, x2), after)
            if not _same(before, after):
                changed.add(i)
        assert set(touched(x1s, x2s, out).tolist()) == reached
        idx, vals = uni.apply(out)
        assert set(idx.tolist()) == changed  # unicast: notified <=> the SQL value changed
        for i, v in zip(idx.tolist(), vals.tolist()):
            exp = as_array_value(oracle_value(kind, new_points, *subs[i]))
            assert same_array_value(v, exp)
        got = core.values(x1s, x2s).tolist()
        exp = [as_array_value(oracle_value(kind, new_points, a, b)) for a, b in subs]
        assert all(same_array_value(g, e) for g, e in zip(got, exp))
        points = new_points
        core.check_invariants()
        assert len(core) == len(points)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["count", "sum", "avg"]),
       init=st.lists(st.tuples(keys_st, xs_st, ys_st), max_size=8),
       ops=st.lists(op_st, min_size=1, max_size=16),
       subs=st.lists(sub_st, min_size=1, max_size=12),
       bucket_size=st.sampled_from([2, 3, 64]))
def test_messages_against_oracle(kind, init, ops, subs, bucket_size):
    run_scenario(kind, init, ops, subs, bucket_size)


def test_all_grid_subscriptions_random():
    rnd = random.Random(5)
    subs = [(a, b) for a in ENDS for b in ENDS if a <= b]
    for trial in range(15):
        kind = ("count", "sum", "avg")[trial % 3]
        init = [(rnd.choice(KEYS), rnd.randrange(6), rnd.choice(YS)) for _ in range(rnd.randrange(9))]
        ops = []
        for _ in range(30):
            r = rnd.random()
            k = rnd.choice(KEYS)
            if r < 0.3:
                ops.append(("xmove", k, rnd.randrange(6)))
            elif r < 0.55:
                ops.append(("yup", k, rnd.choice(YS)))
            elif r < 0.85:
                ops.append(("up", k, rnd.randrange(6), rnd.choice(YS)))
            else:
                ops.append(("del", k))
        run_scenario(kind, init, ops, subs, bucket_size=2 + trial % 3)


@pytest.mark.parametrize(("kind", "bucket_size"), [("count", 2), ("sum", 4), ("avg", 3)])
def test_many_distinct_x_buckets(kind, bucket_size):
    """Hundreds of distinct X in small buckets: splits, merges, drops and Fenwick rebuilds."""
    rnd = random.Random(len(kind))
    core = RangeAggCore(kind, bucket_size=bucket_size)
    points = {k: (float(rnd.randrange(400)), rnd.uniform(-100, 100)) for k in range(300)}
    core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    for step in range(600):
        k = rnd.randrange(330)
        if k in points and step % 3 == 0:
            core.delete(k)
            del points[k]
        else:
            p = (float(rnd.randrange(400 + step)), rnd.choice([rnd.uniform(-100, 100), 0.1, 1e15]))
            core.upsert(k, *p)
            points[k] = p
        a = rnd.uniform(-10, 1010)
        b = a + rnd.expovariate(1 / 100)
        assert _same(core.value(a, b), oracle_value(kind, points, a, b))
        if step % 20 == 0:
            core.check_invariants()
    core.check_invariants()
    assert core.counters["restructures"] > 3
    a = np.array([rnd.uniform(-10, 1010) for _ in range(200)])
    b = a + np.array([rnd.expovariate(1 / 100) for _ in range(200)])
    got = core.values(a, b).tolist()
    for ai, bi, g in zip(a.tolist(), b.tolist(), got):
        e = as_array_value(oracle_value(kind, points, ai, bi))
        assert same_array_value(g, e)


def test_exact_roundtrip():
    for y in YS + [math.pi, -math.e, 2.0 ** -1022, 1.7976931348623157e308]:
        assert Fraction(exact(y), 1 << 1074) == Fraction(y)


# ----------------------------------------------------------------------------------------------------------------
# AggUnicast at scale: many random subscriptions vs brute force (exact states, reported changes, touched counts)
# ----------------------------------------------------------------------------------------------------------------

NAN = math.nan
U_ENDS = [-INF, -2.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 7.0, 9.0, INF]  # ties with the tuple X below
U_XS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0, 9.0]
U_YS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, 3.0, 0.1, 1 / 3, 1e16, -1e16, 1e308, -1e308, 5e-324, -5e-324,
        2.0 ** 53, 2.0 ** 53 + 2, 3 * 2.0 ** 52, 1e-300, 1e300, 2.0 ** -1022]  # AVG ties: 2**53 + 1 etc.
U_KEYS = list(range(12))

u_ys_st = st.one_of(st.sampled_from(U_YS), st.integers(-6, 6).map(float),
                    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
                    st.floats(allow_nan=False, allow_infinity=False))
u_op_st = st.one_of(
    st.tuples(st.just("up"), st.sampled_from(U_KEYS), st.sampled_from(U_XS), u_ys_st),
    st.tuples(st.just("xmove"), st.sampled_from(U_KEYS), st.sampled_from(U_XS)),
    st.tuples(st.just("yup"), st.sampled_from(U_KEYS), u_ys_st),
    st.tuples(st.just("same"), st.sampled_from(U_KEYS)),
    st.tuples(st.just("del"), st.sampled_from(U_KEYS)),
)
# unsorted ends: x1 > x2 is an empty range; a NaN end matches nothing
u_sub_st = st.tuples(st.sampled_from(U_ENDS + [NAN]), st.sampled_from(U_ENDS))


def exact_state(points: dict, x1: float, x2: float) -> tuple[int, int]:
    ys = [y for x, y in points.values() if x1 <= x <= x2]
    return len(ys), sum(exact(y) for y in ys)


def sql_value(kind: str, state: tuple[int, int]):
    """The oracle's SQL value, rounded through Fraction (independent of range_agg.to_float); NaN for NULL."""
    c, s = state
    if kind == "count":
        return c
    if c == 0:
        return NAN
    fr = Fraction(s, 1 << 1074)
    return _round(fr if kind == "sum" else fr / c)


@contextlib.contextmanager
def short_runs(n: int):
    """Set range_agg._SHORT_RUN (0: every run of the layout is read as a slice, however short)."""
    old, ra._SHORT_RUN = ra._SHORT_RUN, n
    try:
        yield
    finally:
        ra._SHORT_RUN = old


def check_unicast(uni: AggUnicast, kind: str, points: dict, subs) -> None:
    got = uni.values().tolist()
    for j, (x1, x2) in enumerate(subs):
        st_ = exact_state(points, x1, x2)
        assert same_array_value(got[j], sql_value(kind, st_)), (j, x1, x2, got[j], st_)
        state = uni.state(j)
        assert state.count == st_[0]
        if kind != "count":  # the exact sum itself, not only its rounding
            assert state.scaled_sum == st_[1], (j, x1, x2)


def run_unicast(kind, init, ops, subs, bucket_size):
    core = RangeAggCore(kind)
    points: dict = {}
    for k, x, y in init:
        points.setdefault(k, (float(x), float(y)))
    core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    x1s = np.array([s[0] for s in subs], dtype=float)
    x2s = np.array([s[1] for s in subs], dtype=float)
    uni = AggUnicast(kind, x1s, x2s, core, bucket_size=bucket_size)
    check_unicast(uni, kind, points, subs)
    for op in ops:
        key = op[1]
        old = points.get(key)
        if op[0] == "del":
            if old is None:
                continue
            out = core.delete(key)
            new = None
        else:
            if op[0] == "up":
                new = (float(op[2]), float(op[3]))
            elif old is None:
                continue
            elif op[0] == "xmove":
                new = (float(op[2]), old[1])
            elif op[0] == "yup":
                new = (old[0], float(op[2]))
            else:
                new = old
            out = core.upsert(key, *new)
        new_points = dict(points)
        if new is None:
            del new_points[key]
        else:
            new_points[key] = new
        before = [sql_value(kind, exact_state(points, a, b)) for a, b in subs]
        after = [sql_value(kind, exact_state(new_points, a, b)) for a, b in subs]
        touched0 = uni.counters["touched"]
        idx, vals = uni.apply(out)
        assert idx.dtype == np.int64 and vals.dtype == (np.int64 if kind == "count" else np.float64)
        assert len(set(idx.tolist())) == idx.size  # each changed subscription once
        changed = {j for j in range(len(subs)) if not same_array_value(before[j], after[j])}
        assert set(idx.tolist()) == changed, (op, out)
        for j, v in zip(idx.tolist(), vals.tolist()):
            assert same_array_value(v, after[j]), (op, subs[j], v, after[j])
        xs_hit = {m.x for m in out.messages}  # the relaxed deliveries: a range holding a message's X
        reached = sum(1 for a, b in subs if any(a <= x <= b for x in xs_hit))
        assert uni.counters["touched"] - touched0 == reached
        points = new_points
        check_unicast(uni, kind, points, subs)


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kind=st.sampled_from(["count", "sum", "avg"]),
       init=st.lists(st.tuples(st.sampled_from(U_KEYS), st.sampled_from(U_XS), u_ys_st), max_size=12),
       ops=st.lists(u_op_st, min_size=1, max_size=20),
       subs=st.lists(u_sub_st, min_size=1, max_size=150),
       bucket_size=st.sampled_from([1, 2, 3, 5, 16, None]))
def test_unicast_against_brute_force(kind, init, ops, subs, bucket_size):
    """Ties of X with range ends, empty / NaN ranges, duplicate ranges, deletes, X-moves, Y changes, unchanged
    upserts, sums that cancel, overflow, subnormals and AVG ties, over small layout buckets (runs, partial
    buckets, narrow-slice scans), runs read as slices and as index arrays."""
    for short_run in (0, ra._SHORT_RUN):
        with short_runs(short_run):
            run_unicast(kind, init, ops, subs, bucket_size)



@pytest.mark.parametrize("kind", ["sum", "avg", "count"])
def test_unicast_leaves_and_reenters_the_exact_int_fallback(kind):
    """A sum two floats cannot hold (1e300 + 1 + 1e-300) falls back to a Python int and returns to the pair when
    the tuple making it so leaves; beyond the float range the value is ±inf."""
    subs = [(0.0, 10.0), (0.0, 1.0), (1.0, 2.0), (5.0, 5.0)]
    ops = [("up", 0, 1.0, 1e300), ("up", 1, 1.0, 1.0), ("up", 2, 2.0, 1e-300), ("up", 3, 5.0, 1e308),
           ("up", 4, 5.0, 1e308), ("yup", 2, 3.0), ("del", 4), ("del", 0), ("up", 2, 2.0, 1e-300), ("del", 2)]
    run_unicast(kind, [], ops, subs, 1)
    core = RangeAggCore(kind)
    uni = AggUnicast(kind, [0.0, 4.0], [2.0, 6.0], core)
    for op in (("a", 1.0, 1e300), ("b", 1.0, 1.0), ("c", 2.0, 1e-300)):
        uni.apply(core.upsert(*op))
    if kind != "count":
        assert len(uni._big) == 1  # the range [0, 2] holds 1e300 + 1 + 1e-300
    idx, vals = uni.apply(core.upsert("z", 1.5, 0.0))  # only the count moves (a fallback's value too)
    if kind == "avg":
        assert idx.tolist() == [0] and vals[0] == to_float(exact(1e300) + exact(1.0) + exact(1e-300), 4)
    uni.apply(core.delete("z"))
    uni.apply(core.delete("c"))
    assert not uni._big
    uni.apply(core.upsert("d", 5.0, 1e308))
    uni.apply(core.upsert("e", 5.0, 1e308))
    assert uni.values()[1] == (2 if kind == "count" else INF if kind == "sum" else 1e308)


def _ordinary_workload(seed: int, n_subs: int, n_tuples: int, n_ops: int, long_ranges: bool):
    """Ranges over [0, 1000] (``long_ranges``: all around the middle, so a message reaches thousands of them) and
    tuples with ordinary random Y: the vectorised paths (no fallback) at a size where they matter."""
    r = np.random.default_rng(seed)
    if long_ranges:
        x1 = r.uniform(0, 450, n_subs).round(1)
        x2 = r.uniform(550, 1000, n_subs).round(1)
    else:
        mid, ln = r.uniform(0, 1000, n_subs), r.exponential(80, n_subs)
        x1, x2 = (mid - ln / 2).round(1), (mid + ln / 2).round(1)
    keys = list(range(n_tuples))
    xs = r.uniform(0, 1000, n_tuples).round(1).tolist()  # rounded: ties with range ends
    ys = (r.uniform(-50, 100, n_tuples) * r.choice([1.0, 1e-3, 1e4], n_tuples)).tolist()
    ops = []
    for _ in range(n_ops):
        k = int(r.integers(0, n_tuples + 20))
        u = r.random()
        if u < 0.35:
            ops.append(("xmove", k, float(r.normal(0, 20)), None))
        elif u < 0.75:
            ops.append(("yup", k, None, float(r.uniform(-50, 100))))
        elif u < 0.9:
            ops.append(("up", k, float(r.uniform(0, 1000)), float(r.uniform(-50, 100))))
        else:
            ops.append(("del", k, None, None))
    return x1, x2, keys, xs, ys, ops


@pytest.mark.parametrize(("kind", "bucket_size", "long_ranges"),
                         [("sum", None, True), ("avg", None, True), ("count", None, True), ("sum", 37, False),
                          ("avg", 64, False), ("count", 5, False)])
def test_unicast_ordinary_data_matches_recomputation(kind, bucket_size, long_ranges):
    n_subs = 6000 if long_ranges else 3000
    x1, x2, keys, xs, ys, ops = _ordinary_workload(len(kind) + (bucket_size or 0), n_subs, 400, 150, long_ranges)
    core = RangeAggCore(kind)
    core.load(keys, xs, ys)
    uni = AggUnicast(kind, x1, x2, core, bucket_size=bucket_size)
    prev = core.values(x1, x2)
    sample = np.random.default_rng(1).choice(n_subs, 40, replace=False).tolist()
    for step, (op, k, a, b) in enumerate(ops):
        old = core.get(k)
        if op == "del":
            if old is None:
                continue
            out = core.delete(k)
        elif op == "up":
            out = core.upsert(k, a, b)
        elif old is None:
            continue
        else:
            out = core.upsert(k, old[0] + a if op == "xmove" else old[0], old[1] if op == "xmove" else b)
        idx, vals = uni.apply(out)
        want = core.values(x1, x2)
        diff = np.flatnonzero(~((prev == want) | (np.isnan(prev) & np.isnan(want)))) if kind != "count" else \
            np.flatnonzero(prev != want)
        assert np.array_equal(np.sort(idx), diff)
        order = np.argsort(idx)
        assert np.array_equal(vals[order], want[np.sort(idx)], equal_nan=kind != "count")
        prev = want
        if step % 10 == 0 or step == len(ops) - 1:
            got = uni.values()
            assert np.array_equal(got, want, equal_nan=kind != "count")
            for j in sample:
                s = uni.state(j)
                c = core.state(x1[j], x2[j])
                assert s.count == c.count and (kind == "count" or s.scaled_sum == c.scaled_sum)
    if kind != "count":
        assert not uni._big  # ordinary data: every sum fits a pair of floats


# ---- the vectorised exact arithmetic on its own ----------------------------------------------------------------
finite_st = st.floats(allow_nan=False, allow_infinity=False)
sum_st = st.lists(st.one_of(finite_st, st.sampled_from(U_YS), st.integers(-9, 9).map(float)), min_size=1,
                  max_size=6).map(lambda ys: sum(exact(y) for y in ys))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(vs=st.lists(sum_st, min_size=1, max_size=30), d=st.one_of(finite_st, st.sampled_from(U_YS)))
def test_dd_add_is_exact_or_flags(vs, d):
    pairs = [ra._dd_of(v) for v in vs]
    keep = [i for i, p in enumerate(pairs) if p is not None]
    if not keep:
        return
    h = np.array([pairs[i][0] for i in keep])
    l = np.array([pairs[i][1] for i in keep])
    h1, l1, bad = ra._dd_add(h, l, d)
    bad = set(bad.tolist())
    for j, i in enumerate(keep):  # unflagged: exact and normalised (a flag only sends it to the exact ints)
        if j not in bad:
            assert (h1[j], l1[j]) == ra._dd_of(vs[i] + exact(d))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(vs=st.lists(st.tuples(sum_st, st.integers(1, 40)), min_size=1, max_size=30))
def test_avg_certificates_match_exact_division(vs):
    rows = [(ra._dd_of(v), v, c) for v, c in vs]
    rows = [(p, v, c) for p, v, c in rows if p is not None]
    if not rows:
        return
    h = np.array([p[0] for p, _, _ in rows])
    l = np.array([p[1] for p, _, _ in rows])
    c = np.array([c for _, _, c in rows], dtype=np.int64)
    want = [_round(Fraction(v, 1 << 1074) / c_) for _, v, c_ in rows]
    for fn in (ra._avg_of, ra._avg_exact):
        got, ok = fn(h, l, c)
        for g, o, w in zip(got.tolist(), ok.tolist(), want):
            if o:
                assert g == w


def test_avg_ties_round_to_even():
    """Means exactly halfway between two floats (common: coarse data, small counts) round half to even."""
    cases = [((2.0 ** 53, 2.0 ** 53 + 2), 2.0 ** 53), ((2.0 ** 53 + 2, 2.0 ** 53 + 4), 2.0 ** 53 + 4),
             ((1.0, 1.0 + 2.0 ** -52), 1.0), ((-(2.0 ** 53), -(2.0 ** 53) - 2), -(2.0 ** 53))]
    for ys, want in cases:
        v = sum(exact(y) for y in ys)
        h, l = ra._dd_of(v)
        got, ok = ra._avg_exact(np.array([h]), np.array([l]), np.array([len(ys)]))
        assert ok[0] and got[0] == want == to_float_mean(ys)
        core = RangeAggCore("avg")
        core.load(list(range(len(ys))), [1.0] * len(ys), list(ys))
        assert AggUnicast("avg", [0.0], [2.0], core).values()[0] == want


def to_float_mean(ys) -> float:
    return _round(sum((Fraction(y) for y in ys), Fraction(0)) / len(ys))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kind=st.sampled_from(["count", "sum", "avg"]),
       init=st.lists(st.tuples(st.sampled_from(U_KEYS), st.sampled_from(U_XS), u_ys_st), max_size=12),
       batches=st.lists(st.lists(u_op_st, min_size=1, max_size=4), min_size=1, max_size=6),
       subs=st.lists(u_sub_st, min_size=1, max_size=80),
       bucket_size=st.sampled_from([1, 2, 4, None]), short_run=st.sampled_from([0, 256]))
def test_unicast_batched_messages(kind, init, batches, subs, bucket_size, short_run):
    """Several updates' messages in one apply (up to 8 X values: every rectangle i..j of the decomposition,
    with net deltas that cancel, and totals no single float holds) vs brute force before / after the batch."""
    with short_runs(short_run):
        _batched(kind, init, batches, subs, bucket_size)


def _batched(kind, init, batches, subs, bucket_size):
    core = RangeAggCore(kind)
    points: dict = {}
    for k, x, y in init:
        points.setdefault(k, (float(x), float(y)))
    core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    x1s = np.array([s_[0] for s_ in subs], dtype=float)
    x2s = np.array([s_[1] for s_ in subs], dtype=float)
    uni = AggUnicast(kind, x1s, x2s, core, bucket_size=bucket_size)
    for ops in batches:
        before = [sql_value(kind, exact_state(points, a, b)) for a, b in subs]
        msgs = []
        for op in ops:
            key, old = op[1], core.get(op[1])
            if op[0] == "del":
                if old is not None:
                    msgs += core.delete(key).messages
                continue
            if op[0] == "up":
                new = (op[2], op[3])
            elif old is None:
                continue
            else:
                new = {"xmove": lambda: (op[2], old[1]), "yup": lambda: (old[0], op[2]), "same": lambda: old}[op[0]]()
            msgs += core.upsert(key, *new).messages
        points = {k: core.get(k) for k in points.keys() | set(U_KEYS) if k in core}
        after = [sql_value(kind, exact_state(points, a, b)) for a, b in subs]
        touched0 = uni.counters["touched"]
        idx, vals = uni.apply(msgs + [ra.Message(NAN, 1, 1.0)])  # a NaN X reaches nothing
        changed = {j for j in range(len(subs)) if not same_array_value(before[j], after[j])}
        assert set(idx.tolist()) == changed and len(idx) == len(changed)
        for j, v in zip(idx.tolist(), vals.tolist()):
            assert same_array_value(v, after[j])
        xs_hit = {m.x for m in msgs}
        assert uni.counters["touched"] - touched0 == sum(1 for a, b in subs if any(a <= x <= b for x in xs_hit))
        check_unicast(uni, kind, points, subs)


def test_unicast_bad_arguments():
    with pytest.raises(ValueError, match="unknown aggregate kind"):
        AggUnicast("max", [0.0], [1.0])
    with pytest.raises(ValueError, match="differ in length"):
        AggUnicast("sum", [0.0, 1.0], [1.0])
    uni = AggUnicast("sum", [0.0, 2.0, np.nan], [1.0, 1.0, 5.0])  # no core: all empty; [2, 1] and NaN hold nothing
    assert np.isnan(uni.values()).all() and uni.state(1) == AggState() and uni.state(2) == AggState()
    idx, vals = uni.apply([Message(1.0, 1, 2.5)])
    assert idx.tolist() == [0] and vals.tolist() == [2.5] and uni.counters == {"touched": 1, "notified": 1}


@pytest.mark.parametrize("short_run", [0, 256])
@pytest.mark.parametrize("bucket_size", [1, 2, 3, 8, 50, None])
def test_layout_rectangles_against_brute_force(bucket_size, short_run, monkeypatch):
    """Every rectangle form a decomposition produces (bounded or not on each side), through the bucket runs with
    partial buckets (as slices or as one index array) and through the narrow-slice scans: select and count ==
    a brute-force filter."""
    monkeypatch.setattr(ra, "_SHORT_RUN", short_run)
    r = np.random.default_rng(bucket_size or 0)
    x1 = r.choice([-INF, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, NAN], 400)
    x2 = r.choice([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, INF], 400)
    lay = ra._StabLayout(x1, x2, bucket_size)
    assert sorted(lay.slot.tolist()) == np.flatnonzero(x1 <= x2).tolist()
    marks = [0.5, 1.0, 2.0, 2.5, 3.0, 5.0, 6.0]
    for a1 in [None] + marks:
        for b1 in marks:
            for a2 in marks:
                for b2 in [None] + marks:
                    want = (x1 <= b1) & (x2 >= a2) & (x1 <= x2)  # (an empty range is no point: never reached)
                    if a1 is not None:
                        want &= x1 > a1
                    if b2 is not None:
                        want &= x2 < b2
                    sel = lay.select(a1, b1, a2, b2)
                    got = [] if sel is None else lay.slot[sel.positions()].tolist()
                    assert sorted(got) == np.flatnonzero(want).tolist() and len(got) == len(set(got))
                    assert lay.count(a1, b1, a2, b2) == len(got)
                    if sel is not None:  # take / put round trip through the pieces
                        v = np.arange(lay.M, dtype=float)
                        part = sel.take(v)
                        assert part.tolist() == sel.positions().astype(float).tolist()
                        sel.put(v, part + 0.5)
                        assert np.array_equal(v[sel.positions()], part + 0.5)
                        assert np.count_nonzero(v % 1) == len(got)  # nothing else written
