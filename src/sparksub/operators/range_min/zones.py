"""DS-CN: the S-CN server of one range-MIN / range-MAX group split into X zones (000 §2.3.2).  Pure.

000 §2.3.2 replaces the one S-CN server with zone owners along the diagonal of the (x1, x2) plane: a tuple
with X = x lives at the zone owning (x, x), so the table is range-partitioned on X into intervals
``[a_i, a_{i+1})``; an update goes to the owner of its x, which walks left and right until every tuple of
Mar(δ) has been examined and then reformulates exactly as S-CN (§2.3.1) does.  This module is that split,
for one process or one Spark task per zone (docs/parallelism.md, "DS-CN"):

* :func:`equal_count_cuts` fixes the cut points from a histogram of X (equal row counts per zone).
* :class:`Zone` is one owner: an A2B-tree (000 §3) over its slice of the rows, in a
  :class:`~sparksub.operators.range_min.core.RangeMinCore`, plus its two **edge staircases** (below).
* :meth:`ZonedRangeMin.route` sends each update to the zone owning its x.  An X-move is a delete at the old
  x's zone (step 0) and an insert at the new x's zone (step 1), as the core models it (digest C.8).
* :func:`apply_round1` (one zone, its steps) and :func:`apply_round2` (every zone's round-1 output) are the
  two rounds, pure functions over zone states; :class:`ZonedRangeMin` runs them in sequence in one process.

The output of every batch equals, message for message and in ``seq`` order, what the single-tree S-CN core
(:class:`~sparksub.operators.range_min.group.RangeMinGroup`, reformulated mode) emits for it.

Why a walk's reads are a zone's edge staircase
----------------------------------------------
Every Mar / Hull / EMar computation of a step at x (000 §3; digest C.6-C.7) is a sequence of FINDL / FINDR
calls that start at x or at a point the previous call returned and move outward; each returns the nearest
X whose per-X minimum is ``<= y`` (``< y``), with y at most the minimum seen since x.  Every answer is
therefore a *record* of the per-X minima read outward from x: a point strictly lower than every point
between x and it.  A record that lies in another zone Z is also a record of Z read from the edge facing x,
so all a walk can read of Z is Z's **edge staircase** on that side: the strict prefix minima of Z's per-X
minima from that edge inward (Z's minimum is its last entry, the "few numbers every zone knows" of
§2.3.2).  It has ~ln(rows) entries for random Y.  A tree holding only (a) the tuples at x, (b) the records
of x's own zone outward from x and (c) the edge staircases of the zones the walk enters answers every one
of the step's FIND calls exactly as the whole table would, so :func:`apply_round2` re-runs the unchanged
core step on that small tree.

Ordering (the consistent cut)
-----------------------------
* **Round 1**, every zone in parallel, each over its own steps in batch order: apply the step to the
  zone's tree, then reformulate it with FIND calls on the zone's tree only.  A step whose FINDs are all
  answered inside the zone (an ignorable step needs none: the owner alone detects it, as in the paper's
  runs) reads only this zone's tuples, and the zone holds exactly the table's earlier steps restricted to
  it, so its messages are the single core's: they are emitted now.  A FIND that runs off an edge with a
  neighbour beyond it would read another zone as it stands at this step, which round 1 cannot see (that
  zone is busy with its own steps): the step's reformulation is **deferred**.  Its *state change* is
  not: a step changes only its own zone, and only at its own x, so the zone applies it at once and its
  later steps read a correct state; there is no need to defer them.  For the deferred step the zone
  records (a) and (b) above as they stand at that step.  After every step that changes an edge staircase
  the zone records the staircase under the step's version, ``2 * position in batch + step``.
* **Round 2**, once every zone's round 1 is done: each deferred step reads each zone it enters through that
  zone's staircase *at the last version before its own* — the state of the zone after exactly the batch's
  earlier steps: a consistent cut, however far that zone's round 1 has run ahead.  Deferred steps read
  only round-1 records, never each other, so round 2 is sequential only in that its messages are merged
  into the batch's order by version.  The walk's zones end at the first zone whose minimum is at or below
  the step's floor ``min(y_o, y_n)`` (every FIND of the step stops there).

This differs from one literal reading of the design (defer a crossing update and every later update of its
zone): applying the state change in round 1 and versioning the edge staircases keeps the later updates in
round 1 without reading any zone at the wrong time; the round-1 share then does not shrink as batches grow.

State and placement (for the runtime)
-------------------------------------
A zone's state is its rows (:meth:`Zone.snapshot`: plain numpy arrays).  Routing needs each key's current x
(:attr:`ZonedRangeMin.directory`, rebuilt from the zones' rows), because a delete or an X-move must reach
the zone holding the old row.  What crosses partitions per batch: the routed steps (to each zone), the
round-1 messages (to the output), and each zone's :class:`Round1` (deferred steps and staircase versions,
a few numbers per change) to round 2.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from sparksub.errors import BadUpdate
from sparksub.operators.range_min.core import RangeMinCore
from sparksub.operators.range_min.delivery import SubscriptionPoints, multicast, unicast
from sparksub.operators.range_min.group import CN_PLUS_SCHEMA, MULTICAST_SCHEMA
from sparksub.operators.range_min.group import _columns as batch_columns
from sparksub.operators.shared.range_classes import key_text
from sparksub.operators.shared.schemas import DELETE, MESSAGE_SCHEMA, UNICAST_SCHEMA

__all__ = ["equal_count_cuts", "Zone", "ZoneStep", "DeferredStep", "Round1", "ZoneSnapshot", "ZonesSnapshot",
           "RoutedBatch", "ZonedRangeMin", "apply_round1", "apply_round2", "messages_table"]

_INF = math.inf
_NINF = -math.inf


# --------------------------------------------------------------------------------------------------------------
# zone boundaries
# --------------------------------------------------------------------------------------------------------------
def equal_count_cuts(values, n_zones: int) -> np.ndarray:
    """Cut points ``a_1 < … < a_{k-1}`` splitting ``values`` into ``n_zones`` X intervals of about equal count.

    Zone i owns ``[a_i, a_{i+1})`` with ``a_0 = -inf`` and ``a_k = +inf``; cut i is the value of rank
    ``i * N // n_zones`` (an equal-count histogram of X), or, when that value repeats, the distinct value
    whose count of smaller values is nearest that rank.  Repeated values cannot be split, so fewer cuts come
    back when a value fills more than one zone's share (and none for fewer than two distinct values); NaNs
    are ignored.

    >>> equal_count_cuts([5.0, 1.0, 3.0, 2.0, 4.0, 6.0], 3).tolist()
    [3.0, 5.0]
    >>> equal_count_cuts([1.0, 1.0, 1.0, 2.0], 2).tolist()
    [2.0]
    """
    if int(n_zones) != n_zones or n_zones < 1:
        raise ValueError(f"n_zones must be a positive integer, got {n_zones!r}")
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = np.sort(v[~np.isnan(v)])
    distinct, below = np.unique(v, return_index=True)   # below[j] = how many values are smaller than distinct[j]
    if distinct.size < 2 or n_zones == 1:
        return np.empty(0)
    rank = (np.arange(1, int(n_zones), dtype=np.int64) * v.size) // int(n_zones)
    # a cut at the smallest value would leave zone 0 empty: candidates are distinct values 1.. only
    hi = np.clip(np.searchsorted(below, rank), 1, distinct.size - 1)
    lo = np.maximum(hi - 1, 1)
    pick = np.where(np.abs(below[lo] - rank) <= np.abs(below[hi] - rank), lo, hi)
    return np.unique(distinct[pick])


def _check_cuts(cuts) -> np.ndarray:
    c = np.asarray(cuts, dtype=np.float64).reshape(-1)
    if not np.isfinite(c).all():
        raise ValueError(f"zone cut points must be finite: {c.tolist()}")
    if c.size > 1 and not (np.diff(c) > 0).all():
        raise ValueError(f"zone cut points must be strictly increasing: {c.tolist()}")
    return c


# --------------------------------------------------------------------------------------------------------------
# one zone
# --------------------------------------------------------------------------------------------------------------
class _Staircase:
    """One edge staircase of a zone: the strict prefix minima of its per-X minima read inward from one edge,
    kept by FINDR_< (left edge) or FINDL_< (right edge) on the zone's A2B-tree (000 §3).  ``keys`` are the
    records' X times ``sign`` (+1 left, -1 right), so that they ascend inward and ``bisect`` finds the records
    before any x; ``ms`` strictly decrease."""

    __slots__ = ("tree", "sign", "keys", "ms")

    def __init__(self, tree, sign: int):
        self.tree, self.sign = tree, sign
        self.keys: list = []
        self.ms: list = []

    def xs(self) -> tuple:
        return tuple(self.keys) if self.sign > 0 else tuple(-k for k in self.keys)

    def extend(self, x: float, cur: float) -> None:
        """Append the records beyond x (inward) below ``cur``."""
        find = self.tree.find_right if self.sign > 0 else self.tree.find_left
        end = _INF * self.sign
        while True:
            x, cur = find(x, cur, True)
            if x == end:
                return
            self.keys.append(self.sign * x)
            self.ms.append(cur)

    def rebuild(self) -> None:
        self.keys, self.ms = [], []
        self.extend(-_INF * self.sign, _INF)

    def update(self, x: float, m_old: float, m_new: float) -> bool:
        """The per-X minimum at x went from m_old to m_new; True if the staircase changed.  It changes only if
        x was or becomes a record, i.e. m_old or m_new is below the last record before x; then its records
        from x on are recomputed."""
        i = bisect_left(self.keys, self.sign * x)
        before = self.ms[i - 1] if i else _INF
        if not (m_old < before or m_new < before):
            return False
        del self.keys[i:], self.ms[i:]
        if m_new < before:
            self.keys.append(self.sign * x)
            self.ms.append(m_new)
            before = m_new
        self.extend(x, before)
        return True


class ZoneStep(NamedTuple):
    """One step routed to a zone: a delete, or an upsert whose key is absent from the zone or at the same x."""

    version: int       # 2 * position of the update in the batch + step: the order of application
    seq: int
    step: int          # 0, or 1 for the insert half of an X-move
    delete: bool
    key: object
    x: float
    y: float           # the user's sign; NaN for a delete
    x_move: bool = False   # the delete half of an X-move: its zone reports the old Y (unicast's no-op rule)


class DeferredStep(NamedTuple):
    """A step whose reformulation reads other zones, with what its own zone knew at that step (internal sign:
    Y negated for MAX)."""

    version: int
    seq: int
    step: int
    delete: bool
    key: object
    x: float
    y: float
    at_x: tuple        # ((key, y), …): the tuples at x before the step
    left: tuple        # ((X, m), …): records of the own zone left of x, outward, down to the floor
    right: tuple       # the same to the right
    floor: float       # min(y_o, y_n): every FIND of the step stops at a per-X minimum <= floor
    left_open: bool    # the left records did not reach the floor and zones lie beyond: read them
    right_open: bool


class Edges(NamedTuple):
    """A zone's two edge staircases: strict prefix minima of its per-X minima read inward from each edge
    (left: X ascending; right: X descending; m strictly decreasing in both)."""

    left_x: tuple
    left_m: tuple
    right_x: tuple
    right_m: tuple

    @property
    def minimum(self) -> float:
        """The zone's minimum Y (internal sign), +inf when it is empty."""
        return self.left_m[-1] if self.left_m else _INF


