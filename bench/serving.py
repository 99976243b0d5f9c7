#!/usr/bin/env python
"""Serving benchmark (issue 17): N concurrent WebSocket subscribers of ``sparksub serve`` on loopback, beside the
same notifications delivered by the Redis Streams sink, in one run.

    python bench/serving.py            # N = 1,000 and 10,000 subscribers, 100K subscriptions (~35-50 min, 2 cores)
    python bench/serving.py --paths ws --merge   # the WebSocket runs only (0 and 4 fan-out processes), Redis kept
    python bench/serving.py --quick    # N = 100 and 1,000, 10K subscriptions, fewer batches (~8 min)
    python bench/serving.py --out DIR  # write serving.md / .png / .json elsewhere (default docs/benchmarks/)

Run it holding the machine's Spark lock (``flock /tmp/sparksub-helper-spark.lock nice -n 10 python ...``):
every part starts a Spark JVM, one at a time.

**Workload.** ``bench/range_min.py``'s: a ``stock(symbol, risk, per)`` table of 100,000 rows and one range-MIN
group ``SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi`` of 100,000 subscriptions (10,000 with
``--quick``), the random-walk update stream with 0.5% spikes (fixed seeds).  Subscription ``i`` belongs to
client ``i // (subscriptions / N)`` (so 100 or 10 each); its engine id is ``c<k>.q<i>``, the id the server
gives subscription ``q<i>`` of client ``c<k>`` (``serve/ownership.py``).  Updates are published in batches of
1,000: one warm-up batch (unicast; the cold JVM, reported apart), then 5 unicast and 5 reformulated batches
(3 + 3 with ``--quick``).  Each batch is delivered completely before the next one is published.

**WebSocket path** (one run per N):

* the server: a child process (``--role server``) opens ``Engine(path=<temp dir>)`` on its own ``local[2]``
  session, loads the table, registers the subscriptions in-process with ``subscribe_many`` under the clients'
  ids (the server's ``Owners`` reads the ownership from the ids when the app is created), and runs
  ``create_app`` with the default ``ServeConfig`` under ``serve/background.py``'s uvicorn -- once per
  ``--workers`` entry: 0, the single-process server (the streams on the engine's event loop); K > 0, the
  multi-process server (``serve/workers.py``: the engine's app on a Unix socket, the streams in K fan-out
  processes sharing the port, fed by tailing the notification log), the same N, state and updates;
* tokens: one per client and one publisher token, in ``serve/tokens.json`` in the format of ``sparksub
  token`` (``serve/tokens.py``); the publisher's is issued by ``issue_token``, the N clients' are written in
  one go with the same hash and fields (``issue_token`` rewrites and fsyncs the whole file per token:
  quadratic at 10,000);
* the clients: ``--client-procs`` separate processes (``--role clients``, default 4, each a contiguous share of
  the N clients): asyncio, the ``websockets`` asyncio client, N connections to ``/ws?token=...&after=0``
  (opened 200 at a time per process; permessage-deflate off, no client pings),
  ``RLIMIT_NOFILE`` raised to its hard limit.  Each frame's arrival time (``time.monotonic``, one clock for
  every process of the machine; every notification of a frame arrives with it) and text are kept; only its
  head (``last_seq``, the count) is read live, the rest is parsed after the run.  A closed
  connection reconnects with ``after=<last client_seq>``, as ``sparksub.client`` does (counted);
* the publisher: this process, ``sparksub.client.Client.publish`` (Arrow IPC) to ``/tables/stock/publish``.

**Broker path** (the same N, the same updates): a ``redis-server`` (Debian's) started on a free loopback port
(no persistence); a child (``--role broker``) with its own engine and session publishes each batch in-process,
for reformulated batches plays the messages to the subscribers (``engine.deliver``, as the server does), and
writes the rows with ``write_notifications(..., route='subscriber')`` (the ``sparksub-redis`` sink, from the
Spark tasks) to one stream per subscription; N reader tasks in one separate process (``--role readers``,
``redis.asyncio``, one connection each) ``XREAD BLOCK`` the streams of their client's subscriptions.

**Figures, per batch** (medians over the timed batches of a mode; the warm-up batch apart):

* *micro-batch*: the publish call's own duration -- for the WebSocket path the HTTP publish request (the
  engine's Spark job, routing, numbering and committing to the notification log, handing to the fan-out);
  for the broker, ``publish`` (+ ``deliver``) and then the sink's write job, given apart;
* *latency*: each notification's arrival at its client minus the start of its batch's publish call
  (p50 / p99 over every notification of the timed batches of the mode), and the same *beyond the
  micro-batch*: arrival minus the end of the engine's part of the publish -- for the WebSocket path the
  call's start plus the server's own ``seconds`` for it (Spark job, routing, the log's commit; it starts
  after the request body arrived, so this end is early and the figure conservative), for the broker the
  end of ``publish`` (+ ``deliver``), the sink's write being delivery.  The server answers a publish once
  its notifications are committed, before their frames (``serve/fanout.py``), so arrival minus the end of
  the *call* is given apart ("beyond the call": the fan-out after the response).  Target (issue 17): p99
  beyond the micro-batch < 2 s at 10,000 subscribers;
* *delivered/s*: notifications of the batch / (last arrival - publish start); *fan-out/s*: / (last arrival -
  first arrival);
* *lost / extra / misrouted*: every client's notifications (subscription, seq, op, value) against the rows
  the broker child's in-process output (``publish`` or ``deliver``, ``toArrow``) says are that client's, as
  multisets -- counted, not asserted; for WebSocket also holes and repeats in each client's ``client_seq``;
* *CPU in the fan-out*: the server's (its processes' together) and the client process's CPU seconds
  (sampled every 50 ms) from the
  end of the micro-batch until the last notification arrived, over that time -- whether either was the
  bottleneck;
* *memory per connection*: the server's processes' VmRSS (summed) with N idle connections minus with none,
  / N (the Spark JVM is another process and holds no connection); the same for ``redis-server`` and N
  readers.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import queue
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
OUT_DIR = REPO / "docs" / "benchmarks"
TEMPLATE = "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi"
TABLE_DDL = "CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)"
PROTOCOL = "@@ "                       # lines a child writes to its stdout for this process
FRAME_PREFIX = '{"type":"notifications","last_seq":'
CONNECT_AT_ONCE = 200                  # handshakes in flight at a time
IDLE_GIVE_UP_S = 90.0                  # a batch's delivery is over when nothing arrived for this long
TARGET_P99_BEYOND_S = 2.0


# ============================================================================ the workload (every process)
def workload(rows: int, subs: int, n_updates: int):
    """(keys, xs, ys, sub lo, sub hi, update stream), from range_min.py's generators and seeds."""
    from range_min import make_objects, make_subscriptions, make_updates
    keys, xs, ys = make_objects(rows)
    _, lo, hi = make_subscriptions(subs)
    return keys, xs, ys, lo, hi, make_updates(ys, n_updates)


def client_name(k: int) -> str:
    return f"c{k:05d}"


def engine_ids(subs: int, clients: int):
    import numpy as np
    share = subs // clients
    return np.array([f"{client_name(i // share)}.q{i}" for i in range(subs)], dtype=object)


def batch_table(keys, xs, stream, b: int, size: int):
    from range_min import stock_batch
    return stock_batch(keys, xs, stream, b * size, (b + 1) * size)


def open_engine(rows: int, subs: int, clients: int, path):
    """A durable engine on a fresh local[2] session with the table loaded and the group registered."""
    import pyarrow as pa
    from sparksub import Engine
    from sparksub.runtime.session import spark_session
    keys, xs, ys, lo, hi, _ = workload(rows, subs, 0)
    spark = spark_session("local[2]", "sparksub-bench-serving", catalyst=False)
    engine = Engine(spark, catalyst=False, path=path)
    engine.sql(TABLE_DDL)
    engine.load("stock", pa.table({"symbol": keys.astype(str), "risk": xs, "per": ys}))
    engine.subscribe_many(TEMPLATE, {"id": engine_ids(subs, clients).astype(str), "lo": lo, "hi": hi})
    return spark, engine


