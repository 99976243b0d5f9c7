"""The batch-at-a-time family executor (issue 18): a micro-batch of events, in end-time order, matched
against each query family's parameter table with vectorised numpy / Arrow operations (pure; no Spark).

``FamilyEngine`` (``operators/events/families.py``) runs the queries of one template as one automaton
whose instances carry the rows (queries) they are alive for, but takes one event per Python call: 30–60 µs
per family and event at 100,000 queries.  ``BatchEngine`` *is* a ``FamilyEngine`` (same API: register /
unregister / process / flush / run / snapshot / restore / stats ...) whose families of the common shapes
advance all their instances over a whole batch at once; every other query (other shapes, PUBLISH,
non-left-deep) runs on the per-event path unchanged, in the same executor.

**Which families run vectorised** (``plan_family``; the rest run per event): one NEXT or FOLD node
(004 §2.3: start node, one binary node, end node) whose start and right input are the same raw stream
through FILTERs only, with θ made of

- at most one instance-index equality ``$2.X = $1.Y`` (NEXT, FOLD) or ``$2.X = $.Y`` (FOLD) (004 §3.2
  "identifying affected instances": the dynamic equality predicate), or, for NEXT, one slotted static
  equality ``$2.X = c`` (the family's rows keyed by their constant, S2's ``$2.Name = 'MSFT'``);
- static conjuncts (reading only the new event, 004 §3.1) of any form;

and, for FOLD, any rebind condition without slots and no aggregates.  Outer FILTERs (selections over the
combined event) and the start FILTER may hold anything, slotted or not.  These are 004 Table 1's S2-S4
and what Cayuga's indexes are built for.

**Algorithm** (one family, one batch of n events; ``_run_family``).

- *Start* (the start node's forward edge): the start FILTER's slot-free conjuncts as column filters; the
  family's rows sorted by (value of the slotted equality ``Name = c``, value of a slotted range ``Price > c``
  or of a monotone outer selection) so that each event's rows are one slice of that permutation, found by
  binary searches vectorised over the events (004 §3.2 "evaluating static predicates", as the FILTER
  index: a hash on the equality, sorted constants for the range).  An instance is (start event, slice).
- *NEXT* (004 §2.2 ``;θ``; DESIGN §4 first match): each waiting instance (carried from earlier batches or
  started in this one) takes the **first** event of the batch whose static θ holds, whose index key equals
  the instance's, and with ``e.t0 >`` the instance's ``t1``.  With the right events sorted by (key, position)
  and the running maximum of ``t0`` inside each key, that is one ``searchsorted`` per instance for the whole
  batch (the running maximum makes "first event with t0 > T" monotone).  The instance moves on and leaves;
  its outer selection is tested on that first match only.  With a slotted key each (instance, row) waits
  for its own constant.
- *FOLD* (004 §2.2 ``μF,θ``): the chain of an instance is a walk over the batch's events -- the next step is
  the first event after the last step with the instance's key (the key of ``$`` after a step is the step's)
  -- advanced for all instances at once, one vectorised step per round; at each step the output is made
  and the rebind condition (with ``$1``, ``$`` and DUR per instance) says whether the chain goes on.
  Chains that reach the end of the batch wait, with their ``$`` bindings, for the next batch.
- *Outputs*: each (instance, event) pair's rows go through the outer selections: a slotted ``a op c``
  (``op`` ``< <= > >=``, or ``a op c*y``, ``c+y``, ``y-c``, or ``DUR op c``) is monotone in ``c``, so the rows
  of the slice it holds for are a prefix or suffix of the slice sorted by ``c``: a vectorised binary search
  of the exact predicate per pair, work proportional to the matches, not to the rows; then the other
  conjuncts on the matched rows.  Dropped queries' rows are filtered here (a row's liveness only ends).
- *Output as columns* (``process_table``): the matches of a batch leave as one Arrow table -- the query
  names taken from the family's name column, each attribute taken from the batch's columns -- not as one
  dict per match.  ``process_batch`` / ``process`` / ``run`` give ``nfa.Match`` objects, as the other
  executors.

**Exactness.**  The vectorised expressions (``vectors.py``) compute exactly what the closures compute;
anything they cannot (a function, LIKE, a mixed-type column, a value a comparison would refuse) is
evaluated with the closures element by element.  A run-time evaluation error, a batch whose events do not
all have the same attributes, or values of a type the columns cannot hold, make that family process that
batch on the per-event path (its state converted there and back: ``_to_per_event`` / ``_to_vectorised``),
which charges errors exactly as ``FamilyEngine`` does.  Matches are released when their tick closes, in
the oracle's order per query: a batch's matches of ticks before its last are final; those of its last
tick (and of a tick split across two batches) wait in ``FamilyEngine``'s pending list for the tick to
close.  ``snapshot()`` is ``FamilyEngine``'s (the vectorised state converted), so snapshots move between
the two executors.  The differential tests (``tests/operators/test_event_batch.py``) check matches against
the reference interpreter on random families, batch splits, NULLs, ties, intervals, unregistration and
snapshots.

Deviations: ``FamilyEngine``'s (a query registered while events flow joins no instance in progress; the
queries of one output share its event dict); the work counters of ``stats()`` count the vectorised
families' pairs and instances, not per-event visits.

>>> eng = BatchEngine(min_batch=1)
>>> for d in (2, 3):        # S4-like: rises of IBM lasting at least d ticks (the breaking step included)
...     _ = eng.register(f"rise{d}", f"SELECT * FROM FILTER{{DUR >= {d}}}(FILTER{{Name = 'IBM'}}(Stock) "
...                                  "FOLD{$2.Name = $.Name, $2.Price > $.Price,} Stock)")
>>> prices = [90, 95, 99, 97, 98]
>>> out = eng.run({"Stock": [{"Name": "IBM", "Price": p} for p in prices]}, batch_size=2)
>>> {q: [(m["t0"], m["t1"]) for m in ms] for q, ms in out.items()}
{'rise2': [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3), (3, 4)], 'rise3': [(0, 2), (0, 3), (1, 3)]}
>>> eng.vectorised_families(), eng.stats()["vec_fallbacks"]
(1, 0)
"""
from __future__ import annotations

import heapq
import time
from typing import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from sparksub.errors import AnalysisError
from sparksub.grammar.event_ast import Attr, Iteration, Scope, Select
from sparksub.operators.events import vectors as vx
from sparksub.operators.events.families import (
    _EMPTY, _NP_CMP, FamilyEngine, _Family, _has_slot, _Instance, _Slot, _Vec,
)
from sparksub.operators.events.nfa import (
    Match, NFAEngine, _combine, _Conjunct, _conjuncts, _equality_key, _holds_fn, _is_static,
)

__all__ = ["BatchEngine", "plan_family"]


class _Fallback(Exception):
    """This family processes this batch on the per-event path."""


# ---------------------------------------------------------------------------------------------------
# Which families run vectorised, and how
# ---------------------------------------------------------------------------------------------------

def _sides(v: _Vec):
    """A slotted conjunct's scalar side ``a`` and arithmetic operand ``y`` (``_Vec``'s normal form
    ``a op slot`` / ``a op slot ∘ y``), as ASTs."""
    if v.dur:
        return None, None
    e = v.expr
    a, t = (e.left, e.right) if _has_slot(e.right) else (e.right, e.left)
    if isinstance(t, _Slot):
        return a, None
    return a, (t.right if isinstance(t.left, _Slot) else t.left)


class _Plan:
    """How a family runs vectorised (``plan_family``)."""

    def __init__(self):
        self.fold = False
        self.start_free: list = []          # (expr, from_and, holds fn): the start FILTER's slot-free conjuncts
        self.eq = self.rng = None           # the start index's _Vec (equality, range)
        self.eq_a = self.rng_a = None       # their scalar sides
        self.start_deferred: list = []      # (_Vec, a, y): the other slotted start conjuncts
        self.right_free: list = []          # right FILTER + θ's static conjuncts
        self.key = None                     # "event" | "slot" | None
        self.key_event = None               # the event side attribute of the key
        self.key_bind = self.key_scope = None   # the binding side attribute and its scope (LEFT / LAST)
        self.slot_key: _Vec | None = None
        self.rebind = None                  # (expr, holds fn): FOLD's rebind condition
        self.post: list = []                # ("free", expr, from_and, fn) | ("vec", _Vec, a, y)
        self.sort: _Vec | None = None       # the monotone outer selection rows are sorted by


def _attr_in(e, scopes) -> bool:
    return isinstance(e, Attr) and e.scope in scopes


