"""A replica's state in files under the engine's directory, and the worker cache of it (issue 16 item 3).

A *replica* is what one Spark task needs to run one operator: a range group whole, one FILTER shard, one
join partition, one partition of an event class.  Its state is files, never a broadcast or a closure::

    <engine directory>/groups/<group>/<part>/   one replica (<part>: its partition number; 'whole': a group of one)
        <base id>/base.pickle                  the base snapshot, pickled, written once
        <base id>/log-<n>.arrow                the n-th entry logged since that base (Arrow IPC file)
        counts-<role>-<process>.json           one process's cache counters for the replica

Every file is written under a temporary name and renamed, so a reader never sees half of one.  A new base
(subscriptions changed, the log grew long: compaction) gets a new directory, and the superseded one is
deleted (:func:`discard`).  What goes into a task closure is a :class:`Replica`: the base directory's
path, the base id, the log length -- small, whatever the group's size.

The worker cache (:func:`materialize` / :func:`remember`) keeps the materialised operator between tasks,
keyed by (engine, replica) and checked against (base id, log position): a warm worker applies only the new
batch (*hit*), one a few batches behind replays them from the log files (*catch-up*), a cold one (a new
executor, an idle Python worker that Spark ended, a recomputed partition) rebuilds from the base file and
the whole log (*rebuild*).  The operators are deterministic, so every path gives the same output.  Each
outcome is counted in a file of the replica's directory (:class:`CounterFile`): workers cannot report
through accumulators under Spark Connect, and a file needs no Spark action to read; ``Engine.stats()``
sums them (:func:`read_counts`).

One file system: ``local[n]`` and ``local-cluster`` on one machine share it; a cluster of several machines
needs the engine's directory on a shared file system (docs/architecture.md).
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa

__all__ = ["Replica", "new_base", "base_place", "write_base", "adopt_base", "discard", "cold", "pin", "materialize",
           "cached_position", "keep_one_per_group", "remember", "CounterFile", "StoredValue", "read_counts",
           "write_value", "link_value", "CACHE_OUTCOMES"]

BASE_FILE = "base.pickle"
#: the counters :func:`materialize` keeps per replica
CACHE_OUTCOMES = ("hits", "catch_ups", "rebuilds", "log_replayed")
# the log entry's kind, in the Arrow file's schema metadata
_KIND = b"sparksub.entry"
_STREAMS = b"sparksub.streams"

# Worker-process cache: (engine_uid, replica_id) -> (base_id, log position, operator).
_CACHE: dict[tuple[str, str], tuple[str, int, object]] = {}


@dataclass(frozen=True)
class Replica:
    """How to rebuild one replica anywhere: the directory of its base (``base.pickle``, ``log-<n>.arrow``),
    the base's id, and how many entries (``logged_rows`` rows) are logged since the base.  A value: logging
    an entry (:meth:`append`) gives the next one."""

    engine_uid: str
    replica_id: str
    directory: str
    base_id: str
    log_length: int = 0
    logged_rows: int = 0
    #: ``(base id, log length)`` of the replica this base compacted (:func:`new_base` ``continues``): the base
    #: is that one with those entries applied, so an operator cached there is this base at position 0
    continues: tuple[str, int] | None = None
    #: a Python worker keeps one replica of this one's group and kind (:func:`keep_one_per_group`) whichever job
    #: runs it: a sharded SELECT_JOIN's row partitions also run in publish's ordinary job (reformulated mode)
    one_per_worker: bool = False

    @property
    def base_path(self) -> str:
        return os.path.join(self.directory, BASE_FILE)

    def read_base(self):
        """The base snapshot (``GroupSnapshot``, ``ReplicaBase``, ...), unpickled from its file."""
        with open(self.base_path, "rb") as fh:
            return pickle.load(fh)

    def append(self, entry, streams: tuple | None = None) -> "Replica":
        """Log ``entry`` -- an update batch (a pyarrow Table), an event batch (a Table with the ``streams`` it
        is fed under) or another change (``join_groups.QueryChange``: pickled) -- as the next log file."""
        if isinstance(entry, pa.Table):
            kind = b"events" if streams is not None else b"batch"
            meta = {_KIND: kind, **({_STREAMS: json.dumps(list(streams)).encode()} if streams is not None else {})}
            table, rows = entry.replace_schema_metadata({**(entry.schema.metadata or {}), **meta}), entry.num_rows
        else:
            raw = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
            table = pa.table({"pickle": pa.array([raw], pa.binary())}).replace_schema_metadata({_KIND: b"change"})
            rows = 0
        _write_atomic(self._log_path(self.log_length), lambda fh: _write_arrow(fh, table))
        return replace(self, log_length=self.log_length + 1, logged_rows=self.logged_rows + rows)

    def read_log(self, start: int = 0, stop: int | None = None):
        """The logged entries ``start .. stop-1`` as ``(kind, value, streams)``, oldest first."""
        for n in range(start, self.log_length if stop is None else stop):
            with pa.OSFile(str(self._log_path(n))) as fh:
                table = pa.ipc.open_file(fh).read_all()
            meta = dict(table.schema.metadata or {})
            kind = meta.pop(_KIND, b"batch")
            if kind == b"change":
                yield "change", pickle.loads(table.column("pickle")[0].as_py()), None
                continue
            streams = tuple(json.loads(meta.pop(_STREAMS))) if _STREAMS in meta else None
            yield kind.decode(), table.replace_schema_metadata(meta or None), streams

    def _log_path(self, n: int) -> Path:
        return Path(self.directory) / f"log-{n}.arrow"

    @property
    def counters(self) -> "CounterFile":
        """Where this replica's cache outcomes are counted (beside its bases: they outlive a compaction)."""
        return CounterFile(os.path.dirname(self.directory), self.replica_id)


