"""Placement by claim (runtime/placement.py): every replica of a job runs in exactly one task, the task whose
Python worker holds it when there is one; a retried task finds its own claim.  The claim helper is tested pure
(threads and processes racing on one board); the Spark test shows a partitioned group publishing with no
rebuild while two Python workers exist (Spark's PythonWorkerFactory gives no worker affinity)."""
from __future__ import annotations

import multiprocessing
import os
import threading
import time

import pytest

from sparksub.runtime import placement


def _holders(folder, count, who="elsewhere:1"):
    """Holder files naming a live worker (another host's: assumed alive) for each replica."""
    paths = []
    for j in range(count):
        path = folder / f"holder{j}"
        path.write_text(who)
        paths.append(str(path))
    return paths


def _race(folder, count, n_tasks, prefs, **kw):
    out, errors = {}, []
    start = threading.Barrier(n_tasks)

    def run(i):
        try:
            start.wait()
            out[i] = placement.claim(str(folder), i, count, prefs.get(i, []), n_tasks=n_tasks, wait_s=10.0, **kw)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    return out


@pytest.mark.parametrize("count,n_tasks", [(1, 2), (2, 2), (3, 5), (8, 8)])
def test_each_replica_claimed_exactly_once_and_preference_honoured(tmp_path, count, n_tasks):
    for trial in range(5):
        folder = tmp_path / f"{count}-{n_tasks}-{trial}"
        folder.mkdir()
        # task i's worker holds replica (i + trial) % count, for the first `count` tasks
        prefs = {i: [(i + trial) % count] for i in range(min(count, n_tasks))}
        out = _race(folder, count, n_tasks, prefs, holders=_holders(folder, count))
        ran = [j for j in out.values() if j is not None]
        assert sorted(ran) == list(range(count))                  # each replica in exactly one task
        assert all(out[i] == p[0] for i, p in prefs.items())      # each worker runs the one it holds
        assert sum(j is None for j in out.values()) == n_tasks - count


def test_a_task_without_a_held_replica_waits_for_the_one_that_holds_it(tmp_path):
    # one replica, two tasks: task 0's worker holds nothing and starts first; task 1 (holding it) comes later
    res = {}
    holders = _holders(tmp_path, 1)
    t0 = threading.Thread(target=lambda: res.setdefault(0, placement.claim(str(tmp_path), 0, 1, [], n_tasks=2,
                                                                             wait_s=5.0, holders=holders)))
    t0.start()
    threading.Event().wait(0.2)
    res[1] = placement.claim(str(tmp_path), 1, 1, [0], n_tasks=2)
    t0.join()
    assert res == {0: None, 1: 0}
    # all tasks started and none holds it: taken at once (no wait), whatever the holder file says
    for name, holders in (("cold", None), ("gone", _holders(tmp_path, 1))):
        other = tmp_path / name
        other.mkdir()
        t = time.monotonic()
        out = _race(other, 1, 2, {}, holders=holders)
        assert sorted(out.values(), key=str) == [0, None] and time.monotonic() - t < 2.0


def test_a_retried_task_finds_its_own_claim(tmp_path):
    first = placement.claim(str(tmp_path), 3, 4, [2], n_tasks=4)
    assert first == 2
    assert placement.claim(str(tmp_path), 3, 4, [0], n_tasks=4) == 2    # the retry: same replica
    assert placement.claim(str(tmp_path), 0, 4, [2], n_tasks=4) in (0, 1, 3)
    # one task per replica (the zones' rounds): preferred, then its own, then any left
    zones = tmp_path / "z"
    zones.mkdir()
    assert placement.claim(str(zones), 0, 2, [1, 0], kind="z") == 1
    assert placement.claim(str(zones), 1, 2, [1], kind="z") == 0
    assert placement.claim(str(zones), 0, 2, [], kind="z") == 1          # retried
    with pytest.raises(RuntimeError):
        placement.claim(str(zones), 2, 2, [], kind="z")


def _claim_in_process(args):
    folder, i, count, n_tasks, pref, holders = args
    return i, placement.claim(folder, i, count, pref, n_tasks=n_tasks, wait_s=10.0, holders=holders)


def test_processes_racing(tmp_path):
    count, n_tasks = 4, 6
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(n_tasks) as pool:
        holders = _holders(tmp_path, count)   # the extra tasks wait for the holders (however late they start)
        out = dict(pool.map(_claim_in_process, [(str(tmp_path), i, count, n_tasks, [i] if i < count else [],
                                                 holders) for i in range(n_tasks)]))
    assert {i: out[i] for i in range(count)} == {i: i for i in range(count)}
    assert [out[i] for i in range(count, n_tasks)] == [None, None]
    assert len([f for f in os.listdir(tmp_path) if f[0] == "c" and f[1:].isdigit()]) == count


def test_held_and_holder(tmp_path):
    from sparksub.runtime.replicas import _CACHE, Replica
    reps = [Replica("u", f"g#{j}", str(tmp_path / f"g{j}" / "base"), f"b{j}", log_length=2) for j in range(3)]
    _CACHE[("u", "g#1")] = ("b1", 2, object())
    _CACHE[("u", "g#2")] = ("old", 2, object())     # another base: not held
    try:
        assert placement.held(reps) == [1]
    finally:
        _CACHE.pop(("u", "g#1"))
        _CACHE.pop(("u", "g#2"))
    path = tmp_path / "holder"
    placement.note_holder(str(path))
    assert path.read_text() == placement.worker_id() and placement._alive(path.read_text())


