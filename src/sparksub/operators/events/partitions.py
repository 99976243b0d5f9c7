"""Event queries in partitions: the pure logic behind running Cayuga event queries inside Spark tasks
(DESIGN §6, issue 6 item 5) — planning, routing, output schemas, match rows, replica bases.  No pyspark
import: ``runtime/events.py`` (batch ``publish``) and a Structured Streaming wrapper both build on it.

**Plan** (:func:`event_partition_plan`).  Event queries connected through published streams (one reads
what another PUBLISHes) form a *component*: they must run in one executor (``NFAEngine``), which feeds
published events back to their readers.  A component's *key* is the attribute ``A`` every stateful
member's ``nfa.partition_key`` returns (each NEXT / FOLD compares ``$2.A = $1.A`` and nothing assigns
``A``), provided no stateless member assigns ``A`` either; otherwise it has none.  Components are placed
in *classes*, one executor per (class, partition) — a *replica*:

- keyed components reading the same raw streams share the class ``A@streams``, hash-partitioned by the
  value of ``A`` into ``partitions`` partitions (every event of one ``A`` value, raw or published inside
  the executor, lives in one partition, so each partition's matches are exactly the oracle's for its
  values);
- every other component runs in one partition, replicated every event of the streams it reads; such
  components are packed into at most ``partitions`` *unkeyed groups* ``u<k>@streams`` per stream set
  (least loaded first), so that queries share states and indexes inside one executor (004 §3) and the
  number of replicas stays bounded.  (DESIGN §6 / issue 6: "the others run in one partition per query
  group".)

Classes never mix stream sets: an executor processes its events in end-time order across every stream it
reads, so unrelated queries over different streams (each with its own clock) must not share one.

Changes keep state: given the ``previous`` plan, a component stays in its class whenever that class is
still valid for it (same streams; unkeyed, or keyed by the component's key), so adding or dropping a query
touches only its class: the caller registers / unregisters it in each partition's live executor and the
other queries' partial matches survive.  A component that must move (it merged with a component of
another class, or its key changed so that its class no longer fits) is placed anew; its queries that
moved are listed in ``EventPlan.reset`` (their partial matches restart empty).

**Routing** (:func:`key_partition`, :func:`partitions_of`): a stable hash (CRC-32 of a canonical
encoding: ``1``, ``1.0`` and ``True`` hash alike, as they compare equal) of the key value modulo the
partition count; NULL goes to partition 0.  It is ours, not Spark's ``hash()``, so the driver knows which
replica each event reaches (for the replica logs) and a streaming job can compute it in a task.

**Output** (:func:`output_attributes`, :func:`match_layout`, :func:`matches_to_table`).  A match row has
``query`` (the event query's name), one column per output attribute over all queries of a publish (nulls
where a row does not use it), ``t0``, ``t1``.  Types: an attribute read from a stream keeps the stream
column's type (``Price_1`` is ``Price``'s); a computed one is DOUBLE when numeric (``1 AS cnt``,
``$.cnt + 1``, ``length(x)``), BOOLEAN for a predicate (``Price > 5 AS up``, ``contains(…)``), STRING
otherwise (``lower(x)``, string ``+``).  One attribute with different types (across queries, or against
the stream's column of that name) gets the common type: numeric types widen to DOUBLE, anything else to
STRING.  An attribute named like one of the fixed output columns (``subscription_id op value seq
group_id reason query t0 t1``) becomes ``event_<name>``, as FILTER rows' event columns do.  A value that
does not fit its column's type is written as NULL and the row's ``reason`` says so.

**Replicas** (:class:`ReplicaBase`, :func:`feed_events`): a replica is rebuilt anywhere from its base —
the class's queries (ASTs, in registration order), executor options and an ``NFAEngine.snapshot()`` (or
none: empty) — plus the batches of events that reached it since, replayed with their matches discarded.
A batch is fed in (t1, arrival) order and closed with ``flush()``, so a batch's matches are complete when
it returns.  A tick split across two batches (an event whose ``t1`` equals the last ``t1`` of the previous
batch) is still exact, as multisets — events of one tick cannot extend each other's instances — unless a
query of the executor reads a PUBLISHed stream (another query's, or the internal streams of non-left-deep
queries and UNION): then that tick's published events arrive in two parts, out of the oracle's order, and
a reader's first match can differ.  ``engine.publish`` therefore sets such events aside for such classes;
a streaming job holds the last tick instead (``spark_event_stream``).

>>> infos = [query_info("jump", "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock PUBLISH J", {"stock": "Stock"}),
...          query_info("again", "SELECT * FROM J NEXT{$2.Name = $1.Name} Stock", {"stock": "Stock"}, {"J"}),
...          query_info("any", "SELECT * FROM Stock NEXT{$2.Price > $1.Price} Stock", {"stock": "Stock"})]
>>> plan = event_partition_plan(infos, 3)
>>> [(c.id, c.key, c.partitions, c.queries) for c in plan.classes.values()]
[('Name@Stock', 'Name', 3, ('jump', 'again')), ('u0@Stock', None, 1, ('any',))]
>>> key_partition("IBM", 3) == key_partition("IBM", 3), key_partition(None, 3), key_partition(1, 4) == key_partition(1.0, 4)
(True, 0, True)
"""
from __future__ import annotations

