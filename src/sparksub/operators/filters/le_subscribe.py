"""The clustered two-phase matching engine of 001 (Le Subscribe), vectorised with numpy.

Paper ``001`` = Fabret, Jacobsen, Llirbat, Pereira, Ross, Shasha, SIGMOD 2001.

Phase 1 (``predicates.PredicateIndex``) computes, for a batch of events, the satisfied
predicates -- the predicate bit vector of 001 §2.2, one row per event.  Phase 2 (this module)
finds the matched subscriptions through **clusters** (001 §2.2, Figure 1):

* A subscription is a set of interned predicate ids (pids).  It lives in exactly one cluster,
  reached through an **access predicate** the subscription contains (so it can only match
  events satisfying it, 001 §2.2): either a single predicate (``pid -> clusters``, computed
  from the phase-1 result for free, 001 §3.2 "natural clustering"; subscriptions without
  equalities use their most selective predicate), or a conjunction of equality predicates
  looked up in a **multi-attribute hash table** whose schema is an attribute set: the event's
  values on those attributes form the key (001 §3, "Hashing configuration").  Empty
  conjunctions sit in an always-checked cluster.
* Clusters are keyed by (access predicate, size) and store their subscriptions **column-wise**
  (001 §2.2 "predicates array" + "subscription line"): for each remaining predicate position k
  an int32 column of pids, plus the slots.  All clusters of one width (= predicates left to
  check) share one store; a cluster is a segment ``[start, start + len)`` with geometric
  capacity (relocated to the end of the store when full, store compacted when half garbage).
  Deletion is swap-with-last inside the segment; ``slot -> (cluster, row)`` maps are arrays.
* Matching a batch: every (event, accessed cluster) pair is expanded to (event, row) pairs and
  each column is gathered from the events' bit vectors, ``bitmap[ev, col_k[row]]``, keeping
  only survivors before the next column (columns are ordered most selective first, the
  vectorised analogue of the short-circuiting cluster_matching loop of 001 §2.2).

The clustering is chosen with the cost model of 001 §3 (``clustering.py``): event statistics
(per-predicate satisfaction counts, i.e. per-attribute value frequencies, and per-attribute
presence) are kept as events flow, exponentially decayed.  :meth:`LeSubscribe.recluster_static`
runs the greedy static algorithm (001 §3.2) under a space bound; with ``dynamic=True`` the
maintenance algorithm of 001 §4 runs every ``maintain_every`` events / subscription changes:
clusters whose benefit margin exceeds ``bm_max`` are redistributed to better existing tables,
potential tables whose benefit reaches ``b_create`` are created and populated from those
candidate clusters, and tables whose benefit drops under ``b_delete`` are dropped (their
subscriptions redistributed).  Nothing is ever rebuilt wholesale on insert.

Correctness does not depend on the clustering: a subscription is reported for an event iff
the event satisfies its access predicate (exact key comparison after hashing) and every one of
its remaining predicates.
"""
from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
import pandas as pd

from sparksub.operators.shared.arrays import concat_ranges

from .clustering import (CostParams, enumerate_schemas, greedy_static,
                         matching_cost, space_cost)
from .predicates import Pred, PredicateIndex

__all__ = ["LeSubscribe"]

_EMPTY = np.empty(0, dtype=np.int64)
_SCALAR_OPS = frozenset(("=", "!=", "<", "<=", ">", ">="))
_ALWAYS = -2      # cluster table code: checked for every event (empty conjunction)
_SINGLE = -1      # cluster table code: single access predicate, pid -> clusters

# random odd multipliers per key position for hashing multi-attribute keys (001 §3)
_KEY_MULT = (np.random.default_rng(0x001).integers(1, 2**62, size=64, dtype=np.uint64)
             * np.uint64(2) + np.uint64(1))


