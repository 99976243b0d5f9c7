"""Stabbing partitions, their dynamic maintenance, and α-hotspot tracking: the foundation of the SSI.

Pure core (numpy + sortedcontainers, no pyspark) under the continuous-join classes (issue 5, items 2 and 5):
BJ-SSI / SJ-SSI index the queries of each group of a stabbing partition, the router reads the stabbing number
of the hot part, and :mod:`~sparksub.operators.shared.ssi_histograms` builds per-group histograms.

Source
------
003 = the dissertation, chapter 4 ("Scalable Continuous Join Query Processing", joint work with P. K. Agarwal,
H. Yu, J. Yang; [AXYY06]).  §4.2.1 Definition 5 and Lemma 10, §4.2.2 Definition 6, invariants (I1)-(I3),
Lemma 11 and Theorem 12, §4.2.3 Lemma 12, its refinements, and Theorem 13.

Definitions (003 §4.2)
----------------------
* **Stabbing partition** (Definition 5): a partition of a set I of (closed) intervals into disjoint groups
  I_1..I_τ such that in each group a common point p_j stabs every interval (the group's common intersection
  is nonempty).  τ is the partition's *stabbing number* (size), p_j the *stabbing point* of I_j, and
  P = {p_1..p_τ} a *stabbing set* of I.  τ(I) denotes the smallest possible stabbing number.
* **Canonical stabbing partition** (§4.2.1, Lemma 10): scan the intervals by increasing left end keeping the
  common intersection of the current list; an interval that misses it closes the group.  Its size is τ(I)
  and it costs O(n log n).  :func:`canonical_partition` computes it; the stabbing point of each group is the
  right end of its common intersection (= the smallest right end in the group; the classic "sort by right
  end, stab at the first right end" greedy yields exactly the same groups).
* **α-hotspot** (Definition 6): for a stabbing partition 𝓘 of I and a fixed α > 0, a group I_j with
  |I_j| ≥ α·|I|.  An interval in an α-hotspot is a *hotspot interval*, otherwise a *scattered interval*.
  There are at most 1/α α-hotspots.  (The OCR lost the relation; "contains at least an α fraction of all
  continuous queries" right after it fixes it as ≥.)

Dynamic stabbing partition (:class:`DynamicStabbingPartition`; 003 §4.2.3)
--------------------------------------------------------------------------
The lazy strategy of Lemma 12: start from the canonical partition (size τ_0 = τ(I_0)); an insertion adds a
singleton group stabbed by a point of the new interval; a deletion removes the interval from its group (and
the group if it empties); after ε·τ_0/(ε+2) insertions and deletions the canonical partition is rebuilt
(Lemma 10).  Lemma 12: the size stays ≤ (1+ε)·τ(I), because each operation raises the size by ≤ 1 and lowers
τ(I) by ≤ 1.  The refinements after Lemma 12 are implemented too (defaults: ``join="intersection"``,
``trigger="witness"``):

* *join* (``join="intersection"``): a new interval joins an existing group when the group's stabbing point
  stabs it, or when the group's common intersection overlaps it (the stabbing point then moves into the
  shrunken intersection; this is the "more careful implementation" that keeps each group's common
  intersection).  ``join="point"`` only uses the stabbing points; ``join="none"`` is Lemma 12 as stated.
* *relaxed trigger* (``trigger="relaxed"``, as in the paper): let m be the number of intervals of I_0 deleted since
  the last reconstruction; rebuild only when |P| > (1+ε)·(τ_0 − m).  τ(I) ≥ τ(I ∩ I_0) ≥ τ_0 − m, so the bound holds;
  ``trigger="count"`` is the ε·τ_0/(ε+2) operation count of Lemma 12.
* *witness trigger* (``trigger="witness"``, the default; ours, a sharper form of the relaxed trigger): in the
  canonical partition the interval of each group whose right end is the stabbing point (the smallest right
  end) is disjoint from the next group's intervals (they all start right of that point), so these τ_0
  *witnesses* are pairwise disjoint, and τ(I) ≥ the number of witnesses still in I (disjoint intervals need
  distinct points).  So m need only count deleted witnesses.  With the paper's m every deletion counts, and
  deleting half of 100,000 clustered intervals (τ ≈ 300, ε = 0.5) rebuilt the partition 428 times (2 min);
  a deletion hits a witness with probability ≈ τ/n.

All triggers are evaluated after every operation, so the bound (1+ε)·τ(I) holds at every state a caller can
observe.  Whole groups can be removed or added as one operation (:meth:`DynamicStabbingPartition.remove_group`
/ :meth:`~DynamicStabbingPartition.insert_group`, used by promotion / demotion): a set stabbed by one point
changes |P| by one and τ(I) by at most one, which is all the proof of Lemma 12 needs.  Between two
reconstructions every operation touches at most one group (Theorem 13).  Left out: the refined O(ε⁻¹ log n)
reconstruction of [AXYY06] (Theorem 13's cost bound); a reconstruction here is a full O(n log n) rebuild.

Hotspot tracking (:class:`HotspotTracker`; 003 §4.2.2, Theorem 12)
------------------------------------------------------------------
The partition 𝓘 of I is kept as two sets of groups, 𝓘_H (hotspot groups, H = their intervals) and 𝓘_S
(groups of the scattered intervals S, a :class:`DynamicStabbingPartition` of S, i.e. Lemma 11), under the
three invariants of §4.2.2:

* **(I1)** 𝓘_H holds every α-hotspot of 𝓘 and possibly some (α/2)-hotspots, nothing more; so |𝓘_H| ≤ 2/α.
  Operationally: every group of 𝓘_H has ≥ (α/2)·|I| intervals, every group of 𝓘_S has < α·|I|.
* **(I2)** |𝓘| ≤ (1+ε)·τ(I) + 2/α.
* **(I3)** the amortised number of intervals moving into or out of S per update is O(1), in fact at most 5.

Insertion: join a group of 𝓘_H whose common intersection stays nonempty (brute force over ≤ 2/α groups), else
insert into S (Lemma 11); *promote* every group of 𝓘_S that reached α·|I| (its intervals leave S), *demote*
every group of 𝓘_H that fell below (α/2)·|I| (its intervals enter S), promote again.  Deletion: symmetric.
(I3) is the credit argument of Theorem 12's proof: an insertion deposits 2α credits on each group of 𝓘_H
(≤ 2/α of them) and one on the new interval if it enters S; a deletion from a group of 𝓘_H deposits 2 on that
group; every move is paid by one credit.  So total moves ≤ 5·insertions + 2·deletions at all times, which
:meth:`HotspotTracker.check_invariants` checks against the exact deposits.  (The OCR reads "2 credits" per
hot group on an insertion; the sum "2·(2/α) + 1 = 5" and the proof's "2αk" make it 2α.)

Group ids
---------
Group ids are ints from one counter per partition and never reused.  A group keeps its id when it is promoted
or demoted, and a reconstruction keeps the id of every group whose member set it leaves unchanged, so the
structures a consumer (BJ-SSI / SJ-SSI) keeps per group only need rebuilding for the ids that changed
(:attr:`DynamicStabbingPartition.last_rebuild`).

Intervals are closed ``[lo, hi]`` with ``lo <= hi``; ends may be infinite (open query ranges) but not NaN, and
``[+inf, +inf]`` / ``[-inf, -inf]`` are rejected (they contain no real point).  Bad intervals raise
:class:`~sparksub.errors.InvalidSubscription`, a duplicate id :class:`~sparksub.errors.DuplicateSubscription`,
an unknown id :class:`~sparksub.errors.UnknownSubscription`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Hashable, NamedTuple

import numpy as np
from sortedcontainers import SortedList

from sparksub.errors import DuplicateSubscription, InvalidSubscription, UnknownSubscription

__all__ = ["StabbingGroup", "Change", "HotspotUpdate", "canonical_groups", "canonical_partition",
           "stabbing_number", "DynamicStabbingPartition", "HotspotTracker"]

_INF = math.inf
_isfinite = math.isfinite


class StabbingGroup(NamedTuple):
    """One group of a stabbing partition: id, stabbing point, common intersection [lo, hi], member ids.

    ``lo <= point <= hi`` always (Definition 5); members are in insertion order."""

    gid: int
    point: float
    lo: float
    hi: float
    members: tuple


class Change(NamedTuple):
    """What one :class:`DynamicStabbingPartition` operation did.

    ``gid``: the group the interval is in after an insertion (after any reconstruction; for a group insertion, the
    group of its first member), the group it left on a deletion; ``point_moved``: that group's stabbing point changed
    (join refinement); ``rebuilt``: a reconstruction ran after the operation (then see
    :attr:`DynamicStabbingPartition.last_rebuild`)."""

    gid: int
    point_moved: bool
    rebuilt: bool


class HotspotUpdate(NamedTuple):
    """What one :class:`HotspotTracker` operation did: the interval's group (after an insertion, the one it
    left on a deletion), whether that group is hot now, and the ids promoted to / demoted from 𝓘_H."""

    gid: int
    hot: bool
    promoted: tuple
    demoted: tuple


# --------------------------------------------------------------------------------------------------------------
# Intervals and the canonical partition (003 §4.2.1, Lemma 10)
# --------------------------------------------------------------------------------------------------------------
def _interval(lo, hi) -> tuple[float, float]:
    lo = float(lo)
    hi = float(hi)
    if lo != lo or hi != hi:
        raise InvalidSubscription(f"NaN interval end: [{lo}, {hi}]")
    if lo > hi:
        raise InvalidSubscription(f"inverted interval [{lo}, {hi}]")
    if lo == _INF or hi == -_INF:
        raise InvalidSubscription(f"interval [{lo}, {hi}] contains no real point")
    return lo, hi


def _pick_point(lo: float, hi: float) -> float:
    """A finite point of the nonempty [lo, hi]: its right end when finite (the greedy point of Lemma 10)."""
    if _isfinite(hi):
        return hi
    if _isfinite(lo):
        return lo
    return 0.0


def _as_arrays(intervals) -> tuple[list, np.ndarray, np.ndarray]:
    """(ids, lo, hi) of a mapping id -> (lo, hi) or a sequence of (lo, hi) (ids = positions); validated."""
    if isinstance(intervals, Mapping):
        ids = list(intervals)
        pairs = [intervals[k] for k in ids]
    else:
        pairs = list(intervals)
        ids = list(range(len(pairs)))
    if not pairs:
        return ids, np.empty(0), np.empty(0)
    arr = np.asarray(pairs, dtype=np.float64).reshape(len(pairs), 2)
    lo, hi = arr[:, 0].copy(), arr[:, 1].copy()
    bad = np.isnan(lo) | np.isnan(hi) | (lo > hi) | (lo == _INF) | (hi == -_INF)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _interval(lo[i], hi[i])  # raises with the reason
    return ids, lo, hi


def canonical_groups(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Canonical stabbing partition of validated interval arrays (003 §4.2.1, Lemma 10).

    Returns ``(order, bounds, points)``: group j is ``order[bounds[j]:bounds[j+1]]`` (indices into lo/hi), its
    stabbing point ``points[j]``; groups are in increasing order of their points, ``len(points) = τ(I)``.

    The paper scans by left end and closes a group at the first interval that misses the running common
    intersection.  Sorted by left end, the intervals after position i all have left end >= lo[i], so the
    group opened at i extends exactly over the intervals whose left end is <= the smallest right end of
    everything from i on (the suffix minimum); each group is then one binary search: O(n log n) in all.
    """
    n = len(lo)
    if n == 0:
        e = np.empty(0, dtype=np.int64)
        return e, np.zeros(1, dtype=np.int64), np.empty(0)
    order = np.lexsort((hi, lo))
    L = lo[order]
    sufmin = np.minimum.accumulate(hi[order][::-1])[::-1]
    bounds = [0]
    points = []
    i = 0
    while i < n:
        p = float(sufmin[i])
        # L[i] <= sufmin[i] (sorted by left end), so the group is never empty
        j = int(np.searchsorted(L, p, side="right"))
        points.append(p if _isfinite(p) else _pick_point(float(L[j - 1]), p))
        bounds.append(j)
        i = j
    return order, np.asarray(bounds, dtype=np.int64), np.asarray(points, dtype=np.float64)


