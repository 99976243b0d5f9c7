"""The one Spark stateful runtime for streams (issue 16 item 2): every kind of stream -- range groups
(``stream``), the keys of a FILTER-only keyed table (``stream.known_key_updates``), stream-static join
partitions (``join_stream``), stream-stream join groups (``stream_join_stream``) and event-query replicas
(``event_stream``) -- runs through one ``StatefulProcessor``, one worker cache and one partition lifecycle.

**The contract** (:class:`StreamLogic`, pure Python, in the spirit of pyspark's ``StatefulProcessor`` and of
bytewax's one contract for many operators): a kind says which state variables a partition keeps
(``state_variables(spec)``: name -> :class:`StateVariable`, a ``value`` / ``map`` / ``list`` and its schema
DDL), how its state object is made of their handles (``state(handles)``: the kind's dataclass --
``GroupState``, ``JoinStreamState``, ... -- so that tests can hand look-alike handles to ``apply`` directly)
and what one micro-batch of one partition does (``apply(spec, key, pdf, state)`` -> the output rows).

**The processor** (:func:`processor_class`): declares the kind's variables in ``init``, concatenates the
micro-batch's frames of a partition and calls ``apply``; :func:`run` is the one entry point
(``transformWithStateInPandas``, the UDF named for EXPLAIN).

**The worker cache** (:class:`StreamCache`): a Python worker keeps the operators it built (an index, a join
partition, a stream-join group, an event class's executor) across micro-batches, least recently used first
out.  An entry is usable only by the streaming query *run* that left it (``spark.jobGroup.id`` is the run id:
after a restart the state store may be behind what the worker holds) and says how many micro-batches of its
partition it reflects (``applied``), which each kind compares with the state's own counter.

**The partition lifecycle** (:func:`open_partition` / :func:`close_partition`) of the kinds that keep the
``meta`` counters: no state yet -> the kind seeds the partition; otherwise the state's ``(applied, rebuilds)``
and the worker's cached entry, from which the kind decides between a cache hit, catching up and a rebuild;
after the micro-batch the counters move on and the operator goes back into the cache.

Why the processor cannot be the one ``publish`` runs (``docs/architecture.md``, "One stream runtime"): a
stream's truth is Spark's state store, versioned per micro-batch, so that a replayed micro-batch sees the
state as of before it; a ``publish`` task's truth is the replica files the driver writes.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from sparksub.operators.shared import row_validation

__all__ = ["LIST", "MAP", "META", "SUBS", "VALUE", "Partition", "StateVariable", "StreamCache", "StreamKind",
           "StreamLogic",
           "close_partition", "list_state", "map_state", "note_subscriptions", "open_partition", "output_ddl",
           "output_table", "processor_class", "query_run", "run", "value_state"]

VALUE, MAP, LIST = "value", "map", "list"


@dataclass(frozen=True)
class StateVariable:
    """One state variable of a partition: its kind (``VALUE``, ``MAP``, ``LIST``), the DDL of its values and,
    for a map, of its keys."""
    kind: str
    schema: str
    key_schema: str | None = None

    def open(self, handle, name: str):
        """The variable's handle in a processor's ``init`` (``StatefulProcessorHandle``)."""
        if self.kind == VALUE:
            return handle.getValueState(name, self.schema)
        if self.kind == LIST:
            return handle.getListState(name, self.schema)
        if self.kind == MAP:
            return handle.getMapState(name, self.key_schema, self.schema)
        raise ValueError(f"state variable {name!r}: unknown kind {self.kind!r}")


def value_state(schema: str) -> StateVariable:
    return StateVariable(VALUE, schema)


def list_state(schema: str) -> StateVariable:
    return StateVariable(LIST, schema)


def map_state(key_schema: str, schema: str) -> StateVariable:
    return StateVariable(MAP, schema, key_schema)


#: ``(applied, rebuilds)``: micro-batches applied to the partition, and how often its operator was rebuilt
#: from the state store (the kinds that cache an operator per partition keep it)
META = value_state("applied long, rebuilds long")
#: ``(stream id, change version)``: the subscriptions the partition's last micro-batch applied (``stream_control``)
SUBS = value_state("stream string, version long")


class StreamLogic(ABC):
    """What one kind of stream is to the runtime (module docstring).  Pure Python: no pyspark."""

    @abstractmethod
    def state_variables(self, spec) -> Mapping[str, StateVariable]:
        """The state a partition keeps, by name, in the order it is declared."""

    @abstractmethod
    def state(self, handles: Mapping[str, object]):
        """The state object ``apply`` takes, made of the declared variables' handles (by name)."""

    @abstractmethod
    def apply(self, spec, key, pdf: pd.DataFrame, state) -> pd.DataFrame:
        """One micro-batch of one partition (``key``: the grouping key; ``pdf``: its rows, never empty)."""


