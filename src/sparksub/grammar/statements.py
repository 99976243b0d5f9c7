"""The SQL front end: Spark SQL (through sqlglot's Spark dialect) plus sparksub's statements.

Our statements are added to sqlglot's Spark parser as a dialect subclass, so the SELECTs inside them
are parsed by sqlglot itself and no SQL is parsed by hand:

    CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE)     -- sqlglot's own CREATE TABLE
    CREATE SUBSCRIPTION name AS <select> [WITH (option = value, ...)]   -- options: stream joins (003 ch. 3)
    DROP SUBSCRIPTION [IF EXISTS] name
    SHOW SUBSCRIPTIONS                     -- one row per subscription (and event query)
    SHOW SUBSCRIPTION GROUPS               -- one row per group and template
    EXPLAIN SUBSCRIPTION name | <select>
    CREATE EVENT QUERY name AS <text>      -- CEL or the algebra (grammar/events.py), up to the statement's end
    DROP EVENT QUERY [IF EXISTS] name

>>> stmt = parse_statement("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60")
>>> type(stmt).__name__, stmt.name, stmt.query.sql(dialect="spark")
('CreateSubscription', 'alice', 'SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60')
>>> parse_statement("SHOW SUBSCRIPTIONS")
ShowSubscriptions()
"""
from __future__ import annotations

import math

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.tokens import TokenType

from sparksub.errors import InvalidArgument, ParseError, position_of

__all__ = [
    "CreateSubscription", "DropSubscription", "ShowSubscriptions", "ShowSubscriptionGroups", "ExplainSubscription",
    "CreateEventQuery", "DropEventQuery", "SparksubSpark", "parse_statement", "parse_statements",
    "parse_select", "OPTIONS", "options_of", "options_text",
]


class CreateSubscription(exp.Expression):
    arg_types = {"this": True, "expression": True}

    @property
    def query(self) -> exp.Expression:
        return self.args["expression"]

    @property
    def options(self) -> dict:
        """The ``WITH (name = value, ...)`` options (names lower case; {} without a WITH clause)."""
        return options_of(self.query)


#: where a parsed SELECT keeps its trailing ``WITH (...)`` options (issue 19 item 2: a stream join's state bound
#: and policy): ``query.meta[OPTIONS]`` = {name (lower case): value (int, float, str or bool)}
OPTIONS = "sparksub_options"


def options_of(query: exp.Expression) -> dict:
    """The ``WITH (...)`` options a SELECT was written with ({} for none)."""
    meta = query._meta if isinstance(query, exp.Expression) else None
    return dict((meta or {}).get(OPTIONS) or {})


def options_text(options: dict) -> str:
    """``options`` as the clause that parses back to them: `` WITH (a = 1, b = 'x')`` ('' for none)."""
    if not options:
        return ""

    def value(v) -> str:
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, (int, float)):
            return repr(v)
        return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"
    return " WITH (" + ", ".join(f"{k} = {value(v)}" for k, v in options.items()) + ")"


class DropSubscription(exp.Expression):
    arg_types = {"this": True, "exists": False}


class ShowSubscriptions(exp.Expression):
    arg_types = {}


class ShowSubscriptionGroups(exp.Expression):
    arg_types = {}


class ExplainSubscription(exp.Expression):
    """``this`` is a subscription name (an Identifier) or a SELECT."""

    arg_types = {"this": True}

    @property
    def target(self) -> str | exp.Expression:
        t = self.args["this"]
        return t.name if isinstance(t, exp.Identifier) else t


class CreateEventQuery(exp.Expression):
    arg_types = {"this": True, "expression": True}


class DropEventQuery(exp.Expression):
    arg_types = {"this": True, "exists": False}


def _name(self, node: exp.Expression) -> str:  # pragma: no cover - trivial
    return node.name


