"""The value semantics of event-query expressions, for the executors (``nfa``, ``nfa_families``): arithmetic,
comparisons, the built-in functions and ``LIKE`` (pure Python; no Spark).  The reference interpreter
(``cayuga_reference``, the test oracle) implements the same rules on its own; DESIGN §4 and
``docs/events.md`` state them:

- NULL in, NULL out (SQL); a predicate holds only when TRUE.
- Arithmetic on numbers; a division or modulo by zero, and ``0 ^ negative``, is NULL; a power with no
  real result (``(-8) ^ 0.5``) is NULL; an overflow (``10.0 ^ 400``) is an evaluation error.
- ``LIKE``: Spark SQL's (``grammar/sql_like``: ``_``, ``%``, escape ``\\``), matched in linear time.
- An operation on values of the wrong type (possible only where the schemas declared no types: the
  registration type check, ``grammar/event_analysis``, refuses ill-typed queries) is an evaluation error.

An evaluation error is an ``AnalysisError`` raised from the evaluation; the executors catch it where it
happens and charge it to the queries that evaluated it (DESIGN §7: a run-time error belongs to the query
that raised it), never to their neighbours.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

from sparksub.errors import AnalysisError
from sparksub.grammar.sql_like import compile_like

__all__ = ["ARITHMETIC", "COMPARISONS", "FUNCTIONS", "arithmetic", "apply_typed", "like", "rename_attributes"]

ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "%": operator.mod, "^": operator.pow}
COMPARISONS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
               ">": operator.gt, ">=": operator.ge}


def apply_typed(fn: Callable, *args) -> Any:
    """``fn(*args)``, a Python type or range error turned into an evaluation error (``AnalysisError``)."""
    try:
        return fn(*args)
    except (TypeError, ValueError, OverflowError) as exc:
        raise AnalysisError(f"cannot apply {getattr(fn, '__name__', fn)} to {args!r}: {exc}") from None


def arithmetic(op: str, a, b):
    """``a op b`` for non-NULL operands (see the module docstring: NULL on a zero divisor or no real result)."""
    if op in "/%" and b == 0:
        return None
    try:
        v = ARITHMETIC[op](a, b)
    except ZeroDivisionError:          # 0 ^ negative
        return None
    except (TypeError, ValueError, OverflowError) as exc:
        raise AnalysisError(f"cannot apply {op} to {a!r} and {b!r}: {exc}") from None
    return None if isinstance(v, complex) else v


def like(text, pattern) -> bool:
    """``text LIKE pattern`` on two strings (an evaluation error otherwise, or for a bad escape)."""
    if not (isinstance(text, str) and isinstance(pattern, str)):
        raise AnalysisError(f"LIKE needs strings, got {text!r} LIKE {pattern!r}")
    return compile_like(pattern).match(text)


def _contains(text, pattern):
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise AnalysisError(f"contains() needs two strings, got {text!r}, {pattern!r}")
    return pattern in text


def _length(x):
    return len(x)


#: Functions callable from predicates (the registration type check knows their signatures,
#: ``event_analysis.FUNCTION_TYPES``); each returns NULL on a NULL argument.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "contains": _contains, "lower": str.lower, "upper": str.upper, "length": _length, "abs": abs,
}


def rename_attributes(attrs: dict, mapping: dict) -> dict:
    """004 §2.2 ρ on one event's attributes (two attributes renamed alike: an evaluation error; the
    registration check refuses such a RENAME where the schema is declared)."""
    renamed = {}
    for k, v in attrs.items():
        n = mapping.get(k, k)
        if n in renamed:
            raise AnalysisError(f"RENAME: two attributes named {n!r} after renaming")
        renamed[n] = v
    return renamed
