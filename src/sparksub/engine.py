"""The Engine facade: DESIGN §1's public contract.

The engine holds the conceptual database (each declared table's rows, by key) and the subscription
groups; it parses and plans statements (``grammar``, ``planner``, ``catalyst_rules``) and runs the
group operators inside Spark (``runtime/groups.py``). Every mutation validates first and then
applies, so a bad statement or batch leaves everything as it was (DESIGN §7).
"""
from __future__ import annotations

import pickle
import re
import logging
import threading
import uuid
import warnings
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sparksub.errors import (AnalysisError, BadUpdate, CatalystUnavailable, DuplicateSubscription, InvalidArgument,
                             InvalidSubscription, SparksubError, UnknownSubscription, position_of)
from sparksub.deliver_input import checked_messages
from sparksub.grammar import statements as st
from sparksub.grammar.event_ast import StreamExpr
from sparksub.grammar.script import EventQueryStatement as _EventQueryStatement
from sparksub.grammar.script import in_script, parse_script
from sparksub.jvm.bridge import subscription_group
from sparksub import listing
from sparksub.directory import EngineDirectory
from sparksub.journal import CHECKPOINT_RECORDS, NOTIFICATION_RETENTION_ROWS, DurableSetting, EngineJournal
from sparksub.runtime.connect import CATALYST_ON_CONNECT, default_parallelism, is_connect_session
from sparksub.runtime.spark_errors import spark_error, spark_parse
# the embedded session (runtime/session.py: only the runtime imports pyspark), public here as before
from sparksub.runtime.session import (SESSION_DEFAULTS, SESSION_LOG_LEVEL, catalyst_build_error,  # noqa: F401
                                      catalyst_mode, spark_session)
from sparksub.planner import ir
from sparksub.planner.catalog import Catalog, TableDef
from sparksub.planner.classifier import Planned, parameters_of, plan_subscription
from sparksub.operators.contract import ONE, ROW_PARTITIONS, SUBSCRIPTION_SHARDS, SubscriptionFamily
from sparksub.operators.events import partitions as evp
from sparksub.operators.events.family import query_text
from sparksub.operators.joins import group as join_groups
from sparksub.operators.registry import EVENTS, family_of, in_order
from sparksub.operators.shared import row_validation
from sparksub.operators.shared.families import grown
from sparksub.operators.shared.schemas import (DELETE, EVENT_PREFIX, UNICAST_SCHEMA, UPSERT, mode_schema, publish_schema,
                                               spark_type_name, with_reason)
from sparksub.runtime import events as spark_events
from sparksub.runtime import frames as spark_frames
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import output as spark_output
from sparksub.runtime import replicas as spark_replicas
from sparksub.runtime import stream as spark_stream
from sparksub.runtime import stream_control

__all__ = ["Engine", "spark_session"]

#: Rows of updates logged per group before the base snapshot is rebuilt from the current rows.
LOG_COMPACTION_ROWS = 200_000
#: FILTER subscriptions per shard (one Spark task each, every event to every shard), up to the
#: session's default parallelism.
FILTER_SHARD_SIZE = 250_000
#: Events logged per event-query replica before its base is rebuilt from a snapshot of its executor.
EVENT_LOG_COMPACTION = 20_000
#: Engine(catalyst='auto') says once per process that the extension is off, and why
_catalyst_warned = False
_log = logging.getLogger("sparksub.engine")


@dataclass
class TableState:
    definition: TableDef
    rows: dict = field(default_factory=dict)  # key -> tuple of column values (table column order)

    def column_index(self, name: str) -> int:
        return self.definition.column_names.index(name)


@dataclass
class SubscriptionRecord:
    """What EXPLAIN needs about one subscription: the plan it came from (shared by a bulk template)."""
    planned: Planned
    group_id: str
    bulk: bool = False


@dataclass
class GroupEntry:
    """A subscription group as the engine keeps it: its plan node, its family (the class's contract,
    ``operators/registry.py``) and the family's registry of its subscriptions, its templates, and the
    runtime's record of its replicas."""
    group_id: str
    physical: ir.Node  # the group's operator node (a planner.ir.*GroupScan)
    family: SubscriptionFamily
    registry: object  # the family's registry: the subscriptions and what the class keeps per subscription
    templates: list = field(default_factory=list)  # template texts; template_of[slot] indexes it
    template_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    replica: spark_replicas.Replica | None = None
    shards: dict | None = None  # FILTER shards / join partitions: replica id -> replica
    base_stale: bool = False  # subscriptions or loaded rows changed since the replica's base
    log_rows: int = 0
    subscribers: object = None  # the deliver() side (``family.subscribers``), seeded lazily
    subscribers_version: int = -1
    version: int = 0  # bumps on every publish and registration change


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
class EventClassState:
    """An event class (``event_partitions.EventClass``) as it runs: one replica per partition, the
    largest t1 fed to it (events of all its streams arrive in end-time order), counters."""
    cls: evp.EventClass
    replicas: dict
    tick: int | None = None
    failures: int = 0
    rejected: int = 0