@dataclass(frozen=True)
class StreamKind(StreamLogic):
    """A kind given by its parts, for one whose state dataclass takes the declared variables as its fields:
    ``variables(spec)`` (``state_variables``), ``state_type`` and ``step`` (its ``apply_*_micro_batch``).
    Module-level functions and classes, so that the processor pickles them by name."""
    variables: Callable[[object], Mapping[str, StateVariable]]
    state_type: type
    step: Callable[..., pd.DataFrame]

    def state_variables(self, spec) -> Mapping[str, StateVariable]:
        return self.variables(spec)

    def state(self, handles: Mapping[str, object]):
        return self.state_type(**handles)

    def apply(self, spec, key, pdf: pd.DataFrame, state) -> pd.DataFrame:
        return self.step(spec, key, pdf, state)


def processor_class():
    """The ``StatefulProcessor`` every stream runs, constructed as ``(logic, spec)``.  Built on call so that
    importing this module does not import pyspark (the pure layers' tests import the stream modules)."""
    from pyspark.sql.streaming import StatefulProcessor

    class StreamProcessor(StatefulProcessor):
        """One partition's rows of one micro-batch -> ``logic.apply``'s output; its state in the state store."""

        def __init__(self, logic: StreamLogic, spec):
            self.logic, self.spec = logic, spec

        def init(self, handle) -> None:
            variables = self.logic.state_variables(self.spec)
            self.state = self.logic.state({name: v.open(handle, name) for name, v in variables.items()})

        def handleInputRows(self, key, rows, timerValues):
            frames = [pdf for pdf in rows if len(pdf)]
            if frames:
                pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
                yield self.logic.apply(self.spec, key[0], pdf, self.state)

        def close(self) -> None:
            pass

    return StreamProcessor


_NAME_LOCK = threading.Lock()


def run(grouped, logic: StreamLogic, spec, out_ddl, name: str):
    """``grouped.transformWithStateInPandas`` with the one processor running ``logic`` over ``spec``, the
    Python function named ``name`` in EXPLAIN (``out_ddl``: the output schema, a DDL string or StructType).

    PySpark names the UDF after ``TransformWithStateInPandasUdfUtils.transformWithStateUDF`` and offers
    no parameter for it; the name is read once, when the UDF is built, so it is swapped for that call.
    """
    from pyspark.sql.streaming import stateful_processor_util as spu

    processor = processor_class()(logic, spec)
    fn = getattr(spu.TransformWithStateInPandasUdfUtils, "transformWithStateUDF", None)
    with _NAME_LOCK:
        old = getattr(fn, "__name__", None)
        try:
            if fn is not None:
                fn.__name__ = name
            return grouped.transformWithStateInPandas(statefulProcessor=processor, outputStructType=out_ddl,
                                                      outputMode="Append", timeMode="None")
        finally:
            if fn is not None and old is not None:
                fn.__name__ = old


def query_run() -> tuple:
    """(query id, run id) of the streaming query running this task, (None, None) outside one."""
    from pyspark import TaskContext
    tc = TaskContext.get()
    if tc is None:
        return None, None
    return tc.getLocalProperty("sql.streaming.queryId"), tc.getLocalProperty("spark.jobGroup.id")


