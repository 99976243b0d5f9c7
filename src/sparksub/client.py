"""The Python client of the subscription server (``sparksub serve``; DESIGN §9).

    from sparksub.client import connect
    c = connect("http://127.0.0.1:8765", token)
    c.sql("CREATE SUBSCRIPTION cheap AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60")
    for note in c.subscribe("SELECT MAX(per) FROM stock WHERE risk > 50", id="dear"):
        print(note)            # the engine's unicast row, subscription_id = your name, + client_seq
    c.drop("dear"); print(c.explain("cheap")); c.publish("stock", rows)   # publishing: a publisher token

Plain request/response over ``httpx`` (a well-kept HTTP client with timeouts and connection reuse), the live
stream over ``websockets``' synchronous client (no event loop for the caller to run).  A stream remembers
the last ``client_seq`` it yielded and, when the connection drops -- the server restarted, the network
hiccupped, the server dropped it as too slow -- reconnects with ``after=<that number>``: the server's
notification log sends what was missed, so the iterator yields every notification once, in order.  A
refusal by the server is a :class:`ServerError` with its status, message and where.
"""
from __future__ import annotations

import io
import json
import threading
import time
import uuid
from urllib.parse import urlencode

import httpx

__all__ = ["connect", "Client", "NotificationStream", "ServerError"]


class ServerError(Exception):
    """The server refused a request: ``status`` (HTTP, or the WebSocket close code), ``error``, ``where``."""

    def __init__(self, status: int, error: str, where: str | None = None):
        super().__init__(f"{status}: {error}" + (f" (at {where})" if where else ""))
        self.status, self.error, self.where = status, error, where


def connect(url: str, token: str, timeout: float = 120.0) -> "Client":
    """A client of the server at ``url`` (``http://host:port``) with ``token``."""
    return Client(url, token, timeout)


class Client:
    """One client identity on one server.  ``sql``, ``subscribe``, ``drop``, ``explain``, ``publish``."""

    def __init__(self, url: str, token: str, timeout: float = 120.0):
        self.url = url.rstrip("/")
        self.token = token
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    # ---- plumbing ---------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, **kwargs) -> dict:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                body = response.json()
                raise ServerError(response.status_code, body.get("error", response.text), body.get("where"))
            except ValueError:
                raise ServerError(response.status_code, response.text) from None
        return response.json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- statements --------------------------------------------------------------------------------------
    def sql(self, text: str, format: str = "text"):
        """Run one statement: the server's answer -- the rows of SHOW, the text of EXPLAIN, else the
        statement's summary (``name``, ``after``: the client_seq before the new subscription's first)."""
        answer = self._call("POST", "/statements", json={"sql": text, "format": format})
        if "rows" in answer:
            return answer["rows"]
        if "explain" in answer:
            return answer["explain"]
        return answer

    def create(self, sql: str, id: str | None = None) -> dict:
        """``CREATE SUBSCRIPTION id AS sql`` (a fresh id when None); the server's summary."""
        return self._call("POST", "/subscriptions", json={"id": id or f"s_{uuid.uuid4().hex[:12]}", "sql": sql})

    def subscribe(self, sql: str, id: str | None = None, *, idle_timeout: float | None = None) -> "NotificationStream":
        """Register a subscription and iterate its notifications (dicts: the engine's unicast row with
        ``subscription_id`` your name, plus ``client_seq``), from its first on.  ``idle_timeout``: stop
        iterating after that many seconds without a message (None: never).  ``.close()`` ends it; the
        subscription stays until ``drop``."""
        created = self.create(sql, id)
        return NotificationStream(self, after=created["after"], subscriptions=[created["name"]],
                                  idle_timeout=idle_timeout, name=created["name"])

    def subscribe_many(self, template: str, params) -> dict:
        """One subscription per row of ``params`` (an ``id`` column and one column per :parameter): a dict of
        columns, a pandas DataFrame or an Arrow table, sent as Arrow IPC."""
        import pyarrow as pa
        table = params if isinstance(params, pa.Table) else (
            pa.Table.from_pandas(params, preserve_index=False) if type(params).__module__.startswith("pandas")
            else pa.table(params))
        return self._call("POST", "/subscriptions/bulk", params={"template": template}, content=_arrow_bytes(table),
                          headers={"Content-Type": "application/vnd.apache.arrow.stream"})

    def notifications(self, after: int | None = None, subscriptions=None,
                      idle_timeout: float | None = None) -> "NotificationStream":
        """Iterate this client's notifications (``subscriptions``: only these names) after ``after``
        (None: from now)."""
        return NotificationStream(self, after=after, subscriptions=subscriptions, idle_timeout=idle_timeout)

    def drop(self, id: str) -> dict:
        return self._call("DELETE", f"/subscriptions/{id}")

    def explain(self, id: str, format: str = "text") -> str:
        return self._call("GET", f"/subscriptions/{id}/explain", params={"format": format})["explain"]

    def subscriptions(self) -> list[dict]:
        return self._call("GET", "/subscriptions")["rows"]

    def groups(self) -> list[dict]:
        return self._call("GET", "/groups")["rows"]

    def tables(self) -> list[dict]:
        return self._call("GET", "/tables")["rows"]

    def me(self) -> dict:
        return self._call("GET", "/me")

    def stats(self) -> dict:
        return self._call("GET", "/stats")

    # ---- publishing ----------------------------------------------------------------------------------------
    def publish(self, table: str, rows, mode: str = "unicast", batch_id=None, variant=None) -> dict:
        """Publish a batch (a list of row dicts as JSON lines; an Arrow table or pandas DataFrame as Arrow IPC);
        returns the server's summary (notifications routed, rejected rows with their reasons)."""
        params: dict = {"mode": mode}
        if batch_id is not None:
            params["batch_id"] = str(batch_id)
        if variant is not None:   # reformulated only: a name or a list of names (engine.publish's variant)
            params["variant"] = [variant] if isinstance(variant, str) else list(variant)
        if isinstance(rows, (list, tuple)):
            body = "".join(json.dumps(r) + "\n" for r in rows).encode()
            kind = "application/x-ndjson"
        else:
            import pyarrow as pa
            table_rows = rows if isinstance(rows, pa.Table) else pa.Table.from_pandas(rows, preserve_index=False)
            body, kind = _arrow_bytes(table_rows), "application/vnd.apache.arrow.stream"
        return self._call("POST", f"/tables/{table}/publish", params=params, content=body,
                          headers={"Content-Type": kind})


