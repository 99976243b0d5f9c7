"""A sharded RANGE_DISTINCT group's rows split into X zones, with the second round its Mar needs (issue 16 item 4).
Pure (numpy, pyarrow, sortedcontainers; no pyspark).

RANGE_AGG's zones (``shared/range_zones.py``) need one round: an aggregate message reads only its own X.  A
DISTINCT message ``⟨OP, y, x, x, ℓO, rO⟩`` (000 §4: Mar extended to duplicates, ``distinct/core.py``) reads the
nearest other tuple of value y on each side of x, which may sit in another zone -- the same problem DS-CN's walk
has for MIN (000 §2.3.2; ``range_min/zones.py``), with a simpler answer: a DISTINCT Mar end is *one* X, the
nearest tuple of y, not a staircase.

Round 1 (each zone, its own task, the whole batch routed by ``range_zones.zone_batch``)
------------------------------------------------------------------------------------
The zone applies its part of the batch to a DISTINCT core over its own rows, in seq order, exactly as the whole
group would -- an X-move across a cut is the old zone's delete and the new zone's insert -- and emits each
message with the ends its own tuples close.  An end is **open** when no tuple of y lies in the zone on that side
of x and a zone lies beyond: ``OUTER_L = -inf`` in a zone that is not the first, ``OUTER_R = +inf`` in one that
is not the last (a closed end is a tuple's X, always finite, so the message itself says which ends are open).
The zone also records, per seq, its own **steps** of each value (:class:`ValueSteps`: ``(seq, x, +1 | -1)``),
so that after the batch it can still answer "where were my tuples of y as of seq s".

Which state an open end reads (the consistent cut)
--------------------------------------------------
Only the zones holding the update's key before and after it change at its seq.  A REMOVE (a delete, the old half
of a move or of a Y change) reads the other zones **after** its seq (``inclusive``), an ADD **before** it.  That
is the whole core's rule in every case: a delete's Mar is over the other tuples; a Y change's REMOVE of y_o sees
no tuple of the key at y_o, its ADD of y_n none at y_n; and the consolidated X-move of a key across a cut -- the
REMOVE's Mar w.r.t. ``O ∪ {x_n}``, the ADD's w.r.t. ``O ∪ {x_o}`` (``distinct/core.py``) -- is the old zone's
REMOVE reading the new zone after the seq (x_n there) and the new zone's ADD reading the old zone before it (x_o
still there).  The new zone never learns x_o in round 1; the old zone **reports its move-out** through its own
answer as of before the seq: its steps hold the key's departure at that seq, so undoing them gives x_o back.  (This
is RANGE_MIN's ``Round1.old_values`` -- what only the old zone knows -- carried by the versioned answer instead of a
separate record; ``test_distinct_zones.py`` breaks it by answering an ADD as of after its seq.)

Round 2 (each zone again, where it is cached at the batch's end)
----------------------------------------------------------------
Every zone reads every other zone's round-1 messages and answers the open ends facing it (:func:`zone_answers`):
for a zone to the asker's left, its greatest X of y as of the message's seq (:meth:`DistinctRowsZone.nearest`);
to the right, its least.  The zone answers from its tuples at the batch's end with its own later steps undone
(:meth:`ValueSteps.walk`) -- never from its end state, which may have moved on.  :func:`close_open_ends` closes
each end at the nearest answer (the greatest on the left, the least on the right; ±inf when no zone has one) and
``range_zones.merge_zone_messages`` orders the zones' messages by (seq, part, zone) and numbers ``msg_no`` anew:
the whole group's messages, row for row (``tests/operators/test_distinct_zones.py``).

The as-of query is general: :meth:`ValueSteps.walk` yields a zone's X of a value outward from an edge as of any
version.  Top-k's zones (``topk/zones.py``) read across a cut the other way round: a halo taken before the batch,
deep enough for any step of it, since a painting's walk and sweep would ask one question per step crossing a cut.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.shared.range_classes import batch_columns, is_null
from sparksub.operators.shared.range_zones import RowsZone, RowsZoneSnapshot, merge_zone_messages
from sparksub.operators.shared.schemas import DELETE

__all__ = ["DistinctRowsZone", "DistinctZoneSnapshot", "ValueSteps", "close_open_ends", "merge_closed",
           "row_after", "zone_answers", "ANSWER_SCHEMA"]

#: a zone's answers to the open ends of another zone's messages: the asking zone, the message's row in that zone's
#: round-1 table, the side (0: the asker's left end, 1: its right end) and the answering zone's nearest X (null: none)
ANSWER_SCHEMA = pa.schema([("asker", pa.int32()), ("row", pa.int64()), ("side", pa.int8()), ("x", pa.float64())])

_INF = math.inf


class ValueSteps:
    """One zone's own steps of its last batch per value: ``(seq, x, +1 | -1)`` in batch order (a tuple of the value
    arriving at / leaving x at that seq).  With the zone's X lists at the batch's end they give its tuples of any
    value as of any seq (:meth:`walk`)."""

    def __init__(self):
        self.by_value: dict = {}

    def record(self, seq: int, value, x: float, sign: int) -> None:
        self.by_value.setdefault(value, []).append((seq, x, sign))

    def undo(self, value, seq: int, inclusive: bool) -> Counter:
        """How many tuples of ``value`` each X had more as of ``seq`` than at the batch's end (negative: fewer):
        the steps after the version (``inclusive``: the state after ``seq``'s step, else before it) undone.  Cost:
        those steps."""
        adj: Counter = Counter()
        for s, x, sign in reversed(self.by_value.get(value, ())):   # recorded in seq order: the latest first
            if s < seq or (s == seq and inclusive):
                break
            adj[x] -= sign
        return adj

    def walk(self, end_xs, value, seq: int, inclusive: bool, descending: bool) -> Iterator[float]:
        """The zone's X of ``value`` as of ``seq`` (each as often as it holds a tuple there), from its low edge
        upward or (``descending``) from its high edge downward; ``end_xs``: its sorted X of the value at the batch's
        end.  Cost: the tuples passed plus the value's steps in the batch."""
        adj = self.undo(value, seq, inclusive)
        extra = sorted((x for x, c in adj.items() if c > 0), reverse=descending)
        ends = reversed(end_xs) if descending else iter(end_xs)
        before = (lambda a, b: a > b) if descending else (lambda a, b: a < b)
        seen: set = set()

        def emit(x):
            # every tuple at x as of the version, once (the end list repeats x once per tuple: counted there)
            if x in seen:
                return 0
            seen.add(x)
            return max(_count(end_xs, x) + adj.get(x, 0), 0)
        i = 0
        for x in ends:
            while i < len(extra) and before(extra[i], x):
                yield from [extra[i]] * emit(extra[i])
                i += 1
            yield from [x] * emit(x)
        for x in extra[i:]:
            yield from [x] * emit(x)


def row_after(op, x, y) -> tuple | None:
    """A key's ``(x, y)`` after an update of the batch (``batch_columns``' values), or None: the group's NULL rule
    (``range_classes.RangeClassGroup.apply``: a delete, or a NULL X or Y, leaves the key in no range)."""
    return None if op == DELETE or x is None or x != x or is_null(y) else (float(x), y)


def _count(sorted_xs, x) -> int:
    return sorted_xs.bisect_right(x) - sorted_xs.bisect_left(x) if len(sorted_xs) else 0


@dataclass
class DistinctZoneSnapshot(RowsZoneSnapshot):
    """A RANGE_DISTINCT zone's replica base (its rows, its index, the cut points)."""

    def build(self) -> DistinctRowsZone:
        return DistinctRowsZone(self.rows.build(), self.zone, self.cuts)


class DistinctRowsZone(RowsZone):
    """One X zone of a sharded RANGE_DISTINCT group's rows (module docstring): ``apply`` is round 1 (every mode,
    a log replay too, records the batch's steps -- ``_routed`` -- so a zone rebuilt for round 2 answers as the one
    round 1 left); :meth:`nearest` answers round 2's questions."""

    def __init__(self, group, zone: int, cuts: tuple):
        super().__init__(group, zone, cuts)
        self.steps = ValueSteps()

    def _routed(self, part: pa.Table) -> None:
        self.steps = self._steps_of(part)

    def _steps_of(self, part: pa.Table) -> ValueSteps:
        # the zone's part of the batch in seq order against its keys as they stand (the group's NULL rule: a NULL X
        # or Y deletes the row), so a step is recorded whether or not the update emits a message
        cols = batch_columns(part, text=True)
        now: dict = {}
        steps = ValueSteps()
        get = self.group.core.get
        for key, x, y, op, seq in zip(cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]):
            old = now[key] if key in now else get(key)
            new = row_after(op, x, y)
            if old is not None:
                steps.record(int(seq), old[1], old[0], -1)
            if new is not None:
                steps.record(int(seq), new[1], new[0], +1)
            now[key] = new
        return steps

    def nearest(self, value, seq: int, inclusive: bool, highest: bool) -> float | None:
        """The zone's greatest (``highest``: for an asker to its right) or least X of ``value`` as of ``seq``
        (``inclusive``: after its step), or None."""
        xs = self.group.core.xs_of(value)
        return next(self.steps.walk(xs, value, seq, inclusive, descending=highest), None)

    # a stateless shard's base is written in zone 0's task (``runtime/range_shards.seed_shards``): what
    # ``range_shards.shard_bases`` asks of the rows' operator
    @property
    def shard_stateless(self) -> bool:
        return self.group.shard_stateless

    @property
    def subscribers_class(self) -> type:
        return self.group.subscribers_class

    def subscriber_option(self):
        return self.group.subscriber_option()

    # ``ZonedRows`` reads a DISTINCT zone's values per range (``DistinctGroup.merge_seeds``: their union)
    def shard_seed(self, x1, x2, k):
        return [self.group.core.distinct_values(a, b) for a, b in zip(np.asarray(x1).tolist(),
                                                                        np.asarray(x2).tolist())]


