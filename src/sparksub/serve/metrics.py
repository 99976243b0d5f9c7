"""``GET /metrics`` in Prometheus' text format, through ``prometheus_client`` (the reference client, kept by
the Prometheus project): one registry per app, filled at scrape time by a collector that reads the service
and the fan-out, so that two apps in one process (tests, a benchmark) never share or clash on metrics.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["metrics_text", "new_registry", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ServerCollector:
    """The server's numbers at scrape time.  ``snapshot()`` returns them (taken in the engine's thread)."""

    def __init__(self, snapshot):
        self._snapshot = snapshot
        self.latest: dict | None = None

    def collect(self):
        s = self.latest or {}
        per_class = GaugeMetricFamily("sparksub_subscriptions", "Subscriptions and event queries, per class",
                                      labels=["class"])
        for klass, n in sorted(s.get("subscriptions_per_class", {}).items()):
            per_class.add_metric([klass], n)
        yield per_class
        yield CounterMetricFamily("sparksub_notifications", "Notifications routed to remote clients",
                                  value=s.get("notifications_total", 0))
        yield GaugeMetricFamily("sparksub_notifications_per_second",
                                "Notifications routed per second over the rate window",
                                value=s.get("notifications_per_second", 0.0))
        yield CounterMetricFamily("sparksub_reformulated_messages", "Reformulated messages matched at the edge",
                                  value=s.get("messages_total", 0))
        yield CounterMetricFamily("sparksub_unroutable_messages",
                                  "Reformulated messages the engine committed before a restart and the server could "
                                  "not deliver (service.py route_kept)", value=s.get("unroutable_messages_total", 0))
        yield CounterMetricFamily("sparksub_published_rows", "Rows published through the server",
                                  value=s.get("published_rows_total", 0))
        yield GaugeMetricFamily("sparksub_publish_lag_seconds",
                                "Seconds from a publish request to its notifications queued (the last publish)",
                                value=s.get("last_publish_seconds", 0.0))
        yield GaugeMetricFamily("sparksub_queue_depth_max",
                                "Notifications waiting in the fullest connection's queue",
                                value=s.get("queue_depth_max", 0))
        yield GaugeMetricFamily("sparksub_connected_clients", "Clients with at least one live stream",
                                value=s.get("connected_clients", 0))
        yield GaugeMetricFamily("sparksub_connections", "Live WebSocket and SSE streams",
                                value=s.get("connections", 0))
        yield CounterMetricFamily("sparksub_slow_consumers_dropped", "Streams dropped for a full queue",
                                  value=s.get("dropped_slow", 0))
        yield from _stream_metrics(s.get("streams") or [])
        runtime = s.get("runtime", {})
        for key, help_text in (("rebuilds", "Operator rebuilds from the base and log files (engine.stats runtime)"),
                               ("catch_ups", "Log entries replayed into a cached operator (engine.stats runtime)"),
                               ("hits", "Worker cache hits (engine.stats runtime)")):
            yield CounterMetricFamily(f"sparksub_runtime_{key}", help_text, value=runtime.get(key, 0))


def _stream_metrics(streams: list[dict]):
    """The served streams' numbers (``engine_streams.py``: ``sparksub serve --stream``), per table."""
    if not streams:
        return
    up = GaugeMetricFamily("sparksub_stream_up", "A served stream's query is running (1) or not (0)",
                           labels=["table", "state"])
    batches = CounterMetricFamily("sparksub_stream_micro_batches", "Micro-batches routed, per served stream",
                                  labels=["table"])
    notes = CounterMetricFamily("sparksub_stream_notifications", "Notifications routed from a served stream",
                                labels=["table"])
    rejected = CounterMetricFamily("sparksub_stream_rejected_rows", "Rows a served stream rejected (malformed)",
                                   labels=["table"])
    age = GaugeMetricFamily("sparksub_stream_last_batch_age_seconds",
                            "Seconds since a served stream's last micro-batch was routed", labels=["table"])
    for st in streams:
        t = st["table"]
        up.add_metric([t, st["state"]], 1 if st["active"] else 0)
        batches.add_metric([t], st["micro_batches"])
        notes.add_metric([t], st["notifications"])
        rejected.add_metric([t], st["rejected"])
        if st.get("last_batch_seconds_ago") is not None:
            age.add_metric([t], st["last_batch_seconds_ago"])
    yield from (up, batches, notes, rejected, age)


def new_registry(snapshot) -> tuple[CollectorRegistry, _ServerCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = _ServerCollector(snapshot)
    registry.register(collector)
    return registry, collector


def metrics_text(registry: CollectorRegistry, collector: _ServerCollector, snapshot: dict) -> bytes:
    collector.latest = snapshot
    return generate_latest(registry)