@dataclass
class Round1:
    """What one zone's round 1 hands to round 2: its deferred steps and its edge staircases per version; and
    the old Y (user's sign) of each X-move that left the zone, by seq."""

    zone: int
    n_zones: int
    maximum: bool
    deferred: list          # DeferredStep, in version order
    versions: list          # version after which edges[i] holds (versions[0] = -1: the batch's start)
    edges: list             # Edges
    old_values: dict = field(default_factory=dict)

    def edges_before(self, version: int) -> Edges:
        """The staircases after every step of the batch before ``version`` (the consistent cut)."""
        return self.edges[bisect_left(self.versions, version) - 1]


@dataclass
class ZoneSnapshot:
    """One zone's state as plain numpy arrays (the user's sign): what a partition keeps."""

    index: int
    n_zones: int
    lo: float
    hi: float
    maximum: bool
    keys: np.ndarray
    xs: np.ndarray
    ys: np.ndarray


class Zone:
    """One owner of DS-CN's diagonal: the rows with ``lo <= X < hi`` in an A2B-tree, and its edge staircases.

    ``stats`` counts the steps settled in round 1 (``round1_steps``) and those deferred to round 2
    (``round2_steps``, counted by :func:`apply_round2`), and their messages.
    """

    def __init__(self, index: int, n_zones: int, lo: float, hi: float, maximum: bool = False, *,
                 leaf_capacity: int = 256):
        if not 0 <= index < n_zones:
            raise ValueError(f"zone index {index} outside 0..{n_zones - 1}")
        self.index, self.n_zones, self.lo, self.hi = index, n_zones, float(lo), float(hi)
        self.maximum = bool(maximum)
        self.core = RangeMinCore(maximum, leaf_capacity=leaf_capacity)
        self.open_left = index > 0              # a neighbour lies beyond this edge
        self.open_right = index < n_zones - 1
        self.stats = {"round1_steps": 0, "round2_steps": 0, "round1_messages": 0, "round2_messages": 0,
                      "staircase_changes": 0}
        self._left = _Staircase(self.core.tree, +1)
        self._right = _Staircase(self.core.tree, -1)

    def __len__(self) -> int:
        return len(self.core)

    def owns(self, x: float) -> bool:
        return self.lo <= x < self.hi

    # ---- state ------------------------------------------------------------------------------------------
    def load(self, keys, xs, ys) -> None:
        """Bulk-load rows (the user's sign) that all lie in ``[lo, hi)``."""
        xs = np.asarray(xs, dtype=np.float64)
        outside = ~((xs >= self.lo) & (xs < self.hi))
        if outside.any():
            raise ValueError(f"zone {self.index} [{self.lo}, {self.hi}): row X {xs[outside][0]!r} is outside it")
        self.core.load(keys, xs, ys)
        self._rebuild_edges()

    def snapshot(self) -> ZoneSnapshot:
        pos = self.core.tree._pos
        keys = np.empty(len(pos), dtype=object)
        keys[:] = list(pos)
        xy = np.array(list(pos.values()), dtype=np.float64).reshape(-1, 2)
        ys = -xy[:, 1] if self.maximum else xy[:, 1]
        return ZoneSnapshot(self.index, self.n_zones, self.lo, self.hi, self.maximum, keys, xy[:, 0].copy(),
                            ys.copy())

    @classmethod
    def restore(cls, snap: ZoneSnapshot, *, leaf_capacity: int = 256) -> "Zone":
        z = cls(snap.index, snap.n_zones, snap.lo, snap.hi, snap.maximum, leaf_capacity=leaf_capacity)
        z.load(snap.keys, snap.xs, snap.ys)
        return z

    def minimum(self):
        """The zone's MIN (MAX) in the user's sign, None when it is empty (the number every zone knows)."""
        m = self.edges().minimum
        return None if m == _INF else (-m if self.maximum else m)

    # ---- edge staircases --------------------------------------------------------------------------------
    def edges(self) -> Edges:
        return Edges(self._left.xs(), tuple(self._left.ms), self._right.xs(), tuple(self._right.ms))

    def _rebuild_edges(self) -> None:
        self._left.rebuild()
        self._right.rebuild()

    def _outward(self, x: float, floor: float, right: bool) -> tuple[tuple, bool]:
        """The records of this zone outward from x (strict, 000 §3 FINDR_< / FINDL_<) down to the first at or
        below ``floor``; and whether the walk may go on into the next zone."""
        tree = self.core.tree
        find = tree.find_right if right else tree.find_left
        end = _INF if right else _NINF
        out = []
        cur = _INF
        while True:
            x, cur = find(x, cur, True)
            if x == end:
                return tuple(out), (self.open_right if right else self.open_left)
            out.append((x, cur))
            if cur <= floor:
                return tuple(out), False

    def _defer(self, s: ZoneStep, prev) -> DeferredStep:
        """Record what round 2 needs of this zone for step ``s`` (applied already; ``prev`` = the key's
        (x, y) before it, internal sign, or None)."""
        tree = self.core.tree
        cur = tree._lower.get(s.x)
        here = () if cur is None else ((cur,) if type(cur) is tuple else tuple(cur))
        at_x = tuple((k, y) for y, k in here if k != s.key) + (((s.key, prev[1]),) if prev is not None else ())
        yo = prev[1] if prev is not None else _INF
        yn = _INF if s.delete else (-s.y if self.maximum else s.y)
        floor = min(yo, yn)
        left, left_open = self._outward(s.x, floor, right=False)
        right, right_open = self._outward(s.x, floor, right=True)
        return DeferredStep(s.version, s.seq, s.step, s.delete, s.key, s.x, s.y, at_x, left, right, floor,
                            left_open, right_open)