import importlib
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import AnalysisError
from sparksub.grammar.event_ast import (
    Aggregate, And, Attr, BinOp, Call, Compare, Const, Dur, Expr, Iteration, Neg, Not, Or, Project, Publish,
    Rename, Scope, Select, Sequence as SeqOp, Stream, StreamExpr, Union,
)
from sparksub.grammar.event_analysis import combine_attributes
from sparksub.operators.events.nfa import assigned_attributes, partition_key

__all__ = [
    "EventQueryInfo", "EventClass", "EventPlan", "query_info", "query_streams", "assigned_attributes",
    "event_components", "component_key", "event_partition_plan", "replica_id", "key_partition",
    "partitions_of", "output_attributes", "unify_types", "output_column", "MatchLayout", "match_layout",
    "matches_to_table", "match_output_schema", "ReplicaBase", "feed_events", "feed_errors", "events_table",
    "rejected_events_table", "error_text", "feed_events_table",
    "EVENT_COLUMN_PREFIX", "FIXED_COLUMNS", "DEFAULT_EXECUTOR",
]

#: Event columns inside a task batch carry this prefix (``replica``, ``seq``, ``t0``, ``t1`` are ours).
EVENT_COLUMN_PREFIX = "ev__"
#: The executor a replica runs unless told otherwise (``module:Class``, NFAEngine's API).
DEFAULT_EXECUTOR = "sparksub.operators.events.batch:BatchEngine"   # FamilyEngine, families a batch at a time
#: The fixed columns of a publish's output (FILTER rows' and match rows'); attributes named like one of
#: them become ``event_<name>``.
FIXED_COLUMNS = ("subscription_id", "op", "value", "seq", "group_id", "reason", "query", "t0", "t1")


# ---------------------------------------------------------------------------------------------------
# What a query reads, publishes and is keyed by
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EventQueryInfo:
    """What planning needs about one registered event query."""

    name: str
    raw_streams: tuple[str, ...]   # event tables it reads (canonical table names, sorted)
    reads: tuple[str, ...]         # streams it reads that other event queries PUBLISH (sorted)
    publishes: tuple[str, ...]     # streams it PUBLISHes itself (top level and nested, in order)
    key: str | None                # nfa.partition_key(query)
    stateful: bool                 # has a NEXT / FOLD (a stateless query fits any partitioning)
    assigns: frozenset = frozenset()  # attributes some operator of it assigns (projections, aggregates, renames)


def query_streams(query: StreamExpr) -> tuple[set[str], tuple[str, ...]]:
    """(names of the streams ``query`` reads from outside, names it PUBLISHes).  A stream it publishes
    and reads itself is internal and not among the first."""
    publishes = tuple(dict.fromkeys(n.name for n in query.walk() if isinstance(n, Publish)))
    return query.streams() - set(publishes), publishes