def replica_root(directory, replica_id: str) -> Path:
    """``groups/<group>/<part>`` of the engine's directory (``directory.EngineDirectory``) for a replica id
    (``<group>#<part>`` for a partition, else the group id)."""
    group, sep, part = replica_id.rpartition("#")
    return directory.area("groups", group, part) if sep else directory.area("groups", replica_id, "whole")


def new_base(directory, engine_uid: str, replica_id: str, value, replaces: Replica | None = None,
             continues: bool = False, one_per_worker: bool = False) -> Replica:
    """A new base for ``replica_id``: ``value`` (a snapshot, or bytes already pickled) written once to a new
    base directory under the engine's ``directory``; ``replaces``: the superseded replica, whose files are
    deleted.  ``continues`` (a compaction: ``value`` is ``replaces``' state with its whole log applied, nothing
    else changed): a worker whose cache holds ``replaces`` at the end of its log goes on from there instead of
    rebuilding (:func:`cached_position`) -- a 100K-row batch every few publishes otherwise paid a rebuild."""
    where = base_place(directory, replica_id)
    write_base(where, value)
    return adopt_base(engine_uid, replica_id, where, replaces, continues, one_per_worker)


def base_place(directory, replica_id: str) -> str:
    """A new, empty base directory for ``replica_id`` (its name is the base's id): where :func:`write_base` puts
    the base -- in this process, or in a Spark task that has what the base is made of (``runtime/range_shards.py``:
    a shard's base seeded where its group's rows are cached) -- before :func:`adopt_base` makes it the replica's."""
    where = replica_root(directory, replica_id) / uuid.uuid4().hex
    where.mkdir(parents=True, exist_ok=True)
    return str(where)


def write_base(where: str, value) -> None:
    """``value`` as the base in ``where`` (a :func:`base_place`)."""
    write_value(Path(where) / BASE_FILE, value)


def adopt_base(engine_uid: str, replica_id: str, where: str, replaces: Replica | None = None,
               continues: bool = False, one_per_worker: bool = False) -> Replica:
    """The replica whose base was written to ``where`` (see :func:`new_base` for ``replaces`` and ``continues``)."""
    after = (replaces.base_id, replaces.log_length) if continues and replaces is not None else None
    if replaces is not None:
        discard(replaces)
    return Replica(engine_uid, replica_id, where, os.path.basename(where), continues=after,
                   one_per_worker=one_per_worker)


def discard(replica: Replica) -> None:
    """Delete a superseded replica's base and log files (no task reads them: the engine's jobs that used them
    are done; a stream reads its own copies, :func:`write_value`)."""
    shutil.rmtree(replica.directory, ignore_errors=True)


