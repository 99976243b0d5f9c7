"""Join group operators (operators/joins/group.py) against brute-force oracles: every batch's notifications
are exactly the net change of every subscription's result (recomputed from the rows), for SELECT_JOIN and
BAND_JOIN, with NULLs, upserts (delete + insert of one seq), deletes, duplicates in values, query changes
from the log, partitions, and the reformulated form through JoinSubscribers."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import example, given, settings, strategies as st

from sparksub.operators.shared.schemas import EVENT_PREFIX
from sparksub.operators.joins.group import (BAND_JOIN, SELECT_JOIN, JoinGroupSnapshot, JoinSubscribers,
                                            JoinSubscriptions, QueryChange, band_cuts, band_partitions,
                                            join_value_partition, key_text, output_types, payload_columns,
                                            side_columns)
from sparksub.operators.shared.schemas import DELETE, UPSERT

SJ_SIDES = (("r", "rk", "b", ("a",)), ("s", "sk", "b", ("c",)))
BJ_SIDES = (("r", "rk", "b", ("a",)), ("s", "sk", "b", ()))


def sj_oracle(rows, q):
    a_lo, a_hi, c_lo, c_hi = q
    out = set()
    for rk, r in rows[0].items():
        if r["b"] is None or r["a"] is None or not a_lo <= r["a"] <= a_hi:
            continue
        for sk, s in rows[1].items():
            if s["b"] is not None and s["c"] is not None and float(s["b"]) == float(r["b"]) and c_lo <= s["c"] <= c_hi:
                out.add((key_text(rk), key_text(sk)))
    return out


def bj_oracle(rows, q):
    lo, hi, a_lo, a_hi = q
    out = set()
    for rk, r in rows[0].items():
        if r["b"] is None or r["a"] is None or not a_lo <= r["a"] <= a_hi:
            continue
        for sk, s in rows[1].items():
            if s["b"] is not None and lo <= s["b"] - r["b"] <= hi:
                out.add((key_text(rk), key_text(sk)))
    return out


def columns_of(kind, qs):
    if kind == SELECT_JOIN:
        return {k: np.array([q[i] for q in qs], dtype=float) for i, k in enumerate(("a_lo", "a_hi", "c_lo", "c_hi"))}
    return {k: np.array([q[i] for q in qs], dtype=float) for i, k in enumerate(("lo", "hi", "L:a:lo", "L:a:hi"))}


def snapshot(kind, queries, rows):
    sides = SJ_SIDES if kind == SELECT_JOIN else BJ_SIDES
    tables = []
    for d in (0, 1):
        names = (sides[d][1], sides[d][2], *sides[d][3])
        tables.append({c: [k if c == sides[d][1] else r[c] for k, r in rows[d].items()] for c in names})
    ids = np.array(list(queries), dtype=object)
    return JoinGroupSnapshot(kind, "g", "g#0", sides, True, ids, columns_of(kind, list(queries.values())),
                             tuple(tables), domains={"A": (0.0, 10.0), "B": (0.0, 10.0), "C": (0.0, 10.0)})


def batch(kind, d, ops):
    """ops: [(op, key, row dict or None, seq)] for one side."""
    sides = SJ_SIDES if kind == SELECT_JOIN else BJ_SIDES
    names = (sides[d][1], sides[d][2], *sides[d][3])
    cols = {EVENT_PREFIX + c: [] for c in names}
    for op, key, row, seq in ops:
        for c in names:
            cols[EVENT_PREFIX + c].append(key if c == sides[d][1] else (row or {}).get(c))
    types = {EVENT_PREFIX + c: (pa.int64() if c.endswith("k") else pa.float64()) for c in names}
    t = pa.table({c: pa.array(v, types[c]) for c, v in cols.items()})
    return (t.append_column("op", pa.array([o for o, *_ in ops], pa.int8()))
             .append_column("seq", pa.array([s for *_, s in ops], pa.int64()))
             .append_column("j_side", pa.array([d] * len(ops), pa.int8())))


val = st.one_of(st.none(), st.integers(0, 6).map(float))
row_st = st.fixed_dictionaries({"b": st.one_of(st.none(), st.integers(0, 3).map(float)), "a": val, "c": val})
rng_st = st.tuples(st.integers(-1, 7), st.integers(0, 4)).map(lambda t: (float(t[0]), float(t[0] + t[1])))
band_st = st.tuples(st.integers(-3, 3), st.integers(0, 3)).map(lambda t: (float(t[0]), float(t[0] + t[1])))


@st.composite
def workload(draw, kind):
    nq = draw(st.integers(0, 6))
    queries = {}
    for i in range(nq):
        if kind == SELECT_JOIN:
            a = draw(st.one_of(st.just((-math.inf, math.inf)), rng_st))
            c = draw(st.one_of(st.just((-math.inf, math.inf)), rng_st))
            queries[f"q{i}"] = (*a, *c)
        else:
            queries[f"q{i}"] = (*draw(band_st), *draw(st.one_of(st.just((-math.inf, math.inf)), rng_st)))
    rows = ({k: draw(row_st) for k in range(draw(st.integers(0, 5)))},
            {k: draw(row_st) for k in range(draw(st.integers(0, 5)))})
    steps = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 6), row_st,
                                    st.booleans()), max_size=14))
    return queries, rows, steps


def run_workload(kind, data):
    oracle = sj_oracle if kind == SELECT_JOIN else bj_oracle
    queries, rows, steps = data
    rows = (dict(rows[0]), dict(rows[1]))
    group = snapshot(kind, queries, rows).build()
    live = dict(queries)
    seq = 0
    next_q = 100
    for what, d, key, row, flag in steps:
        if what == 2:  # a query change through the log
            if flag and live:
                gone = sorted(live)[key % len(live)]
                del live[gone]
                group.apply(QueryChange(np.array([], dtype=object), {}, (gone,)), "none")
            else:
                qid = f"n{next_q}"
                next_q += 1
                q = ((-1.0, 3.0, 0.0, 5.0) if kind == SELECT_JOIN else (-1.0, 1.0, -math.inf, math.inf))
                live[qid] = q
                group.apply(QueryChange(np.array([qid], dtype=object), columns_of(kind, [q])), "none")
            continue
        before = {q: oracle(rows, b) for q, b in live.items()}
        if flag and key in rows[d]:
            ops = [(DELETE, key, rows[d][key], seq)]
            del rows[d][key]
        else:
            ops = []
            if key in rows[d]:  # an upsert of a known key: delete + insert, one seq (the engine's form)
                ops.append((DELETE, key, rows[d][key], seq))
            ops.append((UPSERT, key, row, seq))
            rows[d][key] = row
        out = group.apply(batch(kind, d, ops), "unicast").to_pylist()
        seq += 1
        after = {q: oracle(rows, b) for q, b in live.items()}
        got_ins = {(r["subscription_id"], r["left_key"], r["right_key"]) for r in out if r["op"] == "insert"}
        got_del = {(r["subscription_id"], r["left_key"], r["right_key"]) for r in out if r["op"] == "delete"}
        want_ins = {(q, *p) for q in live for p in after[q] - before[q]}
        want_del = {(q, *p) for q in live for p in before[q] - after[q]}
        assert len(out) == len(got_ins) + len(got_del)
        assert got_ins == want_ins and got_del == want_del
    for q, b in live.items():
        assert {(key_text(x), key_text(y)) for x, y in group.result(q)} == oracle(rows, b)


@settings(max_examples=150, deadline=None)
@given(workload(SELECT_JOIN))
def test_select_join_group_notifications_are_net_changes(data):
    run_workload(SELECT_JOIN, data)


@settings(max_examples=150, deadline=None)
@given(workload(BAND_JOIN))
def test_band_join_group_notifications_are_net_changes(data):
    run_workload(BAND_JOIN, data)


@settings(max_examples=100, deadline=None)
@given(workload(SELECT_JOIN))
def test_reformulated_messages_deliver_the_unicast_rows(data):
    """000 §4: the messages of a batch, matched by the stateless subscriptions, give the unicast rows; their
    number does not depend on the subscriptions (one per result tuple of δ ⋈ partner)."""
    queries, rows, steps = data
    uni = snapshot(SELECT_JOIN, queries, rows).build()
    ref = snapshot(SELECT_JOIN, queries, rows).build()
    none = snapshot(SELECT_JOIN, {}, rows).build()
    ids = np.array(list(queries), dtype=object)
    subs = JoinSubscribers("g", ids, columns_of(SELECT_JOIN, list(queries.values())))
    state = (dict(rows[0]), dict(rows[1]))
    for seq, (what, d, key, row, flag) in enumerate(steps):
        if what == 2:
            continue
        ops = []
        if key in state[d]:
            ops.append((DELETE, key, state[d][key], seq))
        if flag and key in state[d]:
            del state[d][key]
        else:
            ops.append((UPSERT, key, row, seq))
            state[d][key] = row
        b = batch(SELECT_JOIN, d, ops)
        want = sorted((r["subscription_id"], r["op"], r["left_key"], r["right_key"])
                      for r in uni.apply(b, "unicast").to_pylist())
        msgs = ref.apply(b, "reformulated")
        got = sorted((r["subscription_id"], r["op"], r["left_key"], r["right_key"])
                     for r in subs.deliver(msgs).to_pylist())
        assert got == want
        assert none.apply(b, "reformulated").num_rows == msgs.num_rows


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=1, max_size=30), st.lists(st.floats(-50, 50), max_size=30),
       st.integers(1, 4), band_st)
@example(s_values=[8.712050654529108e-57], r_values=[1.0], parts=2, band=(-1.0, -1.0))  # s - r rounds into the band
def test_band_partitions_find_every_pair_once(s_values, r_values, parts, band):
    """BAND_JOIN partitioning: every pair (r, s) in the band meets in exactly one partition (s's)."""
    cuts = band_cuts(np.array(s_values), parts)
    for rb in r_values:
        for sb in s_values:
            if band[0] <= sb - rb <= band[1]:
                together = set(band_partitions(0, rb, cuts, band)) & set(band_partitions(1, sb, cuts, band))
                assert len(together) == 1


def test_join_value_partition_is_stable_and_numeric_values_agree():
    assert join_value_partition(3.0, True, 4) == join_value_partition(float(3), True, 4)
    assert join_value_partition("x", False, 7) == join_value_partition("x", False, 7)
    assert join_value_partition(-0.0, True, 5) == join_value_partition(0.0, True, 5)


# ---- issue 15 item 1 (a NULL fails only the selections that read it) and item 8 (projections) ---------------
PROJECTIONS = ((("rk", 0, "rk"), ("sk", 1, "sk")),                      # SELECT r.rk, s.sk
               (("x", 0, "a"), ("y", 1, "c")),                          # SELECT r.a AS x, s.c AS y
               (("rk", 0, "rk"), ("a", 0, "a"), ("r.b", 0, "b"), ("sk", 1, "sk"), ("s.b", 1, "b"), ("c", 1, "c")))


def projected_row(proj, rows, rk, sk):
    src = ({"rk": rk, **rows[0][rk]}, {"sk": sk, **rows[1][sk]})
    return tuple((name, src[d][col]) for name, d, col in proj)


@st.composite
def mixed_band_workload(draw):
    """Band-join subscriptions of templates with different local selections (none, on r.a, on s.c, both) and
    projections, registered through the group's registry (``JoinSubscriptions``: what the engine holds)."""
    queries = {}
    for i in range(draw(st.integers(1, 6))):
        a = draw(st.one_of(st.none(), rng_st))
        c = draw(st.one_of(st.none(), rng_st))
        queries[f"q{i}"] = (draw(band_st), a, c, draw(st.sampled_from(PROJECTIONS)))
    rows = ({k: draw(row_st) for k in range(draw(st.integers(0, 5)))},
            {k: draw(row_st) for k in range(draw(st.integers(0, 5)))})
    steps = draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 6), row_st, st.booleans()), max_size=12))
    return queries, rows, steps


