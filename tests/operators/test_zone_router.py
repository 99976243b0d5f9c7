"""The zone-side router (each zone builds its own steps from the whole batch: ``route_zone``) against the
driver-side router ``ZonedRangeMin.route``, and the whole pipeline the Spark runtime runs -- one zone
replica each rebuilt from its base and log, round 1 per zone, round 2 over the Round1 records, the merged and
step-corrected messages, unicast per subscription shard -- against the single S-CN group (``RangeMinGroup``)
and a brute-force MIN / MAX recomputed from the rows."""
from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.range_min.delivery import Subscribers, unicast
from sparksub.operators.range_min.group import CN_PLUS_SCHEMA, RangeMinGroup
from sparksub.operators.range_min.subscription_shards import merge_multicast, shard_bases
from sparksub.operators.range_min.zones import (ZonedRangeMin, ZoneBase, apply_round2, fix_steps, merge_messages,
                                                steps_table, versioned_messages, zone_bases)
from sparksub.operators.shared.schemas import UNICAST_SCHEMA

from test_range_min_zones import as_table, brute_value, concrete_updates, subscription, update

INF = math.inf
coord = st.integers(0, 12).map(float)


def normalised(steps, moved):
    """``route_zone``'s steps with the tentative inserts corrected (what ``route`` gives)."""
    out = []
    for s in steps:
        s = list(s)
        if s[2] == 1 and s[1] not in moved:
            s[0], s[2] = s[0] - 1, 0
        out.append(tuple(s))
    return out


def same(a, b):
    """Step tuples equal, NaN equal to NaN."""
    return len(a) == len(b) and all(
        all((u == v) or (isinstance(u, float) and isinstance(v, float) and u != u and v != v) for u, v in zip(s, t))
        for s, t in zip(a, b))


def run_zoned(ops, batch: pa.Table, group_id="g", maximum=False):
    """What runtime/zones.py does for one batch: each zone routes the whole batch, logs its steps, runs round
    1; round 2 over every Round1; the messages merged; returns (messages, old_values, logs)."""
    tables, rounds, logs, old = [], [], [], {}
    for op in ops:
        steps = op.route(batch)
        logs.append(steps_table(batch, steps))
        msgs, r1 = op.round1(steps)
        tables.append(versioned_messages(group_id, maximum, msgs))
        rounds.append(pickle.loads(pickle.dumps(r1)))       # a Round1 travels pickled
        old.update(r1.old_values)
    second = apply_round2(rounds)
    tables.append(versioned_messages(group_id, maximum, second))
    return merge_messages(tables, set(old)), old, logs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points=st.lists(st.tuples(coord, coord), min_size=0, max_size=16),
       subs=st.lists(subscription, min_size=1, max_size=20),
       updates=st.lists(update, min_size=1, max_size=80),
       n_zones=st.integers(1, 5), n_shards=st.integers(1, 4), maximum=st.booleans(), batch_size=st.integers(1, 40),
       dup=st.booleans())
def test_zone_router_and_pipeline_equal_the_single_core(points, subs, updates, n_zones, n_shards, maximum,
                                                        batch_size, dup):
    rows = {f"k{i}": p for i, p in enumerate(points)}
    keys, xs, ys = list(rows), [p[0] for p in rows.values()], [p[1] for p in rows.values()]
    ids = [f"s{i}" for i in range(len(subs))]
    x1 = np.array([a for a, _ in subs])
    x2 = np.array([b for _, b in subs])
    cuts, bases = zone_bases("g", keys, xs, ys, n_zones, maximum)
    ops = [pickle.loads(pickle.dumps(b)).build() for b in bases]
    reference = ZonedRangeMin(cuts, maximum)
    reference.load(keys, xs, ys)
    single = RangeMinGroup("g", "t", "x", "y", maximum)
    single.register(ids, x1, x2)
    single.load(keys, xs, ys)
    _, shards = shard_bases(np.array(ids, dtype=object), x1, x2, n_shards)
    shard_ops = [b.build() for b in shards]
    final = dict(rows)
    batch = concrete_updates(final, updates, len(points))
    if dup:     # the same key updated twice in a row: duplicates within a batch
        batch = [r for row in batch for r in (row, row)]
        batch = [(*r[:4], i) for i, r in enumerate(batch)]
    for start in range(0, len(batch), batch_size):
        chunk = as_table(batch[start:start + batch_size])
        want_steps = reference.route(chunk).steps
        got_steps = [op.route(chunk) for op in ops]
        moved = {s[1] for z in got_steps for s in z if s[3] and s[7]}
        for w, g in zip(want_steps, got_steps):
            assert same(normalised(g, moved), [tuple(s) for s in w])
        messages, old, logs = run_zoned(ops, chunk, maximum=maximum)
        expected = single.apply(chunk, "reformulated")
        assert messages.to_pylist() == expected.to_pylist()
        # unicast over the shards: their union is the group's rows (each shard gets the messages visiting it)
        got = [r for op in shard_ops for r in op.unicast(messages, old).to_pylist()]
        key = lambda r: (r["seq"], r["subscription_id"])      # noqa: E731
        want = unicast(single.points, expected, old).select(UNICAST_SCHEMA.names).cast(UNICAST_SCHEMA).to_pylist()
        assert sorted(got, key=key) == sorted(want, key=key)
        # the log replays: a zone rebuilt from its base and its logged steps holds the same rows
        rebuilt = [b.build() for b in bases]
        for op, log in zip(rebuilt, logs):
            op.apply(log)
        bases = [ZoneBase("g", op.zone.snapshot()) for op in ops]
        for a, b in zip(rebuilt, ops):
            assert dict(a.zone.core.tree._pos) == dict(b.zone.core.tree._pos)
    held = {k: (x, y) for op in ops for k, (x, y) in
            zip(*(lambda s: (s.keys.tolist(), zip(s.xs.tolist(), s.ys.tolist())))(op.zone.snapshot()))}
    assert held == final
    for a, b in subs:
        v = min((op.zone.core.tree.range_min(a, b) for op in ops), default=INF)
        v = None if v == INF else (-v if maximum else v)
        assert v == brute_value(final, a, b, maximum)


