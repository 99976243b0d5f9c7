"""A server killed between the engine's commit and the notification log's loses nothing (issue 17: "a client
that reconnects with its last sequence number misses nothing").

The real server runs in a child process (``sparksub.serve.server.serve`` over a durable engine directory, on a
loopback port).  The publish of one batch kills it with SIGKILL right after the engine committed the batch and
before the log committed its routed notifications -- ``SPARKSUB_SERVE_CRASH_AT`` (``service.py``'s test hook);
a new server on the same directory and port must route them at startup (``route_kept``), the publisher's retry
with the same ``batch_id`` is a duplicate, and a client that reconnects with the last number it read gets the
rest.  The same recovery within one process -- before the next publish, in unicast and reformulated mode,
``deliver()`` matching the messages -- is the second test's (a restarted server cannot deliver messages the
killed one left: ``service.py``'s ``_delivered`` says why).

Oracle: an in-process twin engine, fed the same tables, subscriptions (under the server's ids,
``<client>.<name>``) and batches without interruption, in unicast mode: every client's notifications equal
the twin's rows for its subscriptions, each once, numbered 1, 2, 3... without a hole.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from sparksub import Engine
from sparksub.client import connect
from sparksub.serve.config import ServeConfig
from sparksub.serve.notification_log import NotificationLog
from sparksub.serve.service import SubscriptionService
from sparksub.serve.tokens import Principal, issue_token

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_independent]   # engines without the extension in both runs

TABLE = "CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)"
SUBSCRIPTIONS = {
    "alice": {"m1": "SELECT MIN(per) FROM stock WHERE risk BETWEEN 10 AND 50",
              "t1": "SELECT symbol, per FROM stock WHERE risk BETWEEN 0 AND 60 ORDER BY per LIMIT 2"},
    "bob": {"m1": "SELECT MIN(per) FROM stock WHERE risk BETWEEN 30 AND 90"},
}
#: (rows, batch_id): the second is the one whose publish kills the first server (the third: the next test)
BATCHES = [
    ([{"symbol": f"S{i}", "risk": float(i * 10), "per": float(100 - i)} for i in range(10)], "initial"),
    ([{"symbol": "S3", "risk": 30.0, "per": 1.0}, {"symbol": "S11", "risk": 35.0, "per": 0.5},
      {"symbol": "S6", "risk": 61.0, "per": 0.1}], "crash-unicast"),
    ([{"symbol": "S3", "risk": 30.0, "per": 50.0}, {"symbol": "S4", "risk": 45.0, "per": 0.2},
      {"symbol": "S2", "_op": "delete"}], "after"),
]
CRASHING = "crash-unicast"
#: the child: the real server over the directory, its Spark session on two cores, no Catalyst extension
CHILD = """
import sys
from sparksub.serve.config import ServeConfig
from sparksub.serve.server import serve
serve(sys.argv[1], port=int(sys.argv[2]), log_level="warning", config=ServeConfig(),
      engine_options={"catalyst": False, "conf": {"spark.master": "local[2]", "spark.ui.enabled": "false"}})
"""
#: the longest a stream read waits for a client's notifications; then how long one waits for an extra one
READ_TIMEOUT, SETTLE = 60.0, 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``sparksub.serve.server.serve`` over ``path`` in a child process (its own process group: its JVM goes
    with it), its output in ``log_file``."""

    def __init__(self, path, port: int, log_file, crash_at: str | None = None):
        env = {k: v for k, v in os.environ.items() if k != "SPARKSUB_SERVE_CRASH_AT"}
        if crash_at is not None:
            env["SPARKSUB_SERVE_CRASH_AT"] = crash_at
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        self.url = f"http://127.0.0.1:{port}"
        self.log_file = log_file
        with open(log_file, "ab") as out:   # the child writes to its own copy of the descriptor
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(port)], env=env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode} before it listened "
                                     f"(its output: {self.log_file})")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"the server on {self.url} did not answer /health within {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)   # uvicorn's graceful exit closes the engine
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # whatever of its group is left (its JVM)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


