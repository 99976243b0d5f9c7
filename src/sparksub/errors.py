"""Every error sparksub raises, in one place (as PySpark keeps its error classes together).

Each error says what is wrong and where; text errors carry line, column and a caret.
"""
from __future__ import annotations


class SparksubError(Exception):
    """Base class of every sparksub error."""


class ParseError(SparksubError):
    """Malformed statement text. Carries ``line``/``column`` (1-based) and renders a caret."""

    def __init__(self, message: str, text: str = "", line: int = 1, column: int = 1):
        self.message, self.text, self.line, self.column = message, text, line, column
        super().__init__(self._render())

    def _render(self) -> str:
        lines = self.text.splitlines() or [""]
        src = lines[self.line - 1] if 0 < self.line <= len(lines) else ""
        caret = " " * max(self.column - 1, 0) + "^"
        return f"{self.message} (line {self.line}, column {self.column})\n  {src}\n  {caret}"


class AnalysisError(SparksubError):
    """Well-formed text that names an unknown table or column, or mistypes one."""


class CatalystUnavailable(SparksubError):
    """The Catalyst extension cannot be used here (no javac, no Spark jars, a session built without it);
    the message says why and what to do.  ``Engine(catalyst='auto')`` falls back to the pure-Python path."""


class UnsupportedSubscription(SparksubError):
    """A subscription whose shape is outside every supported class."""

    def __init__(self, shape: str, supported: tuple[str, ...]):
        self.shape, self.supported = shape, supported
        super().__init__(
            f"unsupported subscription shape: {shape}; supported classes: {', '.join(supported)}")


class InvalidSubscription(SparksubError):
    """A supported shape with bad constants: an empty or inverted range, a NaN bound, a duplicate id."""


class DuplicateSubscription(InvalidSubscription):
    """A subscription id that is already registered."""


class UnknownSubscription(SparksubError):
    """A subscription id that is not registered."""


class BadUpdate(SparksubError):
    """An update that cannot be applied: missing key, unknown key on delete, NaN, wrong type.

    ``row`` is the 0-based position of the offending row in the published batch.
    """

    def __init__(self, message: str, row: int | None = None, column: str | None = None):
        self.row, self.column = row, column
        where = "" if row is None else f" (row {row}" + (f", column {column!r}" if column else "") + ")"
        super().__init__(message + where)
