"""RANGE_TOPK's rows in X zones, each painting with a halo of its neighbours (issue 16 item 4).  Pure (numpy,
sortedcontainers; no pyspark).

A sharded top-k group (``shared/range_shards.py``) runs its rows as the group's operator holding no subscription;
per update it paints Paint-Dense's messages (002 §III-A), which the subscription shards apply.  Split along X
as DS-CN places tuples on the diagonal (000 §2.3.2), zone ``i`` owns the rows with ``cuts[i-1] <= x < cuts[i]``
and paints the steps at the X it owns.  Unlike an aggregate's (``shared/range_zones.py``), a top-k step reads
past its zone: its first_k lists walk to the k-th better object on each side and a rank-lowering step sweeps the
objects it exposes (002 §II-B, §III-A), either of which may lie in another zone.  What a zone needs of the others
is bounded, though -- its **halo**:

* Call an object's *depth* from a cut the number of better-ranked objects between it and the cut (objects at its
  own X that rank before it included: ``first_k`` meets them first).  Every object a step at X inside the zone
  reads across the cut -- an entry of its first_k lists (fewer than k objects ranked below the step's value lie
  between it and X), or an object its sweep exposes (002 Eq. (1): it enters the top k of a range holding X, so
  fewer than k objects between it and X rank before it) -- has depth < kmax from that cut.  And the objects of
  depth < d are closed under "ranks better and lies nearer the cut", so an index holding the zone's own rows
  plus every object of depth < kmax beyond each cut answers first_k and min_y exactly as the whole index does:
  an object missing from it has at least kmax better ones nearer, all present, which stop the walk first.
* A batch changes depths as it goes: each update removes or lowers at most one object, which lowers other
  objects' depth by at most one; an inserted or raised object every zone sees itself (every zone reads the whole
  batch, as RANGE_MIN's zones do).  So a halo of depth ``kmax + B`` taken before a batch of ``B`` updates still
  holds every object of depth < kmax at each step of the batch, with each zone applying every update to its copy
  (an update of a key it does not hold is an insert: the old row lay deeper, where removing it moves no object
  of depth < kmax).

Hence, per batch: each zone gives the objects of depth < ``kmax + B`` from its two edges (:func:`edge_objects`);
zone ``i``'s halo west of it composes the edges of the zones west of it, nearest last (:func:`halo`: the objects
of depth < d from a cut are those of depth < d among the zone's own edge objects and the halo of the cut before,
by the same closure); the zone loads its halo, applies the whole batch painting only the steps at an X it owns
(:class:`ZoneTopkCore`), and drops what lies outside it (:class:`TopkRowsZone`).  Its messages are the whole
group's for those steps, in the same order; an X-move across a cut is the old zone's deletion step and the new
zone's insertion step -- the two steps the whole core takes -- so the zones' messages merged by
``range_zones.merge_zone_messages`` (seq, a move's deletion half first, zone order) are the whole group's, row
for row.  A log replay needs no halo: the zone's own rows follow from its part of the batch alone
(``range_zones.zone_batch``).  Only the per-update form (Paint-Dense) splits; Paint-Batch's messages (002 §IV-A)
cover a whole batch and are not the union of per-zone parts.

A halo's size is about ``d (1 + ln(n / d))`` objects a side for rows in random order (the objects of depth < d
from a cut are those among the best d of the objects between them and the cut).
"""
from __future__ import annotations

import glob
import os
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from sortedcontainers import SortedList

from sparksub.operators.shared.range_classes import RangeClassSnapshot
from sparksub.operators.shared.range_shards import PER_UPDATE_VARIANT
from sparksub.operators.shared.range_zones import RowsZone, with_halves, zone_batch
from sparksub.operators.shared.variants import variant_of
from sparksub.operators.topk.core import Step, TopkCore
from sparksub.operators.topk.group import TopkGroup
from sparksub.process_memory import release_freed_memory

__all__ = ["TopkRowsZone", "TopkRowsZoneSnapshot", "ZoneTopkCore", "edge_objects", "halo", "halo_depth"]

#: an object of the index, in the core's sign: (x, y, key)
Item = tuple


def halo_depth(ks: Iterable[int], batch_rows: int) -> int:
    """The depth a halo needs for a batch of ``batch_rows`` updates (module docstring: kmax + B)."""
    return max(ks, default=1) + int(batch_rows)


