"""Range-MIN / range-MAX continuous queries: update classification, Mar, Hull, EMar and the A2B-tree.

Pure-Python core (numpy + sortedcontainers, no pyspark) of the RANGE_MIN / RANGE_MAX subscription class:
``SELECT MIN(y) FROM t WHERE x BETWEEN x1 AND x2``.

Sources
-------
* 000 = B. Chandramouli, J. Xie, J. Yang, "On the Database/Network Interface in Large-Scale Publish/Subscribe
  Systems", SIGMOD 2006 ("[CXY06]").  §2.3.1 (S-CN): Definition 1 (Mar), Theorem 1, Corollary 1 (update
  classification: ignorable / good / bad), message/subscription reformulation, Definition 2 (upper hull),
  Theorem 2 (EMar); §3: the A2B-tree and the Mar / Hull / EMar computations.
* Dissertation ch. 5 (§5.2-§5.3; same results renumbered Definition 7/8, Theorem 16/17, Corollary 6), whose
  §5.3.1 adds FINDR/SEARCHR, the exact EMar tie rules, and insertions/deletions as updates from/to infinity.
  The digest ``notes/dissertation-ch2-3-5.md`` Part C (C.5-C.8) restates them; "digest C.6 rule n" below refers
  to its "Precise, implementable hull/EMar rules".

Update processing (:class:`RangeMinCore`)
-----------------------------------------
An update is ``Δ(t: x, y_o → y_n)``; an insertion is ``Δ(t: x, ∞ → y_n)`` and a deletion
``Δ(t: x, y_o → ∞)`` (digest C.8).  Every update is classified (000 Corollary 1 = dissertation Corollary 6)
and turned into notification messages

    ⟨NEW_VALUE, INNER_L, INNER_R, OUTER_L, OUTER_R⟩          (:class:`Message`)

* ignorable: no message.
* good: one message ``⟨y_n, x, x, Mar(x, y_n)⟩`` with Mar taken w.r.t. ``P ∖ {t}``.
* bad: one message for the peak and one per LHull / RHull point, with EMar outer ends (digest C.6 rules 1-7).

An insertion is good or ignorable.  A deletion is labelled bad or ignorable (digest C.8), also in the corner
case where Corollary 6 read literally would say good (Mar(x, ∞) = Mar(x, y_o)): the single peak message
``⟨None, x, x, Mar⟩`` is the same either way.  A Y-increase can be good (Mar(x, y_n) = Mar(x, y_o)).

**Reformulated subscription predicate.**  A subscription ``[x1, x2]`` (either end may be infinite, i.e. open)
is the stateless predicate (see :func:`matches`)::

    (OUTER_L < x1 <= INNER_L) and (INNER_R <= x2 < OUTER_R)

where an infinite OUTER bound also admits the same infinite subscription end: ``x1 = -inf`` matches when
``OUTER_L = -inf`` and ``x2 = +inf`` matches when ``OUTER_R = +inf``.  On a match the subscriber sets its
value to ``NEW_VALUE`` (``None`` = the range became empty, MIN is NULL).  Exactly one message of a step matches
each subscription whose value that step changes, and none matches the others (Theorems 16/17).  An X-move is
two steps (delete, then insert); a subscriber applies matches in order.

MAX is MIN by symmetry: Y is negated on the way in and out; every value a caller sees is in its own sign.

Sentinels
---------
* :meth:`A2BTree.find_right` returns ``(+inf, -inf)`` and :meth:`A2BTree.find_left` ``(-inf, -inf)`` when there
  is no qualifying X: a virtual point at the end of the axis that is lower than everything, so it terminates
  every Mar / hull scan (digest C.6 rule 3) and its X is directly the open Mar end.
* :meth:`A2BTree.min_at` and :meth:`A2BTree.range_min` return ``+inf`` for "no tuple".
* :meth:`RangeMinCore.range_value` returns ``None`` and :meth:`RangeMinCore.range_values` NaN for an empty range.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any, Hashable, Iterable, NamedTuple

import numpy as np
from sortedcontainers import SortedList

from sparksub.errors import BadUpdate

__all__ = ["A2BTree", "RangeMinCore", "Message", "Step", "Outcome", "matches"]

_INF = math.inf
_NINF = -math.inf
_MAXF = 1.7976931348623157e308  # largest finite float: "<= +inf" over finite stored Y values
_NAN = math.nan
_nextafter = math.nextafter
_isfinite = math.isfinite
_PROBE = 4  # leaf entries probed one by one before a vectorised scan (most Mar ends are a few X away)


# --------------------------------------------------------------------------------------------------------------
# Messages and outcomes
# --------------------------------------------------------------------------------------------------------------
class Message(NamedTuple):
    """A notification ⟨NEW_VALUE, INNER_L, INNER_R, OUTER_L, OUTER_R⟩ (000 §2.3.1; dissertation §5.2).

    ``new_value`` is in the user's sign, ``None`` when the range becomes empty (peak at ∞).  Outer ends may be
    ±inf (open Mar / EMar ends)."""

    new_value: float | None
    inner_l: float
    inner_r: float
    outer_l: float
    outer_r: float


class Step(NamedTuple):
    """One Δ (an X-move is two): ``kind`` in {'ignorable', 'good', 'bad'} (Corollary 6) and its messages."""

    kind: str
    messages: tuple[Message, ...]


class Outcome(NamedTuple):
    """What one :meth:`RangeMinCore.upsert` / :meth:`RangeMinCore.delete` produced, step by step."""

    steps: tuple[Step, ...]

    @property
    def messages(self) -> tuple[Message, ...]:
        """All messages of all steps, in application order."""
        if len(self.steps) == 1:
            return self.steps[0].messages
        return tuple(m for s in self.steps for m in s.messages)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(s.kind for s in self.steps)


_IGNORABLE_STEP = Step("ignorable", ())
_IGNORABLE = Outcome((_IGNORABLE_STEP,))


def matches(message: Message, x1: float, x2: float) -> bool:
    """The reformulated (stateless) range-MIN subscription predicate (000 §2.3.1; digest C.5).

    ``(OUTER_L < x1 <= INNER_L) and (INNER_R <= x2 < OUTER_R)``; an infinite OUTER bound also admits the same
    infinite subscription end (an open subscription end is "contained" in an open Mar end).

    >>> matches(Message(4.0, 40.0, 40.0, 20.0, 100.0), 30.0, 60.0)
    True
    >>> matches(Message(4.0, 40.0, 40.0, 20.0, 100.0), 20.0, 60.0)
    False
    >>> matches(Message(4.0, 40.0, 40.0, -math.inf, math.inf), -math.inf, math.inf)
    True
    """
    _, il, ir, ol, orr = message
    if not (ol < x1 or (x1 == ol == _NINF)):
        return False
    if not (x2 < orr or (x2 == orr == _INF)):
        return False
    return x1 <= il and ir <= x2


# --------------------------------------------------------------------------------------------------------------
# A2B-tree
# --------------------------------------------------------------------------------------------------------------
class A2BTree:
    """Augmented two-tier index on X with a min-Y field per node (dissertation §5.3.1; digest C.7).

    Upper tier: "fat" leaves of sorted *distinct* X values held in numpy arrays (``xs``; ``m`` = the per-X min
    Y, i.e. the min field of each upper-tier leaf entry), padded with +inf up to ``leaf_capacity``; a leaf splits
    when full and is merged with a neighbour when nearly empty / dropped when empty.  Above the leaves sits a
    min-segment-tree (flat Python list) over the leaves' minima plus a list of leaf max-keys for ``bisect``;
    both are rebuilt only on a split/merge/drop.  FINDR/FINDL therefore visit O(log #leaves) segment-tree nodes
    plus at most two vectorised leaf scans.

    Lower tier: ``x -> (y, key)`` for a single tuple at x (the dissertation's "embed few tuples directly in the
    upper-tier leaf" optimisation), or ``x -> SortedList[(y, key)]`` once several tuples share x.  Keys are
    hashable and comparable with each other (strings or ints) - they break Y ties inside a SortedList.

    All X and Y are floats; stored X and Y must be finite.
    """

    def __init__(self, leaf_capacity: int = 256, counters: dict | None = None):
        if leaf_capacity < 4:
            raise ValueError("leaf_capacity must be >= 4")
        self._cap = int(leaf_capacity)
        self._pos: dict[Hashable, tuple[float, float]] = {}  # key -> (x, y)
        self._lower: dict[float, Any] = {}  # x -> (y, key) | SortedList[(y, key)]
        self._lxs: list[np.ndarray] = []  # per leaf: sorted distinct X, +inf padded
        self._lm: list[np.ndarray] = []  # per leaf: per-X min Y, +inf padded
        self._ln: list[int] = []  # per leaf: fill count
        self._maxk: list[float] = []  # per leaf: max X (bisect target)
        self._S = 1  # segment-tree leaf offset (power of two >= #leaves)
        self._seg: list[float] = [_INF, _INF]
        self._rmq = None  # cached (allx, sparse table) for range_min_many; None after a mutation
        # location cache: X last located (leaf index, in-leaf position); NaN = invalid.  Valid until the next
        # structural change, so the FIND calls of one update reuse the lookup done by its min-field update.
        self._loc_x = _NAN
        self._loc_li = 0
        self._loc_p = 0
        self.counters = counters if counters is not None else {}
        self.counters.setdefault("find", 0)

    # ---- basic dictionary interface ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._pos)

    def __contains__(self, key) -> bool:
        return key in self._pos

    def get(self, key) -> tuple[float, float] | None:
        return self._pos.get(key)

    def distinct_x(self) -> int:
        return len(self._lower)

    @property
    def num_leaves(self) -> int:
        return len(self._ln)

    # ---- upper-tier maintenance -------------------------------------------------------------------------------
    def _build_seg(self, mins: list[float]) -> None:
        """Rebuild the min-segment-tree over the leaves' minima (after split/merge/drop only)."""
        L = len(mins)
        S = 1
        while S < L:
            S <<= 1
        seg = [_INF] * (2 * S)
        seg[S:S + L] = mins
        for k in range(S - 1, 0, -1):
            a = seg[2 * k]
            b = seg[2 * k + 1]
            seg[k] = a if a <= b else b
        self._S = S
        self._seg = seg
        self._loc_x = _NAN

    def _leaf_mins(self) -> list[float]:
        S = self._S
        return self._seg[S:S + len(self._ln)]

    def _seg_set(self, li: int, v: float) -> None:
        """Point update of leaf li's min, bottom-up, stopping at the first unchanged entry (digest C.7)."""
        seg = self._seg
        k = self._S + li
        seg[k] = v
        k >>= 1
        while k:
            a = seg[2 * k]
            b = seg[2 * k + 1]
            nv = a if a <= b else b
            if seg[k] == nv:
                break
            seg[k] = nv
            k >>= 1

    def _new_leaf(self) -> tuple[np.ndarray, np.ndarray]:
        return np.full(self._cap, _INF), np.full(self._cap, _INF)

    def _set_m(self, x: float, v: float) -> None:
        """The per-X min at existing x changed to v: update the leaf entry and the path above it."""
        if x == self._loc_x:
            li = self._loc_li
            p = self._loc_p
        else:
            li = bisect_left(self._maxk, x)
            p = int(self._lxs[li].searchsorted(x))
            self._loc_x = x
            self._loc_li = li
            self._loc_p = p
        m = self._lm[li]
        old = m.item(p)
        m[p] = v
        k = self._S + li
        cur = self._seg[k]
        if v < cur:
            self._seg_set(li, v)
        elif old == cur and v > old:
            nv = float(m[:self._ln[li]].min())
            if nv != cur:
                self._seg_set(li, nv)
        self._rmq = None

    def _insert_x(self, x: float, y: float) -> None:
        """Insert a new distinct X with per-X min y into the upper tier (split a full leaf first)."""
        ln = self._ln
        L = len(ln)
        self._rmq = None
        if L == 0:
            xs, m = self._new_leaf()
            xs[0] = x
            m[0] = y
            self._lxs.append(xs)
            self._lm.append(m)
            ln.append(1)
            self._maxk.append(x)
            self._build_seg([y])
            return
        maxk = self._maxk
        li = bisect_left(maxk, x)
        if li == L:
            li = L - 1
        if ln[li] >= self._cap:
            self._split(li)
            li = bisect_left(maxk, x)
            if li == len(ln):
                li -= 1
        xs = self._lxs[li]
        m = self._lm[li]
        n = ln[li]
        p = int(xs.searchsorted(x))
        if p < n:
            xs[p + 1:n + 1] = xs[p:n]
            m[p + 1:n + 1] = m[p:n]
        else:
            maxk[li] = x
        xs[p] = x
        m[p] = y
        ln[li] = n + 1
        if y < self._seg[self._S + li]:
            self._seg_set(li, y)
        self._loc_x = x
        self._loc_li = li
        self._loc_p = p

    def _split(self, li: int) -> None:
        n = self._ln[li]
        h = n // 2
        xs, m = self._lxs[li], self._lm[li]
        xs2, m2 = self._new_leaf()
        xs2[:n - h] = xs[h:n]
        m2[:n - h] = m[h:n]
        xs[h:n] = _INF
        m[h:n] = _INF
        mins = self._leaf_mins()
        mins[li:li + 1] = [float(m[:h].min()), float(m2[:n - h].min())]
        self._lxs.insert(li + 1, xs2)
        self._lm.insert(li + 1, m2)
        self._ln[li:li + 1] = [h, n - h]
        self._maxk[li:li + 1] = [xs.item(h - 1), xs2.item(n - h - 1)]
        self._build_seg(mins)

    def _delete_x(self, x: float) -> None:
        """Remove distinct X from the upper tier; drop an empty leaf, merge a nearly empty one."""
        self._rmq = None
        self._loc_x = _NAN
        li = bisect_left(self._maxk, x)
        xs = self._lxs[li]
        m = self._lm[li]
        n = self._ln[li]
        p = int(xs.searchsorted(x))
        old = m.item(p)
        xs[p:n - 1] = xs[p + 1:n]
        m[p:n - 1] = m[p + 1:n]
        n -= 1
        xs[n] = _INF
        m[n] = _INF
        self._ln[li] = n
        if n == 0:
            mins = self._leaf_mins()
            del mins[li], self._lxs[li], self._lm[li], self._ln[li], self._maxk[li]
            self._build_seg(mins)
            return
        if p == n:
            self._maxk[li] = xs.item(n - 1)
        L = len(self._ln)
        if L > 1 and n <= self._cap // 4:
            j = li + 1 if li + 1 < L else li - 1
            if n + self._ln[j] <= self._cap // 2:
                self._merge(min(li, j))
                return
        cur = self._seg[self._S + li]
        if old == cur:
            nv = float(m[:n].min())
            if nv != cur:
                self._seg_set(li, nv)

    def _merge(self, a: int) -> None:
        """Merge leaf a+1 into leaf a."""
        b = a + 1
        na, nb = self._ln[a], self._ln[b]
        xs, m = self._lxs[a], self._lm[a]
        xs[na:na + nb] = self._lxs[b][:nb]
        m[na:na + nb] = self._lm[b][:nb]
        mins = self._leaf_mins()
        mins[a:b + 1] = [float(m[:na + nb].min())]
        del self._lxs[b], self._lm[b]
        self._ln[a:b + 1] = [na + nb]
        self._maxk[a:b + 1] = [xs.item(na + nb - 1)]
        self._build_seg(mins)

    # ---- mutations ----------------------------------------------------------------------------------------------
    def insert(self, key, x: float, y: float) -> None:
        """Insert tuple ``key`` at (x, y); ``KeyError`` if the key exists (digest C.7 maintenance)."""
        if key in self._pos:
            raise KeyError(f"key already present: {key!r}")
        x = float(x)
        y = float(y)
        if not (_isfinite(x) and _isfinite(y)):
            raise ValueError(f"non-finite X or Y: ({x!r}, {y!r})")
        self._pos[key] = (x, y)
        lower = self._lower
        cur = lower.get(x)
        if cur is None:
            lower[x] = (y, key)
            self._insert_x(x, y)
            return
        if type(cur) is tuple:
            sl = SortedList((cur, (y, key)))
            lower[x] = sl
            old = cur[0]
        else:
            sl = cur
            old = sl[0][0]
            sl.add((y, key))
        if y < old:
            self._set_m(x, y)

    def remove(self, key) -> tuple[float, float]:
        """Remove tuple ``key``; returns its (x, y).  ``KeyError`` if absent."""
        x, y = self._pos.pop(key)
        lower = self._lower
        cur = lower[x]
        if type(cur) is tuple:
            del lower[x]
            self._delete_x(x)
            return x, y
        item = (y, key)
        first = cur[0]
        cur.remove(item)
        if len(cur) == 1:
            lower[x] = cur[0]
        if first == item:
            nm = cur[0][0]
            if nm != y:
                self._set_m(x, nm)
        return x, y

    def update_y(self, key, y: float) -> float:
        """Change the Y of tuple ``key`` in place (X unchanged); returns the old Y.  Cheaper than remove+insert."""
        x, yo = self._pos[key]
        y = float(y)
        if not _isfinite(y):
            raise ValueError(f"non-finite Y: {y!r}")
        self._pos[key] = (x, y)
        lower = self._lower
        cur = lower[x]
        if type(cur) is tuple:
            lower[x] = (y, key)
            self._set_m(x, y)
            return yo
        old_min = cur[0][0]
        cur.remove((yo, key))
        cur.add((y, key))
        nm = cur[0][0]
        if nm != old_min:
            self._set_m(x, nm)
        return yo

    def bulk_load(self, keys: Iterable, xs, ys) -> None:
        """Load many tuples at once: numpy sort, then build leaves and the upper tier directly.

        Into an empty tree only (otherwise falls back to per-row insert).  Leaves are filled to 3/4."""
        keys = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        if not (len(keys) == len(xs) == len(ys)):
            raise ValueError("keys, xs, ys differ in length")
        if len(keys) == 0:
            return
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            raise ValueError("non-finite X or Y in bulk_load")
        if self._pos:
            for k, x, y in zip(keys, xs.tolist(), ys.tolist()):
                self.insert(k, x, y)
            return
        pos = dict(zip(keys, zip(xs.tolist(), ys.tolist())))
        if len(pos) != len(keys):
            raise KeyError("duplicate keys in bulk_load")
        order = np.lexsort((ys, xs))
        sx = xs[order]
        sy = ys[order]
        start = np.flatnonzero(np.r_[True, sx[1:] != sx[:-1]])  # first row of each distinct X
        ux = sx[start]
        um = sy[start]  # sorted by (x, y): the first row of a group holds the per-X min
        ends = np.r_[start[1:], len(sx)]
        # lower tier: (y, key) for singletons, SortedList otherwise
        lower = {}
        okeys = [keys[i] for i in order.tolist()]
        syl = sy.tolist()
        multi = np.flatnonzero(ends - start > 1)
        for x, s in zip(ux.tolist(), start.tolist()):
            lower[x] = (syl[s], okeys[s])
        for g in multi.tolist():
            s, e = int(start[g]), int(ends[g])
            lower[float(ux[g])] = SortedList(zip(syl[s:e], okeys[s:e]))
        # upper tier leaves
        fill = max(2, (self._cap * 3) // 4)
        nux = len(ux)
        self._lxs, self._lm, self._ln, self._maxk = [], [], [], []
        mins = []
        for a in range(0, nux, fill):
            b = min(a + fill, nux)
            lx, lm = self._new_leaf()
            lx[:b - a] = ux[a:b]
            lm[:b - a] = um[a:b]
            self._lxs.append(lx)
            self._lm.append(lm)
            self._ln.append(b - a)
            self._maxk.append(float(ux[b - 1]))
            mins.append(float(um[a:b].min()))
        self._build_seg(mins)
        self._pos = pos
        self._lower = lower
        self._rmq = None
        self._loc_x = _NAN

    # ---- queries --------------------------------------------------------------------------------------------
    def min_at(self, x: float, exclude=None) -> float:
        """Min Y among tuples at exactly x, ignoring tuple ``exclude``; +inf if none (the Mar/peak check)."""
        cur = self._lower.get(x)
        if cur is None:
            return _INF
        if type(cur) is tuple:
            return _INF if (exclude is not None and cur[1] == exclude) else cur[0]
        y0, k0 = cur[0]
        if exclude is not None and k0 == exclude:
            return cur[1][0]
        return y0

    def first_at(self, x: float, exclude=None) -> tuple[float, object] | None:
        """The lowest ``(y, key)`` among tuples at exactly x, ignoring tuple ``exclude``; None if none (the
        item :meth:`min_at` gives the Y of: CN+'s witness, 000 §2.2.2)."""
        cur = self._lower.get(x)
        if cur is None:
            return None
        if type(cur) is tuple:
            return None if (exclude is not None and cur[1] == exclude) else cur
        first = cur[0]
        if exclude is not None and first[1] == exclude:
            return cur[1]
        return first

    def find_right(self, x: float, y: float, strict: bool = False) -> tuple[float, float]:
        """FINDR (dissertation §5.3.1; digest C.7): the nearest distinct X' > x whose per-X min is <= y
        (< y when ``strict``), as ``(X', per-X min)``; ``(+inf, -inf)`` when there is none."""
        self.counters["find"] += 1
        if strict:
            y = _nextafter(y, _NINF)  # m < y  <=>  m <= nextdown(y) for floats
        elif y > _MAXF:
            y = _MAXF
        seg = self._seg
        S = self._S
        if x == self._loc_x:
            li = self._loc_li
            p = self._loc_p + 1  # x itself sits at _loc_p
        else:
            maxk = self._maxk
            li = bisect_right(maxk, x)
            if li >= len(maxk):
                return _INF, _NINF
            p = -1
        if seg[S + li] <= y:
            xs = self._lxs[li]
            n = self._ln[li]
            if p < 0:
                p = int(xs.searchsorted(x, "right"))
            if p < n:
                m = self._lm[li]
                # probe a few entries, then one vectorised scan for the first entry with min <= y (000 §3)
                e = p + _PROBE if p + _PROBE < n else n
                for j in range(p, e):
                    v = m.item(j)
                    if v <= y:
                        return xs.item(j), v
                if e < n:
                    tail = m[e:n]
                    j = int((tail <= y).argmax())
                    v = tail.item(j)
                    if v <= y:
                        return xs.item(e + j), v
        # SEARCHR over the upper tier: next leaf with min <= y
        k = S + li
        while k > 1:
            if not k & 1 and seg[k + 1] <= y:
                k += 1
                break
            k >>= 1
        else:
            return _INF, _NINF
        while k < S:
            k <<= 1
            if seg[k] > y:
                k += 1
        li = k - S
        m = self._lm[li]
        n = self._ln[li]
        e = _PROBE if _PROBE < n else n
        for j in range(e):
            v = m.item(j)
            if v <= y:
                return self._lxs[li].item(j), v
        j = e + int((m[e:n] <= y).argmax())
        return self._lxs[li].item(j), m.item(j)

    def find_left(self, x: float, y: float, strict: bool = False) -> tuple[float, float]:
        """FINDL, the mirror of :meth:`find_right`: nearest distinct X' < x with per-X min <= y (< y when
        ``strict``), as ``(X', per-X min)``; ``(-inf, -inf)`` when there is none."""
        self.counters["find"] += 1
        if strict:
            y = _nextafter(y, _NINF)
        elif y > _MAXF:
            y = _MAXF
        seg = self._seg
        S = self._S
        if x == self._loc_x:
            li = self._loc_li
            p = self._loc_p  # entries [0, p) are < x
        else:
            maxk = self._maxk
            L = len(maxk)
            if L == 0:
                return _NINF, _NINF
            li = bisect_left(maxk, x)
            if li >= L:
                li = L - 1
            p = -1
        if seg[S + li] <= y:
            xs = self._lxs[li]
            if p < 0:
                p = int(xs.searchsorted(x, "left"))  # entries [0, p) are < x
            if p > 0:
                m = self._lm[li]
                e = p - _PROBE if p > _PROBE else 0
                for j in range(p - 1, e - 1, -1):
                    v = m.item(j)
                    if v <= y:
                        return xs.item(j), v
                if e > 0:
                    head = m[e - 1::-1] if e > 1 else m[:1]
                    j = int((head <= y).argmax())
                    v = head.item(j)
                    if v <= y:
                        return xs.item(e - 1 - j), v
        k = S + li
        while k > 1:
            if k & 1 and seg[k - 1] <= y:
                k -= 1
                break
            k >>= 1
        else:
            return _NINF, _NINF
        while k < S:
            k = 2 * k + 1
            if seg[k] > y:
                k -= 1
        li = k - S
        m = self._lm[li]
        n = self._ln[li]
        e = n - _PROBE if n > _PROBE else 0
        for j in range(n - 1, e - 1, -1):
            v = m.item(j)
            if v <= y:
                return self._lxs[li].item(j), v
        head = m[e - 1::-1] if e > 1 else m[:1]
        j = e - 1 - int((head <= y).argmax())
        return self._lxs[li].item(j), m.item(j)

    def _seg_range_min(self, a: int, b: int) -> float:
        """Min over leaves a..b inclusive (a <= b)."""
        seg = self._seg
        S = self._S
        lo = a + S
        hi = b + S + 1
        r = _INF
        while lo < hi:
            if lo & 1:
                v = seg[lo]
                if v < r:
                    r = v
                lo += 1
            if hi & 1:
                hi -= 1
                v = seg[hi]
                if v < r:
                    r = v
            lo >>= 1
            hi >>= 1
        return r

    def range_min(self, x1: float, x2: float) -> float:
        """Min Y over tuples with x1 <= X <= x2; +inf when there is none."""
        maxk = self._maxk
        L = len(maxk)
        if L == 0 or not x1 <= x2:
            return _INF
        a = bisect_left(maxk, x1)
        if a >= L:
            return _INF
        b = bisect_left(maxk, x2)
        if b >= L:
            b = L - 1
        pa = int(self._lxs[a].searchsorted(x1, "left"))
        pb = int(self._lxs[b].searchsorted(x2, "right"))
        if a == b:
            return float(self._lm[a][pa:pb].min()) if pa < pb else _INF
        na = self._ln[a]
        r = float(self._lm[a][pa:na].min()) if pa < na else _INF
        if pb > 0:
            v = float(self._lm[b][:pb].min())
            if v < r:
                r = v
        if a + 1 <= b - 1:
            v = self._seg_range_min(a + 1, b - 1)
            if v < r:
                r = v
        return r

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted distinct X, per-X min Y) as two fresh numpy arrays."""
        if not self._ln:
            return np.empty(0), np.empty(0)
        allx = np.concatenate([xs[:n] for xs, n in zip(self._lxs, self._ln)])
        allm = np.concatenate([m[:n] for m, n in zip(self._lm, self._ln)])
        return allx, allm

    def _sparse_table(self):
        if self._rmq is None:
            allx, allm = self.arrays()
            N = len(allm)
            levels = [allm]
            k = 1
            while (1 << k) <= N:
                prev = levels[-1]
                h = 1 << (k - 1)
                nxt = np.full(N, _INF)
                nxt[:N - h] = np.minimum(prev[:N - h], prev[h:])
                levels.append(nxt)
                k += 1
            self._rmq = (allx, np.vstack(levels) if N else np.empty((1, 0)))
        return self._rmq

    def range_min_many(self, x1s, x2s) -> np.ndarray:
        """Vectorised :meth:`range_min`: a sparse table over the concatenated per-X minima, built on demand and
        cached until the next mutation.  +inf where the range holds no tuple."""
        x1s = np.asarray(x1s, dtype=np.float64)
        x2s = np.asarray(x2s, dtype=np.float64)
        allx, table = self._sparse_table()
        out = np.full(np.broadcast(x1s, x2s).shape, _INF)
        if len(allx) == 0:
            return out
        i = np.searchsorted(allx, x1s, "left")
        j = np.searchsorted(allx, x2s, "right") - 1
        i, j = np.broadcast_arrays(i, j)
        valid = (j >= i) & (x1s <= x2s)
        if not valid.any():
            return out
        iv = i[valid]
        jv = j[valid]
        k = np.frexp((jv - iv + 1).astype(np.float64))[1] - 1  # floor(log2(len)), exact for ints
        flat = table.ravel()
        row = k * table.shape[1]
        out[valid] = np.minimum(flat.take(row + iv), flat.take(row + jv - (1 << k) + 1))
        return out

    # ---- debugging ------------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Assert internal consistency (tests)."""
        prev = _NINF
        L = len(self._ln)
        assert len(self._lxs) == len(self._lm) == len(self._maxk) == L
        nx = 0
        for li in range(L):
            n = self._ln[li]
            xs, m = self._lxs[li], self._lm[li]
            assert 0 < n <= self._cap
            assert np.all(np.isinf(xs[n:])) and np.all(np.isinf(m[n:]))
            assert xs[0] > prev and np.all(np.diff(xs[:n]) > 0)
            assert self._maxk[li] == xs[n - 1]
            assert self._seg[self._S + li] == m[:n].min()
            for j in range(n):
                x = xs.item(j)
                cur = self._lower[x]
                assert (cur[0] if type(cur) is tuple else cur[0][0]) == m.item(j)
            prev = xs.item(n - 1)
            nx += n
        assert nx == len(self._lower)
        S = self._S
        for k in range(S - 1, 0, -1):
            assert self._seg[k] == min(self._seg[2 * k], self._seg[2 * k + 1])
        cnt = 0
        for x, cur in self._lower.items():
            items = [cur] if type(cur) is tuple else list(cur)
            assert items
            assert type(cur) is tuple or len(cur) > 1
            for y, k in items:
                assert self._pos[k] == (x, y)
            cnt += len(items)
        assert cnt == len(self._pos)


# --------------------------------------------------------------------------------------------------------------
# Update processing
# --------------------------------------------------------------------------------------------------------------
class RangeMinCore:
    """Server-side S-CN processing of range-MIN (or, with ``maximum=True``, range-MAX) subscriptions.

    Holds the table's (key, x, y) tuples in an :class:`A2BTree`, classifies each update (Corollary 6) and
    reformulates it into :class:`Message` s (000 §2.3.1 and §3; dissertation §5.2-5.3).  Subscriptions are
    never looked at: a subscriber for ``[x1, x2]`` evaluates :func:`matches` on each message (predicate in the
    module docstring).  Cost per update O(k log N), k = number of messages.

    Y is negated internally in MAX mode.  X and Y must be finite (:class:`BadUpdate` otherwise).

    ``counters``: ``updates`` = accepted upsert/delete calls; ``ignorable`` / ``good`` / ``bad`` = steps (an
    X-move counts two); ``messages`` = messages emitted; ``find`` = FINDL/FINDR calls on the A2B-tree.
    """

    def __init__(self, maximum: bool = False, *, leaf_capacity: int = 256):
        self.maximum = bool(maximum)
        self.counters: dict[str, int] = {
            "updates": 0, "ignorable": 0, "good": 0, "bad": 0, "messages": 0, "find": 0}
        self.tree = A2BTree(leaf_capacity, counters=self.counters)

    def __len__(self) -> int:
        return len(self.tree)

    def __contains__(self, key) -> bool:
        return key in self.tree

    def get(self, key) -> tuple[float, float] | None:
        """(x, y) of ``key`` in the user's sign, or None."""
        r = self.tree.get(key)
        if r is None or not self.maximum:
            return r
        return r[0], -r[1]

    # ---- loading and queries --------------------------------------------------------------------------------
    def load(self, keys, xs, ys) -> None:
        """Bulk-load tuples without producing messages (fast path into an empty core; else row by row)."""
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            raise BadUpdate("non-finite X or Y in load")
        self.tree.bulk_load(keys, xs, -ys if self.maximum else ys)

    def rows(self) -> tuple[list, np.ndarray, np.ndarray]:
        """Every tuple as ``(keys, xs, ys)`` in the user's sign (CN+'s diagonal copy, ``cn_plus.py``)."""
        pos = self.tree._pos
        keys = list(pos)
        xy = np.array(list(pos.values()), dtype=np.float64).reshape(-1, 2)
        return keys, xy[:, 0].copy(), -xy[:, 1] if self.maximum else xy[:, 1].copy()

    def range_value(self, x1: float, x2: float) -> float | None:
        """Current MIN (MAX) over x1 <= X <= x2, None when the range is empty."""
        v = self.tree.range_min(x1, x2)
        if v == _INF:
            return None
        return -v if self.maximum else v

    def range_values(self, x1s, x2s) -> np.ndarray:
        """Vectorised :meth:`range_value`; NaN where empty."""
        v = self.tree.range_min_many(x1s, x2s)
        v[v == _INF] = np.nan
        return -v if self.maximum else v

    # ---- updates --------------------------------------------------------------------------------------------
    def upsert(self, key, x: float, y: float) -> Outcome:
        """Insert tuple ``key`` at (x, y), or update it.  An X-move is a delete step then an insert step."""
        x = float(x)
        y = float(y)
        if not (_isfinite(x) and _isfinite(y)):
            raise BadUpdate(f"non-finite X or Y for key {key!r}: ({x!r}, {y!r})")
        c = self.counters
        c["updates"] += 1
        if self.maximum:
            y = -y
        old = self.tree._pos.get(key)
        if old is None:
            return Outcome((self._insert_step(key, x, y),))
        xo, yo = old
        if xo == x:
            if yo == y:  # changes neither X nor Y: ignored (digest C.5 implementation notes)
                c["ignorable"] += 1
                return _IGNORABLE
            return Outcome((self._y_step(key, x, yo, y),))
        # X-update = deletion of (x_o, y_o) followed by insertion of (x_n, y_n) (digest C.8)
        s1 = self._delete_step(key, xo, yo)
        return Outcome((s1, self._insert_step(key, x, y)))

    def delete(self, key) -> Outcome:
        """Delete tuple ``key`` = Δ(t: x, y_o → ∞) (digest C.8).  ``BadUpdate`` if unknown."""
        old = self.tree._pos.get(key)
        if old is None:
            raise BadUpdate(f"delete of unknown key {key!r}")
        self.counters["updates"] += 1
        return Outcome((self._delete_step(key, old[0], old[1]),))

    def _good(self, x: float, yn: float, lx: float, rx: float) -> Step:
        c = self.counters
        c["good"] += 1
        c["messages"] += 1
        return Step("good", (Message(-yn if self.maximum else yn, x, x, lx, rx),))

    def _insert_step(self, key, x: float, yn: float) -> Step:
        # insertion Δ(t: x, ∞ → y_n): good or ignorable (digest C.8)
        tree = self.tree
        mp = tree.min_at(x)
        tree.insert(key, x, yn)
        if mp <= yn:  # Mar(x, y_n) = ∅ w.r.t. P∖{t}  (Definition 7; Corollary 6 (1))
            self.counters["ignorable"] += 1
            return _IGNORABLE_STEP
        return self._good(x, yn, tree.find_left(x, yn)[0], tree.find_right(x, yn)[0])

    def _y_step(self, key, x: float, yo: float, yn: float) -> Step:
        tree = self.tree
        tree.update_y(key, yn)
        mp = tree.min_at(x, key)  # other tuples at x
        if yn < yo:
            # decreasing: Mar(x, y_o) ⊆ Mar(x, y_n) always -> ignorable or good (Corollary 6)
            if mp <= yn:
                self.counters["ignorable"] += 1
                return _IGNORABLE_STEP
            return self._good(x, yn, tree.find_left(x, yn)[0], tree.find_right(x, yn)[0])
        if mp <= yo:  # Mar(x, y_o) = Mar(x, y_n) = ∅
            self.counters["ignorable"] += 1
            return _IGNORABLE_STEP
        if mp > yn:
            # increasing: good iff Mar(x, y_n) = Mar(x, y_o), i.e. both FIND≤ hits are also <= y_o
            lx, ly = tree.find_left(x, yn)
            rx, ry = tree.find_right(x, yn)
            if ly <= yo and ry <= yo:
                return self._good(x, yn, lx, rx)
            # bad: the hull scans start with FIND< from the peak y_p = y_n; reuse hits with Y < y_n
            if ly == yn:
                lx, ly = tree.find_left(lx, yn, True)
            if ry == yn:
                rx, ry = tree.find_right(rx, yn, True)
            return self._bad(x, yn, yo, lx, ly, rx, ry)
        # y_o < mp <= y_n: another tuple at x becomes the peak; Mar(x, y_n) = ∅ ⊉ Mar(x, y_o) -> bad
        return self._bad(x, mp, yo, *tree.find_left(x, mp, True), *tree.find_right(x, mp, True))

    def _delete_step(self, key, x: float, yo: float) -> Step:
        # deletion Δ(t: x, y_o → ∞): bad or ignorable (digest C.8)
        tree = self.tree
        tree.remove(key)
        mp = tree.min_at(x)
        if mp <= yo:
            self.counters["ignorable"] += 1
            return _IGNORABLE_STEP
        return self._bad(x, mp, yo, *tree.find_left(x, mp, True), *tree.find_right(x, mp, True))

    def _bad(self, x: float, yp: float, yo: float, lx: float, ly: float, rx: float, ry: float) -> Step:
        """Hull + EMar reformulation of a bad update (000 §2.3.1 Def. 2, Theorem 2, §3; dissertation Theorem 17;
        digest C.6).

        (lx, ly) / (rx, ry) are the first points left / right of x with per-X min < y_p (or the ±inf sentinels).
        """
        tree = self.tree
        # rules 2-3: LHull / RHull = strict prefix minima from the peak, stopped by the Mar(x, y_o) ends
        Lh = []
        while ly > yo:
            Lh.append((lx, ly))
            lx, ly = tree.find_left(lx, ly, True)
        xl = lx
        Rh = []
        while ry > yo:
            Rh.append((rx, ry))
            rx, ry = tree.find_right(rx, ry, True)
        xr = rx
        neg = self.maximum
        nl = len(Lh)
        nr = len(Rh)
        # rule 1 + 4: the peak (NEW_VALUE None when y_p = ∞), EMar = (first LHull X | x_l, first RHull X | x_r)
        pv = None if yp == _INF else (-yp if neg else yp)
        msgs = [Message(pv, x, x, Lh[0][0] if nl else xl, Rh[0][0] if nr else xr)]
        # rule 5: LHull point i: (next LHull X | x_l, first RHull X with Y < y_i | x_r)
        j = 0
        for i in range(nl):
            xi, yi = Lh[i]
            while j < nr and not Rh[j][1] < yi:
                j += 1
            msgs.append(Message(-yi if neg else yi, xi, x,
                                Lh[i + 1][0] if i + 1 < nl else xl, Rh[j][0] if j < nr else xr))
        # rule 6: RHull point j: (nearest LHull X with Y <= y_j | x_l, next RHull X | x_r)
        i = 0
        for j in range(nr):
            xj, yj = Rh[j]
            while i < nl and not Lh[i][1] <= yj:
                i += 1
            msgs.append(Message(-yj if neg else yj, x, xj,
                                Lh[i][0] if i < nl else xl, Rh[j + 1][0] if j + 1 < nr else xr))
        c = self.counters
        c["bad"] += 1
        c["messages"] += len(msgs)
        return Step("bad", tuple(msgs))

    def explain(self) -> str:
        t = self.tree
        return (f"RangeMinCore({'MAX' if self.maximum else 'MIN'}): {len(t)} tuples, {t.distinct_x()} distinct X, "
                f"{t.num_leaves} leaves; counters {self.counters}")
