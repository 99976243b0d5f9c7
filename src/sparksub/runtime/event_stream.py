"""Thin Spark wrapper: event queries (Cayuga, ``operators/nfa``) over Structured Streaming, with the NFA's
instances in Spark's state store, so that a restart from the checkpoint neither loses nor repeats a match
(issue 6 item 5, DESIGN §6).  The plan (names as Spark's EXPLAIN prints them)::

    TransformWithStateInPySpark event_query_nfa_stream(...)     one state partition per replica
    +- Exchange hashpartitioning(ev_part), REQUIRED_BY_STATEFUL_OPERATOR
       +- MapInArrow event_query_nfa_stream_route(...)          each event to its replica of every class
          +- <the stream's events: its columns plus integer t0, t1>

The pure parts are ``operators/event_partitions`` (shared with batch ``publish``, ``spark_events``): the
plan (queries in *classes*: the queries of a keyed class run in ``partitions`` replicas, an event going to
``key_partition(its key value)``; every other class in one replica that sees every event), the routing
hash, the output layout (attribute columns and their types) and the match rows.  A replica's id
(``events:<class>#<partition>``, column ``ev_part``) is its state key.

**State** (per replica, RocksDB): one ValueState ``nfa`` = ``(fingerprint, applied, tick, snapshot)``: the
fingerprint of the class (stream, queries, key, partition count, executor and its options), the
micro-batches applied so far, the replica's tick (the largest ``t1`` processed) and the executor's
``snapshot()`` -- live instances, tick, stream positions, matches not yet released.  The executor (the
class's queries, compiled) is a cache in the Python worker, one per class fingerprint; each micro-batch
restores the replica's snapshot into it (skipped when the worker's executor already holds this replica as
of the state's ``applied``, in the same streaming query run) and stores the new snapshot.  A replica
without state starts from ``initial`` (the engine's snapshot of that replica when the stream starts, so
a new checkpoint continues the engine's partial matches; a file the stream keeps under the engine's
directory, ``stream_files/<stream id>/``), else empty.  The whole snapshot is rewritten
every micro-batch that has events for the replica: state I/O proportional to its live instances.

**Restart with other queries.**  A stored fingerprint that differs from the class's is an error (the stream
fails with an ``AnalysisError`` naming the class's queries): instances of a changed query set cannot be
carried over (``NFAEngine.restore`` needs the same queries).  Start such a stream on a new checkpoint.  (A
replica without state, e.g. after raising ``partitions`` or a re-plan, cannot be told from a new one and
starts empty: change the queries or partitions only with a new checkpoint as well.)  So event queries are
not subscriptions-as-data yet (issue 16 item 5): the engine refuses ``CREATE`` / ``DROP EVENT QUERY`` on a
table while an event stream over it runs (the route notes its streaming query in the stream's directory,
``stream_control``), and a stream built before such a change fails its next micro-batch saying so.

**Order.**  ``t0``/``t1`` are required (no global arrival order exists across micro-batches).  Within a
micro-batch a replica's events are processed in ``(t1, order)``, ``order`` being the ``order`` column when
given, else the arrival order (input partition id << 33, then row position -- what
``monotonically_increasing_id`` computes, deterministic when a file source replays a micro-batch); events
of equal ``t1`` keep that order, as the oracle keeps list order (a stable sort by ``t1``; ``t0`` plays no
part).  Disorder inside a micro-batch is thus repaired.  An event whose ``t1`` is smaller than its
replica's tick (it came in a later micro-batch than events that end after it) is **rejected**: a row with
``op = 'rejected'``, its ``t0``/``t1``, its columns and a ``reason``, and the stream goes on.  So is an
event with a null ``t0`` or ``t1`` or ``t0 > t1`` (once, by the first class; reason
``row_validation.interval_reason``, as ``publish`` words it) and one on which a query
raises for the whole replica (an error of the executor itself).  A run-time evaluation error (a numeric
overflow, say; the registration check refuses ill-typed queries) belongs to the query that raised it
(DESIGN §7): the executor charges it to that query alone -- a ``rejected`` row whose ``query`` names it --
and every other query of the replica keeps the event.  (``Engine.stream`` checks every row with
``row_validation`` before it reaches this operator, as ``publish`` does: there, a stream with only one of
the columns ``t0``/``t1`` is instantaneous.)

**Release of matches.**  The executor releases a tick's matches when the tick closes (a larger ``t1``
arrives, or ``flush()``).  After ``flush()`` the tick stays open: events of the same ``t1`` in a later
micro-batch are accepted and processed, and that is exact -- the oracle's matches, as multisets -- as long
as no query of the class reads a stream PUBLISHed in the class (also the internal streams of non-left-deep
queries), since events of one tick cannot extend each other's instances.  When one does, the split tick
feeds that tick's published events in two parts, out of the oracle's order, and a reader's "first match"
can differ (found with random splits: ``tests/test_stream_events.py``).  Hence ``flush=None`` (default):
flush at the end of every micro-batch in classes without such a stream, and otherwise hold the last
tick's matches in the state until a later ``t1`` reaches the replica (exact; a quiet replica delays them).
``flush=True`` / ``False`` forces either.

**Output** (append): the layout's schema (``event_partitions.match_output_schema``: ``subscription_id, op,
value, seq, group_id, reason, query``, one column per output attribute over the queries -- the stream's
columns first --, ``t0, t1``), as batch ``publish`` gives it.  A match has ``op = 'match'``, ``query``,
``group_id`` = its replica, its attributes, ``t0``/``t1``; a rejected event ``op = 'rejected'``, its
columns, ``t0``/``t1``, ``reason``, and ``seq`` = its ``order`` value when the stream has that column.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from sparksub.errors import AnalysisError
from sparksub.operators.events import partitions as evp
from sparksub.operators.shared import row_validation
from sparksub.runtime import stateful
from sparksub.operators.events.nfa import resolve_query
from sparksub.runtime.join_stream import _plain
from sparksub.runtime.replicas import write_value
from sparksub.runtime.stream import REJECTED, _Deferred

__all__ = ["event_query_stream", "run_event_stream", "event_stream_spec", "EventStreamSpec", "StreamClass",
           "apply_event_micro_batch", "MATCH", "REJECTED", "OPERATOR_NAME"]

MATCH = "match"
#: The operator's name in EXPLAIN (the router is ``<name>_route``).
OPERATOR_NAME = "event_query_nfa_stream"
#: Class executors cached per Python worker (each holds its class's queries, compiled).
CACHE_ENTRIES = 4
_CACHE: dict = {}  # fingerprint -> _Cached (``stateful.StreamCache.shared``: one executor per class, for any run)
_WORKER = stateful.StreamCache(CACHE_ENTRIES, lambda: _CACHE)
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


@dataclass(frozen=True)
class StreamClass:
    """One event class as the stream runs it."""
    id: str
    key: str | None
    partitions: int
    base: evp.ReplicaBase  # the queries, the executor and its options (no snapshot)
    spellings: tuple       # the names under which its queries read the stream
    flush: bool            # release a micro-batch's last tick at its end (module docstring)
    fingerprint: str
    initial: object = None  # {replica id: snapshot bytes} (StoredValue or _Deferred): replicas without state start there


@dataclass(frozen=True)
class EventStreamSpec:
    """What the stream's tasks need."""
    stream: str
    columns: tuple         # the stream's event columns (attributes), in order
    integral: tuple        # per column: an integer type (pandas may hand it over as floats)
    classes: tuple         # StreamClass, ...
    layout: evp.MatchLayout
    schema: pa.Schema      # the output schema (layout.schema())
    stats: object = None   # the stream's counters (spark_stream.stream_stats), or None
    control: object = None  # the stream's directory (``stream_control.StreamControl``): its query, a stale plan

    def cls(self, rid: str) -> StreamClass:
        cid = rid[len("events:"):].rsplit("#", 1)[0]
        return next(c for c in self.classes if c.id == cid)


