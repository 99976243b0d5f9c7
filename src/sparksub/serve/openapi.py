"""The server's OpenAPI 3.1 description (``GET /openapi.json``), kept by hand beside the routes: Starlette's
``SchemaGenerator`` only reads YAML out of docstrings, which would scatter the schema over ``app.py`` and say
nothing about bodies, streams or errors; one dict is easier to read and to check against the routes
(``tests/test_serve.py`` checks that every route is described).
"""
from __future__ import annotations

__all__ = ["openapi_document"]

_ERROR = {"description": "refused: nothing changed",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_ERRORS = {"400": _ERROR, "401": _ERROR, "403": _ERROR, "404": _ERROR, "409": _ERROR, "413": _ERROR, "415": _ERROR}
_JSON = {"content": {"application/json": {"schema": {"type": "object"}}}}
_BATCH_TYPES = {t: {"schema": {"type": "string"}} for t in (
    "application/x-ndjson", "application/json", "text/csv", "application/vnd.apache.arrow.stream",
    "application/vnd.apache.arrow.file")}


def _op(summary: str, *, body=None, params=(), ok=None, auth=True) -> dict:
    out = {"summary": summary, "responses": {"200": ok or {"description": "OK", **_JSON}, **(_ERRORS if auth else {})}}
    if params:
        out["parameters"] = list(params)
    if body is not None:
        out["requestBody"] = {"required": True, "content": body}
    if not auth:
        out["security"] = []
    return out


def _svg_errors(op: dict) -> dict:
    """format=svg's own refusals: the server has no Graphviz (501), Graphviz failed or took too long (500)."""
    op["responses"]["501"] = {**_ERROR, "description": "format=svg: the server has no Graphviz 'dot'"}
    op["responses"]["500"] = {**_ERROR, "description": "format=svg: Graphviz failed or took too long"}
    return op


def _q(name: str, description: str, schema=None, required=False, where="query") -> dict:
    return {"name": name, "in": where, "required": required, "description": description,
            "schema": schema or {"type": "string"}}


_NAME = _q("name", "your subscription's or event query's name", required=True, where="path")
_AFTER = _q("after", "the last client_seq you received: the stream resumes after it (default: now)",
            {"type": "integer", "minimum": 0})
_SUBS = _q("subscription", "only these subscriptions of yours (repeatable; default: all of yours)")
_TOKEN = _q("token", "the bearer token, for clients that cannot set headers (browsers' EventSource, WebSocket)")


def openapi_document(version: str) -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "sparksub subscription server", "version": version,
                 "description": "Remote subscribers submit, drop and EXPLAIN subscriptions and event queries, "
                                "publishers publish batches, and every client receives its own notifications "
                                "live (WebSocket /ws, Server-Sent Events /events), numbered per client so that "
                                "a reconnect with the last number misses nothing and repeats nothing."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "issued by `sparksub token PATH --client NAME`"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error", "where"],
                          "properties": {"error": {"type": "string", "description": "what is wrong"},
                                         "where": {"type": "string", "description": "the part of the request"}}},
                "Notification": {
                    "type": "object", "required": ["type", "client_seq", "data"],
                    "properties": {"type": {"const": "notification"},
                                   "client_seq": {"type": "integer", "description": "this client's sequence"},
                                   "data": {"type": "object", "description": "the engine's unicast row: "
                                            "subscription_id (your name), op, value, seq, group_id and the "
                                            "class's columns that hold a value"}}},
                "NotificationFrame": {
                    "type": "object", "required": ["type", "last_seq", "notifications"],
                    "description": "one WebSocket frame: the notifications the server had for this connection at "
                                   "once (at most ~256 KiB of them), oldest first",
                    "properties": {"type": {"const": "notifications"},
                                   "last_seq": {"type": "integer", "description": "the last element's client_seq"},
                                   "notifications": {"type": "array", "items": {
                                       "type": "object", "required": ["client_seq", "data"],
                                       "properties": {"client_seq": {"type": "integer"},
                                                      "data": {"type": "object", "description": "as in "
                                                               "Notification"}}}}}},
            }},
        "security": [{"bearer": []}],
        "paths": {
            "/health": {"get": _op("liveness: the engine answers; with `--stream`, each served stream's state, "
                                   "micro-batches, notifications and rejected rows (status 'degraded' when one "
                                   "failed)", auth=False)},
            "/metrics": {"get": _op("Prometheus text: subscriptions per class, notifications/s, lag, rebuilds, "
                                    "connected clients", ok={"description": "OK", "content": {"text/plain": {}}})},
            "/stats": {"get": _op("the same numbers as JSON (the web page polls it)")},
            "/openapi.json": {"get": _op("this document", auth=False)},
            "/": {"get": _op("the web page", auth=False, ok={"description": "HTML", "content": {"text/html": {}}})},
            "/ui": {"get": _op("the web page", auth=False, ok={"description": "HTML", "content": {"text/html": {}}})},
            "/me": {"get": _op("who the token is: client, role, last client_seq, subscriptions held")},
            "/statements": {"post": _op(
                "run one statement: CREATE/DROP SUBSCRIPTION, CREATE/DROP EVENT QUERY, SHOW SUBSCRIPTIONS [GROUPS], "
                "EXPLAIN SUBSCRIPTION (format text, or dot / svg for event queries); CREATE TABLE with an admin token",
                body={"application/json": {"schema": {"type": "object", "required": ["sql"], "properties": {
                    "sql": {"type": "string"}, "format": {"enum": ["text", "dot", "svg"]}}}},
                    "text/plain": {"schema": {"type": "string"}}})},
            "/subscriptions": {
                "get": _op("SHOW SUBSCRIPTIONS: yours"),
                "post": _op("CREATE SUBSCRIPTION id AS sql", body={"application/json": {"schema": {
                    "type": "object", "required": ["id", "sql"],
                    "properties": {"id": {"type": "string"}, "sql": {"type": "string"}}}}})},
            "/subscriptions/bulk": {"post": _op(
                "register one subscription per row of a parameter table (an id column and one column per "
                ":parameter of the template)", body=_BATCH_TYPES,
                params=[_q("template", "the SELECT with :parameters", required=True)])},
            "/subscriptions/{name}": {"delete": _op("DROP SUBSCRIPTION / DROP EVENT QUERY", params=[_NAME])},
            "/subscriptions/{name}/explain": {"get": _svg_errors(_op(
                "EXPLAIN SUBSCRIPTION: {name, format, explain} -- the text, the DOT or the SVG document",
                params=[_NAME, _q("format", "text; for an event query's automata dot (Graphviz DOT) or svg (laid "
                                            "out by Graphviz's dot on the server)", {"enum": ["text", "dot", "svg"]})]))},
            "/groups": {"get": _op("SHOW SUBSCRIPTION GROUPS (a client: its own subscriptions per group)")},
            "/tables": {"get": _op("the declared tables and their columns")},
            "/tables/{name}/publish": {"post": _op(
                "publish a batch (publisher or admin token); the notifications go to their owners' streams "
                "(409 for a table a served stream feeds: `--stream`)",
                body=_BATCH_TYPES, params=[
                    _q("name", "the table", required=True, where="path"),
                    _q("mode", "unicast, or reformulated (messages matched to subscribers at the edge)",
                       {"enum": ["unicast", "reformulated"]}),
                    _q("batch_id", "makes the publish idempotent: a committed batch is not applied again"),
                    _q("variant", "with mode=reformulated: the variant per family, e.g. S-CN, Paint-Sparse "
                                  "(repeatable)")])},
            "/events": {"get": _op("Server-Sent Events: your notifications (event 'notification', id = client_seq; "
                                   "Last-Event-ID resumes), 'gap' when rows passed the retention window, "
                                   "'dropped' when the stream was too slow", params=[_AFTER, _SUBS, _TOKEN],
                                   ok={"description": "a stream", "content": {"text/event-stream": {}}})},
            "/ws": {"get": _op("WebSocket: the same stream as JSON text frames ({type: hello|notifications|gap|"
                               "error}; liveness by WebSocket pings); a 'notifications' frame (NotificationFrame) holds every "
                               "notification queued for the connection when it was sent, in client_seq order, "
                               "its last_seq the number to reconnect with; closed with code 4008 when too slow "
                               "(reconnect with after=N)",
                               params=[_AFTER, _SUBS, _TOKEN], ok={"description": "101 Switching Protocols"})},
        },
    }
