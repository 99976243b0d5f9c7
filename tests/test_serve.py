"""The subscription server (issue 17 items 1 and 4: ``sparksub.serve``), tested as a remote client sees it.

One real server (uvicorn in a background thread, on a free loopback port) over a durable engine on the
session's SparkSession; the tests talk to it over sockets only -- httpx, WebSockets, SSE.  Oracles:

* a twin engine in this process, fed the same tables, subscriptions (under the ids the server gives them:
  ``<client>.<name>``) and updates, published in **unicast** mode: every remote client's notifications --
  over a range-min, a top-k, a DISTINCT, a bulk range-max, a FILTER, a SELECT_JOIN and an event query, with
  batches published in unicast and in reformulated mode (the server matching messages to subscribers) --
  must equal the twin's rows for that client's subscriptions, each once;
* the server's own numbering: a client's ``client_seq`` runs 1, 2, 3... without a hole, and streams
  read in pieces (reconnect with the last number, WebSocket or SSE ``Last-Event-ID``) put together equal
  the stream read at once;
* SHOW SUBSCRIPTIONS before and after every refused request (nothing changed).

The server's queue limit is tiny (4), so a publish that sends a client more than 4 notifications drops
its live streams as too slow: the collected streams only equal the oracle if the client's reconnect with
its last number loses and repeats nothing.
"""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from websockets.sync.client import connect as ws_connect

from sparksub import Engine
from sparksub.client import ServerError, connect
from sparksub.serve import BackgroundServer, ServeConfig, create_app
from sparksub.serve.tokens import issue_token

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_independent]   # engines without the extension in both runs

TABLES = ["CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)",
          "CREATE TABLE r (rk BIGINT PRIMARY KEY, a DOUBLE, b DOUBLE)",
          "CREATE TABLE s (sk BIGINT PRIMARY KEY, b DOUBLE, c DOUBLE)",
          "CREATE TABLE ticks (Name STRING, Price DOUBLE)"]
STOCK = [{"symbol": f"S{i}", "risk": float(i * 10), "per": float(100 - i)} for i in range(10)]
S_ROWS = [{"sk": k, "b": float(k % 3), "c": float(k)} for k in range(4)]
SUBSCRIPTIONS = {
    "alice": {"m1": "SELECT MIN(per) FROM stock WHERE risk BETWEEN 10 AND 50",
              "t1": "SELECT symbol, per FROM stock WHERE risk BETWEEN 0 AND 60 ORDER BY per LIMIT 2",
              "f1": "SELECT rk, a FROM r WHERE a > 1"},
    "bob": {"m1": "SELECT MIN(per) FROM stock WHERE risk BETWEEN 30 AND 90",
            "d1": "SELECT DISTINCT per FROM stock WHERE risk BETWEEN 0 AND 60",
            "j1": "SELECT r.rk AS x, s.c FROM r JOIN s ON r.b = s.b"},
}
BULK_TEMPLATE = "SELECT MAX(per) FROM stock WHERE risk BETWEEN :lo AND :hi"
BULK_CSV = "id,lo,hi\nb0,0,40\nb1,20,70\nb2,50,95\n"
EVENT_QUERY = ("jump", "SELECT * FROM ticks NEXT{$1.Name = $2.Name} ticks")
#: (table, rows, mode, variant): Paint-Sparse is top-k's per-update variant, whose delivered rows are the
#: unicast rows one for one (Paint-Batch, the default, sends each subscriber its net change per batch)
BATCHES = [
    ("stock", [{"symbol": "S3", "risk": 30.0, "per": 1.0}, {"symbol": "S11", "risk": 35.0, "per": 0.5}], "unicast", None),
    ("stock", [{"symbol": "S3", "risk": 30.0, "per": 50.0}, {"symbol": "S6", "risk": 61.0, "per": 0.1},
               {"symbol": "S2", "_op": "delete"}], "reformulated", "Paint-Sparse"),
    ("r", [{"rk": 1, "a": 2.0, "b": 1.0}, {"rk": 2, "a": 0.5, "b": 2.0}, {"rk": 3, "a": 3.0, "b": 0.0}], "unicast", None),
    ("r", [{"rk": 1, "a": 0.0, "b": 2.0}, {"rk": 4, "a": 5.0, "b": 1.0}], "reformulated", None),
    ("ticks", [{"Name": "x", "Price": 1.0}, {"Name": "y", "Price": 2.0}, {"Name": "x", "Price": 3.0}], "unicast", None),
    ("stock", [{"symbol": "S11", "risk": 35.0, "per": 70.0}, {"symbol": "S4", "risk": 45.0, "per": 0.2},
               {"symbol": "S7", "risk": 20.0, "per": 0.3}], "reformulated", "Paint-Sparse"),
]
IDLE = 6.0   # seconds without a message that end a stream read (heartbeats come every second)


