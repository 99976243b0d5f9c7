"""Range-COUNT / SUM / AVG continuous queries: relaxed range subscriptions with exact aggregates.

Pure-Python core (numpy + bisect, no pyspark) of the RANGE_AGG subscription class:
``SELECT COUNT(*) | SUM(y) | AVG(y) FROM t WHERE x BETWEEN x1 AND x2``.

Sources
-------
* 000 = B. Chandramouli, J. Xie, J. Yang, SIGMOD 2006 ("[CXY06]").  §4 ("Other Subscription Types"):
  "Range-count/sum/average subscriptions are easier to handle: We simply reformulate them into range
  subscriptions without aggregation; publish messages do not need to be reformulated (though obviously
  irrelevant updates can be ignored ...).  Unlike range-min/max, relaxing these range-aggregation subscriptions
  would not result in excessive traffic, because relevant updates that fall within a subscription range
  generally do affect the subscription."  §2.2 describes the relaxation (CN).
* Dissertation ch. 5 §5.4; digest ``notes/dissertation-ch2-3-5.md`` C.10.

Messages and the reformulated subscription
------------------------------------------
Every update becomes at most two messages ``⟨X, D_COUNT, D_SUM⟩`` (:class:`Message`), one per old / new X; the
subscription ``[x1, x2]`` is the stateless predicate ``x1 <= X <= x2`` (:func:`matches`) and the subscriber
adds the deltas to its own ``(count, sum)`` (:func:`apply`, :class:`AggState`).  So an update touches a
subscription iff its old or new X lies in ``[x1, x2]`` (the relaxed range subscription, 000 §4):

* insertion (x, y):             ``⟨x, +1, y⟩``
* deletion of (x, y):           ``⟨x, -1, -y⟩``
* X-move (x_o, y_o → x_n, y_n): ``⟨x_o, -1, -y_o⟩, ⟨x_n, +1, y_n⟩`` (a range holding both hears both; the net
  effect is applied, as in the relaxed range subscription of 000 §2.2)
* Y change at the same x:       ``⟨x, 0, y_n - y_o⟩`` when that float difference is exact, else the two
  messages ``⟨x, -1, -y_o⟩, ⟨x, +1, y_n⟩`` (so every D_SUM is an exact float and subscribers stay exact);
  **dropped** (no message) for COUNT, whose result a Y change cannot affect (so a COUNT subscriber's
  :class:`AggState` sum is not maintained);
* an update changing neither X nor Y: dropped (000 §4, "updates updating neither range nor aggregation
  attributes").

Exactness and SQL semantics
---------------------------
Sums are held exactly: every finite float is an integer multiple of 2**-1074, so ``y * 2**1074`` is a Python
int (:func:`exact`) and sums of those are exact; a result is the correctly rounded float of the exact real sum
(:func:`to_float`; Python's int / int true division rounds correctly).  There is no float tolerance inside this
module: SUM and AVG are the correctly rounded values of the exact sum / mean.  (Spark's SUM over DOUBLE adds in
floating point in partition order, so comparing with Spark needs a relative tolerance; the sign of a zero sum is
not kept: an exact 0 is returned as +0.0.)  A sum beyond the float range is returned as ±inf.

* COUNT of an empty range is 0 (an int);
* SUM of an empty range is None (SQL NULL); otherwise a float;
* AVG of an empty range is None (NULL); otherwise the correctly rounded exact mean.

X and Y must be finite floats (:class:`~sparksub.errors.BadUpdate` otherwise).

Server structure (:class:`RangeAggCore`)
----------------------------------------
Per distinct X the count and exact sum of its tuples (two dicts).  The distinct X values are kept in sorted
buckets of at most 2B entries (B = ``bucket_size``; a bucket is split in halves when longer, merged into a
neighbour when down to max(1, B/4) entries, dropped when empty), each with its total count and exact sum, and a
Fenwick tree over the bucket totals, rebuilt (O(D / B)) only when the buckets change.  An update costs
O(log(D / B) + B) plus, rarely, a restructure; a range query adds at most two partial buckets (O(B)) and one
Fenwick range (O(log(D / B))).  Vectorised queries (:meth:`RangeAggCore.values`) use cached prefix arrays
(int64 counts, object array of exact sums) rebuilt after a mutation.

Unicast (S-UN, :class:`AggUnicast`): the server keeps every subscription's exact state and reports only the
subscriptions whose SQL value changed, with their new values (e.g. a COUNT range holding both ends of an X-move
is reached by both messages but not reported).  As 000 §3 does for S-UN, each message is a query over a 2-d
index of the subscription points (x1, x2): an update's messages cut the points into at most three disjoint
rectangles (old X only, new X only, both), each with one net delta, and the state is laid out so that a
rectangle is a few contiguous runs of it; counts are int64 and the exact sums are kept as pairs of floats
(double-doubles, with vectorised error-free additions), with a per-subscription Python int only where a sum does
not fit a pair.  An update costs O(sqrt(M)) index work plus O(1) numpy passes per subscription whose state
changes (the relaxed deliveries; none for a rectangle whose net delta is zero).
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Hashable, Iterable
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from sparksub.errors import BadUpdate
from sparksub.operators.shared.arrays import concat_ranges

__all__ = [
    "KINDS",
    "AggState",
    "AggUnicast",
    "Message",
    "Outcome",
    "RangeAggCore",
    "apply",
    "exact",
    "matches",
    "to_float",
    "touched",
]

KINDS = ("count", "sum", "avg")

_BITS = 1074  # 2**-1074 = the smallest positive subnormal: every finite float is a multiple of it
_ONE = 1 << _BITS
_isfinite = math.isfinite


def exact(y: float) -> int:
    """``y * 2**1074`` as an exact int (every finite float is an integer multiple of ``2**-1074``).

    >>> exact(5e-324), exact(0.5) == 1 << 1073, exact(-2.0) == -(1 << 1075)
    (1, True, True)
    """
    p, q = y.as_integer_ratio()  # q is a power of two <= 2**1074
    return p * (_ONE // q)


def to_float(scaled: int, count: int = 1) -> float:
    """Correctly rounded ``scaled / (count * 2**1074)``; ±inf when it is beyond the float range.

    >>> to_float(exact(1e16) + exact(1.0) - exact(1e16))  # naive float addition gives 0.0
    1.0
    >>> to_float(exact(1.0) + exact(2.0), 2), to_float(2 * exact(1e308))
    (1.5, inf)
    """
    try:
        return scaled / (_ONE * count)
    except OverflowError:
        return math.inf if scaled > 0 else -math.inf


class Message(NamedTuple):
    """⟨X, D_COUNT, D_SUM⟩: add D_COUNT to the count and D_SUM (an exact float) to the sum of every subscription
    with ``x1 <= X <= x2`` (000 §4)."""

    x: float
    d_count: int
    d_sum: float


class Outcome(NamedTuple):
    """What one :meth:`RangeAggCore.upsert` / :meth:`RangeAggCore.delete` produced (at most two messages).

    ``kind``: 'insert', 'delete', 'x_move', 'y_update' (same X) or 'unchanged'."""

    kind: str
    messages: tuple[Message, ...]

    @property
    def dropped(self) -> bool:
        """No message: the update cannot affect any subscription of this kind."""
        return not self.messages


def matches(message: Message, x1: float, x2: float) -> bool:
    """The relaxed (stateless) subscription predicate ``x1 <= X <= x2`` (000 §4).

    >>> matches(Message(3.0, 1, 2.5), 3.0, 4.0), matches(Message(3.0, 1, 2.5), -math.inf, 2.0)
    (True, False)
    """
    return x1 <= message.x <= x2


class AggState(NamedTuple):
    """A subscriber's exact state: the count and ``exact`` sum of the tuples in its range."""

    count: int = 0
    scaled_sum: int = 0

    def value(self, kind: str):
        """The SQL result: COUNT -> int (0 when empty); SUM / AVG -> float, None (NULL) when empty.

        >>> s = AggState(2, exact(1.0) + exact(2.0))
        >>> s.value("count"), s.value("sum"), s.value("avg"), AggState().value("sum"), AggState().value("count")
        (2, 3.0, 1.5, None, 0)
        """
        if kind == "count":
            return self.count
        if self.count == 0:
            return None
        return to_float(self.scaled_sum, 1 if kind == "sum" else self.count)


