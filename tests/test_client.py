"""The Python client (``sparksub.client``) and the command line's ``token`` / ``subscribe`` against the real
server (issue 17 item 2): uvicorn in a background thread on a loopback port, over a durable engine.

Oracles: the minimum recomputed from the table's rows as the test publishes them (a subscriber is notified
exactly when its minimum changes, with the new one); the server's numbering across a server restart (the
client's stream reconnects with its last number: every notification once, in order).
"""
from __future__ import annotations

import threading
import time

import pytest

from sparksub.cli import main
from sparksub.client import ServerError, connect
from sparksub.serve import BackgroundServer, ServeConfig, create_app
from sparksub.serve.tokens import Principal, TokenStore, issue_token

ROWS = {f"S{i}": (float(i * 10), float(100 - i)) for i in range(8)}   # symbol -> (risk, per)
LO, HI = 20.0, 60.0
BATCHES = [[("S3", 30.0, 5.0), ("S9", 25.0, 4.0)],            # two new minima
           [("S1", 10.0, 1.0), ("S9", 90.0, 4.0)],            # S1 outside the range; S9 leaves it: min back to 5
           [("S3", 30.0, 80.0), ("S4", 40.0, 96.0)]]          # S3 rises: min is the next lowest


def current_min(rows: dict) -> float | None:
    inside = [per for risk, per in rows.values() if LO <= risk <= HI]
    return min(inside) if inside else None


@pytest.fixture(scope="module")
def served(spark, tmp_path_factory):
    from sparksub import Engine
    path = tmp_path_factory.mktemp("client")
    tokens = {"ops": issue_token(path, "ops", "admin"), "carol": issue_token(path, "carol")}
    engine = Engine(spark, catalyst=False, path=path)
    server = BackgroundServer(create_app(engine, ServeConfig(heartbeat_seconds=1.0))).start()
    ops = connect(server.url, tokens["ops"])
    ops.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    engine.load("stock", [{"symbol": s, "risk": r, "per": p} for s, (r, p) in ROWS.items()])
    state = {"server": server, "engine": engine, "tokens": tokens, "ops": ops}
    yield state
    state["server"].stop()
    engine.close()


@pytest.mark.spark
@pytest.mark.catalyst_independent
def test_subscribe_yields_each_change_of_the_minimum_across_a_server_restart(served):
    carol = connect(served["server"].url, served["tokens"]["carol"])
    stream = carol.subscribe(f"SELECT MIN(per) FROM stock WHERE risk BETWEEN {LO:g} AND {HI:g}", id="cheap",
                             idle_timeout=None)
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(stream), daemon=True)
    reader.start()
    rows, expected, offset = dict(ROWS), [], 0   # expected: (the update's place among those published, new min)
    for n, batch in enumerate(BATCHES):
        if n == 2:   # restart the server on the same port over the same engine: the stream reconnects
            port = served["server"].port
            served["server"].stop()
            served["server"] = BackgroundServer(create_app(served["engine"], ServeConfig(heartbeat_seconds=1.0)),
                                                port=port).start()
        before = current_min(rows)
        served["ops"].publish("stock", [{"symbol": s, "risk": r, "per": p} for s, r, p in batch])
        for s, r, p in batch:
            rows[s] = (r, p)
            now = current_min(rows)
            if now != before:
                expected.append((offset, now))
            before, offset = now, offset + 1
    deadline = time.monotonic() + 60
    while len(got) < len(expected) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)   # nothing more may come
    stream.close()
    reader.join(10)
    # seqs are consecutive across publishes: the first notification's seq places the rest
    base = got[0]["seq"] - expected[0][0] if got else 0
    assert [(n["seq"] - base, n["value"]) for n in got] == expected
    assert [n["client_seq"] for n in got] == list(range(1, len(got) + 1))
    assert {n["subscription_id"] for n in got} == {"cheap"} and {n["op"] for n in got} == {"update"}
    assert stream.reconnects >= 1


@pytest.mark.spark
@pytest.mark.catalyst_independent   # engines without the extension in both runs
def test_sql_explain_drop_and_publish_rights(served):
    carol = connect(served["server"].url, served["tokens"]["carol"])
    carol.sql("CREATE SUBSCRIPTION dear AS SELECT MAX(per) FROM stock WHERE risk > 50")
    names = {r["name"] for r in carol.sql("SHOW SUBSCRIPTIONS")}
    assert "dear" in names
    assert "RANGE_MAX" in carol.explain("dear")
    assert carol.sql("EXPLAIN SUBSCRIPTION dear").startswith("== Subscription: dear ==")
    assert carol.drop("dear") == {"statement": "DROP SUBSCRIPTION", "name": "dear", "dropped": True}
    assert "dear" not in {r["name"] for r in carol.subscriptions()}
    with pytest.raises(ServerError) as err:
        carol.drop("dear")
    assert err.value.status == 404 and err.value.where
    with pytest.raises(ServerError) as err:
        carol.publish("stock", [{"symbol": "S1", "risk": 1.0, "per": 1.0}])
    assert err.value.status == 403
    assert carol.me()["role"] == "client"