def _owner(row: dict) -> tuple[str, str] | None:
    key = row.get("subscription_id") or row.get("query")
    if not key or "." not in key:
        return None
    client, name = key.split(".", 1)
    return client, name


def normal(row: dict, name: str | None = None) -> str:
    """A notification as a comparable string: its non-null columns but the server's numbering, the
    group and the reason, under the client's subscription name."""
    out = {k: v for k, v in row.items() if v is not None and k not in ("client_seq", "group_id", "reason")}
    if name is not None:
        out["subscription_id"] = name
        if row.get("query"):
            out["query"] = name
    return json.dumps(out, sort_keys=True)


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    """The server (its engine durable in a temporary directory), the twin engine, and one token per role."""
    path = tmp_path_factory.mktemp("served")
    tokens = {"ops": issue_token(path, "ops", "admin"), "pub": issue_token(path, "pub", "publisher"),
              "alice": issue_token(path, "alice"), "bob": issue_token(path, "bob")}
    engine = Engine(spark, catalyst=False, path=path)
    engine.join_partitions = 2
    config = ServeConfig(max_body_bytes=64 * 1024, max_subscriptions_per_client=10, queue_limit=4,
                         heartbeat_seconds=1.0, stats_interval_seconds=0.0)
    server = BackgroundServer(create_app(engine, config)).start()
    twin = Engine(spark, catalyst=False)
    twin.join_partitions = 2
    ops = connect(server.url, tokens["ops"])
    for ddl in TABLES:
        assert ops.sql(ddl)["statement"] == "CREATE TABLE"
        twin.sql(ddl)
    for e in (engine, twin):   # initial rows, in-process (the server has no load endpoint)
        e.load("stock", STOCK)
        e.load("s", S_ROWS)
    clients = {name: connect(server.url, tokens[name]) for name in ("alice", "bob")}
    for client, subs in SUBSCRIPTIONS.items():
        for name, sql in subs.items():
            created = clients[client].sql(f"CREATE SUBSCRIPTION {name} AS {sql}")
            assert created == {"statement": "CREATE SUBSCRIPTION", "name": name, "after": 0}
            twin.subscribe(f"{client}.{name}", sql)
    bulk = httpx.post(f"{server.url}/subscriptions/bulk", params={"template": BULK_TEMPLATE}, content=BULK_CSV,
                      headers={"Authorization": f"Bearer {tokens['bob']}", "Content-Type": "text/csv"})
    assert bulk.status_code == 200 and bulk.json()["subscriptions"] == 3, bulk.text
    twin.subscribe_many(BULK_TEMPLATE, {"id": ["bob.b0", "bob.b1", "bob.b2"], "lo": [0.0, 20.0, 50.0],
                                        "hi": [40.0, 70.0, 95.0]})
    clients["alice"].sql(f"CREATE EVENT QUERY {EVENT_QUERY[0]} AS {EVENT_QUERY[1]}")
    twin.register_event_query(f"alice.{EVENT_QUERY[0]}", EVENT_QUERY[1])
    yield {"server": server, "engine": engine, "twin": twin, "tokens": tokens, "clients": clients, "ops": ops,
           "publisher": connect(server.url, tokens["pub"]), "config": config}
    server.stop()
    engine.close()


