"""delivery: message rectangles, the subscription registry, match, unicast and Subscribers.deliver."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import DuplicateSubscription, InvalidSubscription, UnknownSubscription
from sparksub.operators.range_min.delivery import (
    MESSAGE_BYTES, UNICAST_ROW_BYTES, Subscribers, SubscriptionPoints, match, message_bytes,
    message_rectangle, unicast, unicast_bytes)

INF = math.inf
NAN = math.nan


# ------------------------------------------------------------------------- brute-force helpers
def pred(x1, x2, il, ir, ol, orr) -> bool:
    """The reformulated subscription predicate of C.5 with the infinity rule."""
    left = (ol < x1 or (ol == -INF and x1 == -INF)) and x1 <= il
    right = ir <= x2 and (x2 < orr or (orr == INF and x2 == INF))
    return bool(left and right)


def brute_match(subs: dict, msgs: list) -> set:
    return {(i, sid) for i, m in enumerate(msgs) for sid, (a, b) in subs.items() if pred(a, b, *m)}


def msg_table(rows, group=None) -> pa.Table:
    """rows: (seq, step, new_value, inner_l, inner_r, outer_l, outer_r); +inf new_value = empty."""
    cols = list(zip(*rows)) if rows else [[]] * 7
    nv = [None if (v == INF or v != v) else v for v in cols[2]]
    t = {"seq": pa.array(cols[0], pa.int64()), "step": pa.array(cols[1], pa.int8()),
         "new_value": pa.array(nv, pa.float64())}
    for k, c in zip(("inner_l", "inner_r", "outer_l", "outer_r"), cols[3:]):
        t[k] = pa.array(c, pa.float64())
    if group is not None:
        t["group_id"] = pa.array([group] * len(rows), pa.string())
    return pa.table(t)


def rows_of(table: pa.Table) -> set:
    d = table.to_pydict()
    assert set(d["op"]) <= {"update"}
    return {(s, (None if v is None else float(v)), q)
            for s, v, q in zip(d["subscription_id"], d["value"], d["seq"])}


def bmin(points: dict, a: float, b: float):
    ys = [y for (x, y) in points.values() if a <= x <= b]
    return min(ys) if ys else None


# A brute-force S-CN reformulator, straight from the notes (C.5, C.6 rules 1-6, C.8); test-only.
def _mar(pts, x0, y0):
    if any(x == x0 and y <= y0 for x, y in pts):
        return None
    return (max((x for x, y in pts if x < x0 and y <= y0), default=-INF),
            min((x for x, y in pts if x > x0 and y <= y0), default=INF))


def reformulate(others: list, x: float, y_o: float, y_n: float) -> list:
    """Messages (new, il, ir, ol, or) of Δ(t: x, y_o -> y_n) w.r.t. the other tuples (inf = absent)."""
    if y_o == y_n:
        return []
    mo, mn = _mar(others, x, y_o), _mar(others, x, y_n)
    if mo is None and mn is None:
        return []
    if mo is None or (mn is not None and mn[0] <= mo[0] and mo[1] <= mn[1]):
        return [(y_n, x, x, mn[0], mn[1])]
    xl, xr = mo
    after = others + ([(x, y_n)] if y_n < INF else [])
    m: dict = {}
    for X, Y in after:
        m[X] = min(Y, m.get(X, INF))
    yp = m.get(x, INF)
    R, cur = [], yp
    for X in sorted(X for X in m if x < X < xr):
        if m[X] < cur:
            R.append((X, m[X]))
            cur = m[X]
    L, cur = [], yp
    for X in sorted((X for X in m if xl < X < x), reverse=True):
        if m[X] < cur:
            L.append((X, m[X]))
            cur = m[X]
    out = [(yp, x, x, L[0][0] if L else xl, R[0][0] if R else xr)]
    for i, (xi, yi) in enumerate(L):
        out.append((yi, xi, x, L[i + 1][0] if i + 1 < len(L) else xl,
                    next((X for X, Y in R if Y < yi), xr)))
    for i, (xi, yi) in enumerate(R):
        out.append((yi, x, xi, next((X for X, Y in L if Y <= yi), xl),
                    R[i + 1][0] if i + 1 < len(R) else xr))
    return out


# ------------------------------------------------------------------------- message_rectangle
def test_message_rectangle_infinity_rule():
    assert message_rectangle(40, 40, 20, 100) == (20.0, False, 40.0, True, 40.0, True, 100.0, False)
    assert message_rectangle(1, 2, -INF, INF) == (-INF, True, 1.0, True, 2.0, True, INF, True)
    assert message_rectangle(1, 2, -INF, 5) == (-INF, True, 1.0, True, 2.0, True, 5.0, False)
    assert message_rectangle(1, 2, 0, INF) == (0.0, False, 1.0, True, 2.0, True, INF, True)


def test_reformulator_reproduces_the_paper_examples():
    P = [(20, 3), (30, 8), (40, 12), (50, 5), (70, 6), (70, 7), (100, 2)]
    others = [p for p in P if p != (50, 5)]
    assert sorted(reformulate(others, 50, 5, 9)) == sorted(
        [(9, 50, 50, 30, 70), (8, 30, 50, 20, 70), (6, 50, 70, 20, 100)])
    others = [p for p in P if p != (40, 12)]
    assert reformulate(others, 40, 12, 4) == [(4, 40, 40, 20, 100)]


# ------------------------------------------------------------------------- registry
def _state(sp: SubscriptionPoints):
    q = (-INF, True, INF, True, -INF, True, INF, True)
    return (len(sp), sorted(sp), sorted(sp.index.query(*q).tolist()),
            {s: sp.bounds(s) for s in sp}, list(sp._free), sp._next)


def test_registry_errors_leave_state_unchanged():
    sp = SubscriptionPoints(merge_threshold=2)
    sp.add(["a", "b", "c"], [0.0, -INF, 1.0], [1.0, 2.0, INF])
    sp.remove(["b"])
    before = _state(sp)
    with pytest.raises(DuplicateSubscription, match="'a'"):
        sp.add(["z", "a"], [0.0, 0.0], [1.0, 1.0])
    with pytest.raises(DuplicateSubscription, match="'y'"):
        sp.add(["x", "y", "w", "y"], [0.0] * 4, [1.0] * 4)
    with pytest.raises(InvalidSubscription, match="'q'"):
        sp.add(["p", "q"], [0.0, 2.0], [1.0, 1.0])            # inverted
    with pytest.raises(InvalidSubscription):
        sp.add(["p"], [NAN], [1.0])
    with pytest.raises(UnknownSubscription, match="'nope'"):
        sp.remove(["a", "nope"])
    with pytest.raises(UnknownSubscription, match="'b'"):
        sp.remove(["b"])                                       # already removed
    with pytest.raises(UnknownSubscription, match="'c'"):
        sp.remove(["c", "c"])
    with pytest.raises(UnknownSubscription):
        sp.bounds("b")
    assert _state(sp) == before
    assert isinstance(DuplicateSubscription("x"), InvalidSubscription)


def test_registry_slots_reuse_and_ids():
    sp = SubscriptionPoints()
    s = sp.add(np.array(["a", "b", "c", "d"], dtype=object), [0, 1, 2, 3], [4, 5, 6, 7])
    assert s.tolist() == [0, 1, 2, 3]
    sp.remove(["b", "d"])
    assert "b" not in sp and "a" in sp and len(sp) == 2
    s2 = sp.add(["e", "f", "g"], [9, 9, 9], [9, 9, 9])
    assert sorted(s2.tolist()[:2]) == [1, 3] and s2[2] == 4      # freed slots reused first
    assert sp.ids_of(s2).tolist() == ["e", "f", "g"]
    assert sp.bounds("f") == (9.0, 9.0) and sp.bounds("a") == (0.0, 4.0)
    assert sorted(sp.ids_of(sp.index.stab(9.0)).tolist()) == ["e", "f", "g"]
    assert sp.live_slots().tolist() == [0, 1, 2, 3, 4]


# ------------------------------------------------------------------------- match
VALS = [-INF, 0.0, 1.0, 2.0, 3.0, 4.0, INF]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), thr=st.integers(1, 10))
def test_match_equals_brute_force(data, thr):
    sp = SubscriptionPoints(bucket_size=3, merge_threshold=thr)
    subs: dict = {}
    k = 0
    for _ in range(data.draw(st.integers(1, 4), label="rounds")):
        pairs = data.draw(st.lists(st.tuples(st.sampled_from(VALS), st.sampled_from(VALS)),
                                   max_size=12), label="subs")
        pairs = [(min(p), max(p)) for p in pairs]
        ids = [f"s{k + i}" for i in range(len(pairs))]
        k += len(pairs)
        sp.add(ids, [p[0] for p in pairs], [p[1] for p in pairs])
        subs.update(zip(ids, pairs))
        if subs and data.draw(st.booleans(), label="remove?"):
            gone = data.draw(st.lists(st.sampled_from(sorted(subs)), unique=True, max_size=5))
            sp.remove(gone)
            for g in gone:
                del subs[g]
        msgs = data.draw(st.lists(st.tuples(*[st.sampled_from(VALS + [0.5, 2.5])] * 4),
                                  max_size=6), label="msgs")
        tbl = {"inner_l": np.array([m[0] for m in msgs], dtype=float),
               "inner_r": np.array([m[1] for m in msgs], dtype=float),
               "outer_l": np.array([m[2] for m in msgs], dtype=float),
               "outer_r": np.array([m[3] for m in msgs], dtype=float)}
        mi, sl = match(sp, tbl)
        got = set(zip(mi.tolist(), sp.ids_of(sl).tolist()))
        assert len(got) == mi.size
        assert got == brute_match(subs, msgs)


# ------------------------------------------------------------------------- unicast / deliver
P0 = {"t2": (20, 3), "t3": (30, 8), "t4": (40, 12), "t5": (50, 5), "t6": (70, 6), "t7": (70, 7),
      "t9": (100, 2)}
SUBS = {"a": (30, 60), "b": (45, 55), "c": (50, 80), "d": (42, 46), "e": (-INF, INF),
        "g": (10, 60), "h": (40, 50), "i": (-INF, 200), "j": (120, INF), "k": (50, 69)}
# seq 0: X-move of t5 from 50 to 45 (y = 5): step 0 = delete (50, 5), step 1 = insert (45, 5)
# seq 1: insert t10 = (150, 1)
HAND = [
    (0, 0, INF, 50, 50, 40, 70),   # peak: nothing left at 50 -> empty
    (0, 0, 12, 40, 50, 30, 70),
    (0, 0, 8, 30, 50, 20, 70),
    (0, 0, 6, 50, 70, 20, 100),
    (0, 1, 5, 45, 45, 20, 100),
    (1, 0, 1, 150, 150, -INF, INF),
]


def _subscribers(points: dict, subs: dict, **kw) -> Subscribers:
    s = Subscribers(**kw)
    ids = list(subs)
    s.add(ids, [subs[i][0] for i in ids], [subs[i][1] for i in ids])
    s.set_values(ids, [bmin(points, *subs[i]) for i in ids])
    return s


def test_hand_built_x_move_and_infinite_ends():
    # the hand-built messages are what the reformulator derives
    others = [p for k, p in P0.items() if k != "t5"]
    assert sorted(reformulate(others, 50, 5, INF)) == sorted(h[2:] for h in HAND[:4])
    assert reformulate(others, 45, INF, 5) == [HAND[4][2:]]
    msgs = msg_table(HAND, group="g1")
    expect = {("c", 6.0, 0), ("d", 5.0, 0), ("k", None, 0),
              ("e", 1.0, 1), ("i", 1.0, 1), ("j", 1.0, 1)}
    subs = _subscribers(P0, SUBS, merge_threshold=3)
    out = subs.deliver(msgs)
    assert out.schema.names == ["subscription_id", "op", "value", "seq", "group_id"]
    assert out.schema.field("value").type == pa.float64()
    assert rows_of(out) == expect
    assert set(out.column("group_id").to_pylist()) == {"g1"}
    assert out.column("seq").to_pylist() == sorted(out.column("seq").to_pylist())
    P1 = dict(P0, t5=(45, 5), t10=(150, 1))
    for sid, (a, b) in SUBS.items():
        v = subs.value(sid)
        assert (v if v == v else None) == bmin(P1, a, b), sid
    # server-side S-UN agrees (old value of seq 0's moved tuple is 5)
    sp = _subscribers(P0, SUBS).points
    assert rows_of(unicast(sp, msgs, {0: 5.0})) == expect
    assert rows_of(unicast(sp, msgs, np.array([5.0, np.nan]))) == expect
    # without the suppression rule the no-op subscribers a, b, h would be notified
    noop = rows_of(unicast(sp, msgs, None)) - expect
    assert noop == {("a", 5.0, 0), ("b", 5.0, 0), ("h", 5.0, 0)}
    # redelivering seq 1 changes nothing (values are already 1): only changed values get rows
    again = rows_of(subs.deliver(msg_table(HAND[5:])))
    assert again == set()


def test_empty_and_null_values():
    subs = Subscribers()
    subs.add(["x", "y"], [0.0, 5.0], [10.0, 6.0], values=[3.0, NAN])
    out = subs.deliver(msg_table([(0, 0, INF, 2, 2, -INF, INF)]))   # x's range became empty
    assert out.to_pydict()["value"] == [None] and out.column("subscription_id").to_pylist() == ["x"]
    assert math.isnan(subs.value("x"))
    out = subs.deliver(msg_table([(0, 0, INF, 2, 2, -INF, INF)]))
    assert out.num_rows == 0                                     # NaN == NaN: no change
    out = subs.deliver(msg_table([]))
    assert out.num_rows == 0 and out.schema.names == ["subscription_id", "op", "value", "seq"]
    assert unicast(subs.points, msg_table([]), None).num_rows == 0
    with pytest.raises(UnknownSubscription):
        subs.set_values(["nope"], [1.0])
    # dict-of-numpy messages work too
    d = {"seq": np.array([3]), "step": np.array([0], dtype=np.int8), "new_value": np.array([1.0]),
         "inner_l": np.array([5.0]), "inner_r": np.array([6.0]),
         "outer_l": np.array([-INF]), "outer_r": np.array([INF])}
    assert rows_of(subs.deliver(d)) == {("x", 1.0, 3), ("y", 1.0, 3)}


def test_last_matching_message_wins():
    subs = Subscribers()
    subs.add(["s"], [0.0], [10.0], values=[5.0])
    m = msg_table([(0, 0, 4, 5, 5, -INF, INF), (0, 0, 3, 5, 5, -INF, INF),
                   (1, 1, 9, 5, 5, -INF, INF), (1, 0, 7, 5, 5, -INF, INF)])
    assert rows_of(unicast(subs.points, m, None)) == {("s", 3.0, 0), ("s", 9.0, 1)}
    assert rows_of(subs.deliver(m)) == {("s", 3.0, 0), ("s", 9.0, 1)}
    assert subs.value("s") == 9.0


xs = st.integers(0, 6).map(float)
ys = st.integers(1, 5).map(float)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_deliver_and_unicast_agree_with_recomputation(data):
    """Random updates (Y-updates, inserts, deletes, X-moves) reformulated by the brute-force
    reformulator: deliver's rows = the subscriptions whose min changed; unicast agrees."""
    P = {f"t{i}": p for i, p in enumerate(data.draw(st.lists(st.tuples(xs, ys), max_size=7)))}
    bnd = st.sampled_from([-INF, 0.0, 0.5, 1.0, 2.0, 3.0, 3.5, 4.0, 5.0, 6.0, INF])
    pairs = data.draw(st.lists(st.tuples(bnd, bnd), min_size=1, max_size=15))
    SUB = {f"s{i}": (min(p), max(p)) for i, p in enumerate(pairs)}
    subs = _subscribers(P, SUB, bucket_size=2, merge_threshold=4)
    rows, old, expect = [], {}, set()
    n_keys = len(P)
    for seq in range(data.draw(st.integers(1, 5), label="n_updates")):
        kind = data.draw(st.sampled_from(["y", "ins", "del", "move"]), label="kind")
        before = {s: bmin(P, *b) for s, b in SUB.items()}
        if kind == "ins" or not P:
            x, y = data.draw(xs), data.draw(ys)
            rows += [(seq, 0) + m for m in reformulate(list(P.values()), x, INF, y)]
            P[f"t{n_keys}"] = (x, y)
            n_keys += 1
        else:
            key = data.draw(st.sampled_from(sorted(P)))
            x, y = P[key]
            others = [p for k, p in P.items() if k != key]
            if kind == "y":
                yn = data.draw(ys)
                rows += [(seq, 0) + m for m in reformulate(others, x, y, yn)]
                P[key] = (x, yn)
            elif kind == "del":
                rows += [(seq, 0) + m for m in reformulate(others, x, y, INF)]
                del P[key]
            else:
                xn, yn = data.draw(xs), data.draw(ys)
                rows += [(seq, 0) + m for m in reformulate(others, x, y, INF)]
                rows += [(seq, 1) + m for m in reformulate(others, xn, INF, yn)]
                P[key] = (xn, yn)
                old[seq] = y
        after = {s: bmin(P, *b) for s, b in SUB.items()}
        expect |= {(s, after[s], seq) for s in SUB if after[s] != before[s]}
    msgs = msg_table(rows)
    u = rows_of(unicast(subs.points, msgs, old))
    got = rows_of(subs.deliver(msgs))
    assert got == expect
    assert u == expect
    for s, b in SUB.items():
        v = subs.value(s)
        assert (None if v != v else v) == bmin(P, *b)


