"""The interfaces of 000 §2 beside S-UN and S-CN (issue 19 part 3): S-MN (000 §2.1.2) and CN+ (000 §2.2.2) for
range-MIN / MAX, against brute force.

* Through the family contract, as the engine drives a group (``mode='reformulated'`` naming the variant,
  ``operators/shared/variants.py``): the messages, delivered to the family's subscriber side, give every
  subscriber the oracle's value after every batch and exactly the oracle's changes per seq -- NULL Y, deletes,
  X-moves, open (±inf) ends, ranges holding nothing, ties in X and Y, one key updated several times in a batch,
  the same range subscribed twice.
* S-MN's messages are S-UN's rows grouped by (seq, new value); its byte counts.
* CN+'s network reaches exactly what a brute-force flood reaches: every subscription ``[x1, x2] ∋ x`` inside
  the cutoff, in order of ``x2 - x1``, each deciding from its own witness and cutting the flood off with it
  when unaffected (000 §2.2.2's cutoff property); its counters.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from family_groups import T, FamilyGroup

from sparksub.errors import InvalidArgument, SparksubError
from sparksub.operators.range_min.cn_plus import CnPlusNetwork, range_argmin, range_argmin_many, rank_key
from sparksub.operators.range_min.core import A2BTree
from sparksub.operators.range_min.delivery import (SubscriptionPoints, Subscribers, multicast_bytes,
                                                   multicast_tree_bytes, unicast)
from sparksub.operators.range_min.group import RangeMinGroup
from sparksub.operators.shared.schemas import DELETE, UPSERT, publish_schema
from sparksub.operators.shared.variants import Mode, parse_variant, variant_of, with_variant

INF = math.inf
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- brute force ---------------------------------------------------------------------------------------------
def oracle(rows: dict, lo: float, hi: float, maximum: bool):
    ys = [r[2] for r in rows.values() if r[1] is not None and r[2] is not None and lo <= r[1] <= hi]
    return (max(ys) if maximum else min(ys)) if ys else None


def _value(v):
    return None if v is None or v != v else v


# ---- the engine's path, through the family ---------------------------------------------------------------------
class Group(FamilyGroup):
    """A RANGE_MIN / RANGE_MAX group registered, built and seeded through the family, as the engine does."""

    def __init__(self, maximum: bool, subs, rows: dict):
        super().__init__(f"SELECT {'MAX' if maximum else 'MIN'}(y) FROM t WHERE x BETWEEN :lo AND :hi",
                         ("lo", "hi"), subs, rows)

    def publish(self, ops, seq0: int, mode):
        out = super().publish(ops, seq0, mode)
        schema = self.family.output_schema(publish_schema("reformulated"), mode, [(self.node, self.registry)], T)
        assert set(out.column_names) <= set(schema.names), (out.column_names, schema.names)
        return out


key_st = st.integers(0, 9)
x_st = st.integers(0, 8).map(float)
y_st = st.one_of(st.none(), st.integers(0, 4).map(float))        # NULL Y: the row is in no range
end = st.integers(-1, 9)
sub_st = st.tuples(end, end).map(lambda t: (-INF if min(t) < 0 else float(min(t)), INF if max(t) > 8 else float(max(t))))


@st.composite
def case(draw):
    rows = {k: (k, draw(x_st), draw(y_st)) for k in draw(st.lists(key_st, unique=True, max_size=9))}
    subs = [(f"s{i}", *b) for i, b in enumerate(draw(st.lists(sub_st, min_size=1, max_size=12)))]
    if draw(st.booleans()):                       # the same range twice
        subs.append((f"s{len(subs)}", *subs[0][1:]))
    batches, live = [], dict(rows)
    for _ in range(draw(st.integers(1, 4))):
        ops = []
        for _ in range(draw(st.integers(1, 6))):
            k = draw(key_st)                      # a key may come back in the same batch
            if k in live and draw(st.integers(0, 4)) == 0:
                ops.append((*live.pop(k), DELETE))
            else:
                x = live[k][1] if k in live and draw(st.booleans()) else draw(x_st)   # a Y update or an X-move
                live[k] = (k, x, draw(y_st))
                ops.append((*live[k], UPSERT))
        batches.append(ops)
    return rows, subs, batches


@pytest.mark.parametrize("variant", ["S-MN", "CN+", "S-CN"])
@SETTINGS
@given(c=case(), maximum=st.booleans())
def test_variants_through_the_family_equal_the_oracle(variant, c, maximum):
    rows, subs, batches = c
    g = Group(maximum, subs, rows)
    mode = with_variant("reformulated", variant)
    rows, seq0 = dict(rows), 0
    for ops in batches:
        expected = {}
        for i, op in enumerate(ops):
            before = {s: oracle(rows, a, b, maximum) for s, a, b in subs}
            if op[-1] == DELETE:
                rows.pop(op[0])
            else:
                rows[op[0]] = op[:-1]
            changed = {s: v for s, a, b in subs if (v := oracle(rows, a, b, maximum)) != before[s]}
            if changed:
                expected[seq0 + i] = changed
        out = g.publish(ops, seq0, mode)
        if variant == "S-MN":
            assert out.column("inner_l").null_count == out.num_rows and out.column("targets").null_count == 0
        if variant == "CN+":
            assert set(out.column("op").to_pylist()) <= {"CN_PLUS"}
        got = {}
        for r in g.subscribers.deliver(out).to_pylist():
            assert r["subscription_id"] not in got.get(r["seq"], {}), "notified twice for one update"
            got.setdefault(r["seq"], {})[r["subscription_id"]] = r["value"]
        assert got == expected
        values = g.subscribers.values_of([s for s, _, _ in subs])
        assert [_value(v) for v in values] == [oracle(rows, a, b, maximum) for _, a, b in subs]
        seq0 += len(ops)


# ---- S-MN ----------------------------------------------------------------------------------------------------
def _group(maximum=False):
    g = RangeMinGroup("g", "t", "x", "y", maximum)
    g.register(["a", "b", "c", "d", "e"], np.array([0.0, 0.0, 3.0, -INF, 6.0]), np.array([10.0, 5.0, 6.0, 2.0, INF]))
    g.load(["k1", "k2", "k3"], [1.0, 4.0, 7.0], [5.0, 3.0, 6.0])
    return g


def _batch(rows, seq0=0):
    return {"key": [r[0] for r in rows], "x": np.array([r[1] for r in rows], dtype=float),
            "y": np.array([r[2] for r in rows], dtype=float), "op": np.array([r[3] for r in rows]),
            "seq": np.arange(seq0, seq0 + len(rows))}


def test_multicast_groups_unicast_rows_by_new_value():
    rows = [("k4", 4.5, 1.0, 0), ("k2", 4.0, 9.0, 0), ("k1", 1.0, 1.0, 0)]
    uni = _group().apply(_batch(rows), "unicast").to_pylist()
    g = _group()
    out = g.apply(_batch(rows), "multicast").to_pylist()
    # one message per (seq, value), listing exactly the subscriptions unicast sends that value to
    want = {}
    for r in uni:
        want.setdefault((r["seq"], r["value"]), []).append(r["subscription_id"])
    assert {(m["seq"], m["new_value"]): json.loads(m["targets"]) for m in out} == want
    assert len(out) < len(uni) and all(m["op"] == "NEW_MIN" for m in out)
    assert g.counters["multicast_messages"] == len(out) and g.counters["multicast_targets"] == len(uni)
    assert g.apply(_batch([("k3", 7.0, 6.0, 0)], 9), "multicast").num_rows == 0   # unchanged row: nothing


def test_multicast_byte_counts():
    assert multicast_bytes(2, 5) == 2 * 16 + 5 * 8
    # fan-out 10 over 1,000 slots: three levels; targets 0, 1 (one leaf group at level 1 and 2) and 999
    t = multicast_tree_bytes(np.array([0, 1, 999]), 1000)
    assert t == (3 * 16 + 3 * 8) + (2 * 16 + 3 * 8) + (2 * 16 + 3 * 8)
    assert multicast_tree_bytes(np.array([], dtype=np.int64), 1000) == 0
    # on 10 gateways (slot mod 10): slots 0 and 10 share gateway 0; one level below the root
    assert multicast_tree_bytes(np.array([0, 10, 3]), 10 ** 6, gateways=10) == 2 * 16 + 3 * 8


# ---- CN+ -----------------------------------------------------------------------------------------------------
def _rank_rows(rows: dict, maximum: bool) -> dict:
    """key text -> (x, MIN-order y) of the rows in some range."""
    return {rank_key(k): (r[1], -r[2] if maximum else r[2]) for k, r in rows.items()
            if r[1] is not None and r[2] is not None}


def _witness(rr: dict, a: float, b: float):
    items = [(y, x, k) for k, (x, y) in rr.items() if a <= x <= b]
    return min(items) if items else None


def flood(subs, before: dict, key: str, x: float, yo, yn) -> tuple[list, set]:
    """The brute-force CN+ flood of one step (MIN order): every subscription holding x inside the cutoff, by
    (x2 - x1, slot); an unaffected one refines the cutoff with its witness.  Returns (visited, affected)."""
    r_o = None if yo is None else (yo, x, key)
    r_n = None if yn is None else (yn, x, key)
    c1, c2, visited, affected = -INF, INF, [], set()
    order = sorted((b - a, s) for s, (a, b) in enumerate(subs) if a <= x <= b)
    for _, s in order:
        a, b = subs[s]
        if not ((c1 < a or a == c1 == -INF) and (b < c2 or b == c2 == INF)):
            continue
        visited.append(s)
        w = _witness(before, a, b)
        if w is None or w[2] == key or (r_n is not None and r_n < w):
            affected.add(s)
            continue
        assert w < min(r for r in (r_o, r_n) if r is not None)        # the cutoff property's premise
        if w[1] < x:
            c1 = w[1]
        elif w[1] > x:
            c2 = w[1]
        else:
            break
    return visited, affected


@SETTINGS
@given(c=case(), maximum=st.booleans(), int_keys=st.booleans())
def test_cn_plus_network_reaches_what_the_flood_reaches(c, maximum, int_keys):
    rows, subs, batches = c
    pts = SubscriptionPoints()
    pts.add([s for s, _, _ in subs], [a for _, a, _ in subs], [b for _, _, b in subs])
    bounds = [(a, b) for _, a, b in subs]
    net = CnPlusNetwork(pts, maximum)
    keyf = (lambda k: k) if int_keys else (lambda k: f"k{k}")
    live = {keyf(k): r for k, r in rows.items()}
    net.load(list(live), [np.nan if r[1] is None else r[1] for r in live.values()],
             [np.nan if r[2] is None else r[2] for r in live.values()])
    steps = deliveries = queries = 0
    for ops in batches:
        for op in ops:
            k = keyf(op[0])
            before = _rank_rows(live, maximum)
            old = before.get(rank_key(k))
            new = None if op[-1] == DELETE or op[2] is None else (op[1], -op[2] if maximum else op[2])
            # the steps: an X-move is a deletion, then an insertion
            want_steps = []
            if old is not None and (new is None or new[0] != old[0]):
                want_steps.append((old[0], old[1], None))
            if new is not None and new != old:
                want_steps.append((new[0], old[1] if old is not None and old[0] == new[0] else None, new[1]))
            got = net.route(k, op[1] if new is not None else (old[0] if old else op[1]),
                            None if new is None else op[2])
            assert len(got) == len(want_steps)
            state = dict(before)
            for (route, _), (sx, yo, yn) in zip(got, want_steps):
                visited, affected = flood(bounds, state, rank_key(k), sx, yo, yn)
                assert set(route.affected.tolist()) == affected
                reached = sorted(route.affected.tolist()) + [s for s, _ in route.cutoffs]
                assert sorted(reached) == sorted(visited)
                assert [s for s, _ in route.cutoffs] == [s for s in visited if s not in affected]
                steps += 1
                deliveries += len(visited)
                queries += len(affected) if (yn is None or (yo is not None and yn > yo)) else 0
                if yn is None:
                    state.pop(rank_key(k))
                else:
                    state[rank_key(k)] = (sx, yn)
            if op[-1] == DELETE:
                live.pop(k)
            else:
                live[k] = op[:-1]
            for s, (a, b) in enumerate(bounds):     # every subscriber's witness is its range's lowest tuple
                w = _witness(_rank_rows(live, maximum), a, b)
                assert (net.wy[s], net.wkey[s]) == ((INF, None) if w is None else (w[0], w[2]))
    cnt = net.counters
    assert (cnt["messages"], cnt["deliveries"], cnt["queries"]) == (steps, deliveries, queries)
    assert cnt["deliveries"] <= cnt["stabbed"]


def test_cn_plus_cuts_off_a_decreasing_update_early():
    """000 Figure 1's situation: t4 lowered below t5; s1 and s2 hold t2 (lower) and protect the wider ranges."""
    pts = SubscriptionPoints()
    # slots: s1 [0, 10], s2 [15, 60], s3 [35, 60], s4 [35, 75], s5 [80, 95], s6 [0, 100]
    pts.add(["s1", "s2", "s3", "s4", "s5", "s6"], [0, 15, 35, 35, 80, 0], [10, 60, 60, 75, 95, 100])
    net = CnPlusNetwork(pts)
    net.load(["t1", "t2", "t3", "t4", "t5", "t6"], [5, 20, 30, 40, 50, 70], [9, 3, 8, 12, 5, 6])
    (route, wy), = net.route("t4", 40.0, 4.0)
    assert sorted(route.affected.tolist()) == [2, 3] and wy.tolist() == [4.0, 4.0]   # s3, s4 take 4
    assert route.cutoffs == [(1, 20.0)] and not route.increase   # s2 (witness t2 at 20) cuts s6 off
    assert net.counters["deliveries"] == 3 and net.counters["stabbed"] == 4
    # raising t5 (the bad update of 000 Figure 1): s3 and s4's witness was t4 now, t5 is below nobody
    (route, _), = net.route("t5", 50.0, 9.0)
    assert route.affected.size == 0 and route.increase
    (route, wy), = net.route("t4", 40.0, 13.0)       # t4 rises: s3, s4 ask the diagonal
    assert sorted(route.affected.tolist()) == [2, 3] and wy.tolist() == [9.0, 6.0]
    assert net.counters["queries"] == 2
    assert net.values([2, 3]).tolist() == [9.0, 6.0]


