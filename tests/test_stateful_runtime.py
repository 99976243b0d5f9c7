"""The one stream runtime (``runtime/stateful.py``): the contract every stream kind implements, the one
processor, the worker cache and the partition lifecycle, without a Spark session (look-alike handles)."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pytest

from sparksub.runtime import (
    event_stream,
    join_stream,
    stateful,
    stream,
    stream_join_stream,
)


class _Handle:
    """A ``StatefulProcessorHandle`` look-alike that records what a processor declares."""

    def __init__(self):
        self.declared = []

    def getValueState(self, name, schema):
        self.declared.append((name, "value", schema, None))
        return _value_state()

    def getListState(self, name, schema):
        self.declared.append((name, "list", schema, None))
        return ("list", name)

    def getMapState(self, name, key_schema, schema):
        self.declared.append((name, "map", schema, key_schema))
        return ("map", name)


def _value_state():
    """A ValueState look-alike (exists / get / update) over one cell."""
    cell = []
    return SimpleNamespace(exists=lambda: bool(cell), get=lambda: cell[-1], update=lambda v: cell.append(tuple(v)))


def _declared(logic, spec):
    handle = _Handle()
    processor = stateful.processor_class()(logic, spec)
    processor.init(handle)
    return handle.declared, processor.state


def test_each_kind_declares_the_state_it_always_had():
    """The state variables (names, kinds, schemas, order) are the checkpoints' layout: unchanged by the move."""
    range_spec = stream.StreamSpec("u", "s", "t", "bigint", "unicast", None, {}, "g", True)
    declared, state = _declared(stream.RANGE_GROUPS, range_spec)
    log = "batch long, key bigint, x double, y double, t string, x2 double, op int, seq long"
    assert declared == ([("rows", "map", "x double, y double, t string, x2 double", "key bigint"),
                         ("meta", "value", "applied long, rebuilds long", None)]
                        + [(f"log{i}", "list", log, None) for i in range(stream.LOG_SLOTS)]
                        + [("subs", "value", "stream string, version long", None)])
    assert isinstance(state, stream.GroupState) and state.log == [("list", f"log{i}") for i in range(4)]

    join_spec = join_stream.JoinStreamSpec("u", "s", "t", (), (), "k", "string", "unicast", None, {}, "g", True)
    declared, state = _declared(join_stream.JOIN_PARTITIONS, join_spec)
    assert [(n, k, s, ks) for n, k, s, ks in declared] == [
        ("rows", "map", "row binary", "key string"), ("meta", "value", "applied long, rebuilds long", None),
        ("subs", "value", "stream string, version long", None)]
    assert isinstance(state, join_stream.JoinStreamState) and state.rows == ("map", "rows")

    declared, state = _declared(stream_join_stream.STREAM_JOIN_GROUPS, None)
    assert [d[0] for d in declared] == ["core", "meta", "subs"] and declared[0][2] == "state binary"
    assert isinstance(state, stream_join_stream.StreamJoinState)

    declared, state = _declared(event_stream.EventQueryLogic(True), None)
    assert declared == [("nfa", "value", "fingerprint string, applied long, tick long, snapshot binary", None)]
    assert isinstance(state, SimpleNamespace)

    declared, state = _declared(stream.KEY_PRESENCE, None)
    assert declared == [("present", "value", "present boolean", None)]
    assert isinstance(state, stream.KeyState) and state.keys is None


class _Echo(stateful.StreamLogic):
    """A toy kind: counts a partition's rows in a ValueState and echoes them with the count so far."""

    def state_variables(self, spec):
        return {"seen": stateful.value_state("n long")}

    def state(self, handles):
        return handles["seen"]

    def apply(self, spec, key, pdf, state):
        n = (state.get()[0] if state.exists() else 0) + len(pdf)
        state.update((n,))
        return pdf.assign(key=key, seen=n, tag=spec)


def test_the_processor_concatenates_a_partitions_frames_and_skips_empty_ones():
    processor = stateful.processor_class()(_Echo(), "spec")
    processor.init(_Handle())
    frames = [pd.DataFrame({"v": [1, 2]}), pd.DataFrame({"v": []}), pd.DataFrame({"v": [3]})]
    out = list(processor.handleInputRows(("k",), iter(frames), None))
    assert len(out) == 1 and out[0]["v"].tolist() == [1, 2, 3] and out[0]["seen"].tolist() == [3] * 3
    assert out[0]["tag"].tolist() == ["spec"] * 3 and out[0]["key"].tolist() == ["k"] * 3
    assert list(processor.handleInputRows(("k",), iter([pd.DataFrame({"v": []})]), None)) == []