def apply(messages: Iterable[Message], state: AggState, x1: float, x2: float) -> AggState:
    """Subscriber side: the new state after applying every message with ``x1 <= X <= x2``.

    >>> st = apply([Message(1.0, 1, 2.0), Message(9.0, 1, 5.0), Message(2.0, 0, 0.5)], AggState(), 0.0, 3.0)
    >>> st.value("count"), st.value("sum"), st.value("avg")
    (1, 2.5, 2.5)
    """
    c, s = state
    for m in messages:
        if x1 <= m.x <= x2:
            c += m.d_count
            s += exact(m.d_sum)
    return AggState(c, s)


def _messages(outcome) -> tuple[Message, ...]:
    return outcome.messages if isinstance(outcome, Outcome) else tuple(outcome)


def touched(subscriptions_x1, subscriptions_x2, outcome) -> np.ndarray:
    """Sorted indices of the subscriptions some message of ``outcome`` reaches (the relaxed deliveries), vectorised.

    >>> out = Outcome("x_move", (Message(1.0, -1, -2.0), Message(5.0, 1, 2.0)))
    >>> touched([0.0, 2.0, 6.0, 0.0], [1.0, 5.0, 9.0, 9.0], out).tolist()
    [0, 1, 3]
    """
    x1 = np.asarray(subscriptions_x1, dtype=np.float64)
    x2 = np.asarray(subscriptions_x2, dtype=np.float64)
    mask = np.zeros(np.broadcast(x1, x2).shape, dtype=bool)
    for m in _messages(outcome):
        mask |= (x1 <= m.x) & (m.x <= x2)
    return np.flatnonzero(mask).astype(np.int64)


_to_float_many = np.frompyfunc(to_float, 2, 1)


