"""Tests of sparksub.operators.range_agg against a brute-force oracle.

Oracle: a plain dict ``key -> (x, y)``; COUNT / SUM / AVG over every subscription range are recomputed from it
after every update with exact rational arithmetic (``fractions.Fraction``), then rounded once to float; the
module must agree *exactly* (000 §4; SQL: COUNT of nothing = 0, SUM / AVG of nothing = NULL).  Every subscriber's
state is maintained only from the messages via the subscriber-side :func:`apply`.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.range_agg import (
    AggState,
    AggUnicast,
    Message,
    RangeAggCore,
    apply,
    exact,
    matches,
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
    assert idx.tolist() == [0, 2] and vals.tolist() == [0, 2]
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
