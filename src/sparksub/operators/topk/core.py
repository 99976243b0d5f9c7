"""Range top-k continuous queries: influence regions, Paint-Dense, Paint-Sparse, Paint-Batch, Paint(ε).

Pure-Python core (numpy + sortedcontainers, no pyspark) of the RANGE_TOPK subscription class::

    SELECT key, x, y FROM t WHERE x BETWEEN x1 AND x2 ORDER BY y ASC LIMIT k

Source
------
002 = A. Yu, P. K. Agarwal, J. Yang, "Processing and Notifying Range Top-k Subscriptions", ICDE 2012.
§II-A (problem, message format, subscriber protocol), §II-B (the index queries ``first_k`` / ``min_y``),
§II-C (subscription space, influence regions, Lemma 2), §III-A (Paint-Dense, exposed objects, Eq. (1)),
§III-B (Paint-Sparse: essential exposed objects, the greedy merge), §IV-A (Paint-Batch), §IV-B (Paint(ε)),
§V (the Unicast and CN-Relax baselines, the call counters of Tables III-IV).

Semantics
---------
* Objects are ``(key, x, y)`` with finite float x and y; keys are str or int, comparable among themselves.
  An object's **rank value** is the pair ``(y, key)``: ties in y are broken by key (the smaller key ranks
  first), so every object has a distinct rank value and 002's "all y distinct" assumption (§II-A) holds on the
  pairs.  Many objects may share an x; they all lie in the same quadrant θ (§II-C).
* A subscription is ``(x1, x2, k)`` with ``x1 <= x2`` (either end may be infinite, i.e. open) and **k a
  column of the subscriptions**: every subscription has its own k >= 1.  002 fixes one k; here every message
  carries the k it is meant for and the network matches it only to subscriptions with that k.  The server
  runs one sweep with ``kmax`` = the largest k in use and derives every smaller k's regions from the same
  ``first_k`` lists (a list of the first kmax objects starts with the first k).
* ``descending=True`` orders by ``y DESC``: y is negated on the way in and out (as ``RangeMinCore(maximum)``).

Messages (§II-A)
----------------
``Msg(ℓI, rI, ℓO, rO, x, y)`` is :class:`TopkMessage` ``(k, inner_l, inner_r, outer_l, outer_r, key, x, y)``;
it reaches subscription ``(x1, x2, k')`` iff ``k' == k`` (``k is None``: every k) and
``[inner_l, inner_r] ⊆ [x1, x2] ⊆ (outer_l, outer_r)``, with an infinite outer bound also admitting the same
infinite subscription end (:func:`reaches`, the predicate of ``range_min.matches``).  In the subscription
space S = {(ℓ, r)} a message is the rectangle ``ℓ ∈ (outer_l, inner_l], r ∈ [inner_r, outer_r)``.
``y is None`` is a deletion (002 footnote 4: an update to y = ∞).

Subscriber protocol (§II-A; :class:`TopkSubscriber`): on a message with object o, if the local list holds o
its (x, y) is replaced; otherwise the list becomes the top k of list ∪ {o}.  A deletion removes o.  Messages
of one update are applied in the order emitted (002 footnote 6: an object's new value before its replacement).

Algorithms (:class:`TopkCore` ``mode``)
---------------------------------------
* ``"dense"``: Paint-Dense (§III-A, Theorem 1), subscription-oblivious (it only needs the set of k values).
  Rank-raising update (and insertion): tile IR_new(i) by its staircase columns (Lemma 2).  Rank-lowering
  update (and deletion): tile IR_old(i) with i's new value, then sweep i's value up, finding each exposed
  object j with ``min_y(Π^z(i), z)`` and tiling ΔIR(j) = θ_i^{k|y_j-ε} ∩ θ_j (Eq. (1)) with j.
* ``"sparse"``: Paint-Sparse (§III-B, Theorem 2): same tiles, each snapped to the subscriptions inside it
  (empty tiles dropped: no message reaches no subscription), consecutive tiles greedily merged while the
  merged box covers no extra subscription; the sweep only visits objects inside the apex (ℓ^z, r^z) of the
  smallest quadrant enclosing the subscriptions still in IR^z(i) (essential exposed objects).
* ``epsilon``: Paint-Dense(ε) / Paint-Sparse(ε) (§IV-B, Theorem 4): tiles of ``g = max(1, ⌊εk⌋)``
  consecutive columns (diagonal cells) are merged into their bounding box, so a subscription receives o only
  if o ranks within ``k + g - 1 <= (1 + ε)k`` (before or after the update); every change is still delivered.
* ``"unicast"``: the Unicast baseline (§V): one :class:`UnicastMessage` per affected subscription, found by
  a rectangle query over the subscriptions and per-subscription ``min_y`` calls.
* ``"relax"``: CN-Relax (§V): ``Msg(x, x, -inf, inf, x, y)`` to every subscription whose range contains x; the
  subscriber (:class:`RelaxSubscriber`) keeps every object in its range.
* :meth:`TopkCore.apply_batch`: Paint-Batch (§IV-A, Theorem 3) over dense or sparse; coalesced, split into
  ↓ and ↑ events, sent in three phases (leavers that cannot be pushed out, then falling values and entrants in
  ascending order of old value, then the ↑ objects that stay): every subscriber gets the fewest messages
  possible when, as in 002 footnote 6, a leaving object's message precedes its replacements
  (:func:`batch_minimum` gives that minimum and the unconstrained one).

Insertions are updates from y = ∞, deletions updates to y = ∞, an x-move is a deletion step then an insertion
step (002 footnote 4); a subscriber applies the two steps in order.

Counters (002 Tables III-IV): ``first_k``, ``min_y``, ``snap`` calls, ``messages``, ``updates``; also
``exposed`` (objects met by sweeps), ``find`` (the A2B-tree's upper-tier searches: FINDL/FINDR at leaf
granularity, :class:`TopkIndex`) and, for Unicast, ``checked``: the subscriptions examined, which is what 002's
Tables III-IV count as Unicast's min_y calls (one per subscription in the box of Π_old ∪ Π_new, every update;
see :meth:`TopkCore._unicast`).
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterable, Sequence
from typing import NamedTuple

import numpy as np

from sparksub.errors import (
    BadUpdate,
    DuplicateSubscription,
    InvalidSubscription,
    UnknownSubscription,
)
from sparksub.operators.shared.point_index import PointIndex2D
from sparksub.operators.range_min.core import A2BTree, matches

__all__ = [
    "MODES", "Outcome", "RelaxSubscriber", "Step", "Subscriptions", "TopkCore", "TopkIndex", "TopkMessage",
    "TopkSubscriber", "UnicastMessage", "batch_minimum", "coarsen", "deliver", "diagonal_cells", "reaches",
    "staircase_tiles",
]

_INF = math.inf
_NINF = -math.inf
_nextafter = math.nextafter
_isfinite = math.isfinite
MODES = ("dense", "sparse", "unicast", "relax")


class _Top:
    """A key above every key: ``(y, _TOP)`` is the largest rank value with that y."""

    def __lt__(self, other):
        return False

    def __gt__(self, other):
        return other is not self

    def __le__(self, other):
        return other is self

    def __ge__(self, other):
        return True

    def __repr__(self):
        return "TOP"


_TOP = _Top()


# --------------------------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------------------------
class TopkMessage(NamedTuple):
    """``Msg(ℓI, rI, ℓO, rO, x, y)`` of 002 §II-A for subscriptions with this ``k`` (None: every k).

    ``y`` is in the user's sign; ``None`` means the object was deleted."""

    k: int | None
    inner_l: float
    inner_r: float
    outer_l: float
    outer_r: float
    key: Hashable
    x: float
    y: float | None


class UnicastMessage(NamedTuple):
    """Unicast (002 §V): the change to one subscription's top-k, captured by one object.

    The subscriber drops ``replaces`` (if not None), then applies (key, x, y) by the §II-A protocol."""

    sid: Hashable
    key: Hashable
    x: float
    y: float | None
    replaces: Hashable | None = None


class Step(NamedTuple):
    """One Δ (an x-move is two): ``kind`` in {'ignorable', 'raise', 'lower'} and its messages."""

    kind: str
    messages: tuple


class Outcome(NamedTuple):
    """What one :meth:`TopkCore.upsert` / :meth:`TopkCore.delete` / :meth:`TopkCore.apply_batch` produced."""

    steps: tuple[Step, ...]

    @property
    def messages(self) -> tuple:
        if len(self.steps) == 1:  # most updates: no tuple rebuilt (read twice per update, unicast)
            return self.steps[0].messages
        return tuple(m for s in self.steps for m in s.messages)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(s.kind for s in self.steps)


