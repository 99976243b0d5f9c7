"""Continuous equality joins with local range selections (select-joins): SJ-SSI, its baselines, the hotspot
hybrid, and the reformulation of 000 §4.

Pure core (numpy + sortedcontainers through :mod:`~sparksub.operators.shared.ssi` and
:mod:`~sparksub.operators.shared.point_index`, no pyspark) of the SELECT_JOIN class (issue 5, items 4 and 7)::

    SELECT * FROM R JOIN S ON R.b = S.b WHERE R.a BETWEEN a_lo AND a_hi AND S.c BETWEEN c_lo AND c_hi

Sources
-------
* 003 = the dissertation, chapter 4 ([AXYY06]): §4.3.2 "Equality Joins with Local Selections" (SJ-JoinFirst,
  SJ-SelectFirst, SJ-SSI, Figure 4.5, Theorem 15, "SSI + hotspot-tracking"), §4.5.1 (the variants
  SJ-JoinFirst-E / SJ-JoinFirst-S and their cost forms), §4.6.1 (Table 4.1 workloads), §4.6.2 (NAIVE),
  §4.6.3 (hotspots with SJ-SSI, scattered queries with SJ-SelectFirst).  The stabbing partitions and the
  hotspot tracker are :mod:`sparksub.operators.shared.ssi` (§4.2).
* 000 = [CXY06] §4 (last paragraph but one): select-join reformulation.

Definitions (003 §4.3.2)
------------------------
A query ``σ_{A∈rangeA_i} R ⋈_{R.B=S.B} σ_{C∈rangeC_i} S`` is the rectangle ``rangeC_i × rangeA_i`` of the
product space S.C × R.A.  A new tuple r(a, b) of R joins the S tuples with s.b = b; each result r·s is the
*join result point* (s.c, a), all on the line R.A = a.  The affected queries are exactly the rectangles that
contain a join result point, and a query's new result tuples are the points in its rectangle (a consecutive
run of the S tuples with s.b = b ordered by s.c).  An incoming S tuple s(b, c) is symmetric: its points
(c, r.a) lie on the line S.C = c, and the roles of the two selections swap.  Ranges are closed; an end may be
±inf (an open or absent selection: ``add_query`` defaults every end to ±inf).

Both inputs receive insertions and deletions; every operation returns ``{query id: [(r_key, s_key), ...]}``,
the result tuples it adds to (insertion) or removes from (deletion) each affected query, each list in the
order of the partner's selection value (ties: insertion order), and nothing for an unaffected query.

Algorithms (one class each, common interface :class:`SelectJoinAlgorithm`)
-------------------------------------------------------------------------
Described for an incoming R tuple r(a, b); an S tuple swaps (A, R) with (C, S).  Every class keeps both
tables with the join index of 003 §4.3.2, "a B-tree on S(B, C)": per join value b, the tuples in s.c order
(:class:`SelectJoinTables`).

* :class:`SJNaive` (NAIVE, 003 §4.6.2): materialise the join result (the run of S tuples with s.b = b, as a
  list ordered by S.C), then evaluate both local selections of *every* query over it (one binary search per
  query).  O(log m + n log k_j + k).
* :class:`SJJoinFirstS` (SJ-JoinFirst-S, 003 §4.5.1): join first through the two-tier index on S(B, C) (no
  copy), then probe the join run with every query's C range and check its A range.  O(log|S| + |Q| log k_j
  + k); unlike NAIVE it stops at once when nothing joins (k_j = 0).
* :class:`SJJoinFirstE` (SJ-JoinFirst-E, 003 §4.3.2 / §4.5.1): join first, then probe a 2-d index over all
  query rectangles with each join result point (s.c, a).  The index is :class:`RectIndex` (below).
  O(log m + m'·g(n) + k) (Theorem 15).
* :class:`SJSelectFirst` (SJ-SelectFirst, 003 §4.3.2): stab an index over the R.A ranges with a (the paper's
  priority search tree; here :class:`~sparksub.operators.shared.point_index.PointIndex2D` over the points
  (a_lo, a_hi), whose ``stab`` is the same 2-sided query), then for each such query search the join run for
  its C range.  O(log n + n' log m + k).
* :class:`SJSSI` (SJ-SSI, 003 §4.3.2, Figure 4.5): a stabbing partition of the C ranges
  (:class:`~sparksub.operators.shared.ssi.DynamicStabbingPartition`, §4.2.3).  Every rectangle of group j crosses the
  line S.C = p_j, so with q1 / q2 the join result C values nearest p_j from the left / right (one search of
  the join run per group), a rectangle of group j contains a join result point iff it contains (q1, a) or
  (q2, a) (003 §4.3.2: "Any query in I_j that contains neither ... cannot possibly contain any join result
  point"); one probe when q1 = p_j.  The new tuples of an affected query are a consecutive run through q1 or
  q2.  O(τ(log m + g(n)) + k).
* :class:`SJHotspot` (003 §4.3.2 "SSI + hotspot-tracking", §4.6.3 HOTSPOT-BASED): an α-hotspot tracker
  (:class:`~sparksub.operators.shared.ssi.HotspotTracker`, Theorem 12) over the C ranges; the hotspot queries are
  processed with SJ-SSI, the scattered ones with SJ-SelectFirst.
* :class:`SJReformulated` (000 §4): the reformulated mode; :func:`reformulate` turns δR into one message per
  result tuple of δR ⋈ S, :func:`matches` is the stateless subscription ``p ∧ pR ∧ pS``.  It evaluates every
  (message, query) pair in Python, as the network's matching would: an oracle, not a fast path.

The per-group structure of SJ-SSI (the choice the issue asks for)
-----------------------------------------------------------------
The paper stores each group in an R-tree and probes it with the points (q1, a) and (q2, a).  Here each group
is a two-level R-tree of our own in numpy, no new dependency (the ``rtree`` package wraps libspatialindex
through ctypes: a few µs per call, one call per group and probe point, per-item inserts, and no node-visit
counts for the benchmark; its wheels do bundle the library).  The stabbing property shapes it: every C range
of group j contains p_j and q1 <= p_j <= q2, so "rangeC_i ∋ q1" is just ``c_lo <= q1`` and "rangeC_i ∋ q2"
is ``c_hi >= q2``.  A group's members are ordered by the centre of their A range and cut into *slabs* of
``leaf_size`` (default max(16, √n / 4)) queries, each with the hull of its A ranges (the leaf MBR in A; in C
every member crosses p_j); inside a slab the members are sorted by c_lo and, separately, by c_hi descending.
A probe checks every slab's hull against a (one vectorised comparison over all slabs of all groups), and in
each slab that passes takes the prefix with ``c_lo <= q1`` (left probe) or ``c_hi >= q2`` (right probe),
found for all slabs with one ``np.searchsorted`` on keys (slab, rank of the value) (the trick of
:class:`~sparksub.operators.shared.point_index.PointIndex2D`); the A range is then a mask over the gathered
prefixes.  So the per-event cost is a few numpy calls whatever τ is: O(τ log k_j) to find q1 / q2, the
slab hulls, and the members of the A-passing slabs whose C range reaches q1 or q2 (the paper's property (2)
up to the slab's A hull).  Queries added since the last build sit in a small delta checked by brute force
and removed ones are tombstoned; the layout is rebuilt from the partition's current groups when the delta
or the tombstones pass ``delta_limit`` (default max(64, n/32)), lazily at the next probe, so a rebuild is
amortised over Ω(n/32) query operations.  Every layout is a valid stabbing partition of its members (a
member added later is in the delta), so correctness never depends on the partition being current; the
partition itself is maintained on every query insertion and deletion (003 §4.2.3, Lemma 12).

:class:`RectIndex` (SJ-JoinFirst-E's "R-tree on the query rectangles") is a two-level STR-packed R-tree in
numpy: leaves of ~√n rectangles (sort by C centre into √(n/M) slices, each by A centre), the leaf MBRs
checked against all join result points of the event at once, then the rectangles of the hit leaves.  Its cost
per point is O(√n + hits·√n), the √n the paper assumes for its R-tree in §4.5.1 ("we assume query cost of
R-tree is on square root of the number of indexed queries").

Hybrid (003 §4.6.3)
-------------------
Per direction, the tracker classifies each query on insertion (joins a hot group → SSI delta, else the
SelectFirst index).  Promotions / demotions are applied lazily: the SSI layout is rebuilt from
``HotspotTracker.hotspots()`` and the queries that changed side move between the two indexes when the moves
since the last rebuild ((I3): O(1) amortised per update) or the delta pass ``delta_limit``.  Correctness only
needs each query in exactly one of the two structures, which holds at all times (:meth:`SJHotspot.check`).

Measured (``bench/select_joins_smoke.py``, 100K-tuple R and S, Table 4.1-like queries, incoming R tuples per
second through ``probe_r``, 2 shared cores under load ~2-3; the dicts of ``insert_r`` cost more than the
search at 100K queries: ~10,000 result tuples per event)::

    R.a selectivity ~10%      100 queries   10K queries   100K queries   (τ of the C ranges: 11 / 19 / 27)
    NAIVE                        53,738         2,674            294
    SJ-JoinFirst-S               70,841         3,242            363
    SJ-JoinFirst-E               28,025         6,009            696
    SJ-SelectFirst               47,641        10,573          2,266
    SJ-SSI                       18,100        10,520          3,591
    Hotspot (α = 0.01)           16,510         7,790          3,143
    affected queries / event        3.8           380          3,810

    R.a selectivity ~1%: at 100K queries SJ-SSI 6,007, Hotspot 6,733, SJ-SelectFirst 5,460,
    SJ-JoinFirst-E 2,493, NAIVE 310 (381 affected queries per event).

SJ-SSI's own search stays flat (index probes per event 23 / 42 / 47: at most 1 + 3 per group of the layout,
which has 14 / 26 / 29 groups), but the output grows with the number of queries on this workload, and its
throughput falls with it (the paper's "< 20% drop from 100 to
100,000 queries" excluded the output).  At 100 queries its fixed numpy overhead per event (~50 µs) loses to
the baselines' single vectorised pass.

Work counters (``counters``, per algorithm, summed over both directions)
----------------------------------------------------------------------
``events`` (tuples processed), ``index_probes`` (searches of any index: the join lookup of the incoming b,
per-query searches of the join run, R-tree point probes, SSI group lookups and probes), ``join_points`` (join
result points materialised or examined besides the results), ``queries_visited`` (query entries examined),
``nodes_visited`` (R-tree leaf MBRs examined), ``results`` (result tuples), ``affected`` ((event, query)
pairs with a result), ``rebuilds`` (index layouts rebuilt).  Methods ``probe_r(a, b)`` / ``probe_s(b, c)``
find the matches without changing the tables or building the dicts (the benchmark's "output excluded", as in
003 §4.6).

Errors: NaN values, NaN / unhashable join values, a duplicate key or an unknown key on delete raise
:class:`~sparksub.errors.BadUpdate` (nothing applied); a NaN, inverted or pointless (``[inf, inf]``) range
:class:`~sparksub.errors.InvalidSubscription`, a duplicate query id
:class:`~sparksub.errors.DuplicateSubscription`, an unknown one :class:`~sparksub.errors.UnknownSubscription`.

>>> sj = SJSSI()
>>> sj.add_query("q", a_lo=0, a_hi=10, c_lo=5, c_hi=7)
>>> sj.insert_s("s1", b=1, c=6), sj.insert_s("s2", b=1, c=9)
({}, {})
>>> sj.insert_r("r1", a=3, b=1)
{'q': [('r1', 's1')]}
>>> sj.delete_s("s1")
{'q': [('r1', 's1')]}
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import math
from bisect import bisect_left, bisect_right
from math import isqrt
from typing import Hashable, Iterable, NamedTuple

import numpy as np

from sparksub.errors import BadUpdate, DuplicateSubscription, InvalidSubscription, UnknownSubscription
from sparksub.operators.shared.arrays import concat_ranges
from sparksub.operators.shared.point_index import PointIndex2D
from sparksub.operators.shared.ssi import DynamicStabbingPartition, HotspotTracker

__all__ = ["SelectJoinTables", "SelectJoinQuery", "Delta", "SelectJoinMessage", "Matches", "RectIndex",
           "SelectJoinAlgorithm", "SJNaive", "SJJoinFirstS", "SJJoinFirstE", "SJSelectFirst", "SJSSI",
           "SJHotspot", "SJReformulated", "ALGORITHMS", "reformulate", "matches", "MESSAGE_TYPE"]

_INF = math.inf
_EMPTY_I = np.empty(0, dtype=np.int64)
_EMPTY_F = np.empty(0, dtype=np.float64)

#: coordinates of a query: its R.a range and its S.c range
A, C = 0, 1
#: directions: an incoming R tuple (own selection A, partner table S, partner selection C) or S tuple
R_SIDE, S_SIDE = 0, 1
_OWN = (A, C)
_PARTNER = (C, A)

#: the TYPE field of a reformulated select-join message (000 §4, last paragraph)
MESSAGE_TYPE = "SELECT_JOIN"


# --------------------------------------------------------------------------------------------------------------
# Base tables with the join index "B-tree on S(B, C)" (003 §4.3.2)
# --------------------------------------------------------------------------------------------------------------
class _Run:
    """The tuples of one table with one join value b, ordered by their selection value (ties: insertion
    order): one leaf run of the B-tree on (B, selection attribute)."""

    __slots__ = ("xs", "keys", "_arr")

    def __init__(self):
        self.xs: list[float] = []
        self.keys: list = []
        self._arr: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.xs)

    def add(self, x: float, key) -> None:
        i = bisect_right(self.xs, x)
        self.xs.insert(i, x)
        self.keys.insert(i, key)
        self._arr = None

    def remove(self, x: float, key) -> None:
        i = bisect_left(self.xs, x)
        keys = self.keys
        while keys[i] != key:
            i += 1
        del self.xs[i]
        del keys[i]
        self._arr = None

    def array(self) -> np.ndarray:
        """The selection values as a float64 array (cached until the run changes)."""
        if self._arr is None:
            self._arr = np.asarray(self.xs, dtype=np.float64)
        return self._arr


class _Table:
    """One base table: key -> (selection value, join value), and per join value a :class:`_Run`."""

    __slots__ = ("name", "rows", "runs")

    def __init__(self, name: str):
        self.name = name
        self.rows: dict = {}
        self.runs: dict = {}

    def __len__(self) -> int:
        return len(self.rows)

    def insert(self, key, x: float, b) -> None:
        if key in self.rows:
            raise BadUpdate(f"{self.name}: duplicate key {key!r}")
        self.rows[key] = (x, b)
        run = self.runs.get(b)
        if run is None:
            run = self.runs[b] = _Run()
        run.add(x, key)

    def delete(self, key) -> tuple[float, object]:
        row = self.rows.pop(key, None)
        if row is None:
            raise BadUpdate(f"{self.name}: unknown key {key!r}")
        x, b = row
        run = self.runs[b]
        run.remove(x, key)
        if not len(run):
            del self.runs[b]
        return row

    def lookup(self, key) -> tuple[float, object]:
        row = self.rows.get(key)
        if row is None:
            raise BadUpdate(f"{self.name}: unknown key {key!r}")
        return row


class SelectJoinTables:
    """R(key, a, b) and S(key, b, c), each with its join index on (B, selection attribute).

    ``table(R_SIDE)`` is R, ``table(S_SIDE)`` is S; ``partner(side)`` the other one."""

    def __init__(self):
        self.R = _Table("R")
        self.S = _Table("S")
        self._tables = (self.R, self.S)

    def table(self, side: int) -> _Table:
        return self._tables[side]

    def partner(self, side: int) -> _Table:
        return self._tables[1 - side]

    def apply(self, delta: "Delta") -> None:
        """Apply one validated update to its table."""
        side = _side(delta.side)
        if delta.op == "insert":
            self.table(side).insert(delta.key, _value(delta.x, "selection value"), _join_value(delta.b))
        else:
            self.table(side).delete(delta.key)


def _value(x, what: str = "value") -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise BadUpdate(f"{what} {x!r} is not a number") from None
    if v != v:
        raise BadUpdate(f"NaN {what}")
    return v


def _join_value(b):
    try:
        hash(b)
    except TypeError:
        raise BadUpdate(f"join value {b!r} is not hashable") from None
    if b is None or (isinstance(b, float) and b != b) or (isinstance(b, np.floating) and np.isnan(b)):
        raise BadUpdate(f"join value {b!r} never joins (NULL / NaN)")
    return b


def _side(side) -> int:
    if side in (R_SIDE, "R", "r"):
        return R_SIDE
    if side in (S_SIDE, "S", "s"):
        return S_SIDE
    raise ValueError(f"side must be 'R' or 'S', not {side!r}")


# --------------------------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------------------------
class SelectJoinQuery(NamedTuple):
    """A select-join subscription: R.a in [a_lo, a_hi] and S.c in [c_lo, c_hi] (closed, ends may be ±inf)."""

    qid: Hashable
    a_lo: float = -_INF
    a_hi: float = _INF
    c_lo: float = -_INF
    c_hi: float = _INF


def _range(lo, hi, what: str) -> tuple[float, float]:
    """A validated closed range; None = open end.  Same rules as the stabbing partitions (003 §4.2)."""
    try:
        lo = -_INF if lo is None else float(lo)
        hi = _INF if hi is None else float(hi)
    except (TypeError, ValueError):
        raise InvalidSubscription(f"{what} range bounds must be numbers: [{lo!r}, {hi!r}]") from None
    if lo != lo or hi != hi:
        raise InvalidSubscription(f"NaN {what} range bound: [{lo}, {hi}]")
    if lo > hi:
        raise InvalidSubscription(f"inverted {what} range [{lo}, {hi}]")
    if lo == _INF or hi == -_INF:
        raise InvalidSubscription(f"{what} range [{lo}, {hi}] contains no real point")
    return lo, hi


class _Queries:
    """Query id <-> int slot (never reused) and the four range ends as columns: ``lo[A]``, ``hi[A]`` (the R.a
    range), ``lo[C]``, ``hi[C]`` (the S.c range).  Columns are reallocated when they grow: read them through
    the attributes each time."""

    def __init__(self):
        self.slot_of: dict = {}
        self.qid_of: list = []
        self.lo = np.empty((2, 64), dtype=np.float64)
        self.hi = np.empty((2, 64), dtype=np.float64)
        self.alive = np.zeros(64, dtype=bool)
        self._live: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.slot_of)

    def __contains__(self, qid) -> bool:
        return qid in self.slot_of

    def validate(self, qid, a_lo, a_hi, c_lo, c_hi) -> tuple[float, float, float, float]:
        try:
            present = qid in self.slot_of
        except TypeError:
            raise InvalidSubscription(f"query id {qid!r} is not hashable") from None
        if present:
            raise DuplicateSubscription(f"query id {qid!r} is already registered")
        a_lo, a_hi = _range(a_lo, a_hi, "R.a")
        c_lo, c_hi = _range(c_lo, c_hi, "S.c")
        return a_lo, a_hi, c_lo, c_hi

    def add(self, qid, a_lo: float, a_hi: float, c_lo: float, c_hi: float) -> int:
        slot = len(self.qid_of)
        if slot >= self.alive.size:
            cap = 2 * self.alive.size
            for name in ("lo", "hi"):
                old = getattr(self, name)
                new = np.empty((2, cap), dtype=np.float64)
                new[:, :slot] = old[:, :slot]
                setattr(self, name, new)
            alive = np.zeros(cap, dtype=bool)
            alive[:slot] = self.alive[:slot]
            self.alive = alive
        self.lo[A, slot], self.hi[A, slot], self.lo[C, slot], self.hi[C, slot] = a_lo, a_hi, c_lo, c_hi
        self.alive[slot] = True
        self.qid_of.append(qid)
        self.slot_of[qid] = slot
        self._live = None
        return slot

    def remove(self, qid) -> int:
        try:
            slot = self.slot_of.pop(qid)
        except (KeyError, TypeError):
            raise UnknownSubscription(f"unknown query id {qid!r}") from None
        self.alive[slot] = False
        self._live = None
        return slot

    def live(self) -> np.ndarray:
        """Slots of the registered queries (cached until a query is added or removed)."""
        if self._live is None:
            self._live = np.flatnonzero(self.alive[:len(self.qid_of)])
        return self._live

    def query(self, qid) -> SelectJoinQuery:
        s = self.slot_of[qid]
        return SelectJoinQuery(qid, float(self.lo[A, s]), float(self.hi[A, s]), float(self.lo[C, s]),
                               float(self.hi[C, s]))


# --------------------------------------------------------------------------------------------------------------
# Matches and the shared steps
# --------------------------------------------------------------------------------------------------------------
class Matches(NamedTuple):
    """The compact answer of one probe: query ``slots[i]`` gets the entries ``[starts[i], stops[i])`` of the
    partner's join run ``run`` (its tuples with the incoming join value, in selection-value order).  Every
    listed range is nonempty and every slot appears once."""

    slots: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    run: _Run | None

    @property
    def results(self) -> int:
        return int((self.stops - self.starts).sum())


_NO_MATCH = (_EMPTY_I, _EMPTY_I, _EMPTY_I)


def _run_hits(X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each range [lo_i, hi_i], the slice of the sorted X inside it (003 §4.3.2: a query's new result
    tuples are a consecutive run of the join index)."""
    return np.searchsorted(X, lo, side="left"), np.searchsorted(X, hi, side="right")


