"""Scripts: ``;``-separated statements, each kept with its own text and its place in the script.

``engine.sql`` runs a script all-or-nothing (it checks every statement before running any) and reports a
bad statement at its line and column in the *script* (and the command line, in the file): so each
statement is parsed from its own piece of text and remembers where that piece starts.  ``CREATE EVENT
QUERY`` bodies (CEL or the algebra, ``grammar/events.py``) run to their statement's ``;``; the algebra's
sequence ``;[θ]`` stays inside.

>>> [(s.offset, type(s.statement).__name__) for s in parse_script("SHOW SUBSCRIPTIONS;\\n DROP SUBSCRIPTION a")]
[(0, 'ShowSubscriptions'), (19, 'DropSubscription')]
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from sparksub.errors import AnalysisError, ParseError, SparksubError
from sparksub.grammar import statements as st
from sparksub.grammar.event_ast import StreamExpr

__all__ = ["EventQueryStatement", "ScriptStatement", "parse_script", "script_pieces", "in_script",
           "spark_message_error"]


@dataclass
class EventQueryStatement:
    """``CREATE EVENT QUERY name AS <body>``, its body parsed (:func:`parse_script`)."""
    name: str
    query: StreamExpr
    text: str


@dataclass(frozen=True)
class ScriptStatement:
    """One statement of a script: the parsed ``statement``, its ``source`` text (up to its ``;``) and
    the ``offset`` of that text in the script."""
    statement: object
    source: str
    offset: int


_CREATE_EVENT_QUERY = re.compile(r"\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*CREATE\s+EVENT\s+QUERY\s+"
                                 r"(?P<name>`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s+AS\b", re.I | re.S)


def script_pieces(text: str) -> list[tuple[int, str]]:
    """``text`` cut at every ``;`` outside quotes, comments and brackets that is not the algebra's
    sequence ``;[θ]``: (offset, piece) for each non-blank piece."""
    pieces, start, depth, i, n = [], 0, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0 and not text[i + 1:].lstrip().startswith("["):
            pieces.append((start, text[start:i]))
            start = i + 1
        i += 1
    pieces.append((start, text[start:]))
    return [(o, p) for o, p in pieces if p.strip() and not _only_comments(p)]


def _only_comments(piece: str) -> bool:
    return not re.sub(r"--[^\n]*|/\*.*?\*/", "", piece, flags=re.S).strip()


def in_script(err: SparksubError, source: str, offset: int, text: str) -> SparksubError:
    """``err``, raised for the statement ``source`` found at ``offset`` of ``text``, positioned in ``text``
    (an error that points into another text, or nowhere, is returned as it is)."""
    if isinstance(err, (ParseError, AnalysisError)) and err.line is not None and err.text == source \
            and source != text:
        return err.shifted(text, offset)
    return err


def parse_script(text: str) -> list[ScriptStatement]:
    """The statements of a script, each parsed from its own piece (``st.parse_statements``); a parse error
    is positioned in the whole script."""
    from sparksub.grammar.events import parse_event_query
    out = []
    for offset, piece in script_pieces(text):
        m = _CREATE_EVENT_QUERY.match(piece)
        try:
            if m is None:
                out.extend(ScriptStatement(s, piece, offset) for s in st.parse_statements(piece))
                continue
            body = piece[m.end():]
            lead = len(body) - len(body.lstrip())   # parsed as stored: positions in the query's own text
            try:
                query = parse_event_query(body.strip())
            except ParseError as err:
                raise err.shifted(piece, m.end() + lead) from None
        except ParseError as err:
            raise in_script(err, piece, offset, text) from None
        out.append(ScriptStatement(EventQueryStatement(m.group("name").strip("`"), query, body.strip()),
                                   piece, offset))
    return out


_SPARK_POSITION = re.compile(r"line (\d+),? pos (\d+)")


def spark_message_error(message: str, source: str, syntax: bool) -> SparksubError:
    """Spark's error ``message`` about its own statement ``source`` as ours: a ParseError (``syntax``) or an
    AnalysisError at Spark's line and position in ``source``, so that :func:`in_script` can place it in the
    script.  Which of PySpark's exceptions is which is the runtime's business (``runtime/spark_errors.py``:
    only the runtime imports pyspark).

    >>> print(spark_message_error("[PARSE_SYNTAX_ERROR] Syntax error at or near 'FORM'.(line 1, pos 9)",
    ...                           "SELECT 1 FORM t", syntax=True))
    Spark: [PARSE_SYNTAX_ERROR] Syntax error at or near 'FORM'. (line 1, column 10)
      SELECT 1 FORM t
               ^
    """
    m = _SPARK_POSITION.search(message)
    # Spark's position is in ``source``; ours replaces it
    text = re.sub(r"\s*(?:\(line \d+,? pos \d+\)|;?\s*line \d+,? pos \d+)", "", message.strip().split("\n")[0])
    line, column = (int(m.group(1)), int(m.group(2)) + 1) if m else (None, None)
    if syntax:
        return ParseError(f"Spark: {text}", source, line or 1, column or 1)
    return AnalysisError(f"Spark: {text}", source if line else None, line, column)
