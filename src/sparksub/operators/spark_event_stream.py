"""Thin Spark wrapper: event queries (Cayuga, ``operators/nfa``) over Structured Streaming, with the NFA's
instances in Spark's state store, so that a restart from the checkpoint neither loses nor repeats a match
(issue 6 item 5, DESIGN §6).  The plan (names as Spark's EXPLAIN prints them)::

    TransformWithStateInPySpark event_query_nfa_stream(...)     one state partition per partition id
    +- Exchange hashpartitioning(ev_part), REQUIRED_BY_STATEFUL_OPERATOR
       +- MapInArrow event_query_nfa_stream_route(...)          each event to its partition of every group
          +- <the stream's events: its columns plus integer t0, t1>

**Partitions.**  The queries are split into groups (``_plan``): the queries whose ``nfa.partition_key`` is
the partition key run in ``partitions`` partitions, an event going to ``crc32(key value) % partitions``
(every event an instance of such a query combines has the key value of its first event, so each
partition sees all the events its instances can use); every other query runs in one partition that sees
every event.  Queries joined by a PUBLISHed stream always share a group.  An event goes to one partition
of every group; a partition id is ``"<group>#<n>"`` (column ``ev_part``).  A null key goes to partition 0.

**State** (per partition id, RocksDB): one ValueState ``nfa`` = ``(fingerprint, applied, tick, snapshot)``:
the fingerprint of the group (stream, queries and their texts, key, partition count, seconds per tick),
the micro-batches applied so far, the partition's current tick (the largest ``t1`` processed) and
``NFAEngine.snapshot()`` -- live instances, tick, stream positions, matches not yet released.  The
engine (the queries, compiled) is a cache in the Python worker, one per group fingerprint; each
micro-batch restores the partition's snapshot into it (skipped when the worker's engine already holds
this partition as of the state's ``applied``, in the same streaming query run) and writes the new
snapshot back.  The whole snapshot is rewritten every micro-batch that has events for the partition, so
the state I/O of a micro-batch is proportional to the partition's live instances.

**Restart with other queries.**  A stored fingerprint that differs from the group's is an error (the
stream fails with an ``AnalysisError`` naming both query sets): instances of a changed query set cannot be
carried over (``NFAEngine.restore`` needs the same queries).  Start such a stream on a new checkpoint.
(A partition that has no state yet, e.g. after raising ``partitions``, cannot be told from a new one and
starts empty: change ``partitions`` only with a new checkpoint as well.)

**Order.**  ``t0``/``t1`` are required (no global arrival order exists across micro-batches).  Within a
micro-batch a partition's events are processed in ``(t1, order)``, where ``order`` is the ``order``
column when given, else the arrival order (input partition id << 33, then row position -- what
``monotonically_increasing_id`` computes, deterministic when a file source replays a micro-batch);
events of equal ``t1`` keep that order, as the oracle keeps list order (``t0`` plays no part: the
oracle's order is a stable sort by ``t1``).  Disorder inside a micro-batch is thus repaired; an event
whose ``t1`` is smaller than the partition's tick (it arrived in a later micro-batch than events that
end after it) is **rejected**: a row with ``op = 'rejected'`` and a ``reason``; the stream goes on.  So
is an event with a null ``t1`` and ``t0``, ``t0 > t1``, a non-integral timestamp, and one on which a
query raises (an ill-typed comparison: ``AnalysisError``; instances already made for that event stay).
An event with only one of ``t0``/``t1`` is instantaneous (``t0 = t1``), as in the oracle.  Malformed
events are rejected once (by the first group); out-of-order ones by each group whose partition rejects
them.

**Release of matches.**  ``NFAEngine`` releases a tick's matches when the tick closes (a larger ``t1``
arrives, or ``flush()``).  ``flush()`` keeps the tick open for events of the same ``t1`` (they are still
accepted and processed), and that is exact -- same matches as the oracle, as multisets -- as long as no
query of the group reads a stream another query of the group PUBLISHes (including the internal streams
of non-left-deep queries): then events of one tick cannot see each other.  With published streams a split
tick would feed the published events of that tick in two parts, out of the oracle's order, and a
consumer's "first match" could differ.  Hence ``flush=None`` (default): flush at the end of every
micro-batch when the group has no published stream read inside it, else hold the last tick's matches in
the state until a later ``t1`` reaches the partition (exact, but a quiet partition delays them).
``flush=True`` / ``False`` forces either.

**Output** (append): ``query`` (the event query), ``op`` (``'match'`` or ``'rejected'``), the attribute
columns, ``t0``, ``t1`` (the match's interval; a rejected event's own timestamps) and ``reason`` (null on
matches).  The attribute columns are ``attributes`` (a Spark schema: a match fills the columns it has
by name, the others are null; a rejected row carries the event's own values there) or, without it, one
string column ``binding``: the match's attributes (or the rejected event's) as a JSON object.
"""
from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from sparksub.errors import AnalysisError
from sparksub.operators import spark_stream
from sparksub.operators.join_groups import key_text
from sparksub.operators.nfa import NFAEngine, partition_key, resolve_query
from sparksub.operators.spark_join_stream import _plain
from sparksub.operators.spark_stream import REJECTED

