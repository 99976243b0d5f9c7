"""Phase 1 of two-phase matching: which predicates does each event satisfy? (001 §2.2)

Fabret et al. split event matching in two (001 §2.2, Figure 2): *predicate testing* uses one
index per attribute to find every predicate an event satisfies and sets its entry of the
*predicate bit vector*; *subscription matching* then reads only that bit vector.  Every distinct
predicate gets exactly one bit vector entry, so predicates shared by many subscriptions are
evaluated once (001 §2.3, "space cost").  This module is phase 1, vectorised over a *batch* of
events (the rows of an Arrow table):

* :class:`PredicateIndex` interns distinct predicates to dense int ids (reference counted;
  freed ids are reused, smallest first) and keeps, per attribute and per value kind, one sorted
  constant table per operator (001 §2.3: "hash indexes for equality predicates and simple
  B-Trees for inequalities"; a sorted numpy array is the static B-tree).  The batch's values of
  an attribute are *ranked once* against the attribute's sorted constant domain (one
  ``np.searchsorted`` plus an equality test; strings are dictionary-encoded first so each
  distinct string is ranked once); every operator table's search positions are then array
  gathers precomputed per domain value, and each event's satisfied predicates are a range:

  - ``=`` and ``IN``: the equality table, every (constant, pid) pair sorted by constant (an
    ``IN`` predicate contributes one entry per member); an event's run of equal constants is
    the vectorised equivalent of a hash probe.
  - ``<``, ``<=``, ``>``, ``>=``: the predicates ``x < c`` that hold for a value ``v`` are those
    with ``c > v``, a suffix of the sorted constants (``<=``: ``c >= v``, a suffix;
    ``>``/``>=``: a prefix).
  - ``between`` (inclusive ``lo <= x <= hi``): a segment tree over the attribute's
    elementary value classes (the gaps and points of its sorted constants); an event's
    intervals are those stored on its leaf's root path -- only hits are enumerated.
  - ``!=``: "present, of the same kind, and not equal": the complement of the equal run in the
    sorted ``!=`` constants (two ranges per event).
  - ``is_null``: events whose column is absent from the batch or whose value is null;
    ``is_not_null`` the others (a present value of any type, NaN included).

  Tables are compiled lazily, per attribute, at the first :meth:`PredicateIndex.evaluate`
  after that attribute's predicates changed.  No Python loop runs over events or predicates:
  the loops are over the batch's indexed attributes, the two value kinds and the operator
  kinds; every (event, predicate) range is expanded with ``np.repeat`` arithmetic.

* :class:`Satisfied` is the result: every satisfied (event, predicate) pair, sorted by event,
  and :meth:`Satisfied.bitmap` materialises the paper's predicate bit vector for a run of events.

Value semantics (the conventions every matcher built on this index inherits)
-----------------------------------------------------------------------------
* Two value *kinds*: numbers (Python/numpy int, float, bool -- bool as 0/1; Arrow integer,
  floating, boolean and decimal columns) compare numerically, as float64 (exact for integers of
  magnitude up to 2**53); strings (Arrow string/large_string/dictionary-of-string columns)
  compare lexicographically by code point, as Python ``str`` does.
* A predicate whose constant kind differs from the event value's kind is not satisfied --
  ``price < 'abc'`` on a numeric price, or ``price != 'abc'`` (``!=`` means "present, same kind,
  not equal").  Columns of any other Arrow type (timestamps, lists, ...) satisfy only
  ``is_null`` (on their null entries).  An ``IN`` list may mix kinds; each member matches values
  of its own kind.
* A missing attribute (column absent from the batch, or a null value) satisfies no predicate on
  it except ``is_null``.  NaN is a value, not a null.
* NaN follows IEEE/Python comparison: a NaN event value satisfies only the ``!=`` predicates of
  numeric kind on its attribute (``nan != c`` is true for every c); a NaN constant is satisfied
  by nothing except as ``x != nan``, which every present numeric value satisfies.  ``IN`` is
  ``any(x == m)``, so NaN is never IN anything.  ``between`` with ``lo > hi`` is never satisfied.
* Interning is up to these semantics: ``1``, ``1.0`` and ``True`` are the same constant, and
  ``IN`` lists are compared as sets, so ``x in (1, 2)`` and ``x in (2, 1, 1)`` share one id;
  :meth:`PredicateIndex.pred` returns the form first added.

>>> idx = PredicateIndex()
>>> cheap = idx.add(Pred("price", "<", (10,)))
>>> ours = idx.add(Pred("movie", "in", ("groundhog day", "brazil")))
>>> sat = idx.evaluate({"price": [8, 12, None], "movie": ["brazil", "brazil", "alien"]})
>>> sorted(zip(sat.event.tolist(), sat.pid.tolist()))
[(0, 0), (0, 1), (1, 1)]
>>> sat.bitmap(0, 2).astype(int).tolist()
[[1, 1], [0, 1]]
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.shared.arrays import concat_ranges

__all__ = ["OPS", "Pred", "PredicateIndex", "Satisfied"]

_RAW_CACHE_LIMIT = 1 << 20  # raw predicate forms remembered by PredicateIndex.add

OPS = ("=", "!=", "<", "<=", ">", ">=", "between", "in", "is_null", "is_not_null")
_ARITY = {"=": 1, "!=": 1, "<": 1, "<=": 1, ">": 1, ">=": 1, "between": 2, "is_null": 0, "is_not_null": 0}
_RANGE_OPS = ("<", "<=", ">", ">=")
NUM, STR = "num", "str"      # the two value kinds
_KINDS = (NUM, STR)

_EMPTY_I = np.empty(0, dtype=np.int64)
_EMPTY_B = np.empty(0, dtype=bool)


class Pred(NamedTuple):
    """One predicate ``attr op value`` (001 §1.1).

    ``value``: ``(c,)`` for ``= != < <= > >=``; ``(lo, hi)`` inclusive for ``between``;
    ``(m1, m2, ...)`` for ``in``; ``()`` for ``is_null``.
    """

    attr: str
    op: str
    value: tuple


class _NaNKey:
    """Interning stand-in for NaN (NaN != NaN would defeat dict lookup)."""

    def __repr__(self) -> str:
        return "NaN"


_NAN_KEY = _NaNKey()


def _constant(c: Any) -> tuple[str, Any]:
    """(kind, comparable form) of one predicate constant: numbers -> float, str -> str."""
    if isinstance(c, (bool, np.bool_)):
        return NUM, float(c)
    if isinstance(c, (int, float, np.integer, np.floating)):
        return NUM, float(c)
    if isinstance(c, str):
        return STR, c
    raise TypeError(f"predicate constant must be a number or a string, got {type(c).__name__}: {c!r}")


def _interning_key(pred: Pred) -> tuple:
    def norm(c):
        kind, v = _constant(c)
        return _NAN_KEY if (kind == NUM and math.isnan(v)) else v

    if pred.op == "in":
        return (pred.attr, "in", frozenset(norm(c) for c in pred.value))
    return (pred.attr, pred.op, tuple(norm(c) for c in pred.value))


def _validated(pred: Pred) -> Pred:
    if not isinstance(pred, Pred):
        pred = Pred(*pred)
    attr, op, value = pred
    if not isinstance(attr, str):
        raise TypeError(f"predicate attribute must be a str, got {attr!r}")
    if op not in OPS:
        raise ValueError(f"unknown operator {op!r}; expected one of {OPS}")
    value = tuple(value)
    if op in _ARITY and len(value) != _ARITY[op]:
        raise ValueError(f"operator {op!r} takes {_ARITY[op]} constant(s), got {value!r}")
    for c in value:
        _constant(c)                                     # type check
    return Pred(attr, op, value)


# ---------------------------------------------------------------------------------------------
# vectorised range expansion


def _expand(rows: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the pairs (rows[i], k) for k in [starts[i], stops[i]).  Returns (rows, k)."""
    counts = stops - starts
    np.maximum(counts, 0, out=counts)
    total = int(counts.sum())
    if total == 0:
        return _EMPTY_I, _EMPTY_I
    return np.repeat(rows, counts), concat_ranges(starts, counts)


