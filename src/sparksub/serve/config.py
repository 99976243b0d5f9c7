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
    #: how often an idle SSE stream or WebSocket is sent a heartbeat (seconds)
    heartbeat_seconds: float = 15.0
    #: the runtime counters (``engine.runtime_stats()``) are read at most this often for /metrics (seconds)
    stats_interval_seconds: float = 10.0
    #: the window over which /metrics and /stats compute notifications per second (seconds)
    rate_window_seconds: float = 10.0
    #: backlog rows read from disk per query when a client catches up
    backlog_page_rows: int = 2_000
