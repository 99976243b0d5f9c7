"""A RANGE_DISTINCT group's rows in X zones inside a unicast stream (issue 16 item 4): publish's second round
(``distinct/zones.py``) without a second stateful stage.  Pure (numpy, pyarrow; no pyspark).

In publish a zone's messages ``<ADD|REMOVE, y, x, x, OUTER_L, OUTER_R>`` (000 §4, ``distinct/core.py``) leave a Mar
end open where the zone holds no tuple of y on that side of x, and a second job closes it: every zone reads the
others' round-1 messages and answers the open ends facing it, as of the message's seq.  A stream has one stateful
stage (the zones, ``runtime/stream.py``), and what follows it -- the subscription shards, each receiving every
zone's messages of its group -- holds no rows.  What makes one stage enough: **every zone reads the group's whole
micro-batch and its state store holds every row of the table** (``shared/range_zone_stream.py``), so every zone
knows, for every update, the key's old row ``(x_o, y_o)`` and its new one ``(x_n, y_n)`` -- hence every question any
other zone's message can ask, without seeing the message:

* the REMOVE of ``y_o`` at ``x_o`` (a delete, a NULL, the old half of an X-move or a Y change), asked by ``x_o``'s
  zone, reads the other zones **after** its seq;
* the ADD of ``y_n`` at ``x_n``, asked by ``x_n``'s zone, reads them **before** it

(``distinct/zones.py``: the whole core's rule, the consolidated X-move across a cut included).  A zone to the
asker's left answers its greatest X of the value as of then, one to its right its least
(its X lists at the batch's end with its later steps undone, as :meth:`DistinctRowsZone.nearest` reads them; here
for every question of the batch at once, :class:`_Rewind`: the steps undone once each, from the batch's end back, the
questions answered latest first -- where asking ``nearest`` per question would undo the value's later steps again
for each, O(batch² / values)).  So stage 1's zone
emits, beside its own messages with their open ends, its answers (:func:`batch_answers`), one row each where it
holds a tuple of the value, tagged ``(asker, seq, step, side, x)`` -- ``step`` 0 for the update's REMOVE, 1 for its
ADD (a seq has at most one of each in a zone), ``side`` 0 for the asker's left end, 1 its right.  A zone can tell
neither whether the asker's end is open (that is the asker's tuples) nor whether the asker emits a message at all
(an empty Mar, an unchanged row), so it answers every question facing it: at most two per update per other zone.

Stage 2 (each shard, over the zones' rows of its group) closes the ends (:func:`close_answered`): the answers of
the messages that exist, each end at the nearest answer (``close_open_ends``: the greatest from the left, the least
from the right, ±inf when none).  An end its zone closed itself lies inside the zone, nearer than any answer from
across a cut, so taking the nearer of the end and the answers is right whether the end was open or not.  Then the
zones' messages are merged as the whole group emits them (``range_zones.merge_zone_messages``: by seq, a move's
delete half first, zone order, ``msg_no`` anew) -- the whole ``DistinctGroup``'s messages, row for row
(``tests/operators/test_distinct_zones.py``).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
from sortedcontainers import SortedList

from sparksub.operators.distinct.core import REMOVE
from sparksub.operators.distinct.zones import ANSWER_SCHEMA, DistinctRowsZone, close_open_ends, row_after
from sparksub.operators.shared.range_classes import batch_columns

__all__ = ["STREAM_ANSWER_SCHEMA", "batch_answers", "close_answered"]

#: a zone's answer in a stream: the asking zone, the message's seq and step (0: the update's REMOVE, 1: its ADD),
#: the side (0: the asker's left end, 1: its right end) and the answering zone's nearest X of the value
STREAM_ANSWER_SCHEMA = pa.schema([("asker", pa.int32()), ("seq", pa.int64()), ("step", pa.int8()),
                                  ("side", pa.int8()), ("x", pa.float64())])


def batch_answers(zone: DistinctRowsZone, batch: pa.Table, old_rows: Mapping) -> pa.Table:
    """Zone ``zone``'s answers to every question another zone's message of ``batch`` can ask (module docstring),
    after the zone applied ``batch`` (its steps are the batch's).  ``batch``: the group's whole micro-batch (``key,
    x, y, op, seq``, a text value in ``y_text``), in seq order; ``old_rows``: key -> its ``(x, y)`` before the batch,
    or None (none, or in no range) -- a key absent is new.  The rows of :data:`STREAM_ANSWER_SCHEMA`."""
    cols = batch_columns(batch, text=True)
    cuts, me = zone.cuts, zone.zone
    questions = []   # (seq, step, asker, side, value) of the messages another zone may emit
    now: dict = {}
    for key, x, y, op, seq in zip(cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]):
        old = now[key] if key in now else old_rows.get(key)
        new = row_after(op, x, y)
        now[key] = new
        if old == new:   # no change: no message (the core's "unchanged")
            continue
        for step, row in ((0, old), (1, new)):
            at = None if row is None else bisect_right(cuts, row[0])   # the message at the row's X is its zone's
            if at is not None and at != me:
                questions.append((int(seq), step, at, 0 if at > me else 1, row[1]))
    # latest first: a REMOVE (step 0) reads the zone after its seq, an ADD before it -- so at one seq the REMOVE's
    # version is the later one
    questions.sort(key=lambda q: (q[0], -q[1]), reverse=True)
    rewind = _Rewind(zone)
    asker, seqs, steps, sides, xs = [], [], [], [], []
    for seq, step, at, side, value in questions:
        x = rewind.nearest(value, seq, inclusive=step == 0, highest=side == 0)
        if x is not None:
            asker.append(at)
            seqs.append(seq)
            steps.append(step)
            sides.append(side)
            xs.append(x)
    answers = pa.table({"asker": pa.array(asker, pa.int32()), "seq": pa.array(seqs, pa.int64()),
                        "step": pa.array(steps, pa.int8()), "side": pa.array(sides, pa.int8()),
                        "x": pa.array(xs, pa.float64())}, schema=STREAM_ANSWER_SCHEMA)
    return answers.sort_by([("seq", "ascending"), ("step", "ascending"), ("asker", "ascending")])


class _Rewind:
    """A zone's tuples of each value rewound from the batch's end toward its start, one version after another, each
    no later than the one before (:func:`batch_answers` asks latest first): per value, how many tuples each X had more
    than at the end (``adj``, its steps undone so far, ``ValueSteps.undo``'s count) and the X it had more at
    (``extra``, sorted); the end lists are the zone's core's, untouched."""

    def __init__(self, zone: DistinctRowsZone):
        self.xs_of = zone.group.core.xs_of
        self.steps = zone.steps.by_value
        self.left: dict = {}    # value -> how many of its steps are still applied (the first ones)
        self.adj: dict = {}
        self.extra: dict = {}

    def nearest(self, value, seq: int, inclusive: bool, highest: bool) -> float | None:
        """The zone's greatest (``highest``) or least X of ``value`` as of ``seq`` (``inclusive``: after its step),
        or None."""
        steps = self.steps.get(value, ())
        n = self.left.get(value, len(steps))
        adj = self.adj.setdefault(value, Counter())
        extra = self.extra.setdefault(value, SortedList())
        while n and (steps[n - 1][0] > seq or (steps[n - 1][0] == seq and not inclusive)):
            n -= 1
            _, x, sign = steps[n]
            had = adj[x] > 0
            adj[x] -= sign
            if adj[x] > 0 and not had:
                extra.add(x)
            elif had and adj[x] <= 0:
                extra.remove(x)
        self.left[value] = n
        end = self.xs_of(value)
        best = (extra[-1] if highest else extra[0]) if extra else None
        # the end list from the edge inward, each X once, the first with a tuple left as of the version (an X
        # skipped lost every tuple it has at the end: at most one skip per step undone)
        i = len(end) - 1 if highest else 0
        while 0 <= i < len(end):
            x = end[i]
            lo, hi = end.bisect_left(x), end.bisect_right(x)
            if hi - lo + adj.get(x, 0) > 0:
                if best is None or (x > best if highest else x < best):
                    best = x
                break
            i = lo - 1 if highest else hi
        return best


def close_answered(tables: dict, answers: pa.Table, ends: tuple = ("outer_l", "outer_r")) -> dict:
    """Each zone's messages (zone index -> its table: ``seq``, ``op`` and the ``ends`` columns) with their ends
    closed at the nearest of the zones' ``answers`` (:data:`STREAM_ANSWER_SCHEMA`; those of a message no zone emitted
    are dropped), as ``close_open_ends`` closes publish's."""
    if not answers.num_rows:
        return dict(tables)
    places: dict = {}   # (zone, seq, step) -> the message's row in its zone's table
    for i, t in tables.items():
        if t is None:
            continue
        for r, (seq, op) in enumerate(zip(t.column("seq").to_pylist(), t.column("op").to_pylist())):
            places[(i, seq, 0 if op == REMOVE else 1)] = r
    asker, rows, keep = [], [], []
    for n, place in enumerate(zip(answers.column("asker").to_pylist(), answers.column("seq").to_pylist(),
                                  answers.column("step").to_pylist())):
        r = places.get(place)
        if r is not None:
            asker.append(place[0])
            rows.append(r)
            keep.append(n)
    kept = answers.take(pa.array(keep, pa.int64()))
    answered = pa.table({"asker": pa.array(asker, pa.int32()), "row": pa.array(np.asarray(rows, np.int64)),
                         "side": kept.column("side"), "x": kept.column("x")}, schema=ANSWER_SCHEMA)
    return close_open_ends(tables, [answered], ends)
