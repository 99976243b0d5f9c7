"""Event queries (the EVENT class) as the engine keeps them: registration and replanning into event classes
(``operators/events/partitions.py``), their replicas and logs, the event part of a publish and EXPLAIN of a query.
A part of the Engine facade (``engine.py``) -- the methods read and change the engine's state."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparksub.errors import (AnalysisError, DuplicateSubscription, InvalidSubscription, SparksubError, UnknownSubscription)
from sparksub.grammar.event_ast import StreamExpr
from sparksub.planner.catalog import TableDef
from sparksub.operators.events import partitions as evp
from sparksub.operators.events.family import query_text
from sparksub.operators.registry import EVENTS
from sparksub.operators.shared.schemas import (EVENT_PREFIX, spark_type_name)
from sparksub.runtime import events as spark_events
from sparksub.runtime import frames as spark_frames
from sparksub.runtime import replicas as spark_replicas
from sparksub.runtime import stream_control
from sparksub.control.groups import TableState
from sparksub.control.inputs import arrow_type


#: Events logged per event-query replica before its base is rebuilt from a snapshot of its executor.
EVENT_LOG_COMPACTION = 20_000


@dataclass
class EventQueryRecord:
    """One registered event query: its text and AST, the automata (for EXPLAIN), what planning needs,
    its output attributes (name -> Arrow type) and the streams it PUBLISHes with their attributes."""
    name: str
    text: str
    query: StreamExpr
    compiled: object  # nfa.CompiledQuery
    info: evp.EventQueryInfo
    attributes: dict
    published: dict
    raw_spellings: tuple  # the names under which it reads event tables (as written)
    reads_published: bool = False  # it reads a PUBLISHed stream (another query's, or its own internal ones)


@dataclass
class EventQueryBatch:
    """One ``register_event_queries`` call: the template (as written) and its rows bound to it
    (``bulk.BoundTemplate``: the parameter columns and the query names), the schemas its queries were
    analysed against and the ``seconds_per_tick`` then in force (what compiling a row's automaton needs)."""
    id: str
    text: str
    bound: object  # bulk.BoundTemplate
    schemas: dict
    seconds_per_tick: float


class _BatchPart:
    """The rows of a batch of one kind signature (``bulk.analysed_parts``): the analysed template and
    ``build(values) -> analysed query``."""
    __slots__ = ("template", "build")

    def __init__(self, template: StreamExpr, build):
        self.template, self.build = template, build


class BulkEventQueryRecord:
    """An event query of a bulk registration: what ``EventQueryRecord`` holds, with its analysed AST, text and
    automata built from its row when first read (registration never builds most of them).  The planning
    facts, output attributes and streams are its kind signature's (the same for every row of it)."""
    __slots__ = ("name", "batch", "row", "part", "info", "attributes", "published", "raw_spellings",
                 "reads_published", "_query", "_compiled")

    def __init__(self, name, batch: EventQueryBatch, row: int, part: _BatchPart, info, attributes, published,
                 raw_spellings, reads_published, query=None, compiled=None):
        self.name, self.batch, self.row, self.part = name, batch, row, part
        self.info, self.attributes, self.published = info, attributes, published
        self.raw_spellings, self.reads_published = raw_spellings, reads_published
        self._query, self._compiled = query, compiled

    @property
    def text(self) -> str:
        """The row's query as CEL: the template with the row's values in place of its parameters."""
        bound = self.batch.bound
        return query_text(bound.build(bound.values(self.row)))

    @property
    def query(self) -> StreamExpr:
        if self._query is None:
            self._query = self.part.build(self.batch.bound.values(self.row))
        return self._query

    @property
    def compiled(self):
        if self._compiled is None:
            from sparksub.operators.events.nfa import compile_query
            self._compiled = compile_query(self.name, self.query, schemas=self.batch.schemas,
                                           seconds_per_tick=self.batch.seconds_per_tick)
        return self._compiled


def _rows_of(params) -> dict[str, list]:
    """A parameter table as column -> values: a pyarrow Table / RecordBatch, a pandas DataFrame, a mapping of
    column -> sequence, or a list of dicts (one per query, each with the same keys)."""
    if hasattr(params, "column_names") and hasattr(params, "column"):          # pyarrow
        return {c: params.column(c).to_pylist() for c in params.column_names}
    if hasattr(params, "columns") and hasattr(params, "to_dict") and hasattr(params, "iloc"):   # pandas
        return {str(c): params[c].tolist() for c in params.columns}
    if isinstance(params, (list, tuple)) and all(isinstance(r, dict) for r in params):
        keys = list(dict.fromkeys(k for r in params for k in r))
        for i, r in enumerate(params):
            missing = [k for k in keys if k not in r]
            if missing:
                raise AnalysisError(f"row {i}: no value for column{'s' if len(missing) > 1 else ''} "
                                    f"{', '.join(map(repr, missing))} (the rows of a list of dicts need the same "
                                    f"keys)")
        return {k: [r[k] for r in params] for k in keys}
    if hasattr(params, "items"):
        return dict(params.items())
    raise InvalidSubscription(f"the parameter table is a pyarrow Table, a pandas DataFrame, a mapping of column -> "
                              f"values or a list of dicts, got {type(params).__name__}")


@dataclass
class EventClassState:
    """An event class (``event_partitions.EventClass``) as it runs: one replica per partition, the
    largest t1 fed to it (events of all its streams arrive in end-time order), counters."""
    cls: evp.EventClass
    replicas: dict
    tick: int | None = None
    failures: int = 0
    rejected: int = 0


def _rename_event_columns(df, tdef: TableDef):
    """Event columns (and a join's selected columns, which travel alike) get their names; one that collides
    with ours becomes ``event_<name>``."""
    ours = {c for c in df.columns if not c.startswith(EVENT_PREFIX)}
    for c in df.columns:
        if c.startswith(EVENT_PREFIX):
            name = c[len(EVENT_PREFIX):]
            df = df.withColumnRenamed(c, name if name not in ours else f"event_{name}")
    return df


def _some(names, shown: int = 20) -> str:
    """Names for a description: all of a few, the first ``shown`` of many (a bulk registration: 100,000)."""
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", ... {len(names) - shown} more"


def _base_items(queries, records: dict) -> tuple:
    """``queries`` (in order) as a replica base registers them: a (name, AST) pair each, but a run of
    queries of one bulk registration and kind signature is one ``bulk.TemplateRows`` (its analysed template
    and those rows' values: nothing per query to build, pickle or analyse)."""
    from sparksub.operators.events.bulk import TemplateRows
    out: list = []
    run: list = []

    def flush():
        if run:
            head = run[0]
            cols = head.batch.bound.columns
            rows = [r.row for r in run]
            out.append(TemplateRows(head.part.template, {p: [cols[p][i] for i in rows] for p in cols},
                                    [r.name for r in run]))
            run.clear()

    for q in queries:
        rec = records[q]
        if isinstance(rec, BulkEventQueryRecord):
            if run and run[0].part is not rec.part:
                flush()
            run.append(rec)
            continue
        flush()
        out.append((q, rec.query))
    flush()
    return tuple(out)


class EventQueries:
    """The Engine's event queries (a mixin of ``engine.Engine``: its methods use the engine's state)."""

    # ---- event queries (the EVENT class: Cayuga, issue 6) ---------------------------------------------
    def register_event_query(self, name: str, query: str | StreamExpr, *, text: str | None = None) -> None:
        """Register an event query (CEL or algebra text, or an ``event_ast`` expression); same as
        ``CREATE EVENT QUERY name AS <text>``.

        Validated before anything changes (DESIGN §7): a name used by another event query or subscription,
        a parse error (line, column, caret), a stream that is neither an event table (a table without a
        PRIMARY KEY) nor PUBLISHed by a registered event query, a PUBLISH of a name already taken (a table,
        another query's stream), an unsupported shape (UNION), an unknown function.  Then only the query's
        event class is rebuilt (``event_partitions.event_partition_plan``): the queries of other classes
        are untouched and those of its class keep their partial matches (the new query is registered into
        each partition's live executor); the new query starts empty — save that, as Cayuga's merged states,
        it shares the partial matches of an equal prefix already in progress.  Its matches start with the
        next ``publish``."""
        from sparksub.grammar.events import parse_event_query
        from sparksub.operators.events.nfa import NFAEngine
        if not isinstance(name, str) or not name:
            raise InvalidSubscription(f"event query names are non-empty strings, got {name!r}")
        with self._lock:
            if name in self._event_queries:
                raise DuplicateSubscription(f"event query {name!r} already exists")
            if name in self._records or self._find_group(name, required=False) is not None:
                raise DuplicateSubscription(f"{name!r} is already a subscription")
            source = query if isinstance(query, str) else None   # what a reopen parses again (journal.py)
            if isinstance(query, str):
                text = query if text is None else text
                query = parse_event_query(query)
            elif not isinstance(query, StreamExpr):
                raise InvalidSubscription(f"an event query is CEL / algebra text or an event_ast expression, "
                                          f"got {type(query).__name__}")
            text = text if text is not None else query_text(query)
            record = self._event_record(name, text, query)
            NFAEngine(**self._event_options()).register(name, record.query)   # what the executor refuses
            self._check_event_streams(record.raw_spellings, f"CREATE EVENT QUERY {name}")
            records = {**self._event_queries, name: record}
            plan = evp.event_partition_plan([r.info for r in records.values()], self._event_partition_count(),
                                            self._event_plan)
            classes, superseded = self._event_rebuild(plan, records)
            # commit
            self._journal.register_event_query(name, text, source or query_text(query), plan, classes)
            self._event_queries = records
            self._commit_event_plan(plan, classes, superseded)
            self._stale_event_streams(record.raw_spellings, f"CREATE EVENT QUERY {name}")

    def register_event_queries(self, template: str | StreamExpr, params, names=None, *,
                               prefix: str | None = None) -> int:
        """Register one event query per row of ``params`` against ``template``, CEL (or algebra) text whose
        constants may be parameters ``:name`` (``grammar.events.parse_template``, ``docs/events.md``) -- the
        analogue of ``subscribe_many`` for event queries (issue 18 item 2).  Returns how many.

        ``params``: one column per parameter (named without the colon), one row per query -- a pyarrow Table,
        a pandas DataFrame, a mapping column -> values, or a list of dicts.  The queries' names: ``names``, a
        list (one per row) or the name of a column of ``params``; by default the ``name`` column; or, with
        ``prefix="alert"`` and no ``name`` column, ``alert_0``, ``alert_1``, ...  Each query is then an event
        query as ``CREATE EVENT QUERY`` makes one: SHOW lists it, ``matches(name)`` reads its matches, DROP
        EVENT QUERY drops it alone.

        The template is parsed once.  The first row of each kind signature (numbers, strings, booleans per
        parameter) is checked fully, as ``CREATE EVENT QUERY`` checks a query (the same errors, the row
        named); the others are derived from the template analysed once for that signature
        (``bulk.analysed_parts``), with every value checked (a NULL, NaN, infinite or non-scalar value, a
        negative DUR bound, a name missing, empty, repeated or already taken raise ``AnalysisError`` /
        ``DuplicateSubscription`` naming the row and the column).  All or nothing: on any error nothing
        changes.  One journal record holds the template, the parameter table and the names, and a durable
        engine reopens them through the same bulk path (no per-query parsing).  The executors register them
        by family (``BatchEngine.register_template``): 100,000 queries take seconds."""
        with self._lock:
            batch, records = self._event_batch(template, params, names, prefix)
            if not records:
                return 0
            first = next(iter(records.values()))
            what = f"register_event_queries ({len(records)} queries, {first.name!r} first)"
            self._check_event_streams(first.raw_spellings, what)
            merged = {**self._event_queries, **records}
            plan = evp.event_partition_plan([r.info for r in merged.values()], self._event_partition_count(),
                                            self._event_plan)
            classes, superseded = self._event_rebuild(plan, merged)
            # commit
            self._journal.register_event_queries(batch.text, batch.bound.columns, list(records), plan, classes)
            self._event_queries = merged
            self._commit_event_plan(plan, classes, superseded)
            self._stale_event_streams(first.raw_spellings, what)
            return len(records)

    def _event_batch(self, template, params, names=None, prefix: str | None = None, *,
                     replaying: bool = False) -> tuple[EventQueryBatch, dict]:
        """The records of a bulk registration (``register_event_queries``), checked against the catalog and
        the registered queries; nothing of the engine changes here.  ``replaying``: a reopen (the journal
        checked the names then)."""
        from sparksub.grammar.event_analysis import analyse_query
        from sparksub.grammar.events import parse_template
        from sparksub.operators.events.bulk import analysed_parts, bind_event_template
        from sparksub.operators.events.nfa import NFAEngine
        if isinstance(template, str):
            text, ast = template, parse_template(template)
        elif isinstance(template, StreamExpr):
            text, ast = None, template
        else:
            raise InvalidSubscription(f"an event-query template is CEL / algebra text or an event_ast expression, "
                                      f"got {type(template).__name__}")
        columns = _rows_of(params)
        if names is None:
            if "name" in columns:
                names = "name"
            elif prefix is not None:
                if not isinstance(prefix, str) or not prefix:
                    raise InvalidSubscription(f"prefix={prefix!r}: a non-empty string")
                n = len(next(iter(columns.values()), ()))
                names = [f"{prefix}_{i}" for i in range(n)]
            else:
                raise InvalidSubscription("register_event_queries needs the queries' names: a 'name' column in "
                                          "params, names=[...] or names='<column>', or prefix='<name>' for "
                                          "<name>_0, <name>_1, ...")
        elif prefix is not None:
            raise InvalidSubscription("give names or prefix, not both")
        bound = bind_event_template(ast, columns, names=names)
        if text is None:
            text = query_text(ast)
        batch = EventQueryBatch(uuid.uuid4().hex, text, bound, {}, self.event_seconds_per_tick)
        if not len(bound):
            return batch, {}
        names = bound.names
        _, publishes = evp.query_streams(ast)
        if publishes and len(bound) > 1:
            raise AnalysisError(f"{bound.describe_row(1)}: the template PUBLISHes {publishes[0]!r}, which row 0 "
                                f"publishes too (a stream has one publisher): register queries that PUBLISH "
                                f"one by one (CREATE EVENT QUERY)")
        if not replaying:
            self._check_batch_names(bound)

        def checked(i: int):
            """Row i through the path of CREATE EVENT QUERY (``_event_record``), its errors naming the row."""
            try:
                record = self._event_record(names[i], text, bound[i])
                NFAEngine(**self._event_options()).register(names[i], record.query)
            except (AnalysisError, InvalidSubscription) as err:
                raise type(err)(f"{bound.describe_row(i)}: {err}") from None
            return record

        first = checked(0)
        publishers = self._event_publishers()
        reads, _ = evp.query_streams(ast)
        env = self._event_env(reads, publishers)
        batch.schemas = {s: list(a) for s, a in env.items()}
        records: dict = {}
        for rows, analysed, build in analysed_parts(bound, lambda q, x: analyse_query(x, env, name=q).query):
            head = first if rows[0] == 0 else checked(rows[0])
            if analysed is None:                        # no placeholder fits these kinds: one by one
                for i in rows:
                    records[names[i]] = head if i == rows[0] else checked(i)
                continue
            part = _BatchPart(analysed, build)
            info = head.info.__dict__
            make_info = evp.EventQueryInfo.__new__
            for i in rows:
                q = names[i]
                if i == rows[0]:
                    records[q] = BulkEventQueryRecord(q, batch, i, part, head.info, head.attributes, head.published,
                                                      head.raw_spellings, head.reads_published, head.query,
                                                      head.compiled)
                    continue
                rec_info = make_info(evp.EventQueryInfo)
                rec_info.__dict__.update(info, name=q)
                records[q] = BulkEventQueryRecord(q, batch, i, part, rec_info, head.attributes, head.published,
                                                  head.raw_spellings, head.reads_published)
        return batch, {q: records[q] for q in names}

    def _check_batch_names(self, bound) -> None:
        """The names of a bulk registration against the event queries and subscriptions (one namespace)."""
        names = bound.names
        for i, q in enumerate(names):
            if q in self._event_queries:
                raise DuplicateSubscription(f"row {i}: event query {q!r} already exists")
        ids = np.array(names, dtype=object)
        for entry in self._groups.values():
            if not len(entry.registry):
                continue
            known = getattr(entry.registry, "known", None)
            hit = known(ids) if known is not None else np.fromiter((q in entry.registry for q in names), bool,
                                                                   len(names))
            if hit.any():
                i = int(np.argmax(hit))
                raise DuplicateSubscription(f"row {i}: {names[i]!r} is already a subscription")
        for i, q in enumerate(names):
            if q in self._records:
                raise DuplicateSubscription(f"row {i}: {q!r} is already a subscription")

    def unregister_event_query(self, name: str) -> None:
        """Drop an event query (``DROP EVENT QUERY name``) and its matches.  Refused while another event
        query reads a stream it PUBLISHes.  The other queries of its class keep their partial matches."""
        with self._lock:
            if name not in self._event_queries:
                raise UnknownSubscription(f"no event query {name!r}")
            mine = set(self._event_queries[name].info.publishes)
            for other, rec in self._event_queries.items():
                read = mine & set(rec.info.reads)
                if other != name and read:
                    raise AnalysisError(f"cannot drop event query {name!r}: {other!r} reads its stream "
                                        f"{sorted(read)[0]!r}")
            streams = self._event_queries[name].raw_spellings
            self._check_event_streams(streams, f"DROP EVENT QUERY {name}")
            records = {q: r for q, r in self._event_queries.items() if q != name}
            plan = evp.event_partition_plan([r.info for r in records.values()], self._event_partition_count(),
                                            self._event_plan)
            classes, superseded = self._event_rebuild(plan, records)
            self._journal.unregister_event_query(name, plan, classes)   # the commit point
            self._event_queries = records
            self._commit_event_plan(plan, classes, superseded)
            self._stale_event_streams(streams, f"DROP EVENT QUERY {name}")
            self._event_resets.pop(name, None)

    def event_queries(self) -> list[str]:
        """The registered event queries' names, in registration order."""
        return list(self._event_queries)

    def matches(self, name: str) -> list[dict]:
        """The matches of event query ``name`` since its registration, in order: by ``t1``; matches
        with equal ``t1`` in the executor's (the oracle's) order within a partition, partitions in turn.
        Each is a dict of the query's output attributes (as it names them) plus ``t0`` and ``t1``, with the
        values as the output columns hold them (a computed number is a float).  Read from the kept
        notifications (``notifications()``): bounded by ``notification_retention_rows``, and they survive a
        reopen of a durable engine; nothing is held on the driver."""
        with self._lock:
            if name not in self._event_queries:
                raise UnknownSubscription(f"no event query {name!r}")
            return self._journal.matches(name, list(self._event_queries[name].attributes), set(self._event_tables()))

    def _describe_events(self, classes, mode: str) -> str | None:
        """``_describe`` for event classes."""
        if not self.catalyst:
            return None
        return "; ".join(
            f"EVENT class {c.cls.id}: {len(c.cls.queries)} queries ({_some(c.cls.queries)}), key "
            f"{c.cls.key or '(none)'}, {c.cls.partitions} partitions, algorithm {EVENTS.algorithm()}, mode {mode}"
            for c in classes)

    def _event_options(self) -> dict:
        return {"seconds_per_tick": self.event_seconds_per_tick}

    def _event_partition_count(self) -> int:
        return max(1, int(self.event_partitions)) if self.event_partitions is not None else self._parallelism()

    def _event_tables(self) -> dict[str, str]:
        return {t.name.lower(): t.name for t in self.catalog if t.key is None}

    def _event_publishers(self) -> dict[str, str]:
        return {s: q for q, rec in self._event_queries.items() for s in rec.info.publishes}

    def _event_record(self, name: str, text: str, query: StreamExpr) -> EventQueryRecord:
        """Analyse a new query against the catalog and the registered ones (raises before any change).
        The record holds the query resolved and checked by ``event_analysis.analyse_query`` (Cayuga's
        unqualified names, unknown attributes, types: issue 15 items 2–3): what every executor runs."""
        from sparksub.grammar.event_analysis import analyse_query
        from sparksub.operators.events.nfa import compile_query
        publishers = self._event_publishers()
        reads, publishes = evp.query_streams(query)
        for s in sorted(reads):
            if s not in publishers and s in self.catalog and self.catalog.get(s).key is not None:
                raise AnalysisError(f"event query {name!r} reads {s!r}, a table with a PRIMARY KEY: event "
                                    f"queries read event streams (CREATE TABLE {s} (...) without a key)")
        evp.query_info(name, query, self._event_tables(), publishers)     # unknown streams: refused here
        for p in publishes:
            if p in publishers:
                raise AnalysisError(f"event query {name!r} PUBLISHes {p!r}, which event query "
                                    f"{publishers[p]!r} already publishes")
            if p in self.catalog:
                raise AnalysisError(f"event query {name!r} PUBLISHes {p!r}, the name of a table")
        env = self._event_env(reads, publishers)
        query = analyse_query(query, env, name=name, text=text).query
        info = evp.query_info(name, query, self._event_tables(), publishers)
        published: dict = {}
        attributes = evp.output_attributes(query, env, published)
        compiled = compile_query(name, query, schemas={s: list(a) for s, a in env.items()},
                                 seconds_per_tick=self.event_seconds_per_tick)
        raw = tuple(sorted(s for s in reads if s not in publishers))
        return EventQueryRecord(name, text, query, compiled, info, attributes, published, raw,
                                bool(info.reads) or len(compiled.automata) > 1)

    def _event_env(self, reads, publishers) -> dict:
        """The schemas of the streams a query reads: an event table's columns, a PUBLISHed stream's attributes."""
        env = {}
        for s in reads:
            if s in publishers:
                env[s] = self._event_queries[publishers[s]].published[s]
            else:
                env[s] = {c: arrow_type(t) for c, t in self.catalog.get(s).columns}
        return env

    def _event_rebuild(self, plan: evp.EventPlan, records: dict) -> tuple[dict, list]:
        """The classes of ``plan`` as they will run: unchanged classes as they are; a changed one's
        replicas rebuilt from each partition's live executor with the queries that left unregistered and
        the new ones registered (state kept), or empty when none of its queries stays.  Nothing of the
        engine changes here (the caller commits); returns (classes, superseded replicas)."""
        classes: dict[str, EventClassState] = {}
        superseded = []
        options = self._event_options()
        for cid, cls in plan.classes.items():
            old = self._event_classes.get(cid)
            if old is not None and old.cls.queries == cls.queries and old.cls.partitions == cls.partitions:
                classes[cid] = old if old.cls == cls else EventClassState(cls, old.replicas, old.tick, old.failures,
                                                                          old.rejected)
                continue
            before = set(old.cls.queries) if old is not None else set()     # (sets: 100,000 queries a class)
            keep = [q for q in cls.queries if q in before and q not in plan.reset]
            kept = set(keep)
            leave = [q for q in (old.cls.queries if old is not None else ()) if q not in kept]
            join = [q for q in cls.queries if q not in kept]
            replicas = {}
            items = _base_items(cls.queries, records)          # (shared by the replicas' bases)
            for rid in cls.replica_ids():
                executor = None
                snapshot = None
                if keep:
                    executor = spark_replicas.materialize(old.replicas[rid])
                    for q in reversed(leave):                # readers before the producers they read
                        executor.unregister(q)
                    for item in _base_items(join, records):
                        if isinstance(item, tuple):
                            executor.register(*item)
                        else:
                            evp.register_rows(executor, item)
                    snapshot = executor.snapshot()
                base = evp.ReplicaBase(items, snapshot, options, self.event_executor)
                # the superseded replica's files go at the commit (_commit_event_plan)
                replica = spark_replicas.new_base(self.directory, self.uid, rid, base)
                if executor is not None:
                    spark_replicas.remember(replica, 0, executor)
                replicas[rid] = replica
            classes[cid] = EventClassState(cls, replicas, old.tick if keep else None)
            if old is not None:
                superseded.extend(old.replicas.values())
        for cid, old in self._event_classes.items():
            if cid not in plan.classes:
                superseded.extend(old.replicas.values())
        return classes, superseded

    def _commit_event_plan(self, plan: evp.EventPlan, classes: dict, superseded: list) -> None:
        live = {r.directory for c in classes.values() for r in c.replicas.values()}
        for r in superseded:
            if r.directory not in live:
                spark_replicas.discard(r)   # the superseded base and log files
        for q in plan.reset:
            self._event_resets[q] = self._event_resets.get(q, 0) + 1
        self._event_plan = plan
        self._event_classes = classes

    def _event_layout(self, tdef: TableDef, queries) -> evp.MatchLayout:
        return EVENTS.output_layout({q: self._event_queries[q].attributes for q in queries}, tdef)

    def _event_classes_on(self, tdef: TableDef) -> list[EventClassState]:
        return [c for c in self._event_classes.values() if tdef.name in c.cls.streams]

    def _event_spellings(self, cls: evp.EventClass, tdef: TableDef) -> tuple[str, ...]:
        """The names under which the class's queries read ``tdef`` (stream names match tables
        case-insensitively; the executor knows streams by name)."""
        low = tdef.name.lower()
        return tuple(sorted({s for q in cls.queries for s in self._event_queries[q].raw_spellings
                             if s.lower() == low})) or (tdef.name,)

    def _event_times(self, state: TableState, n: int, reasons: np.ndarray, ticks: tuple | None) -> dict:
        """The events' intervals: the integer ``t0``/``t1`` columns ``_validated`` read (``ticks``; one alone:
        an instantaneous event), or the n-th event published to the stream gets ``t0 = t1 = n``.  Beside the
        rows ``row_validation`` set aside (``reasons``: a null t0/t1, t0 > t1, ...), an event with a t1 before
        the largest t1 of an earlier publish call gets a reason too.  Returns {t0, t1, reasons}."""
        tdef = state.definition
        count, last, _ = self._event_clocks.get(tdef.name.lower(), (0, None, 0))
        if ticks is None:
            t0 = t1 = list(range(count, count + n))
        else:
            t0, t1 = ticks[0].to_pylist(), ticks[1].to_pylist()
        reasons = list(reasons)
        if last is not None:
            for i in range(n):
                if reasons[i] is None and t1[i] < last:
                    reasons[i] = (f"t1={t1[i]} is before t1={last}, already published to {tdef.name!r} "
                                  f"(events arrive in end-time order across publish calls)")
        return {"t0": t0, "t1": t1, "reasons": reasons}

    def _event_part(self, state: TableState, batch: pa.Table, seqs: np.ndarray, times: dict):
        """Run the event classes reading ``state``'s stream on the accepted events of one publish.
        ``batch``/``seqs``/``times`` cover every row (``times['reasons']``: why a row was set aside, or None).
        Returns (output rows — rejected rows, match rows, error rows — or None, a commit function)."""
        tdef = state.definition
        reasons = times["reasons"]
        ok = np.array([r is None for r in reasons], dtype=bool)
        classes = self._event_classes_on(tdef)
        members = [q for c in classes for q in c.cls.queries]
        layout = self._event_layout(tdef, members)
        schema = layout.schema()
        rejected = []  # (row index, reason, group_id)
        rejected += [(i, r, None) for i, r in enumerate(reasons) if r is not None]
        t0 = np.array([-1 if v is None else v for v in times["t0"]], dtype=np.int64)
        t1 = np.array([-1 if v is None else v for v in times["t1"]], dtype=np.int64)
        columns = {c: batch.column(c) for c in tdef.column_names}
        events = evp.events_table(columns, t0, t1, seqs)
        parts, streams, routed, ticks = [], {}, {}, {}
        for c in classes:
            mine = ok.copy()
            if c.tick is not None and len(c.cls.streams) > 1:
                late = mine & (t1 < c.tick)
                for i in np.flatnonzero(late):
                    rejected.append((int(i), f"t1={int(t1[i])} is before t1={c.tick}, already processed by event "
                                             f"queries {list(c.cls.queries)}, which read several streams (their "
                                             f"events must arrive in end-time order across streams)",
                                     f"events:{c.cls.id}"))
                mine &= ~late
            if c.tick is not None and any(self._event_queries[q].reads_published for q in c.cls.queries):
                split = mine & (t1 == c.tick)
                for i in np.flatnonzero(split):
                    rejected.append((int(i), f"t1={int(t1[i])} continues tick {c.tick}, which an earlier publish "
                                             f"call closed for event queries {list(c.cls.queries)}: one of them "
                                             f"reads a PUBLISHed stream, whose events of one tick must come in one "
                                             f"call (else a first match could differ)", f"events:{c.cls.id}"))
                mine &= ~split
            idx = np.flatnonzero(mine)
            if not idx.size:
                continue
            ticks[c.cls.id] = int(t1[idx].max())
            if c.cls.key is not None and c.cls.partitions > 1:
                key = batch.column(c.cls.key).to_pylist() if c.cls.key in tdef.column_names else [None] * len(ok)
                where = evp.partitions_of([key[i] for i in idx], c.cls.partitions)
            else:
                where = np.zeros(idx.size, dtype=np.int64)
            spell = self._event_spellings(c.cls, tdef)
            for p in np.unique(where):
                rid = evp.replica_id(c.cls.id, int(p))
                sub = events.take(pa.array(idx[where == p]))
                routed[rid] = (c, sub)
                streams[rid] = spell
                parts.append(sub.append_column("replica", pa.array([rid] * sub.num_rows, pa.string())))
        out = None
        if parts:
            replicas = {rid: c.replicas[rid] for rid, (c, _) in routed.items()}
            classes = list({id(c): c for c, _ in routed.values()}.values())
            out = spark_events.run_event_queries(self.spark, replicas, pa.concat_tables(parts), streams, layout,
                                                 self._describe_events(classes, "batch"))
        failed = set()
        raised: list = []
        if out is not None and out.num_rows:
            ops = out.column("op").to_pylist()
            gids = out.column("group_id").to_pylist()
            failed = {g for o, g in zip(ops, gids) if o == "error"}
            seqs_out = out.column("seq").to_pylist()
            # an event a query raised on: rejected for that query alone (its neighbours used it)
            raised = [(g, q) for o, g, q in zip(ops, gids, seqs_out) if o == "rejected"]
        # (the match rows go to the output, which publish keeps in the directory: matches() reads them there)
        pieces = []
        if rejected:
            pieces.append(self._rejected_rows(batch, seqs, times, rejected, schema))
        if out is not None:
            pieces.append(out)

        def commit():
            for rid, (c, sub) in routed.items():
                if rid in failed:
                    c.failures += 1      # its batch is not logged: the next task rebuilds from base + log
                    continue
                c.replicas[rid] = c.replicas[rid].append(sub, streams[rid])   # whole: a replay drops the same errors
            for c in classes:
                if c.cls.id in ticks:
                    c.tick = ticks[c.cls.id] if c.tick is None else max(c.tick, ticks[c.cls.id])
                c.rejected += sum(1 for _, _, g in rejected if g == f"events:{c.cls.id}")
                c.rejected += sum(1 for rid, _ in raised if rid.rsplit("#", 1)[0] == f"events:{c.cls.id}")
            self._compact_event_logs(classes)
        table = pa.concat_tables(pieces).combine_chunks() if pieces else (schema.empty_table() if classes else None)
        return table, commit

    def _with_event_part(self, state: TableState, df, schema: pa.Schema, batch: pa.Table, seqs, times: dict):
        """``publish`` on an event stream: the event part (``_event_part``) beside the groups' DataFrame
        ``df`` (None without groups), unioned by name; returns (DataFrame, commit function)."""
        tdef = state.definition
        table, commit_events = self._event_part(state, batch, seqs, times)
        if table is None:
            out = df if df is not None else spark_frames.empty_frame(self.spark, schema)
        else:
            events = self.spark.createDataFrame(table)
            if df is None:
                out = events
            else:
                types = {f.name: f.type for f in table.schema}
                for c in tdef.column_names:   # FILTER rows carry the event's columns: as the event part names them
                    col = evp.output_column(c)
                    if c in df.columns and col != c and c in evp.FIXED_COLUMNS and f"event_{c}" not in df.columns:
                        df = df.withColumnRenamed(c, col)
                    if col in df.columns and col in types and spark_type_name(types[col]) != dict(df.dtypes)[col]:
                        df = df.withColumn(col, df[col].cast(spark_type_name(types[col])))
                out = df.unionByName(events, allowMissingColumns=True)
        n = batch.num_rows
        accepted = [t for t, r in zip(times["t1"], times["reasons"]) if r is None]
        n_rejected = n - len(accepted)

        def commit():
            key = tdef.name.lower()
            count, last, rejected = self._event_clocks.get(key, (0, None, 0))
            if accepted:
                last = max(accepted) if last is None else max(last, max(accepted))
            self._event_clocks[key] = [count + n, last, rejected + n_rejected]
            commit_events()
        return out, commit

    def _rejected_rows(self, batch: pa.Table, seqs, times: dict, rejected: list, schema: pa.Schema) -> pa.Table:
        idx = pa.array([i for i, _, _ in rejected], pa.int64())
        data = {f.name: pa.nulls(len(rejected), f.type) for f in schema}
        data.update(op=pa.array(["rejected"] * len(rejected), pa.string()),
                    seq=pa.array(np.asarray(seqs)[idx.to_numpy()], pa.int64()),
                    group_id=pa.array([g for _, _, g in rejected], pa.string()),
                    reason=pa.array([r for _, r, _ in rejected], pa.string()),
                    t0=pa.array([times["t0"][i] for i, _, _ in rejected], pa.int64()),
                    t1=pa.array([times["t1"][i] for i, _, _ in rejected], pa.int64()))
        for c in batch.column_names:
            col = evp.output_column(c)
            if col in data and c != "op":
                data[col] = batch.column(c).take(idx).cast(schema.field(col).type)
        return pa.table(data, schema=schema)

    def _compact_event_logs(self, classes) -> None:
        """A replica whose log grew past EVENT_LOG_COMPACTION events gets a new base: its executor's
        snapshot (materialised here, in the driver)."""
        for c in classes:
            for rid, replica in list(c.replicas.items()):
                if replica.logged_rows <= EVENT_LOG_COMPACTION:
                    continue
                executor = spark_replicas.materialize(replica)
                base = replica.read_base()
                base.snapshot = executor.snapshot()
                new = spark_replicas.new_base(self.directory, self.uid, rid, base, replaces=replica)
                spark_replicas.remember(new, 0, executor)
                c.replicas[rid] = new

    def _event_executors(self, c: EventClassState) -> dict:
        """Every replica's executor as of now, in this (driver) process (cache + log replay); a replica
        that cannot be rebuilt is left out (its tasks report the failure as ``error`` rows)."""
        out = {}
        for rid, replica in c.replicas.items():
            try:
                executor = spark_replicas.materialize(replica)
            except Exception:  # noqa: BLE001 - stats / EXPLAIN show what can be shown
                continue
            spark_replicas.remember(replica, replica.log_length, executor)
            out[rid] = executor
        return out

    def _explain_event(self, name: str, format: str) -> str:
        from sparksub.planner.explain import SPARK_PLAN_TITLE
        rec = self._event_queries[name]
        if format == "dot":
            return rec.compiled.to_dot()
        cid = self._event_plan.class_of[name]
        c = self._event_classes[cid]
        cls = c.cls
        lines = EVENTS.explain_lines(name, rec, cls, self._event_executors(c))
        lines.append(f"replicas: events:{cls.id}#<partition>, each an executor rebuilt from a base file "
                     f"+ the batches logged since")
        for p, replica in enumerate(c.replicas.values()):
            lines.append(f"partition {p}: {replica.log_length} batches ({replica.logged_rows} events) logged "
                         f"since its base")
        if self._event_resets.get(name):
            lines.append(f"partial matches reset {self._event_resets[name]} time(s) (moved to another class)")
        lines += ["", SPARK_PLAN_TITLE[bool(self.catalyst)], self._event_spark_plan(c).rstrip()]
        return "\n".join(lines)

    def _event_spark_plan(self, c: EventClassState) -> str:
        cls = c.cls
        tdef = self.catalog.get(cls.streams[0])
        rids = list(cls.replica_ids())
        # placeholder rows, two per replica: a tiny local relation would let Spark optimise the exchange
        # and the sort away
        n = 2 * len(rids)
        sample = evp.events_table({col: pa.nulls(n, arrow_type(t)) for col, t in tdef.columns}, [0] * n, [0] * n,
                                  list(range(n)))
        sample = sample.append_column("replica", pa.array(rids * 2, pa.string()))
        spell = self._event_spellings(cls, tdef)
        try:
            return spark_events.event_plan_string(self.spark, dict(c.replicas), sample, {r: spell for r in rids},
                                                  self._event_layout(tdef, cls.queries),
                                                  self._describe_events([c], "batch"))
        except Exception as err:  # EXPLAIN must not fail because Spark is unavailable
            return f"(Spark plan unavailable: {err})"

    def _event_streams_on(self, tables) -> list:
        """The event streams this engine built over any of ``tables`` (names): changing their queries is
        refused while one runs (``_check_event_streams``)."""
        low = {t.lower() for t in tables}
        return [live for live in self._live_streams.values() if live.events and live.table in low]

    def _check_event_streams(self, tables, what: str) -> None:
        """Refuse (nothing changes) to add or drop an event query while an event stream over one of its tables
        runs: its classes' executors live in that stream's state store, planned for the queries it started with
        (``runtime/event_stream.py``: a running stream does not take new event queries).  A stream built but not
        running is marked: started later, it fails with this explanation rather than run the old plan."""
        for live in self._event_streams_on(tables):
            query_id = stream_control.running_query(live.directory)
            query = self.spark.streams.get(query_id) if query_id else None
            if query is not None and query.isActive:
                raise SparksubError(f"{what}: event stream {live.stream_id} over {live.table!r} (streaming query "
                                    f"{query_id}) is running the event queries on that table; stop it "
                                    f"(query.stop()), change the queries, then start a new stream with "
                                    f"engine.stream(...); nothing changed")

    def _stale_event_streams(self, tables, what: str) -> None:
        """After an event query change: the event streams over ``tables`` (not running: checked before) refuse to
        run their old plan."""
        for live in self._event_streams_on(tables):
            stream_control.mark_stale(live.directory, f"event stream {live.stream_id} over {live.table!r} was built "
                                                      f"before {what}: start a new one with engine.stream(...)")
