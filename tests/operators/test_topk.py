"""Tests of sparksub.operators.topk against a brute-force oracle.

Oracle: plain Python dicts; every subscription's top-k is recomputed by sorting after every update (online modes)
or at the end of every batch (Paint-Batch), and compared with the list the subscriber holds after applying the
delivered messages by the protocol of 002 §II-A.  Optimal message counts (Paint-Sparse, Paint-Batch) are found by
exhaustive search on small cases.
"""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate, DuplicateSubscription, InvalidSubscription
from sparksub.operators.topk import (
    RelaxSubscriber,
    TopkCore,
    TopkIndex,
    TopkMessage,
    TopkSubscriber,
    UnicastMessage,
    deliver,
    reaches,
)

INF = math.inf
ENDS = [-INF, -1, 0, 0.5, 1, 2, 2.5, 3, 4, 5, 6, 7, INF]


# ----------------------------------------------------------------------------------------------------------------
# brute-force oracle
# ----------------------------------------------------------------------------------------------------------------
def rank_value(desc: bool, key, y):
    return (-y if desc else y, key)


def oracle_top(points: dict, x1, x2, k, desc=False) -> list:
    inside = [(key, x, y) for key, (x, y) in points.items() if x1 <= x <= x2]
    inside.sort(key=lambda t: rank_value(desc, t[0], t[2]))
    return inside[:k]


def oracle_rank(points: dict, key, x1, x2, desc=False):
    """1-based rank of object ``key`` in range [x1, x2]; None when absent or outside."""
    if key not in points or not x1 <= points[key][0] <= x2:
        return None
    rv = rank_value(desc, key, points[key][1])
    return 1 + sum(1 for k2, (x, y) in points.items() if x1 <= x <= x2 and rank_value(desc, k2, y) < rv)


def apply_op(points: dict, op) -> dict:
    new = dict(points)
    if op[0] == "del":
        new.pop(op[1], None)
    else:
        new[op[1]] = (float(op[2]), float(op[3]))
    return new


def make_subscribers(points, subs, desc, relax=False):
    cls = RelaxSubscriber if relax else TopkSubscriber
    out = {}
    for sid, (x1, x2, k) in enumerate(subs):
        init = oracle_top(points, x1, x2, len(points) if relax else k, desc)
        out[sid] = cls(x1, x2, k, init, descending=desc)
    return out


def build(mode, points, subs, desc=False, epsilon=None, leaf_capacity=4):
    core = TopkCore(mode, descending=desc, epsilon=epsilon, leaf_capacity=leaf_capacity)
    if points:
        core.load(list(points), [p[0] for p in points.values()], [p[1] for p in points.values()])
    for sid, (x1, x2, k) in enumerate(subs):
        assert core.subscribe(sid, x1, x2, k) == oracle_top(points, x1, x2, k, desc)
    return core


def run_online(mode, init, ops, subs, desc=False, epsilon=None, check=None):
    """Apply ``ops`` one by one; after each, every subscriber's list must equal the oracle's top-k."""
    points = {}
    for key, x, y in init:
        points.setdefault(key, (float(x), float(y)))
    core = build(mode, points, subs, desc, epsilon)
    subscribers = make_subscribers(points, subs, desc, relax=mode == "relax")
    exact = mode in ("dense", "sparse", "unicast") and epsilon is None
    for op in ops:
        if op[0] == "del" and op[1] not in points:
            with pytest.raises(BadUpdate):
                core.delete(op[1])
            continue
        out = core.delete(op[1]) if op[0] == "del" else core.upsert(op[1], op[2], op[3])
        after = apply_op(points, op)
        states = [points]
        if op[0] != "del" and op[1] in points and points[op[1]][0] != float(op[2]):
            states.append({k: v for k, v in points.items() if k != op[1]})  # x-move: delete step, insert step
        states.append(after)
        assert len(out.steps) == len(states) - 1 or out.kinds == ("ignorable",)
        got = {sid: 0 for sid in subscribers}
        for n, step in enumerate(out.steps):
            if check is not None:
                check(core, step, states[n], states[min(n + 1, len(states) - 1)], subscribers)
            for sid, c in deliver(step.messages, subscribers).items():
                got[sid] += c
        for sid, (x1, x2, k) in enumerate(subs):
            want = oracle_top(after, x1, x2, k, desc)
            assert subscribers[sid].items == want, (mode, op, sid, subs[sid], subscribers[sid].items, want)
            if exact:
                changed = oracle_top(points, x1, x2, k, desc) != want
                assert (got[sid] > 0) == changed, (mode, op, subs[sid], got[sid])
        points = after
        core.tree.check_invariants()
    return core


