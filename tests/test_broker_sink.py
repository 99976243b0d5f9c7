"""Issue 17 item 3: the ``sparksub-redis`` Spark sink (``runtime/broker_sink.py``, ``broker.py``) against a real
``redis-server`` started here on a free loopback port (no persistence), with a real ``Engine``.

(a) batch: the Redis streams hold exactly the rows of ``engine.publish``'s output -- unicast, and reformulated
    with a FILTER's unicast rows beside the messages -- each in the stream its recipient reads; the oracle is
    the same DataFrame read on the driver (``toArrow``), routed and encoded here, independently of the sink;
(b) streaming: ``engine.stream`` into the sink, then a forced replay of the last micro-batch (its
    ``commits/<n>`` file deleted, the query restarted on the same checkpoint by a fresh engine): every
    notification is in Redis exactly once, and they are those a twin engine publishes in batches;
(c) the same batch written twice, and one task's rows written by a failed attempt (part of them) and then by
    its retry (all of them): no duplicates.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import time
from collections import Counter

import pytest

from sparksub import Engine, broker

REDIS = shutil.which("redis-server")


# ---- a real Redis ---------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    if REDIS is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    import redis
    for _ in range(3):  # a free port can be taken between the probe and the bind
        port = _free_port()
        proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(url).ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.05)
        if proc.poll() is None:
            break
    else:
        pytest.fail("redis-server did not start on a free port in 3 tries")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def r(redis_url):
    import redis
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


# ---- the oracle: routing and encoding as the issue and broker.py's docstring specify them ----------------------

def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _where(prefix: str, row: dict) -> str:
    if row["op"] in ("rejected", "error"):
        return f"{prefix}:{'rejected' if row['op'] == 'rejected' else 'errors'}"
    if row.get("subscription_id") is not None:
        return f"{prefix}:sub:{row['subscription_id']}"
    return f"{prefix}:group:{row['group_id']}"


def expected(prefix: str, arrow) -> Counter:
    """(stream, fields) of every row of a notifications table: non-null columns as text."""
    rows = arrow.to_pylist()
    return Counter((_where(prefix, row), frozenset((k, _text(v)) for k, v in row.items() if v is not None))
                   for row in rows)


def in_redis(r, prefix: str) -> tuple[Counter, list]:
    """(stream, fields without the message id) of every entry under ``prefix``, and the message ids."""
    got, ids = Counter(), []
    for key in r.scan_iter(match=f"{prefix}:*"):
        if r.type(key) != "stream":
            continue
        for _, fields in r.xrange(key):
            ids.append(fields.pop(broker.ID_FIELD))
            got[(key, frozenset(fields.items()))] += 1
    return got, ids


# ---- (a) + (c): batch ---------------------------------------------------------------------------------------

X_MAX = 40


def make_engine(spark) -> Engine:
    rnd = random.Random(3)
    e = Engine(spark)
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x INT, y DOUBLE)")
    e.load("t", [{"k": f"k{i}", "x": rnd.randint(0, X_MAX), "y": float(rnd.randint(0, 30))} for i in range(60)])
    lo = [rnd.randint(0, X_MAX) for _ in range(24)]
    e.subscribe_many("SELECT MIN(y) FROM t WHERE x BETWEEN :lo AND :hi",
                     {"id": [f"m{i}" for i in range(24)], "lo": lo, "hi": [a + rnd.randint(0, 8) for a in lo]})
    e.subscribe_many("SELECT MAX(y) FROM t WHERE x BETWEEN :lo AND :hi",
                     {"id": [f"M{i}" for i in range(6)], "lo": lo[:6], "hi": [a + 10 for a in lo[:6]]})
    return e


def updates(seed: int, n: int = 24) -> list[dict]:
    rnd = random.Random(seed)
    return [{"k": f"k{rnd.randint(0, 70)}", "x": rnd.randint(0, X_MAX), "y": float(rnd.randint(0, 30))}
            for _ in range(n)]


@pytest.mark.spark
@pytest.mark.catalyst_independent  # the sink writes what any engine outputs; the extension is not on its path
def test_batch_publish_lands_in_redis_exactly_once(spark, redis_url, r):
    from sparksub.runtime.broker_sink import _BatchWriter, write_notifications

    e = make_engine(spark)
    e.subscribe("hot", "SELECT k, y FROM t WHERE y >= 25")  # FILTER: unicast rows in reformulated output too
    bad = [{"k": "k1", "x": 3, "y": float("nan")}]  # set aside as a 'rejected' row

    # unicast: one stream per subscriber (+ the rejected row's)
    notes = e.publish("t", updates(1) + bad)
    write_notifications(notes, redis_url, prefix="uni")
    want = expected("uni", notes.toArrow())
    assert sum(want.values()) > 20 and max(want.values()) == 1  # the workload notifies; no two rows alike
    got, ids = in_redis(r, "uni")
    assert got == want
    assert len(set(ids)) == len(ids)
    assert any(k.startswith("uni:sub:m") for k, _ in want) and ("uni:rejected" in {k for k, _ in want})

    # reformulated: the messages in their groups' streams, the FILTER's rows in their subscriber's
    msgs = e.publish("t", updates(2) + updates(3), mode="reformulated")
    write_notifications(msgs, redis_url, prefix="ref", maxlen=10_000)
    table = msgs.toArrow()
    want = expected("ref", table)
    keys = {k for k, _ in want}
    assert any(k.startswith("ref:group:") for k in keys) and "ref:sub:hot" in keys
    got, _ = in_redis(r, "ref")
    assert got == want
    assert broker.stream_keys(redis_url, "ref") == sorted(keys)

    # (c) the same batch again: nothing appended, every row counted as a duplicate
    stats = r.hgetall("ref:stats")
    write_notifications(msgs, redis_url, prefix="ref", maxlen=10_000)
    assert in_redis(r, "ref")[0] == want
    again = r.hgetall("ref:stats")
    assert int(again["appended"]) == int(stats["appended"]) == table.num_rows
    assert int(again["duplicates"]) - int(stats["duplicates"]) == table.num_rows

    # (c) a task attempt that dies after part of its rows, then its retry with all of them: each row once
    options = broker.parse_options({"url": redis_url, "prefix": "retry"})
    batches = table.to_batches(max_chunksize=7)
    first = _BatchWriter(options).write(iter(batches[: max(1, len(batches) // 2)]))  # what a task runs
    retry = _BatchWriter(options).write(iter(batches))
    assert first.appended > 0 and retry.duplicates == first.appended
    assert retry.appended + first.appended == table.num_rows
    assert in_redis(r, "retry")[0] == expected("retry", table)

    # the reader: resumes after an entry id, and the typed decoding gives the values back
    key = "ref:sub:hot"
    entries = broker.read_stream(redis_url, key)
    assert entries and broker.read_stream(redis_url, key, after_id=entries[0][0]) == entries[1:]
    types = dict(msgs.dtypes)
    decoded = [broker.decode_entry(f, types) for _, f in entries]
    assert sorted(map(repr, decoded)) == sorted(
        repr({c: row[c] for c in types}) for row in table.to_pylist() if row.get("subscription_id") == "hot")


def test_bad_options_and_routes_are_named(redis_url):
    with pytest.raises(broker.BrokerError, match="route='nowhere'"):
        broker.parse_options({"url": redis_url, "route": "nowhere"})
    with pytest.raises(broker.BrokerError, match="url is required"):
        broker.parse_options({"prefix": "p"})
    with pytest.raises(broker.BrokerError, match="maxlen=-1 must be >= 0"):
        broker.parse_options({"url": redis_url, "maxlen": -1})
    with pytest.raises(broker.BrokerError, match="unknown sink option.*colour"):
        broker.parse_options({"url": redis_url, "colour": "red"})
    with pytest.raises(broker.BrokerError, match="deliver\\(\\) it first"):
        broker.stream_key("p", "subscriber", {"op": "new_min", "seq": 4, "group_id": "g", "subscription_id": None})
    assert broker.redact_url("redis://:s3cret@h:1/0") == "redis://:***@h:1/0"


# ---- (b): a stream, and a forced replay of its last micro-batch ------------------------------------------------

STREAM_SCHEMA = "k string, x int, y double, _seq bigint"
N_FILES, ROWS_PER_FILE = 2, 24


def _drop(src: str, tmp: str, f: int) -> None:
    path = os.path.join(tmp, f".f{f}")
    with open(path, "w") as fh:
        for j, row in enumerate(updates(100 + f, ROWS_PER_FILE)):
            fh.write(json.dumps(dict(row, _seq=f * ROWS_PER_FILE + j)) + "\n")
    os.rename(path, os.path.join(src, f"part-{f}.json"))


def _start(spark, redis_url, src, ckpt):
    from sparksub.runtime.broker_sink import notifications_sink
    df = make_engine(spark).stream("t", spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 1)
                                   .json(src))
    return notifications_sink(df, redis_url, ckpt, prefix="st")


def _key(fields) -> tuple:
    """An entry compared with a batch notification: who, what, for which update."""
    f = dict(fields)
    return (f.get("subscription_id"), f["op"], f.get("value"), f["seq"])


@pytest.mark.spark
@pytest.mark.catalyst_independent
def test_stream_replayed_micro_batch_creates_no_duplicates(spark, redis_url, r, tmp_path):
    src, tmp, ckpt = (str(tmp_path / n) for n in ("src", "tmp", "ckpt"))
    os.makedirs(src), os.makedirs(tmp)
    q = _start(spark, redis_url, src, ckpt)
    try:
        for f in range(N_FILES):
            _drop(src, tmp, f)
            q.processAllAvailable()
    finally:
        q.stop()
    before, ids = in_redis(r, "st")
    assert len(set(ids)) == len(ids)
    stats = r.hgetall("st:stats")
    assert int(stats["last_batch_id"]) == N_FILES - 1 and int(stats["duplicates"]) == 0

    # the oracle: a twin engine publishes the same files as batches (its own seqs, mapped back to _seq)
    twin, want = make_engine(spark), Counter()
    for f in range(N_FILES):
        first = twin._next_seq
        for row in twin.publish("t", updates(100 + f, ROWS_PER_FILE)).toArrow().to_pylist():
            row["seq"] = row["seq"] - first + f * ROWS_PER_FILE
            want[(row["subscription_id"], row["op"], None if row["value"] is None else repr(row["value"]),
                  str(row["seq"]))] += 1
    assert Counter(_key(f) for (_, f), n in before.items() for _ in range(n)) == want
    last_batch = sum(n for (_, f), n in before.items() if int(dict(f)["seq"]) >= (N_FILES - 1) * ROWS_PER_FILE)
    assert last_batch > 0

    # force the replay: the last micro-batch has its offsets but no commit; a fresh engine restarts the query
    last = N_FILES - 1
    for name in (str(last), f".{last}.crc"):
        path = os.path.join(ckpt, "commits", name)
        if os.path.exists(path):
            os.remove(path)
    q = _start(spark, redis_url, src, ckpt)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    after, ids = in_redis(r, "st")
    assert after == before and len(set(ids)) == len(ids)
    stats = r.hgetall("st:stats")
    assert int(stats["last_batch_id"]) == last  # the replay ran, and its rows were all found seen
    assert int(stats["duplicates"]) == last_batch and int(stats["appended"]) == sum(before.values())