def _cross(rows: np.ndarray, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (row, pid) pair."""
    if rows.size == 0 or pids.size == 0:
        return _EMPTY_I, _EMPTY_I
    return np.repeat(rows, pids.size), np.tile(pids, rows.size)


# ---------------------------------------------------------------------------------------------
# per-attribute compiled tables


class _SortedConstants:
    """One operator's constants sorted ascending, with the predicate id of each entry, and
    their ``searchsorted`` positions precomputed for every value of the attribute's domain."""

    __slots__ = ("consts", "left", "pids", "right")

    def __init__(self, consts: list, pids: list, kind: str):
        c = np.array(consts, dtype=np.float64 if kind == NUM else object)
        p = np.array(pids, dtype=np.int64)
        order = np.argsort(c, kind="stable")
        self.consts, self.pids = c[order], p[order]

    def rank_against(self, domain: np.ndarray) -> None:
        """``left[d]``/``right[d]`` = ``searchsorted(consts, domain[d], side)``; entry
        ``len(domain)`` (a value above the whole domain) is ``len(consts)``."""
        n = np.array([self.consts.size], dtype=np.int64)
        self.left = np.concatenate([np.searchsorted(self.consts, domain, "left"), n])
        self.right = np.concatenate([np.searchsorted(self.consts, domain, "right"), n])

    def bounds(self, rank: np.ndarray, exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``searchsorted(consts, v, 'left')`` and ``..., 'right')`` for values of known rank."""
        lo = self.left[rank]
        return lo, np.where(exact, self.right[rank], lo)

    def __len__(self) -> int:
        return self.pids.size


class _StabbingTree:
    """Inclusive intervals ``[lo, hi]`` for stabbing queries: a segment tree over the
    attribute's *elementary classes* (001 §2.3 asks only for an index per operator; this is the
    interval one).

    With the attribute's sorted constant domain ``D``, a value of rank ``r`` (= ``searchsorted(D,
    v, 'left')``) falls in class ``2r + 1`` if it equals ``D[r]`` and ``2r`` otherwise (strictly
    between ``D[r-1]`` and ``D[r]``), so classes ``0 .. 2|D|`` partition the value line and
    ``[D[a], D[b]]`` is exactly the classes ``2a+1 .. 2b+1``.  Each interval is stored at its
    O(log |D|) canonical nodes; the intervals containing a value are those stored on its leaf's
    root path, so a query reports only hits (no candidate filtering).
    """

    __slots__ = ("height", "indptr", "n_leaves", "pids")

    def __init__(self, lows: list, highs: list, pids: list, kind: str, domain: np.ndarray):
        dt = np.float64 if kind == NUM else object
        a = np.searchsorted(domain, np.array(lows, dtype=dt), "left")
        b = np.searchsorted(domain, np.array(highs, dtype=dt), "left")
        pid = np.array(pids, dtype=np.int64)
        self.height = max(1, int(2 * domain.size + 1 - 1).bit_length())
        self.n_leaves = 1 << self.height
        left, right = self.n_leaves + 2 * a + 1, self.n_leaves + 2 * b + 2     # half-open
        nodes, owners = [], []
        while True:
            open_ = left < right
            if not open_.any():
                break
            take = open_ & (left & 1 == 1)
            nodes.append(left[take]); owners.append(pid[take])
            left = left + take
            take = open_ & (right & 1 == 1)
            right = right - take
            nodes.append(right[take]); owners.append(pid[take])
            left >>= 1
            right >>= 1
        node = np.concatenate(nodes) if nodes else _EMPTY_I
        owner = np.concatenate(owners) if owners else _EMPTY_I
        order = np.argsort(node, kind="stable")
        self.pids = owner[order]
        self.indptr = np.zeros(2 * self.n_leaves + 1, dtype=np.int64)
        np.cumsum(np.bincount(node, minlength=2 * self.n_leaves), out=self.indptr[1:])

    def stab(self, rows: np.ndarray, rank: np.ndarray, exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        leaf = self.n_leaves + 2 * rank + exact
        path = (leaf[:, None] >> np.arange(self.height + 1, dtype=np.int64)).ravel()
        ev, k = _expand(np.repeat(rows, self.height + 1), self.indptr[path], self.indptr[path + 1])
        return ev, self.pids[k]


class _KindTables:
    """Every predicate on one attribute whose constants are of one kind, compiled (001 §2.3).

    ``domain`` is the sorted set of all constants of all operators; a batch's values are ranked
    against it with ONE ``np.searchsorted`` (plus an equality test), after which every operator
    table's search positions are array gathers (precomputed per domain value): with no
    constant strictly between ``domain[r-1]`` and ``domain[r]``, a value ranked ``r`` that is
    not equal to ``domain[r]`` has both its positions equal to ``domain[r]``'s left position.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._raw: dict[str, list] = {op: [] for op in ("=", "!=", *_RANGE_OPS)}
        self._raw_between: list[tuple] = []
        self.ne_always: list[int] = []       # x != NaN: every present value of this kind

    def put(self, op: str, const, pid: int) -> None:
        self._raw[op].append((const, pid))

    def put_between(self, lo, hi, pid: int) -> None:
        self._raw_between.append((lo, hi, pid))

    def compile(self) -> _KindTables:
        kind = self.kind
        self.sorted: dict[str, _SortedConstants] = {}
        for op, entries in self._raw.items():
            if entries:
                self.sorted[op] = _SortedConstants([c for c, _ in entries], [p for _, p in entries], kind)
        tables = list(self.sorted.values())
        dt = np.float64 if kind == NUM else object
        ends = [np.array([e for lo, hi, _ in self._raw_between for e in (lo, hi)], dtype=dt)]
        self.between = None
        if tables or self._raw_between:
            self.domain = np.unique(np.concatenate([t.consts for t in tables] + ends))
            for t in tables:
                t.rank_against(self.domain)
            if self._raw_between:
                lows, highs, pids = zip(*self._raw_between)
                self.between = _StabbingTree(list(lows), list(highs), list(pids), kind, self.domain)
        self.ne_always_pids = np.array(sorted(self.ne_always), dtype=np.int64)
        self.ne_all_pids = (np.concatenate([self.sorted["!="].pids, self.ne_always_pids])
                            if "!=" in self.sorted else self.ne_always_pids)
        del self._raw, self._raw_between
        self.empty = not tables and self.between is None and self.ne_always_pids.size == 0
        return self

    def evaluate(self, rows: np.ndarray, values: np.ndarray, out: list, codes: np.ndarray | None = None) -> None:
        """Append (event rows, pids) for every predicate of this table satisfied by
        ``values`` (the present values of this kind; ``rows`` their event numbers).  With
        ``codes``, ``values`` are the distinct values and row i's value is ``values[codes[i]]``
        (dictionary-encoded strings: each distinct string is ranked once)."""
        if self.empty or rows.size == 0:
            return
        if self.kind == NUM:
            nan = np.isnan(values)
            if nan.any():
                out.append(_cross(rows[nan], self.ne_all_pids))      # NaN satisfies only !=
                rows, values = rows[~nan], values[~nan]
                if rows.size == 0:
                    return
        if self.ne_always_pids.size:
            out.append(_cross(rows, self.ne_always_pids))
        if not self.sorted and self.between is None:
            return
        n_rows, domain = rows.size, self.domain
        rank = np.searchsorted(domain, values, "left")
        exact = domain[np.minimum(rank, domain.size - 1)] == values
        exact &= rank < domain.size
        if codes is not None:
            rank, exact = rank[codes], exact[codes]
        zeros = np.zeros(n_rows, np.int64)
        for op, table in self.sorted.items():
            lo, hi = table.bounds(rank, exact)
            full = np.full(n_rows, len(table), np.int64)
            if op == "=":
                ev, k = _expand(rows, lo, hi)
            elif op == "!=":
                ev1, k1 = _expand(rows, zeros, lo)
                ev2, k2 = _expand(rows, hi, full)
                ev, k = np.concatenate([ev1, ev2]), np.concatenate([k1, k2])
            elif op == "<":                      # c > v: suffix
                ev, k = _expand(rows, hi, full)
            elif op == "<=":                     # c >= v: suffix
                ev, k = _expand(rows, lo, full)
            elif op == ">":                      # c < v: prefix
                ev, k = _expand(rows, zeros, lo)
            else:                                # ">=": c <= v: prefix
                ev, k = _expand(rows, zeros, hi)
            if ev.size:
                out.append((ev, table.pids[k]))
        if self.between is not None:
            out.append(self.between.stab(rows, rank, exact))


