"""The Engine facade: DESIGN §1's public contract.

The engine holds the conceptual database (each declared table's rows, by key) and the subscription
groups; it parses and plans statements (``grammar``, ``planner``, ``catalyst_rules``) and runs the
group operators inside Spark (``runtime/groups.py``). Every mutation validates first and then
applies, so a bad statement or batch leaves everything as it was (DESIGN §7).
"""
from __future__ import annotations

import os
import pickle
import re
import logging
import threading
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sparksub.errors import (AnalysisError, BadUpdate, CatalystUnavailable, DuplicateSubscription, InvalidArgument,
                             InvalidSubscription, SparksubError, UnknownSubscription,
                             UnsupportedSubscription, position_of)
from sparksub.deliver_input import checked_messages
from sparksub.grammar import statements as st
from sparksub.grammar.event_ast import StreamExpr
from sparksub.grammar.script import EventQueryStatement as _EventQueryStatement
from sparksub.grammar.script import in_script, parse_script, spark_error
from sparksub.jvm.bridge import subscription_group
from sparksub import listing
from sparksub.directory import EngineDirectory
from sparksub.runtime.connect import refuse_connect_session
from sparksub.planner import ir
from sparksub.planner.catalog import INTEGRAL_TYPES, NUMERIC_TYPES, Catalog, TableDef
from sparksub.planner.logical import MAX_K
from sparksub.planner.projection import join_output_columns, table_output_columns
from sparksub.planner.classifier import (SUPPORTED_CLASSES, Planned, bind_band_join, bind_box, bind_filter_columns,
                                         bind_range, bind_select_join, parameters_of, plan_subscription)
from sparksub.operators.box.group import BOX_COLUMNS, BoxClassSnapshot, BoxSubscribers
from sparksub.operators.range_min.delivery import SubscriptionPoints, Subscribers
from sparksub.operators.filters.group import EVENT_PREFIX, Block, FilterGroup
from sparksub.operators.range_classes.groups import ITEM_SCHEMA, RANGE_MESSAGE_SCHEMA, RangeClassSnapshot
from sparksub.operators.range_min.group import (DELETE, MESSAGE_SCHEMA, UNICAST_SCHEMA, UPSERT, GroupSnapshot,
                                                with_reason)
from sparksub.operators.events import partitions as evp
from sparksub.operators.joins import group as join_groups
from sparksub.operators.range_classes import subscribers as range_subscribers
from sparksub.operators.shared import row_validation
from sparksub.runtime import events as spark_events
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import stream as spark_stream
from sparksub.operators.joins.group import JOIN_ITEM_SCHEMA, JOIN_MESSAGE_SCHEMA, JoinSubscriptions, QueryChange

__all__ = ["Engine", "spark_session"]

#: Rows of updates logged per group before the base snapshot is rebuilt from the current rows.
LOG_COMPACTION_ROWS = 200_000
#: FILTER subscriptions per shard (one Spark task each, every event to every shard), up to the
#: session's default parallelism.
FILTER_SHARD_SIZE = 250_000
#: Events logged per event-query replica before its base is rebuilt from a snapshot of its executor.
EVENT_LOG_COMPACTION = 20_000
#: why spark_session() built its session without the Catalyst extension (None: it did not)
_catalyst_build_error: str | None = None
#: Engine(catalyst='auto') says once per process that the extension is off, and why
_catalyst_warned = False


def catalyst_mode(value=None):
    """``Engine(catalyst=...)``'s value: True, False or ``'auto'``; None reads ``$SPARKSUB_CATALYST``
    (``on``/``off``/``auto``; default ``auto``)."""
    if value is None:
        value = os.environ.get("SPARKSUB_CATALYST", "auto")
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("1", "on", "true", "yes"):
            return True
        if v in ("0", "off", "false", "no"):
            return False
        if v == "auto":
            return "auto"
        raise ValueError(f"catalyst must be True, False or 'auto', not {value!r}")
    return bool(value)


