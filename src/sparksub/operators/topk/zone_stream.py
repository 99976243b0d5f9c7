"""A two-stage RANGE_TOPK group of a running stream with its rows in X zones, each keeping its own halo (issue 16
item 4): the pure part of ``runtime/stream.py``'s ``stage_one_topk_zone``.  Pure (numpy, pyarrow; no pyspark).

Publish's top-k zones (``topk/zones.py``) paint with halos of depth ``kmax + B`` that a job before the batch takes
from the other zones' edges.  A stream has no such job, and needs none: each zone's state store holds **every row**
of the table (the router copies every row to every zone key, ``shared/range_zone_stream.py``), so a zone builds its
own halo from them and keeps it across micro-batches, reading the state store again only when the halo runs short.

* A zone's index holds its own rows plus, on each side with a cut, a halo with a *guaranteed depth* ``G``: every
  object of depth < ``G`` beyond that cut (depth as in ``topk/zones.py``: the better-ranked objects between it and
  the cut).  Objects deeper than ``G`` may be there too (an object the index holds is always at its true place:
  the zone applies every update of every micro-batch); a walk stops at the kmax-th better object, all present.
* Before a micro-batch of ``B`` updates the zone counts, per side, ``R``: the updates that remove or lower an
  object its index holds beyond that cut -- a delete, an X-move away from the cut or out of that side, a Y made
  worse (:func:`lowering`).  Each lowers other objects' depth by one at most; an update of a key the index does not
  hold there moves no object of depth < ``G`` (its old row was ``G`` deep at least, and an object it counted for
  counts every object it did, itself too: deeper still) and is an insert; an insert, a raise or a move toward the cut
  lowers nobody's depth (a refined count, :meth:`HaloSide.no_lower`).  So the
  index holds every object of depth < ``G - R`` at every step, and the micro-batch paints exactly (002 §II-B: first_k
  and min_y read objects of depth < kmax only; ``topk/zones.py``) iff ``G - R >= kmax`` on both sides.  If not, the
  zone **refills** first: every row of its state store, the objects of depth < ``kmax + B + margin`` beyond each cut
  kept (``zones._shallow``), the others dropped (:meth:`TopkStreamZone.ensure`).  After the batch ``G -= R``.
* Memory: every update anywhere enters every zone's index (an insert beyond a cut is applied as the publish zones'
  ``ZoneTopkCore`` applies every step), so the extras pile up.  A side holding more than twice the objects it held
  after its last refill (or prune) is **pruned** without reading the state store: the depth of its objects counted
  within the index (``_shallow`` at depth ``G``) -- never more than their true depth, the index holding true objects
  only -- so every object of true depth < ``G`` stays.
* The seed and a rebuild read every row anyway: they build the halos at depth ``kmax + margin`` (:data:`MARGIN`).
  A larger margin buys no fewer refills: the updates that hit a halo are about ``B`` times its share of the rows, and
  a halo of depth ``d`` holds ``~d (1 + ln(n / d))`` of ``n`` objects (``topk/zones.py``), so a halo wears down at a
  rate about proportional to its depth (``G`` drops ~10% a micro-batch of 2% of the rows) -- a deeper one only costs
  memory.  Pruning often (:data:`PRUNE_FACTOR`) keeps the halo near its guaranteed depth as ``G`` falls, which keeps
  ``R`` small: at 200,000 rows in 2 zones and micro-batches of 4,000, one refill in 22 micro-batches (without Spark).
* A zone paints only the steps at an X it owns and tags each message with its half of the update (an X-move across a
  cut is the old zone's deletion step and the new zone's insertion step, the two steps the whole core takes:
  ``range_zones.with_halves``), so stage 2's ``range_zone_stream.merged_messages`` gives the whole group's messages
  row for row.  A subscription change: each zone seeds the added from its own rows (``zones._ZoneTopkGroup.shard_seed``
  reads the range's part in the zone, not its halo), the shard takes the best k of the zones' lists
  (``TopkGroup.merge_seeds``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from sparksub.operators.shared.range_classes import RangeClassSnapshot, batch_columns
from sparksub.operators.shared.range_zones import with_halves, zone_rows
from sparksub.operators.shared.schemas import DELETE
from sparksub.operators.topk.zones import TopkRowsZone, _shallow
from sparksub.process_memory import release_freed_memory

__all__ = ["MARGIN", "HaloSide", "TopkStreamZone", "lowering"]

#: the depth a halo is built with beyond ``kmax`` (and beyond the micro-batch, at a refill; module docstring)
MARGIN = 256
#: a side is pruned once it holds this many times the objects it held after its last refill or prune (at least
#: :data:`MARGIN`): the extras every insert beyond the cut leaves grow ``R``, a prune costs a sort of the side
PRUNE_FACTOR = 1.25


@dataclass
class HaloSide:
    """One side of a zone's halo: ``toward`` as ``zones._shallow`` names the direction looking from the cut
    (``'west'``: the objects west of ``cut``, ``x < cut``; ``'east'``: ``x >= cut``), the depth ``guarantee`` the
    index holds every object of, and the objects it held after its last refill or prune."""

    toward: str
    cut: float
    guarantee: int = 0
    kept: int = 0

    def beyond(self, x) -> bool:
        return x < self.cut if self.toward == "west" else x >= self.cut

    def no_lower(self, old: tuple, new: tuple | None) -> bool:
        """Whether an object moving from ``old`` to ``new`` ((x, y, key) in the core's sign; None: gone from the
        index) lowers no other object's depth from the cut: it stays beyond it, as near or nearer, ranked as well
        or better (it stays before everything it was before, ``_shallow``'s order)."""
        if new is None or not self.beyond(new[0]):
            return False
        nearer = new[0] >= old[0] if self.toward == "west" else new[0] <= old[0]
        return nearer and (new[1], new[2]) <= (old[1], old[2])


def lowering(side: HaloSide, held, batch: pa.Table, sign: float) -> int:
    """``R`` of a batch for one side (module docstring): its updates that remove or lower an object the index holds
    beyond the cut when they come.  ``held(key)``: the index's (x, y) of a key before the batch (core's sign), or
    None; ``sign``: -1 for a descending core (it holds -y)."""
    cols = batch_columns(batch)
    now: dict = {}   # key -> (x, y) in the index after the batch's updates so far (None: not held)
    count = 0
    for key, x, y, op in zip(cols["key"], cols["x"], cols["y"], cols["op"]):
        old = now[key] if key in now else held(key)
        gone = op == DELETE or x is None or x != x or y is None or y != y
        new = None if gone else (float(x), sign * float(y))
        if old is not None and side.beyond(old[0]) and not side.no_lower((*old, key),
                                                                        None if new is None else (*new, key)):
            count += 1
        now[key] = new
    return count


class TopkStreamZone(TopkRowsZone):
    """Zone ``zone`` of a two-stage top-k stream group, built from every row of the table (``rows``: the stage's
    base or its state store's rows): its own rows and a halo on each side with a cut (module docstring).  Before
    painting a micro-batch, :meth:`ensure` with the table's rows at hand (read only on a refill); :meth:`apply` as
    publish's zone (``mode='none'``: a replay, the whole batch applied, no message); ``refills`` and ``prunes``: how
    many."""

    def __init__(self, rows: RangeClassSnapshot, zone: int, cuts: tuple, margin: int | None = None):
        keys, xs, ys = zone_rows(rows.keys, rows.xs, rows.ys, cuts, zone)
        super().__init__(replace(rows, keys=keys, xs=xs, ys=ys), zone, cuts)
        self.margin = MARGIN if margin is None else int(margin)
        self.refills = self.prunes = 0
        self._counted = None   # (batch, its R per side) from ensure(), for apply()
        self.sides = ([HaloSide("west", self.lo)] if zone > 0 else []) + \
                     ([HaloSide("east", self.hi)] if zone < len(self.cuts) else [])
        self._fill(rows.keys, rows.xs, rows.ys, self.kmax + self.margin)

    @property
    def kmax(self) -> int:
        return max(self.ks, default=1)

    @property
    def _sign(self) -> float:
        return -1.0 if self.group.core.descending else 1.0

    def _outside(self, side: HaloSide) -> list:
        """The index's objects beyond ``side``'s cut, (x, y, key) in the core's sign."""
        return [(x, y, key) for key, (x, y) in self.group.core.tree._pos.items() if side.beyond(x)]

    def _fill(self, keys, xs, ys, depth: int) -> None:
        """Each side's halo anew from every row of the table (``keys``, ``xs``, ``ys``; NaN: NULL): the objects of
        depth < ``depth`` beyond its cut, what the index held there before dropped."""
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64) * self._sign
        keys = np.asarray(keys, dtype=object)
        live = ~np.isnan(xs) & ~np.isnan(ys)
        for side in self.sides:
            at = np.flatnonzero(live & ((xs < side.cut) if side.toward == "west" else (xs >= side.cut)))
            halo = _shallow(zip(xs[at].tolist(), ys[at].tolist(), keys[at].tolist()), side.toward, depth)
            self._replace(side, halo)
            side.guarantee = depth
            side.kept = len(halo)
            del halo
        release_freed_memory()   # the sort of every row beyond the cuts: transient

    def _replace(self, side: HaloSide, objects: list) -> None:
        """The index's objects beyond ``side``'s cut made ``objects`` (true objects at their true places)."""
        tree = self.group.core.tree
        want = {key: (x, y) for x, y, key in objects}
        for x, y, key in self._outside(side):
            if want.get(key) != (x, y):
                tree.remove(key)
        for key, (x, y) in want.items():
            if key not in tree:
                tree.insert(key, x, y)

    def _lowering(self, batch: pa.Table) -> list[int]:
        tree = self.group.core.tree
        return [lowering(side, tree.get, batch, self._sign) for side in self.sides]

    def ensure(self, batch, rows) -> bool:
        """Before painting ``batch``: refill the halos from ``rows()`` -- every row of the table as (keys, xs, ys), the
        state store's before the batch -- unless the index paints it exactly as it is; whether it refilled."""
        if not isinstance(batch, pa.Table):
            return False
        lowered = self._lowering(batch)
        refilled = any(side.guarantee - r < self.kmax for side, r in zip(self.sides, lowered))
        if refilled:
            keys, xs, ys = rows()
            self._fill(keys, xs, ys, self.kmax + batch.num_rows + self.margin)
            self.refills += 1
            lowered = self._lowering(batch)   # (against the refilled halos)
        self._counted = (batch, lowered)   # what apply() lowers the guarantees by: one pass over the batch
        return refilled

    def apply(self, batch, mode: str = "reformulated") -> pa.Table:
        """The group's whole ``batch`` applied to the index (its own rows and its halos), painting the steps at the
        X the zone owns (``mode='none'``: no message, a replay); each side's guarantee lowered by its ``R``, a side
        pruned when it outgrew its last refill (module docstring).  Painting needs :meth:`ensure` first."""
        if not isinstance(batch, pa.Table):   # a log entry of another kind (``PaintedKs``)
            return self.group.apply(batch, mode)
        counted, self._counted = self._counted, None
        lowered = counted[1] if counted is not None and counted[0] is batch else self._lowering(batch)
        if mode != "none" and any(s.guarantee - r < self.kmax for s, r in zip(self.sides, lowered)):
            raise RuntimeError(f"top-k zone {self.zone}: its halos are too shallow for this batch (ensure() first)")
        self.group.deletion_halves.clear()
        out = self.group.apply(batch, mode)
        for side, r in zip(self.sides, lowered):
            side.guarantee -= r
            self._prune(side)
        if mode == "none":
            return out
        return with_halves(out, self.group.deletion_halves)

    def _prune(self, side: HaloSide) -> None:
        outside = self._outside(side)
        if len(outside) <= PRUNE_FACTOR * max(side.kept, self.margin):
            return
        # depth within the index <= true depth: every object of true depth < G stays (none when replays without a
        # refill wore G down to nothing: the next painting refills)
        kept = _shallow(outside, side.toward, side.guarantee) if side.guarantee > 0 else []
        self._replace(side, kept)
        side.kept = len(kept)
        self.prunes += 1

    def halo_sizes(self) -> list[int]:
        """The objects the index holds beyond each side's cut (west first)."""
        return [len(self._outside(side)) for side in self.sides]