def _shallow(items: Iterable[Item], toward: str, depth: int) -> list[Item]:
    """The items of depth < ``depth`` from a cut east of them all (``toward='west'``: looking west from it) or
    west of them all (``'east'``), nearest first.  At one X the better-ranked items are nearer (first_k meets
    them first, 002 §II-B)."""
    east = toward == "east"
    order = sorted(items, key=lambda it: ((it[0] if east else -it[0]), it[1], it[2]))
    best: SortedList = SortedList()        # the ranks (y, key) of the best ``depth`` items met so far
    out = []
    for it in order:
        rank = (it[1], it[2])
        if len(best) < depth or rank < best[-1]:
            out.append(it)
            best.add(rank)
            if len(best) > depth:
                best.pop()
    return out


def edge_objects(core: TopkCore, lo: float, hi: float, depth: int) -> tuple[list[Item], list[Item]]:
    """A zone's objects of depth < ``depth`` from its west edge ``lo`` (what the zones west of it need) and from
    its east edge ``hi`` (what the zones east of it need), as (x, y, key) in the core's sign."""
    items = [(x, y, key) for key, (x, y) in core.tree._pos.items() if lo <= x < hi]
    return _shallow(items, "east", depth), _shallow(items, "west", depth)


def halo(edges: Sequence[list[Item]], toward: str, depth: int) -> list[Item]:
    """The objects of depth < ``depth`` from a zone's cut, out of the edge objects of the zones beyond it, the
    farthest zone first: ``toward='west'`` (the zone's west halo) takes the east-edge objects of the zones west of
    it, westmost first; ``'east'`` the west-edge objects of the zones east of it, eastmost first.  Those of depth
    < d from a nearer cut are those of depth < d among the nearer zone's edge objects and the farther cut's halo
    (module docstring), so each zone folds in one after the other."""
    out: list[Item] = []
    for objs in edges:
        out = _shallow(out + list(objs), toward, depth)
    return out


class ZoneTopkCore(TopkCore):
    """A :class:`TopkCore` that paints only the steps at an X in ``[lo, hi)`` and applies the others to its index
    silently (their messages are another zone's), marking them ``elsewhere``."""

    ELSEWHERE = "elsewhere"

    @classmethod
    def of(cls, core: TopkCore, lo: float, hi: float) -> ZoneTopkCore:
        zone = cls.__new__(cls)
        zone.__dict__.update(core.__dict__)
        zone.lo, zone.hi = lo, hi
        return zone

    def _step(self, key, x: float, yo, yn) -> Step:
        if self.lo <= x < self.hi:
            return super()._step(key, x, yo, yn)
        self._apply(key, x, yo, yn)
        return Step(self.ELSEWHERE, ())

    def load_halo(self, items: Iterable[Item]) -> None:
        for x, y, key in items:
            self.tree.insert(key, x, y)

    def drop_outside(self) -> None:
        """Remove every object outside the zone (the halo, and what the batch moved out of it)."""
        for key in [k for k, (x, _) in self.tree._pos.items() if not self.lo <= x < self.hi]:
            self.tree.remove(key)


class _ZoneTopkGroup(TopkGroup):
    """The top-k group operator over one zone's rows, recording the seqs whose only painted step was an X-move's
    deletion step (its messages come before the new zone's, ``range_zones.merge_zone_messages``)."""

    def __init__(self, snap: RangeClassSnapshot):
        super().__init__(snap)
        self.deletion_halves: set = set()   # of the batch being painted (``TopkRowsZone.apply``)

    def _notifications(self, outcome, seq: int, mode: str) -> list[dict]:
        steps = outcome.steps
        if len(steps) == 2 and steps[1].kind == ZoneTopkCore.ELSEWHERE and steps[0].kind != ZoneTopkCore.ELSEWHERE:
            self.deletion_halves.add(int(seq))
        return super()._notifications(outcome, seq, mode)

    def shard_seed(self, x1, x2, k):
        # the zone's own rows' lists: a stream's zone keeps its halos in its index between micro-batches
        # (``topk/zone_stream.py``), whose objects are other zones' to report (``TopkGroup.merge_seeds``)
        lo, hi = self.core.lo, np.nextafter(self.core.hi, -np.inf)
        return super().shard_seed(np.maximum(np.asarray(x1, np.float64), lo),
                                  np.minimum(np.asarray(x2, np.float64), hi), k)


