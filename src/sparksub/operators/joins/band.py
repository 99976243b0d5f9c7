"""Continuous band joins: BJ-SSI and the baselines BJ-QOuter, BJ-DOuter, BJ-MJ (pure core, no pyspark).

Issue 5 item 3, the BAND_JOIN class of ``DESIGN.md`` §3.  Builds on :mod:`sparksub.operators.shared.ssi` (the stabbing
partition and its dynamic maintenance); the router (issue 5 item 6) and the Spark wrapper come later.

Source
------
003 = the dissertation, chapter 4 ([AXYY06]).  §4.3 (the two query types), §4.3.1 "Band Joins" (previous
approaches, "The SSI approach", Figure 4.4, Theorem 14, "SSI + hotspot-tracking"), §4.2.1 (the SSI framework),
§4.2.3 (dynamic stabbing partition), §4.6.4 / Figure 4.10 and §4.6.5 / Figure 4.11 (experiments).

Definitions (003 §4.3, §4.3.1)
------------------------------
Relations R(A, B) and S(B, C).  A continuous band join is

    q_i  =  R ⋈_{S.B − R.B ∈ rangeB_i} S,        rangeB_i = [lo_i, hi_i]  (a closed range, 003 §4.3)

so the pair (r, s) is in q_i's result iff ``lo_i <= s.b − r.b <= hi_i``.  When a new R-tuple r arrives, the
task is to find the queries whose results r changes and their new result tuples (r, s); a new S-tuple is
symmetric (003 §4.3.1, first paragraph).  Ranges may be negative, degenerate (lo = hi) or half-infinite.

Local selections.  §4.3.1 defines band joins without them; Example 2 of §4.3 (``σ_{model='BB'} Unit ⋈
σ_{type='surface'} Target``) and ``DESIGN.md`` ("+ local selections") add optional conjunctions of closed
ranges on attributes of R and S: ``r_where={"a": (lo, hi)}``, ``s_where={"c": (lo, hi)}`` (equality is
``(v, v)``; values compared with ``<=``; a missing or None attribute fails the selection, as SQL's NULL does).
The paper gives no band-join algorithm that uses them, so every algorithm applies them as filters after the
band: a query whose selection rejects the incoming tuple is skipped once it is visited, and a candidate pair
whose other tuple fails the other selection is dropped.

Previous approaches (003 §4.3.1, after PSoup [CF03b])
------------------------------------------------------
"Instantiate" each band with the incoming r: the selections ``S.B ∈ rangeB_i + r.B``, joined with S.

* **BJ-QOuter** (:class:`BJQOuter`): queries are the outer relation; for each query one search of the ordered
  index on S(B) and a leaf scan over the tuples in its instantiated range.  O(n log m + k).
* **BJ-DOuter** (:class:`BJDOuter`): data is the outer relation; for each S-tuple s one probe of an index on
  the ranges {rangeB_i} for the ranges containing s.B − r.B.  The paper names a priority search tree or an
  external interval tree; here a centred interval tree ([Ede80]; :class:`_IntervalTree`), O(log n + k_s) per
  probe.  O(m log n + k).
* **BJ-MJ** (:class:`BJMJ`): merge join of the intervals {rangeB_i + r.B}, kept sorted by left end (adding r.B
  keeps the order), with S in S.B order (the leaf level of the index).  O(m + n + k).

The SSI approach, BJ-SSI (:class:`BJSSI`; 003 §4.3.1, Figure 4.4)
-----------------------------------------------------------------
An SSI (§4.2.1) on the ranges {rangeB_i}: a stabbing partition 𝓘 = {I_1..I_τ} with stabbing points p_j (kept in
a search tree), and per group two sorted sequences, I_j^l by increasing left end and I_j^r by decreasing right
end.  For a new R-tuple r with r.B = b, per group j:

* STEP 1: one B-tree lookup at p_j + b finds the adjacent S-tuples s1, s2 with s1.B − b < p_j <= s2.B − b.
  (1) Scan I_j^l up to the first range with left end > s1.B − b: every range before it contains s1.B − b
  (it also contains p_j).  (2) Scan I_j^r up to the first range with right end < s2.B − b: every range before
  it contains s2.B − b.  Ranges in neither fall strictly between s1.B − b and s2.B − b, where no S-tuple is:
  they gain nothing.  (If s2.B − b = p_j the second scan takes the whole group: the paper's "coincides" case.)
* STEP 2: each affected range covers a run of consecutive S-tuples containing s1 or s2; walk the S index from
  p_j + b in both directions, stopping at the first S.B value outside the range.

Theorem 14: O(τ log m + k) per incoming tuple; BJ-SSI reads a query only if it gains a result or ends a scan
(<= 2 per group) and an S-tuple only if it is in a result or is s1 / s2 (<= 2 per group).

Implementation notes and deviations
-----------------------------------
* **Exact predicate.**  The predicate is ``lo <= s.b − r.b <= hi`` evaluated in float64, the same whichever
  tuple arrives and in the oracle.  The index is searched at ``lo + r.b`` (the instantiated range), which can
  differ from the predicate by a rounding step, so every boundary found by a search is fixed up by reading the
  neighbouring keys with the exact predicate (``_lower_bound``).  ``s.b − r.b`` is monotone in s.b, so the
  result of every query is still one contiguous run of the index.
* **One SSI for both directions.**  For a new S-tuple s the paper uses an SSI on the mirrored ranges
  [−hi_i, −lo_i] over an index on R(B).  Its stabbing partition is the mirror of ours (same groups, same τ,
  points −p_j) and its two sorted sequences are ours with their roles swapped.  We keep the SSI once and
  mirror the *data* instead: the R index is keyed by −r.B, so for either direction the difference is
  ``key + base`` (``base = −r.B`` probing S, ``base = s.B`` probing R) and the same ranges, groups, points
  and sequences serve both; the work is identical to two mirrored SSIs, the space and the maintenance half.
* **Dynamic partition** (003 §4.2.3): the groups are those of a :class:`~sparksub.operators.shared.ssi.
  DynamicStabbingPartition` (size <= (1+ε)·τ(I) after every operation, Lemma 12 + refinements); BJ-SSI follows
  it group by group (a reconstruction rebuilds only the groups whose ids it changed,
  :attr:`~sparksub.operators.shared.ssi.DynamicStabbingPartition.last_rebuild`) and reads the current stabbing points
  from it.  :meth:`BandJoinProcessor.add_queries` bulk-loads and starts from the canonical partition (Lemma 10).
* **Sorted structures.**  The data indexes are ``SortedList`` s of (key, slot) (B-tree-like: O(log m) search
  and update); the per-group sequences I_j^l / I_j^r (and the interval-tree node lists of BJ-DOuter and the
  window list of BJ-MJ, left ends only) are sorted Python lists searched with ``bisect``: a scan "up to the
  first range with left end > x" is one bisection whose length is counted as the scan's work.  (An insertion
  into them moves O(group size) pointers in C; at 100,000 queries in 5 groups that is ~10 µs.)
* **STEP 2 shared per group.**  The paper walks from p_j + b once per affected query; we walk once per group
  and side, serving the affected queries in order of decreasing reach, so the walk reads each S-tuple of the
  group's widest result once (same output, cost O(|affected| + widest result + 2)).
* **Deletions report too.**  The paper treats insertions; :meth:`~BandJoinProcessor.delete_r` /
  :meth:`~BandJoinProcessor.delete_s` report the pairs that leave each result, found by the same probe.
* **Output.**  ``output="pairs"`` (default): {query id: [(r id, s id), ...]} with the R id first in both
  directions; ``output="count"``: {query id: number of new pairs} (the algorithms find the same pairs but do not
  build them: the paper's throughput figures exclude output time, §4.6).  Queries that gain nothing are absent.
* **Counters** (:attr:`BandJoinProcessor.counters`) measure work independently of the machine: ``events``,
  ``data_probes`` (searches of a data index), ``query_probes`` (searches of a query index: BJ-DOuter's
  interval tree), ``tuples_scanned`` (data-index entries read after a search), ``queries_scanned`` (query
  entries read), ``affected`` and ``pairs`` (the output, k).  ``work`` = probes + entries scanned.

Measured (``bench/joins_smoke.py``, a smoke run, not the benchmark; 2 shared cores, load ~2): |R| = |S| =
100,000 (Table 4.1 shapes, continuous values), queries in 5 stabbing groups, R-tuples per second with
``output="count"`` (BJ-SSI also with pairs built); k = new pairs per event.

================  =============  ======  ======  ==========  =========  =========  =====
band width w       queries        k       BJ-SSI  BJ-SSI/prs  BJ-QOuter  BJ-DOuter  BJ-MJ
================  =============  ======  ======  ==========  =========  =========  =====
0.0005             1,000          8       22,700  21,900      315        7.1        47
0.0005             10,000         85      13,900  8,100       30         6.5        29
0.0005             100,000        810     1,300   450         3.4        5.8        8.3
0.01               100,000        15,000  136     33          3.0        4.9        8.1
================  =============  ======  ======  ==========  =========  =========  =====

BJ-SSI does τ = 5 data-index lookups per event whatever the number of queries; its time follows k (Theorem
14), which here grows with the number of queries because they share 5 clusters.  BJ-QOuter falls linearly in
n, BJ-DOuter stays near 6/s (m = 100,000 probes), BJ-MJ pays O(m + n) (§4.6.4, Figure 4.10(i)).

Left out: hotspot tracking (BJ-SSI on the α-hotspots, a baseline on the scattered ranges, 003 §4.3.1 "SSI +
hotspot-tracking") and the choice between plans, which belong to the router of issue 5 item 6; the refined
O(ε⁻¹ log n) reconstruction of [AXYY06] (see :mod:`~sparksub.operators.shared.ssi`).

Errors: a bad band or selection raises :class:`~sparksub.errors.InvalidSubscription`, a duplicate query id
:class:`~sparksub.errors.DuplicateSubscription`, an unknown one :class:`~sparksub.errors.UnknownSubscription`;
a duplicate or unknown tuple id or a non-finite join value :class:`~sparksub.errors.BadUpdate`.

>>> bj = BJSSI()
>>> bj.add_query("near", -1, 1); bj.add_query("ahead", 2, 5)
>>> bj.load_s([("s1", 10.0), ("s2", 12.0), ("s3", 20.0)])
>>> bj.insert_r("r1", 9.5)
{'near': [('r1', 's1')], 'ahead': [('r1', 's2')]}
>>> bj.insert_s("s4", 10.5)
{'near': [('r1', 's4')]}
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from typing import Hashable, NamedTuple

from sortedcontainers import SortedList

from sparksub.errors import BadUpdate, DuplicateSubscription, InvalidSubscription, UnknownSubscription
from sparksub.operators.shared.ssi import DynamicStabbingPartition

__all__ = ["BandQuery", "BandJoinProcessor", "BJSSI", "BJQOuter", "BJDOuter", "BJMJ", "ALGORITHMS"]

_INF = math.inf
_R, _S = 0, 1  # direction = the table of the incoming tuple; also the index of its selection in BandQuery.where


class BandQuery(NamedTuple):
    """One continuous band join (003 §4.3): ``S.B − R.B ∈ [lo, hi]``, optional local selections.

    ``r_where`` / ``s_where``: tuples of (attribute, lo, hi), a conjunction of closed ranges (empty = none)."""

    qid: Hashable
    lo: float
    hi: float
    r_where: tuple = ()
    s_where: tuple = ()


class _Query:
    """A registered query with its internal slot (a dense int: ids may be any hashable) and selections by
    direction (``where[_R]`` applies to R-tuples, ``where[_S]`` to S-tuples)."""

    __slots__ = ("qid", "slot", "lo", "hi", "where")

    def __init__(self, qid, slot: int, lo: float, hi: float, r_where: tuple, s_where: tuple):
        self.qid = qid
        self.slot = slot
        self.lo = lo
        self.hi = hi
        self.where = (r_where, s_where)

    def public(self) -> BandQuery:
        return BandQuery(self.qid, self.lo, self.hi, self.where[_R], self.where[_S])


# --------------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------------
def _band(lo, hi) -> tuple[float, float]:
    try:
        lo = float(lo)
        hi = float(hi)
    except (TypeError, ValueError) as e:
        raise InvalidSubscription(f"band ends must be numbers: [{lo!r}, {hi!r}]") from e
    if lo != lo or hi != hi:
        raise InvalidSubscription(f"NaN band end: [{lo}, {hi}]")
    if lo > hi:
        raise InvalidSubscription(f"empty band: lo {lo} > hi {hi}")
    if lo == _INF or hi == -_INF:
        raise InvalidSubscription(f"band [{lo}, {hi}] contains no real difference")
    return lo, hi


def _where(where, table: str) -> tuple:
    if not where:
        return ()
    if not isinstance(where, Mapping):
        raise InvalidSubscription(f"{table} selection must be a mapping attribute -> (lo, hi)")
    out = []
    for col, rng in where.items():
        try:
            lo, hi = rng
            ok = lo <= hi
        except (TypeError, ValueError) as e:
            raise InvalidSubscription(f"{table}.{col}: bad range {rng!r}") from e
        if not ok:  # also catches NaN
            raise InvalidSubscription(f"{table}.{col}: empty range {rng!r}")
        out.append((col, lo, hi))
    return tuple(out)


def _as_mapping(where):
    """A selection given as a mapping or as BandQuery's (attribute, lo, hi) triples, as a mapping."""
    if not where or isinstance(where, Mapping):
        return where or None
    try:
        return {c: (a, b) for c, a, b in where}
    except (TypeError, ValueError) as e:
        raise InvalidSubscription(f"bad selection {where!r}") from e


