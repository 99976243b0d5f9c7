"""Subscription id -> slot, without a Python dict: a million subscriptions' index costs 16 bytes each.

A dict of a million string keys costs about 60 MB beside the strings themselves (issue 16: the driver's
memory must not grow with subscriptions).  This index keeps the ids' 64-bit hashes sorted, with their slots,
in two numpy arrays, and looks a batch of ids up with one ``searchsorted``; the caller's slot -> id column
(``id_of``: an :class:`~sparksub.operators.shared.id_column.IdColumn`, whose packed bytes compare a batch of
candidates in one vectorised pass, or an object array) confirms each candidate, so a hash collision costs a
scan of the equal-hash run, never a wrong answer.  Single inserts go to a small dict first (merged into the
arrays when it grows past an eighth of them, so n single inserts cost O(n log n) in all); removals mark their
entry (slot -1) and the marked entries are dropped at the next merge.

>>> from sparksub.operators.shared.id_column import IdColumn
>>> id_of = IdColumn.from_objects(np.array(["a", "b", "c", None], dtype=object))
>>> ix = IdIndex()
>>> ix.add(np.array(["a", "b", "c"], dtype=object), np.array([0, 1, 2]), id_of)
>>> ix.lookup(np.array(["c", "x", "a"], dtype=object), id_of).tolist()
[2, -1, 0]
>>> ix.remove(np.array([1]), id_of); len(ix), ix.lookup(np.array(["b"], dtype=object), id_of).tolist()
(2, [-1])
>>> objects = np.array(["a", "b", "c", None], dtype=object)   # a plain object column works the same
>>> ox = IdIndex(); ox.add(objects[:3], np.array([0, 1, 2]), objects)
>>> ox.lookup(np.array(["c", "d"], dtype=object), objects).tolist()
[2, -1]
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["IdIndex", "id_hashes"]


def id_hashes(ids: np.ndarray) -> np.ndarray:
    """64-bit hashes of an object array of strings (pandas' vectorised SipHash: no Python loop)."""
    return pd.util.hash_array(np.asarray(ids, dtype=object), categorize=False)


def _same(id_of, slots: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``id_of[slots] == ids`` elementwise: an ``IdColumn`` compares its bytes without a string per slot."""
    equals = getattr(id_of, "equals", None)
    return equals(slots, ids) if equals is not None else id_of[slots] == ids


class IdIndex:
    """Id -> slot for one registry whose ``id_of`` column (slot -> id: an ``IdColumn`` or an object array) is
    passed to each call."""

    def __init__(self):
        self._hashes = np.empty(0, dtype=np.uint64)   # sorted
        self._slots = np.empty(0, dtype=np.int64)     # aligned with _hashes; -1: removed (dropped at the next merge)
        self._recent: dict = {}                       # id -> slot, the single inserts since the last merge
        self._live = 0                                # live entries in the arrays

    def __len__(self) -> int:
        return self._live + len(self._recent)

    def add(self, ids: np.ndarray, slots: np.ndarray, id_of: np.ndarray) -> None:
        """Index ``ids`` (known to be absent) at ``slots``."""
        if len(ids) <= 8:
            self._recent.update(zip(ids.tolist(), np.asarray(slots).tolist()))
            if len(self._recent) > max(1024, len(self._hashes) >> 3):
                self._merge()
            return
        self._merge(np.asarray(ids, dtype=object), np.asarray(slots, dtype=np.int64))

    def _merge(self, ids=None, slots=None) -> None:
        """Fold the recent inserts (and ``ids`` at ``slots``) into the sorted arrays; drop removed entries."""
        keep = self._slots >= 0
        hashes, own = self._hashes[keep], self._slots[keep]
        extra_ids = [] if ids is None else [ids]
        extra_slots = [] if slots is None else [slots]
        if self._recent:
            extra_ids.append(np.array(list(self._recent.keys()), dtype=object))
            extra_slots.append(np.fromiter(self._recent.values(), dtype=np.int64, count=len(self._recent)))
            self._recent = {}
        if extra_ids:
            hashes = np.concatenate([hashes, id_hashes(np.concatenate(extra_ids))])
            own = np.concatenate([own, *extra_slots])
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._slots = hashes[order], own[order]
        self._live = int(self._slots.size)

    def lookup(self, ids: np.ndarray, id_of: np.ndarray) -> np.ndarray:
        """The slot of each id, -1 where absent."""
        ids = np.asarray(ids, dtype=object)
        out = np.full(ids.size, -1, dtype=np.int64)
        if self._hashes.size and ids.size:
            h = id_hashes(ids)
            pos = np.searchsorted(self._hashes, h)
            inside = pos < self._hashes.size
            at = np.where(inside, pos, 0)
            cand = np.where(inside & (self._hashes[at] == h), self._slots[at], -1)
            ok = cand >= 0
            ok[ok] = _same(id_of, cand[ok], ids[ok])
            out[ok] = cand[ok]
            # an equal-hash run longer than one (a collision, or an id removed and added again): scan it
            run = ~ok & inside & (self._hashes[at] == h)
            for i in np.flatnonzero(run).tolist():
                j = int(pos[i])
                while j < self._hashes.size and self._hashes[j] == h[i]:
                    s = int(self._slots[j])
                    if s >= 0 and id_of[s] == ids[i]:
                        out[i] = s
                        break
                    j += 1
        if self._recent:
            # a few ids (``sid in registry``): dict probes; a pandas isin costs ~0.2 ms a call whatever its size
            recent = (np.flatnonzero(pd.Series(ids).isin(list(self._recent)).to_numpy()).tolist() if ids.size > 64
                      else [i for i, sid in enumerate(ids.tolist()) if sid in self._recent])
            for i in recent:
                out[i] = self._recent[ids[i]]
        return out

    def remove(self, slots: np.ndarray, id_of: np.ndarray) -> None:
        """Unindex the (present) ids at ``slots``."""
        slots = np.asarray(slots, dtype=np.int64)
        ids = id_of[slots]
        if self._recent:
            gone = [self._recent.pop(sid, None) is not None for sid in ids.tolist()]
            slots = slots[~np.array(gone, dtype=bool)]
        if not slots.size:
            return
        # each slot's entry: search its id's hash run for the slot
        pos = np.searchsorted(self._hashes, id_hashes(id_of[slots]))
        first = self._slots[np.minimum(pos, self._slots.size - 1)] == slots
        self._slots[pos[first]] = -1
        for i in np.flatnonzero(~first).tolist():   # not first in its equal-hash run: walk the run
            j = int(pos[i])
            while self._slots[j] != slots[i]:
                j += 1
            self._slots[j] = -1
        self._live -= int(slots.size)
        if self._hashes.size - self._live > max(1024, self._hashes.size >> 3):
            self._merge()

    def slots(self) -> np.ndarray:
        """The slot of every indexed id, unordered."""
        live = self._slots[self._slots >= 0]
        if self._recent:
            live = np.concatenate([live, np.fromiter(self._recent.values(), dtype=np.int64,
                                                     count=len(self._recent))])
        return live