# ---- through Spark ---------------------------------------------------------------------------------------

def _two_workers(spark) -> set:
    """A job of two tasks that overlap (keepalive's task body): two Python workers exist; their pids."""
    import pyarrow as pa

    from sparksub.runtime.keepalive import _holding_until
    hold = _holding_until(time.time() + 1.0)

    def pid(batches):
        yield from hold(batches)
        yield pa.RecordBatch.from_pydict({"n": pa.array([os.getpid()], pa.int64())})
    return {r.n for r in spark.range(0, 2, 1, 2).mapInArrow(pid, "n bigint").collect() if r.n > 1}


def _worker_rebuilds(e) -> int:
    rt = e.runtime_stats()["runtime"]
    return rt.get("rebuilds", 0) - rt["driver"].get("rebuilds", 0)


def _join_engine(spark, partitions):
    from sparksub import Engine
    e = Engine(spark)
    e.join_partitions = partitions
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b BIGINT)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b BIGINT, c DOUBLE)")
    e.subscribe_many("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :lo AND :hi AND s.c <= :c",
                     {"id": ["x", "y", "z"], "lo": [0.0, 2.0, 1.0], "hi": [3.0, 5.0, 9.0], "c": [4.0, 6.0, 9.0]})
    return e


@pytest.mark.spark
@pytest.mark.catalyst_independent
def test_a_partitioned_join_publishes_without_rebuilds_while_two_workers_exist(spark, monkeypatch):
    import random

    from sparksub.runtime import groups
    rnd = random.Random(3)
    e, twin = _join_engine(spark, 2), _join_engine(spark, 1)
    assert len(_two_workers(spark)) == 2

    def batch(table, step):
        key = "rk" if table == "r" else "sk"
        other = "a" if table == "r" else "c"
        return [{key: step * 10 + i, "b": i % 8, other: float(rnd.randint(0, 6))} for i in range(8)]

    def publish(step):
        # odd steps: the batches go to the tasks as files in the job's folder, even ones in the closure
        monkeypatch.setattr(groups, "INLINE_BYTES", 0 if step % 2 else 1 << 17)
        table = "r" if step % 2 == 0 else "s"
        rows = batch(table, step)
        got = sorted((r.subscription_id, r.op, r.seq, r.left_key, r.right_key) for r in e.publish(table, rows).collect())
        want = sorted((r.subscription_id, r.op, r.seq, r.left_key, r.right_key)
                      for r in twin.publish(table, rows).collect())
        assert got == want
        return got

    for step in range(3):   # warm-up: each partition built in some worker
        publish(step)
    warm = _worker_rebuilds(e)
    matched = 0
    for step in range(3, 11):
        if step == 7:
            assert len(_two_workers(spark)) == 2   # the idle queue reshuffled by another job
        matched += len(publish(step))
    assert matched > 0
    assert _worker_rebuilds(e) == warm, e.runtime_stats()["runtime"]["by_label"]


@pytest.mark.spark
@pytest.mark.catalyst_independent
def test_a_retried_task_finds_its_claim_and_gives_the_same_output(spark, tmp_path):
    import pyarrow as pa

    from sparksub import Engine
    from sparksub.operators.shared.schemas import publish_schema
    from sparksub.runtime import groups
    e = Engine(spark)
    e.sql("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE)")
    e.load("t", [{"k": k, "x": float(i), "y": float(10 - i)} for i, k in enumerate("abcdef")])
    e.subscribe("q", "SELECT MIN(y) FROM t WHERE x BETWEEN 1 AND 4")
    e.subscribe("w", "SELECT MAX(y) FROM t WHERE x BETWEEN 0 AND 5")
    state = e._tables["t"]
    reps = {r.replica_id: r for r in (e._replica(state, en) for en in e._groups.values())}
    rows = pa.table({"key": ["b"], "x": [2.0], "y": [0.5], "op": pa.array([0], pa.int8()),
                     "seq": pa.array([0], pa.int64())})
    tables = {rid: rows.append_column("group_id", pa.array([rid], pa.string())) for rid in reps}
    schema = publish_schema("unicast")
    body = lambda r, t: groups._run_group(r, t, "unicast", schema)   # noqa: E731
    spec = groups._Placed(tuple(reps[r] for r in sorted(reps)), tuple(tables[r] for r in sorted(reps)),
                          str(tmp_path / "job"), 3, (None, None))
    first = {i: pa.Table.from_batches(list(groups._placed_task(spec, i, body)), schema=schema) for i in range(3)}
    board = sorted(os.listdir(spec.folder))
    # each group claimed once and finished, one task empty; the MIN group notifies (0.5 is its new minimum)
    assert [f for f in board if f[0] in "cde"] == ["c0", "c1", "d0", "d1", "e2"]
    assert sum(t.num_rows for t in first.values()) >= 1
    for i in range(3):   # each task again (a retry): its own claim, the same rows (the group rebuilt)
        again = pa.Table.from_batches(list(groups._placed_task(spec, i, body)), schema=schema)
        assert again.to_pylist() == first[i].to_pylist()
