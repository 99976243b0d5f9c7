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
  ↓ and ↑ events, ↑ processed in descending order of new values, ↓ notified last.  Not exactly minimal per
  subscriber (see the method for the gap).

Insertions are updates from y = ∞, deletions updates to y = ∞, an x-move is a deletion step then an insertion
step (002 footnote 4); a subscriber applies the two steps in order.

Counters (002 Tables III-IV): ``first_k``, ``min_y``, ``snap`` calls, ``messages``, ``updates``; also
``exposed`` (objects met by sweeps) and ``find`` (the underlying FINDL/FINDR calls of the A2B-tree).
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from sparksub.errors import (
    BadUpdate,
    DuplicateSubscription,
    InvalidSubscription,
    UnknownSubscription,
)
from sparksub.operators.point_index import PointIndex2D
from sparksub.operators.range_min import A2BTree, matches

__all__ = [
    "MODES", "Outcome", "RelaxSubscriber", "Step", "Subscriptions", "TopkCore", "TopkIndex", "TopkMessage",
    "TopkSubscriber", "UnicastMessage", "coarsen", "deliver", "diagonal_cells", "reaches", "staircase_tiles",
    "union_staircase",
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


class _Ghost:
    """Paint-Batch: the tree key of an x-moved object's old copy while its new copy is already in the index
    (002 §IV-A step 2).  Ranks exactly like its key, just after the new copy on a full tie."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def _pair(self, other):
        if isinstance(other, _Ghost):
            return (self.key, 1), (other.key, 1)
        return (self.key, 1), (other, 0)

    def __lt__(self, other):
        if other is _TOP:
            return True
        a, b = self._pair(other)
        return a < b

    def __gt__(self, other):
        if other is _TOP:
            return False
        a, b = self._pair(other)
        return a > b

    def __le__(self, other):
        return not self > other

    def __ge__(self, other):
        return not self < other

    def __eq__(self, other):
        return isinstance(other, _Ghost) and other.key == self.key

    def __hash__(self):
        return hash((_Ghost, self.key))

    def __repr__(self):
        return f"Ghost({self.key!r})"


def _user_key(key):
    return key.key if isinstance(key, _Ghost) else key


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


def _column_bounds(tiles: list[tuple]) -> list[tuple[float, float, float]]:
    """Staircase tiles as (ℓ low exclusive, ℓ high inclusive, r bound exclusive), ℓ descending."""
    return [(r[2], r[0], r[3]) for r, _ in tiles]


def union_staircase(x0: float, tiles_a: list[tuple], tiles_b: list[tuple]) -> list[tuple]:
    """Column tiles of the union of two staircases with the same apex (x0, x0) (Paint-Batch, 002 §IV-A step 3:
    IR_new(i) ∪ IR_pre(i)): per ℓ the larger r bound, adjacent columns with equal bounds merged.

    >>> A = staircase_tiles(5.0, [4.0, 2.0], [7.0], 2)
    >>> B = staircase_tiles(5.0, [3.0], [9.0, 11.0], 2)
    >>> [r for r, a in union_staircase(5.0, A, B)]
    [(5.0, 5.0, 4.0, inf), (4.0, 5.0, 3.0, 11.0), (3.0, 5.0, -inf, 9.0)]
    """
    cols = _column_bounds(tiles_a) + _column_bounds(tiles_b)
    if not cols:
        return []
    pts = sorted({c[0] for c in cols} | {c[1] for c in cols}, reverse=True)  # breakpoints in ℓ, west-going
    out: list[tuple] = []
    for hi, lo in pairwise(pts):
        # the segment ℓ ∈ (lo, hi]: bound = max over columns covering it
        bound = max((c[2] for c in cols if c[0] <= lo and hi <= c[1]), default=None)
        if bound is None:
            continue
        if out and out[-1][3] == bound and out[-1][2] == hi:
            prev = out.pop()
            out.append((prev[0], x0, lo, bound))
            continue
        out.append((hi, x0, lo, bound))
    # lowest column may extend to -inf (ℓ = -inf admitted): pts already contains -inf then
    return [(r, a) for a, r in enumerate(out)]


def _box_rect(lmin: float, lmax: float, rmin: float, rmax: float) -> tuple:
    """The message rectangle of a closed box [lmin, lmax] × [rmin, rmax] of subscription points."""
    return (lmax, rmin, _nextafter(lmin, _NINF), _nextafter(rmax, _INF))


# --------------------------------------------------------------------------------------------------------------
# The object index: the range-min A2B-tree with 002's two queries
# --------------------------------------------------------------------------------------------------------------
class TopkIndex(A2BTree):
    """The A2B-tree of ``range_min`` (per-X min Y, FINDL/FINDR) answering 002 §II-B's ``first_k`` and
    ``min_y`` over rank values ``(y, key)``.

    Both walk the upper tier with FINDL/FINDR at the threshold's y and look into the lower tier (sorted by
    ``(y, key)``) at each X found, so y ties are resolved by key.  Cost: one FIND per distinct X visited;
    ``min_y`` visits the X's in its range holding an object at or below the threshold (at most ~2k in a
    sweep) plus one range-min per gap between them.
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
        < (y0, key0), nearest first, as (x, y, key).  Fewer when the quadrant holds fewer."""
        out: list = []
        find = self.find_left if leftward else self.find_right
        x = x0
        thr = (y0, key0)
        while len(out) < k:
            x, _ = find(x, y0)
            if x == _INF or x == _NINF:
                break
            for y, key in self._items_at(x):
                if not (y, key) < thr:
                    break
                out.append((x, y, key))
                if len(out) == k:
                    break
        return out

    def _gap_best(self, a: float, b: float, best):
        """Best (y, key, x) over [a, b], where every per-X min is above the threshold."""
        if not a <= b:
            return best
        m = self.range_min(a, b)
        if m == _INF or (best is not None and m > best[0]):
            return best
        x = _nextafter(a, _NINF)
        while True:  # every X in the gap whose min is m (ties in y: the smallest key wins)
            x, _ = self.find_right(x, m)
            if x == _INF or x > b:
                return best
            y, key = next(iter(self._items_at(x)))
            if best is None or (y, key) < best[:2]:
                best = (y, key, x)

    def min_y(self, lo: float, hi: float, closed: bool, y0: float, key0) -> tuple | None:
        """002 §II-B ``min_y(σ, y0)``: the object with the smallest rank value > (y0, key0) among those with x
        in σ = [lo, hi] (``closed``) or (lo, hi); as (y, key, x), or None."""
        if closed:
            a, b = lo, hi
        else:
            a, b = _nextafter(lo, _INF), _nextafter(hi, _NINF)
        if not a <= b or not self._pos:
            return None
        thr = (y0, key0)
        best = None
        x = _nextafter(a, _NINF)
        gap_lo = a
        while True:
            bx, _ = self.find_right(x, y0)  # next X holding an object with y <= y0 (a "blocked" X)
            if bx == _INF or bx > b:
                return self._gap_best(gap_lo, b, best)
            best = self._gap_best(gap_lo, _nextafter(bx, _NINF), best)
            for y, key in self._items_at(bx):
                if thr < (y, key):
                    if best is None or (y, key) < best[:2]:
                        best = (y, key, bx)
                    break
            gap_lo = _nextafter(bx, _INF)
            x = bx

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
            "updates": 0, "steps": 0, "messages": 0, "first_k": 0, "min_y": 0, "snap": 0, "exposed": 0, "find": 0}
        self.tree = TopkIndex(leaf_capacity, counters=self.counters)
        self.subscriptions = Subscriptions()
        self._discard: set = set()  # Paint-Batch: exposed objects whose messages are dropped (§IV-A step 3)
        self._discarded: set = set()  # ... and those of them that did lose messages

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
        if yo is not None:
            self.tree.remove(key)
        if yn is not None:
            self.tree.insert(key, x, yn)

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

    def _emit(self, k: int, tiles: list, key, x: float, y: float | None, clip: tuple | None = None) -> list:
        """Messages carrying object (key, x, y) for one k covering ``tiles`` (dense: one per tile; sparse:
        snapped, empty tiles dropped, consecutive ones merged greedily, 002 §III-B)."""
        if not tiles:
            return []
        if key in self._discard:
            self._discard.discard(key)  # one call with the real tiles tells whether messages are lost
            if self._emit(k, tiles, key, x, y, clip):
                self._discarded.add(key)
            self._discard.add(key)
            return []
        tiles = coarsen(tiles, self._g(k))
        uy = None if y is None else self._sign(y)
        ukey = _user_key(key)
        if self.mode == "dense":
            return [TopkMessage(k, *rect, ukey, x, uy) for rect, _ in tiles]
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
                out.append(TopkMessage(k, *_box_rect(*cur[:4]), ukey, x, uy))
            cur = s
        if cur is not None:
            out.append(TopkMessage(k, *_box_rect(*cur[:4]), ukey, x, uy))
        return out

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

    # ---- Paint-Dense / Paint-Sparse (002 §III) ------------------------------------------------------------
    def _paint(self, key, x: float, yo, yn, raising: bool, region_override=None) -> list:
        ks = self._ks()
        tree = self.tree
        if yo is not None:
            tree.remove(key)
        if not ks:
            if yn is not None:
                tree.insert(key, x, yn)
            return []
        kmax = ks[-1]
        msgs: list = []
        if raising:
            # 002 §III-A rank-raising: IR_new(i) ⊇ IR_old(i); tile IR_new(i) with (x_i, y_new)
            left, right, c0 = self._lists(x, yn, key, kmax)
            for k in ks:
                if k - c0 > 0:
                    msgs += self._emit(k, staircase_tiles(x, left, right, k - c0), key, x, yn)
            tree.insert(key, x, yn)
            return msgs
        # 002 §III-A rank-lowering: tile IR_old(i) with the new value, then sweep the exposed objects
        left, right, c0 = self._lists(x, yo, key, kmax)
        sparse = self.mode == "sparse"
        clip: dict[int, tuple | None] = {}
        for k in ks:
            K = k - c0
            tiles = staircase_tiles(x, left, right, K) if K > 0 else []
            if region_override is not None:
                tiles = region_override(k)
            msgs += self._emit(k, tiles, key, x, yn)
            if sparse:
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
                closed = False
            else:
                active = ks
                K = kmax - c0
                if K <= 0:
                    break
                lo = left[K - 1] if K <= len(left) else _NINF
                hi = right[K - 1] if K <= len(right) else _INF
                closed = False
            c["min_y"] += 1
            j = tree.min_y(lo, hi, closed, z[0], z[1])  # next exposed object (002 Fig. 2(b))
            if j is None or (stop is not None and not (j[0], j[1]) < stop):
                break
            yj, kj, xj = j
            c["exposed"] += 1
            for k in active:
                K = k - c0
                if K > 0:
                    msgs += self._emit(k, diagonal_cells(x, left, right, K, xj), kj, xj, yj,
                                       clip[k] if sparse else None)
            # i passes j: j joins the lists (Eq. (1)); lists keep the first kmax objects below z
            if xj < x:
                p = next((n for n, v in enumerate(left) if v < xj), len(left))
                left.insert(p, xj)
                del left[kmax:]
            elif xj > x:
                p = next((n for n, v in enumerate(right) if v > xj), len(right))
                right.insert(p, xj)
                del right[kmax:]
            else:
                c0 += 1
            z = (yj, kj)
            if sparse:
                for k in active:
                    K = k - c0
                    clip[k] = self._apex(k, staircase_tiles(x, left, right, K), clip[k]) if K > 0 else None
        if yn is not None:
            tree.insert(key, x, yn)
        return msgs

    # ---- Paint-Batch (002 §IV-A) ----------------------------------------------------------------------------
    def apply_batch(self, events: Iterable[tuple]) -> Outcome:
        """Paint-Batch over a batch of ``("upsert", key, x, y)`` / ``("delete", key)`` events (002 §IV-A,
        Theorem 3); subscribers are correct at the end of the batch (not in between).

        1. Coalesce the events per object (net change; an x-move is a deletion at the old x, an ↑ event, and
           an insertion at the new x, a ↓ event) and split them into E↓ (y decreases, insertions) and E↑.
        2. Apply E↓ to the index without messages.
        3. Process E↑ in descending order of new values with the online algorithm, dropping messages for
           exposed objects that are in E↓ or not yet processed in E↑; an object whose messages were dropped
           notifies IR_new ∪ IR_pre.  Here IR_pre is the region **before the batch** (also for objects
           without dropped messages, in place of IR_old): a subscriber may hold an E↑ object's old value
           although E↓ pushed the object out of its top k in the index, and a stale value that outranks an
           entrant would survive step 4 (a counter-example to using the region after step 2 is in the tests).
        4. Notify IR_new(i) with i's final value for every i in E↓.

        Gap to Theorem 3 (checked by brute force in the tests): each subscriber gets at most the minimum
        number of messages plus one per deleted / risen object that leaves its list (an optimum may let an
        entrant push such an object out instead of sending its new value).  An x-move is a deletion (of a
        ghost copy at the old x) plus an insertion, so a subscriber holding the object before and after the
        move may get two or more messages where one would do.

        The batch is validated first (``BadUpdate``: NaN, unknown key on delete); nothing is applied then.
        Only for modes 'dense' and 'sparse'; the outcome has one step per phase ('lower' = step 3,
        'raise' = step 4).
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
        # step 1: coalesce and split; E↑ entries are (tree key, x, y_old, y_new | None)
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
            elif old[0] != new[0]:  # x-move: delete the old copy (under a ghost key), insert the new one
                up.append((_Ghost(key), old[0], old[1], None))
                down.append((key, new[0], None, new[1]))
            elif new[1] < old[1]:
                down.append((key, old[0], old[1], new[1]))
            else:
                up.append((key, old[0], old[1], new[1]))
        ks = self._ks()
        kmax = ks[-1] if ks else 0
        # IR_pre of every E↑ object, taken before the batch touches the index (O(n) space): the subscribers
        # that may still hold the object's old value
        pre = {key: self._lists(x, yo, _user_key(key), kmax) for key, x, yo, _ in up} if ks else {}
        for key, x, yo, _ in up:
            if isinstance(key, _Ghost):
                tree.remove(key.key)
                tree.insert(key, x, yo)
        # step 2: apply E↓, no messages
        for key, x, yo, yn in down:
            if yo is not None:
                tree.remove(key)
            tree.insert(key, x, yn)
        # step 3: E↑ in descending order of new values (deletions = +inf first, by old value)
        up.sort(key=lambda e: (e[3] is None, (e[3], e[0]) if e[3] is not None else (e[2], e[0])), reverse=True)
        self._discard = {e[0] for e in down} | {e[0] for e in up}
        self._discarded = set()
        msgs3: list = []
        for key, x, yo, yn in up:
            self._discard.discard(key)
            self.counters["steps"] += 1
            override = None
            if ks:
                left_p, right_p, c0_p = pre[key]
                marked = key in self._discarded

                def override(k, key=key, x=x, yn=yn, left_p=left_p, right_p=right_p, c0_p=c0_p, marked=marked):
                    tiles_pre = staircase_tiles(x, left_p, right_p, k - c0_p) if k > c0_p else []
                    if yn is None or not marked:
                        return tiles_pre
                    left_n, right_n, c0_n = self._lists(x, yn, key, kmax)
                    tiles_new = staircase_tiles(x, left_n, right_n, k - c0_n) if k > c0_n else []
                    return union_staircase(x, tiles_new, tiles_pre)
            msgs3 += self._paint(key, x, yo, yn, False, region_override=override)
        self._discard = set()
        self._discarded = set()
        # step 4: E↓ objects notify their final influence regions
        msgs4: list = []
        for key, x, _, yn in down:
            self.counters["steps"] += 1
            if not ks:
                continue
            tree.remove(key)
            left, right, c0 = self._lists(x, yn, key, kmax)
            tree.insert(key, x, yn)
            for k in ks:
                if k > c0:
                    msgs4 += self._emit(k, staircase_tiles(x, left, right, k - c0), key, x, yn)
        self.counters["messages"] += len(msgs3) + len(msgs4)
        return Outcome((Step("lower", tuple(msgs3)), Step("raise", tuple(msgs4))))

    # ---- Unicast baseline (002 §V) ------------------------------------------------------------------------
    def _unicast(self, key, x: float, yo, yn) -> list:
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