def reaches(msg: TopkMessage, x1: float, x2: float, k: int) -> bool:
    """Whether the network delivers ``msg`` to subscription (x1, x2, k) (002 §II-A; see module docstring).

    >>> m = TopkMessage(3, 5.0, 5.0, 2.0, 9.0, "a", 5.0, 1.0)
    >>> reaches(m, 3.0, 8.0, 3), reaches(m, 3.0, 8.0, 2), reaches(m, 2.0, 8.0, 3)
    (True, False, False)
    >>> reaches(TopkMessage(None, 5.0, 5.0, -math.inf, math.inf, "a", 5.0, 1.0), -math.inf, 5.0, 7)
    True
    """
    if msg.k is not None and msg.k != k:
        return False
    return matches((None, msg.inner_l, msg.inner_r, msg.outer_l, msg.outer_r), x1, x2)


# --------------------------------------------------------------------------------------------------------------
# Influence-region geometry (pure helpers; a rectangle is (inner_l, inner_r, outer_l, outer_r), tag)
# --------------------------------------------------------------------------------------------------------------
def _nonempty(il: float, ir: float, ol: float, orr: float) -> bool:
    # ℓ ∈ (ol, il] and r ∈ [ir, orr); an infinite outer bound admits the infinite subscription end
    return (ol < il or ol == _NINF) and (ir < orr or orr == _INF)


def staircase_tiles(x0: float, left: Sequence[float], right: Sequence[float], K: int) -> list[tuple]:
    """Tiles of θ_i^{≤K} by columns (002 Lemma 2, Fig. 2(a)): one rectangle per number a of left objects.

    ``left`` = x of the objects west of x0 ranking before i, nearest first (``first_k(x0, ·, ←)``), ``right``
    the same eastwards; ``K`` = k minus the objects at x0 ranking before i.  Returns ``(rect, a)`` pairs,
    ``rect = (inner_l, inner_r, outer_l, outer_r)``; empty columns (x ties) are left out.

    >>> [r for r, a in staircase_tiles(5.0, [4.0, 2.0], [7.0], 2)]
    [(5.0, 5.0, 4.0, inf), (4.0, 5.0, 2.0, 7.0)]
    >>> staircase_tiles(5.0, [], [], 3)
    [((5.0, 5.0, -inf, inf), 0)]
    """
    out = []
    nl, nr = len(left), len(right)
    for a in range(min(K - 1, nl) + 1):
        il = x0 if a == 0 else left[a - 1]
        ol = left[a] if a < nl else _NINF
        b = K - 1 - a  # right objects still allowed in this column
        orr = right[b] if b < nr else _INF
        if _nonempty(il, x0, ol, orr):
            out.append(((il, x0, ol, orr), a))
    return out


def diagonal_cells(x0: float, left: Sequence[float], right: Sequence[float], K: int, xj: float) -> list[tuple]:
    """ΔIR(j) = θ_i^{K} ∩ θ_j (002 Eq. (1), Fig. 2(c)): the level-K cells of i's region that contain x_j.

    Returns ``(rect, a)`` pairs along the diagonal, a = left objects counted in the cell.

    >>> [r for r, a in diagonal_cells(5.0, [4.0, 2.0], [7.0], 2, 3.0)]
    [(3.0, 5.0, 2.0, 7.0)]
    >>> [r for r, a in diagonal_cells(5.0, [4.0], [7.0, 9.0], 2, 5.0)]
    [(5.0, 7.0, 4.0, 9.0), (4.0, 5.0, -inf, 7.0)]
    """
    out = []
    nl, nr = len(left), len(right)
    for a in range(min(K - 1, nl) + 1):
        b = K - 1 - a
        if b > nr:
            continue
        il = x0 if a == 0 else left[a - 1]
        ol = left[a] if a < nl else _NINF
        ir = x0 if b == 0 else right[b - 1]
        orr = right[b] if b < nr else _INF
        if not _nonempty(il, ir, ol, orr):
            continue
        if xj < x0:  # θ_j: ℓ <= x_j
            il = min(il, xj)
        elif xj > x0:  # θ_j: r >= x_j
            ir = max(ir, xj)
        if _nonempty(il, ir, ol, orr):
            out.append(((il, ir, ol, orr), a))
    return out


def bounding_rect(rects: Iterable[tuple]) -> tuple:
    """Smallest message rectangle containing all of ``rects``.

    >>> bounding_rect([(5.0, 5.0, 4.0, 9.0), (4.0, 5.0, 2.0, 7.0)])
    (5.0, 5.0, 2.0, 9.0)
    """
    rects = list(rects)
    return (max(r[0] for r in rects), min(r[1] for r in rects),
            min(r[2] for r in rects), max(r[3] for r in rects))


def coarsen(tiles: list[tuple], g: int) -> list[tuple]:
    """Paint(ε) (002 §IV-B, Fig. 3(c)-(d)): merge the tiles whose column index a falls in the same block of
    g consecutive columns into their bounding box.  Inside a merged box i's level stays within ``k ± (g-1)``.

    >>> coarsen([((5.0, 5.0, 4.0, 9.0), 0), ((4.0, 5.0, 2.0, 7.0), 1), ((2.0, 5.0, 1.0, 6.0), 2)], 2)
    [((5.0, 5.0, 2.0, 9.0), 0), ((2.0, 5.0, 1.0, 6.0), 2)]
    """
    if g <= 1:
        return tiles
    out: list[tuple] = []
    block = None
    first_a = 0
    group: list[tuple] = []
    for rect, a in tiles:
        if a // g != block and group:
            out.append((bounding_rect(group), first_a))
            group = []
        if not group:
            first_a = a
        block = a // g
        group.append(rect)
    if group:
        out.append((bounding_rect(group), first_a))
    return out


# Column regions (Paint-Batch, 002 §IV-A): a region of the subscription space inside one quadrant θ_i, as a list
# of columns (lo, hi, r_lo, r_hi) = ℓ ∈ (lo, hi], r ∈ [r_lo, r_hi), disjoint in ℓ and ordered west-going (hi
# descending).  lo = -inf admits ℓ = -inf and r_hi = inf admits r = inf, as in message rectangles (§II-A).
def _l_nonempty(lo: float, hi: float) -> bool:
    return lo < hi or lo == _NINF


def _r_nonempty(rlo: float, rhi: float) -> bool:
    return rlo < rhi or rhi == _INF


def stair_columns(x0: float, left: Sequence[float], right: Sequence[float], K: int) -> list[tuple]:
    """θ_i^{≤K} (002 Lemma 2) as columns; empty for K <= 0.

    >>> stair_columns(5.0, [4.0, 2.0], [7.0], 2)
    [(4.0, 5.0, 5.0, inf), (2.0, 4.0, 5.0, 7.0)]
    """
    if K <= 0:
        return []
    return [(ol, il, x0, orr) for (il, _, ol, orr), _ in staircase_tiles(x0, left, right, K)]


def columns_and(fa: list, fb: list) -> list:
    """Intersection of two column regions (both west-going and disjoint in ℓ: one merge pass).

    >>> columns_and([(4.0, 5.0, 5.0, 9.0), (2.0, 4.0, 5.0, 7.0)], stair_columns(5.0, [3.0], [6.0], 2))
    [(4.0, 5.0, 5.0, 9.0), (3.0, 4.0, 5.0, 7.0), (2.0, 3.0, 5.0, 6.0)]
    """
    out = []
    i = j = 0
    while i < len(fa) and j < len(fb):
        a, b = fa[i], fb[j]
        lo, hi = max(a[0], b[0]), min(a[1], b[1])
        if _l_nonempty(lo, hi):
            rlo, rhi = max(a[2], b[2]), min(a[3], b[3])
            if _r_nonempty(rlo, rhi):
                out.append((lo, hi, rlo, rhi))
        if a[0] >= b[0]:  # a ends first going west
            i += 1
        else:
            j += 1
    return out


def columns_minus_stair(fa: list, stair: list) -> list:
    """``fa`` minus a staircase with the same apex x0 (every staircase column starts at r = x0, at or below
    the r of ``fa``): where a staircase column covers ℓ, keep r >= its bound; elsewhere keep all.

    >>> A = stair_columns(5.0, [4.0, 2.0], [7.0, 9.0], 3)
    >>> columns_minus_stair(A, stair_columns(5.0, [4.0], [6.0], 1))
    [(4.0, 5.0, 6.0, inf), (2.0, 4.0, 5.0, 9.0), (-inf, 2.0, 5.0, 7.0)]
    >>> columns_minus_stair(A, stair_columns(5.0, [4.0], [7.0], 2))
    [(2.0, 4.0, 7.0, 9.0)]
    """
    out = []
    for a in fa:
        edge = a[1]  # ℓ ∈ (a.lo, edge] is still to do
        for b in stair:
            lo, hi = max(a[0], b[0]), min(a[1], b[1])
            if not _l_nonempty(lo, hi):
                continue
            if hi < edge:  # a gap between staircase columns: nothing to take away
                out.append((hi, edge, a[2], a[3]))
            if b[3] != _INF:  # r = inf is inside a column with an infinite bound
                rlo = max(a[2], b[3])
                if _r_nonempty(rlo, a[3]):
                    out.append((lo, hi, rlo, a[3]))
            edge = lo
        if edge != _NINF and _l_nonempty(a[0], edge):
            out.append((a[0], edge, a[2], a[3]))
    return out


