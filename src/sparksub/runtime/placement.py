"""Which task of a job runs which replica: claims on a board of files (issue 16: zero rebuilds).

A replica's materialised operator is cached in the Python worker that last ran it (``replicas.py``).  Spark
gives a task no affinity to a Python worker: ``PythonWorkerFactory`` keeps its idle workers in a FIFO queue (a
task takes the head, a finished task's worker is enqueued at the tail) and the scheduler shuffles its offers.
So a fixed replica -> partition binding (a hash of the replica id, or partition i = replica i) lands a replica
on whichever worker the queue hands out -- a rebuild whenever that is not the one holding it.  Instead, a placed
job runs ``n_tasks`` explicit partitions over ``count`` replicas and each task *claims* the replica its own
worker holds; which replica a task runs is decided inside the task, where the worker's cache is visible.

The board is a folder of the publish (one file system, as for every replica file: docs/architecture.md):

* ``<kind>c<j>``: replica j is claimed; holds the claimant's task index.  Made by ``link(2)`` of a file already
  holding the index, so a claim is exclusive and never seen half-written; a retried task finds its own claim
  (the same replica, so the same output) before it tries anything else.
* ``<kind>t<i>``: task i registered -- the replicas its worker holds (JSON) -- when it has to choose among
  leftovers; ``<kind>e<i>``: task i ended with nothing to run (more tasks than replicas);
  ``<kind>d<j>``: replica j's task finished.

Every replica is claimed by exactly one task: claims are exclusive, and a task only gives up when every
replica is claimed.  This module is pure (no pyspark): the Spark job is ``runtime/groups.py``'s
:func:`~sparksub.runtime.groups.placed_frame` and ``runtime/zones.py``'s rounds.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Sequence

from sparksub.runtime.replicas import _CACHE, Replica, cached_position

__all__ = ["claim", "held", "done", "linger", "worker_id", "note_holder", "holder_path", "WAIT_S", "LINGER_S"]

#: how long a task whose worker holds none of the unclaimed replicas waits for the tasks whose workers do
WAIT_S = 1.0
#: how long a task that ran nothing waits for the job's replicas to finish before it releases its worker
LINGER_S = 30.0
_POLL_S = 0.003
HOLDER_FILE = "holder"


def worker_id() -> str:
    """This Python worker: host and process (a holder file's content)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def held(replicas: Sequence[Replica]) -> list[int]:
    """The indices of ``replicas`` this worker's cache holds at a usable position (same base, not ahead of the
    replica's log): the ones this worker runs without a rebuild."""
    return [j for j, r in enumerate(replicas) if cached_position(r, _CACHE.get((r.engine_uid, r.replica_id))) is not None]


def holder_path(replica: Replica) -> str:
    """The file naming the worker that last took the replica over (beside its bases: it outlives them)."""
    return os.path.join(os.path.dirname(replica.directory), HOLDER_FILE)


def note_holder(path: str) -> None:
    """Record this worker as the replica's holder (it is about to build the replica)."""
    try:
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as fh:
            fh.write(worker_id())
        os.replace(tmp, path)
    except OSError:
        pass   # advisory: a missing holder only makes another task take the replica without waiting


def _alive(holder: str | None) -> bool:
    """Whether the worker ``holder`` (``host:pid``) may still run a task (another host's: assumed so)."""
    if not holder or ":" not in holder:
        return False
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


class _Board:
    def __init__(self, folder: str, kind: str):
        self.folder, self.kind = folder, kind

    def path(self, what: str, n: int) -> str:
        return os.path.join(self.folder, f"{self.kind}{what}{n}")

    def claims(self, count: int) -> dict[int, int]:
        """replica -> claimant task."""
        out = {}
        for j in range(count):
            who = _read(self.path("c", j))
            if who:
                out[j] = int(who)
        return out

    def take(self, j: int, me: int) -> bool:
        tmp = os.path.join(self.folder, f".{self.kind}{me}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "w") as fh:
            fh.write(str(me))
        try:
            os.link(tmp, self.path("c", j))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def mark(self, what: str, n: int, text: str = "") -> None:
        tmp = os.path.join(self.folder, f".{self.kind}{what}{n}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, self.path(what, n))

    def marked(self, what: str, n: int) -> bool:
        return os.path.exists(self.path(what, n))

    def registrations(self, n_tasks: int) -> dict[int, list]:
        out = {}
        for t in range(n_tasks):
            raw = _read(self.path("t", t))
            if raw:
                out[t] = json.loads(raw)
        return out


def claim(folder: str, me: int, count: int, preferred: Sequence[int] = (), *, kind: str = "",
          n_tasks: int | None = None, wait_s: float = WAIT_S, holders: Sequence[str | None] | None = None,
          note: Sequence[str] | None = None) -> int | None:
    """The replica (index in ``range(count)``) task ``me`` runs, or None: nothing left for it.

    ``preferred``: the replicas this task's worker holds (:func:`held`), best first.  With ``n_tasks`` None (one
    task per replica, as the zones' rounds run) the task takes the first unclaimed of ``preferred`` and then of
    every replica, never waiting.  With ``n_tasks`` (possibly more tasks than replicas) a task whose worker holds
    none of the unclaimed replicas first lets the tasks that do claim theirs: it waits (at most ``wait_s``) while
    an unclaimed replica is held by a registered task that has not chosen yet, or -- while some of the job's
    tasks have not started -- by a live worker named in ``holders`` (the replica's holder files: such a task may
    still land there; PythonWorkerFactory hands workers out FIFO, not by affinity); it takes a replica at once
    when the tasks left could not cover the unclaimed ones otherwise, and ends (None) only when every replica is
    claimed.  ``note``: per replica, the holder file this task writes when it takes a replica its worker does not
    hold (:func:`note_holder`)."""
    board = _Board(folder, kind)
    for j, who in board.claims(count).items():   # a retried task: its own claim
        if who == me:
            return j
    if n_tasks is not None and board.marked("e", me):
        return None
    preferred = [j for j in dict.fromkeys(preferred) if 0 <= j < count]
    for j in preferred:
        if board.take(j, me):
            return j
    if n_tasks is None:
        for j in range(count):
            if board.take(j, me):
                _noted(note, j)
                return j
        raise RuntimeError(f"no replica left to claim in {folder}")
    board.mark("t", me, json.dumps(preferred))
    deadline = time.monotonic() + wait_s
    me_worker = worker_id()
    names = [_read(h) if h else None for h in holders] if holders is not None else [None] * count
    live = [n is not None and n != me_worker and _alive(n) for n in names]
    while True:
        claims = board.claims(count)
        left = [j for j in range(count) if j not in claims]
        if not left:
            board.mark("e", me)
            return None
        decided = set(claims.values()) | {t for t in range(n_tasks) if t != me and board.marked("e", t)}
        regs = board.registrations(n_tasks)
        unstarted = n_tasks - len(set(regs) | decided | {me})
        # replicas a registered task that has not chosen yet holds: it takes them in a moment
        pending = {j for t, hs in regs.items() if t != me and t not in decided for j in hs}
        # replicas a live worker holds that may still get one of the job's tasks
        elsewhere = {j for j in left if unstarted > 0 and live[j]}
        free = [j for j in left if j not in pending and j not in elsewhere]
        must = n_tasks - 1 - len(decided - {me}) < len(left)   # the others could not cover them all
        if free:
            pick = free
        elif must and not (pending & set(left)):
            pick = left
        elif time.monotonic() >= deadline:
            pick = [j for j in left if j not in pending] + [j for j in left if j in pending]
        else:
            time.sleep(_POLL_S)
            continue
        for j in pick:
            if board.take(j, me):
                _noted(note, j)
                return j


def _noted(note, j: int) -> None:
    if note is not None and note[j]:
        note_holder(note[j])


def done(folder: str, j: int, kind: str = "") -> None:
    """Replica j's task finished (what :func:`linger` waits for)."""
    _Board(folder, kind).mark("d", j)


def linger(folder: str, count: int, kind: str = "", cap_s: float = LINGER_S) -> None:
    """Wait (at most ``cap_s``) until every claimed replica's task finished.  A task that ran nothing then ends
    after the ones that ran replicas, so its worker is released -- enqueued in PythonWorkerFactory's FIFO of
    idle workers -- behind theirs, and the next job's tasks are handed the workers that hold replicas first."""
    board = _Board(folder, kind)
    end = time.monotonic() + cap_s
    while time.monotonic() < end:
        claims = board.claims(count)
        if all(board.marked("d", j) for j in claims):
            time.sleep(_POLL_S)   # the finished tasks' workers are released a moment after their last batch
            return
        time.sleep(_POLL_S)