@pytest.mark.spark
@pytest.mark.catalyst_independent
def test_cli_subscribe_prints_notifications(served, capsys):
    url, token = served["server"].url, served["tokens"]["carol"]
    code: list = []
    cli = threading.Thread(target=lambda: code.append(main(
        ["subscribe", url, "SELECT MIN(per) FROM stock WHERE risk BETWEEN 0 AND 100", "--token", token,
         "--id", "cli1", "--count", "1", "--idle-timeout", "60"])), daemon=True)
    cli.start()
    carol = connect(url, token)
    deadline = time.monotonic() + 30
    while "cli1" not in {r["name"] for r in carol.subscriptions()} and time.monotonic() < deadline:
        time.sleep(0.1)
    served["ops"].publish("stock", [{"symbol": "S0", "risk": 0.0, "per": -1.0}])
    cli.join(60)
    assert code == [0]
    out = capsys.readouterr()
    assert '"subscription_id": "cli1"' in out.out and '"value": -1.0' in out.out
    assert "subscribed as cli1" in out.err
    assert "cli1" not in {r["name"] for r in carol.subscriptions()}   # dropped on the way out (no --keep)


def test_cli_token_issues_a_hashed_token(tmp_path, capsys):
    """No Spark: the token command writes the hash, prints the token once; the server's store accepts it."""
    assert main(["token", str(tmp_path), "--client", "dave"]) == 0
    token = capsys.readouterr().out.strip()
    assert main(["token", str(tmp_path), "--client", "erin", "--admin"]) == 0
    admin = capsys.readouterr().out.strip()
    stored = (tmp_path / "serve" / "tokens.json").read_text()
    assert token not in stored and admin not in stored and "dave" in stored
    store = TokenStore(tmp_path)
    assert store.verify(token) == Principal("dave", "client")
    assert store.verify(admin) == Principal("erin", "admin")
    assert store.verify(token + "x") is None and store.verify("") is None
    assert main(["token", str(tmp_path), "--client", "no.dots"]) == 2
    assert "client name" in capsys.readouterr().err


def test_notification_log_numbers_keeps_and_prunes(tmp_path):
    """No Spark: the server's notification log (what makes reconnecting safe) numbers per client from 1,
    keeps the numbers across a reopen, pages after a number, filters by subscription, and forgets rows past
    the retention window -- which a reconnecting client is then told as a gap (``first_kept``)."""
    from sparksub.serve.fanout import Connection
    from sparksub.serve.notification_log import NotificationLog
    file = tmp_path / "n.sqlite"
    log = NotificationLog(file, retention_seconds=3600)
    out = log.append({"a": [("s1", '{"v":1}'), ("s2", '{"v":2}')], "b": [("s1", '{"v":3}')]})
    assert out == {"a": [(1, "s1", '{"v":1}'), (2, "s2", '{"v":2}')], "b": [(1, "s1", '{"v":3}')]}
    log.close()
    log = NotificationLog(file, retention_seconds=3600)
    assert log.last_seq("a") == 2 and log.last_seq("nobody") == 0
    assert log.append({"a": [("s1", '{"v":4}')]})["a"] == [(3, "s1", '{"v":4}')]
    assert [r[0] for r in log.read("a", 0)] == [1, 2, 3] and [r[0] for r in log.read("a", 1, limit=1)] == [2]
    assert [r[0] for r in log.read("a", 0, subscriptions={"s1"})] == [1, 3]
    assert log.prune(now=time.time() + 7200) == 4 and log.first_kept("a") is None and log.last_seq("a") == 3
    log.close()
    # a connection past its queue limit is marked dropped (its stream closes; the client reconnects)
    conn = Connection("a", None, limit=2, kind="ws")
    conn.offer([(1, "s1", "{}"), (2, "s2", "{}")])
    assert conn.dropped is None and [n[0] for n in conn.take()] == [1, 2]
    conn.last_sent = 2
    conn.offer([(3, "s1", "{}"), (4, "s1", "{}"), (5, "s1", "{}")])
    assert conn.dropped is not None and "after=2" in conn.dropped