def _values_of(kind: str, counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """SQL values of many exact states: int64 for COUNT; float64 with NaN for NULL for SUM / AVG."""
    if kind == "count":
        return counts.astype(np.int64)
    out = np.full(len(counts), np.nan)
    nz = np.flatnonzero(counts != 0)
    if len(nz):
        den = np.ones(len(nz), dtype=np.int64) if kind == "sum" else counts[nz]
        out[nz] = _to_float_many(sums[nz], den.astype(object)).astype(np.float64)
    return out


def _check_num(key, v, what: str) -> float:
    if isinstance(v, (str, bytes)) or v is None:
        raise BadUpdate(f"{what} of key {key!r} is not a number: {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise BadUpdate(f"{what} of key {key!r} is not a number: {v!r}") from None
    if not _isfinite(f):
        raise BadUpdate(f"non-finite {what} for key {key!r}: {v!r}")
    return f


class RangeAggCore:
    """Server-side processing of range COUNT / SUM / AVG subscriptions of one ``kind`` (000 §4).

    Holds the table's (key, x, y) tuples; turns each update into at most two :class:`Message` s (module
    docstring) without looking at subscriptions; answers :meth:`value` exactly.

    ``counters``: ``updates`` = accepted upsert/delete calls; ``messages`` = messages emitted; ``dropped`` =
    updates that produced no message; ``restructures`` = bucket splits / merges / drops (each rebuilds the
    Fenwick tree over the buckets).
    """

    def __init__(self, kind: str = "count", *, bucket_size: int = 64):
        if kind not in KINDS:
            raise ValueError(f"unknown aggregate kind {kind!r}; expected one of {KINDS}")
        if bucket_size < 2:
            raise ValueError("bucket_size must be >= 2")
        self.kind = kind
        self._B = int(bucket_size)
        self._pos: dict[Hashable, tuple[float, float]] = {}
        self._cnt: dict[float, int] = {}  # distinct x -> number of tuples (only x with tuples)
        self._sum: dict[float, int] = {}  # distinct x -> exact sum of their Y
        self._bx: list[list[float]] = []  # buckets of sorted distinct X, each 1..2B long, in X order
        self._bmax: list[float] = []  # per bucket: its largest X (bisect target)
        self._bc: list[int] = []  # per bucket: total count
        self._bs: list[int] = []  # per bucket: total exact sum
        self._tc: list[int] = [0]  # Fenwick tree over the bucket totals (1-based)
        self._ts: list[int] = [0]
        self._snap = None  # cached (xs, prefix counts, prefix sums) for values(); None after a mutation
        self.counters: dict[str, int] = {"updates": 0, "messages": 0, "dropped": 0, "restructures": 0}

    def __len__(self) -> int:
        return len(self._pos)

    def __contains__(self, key) -> bool:
        return key in self._pos

    def get(self, key) -> tuple[float, float] | None:
        """(x, y) of ``key``, or None."""
        return self._pos.get(key)

    # ---- the per-X aggregate index -----------------------------------------------------------------------------
    def _fen_build(self) -> None:
        """Rebuild the Fenwick tree over the bucket totals (O(#buckets), after a split / merge / drop only)."""
        n = len(self._bc)
        tc = [0] + self._bc
        ts = [0] + self._bs
        for i in range(1, n + 1):
            j = i + (i & -i)
            if j <= n:
                tc[j] += tc[i]
                ts[j] += ts[i]
        self._tc, self._ts = tc, ts

    def _fen_add(self, b: int, dc: int, ds: int) -> None:
        tc, ts = self._tc, self._ts
        n = len(tc)
        i = b + 1
        while i < n:
            tc[i] += dc
            ts[i] += ds
            i += i & -i

    def _fen_prefix(self, k: int) -> tuple[int, int]:
        """Totals of buckets 0..k-1."""
        tc, ts = self._tc, self._ts
        c = s = 0
        while k > 0:
            c += tc[k]
            s += ts[k]
            k -= k & -k
        return c, s

    def _add(self, x: float, dc: int, ds: int) -> None:
        """Add (dc, ds) to the aggregates at x: O(log #buckets + B), plus O(#buckets) on a restructure."""
        self._snap = None
        cnt, sm, bmax = self._cnt, self._sum, self._bmax
        c0 = cnt.get(x, 0)
        c = c0 + dc
        if c0 == 0:  # a new distinct X (an insertion: dc = 1)
            cnt[x] = c
            sm[x] = ds
            if not bmax:
                self._bx.append([x])
                bmax.append(x)
                self._bc.append(c)
                self._bs.append(ds)
                self._fen_build()
                return
            b = bisect_left(bmax, x)
            if b == len(bmax):
                b -= 1
                bmax[b] = x
                self._bx[b].append(x)
            else:
                insort(self._bx[b], x)
            self._bc[b] += c
            self._bs[b] += ds
            self._fen_add(b, c, ds)
            if len(self._bx[b]) > 2 * self._B:
                self._split(b)
            return
        b = bisect_left(bmax, x)
        self._bc[b] += dc
        self._bs[b] += ds
        self._fen_add(b, dc, ds)
        if c:
            cnt[x] = c
            sm[x] += ds
            return
        del cnt[x], sm[x]  # the last tuple at x left; its exact sum is back to 0
        lst = self._bx[b]
        del lst[bisect_left(lst, x)]
        if not lst:
            del self._bx[b], bmax[b], self._bc[b], self._bs[b]
            self._restructured()
            return
        bmax[b] = lst[-1]
        nb = len(bmax)
        if len(lst) <= max(1, self._B // 4) and nb > 1:
            j = b + 1 if b + 1 < nb else b - 1
            if len(lst) + len(self._bx[j]) <= 2 * self._B:
                self._merge(min(b, j))

    def _split(self, b: int) -> None:
        lst = self._bx[b]
        h = len(lst) // 2
        right = lst[h:]
        del lst[h:]
        cnt, sm = self._cnt, self._sum
        rc = sum(cnt[x] for x in right)
        rs = sum(sm[x] for x in right)
        self._bx.insert(b + 1, right)
        self._bmax[b:b + 1] = [lst[-1], right[-1]]
        self._bc[b:b + 1] = [self._bc[b] - rc, rc]
        self._bs[b:b + 1] = [self._bs[b] - rs, rs]
        self._restructured()

    def _merge(self, a: int) -> None:
        """Merge bucket a+1 into bucket a."""
        self._bx[a].extend(self._bx[a + 1])
        self._bmax[a:a + 2] = [self._bmax[a + 1]]
        self._bc[a:a + 2] = [self._bc[a] + self._bc[a + 1]]
        self._bs[a:a + 2] = [self._bs[a] + self._bs[a + 1]]
        del self._bx[a + 1]
        self._restructured()

    def _restructured(self) -> None:
        self._fen_build()
        self.counters["restructures"] += 1

    def _part(self, b: int, i: int, j: int) -> tuple[int, int]:
        """Totals of bucket b's X positions i..j-1 (the shorter of the slice and its complement is summed)."""
        lst = self._bx[b]
        n = len(lst)
        if j <= i:
            return 0, 0
        cnt, sm = self._cnt, self._sum
        if 2 * (j - i) <= n:
            return sum(cnt[x] for x in lst[i:j]), sum(sm[x] for x in lst[i:j])
        rest = lst[:i] + lst[j:]
        return self._bc[b] - sum(cnt[x] for x in rest), self._bs[b] - sum(sm[x] for x in rest)

    # ---- loading and queries ----------------------------------------------------------------------------------
    def load(self, keys, xs, ys) -> None:
        """Bulk-load tuples without producing messages or counting updates.

        ``BadUpdate`` (with the row number) for a non-finite X or Y, or a key repeated in the batch or already
        present."""
        keys = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
        xs = xs.tolist() if isinstance(xs, np.ndarray) else list(xs)
        ys = ys.tolist() if isinstance(ys, np.ndarray) else list(ys)
        if not (len(keys) == len(xs) == len(ys)):
            raise ValueError("keys, xs, ys differ in length")
        rows = []
        seen = set()
        for i, (k, x, y) in enumerate(zip(keys, xs, ys)):
            try:
                x = _check_num(k, x, "X")
                y = _check_num(k, y, "Y")
            except BadUpdate as e:
                raise BadUpdate(str(e), row=i) from None
            if k in seen or k in self._pos:
                raise BadUpdate(f"duplicate key {k!r} in load", row=i)
            seen.add(k)
            rows.append((k, x, y))
        if self._pos:
            for k, x, y in rows:
                self._pos[k] = (x, y)
                self._add(x, 1, exact(y))
            return
        # into an empty core: per-X totals, then buckets filled to B, then one Fenwick build
        cnt, sm = self._cnt, self._sum
        for k, x, y in rows:
            self._pos[k] = (x, y)
            cnt[x] = cnt.get(x, 0) + 1
            sm[x] = sm.get(x, 0) + exact(y)
        allx = sorted(cnt)
        B = self._B
        self._bx = [allx[i:i + B] for i in range(0, len(allx), B)]
        self._bmax = [lst[-1] for lst in self._bx]
        self._bc = [sum(cnt[x] for x in lst) for lst in self._bx]
        self._bs = [sum(sm[x] for x in lst) for lst in self._bx]
        self._fen_build()
        self._snap = None

    def state(self, x1: float, x2: float) -> AggState:
        """Exact (count, sum) over ``x1 <= X <= x2`` (empty when ``x1 > x2`` or a bound is NaN).

        Two partial buckets (O(B) each) plus a Fenwick range over the buckets between (O(log #buckets))."""
        if not x1 <= x2:
            return AggState()
        bmax, bx = self._bmax, self._bx
        nb = len(bmax)
        a = bisect_left(bmax, x1)
        if a == nb:
            return AggState()
        b = bisect_left(bmax, x2)
        if b == nb:
            b -= 1
            j = len(bx[b])
        else:
            j = bisect_right(bx[b], x2)
        i = bisect_left(bx[a], x1)
        if a == b:
            return AggState(*self._part(a, i, j))
        ca, sa = self._part(a, i, len(bx[a]))
        cb, sb = self._part(b, 0, j)
        c1, s1 = self._fen_prefix(b)
        c0, s0 = self._fen_prefix(a + 1)
        return AggState(ca + cb + c1 - c0, sa + sb + s1 - s0)

    def value(self, x1: float, x2: float):
        """The current COUNT (int) / SUM / AVG (float, None when the range is empty) over ``[x1, x2]``."""
        return self.state(x1, x2).value(self.kind)

    def _snapshot(self):
        if self._snap is None:
            xs = [x for lst in self._bx for x in lst]
            pc = np.zeros(len(xs) + 1, dtype=np.int64)
            ps = np.empty(len(xs) + 1, dtype=object)
            if xs:
                pc[1:] = np.cumsum([self._cnt[x] for x in xs])
            ps[:] = list(accumulate((self._sum[x] for x in xs), initial=0))
            self._snap = (np.asarray(xs, dtype=np.float64), pc, ps)
        return self._snap

    def states(self, x1s, x2s) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`state`: (int64 counts, object array of exact sums)."""
        x1 = np.atleast_1d(np.asarray(x1s, dtype=np.float64))
        x2 = np.atleast_1d(np.asarray(x2s, dtype=np.float64))
        x1, x2 = np.broadcast_arrays(x1, x2)
        xs, pc, ps = self._snapshot()
        lo = np.searchsorted(xs, x1, "left")
        hi = np.searchsorted(xs, x2, "right")
        hi = np.where(x1 <= x2, np.maximum(hi, lo), lo)  # empty (or NaN-bounded) ranges hold nothing
        return pc[hi] - pc[lo], ps[hi] - ps[lo]

    def values(self, x1s, x2s) -> np.ndarray:
        """Vectorised :meth:`value`: int64 for COUNT; float64 for SUM / AVG with NaN for NULL (empty range)."""
        counts, sums = self.states(x1s, x2s)
        return _values_of(self.kind, counts, sums)

    # ---- updates ----------------------------------------------------------------------------------------------
    def upsert(self, key, x, y) -> Outcome:
        """Insert tuple ``key`` at (x, y) or update it; returns its (at most two) messages."""
        x = _check_num(key, x, "X")
        y = _check_num(key, y, "Y")
        old = self._pos.get(key)
        self._pos[key] = (x, y)
        if old is None:
            self._add(x, 1, exact(y))
            out = Outcome("insert", (Message(x, 1, y),))
        else:
            xo, yo = old
            if xo == x and yo == y:  # neither attribute changes: dropped (000 §4)
                out = Outcome("unchanged", ())
            elif xo == x:
                ey, eyo = exact(y), exact(yo)
                self._add(x, 0, ey - eyo)
                if self.kind == "count":  # a Y change cannot affect a COUNT (000 §4: irrelevant update)
                    out = Outcome("y_update", ())
                else:
                    d = y - yo
                    if _isfinite(d) and exact(d) == ey - eyo:  # one exact delta message
                        out = Outcome("y_update", (Message(x, 0, d),))
                    else:
                        out = Outcome("y_update", (Message(x, -1, -yo), Message(x, 1, y)))
            else:
                self._add(xo, -1, -exact(yo))
                self._add(x, 1, exact(y))
                out = Outcome("x_move", (Message(xo, -1, -yo), Message(x, 1, y)))
        return self._count(out)

    def delete(self, key) -> Outcome:
        """Delete tuple ``key``: one message ``⟨x, -1, -y⟩``.  ``BadUpdate`` if unknown."""
        old = self._pos.pop(key, None)
        if old is None:
            raise BadUpdate(f"delete of unknown key {key!r}")
        xo, yo = old
        self._add(xo, -1, -exact(yo))
        return self._count(Outcome("delete", (Message(xo, -1, -yo),)))

    def _count(self, out: Outcome) -> Outcome:
        c = self.counters
        c["updates"] += 1
        c["messages"] += len(out.messages)
        if not out.messages:
            c["dropped"] += 1
        return out

    # ---- introspection ----------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Assert internal consistency (tests)."""
        cnt: dict = {}
        sm: dict = {}
        for x, y in self._pos.values():
            cnt[x] = cnt.get(x, 0) + 1
            sm[x] = sm.get(x, 0) + exact(y)
        assert cnt == self._cnt and sm == self._sum
        nb = len(self._bx)
        assert len(self._bmax) == len(self._bc) == len(self._bs) == nb and len(self._tc) == nb + 1
        allx = [x for lst in self._bx for x in lst]
        assert allx == sorted(cnt)
        for b, lst in enumerate(self._bx):
            assert 1 <= len(lst) <= 2 * self._B and self._bmax[b] == lst[-1]
            assert self._bc[b] == sum(cnt[x] for x in lst) and self._bs[b] == sum(sm[x] for x in lst)
            assert self._fen_prefix(b + 1) == (sum(self._bc[:b + 1]), sum(self._bs[:b + 1]))

    def explain(self) -> str:
        return (f"RangeAggCore({self.kind.upper()}): {len(self)} tuples, {len(self._cnt)} distinct X in "
                f"{len(self._bx)} buckets; counters {self.counters}")


# ---- the unicast's exact per-subscription sums: normalised double-doubles --------------------------------------
# A subscription's exact sum V is kept as two float64 (h, l) with h + l == V exactly and h == fl(V) (a normalised
# double-double), so SUM is h itself and one vectorised error-free addition (_dd_add) adds a message's exact
# D_SUM to every subscription it reaches.  Two floats hold V whenever V - fl(V) is itself a float (e.g. whenever V
# has at most 106 significant bits: sums of ordinary data do); where they do not, or beyond the float range, the
# subscription falls back to the module's exact Python int (h = NaN marks it) and returns to the pair when its
# sum fits again.  Every result stays the correctly rounded exact value, as the module docstring requires (000
# §4 relaxes the subscription; it says nothing about rounding).
_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a float into 26-bit halves
_C_MAX = 1 << 26  # a count below this has <= 26 bits, so half_of_q * count is an exact product
_AVG_HI = 2.0 ** 990  # |sum| from here: the split could overflow -> exact fallback
_AVG_LO = 2.0 ** -960  # |mean| below this: near the subnormals -> exact fallback
_EMPTY_I = np.empty(0, dtype=np.int64)


def _dd_of(v: int):
    """``(h, l)`` with ``h + l == v * 2**-1074`` exactly and ``h`` the correctly rounded value, or None when no such
    pair of floats exists (``v - fl(v)`` is not a float, or ``v`` is beyond the float range).

    >>> _dd_of(exact(1e16) + exact(1.0)), _dd_of(exact(1e300) + exact(1e-300))
    ((1e+16, 1.0), (1e+300, 1e-300))
    >>> _dd_of(exact(1.0) + exact(2.0 ** -60) + exact(2.0 ** -120)), _dd_of(2 * exact(1e308))
    (None, None)
    """
    try:
        h = v / _ONE  # correctly rounded (int / int true division)
    except OverflowError:
        return None
    r = v - exact(h)
    lo = r / _ONE
    return (h, lo) if exact(lo) == r else None


_NO_QUANTUM = 1 << 20  # "no constraint yet" for AggUnicast._q


def _lowbit(x: float) -> int:
    """Exponent of the lowest set bit of a nonzero finite float (``x`` is a multiple of ``2**_lowbit(x)``).

    >>> _lowbit(1.0), _lowbit(0.75), _lowbit(12.0), _lowbit(5e-324)
    (0, -2, 2, -1074)
    """
    p, q = x.as_integer_ratio()
    return 1 - q.bit_length() if q > 1 else (p & -p).bit_length() - 1


def _lowbit_min(a: np.ndarray) -> int:
    """min :func:`_lowbit` over the nonzero finite entries of ``a`` (vectorised; a large number if none)."""
    x = np.abs(a[np.isfinite(a) & (a != 0)])
    if not x.size:
        return _NO_QUANTUM
    m, e = np.frexp(x)
    mant = (m * 2.0 ** 53).astype(np.int64)
    tz = np.frexp((mant & -mant).astype(np.float64))[1] - 1
    return int((e - 53 + tz).min())



def _dd_add(h: np.ndarray, l: np.ndarray, d, check_inf: bool = True, ws=None, exact_tail: bool = False):
    """Exact ``(h, l) + d`` for normalised pairs (``d`` a float or an array): ``(h1, l1, bad)``, ``bad`` = the
    indices where a pair cannot hold the exact sum (a third float would be needed, it overflowed, or ``h`` was
    the NaN of an exact-int fallback); ``check_inf=False`` when the caller knows no sum can overflow.  ``ws``:
    five arrays like ``h`` to work in (``h1`` is the third, ``l1`` the fifth): fresh temporaries this large
    cost page faults that exceed the arithmetic.

    Three error-free transformations: (s, e) = h + d, (t, f) = l + e, (h1, l1) = s + t; 7 to 17 vectorised
    passes.  The first is Dekker's FastTwoSum (3 passes) when a scalar ``d`` is no larger than every ``|h|``
    (one min / max pass tells), else Knuth's TwoSum (6).  The second is exact iff f == 0, which costs 6 passes
    to check unless ``exact_tail`` says the caller knows it is (:meth:`AggUnicast._tail_exact`; ``bad`` is then
    empty).  The last is FastTwoSum, exact when ``|t| <= |s|`` or ``s == 0``, which holds wherever the second
    was exact: if ``h + d`` rounded, ``s`` is within a factor 2 of ``h`` (a cancellation beyond that is exact,
    Sterbenz) so both ``|l| <= ulp(h) / 2`` and ``|e| <= ulp(s) / 2`` are far below ``|s|``; if it did not, ``s``
    is a nonzero multiple of ``min(ulp(h), ulp(d))`` that is >= ``|l|`` (``|d| >= |h| / 2``), or ``|s| >= |h| /
    2``.
    """
    if ws is None:
        ws = [np.empty(h.shape) for _ in range(5)]
    if exact_tail:  # (no NaN, no overflow possible: no errstate either)
        return _dd_add_passes(h, l, d, ws, True)
    with np.errstate(all="ignore"):  # overflow and NaN inputs are what ``bad`` reports
        return _dd_add_passes(h, l, d, ws, False, check_inf)


def _dd_add_passes(h, l, d, ws, exact_tail: bool, check_inf: bool = False):
    """:func:`_dd_add`'s passes."""
    s, z, e, f, t = ws
    np.add(h, d, out=s)
    np.subtract(s, h, out=z)
    ad = abs(d) if np.ndim(d) == 0 and h.size >= 4096 else None  # (small: the min / max calls cost more)
    if ad is not None and (h.min() >= ad or h.max() <= -ad):  # FastTwoSum(h, d); a NaN h -> TwoSum
        np.subtract(d, z, out=e)
    else:  # TwoSum(h, d): s + e == h + d
        np.subtract(s, z, out=e)
        np.subtract(h, e, out=e)
        np.subtract(d, z, out=z)
        e += z
    np.add(l, e, out=t)  # TwoSum(l, e): t + f == l + e; the pair holds the sum iff f == 0
    if not exact_tail:
        np.subtract(t, l, out=z)
        np.subtract(t, z, out=f)
        np.subtract(l, f, out=f)
        np.subtract(e, z, out=z)
        f += z
    np.add(s, t, out=e)  # FastTwoSum(s, t): h1 = e, l1 = t
    np.subtract(e, s, out=z)
    t -= z
    if exact_tail:
        return e, t, _EMPTY_I
    if check_inf:  # h1 = ±inf leaves l1 = ∓inf: inf - inf is NaN
        np.subtract(t, t, out=z)
        f += z
    return e, t, np.flatnonzero(f) if f.any() else _EMPTY_I  # NaN counts as nonzero


def _avg_of(h: np.ndarray, l: np.ndarray, c: np.ndarray, ws=None) -> tuple[np.ndarray, np.ndarray]:
    """Correctly rounded ``(h + l) / c`` (c >= 1) where certain: ``(values, ok)``; ``ok`` False -> compute exactly.
    ``ws``: seven arrays like ``h`` to work in (the values are a fresh array).

    q = fl(h / c); the remainder h - q c is a float (computed exactly with a Veltkamp split of q, c having <= 26
    bits), so the exact mean is q + (r0 + l) / c; that correction is known to 2**-51 relative, and the rounding of
    q + correction is certain unless it lies within that error of a midpoint between two floats."""
    if ws is None:
        ws = [np.empty(h.shape) for _ in range(7)]
    cf, q, qh, d, r0, t, u = ws
    r = np.empty(h.shape)
    with np.errstate(all="ignore"):
        np.copyto(cf, c, casting="unsafe")
        np.divide(h, cf, out=q)
        np.multiply(q, _SPLIT, out=u)
        np.subtract(u, q, out=d)
        np.subtract(u, d, out=qh)  # q's high 26 bits
        np.subtract(q, qh, out=d)  # q's low bits
        np.multiply(qh, cf, out=r0)
        np.subtract(h, r0, out=r0)  # exact (Sterbenz: qh * c is within 2**-26 of h)
        d *= cf
        r0 -= d  # exact: h - q c is a float
        r0 += l
        r0 /= cf  # q2: the exact mean minus q, to 2**-51 relative
        np.add(q, r0, out=r)
        np.subtract(r, q, out=d)
        np.subtract(r, d, out=t)
        np.subtract(q, t, out=t)
        np.subtract(r0, d, out=d)
        t += d  # q + q2 - r exactly
        # certain iff |t| + err < half the gap on t's side of r: the gap above |r| is its ulp, the one below
        # too unless |r| is a power of two (then half); np.spacing / nextafter / where are ~10x slower
        np.abs(r0, out=r0)
        r0 *= 2.0 ** -48
        r0 += 2.0 ** -1070  # err
        a = np.abs(r, out=d)
        bits = a.view(np.int64)
        np.add(bits, 1, out=u.view(np.int64))
        u -= a  # ulp(|r|) (|r| >= _AVG_LO > 0 wherever it matters)
        u *= 0.5
        pow2 = (bits & ((1 << 52) - 1)) == 0
        if pow2.any():  # below a power of two the gap halves: where t points towards zero
            pow2 &= (t < 0) != (r < 0)
            u[pow2] *= 0.5
        np.abs(t, out=t)
        t += r0
        ok = t < u
        ok &= a >= _AVG_LO
        np.abs(h, out=q)
        ok &= q < _AVG_HI
        ok &= c < _C_MAX
        zero = h == 0  # normalised: h == 0 -> the exact sum is 0
        r[zero] = 0.0
        ok |= zero
    return r, ok


def _avg_exact(h: np.ndarray, l: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_avg_of` for the cases its error bound leaves open (mostly exact ties: a mean of floats of coarse
    granularity is often exactly halfway between two floats): ``(values, ok)`` from the exact residual.

    With a candidate r, rho = h + l - r c exactly (r c split into two exact products; a failed exactness check
    leaves ``ok`` False); the mean rounds to r iff rho lies strictly within c times half the gaps around r,
    and on a bound it is a tie, rounded to the even neighbour."""
    with np.errstate(all="ignore"):
        cf = c.astype(np.float64)
        q = h / cf
        r = q + (((h - (q * _SPLIT - (q * _SPLIT - q)) * cf) - (q - (q * _SPLIT - (q * _SPLIT - q))) * cf) + l) / cf
        t = r * _SPLIT
        rh = t - (t - r)
        a = h - rh * cf  # exact (Sterbenz)
        b = (r - rh) * cf  # exact: 27 + 26 bits
        s1 = a - b  # TwoSum(a, -b)
        z = s1 - a
        e1 = (a - (s1 - z)) + (-b - z)
        s = s1 + l  # TwoSum(s1, l): rho = s + e when e1 == 0
        z = s - s1
        e = (s1 - (s - z)) + (l - z)
        up = np.nextafter(r, np.inf)
        dn = np.nextafter(r, -np.inf)
        k_hi = (up - r) * 0.5 * cf  # exact: a power of two times c
        k_lo = (dn - r) * 0.5 * cf
        inside = ((s < k_hi) | ((s == k_hi) & (e < 0))) & ((s > k_lo) | ((s == k_lo) & (e > 0)))
        even = (r.view(np.int64) & 1) == 0
        tie_hi = (s == k_hi) & (e == 0)
        tie_lo = (s == k_lo) & (e == 0)
        v = np.where(tie_hi & ~even, up, np.where(tie_lo & ~even, dn, r))
        ok = (inside | tie_hi | tie_lo) & (e1 == 0) & (np.abs(r) >= _AVG_LO) & (np.abs(h) < _AVG_HI) & (c < _C_MAX)
    return v, ok


class _Sel:
    """One rectangle's layout positions, ascending: whole runs as slices (copied with memcpy, not gathered) and
    index arrays, or (many short runs) one index array."""

    __slots__ = ("pieces", "lens", "n", "_pos")

    def __init__(self, pieces: list | None = None, pos: np.ndarray | None = None):
        if pos is not None:
            self.pieces, self.lens, self.n, self._pos = None, None, int(pos.size), pos
        else:
            self.pieces = pieces
            self.lens = [p.stop - p.start if isinstance(p, slice) else int(p.size) for p in pieces]
            self.n, self._pos = sum(self.lens), None

    def take(self, a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if self.pieces is None:  # ('wrap': the positions are valid, and take's default mode buffers an out)
            return a.take(self._pos) if out is None else a.take(self._pos, out=out, mode="wrap")
        if len(self.pieces) == 1:
            v = a[self.pieces[0]]
            if out is None:
                return v.copy()
            np.copyto(out, v)
            return out
        return np.concatenate([a[p] for p in self.pieces], out=out)

    def put(self, a: np.ndarray, v: np.ndarray) -> None:
        if self.pieces is None:
            a[self._pos] = v
            return
        o = 0
        for p, n in zip(self.pieces, self.lens):
            a[p] = v[o:o + n]
            o += n

    def positions(self) -> np.ndarray:
        if self._pos is None:
            self._pos = np.concatenate([np.arange(p.start, p.stop, dtype=np.int64) if isinstance(p, slice) else p
                                        for p in self.pieces])
        return self._pos


_BUCKET_FACTOR = 32  # layout bucket = 32 sqrt(M) points: ~sqrt(M) / 32 runs per query, each long enough to copy
_SHORT_RUN = 256  # runs shorter than this on average are gathered by one index array instead


class _StabLayout:
    """The subscriptions as points (x1, x2), laid out for the unicast's rectangle queries (000 §3: a message is a
    query identifying the affected subscriptions over a 2-d index of subscription points).

    Static (AggUnicast's subscriptions are fixed; range_groups rebuilds it on resync), so unlike
    :class:`~sparksub.operators.shared.point_index.PointIndex2D` / ``delivery.SubscriptionPoints`` it answers with
    *layout positions*: the unicast keeps its per-subscription state in this order, so a large answer is one
    contiguous run of that state per bucket (copied, not gathered).  Points sorted by x1 are cut into buckets of
    ``B`` (inside a bucket: by x2); ``key = bucket * (M + 1) + rank(x2)`` is sorted, so one ``searchsorted``
    finds the x2 run of every bucket; only the (at most two) buckets partly inside the x1 interval are masked.
    A rectangle narrow in x1 or in x2 (the slivers an X-move adds) is instead read off the x1- or x2-sorted
    order: O(points in that slice).  Ranges with a NaN bound or ``x1 > x2`` are left out: no message reaches
    them.
    """

    def __init__(self, x1: np.ndarray, x2: np.ndarray, bucket_size: int | None = None):
        live = np.flatnonzero(x1 <= x2)
        a, b = x1[live], x2[live]
        M = int(live.size)
        B = int(bucket_size or max(1024, _BUCKET_FACTOR * math.isqrt(M)))
        o1 = np.argsort(a, kind="stable")
        bucket = np.empty(M, dtype=np.int64)
        bucket[o1] = np.arange(M, dtype=np.int64) // B
        o2 = np.argsort(b, kind="stable")
        lay = o2[np.argsort(bucket[o2], kind="stable")]
        rank = np.empty(M, dtype=np.int64)
        rank[o2] = np.arange(M, dtype=np.int64)
        pos_of = np.empty(M, dtype=np.int64)
        pos_of[lay] = np.arange(M, dtype=np.int64)
        self.M, self.B, self.K = M, B, M + 1
        self.x1_sorted, self.x2_sorted = a[o1], b[o2]
        self.o1_pos, self.o1_x2 = pos_of[o1], b[o1]  # the x1 order: layout positions, x2
        self.o2_pos, self.o2_x1 = pos_of[o2], a[o2]  # the x2 order: layout positions, x1
        self.key = bucket[lay] * self.K + rank[lay]
        self.x1, self.x2 = a[lay], b[lay]
        self.slot = live[lay]  # layout position -> subscription slot

    def _bounds(self, a1, b1, a2, b2) -> tuple[int, int, int, int]:
        """Slices ``[p_lo, p_hi)`` of the x1 order with ``a1 < x1 <= b1`` and ``[r_lo, r_hi)`` of the x2 order
        with ``a2 <= x2 < b2`` (None: unbounded on that side)."""
        xs, ys = self.x1_sorted, self.x2_sorted
        if a1 is None:
            p_lo, p_hi = 0, int(xs.searchsorted(b1, "right"))
        else:
            p_lo, p_hi = xs.searchsorted((a1, b1), "right").tolist()
        if b2 is None:
            r_lo, r_hi = int(ys.searchsorted(a2, "left")), self.M
        else:
            r_lo, r_hi = ys.searchsorted((a2, b2), "left").tolist()
        return p_lo, p_hi, r_lo, r_hi

    def _runs(self, p_lo, p_hi, r_lo, r_hi):
        """The x2 run of every bucket the x1 slice meets: ``(starts, lengths, first_partial, last_partial)``; a
        partial bucket's run must still be filtered by x1."""
        B, K = self.B, self.K
        ba, bb = p_lo // B, (p_hi - 1) // B
        base = np.arange(ba, bb + 1, dtype=np.int64) * K
        starts = self.key.searchsorted(base + r_lo, "left")
        lengths = self.key.searchsorted(base + r_hi, "left") - starts
        return starts, lengths, p_lo > ba * B, p_hi < min((bb + 1) * B, self.M)

    def _keep(self, pos, a1, b1) -> np.ndarray:
        v = self.x1[pos]
        keep = v <= b1
        if a1 is not None:
            keep &= v > a1
        return keep

    def _scan(self, a1, b1, a2, b2, p_lo, p_hi, r_lo, r_hi) -> np.ndarray:
        """The rectangle's positions read off the shorter of its x1 and x2 slices (a boolean mask of it)."""
        if p_hi - p_lo <= r_hi - r_lo:
            v = self.o1_x2[p_lo:p_hi]
            keep = v >= a2
            if b2 is not None:
                keep &= v < b2
            return self.o1_pos[p_lo:p_hi], keep
        v = self.o2_x1[r_lo:r_hi]
        keep = v <= b1
        if a1 is not None:
            keep &= v > a1
        return self.o2_pos[r_lo:r_hi], keep

    def select(self, a1, b1, a2, b2) -> _Sel | None:
        """The positions of the rectangle ``a1 < x1 <= b1``, ``a2 <= x2 < b2`` (None: unbounded), or None when
        it is empty."""
        p_lo, p_hi, r_lo, r_hi = self._bounds(a1, b1, a2, b2)
        if p_lo >= p_hi or r_lo >= r_hi:
            return None
        if p_hi - p_lo <= self.B // 2:  # narrow in x1 (within a bucket or two): read off the x1 order
            pos, keep = self._scan(a1, b1, a2, b2, p_lo, p_hi, r_lo, r_hi)
            pos = np.sort(pos[keep])  # ascending: the state is then read nearly in order
            return _Sel(pos=pos) if pos.size else None
        starts, lengths, first, last = self._runs(p_lo, p_hi, r_lo, r_hi)
        nr = len(lengths)
        total = int(lengths.sum())
        if not total:
            return None
        partial = ({0} if first else set()) | ({nr - 1} if last else set())
        if total < _SHORT_RUN * nr:  # short runs (narrow in x2): one index array beats a slice copy per run
            pos = concat_ranges(starts, lengths)
            if partial:
                keep = np.ones(total, dtype=bool)
                offs = np.cumsum(lengths) - lengths
                for j in partial:
                    o, n = int(offs[j]), int(lengths[j])
                    keep[o:o + n] = self._keep(pos[o:o + n], a1, b1)
                pos = pos[keep]
            return _Sel(pos=pos) if pos.size else None
        pieces: list = []
        for j, (st, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
            if not n:
                continue
            if j in partial:
                keep = self._keep(slice(st, st + n), a1, b1)
                if not keep.all():
                    p = np.flatnonzero(keep)
                    if p.size:
                        pieces.append(p + st)
                    continue
            pieces.append(slice(st, st + n))
        return _Sel(pieces) if pieces else None

    def count(self, a1, b1, a2, b2) -> int:
        """Number of positions :meth:`select` returns, without materialising them."""
        p_lo, p_hi, r_lo, r_hi = self._bounds(a1, b1, a2, b2)
        if p_lo >= p_hi or r_lo >= r_hi:
            return 0
        if a1 is None and b2 is None and b1 <= a2:
            # x1 <= b1 and x2 >= a2 (the ranges holding both ends of an X-move): as every x1 <= x2,
            # #(x1 <= b1, x2 < a2) = #(x2 < a2) - #(b1 < x1 <= x2 < a2), the last within a short x1 slice
            q = int(self.x1_sorted.searchsorted(a2, "left"))
            inside = int(np.count_nonzero(self.o1_x2[p_hi:q] < a2)) if q > p_hi else 0
            return p_hi - (r_lo - inside)
        if min(p_hi - p_lo, r_hi - r_lo) <= self.B // 2:
            return int(np.count_nonzero(self._scan(a1, b1, a2, b2, p_lo, p_hi, r_lo, r_hi)[1]))
        starts, lengths, first, last = self._runs(p_lo, p_hi, r_lo, r_hi)
        n = int(lengths.sum())
        nr = len(lengths)
        for j in ({0} if first else set()) | ({nr - 1} if last else set()):
            st, ln = int(starts[j]), int(lengths[j])
            n -= ln - int(np.count_nonzero(self._keep(slice(st, st + ln), a1, b1)))
        return n


def _rectangles(msgs) -> list:
    """An update's messages as disjoint rectangles of subscription points, each with its net delta.

    With the distinct message X sorted, X_1 < .. < X_k, a range [x1, x2] is reached by exactly the messages
    i..j with X_{i-1} < x1 <= X_i and X_j <= x2 < X_{j+1}: for an X-move ``i = j = 1`` (old X only), ``i = j =
    2`` (new X only) and ``i = 1, j = 2`` (both: the net effect, 000 §2.2 / §4).  Items: ``((a1, b1, a2, b2),
    d_count, exact d_sum, d_sum floats)``."""
    byx: dict = {}
    for m in msgs:
        x = float(m.x)
        if x != x:  # a NaN X matches no range
            continue
        c, s, ds = byx.get(x, (0, 0, ()))
        d = float(m.d_sum)
        byx[x] = (c + int(m.d_count), s + exact(d), ds + (d,) if d else ds)
    xs = sorted(byx)
    k = len(xs)
    out = []
    for i in range(k):
        dc = total = 0
        ds: tuple = ()
        for j in range(i, k):
            c, s, d = byx[xs[j]]
            dc, total, ds = dc + c, total + s, ds + d
            rect = (None if i == 0 else xs[i - 1], xs[i], xs[j], None if j == k - 1 else xs[j + 1])
            out.append((rect, dc, total, ds))
    return out


def _terms(total: int, ds: tuple) -> tuple:
    """Fewest floats whose exact sum is ``total``: one, a double-double pair, else the messages' own D_SUMs."""
    if total == 0:
        return ()
    dd = _dd_of(total)
    if dd is None:
        return ds
    return dd if dd[1] else dd[:1]


_INF_RISK = 2.0 ** 1020  # sums whose magnitude may reach this need _dd_add's overflow check


class AggUnicast:
    """S-UN for range aggregates: the server keeps every subscription's exact (count, sum) and, per update,
    returns the subscriptions whose SQL value changed and their new values.

    ``x1s`` / ``x2s``: subscription bounds (index = subscription slot); ``core``: seeds the states from the
    current table (else all empty); ``bucket_size``: the layout's (tests; default ``max(1024, 32 sqrt(M))``).
    ``counters``: ``touched`` = relaxed deliveries (a subscription reached by a message of the update),
    ``notified`` = value changes reported.

    Cost of :meth:`apply`: an update's (at most two) messages split the subscription points into at most three
    disjoint rectangles (:func:`_rectangles`), each answered by :class:`_StabLayout` as runs of positions
    (O(M / B + B) index work); then only the subscriptions of a rectangle whose net delta is nonzero are
    visited, by vectorised work on int64 counts and double-double sums (O(1) numpy passes per subscription, a
    Python-int fallback only where a sum does not fit two floats).  A rectangle with a zero net delta (a COUNT
    range holding both ends of an X-move, or a SUM one when Y did not change) is only counted.
    """

    def __init__(self, kind: str, x1s, x2s, core: RangeAggCore | None = None, *, bucket_size: int | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown aggregate kind {kind!r}; expected one of {KINDS}")
        self.kind = kind
        self.x1 = np.atleast_1d(np.asarray(x1s, dtype=np.float64))
        self.x2 = np.atleast_1d(np.asarray(x2s, dtype=np.float64))
        if self.x1.shape != self.x2.shape:
            raise ValueError("x1s and x2s differ in length")
        self.x1, self.x2 = self.x1.reshape(-1), self.x2.reshape(-1)
        self._lay = lay = _StabLayout(self.x1, self.x2, bucket_size)
        n = lay.M
        # per layout position: the count; the exact sum as a pair h + l, or in _big where h is NaN; AVG's value
        self._cnt = np.zeros(n, dtype=np.int64)
        self._big: dict[int, int] = {}
        self._h = self._l = self._val = None
        self._hmax = 0.0  # an upper bound of |h| (sums near the float range need the overflow check)
        self._hmax_seen = 0.0  # max |h| when _hmax was last recomputed
        self._q = _NO_QUANTUM  # every pair and every delta so far is a multiple of 2**_q (see _tail_exact)
        self._ws = self._ws_avg = None  # scratch rows for _apply_sum
        if kind != "count":
            self._h = np.zeros(n)
            self._l = np.zeros(n)
        if core is not None and n:
            self._seed(core)
        if kind == "avg":
            self._val = self._avg_values(_Sel([slice(0, n)]), self._h, self._l, self._cnt)
        self.counters = {"touched": 0, "notified": 0}

    def _seed(self, core: RangeAggCore) -> None:
        """States from the core's prefix arrays: a count is a difference of prefix counts, a sum the difference
        of two exact prefix sums, taken as pairs (Python ints only where a pair cannot hold one)."""
        lay = self._lay
        xs, pc, ps = core._snapshot()
        lo = np.searchsorted(xs, lay.x1, "left")
        hi = np.searchsorted(xs, lay.x2, "right")
        self._cnt = (pc[hi] - pc[lo]).astype(np.int64)
        if self.kind == "count":
            return
        ph = np.empty(len(ps))
        pl = np.empty(len(ps))
        nan = (math.nan, math.nan)
        for i, v in enumerate(ps.tolist()):
            ph[i], pl[i] = _dd_of(v) or nan
        h, l, bad = _dd_add(ph[hi], pl[hi], -ph[lo])
        h, l, bad2 = _dd_add(h, l, -pl[lo])
        self._h, self._l = h, l
        for p in np.union1d(bad, bad2).tolist():
            self._set_exact(p, ps[hi[p]] - ps[lo[p]], h, l)
        self._hmax = self._hmax_seen = float(np.nanmax(np.abs(h), initial=0.0))
        self._q = min(_lowbit_min(h), _lowbit_min(l))

    def _set_exact(self, p: int, v: int, h: np.ndarray, l: np.ndarray, i: int | None = None) -> None:
        """Store exact sum ``v`` of position ``p`` (into ``h[i], l[i]``, i = p by default): as a pair when one
        holds it, else as a Python int behind a NaN."""
        i = p if i is None else i
        dd = _dd_of(v)
        if dd is None:
            h[i], l[i] = math.nan, 0.0
            self._big[p] = v
        else:
            h[i], l[i] = dd
            self._hmax = max(self._hmax, abs(dd[0]))
            self._q = min([self._q] + [_lowbit(x) for x in dd if x])
            self._big.pop(p, None)

    def _exact_sum(self, p: int, h: float, l: float) -> int:
        v = self._big.get(p)
        return exact(h) + exact(l) if v is None else v

    def _avg_values(self, sel: _Sel, h, l, c, ws=None) -> np.ndarray:
        """AVG values of the pairs ``(h, l)`` with counts ``c`` at ``sel``'s positions (NaN where c == 0)."""
        v, ok = _avg_of(h, l, c, ws)
        empty = c == 0
        v[empty] = math.nan
        ok |= empty
        unsure = np.flatnonzero(~ok)
        if unsure.size:
            v2, ok2 = _avg_exact(h[unsure], l[unsure], c[unsure])
            v[unsure[ok2]] = v2[ok2]
            unsure = unsure[~ok2]
        if unsure.size:
            pos = sel.positions()
            for i in unsure.tolist():
                v[i] = to_float(self._exact_sum(int(pos[i]), float(h[i]), float(l[i])), int(c[i]))
        return v

    # ---- queries ------------------------------------------------------------------------------------------------
    def values(self) -> np.ndarray:
        """Every subscription's current value (int64 for COUNT; float64, NaN = NULL, for SUM / AVG)."""
        lay, n = self._lay, len(self.x1)
        if self.kind == "count":
            out = np.zeros(n, dtype=np.int64)
            out[lay.slot] = self._cnt
            return out
        if self.kind == "avg":
            v = self._val
        else:
            v = np.where(self._cnt != 0, self._h, math.nan)
            for p, s in self._big.items():
                if self._cnt[p]:
                    v[p] = to_float(s)
        out = np.full(n, math.nan)
        out[lay.slot] = v
        return out

    def state(self, slot: int) -> AggState:
        """Subscription ``slot``'s exact (count, scaled sum); a COUNT unicast keeps no sums (0).  O(M): tests."""
        if not self.x1[slot] <= self.x2[slot]:
            return AggState()
        p = int(np.flatnonzero(self._lay.slot == slot)[0])
        if self.kind == "count":
            return AggState(int(self._cnt[p]), 0)
        return AggState(int(self._cnt[p]), self._exact_sum(p, float(self._h[p]), float(self._l[p])))

    # ---- updates ------------------------------------------------------------------------------------------------
    def apply(self, outcome) -> tuple[np.ndarray, np.ndarray]:
        """Apply one update's messages; return (indices whose value changed, their new values).

        Each changed index appears once, in no particular order; values are int64 for COUNT, float64 with NaN
        for NULL for SUM / AVG."""
        lay = self._lay
        touched = 0
        jobs = []
        for rect, dc, total, ds in _rectangles(_messages(outcome)):
            if dc == 0 and (total == 0 or self.kind == "count"):  # reached, but no value can change
                touched += lay.count(*rect)
                continue
            sel = lay.select(*rect)
            if sel is not None:
                touched += sel.n
                jobs.append((sel, dc, total, ds))
        self.counters["touched"] += touched
        parts = []
        for sel, dc, total, ds in jobs:
            if self.kind == "count":  # every reached count moves by dc != 0
                c = sel.take(self._cnt)
                c += dc
                sel.put(self._cnt, c)
                parts.append((sel.take(lay.slot), c))
            else:
                parts.append(self._apply_sum(sel, dc, total, _terms(total, ds)))
        if not parts:
            return _EMPTY_I.copy(), np.empty(0, dtype=np.int64 if self.kind == "count" else np.float64)
        idx = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        vals = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
        self.counters["notified"] += int(idx.size)
        return idx, vals

    def _work(self, n: int, name: str = "_ws", rows: int = 12) -> list[np.ndarray]:
        """Float64 scratch rows of length n (reused: grown geometrically, never beyond M)."""
        ws = getattr(self, name)
        if ws is None or ws.shape[1] < n:
            cap = max(n, min(2 * (0 if ws is None else ws.shape[1]), self._lay.M))
            ws = np.empty((rows, cap))
            setattr(self, name, ws)
        return list(ws[:, :n])

    def _tail_exact(self, grow: float) -> bool:
        """Whether ``_dd_add``'s middle sum ``l + e`` is exact for every pair, without checking each.

        Every pair and delta is a multiple of Q = 2**_q, hence so are l and e, and |l + e| <= ulp(h) / 2 +
        ulp(h + d) / 2 <= 2**-52 hmax (hmax already includes |d|); a multiple of Q up to 2**53 Q is a float, so
        hmax <= 2**(104 + _q) suffices.  Exact-int fallbacks (NaN h) must be caught: none may exist.  The bound
        hmax only grows (by |delta|, ``grow`` being this update's, already added); when it has doubled it is
        recomputed as max |h| + grow."""
        if self._big:
            return False
        lim = math.ldexp(1.0, min(104 + self._q, 1020))  # (2**1020: _INF_RISK)
        if self._hmax >= lim and self._hmax > 2 * self._hmax_seen:
            self._hmax_seen = float(np.nanmax(np.abs(self._h), initial=0.0))
            self._hmax = self._hmax_seen + grow
        return self._hmax < lim

    def _apply_sum(self, sel: _Sel, dc: int, total: int, terms: tuple):
        """SUM / AVG: add (dc, total) to the subscriptions at ``sel`` (``terms``: floats summing to ``total``
        exactly); (slots, values) of the changed ones."""
        w = self._work(sel.n)
        h0 = sel.take(self._h, w[0])
        l0 = sel.take(self._l, w[1])
        h, l = h0, l0
        bad = _EMPTY_I
        if terms:
            grow = sum(abs(d) for d in terms) * (1 + 2.0 ** -40)  # bounds every intermediate sum's growth (or inf)
            self._hmax += grow
            self._q = min([self._q] + [_lowbit(d) for d in terms if d])
            exact_tail = self._tail_exact(grow)
            check = self._hmax >= _INF_RISK
            for k, d in enumerate(terms):  # ping-pong between two sets of scratch rows; the last h is returned
                ws = w[2 + 5 * (k % 2):7 + 5 * (k % 2)]
                if k == len(terms) - 1 and self.kind == "sum":
                    ws[2] = np.empty(sel.n)
                h, l, b = _dd_add(h, l, d, check, ws, exact_tail)
                bad = b if not bad.size else np.union1d(bad, b)
        elif self._big:  # only the count moves; fallbacks still need their values
            bad = np.flatnonzero(h0 != h0)
        counted = dc != 0 or self.kind == "avg"
        if counted:
            c0 = sel.take(self._cnt)
            c1 = c0 + dc if dc else c0
        slow = []
        if bad.size:  # outside what a pair holds: exact Python ints (rare)
            pos = sel.positions()
            for i in bad.tolist():
                p = int(pos[i])
                v0 = self._exact_sum(p, float(h0[i]), float(l0[i]))
                slow.append((i, v0, v0 + total))
        if self.kind == "sum":
            # changed: the rounded sum moved, or the range became (non-)empty; 0 < dc: only c0 can be 0,
            # dc < 0: only c1; dc == 0: neither (every range a dc = 0 message reaches holds its tuple).  A
            # rounded sum x stays only if |delta| <= ulp(x) <= 2**-52 hmax: a larger delta moves every one.
            big_delta = abs(total) >= _ONE << 1000 or abs(total) / _ONE > self._hmax * 2.0 ** -50
            if dc == 0 and not slow and big_delta:
                changed = True
            else:
                changed = h0 != h
            new = h.copy() if slow or terms == () else h  # h is fresh (the last _dd_add's) unless copied
            if dc > 0:
                changed |= c0 == 0
            elif dc < 0:
                empty = c1 == 0
                if empty.any():
                    changed |= empty
                    new = np.where(empty, math.nan, new)  # (new may be h itself)
            for i, v0, v1 in slow:
                a = to_float(v0) if not counted or c0[i] else math.nan
                b = to_float(v1) if not counted or c1[i] else math.nan
                new[i] = b
                changed[i] = not (a == b or a != a and b != b)
                self._set_exact(int(pos[i]), v1, h, l, i)
        else:
            for i, v0, v1 in slow:
                self._set_exact(int(pos[i]), v1, h, l, i)
            old = sel.take(self._val)
            new = self._avg_values(sel, h, l, c1, self._work(sel.n, "_ws_avg", 7))
            sel.put(self._val, new)
            changed = ~((old == new) | (np.isnan(old) & np.isnan(new)))
        if terms or slow:
            sel.put(self._h, h)
            sel.put(self._l, l)
        if dc:
            sel.put(self._cnt, c1)
        if changed is True or changed.all():  # (the usual SUM case: every reached sum moves)
            return sel.take(self._lay.slot), new
        sel_changed = np.flatnonzero(changed)
        if sel.pieces is None:
            return self._lay.slot[sel.positions()[sel_changed]], new[sel_changed]
        return sel.take(self._lay.slot)[sel_changed], new[sel_changed]