def say(*words) -> None:
    print(PROTOCOL + " ".join(str(w) for w in words), flush=True)


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """CPU seconds of some processes, sampled every ``period`` s in a thread: their use over a past window
    (``used``), e.g. from the end of the engine's part of a publish -- known only after the call -- until the
    last notification arrived."""

    def __init__(self, pids, period: float = 0.05):
        self.pids, self.period = list(pids), period
        self.samples: list[tuple[float, list[float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), [cpu_s(p) for p in self.pids]))
            except OSError:
                return
            self._stop.wait(self.period)

    def used(self, t0: float, t1: float) -> list[float]:
        """CPU seconds of each process between the samples nearest ``t0`` and ``t1``."""
        import bisect
        times = [t for t, _ in self.samples]
        a = self.samples[max(0, min(len(times) - 1, bisect.bisect_left(times, t0)))][1]
        b = self.samples[max(0, min(len(times) - 1, bisect.bisect_left(times, t1)))][1]
        return [y - x for x, y in zip(a, b)]

    def stop(self):
        self._stop.set()
        self._thread.join(2)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# ============================================================================ child: the server
def role_server(a) -> None:
    from sparksub.serve import BackgroundServer, ServeConfig, create_app
    raise_nofile()
    t0 = time.monotonic()
    spark, engine = open_engine(a.rows, a.subs, a.clients, a.dir)
    # --workers K > 0: the multi-process server (serve/workers.py), the streams in K fan-out processes
    server = BackgroundServer(create_app(engine, ServeConfig()), workers=int(a.workers)).start()
    say("ready", server.url, os.getpid(), f"{time.monotonic() - t0:.1f}",
        ",".join(str(x) for x in server.pids) or "-")
    for line in sys.stdin:
        if line.strip() == "quit":
            break
    server.stop()
    spark.stop()
    os._exit(0)


# ============================================================================ child: the WebSocket clients
def role_clients(a) -> None:
    import asyncio
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake
    limit = raise_nofile()
    tokens = json.loads(Path(a.tokens).read_text())
    base = a.url.replace("http://", "ws://", 1)
    got: list = []                       # (client index, arrival, text)
    state = {"notes": 0, "reconnects": 0, "gaps": 0, "failed": 0, "closes": Counter(), "connected": 0}
    last_seq = [0] * len(tokens)

    async def one(idx: int, token: str, gate: asyncio.Semaphore, opened: asyncio.Event):
        first = True
        failures = 0
        while True:
            try:
                if first:
                    async with gate:
                        ws = await connect(f"{base}/ws?token={token}&after={last_seq[idx]}", max_size=None,
                                           ping_interval=None, compression=None, open_timeout=600, close_timeout=1)
                        await ws.recv()   # hello
                else:
                    ws = await connect(f"{base}/ws?token={token}&after={last_seq[idx]}", max_size=None,
                                       ping_interval=None, compression=None, open_timeout=600, close_timeout=1)
                    await ws.recv()
            except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed):
                failures += 1
                if failures > 20:
                    state["failed"] += 1
                    if first:
                        opened.set()
                    return
                await asyncio.sleep(min(2.0, 0.05 * 2 ** failures))
                continue
            if first:
                state["connected"] += 1
                first = False
                opened.set()
            try:
                async for msg in ws:
                    t = time.monotonic()
                    if msg.startswith(FRAME_PREFIX):
                        # one frame: its notifications all arrived at t; only its head is read here (the count
                        # and last_seq, for the progress and a reconnect), the rest is parsed after the run
                        got.append((idx, t, msg))
                        head_end = msg.index(",", len(FRAME_PREFIX))
                        last_seq[idx] = int(msg[len(FRAME_PREFIX):head_end])
                        state["notes"] += msg.count('{"client_seq":', head_end)
                    elif '"type":"gap"' in msg:
                        state["gaps"] += 1
            except ConnectionClosed as closed:
                state["closes"][closed.rcvd.code if closed.rcvd is not None else -1] += 1
            state["reconnects"] += 1

    def dumped(path: str) -> None:
        dump_ws(got, path, offset=a.offset)
        say("dumped", len(got), state["reconnects"], state["gaps"], json.dumps(dict(state["closes"])).replace(" ", ""))

    asyncio.run(connect_and_follow(
        [lambda gate, ev, i=i, tok=tok: one(i, tok, gate, ev) for i, tok in enumerate(tokens)], state, limit,
        reached=lambda: say("reached", state["notes"], state["reconnects"], state["gaps"]), dumped=dumped,
        progress=lambda: say("progress", state["notes"], state["reconnects"], state["gaps"])))


async def connect_and_follow(openers: list, state: dict, limit, reached, dumped, progress=None) -> None:
    """A clients child's life: open every client (``opener(gate, opened)`` coroutines, ``CONNECT_AT_ONCE`` at a
    time), say ``connected``, then follow the orchestra's commands on stdin, one per line: ``expect N IDLE``
    (wait for N notifications, then ``reached()``), ``progress`` (``progress()``: the count so far),
    ``dump PATH`` (``dumped(PATH)``), ``quit``."""
    import asyncio
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)
    t0 = time.monotonic()
    events = [asyncio.Event() for _ in openers]
    tasks = [asyncio.create_task(opener(gate, ev)) for opener, ev in zip(openers, events)]
    for ev in events:
        await ev.wait()
    say("connected", state["connected"], state["failed"], f"{time.monotonic() - t0:.2f}", limit)
    lines: asyncio.Queue = asyncio.Queue()
    threading.Thread(target=lambda: [loop.call_soon_threadsafe(lines.put_nowait, ln) for ln in sys.stdin],
                     daemon=True).start()
    while True:
        words = (await lines.get()).split()
        if not words:
            continue
        if words[0] == "expect":
            await wait_for_count(state, int(words[1]), float(words[2]))
            reached()
        elif words[0] == "progress" and progress is not None:
            progress()
        elif words[0] == "dump":
            dumped(words[1])
        elif words[0] == "quit":
            for t in tasks:
                t.cancel()
            os._exit(0)


async def wait_for_count(state: dict, target: int, idle_s: float) -> None:
    import asyncio
    seen, since = state["notes"], time.monotonic()
    while state["notes"] < target:
        await asyncio.sleep(0.02)
        if state["notes"] != seen:
            seen, since = state["notes"], time.monotonic()
        elif time.monotonic() - since > idle_s:
            return


def dump_ws(got: list, path: str, offset: int = 0) -> None:
    import numpy as np
    notes = [(i, at, note) for i, at, msg in got for note in json.loads(msg)["notifications"]]
    n = len(notes)
    idx, t = np.empty(n, np.int32), np.empty(n, np.float64)
    cseq, sub, seq, val = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n)
    ops = []
    for j, (i, at, m) in enumerate(notes):
        d = m["data"]
        idx[j], t[j], cseq[j] = i + offset, at, m["client_seq"]
        sub[j], seq[j] = int(d["subscription_id"][1:]), d["seq"]
        val[j] = np.nan if d.get("value") is None else d["value"]
        ops.append(d.get("op") or "")
    np.savez(path, client=idx, t=t, client_seq=cseq, sub=sub, seq=seq, value=val, op=np.array(ops, dtype="U16"))