__all__ = ["event_query_stream", "EventStreamSpec", "EventGroup", "apply_event_micro_batch", "event_partition",
           "MATCH", "REJECTED"]

MATCH = "match"
#: Columns of the output that are ours (an attribute may not use these names).
OWN_COLUMNS = ("query", "op", "binding", "t0", "t1", "reason")
#: Group engines cached per Python worker (each holds every query of its group, compiled).
CACHE_ENTRIES = 4
_CACHE: dict = {}  # fingerprint -> _Cached
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


@dataclass(frozen=True)
class EventGroup:
    """Queries that run together: in ``partitions`` partitions by ``key``, or in one (``key`` None)."""
    group_id: str
    queries: tuple        # ((name, text), ...) in registration order
    key: str | None
    partitions: int
    flush: bool           # release a micro-batch's last tick at its end (see the module docstring)
    fingerprint: str


@dataclass(frozen=True)
class EventStreamSpec:
    stream: str
    columns: tuple        # the event attributes: the stream's column names, in order
    integral: tuple       # per column: an integer type (pandas may hand it over as floats)
    groups: tuple         # EventGroup, ...
    seconds_per_tick: float
    binding: bool         # a JSON ``binding`` column instead of typed attribute columns
    struct: object        # the output schema (a Spark StructType) ...
    schema: pa.Schema     # ... and as Arrow

    def group(self, gid: str) -> EventGroup:
        return next(g for g in self.groups if g.group_id == gid)


def event_partition(value, partitions: int) -> int:
    """The partition of an event by its key value: CRC32 of the value as text (the same in every process;
    an integral float and its integer are one value, as ``=`` in the queries has them); null -> 0."""
    if partitions <= 1 or value is None or (isinstance(value, float) and value != value):
        return 0
    return zlib.crc32(key_text(value).encode("utf-8")) % partitions