# ----------------------------------------------------------------------------------------------------------------
# Optimal rectangle cover (002 §III-B: every point of P in exactly one rectangle, no other point covered)
# ----------------------------------------------------------------------------------------------------------------
def _in_box(p, box) -> bool:
    return box[0] <= p[0] <= box[1] and box[2] <= p[1] <= box[3]


def optimal_cover(P: list, O: list) -> int:
    n = len(P)
    valid = set()
    for mask in range(1, 1 << n):
        pts = [P[i] for i in range(n) if mask >> i & 1]
        box = (min(p[0] for p in pts), max(p[0] for p in pts), min(p[1] for p in pts), max(p[1] for p in pts))
        if any(_in_box(o, box) for o in O):
            continue
        if sum(1 for p in P if _in_box(p, box)) == len(pts):
            valid.add(mask)
    best = {0: 0}
    full = (1 << n) - 1
    for mask in range(1, full + 1):
        low = mask & -mask
        sub = mask
        b = INF
        while sub:
            if sub & low and sub in valid:
                b = min(b, 1 + best[mask ^ sub])
            sub = (sub - 1) & mask
        best[mask] = b
    return best[full]


# ----------------------------------------------------------------------------------------------------------------
# Worked examples
# ----------------------------------------------------------------------------------------------------------------
FIG = {"o1": (1, 1), "o2": (2, 5), "o4": (4, 3), "o5": (5, 4), "o6": (6, 8), "o7": (7, 2), "o9": (9, 6)}


def _fig_core(mode="dense", subs=((3, 8, 3), (0, 10, 3))):
    core = build(mode, {k: (float(x), float(y)) for k, (x, y) in FIG.items()}, list(subs))
    return core


def test_index_queries_first_k_and_min_y():
    t = TopkIndex(4)
    for k, (x, y) in FIG.items():
        t.insert(k, float(x), float(y))
    t.insert("o4b", 4.0, 3.0)  # same x and y as o4, larger key: ranks after it
    assert [p[0] for p in t.first_k(5.0, 4.0, "o5", True, 3)] == [4.0, 4.0, 1.0]
    assert [p[0] for p in t.first_k(5.0, 4.0, "o5", False, 3)] == [7.0]
    assert [p[2] for p in t.first_k(5.0, 3.0, "o4b", True, 3)] == ["o4", "o1"]
    assert t.min_y(0.0, 10.0, True, 3.0, "o4") == (3.0, "o4b", 4.0)
    assert t.min_y(0.0, 10.0, True, 3.0, "o4b") == (4.0, "o5", 5.0)
    assert t.min_y(4.0, 7.0, False, 0.0, "") == (4.0, "o5", 5.0)
    assert t.min_y(8.0, 9.0, True, 6.0, "o9") is None
    assert [j[1] for j in t.top(0.0, 10.0, 4)] == ["o1", "o7", "o4", "o4b"]


def test_rank_raising_example_staircase():
    core = _fig_core()
    out = core.upsert("o6", 6, 0.5)  # o6 becomes the best everywhere around 6
    assert out.kinds == ("raise",)
    ms = out.messages
    assert all(m.key == "o6" and m.y == 0.5 for m in ms)
    assert len(ms) <= 3  # at most k columns (002 §III-A)
    subs = make_subscribers({k: (float(x), float(y)) for k, (x, y) in FIG.items()}, [(3, 8, 3), (0, 10, 3)], False)
    deliver(ms, subs)
    assert [t[0] for t in subs[0].items] == ["o6", "o7", "o4"]
    assert core.counters["first_k"] == 2