def event_query_stream(events, *, stream: str, queries: Mapping, partitions: int = 1, seconds_per_tick: float = 1,
                       order: str | None = None, flush: bool | None = None, name: str = OPERATOR_NAME):
    """The streaming DataFrame of the matches of ``queries`` (name -> CEL / algebra text or AST; they read
    ``stream`` and streams they PUBLISH) over ``events``: a streaming DataFrame with the stream's columns
    plus integer ``t0``, ``t1`` (and, optionally, an integer column ``order`` ranking events of equal
    ``t1``).  ``partitions``: replicas of each keyed class (``event_partitions.event_partition_plan``).
    ``flush``: "Release of matches" in the module docstring.  ``name`` names the operator in EXPLAIN.
    Needs the RocksDB state store provider (``spark.sql.streaming.stateStore.providerClass``), as every
    transformWithState operator does.  (The engine plans and lays out its own queries: it calls
    :func:`event_stream_spec` with its plan and layout, then :func:`run_event_stream`.)"""
    from pyspark.sql.pandas.types import to_arrow_type
    fields = _check_events(events, stream, order)
    columns = {c: to_arrow_type(f.dataType) for c, f in fields.items() if c not in ("t0", "t1", order)}
    spec = event_stream_spec(stream, columns, queries, partitions=partitions, seconds_per_tick=seconds_per_tick,
                             flush=flush)
    return run_event_stream(events, spec, order=order, name=name)