def plan_family(fam: _Family, fns, spt) -> _Plan | None:
    """The vectorised plan of a family, or None (it runs per event); see the module docstring."""
    if len(fam.nodes) != 1:
        return None
    node, chain = fam.nodes[0], fam.chain
    step = chain.steps[0]
    if node.stream != fam.stream:
        return None
    if not all(isinstance(o, Select) for o in (*chain.start_ops, *step.right_ops, *step.post_ops)):
        return None
    p = _Plan()
    op = step.op
    p.fold = isinstance(op, Iteration)
    if p.fold and (op.aggregates or node.rebind_vec):
        return None
    # the start node's forward edge
    for o in chain.start_ops:
        for c in _conjuncts(o.predicate):
            if not _has_slot(c.expr):
                p.start_free.append((c.expr, c.from_and, _holds_fn(c, fns, spt)))
    p.eq, p.rng = fam.access_eq, fam.access_range
    p.eq_a = _sides(p.eq)[0] if p.eq is not None else None
    p.rng_a = _sides(p.rng)[0] if p.rng is not None else None
    for kind, _, vecs in fam.start.steps:
        for v in vecs or ():
            if v is not p.eq and v is not p.rng:
                p.start_deferred.append((v, *_sides(v)))
    # the right input and θ
    for o in step.right_ops:
        for c in _conjuncts(o.predicate):
            if _has_slot(c.expr):
                return None
            p.right_free.append((c.expr, c.from_and, _holds_fn(c, fns, spt)))
    theta = _conjuncts(op.theta)
    keys = []
    for c in theta:
        if _has_slot(c.expr):
            continue
        k = _equality_key(c)
        if k is not None:
            keys.append(k)
        elif _is_static(c.expr):
            p.right_free.append((c.expr, c.from_and, _holds_fn(c, fns, spt)))
        else:
            return None                     # a dynamic conjunct other than the key: per event
    slotted = [c for c in theta if _has_slot(c.expr)]
    if len(keys) > 1 or (keys and slotted):
        return None
    if keys:
        a, b = keys[0]
        if not (_attr_in(a, (Scope.RIGHT, Scope.PLAIN)) and _attr_in(b, (Scope.LEFT, Scope.LAST))):
            return None
        p.key, p.key_event, p.key_bind, p.key_scope = "event", a.name, b.name, b.scope
    elif slotted:
        sk = node.slot_key
        if p.fold or sk is None or node.theta_vec_rest or len(slotted) != 1:
            return None
        a = _sides(sk)[0]
        if not _attr_in(a, (Scope.RIGHT, Scope.PLAIN)):
            return None
        p.key, p.key_event, p.slot_key = "slot", a.name, sk
    if p.fold and op.rebind is not None:
        p.rebind = (op.rebind, _holds_fn(_Conjunct(op.rebind, False), fns, spt))
    # outer selections (over the combined event)
    for o in step.post_ops:
        for c in _conjuncts(o.predicate):
            if _has_slot(c.expr):
                v = _Vec(c.expr, fns, spt)
                p.post.append(("vec", v, *_sides(v)))
            else:
                p.post.append(("free", c.expr, c.from_and, _holds_fn(c, fns, spt)))
    if p.rng is None:                       # rows sorted by a monotone outer selection's constant
        for item in p.post:
            if item[0] == "vec" and _monotone(item[1]):
                p.sort = item[1]
                break
    return p


def _monotone(v: _Vec) -> bool:
    """``a op c`` with a strict / non-strict order, ``c`` alone or ``c*y``, ``c+y``, ``c-y``, ``y-c``, or
    ``DUR op c``: holds on a prefix or a suffix of the constants in order."""
    if v.op not in ("<", "<=", ">", ">="):
        return False
    if v.dur:
        return True
    if v.arith is None:
        return True
    return v.kind == "num" and v.arith[0] in "+*-"


# ---------------------------------------------------------------------------------------------------
# Vectorised building blocks
# ---------------------------------------------------------------------------------------------------