# ============================================================================ child: the Redis readers
def role_readers(a) -> None:
    import asyncio
    import redis.asyncio as aioredis
    limit = raise_nofile()
    share = a.subs // a.clients
    got: list = []
    state = {"notes": 0, "failed": 0, "connected": 0, "errors": Counter()}
    host, port = a.redis.split("//", 1)[1].split("/", 1)[0].split(":")

    async def reader(k: int, gate: asyncio.Semaphore, opened: asyncio.Event):
        keys = {f"{a.prefix}:sub:{client_name(k)}.q{i}": "0-0" for i in range(k * share, (k + 1) * share)}
        # socket_timeout=None: redis-py 8's asyncio client times a read out after 5 s by default, which ends
        # an idle XREAD BLOCK 0 (and, after its retries, the reader)
        r = aioredis.Redis(host=host, port=int(port), decode_responses=True, single_connection_client=True,
                           socket_connect_timeout=600, socket_timeout=None)
        try:
            async with gate:
                await r.ping()
        except Exception:   # noqa: BLE001 -- counted, reported
            state["failed"] += 1
            opened.set()
            return
        state["connected"] += 1
        opened.set()
        try:
            while True:
                resp = await r.xread(keys, block=0)   # waits until an entry comes: no idle polling
                t = time.monotonic()
                for key, entries in resp or ():
                    for eid, fields in entries:
                        got.append((k, t, fields))
                        keys[key] = eid
                    state["notes"] += len(entries)
        except Exception as err:   # noqa: BLE001 -- a reader that gave up: counted, said in the log
            state["errors"][f"{type(err).__name__}: {str(err)[:80]}"] += 1
            print(f"reader {k}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)

    def dumped(path: str) -> None:
        dump_redis(got, path)
        say("dumped", len(got), json.dumps(dict(state["errors"])).replace(" ", "_"))

    asyncio.run(connect_and_follow(
        [lambda gate, ev, k=k: reader(k, gate, ev) for k in range(a.clients)], state, limit,
        reached=lambda: say("reached", state["notes"], 0, 0), dumped=dumped))


def dump_redis(got: list, path: str) -> None:
    import numpy as np
    n = len(got)
    idx, t = np.empty(n, np.int32), np.empty(n, np.float64)
    sub, seq, val = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n)
    ops = []
    for j, (k, at, f) in enumerate(got):
        idx[j], t[j] = k, at
        sub[j] = int(f["subscription_id"].split(".q", 1)[1])
        seq[j] = int(f["seq"])
        val[j] = float(f["value"]) if "value" in f else np.nan
        ops.append(f.get("op", ""))
    np.savez(path, client=idx, t=t, sub=sub, seq=seq, value=val, op=np.array(ops, dtype="U16"))


# ============================================================================ child: the broker's publisher
def role_broker(a) -> None:
    import numpy as np
    import pyarrow as pa
    from sparksub.runtime.broker_sink import write_notifications
    from sparksub.serve.service import _split_messages
    t0 = time.monotonic()
    spark, engine = open_engine(a.rows, a.subs, a.clients, a.dir)
    keys, xs, _, _, _, stream = workload(a.rows, a.subs, a.batch * a.n_batches)
    oracle = []
    say("ready", os.getpid(), f"{time.monotonic() - t0:.1f}")
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "publish":
            b, mode = int(words[1]), words[2]
            rows = batch_table(keys, xs, stream, b, a.batch)
            t_start = time.monotonic()
            df = engine.publish("stock", rows, mode)
            messages = 0
            if mode == "reformulated":
                direct, message_rows = _split_messages(df.toArrow())
                messages = message_rows.num_rows
                parts = [t for t in (direct, engine.deliver(message_rows).toArrow() if messages else None)
                         if t is not None and t.num_rows]
                out_df = spark.createDataFrame(pa.concat_tables(parts, promote_options="default")) if parts else None
            else:
                out_df = df
            t_published = time.monotonic()
            if out_df is not None and a.redis != "none":   # "none": the oracle only (--paths ws)
                write_notifications(out_df, a.redis, prefix=a.prefix, route="subscriber")
            t_end = time.monotonic()
            out = out_df.toArrow() if out_df is not None else None
            n = out.num_rows if out is not None else 0
            if out is not None:
                oracle.append(out.select(["subscription_id", "seq", "op", "value"]))
            say("published", b, f"{t_start:.6f}", f"{t_published:.6f}", f"{t_end:.6f}", n, messages)
        elif words[0] == "dump":
            table = pa.concat_tables(oracle) if oracle else None
            ids = table.column("subscription_id").to_pylist() if table is not None else []
            np.savez(words[1], sub=np.array([int(s.split(".q", 1)[1]) for s in ids], np.int64),
                     seq=table.column("seq").to_numpy() if table is not None else np.empty(0, np.int64),
                     value=table.column("value").to_numpy(zero_copy_only=False).astype(float)
                     if table is not None else np.empty(0),
                     op=np.array(table.column("op").to_pylist() if table is not None else [], dtype="U16"))
            say("dumped", len(ids))
        elif words[0] == "quit":
            break
    spark.stop()
    os._exit(0)


# ============================================================================ this process: the orchestra
class Child:
    """A child process of this script, talking the ``@@`` line protocol on its stdin / stdout."""

    def __init__(self, role: str, log_path: Path, **opts):
        args = [sys.executable, str(SCRIPT), "--role", role]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, bufsize=1, cwd=str(REPO))
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                self.lines.put(line[len(PROTOCOL):].split())
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, *words) -> None:
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()

    def expect(self, word: str, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{self.log_path.stem}: no '{word}' within {timeout:.0f} s; log tail:\n"
                                   + self.tail()) from None
            if got is None:
                raise RuntimeError(f"{self.log_path.stem} exited ({self.proc.poll()}); log tail:\n" + self.tail())
            if got and got[0] == word:
                return got[1:]

    def tail(self, n: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self, timeout: float = 120.0) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(maxclients: int, log_path: Path):
    import redis
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                 "--maxclients", str(maxclients), "--tcp-backlog", "4096"],
                                stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(url).ping():
                    return proc, url
            except redis.ConnectionError:
                time.sleep(0.05)
        proc.kill()
    raise RuntimeError("redis-server did not start on a free port in 3 tries")


def issue_client_tokens(path: Path, names: list[str]) -> list[str]:
    """Client tokens as ``sparksub token PATH --client NAME`` issues them (``serve/tokens.py``'s format and
    hash), written in one go: ``issue_token`` rewrites and fsyncs the whole file per token."""
    import secrets
    from sparksub.serve import tokens as tk
    file = tk.token_file(path)
    entries = tk._read(file)
    out = []
    for name in names:
        token = "ssk_" + secrets.token_urlsafe(32)
        entries.append({"client": name, "role": "client", "sha256": tk._digest(token), "issued": time.time()})
        out.append(token)
    tmp = file.with_suffix(".tmp-bench")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"tokens": entries}, f, indent=1)
    os.replace(tmp, file)
    return out


def plan_of(timed: int) -> list[str]:
    return ["unicast"] + ["unicast"] * timed + ["reformulated"] * timed


