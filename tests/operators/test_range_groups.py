"""The RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group operators against recomputation from the rows:
after every batch, the subscriber state kept only from the notifications (unicast rows, or the
reformulated messages applied by the subscriber-side predicate) equals a brute-force recomputation."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.agg import core as range_agg
from sparksub.operators.distinct import core as range_distinct
from sparksub.operators.topk import core as topk
from sparksub.operators.agg.group import AggSnapshot
from sparksub.operators.distinct.group import DistinctSnapshot
from sparksub.operators.topk.group import TopkSnapshot

KEYS = [f"k{i}" for i in range(8)]


#: each class's snapshot (topk/, distinct/, agg/ group.py)
SNAPSHOTS = {"RANGE_TOPK": TopkSnapshot, "RANGE_DISTINCT": DistinctSnapshot, "RANGE_AGG": AggSnapshot}

def _snapshot(kind, option, subs, rows, y_kind=float):
    keys = list(rows)
    return SNAPSHOTS[kind](
        "g", "t", "x", "y", option,
        np.array([s[0] for s in subs], dtype=object), np.array([s[1] for s in subs], dtype=float),
        np.array([s[2] for s in subs], dtype=float), np.array([s[3] for s in subs], dtype=np.int64),
        np.array(keys, dtype=object), np.array([rows[k][0] for k in keys], dtype=float),
        np.array([rows[k][1] for k in keys], dtype=object))


def _batch(updates, seq0):
    return pa.table({"key": [u[0] for u in updates], "x": pa.array([u[1] for u in updates], pa.float64()),
                     "y": [u[2] for u in updates], "op": pa.array([u[3] for u in updates], pa.int8()),
                     "seq": pa.array(range(seq0, seq0 + len(updates)), pa.int64())})


def _apply_rows(rows: dict, updates) -> None:
    for key, x, y, op in updates:
        if op == 1 or x is None or y is None:
            rows.pop(key, None)
        else:
            rows[key] = (x, y)


def _in(rows, x1, x2):
    return [(k, x, y) for k, (x, y) in rows.items() if x1 <= x <= x2]


num = st.integers(0, 6).map(float)
bound = st.one_of(st.just(-math.inf), st.just(math.inf), num)


@st.composite
def scenario(draw, y_strategy):
    rows = {k: (draw(num), draw(y_strategy)) for k in draw(st.lists(st.sampled_from(KEYS), unique=True))}
    subs = []
    for i in range(draw(st.integers(1, 8))):
        a, b = sorted([draw(bound), draw(bound)])
        subs.append((f"s{i}", a, b, draw(st.integers(1, 4))))
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        ups = []
        for _ in range(draw(st.integers(1, 6))):
            key = draw(st.sampled_from(KEYS))
            if draw(st.integers(0, 4)) == 0:
                ups.append((key, None, None, 1))
            else:
                ups.append((key, draw(st.one_of(num, st.just(None))) if draw(st.booleans()) else draw(num),
                            draw(y_strategy), 0))
        batches.append(ups)
    return rows, subs, batches


_SET = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _topk_oracle(rows, x1, x2, k, desc):
    items = _in(rows, x1, x2)
    items.sort(key=lambda t: ((-t[2] if desc else t[2]), t[0]))
    return [(key, x, y) for key, x, y in items[:k]]


@_SET
@given(scenario(num), st.booleans(), st.sampled_from(["unicast", "reformulated"]), scenario(num))
def test_topk_group(sc, desc, mode, replayed):
    rows, subs, batches = sc
    g = _snapshot("RANGE_TOPK", desc, subs, rows).build()
    for ups in replayed[2]:            # a log replay (mode 'none'): the unicast lists must resync
        g.apply(_batch(ups, 0), "none")
        _apply_rows(rows, ups)
    local = {s[0]: {key: (x, y) for key, x, y in _topk_oracle(rows, s[1], s[2], s[3], desc)} for s in subs}
    subscribers = {s[0]: topk.TopkSubscriber(s[1], s[2], s[3], [(k, x, y) for k, (x, y) in local[s[0]].items()],
                                             descending=desc) for s in subs} \
        if mode == "reformulated" else None
    seq = 0
    for ups in batches:
        out = g.apply(_batch(ups, seq), mode).to_pylist()
        seq += len(ups)
        _apply_rows(rows, ups)
        for s in subs:
            want = _topk_oracle(rows, s[1], s[2], s[3], desc)
            assert g.result(s[0]) == want
            if mode == "unicast":
                for r in out:
                    if r["subscription_id"] == s[0]:
                        if r["op"] == "leave":
                            local[s[0]].pop(r["item_key"])
                        else:
                            local[s[0]][r["item_key"]] = (r["item_x"], r["value"])
                got = sorted(local[s[0]].items(), key=lambda kv: ((-kv[1][1] if desc else kv[1][1]), kv[0]))
                assert [(k, x, y) for k, (x, y) in got] == want
            else:
                sub = subscribers[s[0]]
                for r in out:
                    m = topk.TopkMessage(r["k"], r["inner_l"], r["inner_r"], r["outer_l"], r["outer_r"],
                                         r["item_key"], r["item_x"], r["new_value"])
                    if topk.reaches(m, s[1], s[2], s[3]):
                        sub.receive(m)
                assert [(k, x, y) for k, x, y in sub.items] == want


@_SET
@given(scenario(st.sampled_from(["a", "b", "c"])), st.sampled_from(["unicast", "reformulated"]))
def test_distinct_group(sc, mode):
    rows, subs, batches = sc
    g = _snapshot("RANGE_DISTINCT", None, subs, rows).build()
    local = {s[0]: {y for _, _, y in _in(rows, s[1], s[2])} for s in subs}
    seq = 0
    for ups in batches:
        out = g.apply(_batch(ups, seq), mode).to_pylist()
        seq += len(ups)
        _apply_rows(rows, ups)
        for s in subs:
            want = {y for _, _, y in _in(rows, s[1], s[2])}
            assert set(g.result(s[0])) == want
            if mode == "unicast":
                changed = False
                for r in out:
                    if r["subscription_id"] == s[0]:
                        changed = True
                        (local[s[0]].add if r["op"] == "add" else local[s[0]].discard)(r["item_text"])
                assert changed == any(r["subscription_id"] == s[0] for r in out)
            else:
                msgs = [range_distinct.Message(r["op"], r["item_text"], r["inner_l"], r["inner_r"],
                                               r["outer_l"], r["outer_r"]) for r in out]
                range_distinct.apply(msgs, local[s[0]], s[1], s[2])
            assert local[s[0]] == want


@_SET
@given(scenario(num), st.sampled_from(["count", "sum", "avg"]), st.sampled_from(["unicast", "reformulated"]),
       scenario(num))
def test_agg_group(sc, func, mode, replayed):
    rows, subs, batches = sc
    g = _snapshot("RANGE_AGG", func, subs, rows).build()
    # a log replay first (mode 'none', as a Spark worker rebuilding the group does): its rows are state
    for ups in replayed[2]:
        g.apply(_batch(ups, 0), "none")
        _apply_rows(rows, ups)

    def oracle(x1, x2):
        ys = [y for _, _, y in _in(rows, x1, x2)]
        if func == "count":
            return len(ys)
        if not ys:
            return None
        return math.fsum(ys) / (len(ys) if func == "avg" else 1)

    value = {s[0]: oracle(s[1], s[2]) for s in subs}
    state = {s[0]: g.core.state(s[1], s[2]) for s in subs}
    seq = 0
    for ups in batches:
        out = g.apply(_batch(ups, seq), mode).to_pylist()
        seq += len(ups)
        _apply_rows(rows, ups)
        for s in subs:
            want = oracle(s[1], s[2])
            got = g.result(s[0])
            assert (got is None and want is None) or math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12)
            if mode == "unicast":
                mine = [r["value"] for r in out if r["subscription_id"] == s[0]]
                if mine:
                    value[s[0]] = mine[-1]
                v = value[s[0]]
                assert (v is None and want is None) or math.isclose(v, want, rel_tol=1e-12, abs_tol=1e-12)
            else:
                msgs = [range_agg.Message(r["inner_l"], r["d_count"], r["new_value"]) for r in out]
                state[s[0]] = range_agg.apply(msgs, state[s[0]], s[1], s[2])
                v = state[s[0]].value(func)
                assert (v is None and want is None) or math.isclose(v, want, rel_tol=1e-12, abs_tol=1e-12)


# ---- the unicast path: core messages routed through the subscription index (range_subscribers) ----
def _topk_diff(sid, old, new, seq):
    before = {key: (x, y) for key, x, y in old}
    after = {key: (x, y) for key, x, y in new}
    out = [{"subscription_id": sid, "op": "enter" if key not in before else "update", "value": y, "seq": seq,
            "item_key": key, "item_x": x} for key, (x, y) in after.items() if before.get(key) != (x, y)]
    return out + [{"subscription_id": sid, "op": "leave", "value": y, "seq": seq, "item_key": key, "item_x": x}
                  for key, (x, y) in before.items() if key not in after]


def _strip(rows, keys):
    return [{k: r[k] for k in keys} for r in rows]


@_SET
@given(scenario(num), st.booleans(), st.lists(st.sampled_from(["unicast", "reformulated", "none"]), min_size=4,
                                               max_size=4))
def test_topk_unicast_rows_are_the_per_update_list_diffs(sc, desc, modes):
    """Unicast rows = every update's per-subscription list diff (entries in the new list's order, then
    leaves), subscriptions in order - also right after a 'none' replay or a Paint-Batch batch (resync)."""
    rows, subs, batches = sc
    g = _snapshot("RANGE_TOPK", desc, subs, rows).build()
    seq = 0
    for ups, mode in zip(batches, modes):
        out = g.apply(_batch(ups, seq), mode).to_pylist()
        if mode != "unicast":
            _apply_rows(rows, ups)
            seq += len(ups)
            continue
        want = []
        for i, u in enumerate(ups):
            old = {s[0]: _topk_oracle(rows, s[1], s[2], s[3], desc) for s in subs}
            _apply_rows(rows, [u])
            for s in subs:
                want += _topk_diff(s[0], old[s[0]], _topk_oracle(rows, s[1], s[2], s[3], desc), seq + i)
        assert _strip(out, ["subscription_id", "op", "value", "seq", "item_key", "item_x"]) == want
        assert all(r["group_id"] == "g" and r["item_text"] is None for r in out)
        seq += len(ups)


@_SET
@given(scenario(st.sampled_from(["a", "b", "c"])), st.lists(st.sampled_from(["unicast", "none"]), min_size=4,
                                                            max_size=4))
def test_distinct_unicast_rows_equal_the_predicate_over_all_subscriptions(sc, modes):
    """The index gives the rows the vectorised predicate over every subscription gave (message order,
    then subscription order)."""
    rows, subs, batches = sc
    g = _snapshot("RANGE_DISTINCT", None, subs, rows).build()
    mirror = range_distinct.RangeDistinctCore()
    mirror.load(list(rows), [v[0] for v in rows.values()], [v[1] for v in rows.values()])
    x1 = np.array([s[1] for s in subs])
    x2 = np.array([s[2] for s in subs])
    seq = 0
    for ups, mode in zip(batches, modes):
        out = g.apply(_batch(ups, seq), mode).to_pylist()
        want = []
        for i, (key, x, y, op) in enumerate(ups):
            if op == 1 or x is None or y is None:
                if key not in mirror:
                    continue
                outcome = mirror.delete(key)
            else:
                outcome = mirror.upsert(key, x, y)
            sub, msg = range_distinct.notifications(x1, x2, outcome)
            want += [{"subscription_id": subs[s][0], "op": outcome.messages[j].op.lower(), "seq": seq + i,
                      "item_text": outcome.messages[j].value} for s, j in zip(sub.tolist(), msg.tolist())]
        if mode == "unicast":
            assert _strip(out, ["subscription_id", "op", "seq", "item_text"]) == want
        seq += len(ups)


@_SET
@given(scenario(num), st.sampled_from(["count", "sum", "avg"]),
       st.lists(st.sampled_from(["unicast", "reformulated", "none"]), min_size=4, max_size=4))
def test_agg_unicast_rows_equal_the_mask_over_all_subscriptions(sc, func, modes):
    """The index gives the rows ``range_agg.AggUnicast`` (the server-side S-UN) gives, in subscription order."""
    rows, subs, batches = sc
    g = _snapshot("RANGE_AGG", func, subs, rows).build()
    seq = 0
    for ups, mode in zip(batches, modes):
        mirror = range_agg.RangeAggCore(func)
        mirror.load(list(rows), [v[0] for v in rows.values()], [v[1] for v in rows.values()])
        uni = range_agg.AggUnicast(func, [s[1] for s in subs], [s[2] for s in subs], mirror)
        out = g.apply(_batch(ups, seq), mode).to_pylist()
        want = []
        for i, (key, x, y, op) in enumerate(ups):
            if op == 1 or x is None or y is None:
                if key not in mirror:
                    continue
                outcome = mirror.delete(key)
            else:
                outcome = mirror.upsert(key, x, y)
            idx, vals = uni.apply(outcome)
            want += [{"subscription_id": subs[s][0], "op": "update", "seq": seq + i, "value": None if v != v else v}
                     for s, v in sorted(zip(idx.tolist(), np.asarray(vals, dtype=np.float64).tolist()))]
        if mode == "unicast":
            assert _strip(out, ["subscription_id", "op", "seq", "value"]) == want
        _apply_rows(rows, ups)
        seq += len(ups)


def test_explain_influence_regions_and_reach():
    """EXPLAIN's reach per message is the number of subscriptions each message's rectangle holds."""
    subs = [(f"s{i}", float(i % 5), float(i % 5 + 3), 1 + i % 2) for i in range(12)]
    rows = {f"k{i}": (float(i % 8), float(i % 3)) for i in range(8)}
    for kind, option in (("RANGE_TOPK", False), ("RANGE_DISTINCT", None), ("RANGE_AGG", "sum")):
        g = _snapshot(kind, option, subs, rows if kind != "RANGE_DISTINCT" else
                      {k: (x, "abc"[int(y)]) for k, (x, y) in rows.items()}).build()
        ups = [("k1", 2.0, 0.0, 0), ("k9", 4.0, 1.0, 0), ("k3", None, None, 1)]
        if kind == "RANGE_DISTINCT":
            ups = [(k, x, None if y is None else "abc"[int(y)], op) for k, x, y, op in ups]
        msgs = g.apply(_batch(ups, 0), "reformulated").to_pylist()
        g.apply(_batch([("k2", 7.0, 2.0 if kind != "RANGE_DISTINCT" else "c", 0)], 3), "unicast")
        ex = g.explain()
        keys = list(ex)
        assert keys[keys.index("messages per update") + 1:][-4:] == [
            "subscription index", "influence regions",
            "subscriptions reached per message (index count, last messages)",
            "expected per update (messages / deliveries)"]
        assert ex["influence regions"].startswith(f"{g.regions.messages} messages; ")
        assert g.counters["unicast_updates"] == 1
        rect = g.regions.recent[0]
        if kind == "RANGE_TOPK":
            assert "calls so far (first_k / min_y / snap)" in keys
            m = topk.TopkMessage(rect[0], *rect[1:], "k", 0.0, 0.0)
            want = sum(topk.reaches(m, s[1], s[2], s[3]) for s in subs)
        else:
            m = range_distinct.Message("ADD", "a", *rect[1:])
            want = sum(range_distinct.matches(m, s[1], s[2]) for s in subs)
        assert g._count(*rect) == want
        assert g.regions.messages == len(g.regions.recent) >= len(msgs)
