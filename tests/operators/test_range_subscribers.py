"""range_subscribers: the network + subscriber side of RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG against
brute force and against the groups' own unicast mode.

For every batch: ``deliver(the group's reformulated messages)`` equals the unicast rows of the same batch
(top-k: as the net change per batch, the reformulated form being Paint-Batch over the whole batch, 002
§IV-A; DISTINCT and aggregates: row for row), every subscriber's state equals the recomputed top-k list /
DISTINCT set / aggregate, and a subscriber is notified iff its result changed."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.topk import core as topk
from sparksub.operators.agg.core import AggState, exact
from sparksub.operators.agg.group import AggSnapshot
from sparksub.operators.distinct.group import DistinctSnapshot
from sparksub.operators.topk.group import TopkSnapshot
from sparksub.operators.agg.subscribers import AggSubscribers
from sparksub.operators.distinct.subscribers import DistinctSubscribers
from sparksub.operators.shared.range_classes import RegionStats
from sparksub.operators.shared.schemas import UNICAST_ITEMS_SCHEMA
from sparksub.operators.topk.subscribers import TopkSubscribers

INF = math.inf
_SET = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------------- workloads
@st.composite
def workload(draw, kind: str):
    """Rows, subscriptions and batches with many ties in x and y and repeated keys.

    ``kind``: 'topk' (float y, maybe int keys), 'distinct' (string or float values), 'agg' (float y)."""
    int_keys = kind == "topk" and draw(st.booleans())
    keys = list(range(12)) if int_keys else [f"k{i}" for i in range(12)]   # 2 < 10 but "10" < "2"
    xs = st.integers(0, draw(st.sampled_from([2, 6]))).map(float)
    if kind == "distinct" and draw(st.booleans()):
        ys = st.sampled_from(["a", "b", "c"])
    elif kind == "agg_extreme":
        ys = st.sampled_from(EXTREME_YS)
    else:
        ys = st.integers(0, draw(st.sampled_from([1, 3, 20]))).map(float)
    rows = {k: (draw(xs), draw(ys)) for k in draw(st.lists(st.sampled_from(keys), unique=True, max_size=12))}
    dense = draw(st.booleans())
    bound = st.one_of(st.just(-INF), st.just(INF), xs)
    kmax = draw(st.sampled_from([1, 3, 20]))
    subs = []
    for i in range(draw(st.integers(1, 40 if dense else 5))):
        a, b = draw(bound), draw(bound)
        if draw(st.integers(0, 9)):          # mostly x1 <= x2; sometimes an empty (inverted) range
            a, b = min(a, b), max(a, b)
        subs.append((f"s{i}", a, b, draw(st.integers(1, kmax))))
    batches = []
    cur = dict(rows)
    for _ in range(draw(st.integers(1, 4))):
        ups = []
        for _ in range(draw(st.integers(1, 8))):
            key = draw(st.sampled_from(keys))
            what = draw(st.sampled_from(["delete", "upsert", "y", "x", "null"]))
            if what == "delete" or (what in ("y", "x") and key not in cur):
                ups.append((key, None, None, 1))
            elif what == "null":
                ups.append((key, None, draw(ys), 0))        # a null X: the row leaves every range
            elif what == "y":
                ups.append((key, cur[key][0], draw(ys), 0))  # a value update at the same x
            elif what == "x":
                ups.append((key, draw(xs), cur[key][1], 0))  # an x-move with the same y
            else:
                ups.append((key, draw(xs), draw(ys), 0))
            _apply(cur, [ups[-1]])
        batches.append(ups)
    return rows, subs, batches, int_keys


#: values whose exact sums need more than two floats, overflow, cancel or sit on rounding ties
EXTREME_YS = (1e308, -1e308, 1.7e308, 5e-324, -5e-324, 1e16, -1e16, 1.0, 2.0 ** -80, 0.1, 3.0, -2.5, 2.0 ** 53)


def _apply(rows: dict, updates) -> None:
    for key, x, y, op in updates:
        if op == 1 or x is None or y is None:
            rows.pop(key, None)
        else:
            rows[key] = (x, y)


#: each class's snapshot (topk/, distinct/, agg/ group.py)
SNAPSHOTS = {"RANGE_TOPK": TopkSnapshot, "RANGE_DISTINCT": DistinctSnapshot, "RANGE_AGG": AggSnapshot}

def _snapshot(kind, option, subs, rows):
    keys = list(rows)
    return SNAPSHOTS[kind](
        "g", "t", "x", "y", option,
        np.array([s[0] for s in subs], dtype=object), np.array([s[1] for s in subs], dtype=float),
        np.array([s[2] for s in subs], dtype=float), np.array([s[3] for s in subs], dtype=np.int64),
        np.array(keys, dtype=object), np.array([rows[k][0] for k in keys], dtype=float),
        np.array([rows[k][1] for k in keys], dtype=object))


def _batch(updates, seq0):
    ys = [u[2] for u in updates]
    y = pa.array(ys, pa.string()) if any(isinstance(v, str) for v in ys) else pa.array(ys, pa.float64())
    return pa.table({"key": [u[0] for u in updates], "x": pa.array([u[1] for u in updates], pa.float64()),
                     "y": y, "op": pa.array([u[3] for u in updates], pa.int8()),
                     "seq": pa.array(range(seq0, seq0 + len(updates)), pa.int64())})


def _text(key) -> str:
    return key if isinstance(key, str) else str(key)


# ----------------------------------------------------------------------------------------------- top-k oracle
def _top(rows, x1, x2, k, desc):
    items = sorted(((key, x, y) for key, (x, y) in rows.items() if x1 <= x <= x2),
                   key=lambda t: ((-t[2] if desc else t[2]), t[0]))
    return items[:k]


def _diff_rows(sid, old, new, seq) -> list[dict]:
    """The rows a unicast server sends for one subscriber's list change (entries, then leaves)."""
    before = {key: (x, y) for key, x, y in old}
    after = {key: (x, y) for key, x, y in new}
    out = []
    for key, (x, y) in after.items():
        if before.get(key) != (x, y):
            out.append({"subscription_id": sid, "op": "enter" if key not in before else "update", "value": y,
                        "seq": seq, "group_id": "g", "item_key": _text(key), "item_x": x, "item_text": None})
    for key, (x, y) in before.items():
        if key not in after:
            out.append({"subscription_id": sid, "op": "leave", "value": y, "seq": seq, "group_id": "g",
                        "item_key": _text(key), "item_x": x, "item_text": None})
    return out