class InProcessServer:
    """``create_app`` over the directory's engine (reopened) in a background thread, on ``port``."""

    def __init__(self, spark, path, port: int):
        from sparksub.serve.app import create_app
        from sparksub.serve.background import BackgroundServer
        self.engine = Engine(spark, catalyst=False, path=path)
        self.server = BackgroundServer(create_app(self.engine, ServeConfig()), port=port).start()

    def stop(self) -> None:
        self.server.stop()
        self.engine.close()


def comparable(row: dict, name: str) -> str:
    """A notification as sorted JSON of its non-null columns, without the server's numbering, the group and
    the reason, under the client's name for the subscription."""
    out = {k: v for k, v in row.items() if v is not None and k not in ("client_seq", "group_id", "reason")}
    out["subscription_id"] = name
    return json.dumps(out, sort_keys=True)


def twin_rows(twin, rows) -> dict[str, list[str]]:
    """The twin's unicast notifications of one batch per owning client, comparable."""
    out: dict[str, list[str]] = {c: [] for c in SUBSCRIPTIONS}
    for row in twin.publish("stock", rows).toArrow().to_pylist():
        client, _, name = (row.get("subscription_id") or "").partition(".")
        if name and row.get("op") not in ("rejected", "error"):
            out[client].append(comparable(row, name))
    return out


def read_after(clients: dict, after: dict[str, int], counts: dict[str, int]) -> dict[str, list[dict]]:
    """Each client's notifications after its number in ``after``, read in a thread each (at once) until it
    has its number in ``counts`` and then none comes for ``SETTLE`` seconds (a duplicate would)."""
    got: dict[str, list[dict]] = {c: [] for c in clients}

    def read(client: str) -> None:
        with clients[client].notifications(after=after[client], idle_timeout=READ_TIMEOUT) as stream:
            for note in stream:
                got[client].append(note)
                if len(got[client]) >= counts[client]:
                    stream.idle_timeout = SETTLE   # from the last one on: only an extra one would come
    readers = [threading.Thread(target=read, args=(c,), daemon=True) for c in clients]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(READ_TIMEOUT + 10)
    return got


def test_a_server_killed_between_the_engine_commit_and_the_log_commit_loses_nothing(request, tmp_path):
    started = time.monotonic()
    path = tmp_path / "served"
    tokens = {"ops": issue_token(path, "ops", "admin"), "pub": issue_token(path, "pub", "publisher"),
              **{c: issue_token(path, c) for c in SUBSCRIPTIONS}}
    port = _free_port()
    first = ServerProcess(path, port, tmp_path / "server-1.log", crash_at=f"engine-committed:{CRASHING}")
    second = None
    try:
        # the oracle, uninterrupted, while the child starts: each batch's notifications per client
        twin = Engine(request.getfixturevalue("spark"), catalyst=False)
        twin.sql(TABLE)
        for client, subs in SUBSCRIPTIONS.items():
            for name, sql in subs.items():
                twin.subscribe(f"{client}.{name}", sql)
        expected = [twin_rows(twin, rows) for rows, _ in BATCHES[:2]]
        assert any(expected[1].values()), "the batch the crash would lose notifies no one"

        first.wait_ready()
        connect(first.url, tokens["ops"]).sql(TABLE)
        clients = {c: connect(first.url, tokens[c]) for c in SUBSCRIPTIONS}
        for client, subs in SUBSCRIPTIONS.items():
            for name, sql in subs.items():
                clients[client].sql(f"CREATE SUBSCRIPTION {name} AS {sql}")
        publisher = connect(first.url, tokens["pub"])
        rows, batch_id = BATCHES[0]
        publisher.publish("stock", rows, batch_id=batch_id)
        # read before the crash: the numbers each client reconnects with
        got = read_after(clients, {c: 0 for c in clients}, {c: len(expected[0][c]) for c in clients})

        rows, batch_id = BATCHES[1]
        with pytest.raises(httpx.HTTPError):   # the server kills itself inside this publish
            publisher.publish("stock", rows, batch_id=batch_id)
        assert first.proc.wait(60) == -signal.SIGKILL

        # the restart: a server on the same directory and port, in this process (the killed one's engine and
        # log reopened from the files; this process's Spark session spares a second child's start-up)
        second = InProcessServer(request.getfixturevalue("spark"), path, port)
        retry = publisher.publish("stock", rows, batch_id=batch_id)   # the engine committed it: a duplicate
        assert retry["duplicate"] is True and retry["notifications"] == 0, retry
        # (a publish after the recovery numbers on: the next test, without a second server's start-up)
        rest = read_after(clients, {c: got[c][-1]["client_seq"] if got[c] else 0 for c in clients},
                          {c: len(expected[1][c]) for c in clients})

        for client in clients:
            notes = got[client] + rest[client]
            assert [n["client_seq"] for n in notes] == list(range(1, len(notes) + 1)), client
            want = [note for batch in expected for note in batch[client]]
            assert sorted(comparable(n, n["subscription_id"]) for n in notes) == sorted(want), client
    finally:
        for server in (first, second):
            if server is not None:
                server.stop()
    print(f"wall time {time.monotonic() - started:.1f} s")


