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
    # commits are numbered: a tailer in another process (a reader) reads whole commits after its cursor
    reader = NotificationLog(file, retention_seconds=3600, reader=True)
    told = []
    log.listeners.append(told.append)
    assert reader.committed() == 2 and reader.last_seq("a") == 3
    log.append({"b": [("s1", '{"v":5}'), ("s2", '{"v":6}')], "a": [("s2", '{"v":7}')]})
    assert told == [3] and reader.committed() == 3 and reader.last_seq("b") == 3
    cursor, chunks = reader.commits_after(1)
    assert cursor == 3 and {c: NotificationLog.expand(v) for c, v in chunks.items()} == {
        "a": [(3, "s1", '{"v":4}'), (4, "s2", '{"v":7}')], "b": [(2, "s1", '{"v":5}'), (3, "s2", '{"v":6}')]}
    assert reader.commits_after(3) == (3, {})
    assert reader.commits_after(1, upto=2, clients=["a"]) == (2, {"a": [(3, 3, "s1", '{"v":4}')]})
    assert reader.commits_after(0, upto=3, clients=[]) == (3, {})
    with pytest.raises(RuntimeError):
        reader.append({"a": [("s1", "{}")]})
    reader.close()
    assert log.prune(now=time.time() + 7200) == 7 and log.first_kept("a") is None and log.last_seq("a") == 4
    assert log.committed() == 3   # pruning keeps the commit number
    log.close()
    # a connection past its queue limit is marked dropped (its stream closes; the client reconnects)
    conn = Connection("a", None, limit=2, kind="ws")
    conn.offer([(1, "s1", "{}"), (2, "s2", "{}")])
    assert conn.dropped is None and [n[0] for n in conn.take()] == [1, 2]
    conn.last_sent = 2
    conn.offer([(3, "s1", "{}"), (4, "s1", "{}"), (5, "s1", "{}")])
    assert conn.dropped is not None and "after=2" in conn.dropped


def _row_rule_bodies(table):
    """The oracle of ``serve/bodies.py``: the routing rule row by row, with ``json.dumps`` -- the core columns
    always, the others where they hold a value, the client's name as ``subscription_id`` (and as an event
    match's ``query``); rows sorted by seq (stable, nulls last); ``{client: [(name, body)]}``, unowned count,
    the publisher's rows."""
    import json
    import math

    def plain(v):
        if isinstance(v, float):
            return None if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity") if math.isinf(v) else v
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v.isoformat() if hasattr(v, "isoformat") else v

    out, unowned, reported = {}, 0, []
    rows = sorted(table.to_pylist(), key=lambda r: (r.get("seq") is None, r.get("seq") or 0))
    for row in rows:
        if row.get("op") in ("rejected", "error") and row.get("subscription_id") is None:
            reported.append({k: plain(v) for k, v in row.items() if v is not None})
            continue
        key = row.get("subscription_id") or row.get("query")
        client, _, name = (key or "").partition(".")
        if not (client and name):
            unowned += 1
            continue
        body = {k: plain(row.get(k)) for k in ("subscription_id", "op", "value", "seq", "group_id")}
        body.update((k, plain(v)) for k, v in row.items() if v is not None and k not in body)
        body["subscription_id"] = name
        if row.get("subscription_id") is None:
            body["query"] = name
        out.setdefault(client, []).append((name, json.dumps(body, separators=(",", ":"))))
    return out, unowned, reported