def _arrow_bytes(table) -> bytes:
    import pyarrow.ipc as ipc
    out = io.BytesIO()
    with ipc.new_stream(out, table.schema) as writer:
        writer.write_table(table)
    return out.getvalue()


class NotificationStream:
    """An iterator over one WebSocket stream of notifications that reconnects with its last ``client_seq``.

    ``last_seq``: the number of the last notification yielded; ``gaps``: the ranges the server reported lost
    to its retention window; ``reconnects``: how often it reconnected.  Raises ServerError when the server
    refuses the stream (a 44xx close: bad token, another client's subscription)."""

    #: reconnect attempts in a row before giving up (each waits a little longer, up to 2 s)
    max_retries = 30

    def __init__(self, client: Client, after=None, subscriptions=None, idle_timeout=None, name=None):
        self.client = client
        self.last_seq = after
        self.subscriptions = list(subscriptions or [])
        self.idle_timeout = idle_timeout
        self.name = name
        self.gaps: list[dict] = []
        self.reconnects = 0
        #: set once the server has accepted the stream (its hello)
        self.connected = threading.Event()
        self._ws = None
        self._closed = False

    def _url(self) -> str:
        base = self.client.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        query = [("token", self.client.token)] + [("subscription", s) for s in self.subscriptions]
        if self.last_seq is not None:
            query.append(("after", str(self.last_seq)))
        return f"{base}/ws?{urlencode(query)}"

    def close(self) -> None:
        self._closed = True
        if self._ws is not None:
            self._ws.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        from websockets.exceptions import ConnectionClosed, InvalidHandshake
        from websockets.sync.client import connect as ws_connect
        failures = 0
        idle_since = None if self.idle_timeout is None else time.monotonic()
        while not self._closed:
            try:
                opened = ws_connect(self._url(), open_timeout=30, max_size=None)
            except (OSError, InvalidHandshake, TimeoutError):
                failures += 1
                if failures > self.max_retries:
                    raise
                time.sleep(min(2.0, 0.05 * 2 ** failures))
                continue
            with opened as ws:
                self._ws = ws
                try:
                    while True:
                        # idle: no notification for idle_timeout seconds (heartbeats do not count)
                        wait = None if idle_since is None else max(0.0, idle_since + self.idle_timeout - time.monotonic())
                        try:
                            raw = ws.recv(timeout=wait)
                        except TimeoutError:
                            self.close()
                            return
                        failures = 0
                        message = json.loads(raw)
                        kind = message.get("type")
                        if kind == "notifications":   # one frame: what the server had for us at once
                            for note in message["notifications"]:
                                # last_seq follows what was yielded: a reconnect after a partly read frame
                                # resumes inside it
                                self.last_seq = note["client_seq"]
                                idle_since = None if self.idle_timeout is None else time.monotonic()
                                yield {**note["data"], "client_seq": note["client_seq"]}
                        elif kind == "hello":
                            if self.last_seq is None:
                                self.last_seq = message["after"]
                            self.connected.set()
                        elif kind == "gap":
                            self.gaps.append(message)
                            self.last_seq = max(self.last_seq or 0, message["to"])
                        elif kind == "error":
                            raise ServerError(message.get("status", 400), message["error"], message.get("where"))
                except ConnectionClosed as closed:
                    if self._closed:
                        return
                    code = closed.rcvd.code if closed.rcvd is not None else None
                    if code is not None and 4400 <= code < 4500:
                        raise ServerError(code, closed.rcvd.reason) from None
                    self.reconnects += 1   # dropped (too slow, a restart): catch up from last_seq
                finally:
                    self._ws = None