def run_websocket(n: int, a, work: Path, plan: list[str], updates, workers: int = 0) -> dict:
    from common import load_avg, log
    from sparksub.client import connect
    from sparksub.serve.tokens import issue_token
    keys, xs, stream = updates
    engine_dir = work / f"engine-ws-{workers}"
    pub_token = issue_token(engine_dir, "publisher", "publisher")
    t0 = time.monotonic()
    tokens = issue_client_tokens(engine_dir, [client_name(k) for k in range(n)])
    token_s = time.monotonic() - t0
    # the clients spread over a few processes (as N real subscribers are over their own machines): one asyncio
    # process reading 10,000 connections needed ~1 CPU s per publish, as much as the server's fan-out
    procs = max(1, min(a.client_procs, n))
    share = -(-n // procs)
    slices = [(k * share, tokens[k * share:(k + 1) * share]) for k in range(procs) if tokens[k * share:(k + 1) * share]]
    for k, (_, mine) in enumerate(slices):
        (work / f"tokens-{k}.json").write_text(json.dumps(mine))
    tag = f"ws {n}" + (f", {workers} fan-out" if workers else "")
    log(f"  [{tag}] server: engine, {a.subs:,} subscriptions, uvicorn ... (load {load_avg()})")
    server = Child("server", work / f"server-{workers}.log", dir=engine_dir, rows=a.rows, subs=a.subs, clients=n,
                   workers=workers)
    clients: list = []
    try:
        url, pid, setup_s, fanout = server.expect("ready", 1200)
        # the server's processes: the engine's, and the fan-out processes (their CPU and memory count too)
        pids = [int(pid)] + ([int(x) for x in fanout.split(",")] if fanout != "-" else [])
        time.sleep(2)
        rss0 = sum(rss_kb(x) for x in pids)
        log(f"  [{tag}] server up in {setup_s} s at {url}; RSS {rss0 / 1024:.0f} MB; connecting {n:,} clients ...")
        clients = [Child("clients", work / f"clients-{workers}-{k}.log", url=url, tokens=work / f"tokens-{k}.json",
                         offset=first) for k, (first, _) in enumerate(slices)]
        said = [c.expect("connected", 1800) for c in clients]
        ok, failed = sum(int(x[0]) for x in said), sum(int(x[1]) for x in said)
        connect_s, nofile = max(float(x[2]) for x in said), min(int(x[3]) for x in said)
        time.sleep(3)
        rss_n, client_rss = sum(rss_kb(x) for x in pids), sum(rss_kb(c.pid) for c in clients)
        log(f"  [{tag}] {ok} connected, {failed} failed, in {connect_s} s; server RSS {rss_n / 1024:.0f} MB "
            f"(+{(rss_n - rss0) / max(1, int(ok)):.1f} KB/connection)")
        publisher = connect(url, pub_token, timeout=1800)
        sampler = CpuSampler(pids + [c.pid for c in clients])
        batches, total = [], 0
        for b, mode in enumerate(plan):
            rows = batch_table(keys, xs, stream, b, a.batch)
            t_start = time.monotonic()
            summary = publish_once(publisher, rows, mode, f"bench-{b}")
            t_end = time.monotonic()
            total += summary["notifications"]
            reached, reconnects, gaps = wait_for_clients(clients, total, IDLE_GIVE_UP_S)
            t_done = time.monotonic()
            time.sleep(2 * sampler.period)
            t_engine = t_start + summary["seconds"]
            cpu = sampler.used(t_engine, t_done)
            cpu = [sum(cpu[:len(pids)]), sum(cpu[len(pids):])]   # the server's processes, the clients' processes
            batches.append({"batch": b, "mode": mode, "t_start": t_start, "t_end": t_end,
                            "notifications": summary["notifications"], "server_seconds": summary["seconds"],
                            "messages": summary.get("messages", 0), "unowned": summary["unowned"],
                            "clients": summary["clients"], "received_total": reached, "expected_total": total,
                            "t_engine": t_engine,
                            "reconnects": reconnects, "gaps": gaps, "wait_s": t_done - t_end,
                            # CPU the server's Python process / the client process used from the end of the
                            # engine's part until the last notification arrived (the fan-out): how near either
                            # was to a full core
                            "fanout_s": t_done - t_engine, "server_cpu_s": cpu[0], "client_cpu_s": cpu[1]})
            log(f"  [{tag}] batch {b} {mode}: {summary['notifications']:,} notifications to {summary['clients']:,} "
                f"clients; publish {t_end - t_start:.2f} s (server {summary['seconds']:.2f}); all received "
                f"{t_done - t_start:.2f} s after start ({reached:,}/{total:,}; load {load_avg()})")
        sampler.stop()
        stats = publisher.stats()
        publisher.close()
        closes: Counter = Counter()
        parts = []
        for k, c in enumerate(clients):
            c.send("dump", work / f"ws-{workers}-{k}.npz")
            closes.update(json.loads(c.expect("dumped", 1200)[3]))
            parts.append(work / f"ws-{workers}-{k}.npz")
        merge_npz(parts, work / f"ws-{workers}.npz")
        return {"n": n, "workers": workers, "connected": int(ok), "connect_failed": int(failed), "connect_s": float(connect_s),
                "nofile_limit": int(nofile), "token_issue_s": token_s, "setup_s": float(setup_s),
                "server_rss0_kb": rss0, "server_rssN_kb": rss_n, "client_rss_kb": client_rss,
                "batches": batches, "stats": {k: stats.get(k) for k in ("connections", "connected_clients",
                                                                           "dropped_slow", "queue_depth_max",
                                                                           "notifications_total")},
                "client_procs": len(clients), "closes": dict(closes), "file": str(work / f"ws-{workers}.npz")}
    finally:
        for c in clients:
            c.stop(60)
        server.stop(180)


def publish_once(publisher, rows, mode: str, batch_id: str) -> dict:
    """Publish a batch, once: a keep-alive connection the server closed as the request went out (a reset)
    is retried under the same ``batch_id``, which the engine applies at most once."""
    import httpx
    for attempt in range(3):
        try:
            return publisher.publish("stock", rows, mode=mode, batch_id=batch_id)
        except httpx.TransportError:
            if attempt == 2:
                raise
            time.sleep(0.5)


def wait_for_clients(clients: list, total: int, idle_s: float) -> tuple[int, int, int]:
    """Poll the clients' children until their notifications add up to ``total`` (or none came for ``idle_s``):
    (received, reconnects, gaps) summed.  The latencies are the arrival times the children recorded, not
    when this loop saw them."""
    seen, since = -1, time.monotonic()
    while True:
        for c in clients:
            c.send("progress")
        counts = [[int(x) for x in c.expect("progress", 600)] for c in clients]
        got = [sum(x[i] for x in counts) for i in range(3)]
        if got[0] >= total:
            return got[0], got[1], got[2]
        if got[0] != seen:
            seen, since = got[0], time.monotonic()
        elif time.monotonic() - since > idle_s:
            return got[0], got[1], got[2]
        time.sleep(0.05)


def merge_npz(parts: list, out: Path) -> None:
    import numpy as np
    loaded = [np.load(x) for x in parts]
    np.savez(out, **{k: np.concatenate([d[k] for d in loaded]) for k in loaded[0].files})


def run_oracle(n: int, a, work: Path, plan: list[str]) -> None:
    """The broker child without Redis: the same engine, state and updates, for the WebSocket path's delivery
    check when the Redis part is not run (``--paths ws``)."""
    from common import log
    log(f"  [oracle {n}] in-process engine, {a.subs:,} subscriptions ...")
    broker = Child("broker", work / "broker.log", dir=work / "engine-broker", rows=a.rows, subs=a.subs,
                   clients=n, redis="none", prefix="none", batch=a.batch, n_batches=len(plan))
    try:
        broker.expect("ready", 1200)
        for b, mode in enumerate(plan):
            broker.send("publish", b, mode)
            broker.expect("published", 3600)
        broker.send("dump", work / "oracle.npz")
        broker.expect("dumped", 600)
    finally:
        broker.stop(180)


def run_broker(n: int, a, work: Path, plan: list[str]) -> dict:
    from common import load_avg, log
    log(f"  [redis {n}] redis-server, {n:,} readers ... (load {load_avg()})")
    redis_proc, url = start_redis(n + 500, work / "redis.log")
    prefix = f"bench{n}"
    readers = broker = None
    try:
        time.sleep(1)
        rss0 = rss_kb(redis_proc.pid)
        readers = Child("readers", work / "readers.log", redis=url, clients=n, subs=a.subs, prefix=prefix)
        ok, failed, connect_s, _ = readers.expect("connected", 1800)
        time.sleep(3)
        rss_n, reader_rss = rss_kb(redis_proc.pid), rss_kb(readers.pid)
        log(f"  [redis {n}] {ok} readers connected, {failed} failed, in {connect_s} s; redis RSS "
            f"{rss0 / 1024:.1f} -> {rss_n / 1024:.1f} MB; publisher child: engine, {a.subs:,} subscriptions ...")
        broker = Child("broker", work / "broker.log", dir=work / "engine-broker", rows=a.rows, subs=a.subs,
                       clients=n, redis=url, prefix=prefix, batch=a.batch, n_batches=len(plan))
        _, setup_s = broker.expect("ready", 1200)
        batches, total = [], 0
        for b, mode in enumerate(plan):
            broker.send("publish", b, mode)
            _, t_start, t_pub, t_end, rows, messages = broker.expect("published", 3600)
            t_start, t_pub, t_end, rows = float(t_start), float(t_pub), float(t_end), int(rows)
            total += rows
            readers.send("expect", total, IDLE_GIVE_UP_S)
            reached = int(readers.expect("reached", 3600)[0])
            t_done = time.monotonic()
            batches.append({"batch": b, "mode": mode, "t_start": t_start, "t_published": t_pub, "t_end": t_end,
                            "t_engine": t_pub,
                            "notifications": rows, "messages": int(messages), "received_total": reached,
                            "expected_total": total, "wait_s": t_done - t_end})
            log(f"  [redis {n}] batch {b} {mode}: {rows:,} notifications; publish {t_pub - t_start:.2f} s + sink "
                f"{t_end - t_pub:.2f} s; all read {t_done - t_start:.2f} s after start ({reached:,}/{total:,}; "
                f"load {load_avg()})")
        broker.send("dump", work / "oracle.npz")
        broker.expect("dumped", 600)
        readers.send("dump", work / "redis.npz")
        reader_errors = json.loads(readers.expect("dumped", 1200)[1].replace("_", " "))
        return {"n": n, "connected": int(ok), "connect_failed": int(failed), "connect_s": float(connect_s),
                "setup_s": float(setup_s), "redis_rss0_kb": rss0, "redis_rssN_kb": rss_n, "reader_rss_kb": reader_rss,
                "reader_errors": reader_errors, "batches": batches, "file": str(work / "redis.npz"), "oracle": str(work / "oracle.npz")}
    finally:
        for c in (broker, readers):
            if c is not None:
                c.stop(180)
        redis_proc.terminate()
        redis_proc.wait(30)


# ============================================================================ analysis
def _keys(sub, seq, op, value) -> Counter:
    import numpy as np
    v = np.where(np.isnan(value), -1e300, value)
    return Counter(zip(sub.tolist(), seq.tolist(), op.tolist(), v.tolist()))


def analyse(got_file: str, oracle_file: str, run: dict, batch_size: int, subs: int, n: int, websocket: bool) -> dict:
    """Latency, rates and the delivery check of one path at one N (module docstring, "Figures")."""
    import numpy as np
    got, want = np.load(got_file), np.load(oracle_file)
    share = subs // n
    batches = run["batches"]
    t_start = np.array([b["t_start"] for b in batches])
    t_end = np.array([b["t_end"] for b in batches])
    t_engine = np.array([b.get("t_engine", b["t_end"]) for b in batches])   # older runs: the call's end
    b_of = got["seq"] // batch_size
    ok = (b_of >= 0) & (b_of < len(batches))
    lat = np.where(ok, got["t"] - t_start[np.clip(b_of, 0, len(batches) - 1)], np.nan)
    beyond = np.where(ok, got["t"] - t_engine[np.clip(b_of, 0, len(batches) - 1)], np.nan)
    beyond_call = np.where(ok, got["t"] - t_end[np.clip(b_of, 0, len(batches) - 1)], np.nan)
    # delivery: multisets of (subscription, seq, op, value), per client by construction (sub -> its owner)
    w, g = _keys(want["sub"], want["seq"], want["op"], want["value"]), _keys(got["sub"], got["seq"], got["op"], got["value"])
    lost = sum((w - g).values())
    extra = sum((g - w).values())
    misrouted = int(np.sum(got["sub"] // share != got["client"]))
    check = {"expected": int(sum(w.values())), "received": int(got["sub"].size), "lost": int(lost), "extra": int(extra),
             "misrouted": misrouted, "outside_batches": int(np.sum(~ok))}
    if websocket:
        holes = repeats = 0
        order = np.lexsort((got["client_seq"], got["client"]))
        c, s = got["client"][order], got["client_seq"][order]
        for k in np.unique(c):
            mine = s[c == k]
            u = np.unique(mine)
            repeats += int(mine.size - u.size)
            holes += int(u.max() - u.size) if u.size else 0
        check.update(client_seq_holes=holes, client_seq_repeats=repeats)
    per_batch = []
    for j, b in enumerate(batches):
        mine = b_of == j
        cnt = int(mine.sum())
        row = {"batch": j, "mode": b["mode"], "notifications": b["notifications"], "received": cnt,
               "micro_batch_s": b["t_end"] - b["t_start"], "engine_s": b.get("t_engine", b["t_end"]) - b["t_start"]}
        if "server_cpu_s" in b and b["fanout_s"] > 0:
            row["server_cpu_pct"] = 100 * b["server_cpu_s"] / b["fanout_s"]
            row["client_cpu_pct"] = 100 * b["client_cpu_s"] / b["fanout_s"]
        if "t_published" in b:
            row["publish_s"] = b["t_published"] - b["t_start"]
            row["sink_s"] = b["t_end"] - b["t_published"]
        if cnt:
            lj, bj, tj = lat[mine], beyond[mine], got["t"][mine]
            row["p99_beyond_call_s"] = float(np.percentile(beyond_call[mine], 99))
            last, first = tj.max(), tj.min()
            row.update(p50_s=float(np.percentile(lj, 50)), p99_s=float(np.percentile(lj, 99)),
                       p99_beyond_s=float(np.percentile(bj, 99)), last_s=float(last - b["t_start"]),
                       first_s=float(first - b["t_start"]),
                       delivered_per_s=cnt / max(1e-9, last - b["t_start"]),
                       fanout_per_s=cnt / max(1e-9, last - first))
        per_batch.append(row)
    modes = {}
    for mode in ("unicast", "reformulated"):
        idx = [j for j, b in enumerate(batches) if b["mode"] == mode and j > 0]
        if not idx:
            continue
        mine = np.isin(b_of, idx)
        rows = [per_batch[j] for j in idx if per_batch[j]["received"]]
        med = (lambda k: statistics.median(r[k] for r in rows) if rows else float("nan"))
        modes[mode] = {"batches": len(idx), "notifications_per_batch": statistics.median(per_batch[j]["notifications"] for j in idx),
                       "micro_batch_s": statistics.median(per_batch[j]["micro_batch_s"] for j in idx),
                       "engine_s": statistics.median(per_batch[j]["engine_s"] for j in idx),
                       "p50_s": float(np.percentile(lat[mine], 50)) if mine.any() else float("nan"),
                       "p99_s": float(np.percentile(lat[mine], 99)) if mine.any() else float("nan"),
                       "p50_beyond_s": float(np.percentile(beyond[mine], 50)) if mine.any() else float("nan"),
                       "p99_beyond_s": float(np.percentile(beyond[mine], 99)) if mine.any() else float("nan"),
                       "max_beyond_s": float(np.max(beyond[mine])) if mine.any() else float("nan"),
                       "p99_beyond_call_s": float(np.percentile(beyond_call[mine], 99)) if mine.any() else float("nan"),
                       "delivered_per_s": med("delivered_per_s"), "fanout_per_s": med("fanout_per_s")}
        if "publish_s" in per_batch[idx[0]]:
            modes[mode]["publish_s"] = statistics.median(per_batch[j]["publish_s"] for j in idx)
            modes[mode]["sink_s"] = statistics.median(per_batch[j]["sink_s"] for j in idx)
        if per_batch[idx[0]].get("messages") is not None:
            pass
        msgs = [batches[j].get("messages", 0) for j in idx]
        modes[mode]["messages_per_batch"] = statistics.median(msgs)
    return {"check": check, "per_batch": per_batch, "modes": modes}


# ============================================================================ report
def fmt_s(v) -> str:
    from common import fmt_num
    return fmt_num(v, 2)


#: what every report says about how the figures were taken (the module docstring has the rest)
STANDING_NOTES = [
    "Subscriptions are registered in the server's engine in-process (`subscribe_many` under the ids "
    "`<client>.<name>` the server gives, read back by its `Owners` at start), not over `POST /subscriptions/bulk`: "
    "10,000 bulk requests of 10 rows would each be an `engine.subscribe_many` call on the one group.",
    "Client tokens are written to `serve/tokens.json` in one go in `sparksub token`'s format and hash: "
    "`issue_token` rewrites and fsyncs the whole file per token (quadratic in the number of clients).",
    "The WebSocket clients run in 4 processes (`--client-procs`; each an asyncio process holding a contiguous "
    "share of the N connections, `websockets`' asyncio client); the earlier runs had one process hold all N, "
    "which at 10,000 needed about as much CPU per publish as the server's fan-out (\"CPU %\" in \"Every "
    "batch\" of those runs) and so bounded the latency it measured -- N real subscribers are on their own "
    "machines. They turn permessage-deflate off and send no pings (`sparksub.client`'s sync client keeps the "
    "`websockets` defaults: deflate on); they read only each frame's head while the run goes (its count and "
    "`last_seq`) and parse the notifications after the run. The server keeps its defaults (`ServeConfig()`: "
    "uvicorn pings every 60 s, SSE heartbeats every 15 s, queue limit 10,000 per connection).",
    "The Redis readers use redis-py's asyncio client without `hiredis` (not installed: replies parsed in "
    "pure Python), one connection per reader, `XREAD BLOCK 0` over the streams of its client's subscriptions. "
    "Their lag behind the sink (arrival after the write job returned) is partly that parsing, on a loaded "
    "machine.",
    "Every process (server, client process, Spark JVM, redis-server, readers, the publisher) shares the same 2 "
    "cores with other work on the machine; latencies are wall clock under that load.",
    "redis-py 8's asyncio client times every socket read out after 5 s by default (`socket_timeout=5`): under "
    "this load its connection handshakes timed out and were retried (a first 10,000-reader run took 301 s to "
    "connect, then lost its readers); the readers now pass `socket_timeout=None`.",
    "Where the single-process server's time goes (py-spy on the server during the batches, last session): the "
    "server sends one frame per connection per publish, holding every notification queued for it "
    "(`serve/fanout.py`); each frame is a socket write on the one event loop. The fan-out of a publish to 10,000 "
    "connections cost its process ~0.8-1.1 CPU s, on one core whatever the machine has. Before (issue 17's first "
    "measurement) it sent one frame per notification (~12x the writes), built bodies row by row in Python, "
    "stored one log row per notification, sent an application heartbeat to every idle WebSocket every 15 s and "
    "let uvicorn ping every connection every 20 s.",
    "The multi-process server (`serve/workers.py`, `--workers K`): K fan-out processes listen on the port with "
    "SO_REUSEPORT (the kernel spreads the N connections over them), each tails the notification log after each "
    "commit (woken by a datagram from the engine's process) and frames and writes for its share; the engine's "
    "process (Spark driver, routing, the log's commit) serves the rest of the API on a Unix socket behind them. "
    "Its CPU % in \"Every batch\" is the engine's process and the K fan-out processes together.",
    "The server answers a publish as soon as its notifications are committed to the log, before any frame "
    "(`serve/fanout.py`: staged in the engine's order, flushed to the queues just before the response); \"beyond "
    "the call\" is the fan-out after the response. The target is judged on \"beyond micro-batch\", from the end "
    "of the server's own publish time (its `seconds`), which hides nothing.",
]


def path_label(run: dict) -> str:
    """A WebSocket run's path: the single-process server or the one with K fan-out processes."""
    k = run.get("workers", 0)
    return "WebSocket" if not k else f"WebSocket, {k} fan-out processes"


def runs_at(res: dict, n: int, redis_name: str = "Redis Streams") -> list[tuple[str, dict]]:
    """(path label, run) of every path measured at ``n``: the WebSocket runs (by fan-out processes), Redis."""
    out = [(path_label(r), r) for r in sorted((r for r in res["websocket"] if r["n"] == n),
                                              key=lambda r: r.get("workers", 0))]
    out += [(redis_name, r) for r in res["redis"] if r["n"] == n]
    return out


def ws_runs_at(res: dict, n: int) -> list[tuple[str, dict]]:
    return [(label, r) for label, r in runs_at(res, n) if r in res["websocket"]]


def run_kind(res: dict) -> str:
    return "quick" if res["quick"] else "full" if sorted(res["ns"]) == [1_000, 10_000] and res["subs"] == 100_000 \
        else "custom"


def report(res: dict, out: Path) -> None:
    from common import fmt_num, md_table
    rd_by_n = {r["n"]: r for r in res["redis"]}
    kind = run_kind(res)
    lines = [f"# Serving benchmark: WebSocket subscribers vs the Redis Streams sink ({kind} run)",
             "",
             "`bench/serving.py` (issue 17); the module docstring says what is measured and how. "
             f"Machine: {res['machine']['cpu']} ({res['machine']['cpu_count']} cores), {res['machine']['platform']}, "
             f"Python {res['machine']['python']}, pyspark {res['machine']['pyspark']}; {res['machine']['date']}. "
             f"Load average (1/5/15 min) at start {res['load_start']}, at end {res['load_end']} "
             "(a shared machine: other work ran beside; every figure is wall clock). Spark `local[2]`; server, "
             "clients / readers, Spark JVM and redis-server share the 2 cores.",
             "",
             f"Workload: {res['rows']:,} rows, one range-MIN group of {res['subs']:,} subscriptions "
             f"(`{TEMPLATE}`), batches of {res['batch']:,} updates: 1 warm-up (unicast, apart), then "
             f"{res['timed']} unicast and {res['timed']} reformulated (figures: medians over those batches; "
             "latency percentiles over every notification of them). Each batch is delivered completely before "
             "the next is published.", ""]
    targets = []
    for label, ws in (x for n in res["ns"] for x in ws_runs_at(res, n)):
        n = ws["n"]
        a = ws["analysis"]
        held = ws["connected"] == n and not ws["stats"].get("dropped_slow")
        worst = max(m["p99_beyond_s"] for m in a["modes"].values())
        lost = a["check"]["lost"] + a["check"]["extra"] + a["check"]["misrouted"] + a["check"].get("client_seq_holes", 0)
        targets.append(f"* {label}, {n:,} subscribers: held (all connected, none dropped) **{'PASS' if held else 'FAIL'}**; "
                       f"p99 beyond the micro-batch {worst:.2f} s < {TARGET_P99_BEYOND_S:.0f} s "
                       f"**{'PASS' if worst < TARGET_P99_BEYOND_S else 'FAIL'}**; no lost notification "
                       f"**{'PASS' if lost == 0 else 'FAIL'}** ({a['check']['lost']} lost, {a['check']['extra']} extra)")
    lines += ["## Targets (issue 17)", "", *targets, ""]
    header = ["path", "N", "mode", "notifications / batch", "micro-batch s", "call s", "p50 s", "p99 s",
              "p99 beyond micro-batch s", "p99 beyond the call s", "delivered / s", "fan-out / s", "lost", "extra"]
    rows = []
    for n in res["ns"]:
        for path, r in runs_at(res, n):
            a = r["analysis"]
            for mode, m in a["modes"].items():
                call = fmt_s(m["micro_batch_s"])
                if "publish_s" in m:
                    call += f" ({fmt_s(m['publish_s'])} + sink {fmt_s(m['sink_s'])})"
                rows.append([path, f"{n:,}", mode, fmt_num(m["notifications_per_batch"]), fmt_s(m.get("engine_s")), call,
                             fmt_s(m["p50_s"]), fmt_s(m["p99_s"]), fmt_s(m["p99_beyond_s"]),
                             fmt_s(m.get("p99_beyond_call_s")), fmt_num(m["delivered_per_s"]),
                             fmt_num(m["fanout_per_s"]), f'{a["check"]["lost"]:,}', f'{a["check"]["extra"]:,}'])
    lines += ["## Delivery per batch", "", md_table(header, rows), "",
              "*micro-batch*: the engine's part of the publish (WebSocket: the server's own time for it -- Spark job, "
              "routing, numbering, the notification log's commit; Redis: `publish` (+ `deliver`)). *call*: the whole "
              "publish call (WebSocket: the HTTP request, answered once the notifications are committed, before their frames; "
              "Redis: + the sink's write job, given apart). *p50/p99*: arrival at the client - publish start. *beyond "
              "micro-batch*: arrival - end of the micro-batch (the target's figure); *beyond the call*: arrival - end of "
              "the call. *delivered/s*: notifications / (last arrival - publish start); *fan-out/s*: "
              "/ (last arrival - first arrival). *lost / extra*: against the broker child's in-process output, per "
              "client, over every batch (warm-up included).", ""]
    ratio_rows = []
    for label, ws in (x for n in res["ns"] for x in ws_runs_at(res, n)):
        rd = rd_by_n.get(ws["n"])
        if rd is None:
            continue
        for mode in ws["analysis"]["modes"]:
            w, r = ws["analysis"]["modes"][mode], rd["analysis"]["modes"].get(mode)
            if r is None:
                continue
            ratio_rows.append([label, f"{ws['n']:,}", mode, fmt_num(w["p99_s"] / r["p99_s"]), fmt_num(w["p99_beyond_s"] / r["p99_beyond_s"])
                               if r["p99_beyond_s"] > 0 else "n/a",
                               fmt_num(w["delivered_per_s"] / r["delivered_per_s"]), fmt_num(w.get("engine_s", w["micro_batch_s"]) / r.get("engine_s", r["micro_batch_s"]))])
    lines += ["### WebSocket / Redis Streams (same updates; the Notes say when a path's run is older)", "",
              md_table(["path", "N", "mode", "p99 latency", "p99 beyond micro-batch", "delivered/s", "micro-batch"],
                       ratio_rows), ""]
    mem = []
    for n in res["ns"]:
        rd = rd_by_n.get(n)
        for label, ws in ws_runs_at(res, n):
            mem.append([f"{n:,}", f"{label} server (uvicorn + app)", f"{ws['connected']:,} / {ws['connect_failed']}",
                        fmt_num(ws["connect_s"]), fmt_num(ws["server_rss0_kb"] / 1024), fmt_num(ws["server_rssN_kb"] / 1024),
                        fmt_num((ws["server_rssN_kb"] - ws["server_rss0_kb"]) / max(1, ws["connected"])),
                        fmt_num(ws["client_rss_kb"] / 1024)])
        if rd is not None:
            mem.append([f"{n:,}", "redis-server", f"{rd['connected']:,} / {rd['connect_failed']}", fmt_num(rd["connect_s"]),
                        fmt_num(rd["redis_rss0_kb"] / 1024), fmt_num(rd["redis_rssN_kb"] / 1024),
                        fmt_num((rd["redis_rssN_kb"] - rd["redis_rss0_kb"]) / max(1, rd["connected"])),
                        fmt_num(rd["reader_rss_kb"] / 1024)])
    lines += ["## Connections and memory", "",
              md_table(["N", "server", "connected / failed", "connect s", "RSS idle MB", "RSS with N MB",
                        "KB / connection", "client process RSS MB"], mem), "",
              "RSS: VmRSS of the server's Python processes (the engine's and, if any, the fan-out processes; the "
              "Spark JVM is a separate process) / of redis-server, "
              "with no client and 3 s after the N-th connected (idle). Client process: the asyncio processes "
              "holding the N connections, summed (WebSocket; 4 since this session's run, one before) or the one "
              "holding the N readers (Redis), before any notification.", ""]
    chk = []
    for n in res["ns"]:
        for path, r in runs_at(res, n):
            c = r["analysis"]["check"]
            extra = (f"client_seq holes {c['client_seq_holes']}, repeats {c['client_seq_repeats']}; reconnects "
                     f"{r['batches'][-1].get('reconnects', 0)}, dropped as slow {r['stats'].get('dropped_slow')}, "
                     f"closes {r.get('closes')}" if path.startswith("WebSocket") else "")
            chk.append([path, f"{n:,}", f"{c['expected']:,}", f"{c['received']:,}", f"{c['lost']:,}", f"{c['extra']:,}",
                        str(c["misrouted"]), extra])
    lines += ["## Delivery check", "",
              md_table(["path", "N", "expected", "received", "lost", "extra", "misrouted", "WebSocket stream"], chk), "",
              "Expected: the rows of `publish` (unicast) / `deliver` (reformulated) in the broker child's engine, "
              "which processes the same updates from the same state; compared per client as multisets of "
              "(subscription, seq, op, value).", ""]
    pb = []
    for n in res["ns"]:
        for path, r in runs_at(res, n, "Redis"):
            for row in r["analysis"]["per_batch"]:
                pb.append([path, f"{n:,}", str(row["batch"]) + (" (warm-up)" if row["batch"] == 0 else ""), row["mode"],
                           f"{row['notifications']:,}", fmt_s(row.get("engine_s")), fmt_s(row["micro_batch_s"]),
                           fmt_s(row.get("first_s")),
                           fmt_s(row.get("last_s")), fmt_s(row.get("p50_s")), fmt_s(row.get("p99_s")),
                           fmt_s(row.get("p99_beyond_s")), fmt_s(row.get("p99_beyond_call_s")),
                           " / ".join(f"{row[k]:.0f}" for k in ("server_cpu_pct", "client_cpu_pct")) if "server_cpu_pct" in row
                           else ""])
    lines += ["## Every batch", "",
              md_table(["path", "N", "batch", "mode", "notifications", "micro-batch s", "call s", "first arrival s",
                        "last arrival s", "p50 s", "p99 s", "p99 beyond s", "p99 beyond the call s",
                        "CPU % server / clients in the fan-out"], pb), "",
              "*CPU %*: CPU time of the server's Python processes (the engine's: event loop, worker thread; and "
              "the fan-out processes, if any) and of the client processes, each side summed, from the end of the "
              "micro-batch until the batch's last notification arrived (sampled every 50 ms), over that time (100: "
              "one core busy).", ""]
    notes = list(res.get("notes") or []) + STANDING_NOTES
    lines += ["## Notes", "", *[f"* {x}" for x in notes], ""]
    lines += ["![serving](serving.png)", ""]
    (out / "serving.md").write_text("\n".join(lines))


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(13, 9))
    labels, p50, p99, beyond, rate = [], [], [], [], []
    for n in res["ns"]:
        for path_name, r in runs_at(res, n, "Redis"):
            short = path_name.replace("WebSocket, ", "WS\n").replace(" fan-out processes", " fan-out").replace(
                "WebSocket", "WS\n1 process")
            for mode, m in r["analysis"]["modes"].items():
                labels.append(f"{short}\n{n:,}\n{'uni' if mode == 'unicast' else 'ref'}")
                p50.append(m["p50_s"])
                p99.append(m["p99_s"])
                beyond.append(m["p99_beyond_s"])
                rate.append(m["delivered_per_s"])
    x = range(len(labels))
    ax1.bar([i - 0.27 for i in x], p50, 0.27, label="p50 from publish start")
    ax1.bar(list(x), p99, 0.27, label="p99 from publish start")
    ax1.bar([i + 0.27 for i in x], beyond, 0.27, label="p99 beyond the micro-batch")
    ax1.axhline(TARGET_P99_BEYOND_S, color="red", lw=0.8, ls="--", label="target: 2 s beyond")
    ax1.set_xticks(list(x), labels, fontsize=6.5)
    ax1.set_ylabel("seconds")
    ax1.set_title("notification latency (path, N subscribers, mode)")
    ax1.legend(fontsize=7)
    ax2.bar(list(x), rate, 0.6, color="tab:green")
    ax2.set_xticks(list(x), labels, fontsize=6.5)
    ax2.set_ylabel("notifications / s")
    ax2.set_title("delivered per second (batch / (last arrival - publish start))")
    fig.suptitle(f"{res['subs']:,} range-MIN subscriptions, {res['rows']:,} rows, batches of {res['batch']:,} updates "
                 f"({run_kind(res)}; load {res['load_start']} -> {res['load_end']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def merged(saved: dict, new: dict, paths: list[str]) -> dict:
    """``saved`` with its runs of ``new``'s N on ``paths`` replaced by ``new``'s (a part re-run on its own)."""
    when = f"{new['machine']['date']}, load {new['load_start']} -> {new['load_end']}"
    for path, key in (("ws", "websocket"), ("redis", "redis")):
        if path not in paths:
            continue
        for run in new[key]:
            same = (lambda r: r["n"] == run["n"] and r.get("workers", 0) == run.get("workers", 0))
            saved[key] = [r for r in saved[key] if not same(r)] + [run]
            saved[key].sort(key=lambda r: (r["n"], r.get("workers", 0)))
            what = path_label(run) if key == "websocket" else key
            saved.setdefault("notes", []).append(f"The {what} part at N = {run['n']:,} is from a separate run of "
                                                 f"that part alone ({when}).")
    saved["notes"] += new["notes"]
    if "ws" in paths and "redis" not in paths:
        # the header's machine, date and load are the new run's; the kept Redis part says its own
        kept = f"{saved['machine']['date']}, load {saved['load_start']} -> {saved['load_end']}"
        saved["notes"] = [x for x in saved["notes"] if not x.startswith("The WebSocket")]
        if not any(x.startswith("The Redis Streams part is from an earlier run") for x in saved["notes"]):
            saved["notes"].append(f"The Redis Streams part is from an earlier run ({kept}), kept: that path did "
                                  "not change since. Its figures were taken before the micro-batch was split from "
                                  "the call: its \"micro-batch\" is `publish` (+ `deliver`) + the sink's write "
                                  "job, and \"beyond\" is from the end of that.")
        for key in ("machine", "load_start", "load_end", "quick", "timed", "plan"):
            saved[key] = new[key]
    return saved


# ============================================================================ main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=("orchestra", "server", "clients", "readers", "broker"), default="orchestra")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=OUT_DIR)
    p.add_argument("--ns", type=str, default=None, help="comma-separated subscriber counts (default 1000,10000)")
    p.add_argument("--paths", type=str, default="ws,redis")
    p.add_argument("--workers", type=str, default="0,4",
                   help="the WebSocket server's fan-out processes, one run each (0: the single-process server; "
                        "default 0,4: both, the same N and updates)")
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--subs", type=int, default=None)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--timed", type=int, default=None, help="timed batches per mode (default 5, --quick 3)")
    p.add_argument("--tmp", type=Path, default=None)
    p.add_argument("--render-only", action="store_true", help="rewrite serving.md / .png from serving.json in --out")
    p.add_argument("--merge", action="store_true",
                   help="replace the runs of these N and paths in the existing serving.json of --out, keep the rest")
    # the children's
    p.add_argument("--dir", type=Path)
    p.add_argument("--clients", type=int)
    p.add_argument("--url")
    p.add_argument("--tokens")
    p.add_argument("--offset", type=int, default=0, help="(clients child) the global index of its first client")
    p.add_argument("--client-procs", type=int, default=4,
                   help="processes the N WebSocket clients are spread over (each an asyncio process)")
    p.add_argument("--redis")
    p.add_argument("--prefix")
    p.add_argument("--n-batches", type=int)
    a = p.parse_args(argv)
    if a.role != "orchestra":
        return {"server": role_server, "clients": role_clients, "readers": role_readers,
                "broker": role_broker}[a.role](a) or 0

    from common import load_avg, log, machine
    if a.render_only:
        res = json.loads((a.out / "serving.json").read_text())
        report(res, a.out)
        plot(res, a.out / "serving.png")
        return 0
    raise_nofile()
    a.subs = a.subs or (10_000 if a.quick else 100_000)
    timed = a.timed or (3 if a.quick else 5)
    ns = [int(x) for x in a.ns.split(",")] if a.ns else ([100, 1_000] if a.quick else [1_000, 10_000])
    plan = plan_of(timed)
    res = {"quick": a.quick, "machine": machine(), "load_start": load_avg(), "rows": a.rows, "subs": a.subs,
           "batch": a.batch, "timed": timed, "ns": ns, "plan": plan, "websocket": [], "redis": [], "notes": [],
           "started": time.time()}
    log(f"serving benchmark: N = {ns}, {a.subs:,} subscriptions, {a.rows:,} rows, plan {plan}; load {res['load_start']}")
    keys, xs, _, _, _, stream = workload(a.rows, a.subs, a.batch * len(plan))
    a.out.mkdir(parents=True, exist_ok=True)
    paths = a.paths.split(",")
    for n in ns:
        if a.subs % n:
            raise SystemExit(f"{a.subs} subscriptions do not split evenly over {n} clients")
        work = Path(tempfile.mkdtemp(prefix=f"sparksub-serving-{n}-", dir=a.tmp))
        t_n = time.monotonic()
        wss, rd = [], None
        try:
            if "ws" in paths:
                for k in (int(x) for x in a.workers.split(",")):
                    wss.append(run_websocket(n, a, work, plan, (keys, xs, stream), workers=k))
            if "redis" in paths:
                rd = run_broker(n, a, work, plan)
            elif wss:
                run_oracle(n, a, work, plan)
        except Exception as err:   # noqa: BLE001 -- what was reached is reported
            log(f"  N = {n}: FAILED: {type(err).__name__}: {err}")
            res["notes"].append(f"N = {n:,}: the run failed after {time.monotonic() - t_n:.0f} s: "
                                f"{type(err).__name__}: {str(err).splitlines()[0]}")
        oracle = work / "oracle.npz"
        for ws in wss:
            if oracle.exists():
                ws["analysis"] = analyse(ws["file"], str(oracle), ws, a.batch, a.subs, n, True)
                res["websocket"].append(ws)
        if rd is not None:
            rd["analysis"] = analyse(rd["file"], rd["oracle"], rd, a.batch, a.subs, n, False)
            rd["stats"] = {}
            res["redis"].append(rd)
        log(f"  N = {n:,} done in {time.monotonic() - t_n:.0f} s (load {load_avg()})")
        for r in wss + [rd]:
            if r is not None and "analysis" in r:
                for mode, m in r["analysis"]["modes"].items():
                    log(f"    {path_label(r) if r is not rd else 'redis'} {mode}: micro-batch {m['engine_s']:.2f} s (the call "
                        f"{m['micro_batch_s']:.2f} s), p50 "
                        f"{m['p50_s']:.2f} s, p99 {m['p99_s']:.2f} s, p99 beyond {m['p99_beyond_s']:.2f} s (the call "
                        f"{m['p99_beyond_call_s']:.2f} s), "
                        f"{m['delivered_per_s']:,.0f}/s; check {r['analysis']['check']}")
        shutil.rmtree(work, ignore_errors=True)
        res["load_end"] = load_avg()
        if not a.merge:
            (a.out / "serving.json").write_text(json.dumps(res, indent=1, default=str))
    res["load_end"] = load_avg()
    res["elapsed_s"] = time.time() - res["started"]
    if a.merge:
        res = merged(json.loads((a.out / "serving.json").read_text()), res, paths)
    (a.out / "serving.json").write_text(json.dumps(res, indent=1, default=str))
    report(res, a.out)
    plot(res, a.out / "serving.png")
    log(f"wrote {a.out / 'serving.md'}, serving.png, serving.json in {res['elapsed_s']:.0f} s; load {res['load_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