def _check_events(events, stream: str, order: str | None) -> dict:
    fields = {f.name: f for f in events.schema.fields}
    for t in ("t0", "t1") + ((order,) if order else ()):
        if t not in fields:
            raise AnalysisError(f"event stream {stream!r}: a streamed event needs integer columns t0 and t1 "
                                f"(there is no arrival order across micro-batches)"
                                + (f" and the order column {order!r}" if order else "")
                                + f"; missing {t!r}, columns: {sorted(fields)}")
        if fields[t].dataType.simpleString() not in _INTEGRAL:
            raise AnalysisError(f"event stream {stream!r}: column {t!r} must be an integer, "
                                f"not {fields[t].dataType.simpleString()}")
    return fields


def event_stream_spec(stream: str, columns: Mapping[str, pa.DataType], queries: Mapping, *, partitions: int = 1,
                      seconds_per_tick: float = 1, flush: bool | None = None,
                      executor: str = evp.DEFAULT_EXECUTOR, plan: evp.EventPlan | None = None,
                      layout: evp.MatchLayout | None = None, spellings: Mapping[str, tuple] | None = None,
                      initial: Mapping[str, bytes] | None = None, store=None, stats=None,
                      control=None) -> EventStreamSpec:
    """The spec of a stream of ``stream``'s events (``columns``: its event columns and their Arrow types)
    through ``queries`` (name -> text or AST).  Without Spark.  The engine passes its own ``plan`` (the
    classes reading ``stream`` are taken), ``layout``, ``spellings`` (class id -> the names its queries
    read the stream under), ``initial`` (replica id -> its executor's snapshot now), ``store`` (the
    stream's directory: ``initial`` goes to a file there rather than into every task's closure), ``stats``
    (its counters) and ``control`` (``stream_control.StreamControl`` of that directory: the tasks note the
    streaming query there, and fail when the engine marked the stream's queries changed); otherwise they are
    derived here (``event_partitions``)."""
    from sparksub.grammar.events import parse_event_query
    asts = {q: parse_event_query(t) if isinstance(t, str) else t for q, t in queries.items()}
    if plan is None:
        published = {s for ast in asts.values() for s in evp.query_streams(ast)[1]}
        plan = evp.event_partition_plan([evp.query_info(q, ast, {stream.lower(): stream}, published)
                                         for q, ast in asts.items()], partitions)
    if layout is None:
        layout = evp.match_layout(_attributes(stream, columns, asts), list(columns.items()))
    options = {"seconds_per_tick": seconds_per_tick}
    classes = []
    for n, c in enumerate(plan.classes.values()):
        if stream not in c.streams:
            continue
        if tuple(c.streams) != (stream,):
            raise AnalysisError(f"event queries {list(c.queries)} read several streams {list(c.streams)}: a "
                                f"stream of {stream!r} alone cannot run them (their events must arrive in "
                                f"end-time order across streams)")
        base = evp.ReplicaBase(tuple((q, asts[q]) for q in c.queries), None, options, executor)
        text = json.dumps([stream, c.id, c.key, c.partitions, executor, sorted(options.items()),
                           [(q, repr(asts[q])) for q in c.queries]])
        mine = None if initial is None else {r: initial[r] for r in c.replica_ids() if r in initial}
        if mine:
            mine = write_value(os.path.join(store, f"initial-{n}.pickle"), mine) if store is not None else _Deferred(mine)
        classes.append(StreamClass(c.id, c.key, c.partitions, base,
                                   tuple((spellings or {}).get(c.id, (stream,))),
                                   _exact_flush(c.queries, asts) if flush is None else bool(flush),
                                   hashlib.sha256(text.encode("utf-8")).hexdigest()[:20],
                                   mine or None))
    if not classes:
        raise AnalysisError(f"no event queries on stream {stream!r}")
    cols = tuple(columns)
    return EventStreamSpec(stream, cols, tuple(pa.types.is_integer(columns[c]) for c in cols), tuple(classes),
                           layout, layout.schema(), stats, control)