def test_publishes_the_log_has_not_routed_are_routed_first_in_either_mode(spark, tmp_path):
    """The same recovery within one process, where the engine's deliver() side is alive: publishes the engine
    committed and the log has not routed -- made here through the engine's own API beside the service, as a
    routing that failed after the engine's commit leaves them -- one reformulated (its messages matched to
    the subscribers by ``deliver``), one unicast, are routed by the next publish through the service
    (``route_kept``), numbered before its own notifications and in the engine's seq order."""
    path = tmp_path / "served"
    engine = Engine(spark, catalyst=False, path=path)
    twin = Engine(spark, catalyst=False)
    log = NotificationLog(path / "serve" / "notifications.sqlite", 3600.0)
    service = SubscriptionService(engine, log, ServeConfig())
    service.route_kept()   # as create_app does: the log starts at the engine's next seq
    service.statement(Principal("ops", "admin"), TABLE)
    twin.sql(TABLE)
    for client, subs in SUBSCRIPTIONS.items():
        for name, sql in subs.items():
            service.statement(Principal(client, "client"), f"CREATE SUBSCRIPTION {name} AS {sql}")
            twin.subscribe(f"{client}.{name}", sql)
    publisher = Principal("pub", "publisher")
    expected = [twin_rows(twin, rows) for rows, _ in BATCHES]
    numbered = {c: [] for c in SUBSCRIPTIONS}
    for client, notes in service.publish(publisher, "stock", BATCHES[0][0]).numbered.items():
        numbered[client] += notes
    # Paint-Sparse: top-k's per-update messages, whose delivered rows are the unicast rows one for one
    engine.publish("stock", BATCHES[1][0], mode="reformulated", variant="Paint-Sparse")
    engine.publish("stock", BATCHES[2][0])
    later = [{"symbol": "S4", "risk": 45.0, "per": 60.0}, {"symbol": "S1", "risk": 10.0, "per": 0.05}]
    expected.append(twin_rows(twin, later))
    summary = service.publish(publisher, "stock", later)
    for client, notes in summary.numbered.items():
        numbered[client] += notes
    for client, notes in numbered.items():
        assert [n for n, _, _ in notes] == list(range(1, len(notes) + 1)), client
        assert log.read(client, 0) == notes, client   # what a reconnecting client reads: the same
        rows = [{**json.loads(body), "subscription_id": name} for _, name, body in notes]
        seqs = [row["seq"] for row in rows]
        assert seqs == sorted(seqs), client
        want = [note for batch in expected for note in batch[client]]
        assert sorted(comparable(row, row["subscription_id"]) for row in rows) == sorted(want), client
    assert service.route_kept() == 0   # nothing left
    log.close()
    engine.close()