def columns_clip(f: list, x0: float, lo_wall: float = _NINF, hi_wall: float = _INF, xj: float | None = None) -> list:
    """Columns with ℓ > lo_wall and r < hi_wall (walls: subscriptions that hold a given object are cut
    away), intersected with the quadrant θ_j of an object at ``xj`` (ℓ <= xj <= r) when given."""
    out = []
    for lo, hi, rlo, rhi in f:
        if lo_wall != _NINF:
            lo = max(lo, lo_wall)
        if hi_wall != _INF:
            rhi = min(rhi, hi_wall)
        if xj is not None:
            if xj < x0:
                hi = min(hi, xj)
            elif xj > x0:
                rlo = max(rlo, xj)
        if _l_nonempty(lo, hi) and _r_nonempty(rlo, rhi):
            out.append((lo, hi, rlo, rhi))
    return out


def columns_rects(f: list) -> list[tuple]:
    """Message rectangles (inner_l, inner_r, outer_l, outer_r) of a column region, neighbouring columns with
    the same r range merged into one rectangle."""
    out: list = []
    for lo, hi, rlo, rhi in f:
        if out and out[-1][2] == hi and out[-1][1] == rlo and out[-1][3] == rhi:
            out[-1] = (out[-1][0], rlo, lo, rhi)
        else:
            out.append((hi, rlo, lo, rhi))
    return out


def _box_rect(lmin: float, lmax: float, rmin: float, rmax: float) -> tuple:
    """The message rectangle of a closed box [lmin, lmax] × [rmin, rmax] of subscription points."""
    return (lmax, rmin, _nextafter(lmin, _NINF), _nextafter(rmax, _INF))


# --------------------------------------------------------------------------------------------------------------
# The object index: the range-min A2B-tree with 002's two queries
# --------------------------------------------------------------------------------------------------------------
class TopkIndex(A2BTree):
    """The A2B-tree of ``range_min`` (per-X min Y, FINDL/FINDR) answering 002 §II-B's ``first_k`` and
    ``min_y`` over rank values ``(y, key)``.

    Both look into the lower tier (sorted by ``(y, key)``) at the X's the upper tier points to, so y ties
    are resolved by key.  Both read the upper tier's leaves as numpy slices and find the leaves that matter
    with the segment tree (FINDL / FINDR's search at leaf granularity): ``first_k`` the leaves from x0's
    outwards holding an X at or below the threshold's y until k objects are found; ``min_y`` its range's
    end leaves and the leaves holding an X at or below the threshold (at most ~2k in a sweep), taking the
    minimum of the leaves between them from the segment tree.
    """

    def _items_at(self, x: float):
        cur = self._lower.get(x)
        if cur is None:
            return ()
        return (cur,) if type(cur) is tuple else cur

    def count_below_at(self, x: float, y0: float, key0, cap: int) -> int:
        """Objects at exactly x with rank value < (y0, key0), counted up to ``cap``."""
        n = 0
        for y, k in self._items_at(x):
            if n >= cap or not (y, k) < (y0, key0):
                break
            n += 1
        return n

    def first_k(self, x0: float, y0: float, key0, leftward: bool, k: int) -> list[tuple[float, float, object]]:
        """002 §II-B ``first_k(x0, y0, ←/→)``: the first k objects strictly west (east) of x0 with rank value
        < (y0, key0), nearest first, as (x, y, key).  Fewer when the quadrant holds fewer.

        Leaf by leaf from x0's: the X's whose per-X min is <= y0 come from one vectorised comparison on the
        leaf, and the next leaf holding one from the segment tree (FINDL / FINDR's search)."""
        out: list = []
        maxk = self._maxk
        L = len(maxk)
        if not L or k <= 0:
            return out
        thr = (y0, key0)
        lxs, lm, ln = self._lxs, self._lm, self._ln
        lower = self._lower
        if leftward:
            li = bisect_left(maxk, x0)
            if li == L:
                li = L - 1
            lo, hi = 0, int(lxs[li].searchsorted(x0))  # the leaf's X's west of x0
        else:
            li = bisect_right(maxk, x0)
            if li == L:
                return out
            lo, hi = int(lxs[li].searchsorted(x0, "right")), ln[li]
        while True:
            hits = lxs[li][lo:hi][lm[li][lo:hi] <= y0].tolist()
            for x in reversed(hits) if leftward else hits:  # nearest first
                cur = lower[x]
                if type(cur) is tuple:  # one object at x
                    if cur < thr:
                        out.append((x, cur[0], cur[1]))
                        if len(out) == k:
                            return out
                    continue
                for item in cur:
                    if not item < thr:
                        break
                    out.append((x, item[0], item[1]))
                    if len(out) == k:
                        return out
            if leftward:
                li = self._prev_leaf(li, y0)
                if li < 0:
                    return out
            else:
                li = self._next_leaf(li, y0, L)
                if li == L:
                    return out
            lo, hi = 0, ln[li]

    def min_y(self, lo: float, hi: float, closed: bool, y0: float, key0, below: tuple | None = None) -> tuple | None:
        """002 §II-B ``min_y(σ, y0)``: the object with the smallest rank value > (y0, key0) among those with x
        in σ = [lo, hi] (``closed``) or (lo, hi); as (y, key, x), or None.  ``below``: a rank value (y, key)
        the answer must rank before, else None (a sweep stops at i's new value, 002 §III-A: the objects
        past it are not looked for)."""
        if closed:
            a, b = lo, hi
        else:
            a, b = _nextafter(lo, _INF), _nextafter(hi, _NINF)
        if not a <= b or not self._pos:
            return None
        maxk = self._maxk
        L = len(maxk)
        la = bisect_left(maxk, a)
        if la == L:
            return None
        lb = bisect_left(maxk, b)
        if lb == L:
            lb = L - 1
        lxs, lm, ln = self._lxs, self._lm, self._ln
        pa = int(lxs[la].searchsorted(a))
        pb = min(int(lxs[lb].searchsorted(b, "right")), ln[lb])
        # the leaves strictly between la and lb: those holding a blocked X (per-X min <= y0) are read whole;
        # the runs of the others hold only objects above the threshold, and their minimum is the segment
        # tree's (002 §II-B: FINDR's search over the upper tier, at leaf granularity)
        read: list = []
        runs: list = []
        li = la
        while li + 1 < lb:
            nxt = self._next_leaf(li, y0, lb)
            if nxt > li + 1:
                runs.append((li + 1, nxt - 1))
            if nxt < lb:
                read.append(nxt)
            li = nxt
        if la == lb:
            X = lxs[la][pa:pb]
            M = lm[la][pa:pb]
        else:
            X = np.concatenate([lxs[la][pa:ln[la]], *[lxs[i][:ln[i]] for i in read], lxs[lb][:pb]])
            M = np.concatenate([lm[la][pa:ln[la]], *[lm[i][:ln[i]] for i in read], lm[lb][:pb]])
        lower = self._lower
        best = None if below is None else (*below, None)  # (y, key, None): the bound, not an answer
        if M.size:
            blocked = M <= y0
            free = np.where(blocked, _INF, M)
            v = free.min()
            if v != _INF and (best is None or v <= best[0]):
                for x in X[free == v].tolist():  # ties in y: the smallest key wins
                    best = self._first_at(lower[x], x, best)
            thr = (y0, key0)
            for x in X[blocked].tolist():
                cur = lower[x]
                if type(cur) is tuple:
                    if thr < cur and (best is None or cur < best[:2]):
                        best = (cur[0], cur[1], x)
                    continue
                p = cur.bisect_right(thr)  # the first object at x past the threshold
                if p < len(cur):
                    best = self._first_at(cur[p], x, best)
        if runs:
            seg_min = self._seg_range_min
            mins = [seg_min(i, j) for i, j in runs]
            v = min(mins)
            if v != _INF and (best is None or v <= best[0]):
                # the X's with per-X min v, in the runs reaching it, found leaf by leaf (ties in y: by key)
                for (i, j), m in zip(runs, mins):
                    li = i - 1
                    while m == v and (li := self._next_leaf(li, v, j + 1)) <= j:
                        n = ln[li]
                        for x in lxs[li][:n][lm[li][:n] == v].tolist():
                            best = self._first_at(lower[x], x, best)
        return None if best is None or best[2] is None else best

    @staticmethod
    def _first_at(cur, x: float, best):
        """``best`` or the first object at x (``cur``: its lower-tier entry, or an object) if that ranks first."""
        y, key = cur if type(cur) is tuple else cur[0]
        if best is None or (y, key) < best[:2]:
            return (y, key, x)
        return best

    # SEARCHL / SEARCHR over the upper tier (digest C.7), as A2BTree.find_left / find_right run them past their
    # first leaf; those keep the loop inline, since a call more on that path would cost RANGE_MIN's FIND
    def _prev_leaf(self, li: int, y: float) -> int:
        """The last leaf before ``li`` whose minimum is <= y, or -1 (SEARCHL, counted as a FIND)."""
        self.counters["find"] += 1
        seg = self._seg
        S = self._S
        k = S + li
        while k > 1:
            if k & 1 and seg[k - 1] <= y:
                k -= 1
                break
            k >>= 1
        else:
            return -1
        while k < S:
            k = 2 * k + 1
            if seg[k] > y:
                k -= 1
        return k - S

    def _next_leaf(self, li: int, y: float, stop: int) -> int:
        """The first leaf after ``li`` whose minimum is <= y, or ``stop`` if none comes before it (SEARCHR,
        counted as a FIND)."""
        self.counters["find"] += 1
        seg = self._seg
        S = self._S
        k = S + li
        while k > 1:
            if not k & 1 and seg[k + 1] <= y:
                k += 1
                break
            k >>= 1
        else:
            return stop
        while k < S:
            k <<= 1
            if seg[k] > y:
                k += 1
        return min(k - S, stop)

    def top(self, x1: float, x2: float, k: int) -> list[tuple[float, object, float]]:
        """The k best (y, key, x) with x1 <= x <= x2, best first (k successive ``min_y``)."""
        out = []
        y0, key0 = _NINF, _TOP
        while len(out) < k:
            j = self.min_y(x1, x2, True, y0, key0)
            if j is None:
                break
            out.append(j)
            y0, key0 = j[0], j[1]
        return out