class SparksubSpark(Spark):
    """sqlglot's Spark dialect, taught sparksub's statements."""

    class Tokenizer(Spark.Tokenizer):
        # SHOW is a "command" in sqlglot (the rest of the line becomes one string token); we need
        # its tokens to recognise SHOW SUBSCRIPTIONS, and hand every other SHOW back as a command.
        COMMANDS = Spark.Tokenizer.COMMANDS - {TokenType.SHOW}
        # Likewise EXPLAIN, which the Spark dialect tokenizes as a command keyword.
        KEYWORDS = {**Spark.Tokenizer.KEYWORDS, "EXPLAIN": TokenType.VAR}

    class Parser(Spark.Parser):
        def _parse_statement(self):
            if not self._curr:
                return None
            start = self._index
            if self._match_text_seq("CREATE", "SUBSCRIPTION"):
                name = self._parse_name("subscription")
                self._expect_text("AS")
                cut = self._trailing_options()
                query = self._parse_before(cut, self._parse_select)
                if not isinstance(query, exp.Query):
                    self.raise_error("Expected a SELECT after AS")
                if cut is not None:
                    query.meta[OPTIONS] = self._parse_options()
                return self.expression(CreateSubscription(this=name, expression=query))
            if self._match_text_seq("DROP", "SUBSCRIPTION"):
                exists = self._match_text_seq("IF", "EXISTS")
                return self.expression(DropSubscription(this=self._parse_name("subscription"),
                                                        exists=exists))
            if self._match_text_seq("SHOW", "SUBSCRIPTIONS"):
                return self.expression(ShowSubscriptions())
            if self._match_text_seq("SHOW", "SUBSCRIPTION"):
                if not self._match_text_seq("GROUPS"):   # a typo of ours gets our error, not Spark's
                    self.raise_error("Expected GROUPS: SHOW SUBSCRIPTION GROUPS (or SHOW SUBSCRIPTIONS)")
                return self.expression(ShowSubscriptionGroups())
            if self._match_text_seq("EXPLAIN", "SUBSCRIPTION"):
                if self._curr and self._curr.token_type in (TokenType.SELECT, TokenType.L_PAREN,
                                                                        TokenType.WITH):
                    return self.expression(ExplainSubscription(this=self._parse_select()))
                return self.expression(ExplainSubscription(this=self._parse_name("subscription")))
            if self._match_text_seq("CREATE", "EVENT", "QUERY"):
                name = self._parse_name("event query")
                self._expect_text("AS")
                # The event-algebra text has its own grammar (grammar/*.lark): keep it verbatim.
                body_start = self._curr.start if self._curr else len(self.sql)
                body_end = body_start
                while self._curr:                 # to this statement's last token, not the script's end
                    body_end = self._curr.end + 1
                    self._advance()
                return self.expression(CreateEventQuery(this=name, expression=exp.Literal.string(
                    self.sql[body_start:body_end].strip())))
            if self._match_text_seq("DROP", "EVENT", "QUERY"):
                exists = self._match_text_seq("IF", "EXISTS")
                return self.expression(DropEventQuery(this=self._parse_name("event query"), exists=exists))
            self._retreat(start)
            if self._match(TokenType.SHOW) or self._match_text_seq("EXPLAIN"):
                # Not ours: keep the text whole, for Spark to run (engine.sql hands it on).
                return self._parse_as_command(self._prev)
            if self._curr.token_type == TokenType.SELECT:
                # a subscription body or template (``subscribe``, ``subscribe_many``) may end with its options
                cut = self._trailing_options()
                if cut is not None:
                    query = self._parse_before(cut, super()._parse_statement)
                    if isinstance(query, exp.Query):
                        query.meta[OPTIONS] = self._parse_options()
                    return query
            return super()._parse_statement()

        # ---- WITH (option = value, ...) after a subscription's SELECT (issue 19 item 2) -----------------------
        def _trailing_options(self) -> int | None:
            """The index of a ``WITH`` at bracket depth 0 whose ``( ... )`` closes at the statement's last
            token (the options clause), None when the statement has none.  (A SELECT would read ``FROM t WITH
            (...)`` as table hints: the clause is cut off before the SELECT is parsed.)"""
            tokens, depth, found = self._tokens, 0, None
            for i in range(self._index, self._tokens_size):
                tt = tokens[i].token_type
                if tt == TokenType.WITH and depth == 0 and i + 1 < self._tokens_size \
                        and tokens[i + 1].token_type == TokenType.L_PAREN:
                    found = i
                if tt == TokenType.L_PAREN:
                    depth += 1
                elif tt == TokenType.R_PAREN:
                    depth -= 1
                    if depth == 0 and found is not None and i == self._tokens_size - 1:
                        return found
            return None

        def _parse_before(self, cut: int | None, parse_method):
            """``parse_method()`` over the tokens before index ``cut`` (all of them when None); every one of
            them must be consumed."""
            if cut is None:
                return parse_method()
            saved, size = self._tokens, self._tokens_size
            self._tokens, self._tokens_size = saved[:cut], cut
            self._advance(0)
            try:
                node = parse_method()
                if self._index < cut:
                    self.raise_error("Unexpected token before the WITH (...) options")
            finally:
                self._tokens, self._tokens_size = saved, size
                self._advance(0)
            return node

        def _parse_options(self) -> dict:
            """``WITH (name = value, ...)``: a value is a number (``-`` allowed), a string, TRUE / FALSE or a
            bare word; names are case-insensitive and given once."""
            self._match(TokenType.WITH)
            if not self._match(TokenType.L_PAREN):
                self.raise_error("Expected ( after WITH")
            out: dict = {}
            while True:
                tok = self._curr
                if not tok or tok.token_type in (TokenType.R_PAREN, TokenType.COMMA, TokenType.EQ):
                    self.raise_error("Expected an option name in WITH (...)")
                name = tok.text.lower()
                self._advance()
                if not self._match(TokenType.EQ):
                    self.raise_error(f"Expected = after the option name {name!r} in WITH (...)")
                negative = self._match(TokenType.DASH)
                v = self._curr
                if v and v.token_type == TokenType.NUMBER:
                    text = v.text
                    value = int(text) if text.isdigit() else float(text)
                    value = -value if negative else value
                elif v and not negative and v.token_type == TokenType.STRING:
                    value = v.text
                elif v and not negative and v.token_type in (TokenType.TRUE, TokenType.FALSE):
                    value = v.token_type == TokenType.TRUE
                elif v and not negative and v.token_type == TokenType.VAR:
                    value = v.text
                else:
                    self.raise_error(f"Expected a number, a string, TRUE or FALSE as the value of option {name!r}")
                if name in out:
                    self.raise_error(f"option {name!r} is given twice in WITH (...)")
                self._advance()
                out[name] = value
                if self._match(TokenType.COMMA):
                    continue
                if not self._match(TokenType.R_PAREN):
                    self.raise_error("Expected , or ) in WITH (...)")
                return out

        def _parse_name(self, what: str) -> exp.Identifier:
            ident = self._parse_id_var(any_token=False)
            if not isinstance(ident, exp.Identifier):
                self.raise_error(f"Expected a {what} name")
            return ident

        def _expect_text(self, text: str) -> None:
            if not self._match_text_seq(text):
                self.raise_error(f"Expected {text}")

        def _parse_csv(self, parse_method, sep: TokenType = TokenType.COMMA) -> list:
            # sqlglot's own _parse_csv skips an empty item (``a, , b``, ``IN (1,)``), which Spark's parser
            # refuses: refuse it too, at the comma, instead of running a statement Spark would not.
            result = parse_method()
            items = [result] if result is not None else []
            while self._match(sep):
                if isinstance(result, exp.Expr):
                    self._add_comments(result)
                result = parse_method()
                if result is None:
                    if sep == TokenType.COMMA:
                        self.raise_error("Expected an expression after ','", self._prev)
                    continue
                items.append(result)
            return items