def _passes(where: tuple, attrs) -> bool:
    """Local selection: every conjunct holds; a missing / None attribute fails (SQL NULL)."""
    if attrs is None:
        return False
    for col, lo, hi in where:
        v = attrs.get(col)
        if v is None or not (lo <= v <= hi):
            return False
    return True


def _value(v, what: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError) as e:
        raise BadUpdate(f"{what}: join value {v!r} is not a number") from e
    if not math.isfinite(f):
        raise BadUpdate(f"{what}: join value {v!r} is not finite")
    return f


# --------------------------------------------------------------------------------------------------------------
# The data indexes: R(B) and S(B) (003 §4.3.1: "a B-tree index on S(B)")
# --------------------------------------------------------------------------------------------------------------
class _DataIndex:
    """Sorted (key, slot) pairs of one table, key = sign · B (S: +1, R: −1, so that for either direction the
    join difference S.B − R.B is ``key + base``, monotone in the key; module docstring).  Slots come from a
    counter (ties keep arrival order); ``rows[slot] = (id, B, attrs)``."""

    __slots__ = ("name", "sign", "keys", "slot_of", "rows", "_next")

    def __init__(self, name: str, sign: float):
        self.name = name
        self.sign = sign
        self.keys = SortedList()
        self.slot_of: dict = {}
        self.rows: dict[int, tuple] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self.slot_of)

    def add(self, tid, b, attrs) -> None:
        if tid in self.slot_of:
            raise BadUpdate(f"{self.name} tuple id {tid!r} is already present")
        b = _value(b, f"{self.name} tuple {tid!r}")
        if attrs is not None and not isinstance(attrs, Mapping):
            raise BadUpdate(f"{self.name} tuple {tid!r}: attributes must be a mapping")
        slot = self._next
        self._next += 1
        self.slot_of[tid] = slot
        self.rows[slot] = (tid, b, attrs)
        self.keys.add((self.sign * b, slot))

    def add_many(self, rows) -> None:
        new = []
        for row in rows:
            tid, b, *rest = row
            attrs = rest[0] if rest else None
            if attrs is not None and not isinstance(attrs, Mapping):
                raise BadUpdate(f"{self.name} tuple {tid!r}: attributes must be a mapping")
            if tid in self.slot_of:
                raise BadUpdate(f"{self.name} tuple id {tid!r} is already present")
            b = _value(b, f"{self.name} tuple {tid!r}")
            slot = self._next
            self._next += 1
            self.slot_of[tid] = slot
            self.rows[slot] = (tid, b, attrs)
            new.append((self.sign * b, slot))
        self.keys.update(new)

    def get(self, tid) -> tuple[int, float, object]:
        slot = self.slot_of.get(tid)
        if slot is None:
            raise BadUpdate(f"unknown {self.name} tuple id {tid!r}")
        _, b, attrs = self.rows[slot]
        return slot, b, attrs

    def remove(self, tid) -> None:
        slot = self.slot_of.pop(tid)
        _, b, _ = self.rows.pop(slot)
        self.keys.remove((self.sign * b, slot))