# --------------------------------------------------------------------------------------------------------------
# Subscriptions (the server's S for Paint-Sparse and Unicast: one 2-d point index per k)
# --------------------------------------------------------------------------------------------------------------
class Subscriptions:
    """Subscriptions (x1, x2, k) as points (ℓ, r) of 002's subscription space, one :class:`PointIndex2D` per
    k.  ``snap`` (002 Table III footnote 10) = the smallest box containing the subscriptions inside a
    rectangle."""

    def __init__(self):
        self._by_id: dict = {}  # sid -> (x1, x2, k, slot)
        self._index: dict[int, PointIndex2D] = {}
        self._coords: dict[int, dict[int, tuple[float, float]]] = {}
        self._sids: dict[int, dict[int, Hashable]] = {}
        self._next_slot = 0
        # (x1, x2) by slot as numpy columns: ``snap`` gathers thousands of them per call (002 §III-B)
        self._x1 = np.empty(0)
        self._x2 = np.empty(0)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self):
        return ((sid, x1, x2, k) for sid, (x1, x2, k, _) in self._by_id.items())

    def ks(self) -> list[int]:
        return sorted(k for k, c in self._coords.items() if c)

    def add(self, sid, x1: float, x2: float, k: int) -> None:
        if sid in self._by_id:
            raise DuplicateSubscription(f"subscription id already registered: {sid!r}")
        x1, x2 = float(x1), float(x2)
        if math.isnan(x1) or math.isnan(x2) or not x1 <= x2:
            raise InvalidSubscription(f"bad range for subscription {sid!r}: [{x1!r}, {x2!r}]")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidSubscription(f"k must be a positive integer for subscription {sid!r}, got {k!r}")
        self._add_valid([sid], np.array([x1]), np.array([x2]), np.array([int(k)]))

    def add_many(self, sids, x1s, x2s, ks) -> None:
        """Register many subscriptions at once (one bulk insert per k); all checked first."""
        sids = list(sids)
        x1s = np.asarray(x1s, dtype=np.float64)
        x2s = np.asarray(x2s, dtype=np.float64)
        ks = np.asarray(ks)
        if not (len(sids) == len(x1s) == len(x2s) == len(ks)):
            raise InvalidSubscription("add_many: sids, x1s, x2s and ks differ in length")
        seen = set(self._by_id)
        for i, sid in enumerate(sids):
            if sid in seen:
                raise DuplicateSubscription(f"subscription id already registered: {sid!r}")
            seen.add(sid)
        bad = np.flatnonzero(np.isnan(x1s) | np.isnan(x2s) | ~(x1s <= x2s))
        if len(bad):
            raise InvalidSubscription(f"bad range for subscription {sids[bad[0]]!r}: [{x1s[bad[0]]!r}, {x2s[bad[0]]!r}]")
        if ks.dtype.kind not in "iu" or (ks < 1).any():
            raise InvalidSubscription("k must be a positive integer for every subscription")
        self._add_valid(sids, x1s, x2s, ks.astype(np.int64))

    def _add_valid(self, sids: list, x1s: np.ndarray, x2s: np.ndarray, ks: np.ndarray) -> None:
        n = len(sids)
        slots = np.arange(self._next_slot, self._next_slot + n, dtype=np.int64)
        self._next_slot += n
        if self._next_slot > len(self._x1):
            m = max(self._next_slot, 2 * len(self._x1), 64)
            self._x1 = np.concatenate([self._x1, np.full(m - len(self._x1), np.nan)])
            self._x2 = np.concatenate([self._x2, np.full(m - len(self._x2), np.nan)])
        self._x1[slots], self._x2[slots] = x1s, x2s
        for k in np.unique(ks).tolist():
            sel = np.flatnonzero(ks == k)
            idx = self._index.get(k)
            if idx is None:
                idx = self._index[k] = PointIndex2D()
                self._coords[k] = {}
                self._sids[k] = {}
            idx.add_many(slots[sel], x1s[sel], x2s[sel])
            for i in sel.tolist():
                slot = int(slots[i])
                self._coords[k][slot] = (float(x1s[i]), float(x2s[i]))
                self._sids[k][slot] = sids[i]
                self._by_id[sids[i]] = (float(x1s[i]), float(x2s[i]), k, slot)

    def remove(self, sid) -> None:
        if sid not in self._by_id:
            raise UnknownSubscription(f"unknown subscription id: {sid!r}")
        _, _, k, slot = self._by_id.pop(sid)
        self._index[k].remove_many(np.array([slot]))
        del self._coords[k][slot], self._sids[k][slot]

    def _query(self, k: int, rect: tuple) -> np.ndarray:
        idx = self._index.get(k)
        if idx is None:
            return np.empty(0, dtype=np.int64)
        il, ir, ol, orr = rect
        return idx.query(ol, ol == _NINF, il, True, ir, True, orr, orr == _INF)

    def in_rect(self, k: int, rect: tuple) -> list:
        """Ids of the subscriptions with this k that a message with rectangle ``rect`` reaches."""
        sids = self._sids.get(k, {})
        return [sids[s] for s in self._query(k, rect).tolist()]

    def count(self, k: int, rect: tuple) -> int:
        idx = self._index.get(k)
        if idx is None:
            return 0
        il, ir, ol, orr = rect
        return idx.count(ol, ol == _NINF, il, True, ir, True, orr, orr == _INF)

    def snap(self, k: int, rect: tuple) -> tuple | None:
        """(lmin, lmax, rmin, rmax, count) of the subscriptions with this k inside ``rect``; None if none."""
        slots = self._query(k, rect)
        if not len(slots):
            return None
        ls, rs = self._x1[slots], self._x2[slots]
        return float(ls.min()), float(ls.max()), float(rs.min()), float(rs.max()), len(slots)

    def get(self, sid) -> tuple[float, float, int]:
        x1, x2, k, _ = self._by_id[sid]
        return x1, x2, k


# --------------------------------------------------------------------------------------------------------------
# Subscriber side
# --------------------------------------------------------------------------------------------------------------
class TopkSubscriber:
    """A subscriber's local top-k list, maintained by the protocol of 002 §II-A (see module docstring).

    ``items`` = [(key, x, y)] in rank order (y ascending, or descending with ``descending=True``; ties by key).
    """

    def __init__(self, x1: float, x2: float, k: int, items: Iterable = (), descending: bool = False):
        self.x1, self.x2, self.k = float(x1), float(x2), int(k)
        self.descending = bool(descending)
        self._d: dict = {key: (float(x), float(y)) for key, x, y in items}
        self.received = 0

    def _rank(self, key) -> tuple:
        y = self._d[key][1]
        return (-y if self.descending else y, key)

    @property
    def items(self) -> list[tuple]:
        return [(key, *self._d[key]) for key in sorted(self._d, key=self._rank)]

    def _trim(self) -> None:
        while len(self._d) > self.k:
            del self._d[max(self._d, key=self._rank)]

    def receive(self, msg) -> bool:
        """Apply one message (a :class:`TopkMessage` the network delivered, or a :class:`UnicastMessage`);
        returns whether the list changed."""
        self.received += 1
        before = self.items
        if isinstance(msg, UnicastMessage) and msg.replaces is not None:
            self._d.pop(msg.replaces, None)
        if msg.y is None:
            self._d.pop(msg.key, None)
        elif msg.key in self._d:
            self._d[msg.key] = (float(msg.x), float(msg.y))
        else:
            self._d[msg.key] = (float(msg.x), float(msg.y))
            self._trim()
        return self.items != before