def mixed_oracle(rows, q):
    """SQL: the band on S.b - R.b, and only the selections the subscription has (``None``: no selection, so a
    NULL there does not matter; a selection is false on NULL)."""
    (lo, hi), a, c, proj = q
    out = set()
    for rk, r in rows[0].items():
        for sk, s in rows[1].items():
            if r["b"] is None or s["b"] is None or not lo <= s["b"] - r["b"] <= hi:
                continue
            if a is not None and (r["a"] is None or not a[0] <= r["a"] <= a[1]):
                continue
            if c is not None and (s["c"] is None or not c[0] <= s["c"] <= c[1]):
                continue
            out.add((key_text(rk), key_text(sk), projected_row(proj, rows, rk, sk)))
    return out


@settings(max_examples=150, deadline=None)
@given(mixed_band_workload())
@example(data=({"b1": ((0.0, 0.0), None, None, PROJECTIONS[0]), "b2": ((0.0, 0.0), (0.0, math.inf), None, PROJECTIONS[0])},
               ({1: {"a": 1.0, "b": 5.0, "c": None}}, {1: {"a": None, "b": 5.0, "c": 1.0}}),
               [(0, 1, {"a": None, "b": 5.0, "c": None}, False)]))  # issue 15 item 1's reproduction
def test_band_join_null_fails_only_the_selections_that_read_it(data):
    queries, rows, steps = data
    reg = JoinSubscriptions()
    for qid, ((lo, hi), a, c, _) in queries.items():
        cols = {"lo": [lo], "hi": [hi]}
        if a is not None:
            cols.update({"L:a:lo": [a[0]], "L:a:hi": [a[1]]})
        if c is not None:
            cols.update({"R:c:lo": [c[0]], "R:c:hi": [c[1]]})
        reg.add(np.array([qid], dtype=object), cols)
    ids, cols = reg.rows()
    outputs = [queries[i][3] for i in ids.tolist()]
    pay = payload_columns(outputs)
    sel = ({"a"} if any(q[1] for q in queries.values()) else set(), {"c"} if any(q[2] for q in queries.values()) else set())
    sides = (("r", "rk", "b", tuple(sel[0]), pay[0]), ("s", "sk", "b", tuple(sel[1]), pay[1]))
    rows = (dict(rows[0]), dict(rows[1]))
    tables = tuple({c: [k if c == sides[d][1] else r.get(c) for k, r in rows[d].items()] for c in side_columns(sides[d])}
                   for d in (0, 1))
    types = {(d, c): pa.int64() if c.endswith("k") else pa.float64() for d in (0, 1) for c in ("rk", "sk", "a", "b", "c")}
    group = JoinGroupSnapshot(BAND_JOIN, "g", "g#0", sides, True, ids, cols, tables, sub_outputs=outputs,
                              output_types=output_types(outputs, types)).build()
    for seq, (d, key, row, delete) in enumerate(steps):
        before = {q: mixed_oracle(rows, b) for q, b in queries.items()}
        ops = [(DELETE, key, rows[d][key], seq)] if key in rows[d] else []
        if delete and key in rows[d]:
            del rows[d][key]
        else:
            ops.append((UPSERT, key, row, seq))
            rows[d][key] = row
        names = side_columns(sides[d])
        b = pa.table({EVENT_PREFIX + c: pa.array([k if c == sides[d][1] else (r or {}).get(c) for _, k, r, _ in ops],
                                                 pa.int64() if c.endswith("k") else pa.float64()) for c in names})
        b = (b.append_column("op", pa.array([o for o, *_ in ops], pa.int8()))
             .append_column("seq", pa.array([s for *_, s in ops], pa.int64()))
             .append_column("j_side", pa.array([d] * len(ops), pa.int8())))
        out = group.apply(b, "unicast").to_pylist()
        after = {q: mixed_oracle(rows, b) for q, b in queries.items()}
        # each notification carries its subscription's selected columns (DESIGN §1)
        got = {(r["subscription_id"], r["op"], r["left_key"], r["right_key"],
                tuple((name, r[EVENT_PREFIX + name]) for name, _, _ in queries[r["subscription_id"]][3])) for r in out}
        want = ({(q, "insert", *p) for q in queries for p in after[q] - before[q]}
                | {(q, "delete", *p) for q in queries for p in before[q] - after[q]})
        assert len(out) == len(got) and got == want
    for q, b in queries.items():
        res = group.result_rows(q)
        assert {(key_text(lk), key_text(rk), tuple(row.items())) for (lk, rk), row in res} == mixed_oracle(rows, b)