def _lower_bound(keys: SortedList, base: float, t: float) -> tuple[int, float | None, float | None]:
    """(pos, d_below, d_at): pos = the first position whose difference ``key + base`` is >= t; d_below / d_at
    the differences of the entries at pos − 1 / pos (None past an end).

    The search key t − base may round differently from the predicate key + base >= t; the difference is
    monotone in the key, so reading the neighbours and moving over whole runs of equal keys fixes it."""
    n = len(keys)
    pos = keys.bisect_left((t - base, -_INF))
    below = at = None
    while pos > 0:
        k = keys[pos - 1][0]
        below = k + base
        if below < t:
            break
        pos = keys.bisect_left((k, -_INF))
        below = None
    while pos < n:
        k = keys[pos][0]
        at = k + base
        if at >= t:
            break
        below = at
        pos = keys.bisect_right((k, _INF))
        at = None
    return pos, below, at


def _upper_bound(keys: SortedList, base: float, t: float) -> int:
    """The first position whose difference ``key + base`` is > t (fixed up as in :func:`_lower_bound`)."""
    n = len(keys)
    pos = keys.bisect_right((t - base, _INF))
    while pos > 0:
        k = keys[pos - 1][0]
        if k + base <= t:
            break
        pos = keys.bisect_left((k, -_INF))
    while pos < n:
        k = keys[pos][0]
        if k + base > t:
            break
        pos = keys.bisect_right((k, _INF))
    return pos


