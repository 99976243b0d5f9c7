"""``RowStore`` (the engine's rows off the heap, issue 16 item 3) against a dict -- what the engine kept before:
the same rows, in the same order, through batches of upserts and deletes (repeated keys, deletes of absent
keys, NULLs, NaN and infinities), with and without a base file, across compactions."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub import row_store
from sparksub.row_store import RowStore, rows_table


def _tdef(key_type: str):
    return SimpleNamespace(key="k", columns=[("k", key_type), ("x", "double"), ("s", "string")],
                           column_names=["k", "x", "s"])


def _same(a, b) -> bool:
    """Rows equal, NaN equal to NaN (repr keeps the value and the type)."""
    return repr(a) == repr(b)


values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1.5]))
text = st.one_of(st.none(), st.text(max_size=3))
ops = st.lists(st.tuples(st.integers(0, 11), values, text, st.booleans()), max_size=30)


def _batch(key_type, rows):
    key = (lambda i: f"k{i}") if key_type == "string" else (lambda i: i * 7 - 20)
    return pa.table({"k": pa.array([key(i) for i, *_ in rows], "string" if key_type == "string" else "int64"),
                     "x": pa.array([x for _, x, _, _ in rows], pa.float64()),
                     "s": pa.array([s for _, _, s, _ in rows], pa.string()),
                     "op": pa.array([1 if d else 0 for *_, d in rows], pa.int8())})


def _oracle_apply(oracle: dict, batch: pa.Table) -> None:
    for k, x, s, op in zip(*(batch.column(c).to_pylist() for c in ("k", "x", "s", "op"))):
        if op == 1:
            oracle.pop(k, None)
        else:
            oracle[k] = (k, x, s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key_type=st.sampled_from(["string", "bigint"]), batches=st.lists(ops, max_size=8), on_disk=st.booleans(),
       probe=st.lists(st.integers(-3, 14), max_size=10))
def test_the_store_holds_what_a_dict_holds_in_the_dicts_order(tmp_path_factory, monkeypatch, key_type, batches,
                                                               on_disk, probe):
    monkeypatch.setattr(row_store, "COMPACT_MIN", 3)   # compact often: every path through a new base (a constant:
    # the same for every example, so the fixture's not being reset between examples changes nothing)
    tdef = _tdef(key_type)
    store = RowStore(tdef, tmp_path_factory.mktemp("rows") if on_disk else None)
    oracle: dict = {}
    for rows in batches:
        batch = _batch(key_type, rows)
        store.apply(batch)
        _oracle_apply(oracle, batch)
        assert len(store) == len(oracle)
        assert _same(list(store.items()), list(oracle.items()))
    keys = _batch(key_type, [(i, None, None, False) for i in probe]).column("k").to_pylist() + ["absent", None]
    assert _same(store.get_many(keys), [oracle.get(k) for k in keys])
    assert store.contains_many(keys).tolist() == [k in oracle for k in keys]
    assert [k in store for k in keys] == [k in oracle for k in keys]
    assert _same(rows_table(tdef, store).to_pylist(), rows_table(tdef, oracle).to_pylist())


def test_single_key_changes_and_a_reopened_base(tmp_path):
    tdef = _tdef("string")
    base = pa.table({"k": ["a", "b", "c"], "x": [1.0, math.inf, None], "s": ["p", None, "r"]})
    store = RowStore(tdef, tmp_path, rows=base)
    assert list(tmp_path.iterdir())            # the base is a file
    oracle = dict(zip(["a", "b", "c"], base.to_pylist() and [tuple(r.values()) for r in base.to_pylist()]))
    store["b"] = ("b", 2.0, "q")
    oracle["b"] = ("b", 2.0, "q")
    del store["a"]
    del oracle["a"]
    store["a"] = ("a", -1.0, None)             # deleted from the base, added again: last, as in a dict
    oracle["a"] = ("a", -1.0, None)
    assert store.pop("zz", None) is None and store.get("zz") is None
    assert _same(list(store.items()), list(oracle.items())) and list(store) == list(oracle)
    store._compact()
    assert len(list(tmp_path.iterdir())) == 1  # the superseded base file is gone
    assert _same(list(store.items()), list(oracle.items()))
    assert _same(dict(store.items()), oracle) and set(store) == set(oracle)


def test_colliding_hashes_are_told_apart(monkeypatch):
    # every key hashes alike: each lookup walks the equal-hash run and compares the keys themselves
    monkeypatch.setattr(row_store, "_hashes", lambda keys: np.zeros(len(keys), dtype=np.uint64))
    tdef = _tdef("string")
    store = RowStore(tdef, rows=pa.table({"k": ["a", "b", "c"], "x": [1.0, 2.0, 3.0], "s": ["p", "q", "r"]}))
    assert store.get_many(["c", "a", "d"]) == [("c", 3.0, "r"), ("a", 1.0, "p"), None]
    assert "b" in store and "d" not in store