def query_info(name: str, query: StreamExpr | str, tables: Mapping[str, str],
               published: Iterable[str] = ()) -> EventQueryInfo:
    """The planning facts of one query.  ``tables``: lower-case name -> canonical name of every event
    table (stream names match tables case-insensitively); ``published``: the streams other registered
    queries PUBLISH (matched exactly).  Raises ``AnalysisError`` for a stream that is neither."""
    if isinstance(query, str):
        from sparksub.grammar.events import parse_event_query
        query = parse_event_query(query)
    reads, publishes = query_streams(query)
    published = set(published)
    raw, other = set(), set()
    for s in sorted(reads):
        if s in published:
            other.add(s)
        elif s.lower() in tables:
            raw.add(tables[s.lower()])
        else:
            known = sorted(set(tables.values()) | published)
            raise AnalysisError(f"event query {name!r} reads unknown stream {s!r}: an event query reads event "
                                f"streams (tables without a PRIMARY KEY) or streams other event queries "
                                f"PUBLISH; known: {', '.join(known) or 'none'}")
    stateful = any(isinstance(n, (SeqOp, Iteration)) for n in query.walk())
    return EventQueryInfo(name, tuple(sorted(raw)), tuple(sorted(other)), publishes,
                          partition_key(query) if stateful else None, stateful, assigned_attributes(query))


# ---------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EventClass:
    """Queries that run in the same executors: ``partitions`` replicas (hash of ``key``), or one."""

    id: str
    key: str | None
    partitions: int
    streams: tuple[str, ...]                    # raw event streams its queries read
    queries: tuple[str, ...]                    # registration order
    components: tuple[tuple[str, ...], ...]     # the components placed in it

    def replica_ids(self) -> tuple[str, ...]:
        return tuple(replica_id(self.id, p) for p in range(self.partitions))


@dataclass(frozen=True)
class EventPlan:
    """Classes by id (creation order), each query's class, and the queries whose state restarts."""

    classes: Mapping[str, EventClass] = field(default_factory=dict)
    class_of: Mapping[str, str] = field(default_factory=dict)
    reset: frozenset = frozenset()


def replica_id(class_id: str, partition: int) -> str:
    """The id of one replica (a class's partition): ``events:<class>#<partition>``."""
    return f"events:{class_id}#{partition}"


def event_components(queries: Sequence[EventQueryInfo]) -> list[tuple[str, ...]]:
    """Queries connected through published streams (in registration order, components ordered by their
    first query)."""
    parent = {q.name: q.name for q in queries}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    order = {q.name: i for i, q in enumerate(queries)}
    producer = {s: q.name for q in queries for s in q.publishes}
    for q in queries:
        for s in q.reads:
            if s in producer:
                a, b = sorted((find(q.name), find(producer[s])), key=order.__getitem__)
                if a != b:
                    parent[b] = a               # the root is the component's earliest query
    groups: dict[str, list[str]] = {}
    for q in queries:
        groups.setdefault(find(q.name), []).append(q.name)
    return [tuple(g) for g in groups.values()]


def component_key(members: Sequence[EventQueryInfo]) -> str | None:
    """The attribute a component can be hash-partitioned by: every stateful member's ``partition_key``,
    which no stateless member assigns; None if there is no stateful member or they disagree."""
    keys = {m.key for m in members if m.stateful}
    if len(keys) != 1 or None in keys:
        return None
    (key,) = keys
    return None if any(key in m.assigns for m in members if not m.stateful) else key


