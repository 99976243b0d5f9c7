"""Tests of sparksub.operators.distinct.core against a brute-force oracle.

Oracle: a plain dict ``key -> (x, y)``; every subscription's DISTINCT set is recomputed from it after every update
(000 §4; dissertation §5.4).  Every subscriber's local set is maintained *only* from the messages via the
subscriber-side :func:`apply`; the unicast helper must notify exactly the subscriptions whose set changed.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.distinct.core import (
    ADD,
    REMOVE,
    Message,
    RangeDistinctCore,
    affected,
    apply,
    matches,
    notifications,
)

INF = math.inf


# ----------------------------------------------------------------------------------------------------------------
# brute-force oracle
# ----------------------------------------------------------------------------------------------------------------
def oracle_set(points: dict, x1: float, x2: float) -> set:
    return {y for (x, y) in points.values() if x1 <= x <= x2}


def brute_dmar(points: dict, key, x0: float, y0):
    """DISTINCT Mar of tuple `key` at (x0, y0) w.r.t. the other tuples with Y == y0 (000 §4); None = ∅."""
    others = [x for k, (x, y) in points.items() if k != key and y == y0]
    if x0 in others:
        return None
    return (max([x for x in others if x < x0], default=-INF), min([x for x in others if x > x0], default=INF))


# ----------------------------------------------------------------------------------------------------------------
# worked examples
# ----------------------------------------------------------------------------------------------------------------
def _example_core():
    core = RangeDistinctCore()
    # y = "A" at 10, 30, 30, 60; y = "B" at 20; y = 1.0 at 40
    core.load(["a1", "a2", "a3", "a4", "b", 7], [10, 30, 30, 60, 20, 40], ["A", "A", "A", "A", "B", 1.0])
    return core


def test_insert_delete_messages_and_mar():
    core = _example_core()
    assert core.distinct_values(15, 35) == {"A", "B"}
    assert core.distinct_values(35, 50) == {1.0}
    assert core.distinct_values(61, 70) == set() and core.distinct_values(5, 4) == set()
    out = core.upsert("a5", 45, "A")  # between 30 and 60: DMar = (30, 60)
    assert out.kind == "insert" and out.messages == (Message(ADD, "A", 45.0, 45.0, 30.0, 60.0),)
    out = core.upsert("c", 50, "C")  # first "C": DMar = (-inf, inf)
    assert out.messages == (Message(ADD, "C", 50.0, 50.0, -INF, INF),)
    out = core.delete("a2")  # another "A" at 30: DMar = ∅ -> ignorable
    assert out.kind == "delete" and out.ignorable and out.messages == ()
    out = core.delete("a3")  # now the only "A" at 30: DMar = (10, 45)
    assert out.messages == (Message(REMOVE, "A", 30.0, 30.0, 10.0, 45.0),)
    assert core.counters == {"updates": 4, "messages": 3, "ignorable": 1}
    assert core.distinct_values(-INF, INF) == {"A", "B", 1.0, "C"}
    core.check_invariants()


def test_x_move_is_consolidated():
    """An X-move with unchanged Y: a subscriber whose range contains both the old and the new X hears nothing."""
    core = _example_core()  # "A" at 10, 30, 30, 60
    out = core.upsert("a4", 50, "A")  # 60 -> 50, gap (30, +inf)
    assert out.kind == "x_move"
    assert out.messages == (Message(REMOVE, "A", 60.0, 60.0, 50.0, INF), Message(ADD, "A", 50.0, 50.0, 30.0, 60.0))
    for x1, x2 in [(45, 65), (50, 60), (31, INF), (50, 50)]:
        s = core.distinct_values(x1, x2)
        assert apply(out.messages, s, x1, x2) == (1 if (x1, x2) == (50, 50) else 0)
    assert [matches(m, 55, 65) for m in out.messages] == [True, False]  # lost "A"
    assert [matches(m, 35, 55) for m in out.messages] == [False, True]  # gained "A"
    out = core.upsert("a1", 40, "A")  # 10 -> 40 across the "A"s at 30: plain REMOVE + ADD, different ranges
    assert out.messages == (Message(REMOVE, "A", 10.0, 10.0, -INF, 30.0), Message(ADD, "A", 40.0, 40.0, 30.0, 50.0))
    out = core.upsert("b", 20, 1.0)  # Y change at the same X: REMOVE "B", ADD 1.0 (its only other tuple is at 40)
    assert out.kind == "y_update"
    assert out.messages == (Message(REMOVE, "B", 20.0, 20.0, -INF, INF), Message(ADD, 1.0, 20.0, 20.0, -INF, 40.0))
    assert core.upsert("b", 20, 1).kind == "unchanged"  # 1 == 1.0, as in a Python set
    core.check_invariants()


def test_unicast_helpers_and_open_ends():
    out = RangeDistinctCore().upsert(1, 5, "v")
    x1 = np.array([-INF, -INF, 5.0, 6.0, 0.0, np.nan])
    x2 = np.array([INF, 4.0, 5.0, INF, 5.0, 9.0])
    assert affected(x1, x2, out).tolist() == [0, 2, 4]
    sub, msg = notifications(x1, x2, out)
    assert sub.tolist() == [0, 2, 4] and msg.tolist() == [0, 0, 0]
    assert affected(x1, x2, ()).tolist() == [] and notifications(x1, x2, [])[0].tolist() == []


def test_bad_input():
    core = RangeDistinctCore()
    with pytest.raises(BadUpdate, match="'k1'"):
        core.upsert("k1", float("nan"), "a")
    with pytest.raises(BadUpdate, match="'k2'"):
        core.upsert("k2", INF, "a")
    with pytest.raises(BadUpdate, match="'k3'"):
        core.upsert("k3", "1.0", "a")
    with pytest.raises(BadUpdate, match="'k4'"):
        core.upsert("k4", 1.0, float("nan"))
    with pytest.raises(BadUpdate, match="'k5'"):
        core.upsert("k5", 1.0, ["unhashable"])
    with pytest.raises(BadUpdate, match="unknown key 'nope'"):
        core.delete("nope")
    with pytest.raises(BadUpdate, match=r"duplicate key 1.*row 1"):
        core.load([1, 1], [0.0, 1.0], ["a", "b"])
    with pytest.raises(BadUpdate, match=r"row 0"):
        core.load(["z"], [np.nan], ["a"])
    assert len(core) == 0 and core.counters["updates"] == 0
    core.upsert(None, 1.0, None)  # None key and None value are ordinary hashables
    assert core.distinct_values(0, 2) == {None}


# ----------------------------------------------------------------------------------------------------------------
# Hypothesis / random: messages vs oracle
# ----------------------------------------------------------------------------------------------------------------
ENDS = [-INF, -1, 0, 0.5, 1, 2, 2.5, 3, 4, 5, 6, INF]
KEYS = [0, 1, 2, 3, 4, 5, "k0", "k1", "k2"]
YS = [0.0, 1.0, 2.5, "a", "b"]

keys_st = st.sampled_from(KEYS)
xs_st = st.integers(0, 5)
ys_st = st.sampled_from(YS)
op_st = st.one_of(
    st.tuples(st.just("up"), keys_st, xs_st, ys_st),
    st.tuples(st.just("xmove"), keys_st, xs_st),  # X change of an existing key (Y kept)
    st.tuples(st.just("yup"), keys_st, ys_st),  # Y change of an existing key (X kept)
    st.tuples(st.just("del"), keys_st),
)
sub_st = st.tuples(st.sampled_from(ENDS), st.sampled_from(ENDS)).map(lambda t: (min(t), max(t)))


def run_scenario(init, ops, subs):
    core = RangeDistinctCore()
    points: dict = {}
    for k, x, y in init:
        if k not in points:
            points[k] = (float(x), y)
    core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    local = [oracle_set(points, x1, x2) for x1, x2 in subs]
    x1s = np.array([s[0] for s in subs], dtype=float)
    x2s = np.array([s[1] for s in subs], dtype=float)
    n_updates = n_messages = n_ignorable = 0
    for op in ops:
        key = op[1]
        if op[0] == "del":
            if key not in points:
                with pytest.raises(BadUpdate):
                    core.delete(key)
                continue
            old = points[key]
            out = core.delete(key)
            new_points = {k: v for k, v in points.items() if k != key}
            assert out.kind == "delete" and len(out.messages) <= 1
            if out.messages:
                assert out.messages[0] == Message(REMOVE, old[1], old[0], old[0], *brute_dmar(points, key, *old))
            else:
                assert brute_dmar(points, key, *old) is None
        else:
            if op[0] == "up":
                _, _, x, y = op
            elif key not in points:
                continue
            elif op[0] == "xmove":
                x, y = op[2], points[key][1]
            else:
                x, y = points[key][0], op[2]
            x = float(x)
            old = points.get(key)
            out = core.upsert(key, x, y)
            new_points = dict(points)
            new_points[key] = (x, y)
            assert len(out.messages) <= 2
            if old is None:
                assert out.kind == "insert"
                mar = brute_dmar(new_points, key, x, y)
                assert out.messages == (() if mar is None else (Message(ADD, y, x, x, *mar),))
            elif old == (x, y):
                assert out.kind == "unchanged" and out.messages == ()
            elif old[1] == y:
                assert out.kind == "x_move"
        n_updates += 1
        n_messages += len(out.messages)
        n_ignorable += not out.messages
        changed = set()
        for i, (x1, x2) in enumerate(subs):
            before = oracle_set(points, x1, x2)
            after = oracle_set(new_points, x1, x2)
            assert local[i] == before
            hits = [m for m in out.messages if matches(m, x1, x2)]
            assert len({m.value for m in hits}) == len(hits)  # at most one message per value
            assert apply(out.messages, local[i], x1, x2) == len(hits)
            assert local[i] == after, (op, x1, x2, before, after, out)
            assert bool(hits) == (before != after)  # notified <=> changed
            if before != after:
                changed.add(i)
            if out.kind == "x_move" and x1 <= old[0] <= x2 and x1 <= x <= x2:
                assert hits == []  # the consolidated X-move: both X in range -> no message
            assert core.distinct_values(x1, x2) == after
        assert set(affected(x1s, x2s, out).tolist()) == changed
        sub, msg = notifications(x1s, x2s, out)
        assert set(sub.tolist()) == changed and len(sub) == len(msg)
        points = new_points
        core.check_invariants()
        assert len(core) == len(points)
    assert core.counters == {"updates": n_updates, "messages": n_messages, "ignorable": n_ignorable}


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(init=st.lists(st.tuples(keys_st, xs_st, ys_st), max_size=9),
       ops=st.lists(op_st, min_size=1, max_size=16),
       subs=st.lists(sub_st, min_size=1, max_size=14))
def test_messages_against_oracle(init, ops, subs):
    run_scenario(init, ops, subs)


def test_all_grid_subscriptions_random():
    """Every subscription over the ENDS grid, longer random sequences, many X ties and Y duplicates."""
    rnd = random.Random(3)
    subs = [(a, b) for a in ENDS for b in ENDS if a <= b]
    for _ in range(25):
        init = [(rnd.choice(KEYS), rnd.randrange(6), rnd.choice(YS)) for _ in range(rnd.randrange(10))]
        ops = []
        for _ in range(40):
            r = rnd.random()
            k = rnd.choice(KEYS)
            if r < 0.3:
                ops.append(("xmove", k, rnd.randrange(6)))
            elif r < 0.5:
                ops.append(("yup", k, rnd.choice(YS)))
            elif r < 0.85:
                ops.append(("up", k, rnd.randrange(6), rnd.choice(YS)))
            else:
                ops.append(("del", k))
        run_scenario(init, ops, subs)


@pytest.mark.parametrize("n_values", [3, 400])
def test_distinct_values_both_paths(n_values):
    """Few values (per-value bisect path) and many values (range-scan path) against the oracle."""
    rnd = random.Random(n_values)
    core = RangeDistinctCore()
    points = {k: (float(rnd.randrange(300)), rnd.randrange(n_values)) for k in range(600)}
    core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    for step in range(300):
        k = rnd.randrange(650)
        if k in points and step % 3 == 0:
            core.delete(k)
            del points[k]
        else:
            p = (float(rnd.randrange(300)), rnd.randrange(n_values))
            core.upsert(k, *p)
            points[k] = p
        a = rnd.uniform(-10, 310)
        b = a + rnd.expovariate(1 / 60)
        assert core.distinct_values(a, b) == oracle_set(points, a, b)
    core.check_invariants()
    assert core.distinct_values(-INF, INF) == {y for _, y in points.values()}
    assert core.num_values() == len({y for _, y in points.values()})
