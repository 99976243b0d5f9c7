"""The notifications the server has sent or will send, per client, on disk: what makes reconnecting safe.

Every notification routed to a client gets the next number of that client's sequence (``client_seq``,
1, 2, ...) and is written here, committed, before any socket sees it; a client that reconnects with the
last number it received (``?after=N``, SSE's ``Last-Event-ID``) is sent the rows after it from here and then
the live ones, the overlap dropped by number -- so it misses nothing and gets nothing twice.  Rows older
than the retention window are deleted; a client that comes back after its rows were deleted is told which
numbers it lost (a ``gap``), never silently.

stdlib ``sqlite3`` in WAL mode under the engine directory (``serve/notifications.sqlite``): a single-file
store with atomic commits, no server to run, and concurrent readers while the publisher writes.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

__all__ = ["NotificationLog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    client TEXT NOT NULL, client_seq INTEGER NOT NULL, subscription TEXT NOT NULL, created REAL NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (client, client_seq)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS notifications_by_created ON notifications (created);
CREATE TABLE IF NOT EXISTS clients (client TEXT PRIMARY KEY, last_seq INTEGER NOT NULL) WITHOUT ROWID;
"""


class NotificationLog:
    """One server's kept notifications.  ``append`` numbers and stores; ``read`` pages through a client's
    rows after a number.  Thread-safe (one connection behind a lock)."""

    def __init__(self, file: Path, retention_seconds: float):
        file.parent.mkdir(parents=True, exist_ok=True)
        self.file = file
        self.retention_seconds = retention_seconds
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(file), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._last = dict(self._db.execute("SELECT client, last_seq FROM clients").fetchall())
        self._pruned_at = 0.0

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def last_seq(self, client: str) -> int:
        """The number of ``client``'s latest notification (0: none yet)."""
        with self._lock:
            return self._last.get(client, 0)

    def append(self, by_client: dict[str, list[tuple[str, str]]]) -> dict[str, list[tuple[int, str, str]]]:
        """Number and keep ``{client: [(subscription, body JSON), ...]}`` in one transaction; returns
        ``{client: [(client_seq, subscription, body), ...]}`` in the same order."""
        now = time.time()
        out: dict[str, list[tuple[int, str, str]]] = {}
        with self._lock:
            last = dict(self._last)
            rows = []
            for client, notes in by_client.items():
                if not notes:
                    continue
                start = last.get(client, 0)
                numbered = [(start + i + 1, sub, body) for i, (sub, body) in enumerate(notes)]
                last[client] = start + len(notes)
                out[client] = numbered
                rows.extend((client, seq, sub, now, body) for seq, sub, body in numbered)
            if not rows:
                return out
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT INTO notifications VALUES (?, ?, ?, ?, ?)", rows)
                self._db.executemany("INSERT INTO clients VALUES (?, ?) ON CONFLICT (client) DO UPDATE SET "
                                     "last_seq = excluded.last_seq", [(c, last[c]) for c in out])
                if now - self._pruned_at > min(60.0, self.retention_seconds / 2):
                    self._db.execute("DELETE FROM notifications WHERE created < ?", (now - self.retention_seconds,))
                    self._pruned_at = now
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._last = last
        return out

    def prune(self, now: float | None = None) -> int:
        """Delete the rows older than the retention window now; returns how many went."""
        now = time.time() if now is None else now
        with self._lock:
            cur = self._db.execute("DELETE FROM notifications WHERE created < ?", (now - self.retention_seconds,))
            self._pruned_at = now
            return cur.rowcount

    def first_kept(self, client: str) -> int | None:
        """The smallest number of ``client`` still kept (None: none kept)."""
        with self._lock:
            row = self._db.execute("SELECT MIN(client_seq) FROM notifications WHERE client = ?", (client,)).fetchone()
        return row[0]

    def read(self, client: str, after: int, subscriptions=None, limit: int = 2000) -> list[tuple[int, str, str]]:
        """Up to ``limit`` of ``client``'s rows with ``client_seq > after`` (only ``subscriptions`` when
        given), in order: ``(client_seq, subscription, body)``."""
        sql = "SELECT client_seq, subscription, body FROM notifications WHERE client = ? AND client_seq > ?"
        args: list = [client, after]
        if subscriptions:
            subs = sorted(subscriptions)
            sql += f" AND subscription IN ({', '.join('?' * len(subs))})"
            args += subs
        sql += " ORDER BY client_seq LIMIT ?"
        args.append(limit)
        with self._lock:
            return self._db.execute(sql, args).fetchall()
