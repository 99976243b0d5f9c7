"""Helpers of the served-engine tests (``test_serve_classes.py``, ``test_serve_streams.py``; here, on the
tests' ``pythonpath``, beside the oracles): remote clients' notifications read live over WebSocket, and the
in-process oracle's rows put in the same comparable form.  Test code only (production never imports it)."""
from __future__ import annotations

import json
import threading
import time

#: columns that are the server's (client_seq) or that name internals the client need not match on
SERVER_COLUMNS = ("client_seq", "group_id", "reason")


def owned_by(row: dict) -> tuple[str, str] | None:
    """(client, name) of an engine row whose id the server made (``<client>.<name>``), else None."""
    key = row.get("subscription_id") or row.get("query")
    client, dot, name = (key or "").partition(".")
    return (client, name) if dot and client and name else None


def comparable(row: dict, name: str | None = None) -> str:
    """A notification as sorted JSON of its non-null columns, without the server's columns; ``name``: the
    client's own name for an engine row (as the server sends it)."""
    out = {k: v for k, v in row.items() if v is not None and k not in SERVER_COLUMNS}
    if name is not None:
        out["subscription_id"] = name
        if row.get("query"):
            out["query"] = name
    return json.dumps(out, sort_keys=True)


def split_by_client(rows) -> dict[str, list[str]]:
    """The oracle's rows per owning client, comparable; rejected and error rows are the publisher's."""
    out: dict[str, list[str]] = {}
    for row in rows:
        who = owned_by(row)
        if who is not None and row.get("op") not in ("rejected", "error"):
            out.setdefault(who[0], []).append(comparable(row, who[1]))
    return out


class LiveReaders:
    """Every client's WebSocket stream (``client.notifications(after=0)``), read in a thread each while the
    test acts; ``wait(expected)`` until each client has as many notifications as expected (then one more
    second: nothing more may come), and closes the streams."""

    def __init__(self, clients: dict):
        self.streams = {c: client.notifications(after=0) for c, client in clients.items()}
        self.got: dict[str, list] = {c: [] for c in clients}
        self._threads = [threading.Thread(target=lambda c=c: self.got[c].extend(self.streams[c]), daemon=True)
                         for c in self.streams]
        for t in self._threads:
            t.start()
        for stream in self.streams.values():
            assert stream.connected.wait(30)

    def wait(self, expected: dict[str, list], timeout: float = 120.0, settle: float = 1.0) -> dict[str, list]:
        deadline = time.monotonic() + timeout
        while any(len(self.got[c]) < len(expected.get(c, ())) for c in self.got) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(settle)
        for stream in self.streams.values():
            stream.close()
        for t in self._threads:
            t.join(30)
        return self.got


def serve_with_twin(spark, path, tables, initial: dict, subscriptions: dict, config=None) -> dict:
    """A real server over a durable engine in ``path`` and an in-process twin Engine (the oracle), alike: the
    ``tables`` (DDL, declared over HTTP by an admin), the ``initial`` rows per table (loaded in-process: the
    server has no load endpoint), each client's ``subscriptions`` (``{client: {name: sql}}``: over HTTP; the
    twin's under the ids the server gives them, ``<client>.<name>``).  Tokens: ``ops`` (admin), ``pub``
    (publisher), one per client.  ``{"server", "engine", "twin", "tokens", "clients", "ops", "publisher"}``."""
    from sparksub import Engine
    from sparksub.client import connect
    from sparksub.serve import BackgroundServer, ServeConfig, create_app
    from sparksub.serve.tokens import issue_token
    tokens = {"ops": issue_token(path, "ops", "admin"), "pub": issue_token(path, "pub", "publisher"),
              **{c: issue_token(path, c) for c in subscriptions}}
    engine, twin = Engine(spark, catalyst=False, path=path), Engine(spark, catalyst=False)
    for e in (engine, twin):
        e.join_partitions = 2
    server = BackgroundServer(create_app(engine, config or ServeConfig(heartbeat_seconds=1.0))).start()
    ops = connect(server.url, tokens["ops"])
    for ddl in tables:
        assert ops.sql(ddl)["statement"] == "CREATE TABLE"
        twin.sql(ddl)
    for table, rows in initial.items():
        engine.load(table, rows)
        twin.load(table, rows)
    clients = {c: connect(server.url, tokens[c]) for c in subscriptions}
    for client, subs in subscriptions.items():
        for name, sql in subs.items():
            assert clients[client].sql(f"CREATE SUBSCRIPTION {name} AS {sql}")["name"] == name
            twin.subscribe(f"{client}.{name}", sql)
    return {"server": server, "engine": engine, "twin": twin, "tokens": tokens, "clients": clients, "ops": ops,
            "publisher": connect(server.url, tokens["pub"])}