def test_rank_lowering_example_sweep_and_counters():
    core = _fig_core()
    out = core.upsert("o7", 7, 9)
    assert out.kinds == ("lower",)
    keys = [m.key for m in out.messages]
    assert keys[0] == "o7" and set(keys) > {"o7"}  # i's new value first, then exposed objects (footnote 6)
    assert core.counters["min_y"] >= 1 and core.counters["exposed"] >= 1
    ex = core.explain()
    assert ex["algorithm"] == "Paint-Dense" and ex["objects"] == 7 and ex["per_update"]["messages"] > 0


def test_bad_input():
    core = _fig_core()
    with pytest.raises(BadUpdate, match="unknown key"):
        core.delete("nope")
    with pytest.raises(BadUpdate, match="non-finite"):
        core.upsert("o1", float("nan"), 1)
    with pytest.raises(BadUpdate, match="non-finite"):
        core.upsert("o1", 1, INF)
    with pytest.raises(BadUpdate, match="key"):
        core.upsert(1.5, 1, 1)
    with pytest.raises(InvalidSubscription):
        core.subscribe("s", 3, 1, 2)
    with pytest.raises(InvalidSubscription):
        core.subscribe("s", 1, 3, 0)
    with pytest.raises(ValueError):
        TopkCore("unicast", epsilon=0.5)


def test_reaches_and_protocol():
    m = TopkMessage(2, 5.0, 5.0, 2.0, 9.0, "a", 5.0, 1.0)
    assert reaches(m, 3, 8, 2) and not reaches(m, 3, 9, 2) and not reaches(m, 3, 8, 3)
    s = TopkSubscriber(0, 10, 2, [("b", 1.0, 2.0), ("c", 2.0, 3.0)])
    assert s.receive(m) and [t[0] for t in s.items] == ["a", "b"]
    assert not s.receive(TopkMessage(2, 5, 5, 2, 9, "z", 5.0, 7.0))  # ranked out at once
    assert s.receive(TopkMessage(2, 5, 5, 2, 9, "a", 5.0, None)) and [t[0] for t in s.items] == ["b"]
    assert s.receive(UnicastMessage(0, "c", 2.0, 3.0, "b")) and [t[0] for t in s.items] == ["c"]
    d = TopkSubscriber(0, 10, 2, [("b", 1.0, 2.0), ("c", 2.0, 3.0)], descending=True)
    assert [t[0] for t in d.items] == ["c", "b"]


# ----------------------------------------------------------------------------------------------------------------
# Hypothesis: every mode against the oracle
# ----------------------------------------------------------------------------------------------------------------
keys_st = st.integers(0, 9)
xs_st = st.integers(0, 6)
ys_st = st.integers(0, 4)
op_st = st.one_of(
    st.tuples(st.just("up"), keys_st, xs_st, ys_st),
    st.tuples(st.just("up"), keys_st, xs_st, ys_st),
    st.tuples(st.just("del"), keys_st),
)
sub_st = st.tuples(st.sampled_from(ENDS), st.sampled_from(ENDS), st.integers(1, 4)).map(
    lambda t: (min(t[0], t[1]), max(t[0], t[1]), t[2]))
init_st = st.lists(st.tuples(keys_st, xs_st, ys_st), max_size=10)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@SETTINGS
@given(init=init_st, ops=st.lists(op_st, min_size=1, max_size=10), subs=st.lists(sub_st, min_size=1, max_size=12),
       desc=st.booleans())
def test_paint_dense_against_oracle(init, ops, subs, desc):
    run_online("dense", init, ops, subs, desc)


@SETTINGS
@given(init=init_st, ops=st.lists(op_st, min_size=1, max_size=10), subs=st.lists(sub_st, min_size=1, max_size=12),
       desc=st.booleans())
