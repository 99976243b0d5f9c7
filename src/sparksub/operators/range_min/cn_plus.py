"""CN+ (000 §2.2.2): a content-based network that cuts an update's forwarding off early, and its subscribers.

000 §2.2.2: every range-MIN subscription keeps "a stock tuple with the minimum PER in [its] RISK range" (its
*witness*); an update ``Δ(t: x, y_o → y_n)`` is routed to its event point ``(x, x)`` of the subscription space
{(x1, x2)} and forwarded up and left, tagged with a cutoff point ``(c1, c2)``, initially ``(-∞, ∞)``: it is
never forwarded outside the rectangle ``c1 < x1 <= x, x <= x2 < c2``; a subscription it reaches that the update
leaves alone refines the cutoff with its witness's X ``x'`` (``x' < x``: ``c1 = x'``; ``x' > x``: ``c2 = x'``),
by the **cutoff property**: a subscription not affected because of a tuple ``t'`` at ``x'`` with
``y' <= min(y_o, y_n)`` protects every range containing ``[min(x, x'), max(x, x')]``.  The paper leaves the
increasing updates out ("the details are messy"; its footnote 1: the network keeps "the entire database state
along the diagonal of the 2-d CAN space, which supports computation of any new minima exposed by bad
updates") and measured CN+ on decreasing updates only.  Here both directions are handled:

* **Ranks.**  Ties are broken so that every tuple has a distinct rank ``(y, x, key)`` (Y in MIN order; MAX is
  MIN on -Y); a subscription's witness is the lowest-ranked tuple of its range (:func:`range_argmin`), and its
  value the witness's Y.  With ``r_o = (y_o, x, t)``, ``r_n = (y_n, x, t)`` (∞ for an insertion / a
  deletion) and ``r_min = min(r_o, r_n)``, a subscription ``S ∋ x`` changes state iff no tuple of S but t
  ranks below ``r_min``; otherwise S's witness ranks below ``r_min`` and the cutoff property holds for every
  range containing both x and that witness (its lowest tuple is never t, before or after).  So a subscription
  the forwarding skips keeps a correct state, and every one whose state changes is reached.
* **What a reached subscriber does** (:meth:`CnPlusNetwork.route`): its witness is not t and ``r_n`` beats
  it -- t becomes its witness (a decrease, an insertion); its witness is t and ``r_n < r_o`` -- t's new Y;
  its witness is t and t rose or left -- it asks the diagonal for its range's lowest tuple (one *diagonal
  query*: the cost of increasing updates 000 calls messy); otherwise it is not affected and cuts off.  A
  state change without a change of value (a tie) produces no row.
* **Visiting order.**  The flood from ``(x, x)`` reaches nearer subscriptions first: the network visits the
  subscriptions ``[x1, x2] ∋ x`` inside the cutoff in order of their L1 distance ``x2 - x1`` from the event
  point (then slot); CAN zones are not modelled.  The set it reaches is computed without walking it: the
  affected subscriptions are exactly the rectangle ``x1 ∈ (x_l, x], x2 ∈ [x, x_r)`` of the rank-Mar
  ``(x_l, x_r)`` around x (the widest range around x with no tuple but t ranked below ``r_min``; 000
  Definition 1 on ranks, Theorem 1), none of them is ever cut off, and the others reached are, in visiting
  order, the shortest subscription still inside the cutoff and outside that rectangle, whose witness then
  refines the cutoff (it always shrinks it: the witness lies inside the subscription's range, hence inside
  the cutoff) -- found with a few rectangle counts of a growing box at the rectangle's corner.  Every
  reached subscriber then decides from its own state; a state that disagrees with the diagonal raises.

An X-move is a deletion at the old X then an insertion at the new one (two messages, steps 0 and 1).

Wire sizes: a CN+ message is the update and its cutoff point, ``⟨key, X, NEW_Y, c1, c2, seq⟩`` (48 bytes)
on every hop to a subscription it reaches; a diagonal query is a request ``⟨x1, x2, address⟩`` and an answer
``⟨y, x, key⟩`` (48 bytes).  Pure (numpy only).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sparksub.operators.range_min.core import A2BTree

__all__ = ["CnPlusNetwork", "Route", "range_argmin", "range_argmin_many", "CN_PLUS_MESSAGE_BYTES",
           "DIAGONAL_QUERY_BYTES", "rank_key"]

_INF = math.inf
_NINF = -math.inf
_MAXF = 1.7976931348623157e308
_nextafter = math.nextafter

#: one CN+ message on one hop: key, X, NEW_Y, the cutoff point (c1, c2), seq (6 x 8 bytes)
CN_PLUS_MESSAGE_BYTES = 6 * 8
#: one diagonal query: the request (x1, x2, the subscriber's address) and the answer (y, x, key), 6 x 8 bytes
DIAGONAL_QUERY_BYTES = 6 * 8
#: queries answered one by one below this many per update, with one sparse table above
_BULK_QUERIES = 1024


def rank_key(key) -> str:
    """A tuple key as the network ranks it: its text (``key_text``), so int and str tables alike have one order."""
    return key if isinstance(key, str) else str(key)


def range_argmin(tree: A2BTree, x1: float, x2: float) -> tuple[float, float, object] | None:
    """The lowest-ranked tuple ``(y, x, key)`` with ``x1 <= x <= x2`` (rank ``(y, x, key)``), None if none."""
    m = tree.range_min(x1, x2)
    if m == _INF:
        return None
    xw = tree.find_right(_nextafter(x1, _NINF), m)[0]   # the leftmost X >= x1 holding y = m
    y, key = tree.first_at(xw)
    return y, xw, key


def range_argmin_many(tree: A2BTree, x1s, x2s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :func:`range_argmin`: ``(y, x, key)`` arrays (``y = +inf``, x NaN, key None: empty range),
    from a sparse table of leftmost-minimum positions over the per-X minima."""
    x1s = np.asarray(x1s, dtype=np.float64)
    x2s = np.asarray(x2s, dtype=np.float64)
    n = x1s.size
    wy = np.full(n, _INF)
    wx = np.full(n, np.nan)
    wkey = np.full(n, None, dtype=object)
    allx, allm = tree.arrays()
    N = allx.size
    if N == 0 or n == 0:
        return wy, wx, wkey
    levels = [np.arange(N)]
    h = 1
    while 2 * h <= N:
        prev = levels[-1]
        a, b = prev[:N - h], prev[h:N]
        nxt = prev.copy()
        nxt[:N - h] = np.where(allm[a] <= allm[b], a, b)   # ties to the left: the leftmost minimum
        levels.append(nxt)
        h *= 2
    i = np.searchsorted(allx, x1s, "left")
    j = np.searchsorted(allx, x2s, "right") - 1
    ok = j >= i
    if not ok.any():
        return wy, wx, wkey
    iv, jv = i[ok], j[ok]
    k = np.frexp((jv - iv + 1).astype(np.float64))[1] - 1
    table = np.vstack(levels)
    a = table[k, iv]
    b = table[k, jv - (1 << k) + 1]
    pick = np.where(allm[a] <= allm[b], a, b)
    wy[ok] = allm[pick]
    wx[ok] = allx[pick]
    keys = {p: tree.first_at(float(allx[p]))[1] for p in np.unique(pick).tolist()}
    wkey[np.flatnonzero(ok)] = [keys[p] for p in pick.tolist()]
    return wy, wx, wkey