def test_byte_accounting():
    assert MESSAGE_BYTES == 48 and UNICAST_ROW_BYTES == 24
    assert message_bytes(3) == 144 and unicast_bytes(10) == 240 and message_bytes(0) == 0


def test_pandas_messages_and_value_inputs():
    pd = pytest.importorskip("pandas")
    subs = Subscribers()
    subs.add(pd.Series(["u", "v"]), pd.Series([0.0, -INF]), pd.Series([4.0, INF]),
             values=pa.array([2.0, None]))
    assert subs.value("u") == 2.0 and math.isnan(subs.value("v"))
    subs.set_values(["u", "v"], [None, 3.0])
    assert math.isnan(subs.value("u")) and subs.value("v") == 3.0
    subs.set_values(["u"], 7.0)
    assert subs.value("u") == 7.0
    with pytest.raises(ValueError):
        subs.set_values(["u", "v"], [1.0])
    with pytest.raises(TypeError):
        subs.add([1], [0.0], [1.0])
    df = pd.DataFrame({"seq": [0, 0], "step": [0, 1], "new_value": [1.0, np.nan],
                       "inner_l": [1.0, 1.0], "inner_r": [2.0, 2.0],
                       "outer_l": [-INF, -INF], "outer_r": [INF, INF], "group_id": ["G", "G"]})
    out = subs.deliver(df)
    assert rows_of(out) == {("v", None, 0), ("u", None, 0)}
    assert out.column("group_id").to_pylist() == ["G", "G"]
    mi, sl = match(subs.points, df)
    assert mi.tolist() == [0, 0, 1, 1]