# --------------------------------------------------------------------------------------------------------------
# the two rounds
# --------------------------------------------------------------------------------------------------------------
def apply_round1(zone: Zone, steps: Sequence[ZoneStep], reformulate: bool = True) -> tuple[list, Round1]:
    """Round 1 of one zone (a Spark task's work): apply ``steps`` (in version order) to ``zone`` and return
    ``(messages, round1)``: ``messages`` = ``[(version, seq, step, (Message, …)), …]``, one entry per step
    settled inside the zone that emitted messages; ``round1`` = its deferred steps and edge staircases per
    version, for round 2.  ``steps`` are :class:`ZoneStep` s or plain tuples in its field order.

    ``zone`` is updated in place (it is the partition's state); nothing else is read or written.

    The zone's tree answers a FIND that runs off an edge with the ±inf sentinel (``A2BTree.find_left``), and
    that sentinel always ends up as an infinite OUTER bound of one of the step's messages (a Mar or EMar end:
    000 §3; digest C.6 rule 3), while an answer inside the zone is a finite X.  So a step crossed into a
    neighbour iff one of its messages has an infinite OUTER bound on a side with a neighbour: its messages
    are then dropped and its reformulation deferred (its state change stands).

    ``reformulate=False``: the state change only (tree, staircases, the X-moves' old Y), no messages and
    nothing deferred -- CN+'s zones (:func:`cn_plus_round1`), whose messages are the updates themselves."""
    core = zone.core
    tree = core.tree
    lower, pos = tree._lower, tree._pos      # read directly: this loop runs once per update
    left, right = zone._left, zone._right
    maximum = zone.maximum
    open_l, open_r = zone.open_left, zone.open_right
    stats = zone.stats
    r1 = Round1(zone.index, zone.n_zones, maximum, [], [-1], [zone.edges()])
    out = []
    settled = n_messages = 0
    for s in steps:
        version, seq, step_no, delete, key, x, y, x_move = s
        cur = lower.get(x)          # the per-X minimum at x before the step (A2BTree.min_at)
        m_old = _INF if cur is None else (cur[0] if type(cur) is tuple else cur[0][0])
        prev = pos.get(key)
        # one step: the router never hands a zone an X-move
        msgs = (core.delete(key) if delete else core.upsert(key, x, y)).steps[0].messages
        crossed = False
        for m in msgs:
            if (open_l and m.outer_l == _NINF) or (open_r and m.outer_r == _INF):
                crossed = True
                break
        cur = lower.get(x)
        m_new = _INF if cur is None else (cur[0] if type(cur) is tuple else cur[0][0])
        if x_move and prev is not None:
            r1.old_values[seq] = -prev[1] if maximum else prev[1]
        if m_new != m_old:
            changed = left.update(x, m_old, m_new)
            if right.update(x, m_old, m_new) or changed:
                r1.versions.append(version)
                r1.edges.append(zone.edges())
                stats["staircase_changes"] += 1
        if not reformulate:
            continue
        if crossed:
            r1.deferred.append(zone._defer(ZoneStep(*s), prev))
            continue
        settled += 1
        if msgs:
            n_messages += len(msgs)
            out.append((version, seq, step_no, msgs))
    stats["round1_steps"] += settled
    stats["round1_messages"] += n_messages
    return out, r1