def event_partition_plan(queries: Sequence[EventQueryInfo], partitions: int,
                         previous: EventPlan | None = None) -> EventPlan:
    """Place ``queries`` (registration order) into classes (see the module docstring).  ``partitions``
    (≥ 1) is the partition count of new keyed classes and the most unkeyed groups per stream set;
    ``previous`` keeps every component that can stay where it was."""
    partitions = max(1, int(partitions))
    info = {q.name: q for q in queries}
    prev_of = dict(previous.class_of) if previous else {}
    prev_classes = dict(previous.classes) if previous else {}
    built: dict[str, dict] = {}

    def streams_of(comp):
        if len(comp) == 1:                   # (most components: a query alone; raw_streams is sorted)
            return info[comp[0]].raw_streams
        return tuple(sorted({s for q in comp for s in info[q].raw_streams}))

    def key_of(comp):
        if len(comp) == 1:
            m = info[comp[0]]
            return m.key if m.stateful else None
        return component_key([info[q] for q in comp])

    def fits(cid, key, streams):
        c = built.get(cid) or prev_classes.get(cid)
        return c is not None and tuple(c["streams"] if isinstance(c, dict) else c.streams) == streams and \
            (c["key"] if isinstance(c, dict) else c.key) in (None, key)

    def place(cid, key, n, streams, comp):
        c = built.setdefault(cid, {"key": key, "partitions": n, "streams": streams, "components": [], "size": 0})
        c["components"].append(comp)
        c["size"] += len(comp)

    comps = event_components(queries)
    placed: dict[tuple, str] = {}
    later = []
    for comp in comps:                       # 1: components that stay in their class
        key, streams = key_of(comp), streams_of(comp)
        if len(comp) == 1:
            votes = ((prev_of[comp[0]], 1),) if comp[0] in prev_of else ()
        else:
            votes = Counter(prev_of[q] for q in comp if q in prev_of).most_common()
        stay = next((cid for cid, _ in votes if fits(cid, key, streams)), None)
        if stay is None:
            later.append((comp, key, streams))
            continue
        old = prev_classes[stay]
        place(stay, old.key, old.partitions, streams, comp)
        placed[comp] = stay
    for comp, key, streams in later:         # 2: new or moving components
        tag = "+".join(streams) or "-"
        if key is not None:
            cid = f"{key}@{tag}"
            place(cid, key, built[cid]["partitions"] if cid in built else partitions, streams, comp)
        else:
            groups = [cid for cid, c in built.items() if c["key"] is None and c["streams"] == streams]
            if len(groups) < partitions:
                k = 0
                while f"u{k}@{tag}" in built:
                    k += 1
                cid = f"u{k}@{tag}"
            else:
                cid = min(groups, key=lambda g: built[g]["size"])
            place(cid, None, 1, streams, comp)
        placed[comp] = cid
    order = {q.name: i for i, q in enumerate(queries)}
    classes = {}
    for cid, c in built.items():
        members = tuple(sorted((q for comp in c["components"] for q in comp), key=order.__getitem__))
        classes[cid] = EventClass(cid, c["key"], c["partitions"], c["streams"], members, tuple(c["components"]))
    class_of = {q: cid for comp, cid in placed.items() for q in comp}
    reset = frozenset(q for q, cid in class_of.items() if q in prev_of and prev_of[q] != cid)
    return EventPlan(classes, class_of, reset)


# ---------------------------------------------------------------------------------------------------
# Routing
# ---------------------------------------------------------------------------------------------------

def _canonical(v: Any) -> bytes:
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, float):
        if v != v:
            return b"f:nan"
        if v.is_integer() and abs(v) < 2.0 ** 63:
            v = int(v)
        else:
            return b"f:" + repr(v).encode()
    if isinstance(v, int):
        return b"i:" + str(v).encode()
    if isinstance(v, str):
        return b"s:" + v.encode("utf-8", "surrogatepass")
    return b"o:" + repr(v).encode()


def key_partition(value: Any, partitions: int) -> int:
    """The partition (0 .. partitions-1) of an event whose key attribute has ``value``: CRC-32 of a
    canonical encoding (stable across processes and runs; equal numbers hash alike), NULL -> 0."""
    if partitions <= 1 or value is None:
        return 0
    return zlib.crc32(_canonical(value)) % partitions


def partitions_of(values: Iterable[Any], partitions: int) -> np.ndarray:
    """:func:`key_partition` of each value (memoised per distinct value), as int64."""
    memo: dict = {}
    out = []
    for v in values:
        try:
            p = memo[v]
        except KeyError:
            p = memo[v] = key_partition(v, partitions)
        except TypeError:                       # unhashable: no memo
            p = key_partition(v, partitions)
        out.append(p)
    return np.asarray(out, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------
# Output attributes and their types
# ---------------------------------------------------------------------------------------------------

_NUMERIC = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)


def _numeric(t: pa.DataType) -> bool:
    return any(f(t) for f in _NUMERIC)


def unify_types(*types: pa.DataType) -> pa.DataType:
    """The common type: equal types stay, NULL (unknown) gives way, numeric types widen to DOUBLE,
    anything else to STRING."""
    out = pa.null()
    for t in types:
        if pa.types.is_null(t) or t == out:
            continue
        if pa.types.is_null(out):
            out = t
        elif _numeric(out) and _numeric(t):
            out = pa.float64()
        else:
            out = pa.string()
    return out


_FUNCTION_TYPES = {"contains": pa.bool_(), "lower": pa.string(), "upper": pa.string(), "length": pa.float64(),
                   "abs": pa.float64()}


