"""Every error sparksub raises, in one place (as PySpark keeps its error classes together).

Each error says what is wrong and where; text errors carry line, column and a caret.
"""
from __future__ import annotations


class SparksubError(Exception):
    """Base class of every sparksub error."""


def position_of(text: str, offset: int) -> tuple[int, int]:
    """The 1-based (line, column) of the 0-based character ``offset`` in ``text``."""
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


class _Located:
    """What a text error carries: ``message``, ``text`` and its 1-based ``line``/``column`` (None when the
    error has no position), rendered with the offending line and a caret."""

    message: str
    text: str | None
    line: int | None
    column: int | None

    def _render(self) -> str:
        if self.line is None:
            return self.message
        lines = (self.text or "").splitlines() or [""]
        src = lines[self.line - 1] if 0 < self.line <= len(lines) else ""
        caret = " " * max((self.column or 1) - 1, 0) + "^"
        return f"{self.message} (line {self.line}, column {self.column})\n  {src}\n  {caret}"

    def shifted(self, text: str, offset: int):
        """This error positioned in ``text``, its own text being the part of ``text`` from ``offset`` on
        (a statement of a script, a script in a file): the same class, line and column counted in ``text``."""
        if self.line is None:
            return self
        line0, col0 = position_of(text, offset)
        column = self.column + (col0 - 1 if self.line == 1 else 0)
        return type(self)(self.message, text, line0 + self.line - 1, column)


class ParseError(_Located, SparksubError):
    """Malformed statement text. Carries ``line``/``column`` (1-based) and renders a caret."""

    def __init__(self, message: str, text: str = "", line: int = 1, column: int = 1):
        self.message, self.text, self.line, self.column = message, text, line, column
        super().__init__(self._render())


class AnalysisError(_Located, SparksubError):
    """Well-formed text that names an unknown table or column, or mistypes one.  When the text is known,
    ``line``/``column`` (1-based) point at the offending name or constant and the message has a caret."""

    def __init__(self, message: str, text: str | None = None, line: int | None = None,
                 column: int | None = None):
        self.message, self.text, self.line, self.column = message, text, line, column
        super().__init__(self._render())


class InvalidArgument(SparksubError, TypeError):
    """An argument of the wrong kind to an engine method (``sql(42)``, a batch DataFrame to ``stream``);
    also a ``TypeError``, as Python's own argument errors are."""


class CatalystUnavailable(SparksubError):
    """The Catalyst extension cannot be used here (no javac, no Spark jars, a session built without it);
    the message says why and what to do.  ``Engine(catalyst='auto')`` falls back to the pure-Python path."""


class SparkConnectUnsupported(SparksubError):
    """No longer raised: ``Engine`` runs on a Spark Connect session since issue 16 (``runtime/connect.py``).
    Kept so that code catching it still imports."""


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


class DirectoryLocked(SparksubError):
    """``Engine(path=...)`` on a directory another live engine holds (its lock file names the process): one
    engine per directory, as one writer per journal (``journal.py``).  A lock left by a dead process is
    taken over."""