class _AttributeTables:
    """All live predicates on one attribute, compiled per value kind."""

    def __init__(self, preds: Iterable[tuple[int, Pred]]):
        tables = {kind: _KindTables(kind) for kind in _KINDS}
        is_null, not_null = [], []
        for pid, pred in preds:
            op = pred.op
            if op == "is_null":
                is_null.append(pid)
            elif op == "is_not_null":
                not_null.append(pid)
            elif op == "in":
                seen = set()
                for c in pred.value:
                    kind, v = _constant(c)
                    if kind == NUM and math.isnan(v):
                        continue
                    if (kind, v) not in seen:
                        seen.add((kind, v))
                        tables[kind].put("=", v, pid)
            elif op == "between":
                (k1, lo), (k2, hi) = _constant(pred.value[0]), _constant(pred.value[1])
                if k1 != k2 or (k1 == NUM and (math.isnan(lo) or math.isnan(hi))) or lo > hi:
                    continue                       # never satisfied
                tables[k1].put_between(lo, hi, pid)
            else:
                kind, v = _constant(pred.value[0])
                if kind == NUM and math.isnan(v):
                    if op == "!=":
                        tables[kind].ne_always.append(pid)
                    continue                       # = < <= > >= NaN: never satisfied
                tables[kind].put(op, v, pid)
        self.is_null_pids = np.array(sorted(is_null), dtype=np.int64)
        self.not_null_pids = np.array(sorted(not_null), dtype=np.int64)
        self.by_kind = {kind: t.compile() for kind, t in tables.items()}
        self.empty = self.is_null_pids.size == 0 and self.not_null_pids.size == 0 and \
            all(t.empty for t in self.by_kind.values())