def _expr_type(e: Expr, scopes: Mapping[Scope, Mapping[str, pa.DataType]]) -> pa.DataType:
    if isinstance(e, Const):
        v = e.value
        if v is None:
            return pa.null()
        if isinstance(v, bool):
            return pa.bool_()
        return pa.float64() if isinstance(v, (int, float)) else pa.string()
    if isinstance(e, Attr):
        return scopes.get(e.scope, {}).get(e.name, pa.null())
    if isinstance(e, (Compare, And, Or, Not, Dur)):
        return pa.bool_()
    if isinstance(e, Neg):
        t = _expr_type(e.operand, scopes)
        return pa.float64() if pa.types.is_null(t) or _numeric(t) else pa.string()
    if isinstance(e, BinOp):
        a, b = _expr_type(e.left, scopes), _expr_type(e.right, scopes)
        return pa.string() if pa.types.is_string(a) or pa.types.is_string(b) else pa.float64()
    if isinstance(e, Call):
        return _FUNCTION_TYPES.get(e.name.lower(), pa.string())
    return pa.string()


def output_attributes(query: StreamExpr, streams: Mapping[str, Mapping[str, pa.DataType]],
                      published: dict | None = None) -> dict[str, pa.DataType]:
    """The attributes of ``query``'s output events, in the order the executor emits them, with their
    types (see the module docstring).  ``streams``: stream name -> {attribute: type} (raw streams by the
    name the query uses, and published streams); ``published``, if given, receives the types of every
    stream a PUBLISH inside ``query`` names."""
    env = dict(streams)

    def go(q: StreamExpr) -> dict[str, pa.DataType]:
        if isinstance(q, Stream):
            return dict(env.get(q.name, {}))
        if isinstance(q, Select):
            return go(q.input)
        if isinstance(q, Publish):
            out = go(q.input)
            env[q.name] = out
            if published is not None:
                published[q.name] = out
            return out
        if isinstance(q, Project):
            inp = go(q.input)
            return {i.name: _expr_type(i.expr, {Scope.PLAIN: inp}) for i in q.items}
        if isinstance(q, Aggregate):
            inp = go(q.input)
            return {**inp, **{i.name: _expr_type(i.expr, {Scope.PLAIN: inp}) for i in q.items}}
        if isinstance(q, Rename):
            m = dict(q.mapping)
            return {m.get(a, a): t for a, t in go(q.input).items()}
        if isinstance(q, Union):
            left, right = go(q.left), go(q.right)
            return {a: unify_types(left.get(a, pa.null()), right.get(a, pa.null())) for a in {**left, **right}}
        if isinstance(q, (SeqOp, Iteration)):
            left, right = go(q.left), go(q.right)
            out = combine_attributes(left, right)
            if isinstance(q, Iteration) and q.aggregates:
                last = {a: unify_types(left.get(a, pa.null()), right.get(a, pa.null())) for a in {**left, **right}}
                aggs: dict[str, pa.DataType] = {}
                for _ in range(2):          # $.x may read an aggregate: once more with their types
                    scopes = {Scope.LEFT: left, Scope.RIGHT: right, Scope.PLAIN: right,
                              Scope.LAST: {**last, **aggs}}
                    aggs = {i.name: unify_types(aggs.get(i.name, pa.null()), _expr_type(i.expr, scopes))
                            for i in q.aggregates}
                out = {**out, **{a: unify_types(out.get(a, pa.null()), t) if a in left else t
                                 for a, t in aggs.items()}}
            return out
        raise TypeError(f"not a stream expression: {q!r}")
    return go(query)


def output_column(attribute: str) -> str:
    """The output column of an attribute: its name, or ``event_<name>`` for one of :data:`FIXED_COLUMNS`."""
    return f"event_{attribute}" if attribute in FIXED_COLUMNS else attribute


# ---------------------------------------------------------------------------------------------------
# Match rows
# ---------------------------------------------------------------------------------------------------

_HEAD = [("subscription_id", pa.string()), ("op", pa.string()), ("value", pa.float64()), ("seq", pa.int64()),
         ("group_id", pa.string()), ("reason", pa.string()), ("query", pa.string())]
_TAIL = [("t0", pa.int64()), ("t1", pa.int64())]