def test_fix_steps_and_infinite_values_refused():
    assert fix_steps([], [], set()).tolist() == []
    _, bases = zone_bases("g", ["a", "b"], [1.0, 5.0], [2.0, 3.0], 2, False)
    op = bases[0].build()
    bad = as_table([("a", math.inf, 1.0, 0, 0)])
    with pytest.raises(BadUpdate):
        op.route(bad)


def test_empty_zone_and_moves_across_every_boundary():
    """Zones that start empty and fill, keys that cross every boundary back and forth in one batch."""
    keys = [f"k{i}" for i in range(6)]
    cuts, bases = zone_bases("g", keys, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0], 3, True)
    ops = [b.build() for b in bases]
    single = RangeMinGroup("g", "t", "x", "y", True)
    single.load(keys, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    rows = [("k0", 5.0, 9.0, 0), ("k0", 0.0, 9.0, 0), ("k5", 0.5, 1.0, 0), ("k1", None, None, 1),
            ("k2", None, None, 1), ("k3", None, None, 1), ("new", 2.5, 7.0, 0), ("new", 9.0, 7.0, 0),
            ("k4", None, 3.0, 0), ("k1", 3.0, 1.0, 0)]
    batch = as_table([(*r, i) for i, r in enumerate(rows)])
    got, _, _ = run_zoned(ops, batch, maximum=True)
    assert got.to_pylist() == single.apply(batch, "reformulated").to_pylist()
    assert sum(len(op.zone) for op in ops) == len(single.core)


# ----------------------------------------------------------------------------------------------------------------
# the other two reformulated variants, zoned as the runtime runs them: CN+ (000 §2.2.2) and S-MN (000 §2.1.2)
# ----------------------------------------------------------------------------------------------------------------
def run_cn_plus(ops, batch: pa.Table, group_id="g"):
    """What runtime/zones.py does for CN+: each zone routes the whole batch and writes CN+'s messages in round 1
    (nothing deferred: there is no round 2); the tables merged with the X-moves' steps corrected."""
    tables, old = [], {}
    for op in ops:
        steps = op.route(batch)
        table, r1 = op.round1_messages(steps, cn_plus=True)
        r1 = pickle.loads(pickle.dumps(r1))
        assert not r1.deferred
        tables.append(table)
        old.update(r1.old_values)
    return merge_messages(tables[::-1], set(old), CN_PLUS_SCHEMA)


def run_s_mn(ops, shard_ops, batch: pa.Table, group_id="g", maximum=False):
    """What runtime/zones.py does for S-MN: the S-CN rounds, each shard's S-UN entries (pickled: they cross
    tasks as files), merged into S-MN's messages in any order of the shards."""
    messages, old, _ = run_zoned(ops, batch, group_id, maximum)
    entries = [pickle.loads(pickle.dumps(op.multicast_entries(messages, old))) for op in shard_ops]
    return merge_multicast(entries[::-1], group_id, maximum)


def subscribers_of(rows: dict, ids, x1, x2, maximum: bool) -> Subscribers:
    subs = Subscribers()
    subs.add(ids, x1, x2, values=[brute_value(rows, a, b, maximum) for a, b in zip(x1, x2)])
    subs.attach_table(list(rows), [p[0] for p in rows.values()], [p[1] for p in rows.values()], maximum)
    return subs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points=st.lists(st.tuples(coord, coord), min_size=0, max_size=16),
       subs=st.lists(subscription, min_size=1, max_size=20),
       updates=st.lists(update, min_size=1, max_size=60),
       n_zones=st.integers(1, 5), n_shards=st.integers(1, 4), maximum=st.booleans(), batch_size=st.integers(1, 30),
       dropped=st.integers(0, 5), dup=st.booleans())