def write_value(path, value) -> "StoredValue":
    """``value`` (bytes as they are, anything else pickled) written once to ``path`` (temporary name, then
    renamed); returns the :class:`StoredValue` that reads it back."""
    raw = value if isinstance(value, (bytes, bytearray)) else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    _write_atomic(Path(path), lambda fh: fh.write(raw))
    return StoredValue(str(path))


def link_value(source, path) -> "StoredValue":
    """The file ``source`` under a second name ``path`` (a hard link, else a copy): a stream keeps the base it
    started from while the engine compacts the replica's files."""
    path = Path(path)
    try:
        if path.exists():
            path.unlink()
        os.link(source, path)
    except OSError:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        shutil.copyfile(source, tmp)
        os.replace(tmp, path)
    return StoredValue(str(path))


def cold(replica: Replica) -> Replica:
    """The replica under a new base id, over the same files: no worker's cache holds it, so its next task
    rebuilds from the files (what an idle worker Spark ended, or a new executor, meets; for tests)."""
    return replace(replica, base_id=uuid.uuid4().hex)


def pin(replica: Replica, directory) -> Replica:
    """The replica with its base and log files linked into ``directory`` (a stream's): the same base id
    and log, so worker caches still hit, but files that outlive the engine's compaction of the original."""
    from sparksub.directory import safe_name
    where = Path(directory) / safe_name(replica.replica_id) / replica.base_id
    where.mkdir(parents=True, exist_ok=True)
    for name in [BASE_FILE] + [f"log-{n}.arrow" for n in range(replica.log_length)]:
        link_value(Path(replica.directory) / name, where / name)
    return replace(replica, directory=str(where))


class StoredValue:
    """A pickled value in a file, read (once per process) by :meth:`get`; pickles as its path alone."""

    def __init__(self, path: str):
        self.path, self._value, self._loaded = str(path), None, False

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.path, self._value, self._loaded = state["path"], None, False

    def get(self):
        if not self._loaded:
            self._value, self._loaded = self.read(), True
        return self._value

    def read(self):
        """The value read anew, not kept: a large base a task reads once and drops (``runtime/stream._seed``)."""
        with open(self.path, "rb") as fh:
            return pickle.load(fh)


# ---- the worker cache -----------------------------------------------------------------------------------

def materialize(replica: Replica):
    """The replica's operator with every logged entry applied.  Removes it from the cache: the caller puts it
    back with :func:`remember` once its next batch succeeded, so a task that fails half-way never leaves a
    half-applied operator behind.  The outcome (hit, catch-up, rebuild) is counted (``replica.counters``)."""
    upto = replica.log_length
    entry = _CACHE.pop((replica.engine_uid, replica.replica_id), None)
    applied = cached_position(replica, entry)
    if applied is not None:
        operator = entry[2]
        outcome = "hits" if applied == upto else "catch_ups"
    else:
        operator, applied, outcome = replica.read_base().build(), 0, "rebuilds"
    replayed = 0
    for kind, value, streams in replica.read_log(applied, upto):
        if kind == "events":
            from sparksub.operators.events.partitions import feed_events
            feed_events(operator, streams, value)
        elif not getattr(operator, "stateless", False):
            operator.apply(value, "none")
        replayed += 1
    replica.counters.add({outcome: 1, "log_replayed": replayed})
    return operator


def cached_position(replica: Replica, entry) -> int | None:
    """Where a cache entry ``(base id, position, operator)`` stands in ``replica``'s log: its position on the
    replica's own base (not ahead of the log); 0 when it holds the compacted replica the base continues, at
    the end of that one's log; None when it is of no use (another base, or ahead)."""
    if entry is None:
        return None
    if entry[0] == replica.base_id:
        return entry[1] if entry[1] <= replica.log_length else None
    return 0 if replica.continues is not None and (entry[0], entry[1]) == replica.continues else None