def _walk_on(records: list, own: tuple, floor: float, staircases) -> None:
    """Append to ``records`` the records a walk reads beyond its own zone: from each next zone's facing edge
    staircase (nearest zone first), the entries below the lowest Y seen so far on that side (only those are
    records of the whole line from x, i.e. possible FIND answers); stop after the first zone whose minimum is
    at or below ``floor``, where every FIND of the step stops."""
    low = own[-1][1] if own else _INF
    for xs, ms in staircases:
        for x, m in zip(xs, ms):
            if m < low:
                records.append((x, m))
                low = m
        if ms and ms[-1] <= floor:
            return


class _StairKey:
    """Key of a staircase record in round 2's small tree (never equal to, nor compared with, a row's key)."""

    __slots__ = ()


def apply_round2(round1: Sequence[Round1], zones: Sequence[Zone] | None = None) -> list:
    """Round 2: reformulate every deferred step of every zone against the consistent cut at its version.

    ``round1`` holds every zone's :class:`Round1` of the batch (any order); returns
    ``[(version, seq, step, (Message, …)), …]`` in version order.  Each deferred step runs the unchanged S-CN
    core step (:class:`RangeMinCore`) on a small A2B-tree of the tuples at x, the own zone's records
    outward from x, and the edge staircases (at the step's version) of the zones its walks enter, nearest
    first, up to the first zone whose minimum is at or below the step's floor (module docstring).
    ``zones``, when given, get their ``round2_steps`` / ``round2_messages`` counted."""
    by_zone = {r.zone: r for r in round1}
    n = max((r.n_zones for r in round1), default=0)
    if sorted(by_zone) != list(range(n)):
        raise ValueError(f"round 2 needs the round-1 output of every zone 0..{n - 1}, got {sorted(by_zone)}")
    out = []
    for r in round1:
        for d in r.deferred:
            keys, xs, ys = [], [], []
            for k, y in d.at_x:
                keys.append(k)
                xs.append(d.x)
                ys.append(y)
            records = list(d.left) + list(d.right)
            if d.left_open:     # a walk entering a zone from its right edge reads its right staircase
                _walk_on(records, d.left, d.floor, ((e.right_x, e.right_m) for e in (
                    by_zone[j].edges_before(d.version) for j in range(r.zone - 1, -1, -1))))
            if d.right_open:
                _walk_on(records, d.right, d.floor, ((e.left_x, e.left_m) for e in (
                    by_zone[j].edges_before(d.version) for j in range(r.zone + 1, n))))
            for x, m in records:
                keys.append(_StairKey())
                xs.append(x)
                ys.append(m)
            step_core = RangeMinCore(r.maximum, leaf_capacity=max(4, len(keys) + 1))
            step_core.tree.bulk_load(keys, xs, ys)      # internal sign already
            outcome = step_core.delete(d.key) if d.delete else step_core.upsert(d.key, d.x, d.y)
            msgs = outcome.steps[0].messages
            if msgs:
                out.append((d.version, d.seq, d.step, msgs))
            if zones is not None:
                zones[r.zone].stats["round2_steps"] += 1
                zones[r.zone].stats["round2_messages"] += len(msgs)
    out.sort(key=lambda t: t[0])
    return out


def _checked_batch(batch):
    """A batch's ``key, x, y, op, seq`` columns and which rows upsert a point (non-null X and Y); ±inf X or Y
    raises :class:`BadUpdate` naming the row, before any step is made (a null X or Y deletes, as in the group)."""
    cols = batch_columns(batch)
    keys, xs, ys, ops, seqs = cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]
    upsert = (np.asarray(ops) != DELETE) & ~np.isnan(xs) & ~np.isnan(ys)
    bad = upsert & ~(np.isfinite(xs) & np.isfinite(ys))
    if bad.any():
        i = int(np.argmax(bad))
        raise BadUpdate(f"update seq {int(seqs[i])} (key {keys[i]!r}): non-finite X or Y ({xs[i]!r}, {ys[i]!r})")
    return keys, xs, ys, ops, seqs, upsert


# --------------------------------------------------------------------------------------------------------------
# the group split into zones
# --------------------------------------------------------------------------------------------------------------
@dataclass
class RoutedBatch:
    """A batch routed to zones: per zone its steps in version order (plain tuples in :class:`ZoneStep`'s field
    order), and the number of updates that produced at least one step."""

    steps: list
    updates: int = 0


@dataclass
class ZonesSnapshot:
    """Every zone's state plus the group's definition: plain numpy arrays, it pickles compactly."""

    group_id: str
    maximum: bool
    cuts: np.ndarray
    zones: list            # ZoneSnapshot, by index


