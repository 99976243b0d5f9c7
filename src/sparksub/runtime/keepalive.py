"""Keep the Python workers that cache replicas alive between publishes (issue 16: zero rebuilds after a pause).

A replica's materialised operator lives in the Python worker that last ran its task (``replicas.py``'s worker
cache).  Spark ends a Python worker that has been idle for 60 s (``PythonWorkerFactory``'s
``IDLE_WORKER_TIMEOUT_NS``: a constant in Spark 4.3, no setting changes it; ``spark.python.worker.reuse``
only decides whether workers are reused at all), so after any pause longer than a minute every group is
rebuilt from its files at the next publish: a 12 s publish at 1M subscriptions, where a warm one takes 1 s.

:class:`WorkerKeepAlive` is one daemon thread per SparkSession.  When the session's engines used the runtime
(:func:`touch`, called after each publish that ran operator tasks) within the last ``hold`` seconds, and
no such task ran for ``interval`` seconds, it runs one small job of ``slots`` tasks, each of which holds its
worker until a common deadline (:func:`_holding_until`), so that the tasks run side by side and each takes a
different idle worker off the factory's queue: every idle worker is used again before the 60 s pass.  It
reads and writes no state; a job that fails (the session stopped) ends the thread quietly.

Only DataFrame APIs (``range`` + ``mapInArrow``): it works on Spark Connect too.  One worker per task slot
is what ``local[n]`` and ``local-cluster`` give a job of ``slots`` tasks; a worker beyond that (more
concurrent Python tasks than slots in an earlier job) may still be ended, and its replicas rebuilt, as
before -- counted in ``engine.stats()['runtime']['rebuilds']``.
"""
from __future__ import annotations

import threading
import time
import weakref

import pyarrow as pa

__all__ = ["WorkerKeepAlive", "touch", "keeper_of", "keepalive_stats", "slots_of", "IDLE_WORKER_TIMEOUT_S"]

#: Spark's idle Python worker timeout (PythonWorkerFactory.IDLE_WORKER_TIMEOUT_NS, 1 minute in Spark 4.3)
IDLE_WORKER_TIMEOUT_S = 60.0
#: how long past the job's start its tasks hold their workers (more than the scheduler's delay between them)
HOLD_S = 1.5
#: how much longer a task whose worker caches no replica holds it: released after the ones that do
EMPTY_LAST_S = 0.3

_KEEPERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_KEEPERS_LOCK = threading.Lock()


def _holding_until(deadline: float):
    """A keep-alive task body: hold the worker until ``deadline`` (wall clock, set by the driver a moment
    ahead), so that the job's tasks overlap whatever the scheduling delay between them, and each takes a
    different idle worker (a task that finished early would hand its worker to the next one).  A worker whose
    cache holds no replica is held ``EMPTY_LAST_S`` longer: PythonWorkerFactory enqueues a released worker at
    the tail of its idle queue and hands out the head first, so the workers that hold replicas are then the
    ones the next publish's tasks get, and the empty ones are the ones left idle (to expire)."""
    def keep_worker_alive(batches):
        from sparksub.runtime.replicas import _CACHE
        for _ in batches:
            pass
        extra = 0.0 if _CACHE else EMPTY_LAST_S
        time.sleep(min(max(0.0, deadline - time.time()), 5.0) + extra)
        yield pa.RecordBatch.from_pydict({"n": pa.array([1], pa.int64())})
    return keep_worker_alive


class WorkerKeepAlive:
    """One session's keeper (see the module docstring).  ``interval``: run when no operator task ran for that
    long (below Spark's 60 s, with room for a loaded machine); ``hold``: keep workers warm for that long after
    the last use (None: as long as the session lives)."""

    def __init__(self, spark, slots: int, interval: float = 30.0, hold: float | None = 3600.0):
        self._spark = weakref.ref(spark) if _weakrefable(spark) else (lambda s=spark: s)
        self.slots = max(1, int(slots))
        self.interval = float(interval)
        self.hold = hold
        self.last_use = time.monotonic()
        self.runs = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sparksub-worker-keepalive", daemon=True)
        self._thread.start()

    def touch(self) -> None:
        self.last_use = time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _due(self, now: float) -> bool:
        idle = now - self.last_use
        return idle >= self.interval and (self.hold is None or idle <= self.hold + self.interval)

    def _loop(self) -> None:
        last_run = 0.0
        while not self._stop.wait(min(5.0, self.interval / 3)):
            now = time.monotonic()
            if not self._due(now) or now - last_run < self.interval:
                continue
            spark = self._spark()
            if spark is None:
                return
            try:
                hold = _holding_until(time.time() + HOLD_S)
                spark.range(0, self.slots, 1, self.slots).mapInArrow(hold, "n bigint").count()
                self.runs += 1
            except Exception:  # noqa: BLE001 - the session stopped or is stopping: nothing to keep warm
                self.failures += 1
                if self.failures >= 3:
                    return
            last_run = time.monotonic()


def _weakrefable(obj) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False


def keeper_of(spark, slots: int, interval: float = 30.0, hold: float | None = 3600.0) -> WorkerKeepAlive:
    """The session's keeper, started on first use (one thread per session whatever the number of engines)."""
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(spark) if _weakrefable(spark) else None
        if keeper is None or not keeper.alive:
            keeper = WorkerKeepAlive(spark, slots, interval, hold)
            if _weakrefable(spark):
                _KEEPERS[spark] = keeper
        else:
            keeper.slots = max(keeper.slots, int(slots))
            keeper.interval, keeper.hold = interval, hold
        return keeper


def touch(spark, slots: int, interval: float | None = 30.0, hold: float | None = 3600.0) -> None:
    """Note that operator tasks ran on ``spark`` now (``interval`` None: keeping workers warm is off)."""
    if interval is None:
        return
    keeper_of(spark, slots, interval, hold).touch()


def slots_of(spark) -> int | None:
    """The session keeper's tasks per job (one per task slot), None before the first publish or when keeping
    workers warm is off: a placed job runs at least that many tasks (``groups.placed_frame``)."""
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(spark) if spark is not None and _weakrefable(spark) else None
    return keeper.slots if keeper is not None and keeper.alive else None


def keepalive_stats(spark) -> dict:
    """The session keeper's counters (``engine.stats()['runtime']['keepalive']``): keep-alive jobs run and
    failed, the tasks per job, seconds since an operator task last ran; empty before the first publish."""
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(spark) if spark is not None and _weakrefable(spark) else None
    if keeper is None:
        return {}
    return {"runs": keeper.runs, "failures": keeper.failures, "running": keeper.alive, "slots": keeper.slots,
            "idle_s": round(time.monotonic() - keeper.last_use, 1)}