def _to_parse_error(err: SqlglotParseError, text: str) -> ParseError:
    first = err.errors[0] if err.errors else {}
    # sqlglot reports the column of the offending token's last character; point at its first.
    col = int(first.get("col") or 1) - max(len(first.get("highlight") or "x") - 1, 0)
    return ParseError(str(first.get("description") or err).split(". Line")[0], text,
                      int(first.get("line") or 1), max(col, 1))


#: where a parsed statement keeps the text it was parsed from (its nodes' ``meta`` offsets index it)
SOURCE = "sparksub_source"


def position(node: exp.Expression) -> tuple[str, int, int] | None:
    """``(text, line, column)`` of ``node``'s first token in the text its statement was parsed from
    (:func:`parse_statements` keeps it), or None when unknown (a node built in code)."""
    text = node.root().meta.get(SOURCE) if node.root()._meta else None
    starts = [n.meta["start"] for n in node.walk() if n._meta and "start" in n.meta]
    if text is None or not starts:
        return None
    return (text, *position_of(text, min(starts)))


def _check_spark_rules(stmt: exp.Expression, text: str) -> None:
    """What Spark's parser refuses and sqlglot's accepts, refused here with Spark's reasons."""
    def refuse(message: str, node: exp.Expression):
        where = position(node)
        raise ParseError(message, text, *(where[1:] if where else (1, 1)))

    for node in stmt.walk():
        if isinstance(node, exp.Count) and node.this is None and not node.expressions:
            refuse("COUNT needs an argument: COUNT(*) or COUNT(expr)", node)
        if isinstance(node, exp.Literal) and not node.is_string:
            try:
                value = float(node.this)
            except ValueError:
                continue
            if math.isinf(value):  # Spark: INVALID_NUMERIC_LITERAL_RANGE, a parse error
                refuse(f"numeric literal {node.this[:20]}{'...' if len(node.this) > 20 else ''} is outside "
                       f"the range of DOUBLE", node)


def parse_statements(text: str) -> list[exp.Expression]:
    """Parse a script of ``;``-separated statements. Raises :class:`ParseError` with line and column.
    Each statement keeps ``text`` in its ``meta`` (:data:`SOURCE`), for errors to point into it."""
    if not isinstance(text, str):
        raise InvalidArgument(f"SQL text must be a string, got {type(text).__name__}: {text!r:.60}")
    try:
        stmts = sqlglot.parse(text, read=SparksubSpark, error_level=sqlglot.ErrorLevel.IMMEDIATE)
    except SqlglotParseError as err:
        raise _to_parse_error(err, text) from None
    except sqlglot.errors.TokenError as err:
        raise ParseError(f"cannot tokenize: {err}", text, 1, 1) from None
    out = [s for s in stmts if s is not None]
    for stmt in out:
        stmt.meta[SOURCE] = text
        _check_spark_rules(stmt, text)
    return out


def parse_statement(text: str) -> exp.Expression:
    """Parse exactly one statement."""
    stmts = parse_statements(text)
    if len(stmts) != 1:
        raise ParseError(f"expected one statement, found {len(stmts)}", text, 1, 1)
    return stmts[0]


def parse_select(text: str) -> exp.Query:
    """Parse a SELECT (a subscription body or a ``subscribe_many`` template)."""
    stmt = parse_statement(text)
    if not isinstance(stmt, exp.Query):
        raise ParseError(f"expected a SELECT, found {type(stmt).__name__}", text, 1, 1)
    return stmt