def _attributes(stream: str, columns: Mapping[str, pa.DataType], asts: Mapping) -> dict:
    """Each query's output attributes (``event_partitions.output_attributes``), producers of published
    streams before their readers."""
    env, out, pending = {stream: dict(columns)}, {}, dict(asts)
    while pending:
        ready = [q for q, ast in pending.items() if evp.query_streams(ast)[0] <= set(env)]
        if not ready:
            raise AnalysisError(f"event queries {sorted(pending)} read streams that are neither {stream!r} nor "
                                f"published by another query")
        for q in ready:
            published: dict = {}
            out[q] = evp.output_attributes(pending.pop(q), env, published)
            env.update(published)
    return {q: out[q] for q in asts}


def _exact_flush(names, asts) -> bool:
    """Whether no query of the class reads a stream PUBLISHed in it (internal streams included)."""
    reads, pubs = set(), set()
    for q in names:
        for rq in resolve_query(q, asts[q]):
            reads |= set(rq.expr.streams())
            pubs |= set(rq.publishes)
    return not (reads & pubs)


def run_event_stream(events, spec: EventStreamSpec, *, order: str | None = None, name: str = OPERATOR_NAME):
    """The streaming DataFrame of ``spec``'s matches over ``events`` (its columns ``spec.columns``, integer
    ``t0``/``t1``, optional ``order``): the router (``mapInArrow``) and the stateful operator
    (``transformWithStateInPandas``), named ``name`` in EXPLAIN."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    _check_events(events, spec.stream, order)
    # event columns travel as a0, a1, ... (PySpark's state API renames columns starting with "_")
    cols = [F.col(f"`{c}`").alias(f"a{i}") for i, c in enumerate(spec.columns)]
    cols += [F.col("t0").cast("bigint").alias("ev_t0"), F.col("t1").cast("bigint").alias("ev_t1")]
    cols += [F.col(f"`{order}`").cast("bigint").alias("ev_ord")] if order else []
    rows = events.select(*cols)
    routed_schema = StructType(list(rows.schema.fields)
                               + ([] if order else [StructField("ev_ord", LongType(), False)])
                               + [StructField("ev_part", StringType(), False)])
    routed = rows.mapInArrow(_route_function(spec, name, order is None), routed_schema)
    return stateful.run(routed.groupBy("ev_part"), EventQueryLogic(order is not None), spec,
                        from_arrow_schema(spec.schema), name)


def _route_function(spec: EventStreamSpec, name: str, arrival: bool):
    classes = [(c.id, c.partitions, None if c.key is None else f"a{spec.columns.index(c.key)}")
               for c in spec.classes]

    def route(batches):
        """Each event to its replica of every class (``ev_part``); ``ev_ord`` = arrival order."""
        from pyspark import TaskContext
        if spec.control is not None:   # the engine's event queries changed since: refuse to run the old plan
            spec.control.check_stale()
            spec.control.note_query(stateful.query_run()[0])
        tc = TaskContext.get()
        pos = (tc.partitionId() if tc is not None else 0) << 33
        for rb in batches:
            if arrival:
                rb = rb.append_column("ev_ord", pa.array(np.arange(pos, pos + rb.num_rows, dtype=np.int64)))
                pos += rb.num_rows
            for cid, parts, col in classes:
                where = (evp.partitions_of(rb.column(col).to_pylist(), parts) if col is not None and parts > 1
                         else np.zeros(rb.num_rows, dtype=np.int64))
                ids = [evp.replica_id(cid, p) for p in range(parts)]
                yield rb.append_column("ev_part", pa.array([ids[p] for p in where], pa.string()))
    route.__name__ = f"{name}_route"
    return route


@dataclass(frozen=True)
class EventQueryLogic(stateful.StreamLogic):
    """An event class's replica on the one stream runtime (``stateful``): one ValueState ``nfa`` (module
    docstring); ``ordered``: the stream has an ``order`` column (``apply_event_micro_batch``)."""
    ordered: bool = False

    def state_variables(self, spec: EventStreamSpec) -> dict:
        return {"nfa": stateful.value_state("fingerprint string, applied long, tick long, snapshot binary")}

    def state(self, handles):
        return handles["nfa"]

    def apply(self, spec: EventStreamSpec, key, pdf: pd.DataFrame, state) -> pd.DataFrame:
        return apply_event_micro_batch(spec, key, pdf, state, self.ordered)


def _processor_class():
    """The event queries' processor, constructed as ``(spec, ordered=False)`` (tests drive it with ``TwsTester``)."""
    processor = stateful.processor_class()
    return lambda spec, ordered=False: processor(EventQueryLogic(ordered), spec)


