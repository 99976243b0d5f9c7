"""Fan-out of numbered notifications to the live connections (WebSocket and SSE), per client.

Each connection has its own bounded queue, filled on the event loop by ``Hub.dispatch`` (called from the
engine's worker thread through ``anyio.from_thread``, after the rows are committed to the notification log)
and drained by the connection's sender.  A connection whose queue is full is dropped -- its sender closes it
with a reason that names the last number it was sent -- instead of slowing the publisher or the other
clients; it reconnects with that number and catches up from the log.

The catch-up protocol (``Connection.catch_up`` with ``NotificationLog.read``): register the queue first, then
read the log, then send the queue, skipping every number already sent.  A row committed before the log read
is in the read; one committed after it reaches the queue (dispatch follows the commit); one in both is sent
once.  So the stream a client sees is gap-free and without repeats.
"""
from __future__ import annotations

import asyncio
import collections
import itertools

__all__ = ["Connection", "Hub", "wire_message"]


def wire_message(client_seq: int, body: str) -> str:
    """A notification as a WebSocket text frame or an SSE ``data`` line: the stored body (the row, JSON)
    inside its envelope, without parsing it again."""
    return f'{{"type":"notification","client_seq":{client_seq},"data":{body}}}'


class Connection:
    """One live stream of one client: its filter (subscription names, None: all of the client's), its queue
    of ``(client_seq, subscription, body)`` and the last number sent."""

    _ids = itertools.count(1)

    def __init__(self, client: str, subscriptions: set[str] | None, limit: int, kind: str):
        self.id = next(self._ids)
        self.client = client
        self.kind = kind
        self.subscriptions = subscriptions
        self.limit = limit
        self.queue: collections.deque = collections.deque()
        self.ready = asyncio.Event()
        self.last_sent = 0
        #: why the server dropped it (None while it is alive)
        self.dropped: str | None = None
        #: the client went away (nothing more can be sent to it)
        self.closed_by_client = False

    def wants(self, subscription: str) -> bool:
        return self.subscriptions is None or subscription in self.subscriptions

    def offer(self, notes) -> None:
        """Queue ``notes`` (on the event loop); past the limit the connection is marked dropped."""
        if self.dropped is not None:
            return
        for note in notes:
            if self.wants(note[1]):
                if len(self.queue) >= self.limit:
                    self.queue.clear()
                    self.dropped = (f"slow consumer: more than {self.limit} notifications queued; reconnect "
                                    f"with after={self.last_sent} to catch up")
                    break
                self.queue.append(note)
        self.ready.set()

    def take(self) -> list:
        """The queued notes not sent yet (numbers above ``last_sent``), in order; clears the queue."""
        out = [n for n in self.queue if n[0] > self.last_sent]
        self.queue.clear()
        self.ready.clear()
        return out


class Hub:
    """client -> its live connections.  Used on the event loop only."""

    def __init__(self):
        self._by_client: dict[str, dict[int, Connection]] = {}
        #: connections dropped as too slow, ever
        self.dropped_slow = 0

    def add(self, conn: Connection) -> None:
        self._by_client.setdefault(conn.client, {})[conn.id] = conn

    def remove(self, conn: Connection) -> None:
        mine = self._by_client.get(conn.client)
        if mine is not None:
            mine.pop(conn.id, None)
            if not mine:
                del self._by_client[conn.client]

    def dispatch(self, numbered: dict[str, list[tuple[int, str, str]]]) -> None:
        """Hand every client's newly numbered notes to its connections."""
        for client, notes in numbered.items():
            for conn in list(self._by_client.get(client, {}).values()):
                was = conn.dropped
                conn.offer(notes)
                if was is None and conn.dropped is not None:
                    self.dropped_slow += 1

    def connections(self) -> int:
        return sum(len(c) for c in self._by_client.values())

    def clients(self) -> int:
        return len(self._by_client)

    def queue_depth(self) -> int:
        """The longest queue of any connection now (a lag measure)."""
        return max((len(c.queue) for conns in self._by_client.values() for c in conns.values()), default=0)
