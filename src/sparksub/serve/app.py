"""The subscription server's ASGI app: routes, authentication, validation, the engine gate and the live streams.

Concurrency: the Engine is synchronous and not thread-safe across calls, so every engine call runs in a
worker thread (``anyio.to_thread``) behind one capacity limiter of 1 -- the "one lock" -- and the event loop
stays free for sockets.  A publish numbers and commits its notifications (``notification_log.py``) and stages
them for the fan-out (``fanout.py``) from inside that worker, through ``anyio.from_thread``, before the next
engine call may start: the order in which clients are sent notifications is the order the engine produced them.
The handler flushes them to the connections' queues and writes its response before any sender runs.  The
streams themselves are ``streams.py``'s; a multi-process server (``workers.py``) runs them in fan-out
processes instead, which check each stream through ``app.state.stream_check``.

The engine's own streams (``sparksub serve --stream TABLE=DIR``) are ``engine_streams.py``'s: Spark runs each
micro-batch's ``foreachBatch`` in a thread of its own, which hands the output to this loop
(``route_stream_batch``) to be numbered and fanned out in the gate as a publish is.  They start in the
background at startup (or with their table's first subscription), restart after a subscription change that
asks for it (``changing``), and stop at shutdown, before the log closes.  EXPLAIN's ``svg`` is laid out by
Graphviz in a thread outside the gate (``rendered``).

Every refusal is a JSON ``{"error": ..., "where": ...}`` with a 4xx status and happens before anything
changes: authentication (401), role (403), size (413), content type (415), the request's own fields (400),
names the client does not own (404), the engine's checks (400/404/409).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import pyarrow as pa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from sparksub.errors import (AnalysisError, BadUpdate, DuplicateSubscription, ParseError, SparksubError,
                             UnknownSubscription)
from sparksub.serve.batches import BodyError, media_type, read_rows
from sparksub.serve.config import ServeConfig
from sparksub.serve.engine_streams import EngineStreams, StreamSource
from sparksub.serve.fanout import Hub
from sparksub.serve.metrics import CONTENT_TYPE, metrics_text, new_registry
from sparksub.serve.notification_log import NotificationLog
from sparksub.serve.openapi import openapi_document
from sparksub.serve.service import EXPLAIN_FORMATS, RequestError, SubscriptionService, svg_answer
from sparksub.serve.streams import StreamRefused, sse_response, websocket_stream
from sparksub.serve.tokens import Principal, TokenStore

__all__ = ["create_app", "STATIC"]

STATIC = Path(__file__).parent / "static"


class EngineGate:
    """One engine call at a time, each in a worker thread."""

    def __init__(self):
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, fn, *args, **kwargs):
        if self._limiter is None:   # made on the event loop (anyio needs one)
            self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self._limiter)


def _engine_error(err: SparksubError, where: str) -> RequestError:
    """An engine error as a refusal: its message (with its notes) and, when it knows, where in the text."""
    status = 409 if isinstance(err, DuplicateSubscription) else 404 if isinstance(err, UnknownSubscription) else 400
    line = getattr(err, "line", None)
    if isinstance(err, (ParseError, AnalysisError)) and line is not None:
        where = f"{where} line {line}, column {err.column}"
    elif isinstance(err, BadUpdate) and err.row is not None:
        where = f"{where} row {err.row}" + (f", column {err.column!r}" if err.column else "")
    return RequestError(status, "\n".join([str(err), *getattr(err, "__notes__", ())]), where)


def _error_response(err: RequestError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse({"error": str(err), "where": err.where}, status_code=err.status, headers=headers)


def endpoint(where: str):
    """A handler whose refusals (RequestError, BodyError, the engine's errors, ValueError) become 4xx JSON;
    ``where``: what the engine's errors are about (``sql``, ``body``...)."""
    def wrap(handler):
        @functools.wraps(handler)
        async def run(request: Request):
            try:
                return await handler(request)
            except RequestError as err:
                return _error_response(err)
            except BodyError as err:
                return _error_response(RequestError(err.status, str(err), err.where))
            except SparksubError as err:
                return _error_response(_engine_error(err, where))
            except ValueError as err:   # the engine's own argument checks (EXPLAIN format, mode)
                return _error_response(RequestError(400, str(err), where))
        return run
    return wrap


def create_app(engine, config: ServeConfig | None = None, streams=(), *,
               stream_trigger_seconds: float = 1.0) -> Starlette:
    """The server over ``engine`` (a durable one: ``Engine(path=...)``; its directory keeps the tokens,
    ``serve/tokens.json``, and the notification log, ``serve/notifications.sqlite``).  ``streams``: the
    engine's streams to keep running, ``StreamSource``s or ``"TABLE=DIR"`` texts (``engine_streams.py``:
    started with the server, or with their table's first subscription; their notifications routed as a
    publish's; stopped on shutdown)."""
    from sparksub import __version__
    config = config or ServeConfig()
    root = engine.directory.root
    tokens = TokenStore(root)
    sources = [s if isinstance(s, StreamSource) else StreamSource.parse(s) for s in streams or ()]
    gate = EngineGate()
    running: dict = {}   # "loop": the server's event loop, once it runs (the streams' micro-batches reach it)

    def route_stream_batch(table: str, output: pa.Table, batch_id: int, mark: str) -> dict:
        """A served stream's micro-batch output, from Spark's foreachBatch thread: routed on the server's loop,
        in the engine's gate, as a publish's; returns once its notifications and its routing ``mark`` are
        committed and handed over."""
        loop = running.get("loop")
        if loop is None:
            raise RuntimeError("the server's event loop is not running")
        return asyncio.run_coroutine_threadsafe(routed(service.stream_batch, table, output, batch_id, mark),
                                                loop).result()

    log = NotificationLog(root / "serve" / "notifications.sqlite", config.retention_seconds)
    engine_streams = EngineStreams(engine, sources, route_stream_batch, log.mark,
                                   trigger_seconds=stream_trigger_seconds) if sources else None
    if engine_streams is not None:
        engine_streams.check()   # a bad --stream fails here, before anything listens
    service = SubscriptionService(engine, log, config)
    # what a server killed between the engine's commit and the log's left unrouted (service.py), before
    # anything listens: the clients read it from the log when they reconnect
    service.route_kept()
    hub = Hub()
    registry, collector = new_registry(None)
    started = time.time()

    # ---- helpers --------------------------------------------------------------------------------------
    def authenticate(conn, allow_query_token: bool = False) -> Principal:
        header = conn.headers.get("authorization")
        token = None
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise RequestError(401, "the Authorization header must be 'Bearer <token>'", "header Authorization")
            token = value.strip()
        elif allow_query_token:
            token = conn.query_params.get("token")
        if not token:
            raise RequestError(401, "missing token: send 'Authorization: Bearer <token>' (a token comes from "
                                    "'sparksub token PATH --client NAME')",
                               "header Authorization" + (" or query parameter 'token'" if allow_query_token else ""))
        principal = tokens.verify(token)
        if principal is None:
            raise RequestError(401, "unknown or revoked token", "header Authorization")
        return principal

    async def read_body(request: Request) -> bytes:
        limit = config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise RequestError(400, f"Content-Length {declared!r} is not a number", "header Content-Length")
            if int(declared) > limit:
                raise RequestError(413, f"body of {int(declared)} bytes exceeds the limit of {limit} bytes",
                                   "body")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"body exceeds the limit of {limit} bytes", "body")
            chunks.append(chunk)
        return b"".join(chunks)

    async def json_body(request: Request) -> dict:
        if media_type(request.headers.get("content-type")) != "application/json":
            raise RequestError(415, "send a JSON object (Content-Type: application/json)", "header Content-Type")
        raw = await read_body(request)
        try:
            data = json.loads(raw)
        except ValueError as err:
            raise RequestError(400, f"not JSON: {err}", "body") from None
        if not isinstance(data, dict):
            raise RequestError(400, f"the body must be a JSON object, got {type(data).__name__}", "body")
        return data

    def query_choice(request: Request, name: str, choices: tuple, default: str) -> str:
        value = request.query_params.get(name, default)
        if value not in choices:
            raise RequestError(400, f"{name}={value!r}: expected one of {', '.join(choices)}", f"query parameter {name!r}")
        return value

    async def snapshot(runtime: bool) -> dict:
        """The server's numbers; ``runtime``: with ``engine.runtime_stats()``'s counters (/metrics; not the
        page's per-second /stats, as they walk every group)."""
        def numbers():
            out = {"subscriptions_per_class": service.subscriptions_per_class(),
                   "notifications_total": service.notifications_total,
                   "notifications_per_second": service.notification_rate(),
                   "messages_total": service.messages_total,
                   "unroutable_messages_total": service.unroutable_messages_total,
                   "published_rows_total": service.published_rows_total,
                   "publishes_total": service.publishes_total,
                   "last_publish_seconds": service.last_publish_seconds}
            if runtime:
                out["runtime"] = service.runtime_stats().get("runtime", {})
            return out
        out = await gate.run(numbers)
        if engine_streams is not None:
            out["streams"] = await anyio.to_thread.run_sync(engine_streams.status)
        out.update(connections=hub.connections(), connected_clients=hub.clients(), queue_depth_max=hub.queue_depth(),
                   dropped_slow=hub.dropped_slow, uptime_seconds=round(time.time() - started, 1))
        return out

    async def routed(produce, *args) -> dict:
        """``produce(*args)`` -- a PublishResult: a publish, a served stream's micro-batch -- in the gate, its
        notifications staged in the engine's order there, then flushed to the connections; its summary."""
        def work():
            result = produce(*args)
            if result.numbered:   # still inside the gate: staged in the engine's order
                anyio.from_thread.run_sync(hub.stage, result.numbered)
            return result.summary
        summary = await gate.run(work)
        hub.flush()   # schedules the senders; the caller's response is written before any of them runs (fanout.py)
        return summary

    async def changing(fn, *args):
        """A subscription change in the gate; the served streams it asks to start or restart (a table's first
        subscription, a group the running stream cannot host: ``engine_streams.py``) are, after it."""
        if engine_streams is None:
            return await gate.run(fn, *args)
        answer = await gate.run(engine_streams.watching, fn, *args)
        await follow_streams()
        return answer

    async def follow_streams():
        if engine_streams is not None and engine_streams.restart_pending():
            await anyio.to_thread.run_sync(engine_streams.stop_for_restart)   # outside the gate: see EngineStreams
            await gate.run(engine_streams.start_ready)

    async def rendered(answer: dict) -> dict:
        """An EXPLAIN answered in format 'svg' (the DOT) laid out by Graphviz in a worker thread of its own --
        not the engine's gate: a slow layout holds up no engine call."""
        if isinstance(answer, dict) and answer.get("format") == "svg" and "explain" in answer:
            return await anyio.to_thread.run_sync(svg_answer, answer)
        return answer

    # ---- plain endpoints --------------------------------------------------------------------------------
    async def health(request: Request):
        out = {"status": "ok", "uptime_seconds": round(time.time() - started, 1), "connections": hub.connections()}
        if engine_streams is not None:   # (asks Spark whether each query is active: not on the loop)
            out["streams"] = await anyio.to_thread.run_sync(engine_streams.status)
            if any(s["state"] == "failed" for s in out["streams"]):
                out["status"] = "degraded"
        return JSONResponse(out)

    @endpoint("metrics")
    async def metrics(request: Request):
        authenticate(request)
        return Response(metrics_text(registry, collector, await snapshot(runtime=True)), media_type=CONTENT_TYPE)

    @endpoint("stats")
    async def stats(request: Request):
        authenticate(request, allow_query_token=True)
        return JSONResponse(await snapshot(runtime=False))

    async def openapi(request: Request):
        return JSONResponse(openapi_document(__version__))

    async def page(request: Request):
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @endpoint("token")
    async def me(request: Request):
        who = authenticate(request, allow_query_token=True)
        return JSONResponse({"client": who.client, "role": who.role, "last_seq": log.last_seq(who.client),
                             "subscriptions": service.owners.count(who.client)})

    # ---- statements and subscriptions -----------------------------------------------------------------------
    @endpoint("sql")
    async def statements(request: Request):
        who = authenticate(request)
        kind = media_type(request.headers.get("content-type"))
        if kind == "text/plain":
            sql, fmt = (await read_body(request)).decode("utf-8", errors="replace"), "text"
        elif kind == "application/json":
            data = await json_body(request)
            sql, fmt = data.get("sql"), data.get("format", "text")
            if not isinstance(sql, str):
                raise RequestError(400, "'sql' must be the statement's text", "body field 'sql'")
        else:
            raise RequestError(415, f"unsupported content type {kind or '(none)'!r}: send application/json "
                                    f"({{\"sql\": ...}}) or text/plain", "header Content-Type")
        return JSONResponse(await rendered(await changing(service.statement, who, sql, fmt)))

    @endpoint("sql")
    async def subscriptions(request: Request):
        who = authenticate(request, allow_query_token=True)
        if request.method == "GET":
            return JSONResponse({"rows": await gate.run(service.subscriptions, who)})
        data = await json_body(request)
        return JSONResponse(await changing(service.create_subscription, who, data.get("id"), data.get("sql")))

    @endpoint("body")
    async def bulk(request: Request):
        who = authenticate(request)
        template = request.query_params.get("template")
        body = await read_body(request)
        rows = read_rows(body, request.headers.get("content-type"), {"id": pa.string()})
        return JSONResponse(await changing(service.subscribe_many, who, template, rows))

    @endpoint("subscription name")
    async def drop(request: Request):
        who = authenticate(request)
        return JSONResponse(await gate.run(service.drop, who, request.path_params["name"]))

    @endpoint("subscription name")
    async def explain(request: Request):
        who = authenticate(request, allow_query_token=True)
        fmt = query_choice(request, "format", EXPLAIN_FORMATS, "text")
        return JSONResponse(await rendered(await gate.run(service.explain, who, request.path_params["name"], fmt)))

    @endpoint("groups")
    async def groups(request: Request):
        who = authenticate(request, allow_query_token=True)
        return JSONResponse({"rows": await gate.run(service.groups, who)})

    @endpoint("tables")
    async def tables(request: Request):
        authenticate(request, allow_query_token=True)
        return JSONResponse({"rows": await gate.run(service.tables)})

    # ---- publishing -------------------------------------------------------------------------------------------
    @endpoint("body")
    async def publish(request: Request):
        who = authenticate(request)
        if not who.allowed("publisher"):
            raise RequestError(403, "publishing needs a publisher or admin token", "header Authorization")
        table = request.path_params["name"]
        mode = query_choice(request, "mode", ("unicast", "reformulated"), "unicast")
        batch_id = request.query_params.get("batch_id")
        variants = request.query_params.getlist("variant")
        variant = None if not variants else variants[0] if len(variants) == 1 else variants
        if variant is not None and mode != "reformulated":
            raise RequestError(400, "a variant goes with mode=reformulated", "query parameter 'variant'")
        types = await gate.run(service.column_types, table)   # 404 for an unknown table, before the body
        if engine_streams is not None and table.lower() in engine_streams.streams:
            source = engine_streams.streams[table.lower()].source
            raise RequestError(409, f"table {table!r} is fed by the server's stream from {source.directory} "
                                    f"(--stream): add a file there (a publish would change the engine's rows, "
                                    f"not the stream's)", "path table")
        rows = read_rows(await read_body(request), request.headers.get("content-type"), types)
        return JSONResponse(await routed(service.publish, who, table, rows, mode, batch_id, variant))

    # ---- live streams ---------------------------------------------------------------------------------------
    async def stream_request(conn, sse: bool) -> tuple[Principal, int, set | None]:
        """Who, after which number, which subscriptions: the checked parameters of a stream."""
        who = authenticate(conn, allow_query_token=True)
        raw = conn.headers.get("last-event-id") if sse else None
        where = "header Last-Event-ID"
        if raw is None:
            raw, where = conn.query_params.get("after"), "query parameter 'after'"
        last = log.last_seq(who.client)
        if raw is None or raw == "":
            after = last
        else:
            if not raw.isdigit():
                raise RequestError(400, f"after={raw!r}: a client_seq is a non-negative integer", where)
            after = int(raw)
            if after > last:
                raise RequestError(400, f"after={after} is beyond your last notification ({last})", where)
        names = [n for v in conn.query_params.getlist("subscription") for n in v.split(",") if n]
        subs = None
        if names:
            for n in names:
                service.owned(who, n, "query parameter 'subscription'")
            subs = set(names)
        return who, after, subs

    async def checked(conn, sse: bool):
        try:
            who, after, subs = await stream_request(conn, sse)
        except RequestError as err:
            raise StreamRefused(err.status, str(err), err.where) from None
        return who.client, after, subs

    async def events(request: Request):
        return await sse_response(request, hub, log, config, lambda r: checked(r, True))

    async def websocket(ws: WebSocket):
        await websocket_stream(ws, hub, log, config, lambda w: checked(w, False))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        running["loop"] = asyncio.get_running_loop()
        starting = None
        if engine_streams is not None:   # in the background: the server listens meanwhile (/health shows them)
            starting = asyncio.create_task(gate.run(engine_streams.start_ready))
        try:
            yield
        finally:
            if starting is not None:
                with contextlib.suppress(Exception):
                    await starting
                await anyio.to_thread.run_sync(engine_streams.stop)   # a running micro-batch is routed first
            log.close()

    routes = [
        Route("/", page), Route("/ui", page),
        Route("/health", health), Route("/metrics", metrics), Route("/stats", stats),
        Route("/openapi.json", openapi), Route("/me", me),
        Route("/statements", statements, methods=["POST"]),
        Route("/subscriptions", subscriptions, methods=["GET", "POST"]),
        Route("/subscriptions/bulk", bulk, methods=["POST"]),
        Route("/subscriptions/{name}", drop, methods=["DELETE"]),
        Route("/subscriptions/{name}/explain", explain),
        Route("/groups", groups), Route("/tables", tables),
        Route("/tables/{name}/publish", publish, methods=["POST"]),
        Route("/events", events),
        WebSocketRoute("/ws", websocket),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = service
    app.state.hub = hub
    app.state.log = log
    app.state.config = config
    app.state.engine_streams = engine_streams
    #: the stream check, for the fan-out processes of a multi-process server (``workers.py``)
    app.state.stream_check = checked
    return app