def match_dicts(output: pa.Table, name: str, attributes) -> list[dict]:
    """The matches of event query ``name`` among one publish's ``output`` rows (``op = 'match'``), in the
    order ``Engine.matches`` gives: by ``t1`` and, for equal ``t1``, by partition (stable: a partition's rows
    in its executor's order); each a dict of the query's ``attributes`` (as it names them), ``t0`` and ``t1``."""
    if "query" not in output.column_names:
        return []
    mine = pc.and_(pc.equal(output.column("op"), "match"), pc.equal(output.column("query"), name))
    rows = output.filter(pc.fill_null(mine, False)).to_pylist()
    rows.sort(key=lambda r: (r["t1"], int(str(r["group_id"]).rsplit("#", 1)[1])))
    columns = [(a, output_column(a)) for a in attributes]
    return [{**{a: r.get(col) for a, col in columns}, "t0": r["t0"], "t1": r["t1"]} for r in rows]


@dataclass(frozen=True)
class MatchLayout:
    """Where the matches of a set of queries go: ``attributes`` (the attribute columns, in order, typed)
    and, per query, its ``(attribute, column)`` pairs in its output order."""

    attributes: pa.Schema
    columns: Mapping[str, tuple[tuple[str, str], ...]]

    def schema(self) -> pa.Schema:
        """The full output schema: :func:`match_output_schema`."""
        return match_output_schema(self)


def match_layout(queries: Mapping[str, Mapping[str, pa.DataType]],
                 base: Sequence[tuple[str, pa.DataType]] = ()) -> MatchLayout:
    """The layout of the matches of ``queries`` (name -> output attributes, from :func:`output_attributes`).
    ``base``: columns the output has anyway (an event stream's columns, which FILTER rows carry), first and
    typed together with the attributes of the same column name."""
    types: dict[str, pa.DataType] = {}
    for c, t in base:
        types[output_column(c)] = t
    columns = {}
    for q, attrs in queries.items():
        pairs = []
        for a, t in attrs.items():
            col = output_column(a)
            types[col] = unify_types(types.get(col, pa.null()), t)
            pairs.append((a, col))
        columns[q] = tuple(pairs)
    fields = [pa.field(c, pa.string() if pa.types.is_null(t) else t) for c, t in types.items()]
    return MatchLayout(pa.schema(fields), columns)


def match_output_schema(layout: MatchLayout) -> pa.Schema:
    """``subscription_id, op, value, seq, group_id, reason, query``, the attribute columns, ``t0, t1``:
    the event-query part of a publish's output (FILTER rows' columns first, so both union by name)."""
    return pa.schema(_HEAD + [(f.name, f.type) for f in layout.attributes] + _TAIL)


def _fit(v: Any, t: pa.DataType):
    """(value in type ``t``, None) or (None, problem)."""
    if v is None:
        return None, None
    if pa.types.is_floating(t):
        if isinstance(v, (int, float)):
            return float(v), None
    elif pa.types.is_integer(t):
        if isinstance(v, int):
            return int(v), None
        if isinstance(v, float) and v.is_integer():
            return int(v), None
    elif pa.types.is_string(t):
        if isinstance(v, str):
            return v, None
        if isinstance(v, bool):
            return ("true" if v else "false"), None
        return str(v), None
    elif pa.types.is_boolean(t):
        if isinstance(v, bool):
            return v, None
    else:                               # timestamps, dates, decimals: pyarrow checks
        return v, None
    return None, f"value {v!r} does not fit {t}"


def matches_to_table(matches: Iterable, layout: MatchLayout, group_id: str | None = None,
                     schema: pa.Schema | None = None) -> pa.Table:
    """Match rows (``op = 'match'``): ``matches`` are ``(query, event)`` pairs (``nfa.Match``), the event
    a dict of attributes plus ``t0``/``t1``.  Values that do not fit their column are NULL, with the
    problem in ``reason``."""
    schema = schema or layout.schema()
    cols: dict[str, list] = {f.name: [] for f in schema}
    types = {f.name: f.type for f in schema}
    n = 0
    for query, event in matches:
        row = dict.fromkeys(cols)
        problems = []
        for a, c in layout.columns.get(query, ()):
            v, bad = _fit(event.get(a), types[c])
            row[c] = v
            if bad:
                problems.append(f"attribute {a}: {bad}")
        row.update(op="match", group_id=group_id, query=query, t0=event.get("t0"), t1=event.get("t1"),
                   reason="; ".join(problems) or None)
        for c in cols:
            cols[c].append(row[c])
        n += 1
    return pa.table({c: pa.array(v, types[c]) for c, v in cols.items()}, schema=schema)


# ---------------------------------------------------------------------------------------------------
# Replicas: base + batches of events
# ---------------------------------------------------------------------------------------------------