def test_unicast_against_oracle(init, ops, subs, desc):
    def check(core, step, before, after, subscribers):
        assert len({m.sid for m in step.messages}) == len(step.messages)  # one message per subscription
    run_online("unicast", init, ops, subs, desc, check=check)


@SETTINGS
@given(init=init_st, ops=st.lists(op_st, min_size=1, max_size=10), subs=st.lists(sub_st, min_size=1, max_size=12))
def test_cn_relax_against_oracle(init, ops, subs):
    def check(core, step, before, after, subscribers):
        assert step.kind == "ignorable" or (len(step.messages) == 1 and step.messages[0].k is None)
    run_online("relax", init, ops, subs, check=check)


def _sparse_check(core, step, before, after, subscribers):
    """No message reaches no subscription; at most twice the optimal cover of each object's notified set."""
    groups: dict = {}
    for m in step.messages:
        hit = [sid for sid, s in subscribers.items() if reaches(m, s.x1, s.x2, s.k)]
        assert hit, m
        groups.setdefault((m.k, m.key, m.y), set()).update(hit)
    opt = 0
    for (k, _, _), sids in groups.items():
        P = sorted({(subscribers[s].x1, subscribers[s].x2) for s in sids})
        O = [(s.x1, s.x2) for sid, s in subscribers.items() if s.k == k and sid not in sids]
        O = [o for o in O if o not in P]
        if len(P) > 9:
            return
        opt += optimal_cover(P, O)
    assert len(step.messages) <= 2 * opt, (len(step.messages), opt)


@SETTINGS
@given(init=init_st, ops=st.lists(op_st, min_size=1, max_size=10), subs=st.lists(sub_st, min_size=1, max_size=12),
       desc=st.booleans())
def test_paint_sparse_against_oracle(init, ops, subs, desc):
    run_online("sparse", init, ops, subs, desc, check=_sparse_check)


def _epsilon_check(eps):
    def check(core, step, before, after, subscribers):
        for m in step.messages:
            for s in subscribers.values():
                if reaches(m, s.x1, s.x2, s.k):
                    ranks = [r for r in (oracle_rank(before, m.key, s.x1, s.x2, core.descending),
                                         oracle_rank(after, m.key, s.x1, s.x2, core.descending)) if r]
                    assert ranks and min(ranks) <= (1 + eps) * s.k, (m, s.x1, s.x2, s.k, ranks)
    return check


@SETTINGS
@given(init=init_st, ops=st.lists(op_st, min_size=1, max_size=8), subs=st.lists(sub_st, min_size=1, max_size=10),
       eps=st.sampled_from([0.25, 0.5, 1.0]), mode=st.sampled_from(["dense", "sparse"]))
def test_paint_epsilon_against_oracle(init, ops, subs, eps, mode):
    run_online(mode, init, ops, subs, epsilon=eps, check=_epsilon_check(eps))


def _random_case(rnd, n_obj, n_ops, n_subs, kmax, xr=12, yr=8):
    init = [(rnd.randrange(n_obj), rnd.randrange(xr), rnd.randrange(yr)) for _ in range(n_obj)]
    ops = []
    for _ in range(n_ops):
        r = rnd.random()
        if r < 0.15:
            ops.append(("del", rnd.randrange(n_obj)))
        else:
            ops.append(("up", rnd.randrange(n_obj), rnd.randrange(xr), rnd.randrange(yr)))
    ends = [-INF] + [v / 2 for v in range(-1, 2 * xr + 1)] + [INF]
    subs = []
    for _ in range(n_subs):
        a, b = sorted((rnd.choice(ends), rnd.choice(ends)))
        subs.append((a, b, rnd.randint(1, kmax)))
    return init, ops, subs


