"""Brute-force oracles for the bounded stream joins (003 ch. 3): the nested-loop join, classic caches,
exhaustive offline optima, the best predetermined decision sequence (FlowExpect's search space, 003 §3.3.3)
and the optimum over adaptive strategies (003 §3.3.4).  Tiny inputs only; no import of the package's code.

Streams are lists of steps; a step is (left keys, right keys), a key None for NULL.  A row is identified by
(side, rid), rid numbering each side's rows from 0 in order.
"""
from __future__ import annotations

import itertools
import math


def rows_of(steps):
    """[(side, rid, step, key)] of every row."""
    out, nxt = [], [0, 0]
    for t, sides in enumerate(steps):
        for d in (0, 1):
            for k in sides[d]:
                out.append((d, nxt[d], t, k))
                nxt[d] += 1
    return out


def joins(lk, rk, band) -> bool:
    if lk is None or rk is None:
        return False
    if band is None:
        return lk == rk
    return band[0] <= rk - lk <= band[1]


def nested_loop(steps, band=None, window=None, times=None):
    """The multiset of (left rid, right rid) pairs an unbounded join produces.  ``times``: each step's
    number (default its index)."""
    rows = rows_of(steps)
    tm = (lambda t: t) if times is None else (lambda t: times[t])
    left = [r for r in rows if r[0] == 0]
    right = [r for r in rows if r[0] == 1]
    out = []
    for _, li, lt, lk in left:
        for _, ri, rt, rk in right:
            if joins(lk, rk, band) and (window is None or abs(tm(lt) - tm(rt)) <= window):
                out.append((li, ri))
    return sorted(out)


# ---------------------------------------------------------------------------------------------------------------
# classic caching (003 §3.2: the caching problem)
# ---------------------------------------------------------------------------------------------------------------
def classic_cache(refs, k: int, policy: str) -> int:
    """Hits of a size-k cache over the reference string, with the option of not caching a missed tuple
    (003 §3.2: "we have the option of caching it afterwards"): on a miss with a full cache the victim is
    chosen among the cached tuples *and* the missed one.  LRU (least recently referenced), LFU (perfect:
    fewest references so far, ties -> least recent) or LFD (Belady: referenced furthest ahead)."""
    cache: list = []
    last: dict = {}
    freq: dict = {}
    hits = 0
    for t, v in enumerate(refs):
        freq[v] = freq.get(v, 0) + 1
        last[v] = t
        if v in cache:
            hits += 1
            continue
        if k <= 0:
            continue
        if len(cache) < k:
            cache.append(v)
            continue
        pool = cache + [v]
        if policy == "LRU":
            victim = min(pool, key=lambda x: last[x])
        elif policy == "LFU":
            victim = min(pool, key=lambda x: (freq[x], last[x]))
        elif policy == "LFD":
            def nxt(x, t=t):
                return next((u for u in range(t + 1, len(refs)) if refs[u] == x), math.inf)
            victim = max(pool, key=lambda x: (nxt(x), -last[x]))
        else:
            raise ValueError(policy)
        if victim != v:
            cache.remove(victim)
            cache.append(v)
    return hits


# ---------------------------------------------------------------------------------------------------------------
# exhaustive offline optimum
# ---------------------------------------------------------------------------------------------------------------
def _choices(items, caps, shared):
    """Every way to keep items within the bounds (only maximal ones: keeping more never hurts)."""
    if shared is not None:
        m = min(shared, len(items))
        return [list(c) for c in itertools.combinations(items, m)]
    out = []
    by = [[x for x in items if x[0] == d] for d in (0, 1)]
    ml = len(by[0]) if caps[0] is None else min(caps[0], len(by[0]))
    mr = len(by[1]) if caps[1] is None else min(caps[1], len(by[1]))
    for a in itertools.combinations(by[0], ml):
        for b in itertools.combinations(by[1], mr):
            out.append(list(a) + list(b))
    return out