def event_query_stream(events, *, stream: str, queries: Mapping[str, str], key: str | None = None,
                       partitions: int = 1, attributes=None, seconds_per_tick: float = 1,
                       order: str | None = None, flush: bool | None = None,
                       name: str = "event_query_nfa_stream"):
    """The streaming DataFrame of the matches of ``queries`` (name -> CEL / algebra text) over ``events``,
    a streaming DataFrame of the stream ``stream``: the event attributes as columns plus integer ``t0``,
    ``t1`` (and, optionally, the integer column ``order`` ranking events of equal ``t1``).

    ``key``: the attribute to partition by (the queries whose ``partition_key`` it is run in
    ``partitions`` partitions; the rest in one); ``None`` picks the partition key the stateful queries
    have in common, if there is exactly one.  ``attributes``: the output attribute columns (a Spark
    ``StructType``, or a DDL string when a session is active), else a JSON ``binding`` column.  ``flush``: see "Release of matches"
    in the module docstring.  ``name`` names the operator in EXPLAIN (and ``<name>_route`` the router).
    Semantics, state and order: the module docstring.  Needs the RocksDB state store provider
    (``spark.sql.streaming.stateStore.providerClass``), as every transformWithState operator does.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    fields = {f.name: f for f in events.schema.fields}
    for t in ("t0", "t1"):
        if t not in fields:
            raise AnalysisError(f"event stream {stream!r}: a streamed event needs integer columns t0 and t1 "
                                f"(there is no arrival order across micro-batches); missing {t!r}, columns: "
                                f"{sorted(fields)}")
    for t in ("t0", "t1") + ((order,) if order else ()):
        if t not in fields:
            raise AnalysisError(f"event stream {stream!r}: no order column {t!r}; columns: {sorted(fields)}")
        if fields[t].dataType.simpleString() not in _INTEGRAL:
            raise AnalysisError(f"event stream {stream!r}: column {t!r} must be an integer, "
                                f"not {fields[t].dataType.simpleString()}")
    columns = tuple(c for c in fields if c not in ("t0", "t1", order))
    spec = event_stream_spec(stream, columns, [fields[c].dataType.simpleString() in _INTEGRAL for c in columns],
                             queries, key=key, partitions=partitions, attributes=attributes,
                             seconds_per_tick=seconds_per_tick, flush=flush)

    # attributes travel as a0, a1, ... (PySpark's state API renames columns starting with "_")
    cols = [F.col(f"`{c}`").alias(f"a{i}") for i, c in enumerate(columns)]
    cols += [F.col("t0").cast("bigint").alias("ev_t0"), F.col("t1").cast("bigint").alias("ev_t1")]
    cols += [F.col(f"`{order}`").cast("bigint").alias("ev_ord")] if order else []
    rows = events.select(*cols)
    routed_schema = StructType(list(rows.schema.fields)
                               + ([] if order else [StructField("ev_ord", LongType(), False)])
                               + [StructField("ev_part", StringType(), False)])
    routed = rows.mapInArrow(_route_function(spec, name, order is None), routed_schema)
    return spark_stream._transform_with_state(routed.groupBy("ev_part"), _processor_class()(spec),
                                              spec.struct, name)


def event_stream_spec(stream: str, columns, integral, queries: Mapping[str, str], *, key: str | None = None,
                      partitions: int = 1, attributes=None, seconds_per_tick: float = 1,
                      flush: bool | None = None) -> EventStreamSpec:
    """What the stream's tasks need (no Spark session involved): the groups of ``queries`` over the stream's
    attribute ``columns`` (``integral``: which are integer columns) and the output schema."""
    from pyspark.sql.pandas.types import to_arrow_schema
    if partitions < 1:
        raise AnalysisError(f"partitions must be >= 1, got {partitions}")
    columns = tuple(columns)
    groups = _plan(stream, queries, key, partitions, seconds_per_tick, flush, columns)
    attrs = _attribute_fields(attributes)
    struct = _output_struct(attrs)
    return EventStreamSpec(stream, columns, tuple(bool(x) for x in integral), groups, seconds_per_tick,
                           attrs is None, struct, to_arrow_schema(struct, timezone="UTC"))


def _output_struct(attrs):
    """The output's Spark schema: query, op, the attribute columns (or binding), t0, t1, reason."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    own = [StructField("binding", StringType())] if attrs is None else list(attrs.fields)
    return StructType([StructField("query", StringType()), StructField("op", StringType()), *own,
                       StructField("t0", LongType()), StructField("t1", LongType()),
                       StructField("reason", StringType())])


def _attribute_fields(attributes):
    """The output's attribute columns as a StructType, or None (a JSON ``binding`` column instead)."""
    from pyspark.sql.types import StructType
    if attributes is None:
        return None
    st = attributes if isinstance(attributes, StructType) else StructType.fromDDL(attributes)
    clash = [f.name for f in st.fields if f.name in OWN_COLUMNS or f.name.startswith("_")]
    if clash:
        raise AnalysisError(f"output attribute(s) {clash} collide with the output's own columns {OWN_COLUMNS} "
                            f"or start with '_'")
    return st


def _query_graph(queries: Mapping[str, str]):
    """name -> (partition key, streams read, streams published) over every automaton the query resolves to."""
    from sparksub.grammar.events import parse_event_query
    out = {}
    for qn, text in queries.items():
        ast = parse_event_query(text)
        reads, pubs = set(), set()
        for rq in resolve_query(qn, ast):
            reads |= set(rq.expr.streams())
            pubs |= set(rq.publishes)
        out[qn] = (partition_key(ast), reads, pubs)
    return out