# --------------------------------------------------------------------------------------------------------------
# Sorted sequences of ranges: the two sequences I_j^l, I_j^r of an SSI group (003 §4.3.1), reused by the
# interval tree of BJ-DOuter and the window list of BJ-MJ
# --------------------------------------------------------------------------------------------------------------
class _SortedBands:
    """Ranges by increasing left end (``lo_keys`` / ``lo_slots``) and by decreasing right end (``nhi_keys`` =
    −hi increasing / ``nhi_slots``), as parallel sorted lists.  ``right=False`` keeps the left-end order only
    (BJ-MJ's window list)."""

    __slots__ = ("lo_keys", "lo_slots", "nhi_keys", "nhi_slots", "right")

    def __init__(self, items: Iterable[tuple[int, float, float]] = (), *, right: bool = True):
        items = list(items)
        by_lo = sorted((lo, s) for s, lo, hi in items)
        by_hi = sorted((-hi, s) for s, lo, hi in items) if right else []
        self.right = right
        self.lo_keys = [k for k, _ in by_lo]
        self.lo_slots = [s for _, s in by_lo]
        self.nhi_keys = [k for k, _ in by_hi]
        self.nhi_slots = [s for _, s in by_hi]

    def __len__(self) -> int:
        return len(self.lo_keys)

    def add(self, slot: int, lo: float, hi: float) -> None:
        i = bisect_right(self.lo_keys, lo)
        self.lo_keys.insert(i, lo)
        self.lo_slots.insert(i, slot)
        if self.right:
            i = bisect_right(self.nhi_keys, -hi)
            self.nhi_keys.insert(i, -hi)
            self.nhi_slots.insert(i, slot)

    def remove(self, slot: int, lo: float, hi: float) -> None:
        i = self.lo_slots.index(slot, bisect_left(self.lo_keys, lo), bisect_right(self.lo_keys, lo))
        del self.lo_keys[i]
        del self.lo_slots[i]
        if self.right:
            i = self.nhi_slots.index(slot, bisect_left(self.nhi_keys, -hi), bisect_right(self.nhi_keys, -hi))
            del self.nhi_keys[i]
            del self.nhi_slots[i]

    def slots(self) -> set:
        return set(self.lo_slots)


