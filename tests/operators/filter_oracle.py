"""The brute-force filter matcher the matcher tests share: plain Python, one predicate at a time."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.operators.filters.predicates import Pred


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
