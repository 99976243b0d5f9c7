"""A two-stage RANGE_AGG or RANGE_DISTINCT group of a running stream with its rows in X zones (issue 16 item 4): the
pure parts of ``runtime/stream.py``'s "a two-stage group's rows in X zones".  Pure (numpy, pyarrow; no pyspark).

Publish's zones (``shared/range_zones.py``) as state partitions of the stream's one stateful operator, the way a box
group's subscription shards are (``box/stream_shards.py``): stage 1 is Z keys ``<group>#r<i>`` (:func:`zone_keys`,
salted until no two share a state partition), each holding in its index the rows with ``cuts[i-1] <= x < cuts[i]``
(cut points fixed when the stream starts: ``range_zones.zone_cuts`` of the table's X then) and emitting the
aggregate messages at the X it owns -- an aggregate message ``<X, D_COUNT, D_SUM>`` reads that X's tuples alone (000
§4), so no second round.  The router sends every row to every zone key, and each zone takes its part itself
(``range_zones.RowsZone``: ``zone_batch``; its state store keeps every row, as a box shard's, so a delete's key
check is the table's in every zone and the first key alone emits a rejection).

* :func:`merged_messages` -- stage 2's side: a subscription shard gets every zone's messages of the micro-batch
  (each tagged with its zone and its half of the update) and merges them as the whole group emits them
  (``range_zones.merge_zone_messages``: by seq, a move's delete half first, zone order, ``msg_no`` anew).
* RANGE_DISTINCT's open Mar ends (000 §4; publish closes them in a second round, ``distinct/zones.py``): no second
  stateful stage here, but every zone reads the whole micro-batch and its state store holds every row, so it answers
  every question another zone's message can ask (``distinct/zone_stream.py``); its answers travel beside its
  messages as rows of stage 1 (:func:`answer_rows`: ``op`` :data:`ZONE_ANSWER`, the asker in :data:`ZONE_COLUMN`,
  the update's REMOVE or ADD in :data:`PART_MESSAGE_COLUMN`, the X in ``m_outer_l`` or ``m_outer_r`` by the side
  it closes), and :func:`merged_messages` closes the ends with them before it merges.  Rows, not a file per zone
  per micro-batch as a ``ShardChange`` is: an answer is five numbers, a few per update, and it must reach every
  shard as the messages do -- the exchange already does that, where a file would be read by every shard's task from
  every zone.
* :func:`merged_change` -- a subscription change: each zone sends each shard its ``ShardChange`` with its rows'
  exact partial states of the added ranges; the shard adds them up (``AggGroup.merge_seeds``: counts and scaled
  sums are additive over disjoint rows) into the change the whole group's stage 1 would have sent.
* :func:`zoned_shard_bases` -- the stream's start: the shards' bases seeded from the zones' rows, one zone's core
  at a time, the partial states added up.

A RANGE_MIN / RANGE_MAX group's zones share the keys, the cuts and :class:`StreamZone`, but their messages are S-CN's
(000 §2.3.1), whose FIND walks cross the cuts: DS-CN's round 1 in the zones, round 2 in the shards
(``operators/range_min/zone_stream.py``).  A RANGE_TOPK group's zones paint past their cuts too, but only as deep as
kmax (002 §II-B): each keeps a halo of the objects beyond its cuts, built from its state store and refilled when a
micro-batch could wear it below kmax (``operators/topk/zone_stream.py``), and its messages merge as an aggregate's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.box.stream_shards import salted_keys
from sparksub.operators.distinct.zone_stream import STREAM_ANSWER_SCHEMA, close_answered
from sparksub.operators.distinct.zones import DistinctZoneSnapshot
from sparksub.operators.joins.shards import subscription_shard
from sparksub.operators.range_min.group import GroupSnapshot
from sparksub.operators.range_min.zone_stream import min_stream_zone
from sparksub.operators.shared.range_shard_stream import ShardChange
from sparksub.operators.shared.range_shards import shard_bases
from sparksub.operators.shared.range_zones import (
    HALO_CLASSES,
    PART_COLUMN,
    SECOND_ROUND_CLASSES,
    RowsZoneSnapshot,
    ZonedRows,
    merge_zone_messages,
    zone_rows,
)
from sparksub.operators.topk.zone_stream import TopkStreamZone

__all__ = ["ZONED_STREAM_CLASSES", "ZONE_ANSWER", "ZONE_COLUMN", "PART_MESSAGE_COLUMN", "StreamZone", "answer_rows",
           "merged_change", "merged_messages", "zone_key", "zone_keys", "zone_operator", "zoned_shard_bases"]

#: the classes whose two-stage stream group keeps its rows in X zones (module docstring; RANGE_MIN / RANGE_MAX run
#: DS-CN's round 1 in the zones and round 2 in the subscription shards, ``range_min/zone_stream.py``; RANGE_DISTINCT's
#: zones answer each other's open Mar ends beside their messages, ``distinct/zone_stream.py``; RANGE_TOPK's zones
#: build their halos from their state stores, which hold every row, and keep them, ``topk/zone_stream.py``)
ZONED_STREAM_CLASSES = ("RANGE_AGG", "RANGE_DISTINCT", "RANGE_MIN", "RANGE_MAX", "RANGE_TOPK")
#: stage 1's columns of a zoned group's message beyond the class's: its zone and its half of the update
ZONE_COLUMN, PART_MESSAGE_COLUMN = "m_zone", "m_part"
#: stage 1's ``op`` of a DISTINCT zone's answer to another zone's open Mar end (:func:`answer_rows`)
ZONE_ANSWER = "zone_answer"
_ENDS = ("m_outer_l", "m_outer_r")


@dataclass(frozen=True)
class StreamZone:
    """Zone ``zone`` of the two-stage group ``group_id`` (``n_zones`` zones at ``cuts``, fixed when the stream
    started); ``group_class``: the class's group operator, whose ``merge_seeds`` adds the zones' partial states."""

    group_id: str
    zone: int
    n_zones: int
    cuts: tuple
    group_class: type
    option: object = None   # the group's subscriber option (top-k: descending), which ``merge_seeds`` ranks by

    @property
    def keeps_halos(self) -> bool:
        """A top-k zone: its index holds, beside its own rows, halos of the rows beyond its cuts
        (``topk/zone_stream.py``), so a rebuild reads every row (a RANGE_MIN group class has no ``kind``)."""
        return getattr(self.group_class, "kind", None) in HALO_CLASSES


def zone_key(group_id: str, zone: int) -> str:
    """Zone ``zone``'s state partition key (unsalted), as publish names the zone's replica."""
    return f"{group_id}#r{zone}"


def zone_keys(group_id: str, n_zones: int, partitions: int) -> list:
    """The zones' keys, each in a state partition of its own among the stream's ``partitions`` where it can (two
    zones in one partition would run one after the other in one task: ``box.stream_shards.salted_keys``)."""
    return salted_keys([zone_key(group_id, i) for i in range(n_zones)], partitions)


def zone_operator(snap, zone: StreamZone):
    """Zone ``zone``'s operator from a snapshot of every row of the table: the class's rows operator over the rows
    it owns (``range_zones.zone_rows`` at the stream's cuts), a DISTINCT zone recording its steps per seq
    (``distinct/zones.DistinctRowsZone``: what its answers read), a RANGE_MIN / RANGE_MAX zone DS-CN's
    (``range_min/zone_stream.MinStreamZone``: round 1 here, round 2 in the shards)."""
    if isinstance(snap, GroupSnapshot):
        return min_stream_zone(snap, zone.zone, zone.cuts)
    if snap.kind in HALO_CLASSES:   # top-k: its own rows and a halo of every row beyond each cut (topk/zone_stream.py)
        return TopkStreamZone(snap, zone.zone, zone.cuts)
    keys, xs, ys = zone_rows(snap.keys, snap.xs, snap.ys, zone.cuts, zone.zone)
    base = DistinctZoneSnapshot if snap.kind in SECOND_ROUND_CLASSES else RowsZoneSnapshot
    return base(replace(snap, keys=keys, xs=xs, ys=ys), zone.zone, zone.cuts).build()


def answer_rows(group_id: str, answers: pa.Table) -> pa.Table:
    """A DISTINCT zone's answers (``distinct/zone_stream.STREAM_ANSWER_SCHEMA``) as rows of stage 1 (module
    docstring): ``op`` :data:`ZONE_ANSWER`, ``m_msg_no`` -1 (before any message, as a change's row)."""
    n = answers.num_rows
    left = pc.equal(answers.column("side"), 0)
    x = answers.column("x")
    none = pa.scalar(None, pa.float64())
    return pa.table({"group_id": pa.array([group_id] * n, pa.string()), "seq": answers.column("seq"),
                     "op": pa.array([ZONE_ANSWER] * n, pa.string()), _ENDS[0]: pc.if_else(left, x, none),
                     _ENDS[1]: pc.if_else(left, none, x), "m_msg_no": pa.array(np.full(n, -1, np.int64)),
                     ZONE_COLUMN: answers.column("asker"), PART_MESSAGE_COLUMN: answers.column("step")})


def _answers_of(rows: pa.Table) -> pa.Table:
    # stage 1's answer rows back as ``STREAM_ANSWER_SCHEMA`` (:func:`answer_rows` undone)
    left = pc.is_valid(rows.column(_ENDS[0]))
    return pa.table({"asker": rows.column(ZONE_COLUMN), "seq": rows.column("seq"),
                     "step": rows.column(PART_MESSAGE_COLUMN), "side": pc.if_else(left, 0, 1).cast(pa.int8()),
                     "x": pc.coalesce(rows.column(_ENDS[0]), rows.column(_ENDS[1]))}, schema=STREAM_ANSWER_SCHEMA)


def merged_messages(mine: pa.Table, names: Iterable[str]) -> pa.Table:
    """A shard's messages of one zoned group in one micro-batch (stage 1's rows: ``seq``, the ``m_``-prefixed
    message columns ``names``, :data:`ZONE_COLUMN`, :data:`PART_MESSAGE_COLUMN`, ``m_msg_no`` numbered per zone) as
    the whole group emits them (``merge_zone_messages``), in the same columns, without the zone's two; a DISTINCT
    zone's open ends closed first with the zones' answers among the rows (``distinct/zone_stream.close_answered``)."""
    names = [n for n in names if n not in (ZONE_COLUMN, PART_MESSAGE_COLUMN)]
    answer = pc.fill_null(pc.equal(mine.column("op"), ZONE_ANSWER), False)
    answers = mine.filter(answer)
    mine = mine.filter(pc.invert(answer))
    zones = mine.column(ZONE_COLUMN)
    tables = {}
    for zone in sorted(pc.unique(zones).to_pylist()):
        part = mine.filter(pc.equal(zones, zone))
        cols = {n: part.column(n) for n in names}
        cols["msg_no"] = cols.pop("m_msg_no")
        cols[PART_COLUMN] = part.column(PART_MESSAGE_COLUMN)
        tables[zone] = pa.table(cols)
    if answers.num_rows:
        tables = close_answered(tables, _answers_of(answers), _ENDS)
    merged = merge_zone_messages([tables[z] for z in sorted(tables)])
    if merged is None:
        return mine.select(names)
    return merged.rename_columns(["m_msg_no" if n == "msg_no" else n for n in merged.column_names]).select(names)


def merged_change(changes: list, merge_seeds: Callable, option=None) -> ShardChange | None:
    """One shard's ``ShardChange`` of a micro-batch from each zone's (in zone order): the same ids and added
    subscriptions in every zone (each zone read the same change), the seeds -- each zone's exact partial states of
    the added ranges -- added up by the class (``merge_seeds``; top-k: the best k of the zones' lists, ranked by
    ``option``).  None when no zone sent one."""
    changes = [c for c in changes if c is not None]
    if not changes:
        return None
    first = changes[0]
    seeds = [c.seed for c in changes if c.seed is not None]
    return replace(first, seed=merge_seeds(seeds, option, first.added_k) if seeds else None)


def zoned_shard_bases(zone_groups: Iterable, group_id: str, ids, x1, x2, k, shards: int, key_type: Callable,
                      cuts: tuple) -> dict:
    """``{shard: RangeShardBase}`` at the stream's start, each subscription's seed its range's exact state over
    every zone's rows: ``zone_groups`` yields each zone's group operator (its rows, no subscription) in turn -- one
    core at a time, so the task holds one zone's rows at most -- whose partial states of each shard's ranges are
    added up (``merge_seeds``), as ``shard_bases`` seeds them from one core."""
    ids = np.asarray(ids, dtype=object)
    x1 = np.asarray(x1, dtype=np.float64)
    x2 = np.asarray(x2, dtype=np.float64)
    k = np.asarray(k, dtype=np.int64)
    which = subscription_shard(ids.tolist(), shards) if len(ids) else np.zeros(0, dtype=np.int64)
    mine = {j: np.flatnonzero(which == j) for j in range(max(1, shards))}
    partials: dict = {j: [] for j in mine}
    kind = None
    zones = iter(zone_groups)
    while (group := next(zones, None)) is not None:
        kind = (type(group), group.subscriber_option())
        if group.shard_stateless:   # DISTINCT: a shard's subscribers start from nothing (000 §4), no zone to read
            break
        for j, at in mine.items():
            partials[j].append(group.shard_seed(x1[at], x2[at], k[at]))
        group = None   # the zone's core goes before the next zone's is built
    if kind is None:
        raise ValueError(f"group {group_id!r}: no zone to seed its shards from")
    out = {}
    for j in mine:
        view = ZonedRows(*kind, cuts, lambda a, b, kk, j=j: partials[j], lambda: [], lambda: {})
        out[j] = shard_bases(view, group_id, ids, x1, x2, k, shards, key_type, only={j})[j]
    return out
