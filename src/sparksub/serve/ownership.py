"""Which client owns which subscription: the server keeps every client's subscriptions and event queries in
the one engine under ``<client>.<name>``, so ownership is part of the id -- it survives a restart with the
engine's own journal, needs no second store that could disagree with it, and two clients may both name a
subscription ``s1``.  A client only ever sees and names its own ``<name>``s; another client's name resolves
to nothing (404).

``Owners`` is the in-memory index of who holds what (rebuilt from the engine at start), for the per-client
limit and the listings without walking every group's ids per request.
"""
from __future__ import annotations

import re
import threading

__all__ = ["SEPARATOR", "SUBSCRIPTION_NAME", "engine_id", "split_engine_id", "Owners"]

SEPARATOR = "."
#: a client-side subscription or event query name (what ``_BARE_NAME`` in engine.py reads as a name)
SUBSCRIPTION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.$-]{0,127}")


def engine_id(client: str, name: str) -> str:
    """The engine's id of ``client``'s subscription ``name``."""
    return f"{client}{SEPARATOR}{name}"


def split_engine_id(eid: str) -> tuple[str, str] | None:
    """(client, name) of an engine id the server made; None for one it did not (a subscription made
    in-process, which no remote client owns).  Client names hold no ``.``, so the first one separates."""
    client, sep, name = eid.partition(SEPARATOR)
    return (client, name) if sep and client and name else None


class Owners:
    """client -> {name: kind} (kind: ``'subscription'`` or ``'event query'``).  Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._names: dict[str, dict[str, str]] = {}

    def load(self, subscription_ids, event_query_names) -> None:
        with self._lock:
            self._names.clear()
            for kind, ids in (("subscription", subscription_ids), ("event query", event_query_names)):
                for eid in ids:
                    owned = split_engine_id(str(eid))
                    if owned is not None:
                        self._names.setdefault(owned[0], {})[owned[1]] = kind

    def kind(self, client: str, name: str) -> str | None:
        with self._lock:
            return self._names.get(client, {}).get(name)

    def count(self, client: str) -> int:
        with self._lock:
            return len(self._names.get(client, {}))

    def names(self, client: str) -> dict[str, str]:
        with self._lock:
            return dict(self._names.get(client, {}))

    def add(self, client: str, names, kind: str) -> None:
        with self._lock:
            mine = self._names.setdefault(client, {})
            for name in names:
                mine[name] = kind

    def remove(self, client: str, name: str) -> None:
        with self._lock:
            self._names.get(client, {}).pop(name, None)

    def clients(self) -> list[str]:
        with self._lock:
            return [c for c, names in self._names.items() if names]