def canonical_partition(intervals) -> list[StabbingGroup]:
    """The canonical stabbing partition of ``intervals`` (mapping id -> (lo, hi), or a sequence of pairs with
    ids = positions), as groups with gid 0..τ-1 in increasing order of stabbing point (Lemma 10).

    >>> [(g.point, g.members) for g in canonical_partition([(0, 10), (1, 2), (3, 4), (3.5, 9)])]
    [(2.0, (0, 1)), (4.0, (2, 3))]
    """
    ids, lo, hi = _as_arrays(intervals)
    order, bounds, points = canonical_groups(lo, hi)
    out = []
    for j in range(len(points)):
        idx = order[bounds[j]:bounds[j + 1]]
        out.append(StabbingGroup(j, float(points[j]), float(lo[idx].max()), float(hi[idx].min()),
                                 tuple(ids[i] for i in idx)))
    return out


def stabbing_number(intervals) -> int:
    """τ(I): the size of the smallest stabbing partition (= of the canonical one, Lemma 10)."""
    _, lo, hi = _as_arrays(intervals)
    return len(canonical_groups(lo, hi)[2])


# --------------------------------------------------------------------------------------------------------------
# One group with its exact common intersection
# --------------------------------------------------------------------------------------------------------------
class _Group:
    """Members of one group plus sorted left / right ends, so the common intersection [lo, hi] = [max left end,
    min right end] stays exact under deletions (003 §4.2.3 refinement: keep the common intersection, not
    just a point).  ``lo`` / ``hi`` are cached; the sorted ends are read only when a bound is deleted."""

    __slots__ = ("gid", "point", "members", "lefts", "rights", "lo", "hi")

    def __init__(self, gid: int, point: float, members: dict | None = None):
        self.gid = gid
        self.point = point
        self.members: dict = members if members is not None else {}
        self.lefts = SortedList(v[0] for v in self.members.values())
        self.rights = SortedList(v[1] for v in self.members.values())
        self.lo = self.lefts[-1] if self.lefts else -_INF
        self.hi = self.rights[0] if self.rights else _INF

    def __len__(self) -> int:
        return len(self.members)

    def add(self, iid, lo: float, hi: float) -> None:
        self.members[iid] = (lo, hi)
        self.lefts.add(lo)
        self.rights.add(hi)
        if lo > self.lo:
            self.lo = lo
        if hi < self.hi:
            self.hi = hi

    def remove(self, iid) -> tuple[float, float]:
        lo, hi = self.members.pop(iid)
        self.lefts.remove(lo)
        self.rights.remove(hi)
        if lo == self.lo:
            self.lo = self.lefts[-1] if self.lefts else -_INF
        if hi == self.hi:
            self.hi = self.rights[0] if self.rights else _INF
        return lo, hi

    def overlaps(self, lo: float, hi: float) -> bool:
        """Would the common intersection stay nonempty with [lo, hi] added?"""
        return (self.lo if self.lo > lo else lo) <= (self.hi if self.hi < hi else hi)

    def view(self) -> StabbingGroup:
        return StabbingGroup(self.gid, self.point, self.lo, self.hi, tuple(self.members))