class Route(NamedTuple):
    """One update step through the network: the subscriptions whose state changes (``affected``, by slot),
    those that cut the forwarding off, in visiting order (``cutoffs``), and the direction."""

    affected: np.ndarray
    cutoffs: list
    increase: bool          # t's rank rose (a Y increase or a deletion): its affected subscribers query


class CnPlusNetwork:
    """CN+'s network and subscribers over one group's subscription points (``points``: a
    ``delivery.SubscriptionPoints``; module docstring).

    ``diagonal``: the table the network keeps (an :class:`A2BTree` in MIN order, keys as text); ``keep_state``:
    each subscriber's witness (``wy`` MIN-order Y, +inf = empty range; ``wx``; ``wkey``), slot-indexed -- without
    it the network only counts (the benchmark: every decision is the diagonal's then, which is what a correct
    state gives).  ``maximum``: MAX subscriptions (Y negated on the way in and out).

    Counters: ``messages`` (update steps routed), ``deliveries`` (subscriptions reached), ``cutoffs`` (reached
    and unaffected), ``queries`` (diagonal queries), ``stabbed`` (what CN, the relaxation, would deliver: every
    range holding X), and the same for the decreasing steps alone (``*_decreasing``), which is what 000 §5
    measured CN+ on.
    """

    def __init__(self, points, maximum: bool = False, keep_state: bool = True):
        self.points = points
        self.maximum = bool(maximum)
        self.keep_state = keep_state
        self.diagonal = A2BTree()
        self.wy = np.full(0, _INF)
        self.wx = np.full(0, np.nan)
        self.wkey = np.full(0, None, dtype=object)
        self.counters = {name: 0 for name in (
            "messages", "deliveries", "cutoffs", "queries", "stabbed", "messages_decreasing",
            "deliveries_decreasing", "cutoffs_decreasing", "stabbed_decreasing")}
        self._extent()

    # ---- state ---------------------------------------------------------------------------------------------
    def _extent(self) -> None:
        """The finite extent of the subscriptions' ends: where the corner search stops growing its box."""
        _, x1, x2 = self.points.index.points()
        f1, f2 = x1[np.isfinite(x1)], x2[np.isfinite(x2)]
        self._x1_min = float(f1.min()) if f1.size else _INF
        self._x2_max = float(f2.max()) if f2.size else _NINF
        # the corner search's first slack: a thousandth of the spread of the finite ends
        lo = min(self._x1_min, float(f2.min()) if f2.size else _INF)
        hi = max(self._x2_max, float(f1.max()) if f1.size else _NINF)
        self._slack0 = max((hi - lo) / 1024 if hi > lo else 1.0, 1e-9)

    def _sign(self, y):
        return -y if self.maximum else y

    def load(self, keys, xs, ys) -> None:
        """The diagonal's rows (user sign; rows with a NaN X or Y are in no range), then every witness."""
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        ok = ~(np.isnan(xs) | np.isnan(ys))
        keys = [rank_key(k) for k, keep in zip(keys, ok.tolist()) if keep]
        self.diagonal.bulk_load(keys, xs[ok], -ys[ok] if self.maximum else ys[ok])
        self._extent()
        if self.keep_state:
            self.seed()

    def seed(self, slots=None) -> None:
        """Each subscriber's witness from the diagonal (``slots``: those; default every live one)."""
        cap = self.points.capacity
        if self.wy.size < cap:
            grow = cap - self.wy.size
            self.wy = np.concatenate([self.wy, np.full(grow, _INF)])
            self.wx = np.concatenate([self.wx, np.full(grow, np.nan)])
            self.wkey = np.concatenate([self.wkey, np.full(grow, None, dtype=object)])
        slots = self.points.live_slots() if slots is None else np.asarray(slots, dtype=np.int64)
        wy, wx, wkey = range_argmin_many(self.diagonal, self.points.x1[slots], self.points.x2[slots])
        self.wy[slots], self.wx[slots], self.wkey[slots] = wy, wx, wkey
        self._extent()

    def values(self, slots) -> np.ndarray:
        """The subscribers' values (user sign, NaN = empty range)."""
        v = self.wy[np.asarray(slots, dtype=np.int64)].copy()
        v[v == _INF] = np.nan
        return -v if self.maximum else v

    # ---- routing ------------------------------------------------------------------------------------------
    def route(self, key, x: float, y) -> list[tuple[Route, np.ndarray]]:
        """One CN+ message ``⟨key, x, y⟩`` (user sign; y None / NaN: the tuple is deleted, X its X): apply it to
        the diagonal and route it.  Returns per step (an X-move is two) its :class:`Route` and the affected
        subscribers' new MIN-order Y (+inf = empty; empty array without ``keep_state``)."""
        key = rank_key(key)
        x = float(x)
        yn = None if y is None or y != y else self._sign(float(y))
        old = self.diagonal.get(key)
        if old is not None and yn is not None and old[0] != x:
            return self.route(key, old[0], None) + self.route(key, x, y)
        yo = None if old is None else old[1]
        if old is not None and yn is None:
            x = old[0]
        if yo == yn:
            return []
        return [self._step(key, x, yo, yn)]

    def _step(self, key, x: float, yo, yn) -> tuple[Route, np.ndarray]:
        d = self.diagonal
        if yo is None:
            d.insert(key, x, yn)
        elif yn is None:
            d.remove(key)
        else:
            d.update_y(key, yn)
        increase = yn is None or (yo is not None and yn > yo)
        ym = yo if increase else yn                    # r_min = (ym, x, key)
        # the rank-Mar (x_l, x_r): nearest X left with a Y <= ym, right with a Y < ym (ranks break ties by X)
        other = d.first_at(x, key)
        if other is not None and other < (ym, key):
            x_l = x_r = x                              # a tuple at x itself ranks below r_min: nothing changes
        else:
            x_l = d.find_left(x, ym)[0]
            x_r = d.find_right(x, ym, True)[0]
        idx = self.points.index
        # x1 ∈ (x_l, x], x2 ∈ [x, x_r); an infinite end of the Mar admits the same infinite end (000 §2.3.1)
        rect = (x_l, x_l == _NINF, x, True, x, True, x_r, x_r == _INF) if x_l < x else None
        c = self.counters
        if self.keep_state:
            affected = np.sort(idx.query(*rect)) if rect else np.empty(0, dtype=np.int64)
            n_aff = int(affected.size)
        else:
            affected = np.empty(0, dtype=np.int64)
            n_aff = idx.count(*rect) if rect else 0
        cutoffs = self._cutoffs(key, x, x_l, x_r)
        stabbed = idx.stab_count(x)
        n = n_aff + len(cutoffs)
        c["messages"] += 1
        c["deliveries"] += n
        c["cutoffs"] += len(cutoffs)
        c["stabbed"] += stabbed
        c["queries"] += n_aff if increase else 0
        if not increase:
            c["messages_decreasing"] += 1
            c["deliveries_decreasing"] += n
            c["cutoffs_decreasing"] += len(cutoffs)
            c["stabbed_decreasing"] += stabbed
        route = Route(affected, cutoffs, increase)
        if not self.keep_state:
            return route, np.empty(0)
        return route, self._apply(route, key, x, yo, yn)

    def _cutoffs(self, key, x: float, x_l: float, x_r: float) -> list:
        """The unaffected subscriptions the forwarding reaches, in visiting order, as ``(slot, witness X)``: the
        shortest one inside the cutoff and outside the affected rectangle, again and again (module docstring)."""
        out = []
        c1, c2 = _NINF, _INF                           # x1 > c1 and x2 < c2 (an infinite one admits the same end)
        x1s, x2s = self.points.x1, self.points.x2
        while True:
            a1c, b2c = c1 == _NINF, c2 == _INF
            # unaffected: x1 <= x_l (box A) or x2 >= x_r (box B)
            # (x_l = -inf / x_r = +inf: no tuple on that side ranks below r_min, nothing is protected by it)
            best = min((b for b in (self._shortest(c1, a1c, x_l, x, c2, b2c) if x_l > _NINF else None,
                                    self._shortest(c1, a1c, x, x_r, c2, b2c) if x_r < _INF else None)
                        if b is not None), default=None)
            if best is None:
                return out
            s = best[1]
            w = range_argmin(self.diagonal, x1s[s], x2s[s])
            if self.keep_state and (self.wkey[s] != w[2] or self.wy[s] != w[0]):
                raise RuntimeError(f"CN+ subscriber at slot {s} holds witness {self.wkey[s]!r} "
                                   f"(y {self.wy[s]!r}), the diagonal says {w[2]!r} (y {w[0]!r})")
            out.append((s, w[1]))
            if w[1] < x:
                c1 = w[1]
            elif w[1] > x:
                c2 = w[1]
            else:
                return out                             # a witness at x protects every range holding x

    def _shortest(self, a1: float, a1c: bool, b1: float, a2: float, b2: float, b2c: bool):
        """``(length, slot)`` of the shortest subscription (then lowest slot) with ``x1 ∈ (a1, b1]`` (``[a1``
        when ``a1c``) and ``x2 ∈ [a2, b2)`` (``b2]`` when ``b2c``), ``b1 <= a2``; None if there is none.  The
        box at the corner ``(b1, a2)`` holding every point of length <= L grows until it holds one."""
        if not (a1 < b1 or (a1c and a1 == b1)) or not (a2 < b2 or (b2c and a2 == b2)):
            return None
        idx = self.points.index
        x1s, x2s = self.points.x1, self.points.x2
        # finite lengths first: the box within the subscriptions' finite extent
        f1, f1c = (a1, a1c) if a1 > _NINF else (self._x1_min, True)
        f2, f2c = (b2, b2c) if b2 < _INF else (self._x2_max, True)
        base = a2 - b1
        if f1 <= b1 and a2 <= f2:
            d = self._slack0

            def box(L):
                lo = a2 - L - (abs(a2) + L) * 1e-12       # a margin for the rounding of x2 - x1
                hi = b1 + L + (abs(b1) + L) * 1e-12
                full = lo <= f1 and hi >= f2
                return ((lo, True) if lo > f1 else (f1, f1c)) + (b1, True, a2, True) + \
                    ((hi, True) if hi < f2 else (f2, f2c)), full

            while True:
                L = base + d
                args, full = box(L)
                if idx.count(*args):
                    slots = idx.query(*args)
                    lens = x2s[slots] - x1s[slots]
                    mn = float(lens.min())
                    if mn > L:                         # every point of length <= mn is in the box of mn
                        slots = idx.query(*box(mn)[0])
                        lens = x2s[slots] - x1s[slots]
                        mn = float(lens.min())
                    return mn, int(slots[lens == mn].min())
                if full:
                    break
                d *= 8
        # an open end (x1 = -inf or x2 = +inf): infinitely far, visited last, by slot
        if (a1 == _NINF and a1c) or (b2 == _INF and b2c):
            slots = idx.query(a1, a1c, b1, True, a2, True, b2, b2c)
            slots = slots[~np.isfinite(x2s[slots] - x1s[slots])]
            if slots.size:
                return _INF, int(slots.min())
        return None

    def _apply(self, route: Route, key, x: float, yo, yn) -> np.ndarray:
        """Each affected subscriber's new witness, from its own state (module docstring); returns their new
        MIN-order Y."""
        slots = route.affected
        if not slots.size:
            return np.empty(0)
        wy, wx, wkey = self.wy, self.wx, self.wkey
        mine = wkey[slots] == key                     # its witness is t
        if route.increase:
            if not mine.all():
                s = int(slots[~mine][0])
                raise RuntimeError(f"CN+ subscriber at slot {s}: t={key!r} rose but its witness is {wkey[s]!r}")
            x1, x2 = self.points.x1[slots], self.points.x2[slots]
            if slots.size < _BULK_QUERIES:
                for i, s in enumerate(slots.tolist()):
                    w = range_argmin(self.diagonal, x1[i], x2[i])
                    wy[s], wx[s], wkey[s] = (_INF, np.nan, None) if w is None else w
            else:
                wy[slots], wx[slots], wkey[slots] = range_argmin_many(self.diagonal, x1, x2)
        else:
            # t becomes (or stays) the witness: it must beat the witness each one holds (or the range was empty)
            for s in slots[~mine].tolist():
                if wy[s] != _INF and not (yn, x, key) < (wy[s], wx[s], wkey[s]):
                    raise RuntimeError(f"CN+ subscriber at slot {s}: ({yn}, {x}, {key!r}) does not beat its "
                                       f"witness {(wy[s], wx[s], wkey[s])!r}")
            wy[slots], wx[slots] = yn, x
            wkey[slots] = key
        return wy[slots].copy()
