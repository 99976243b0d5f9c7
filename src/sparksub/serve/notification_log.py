"""The notifications the server has sent or will send, per client, on disk: what makes reconnecting safe.

Every notification routed to a client gets the next number of that client's sequence (``client_seq``,
1, 2, ...) and is written here, committed, before any socket sees it; a client that reconnects with the
last number it received (``?after=N``, SSE's ``Last-Event-ID``) is sent the rows after it from here and then
the live ones, the overlap dropped by number -- so it misses nothing and gets nothing twice.  Rows older
than the retention window are deleted; a client that comes back after its rows were deleted is told which
numbers it lost (a ``gap``), never silently.

stdlib ``sqlite3`` in WAL mode under the engine directory (``serve/notifications.sqlite``): a single-file
store with atomic commits, no server to run, and concurrent readers while the publisher writes.

One row per client per publish (a *chunk*: its numbers ``first_seq..last_seq``, their subscriptions and
bodies newline-joined -- neither a name nor a JSON body holds a raw newline), not one per notification: a
publish over a large group routes ~120K notifications to 1K-10K clients, and inserting 120K rows into two
B-trees took 1.2-2.6 s of the publish call, in the worker thread, holding up the next batch; a chunk per
client is 10-100x fewer rows.  Reads expand chunks back into notifications and cut at ``after``.

Commits are numbered too (``commit_id``, one per ``append``, kept in ``meta`` so that pruning never resets
it): the fan-out processes of a multi-process server (``workers.py``) tail the log -- ``commits_after`` reads
every chunk of the commits after the last one they handed out, in commit order -- and ``listeners`` are
called after each commit (the engine's process wakes the tailers through them).  A tailer opens the file
with ``reader=True``: no schema work, and ``last_seq`` read from the file, since another process appends.

**Routing marks** (issue 17: a server killed between the engine's commit and this log's loses nothing): the
log keeps, in ``marks``, how far it has routed each source of notifications -- the engine's publishes (the
engine's ``next_seq`` after the last routed one) and each served stream (its last routed micro-batch id) --
written by ``append`` in the same transaction as the chunks they produced.  A mark and its notifications
are committed together or not at all, so the server can tell exactly what is left to route after a crash
(``service.py``'s ``route_kept``; ``engine_streams.py``).
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

__all__ = ["NotificationLog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    client TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, created REAL NOT NULL,
    subscriptions TEXT NOT NULL, bodies TEXT NOT NULL, commit_id INTEGER,
    PRIMARY KEY (client, first_seq)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS chunks_by_created ON chunks (created);
CREATE TABLE IF NOT EXISTS clients (client TEXT PRIMARY KEY, last_seq INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS marks (source TEXT PRIMARY KEY, mark INTEGER NOT NULL) WITHOUT ROWID;
"""
#: the index the tailers read by; made after the column exists (a store from before commit ids gets it added)
_COMMIT_INDEX = "CREATE INDEX IF NOT EXISTS chunks_by_commit ON chunks (commit_id)"
#: the store of a server before chunks (one row per notification): its rows become one-notification chunks
_OLD_ROWS = """
INSERT OR IGNORE INTO chunks SELECT client, client_seq, client_seq, created, subscription, body, NULL FROM notifications;
DROP TABLE notifications;
"""