# --------------------------------------------------------------------------------------------------------------
# The common interface
# --------------------------------------------------------------------------------------------------------------
class BandJoinProcessor:
    """A set of continuous band joins over R and S with one plan for processing incoming tuples.

    Queries: :meth:`add_query`, :meth:`add_queries` (bulk), :meth:`remove_query`.  Data: :meth:`load_r` /
    :meth:`load_s` (initial contents, nothing reported), :meth:`insert_r` / :meth:`insert_s` (report the new
    result pairs of every affected query), :meth:`delete_r` / :meth:`delete_s` (report the pairs that leave).
    :meth:`result` recomputes one query's whole current result (for a new subscriber's snapshot and tests).
    Subclasses implement ``_probe`` (and maintain their query structures in ``_on_add`` / ``_on_remove``).
    """

    name = "band-join"

    def __init__(self, *, output: str = "pairs"):
        if output not in ("pairs", "count"):
            raise ValueError("output must be 'pairs' or 'count'")
        self.output = output
        self._queries: dict = {}  # qid -> _Query
        self._by_slot: dict[int, _Query] = {}
        self._qid_of: dict[int, Hashable] = {}  # slot -> qid
        self._selective = 0  # queries with a local selection (none: the algorithms skip the filters)
        self._next_slot = 0
        self.r_index = _DataIndex("R", -1.0)
        self.s_index = _DataIndex("S", 1.0)
        self.counters: dict[str, int] = {}
        self.reset_counters()

    # ---- counters ---------------------------------------------------------------------------------------------
    COUNTERS = ("events", "data_probes", "query_probes", "tuples_scanned", "queries_scanned", "affected", "pairs")

    def reset_counters(self) -> None:
        self.counters = dict.fromkeys(self.COUNTERS, 0)

    @property
    def work(self) -> int:
        """Index probes plus index entries read (data and queries): the machine-independent cost."""
        c = self.counters
        return c["data_probes"] + c["query_probes"] + c["tuples_scanned"] + c["queries_scanned"]

    # ---- queries ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._queries)

    def __contains__(self, qid) -> bool:
        return qid in self._queries

    def query(self, qid) -> BandQuery:
        q = self._queries.get(qid)
        if q is None:
            raise UnknownSubscription(f"unknown band-join query {qid!r}")
        return q.public()

    def queries(self) -> list[BandQuery]:
        return [q.public() for q in self._queries.values()]

    def _make(self, qid, lo, hi, r_where, s_where) -> _Query:
        if qid in self._queries:
            raise DuplicateSubscription(f"band-join query {qid!r} is already registered")
        lo, hi = _band(lo, hi)
        q = _Query(qid, self._next_slot, lo, hi, _where(r_where, "R"), _where(s_where, "S"))
        self._next_slot += 1
        return q

    def _register(self, q: _Query) -> None:
        self._queries[q.qid] = q
        self._by_slot[q.slot] = q
        self._qid_of[q.slot] = q.qid
        self._selective += bool(q.where[_R] or q.where[_S])

    def add_query(self, qid: Hashable, lo: float, hi: float, *, r_where: Mapping | None = None,
                  s_where: Mapping | None = None) -> None:
        """Register ``S.B − R.B ∈ [lo, hi]`` (optionally with local selections).  Reports nothing: the current
        result is :meth:`result`."""
        q = self._make(qid, lo, hi, r_where, s_where)
        self._register(q)
        self._on_add(q)

    def add_queries(self, queries) -> None:
        """Bulk registration: a mapping qid -> (lo, hi), or an iterable of :class:`BandQuery` / (qid, lo, hi)
        tuples.  All or nothing on a bad query."""
        items = queries.items() if isinstance(queries, Mapping) else queries
        made = []
        seen = set()
        for item in items:
            if isinstance(queries, Mapping):
                qid, (lo, hi) = item
                rw = sw = None
            else:
                qid, lo, hi, *rest = item
                rw = _as_mapping(rest[0]) if rest else None
                sw = _as_mapping(rest[1]) if len(rest) > 1 else None
            if qid in seen:
                raise DuplicateSubscription(f"band-join query {qid!r} is given twice")
            seen.add(qid)
            made.append(self._make(qid, lo, hi, rw, sw))
        for q in made:
            self._register(q)
        self._on_add_many(made)

    def remove_query(self, qid: Hashable) -> None:
        q = self._queries.pop(qid, None)
        if q is None:
            raise UnknownSubscription(f"unknown band-join query {qid!r}")
        del self._by_slot[q.slot]
        del self._qid_of[q.slot]
        self._selective -= bool(q.where[_R] or q.where[_S])
        self._on_remove(q)

    def _on_add(self, q: _Query) -> None:
        pass

    def _on_add_many(self, qs: list[_Query]) -> None:
        for q in qs:
            self._on_add(q)

    def _on_remove(self, q: _Query) -> None:
        pass

    # ---- data -------------------------------------------------------------------------------------------------
    def load_r(self, rows: Iterable) -> None:
        """Bulk-load R with (id, B) or (id, B, attrs) rows; nothing is reported."""
        self.r_index.add_many(rows)

    def load_s(self, rows: Iterable) -> None:
        """Bulk-load S with (id, B) or (id, B, attrs) rows; nothing is reported."""
        self.s_index.add_many(rows)

    def insert_r(self, rid: Hashable, b: float, attrs: Mapping | None = None) -> dict:
        """Insert R-tuple ``rid`` with R.B = b; return {query id: new pairs [(rid, sid), ...]} (or counts)."""
        self.r_index.add(rid, b, attrs)
        _, b, attrs = self.r_index.get(rid)
        return self._event(_R, rid, b, attrs)

    def insert_s(self, sid: Hashable, b: float, attrs: Mapping | None = None) -> dict:
        """Insert S-tuple ``sid`` with S.B = b; return {query id: new pairs [(rid, sid), ...]} (or counts)."""
        self.s_index.add(sid, b, attrs)
        _, b, attrs = self.s_index.get(sid)
        return self._event(_S, sid, b, attrs)

    def delete_r(self, rid: Hashable) -> dict:
        """Delete R-tuple ``rid``; return {query id: the pairs [(rid, sid), ...] that leave its result}."""
        _, b, attrs = self.r_index.get(rid)
        out = self._event(_R, rid, b, attrs)
        self.r_index.remove(rid)
        return out

    def delete_s(self, sid: Hashable) -> dict:
        """Delete S-tuple ``sid``; return {query id: the pairs [(rid, sid), ...] that leave its result}."""
        _, b, attrs = self.s_index.get(sid)
        out = self._event(_S, sid, b, attrs)
        self.s_index.remove(sid)
        return out

    def _event(self, direction: int, tid, b: float, attrs) -> dict:
        self.counters["events"] += 1
        if not self._queries:
            return {}
        # 003 §4.3.1: a new R-tuple is joined with S (base −r.B), a new S-tuple with R (base s.B); the R index is
        # keyed by −R.B, so the difference S.B − R.B is key + base either way
        if direction == _R:
            return self._probe(_R, self.s_index, -b, tid, attrs)
        return self._probe(_S, self.r_index, b, tid, attrs)

    def _probe(self, direction: int, index: _DataIndex, base: float, tid, attrs) -> dict:
        raise NotImplementedError

    # ---- output -----------------------------------------------------------------------------------------------
    def _emit(self, out: dict, q: _Query, direction: int, tid, index: _DataIndex, slots) -> None:
        """Record q's pairs of the incoming tuple ``tid`` with the tuples ``slots`` of ``index``, dropping those
        the other table's selection rejects (the incoming tuple's was checked by the caller)."""
        rows = index.rows
        other = q.where[1 - direction]
        if other:
            slots = [s for s in slots if _passes(other, rows[s][2])]
        if not slots:
            return
        c = self.counters
        c["affected"] += 1
        c["pairs"] += len(slots)
        if self.output == "count":
            out[q.qid] = len(slots)
        elif direction == _R:
            out[q.qid] = [(tid, rows[s][0]) for s in slots]
        else:
            out[q.qid] = [(rows[s][0], tid) for s in slots]

    # ---- whole results ----------------------------------------------------------------------------------------
    def result(self, qid) -> list[tuple]:
        """The current result of ``qid``: every (rid, sid) with lo <= s.B − r.B <= hi passing its selections
        (one search of S per R-tuple; not counted in :attr:`counters`)."""
        q = self._queries.get(qid)
        if q is None:
            raise UnknownSubscription(f"unknown band-join query {qid!r}")
        keys = self.s_index.keys
        srows = self.s_index.rows
        rw, sw = q.where
        out = []
        for rid, rslot in self.r_index.slot_of.items():
            _, b, attrs = self.r_index.rows[rslot]
            if rw and not _passes(rw, attrs):
                continue
            lo = _lower_bound(keys, -b, q.lo)[0]
            hi = _upper_bound(keys, -b, q.hi)
            for _, s in keys.islice(lo, hi):
                if not sw or _passes(sw, srows[s][2]):
                    out.append((rid, srows[s][0]))
        return out

    # ---- checking / explaining --------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise AssertionError if the structures disagree with the registered queries."""
        if set(self._by_slot) != {q.slot for q in self._queries.values()}:
            raise AssertionError("query slots disagree")

    def explain(self) -> str:
        return (f"{self.name}: {len(self._queries)} queries, |R| = {len(self.r_index)}, |S| = {len(self.s_index)}; "
                f"counters {self.counters}")


