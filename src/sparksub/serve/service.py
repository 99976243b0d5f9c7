"""What the server does with the engine, per authenticated client: run its statements under its own names,
publish batches and route their notifications to the clients that own the subscriptions.

Synchronous on purpose: the Engine is not async, so every method here runs in the one worker thread the
app allows into the engine at a time (``app.py``'s gate); nothing here touches a socket.

Statements: one per request, so that a refused request changes nothing (the engine checks a statement
before it runs it; a multi-statement script could fail half-way).  The server parses it with the engine's
own grammar to learn what it is and whose names it uses, then calls the engine's API with the client's
names turned into engine ids (``ownership.py``).  Plain Spark SQL is not served: it could read any table or
file the server can.

Routing (S-CN's content-based network, for real sockets): a unicast publish's rows go to the owners of
their ``subscription_id``s; a reformulated publish's messages are matched to subscribers by the engine's
subscriber index (``engine.deliver``), and the rows that causes go to their owners -- so a remote client
receives exactly what the in-process unicast output holds for its subscriptions.  Event-query matches go to
the owner of the query.  Rejected and error rows go back to the publisher in the response.

Exactly once across a crash (issue 17): the engine commits a publish before the server routes it, so a server
killed in between would lose its notifications -- a retry with the same ``batch_id`` is a duplicate for the
engine.  So the notification log keeps, in the transaction of the routed chunks, the engine's ``next_seq``
after the last publish routed (``PUBLISHED_MARK``); ``route_kept`` -- at startup (``app.py``) and before each
publish -- routes every row the engine kept (``engine.notifications``) from that seq on.  A kept output
says itself which rows are reformulated messages (neither ``subscription_id`` nor ``query``:
``_split_messages``), so the log records no mode.  Messages recovered after a restart cannot be delivered:
the subscriber side ``deliver`` matches them with lives in the engine's memory, as of before the publish,
and died with the process; they are reported (logged, counted), not routed -- see ``route_kept``.

Test hook: ``SPARKSUB_SERVE_CRASH_AT=engine-committed:<batch_id>`` in the environment makes the server kill
itself (SIGKILL) right after the engine committed the publish of that ``batch_id`` and before the log's commit
(``tests/test_serve_recovery.py``); unset, nothing happens.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlglot import exp

from sparksub.errors import SparksubError
from sparksub.grammar import statements as st
from sparksub.grammar.script import EventQueryStatement, parse_script
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import UNICAST_SCHEMA
from sparksub.serve.config import ServeConfig
from sparksub.serve.notification_log import NotificationLog
from sparksub.serve.bodies import bodies, json_value
from sparksub.serve.ownership import SEPARATOR, SUBSCRIPTION_NAME, Owners, engine_id
from sparksub.serve.tokens import Principal

__all__ = ["RequestError", "SubscriptionService", "EXPLAIN_FORMATS", "dot_to_svg", "svg_answer"]

#: the columns every notification carries, null or not (``value`` null: a range became empty)
CORE_COLUMNS = tuple(UNICAST_SCHEMA.names)
#: the rows of a publish's output that are not notifications: they go back to the publisher
PUBLISHER_OPS = ("rejected", "error")
#: an engine id the server made, ``<client>.<name>`` (``ownership.split_engine_id``), as an RE2 pattern
_ENGINE_ID = f"(?s)^(?P<client>[^{re.escape(SEPARATOR)}]+){re.escape(SEPARATOR)}(?P<name>.+)$"
#: rejected / error rows returned in one publish response at most
MAX_REPORTED_ROWS = 100
#: EXPLAIN's formats: the plan as text; an event query's automata as Graphviz DOT, or rendered to SVG
EXPLAIN_FORMATS = ("text", "dot", "svg")
#: how long Graphviz may take to lay out one EXPLAIN graph (seconds)
DOT_TIMEOUT_SECONDS = 15.0
#: the notification log's routing mark of the engine's publishes: the engine's ``next_seq`` after the last
#: publish whose notifications the log holds (``notification_log.py``, "Routing marks")
PUBLISHED_MARK = "engine:next_seq"
#: the test hook's environment variable (module doc): ``engine-committed:<batch_id>``
CRASH_AT_ENV = "SPARKSUB_SERVE_CRASH_AT"

_log = logging.getLogger("sparksub.serve")


class RequestError(Exception):
    """A refused request: HTTP ``status``, a message and ``where`` (the part of the request at fault)."""

    def __init__(self, status: int, message: str, where: str):
        super().__init__(message)
        self.status, self.where = status, where


@dataclass
class PublishResult:
    """What a publish returns to its caller and hands the fan-out."""
    summary: dict
    numbered: dict  # client -> [(client_seq, subscription, body JSON)]


class SubscriptionService:
    """The engine as the server's clients use it.  Every public method may raise RequestError or the
    engine's errors; the app turns both into a 4xx JSON answer."""

    def __init__(self, engine, log: NotificationLog, config: ServeConfig):
        self.engine = engine
        self.log = log
        self.config = config
        self.owners = Owners()
        self.owners.load(engine.subscription_ids(), engine.event_queries())
        self._lock = threading.RLock()   # one caller in the engine at a time, whoever calls
        # counters for /metrics and /stats
        self.notifications_total = 0
        self.messages_total = 0
        self.published_rows_total = 0
        self.publishes_total = 0
        self.unroutable_messages_total = 0   # reformulated messages route_kept could not deliver
        self.last_publish_seconds = 0.0
        self._recent: deque = deque()   # (time, notifications) of recent publishes
        self._stats_cache: tuple[float, dict] | None = None

    # ---- names -----------------------------------------------------------------------------------
    @staticmethod
    def checked_name(name, where: str) -> str:
        if not isinstance(name, str) or not SUBSCRIPTION_NAME.fullmatch(name):
            raise RequestError(400, f"subscription name {name!r}: use 1-128 letters, digits, '_', '.', '$' or "
                                    f"'-', starting with a letter, digit or '_'", where)
        return name

    def owned(self, who: Principal, name: str, where: str, kind: str | None = None) -> str:
        """The engine id of ``who``'s subscription (or event query) ``name``; 404 when it has none (another
        client's name is as unknown as a name nobody uses)."""
        have = self.owners.kind(who.client, name)
        if have is None or (kind is not None and have != kind):
            what = kind or "subscription or event query"
            raise RequestError(404, f"no {what} {name!r} among yours", where)
        return engine_id(who.client, name)

    def _room_for(self, who: Principal, n: int, where: str) -> None:
        have = self.owners.count(who.client)
        limit = self.config.max_subscriptions_per_client
        if have + n > limit:
            raise RequestError(403, f"limit of {limit} subscriptions per client: you hold {have}, this adds {n}",
                               where)

    # ---- statements --------------------------------------------------------------------------------
    def statement(self, who: Principal, text: str, format: str = "text") -> dict:
        """Run one statement of ours for ``who`` (see the module docstring).  ``format='svg'``: an EXPLAIN's
        DOT (the app renders it with ``svg_answer`` outside the engine's gate)."""
        _check_format(format)
        with self._lock:
            script = parse_script(text)   # a ParseError names line and column
            if len(script) != 1:
                raise RequestError(400, f"one statement per request, got {len(script)}", "sql")
            item = script[0]
            stmt = item.statement
            if isinstance(stmt, st.CreateSubscription):
                return self._create(who, self.checked_name(stmt.this.name, "subscription name"), stmt.query)
            if isinstance(stmt, st.DropSubscription):
                name = stmt.this.name
                if stmt.args.get("exists") and self.owners.kind(who.client, name) != "subscription":
                    return {"statement": "DROP SUBSCRIPTION", "name": name, "dropped": False}
                return self.drop(who, name, kind="subscription")
            if isinstance(stmt, st.ShowSubscriptions):
                return {"statement": "SHOW SUBSCRIPTIONS", "rows": self.subscriptions(who)}
            if isinstance(stmt, st.ShowSubscriptionGroups):
                return {"statement": "SHOW SUBSCRIPTION GROUPS", "rows": self.groups(who)}
            if isinstance(stmt, st.ExplainSubscription):
                target = stmt.target
                if isinstance(target, str):
                    return self.explain(who, target, format)
                if format != "text":
                    raise RequestError(400, f"format {format!r} is for event queries (their automata)", "format")
                return {"statement": "EXPLAIN SUBSCRIPTION", "explain": self.engine.explain(target.sql(dialect="spark"))}
            if isinstance(stmt, (EventQueryStatement, st.CreateEventQuery)):
                if isinstance(stmt, EventQueryStatement):
                    name, query, qtext = stmt.name, stmt.query, stmt.text
                else:
                    name, query, qtext = stmt.this.name, stmt.expression.this, None
                return self._create_event_query(who, self.checked_name(name, "event query name"), query, qtext)
            if isinstance(stmt, st.DropEventQuery):
                name = stmt.this.name
                if stmt.args.get("exists") and self.owners.kind(who.client, name) != "event query":
                    return {"statement": "DROP EVENT QUERY", "name": name, "dropped": False}
                return self.drop(who, name, kind="event query")
            if isinstance(stmt, exp.Create) and (stmt.args.get("kind") or "").upper() == "TABLE":
                if not who.allowed("admin"):
                    raise RequestError(403, "CREATE TABLE needs an admin token", "sql")
                self.engine.sql(item.source)
                return {"statement": "CREATE TABLE", "table": stmt.this.this.name}
            raise RequestError(400, f"statement {type(stmt).__name__} is not served: the server runs CREATE/DROP "
                                    f"SUBSCRIPTION, CREATE/DROP EVENT QUERY, SHOW SUBSCRIPTIONS [GROUPS], EXPLAIN "
                                    f"SUBSCRIPTION and (admin) CREATE TABLE", "sql")

    def create_subscription(self, who: Principal, name, sql) -> dict:
        """``CREATE SUBSCRIPTION name AS sql`` for ``who``."""
        if not isinstance(sql, str) or not sql.strip():
            raise RequestError(400, "'sql' must be the subscription's SELECT text", "body field 'sql'")
        with self._lock:
            return self._create(who, self.checked_name(name, "body field 'id'"), sql)

    def _create(self, who: Principal, name: str, query) -> dict:
        self._room_for(who, 1, "subscription")
        if self.owners.kind(who.client, name) is not None:
            raise RequestError(409, f"you already have a subscription or event query {name!r}", "subscription name")
        after = self.log.last_seq(who.client)
        self.engine.subscribe(engine_id(who.client, name), query)
        self.owners.add(who.client, [name], "subscription")
        # a stream opened with after=<this> receives every notification of the new subscription
        return {"statement": "CREATE SUBSCRIPTION", "name": name, "after": after}

    def _create_event_query(self, who: Principal, name: str, query, text) -> dict:
        self._room_for(who, 1, "event query")
        if self.owners.kind(who.client, name) is not None:
            raise RequestError(409, f"you already have a subscription or event query {name!r}", "event query name")
        after = self.log.last_seq(who.client)
        self.engine.register_event_query(engine_id(who.client, name), query, text=text)
        self.owners.add(who.client, [name], "event query")
        return {"statement": "CREATE EVENT QUERY", "name": name, "after": after}

    def subscribe_many(self, who: Principal, template, params) -> dict:
        """Bulk registration: one subscription per row of ``params`` (an ``id`` column of the client's names
        and one column per template parameter) -- ``engine.subscribe_many``."""
        if not isinstance(template, str) or not template.strip():
            raise RequestError(400, "the template's SELECT text is required", "query parameter 'template'")
        table = params if isinstance(params, pa.Table) else _rows_table(params)
        if "id" not in table.column_names:
            raise RequestError(400, f"the parameter table needs an 'id' column (got {table.column_names})", "body")
        ids = table.column("id")
        if not pa.types.is_string(ids.type) and not pa.types.is_large_string(ids.type):
            raise RequestError(400, f"the 'id' column holds names (strings), got {ids.type}", "body column 'id'")
        names = ids.to_pylist()
        for n, name in enumerate(names):
            if not isinstance(name, str) or not SUBSCRIPTION_NAME.fullmatch(name):
                self.checked_name(name, f"body row {n}, column 'id'")
        with self._lock:
            self._room_for(who, len(names), "body")
            mine = self.owners.names(who.client)
            clash = next((x for x in names if x in mine), None)
            if clash is not None:
                raise RequestError(409, f"you already have a subscription or event query {clash!r}", "body column 'id'")
            after = self.log.last_seq(who.client)
            cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names if c != "id"}
            cols["id"] = np.array([engine_id(who.client, x) for x in names], dtype=object)
            count = self.engine.subscribe_many(template, cols)
            self.owners.add(who.client, names, "subscription")
            return {"statement": "SUBSCRIBE MANY", "subscriptions": int(count), "after": after}

    def drop(self, who: Principal, name: str, kind: str | None = None) -> dict:
        with self._lock:
            have = self.owners.kind(who.client, name)
            eid = self.owned(who, name, "subscription name", kind)
            if have == "event query":
                self.engine.unregister_event_query(eid)
                statement = "DROP EVENT QUERY"
            else:
                self.engine.unsubscribe(eid)
                statement = "DROP SUBSCRIPTION"
            self.owners.remove(who.client, name)
            return {"statement": statement, "name": name, "dropped": True}

    def explain(self, who: Principal, name: str, format: str = "text") -> dict:
        """EXPLAIN of ``who``'s ``name``; ``format='svg'`` answers the DOT with format ``'svg'``: the caller
        renders it (``svg_answer``), away from the engine."""
        _check_format(format)
        with self._lock:
            eid = self.owned(who, name, "subscription name")
            if format != "text" and self.owners.kind(who.client, name) != "event query":
                raise RequestError(400, f"format {format!r} is for event queries (their automata)", "format")
            text = self.engine.explain(eid, format="text" if format == "text" else "dot")
            # the client knows its subscription by its own name
            return {"statement": "EXPLAIN SUBSCRIPTION", "name": name, "format": format,
                    "explain": text.replace(eid, name)}

    # ---- listings ------------------------------------------------------------------------------------
    def subscriptions(self, who: Principal) -> list[dict]:
        """SHOW SUBSCRIPTIONS, the client's rows only, under its names."""
        with self._lock:
            table = self.engine.subscription_table()
        prefix = engine_id(who.client, "")
        mine = table.filter(pc.starts_with(table.column("name"), prefix))
        rows = mine.to_pylist()
        for r in rows:
            r["name"] = r["name"][len(prefix):]
        return [{k: json_value(v) for k, v in r.items()} for r in rows]

    def groups(self, who: Principal) -> list[dict]:
        """SHOW SUBSCRIPTION GROUPS: for an admin every group; for a client its own subscriptions counted per
        group, class and template."""
        if who.allowed("admin"):
            with self._lock:
                return [{k: json_value(v) for k, v in g.items()} for g in self.engine.subscription_groups()]
        counts = Counter((r["group"], r["class"], r["template"]) for r in self.subscriptions(who))
        return [{"group": g, "class": c, "template": t, "subscriptions": n} for (g, c, t), n in sorted(counts.items())]

    def tables(self) -> list[dict]:
        with self._lock:
            return [{"name": t.name, "key": t.key, "columns": [{"name": c, "type": ty} for c, ty in t.columns]}
                    for t in self.engine.catalog]

    def column_types(self, table: str) -> dict:
        """The table's columns' Arrow types (for reading a CSV batch); 404 for an unknown table."""
        with self._lock:
            if table not in self.engine.catalog:
                known = ", ".join(sorted(t.name for t in self.engine.catalog)) or "none"
                raise RequestError(404, f"no table {table!r} (tables: {known})", "path table")
            tdef = self.engine.catalog.get(table)
        types = {c: arrow_type(t) for c, t in tdef.columns}
        types["_op"] = pa.string()
        if tdef.key is None:
            types.update(t0=pa.int64(), t1=pa.int64())
        return types

    # ---- publishing -----------------------------------------------------------------------------------
    def publish(self, who: Principal, table: str, rows, mode: str = "unicast", batch_id=None,
                variant=None) -> PublishResult:
        """Publish ``rows`` to ``table`` and number the notifications per owning client (committed to the
        notification log before this returns).  ``batch_id``: a batch the engine already committed is not
        applied again and routes nothing (its notifications were routed the first time).  ``variant``: the
        reformulated variant(s), as ``engine.publish`` takes them (e.g. ``'Paint-Sparse'``: per-update top-k
        messages, whose delivered rows are the unicast rows one for one)."""
        if not who.allowed("publisher"):
            raise RequestError(403, "publishing needs a publisher or admin token", "header Authorization")
        if mode not in ("unicast", "reformulated"):
            raise RequestError(400, f"unknown mode {mode!r}; expected 'unicast' or 'reformulated'",
                               "query parameter 'mode'")
        started = time.perf_counter()
        with self._lock:
            self.column_types(table)   # 404 for an unknown table
            recovered = self._route_kept()   # routed first: their engine seqs come before this publish's
            if batch_id is not None and self.engine.committed(batch_id):
                return PublishResult({"table": table, "mode": mode, "batch_id": batch_id, "duplicate": True,
                                      "notifications": 0}, recovered)
            n_rows = rows.num_rows if isinstance(rows, pa.Table) else len(rows)
            output = self.engine.publish(table, rows, mode=mode, batch_id=batch_id, variant=variant).toArrow()
            _crash_point("engine-committed", batch_id)
            numbered, messages, unowned, reported = self._routed(output, mode,
                                                                 {PUBLISHED_MARK: self._engine_next_seq()})
            routed = sum(len(v) for v in numbered.values())
            elapsed = time.perf_counter() - started
            self._count(routed, messages, n_rows, elapsed)
            summary = {"table": table, "mode": mode, "batch_id": batch_id, "duplicate": False, "rows": n_rows,
                       "notifications": routed, "clients": len(numbered), "unowned": unowned,
                       "rejected": reported[:MAX_REPORTED_ROWS], "rejected_count": len(reported),
                       "seconds": round(elapsed, 4)}
            if mode == "reformulated":
                summary["messages"] = messages
            return PublishResult(summary, _joined(recovered, numbered))

    def route_kept(self) -> int:
        """Route what the engine kept and the log has not (the module doc; at startup, before anything
        listens: the notes wait in the log for their clients).  The notifications routed."""
        with self._lock:
            return sum(len(v) for v in self._route_kept().values())

    def _route_kept(self) -> dict:
        """Route the rows of the engine's committed publishes from the log's ``PUBLISHED_MARK`` on (a server
        killed between the engine's commit and the log's, a routing that failed after the engine's commit, a
        publish made beside the server through the engine's own API) and advance the mark, in one log commit;
        returns them numbered, ``client -> [(client_seq, name, body)]``, for the fan-out.  A new log (or one
        from before the marks) starts at the engine's ``next_seq``: what was published before it was no
        remote client's.  Several publishes are routed as one, in seq order."""
        engine_next = self._engine_next_seq()
        mark = self.log.mark(PUBLISHED_MARK)
        if mark is None:
            self.log.append({}, {PUBLISHED_MARK: engine_next})
            return {}
        if engine_next <= mark:
            return {}
        kept = self.engine.notifications(since_seq=mark).toArrow()
        # rows without a seq are error rows, of any kept publish: the publisher they were for is gone
        kept = kept.filter(pc.fill_null(pc.greater_equal(kept.column("seq"), mark), False))
        kept = kept.take(pc.sort_indices(kept, [("seq", "ascending")]))   # stable: a seq's messages in order
        numbered, _, unowned, reported = self._routed(kept, "reformulated", {PUBLISHED_MARK: engine_next},
                                                      recovering=True)
        routed = sum(len(v) for v in numbered.values())
        self.notifications_total += routed
        _log.warning("routed %d notification(s) of engine seqs %d..%d that the engine committed but the "
                     "notification log had not routed (a server killed between the two commits?); %d row(s) "
                     "owned by no remote client, %d rejected/error row(s) not reported", routed, mark,
                     engine_next - 1, unowned, len(reported))
        return numbered

    def _engine_next_seq(self) -> int:
        """The engine's next seq (``Engine.next_seq``: no operator built, no file read -- twice per publish)."""
        return int(self.engine.next_seq)

    def stream_batch(self, table: str, output: pa.Table, batch_id: int, mark: str | None = None) -> PublishResult:
        """One micro-batch's output of a stream the server runs (``engine_streams.py``: ``engine.stream`` in
        unicast mode) routed as a publish's is -- numbered per owning client, committed to the notification
        log before this returns, with ``batch_id`` as the routing mark ``mark`` (the stream's) in the same
        transaction.  Its rejected rows have no publisher to go back to: the summary counts them and keeps
        the first few (the stream's status shows them).  No engine call: Spark's micro-batch waits for this."""
        started = time.perf_counter()
        with self._lock:
            numbered, _, unowned, reported = self._routed(output, "unicast",
                                                          None if mark is None else {mark: batch_id})
            routed = sum(len(v) for v in numbered.values())
            self.notifications_total += routed
            self._recent.append((time.time(), routed))
            return PublishResult({"table": table, "batch_id": batch_id, "rows": output.num_rows,
                                  "notifications": routed, "clients": len(numbered), "unowned": unowned,
                                  "rejected": reported[:MAX_REPORTED_ROWS], "rejected_count": len(reported),
                                  "seconds": round(time.perf_counter() - started, 4)}, numbered)

    def _routed(self, output: pa.Table, mode: str, marks: dict | None = None, recovering: bool = False) \
            -> tuple[dict, int, int, list]:
        """An engine output routed and committed, with the routing ``marks`` in the same log commit:
        (``client -> [(client_seq, name, body)]``, reformulated messages matched, rows no remote client owns,
        the rejected and error rows).  In reformulated mode the messages go through the engine's subscriber
        index (``deliver``) first.  ``recovering``: messages the engine cannot deliver are reported, not
        raised (``route_kept``)."""
        messages = 0
        if mode == "reformulated" and output.num_rows:
            direct, message_rows = _split_messages(output)
            messages = message_rows.num_rows
            delivered = self._delivered(message_rows, recovering) if message_rows.num_rows else None
            routable = [t for t in (direct, delivered) if t is not None and t.num_rows]
            if recovering and len(routable) > 1:
                # several publishes at once: one table, numbered in seq order (_route), not a later publish's
                # direct rows before an earlier one's delivered rows
                routable = [pa.concat_tables(routable, promote_options="permissive")]
        else:
            routable = [output]
        by_client, unowned, reported = {}, 0, []
        for part in routable:
            unowned += self._route(part, by_client, reported)
        return self.log.append(by_client, marks), messages, unowned, reported

    def _delivered(self, message_rows: pa.Table, recovering: bool) -> pa.Table | None:
        """``engine.deliver`` of reformulated messages.  Recovering after a restart it refuses: the subscriber
        side it matches with is built in memory by the reformulated publish, as of before it, and died with
        the killed server -- the engine, reopened, holds the groups as of after the publish, so no seed gives
        these messages' notifications back.  Those are then lost to their subscribers: said loudly (an ERROR
        naming the seqs and groups, ``unroutable_messages_total``) rather than raised, which would stop every
        later publish."""
        try:
            return self.engine.deliver(message_rows).toArrow()
        except SparksubError as err:
            if not recovering:
                raise
            seqs = pc.min_max(message_rows.column("seq")).as_py()
            groups = sorted(set(message_rows.column("group_id").drop_null().to_pylist()))
            self.unroutable_messages_total += message_rows.num_rows
            _log.error("%d reformulated message(s) of engine seqs %s..%s (groups %s), committed by the engine but "
                       "not routed before the server stopped, cannot be delivered to their subscribers: %s",
                       message_rows.num_rows, seqs["min"], seqs["max"], ", ".join(groups), err)
            return None

    def _route(self, table: pa.Table, by_client: dict, reported: list) -> int:
        """Add ``table``'s notification rows to ``by_client`` (``client -> [(name, body JSON)]``), its rejected
        and error rows to ``reported``; returns how many rows no remote client owns.

        Column-wise (``bodies.py``): sorted by ``seq`` (stable: the output's order within a seq), split into
        owner and name with Arrow, bodies built per column, then grouped by client with one stable argsort --
        no Python work per row but handing each client its slice."""
        if table.num_rows == 0:
            return 0
        cols = table.column_names
        if "seq" in cols:
            table = table.take(pc.sort_indices(table, [("seq", "ascending")]))   # nulls last
        n = table.num_rows
        nulls = pa.nulls(n, pa.string())
        sid = table.column("subscription_id") if "subscription_id" in cols else nulls
        if "op" in cols:
            publisher_row = pc.fill_null(pc.and_(pc.is_in(table.column("op"), pa.array(PUBLISHER_OPS)),
                                                 pc.is_null(sid)), False)
            if pc.any(publisher_row).as_py():
                for row in table.filter(publisher_row).to_pylist():
                    reported.append({k: json_value(v) for k, v in row.items() if v is not None})
                table = table.filter(pc.invert(publisher_row))
                sid = table.column("subscription_id") if "subscription_id" in cols else nulls.slice(0, table.num_rows)
        owner = pc.coalesce(sid, table.column("query")) if "query" in cols else sid
        if not (pa.types.is_string(owner.type) or pa.types.is_large_string(owner.type)):
            owner = pa.nulls(table.num_rows, pa.string())
        # split_engine_id, vectorised: client and name around the first separator, both non-empty (client
        # names hold no separator); null where the id is not one the server made
        parts = pc.extract_regex(owner, _ENGINE_ID)
        client, name = pc.struct_field(parts, "client"), pc.struct_field(parts, "name")
        owned = pc.is_valid(parts)
        kept = pc.sum(owned).as_py() or 0
        unowned = table.num_rows - kept
        if not kept:
            return unowned
        if kept < table.num_rows:
            table, client, name = table.filter(owned), client.filter(owned), name.filter(owned)
        body = bodies(table, _array(name), CORE_COLUMNS)
        codes = pc.dictionary_encode(client)
        codes = codes.combine_chunks() if isinstance(codes, pa.ChunkedArray) else codes
        order = np.argsort(codes.indices.to_numpy(zero_copy_only=False), kind="stable")
        counts = np.bincount(codes.indices.to_numpy(zero_copy_only=False), minlength=len(codes.dictionary))
        names = _array(name).take(order).to_pylist()
        texts = body.take(order).to_pylist()
        start = 0
        for c, count in zip(codes.dictionary.to_pylist(), counts.tolist()):
            if count:
                by_client.setdefault(c, []).extend(zip(names[start:start + count], texts[start:start + count]))
                start += count
        return unowned

    # ---- numbers for /metrics, /stats --------------------------------------------------------------------
    def _count(self, routed: int, messages: int, rows: int, elapsed: float) -> None:
        now = time.time()
        self.notifications_total += routed
        self.messages_total += messages
        self.published_rows_total += rows
        self.publishes_total += 1
        self.last_publish_seconds = elapsed
        self._recent.append((now, routed))

    def notification_rate(self) -> float:
        """Notifications routed per second over the last ``rate_window_seconds``."""
        now = time.time()
        window = self.config.rate_window_seconds
        while self._recent and self._recent[0][0] < now - window:
            self._recent.popleft()
        return sum(n for _, n in self._recent) / window

    def subscriptions_per_class(self) -> dict[str, int]:
        with self._lock:
            groups = self.engine.subscription_groups()
        out: Counter = Counter()
        for g in groups:
            out[g["class"]] += int(g["subscriptions"])
        return dict(out)

    def runtime_stats(self) -> dict:
        """``engine.runtime_stats()`` (the runtime's counter files and the journal: no operator is built), read
        at most every ``stats_interval_seconds``."""
        now = time.time()
        if self._stats_cache is None or now - self._stats_cache[0] >= self.config.stats_interval_seconds:
            with self._lock:
                try:
                    stats = self.engine.runtime_stats()
                except SparksubError:
                    stats = {}
            self._stats_cache = (now, {"runtime": stats.get("runtime", {}), "engine": stats.get("engine", {})})
        return self._stats_cache[1]


