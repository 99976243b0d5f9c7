"""The engine's directory: where everything the engine knows is kept (issue 16 item 6, DESIGN §1).

``Engine(path=...)`` keeps its catalog, subscriptions, operator state, checkpoints and sequence numbers
under ``path`` so that ``Engine(path=same)`` in a new process continues exactly; without a path the
engine uses a temporary directory, removed when the engine is garbage-collected or the process exits.

Layout (each area is created on first use)::

    <root>/
      groups/<group>/    the group operators' state files (the runtime ships paths, not broadcasts)
      streams/<name>/    Structured Streaming checkpoints of ``Engine.stream``
      ...                the catalog, the journal and the retained notifications (see below)

Pure: file system only, no pyspark.
"""
from __future__ import annotations

import re
import shutil
import tempfile
import weakref
from pathlib import Path

from sparksub.errors import InvalidArgument

__all__ = ["EngineDirectory"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.=@,+-]")


def safe_name(name: str) -> str:
    """A group id or table name as one path component (ids hold ``:`` ``*`` ``/`` and such)."""
    return _UNSAFE.sub(lambda m: f"%{ord(m.group(0)):02X}", name)


class EngineDirectory:
    """One engine's directory. ``path=None``: a fresh temporary directory (removed at exit)."""

    def __init__(self, path=None):
        self.temporary = path is None
        if path is None:
            root = Path(tempfile.mkdtemp(prefix="sparksub-"))
            weakref.finalize(self, shutil.rmtree, str(root), True)
        else:
            try:
                root = Path(path).expanduser()
                root.mkdir(parents=True, exist_ok=True)
            except (TypeError, OSError) as err:
                raise InvalidArgument(f"Engine(path={path!r}): cannot use it as the engine's directory: {err}") \
                    from None
        self.root = root.resolve()

    def area(self, *parts: str) -> Path:
        """``root/parts...``, created if missing; each part is made a safe path component."""
        p = self.root.joinpath(*(safe_name(x) for x in parts))
        p.mkdir(parents=True, exist_ok=True)
        return p

    def __repr__(self) -> str:
        return f"EngineDirectory({str(self.root)!r}{', temporary' if self.temporary else ''})"
