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

Framing: a WebSocket connection is sent one frame per wake-up -- every notification queued for it since its
last frame, up to ``frame_bytes`` of bodies (``wire_batch``) -- not one frame per notification.  A frame costs
the one event loop the same whatever it holds (a write, a drain, a wake-up of the client), so at ~12
notifications per client per publish that is ~12x fewer writes; the cap keeps a frame under the 1 MiB
``max_size`` that WebSocket clients (``websockets``' default) accept.  SSE keeps one event per notification --
EventSource resumes by event id (``Last-Event-ID``), so an event must be one numbered notification -- but the
events of one wake-up are written in one chunk (``sse_events``), one write for the lot.

The publish response goes before the fan-out: the engine's worker thread *stages* a publish's notes
(``Hub.stage``, on the event loop, inside the engine gate: in the engine's order) and the publish handler
*flushes* them (``Hub.flush``) just before it returns its response.  Handing notes to the queues only
schedules the connections' senders; the handler writes its response before the event loop runs any of them.
(Dispatching from the worker thread, as before, queued the handler's resumption behind 10,000 senders.)

A multi-process server (``workers.py``) holds its connections in fan-out processes, one Hub each, fed by
tailing the notification log; the engine's process then has no connection, and its Hub reports theirs
(``Hub.remote``: the processes' shared counters) in /health, /stats and /metrics.
"""
from __future__ import annotations

import asyncio
import collections
import itertools

__all__ = ["Connection", "Hub", "wire_message", "wire_batch", "sse_events", "frames"]

#: seconds after a stage when the Hub flushes anyway (the publish handler flushes at once; this is for a
#: handler that never resumed, so that no staged note waits for the next publish)
FLUSH_LATEST_S = 0.5


def wire_message(client_seq: int, body: str) -> str:
    """A notification as a WebSocket text frame or an SSE ``data`` line: the stored body (the row, JSON)
    inside its envelope, without parsing it again."""
    return f'{{"type":"notification","client_seq":{client_seq},"data":{body}}}'


def wire_batch(notes) -> str:
    """Notifications ``[(client_seq, subscription, body), ...]`` (in order) as one WebSocket text frame:
    ``{"type":"notifications","last_seq":L,"notifications":[{"client_seq":s,"data":{...}}, ...]}`` --
    ``last_seq`` is the last element's number, the one to reconnect with once the frame is handled."""
    items = ",".join(f'{{"client_seq":{seq},"data":{body}}}' for seq, _, body in notes)
    return f'{{"type":"notifications","last_seq":{notes[-1][0]},"notifications":[{items}]}}'


def sse_events(notes) -> str:
    """Notifications ``[(client_seq, subscription, body), ...]`` as SSE events, one per notification (``id`` =
    client_seq, what ``Last-Event-ID`` resumes after), concatenated: one write."""
    return "".join(f"id: {seq}\nevent: notification\ndata: {wire_message(seq, body)}\n\n" for seq, _, body in notes)


def frames(notes, frame_bytes: int):
    """``[(client_seq, subscription, body), ...]`` cut into runs whose bodies add up to at most ``frame_bytes``
    (a run holds at least one notification, however big)."""
    run, size = [], 0
    for note in notes:
        n = len(note[2]) + 32
        if run and size + n > frame_bytes:
            yield run
            run, size = [], 0
        run.append(note)
        size += n
    if run:
        yield run


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
        if self.subscriptions is None and len(self.queue) + len(notes) <= self.limit:
            self.queue.extend(notes)   # the usual case (every subscription of the client, room left): at once
            self.ready.set()
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
        q = self.queue
        # numbers grow along the queue: only a queue filled during a catch-up holds some already sent
        out = list(q) if not q or q[0][0] > self.last_sent else [n for n in q if n[0] > self.last_sent]
        q.clear()
        self.ready.clear()
        return out


class Hub:
    """client -> its live connections.  Used on the event loop only."""

    def __init__(self):
        self._by_client: dict[str, dict[int, Connection]] = {}
        #: connections dropped as too slow, ever (this process's)
        self.dropped_here = 0
        self._staged: list[dict] = []
        #: the fan-out processes' counters (``workers.FanoutPool``), added to this Hub's own; None: one process
        self.remote = None

    @property
    def dropped_slow(self) -> int:
        return self.counts()["dropped_slow"]

    def stage(self, numbered: dict[str, list[tuple[int, str, str]]]) -> None:
        """Keep a publish's numbered notes for the next ``flush`` (on the event loop, in the engine's order)."""
        self._staged.append(numbered)
        asyncio.get_running_loop().call_later(FLUSH_LATEST_S, self.flush)

    def flush(self) -> None:
        """Hand every staged publish's notes to the connections, in the order staged."""
        staged, self._staged = self._staged, []
        for numbered in staged:
            self.dispatch(numbered)

    def add(self, conn: Connection) -> None:
        self._by_client.setdefault(conn.client, {})[conn.id] = conn

    def remove(self, conn: Connection) -> None:
        mine = self._by_client.get(conn.client)
        if mine is not None:
            mine.pop(conn.id, None)
            if not mine:
                del self._by_client[conn.client]

    def client_names(self) -> list[str]:
        """The clients with a live stream in this process now."""
        return list(self._by_client)

    def dispatch(self, numbered: dict[str, list[tuple[int, str, str]]]) -> None:
        """Hand every client's newly numbered notes to its connections."""
        for client, notes in numbered.items():
            for conn in list(self._by_client.get(client, {}).values()):
                was = conn.dropped
                conn.offer(notes)
                if was is None and conn.dropped is not None:
                    self.dropped_here += 1

    def local_counts(self) -> dict:
        """This process's own counters (what a fan-out process publishes to the engine's)."""
        return {"connections": sum(len(c) for c in self._by_client.values()), "clients": len(self._by_client),
                "queue_depth": max((len(c.queue) for conns in self._by_client.values() for c in conns.values()),
                                   default=0),
                "dropped_slow": self.dropped_here}

    def counts(self) -> dict:
        """This process's counters with the fan-out processes' (summed; the queue depth: the largest)."""
        out = self.local_counts()
        if self.remote is not None:
            other = self.remote.totals()
            out = {k: max(v, other[k]) if k == "queue_depth" else v + other[k] for k, v in out.items()}
        return out

    def connections(self) -> int:
        return self.counts()["connections"]

    def clients(self) -> int:
        """Clients with a live stream (over several processes: summed, a client on two counted twice)."""
        return self.counts()["clients"]

    def queue_depth(self) -> int:
        """The longest queue of any connection now (a lag measure)."""
        return self.counts()["queue_depth"]