@pytest.fixture(scope="module")
def published(world):
    """Every batch published through the server (by the publisher) and to the twin; streams opened before
    and read after: ``{client: [notifications]}`` as the WebSocket streams delivered them, the twin's rows
    per client, the publish summaries."""
    streams = {c: client.notifications(after=0) for c, client in world["clients"].items()}
    got: dict[str, list] = {c: [] for c in streams}
    readers = [threading.Thread(target=lambda c=c: got[c].extend(streams[c]), daemon=True) for c in streams]
    for reader in readers:   # live while the batches are published
        reader.start()
    for stream in streams.values():
        assert stream.connected.wait(30)
    # a stream that reads the first notifications and stops, to be resumed from its last number later
    partial = world["clients"]["alice"].notifications(after=0, idle_timeout=IDLE)
    expected: dict[str, list[str]] = {"alice": [], "bob": []}
    summaries = []
    for table, rows, mode, variant in BATCHES:
        summaries.append(world["publisher"].publish(table, rows, mode=mode, variant=variant))
        for row in world["twin"].publish(table, rows).toArrow().to_pylist():
            owned = _owner(row)
            if owned is not None and row.get("op") not in ("rejected", "error"):
                expected[owned[0]].append(normal(row, owned[1]))
    deadline = time.monotonic() + 120
    while any(len(got[c]) < len(expected[c]) for c in got) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)   # nothing more may come
    for c, stream in streams.items():
        stream.close()
        readers[list(streams).index(c)].join(30)
    first = []
    for note in partial:
        first.append(note)
        if len(first) == 3:
            break
    partial.close()
    return {"got": got, "expected": expected, "summaries": summaries, "streams": streams, "first": first}


def test_remote_notifications_equal_the_in_process_unicast_output(published):
    for client in ("alice", "bob"):
        got = published["got"][client]
        assert sorted(normal(n) for n in got) == sorted(published["expected"][client]), client
        # numbered per client 1, 2, 3... in the order sent: nothing lost, nothing twice
        assert [n["client_seq"] for n in got] == list(range(1, len(got) + 1))
    got = {c: {n["subscription_id"] for n in published["got"][c]} for c in ("alice", "bob")}
    assert got["alice"] >= {"m1", "t1", "f1", "jump"} and got["bob"] >= {"m1", "d1", "j1"}
    assert any(n.startswith("b") for n in got["bob"])   # the bulk subscriptions
    # both modes ran, and the reformulated ones went through the edge's matching
    assert [s["mode"] for s in published["summaries"]].count("reformulated") == 3
    assert all(s["messages"] > 0 for s in published["summaries"] if s["mode"] == "reformulated")
    assert sum(s["rejected_count"] for s in published["summaries"]) == 0


def test_slow_streams_are_dropped_and_reconnect_without_loss(published):
    """A publish sends alice more than the queue limit (4) at once: her live streams were dropped and came
    back with their last number (the equality above holds all the same)."""
    per_publish = [s["notifications"] for s in published["summaries"]]
    assert max(per_publish) > 4
    assert any(s.reconnects > 0 for s in published["streams"].values())


def test_reconnect_with_seq_over_websocket_and_sse(world, published):
    alice = world["clients"]["alice"]
    whole = published["got"]["alice"]
    first = published["first"]
    assert first == whole[:3]
    rest = list(alice.notifications(after=first[-1]["client_seq"], idle_timeout=2.0))
    assert first + rest == whole
    # SSE with Last-Event-ID (what a browser's EventSource sends when it reconnects)
    events = _sse_events(world["server"].url, world["tokens"]["alice"], headers={"Last-Event-ID": "2"})
    notes = [json.loads(data) for kind, data, _ in events if kind == "notification"]
    assert [n["client_seq"] for n in notes] == [n["client_seq"] for n in whole[2:]]
    assert [dict(n["data"], client_seq=n["client_seq"]) for n in notes] == whole[2:]
    assert all(int(eid) == n["client_seq"] for (kind, _, eid), n in zip(
        [e for e in events if e[0] == "notification"], notes))
    # only one subscription's notifications
    m1 = list(alice.notifications(after=0, subscriptions=["m1"], idle_timeout=2.0))
    assert m1 == [n for n in whole if n["subscription_id"] == "m1"] and m1


def _sse_events(url: str, token: str, params=None, headers=None, seconds: float = 3.0) -> list:
    """(event, data, id) of an SSE stream read for ``seconds``."""
    out, fields = [], {}
    deadline = time.monotonic() + seconds
    with httpx.stream("GET", f"{url}/events", params={"token": token, **(params or {})}, headers=headers,
                      timeout=httpx.Timeout(seconds + 5)) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line == "":
                if "event" in fields:
                    out.append((fields["event"], fields.get("data"), fields.get("id")))
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
            if time.monotonic() > deadline:
                break
    return out