def _new_counters() -> dict[str, int]:
    return {"events": 0, "index_probes": 0, "join_points": 0, "queries_visited": 0, "nodes_visited": 0,
            "results": 0, "affected": 0, "rebuilds": 0}


def _select_first(index: PointIndex2D, q: _Queries, d: int, x: float, X: np.ndarray, counters: dict):
    """SJ-SelectFirst's two steps (003 §4.3.2) over the queries of ``index``: (1) stab the index of own ranges
    with x; (2) for each such query search the join run for its partner range."""
    stab = index.stab(x)
    counters["index_probes"] += 1 + stab.size  # the stab, then one search of S(B, C) per query
    counters["queries_visited"] += stab.size
    if not stab.size or not X.size:
        return _NO_MATCH
    p = _PARTNER[d]
    starts, stops = _run_hits(X, q.lo[p][stab], q.hi[p][stab])
    keep = stops > starts
    return stab[keep], starts[keep], stops[keep]


def _cat(parts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = [p for p in parts if p[0].size]
    if not parts:
        return _NO_MATCH
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


# --------------------------------------------------------------------------------------------------------------
# The common interface
# --------------------------------------------------------------------------------------------------------------
class TupleInterface(ABC):
    """The data side shared by every select-join algorithm and the router (003 §4.5: the router offers the
    plans' interface): inserts / deletes of R and S tuples and probes, over ``_process(d, insert, key, x, b)``
    and ``_matches(d, x, b)``, which the classes implement."""

    def insert_r(self, key: Hashable, a: float, b) -> dict:
        """Insert r(key, a, b) into R; the new result tuples of each affected query."""
        return self._process(R_SIDE, True, key, a, b)

    def delete_r(self, key: Hashable) -> dict:
        """Delete R tuple ``key``; the result tuples each affected query loses."""
        return self._process(R_SIDE, False, key, None, None)

    def insert_s(self, key: Hashable, b, c: float) -> dict:
        """Insert s(key, b, c) into S; the new result tuples of each affected query."""
        return self._process(S_SIDE, True, key, c, b)

    def delete_s(self, key: Hashable) -> dict:
        """Delete S tuple ``key``; the result tuples each affected query loses."""
        return self._process(S_SIDE, False, key, None, None)

    def probe_r(self, a: float, b) -> Matches:
        """The matches a new R tuple (a, b) would produce, tables unchanged (no dicts built)."""
        return self._matches(R_SIDE, _value(a), _join_value(b))

    def probe_s(self, b, c: float) -> Matches:
        """The matches a new S tuple (b, c) would produce, tables unchanged (no dicts built)."""
        return self._matches(S_SIDE, _value(c), _join_value(b))

    @abstractmethod
    def _process(self, d: int, insert: bool, key, x, b) -> dict:
        """Apply one insert / delete of side ``d``; {query id: [(r_key, s_key), ...]}."""

    @abstractmethod
    def _matches(self, d: int, x: float, b) -> Matches:
        """The matches of a tuple (selection value ``x``, join value ``b``) of side ``d``, tables unchanged."""


class SelectJoinAlgorithm(TupleInterface):
    """Common interface of every select-join algorithm (module docstring).

    * ``add_query(qid, a_lo=-inf, a_hi=inf, c_lo=-inf, c_hi=inf)``, ``add_queries(rows)``,
      ``remove_query(qid)``;
    * ``insert_r(key, a, b)``, ``delete_r(key)``, ``insert_s(key, b, c)``, ``delete_s(key)``: each returns
      ``{qid: [(r_key, s_key), ...]}`` — the result tuples the operation adds to / removes from each affected
      query (and no entry for the others);
    * ``probe_r(a, b)`` / ``probe_s(b, c)``: the same matches as :class:`Matches`, tables unchanged;
    * ``counters``, ``stats()``, ``explain()``.
    """

    name = "?"

    def __init__(self):
        self.tables = SelectJoinTables()
        self.queries = _Queries()
        self.counters = _new_counters()

    # ---- queries ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.queries)

    def add_query(self, qid: Hashable, a_lo=-_INF, a_hi=_INF, c_lo=-_INF, c_hi=_INF) -> None:
        """Register ``σ_{a∈[a_lo,a_hi]} R ⋈_b σ_{c∈[c_lo,c_hi]} S`` (None = open end)."""
        bounds = self.queries.validate(qid, a_lo, a_hi, c_lo, c_hi)
        self._index_add(self.queries.add(qid, *bounds))

    def add_queries(self, rows: Iterable) -> None:
        """Register many ``(qid, a_lo, a_hi, c_lo, c_hi)`` rows (all validated first: on an error none is)."""
        rows = list(rows)
        seen = set()
        checked = []
        for qid, *bounds in rows:
            if qid in seen:
                raise DuplicateSubscription(f"query id {qid!r} appears twice")
            seen.add(qid)
            checked.append((qid, *self.queries.validate(qid, *bounds)))
        slots = np.fromiter((self.queries.add(*row) for row in checked), dtype=np.int64, count=len(checked))
        self._index_add_many(slots)

    def remove_query(self, qid: Hashable) -> None:
        self._index_remove(self.queries.remove(qid))

    def query(self, qid) -> SelectJoinQuery:
        if qid not in self.queries:
            raise UnknownSubscription(f"unknown query id {qid!r}")
        return self.queries.query(qid)

    # index hooks (subclasses)
    def _index_add(self, slot: int) -> None:
        pass

    def _index_add_many(self, slots: np.ndarray) -> None:
        for s in slots.tolist():
            self._index_add(s)

    def _index_remove(self, slot: int) -> None:
        pass

    def _matches(self, d: int, x: float, b) -> Matches:
        return self._probe(d, x, b)

    def _process(self, d: int, insert: bool, key, x, b) -> dict:
        table = self.tables.table(d)
        if insert:
            x = _value(x, "R.a" if d == R_SIDE else "S.c")
            b = _join_value(b)
            try:
                dup = key in table.rows
            except TypeError:
                raise BadUpdate(f"{table.name}: key {key!r} is not hashable") from None
            if dup:
                raise BadUpdate(f"{table.name}: duplicate key {key!r}")
        else:
            try:
                x, b = table.lookup(key)
            except TypeError:
                raise BadUpdate(f"{table.name}: key {key!r} is not hashable") from None
        m = self._probe(d, x, b)
        if insert:
            table.insert(key, x, b)
        else:
            table.delete(key)
        return self._emit(d, key, m)

    def _probe(self, d: int, x: float, b) -> Matches:
        c = self.counters
        c["events"] += 1
        c["index_probes"] += 1  # the lookup of b in the partner's join index
        run = self.tables.partner(d).runs.get(b)
        slots, starts, stops = self._probe_run(d, x, run)
        if slots.size:
            c["affected"] += int(slots.size)
            c["results"] += int((stops - starts).sum())
        return Matches(slots, starts, stops, run)

    def _probe_run(self, d: int, x: float, run: _Run | None):
        raise NotImplementedError

    def _emit(self, d: int, key, m: Matches) -> dict:
        out = {}
        if not m.slots.size:
            return out
        qid_of = self.queries.qid_of
        keys = m.run.keys
        triples = zip(m.slots.tolist(), m.starts.tolist(), m.stops.tolist())
        if d == R_SIDE:
            for s, i, j in triples:
                out[qid_of[s]] = [(key, k) for k in keys[i:j]]
        else:
            for s, i, j in triples:
                out[qid_of[s]] = [(k, key) for k in keys[i:j]]
        return out

    # ---- reporting --------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        return {"algorithm": self.name, "queries": len(self.queries), "R": len(self.tables.R),
                "S": len(self.tables.S), **self.counters}

    def explain(self) -> str:
        s = self.stats()
        return f"{self.name}: " + ", ".join(f"{k}={v}" for k, v in s.items() if k != "algorithm")


