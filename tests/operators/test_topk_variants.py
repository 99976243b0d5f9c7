"""Paint-Sparse and Paint(ε) selectable for reformulated top-k (issue 19 part 3), through the family contract as
the engine drives a group: ``mode='reformulated'`` naming the Paint variant (``operators/shared/variants.py``),
the messages delivered to the family's subscriber side (002 §II-A's protocol).

Against brute force, after every batch every subscriber's list is the oracle's top k (ties in y by key, y DESC
too, NULL y, deletes, x-moves, open ends, ranges holding fewer than k objects, a key updated twice in a batch);
the per-update variants report exactly the unicast rows of every update; Paint-Sparse's messages each reach a
subscription (002 Theorem 2); Paint(ε)'s reach a subscription only with an object it ranks within (1 + ε)k
before or after the update (002 Theorem 4, as ``topk/core.py`` implements it: g = max(1, ⌊εk⌋) columns per
message, rank <= k + g - 1); neither sends more messages than Paint-Dense on the same updates.
"""
from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from family_groups import FamilyGroup

from sparksub.operators.shared.schemas import DELETE, UPSERT
from sparksub.operators.shared.variants import paint_of, with_variant
from sparksub.operators.topk.subscribers import TopkSubscribers

INF = math.inf
ONLINE = ["Paint-Dense", "Paint-Sparse", "Paint-Dense(0.5)", "Paint-Sparse(0.5)", "Paint-Sparse(1)"]
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ordered(rows: dict, a: float, b: float, desc: bool) -> list:
    items = sorted(((-r[2] if desc else r[2]), k, r[1], r[2]) for k, r in rows.items()
                   if r[2] is not None and a <= r[1] <= b)
    return [(k, x, y) for _, k, x, y in items]


def rank(rows: dict, key, a: float, b: float, desc: bool):
    return next((i + 1 for i, it in enumerate(ordered(rows, a, b, desc)) if it[0] == key), None)


class Group(FamilyGroup):
    """A RANGE_TOPK group registered, built and seeded through the family, as the engine does."""

    def __init__(self, desc: bool, subs, rows: dict):
        super().__init__(f"SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y{' DESC' if desc else ''} "
                         f"LIMIT :k", ("lo", "hi", "k"), subs, rows)


key_st = st.integers(0, 9)
x_st = st.integers(0, 8).map(float)
y_st = st.one_of(st.none(), st.integers(0, 4).map(float))
end = st.integers(-1, 9)
sub_st = st.tuples(end, end, st.integers(1, 4)).map(
    lambda t: (-INF if min(t[:2]) < 0 else float(min(t[:2])), INF if max(t[:2]) > 8 else float(max(t[:2])), t[2]))


@st.composite
def case(draw):
    rows = {k: (k, draw(x_st), draw(y_st)) for k in draw(st.lists(key_st, unique=True, max_size=10))}
    subs = [(f"s{i}", *b) for i, b in enumerate(draw(st.lists(sub_st, min_size=1, max_size=10)))]
    batches, live = [], dict(rows)
    for _ in range(draw(st.integers(1, 3))):
        ops = []
        for _ in range(draw(st.integers(1, 6))):
            k = draw(key_st)
            if k in live and draw(st.integers(0, 4)) == 0:
                ops.append((*live.pop(k), DELETE))
            else:
                x = live[k][1] if k in live and draw(st.booleans()) else draw(x_st)
                live[k] = (k, x, draw(y_st))
                ops.append((*live[k], UPSERT))
        batches.append(ops)
    return rows, subs, batches


def _rows(table: pa.Table) -> list:
    return sorted((r["seq"], r["subscription_id"], r["op"], r["item_key"], r["item_x"], r["value"])
                  for r in table.to_pylist())


