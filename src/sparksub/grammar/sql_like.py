"""SQL ``LIKE`` patterns as Spark SQL reads them, matched without regular expressions (issue 15 item 4).

Semantics (Spark SQL ``LIKE``, ``StringUtils.escapeLikeRegex``): ``_`` matches exactly one character (a
newline too), ``%`` any sequence of characters (also none), every other character itself, case-sensitively;
the escape character ``\\`` makes the ``_``, ``%`` or ``\\`` after it literal.  An escape before any other
character, or at the end of the pattern, is an error (Spark: "the escape character is not allowed to
precede ..." / "... to end with the escape character"): ``like_pattern_problem`` names it, ``compile_like``
raises ``AnalysisError``.

Why not a regex: a pattern can come from an event attribute (``$2.Txt LIKE $1.Pat``), so it is compiled at
run time, and ``%a%a%a…`` against a long non-matching text makes a backtracking regex engine take
exponential time.  Here a pattern is split at its ``%`` into segments (runs of literal characters and
``_``): the first segment must match at the start, the last at the end, and each middle segment is placed
at its leftmost match after the previous one (a ``%`` absorbs whatever lies between, so the leftmost
placement never loses a match).  A segment without ``_`` is found with ``str.find``; one with ``_`` by a
scan.  Time O(len(text) * len(pattern)) at worst, O(len(text) + len(pattern)) for literal segments; no
backtracking over ``%``.

>>> like("Cayuga", "Ca%a"), like("Cayuga", "_ayug_"), like("100%", "100\\\\%"), like("1000", "100\\\\%")
(True, True, True, False)
"""
from __future__ import annotations

from sparksub.errors import AnalysisError

__all__ = ["ESCAPE", "LikePattern", "compile_like", "like", "like_pattern_problem"]

#: The escape character (Spark SQL's default).
ESCAPE = "\\"
_ANY = None                 # a segment item matching any one character (``_``)
_CACHE: dict[str, "LikePattern"] = {}
_CACHE_SIZE = 4096          # compiled patterns kept (patterns read from events repeat)


def _parse(pattern: str) -> tuple[list[tuple], str | None]:
    """(segments split at ``%``, each a tuple of characters or ``_ANY``; the problem, or None)."""
    segments, current = [], []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == ESCAPE:
            if i + 1 == n:
                return [], f"the LIKE pattern {pattern!r} ends with the escape character {ESCAPE!r}"
            nxt = pattern[i + 1]
            if nxt not in ("_", "%", ESCAPE):
                return [], (f"in the LIKE pattern {pattern!r} the escape character {ESCAPE!r} precedes "
                            f"{nxt!r}: it may only precede '_', '%' or itself")
            current.append(nxt)
            i += 2
            continue
        if c == "%":
            segments.append(tuple(current))
            current = []
        else:
            current.append(_ANY if c == "_" else c)
        i += 1
    segments.append(tuple(current))
    return segments, None


def like_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a valid LIKE pattern (a misplaced escape), or None."""
    return _parse(pattern)[1]


class _Segment:
    """One run between two ``%``: its length, and either its literal text or its items (with ``_``)."""

    __slots__ = ("size", "text", "items")

    def __init__(self, items: tuple):
        self.size = len(items)
        self.items = items
        self.text = "".join(items) if _ANY not in items else None

    def at(self, s: str, i: int) -> bool:
        """Whether the segment matches ``s`` at position ``i`` (``i + size <= len(s)``)."""
        if self.text is not None:
            return s.startswith(self.text, i)
        for k, c in enumerate(self.items):
            if c is not _ANY and s[i + k] != c:
                return False
        return True

    def find(self, s: str, start: int, stop: int) -> int:
        """The leftmost ``i`` in ``[start, stop - size]`` where the segment matches, or -1."""
        if self.text is not None:
            return s.find(self.text, start, stop)
        for i in range(start, stop - self.size + 1):
            if self.at(s, i):
                return i
        return -1


class LikePattern:
    """A compiled LIKE pattern: ``match(text)``."""

    __slots__ = ("pattern", "segments")

    def __init__(self, pattern: str):
        segments, problem = _parse(pattern)
        if problem is not None:
            raise AnalysisError(problem)
        self.pattern = pattern
        self.segments = [_Segment(s) for s in segments]

    def match(self, text: str) -> bool:
        segs, n = self.segments, len(text)
        if len(segs) == 1:                          # no '%': the whole text, character for character
            return n == segs[0].size and segs[0].at(text, 0)
        first, last = segs[0], segs[-1]
        if first.size + last.size > n or not first.at(text, 0) or not last.at(text, n - last.size):
            return False
        pos, stop = first.size, n - last.size
        for seg in segs[1:-1]:                      # leftmost placement of each middle segment
            i = seg.find(text, pos, stop)
            if i < 0:
                return False
            pos = i + seg.size
        return True

    def __repr__(self) -> str:
        return f"LikePattern({self.pattern!r})"


def compile_like(pattern: str) -> LikePattern:
    """The compiled pattern (cached: patterns taken from events repeat); ``AnalysisError`` if invalid."""
    got = _CACHE.get(pattern)
    if got is None:
        got = LikePattern(pattern)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[pattern] = got
    return got


def like(text: str, pattern: str) -> bool:
    """``text LIKE pattern`` (both strings), Spark SQL semantics; ``AnalysisError`` for an invalid pattern."""
    return compile_like(pattern).match(text)