def test_clients_see_explain_and_drop_only_their_own(world, published):
    alice, bob = world["clients"]["alice"], world["clients"]["bob"]
    names = {c: {r["name"] for r in world["clients"][c].subscriptions()} for c in ("alice", "bob")}
    assert names["alice"] == {"m1", "t1", "f1", "jump"}
    assert names["bob"] == {"m1", "d1", "j1", "b0", "b1", "b2"}
    assert "BETWEEN 10 AND 50" in alice.explain("m1") and "BETWEEN 30 AND 90" in bob.explain("m1")
    assert "alice" not in alice.explain("m1")   # her own names, not the engine's ids
    before = _show(world)
    for call in (lambda: bob.explain("t1"), lambda: bob.drop("t1"), lambda: bob.sql("DROP SUBSCRIPTION f1"),
                 lambda: bob.sql("EXPLAIN SUBSCRIPTION jump"), lambda: bob.drop("jump"),
                 lambda: list(bob.notifications(subscriptions=["t1"], idle_timeout=2.0))):
        with pytest.raises(ServerError) as err:
            call()
        assert err.value.status == 404 and "among yours" in err.value.error
    assert _show(world) == before
    # the groups a client sees are its own subscriptions, counted; an admin sees every group
    assert sum(g["subscriptions"] for g in bob.groups()) == 6
    assert sum(g["subscriptions"] for g in world["ops"].groups()) >= 10
    # EXPLAIN DOT of an event query; DOT of a subscription is refused
    assert alice.sql("EXPLAIN SUBSCRIPTION jump", format="dot").startswith("digraph")
    with pytest.raises(ServerError, match="event queries"):
        alice.explain("m1", format="dot")


def _show(world) -> list:
    return sorted(world["engine"].subscription_table().column("name").to_pylist())


def _refused(response: httpx.Response, status: int, where: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "where"} and body["error"], body
    assert where in body["where"], body
    return body