# --------------------------------------------------------------------------------------------------------------
# NAIVE and SJ-JoinFirst-S (003 §4.6.2, §4.5.1)
# --------------------------------------------------------------------------------------------------------------
class SJNaive(SelectJoinAlgorithm):
    """NAIVE (003 §4.6.2): materialise the join result ordered by the partner's selection value, then evaluate
    both local selections of every query over it (a range check and a binary search per query, every event,
    even when nothing joins).  O(log m + n log k_j + k)."""

    name = "NAIVE"

    def _probe_run(self, d, x, run):
        q = self.queries
        live = q.live()
        c = self.counters
        # the intermediate result as a list ordered by S.C (003 §4.6.2); the run is kept in that order, so the
        # copy is the materialisation
        X = np.array(run.xs, dtype=np.float64) if run is not None else _EMPTY_F
        c["join_points"] += X.size
        c["queries_visited"] += live.size
        c["index_probes"] += live.size
        if not live.size:
            return _NO_MATCH
        o, p = _OWN[d], _PARTNER[d]
        own = (q.lo[o][live] <= x) & (x <= q.hi[o][live])
        starts, stops = _run_hits(X, q.lo[p][live], q.hi[p][live])
        keep = own & (stops > starts)
        return live[keep], starts[keep], stops[keep]