# --------------------------------------------------------------------------------------------------------------
# BJ-SSI (003 §4.3.1, "The SSI approach", Figure 4.4, Theorem 14)
# --------------------------------------------------------------------------------------------------------------
class BJSSI(BandJoinProcessor):
    """BJ-SSI: per stabbing group one data-index lookup at p_j + b, two scans of the group's sorted sequences,
    then a walk of the data index in both directions (module docstring).  The partition is a
    :class:`~sparksub.operators.shared.ssi.DynamicStabbingPartition` (``epsilon``, ``join``, ``trigger`` passed on;
    003 §4.2.3).  Work per incoming tuple O(|P| log m + k) with |P| <= (1+ε)·τ (Theorem 14, Lemma 12)."""

    name = "BJ-SSI"

    def __init__(self, *, epsilon: float = 0.5, join: str = "intersection", trigger: str = "witness",
                 output: str = "pairs"):
        super().__init__(output=output)
        self.partition = DynamicStabbingPartition(epsilon, join=join, trigger=trigger)
        self._groups: dict[int, _SortedBands] = {}  # gid -> I_j^l, I_j^r
        self._points: list | None = None  # cached P = [(p_j, gid)] in increasing order (the SSI's search tree)

    @property
    def stabbing_number(self) -> int:
        """|P|: the number of groups each incoming tuple visits."""
        return self.partition.stabbing_number

    # ---- maintenance (003 §4.2.3): follow the partition group by group ------------------------------------------
    def _group(self, gid: int) -> _SortedBands:
        g = self._groups.get(gid)
        if g is None:
            g = self._groups[gid] = _SortedBands()
        return g

    def _build_group(self, gid: int) -> None:
        qs = self._queries
        members = self.partition.group(gid).members
        self._groups[gid] = _SortedBands((qs[m].slot, qs[m].lo, qs[m].hi) for m in members)

    def _apply_rebuild(self) -> None:
        # a reconstruction keeps the ids of the groups whose members it left alone (ssi.py, "Group ids")
        dropped, created = self.partition.last_rebuild
        for gid in dropped:
            self._groups.pop(gid, None)
        for gid in created:
            self._build_group(gid)

    def _on_add(self, q: _Query) -> None:
        ch = self.partition.insert(q.qid, q.lo, q.hi)
        if ch.rebuilt:
            self._apply_rebuild()
            # ch.gid is the group after the reconstruction: a created one already holds q, a kept one is the
            # group q joined (or opened) before it, with the same members
            if ch.gid not in self.partition.last_rebuild[1]:
                self._group(ch.gid).add(q.slot, q.lo, q.hi)
        else:
            self._group(ch.gid).add(q.slot, q.lo, q.hi)
        self._points = None

    def _on_add_many(self, qs: list[_Query]) -> None:
        # bulk: partition first, then start from the canonical partition (Lemma 10) and build every group once
        part = self.partition
        was_empty = not len(part)
        part.insert_many((q.qid, q.lo, q.hi) for q in qs)  # into an empty partition: the canonical one at once
        if not was_empty:
            part.rebuild()
        self._groups = {}
        for _, gid in part.stabbing_points():
            self._build_group(gid)
        self._points = None

    def _on_remove(self, q: _Query) -> None:
        ch = self.partition.delete(q.qid)
        g = self._groups.get(ch.gid)
        if g is not None:  # absent only if an earlier rebuild already dropped it (cannot happen; defensive)
            g.remove(q.slot, q.lo, q.hi)
            if not len(g):
                del self._groups[ch.gid]
        if ch.rebuilt:
            self._apply_rebuild()
        self._points = None

    # ---- processing (003 §4.3.1, STEP 1 and STEP 2) --------------------------------------------------------------
    def _probe(self, direction, index, base, tid, attrs) -> dict:
        keys = index.keys
        m = len(keys)
        out: dict = {}
        if m == 0:
            return out
        points = self._points
        if points is None:
            points = self._points = self.partition.stabbing_points()
        c = self.counters
        by_slot = self._by_slot
        groups = self._groups
        probes = tscan = qscan = affected = pairs = 0
        count_only = self.output == "count"
        qid_of = self._qid_of
        for p, gid in points:
            g = groups[gid]
            size = len(g.lo_keys)
            # STEP 1: the lookup at p_j + b (p_j − base in key space): s1, s2 adjacent with d1 < p_j <= d2
            pos, d1, d2 = _lower_bound(keys, base, p)
            probes += 1
            tscan += (d1 is not None) + (d2 is not None)
            # (1) I_j^l up to the first left end > d1: these ranges contain d1 (they contain p_j > d1)
            jl = bisect_right(g.lo_keys, d1) if d1 is not None else 0
            # (2) I_j^r up to the first right end < d2: these contain d2 (all of them when d2 = p_j)
            jr = bisect_right(g.nhi_keys, -d2) if d2 is not None else 0
            qscan += jl + (d1 is not None and jl < size) + jr + (d2 is not None and jr < size)
            if not jl and not jr:
                continue
            # STEP 2: walk the data index from p_j + b; the affected ranges are served in order of decreasing
            # reach, so each side is walked once for the group (the widest result decides its length)
            left_n: dict = {}
            right_n: dict = {}
            left: list = []
            right: list = []
            if jl:
                it = keys.islice(0, pos, reverse=True)
                cur = next(it)  # s1
                lo_keys = g.lo_keys
                lo_slots = g.lo_slots
                for i in range(jl - 1, -1, -1):  # decreasing left end
                    lo = lo_keys[i]
                    while cur is not None and cur[0] + base >= lo:
                        left.append(cur[1])
                        cur = next(it, None)
                    left_n[lo_slots[i]] = len(left)
                tscan += len(left) - 1 + (cur is not None)  # s1 was counted with the lookup
            if jr:
                it = keys.islice(pos)
                cur = next(it)  # s2
                nhi_keys = g.nhi_keys
                nhi_slots = g.nhi_slots
                for i in range(jr - 1, -1, -1):  # increasing right end
                    hi = -nhi_keys[i]
                    while cur is not None and cur[0] + base <= hi:
                        right.append(cur[1])
                        cur = next(it, None)
                    right_n[nhi_slots[i]] = len(right)
                tscan += len(right) - 1 + (cur is not None)  # s2 was counted with the lookup
            if self._selective:
                for qs in (left_n.keys() | right_n.keys()) if (left_n and right_n) else (left_n or right_n):
                    q = by_slot[qs]
                    own = q.where[direction]
                    if own and not _passes(own, attrs):
                        continue
                    self._emit(out, q, direction, tid, index, left[:left_n.get(qs, 0)] + right[:right_n.get(qs, 0)])
            elif count_only:
                # no selections: every affected range gains its walked prefixes (each >= 1 tuple: s1 or s2)
                if left_n and right_n:
                    for qs, z in right_n.items():
                        left_n[qs] = left_n.get(qs, 0) + z
                elif right_n:
                    left_n = right_n
                out.update(zip(map(qid_of.__getitem__, left_n), left_n.values()))
                affected += len(left_n)
                pairs += sum(left_n.values())
            else:
                rows = index.rows
                if direction == _R:
                    lp = [(tid, rows[s][0]) for s in left]
                    rp = [(tid, rows[s][0]) for s in right]
                else:
                    lp = [(rows[s][0], tid) for s in left]
                    rp = [(rows[s][0], tid) for s in right]
                for qs in (left_n.keys() | right_n.keys()) if (left_n and right_n) else (left_n or right_n):
                    res = lp[:left_n.get(qs, 0)] + rp[:right_n.get(qs, 0)]
                    out[qid_of[qs]] = res
                    affected += 1
                    pairs += len(res)
        c["affected"] += affected
        c["pairs"] += pairs
        c["data_probes"] += probes
        c["tuples_scanned"] += tscan
        c["queries_scanned"] += qscan
        return out

    def check(self) -> None:
        """The per-group sequences hold exactly the partition's groups, sorted; the partition's own checks."""
        super().check()
        part = self.partition
        part.check()
        want = {g.gid: {self._queries[m].slot for m in g.members} for g in part.groups()}
        have = {gid: g.slots() for gid, g in self._groups.items()}
        if want != have:
            raise AssertionError(f"BJ-SSI groups disagree with the partition: {want} != {have}")
        for gid, g in self._groups.items():
            if g.lo_keys != sorted(g.lo_keys) or g.nhi_keys != sorted(g.nhi_keys):
                raise AssertionError(f"group {gid}: unsorted sequence")
            for k, s in zip(g.lo_keys, g.lo_slots):
                if self._by_slot[s].lo != k:
                    raise AssertionError(f"group {gid}: stale left end")
            for k, s in zip(g.nhi_keys, g.nhi_slots):
                if -self._by_slot[s].hi != k:
                    raise AssertionError(f"group {gid}: stale right end")

    def explain(self) -> str:
        sizes = sorted((len(g) for g in self._groups.values()), reverse=True)
        return (f"{super().explain()}; stabbing number {self.stabbing_number} (ε = {self.partition.epsilon}), "
                f"largest groups {sizes[:5]}; partition {self.partition.counters}")