class Engine:
    """The sparksub engine. ``Engine()`` makes a local SparkSession on first use (:func:`spark_session`, with
    its documented defaults and ``conf``, a dict of Spark options); ``Engine(spark)`` uses yours and
    never changes it (no option, no log level).

    ``catalyst``: True, False or ``'auto'`` (default: ``$SPARKSUB_CATALYST``, else ``'auto'``).  With the
    Catalyst extension (``sparksub.jvm``) our statements run through ``spark.sql`` as well, Spark's own
    EXPLAIN names our operators (``SubscriptionGroup``), and the optimizer rewrites the plain-SQL range
    join of a parameter table.  ``'auto'`` uses it when the session has it and otherwise says once why
    not (a WARNING of the ``logging`` logger ``sparksub.engine``); True raises ``CatalystUnavailable``
    instead; False never uses it.

    ``path``: the engine's directory (``journal.py``, docs/architecture.md "The durable directory").  Everything
    the engine knows is kept there -- tables and their rows, subscriptions (a bulk one as its parameter
    table), event queries and their partial matches, sequence numbers, the settings that change results
    (``parallelism``, ``join_partitions``, ``event_partitions``, ``filter_shard_size``, ``join_router_mode``,
    ``event_seconds_per_tick``, ``event_executor``) and the notifications of the last
    ``notification_retention_rows`` rows per table -- as a journal of committed operations (each fsynced
    before its method returns) and periodic checkpoints.  ``Engine(path=same)`` in a new process, after
    ``close()`` or a ``kill -9`` at any point, continues from the last committed operation: ``publish(...,
    batch_id=...)`` tells a batch it has already committed (and returns its kept output) and
    ``notifications()`` re-reads what a killed client may have missed.  One live engine per directory
    (``DirectoryLocked``).  Without a path: a temporary directory, removed at exit, where only the
    notifications are kept (for ``notifications()``, ``matches()`` and ``batch_id``).
    """

    # the settings that change results: each change is journaled (journal.DurableSetting)
    parallelism = DurableSetting()
    join_partitions = DurableSetting()
    event_partitions = DurableSetting()
    filter_shard_size = DurableSetting()
    join_router_mode = DurableSetting()
    event_seconds_per_tick = DurableSetting()
    event_executor = DurableSetting()

    def __init__(self, spark=None, catalyst=None, conf: dict | None = None, *, path=None):
        if spark is not None and conf:
            raise InvalidArgument("Engine(spark, conf=...): conf is for the session Engine() creates; a session "
                                  "you pass is used as it is (set its options when you build it)")
        if conf is not None and not isinstance(conf, dict):
            raise InvalidArgument(f"Engine(conf=...) takes a dict of Spark options, got {type(conf).__name__}")
        self._conf = dict(conf or {})
        self._spark = spark
        self._catalyst_mode = catalyst_mode(catalyst)
        #: whether the Catalyst extension is in use (None until the SparkSession is known)
        self.catalyst: bool | None = None
        #: why it is not (None when it is)
        self.catalyst_reason: str | None = None
        self.uid = uuid.uuid4().hex
        #: where the engine keeps what it knows (``path``; a temporary directory without one): directory.py
        self.directory = EngineDirectory(path)
        self.catalog = Catalog()
        self._tables: dict[str, TableState] = {}
        self._groups: dict[tuple, GroupEntry] = {}
        self._records: dict[str, SubscriptionRecord] = {}   # single subscriptions
        self._bulk: dict[str, list[SubscriptionRecord]] = {}  # group_id -> bulk templates
        self._next_seq = 0  # seq of the next published row (consecutive across publish calls)
        self.filter_shard_size = FILTER_SHARD_SIZE
        #: the default partition count (join groups, event classes, most FILTER shards; one Spark task each);
        #: None: the session's ``spark.default.parallelism`` (its conf, which Spark Connect can read), else 2
        self.parallelism: int | None = None
        #: partitions of a join group (one Spark task each); None: ``parallelism``
        self.join_partitions: int | None = None
        #: the router's mode for SELECT_JOIN groups: 'DYNAMIC' (003 §4.5), 'OPT' or a plan name
        self.join_router_mode = join_groups.DYNAMIC
        # event queries (the EVENT class; operators/events/partitions.py, spark_events.py)
        #: partitions of a new keyed event class, and the most unkeyed groups per stream set; None: the
        #: session's default parallelism.  A class keeps the count it was created with.
        self.event_partitions: int | None = None
        #: seconds per tick for DUR units (``DUR > 10 MIN``), as NFAEngine's ``seconds_per_tick``
        self.event_seconds_per_tick: float = 1
        #: the executor each replica runs (``module:Class`` with NFAEngine's API)
        self.event_executor: str = evp.DEFAULT_EXECUTOR
        self._event_queries: dict[str, EventQueryRecord] = {}   # registration order
        self._event_plan = evp.EventPlan()
        self._event_classes: dict[str, EventClassState] = {}
        self._event_clocks: dict[str, list] = {}  # table (lower) -> [events published, largest t1, rejected]
        self._event_resets: dict[str, int] = {}
        #: the streams this engine built (``stream``): stream id -> stream_control.LiveStream
        self._live_streams: dict = {}
        self._following = False   # taking in a stream's rows (_follow_streams): not again from inside
        self._lock = threading.RLock()
        #: notification rows kept per table (``notifications()``, ``matches()``); older files go at checkpoints
        self.notification_retention_rows = NOTIFICATION_RETENTION_ROWS
        #: journal records between checkpoints (a reopen replays at most this many)
        self.checkpoint_interval = CHECKPOINT_RECORDS
        # the journal, checkpoints and kept notifications; a directory that holds an engine is read back here
        self._journal = EngineJournal(self, EventClassState)
        self._journal.open()
        if spark is not None:
            self._resolve_catalyst()

    # ---- Spark ------------------------------------------------------------------------------------
    @property
    def spark(self):
        if self._spark is None:
            self._spark = spark_session(catalyst=self._catalyst_mode, conf=self._conf)
        if self.catalyst is None:
            self._resolve_catalyst()
        return self._spark

    def _resolve_catalyst(self) -> None:
        """Decide, once the session is known, whether the extension is in use; attach this engine to it."""
        global _catalyst_warned
        from sparksub.jvm import bridge
        if self._catalyst_mode is False:
            self.catalyst, self.catalyst_reason = False, "catalyst=False"
            return
        if is_connect_session(self._spark):   # the extension is classic-only (runtime/connect.py)
            self.catalyst, self.catalyst_reason = False, f"the Catalyst extension is off: {CATALYST_ON_CONNECT}"
            if self._catalyst_mode is True:
                raise CatalystUnavailable(self.catalyst_reason)
            _log.info("sparksub: %s", self.catalyst_reason)
            return
        if bridge.loaded(self._spark):
            bridge.attach(self._spark, self)
            self.catalyst, self.catalyst_reason = True, None
            return
        from sparksub.jvm import EXTENSION_CLASS
        reason = catalyst_build_error() or (
            "this SparkSession was built without the extension; build yours with "
            f".config('spark.jars', str(sparksub.jvm.jar_path())).config('spark.sql.extensions', "
            f"'{EXTENSION_CLASS}') (or let sparksub.Engine() make the session)")
        self.catalyst, self.catalyst_reason = False, f"the Catalyst extension is off: {reason}"
        if self._catalyst_mode is True:
            raise CatalystUnavailable(self.catalyst_reason)
        if not _catalyst_warned:
            _catalyst_warned = True
            _log.warning("sparksub: %s; running on the pure-Python path", self.catalyst_reason)

    def _describe(self, groups, mode: str, explained=None) -> str | None:
        """The ``SubscriptionGroup`` node's text for Spark's EXPLAIN (None when the extension is off):
        per group its class, template, size, algorithm and mode.  ``groups``: (physical, entry or None)
        pairs; ``explained``: the physical node of the subscription EXPLAIN SUBSCRIPTION is about."""
        if not self.catalyst:
            return None
        parts = []
        for physical, entry in groups:
            templates = entry.templates if entry is not None and entry.templates else [str(physical)]
            more = f" (+{len(templates) - 1} more)" if len(templates) > 1 else ""
            size = len(entry.registry) if entry is not None else 0
            parts.append(f"{physical.klass} group {entry.group_id if entry else '(new)'}: template {templates[0]}"
                         f"{more}, {size} subscriptions, algorithm {family_of(physical).algorithm(physical)}, "
                         f"mode {mode}")
        if explained is not None:
            parts.append(f"explained: {explained}")
        return "; ".join(parts)

    def _describe_events(self, classes, mode: str) -> str | None:
        """``_describe`` for event classes."""
        if not self.catalyst:
            return None
        return "; ".join(
            f"EVENT class {c.cls.id}: {len(c.cls.queries)} queries ({', '.join(c.cls.queries)}), key "
            f"{c.cls.key or '(none)'}, {c.cls.partitions} partitions, algorithm {EVENTS.algorithm()}, mode {mode}"
            for c in classes)

    def attach(self) -> None:
        """Make this engine the one ``spark.sql`` hands our statements to (the last engine made is)."""
        from sparksub.jvm import bridge
        if self.spark is not None and self.catalyst:
            bridge.attach(self._spark, self)

    # ---- statements --------------------------------------------------------------------------------
    def sql(self, text: str):
        """Run one statement or a ``;``-separated script; returns the last statement's answer:
        ``None`` for DDL, a string for EXPLAIN SUBSCRIPTION, a Spark DataFrame for SHOW SUBSCRIPTIONS,
        SHOW SUBSCRIPTION GROUPS and anything Spark itself runs.  ``CREATE EVENT QUERY name AS <CEL or
        algebra>`` takes the text up to the next ``;`` outside quotes, comments and brackets (the algebra's
        ``;[θ]`` stays inside).

        A script is all-or-nothing, by checking before running (not by undoing: a dropped subscription's
        state or an event query's partial matches could not be put back): every statement is parsed, and
        every statement of ours planned and bound against the tables, subscriptions and event queries the
        statements before it leave (:meth:`_check_script`), Spark's own statements parsed by Spark's parser,
        before the first one runs.  A bad statement raises its error, at its line and column in ``text``,
        and nothing has changed (DESIGN §7).  Only what running alone can tell -- Spark's analysis of its
        own statements, a failing Spark job -- stops a script part-way; the error's note then says which
        statements took effect."""
        if not isinstance(text, str):
            raise InvalidArgument(f"sql() takes the statement text as a string, got {type(text).__name__}: "
                                  f"{text!r:.60}")
        with self._lock:
            script = parse_script(text)
            if len(script) > 1:
                self._check_script(text, script)
            answer = None
            for n, item in enumerate(script):
                try:
                    answer = self._run(item.statement, item.source)
                except Exception as err:
                    located = _script_error(err, item, text)
                    if n:
                        located.add_note(f"statements 1-{n} of the script took effect; statement {n + 1} failed "
                                         f"and the {len(script) - n - 1} after it did not run")
                    if located is err:
                        raise
                    raise located from None
            return answer

    def _check_script(self, text: str, script: list) -> None:
        """Check every statement of a script as running it would, before any runs (:meth:`sql`): against
        a scratch engine holding a copy of this one's namespace -- its tables, the event queries, and the
        subscription ids the statements before add and drop -- that the statements change in turn;
        nothing of this engine changes.  Raises the first statement's error, positioned in ``text``."""
        scratch = Engine(catalyst=False)
        scratch.catalog = self.catalog.copy()
        scratch._event_queries = dict(self._event_queries)
        scratch.event_seconds_per_tick = self.event_seconds_per_tick
        added: set = set()
        dropped: set = set()

        def subscribed(name: str) -> bool:
            return name in added or (name not in dropped and self._find_group(name, required=False) is not None)

        for n, item in enumerate(script):
            try:
                self._check_statement(item.statement, item.source, scratch, subscribed, added, dropped)
            except SparksubError as err:
                located = in_script(err, item.source, item.offset, text)
                if getattr(located, "line", None) is None:  # say where, as a positioned error does
                    lead = len(item.source) - len(item.source.lstrip())
                    line = position_of(text, item.offset + lead)[0]
                    located.add_note(f"in statement {n + 1} of the script (line {line}): "
                                     f"{item.source.strip().splitlines()[0][:80]}")
                raise located from None

    def _check_statement(self, stmt, source: str, scratch: "Engine", subscribed, added: set, dropped: set) -> None:
        """One statement of :meth:`_check_script`, applied to ``scratch`` and the id sets."""
        from sparksub.grammar.events import parse_event_query
        from sparksub.operators.events.nfa import NFAEngine
        if isinstance(stmt, exp.Create) and (stmt.args.get("kind") or "").upper() == "TABLE":
            scratch.create_table(TableDef.from_create(stmt))
        elif isinstance(stmt, st.CreateSubscription):
            name, planned = stmt.this.name, scratch._plan(stmt.query)
            _check_single(name, planned)
            if subscribed(name) or name in scratch._event_queries:
                raise DuplicateSubscription(f"duplicate subscription id {name!r}: it already exists"
                                            if subscribed(name) else f"{name!r} is already an event query")
            family_of(planned.physical).bind(planned.physical, {}, np.array([name], dtype=object), scratch.catalog)
            added.add(name)
            dropped.discard(name)
        elif isinstance(stmt, st.DropSubscription):
            name = stmt.this.name
            if subscribed(name):
                dropped.add(name)
                added.discard(name)
            elif name in scratch._event_queries:
                raise UnknownSubscription(f"{name!r} is an event query: DROP EVENT QUERY {name}")
            elif not stmt.args.get("exists"):
                raise UnknownSubscription(f"no subscription {name!r}")
        elif isinstance(stmt, st.ExplainSubscription):
            target = stmt.target
            if isinstance(target, str):
                if not subscribed(target) and target not in scratch._event_queries:
                    raise UnknownSubscription(f"no subscription or event query {target!r}")
            else:
                scratch._plan(target)
        elif isinstance(stmt, (_EventQueryStatement, st.CreateEventQuery)):
            if isinstance(stmt, _EventQueryStatement):
                name, query, text = stmt.name, stmt.query, stmt.text
            else:
                name, text = stmt.this.name, stmt.expression.this
                query = parse_event_query(text)
            if name in scratch._event_queries:
                raise DuplicateSubscription(f"event query {name!r} already exists")
            if subscribed(name):
                raise DuplicateSubscription(f"{name!r} is already a subscription")
            record = scratch._event_record(name, text, query)
            NFAEngine(**scratch._event_options()).register(name, record.query)   # resolved (Cayuga's names)
            scratch._event_queries[name] = record
        elif isinstance(stmt, st.DropEventQuery):
            name = stmt.this.name
            if name not in scratch._event_queries:
                if not stmt.args.get("exists"):
                    raise UnknownSubscription(f"no event query {name!r}")
                return
            mine = set(scratch._event_queries[name].info.publishes)
            for other, rec in scratch._event_queries.items():
                if other != name and mine & set(rec.info.reads):
                    raise AnalysisError(f"cannot drop event query {name!r}: {other!r} reads its stream "
                                        f"{sorted(mine & set(rec.info.reads))[0]!r}")
            del scratch._event_queries[name]
        elif not isinstance(stmt, (st.ShowSubscriptions, getattr(st, "ShowSubscriptionGroups", st.ShowSubscriptions))):
            self._spark_parse(source)

    def _spark_parse(self, source: str) -> None:
        """Spark's parser's verdict on one of Spark's own statements (nothing runs); a syntax error raises
        a ParseError positioned in ``source``."""
        try:
            spark_parse(self.spark, source.strip())
        except Exception as err:
            mine = spark_error(err, source.strip())
            if mine is None:
                raise
            raise in_script(mine, source.strip(), len(source) - len(source.lstrip()), source) from None

    def _run(self, stmt: exp.Expression, source: str | None = None):
        if isinstance(stmt, exp.Create) and (stmt.args.get("kind") or "").upper() == "TABLE":
            self.create_table(TableDef.from_create(stmt))
            return None
        if isinstance(stmt, st.CreateSubscription):
            self._subscribe_planned(stmt.this.name, self._plan(stmt.query))
            return None
        if isinstance(stmt, st.DropSubscription):
            if stmt.args.get("exists") and not self._find_group(stmt.this.name, required=False):
                return None
            self.unsubscribe(stmt.this.name)
            return None
        if isinstance(stmt, st.ShowSubscriptions):
            return self.subscriptions()
        if isinstance(stmt, st.ShowSubscriptionGroups):
            return self.spark.createDataFrame(listing.groups_table(self.subscription_groups()))
        if isinstance(stmt, st.ExplainSubscription):
            target = stmt.target
            return self.explain(target if isinstance(target, str) else target.sql(dialect="spark"))
        if isinstance(stmt, _EventQueryStatement):
            self.register_event_query(stmt.name, stmt.query, text=stmt.text)
            return None
        if isinstance(stmt, st.CreateEventQuery):
            self.register_event_query(stmt.this.name, stmt.expression.this)
            return None
        if isinstance(stmt, st.DropEventQuery):
            if stmt.args.get("exists") and stmt.this.name not in self._event_queries:
                return None
            self.unregister_event_query(stmt.this.name)
            return None
        # Plain Spark SQL: our tables it names are visible to it as temp views of their current rows.
        for t in stmt.find_all(exp.Table):
            if t.name in self.catalog:
                self.table(t.name).createOrReplaceTempView(t.name)
        # the text as written (Spark's error positions then point into it), else sqlglot's rendering
        return self.spark.sql(source.strip() if source is not None else stmt.sql(dialect="spark"))

    def table(self, name: str):
        """The current rows of a declared table, as a Spark DataFrame."""
        with self._lock:
            state = self._table(name)
            tdef = state.definition
            columns = list(zip(*state.rows.values())) or [[] for _ in tdef.columns]
            data = pa.table({c: pa.array(list(v), _arrow_type(t)) for (c, t), v in zip(tdef.columns, columns)})
            return self.spark.createDataFrame(data)

    def create_table(self, table: TableDef) -> None:
        """A table with a PRIMARY KEY (rows replace rows), or without one: an append-only event
        stream, whose published rows are events (FILTER subscriptions match them; nothing is kept)."""
        with self._lock:
            self.catalog.add(table)
            self._tables[table.name.lower()] = TableState(table)
            self._journal.create_table(table)

    def _table(self, name: str) -> TableState:
        self.catalog.get(name)  # the error names the known tables
        state = self._tables[name.lower()]
        self._follow_streams(state)   # the rows its running streams applied are the table's rows too
        return state

    def _plan(self, query) -> Planned:
        select = st.parse_select(query) if isinstance(query, str) else query
        planned = plan_subscription(select, self.catalog)
        family = family_of(planned.physical)
        family.output_columns(planned, self.catalog)  # a SELECT list no row can hold fails here, before any change
        family.check_tables(planned.physical, self.catalog)
        return planned

    # ---- subscriptions -----------------------------------------------------------------------------
    def subscribe(self, sub_id: str, sql: str) -> None:
        """Register one subscription (same as ``CREATE SUBSCRIPTION sub_id AS sql``)."""
        self._subscribe_planned(sub_id, self._plan(sql))

    def _subscribe_planned(self, sub_id: str, planned: Planned) -> None:
        _check_single(sub_id, planned)
        with self._lock:
            ids = np.array([sub_id], dtype=object)
            bound = family_of(planned.physical).bind(planned.physical, {}, ids, self.catalog)
            self._check_new_ids(ids)
            entry = self._group_for(planned.physical)
            self._journal.subscribe(sub_id, planned.sql, entry.group_id)   # the commit point
            self._register(entry, planned, ids, bound)
            self._records[sub_id] = SubscriptionRecord(planned, entry.group_id)
            self._changed(entry, subscriptions=True)

    def subscribe_many(self, template: str, params) -> int:
        """Register one subscription per row of ``params`` (an ``id`` column and one column per named
        parameter) against one template. Vectorised: 1M subscriptions take seconds. Returns the count."""
        planned = self._plan(template)
        cols = _param_columns(params)
        if "id" not in cols:
            raise InvalidSubscription(f"params need an 'id' column (got columns {sorted(cols)})")
        ids = _checked_ids(cols.pop("id"))
        needed = parameters_of(planned.physical)
        missing = [p for p in needed if p not in cols]
        if missing:
            raise InvalidSubscription(f"params lack columns for template parameters {missing} "
                                      f"(template: {template})")
        with self._lock:
            bound = family_of(planned.physical).bind(planned.physical, cols, ids, self.catalog)
            self._check_new_ids(ids)
            entry = self._group_for(planned.physical)
            self._journal.subscribe_many(template if isinstance(template, str) else planned.sql, ids, cols,
                                         entry.group_id)   # the commit point: the parameter table kept
            self._register(entry, planned, ids, bound)
            self._bulk.setdefault(entry.group_id, []).append(SubscriptionRecord(planned, entry.group_id, True))
            self._changed(entry, subscriptions=True)
        return int(ids.size)

    def _register(self, entry: GroupEntry, planned: Planned, ids: np.ndarray, bound: dict) -> np.ndarray:
        """Add the subscriptions of ``planned`` -- their constants bound and checked by the family, their output
        columns (their SELECT list, DESIGN §1) -- to the group's registry, and note their template."""
        family = entry.family
        slots = family.register(entry.registry, planned.physical, ids, bound,
                                family.output_columns(planned, self.catalog))
        self._note_template(entry, slots, planned.template)
        return slots

    def _check_new_ids(self, ids) -> None:
        """Ids are unique per engine (a batch's among themselves: :func:`_checked_ids`): check them against
        every group and against the event queries' names (one namespace: SHOW / EXPLAIN SUBSCRIPTION list
        both), before any group is touched."""
        if self._event_queries:
            clash = next((i for i in ids if i in self._event_queries), None)
            if clash is not None:
                raise DuplicateSubscription(f"{clash!r} is already an event query")
        for entry in self._groups.values():
            if not len(entry.registry):
                continue
            clash = next((i for i in ids if i in entry.registry), None)
            if clash is not None:
                raise DuplicateSubscription(f"duplicate subscription id {clash!r}: it already exists")

    def unsubscribe(self, sub_id: str) -> None:
        with self._lock:
            if sub_id in self._event_queries:
                raise UnknownSubscription(f"{sub_id!r} is an event query: DROP EVENT QUERY {sub_id} "
                                          f"(unregister_event_query)")
            entry = self._find_group(sub_id)
            self._journal.unsubscribe(sub_id)   # the commit point
            entry.family.unregister(entry.registry, entry.physical, [sub_id])
            self._records.pop(sub_id, None)
            self._changed(entry, subscriptions=True)

    @staticmethod
    def _note_template(entry: GroupEntry, slots: np.ndarray, template: str) -> None:
        if template not in entry.templates:
            entry.templates.append(template)
        entry.template_of = grown(entry.template_of, slots, 0)
        entry.template_of[slots] = entry.templates.index(template)

    def _find_group(self, sub_id: str, required: bool = True) -> GroupEntry | None:
        for entry in self._groups.values():
            if sub_id in entry.registry:
                return entry
        if required:
            raise UnknownSubscription(f"no subscription {sub_id!r}")
        return None

    def _group_for(self, physical) -> GroupEntry:
        key = physical.group_key
        entry = self._groups.get(key)
        if entry is None:
            family = family_of(physical)
            gid = family.group_id(physical)
            entry = GroupEntry(gid, physical, family, family.new_registry(physical, self.catalog, gid))
            self._groups[key] = entry
        return entry

    def _changed(self, entry: GroupEntry, subscriptions: bool = False) -> None:
        entry.version += 1
        change = entry.family.take_change(entry.registry)   # a change the partitions' layout can take, or None
        # (a group left without subscriptions is skipped by publish, so its partitions miss batches: rebuild)
        if subscriptions and change is not None and entry.shards is not None and not entry.base_stale \
                and len(entry.registry):
            # 003 §4.2.3: the partitions' operators follow query inserts / deletes (their dynamic stabbing
            # partitions), logged like update batches; no new base
            entry.shards = {rid: replica.append(change) for rid, replica in entry.shards.items()}
            entry.log_rows += max(len(change.add_ids), len(change.remove_ids))
        elif subscriptions:
            entry.base_stale = True  # the base snapshot holds the subscriptions: rebuild it lazily
        if subscriptions and self._live_streams:
            self._publish_to_streams(entry)   # before the statement returns: the streams' next micro-batch applies it

    # ---- subscriptions as data: the streams this engine built follow its changes (runtime/stream_control.py) ----
    def _publish_to_streams(self, entry: GroupEntry) -> None:
        """Publish ``entry``'s subscriptions, as they are now, to every stream over one of its tables that hosts the
        group (a new change version); a range group a stream's range operator does not host yet joins it when
        its output has the group's columns.  Any other new group needs a new stream: said once, as a warning."""
        tables = entry.family.tables(entry.physical)
        gid, placement = entry.group_id, entry.family.placement
        for live in self._live_streams.values():
            if live.table not in tables:
                continue
            state = self._tables[live.table]
            if placement == ROW_PARTITIONS and gid in live.joins:
                snap = entry.family.stream_snapshot(entry.registry, entry.physical, gid, self._tables,
                                                    live.joins[gid], self.join_router_mode)
                stream_control.publish_subscriptions(live.directory, gid, live.next_version(), snap)
            elif placement == SUBSCRIPTION_SHARDS and gid == live.filter_group:
                snap, k = self._snapshot(state, entry), live.filter_shards   # cut as the stream's shards are
                stream_control.publish_shards(live.directory, gid, live.next_version(),
                                              [snap.shard(i, k) if k > 1 else snap for i in range(k)])
            elif placement == ONE and gid in live.ranges:
                snap = entry.family.snapshot(entry.registry, entry.physical, gid,
                                             {live.table: TableState(state.definition)})   # no rows: the stream has them
                stream_control.publish_subscriptions(live.directory, gid, live.next_version(), snap)
            elif placement == ONE and live.range_schema is not None and self._fits_stream(live, entry, state):
                self._add_stream_group(live, entry, state)
            elif gid not in live.warned:
                live.warned.add(gid)
                warnings.warn(f"stream {live.stream_id} over {state.definition.name!r} started without the "
                              f"{entry.physical.klass} group {gid!r} (or without an operator its notifications "
                              f"fit): its subscriptions are notified by a stream started after them "
                              f"(engine.stream(...) again; the checkpoint keeps the others' state)",
                              RuntimeWarning, stacklevel=4)

    def _fits_stream(self, live, entry: GroupEntry, state: TableState) -> bool:
        """Whether the range operator of stream ``live`` can host ``entry``: its output has the group's columns."""
        wanted = self._output_schema(with_reason(mode_schema(live.mode)), live.mode, [entry], state.definition)
        have = live.range_schema
        return all(have.get_field_index(f.name) >= 0 and have.field(f.name).type == f.type for f in wanted)

    def _add_stream_group(self, live, entry: GroupEntry, state: TableState) -> None:
        """A range group the stream hosts from its next micro-batch on: its base holds every row the stream has
        applied so far (followed first) and the micro-batch it is as of, so the stream's task replays the rows of
        any micro-batch between (``stream.GroupSpec.as_of``)."""
        self._follow_streams(state)
        if entry.replica is not None and entry.replica.log_length:
            entry.base_stale = True  # the task seeds from the base alone: make it current
        base = spark_replicas.pin(self._replica(state, entry), live.directory)
        x, y, y_is_text, x2 = entry.family.stream_columns(entry.physical, state.definition)
        stream_control.publish_group(live.directory, spark_stream.GroupSpec(
            entry.group_id, x, y, spark_replicas.StoredValue(base.base_path), y_is_text, x2,
            version=live.version, as_of=live.absorbed))
        live.ranges.add(entry.group_id)

    def _follow_streams(self, state: TableState) -> None:
        """Take in the rows the streams over ``state``'s table applied since last time (``applied/<micro-batch>``
        files, ``stream_control``), as a publish commits a batch: the table's rows, every group's log (a join's
        partitions routed), journaled (a durable engine keeps them).  A delete of a key the table does not hold
        is dropped, as the stream rejected it.  So ``result()``, EXPLAIN, ``stats()``, a new base and ``publish``
        see the streams' rows."""
        if not self._live_streams or state.definition.key is None or self._following:
            return
        name = state.definition.name.lower()
        self._following = True
        try:
            for live in self._live_streams.values():
                if live.table != name:
                    continue
                for batch_id, rows in stream_control.applied_batches(live.directory, live.absorbed):
                    if rows.num_rows:
                        self._absorb(state, rows)
                    live.absorbed = batch_id
                stream_control.forget_applied(live.directory, live.absorbed)
        finally:
            self._following = False

    def _absorb(self, state: TableState, rows: pa.Table) -> None:
        """One micro-batch's applied rows (``checked_updates``' columns) into the engine's state (``_follow_streams``)."""
        tdef = state.definition
        ops = pc.if_else(pc.equal(rows.column(spark_stream.OP_COLUMN), DELETE), "delete", "upsert")
        batch, reasons, _ = self._validated(state, rows.select(tdef.column_names).append_column("_op", ops))
        ok = np.fromiter((r is None for r in reasons), dtype=bool, count=len(reasons))
        batch = batch.filter(pa.array(ok))
        seqs = rows.column(spark_stream.SEQ_COLUMN).to_numpy()[ok]
        if not batch.num_rows:
            return
        logged = {}   # group -> its batch, computed against the rows before this one (as publish does)
        for e in self._groups_on(state):
            if e.family.stateless or e.base_stale:
                continue   # (a stale base is rebuilt from the rows)
            if e.family.placement == ROW_PARTITIONS and e.shards is not None:
                logged[e.group_id] = (e, self._join_batch(state, e, batch, seqs))
            elif e.family.placement != ROW_PARTITIONS and e.replica is not None:
                logged[e.group_id] = (e, e.family.group_batch(e.physical, tdef, batch, seqs))
        self._journal.load(tdef, batch)
        self._apply_rows(state, batch)
        for e, gb in logged.values():
            if e.family.placement == ROW_PARTITIONS:
                for rid, replica in list(e.shards.items()):
                    mine = gb.filter(pc.equal(gb.column("group_id"), rid))
                    if mine.num_rows:
                        e.shards[rid] = replica.append(mine)
            else:
                e.replica = e.replica.append(gb)
            e.log_rows += batch.num_rows
            e.version += 1

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

    def subscriptions(self):
        """SHOW SUBSCRIPTIONS, a Spark DataFrame: one row per subscription (``name, class, group, template,
        parameters`` -- its bound constants as JSON, see ``listing``) and per event query (class EVENT, its
        group the event class it runs in, its text as the template, no parameters).  Built from the
        registries' columns through Arrow: a million subscriptions are a million rows, no Python dict each.
        (It was the per-group list, now ``subscription_groups``.)"""
        return self.spark.createDataFrame(self.subscription_table())

    def subscription_table(self) -> pa.Table:
        """SHOW SUBSCRIPTIONS' rows as an Arrow table (``listing.SUBSCRIPTIONS_SCHEMA``; no Spark needed)."""
        with self._lock:
            return listing.subscriptions_table(
                list(self._groups.values()),
                [(name, f"events:{self._event_plan.class_of[name]}", rec.text)
                 for name, rec in self._event_queries.items()])

    def subscription_groups(self) -> list[dict]:
        """SHOW SUBSCRIPTION GROUPS: one row per group and template (a million bulk subscriptions are one
        row); one row per event query (class EVENT, its group the event class it runs in, its text)."""
        out = []
        for entry in self._groups.values():
            counts = np.bincount(entry.template_of[entry.registry.live_slots()], minlength=len(entry.templates))
            for template, n in zip(entry.templates, counts.tolist()):
                if n:
                    out.append({"group": entry.group_id, "class": entry.physical.klass,
                                "template": template, "subscriptions": n})
        for name, rec in self._event_queries.items():
            out.append({"group": f"events:{self._event_plan.class_of[name]}", "class": "EVENT",
                        "template": rec.text, "subscriptions": 1, "name": name})
        return out

    def subscription_ids(self) -> list[str]:
        return [str(i) for e in self._groups.values() for i in e.registry.ids_of(e.registry.live_slots())]

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

    def notifications(self, table: str | None = None, since_seq: int | None = None):
        """The kept notifications (a Spark DataFrame): every ``publish``'s output, as it returned it, of
        ``table`` (None: every table; columns merged by name), the rows with ``seq >= since_seq`` when it is
        given -- a client that knows the seqs it consumed reads what it missed, after a kill or a reopen of
        a durable engine.  Unordered (sort by ``seq``).  Kept: the newest ``notification_retention_rows``
        rows per table (older files are deleted at checkpoints).  ``stream()``'s output is not kept here: it
        goes to the stream's sink."""
        if since_seq is not None and (isinstance(since_seq, bool) or not isinstance(since_seq, (int, np.integer))):
            raise InvalidArgument(f"notifications(since_seq=...) takes an integer seq, got {since_seq!r}")
        with self._lock:
            tables = None if table is None else {self._table(table).definition.name.lower()}
            files = self._journal.notification_files(tables, since_seq)
        return spark_output.read_notifications(self.spark, files, since_seq, publish_schema("unicast"))

    def committed(self, batch_id) -> bool:
        """Whether a ``publish(..., batch_id=batch_id)`` has been committed (kept in the engine's directory:
        after a reopen too)."""
        with self._lock:
            return self._journal.committed(batch_id) is not None

    def checkpoint(self) -> None:
        """Write a checkpoint of a durable engine now (one is written every ``checkpoint_interval`` journal
        records and at ``close()``): a reopen then replays no journal."""
        with self._lock:
            self._journal.checkpoint()

    def close(self, checkpoint: bool = True) -> None:
        """Checkpoint a durable engine (``checkpoint=False``: not; the next open replays the journal since the
        last one) and release its directory: another ``Engine(path=same)`` may open it.  The engine takes no
        more changes.  Also ``with Engine(path=...) as engine:``."""
        with self._lock:
            self._journal.close(checkpoint)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def checkpoint_location(self, name: str) -> str:
        """A Structured Streaming checkpoint location for the stream ``name`` in the engine's directory
        (``streams/<name>``): ``engine.stream(...)`` returns a streaming DataFrame whose checkpoint the caller
        chooses at ``writeStream``; pass this one to keep the stream's state beside the engine's catalog."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"checkpoint_location(name) takes a non-empty string, got {name!r}")
        return str(self.directory.area("streams", name))

    def _event_options(self) -> dict:
        return {"seconds_per_tick": self.event_seconds_per_tick}

    def _event_partition_count(self) -> int:
        return max(1, int(self.event_partitions)) if self.event_partitions is not None else self._parallelism()

    def _parallelism(self) -> int:
        """``parallelism``, else the session's ``spark.default.parallelism``, else 2 (no ``sparkContext``: Connect)."""
        return max(1, int(self.parallelism)) if self.parallelism is not None else default_parallelism(self.spark)

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
        env = {}
        for s in reads:
            if s in publishers:
                env[s] = self._event_queries[publishers[s]].published[s]
            else:
                env[s] = {c: _arrow_type(t) for c, t in self.catalog.get(s).columns}
        query = analyse_query(query, env, name=name, text=text).query
        info = evp.query_info(name, query, self._event_tables(), publishers)
        published: dict = {}
        attributes = evp.output_attributes(query, env, published)
        compiled = compile_query(name, query, schemas={s: list(a) for s, a in env.items()},
                                 seconds_per_tick=self.event_seconds_per_tick)
        raw = tuple(sorted(s for s in reads if s not in publishers))
        return EventQueryRecord(name, text, query, compiled, info, attributes, published, raw,
                                bool(info.reads) or len(compiled.automata) > 1)

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
            keep = [q for q in cls.queries if old is not None and q in old.cls.queries and q not in plan.reset]
            leave = [q for q in (old.cls.queries if old is not None else ()) if q not in keep]
            join = [q for q in cls.queries if q not in keep]
            replicas = {}
            for rid in cls.replica_ids():
                executor = None
                snapshot = None
                if keep:
                    executor = spark_replicas.materialize(old.replicas[rid])
                    for q in reversed(leave):                # readers before the producers they read
                        executor.unregister(q)
                    for q in join:
                        executor.register(q, records[q].query)
                    snapshot = executor.snapshot()
                base = evp.ReplicaBase(tuple((q, records[q].query) for q in cls.queries), snapshot, options,
                                       self.event_executor)
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

    # ---- data -----------------------------------------------------------------------------------------
    def load(self, table: str, data) -> int:
        """Set the initial state of ``table`` (rows replace rows with the same key). No notifications."""
        with self._lock:
            state = self._table(table)
            batch, reasons, _ = self._validated(state, data)
            bad = next((i for i, r in enumerate(reasons) if r is not None), None)
            if bad is not None:  # initial state: all or nothing (there is no output to set a row aside in)
                raise BadUpdate(f"load into {state.definition.name!r}: {reasons[bad]}", bad)
            self._journal.load(state.definition, batch)   # the commit point
            self._apply_rows(state, batch)
            for entry in self._groups_on(state):
                self._changed(entry, subscriptions=True)  # rebuild bases from the new rows
            return batch.num_rows

    def publish(self, table: str, updates, mode: str = "unicast", *, batch_id=None):
        """Apply ``updates`` in order and return the notifications as a Spark DataFrame.

        ``mode``: ``'unicast'`` (one row per affected subscription: subscription_id, op, value, seq,
        group_id) or ``'reformulated'`` (the messages: group_id, seq, step, op, new_value, inner_l,
        inner_r, outer_l, outer_r); both end with a nullable ``reason``. FILTER and BAND_JOIN groups have no
        reformulated form: in that mode their unicast rows (with ``subscription_id``) come out beside the
        messages, and ``deliver`` passes them through. A join notification carries its subscription's
        selected columns under their names (DESIGN §1; ``left_key``/``right_key``, the result tuple's keys,
        stay as a deprecated alias). Should a group's operator fail,
        its notifications for this batch are replaced by one ``op = 'error'`` row whose ``reason``
        names the failure, the other groups are unaffected, and the failed group is rebuilt from the
        table's rows on its next use (DESIGN §7).

        A malformed row (``operators/shared/row_validation.py``: a null key, an unknown ``_op``, NaN or ±inf in a
        numeric column, a value that does not cast to its column's type, a delete of a key the table does
        not hold -- counting earlier rows of the batch) is set aside: it comes out as a row with ``op =
        'rejected'``, its ``seq`` and ``reason``, exactly as ``stream`` emits it, and the other rows apply.
        A malformed batch (an unknown column, no key column, an upsert batch lacking a column) raises
        ``BadUpdate`` and changes nothing.

        On an event stream (a table without a key) the rows are events: each has an interval — integer
        ``t0``/``t1`` columns, or ``t0 = t1 = n`` for the n-th event published to the stream (0-based,
        across calls) — and the output holds, beside the FILTER notifications, the matches of the event
        queries reading the stream: ``op = 'match'``, ``query`` (the event query), one column per output
        attribute over those queries (``event_partitions``: names and types), ``t0``, ``t1``.  Within a
        call events are processed in (t1, row) order, inside Spark tasks (``spark_events``; one executor
        per partition of each event class).  A malformed event (NULL t0/t1, t0 > t1, a t1 before the
        largest t1 of an earlier call) comes out as an ``op = 'rejected'`` row with its ``seq``, columns
        and ``reason``, and is set aside (FILTER subscriptions do not see it either); the others go on.
        Some events are set aside for one event class only (a ``rejected`` row with the class as
        ``group_id``): in a class reading several streams, one older than what the class already processed
        (a class needs its streams in end-time order); in a class one of whose queries reads a PUBLISHed
        stream, one continuing the tick an earlier call ended with (its matches could differ from the
        oracle's: publish a tick's events in one call).
        An event on which an event query raises (an ill-typed comparison) is set aside for its class (none
        of the class's queries sees it): a ``rejected`` row with ``group_id`` = the replica and the error as
        ``reason``.  A replica whose executor fails altogether yields an ``op = 'error'`` row and its batch
        is dropped for it alone.
        Event queries have one output form: their rows come out in either ``mode``.

        The output is kept in the engine's directory before the call returns (``notifications()``), and the
        commit is journaled (a durable engine: ``Engine(path=...)``).  ``batch_id`` (a string or an integer)
        makes the call idempotent, as a Structured Streaming sink's batch id: a batch id already committed
        -- before a kill, in an earlier process -- is not applied again; the call returns the output kept
        for it (an empty DataFrame once the retention window passed it).  ``committed(batch_id)`` tells.
        """
        schema = publish_schema(mode)
        if batch_id is not None and (isinstance(batch_id, bool) or not isinstance(batch_id, (str, int))):
            raise InvalidArgument(f"publish(batch_id=...) takes a string or an integer, got {batch_id!r}")
        with self._lock:
            state = self._table(table)
            if batch_id is not None and self._journal.committed(batch_id) is not None:
                return self._kept_output(state, batch_id, schema)
            batch, reasons, ticks = self._validated(state, updates)
            times = None
            if state.definition.key is None:
                times = self._event_times(state, batch.num_rows, reasons, ticks)
                reasons = np.array(times["reasons"], dtype=object)
            n_rows = batch.num_rows
            all_seqs = np.arange(self._next_seq, self._next_seq + n_rows, dtype=np.int64)
            all_batch = batch
            seqs = all_seqs
            ok = np.fromiter((r is None for r in reasons), dtype=bool, count=n_rows)
            if not ok.all():  # set aside (DESIGN §7): the rejected rows come out below, the rest goes on
                batch, seqs = batch.filter(pa.array(ok)), all_seqs[ok]
            groups = self._groups_on(state)
            # every family adds its notifications' columns (FILTER and BAND_JOIN have no reformulated form: in
            # that mode they answer with their unicast rows beside the messages, issue 15 item 6, and deliver()
            # passes them through)
            schema = self._output_schema(schema, mode, groups, state.definition)
            self._net_join_rows = False
            group_batches = {e.group_id: e.family.group_batch(e.physical, state.definition, batch, seqs)
                             for e in groups if e.family.placement != ROW_PARTITIONS}
            replicas, parts, owner = {}, [], {}
            for e in groups:
                if mode == "reformulated" and e.family.reformulated(e.physical):
                    self._sync_subscribers(e)
                if e.family.placement == ROW_PARTITIONS:
                    # one replica per partition; the rows are routed to their partitions (join_groups)
                    for rid, replica in self._join_replicas(e).items():
                        replicas[rid] = replica
                        owner[rid] = e.group_id
                    group_batches[e.group_id] = self._join_batch(state, e, batch, seqs)
                    parts.append(group_batches[e.group_id])
                    continue
                # A range group is one replica; a FILTER group one per shard, each shard seeing
                # every event (001 is stateless per event: shards only split the subscriptions).
                for rid, replica in self._replicas(state, e).items():  # as of before this batch
                    replicas[rid] = replica
                    owner[rid] = e.group_id
                    b = group_batches[e.group_id]
                    parts.append(b.append_column("group_id", pa.array([rid] * b.num_rows, pa.string())))
            if groups:
                combined = pa.concat_tables(parts, promote_options="default")
                df, failed_parts = spark_groups.run_groups(self.spark, replicas, combined, mode, schema,
                                                           _operator_name(e.physical for e in groups),
                                                           self._describe([(e.physical, e) for e in groups], mode))
                failed = {owner[rid] for rid in failed_parts}
                if self._net_join_rows:
                    df = spark_frames.net_join_notifications(df)
                df = _rename_event_columns(df, state.definition)
            else:
                df, failed = None if times is not None else spark_frames.empty_frame(self.spark, schema), set()
            event_commit = None
            if times is not None:
                df, event_commit = self._with_event_part(state, df, schema, all_batch, all_seqs, times)
            elif not ok.all():  # a keyed table's malformed rows, as a stream emits them (row_validation)
                rejected = row_validation.rejected_rows(schema, all_seqs[~ok], reasons[~ok])
                df = df.unionByName(_rename_event_columns(self.spark.createDataFrame(rejected), state.definition),
                                    allowMissingColumns=True)
            # Only now, with the notifications computed -- and kept, with the rows the batch applies
            # (journal.py) -- does the batch become part of the state.
            kept = self._journal.publish_begin(
                state.definition, self._next_seq, n_rows, batch, batch_id,
                lambda path: spark_output.write_notifications(df, path, self._journal.durable))
            self._apply_rows(state, batch)
            self._next_seq += n_rows
            if event_commit is not None:
                event_commit()
            for e in groups:  # the batch is now part of every group's state: log it
                if e.group_id in failed:
                    # Its 'error' row is in the output; rebuild it from the rows next time (DESIGN §7).
                    e.base_stale = True
                    e.version += 1
                    continue
                if e.family.stateless:
                    continue  # stateless: nothing to log
                if e.family.placement == ROW_PARTITIONS:
                    jb = group_batches[e.group_id]
                    for rid, replica in list(e.shards.items()):
                        mine = jb.filter(pc.equal(jb.column("group_id"), rid))
                        if mine.num_rows:  # a task ran for this partition and moved its cache one step
                            e.shards[rid] = replica.append(mine)
                    e.log_rows += batch.num_rows
                    e.version += 1
                    if mode == "reformulated" and e.subscribers is not None:
                        e.subscribers_version = e.version
                    continue
                e.replica = e.replica.append(group_batches[e.group_id])
                e.log_rows += batch.num_rows
                e.version += 1
                if mode == "reformulated" and e.subscribers is not None:
                    e.subscribers_version = e.version
            self._journal.publish_commit(kept, state.definition)   # the commit point (journal.py)
            if self.catalyst and df is not None:
                # The operators ran once, above, and their output was checkpointed (lineage cut): the node
                # on top keeps saying in df.explain() which groups produced these rows.
                events = self._event_classes_on(state.definition) if times is not None else []
                what = [d for d in (self._describe([(e.physical, e) for e in groups], mode),
                                    self._describe_events(events, "batch")) if d]
                df = subscription_group(df, f"publish to {state.definition.name} (ran once, checkpointed): "
                                            + ("; ".join(what) or "no groups"))
            return df

    def _kept_output(self, state: TableState, batch_id, schema: pa.Schema):
        """``publish``'s answer for a batch id already committed: the output kept for it."""
        kept = self._journal.committed(batch_id)
        if kept["table"] != state.definition.name.lower():
            raise InvalidArgument(f"publish(batch_id={batch_id!r}): that batch id was committed for table "
                                  f"{kept['table']!r}, not {state.definition.name!r}")
        path = self._journal.notification_path(kept)
        if path is None:
            _log.warning("publish(batch_id=%r): committed before; its output is past the retention window "
                         "(notification_retention_rows) and no longer kept", batch_id)
        return spark_output.read_notifications(self.spark, [str(path)] if path else [], None, schema)

    def stream(self, table: str, streaming_df, mode: str = "unicast"):
        """Run the subscriptions on ``table`` over a stream of updates: a streaming DataFrame of
        notifications (Structured Streaming; ``runtime/stream.py``).

        ``streaming_df`` has the table's columns, an optional ``_op`` (``'upsert'`` default, or
        ``'delete'``) and an optional integer ``_seq``. Rows of one micro-batch apply in ``_seq`` order
        (notifications carry ``seq = _seq``); without ``_seq``, in input order (input partitions in
        turn, each in row order; ``seq = (micro-batch id << 32) + rank``; deterministic when a
        file source replays a micro-batch) -- for every class alike. Output: ``publish``'s columns for
        ``mode`` plus a nullable ``reason``. Every row is checked first, by the check ``publish`` makes
        (``row_validation``): a malformed row (null key, NaN or ±inf in a numeric column, a value of the
        wrong type, an unknown ``_op``, a delete of an unknown key, a null or inverted event interval)
        does not stop the stream: it is emitted once as a row with ``op = 'rejected'``, its ``seq`` and
        the ``reason`` ``publish`` gives (other columns null; an event's columns and interval on an
        event stream), and counted (``spark_stream.stream_stats(df)``). State (the rows per group) lives in
        Spark's state store and survives restarts from the checkpoint; for a new checkpoint the initial rows
        are the engine's when ``stream`` is called.  The checkpoint is the one given to ``writeStream``;
        ``checkpoint_location(name)`` is one inside the engine's directory, which holds the catalog a
        restarted stream is built from (the checkpoint holds its state).

        **Subscriptions are data** (``runtime/stream_control.py``): a ``CREATE`` / ``DROP SUBSCRIPTION``,
        ``subscribe_many`` or ``unsubscribe`` while the stream runs is published to the stream's directory before
        it returns, and every micro-batch that starts after that applies it before its rows -- in a range group
        the stream hosts, the FILTER group, a join group; so is a new range group (a new template's first
        subscription) when the stream started with a range operator whose output has the group's columns.  A
        group the stream cannot host (a new FILTER or join group, a range group whose notifications have other
        columns) gets a ``RuntimeWarning``: a stream started after it notifies it.  A restart of the stream
        from its checkpoint keeps every change.  Event queries are planned into the stream's operators when it
        starts: ``CREATE`` / ``DROP EVENT QUERY`` on its table is refused while it runs.

        **The engine follows the stream**: each micro-batch's valid rows go to a file of the stream's directory,
        and the engine takes them in (as a publish commits a batch: the table's rows, every group, the journal
        of a durable engine) before ``result``, EXPLAIN, ``stats``, ``publish``, ``table`` or a new group's base
        reads its state -- so ``result(id)`` agrees with what the stream applied.  It follows the streams it
        built itself: an engine that restarts a checkpoint another (non-durable) engine ran knows the rows that
        stream applied before only as far as its own directory does.  A ``publish`` to the table while a stream
        runs changes the engine's rows, not the stream's state.

        Range groups (MIN/MAX, top-k, DISTINCT, aggregates) are one stateful operator
        (``transformWithStateInPandas``, one state partition per group); a micro-batch is one batch
        for them, so in ``'reformulated'`` mode a top-k group sends Paint-Batch's messages for the
        whole micro-batch (002 §IV-A), each carrying the micro-batch's last ``seq``.

        Join groups (SELECT_JOIN, BAND_JOIN) that read the table run as *stream-static* joins
        (``runtime/join_stream.py``): the stream updates this table, the join partner is the other
        table's rows as of the ``stream`` call (as of a subscription change that needs more of its columns);
        the streamed rows live in the state store, partitioned by
        key. BAND_JOIN has no reformulated form: with ``mode='reformulated'`` its unicast rows come out.

        FILTER groups on the table (unicast rows in either mode) are stateless: each micro-batch is matched on every
        shard as a ``publish`` batch is, and their notifications (with the event's columns) are
        unioned with the range groups' (same ``seq``).
        """
        _check_streaming(streaming_df)
        schema = mode_schema(mode)  # run_stream adds the ``reason`` column
        with self._lock:
            state = self._table(table)
            groups = self._groups_on(state)
            event_classes = self._event_classes_on(state.definition) if state.definition.key is None else []
            if not groups and not event_classes:
                raise SparksubError(f"no subscriptions or event queries on table {table!r}: a stream hosts the "
                                    f"groups registered when it starts (and their later subscriptions)")
            joins = [e for e in groups if e.family.placement == ROW_PARTITIONS]
            filters = [e for e in groups if e.family.placement == SUBSCRIPTION_SHARDS]
            ranges = [e for e in groups if e not in filters and e not in joins]
            # One row check for every path, the one publish makes (row_validation): malformed rows come out
            # once, from it, with their reason; the paths see the valid rows, numbered (seq) alike.
            name = _operator_name(e.physical for e in groups) + "_stream" if groups else "event_query_nfa_stream"
            # the stream's files (the bases it starts from, its counters, the subscription changes and the rows it
            # applied: runtime/stream_control.py): stream_files/<id>/ of the engine's directory
            stream_id, files = uuid.uuid4().hex, self.directory.area("stream_files")
            control = stream_control.StreamControl(files / stream_id, self.uid, stream_id)
            keyed = state.definition.key is not None
            checked = spark_stream.checked_updates(streaming_df, state.definition, name,
                                                   control if keyed else None)   # (rows the engine follows)
            valid = spark_stream.valid_updates(checked)
            spark_stream.new_stream_id(files, owner=self.directory, stream_id=stream_id)   # (a good stream: its files)
            where = spark_stream.stream_directory(stream_id)
            live = stream_control.LiveStream(stream_id, state.definition.name.lower(), where, mode)
            outs = []
            if event_classes:
                outs.append(subscription_group(self._stream_events(state, event_classes, valid, where, stream_id,
                                                                   control),
                                               self._describe_events(event_classes, "stream")))
                live.events = True
            # (FILTER and BAND_JOIN have no reformulated form: in that mode they stream their unicast rows,
            # issue 15 item 6)
            streamed_joins = joins
            if streamed_joins:
                joined = self._stream_joins(state, streamed_joins, valid, mode, where, stream_id, control)
                if ranges:  # a delete of an unknown key: the range groups (which hold every row) say it once
                    joined = joined.where(joined.op != "rejected")
                outs.append(subscription_group(joined,
                                               self._describe([(e.physical, e) for e in streamed_joins],
                                                              f"stream {mode}")))
                live.joins = {e.group_id: e.family.side_of(e.physical, state.definition) for e in streamed_joins}
            if filters:
                # a keyed table's rows live in the range or join groups' state; without them, FILTER keeps the keys
                check_keys = keyed and not ranges and not joins
                outs.append(subscription_group(self._stream_filters(state, filters, valid, check_keys, where,
                                                                    control),
                                               self._describe([(e.physical, e) for e in filters], "stream unicast")))
                live.filter_group, live.filter_shards = filters[0].group_id, len(filters[0].shards)
            if ranges:
                specs = {}
                for e in ranges:
                    if e.replica is not None and e.replica.log_length:
                        e.base_stale = True  # the stream seeds its state from the base: make it current
                    x, y, y_is_text, x2 = e.family.stream_columns(e.physical, state.definition)
                    # the stream's own link to the base file: the engine's compaction may replace the group's
                    base = spark_replicas.pin(self._replica(state, e), where)
                    specs[e.group_id] = (x, y, spark_replicas.StoredValue(base.base_path), y_is_text, x2)
                wide = self._output_schema(with_reason(schema), mode, ranges, state.definition)
                schema = wide.remove(wide.get_field_index("reason"))  # run_stream appends it
                ranges_out = spark_stream.run_stream(self.spark, valid, state.definition, specs, mode, schema,
                                                     self.uid, _operator_name(e.physical for e in ranges) + "_stream",
                                                     stream_id, control)
                outs.append(subscription_group(ranges_out, self._describe([(e.physical, e) for e in ranges],
                                                                          f"stream {mode}")))
                live.ranges, live.range_schema = set(specs), wide
            if not outs:
                raise SparksubError(f"stream(): the FILTER / BAND_JOIN subscriptions on {table!r} have no "
                                    f"{mode!r} form; use mode='unicast'")
            out = outs[0]
            for more in outs[1:] + [spark_stream.rejected_updates(checked, state.definition, stream_id, name)]:
                out = out.unionByName(more, allowMissingColumns=True)
            out.sparksub_stream_id = stream_id  # for spark_stream.stream_stats(out)
            self._live_streams[stream_id] = live   # from now on, changes of its groups are published to it
            return out

    def _stream_events(self, state: TableState, classes: list, streaming_df, where=None, stream_id=None,
                       control=None):
        """Event queries over a stream (``runtime/event_stream.py``): the streaming DataFrame needs
        integer ``t0``/``t1`` columns (no global arrival order exists across micro-batches); ``_seq``, if
        present, orders events of equal ``t1``.  Each partition's executor lives in the state store
        (restart-safe); a new checkpoint starts from the engine's executors as they are now.  The
        stream's events do not flow back into the engine (``matches`` does not see them)."""
        from sparksub.runtime import event_stream as ses
        tdef = state.definition
        members = [q for c in classes for q in c.cls.queries]
        spec = ses.event_stream_spec(
            tdef.name, {c: _arrow_type(t) for c, t in tdef.columns if c not in ("t0", "t1")},
            {q: self._event_queries[q].query for q in members},
            seconds_per_tick=self.event_seconds_per_tick, executor=self.event_executor,
            plan=self._event_plan, layout=self._event_layout(tdef, members),
            spellings={c.cls.id: self._event_spellings(c.cls, tdef) for c in classes},
            initial={rid: ex.snapshot() for c in classes for rid, ex in self._event_executors(c).items()},
            store=where, stats=spark_stream._STATS.get(stream_id), control=control)
        return ses.run_event_stream(streaming_df, spec, order=spark_stream.SEQ_COLUMN)

    def _stream_filters(self, state: TableState, entries: list, checked_df, check_keys: bool = False, where=None,
                        control=None):
        """FILTER groups on a stream of valid rows (``spark_stream.checked_updates``): stateless, so each
        micro-batch is matched like a ``publish`` batch (events to every shard; a delete matches nothing).
        ``check_keys``: no other path keeps the keyed table's rows, so the keys are kept here
        (``spark_stream.known_key_updates``) and a delete of an unknown key comes out ``rejected``.  ``control``:
        the stream's directory, whose subscription changes the shards' tasks take (``stream_control.LiveReplicas``)."""
        tdef = state.definition
        schema = self._output_schema(publish_schema("unicast"), "unicast", entries, tdef)
        if check_keys:
            keys = spark_replicas.write_value(f"{where}/keys.pickle", set(state.rows)) if where is not None \
                else spark_stream._Deferred(pickle.dumps(set(state.rows), protocol=pickle.HIGHEST_PROTOCOL))
            checked_df = spark_stream.known_key_updates(checked_df, tdef, keys,
                                                        _operator_name(e.physical for e in entries) + "_stream")
        events = spark_frames.filter_stream_events(checked_df, tdef.column_names, with_reason=check_keys)
        replicas = {rid: r if where is None else spark_replicas.pin(r, where)   # (files the stream keeps)
                    for e in entries for rid, r in self._replicas(state, e).items()}
        if control is not None:
            replicas = stream_control.LiveReplicas(replicas, control)
        out = spark_groups.stream_groups(events, replicas, "unicast", schema, _operator_name(e.physical for e in entries))
        return _rename_event_columns(out, tdef)

    def result(self, sub_id: str):
        """The subscription's current result: the MIN (MAX) over its range, None when empty; for top-k and
        joins a list of row dicts of the selected columns under their names (DESIGN §1), top-k in rank order,
        joins by the result tuple's keys. A FILTER subscription is stateless: it has no result (None); its
        matches are the notifications.  For an event query: ``matches(name)``."""
        with self._lock:
            if sub_id in self._event_queries:
                return self.matches(sub_id)
            entry = self._find_group(sub_id)
            return entry.family.result(entry.registry, entry.physical, self._operator(entry), sub_id, self._tables)

    def deliver(self, messages):
        """Play the network and the subscribers: reformulated messages -> the unicast rows they cause.

        Every group's subscribers start from their results when ``publish(..., mode='reformulated')``
        first ran for it (and again whenever the group changed in between: a unicast publish,
        subscriptions added or removed) and follow only the messages handed to ``deliver``, in ``seq``
        order (within a seq, range-class messages in ``msg_no`` order). Output: ``publish``'s unicast
        columns (with the item columns when a top-k / DISTINCT / aggregate / box group is among them, a join's
        selected columns). The unicast rows of FILTER and BAND_JOIN groups (no reformulated form) pass through."""
        table = _to_arrow(messages)
        schema = UNICAST_SCHEMA
        outs = []
        with self._lock:
            # every message of a known group, with its group's columns (deliver_input): else a BadUpdate
            table = checked_messages(table, {e.group_id: e.physical for e in self._groups.values()})
            for entry in self._groups.values():
                if not table.num_rows:
                    break
                mine = table.filter(pc.equal(table.column("group_id"), entry.group_id))
                if mine.num_rows:
                    family = entry.family
                    if not family.reformulated(entry.physical):
                        # no reformulated form: publish(..., 'reformulated') gave their unicast rows (issue 15
                        # item 6), which reach their subscribers as they are
                        outs.append(self._subscribers_of(entry).deliver(mine))
                        continue
                    if entry.subscribers is None:
                        raise SparksubError(f"group {entry.group_id!r} has no subscriber state: deliver "
                                            f"the messages of publish(..., mode='reformulated')")
                    schema = pa.schema(list(schema) + [f for f in family.item_schema if f.name not in schema.names])
                    outs.append(entry.subscribers.deliver(mine))
        # groups differ in columns (MIN rows lack the item columns): nulls fill in. One chunk: pyspark
        # 4.3's createDataFrame(pa.Table) drops the chunk that follows an empty one.
        outs = [o for o in outs if o.num_rows]
        for o in outs:  # the selected columns of join rows, the event columns of FILTER rows
            for f in o.schema:
                i = schema.get_field_index(f.name)
                t = pa.string() if pa.types.is_null(f.type) else f.type
                schema = schema.append(pa.field(f.name, t)) if i < 0 else \
                    schema.set(i, pa.field(f.name, join_groups.unify_types(schema.field(i).type, t)))
        out = pa.concat_tables([pa.table({f.name: o.column(f.name).cast(f.type) if f.name in o.column_names
                                          else pa.nulls(o.num_rows, f.type) for f in schema}, schema=schema)
                                for o in outs]).combine_chunks() if outs else schema.empty_table()
        return self.spark.createDataFrame(out)

    def explain(self, target: str, format: str = "text") -> str:
        """EXPLAIN SUBSCRIPTION: our plan and the Spark physical plan it runs in, for a subscription id, a
        SELECT, or an event query's name (``format="dot"``: its automata as Graphviz DOT)."""
        from sparksub.planner.explain import explain_text
        if format not in ("text", "dot"):
            raise ValueError(f"unknown EXPLAIN format {format!r}; expected 'text' or 'dot'")
        with self._lock:
            if target in self._event_queries:
                return self._explain_event(target, format)
            if format != "text":
                raise ValueError("format='dot' is for event queries (their automata)")
            if target in self._records:
                rec = self._records[target]
                planned, entry = rec.planned, self._find_group(target)
            else:
                entry = self._find_group(target, required=False)
                if entry is not None:  # a bulk subscription: explain its group's first template
                    planned = self._bulk[entry.group_id][0].planned
                elif isinstance(target, str) and _BARE_NAME.fullmatch(target.strip()):
                    raise UnknownSubscription(f"no subscription or event query {target.strip()!r}")
                else:
                    planned = self._plan(target)
                    entry = self._groups.get(planned.physical.group_key)
            spark_plan = self._spark_plan(planned.physical)
            operator = self._operator(entry) if entry is not None and len(entry.registry) else None
            lines = family_of(planned.physical).explain_lines(entry.registry if entry is not None else None,
                                                              planned.physical, operator)
            return explain_text(target, planned, entry, lines, spark_plan, bool(self.catalyst))

    def stats(self) -> dict:
        """Per group id, the operator's counters.  Event classes (``events:<class>``): the queries, key,
        partitions, streams, the executors' counters (``NFAEngine.stats()``) summed over the partitions,
        events logged, failures and rejected events; event streams (``stream:<table>``): events
        published, the largest t1, events rejected.  ``runtime``: the worker caches' outcomes over every
        replica, summed from the counter files under the engine's directory (``runtime/replicas.py``) --
        ``hits``, ``catch_ups`` (log entries replayed into a cached operator), ``rebuilds`` (from the base and
        the log files: a cold worker, or the driver), ``log_replayed``, the driver's share (``driver``), per
        replica (``by_label``), and the streams' counters (``streams``: ``spark_stream.stream_stats``' names).
        ``engine``: its directory (``directory``, ``durable``), ``published`` (publish calls committed, ever),
        ``last_batch_id`` (the last committed ``publish(..., batch_id=...)``), ``next_seq``, the current
        ``checkpoint`` and the ``journal_records`` since it (journal.py)."""
        with self._lock:
            out = {}
            for entry in self._groups.values():
                out[entry.group_id] = entry.family.stats(entry.registry, entry.physical, self._operator(entry))
            for cid, c in self._event_classes.items():
                out[f"events:{cid}"] = EVENTS.stats(c, self._event_executors(c),
                                                    sum(r.logged_rows for r in c.replicas.values()), self._event_resets)
            for key, (count, last, rejected) in self._event_clocks.items():
                out[f"stream:{self.catalog.get(key).name}"] = {"events": count, "last_t1": last, "rejected": rejected}
            out["runtime"] = {**spark_replicas.read_counts(self.directory.root / "groups"),
                              "streams": spark_replicas.read_counts(self.directory.root / "stream_files")}
            out["engine"] = {**self._journal.stats(), "next_seq": self._next_seq}
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
        sample = evp.events_table({col: pa.nulls(n, _arrow_type(t)) for col, t in tdef.columns}, [0] * n, [0] * n,
                                  list(range(n)))
        sample = sample.append_column("replica", pa.array(rids * 2, pa.string()))
        spell = self._event_spellings(cls, tdef)
        try:
            return spark_events.event_plan_string(self.spark, dict(c.replicas), sample, {r: spell for r in rids},
                                                  self._event_layout(tdef, cls.queries),
                                                  self._describe_events([c], "batch"))
        except Exception as err:  # EXPLAIN must not fail because Spark is unavailable
            return f"(Spark plan unavailable: {err})"

    # ---- internals ----------------------------------------------------------------------------------
    def _groups_on(self, state: TableState) -> list[GroupEntry]:
        name = state.definition.name.lower()
        return [e for e in self._groups.values() if name in e.family.tables(e.physical) and len(e.registry)]

    def _validated(self, state: TableState, data) -> tuple[pa.Table, np.ndarray, tuple | None]:
        """``(batch, reasons, ticks)``: the batch cast to the table's schema plus an int8 ``op``; per row why
        it is set aside (None: valid) -- ``row_validation.check_rows``, the checks every stream path makes
        too, and, in a keyed table, a delete of a key it does not hold (as of the rows before it); and an
        event stream's given ``(t0, t1)`` (None: not given).  Batch-level errors raise BadUpdate before any
        change (DESIGN §7)."""
        tdef = state.definition
        shape = row_validation.RowShape.of(tdef)
        checked = row_validation.check_rows(_to_arrow(data), shape)
        reasons = checked.reasons
        if tdef.key is not None:
            live, pending = state.rows, {}
            for i, k in enumerate(checked.columns[tdef.key].to_pylist()):
                if reasons[i] is not None:
                    continue
                if checked.ops[i] == DELETE:
                    if not (pending[k] if k in pending else k in live):
                        reasons[i] = row_validation.unknown_key_reason(k, tdef.name)
                        continue
                    pending[k] = False
                else:
                    pending[k] = True
        ticks = (checked.t0, checked.t1) if checked.t0 is not None else None
        return checked.table(shape), reasons, ticks

    def _apply_rows(self, state: TableState, batch: pa.Table) -> None:
        if state.definition.key is None:
            return  # events are not kept
        names = state.definition.column_names
        key_i = names.index(state.definition.key)
        ops = batch.column("op").to_numpy()
        rows = zip(*(batch.column(c).to_pylist() for c in names))
        for op, row in zip(ops, rows):
            if op == DELETE:
                state.rows.pop(row[key_i], None)
            else:
                state.rows[row[key_i]] = row

    def _snapshot(self, state: TableState, entry: GroupEntry):
        """The base the group's operator is rebuilt from (``family.snapshot``: its subscriptions and rows)."""
        return entry.family.snapshot(entry.registry, entry.physical, entry.group_id, self._tables)

    def _replica(self, state: TableState, entry: GroupEntry) -> spark_replicas.Replica:
        """The group's replica: its base snapshot and log in files under the engine's directory
        (``runtime/replicas.py``); a new base when subscriptions or loaded rows changed or the log grew past
        LOG_COMPACTION_ROWS, the superseded base and log files deleted."""
        if entry.replica is None or entry.base_stale or entry.log_rows > LOG_COMPACTION_ROWS:
            entry.replica = spark_replicas.new_base(self.directory, self.uid, entry.group_id,
                                                    self._snapshot(state, entry), replaces=entry.replica)
            entry.log_rows = 0
            entry.base_stale = False
        return entry.replica

    def _replicas(self, state: TableState, entry: GroupEntry) -> dict:
        """What the tasks of one publish need for this group, by the batch's group_id."""
        if entry.family.placement != SUBSCRIPTION_SHARDS:
            return {entry.group_id: self._replica(state, entry)}
        if entry.shards is None or entry.base_stale:
            superseded = list((entry.shards or {}).values())
            snap = self._snapshot(state, entry)
            k = max(1, min(-(-len(snap) // self.filter_shard_size), self._parallelism()))
            entry.shards = {}
            for i in range(k):
                part = snap.shard(i, k) if k > 1 else snap
                rid = f"{entry.group_id}#{i}"
                entry.shards[rid] = spark_replicas.new_base(self.directory, self.uid, rid, part)
            for old in superseded:
                spark_replicas.discard(old)
            entry.base_stale = False
        return entry.shards

    def _materialized(self, state: TableState, entry: GroupEntry):
        """The group as of now, in this (driver) process: from the worker-style cache + log replay."""
        if entry.family.stateless:
            return entry.registry  # stateless: the registry is the whole operator (operators/contract.py)
        replica = self._replica(state, entry)
        group = spark_replicas.materialize(replica)
        spark_replicas.remember(replica, replica.log_length, group)
        return group

    def _sync_subscribers(self, entry: GroupEntry) -> None:
        """Seed the deliver() side with every subscriber's current result, unless it is in step."""
        if entry.subscribers is not None and entry.subscribers_version == entry.version:
            return
        entry.subscribers, entry.subscribers_version = self._subscribers_of(entry), entry.version

    def _subscribers_of(self, entry: GroupEntry):
        """The group's subscriber side as of now (``family.subscribers``; the operator materialised if needed)."""
        return entry.family.subscribers(entry.registry, entry.physical, lambda: self._operator(entry), self._tables)

    def _operator(self, entry: GroupEntry):
        """The group's operator as of now, in this (driver) process (the runtime's cache + log replay): a join's
        partitions by replica id, else the one operator (FILTER: its registry)."""
        for name in entry.family.tables(entry.physical):
            self._follow_streams(self._tables[name])   # result() agrees with what the streams applied
        if entry.family.placement == ROW_PARTITIONS:
            return self._join_partitions_materialized(entry)
        return self._materialized(self._tables[entry.family.tables(entry.physical)[0]], entry)

    @staticmethod
    def _output_schema(schema: pa.Schema, mode: str, groups, table: TableDef) -> pa.Schema:
        """``schema`` (``publish``'s or ``stream``'s) with the columns the notifications of ``groups`` on
        ``table`` add, family by family in the registry's order (``operators/registry.py``)."""
        for family, members in in_order(groups, lambda e: e.physical):
            schema = family.output_schema(schema, mode, [(e.physical, e.registry) for e in members], table)
        return schema

    # ---- join groups (SELECT_JOIN, BAND_JOIN: operators/joins/group.py) ---------------------------------------
    def _join_partition_count(self) -> int:
        return max(1, int(self.join_partitions)) if self.join_partitions is not None else self._parallelism()

    def _join_replicas(self, entry: GroupEntry) -> dict:
        """One replica per partition, each with its base (its rows and every subscription) and its log."""
        if entry.shards is not None and not entry.base_stale and entry.log_rows <= LOG_COMPACTION_ROWS:
            return entry.shards
        superseded = list((entry.shards or {}).values())   # their files go once the new bases are written
        layout, snaps = entry.family.partition_snapshots(entry.registry, entry.physical, entry.group_id, self._tables,
                                                         self._join_partition_count(), self.join_router_mode)
        entry.shards = {}
        for rid, snap in snaps.items():
            entry.shards[rid] = spark_replicas.new_base(self.directory, self.uid, rid, snap)
        for old in superseded:
            spark_replicas.discard(old)
        entry.registry.layout = layout
        entry.base_stale = False
        entry.log_rows = 0
        return entry.shards

    def _stream_joins(self, state: TableState, entries: list, streaming_df, mode: str, where=None,
                      stream_id: str | None = None, control=None):
        """Join groups on a stream of updates to one of their tables: stream-static joins (the partner is
        the other table's rows now), state per partition of the streamed rows (spark_join_stream).  The
        bases and the initial rows go to files in ``where`` (the stream's directory)."""
        from sparksub.runtime.join_stream import JoinStreamGroup, run_join_stream
        from sparksub.runtime.stream import _Deferred

        def stored(name: str, value):
            return (spark_replicas.write_value(f"{where}/{name}", value) if where is not None
                    else _Deferred(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))
        tdef = state.definition
        parts = self._join_partition_count()
        initial = stored("join-initial.pickle", dict(state.rows))
        specs = {}
        for n, e in enumerate(entries):
            side = e.family.side_of(e.physical, tdef)
            snap = e.family.stream_snapshot(e.registry, e.physical, e.group_id, self._tables, side,
                                            self.join_router_mode)
            specs[e.group_id] = JoinStreamGroup(e.group_id, side, parts, stored(f"join-{n}.pickle", snap), initial)
        # (a band join answers with its unicast rows in either mode, issue 15 item 6)
        schema = self._output_schema(publish_schema(mode), mode, entries, tdef)
        return _rename_event_columns(run_join_stream(self.spark, streaming_df, tdef, specs, mode, schema,
                               [_arrow_type(t) for _, t in tdef.columns], self.uid,
                               _operator_name(e.physical for e in entries) + "_stream", stream_id, control), tdef)

    def _join_batch(self, state: TableState, entry: GroupEntry, batch: pa.Table, seqs) -> pa.Table:
        """The batch for a join group's partitions: an upsert of a known key becomes the delete of its old row
        and the insert of the new one (one seq; they may go to different partitions), each row routed to its
        partition(s) (``group_id`` = the partition's replica id)."""
        tdef = state.definition
        names = tdef.column_names
        side = entry.family.side_of(entry.physical, tdef)
        layout = entry.registry.layout
        ki = names.index(tdef.key)
        cols = list(zip(*(batch.column(c).to_pylist() for c in names))) if batch.num_rows else []
        ops = batch.column("op").to_numpy()
        out_rows, out_ops, out_seqs, out_parts = [], [], [], []

        def emit(row, op, seq):
            for part in entry.family.targets(entry.physical, layout, side, row, names):
                out_rows.append(row)
                out_ops.append(op)
                out_seqs.append(seq)
                out_parts.append(f"{entry.group_id}#{part}")

        pending: dict = {}
        for i, row in enumerate(cols):
            key = row[ki]
            old = pending[key] if key in pending else state.rows.get(key)
            if old is not None:
                emit(old, DELETE, int(seqs[i]))
            if ops[i] == DELETE:
                pending[key] = None
            else:
                emit(row, UPSERT, int(seqs[i]))
                pending[key] = row
                if old is not None and side == join_groups.R and layout["kind"] == "BAND_JOIN" and \
                        entry.family.targets(entry.physical, layout, side, old, names) != \
                        entry.family.targets(entry.physical, layout, side, row, names):
                    # an S row moving to another partition: a pair it keeps is deleted in one partition and
                    # inserted in the other; publish nets them (the only case no partition can)
                    self._net_join_rows = True
        columns = list(zip(*out_rows)) if out_rows else [[] for _ in names]
        out = {EVENT_PREFIX + c: pa.array(list(v), _arrow_type(t)) for (c, t), v in zip(tdef.columns, columns)}
        return pa.table({**out, "op": pa.array(out_ops, pa.int8()), "seq": pa.array(out_seqs, pa.int64()),
                         "j_side": pa.array([side] * len(out_ops), pa.int8()),
                         "group_id": pa.array(out_parts, pa.string())})

    def _join_partitions_materialized(self, entry: GroupEntry) -> dict:
        """Every partition of a join group as of now, in this (driver) process (cache + log replay)."""
        out = {}
        for rid, replica in self._join_replicas(entry).items():
            group = spark_replicas.materialize(replica)
            spark_replicas.remember(replica, replica.log_length, group)
            out[rid] = group
        return out

    def _spark_plan(self, physical) -> str:
        entry = self._groups.get(physical.group_key)
        gid = entry.group_id if entry else "(new group)"
        family = family_of(physical)
        tdef = self.catalog.get(family.tables(physical)[0])
        # One placeholder row: an empty local relation would let Spark optimise the exchange away.
        row = pa.table({c: pa.nulls(1, _arrow_type(t)) for c, t in tdef.columns}).append_column(
            "op", pa.array([UPSERT], pa.int8()))
        sample = family.group_batch(physical, tdef, row, np.zeros(1, dtype=np.int64))
        rid = f"{gid}#0" if family.placement == ROW_PARTITIONS else gid   # (a join: its first partition)
        sample = sample.append_column("group_id", pa.array([rid], pa.string()))
        schema = family.output_schema(publish_schema("unicast"), "unicast", [(physical, None)], tdef)
        replica = spark_replicas.Replica(self.uid, rid, "", "explain")   # a placeholder: never run
        try:
            return spark_groups.plan_string(self.spark, {rid: replica}, sample, "unicast", schema,
                                            _operator_name([physical]),
                                            self._describe([(physical, entry)], "unicast", physical))
        except Exception as err:  # EXPLAIN must not fail because Spark is unavailable
            return f"(Spark plan unavailable: {err})"


# ---- input conversion -----------------------------------------------------------------------------

_arrow_type = row_validation.arrow_type  # a column's Arrow type, as validation casts it


def _to_arrow(data) -> pa.Table:
    """Spark DataFrame, pandas DataFrame, Arrow table/batch, a dict of arrays, or a list of rows."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    mod = type(data).__module__
    if mod.startswith("pyspark"):
        return data.toArrow()
    if mod.startswith("pandas"):
        table = pa.Table.from_pandas(data, preserve_index=False)
        # NaN in a float column is the value NaN -- refused like a NaN from any other source (DESIGN §7) --,
        # not pandas' missing marker, which from_pandas makes it: a missing value is None / NaN in an object
        # column or pd.NA in a nullable column (Float64, Int64), which are null
        for i, name in enumerate(table.column_names):
            column = data.iloc[:, i]
            if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f":   # not pandas' nullable Float64
                table = table.set_column(i, name, pa.array(column.to_numpy(), from_pandas=False))
        return table
    if isinstance(data, dict):
        return _arrow_columns(data)
    if isinstance(data, (list, tuple)):
        if not data:
            raise BadUpdate("an empty list of rows has no columns; pass a DataFrame or dict of arrays")
        if hasattr(data[0], "asDict"):
            data = [r.asDict() for r in data]
        if isinstance(data[0], dict):
            # pyarrow takes the schema from the first row; rows may differ (a delete has only the key)
            names = list(dict.fromkeys(k for row in data for k in row))
            return _arrow_columns({k: [row.get(k) for row in data] for k in names})
    raise BadUpdate(f"cannot read rows from a {type(data).__name__}: pass a Spark or pandas DataFrame, "
                    f"an Arrow table, a dict of arrays or a list of dicts")


def _param_array(values) -> np.ndarray:
    """A parameter column as numpy.  A list of values of more than one type, or of integers beyond int64,
    stays an object array: numpy would make ``[1.0, True]`` two floats and ``[1, "x"]`` two strings, and
    the binding could then neither refuse the boolean nor name the bad row."""
    if isinstance(values, np.ndarray) or not isinstance(values, (list, tuple)):
        return np.asarray(values)
    kinds = {type(v) for v in values if v is not None}
    if len(kinds) == 1 and kinds != {int}:
        out = np.asarray(values)
        if out.dtype != object:
            return out
    elif kinds == {int} and None not in values and all(-2 ** 63 <= v < 2 ** 63 for v in values):
        return np.asarray(values, dtype=np.int64)
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _arrow_columns(columns: dict) -> pa.Table:
    """A dict of columns as an Arrow table; a column whose values are of no one type (``["x", 1.0]``) or of
    another length is a BadUpdate naming it, not a raw pyarrow error."""
    arrays = {}
    for name, values in columns.items():
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            arrays[name] = values
            continue
        try:
            arrays[name] = pa.array(values if isinstance(values, np.ndarray) else list(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError) as err:
            raise BadUpdate(f"column {name!r}: its values are not of one type Arrow can hold ({err})",
                            None, str(name)) from None
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise BadUpdate(f"columns of different lengths: {lengths}")
    return pa.table(arrays)


def _param_columns(params) -> dict:
    if isinstance(params, dict):
        return {k: _param_array(v) for k, v in params.items()}
    table = _to_arrow(params)
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}


def _operator_name(physicals) -> str:
    """The name Spark's EXPLAIN shows for the task function: the operator families it runs."""
    kinds = sorted({family_of(p).operator_name(p) for p in physicals})
    return "_and_".join(kinds) + ("_group" if len(kinds) == 1 else "_groups")


def _rename_event_columns(df, tdef: TableDef):
    """Event columns (and a join's selected columns, which travel alike) get their names; one that collides
    with ours becomes ``event_<name>``."""
    ours = {c for c in df.columns if not c.startswith(EVENT_PREFIX)}
    for c in df.columns:
        if c.startswith(EVENT_PREFIX):
            name = c[len(EVENT_PREFIX):]
            df = df.withColumnRenamed(c, name if name not in ours else f"event_{name}")
    return df


#: what explain() takes for a name (of a subscription or an event query), not a SELECT
_BARE_NAME = re.compile(r"`[^`]+`|[\w.$-]+")


def _check_streaming(df) -> None:
    """``stream`` runs over a streaming DataFrame (``spark.readStream``...); anything else is refused here,
    not deep inside Structured Streaming."""
    if getattr(df, "isStreaming", False) is not True:
        kind = "a batch DataFrame (use publish)" if hasattr(df, "isStreaming") else f"a {type(df).__name__}"
        raise InvalidArgument(f"stream() takes a streaming DataFrame (spark.readStream...), got {kind}")


def _check_single(sub_id, planned: Planned) -> None:
    """What ``subscribe`` / ``CREATE SUBSCRIPTION`` ask of one subscription beyond its plan."""
    if not isinstance(sub_id, str) or not sub_id:
        raise InvalidSubscription(f"subscription ids are non-empty strings, got {sub_id!r}")
    if parameters_of(planned.physical):
        raise InvalidSubscription(f"subscription {sub_id!r} has parameters "
                                  f"{list(parameters_of(planned.physical))}: use subscribe_many")


def _checked_ids(ids) -> np.ndarray:
    """``subscribe_many``'s ids as an object array, every one checked -- a non-empty string (not None, not
    an int, which would be silently ``str()``ed), none twice -- naming the first bad row."""
    ids = np.asarray(ids, dtype=object)
    if ids.ndim != 1:
        raise InvalidSubscription(f"the 'id' column must be one-dimensional, got shape {ids.shape}")
    values = ids.tolist()
    bad = next((i for i, x in enumerate(values) if not isinstance(x, str) or not x), None)
    if bad is not None:
        raise InvalidSubscription(f"subscription ids are non-empty strings: row {bad} of 'id' holds "
                                  f"{values[bad]!r} ({type(values[bad]).__name__})")
    try:  # ids travel as Arrow (UTF-8) strings: SHOW, notifications
        pa.array(values, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        bad = next(i for i, x in enumerate(values) if not _utf8_encodable(x))
        raise InvalidSubscription(f"subscription ids are valid Unicode text: row {bad} of 'id' holds "
                                  f"{values[bad]!r}, which has no UTF-8 form (a lone surrogate)") from None
    if len(set(values)) != len(values):
        seen: dict = {}
        for i, x in enumerate(values):
            if x in seen:
                raise DuplicateSubscription(f"duplicate subscription id {x!r} (rows {seen[x]} and {i} of 'id')")
            seen[x] = i
    return ids


def _utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


# ---- scripts ----------------------------------------------------------------------------------------------

def _script_error(err: Exception, item, text: str) -> Exception:
    """``err``, raised running the script statement ``item``, as ``sql`` raises it: ours positioned in
    ``text``; PySpark's parse and analysis errors of a Spark statement as ours (ParseError / AnalysisError)
    at Spark's position, in ``text``; any other error as it is."""
    if isinstance(err, SparksubError):
        return in_script(err, item.source, item.offset, text)
    source = item.source.strip()
    mine = spark_error(err, source)
    lead = len(item.source) - len(item.source.lstrip())
    return err if mine is None else in_script(mine, source, item.offset + lead, text)


