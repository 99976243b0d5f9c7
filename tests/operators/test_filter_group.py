"""The FILTER group operator against a brute-force matcher: DNF subscriptions report an event once,
projections null the other columns, deletes are not events, registration errors change nothing."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.filters.group import FilterGroup
from sparksub.operators.shared.schemas import EVENT_PREFIX
from sparksub.operators.filters.counting import CountingMatcher
from sparksub.operators.filters.le_subscribe import LeSubscribe

MATCHERS = {"le_subscribe": LeSubscribe, "counting": CountingMatcher}

COLUMNS = [("a", pa.int64()), ("b", pa.int64()), ("s", pa.string())]


def holds(event: dict, attr: str, op: str, vals: tuple) -> bool:
    v = event.get(attr)
    if op == "is_null":
        return v is None
    if op == "is_not_null":
        return v is not None
    if v is None:
        return False
    if isinstance(v, str) != isinstance(vals[0] if vals else v, str):
        return False
    return {"=": lambda: v == vals[0], "!=": lambda: v != vals[0], "<": lambda: v < vals[0],
            "<=": lambda: v <= vals[0], ">": lambda: v > vals[0], ">=": lambda: v >= vals[0],
            "between": lambda: vals[0] <= v <= vals[1], "in": lambda: v in vals}[op]()


num_pred = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "between", "in",
                                                                     "is_null", "is_not_null"]),
                     st.lists(st.integers(0, 4), min_size=2, max_size=3)).map(
    lambda t: (t[0], t[1], () if t[1] in ("is_null", "is_not_null") else (tuple(sorted(t[2][:2])) if t[1] == "between"
                                                        else tuple(t[2]) if t[1] == "in" else (t[2][0],))))
str_pred = st.tuples(st.just("s"), st.sampled_from(["=", "!=", "<", ">="]), st.sampled_from(["x", "y", "z"])).map(
    lambda t: (t[0], t[1], (t[2],)))
conjunction = st.lists(st.one_of(num_pred, str_pred), min_size=0, max_size=3).map(tuple)
dnf = st.lists(conjunction, min_size=1, max_size=3).map(tuple)
event = st.fixed_dictionaries({"a": st.one_of(st.none(), st.integers(0, 4)),
                               "b": st.one_of(st.none(), st.integers(0, 4)),
                               "s": st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))})


def batch(events, ops=None):
    cols = {EVENT_PREFIX + c: pa.array([e[c] for e in events], t) for c, t in COLUMNS}
    cols["op"] = pa.array(ops or [0] * len(events), pa.int8())
    cols["seq"] = pa.array(range(len(events)), pa.int64())
    return pa.table(cols)


@pytest.mark.parametrize("matcher", sorted(MATCHERS))
@settings(max_examples=40, deadline=None)
@given(subs=st.lists(dnf, min_size=1, max_size=12), events=st.lists(event, min_size=1, max_size=15),
       drop=st.sets(st.integers(0, 11)))
def test_matches_equal_brute_force(matcher, subs, events, drop):
    g = FilterGroup("filter:t", "t", COLUMNS, matcher_factory=MATCHERS[matcher])
    ids = [f"s{i}" for i in range(len(subs))]
    g.register(ids, subs, [("*",)] * len(subs))
    gone = sorted(f"s{i}" for i in drop if i < len(subs))
    g.unregister(gone)
    g.register([i + "_again" for i in gone], [subs[int(i[1:])] for i in gone], [("*",)] * len(gone))
    live = {i: d for i, d in zip(ids, subs) if i not in gone} | {i + "_again": subs[int(i[1:])] for i in gone}
    out = g.apply(batch(events)).to_pylist()
    got = sorted((r["seq"], r["subscription_id"]) for r in out)
    want = sorted((n, sid) for n, e in enumerate(events) for sid, d in live.items()
                  if any(all(holds(e, *p) for p in conj) for conj in d))
    assert got == want
    for r in out:  # the notification carries the event
        e = events[r["seq"]]
        assert (r[EVENT_PREFIX + "a"], r[EVENT_PREFIX + "b"], r[EVENT_PREFIX + "s"]) == (e["a"], e["b"], e["s"])


def test_projection_deletes_and_errors():
    g = FilterGroup("filter:t", "t", COLUMNS)
    g.register(["p", "q"], [((("a", ">=", (1,)),),), ((("s", "=", ("x",)),), (("a", "=", (2,)),))],
               [("a",), ("*",)])
    out = g.apply(batch([{"a": 2, "b": 7, "s": "x"}, {"a": 2, "b": 1, "s": "x"}], ops=[0, 1])).to_pylist()
    assert [(r["subscription_id"], r[EVENT_PREFIX + "a"], r[EVENT_PREFIX + "b"]) for r in out] == \
        [("p", 2, None), ("q", 2, 7)]  # q's two conjunctions both match: reported once; row 2 is a delete
    with pytest.raises(DuplicateSubscription):
        g.register(["r", "p"], [((),), ((),)], [("*",), ("*",)])
    with pytest.raises(UnknownSubscription):
        g.unregister(["q", "zz"])
    assert "r" not in g and "q" in g and len(g) == 2


@settings(max_examples=25, deadline=None)
@given(subs=st.lists(dnf, min_size=1, max_size=15), events=st.lists(event, min_size=1, max_size=10),
       drop=st.sets(st.integers(0, 14)), k=st.integers(1, 4))
def test_snapshot_shards_rebuild_the_same_matches(subs, events, drop, k):
    """Blocks survive snapshot -> shard -> build: the shards' matches partition the group's."""
    g = FilterGroup("filter:t", "t", COLUMNS)
    ids = [f"s{i}" for i in range(len(subs))]
    g.register(ids, subs, [("*",)] * len(subs))
    g.unregister([f"s{i}" for i in drop if i < len(subs)])
    whole = sorted((r["seq"], r["subscription_id"]) for r in g.apply(batch(events)).to_pylist())
    snap = g.snapshot()
    assert len(snap) == len(g)
    parts = [snap.shard(i, k).build() for i in range(k)]
    assert sum(len(p) for p in parts) == len(g)
    got = sorted((r["seq"], r["subscription_id"]) for p in parts for r in p.apply(batch(events)).to_pylist())
    assert got == whole


def test_register_block_is_all_or_nothing():
    import numpy as np

    from sparksub.operators.filters.group import Block
    g = FilterGroup("filter:t", "t", COLUMNS)
    g.register(["keep"], [((("a", "=", (1,)),),)], [("*",)])
    # the second disjunct's constants are bad (None): the first disjunct must not stay behind
    bad = Block(np.array(["x", "y"], dtype=object),
                [[("a", ">=", np.array([1, 2]))], [("b", "=", np.array([3, None], dtype=object))]], ("*",))
    with pytest.raises(TypeError, match="None in row 1"):
        g.register_block(bad)
    assert len(g) == 1 and "x" not in g
    assert len(g.matcher) == 1
    out = g.apply(batch([{"a": 1, "b": 3, "s": None}, {"a": 2, "b": 3, "s": None}])).to_pylist()
    assert [(r["seq"], r["subscription_id"]) for r in out] == [(0, "keep")]
    good = Block(np.array(["x", "y"], dtype=object),
                 [[("a", ">=", np.array([1, 2]))], [("b", "=", 3)]], ("a",))
    g.register_block(good)
    out = g.apply(batch([{"a": 1, "b": 3, "s": "z"}, {"a": 0, "b": 0, "s": None}])).to_pylist()
    assert sorted((r["seq"], r["subscription_id"]) for r in out) == [(0, "keep"), (0, "x"), (0, "y")]
    assert all(r[EVENT_PREFIX + "s"] is None for r in out if r["subscription_id"] != "keep")
    g.unregister(["x"])
    assert len(g.matcher) == 3  # keep + y's two conjunctions