def _expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For slices [lo, hi): (owner of each position, the positions)."""
    lengths = hi - lo
    if len(lengths) and lengths.min() == 1 == lengths.max():
        return np.arange(len(lo)), lo
    total = int(lengths.sum()) if len(lengths) else 0
    if total == 0:
        return _EMPTY, _EMPTY
    owner = np.repeat(np.arange(len(lo)), lengths)
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(total) - np.repeat(starts - lo, lengths)
    return owner, pos


def _first_false(lo: np.ndarray, hi: np.ndarray, pred) -> np.ndarray:
    """Per element i, the first position in [lo_i, hi_i) where ``pred`` is False, ``pred`` being True on
    a prefix of each range: ``pred(positions, elements) -> bool array``.  A vectorised binary search."""
    lo, hi = lo.copy(), hi.copy()
    active = np.flatnonzero(lo < hi)
    while len(active):
        mid = (lo[active] + hi[active]) >> 1
        ok = pred(mid, active)
        lo[active[ok]] = mid[ok] + 1
        hi[active[~ok]] = mid[~ok]
        active = active[lo[active] < hi[active]]
    return lo


class _Matcher:
    """The first right event for (key, T): the first event of the batch in processing order whose key
    equals ``key`` and whose ``t0 > T`` (NEXT's first match; a FOLD step).  Right events sorted by (key,
    position); inside each key the running maximum of t0 is nondecreasing, and the first event with
    ``t0 > T`` is the first whose running maximum is (earlier events have t1 <= T, hence t0 <= T): one
    binary search per query over (group, rank of the running maximum)."""

    def __init__(self, keys: np.ndarray, t0: np.ndarray, uniq_t0: np.ndarray, codes: int):
        ok = np.flatnonzero(keys >= 0)
        order = ok[np.argsort(keys[ok], kind="stable")]
        sk = keys[order]
        self.u = u = max(len(uniq_t0), 1)
        self.uniq_t0 = uniq_t0
        # key code -> its group; sized for every code (``codes``: how many exist) and -1 (NULL), last
        self.gindex = np.full(max(codes, int(sk[-1]) + 1 if len(sk) else 0) + 1, -1, np.int64)
        if len(sk):
            change = np.r_[True, sk[1:] != sk[:-1]]
            self.groups = int(change.sum())
            self.gindex[sk[change]] = np.arange(self.groups)
            gid = np.cumsum(change) - 1
            cm = np.maximum.accumulate(gid * u + np.searchsorted(uniq_t0, t0[order]))
            # a group's end (for g = -1, the extra last one: 0, so nothing is inside it)
            self.gend = np.append(np.flatnonzero(np.r_[change[1:], True]) + 1, 0)
        else:
            self.groups, cm, self.gend = 0, _EMPTY, np.zeros(1, np.int64)
        # int32 when it fits: searchsorted over 32-bit keys is twice as fast
        self.dtype = np.int32 if (cm[-1] if len(cm) else 0) < 2 ** 31 - 1 else np.int64
        self.cm = np.append(cm, np.iinfo(self.dtype).max).astype(self.dtype)     # (a sentinel)
        self.order = np.append(order, -1)
        self.answers = None                 # every (group, rank) answered at once, for many queries

    def rank(self, T: np.ndarray) -> np.ndarray:
        """How many distinct t0 of the batch are <= T."""
        return np.searchsorted(self.uniq_t0, T, "right")

    def table(self, queries: int) -> bool:
        """Whether ``answers`` is built (it is, for at least half as many queries as it has cells): every
        (rank, group) answered once -- a search with sorted keys is fast -- then each query is one lookup
        at ``answers[rank * (groups + 1) + group]``; a row per rank, so that the queries of one instance
        (one rank, many groups: S2's rows) read one row.  Each row's last cell (group -1) answers -1."""
        if self.answers is None:
            G, u = self.groups, self.u
            cells = (G + 1) * (u + 1)
            if queries < cells // 2 or cells > 1 << 22 or not G:
                return False
            cell = (np.arange(u + 1)[:, None] + np.arange(G, dtype=np.int64)[None, :] * u).ravel()
            pos = np.searchsorted(self.cm, cell.astype(self.dtype), "left")
            found = np.where(pos < np.tile(self.gend[:-1], u + 1), self.order[pos], -1).reshape(u + 1, G)
            self.answers = np.hstack([found, np.full((u + 1, 1), -1)]).astype(np.int32).ravel()
        return True

    def first(self, key: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Per query (key code >= -1, ``s = rank(T)``), the matching event's index among the right events,
        or -1."""
        return self.first_in(self.gindex[key] if len(key) else _EMPTY, s)

    def first_in(self, g: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``first`` with each query's group (``gindex`` of its key; -1: a key no right event has)."""
        if not len(g) or not self.groups:
            return np.full(len(g), -1, np.int64)
        if self.table(len(g)):
            return self.answers[s * (self.groups + 1) + g]
        u = self.u
        comp = g * u + s
        pos = np.searchsorted(self.cm, comp.astype(self.dtype) if self.dtype is np.int32 else comp, "left")
        return np.where(pos < self.gend[g], self.order[pos], -1)


_NO_OUTPUT = {"left": _EMPTY, "right": _EMPTY, "row": _EMPTY, "t1": _EMPTY, "st1": _EMPTY, "spos": _EMPTY}
_CHUNK = 1 << 18                            # entries per chunk of _slot_next
_KDICT_MAX = 4_000_000                      # distinct key values remembered before the codes restart


def _at(values: np.ndarray, owner: np.ndarray | None) -> np.ndarray:
    """``values[owner]``; None: every element, in order."""
    return values if owner is None else values[owner]


def _take_rows(table: pa.Table, idx: np.ndarray) -> pa.Table:
    return table.take(pa.array(idx, pa.int64()))


# ---------------------------------------------------------------------------------------------------
# A vectorised family's state
# ---------------------------------------------------------------------------------------------------

class _State:
    """Run-time state of a vectorised family.  Its waiting instances -- one entry per instance, per
    (instance, row) for a slotted key -- as columns ``fields``: the index key code, the instance's ``$1``
    (``left``) and, for FOLD, ``$`` (``last``) bindings as rows of ``carry``, the slice
    ``perms[pid][lo:hi]`` of its rows (queries).  ``carry``: the binding rows kept from earlier batches,
    with their interval and stream position (``pos``; a left row's t1 and position are the instance's
    key, a last row's t1 the instance's t1).  Also the row permutations and the start index."""

    def __init__(self, fam: _Family, plan: _Plan):
        self.fam, self.plan = fam, plan
        # a slotted key's entries are one row each: no ``hi`` (= lo + 1)
        self.fields = ("key", "left", "pid", "lo") + (() if plan.key == "slot" else ("hi",)) + \
            (("last",) if plan.fold else ())
        self.pending = self.empty()
        self.carry: vx.Rows | None = None
        self.carry_pos = _EMPTY
        self.perms: dict[int, np.ndarray] = {}
        self.sorted_vals: dict[int, np.ndarray | None] = {}
        self.next_pid = 0
        self.dirty = True
        self.index = None                   # (pid of the start permutation, equality codes along it,
        #                                     a slotted key's codes along it)
        self.names = None                   # pa.array of the family's query names (output)
        self.layouts: dict = {}             # id(layout) -> its columns, the same for every member

    def empty(self) -> dict:
        return {f: _EMPTY for f in self.fields}

    def size(self) -> int:
        return len(self.pending["key"])

    def new_perm(self, rows: np.ndarray, sort_vals) -> int:
        pid = self.next_pid
        self.next_pid += 1
        self.perms[pid] = rows
        self.sorted_vals[pid] = sort_vals
        return pid

    def prune_perms(self) -> None:
        pids = self.pending["pid"]
        used = set(np.unique(pids).tolist()) if len(pids) and pids.min() != pids.max() else set(pids[:1].tolist())
        if self.index is not None:
            used.add(self.index[0])
        for pid in [p for p in self.perms if p not in used]:
            del self.perms[pid], self.sorted_vals[pid]


def _sort_values(fam: _Family, plan: _Plan, rows: np.ndarray):
    """The values rows are sorted by within a slice (the range constant or the monotone outer
    selection's), or None."""
    v = plan.rng or plan.sort
    if v is None:
        return None
    return fam.column(v.slot, rows, v.dur)


# ---------------------------------------------------------------------------------------------------
# The executor
# ---------------------------------------------------------------------------------------------------

class BatchEngine(FamilyEngine):
    """``FamilyEngine`` whose families of the common shapes run a batch of events at a time (module
    docstring).  Same API, plus ``process_batch`` / ``process_table`` (a batch of events) and
    ``register_template`` (bulk registration, ``operators/events/bulk.py``)."""

    def __init__(self, *, vectorise: bool = True, batch_size: int = 8192, min_batch: int = 24, **options):
        super().__init__(**options)
        self.vectorise = vectorise and self.group
        #: ``run()`` feeds batches of this many events
        self.batch_size = batch_size
        #: smaller batches (and ``process()``, one event) run on the per-event path: a vectorised pass
        #: costs ~0.3 ms per family whatever the batch size, ``FamilyEngine`` 10-60 µs per event
        self.min_batch = min_batch
        self._parked: dict[int, tuple[_Family, _Plan]] = {}  # vectorisable, on the per-event path now
        self._vec: dict[int, _State] = {}                  # id(family) -> state
        self._vec_by_stream: dict[str, list[_State]] = {}
        self._seen: set[int] = set()                       # families planned already
        self._kdict: dict = {}                             # index key values -> codes (all families)
        self._vs = dict(vec_batches=0, vec_fallbacks=0, vec_pairs=0, vec_instances=0, vec_matches=0)
        #: seconds spent building output (Arrow tables / Match objects) -- the bench reports it apart
        self.output_seconds = 0.0

    # ---- registration ------------------------------------------------------------------------------
    def register(self, name: str, query, *, schemas=None):
        out = super().register(name, query, schemas=schemas)
        self._joined(name)
        return out

    def _joined(self, name: str) -> None:
        m = self._member.get(name)
        if m is None:
            return
        fam = m[0]
        st = self._vec.get(id(fam))
        if st is not None:
            st.dirty = True
            st.names = None
        elif id(fam) not in self._seen:
            self._seen.add(id(fam))
            if self.vectorise:
                plan = plan_family(fam, self.fns, self.spt)
                if plan is not None:
                    self._detach(fam, _State(fam, plan))

    def unregister(self, name: str) -> None:
        m = self._member.get(name)
        super().unregister(name)
        if m is not None:
            st = self._vec.get(id(m[0]))
            if st is not None:
                st.dirty = True
                st.names = None
                if not m[0].n_live:                # its instances go with it
                    st.pending = st.empty()
                    st.carry = None

    def register_template(self, bound, *, schemas=None) -> list[str]:
        """Register every query of a ``bulk.BoundTemplate`` (named): the rows whose values have the same
        kinds are one family, analysed once (``bulk`` module docstring); returns the names."""
        from sparksub.operators.events.bulk import register_bound
        return register_bound(self, bound, schemas=schemas)

    def vectorised_families(self) -> int:
        """How many families run vectorised now."""
        return sum(1 for st in self._vec.values() if st.fam.n_live)

    # ---- attaching to / detaching from the per-event path ---------------------------------------------
    def _detach(self, fam: _Family, st: _State) -> None:
        self._vec[id(fam)] = st
        self._vec_by_stream.setdefault(fam.stream, []).append(st)
        self._fam_by_stream[fam.stream].remove(fam)
        for n in fam.nodes:
            self._fnodes_by_stream[n.stream].remove(n)

    def _attach(self, fam: _Family) -> _State:
        st = self._vec.pop(id(fam))
        self._vec_by_stream[fam.stream].remove(st)
        self._fam_by_stream.setdefault(fam.stream, []).append(fam)
        for n in fam.nodes:
            self._fnodes_by_stream.setdefault(n.stream, []).append(n)
        return st

    def _park(self, streams) -> None:
        """The vectorised families reading ``streams`` go to the per-event path (until a large batch)."""
        for s in streams:
            for st in list(self._vec_by_stream.get(s, ())):
                self._to_per_event(st)

    def _unpark(self, streams) -> None:
        for key, (fam, plan) in list(self._parked.items()):
            if fam.stream in streams and self._to_vectorised(fam, plan):
                del self._parked[key]

    def _to_per_event(self, st: _State) -> None:
        """The family's waiting instances as ``FamilyEngine`` instances; it runs per event (parked) until
        ``_to_vectorised``."""
        fam, plan = st.fam, st.plan
        self._attach(fam)
        self._parked[id(fam)] = (fam, plan)
        node = fam.nodes[0]
        P = st.pending
        if not len(P["key"]):
            return
        dicts = st.carry.dicts()
        t0s, t1s, pos = st.carry.t0, st.carry.t1, st.carry_pos
        lasts = P["last"] if plan.fold else P["left"]
        groups: dict = {}
        for j in range(len(P["key"])):
            lo = int(P["lo"][j])
            rows = st.perms[int(P["pid"][j])][lo:int(P["hi"][j]) if "hi" in P else lo + 1]
            left, last = int(P["left"][j]), int(lasts[j])
            if plan.start_deferred:
                d = int(t1s[left] - t0s[left] + 1)
                for v, _, _ in plan.start_deferred:
                    rows = rows[v.holds(fam, rows, dicts[left], None, None, d)]
            ident = left if plan.key == "slot" else j      # a slotted key's entries: one instance
            g = groups.get(ident)
            if g is None:
                inst = _Instance()
                inst.node, inst.left, inst.t0, inst.t1 = node, dicts[left], int(t0s[left]), int(t1s[last])
                inst.key = (int(t1s[left]), int(pos[left]))
                inst.last = dict(dicts[last]) if plan.fold else None
                inst.alive, inst.entries = True, {}
                groups[ident] = g = [inst, []]
            g[1].append(rows)
        for inst, parts in groups.values():
            self._fam_serial += 1
            inst.serial = self._fam_serial
            if self.expire and node.bound is not None:
                heapq.heappush(self._fam_expiry, (inst.t0 + node.bound - 1, inst.serial, inst))
            self._fam_insert(inst, np.concatenate(parts), fresh=False)
        st.pending = st.empty()
        st.carry = None

    def _to_vectorised(self, fam: _Family, plan: _Plan) -> bool:
        """Back to the vectorised path with the family's per-event instances (False: they cannot be held
        as columns -- bindings of different attributes or types -- and it stays per event)."""
        node = fam.nodes[0]
        entries = [(inst, rows) for b in node.buckets.values() for inst, rows in b.values() if inst.alive]
        st = _State(fam, plan)
        if entries:
            bindings = [inst.left for inst, _ in entries] + [inst.last for inst, _ in entries if plan.fold]
            names = set(bindings[0])
            if any(set(b) != names for b in bindings):
                return False
            try:
                table = pa.Table.from_pylist(bindings)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                return False
            n = len(entries)
            two = 2 if plan.fold else 1
            st.carry = vx.Rows(table, np.array([i.t0 for i, _ in entries] * two, np.int64),
                               np.array([i.key[0] for i, _ in entries] + [i.t1 for i, _ in entries if plan.fold],
                                        np.int64))
            st.carry_pos = np.array([i.key[1] for i, _ in entries] * two, np.int64)
            lengths = np.array([len(r) for _, r in entries], np.int64)
            rows = np.concatenate([r for _, r in entries])
            owner = np.repeat(np.arange(n), lengths)
            kd = self._kdict
            if plan.key == "slot":              # one entry per (instance, row), keyed by the row's constant
                vals = fam.values[plan.slot_key.slot]
                key = np.fromiter((kd.setdefault(vals[r], len(kd)) for r in rows.tolist()), np.int64, len(rows))
                pid = st.new_perm(rows, None)
                st.pending = {"key": key, "left": owner, "pid": np.full(len(rows), pid, np.int64),
                              "lo": np.arange(len(rows))}
            else:
                key = np.zeros(n, np.int64)
                if plan.key == "event":
                    for j, (inst, _) in enumerate(entries):
                        v = (inst.last if plan.key_scope is Scope.LAST else inst.left).get(plan.key_bind)
                        key[j] = -1 if v is None or (isinstance(v, float) and v != v) else kd.setdefault(v, len(kd))
                sv = _sort_values(fam, plan, rows)
                order = np.lexsort((sv, owner)) if sv is not None else np.arange(len(rows))
                pid = st.new_perm(rows[order], None if sv is None else sv[order])
                hi = np.cumsum(lengths)
                st.pending = {"key": key, "left": np.arange(n), "pid": np.full(n, pid, np.int64),
                              "lo": hi - lengths, "hi": hi}
                if plan.fold:
                    st.pending["last"] = np.arange(n, 2 * n)
            for inst, _ in entries:
                inst.alive = False
        for nd in fam.nodes:
            nd.buckets.clear()
            nd.count = 0
        self._detach(fam, st)
        return True

    # ---- running ------------------------------------------------------------------------------------
    def process(self, stream: str, event: Mapping) -> list[Match]:
        """One event (``NFAEngine.process``), on the per-event path."""
        if self._vec_by_stream.get(stream):
            self._park([stream])
        return NFAEngine.process(self, stream, event)

    def run(self, streams: Mapping[str, Iterable[Mapping]], errors: dict | None = None,
            batch_size: int | None = None) -> dict[str, list[dict]]:
        """``NFAEngine.run``, fed in batches of ``batch_size`` events (runs of one stream)."""
        size = batch_size or self.batch_size
        merged = self._merged(streams)
        results: dict[str, list[dict]] = {q: [] for q in self.queries}
        i = 0
        while i < len(merged):
            name = merged[i][3]
            j = i
            while j < len(merged) and j - i < size and merged[j][3] == name:
                j += 1
            for m in self.process_batch([name], [x[4] for x in merged[i:j]]):
                results[m.query].append(m.event)
            i = j
        return self._finish_run(results, errors)

    def process_batch(self, streams: str | Sequence[str], events, errors: list | None = None,
                      seq=None) -> list[Match]:
        """A batch of events (a list of dicts with ``t0``/``t1``, or an Arrow table of attribute columns plus
        ``t0`` and ``t1``), each fed under every name in ``streams``, in (t1, ``seq``) order (``seq``: one
        number per event, default their order): the matches released (``nfa.Match``), those of the ticks
        the batch closed.  ``errors`` receives ``(position in the sorted batch, EventError)`` for each
        evaluation error."""
        released, columnar = self._process(streams, events, errors, seq)
        if not columnar:
            return released
        clock = time.process_time()
        out = released + [m for c in columnar for m in self._matches(c)]
        self.output_seconds += time.process_time() - clock
        return out

    def process_table(self, streams: str | Sequence[str], events, layout, group_id: str | None = None,
                      schema: pa.Schema | None = None, errors: list | None = None, seq=None) -> pa.Table:
        """``process_batch`` with the matches as one Arrow table of match rows (``partitions.matches_to_table``'s
        rows for ``layout``), built per batch from the events' columns."""
        from sparksub.operators.events.partitions import matches_to_table
        released, columnar = self._process(streams, events, errors, seq)
        clock = time.process_time()
        schema = schema or layout.schema()
        parts = [matches_to_table(released, layout, group_id, schema)]
        parts += [self._table(c, layout, group_id, schema) for c in columnar]
        out = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        self.output_seconds += time.process_time() - clock
        return out

    # the batch's events as columns
    def _batch(self, events, seq):
        """(attribute table or None, event dicts or None, t0, t1), sorted by (t1, seq); checked as
        ``NFAEngine.process`` checks each event."""
        if seq is not None:
            seq = seq.to_pylist() if hasattr(seq, "to_pylist") else list(seq)
        if isinstance(events, (pa.Table, pa.RecordBatch)):
            table = events if isinstance(events, pa.Table) else pa.Table.from_batches([events])
            cols = table.column_names
            if "t0" not in cols and "t1" not in cols:
                raise AnalysisError("a batch of events needs t0/t1 columns")
            c1 = table.column("t1" if "t1" in cols else "t0")
            c0 = table.column("t0") if "t0" in cols else c1
            attrs = table.drop_columns([c for c in ("t0", "t1") if c in cols])
            if (pa.types.is_integer(c0.type) and pa.types.is_integer(c1.type) and not c0.null_count
                    and not c1.null_count):     # the common case at once
                t0n = np.asarray(c0.to_numpy(), np.int64)
                t1n = np.asarray(c1.to_numpy(), np.int64)
                if (t0n <= t1n).all():
                    return self._sorted_batch(attrs, None, t0n, t1n, seq)
            t0c, t1c, dicts = c0.to_pylist(), c1.to_pylist(), None
        else:
            dicts = [dict(e) for e in events]
            t0c = [e.pop("t0", None) for e in dicts]
            t1c = [e.pop("t1", None) for e in dicts]
            attrs = None
        t0s, t1s = [], []
        for t0, t1 in zip(t0c, t1c):
            if t0 is None and t1 is None:
                raise AnalysisError("NFAEngine.process needs events with t0/t1 (run() numbers them like the oracle)")
            if t0 is None or t1 is None:
                t0 = t1 = t1 if t0 is None else t0
            if isinstance(t0, bool) or isinstance(t1, bool) or not (isinstance(t0, int) and isinstance(t1, int)) \
                    or t0 > t1:
                raise AnalysisError(f"event of the batch: needs integer t0 <= t1, got ({t0!r}, {t1!r})")
            t0s.append(t0)
            t1s.append(t1)
        return self._sorted_batch(attrs, dicts, np.array(t0s, np.int64), np.array(t1s, np.int64), seq)

    @staticmethod
    def _sorted_batch(attrs, dicts, t0a, t1a, seq):
        n = len(t1a)
        order = np.lexsort((np.array(seq, np.int64) if seq is not None else np.arange(n), t1a))
        if n and not (order == np.arange(n)).all():
            t0a, t1a = t0a[order], t1a[order]
            if dicts is not None:
                dicts = [dicts[i] for i in order.tolist()]
            else:
                attrs = _take_rows(attrs, order)
        return attrs, dicts, t0a, t1a

    def _process(self, streams, events, errors, seq=None):
        streams = [streams] if isinstance(streams, str) else list(streams)
        attrs, dicts, t0, t1 = self._batch(events, seq)
        n = len(t1)
        if n == 0:
            return [], []
        for s in streams:
            if s in self._publisher:
                raise AnalysisError(f"stream {s!r} is published by query {self._publisher[s]!r}")
        if self._tick is not None and t1[0] < self._tick:
            raise AnalysisError(f"events must arrive in end-time order: t1={int(t1[0])} after t1={self._tick}")
        # a stream a query publishes gets its events on the per-event path alone (PUBLISH runs there, event by
        # event): the families reading it run there too, or they would never see one
        published = [s for s, states in self._vec_by_stream.items() if states and s in self._publisher]
        if published:
            self._park(published)
        # 1. the vectorised families, computed (nothing changes yet)
        if n < self.min_batch:
            self._park(streams)
        elif self._parked:
            self._unpark(streams)
        states = [(s, st) for s in streams for st in list(self._vec_by_stream.get(s, ())) if st.fam.n_live]
        results = []
        rows = None
        if states:
            rows, homogeneous = self._rows(attrs, dicts, t0, t1)
            for s, st in states:
                try:
                    if not homogeneous or rows is None:
                        raise _Fallback
                    results.append((st, self._run_family(st, rows, self._positions.get(s, 0))))
                except _Fallback:
                    self._vs["vec_fallbacks"] += 1
                    self._to_per_event(st)
                    results.append((st, None))
        open_tick = self._tick
        last = int(t1[-1])
        columnar = []
        for st, r in results:                          # a tick split with the previous batch: pending
            if r is not None and open_tick is not None:
                self._hold(st, r, r["t1"] == open_tick)
        # 2. the per-event path (other queries), or the tick bookkeeping alone
        if any(self._index.get(s) is not None or self._keyed.get(s) or self._fam_by_stream.get(s)
               or self._fnodes_by_stream.get(s) for s in streams):
            released = self._per_event(streams, attrs, dicts, t0, t1, errors)
        else:
            released = self._advance(streams, n, last)
        # 3. commit the vectorised results: matches of closed ticks as columns, the last tick's pending
        for st, r in results:
            if r is None:
                continue
            self._commit(st, r)
            self._hold(st, r, r["t1"] == last)
            done = (r["t1"] != last) & (r["t1"] != open_tick) if open_tick is not None else r["t1"] != last
            if done.any():
                columnar.append((st, r["X"], {k: v[done] for k, v in r["out"].items()}))
        if any(r is None for _, r in results):        # those that fell back: vectorised again if they can
            self._unpark(streams)
        if len(self._kdict) > _KDICT_MAX:            # key codes of values long gone: start them afresh
            every = list(self._vec_by_stream)
            self._park(every)
            self._kdict = {}
            self._unpark(every)
        self._vs["vec_batches"] += 1 if results else 0
        return released, columnar

    def _rows(self, attrs, dicts, t0, t1):
        """The batch as ``vectors.Rows`` (None if its values cannot be columns), and whether every event
        has the same attributes."""
        if attrs is None:
            keys = set(dicts[0])
            if any(set(d) != keys for d in dicts):
                return None, False
            try:
                attrs = pa.Table.from_pylist(dicts) if keys else pa.table({"__": pa.nulls(len(dicts))}).drop_columns(["__"])
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                return None, False
        return vx.Rows(attrs, t0, t1), True

    def _advance(self, streams, n: int, last: int) -> list[Match]:
        """The tick bookkeeping of ``NFAEngine.process`` for a batch no per-event consumer reads."""
        for s in streams:
            self._positions[s] = self._positions.get(s, 0) + n
        self._s["events"] += n * len(streams)
        if self._tick is not None and last > self._tick:
            self._close_tick()
        if self._tick != last:
            self._tick = last
            self._expire(last)
        out, self._released = self._released, []
        return out

    def _per_event(self, streams, attrs, dicts, t0, t1, errors) -> list[Match]:
        if dicts is None:
            names = attrs.column_names
            cols = [attrs.column(c).to_pylist() for c in names]
            dicts = [dict(zip(names, vs)) for vs in zip(*cols)] if names else [{} for _ in range(len(t1))]
        out = []
        for i, (e, a, b) in enumerate(zip(dicts, t0.tolist(), t1.tolist())):
            ev = {**e, "t0": a, "t1": b}
            for s in streams:
                out.extend(NFAEngine.process(self, s, ev))
            if errors is not None:
                errors.extend((i, err) for err in self.take_errors())
        return out

    # ---- one family over one batch ------------------------------------------------------------------
    def _prepare(self, st: _State) -> None:
        """(Re)build the start index after registrations: rows sorted by (equality code, sort value)."""
        fam, plan = st.fam, st.plan
        if fam.bounds_dirty:
            self._family_bounds(fam)
        if not st.dirty:
            return
        st.dirty = False
        live = np.flatnonzero(fam.live())
        if plan.eq is not None:
            vals = fam.values[plan.eq.slot]
            kd = self._kdict
            eq = np.fromiter((kd.setdefault(vals[r], len(kd)) for r in live.tolist()), np.int64, len(live))
        else:
            eq = np.zeros(len(live), np.int64)
        sv = _sort_values(fam, plan, live)
        order = np.lexsort((sv, eq)) if sv is not None else np.argsort(eq, kind="stable")
        perm = live[order]
        pid = st.new_perm(perm, None if sv is None else sv[order])
        poskey = None
        if plan.key == "slot":                  # each position's key code (its row's constant)
            vals = fam.values[plan.slot_key.slot]
            kd = self._kdict
            poskey = np.fromiter((kd.setdefault(vals[r], len(kd)) for r in perm.tolist()), np.int64, len(perm))
        st.index = (pid, eq[order], poskey)
        st.prune_perms()

    def _ctx(self, rows: vx.Rows, idx: dict, d) -> vx.Ctx:
        return vx.scoped(rows, idx, d, self.spt, self.fns.get("abs") is abs)

    def _conj(self, items, ctx) -> np.ndarray:
        ok = np.ones(ctx.n, bool)
        for expr, from_and, fn in items:
            try:
                ok &= vx.holds(expr, from_and, ctx, fn)
            except AnalysisError:
                raise _Fallback from None
        return ok

    def _scalar(self, expr, ctx, fn) -> vx.V:
        try:
            return vx.values(expr, ctx, fn)
        except (AnalysisError, vx.Unsupported):
            raise _Fallback from None

    def _run_family(self, st: _State, rows: vx.Rows, pos0: int) -> dict:
        """The family over the batch (rows 0..n-1 of ``rows``; its carried rows appended): the new state
        and the outputs, as arrays; nothing of ``st`` changes (``_commit``)."""
        fam, plan = st.fam, st.plan
        self._prepare(st)
        n = rows.n
        fields = st.fields
        # the carried bindings become rows n.. of X
        X, off = rows, n
        pos = pos0 + np.arange(n)
        if st.size():
            if set(st.carry.names) != set(rows.names):
                raise _Fallback
            try:
                table = pa.concat_tables([rows.table, st.carry.table.select(list(rows.names))],
                                         promote_options="permissive")
            except (pa.ArrowException, TypeError, ValueError):
                raise _Fallback from None
            X = vx.Rows(table, np.concatenate([rows.t0, st.carry.t0]), np.concatenate([rows.t1, st.carry.t1]))
            pos = np.concatenate([pos, st.carry_pos])
        ev = np.arange(n)
        # right events and their keys
        if plan.right_free:
            rmask = self._conj(plan.right_free, self._ctx(X, {Scope.RIGHT: ev}, X.t1[:n] - X.t0[:n] + 1))
            r_idx = np.flatnonzero(rmask)
        else:
            r_idx = ev
        if plan.key is None:
            rkey = np.zeros(len(r_idx), np.int64)
        else:
            c = X.col(plan.key_event)
            rkey = c.codes(self._kdict)[r_idx] if c is not None else np.full(len(r_idx), -1, np.int64)
        # the waiting instances: carried, then those the batch starts
        S = self._vec_starts(st, X, ev, pos0)
        slot = plan.key == "slot"           # a slotted key's new (instance, row) entries: _slot_next
        new = None if slot else self._new_instances(st, X, S)
        P = {}
        for f in fields:
            old = st.pending[f] + off if f in ("left", "last") else st.pending[f]
            P[f] = old if new is None else np.concatenate([old, new[f]]) if len(old) else new[f]
        bind = None                         # FOLD keyed on $: the key after a step is the step's
        if plan.fold and plan.key == "event" and plan.key_scope is Scope.LAST:
            c = X.col(plan.key_bind)
            bind = c.codes(self._kdict) if c is not None else np.full(X.n, -1, np.int64)
        r_t0 = X.t0[r_idx]                  # (every key code exists now: the matcher's index covers them)
        matcher = _Matcher(rkey, r_t0, np.unique(r_t0), len(self._kdict))
        rank = matcher.rank(X.t1)           # an instance's T is its last binding row's t1
        if plan.fold:
            pairs, wait = self._fold(st, X, P, r_idx, matcher, rank, bind)
        else:
            m = matcher.first(P["key"], rank[P["left"]])
            took = m >= 0
            pairs = {f: P[f][took] for f in fields}
            pairs["right"] = r_idx[m[took]]
            wait = {f: P[f][~took] for f in fields}
        self._vs["vec_pairs"] += len(pairs["right"])
        out = self._outputs(st, X, pairs, pos)
        if slot:
            out2, more, took_n = self._slot_next(st, X, S, matcher, rank, r_idx, pos)
            self._vs["vec_pairs"] += took_n
            out = {k: np.concatenate([out[k], out2[k]]) for k in out}
            wait = {f: np.concatenate([wait[f], more[f]]) for f in fields}
        # expiry (no output can come from an expired instance: 004 §3.2's bounded instances)
        node = fam.nodes[0]
        if self.expire and node.bound is not None and len(wait["key"]):
            alive = X.t0[wait["left"]] + node.bound - 1 >= int(X.t1[n - 1])
            self._s["instances_expired"] += int((~alive).sum())
            wait = {f: v[alive] for f, v in wait.items()}
        return {"wait": wait, "out": out, "t1": out["t1"], "X": X, "pos": pos}

    def _slot_next(self, st: _State, X: vx.Rows, S: dict, matcher: _Matcher, rank, r_idx, position
                   ) -> tuple[dict, dict, int]:
        """The (instance, row) entries the batch starts, for a NEXT keyed by a slotted constant (S2's
        ``$2.Name = 'B'``: each row waits for its own B): (the outputs of those that take their first match
        in this batch, the waiting entries, how many matched).  Straight from the slices, without the
        generic columns, in chunks of instances of about ``_CHUNK`` rows (the arrays stay in the CPU's cache:
        at 1,000,000 queries a batch starts millions of entries)."""
        pid, _, poskey = st.index
        lengths = S["hi"] - S["lo"]
        total = int(lengths.sum())
        gpos = matcher.gindex[poskey]           # each position's group among the right events (-1: none)
        srank = rank[S["ev"]]
        table = matcher.table(total)            # (one row of answers per instance: sequential reads)
        stride = matcher.groups + 1
        dead = st.fam.n_live < len(st.fam.names)
        cum = np.cumsum(lengths)
        cuts = np.unique(np.searchsorted(cum, np.arange(_CHUNK, total, _CHUNK), "left")).tolist() if total else []
        outs, waits, took_n = [], [], 0
        for a, b in zip([0] + cuts, cuts + [len(lengths)]):
            ln = lengths[a:b]
            _, pos = _expand(S["lo"][a:b], S["hi"][a:b])
            left = np.repeat(S["ev"][a:b], ln)
            if table:
                m = matcher.answers[np.repeat(srank[a:b] * stride, ln) + gpos[pos]]
            else:
                m = matcher.first_in(gpos[pos], np.repeat(srank[a:b], ln))
            if dead:                            # a dropped query's row: neither match nor wait
                m[~st.fam.live()[st.perms[pid][pos]]] = -2
            took = m >= 0
            took_n += int(took.sum())
            outs.append(self._outputs(st, X, {"left": left[took], "pid": pid, "lo": pos[took],
                                              "right": r_idx[m[took]]}, position))
            rest = m == -1
            waits.append({"key": poskey[pos[rest]], "left": left[rest],
                          "pid": np.full(int(rest.sum()), pid, np.int64), "lo": pos[rest]})
        self._vs["vec_instances"] += len(S["ev"])
        self._s["instances_created"] += len(S["ev"])
        cat = lambda parts, k: np.concatenate([p[k] for p in parts])  # noqa: E731
        return ({k: cat(outs, k) for k in outs[0]} if outs else _NO_OUTPUT,
                {k: cat(waits, k) for k in waits[0]} if waits else {f: _EMPTY for f in st.fields}, took_n)

    def _vec_starts(self, st: _State, X: vx.Rows, ev: np.ndarray, pos0: int) -> dict:
        """The instances the batch's events start: (start event, slice of the start permutation)."""
        plan = st.plan
        n = len(ev)
        d = X.t1[:n] - X.t0[:n] + 1
        ctx = self._ctx(X, {Scope.RIGHT: ev}, d)
        ok = self._conj(plan.start_free, ctx) if plan.start_free else np.ones(n, bool)
        pid, eqs, _ = st.index
        if plan.eq is not None:
            a = plan.eq_a
            if isinstance(a, Attr) and a.scope is Scope.PLAIN:
                c = X.col(a.name)
                code = c.codes(self._kdict)[:n] if c is not None else np.full(n, -1, np.int64)
            else:
                v = self._scalar(a, ctx, plan.eq.scalar)
                kd = self._kdict
                code = np.fromiter((kd.setdefault(x, len(kd)) if ok_ and not (isinstance(x, float) and x != x)
                                    else -1 for x, ok_ in zip(v.vals.tolist(), v.valid.tolist())), np.int64, n)
            lo = np.searchsorted(eqs, code, "left")
            hi = np.searchsorted(eqs, code, "right")
            hi[code < 0] = lo[code < 0]
        else:
            lo, hi = np.zeros(n, np.int64), np.full(n, len(eqs), np.int64)
        if plan.rng is not None:
            v = self._scalar(plan.rng_a, ctx, plan.rng.scalar)
            if v.kind == "null":
                hi = lo.copy()
            else:
                if v.kind != "num":
                    raise _Fallback             # FamilyEngine checks it as a vector: maybe an error
                good = v.valid & ~np.isnan(v.vals)
                hi = np.where(good, hi, lo)
                sv = st.sorted_vals[pid]
                a = v.vals
                op = plan.rng.op                # a OP slot, slots sorted ascending within the bucket
                if op in (">", ">="):           # slot < a / slot <= a: a prefix
                    cmp = np.less if op == ">" else np.less_equal
                    hi = _first_false(lo, hi, lambda m, i: cmp(sv[m], a[i]))
                else:                           # slot > a / slot >= a: a suffix
                    cmp = np.less_equal if op == "<" else np.less
                    lo = _first_false(lo, hi, lambda m, i: cmp(sv[m], a[i]))
        ok &= hi > lo
        if plan.start_deferred and ok.any():    # their per-event parts (errors) now, rows at output
            self._check_deferred(st, X, np.flatnonzero(ok))
        i = np.flatnonzero(ok)
        return {"ev": ev[i], "pid": pid, "lo": lo[i], "hi": hi[i]}

    def _check_deferred(self, st, X, ev) -> None:
        ctx = self._ctx(X, {Scope.RIGHT: ev}, X.t1[ev] - X.t0[ev] + 1)
        for v, a, y in st.plan.start_deferred:
            if v.dur:
                continue
            av = self._scalar(a, ctx, v.scalar)
            self._vec_kinds(v, av, self._scalar(y, ctx, v.other) if y is not None else None)

    def _new_instances(self, st: _State, X: vx.Rows, S: dict) -> dict:
        plan = st.plan
        k = len(S["ev"])
        self._vs["vec_instances"] += k
        self._s["instances_created"] += k
        base = {"left": S["ev"], "pid": np.full(k, S["pid"], np.int64), "lo": S["lo"], "hi": S["hi"]}
        if plan.fold:
            base["last"] = S["ev"]
        if plan.key == "event":
            c = X.col(plan.key_bind)
            key = c.codes(self._kdict)[S["ev"]] if c is not None else np.full(k, -1, np.int64)
            keep = key >= 0                     # a NULL key can never satisfy θ's equality
            if not keep.all():
                self._s["instances_unmatchable"] += int((~keep).sum())
                return {"key": key[keep], **{f: v[keep] for f, v in base.items()}}
            return {"key": key, **base}
        return {"key": np.zeros(k, np.int64), **base}

    def _fold(self, st: _State, X: vx.Rows, P: dict, r_idx: np.ndarray, matcher: _Matcher, rank, bind):
        """FOLD chains over the batch, one vectorised step per round: (step pairs, waiting instances).
        ``bind``: per row of X its key code as ``$`` (keyed on ``$``), else None."""
        plan = st.plan
        fields = st.fields
        F = P
        pairs, waits = [], []
        while len(F["key"]):
            m = matcher.first(F["key"], rank[F["last"]])
            took = m >= 0
            waits.append({f: F[f][~took] for f in fields})
            F = {f: F[f][took] for f in fields}
            step = r_idx[m[took]]
            pairs.append({**F, "right": step})
            if plan.rebind is not None and len(step):
                d = X.t1[step] - X.t0[F["left"]] + 1
                ctx = self._ctx(X, {Scope.RIGHT: step, Scope.LEFT: F["left"], Scope.LAST: F["last"]}, d)
                cont = self._conj([(plan.rebind[0], False, plan.rebind[1])], ctx)
                F = {f: F[f][cont] for f in fields}
                step = step[cont]
            F["last"] = step                    # the rebind edge: $ is the step now, its t1 the chain's
            if bind is not None:                # re-keyed on the new $ (a NULL key: unmatchable)
                F["key"] = bind[step]
                keep = F["key"] >= 0
                if not keep.all():
                    self._s["instances_unmatchable"] += int((~keep).sum())
                    F = {f: v[keep] for f, v in F.items()}
        cat = lambda parts, f: np.concatenate([p[f] for p in parts]) if parts else _EMPTY  # noqa: E731
        return ({f: cat(pairs, f) for f in (*fields, "right")}, {f: cat(waits, f) for f in fields})

    def _vec_kinds(self, v: _Vec, a: vx.V, y: vx.V | None) -> None:
        """What ``_Vec.holds`` would refuse for these scalars (an evaluation error): fall back."""
        if y is not None and y.kind not in ("num", "null") and (a.valid & y.valid).any():
            raise _Fallback
        if a.kind == "bool" or (a.kind not in ("null",) and (v.kind == "num") != (a.kind == "num")
                                and v.op not in ("=", "!=") and a.valid.any()):
            raise _Fallback

    def _vec_rows(self, v: _Vec, fam: _Family, rows, owner, a: vx.V, y: vx.V | None, d) -> np.ndarray:
        """``_Vec.holds`` for expanded (pair, row) elements: ``owner`` maps each to its pair (None: one
        element per pair, in order)."""
        col = fam.column(v.slot, rows, v.dur)
        if v.dur:
            return _NP_CMP[v.op](_at(d, owner), col)
        self._vec_kinds(v, a, y)
        if a.kind == "null":
            return np.zeros(len(rows), bool)
        ok = _at(a.valid, owner)
        if y is not None:
            if y.kind == "null":
                return np.zeros(len(rows), bool)
            ok = ok & _at(y.valid, owner)
            yv = _at(y.vals, owner)
            if col.dtype == np.int64 and y.integral:
                yv = yv.astype(np.int64)
            op, slot_left = v.arith
            with np.errstate(all="ignore"):
                col = col + yv if op == "+" else col * yv if op == "*" else (col - yv if slot_left else yv - col)
        if (v.kind == "num") != (a.kind == "num"):
            return ok & (v.op == "!=")
        with np.errstate(all="ignore"):
            return ok & np.asarray(_NP_CMP[v.op](_at(a.vals, owner), col), bool)

    def _outputs(self, st: _State, X: vx.Rows, pairs: dict, position: np.ndarray) -> dict:
        """The rows (queries) each (instance, event) pair outputs for: the outer selections, the deferred
        start conjuncts, the live rows.  Returns the outputs as arrays (left, right, row, t1, ...)."""
        plan, fam = st.plan, st.fam
        left, right = pairs["left"], pairs["right"]
        n = len(right)
        if not n:
            return _NO_OUTPUT
        cache: dict = {}

        def dur():                              # the output's DUR per pair, when something reads it
            if "d" not in cache:
                cache["d"] = X.t1[right] - X.t0[left] + 1
            return cache["d"]
        combined = self._combined(X)

        def lookup(a: Attr):
            src = combined.get(a.name) if a.scope is Scope.PLAIN else None
            if src is None:
                return None
            return (left if src[0] == "l" else right), src[1]

        def python():
            dicts = X.dicts()
            return [(_combine(dicts[i], dicts[j]), None, None, dd)
                    for i, j, dd in zip(left.tolist(), right.tolist(), dur().tolist())]
        reads_dur = any(item[0] == "free" or item[1].dur for item in plan.post)
        ctx = vx.Ctx(X, n, lookup, dur() if reads_dur else None, python, self.spt, self.fns.get("abs") is abs)
        keep = None
        scal = {}
        for item in plan.post:
            if item[0] == "free":
                k = self._conj([item[1:]], ctx)
                keep = k if keep is None else keep & k
            else:
                v, a, y = item[1:]
                if not v.dur:
                    scal[id(v)] = (self._scalar(a, ctx, v.scalar), self._scalar(y, ctx, v.other) if y is not None else None)
                    self._vec_kinds(v, *scal[id(v)])
        lo, pid = pairs["lo"], pairs["pid"]
        done = set()
        if "hi" not in pairs:                   # one row per pair (a slotted key's entries)
            owner, pos = (None, lo) if keep is None or keep.all() else (np.flatnonzero(keep), lo[keep])
        else:
            hi = pairs["hi"] if keep is None else np.where(keep, pairs["hi"], lo)
            if plan.sort is not None:
                done.add(id(plan.sort))
                lo, hi = self._cut(st, plan.sort, pid, lo, hi, dur() if plan.sort.dur else None,
                                   scal.get(id(plan.sort)), done)
            owner, pos = _expand(lo, hi)
        p_o = pid if np.isscalar(pid) else _at(pid, owner)
        if np.isscalar(p_o) or not len(p_o) or p_o.min() == p_o.max():
            rows = st.perms[int(p_o if np.isscalar(p_o) else p_o[0])][pos] if len(pos) else _EMPTY
        else:
            rows = np.empty(len(pos), np.int64)
            for p in np.unique(p_o).tolist():
                sel = p_o == p
                rows[sel] = st.perms[p][pos[sel]]

        def narrow(m):
            nonlocal owner, rows
            owner = np.flatnonzero(m) if owner is None else owner[m]
            rows = rows[m]
        if fam.n_live < len(fam.names):
            narrow(fam.live()[rows])
        for item in plan.post:
            if item[0] == "vec" and id(item[1]) not in done and len(rows):
                a_y = scal.get(id(item[1]), (None, None))
                narrow(self._vec_rows(item[1], fam, rows, owner, a_y[0], a_y[1], dur() if item[1].dur else None))
        if plan.start_deferred and len(rows):
            sd = X.t1[left] - X.t0[left] + 1    # the start event's DUR
            sctx = self._ctx(X, {Scope.RIGHT: left}, sd)
            for v, a, y in plan.start_deferred:
                if v.dur:
                    narrow(self._vec_rows(v, fam, rows, owner, None, None, sd))
                else:
                    narrow(self._vec_rows(v, fam, rows, owner, self._scalar(a, sctx, v.scalar),
                                          self._scalar(y, sctx, v.other) if y is not None else None, None))
        lo_, ro_ = _at(left, owner), _at(right, owner)
        return {"left": lo_, "right": ro_, "row": rows, "t1": X.t1[ro_], "st1": X.t1[lo_], "spos": position[lo_]}

    def _cut(self, st: _State, v: _Vec, pid, lo, hi, d, scal, done):
        """Narrow each pair's slice to the rows where the monotone conjunct ``v`` holds (rows sorted by its
        constant): an exact binary search of the predicate.  Pairs whose values could break monotonicity
        (non-finite numbers, integer overflow) keep their slice and ``v`` is checked row by row."""
        if v.dur:
            a_vals, a_ok, y_vals = d.astype(np.float64), np.ones(len(d), bool), None
            kind = "num"
        else:
            a, y = scal
            if a.kind == "null" or (y is not None and y.kind == "null"):
                return lo, lo.copy()
            a_vals, a_ok, kind = a.vals, a.valid.copy(), a.kind
            y_vals = None
            if y is not None:
                a_ok &= y.valid
                y_vals = y.vals
            if kind != v.kind:
                done.discard(id(v))             # (= / != only: not monotone; cannot happen)
                return lo, hi
        search = a_ok.copy()
        if kind == "num":
            search &= np.isfinite(a_vals)
            if y_vals is not None:
                search &= np.isfinite(y_vals)
        hi = np.where(a_ok, hi, lo)             # a NULL scalar: the conjunct holds for no row
        if not search.all():
            done.discard(id(v))                 # some pairs keep their slice: v checked row by row
        op = v.op
        arith = v.arith
        out_lo, out_hi = lo.copy(), hi.copy()
        for p in np.unique(pid).tolist():
            sv = st.sorted_vals.get(p)
            sel = np.flatnonzero((pid == p) & search)
            if sv is None or not len(sel):
                if sv is None:
                    done.discard(id(v))
                continue
            if arith is not None and sv.dtype == np.int64 and len(sv) and y_vals is not None:
                big = np.abs(sv).max() * np.abs(y_vals[sel]) >= vx.EXACT_INT
                if big.any():
                    done.discard(id(v))
                    sel = sel[~big]
            a_s = a_vals[sel]
            y_s = y_vals[sel] if y_vals is not None else None
            if arith is None or v.dur:
                g = lambda m, i: sv[m]  # noqa: E731
                inc = np.ones(len(sel), bool)
            else:
                aop, slot_left = arith

                def g(m, i, aop=aop, slot_left=slot_left):
                    s_ = sv[m].astype(np.float64) if sv.dtype != np.int64 or aop == "*" else sv[m]
                    yy = y_s[i]
                    if aop == "+":
                        return s_ + yy
                    if aop == "*":
                        return s_ * yy
                    return s_ - yy if slot_left else yy - s_
                inc = np.ones(len(sel), bool) if aop == "+" or (aop == "-" and slot_left) else \
                    (y_s > 0) if aop == "*" else np.zeros(len(sel), bool)
                const = (aop == "*") & (y_s == 0) if aop == "*" else np.zeros(len(sel), bool)
                inc = inc | const               # constant: all or nothing, as a prefix
            cmp = _NP_CMP[op]
            prefix = (op in (">", ">=")) == inc     # a > g(c): a prefix when g increases
            L, H = lo[sel], hi[sel]

            def q(m, i):
                with np.errstate(all="ignore"):
                    t = np.asarray(cmp(a_s[i], g(m, i)), bool)
                return np.where(prefix[i], t, ~t)
            cut = _first_false(L, H, q)
            out_lo[sel] = np.where(prefix, L, cut)
            out_hi[sel] = np.where(prefix, cut, H)
        return out_lo, out_hi

    def _combined(self, X: vx.Rows) -> dict:
        """Combined event attribute -> ('l' | 'r', attribute of X) (``_combine``'s renaming, 004 §2.3)."""
        names = X.names
        out = _combine({a: ("l", a) for a in names}, {a: ("r", a) for a in names})
        return out

    def _commit(self, st: _State, r: dict) -> None:
        """The family's new state: the waiting instances, their binding rows carried (compacted)."""
        wait, X = r["wait"], r["X"]
        k = len(wait["key"])
        self._vs["vec_matches"] += len(r["out"]["row"])
        if not k:
            st.pending = st.empty()
            st.carry = None
        else:
            refs = [wait["left"], wait["last"]] if st.plan.fold else [wait["left"]]
            used, inv = np.unique(np.concatenate(refs), return_inverse=True)
            st.carry = vx.Rows(_take_rows(X.table, used), X.t0[used], X.t1[used])
            st.carry_pos = r["pos"][used]
            wait = dict(wait)
            wait["left"] = inv[:k]
            if st.plan.fold:
                wait["last"] = inv[k:]
            st.pending = wait
        st.prune_perms()

    def _hold(self, st: _State, r: dict, which: np.ndarray) -> None:
        """Outputs of a tick that is still open: into ``FamilyEngine``'s pending list (released, sorted per
        query, when the tick closes)."""
        if not which.any():
            return
        out = {k: v[which] for k, v in r["out"].items()}
        for k in r["out"]:
            r["out"][k] = r["out"][k][~which]
        r["t1"] = r["out"]["t1"]
        names = st.fam.names
        pending = self._fam_pending_out
        for j, e in enumerate(self._events(out, r["X"])):
            pending.append(((int(out["t1"][j]), (int(out["st1"][j]), int(out["spos"][j]))),
                            names[int(out["row"][j])], e))

    @staticmethod
    def _events(out: dict, X: vx.Rows) -> list[dict]:
        """Each output's event dict (``e1 ⊗ e2`` with t0, t1), one dict per (left, right) pair shared by
        the queries it outputs for (as ``FamilyEngine``)."""
        left, right = out["left"], out["right"]
        if not len(left):
            return []
        idx = np.unique(np.concatenate([left, right]))
        dicts = dict(zip(idx.tolist(), _take_rows(X.table, idx).to_pylist()))
        made: dict = {}
        events = []
        for li, ri in zip(left.tolist(), right.tolist()):
            e = made.get((li, ri))
            if e is None:
                e = made[(li, ri)] = _combine(dicts[li], dicts[ri])
                e["t0"], e["t1"] = int(X.t0[li]), int(X.t1[ri])
            events.append(e)
        return events

    # ---- output --------------------------------------------------------------------------------------
    @staticmethod
    def _sorted(out: dict) -> dict:
        """The outputs in the oracle's order: by t1, then the start event's key (t1, position)."""
        order = np.lexsort((out["spos"], out["t1"]))   # (one stream: its position orders the start's t1 too)
        return {k: v[order] for k, v in out.items()}

    def _matches(self, c) -> list[Match]:
        st, X, out = c
        out = self._sorted(out)
        names = st.fam.names
        return [Match(names[r], e) for r, e in zip(out["row"].tolist(), self._events(out, X))]

    def _table(self, c, layout, group_id, schema: pa.Schema) -> pa.Table:
        """Match rows as columns: the query names and each attribute taken from the batch's columns."""
        from sparksub.operators.events.partitions import _fit
        st, X, out = c
        out = self._sorted(out)
        n = len(out["row"])
        fam = st.fam
        if st.names is None:
            st.names = pa.array(fam.names, pa.string())
        rows = pa.array(out["row"], pa.int64())
        data = {f.name: None for f in schema}
        data["query"] = st.names.take(rows)
        zeros = pa.array(np.zeros(n, np.int32))
        data["op"] = pa.array(["match"], pa.string()).take(zeros)
        data["group_id"] = pa.array([group_id], pa.string()).take(zeros)
        data["t0"] = pa.array(X.t0[out["left"]], pa.int64())
        data["t1"] = pa.array(out["t1"], pa.int64())
        combined = self._combined(X)
        side = {"l": pa.array(out["left"], pa.int64()), "r": pa.array(out["right"], pa.int64())}
        pairs = self._layout_pairs(st, layout, out["row"])
        if pairs is None:                      # (queries of one template share their output columns)
            return _matches_table(self._matches(c), layout, group_id, schema)
        reasons = None
        for attr, col in pairs:
            src = combined.get(attr)
            t = schema.field(col).type
            if src is None:
                continue
            arr = X.table.column(src[1]).take(side[src[0]]).combine_chunks()
            fitted = _fit_array(arr, t)
            if fitted is None:                  # values that need Python's rules (partitions._fit)
                vals, problems = [], []
                for v in arr.to_pylist():
                    fv, bad = _fit(v, t)
                    vals.append(fv)
                    problems.append(f"attribute {attr}: {bad}" if bad else None)
                fitted = pa.array(vals, t)
                if any(problems):
                    reasons = reasons or [[] for _ in range(n)]
                    for k, p in enumerate(problems):
                        if p:
                            reasons[k].append(p)
            data[col] = fitted
        if reasons is not None:
            data["reason"] = pa.array(["; ".join(r) or None for r in reasons], pa.string())
        for f in schema:
            if data[f.name] is None:
                data[f.name] = pa.nulls(n, f.type)
        return pa.table(data, schema=schema)

    @staticmethod
    def _layout_pairs(st: _State, layout, rows: np.ndarray):
        """The (attribute, column) pairs ``layout`` gives every query of the family -- the same for all of
        them, as they share their output attributes; checked once per row and layout -- or None."""
        names = st.fam.names
        seen = st.layouts.get(id(layout))
        if seen is None or seen[0] is not layout:
            if len(st.layouts) > 4:             # (a caller may build a layout per batch: keep a few)
                st.layouts.clear()
            seen = st.layouts[id(layout)] = (layout, layout.columns.get(names[int(rows[0])], ()),
                                             np.zeros(len(names), bool))
        _, pairs, checked = seen
        if len(checked) < len(names):
            checked = np.concatenate([checked, np.zeros(len(names) - len(checked), bool)])
            st.layouts[id(layout)] = (layout, pairs, checked)
        new = np.unique(rows[~checked[rows]])
        if len(new):
            cols = layout.columns
            if any(cols.get(names[r], ()) != pairs for r in new.tolist()):
                return None
            checked[new] = True
        return pairs

    # ---- inspection and state ------------------------------------------------------------------------
    def instances(self) -> int:
        return super().instances() + sum(st.size() for st in self._vec.values())

    def stats(self) -> dict:
        st = super().stats()
        k = sum(s.size() for s in self._vec.values())
        if k:
            size = sum(sum(v.nbytes for v in s.pending.values()) + (s.carry.table.nbytes if s.carry else 0)
                       for s in self._vec.values()) / k
            n_all = st["instances_alive"] + k
            st["bytes_per_instance"] = (st.get("bytes_per_instance", 0) * st["instances_alive"] + size * k) / n_all
            st["instances_alive"] = n_all
        st["family_instances_alive"] = st.get("family_instances_alive", 0) + k
        st["vectorised_families"] = self.vectorised_families()
        st.update(self._vs)
        st["matches"] = st.get("matches", 0) + self._vs["vec_matches"]
        return st

    def snapshot(self) -> bytes:
        """``FamilyEngine.snapshot()`` of the same state (the vectorised families' instances converted):
        a snapshot restores into either executor."""
        states = list(self._vec.values())
        for s in states:
            self._to_per_event(s)
        try:
            return super().snapshot()
        finally:
            self._unpark({s.fam.stream for s in states})

    def restore(self, data: bytes) -> None:
        for s in list(self._vec.values()):
            self._attach(s.fam)
            self._parked[id(s.fam)] = (s.fam, s.plan)
        super().restore(data)               # the instances go to the families' nodes: parked until a batch


def _matches_table(matches, layout, group_id, schema):
    from sparksub.operators.events.partitions import matches_to_table
    return matches_to_table(matches, layout, group_id, schema)


def _fit_array(arr: pa.Array, t: pa.DataType) -> pa.Array | None:
    """``arr`` as type ``t`` where Arrow's cast gives what ``partitions._fit`` gives, else None."""
    src = arr.type
    if src == t:
        return arr
    if pa.types.is_null(src):
        return pa.nulls(len(arr), t)
    if pa.types.is_floating(t) and (pa.types.is_integer(src) or pa.types.is_floating(src)
                                    or pa.types.is_boolean(src)):
        return arr.cast(t, safe=False)
    if pa.types.is_integer(t) and pa.types.is_integer(src):
        try:
            return arr.cast(t)
        except pa.ArrowInvalid:
            return None
    if pa.types.is_string(t) and pa.types.is_large_string(src):
        return arr.cast(t)
    return None
