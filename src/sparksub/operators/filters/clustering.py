"""Schema-based clustering: the cost model and the greedy static algorithm (numpy only).

Paper ``001`` = Fabret, Jacobsen, Llirbat, Pereira, Ross, Shasha, *Filtering Algorithms and
Implementation for Very Fast Publish/Subscribe Systems*, SIGMOD 2001.

The two-phase engine (``le_subscribe.LeSubscribe``) groups subscriptions into clusters reached
through *access predicates*: a single predicate (looked up from the phase-1 result, free) or a
conjunction of equality predicates on an attribute set -- the *schema* of a multi-attribute
hash table (001 §3, "Hashing configuration").  This module prices a clustering instance and
chooses the hashing configuration:

* :func:`matching_cost` -- the per-event matching cost, simplified formula of 001 §3.1::

      K_r |H| + sum_H mu(H) (C_h + K_h |H.A|) + sum_p nu(p) sum_{c in clusters(p)} checking(p, c)

  with ``checking(p, c) = |c| (K_check + K_pred * width(c))`` (linear in the number of
  subscriptions, 001 §3.1 assumption (3); ``width`` = predicates left after the access
  predicate).  Single-predicate access is *free* (no index retrieval, no hashing: the phase-1
  indexes already produce it, 001 §3.2 "natural clustering") unless ``params.single_free`` is
  false, which is how Example 3.1 counts lookups.
* :func:`space_cost` -- 001 §3.1 space cost: ``sum_H (i_space + entries(H) h_space) +
  K_space sum_c sum_{s in c} size(s - p)``.
* :func:`enumerate_schemas` / :func:`greedy_static` -- 001 §3.2: start from the natural
  clustering (singleton schemas), repeatedly add the schema of ``GA(S) - A`` with the largest
  positive benefit per unit of space, re-deriving the best clustering instance (each
  subscription takes the access predicate of ``GP(s) ∩ A`` minimising ``nu(p) checking(p, s)``),
  until nothing helps or the space bound is reached.

Selectivities: ``nu`` of a conjunction of equality predicates is the product of the
per-attribute value frequencies (attributes independent, as in 001 Example 3.1); ``mu(H)`` is
the product of the attributes' presence frequencies.  Everything is computed on ``log nu`` so
long products do not underflow.

Example 3.1 (001 §3): 7M subscriptions, 1M per nonempty subset of {A, B, C}, 100 equiprobable
values per attribute, event mentioning A and B but not C.  With access on A, B, C only:

>>> p = CostParams(single_free=False)
>>> c1 = matching_cost(table_attrs=[1, 1, 1], table_mu=[1, 1, 0],
...                    cluster_nu=[1/100, 1/100, 0], cluster_n=[7e6/3 / 100] * 3,
...                    cluster_width=[0, 0, 0], cluster_count=[100, 100, 100], params=p)
>>> c1["lookups"], round(c1["checks"], 2)
(2.0, 46666.67)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "CostParams",
    "matching_cost",
    "space_cost",
    "SchemaEnumeration",
    "enumerate_schemas",
    "best_choice",
    "greedy_static",
    "GreedyResult",
    "schema_hash",
]


@dataclass(frozen=True)
class CostParams:
    """Constants of the simplified cost formulas of 001 §3.1, in units of one subscription check.

    Defaults are calibrated for the numpy engine: looking up one multi-attribute table for a
    batch of events costs about as much per event as checking ~3 subscriptions.
    """

    K_r: float = 1.0        # index retrieval, per multi-attribute table (idx_retrieving)
    C_h: float = 1.5        # hashing, constant part (per table, per event whose schema fits)
    K_h: float = 0.25       # hashing, per attribute of the table's schema
    K_check: float = 1.0    # checking, per subscription of an accessed cluster
    K_pred: float = 0.0     # checking, per remaining predicate of that subscription
    K_space: float = 1.0    # cluster space, per stored predicate reference (c_space)
    i_space: float = 64.0   # space of an empty hash table (i_space)
    h_space: float = 2.0    # space per hash-table entry (h_space)
    single_free: bool = True  # single-predicate access costs nothing (001 §3.2)


def _arr(x, dtype=np.float64) -> np.ndarray:
    return np.asarray(x, dtype=dtype)


def matching_cost(table_attrs, table_mu, cluster_nu, cluster_n, cluster_width,
                  params: CostParams = CostParams(), cluster_count=None) -> dict:
    """Per-event matching cost of a clustering instance (001 §3.1, simplified formula).

    ``table_attrs[i]`` / ``table_mu[i]``: schema size and ``mu`` of each hash table of the
    configuration (single-attribute tables included; they are charged only when
    ``params.single_free`` is false).  ``cluster_nu`` / ``cluster_n`` / ``cluster_width``:
    per cluster, ``nu`` of its access predicate, its number of subscriptions and its number of
    remaining predicates; ``cluster_count`` optionally says how many identical clusters each
    row stands for.  Returns the components: ``lookups`` (expected hash lookups = sum mu),
    ``checks`` (expected subscriptions checked), ``index``, ``hashing``, ``checking`` and
    ``total``.
    """
    ta = _arr(table_attrs)
    tm = _arr(table_mu)
    nu = _arr(cluster_nu)
    n = _arr(cluster_n)
    w = _arr(cluster_width)
    cnt = np.ones_like(nu) if cluster_count is None else _arr(cluster_count)
    charged = np.ones(ta.shape, dtype=bool) if not params.single_free else ta >= 2
    index = params.K_r * float(charged.sum())
    hashing = float((tm * (params.C_h + params.K_h * ta))[charged].sum())
    checks = float((cnt * nu * n).sum())
    checking = float((cnt * nu * n * (params.K_check + params.K_pred * w)).sum())
    return {
        "lookups": float(tm.sum()),
        "checks": checks,
        "index": index,
        "hashing": hashing,
        "checking": checking,
        "total": index + hashing + checking,
    }


def space_cost(table_attrs, table_entries, cluster_n, cluster_width,
               params: CostParams = CostParams(), cluster_count=None) -> dict:
    """Space cost of a clustering instance (001 §3.1): hash tables plus clusters.

    ``c_space(c) = K_space * sum_{s in c} size(s - p)`` = ``K_space * |c| * width(c)``.
    Single-attribute tables are free when ``params.single_free`` (they are the phase-1 indexes).
    """
    ta = _arr(table_attrs)
    te = _arr(table_entries)
    n = _arr(cluster_n)
    w = _arr(cluster_width)
    cnt = np.ones_like(n) if cluster_count is None else _arr(cluster_count)
    charged = np.ones(ta.shape, dtype=bool) if not params.single_free else ta >= 2
    tables = float((params.i_space + params.h_space * te)[charged].sum())
    clusters = float(params.K_space * (cnt * n * w).sum())
    return {"tables": tables, "clusters": clusters, "total": tables + clusters}


# ---------------------------------------------------------------------------------------------
# Schema enumeration: every subscription s contributes the nonempty subsets of A(s) (001 §3.2,
# GA(S) = the attribute groups occurring in S).  Vectorised over subscriptions: one row per
# (subscription, local subset mask).

_R_SEED = 0x5EED_001


def schema_hash(attrs, n_attrs: int | None = None) -> np.uint64:
    """Order-free 64-bit id of an attribute set (sum of per-attribute random words)."""
    r = _attr_words(max(max(attrs) + 1, n_attrs or 0))
    with np.errstate(over="ignore"):
        return np.uint64(r[list(attrs)].sum(dtype=np.uint64))


_WORDS = np.empty(0, dtype=np.uint64)


def _attr_words(n: int) -> np.ndarray:
    global _WORDS
    if len(_WORDS) < n:
        m = max(n, 2 * len(_WORDS), 4096)
        rng = np.random.default_rng(_R_SEED)
        _WORDS = rng.integers(1, 2**63, size=m, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    return _WORDS


@dataclass
class SchemaEnumeration:
    """The (subscription, schema) pairs of ``GA(S)``, as flat arrays.

    ``sub[i]`` subscription row, ``sid[i]`` dense schema id, ``nattr[i]`` schema size,
    ``lognu[i]`` = log nu of s's equality predicates on that schema, ``cost[i]`` =
    ``nu * checking`` for s under that access predicate, ``mask[i]`` the local column mask
    (bit j = column j of the ``eq_attr`` matrix).  ``schemas[k]`` is schema k's sorted
    attribute tuple and ``hashes[k]`` its :func:`schema_hash`.
    """

    n_subs: int
    sub: np.ndarray
    sid: np.ndarray
    nattr: np.ndarray
    lognu: np.ndarray
    cost: np.ndarray
    mask: np.ndarray
    schemas: list
    hashes: np.ndarray
    schema_nattr: np.ndarray = field(default=None)

    def schema_id(self, attrs) -> int:
        """Dense id of an attribute set, or -1 when no subscription has it in GA(s)."""
        h = schema_hash(tuple(attrs))
        k = int(np.searchsorted(self.hashes, h))
        return k if k < len(self.hashes) and self.hashes[k] == h else -1


def enumerate_schemas(eq_attr: np.ndarray, eq_lognu: np.ndarray, size: np.ndarray,
                      params: CostParams = CostParams(), max_schema: int = 4) -> SchemaEnumeration:
    """All (s, X) with X a nonempty subset of A(s), |X| <= max_schema (001 §3.2, GA(S)).

    ``eq_attr``: int [n, m], the attributes of s's equality predicates (one per attribute,
    -1 padding); ``eq_lognu``: log nu of each; ``size``: number of predicates of s.
    """
    eq_attr = np.asarray(eq_attr, dtype=np.int64)
    n, m = eq_attr.shape if eq_attr.ndim == 2 else (len(eq_attr), 0)
    valid = eq_attr >= 0
    words = _attr_words(int(eq_attr.max()) + 1 if eq_attr.size else 1)
    wmat = np.where(valid, words[np.maximum(eq_attr, 0)], np.uint64(0))
    lmat = np.where(valid, np.asarray(eq_lognu, dtype=np.float64), 0.0)
    subs, hs, nas, lns, masks = [], [], [], [], []
    rows = np.arange(n, dtype=np.int64)
    for t in range(1, 1 << m):
        bits = [j for j in range(m) if t >> j & 1]
        if len(bits) > max_schema:
            continue
        ok = valid[:, bits].all(axis=1)
        if not ok.any():
            continue
        with np.errstate(over="ignore"):
            h = wmat[ok][:, bits].sum(axis=1, dtype=np.uint64)
        subs.append(rows[ok])
        hs.append(h)
        nas.append(np.full(int(ok.sum()), len(bits), dtype=np.int64))
        lns.append(lmat[ok][:, bits].sum(axis=1))
        masks.append(np.full(int(ok.sum()), t, dtype=np.int64))
    if subs:
        sub = np.concatenate(subs)
        h = np.concatenate(hs)
        nattr = np.concatenate(nas)
        lognu = np.concatenate(lns)
        mask = np.concatenate(masks)
    else:
        sub = nattr = mask = np.empty(0, dtype=np.int64)
        h = np.empty(0, dtype=np.uint64)
        lognu = np.empty(0)
    hashes, first, sid = np.unique(h, return_index=True, return_inverse=True)
    schemas = []
    for f in first.tolist():
        cols = [j for j in range(m) if mask[f] >> j & 1]
        schemas.append(tuple(sorted(int(a) for a in eq_attr[sub[f], cols])))
    size = np.asarray(size, dtype=np.float64)
    width = size[sub] - nattr if len(sub) else np.empty(0)
    cost = np.exp(lognu) * (params.K_check + params.K_pred * width)
    return SchemaEnumeration(n, sub, sid.astype(np.int64).ravel(), nattr, lognu, cost, mask,
                             schemas, hashes,
                             np.array([len(s) for s in schemas], dtype=np.int64))


def best_choice(enum: SchemaEnumeration, allowed: np.ndarray, fallback_cost: np.ndarray):
    """The best clustering instance for a hashing configuration schema (001 §3.2).

    ``allowed``: bool per schema id.  Returns ``(choice, cost)``: per subscription the index
    into ``enum`` arrays of its cheapest allowed access (or -1: keep the fallback access,
    e.g. the most selective non-equality predicate) and its ``nu * checking`` cost.
    """
    n = enum.n_subs
    cost = np.asarray(fallback_cost, dtype=np.float64).copy()
    choice = np.full(n, -1, dtype=np.int64)
    ok = np.flatnonzero(allowed[enum.sid])
    if len(ok):
        # order by (sub, cost) and keep the first row of each subscription
        o = ok[np.lexsort((enum.cost[ok], enum.sub[ok]))]
        s = enum.sub[o]
        first = np.ones(len(o), dtype=bool)
        first[1:] = s[1:] != s[:-1]
        o, s = o[first], s[first]
        better = enum.cost[o] < cost[s]
        choice[s[better]] = o[better]
        cost[s[better]] = enum.cost[o[better]]
    return choice, cost


@dataclass
class GreedyResult:
    schemas: list          # multi-attribute schemas chosen, in order of addition
    choice: np.ndarray     # per subscription: row of the enumeration (-1 = fallback access)
    checking: float        # sum nu * checking of the final instance
    hashing: float         # index + hashing cost of the chosen tables
    space: float           # estimated space cost
    steps: list            # (schema, benefit, delta_space) per addition


def _hash_cost(nattr, mu, params: CostParams):
    return params.K_r + mu * (params.C_h + params.K_h * nattr)


def greedy_static(enum: SchemaEnumeration, size: np.ndarray, fallback_cost: np.ndarray,
                  schema_mu: np.ndarray, space_bound: float, params: CostParams = CostParams(),
                  existing: np.ndarray | None = None, max_tables: int | None = None,
                  min_benefit: float = 0.0, weight: float = 1.0) -> GreedyResult:
    """001 §3.2 greedy: add hash tables by benefit per unit space while the space bound holds.

    ``schema_mu``: mu per schema id.  ``existing``: bool per schema id of multi-attribute
    schemas already in the configuration (the dynamic algorithm reuses this with a subset of
    subscriptions).  ``weight`` scales per-subscription gains when ``enum`` holds a sample.
    Starts from ``A_0`` = all singleton schemas (free, see :class:`CostParams`).
    Space of a configuration: ``sum_H (i_space + h_space |H|) + K_space sum_s size(s - p)``
    (entries(H) estimated by the number of subscriptions it serves, an upper bound).
    """
    n_schema = len(enum.schemas)
    single = enum.schema_nattr == 1
    allowed = single.copy() if existing is None else (single | existing)
    chosen = [] if existing is None else [enum.schemas[k] for k in np.flatnonzero(existing & ~single)]
    size = np.asarray(size, dtype=np.float64)
    fallback_cost = np.asarray(fallback_cost, dtype=np.float64)
    mu = np.asarray(schema_mu, dtype=np.float64)
    steps = []

    choice, cur = best_choice(enum, allowed, fallback_cost)
    has = choice >= 0
    curlen = np.zeros(enum.n_subs)
    curlen[has] = enum.nattr[choice[has]]
    multi = np.zeros(enum.n_subs, dtype=bool)
    multi[has] = enum.nattr[choice[has]] >= 2
    # rows of each schema, contiguous: adding a table only revisits its own rows
    by_sid = np.argsort(enum.sid, kind="stable")
    sid_start = np.searchsorted(enum.sid[by_sid], np.arange(n_schema + 1))

    def space_of():
        n_tab = int((allowed & ~single).sum())
        return weight * (params.h_space * float(multi.sum())
                         + params.K_space * float((size - curlen).sum())) + params.i_space * n_tab

    space = space_of()
    while space < space_bound and (max_tables is None or len(chosen) < max_tables):
        cand = ~allowed
        if not cand.any():
            break
        gain = np.maximum(cur[enum.sub] - enum.cost, 0.0)
        gain[~cand[enum.sid]] = 0.0
        imp = gain > 0
        benefit = weight * np.bincount(enum.sid, gain, minlength=n_schema)
        benefit -= _hash_cost(enum.schema_nattr, mu, params)
        n_imp = np.bincount(enum.sid, imp, minlength=n_schema)
        n_from_multi = np.bincount(enum.sid, imp & multi[enum.sub], minlength=n_schema)
        dlen = np.bincount(enum.sid, imp * (enum.nattr - curlen[enum.sub]), minlength=n_schema)
        ds = params.i_space + weight * (params.h_space * (n_imp - n_from_multi)
                                        - params.K_space * dlen)
        ok = cand & (benefit > min_benefit) & (space + np.maximum(ds, 0) <= space_bound)
        if not ok.any():
            break
        ds_pos = np.maximum(ds, 0)
        per_space = np.where(ds_pos > 0, benefit / np.where(ds_pos > 0, ds_pos, 1), np.inf)
        # infinite benefit per unit space first (space saved), then by benefit (001 §3.2)
        key = np.where(ok, per_space, -1.0)
        top = key.max()
        pick = np.flatnonzero(ok & (key == top))
        k = int(pick[np.argmax(benefit[pick])])
        allowed[k] = True
        chosen.append(enum.schemas[k])
        steps.append((enum.schemas[k], float(benefit[k]), float(ds[k])))
        # the best clustering instance changes only for subscriptions with schema k in GA(s)
        rows = by_sid[sid_start[k]: sid_start[k + 1]]
        better = rows[enum.cost[rows] < cur[enum.sub[rows]]]
        sb = enum.sub[better]
        choice[sb] = better
        cur[sb] = enum.cost[better]
        curlen[sb] = enum.nattr[better]
        multi[sb] = enum.nattr[better] >= 2
        space = space_of()
    tab = np.flatnonzero(allowed & ~single)
    hashing = float(_hash_cost(enum.schema_nattr[tab], mu[tab], params).sum())
    return GreedyResult(chosen, choice, float(weight * cur.sum()), hashing, space, steps)