def offline_optimum(steps, caps=(None, None), shared=None, band=None) -> int:
    """The most results any sequence of cache decisions produces, by exhaustive search (tiny inputs)."""
    rows = rows_of(steps)
    by_step = [[r for r in rows if r[2] == t] for t in range(len(steps))]

    def go(t, cache):
        if t == len(steps):
            return 0
        arr = by_step[t]
        got = 0
        for a in arr:
            for c in cache + [x for x in arr if x[0] == 0 and a[0] == 1]:
                if a[0] != c[0]:
                    l, r = (c, a) if c[0] == 0 else (a, c)
                    got += joins(l[3], r[3], band)
        live = [x for x in cache + arr if x[3] is not None]
        return got + max(go(t + 1, keep) for keep in _choices(live, caps, shared))

    return go(0, [])


# ---------------------------------------------------------------------------------------------------------------
# FlowExpect's search space and the adaptive optimum (003 §3.3.3, §3.3.4)
# ---------------------------------------------------------------------------------------------------------------
def _match_prob(key, side, dists, band):
    """Expected matches of a row (side, key) with the partner arrivals ``dists`` ([{value: p}, ...])."""
    total = 0.0
    for dist in dists:
        for v, p in dist.items():
            l, r = (key, v) if side == 0 else (v, key)
            total += p * joins(l, r, band)
    return total


def best_predetermined(cache, future, capacity: int, lookahead: int, band=None):
    """Max over predetermined decision sequences of the expected results in [t0 + 1, t0 + lookahead].

    ``cache``: [(side, key)] the determined candidates at t0 (cached + t0's arrivals); ``future[t][d]``:
    side d's arrivals at t0 + t (t = 1..), each {value: probability}.  Returns (best value, set of
    optimal first decisions as frozensets of cache indices)."""
    def benefit(item, t):            # expected matches of a kept item at t0 + t
        kind, side, payload = item
        partner = future.get(t, ([], []))[1 - side]
        if kind == "det":
            return _match_prob(payload, side, partner, band)
        return sum(p * _match_prob(v, side, partner, band) for v, p in payload.items())

    def go(t, kept):                 # kept after the decision at t0 + t - 1; earn at t0 + t, decide again
        if t > lookahead:
            return 0.0
        gain = sum(benefit(x, t) for x in kept)
        if t == lookahead:
            return gain
        arr = [("und", d, dist) for d in (0, 1) for dist in future.get(t, ([], []))[d]]
        pool = kept + arr
        best = max(go(t + 1, list(c)) for m in range(min(capacity, len(pool)) + 1)
                   for c in itertools.combinations(pool, m))
        return gain + best

    items = [("det", s, k) for s, k in cache]
    results = {}
    for m in range(min(capacity, len(items)) + 1):
        for c in itertools.combinations(range(len(items)), m):
            results[frozenset(c)] = go(1, [items[i] for i in c])
    best = max(results.values())
    return best, {c for c, v in results.items() if v >= best - 1e-9}


def adaptive_optimum(cache, future, capacity: int, lookahead: int, band=None) -> float:
    """The optimum over strategies that decide after seeing each step's arrivals (expectimax)."""
    def outcomes(t):
        dists = [(d, dist) for d in (0, 1) for dist in future.get(t, ([], []))[d]]
        choices = []
        for d, dist in dists:
            opts = list(dist.items())
            rest = 1.0 - sum(p for _, p in opts)
            if rest > 1e-12:
                opts.append((None, rest))
            choices.append([(d, v, p) for v, p in opts])
        for combo in itertools.product(*choices) if choices else [()]:
            prob = 1.0
            for _, _, p in combo:
                prob *= p
            yield prob, [(d, v) for d, v, _ in combo]

    def go(t, kept):
        if t > lookahead:
            return 0.0
        total = 0.0
        for prob, arr in outcomes(t):
            gain = 0
            for d, v in arr:
                for s, k in kept:
                    if s != d:
                        l, r = (k, v) if s == 0 else (v, k)
                        gain += joins(l, r, band)
            if t == lookahead:
                total += prob * gain
                continue
            pool = kept + [(d, v) for d, v in arr if v is not None]
            best = max(go(t + 1, list(c)) for m in range(min(capacity, len(pool)) + 1)
                       for c in itertools.combinations(pool, m))
            total += prob * (gain + best)
        return total

    return max(go(1, list(c)) for m in range(min(capacity, len(cache)) + 1)
               for c in itertools.combinations(cache, m))
