"""``sql``: scripts of our statements checked as a whole before any runs, then run one by one (DESIGN §1), and the
Spark parser's errors for the plain SQL among them.  A part of the Engine facade (``engine.py``)."""
from __future__ import annotations

import numpy as np
from sqlglot import exp

from sparksub.errors import (AnalysisError, DuplicateSubscription, InvalidArgument,
                             SparksubError, UnknownSubscription, position_of)
from sparksub.grammar import statements as st
from sparksub.grammar.script import EventQueryStatement as _EventQueryStatement
from sparksub.grammar.script import in_script, parse_script
from sparksub import listing
from sparksub.runtime.spark_errors import spark_error, spark_parse
from sparksub.planner.catalog import TableDef
from sparksub.operators.registry import family_of
from sparksub.control.groups import check_single


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


class Statements:
    """The Engine's statements (a mixin of ``engine.Engine``: its methods use the engine's state)."""

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
        scratch = type(self)(catalyst=False)   # a scratch engine of the same kind
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

    def _check_statement(self, stmt, source: str, scratch, subscribed, added: set, dropped: set) -> None:
        """One statement of :meth:`_check_script`, applied to ``scratch`` and the id sets."""
        from sparksub.grammar.events import parse_event_query
        from sparksub.operators.events.nfa import NFAEngine
        if isinstance(stmt, exp.Create) and (stmt.args.get("kind") or "").upper() == "TABLE":
            scratch.create_table(TableDef.from_create(stmt))
        elif isinstance(stmt, st.CreateSubscription):
            name, planned = stmt.this.name, scratch._plan(stmt.query)
            check_single(name, planned)
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
        # Plain Spark SQL: our tables it names are visible to it as temp views of their current rows, live
        # from then on (row_files.py): a later spark.sql sees every batch applied since.
        for t in stmt.find_all(exp.Table):
            if t.name in self.catalog:
                self._live_view(t.name)
        # the text as written (Spark's error positions then point into it), else sqlglot's rendering
        return self.spark.sql(source.strip() if source is not None else stmt.sql(dialect="spark"))
