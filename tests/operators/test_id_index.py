"""IdIndex (operators/shared/id_index.py) against a dict, with its real hash and with a weak one that makes
every equal-hash run long (the collision path), over both kinds of slot -> id column (the packed IdColumn the
registries use, a plain object array), and SubscriptionPoints' registry behaviour on top of it."""
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.range_min.delivery import SubscriptionPoints
from sparksub.operators.shared import id_column, id_index
from sparksub.operators.shared.id_column import IdColumn
from sparksub.operators.shared.id_index import IdIndex

IDS = st.text(alphabet="abcé", min_size=0, max_size=3)
STEPS = st.lists(st.tuples(st.sampled_from(["add", "add1", "remove", "lookup"]),
                           st.lists(IDS, min_size=1, max_size=12)), max_size=25)


class _Objects:
    """The object-array column, behind IdColumn's writing calls."""

    def __init__(self):
        self.a = np.empty(0, dtype=object)

    def grow(self, n):
        if n > self.a.size:
            self.a = np.concatenate([self.a, np.empty(n - self.a.size, dtype=object)])

    def set(self, slots, ids):
        self.a[slots] = ids

    def remove(self, slots):
        self.a[slots] = None


def _run(steps, packed=True):
    """Drive an IdIndex and a dict model through ``steps``; every lookup must agree."""
    with pytest.MonkeyPatch.context() as mp:
        if packed == "vectorised":   # the column's vectorised comparison from one candidate on
            mp.setattr(id_column, "_SMALL", 0)
        _steps(steps, bool(packed))


def _steps(steps, packed):
    ix, model = IdIndex(), {}
    col = IdColumn() if packed else _Objects()
    free, next_slot = [], 0
    for op, ids in steps:
        if op in ("add", "add1"):
            new = list(dict.fromkeys(i for i in ids if i not in model))
            if op == "add1":
                new = new[:1]
            if not new:
                continue
            slots = []
            for _ in new:
                if free:
                    slots.append(free.pop())
                else:
                    slots.append(next_slot)
                    next_slot += 1
            col.grow(next_slot + 8)
            arr = np.array(new, dtype=object)
            col.set(np.array(slots), arr)
            ix.add(arr, np.array(slots), col if packed else col.a)
            model.update(zip(new, slots))
        elif op == "remove":
            gone = list(dict.fromkeys(i for i in ids if i in model))
            if not gone:
                continue
            slots = np.array([model.pop(i) for i in gone])
            ix.remove(slots, col if packed else col.a)
            col.remove(slots)
            free.extend(slots.tolist())
        id_of = col if packed else col.a
        probe = np.array(ids + list(model)[:5], dtype=object)
        assert ix.lookup(probe, id_of).tolist() == [model.get(i, -1) for i in probe.tolist()]
        assert len(ix) == len(model)
        assert sorted(ix.slots().tolist()) == sorted(model.values())


@settings(max_examples=60, deadline=None)
@given(STEPS, st.sampled_from([False, True, "vectorised"]))
def test_matches_a_dict(steps, packed):
    _run(steps, packed)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, packed=st.sampled_from([False, True, "vectorised"]))
def test_matches_a_dict_when_hashes_collide(steps, packed, monkeypatch_module):
    _run(steps, packed)


@pytest.fixture(scope="module")
def monkeypatch_module():
    # three hash values for every id: every run of equal hashes is long, lookups and removals walk it
    mp = pytest.MonkeyPatch()
    mp.setattr(id_index, "id_hashes",
               lambda ids: np.array([len(i) % 3 if isinstance(i, str) else 0 for i in ids], dtype=np.uint64))
    yield mp
    mp.undo()


def test_many_single_inserts_merge_and_stay_correct():
    """Single inserts past the recent dict's limit are merged into the sorted arrays (amortised)."""
    ix, n = IdIndex(), 5000
    id_of = np.array([f"s{i}" for i in range(n)], dtype=object)
    for i in range(n):
        ix.add(id_of[i:i + 1], np.array([i]), id_of)
    assert len(ix._recent) < 1100 and len(ix) == n
    assert ix.lookup(id_of[::7], id_of).tolist() == list(range(0, n, 7))


def test_subscription_points_keeps_its_contract():
    sp = SubscriptionPoints()
    sp.add([f"q{i}" for i in range(100)], np.arange(100.0), np.arange(100.0) + 5)
    with pytest.raises(DuplicateSubscription, match="'q7'"):
        sp.add(["new", "q7"], [0.0, 0.0], [1.0, 1.0])
    assert len(sp) == 100 and "new" not in sp          # nothing registered by the failed batch
    sp.remove(["q3", "q50"])
    with pytest.raises(UnknownSubscription, match="'q3'"):
        sp.remove(["q3"])
    assert sp.bounds("q4") == (4.0, 9.0) and "q3" not in sp and 3 not in sp
    assert sorted(sp) == sorted(f"q{i}" for i in range(100) if i not in (3, 50))
    # the point index is built on first use, from the live subscriptions only
    assert sorted(sp.index.query(-np.inf, True, 4.0, True, 4.0, True, np.inf, True).tolist()) == [0, 1, 2, 4]
    # a freed slot takes a new id of another length; the ids read back as before, as objects and as Arrow
    slots = sp.add(["a much longer id than before", "é"], [1.0, 2.0], [2.0, 3.0])
    assert sorted(slots.tolist()) == [3, 50]
    assert sp.ids_of(slots).tolist() == ["a much longer id than before", "é"]
    assert sp.id_array(np.array([0, *slots.tolist()])).to_pylist() == ["q0", "a much longer id than before", "é"]
    assert sp.ids_of(np.array([4])).dtype == object and isinstance(sp.ids_of(np.array([4]))[0], str)


def test_subscription_points_pickles_and_reads_an_old_object_column():
    sp = SubscriptionPoints()
    sp.add(["x", "y", "z"], [0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    sp.remove(["y"])
    copy = pickle.loads(pickle.dumps(sp))
    assert sorted(copy) == ["x", "z"] and copy.slot("z") == 2 and "y" not in copy
    # a base file pickled when the registry kept its ids as an object array
    state = dict(sp.__dict__)
    state["_id_of"] = np.array(["x", None, "z", None], dtype=object)
    old = SubscriptionPoints.__new__(SubscriptionPoints)
    old.__setstate__(state)
    assert sorted(old) == ["x", "z"] and old.slot("x") == 0 and isinstance(old._id_of, IdColumn)