def test_malformed_requests_are_refused_and_change_nothing(world, published):
    url, tokens = world["server"].url, world["tokens"]
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    pub = {"Authorization": f"Bearer {tokens['pub']}"}
    before = _show(world)
    seq_before = world["engine"].stats()["engine"]["next_seq"]
    body = _refused(httpx.post(f"{url}/statements", json={"sql": "CREATE SUBSCRIPTION x AS SELECT MIN(per FROM stock"},
                               headers=auth), 400, "sql line 1")
    _refused(httpx.post(f"{url}/statements", json={"sql": "CREATE SUBSCRIPTION x AS SELECT MIN(per) FROM nope"},
                        headers=auth), 400, "sql")
    _refused(httpx.post(f"{url}/statements", json={"sql": "CREATE SUBSCRIPTION m1 AS SELECT MIN(per) FROM stock"},
                        headers=auth), 409, "subscription name")
    _refused(httpx.post(f"{url}/statements", json={"sql": "SELECT * FROM stock"}, headers=auth), 400, "sql")
    _refused(httpx.post(f"{url}/statements", json={"sql": "SHOW SUBSCRIPTIONS; SHOW SUBSCRIPTIONS"}, headers=auth),
             400, "sql")
    _refused(httpx.post(f"{url}/statements", content=b"{not json", headers={**auth, "Content-Type": "application/json"}),
             400, "body")
    _refused(httpx.post(f"{url}/statements", content=b"<sql/>", headers={**auth, "Content-Type": "text/xml"}),
             415, "Content-Type")
    _refused(httpx.post(f"{url}/statements", json={"sql": "CREATE TABLE t2 (k STRING PRIMARY KEY)"}, headers=auth),
             403, "sql")
    _refused(httpx.post(f"{url}/subscriptions", json={"id": "bad name", "sql": "SELECT MIN(per) FROM stock"},
                        headers=auth), 400, "id")
    # tokens
    _refused(httpx.get(f"{url}/subscriptions"), 401, "Authorization")
    _refused(httpx.get(f"{url}/subscriptions", headers={"Authorization": "Bearer ssk_forged"}), 401, "Authorization")
    _refused(httpx.get(f"{url}/subscriptions", headers={"Authorization": "Basic abc"}), 401, "Authorization")
    # publishing: role, table, content type, size, rows
    rows = b'{"symbol": "S1", "risk": 10, "per": 5}\n'
    ndjson = {"Content-Type": "application/x-ndjson"}
    _refused(httpx.post(f"{url}/tables/stock/publish", content=rows, headers={**auth, **ndjson}), 403, "Authorization")
    _refused(httpx.post(f"{url}/tables/nope/publish", content=rows, headers={**pub, **ndjson}), 404, "table")
    _refused(httpx.post(f"{url}/tables/stock/publish", content=rows, headers={**pub, "Content-Type": "text/xml"}),
             415, "Content-Type")
    _refused(httpx.post(f"{url}/tables/stock/publish?mode=sideways", content=rows, headers={**pub, **ndjson}),
             400, "mode")
    big = rows * (world["config"].max_body_bytes // len(rows) + 1)
    _refused(httpx.post(f"{url}/tables/stock/publish", content=big, headers={**pub, **ndjson}), 413, "body")
    _refused(httpx.post(f"{url}/tables/stock/publish", content=b'{"symbol": "S1"\n', headers={**pub, **ndjson}),
             400, "body line 1")
    _refused(httpx.post(f"{url}/tables/stock/publish", content=b'{"symbol": "S1", "colour": 1}\n',
                        headers={**pub, **ndjson}), 400, "body")
    _refused(httpx.post(f"{url}/tables/stock/publish", content=b"symbol,risk\n", headers={**pub, "Content-Type": "text/csv"}),
             400, "body")
    # the per-client limit (10): bob holds 6, a bulk of 5 more is refused whole
    bulk = "id,lo,hi\n" + "".join(f"x{i},1,2\n" for i in range(5))
    _refused(httpx.post(f"{url}/subscriptions/bulk", params={"template": BULK_TEMPLATE}, content=bulk,
                        headers={"Authorization": f"Bearer {tokens['bob']}", "Content-Type": "text/csv"}),
             403, "body")
    assert "line 1" in body["where"]
    assert _show(world) == before
    assert world["engine"].stats()["engine"]["next_seq"] == seq_before


def test_health_metrics_and_openapi(world, published):
    url = world["server"].url
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    _refused(httpx.get(f"{url}/metrics"), 401, "Authorization")
    ws_url = url.replace("http://", "ws://") + f"/ws?token={world['tokens']['bob']}"
    with ws_connect(ws_url) as live:   # one connected client
        assert json.loads(live.recv(timeout=10))["type"] == "hello"
        text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {world['tokens']['ops']}"}).text
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values['sparksub_subscriptions{class="RANGE_MIN"}'] == 2
    assert values['sparksub_subscriptions{class="RANGE_MAX"}'] == 3
    assert values['sparksub_subscriptions{class="EVENT"}'] == 1
    assert values["sparksub_notifications_total"] == sum(len(v) for v in published["got"].values())
    assert values["sparksub_connected_clients"] >= 1
    assert values["sparksub_runtime_rebuilds_total"] >= 1
    assert "sparksub_notifications_per_second" in values and "sparksub_publish_lag_seconds" in values
    spec = httpx.get(f"{url}/openapi.json").json()
    routes = {r.path for r in world["server"].app.routes if not r.path.startswith("/static")}
    assert routes <= set(spec["paths"]), routes - set(spec["paths"])


def test_publish_is_idempotent_by_batch_id(world, published):
    publisher, alice = world["publisher"], world["clients"]["alice"]
    last = alice.me()["last_seq"]
    rows = [{"symbol": "S5", "risk": 50.0, "per": 0.05}]
    first = publisher.publish("stock", rows, batch_id="once")
    again = publisher.publish("stock", rows, batch_id="once")
    assert not first["duplicate"] and first["notifications"] > 0
    assert again["duplicate"] and again["notifications"] == 0
    notes = list(alice.notifications(after=last, idle_timeout=2.0))
    assert notes and {n["seq"] for n in notes} == {notes[0]["seq"]}
    assert all(n["value"] == 0.05 for n in notes if n["subscription_id"] == "m1")


def test_multi_process_server_gives_each_client_its_notifications_across_processes(spark, tmp_path):
    """A server with two fan-out processes (``BackgroundServer(workers=2)``: the engine's app on a Unix socket,
    the streams in two processes sharing the port by SO_REUSEPORT, fed by tailing the notification log).
    Four clients open six WebSocket streams each -- 24 connections, which the kernel spreads over both
    processes (checked) -- and the publisher publishes through a fan-out process (passed on to the engine's).
    Every stream must carry exactly its client's notifications (the twin engine's rows for its
    subscriptions), numbered 1, 2, 3... with no hole or repeat, although the queue limit (3) drops streams
    mid-publish and they reconnect with their last number -- to whichever process the kernel picks.  SSE
    with Last-Event-ID resumes through a fan-out process too, and /health counts the processes' streams."""
    path = tmp_path / "multi"
    names = [f"k{i}" for i in range(4)]
    tokens = {"ops": issue_token(path, "ops", "admin"), "pub": issue_token(path, "pub", "publisher"),
              **{c: issue_token(path, c) for c in names}}
    engine = Engine(spark, catalyst=False, path=path)
    twin = Engine(spark, catalyst=False)
    config = ServeConfig(queue_limit=3, heartbeat_seconds=1.0)
    with BackgroundServer(create_app(engine, config), workers=2) as server:
        connect(server.url, tokens["ops"]).sql(TABLES[0])
        twin.sql(TABLES[0])
        for e in (engine, twin):
            e.load("stock", STOCK)
        clients = {c: connect(server.url, tokens[c]) for c in names}
        for i, c in enumerate(names):   # overlapping ranges: an update may concern several clients
            sql = f"SELECT MIN(per) FROM stock WHERE risk BETWEEN {10 * i} AND {10 * i + 50}"
            clients[c].sql(f"CREATE SUBSCRIPTION m AS {sql}")
            twin.subscribe(f"{c}.m", sql)
        streams = [(c, clients[c].notifications(after=0)) for c in names for _ in range(6)]
        got: list[list] = [[] for _ in streams]
        readers = [threading.Thread(target=lambda j=j, s=s: got[j].extend(s), daemon=True)
                   for j, (_, s) in enumerate(streams)]
        for r in readers:
            r.start()
        for _, s in streams:
            assert s.connected.wait(30)
        deadline = time.monotonic() + 5
        while sum(p["connections"] for p in server.pool.per_process()) < 24 and time.monotonic() < deadline:
            time.sleep(0.05)
        per_process = [p["connections"] for p in server.pool.per_process()]
        assert sum(per_process) == 24 and min(per_process) > 0, per_process   # both processes hold streams
        assert httpx.get(f"{server.url}/health").json()["connections"] == 24
        publisher = connect(server.url, tokens["pub"])
        expected: dict[str, list[str]] = {c: [] for c in names}
        batches = [[{"symbol": f"N{j}", "risk": 5.0 + 4 * j, "per": 50.0 - 5 * j} for j in range(8)],   # 8 new minima
                   [{"symbol": "S3", "risk": 30.0, "per": 0.5}, {"symbol": "N2", "_op": "delete"},
                    {"symbol": "S5", "risk": 52.0, "per": 0.2}]]
        for rows in batches:
            summary = publisher.publish("stock", rows)
            assert summary["notifications"] > 0
            for row in twin.publish("stock", rows).toArrow().to_pylist():
                owned = _owner(row)
                if owned is not None and row.get("op") not in ("rejected", "error"):
                    expected[owned[0]].append(normal(row, owned[1]))
        assert max(len(v) for v in expected.values()) > config.queue_limit   # some stream is dropped
        deadline = time.monotonic() + 60
        while any(len(g) < len(expected[c]) for g, (c, _) in zip(got, streams)) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)   # nothing more may come
        for _, s in streams:
            s.close()
        for r in readers:
            r.join(30)
        for g, (c, _) in zip(got, streams):
            assert [normal(n) for n in g] == expected[c], c   # in the engine's order, nothing lost or repeated
            assert [n["client_seq"] for n in g] == list(range(1, len(expected[c]) + 1))
        assert sum(s.reconnects for _, s in streams) > 0
        assert sum(p["dropped_slow"] for p in server.pool.per_process()) > 0
        # SSE resuming after number 2, through a fan-out process: the rest of k0's stream
        events = _sse_events(server.url, tokens["k0"], headers={"Last-Event-ID": "2"})
        notes = [json.loads(data) for kind, data, _ in events if kind == "notification"]
        assert [dict(n["data"], client_seq=n["client_seq"]) for n in notes] == got[0][2:]
    engine.close()