def keep_one_per_group(replica: Replica) -> None:
    """Drop from this worker's cache every other replica of the replica's group and kind (zone, shard, row
    partition: the letter after ``#``): a Python worker keeps one of each per group, so that an executor holds
    its share of the group, not all of it.  Spark has no task affinity for these partitions (its scheduler
    shuffles the offers), so a task that lands on a worker which held another one rebuilds it from its files
    (counted: ``stats()['runtime']``); one worker per executor core and as many zones as cores keep that rare
    in steady state."""
    group, _, part = replica.replica_id.rpartition("#")
    prefix = f"{group}#{part[:1]}"
    for key in [k for k in _CACHE if k[0] == replica.engine_uid and k[1] != replica.replica_id
                and k[1].rpartition("#")[0] == group and k[1].startswith(prefix)]:
        _CACHE.pop(key, None)


def remember(replica: Replica, position: int, operator) -> None:
    _CACHE[(replica.engine_uid, replica.replica_id)] = (replica.base_id, position, operator)


# ---- counters in files ----------------------------------------------------------------------------------

_PROCESS: list = [None, None]   # [pid, token]: a forked process gets its own file
_COUNTS: dict[str, dict] = {}   # counter file path -> this process's totals in it


def _process_token() -> str:
    if _PROCESS[0] != os.getpid():
        _PROCESS[0], _PROCESS[1] = os.getpid(), uuid.uuid4().hex[:12]
        _COUNTS.clear()
    return _PROCESS[1]


def _role() -> str:
    try:
        from pyspark import TaskContext
        return "worker" if TaskContext.get() is not None else "driver"
    except ImportError:
        return "driver"


class CounterFile:
    """Counters kept in a directory: each process adds to its own file there (``counts-<role>-<token>.json``,
    rewritten whole under a temporary name and renamed), so no two writers share a file and a reader sums
    whole files.  ``label``: what the counts are of (a replica id); ``add`` takes a dict of increments (the
    interface a Spark accumulator had)."""

    def __init__(self, directory, label: str = ""):
        self.directory, self.label = str(directory), label

    def __getstate__(self):
        return {"directory": self.directory, "label": self.label}

    def __setstate__(self, state):
        self.directory, self.label = state["directory"], state["label"]

    def add(self, increments: dict) -> None:
        role = _role()
        path = os.path.join(self.directory, f"counts-{role}-{_process_token()}.json")
        mine = _COUNTS.setdefault(path, {"label": self.label, "role": role, "counts": {}})
        for k, v in increments.items():
            mine["counts"][k] = mine["counts"].get(k, 0) + int(v)
        try:
            os.makedirs(self.directory, exist_ok=True)
            _write_atomic(Path(path), lambda fh: fh.write(json.dumps(mine).encode()))
        except OSError:
            pass  # counting must never fail a task (a directory removed under a stopped stream, say)

    def read(self) -> dict:
        """The counts summed over every process's file."""
        out: dict = {}
        for rec in _records(Path(self.directory), recursive=False):
            for k, v in rec["counts"].items():
                out[k] = out.get(k, 0) + v
        return out


def read_counts(root) -> dict:
    """Every counter file under ``root`` summed: the totals (``hits``, ``catch_ups``, ``rebuilds``,
    ``log_replayed`` and whatever else was counted), ``driver`` (the share of the driver process: its own
    materialisations for ``result``/``stats``/EXPLAIN) and ``by_label`` (per replica or stream)."""
    total: dict = {k: 0 for k in CACHE_OUTCOMES}
    driver: dict = {k: 0 for k in CACHE_OUTCOMES}
    by_label: dict = {}
    for rec in _records(Path(root), recursive=True):
        mine = by_label.setdefault(rec.get("label", ""), {})
        for k, v in rec["counts"].items():
            total[k] = total.get(k, 0) + v
            mine[k] = mine.get(k, 0) + v
            if rec.get("role") == "driver":
                driver[k] = driver.get(k, 0) + v
    return {**total, "driver": driver, "by_label": by_label}


def _records(root: Path, recursive: bool):
    if not root.is_dir():
        return
    for path in (root.rglob("counts-*.json") if recursive else root.glob("counts-*.json")):
        try:
            yield json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # removed meanwhile


# ---- files ----------------------------------------------------------------------------------------------

def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_arrow(fh, table: pa.Table) -> None:
    with pa.ipc.new_file(fh, table.schema) as writer:
        writer.write_table(table)
