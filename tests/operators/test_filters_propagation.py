"""PropagationMatcher (001 §6: single access predicates only) against brute force, the counting
matcher and LeSubscribe."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.filters import CountingMatcher
from sparksub.operators.filters.le_subscribe import LeSubscribe
from sparksub.operators.filters.predicates import Pred
from sparksub.operators.filters.propagation import PropagationMatcher


from filter_oracle import draw_event, draw_pred, run_steps


# ----------------------------------------------------------------------------- strategies
@st.composite
def workloads(draw):
    n_attrs = draw(st.integers(2, 16))
    nv = draw(st.integers(2, 6))
    attrs = [f"a{i}" for i in range(n_attrs)]

    def pred():
        return draw_pred(draw, draw(st.sampled_from(attrs)), nv)

    def event():
        return draw_event(draw, attrs, nv)

    steps = []
    for _ in range(draw(st.integers(1, 5))):
        steps.append(("add", [[pred() for _ in range(draw(st.integers(0, 5)))]
                              for _ in range(draw(st.integers(0, 30)))]))
        steps.append(("remove", draw(st.floats(0, 0.5))))
        steps.append(("match", [event() for _ in range(draw(st.integers(1, 10)))]))
        steps.append((draw(st.sampled_from(["static", "maintain", "none"])), None))
    return attrs, steps


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(workloads(), st.randoms(use_true_random=False))
def test_matches_brute_force(wl, rnd):
    attrs, steps = wl
    eng = PropagationMatcher()

    def no_tables():
        assert eng.stats()["tables"] == 0          # never a multi-attribute hash table
    run_steps(eng, attrs, steps, rnd, after_step=no_tables)


# ----------------------------------------------------------------------------- random W0-like
def _w0_like(rng, n, n_attrs=12, nv=6, fixed=(0, 1), k=5):
    subs = []
    for _ in range(n):
        others = rng.choice(np.arange(len(fixed), n_attrs), k - len(fixed), replace=False)
        at = list(fixed) + others.tolist()
        subs.append([Pred(f"a{a}", "=", (int(rng.integers(1, nv + 1)),)) for a in at])
    return subs


def _events(rng, n, n_attrs=12, nv=6) -> pa.Table:
    return pa.table({f"a{a}": rng.integers(1, nv + 1, size=n) for a in range(n_attrs)})


def _pairs(e, s) -> set:
    return set(zip(np.asarray(e).tolist(), np.asarray(s).tolist()))


def test_agrees_with_counting_and_le_subscribe_on_random_workloads():
    rng = np.random.default_rng(7)
    for nv in (2, 4, 6):
        subs = _w0_like(rng, 1500, nv=nv)
        slots = np.arange(len(subs), dtype=np.int64)
        engines = [PropagationMatcher(), CountingMatcher(), LeSubscribe(dynamic=False),
                   LeSubscribe(dynamic=True, maintain_every=200, maintain_subs=500)]
        for eng in engines:
            eng.add(slots, subs)
        warm = _events(rng, 500, nv=nv)
        for eng in engines:
            eng.match(warm)
        engines[2].recluster_static()
        for _ in range(3):
            evs = _events(rng, 300, nv=nv)
            got = [_pairs(*eng.match(evs)) for eng in engines]
            assert all(g == got[0] for g in got[1:])
        # removals keep them in agreement
        rm = rng.choice(slots, 500, replace=False)
        for eng in engines:
            eng.remove(rm)
        evs = _events(rng, 300, nv=nv)
        got = [_pairs(*eng.match(evs)) for eng in engines]
        assert all(g == got[0] for g in got[1:])
        assert len(got[0]) > 0 or nv == 6
    assert engines[0].stats()["tables"] == 0


def test_single_access_predicates_only():
    rng = np.random.default_rng(1)
    subs = _w0_like(rng, 2000, nv=3)
    eng = PropagationMatcher()
    eng.add(np.arange(len(subs)), subs)
    for _ in range(3):
        eng.match(_events(rng, 1000, nv=3))
    eng.recluster_static()
    eng.maintain()
    ex = eng.explain()
    assert ex["tables"] == [] and ex["subscriptions_single_access"] == len(subs)
    assert "propagation" in ex["algorithm"]