def _net(before: dict, rows: list[dict], desc: bool) -> dict:
    """Each subscriber's list after replaying unicast rows on ``before``."""
    local = {sid: {_text(k): (x, y) for k, x, y in lst} for sid, lst in before.items()}
    for r in rows:
        mine = local[r["subscription_id"]]
        if r["op"] == "leave":
            del mine[r["item_key"]]
        else:
            mine[r["item_key"]] = (r["item_x"], r["value"])
    return {sid: sorted(((k, x, y) for k, (x, y) in d.items()), key=lambda t: ((-t[2] if desc else t[2]), t[0]))
            for sid, d in local.items()}


def _textual(lists: dict, desc: bool) -> dict:
    return {sid: sorted(((_text(k), x, y) for k, x, y in lst), key=lambda t: ((-t[2] if desc else t[2]), t[0]))
            for sid, lst in lists.items()}


@_SET
@given(workload("topk"), st.booleans())
def test_topk_deliver_equals_unicast_and_brute_force(w, desc):
    rows, subs, batches, int_keys = w
    g_u = _snapshot("RANGE_TOPK", desc, subs, rows).build()
    g_r = _snapshot("RANGE_TOPK", desc, subs, rows).build()
    net = TopkSubscribers.from_group(g_r, key_type=int if int_keys else str)
    # a second network gets every batch's messages with the rows reversed (as a shuffle may leave them):
    # msg_no puts them back in the emitted order (002 §II-A, footnote 6)
    net_reversed = TopkSubscribers.from_group(g_r, key_type=int if int_keys else str)
    seq = 0
    for ups in batches:
        before = {s[0]: _top(rows, s[1], s[2], s[3], desc) for s in subs}
        unicast = g_u.apply(_batch(ups, seq), "unicast").to_pylist()
        messages = g_r.apply(_batch(ups, seq), "reformulated")
        assert messages.column("msg_no").to_pylist() == list(range(messages.num_rows))
        delivered = net.deliver(messages)
        assert net_reversed.deliver(messages.take(pa.array(range(messages.num_rows)[::-1], pa.int64()))) == delivered
        assert delivered.schema == UNICAST_ITEMS_SCHEMA
        delivered = delivered.to_pylist()
        # the unicast rows: every update's per-subscriber list diff, in subscription order
        want_unicast, cur = [], dict(rows)
        for i, u in enumerate(ups):
            old = {s[0]: _top(cur, s[1], s[2], s[3], desc) for s in subs}
            _apply(cur, [u])
            for s in subs:
                want_unicast += _diff_rows(s[0], old[s[0]], _top(cur, s[1], s[2], s[3], desc), seq + i)
        assert unicast == want_unicast
        _apply(rows, ups)
        after = {s[0]: _top(rows, s[1], s[2], s[3], desc) for s in subs}
        # deliver: each changed subscriber's net change over the batch, at the batch's last seq
        last = seq + len(ups) - 1
        assert delivered == [r for s in subs for r in _diff_rows(s[0], before[s[0]], after[s[0]], last)]
        # the same net change as replaying the unicast rows; notified <=> changed
        replayed = _net(before, unicast, desc)
        assert replayed == _textual(after, desc)
        net_changes = {(r["subscription_id"], r["op"], r["item_key"], r["item_x"], r["value"]) for r in delivered}
        start = _textual(before, desc)
        assert net_changes == {(r["subscription_id"], r["op"], r["item_key"], r["item_x"], r["value"])
                               for s in subs for r in _diff_rows(s[0], start[s[0]], replayed[s[0]], last)}
        assert {r["subscription_id"] for r in delivered} == {sid for sid in after if after[sid] != before[sid]}
        for s in subs:
            assert net.result(s[0]) == after[s[0]]
        seq += len(ups)