class StreamCache:
    """A Python worker's operators of one stream kind, at most ``entries``, the least recently used out first.

    ``table`` returns the dict the entries live in, read at every use: each kind keeps it as its module's
    ``_CACHE``, which tests swap to play several workers (or a fresh one) against one state store."""

    def __init__(self, entries: int, table: Callable[[], dict]):
        self.entries, self._table = entries, table

    def take(self, ident) -> tuple | None:
        """Removes ``ident``'s entry: ``(applied, value)`` when this streaming query run left it (``keep``),
        else None -- an entry of another run (a restart) may be ahead of the state store or behind it."""
        got = self._table().pop(ident, None)
        if got is None or got[:2] != query_run():
            return None
        return got[2], got[3]

    def keep(self, ident, applied: int, value) -> None:
        """``value`` (the kind's own entry) as of ``applied`` micro-batches, for this run's next micro-batch."""
        self._put(ident, query_run() + (applied, value))

    def shared(self, key, build: Callable[[], object]):
        """The worker's ``key`` entry for any run (made by ``build`` when missing): what holds no partition's
        state, e.g. an event class's compiled executor, whose holder the kind checks itself."""
        got = self._table().pop(key, None)
        if got is None:
            got = build()
        self._put(key, got)
        return got

    def _put(self, key, entry) -> None:
        table = self._table()
        table.pop(key, None)
        table[key] = entry
        while len(table) > self.entries:   # oldest first: a stopped stream's entries go eventually
            table.pop(next(iter(table)))


@dataclass
class Partition:
    """A partition's state store counters at the start of a micro-batch, and what the worker cached of it."""
    applied: int
    rebuilds: int
    cached: tuple | None   # (applied, the kind's entry) from ``StreamCache.take``, or None


def open_partition(meta, cache: StreamCache, ident) -> Partition | None:
    """The partition as the state store (``meta``: ``META``) and the worker's cache hold it; None when it has no
    state yet (its first micro-batch: the kind seeds it; the cache is not consulted)."""
    if not meta.exists():
        return None
    applied, rebuilds = (int(v) for v in meta.get())
    return Partition(applied, rebuilds, cache.take(ident))


def close_partition(meta, cache: StreamCache, ident, applied: int, rebuilds: int, value) -> None:
    """After micro-batch ``applied`` (counted from 0): the counters move on and the operator, as ``value``,
    goes back into the worker's cache for the next micro-batch."""
    meta.update((applied + 1, rebuilds))
    cache.keep(ident, applied + 1, value)


def note_subscriptions(subs_state, stream_id: str, version: int) -> int:
    """Keep in the state (``SUBS``) which subscriptions the micro-batch applied; 1 when they differ from the
    previous micro-batch's of the same stream (a change applied)."""
    if subs_state is None:
        return 0
    was = tuple(subs_state.get()) if subs_state.exists() else None
    if was == (stream_id, version):
        return 0
    subs_state.update((stream_id, version))
    return int(was is not None and was[0] == stream_id)


def output_table(schema: pa.Schema, notes, rej_seq=(), rej_reason=(), group_id: str | None = None,
                 by_seq: bool = False) -> pa.Table:
    """A partition's output in ``schema``: its notifications (the groups of one stream may differ in columns --
    MIN messages vs top-k items --: nulls fill in), then its rejected rows (``op = 'rejected'``, ``seq``,
    ``reason``; ``group_id`` given or null: the row belongs to no group); ``by_seq``: both in seq order."""
    parts = []
    if notes is not None and notes.num_rows:
        parts.append(pa.table({f.name: notes.column(f.name).cast(f.type) if f.name in notes.column_names
                               else pa.nulls(notes.num_rows, f.type) for f in schema}, schema=schema))
    if len(rej_seq):
        m = len(rej_seq)
        cols = {f.name: pa.nulls(m, f.type) for f in schema}
        cols.update(op=pa.array([row_validation.REJECTED] * m, pa.string()), seq=pa.array(rej_seq, pa.int64()),
                    reason=pa.array(rej_reason, pa.string()))
        if group_id is not None:
            cols["group_id"] = pa.array([group_id] * m, pa.string())
        parts.append(pa.table(cols, schema=schema))
    if not parts:
        return schema.empty_table()
    out = pa.concat_tables(parts)
    return out.sort_by([("seq", "ascending")]) if by_seq and len(parts) > 1 else out


_DDL = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int8(): "tinyint",
        pa.int32(): "int", pa.bool_(): "boolean", pa.date32(): "date"}


def output_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an output schema (``run``'s ``out_ddl``)."""
    return ", ".join(f"`{f.name}` {_ddl(f.type)}" for f in schema)


def _ddl(t: pa.DataType) -> str:
    if t in _DDL:
        return _DDL[t]
    if pa.types.is_timestamp(t):
        return "timestamp"
    raise TypeError(f"stream: no Spark type for the output column type {t}")
