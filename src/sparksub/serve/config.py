"""The subscription server's settings, in one place (``sparksub serve`` takes them as options)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServeConfig"]


@dataclass
class ServeConfig:
    """Limits and windows of one server.  Every limit refuses a request with a 4xx naming it."""
    #: the largest request body accepted (bytes): a publish batch, a parameter table, a statement
    max_body_bytes: int = 16 * 1024 * 1024
    #: subscriptions and event queries one client may hold (bulk registrations count each row)
    max_subscriptions_per_client: int = 100_000
    #: how long notifications are kept on disk for reconnecting clients (seconds)
    retention_seconds: float = 24 * 3600.0
    #: notifications queued for one connection before it is dropped as too slow (it may reconnect with its seq)
    queue_limit: int = 10_000
    #: how often an idle SSE stream is sent a heartbeat (seconds); a WebSocket has the protocol's pings instead
    heartbeat_seconds: float = 15.0
    #: how often uvicorn pings every WebSocket (seconds; None: never), and how long it waits for the pong before
    #: closing the connection as dead.  uvicorn's default, 20 s, is a ping and a pong read per connection every
    #: 20 s whether it is busy or not: with 10,000 connections that was more of the event loop's work than
    #: sending the notifications (bench/serving.py's profile); every 60 s still finds a dead peer within ~80 s
    #: and keeps common NAT and proxy idle timeouts (60 s and up) open
    ws_ping_seconds: float | None = 60.0
    ws_ping_timeout_seconds: float | None = 20.0
    #: the runtime counters (``engine.runtime_stats()``) are read at most this often for /metrics (seconds)
    stats_interval_seconds: float = 10.0
    #: the window over which /metrics and /stats compute notifications per second (seconds)
    rate_window_seconds: float = 10.0
    #: backlog rows read from disk per query when a client catches up
    backlog_page_rows: int = 2_000
    #: the most notification bodies (bytes) one WebSocket frame holds (fanout.py: one frame per wake-up, under
    #: the 1 MiB frames WebSocket clients accept by default)
    ws_frame_bytes: int = 256 * 1024
    #: how long an idle HTTP keep-alive connection is kept open (seconds; uvicorn's default is 5).  A publisher
    #: that publishes every few seconds would otherwise race the server's close with its next request (a reset)
    keep_alive_seconds: float = 30.0
    #: fan-out processes holding the live streams (0: the streams are served by the engine's process).  The
    #: engine stays in one process; each fan-out process listens on the same port (SO_REUSEPORT) and frames and
    #: writes for its share of the connections, fed from the notification log (``workers.py``).  One event
    #: loop spent 0.8-1.1 CPU-seconds per publish on 10,000 connections (bench/serving.py).  On a 2-core machine
    #: shared with other work it measured slower than one process (no idle core to use): for larger machines
    fanout_workers: int = 0