class RelaxSubscriber(TopkSubscriber):
    """CN-Relax subscriber (002 §V): keeps every object in its range and reads its top k off them."""

    @property
    def items(self) -> list[tuple]:
        return [(key, *self._d[key]) for key in sorted(self._d, key=self._rank)[:self.k]]

    def receive(self, msg) -> bool:
        self.received += 1
        before = self.items
        if msg.y is None:
            self._d.pop(msg.key, None)
        elif self.x1 <= msg.x <= self.x2:
            self._d[msg.key] = (float(msg.x), float(msg.y))
        return self.items != before


def deliver(messages: Iterable, subscribers: dict) -> dict:
    """The network's part, by brute force: apply each message, in order, to every subscriber it reaches
    (unicast: to its ``sid``).  Returns {sid: number of messages received}."""
    got = {sid: 0 for sid in subscribers}
    for m in messages:
        if isinstance(m, UnicastMessage):
            subscribers[m.sid].receive(m)
            got[m.sid] += 1
            continue
        for sid, s in subscribers.items():
            if reaches(m, s.x1, s.x2, s.k):
                s.receive(m)
                got[sid] += 1
    return got


def batch_minimum(initial: Sequence[tuple], final: Sequence[tuple], k: int, descending: bool = False) -> tuple[int, int]:
    """Fewest messages a subscriber needs for a batch (Paint-Batch, 002 §IV-A, Theorem 3): ``initial`` and
    ``final`` are its top-k lists [(key, x, y)] before and after the batch; each message carries an object's
    value at the end of the batch (or its deletion) and is applied by the §II-A protocol.  Returns the
    minimum **with 002 footnote 6's order** (every message about an object that leaves the list before any
    message about one that enters it; what :meth:`TopkCore.apply_batch` delivers) and **without** it.

    Every object in ``final`` that is new or changed needs a message.  A leaver w (in ``initial`` only) is
    pushed out without one when an entrant arrives while the list is full, w is its worst item and the entrant
    beats w's stale value.  With the footnote-6 order the entrants arrive after every leaver message, so each
    eviction happens with all of ``final`` but the entrant present (at old or new value, whichever is lower):
    w is silent iff the list ends full and every o in ``final`` has min(old, new) below w's old value.
    Without it the entrants arrive in ascending order and evict the leavers from the highest old value down,
    the leaver messages placed just before the first entrant that could not evict: the j-th highest leaver is
    silent iff no object staying in the list is above it at both values and at least (k - |initial|) + j
    entrants are below its old value.  (Both are checked against a breadth-first search in the tests.)

    >>> batch_minimum([("a", 1.0, 1.0)], [("b", 2.0, 0.5)], 1)  # b evicts a: a needs no message
    (1, 1)
    >>> batch_minimum([("a", 1.0, 1.0)], [("b", 2.0, 3.0)], 1)  # a's new value first, then b
    (2, 2)
    >>> I = [("a", 0, 1.0), ("l1", 0, 5.0), ("l2", 0, 6.0)]  # a, l1, l2 rise above 8
    >>> batch_minimum(I, [("e1", 0, 3.0), ("e2", 0, 4.0), ("u", 0, 8.0)], 3)
    (6, 4)
    """
    def rank(key, y):
        return (-y if descending else y, key)
    old = {key: (x, y) for key, x, y in initial}
    new = {key: (x, y) for key, x, y in final}
    s = {key: rank(key, y) for key, (_, y) in old.items()}
    v1 = {key: rank(key, y) for key, (_, y) in new.items()}
    mandatory = sum(1 for key in new if old.get(key) != new[key])
    leavers = sorted((key for key in old if key not in new), key=s.__getitem__, reverse=True)
    m = {key: min(s[key], v1[key]) if key in old else v1[key] for key in new}
    if len(new) < k:  # the list ends short: nothing can push a leaver out after the leaver messages
        ordered = len(leavers)
    else:
        top = max(m.values())
        ordered = sum(1 for w in leavers if s[w] < top)
    entrants = sorted(v1[key] for key in new if key not in old)
    blocker = max((m[key] for key in new if key in old), default=None)
    silent = 0
    for j, w in enumerate(leavers, 1):
        if (blocker is not None and blocker > s[w]) or sum(1 for v in entrants if v < s[w]) < k - len(old) + j:
            break
        silent = j
    return mandatory + ordered, mandatory + len(leavers) - silent


