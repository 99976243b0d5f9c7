"""Durable engines (issue 16 item 6: ``Engine(path=...)``, ``journal.py``).

The oracle is an uninterrupted run of the same workload: a client that creates tables, registers
subscriptions of several classes (RANGE_MIN single and bulk, RANGE_TOPK, AGG, FILTER, SELECT_JOIN, an event
query; one dropped, some added and a second event query registered half-way) and publishes a deterministic
sequence of batches, each with ``batch_id``.  The same client is run in child processes that are killed
with SIGKILL -- between two publishes (one committed, its output not yet consumed by the client) and during a
publish -- and started again on the same directory until every batch is done; checkpoints are taken every
10 journal records, so reopens read a checkpoint and replay the journal after it.  Each new child
reads what it missed with ``notifications(since_seq=...)`` and goes on with the first batch the engine has
not committed (``committed(batch_id)``).  The notifications collected across the kills, the kept
notifications, ``SHOW SUBSCRIPTIONS``, every subscription's ``result()`` and the event queries' ``matches()``
must equal the uninterrupted run's.  Also: a clean close and reopen (against a temporary engine fed the same
operations), a reopen after ``DROP SUBSCRIPTION`` and a ``subscribe_many`` of 100K (timed, printed), the lock,
a torn journal record, the retention window.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sparksub import Engine
from sparksub.errors import DirectoryLocked, InvalidArgument

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_independent]   # engines without the extension in both runs

TABLES = ["stock", "ticks", "orders", "stock", "ticks", "stock", "orders", "ticks"]
N_BATCHES = len(TABLES)
SETTINGS = {"parallelism": 2, "event_partitions": 2, "join_partitions": 2}
MIN_TEMPLATE = "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi"
TOPK_TEMPLATE = "SELECT symbol, per FROM stock WHERE risk BETWEEN :lo AND :hi ORDER BY per LIMIT 3"
EVENT_QUERIES = {"pairs": "SELECT * FROM ticks NEXT{$1.Name = $2.Name} ticks",
                 "rise": "SELECT * FROM FILTER{Price > 1.05 * Price_1}(ticks NEXT{$1.Name = $2.Name} ticks)"}


# ---- the workload (the client's side: every step idempotent, so that a restarted client can redo it) ----

def _bulk(prefix: str, n: int, seed: int) -> dict:
    rng = random.Random(seed)
    lo = [round(rng.uniform(0, 60), 1) for _ in range(n)]
    return {"id": [f"{prefix}{i}" for i in range(n)], "lo": lo, "hi": [x + round(rng.uniform(0, 30), 1) for x in lo]}


def setup(engine: Engine) -> None:
    """Tables, rows, subscriptions, the event query: each step unless done (a kill may cut setup short); once
    the event query, the last step, is there, setup is over (later steps drop some of its subscriptions)."""
    if "pairs" in engine.event_queries():
        return
    for name, value in SETTINGS.items():
        if getattr(engine, name) != value:
            setattr(engine, name, value)
    tables = {t.name for t in engine.catalog}
    if "stock" not in tables:
        engine.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    if "orders" not in tables:
        engine.sql("CREATE TABLE orders (oid STRING PRIMARY KEY, symbol STRING, qty DOUBLE)")
    if "ticks" not in tables:
        engine.sql("CREATE TABLE ticks (Name STRING, Price DOUBLE, Volume BIGINT)")
    if engine.table("stock").count() == 0:
        engine.load("stock", [{"symbol": f"s{i}", "risk": 2.0 * i, "per": float((37 * i) % 100 + 1)}
                              for i in range(40)])
    ids = set(engine.subscription_ids())
    if "m1" not in ids:
        engine.sql("CREATE SUBSCRIPTION m1 AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60")
    if "mn0" not in ids:
        engine.subscribe_many(MIN_TEMPLATE, _bulk("mn", 30, 1))
    if "tk0" not in ids:
        engine.subscribe_many(TOPK_TEMPLATE, _bulk("tk", 20, 2))
    if "cnt" not in ids:
        engine.sql("CREATE SUBSCRIPTION cnt AS SELECT COUNT(*) FROM stock WHERE risk BETWEEN 10 AND 40")
    if "big" not in ids:
        engine.sql("CREATE SUBSCRIPTION big AS SELECT * FROM ticks WHERE Price > 50")
    if "jn" not in ids:
        engine.sql("CREATE SUBSCRIPTION jn AS SELECT * FROM stock JOIN orders ON stock.symbol = orders.symbol "
                   "WHERE stock.risk BETWEEN 0 AND 30")
    if "pairs" not in engine.event_queries():
        engine.sql(f"CREATE EVENT QUERY pairs AS {EVENT_QUERIES['pairs']}")


def prepare(engine: Engine, k: int) -> None:
    """The subscription changes made before batch ``k``."""
    if k == 3:
        engine.sql("DROP SUBSCRIPTION IF EXISTS m1")
        if "late0" not in set(engine.subscription_ids()):
            engine.subscribe_many(MIN_TEMPLATE, _bulk("late", 10, 3))
    if k == 5:
        engine.sql("DROP SUBSCRIPTION IF EXISTS tk3")
        if "rise" not in engine.event_queries():
            engine.register_event_query("rise", EVENT_QUERIES["rise"])


def batch(k: int) -> list[dict]:
    rng = random.Random(100 + k)
    table = TABLES[k]
    if table == "stock":
        rows = [{"symbol": f"s{rng.randrange(50)}", "risk": round(rng.uniform(0, 80), 1),
                 "per": round(rng.uniform(1, 100), 1), "_op": "upsert"} for _ in range(8)]
        return rows + [{"symbol": f"s{k}", "_op": "delete"}]
    if table == "orders":
        return [{"oid": f"o{rng.randrange(12)}", "symbol": f"s{rng.randrange(40)}", "qty": float(rng.randrange(1, 9)),
                 "_op": "upsert"} for _ in range(5)]
    return [{"Name": rng.choice(["IBM", "MSFT", "ORCL"]), "Price": round(rng.uniform(10, 100), 1),
             "Volume": rng.randrange(1, 1000)} for _ in range(6)]


def canon(v):
    """A value as JSON can hold it and compare it (sets sorted, numpy scalars as Python)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (set, frozenset)):
        return sorted((canon(x) for x in v), key=repr)
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    if isinstance(v, dict):
        return {str(k): canon(x) for k, x in v.items()}
    return v