class _Cached:
    __slots__ = ("executor", "empty", "holder")

    def __init__(self, executor):
        self.executor, self.empty, self.holder = executor, executor.snapshot(), None


def _executor_for(c: StreamClass) -> _Cached:
    """The worker's executor for the class's queries (compiled once per worker)."""
    return _WORKER.shared(c.fingerprint, lambda: _Cached(c.base.build()))


def apply_event_micro_batch(spec: EventStreamSpec, rid: str, pdf: pd.DataFrame, state, ordered: bool = False):
    """Process one micro-batch of one replica (``pdf``: a0.., ev_t0, ev_t1, ev_ord; ``state``: the ValueState
    ``nfa``, or any look-alike with exists / get / update) -> its output rows (pandas, ``spec.schema``).
    ``ordered``: ``ev_ord`` is the stream's ``order`` column (it becomes the ``seq`` of rejected rows)."""
    c = spec.cls(rid)
    stored = tuple(state.get()) if state.exists() else None
    if stored is not None and stored[0] != c.fingerprint:
        raise AnalysisError(
            f"event stream {spec.stream!r}, replica {rid!r}: the checkpoint's state was written for another "
            f"set of event queries (fingerprint {stored[0]}, now {c.fingerprint}: {[q for q, _ in c.base.queries]}, "
            f"key {c.key!r}, {c.partitions} partition(s)); instances cannot be carried over to other queries: "
            f"restart with the same queries or on a new checkpoint")
    applied = int(stored[1]) if stored is not None else 0
    tick = None if stored is None or stored[2] is None or stored[2] != stored[2] else int(stored[2])
    query_id, run_id = stateful.query_run()
    cached = _executor_for(c)
    executor = cached.executor
    how = "cache_hits"
    if cached.holder != (query_id, run_id, rid, applied):
        seed = c.initial.get().get(rid) if c.initial is not None else None
        executor.restore(bytes(stored[3]) if stored is not None else (seed or cached.empty))
        how = "rebuilt" if stored is not None else "seeded"
    cached.holder = None  # until the new snapshot is stored
    if spec.stats is not None:
        spec.stats.add({"micro_batches": 1, how: 1})

    t0s, t1s = _ticks(pdf["ev_t0"]), _ticks(pdf["ev_t1"])
    ords = pdf["ev_ord"].to_numpy(dtype=np.int64)
    values = [pdf[f"a{i}"].tolist() for i in range(len(spec.columns))]
    first = spec.classes[0].id == c.id
    matches, rejected = [], []  # rejected: (event, t0, t1, order, reason[, query charged])
    evp.feed_errors(executor)   # nothing left of an earlier, failed micro-batch

    def event(i):
        return {col: _plain(vs[i], whole) for col, vs, whole in zip(spec.columns, values, spec.integral)}

    good = []
    for i in range(len(pdf)):
        t0, t1 = t0s[i], t1s[i]
        reason = row_validation.interval_reason(t0, t1)  # as publish words it (the engine checks before)
        if reason is None:
            good.append((t1, int(ords[i]), t0, i))
        elif first:
            rejected.append((event(i), t0, t1, int(ords[i]), f"event of {spec.stream!r}: {reason}"))
    good.sort()
    for t1, o, t0, i in good:
        ev = event(i)
        if tick is not None and t1 < tick:
            rejected.append((ev, t0, t1, o, f"event of {spec.stream!r} out of order: t1={t1} arrived after "
                                            f"t1={tick} ({rid}); events must reach a replica in end-time order "
                                            f"across micro-batches"))
            continue
        ev.update(t0=t0, t1=t1)
        try:
            for s in c.spellings:
                matches.extend(executor.process(s, ev))
        except AnalysisError as e:
            rejected.append(({k: v for k, v in ev.items() if k not in ("t0", "t1")}, t0, t1, o,
                             f"event of {spec.stream!r} ({rid}): {e}"))
            continue
        for err in evp.feed_errors(executor):           # charged to the query that raised, alone
            rejected.append(({k: v for k, v in ev.items() if k not in ("t0", "t1")}, t0, t1, o,
                             f"event of {spec.stream!r} ({rid}): {evp.error_text(err)}", err.query))
        tick = t1
    if c.flush:
        matches.extend(executor.flush())
        for err in evp.feed_errors(executor):
            rejected.append(({}, err.t0, err.t1, None, f"{err.stream} ({rid}): {evp.error_text(err)}", err.query))
    state.update((c.fingerprint, applied + 1, tick, executor.snapshot()))
    cached.holder = (query_id, run_id, rid, applied + 1)
    out = evp.matches_to_table(matches, spec.layout, rid, spec.schema)
    if rejected:
        out = pa.concat_tables([_rejected_table(spec, rid, rejected, ordered), out])
    return out.to_pandas()