class NotificationLog:
    """One server's kept notifications.  ``append`` numbers and stores; ``read`` pages through a client's
    rows after a number.  Thread-safe (one connection behind a lock).  ``reader=True``: another process
    appends (a fan-out process tailing the engine's log); this one only reads."""

    def __init__(self, file: Path, retention_seconds: float, reader: bool = False):
        file.parent.mkdir(parents=True, exist_ok=True)
        self.file = file
        self.retention_seconds = retention_seconds
        self.reader = reader
        #: called with the commit id after each commit, in the appending thread (must not block)
        self.listeners: list = []
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(file), check_same_thread=False, isolation_level=None)
        self._pruned_at = 0.0
        self._last: dict | None = None
        self.last_commit = 0
        if reader:
            return
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'notifications'").fetchone():
            self._db.executescript("BEGIN;" + _OLD_ROWS + "COMMIT;")
        if "commit_id" not in {r[1] for r in self._db.execute("PRAGMA table_info(chunks)")}:
            self._db.execute("ALTER TABLE chunks ADD COLUMN commit_id INTEGER")
        self._db.execute(_COMMIT_INDEX)
        self._last = dict(self._db.execute("SELECT client, last_seq FROM clients").fetchall())
        row = self._db.execute("SELECT value FROM meta WHERE key = 'last_commit'").fetchone()
        self.last_commit = row[0] if row else 0

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def last_seq(self, client: str) -> int:
        """The number of ``client``'s latest notification (0: none yet)."""
        with self._lock:
            if self._last is None:   # a reader: the appending process's numbers, from the file
                row = self._db.execute("SELECT last_seq FROM clients WHERE client = ?", (client,)).fetchone()
                return row[0] if row else 0
            return self._last.get(client, 0)

    def append(self, by_client: dict[str, list[tuple[str, str]]], marks: dict[str, int] | None = None) \
            -> dict[str, list[tuple[int, str, str]]]:
        """Number and keep ``{client: [(subscription, body JSON), ...]}`` in one transaction, with the routing
        ``marks`` (``{source: mark}``, module doc) when given -- committed even when there is no notification;
        returns ``{client: [(client_seq, subscription, body), ...]}`` in the same order."""
        if self.reader:
            raise RuntimeError("a reader's notification log does not append")
        now = time.time()
        out: dict[str, list[tuple[int, str, str]]] = {}
        with self._lock:
            last = dict(self._last)
            commit = self.last_commit + 1
            rows = []
            for client, notes in by_client.items():
                if not notes:
                    continue
                start = last.get(client, 0)
                out[client] = [(start + i + 1, sub, body) for i, (sub, body) in enumerate(notes)]
                last[client] = start + len(notes)
                subs, bodies = zip(*notes)
                rows.append((client, start + 1, start + len(notes), now, "\n".join(subs), "\n".join(bodies), commit))
            if not rows and not marks:
                return out
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if marks:
                    self._db.executemany("INSERT INTO marks VALUES (?, ?) ON CONFLICT (source) DO UPDATE SET "
                                         "mark = excluded.mark", [(k, int(v)) for k, v in marks.items()])
                if not rows:   # marks alone: no commit id (the tailers would read an empty commit)
                    self._db.execute("COMMIT")
                    return out
                self._db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                self._db.executemany("INSERT INTO clients VALUES (?, ?) ON CONFLICT (client) DO UPDATE SET "
                                     "last_seq = excluded.last_seq", [(c, last[c]) for c in out])
                self._db.execute("INSERT INTO meta VALUES ('last_commit', ?) ON CONFLICT (key) DO UPDATE SET "
                                 "value = excluded.value", (commit,))
                if now - self._pruned_at > min(60.0, self.retention_seconds / 2):
                    self._db.execute("DELETE FROM chunks WHERE created < ?", (now - self.retention_seconds,))
                    self._pruned_at = now
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._last = last
            self.last_commit = commit
        for listener in self.listeners:   # after the commit: whoever is told may read it
            listener(commit)
        return out

    def mark(self, source: str) -> int | None:
        """How far ``source`` has been routed (module doc: the routing marks); None: never."""
        with self._lock:
            row = self._db.execute("SELECT mark FROM marks WHERE source = ?", (source,)).fetchone()
        return row[0] if row else None

    def committed(self) -> int:
        """The id of the latest commit in the file (0: none)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'last_commit'").fetchone()
        return row[0] if row else 0

    def commits_after(self, commit: int, upto: int | None = None, clients=None) \
            -> tuple[int, dict[str, list[tuple[int, int, str, str]]]]:
        """The chunks of the commits after ``commit`` (up to ``upto`` when given; of ``clients`` only when
        given): ``(the last commit read -- ``upto`` when given --, {client: [(first_seq, last_seq, subscriptions,
        bodies), ...]})``, each client's in order (``expand`` makes them notifications).  One SELECT, so one
        snapshot: a commit is read whole or not at all."""
        where, args = "commit_id > ?", [commit]
        if upto is not None:
            where, args = where + " AND commit_id <= ?", args + [upto]
        if clients is not None:   # one parameter (a JSON array): no limit on how many
            where, args = where + " AND client IN (SELECT value FROM json_each(?))", args + [json.dumps(list(clients))]
        with self._lock:
            chunks = self._db.execute("SELECT commit_id, client, first_seq, last_seq, subscriptions, bodies FROM "
                                      f"chunks WHERE {where} ORDER BY commit_id", args).fetchall()
        out: dict[str, list[tuple[int, int, str, str]]] = {}
        for commit_id, client, first, last, subs, bodies in chunks:
            out.setdefault(client, []).append((first, last, subs, bodies))
            commit = commit_id
        return (commit if upto is None else upto), out

    @staticmethod
    def expand(chunks) -> list[tuple[int, str, str]]:
        """Chunks ``[(first_seq, last_seq, subscriptions, bodies), ...]`` as ``[(client_seq, subscription,
        body), ...]``."""
        out: list[tuple[int, str, str]] = []
        for first, last, subs, bodies in chunks:
            out.extend(zip(range(first, last + 1), subs.split("\n"), bodies.split("\n")))
        return out

    def prune(self, now: float | None = None) -> int:
        """Delete the notifications older than the retention window now; returns how many went."""
        now = time.time() if now is None else now
        cutoff = now - self.retention_seconds
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                gone = self._db.execute("SELECT COALESCE(SUM(last_seq - first_seq + 1), 0) FROM chunks "
                                        "WHERE created < ?", (cutoff,)).fetchone()[0]
                self._db.execute("DELETE FROM chunks WHERE created < ?", (cutoff,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._pruned_at = now
            return gone

    def first_kept(self, client: str) -> int | None:
        """The smallest number of ``client`` still kept (None: none kept)."""
        with self._lock:
            row = self._db.execute("SELECT MIN(first_seq) FROM chunks WHERE client = ?", (client,)).fetchone()
        return row[0]

    def read(self, client: str, after: int, subscriptions=None, limit: int = 2000) -> list[tuple[int, str, str]]:
        """Up to ``limit`` of ``client``'s rows with ``client_seq > after`` (only ``subscriptions`` when
        given), in order: ``(client_seq, subscription, body)``."""
        out: list[tuple[int, str, str]] = []
        wanted = set(subscriptions) if subscriptions else None
        cursor_at = after
        while len(out) < limit:
            with self._lock:   # chunks a page at a time: a filtered read may skip many
                chunks = self._db.execute(
                    "SELECT first_seq, last_seq, subscriptions, bodies FROM chunks WHERE client = ? AND last_seq > ? "
                    "ORDER BY first_seq LIMIT 256", (client, cursor_at)).fetchall()
            if not chunks:
                break
            for first, last, subs, bodies in chunks:
                for seq, sub, body in zip(range(first, last + 1), subs.split("\n"), bodies.split("\n")):
                    if seq > after and (wanted is None or sub in wanted):
                        out.append((seq, sub, body))
                        if len(out) == limit:
                            return out
                cursor_at = last
        return out