def _values(table: pa.Table) -> list:
    # a message's value: its text, else its number (``DistinctGroup._value_columns``)
    text = table.column("item_text").to_pylist()
    num = table.column("new_value").to_pylist()
    return [t if t is not None else v for t, v in zip(text, num)]


def zone_answers(zone: DistinctRowsZone, tables: dict) -> pa.Table:
    """Round 2 in one zone: its answers to the open ends of the other zones' round-1 messages (``tables``: zone
    index -> its round-1 table) that face it -- an asker to its right has an open left end (``OUTER_L = -inf``),
    one to its left an open right end.  A REMOVE reads the zone after its seq, an ADD before (module docstring)."""
    asker, rows, sides, xs = [], [], [], []
    me = zone.zone
    for i, t in tables.items():
        if i == me or t is None or not t.num_rows:
            continue
        side = 0 if i > me else 1
        bound = t.column("outer_l" if side == 0 else "outer_r").to_numpy(zero_copy_only=False)
        open_rows = np.flatnonzero(bound == (-_INF if side == 0 else _INF))
        if not open_rows.size:
            continue
        sub = t.take(pa.array(open_rows, pa.int64()))
        for r, value, seq, op in zip(open_rows.tolist(), _values(sub), sub.column("seq").to_pylist(),
                                     sub.column("op").to_pylist()):
            x = zone.nearest(value, int(seq), inclusive=op != "ADD", highest=side == 0)
            if x is not None:
                asker.append(i)
                rows.append(r)
                sides.append(side)
                xs.append(x)
    return pa.table({"asker": pa.array(asker, pa.int32()), "row": pa.array(rows, pa.int64()),
                     "side": pa.array(sides, pa.int8()), "x": pa.array(xs, pa.float64())}, schema=ANSWER_SCHEMA)