class SJJoinFirstS(SelectJoinAlgorithm):
    """SJ-JoinFirst-S (003 §4.5.1): join through the two-tier index on (B, selection value), then probe the
    join run with each query's partner range and check its own range.  O(log|S| + |Q| log k_j + k); nothing
    is visited when no tuple joins."""

    name = "SJ-JoinFirst-S"

    def _probe_run(self, d, x, run):
        if run is None:
            return _NO_MATCH
        q = self.queries
        live = q.live()
        c = self.counters
        X = run.array()
        c["join_points"] += X.size
        c["queries_visited"] += live.size
        c["index_probes"] += live.size
        if not live.size:
            return _NO_MATCH
        o, p = _OWN[d], _PARTNER[d]
        starts, stops = _run_hits(X, q.lo[p][live], q.hi[p][live])
        keep = (stops > starts) & (q.lo[o][live] <= x) & (x <= q.hi[o][live])
        return live[keep], starts[keep], stops[keep]


# --------------------------------------------------------------------------------------------------------------
# RectIndex and SJ-JoinFirst-E (003 §4.3.2, §4.5.1)
# --------------------------------------------------------------------------------------------------------------
_ABSENT, _STATIC, _DELTA = 0, 1, 2


def _grown(arr: np.ndarray, need: int) -> np.ndarray:
    if need <= arr.size:
        return arr
    new = np.zeros(max(need, 2 * arr.size), dtype=arr.dtype)
    new[:arr.size] = arr
    return new


