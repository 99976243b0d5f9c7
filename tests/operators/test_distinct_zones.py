"""A sharded RANGE_DISTINCT group's rows split into X zones with a second round (``operators/distinct/zones.py``;
issue 16 item 4): round 1 in each zone (its part of the batch, open Mar ends, its steps per seq), round 2 (each
zone answers the open ends facing it as of the message's seq), closed and merged -- against the whole
``DistinctGroup``'s reformulated messages row for row, in order, ``msg_no`` too, batch after batch: 1 to 4 zones at
drawn cut points (on tuples' X too, zones left empty), values shared across zones, numbers and text, NULL X and Y,
deletes, X-moves within and across cuts, Y changes, a key several times in one batch.  The zones read as one
operator (``ZonedRows``) give the whole group's results.  No Spark."""
from __future__ import annotations

import copy
import math
import random

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.distinct.group import DistinctSnapshot
from sparksub.operators.distinct.zone_stream import batch_answers, close_answered
from sparksub.operators.distinct.zones import DistinctZoneSnapshot, ValueSteps, merge_closed, zone_answers
from sparksub.operators.shared.range_zones import ZonedRows, merge_zone_messages, zone_rows

TEXT = ["a", "b", "c", "d"]


def snapshot(rows: dict, text: bool) -> DistinctSnapshot:
    keys = np.array(list(rows), dtype=object)
    xs = np.array([x for x, _ in rows.values()], dtype=np.float64)
    ys = np.array([y for _, y in rows.values()], dtype=object)
    empty = np.zeros(0)
    return DistinctSnapshot("g", "t", "x", "y", None, np.zeros(0, dtype=object), empty, empty,
                            np.zeros(0, dtype=np.int64), keys, xs, ys)


def zoned(rows: dict, text: bool, cuts: tuple) -> list:
    snap = snapshot(rows, text)
    out = []
    for z in range(len(cuts) + 1):
        keys, xs, ys = zone_rows(snap.keys, snap.xs, snap.ys, cuts, z)
        part = snapshot({}, text)
        part.keys, part.xs, part.ys = keys, xs, ys
        out.append(DistinctZoneSnapshot(part, z, cuts).build())
    return out


def batch_of(updates: list, text: bool, seq: int) -> pa.Table:
    """``updates``: (key, x or None, y or None, delete?) as the engine gives a group its batch (a text value in
    ``y_text``, the float ``y`` null)."""
    cols = {"key": pa.array([u[0] for u in updates], pa.int64()),
            "x": pa.array([u[1] for u in updates], pa.float64()),
            "y": pa.array([None if text else u[2] for u in updates], pa.float64()),
            "op": pa.array([1 if u[3] else 0 for u in updates], pa.int8()),
            "seq": pa.array(range(seq, seq + len(updates)), pa.int64())}
    if text:
        cols["y_text"] = pa.array([u[2] for u in updates], pa.string())
    return pa.table(cols)


def draw_updates(rnd, n: int, text: bool, xs: list) -> list:
    out = []
    for _ in range(n):
        roll = rnd.random()
        x = None if roll < 0.08 else rnd.choice(xs)
        y = None if 0.08 <= roll < 0.14 else (rnd.choice(TEXT) if text else float(rnd.randint(0, 3)))
        out.append((rnd.randint(0, 11), x, y, roll > 0.85))
    return out


def apply_rows(rows: dict, updates: list) -> None:
    for key, x, y, delete in updates:
        if delete or x is None or y is None:
            rows.pop(key, None)
        else:
            rows[key] = (x, y)


def run_zones(zones: list, batch: pa.Table, mode="reformulated") -> pa.Table:
    # round 2 as a worker that lost its zone runs it: the zone rebuilt before the batch, the batch replayed
    # (``materialize``: mode "none") -- it records the same steps as round 1 did
    replayed = [copy.deepcopy(z) for z in zones]
    round1 = {z.zone: z.apply(batch, mode) for z in zones}
    for z in replayed:
        z.apply(batch, "none")
    answers = [zone_answers(z, round1) for z in zones]
    assert [a.to_pylist() for a in answers] == [zone_answers(z, round1).to_pylist() for z in replayed]
    return merge_closed(round1, answers)