# --------------------------------------------------------------------------------------------------------------
# Server side
# --------------------------------------------------------------------------------------------------------------
class TopkCore:
    """Server-side processing of range top-k subscriptions (002); see the module docstring.

    ``mode`` in :data:`MODES`; ``epsilon`` (dense/sparse only) turns on Paint(ε).  ``ks`` fixes the k values
    Paint-Dense paints for (otherwise the k values of the registered subscriptions).
    """

    def __init__(self, mode: str = "dense", *, descending: bool = False, epsilon: float | None = None,
                 ks: Iterable[int] | None = None, leaf_capacity: int = 256):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        if epsilon is not None and (mode not in ("dense", "sparse") or not 0 < epsilon <= 1):
            raise ValueError("epsilon must be in (0, 1] and needs mode 'dense' or 'sparse'")
        self.mode = mode
        self.descending = bool(descending)
        self.epsilon = epsilon
        self._fixed_ks = sorted({int(k) for k in ks}) if ks is not None else None
        self.counters: dict[str, int] = {
            "updates": 0, "steps": 0, "messages": 0, "first_k": 0, "min_y": 0, "snap": 0, "exposed": 0, "find": 0,
            "checked": 0}
        self.tree = TopkIndex(leaf_capacity, counters=self.counters)
        self.subscriptions = Subscriptions()

    # ---- objects and subscriptions ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tree)

    def __contains__(self, key) -> bool:
        return key in self.tree

    def _sign(self, y: float) -> float:
        return -y if self.descending else y

    def get(self, key) -> tuple[float, float] | None:
        r = self.tree.get(key)
        return None if r is None else (r[0], self._sign(r[1]))

    def subscribe(self, sid, x1: float, x2: float, k: int) -> list[tuple]:
        """Register subscription (x1, x2, k); returns its current top-k [(key, x, y)]."""
        self.subscriptions.add(sid, x1, x2, k)
        return self.top_k(x1, x2, k)

    def unsubscribe(self, sid) -> None:
        self.subscriptions.remove(sid)

    def top_k(self, x1: float, x2: float, k: int) -> list[tuple]:
        """Current result of (x1, x2, k): [(key, x, y)] best first (no counters touched)."""
        saved = dict(self.counters)
        out = [(key, x, self._sign(y)) for y, key, x in self.tree.top(float(x1), float(x2), int(k))]
        self.counters.update(saved)
        return out

    def load(self, keys, xs, ys) -> None:
        """Bulk-load objects without producing messages."""
        keys = list(keys)
        for key in keys:
            self._check_key(key)
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            raise BadUpdate("non-finite x or y in load")
        self.tree.bulk_load(keys, xs, -ys if self.descending else ys)

    @staticmethod
    def _check_key(key) -> None:
        if isinstance(key, bool) or not isinstance(key, (str, int, np.integer)):
            raise BadUpdate(f"object key must be str or int, got {type(key).__name__}: {key!r}")

    def _ks(self) -> list[int]:
        return self._fixed_ks if self._fixed_ks is not None else self.subscriptions.ks()

    def paint_for(self, ks) -> None:
        """Paint for these k values from now on, whatever subscriptions the core holds (a core without any: the
        rows of a sharded group, whose messages for a k depend on the rows alone, 002 §II-A)."""
        self._fixed_ks = sorted({int(k) for k in ks})

    # ---- online updates -----------------------------------------------------------------------------------
    def upsert(self, key, x: float, y: float) -> Outcome:
        """Insert object ``key`` at (x, y) or update it; an x-move is a deletion step then an insertion step."""
        self._check_key(key)
        x, y = float(x), float(y)
        if not (_isfinite(x) and _isfinite(y)):
            raise BadUpdate(f"non-finite x or y for key {key!r}: ({x!r}, {y!r})")
        self.counters["updates"] += 1
        y = self._sign(y)
        old = self.tree.get(key)
        if old is None:
            return Outcome((self._step(key, x, None, y),))
        xo, yo = old
        if xo == x:
            if yo == y:
                return Outcome((Step("ignorable", ()),))
            return Outcome((self._step(key, x, yo, y),))
        return Outcome((self._step(key, xo, yo, None), self._step(key, x, None, y)))

    def delete(self, key) -> Outcome:
        """Delete object ``key`` (an update to y = ∞); ``BadUpdate`` if unknown."""
        old = self.tree.get(key)
        if old is None:
            raise BadUpdate(f"delete of unknown key {key!r}")
        self.counters["updates"] += 1
        return Outcome((self._step(key, old[0], old[1], None),))

    def _step(self, key, x: float, yo: float | None, yn: float | None) -> Step:
        """One Δ(key at x: yo → yn) in internal sign, None = ∞; applies it to the index and returns messages."""
        self.counters["steps"] += 1
        raising = yo is None or (yn is not None and yn < yo)
        if self.mode == "relax":
            msgs = (TopkMessage(None, x, x, _NINF, _INF, key, x, None if yn is None else self._sign(yn)),)
            self._apply(key, x, yo, yn)
        elif self.mode == "unicast":
            msgs = tuple(self._unicast(key, x, yo, yn))
        else:
            msgs = tuple(self._paint(key, x, yo, yn, raising))
        self.counters["messages"] += len(msgs)
        return Step("raise" if raising else "lower", msgs)

    def _apply(self, key, x, yo, yn) -> None:
        if yo is None:
            self.tree.insert(key, x, yn)
        elif yn is None:
            self.tree.remove(key)
        else:  # a step keeps x (an x-move is two steps)
            self.tree.update_y(key, yn)

    # ---- Lemma 2 lists ------------------------------------------------------------------------------------
    def _lists(self, x: float, y0: float, key0, kmax: int) -> tuple[list, list, int]:
        """first_k lists west and east of x below (y0, key0) (x values only) and c0 = objects at x below it."""
        t = self.tree
        self.counters["first_k"] += 2
        left = [p[0] for p in t.first_k(x, y0, key0, True, kmax)]
        right = [p[0] for p in t.first_k(x, y0, key0, False, kmax)]
        return left, right, t.count_below_at(x, y0, key0, kmax)

    # ---- painting a set of tiles with one object ----------------------------------------------------------
    def _g(self, k: int) -> int:
        return max(1, math.floor(self.epsilon * k)) if self.epsilon else 1

    def _emit(self, k: int, tiles: list, key, x: float, y: float | None, clip: tuple | None = None,
              exact: bool = False) -> list:
        """Messages carrying object (key, x, y) for one k covering ``tiles`` (dense: one per tile; sparse:
        snapped, empty tiles dropped, consecutive ones merged greedily, 002 §III-B).  Paint(ε) merges the
        tiles first (§IV-B) unless ``exact`` (Paint-Batch's regions are exact whatever ε)."""
        if not tiles:
            return []
        if not exact:
            tiles = coarsen(tiles, self._g(k))
        uy = None if y is None else self._sign(y)
        if self.mode == "dense":
            return [TopkMessage(k, *rect, key, x, uy) for rect, _ in tiles]
        subs = self.subscriptions
        c = self.counters
        out = []
        cur = None  # (lmin, lmax, rmin, rmax, count) of the message being grown
        for rect, _ in tiles:
            if clip is not None:
                rect = (rect[0], rect[1], max(rect[2], clip[0]), min(rect[3], clip[1]))
                if not _nonempty(*rect):
                    continue
            c["snap"] += 1
            s = subs.snap(k, rect)
            if s is None:
                continue
            if cur is not None:
                box = (min(cur[0], s[0]), max(cur[1], s[1]), min(cur[2], s[2]), max(cur[3], s[3]))
                n = subs.count(k, _box_rect(*box))
                if n == cur[4] + s[4]:  # the merged box covers nothing not covered before (002 §III-B)
                    cur = (*box, n)
                    continue
                out.append(TopkMessage(k, *_box_rect(*cur[:4]), key, x, uy))
            cur = s
        if cur is not None:
            out.append(TopkMessage(k, *_box_rect(*cur[:4]), key, x, uy))
        return out

    def _emit_columns(self, k: int, columns: list, key, x: float, y: float | None) -> list:
        """Messages carrying (key, x, y) to the subscriptions with this k in a column region (Paint-Batch)."""
        return self._emit(k, [(rect, n) for n, rect in enumerate(columns_rects(columns))], key, x, y, exact=True)

    def _apex(self, k: int, tiles: list, clip: tuple | None) -> tuple | None:
        """Paint-Sparse's Q^z: (ℓ^z, r^z) bounds of the subscriptions inside the staircase ``tiles`` as a clip
        (ℓ > clip[0], r < clip[1]), or None when no subscription is left (002 §III-B, Fig. 3(b))."""
        lmin, rmax = _INF, _NINF
        for rect, _ in tiles:
            if clip is not None:
                rect = (rect[0], rect[1], max(rect[2], clip[0]), min(rect[3], clip[1]))
                if not _nonempty(*rect):
                    continue
            self.counters["snap"] += 1
            s = self.subscriptions.snap(k, rect)
            if s is not None:
                lmin = min(lmin, s[0])
                rmax = max(rmax, s[3])
        if lmin == _INF:
            return None
        return (_nextafter(lmin, _NINF), _nextafter(rmax, _INF))

    @staticmethod
    def _join(x: float, left: list, right: list, xj: float, kmax: int) -> bool:
        """Object at xj joins i's first_k lists (kept to the first kmax); True when it lies at x itself."""
        if xj < x:
            p = next((n for n, v in enumerate(left) if v < xj), len(left))
            left.insert(p, xj)
            del left[kmax:]
        elif xj > x:
            p = next((n for n, v in enumerate(right) if v > xj), len(right))
            right.insert(p, xj)
            del right[kmax:]
        else:
            return True
        return False

    # ---- Paint-Dense / Paint-Sparse (002 §III) ------------------------------------------------------------
    def _paint(self, key, x: float, yo, yn, raising: bool) -> list:
        ks = self._ks()
        msgs: list = []
        # i keeps its old entry in the index while it is painted, and one update_y moves it after (no X leaves
        # and re-enters the upper tier): the lists look strictly west and east of x and count the objects at x
        # before a rank value that i's old one does not precede, (yn, key) when raising and (yo, key) when
        # lowering, and the sweep looks only past (yo, key), so the old entry is never met (002 §III-A)
        if ks:
            kmax = ks[-1]
            if raising:
                # 002 §III-A rank-raising: IR_new(i) ⊇ IR_old(i); tile IR_new(i) with (x_i, y_new)
                left, right, c0 = self._lists(x, yn, key, kmax)
                for k in ks:
                    if k - c0 > 0:
                        msgs += self._emit(k, staircase_tiles(x, left, right, k - c0), key, x, yn)
            else:
                # 002 §III-A rank-lowering: tile IR_old(i) with the new value, then sweep the exposed objects
                left, right, c0 = self._lists(x, yo, key, kmax)
                for k in ks:
                    msgs += self._emit(k, staircase_tiles(x, left, right, k - c0) if k > c0 else [], key, x, yn)

                def visit(k, cells, clip, j):
                    msgs.extend(self._emit(k, cells, j[1], j[2], j[0], clip))
                self._sweep(key, x, yo, yn, ks, left, right, c0, visit)
        self._apply(key, x, yo, yn)
        return msgs

    def _sweep(self, key, x: float, yo, yn, ks: list, left: list, right: list, c0: int, visit) -> None:
        """The rank-lowering sweep (002 §III-A, Fig. 2(b)): i, out of the index or still at (yo, key) in it (the
        sweep only looks past that), moves up from (yo, key) to (yn, key) (None: ∞).  For each exposed object
        j = (y, key, x), ``visit(k, cells, clip, j)`` gets ΔIR(j) = θ_i^{k|y_j-ε} ∩ θ_j (Eq. (1)) as diagonal
        cells per k.  Paint-Sparse (§III-B) visits only
        the essential exposed objects, inside the apex Q^z of the subscriptions still in IR^z(i) (``clip``;
        None for Paint-Dense).  ``left`` / ``right`` / ``c0`` = i's first_k lists at yo, updated in place."""
        tree = self.tree
        kmax = ks[-1]
        sparse = self.mode == "sparse"
        clip: dict[int, tuple | None] = {}
        if sparse:
            for k in ks:
                K = k - c0
                clip[k] = self._apex(k, staircase_tiles(x, left, right, K), None) if K > 0 else None
        z = (yo, key)
        stop = None if yn is None else (yn, key)
        c = self.counters
        while True:
            if sparse:
                active = [k for k in ks if clip[k] is not None]
                if not active:
                    break
                lo = min(clip[k][0] for k in active)
                hi = max(clip[k][1] for k in active)
            else:
                active = ks
                K = kmax - c0
                if K <= 0:
                    break
                lo = left[K - 1] if K <= len(left) else _NINF
                hi = right[K - 1] if K <= len(right) else _INF
            c["min_y"] += 1
            # next exposed object (002 Fig. 2(b)); none past i's new value, where the sweep stops (§III-A)
            j = tree.min_y(lo, hi, False, z[0], z[1], stop)
            if j is None:
                break
            yj, kj, xj = j
            c["exposed"] += 1
            for k in active:
                K = k - c0
                if K > 0:
                    visit(k, diagonal_cells(x, left, right, K, xj), clip[k] if sparse else None, j)
            # i passes j: j joins the lists (Eq. (1)); lists keep the first kmax objects below z
            c0 += self._join(x, left, right, xj, kmax)
            z = (yj, kj)
            if sparse:
                for k in active:
                    K = k - c0
                    clip[k] = self._apex(k, staircase_tiles(x, left, right, K), clip[k]) if K > 0 else None

    # ---- Paint-Batch (002 §IV-A) ----------------------------------------------------------------------------
    def apply_batch(self, events: Iterable[tuple]) -> Outcome:
        """Paint-Batch over a batch of ``("upsert", key, x, y)`` / ``("delete", key)`` events (002 §IV-A,
        Theorem 3): subscribers are exact at the end of the batch (not in between), each receiving the fewest
        messages any message sequence needs under the §II-A protocol when, as in 002 footnote 6, an object's
        update reaches a subscriber before the objects that replace it (below).

        Per subscriber S, with I = its list before the batch and F = after (values old v0 / new v1, ∞ when
        absent; m(o) = min(v0, v1)), it needs one message per o ∈ F that is new or changed (mandatory), plus
        one per leaver w ∈ I \\ F that cannot be pushed out by the entrants while holding its stale value.
        With every message about a leaver before every message about an entrant, w can be pushed out
        silently iff the list ends full and every o ∈ F has m(o) < v0(w) (each entrant's arrival evicts the
        worst item, which must be a leaver it beats).  The batch is sent in three phases:

        a. every E↑ object w (y rises, deletion) to the S that need it: S ∈ IR_before(w) \\ IR_after(w) such
           that some o ∈ F_S has m(o) > v0(w), or F_S holds fewer than k objects; found by a sweep from v0(w)
           up through the objects after the batch (:meth:`_leaver_region`);
        b. in ascending order of old value (falling updates before any entrant at every S): each E↓ object
           (y falls, insertion) to IR_after, each unchanged object to IR_after \\ IR_before, each E↑ object to
           IR_after \\ IR_before (where it enters);
        c. each E↑ object to IR_after ∩ IR_before (where it stays, after the evictions of phase b).

        IR_before of the E↑ objects is taken before the index changes; the unchanged objects whose region
        grows are the exposed objects of E↑ sweeps (Paint-Dense / Paint-Sparse, §III) run with E↓ not yet
        applied, so that their gains are monotone (their union is IR_after-E↑ \\ IR_before).

        002's own steps (E↓ applied without messages, E↑ in descending order of new value notifying
        IR_new ∪ IR_pre with IR_pre taken after E↓, E↓ notified last) can leave a subscriber holding a stale
        value that outranks its replacement (``test_paint_batch_stale_value_outranking_an_entrant``); taking
        IR_pre before the batch instead sends every leaver its new value, one message more than needed
        wherever an entrant could push it out (11% above Coalesce at k = 1 in ``bench/topk.py``).

        Without the footnote-6 order the true minimum can be lower: an entrant may push out a leaver that
        then never needs its message, while a later, larger entrant takes the slot of a leaver messaged in
        between; that needs a per-subscriber position for the leaver's message in the sequence, which no
        subscription-oblivious sweep here gives.  The tests compare both minima by brute force.
        An x-move is a deletion at the old x and an insertion at the new one (002 footnote 4), so a subscriber
        holding the object before and after may get two messages where one would do.

        The batch is validated first (``BadUpdate``: NaN, unknown key on delete); nothing is applied then.
        Only for modes 'dense' and 'sparse' (ε is ignored: the regions are exact).  The outcome has one step
        per phase: 'lower' (a), 'raise' (b), 'lower' (c).
        """
        if self.mode not in ("dense", "sparse"):
            raise ValueError("Paint-Batch needs mode 'dense' or 'sparse'")
        tree = self.tree
        final: dict = {}  # key -> (x, internal y) | None, net of the batch
        n_events = 0
        for row, ev in enumerate(events):
            n_events += 1
            if ev[0] == "delete":
                key = ev[1]
                cur = final[key] if key in final else tree.get(key)
                if cur is None:
                    raise BadUpdate(f"delete of unknown key {key!r}", row=row)
                final[key] = None
            elif ev[0] == "upsert":
                _, key, x, y = ev
                self._check_key(key)
                x, y = float(x), float(y)
                if not (_isfinite(x) and _isfinite(y)):
                    raise BadUpdate(f"non-finite x or y for key {key!r}: ({x!r}, {y!r})", row=row)
                final[key] = (x, self._sign(y))
            else:
                raise BadUpdate(f"unknown batch event {ev[0]!r}; expected 'upsert' or 'delete'", row=row)
        self.counters["updates"] += n_events
        # 002 §IV-A step 1: coalesce and split; E↓ entries (key, x, y_old | None, y_new), E↑ (key, x, y_old,
        # y_new | None); an x-move is a deletion at the old x (E↑) and an insertion at the new x (E↓)
        down: list[tuple] = []
        up: list[tuple] = []
        for key, new in final.items():
            old = tree.get(key)
            if old == new:
                continue
            if old is None:
                down.append((key, new[0], None, new[1]))
            elif new is None:
                up.append((key, old[0], old[1], None))
            elif old[0] != new[0]:
                up.append((key, old[0], old[1], None))
                down.append((key, new[0], None, new[1]))
            elif new[1] < old[1]:
                down.append((key, old[0], old[1], new[1]))
            else:
                up.append((key, old[0], old[1], new[1]))
        self.counters["steps"] += len(up) + len(down)
        ks = self._ks()
        if not ks:
            for key, x, yo, yn in up:
                tree.remove(key)
                if yn is not None:
                    tree.insert(key, x, yn)
            for key, x, yo, yn in down:
                if yo is not None:
                    tree.remove(key)
                tree.insert(key, x, yn)
            return Outcome((Step("lower", ()), Step("raise", ()), Step("lower", ())))
        kmax = ks[-1]
        changed = {e[0] for e in up} | {e[0] for e in down}
        # old value of every changed object as the subscribers hold it (None: not held; an x-move's new copy)
        y_old = {key: yo for key, _, yo, yn in down}
        y_old.update((key, yo) for key, _, yo, yn in up if yn is not None)
        # IR_before of the E↑ objects, before the index changes (O(|E|) space)
        before = {key: self._lists(x, yo, key, kmax) for key, x, yo, _ in up}
        # E↑ sweeps with E↓ not yet applied: the gains of the unchanged objects they expose (002 §III-A).  The
        # union of the gains does not depend on the order; from the highest old value down the sweeps meet the
        # fewest objects (an object swept later passes the earlier ones at their new, higher values)
        up.sort(key=lambda e: (e[2], e[0]), reverse=True)
        gains: dict = {}  # unchanged key -> [x, y, {k: [column, ...]}]

        def collect(k, cells, clip, j):
            if j[1] in changed:
                return
            entry = gains.setdefault(j[1], [j[2], j[0], {}])
            cols = entry[2].setdefault(k, [])
            for (il, ir, ol, orr), _ in cells:
                if clip is not None:
                    ol, orr = max(ol, clip[0]), min(orr, clip[1])
                if _nonempty(il, ir, ol, orr):
                    cols.append((ol, il, ir, orr))
        for key, x, yo, yn in up:
            tree.remove(key)
            left, right, c0 = self._lists(x, yo, key, kmax)
            self._sweep(key, x, yo, yn, ks, left, right, c0, collect)
            if yn is not None:
                tree.insert(key, x, yn)
        # step 2: E↓ into the index
        for key, x, yo, yn in down:
            if yo is not None:
                tree.remove(key)
            tree.insert(key, x, yn)

        def region(x, lists, k):
            return stair_columns(x, lists[0], lists[1], k - lists[2])
        # phase a: the leavers that cannot be pushed out silently get their new value (or deletion)
        risers = sorted((x, yo, key, yn) for key, x, yo, yn in up if yn is not None)  # by x
        riser_xs = [r[0] for r in risers]
        msgs_a: list = []
        after = {}  # IR_after lists of the E↑ objects still present
        for key, x, yo, yn in up:
            if yn is not None:
                after[key] = self._lists(x, yn, key, kmax)
            gone = {}
            for k in ks:
                cols = region(x, before[key], k)
                if yn is not None:
                    cols = columns_minus_stair(cols, region(x, after[key], k))
                if cols:
                    gone[k] = cols
            if gone:
                for k, cols in self._leaver_region(key, x, yo, yn, gone, ks, y_old, risers, riser_xs).items():
                    msgs_a += self._emit_columns(k, cols, key, x, yn)
        # phase b: falling values and entrants, in ascending order of old value
        phase_b: list = []
        for key, x, yo, yn in down:
            lists = self._lists(x, yn, key, kmax)
            phase_b.append(((0, yo, key) if yo is not None else (1, 0.0, key), key, x, yn,
                            {k: region(x, lists, k) for k in ks}))
        for key, (x, y, cols_k) in gains.items():
            lists = self._lists(x, y, key, kmax)
            parts = {}
            for k, cols in cols_k.items():
                fin = region(x, lists, k)
                parts[k] = [p for col in cols for p in columns_and([col], fin)]
            phase_b.append(((0, y, key), key, x, y, parts))
        for key, x, yo, yn in up:
            if yn is not None:
                phase_b.append(((0, yo, key), key, x, yn, {k: columns_minus_stair(
                    region(x, after[key], k), region(x, before[key], k)) for k in ks}))
        phase_b.sort(key=lambda e: e[0])
        msgs_b: list = []
        for _, key, x, y, parts in phase_b:
            for k in ks:
                if parts.get(k):
                    msgs_b += self._emit_columns(k, parts[k], key, x, y)
        # phase c: E↑ objects that stay, after every eviction
        msgs_c: list = []
        for key, x, yo, yn in up:
            if yn is not None:
                for k in ks:
                    cols = columns_and(region(x, after[key], k), region(x, before[key], k))
                    msgs_c += self._emit_columns(k, cols, key, x, yn)
        self.counters["messages"] += len(msgs_a) + len(msgs_b) + len(msgs_c)
        return Outcome((Step("lower", tuple(msgs_a)), Step("raise", tuple(msgs_b)), Step("lower", tuple(msgs_c))))

    def _leaver_region(self, key, x: float, yo: float, yn, gone: dict, ks: list, y_old: dict, risers: list,
                       riser_xs: list) -> dict:
        """Paint-Batch phase a: the part of ``gone`` (per k, the columns of IR_before(w) \\ IR_after(w), where
        w = key leaves the list) whose subscribers need w's message: those whose final list holds an object o
        with m(o) = min(old, new value) above w's old value, or fewer than k objects (see :meth:`apply_batch`).

        A sweep in the index after the batch from z = (yo, key) upwards, like Paint-Dense's (§III-A), keeps
        the first_k lists of the objects below z: those below yo after the batch, then each object met that
        was below yo before it (it rose past w: it counts as below).  Every other object met, q, is in the
        final list of the subscriptions still in θ_w^{≤k}(z) ∩ θ_q: they need w's message; q then walls them
        off (no later object decides them).  When the window runs dry the subscriptions left hold fewer than
        k objects at the end and need it too.  Only a rising object of the batch can have risen past w
        (``risers``: (x, old y, key, new y) by x); once none is left in the window every subscription still
        undecided meets another object (or none) first, and the sweep stops without more min_y calls."""
        tree = self.tree
        kmax = ks[-1]
        present = yn is not None  # w itself (at its new value) must not count
        if present:
            tree.remove(key)
        left, right, c0 = self._lists(x, yo, key, kmax)
        need: dict = {k: [] for k in gone}
        lo_wall, hi_wall = _NINF, _INF
        z = (yo, key)
        crossing = None
        c = self.counters
        while True:
            zones = {}
            for k, cols in gone.items():
                zone = columns_and(columns_clip(stair_columns(x, left, right, k - c0), x, lo_wall, hi_wall), cols)
                if zone:
                    zones[k] = zone
            if not zones:
                break
            # only objects inside the undecided subscriptions' ranges matter: the window is their extent
            lo = min(col[0] for zone in zones.values() for col in zone)
            hi = max(col[3] for zone in zones.values() for col in zone)
            if crossing is None:  # the risers that rose past w, within the first (widest) window
                crossing = [(xr, (y1, kr)) for xr, y0, kr, y1 in
                            risers[bisect_right(riser_xs, lo):bisect_left(riser_xs, hi)]
                            if kr != key and (y0, kr) < (yo, key) < (y1, kr)]
            crossing = [p for p in crossing if lo < p[0] < hi and z < p[1]]
            if not crossing:
                for k, zone in zones.items():
                    need[k] += zone
                break
            c["min_y"] += 1
            j = tree.min_y(lo, hi, False, z[0], z[1])
            if j is None:  # fewer than k objects end in these ranges: every leaver must be sent
                for k, zone in zones.items():
                    need[k] += zone
                break
            yj, kj, xj = j
            c["exposed"] += 1
            yj_old = y_old[kj] if kj in y_old else yj
            if yj_old is not None and (yj_old, kj) < (yo, key):
                c0 += self._join(x, left, right, xj, kmax)  # it rose past w: one more object below
            else:
                for k, zone in zones.items():
                    need[k] += columns_clip(zone, x, xj=xj)
                if xj < x:
                    lo_wall = max(lo_wall, xj)
                elif xj > x:
                    hi_wall = min(hi_wall, xj)
                else:
                    break
            z = (yj, kj)
        if present:
            tree.insert(key, x, yn)
        return {k: cols for k, cols in need.items() if cols}

    # ---- Unicast baseline (002 §V) ------------------------------------------------------------------------
    def _unicast(self, key, x: float, yo, yn) -> list:
        """Unicast (002 §V): every subscription in the box (ℓ, x_i] × [x_i, r) of Π_old(i) ∪ Π_new(i) is
        examined (``checked``); i's rank in it comes from i's first_k lists; a rank-lowering update that
        drops i from its top k sends the replacement, found by walking min_y from y_old.

        002 finds the replacement with one call, min_y(σ_j, y_old), and its Tables III-IV count one min_y per
        examined subscription in every update (the expected box size reproduces them within a few percent,
        ``docs/benchmarks/topk.md``).  That call
        returns the object right after i, which is the replacement only when i is the subscription's k-th: at
        rank r < k it returns an object the subscription already holds (k = 2, list [i, a], i rises above the
        third object b: min_y gives a), so a server without per-subscription state needs k - r + 1 calls, the
        walk here; examined subscriptions that the lists show unaffected, and rank-raising updates, need none.
        ``checked`` is therefore 002's count, ``min_y`` the calls this correct server makes."""
        ks = self.subscriptions.ks()
        tree = self.tree
        raising = yo is None or (yn is not None and yn < yo)
        if yo is not None:
            tree.remove(key)
        out: list = []
        if ks:
            # the lists of the larger region: IR_new(i) when raising, IR_old(i) when lowering
            left, right, c0 = self._lists(x, yn if raising else yo, key, ks[-1])
            uy = None if yn is None else self._sign(yn)
            c = self.counters
            for k in ks:
                K = k - c0
                if K <= 0:
                    continue
                lo = left[K - 1] if K <= len(left) else _NINF
                hi = right[K - 1] if K <= len(right) else _INF
                # candidates: the bounding box (ℓ_K, x] × [x, r_K) of IR(i) (002 §V, Unicast)
                for sid in self.subscriptions.in_rect(k, (x, x, lo, hi)):
                    c["checked"] += 1
                    x1, x2, _ = self.subscriptions.get(sid)
                    rank = 1 + c0 + sum(1 for v in left if v >= x1) + sum(1 for v in right if v <= x2)
                    if rank > k:
                        continue
                    if raising:  # i enters the top k or moves up in it
                        out.append(UnicastMessage(sid, key, x, uy))
                        continue
                    # lowering: the k-th best other object in σ, i.e. the (k - rank + 1)-th above y_old,
                    # replaces i unless i's new value still beats it
                    z = (yo, key)
                    j = None
                    for _ in range(k - rank + 1):
                        c["min_y"] += 1
                        j = tree.min_y(x1, x2, True, z[0], z[1])
                        if j is None:
                            break
                        z = (j[0], j[1])
                    if j is not None and (yn is None or (j[0], j[1]) < (yn, key)):
                        out.append(UnicastMessage(sid, j[1], j[2], self._sign(j[0]), key))
                    else:
                        out.append(UnicastMessage(sid, key, x, uy))
        if yn is not None:
            tree.insert(key, x, yn)
        return out

    # ---- reporting ------------------------------------------------------------------------------------------
    def explain(self) -> dict:
        """Objects, subscriptions, mode and counters, with messages and index calls per update so far."""
        c = self.counters
        n = max(c["updates"], 1)
        return {
            "algorithm": {"dense": "Paint-Dense", "sparse": "Paint-Sparse", "unicast": "Unicast",
                          "relax": "CN-Relax"}[self.mode] + (f"({self.epsilon})" if self.epsilon else ""),
            "order": "y DESC" if self.descending else "y ASC",
            "objects": len(self.tree),
            "distinct_x": self.tree.distinct_x(),
            "subscriptions": len(self.subscriptions),
            "k_values": self._ks(),
            "counters": dict(c),
            "per_update": {name: c[name] / n for name in ("messages", "first_k", "min_y", "snap")},
        }