@dataclass
class ReplicaBase:
    """How to rebuild one replica's executor anywhere: the class's queries (registration order: each a
    (name, AST) pair, or a ``bulk.TemplateRows`` -- many queries of one template, registered together by
    ``register_template`` where the executor has it), the executor's options and import path, and its
    run-time state (``snapshot()``) or None."""

    queries: tuple
    snapshot: bytes | None = None
    options: dict = field(default_factory=dict)
    executor: str = DEFAULT_EXECUTOR

    def build(self):
        """A fresh executor with the queries registered and the snapshot restored."""
        module, _, cls = self.executor.partition(":")
        ex = getattr(importlib.import_module(module), cls)(**self.options)
        for item in self.queries:
            if isinstance(item, tuple):
                ex.register(*item)
            else:
                register_rows(ex, item)
        if self.snapshot is not None:
            ex.restore(self.snapshot)
        return ex


def register_rows(executor, rows) -> None:
    """Register the queries of a ``bulk.TemplateRows`` into ``executor``: in bulk (``register_template``,
    one analysis per family) where it can, else one by one."""
    bound = rows.bind()
    bulk = getattr(executor, "register_template", None)
    if bulk is not None:
        bulk(bound)
        return
    for name, query in zip(bound.names, bound.queries):
        executor.register(name, query)


def events_table(columns: Mapping[str, pa.Array], t0, t1, seq) -> pa.Table:
    """A batch of events as tasks and replica logs hold it: ``seq``, ``t0``, ``t1`` and each event
    column under :data:`EVENT_COLUMN_PREFIX`."""
    data = {"seq": pa.array(seq, pa.int64()), "t0": pa.array(t0, pa.int64()), "t1": pa.array(t1, pa.int64())}
    data.update({EVENT_COLUMN_PREFIX + c: v for c, v in columns.items()})
    return pa.table(data)


def feed_errors(executor) -> list:
    """The executor's evaluation errors since the last call (``nfa.NFAEngine.take_errors``; none for an
    executor class of the caller's without it)."""
    take = getattr(executor, "take_errors", None)
    return take() if take is not None else []


def feed_events(executor, streams: Sequence[str], events: pa.Table, errors: list | None = None) -> list:
    """Feed a batch (:func:`events_table` columns) to ``executor`` in (t1, seq) order, each event under
    every name in ``streams`` (the spellings its queries use for the table), then ``flush()``.  Returns
    the matches (``nfa.Match``), in release order.

    A run-time evaluation error belongs to the query that raised it (DESIGN §7): the executor charges it
    to that query alone (``nfa.EventError``: the event was dropped for that query at the operator that
    raised) and goes on, so every other query of the replica — sharing its stream, its static index, its
    family — keeps the event.  ``errors``: a list that receives ``(position in the sorted batch, EventError)``
    for each (position None: charged while the last tick closed, at ``flush()``); without it they are
    dropped (a replay).  Anything else the executor raises propagates (the replica failed)."""
    batch = getattr(executor, "process_batch", None)
    if batch is not None:                      # the batch executor: the whole batch at once (issue 18)
        out, tail = _feed_batch(executor, lambda got: batch(streams, _attribute_table(events), got,
                                                             seq=events.column("seq")), errors)
        return out + tail
    if events.num_rows:
        events = events.sort_by([("t1", "ascending"), ("seq", "ascending")])
    names = [c for c in events.column_names if c.startswith(EVENT_COLUMN_PREFIX)]
    attrs = [c[len(EVENT_COLUMN_PREFIX):] for c in names]
    values = [events.column(c).to_pylist() for c in names]
    t0s, t1s = events.column("t0").to_pylist(), events.column("t1").to_pylist()
    out = []
    feed_errors(executor)                      # nothing of an earlier, failed batch
    for i in range(events.num_rows):
        ev = {a: v[i] for a, v in zip(attrs, values)}
        ev["t0"], ev["t1"] = t0s[i], t1s[i]
        for s in streams:
            out.extend(executor.process(s, ev))
        for err in feed_errors(executor):
            if errors is not None:
                errors.append((i, err))
    out.extend(executor.flush())
    for err in feed_errors(executor):
        if errors is not None:
            errors.append((None, err))
    return out