def zones_and_whole(seed: int, n_zones: int, text: bool) -> tuple:
    """``(rnd, the X values drawn from, rows, the whole group, its zones)``: a random table and ``n_zones`` zones at
    drawn cut points -- on tuples' X, between them, some zones empty."""
    rnd = random.Random(seed)
    xs = [float(i) for i in range(10)] + [2.5, 6.5]
    rows: dict = {}
    apply_rows(rows, draw_updates(rnd, rnd.randint(0, 14), text, xs))
    cuts = tuple(sorted(rnd.sample([float(i) for i in range(11)] + [4.5, -1.0], n_zones - 1)))
    return rnd, xs, rows, snapshot(rows, text).build(), zoned(rows, text, cuts)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), n_zones=st.integers(1, 4), text=st.booleans())
def test_zones_with_a_second_round_emit_the_whole_groups_messages(seed, n_zones, text):
    rnd, xs, rows, whole, zones = zones_and_whole(seed, n_zones, text)
    view = ZonedRows.of_zones(zones)
    seq = 10
    for step in range(5):
        updates = draw_updates(rnd, rnd.randint(0, 16), text, xs)
        if step == 2 and rows:      # one key across every cut and back, keeping its value, within one batch
            key = rnd.choice(list(rows))
            y = rows[key][1]
            updates += [(key, 0.0, y, False), (key, 9.0, y, False), (key, rnd.choice(xs), y, False)]
        batch = batch_of(updates, text, seq)
        seq += batch.num_rows
        want = whole.apply(batch, "reformulated")
        got = run_zones(zones, batch)
        assert got.to_pylist() == want.to_pylist(), (zones[0].cuts, step)    # row for row, in order, msg_no too
        apply_rows(rows, updates)
        for z in zones:     # every zone holds exactly the rows it owns
            held = {k for k, (x, _) in rows.items() if z.lo <= x < z.hi}
            assert len(z.group.core) == len(held) and all(k in z.group.core for k in held)
        for _ in range(6):
            a = rnd.choice([-math.inf, *xs])
            b = rnd.choice([math.inf, a + rnd.randint(-1, 6)])
            want_values = {y for x, y in rows.values() if a <= x <= b}
            assert set(view.result_of(a, b)) == want_values == set(whole.result_of(a, b)), (a, b)
            assert view.result_of(a, b) == whole.result_of(a, b)
    assert sum(view.stats()["zone_rows"]) == len(rows)
    assert "second round" in view.explain()["zones"]


def test_a_move_across_a_cut_reads_the_other_half_as_of_its_seq():
    """Value 'a' at 1 and 8, the cut at 5.  Seq 1: the key at 1 moves to 6 (same value, across the cut): the
    REMOVE's Mar is w.r.t. {6, 8} (the new zone after the seq), the ADD's w.r.t. {1, 8} -- the old zone's answer
    before the seq, the x it reported moving out.  Seq 2: 8 deleted: its Mar reaches 6 on the left (a tuple that
    arrived in this batch) and +inf."""
    rows = {1: (1.0, "a"), 2: (8.0, "a")}
    zones = zoned(rows, True, (5.0,))
    whole = snapshot(rows, True).build()
    batch = batch_of([(1, 6.0, "a", False), (2, None, None, True)], True, 1)
    got = run_zones(zones, batch).to_pylist()
    assert got == whole.apply(batch, "reformulated").to_pylist()
    assert [(m["op"], m["inner_l"], m["outer_l"], m["outer_r"]) for m in got] == \
        [("REMOVE", 1.0, -math.inf, 6.0), ("ADD", 6.0, 1.0, 8.0), ("REMOVE", 8.0, 6.0, math.inf)]