def _finite(v: np.ndarray) -> np.ndarray:
    """Range ends clipped to finite values: sort keys only (centres of half-open ranges stay ordered)."""
    return np.clip(v, -1e300, 1e300)


class _StaticWithDelta:
    """What :class:`RectIndex` and :class:`_SSILayout` share: a static layout of the queries present at the last
    build, a delta of queries added since (checked by brute force) and tombstones for those removed; ``where``
    tells for each slot which part holds it.  A rebuild is due once the delta or the tombstones pass
    ``limit()`` (default max(64, n/32)), so it is amortised over Ω(n/32) query operations (module docstring)."""

    def __init__(self, queries: _Queries, delta_limit: int | None, leaf_size: int | None):
        self.q = queries
        self.delta_limit_arg = delta_limit
        self.leaf_size_arg = leaf_size
        self.where = np.zeros(64, dtype=np.int8)
        self.delta: dict = {}
        self._delta_arr: np.ndarray | None = None
        self.n_static = 0
        self.dead = 0
        self.builds = 0

    def add(self, slot: int) -> None:
        self.where = _grown(self.where, slot + 1)
        self.where[slot] = _DELTA
        self.delta[slot] = None
        self._delta_arr = None

    def remove(self, slot: int) -> None:
        w = self.where[slot]
        if w == _STATIC:
            self.dead += 1
        elif w == _DELTA:
            del self.delta[slot]
            self._delta_arr = None
        self.where[slot] = _ABSENT

    def limit(self) -> int:
        return self.delta_limit_arg if self.delta_limit_arg is not None else max(64, self.n_static // 32)

    def _over_limit(self) -> bool:
        lim = self.limit()
        return len(self.delta) > lim or self.dead > max(lim, self.n_static // 4)


class RectIndex(_StaticWithDelta):
    """A two-level STR-packed R-tree over the query rectangles ``[lo[C], hi[C]] × [lo[A], hi[A]]`` of a
    :class:`_Queries` store, with a delta of recent insertions and tombstones (module docstring).

    ``stab(px, py)`` returns ``(point index, slot)`` pairs of every rectangle containing (px[i], py[i]) (x = the
    S.c coordinate, y = the R.a coordinate) and adds its work to ``counters``."""

    def __init__(self, queries: _Queries, *, leaf_size: int | None = None, delta_limit: int | None = None):
        super().__init__(queries, delta_limit, leaf_size)
        self._build_static(_EMPTY_I)

    def __len__(self) -> int:
        return self.n_static - self.dead + len(self.delta)

    @classmethod
    def of(cls, queries: _Queries, **options) -> RectIndex:
        """The index of every live query of ``queries``, built in bulk (no delta): a select-join group's
        subscription shard (``joins/shards.py``)."""
        index = cls(queries, **options)
        slots = queries.live()
        index.where = _grown(index.where, int(slots.max()) + 1 if slots.size else 0)
        index.where[slots] = _STATIC
        index._build_static(slots)
        return index

    def stale(self) -> bool:
        return self._over_limit()

    def rebuild(self) -> None:
        slots = np.flatnonzero(self.where != _ABSENT)
        self.where[:] = _ABSENT
        self.where[slots] = _STATIC
        self.delta.clear()
        self._delta_arr = None
        self._build_static(slots)
        self.builds += 1

    def _build_static(self, slots: np.ndarray) -> None:
        n = slots.size
        self.n_static = n
        self.dead = 0
        q = self.q
        M = self.leaf_size_arg or max(16, isqrt(max(n, 1)))
        if n:
            # STR packing: sort by x centre into vertical slices of whole leaves, each slice by y centre
            cx = (_finite(q.lo[C][slots]) + _finite(q.hi[C][slots])) * 0.5
            cy = (_finite(q.lo[A][slots]) + _finite(q.hi[A][slots])) * 0.5
            leaves = -(-n // M)
            per_slice = M * -(-leaves // max(1, isqrt(leaves)))
            by_x = np.argsort(cx, kind="stable")
            slice_of = np.arange(n) // per_slice
            order = by_x[np.lexsort((cy[by_x], slice_of))]
            slots = slots[order]
        self.s_slot = slots
        self.s_xlo, self.s_xhi = q.lo[C][slots], q.hi[C][slots]
        self.s_ylo, self.s_yhi = q.lo[A][slots], q.hi[A][slots]
        starts = np.arange(0, n, M, dtype=np.int64)
        self.leaf_start = starts
        self.leaf_len = np.minimum(M, n - starts)
        if n:
            self.l_xlo = np.minimum.reduceat(self.s_xlo, starts)
            self.l_xhi = np.maximum.reduceat(self.s_xhi, starts)
            self.l_ylo = np.minimum.reduceat(self.s_ylo, starts)
            self.l_yhi = np.maximum.reduceat(self.s_yhi, starts)
        else:
            self.l_xlo = self.l_xhi = self.l_ylo = self.l_yhi = _EMPTY_F

    def stab(self, px: np.ndarray, py: np.ndarray, counters: dict) -> tuple[np.ndarray, np.ndarray]:
        if self.stale():
            self.rebuild()
            counters["rebuilds"] += 1
        npts = px.size
        counters["index_probes"] += npts
        parts_p, parts_s = [], []
        nleaf = self.leaf_start.size
        if nleaf and npts:
            hit = ((self.l_xlo[:, None] <= px) & (px <= self.l_xhi[:, None])
                   & (self.l_ylo[:, None] <= py) & (py <= self.l_yhi[:, None]))
            counters["nodes_visited"] += nleaf * npts
            leaf, pt = np.nonzero(hit)
            if leaf.size:
                lens = self.leaf_len[leaf]
                cand = concat_ranges(self.leaf_start[leaf], lens)
                cpt = np.repeat(pt, lens)
                counters["queries_visited"] += cand.size
                x = px[cpt]
                y = py[cpt]
                ok = ((self.s_xlo[cand] <= x) & (x <= self.s_xhi[cand])
                      & (self.s_ylo[cand] <= y) & (y <= self.s_yhi[cand]))
                s = self.s_slot[cand[ok]]
                p = cpt[ok]
                if self.dead:
                    live = self.where[s] == _STATIC
                    s, p = s[live], p[live]
                parts_p.append(p)
                parts_s.append(s)
        if self.delta and npts:
            if self._delta_arr is None:
                self._delta_arr = np.fromiter(self.delta, dtype=np.int64, count=len(self.delta))
            ds = self._delta_arr
            q = self.q
            counters["queries_visited"] += ds.size * npts
            ok = ((q.lo[C][ds][:, None] <= px) & (px <= q.hi[C][ds][:, None])
                  & (q.lo[A][ds][:, None] <= py) & (py <= q.hi[A][ds][:, None]))
            i, p = np.nonzero(ok)
            parts_p.append(p)
            parts_s.append(ds[i])
        if not parts_p:
            return _EMPTY_I, _EMPTY_I
        return np.concatenate(parts_p), np.concatenate(parts_s)


class SJJoinFirstE(SelectJoinAlgorithm):
    """SJ-JoinFirst-E (003 §4.3.2 "SJ-JoinFirst", §4.5.1): join r with S through the join index, then probe the
    R-tree of all query rectangles with each join result point (s.c, r.a).  O(log m + m'·g(n) + k)."""

    name = "SJ-JoinFirst-E"

    def __init__(self, *, delta_limit: int | None = None, leaf_size: int | None = None):
        super().__init__()
        self.rects = RectIndex(self.queries, leaf_size=leaf_size, delta_limit=delta_limit)

    def _index_add(self, slot):
        self.rects.add(slot)

    def _index_add_many(self, slots):
        for s in slots.tolist():
            self.rects.add(s)

    def _index_remove(self, slot):
        self.rects.remove(slot)

    def _probe_run(self, d, x, run):
        if run is None:
            return _NO_MATCH
        X = run.array()
        c = self.counters
        c["join_points"] += X.size
        xs = np.full(X.size, x)
        # the join result points in the product space S.C × R.A (Figure 4.5)
        pt, slots = self.rects.stab(X, xs, c) if d == R_SIDE else self.rects.stab(xs, X, c)
        if not slots.size:
            return _NO_MATCH
        # the points are in run order and a rectangle holds a consecutive run of them (all share the own
        # coordinate): each query's [first, last + 1)
        order = np.lexsort((pt, slots))
        s, p = slots[order], pt[order]
        cut = np.flatnonzero(s[1:] != s[:-1]) + 1
        first = np.concatenate(([0], cut))
        last = np.concatenate((cut - 1, [s.size - 1]))
        return s[first], p[first], p[last] + 1

    def stats(self):
        return {**super().stats(), "rtree_leaves": int(self.rects.leaf_start.size),
                "rtree_delta": len(self.rects.delta)}


# --------------------------------------------------------------------------------------------------------------
# SJ-SelectFirst (003 §4.3.2)
# --------------------------------------------------------------------------------------------------------------
class SJSelectFirst(SelectJoinAlgorithm):
    """SJ-SelectFirst (003 §4.3.2): stab the index of own ranges (R.A ranges for an R tuple) with the tuple's
    value, then search the join run for each such query's partner range.  O(log n + n' log m + k)."""

    name = "SJ-SelectFirst"

    def __init__(self, *, delta_limit: int | None = None):
        super().__init__()
        # per direction, the own ranges as points (lo, hi): stab(x) = lo <= x <= hi (the paper's priority
        # search tree query)
        self.own_index = (PointIndex2D(merge_threshold=delta_limit), PointIndex2D(merge_threshold=delta_limit))

    def _index_add(self, slot):
        self._index_add_many(np.array([slot], dtype=np.int64))

    def _index_add_many(self, slots):
        q = self.queries
        for d in (R_SIDE, S_SIDE):
            o = _OWN[d]
            self.own_index[d].add_many(slots, q.lo[o][slots], q.hi[o][slots])

    def _index_remove(self, slot):
        for idx in self.own_index:
            idx.remove_many(np.array([slot], dtype=np.int64))

    def _probe_run(self, d, x, run):
        X = run.array() if run is not None else _EMPTY_F
        return _select_first(self.own_index[d], self.queries, d, x, X, self.counters)


# --------------------------------------------------------------------------------------------------------------
# SJ-SSI (003 §4.3.2, Figure 4.5)
# --------------------------------------------------------------------------------------------------------------
class _SSILayout(_StaticWithDelta):
    """The per-group structures of SJ-SSI for one direction, as segments of flat arrays (module docstring), plus
    a brute-force delta and tombstones.

    Group j (stabbing point p_j) is cut into *slabs*: its members in order of the centre of their own range
    (R.a for an R tuple), ``leaf_size`` at a time; a slab keeps the hull of its own ranges (an R-tree leaf's
    MBR in the own coordinate; in the partner coordinate every member crosses p_j).  Inside a slab the members
    are sorted by the partner range's low end (``l_*``) and, separately, by its high end descending (``r_*``),
    each keyed ``slab * (U + 1) + rank(value)``, so one ``searchsorted`` per side finds, in every slab at once,
    the prefix of members whose partner range reaches q1 (resp. q2)."""

    def __init__(self, queries: _Queries, d: int, delta_limit: int | None, leaf_size: int | None = None):
        super().__init__(queries, delta_limit, leaf_size)
        self.own = _OWN[d]
        self.partner = _PARTNER[d]
        self.built = False
        self.points = _EMPTY_F
        self.leaf_group = self.leaf_start = _EMPTY_I
        self.leaf_lo = self.leaf_hi = _EMPTY_F
        self.l_slot = self.l_key = self.r_slot = self.r_key = _EMPTY_I
        self.l_uniq = self.r_uniq = _EMPTY_F

    def __len__(self) -> int:
        return self.n_static - self.dead + len(self.delta)

    def __contains__(self, slot: int) -> bool:
        return slot < self.where.size and self.where[slot] != _ABSENT

    @property
    def groups(self) -> int:
        return int(self.points.size)

    def stale(self) -> bool:
        return not self.built or self._over_limit()

    def build(self, groups) -> None:
        """Lay out ``groups`` (StabbingGroup-like: ``.point``, ``.members`` = slots); they become the whole
        content (delta and tombstones cleared)."""
        points, members = [], []
        for g in groups:
            if g.members:
                points.append(g.point)
                members.append(np.fromiter(g.members, dtype=np.int64, count=len(g.members)))
        sizes = np.fromiter((m.size for m in members), dtype=np.int64, count=len(members))
        slots = np.concatenate(members) if members else _EMPTY_I
        n = int(slots.size)
        if n:
            self.where = _grown(self.where, int(slots.max()) + 1)
        self.where[:] = _ABSENT
        self.where[slots] = _STATIC
        self.delta.clear()
        self._delta_arr = None
        self.n_static = n
        self.dead = 0
        self.points = np.asarray(points, dtype=np.float64)
        q, o, p = self.q, self.own, self.partner
        gidx = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
        # slabs: each group's members by the centre of their own range, leaf_size at a time
        # √n / 4 per slab: narrow A hulls (measured at 100K queries: ~2-3x fewer members visited than √n, for
        # 4x more hulls, which one vectorised comparison checks)
        M = self.leaf_size_arg or max(16, isqrt(max(n, 1)) // 4)
        centre = _finite(q.lo[o][slots]) + _finite(q.hi[o][slots])
        order = np.lexsort((centre, gidx))
        slots, gidx = slots[order], gidx[order]
        seg = np.concatenate(([0], np.cumsum(sizes)))
        per_group = -(-sizes // M)
        first_leaf = np.concatenate(([0], np.cumsum(per_group)))
        leaf = first_leaf[gidx] + (np.arange(n, dtype=np.int64) - seg[gidx]) // M if n else _EMPTY_I
        nleaf = int(first_leaf[-1])
        self.leaf_group = np.repeat(np.arange(sizes.size, dtype=np.int64), per_group)
        self.leaf_start = np.searchsorted(leaf, np.arange(nleaf, dtype=np.int64)) if nleaf else _EMPTY_I
        if nleaf:
            self.leaf_lo = np.minimum.reduceat(q.lo[o][slots], self.leaf_start)
            self.leaf_hi = np.maximum.reduceat(q.hi[o][slots], self.leaf_start)
        else:
            self.leaf_lo = self.leaf_hi = _EMPTY_F
        # left probe (q1, x): members with partner_lo <= q1, a prefix of each slab sorted by partner_lo
        self.l_uniq, self.l_slot, self.l_key = self._keyed(leaf, slots, q.lo[p][slots])
        # right probe (q2, x): members with partner_hi >= q2, i.e. -partner_hi <= -q2
        self.r_uniq, self.r_slot, self.r_key = self._keyed(leaf, slots, -q.hi[p][slots])
        self.built = True
        self.builds += 1

    @staticmethod
    def _keyed(leaf, slots, values):
        uniq = np.unique(values)
        key = leaf * (uniq.size + 1) + np.searchsorted(uniq, values)
        order = np.argsort(key, kind="stable")
        return uniq, slots[order], key[order]

    def _prefix(self, leaves, bound, uniq, slot_by_key, keys):
        """Members of the given slabs whose key value is <= the slab's bound: each slab's prefix."""
        t = np.searchsorted(uniq, bound, side="right")
        ends = np.searchsorted(keys, leaves * (uniq.size + 1) + t, side="left")
        starts = self.leaf_start[leaves]
        return slot_by_key[concat_ranges(starts, ends - starts)], ends - starts

    def probe(self, x: float, X: np.ndarray, counters: dict):
        """Slots of this layout's queries with ``x`` in their own range and a value of X in their partner range,
        with their slices of X (003 §4.3.2)."""
        q = self.q
        o, p = self.own, self.partner
        parts = []
        kj = X.size
        tau = self.points.size
        if tau and kj:
            P = self.points
            # the B-tree lookups (b, p_j): the join result points nearest each stabbing point (Figure 4.5)
            i1 = np.searchsorted(X, P, side="right") - 1  # q1: largest value <= p_j
            i2 = np.searchsorted(X, P, side="left")  # q2: smallest value >= p_j
            has_l = i1 >= 0
            q1 = np.where(has_l, X[np.maximum(i1, 0)], np.nan)
            # "In the event that either q1 or q2 coincides with p_j, only one probe is needed": q1 = p_j = q2,
            # and the left probe then takes the whole group (every partner_lo <= p_j)
            has_r = (i2 < kj) & ~(q1 == P)
            q2 = X[np.minimum(i2, kj - 1)]
            counters["index_probes"] += tau + int(has_l.sum()) + int(has_r.sum())
            counters["join_points"] += int(has_l.sum()) + int(has_r.sum())
            # the probe points (q1, x) and (q2, x) against the slabs' hulls in the own coordinate
            lg = self.leaf_group
            own_ok = (self.leaf_lo <= x) & (x <= self.leaf_hi)
            counters["nodes_visited"] += lg.size
            left = np.flatnonzero(own_ok & has_l[lg])
            right = np.flatnonzero(own_ok & has_r[lg])
            cand_l, _ = self._prefix(left, q1[lg[left]], self.l_uniq, self.l_slot, self.l_key)
            cand_r, len_r = self._prefix(right, -q2[lg[right]], self.r_uniq, self.r_slot, self.r_key)
            if cand_r.size:
                # a member holding both q1 and q2 is reported by the left probe already
                q1_of = np.repeat(q1[lg[right]], len_r)
                cand_r = cand_r[~(q.lo[p][cand_r] <= q1_of)]
            cand = np.concatenate((cand_l, cand_r)) if cand_r.size else cand_l
            counters["queries_visited"] += cand.size
            if self.dead and cand.size:
                cand = cand[self.where[cand] == _STATIC]
            if cand.size:
                cand = cand[(q.lo[o][cand] <= x) & (x <= q.hi[o][cand])]
                starts, stops = _run_hits(X, q.lo[p][cand], q.hi[p][cand])
                parts.append((cand, starts, stops))
        if self.delta and kj:
            if self._delta_arr is None:
                self._delta_arr = np.fromiter(self.delta, dtype=np.int64, count=len(self.delta))
            ds = self._delta_arr
            counters["queries_visited"] += ds.size
            starts, stops = _run_hits(X, q.lo[p][ds], q.hi[p][ds])
            keep = (stops > starts) & (q.lo[o][ds] <= x) & (x <= q.hi[o][ds])
            parts.append((ds[keep], starts[keep], stops[keep]))
        return _cat(parts)


class SJSSI(SelectJoinAlgorithm):
    """SJ-SSI (003 §4.3.2, Figure 4.5, Theorem 15) on every group of a dynamic stabbing partition (003 §4.2.3) of
    the partner ranges, one per direction (C ranges for R tuples, A ranges for S tuples).

    ``epsilon``: the partition's ε (Lemma 12); ``delta_limit``: queries added or removed since the last layout
    build that trigger a rebuild (default max(64, n/32)); ``leaf_size``: queries per slab (default
    max(16, √n / 4))."""

    name = "SJ-SSI"

    def __init__(self, *, epsilon: float = 0.5, delta_limit: int | None = None, leaf_size: int | None = None):
        super().__init__()
        self.partitions = tuple(DynamicStabbingPartition(epsilon) for _ in (R_SIDE, S_SIDE))
        self.layouts = tuple(_SSILayout(self.queries, d, delta_limit, leaf_size) for d in (R_SIDE, S_SIDE))

    def _index_add(self, slot):
        q = self.queries
        for d in (R_SIDE, S_SIDE):
            p = _PARTNER[d]
            self.partitions[d].insert(slot, q.lo[p, slot], q.hi[p, slot])
            self.layouts[d].add(slot)

    def _index_remove(self, slot):
        for d in (R_SIDE, S_SIDE):
            self.partitions[d].delete(slot)
            self.layouts[d].remove(slot)

    def compact(self, *, repartition: bool = False) -> None:
        """Rebuild both layouts from the partitions' current groups now (after ``partition.rebuild()``, i.e. the
        canonical partition of Lemma 10, when ``repartition``)."""
        for d in (R_SIDE, S_SIDE):
            if repartition:
                self.partitions[d].rebuild()
            self._build(d)

    def _build(self, d: int) -> None:
        self.layouts[d].build(self.partitions[d].groups())
        self.counters["rebuilds"] += 1

    def _probe_run(self, d, x, run):
        layout = self.layouts[d]
        if layout.stale():
            self._build(d)
        if run is None:  # nothing joins: the lookups (b, p_j) find no tuple
            return _NO_MATCH
        return layout.probe(x, run.array(), self.counters)

    def stats(self):
        return {**super().stats(),
                "stabbing_number": tuple(part.stabbing_number for part in self.partitions),
                "layout_groups": tuple(lay.groups for lay in self.layouts),
                "layout_delta": tuple(len(lay.delta) for lay in self.layouts)}


# --------------------------------------------------------------------------------------------------------------
# Hotspots with SJ-SSI, scattered queries with SJ-SelectFirst (003 §4.3.2, §4.6.3)
# --------------------------------------------------------------------------------------------------------------
class SJHotspot(SelectJoinAlgorithm):
    """HOTSPOT-BASED (003 §4.6.3): per direction an α-hotspot tracker (Theorem 12) over the partner ranges; the
    queries of hotspot groups are processed with SJ-SSI, the scattered ones with SJ-SelectFirst (module
    docstring: lazy reclassification).

    ``alpha``, ``epsilon``: the tracker's; ``delta_limit``, ``leaf_size``: as :class:`SJSSI`, the first also
    bounding the tracker moves not yet applied."""

    name = "SJ-Hotspot"

    def __init__(self, *, alpha: float = 0.01, epsilon: float = 0.5, delta_limit: int | None = None,
                 leaf_size: int | None = None):
        super().__init__()
        self.trackers = tuple(HotspotTracker(alpha, epsilon) for _ in (R_SIDE, S_SIDE))
        self.layouts = tuple(_SSILayout(self.queries, d, delta_limit, leaf_size) for d in (R_SIDE, S_SIDE))
        self.scattered_index = (PointIndex2D(merge_threshold=delta_limit),
                                PointIndex2D(merge_threshold=delta_limit))
        self._moves_applied = [0, 0]

    def _index_add(self, slot):
        q = self.queries
        for d in (R_SIDE, S_SIDE):
            p, o = _PARTNER[d], _OWN[d]
            upd = self.trackers[d].insert(slot, q.lo[p, slot], q.hi[p, slot])
            if upd.hot:
                self.layouts[d].add(slot)
            else:
                self.scattered_index[d].add_many(np.array([slot]), q.lo[o, slot:slot + 1], q.hi[o, slot:slot + 1])

    def _index_add_many(self, slots):
        # a bulk load of the trackers (canonical partition + one round of promotions), then each query to its
        # side: the SSI layout for the hot, the SelectFirst index for the scattered (003 §4.6.3)
        q = self.queries
        for d in (R_SIDE, S_SIDE):
            p, o = _PARTNER[d], _OWN[d]
            tracker = self.trackers[d]
            tracker.insert_many(zip(slots.tolist(), q.lo[p, slots].tolist(), q.hi[p, slots].tolist()))
            hot = np.fromiter((tracker.is_hot(s) for s in slots.tolist()), dtype=bool, count=slots.size)
            for s in slots[hot].tolist():
                self.layouts[d].add(s)
            cold = slots[~hot]
            if cold.size:
                self.scattered_index[d].add_many(cold, q.lo[o, cold], q.hi[o, cold])

    def _index_remove(self, slot):
        for d in (R_SIDE, S_SIDE):
            self.trackers[d].delete(slot)
            if slot in self.layouts[d]:
                self.layouts[d].remove(slot)
            else:
                self.scattered_index[d].remove_many(np.array([slot]))

    def _stale(self, d: int) -> bool:
        lay = self.layouts[d]
        return lay.stale() or self.trackers[d].moves - self._moves_applied[d] > lay.limit()

    def reclassify(self, d: int | None = None) -> None:
        """Apply the tracker's current classification: the SSI layout becomes its hotspots, the queries that
        changed side move between the layout and the SelectFirst index."""
        for side in ((R_SIDE, S_SIDE) if d is None else (d,)):
            lay, idx, tr = self.layouts[side], self.scattered_index[side], self.trackers[side]
            hot = tr.hotspots()
            before = np.flatnonzero(lay.where != _ABSENT)
            lay.build(hot)
            after = np.flatnonzero(lay.where != _ABSENT)
            o = _OWN[side]
            q = self.queries
            to_sf = np.setdiff1d(before, after, assume_unique=True)
            to_ssi = np.setdiff1d(after, before, assume_unique=True)
            if to_ssi.size:
                idx.remove_many(to_ssi)
            if to_sf.size:
                idx.add_many(to_sf, q.lo[o][to_sf], q.hi[o][to_sf])
            self._moves_applied[side] = tr.moves
            self.counters["rebuilds"] += 1

    def _probe_run(self, d, x, run):
        if self._stale(d):
            self.reclassify(d)
        X = run.array() if run is not None else _EMPTY_F
        c = self.counters
        # the join lookup is shared by the hot and the cold part (003 §4.5.1, C_Hotspot)
        hot = self.layouts[d].probe(x, X, c) if X.size else _NO_MATCH
        cold = _select_first(self.scattered_index[d], self.queries, d, x, X, c)
        return _cat((hot, cold))

    def check(self) -> None:
        """Raise AssertionError unless every registered query is in exactly one of the SSI layout and the
        SelectFirst index, per direction, and the trackers' invariants (003 §4.2.2) hold."""
        live = set(self.queries.live().tolist())
        for d in (R_SIDE, S_SIDE):
            lay = self.layouts[d]
            in_ssi = set(np.flatnonzero(lay.where != _ABSENT).tolist())
            in_sf = set(self.scattered_index[d].points()[0].tolist())
            if in_ssi & in_sf or (in_ssi | in_sf) != live:
                raise AssertionError(f"direction {d}: the SSI and SelectFirst parts do not partition the queries")
            self.trackers[d].check_invariants()

    def stats(self):
        return {**super().stats(),
                "hotspots": tuple(len(tr.hotspots()) for tr in self.trackers),
                "hot_queries": tuple(len(lay) for lay in self.layouts),
                "scattered_queries": tuple(len(ix) for ix in self.scattered_index)}


# --------------------------------------------------------------------------------------------------------------
# Reformulation (000 §4)
# --------------------------------------------------------------------------------------------------------------
class Delta(NamedTuple):
    """One published update: ``side`` 'R' / 'S', ``op`` 'insert' / 'delete', the tuple's key, its selection
    value ``x`` (R.a or S.c) and join value ``b`` (a deletion may leave both None: the server looks them up)."""

    side: str
    op: str
    key: Hashable
    x: float | None = None
    b: object = None


class SelectJoinMessage(NamedTuple):
    """A reformulated notification (000 §4): one result tuple r·s of δ ⋈ partner.

    ``type``: :data:`MESSAGE_TYPE` (the TYPE field that tells subscription kinds apart on a shared network);
    ``sign``: +1 the tuple enters every matching subscription's result, -1 it leaves it."""

    type: str
    sign: int
    r_key: Hashable
    s_key: Hashable
    b: object
    a: float
    c: float


def reformulate(delta: Delta, tables: SelectJoinTables) -> list[SelectJoinMessage]:
    """The messages of one update (000 §4: "reformulate each δR into a series of notification messages, each
    containing a result tuple in {δR} ⋈ S"; δS symmetrically), in the partner's selection-value order.  Reads
    ``tables`` (the server's state) without changing it; the subscriptions are not consulted.

    >>> t = SelectJoinTables(); t.S.insert("s1", 6.0, 1); t.S.insert("s2", 2.0, 1); t.S.insert("s3", 6.0, 2)
    >>> [(m.r_key, m.s_key, m.a, m.c) for m in reformulate(Delta("R", "insert", "r1", 3.0, 1), t)]
    [('r1', 's2', 3.0, 2.0), ('r1', 's1', 3.0, 6.0)]
    """
    side = _side(delta.side)
    if delta.op == "insert":
        x, b = _value(delta.x, "selection value"), _join_value(delta.b)
        sign = 1
    elif delta.op == "delete":
        x, b = tables.table(side).lookup(delta.key)
        sign = -1
    else:
        raise BadUpdate(f"op must be 'insert' or 'delete', not {delta.op!r}")
    run = tables.partner(side).runs.get(b)
    if run is None:
        return []
    if side == R_SIDE:
        return [SelectJoinMessage(MESSAGE_TYPE, sign, delta.key, k, b, x, c) for c, k in zip(run.xs, run.keys)]
    return [SelectJoinMessage(MESSAGE_TYPE, sign, k, delta.key, b, a, x) for a, k in zip(run.xs, run.keys)]


def matches(message: SelectJoinMessage, query: SelectJoinQuery) -> bool:
    """The reformulated, stateless subscription ``p ∧ pR ∧ pS`` over a message (000 §4): its TYPE, pR =
    ``a_lo <= a <= a_hi``, pS = ``c_lo <= c <= c_hi``; the join predicate R.b = S.b holds by construction of the
    message and this class has no further predicate p over the joined tuple.

    >>> m = SelectJoinMessage(MESSAGE_TYPE, 1, "r1", "s1", 1, 3.0, 6.0)
    >>> matches(m, SelectJoinQuery("q", 0, 10, 5, 7)), matches(m, SelectJoinQuery("q", 0, 10, 7, 9))
    (True, False)
    """
    return (message.type == MESSAGE_TYPE and query.a_lo <= message.a <= query.a_hi
            and query.c_lo <= message.c <= query.c_hi)


class SJReformulated(SelectJoinAlgorithm):
    """The reformulated mode (000 §4) behind the common interface: the server turns each update into
    :func:`reformulate` messages, every subscription evaluates :func:`matches` on every message (what the
    content-based network does); a subscriber applies the messages it receives.  Python loops: an oracle."""

    name = "Reformulated"

    def _process(self, d, insert, key, x, b):
        side = "R" if d == R_SIDE else "S"
        table = self.tables.table(d)
        if insert:
            x = _value(x, "R.a" if d == R_SIDE else "S.c")
            b = _join_value(b)
            if key in table.rows:
                raise BadUpdate(f"{table.name}: duplicate key {key!r}")
        delta = Delta(side, "insert" if insert else "delete", key, x, b)
        messages = reformulate(delta, self.tables)
        self.tables.apply(delta)
        c = self.counters
        c["events"] += 1
        c["join_points"] += len(messages)
        out: dict = {}
        subs = [self.queries.query(qid) for qid in self.queries.slot_of]
        c["queries_visited"] += len(subs) * len(messages)
        for m in messages:
            for sub in subs:
                if matches(m, sub):
                    out.setdefault(sub.qid, []).append((m.r_key, m.s_key))
        c["affected"] += len(out)
        c["results"] += sum(map(len, out.values()))
        return out

    def _probe_run(self, d, x, run):
        # probe_r / probe_s: the same messages as arrays (message i = entry i of the run)
        if run is None:
            return _NO_MATCH
        q = self.queries
        slots, starts, stops = [], [], []
        for s in q.live().tolist():
            sub = q.query(q.qid_of[s])
            hit = [i for i, v in enumerate(run.xs)
                   if matches(SelectJoinMessage(MESSAGE_TYPE, 1, None, None, None,
                                                *((x, v) if d == R_SIDE else (v, x))), sub)]
            if hit:
                slots.append(s)
                starts.append(hit[0])
                stops.append(hit[-1] + 1)
        return (np.asarray(slots, dtype=np.int64), np.asarray(starts, dtype=np.int64),
                np.asarray(stops, dtype=np.int64))


#: every algorithm by its name in the paper
ALGORITHMS: dict[str, type[SelectJoinAlgorithm]] = {
    cls.name: cls for cls in (SJNaive, SJJoinFirstS, SJJoinFirstE, SJSelectFirst, SJSSI, SJHotspot, SJReformulated)}
