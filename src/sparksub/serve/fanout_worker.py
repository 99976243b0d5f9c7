"""One fan-out process of a multi-process server (``workers.py`` starts them): a share of the live streams.

It listens on the server's public port beside its siblings (``SO_REUSEPORT``: the kernel spreads new
connections over the processes) and serves ``/ws`` and ``/events`` itself, with ``streams.py``'s code and a
Hub of its own; every other request is passed on unchanged to the engine's process over its Unix socket
(httpx), so a client sees one server on one port.

Where the notifications come from: the notification log on disk (``notification_log.py``), the same file
the engine's process commits to, opened as a reader.  A tailer reads the commits after the last one it
handed out (``commits_after``: one SELECT, whole commits, in order) whenever the engine's process wakes it --
a datagram on this process's wake socket after each commit -- or every ``TAIL_BACKSTOP_S`` seconds, and
dispatches the notes of the clients connected here to their queues.  A stream registers its connection,
then reads the log, then sends its queue, skipping numbers already sent: a commit the tailer handed out
before the registration was committed before it, so the read holds it; one handed out after reaches the
queue.  So the catch-up protocol of ``fanout.py`` holds as in one process, and a client that reconnects to
another process with its last number misses nothing and gets nothing twice.

Why the log and not a pipe from the engine: the log is written and committed anyway (a reconnect needs
it), the engine's process pays nothing per fan-out process but a datagram, a slow or restarted fan-out
process catches up by itself, and nothing is sent to a process for clients it does not hold (it reads the
chunks of its own clients only -- a page-cache read; the per-connection framing and writes, the cost that
bounded one process, are what is spread).

Its counters (connections, clients, the deepest queue, streams dropped as slow) go to its slot of a small
shared file the engine's process reads for /health, /stats and /metrics.  It exits when its stdin closes
(the engine's process holds the other end: it ends with it).  No pyspark, no engine.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import mmap
import os
import socket
import struct
import sys
import threading
from pathlib import Path

import anyio.to_thread
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute

from sparksub.serve.config import ServeConfig
from sparksub.serve.fanout import Hub
from sparksub.serve.notification_log import NotificationLog
from sparksub.serve.streams import StreamRefused, sse_response, websocket_stream

__all__ = ["STREAM_CHECK_PATH", "STATS_SLOT", "TAIL_BACKSTOP_S", "worker_app", "main"]

#: the engine's process answers a fan-out process's stream check here (on its Unix socket only)
STREAM_CHECK_PATH = "/_internal/stream-check"
#: one process's counters in the shared file: connections, clients, deepest queue, dropped as slow
STATS_SLOT = struct.Struct("<4q")
#: seconds between log reads when no wake-up came (a lost datagram costs at most this)
TAIL_BACKSTOP_S = 1.0
#: seconds between updates of this process's counters in the shared file
STATS_EVERY_S = 0.25
#: headers that describe one hop, not the message (RFC 9110 7.6.1): not passed on
_HOP_HEADERS = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                "transfer-encoding", "upgrade", "host"}
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def worker_app(log: NotificationLog, config: ServeConfig, engine_uds: str, wake: socket.socket,
               stats: mmap.mmap | None = None, slot: int = 0) -> Starlette:
    """The ASGI app of one fan-out process: the streams here, the rest passed on to ``engine_uds``."""
    hub = Hub()
    engine = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=engine_uds), base_url="http://engine",
                               timeout=httpx.Timeout(None))

    async def check(conn, sse: bool):
        headers = {}
        if conn.headers.get("authorization") is not None:
            headers["authorization"] = conn.headers["authorization"]
        if sse and conn.headers.get("last-event-id") is not None:
            headers["last-event-id"] = conn.headers["last-event-id"]
        query = conn.scope.get("query_string", b"").decode("latin-1")
        answer = await engine.get(STREAM_CHECK_PATH + (f"?{query}" if query else ""), headers=headers)
        body = answer.json()
        if answer.status_code != 200:
            raise StreamRefused(answer.status_code, body.get("error", "refused"), body.get("where", ""))
        subs = body["subscriptions"]
        return body["client"], body["after"], set(subs) if subs is not None else None

    async def events(request):
        return await sse_response(request, hub, log, config, lambda r: check(r, True))

    async def websocket(ws):
        await websocket_stream(ws, hub, log, config, lambda w: check(w, False))

    async def passed_on(request):
        if request.url.path.startswith("/_internal/"):
            return JSONResponse({"error": "not found", "where": "path"}, status_code=404)
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in _HOP_HEADERS]
        query = request.scope.get("query_string", b"").decode("latin-1")
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        outgoing = engine.build_request(request.method, request.url.path + (f"?{query}" if query else ""),
                                        headers=headers, content=request.stream() if has_body else None)
        answer = await engine.send(outgoing, stream=True)
        back = {k: v for k, v in answer.headers.multi_items() if k.lower() not in _HOP_HEADERS}
        return StreamingResponse(answer.aiter_raw(), status_code=answer.status_code, headers=back,
                                 background=BackgroundTask(answer.aclose))

    async def tail():
        """Hand the commits after the last one handed out to this process's connections, at each wake-up."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def on_wake():
            with contextlib.suppress(BlockingIOError, OSError):
                while wake.recv(64):
                    pass
            woken.set()

        loop.add_reader(wake.fileno(), on_wake)
        cursor = await anyio.to_thread.run_sync(log.committed)
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(woken.wait(), TAIL_BACKSTOP_S)
                woken.clear()
                latest = await anyio.to_thread.run_sync(log.committed)
                if not hub.local_counts()["connections"]:
                    # nobody to hand to: a stream that registers from now on reads commits up to ``latest``
                    # (read before this check) from the log
                    cursor = latest
                    continue
                if latest == cursor:
                    continue
                # only the chunks of the clients connected here now, of the commits up to ``latest``: those
                # were committed before this snapshot, so a client that connects after it finds them in the
                # log (its read follows its registration) -- and no process reads every client's chunks
                here = hub.client_names()
                cursor, chunks = await anyio.to_thread.run_sync(log.commits_after, cursor, latest, here)
                hub.dispatch({c: NotificationLog.expand(ch) for c, ch in chunks.items()})
        finally:
            loop.remove_reader(wake.fileno())

    async def counters():
        while stats is not None:
            c = hub.local_counts()
            STATS_SLOT.pack_into(stats, slot * STATS_SLOT.size, c["connections"], c["clients"], c["queue_depth"],
                                 c["dropped_slow"])
            await asyncio.sleep(STATS_EVERY_S)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        tasks = [asyncio.create_task(tail()), asyncio.create_task(counters())]
        yield
        for t in tasks:
            t.cancel()
        await engine.aclose()
        log.close()

    app = Starlette(routes=[WebSocketRoute("/ws", websocket), Route("/events", events),
                            Route("/{path:path}", passed_on, methods=_METHODS)], lifespan=lifespan)
    app.state.hub = hub
    return app


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="a fan-out process of 'sparksub serve' (started by the server)")
    p.add_argument("--slot", type=int, required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--engine-uds", required=True)
    p.add_argument("--log-file", required=True)
    p.add_argument("--wake", required=True)
    p.add_argument("--stats", required=True)
    p.add_argument("--config", required=True, help="ServeConfig's fields as JSON")
    p.add_argument("--log-level", default="warning")
    a = p.parse_args(argv)
    config = ServeConfig(**json.loads(a.config))
    log = NotificationLog(Path(a.log_file), config.retention_seconds, reader=True)
    wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    wake.bind(a.wake)
    wake.setblocking(False)
    with open(a.stats, "r+b") as f:
        stats = mmap.mmap(f.fileno(), 0)
    listener = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)   # the siblings share the port
    listener.bind((a.host, a.port))
    server = uvicorn.Server(uvicorn.Config(worker_app(log, config, a.engine_uds, wake, stats, a.slot),
                                           log_level=a.log_level, lifespan="on", timeout_graceful_shutdown=2,
                                           ws_ping_interval=config.ws_ping_seconds,
                                           ws_ping_timeout=config.ws_ping_timeout_seconds,
                                           timeout_keep_alive=config.keep_alive_seconds))

    def watch_parent():   # stdin closes when the engine's process ends or stops this one
        for line in sys.stdin:
            if line.strip() == "quit":
                break
        server.should_exit = True

    def say_ready():
        while not server.started and not server.should_exit:
            threading.Event().wait(0.02)
        print(f"ready {os.getpid()}", flush=True)

    threading.Thread(target=watch_parent, daemon=True).start()
    threading.Thread(target=say_ready, daemon=True).start()
    server.run(sockets=[listener])
    return 0


if __name__ == "__main__":
    sys.exit(main())
