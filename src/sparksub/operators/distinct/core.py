"""Range-DISTINCT continuous queries: Mar extended to duplicates, message / subscription reformulation.

Pure-Python core (sortedcontainers + numpy, no pyspark) of the RANGE_DISTINCT subscription class:
``SELECT DISTINCT y FROM t WHERE x BETWEEN x1 AND x2``.

Sources
-------
* 000 = B. Chandramouli, J. Xie, J. Yang, SIGMOD 2006 ("[CXY06]").  §2.3.1: Mar (Definition 1), message /
  subscription reformulation for range-MIN; §4 ("Other Subscription Types"): range-DISTINCT, "Mar of an
  insertion (or deletion) is the maximum X range that contains the insertion (or deletion) point and no other
  tuples with the same Y value ... A range-DISTINCT subscription is reformulated into a stateless selection
  subscription that checks if the subscription range contains the X value and is also contained by the Mar."
* Dissertation ch. 5 §5.4 (Figure 5.5, left); digest ``notes/dissertation-ch2-3-5.md`` C.10.  Neither text
  treats Y-updates or X-moves ("presumably delete + insert", digest C.10); the rules below for those are ours
  and are proved by the brute-force tests (``tests/operators/test_range_distinct.py``).

Mar for DISTINCT
----------------
For a tuple t at (x, y), with O = the *other* tuples whose Y equals y::

    DMar(x, y) = (ℓO, rO)   ℓO = max{x' ∈ O : x' < x} (-inf if none),  rO = min{x' ∈ O : x' > x} (+inf if none)
    DMar(x, y) = ∅          if some x' ∈ O equals x

A subscription ``[x1, x2]`` holds y only because of t iff ``x ∈ [x1, x2] ⊆ DMar`` i.e.
``ℓO < x1 <= x <= x2 < rO``: the range contains x and no other tuple with the same Y (000 §4).  So inserting t
adds y to exactly those subscriptions, and deleting t removes y from exactly those.

Messages and the reformulated subscription
------------------------------------------
A message is ``⟨OP, VALUE, INNER_L, INNER_R, OUTER_L, OUTER_R⟩`` (:class:`Message`), OP in {ADD, REMOVE}; the
subscription ``[x1, x2]`` is the stateless predicate (:func:`matches`, the same shape as
:func:`sparksub.operators.range_min.core.matches`, 000 §2.3.1)::

    (OUTER_L < x1 <= INNER_L) and (INNER_R <= x2 < OUTER_R)

where an infinite OUTER bound also admits the same infinite subscription end.  On a match the subscriber adds
VALUE to (ADD) or removes it from (REMOVE) its local set (:func:`apply`).  INNER_L = INNER_R = x always.

* insertion of (x, y):  ``⟨ADD, y, x, x, DMar(x, y)⟩`` unless DMar = ∅ (then no message);
* deletion of (x, y):   ``⟨REMOVE, y, x, x, DMar(x, y)⟩`` unless DMar = ∅;
* Y change at the same x (y_o → y_n): the deletion message of y_o then the insertion message of y_n.  They carry
  different values, so no subscription sees a value removed and re-added;
* X-move with unchanged y (x_o → x_n): *consolidated* (dissertation §5.3.1 consolidates X-updates to at most one
  notification per subscription but omits the details, digest C.8; this rule is ours): the REMOVE's Mar is taken
  w.r.t. O ∪ {x_n} and the ADD's Mar w.r.t. O ∪ {x_o}.  A subscription containing both x_o and x_n matches
  neither message (its set does not change), one containing x_o but neither x_n nor another y-tuple matches the
  REMOVE, one containing x_n but neither x_o nor another y-tuple matches the ADD.  The two rectangles are
  disjoint: each subscription gets at most one message;
* X-move with a Y change: REMOVE of y_o at x_o (w.r.t. the other y_o tuples), ADD of y_n at x_n.

Hence for every update and every subscription: the subscription matches at least one message iff its DISTINCT
set changes, and at most one message per value.  An update that produces no message (every Mar empty, or no
change at all) is *ignorable* (the ``ignorable`` counter).

Unicast (S-UN): :func:`affected` / :func:`notifications` evaluate the predicate vectorised over arrays of
subscription bounds and return exactly the subscriptions whose set changed (and which message to apply).

Y values are any hashable values (floats, ints, strings; ``None`` is an ordinary value, like SQL's one NULL
group of DISTINCT); a float NaN is rejected (NaN != NaN breaks set semantics).  1 and 1.0 are the same value, as
in a Python set.  X must be a finite float.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import NamedTuple

import numpy as np
from sortedcontainers import SortedList

from sparksub.errors import BadUpdate

__all__ = [
    "ADD",
    "REMOVE",
    "Message",
    "Outcome",
    "RangeDistinctCore",
    "affected",
    "apply",
    "matches",
    "notifications",
]

ADD = "ADD"
REMOVE = "REMOVE"

_INF = math.inf
_NINF = -math.inf
_isfinite = math.isfinite
_EMPTY = SortedList()


class Message(NamedTuple):
    """⟨OP, VALUE, INNER_L, INNER_R, OUTER_L, OUTER_R⟩: OP in {ADD, REMOVE}; (OUTER_L, OUTER_R) = the DISTINCT
    Mar (000 §4), possibly with ±inf ends."""

    op: str
    value: Hashable
    inner_l: float
    inner_r: float
    outer_l: float
    outer_r: float


class Outcome(NamedTuple):
    """What one :meth:`RangeDistinctCore.upsert` / :meth:`RangeDistinctCore.delete` produced.

    ``kind``: 'insert', 'delete', 'y_update' (same X), 'x_move' (same Y, consolidated), 'update' (X and Y
    change) or 'unchanged'.  Messages are to be applied in order."""

    kind: str
    messages: tuple[Message, ...]

    @property
    def ignorable(self) -> bool:
        """No message: every Mar was empty, or nothing changed."""
        return not self.messages


def matches(message: Message, x1: float, x2: float) -> bool:
    """The reformulated (stateless) range-DISTINCT subscription predicate (000 §4, shape of §2.3.1).

    ``(OUTER_L < x1 <= INNER_L) and (INNER_R <= x2 < OUTER_R)``; an infinite OUTER bound also admits the same
    infinite subscription end.

    >>> m = Message(ADD, "a", 5.0, 5.0, 2.0, 8.0)
    >>> matches(m, 3.0, 7.0), matches(m, 2.0, 7.0), matches(m, 3.0, 8.0), matches(m, 6.0, 7.0)
    (True, False, False, False)
    >>> matches(Message(ADD, "a", 5.0, 5.0, -math.inf, math.inf), -math.inf, math.inf)
    True
    """
    _, _, il, ir, ol, orr = message
    if not (ol < x1 or (x1 == ol == _NINF)):
        return False
    if not (x2 < orr or (x2 == orr == _INF)):
        return False
    return x1 <= il and ir <= x2


def apply(messages: Iterable[Message], local_set: set, x1: float, x2: float) -> int:
    """Subscriber side: apply, in order, every message matching ``[x1, x2]`` to ``local_set`` (in place).

    Returns the number of matching messages (0 = not notified).

    >>> s = {"a"}
    >>> apply([Message(ADD, "b", 5.0, 5.0, 2.0, 8.0), Message(REMOVE, "a", 6.0, 6.0, 1.0, 9.0)], s, 3.0, 7.0)
    2
    >>> sorted(s)
    ['b']
    >>> apply([Message(ADD, "c", 5.0, 5.0, 4.0, 8.0)], s, 3.0, 7.0), sorted(s)
    (0, ['b'])
    """
    n = 0
    for m in messages:
        if matches(m, x1, x2):
            n += 1
            if m.op == ADD:
                local_set.add(m.value)
            else:
                local_set.discard(m.value)
    return n


def _match_mask(m: Message, x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """Vectorised :func:`matches` over subscription arrays (NaN bounds never match)."""
    il, ir, ol, orr = m.inner_l, m.inner_r, m.outer_l, m.outer_r
    left = (ol < x1) | ((x1 == _NINF) & (ol == _NINF))
    right = (x2 < orr) | ((x2 == _INF) & (orr == _INF))
    return left & right & (x1 <= il) & (ir <= x2)


def notifications(subscriptions_x1, subscriptions_x2, outcome) -> tuple[np.ndarray, np.ndarray]:
    """Unicast (S-UN) pairs: ``(subscription index, message index)`` for every match, ordered by message.

    ``outcome`` is an :class:`Outcome` or a sequence of :class:`Message`.  One vectorised predicate per message
    (an update has at most two), so the cost is O(#messages × #subscriptions) numpy work, no Python loop over
    subscriptions.  Row ``i`` means "apply message ``msg[i]`` to subscription ``sub[i]``".

    >>> out = Outcome("insert", (Message(ADD, 7, 5.0, 5.0, 2.0, 8.0),))
    >>> sub, msg = notifications([3.0, 1.0, 5.0], [7.0, 6.0, 5.0], out)
    >>> sub.tolist(), msg.tolist()
    ([0, 2], [0, 0])
    """
    x1 = np.asarray(subscriptions_x1, dtype=np.float64)
    x2 = np.asarray(subscriptions_x2, dtype=np.float64)
    msgs = outcome.messages if isinstance(outcome, Outcome) else tuple(outcome)
    subs, idx = [], []
    for i, m in enumerate(msgs):
        hit = np.flatnonzero(_match_mask(m, x1, x2))
        subs.append(hit)
        idx.append(np.full(len(hit), i, dtype=np.int64))
    if not subs:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(subs).astype(np.int64), np.concatenate(idx)


def affected(subscriptions_x1, subscriptions_x2, outcome) -> np.ndarray:
    """Sorted indices of the subscriptions whose DISTINCT set this outcome changes (vectorised).

    A subscription matches some message iff its set changed (module docstring), so this is exactly the set a
    unicast server must notify.

    >>> out = Outcome("x_move", (Message(REMOVE, 7, 1.0, 1.0, -math.inf, 4.0), Message(ADD, 7, 4.0, 4.0, 1.0, 9.0)))
    >>> affected([0.0, 0.0, 2.0, 5.0], [2.0, 5.0, 5.0, 6.0], out).tolist()
    [0, 2]
    """
    x1 = np.asarray(subscriptions_x1, dtype=np.float64)
    x2 = np.asarray(subscriptions_x2, dtype=np.float64)
    msgs = outcome.messages if isinstance(outcome, Outcome) else tuple(outcome)
    mask = np.zeros(np.broadcast(x1, x2).shape, dtype=bool)
    for m in msgs:
        mask |= _match_mask(m, x1, x2)
    return np.flatnonzero(mask).astype(np.int64)


def _check_x(key, x) -> float:
    if isinstance(x, (str, bytes)) or x is None:
        raise BadUpdate(f"X of key {key!r} is not a number: {x!r}")
    try:
        xf = float(x)
    except (TypeError, ValueError):
        raise BadUpdate(f"X of key {key!r} is not a number: {x!r}") from None
    if not _isfinite(xf):
        raise BadUpdate(f"non-finite X for key {key!r}: {x!r}")
    return xf


def _check_y(key, y):
    if isinstance(y, np.generic):
        y = y.item()  # numpy scalars -> Python values (equal hashes either way; keeps messages plain)
    if isinstance(y, float) and math.isnan(y):
        raise BadUpdate(f"NaN Y for key {key!r} (NaN is not equal to itself, so it cannot be a DISTINCT value)")
    try:
        hash(y)
    except TypeError:
        raise BadUpdate(f"unhashable Y for key {key!r}: {y!r}") from None
    return y


def _dmar(sl: SortedList, x: float) -> tuple[float, float] | None:
    """DISTINCT Mar of one tuple at x w.r.t. the others in ``sl`` (the multiset of X of one Y value, which holds
    the tuple itself once).  None = ∅ (another tuple with the same Y at exactly x; 000 §4)."""
    i = sl.bisect_left(x)
    j = sl.bisect_right(x)
    if j - i >= 2:
        return None
    return (sl[i - 1] if i > 0 else _NINF), (sl[j] if j < len(sl) else _INF)


class RangeDistinctCore:
    """Server-side S-CN processing of range-DISTINCT subscriptions (000 §4; dissertation §5.4).

    State: ``key -> (x, y)``; per Y value the sorted multiset of its X (a :class:`SortedList` of floats: the
    DISTINCT Mar needs only the X neighbours of the same Y, and storing keys there would require keys of mixed
    types to be mutually comparable); a global sorted list of ``(x, slot)`` for range scans.  Each update costs
    O(log N) and yields at most two messages; subscriptions are never looked at.

    ``counters``: ``updates`` = accepted upsert/delete calls; ``messages`` = messages emitted; ``ignorable`` =
    updates that produced no message.
    """

    def __init__(self):
        self._pos: dict[Hashable, tuple[float, Hashable]] = {}
        self._by_y: dict[Hashable, SortedList] = {}
        self._slot: dict[Hashable, int] = {}  # key -> int slot (global list entries are (x, slot))
        self._key_of: dict[int, Hashable] = {}
        self._next_slot = 0
        self._xs = SortedList()
        self.counters: dict[str, int] = {"updates": 0, "messages": 0, "ignorable": 0}

    def __len__(self) -> int:
        return len(self._pos)

    def __contains__(self, key) -> bool:
        return key in self._pos

    def get(self, key) -> tuple[float, Hashable] | None:
        """(x, y) of ``key``, or None."""
        return self._pos.get(key)

    def xs_of(self, y) -> SortedList:
        """The sorted X of value ``y``'s tuples (empty if none): what a zone's round 2 reads
        (``distinct/zones.py``).  Not to be modified."""
        return self._by_y.get(y) or _EMPTY

    def num_values(self) -> int:
        """Number of distinct Y values in the table."""
        return len(self._by_y)

    # ---- loading and queries ----------------------------------------------------------------------------------
    def load(self, keys, xs, ys) -> None:
        """Bulk-load tuples without producing messages or counting updates.

        ``BadUpdate`` (with the row number) for a non-finite X, a NaN Y or a key repeated in the batch or
        already present."""
        keys = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
        xs = xs.tolist() if isinstance(xs, np.ndarray) else list(xs)
        ys = ys.tolist() if isinstance(ys, np.ndarray) else list(ys)
        if not (len(keys) == len(xs) == len(ys)):
            raise ValueError("keys, xs, ys differ in length")
        rows = []
        seen = set()
        for i, (k, x, y) in enumerate(zip(keys, xs, ys)):
            try:
                x = _check_x(k, x)
                y = _check_y(k, y)
            except BadUpdate as e:
                raise BadUpdate(str(e), row=i) from None
            if k in seen or k in self._pos:
                raise BadUpdate(f"duplicate key {k!r} in load", row=i)
            seen.add(k)
            rows.append((k, x, y))
        if self._pos:
            for k, x, y in rows:
                self._insert(k, x, y)
            return
        # into an empty core: build every sorted list in one go (O(N log N), no per-row SortedList.add)
        per_y: dict = {}
        entries = []
        for s, (k, x, y) in enumerate(rows):
            per_y.setdefault(y, []).append(x)
            self._pos[k] = (x, y)
            self._slot[k] = s
            self._key_of[s] = k
            entries.append((x, s))
        self._next_slot = len(rows)
        self._by_y = {y: SortedList(lst) for y, lst in per_y.items()}
        self._xs = SortedList(entries)

    def distinct_values(self, x1: float, x2: float) -> set:
        """The current ``SELECT DISTINCT y ... WHERE x BETWEEN x1 AND x2`` as a set (empty for an empty range).

        Adaptive: scans the tuples in the range when there are fewer than ~4 per distinct value, otherwise probes
        each value's X list with one bisect."""
        if not x1 <= x2:
            return set()
        xs = self._xs
        i = xs.bisect_left((x1,))
        j = xs.bisect_right((x2, _INF))
        if j - i <= 4 * len(self._by_y):
            pos, key_of = self._pos, self._key_of
            return {pos[key_of[s]][1] for _, s in xs.islice(i, j)}
        out = set()
        for y, sl in self._by_y.items():
            k = sl.bisect_left(x1)
            if k < len(sl) and sl[k] <= x2:
                out.add(y)
        return out

    # ---- updates ----------------------------------------------------------------------------------------------
    def upsert(self, key, x, y) -> Outcome:
        """Insert tuple ``key`` at (x, y) or update it; returns the reformulated messages (module docstring)."""
        x = _check_x(key, x)
        y = _check_y(key, y)
        out = self._upsert(key, x, y)
        return self._count(out)

    def delete(self, key) -> Outcome:
        """Delete tuple ``key``: ``⟨REMOVE, y, x, x, DMar⟩`` unless DMar = ∅.  ``BadUpdate`` if unknown."""
        old = self._pos.get(key)
        if old is None:
            raise BadUpdate(f"delete of unknown key {key!r}")
        msg = self._remove(key, old[0], old[1])
        return self._count(Outcome("delete", (msg,) if msg else ()))

    def _count(self, out: Outcome) -> Outcome:
        c = self.counters
        c["updates"] += 1
        c["messages"] += len(out.messages)
        if not out.messages:
            c["ignorable"] += 1
        return out

    def _insert(self, key, x: float, y) -> Message | None:
        sl = self._by_y.get(y)
        if sl is None:
            sl = self._by_y[y] = SortedList()
        sl.add(x)
        s = self._next_slot
        self._next_slot += 1
        self._slot[key] = s
        self._key_of[s] = key
        self._xs.add((x, s))
        self._pos[key] = (x, y)
        mar = _dmar(sl, x)
        return None if mar is None else Message(ADD, y, x, x, mar[0], mar[1])

    def _remove(self, key, x: float, y) -> Message | None:
        sl = self._by_y[y]
        mar = _dmar(sl, x)
        sl.remove(x)
        if not sl:
            del self._by_y[y]
        s = self._slot.pop(key)
        del self._key_of[s]
        self._xs.remove((x, s))
        del self._pos[key]
        return None if mar is None else Message(REMOVE, y, x, x, mar[0], mar[1])

    def _upsert(self, key, x: float, y) -> Outcome:
        old = self._pos.get(key)
        if old is None:
            m = self._insert(key, x, y)
            return Outcome("insert", (m,) if m else ())
        xo, yo = old
        if yo == y:
            if xo == x:  # changes neither X nor Y: dropped (digest C.5 implementation notes)
                return Outcome("unchanged", ())
            # X-move, same Y: consolidated (module docstring).  With both x_o and x_n in the list, _dmar(x_o)
            # is the Mar w.r.t. O ∪ {x_n} and _dmar(x_n) the Mar w.r.t. O ∪ {x_o}.
            sl = self._by_y[yo]
            sl.add(x)
            mr = _dmar(sl, xo)
            ma = _dmar(sl, x)
            sl.remove(xo)
            s = self._slot[key]
            self._xs.remove((xo, s))
            self._xs.add((x, s))
            self._pos[key] = (x, yo)
            msgs = []
            if mr is not None:
                msgs.append(Message(REMOVE, yo, xo, xo, mr[0], mr[1]))
            if ma is not None:
                msgs.append(Message(ADD, yo, x, x, ma[0], ma[1]))
            return Outcome("x_move", tuple(msgs))
        # Y changes: deletion of y_o then insertion of y_n (different values, so no cancellation)
        mr = self._remove(key, xo, yo)
        ma = self._insert(key, x, y)
        return Outcome("y_update" if xo == x else "update", tuple(m for m in (mr, ma) if m is not None))

    # ---- introspection ----------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Assert internal consistency (tests)."""
        assert len(self._xs) == len(self._pos) == len(self._slot) == len(self._key_of)
        per_y: dict = {}
        for key, (x, y) in self._pos.items():
            per_y.setdefault(y, []).append(x)
            assert (x, self._slot[key]) in self._xs
            assert self._key_of[self._slot[key]] == key
        assert set(per_y) == set(self._by_y)
        for y, lst in per_y.items():
            assert sorted(lst) == list(self._by_y[y])

    def explain(self) -> str:
        return (f"RangeDistinctCore: {len(self)} tuples, {len(self._by_y)} distinct values; "
                f"counters {self.counters}")