def test_range_argmin_ranks_ties_by_x_then_key():
    t = A2BTree(leaf_capacity=4)
    for k, x, y in [("b", 1.0, 2.0), ("a", 1.0, 2.0), ("c", 0.5, 3.0), ("d", 3.0, 2.0), ("e", 4.0, 1.0)]:
        t.insert(k, x, y)
    assert range_argmin(t, 0.0, 3.5) == (2.0, 1.0, "a")
    assert range_argmin(t, -INF, INF) == (1.0, 4.0, "e")
    assert range_argmin(t, 5.0, 6.0) is None
    wy, wx, wk = range_argmin_many(t, [0.0, -INF, 5.0, 2.0], [3.5, INF, 6.0, 3.0])
    assert wy.tolist()[:2] == [2.0, 1.0] and wk.tolist() == ["a", "e", None, "d"] and np.isnan(wx[2])


# ---- the variant in the mode, the family's side ---------------------------------------------------------------
def test_variant_names_and_errors():
    m = with_variant("reformulated", ["s_mn", "Paint-Sparse(0.5)"])
    assert m == "reformulated" and isinstance(m, Mode)
    assert variant_of(m, "range_min") == "S-MN" and variant_of(m, "topk") == "Paint-Sparse(0.5)"
    assert variant_of("reformulated", "range_min") is None and with_variant("unicast", None) == "unicast"
    import pickle
    assert variant_of(pickle.loads(pickle.dumps(m)), "topk") == "Paint-Sparse(0.5)"
    with pytest.raises(ValueError, match="needs mode='reformulated'"):
        with_variant("unicast", "S-MN")
    with pytest.raises(ValueError, match="unknown variant 'S-XX'"):
        with_variant("reformulated", "S-XX")
    with pytest.raises(ValueError, match="both choose"):
        with_variant("reformulated", ["S-MN", "CN+"])
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        parse_variant("Paint-Dense(2)")
    with pytest.raises(InvalidArgument):
        with_variant("reformulated", 3)