def test_the_processor_runs_under_pysparks_tester():
    from pyspark.sql.streaming.tws_tester import TwsTester

    tester = TwsTester(stateful.processor_class()(_Echo(), "s"))
    assert tester.testInPandas("a", pd.DataFrame({"v": [1, 2]}))["seen"].tolist() == [2, 2]
    assert tester.testInPandas("b", pd.DataFrame({"v": [5]}))["seen"].tolist() == [1]
    assert tester.testInPandas("a", pd.DataFrame({"v": [3]}))["seen"].tolist() == [3]
    assert tester.peekValueState("seen", "a") == (3,)


def test_the_cache_serves_only_the_run_that_left_an_entry(monkeypatch):
    table: dict = {}
    cache = stateful.StreamCache(2, lambda: table)
    run = ["q", "r1"]
    monkeypatch.setattr(stateful, "query_run", lambda: tuple(run))
    cache.keep("p", 3, "op")
    assert table == {"p": ("q", "r1", 3, "op")}
    assert cache.take("p") == (3, "op") and "p" not in table       # taken out while the micro-batch runs
    cache.keep("p", 4, "op")
    run[1] = "r2"                                                    # a restart: the state store may differ
    assert cache.take("p") is None and table == {}
    for ident in ("a", "b", "c"):                                    # at most 2, the least recently used out
        cache.keep(ident, 1, ident)
    assert list(table) == ["b", "c"]
    built = []
    assert cache.shared("x", lambda: built.append(1) or "exec") == "exec"
    assert cache.shared("x", lambda: built.append(1) or "other") == "exec" and built == [1]
    assert list(table) == ["c", "x"]


def test_the_cache_reads_the_kinds_table_at_every_use():
    """Tests swap a kind's ``_CACHE`` to play several workers: the cache must follow the module's name."""
    saved = stream._CACHE
    try:
        stream._CACHE = {}
        stream._WORKER.keep("p", 1, "op")
        assert list(stream._CACHE) == ["p"] and "p" not in saved
    finally:
        stream._CACHE = saved


def test_the_partition_lifecycle(monkeypatch):
    monkeypatch.setattr(stateful, "query_run", lambda: ("q", "r"))
    table: dict = {}
    cache = stateful.StreamCache(4, lambda: table)
    meta = _value_state()
    assert stateful.open_partition(meta, cache, "p") is None         # no state: the kind seeds
    stateful.close_partition(meta, cache, "p", 0, 0, "op")
    assert meta.get() == (1, 0)
    part = stateful.open_partition(meta, cache, "p")
    assert (part.applied, part.rebuilds, part.cached) == (1, 0, (1, "op"))
    assert stateful.open_partition(meta, cache, "p").cached is None  # taken: another worker has none


def test_note_subscriptions():
    subs = _value_state()
    assert stateful.note_subscriptions(None, "s", 3) == 0
    assert stateful.note_subscriptions(subs, "s", 0) == 0 and subs.get() == ("s", 0)   # the first: no change
    assert stateful.note_subscriptions(subs, "s", 0) == 0
    assert stateful.note_subscriptions(subs, "s", 2) == 1 and subs.get() == ("s", 2)
    assert stateful.note_subscriptions(subs, "t", 2) == 0                               # another stream


def test_output_table():
    schema = pa.schema([("subscription_id", pa.string()), ("op", pa.string()), ("seq", pa.int64()),
                        ("group_id", pa.string()), ("reason", pa.string())])
    notes = pa.table({"op": ["insert", "insert"], "seq": pa.array([5, 1], pa.int32()), "subscription_id": ["a", "b"]})
    assert stateful.output_table(schema, None).num_rows == 0
    out = stateful.output_table(schema, notes, [3], ["bad"], by_seq=True)
    assert out.schema == schema and out.column("seq").to_pylist() == [1, 3, 5]
    assert out.column("op").to_pylist() == ["insert", "rejected", "insert"]
    out = stateful.output_table(schema, notes, [3], ["bad"], group_id="g#0")
    assert out.column("seq").to_pylist() == [5, 1, 3] and out.column("group_id").to_pylist() == [None, None, "g#0"]


def test_output_ddl():
    schema = pa.schema([("a", pa.string()), ("b", pa.float64()), ("c", pa.int64()), ("d", pa.timestamp("us"))])
    assert stateful.output_ddl(schema) == "`a` string, `b` double, `c` bigint, `d` timestamp"
    with pytest.raises(TypeError):
        stateful.output_ddl(pa.schema([("x", pa.list_(pa.int64()))]))
