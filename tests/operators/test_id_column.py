"""IdColumn (operators/shared/id_column.py) against a plain Python list: random appends, rewrites of freed
slots, removals, reads and equality checks, with unicode, empty, duplicate and surrogate ids; compaction of
the dead bytes and pickling keep every slot's id."""
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparksub.operators.shared import id_column
from sparksub.operators.shared.id_column import IdColumn

# short ids from a small alphabet (so probes hit, and duplicates and equal lengths with other bytes are common),
# multi-byte characters, the empty string, and now and then a lone surrogate (no UTF-8 form)
IDS = st.one_of(st.text(alphabet="ab\u00e9\u4e2d\U0001f600", max_size=4), st.just(""),
                st.sampled_from(["\ud800", "a\udfff"]), st.text(max_size=20))
OPS = st.lists(st.tuples(st.sampled_from(["append", "set", "remove", "equals", "read"]),
                         st.lists(IDS, max_size=10), st.lists(st.integers(0, 10_000), max_size=10)),
               max_size=30)


def _check(col: IdColumn, model: list) -> None:
    assert len(col) == len(model)
    assert col.tolist() == model
    for s in range(len(model)):
        assert col[s] == model[s]
    if col.plain:
        assert col.take(np.arange(len(model))).to_pylist() == model


@settings(max_examples=200, deadline=None)
@given(OPS, st.booleans())
def test_matches_a_list(ops, tiny_buffers):
    if tiny_buffers:   # vectorise from one id on, compact and chunk the gathers at a few bytes: every path
        mp = pytest.MonkeyPatch()   # runs on small inputs
        mp.setattr(id_column, "_SMALL", 0)
        mp.setattr(id_column, "_DEAD_FLOOR", 4)
        mp.setattr(id_column, "_GATHER_BYTES", 3)
    try:
        col, model = IdColumn(), []
        for op, ids, picks in ops:
            slots = [p % len(model) for p in picks] if model else []
            if op == "append":
                assert col.append(ids).tolist() == list(range(len(model), len(model) + len(ids)))
                model += ids
            elif op == "set" and slots:
                slots = list(dict.fromkeys(slots))            # distinct slots, as the registries write
                new = (ids * len(slots))[: len(slots)] if ids else [""] * len(slots)
                col.set(np.array(slots), np.array(new, dtype=object))
                for s, x in zip(slots, new):
                    model[s] = x
            elif op == "remove" and slots:
                col.remove(slots)
                for s in slots:
                    model[s] = None
            elif op == "equals" and slots:
                probe = [(ids[i % len(ids)] if ids and i % 2 else model[s]) for i, s in enumerate(slots)]
                got = col.equals(np.array(slots), np.array(probe, dtype=object))
                assert got.tolist() == [model[s] is not None and model[s] == x for s, x in zip(slots, probe)]
            elif op == "read" and slots:
                assert col[np.array(slots)].tolist() == [model[s] for s in slots]
            _check(col, model)
        copy = pickle.loads(pickle.dumps(col))
        _check(copy, model)
        copy.append(["after"])
        _check(copy, model + ["after"])
    finally:
        if tiny_buffers:
            mp.undo()


@pytest.mark.parametrize("small", [0, 16])
def test_equals_takes_non_strings_and_free_slots(small, monkeypatch):
    monkeypatch.setattr(id_column, "_SMALL", small)
    col = IdColumn()
    col.append(["5", "", "x"])
    col.remove([2])
    got = col.equals(np.array([0, 1, 2, 0]), np.array([5, "", None, "5"], dtype=object))
    assert got.tolist() == [False, True, False, True]


def test_rejects_non_strings_and_grows():
    col = IdColumn(2)
    assert col.tolist() == [None, None]
    with pytest.raises(TypeError, match="strings"):
        col.set([0], [7])
    col.grow(4)
    col.set([3], ["d"])
    assert col.tolist() == [None, None, None, "d"]


def test_packed_size_of_a_million_ids():
    """The point of the module: a million short ids cost their bytes and 12 bytes a slot, not ~59 MB."""
    ids = np.char.add("q", np.arange(1_000_000).astype(str))
    col = IdColumn()
    col.append(ids)
    assert col.nbytes < 20_000_000
    assert col[999_999] == "q999999"
    assert col.equals(np.array([0, 999_999]), np.array(["q0", "q999998"], dtype=object)).tolist() == [True, False]


def test_dead_bytes_are_reclaimed():
    col = IdColumn()
    col.append([f"id-{i:06d}" for i in range(100_000)])
    for _ in range(5):   # every slot rewritten five times: the buffer does not grow fivefold
        col.set(np.arange(100_000), [f"ID-{i:06d}" for i in range(100_000)])
    assert col._data.size <= 4 * 100_000 * 9
    assert col[12345] == "ID-012345"