def test_topk_int_keys_rank_ties_by_the_key_not_its_text():
    """Ties in y are broken by the key: an int-keyed table ranks 2 before 10 ("10" < "2" as text)."""
    rows = {2: (1.0, 5.0), 10: (2.0, 6.0)}
    g = _snapshot("RANGE_TOPK", False, [("s", 0.0, 9.0, 1)], rows).build()
    net = TopkSubscribers.from_group(g)            # key type inferred from the core: int
    assert net.key_type is int and net.result("s") == [(2, 1.0, 5.0)]
    out = net.deliver(g.apply(_batch([(10, 2.0, 5.0, 0)], 0), "reformulated")).to_pylist()
    assert out == [] and net.result("s") == [(2, 1.0, 5.0)]   # (5, 2) ranks before (5, 10)
    out = net.deliver(g.apply(_batch([(2, 1.0, 7.0, 0)], 1), "reformulated")).to_pylist()
    assert [(r["op"], r["item_key"]) for r in out] == [("enter", "10"), ("leave", "2")]


# ----------------------------------------------------------------------------------------------- DISTINCT
def _distinct(rows, x1, x2) -> set:
    return {y for x, y in rows.values() if x1 <= x <= x2}


@_SET
@given(workload("distinct"))
def test_distinct_deliver_equals_unicast_and_brute_force(w):
    rows, subs, batches, _ = w
    g_u = _snapshot("RANGE_DISTINCT", None, subs, rows).build()
    g_r = _snapshot("RANGE_DISTINCT", None, subs, rows).build()
    net = DistinctSubscribers.from_group(g_r)
    seq = 0
    for ups in batches:
        unicast = g_u.apply(_batch(ups, seq), "unicast").to_pylist()
        delivered = net.deliver(g_r.apply(_batch(ups, seq), "reformulated")).to_pylist()
        assert delivered == unicast
        for i, u in enumerate(ups):               # per update: notified <=> the set changed, by the change
            old = {s[0]: _distinct(rows, s[1], s[2]) for s in subs}
            _apply(rows, [u])
            got: dict = {}
            for r in delivered:
                if r["seq"] == seq + i:
                    v = r["item_text"] if r["item_text"] is not None else r["value"]
                    got.setdefault(r["subscription_id"], set()).add((r["op"], v))
            want = {}
            for s in subs:
                new = _distinct(rows, s[1], s[2])
                if new != old[s[0]]:
                    want[s[0]] = {("add", v) for v in new - old[s[0]]} | {("remove", v) for v in old[s[0]] - new}
            assert got == want
        for s in subs:
            assert set(net.result(s[0])) == _distinct(rows, s[1], s[2])
        seq += len(ups)


# ----------------------------------------------------------------------------------------------- aggregates
def _agg(rows, x1, x2, func):
    ys = [y for x, y in rows.values() if x1 <= x <= x2]
    return AggState(len(ys), sum(exact(y) for y in ys)).value(func)


