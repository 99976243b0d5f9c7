"""The engine's streams, kept running by the server (issue 17: ``sparksub serve`` "keeps the engine's streams
running").

An engine directory records no stream to restart: ``engine.stream(table, streaming_df)`` runs a streaming
DataFrame its caller builds from any Spark source, and the directory keeps only its checkpoint
(``streams/<name>``) and working files.  So the server is told which sources to run:
``sparksub serve PATH --stream TABLE=DIR`` (repeatable) names a directory whose new files are updates to --
or, for a table without a key, events of -- TABLE: Structured Streaming's file source (JSON lines by
default, or CSV with a header, or Parquet), the source that needs no connector here (Spark's Kafka connector
cannot be installed).  A file's columns are the table's, plus ``_op`` (``'upsert'``, the default, or
``'delete'``) for a keyed table; an event's interval is its number in the stream (no ``t0``/``t1``).  Write a
file elsewhere and rename it into DIR, so that Spark never reads half of it.

Per source the server runs ``engine.stream(TABLE, ...)`` in unicast mode with its checkpoint in the engine's
directory (``streams/serve-<table>``): a restarted server resumes after the last micro-batch it committed,
and the rows a micro-batch applied are the engine's rows too (the engine follows its streams).  Each
micro-batch's notifications go through ``foreachBatch`` to the server's routing -- numbered per client in the
notification log and fanned out as a publish's are, in the engine's gate (``app.py``) -- and the last routed
micro-batch id is kept as the stream's routing mark in the notification log, in the transaction of the
micro-batch's notifications (``notification_log.py``, "Routing marks"), so that a micro-batch Spark replays
after a crash is not routed twice.  (It was a file, ``serve/streams.json``, written after the log's commit: a
server killed between the two routed the replayed micro-batch again; the file is still read, for a directory
served before.)  None is lost either: Spark commits a micro-batch to its checkpoint only after
``foreachBatch`` returned, i.e. after the log's commit, and replays one it has not committed.

The stream hosts the groups on its table when it starts and their later subscriptions (subscriptions are
data, ``control/streaming.py``).  A table with no subscription yet waits: its stream starts with the first
one the server registers.  A new group the running stream cannot host (the engine warns, naming the stream)
restarts the stream from its checkpoint, which the engine documents as keeping the others' state.  Event
queries over a streamed table are fixed while its stream runs (the engine refuses a change: its automata live
in the stream's state store); declare them before the server starts.

No pyspark import: the reader is built through ``engine.spark`` and the table's DDL.
"""
from __future__ import annotations

import json
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from sparksub.errors import SparksubError

__all__ = ["FORMATS", "EngineStreams", "ServedStream", "StreamSource", "mark_of"]

#: the file formats a served stream reads (Spark's file source: ``spark.readStream.format(...)``)
FORMATS = ("json", "csv", "parquet")
#: how often a served stream looks for new files (seconds): Structured Streaming's processing-time trigger
DEFAULT_TRIGGER_SECONDS = 1.0
#: engine.stream's refusal when no subscription or event query reads the table yet (the stream waits)
_NOTHING_YET = "no subscriptions or event queries on table"


@dataclass(frozen=True)
class StreamSource:
    """One ``--stream TABLE=DIR``: the table, the directory of files, their format."""
    table: str
    directory: str
    format: str = "json"

    @classmethod
    def parse(cls, text: str, format: str = "json") -> "StreamSource":
        """``TABLE=DIR`` (ValueError naming what is wrong)."""
        table, eq, directory = str(text).partition("=")
        if not eq or not table.strip() or not directory.strip():
            raise ValueError(f"--stream {text!r}: expected TABLE=DIR (a table of the engine and the directory "
                             f"whose new files are its updates)")
        if format not in FORMATS:
            raise ValueError(f"stream format {format!r}: expected one of {', '.join(FORMATS)}")
        return cls(table.strip(), str(Path(directory.strip()).expanduser().resolve()), format)