# ---------------------------------------------------------------------------------------------
# event columns


class _Column:
    """One attribute of an event batch split by value kind."""

    __slots__ = ("null_rows", "num_rows", "num_values", "str_codes", "str_rows", "str_values")

    def __init__(self, null_rows, num_rows=_EMPTY_I, num_values=None, str_rows=_EMPTY_I, str_values=None,
                 str_codes=None):
        self.null_rows = null_rows
        self.num_rows, self.num_values = num_rows, num_values
        self.str_rows, self.str_values, self.str_codes = str_rows, str_values, str_codes

    def of_kind(self, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(rows, values, codes) of one kind; see :meth:`_KindTables.evaluate`."""
        if kind == NUM:
            return self.num_rows, self.num_values, None
        return self.str_rows, self.str_values, self.str_codes


def _arrow_column(arr: pa.Array) -> _Column:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_dictionary(t) and not (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        arr = arr.dictionary_decode()
        t = arr.type
    if arr.null_count:
        null = arr.is_null().to_numpy(zero_copy_only=False)
        null_rows = np.flatnonzero(null)
        present = np.flatnonzero(~null)
    else:
        null_rows = _EMPTY_I
        present = None
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t):
        if present is not None:
            arr = arr.drop_null()
        if pa.types.is_decimal(t):
            values = pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
        else:
            values = arr.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        rows = np.arange(len(values), dtype=np.int64) if present is None else present
        return _Column(null_rows, rows, values)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        # strings are dictionary-encoded so each distinct one is ranked once (object compares
        # are the expensive part); a dictionary column already is
        if present is not None:
            arr = arr.drop_null()
        encoded = arr if pa.types.is_dictionary(t) else pc.dictionary_encode(arr)
        rows = np.arange(len(arr), dtype=np.int64) if present is None else present
        return _Column(null_rows, str_rows=rows,
                       str_values=encoded.dictionary.to_numpy(zero_copy_only=False),
                       str_codes=encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False))
    if pa.types.is_null(t):
        return _Column(np.arange(len(arr), dtype=np.int64))
    return _Column(null_rows)                    # other types: present but never comparable


def _python_column(values: list) -> _Column:
    """Fallback for a dict column holding mixed Python values (not one Arrow type)."""
    null_rows, num_rows, num_values, str_rows, str_values = [], [], [], [], []
    for i, v in enumerate(values):
        if v is None:
            null_rows.append(i)
        elif isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
            num_rows.append(i)
            num_values.append(float(v))
        elif isinstance(v, str):
            str_rows.append(i)
            str_values.append(v)
    return _Column(np.array(null_rows, dtype=np.int64), np.array(num_rows, dtype=np.int64),
                   np.array(num_values, dtype=np.float64), np.array(str_rows, dtype=np.int64),
                   np.array(str_values, dtype=object))


class _EventBatch:
    """Uniform column access over a pyarrow Table / RecordBatch or a dict of columns."""

    def __init__(self, events):
        if isinstance(events, (pa.Table, pa.RecordBatch)):
            self.n_events = events.num_rows
            self._names = set(events.schema.names)
            self._get = events.column
        elif isinstance(events, dict):
            lengths = {len(v) for v in events.values()}
            if len(lengths) > 1:
                raise ValueError(f"event columns have different lengths: {sorted(lengths)}")
            self.n_events = lengths.pop() if lengths else 0
            self._names = set(events)
            self._get = events.__getitem__
        else:
            raise TypeError(f"events must be a pyarrow Table/RecordBatch or a dict of columns, "
                            f"got {type(events).__name__}")

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def column(self, name: str) -> _Column:
        col = self._get(name)
        if isinstance(col, (pa.Array, pa.ChunkedArray)):
            return _arrow_column(col)
        try:
            return _arrow_column(pa.array(col))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
            return _python_column(list(col))


# ---------------------------------------------------------------------------------------------
# public API


class Satisfied:
    """Phase-1 result for a batch: every satisfied (event, predicate) pair (001 §2.2).

    ``event`` and ``pid`` are int64 arrays of equal length, sorted by event (within one event
    the pids are in no particular order).  ``capacity`` is the index's id capacity at
    evaluation time, the width of :meth:`bitmap`.
    """

    __slots__ = ("capacity", "event", "n_events", "pid")

    def __init__(self, n_events: int, event: np.ndarray, pid: np.ndarray, capacity: int):
        self.n_events, self.event, self.pid, self.capacity = n_events, event, pid, capacity

    def __len__(self) -> int:
        return self.event.size

    def bitmap(self, start: int, stop: int) -> np.ndarray:
        """The predicate bit vectors of events ``start .. stop-1``: bool ``[stop-start, capacity]``."""
        start, stop = max(0, start), min(self.n_events, stop)
        out = np.zeros((max(0, stop - start), self.capacity), dtype=bool)
        if stop > start:
            lo, hi = np.searchsorted(self.event, [start, stop], "left")
            out[self.event[lo:hi] - start, self.pid[lo:hi]] = True
        return out

    def __repr__(self) -> str:
        return f"Satisfied(n_events={self.n_events}, pairs={self.event.size}, capacity={self.capacity})"


class PredicateIndex:
    """Interns distinct predicates to dense int ids and evaluates them all for a batch (001 §2.2).

    Ids are reference counted: :meth:`add` of an already-interned predicate returns its id and
    bumps the count, :meth:`release` drops one reference and frees the id at zero; freed ids are
    reused smallest first, so ids stay dense and :attr:`capacity` (1 + the largest id ever handed
    out) sizes the predicate bit vector.

    One compiled index per attribute (see the module docstring), rebuilt lazily at the next
    :meth:`evaluate` after that attribute's predicates changed.
    """

    def __init__(self) -> None:
        self._pid_of_key: dict[tuple, int] = {}
        self._key_of_raw: dict = {}  # raw Pred as given -> its interning key (see add)
        self._preds: list[Pred | None] = []
        self._keys: list[tuple | None] = []
        self._refs: list[int] = []
        self._free: list[int] = []                          # min-heap of freed ids
        self._pids_by_attr: dict[str, set[int]] = {}
        self._compiled: dict[str, _AttributeTables] = {}
        self._dirty: set[str] = set()

    # -- interning -----------------------------------------------------------------------
    def add(self, pred: Pred, count: int = 1) -> int:
        """Intern ``pred`` (``count`` more references); returns its id."""
        # Fast path: millions of subscriptions share few distinct predicates (001 §6.1's W0 has
        # 32 x 35), so remember each raw form's interning key and skip re-validating it.
        raw = pred
        try:
            key = self._key_of_raw.get(raw)
        except TypeError:  # an unhashable constant: the slow path validates (and rejects) it
            key = None
        if key is not None:
            pid = self._pid_of_key.get(key)
            if pid is not None:
                self._refs[pid] += count
                return pid
        pred = _validated(pred)
        key = _interning_key(pred)
        if len(self._key_of_raw) >= _RAW_CACHE_LIMIT:
            self._key_of_raw.clear()
        try:
            self._key_of_raw[raw] = key
        except TypeError:  # a list for a tuple: valid, but not hashable as given
            pass
        pid = self._pid_of_key.get(key)
        if pid is not None:
            self._refs[pid] += count
            return pid
        if self._free:
            pid = heapq.heappop(self._free)
            self._preds[pid], self._keys[pid], self._refs[pid] = pred, key, count
        else:
            pid = len(self._preds)
            self._preds.append(pred)
            self._keys.append(key)
            self._refs.append(count)
        self._pid_of_key[key] = pid
        self._pids_by_attr.setdefault(pred.attr, set()).add(pid)
        self._dirty.add(pred.attr)
        return pid

    def release(self, pid: int, count: int = 1) -> None:
        """Drop ``count`` references to ``pid``; the id is freed (and later reused) at zero."""
        pid = int(pid)
        if not (0 <= pid < len(self._preds)) or self._preds[pid] is None:
            raise KeyError(f"predicate id {pid} is not live")
        if count > self._refs[pid]:
            raise ValueError(f"predicate id {pid} has {self._refs[pid]} references, not {count}")
        self._refs[pid] -= count
        if self._refs[pid]:
            return
        pred, key = self._preds[pid], self._keys[pid]
        del self._pid_of_key[key]
        self._preds[pid] = self._keys[pid] = None
        attr_pids = self._pids_by_attr[pred.attr]
        attr_pids.discard(pid)
        if not attr_pids:
            del self._pids_by_attr[pred.attr]
        self._dirty.add(pred.attr)
        heapq.heappush(self._free, pid)

    def pred(self, pid: int) -> Pred:
        """The predicate interned as ``pid`` (as first added)."""
        pid = int(pid)
        p = self._preds[pid] if 0 <= pid < len(self._preds) else None
        if p is None:
            raise KeyError(f"predicate id {pid} is not live")
        return p

    def refcount(self, pid: int) -> int:
        self.pred(pid)
        return self._refs[int(pid)]

    @property
    def capacity(self) -> int:
        """1 + the largest id ever handed out: the width of a dense predicate bit vector."""
        return len(self._preds)

    def __len__(self) -> int:
        return len(self._pid_of_key)

    def __contains__(self, pred: Pred) -> bool:
        return _interning_key(_validated(pred)) in self._pid_of_key

    def pid_of(self, pred: Pred) -> int | None:
        """The id of ``pred`` if interned, else None (no reference taken)."""
        return self._pid_of_key.get(_interning_key(_validated(pred)))

    @property
    def attributes(self) -> list[str]:
        return sorted(self._pids_by_attr)

    # -- phase 1 -------------------------------------------------------------------------
    def _tables(self) -> dict[str, _AttributeTables]:
        for attr in self._dirty:
            pids = self._pids_by_attr.get(attr)
            if pids:
                self._compiled[attr] = _AttributeTables((pid, self._preds[pid]) for pid in pids)
            else:
                self._compiled.pop(attr, None)
        self._dirty.clear()
        return self._compiled

    def evaluate(self, events) -> Satisfied:
        """Every (event, predicate) pair satisfied in the batch (001 §2.2, Figure 2 step 1).

        ``events``: a pyarrow Table or RecordBatch, or a dict ``attr -> column`` (Arrow arrays,
        numpy arrays or lists; a list mixing numbers and strings is allowed).
        """
        batch = _EventBatch(events)
        n = batch.n_events
        out: list[tuple[np.ndarray, np.ndarray]] = []
        if n:
            all_rows = None
            for attr, tables in self._tables().items():
                if tables.empty:
                    continue
                if attr not in batch:
                    if tables.is_null_pids.size:
                        if all_rows is None:
                            all_rows = np.arange(n, dtype=np.int64)
                        out.append(_cross(all_rows, tables.is_null_pids))
                    continue
                col = batch.column(attr)
                if tables.is_null_pids.size:
                    out.append(_cross(col.null_rows, tables.is_null_pids))
                if tables.not_null_pids.size:
                    present = np.setdiff1d(np.arange(n, dtype=np.int64), col.null_rows, assume_unique=True)
                    out.append(_cross(present, tables.not_null_pids))
                for kind, kind_tables in tables.by_kind.items():
                    rows, values, codes = col.of_kind(kind)
                    kind_tables.evaluate(rows, values, out, codes)
        out = [pair for pair in out if pair[0].size]
        if not out:
            return Satisfied(n, _EMPTY_I, _EMPTY_I, self.capacity)
        event = np.concatenate([e for e, _ in out]) if len(out) > 1 else out[0][0]
        pid = np.concatenate([p for _, p in out]) if len(out) > 1 else out[0][1]
        if event.size > 1 and not (event[1:] >= event[:-1]).all():
            order = np.argsort(event, kind="stable")
            event, pid = event[order], pid[order]
        return Satisfied(n, event, pid, self.capacity)
