"""The subscription server (DESIGN §9, issue 17): ``sparksub serve PATH`` runs an engine directory as a
service -- remote clients, each with its own token, submit, drop and EXPLAIN subscriptions and event queries
over HTTP, publishers publish batches, and every client receives its own notifications live over WebSocket
(``/ws``) or Server-Sent Events (``/events``), numbered per client so that a reconnect misses nothing and
repeats nothing.  A small web page (``/``) shows the groups, the rate, plans and a live tail.

Why Starlette on uvicorn: Starlette is a small, well-kept ASGI toolkit (the base FastAPI is built on) that
has WebSockets, streaming responses for SSE and static files in a plain ASGI core, with two dependencies
(anyio, typing-extensions); FastAPI would add pydantic and a second way of declaring
everything for no gain here, since the request bodies are batches (CSV, Arrow, JSON lines) rather than
models.  uvicorn is the reference ASGI server, maintained by the same people (Encode), with WebSocket
support through the ``websockets`` package.  ``httpx`` and ``websockets`` (its sync client) serve the Python
client (``sparksub.client``); ``prometheus_client`` writes ``/metrics``.

Modules: ``app`` (routes, auth, the engine gate, streams), ``service`` (the engine as clients use it:
statements under their names, publishing and routing), ``bodies`` (notification bodies built column by
column), ``tokens`` (the admin-issued tokens), ``ownership``
(ids ``<client>.<name>``), ``notification_log`` (per-client numbers on disk), ``fanout`` (per-connection
queues, frames), ``batches`` (request bodies as rows), ``metrics``, ``openapi``, ``background`` (a server in a thread
for tests and benchmarks), ``engine_streams`` (the engine's streams the server keeps running: ``--stream``),
``streams`` (a connection's WebSocket/SSE stream: catch-up, then live), ``workers`` and ``fanout_worker`` (the
multi-process server, ``--fanout-workers N``: the engine in one process, the connections in N sharing the port).
The engine is used through its public API only; no module here imports pyspark.

``create_app`` and ``serve`` are imported lazily, so ``sparksub token`` needs none of the server's packages.
"""
from __future__ import annotations

__all__ = ["create_app", "serve", "ServeConfig", "BackgroundServer"]


def __getattr__(name):
    if name == "create_app":
        from sparksub.serve.app import create_app
        return create_app
    if name == "serve":
        from sparksub.serve.server import serve
        return serve
    if name == "ServeConfig":
        from sparksub.serve.config import ServeConfig
        return ServeConfig
    if name == "BackgroundServer":
        from sparksub.serve.background import BackgroundServer
        return BackgroundServer
    raise AttributeError(f"module 'sparksub.serve' has no attribute {name!r}")