def _agg_fraction(rows, x1, x2, func):
    """The aggregate with Python's exact rationals, correctly rounded once (an oracle independent of agg/core.py's
    scaled ints and double-doubles); beyond the float range ±inf."""
    ys = [Fraction(y) for x, y in rows.values() if x1 <= x <= x2]
    if func == "count":
        return len(ys)
    if not ys:
        return None
    v = sum(ys) / (len(ys) if func == "avg" else 1)
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _check_agg_deliver(w, func, oracle) -> None:
    """Batch after batch: deliver() of the reformulated messages equals the group's unicast row for row; per
    update, a subscriber is notified iff ``oracle``'s value changed, with it; every result equals ``oracle``'s."""
    rows, subs, batches, _ = w
    g_u = _snapshot("RANGE_AGG", func, subs, rows).build()
    g_r = _snapshot("RANGE_AGG", func, subs, rows).build()
    net = AggSubscribers.from_group(g_r)
    seq = 0
    for ups in batches:
        unicast = g_u.apply(_batch(ups, seq), "unicast").to_pylist()
        delivered = net.deliver(g_r.apply(_batch(ups, seq), "reformulated")).to_pylist()
        assert delivered == unicast
        for i, u in enumerate(ups):
            old = {s[0]: oracle(rows, s[1], s[2], func) for s in subs}
            _apply(rows, [u])
            got = {r["subscription_id"]: r["value"] for r in delivered if r["seq"] == seq + i}
            new = {s[0]: oracle(rows, s[1], s[2], func) for s in subs}
            assert got == {sid: None if v is None else float(v) for sid, v in new.items() if v != old[sid]}
        for s in subs:
            assert net.result(s[0]) == oracle(rows, s[1], s[2], func)
        seq += len(ups)


@_SET
@given(workload("agg"), st.sampled_from(["count", "sum", "avg"]))
def test_agg_deliver_equals_unicast_and_brute_force(w, func):
    _check_agg_deliver(w, func, _agg)


@_SET
@given(workload("agg_extreme"), st.sampled_from(["sum", "avg"]))
def test_agg_subscribers_exact_at_the_float_range_s_edges(w, func):
    """Sums that a pair of floats cannot hold (1e16 + 1 + 2**-80), that overflow (1e308 + 1.7e308) and come back,
    that cancel, or whose mean is a tie: the subscribers' values (double-doubles with exact-int fallbacks,
    ``agg/subscribers.ExactSums``) equal the exact rational aggregate rounded once, and the whole group's unicast
    (``AggUnicast``) row for row."""
    _check_agg_deliver(w, func, _agg_fraction)


# ----------------------------------------------------------------------------------------------- add / remove
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload("topk"), st.sampled_from(["topk", "distinct", "agg"]), st.data())
def test_subscribers_come_and_go(w, kind, data):
    """Subscribers removed and added between batches (freed slots reused): states stay exact and
    exactly the changed ones are notified."""
    rows, subs, batches, int_keys = w
    if kind == "distinct":
        rows = {k: (x, "abc"[int(y) % 3]) for k, (x, y) in rows.items()}
        batches = [[(k, x, None if y is None else "abc"[int(y) % 3], op) for k, x, y, op in ups] for ups in batches]
    klass = {"topk": "RANGE_TOPK", "distinct": "RANGE_DISTINCT", "agg": "RANGE_AGG"}[kind]
    g = _snapshot(klass, {"topk": False, "distinct": None, "agg": "sum"}[kind], subs, rows).build()
    net = (TopkSubscribers.from_group(g, key_type=int if int_keys else str) if kind == "topk"
           else {"distinct": DistinctSubscribers, "agg": AggSubscribers}[kind].from_group(g))
    ks = sorted({s[3] for s in subs})
    live = {s[0]: s for s in subs}

    def state(s):
        if kind == "topk":
            return _top(rows, s[1], s[2], s[3], False)
        return _distinct(rows, s[1], s[2]) if kind == "distinct" else _agg(rows, s[1], s[2], "sum")

    def result(sid):
        return set(net.result(sid)) if kind == "distinct" else net.result(sid)

    seq, fresh = 0, 0
    for ups in batches:
        gone = data.draw(st.lists(st.sampled_from(sorted(live)), unique=True, max_size=3)) if live else []
        net.remove(gone)
        for sid in gone:
            del live[sid]
            assert sid not in net
        for _ in range(data.draw(st.integers(0, 3))):
            a, b = sorted([data.draw(st.sampled_from([-INF, 0.0, 1.0, 2.0, 6.0, INF])) for _ in range(2)])
            s = (f"n{fresh}", a, b, data.draw(st.sampled_from(ks)))
            fresh += 1
            seed = data.draw(st.booleans())       # seeded from the core, or from a given result
            if kind == "topk":
                net.add([s[0]], [a], [b], [s[3]], **({"core": g.core} if seed else {"results": [state(s)]}))
            elif kind == "distinct":
                net.add([s[0]], [a], [b], **({"core": g.core} if seed else {"results": [state(s)]}))
            else:
                net.add([s[0]], [a], [b], core=g.core)
            live[s[0]] = s
        before = {sid: state(s) for sid, s in live.items()}
        out = net.deliver(g.apply(_batch(ups, seq), "reformulated")).to_pylist()
        if kind == "topk":                         # Paint-Batch: the net change over the batch
            _apply(rows, ups)
            after = {sid: state(s) for sid, s in live.items()}
            assert {r["subscription_id"] for r in out} == {sid for sid in live if after[sid] != before[sid]}
        else:                                      # per update
            for i, u in enumerate(ups):
                _apply(rows, [u])
                after = {sid: state(s) for sid, s in live.items()}
                notified = {r["subscription_id"] for r in out if r["seq"] == seq + i}
                assert notified == {sid for sid in live if after[sid] != before[sid]}
                before = after
        for sid, s in live.items():
            assert result(sid) == after[sid]
        seq += len(ups)
    assert len(net) == len(live)