@dataclass
class ServedStream:
    """One source as the server runs it, and its numbers (``status``)."""
    source: StreamSource
    checkpoint: str
    #: waiting (no subscription on the table yet), running, stopped, failed
    state: str = "waiting"
    query: object = None          # the StreamingQuery
    stream_id: str | None = None  # the engine's id of the stream (its warnings name it)
    batches: int = 0
    rows: int = 0
    notifications: int = 0
    rejected: int = 0
    last_rejected: list | None = None
    last_batch_id: int = -1
    last_batch_at: float | None = None
    restarts: int = 0
    error: str | None = None
    restart_wanted: bool = False

    def status(self) -> dict:
        active = self.query is not None and _active(self.query)
        if self.state == "running" and self.query is not None and not active:
            self.state = "failed"
            self.error = self.error or _query_error(self.query) or "the streaming query stopped"
        return {"table": self.source.table, "directory": self.source.directory, "format": self.source.format,
                "state": self.state, "active": active, "micro_batches": self.batches, "rows": self.rows,
                "notifications": self.notifications, "rejected": self.rejected,
                "last_rejected": self.last_rejected or [], "last_batch_id": self.last_batch_id,
                "last_batch_seconds_ago": None if self.last_batch_at is None
                else round(time.time() - self.last_batch_at, 1),
                "restarts": self.restarts, "error": self.error}


def _active(query) -> bool:
    try:
        return bool(query.isActive)
    except Exception:   # a query whose session went away
        return False


def _query_error(query) -> str | None:
    try:
        err = query.exception()
    except Exception:
        return None
    return None if err is None else str(err).splitlines()[0][:500]


