"""The brute-force filter matcher the matcher tests share: plain Python, one predicate at a time."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from sparksub.operators.filters.predicates import Pred


#: Operators for random predicates, equality-heavy as 001 §6's workloads.
OPS = ["="] * 8 + ["!=", "<", "<=", ">", ">=", "between", "in", "is_null"]


def draw_pred(draw, attr: str, nv: int) -> Pred:
    """A random predicate on ``attr`` with constants in 0..nv (inside a ``@st.composite``)."""
    op = draw(st.sampled_from(OPS))
    v = lambda: draw(st.integers(0, nv))  # noqa: E731
    if op == "between":
        val = (v(), v())
    elif op == "in":
        val = tuple(v() for _ in range(draw(st.integers(1, 3))))
    elif op == "is_null":
        val = ()
    else:
        val = (v(),)
    return Pred(attr, op, val)


def draw_event(draw, attrs: list, nv: int) -> dict:
    """A random event: each attribute a value in 0..nv or missing (None)."""
    miss = draw(st.floats(0, 0.4))
    return {a: (None if draw(st.floats(0, 1)) < miss else draw(st.integers(0, nv))) for a in attrs}


def holds(p: Pred, ev: dict) -> bool:
    v = ev.get(p.attr)
    if p.op == "is_null":
        return v is None
    if v is None:
        return False
    c = p.value
    if p.op == "=":
        return v == c[0]
    if p.op == "!=":
        return v != c[0]
    if p.op == "<":
        return v < c[0]
    if p.op == "<=":
        return v <= c[0]
    if p.op == ">":
        return v > c[0]
    if p.op == ">=":
        return v >= c[0]
    if p.op == "between":
        return c[0] <= v <= c[1]
    if p.op == "in":
        return v in c
    raise ValueError(p.op)


def brute(subs: dict, evs: list) -> set:
    return {(i, s) for i, ev in enumerate(evs) for s, conj in subs.items()
            if all(holds(p, ev) for p in conj)}


def table(evs: list, attrs: list) -> pa.Table:
    return pa.table({a: pa.array([e.get(a) for e in evs], pa.int64()) for a in attrs})


def got(eng, evs, attrs) -> set:
    e, s = eng.match(table(evs, attrs))
    assert len(e) == len(s)
    order = np.lexsort((s, e))
    assert (order == np.arange(len(e))).all(), "not sorted by (event, slot)"
    pairs = list(zip(e.tolist(), s.tolist()))
    assert len(set(pairs)) == len(pairs), "duplicate matches"
    return set(pairs)


def run_steps(eng, attrs: list, steps: list, rnd, add=None, after_step=None) -> dict:
    """Play a workload's steps (add / remove a fraction / match / static / maintain) on a matcher,
    checking every match step and the subscription count against brute force; returns the live
    subscriptions.  ``add(slots, conjunctions)`` replaces ``eng.add``; ``after_step()`` runs after each."""
    subs: dict = {}
    nxt = 0
    for kind, arg in steps:
        if kind == "add":
            slots = list(range(nxt, nxt + len(arg)))
            nxt += len(arg)
            rnd.shuffle(slots)
            if add is None:
                eng.add(np.array(slots, dtype=np.int64), arg)
            else:
                add(slots, arg)
            subs.update(zip(slots, arg))
        elif kind == "remove":
            rm = rnd.sample(sorted(subs), int(len(subs) * arg))
            eng.remove(np.array(rm, dtype=np.int64))
            for r in rm:
                del subs[r]
        elif kind == "match":
            assert got(eng, arg, attrs) == brute(subs, arg)
        elif kind == "static":
            eng.recluster_static()
        elif kind == "maintain":
            eng.maintain()
        assert len(eng) == len(subs)
        if after_step is not None:
            after_step()
    return subs