# --------------------------------------------------------------------------------------------------------------
# BJ-QOuter (003 §4.3.1, previous approaches)
# --------------------------------------------------------------------------------------------------------------
class BJQOuter(BandJoinProcessor):
    """BJ-QOuter: for every query, one search of the data index at the instantiated range's left end and a
    leaf scan up to its right end.  No query structure (so no maintenance cost, §4.6.5).  O(n log m + k)."""

    name = "BJ-QOuter"

    def _probe(self, direction, index, base, tid, attrs) -> dict:
        keys = index.keys
        out: dict = {}
        m = len(keys)
        if m == 0:
            return out
        c = self.counters
        probes = tscan = 0
        for q in self._by_slot.values():
            own = q.where[direction]
            if own and not _passes(own, attrs):
                continue
            pos, _, d = _lower_bound(keys, base, q.lo)
            probes += 1
            if d is None:
                continue
            tscan += 1
            hi = q.hi
            if d > hi:
                continue
            slots = []
            for k, s in keys.islice(pos):
                if k + base > hi:
                    tscan += 1
                    break
                slots.append(s)
            tscan += len(slots) - 1  # the first was read by the search
            self._emit(out, q, direction, tid, index, slots)
        c["data_probes"] += probes
        c["tuples_scanned"] += tscan
        c["queries_scanned"] += len(self._by_slot)
        return out


# --------------------------------------------------------------------------------------------------------------
# BJ-DOuter (003 §4.3.1, previous approaches) and its index on the ranges
# --------------------------------------------------------------------------------------------------------------
class _Node:
    __slots__ = ("center", "bands", "left", "right")

    def __init__(self, center: float):
        self.center = center
        self.bands = _SortedBands()
        self.left: _Node | None = None
        self.right: _Node | None = None


def _inside(lo: float, hi: float) -> float:
    """A finite point of the nonempty range [lo, hi] (near its middle when both ends are finite)."""
    if math.isfinite(lo) and math.isfinite(hi):
        return lo + (hi - lo) / 2
    if math.isfinite(lo):
        return lo
    if math.isfinite(hi):
        return hi
    return 0.0