def test_notification_bodies_built_by_column_equal_the_row_rule():
    """No Spark: the server builds notification bodies column by column (``serve/bodies.py``, in
    ``SubscriptionService._route``); the text must be what ``json.dumps`` of the row rule writes, for every
    kind of column -- nulls, NaN and infinities, ints, floats (float32 too), booleans, escaped strings,
    timestamps and lists --, for event-query matches, unowned ids and the publisher's rejected rows."""
    import pyarrow as pa
    from sparksub.serve.service import SubscriptionService
    n = 9
    table = pa.table({
        "subscription_id": ["c1.q1", "c2.q9", None, "c1.q2", None, "bad", 'c2.\u00e9"x', None, "c1.q1"],
        "op": ["upsert", "upsert", "error", None, "match", "upsert", "delete", "rejected", "upsert"],
        "value": [1.0, float("nan"), None, float("inf"), 0.1, 2.5, -float("inf"), None, 1e16],
        "seq": [3, 1, 0, None, 2, 1, 1, 5, 3],
        "group_id": ["g", "g", None, "g", None, "g", "g", None, "g2"],
        "query": [None, None, None, None, "c3.jump", None, None, None, None],
        "item_x": pa.array([None, 1.5, None, None, 3.0, None, None, None, None], pa.float32()),
        "k": pa.array([None, 1, None, 2, None, None, None, None, None], pa.int64()),
        "flag": [None, True, None, False, None, None, None, None, None],
        "ts": pa.array([None] * 4 + [1] + [None] * 4, pa.timestamp("us")),
        "lst": pa.array([None, [1, 2]] + [None] * 7, pa.list_(pa.int64())),
        "reason": [None, None, "bad row", None, None, None, None, "why", None],
    })
    assert table.num_rows == n
    for t in (table, table.slice(0, 0), table.select(["subscription_id", "op", "value", "seq", "group_id"]),
              pa.table({"query": ["c1.a", "x"], "op": ["m", "m"], "t0": [1, 2]})):
        by_client, reported = {}, []
        unowned = SubscriptionService._route(None, t, by_client, reported)
        assert (by_client, unowned, reported) == _row_rule_bodies(t)


def test_websocket_frames_hold_every_notification_once_in_order():
    """No Spark: a connection's notifications are cut into frames under the size cap, each frame JSON whose
    ``last_seq`` is its last element's number; together the frames are the notifications in order; SSE keeps
    one numbered event per notification."""
    import json
    from sparksub.serve.fanout import frames, sse_events, wire_batch
    notes = [(s, "q", json.dumps({"subscription_id": "q", "value": s, "pad": "x" * (s % 7) * 40}))
             for s in range(1, 301)]
    runs = list(frames(notes, 2_000))
    assert len(runs) > 1 and all(sum(len(b) + 32 for _, _, b in r) <= 2_000 or len(r) == 1 for r in runs)
    decoded = [json.loads(wire_batch(r)) for r in runs]
    assert all(d["type"] == "notifications" and d["last_seq"] == d["notifications"][-1]["client_seq"] for d in decoded)
    assert [(x["client_seq"], x["data"]) for d in decoded for x in d["notifications"]] == \
        [(s, json.loads(b)) for s, _, b in notes]
    assert list(frames([(1, "q", "y" * 5_000)], 100)) == [[(1, "q", "y" * 5_000)]]   # one too big still goes, alone
    events = [e for e in sse_events(notes[:3]).split("\n\n") if e]
    assert [e.splitlines()[0] for e in events] == ["id: 1", "id: 2", "id: 3"]
    assert [json.loads(e.splitlines()[2][len("data: "):])["client_seq"] for e in events] == [1, 2, 3]


def test_hub_hands_staged_publishes_out_in_order_at_the_flush():
    """No Spark: a publish's notes are staged in the engine's order (from its worker thread, inside the gate)
    and reach the connections' queues only at the flush -- which the publish handler calls just before its
    response, so no sender runs before the response is written (``serve/fanout.py``)."""
    import asyncio
    from sparksub.serve.fanout import Connection, Hub

    async def run():
        hub = Hub()
        conn = Connection("a", None, limit=100, kind="ws")
        hub.add(conn)
        hub.stage({"a": [(1, "s", "{}")], "b": [(1, "s", "{}")]})
        hub.stage({"a": [(2, "s", "{}"), (3, "s", "{}")]})
        assert not conn.queue and not conn.ready.is_set()
        hub.flush()
        assert conn.ready.is_set() and [n[0] for n in conn.take()] == [1, 2, 3]
        hub.flush()   # nothing staged: nothing more
        assert conn.take() == [] and hub.counts()["connections"] == 1
    asyncio.run(run())