@settings(max_examples=60, deadline=None)
@given(workload(SELECT_JOIN), st.lists(st.sampled_from(PROJECTIONS), min_size=6, max_size=6))
def test_select_join_messages_carry_the_selected_columns_deliver_equals_unicast(data, projections):
    """The reformulated messages carry the result tuple's selected columns (``table.column``); deliver
    projects them per subscription: the same rows, with the same columns, as unicast (DESIGN §1)."""
    queries, rows, steps = data
    outputs = [projections[i] for i in range(len(queries))]
    pay = payload_columns(outputs)
    sides = tuple((*SJ_SIDES[d], pay[d]) for d in (0, 1))
    types = {(d, c): pa.int64() if c.endswith("k") else pa.float64() for d in (0, 1) for c in ("rk", "sk", "a", "b", "c")}

    def build():
        tables = tuple({c: [k if c == sides[d][1] else r[c] for k, r in rows[d].items()] for c in side_columns(sides[d])}
                       for d in (0, 1))
        return JoinGroupSnapshot(SELECT_JOIN, "g", "g#0", sides, True, np.array(list(queries), dtype=object),
                                 columns_of(SELECT_JOIN, list(queries.values())), tables,
                                 domains={"A": (0.0, 10.0), "B": (0.0, 10.0), "C": (0.0, 10.0)},
                                 sub_outputs=outputs, output_types=output_types(outputs, types),
                                 payload_types=types).build()
    uni, ref = build(), build()
    subs = JoinSubscribers("g", np.array(list(queries), dtype=object), columns_of(SELECT_JOIN, list(queries.values())),
                           outputs, ("r", "s"), output_types(outputs, types))
    state = (dict(rows[0]), dict(rows[1]))
    names = {name for proj in outputs for name, _, _ in proj}
    for seq, (what, d, key, row, flag) in enumerate(steps):
        if what == 2:
            continue
        ops = [(DELETE, key, state[d][key], seq)] if key in state[d] else []
        if flag and key in state[d]:
            del state[d][key]
        else:
            ops.append((UPSERT, key, row, seq))
            state[d][key] = row
        b = batch(SELECT_JOIN, d, ops)
        for c in pay[d]:  # the selected columns the batch must carry beside the group's own
            if EVENT_PREFIX + c not in b.column_names:
                b = b.append_column(EVENT_PREFIX + c, pa.array([(r or {}).get(c) for _, _, r, _ in ops], pa.float64()))
        u = uni.apply(b, "unicast")
        want = sorted((r["subscription_id"], r["op"], r["left_key"], r["right_key"],
                       tuple(sorted((n, r.get(EVENT_PREFIX + n)) for n in names if EVENT_PREFIX + n in r)))
                      for r in u.to_pylist())
        msgs = ref.apply(b, "reformulated")
        msgs = msgs.rename_columns([c[len(EVENT_PREFIX):] if c.startswith(EVENT_PREFIX) else c for c in msgs.column_names])
        got = sorted((r["subscription_id"], r["op"], r["left_key"], r["right_key"],
                      tuple(sorted((n, r.get(n)) for n in names if n in r)))
                     for r in subs.deliver(msgs).to_pylist())
        assert got == want
