"""A two-stage RANGE_AGG group of a running stream with its rows in X zones (issue 16 item 4): the pure parts of
``runtime/stream.py``'s "a two-stage RANGE_AGG group's rows in X zones".  Pure (numpy, pyarrow; no pyspark).

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
* :func:`merged_change` -- a subscription change: each zone sends each shard its ``ShardChange`` with its rows'
  exact partial states of the added ranges; the shard adds them up (``AggGroup.merge_seeds``: counts and scaled
  sums are additive over disjoint rows) into the change the whole group's stage 1 would have sent.
* :func:`zoned_shard_bases` -- the stream's start: the shards' bases seeded from the zones' rows, one zone's core
  at a time, the partial states added up.

A RANGE_MIN / RANGE_MAX group's zones share the keys, the cuts and :class:`StreamZone`, but their messages are S-CN's
(000 §2.3.1), whose FIND walks cross the cuts: DS-CN's round 1 in the zones, round 2 in the shards
(``operators/range_min/zone_stream.py``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.box.stream_shards import salted_keys
from sparksub.operators.joins.shards import subscription_shard
from sparksub.operators.shared.range_shard_stream import ShardChange
from sparksub.operators.shared.range_shards import shard_bases
from sparksub.operators.shared.range_zones import PART_COLUMN, ZonedRows, merge_zone_messages

__all__ = ["ZONED_STREAM_CLASSES", "ZONE_COLUMN", "PART_MESSAGE_COLUMN", "StreamZone", "merged_change",
           "merged_messages", "zone_key", "zone_keys", "zoned_shard_bases"]

#: the classes whose two-stage stream group keeps its rows in X zones (module docstring; RANGE_MIN / RANGE_MAX run
#: DS-CN's round 1 in the zones and round 2 in the subscription shards, ``range_min/zone_stream.py``; RANGE_TOPK /
#: RANGE_DISTINCT need a second round between the zones, ``range_zones``' docstring)
ZONED_STREAM_CLASSES = ("RANGE_AGG", "RANGE_MIN", "RANGE_MAX")
#: stage 1's columns of a zoned group's message beyond the class's: its zone and its half of the update
ZONE_COLUMN, PART_MESSAGE_COLUMN = "m_zone", "m_part"


@dataclass(frozen=True)
class StreamZone:
    """Zone ``zone`` of the two-stage group ``group_id`` (``n_zones`` zones at ``cuts``, fixed when the stream
    started); ``group_class``: the class's group operator, whose ``merge_seeds`` adds the zones' partial states."""

    group_id: str
    zone: int
    n_zones: int
    cuts: tuple
    group_class: type


def zone_key(group_id: str, zone: int) -> str:
    """Zone ``zone``'s state partition key (unsalted), as publish names the zone's replica."""
    return f"{group_id}#r{zone}"


def zone_keys(group_id: str, n_zones: int, partitions: int) -> list:
    """The zones' keys, each in a state partition of its own among the stream's ``partitions`` where it can (two
    zones in one partition would run one after the other in one task: ``box.stream_shards.salted_keys``)."""
    return salted_keys([zone_key(group_id, i) for i in range(n_zones)], partitions)


def merged_messages(mine: pa.Table, names: Iterable[str]) -> pa.Table:
    """A shard's messages of one zoned group in one micro-batch (stage 1's rows: ``seq``, the ``m_``-prefixed
    message columns ``names``, :data:`ZONE_COLUMN`, :data:`PART_MESSAGE_COLUMN`, ``m_msg_no`` numbered per zone) as
    the whole group emits them (``merge_zone_messages``), in the same columns, without the zone's two."""
    names = [n for n in names if n not in (ZONE_COLUMN, PART_MESSAGE_COLUMN)]
    zones = mine.column(ZONE_COLUMN)
    tables = []
    for zone in sorted(pc.unique(zones).to_pylist()):
        part = mine.filter(pc.equal(zones, zone))
        cols = {n: part.column(n) for n in names}
        cols["msg_no"] = cols.pop("m_msg_no")
        cols[PART_COLUMN] = part.column(PART_MESSAGE_COLUMN)
        tables.append(pa.table(cols))
    merged = merge_zone_messages(tables)
    if merged is None:
        return mine.select(names)
    return merged.rename_columns(["m_msg_no" if n == "msg_no" else n for n in merged.column_names]).select(names)


def merged_change(changes: list, merge_seeds: Callable) -> ShardChange | None:
    """One shard's ``ShardChange`` of a micro-batch from each zone's (in zone order): the same ids and added
    subscriptions in every zone (each zone read the same change), the seeds -- each zone's exact partial states of
    the added ranges -- added up by the class (``merge_seeds``).  None when no zone sent one."""
    changes = [c for c in changes if c is not None]
    if not changes:
        return None
    first = changes[0]
    seeds = [c.seed for c in changes if c.seed is not None]
    return replace(first, seed=merge_seeds(seeds) if seeds else None)


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
        for j, at in mine.items():
            partials[j].append(group.shard_seed(x1[at], x2[at], k[at]))
        kind = (type(group), group.subscriber_option())
        group = None   # the zone's core goes before the next zone's is built
    if kind is None:
        raise ValueError(f"group {group_id!r}: no zone to seed its shards from")
    out = {}
    for j in mine:
        view = ZonedRows(*kind, cuts, lambda a, b, kk, j=j: partials[j], lambda: [], lambda: {})
        out[j] = shard_bases(view, group_id, ids, x1, x2, k, shards, key_type, only={j})[j]
    return out