def _plan(stream: str, queries: Mapping[str, str], key: str | None, partitions: int, spt: float,
          flush: bool | None, columns) -> tuple:
    """The groups (see "Partitions" in the module docstring)."""
    if not queries:
        raise AnalysisError(f"no event queries on stream {stream!r}")
    graph = _query_graph(queries)
    published = {s for _, _, p in graph.values() for s in p}
    for qn, (_, reads, _) in graph.items():
        foreign = sorted(reads - published - {stream})
        if foreign:
            raise AnalysisError(f"event query {qn!r} reads stream(s) {foreign}, not {stream!r}")
    if key is None:
        keys = {k for k, _, _ in graph.values() if k is not None}
        key = next(iter(keys)) if len(keys) == 1 else None
    if key is not None and key not in columns:
        raise AnalysisError(f"partition key {key!r} is not a column of stream {stream!r}: {list(columns)}")
    keyed = {qn for qn, (k, _, _) in graph.items() if key is not None and k == key and partitions > 1}
    # a published stream keeps its producer and its readers in one group
    changed = True
    while changed:
        changed = False
        for qn in list(keyed):
            _, reads, pubs = graph[qn]
            for other, (_, r2, p2) in graph.items():
                if other not in keyed and ((reads & p2) or (pubs & r2)):
                    keyed.discard(qn)
                    changed = True
                    break
    out = []
    for gid, names, k, n in ((key, [q for q in queries if q in keyed], key, partitions),
                             ("*", [q for q in queries if q not in keyed], None, 1)):
        if not names:
            continue
        pubs = {s for q in names for s in graph[q][2]}
        exact = not any(graph[q][1] & pubs for q in names)
        text = tuple((q, queries[q]) for q in names)
        fp = hashlib.sha256(json.dumps([stream, k, n, spt, text]).encode("utf-8")).hexdigest()[:20]
        out.append(EventGroup(gid, text, k, n, exact if flush is None else bool(flush), fp))
    return tuple(out)


def _route_function(spec: EventStreamSpec, name: str, arrival: bool):
    groups = [(g.group_id, g.partitions, None if g.key is None else f"a{spec.columns.index(g.key)}")
              for g in spec.groups]

    def route(batches):
        """Each event to its key's partition of every group (``ev_part``); ``ev_ord`` = arrival order."""
        from pyspark import TaskContext
        tc = TaskContext.get()
        pos = (tc.partitionId() if tc is not None else 0) << 33
        for rb in batches:
            if arrival:
                rb = rb.append_column("ev_ord", pa.array(np.arange(pos, pos + rb.num_rows, dtype=np.int64)))
                pos += rb.num_rows
            for gid, parts, col in groups:
                if col is None or parts == 1:
                    ids = pa.array([f"{gid}#0"] * rb.num_rows, pa.string())
                else:
                    ids = pa.array([f"{gid}#{event_partition(v, parts)}" for v in rb.column(col).to_pylist()],
                                   pa.string())
                yield rb.append_column("ev_part", ids)
    route.__name__ = f"{name}_route"
    return route


def _processor_class():
    from pyspark.sql.streaming import StatefulProcessor

    class EventQueryStream(StatefulProcessor):
        """One partition's events of one micro-batch -> its matches; the NFA's state in the state store."""

        def __init__(self, spec: EventStreamSpec):
            self.spec = spec

        def init(self, handle) -> None:
            self.nfa = handle.getValueState("nfa", "fingerprint string, applied long, tick long, snapshot binary")

        def handleInputRows(self, key, rows, timerValues):
            frames = [pdf for pdf in rows if len(pdf)]
            if frames:
                pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
                yield apply_event_micro_batch(self.spec, key[0], pdf, self.nfa)

        def close(self) -> None:
            pass

    return EventQueryStream


class _Cached:
    __slots__ = ("engine", "empty", "holder")

    def __init__(self, engine: NFAEngine):
        self.engine, self.empty, self.holder = engine, engine.snapshot(), None


def _engine_for(spec: EventStreamSpec, g: EventGroup) -> _Cached:
    """The worker's engine for the group's queries (compiled once per worker)."""
    got = _CACHE.pop(g.fingerprint, None)
    if got is None:
        engine = NFAEngine(seconds_per_tick=spec.seconds_per_tick)
        for qn, text in g.queries:
            engine.register(qn, text)
        got = _Cached(engine)
    _CACHE[g.fingerprint] = got
    while len(_CACHE) > CACHE_ENTRIES:
        _CACHE.pop(next(iter(_CACHE)))
    return got


