"""The live notification streams (WebSocket ``/ws``, Server-Sent Events ``/events``) of one process: what the
engine's app (``app.py``) and each fan-out process of a multi-process server (``workers.py``) run alike.

A stream is checked first -- who (the token), after which number, which subscriptions -- by ``check``, which
the caller supplies: the engine's app checks in-process (its tokens, its notification log's numbers, its
owners); a fan-out process asks the engine's process (it holds the owners), over the local socket.  Then
the stream follows the notification log: the backlog after the number from disk, then the live notes the
process's Hub hands its queue (``fanout.py``: the catch-up protocol that loses and repeats nothing).

No pyspark, no engine: a fan-out process imports this with the log and the Hub only.
"""
from __future__ import annotations

import asyncio
import contextlib
import json

import anyio.to_thread
from starlette.responses import JSONResponse, StreamingResponse
from starlette.websockets import WebSocketDisconnect

from sparksub.serve.fanout import Connection, frames, sse_events, wire_batch

__all__ = ["StreamRefused", "follow", "websocket_stream", "sse_response", "refusal_response", "CLOSE_CODES",
           "CLOSE_SLOW"]

#: WebSocket close codes (4000-4999: the application's own)
CLOSE_CODES = {400: 4400, 401: 4401, 403: 4403, 404: 4404, 409: 4409, 413: 4413, 415: 4415}
CLOSE_SLOW = 4008


class StreamRefused(Exception):
    """A stream request refused by its check: HTTP ``status``, the message and ``where`` (the part at fault)."""

    def __init__(self, status: int, message: str, where: str):
        super().__init__(message)
        self.status, self.where = status, where


def refusal_response(err: StreamRefused) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse({"error": str(err), "where": err.where}, status_code=err.status, headers=headers)


async def follow(conn: Connection, after: int, heartbeat: float | None, log, page_rows: int):
    """The stream of one connection: ("gap", info), ("notes", [(seq, subscription, body), ...]) -- what
    there is to send at once, in order --, ("heartbeat",) after ``heartbeat`` idle seconds (None: never),
    ("dropped", reason).  ``conn.last_sent`` is the last number yielded (the caller sends a "notes" item
    before it asks for the next).  The connection is in its Hub already: what is committed after the log
    is read reaches its queue."""
    conn.last_sent = after
    last = await anyio.to_thread.run_sync(log.last_seq, conn.client)
    if after < last:
        first = await anyio.to_thread.run_sync(log.first_kept, conn.client)
        if first is None or first > after + 1:
            lost_to = last if first is None else first - 1
            yield ("gap", {"type": "gap", "from": after + 1, "to": lost_to,
                           "reason": "older than the retention window"})
            conn.last_sent = lost_to
    while True:   # the backlog from disk, page by page
        rows = await anyio.to_thread.run_sync(log.read, conn.client, conn.last_sent, conn.subscriptions, page_rows)
        if rows:
            conn.last_sent = rows[-1][0]
            yield ("notes", rows)
        if len(rows) < page_rows:
            break
    while True:   # then live, from the queue (numbers already sent are skipped: Connection.take)
        if conn.dropped is not None:
            yield ("dropped", conn.dropped)
            return
        if heartbeat is None:
            await conn.ready.wait()
        else:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(conn.ready.wait(), heartbeat)
        if conn.dropped is not None:
            continue
        notes = conn.take()
        if not notes:
            if heartbeat is not None:
                yield ("heartbeat",)
            continue
        conn.last_sent = notes[-1][0]
        yield ("notes", notes)


def _hello(client: str, after: int, last_seq: int) -> str:
    return json.dumps({"type": "hello", "client": client, "after": after, "last_seq": last_seq})


async def websocket_stream(ws, hub, log, config, check) -> None:
    """Serve one WebSocket stream.  ``check(ws)`` -> ``(client, after, subscriptions or None)`` or raises
    StreamRefused, which is sent as an error message and a close code (``CLOSE_CODES``)."""
    await ws.accept()
    try:
        client, after, subs = await check(ws)
    except StreamRefused as err:
        await ws.send_text(json.dumps({"type": "error", "status": err.status, "error": str(err), "where": err.where}))
        await ws.close(code=CLOSE_CODES.get(err.status, 4400), reason=str(err)[:120])
        return
    conn = Connection(client, subs, config.queue_limit, "ws")
    hub.add(conn)

    async def receive():   # the client sends nothing we need; this notices it leaving
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            while True:
                await ws.receive_text()
        conn.closed_by_client = True
        conn.dropped = conn.dropped or "closed by the client"
        conn.ready.set()

    listener = asyncio.create_task(receive())
    try:
        await ws.send_text(_hello(client, after, await anyio.to_thread.run_sync(log.last_seq, client)))
        # no heartbeat frames: uvicorn's WebSocket pings (every ws_ping_seconds, closed without a pong) keep the
        # connection alive and find dead peers, and the receive task wakes the stream when the client
        # leaves.  A heartbeat per idle connection every 15 s (its timer armed and cancelled at every
        # wake-up) was most of the event loop's work with 10,000 connections (bench/serving.py's profile)
        async for item in follow(conn, after, None, log, config.backlog_page_rows):
            if item[0] == "notes":
                for run in frames(item[1], config.ws_frame_bytes):
                    await ws.send_text(wire_batch(run))
            elif item[0] == "gap":
                await ws.send_text(json.dumps(item[1]))
            elif item[0] == "dropped":
                if not conn.closed_by_client:
                    await ws.close(code=CLOSE_SLOW, reason=f"slow consumer; reconnect with after={conn.last_sent}")
                return
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        hub.remove(conn)
        listener.cancel()


def _sse(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"


async def sse_response(request, hub, log, config, check):
    """Serve one SSE stream (``check(request)`` as for ``websocket_stream``; a refusal is a 4xx JSON answer)."""
    try:
        client, after, subs = await check(request)
    except StreamRefused as err:
        return refusal_response(err)

    async def stream():
        conn = Connection(client, subs, config.queue_limit, "sse")
        hub.add(conn)
        try:
            yield _sse("hello", _hello(client, after, await anyio.to_thread.run_sync(log.last_seq, client)))
            # SSE has no ping of its own: a comment line keeps proxies from closing an idle stream
            async for item in follow(conn, after, config.heartbeat_seconds, log, config.backlog_page_rows):
                if item[0] == "notes":
                    yield sse_events(item[1])
                elif item[0] == "gap":
                    yield _sse("gap", json.dumps(item[1]))
                elif item[0] == "heartbeat":
                    yield ": heartbeat\n\n"
                else:
                    yield _sse("dropped", json.dumps({"type": "dropped", "reason": item[1],
                                                      "last_sent": conn.last_sent}))
                    return
        finally:
            hub.remove(conn)
    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