def _grow(a: np.ndarray, n: int, fill) -> np.ndarray:
    """Return ``a`` with at least ``n`` rows (geometric growth), new rows = ``fill``."""
    if len(a) >= n:
        return a
    m = max(n, 2 * len(a), 16)
    out = np.full((m,) + a.shape[1:], fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


def _key_hash(codes: np.ndarray) -> np.ndarray:
    """Hash rows of key pids (int64 [n, k]) into uint64 (collisions are verified exactly)."""
    k = codes.shape[1]
    with np.errstate(over="ignore"):
        return ((codes.astype(np.uint64) + np.uint64(1)) * _KEY_MULT[:k]).sum(
            axis=1, dtype=np.uint64)


class _KeyIndex:
    """Hash index ``key -> clusters`` (sorted uint64 keys + searchsorted; lazily re-sorted).

    Used for ``pid -> clusters`` (single access predicates; the key is the pid) and for each
    multi-attribute hash table (the key is the hash of the equality pids on its schema, the
    pids themselves kept for exact verification).
    """

    def __init__(self, k: int):
        self.k = k
        self.keys = np.empty(16, dtype=np.uint64)
        self.cids = np.empty(16, dtype=np.int64)
        self.codes = np.empty((16, k), dtype=np.int64)
        self.n = 0
        self.pos: dict[int, int] = {}
        self.dead = 0
        self.dirty = True

    def add(self, key: int, cid: int, codes) -> None:
        self.keys = _grow(self.keys, self.n + 1, 0)
        self.cids = _grow(self.cids, self.n + 1, -1)
        self.codes = _grow(self.codes, self.n + 1, -1)
        self.keys[self.n] = key
        self.cids[self.n] = cid
        if self.k:
            self.codes[self.n] = codes
        self.pos[cid] = self.n
        self.n += 1
        self.dirty = True

    def add_many(self, keys: np.ndarray, cids: np.ndarray, codes: np.ndarray | None) -> None:
        m = len(cids)
        self.keys = _grow(self.keys, self.n + m, 0)
        self.cids = _grow(self.cids, self.n + m, -1)
        self.codes = _grow(self.codes, self.n + m, -1)
        self.keys[self.n: self.n + m] = keys
        self.cids[self.n: self.n + m] = cids
        if self.k:
            self.codes[self.n: self.n + m] = codes
        self.pos.update(zip(cids.tolist(), range(self.n, self.n + m)))
        self.n += m
        self.dirty = True

    def remove(self, cid: int) -> None:
        i = self.pos.pop(cid)
        self.cids[i] = -1
        self.dead += 1
        self.dirty = True

    def _sort(self) -> None:
        if not self.dirty:
            return
        n = self.n
        live = np.flatnonzero(self.cids[:n] >= 0)
        if self.dead > max(64, n // 2):      # compact tombstones
            self.keys[: len(live)] = self.keys[live]
            self.cids[: len(live)] = self.cids[live]
            self.codes[: len(live)] = self.codes[live]
            self.n = len(live)
            self.dead = 0
            self.pos = dict(zip(self.cids[: self.n].tolist(), range(self.n)))
            live = np.arange(self.n)
        o = live[np.argsort(self.keys[live], kind="stable")]
        self.s_keys = self.keys[o]
        self.s_cids = self.cids[o]
        self.s_codes = self.codes[o]
        self.dirty = False

    def lookup(self, q: np.ndarray):
        """For query keys ``q``: (query index, cluster id, stored codes) of every entry."""
        self._sort()
        lo = np.searchsorted(self.s_keys, q, "left")
        hi = np.searchsorted(self.s_keys, q, "right")
        cnt = hi - lo
        e = concat_ranges(lo, cnt)
        qi = np.repeat(np.arange(len(q), dtype=np.int64), cnt)
        return qi, self.s_cids[e], (self.s_codes[e] if self.k else None)

    def __len__(self) -> int:
        return len(self.pos)


class _Store:
    """Column-wise rows of every cluster of one width (001 §2.2, Figure 1)."""

    def __init__(self, w: int):
        self.w = w
        self.cols = np.full((w, 64), -1, dtype=np.int32)
        self.slots = np.full(64, -1, dtype=np.int64)
        self.top = 0
        self.garbage = 0

    def reserve(self, n: int) -> None:
        cap = self.slots.shape[0]
        if n <= cap:
            return
        m = max(n, 2 * cap)
        cols = np.full((self.w, m), -1, dtype=np.int32)
        cols[:, : self.top] = self.cols[:, : self.top]
        slots = np.full(m, -1, dtype=np.int64)
        slots[: self.top] = self.slots[: self.top]
        self.cols, self.slots = cols, slots


class _Table:
    """A multi-attribute hash table (001 §3): schema = sorted attribute ids."""

    def __init__(self, schema: tuple):
        self.schema = schema
        self.index = _KeyIndex(len(schema))
        self.n_subs = 0


def _factorize(op: str, col, n: int) -> tuple[np.ndarray, list[tuple]]:
    """Codes (int64 [n]) and the distinct constant tuples of one template column."""
    zeros = np.zeros(n, dtype=np.int64)
    if op in ("is_null", "is_not_null"):
        return zeros, [()]
    if op == "in":
        if isinstance(col, tuple):
            return zeros, [col]
        seen: dict = {}
        codes = np.fromiter((seen.setdefault(tuple(v), len(seen)) for v in col), dtype=np.int64,
                            count=n)
        return codes, list(seen)
    if op == "between":
        lo, hi = col
        c_lo, u_lo = _factorize_scalar(lo, n)
        c_hi, u_hi = _factorize_scalar(hi, n)
        codes, uniq = pd.factorize(c_lo * len(u_hi) + c_hi)
        return codes.astype(np.int64), [(u_lo[c // len(u_hi)], u_hi[c % len(u_hi)])
                                        for c in uniq.tolist()]
    codes, uniq = _factorize_scalar(col, n)
    return codes, [(u,) for u in uniq]


def _reject_none(arr: np.ndarray) -> None:
    if arr.dtype == object:
        none = np.flatnonzero(np.equal(arr, None))
        if len(none):
            raise TypeError(f"predicate constant must be a number or a string, got None in row {none[0]}")


def _factorize_scalar(col, n: int) -> tuple[np.ndarray, list]:
    if np.ndim(col) == 0:
        return np.zeros(n, dtype=np.int64), [col.item() if isinstance(col, np.generic) else col]
    arr = np.asarray(col)
    if arr.shape != (n,):
        raise ValueError(f"constant column has shape {arr.shape}, expected ({n},)")
    _reject_none(arr)
    codes, uniq = pd.factorize(arr, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniq).tolist()


class LeSubscribe:
    """Clustered two-phase matching of conjunctive subscriptions (001 §2-§4).

    Parameters
    ----------
    params:
        Cost-model constants (:class:`clustering.CostParams`).
    dynamic:
        Run the 001 §4 maintenance algorithm after ``match`` every ``maintain_every`` events
        (or ``maintain_subs`` subscription changes).
    bm_max, b_create, b_delete:
        001 §4 thresholds, in expected subscription checks per event: a cluster whose benefit
        margin ``sum_s (nu(p_c) - nu(P(s)))`` exceeds ``bm_max`` is redistributed; a potential
        table whose benefit (checks saved per event minus its lookup cost) reaches
        ``b_create`` is created; an existing table whose benefit falls below ``b_delete`` is
        dropped.
    stats_halflife:
        Event statistics decay by half every this many events (so shifting statistics show).
    max_schema:
        Largest multi-attribute schema considered.
    """

    #: from this many subscriptions on, removal compacts cluster segments instead of swapping
    bulk_unplace = 256
    #: a maintenance round runs the table-creation greedy on at most this many subscriptions
    maintain_sample = 100_000

    def __init__(self, params: CostParams = CostParams(), *, dynamic: bool = True,
                 maintain_every: int = 16384, maintain_subs: int = 50_000,
                 bm_max: float = 1.0, b_create: float = 4.0, b_delete: float = 1.0,
                 stats_halflife: float = 200_000.0, max_schema: int = 4,
                 max_new_tables: int = 64, chunk_bytes: int = 16 << 20,
                 predicate_index: PredicateIndex | None = None):
        self.params = params
        self.dynamic = dynamic
        self.maintain_every = maintain_every
        self.maintain_subs = maintain_subs
        self.bm_max, self.b_create, self.b_delete = bm_max, b_create, b_delete
        self.stats_halflife = stats_halflife
        self.max_schema = max_schema
        self.max_new_tables = max_new_tables
        self.chunk_bytes = chunk_bytes
        self._pi = predicate_index if predicate_index is not None else PredicateIndex()
        # attributes
        self._attr_id: dict[str, int] = {}
        self._attr_names: list[str] = []
        self._attr_ndistinct = np.zeros(0, dtype=np.int64)   # distinct equality values
        self._attr_present = np.zeros(0, dtype=np.float64)   # decayed presence counts
        # per pid (dense ids of the predicate index)
        self._pid_ref = np.zeros(0, dtype=np.int64)
        self._pid_attr = np.zeros(0, dtype=np.int64)          # attr id for '=', else -1
        self._pid_hits = np.zeros(0, dtype=np.float64)        # decayed satisfaction counts
        self._n_seen = 0.0
        self._lognu_cache = None
        # per slot
        self._slot_cl = np.zeros(0, dtype=np.int64)
        self._slot_row = np.zeros(0, dtype=np.int64)
        self._slot_pids = np.full((0, 1), -1, dtype=np.int32)
        self._slot_np = np.zeros(0, dtype=np.int64)
        self._n_subs = 0
        # clusters
        self._cl_w = np.zeros(0, dtype=np.int64)
        self._cl_start = np.zeros(0, dtype=np.int64)
        self._cl_cap = np.zeros(0, dtype=np.int64)
        self._cl_len = np.zeros(0, dtype=np.int64)
        self._cl_tab = np.zeros(0, dtype=np.int64)
        self._cl_alive = np.zeros(0, dtype=bool)
        self._cl_keys = np.full((0, 1), -1, dtype=np.int64)   # access pids, -1 padded
        self._cl_dictkey: list = []
        self._cl_lookup: dict = {}
        self._cl_free: list[int] = []
        self._n_cl = 0
        self._always: set[int] = set()
        self._stores: dict[int, _Store] = {}
        # access structures
        self._pid_index = _KeyIndex(0)
        self._tables: list[_Table | None] = []
        self._schema_tab: dict[tuple, int] = {}
        # counters
        self._since_events = 0
        self._since_changes = 0
        self._counters = defaultdict(float)

    # ------------------------------------------------------------------ registries
    def _attr(self, name: str) -> int:
        a = self._attr_id.get(name)
        if a is None:
            a = self._attr_id[name] = len(self._attr_names)
            self._attr_names.append(name)
            self._attr_ndistinct = _grow(self._attr_ndistinct, a + 1, 0)
            self._attr_present = _grow(self._attr_present, a + 1, 0.0)
        return a

    def _ensure_pid_arrays(self) -> None:
        cap = max(1, self._pi.capacity)
        self._pid_ref = _grow(self._pid_ref, cap, 0)
        self._pid_attr = _grow(self._pid_attr, cap, -1)
        self._pid_hits = _grow(self._pid_hits, cap, 0.0)

    def _intern_pred(self, p: Pred, count: int = 1) -> int:
        """Intern one predicate with ``count`` references and keep the per-pid arrays in step."""
        pid = self._pi.add(p, count)
        if pid >= len(self._pid_ref):
            self._ensure_pid_arrays()
        if self._pid_ref[pid] == 0:              # new (or recycled) pid: reset its info
            self._pid_hits[pid] = 0.0
            a = self._attr(p.attr)
            self._pid_attr[pid] = a if p.op == "=" else -1
            if p.op == "=":
                self._attr_ndistinct[a] += 1
            self._lognu_cache = None
        self._pid_ref[pid] += count
        return pid

    def _intern(self, conj) -> list[int]:
        pids: list[int] = []
        for p in conj:
            if type(p) is not Pred:
                p = Pred(*p)
            pid = self._intern_pred(p)
            if pid in pids:                      # duplicate predicate inside a conjunction
                self._release_n(pid, 1)
                continue
            pids.append(pid)
        return pids

    def _release_n(self, pid: int, count: int) -> None:
        self._pid_ref[pid] -= count
        if self._pid_ref[pid] == 0:
            a = self._pid_attr[pid]
            if a >= 0:
                self._attr_ndistinct[a] -= 1
            self._pid_attr[pid] = -1
            self._lognu_cache = None
        self._pi.release(pid, count)

    def _release(self, pids) -> None:
        for pid in pids:
            self._release_n(pid, 1)

    # ------------------------------------------------------------------ statistics
    def _lognu(self) -> np.ndarray:
        """log nu(p) per pid: smoothed, decayed satisfaction frequency (001 §3.1 nu)."""
        if self._lognu_cache is None:
            self._ensure_pid_arrays()
            a = self._pid_attr
            nd = np.where(a >= 0, self._attr_ndistinct[np.maximum(a, 0)] if len(self._attr_ndistinct)
                          else 1, 1)
            prior = np.where(a >= 0, 1.0 / (nd + 1.0), 0.5)
            self._lognu_cache = np.log((self._pid_hits + prior) / (self._n_seen + 1.0))
        return self._lognu_cache

    def _attr_mu(self) -> np.ndarray:
        """Presence probability per attribute (mu of a schema = product, 001 §3.1)."""
        return (self._attr_present + 1.0) / (self._n_seen + 1.0)

    # ------------------------------------------------------------------ clusters / stores
    def _store(self, w: int) -> _Store:
        st = self._stores.get(w)
        if st is None:
            st = self._stores[w] = _Store(w)
        return st

    def _new_clusters(self, tab: np.ndarray, keys: np.ndarray, width: np.ndarray,
                      cap: np.ndarray, dictkeys: list) -> np.ndarray:
        """Create clusters ``(tab[i], keys[i], width[i])`` with room for ``cap[i]`` rows, in one
        vectorised pass (a new hash table makes thousands); ``dictkeys`` are their lookup keys."""
        m = len(tab)
        reuse = [self._cl_free.pop() for _ in range(min(m, len(self._cl_free)))]
        fresh = np.arange(self._n_cl, self._n_cl + m - len(reuse), dtype=np.int64)
        cids = np.concatenate([np.asarray(reuse, dtype=np.int64), fresh])
        self._n_cl += len(fresh)
        for name, fill in (("_cl_w", 0), ("_cl_start", 0), ("_cl_cap", 0), ("_cl_len", 0),
                           ("_cl_tab", 0), ("_cl_alive", False), ("_cl_keys", -1)):
            setattr(self, name, _grow(getattr(self, name), self._n_cl, fill))
        self._cl_dictkey.extend([None] * (self._n_cl - len(self._cl_dictkey)))
        kw = keys.shape[1]
        if kw > self._cl_keys.shape[1]:
            k = np.full((self._cl_keys.shape[0], kw), -1, dtype=np.int64)
            k[:, : self._cl_keys.shape[1]] = self._cl_keys
            self._cl_keys = k
        for w in np.unique(width).tolist():
            sel = np.flatnonzero(width == w)
            st = self._store(w)
            c = cap[sel]
            st.reserve(st.top + int(c.sum()))
            self._cl_start[cids[sel]] = st.top + np.cumsum(c) - c
            st.top += int(c.sum())
        self._cl_w[cids], self._cl_cap[cids], self._cl_len[cids] = width, cap, 0
        self._cl_tab[cids], self._cl_alive[cids] = tab, True
        self._cl_keys[cids] = -1
        self._cl_keys[cids, :kw] = keys
        for cid, dk in zip(cids.tolist(), dictkeys):
            self._cl_dictkey[cid] = dk
            self._cl_lookup[dk] = cid
        self._always.update(cids[tab == _ALWAYS].tolist())
        single = tab == _SINGLE
        if single.any():
            self._pid_index.add_many(keys[single, 0].astype(np.uint64), cids[single], None)
        for t in np.unique(tab[tab >= 0]).tolist():
            sel = tab == t
            k = len(self._tables[t].schema)
            self._tables[t].index.add_many(_key_hash(keys[sel, :k]), cids[sel], keys[sel, :k])
        self._counters["clusters_created"] += m
        return cids

    def _free_cluster(self, cid: int) -> None:
        tab = int(self._cl_tab[cid])
        if tab == _ALWAYS:
            self._always.discard(cid)
        elif tab == _SINGLE:
            self._pid_index.remove(cid)
        else:
            self._tables[tab].index.remove(cid)
        del self._cl_lookup[self._cl_dictkey[cid]]
        self._cl_dictkey[cid] = None
        self._cl_alive[cid] = False
        st = self._stores[int(self._cl_w[cid])]
        st.garbage += int(self._cl_cap[cid])
        self._cl_cap[cid] = 0
        self._cl_free.append(cid)

    def _relocate(self, cid: int, need: int) -> None:
        """Give cluster ``cid`` room for ``need`` rows: move it to the store's end, 2x capacity."""
        w = int(self._cl_w[cid])
        st = self._stores[w]
        old, n, cap = int(self._cl_start[cid]), int(self._cl_len[cid]), int(self._cl_cap[cid])
        newcap = max(need, 2 * cap, 2)
        st.reserve(st.top + newcap)
        new = st.top
        st.cols[:, new: new + n] = st.cols[:, old: old + n]
        st.slots[new: new + n] = st.slots[old: old + n]
        self._slot_row[st.slots[new: new + n]] = np.arange(new, new + n)
        st.top += newcap
        st.garbage += cap
        self._cl_start[cid], self._cl_cap[cid] = new, newcap

    def _compact(self, w: int) -> None:
        """Rewrite a width store without garbage (vectorised, amortised)."""
        st = self._stores[w]
        cids = np.flatnonzero(self._cl_alive[: self._n_cl] & (self._cl_w[: self._n_cl] == w))
        caps = self._cl_cap[cids]
        lens = self._cl_len[cids]
        caps = np.maximum(lens, np.minimum(caps, 2 * lens + 2))
        newstart = np.cumsum(caps) - caps
        src = concat_ranges(self._cl_start[cids], lens)
        dst = concat_ranges(newstart, lens)
        cols = np.full((w, max(64, int(caps.sum()) * 2)), -1, dtype=np.int32)
        slots = np.full(cols.shape[1], -1, dtype=np.int64)
        cols[:, dst] = st.cols[:, src]
        slots[dst] = st.slots[src]
        st.cols, st.slots = cols, slots
        st.top = int(caps.sum())
        st.garbage = 0
        self._cl_start[cids] = newstart
        self._cl_cap[cids] = caps
        self._slot_row[slots[dst]] = dst
        self._counters["compactions"] += 1

    # ------------------------------------------------------------------ placement
    def _profile(self, slots: np.ndarray):
        """Equality profile of subscriptions: eq attrs / pids / log nu, packed left."""
        self._ensure_pid_arrays()
        P = self._slot_pids[slots].astype(np.int64)
        valid = P >= 0
        attr = np.where(valid, self._pid_attr[np.maximum(P, 0)], -1)
        m = attr.shape[1]
        for j in range(1, m):                       # one equality per attribute (P(s))
            dup = np.zeros(len(attr), dtype=bool)
            for k in range(j):
                dup |= attr[:, k] == attr[:, j]
            attr[:, j] = np.where(dup, -1, attr[:, j])
        o = np.argsort(attr < 0, axis=1, kind="stable")
        attr = np.take_along_axis(attr, o, axis=1)
        eqp = np.take_along_axis(P, o, axis=1)
        me = int((attr >= 0).sum(axis=1).max()) if len(attr) else 0
        attr, eqp = attr[:, :me], eqp[:, :me]
        lognu = self._lognu()
        eqln = np.where(attr >= 0, lognu[np.maximum(eqp, 0)], 0.0)
        allln = np.where(valid, lognu[np.maximum(P, 0)], np.inf)
        return P, attr, eqp, eqln, allln

    def _chk(self, width):
        return self.params.K_check + self.params.K_pred * np.asarray(width, dtype=np.float64)

    def _choose(self, slots: np.ndarray, exclude_tab: int | None = None):
        """Best access per subscription among existing tables (001 §3.2 best clustering
        instance / 001 §4 "chooses always the hash table that gives the best benefit").

        Returns ``(tab, keys)``: per subscription its table code (``_SINGLE``, ``_ALWAYS`` or a
        table id) and its access key, int64 ``[n, kw]`` -1 padded (the single access pid, or the
        equality pids on the table's schema in attribute order).  Vectorised over subscriptions:
        the candidates are the single predicates and the existing tables only, so no ``GA(s)``
        enumeration is needed (that one is for creating tables, :meth:`maintain`).
        """
        n = len(slots)
        live = [(tid, t.schema) for tid, t in enumerate(self._tables)
                if t is not None and tid != exclude_tab]
        kw = max([1, self.max_schema] + [len(sc) for _, sc in live])
        tab = np.full(n, _SINGLE, dtype=np.int64)
        keys = np.full((n, kw), -1, dtype=np.int64)
        if n == 0:
            return tab, keys
        P, attr, eqp, eqln, allln = self._profile(slots)
        size = self._slot_np[slots]
        rows = np.arange(n)
        # single access: the most selective predicate of any operator (001 §3.2 natural clustering)
        if P.shape[1]:
            col = np.argmin(allln, axis=1)
            best = np.exp(allln[rows, col]) * self._chk(size - 1)
            keys[:, 0] = P[rows, col]
        else:
            best = np.full(n, np.inf)
        empty = size == 0
        tab[empty] = _ALWAYS
        keys[empty, 0] = -1
        best[empty] = -np.inf
        live = [(tid, sc) for tid, sc in live if len(sc) <= attr.shape[1]]
        if not live:
            return tab, keys
        # per chunk, a dense (subscription x attribute) matrix of equality pids / log nu, so a
        # table's key is a column gather (001 §3 "hashing configuration")
        n_attr = max(1, len(self._attr_names))
        step = max(1024, (1 << 22) // n_attr)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            a = attr[lo:hi]
            ok_cell = a >= 0
            r = np.broadcast_to(np.arange(hi - lo)[:, None], a.shape)[ok_cell]
            pid_by = np.full((hi - lo, n_attr), -1, dtype=np.int64)
            ln_by = np.zeros((hi - lo, n_attr))
            pid_by[r, a[ok_cell]] = eqp[lo:hi][ok_cell]
            ln_by[r, a[ok_cell]] = eqln[lo:hi][ok_cell]
            b = best[lo:hi]
            for tid, sc in live:
                sc = list(sc)
                kp = pid_by[:, sc]
                ok = (kp >= 0).all(axis=1)
                if not ok.any():
                    continue
                cost = np.exp(ln_by[:, sc].sum(axis=1)) * self._chk(size[lo:hi] - len(sc))
                better = np.flatnonzero(ok & (cost < b))
                b[better] = cost[better]
                tab[lo + better] = tid
                keys[lo + better] = -1
                keys[lo + better, : len(sc)] = kp[better]
        return tab, keys

    def _place(self, slots: np.ndarray, tab: np.ndarray, keys: np.ndarray) -> None:
        """Append subscriptions to the clusters of their accesses (vectorised writes)."""
        slots = np.asarray(slots, dtype=np.int64)
        if len(slots) == 0:
            return
        lognu = self._lognu()
        P = self._slot_pids[slots].astype(np.int64)
        # residual predicates: all but the access key, most selective column first (001 §2.2)
        is_key = (P[:, :, None] == keys[:, None, :]).any(axis=2)
        R = np.where(is_key | (P < 0), -1, P)
        o = np.argsort(np.where(R >= 0, lognu[np.maximum(R, 0)], np.inf), axis=1, kind="stable")
        R = np.take_along_axis(R, o, axis=1)
        width = (R >= 0).sum(axis=1)
        # one cluster per (table, key, width): find or create each distinct one once
        M = np.column_stack([tab, keys, width])
        h = _key_hash(M + 3)
        _, first, inv = np.unique(h, return_index=True, return_inverse=True)
        inv = inv.ravel()
        if not (M[first][inv] == M).all():                  # a 64-bit hash collision: exact path
            _, first, inv = np.unique(M, axis=0, return_index=True, return_inverse=True)
            inv = inv.ravel()
        cnt = np.bincount(inv, minlength=len(first))
        ucid = np.full(len(first), -1, dtype=np.int64)
        missing, missing_keys = [], []
        for u, row in enumerate(M[first].tolist()):
            dk = (row[0], tuple(k for k in row[1:-1] if k >= 0), row[-1])
            cid = self._cl_lookup.get(dk)
            if cid is None:
                missing.append(u)
                missing_keys.append(dk)
            else:
                ucid[u] = cid
        if missing:
            f = first[missing]
            ucid[missing] = self._new_clusters(tab[f], keys[f], width[f],
                                               np.maximum(2, cnt[missing]), missing_keys)
        cids_all = ucid[inv]
        for t, c in zip(*np.unique(tab[tab >= 0], return_counts=True)):
            self._tables[int(t)].n_subs += int(c)
        for w in np.unique(width).tolist():
            sel = np.flatnonzero(width == w)
            o = sel[np.argsort(cids_all[sel], kind="stable")]
            cids, ss = cids_all[o], slots[o]
            res = R[o, :w].astype(np.int32)
            uc, first, cnt = np.unique(cids, return_index=True, return_counts=True)
            st = self._stores[w]
            if st.garbage > max(4096, st.top // 2):
                self._compact(w)
            need = self._cl_len[uc] + cnt
            full = need > self._cl_cap[uc]
            for c, nd in zip(uc[full].tolist(), need[full].tolist()):
                self._relocate(c, nd)
            rank = np.arange(len(cids)) - np.repeat(first, cnt)
            rows = self._cl_start[cids] + self._cl_len[cids] + rank
            st = self._stores[w]
            st.cols[:, rows] = res.T
            st.slots[rows] = ss
            self._slot_cl[ss] = cids
            self._slot_row[ss] = rows
            self._cl_len[uc] += cnt

    def _unplace(self, slots) -> None:
        """Remove subscriptions from their clusters.  Few: swap-with-last inside the cluster;
        many (a table created or dropped moves thousands): each touched cluster's segment is
        compacted in one vectorised pass per width store."""
        slots = np.asarray(slots, dtype=np.int64)
        if len(slots) < self.bulk_unplace:
            for s in slots.tolist():
                self._unplace_one(s)
            return
        cids = self._slot_cl[slots]
        for w in np.unique(self._cl_w[cids]).tolist():
            st = self._stores[w]
            gone = self._slot_row[slots[self._cl_w[cids] == w]]
            uc = np.unique(cids[self._cl_w[cids] == w])
            lens = self._cl_len[uc]
            rows = concat_ranges(self._cl_start[uc], lens)
            dead = np.zeros(st.slots.shape[0], dtype=bool)
            dead[gone] = True
            keep = ~dead[rows]
            owner = np.repeat(np.arange(len(uc)), lens)
            new_len = np.bincount(owner, keep, minlength=len(uc)).astype(np.int64)
            src = rows[keep]
            dst = concat_ranges(self._cl_start[uc], new_len)
            if w:
                st.cols[:, dst] = st.cols[:, src]
            st.slots[dst] = st.slots[src]
            self._slot_row[st.slots[dst]] = dst
            tail = concat_ranges(self._cl_start[uc] + new_len, lens - new_len)
            st.slots[tail] = -1
            self._cl_len[uc] = new_len
        tabs = self._cl_tab[cids]
        for t, c in zip(*np.unique(tabs[tabs >= 0], return_counts=True)):
            self._tables[int(t)].n_subs -= int(c)
        self._slot_cl[slots] = -1
        for c in np.unique(cids).tolist():
            if self._cl_len[c] == 0:
                self._free_cluster(c)

    def _unplace_one(self, s: int) -> None:
        cid = int(self._slot_cl[s])
        r = int(self._slot_row[s])
        w = int(self._cl_w[cid])
        st = self._stores[w]
        last = int(self._cl_start[cid] + self._cl_len[cid] - 1)
        if r != last:
            if w:
                st.cols[:, r] = st.cols[:, last]
            moved = int(st.slots[last])
            st.slots[r] = moved
            self._slot_row[moved] = r
        st.slots[last] = -1
        self._cl_len[cid] -= 1
        self._slot_cl[s] = -1
        tab = int(self._cl_tab[cid])
        if tab >= 0:
            self._tables[tab].n_subs -= 1
        if self._cl_len[cid] == 0:
            self._free_cluster(cid)

    def _move(self, slots: np.ndarray, exclude_tab: int | None = None) -> int:
        """Re-choose the access of ``slots``; move those whose best access changed."""
        if len(slots) == 0:
            return 0
        tab, keys = self._choose(slots, exclude_tab)
        cur = self._slot_cl[slots]
        ck = self._cl_keys[cur]
        kw = max(ck.shape[1], keys.shape[1])
        ck = np.pad(ck, ((0, 0), (0, kw - ck.shape[1])), constant_values=-1)
        kk = np.pad(keys, ((0, 0), (0, kw - keys.shape[1])), constant_values=-1)
        ch = np.flatnonzero((self._cl_tab[cur] != tab) | (ck != kk).any(axis=1))
        if not len(ch):
            return 0
        mv = slots[ch]
        self._unplace(mv)
        self._place(mv, tab[ch], keys[ch])
        self._counters["moves"] += len(ch)
        return len(ch)

    # ------------------------------------------------------------------ public API
    def _new_slots(self, slots, n: int) -> np.ndarray:
        slots = np.asarray(slots, dtype=np.int64).ravel()
        if len(slots) != n:
            raise ValueError("slots and subscriptions differ in length")
        if len(slots) == 0:
            return slots
        if slots.min() < 0:
            raise ValueError("slots must be non-negative")
        if len(np.unique(slots)) != len(slots):
            raise ValueError("duplicate slot in one add()")
        top = int(slots.max()) + 1
        self._slot_cl = _grow(self._slot_cl, top, -1)
        self._slot_row = _grow(self._slot_row, top, -1)
        self._slot_np = _grow(self._slot_np, top, 0)
        present = self._slot_cl[slots] >= 0
        if present.any():
            raise ValueError(f"slot {int(slots[present][0])} already subscribed")
        return slots

    def _insert(self, slots: np.ndarray, P: np.ndarray) -> None:
        """Add subscriptions given as interned pid rows (-1 padded, no duplicates in a row)."""
        width = P.shape[1]
        if width > self._slot_pids.shape[1]:
            sp = np.full((self._slot_pids.shape[0], width), -1, dtype=np.int32)
            sp[:, : self._slot_pids.shape[1]] = self._slot_pids
            self._slot_pids = sp
        self._slot_pids = _grow(self._slot_pids, int(slots.max()) + 1, -1)
        self._slot_pids[slots] = -1
        self._slot_pids[slots, :width] = P
        self._slot_np[slots] = (P >= 0).sum(axis=1)
        self._place(slots, *self._choose(slots))
        self._n_subs += len(slots)
        self._since_changes += len(slots)

    def add(self, slots, conjunctions) -> None:
        """Insert subscriptions ``slots[i]`` = conjunction ``conjunctions[i]`` (list of Pred)."""
        slots = self._new_slots(slots, len(conjunctions))
        if len(slots) == 0:
            return
        lists = [self._intern(c) for c in conjunctions]
        P = np.full((len(lists), max((len(p) for p in lists), default=0)), -1, dtype=np.int64)
        for i, p in enumerate(lists):
            P[i, : len(p)] = p
        self._insert(slots, P)

    def add_columns(self, slots, template, columns) -> None:
        """Bulk insert: subscription ``slots[i]`` = AND over j of ``template[j]`` with constants
        ``columns[j][i]`` -- the constants of a template as columns (DESIGN §3), 1M in seconds.

        ``template[j]`` is ``(attr, op)``; ``columns[j]`` is, by operator: an array (or a scalar
        shared by every row) for ``= != < <= > >=``; a pair ``(lo, hi)`` of arrays/scalars for
        ``between``; a sequence of tuples (or one tuple) for ``in``; ``None`` for ``is_null`` /
        ``is_not_null``.  Only the distinct constants of each column are interned (Python work
        per distinct predicate, numpy work per subscription).  Bad constants raise before
        anything is added.
        """
        if len(template) != len(columns):
            raise ValueError("template and columns differ in length")
        n = len(np.asarray(slots).ravel())
        slots = self._new_slots(slots, n)
        if n == 0:
            return
        P = np.empty((n, len(template)), dtype=np.int64)
        taken: list[tuple[int, int]] = []
        try:
            for j, ((attr, op), col) in enumerate(zip(template, columns)):
                codes, values = _factorize(op, col, n)
                pids = self._intern_distinct([Pred(attr, op, v) for v in values], codes, taken)
                P[:, j] = pids[codes]
        except Exception:
            self._undo(taken)
            raise
        self._insert_rows(slots, P)

    def add_matrix(self, slots, attrs, ops, values) -> None:
        """Bulk insert of subscriptions with one scalar constant per predicate (``= != < <= > >=``)
        and any mix of attributes: predicate j of subscription i is ``attrs[i, j] ops[i, j]
        values[i, j]`` (``[n, k]`` arrays; ``attrs``/``ops`` may be ``[k]`` rows shared by all);
        a ``None`` attribute marks an absent predicate (shorter conjunctions).  The
        (attribute, operator, constant) triples are factorised jointly, so only distinct
        predicates cost Python work (001 §6.1's W0: 32 x 35 of them for millions of rows).
        """
        values = np.asarray(values)
        if values.ndim != 2:
            raise ValueError("values must be a 2-d [subscriptions, predicates] array")
        n, k = values.shape
        attrs = np.broadcast_to(np.asarray(attrs, dtype=object), (n, k)).ravel()
        ops = np.broadcast_to(np.asarray(ops, dtype=object), (n, k)).ravel()
        slots = self._new_slots(slots, n)
        if n == 0:
            return
        bad = ~np.isin(ops, list(_SCALAR_OPS)) & (attrs != None)  # noqa: E711 (elementwise)
        if bad.any():
            raise ValueError(f"add_matrix takes operators {sorted(_SCALAR_OPS)}, "
                             f"got {ops[bad][0]!r} (use add or add_columns)")
        ca, ua = pd.factorize(attrs, use_na_sentinel=True)
        present = ca >= 0
        _reject_none(values.ravel()[present])
        co, uo = pd.factorize(ops, use_na_sentinel=False)
        cv, uv = pd.factorize(values.ravel(), use_na_sentinel=False)
        ua, uo, uv = list(ua), list(uo), np.asarray(uv).tolist()
        combined = (np.maximum(ca, 0).astype(np.int64) * len(uo) + co) * len(uv) + cv
        codes = np.full(n * k, -1, dtype=np.int64)
        c, uniq = pd.factorize(combined[present])
        codes[present] = c
        preds = []
        for u in uniq.tolist():
            a, rest = divmod(u, len(uo) * len(uv))
            o, v = divmod(rest, len(uv))
            preds.append(Pred(ua[a], uo[o], (uv[v],)))
        taken: list[tuple[int, int]] = []
        try:
            pids = self._intern_distinct(preds, codes[present], taken)
        except Exception:
            self._undo(taken)
            raise
        P = np.full(n * k, -1, dtype=np.int64)
        P[present] = pids[codes[present]]
        self._insert_rows(slots, P.reshape(n, k))

    def _intern_distinct(self, preds: list, codes: np.ndarray, taken: list) -> np.ndarray:
        """Intern ``preds[u]`` once with as many references as ``codes`` holds ``u``."""
        counts = np.bincount(codes, minlength=len(preds))
        pids = np.full(len(preds), -1, dtype=np.int64)
        for u, p in enumerate(preds):
            if counts[u]:
                pids[u] = self._intern_pred(p, int(counts[u]))
                taken.append((int(pids[u]), int(counts[u])))
        return pids

    def _undo(self, taken) -> None:
        for pid, c in taken:                                 # nothing added: undo the interning
            self._release_n(pid, c)

    def _insert_rows(self, slots: np.ndarray, P: np.ndarray) -> None:
        """:meth:`_insert` after dropping a predicate repeated inside one row (-1 = absent)."""
        if P.shape[1] > 1:                                   # the same predicate twice in a row
            big = np.iinfo(np.int64).max
            P = np.sort(np.where(P < 0, big, P), axis=1)     # ascending, absent ones last
            dup = np.zeros(P.shape, dtype=bool)
            dup[:, 1:] = (P[:, 1:] == P[:, :-1]) & (P[:, 1:] != big)
            if dup.any():
                for pid, c in zip(*np.unique(P[dup], return_counts=True)):
                    self._release_n(int(pid), int(c))
                P[dup] = big
                P = np.sort(P, axis=1)
            P[P == big] = -1
        self._insert(slots, P)

    def remove(self, slots) -> None:
        """Delete subscriptions (unknown slots raise KeyError)."""
        slots = np.asarray(slots, dtype=np.int64).ravel()
        for s in slots.tolist():
            if s < 0 or s >= len(self._slot_cl) or self._slot_cl[s] < 0:
                raise KeyError(s)
        if len(np.unique(slots)) != len(slots):
            raise ValueError("duplicate slot in one remove()")
        self._unplace(slots)
        for s in slots.tolist():
            self._release(self._slot_pids[s, : self._slot_np[s]].tolist())
            self._slot_pids[s] = -1
            self._slot_np[s] = 0
        self._n_subs -= len(slots)
        self._since_changes += len(slots)

    def __len__(self) -> int:
        return self._n_subs

    def match(self, events):
        """Matched (event index, slot) pairs, int64 arrays sorted by (event, slot)."""
        t0 = time.perf_counter()
        sat = self._pi.evaluate(events)
        t1 = time.perf_counter()
        n = int(sat.n_events)
        self._update_stats(events, sat)
        cap = max(1, self._pi.capacity)
        chunk = int(min(max(n, 1), max(64, min(8192, self.chunk_bytes // cap))))
        ev_parts, sl_parts = [], []
        starts = np.searchsorted(sat.event, np.arange(0, n + chunk, chunk))
        for ci, s0 in enumerate(range(0, n, chunk)):
            s1 = min(n, s0 + chunk)
            lo, hi = int(starts[ci]), int(starts[ci + 1])
            e, s = self._match_chunk(sat, s0, s1, sat.event[lo:hi] - s0, sat.pid[lo:hi])
            ev_parts.append(e + s0)
            sl_parts.append(s)
        ev = np.concatenate(ev_parts) if ev_parts else _EMPTY
        sl = np.concatenate(sl_parts) if sl_parts else _EMPTY
        o = np.lexsort((sl, ev))
        ev, sl = ev[o], sl[o]
        t2 = time.perf_counter()
        self._counters["events"] += n
        self._counters["matches"] += len(ev)
        self._counters["t_phase1"] += t1 - t0
        self._counters["t_phase2"] += t2 - t1
        self._since_events += n
        if self.dynamic and (self._since_events >= self.maintain_every
                             or self._since_changes >= self.maintain_subs):
            self.maintain()
        self._counters["t_maintain"] += time.perf_counter() - t2
        return ev, sl

    def _update_stats(self, events, sat) -> None:
        """Decayed per-pid satisfaction counts and per-attribute presence (001 §3 statistics)."""
        n = int(sat.n_events)
        if n == 0:
            return
        self._ensure_pid_arrays()
        f = 0.5 ** (n / self.stats_halflife)
        self._pid_hits *= f
        self._attr_present *= f
        self._n_seen = self._n_seen * f + n
        if len(sat.pid):
            bc = np.bincount(sat.pid, minlength=len(self._pid_hits))
            self._pid_hits += bc[: len(self._pid_hits)]
        cols = set(events.column_names)
        for a, name in enumerate(self._attr_names):
            if name in cols:
                self._attr_present[a] += n - events.column(name).null_count
        self._lognu_cache = None

    def _match_chunk(self, sat, s0: int, s1: int, ev: np.ndarray, pid: np.ndarray):
        n = s1 - s0
        cap = self._pi.capacity
        pe, pc = [], []
        # 1. single access predicates: pid -> clusters (001 §2.2 Figure 2, step 1)
        if len(self._pid_index):
            qi, cids, _ = self._pid_index.lookup(pid.astype(np.uint64))
            pe.append(ev[qi])
            pc.append(cids)
        # 2. multi-attribute hash tables: key = the event's equality pids on the schema
        live_tabs = [t for t in self._tables if t is not None and len(t.index)]
        if live_tabs:
            pa = self._pid_attr[pid] if len(pid) else _EMPTY
            eqm = pa >= 0
            code = np.full((n, len(self._attr_names)), -1, dtype=np.int64)
            code[ev[eqm], pa[eqm]] = pid[eqm]
            for t in live_tabs:
                sub = code[:, t.schema]
                ok = np.flatnonzero((sub >= 0).all(axis=1))
                if len(ok) == 0:
                    continue
                sub = sub[ok]
                qi, cids, codes = t.index.lookup(_key_hash(sub))
                good = (codes == sub[qi]).all(axis=1)
                pe.append(ok[qi[good]])
                pc.append(cids[good])
        # 3. clusters without access predicate
        for cid in self._always:
            pe.append(np.arange(n, dtype=np.int64))
            pc.append(np.full(n, cid, dtype=np.int64))
        if not pe:
            return _EMPTY, _EMPTY
        pe = np.concatenate(pe)
        pc = np.concatenate(pc)
        if len(pe) == 0:
            return _EMPTY, _EMPTY
        bm = sat.bitmap(s0, s1).reshape(-1)
        out_e, out_s = [], []
        widths = self._cl_w[pc]
        for w in np.unique(widths).tolist():
            sel = widths == w
            e, c = pe[sel], pc[sel]
            lens = self._cl_len[c]
            rows = concat_ranges(self._cl_start[c], lens)
            er = np.repeat(e, lens)
            st = self._stores[w]
            base = er * cap
            for k in range(w):          # cluster_matching (001 §2.2), one column at a time
                keep = bm[base + st.cols[k][rows]]
                rows, base, er = rows[keep], base[keep], er[keep]
                if len(rows) == 0:
                    break
            self._counters["checks"] += int(lens.sum())
            out_e.append(er)
            out_s.append(st.slots[rows])
        return np.concatenate(out_e), np.concatenate(out_s)

    # ------------------------------------------------------------------ clustering
    def _live_slots(self) -> np.ndarray:
        return np.flatnonzero(self._slot_cl >= 0)

    def _create_table(self, schema: tuple) -> int:
        schema = tuple(sorted(schema))
        tid = self._schema_tab.get(schema)
        if tid is None:
            tid = len(self._tables)
            self._tables.append(_Table(schema))
            self._schema_tab[schema] = tid
            self._counters["tables_created"] += 1
        return tid

    def _drop_table(self, tid: int) -> None:
        t = self._tables[tid]
        slots = self._live_slots()
        slots = slots[self._cl_tab[self._slot_cl[slots]] == tid]
        if len(slots):
            tab, keys = self._choose(slots, exclude_tab=tid)
            self._unplace(slots)
            self._place(slots, tab, keys)
            self._counters["moves"] += len(slots)
        assert t.n_subs == 0 and len(t.index) == 0
        self._tables[tid] = None
        del self._schema_tab[t.schema]
        self._counters["tables_dropped"] += 1

    def _enum_for(self, slots):
        P, attr, eqp, eqln, allln = self._profile(slots)
        size = self._slot_np[slots]
        fb = (np.exp(allln.min(axis=1)) if P.shape[1] else np.full(len(slots), np.inf)) \
            * self._chk(size - 1)
        fb[size == 0] = 1.0
        if attr.shape[1] == 0:
            return None, size, fb
        return enumerate_schemas(attr, eqln, size, self.params, self.max_schema), size, fb

    def _schema_mu(self, enum) -> np.ndarray:
        lmu = np.log(self._attr_mu())
        return np.array([np.exp(lmu[list(s)].sum()) for s in enum.schemas])

    def recluster_static(self, space_bound: float = np.inf, sample: int | None = 200_000,
                         seed: int = 0) -> dict:
        """001 §3.2 greedy static clustering under ``space_bound``; then re-place everything.

        All existing multi-attribute tables are discarded and the greedy starts from the
        natural clustering (single equality predicates).  With more than ``sample``
        subscriptions the greedy runs on a uniform sample (gains scaled up).
        """
        slots = self._live_slots()
        if len(slots) == 0:
            return {"schemas": [], "steps": []}
        pick = slots
        weight = 1.0
        if sample is not None and len(slots) > sample:
            pick = np.sort(np.random.default_rng(seed).choice(slots, sample, replace=False))
            weight = len(slots) / sample
        enum, size, fb = self._enum_for(pick)
        schemas: list = []
        steps: list = []
        if enum is not None:
            res = greedy_static(enum, size, fb, self._schema_mu(enum), space_bound, self.params,
                                weight=weight)
            schemas, steps = res.schemas, res.steps
        # new hashing configuration: create chosen tables, re-place every subscription
        old = [tid for tid, t in enumerate(self._tables) if t is not None
               and t.schema not in set(schemas)]
        for s in schemas:
            self._create_table(s)
        for tid in old:
            self._drop_table(tid)
        for lo in range(0, len(slots), 100_000):
            self._move(slots[lo: lo + 100_000])
        self._counters["static_reclusters"] += 1
        return {"schemas": [tuple(self._attr_names[a] for a in s) for s in schemas],
                "steps": steps}

    def maintain(self) -> dict:
        """One round of the 001 §4 maintenance algorithm (BMmax, Bcreate, Bdelete)."""
        self._since_events = 0
        self._since_changes = 0
        self._counters["maintenance_rounds"] += 1
        out = {"redistributed": 0, "created": [], "dropped": []}
        slots = self._live_slots()
        if len(slots) == 0:
            return out
        lognu = self._lognu()
        cid = self._slot_cl[slots]
        # benefit margin BM(c) = sum_{s in c} (nu(p_c) - nu(P(s)))  (001 §4)
        keys = self._cl_keys[: self._n_cl]
        nu_c = np.exp(np.where(keys >= 0, lognu[np.maximum(keys, 0)], 0.0).sum(axis=1))
        nu_c[self._cl_tab[: self._n_cl] == _ALWAYS] = 1.0
        P = self._slot_pids[slots].astype(np.int64)
        eq = (P >= 0) & (self._pid_attr[np.maximum(P, 0)] >= 0)
        nu_s = np.exp(np.where(eq, lognu[np.maximum(P, 0)], 0.0).sum(axis=1))
        nu_s = np.minimum(nu_s, nu_c[cid])
        bm = np.bincount(cid, nu_c[cid] - nu_s, minlength=self._n_cl)
        over = np.flatnonzero(bm > self.bm_max)
        if len(over):
            cand = slots[np.isin(cid, over)]
            # Cluster_distribute: move to the best existing table
            out["redistributed"] += self._move(cand)
            # still excessive margins -> benefits of potential tables (greedy step, 001 §4)
            cid2 = self._slot_cl[cand]
            nu_c2 = np.exp(np.where(self._cl_keys[cid2] >= 0,
                                    lognu[np.maximum(self._cl_keys[cid2], 0)], 0.0).sum(axis=1))
            P2 = self._slot_pids[cand].astype(np.int64)
            eq2 = (P2 >= 0) & (self._pid_attr[np.maximum(P2, 0)] >= 0)
            nu_s2 = np.exp(np.where(eq2, lognu[np.maximum(P2, 0)], 0.0).sum(axis=1))
            bm2 = np.bincount(cid2, nu_c2 - np.minimum(nu_s2, nu_c2), minlength=self._n_cl)
            still = cand[bm2[cid2] > self.bm_max]
            if len(still):
                # the greedy's gains are sums over subscriptions: a uniform sample, scaled up,
                # estimates them (as recluster_static does) and bounds a round's cost
                pick, weight = still, 1.0
                if len(still) > self.maintain_sample:
                    pick = np.sort(np.random.default_rng(self._n_subs).choice(
                        still, self.maintain_sample, replace=False))
                    weight = len(still) / self.maintain_sample
                enum, size, fb = self._enum_for(pick)
                if enum is not None:
                    existing = np.zeros(len(enum.schemas), dtype=bool)
                    for t in self._tables:
                        if t is not None:
                            k = enum.schema_id(t.schema)
                            if k >= 0:
                                existing[k] = True
                    res = greedy_static(enum, size, fb, self._schema_mu(enum), np.inf,
                                        self.params, existing=existing,
                                        max_tables=int(existing.sum()) + self.max_new_tables,
                                        min_benefit=self.b_create, weight=weight)
                    new = [s for s in res.schemas if s not in self._schema_tab]
                    if new:
                        for s in new:
                            self._create_table(s)
                        out["created"] = [tuple(self._attr_names[a] for a in s) for s in new]
                        out["redistributed"] += self._move(still)
        # table benefit B(H): checks saved per event vs. single-predicate access, minus lookups
        for tid, b in self._table_benefits().items():
            if b < self.b_delete:
                out["dropped"].append(tuple(self._attr_names[a] for a in self._tables[tid].schema))
                self._drop_table(tid)
        return out

    def _table_benefits(self) -> dict:
        slots = self._live_slots()
        tabs = self._cl_tab[self._slot_cl[slots]]
        inm = tabs >= 0
        out = {tid: -np.inf for tid, t in enumerate(self._tables) if t is not None}
        if not out:
            return out
        lognu = self._lognu()
        mu = self._attr_mu()
        sl = slots[inm]
        tb = tabs[inm]
        saved = np.zeros(len(self._tables))
        if len(sl):
            P = self._slot_pids[sl].astype(np.int64)
            ln = np.where(P >= 0, lognu[np.maximum(P, 0)], np.inf)
            size = self._slot_np[sl]
            alt = np.exp(ln.min(axis=1)) * self._chk(size - 1)
            ck = self._cl_keys[self._slot_cl[sl]]
            klen = (ck >= 0).sum(axis=1)
            cur = np.exp(np.where(ck >= 0, lognu[np.maximum(ck, 0)], 0.0).sum(axis=1)) \
                * self._chk(size - klen)
            saved = np.bincount(tb, alt - cur, minlength=len(self._tables))
        p = self.params
        for tid in out:
            s = self._tables[tid].schema
            m = float(np.prod(mu[list(s)]))
            out[tid] = float(saved[tid]) - (p.K_r + m * (p.C_h + p.K_h * len(s)))
        return out

    # ------------------------------------------------------------------ introspection
    def _cost(self) -> dict:
        lognu = self._lognu()
        mu = self._attr_mu()
        cids = np.flatnonzero(self._cl_alive[: self._n_cl])
        keys = self._cl_keys[cids]
        nu = np.exp(np.where(keys >= 0, lognu[np.maximum(keys, 0)], 0.0).sum(axis=1))
        nu[self._cl_tab[cids] == _ALWAYS] = 1.0
        tabs = [t for t in self._tables if t is not None]
        ta = [len(t.schema) for t in tabs]
        tm = [float(np.prod(mu[list(t.schema)])) for t in tabs]
        te = [len(t.index) for t in tabs]
        mc = matching_cost(ta, tm, nu, self._cl_len[cids], self._cl_w[cids], self.params)
        sc = space_cost(ta, te, self._cl_len[cids], self._cl_w[cids], self.params)
        return {"matching": mc, "space": sc}

    def stats(self) -> dict:
        cids = np.flatnonzero(self._cl_alive[: self._n_cl])
        c = dict(self._counters)
        return {
            "subscriptions": self._n_subs,
            "predicates": int((self._pid_ref > 0).sum()),
            "clusters": len(cids),
            "tables": sum(t is not None for t in self._tables),
            "events_seen_decayed": self._n_seen,
            **c,
        }

    def explain(self) -> dict:
        """Access predicates, hash-table schemas, clusters and their sizes, cost estimate."""
        cids = np.flatnonzero(self._cl_alive[: self._n_cl])
        tab = self._cl_tab[cids]
        lens = self._cl_len[cids]
        single = cids[tab == _SINGLE]
        acc = defaultdict(int)
        for c in single.tolist():
            acc[self._cl_keys[c, 0]] += int(self._cl_len[c])
        top = sorted(acc.items(), key=lambda kv: -kv[1])[:20]
        tables = []
        for tid, t in enumerate(self._tables):
            if t is None:
                continue
            tables.append({"schema": tuple(self._attr_names[a] for a in t.schema),
                           "entries": len(t.index), "subscriptions": t.n_subs})
        hist = np.bincount(np.minimum(np.log2(np.maximum(lens, 1)).astype(int), 30))
        return {
            "single_access_predicates": len(acc),
            "top_access_predicates": [(tuple(self._pi.pred(int(p))), n) for p, n in top],
            "subscriptions_single_access": int(self._cl_len[single].sum()),
            "subscriptions_always": int(self._cl_len[cids[tab == _ALWAYS]].sum()),
            "tables": tables,
            "table_schemas": [t["schema"] for t in tables],
            "clusters": len(cids),
            "cluster_sizes": {"max": int(lens.max()) if len(lens) else 0,
                              "mean": float(lens.mean()) if len(lens) else 0.0,
                              "log2_histogram": hist.tolist()},
            "clusters_by_width": {int(w): int(n) for w, n in
                                  zip(*np.unique(self._cl_w[cids], return_counts=True))},
            "cost": self._cost(),
        }
