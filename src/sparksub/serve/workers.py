"""A multi-process server: the engine in one process, the live streams spread over N fan-out processes.

Why: one process's event loop frames and writes every notification to every connection.  At 10,000
WebSocket connections that was 0.8-1.1 CPU-seconds per publish on one core (``docs/benchmarks/serving.md``),
so delivery took seconds behind the micro-batch, and a single asyncio loop cannot use a second core.  The
engine (its Spark session, its operators' state) cannot be split and need not be: it numbers and commits a
publish's notifications to the notification log, which is where the work per connection starts.

The design (``docs/architecture.md``, "Serving"):

* N fan-out processes (``fanout_worker.py``), each a uvicorn server listening on the public port with
  ``SO_REUSEPORT``, so the kernel spreads the connections over them; each serves ``/ws`` and ``/events``
  with its own Hub and passes every other request, unchanged, to the engine's process;
* the engine's process serves the app (``app.py``) on a Unix socket only (``EngineSide``: the app, plus the
  stream check the fan-out processes ask before they open a stream -- the owners and numbers live here);
* notifications travel through the notification log on disk, which the publish commits anyway: after each
  commit the engine's process sends every fan-out process a datagram (``FanoutPool.notify``) and each reads
  the new commits (``NotificationLog.commits_after``) for the clients it holds.  The publish's response goes
  as soon as the commit is made: the engine's process holds no connection to send to.

Measured (``docs/benchmarks/serving.md``, 10,000 connections): on the 2-core machine the benchmark ran on,
shared with other work, it was slower than one process (p99 beyond the micro-batch 3.9-4.6 s with 2 or 4
fan-out processes against 1.9-2.2 s): with no idle core the processes only add work (wake-ups, log reads,
a stream check per connection, finer interleaving).  It is for machines with cores to spare; the default
stays one process (``ServeConfig.fanout_workers = 0``).

What the processes share is a directory of sockets and a small counters file (``FanoutPool``), made fresh
per server under the temporary directory; the engine directory is not touched but for the log it writes.
A fan-out process ends when the engine's process closes its stdin (``stop``, or the process ending).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import mmap
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse

from sparksub.serve.fanout_worker import STATS_SLOT, STREAM_CHECK_PATH
from sparksub.serve.streams import StreamRefused, refusal_response

__all__ = ["EngineSide", "FanoutPool"]


class EngineSide:
    """The engine's app as the fan-out processes reach it on its Unix socket: every request as the app
    serves it, and the stream check at ``STREAM_CHECK_PATH`` (not one of the app's routes: those are its
    public API; a fan-out process refuses to pass that path on)."""

    def __init__(self, app):
        self.app = app
        self.state = app.state

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == STREAM_CHECK_PATH:
            request = Request(scope, receive)
            try:   # sse=True: the fan-out process forwards Last-Event-ID for SSE streams only
                client, after, subs = await self.app.state.stream_check(request, True)
            except StreamRefused as err:
                response = refusal_response(err)
            else:
                response = JSONResponse({"client": client, "after": after,
                                         "subscriptions": sorted(subs) if subs is not None else None})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class FanoutPool:
    """N fan-out processes on ``host:port`` (0: a free port, reserved here) for the app ``app``, whose
    engine side listens on ``engine_uds``.  ``start`` spawns them and waits until each listens; ``notify``
    is the log's commit listener; ``totals`` their counters, summed; ``stop`` ends them."""

    def __init__(self, app, workers: int, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        if workers < 1:
            raise ValueError(f"a fan-out pool needs at least one process, got {workers}")
        self.app, self.workers, self.host, self.log_level = app, workers, host, log_level
        self.config = app.state.config
        self.log = app.state.log
        # AF_UNIX paths are limited to ~107 bytes: a short directory of its own
        self.dir = Path(tempfile.mkdtemp(prefix="sparksub-fanout-"))
        self.engine_uds = str(self.dir / "engine.sock")
        self._wakes = [str(self.dir / f"wake-{i}.sock") for i in range(workers)]
        # the port: bound (not listening) with SO_REUSEPORT, so that it stays ours and the fan-out processes
        # can join it; a socket that does not listen is given no connection
        self._reserved = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self._reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self._reserved.bind((host, port))
        self.port = self._reserved.getsockname()[1]
        self._stats_file = self.dir / "counters"
        self._stats_file.write_bytes(bytes(STATS_SLOT.size * workers))
        with open(self._stats_file, "r+b") as f:
            self._stats = mmap.mmap(f.fileno(), 0)
        self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sender.setblocking(False)
        self.procs: list[subprocess.Popen] = []

    def start(self, timeout: float = 60.0) -> "FanoutPool":
        fields = {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)}
        for i in range(self.workers):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "sparksub.serve.fanout_worker", "--slot", str(i), "--host", self.host,
                 "--port", str(self.port), "--engine-uds", self.engine_uds, "--log-file", str(self.log.file),
                 "--wake", self._wakes[i], "--stats", str(self._stats_file), "--config", json.dumps(fields),
                 "--log-level", self.log_level],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1))
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            line = ""
            while not line.startswith("ready"):   # the process says so once uvicorn listens
                line = proc.stdout.readline()
                if not line or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"a fan-out process did not start (exit code {proc.poll()})")
        self.log.listeners.append(self.notify)
        self.app.state.hub.remote = self
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def notify(self, commit: int) -> None:
        """Wake every fan-out process (after a commit; in the committing thread, never blocking: a process
        whose wake queue is full is awake already, and each reads the log at least every second anyway)."""
        for path in self._wakes:
            with contextlib.suppress(OSError):
                self._sender.sendto(b"c", path)

    def per_process(self) -> list[dict]:
        """Each fan-out process's counters (as it last wrote them, every 0.25 s)."""
        keys = ("connections", "clients", "queue_depth", "dropped_slow")
        return [dict(zip(keys, STATS_SLOT.unpack_from(self._stats, i * STATS_SLOT.size))) for i in range(self.workers)]

    def totals(self) -> dict:
        each = self.per_process()
        return {"connections": sum(c["connections"] for c in each), "clients": sum(c["clients"] for c in each),
                "queue_depth": max((c["queue_depth"] for c in each), default=0),
                "dropped_slow": sum(c["dropped_slow"] for c in each)}

    def stop(self, timeout: float = 15.0) -> None:
        if self.notify in self.log.listeners:
            self.log.listeners.remove(self.notify)
        if self.app.state.hub.remote is self:
            self.app.state.hub.remote = None
        for proc in self.procs:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write("quit\n")
                proc.stdin.close()
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            with contextlib.suppress(OSError, ValueError):
                proc.stdout.close()
        self.procs = []
        self._sender.close()
        self._reserved.close()
        self._stats.close()
        shutil.rmtree(self.dir, ignore_errors=True)
