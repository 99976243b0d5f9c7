"""A two-stage RANGE_MIN / RANGE_MAX stream group with its rows in X zones, without Spark
(``operators/range_min/zone_stream.py``; ``runtime/stream.py``'s pure stage functions): each zone's stage-1 rows
(DS-CN's round 1 of its part of the micro-batch: settled messages with their versions, its ``Round1`` pickled into a
string cell), fanned out to the x1 subscription shards as stage 2's exchange does (rows in any order), completed by
every shard (round 2, the merge) -- against the whole group's two stages over the same rows:

* every zone's rows merged (``min_zone_messages``) equal the whole ``RangeMinGroup`` core's reformulated messages row
  for row, every column, and the X-moves' old Y equal ``step0_old_values``;
* each shard's S-UN rows equal the whole two-stage group's shard's, row for row and in order.

Hypothesis draws the rows and micro-batches: Z = 1..4 zones at cuts on the tuples' X, MIN and MAX, NULL X / Y, ties in
X and Y, deletes (of unknown keys too), a key several times per batch, X-moves across the cuts, several batches.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.range_min.group import GroupSnapshot, RangeMinGroup
from sparksub.operators.range_min.zone_stream import round1_of
from sparksub.operators.range_min.subscription_shards import shard_bases, step0_old_values
from sparksub.operators.shared.range_zone_stream import StreamZone
from sparksub.operators.shared.range_zones import zone_cuts
from sparksub.operators.shared.schemas import DELETE, MESSAGE_SCHEMA, UNICAST_SCHEMA, UPSERT
from sparksub.runtime import stateful
from sparksub.runtime import stream as spark_stream

SCHEMA = spark_stream.output_schema(UNICAST_SCHEMA)


def snapshot(rows: dict, maximum: bool) -> GroupSnapshot:
    keys = np.empty(len(rows), dtype=object)
    keys[:] = [f"k{k}" for k in rows]
    e = np.empty(0)
    return GroupSnapshot("g", "t", "x", "y", maximum, np.empty(0, dtype=object), e, e, keys,
                         np.array([np.nan if x is None else x for x, _ in rows.values()], dtype=np.float64),
                         np.array([np.nan if y is None else y for _, y in rows.values()], dtype=np.float64))


def spec_of(groups: dict) -> spark_stream.StreamSpec:
    return spark_stream.StreamSpec("engine", "stream", "t", "string", "unicast", SCHEMA, groups, min(groups), True)


def two_stages(snap: GroupSnapshot, n_zones: int, shard_cuts, stored) -> tuple:
    """The whole two-stage group's spec and stage-1 operator; the zoned one's spec and stage-1 zones."""
    staged = {"shards": tuple(spark_stream._Deferred(b) for b in stored), "cuts": tuple(shard_cuts)}
    whole = spec_of({"g": spark_stream.GroupSpec("g", "x", "y", None, **staged)})
    cuts = zone_cuts(snap.xs, n_zones)
    specs = {f"g#r{i}": spark_stream.GroupSpec(f"g#r{i}", "x", "y", None, **staged,
                                               zone=StreamZone("g", i, len(cuts) + 1, cuts, RangeMinGroup))
             for i in range(len(cuts) + 1)}
    zones = [spark_stream._built(g, snap) for g in specs.values()]
    return whole, snap.build(), spec_of(specs), zones, cuts


def stage_two(spec: spark_stream.StreamSpec, stage1: pa.Table, shuffle) -> list:
    """Stage 2 as the exchange runs it: each stage-1 row to the slots ``_range_targets`` names, a slot's rows in any
    order, ``_range_match`` per slot -> each slot's output rows."""
    first = spark_stream.stage_one_spec(spec)
    rows = stateful.output_table(first.schema, stage1)
    slots = spark_stream.shard_slots(spec)
    per_slot: dict = {i: [] for i in range(len(slots))}
    targets = spark_stream._range_targets(spec, slots)
    for part, slot in (t for rb in rows.combine_chunks().to_batches() for t in targets(rb)):
        where = np.broadcast_to(np.asarray(slot), (part.num_rows,))
        for i in range(len(slots)):
            per_slot[i].append(part.filter(pa.array(where == i)))
    match = spark_stream._range_match(spec, slots, SCHEMA)
    out = []
    for i, parts in per_slot.items():
        parts = [p for p in parts if p.num_rows]
        if not parts:   # (Spark runs no task for a slot without rows)
            out.append([])
            continue
        got = pa.concat_tables([pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b for b in parts])
        got = got.take(pa.array(shuffle.sample(range(got.num_rows), got.num_rows), pa.int64()))
        out.append([r for t in match(i, got) for r in t.to_pylist()])
    return out


