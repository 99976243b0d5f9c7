"""The Engine facade: DESIGN §1's public contract.

The engine holds the conceptual database (each declared table's rows, by key) and the subscription
groups; it parses and plans statements (``grammar``, ``planner``, ``catalyst_rules``) and runs the
group operators inside Spark (``runtime/groups.py``). Every mutation validates first and then
applies, so a bad statement or batch leaves everything as it was (DESIGN §7).
"""
from __future__ import annotations

import re
import logging
import threading
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import (CatalystUnavailable, InvalidArgument,
                             SparksubError, UnknownSubscription)
from sparksub.deliver_input import checked_messages, without_rejected
from sparksub.grammar import statements as st
from sparksub.directory import EngineDirectory
from sparksub.row_files import rows_table
from sparksub.row_store import RowStore
from sparksub.journal import CHECKPOINT_RECORDS, NOTIFICATION_RETENTION_ROWS, DurableSetting, EngineJournal
from sparksub.runtime.connect import CATALYST_ON_CONNECT, is_connect_session
# the embedded session (runtime/session.py: only the runtime imports pyspark), public here as before
from sparksub.runtime.session import (SESSION_DEFAULTS, SESSION_LOG_LEVEL, catalyst_build_error,  # noqa: F401
                                      catalyst_mode, spark_session)
from sparksub.planner.catalog import Catalog, TableDef
from sparksub.planner.classifier import Planned, plan_subscription
from sparksub.operators.events import partitions as evp
from sparksub.operators.joins import group as join_groups
from sparksub.operators.registry import EVENTS, family_of
from sparksub.operators.shared.schemas import (UNICAST_SCHEMA, publish_schema)
from sparksub.runtime import groups as spark_groups
from sparksub.runtime import keepalive
from sparksub.runtime import output as spark_output
from sparksub.runtime import replicas as spark_replicas

# the engine's parts (control/): one module per concern, each a mixin of Engine
from sparksub.control.event_queries import EventClassState, EventQueries, EventQueryRecord
from sparksub.control.groups import (DRIVER_OPERATOR_LIMIT, FILTER_SHARD_SIZE, GroupEntry, SubscriptionGroups,
                                     SubscriptionRecord, TableState)
from sparksub.control.inputs import to_arrow
from sparksub.control.box_shards import BoxShardGroups
from sparksub.control.join_shards import JoinShardGroups
from sparksub.control.publishing import Publishing
from sparksub.control.range_shards import RangeShardGroups
from sparksub.control.refreshing import Refreshing
from sparksub.control.statements import Statements
from sparksub.control.streaming import Streaming
from sparksub.control.zones import ZonedGroups

__all__ = ["Engine", "spark_session"]

#: Engine(catalyst='auto') says once per process that the extension is off, and why
_catalyst_warned = False
_log = logging.getLogger("sparksub.engine")