def _ticks(col: pd.Series) -> list:
    """A t0/t1 column as Python ints or None (a nullable bigint column may arrive as floats)."""
    return [None if v is None or v != v else int(v) for v in col.tolist()]


def _rejected_table(spec: EventStreamSpec, rid: str, rows: list, ordered: bool) -> pa.Table:
    """Rejected events: op, group_id, reason, t0, t1, seq (the order column's value) and their columns."""
    schema, n = spec.schema, len(rows)
    data = {f.name: pa.nulls(n, f.type) for f in schema}
    events, t0s, t1s, ords, reasons = (list(x) for x in zip(*(r[:5] for r in rows)))
    data.update(op=pa.array([REJECTED] * n, pa.string()), group_id=pa.array([rid] * n, pa.string()),
                reason=pa.array(reasons, pa.string()), t0=pa.array(t0s, pa.int64()), t1=pa.array(t1s, pa.int64()),
                query=pa.array([r[5] if len(r) > 5 else None for r in rows], pa.string()))
    if ordered:
        data["seq"] = pa.array(ords, pa.int64())
    for c in spec.columns:
        col = evp.output_column(c)
        t = schema.field(col).type
        try:
            data[col] = pa.array([e.get(c) for e in events]).cast(t, safe=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass  # a value that does not fit stays null (the event is rejected anyway)
    return pa.table(data, schema=schema)