def test_registry_errors():
    g = _snapshot("RANGE_TOPK", False, [("a", 0.0, 1.0, 2), ("b", 3.0, 1.0, 2)], {"k": (0.5, 1.0)}).build()
    net = TopkSubscribers.from_group(g)
    assert net.result("a") == [("k", 0.5, 1.0)] and net.result("b") == []   # b: x1 > x2, an empty range
    with pytest.raises(DuplicateSubscription):
        net.add(["a"], [0.0], [1.0], [2])
    with pytest.raises(ValueError, match="not painted"):
        net.add(["c"], [0.0], [1.0], [3])       # the group paints for k = 2 only
    with pytest.raises(UnknownSubscription):
        net.remove(["zz"])
    net.remove(["a", "b"])
    assert len(net) == 0 and "a" not in net
    d = DistinctSubscribers()
    d.add(["x", "y"], [0.0, 5.0], [1.0, 1.0], results=[{"p"}, set()])
    with pytest.raises(DuplicateSubscription):
        d.add(["y"], [0.0], [1.0])
    assert d.result("x") == ["p"] and d.result("y") == []
    a = AggSubscribers("count")
    a.add(["x"], [0.0], [1.0])
    with pytest.raises(UnknownSubscription):
        a.remove(["x", "nope"])
    assert "x" in a and a.result("x") == 0


def test_deliver_routes_through_the_index_only():
    """Every (message, subscription) delivery is one the predicate admits: the index reports exactly
    the subscriptions inside each message's rectangle, none else is looked at."""
    subs = [(f"s{i}", float(i), float(i + 2), 2) for i in range(200)]
    rows = {f"k{i}": (float(i), float(i % 7)) for i in range(100)}
    g = _snapshot("RANGE_TOPK", False, subs, rows).build()
    net = TopkSubscribers.from_group(g)
    out = g.apply(_batch([("k5", 150.0, 0.0, 0), ("k60", 60.0, -1.0, 0)], 0), "reformulated")
    msgs = [topk.TopkMessage(r["k"], r["inner_l"], r["inner_r"], r["outer_l"], r["outer_r"], r["item_key"],
                             r["item_x"], r["new_value"]) for r in out.to_pylist()]
    reach = sum(topk.reaches(m, s[1], s[2], s[3]) for m in msgs for s in subs)
    net.deliver(out)
    assert net.counters["messages"] == len(msgs)
    assert net.counters["deliveries"] == reach < len(msgs) * len(subs) // 10


def test_region_stats():
    r = RegionStats(sample=2)
    r.observe(1, 5.0, 5.0, 2.0, 9.0)
    r.observe(1, 5.0, 5.0, -INF, 9.0)
    r.observe(1, 4.0, 6.0, 3.0, 8.0)
    assert r.messages == 3 and r.finite == {"x1 side": 2, "x2 side": 3, "extent": 2, "area": 2}
    assert r.mean("extent") == 6.0 and r.mean("area") == (3.0 * 4.0 + 1.0 * 2.0) / 2
    assert r.mean("x2 side") == (4.0 + 4.0 + 2.0) / 3
    assert r.extent("Mar width").startswith("3 messages; Mar width (OUTER_R - OUTER_L) mean 6 over 2; area ")
    assert RegionStats().extent() == ("0 messages; X extent (OUTER_R - OUTER_L) -; area (x1 side * x2 side) -; "
                                      "x1 side (INNER_L - OUTER_L) -; x2 side (OUTER_R - INNER_R) -")
    assert r.reach(lambda k, il, ir, ol, orr: int(il)) == (4.5, 5, 2)   # the last 2 rectangles