def _joined(first: dict, then: dict) -> dict:
    """Two routings' numbered notes per client, ``first``'s (the smaller numbers) before ``then``'s."""
    out = {client: list(notes) for client, notes in first.items()}
    for client, notes in then.items():
        out.setdefault(client, []).extend(notes)
    return out


def _crash_point(point: str, batch_id) -> None:
    """The test hook (module doc): die now, as a killed server does -- SIGKILL, no cleanup, no flush -- when
    ``SPARKSUB_SERVE_CRASH_AT`` is ``<point>:<batch_id>``."""
    wanted = os.environ.get(CRASH_AT_ENV)
    if wanted and batch_id is not None and wanted == f"{point}:{batch_id}":
        os.kill(os.getpid(), signal.SIGKILL)


def _check_format(format) -> None:
    if format not in EXPLAIN_FORMATS:
        raise RequestError(400, f"unknown EXPLAIN format {format!r}; expected one of {', '.join(EXPLAIN_FORMATS)}",
                           "format")


def dot_to_svg(dot: str, timeout: float = DOT_TIMEOUT_SECONDS, program: str | None = None) -> str:
    """Graphviz DOT text laid out as an SVG document by Graphviz's own ``dot`` program (Debian's ``graphviz``):
    run without a shell, the DOT on its standard input, killed after ``timeout`` seconds.  501 when the server
    has no ``dot``; 500 when it fails or takes too long (with what it said)."""
    exe = program or shutil.which("dot")
    if exe is None:
        raise RequestError(501, "format 'svg' needs Graphviz's 'dot' program on the server, which has none "
                                "(Debian: apt-get install graphviz); format 'dot' answers the graph to lay out "
                                "elsewhere", "format")
    try:
        done = subprocess.run([exe, "-Tsvg"], input=dot.encode("utf-8"), capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        raise RequestError(500, f"Graphviz's dot took more than {timeout:g} s to lay out the graph; format 'dot' "
                                f"answers the graph itself", "format") from None
    except OSError as err:
        raise RequestError(501, f"cannot run Graphviz's dot ({exe}): {err}", "format") from None
    if done.returncode != 0 or not done.stdout:
        said = done.stderr.decode("utf-8", errors="replace").strip()[:500]
        raise RequestError(500, f"Graphviz's dot failed (exit {done.returncode}): {said}", "format")
    return done.stdout.decode("utf-8")


def svg_answer(answer: dict, timeout: float = DOT_TIMEOUT_SECONDS) -> dict:
    """An EXPLAIN answer in format ``'svg'`` (its ``explain`` the DOT) with the DOT rendered to SVG."""
    return {**answer, "format": "svg", "explain": dot_to_svg(answer["explain"], timeout)}


def _rows_table(rows) -> pa.Table:
    if not rows:
        raise RequestError(400, "the parameter table has no rows", "body")
    names = list(dict.fromkeys(k for r in rows for k in r))
    try:
        return pa.table({k: pa.array([r.get(k) for r in rows]) for k in names})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise RequestError(400, f"a column's values are not of one type: {err}", "body") from None


def _array(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _split_messages(output: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A reformulated output as (rows that go as they are: unicast rows of the classes without a reformulated
    form, event-query matches, rejected and error rows; the messages ``deliver`` matches to subscribers)."""
    direct = pc.is_valid(output.column("subscription_id")) if "subscription_id" in output.column_names \
        else pa.array([False] * output.num_rows)
    if "query" in output.column_names:
        direct = pc.or_(direct, pc.is_valid(output.column("query")))
    direct = pc.or_(direct, pc.is_in(output.column("op"), pa.array(PUBLISHER_OPS)))
    direct = pc.fill_null(direct, False)
    return output.filter(direct), output.filter(pc.invert(direct))
