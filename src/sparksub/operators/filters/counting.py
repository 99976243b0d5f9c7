"""The counting algorithm: the two-phase baseline Fabret et al. compare against (001 §5, §6).

Phase 1 is shared with every two-phase matcher (001 §2.2): a :class:`PredicateIndex` finds the
(event, predicate) pairs satisfied by a batch.  Phase 2 of the *counting* algorithm (Neonet,
001 §5): "maintain an association table giving for each predicate, the subscriptions where it
occurs.  Each time a predicate is satisfied, the count of each corresponding subscription is
incremented"; a subscription matches an event when its count reaches its number of predicates.
The paper measures it as the slowest of the algorithms (001 §6, Figure 3a): every satisfied
predicate touches every subscription containing it, however selective the rest of the
subscription is.

Vectorised over a batch:

* The association table is a CSR array ``pid -> subscription slots`` (``indptr`` of length
  ``capacity + 1``), rebuilt lazily at the first :meth:`CountingMatcher.match` after a change.
* Each satisfied pair ``(e, p)`` is expanded to ``(e, s)`` for every slot ``s`` in ``p``'s row
  (one ``np.repeat`` expansion); the counters are then one ``np.bincount`` over the dense key
  ``e * slot_capacity + s`` (in chunks of events) when that grid is at most a few times the
  number of increments, otherwise a sort of the keys and run lengths.  ``(e, s)`` matches when its count equals ``need[s]``, the number of *distinct*
  predicates of ``s`` (duplicates in one conjunction are removed at :meth:`add`, so they never
  double count).
* A subscription with no predicates matches every event.

>>> m = CountingMatcher()
>>> m.add(np.array([7, 3]), [[Pred("price", "<", (10,)), Pred("movie", "=", ("brazil",))],
...                          [Pred("price", "<", (10,))]])
>>> ev, slot = m.match({"price": [8, 12, 9], "movie": ["brazil", "brazil", "alien"]})
>>> list(zip(ev.tolist(), slot.tolist()))
[(0, 3), (0, 7), (2, 3)]
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sparksub.operators.filters.predicates import (
    Pred,
    PredicateIndex,
    _expand,
    _validated,
)

__all__ = ["CountingMatcher"]

_EMPTY_I = np.empty(0, dtype=np.int64)
_DENSE_COUNTER_LIMIT = 1 << 22          # counters per np.bincount chunk (events x slot_capacity)
_DENSE_WORK_PER_INCREMENT = 8           # dense grid when events * slot_capacity <= this * increments


class CountingMatcher:
    """Conjunctive subscriptions matched by counting satisfied predicates (001 §5).

    Slots are caller-assigned non-negative ints (dense is best: per-slot state is an array as
    long as the largest slot).  A subscription is one conjunction of :class:`Pred`.
    """

    def __init__(self, index: PredicateIndex | None = None):
        self.index = index if index is not None else PredicateIndex()
        self._pids_of_slot: dict[int, np.ndarray] = {}
        self._need = np.full(0, -1, dtype=np.int64)     # distinct predicates per slot; -1 = free
        self._zero_slots: set[int] = set()
        self._csr_indptr = np.zeros(1, dtype=np.int64)
        self._csr_slots = _EMPTY_I
        self._csr_dirty = False
        self._n_refs = 0
        self._csr_rebuilds = 0
        self._last: dict[str, int] = {}

    # -- maintenance ---------------------------------------------------------------------
    def add(self, slots: np.ndarray, conjunctions: Sequence[Sequence[Pred]]) -> None:
        """Register subscription ``conjunctions[i]`` under ``slots[i]`` (all-or-nothing)."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if slots.size != len(conjunctions):
            raise ValueError(f"{slots.size} slots for {len(conjunctions)} conjunctions")
        if slots.size == 0:
            return
        if slots.min() < 0:
            raise ValueError("slots must be non-negative")
        if np.unique(slots).size != slots.size:
            raise ValueError("duplicate slots in one add")
        top = int(slots.max())
        if top >= self._need.size:
            grown = np.full(max(top + 1, 2 * self._need.size), -1, dtype=np.int64)
            grown[: self._need.size] = self._need
            self._need = grown
        live = slots[self._need[slots] >= 0]
        if live.size:
            raise ValueError(f"slots already hold subscriptions: {live[:10].tolist()}")
        checked = [[_validated(p) for p in conj] for conj in conjunctions]   # raise before mutating
        index = self.index
        for slot, conj in zip(slots.tolist(), checked):
            pids = [index.add(p) for p in conj]
            distinct = np.unique(np.array(pids, dtype=np.int64))
            if len(pids) != distinct.size:                          # one reference per slot
                seen: set[int] = set()
                for pid in pids:
                    if pid in seen:
                        index.release(pid)
                    seen.add(pid)
            self._pids_of_slot[slot] = distinct
            self._need[slot] = distinct.size
            self._n_refs += distinct.size
            if distinct.size == 0:
                self._zero_slots.add(slot)
        self._csr_dirty = True

    def remove(self, slots: np.ndarray) -> None:
        """Drop the subscriptions in ``slots`` (all-or-nothing); the slots become free."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if slots.size == 0:
            return
        if np.unique(slots).size != slots.size:
            raise ValueError("duplicate slots in one remove")
        missing = [s for s in slots.tolist() if s not in self._pids_of_slot]
        if missing:
            raise KeyError(f"slots hold no subscription: {missing[:10]}")
        for slot in slots.tolist():
            pids = self._pids_of_slot.pop(slot)
            for pid in pids.tolist():
                self.index.release(pid)
            self._n_refs -= pids.size
            self._need[slot] = -1
            self._zero_slots.discard(slot)
        self._csr_dirty = True

    def __len__(self) -> int:
        return len(self._pids_of_slot)

    def __contains__(self, slot: int) -> bool:
        return int(slot) in self._pids_of_slot

    # -- the association table -----------------------------------------------------------
    def _association_table(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``pid -> slots``: slots of predicate p are ``slots[indptr[p]:indptr[p+1]]``."""
        capacity = self.index.capacity
        if self._csr_dirty or self._csr_indptr.size != capacity + 1:
            if self._pids_of_slot:
                pid_arrays = list(self._pids_of_slot.values())
                lengths = np.fromiter((a.size for a in pid_arrays), dtype=np.int64, count=len(pid_arrays))
                pids = np.concatenate(pid_arrays)
                owner = np.repeat(np.fromiter(self._pids_of_slot.keys(), dtype=np.int64,
                                              count=len(pid_arrays)), lengths)
            else:
                pids = owner = _EMPTY_I
            order = np.argsort(pids, kind="stable")
            self._csr_slots = owner[order]
            self._csr_indptr = np.zeros(capacity + 1, dtype=np.int64)
            np.cumsum(np.bincount(pids, minlength=capacity), out=self._csr_indptr[1:])
            self._csr_dirty = False
            self._csr_rebuilds += 1
        return self._csr_indptr, self._csr_slots

    # -- matching ------------------------------------------------------------------------
    def match(self, events) -> tuple[np.ndarray, np.ndarray]:
        """All matching (event index, slot) pairs of the batch, sorted by event then slot."""
        sat = self.index.evaluate(events)                       # phase 1 (001 §2.2)
        indptr, slot_of_entry = self._association_table()
        n_events, slot_capacity = sat.n_events, self._need.size
        # phase 2: one counter increment per (satisfied predicate, subscription containing it)
        ev, k = _expand(sat.event, indptr[sat.pid], indptr[sat.pid + 1])
        key = ev * slot_capacity + slot_of_entry[k]
        if key.size and n_events * slot_capacity <= _DENSE_WORK_PER_INCREMENT * key.size:
            matched = self._count_dense(key, ev, n_events, slot_capacity)
        elif key.size:
            key.sort()
            run_start = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
            run_length = np.diff(np.append(run_start, key.size))
            distinct = key[run_start]
            matched = distinct[run_length == self._need[distinct % slot_capacity]]
        else:
            matched = _EMPTY_I
        if self._zero_slots and n_events:
            always = np.array(sorted(self._zero_slots), dtype=np.int64)
            everyone = (np.arange(n_events, dtype=np.int64)[:, None] * slot_capacity + always).ravel()
            matched = np.union1d(matched, everyone)
        self._last = {"events": n_events, "satisfied_pairs": len(sat),
                      "counter_increments": int(key.size), "matches": int(matched.size)}
        if slot_capacity == 0:
            return _EMPTY_I, _EMPTY_I
        return matched // slot_capacity, matched % slot_capacity

    def _count_dense(self, key: np.ndarray, ev: np.ndarray, n_events: int, slot_capacity: int) -> np.ndarray:
        """Counters as a dense [events, slots] grid, ``np.bincount`` over chunks of events
        (``key`` is sorted by event because phase 1's pairs are)."""
        need = np.where(self._need > 0, self._need, -1)           # free / empty slots never hit
        chunk = max(1, _DENSE_COUNTER_LIMIT // slot_capacity)
        out = []
        for e0 in range(0, n_events, chunk):
            e1 = min(n_events, e0 + chunk)
            lo, hi = np.searchsorted(ev, [e0, e1], "left")
            if lo == hi:
                continue
            counters = np.bincount(key[lo:hi] - e0 * slot_capacity, minlength=(e1 - e0) * slot_capacity)
            hit = np.flatnonzero(counters.reshape(e1 - e0, slot_capacity) == need)
            out.append(hit + e0 * slot_capacity)
        return np.concatenate(out) if out else _EMPTY_I

    def stats(self) -> dict:
        return {
            "subscriptions": len(self._pids_of_slot),
            "empty_subscriptions": len(self._zero_slots),
            "distinct_predicates": len(self.index),
            "predicate_references": self._n_refs,
            "pid_capacity": self.index.capacity,
            "slot_capacity": int(self._need.size),
            "association_table_rebuilds": self._csr_rebuilds,
            "last_match": dict(self._last),
        }