def rows_of(df) -> list[str]:
    """A DataFrame's rows, sorted, each as canonical JSON without its null columns (a file read back may
    merge in a column another batch had)."""
    return sorted(json.dumps({k: canon(v) for k, v in r.items() if v is not None}, sort_keys=True, default=str)
                  for r in df.toArrow().to_pylist())


def final_state(engine: Engine) -> dict:
    return {"show": rows_of(engine.sql("SHOW SUBSCRIPTIONS")),
            "results": {sid: canon(engine.result(sid)) for sid in sorted(engine.subscription_ids())},
            "matches": {q: canon(engine.matches(q)) for q in engine.event_queries()},
            "kept": rows_of(engine.notifications()),
            "next_seq": engine.stats()["engine"]["next_seq"]}


def _write_json(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, sort_keys=True))
    os.replace(tmp, path)


def _progress(out: Path) -> list[tuple[str, int, int]]:
    """The client's progress lines (``begin k``, ``committed k``, ``done k``); a torn last line is not one."""
    path = out / "progress"
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]
    return [(p[0], int(p[1]), int(p[2]) if len(p) > 2 else -1) for p in (line.split() for line in lines)]


def run_client(engine: Engine, out: Path, pause_after: int = -1) -> None:
    """The client: setup, then every batch not yet consumed -- first the one the engine committed while the
    client before was killed (read back with ``notifications``), then publish the rest with their batch
    ids.  Consuming a batch: its notifications to ``out/batch-<k>.json``, then a ``done`` line."""
    out.mkdir(parents=True, exist_ok=True)

    def line(*words):
        with open(out / "progress", "a") as fh:
            fh.write(" ".join(map(str, words)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def consume(k, rows):
        _write_json(out / f"batch-{k}.json", rows)
        line("done", k)

    done = {k for what, k, _ in _progress(out) if what == "done"}
    engine.checkpoint_interval = 10   # checkpoints mid-run: a reopen reads one and replays the journal after it
    setup(engine)
    k = max(done) + 1 if done else 0
    if k < N_BATCHES and engine.committed(k):
        # committed before the kill, never consumed: what the client missed is kept in the engine, from the
        # batch's first seq on (every row of a publish takes one seq: the batches before took these)
        since = sum(len(batch(j)) for j in range(k))
        missed = rows_of(engine.notifications(since_seq=since))
        assert rows_of(engine.publish(TABLES[k], batch(k), batch_id=k)) == missed   # not applied twice
        consume(k, missed)
        k += 1
    for k in range(k, N_BATCHES):
        prepare(engine, k)
        line("begin", k)
        rows = rows_of(engine.publish(TABLES[k], batch(k), batch_id=k))
        if k == pause_after:
            line("committed", k)
            time.sleep(600)
        consume(k, rows)
    _write_json(out / "final.json", final_state(engine))


CHILD = """\
import os, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from sparksub import Engine
from sparksub.engine import spark_session
import test_durable
spark = spark_session("local[1]", catalyst=False)
engine = Engine(spark, catalyst=False, path=sys.argv[1])
test_durable.run_client(engine, Path(sys.argv[2]), int(os.environ.get("PAUSE_AFTER", "-1")))
"""


def _child(script: Path, path: Path, out: Path, log: Path, pause_after: int = -1) -> subprocess.Popen:
    env = {**os.environ, "PAUSE_AFTER": str(pause_after), "SPARKSUB_CATALYST": "off",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "ab") as fh:
        # its own process group: the kill takes the JVM and the Python workers with it, as a machine's death
        return subprocess.Popen([sys.executable, str(script), str(path), str(out)], env=env, stdout=fh, stderr=fh,
                                start_new_session=True)


def _wait_for(child: subprocess.Popen, out: Path, what: str, k: int, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(w == what and n == k for w, n, _ in _progress(out)):
            return
        if child.poll() is not None:
            pytest.fail(f"the client exited ({child.returncode}) before '{what} {k}':\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    pytest.fail(f"no '{what} {k}' within {timeout} s:\n{log.read_text()[-3000:]}")


def _kill(child: subprocess.Popen) -> None:
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def test_kill_and_reopen_continues_as_an_uninterrupted_run(spark, tmp_path):
    reference = Engine(spark, catalyst=False, path=tmp_path / "reference")
    run_client(reference, tmp_path / "reference-client")
    reference.close()
    want = {k: json.loads((tmp_path / "reference-client" / f"batch-{k}.json").read_text()) for k in range(N_BATCHES)}
    want_final = json.loads((tmp_path / "reference-client" / "final.json").read_text())

    script = tmp_path / "client.py"
    script.write_text(CHILD.format(tests=str(Path(__file__).parent)))
    path, out, log = tmp_path / "engine", tmp_path / "client", tmp_path / "client.log"
    rng = random.Random(16)
    # (each child pays a Spark start and cold Python workers: two kills keep the test within minutes)
    kills = [("committed", 3, 0.0, 3),                      # between publishes: committed, not yet consumed
             ("begin", 5, rng.uniform(0.1, 1.5), -1)]       # during a publish (or just after it), right after
                                                            # an event query joined the running class
    for what, k, delay, pause_after in kills:
        child = _child(script, path, out, log, pause_after)
        _wait_for(child, out, what, k, log)
        time.sleep(delay)
        _kill(child)
    # the last reopen, after the kill during a publish, in this process (the second child reopened after the first
    # kill in a new one): one child's Spark start and cold workers less
    reopened = Engine(spark, catalyst=False, path=path)
    try:
        run_client(reopened, out)
    finally:
        reopened.close()

    got = {k: json.loads((out / f"batch-{k}.json").read_text()) for k in range(N_BATCHES)}
    assert got == want                              # none lost, none repeated, none changed
    assert json.loads((out / "final.json").read_text()) == want_final
    assert sum(1 for w, _, _ in _progress(out) if w == "done") == N_BATCHES
    assert json.loads((path / "CURRENT").read_text())["checkpoint"] >= 2     # reopened from checkpoints too


def test_clean_close_and_reopen(spark, tmp_path):
    """A durable engine closed and reopened answers as a temporary engine fed the same operations."""
    durable, plain = Engine(spark, catalyst=False, path=tmp_path / "e"), Engine(spark, catalyst=False)
    for engine in (durable, plain):
        setup(engine)
        for k in range(4):
            prepare(engine, k)
            engine.publish(TABLES[k], batch(k), batch_id=k)
        engine.filter_shard_size = 7
    durable.close()
    with pytest.raises(Exception, match="closed"):
        durable.publish(TABLES[4], batch(4))
    reopened = Engine(spark, catalyst=False, path=tmp_path / "e")
    assert reopened.stats()["engine"]["journal_records"] == 0          # a checkpoint: nothing to replay
    assert {s: getattr(reopened, s) for s in SETTINGS} == SETTINGS and reopened.filter_shard_size == 7
    assert final_state(reopened) == final_state(plain)
    assert reopened.committed(3) and not reopened.committed(4)
    for k in range(4, N_BATCHES):
        prepare(reopened, k)
        prepare(plain, k)
        assert rows_of(reopened.publish(TABLES[k], batch(k), batch_id=k)) == \
            rows_of(plain.publish(TABLES[k], batch(k), batch_id=k)), k
    assert final_state(reopened) == final_state(plain)
    assert reopened.checkpoint_location("prices") == str(tmp_path / "e" / "streams" / "prices")
    reopened.close()


def test_reopen_after_drop_and_a_bulk_of_100k(spark, tmp_path):
    path = tmp_path / "bulk"
    engine = Engine(spark, catalyst=False, path=path)
    engine.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    rng = np.random.default_rng(7)
    engine.load("stock", {"symbol": [f"s{i}" for i in range(2000)], "risk": rng.uniform(0, 100, 2000),
                          "per": rng.uniform(0, 50, 2000)})
    n = 100_000
    lo = rng.uniform(0, 90, n)
    params = {"id": np.array([f"b{i}" for i in range(n)], dtype=object), "lo": lo, "hi": lo + rng.uniform(0, 10, n)}
    t0 = time.perf_counter()
    engine.subscribe_many(MIN_TEMPLATE, params)
    t_subscribe = time.perf_counter() - t0
    engine.sql("CREATE SUBSCRIPTION solo AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 5 AND 6")
    engine.sql("DROP SUBSCRIPTION b7")
    engine.publish("stock", [{"symbol": "s1", "risk": 50.0, "per": -1.0}], batch_id="first")
    sample = ["b0", "b1", "b99999", "solo", *[f"b{i}" for i in rng.integers(8, n, 20)]]
    want = {s: engine.result(s) for s in sample}
    ids = sorted(engine.subscription_ids())
    assert len(ids) == n and "b7" not in ids
    engine.close(checkpoint=False)               # as a kill would leave it: the journal is replayed
    t0 = time.perf_counter()
    from_journal = Engine(spark, catalyst=False, path=path)
    t_journal = time.perf_counter() - t0
    assert sorted(from_journal.subscription_ids()) == ids
    assert {s: from_journal.result(s) for s in sample} == want
    t0 = time.perf_counter()
    from_journal.close()                         # a checkpoint: the bulk's parameter table without b7
    t_checkpoint = time.perf_counter() - t0
    t0 = time.perf_counter()
    from_checkpoint = Engine(spark, catalyst=False, path=path)
    t_reopen = time.perf_counter() - t0
    assert sorted(from_checkpoint.subscription_ids()) == ids
    assert {s: from_checkpoint.result(s) for s in sample} == want
    assert from_checkpoint.committed("first") and from_checkpoint.sql("SHOW SUBSCRIPTIONS").count() == n
    from_checkpoint.close()
    print(f"\n100K subscribe_many: {t_subscribe:.2f} s; reopen replaying the journal {t_journal:.2f} s; "
          f"checkpoint {t_checkpoint:.2f} s; reopen from the checkpoint {t_reopen:.2f} s")


def test_one_live_engine_per_directory(spark, tmp_path):
    path = tmp_path / "locked"
    first = Engine(spark, catalyst=False, path=path)
    with pytest.raises(DirectoryLocked, match=str(os.getpid())):
        Engine(spark, catalyst=False, path=path)
    first.close()
    abandoned = Engine(spark, catalyst=False, path=path)
    del abandoned                                                  # no one's: not a live engine
    Engine(spark, catalyst=False, path=path).close()
    # another process holds it; once that process is dead, its lock is taken over
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from sparksub import Engine; "
                               "e = Engine(path=sys.argv[1]); print('ready', flush=True); time.sleep(600)", str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(DirectoryLocked, match=str(holder.pid)):
            Engine(spark, catalyst=False, path=path)
    finally:
        holder.kill()
        holder.wait()
    assert (path / "LOCK").read_text() == str(holder.pid)        # stale: its holder is dead
    taken = Engine(spark, catalyst=False, path=path)
    assert (path / "LOCK").read_text() == str(os.getpid())
    taken.close()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not an engine's")
    with pytest.raises(InvalidArgument, match="no sparksub engine"):    # never taken over
        Engine(spark, catalyst=False, path=tmp_path / "other")


def test_a_torn_journal_record_is_ignored(spark, tmp_path):
    path = tmp_path / "torn"
    engine = Engine(spark, catalyst=False, path=path)
    engine.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    engine.sql("CREATE SUBSCRIPTION x AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 2")
    engine.sql("CREATE SUBSCRIPTION y AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 3 AND 4")
    engine.close(checkpoint=False)
    (log,) = (path / "journal").glob("*.log")
    whole = log.read_bytes()
    log.write_bytes(whole[:-9])                                   # the last record cut mid-write
    engine = Engine(spark, catalyst=False, path=path)
    assert engine.subscription_ids() == ["x"]
    engine.subscribe("z", "SELECT MIN(per) FROM stock WHERE risk BETWEEN 5 AND 6")   # after the cut-off tail
    engine.close(checkpoint=False)
    with open(log, "ab") as fh:
        fh.write(b"123 0badc0de {\"op\": \"unsub")               # a torn header and body
    engine = Engine(spark, catalyst=False, path=path)
    assert sorted(engine.subscription_ids()) == ["x", "z"]
    engine.close()


def test_retention_window_and_batch_ids(spark, tmp_path):
    engine = Engine(spark, catalyst=False, path=tmp_path / "kept")
    engine.notification_retention_rows = 5
    engine.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE)")
    engine.sql("CREATE SUBSCRIPTION all AS SELECT COUNT(*) FROM t WHERE x BETWEEN 0 AND 100")
    for i in range(8):                                            # one notification per publish
        engine.publish("t", [{"k": f"k{i}", "x": 1.0, "y": 1.0}], batch_id=f"b{i}")
    assert engine.notifications("t").count() == 8
    engine.checkpoint()
    kept = engine.notifications("t").toArrow().to_pylist()
    assert sorted(r["seq"] for r in kept) == [3, 4, 5, 6, 7]       # the newest 5 rows
    assert engine.publish("t", [{"k": "zz", "x": 1.0, "y": 1.0}], batch_id="b1").count() == 0   # past the window
    assert engine.result("all") == 8                               # ... and not applied again
    assert engine.notifications(since_seq=6).count() == 2
    engine.close()