def test_output_schema_and_group_mode_follow_the_variant():
    g = Group(False, [("a", 0.0, 5.0)], {1: (1, 1.0, 2.0)})
    base = publish_schema("reformulated")
    for v, col in (("S-MN", "targets"), ("CN+", "item_key")):
        s = g.family.output_schema(base, with_variant("reformulated", v), [(g.node, g.registry)], T)
        assert s.names[-2:] == [col, "reason"]
    assert g.family.output_schema(base, "reformulated", [], T) == base
    assert g.family.output_schema(publish_schema("unicast"), "unicast", [], T) == publish_schema("unicast")


def test_cn_plus_after_another_variant_needs_a_new_seed():
    g = Group(False, [("a", 0.0, 5.0), ("b", -INF, INF)], {1: (1, 1.0, 2.0), 2: (2, 3.0, 4.0)})
    g.subscribers.deliver(g.publish([(1, 1.0, 5.0, UPSERT)], 0, with_variant("reformulated", "S-MN")))
    with pytest.raises(SparksubError, match="another variant"):
        g.subscribers.deliver(g.publish([(2, 3.0, 1.0, UPSERT)], 1, with_variant("reformulated", "CN+")))
    # seeded again (what the engine does when the variant changes), CN+ goes on
    g.subscribers = g.reseed()
    out = g.subscribers.deliver(g.publish([(2, 3.0, 0.5, UPSERT)], 2, with_variant("reformulated", "CN+")))
    assert out.to_pylist() == [{"subscription_id": "a", "op": "update", "value": 0.5, "seq": 2, "group_id":
                                g.family.group_id(g.node)},
                               {"subscription_id": "b", "op": "update", "value": 0.5, "seq": 2, "group_id":
                                g.family.group_id(g.node)}]


def test_deliver_takes_mixed_variants_in_seq_order():
    g = _group()
    subs = Subscribers()
    subs.add(*[["a", "b", "c", "d", "e"], [0.0, 0.0, 3.0, -INF, 6.0], [10.0, 5.0, 6.0, 2.0, INF]],
             values=g.core.range_values(g.points.x1[:5], g.points.x2[:5]))
    m1 = g.apply(_batch([("k1", 1.0, 0.5, 0)], 0), "multicast")
    m2 = g.apply(_batch([("k2", 4.0, 0.1, 0)], 1), "reformulated")
    twin = _group()
    want = unicast(twin.points, twin.apply(_batch([("k1", 1.0, 0.5, 0)], 0), "reformulated")).to_pylist() + \
        unicast(twin.points, twin.apply(_batch([("k2", 4.0, 0.1, 0)], 1), "reformulated")).to_pylist()
    both = pa.concat_tables([m2.append_column("targets", pa.nulls(m2.num_rows, pa.string())), m1],
                            promote_options="default")
    got = subs.deliver(both).to_pylist()
    assert [(r["seq"], r["subscription_id"], r["value"]) for r in got] == \
        [(r["seq"], r["subscription_id"], r["value"]) for r in want]
