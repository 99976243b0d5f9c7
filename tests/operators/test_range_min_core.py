"""Tests of sparksub.operators.range_min.core against the paper's worked examples and a brute-force oracle.

Oracle: plain Python lists; every subscription's MIN (MAX) is recomputed from scratch after every step, and Mar /
Corollary 6 classification are recomputed from their definitions (000 §2; dissertation Definition 7, Corollary 6).
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.range_min.core import A2BTree, Message, RangeMinCore, matches

INF = math.inf


# ----------------------------------------------------------------------------------------------------------------
# brute-force oracle
# ----------------------------------------------------------------------------------------------------------------
def oracle_value(points: dict, x1: float, x2: float, maximum: bool = False):
    vals = [y for (x, y) in points.values() if x1 <= x <= x2]
    if not vals:
        return None
    return max(vals) if maximum else min(vals)


def brute_mar(others: list, x0: float, y0: float):
    """Mar(x0, y0) w.r.t. `others` (list of (x, y), MIN sign); None = ∅ (Definition 7)."""
    if any(x == x0 and y <= y0 for x, y in others):
        return None
    left = max([x for x, y in others if x < x0 and y <= y0], default=-INF)
    right = min([x for x, y in others if x > x0 and y <= y0], default=INF)
    return (left, right)


def brute_kind(others: list, x0: float, yo: float, yn: float) -> str:
    """Corollary 6 on Δ(t: x0, yo → yn) (yo / yn may be ∞ for insert / delete), MIN sign."""
    mo = brute_mar(others, x0, yo)
    mn = brute_mar(others, x0, yn)
    if mo is None and mn is None:
        return "ignorable"
    if mn is not None and (mo is None or (mn[0] <= mo[0] and mo[1] <= mn[1])):
        return "good"
    return "bad"


# ----------------------------------------------------------------------------------------------------------------
# Worked examples (digest C.2 instance; 000 §2-3; dissertation Fig. 5.1)
# ----------------------------------------------------------------------------------------------------------------
FIG51 = {"t2": (20, 3), "t3": (30, 8), "t4": (40, 12), "t5": (50, 5), "t6": (70, 6), "t7": (70, 7), "t8": (100, 2)}


def _fig51_core(maximum=False):
    core = RangeMinCore(maximum=maximum)
    sgn = -1 if maximum else 1
    core.load(list(FIG51), [p[0] for p in FIG51.values()], [sgn * p[1] for p in FIG51.values()])
    return core


def test_good_example_t4():
    core = _fig51_core()
    out = core.upsert("t4", 40, 4)
    assert [s.kind for s in out.steps] == ["good"]
    assert list(out.messages) == [Message(4.0, 40.0, 40.0, 20.0, 100.0)]


def test_bad_example_t5():
    core = _fig51_core()
    out = core.upsert("t5", 50, 9)
    assert [s.kind for s in out.steps] == ["bad"]
    assert set(out.messages) == {Message(9.0, 50.0, 50.0, 30.0, 70.0), Message(8.0, 30.0, 50.0, 20.0, 70.0),
                                 Message(6.0, 50.0, 70.0, 20.0, 100.0)}
    assert len(out.messages) == 3


def test_ignorable_example_t7():
    core = _fig51_core()
    out = core.upsert("t7", 70, 9)
    assert [s.kind for s in out.steps] == ["ignorable"] and out.messages == ()
    out = core.upsert("t7", 70, 6.5)
    assert [s.kind for s in out.steps] == ["ignorable"]


def test_max_mode_mirrors_examples():
    core = _fig51_core(maximum=True)
    out = core.upsert("t4", 40, -4)
    assert list(out.messages) == [Message(-4.0, 40.0, 40.0, 20.0, 100.0)]
    core.upsert("t4", 40, -12)
    out = core.upsert("t5", 50, -9)
    assert set(out.messages) == {Message(-9.0, 50.0, 50.0, 30.0, 70.0), Message(-8.0, 30.0, 50.0, 20.0, 70.0),
                                 Message(-6.0, 50.0, 70.0, 20.0, 100.0)}
    assert core.range_value(25, 45) == -8.0
    assert core.get("t5") == (50.0, -9.0)


def test_unchanged_update_is_ignorable_and_insert_delete():
    core = _fig51_core()
    assert core.upsert("t5", 50, 5).kinds == ("ignorable",)
    out = core.delete("t8")  # only tuple at 100: peak at ∞
    assert out.kinds == ("bad",)
    assert Message(None, 100.0, 100.0, 70.0, INF) in out.messages
    assert core.range_value(90, 200) is None
    out = core.upsert("t9", 150, 1)
    assert out.kinds == ("good",) and out.messages == (Message(1.0, 150.0, 150.0, -INF, INF),)
    with pytest.raises(BadUpdate):
        core.delete("nope")
    with pytest.raises(BadUpdate):
        core.upsert("t1", float("nan"), 1)
    out = core.upsert("t9", 10, 1)  # X-move: delete step then insert step
    assert out.kinds == ("bad", "good")
    c = core.counters
    assert c["updates"] == 4 and c["messages"] >= 3 and c["find"] > 0


def test_matches_open_ends():
    m = Message(1.0, 5.0, 5.0, -INF, INF)
    assert matches(m, -INF, INF) and matches(m, -INF, 5) and matches(m, 5, 5) and not matches(m, 6, 7)
    m = Message(1.0, 5.0, 5.0, 0.0, 10.0)
    assert not matches(m, -INF, 5) and not matches(m, 5, INF) and matches(m, 0.5, 9.5)
    assert not matches(m, 0.0, 6) and not matches(m, 1, 10.0)


# ----------------------------------------------------------------------------------------------------------------
# Hypothesis: messages vs oracle
# ----------------------------------------------------------------------------------------------------------------
ENDS = [-INF, -1, 0, 0.5, 1, 2, 2.5, 3, 4, 5, 6, 7, INF]

keys_st = st.integers(0, 7)
xs_st = st.integers(0, 6)
ys_st = st.integers(0, 4)
op_st = st.one_of(
    st.tuples(st.just("up"), keys_st, xs_st, ys_st),
    st.tuples(st.just("up"), keys_st, xs_st, ys_st),
    st.tuples(st.just("yup"), keys_st, ys_st),  # Y change of an existing key (X kept)
    st.tuples(st.just("del"), keys_st),
)
sub_st = st.tuples(st.sampled_from(ENDS), st.sampled_from(ENDS)).map(lambda t: (min(t), max(t)))


def _check_step(step, before: dict, after: dict, subs, maximum: bool, sub_vals: list):
    assert step.kind in ("ignorable", "good", "bad")
    if step.kind == "ignorable":
        assert step.messages == ()
    if step.kind == "good":
        assert len(step.messages) == 1
        m = step.messages[0]
        assert m.inner_l == m.inner_r
    for i, (x1, x2) in enumerate(subs):
        old = oracle_value(before, x1, x2, maximum)
        new = oracle_value(after, x1, x2, maximum)
        assert sub_vals[i] == old
        hit = [m for m in step.messages if matches(m, x1, x2)]
        if new == old:
            assert hit == [], (x1, x2, old, hit)
        else:
            assert len(hit) == 1, (x1, x2, old, new, step)
            assert hit[0].new_value == new
            sub_vals[i] = new


def _delete_kind(k: str) -> str:
    # A deletion whose Mar(x, ∞) equals Mar(x, y_o) is "good" by the letter of Corollary 6, but the module labels
    # every non-ignorable deletion "bad" (digest C.8); the message (peak at ∞, Mar ends) is the same either way.
    return "bad" if k == "good" else k


def _expected_kind(before: dict, key, x_new, y_new, maximum: bool):
    """Corollary 6 kind(s) from the brute-force Mar, in MIN sign."""
    sg = -1 if maximum else 1
    if key not in before:
        others = [(x, sg * y) for x, y in before.values()]
        return [brute_kind(others, x_new, INF, sg * y_new)]
    xo, yo = before[key]
    others = [(x, sg * y) for k, (x, y) in before.items() if k != key]
    if y_new is None:  # delete
        return [_delete_kind(brute_kind(others, xo, sg * yo, INF))]
    if xo == x_new:
        if yo == y_new:
            return ["ignorable"]
        return [brute_kind(others, xo, sg * yo, sg * y_new)]
    return [_delete_kind(brute_kind(others, xo, sg * yo, INF)), brute_kind(others, x_new, INF, sg * y_new)]


def run_scenario(init, ops, subs, maximum, leaf_capacity=4):
    core = RangeMinCore(maximum=maximum, leaf_capacity=leaf_capacity)
    points = {}
    for k, x, y in init:
        if k not in points:
            points[k] = (float(x), float(y))
    if points:
        core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    sub_vals = [oracle_value(points, x1, x2, maximum) for x1, x2 in subs]
    for op in ops:
        if op[0] == "del":
            if op[1] not in points:
                with pytest.raises(BadUpdate):
                    core.delete(op[1])
                continue
            key = op[1]
            exp = _expected_kind(points, key, None, None, maximum)
            out = core.delete(key)
            states = [points, {k: v for k, v in points.items() if k != key}]
        else:
            if op[0] == "yup":
                _, key, y = op
                if key not in points:
                    continue
                x = points[key][0]
            else:
                _, key, x, y = op
            x, y = float(x), float(y)
            exp = _expected_kind(points, key, x, y, maximum)
            out = core.upsert(key, x, y)
            new = dict(points)
            new[key] = (x, y)
            if key in points and points[key][0] != x:
                mid = {k: v for k, v in points.items() if k != key}
                states = [points, mid, new]
            else:
                states = [points, new]
        assert len(out.steps) == len(states) - 1
        assert [s.kind for s in out.steps] == exp
        for i, step in enumerate(out.steps):
            _check_step(step, states[i], states[i + 1], subs, maximum, sub_vals)
        points = states[-1]
        for i, (x1, x2) in enumerate(subs):
            exp_v = oracle_value(points, x1, x2, maximum)
            assert sub_vals[i] == exp_v  # final value (also after an X-move)
            assert core.range_value(x1, x2) == exp_v
        if subs:
            vals = core.range_values([s[0] for s in subs], [s[1] for s in subs])
            for v, (x1, x2) in zip(vals.tolist(), subs):
                exp_v = oracle_value(points, x1, x2, maximum)
                assert (math.isnan(v) if exp_v is None else v == exp_v)
        core.tree.check_invariants()
        assert len(core) == len(points)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(init=st.lists(st.tuples(keys_st, xs_st, ys_st), max_size=8),
       ops=st.lists(op_st, min_size=1, max_size=14),
       subs=st.lists(sub_st, min_size=1, max_size=14),
       maximum=st.booleans())
def test_messages_against_oracle(init, ops, subs, maximum):
    run_scenario(init, ops, subs, maximum)


def test_messages_against_oracle_all_subscriptions_random():
    """Every subscription over the ENDS grid, longer random sequences, both signs, bigger leaves too."""
    rnd = random.Random(7)
    subs = [(a, b) for a in ENDS for b in ENDS if a <= b]
    for trial in range(30):
        maximum = trial % 2 == 1
        init = [(rnd.randrange(10), rnd.randrange(7), rnd.randrange(5)) for _ in range(rnd.randrange(10))]
        ops = []
        for _ in range(40):
            r = rnd.random()
            if r < 0.4:
                ops.append(("yup", rnd.randrange(10), rnd.randrange(5)))
            elif r < 0.8:
                ops.append(("up", rnd.randrange(10), rnd.randrange(7), rnd.randrange(5)))
            else:
                ops.append(("del", rnd.randrange(10)))
        run_scenario(init, ops, subs, maximum, leaf_capacity=4 if trial % 3 else 8)


def test_larger_random_against_oracle():
    """Many leaves (capacity 4), deep segment tree, many Y ties."""
    rnd = random.Random(11)
    xs_dom = 120
    subs = [(-INF, INF), (-INF, 30), (60, INF)] + [
        tuple(sorted((rnd.randrange(-2, xs_dom + 2), rnd.randrange(-2, xs_dom + 2)))) for _ in range(60)]
    for maximum in (False, True):
        init = [(k, rnd.randrange(xs_dom), rnd.randrange(20)) for k in range(150)]
        ops = []
        for _ in range(300):
            r = rnd.random()
            k = rnd.randrange(180)
            if r < 0.5:
                ops.append(("yup", k, rnd.randrange(20)))
            elif r < 0.85:
                ops.append(("up", k, rnd.randrange(xs_dom), rnd.randrange(20)))
            else:
                ops.append(("del", k))
        run_scenario(init, ops, subs, maximum)


# ----------------------------------------------------------------------------------------------------------------
# A2BTree against brute force
# ----------------------------------------------------------------------------------------------------------------
def _per_x_min(points: dict) -> dict:
    d = {}
    for x, y in points.values():
        if x not in d or y < d[x]:
            d[x] = y
    return d


def _check_tree(tree: A2BTree, points: dict, probes_x, probes_y):
    tree.check_invariants()
    assert len(tree) == len(points)
    pm = _per_x_min(points)
    for k in points:
        assert k in tree and tree.get(k) == points[k]
    for x in probes_x:
        ys = sorted((y, k) for k, (xx, y) in points.items() if xx == x)
        assert tree.min_at(x) == (ys[0][0] if ys else INF)
        for y_, k in ys:
            rest = [yy for yy, kk in ys if kk != k]
            assert tree.min_at(x, exclude=k) == (min(rest) if rest else INF)
        for y in probes_y:
            for strict in (False, True):
                ok = (lambda v: v < y) if strict else (lambda v: v <= y)
                rs = sorted(xx for xx, v in pm.items() if xx > x and ok(v))
                exp = (rs[0], pm[rs[0]]) if rs else (INF, -INF)
                assert tree.find_right(x, y, strict) == exp
                ls = sorted(xx for xx, v in pm.items() if xx < x and ok(v))
                exp = (ls[-1], pm[ls[-1]]) if ls else (-INF, -INF)
                assert tree.find_left(x, y, strict) == exp
    qs = [(a, b) for a in probes_x for b in probes_x]
    for a, b in qs:
        vals = [v for xx, v in pm.items() if a <= xx <= b]
        assert tree.range_min(a, b) == (min(vals) if vals else INF)
    got = tree.range_min_many([a for a, _ in qs], [b for _, b in qs])
    for (a, b), g in zip(qs, got.tolist()):
        vals = [v for xx, v in pm.items() if a <= xx <= b]
        assert g == (min(vals) if vals else INF)


tree_op = st.one_of(
    st.tuples(st.just("ins"), st.integers(0, 40), st.integers(0, 25), st.integers(0, 6)),
    st.tuples(st.just("rem"), st.integers(0, 40)),
    st.tuples(st.just("upd"), st.integers(0, 40), st.integers(0, 6)),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(init=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 25), st.integers(0, 6)), max_size=40),
       ops=st.lists(tree_op, max_size=60), bulk=st.booleans())
def test_a2btree_against_brute_force(init, ops, bulk):
    tree = A2BTree(leaf_capacity=4)
    points = {}
    for k, x, y in init:
        if k not in points:
            points[k] = (float(x), float(y))
    if bulk:
        tree.bulk_load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    else:
        for k, (x, y) in points.items():
            tree.insert(k, x, y)
    probes_x = [-INF, -1.0, 0.0, 3.0, 3.5, 7.0, 12.0, 20.0, 25.0, 26.0, INF]
    probes_y = [-1.0, 0.0, 2.0, 3.5, 6.0, INF]
    _check_tree(tree, points, probes_x, probes_y)
    for op in ops:
        if op[0] == "ins":
            _, k, x, y = op
            if k in points:
                with pytest.raises(KeyError):
                    tree.insert(k, x, y)
                continue
            tree.insert(k, x, y)
            points[k] = (float(x), float(y))
        elif op[0] == "rem":
            if op[1] not in points:
                with pytest.raises(KeyError):
                    tree.remove(op[1])
                continue
            assert tree.remove(op[1]) == points.pop(op[1])
        else:
            _, k, y = op
            if k not in points:
                continue
            assert tree.update_y(k, y) == points[k][1]
            points[k] = (points[k][0], float(y))
        tree.check_invariants()
    _check_tree(tree, points, probes_x, probes_y)


def test_a2btree_many_leaves_and_bulk():
    rnd = np.random.default_rng(3)
    n = 3000
    xs = rnd.integers(0, 2000, n).astype(float)
    ys = rnd.integers(0, 500, n).astype(float)
    tree = A2BTree(leaf_capacity=8)
    tree.bulk_load(list(range(n)), xs, ys)
    points = {k: (float(x), float(y)) for k, x, y in zip(range(n), xs, ys)}
    pyr = random.Random(5)
    for _ in range(3000):
        k = pyr.randrange(n + 200)
        if k in points and pyr.random() < 0.4:
            tree.remove(k)
            del points[k]
        elif k in points:
            y = float(pyr.randrange(500))
            tree.update_y(k, y)
            points[k] = (points[k][0], y)
        else:
            x, y = float(pyr.randrange(2000)), float(pyr.randrange(500))
            tree.insert(k, x, y)
            points[k] = (x, y)
    tree.check_invariants()
    pm = _per_x_min(points)
    sx = sorted(pm)
    for _ in range(300):
        x = pyr.uniform(-10, 2010)
        y = float(pyr.randrange(-5, 120))
        for strict in (False, True):
            rs = [xx for xx in sx if xx > x and (pm[xx] < y if strict else pm[xx] <= y)]
            assert tree.find_right(x, y, strict) == ((rs[0], pm[rs[0]]) if rs else (INF, -INF))
            ls = [xx for xx in sx if xx < x and (pm[xx] < y if strict else pm[xx] <= y)]
            assert tree.find_left(x, y, strict) == ((ls[-1], pm[ls[-1]]) if ls else (-INF, -INF))
    a = rnd.uniform(-10, 2010, 500)
    b = a + rnd.exponential(200, 500)
    got = tree.range_min_many(a, b)
    arr_x = np.array(sx)
    arr_m = np.array([pm[x] for x in sx])
    for ai, bi, g in zip(a, b, got):
        sel = arr_m[(arr_x >= ai) & (arr_x <= bi)]
        exp = sel.min() if len(sel) else INF
        assert g == exp and tree.range_min(ai, bi) == exp