class ZonedRangeMin:
    """A range-MIN (``maximum=True``: MAX) group's S-CN server split into X zones at ``cuts`` (DS-CN, 000 §2.3.2).

    :meth:`apply` takes the same batches as :meth:`RangeMinGroup.apply
    <sparksub.operators.range_min.group.RangeMinGroup.apply>` and returns the same table; it runs the zones
    one after another in this process (a runtime would run :func:`apply_round1` per partition instead).
    """

    def __init__(self, cuts=(), maximum: bool = False, *, group_id: str = "zones", leaf_capacity: int = 256):
        self.cuts = _check_cuts(cuts)
        self.maximum = bool(maximum)
        self.group_id = group_id
        self.leaf_capacity = leaf_capacity
        bounds = [_NINF, *self.cuts.tolist(), _INF]
        k = len(bounds) - 1
        self.zones = [Zone(i, k, bounds[i], bounds[i + 1], maximum, leaf_capacity=leaf_capacity) for i in range(k)]
        self.directory: dict = {}          # key -> its current X: where a delete or an X-move must go
        self._cut_list = self.cuts.tolist()
        self.counters = {"batches": 0, "updates": 0, "updates_round1": 0, "steps": 0, "steps_round1": 0}

    @classmethod
    def from_rows(cls, keys, xs, ys, n_zones: int, maximum: bool = False, **kw) -> "ZonedRangeMin":
        """Zones cut at :func:`equal_count_cuts` of the rows' X, loaded with the rows (NaN X or Y: not loaded)."""
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        ok = ~(np.isnan(xs) | np.isnan(ys))
        z = cls(equal_count_cuts(xs[ok], n_zones), maximum, **kw)
        z.load(keys, xs, ys)
        return z

    def __len__(self) -> int:
        return len(self.directory)

    def zone_of(self, x: float) -> int:
        """Index of the zone owning X = x (zone i holds ``cuts[i-1] <= X < cuts[i]``)."""
        return bisect_right(self._cut_list, x)

    def load(self, keys, xs, ys) -> None:
        """Bulk-load rows into empty zones; rows with a null (NaN) X or Y are in no range, as in the group."""
        if self.directory:
            raise ValueError("load() fills empty zones; publish further rows as a batch")
        keys = np.asarray(keys, dtype=object).reshape(-1)
        xs = np.asarray(xs, dtype=np.float64).reshape(-1)
        ys = np.asarray(ys, dtype=np.float64).reshape(-1)
        ok = ~(np.isnan(xs) | np.isnan(ys))
        keys, xs, ys = keys[ok], xs[ok], ys[ok]
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            raise BadUpdate("non-finite X or Y in load")
        if len(set(keys.tolist())) != keys.size:
            raise BadUpdate("duplicate keys in load")
        zone = np.searchsorted(self.cuts, xs, side="right")
        for z in self.zones:
            sel = zone == z.index
            z.load(keys[sel], xs[sel], ys[sel])
        self.directory = dict(zip(keys.tolist(), xs.tolist()))

    # ---- routing ------------------------------------------------------------------------------------------
    def route(self, batch) -> RoutedBatch:
        """Split a batch (``key, x, y, op, seq``; see ``RangeMinGroup.apply``) into each zone's steps, in the
        batch's order, updating :attr:`directory`.  A null X or Y deletes the row, as in the group; ±inf X or
        Y is rejected (:class:`BadUpdate` naming the row) before anything changes."""
        keys, xs, ys, ops, seqs, upsert = _checked_batch(batch)
        steps = [[] for _ in self.zones]
        routed = RoutedBatch(steps)
        directory = self.directory
        cuts = self._cut_list
        nan = math.nan
        # plain tuples in ZoneStep's field order: this loop runs once per update
        for i, (key, x, y, seq, up) in enumerate(zip(keys, np.asarray(xs).tolist(), np.asarray(ys).tolist(),
                                                     np.asarray(seqs).tolist(), upsert.tolist())):
            old = directory.get(key)
            if not up:
                if old is None:
                    continue
                del directory[key]
                steps[bisect_right(cuts, old)].append((2 * i, seq, 0, True, key, old, nan, False))
            else:
                directory[key] = x
                if old is None or old == x:
                    steps[bisect_right(cuts, x)].append((2 * i, seq, 0, False, key, x, y, False))
                else:           # X-move: delete at the old x's zone, then insert at the new x's (digest C.8)
                    steps[bisect_right(cuts, old)].append((2 * i, seq, 0, True, key, old, nan, True))
                    steps[bisect_right(cuts, x)].append((2 * i + 1, seq, 1, False, key, x, y, False))
            routed.updates += 1
        return routed

    # ---- one batch ------------------------------------------------------------------------------------------
    def apply(self, batch, mode: str = "reformulated", points: SubscriptionPoints | None = None) -> pa.Table:
        """Apply one batch: route, round 1 in every zone, round 2; return what ``RangeMinGroup.apply`` returns in
        ``mode``: the messages (``reformulated``, the group's ``MESSAGE_SCHEMA``), CN+'s (``cn_plus``: round 1
        only, :func:`cn_plus_round1`), or, with the subscriptions' ``points``, the S-UN rows (``unicast``) or
        S-MN's messages (``multicast``; the runtime splits the subscriptions into x1 shards and merges their
        entries: ``subscription_shards.merge_multicast``, tests/operators/test_zone_router.py)."""
        if mode not in ("reformulated", "unicast", "multicast", "cn_plus"):
            raise ValueError(f"unknown mode {mode!r}; expected 'reformulated', 'unicast', 'multicast' or 'cn_plus'")
        if mode in ("unicast", "multicast") and points is None:
            raise ValueError(f"{mode} needs the subscriptions' points")
        routed = self.route(batch)
        if mode == "cn_plus":
            firsts = [cn_plus_round1(z, s) for z, s in zip(self.zones, routed.steps)]
            self._count(routed, [r for _, r in firsts])
            moved = {s for _, r in firsts for s in r.old_values}
            return merge_messages([cn_plus_messages(self.group_id, u) for u, _ in firsts], moved, CN_PLUS_SCHEMA)
        firsts = [apply_round1(z, s) for z, s in zip(self.zones, routed.steps)]
        second = apply_round2([r for _, r in firsts], self.zones)
        merged = [m for msgs, _ in firsts for m in msgs] + second
        merged.sort(key=lambda t: t[0])
        self._count(routed, [r for _, r in firsts])
        table = messages_table(self.group_id, self.maximum, merged)
        if mode == "reformulated":
            return table
        old_values = {s: v for _, r in firsts for s, v in r.old_values.items()}
        if mode == "multicast":
            rows = multicast(points, table, old_values)
            return rows.select(MULTICAST_SCHEMA.names).cast(MULTICAST_SCHEMA)
        rows = unicast(points, table, old_values)
        return rows.select(UNICAST_SCHEMA.names).cast(UNICAST_SCHEMA)

    def _count(self, routed: RoutedBatch, round1: list) -> None:
        c = self.counters
        c["batches"] += 1
        c["updates"] += routed.updates
        deferred_updates = {d.version // 2 for r in round1 for d in r.deferred}
        c["updates_round1"] += routed.updates - len(deferred_updates)
        n_steps = sum(len(s) for s in routed.steps)
        c["steps"] += n_steps
        c["steps_round1"] += n_steps - sum(len(r.deferred) for r in round1)

    # ---- results and introspection ---------------------------------------------------------------------------
    def range_value(self, x1: float, x2: float):
        """Current MIN (MAX) over ``x1 <= X <= x2`` across the zones, None when the range is empty."""
        v = min(z.core.tree.range_min(x1, x2) for z in self.zones)
        return None if v == _INF else (-v if self.maximum else v)

    def range_values(self, x1s, x2s) -> np.ndarray:
        """Vectorised :meth:`range_value`; NaN where empty."""
        v = np.minimum.reduce([z.core.tree.range_min_many(x1s, x2s) for z in self.zones])
        v[v == _INF] = np.nan
        return -v if self.maximum else v

    def minima(self) -> list:
        """Each zone's MIN (MAX), None for an empty zone: the few numbers every zone knows (000 §2.3.2)."""
        return [z.minimum() for z in self.zones]

    def stats(self) -> dict:
        """Totals (updates and steps, and how many were settled in round 1) and one dict per zone."""
        c = dict(self.counters)
        c["round1_fraction"] = c["updates_round1"] / c["updates"] if c["updates"] else None
        c["zones"] = [{"zone": z.index, "lo": z.lo, "hi": z.hi, "rows": len(z), **z.stats,
                       "staircase_lengths": (len(z._left.ms), len(z._right.ms))} for z in self.zones]
        return c

    def snapshot(self) -> ZonesSnapshot:
        return ZonesSnapshot(self.group_id, self.maximum, self.cuts.copy(), [z.snapshot() for z in self.zones])

    @classmethod
    def restore(cls, snap: ZonesSnapshot, *, leaf_capacity: int = 256) -> "ZonedRangeMin":
        z = cls(snap.cuts, snap.maximum, group_id=snap.group_id, leaf_capacity=leaf_capacity)
        if len(snap.zones) != len(z.zones):
            raise ValueError(f"snapshot has {len(snap.zones)} zones for {len(z.cuts)} cut points")
        z.zones = [Zone.restore(s, leaf_capacity=leaf_capacity) for s in snap.zones]
        z.directory = {k: x for s in snap.zones for k, x in zip(s.keys.tolist(), s.xs.tolist())}
        return z


def messages_table(group_id: str, maximum: bool, steps: Sequence) -> pa.Table:
    """``[(version, seq, step, (Message, …)), …]`` (in version order) as the group's reformulated output
    (``MESSAGE_SCHEMA``), a step's messages in the core's order."""
    seqs, step_nos, msgs = [], [], []
    for _, seq, step, ms in steps:
        seqs += [seq] * len(ms)
        step_nos += [step] * len(ms)
        msgs += ms
    n = len(msgs)
    value, inner_l, inner_r, outer_l, outer_r = zip(*msgs) if n else ((),) * 5
    f64 = pa.float64()
    return pa.table({
        "group_id": pa.array([group_id] * n, pa.string()),
        "seq": pa.array(seqs, pa.int64()), "step": pa.array(step_nos, pa.int8()),
        "op": pa.array(["NEW_MAX" if maximum else "NEW_MIN"] * n, pa.string()),
        "new_value": pa.array(value, f64),          # None: the range became empty (null)
        "inner_l": pa.array(inner_l, f64), "inner_r": pa.array(inner_r, f64),
        "outer_l": pa.array(outer_l, f64), "outer_r": pa.array(outer_r, f64),
    }, schema=MESSAGE_SCHEMA)


# --------------------------------------------------------------------------------------------------------------
# one zone as a runtime replica: the zone-side router, the base, the log entry (runtime/zones.py runs these)
# --------------------------------------------------------------------------------------------------------------
def route_zone(zone: Zone, batch) -> list:
    """This zone's steps of a whole batch, built in the zone alone (a Spark task that is sent every row).

    The same steps :meth:`ZonedRangeMin.route` gives this zone, with one difference: routing needs each key's
    current x, and a zone knows it only for the keys it holds.  An upsert of a key this zone does not hold, at
    an x it owns, is an insert -- of a key that is new to the group (``route``: version ``2i``, step 0) or of
    an X-move's second half whose delete another zone emits (version ``2i + 1``, step 1); the zone cannot
    tell which, so it emits ``2i + 1`` / step 1 *tentatively*.  Both versions order it the same way against
    every other step (no other step has version ``2i`` when the key is new), so the zone's state and its
    round-1 / round-2 answers are the same; only the ``step`` column of its messages may be wrong, and
    :func:`fix_steps` corrects it from the X-moves every zone reports (``Round1.old_values``: an X-move's
    delete half always records its seq).  No key -> x directory is needed anywhere (000 §2.3.2: the owner of
    (x, x) alone handles an update at x).

    A null X or Y deletes the row, as in the group; ±inf X or Y raises :class:`BadUpdate` naming the row
    (every zone raises the same error, before any step)."""
    keys, xs, ys, ops, seqs, upsert = _checked_batch(batch)
    pos = zone.core.tree._pos          # key -> (x, internal y): the keys this zone holds before the batch
    moved: dict = {}                   # key -> its x in this zone, or None (left the zone), within the batch
    lo, hi = zone.lo, zone.hi
    nan = math.nan
    steps = []
    for i, (key, x, y, seq, up) in enumerate(zip(keys, np.asarray(xs).tolist(), np.asarray(ys).tolist(),
                                                 np.asarray(seqs).tolist(), upsert.tolist())):
        if key in moved:
            old = moved[key]
        else:
            held = pos.get(key)
            old = None if held is None else held[0]
        mine = up and lo <= x < hi
        if old is not None:                         # this zone holds the key: it knows the whole story
            if not up:
                steps.append((2 * i, seq, 0, True, key, old, nan, False))
                moved[key] = None
            elif old == x:
                steps.append((2 * i, seq, 0, False, key, x, y, False))
            else:                                   # an X-move: its delete here, its insert here or elsewhere
                steps.append((2 * i, seq, 0, True, key, old, nan, True))
                if mine:
                    steps.append((2 * i + 1, seq, 1, False, key, x, y, False))
                moved[key] = x if mine else None
        elif mine:                                  # new to this zone: an insert, tentatively step 1
            steps.append((2 * i + 1, seq, 1, False, key, x, y, False))
            moved[key] = x
    return steps


def fix_steps(step, seq, moved) -> np.ndarray:
    """:func:`route_zone`'s tentative steps corrected: a step-1 message whose seq is not an X-move (no zone
    reported a delete half for it: ``moved``, the union of every zone's ``Round1.old_values``) was an insert
    of a new key, step 0.

    >>> fix_steps([0, 1, 1], [5, 6, 7], {6}).tolist()
    [0, 1, 0]
    """
    step = np.asarray(step, dtype=np.int8).copy()
    seq = np.asarray(seq, dtype=np.int64)
    if step.size:
        lonely = (step == 1) & ~np.isin(seq, np.fromiter(moved, dtype=np.int64, count=len(moved)))
        step[lonely] = 0
    return step


def cn_plus_round1(zone: Zone, steps: Sequence[ZoneStep]) -> tuple[list, Round1]:
    """CN+'s server side in one zone (000 §2.2.2), with the zone's round 1 (state only): ``(updates, round1)``,
    ``updates`` = ``[(version, seq, step, key, x, new Y or NaN), …]``, one per step that changes the tuple.

    CN+ has no server work: "each update enters the network as it is" -- a deletion ⟨key, old X, null⟩, an
    insertion or a new Y ⟨key, X, Y⟩, an X-move both (steps 0 and 1) -- and the network and the subscribers do
    the rest (``cn_plus.py``).  What the server must know is each key's current (X, Y): whether a step
    deletes, moves or changes anything at all (an upsert to the same X and Y sends nothing, as in
    ``RangeMinGroup``).  That is the tuple, and the zone owning its X holds it (the router hands a delete or
    an X-move's first half to the zone holding the key, ``route_zone``), so no step reads another zone:
    every CN+ message is settled in round 1, and there is no round 2 (no Mar walk, no staircase read; the
    edge staircases are still kept, for the S-CN and S-MN publishes that may follow).  Read before the state
    change, which :func:`apply_round1` then makes without reformulating."""
    core = zone.core
    current: dict = {}          # key -> its Y (user sign) as of the steps so far; None: not in this zone
    out = []
    nan = math.nan
    for version, seq, step, delete, key, x, y, _ in steps:
        if key in current:
            prev = current[key]
        else:
            held = core.get(key)
            prev = None if held is None else held[1]
        if delete:
            current[key] = None
            out.append((version, seq, step, key, x, nan))
        else:
            current[key] = y
            if prev is None or prev != y:   # same X (a held key), same Y: nothing changes, nothing is sent
                out.append((version, seq, step, key, x, y))
    _, r1 = apply_round1(zone, steps, reformulate=False)
    return out, r1


def cn_plus_messages(group_id: str, updates: Sequence) -> pa.Table:
    """:func:`cn_plus_round1`'s updates as CN+'s messages (``CN_PLUS_SCHEMA``, as ``RangeMinGroup.apply(...,
    'cn_plus')`` builds them: INNER_L = INNER_R = X, cutoff (-inf, +inf), the key's text) plus the
    :data:`ORDER_COLUMNS` (one message per step: ``_i`` is 0)."""
    n = len(updates)
    version, seq, step, keys, x, y = zip(*updates) if n else ((),) * 6
    vals = np.asarray(y, dtype=np.float64)
    xs = pa.array(x, pa.float64())
    table = pa.table({
        "group_id": pa.array([group_id] * n, pa.string()),
        "seq": pa.array(seq, pa.int64()), "step": pa.array(step, pa.int8()),
        "op": pa.array(["CN_PLUS"] * n, pa.string()),
        "new_value": pa.array(vals, pa.float64(), mask=np.isnan(vals)),
        "inner_l": xs, "inner_r": xs,
        "outer_l": pa.array(np.full(n, -np.inf)), "outer_r": pa.array(np.full(n, np.inf)),
        "item_key": pa.array([key_text(k) for k in keys], pa.string()),
    }, schema=CN_PLUS_SCHEMA)
    return table.append_column("_v", pa.array(version, pa.int64())).append_column(
        "_i", pa.array(np.zeros(n, dtype=np.int64)))


#: the columns a zone's messages carry beyond ``MESSAGE_SCHEMA`` until they are merged: the step's version
#: (the batch order) and the message's index within its source (the core's order within a step)
ORDER_COLUMNS = ("_v", "_i")


def versioned_messages(group_id: str, maximum: bool, steps: Sequence) -> pa.Table:
    """:func:`messages_table` plus the :data:`ORDER_COLUMNS`, for merging the zones' outputs later."""
    table = messages_table(group_id, maximum, steps)
    versions = [v for v, _, _, ms in steps for _ in ms]
    return table.append_column("_v", pa.array(versions, pa.int64())).append_column(
        "_i", pa.array(np.arange(table.num_rows, dtype=np.int64)))


def merge_messages(tables: Sequence[pa.Table], moved, schema: pa.Schema = MESSAGE_SCHEMA) -> pa.Table:
    """Round 1's and round 2's messages (:func:`versioned_messages`) as one group's output: steps corrected
    (:func:`fix_steps`), in batch order -- by version, then the core's order within the step (a step's messages
    all come from one source: the zone that settled it, or round 2) -- ``MESSAGE_SCHEMA``; CN+'s
    (:func:`cn_plus_messages`, one per step) the same way with ``schema=CN_PLUS_SCHEMA``."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return schema.empty_table()
    t = pa.concat_tables(tables)
    t = t.sort_by([("_v", "ascending"), ("_i", "ascending")])
    step = fix_steps(t.column("step").to_numpy(), t.column("seq").to_numpy(), moved)
    t = t.set_column(t.schema.get_field_index("step"), "step", pa.array(step, pa.int8()))
    return t.select(schema.names)


def steps_table(batch: pa.Table, steps: Sequence) -> pa.Table:
    """A zone's steps as its log entry (Arrow): the key column keeps the batch's key type."""
    if not steps:
        return pa.table({"version": pa.array([], pa.int64()), "seq": pa.array([], pa.int64()),
                         "step": pa.array([], pa.int8()), "delete": pa.array([], pa.bool_()),
                         "key": batch.column("key").slice(0, 0), "x": pa.array([], pa.float64()),
                         "y": pa.array([], pa.float64()), "x_move": pa.array([], pa.bool_())})
    version, seq, step, delete, _, x, y, x_move = (list(c) for c in zip(*steps))
    return pa.table({"version": pa.array(version, pa.int64()), "seq": pa.array(seq, pa.int64()),
                     "step": pa.array(step, pa.int8()), "delete": pa.array(delete, pa.bool_()),
                     "key": batch.column("key").take(pa.array([v // 2 for v in version], pa.int64())),
                     "x": pa.array(x, pa.float64()), "y": pa.array(y, pa.float64()),
                     "x_move": pa.array(x_move, pa.bool_())})


def steps_of(table: pa.Table) -> list:
    """A log entry (:func:`steps_table`) back as step tuples."""
    cols = [table.column(c).to_pylist() for c in ZoneStep._fields]
    return list(zip(*cols))


@dataclass
class ZoneBase:
    """One zone replica's base (pickled in its base file): the zone's rows (:meth:`Zone.snapshot`)."""

    group_id: str
    snapshot: ZoneSnapshot

    def build(self) -> "ZoneOperator":
        return ZoneOperator(self.group_id, Zone.restore(self.snapshot))


class ZoneOperator:
    """A zone as the runtime's worker cache holds it: :meth:`apply` replays a logged entry (its own steps)."""

    stateless = False

    def __init__(self, group_id: str, zone: Zone):
        self.group_id, self.zone = group_id, zone

    def route(self, batch) -> list:
        return route_zone(self.zone, batch)

    def round1(self, steps) -> tuple[list, Round1]:
        return apply_round1(self.zone, steps)

    def round1_messages(self, steps, cn_plus: bool = False) -> tuple[pa.Table, Round1]:
        """Round 1 of this zone's ``steps`` as the table its task writes: S-CN's messages
        (:func:`versioned_messages`; the deferred steps' come from round 2), or with ``cn_plus`` CN+'s
        (:func:`cn_plus_round1`: every one of them, nothing deferred)."""
        if cn_plus:
            updates, r1 = cn_plus_round1(self.zone, steps)
            return cn_plus_messages(self.group_id, updates), r1
        msgs, r1 = apply_round1(self.zone, steps)
        return versioned_messages(self.group_id, self.zone.maximum, msgs), r1

    def apply(self, entry: pa.Table, mode: str = "none") -> pa.Table:
        """Replay one logged entry (this zone's steps of a batch); messages are not kept."""
        apply_round1(self.zone, steps_of(entry))
        return MESSAGE_SCHEMA.empty_table()


def zone_bases(group_id: str, keys, xs, ys, n_zones: int, maximum: bool,
               cuts: np.ndarray | None = None) -> tuple[np.ndarray, list]:
    """``(cuts, [ZoneBase, …])``: a group's rows cut at :func:`equal_count_cuts` of X into (at most) ``n_zones``
    zones (``cuts`` given: at those); rows with a null (NaN) X or Y are in no range and in no zone, as in the
    group."""
    keys = np.asarray(keys, dtype=object).reshape(-1)
    xs = np.asarray(xs, dtype=np.float64).reshape(-1)
    ys = np.asarray(ys, dtype=np.float64).reshape(-1)
    ok = ~(np.isnan(xs) | np.isnan(ys))
    keys, xs, ys = keys[ok], xs[ok], ys[ok]
    cuts = equal_count_cuts(xs, n_zones) if cuts is None else np.asarray(cuts, dtype=np.float64)
    bounds = [_NINF, *cuts.tolist(), _INF]
    k = len(bounds) - 1
    where = np.searchsorted(cuts, xs, side="right")
    out = []
    for i in range(k):
        sel = where == i
        out.append(ZoneBase(group_id, ZoneSnapshot(i, k, bounds[i], bounds[i + 1], maximum, keys[sel],
                                                   xs[sel].copy(), ys[sel].copy())))
    return cuts, out


class ZonedView:
    """A zoned group as the driver reads it (``result``, the ``deliver()`` side's seed, EXPLAIN, stats): the
    zones (materialised by ``zones()`` only when a value is asked for) and the group's subscriptions."""

    def __init__(self, group_id: str, maximum: bool, points: SubscriptionPoints, zones, info: dict, each=None):
        self.group_id, self.maximum, self.points = group_id, maximum, points
        self._zones, self._loaded = zones, None
        self.info = info      # cuts, rows per zone, shards, counters (control/zones.py)
        # ``each(path, args)``: the values of ``zone.<path>(*args)`` over the zones -- computed where the zones
        # live (runtime/remote.py) for a group too large to build on the driver; by default, on the zones here
        self._each = each if each is not None else self._each_here

    def _each_here(self, path: tuple, args: tuple) -> list:
        out = []
        for z in self.zones():
            target = z
            for attr in path:
                target = getattr(target, attr)
            out.append(target(*args))
        return out

    def zones(self) -> list:
        if self._loaded is None:
            self._loaded = list(self._zones())
        return self._loaded

    @property
    def core(self) -> "ZonedView":
        return self     # what family.subscribers reads: range_values and rows

    def range_value(self, x1: float, x2: float):
        # DS-CN (000 §2.3.2): the zones split X, so a range's minimum is the least of the zones' minima over it
        v = min(self._each(("core", "tree", "range_min"), (x1, x2)), default=_INF)
        return None if v == _INF else (-v if self.maximum else v)

    def range_values(self, x1s, x2s) -> np.ndarray:
        x1s = np.asarray(x1s, dtype=np.float64)
        parts = self._each(("core", "tree", "range_min_many"), (x1s, np.asarray(x2s, dtype=np.float64)))
        v = np.minimum.reduce(parts) if parts else np.full(x1s.shape, _INF)
        v = np.asarray(v, dtype=np.float64)
        v[v == _INF] = np.nan
        return -v if self.maximum else v

    def rows(self) -> tuple[list, np.ndarray, np.ndarray]:
        parts = self._each(("core", "rows"), ())
        keys = [k for p in parts for k in p[0]]
        return keys, np.concatenate([p[1] for p in parts] or [np.empty(0)]), \
            np.concatenate([p[2] for p in parts] or [np.empty(0)])

    def result(self, sub_id: str):
        x1, x2 = self.points.bounds(sub_id)
        return self.range_value(x1, x2)

    def results(self, ids) -> np.ndarray:
        slots = self.points.slots_of(ids)
        return self.range_values(self.points.x1[slots], self.points.x2[slots])

    def __len__(self) -> int:
        return len(self.points)

    def stats(self) -> dict:
        i = self.info
        c = dict(i.get("counters", {}))
        c["round1_fraction"] = c["updates_round1"] / c["updates"] if c.get("updates") else None
        core: dict = {}     # the zones' cores' counters as their last tasks reported them (replays included)
        for z in i["zones"]:
            for k, v in (z.get("core") or {}).items():
                core[k] = core.get(k, 0) + v
        return {"zoned": True, **core, "subscriptions": len(self.points), "tuples": int(sum(i["zone_rows"])),
                **c, "cuts": list(i["cuts"]), "zones": i["zones"], "shards": i["shards"],
                "last_publish_s": i.get("timings", {})}

    def explain(self) -> dict:
        i = self.info
        agg = "NEW_MAX" if self.maximum else "NEW_MIN"
        return {
            "class": "RANGE_MAX" if self.maximum else "RANGE_MIN",
            "group": self.group_id,
            "subscriptions": len(self.points),
            "tuples": int(sum(i["zone_rows"])),
            "algorithm": "DS-CN (000 §2.3.2): the S-CN server split into X zones; update classification "
                         "(ignorable/good/bad) + Mar, upper Hull, EMar reformulation (000 §2-3) in each zone",
            "zones": f"{len(i['zone_rows'])} X zones cut at {_fmt_cuts(i['cuts'])}, rows per zone "
                     f"{list(i['zone_rows'])}: one Spark task each (round 1: the updates settled inside a zone); "
                     f"round 2 (walks that cross a zone edge, against the edge staircases) on the driver",
            "subscription shards": f"{len(i['shard_subscriptions'])} shards by x1 cut at "
                                   f"{_fmt_cuts(i['shard_cuts'])}, subscriptions per shard "
                                   f"{list(i['shard_subscriptions'])}: one Spark task each (unicast matching)",
            "data index": "one A2B-tree per zone on its slice of X, with min-Y fields and two edge staircases",
            "message format": f"<{agg}, INNER_L, INNER_R, OUTER_L, OUTER_R> (as the whole group's)",
        }


def _fmt_cuts(cuts) -> str:
    return "[" + ", ".join(f"{c:g}" for c in cuts) + "]"