def _clamp(p: float, lo: float, hi: float) -> float:
    return lo if p < lo else hi if p > hi else p


# --------------------------------------------------------------------------------------------------------------
# Dynamic (1+ε)-approximate stabbing partition (003 §4.2.3, Lemma 12 and refinements)
# --------------------------------------------------------------------------------------------------------------
class DynamicStabbingPartition:
    """A stabbing partition of a changing interval set of size ≤ (1+ε)·τ(I) after every operation.

    Lazy reconstruction of Lemma 12 with the refinements after it (module docstring): ``join`` in
    {"intersection", "point", "none"}, ``trigger`` in {"witness", "relaxed", "count"}.

    ``counters``: ``inserts`` / ``deletes`` (single intervals), ``group_inserts`` / ``group_removes`` (whole
    groups), ``joined`` (insertions into an existing group), ``singletons`` (new groups), ``point_moves``
    (stabbing points moved by a join), ``rebuilds``, ``rebuild_work`` (intervals re-partitioned by
    reconstructions), ``moves`` (intervals whose group changed in a reconstruction: members of new ids).
    """

    JOINS = ("intersection", "point", "none")
    TRIGGERS = ("witness", "relaxed", "count")

    def __init__(self, epsilon: float = 0.5, *, join: str = "intersection", trigger: str = "witness"):
        if not (epsilon > 0 and _isfinite(epsilon)):
            raise ValueError("epsilon must be a positive finite number")
        if join not in self.JOINS:
            raise ValueError(f"join must be one of {self.JOINS}")
        if trigger not in self.TRIGGERS:
            raise ValueError(f"trigger must be one of {self.TRIGGERS}")
        self.epsilon = float(epsilon)
        self.join = join
        self.trigger = trigger
        self._intervals: dict = {}  # id -> (lo, hi)
        self._groups: dict[int, _Group] = {}
        self._of: dict = {}  # id -> gid
        self._points = SortedList()  # (point, gid)
        self._sizes = SortedList()  # (size, gid): the largest group for promotion (003 §4.2.2)
        self._next_gid = 0
        # state since the last reconstruction (003 §4.2.3, Lemma 12)
        self._tau0 = 0  # τ(I_0)
        self._ops = 0  # operations since the last reconstruction (count trigger)
        self._floor = 0  # τ_0 − m, a lower bound on τ(I) (relaxed / witness triggers)
        self._tracked: set = set()  # the ids whose deletion counts in m: I_0 (relaxed) or the witnesses
        self.epoch = 0  # number of reconstructions so far
        #: (ids of groups dropped, ids of groups created) by the last reconstruction
        self.last_rebuild: tuple[frozenset, frozenset] = (frozenset(), frozenset())
        self.counters: dict[str, int] = {
            "inserts": 0, "deletes": 0, "group_inserts": 0, "group_removes": 0, "joined": 0, "singletons": 0,
            "point_moves": 0, "rebuilds": 0, "rebuild_work": 0, "moves": 0}

    # ---- read access ------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._intervals)

    def __contains__(self, iid) -> bool:
        return iid in self._intervals

    @property
    def stabbing_number(self) -> int:
        """|P|: the number of groups (the partition's size)."""
        return len(self._groups)

    @property
    def tau_lower_bound(self) -> int:
        """A lower bound on τ(I) known without recomputing it: max(τ_0 − m, 1 if I is nonempty)."""
        return max(self._floor, 1 if self._intervals else 0)

    def interval(self, iid) -> tuple[float, float]:
        return self._intervals[iid]

    def group_of(self, iid) -> int:
        """The id of the group holding interval ``iid`` (KeyError if unknown)."""
        return self._of[iid]

    def group(self, gid: int) -> StabbingGroup:
        return self._groups[gid].view()

    def group_size(self, gid: int) -> int:
        return len(self._groups[gid])

    def groups(self) -> list[StabbingGroup]:
        """All groups in increasing order of stabbing point."""
        g = self._groups
        return [g[gid].view() for _, gid in self._points]

    def stabbing_points(self) -> list[tuple[float, int]]:
        """The stabbing set P as sorted (point, gid) pairs (the SSI's search tree, 003 §4.2.1)."""
        return list(self._points)

    def largest(self) -> tuple[int, int] | None:
        """(size, gid) of a largest group, None when empty."""
        return self._sizes[-1] if self._sizes else None

    # ---- group bookkeeping ------------------------------------------------------------------------------------
    def _new_group(self, point: float, members: dict, gid: int | None = None) -> _Group:
        if gid is None:
            gid = self._next_gid
            self._next_gid += 1
        elif gid in self._groups:
            raise InvalidSubscription(f"group id {gid} is in use")
        else:
            self._next_gid = max(self._next_gid, gid + 1)
        g = _Group(gid, point, members)
        self._groups[gid] = g
        self._points.add((point, gid))
        self._sizes.add((len(members), gid))
        of = self._of
        for iid in members:
            of[iid] = gid
        return g

    def _drop_group(self, g: _Group) -> None:
        del self._groups[g.gid]
        self._points.remove((g.point, g.gid))
        self._sizes.remove((len(g), g.gid))

    def _resize(self, g: _Group, old: int) -> None:
        self._sizes.remove((old, g.gid))
        self._sizes.add((len(g), g.gid))

    def _move_point(self, g: _Group, p: float) -> None:
        self._points.remove((g.point, g.gid))
        g.point = p
        self._points.add((p, g.gid))
        self.counters["point_moves"] += 1

    def _find_group(self, lo: float, hi: float) -> tuple[_Group | None, float]:
        """A group [lo, hi] may join (003 §4.2.3 refinements) and its stabbing point afterwards.

        First a stabbing point inside [lo, hi] (the point stays); with join="intersection" also the groups of
        the nearest stabbing points on either side, whose common intersection may still overlap [lo, hi] (the
        point then moves to the near end of [lo, hi], inside the new intersection).  The paper lets any
        overlapping group take the interval; these O(log τ) candidates are the ones a search tree on P finds.
        """
        pts = self._points
        k = pts.bisect_left((lo, -1))
        if k < len(pts) and pts[k][0] <= hi:
            g = self._groups[pts[k][1]]
            return g, g.point
        if self.join == "intersection":
            if k > 0:  # nearest point left of lo
                g = self._groups[pts[k - 1][1]]
                if g.overlaps(lo, hi):
                    return g, _clamp(g.point, max(g.lo, lo), min(g.hi, hi))
            if k < len(pts):  # nearest point right of hi
                g = self._groups[pts[k][1]]
                if g.overlaps(lo, hi):
                    return g, _clamp(g.point, max(g.lo, lo), min(g.hi, hi))
        return None, 0.0

    # ---- operations -------------------------------------------------------------------------------------------
    def insert(self, iid: Hashable, lo: float, hi: float) -> Change:
        """Insert interval ``iid`` = [lo, hi]: join a group (refinement) or open a singleton group stabbed by a
        point of [lo, hi] (Lemma 12); then reconstruct if the bound could be violated."""
        if iid in self._intervals:
            raise DuplicateSubscription(f"interval id {iid!r} is already present")
        lo, hi = _interval(lo, hi)
        self._intervals[iid] = (lo, hi)
        self.counters["inserts"] += 1
        moved = False
        g = None
        if self.join != "none":
            g, p = self._find_group(lo, hi)
        if g is not None:
            old = len(g)
            g.add(iid, lo, hi)
            self._of[iid] = g.gid
            self._resize(g, old)
            if p != g.point:
                self._move_point(g, p)
                moved = True
            self.counters["joined"] += 1
        else:
            g = self._new_group(_pick_point(lo, hi), {iid: (lo, hi)})
            self.counters["singletons"] += 1
        # 003 §4.2.3, Lemma 12: an insertion raises |P| by <= 1 and never lowers τ(I)
        self._ops += 1
        rebuilt = self._maybe_rebuild()
        return Change(self._of[iid] if rebuilt else g.gid, moved, rebuilt)

    def delete(self, iid: Hashable) -> Change:
        """Delete interval ``iid`` from its group (dropping the group if it empties); then maybe reconstruct."""
        if iid not in self._intervals:
            raise UnknownSubscription(f"unknown interval id {iid!r}")
        del self._intervals[iid]
        gid = self._of.pop(iid)
        g = self._groups[gid]
        old = len(g)
        g.remove(iid)
        if len(g):
            self._resize(g, old)
        else:
            self._sizes.remove((old, gid))
            del self._groups[gid]
            self._points.remove((g.point, gid))
        self.counters["deletes"] += 1
        # 003 §4.2.3, Lemma 12: a deletion lowers τ(I) by <= 1; m only counts I_0's intervals (relaxed) or the
        # witnesses (witness trigger)
        self._ops += 1
        if iid in self._tracked:
            self._tracked.discard(iid)
            self._floor -= 1
        return Change(gid, False, self._maybe_rebuild())

    def insert_group(self, members: Mapping, *, gid: int | None = None, point: float | None = None) -> Change:
        """Add intervals sharing a common point as one new group (a demotion, 003 §4.2.2) = one operation of
        Lemma 12: |P| grows by one and τ(I) does not shrink.  ``gid`` (unused id) and ``point`` optional."""
        items = {}
        for iid, (lo, hi) in members.items():
            if iid in self._intervals or iid in items:
                raise DuplicateSubscription(f"interval id {iid!r} is already present")
            items[iid] = _interval(lo, hi)
        if not items:
            raise InvalidSubscription("empty group")
        clo = max(v[0] for v in items.values())
        chi = min(v[1] for v in items.values())
        if clo > chi:
            raise InvalidSubscription("the intervals of a group must share a common point (Definition 5)")
        if point is None or not (clo <= point <= chi):
            point = _pick_point(clo, chi)
        self._intervals.update(items)
        g = self._new_group(float(point), items, gid)
        self.counters["group_inserts"] += 1
        self._ops += 1
        rebuilt = self._maybe_rebuild()
        return Change(self._of[next(iter(items))] if rebuilt else g.gid, False, rebuilt)

    def remove_group(self, gid: int) -> dict:
        """Remove a whole group (a promotion, 003 §4.2.2) and return its members {id: (lo, hi)}.  One operation
        of Lemma 12: the group is stabbed by one point, so τ(I) drops by at most one."""
        g = self._groups[gid]
        self._drop_group(g)
        iv = self._intervals
        of = self._of
        tracked = self._tracked
        hit = False
        for iid in g.members:
            del iv[iid]
            del of[iid]
            if iid in tracked:  # at most one witness: they are pairwise disjoint
                tracked.discard(iid)
                hit = True
        if hit:
            self._floor -= 1
        self.counters["group_removes"] += 1
        self._ops += 1
        self._maybe_rebuild()
        return g.members

    # ---- reconstruction (003 §4.2.3, Lemma 12; Lemma 10) -----------------------------------------------------
    def insert_many(self, items) -> None:
        """Insert many ``(iid, lo, hi)`` (all checked first).  Into an empty partition: straight to the canonical
        partition of all of them (one reconstruction, Lemma 10: size = τ(I)); otherwise one insertion each."""
        rows = []
        seen = set()
        for iid, lo, hi in items:
            if iid in self._intervals or iid in seen:
                raise DuplicateSubscription(f"interval id {iid!r} is already present")
            seen.add(iid)
            rows.append((iid, *_interval(lo, hi)))
        if self._intervals:
            for row in rows:
                self.insert(*row)
            return
        self._intervals.update((iid, (lo, hi)) for iid, lo, hi in rows)
        self.counters["inserts"] += len(rows)
        if rows:
            self.rebuild()

    def _maybe_rebuild(self) -> bool:
        size = len(self._groups)
        if self.trigger == "count":
            # rebuild once more than ε·τ_0/(ε+2) operations happened since the last one (Lemma 12)
            eps = self.epsilon
            violated = self._ops * (eps + 2) > eps * self._tau0
        else:
            # relaxed / witness trigger: |P| > (1+ε)(τ_0 − m), with τ(I) >= 1 for a nonempty I
            violated = size > (1 + self.epsilon) * self.tau_lower_bound
        if violated:
            self.rebuild()
            return True
        return False

    def rebuild(self) -> None:
        """Replace the partition by the canonical one of the current intervals (Lemma 10).  A new group whose
        member set equals an old group's keeps that group's id; the others get fresh ids."""
        ids = list(self._intervals)
        old_of = self._of
        old_groups = self._groups
        n = len(ids)
        if n:
            arr = np.fromiter((c for iid in ids for c in self._intervals[iid]), dtype=np.float64, count=2 * n)
            his = arr[1::2]
            order, bounds, points = canonical_groups(arr[0::2], his)
        else:
            his = np.empty(0)
            order, bounds, points = np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64), np.empty(0)
        self._groups = {}
        self._of = {}
        self._points = SortedList()
        self._sizes = SortedList()
        kept = set()
        created = set()
        moves = 0
        iv = self._intervals
        witnesses = set()
        for j in range(len(points)):
            idx = order[bounds[j]:bounds[j + 1]]
            # the witness: the group's interval with the smallest right end (pairwise disjoint across groups)
            witnesses.add(ids[int(idx[np.argmin(his[idx])])])
            members = {ids[i]: iv[ids[i]] for i in idx.tolist()}
            first = next(iter(members))
            og = old_of.get(first)
            if og is not None and len(old_groups[og]) == len(members) and all(old_of[m] == og for m in members):
                self._new_group(float(points[j]), members, og)
                kept.add(og)
            else:
                created.add(self._new_group(float(points[j]), members).gid)
                moves += len(members)
        self.last_rebuild = (frozenset(old_groups.keys() - kept), frozenset(created))
        self._tau0 = len(points)
        self._floor = self._tau0
        self._ops = 0
        self._tracked = set(ids) if self.trigger == "relaxed" else witnesses
        self.epoch += 1
        c = self.counters
        c["rebuilds"] += 1
        c["rebuild_work"] += n
        c["moves"] += moves

    # ---- checking ---------------------------------------------------------------------------------------------
    def check(self, tau: int | None = None) -> None:
        """Raise AssertionError unless: every group is stabbed by its point (Definition 5), the indexes agree,
        and |P| <= (1+ε)·τ(I) (Lemma 12; τ recomputed by Lemma 10 unless given)."""
        seen = 0
        for gid, g in self._groups.items():
            if not len(g):
                raise AssertionError(f"empty group {gid}")
            for iid, (lo, hi) in g.members.items():
                if not (lo <= g.point <= hi):
                    raise AssertionError(f"group {gid}: point {g.point} does not stab {iid!r} = [{lo}, {hi}]")
                if self._of.get(iid) != gid or self._intervals.get(iid) != (lo, hi):
                    raise AssertionError(f"index disagrees on {iid!r}")
            if g.lo != max(v[0] for v in g.members.values()) or g.hi != min(v[1] for v in g.members.values()):
                raise AssertionError(f"group {gid}: stale common intersection")
            seen += len(g)
        if seen != len(self._intervals) or len(self._of) != seen:
            raise AssertionError("an interval is in no group or in two")
        if sorted((g.point, gid) for gid, g in self._groups.items()) != list(self._points):
            raise AssertionError("stabbing-point index disagrees")
        if sorted((len(g), gid) for gid, g in self._groups.items()) != list(self._sizes):
            raise AssertionError("size index disagrees")
        if tau is None:
            tau = stabbing_number(self._intervals)
        if self.tau_lower_bound > tau:
            raise AssertionError(f"the lower bound τ_0 − m = {self.tau_lower_bound} exceeds τ(I) = {tau}")
        if len(self._groups) > (1 + self.epsilon) * tau + 1e-9:
            raise AssertionError(f"Lemma 12 violated: |P| = {len(self._groups)} > (1+ε)·τ(I) = "
                                 f"{(1 + self.epsilon) * tau}")


