"""The server keeps the engine's streams running (issue 17 item 1; ``serve/engine_streams.py``): ``sparksub
serve PATH --stream TABLE=DIR`` runs ``engine.stream`` over Structured Streaming's file source on DIR,
checkpointed in the engine's directory, and routes every micro-batch's notifications to the subscribers as a
publish's are.

A real server (uvicorn in a thread, loopback) over a durable engine whose table ``stock`` is fed by a real file
stream: JSON-lines files renamed into the directory, one at a time.  Oracle: an in-process twin Engine with
the same rows and subscriptions, each file's rows published to it as one batch -- a micro-batch is one batch --
: the client's notifications must equal the twin's rows (all but ``seq``: a stream numbers its rows by
micro-batch), numbered 1, 2, 3... without a hole.  Along the way: a subscription added over HTTP to the
running stream's group (hosted as data), one of a new group (the stream restarted from its checkpoint), a
publish to the streamed table refused, the stream's status in /health and /metrics, the stream stopped with
the server and resumed by a new server from its checkpoint without routing anything twice.
"""
from __future__ import annotations

import json
import os
import time

import httpx
import pytest

from serve_helpers import LiveReaders, comparable, split_by_client
from sparksub.cli import main
from sparksub.serve.engine_streams import StreamSource

TABLE = "CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)"
STOCK = [{"symbol": f"S{i}", "risk": float(i * 10), "per": float(100 - i)} for i in range(8)]
FIRST = {"m1": "SELECT MIN(per) FROM stock WHERE risk BETWEEN 10 AND 50"}   # before the server starts
SAME_GROUP = ("m2", "SELECT MIN(per) FROM stock WHERE risk BETWEEN 30 AND 70")
NEW_GROUP = ("t1", "SELECT symbol, per FROM stock WHERE risk BETWEEN 0 AND 60 ORDER BY per LIMIT 2")
FILES = [
    [{"symbol": "S3", "risk": 30.0, "per": 1.0}, {"symbol": "S9", "risk": 35.0, "per": None},
     {"symbol": "S3", "risk": 31.0, "per": 2.0}],
    [{"symbol": "S4", "risk": 40.0, "per": 0.5}, {"symbol": "S3", "_op": "delete"},
     {"symbol": "S4", "risk": 40.0, "per": 0.5}],
    [{"symbol": "S5", "risk": 50.0, "per": 0.1}, {"symbol": "S1", "risk": 12.0, "per": 0.2}],
    [{"symbol": "S4", "_op": "delete"}, {"symbol": "S6", "risk": 60.0, "per": -1.0}],
]


def test_stream_option_is_checked_before_anything_starts(tmp_path, capsys):
    """No Spark: a malformed --stream is refused by the command line with the reason."""
    with pytest.raises(ValueError, match="TABLE=DIR"):
        StreamSource.parse("stock")
    with pytest.raises(ValueError, match="format"):
        StreamSource.parse("stock=/tmp", "xml")
    assert StreamSource.parse(f"stock={tmp_path}").directory == str(tmp_path.resolve())
    assert main(["serve", str(tmp_path), "--stream", "stock"]) == 2
    assert "TABLE=DIR" in capsys.readouterr().err


def _status(url: str) -> dict:
    return {s["table"]: s for s in httpx.get(f"{url}/health", timeout=30).json().get("streams", [])}


