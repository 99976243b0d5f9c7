"""IdIndex (operators/shared/id_index.py) against a dict, with its real hash and with a weak one that makes
every equal-hash run long (the collision path), and SubscriptionPoints' registry behaviour on top of it."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.range_min.delivery import SubscriptionPoints
from sparksub.operators.shared import id_index
from sparksub.operators.shared.id_index import IdIndex

IDS = st.text(alphabet="abcé", min_size=0, max_size=3)
STEPS = st.lists(st.tuples(st.sampled_from(["add", "add1", "remove", "lookup"]),
                           st.lists(IDS, min_size=1, max_size=12)), max_size=25)


def _run(steps):
    """Drive an IdIndex and a dict model through ``steps``; every lookup must agree."""
    ix, model = IdIndex(), {}
    id_of = np.empty(0, dtype=object)
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
            if next_slot > id_of.size:
                id_of = np.concatenate([id_of, np.empty(next_slot - id_of.size + 8, dtype=object)])
            arr = np.array(new, dtype=object)
            id_of[slots] = arr
            ix.add(arr, np.array(slots), id_of)
            model.update(zip(new, slots))
        elif op == "remove":
            gone = list(dict.fromkeys(i for i in ids if i in model))
            if not gone:
                continue
            slots = np.array([model.pop(i) for i in gone])
            ix.remove(slots, id_of)
            id_of[slots] = None
            free.extend(slots.tolist())
        probe = np.array(ids + list(model)[:5], dtype=object)
        assert ix.lookup(probe, id_of).tolist() == [model.get(i, -1) for i in probe.tolist()]
        assert len(ix) == len(model)
        assert sorted(ix.slots().tolist()) == sorted(model.values())


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_matches_a_dict(steps):
    _run(steps)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_matches_a_dict_when_hashes_collide(steps, monkeypatch_module):
    _run(steps)


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