class Engine(BoxShardGroups, RangeShardGroups, JoinShardGroups, ZonedGroups, Statements, SubscriptionGroups,
             EventQueries, Publishing, Refreshing, Streaming):
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

    This module is the facade: the constructor, the catalog, results, EXPLAIN and stats.  The rest is in
    ``control/``, one module per concern, each a mixin whose methods read and change the engine's state:
    ``statements`` (``sql``), ``groups`` (``subscribe``, ``subscribe_many``, ``unsubscribe``, SHOW),
    ``event_queries`` (``register_event_query``, ``unregister_event_query``, ``matches``), ``publishing``
    (``load``, ``publish``), ``streaming`` (``stream``).  Per-class work goes through the class's family
    (``operators/registry.py``); Spark work through ``runtime/``.
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
        self._records: dict[str, str] = {}   # single subscriptions: their SELECT (Planned.sql)
        self._bulk: dict[str, list[SubscriptionRecord]] = {}  # group_id -> bulk templates
        self._next_seq = 0  # seq of the next published row (consecutive across publish calls)
        self.filter_shard_size = FILTER_SHARD_SIZE
        #: the default partition count (join groups, event classes, most FILTER shards; one Spark task each);
        #: None: the session's ``spark.default.parallelism`` (its conf, which Spark Connect can read), else 2
        self.parallelism: int | None = None
        #: X zones of a RANGE_MIN / RANGE_MAX group (DS-CN, 000 §2.3.2: one Spark task and one replica each, its
        #: subscriptions in as many x1 shards; control/zones.py).  None: one task per group unless its table holds
        #: ``control.zones.RANGE_ZONE_ROWS`` rows or more, then ``parallelism`` zones; an int >= 2 forces that
        #: many (fewer when X values repeat), 0 or 1 one task.  Output is the same either way (not journaled).
        self.range_zones: int | None = None
        #: partitions of a join group (one Spark task each); None: ``parallelism``
        self.join_partitions: int | None = None
        #: subscription shards of a SELECT_JOIN group (issue 16 item 4; control/join_shards.py): its rows in
        #: ``join_partitions`` row partitions that hold no subscription (stage 1: the messages of 000 §4), its
        #: subscriptions split by a hash of their id into this many shards, one Spark task and one replica each
        #: (stage 2, unicast).  None: whole (every partition holds every subscription) below
        #: ``control.join_shards.JOIN_SHARD_SUBSCRIPTIONS`` (200,000) subscriptions, ``parallelism`` shards from
        #: there; an int >= 2 forces that many; 0 or 1: whole.  The output is the same either way (not journaled);
        #: ``stream()`` decides the same way when it starts (runtime/join_stream.py).
        self.join_subscription_shards: int | None = None
        #: subscription shards of a range group (issue 16 item 4; control/range_shards.py): RANGE_TOPK,
        #: RANGE_DISTINCT and RANGE_AGG in a ``unicast`` publish run their rows as one replica that holds no
        #: subscription (the class's per-update messages) and their subscriptions split by a hash of their id into
        #: this many shards, one Spark task and one replica each; RANGE_MIN / RANGE_MAX in a ``unicast`` ``stream()``
        #: hold their rows in the stream's state and their subscriptions in this many x1 shards, a second stage of
        #: the query (decided when the stream starts).  None: whole below
        #: ``control.range_shards.RANGE_SHARD_SUBSCRIPTIONS`` (200,000) subscriptions, ``parallelism`` shards from
        #: there; an int >= 2 forces that many; 0 or 1: whole.  The output is the same either way (not journaled).
        self.range_subscription_shards: int | None = None
        #: keep the Python workers that cache the groups alive through pauses (``runtime/keepalive.py``: Spark
        #: ends a worker idle for 60 s, and every group would be rebuilt at the next publish): a small job runs
        #: when no operator task ran for this many seconds, for up to ``keep_workers_warm_for`` seconds after
        #: the last publish (None: as long as the session lives).  None: off.
        self.keep_workers_warm: float | None = 30.0
        self.keep_workers_warm_for: float | None = 3600.0
        #: a group with more subscriptions plus table rows than this is read where it lives -- in the worker
        #: that ran its last publish, one Spark task per read (``runtime/remote.py``) -- by ``result()``,
        #: ``stats()`` and EXPLAIN, instead of being built on the driver (deliver()'s in-process subscribers are
        #: built there: they hold every subscription's result by nature); None: never
        self.driver_operator_limit: int | None = DRIVER_OPERATOR_LIMIT
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
        #: streams an engine before this one built on the directory, whose applied rows are still to take in
        #: (``control/streaming.py`` ``_adopt_streams``): stream id -> stream_control.LiveStream
        self._adopted_streams: dict = {}
        self._following = False   # taking in a stream's rows (_follow_streams): not again from inside
        self._lock = threading.RLock()
        #: notification rows kept per table (``notifications()``, ``matches()``); older files go at checkpoints
        self.notification_retention_rows = NOTIFICATION_RETENTION_ROWS
        #: journal records between checkpoints (a reopen replays at most this many)
        self.checkpoint_interval = CHECKPOINT_RECORDS
        self._init_refreshing()   # max_delay, refresh_policy: buffered publishing (control/refreshing.py)
        # the journal, checkpoints and kept notifications; a directory that holds an engine is read back here
        self._journal = EngineJournal(self, EventClassState)
        self._journal.open()
        self._adopt_streams()
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

    def attach(self) -> None:
        """Make this engine the one ``spark.sql`` hands our statements to (the last engine made is)."""
        from sparksub.jvm import bridge
        if self.spark is not None and self.catalyst:
            bridge.attach(self._spark, self)

    def table(self, name: str):
        """The current rows of a declared table, as a Spark DataFrame read from the table's files (``row_files.py``;
        its files are fixed when it is made: a later publish shows in a new ``table()``, or in the live view
        ``engine.sql`` makes).  An event stream keeps no rows: empty."""
        with self._lock:
            state = self._table(name)
            if state.definition.key is not None:
                return self.spark.sql(self._row_files(state).current_sql())
            return self.spark.createDataFrame(rows_table(state.definition, {}))

    def create_table(self, table: TableDef) -> None:
        """A table with a PRIMARY KEY (rows replace rows), or without one: an append-only event
        stream, whose published rows are events (FILTER subscriptions match them; nothing is kept)."""
        with self._lock:
            self.catalog.add(table)
            self._tables[table.name.lower()] = TableState(table, rows=self._row_store(table))
            self._journal.create_table(table)

    def _row_store(self, table: TableDef, rows=None):
        """A keyed table's rows, their base a file under the engine's directory (``row_store.py``); None for an
        event stream (it keeps no rows)."""
        if table.key is None:
            return None
        return RowStore(table, self.directory.area("row_store", table.name.lower()), rows)

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
        more changes.  Also ``with Engine(path=...) as engine:``.  Updates still buffered (``max_delay``) are
        applied first."""
        with self._lock:
            if any(self._buffered.values()):
                self.refresh()
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

    def result(self, sub_id: str):
        """The subscription's current result: the MIN (MAX) over its range, None when empty; for top-k and
        joins a list of row dicts of the selected columns under their names (DESIGN §1), top-k in rank order,
        joins by the result tuple's keys. A FILTER subscription is stateless: it has no result (None); its
        matches are the notifications.  For an event query: ``matches(name)``."""
        with self._lock:
            if sub_id in self._event_queries:
                return self.matches(sub_id)
            entry = self._find_group(sub_id)
            self._refresh_for(entry.family.tables(entry.physical))   # buffered updates first (max_delay)
            return entry.family.result(entry.registry, entry.physical, self._operator(entry, in_place=True), sub_id,
                                       self._tables)

    def deliver(self, messages):
        """Play the network and the subscribers: reformulated messages -> the unicast rows they cause.

        Every group's subscribers start from their results when ``publish(..., mode='reformulated')``
        first ran for it (and again whenever the group changed in between: a unicast publish,
        subscriptions added or removed) and follow only the messages handed to ``deliver``, in ``seq``
        order (within a seq, range-class messages in ``msg_no`` order). Output: ``publish``'s unicast
        columns (with the item columns when a top-k / DISTINCT / aggregate / box group is among them, a join's
        selected columns). The unicast rows of FILTER and BAND_JOIN groups (no reformulated form) and the
        ``rejected`` rows (a malformed update set aside with its reason) pass through."""
        table, rejected = without_rejected(to_arrow(messages))
        schema = UNICAST_SCHEMA
        outs = [] if rejected is None else [rejected]
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
                    self._seeded(entry)   # built now if the last reformulated publish left it pending
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
                planned, entry = self._plan(self._records[target]), self._find_group(target)
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
            operator = self._operator(entry, in_place=True) if entry is not None and len(entry.registry) else None
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
                out[entry.group_id] = entry.family.stats(entry.registry, entry.physical,
                                                         self._operator(entry, in_place=True))
            for cid, c in self._event_classes.items():
                out[f"events:{cid}"] = EVENTS.stats(c, self._event_executors(c),
                                                    sum(r.logged_rows for r in c.replicas.values()), self._event_resets)
            for key, (count, last, rejected) in self._event_clocks.items():
                out[f"stream:{self.catalog.get(key).name}"] = {"events": count, "last_t1": last, "rejected": rejected}
            out.update(self.runtime_stats())
            return out

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next published row gets: every committed batch's rows have smaller ones (what a
        consumer of ``notifications(since_seq=...)`` compares against; no file is read)."""
        with self._lock:
            return self._next_seq

    def runtime_stats(self) -> dict:
        """``stats()``'s ``runtime`` and ``engine`` parts alone: read from the counter files and the journal,
        without building any group's operator on the driver (which ``stats()`` does, and which a monitor
        polling it would count as rebuilds)."""
        with self._lock:
            return {"runtime": {**spark_replicas.read_counts(self.directory.root / "groups"),
                                "streams": spark_replicas.read_counts(self.directory.root / "stream_files"),
                                "keepalive": keepalive.keepalive_stats(self._spark)},
                    "engine": {**self._journal.stats(), "next_seq": self._next_seq}}

    def _spark_plan(self, physical) -> str:
        """EXPLAIN's Spark section: the physical plan of each Spark job a publish of the group runs, as it runs now
        (split or whole: ``_spark_jobs``, answered by the control module of the group's split)."""
        entry = self._groups.get(physical.group_key)
        try:
            jobs = self._spark_jobs(physical, entry)
        except Exception as err:  # EXPLAIN must not fail because a split cannot be told
            return f"(Spark plan unavailable: {err})"
        return spark_groups.jobs_text(jobs)


#: what explain() takes for a name (of a subscription or an event query), not a SELECT
_BARE_NAME = re.compile(r"`[^`]+`|[\w.$-]+")