class EngineStreams:
    """The served streams of one engine.  ``route(table, output, batch_id, mark) -> summary`` hands a
    micro-batch's output (Arrow) to the server and returns once it is routed and ``batch_id`` committed as the
    routing mark ``mark`` (``mark_of``); it is called in Spark's ``foreachBatch`` thread.  ``routed(mark)``: the
    mark as the notification log has it (None: never routed).  ``start_ready`` and ``after_change`` call the
    engine (run them in the engine's gate); ``stop`` waits for a running micro-batch, whose routing needs the
    gate (never call it from inside the gate)."""

    def __init__(self, engine, sources, route, routed, *, trigger_seconds: float = DEFAULT_TRIGGER_SECONDS):
        self.engine = engine
        self.route = route
        self.routed = routed
        self.trigger_seconds = float(trigger_seconds)
        tables = [s.table.lower() for s in sources]
        twice = {t for t in tables if tables.count(t) > 1}
        if twice:
            raise ValueError(f"--stream: one source per table, got several for {sorted(twice)}")
        self.streams = {s.table.lower(): ServedStream(s, engine.checkpoint_location(f"serve-{s.table.lower()}"))
                        for s in sources}
        self._marks_file = Path(engine.directory.root) / "serve" / "streams.json"   # (before the log's marks)
        self._marks = self._read_marks()
        for served in self.streams.values():
            mark = routed(mark_of(served.checkpoint))
            if mark is not None:
                self._marks[served.checkpoint] = mark
        self._lock = threading.Lock()   # the marks file and the counters (foreachBatch threads)

    # ---- checks and starting -------------------------------------------------------------------------------
    def check(self) -> None:
        """Every source names a table of the engine and a directory that exists (ValueError otherwise)."""
        known = {t.name.lower(): t.name for t in self.engine.catalog}
        for name, served in self.streams.items():
            if name not in known:
                raise ValueError(f"--stream {served.source.table}=...: no table {served.source.table!r} in the "
                                 f"engine directory (tables: {', '.join(sorted(known.values())) or 'none'})")
            if not Path(served.source.directory).is_dir():
                raise ValueError(f"--stream {served.source.table}={served.source.directory}: not a directory")

    def start_ready(self) -> list[str]:
        """Start every stream that is not running and whose table has a subscription or event query now
        (engine calls: in the gate).  The tables started."""
        started = []
        for name, served in self.streams.items():
            if served.state in ("waiting", "stopped") or served.restart_wanted:
                if served.query is not None and _active(served.query):
                    continue   # (stopped outside the gate first: restart_pending)
                try:
                    if self._start(name, served):
                        started.append(name)
                except Exception as err:   # Spark's own errors too: the stream's status says it, the server runs on
                    served.state, served.error = "failed", f"{type(err).__name__}: {str(err).splitlines()[0][:500]}"
        return started

    def _start(self, name: str, served: ServedStream) -> bool:
        src = served.source
        tdef = self.engine.catalog.get(src.table)
        columns = [f"`{c}` {t}" for c, t in tdef.columns]
        if tdef.key is not None:
            columns.append("`_op` STRING")
        reader = self.engine.spark.readStream.schema(", ".join(columns)).format(src.format)
        if src.format == "csv":
            reader = reader.option("header", "true")
        try:
            out = self.engine.stream(tdef.name, reader.load(src.directory))
        except SparksubError as err:
            if str(err).startswith(_NOTHING_YET):
                served.state = "waiting"
                return False
            served.state, served.error = "failed", str(err)
            return False
        served.stream_id = getattr(out, "sparksub_stream_id", None)
        query = (out.writeStream.queryName(f"sparksub_serve_{name}_{int(time.time() * 1000)}")
                 .option("checkpointLocation", served.checkpoint)
                 .trigger(processingTime=f"{self.trigger_seconds:g} seconds")
                 .foreachBatch(self._on_batch(name, served))
                 .start())
        if served.query is not None:
            served.restarts += 1
        served.query, served.state, served.error, served.restart_wanted = query, "running", None, False
        return True

    # ---- following the engine's changes -----------------------------------------------------------------
    def watching(self, fn, *args, **kwargs):
        """Run ``fn`` (a subscription change, in the gate) noting the engine's warnings about a running stream
        that cannot host a new group: that stream is restarted (``restart_pending`` / ``start_ready``).  Every
        other warning is passed on as it was."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return fn(*args, **kwargs)
            finally:
                for w in caught:
                    if not self._note_warning(w):
                        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    def _note_warning(self, w) -> bool:
        if not issubclass(w.category, RuntimeWarning):
            return False
        text = str(w.message)
        for served in self.streams.values():
            if served.stream_id and f"stream {served.stream_id} " in text:
                served.restart_wanted = True
                return True
        return False

    def restart_pending(self) -> bool:
        """Whether a stream waits to start or to be restarted (``stop_for_restart`` then ``start_ready``)."""
        return any(s.restart_wanted or s.state in ("waiting", "stopped") for s in self.streams.values())

    def stop_for_restart(self, timeout: float = 60.0) -> None:
        """Stop the streams a change asked to restart (outside the gate: a running micro-batch finishes)."""
        for served in self.streams.values():
            if served.restart_wanted and served.query is not None and _active(served.query):
                _stop(served.query, timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop every stream (the server's shutdown; outside the gate)."""
        for served in self.streams.values():
            if served.query is not None:
                _stop(served.query, timeout)
                if served.state == "running":
                    served.state = "stopped"

    # ---- the micro-batches -------------------------------------------------------------------------------
    def _on_batch(self, name: str, served: ServedStream):
        def run(batch_df, batch_id: int) -> None:
            if batch_id <= self._marks.get(served.checkpoint, -1):
                return   # routed before a crash or a restart: Spark replays it, the clients have it
            output = batch_df.toArrow()
            summary = self.route(served.source.table, output, batch_id, mark_of(served.checkpoint))
            with self._lock:
                served.batches += 1
                served.rows += int(output.num_rows)
                served.notifications += int(summary.get("notifications", 0))
                served.rejected += int(summary.get("rejected_count", 0))
                if summary.get("rejected"):
                    served.last_rejected = summary["rejected"][:5]
                served.last_batch_id, served.last_batch_at = batch_id, time.time()
                self._marks[served.checkpoint] = batch_id   # the log has it (route's commit)
        return run

    def _read_marks(self) -> dict:
        try:
            data = json.loads(self._marks_file.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}

    # ---- numbers -----------------------------------------------------------------------------------------
    def status(self) -> list[dict]:
        with self._lock:
            return [s.status() for s in self.streams.values()]


def mark_of(checkpoint: str) -> str:
    """The routing mark of the served stream checkpointed at ``checkpoint``, in the notification log."""
    return f"stream:{checkpoint}"


def _stop(query, timeout: float) -> None:
    try:
        query.stop()
        query.awaitTermination(timeout)
    except Exception:   # stopping a failed query says why it failed: status() has it
        pass