def test_zoned_cn_plus_and_s_mn_equal_the_single_group(points, subs, updates, n_zones, n_shards, maximum,
                                                      batch_size, dropped, dup):
    """Message for message (CN+) and message for message with every ``targets`` list in the same order (S-MN),
    the zoned pipeline gives what ``RangeMinGroup`` gives; delivered, both bring every subscriber to the MIN /
    MAX recomputed from the rows.  Some subscriptions are dropped and others added first, so the group's slots
    are reused (the order S-MN lists targets in is the registry's slot order, not the registration order)."""
    rows = {f"k{i}": p for i, p in enumerate(points)}
    keys, xs, ys = list(rows), [p[0] for p in rows.values()], [p[1] for p in rows.values()]
    ids = [f"s{i}" for i in range(len(subs))]
    dropped = min(dropped, len(subs))
    single = {form: RangeMinGroup("g", "t", "x", "y", maximum) for form in ("cn_plus", "multicast")}
    for g in single.values():
        g.register(ids, np.array([a for a, _ in subs]), np.array([b for _, b in subs]))
        g.unregister(ids[:dropped])
        g.register([f"late{i}" for i in range(dropped)], np.array([a for a, _ in subs[:dropped]]),
                   np.array([b for _, b in subs[:dropped]]))
        g.load(keys, xs, ys)
    reg = single["multicast"].points            # the registry: its live slots are S-MN's order
    slots = reg.live_slots()
    live_ids, x1, x2 = reg.ids_of(slots), reg.x1[slots], reg.x2[slots]
    _, shards = shard_bases(live_ids, x1, x2, n_shards, ranks=slots)
    shard_ops = [pickle.loads(pickle.dumps(b)).build() for b in shards]
    ops = {form: [b.build() for b in zone_bases("g", keys, xs, ys, n_zones, maximum)[1]]
           for form in ("cn_plus", "multicast")}
    delivered = {form: subscribers_of(rows, live_ids, x1, x2, maximum) for form in ("cn_plus", "multicast")}
    final = dict(rows)
    batch = concrete_updates(final, updates, len(points))
    if dup:     # the same key updated twice in a row: duplicates within a batch
        batch = [(*r[:4], i) for i, r in enumerate(r for row in batch for r in (row, row))]
    for start in range(0, len(batch), batch_size):
        chunk = as_table(batch[start:start + batch_size])
        got = run_cn_plus(ops["cn_plus"], chunk)
        assert got.to_pylist() == single["cn_plus"].apply(chunk, "cn_plus").to_pylist()
        delivered["cn_plus"].deliver(got)
        got = run_s_mn(ops["multicast"], shard_ops, chunk, maximum=maximum)
        assert got.to_pylist() == single["multicast"].apply(chunk, "multicast").to_pylist()
        delivered["multicast"].deliver(got)
    want = np.array([np.nan if (v := brute_value(final, a, b, maximum)) is None else v for a, b in zip(x1, x2)])
    for form in ("cn_plus", "multicast"):
        np.testing.assert_array_equal(delivered[form].values_of(live_ids), want)
        held = {k: (x, y) for op in ops[form] for k, x, y in
                zip(op.zone.snapshot().keys.tolist(), op.zone.snapshot().xs.tolist(), op.zone.snapshot().ys.tolist())}
        assert held == final


def test_s_mn_lists_a_message_s_targets_across_shards_in_registry_order():
    """One update lowers the MIN of subscriptions in three x1 shards: one S-MN message lists them all, in the
    registry's slot order (here not the ids' text order nor the shards' order); a shard's entries lost, a wrong
    order, or the shards' own groups kept apart would each differ from the whole group."""
    keys, xs, ys = ["a", "b", "c"], [0.0, 5.0, 10.0], [9.0, 9.0, 9.0]
    ids = ["s9", "s10", "s2", "s1"]
    x1, x2 = np.array([6.0, 0.0, 3.0, 4.0]), np.array([10.0, 10.0, 10.0, 10.0])
    single = RangeMinGroup("g", "t", "x", "y", False)
    single.register(ids, x1, x2)
    single.load(keys, xs, ys)
    _, shards = shard_bases(np.array(ids, dtype=object), x1, x2, 3, ranks=np.arange(4))
    assert sum(1 for b in shards if len(b.ids)) == 3
    ops = [b.build() for b in zone_bases("g", keys, xs, ys, 2, False)[1]]
    batch = as_table([("c", 10.0, 1.0, 0, 0)])
    got = run_s_mn(ops, [b.build() for b in shards], batch)
    want = single.apply(batch, "multicast")
    assert got.to_pylist() == want.to_pylist()
    assert json.loads(got.column("targets")[0].as_py()) == ids
