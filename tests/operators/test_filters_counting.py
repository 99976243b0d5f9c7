"""Phase-1 PredicateIndex and the counting matcher against plain-Python brute force (001 §2.2, §5)."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.filters import CountingMatcher, Pred, PredicateIndex
from sparksub.operators.filters import counting as counting_module
from sparksub.operators.filters.predicates import OPS

NAN = float("nan")
NUM_POOL = [-2, -1, 0, 0.5, 1, 2, 3, 10]                 # small pool: ties
STR_POOL = ["", "a", "ab", "b", "ba", "z"]


# ---------------------------------------------------------------------------------------------
# brute force: plain Python evaluation of one predicate on one event dict


def _kind(v):
    if isinstance(v, (bool, int, float)):
        return "num"
    if isinstance(v, str):
        return "str"
    return None


def holds(pred: Pred, event: dict) -> bool:
    v = event.get(pred.attr)
    if pred.op == "is_null":
        return v is None
    if pred.op == "is_not_null":
        return v is not None
    if v is None:
        return False
    k = _kind(v)
    same = [c for c in pred.value if _kind(c) == k]
    if pred.op == "in":
        return any(v == c for c in same)
    if pred.op == "between":
        return len(same) == 2 and pred.value[0] <= v <= pred.value[1]
    if not same:
        return False
    c = same[0]
    return {"=": v == c, "!=": v != c, "<": v < c, "<=": v <= c, ">": v > c, ">=": v >= c}[pred.op]


def brute_pairs(pids_preds: dict[int, Pred], events: list[dict]) -> set[tuple[int, int]]:
    return {(e, pid) for e, ev in enumerate(events) for pid, p in pids_preds.items() if holds(p, ev)}


# ---------------------------------------------------------------------------------------------
# strategies

ATTRS_NUM = ["n0", "n1", "n2"]
ATTRS_STR = ["s0", "s1"]
ATTR_MIXED = "mix"                                         # only in dict-of-lists batches


def const_for(attr_kind):
    if attr_kind == "num":
        return st.one_of(st.sampled_from(NUM_POOL), st.sampled_from(NUM_POOL).map(float),
                         st.sampled_from([True, False]), st.just(NAN))
    return st.sampled_from(STR_POOL)


def any_const():
    return st.one_of(st.sampled_from(NUM_POOL), st.sampled_from(STR_POOL), st.just(NAN))


@st.composite
def preds(draw, attrs=ATTRS_NUM + ATTRS_STR + ["absent"], mixed=False):
    attr = draw(st.sampled_from(attrs + ([ATTR_MIXED] if mixed else [])))
    op = draw(st.sampled_from(OPS))
    home = "str" if attr.startswith("s") else "num"
    # mostly constants of the attribute's kind; sometimes the other kind (type mismatch)
    const = st.one_of(const_for(home), const_for(home), const_for(home), any_const())
    if op in ("is_null", "is_not_null"):
        value = ()
    elif op == "between":
        value = (draw(const), draw(const))
    elif op == "in":
        value = tuple(draw(st.lists(const, min_size=0, max_size=4)))
    else:
        value = (draw(const),)
    return Pred(attr, op, value)


@st.composite
def event_batches(draw, mixed=False):
    """(list of event dicts, the batch as given to evaluate)."""
    n = draw(st.integers(0, 12))
    present = [a for a in ATTRS_NUM + ATTRS_STR if draw(st.booleans()) or a in ("n0", "s0")]
    num_val = st.one_of(st.sampled_from(NUM_POOL).map(float), st.just(NAN), st.none(),
                        st.sampled_from([-1.5, 2.5, 100.0]))
    str_val = st.one_of(st.sampled_from(STR_POOL), st.none(), st.sampled_from(["aa", "c"]))
    cols = {}
    for a in present:
        cols[a] = draw(st.lists(num_val if a.startswith("n") else str_val, min_size=n, max_size=n))
    if mixed:
        cols[ATTR_MIXED] = draw(st.lists(st.one_of(num_val, str_val), min_size=n, max_size=n))
    events = [{a: col[i] for a, col in cols.items() if col[i] is not None} for i in range(n)]
    as_table = draw(st.booleans()) and not mixed
    if as_table:
        fields = {a: pa.array(col, type=pa.float64() if a.startswith("n") else pa.string())
                  for a, col in cols.items()}
        if "n1" in fields and draw(st.booleans()):     # an integer column with nulls
            ints = [None if (v is None or math.isnan(v)) else int(v) for v in cols["n1"]]
            fields["n1"] = pa.array(ints, type=pa.int64())
            for e, v in zip(events, ints):
                e.pop("n1", None)
                if v is not None:
                    e["n1"] = v
        if "s1" in fields and draw(st.booleans()):     # dictionary-encoded strings
            fields["s1"] = fields["s1"].dictionary_encode()
        batch = pa.table(fields) if fields else pa.table({"_": pa.array([None] * n, pa.null())})
    else:
        batch = cols if cols else {"_": [None] * n}
    return events, batch


def pairs_of(sat) -> set[tuple[int, int]]:
    assert sat.event.dtype == np.int64 and sat.pid.dtype == np.int64
    assert np.all(np.diff(sat.event) >= 0), "pairs must be sorted by event"
    got = list(zip(sat.event.tolist(), sat.pid.tolist()))
    assert len(got) == len(set(got)), "duplicate pairs"
    return set(got)


# ---------------------------------------------------------------------------------------------
# PredicateIndex


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(preds(mixed=True), min_size=0, max_size=40), event_batches(mixed=False))
def test_evaluate_matches_brute_force(pred_list, eb):
    events, batch = eb
    idx = PredicateIndex()
    live = {}
    for p in pred_list:
        live[idx.add(p)] = p
    sat = idx.evaluate(batch)
    assert sat.n_events == len(events)
    assert pairs_of(sat) == brute_pairs(live, events)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(preds(mixed=True), min_size=0, max_size=30), event_batches(mixed=True))
def test_evaluate_mixed_python_column(pred_list, eb):
    events, batch = eb
    idx = PredicateIndex()
    live = {idx.add(p): p for p in pred_list}
    assert pairs_of(idx.evaluate(batch)) == brute_pairs(live, events)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), preds()), min_size=1, max_size=60), event_batches())
def test_interning_refcount_reuse(ops, eb):
    """Interleaved add/release: ids dense and reused, evaluation always equal to brute force."""
    events, batch = eb
    idx = PredicateIndex()
    held: list[int] = []                                   # one entry per reference
    for release, p in ops:
        if release and held:
            pid = held.pop(len(held) // 2)
            idx.release(pid)
        else:
            free_before = sorted(set(range(idx.capacity)) - set(held))
            pid = idx.add(p)
            if pid not in held:
                # a fresh id is the smallest free one, or capacity grows by one
                assert pid == (free_before[0] if free_before else idx.capacity - 1)
            held.append(pid)
        live = {pid: idx.pred(pid) for pid in set(held)}
        assert len(idx) == len(live)
        assert idx.capacity >= (max(held) + 1 if held else 0)
        for pid in live:
            assert idx.refcount(pid) == held.count(pid)
    live = {pid: idx.pred(pid) for pid in set(held)}
    sat = idx.evaluate(batch)
    assert pairs_of(sat) == brute_pairs(live, events)
    # bitmap: the predicate bit vector of each event
    bm = sat.bitmap(0, len(events))
    assert bm.shape == (len(events), idx.capacity)
    assert {(int(e), int(p)) for e, p in zip(*np.nonzero(bm))} == pairs_of(sat)
    if len(events) >= 2:
        assert np.array_equal(sat.bitmap(1, 2), bm[1:2])


def test_interning_equivalences():
    idx = PredicateIndex()
    a = idx.add(Pred("x", "=", (1,)))
    assert idx.add(Pred("x", "=", (1.0,))) == a
    assert idx.add(Pred("x", "=", (True,))) == a
    b = idx.add(Pred("x", "in", (1, 2)))
    assert idx.add(Pred("x", "in", [2, 1, 1])) == b
    c = idx.add(Pred("x", "=", (NAN,)))
    assert idx.add(Pred("x", "=", (float("nan"),))) == c
    assert idx.add(Pred("x", "=", ("1",))) not in (a, b, c)
    assert idx.pred(a) == Pred("x", "=", (1,))
    assert idx.refcount(a) == 3 and len(idx) == 4
    for _ in range(3):
        idx.release(a)
    with pytest.raises(KeyError):
        idx.pred(a)
    assert idx.add(Pred("y", "is_null", ())) == a          # smallest freed id reused
    with pytest.raises(ValueError):
        idx.add(Pred("x", "between", (1,)))
    with pytest.raises(ValueError):
        idx.add(Pred("x", "~", (1,)))
    with pytest.raises(TypeError):
        idx.add(Pred("x", "=", (None,)))


def test_conventions():
    idx = PredicateIndex()
    p = {name: idx.add(pred) for name, pred in {
        "lt_str": Pred("price", "<", ("abc",)), "ne_str": Pred("price", "!=", ("abc",)),
        "ne5": Pred("price", "!=", (5,)), "lt5": Pred("price", "<", (5,)),
        "ne_nan": Pred("price", "!=", (NAN,)), "eq_nan": Pred("price", "=", (NAN,)),
        "null": Pred("price", "is_null", ()), "in_nan": Pred("price", "in", (NAN, 1)),
        "btw_rev": Pred("price", "between", (5, 1)), "btw_mix": Pred("price", "between", (1, "z")),
        "miss": Pred("gone", "is_null", ()), "miss_ne": Pred("gone", "!=", (1,)),
    }.items()}
    t = pa.table({"price": pa.array([1.0, NAN, None, 7.0])})
    got = pairs_of(idx.evaluate(t))
    name = {v: k for k, v in p.items()}
    by_event = {e: sorted(name[pid] for ev, pid in got if ev == e) for e in range(4)}
    assert by_event[0] == sorted(["ne5", "lt5", "ne_nan", "in_nan", "miss"])
    assert by_event[1] == sorted(["ne5", "ne_nan", "miss"])                  # NaN: only !=
    assert by_event[2] == sorted(["null", "miss"])                           # null: only is_null
    assert by_event[3] == sorted(["ne5", "ne_nan", "miss"])


def test_large_batch_against_brute_force():
    rng = np.random.default_rng(7)
    idx = PredicateIndex()
    live = {}
    for _ in range(3000):
        attr = f"a{rng.integers(6)}"
        op = OPS[rng.integers(len(OPS))]
        c = int(rng.integers(0, 50))
        value = {"between": (c, c + int(rng.integers(0, 20))), "in": tuple(rng.integers(0, 50, 3).tolist()),
                 "is_null": (), "is_not_null": ()}.get(op, (c,))
        live[idx.add(Pred(attr, op, value))] = Pred(attr, op, value)
    cols = {f"a{i}": [None if rng.random() < 0.1 else int(v) for v in rng.integers(0, 50, 200)]
            for i in range(5)}                                               # a5 absent
    events = [{a: col[i] for a, col in cols.items() if col[i] is not None} for i in range(200)]
    assert pairs_of(idx.evaluate(pa.table(cols))) == brute_pairs(live, events)


# ---------------------------------------------------------------------------------------------
# CountingMatcher

NUM_VALUES = [0, 1, 2, 3, 2.5, NAN]
STR_VALUES = ["a", "b", "c", "bb"]


def universe_attr(i: int) -> str:
    return f"{'n' if i % 2 == 0 else 's'}{i}"


@st.composite
def universe_pred(draw, n_attrs: int):
    # mostly the first four ("hot") attributes so that conjunctions do match
    i = draw(st.one_of(st.integers(0, 3), st.integers(0, 3), st.integers(0, n_attrs - 1)))
    attr = universe_attr(i)
    pool = NUM_VALUES[:-1] if attr[0] == "n" else STR_VALUES
    const = st.one_of(st.sampled_from(pool), st.sampled_from(pool), st.sampled_from(NUM_VALUES + STR_VALUES))
    op = draw(st.sampled_from(OPS))
    if op in ("is_null", "is_not_null"):
        value = ()
    elif op == "between":
        lo, hi = draw(const), draw(const)
        value = (lo, hi) if draw(st.integers(0, 3)) else (hi, lo)
    elif op == "in":
        value = tuple(draw(st.lists(const, max_size=3)))
    else:
        value = (draw(const),)
    return Pred(attr, op, value)


@st.composite
def universe_batch(draw, n_attrs: int):
    n = draw(st.integers(0, 10))
    cols = {}
    for i in range(n_attrs):
        attr = universe_attr(i)
        if i >= 4 and draw(st.integers(0, 2)) != 0:
            continue                                                       # column absent
        pool = NUM_VALUES if attr[0] == "n" else STR_VALUES
        vals = draw(st.lists(st.one_of(st.sampled_from(pool), st.sampled_from(pool), st.none()),
                             min_size=n, max_size=n))
        cols[attr] = pa.array([None if v is None else (float(v) if attr[0] == "n" else v) for v in vals],
                              type=pa.float64() if attr[0] == "n" else pa.string())
    events = [{a: col[i].as_py() for a, col in cols.items() if col[i].is_valid} for i in range(n)]
    table = pa.table(cols) if cols else pa.table({"_": pa.array([None] * n, pa.null())})
    return events, table


def brute_match(subs: dict[int, list[Pred]], events: list[dict]) -> list[tuple[int, int]]:
    return sorted((e, slot) for e, ev in enumerate(events) for slot, conj in subs.items()
                  if all(holds(p, ev) for p in conj))


@st.composite
def counting_scenarios(draw):
    n_attrs = draw(st.integers(4, 32))
    ops = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["add", "add", "remove", "match", "match"]))
        if kind == "add":
            k = draw(st.integers(1, 6))
            slots = draw(st.lists(st.integers(0, 20), min_size=k, max_size=k, unique=True))
            conjs = [draw(st.lists(universe_pred(n_attrs), max_size=4)) for _ in slots]
            dup = draw(st.booleans())
            conjs = [c + c[:1] if dup else c for c in conjs]              # duplicate predicates
            ops.append(("add", slots, conjs))
        elif kind == "remove":
            ops.append(("remove", draw(st.integers(0, 2 ** 16))))
        else:
            ops.append(("match", draw(universe_batch(n_attrs))))
    ops.append(("match", draw(universe_batch(n_attrs))))
    return ops, draw(st.booleans())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(counting_scenarios())
def test_counting_matches_brute_force(scenario):
    ops, sparse_counters = scenario
    saved = counting_module._DENSE_COUNTER_LIMIT, counting_module._DENSE_WORK_PER_INCREMENT
    if sparse_counters:
        counting_module._DENSE_WORK_PER_INCREMENT = 0                      # always sort
    else:
        counting_module._DENSE_COUNTER_LIMIT = 7                           # dense, many tiny chunks
        counting_module._DENSE_WORK_PER_INCREMENT = 1 << 40
    try:
        m = CountingMatcher()
        model: dict[int, list[Pred]] = {}
        for op in ops:
            if op[0] == "add":
                _, slots, conjs = op
                fresh = [(s, c) for s, c in zip(slots, conjs) if s not in model]   # reuse freed slots
                if fresh:
                    m.add(np.array([s for s, _ in fresh]), [c for _, c in fresh])
                    model.update(fresh)
            elif op[0] == "remove":
                live = sorted(model)
                chosen = [s for i, s in enumerate(live) if (op[1] >> i) & 1]
                m.remove(np.array(chosen, dtype=np.int64))
                for s in chosen:
                    del model[s]
            else:
                events, table = op[1]
                ev, slot = m.match(table)
                assert ev.dtype == np.int64 and slot.dtype == np.int64
                got = list(zip(ev.tolist(), slot.tolist()))
                assert got == brute_match(model, events)                   # sorted by event, slot
            assert len(m) == len(model)
            distinct = {m.index.pid_of(p) for conj in model.values() for p in conj}
            assert len(m.index) == len(distinct)                           # no leaked references
    finally:
        counting_module._DENSE_COUNTER_LIMIT, counting_module._DENSE_WORK_PER_INCREMENT = saved


def test_counting_edge_cases():
    m = CountingMatcher()
    p = Pred("x", "=", (1,))
    m.add(np.array([4, 0]), [[p, p, Pred("x", "in", (1, 1))], []])
    assert m.index.refcount(m.index.pid_of(p)) == 1                       # deduped per subscription
    ev, slot = m.match({"x": [1, 2]})
    assert list(zip(ev.tolist(), slot.tolist())) == [(0, 0), (0, 4), (1, 0)]
    with pytest.raises(ValueError):
        m.add(np.array([4]), [[p]])                                        # slot in use
    with pytest.raises(ValueError):
        m.add(np.array([1, 1]), [[p], [p]])
    with pytest.raises(KeyError):
        m.remove(np.array([9]))
    with pytest.raises(ValueError):
        m.add(np.array([2]), [[Pred("x", "nope", (1,))]])
    assert len(m) == 2 and len(m.index) == 2                                # failed adds left no trace
    m.remove(np.array([0, 4]))
    assert len(m) == 0 and len(m.index) == 0
    ev, slot = m.match({"x": [1]})
    assert ev.size == 0 and slot.size == 0
    s = m.stats()
    assert s["subscriptions"] == 0 and s["last_match"]["events"] == 1


def test_counting_seeded_large():
    rng = np.random.default_rng(3)
    n_attrs, n_subs = 8, 2000
    attrs = [universe_attr(i) for i in range(n_attrs)]

    def rand_pred():
        a = attrs[rng.integers(n_attrs)]
        op = OPS[rng.integers(len(OPS))]
        pool = [0.0, 1.0, 2.0, 3.0] if a[0] == "n" else STR_VALUES
        def c():
            return pool[rng.integers(len(pool))]

        value = {"between": (c(), c()), "in": (c(), c()), "is_null": (), "is_not_null": ()}.get(op, (c(),))
        return Pred(a, op, value)

    subs = {int(s): [rand_pred() for _ in range(rng.integers(0, 4))]
            for s in rng.choice(10 * n_subs, n_subs, replace=False)}
    m = CountingMatcher()
    m.add(np.array(list(subs)), list(subs.values()))
    cols = {}
    for a in attrs:
        pool = [0.0, 1.0, 2.0, 3.0, None] if a[0] == "n" else STR_VALUES + [None]
        cols[a] = pa.array([pool[i] for i in rng.integers(len(pool), size=300)])
    events = [{a: col[i].as_py() for a, col in cols.items() if col[i].is_valid} for i in range(300)]
    expect = brute_match(subs, events)
    saved = counting_module._DENSE_WORK_PER_INCREMENT
    try:
        for work in (0, 1 << 40):                                            # sorted keys, dense grid
            counting_module._DENSE_WORK_PER_INCREMENT = work
            ev, slot = m.match(pa.table(cols))
            assert list(zip(ev.tolist(), slot.tolist())) == expect
            assert m.stats()["last_match"]["matches"] == ev.size > 0
    finally:
        counting_module._DENSE_WORK_PER_INCREMENT = saved


def test_chunked_dictionary_and_record_batch():
    t1 = pa.table({"s": pa.array(["a", "b", None]).dictionary_encode(), "x": [1, 2, 3]})
    t2 = pa.table({"s": pa.array(["c", "a"]).dictionary_encode(), "x": pa.array([4, None], pa.int64())})
    table = pa.concat_tables([t1, t2])
    assert table.column("s").num_chunks == 2
    preds = [Pred("s", "=", ("a",)), Pred("s", ">", ("a",)), Pred("x", "between", (2, 4)),
             Pred("s", "is_null", ()), Pred("x", "is_null", ()), Pred("x", ">=", (True,))]
    idx = PredicateIndex()
    live = {idx.add(p): p for p in preds}
    events = table.to_pylist()
    events = [{k: v for k, v in e.items() if v is not None} for e in events]
    assert pairs_of(idx.evaluate(table)) == brute_pairs(live, events)
    assert pairs_of(idx.evaluate(table.combine_chunks().to_batches()[0])) == brute_pairs(live, events)