#: the options of the session :func:`spark_session` creates (its ``conf`` overrides them): no UI or console
#: progress bar, two shuffle partitions and tasks (small local batches), an in-memory catalog, Arrow
#: transfers, the RocksDB state store (stream state that survives restarts)
SESSION_DEFAULTS = {
    "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
#: the log level of the session :func:`spark_session` creates (Spark's INFO/WARN lines would bury ours)
SESSION_LOG_LEVEL = "ERROR"
_log = logging.getLogger("sparksub.engine")


def spark_session(master: str = "local[*]", app_name: str = "sparksub", catalyst=None, conf: dict | None = None,
                  **options):
    """A new SparkSession for sparksub: :data:`SESSION_DEFAULTS` overridden by ``conf`` (and by ``options``,
    ``**{"spark.x": v}``), log level :data:`SESSION_LOG_LEVEL`, and, unless ``catalyst`` is False, the
    Catalyst extension (``sparksub.jvm``; built with javac on first use).  ``catalyst='auto'`` goes on
    without the extension when it cannot be built (``Engine`` says why).

    A process has one SparkContext: when one is already running, its session is returned as it is --
    nothing is set on a session sparksub did not create -- and the options not applied are logged
    (logger ``sparksub.engine``)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    global _catalyst_build_error
    conf = {**(conf or {}), **options}
    if SparkContext._active_spark_context is not None:
        running = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        refuse_connect_session(running, embedded=True)
        if conf:
            _log.warning("spark_session: a SparkSession is already running in this process; using it as it "
                         "is (not applied: %s)", ", ".join(sorted(conf)))
        return running
    mode = catalyst_mode(catalyst)
    if mode is not False:
        from sparksub import jvm
        try:
            conf = {**jvm.extension_conf(existing_jars=conf.get("spark.jars", "")), **{
                k: v for k, v in conf.items() if k != "spark.jars"}}
        except CatalystUnavailable as err:
            if mode is True:
                raise
            _catalyst_build_error = str(err)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in {**SESSION_DEFAULTS, **conf}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    refuse_connect_session(spark, embedded=True)  # SPARK_REMOTE & co. make the builder's session a Connect one
    spark.sparkContext.setLogLevel(SESSION_LOG_LEVEL)  # our own session: see SESSION_LOG_LEVEL
    return spark


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
    group_id: str
    physical: ir.Node  # the group's operator node (RangeMinGroupScan, FilterGroupScan)
    points: object  # the registry: delivery.SubscriptionPoints (ranges) or the FilterGroup itself
    templates: list = field(default_factory=list)  # template texts; template_of[slot] indexes it
    template_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    replica: spark_groups.GroupReplica | None = None
    shards: dict | None = None  # FILTER: shard group_id -> replica (subscriptions split, events to all)
    base_stale: bool = False  # subscriptions or loaded rows changed since the replica's base
    log_rows: int = 0
    subscribers: object = None  # the deliver() side (delivery / range_subscribers / box_groups), seeded lazily
    subscribers_version: int = -1
    version: int = 0  # bumps on every publish and registration change
    k_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # RANGE_TOPK: k per slot
    # BOX_*: each slot's [low, high] on the second attribute (the points index holds the first)
    x2_of: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.float64))
    # SELECT_JOIN / BAND_JOIN: how the partitions were cut when their base was built (join_groups), and the
    # subscription change waiting to be logged to them (003 §4.2.3: queries change while data flows)
    join_layout: dict | None = None
    pending_change: QueryChange | None = None
    # top-k and joins: each slot's output columns (a subscription's SELECT list, planner.projection; DESIGN §1)
    outputs: list = field(default_factory=list)  # distinct projections; output_of[slot] indexes it
    output_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))


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
    """

    def __init__(self, spark=None, catalyst=None, conf: dict | None = None, *, path=None):
        if spark is not None and conf:
            raise InvalidArgument("Engine(spark, conf=...): conf is for the session Engine() creates; a session "
                                  "you pass is used as it is (set its options when you build it)")
        if conf is not None and not isinstance(conf, dict):
            raise InvalidArgument(f"Engine(conf=...) takes a dict of Spark options, got {type(conf).__name__}")
        self._conf = dict(conf or {})
        if spark is not None:
            refuse_connect_session(spark)   # before anything is registered (issue 15 item 11)
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
        #: partitions of a join group (one Spark task each); None: the session's default parallelism
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
        self._matches: dict[str, list] = {}
        self._event_resets: dict[str, int] = {}
        self._lock = threading.RLock()
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
        if bridge.loaded(self._spark):
            bridge.attach(self._spark, self)
            self.catalyst, self.catalyst_reason = True, None
            return
        from sparksub.jvm import EXTENSION_CLASS
        reason = _catalyst_build_error or (
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
            size = len(entry.points) if entry is not None else 0
            parts.append(f"{physical.klass} group {entry.group_id if entry else '(new)'}: template {templates[0]}"
                         f"{more}, {size} subscriptions, algorithm {_ALGORITHM.get(physical.klass, '?')}, "
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
            f"{c.cls.key or '(none)'}, {c.cls.partitions} partitions, algorithm {_ALGORITHM['EVENT']}, mode {mode}"
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
            _bind_constants(planned.physical, {}, np.array([name], dtype=object), scratch._column_types(planned))
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
        jsession = getattr(self.spark, "_jsparkSession", None)
        if jsession is None:
            return  # no JVM parser to ask: Spark's verdict comes when the statement runs
        from py4j.protocol import Py4JJavaError
        try:
            jsession.sessionState().sqlParser().parsePlan(source.strip())
        except Exception as err:  # PySpark converts the JVM's exceptions (else a raw Py4JJavaError)
            if isinstance(err, Py4JJavaError):
                from pyspark.errors.exceptions.captured import convert_exception
                err = convert_exception(err.java_exception)
            mine = spark_error(err, source.strip())
            if mine is None:
                raise
            raise in_script(mine, source.strip(), len(source) - len(source.lstrip()), source) from None

    def _column_types(self, planned: Planned) -> dict[str, str] | None:
        """A FILTER subscription's table's column types (its parameters are checked against them)."""
        if isinstance(planned.physical, ir.FilterGroupScan):
            return dict(self.catalog.get(planned.physical.table).columns)
        return None

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

    def _table(self, name: str) -> TableState:
        self.catalog.get(name)  # the error names the known tables
        return self._tables[name.lower()]

    def _plan(self, query) -> Planned:
        select = st.parse_select(query) if isinstance(query, str) else query
        planned = plan_subscription(select, self.catalog)
        _output_columns(planned, self.catalog)  # a SELECT list no row can hold fails here, before anything changes
        if isinstance(planned.physical, _JOIN_NODES):
            p = planned.physical  # (a self-join never gets here: the planner wants two different tables)
            for t in (p.left, p.right):
                if self.catalog.get(t).key is None:
                    raise UnsupportedSubscription(f"{planned.klass} over the append-only stream {t!r}: join "
                                                  f"subscriptions need tables with a PRIMARY KEY (a result tuple "
                                                  f"is a pair of keys)", ("FILTER",))
            return planned
        if self.catalog.get(planned.physical.table).key is None and not isinstance(planned.physical,
                                                                                   ir.FilterGroupScan):
            raise UnsupportedSubscription(f"{planned.klass} over the append-only stream "
                                          f"{planned.physical.table!r}: only FILTER subscriptions read streams "
                                          f"(a range aggregate needs a table with a key)", ("FILTER",))
        return planned

    # ---- subscriptions -----------------------------------------------------------------------------
    def subscribe(self, sub_id: str, sql: str) -> None:
        """Register one subscription (same as ``CREATE SUBSCRIPTION sub_id AS sql``)."""
        self._subscribe_planned(sub_id, self._plan(sql))

    def _subscribe_planned(self, sub_id: str, planned: Planned) -> None:
        _check_single(sub_id, planned)
        with self._lock:
            ids = np.array([sub_id], dtype=object)
            bound = _bind_constants(planned.physical, {}, ids, self._column_types(planned))
            self._check_new_ids(ids)
            entry = self._group_for(planned.physical)
            slots = self._register(entry, planned.physical, ids, bound)
            self._note_template(entry, slots, planned.template)
            self._note_outputs(entry, slots, planned)
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
            bound = _bind_constants(planned.physical, cols, ids, self._column_types(planned))
            self._check_new_ids(ids)
            entry = self._group_for(planned.physical)
            slots = self._register(entry, planned.physical, ids, bound)
            self._note_template(entry, slots, planned.template)
            self._note_outputs(entry, slots, planned)
            self._bulk.setdefault(entry.group_id, []).append(SubscriptionRecord(planned, entry.group_id, True))
            self._changed(entry, subscriptions=True)
        return int(ids.size)

    @staticmethod
    def _register(entry: GroupEntry, physical, ids: np.ndarray, bound: dict) -> np.ndarray:
        """Add the subscriptions, their constants bound and checked (:func:`_bind_constants`), to the
        group's registry."""
        if isinstance(physical, ir.FilterGroupScan):
            return entry.points.add_block(Block(ids, bound["disjuncts"], physical.columns))
        if isinstance(physical, _JOIN_NODES):
            columns = bound["columns"]
            slots = entry.points.add(ids, columns)
            entry.pending_change = QueryChange(ids, columns)
            return slots
        box = isinstance(physical, _BOX_NODES)
        x1, x2, k = bound["x1"], bound["x2"], bound.get("k")
        if box:
            x2_lo, x2_hi = bound["x2_lo"], bound["x2_hi"]
        slots = entry.points.add(ids, x1, x2)
        if k is not None:
            entry.k_of = _grown(entry.k_of, slots, 1)
            entry.k_of[slots] = k
        if box:
            entry.x2_of = _grown(entry.x2_of, slots, np.nan)
            entry.x2_of[slots, 0], entry.x2_of[slots, 1] = x2_lo, x2_hi
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
            if not len(entry.points):
                continue
            clash = next((i for i in ids if i in entry.points), None)
            if clash is not None:
                raise DuplicateSubscription(f"duplicate subscription id {clash!r}: it already exists")

    def unsubscribe(self, sub_id: str) -> None:
        with self._lock:
            if sub_id in self._event_queries:
                raise UnknownSubscription(f"{sub_id!r} is an event query: DROP EVENT QUERY {sub_id} "
                                          f"(unregister_event_query)")
            entry = self._find_group(sub_id)
            entry.points.remove([sub_id])
            if isinstance(entry.physical, _JOIN_NODES):
                entry.pending_change = QueryChange(np.array([], dtype=object), {}, (sub_id,))
            self._records.pop(sub_id, None)
            self._changed(entry, subscriptions=True)

    @staticmethod
    def _note_template(entry: GroupEntry, slots: np.ndarray, template: str) -> None:
        if template not in entry.templates:
            entry.templates.append(template)
        if slots.size and slots.max() >= entry.template_of.size:
            grown = np.zeros(max(int(slots.max()) + 1, 2 * entry.template_of.size), dtype=np.int32)
            grown[: entry.template_of.size] = entry.template_of
            entry.template_of = grown
        entry.template_of[slots] = entry.templates.index(template)

    def _note_outputs(self, entry: GroupEntry, slots: np.ndarray, planned: Planned) -> None:
        """Record the new subscriptions' output columns (their SELECT list, DESIGN §1) for top-k and joins;
        a join group's partitions get them with the subscriptions' log entry."""
        outputs = _output_columns(planned, self.catalog)
        if outputs is None:
            return
        if outputs not in entry.outputs:
            entry.outputs.append(outputs)
        if slots.size and slots.max() >= entry.output_of.size:
            grown = np.zeros(max(int(slots.max()) + 1, 2 * entry.output_of.size), dtype=np.int32)
            grown[: entry.output_of.size] = entry.output_of
            entry.output_of = grown
        entry.output_of[slots] = entry.outputs.index(outputs)
        if isinstance(entry.physical, _JOIN_NODES) and entry.pending_change is not None:
            entry.pending_change.add_outputs = [outputs] * int(slots.size)
            entry.pending_change.output_types = self._join_output_types(entry)

    def _outputs_of(self, entry: GroupEntry, slots=None) -> list:
        """The output columns of each of ``slots`` (default: the live ones), ``((name, side, column), ...)``."""
        slots = entry.points.live_slots() if slots is None else np.asarray(slots, dtype=np.int64)
        if not entry.outputs:
            return [()] * len(slots)
        return [entry.outputs[i] for i in entry.output_of[slots].tolist()]

    def _find_group(self, sub_id: str, required: bool = True) -> GroupEntry | None:
        for entry in self._groups.values():
            if sub_id in entry.points:
                return entry
        if required:
            raise UnknownSubscription(f"no subscription {sub_id!r}")
        return None

    def _group_for(self, physical) -> GroupEntry:
        key = physical.group_key
        entry = self._groups.get(key)
        if entry is None:
            if isinstance(physical, ir.FilterGroupScan):
                gid = f"filter:{physical.table}"
                tdef = self.catalog.get(physical.table)
                registry = FilterGroup(gid, tdef.name, [(c, _arrow_type(t)) for c, t in tdef.columns])
            elif isinstance(physical, ir.SelectJoinGroupScan):
                p = physical
                gid = f"select_join:{p.left}.{p.left_on}={p.right}.{p.right_on}@{p.a or '*'},{p.c or '*'}"
                registry = JoinSubscriptions()
            elif isinstance(physical, ir.BandJoinGroupScan):
                p = physical
                gid = f"band_join:{p.right}.{p.right_on}-{p.left}.{p.left_on}"
                registry = JoinSubscriptions()
            else:
                gid = f"{physical.klass.lower()}:{physical.table}.{physical.y or '*'}@{physical.x}"
                if isinstance(physical, ir.RangeAggGroupScan):
                    gid = f"{physical.func.lower()}:{physical.table}.{physical.y or '*'}@{physical.x}"
                elif isinstance(physical, _TOPK_NODES) and physical.descending:
                    gid = f"{physical.klass.lower()}:{physical.table}.{physical.y}_desc@{physical.x}"
                if isinstance(physical, _BOX_NODES):
                    gid += f",{physical.x2}"
                registry = SubscriptionPoints()
            entry = GroupEntry(gid, physical, registry)
            self._groups[key] = entry
        return entry

    def _changed(self, entry: GroupEntry, subscriptions: bool = False) -> None:
        entry.version += 1
        change, entry.pending_change = entry.pending_change, None
        # (a group left without subscriptions is skipped by publish, so its partitions miss batches: rebuild)
        if subscriptions and change is not None and entry.shards is not None and not entry.base_stale \
                and len(entry.points) and self._fits_layout(entry, change):
            # 003 §4.2.3: the partitions' operators follow query inserts / deletes (their dynamic stabbing
            # partitions), logged like update batches; no new base
            for replica in entry.shards.values():
                replica.log.append(change)
            entry.log_rows += max(len(change.add_ids), len(change.remove_ids))
            return
        if subscriptions:
            entry.base_stale = True  # the base snapshot holds the subscriptions: rebuild it lazily

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
            counts = np.bincount(entry.template_of[entry.points.live_slots()], minlength=len(entry.templates))
            for template, n in zip(entry.templates, counts.tolist()):
                if n:
                    out.append({"group": entry.group_id, "class": entry.physical.klass,
                                "template": template, "subscriptions": n})
        for name, rec in self._event_queries.items():
            out.append({"group": f"events:{self._event_plan.class_of[name]}", "class": "EVENT",
                        "template": rec.text, "subscriptions": 1, "name": name})
        return out

    def subscription_ids(self) -> list[str]:
        return [str(i) for e in self._groups.values() for i in e.points.ids_of(e.points.live_slots())]

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
            if isinstance(query, str):
                text = query if text is None else text
                query = parse_event_query(query)
            elif not isinstance(query, StreamExpr):
                raise InvalidSubscription(f"an event query is CEL / algebra text or an event_ast expression, "
                                          f"got {type(query).__name__}")
            text = text if text is not None else _event_text(query)
            record = self._event_record(name, text, query)
            NFAEngine(**self._event_options()).register(name, record.query)   # what the executor refuses
            records = {**self._event_queries, name: record}
            plan = evp.event_partition_plan([r.info for r in records.values()], self._event_partition_count(),
                                            self._event_plan)
            classes, superseded = self._event_rebuild(plan, records)
            # commit
            self._event_queries = records
            self._commit_event_plan(plan, classes, superseded)
            self._matches[name] = []

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
            records = {q: r for q, r in self._event_queries.items() if q != name}
            plan = evp.event_partition_plan([r.info for r in records.values()], self._event_partition_count(),
                                            self._event_plan)
            classes, superseded = self._event_rebuild(plan, records)
            self._event_queries = records
            self._commit_event_plan(plan, classes, superseded)
            self._matches.pop(name, None)
            self._event_resets.pop(name, None)

    def event_queries(self) -> list[str]:
        """The registered event queries' names, in registration order."""
        return list(self._event_queries)

    def matches(self, name: str) -> list[dict]:
        """Every match of event query ``name`` so far (since its registration), in order: by ``t1``; matches
        with equal ``t1`` in the executor's (the oracle's) order within a partition, partitions in turn.
        Each is a dict of the query's output attributes (as it names them) plus ``t0`` and ``t1``, with the
        values as the output columns hold them (a computed number is a float)."""
        with self._lock:
            if name not in self._event_queries:
                raise UnknownSubscription(f"no event query {name!r}")
            return [dict(m) for m in self._matches[name]]

    def _event_options(self) -> dict:
        return {"seconds_per_tick": self.event_seconds_per_tick}

    def _event_partition_count(self) -> int:
        if self.event_partitions is None:
            return max(1, int(self.spark.sparkContext.defaultParallelism))
        return max(1, int(self.event_partitions))

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
                    executor = spark_events.materialize(old.replicas[rid])
                    for q in reversed(leave):                # readers before the producers they read
                        executor.unregister(q)
                    for q in join:
                        executor.register(q, records[q].query)
                    snapshot = executor.snapshot()
                base = evp.ReplicaBase(tuple((q, records[q].query) for q in cls.queries), snapshot, options,
                                       self.event_executor)
                raw = pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL)
                replica = spark_events.EventReplica(self.uid, rid, spark_events.new_base_id(),
                                                    self.spark.sparkContext.broadcast(raw))
                if executor is not None:
                    spark_events.remember(replica, 0, executor)
                replicas[rid] = replica
            classes[cid] = EventClassState(cls, replicas, old.tick if keep else None)
            if old is not None:
                superseded.extend(old.replicas.values())
        for cid, old in self._event_classes.items():
            if cid not in plan.classes:
                superseded.extend(old.replicas.values())
        return classes, superseded

    def _commit_event_plan(self, plan: evp.EventPlan, classes: dict, superseded: list) -> None:
        live = {id(r) for c in classes.values() for r in c.replicas.values()}
        for r in superseded:
            if id(r) not in live and hasattr(r.base, "unpersist"):
                r.base.unpersist(blocking=False)   # executors drop the superseded base
        for q in plan.reset:
            self._event_resets[q] = self._event_resets.get(q, 0) + 1
        self._event_plan = plan
        self._event_classes = classes

    def _event_layout(self, tdef: TableDef, queries) -> evp.MatchLayout:
        return evp.match_layout({q: self._event_queries[q].attributes for q in queries},
                                [(c, _arrow_type(t)) for c, t in tdef.columns])

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
        found: list = []
        if out is not None and out.num_rows:
            ops = out.column("op").to_pylist()
            gids = out.column("group_id").to_pylist()
            failed = {g for o, g in zip(ops, gids) if o == "error"}
            seqs_out = out.column("seq").to_pylist()
            # an event a query raised on: rejected for that query alone (its neighbours used it)
            raised = [(g, q) for o, g, q in zip(ops, gids, seqs_out) if o == "rejected"]
            rows = [r for r in out.to_pylist() if r["op"] == "match"]
            rows.sort(key=lambda r: (r["t1"], int(r["group_id"].rsplit("#", 1)[1])))   # stable
            for r in rows:
                m = {a: r[col] for a, col in layout.columns[r["query"]]}
                m["t0"], m["t1"] = r["t0"], r["t1"]
                found.append((r["query"], m))
        pieces = []
        if rejected:
            pieces.append(self._rejected_rows(batch, seqs, times, rejected, schema))
        if out is not None:
            pieces.append(out)

        def commit():
            for q, m in found:
                self._matches[q].append(m)
            for rid, (c, sub) in routed.items():
                if rid in failed:
                    c.failures += 1      # its batch is not logged: the next task rebuilds from base + log
                    continue
                c.replicas[rid].log.append((streams[rid], sub))   # whole: a replay drops the same errors
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
            out = df if df is not None else self.spark.createDataFrame(schema.empty_table())
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
                    if col in df.columns and col in types and _arrow_type_name(types[col]) != dict(df.dtypes)[col]:
                        df = df.withColumn(col, df[col].cast(_arrow_type_name(types[col])))
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
                if replica.logged_events() <= EVENT_LOG_COMPACTION:
                    continue
                executor = spark_events.materialize(replica)
                base = replica.base_value()
                base.snapshot = executor.snapshot()
                raw = pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL)
                new = spark_events.EventReplica(self.uid, rid, spark_events.new_base_id(),
                                                self.spark.sparkContext.broadcast(raw))
                spark_events.remember(new, 0, executor)
                if hasattr(replica.base, "unpersist"):
                    replica.base.unpersist(blocking=False)
                c.replicas[rid] = new

    def _event_executors(self, c: EventClassState) -> dict:
        """Every replica's executor as of now, in this (driver) process (cache + log replay); a replica
        that cannot be rebuilt is left out (its tasks report the failure as ``error`` rows)."""
        out = {}
        for rid, replica in c.replicas.items():
            try:
                executor = spark_events.materialize(replica)
            except Exception:  # noqa: BLE001 - stats / EXPLAIN show what can be shown
                continue
            spark_events.remember(replica, len(replica.log), executor)
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
            self._apply_rows(state, batch)
            for entry in self._groups_on(state):
                self._changed(entry, subscriptions=True)  # rebuild bases from the new rows
            return batch.num_rows

    def publish(self, table: str, updates, mode: str = "unicast"):
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
        """
        schema = _schema_for(mode)
        with self._lock:
            state = self._table(table)
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
            if mode == "reformulated" and any(isinstance(e.physical, _UNICAST_ONLY_NODES) for e in groups):
                # FILTER and BAND_JOIN have no reformulated form: their groups answer with their unicast rows,
                # beside the other groups' messages (issue 15 item 6); deliver() passes them through
                schema = _with_unicast_rows(schema)
            if any(isinstance(e.physical, ir.FilterGroupScan) for e in groups):
                schema = _with_event_columns(schema, state.definition)
            if any(isinstance(e.physical, _RANGE_CLASS_NODES) for e in groups):
                schema = _with_range_class_columns(schema, mode, any(isinstance(e.physical, _BOX_NODES)
                                                                     for e in groups))
            if any(isinstance(e.physical, _JOIN_NODES) for e in groups):
                schema = _with_join_columns(schema, mode, self._join_output_fields(groups, mode))
            self._net_join_rows = False
            group_batches = {e.group_id: self._group_batch(state, e.physical, batch, seqs) for e in groups
                             if not isinstance(e.physical, _JOIN_NODES)}
            replicas, parts, owner = {}, [], {}
            for e in groups:
                if mode == "reformulated" and not isinstance(e.physical, _UNICAST_ONLY_NODES):
                    self._sync_subscribers(e)
                if isinstance(e.physical, _JOIN_NODES):
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
                    df = _net_join_notifications(df)
                df = _rename_event_columns(df, state.definition)
            else:
                df, failed = None if times is not None else self.spark.createDataFrame(schema.empty_table()), set()
            event_commit = None
            if times is not None:
                df, event_commit = self._with_event_part(state, df, schema, all_batch, all_seqs, times)
            elif not ok.all():  # a keyed table's malformed rows, as a stream emits them (row_validation)
                rejected = row_validation.rejected_rows(schema, all_seqs[~ok], reasons[~ok])
                df = df.unionByName(_rename_event_columns(self.spark.createDataFrame(rejected), state.definition),
                                    allowMissingColumns=True)
            # Only now, with the notifications computed, does the batch become part of the state.
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
                if isinstance(e.physical, ir.FilterGroupScan):
                    continue  # stateless: nothing to log
                if isinstance(e.physical, _JOIN_NODES):
                    jb = group_batches[e.group_id]
                    for rid, replica in e.shards.items():
                        mine = jb.filter(pc.equal(jb.column("group_id"), rid))
                        if mine.num_rows:  # a task ran for this partition and moved its cache one step
                            replica.log.append(mine)
                    e.log_rows += batch.num_rows
                    e.version += 1
                    if mode == "reformulated" and e.subscribers is not None:
                        e.subscribers_version = e.version
                    continue
                e.replica.log.append(group_batches[e.group_id])
                e.log_rows += batch.num_rows
                e.version += 1
                if mode == "reformulated" and e.subscribers is not None:
                    e.subscribers_version = e.version
            if self.catalyst and df is not None:
                # The operators ran once, above, and their output was checkpointed (lineage cut): the node
                # on top keeps saying in df.explain() which groups produced these rows.
                events = self._event_classes_on(state.definition) if times is not None else []
                what = [d for d in (self._describe([(e.physical, e) for e in groups], mode),
                                    self._describe_events(events, "batch")) if d]
                df = subscription_group(df, f"publish to {state.definition.name} (ran once, checkpointed): "
                                            + ("; ".join(what) or "no groups"))
            return df

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
        Spark's state store and survives restarts from the checkpoint; the subscriptions and, for a new
        checkpoint, the initial rows are those of the engine when ``stream`` is called. The stream's
        updates do not flow back into the engine (``result``/``publish`` do not see them).

        Range groups (MIN/MAX, top-k, DISTINCT, aggregates) are one stateful operator
        (``transformWithStateInPandas``, one state partition per group); a micro-batch is one batch
        for them, so in ``'reformulated'`` mode a top-k group sends Paint-Batch's messages for the
        whole micro-batch (002 §IV-A), each carrying the micro-batch's last ``seq``.

        Join groups (SELECT_JOIN, BAND_JOIN) that read the table run as *stream-static* joins
        (``runtime/join_stream.py``): the stream updates this table, the join partner is the other
        table's rows as of the ``stream`` call; the streamed rows live in the state store, partitioned by
        key. BAND_JOIN has no reformulated form: with ``mode='reformulated'`` its unicast rows come out.

        FILTER groups on the table (unicast rows in either mode) are stateless: each micro-batch is matched on every
        shard as a ``publish`` batch is, and their notifications (with the event's columns) are
        unioned with the range groups' (same ``seq``).
        """
        _check_streaming(streaming_df)
        schema = _mode_schema(mode)  # run_stream adds the ``reason`` column
        with self._lock:
            state = self._table(table)
            groups = self._groups_on(state)
            event_classes = self._event_classes_on(state.definition) if state.definition.key is None else []
            if not groups and not event_classes:
                raise SparksubError(f"no subscriptions or event queries on table {table!r}: a stream serves "
                                    f"those registered when it starts")
            joins = [e for e in groups if isinstance(e.physical, _JOIN_NODES)]
            filters = [e for e in groups if isinstance(e.physical, ir.FilterGroupScan)]
            ranges = [e for e in groups if e not in filters and e not in joins]
            # One row check for every path, the one publish makes (row_validation): malformed rows come out
            # once, from it, with their reason; the paths see the valid rows, numbered (seq) alike.
            name = _operator_name(e.physical for e in groups) + "_stream" if groups else "event_query_nfa_stream"
            checked = spark_stream.checked_updates(streaming_df, state.definition, name)
            valid = spark_stream.valid_updates(checked)
            stream_id = spark_stream.new_stream_id(self.spark)
            outs = []
            if event_classes:
                outs.append(subscription_group(self._stream_events(state, event_classes, valid),
                                               self._describe_events(event_classes, "stream")))
            # (FILTER and BAND_JOIN have no reformulated form: in that mode they stream their unicast rows,
            # issue 15 item 6)
            streamed_joins = joins
            if streamed_joins:
                joined = self._stream_joins(state, streamed_joins, valid, mode)
                if ranges:  # a delete of an unknown key: the range groups (which hold every row) say it once
                    joined = joined.where(joined.op != "rejected")
                outs.append(subscription_group(joined,
                                               self._describe([(e.physical, e) for e in streamed_joins],
                                                              f"stream {mode}")))
            if filters:
                # a keyed table's rows live in the range or join groups' state; without them, FILTER keeps the keys
                check_keys = state.definition.key is not None and not ranges and not joins
                outs.append(subscription_group(self._stream_filters(state, filters, valid, check_keys),
                                               self._describe([(e.physical, e) for e in filters], "stream unicast")))
            if ranges:
                specs = {}
                for e in ranges:
                    if e.replica is not None and e.replica.log:
                        e.base_stale = True  # the stream seeds its state from the base: make it current
                    p = e.physical
                    specs[e.group_id] = (p.x, p.y, self._replica(state, e).base, _y_is_text(state.definition, p),
                                         getattr(p, "x2", None))
                if any(isinstance(e.physical, _RANGE_CLASS_NODES) for e in ranges):
                    wide = _with_range_class_columns(with_reason(schema), mode,
                                                     any(isinstance(e.physical, _BOX_NODES) for e in ranges))
                    schema = wide.remove(wide.get_field_index("reason"))  # run_stream appends it
                ranges_out = spark_stream.run_stream(self.spark, valid, state.definition, specs, mode, schema,
                                                     self.uid, _operator_name(e.physical for e in ranges) + "_stream",
                                                     stream_id)
                outs.append(subscription_group(ranges_out, self._describe([(e.physical, e) for e in ranges],
                                                                          f"stream {mode}")))
            if not outs:
                raise SparksubError(f"stream(): the FILTER / BAND_JOIN subscriptions on {table!r} have no "
                                    f"{mode!r} form; use mode='unicast'")
            out = outs[0]
            for more in outs[1:] + [spark_stream.rejected_updates(checked, state.definition, stream_id, name)]:
                out = out.unionByName(more, allowMissingColumns=True)
            out.sparksub_stream_id = stream_id  # for spark_stream.stream_stats(out)
            return out

    def _stream_events(self, state: TableState, classes: list, streaming_df):
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
            initial={rid: ex.snapshot() for c in classes for rid, ex in self._event_executors(c).items()})
        return ses.run_event_stream(streaming_df, spec, order=spark_stream.SEQ_COLUMN)

    def _stream_filters(self, state: TableState, entries: list, checked_df, check_keys: bool = False):
        """FILTER groups on a stream of valid rows (``spark_stream.checked_updates``): stateless, so each
        micro-batch is matched like a ``publish`` batch (events to every shard; a delete matches nothing).
        ``check_keys``: no other path keeps the keyed table's rows, so the keys are kept here
        (``spark_stream.known_key_updates``) and a delete of an unknown key comes out ``rejected``."""
        from pyspark.sql import functions as F
        tdef = state.definition
        schema = _with_event_columns(_schema_for("unicast"), tdef)
        more = []
        if check_keys:
            keys = spark_stream._Deferred(self.spark.sparkContext.broadcast(
                pickle.dumps(set(state.rows), protocol=pickle.HIGHEST_PROTOCOL)))
            checked_df = spark_stream.known_key_updates(checked_df, tdef, keys,
                                                        _operator_name(e.physical for e in entries) + "_stream")
            more = [F.col(spark_stream.REASON_COLUMN).alias("reason")]
        events = checked_df.select(*[F.col(c).alias(EVENT_PREFIX + c) for c in tdef.column_names],
                                   F.col(spark_stream.OP_COLUMN).alias("op"), F.col(spark_stream.SEQ_COLUMN).alias("seq"),
                                   *more)
        replicas = {rid: r for e in entries for rid, r in self._replicas(state, e).items()}
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
            if isinstance(entry.physical, ir.FilterGroupScan):
                return None
            if isinstance(entry.physical, _JOIN_NODES):
                # the union over the partitions (each pair lives in exactly one), ordered by the pair's keys:
                # each result tuple as a row of the selected columns (DESIGN §1)
                out = [r for g in self._join_partitions_materialized(entry).values() for r in g.result_rows(sub_id)]
                return [row for _, row in sorted(out, key=lambda t: (str(t[0][0]), str(t[0][1])))]
            state = self._tables[entry.physical.table.lower()]
            group = self._materialized(state, entry)
            got = group.result(sub_id)  # MIN/MAX/AGG: a value; TOPK: [(key, x, ..., y)]; DISTINCT: sorted values
            if isinstance(entry.physical, _TOPK_NODES):
                # the top k as rows of the selected columns, in rank order (DESIGN §1), read from the table
                outputs = self._outputs_of(entry, [entry.points.slot(sub_id)])[0]
                at = {c: state.column_index(c) for _, _, c in outputs}
                return [{name: state.rows[item[0]][at[c]] for name, _, c in outputs} for item in got]
            return got

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
                    if isinstance(entry.physical, _UNICAST_ONLY_NODES):
                        # no reformulated form: publish(..., 'reformulated') gave their unicast rows (issue 15
                        # item 6), which reach their subscribers as they are
                        outs.append(self._unicast_rows_of(entry, mine))
                        continue
                    if entry.subscribers is None:
                        raise SparksubError(f"group {entry.group_id!r} has no subscriber state: deliver "
                                            f"the messages of publish(..., mode='reformulated')")
                    if isinstance(entry.physical, _RANGE_CLASS_NODES):
                        schema = pa.schema(list(schema) + [f for f in ITEM_SCHEMA if f.name not in schema.names])
                    if isinstance(entry.physical, _JOIN_NODES):
                        schema = pa.schema(list(schema) + [f for f in JOIN_ITEM_SCHEMA if f.name not in schema.names])
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

    def _unicast_rows_of(self, entry: GroupEntry, rows: pa.Table) -> pa.Table:
        """A FILTER / BAND_JOIN group's unicast rows among reformulated output (issue 15 item 6): the unicast
        columns and the columns its rows carry (the event's; the result tuple's keys and selected columns),
        under the names publish gave them."""
        if isinstance(entry.physical, ir.FilterGroupScan):
            carried = list(self.catalog.get(entry.physical.table).column_names)
        else:
            carried = [f.name for f in JOIN_ITEM_SCHEMA] + list(self._join_output_types(entry))
        names = [c for c in UNICAST_SCHEMA.names if c in rows.column_names]
        names += [c if c in rows.column_names else f"event_{c}" for c in carried
                  if c in rows.column_names or f"event_{c}" in rows.column_names]
        return rows.select(list(dict.fromkeys(names)))

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
            if isinstance(planned.physical, _JOIN_NODES):
                group = (self._join_view(entry) if entry is not None and len(entry.points)
                         else join_groups.JoinGroupDescription(planned.klass))
                return explain_text(target, planned, entry, group, spark_plan, bool(self.catalyst))
            state = self._tables[planned.physical.table.lower()]
            group = self._materialized(state, entry) if entry is not None and len(entry.points) else None
            return explain_text(target, planned, entry, group, spark_plan, bool(self.catalyst))

    def stats(self) -> dict:
        """Per group id, the operator's counters.  Event classes (``events:<class>``): the queries, key,
        partitions, streams, the executors' counters (``NFAEngine.stats()``) summed over the partitions,
        events logged, failures and rejected events; event streams (``stream:<table>``): events
        published, the largest t1, events rejected."""
        with self._lock:
            out = {}
            for entry in self._groups.values():
                if isinstance(entry.physical, _JOIN_NODES):
                    out[entry.group_id] = self._join_view(entry).stats()
                    continue
                state = self._tables[entry.physical.table.lower()]
                out[entry.group_id] = self._materialized(state, entry).stats()
            for cid, c in self._event_classes.items():
                out[f"events:{cid}"] = {**_summed_stats(self._event_executors(c).values()),
                                        "class": "EVENT", "queries": list(c.cls.queries), "key": c.cls.key,
                                        "partitions": c.cls.partitions, "streams": list(c.cls.streams),
                                        "events_logged": sum(r.logged_events() for r in c.replicas.values()),
                                        "replica_failures": c.failures, "rejected": c.rejected,
                                        "state_resets": sum(self._event_resets.get(q, 0) for q in c.cls.queries)}
            for key, (count, last, rejected) in self._event_clocks.items():
                out[f"stream:{self.catalog.get(key).name}"] = {"events": count, "last_t1": last, "rejected": rejected}
            return out

    def _explain_event(self, name: str, format: str) -> str:
        from sparksub.planner.explain import SPARK_PLAN_TITLE
        rec = self._event_queries[name]
        if format == "dot":
            return rec.compiled.to_dot()
        cid = self._event_plan.class_of[name]
        c = self._event_classes[cid]
        cls = c.cls
        try:
            cel = rec.query.to_cel()
        except ValueError as err:
            cel = f"(none: {err})"
        streams = sorted(set(rec.raw_spellings) | set(rec.info.reads))
        lines = [f"== Event query: {name} ==", f"CEL: {cel}", f"Algebra: {rec.query.to_algebra()}", "Class: EVENT",
                 f"Reads: {', '.join(streams)}",
                 f"Publishes: {', '.join(rec.info.publishes) or '(nothing)'}",
                 f"Partition key (nfa.partition_key): {rec.info.key or '(none)'}",
                 "Output: " + ", ".join(f"{evp.output_column(a)} {_arrow_type_name(t).upper()}"
                                        for a, t in rec.attributes.items()) + ", t0 BIGINT, t1 BIGINT",
                 "", "== Automaton ==", rec.compiled.describe(), "", "== Indexes =="]
        executors = self._event_executors(c)
        lines += _event_index_lines(rec.compiled, executors, cls)
        family = next((ex.family_of(name) for ex in executors.values() if hasattr(ex, "family_of")), None)
        if family is not None:   # nfa_families: the queries of one template run as one automaton
            lines += [f"query family (nfa_families): {family['queries']} queries of one template run as one "
                      f"automaton, constants as {family['slots']} parameter columns; this query is row "
                      f"{family['row']} with {family['parameters']}",
                      f"template: {family['template']}",
                      f"family start index: {family['start_index']}",
                      "family instance index: " + "; ".join(f"n{k} {t}" for k, t in
                                                            enumerate(family['instance_index'], 1))]
        lines += ["", "== Partitioning =="]
        if cls.key is not None:
            lines.append(f"hash-partitioned by {cls.key} into {cls.partitions} partitions: event class {cls.id} "
                         f"(event_partitions.key_partition: CRC-32 of the value; NULL -> partition 0)")
        else:
            lines.append(f"one partition: event class {cls.id} (unkeyed group; every event of "
                         f"{', '.join(cls.streams)} replicated to it)")
        comp = next(comp for comp in cls.components if name in comp)
        lines.append(f"component of queries: {', '.join(comp)}")
        others = [", ".join(x) for x in cls.components if x != comp]
        if others:
            lines.append(f"other components in the class: {'; '.join(f'[{o}]' for o in others)}")
        lines.append(f"replicas: events:{cls.id}#<partition>, each an executor rebuilt from a broadcast base "
                     f"+ the batches logged since")
        for p, replica in enumerate(c.replicas.values()):
            lines.append(f"partition {p}: {len(replica.log)} batches ({replica.logged_events()} events) logged "
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
        return [e for e in self._groups.values() if name in _tables_of(e.physical) and len(e.points)]

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

    @staticmethod
    def _group_batch(state: TableState, p, batch: pa.Table, seqs) -> pa.Table:
        if isinstance(p, ir.FilterGroupScan):
            cols = {EVENT_PREFIX + c: batch.column(c) for c in state.definition.column_names}
            return pa.table({**cols, "op": batch.column("op"), "seq": pa.array(seqs, pa.int64())})
        extra = {}
        if isinstance(p, _BOX_NODES):
            extra = {"x_2": batch.column(p.x2).cast(pa.float64())}
        if isinstance(p, ir.RangeAggGroupScan) and p.y is None:
            y = pa.array(np.zeros(batch.num_rows))            # COUNT(*): any non-null y
        elif _y_is_text(state.definition, p):
            # DISTINCT of strings: beside the float ``y`` every group's batch shares (range_groups)
            y, extra = pa.nulls(batch.num_rows, pa.float64()), {"y_text": batch.column(p.y).cast(pa.string())}
        else:
            y = batch.column(p.y).cast(pa.float64())
        return pa.table({
            "key": batch.column(state.definition.key),
            "x": batch.column(p.x).cast(pa.float64()),
            "y": y,
            "op": batch.column("op"),
            "seq": pa.array(seqs, pa.int64()),
            **extra,
        })

    def _snapshot(self, state: TableState, entry: GroupEntry):
        if isinstance(entry.points, FilterGroup):
            return entry.points.snapshot()  # stateless: the subscriptions are all there is
        p = entry.physical
        names = state.definition.column_names
        ix = names.index(p.x)
        iy = names.index(p.y) if p.y is not None else ix
        keys = np.empty(len(state.rows), dtype=object)
        xs = np.empty(len(state.rows))
        ys = np.empty(len(state.rows), dtype=object if isinstance(p, ir.RangeDistinctGroupScan) else np.float64)
        for i, (k, row) in enumerate(state.rows.items()):
            keys[i] = k
            xs[i] = np.nan if row[ix] is None else row[ix]
            ys[i] = (None if isinstance(p, ir.RangeDistinctGroupScan) else np.nan) if row[iy] is None else row[iy]
        slots = entry.points.live_slots()
        if isinstance(p, _BOX_NODES):
            ix2 = names.index(p.x2)
            x2s = np.array([np.nan if row[ix2] is None else row[ix2] for row in state.rows.values()], dtype=np.float64)
            return BoxClassSnapshot(p.klass, entry.group_id, p.table, p.x, p.x2, p.y,
                                    p.descending if isinstance(p, ir.BoxTopkGroupScan) else p.maximum,
                                    entry.points.ids_of(slots), entry.points.x1[slots].copy(),
                                    entry.points.x2[slots].copy(), entry.x2_of[slots, 0].copy(),
                                    entry.x2_of[slots, 1].copy(),
                                    entry.k_of[slots].copy() if isinstance(p, ir.BoxTopkGroupScan) else None,
                                    keys, xs, x2s, ys)
        if isinstance(p, _RANGE_CLASS_NODES):
            option = {ir.RangeTopkGroupScan: getattr(p, "descending", None),
                      ir.RangeAggGroupScan: getattr(p, "func", None)}.get(type(p))
            return RangeClassSnapshot(p.klass, entry.group_id, p.table, p.x, p.y, option,
                                      entry.points.ids_of(slots), entry.points.x1[slots].copy(),
                                      entry.points.x2[slots].copy(),
                                      entry.k_of[slots].copy() if entry.k_of.size else np.ones(len(slots), np.int64),
                                      keys, xs, ys)
        return GroupSnapshot(entry.group_id, p.table, p.x, p.y, p.maximum,
                             entry.points.ids_of(slots), entry.points.x1[slots].copy(),
                             entry.points.x2[slots].copy(), keys, xs, ys)

    def _replica(self, state: TableState, entry: GroupEntry) -> spark_groups.GroupReplica:
        if entry.replica is None or entry.base_stale or entry.log_rows > LOG_COMPACTION_ROWS:
            if entry.replica is not None and hasattr(entry.replica.base, "unpersist"):
                entry.replica.base.unpersist(blocking=False)  # executors drop the superseded base
            raw = pickle.dumps(self._snapshot(state, entry), protocol=pickle.HIGHEST_PROTOCOL)
            base = self.spark.sparkContext.broadcast(raw)
            entry.replica = spark_groups.GroupReplica(self.uid, entry.group_id, spark_groups.new_base_id(), base)
            entry.log_rows = 0
            entry.base_stale = False
        return entry.replica

    def _replicas(self, state: TableState, entry: GroupEntry) -> dict:
        """What the tasks of one publish need for this group, by the batch's group_id."""
        if not isinstance(entry.points, FilterGroup):
            return {entry.group_id: self._replica(state, entry)}
        if entry.shards is None or entry.base_stale:
            for old in (entry.shards or {}).values():
                old.base.unpersist(blocking=False)
            snap = entry.points.snapshot()
            k = max(1, min(-(-len(snap) // self.filter_shard_size), self.spark.sparkContext.defaultParallelism))
            entry.shards = {}
            for i in range(k):
                part = snap.shard(i, k) if k > 1 else snap
                raw = pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
                rid = f"{entry.group_id}#{i}"
                entry.shards[rid] = spark_groups.GroupReplica(self.uid, rid, spark_groups.new_base_id(),
                                                              self.spark.sparkContext.broadcast(raw))
            entry.base_stale = False
        return entry.shards

    def _materialized(self, state: TableState, entry: GroupEntry):
        """The group as of now, in this (driver) process: from the worker-style cache + log replay."""
        if isinstance(entry.points, FilterGroup):
            return entry.points  # stateless: the registry is the whole operator
        replica = self._replica(state, entry)
        group = spark_groups.materialize(replica)
        spark_groups.remember(replica, len(replica.log), group)
        return group

    def _sync_subscribers(self, entry: GroupEntry) -> None:
        """Seed the deliver() side with every subscriber's current result, unless it is in step."""
        if entry.subscribers is not None and entry.subscribers_version == entry.version:
            return
        if isinstance(entry.physical, ir.SelectJoinGroupScan):
            # 000 §4: stateless subscribers, the predicate p ∧ pR ∧ pS over each message
            ids, cols = entry.points.rows()
            entry.subscribers = join_groups.JoinSubscribers(entry.group_id, ids, cols, self._outputs_of(entry),
                                                            tuple(side[0] for side in self._join_sides(entry)),
                                                            self._join_output_types(entry))
            entry.subscribers_version = entry.version
            return
        state = self._tables[entry.physical.table.lower()]
        group = self._materialized(state, entry)
        # keys travel as text; a top-k subscriber ranks ties by the key itself, so it needs the type
        tdef = state.definition
        key_type = int if tdef.type_of(tdef.key) in INTEGRAL_TYPES else str
        if isinstance(entry.physical, _BOX_NODES):
            entry.subscribers, entry.subscribers_version = BoxSubscribers(group, key_type), entry.version
            return
        if isinstance(entry.physical, _RANGE_CLASS_NODES):
            kw = {"key_type": key_type} if isinstance(entry.physical, ir.RangeTopkGroupScan) else {}
            entry.subscribers = range_subscribers.subscribers_from_group(group, **kw)
            entry.subscribers_version = entry.version
            return
        slots = entry.points.live_slots()
        ids = entry.points.ids_of(slots)
        subs = Subscribers()
        subs.add(ids, entry.points.x1[slots], entry.points.x2[slots],
                 values=group.core.range_values(entry.points.x1[slots], entry.points.x2[slots]))
        entry.subscribers, entry.subscribers_version = subs, entry.version

    # ---- join groups (SELECT_JOIN, BAND_JOIN: operators/joins/group.py) ---------------------------------------
    def _join_partition_count(self) -> int:
        if self.join_partitions is None:
            return max(1, int(self.spark.sparkContext.defaultParallelism))
        return max(1, int(self.join_partitions))

    def _join_sides(self, entry: GroupEntry) -> tuple:
        """(table, key, join column, selection columns, selected columns) of the left (R) and right (S)
        table (``join_groups.JoinGroupSnapshot``)."""
        p = entry.physical
        left, right = self.catalog.get(p.left), self.catalog.get(p.right)
        if isinstance(p, ir.SelectJoinGroupScan):
            sel = ((p.a,) if p.a else (), (p.c,) if p.c else ())
        else:  # every local-selection column any template of the group uses (registry columns L:<col>:lo)
            sel = tuple(tuple(sorted({n[2:-3] for n in entry.points.columns if n.startswith(pre) and n.endswith(":lo")}))
                        for pre in ("L:", "R:"))
        payload = join_groups.payload_columns(entry.outputs)
        return ((left.name, left.key, p.left_on, sel[0], payload[0]),
                (right.name, right.key, p.right_on, sel[1], payload[1]))

    def _join_column_types(self, entry: GroupEntry) -> dict:
        """(side, column) -> Arrow type of every column of the join's two tables."""
        p = entry.physical
        return {(d, c): _arrow_type(t) for d, name in enumerate((p.left, p.right))
                for c, t in self.catalog.get(name).columns}

    def _join_output_types(self, entry: GroupEntry) -> dict:
        """Output name -> Arrow type over the group's projections (``join_groups.output_types``)."""
        return join_groups.output_types(entry.outputs, self._join_column_types(entry))

    def _join_output_fields(self, entries, mode: str) -> list:
        """The selected columns' fields (under EVENT_PREFIX, as the tasks emit them) of the join groups among
        ``entries`` in ``mode``'s output: unicast rows (and a band join's rows in any mode) carry their
        subscription's output columns; a select-join's messages the ``table.column`` values any of its
        subscriptions selects (``join_groups.message_column``)."""
        types: dict = {}
        for e in entries:
            if not isinstance(e.physical, _JOIN_NODES):
                continue
            if mode == "reformulated" and isinstance(e.physical, ir.SelectJoinGroupScan):
                ct, sides = self._join_column_types(e), self._join_sides(e)
                mine = {join_groups.message_column(sides[d][0], c): ct[(d, c)]
                        for d, cols in enumerate(join_groups.payload_columns(e.outputs)) for c in cols}
            else:
                mine = self._join_output_types(e)
            for name, t in mine.items():
                types[name] = join_groups.unify_types(types.get(name), t)
        return [pa.field(EVENT_PREFIX + name, t) for name, t in types.items()]

    def _join_numeric(self, entry: GroupEntry) -> bool:
        p = entry.physical
        return (self.catalog.get(p.left).type_of(p.left_on) in NUMERIC_TYPES
                and self.catalog.get(p.right).type_of(p.right_on) in NUMERIC_TYPES)

    def _join_targets(self, entry: GroupEntry, layout: dict, side: int, row: tuple, names: tuple) -> range:
        """The partitions a row of ``side`` goes to (join_groups: hash of the join value / S.b ranges)."""
        on = entry.physical.left_on if side == join_groups.L else entry.physical.right_on
        v = row[names.index(on)]
        if layout["kind"] == "SELECT_JOIN":
            b = join_groups.canonical_join_value(v, layout["numeric"])
            p = 0 if b is None else join_groups.join_value_partition(b, layout["numeric"], layout["partitions"])
            return range(p, p + 1)
        b = None if v is None else float(v)
        if b is None or b != b:
            return range(0, 1)  # joins nothing; kept in one partition so that its delete finds it
        return join_groups.band_partitions(side, b, layout["cuts"], layout["reach"])

    def _join_replicas(self, entry: GroupEntry) -> dict:
        """One replica per partition, each with its base (its rows and every subscription) and its log."""
        if entry.shards is not None and not entry.base_stale and entry.log_rows <= LOG_COMPACTION_ROWS:
            return entry.shards
        for old in (entry.shards or {}).values():
            if hasattr(old.base, "unpersist"):
                old.base.unpersist(blocking=False)
        p = entry.physical
        sides = self._join_sides(entry)
        numeric = self._join_numeric(entry)
        ids, cols = entry.points.rows()
        n_parts = self._join_partition_count()
        left, right = self._tables[p.left.lower()], self._tables[p.right.lower()]
        layout = {"kind": p.klass, "partitions": n_parts, "numeric": numeric,
                  "selections": tuple(set(side[3]) for side in sides), "payload": tuple(set(side[4]) for side in sides)}
        if isinstance(p, ir.BandJoinGroupScan):
            ib = right.column_index(p.right_on)
            sb = np.array([np.nan if r[ib] is None else float(r[ib]) for r in right.rows.values()], dtype=np.float64)
            layout["cuts"] = join_groups.band_cuts(sb, n_parts)
            layout["reach"] = ((float(cols["lo"].min()), float(cols["hi"].max())) if len(ids) else (0.0, 0.0))
            n_parts = len(layout["cuts"]) + 1
        rows = [[{c: [] for c in join_groups.side_columns(side)} for _ in range(n_parts)] for side in sides]
        for d, state in ((join_groups.L, left), (join_groups.R, right)):
            names = state.definition.column_names
            want = [(c, names.index(c)) for c in rows[d][0]]
            for row in state.rows.values():
                for part in self._join_targets(entry, layout, d, row, names):
                    target = rows[d][part]
                    for c, i in want:
                        target[c].append(row[i])
        domains = self._join_domains(entry)
        outputs = dict(sub_outputs=self._outputs_of(entry), output_types=self._join_output_types(entry),
                       payload_types=self._join_column_types(entry))
        entry.shards = {}
        for part in range(n_parts):
            rid = f"{entry.group_id}#{part}"
            snap = join_groups.JoinGroupSnapshot(p.klass, entry.group_id, rid, sides, numeric, ids, cols,
                                                 (rows[0][part], rows[1][part]), router_mode=self.join_router_mode,
                                                 domains=domains, **outputs)
            raw = pickle.dumps(snap, protocol=pickle.HIGHEST_PROTOCOL)
            entry.shards[rid] = spark_groups.GroupReplica(self.uid, rid, spark_groups.new_base_id(),
                                                          self.spark.sparkContext.broadcast(raw))
        entry.join_layout = layout
        entry.base_stale = False
        entry.log_rows = 0
        return entry.shards

    def _join_domains(self, entry: GroupEntry) -> dict:
        """The spans of R.a, S.b and S.c in the current rows: the router's histograms cover them (003 §4.5.1)."""
        p = entry.physical
        if not isinstance(p, ir.SelectJoinGroupScan):
            return {}
        left, right = self._tables[p.left.lower()], self._tables[p.right.lower()]

        def span(*columns):
            v = np.array([r[i] for state, i in ((tbl, tbl.column_index(c)) for tbl, c in columns)
                          for r in state.rows.values() if r[i] is not None], dtype=np.float64)
            v = v[np.isfinite(v)]
            return (float(v.min()), float(v.max()) + 1.0) if v.size else (0.0, 1.0)
        return {"A": span((left, p.a)) if p.a else (0.0, 1.0), "C": span((right, p.c)) if p.c else (0.0, 1.0),
                "B": span((left, p.left_on), (right, p.right_on)) if self._join_numeric(entry) else (0.0, 1.0)}

    def _stream_joins(self, state: TableState, entries: list, streaming_df, mode: str):
        """Join groups on a stream of updates to one of their tables: stream-static joins (the partner is
        the other table's rows now), state per partition of the streamed rows (spark_join_stream)."""
        from sparksub.runtime.join_stream import JoinStreamGroup, run_join_stream
        from sparksub.runtime.stream import _Deferred
        tdef = state.definition
        parts = self._join_partition_count()
        sc = self.spark.sparkContext
        initial = _Deferred(sc.broadcast(pickle.dumps(dict(state.rows), protocol=pickle.HIGHEST_PROTOCOL)))
        specs = {}
        for e in entries:
            p = e.physical
            side = join_groups.L if tdef.name.lower() == p.left.lower() else join_groups.R
            sides = self._join_sides(e)
            partner = self._tables[(p.right if side == join_groups.L else p.left).lower()]
            names = partner.definition.column_names
            wanted = join_groups.side_columns(sides[1 - side])
            partner_rows = {c: [r[names.index(c)] for r in partner.rows.values()] for c in wanted}
            rows = [None, None]
            rows[1 - side] = partner_rows
            rows[side] = {c: [] for c in join_groups.side_columns(sides[side])}
            ids, cols = e.points.rows()
            snap = join_groups.JoinGroupSnapshot(p.klass, e.group_id, f"{e.group_id}#stream", sides,
                                                 self._join_numeric(e), ids, cols, tuple(rows),
                                                 router_mode=self.join_router_mode, domains=self._join_domains(e),
                                                 sub_outputs=self._outputs_of(e), output_types=self._join_output_types(e),
                                                 payload_types=self._join_column_types(e))
            base = sc.broadcast(pickle.dumps(snap, protocol=pickle.HIGHEST_PROTOCOL))
            specs[e.group_id] = JoinStreamGroup(e.group_id, side, parts, _Deferred(base), initial)
        schema = _with_join_columns(_schema_for(mode), mode, self._join_output_fields(entries, mode))
        if mode == "reformulated" and any(isinstance(e.physical, ir.BandJoinGroupScan) for e in entries):
            schema = _with_unicast_rows(schema)  # a band join answers with its unicast rows (issue 15 item 6)
        return _rename_event_columns(run_join_stream(self.spark, streaming_df, tdef, specs, mode, schema,
                               [_arrow_type(t) for _, t in tdef.columns], self.uid,
                               _operator_name(e.physical for e in entries) + "_stream"), tdef)

    @staticmethod
    def _fits_layout(entry: GroupEntry, change: QueryChange) -> bool:
        """Can the partitions take ``change`` as a log entry?  Not if it adds a local-selection column their
        rows lack, or (BAND_JOIN) a band wider than the reach R rows were replicated over."""
        layout = entry.join_layout
        if layout is None:
            return False
        cols = change.add_columns
        if not len(change.add_ids):
            return True
        for d, pre in enumerate(("L:", "R:")):
            wanted = {n[2:-3] for n in cols if n.startswith(pre) and n.endswith(":lo")}
            if not wanted <= layout["selections"][d]:
                return False
        # a projection selecting a column the partitions' rows lack (DESIGN §1): a new base
        if not all(set(cols) <= layout["payload"][d] for d, cols in
                   enumerate(join_groups.payload_columns(dict.fromkeys(change.add_outputs)))):
            return False
        if layout["kind"] == "BAND_JOIN":
            lo, hi = layout["reach"]
            return bool(np.min(cols["lo"]) >= lo and np.max(cols["hi"]) <= hi)
        return True

    def _join_batch(self, state: TableState, entry: GroupEntry, batch: pa.Table, seqs) -> pa.Table:
        """The batch for a join group's partitions: an upsert of a known key becomes the delete of its old row
        and the insert of the new one (one seq; they may go to different partitions), each row routed to its
        partition(s) (``group_id`` = the partition's replica id)."""
        tdef = state.definition
        names = tdef.column_names
        side = join_groups.L if tdef.name.lower() == entry.physical.left.lower() else join_groups.R
        layout = entry.join_layout
        ki = names.index(tdef.key)
        cols = list(zip(*(batch.column(c).to_pylist() for c in names))) if batch.num_rows else []
        ops = batch.column("op").to_numpy()
        out_rows, out_ops, out_seqs, out_parts = [], [], [], []

        def emit(row, op, seq):
            for part in self._join_targets(entry, layout, side, row, names):
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
                        self._join_targets(entry, layout, side, old, names) != \
                        self._join_targets(entry, layout, side, row, names):
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
            group = spark_groups.materialize(replica)
            spark_groups.remember(replica, len(replica.log), group)
            out[rid] = group
        return out

    def _join_view(self, entry: GroupEntry) -> join_groups.JoinGroupView:
        parts = self._join_partitions_materialized(entry)
        _, cols = entry.points.rows()
        return join_groups.JoinGroupView(entry.physical.klass, entry.group_id, parts, cols, entry.join_layout or {})

    def _spark_plan(self, physical) -> str:
        entry = self._groups.get(physical.group_key)
        gid = entry.group_id if entry else "(new group)"
        if isinstance(physical, _JOIN_NODES):
            tdef = self.catalog.get(physical.left)
            sample = pa.table({EVENT_PREFIX + c: pa.nulls(1, _arrow_type(t)) for c, t in tdef.columns})
            sample = (sample.append_column("op", pa.array([UPSERT], pa.int8()))
                      .append_column("seq", pa.array([0], pa.int64()))
                      .append_column("j_side", pa.array([0], pa.int8()))
                      .append_column("group_id", pa.array([f"{gid}#0"], pa.string())))
            replica = spark_groups.GroupReplica(self.uid, f"{gid}#0", "explain", b"")
            try:
                return spark_groups.plan_string(self.spark, {f"{gid}#0": replica}, sample, "unicast",
                                                _with_join_columns(_schema_for("unicast"), "unicast"),
                                                _operator_name([physical]),
                                                self._describe([(physical, entry)], "unicast", physical))
            except Exception as err:  # EXPLAIN must not fail because Spark is unavailable
                return f"(Spark plan unavailable: {err})"
        state = self._tables[physical.table.lower()]
        tdef = state.definition
        # One placeholder row: an empty local relation would let Spark optimise the exchange away.
        row = pa.table({c: pa.nulls(1, _arrow_type(t)) for c, t in tdef.columns}).append_column(
            "op", pa.array([UPSERT], pa.int8()))
        sample = self._group_batch(state, physical, row, np.zeros(1, dtype=np.int64))
        sample = sample.append_column("group_id", pa.array([gid], pa.string()))
        schema = _schema_for("unicast")
        if isinstance(physical, ir.FilterGroupScan):
            schema = _with_event_columns(schema, tdef)
        elif isinstance(physical, _RANGE_CLASS_NODES):
            schema = _with_range_class_columns(schema, "unicast")
        replica = spark_groups.GroupReplica(self.uid, gid, "explain", b"")
        try:
            return spark_groups.plan_string(self.spark, {gid: replica}, sample, "unicast", schema,
                                            _operator_name([physical]),
                                            self._describe([(physical, entry)], "unicast", physical))
        except Exception as err:  # EXPLAIN must not fail because Spark is unavailable
            return f"(Spark plan unavailable: {err})"


# ---- input conversion -----------------------------------------------------------------------------

_arrow_type = row_validation.arrow_type  # a column's Arrow type, as validation casts it


def _arrow_type_name(t: pa.DataType) -> str:
    """The Spark SQL type name of an Arrow type (as ``DataFrame.dtypes`` spells it)."""
    return {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.bool_(): "boolean",
            pa.timestamp("us"): "timestamp", pa.date32(): "date", pa.int8(): "tinyint"}.get(t, "string")


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
    kinds = sorted({_OPERATOR_KIND.get(type(p), "range_min") for p in physicals})
    return "_and_".join(kinds) + ("_group" if len(kinds) == 1 else "_groups")


def _with_event_columns(schema: pa.Schema, tdef: TableDef) -> pa.Schema:
    """A FILTER notification carries the event: the table's columns, in the task under EVENT_PREFIX."""
    for c, t in tdef.columns:
        schema = schema.append(pa.field(EVENT_PREFIX + c, _arrow_type(t)))
    return schema


def _rename_event_columns(df, tdef: TableDef):
    """Event columns (and a join's selected columns, which travel alike) get their names; one that collides
    with ours becomes ``event_<name>``."""
    ours = {c for c in df.columns if not c.startswith(EVENT_PREFIX)}
    for c in df.columns:
        if c.startswith(EVENT_PREFIX):
            name = c[len(EVENT_PREFIX):]
            df = df.withColumnRenamed(c, name if name not in ours else f"event_{name}")
    return df


def _mode_schema(mode: str) -> pa.Schema:
    schemas = {"unicast": UNICAST_SCHEMA, "reformulated": MESSAGE_SCHEMA}
    if mode not in schemas:
        raise ValueError(f"unknown mode {mode!r}; expected 'unicast' or 'reformulated'")
    return schemas[mode]


def _schema_for(mode: str) -> pa.Schema:
    """The output schema of ``publish`` and ``stream``: the mode's columns plus a nullable ``reason``."""
    return with_reason(_mode_schema(mode))


_BOX_NODES = (ir.BoxMinGroupScan, ir.BoxTopkGroupScan)
#: what each class's group operator runs: the ``SubscriptionGroup`` node says it in Spark's EXPLAIN
_ALGORITHM = {
    "RANGE_MIN": "A2B-tree + update classification, Mar/Hull/EMar (000 §2-3)",
    "RANGE_MAX": "A2B-tree + update classification, Mar/Hull/EMar (000 §2-3)",
    "RANGE_TOPK": "influence regions + Paint-Batch (002)",
    "RANGE_DISTINCT": "Mar over duplicates (000 §4)",
    "RANGE_AGG": "relaxed range deltas with exact sums (000 §4)",
    "BOX_MIN": "4-d box messages, 2x2-d stabbing index", "BOX_MAX": "4-d box messages, 2x2-d stabbing index",
    "BOX_TOPK": "4-d box messages, 2x2-d stabbing index",
    "FILTER": "two-phase matching, clusters, multi-attribute hashing (001)",
    "SELECT_JOIN": "SJ-SSI on hotspots, SJ-SelectFirst/JoinFirst routed per tuple (003 ch. 4)",
    "BAND_JOIN": "BJ-SSI over a dynamic stabbing partition (003 ch. 4)",
    "EVENT": "automata with prefix sharing, static + instance indexes, query families (004)",
}
_JOIN_NODES = (ir.SelectJoinGroupScan, ir.BandJoinGroupScan)
#: classes without a reformulated form: in that mode their unicast rows come out (issue 15 item 6)
_UNICAST_ONLY_NODES = (ir.FilterGroupScan, ir.BandJoinGroupScan)
#: what explain() takes for a name (of a subscription or an event query), not a SELECT
_BARE_NAME = re.compile(r"`[^`]+`|[\w.$-]+")
_TOPK_NODES = (ir.RangeTopkGroupScan, ir.BoxTopkGroupScan)
#: groups whose notifications carry the item columns (and, reformulated, RANGE_MESSAGE_SCHEMA's)
_RANGE_CLASS_NODES = (ir.RangeTopkGroupScan, ir.RangeDistinctGroupScan, ir.RangeAggGroupScan) + _BOX_NODES
_OPERATOR_KIND = {ir.FilterGroupScan: "filter", ir.RangeTopkGroupScan: "range_topk",
                  ir.BoxMinGroupScan: "box_min", ir.BoxTopkGroupScan: "box_topk",
                  ir.RangeDistinctGroupScan: "range_distinct", ir.RangeAggGroupScan: "range_agg",
                  ir.SelectJoinGroupScan: "select_join", ir.BandJoinGroupScan: "band_join"}


def _net_join_notifications(df):
    """Join notifications netted per (subscription, seq, result tuple): an insert and a delete of one pair
    in one update (a band-join S row moving between partitions) cancel; every other row passes through."""
    from pyspark.sql import functions as F
    is_join = F.col("left_key").isNotNull() & F.col("op").isin("insert", "delete")
    keys = [F.col(f"`{c}`") for c in df.columns if c != "op"]  # (selected columns may be named ``t.c``)
    sign = F.when(F.col("op") == "insert", F.lit(1)).otherwise(F.lit(-1))
    netted = (df.where(is_join).groupBy(*keys).agg(F.sum(sign).alias("_net")).where(F.col("_net") != 0)
              .withColumn("op", F.when(F.col("_net") > 0, F.lit("insert")).otherwise(F.lit("delete")))
              .select(*[F.col(f"`{c}`") for c in df.columns]))
    return df.where(~is_join).unionByName(netted).localCheckpoint(eager=True)


def _tables_of(physical) -> tuple[str, ...]:
    """The tables (lower case) whose updates a group reads: one, or a join's two."""
    if isinstance(physical, _JOIN_NODES):
        return (physical.left.lower(), physical.right.lower())
    return (physical.table.lower(),)


def _with_join_columns(schema: pa.Schema, mode: str, selected=()) -> pa.Schema:
    """The columns a join notification adds (``join_groups``): the result tuple's keys; reformulated, the
    message's selection values and its position; and ``selected`` (``Engine._join_output_fields``: the
    subscriptions' selected columns, the messages' ``table.column`` values), which share their names with
    the FILTER event columns (one column, one type: ``join_groups.unify_types``)."""
    extra = list(JOIN_ITEM_SCHEMA) if mode == "unicast" else [f for f in JOIN_MESSAGE_SCHEMA
                                                              if f.name not in ("group_id", "seq", "op")]
    for f in extra:
        if f.name not in schema.names:
            schema = schema.insert(len(schema) - 1, f)  # before ``reason``
    for f in selected:
        i = schema.get_field_index(f.name)
        if i < 0:
            schema = schema.insert(len(schema) - 1, f)
        elif schema.field(i).type != f.type:
            schema = schema.set(i, pa.field(f.name, join_groups.unify_types(schema.field(i).type, f.type)))
    return schema


def _with_unicast_rows(schema: pa.Schema) -> pa.Schema:
    """Reformulated output that also carries unicast rows (FILTER, BAND_JOIN: no reformulated form; issue 15
    item 6): their ``subscription_id`` first."""
    return schema if "subscription_id" in schema.names else schema.insert(0, pa.field("subscription_id", pa.string()))


def _output_columns(planned: Planned, catalog: Catalog) -> tuple | None:
    """A top-k or join subscription's output columns (``planner.projection``) as plain ``((name, side,
    column), ...)`` -- what its result rows and, for joins, its notifications carry (DESIGN §1); None for the
    other classes (a value, a set, or FILTER's own projection)."""
    p = planned.physical
    if not isinstance(p, _JOIN_NODES + _TOPK_NODES):
        return None
    select = st.parse_select(planned.sql)
    cols = (join_output_columns(select, catalog, p.left, p.right) if isinstance(p, _JOIN_NODES)
            else table_output_columns(select, catalog))
    return tuple(tuple(c) for c in cols)


def _bind_join(physical, params: dict, ids: np.ndarray) -> dict:
    """The bound constants of join subscriptions as the registry's float64 columns (``JoinSubscriptions``)."""
    if isinstance(physical, ir.SelectJoinGroupScan):
        a_lo, a_hi, c_lo, c_hi = bind_select_join(physical, params, ids.size, ids=ids)
        return {"a_lo": a_lo, "a_hi": a_hi, "c_lo": c_lo, "c_hi": c_hi}
    bound = bind_band_join(physical, params, ids.size, ids=ids)
    cols = {"lo": bound.low, "hi": bound.high}
    for pre, where in (("L:", bound.left_where), ("R:", bound.right_where)):
        for col, (lo, hi) in where.items():
            cols[f"{pre}{col}:lo"], cols[f"{pre}{col}:hi"] = lo, hi
    return cols


def _with_range_class_columns(schema: pa.Schema, mode: str, box: bool = False) -> pa.Schema:
    """The columns a top-k / DISTINCT / aggregate notification adds (``range_groups``); ``box``: and a
    box message's second-attribute bounds (``box_groups.BOX_COLUMNS``)."""
    extra = list(ITEM_SCHEMA) if mode == "unicast" else list(RANGE_MESSAGE_SCHEMA) + (list(BOX_COLUMNS) if box else [])
    for f in extra:
        if f.name not in schema.names:
            schema = schema.insert(len(schema) - 1, f)  # before ``reason``
    return schema


def _y_is_text(tdef: TableDef, physical) -> bool:
    """A DISTINCT over a non-numeric column: its values travel as strings (``y_text``), not floats."""
    if not isinstance(physical, ir.RangeDistinctGroupScan):
        return False
    t = _arrow_type(tdef.type_of(physical.y))
    return not (pa.types.is_floating(t) or pa.types.is_integer(t))


def _grown(column: np.ndarray, slots: np.ndarray, fill) -> np.ndarray:
    """A per-slot column grown (geometrically, new rows = ``fill``) to hold ``slots``."""
    if not slots.size or slots.max() < column.shape[0]:
        return column
    grown = np.full((max(int(slots.max()) + 1, 2 * column.shape[0]),) + column.shape[1:], fill, dtype=column.dtype)
    grown[: column.shape[0]] = column
    return grown


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


def _bind_constants(physical, params: dict, ids: np.ndarray, types: dict | None) -> dict:
    """Every constant of ``ids.size`` subscriptions of one plan bound as columns and checked (NaN, empty
    ranges, LIMIT k, parameter types), nothing registered: what ``Engine._register`` adds.  ``types``: the
    FILTER table's column types."""
    if isinstance(physical, ir.FilterGroupScan):
        return {"disjuncts": bind_filter_columns(physical, params, ids.size, ids=ids, types=types)}
    if isinstance(physical, _JOIN_NODES):
        return {"columns": _bind_join(physical, params, ids)}
    out = {}
    if isinstance(physical, _BOX_NODES):
        out["x1"], out["x2"], out["x2_lo"], out["x2_hi"] = bind_box(physical, params, ids.size, ids=ids)
    else:
        out["x1"], out["x2"] = bind_range(physical, params, ids.size, ids=ids)
    if isinstance(physical, _TOPK_NODES):
        out["k"] = _bind_k(physical, params, ids)
    return out


def _bind_k(physical, params: dict, ids: np.ndarray) -> np.ndarray:
    """LIMIT k per subscription: a template constant or a parameter column of positive integers up to
    ``MAX_K`` (k is an int64 column); a bad one is named with its subscription."""
    v = physical.k
    if isinstance(v, ir.Const):
        # the planner bounds a constant LIMIT by MAX_K exactly; its float may round up to 2**63
        return np.full(ids.size, min(int(v.value), MAX_K), dtype=np.int64)
    col = np.asarray(params[v.name], dtype=object)
    if col.shape != (ids.size,):
        raise InvalidSubscription(f"parameter {v.name!r} has {col.size} values, expected {ids.size}")
    values = col.tolist()
    bad = next((i for i, k in enumerate(values)
                if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, float, np.integer, np.floating))
                or k != k or k < 1 or k > MAX_K or k != int(k)), None)
    if bad is not None:
        raise InvalidSubscription(f"subscription {ids[bad]!r}: LIMIT :{v.name} must be a positive integer up "
                                  f"to {MAX_K}, got {values[bad]!r:.40}")
    return np.array(values, dtype=np.int64)


# ---- event queries: scripts, EXPLAIN -------------------------------------------------------------------

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


def _event_text(query: StreamExpr) -> str:
    try:
        return query.to_cel()
    except ValueError:
        return query.to_algebra()


_WORK = ("events", "guards_checked", "conjuncts_evaluated", "nodes_visited", "instances_visited", "edges_evaluated",
         "instances_created", "instances_alive", "instances_expired", "instances_unmatchable", "matches")


def _summed_stats(executors) -> dict:
    """The executors' counters summed (the structure counts — nodes, automata — are the same in each)."""
    out: dict = {}
    for ex in executors:
        for k, v in ex.stats().items():
            if k in ("queries", "automata", "nodes", "nodes_without_sharing", "start_groups"):
                out[k] = v
            elif k == "bytes_per_instance":
                continue
            elif isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
    return out


def _static_access(conjuncts) -> str:
    """How the static index reaches a guard (nfa._StaticIndex's rule: an ``attr = const`` conjunct, else a
    range ``attr op const``, else the guard is checked on every event)."""
    from sparksub.grammar.event_ast import Attr, Compare, Const
    from sparksub.grammar.events import parse_predicate
    flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}
    best = None
    for text in conjuncts:
        try:
            e = parse_predicate(text)
        except SparksubError:
            continue
        if not isinstance(e, Compare) or e.op not in flip:
            continue
        for a, b, op in ((e.left, e.right, e.op), (e.right, e.left, flip[e.op])):
            if isinstance(a, Attr) and isinstance(b, Const) and (op == "=" or not isinstance(b.value, bool)):
                if best is None or (op == "=" and best[1] != "="):
                    best = (a.name, op)
                break
    if best is None:
        return "checked on every event" if conjuncts else "no static conjunct: every event"
    return f"hash on {best[0]}" if best[1] == "=" else f"sorted bounds on {best[0]} {best[1]} const"


def _static_tables(executor) -> str:
    """The executor's static index, per stream: its access tables and how many guards each holds."""
    describe = getattr(executor, "static_index", None)
    if describe is None:
        return "(not exposed by this executor)"
    return "; ".join(f"{stream}: {', '.join(items) or 'empty'}" for stream, items in describe().items()) or "(empty)"


def _event_index_lines(compiled, executors: dict, cls) -> list[str]:
    """EXPLAIN's index section for one event query: per automaton node, its static guard and how the
    static index reaches it, its instance index; then the class's executors (structure and work)."""
    lines = []
    many = len(compiled.automata) > 1
    for a in compiled.automata:
        pre = f"{a.query}: " if many else ""
        nodes = {n.id: n for n in a.nodes}
        for e in a.edges:
            if e.source == "start":
                lines.append(f"{pre}start -> {e.target} on {nodes['start'].label.split(' | ')[0]}: static guard "
                             f"{' AND '.join(e.static) or 'TRUE'}; {_static_access(e.static)}")
            elif e.kind == "filter":
                n = nodes[e.source]
                pure = all(seg.startswith("FILTER{") for seg in n.label.split(" | ")[1:])
                line = f"{pre}{n.id} on {n.label.split(' | ')[0]}: static guard {' AND '.join(e.static) or 'TRUE'}; "
                if n.instance_index and pure:
                    line += (f"found through the instance index on {' AND '.join(n.instance_index)} (instances "
                             f"hashed on their binding value; an event visits its own bucket, guard checked there)")
                elif n.instance_index:
                    line += (f"{_static_access(e.static)}; instance index on {' AND '.join(n.instance_index)} "
                             f"(an event visits only the bucket of its value)")
                else:
                    line += f"{_static_access(e.static)}; no instance index (every instance of the node is visited)"
                if n.dur_bound is not None:
                    line += f"; instances expire after DUR {n.dur_bound}"
                lines.append(line)
    if executors:
        first = next(iter(executors.values()))
        st_ = _summed_stats(executors.values())
        lines.append(f"executor static index (class {cls.id}, all its queries): {_static_tables(first)}")
        lines.append(f"prefix sharing (class {cls.id}): nodes {st_.get('nodes', 0)} (without sharing "
                     f"{st_.get('nodes_without_sharing', 0)}), start groups {st_.get('start_groups', 0)}")
        lines.append("work so far (NFAEngine.stats() over the partitions): "
                     + ", ".join(f"{k.replace('_', ' ')} {st_.get(k, 0)}" for k in _WORK))
    return lines