@pytest.mark.parametrize("mode", ["dense", "sparse", "unicast"])
def test_large_k_dense_subscriptions(mode):
    """k up to 20, dense subscription sets (every range over a grid), many x and y ties."""
    rnd = random.Random(11)
    for trial in range(3):
        init, ops, _ = _random_case(rnd, 40, 25, 0, 20)
        ends = [-INF, 0, 2.5, 5, 7.5, 11, INF]
        subs = [(a, b, k) for a in ends for b in ends if a <= b for k in (1, 7, 20)]
        run_online(mode, init, ops, subs, desc=trial == 1)


@pytest.mark.parametrize("mode,eps", [("dense", None), ("sparse", None), ("dense", 0.5), ("sparse", 0.25)])
def test_random_sparse_subscriptions(mode, eps):
    rnd = random.Random(5)
    for _ in range(6):
        init, ops, subs = _random_case(rnd, 25, 20, 8, 20)
        run_online(mode, init, ops, subs, epsilon=eps, check=_epsilon_check(eps) if eps else None)


def test_sparse_fewer_messages_than_dense_and_counters():
    rnd = random.Random(3)
    init, ops, subs = _random_case(rnd, 60, 60, 6, 5)
    dense = run_online("dense", init, ops, subs)
    sparse = run_online("sparse", init, ops, subs)
    assert sparse.counters["messages"] <= dense.counters["messages"]
    assert sparse.counters["snap"] > 0 and dense.counters["snap"] == 0
    assert sparse.counters["first_k"] == dense.counters["first_k"]


# ----------------------------------------------------------------------------------------------------------------
# Paint-Batch (002 §IV-A): correct at the end of every batch, minimum messages per subscriber
# ----------------------------------------------------------------------------------------------------------------
def _protocol(items: list, k: int, desc: bool, msg) -> list:
    """The §II-A protocol on a plain list (the search below explores message sequences with it)."""
    s = TopkSubscriber(-INF, INF, k, items, descending=desc)
    s.receive(msg)
    return s.items


def min_messages(before: dict, after: dict, x1, x2, k, desc, limit: int) -> int:
    """Fewest messages (each an object with its final values, or a deletion) that take the subscriber's list
    from its top-k before the batch to its top-k after it; searched breadth-first up to ``limit``."""
    start, goal = oracle_top(before, x1, x2, k, desc), oracle_top(after, x1, x2, k, desc)
    cands = [TopkMessage(k, 0, 0, 0, 0, key, x, y) for key, (x, y) in after.items() if x1 <= x <= x2]
    cands += [TopkMessage(k, 0, 0, 0, 0, key, 0.0, None) for key, _, _ in start
              if key not in after or not x1 <= after[key][0] <= x2]
    frontier, seen = [tuple(start)], {tuple(start)}
    for depth in range(limit):
        if tuple(goal) in frontier:
            return depth
        nxt = []
        for items in frontier:
            for m in cands:
                t = tuple(_protocol(list(items), k, desc, m))
                if t not in seen:
                    seen.add(t)
                    nxt.append(t)
        frontier = nxt
    return limit


def run_batches(mode, init, batches, subs, desc=False, check_min=True):
    points = {}
    for key, x, y in init:
        points.setdefault(key, (float(x), float(y)))
    core = build(mode, points, subs, desc)
    subscribers = make_subscribers(points, subs, desc)
    for batch in batches:
        after = dict(points)
        moved = False
        bad = False
        for ev in batch:
            if ev[0] == "delete" and ev[1] not in after:
                bad = True
                break
            after = apply_op(after, ("del", ev[1]) if ev[0] == "delete" else ("up", *ev[1:]))
        moved = any(key in after and after[key][0] != xy[0] for key, xy in points.items())
        if bad:
            with pytest.raises(BadUpdate):
                core.apply_batch(batch)
            assert {k: core.get(k) for k in points} == points and len(core) == len(points)  # nothing applied
            continue
        out = core.apply_batch(batch)
        got = deliver(out.messages, subscribers)
        for sid, (x1, x2, k) in enumerate(subs):
            want = oracle_top(after, x1, x2, k, desc)
            assert subscribers[sid].items == want, (batch, subs[sid], subscribers[sid].items, want)
            if check_min and not moved and got[sid] > 0:
                # Known gap to Theorem 3 (see topk.apply_batch): one extra message per object deleted or
                # risen that leaves the subscriber's list (it is sent its new value, where an optimum may let
                # an entrant push it out); batches with x-moves (a deletion plus an insertion) are not checked
                held = {key for key, _, _ in oracle_top(points, x1, x2, k, desc)}
                risen_out = sum(1 for key in held if after.get(key) != points[key]
                                and key not in {w[0] for w in want})
                best = min_messages(points, after, x1, x2, k, desc, got[sid])
                assert got[sid] <= best + risen_out, (batch, subs[sid], got[sid], best, out.messages)
                assert got[sid] <= best or risen_out > 0
        points = after
        core.tree.check_invariants()
        assert len(core) == len(points)
    return core