def batch_table(rows_batch: list, seq0: int) -> pa.Table:
    return pa.table({"key": pa.array([f"k{k}" for k, *_ in rows_batch], pa.string()),
                     "x": pa.array([np.nan if x is None else x for _, _, x, _ in rows_batch], pa.float64()),
                     "y": pa.array([np.nan if y is None else y for *_, y in rows_batch], pa.float64()),
                     "op": pa.array([DELETE if d else UPSERT for _, d, *_ in rows_batch], pa.int8()),
                     "seq": pa.array(np.arange(seq0, seq0 + len(rows_batch)), pa.int64())})


_X = st.one_of(st.integers(0, 9).map(float), st.just(None))
_Y = st.one_of(st.integers(-3, 4).map(float), st.just(None))
_ROWS = st.dictionaries(st.integers(0, 15), st.tuples(_X, _Y), min_size=1, max_size=16)
#: (key, delete?, x, y): keys repeat (X-moves across the cuts, deletes, NULLs, a key several times)
_BATCH = st.lists(st.tuples(st.integers(0, 19), st.booleans(), _X, _Y), min_size=1, max_size=30)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=_ROWS, batches=st.lists(_BATCH, min_size=1, max_size=3), n_zones=st.integers(1, 4),
       maximum=st.booleans(), shuffle=st.randoms(use_true_random=False))
def test_zones_round_one_then_the_shards_round_two_equal_the_whole_group(start, batches, n_zones, maximum, shuffle):
    check(start, batches, n_zones, maximum, shuffle)


def check(start: dict, batches: list, n_zones: int, maximum: bool, shuffle) -> int:
    """The module docstring's assertions over ``batches`` from ``start``; how many steps round 2 settled."""
    snap = snapshot(start, maximum)
    ids = [f"s{i}" for i in range(10)]
    x1 = [-math.inf, 0.0, 2.0, 3.0, 4.0, 9.0, 5.0, 1.0, 6.0, 7.0]
    x2 = [math.inf, 0.0, 7.0, 3.0, 9.0, 9.0, 8.0, 4.0, math.inf, 7.0]
    shard_cuts, stored = shard_bases(ids, x1, x2, 3)
    whole_spec, whole, zoned_spec, zones, cuts = two_stages(snap, n_zones, shard_cuts, stored)
    assert len(zones) == len(cuts) + 1
    deferred = 0
    for b, rows_batch in enumerate(batches):
        batch = batch_table(rows_batch, 1000 * (b + 1))
        cols = {c: batch.column(c).to_numpy(zero_copy_only=False) for c in ("x", "y", "op", "seq")}
        old = step0_old_values(whole.core, batch.column("key").to_pylist(), cols["x"], cols["y"], cols["op"],
                               cols["seq"])
        expected = spark_stream.stage_one(whole, batch, old)
        stage1 = pa.concat_tables([spark_stream.stage_one_min_zone(z, batch) for z in zones],
                                  promote_options="default")
        deferred += sum(len(round1_of(t).deferred) for t in stage1.column("m_round1").to_pylist() if t is not None)
        # every zone's rows at one shard: the whole group's messages, every column, and its X-moves' old Y
        got, moved = spark_stream.min_zone_messages("g", stage1.take(pa.array(
            shuffle.sample(range(stage1.num_rows), stage1.num_rows), pa.int64())))
        want = expected.select(["group_id", "seq", "op"]).to_pylist()
        assert got.schema == MESSAGE_SCHEMA
        assert got.select(["group_id", "seq", "op"]).to_pylist() == want, b
        assert got.column("step").to_pylist() == expected.column("m_step").to_pylist(), b
        for c in ("new_value", "inner_l", "inner_r", "outer_l", "outer_r"):
            assert got.column(c).to_pylist() == expected.column(f"m_{c}").to_pylist(), (b, c)
        assert moved == old, b
        # through stage 2's routing and S-UN: each shard's rows equal the whole two-stage group's
        assert stage_two(zoned_spec, stage1, shuffle) == stage_two(whole_spec, expected, shuffle), b
    return deferred


def test_a_walk_across_the_cuts_is_settled_in_the_shards():
    """A micro-batch whose steps' walks cross the cuts (a new minimum, a delete of one, an X-move across both cuts)
    is deferred to round 2 in the shards, and the outcome still equals the whole group's."""
    for maximum, sign in ((False, 1.0), (True, -1.0)):   # (MAX: the same walks with Y negated)
        start = {k: (float(k % 10), sign * (3 + k % 2)) for k in range(15)}
        batch = [(20, False, 4.0, -2.0), (21, False, 6.0, -3.0), (20, True, None, None), (3, False, 8.0, -1.0),
                 (5, False, 1.0, 4.0), (21, False, 0.0, -3.0)]
        batch = [(k, d, x, None if y is None else sign * y) for k, d, x, y in batch]
        deferred = check(start, [batch, [(3, True, None, None), (21, False, 9.0, 4.0)]], 3, maximum, random.Random(1))
        assert deferred >= 6, deferred