def apply_event_micro_batch(spec: EventStreamSpec, rid: str, pdf: pd.DataFrame, state) -> pd.DataFrame:
    """Process one micro-batch of one partition (``pdf``: a0.., ev_t0, ev_t1, ev_ord, ev_part; ``state``:
    the ValueState ``nfa``, or any look-alike with exists / get / update) -> its output rows."""
    gid = rid.rsplit("#", 1)[0]
    g = spec.group(gid)
    stored = tuple(state.get()) if state.exists() else None
    if stored is not None and stored[0] != g.fingerprint:
        raise AnalysisError(
            f"event stream {spec.stream!r}, partition {rid!r}: the checkpoint's state was written for another "
            f"set of event queries (fingerprint {stored[0]}, now {g.fingerprint}: "
            f"{[q for q, _ in g.queries]}, key {g.key!r}, {g.partitions} partition(s)); instances cannot be "
            f"carried over to other queries: restart with the same queries or on a new checkpoint")
    applied = int(stored[1]) if stored is not None else 0
    tick = None if stored is None or stored[2] is None or stored[2] != stored[2] else int(stored[2])
    query_id, run_id = spark_stream._query_identity()
    cached = _engine_for(spec, g)
    engine = cached.engine
    if cached.holder != (query_id, run_id, rid, applied):
        engine.restore(bytes(stored[3]) if stored is not None else cached.empty)
    cached.holder = None  # until the new snapshot is stored

    n = len(pdf)
    t0s, t1s = _timestamps(pdf["ev_t0"]), _timestamps(pdf["ev_t1"])
    ords = pdf["ev_ord"].to_numpy(dtype=np.int64)
    values = [pdf[f"a{i}"].tolist() for i in range(len(spec.columns))]
    primary = spec.groups[0].group_id == gid
    out: list = []  # (query, op, attrs, t0, t1, reason)

    def event(i):
        return {c: _plain(col[i], whole) for c, col, whole in zip(spec.columns, values, spec.integral)}

    good = []
    for i in range(n):
        t0, t1 = t0s[i], t1s[i]
        if t0 is None and t1 is None:
            reason = "an event needs t0 and t1 (both are null)"
        elif t0 is None or t1 is None:
            t0 = t1 = t1 if t0 is None else t0
            reason = None
        else:
            reason = f"t0={t0} > t1={t1}" if t0 > t1 else None
        if reason is not None:
            if primary:
                out.append((None, REJECTED, event(i), t0, t1, f"event of {spec.stream!r}: {reason}"))
            continue
        good.append((t1, int(ords[i]), t0, i))
    good.sort()
    for t1, _, t0, i in good:
        ev = event(i)
        if tick is not None and t1 < tick:
            out.append((None, REJECTED, ev, t0, t1,
                        f"event of {spec.stream!r} out of order: t1={t1} arrived after t1={tick} "
                        f"(partition {rid}); events must reach a partition in end-time order across micro-batches"))
            continue
        try:
            matches = engine.process(spec.stream, {**ev, "t0": t0, "t1": t1})
        except AnalysisError as e:
            out.append((None, REJECTED, ev, t0, t1, f"event of {spec.stream!r} (partition {rid}): {e}"))
            continue
        tick = t1
        out.extend(_match_rows(matches))
    if g.flush:
        out.extend(_match_rows(engine.flush()))
    state.update((g.fingerprint, applied + 1, tick, engine.snapshot()))
    cached.holder = (query_id, run_id, rid, applied + 1)
    return _output(spec, out).to_pandas()


def _timestamps(col: pd.Series) -> list:
    """A timestamp column as Python ints or None (a nullable bigint column may arrive as floats)."""
    return [None if v is None or v != v else int(v) for v in col.tolist()]


def _match_rows(matches) -> list:
    rows = []
    for m in matches:
        ev = m.event
        rows.append((m.query, MATCH, {k: v for k, v in ev.items() if k not in ("t0", "t1")}, ev["t0"], ev["t1"], None))
    return rows


def _json(attrs: dict) -> str:
    return json.dumps(attrs, default=str, allow_nan=True)


def _column(values: list, t: pa.DataType) -> pa.Array:
    """``values`` as an Arrow column of type ``t``; a value that does not fit becomes its text in a string
    column, and null elsewhere (never an error: the stream goes on)."""
    try:
        return pa.array(values, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        fixed = []
        for v in values:
            try:
                pa.array([v], t)
                fixed.append(v)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                fixed.append(str(v) if pa.types.is_string(t) and v is not None else None)
        return pa.array(fixed, t)


def _output(spec: EventStreamSpec, rows: list) -> pa.Table:
    schema = spec.schema
    if not rows:
        return schema.empty_table()
    queries, ops, attrs, t0s, t1s, reasons = (list(c) for c in zip(*rows))
    cols = {"query": pa.array(queries, pa.string()), "op": pa.array(ops, pa.string())}
    if spec.binding:
        cols["binding"] = pa.array([_json(a) for a in attrs], pa.string())
    else:
        for f in schema:
            if f.name not in OWN_COLUMNS:
                cols[f.name] = _column([a.get(f.name) for a in attrs], f.type)
    cols.update(t0=pa.array(t0s, pa.int64()), t1=pa.array(t1s, pa.int64()), reason=pa.array(reasons, pa.string()))
    return pa.table([cols[f.name] for f in schema], schema=schema)