def close_open_ends(tables: dict, answers: Sequence[pa.Table], ends: tuple = ("outer_l", "outer_r")) -> dict:
    """Each zone's round-1 messages (zone index -> table) with their open ends closed at the nearest answer: the
    greatest X the zones to the left gave, the least the zones to the right gave (no answer: ±inf stays).
    ``ends``: the tables' OUTER_L and OUTER_R columns (a stream's stage 1 prefixes them, ``zone_stream.py``)."""
    given = [a for a in answers if a is not None and a.num_rows]
    if not given:
        return dict(tables)
    every = pa.concat_tables(given)
    out = {}
    for i, t in tables.items():
        mine = every.filter(pc.equal(every.column("asker"), i)) if t is not None else None
        if mine is None or not mine.num_rows:
            out[i] = t
            continue
        row = mine.column("row").to_numpy()
        side = mine.column("side").to_numpy()
        x = mine.column("x").to_numpy(zero_copy_only=False)
        left_name, right_name = ends
        left = t.column(left_name).to_numpy(zero_copy_only=False).copy()
        right = t.column(right_name).to_numpy(zero_copy_only=False).copy()
        np.maximum.at(left, row[side == 0], x[side == 0])
        np.minimum.at(right, row[side == 1], x[side == 1])
        t = t.set_column(t.schema.get_field_index(left_name), left_name, pa.array(left, pa.float64()))
        out[i] = t.set_column(t.schema.get_field_index(right_name), right_name, pa.array(right, pa.float64()))
    return out


def merge_closed(tables: dict, answers: Sequence[pa.Table]) -> pa.Table | None:
    """The zones' round-1 messages closed with round 2's answers, merged as the whole group emits them."""
    closed = close_open_ends(tables, answers)
    return merge_zone_messages([closed[i] for i in sorted(closed)])
