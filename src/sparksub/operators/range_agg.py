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

Unicast (S-UN, :class:`AggUnicast`): the server keeps every subscription's exact state, applies each update's
messages to the subscriptions they reach (one vectorised mask per message) and reports only the subscriptions
whose SQL value changed, with their new values (e.g. a COUNT range holding both ends of an X-move is reached
by both messages but not reported).
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Hashable, Iterable
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from sparksub.errors import BadUpdate

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

class AggUnicast:
    """S-UN for range aggregates: the server keeps every subscription's exact (count, sum) and, per update,
    returns the subscriptions whose SQL value changed and their new values (vectorised over subscriptions).

    ``x1s`` / ``x2s``: subscription bounds (index = subscription slot); ``core``: seeds the states from the
    current table (else all empty).  :meth:`apply` costs O(#messages × #subscriptions) numpy work plus O(T)
    Python-int work for the T touched subscriptions.  ``counters``: ``touched`` = relaxed deliveries (a
    subscription reached by a message of the update), ``notified`` = value changes reported.
    """

    def __init__(self, kind: str, x1s, x2s, core: RangeAggCore | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown aggregate kind {kind!r}; expected one of {KINDS}")
        self.kind = kind
        self.x1 = np.atleast_1d(np.asarray(x1s, dtype=np.float64))
        self.x2 = np.atleast_1d(np.asarray(x2s, dtype=np.float64))
        if self.x1.shape != self.x2.shape:
            raise ValueError("x1s and x2s differ in length")
        if core is not None:
            self.counts, self.sums = core.states(self.x1, self.x2)
            self.counts = self.counts.astype(np.int64)
        else:
            self.counts = np.zeros(len(self.x1), dtype=np.int64)
            self.sums = np.zeros(len(self.x1), dtype=object)
        self.counters = {"touched": 0, "notified": 0}

    def values(self) -> np.ndarray:
        """Every subscription's current value (int64 for COUNT; float64, NaN = NULL, for SUM / AVG)."""
        return _values_of(self.kind, self.counts, self.sums)

    def apply(self, outcome) -> tuple[np.ndarray, np.ndarray]:
        """Apply one update's messages; return (indices whose value changed, their new values)."""
        msgs = _messages(outcome)
        masks = [(self.x1 <= m.x) & (m.x <= self.x2) for m in msgs]
        if not masks:
            return np.empty(0, dtype=np.int64), _values_of(self.kind, self.counts[:0], self.sums[:0])
        hit = np.logical_or.reduce(masks)
        idx = np.flatnonzero(hit)
        dc = np.zeros(len(idx), dtype=np.int64)
        ds = np.zeros(len(idx), dtype=object)
        for m, mask in zip(msgs, masks):
            sel = mask[idx]
            dc[sel] += m.d_count
            ds[sel] += exact(m.d_sum)
        old = _values_of(self.kind, self.counts[idx], self.sums[idx])
        self.counts[idx] += dc
        self.sums[idx] += ds
        new = _values_of(self.kind, self.counts[idx], self.sums[idx])
        if self.kind == "count":
            changed = old != new
        else:
            changed = ~((old == new) | (np.isnan(old) & np.isnan(new)))
        self.counters["touched"] += len(idx)
        self.counters["notified"] += int(changed.sum())
        return idx[changed], new[changed]
