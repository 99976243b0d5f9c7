"""A two-stage RANGE_MIN / RANGE_MAX group of a unicast stream with its rows in X zones: DS-CN (000 §2.3.2) split
across the stream's two stages.  Pure (numpy, pyarrow; no pyspark).

Publish runs DS-CN's two rounds (``zones.py``) as two jobs: round 1 in one task per zone, round 2 where every
zone's :class:`~sparksub.operators.range_min.zones.Round1` is gathered.  A stream has one stateful stage, so:

* **Stage 1** is Z state partitions ``<group>#r<i>`` (``range_zone_stream.zone_keys``), each an X zone at the cut
  points fixed when the stream starts (``range_zones.zone_cuts``).  Its state store holds every row of the table (the
  router copies each row to every zone's key), its index (:class:`MinStreamZone`: a ``zones.Zone``, an A2B-tree and
  its two edge staircases) only the rows it owns.  Each zone takes its part of the micro-batch itself
  (``zones.route_zone``: an X-move across a cut is the old zone's step 0 and the new zone's step 1) and runs round 1
  (``zones.apply_round1``): the messages of the steps settled inside it, each tagged with its version (``2 *
  position + step``) and its index within the zone's output, and its ``Round1`` -- the deferred steps (those whose
  FIND walks ran off an edge with a neighbour beyond), the edge staircases at each version that changed them (~ln(rows)
  entries each) and the old Y of each X-move that left it.
* **Stage 2**, each x1 subscription shard, gets the settled messages whose rectangle can reach it (as the whole
  group's: ``visited_shards``) and **every** zone's ``Round1``, and completes the micro-batch (:func:`shard_messages`):
  round 2 (``zones.apply_round2``) for every deferred step of the group -- a deferred step's rectangle is known only
  after round 2, and the deferred steps are few (those near a cut whose walk reaches it), so each shard runs them all
  and its S-UN keeps what visits it (``ShardOperator.visiting``) -- then the merge (``zones.merge_messages``: by
  version, a step's messages in its source's order; the tentative step of an insert corrected by the X-moves every
  zone reports).  The X-moves' old Y (``step0_old_values`` of the whole group) are the union of the zones'
  ``Round1.old_values``: the old zone alone knew the moved tuple's Y.

So each shard's messages are the whole group's stage 1's that visit it, in order, and the union of the shards' rows
equals the whole two-stage group's, row for row.

How a ``Round1`` travels: as one row of stage 1's output per zone per micro-batch, its record pickled into a string
cell (:func:`round1_text`; Spark's stateful output has no binary column), routed to every shard of the group.  Not a
file per zone (as a ``ShardChange`` is): a row needs no write, no read by path and no cleanup, and a replayed
micro-batch emits it again from the rolled-back state store; it is small (a few hundred numbers).
"""
from __future__ import annotations

import base64
import pickle
import zlib
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from sparksub.operators.range_min.zones import (
    ORDER_COLUMNS,
    Round1,
    Zone,
    apply_round1,
    apply_round2,
    merge_messages,
    route_zone,
    versioned_messages,
)
from sparksub.operators.shared.range_zones import zone_bounds, zone_rows
from sparksub.operators.shared.schemas import MESSAGE_SCHEMA

__all__ = ["MinStreamZone", "min_stream_zone", "round1_text", "round1_of", "shard_messages"]


class MinStreamZone:
    """One X zone of a two-stage RANGE_MIN / RANGE_MAX group in a stream: a ``zones.Zone`` over the rows it owns
    (``core``: the zone's ``RangeMinCore``, what the stream's key checks read) and the group's id, which its messages
    carry."""

    stateless = False

    def __init__(self, group_id: str, zone: Zone, cuts: Sequence[float]):
        self.group_id, self.zone, self.cuts = group_id, zone, tuple(cuts)

    @property
    def core(self):
        return self.zone.core

    def __len__(self) -> int:
        return len(self.zone)

    def apply(self, batch: pa.Table, mode: str = "none") -> pa.Table:
        """A log replay (``mode='none'``): the zone's part of the batch, state only."""
        if mode != "none":
            raise ValueError(f"a stream's X zone replays batches only (mode 'none'), not {mode!r}: round1()")
        apply_round1(self.zone, route_zone(self.zone, batch), reformulate=False)
        return MESSAGE_SCHEMA.empty_table()

    def round1(self, batch: pa.Table) -> tuple[pa.Table, Round1]:
        """Round 1 of the zone's part of the group's whole micro-batch (``batch``: ``key, x, y, op, seq``):
        ``(messages, round1)``, the messages of the steps settled here in ``MESSAGE_SCHEMA`` plus
        ``zones.ORDER_COLUMNS`` (``_v``: the step's version; ``_i``: the index in this zone's output)."""
        msgs, r1 = apply_round1(self.zone, route_zone(self.zone, batch))
        return versioned_messages(self.group_id, self.zone.maximum, msgs), r1


def min_stream_zone(snap, zone: int, cuts: Sequence[float]) -> MinStreamZone:
    """Zone ``zone`` (of ``len(cuts) + 1``, at ``cuts``) of the group whose every row ``snap`` holds (a
    ``group.GroupSnapshot``; its subscriptions are the shards'): the rows it owns, a NULL X or Y in none."""
    keys, xs, ys = zone_rows(snap.keys, snap.xs, snap.ys, cuts, zone)
    lo, hi = zone_bounds(cuts, zone)
    ys = np.asarray(ys, dtype=np.float64)
    ok = ~np.isnan(ys)
    z = Zone(zone, len(cuts) + 1, lo, hi, snap.maximum)
    z.load(keys[ok], xs[ok], ys[ok])
    return MinStreamZone(snap.group_id, z, cuts)


def round1_text(r1: Round1) -> str:
    """A zone's ``Round1`` as a string cell of stage 1's output (module docstring)."""
    return base64.b64encode(zlib.compress(pickle.dumps(r1, protocol=pickle.HIGHEST_PROTOCOL), 1)).decode("ascii")


def round1_of(text: str) -> Round1:
    """:func:`round1_text`'s inverse."""
    return pickle.loads(zlib.decompress(base64.b64decode(text)))


def shard_messages(group_id: str, settled: pa.Table, round1s: Iterable[Round1]) -> tuple[pa.Table, dict]:
    """A shard's messages of one zoned group in one micro-batch, as the whole group's stage 1 emits them: ``settled``
    (the zones' round-1 messages that reached the shard, any order, ``MESSAGE_SCHEMA`` + ``ORDER_COLUMNS``) and every
    zone's ``Round1`` -> ``(messages, old_values)``: round 2 of every deferred step, merged with ``settled`` in batch
    order (``MESSAGE_SCHEMA``), and ``{seq: old Y}`` of the micro-batch's X-moves (S-UN's no-op rule)."""
    round1s = list(round1s)
    if not round1s:     # no zone applied a row: nothing was settled either
        return MESSAGE_SCHEMA.empty_table(), {}
    second = versioned_messages(group_id, round1s[0].maximum, apply_round2(round1s))
    moved = {seq: v for r in round1s for seq, v in r.old_values.items()}
    settled = settled.select([*MESSAGE_SCHEMA.names, *ORDER_COLUMNS]).cast(second.schema)
    return merge_messages([settled, second], moved), moved
