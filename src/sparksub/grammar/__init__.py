"""Front ends: SQL (sqlglot, Spark dialect, plus our statements) and, later, the event algebra (*.lark)."""
from sparksub.grammar.statements import *  # noqa: F401,F403