def test_the_as_of_walk_undoes_the_later_steps():
    """A zone's X of a value as of a seq: its end list with the steps after that seq undone, from either edge."""
    from sortedcontainers import SortedList
    steps = ValueSteps()
    steps.record(5, "v", 3.0, +1)     # arrived at 3 at seq 5
    steps.record(6, "v", 7.0, -1)     # left 7 at seq 6
    steps.record(7, "v", 3.0, -1)     # left 3 at seq 7
    end = SortedList([1.0])
    assert list(steps.walk(end, "v", 4, True, descending=True)) == [7.0, 1.0]
    assert list(steps.walk(end, "v", 5, True, descending=True)) == [7.0, 3.0, 1.0]
    assert list(steps.walk(end, "v", 6, False, descending=False)) == [1.0, 3.0, 7.0]
    assert list(steps.walk(end, "v", 6, True, descending=False)) == [1.0, 3.0]
    assert list(steps.walk(end, "v", 7, True, descending=True)) == [1.0]
    assert list(steps.walk(SortedList(), "w", 7, True, descending=True)) == []


# ---- a stream's zones: round 2 folded into stage 1's answers (``distinct/zone_stream.py``) ----------------------
def run_stream_zones(zones: list, batch: pa.Table, old_rows: dict) -> pa.Table:
    """A stream's two stages over ``zones``: each zone applies the whole batch and answers every question facing it
    from the batch and the table's rows before it (``old_rows``: what its state store holds); the shard closes the
    zones' ends with the answers and merges."""
    messages = {z.zone: z.apply(batch, "reformulated") for z in zones}
    answers = pa.concat_tables([batch_answers(z, batch, old_rows) for z in zones])
    closed = close_answered(messages, answers)
    return merge_zone_messages([closed[i] for i in sorted(closed)])


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), n_zones=st.integers(1, 4), text=st.booleans())
def test_a_streams_zones_answering_every_question_emit_the_whole_groups_messages(seed, n_zones, text):
    """Batch after batch, 1 to 4 zones at drawn cuts (on tuples' X, zones left empty), shared values, NULL X / Y,
    deletes, X-moves within and across cuts, Y changes, a key several times: the zones' messages closed with their
    answers equal the whole group's, row for row, in order, ``msg_no`` too."""
    rnd, xs, rows, whole, zones = zones_and_whole(seed, n_zones, text)
    seq = 10
    for step in range(5):
        updates = draw_updates(rnd, rnd.randint(0, 16), text, xs)
        if rows and step in (1, 3):   # one key across every cut and back, its value kept, then changed
            key = rnd.choice(list(rows))
            y = rows[key][1]
            updates += [(key, 0.0, y, False), (key, 9.0, y, False), (key, rnd.choice(xs), y, False),
                        (key, rnd.choice(xs), rnd.choice(TEXT) if text else 7.0, False)]
        batch = batch_of(updates, text, seq)
        seq += batch.num_rows
        want = whole.apply(batch, "reformulated")
        got = run_stream_zones(zones, batch, dict(rows))
        assert (got.to_pylist() if got is not None else []) == want.to_pylist(), (zones[0].cuts, step)
        apply_rows(rows, updates)


def test_a_streams_zone_answers_a_move_across_the_cut_as_of_its_seq():
    """Value 'a' at 1 and 8, the cut at 5; seq 1 moves the key at 1 to 6, seq 2 deletes 8, seq 3 adds 'a' at 3.
    Zone 1 answers zone 0's REMOVE at 1 (after seq 1: 6) and zone 0's ADD at 3 (before seq 3: 6, as 8 is gone);
    zone 0 answers zone 1's ADD at 6 (before seq 1: the 1 it moved out) and its REMOVE at 8 (after seq 2: none)."""
    rows = {1: (1.0, "a"), 2: (8.0, "a")}
    zones = zoned(rows, True, (5.0,))
    batch = batch_of([(1, 6.0, "a", False), (2, None, None, True), (3, 3.0, "a", False)], True, 1)
    for z in zones:
        z.apply(batch, "reformulated")
    asked = [batch_answers(z, batch, rows).to_pylist() for z in zones]
    assert asked[0] == [{"asker": 1, "seq": 1, "step": 1, "side": 0, "x": 1.0}]
    assert asked[1] == [{"asker": 0, "seq": 1, "step": 0, "side": 1, "x": 6.0},
                        {"asker": 0, "seq": 3, "step": 1, "side": 1, "x": 6.0}]
    whole = snapshot(rows, True).build()
    assert run_stream_zones(zoned(rows, True, (5.0,)), batch, rows).to_pylist() == \
        whole.apply(batch, "reformulated").to_pylist()