def _attribute_table(events: pa.Table) -> pa.Table:
    """An :func:`events_table` batch as the batch executor takes it: the event columns without their
    prefix, ``t0`` and ``t1`` (``seq`` apart: an event may have an attribute of that name)."""
    cols = {c[len(EVENT_COLUMN_PREFIX):]: events.column(c) for c in events.column_names
            if c.startswith(EVENT_COLUMN_PREFIX)}
    cols.update(t0=events.column("t0"), t1=events.column("t1"))
    return pa.table(cols)


def feed_events_table(executor, streams: Sequence[str], events: pa.Table, layout: MatchLayout,
                      group_id: str | None = None, schema: pa.Schema | None = None,
                      errors: list | None = None) -> pa.Table:
    """:func:`feed_events` with the matches as match rows (:func:`matches_to_table`): the batch executor
    builds them as columns from the batch (``BatchEngine.process_table``), any other executor's matches
    are converted.  ``errors`` as for :func:`feed_events`."""
    schema = schema or layout.schema()
    table = getattr(executor, "process_table", None)
    if table is None:
        return matches_to_table(feed_events(executor, streams, events, errors), layout, group_id, schema)
    out, tail = _feed_batch(executor, lambda got: table(streams, _attribute_table(events), layout, group_id,
                                                         schema, got, seq=events.column("seq")), errors)
    return pa.concat_tables([out, matches_to_table(tail, layout, group_id, schema)]) if tail else out


def _feed_batch(executor, call, errors: list | None):
    """A batch executor's call ``call(errors list)``, then ``flush()``: (its result, the flushed matches);
    ``errors`` as for :func:`feed_events` (nothing of an earlier, failed batch)."""
    feed_errors(executor)
    got: list = []
    out = call(got)
    tail = executor.flush()
    flushed = feed_errors(executor)
    if errors is not None:
        errors.extend(got)
        errors.extend((None, err) for err in flushed)
    return out, tail


def rejected_events_table(events: pa.Table, errors: Sequence, schema: pa.Schema, group_id: str | None = None) -> pa.Table:
    """``op = 'rejected'`` rows (``schema``: :func:`match_output_schema`) for the errors of a batch fed by
    :func:`feed_events` (``(position in the sorted batch or None, error)``): the event at that position
    (its ``seq``, ``t0``/``t1``, columns under :func:`output_column` names), the error as ``reason``, and
    for an ``nfa.EventError`` the query it was charged to as ``query`` (the event was rejected for that
    query alone); without a position, the interval of the (published) event evaluated."""
    if events.num_rows:
        events = events.sort_by([("t1", "ascending"), ("seq", "ascending")])
    n = len(errors)
    data = {f.name: pa.nulls(n, f.type) for f in schema}
    charged = [getattr(e, "query", None) for _, e in errors]
    data.update(op=pa.array(["rejected"] * n, pa.string()), group_id=pa.array([group_id] * n, pa.string()),
                query=pa.array(charged, pa.string()),
                reason=pa.array([error_text(e) for _, e in errors], pa.string()))
    at = [i for i, _ in errors]
    known = [k for k, i in enumerate(at) if i is not None]
    picked = events.take(pa.array([at[k] for k in known], pa.int64()))

    def spread(col: pa.Array, t: pa.DataType, fill=None) -> pa.Array:
        """``col`` (one value per known position) at those rows, ``fill(row)`` or NULL elsewhere."""
        vals = iter(col.cast(t).to_pylist())
        return pa.array([next(vals) if i is not None else (fill(k) if fill else None) for k, i in enumerate(at)], t)
    data["seq"] = spread(picked.column("seq"), pa.int64())
    for c in ("t0", "t1"):
        data[c] = spread(picked.column(c), pa.int64(), lambda k, c=c: getattr(errors[k][1], c, None))
    for c in picked.column_names:
        if c.startswith(EVENT_COLUMN_PREFIX):
            col = output_column(c[len(EVENT_COLUMN_PREFIX):])
            if col in data:
                data[col] = spread(picked.column(c), schema.field(col).type)
    return pa.table(data, schema=schema)


def error_text(err) -> str:
    """The reason of a rejected row: an ``nfa.EventError`` names its query, anything else its type."""
    if hasattr(err, "query") and hasattr(err, "message"):        # nfa.EventError
        return f"event query {err.query!r} raised on this event ({err.stream}, t1={err.t1}): {err.message}"
    return f"{type(err).__name__}: {err}"