def _wait(predicate, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


@pytest.mark.spark
@pytest.mark.catalyst_independent   # engines without the extension in both runs
def test_served_stream_notifies_subscribers_as_publish_would(spark, tmp_path):
    from sparksub import Engine
    from sparksub.client import ServerError, connect
    from sparksub.serve import BackgroundServer, ServeConfig, create_app
    from sparksub.serve.tokens import issue_token
    path, feed, staging = tmp_path / "engine", tmp_path / "in", tmp_path / "staging"
    feed.mkdir()
    staging.mkdir()
    tokens = {"ops": issue_token(path, "ops", "admin"), "carol": issue_token(path, "carol")}
    engine = Engine(spark, catalyst=False, path=path)
    twin = Engine(spark, catalyst=False)
    for e in (engine, twin):
        e.sql(TABLE)
        e.load("stock", STOCK)
        for name, sql in FIRST.items():
            e.subscribe(f"carol.{name}", sql)   # the server's id for carol's subscription (it owns it)

    def serve():
        app = create_app(engine, ServeConfig(heartbeat_seconds=1.0), [f"stock={feed}"], stream_trigger_seconds=0.5)
        server = BackgroundServer(app).start()
        _wait(lambda: _status(server.url)["stock"]["state"] == "running", "the stream to start")
        return server

    expected: list[str] = []

    def feed_file(n: int, url: str) -> None:
        """File ``n`` into the stream (written aside, renamed in); the same rows to the twin as one batch."""
        before = _status(url)["stock"]["micro_batches"]
        aside = staging / f"f{n}.json"
        aside.write_text("".join(json.dumps(r) + "\n" for r in FILES[n]))
        os.rename(aside, feed / f"part-{n:02d}.json")
        _wait(lambda: _status(url)["stock"]["micro_batches"] > before, f"file {n}'s micro-batch")
        expected.extend(split_by_client(twin.publish("stock", FILES[n]).toArrow().to_pylist()).get("carol", []))

    server = serve()
    try:
        carol = connect(server.url, tokens["carol"])
        readers = LiveReaders({"carol": carol})
        feed_file(0, server.url)
        # a subscription of the running stream's group: published to the stream as data
        carol.sql(f"CREATE SUBSCRIPTION {SAME_GROUP[0]} AS {SAME_GROUP[1]}")
        twin.subscribe(f"carol.{SAME_GROUP[0]}", SAME_GROUP[1])
        feed_file(1, server.url)
        # a new group the stream cannot host (top-k items are columns its output lacks): restarted for it
        carol.sql(f"CREATE SUBSCRIPTION {NEW_GROUP[0]} AS {NEW_GROUP[1]}")
        twin.subscribe(f"carol.{NEW_GROUP[0]}", NEW_GROUP[1])
        status = _status(server.url)["stock"]
        assert status["state"] == "running" and status["restarts"] == 1, status
        feed_file(2, server.url)
        # the table is the stream's: a publish to it is refused, and changes nothing
        with pytest.raises(ServerError) as err:
            connect(server.url, tokens["ops"]).publish("stock", [{"symbol": "S0", "risk": 0.0, "per": -5.0}])
        assert err.value.status == 409 and "--stream" in err.value.error
        metrics = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {tokens['ops']}"}).text
        assert 'sparksub_stream_up{state="running",table="stock"} 1.0' in metrics
        assert 'sparksub_stream_micro_batches_total{table="stock"} 3.0' in metrics
        got = readers.wait({"carol": expected})["carol"]
        assert sorted(_seqless(comparable(n)) for n in got) == sorted(_seqless(x) for x in expected)
        assert [n["client_seq"] for n in got] == list(range(1, len(got) + 1))
        assert {n["subscription_id"] for n in got} == {"m1", "m2", "t1"}
        assert engine.result("carol.t1") == twin.result("carol.t1")
    finally:
        query = server.app.state.engine_streams.streams["stock"].query
        server.stop(timeout=60)
    assert not query.isActive   # stopped with the server
    # a new server over the same directory resumes the stream from its checkpoint: the next file only
    server = serve()
    try:
        carol = connect(server.url, tokens["carol"])
        last = carol.me()["last_seq"]
        assert last == len(expected)
        before = len(expected)
        feed_file(3, server.url)
        more = list(carol.notifications(after=last, idle_timeout=3.0))
        assert sorted(_seqless(comparable(n)) for n in more) == sorted(_seqless(x) for x in expected[before:])
        assert more and [n["client_seq"] for n in more] == list(range(last + 1, last + 1 + len(more)))
        assert _status(server.url)["stock"]["micro_batches"] == 1
    finally:
        server.stop(timeout=60)
        engine.close()


def _seqless(note: str) -> str:
    """A comparable notification without its ``seq`` (a stream's is its micro-batch's, a publish's the engine's
    running number)."""
    out = json.loads(note)
    out.pop("seq", None)
    return json.dumps(out, sort_keys=True)