@dataclass
class TopkRowsZoneSnapshot:
    """One top-k zone's replica base: the rows snapshot of the rows it owns (no subscription; ``extra``: the k
    values painted, Paint-Dense), its index and the group's cut points."""

    rows: RangeClassSnapshot
    zone: int
    cuts: tuple

    def build(self) -> TopkRowsZone:
        return TopkRowsZone(self.rows, self.zone, self.cuts)


class TopkRowsZone(RowsZone):
    """One X zone of a sharded top-k group's rows (module docstring): ``edges(depth)`` before a batch,
    ``apply(batch, 'reformulated', halo_west, halo_east)`` to paint it, ``apply(batch, 'none')`` to replay it;
    read (``shard_seed``, ``stats``, EXPLAIN) as any zone."""

    def __init__(self, rows: RangeClassSnapshot, zone: int, cuts: tuple):
        group = _ZoneTopkGroup(rows)
        group.load(rows.keys, rows.xs, rows.ys)     # (as ``RangeClassSnapshot.build``)
        super().__init__(group, zone, cuts)
        group.core = ZoneTopkCore.of(group.core, self.lo, self.hi)
        self._halos: tuple | None = None

    @property
    def ks(self) -> list[int]:
        return self.group.core._ks()

    def edges(self, depth: int) -> tuple[list[Item], list[Item]]:
        """(west-edge objects, east-edge objects) of depth < ``depth`` (:func:`edge_objects`)."""
        return edge_objects(self.group.core, self.lo, self.hi, depth)

    def write_edges(self, folder: str, depth: int) -> int:
        """Write :meth:`edges` to the publish's ``folder`` (``e-r<zone>.pickle``) for the other zones' halos; the
        objects written."""
        west, east = self.edges(depth)
        with open(os.path.join(folder, f"e-r{self.zone}.pickle"), "wb") as f:
            pickle.dump((depth, west, east), f, protocol=pickle.HIGHEST_PROTOCOL)
        n = len(west) + len(east)
        del west, east
        release_freed_memory()   # the sort of every object the zone holds: transient, as the painting's
        return n

    def prepare(self, folder: str) -> None:
        """Before the publish's batch: the halos folded from the other zones' edge files in ``folder``
        (:meth:`write_edges`; none there: no halo, as for a group of one zone)."""
        edges = {}
        for path in glob.glob(os.path.join(folder, "e-r*.pickle")):
            with open(path, "rb") as f:
                edges[int(os.path.basename(path)[3:-7])] = pickle.load(f)
        if not edges:
            self._halos = None
            return
        depth = edges[self.zone][0]
        n = len(self.cuts) + 1
        self._halos = (halo([edges[j][2] for j in range(self.zone)], "west", depth),
                       halo([edges[j][1] for j in range(n - 1, self.zone, -1)], "east", depth))

    def apply(self, batch, mode: str = "reformulated", halo_west: Sequence[Item] | None = None,
              halo_east: Sequence[Item] | None = None) -> pa.Table:
        """Paint the group's whole ``batch`` (reformulated, per update) with the halos of depth
        ``halo_depth(ks, batch rows)`` -- given, or those :meth:`prepare` folded --, the messages of the steps at an
        X the zone owns tagged with their half (``PART_COLUMN``); ``mode='none'``: apply the zone's part alone, no
        message (a log replay)."""
        if not isinstance(batch, pa.Table):   # a log entry of another kind (``PaintedKs``)
            return self.group.apply(batch, mode)
        if mode == "none":
            part, _ = zone_batch(batch, self.lo, self.hi, self.group.core.__contains__)
            return self.group.apply(part, "none")
        if variant_of(mode, "topk") not in (None, PER_UPDATE_VARIANT):
            raise ValueError(f"a top-k zone paints per update ({PER_UPDATE_VARIANT}), not {variant_of(mode, 'topk')}: "
                             f"a batch-wide variant's messages are no union of the zones' (002 §IV-A)")
        if halo_west is None and halo_east is None:
            halo_west, halo_east = self._halos or ((), ())
            self._halos = None
        core = self.group.core
        self.group.deletion_halves.clear()
        core.load_halo(halo_west or ())
        core.load_halo(halo_east or ())
        try:
            out = self.group.apply(batch, mode)
        finally:
            core.drop_outside()
            # the halos' objects and the painting's transients are freed, but glibc keeps their pages in the worker
            # (200,000 rows in 2 zones, a batch of 2,000: 39 MB above the zone's core, 10 after)
            release_freed_memory()
        return with_halves(out, self.group.deletion_halves)