class _IntervalTree:
    """A centred interval tree [Ede80] over the query ranges: the "index on ranges" of BJ-DOuter (the paper
    names a priority search tree or an external interval tree; all answer a stabbing query in O(log n + k)).

    Each node holds the ranges containing its centre, by increasing left end and decreasing right end; a
    stabbing query at x descends one path and at each node reads the ranges with lo <= x (x left of the
    centre) or hi >= x (right of it).  Built by medians of the ends; later insertions descend the existing
    skeleton (opening a leaf where a range meets no centre), and the tree is rebuilt once the operations since
    the last build outnumber the ranges then, so it stays balanced at O(log n) amortised cost per update."""

    def __init__(self):
        self.root: _Node | None = None
        self._bands: dict[int, tuple[float, float]] = {}
        self._node_of: dict[int, _Node] = {}
        self._ops = 0
        self._built = 0
        self.rebuilds = 0

    def __len__(self) -> int:
        return len(self._bands)

    def insert(self, slot: int, lo: float, hi: float) -> None:
        self._bands[slot] = (lo, hi)
        self._ops += 1
        if self._ops > max(16, self._built):
            self.rebuild()
            return
        if self.root is None:
            self.root = _Node(_inside(lo, hi))
        node = self.root
        while True:
            c = node.center
            if lo <= c <= hi:
                break
            nxt = node.left if hi < c else node.right
            if nxt is None:
                nxt = _Node(_inside(lo, hi))
                if hi < c:
                    node.left = nxt
                else:
                    node.right = nxt
            node = nxt
        node.bands.add(slot, lo, hi)
        self._node_of[slot] = node

    def delete(self, slot: int) -> None:
        lo, hi = self._bands.pop(slot)
        self._node_of.pop(slot).bands.remove(slot, lo, hi)
        self._ops += 1
        if self._ops > max(16, self._built):
            self.rebuild()

    def rebuild(self) -> None:
        self._node_of = {}
        self.root = self._build([(s, lo, hi) for s, (lo, hi) in self._bands.items()])
        self._built = len(self._bands)
        self._ops = 0
        self.rebuilds += 1

    def _build(self, items: list) -> _Node | None:
        if not items:
            return None
        root = None
        stack = [(items, None, False)]
        while stack:
            its, parent, is_right = stack.pop()
            ends = sorted(v for _, lo, hi in its for v in (lo, hi) if math.isfinite(v))
            # the median end belongs to some range, so that range contains it and the node is never empty
            center = ends[len(ends) // 2] if ends else 0.0
            here, lower, upper = [], [], []
            for it in its:
                lo, hi = it[1], it[2]
                (lower if hi < center else upper if lo > center else here).append(it)
            if not here:  # only ranges with infinite ends on one side: take a point of the first
                center = _inside(its[0][1], its[0][2])
                here, lower, upper = [], [], []
                for it in its:
                    (lower if it[2] < center else upper if it[1] > center else here).append(it)
            node = _Node(center)
            node.bands = _SortedBands(here)
            for s, _, _ in here:
                self._node_of[s] = node
            if parent is None:
                root = node
            elif is_right:
                parent.right = node
            else:
                parent.left = node
            if lower:
                stack.append((lower, node, False))
            if upper:
                stack.append((upper, node, True))
        return root

    def stab(self, x: float) -> tuple[list, int]:
        """(slots of the ranges containing x, entries read including one stop per nonempty node visited)."""
        out: list = []
        read = 0
        node = self.root
        while node is not None:
            b = node.bands
            n = len(b.lo_keys)
            c = node.center
            if x < c:  # every range here has hi >= c > x: read those with lo <= x
                j = bisect_right(b.lo_keys, x)
                out += b.lo_slots[:j]
                node = node.left
            elif x > c:  # every range here has lo <= c < x: read those with hi >= x
                j = bisect_right(b.nhi_keys, -x)
                out += b.nhi_slots[:j]
                node = node.right
            else:
                j = n
                out += b.lo_slots
                node = None
            read += j + (j < n)
        return out, read

    def check(self) -> None:
        seen = 0
        stack = [(self.root, -_INF, _INF)]
        while stack:
            node, a, z = stack.pop()
            if node is None:
                continue
            if not (a <= node.center <= z):
                raise AssertionError("interval tree: centre outside its subtree's span")
            for s in node.bands.lo_slots:
                lo, hi = self._bands[s]
                if not (lo <= node.center <= hi) or self._node_of[s] is not node:
                    raise AssertionError(f"interval tree: range {s} misplaced")
                seen += 1
            stack.append((node.left, a, node.center))
            stack.append((node.right, node.center, z))
        if seen != len(self._bands):
            raise AssertionError("interval tree: ranges lost")


class BJDOuter(BandJoinProcessor):
    """BJ-DOuter: for every tuple of the other table, one stabbing query on the interval tree of the ranges at
    its difference from the incoming tuple.  O(m log n + k)."""

    name = "BJ-DOuter"

    def __init__(self, *, output: str = "pairs"):
        super().__init__(output=output)
        self.tree = _IntervalTree()

    def _on_add(self, q: _Query) -> None:
        self.tree.insert(q.slot, q.lo, q.hi)

    def _on_add_many(self, qs: list[_Query]) -> None:
        for q in qs:
            self.tree._bands[q.slot] = (q.lo, q.hi)
        self.tree.rebuild()

    def _on_remove(self, q: _Query) -> None:
        self.tree.delete(q.slot)

    def _probe(self, direction, index, base, tid, attrs) -> dict:
        out: dict = {}
        hits: dict[int, list] = {}
        stab = self.tree.stab
        read = 0
        m = 0
        for k, s in index.keys:
            m += 1
            qs, r = stab(k + base)
            read += r
            for qslot in qs:
                lst = hits.get(qslot)
                if lst is None:
                    hits[qslot] = [s]
                else:
                    lst.append(s)
        c = self.counters
        c["query_probes"] += m
        c["tuples_scanned"] += m
        c["queries_scanned"] += read
        by_slot = self._by_slot
        for qslot, slots in hits.items():
            q = by_slot[qslot]
            own = q.where[direction]
            if own and not _passes(own, attrs):
                continue
            self._emit(out, q, direction, tid, index, slots)
        return out

    def check(self) -> None:
        super().check()
        self.tree.check()
        if set(self.tree._bands) != set(self._by_slot):
            raise AssertionError("interval tree disagrees with the queries")


# --------------------------------------------------------------------------------------------------------------
# BJ-MJ (003 §4.3.1, previous approaches)
# --------------------------------------------------------------------------------------------------------------
class BJMJ(BandJoinProcessor):
    """BJ-MJ: merge join of the ranges (kept sorted by left end; adding the incoming B does not change the
    order) with the other table in B order.  A pointer into the data advances monotonically to each range's
    left end; from there the range's result is read up to its right end.  O(m + n + k)."""

    name = "BJ-MJ"

    def __init__(self, *, output: str = "pairs"):
        super().__init__(output=output)
        self.windows = _SortedBands(right=False)  # the ranges by left end

    def _on_add(self, q: _Query) -> None:
        self.windows.add(q.slot, q.lo, q.hi)

    def _on_add_many(self, qs: list[_Query]) -> None:
        self.windows = _SortedBands(((q.slot, q.lo, q.hi) for q in self._by_slot.values()), right=False)

    def _on_remove(self, q: _Query) -> None:
        self.windows.remove(q.slot, q.lo, q.hi)

    def _probe(self, direction, index, base, tid, attrs) -> dict:
        out: dict = {}
        data = list(index.keys)  # the leaf level in B order, read sequentially
        m = len(data)
        if m == 0:
            return out
        by_slot = self._by_slot
        ptr = 0
        visited = tscan = 0
        for lo, qslot in zip(self.windows.lo_keys, self.windows.lo_slots):
            visited += 1
            while ptr < m and data[ptr][0] + base < lo:
                ptr += 1
                tscan += 1
            if ptr == m:  # the data is exhausted: no later range (larger left end) joins anything
                break
            q = by_slot[qslot]
            own = q.where[direction]
            if own and not _passes(own, attrs):
                continue
            hi = q.hi
            j = ptr
            while j < m and data[j][0] + base <= hi:
                j += 1
            tscan += j - ptr + (j < m)
            if j > ptr:
                self._emit(out, q, direction, tid, index, [s for _, s in data[ptr:j]])
        c = self.counters
        c["tuples_scanned"] += tscan
        c["queries_scanned"] += visited
        return out

    def check(self) -> None:
        super().check()
        if self.windows.slots() != set(self._by_slot) or self.windows.lo_keys != sorted(self.windows.lo_keys):
            raise AssertionError("BJ-MJ window list disagrees with the queries")


#: name -> class, for the benchmark and the router
ALGORITHMS: dict[str, type[BandJoinProcessor]] = {
    "BJ-SSI": BJSSI, "BJ-QOuter": BJQOuter, "BJ-DOuter": BJDOuter, "BJ-MJ": BJMJ}