@pytest.mark.parametrize("variant", ["Paint-Batch", "Paint-Batch-Sparse"] + ONLINE)
@SETTINGS
@given(c=case(), desc=st.booleans())
def test_paint_variants_through_the_family_give_the_exact_top_k(variant, c, desc):
    rows, subs, batches = c
    g = Group(desc, subs, rows)
    twin = Group(desc, subs, rows)              # the unicast rows of every update
    dense = Group(desc, subs, rows)             # Paint-Dense on the same updates, for the message counts
    mode = with_variant("reformulated", variant)
    _, epsilon, batched = paint_of(variant)
    rows, seq0, sent, sent_dense = dict(rows), 0, 0, 0
    for ops in batches:
        states = [[dict(rows)]]        # per update: the states its messages may rank their object in
        for op in ops:
            seen = [dict(rows)]
            if op[-1] == UPSERT and op[0] in rows and rows[op[0]][1] != op[1]:
                seen.append({k: r for k, r in rows.items() if k != op[0]})   # an x-move's deletion step
            if op[-1] == DELETE:
                rows.pop(op[0])
            else:
                rows[op[0]] = op[:-1]
            states.append(seen + [dict(rows)])
        out = g.publish(ops, seq0, mode)
        sent += out.num_rows
        sent_dense += dense.publish(ops, seq0, with_variant("reformulated", "Paint-Dense")).num_rows
        if not batched:
            assert set(out.column("seq").to_pylist()) <= set(range(seq0, seq0 + len(ops)))
        _check_reach(g, out, variant, epsilon, states, seq0, subs, desc)
        got = g.subscribers.deliver(out)
        want = twin.publish(ops, seq0, "unicast")
        if not batched:
            assert _rows(got) == _rows(want)
        for sid, a, b, k in subs:
            assert g.subscribers.result(sid) == ordered(rows, a, b, desc)[:k], (sid, variant)
        seq0 += len(ops)
    if variant != "Paint-Batch" and not batched:
        assert sent <= sent_dense
    assert g.operator.variants == {variant: len(batches)}


def _check_reach(g, out: pa.Table, variant: str, epsilon, states: list, seq0: int, subs, desc: bool) -> None:
    """Paint-Sparse: every message reaches a subscription; Paint(ε): a subscription hears an object only if it
    ranks within k + max(1, ⌊εk⌋) - 1 <= (1 + ε)k in it before or after the update (or between an x-move's
    two steps, 002 footnote 4).  ``states[i + 1]``: the states update i's messages may rank in."""
    if "Sparse" not in variant and epsilon is None:
        return
    for m in out.to_pylist():
        reached = [(sid, a, b, k) for sid, a, b, k in subs if m["k"] == k
                   and (m["outer_l"] < a or a == m["outer_l"] == -INF) and a <= m["inner_l"]
                   and (b < m["outer_r"] or b == m["outer_r"] == INF) and m["inner_r"] <= b]
        if "Sparse" in variant:
            assert reached, m
        if epsilon is not None:
            i = m["seq"] - seq0
            for sid, a, b, k in reached:
                ranks = [r for r in (rank(s, int(m["item_key"]), a, b, desc) for s in states[i + 1]) if r]
                bound = k + max(1, math.floor(epsilon * k)) - 1
                assert ranks and min(ranks) <= bound <= (1 + epsilon) * k, (m, sid, ranks, bound)


def test_paint_sparse_registers_the_subscriptions_once_and_unicast_stays_dense():
    g = Group(False, [("a", 0.0, 4.0, 2), ("b", 5.0, 8.0, 1), ("c", 2.0, 2.0, 3)], {1: (1, 1.0, 3.0)})
    assert len(g.operator.core.subscriptions) == 0
    g.publish([(2, 6.0, 1.0, UPSERT)], 0, with_variant("reformulated", "Paint-Sparse"))
    assert len(g.operator.core.subscriptions) == 3 and g.operator.core.mode == "dense"
    g.publish([(3, 7.0, 0.5, UPSERT)], 1, with_variant("reformulated", "Paint-Batch-Sparse"))
    assert len(g.operator.core.subscriptions) == 3
    rows = g.publish([(1, 1.0, 0.0, UPSERT)], 2, "unicast").to_pylist()
    assert [(r["subscription_id"], r["op"]) for r in rows] == [("a", "update")]
    assert g.operator.variants == {"Paint-Sparse": 1, "Paint-Batch-Sparse": 1}
    assert isinstance(g.subscribers, TopkSubscribers)