ev_st = st.one_of(
    st.tuples(st.just("upsert"), st.integers(0, 7), xs_st, ys_st),
    st.tuples(st.just("upsert"), st.integers(0, 7), xs_st, ys_st),
    st.tuples(st.just("delete"), st.integers(0, 7)),
)


@SETTINGS
@given(init=st.lists(st.tuples(st.integers(0, 7), xs_st, ys_st), max_size=8),
       batches=st.lists(st.lists(ev_st, min_size=1, max_size=6), min_size=1, max_size=3),
       subs=st.lists(sub_st, min_size=1, max_size=8), mode=st.sampled_from(["dense", "sparse"]),
       desc=st.booleans())
def test_paint_batch_against_oracle_and_minimum(init, batches, subs, mode, desc):
    run_batches(mode, init, batches, subs, desc)


@pytest.mark.parametrize("mode", ["dense", "sparse"])
def test_paint_batch_large_k(mode):
    rnd = random.Random(17)
    for _ in range(3):
        init, _, subs = _random_case(rnd, 30, 0, 10, 20)
        batches = [[("delete", rnd.randrange(30)) if rnd.random() < 0.1 else
                    ("upsert", rnd.randrange(30), rnd.randrange(12), rnd.randrange(8)) for _ in range(12)]
                   for _ in range(3)]
        run_batches(mode, init, batches, subs, check_min=False)


def test_paint_batch_beats_online_on_repeated_updates():
    rnd = random.Random(2)
    init, _, subs = _random_case(rnd, 30, 0, 12, 4)
    batch = [("upsert", rnd.randrange(5), rnd.randrange(12), rnd.randrange(8)) for _ in range(20)]
    core = run_batches("dense", init, [batch], subs, check_min=False)
    online = run_online("dense", init, [("up", *e[1:]) for e in batch], subs)
    assert core.counters["messages"] < online.counters["messages"]


def test_subscriptions_add_many_equals_one_by_one():
    import random as _random

    from sparksub.operators.topk import Subscriptions
    rnd = _random.Random(4)
    rows = []
    for i in range(300):
        a = float(rnd.randint(0, 20))
        rows.append((f"s{i}", a, a + rnd.randint(0, 10), rnd.randint(1, 3)))
    one, many = Subscriptions(), Subscriptions()
    for sid, a, b, k in rows:
        one.add(sid, a, b, k)
    many.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    for _ in range(200):
        il = float(rnd.randint(0, 25))
        rect = (il, il + rnd.randint(0, 5), il - rnd.randint(0, 8) - 0.5, il + rnd.randint(5, 15) + 0.5)
        for k in (1, 2, 3):
            assert one.snap(k, rect) == many.snap(k, rect)
            assert sorted(one.in_rect(k, rect)) == sorted(many.in_rect(k, rect))
    with pytest.raises(DuplicateSubscription):
        many.add_many(["new", "s3"], [0.0, 0.0], [1.0, 1.0], [1, 1])
    with pytest.raises(InvalidSubscription):
        many.add_many(["new"], [2.0], [1.0], [1])
    assert "new" not in {sid for sid, *_ in many} and len(many) == 300
