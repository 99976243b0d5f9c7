"""Min-cost flow for the join-state problem: OPT-offline ([DGR03], 003 §3.5.1) and FlowExpect (003 §3.3).

Both ask: which tuples should the cache keep so that it produces the most (expected) result tuples over a
period, the cache holding at most k tuples after each step's decision?  003 §3.3.1 builds a slice graph
(Figure 3.2): k node-disjoint source-sink paths, one per cache slot, through copies of every candidate at
every step.  We solve the same decision space on an equivalent, smaller graph (the *timeline* form):

* a timeline τ_t0 -> τ_t0+1 -> ... -> τ_end of arcs with capacity k and cost 0: free cache slots;
* per candidate tuple x arriving (or decided upon) at step a, a chain x_a -> x_a+1 -> ... whose arc into
  x_t costs −(expected) matches of x at step t (003 §3.3.1: a horizontal arc "keep x from t−1 to t" costs
  −Pr{X^partner_t = v_x}); an entry arc τ_a -> x_a (capacity 1: keep x from its arrival) and an exit arc
  x_t -> τ_t (capacity 1: drop x at step t's decision, after it joined step t's arrivals).

A flow of k units from τ_t0 to τ_end is a set of tuple intervals [a, exit) with at most k of them over any
step: exactly a feasible sequence of cache decisions, its cost the negated benefit (003 Theorem 8; with
0/1 benefits, OPT-offline).  A slot path of Figure 3.2 is a sequence of tuple chains joined by timeline
arcs; benefits are >= 0, so a slot left empty (a timeline arc) never beats keeping a tuple.  The chapter's
graph has O((k + l)·l) nodes for look-ahead l (003 Appendix A.4); ours has O((k + l)·l) too, and for
OPT-offline only one chain node per (tuple, step with a match), which makes whole 5,000-step streams
solvable.

Solver: successive shortest paths with Dijkstra on reduced costs (potentials initialised by one pass over the
nodes in creation order, which is topological: every arc goes forward in time; reduced costs clamped at 0
against rounding), stopping when the cheapest augmenting path gains nothing.  Costs are floats (expected
benefits); with integer benefits the optimum is exact.  O(k · E log V) per solve.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from sparksub.operators.stream_joins.keys import join_pairs, normalize

__all__ = ["MinCostFlow", "OfflinePlan", "flow_expect", "match_pairs", "opt_offline"]

class MinCostFlow:
    """A residual graph with successive-shortest-path min-cost flow.  Nodes must be created so that every
    arc goes from an older node to a newer one (a topological order): the initial potentials are one pass
    in that order, which handles the negative costs."""

    def __init__(self):
        self.adj: list[list[int]] = []
        self.to: list[int] = []
        self.cap: list[int] = []
        self.cost: list[float] = []

    def node(self) -> int:
        self.adj.append([])
        return len(self.adj) - 1

    def edge(self, u: int, v: int, cap: int, cost: float) -> int:
        """Arc u -> v; returns its id (its residual twin is id ^ 1)."""
        e = len(self.to)
        self.to += [v, u]
        self.cap += [cap, 0]
        self.cost += [cost, -cost]
        self.adj[u].append(e)
        self.adj[v].append(e + 1)
        return e

    def flow_on(self, e: int) -> int:
        return self.cap[e ^ 1]

    def solve(self, s: int, t: int, amount: int) -> float:
        """Push up to ``amount`` units s -> t, each along the cheapest path while it gains (cost < 0); returns
        the total cost (<= 0)."""
        n = len(self.adj)
        to, cap, cost, adj = self.to, self.cap, self.cost, self.adj
        pot = [math.inf] * n
        pot[s] = 0.0
        for u in range(n):                                    # DAG pass: creation order is topological
            pu = pot[u]
            if pu == math.inf:
                continue
            for e in adj[u]:
                if e & 1 == 0 and cap[e] > 0 and pu + cost[e] < pot[to[e]]:
                    pot[to[e]] = pu + cost[e]
        pot = [0.0 if p == math.inf else p for p in pot]
        total, left = 0.0, int(amount)
        while left > 0:
            dist = [math.inf] * n
            prev = [-1] * n
            dist[s] = 0.0
            heap = [(0.0, s)]
            while heap:
                d, u = heapq.heappop(heap)
                if d > dist[u]:
                    continue
                pu = pot[u]
                for e in adj[u]:
                    if cap[e] <= 0:
                        continue
                    v = to[e]
                    rc = cost[e] + pu - pot[v]           # >= 0 but for rounding: clamp, or a zero-cost
                    nd = d + (rc if rc > 0.0 else 0.0)   # noqa: FURB136 (hot loop) -1e-13 cycles relax forever
                    if nd < dist[v]:
                        dist[v] = nd
                        prev[v] = e
                        heapq.heappush(heap, (nd, v))
            if dist[t] == math.inf:
                break
            for v in range(n):
                if dist[v] < math.inf:
                    pot[v] += dist[v]
            path_cost, push, v = 0.0, left, t
            while v != s:
                e = prev[v]
                path_cost += cost[e]
                push = min(push, cap[e])
                v = to[e ^ 1]
            if path_cost >= -1e-9:
                break
            v = t
            while v != s:
                e = prev[v]
                cap[e] -= push
                cap[e ^ 1] += push
                v = to[e ^ 1]
            total += push * path_cost
            left -= push
        return total


# ----------------------------------------------------------------------------------------------------------------
# OPT-offline ([DGR03]; 003 §3.5.1: FlowExpect with 0/1 weights)
# ----------------------------------------------------------------------------------------------------------------
def match_pairs(keys_a, keys_b, lo: float | None, hi: float | None):
    """All (i, j) with left key a_i joining right key b_j: equality (``lo`` None) or lo <= b_j − a_i <= hi
    (float64); NULLs (None, and NaN here) join nothing.  Two int64 index arrays, grouped by i."""
    a, ia = _valid(keys_a)
    b, ib = _valid(keys_b)
    pi, pj = join_pairs(a, b, None if lo is None else (lo, hi), 0)
    return ia[pi], ib[pj]


def _valid(keys) -> tuple[np.ndarray, np.ndarray]:
    """The non-NULL keys of a column (normalised) and their positions."""
    k = np.asarray(keys)
    if k.dtype.kind == "f":
        ok = ~np.isnan(k)
        return k[ok], np.flatnonzero(ok)
    if k.dtype == object:
        ok = np.array([x is not None and not (isinstance(x, float) and math.isnan(x)) for x in k.tolist()], dtype=bool)
        vals, valid = normalize(k[ok], "keys")
        return vals, np.flatnonzero(ok)
    vals, valid = normalize(k, "keys")
    return vals[valid], np.flatnonzero(valid)


@dataclass
class OfflinePlan:
    """The offline optimum: ``results`` (all the cache can produce, same-step pairs included), ``same_step``
    (pairs of tuples arriving at one step, produced whatever the cache does), ``true_results`` (the join
    with unbounded state) and ``exits[d][rid]``, the step whose decision drops row ``rid`` of side d (its
    arrival step: never admitted).  Replayed by :class:`~sparksub.operators.stream_joins.policies.Planned`."""
    results: int
    same_step: int
    true_results: int
    exits: tuple[np.ndarray, np.ndarray]


def _times(times, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) if times is None else np.asarray(times, dtype=np.int64)


def opt_offline(left_keys, right_keys, left_times=None, right_times=None, *, max_state_rows=None,
                shared_state_rows: int | None = None, band: tuple[float, float] | None = None,
                window: int | None = None) -> OfflinePlan:
    """The most result tuples a cache can produce knowing both streams in advance ([DGR03]'s OPT-offline;
    003 §3.5.1).  Rows arrive at ``*_times`` (default: row i at step i); ``max_state_rows`` per side (an int
    or (left, right)) or ``shared_state_rows`` over both (003's single cache); ``band`` = (lo, hi) for
    lo <= right − left <= hi (else equality); ``window``: pairs at most that many steps apart (003 §3.6)."""
    keys = (np.asarray(left_keys), np.asarray(right_keys))
    times = (_times(left_times, keys[0].size), _times(right_times, keys[1].size))
    lo, hi = band if band is not None else (None, None)
    li, ri = match_pairs(keys[0], keys[1], lo, hi)
    dt = times[1][ri] - times[0][li]
    if window is not None:
        keep = np.abs(dt) <= window
        li, ri, dt = li[keep], ri[keep], dt[keep]
    same = int(np.count_nonzero(dt == 0))
    true = int(li.size)
    # future matches of each tuple: (side, rid) -> steps of its later partners
    later_l = dt > 0                      # the right partner comes later: benefit for the cached left row
    futures = ((li[later_l], times[1][ri[later_l]]), (ri[~later_l & (dt != 0)], times[0][li[~later_l & (dt != 0)]]))
    exits = (times[0].copy(), times[1].copy())
    if shared_state_rows is not None:
        groups = [((0, 1), int(shared_state_rows))]
    else:
        caps = (max_state_rows, max_state_rows) if np.isscalar(max_state_rows) else tuple(max_state_rows)
        groups = [((0,), int(caps[0])), ((1,), int(caps[1]))]
    gained = 0
    for sides, cap in groups:
        gained += _solve_offline(sides, cap, times, futures, exits)
    return OfflinePlan(same + gained, same, true, exits)


def _solve_offline(sides, cap: int, times, futures, exits) -> int:
    """One budget group of :func:`opt_offline`: build the timeline graph, solve, write the exits."""
    chains = []                                   # (side, rid, arrival, [(step, count), ...])
    for d in sides:
        rows, steps = futures[d]
        if not rows.size:
            continue
        order = np.lexsort((steps, rows))
        rows, steps = rows[order], steps[order]
        change = np.ones(rows.size, dtype=bool)
        change[1:] = (rows[1:] != rows[:-1]) | (steps[1:] != steps[:-1])
        first = np.flatnonzero(change)
        cnt = np.diff(np.append(first, rows.size))
        urow, ustep = rows[first], steps[first]
        bounds = np.flatnonzero(np.diff(urow)) + 1
        for seg_r, seg_s, seg_c in zip(np.split(urow, bounds), np.split(ustep, bounds), np.split(cnt, bounds)):
            rid = int(seg_r[0])
            chains.append((d, rid, int(times[d][rid]), list(zip(seg_s.tolist(), seg_c.tolist()))))
    if cap <= 0 or not chains:
        return 0
    steps = sorted({c[2] for c in chains} | {s for c in chains for s, _ in c[3]})
    at_step: dict[int, list] = {}
    enter: dict[int, list] = {}
    for ci, (_, _, a, ms) in enumerate(chains):
        enter.setdefault(a, []).append(ci)
        for j, (s, c) in enumerate(ms):
            at_step.setdefault(s, []).append((ci, j, c))
    g = MinCostFlow()
    last_node = [0] * len(chains)
    entry_arc = [0] * len(chains)
    exit_arcs: list[list[tuple[int, int]]] = [[] for _ in chains]
    tau_prev = None
    tau_first = None
    for s in steps:
        pending_exits = []
        for ci, j, c in at_step.get(s, ()):
            v = g.node()
            g.edge(last_node[ci], v, 1, -float(c))
            last_node[ci] = v
            pending_exits.append((ci, v, s))
        tau = g.node()
        if tau_prev is not None:
            g.edge(tau_prev, tau, cap, 0.0)
        else:
            tau_first = tau
        for ci, v, st in pending_exits:
            exit_arcs[ci].append((g.edge(v, tau, 1, 0.0), st))
        for ci in enter.get(s, ()):
            x0 = g.node()
            entry_arc[ci] = g.edge(tau, x0, 1, 0.0)
            last_node[ci] = x0
        tau_prev = tau
    cost = g.solve(tau_first, tau_prev, cap)
    for ci, (d, rid, a, _) in enumerate(chains):
        if g.flow_on(entry_arc[ci]):
            for e, st in exit_arcs[ci]:
                if g.flow_on(e):
                    exits[d][rid] = st
                    break
    return round(-cost)


# ----------------------------------------------------------------------------------------------------------------
# FlowExpect (003 §3.3)
# ----------------------------------------------------------------------------------------------------------------
def flow_expect(cand, capacity: int, lookahead: int) -> tuple[float, np.ndarray]:
    """FlowExpect's decision at the current step (003 §3.3): the expected benefit over
    [t0 + 1, t0 + lookahead] of the best *predetermined* sequence of cache decisions (003 §3.3.3; not the
    optimum over adaptive strategies, §3.3.4) and the candidates it keeps now (003 Appendix Corollary 7: the
    tuples on the first arcs of the k paths).  ``cand`` is a
    :class:`~sparksub.operators.stream_joins.policies.Candidates` view: its determined tuples' expected
    matches, the partner models and the arrivals still to come (undetermined nodes) of the budget's sides."""
    t0, l = cand.t0, int(lookahead)
    E = cand.expected(l)                                      # [l, n]: determined nodes' horizontal arcs
    und = []                                                  # (arrival step, benefits[t0+1..t0+l])
    for d in cand.budget_sides:
        model, partner = cand.models[d], cand.models[1 - d]
        if model is None or partner is None:
            continue
        for tp in range(t0 + 1, t0 + l):
            for vals, probs in model.arrivals(t0, tp):
                lo, hi = cand.ranges(d, vals)
                m = partner.expected(t0, l, lo, hi) @ probs    # Σ_v Pr{X^d_t' = v} Pr{X^partner_t matches v}
                m[: tp - t0] = 0.0                             # only steps after its arrival
                if cand.window is not None:
                    m[tp - t0 + cand.window:] = 0.0
                und.append((tp, m))
    g = MinCostFlow()
    n = E.shape[1]
    node = [0] * n
    entry = [0] * n
    unode = [0] * len(und)
    tau_prev = tau0 = g.node()
    for i in range(n):
        node[i] = g.node()
        entry[i] = g.edge(tau0, node[i], 1, 0.0)
    for step in range(1, l + 1):
        t = t0 + step
        exits = []
        for i in range(n):
            v = g.node()
            g.edge(node[i], v, 1, -float(E[step - 1, i]))
            node[i] = v
            exits.append(v)
        for u, (tp, m) in enumerate(und):
            if tp < t:
                v = g.node()
                g.edge(unode[u], v, 1, -float(m[step - 1]))
                unode[u] = v
                exits.append(v)
        tau = g.node()
        g.edge(tau_prev, tau, capacity, 0.0)
        for v in exits:
            g.edge(v, tau, 1, 0.0)
        for u, (tp, _) in enumerate(und):
            if tp == t:
                unode[u] = g.node()
                g.edge(tau, unode[u], 1, 0.0)
        tau_prev = tau
    cost = g.solve(tau0, tau_prev, capacity)
    keep = np.array([i for i in range(n) if g.flow_on(entry[i])], dtype=np.int64)
    return -cost, keep
