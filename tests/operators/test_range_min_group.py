"""The group operator (core + subscription index) against a brute-force oracle, with hypothesis:
after every update, unicast notifies exactly the subscriptions whose MIN (MAX) changed, with the new
value; the reformulated messages, delivered, give exactly the same rows; results equal recomputation."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksub.operators.range_min.delivery import Subscribers
from sparksub.operators.range_min.group import RangeMinGroup

INF = math.inf


def oracle(rows: dict, lo: float, hi: float, maximum: bool):
    ys = [y for x, y in rows.values() if lo <= x <= hi]
    return (max(ys) if maximum else min(ys)) if ys else None


coord = st.integers(0, 12).map(float)
subscription = st.tuples(st.integers(-1, 13), st.integers(-1, 13)).map(
    lambda t: (min(t) if min(t) >= 0 else -INF, max(t) if max(t) <= 12 else INF))
update = st.tuples(st.sampled_from(["y", "x", "insert", "delete", "null"]), st.integers(0, 10 ** 6),
                   coord, coord)


@settings(max_examples=60, deadline=None)
@given(points=st.lists(st.tuples(coord, coord), min_size=0, max_size=14),
       subs=st.lists(subscription, min_size=1, max_size=25),
       updates=st.lists(update, min_size=1, max_size=25),
       maximum=st.booleans(), batch_size=st.integers(1, 6))
def test_unicast_and_delivered_reformulation_equal_the_oracle(points, subs, updates, maximum, batch_size):
    rows = {f"k{i}": p for i, p in enumerate(points)}
    ids = [f"s{i}" for i in range(len(subs))]
    x1 = np.array([a for a, _ in subs])
    x2 = np.array([b for _, b in subs])
    unicast_group = RangeMinGroup("g", "t", "x", "y", maximum)
    reform_group = RangeMinGroup("g", "t", "x", "y", maximum)
    for g in (unicast_group, reform_group):
        g.register(ids, x1, x2)
        g.load(list(rows), [p[0] for p in rows.values()], [p[1] for p in rows.values()])
    subscribers = Subscribers()
    subscribers.add(ids, x1, x2, values=np.array(
        [np.nan if (v := oracle(rows, a, b, maximum)) is None else v for a, b in subs]))

    # turn the drawn updates into concrete rows against the evolving table
    batch, expected, nxt = [], {}, len(points)
    for seq, (kind, pick, x, y) in enumerate(updates):
        live = sorted(rows)
        if kind in ("y", "x", "delete", "null") and not live:
            kind = "insert"
        if kind == "insert":
            key = f"k{nxt}"
            nxt += 1
            row = (key, x, y, 0)
        else:
            key = live[pick % len(live)]
            if kind == "y":
                row = (key, rows[key][0], y, 0)
            elif kind == "x":
                row = (key, x, y, 0)
            elif kind == "delete":
                row = (key, None, None, 1)
            else:  # a NULL Y: the row leaves every range
                row = (key, rows[key][0], None, 0)
        before = {s: oracle(rows, a, b, maximum) for s, (a, b) in zip(ids, subs)}
        if row[3] == 1 or row[2] is None:
            rows.pop(key, None)
        else:
            rows[key] = (row[1], row[2])
        after = {s: oracle(rows, a, b, maximum) for s, (a, b) in zip(ids, subs)}
        changed = {s: v for s, v in after.items() if v != before[s]}
        if changed:
            expected[seq] = changed
        batch.append((*row, seq))

    got_unicast, got_delivered = {}, {}
    for start in range(0, len(batch), batch_size):
        chunk = batch[start:start + batch_size]
        table = pa.table({"key": [r[0] for r in chunk], "x": pa.array([r[1] for r in chunk], pa.float64()),
                          "y": pa.array([r[2] for r in chunk], pa.float64()),
                          "op": pa.array([r[3] for r in chunk], pa.int8()),
                          "seq": pa.array([r[4] for r in chunk], pa.int64())})
        for r in unicast_group.apply(table, "unicast").to_pylist():
            assert r["subscription_id"] not in got_unicast.get(r["seq"], {}), "notified twice for one update"
            got_unicast.setdefault(r["seq"], {})[r["subscription_id"]] = r["value"]
        messages = reform_group.apply(table, "reformulated")
        for r in subscribers.deliver(messages).to_pylist():
            got_delivered.setdefault(r["seq"], {})[r["subscription_id"]] = r["value"]
    assert got_unicast == expected
    assert got_delivered == expected
    for s, (a, b) in zip(ids, subs):
        assert unicast_group.result(s) == oracle(rows, a, b, maximum)


def test_cn_relax_counts_every_range_holding_the_update():
    g = RangeMinGroup("g", "t", "x", "y", False)
    g.register(["a", "b", "c"], np.array([0.0, 5.0, -INF]), np.array([10.0, 6.0, 2.0]))
    g.load(["k1", "k2"], [1.0, 5.0], [3.0, 4.0])
    out = g.apply({"key": ["k1", "k2", "k1"], "x": np.array([1.0, 5.0, 5.5]), "y": np.array([9.0, 9.0, 1.0]),
                   "op": np.array([0, 0, 0]), "seq": np.array([0, 1, 2])}, "cn_relax")
    # k1 at 1 lies in a and c; k2 at 5 in a and b; k1 moving 1 -> 5.5 reaches a, c (old) and a, b (new)
    assert out.column("deliveries").to_pylist() == [2, 2, 4]
