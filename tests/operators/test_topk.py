"""Tests of sparksub.operators.topk.core against a brute-force oracle.

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
from sparksub.operators.topk.core import (
    RelaxSubscriber,
    TopkCore,
    TopkIndex,
    TopkMessage,
    TopkSubscriber,
    UnicastMessage,
    batch_minimum,
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


def unicast_box(points: dict, key, x, value, k, desc) -> tuple | None:
    """002 §V Unicast's candidates for one k by brute force: the box (ℓ, x] × [x, r) with (ℓ, r) the influence
    interval Π of object ``key`` at x with ``value`` (the larger of Π_old, Π_new); None when it is empty."""
    rv = rank_value(desc, key, value)
    below = [px for k2, (px, py) in points.items() if k2 != key and rank_value(desc, k2, py) < rv]
    west = sorted((px for px in below if px < x), reverse=True)
    east = sorted(px for px in below if px > x)
    K = k - sum(1 for px in below if px == x)
    if K <= 0:
        return None
    return (west[K - 1] if K <= len(west) else -INF, east[K - 1] if K <= len(east) else INF)


@SETTINGS
@given(init=init_st, ops=st.lists(op_st, min_size=1, max_size=10), subs=st.lists(sub_st, min_size=1, max_size=12),
       desc=st.booleans())
def test_unicast_against_oracle(init, ops, subs, desc):
    """One message per affected subscription; ``checked`` (002 Tables III-IV's Unicast count) = the
    subscriptions in the box of Π_old ∪ Π_new of every step, by brute force."""
    wants = []

    def check(core, step, before, after, subscribers):
        assert len({m.sid for m in step.messages}) == len(step.messages)  # one message per subscription
        if step.kind == "ignorable":
            return
        # the step's object: the key whose value differs between the two states (an x-move: two steps)
        key = next(k2 for k2 in set(before) | set(after) if before.get(k2) != after.get(k2))
        old, new = before.get(key), after.get(key)
        raising = old is None or (new is not None and rank_value(desc, key, new[1]) < rank_value(desc, key, old[1]))
        x, value = (new if raising else old)
        state = {k2: v for k2, v in before.items() if k2 != key}
        want = 0
        for x1, x2, k in subs:
            box = unicast_box(state, key, x, value, k, desc)
            if box is not None and (box[0] < x1 or x1 == box[0] == -INF) and x1 <= x <= x2 \
                    and (x2 < box[1] or x2 == box[1] == INF):
                want += 1
        wants.append(want)
    core = run_online("unicast", init, ops, subs, desc, check=check)
    assert core.counters["checked"] == sum(wants)


def test_unicast_replacement_below_rank_k_needs_the_walk():
    """002 §V's min_y(σ_j, y_old) is the replacement only when i is the k-th: here i is first of [i, a]
    (k = 2) and rises above b, min_y from y_old gives a (already held); the walk finds b with one more call."""
    pts = {"i": (1.0, 1.0), "a": (2.0, 2.0), "b": (3.0, 3.0)}
    core = build("unicast", pts, [(0, 5, 2)])
    assert core.tree.min_y(0.0, 5.0, True, 1.0, "i")[1] == "a"
    before = dict(core.counters)
    out = core.upsert("i", 1.0, 10.0)
    assert out.messages == (UnicastMessage(0, "b", 3.0, 3.0, "i"),)
    assert core.counters["min_y"] - before["min_y"] == 2 and core.counters["checked"] - before["checked"] == 1


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
def _protocol(items: list, k: int, desc: bool, msg) -> tuple:
    """The §II-A protocol on a plain list (the search below explores message sequences with it)."""
    s = TopkSubscriber(-INF, INF, k, items, descending=desc)
    s.receive(msg)
    return tuple(s.items)


def min_messages(before: dict, after: dict, x1, x2, k, desc, limit: int, leaver_first: bool = False) -> int:
    """Fewest messages that take a subscriber's top-k before a batch to its top-k after it, by brute force.

    A message is an object with its value after the batch (one in the range then) or the deletion of an object
    the subscriber holds that is gone from the range; the subscriber applies each by the §II-A protocol.  With
    ``leaver_first`` (002 footnote 6: an object's new value before its replacement) no message about an object
    leaving the list may follow one about an object entering it.  Breadth-first over list states; returns
    ``limit`` when the target is not reached in fewer messages."""
    start, goal = tuple(oracle_top(before, x1, x2, k, desc)), tuple(oracle_top(after, x1, x2, k, desc))
    held, kept = {t[0] for t in start}, {t[0] for t in goal}
    cands = [TopkMessage(k, 0, 0, 0, 0, key, x, y) for key, (x, y) in after.items() if x1 <= x <= x2]
    cands += [TopkMessage(k, 0, 0, 0, 0, key, 0.0, None) for key, _, _ in start
              if key not in after or not x1 <= after[key][0] <= x2]
    frontier = {(start, False)}
    seen = set(frontier)
    for depth in range(limit):
        if any(items == goal for items, _ in frontier):
            return depth
        nxt = set()
        for items, entered in frontier:
            for m in cands:
                if entered and m.key in held and m.key not in kept:
                    continue
                t = (_protocol(list(items), k, desc, m), entered or (leaver_first and m.key not in held))
                if t not in seen:
                    seen.add(t)
                    nxt.add(t)
        frontier = nxt
    return limit


def _as_delete_insert(before: dict, after: dict) -> dict:
    """``after`` with every x-moved object under a key of its own (002 footnote 4: an x-move is a deletion and
    an insertion; key + 0.5 ranks like the key against every other key)."""
    return {(key + 0.5 if key in before and before[key][0] != xy[0] else key): xy for key, xy in after.items()}


def run_batches(mode, init, batches, subs, desc=False, check_min=True):
    """Each batch through ``apply_batch``; every subscriber must hold the oracle's top-k at the end and
    receive exactly the footnote-6 minimum (:func:`min_messages` with ``leaver_first``; an x-move counted as a
    deletion plus an insertion), which is never below the unconstrained minimum and equals it when at most
    one object leaves the list.  ``check_min="formula"`` checks the same by :func:`topk.batch_minimum`."""
    points = {}
    for key, x, y in init:
        points.setdefault(key, (float(x), float(y)))
    core = build(mode, points, subs, desc)
    subscribers = make_subscribers(points, subs, desc)
    for batch in batches:
        after = dict(points)
        bad = False
        for ev in batch:
            if ev[0] == "delete" and ev[1] not in after:
                bad = True
                break
            after = apply_op(after, ("del", ev[1]) if ev[0] == "delete" else ("up", *ev[1:]))
        if bad:
            with pytest.raises(BadUpdate):
                core.apply_batch(batch)
            assert {k: core.get(k) for k in points} == points and len(core) == len(points)  # nothing applied
            continue
        out = core.apply_batch(batch)
        got = deliver(out.messages, subscribers)
        split = _as_delete_insert(points, after) if check_min else None
        for sid, (x1, x2, k) in enumerate(subs):
            want = oracle_top(after, x1, x2, k, desc)
            assert subscribers[sid].items == want, (batch, subs[sid], subscribers[sid].items, want)
            if not check_min:
                continue
            start = oracle_top(points, x1, x2, k, desc)
            leavers = {t[0] for t in start} - {t[0] for t in want}
            if check_min == "formula":
                ordered, free = batch_minimum(start, oracle_top(split, x1, x2, k, desc), k, desc)
                assert got[sid] == ordered, (batch, subs[sid], got[sid], ordered, out.messages)
                assert batch_minimum(start, want, k, desc)[1] <= got[sid]
                continue
            best = min_messages(points, split, x1, x2, k, desc, got[sid] + 1, leaver_first=True)
            assert got[sid] == best, (batch, subs[sid], got[sid], best, out.messages)
            free = min_messages(points, after, x1, x2, k, desc, got[sid] + 1)
            assert free <= got[sid]
            if split == after and len(leavers) <= 1:
                assert free == got[sid], (batch, subs[sid], got[sid], free, out.messages)
        points = after
        core.tree.check_invariants()
        assert len(core) == len(points)
    return core


# an event: upsert at the key's current x (or its home x when absent), upsert at a drawn x (an x-move when it
# differs), delete; keys repeat within a batch (coalescing) and ys_st has many ties
ev_st = st.one_of(
    st.tuples(st.just("upsert"), st.integers(0, 7), ys_st, st.none()),
    st.tuples(st.just("upsert"), st.integers(0, 7), ys_st, st.none()),
    st.tuples(st.just("upsert"), st.integers(0, 7), ys_st, xs_st),
    st.tuples(st.just("delete"), st.integers(0, 7)),
)


def _place(home: list, init: list, batches: list) -> tuple[list, list]:
    """Concrete objects and events: an upsert without x keeps the key where it is (home[key] when absent)."""
    objs = [(key, home[key], y) for key, y in init]
    where = {}
    for key, x, _ in objs:
        where.setdefault(key, x)
    out = []
    for batch in batches:
        evs = []
        for ev in batch:
            if ev[0] == "delete":
                evs.append(ev)
                where.pop(ev[1], None)
                continue
            _, key, y, x = ev
            x = where.get(key, home[key]) if x is None else x
            where[key] = x
            evs.append(("upsert", key, x, y))
        out.append(evs)
    return objs, out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(home=st.lists(xs_st, min_size=8, max_size=8),
       init=st.lists(st.tuples(st.integers(0, 7), ys_st), min_size=3, max_size=8),
       batches=st.lists(st.lists(ev_st, min_size=1, max_size=8), min_size=1, max_size=3),
       subs=st.lists(sub_st, min_size=1, max_size=8), mode=st.sampled_from(["dense", "sparse"]),
       desc=st.booleans())
def test_paint_batch_against_oracle_and_minimum(home, init, batches, subs, mode, desc):
    """Paint-Batch (002 §IV-A, Theorem 3) against brute force, k = 1..4, ties in y, deletions, insertions,
    x-moves and repeated updates of a key within a batch.

    The minimum for a subscriber is the fewest messages, each an object's value at the end of the batch or a
    deletion, that take its list before the batch to its list after it by the §II-A protocol, with every
    message about an object leaving the list before any about an object entering it (002 footnote 6 applied
    to the batch): Paint-Batch must deliver exactly that, an x-move counting as a deletion and an insertion.
    The minimum without that order (a breadth-first search too) may be lower with two or more leavers, never
    with one.  The number of objects whose presence or (x, y) differs between the two lists is not the
    minimum: an object that leaves can often be pushed out by an entrant without a message of its own."""
    objs, evs = _place(home, init, batches)
    run_batches(mode, objs, evs, subs, desc)


@SETTINGS
@given(before=st.dictionaries(st.integers(0, 7), st.tuples(xs_st, ys_st), max_size=8),
       changes=st.dictionaries(st.integers(0, 8), st.one_of(st.none(), st.tuples(xs_st, ys_st)), max_size=6),
       sub=sub_st, desc=st.booleans())
def test_batch_minimum_against_search(before, changes, sub, desc):
    """topk.batch_minimum (closed form) = the breadth-first minima, with and without footnote 6's order."""
    before = {key: (float(x), float(y)) for key, (x, y) in before.items()}
    after = dict(before)
    for key, v in changes.items():
        if v is None:
            after.pop(key, None)
        else:
            after[key] = (float(v[0]), float(v[1]))
    x1, x2, k = sub
    start, goal = oracle_top(before, x1, x2, k, desc), oracle_top(after, x1, x2, k, desc)
    ordered, free = batch_minimum(start, goal, k, desc)
    assert min_messages(before, after, x1, x2, k, desc, ordered + 1, leaver_first=True) == ordered
    assert min_messages(before, after, x1, x2, k, desc, ordered + 1) == free


def test_paint_batch_one_message_when_the_entrant_evicts():
    """k = 1: a rises above b's new value, b falls below a's old one: b alone takes a's place (the bench's
    k = 1 Paint-Batch > Coalesce: a used to get its new value too); where b is out of range a stays."""
    pts = {"a": (1.0, 1.0), "b": (2.0, 5.0)}
    subs = [(0, 3, 1), (0, 1.5, 1)]
    core = build("dense", pts, subs)
    subscribers = make_subscribers(pts, subs, False)
    got = deliver(core.apply_batch([("upsert", "a", 1.0, 9.0), ("upsert", "b", 2.0, 0.5)]).messages, subscribers)
    assert got == {0: 1, 1: 1}
    assert subscribers[0].items == [("b", 2.0, 0.5)] and subscribers[1].items == [("a", 1.0, 9.0)]


def test_paint_batch_stale_value_outranking_an_entrant():
    """An object pushed out of the list in the index by a falling one (002 §IV-A step 2) is still held at its
    old value: it must get its new value, or it would outrank the exposed replacement (the region right
    before step 3 misses this subscriber)."""
    pts = {"i2": (1.0, 1.0), "i": (2.0, 5.0), "d": (3.0, 10.0), "j": (4.0, 6.0)}
    subs = [(0, 5, 2)]
    run_batches("dense", [(k, *v) for k, v in pts.items()],
                [[("upsert", "d", 3.0, 2.0), ("upsert", "i", 2.0, 9.0), ("upsert", "i2", 1.0, 8.0)]], subs,
                check_min=False)


@pytest.mark.parametrize("mode", ["dense", "sparse"])
def test_paint_batch_large_k(mode):
    """k up to 20 with x-moves, deletions and repeats; the minimum by topk.batch_minimum (checked against the
    search above)."""
    rnd = random.Random(17)
    for _ in range(4):
        init, _, subs = _random_case(rnd, 30, 0, 10, 20)
        where = {}
        for key, x, _ in init:
            where.setdefault(key, x)
        batches = []
        for _ in range(3):
            batch = []
            for _ in range(12):
                key = rnd.randrange(30)
                if rnd.random() < 0.1:
                    batch.append(("delete", key))
                    where.pop(key, None)
                else:
                    x = rnd.randrange(12) if rnd.random() < 0.2 or key not in where else where[key]
                    where[key] = x
                    batch.append(("upsert", key, x, rnd.randrange(8)))
            batches.append(batch)
        run_batches(mode, init, batches, subs, check_min="formula")


def test_paint_batch_beats_online_on_repeated_updates():
    rnd = random.Random(2)
    init, _, subs = _random_case(rnd, 30, 0, 12, 4)
    batch = [("upsert", rnd.randrange(5), rnd.randrange(12), rnd.randrange(8)) for _ in range(20)]
    core = run_batches("dense", init, [batch], subs, check_min=False)
    online = run_online("dense", init, [("up", *e[1:]) for e in batch], subs)
    assert core.counters["messages"] < online.counters["messages"]


def test_subscriptions_add_many_equals_one_by_one():
    import random as _random

    from sparksub.operators.topk.core import Subscriptions
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