# --------------------------------------------------------------------------------------------------------------
# α-hotspot tracking (003 §4.2.2, Theorem 12)
# --------------------------------------------------------------------------------------------------------------
class HotspotTracker:
    """Keeps the α-hotspots of a stabbing partition under insertions and deletions (Theorem 12).

    𝓘_H = :meth:`hotspots`, 𝓘_S = :meth:`scattered` (a :class:`DynamicStabbingPartition` of the scattered
    intervals S with the given ``epsilon`` / ``join`` / ``trigger``).  Invariants (I1)-(I3) are in the module
    docstring and checked by :meth:`check_invariants`.

    ``counters``: ``inserts``, ``deletes``, ``hot_inserts`` (insertions that joined a group of 𝓘_H),
    ``promotions`` / ``demotions`` (groups), ``moves_out`` / ``moves_in`` (intervals leaving / entering S by
    promotion / demotion: the moves of (I3)), ``point_moves`` (hot groups' stabbing points moved by a join).
    ``credits`` is the exact total deposited by the accounting of Theorem 12's proof (a float).
    """

    def __init__(self, alpha: float, epsilon: float = 0.5, *, join: str = "intersection",
                 trigger: str = "witness"):
        if not (0 < alpha <= 1):
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self._S = DynamicStabbingPartition(epsilon, join=join, trigger=trigger)
        self._hot: dict[int, _Group] = {}  # 𝓘_H
        self._hot_of: dict = {}  # id -> gid for hotspot intervals H
        self._n = 0
        self.credits = 0.0
        self.counters: dict[str, int] = {
            "inserts": 0, "deletes": 0, "hot_inserts": 0, "promotions": 0, "demotions": 0,
            "moves_out": 0, "moves_in": 0, "point_moves": 0}

    # ---- read access ------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def __contains__(self, iid) -> bool:
        return iid in self._hot_of or iid in self._S

    @property
    def scattered_partition(self) -> DynamicStabbingPartition:
        """𝓘_S itself (read it, do not modify it)."""
        return self._S

    @property
    def moves(self) -> int:
        """Intervals moved into or out of S so far (the quantity bounded by (I3))."""
        return self.counters["moves_in"] + self.counters["moves_out"]

    @property
    def stabbing_number(self) -> int:
        """|𝓘| = |𝓘_H| + |𝓘_S|."""
        return len(self._hot) + self._S.stabbing_number

    def is_hot(self, iid) -> bool:
        """Is ``iid`` a hotspot interval (in H)?"""
        if iid in self._hot_of:
            return True
        if iid in self._S:
            return False
        raise KeyError(iid)

    def group_of(self, iid) -> int:
        gid = self._hot_of.get(iid)
        return gid if gid is not None else self._S.group_of(iid)

    def interval(self, iid) -> tuple[float, float]:
        gid = self._hot_of.get(iid)
        return self._hot[gid].members[iid] if gid is not None else self._S.interval(iid)

    def hotspots(self) -> list[StabbingGroup]:
        """𝓘_H in increasing order of stabbing point."""
        return sorted((g.view() for g in self._hot.values()), key=lambda v: (v.point, v.gid))

    def scattered(self) -> list[StabbingGroup]:
        """𝓘_S in increasing order of stabbing point."""
        return self._S.groups()

    def intervals(self) -> dict:
        """All intervals, id -> (lo, hi)."""
        out = dict(self._S._intervals)
        for g in self._hot.values():
            out.update(g.members)
        return out

    # ---- operations -------------------------------------------------------------------------------------------
    def insert(self, iid: Hashable, lo: float, hi: float) -> HotspotUpdate:
        """Insert [lo, hi] (003 §4.2.2, Insertion)."""
        if iid in self:
            raise DuplicateSubscription(f"interval id {iid!r} is already present")
        lo, hi = _interval(lo, hi)
        # Theorem 12 proof, (I3): 2α credits on each group of 𝓘_H present at this insertion
        self.credits += 2 * self.alpha * len(self._hot)
        self._n += 1
        self.counters["inserts"] += 1
        g = self._find_hot(lo, hi)
        if g is not None:
            g.add(iid, lo, hi)
            self._hot_of[iid] = g.gid
            self.counters["hot_inserts"] += 1
            gid = g.gid
        else:
            self.credits += 1  # ... and one on the interval if it enters S
            gid = self._S.insert(iid, lo, hi).gid
        # |I| grew: hot groups may fall below (α/2)|I| (demote), then S groups may reach α|I| (promote)
        half = self.alpha * self._n / 2
        demoted = tuple(self._demote(h) for h in [h for h in self._hot.values() if len(h) < half])
        promoted = self._promote_all()
        gid = self.group_of(iid)
        return HotspotUpdate(gid, iid in self._hot_of, promoted, demoted)

    def insert_many(self, items) -> None:
        """Insert many ``(iid, lo, hi)`` at once (all checked first).  Into an empty tracker this is a bulk load:
        every interval into 𝓘_S, one reconstruction (the canonical partition, Lemma 10), then one round of
        promotions -- O(n log n) instead of n insertions that each scan the ≤ 2/α hot groups.  The invariants
        hold as after n insertions: promoted groups have ≥ α|I| intervals (I1), each interval deposited its one
        credit on entering S and moved out at most once (I3).  A non-empty tracker inserts one by one."""
        rows = []
        seen = set()
        for iid, lo, hi in items:
            if iid in self or iid in seen:
                raise DuplicateSubscription(f"interval id {iid!r} is already present")
            seen.add(iid)
            rows.append((iid, *_interval(lo, hi)))
        if self._n:
            for row in rows:
                self.insert(*row)
            return
        self._S.insert_many(rows)
        self._n = len(rows)
        self.counters["inserts"] += len(rows)
        self.credits += len(rows)
        self._promote_all()

    def delete(self, iid: Hashable) -> HotspotUpdate:
        """Delete interval ``iid`` (003 §4.2.2, Deletion)."""
        if iid not in self:
            raise UnknownSubscription(f"unknown interval id {iid!r}")
        self._n -= 1
        self.counters["deletes"] += 1
        gid = self._hot_of.pop(iid, None)
        demoted: tuple = ()
        if gid is not None:
            g = self._hot[gid]
            g.remove(iid)
            self.credits += 2  # Theorem 12 proof, (I3): 2 credits on the group
            # only this group shrank; the others keep their size while (α/2)|I| fell
            if not len(g):
                del self._hot[gid]
            elif len(g) < self.alpha * self._n / 2:
                demoted = (self._demote(g),)
        else:
            gid = self._S.delete(iid).gid
        # |I| fell: S groups may have reached α|I|
        promoted = self._promote_all()
        return HotspotUpdate(gid, gid in self._hot, promoted, demoted)

    def _find_hot(self, lo: float, hi: float) -> _Group | None:
        """A group of 𝓘_H whose common intersection stays nonempty with [lo, hi] (brute force over <= 2/α
        groups, 003 §4.2.2): prefer one whose stabbing point already stabs [lo, hi], then the largest."""
        best = None
        best_key = None
        for g in self._hot.values():
            glo = g.lo if g.lo > lo else lo
            ghi = g.hi if g.hi < hi else hi
            if glo > ghi:
                continue
            key = (lo <= g.point <= hi, len(g.members), -g.gid)
            if best_key is None or key > best_key:
                best, best_key = g, key
        if best is not None and not (lo <= best.point <= hi):
            best.point = _clamp(best.point, max(best.lo, lo), min(best.hi, hi))
            self.counters["point_moves"] += 1
        return best

    def _promote_all(self) -> tuple:
        """Promote every group of 𝓘_S with >= α|I| intervals into 𝓘_H; its intervals move out of S (each paid by
        its credit).  Removing a group may reconstruct 𝓘_S, so the largest group is looked up again each time."""
        out = []
        S = self._S
        threshold = self.alpha * self._n
        while self._n:
            top = S.largest()
            if top is None or top[0] < threshold:
                break
            gid = top[1]
            point = S._groups[gid].point
            members = S.remove_group(gid)
            g = _Group(gid, point, members)
            self._hot[gid] = g
            for iid in members:
                self._hot_of[iid] = gid
            self.counters["promotions"] += 1
            self.counters["moves_out"] += len(members)
            out.append(gid)
        return tuple(out)

    def _demote(self, g: _Group) -> int:
        """Move a group of 𝓘_H that is no longer an (α/2)-hotspot into 𝓘_S as one group, keeping id and point."""
        del self._hot[g.gid]
        for iid in g.members:
            del self._hot_of[iid]
        self._S.insert_group(g.members, gid=g.gid, point=g.point)
        self.counters["demotions"] += 1
        self.counters["moves_in"] += len(g)
        return g.gid

    # ---- checking ---------------------------------------------------------------------------------------------
    def check_invariants(self, tau: int | None = None) -> None:
        """Raise AssertionError naming the broken invariant of 003 §4.2.2 / Theorem 12:

        * stabbed: every group of 𝓘_H and 𝓘_S is stabbed by its point; ids are in exactly one group;
        * (I1): every group of 𝓘_H has >= (α/2)|I| intervals, every group of 𝓘_S < α|I|; so |𝓘_H| <= 2/α;
        * (I2): |𝓘| <= (1+ε)·τ(I) + 2/α, and |𝓘_S| <= (1+ε)·τ(S) (Lemma 11 on S);
        * (I3): moves into / out of S <= credits deposited <= 5·insertions + 2·deletions.
        """
        n = self._n
        a = self.alpha
        S = self._S
        if n != len(S) + len(self._hot_of):
            raise AssertionError("stabbed: |I| disagrees with |H| + |S|")
        for gid, g in self._hot.items():
            if not len(g):
                raise AssertionError(f"stabbed: empty hot group {gid}")
            for iid, (lo, hi) in g.members.items():
                if not (lo <= g.point <= hi):
                    raise AssertionError(f"stabbed: hot group {gid} point {g.point} misses {iid!r}")
                if self._hot_of.get(iid) != gid or iid in S:
                    raise AssertionError(f"stabbed: {iid!r} indexed wrongly")
            if g.lo != max(v[0] for v in g.members.values()) or g.hi != min(v[1] for v in g.members.values()):
                raise AssertionError(f"stabbed: hot group {gid} has a stale common intersection")
            if gid in S._groups:
                raise AssertionError(f"group id {gid} is both hot and scattered")
            if len(g) < a * n / 2:
                raise AssertionError(f"(I1): hot group {gid} has {len(g)} < (α/2)|I| = {a * n / 2}")
        if len(self._hot_of) != sum(len(g) for g in self._hot.values()):
            raise AssertionError("stabbed: hot index disagrees")
        top = S.largest()
        if top is not None and top[0] >= a * n:
            raise AssertionError(f"(I1): scattered group {top[1]} has {top[0]} >= α|I| = {a * n}")
        if n and len(self._hot) > 2 / a + 1e-9:
            raise AssertionError("(I1): more than 2/α hot groups")
        S.check()  # stabbed + Lemma 11 (|𝓘_S| <= (1+ε)τ(S))
        if tau is None:
            tau = stabbing_number(self.intervals())
        if self.stabbing_number > (1 + self.epsilon) * tau + 2 / a + 1e-9:
            raise AssertionError(f"(I2): |𝓘| = {self.stabbing_number} > (1+ε)τ(I) + 2/α = "
                                 f"{(1 + self.epsilon) * tau + 2 / a}")
        c = self.counters
        if self.moves > self.credits + 1e-6 * (1 + self.credits):
            raise AssertionError(f"(I3): {self.moves} moves > {self.credits} credits deposited")
        if self.credits > 5 * c["inserts"] + 2 * c["deletes"] + 1e-6 * (1 + self.credits):
            raise AssertionError("(I3): more credits deposited than 5 per insertion and 2 per deletion")

    def explain(self) -> str:
        return (f"HotspotTracker(α={self.alpha}, ε={self.epsilon}): {self._n} intervals, {len(self._hot)} hotspots "
                f"holding {len(self._hot_of)}, {self._S.stabbing_number} scattered groups holding {len(self._S)}; "
                f"counters {self.counters}, S {self._S.counters}")
