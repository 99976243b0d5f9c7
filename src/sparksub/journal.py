"""The engine's journal, checkpoints and kept notifications: what makes ``Engine(path=...)`` durable (issue 16
item 6; docs/architecture.md, "The durable directory").

Everything the engine knows is kept under its directory so that ``Engine(path=same)`` in a new process --
after a clean ``close()`` or a ``kill -9`` at any point -- continues with the same tables, subscriptions,
event queries and partial matches, sequence numbers and settings, and no notification lost or repeated:

* an append-only **journal** of committed operations, one record per ``create_table``, ``load``,
  ``subscribe`` / ``subscribe_many``, ``unsubscribe``, ``register_event_query`` /
  ``register_event_queries`` (a bulk registration: one record) / ``unregister_event_query``, ``publish``
  and setting change.  A record is one line -- its length, its
  CRC-32 and a JSON object -- written and fsynced before the engine method returns; its payload (a batch's
  rows, a parameter table, event state) is a side file written first (temporary name, fsync, rename).  A
  torn last record (a kill mid-write) fails its length or CRC check and is ignored, as is everything
  after it;
* periodic **checkpoints**: a full snapshot (the tables' rows as Parquet, the live subscriptions as their
  parameter tables, the event classes with their replicas' bases and logs, the sequence numbers, the
  settings, the index of kept notifications), after which the journal restarts.  Reopening reads the
  current checkpoint and replays the journal written since: history before the checkpoint is not
  replayed.  A checkpoint is made every ``Engine.checkpoint_interval`` records (or side-file bytes past
  :data:`CHECKPOINT_BYTES`) and at ``close()``;
* the **notifications** of every ``publish``, one Parquet file per call,
  ``notifications/<table>/<first seq>.parquet``, written before its journal record: a client killed after
  the commit but before it consumed the output reads it again (``Engine.notifications``, or ``publish``
  with the same ``batch_id``), and ``matches(name)`` reads event matches from them.  The newest
  ``Engine.notification_retention_rows`` rows per table are kept; older files are deleted at checkpoints.

Groups are rebuilt on reopen from the rows and the subscriptions (the operators are deterministic).  Event
classes keep their partial matches: each replica's base (an executor snapshot taken when the class was
built or compacted) and the event batches logged to it since are copied into ``events/`` as they are
committed, and a reopened replica is that base and log again -- the runtime's cold path (rebuild from the
base, replay the log) brings its executor back.

The commit order of a ``publish``: the notifications are computed (a Spark job), their file and the batch's
rows are written, the in-memory state changes, the event replicas' new log entries are copied, and the
journal record is written -- the commit point.  A failure before the in-memory change changes nothing; one
after it (the disk failing mid-commit) leaves the engine refusing further changes until it is reopened
from its directory, which holds the state as of the last record.  The other operations write their record
before they change anything.

Without a path (a temporary directory, removed at exit) nothing is journaled: only the notifications are
kept, for ``notifications()``, ``matches()`` and ``batch_id``.  One live engine per directory: a lock file
(``LOCK``, ``flock`` + the holder's pid; the kernel drops the lock when the holder dies, so a stale lock
is taken over).

Layout::

    <root>/SPARKSUB                         the directory's format (a directory without it must be empty)
    <root>/LOCK  CURRENT                    the lock; the current checkpoint's number (JSON, renamed in)
    <root>/checkpoints/<n>/                 manifest.json, rows-<table>.parquet, events.pickle, published.parquet
    <root>/journal/<n>.log  journal/<n>/    the records since checkpoint n; their side files
    <root>/subscriptions/<id>.arrow         parameter tables of bulk subscriptions; single ones, consolidated
    <root>/event_queries/<id>.arrow         bulk-registered event queries: names + parameter table per call
    <root>/events/<replica>/<archive>/      an event replica's base.pickle and log-<k>.arrow
    <root>/notifications/<table>/           <first seq>.parquet per publish

Pure: files, pyarrow and pickle; no pyspark (the engine hands in the function that writes a DataFrame,
``runtime/output.py``).  Pickle holds what has no columnar form (event plans, executor snapshots): a
directory is read by the sparksub version that wrote it (``FORMAT`` in the manifest).
"""
from __future__ import annotations

import fcntl
import gc
import json
import logging
import os
import pickle
import shutil
import uuid
import weakref
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparksub.directory import safe_name
from sparksub.row_files import rows_table
from sparksub.errors import DirectoryLocked, InvalidArgument, SparksubError

__all__ = ["EngineJournal", "DurableSetting", "SETTINGS", "NOTIFICATION_RETENTION_ROWS", "CHECKPOINT_RECORDS",
           "write_parquet_atomic"]

#: the directory format this module writes (and the only one it reads)
FORMAT = 1
#: journal records between checkpoints (``Engine.checkpoint_interval``)
CHECKPOINT_RECORDS = 1000
#: side-file bytes between checkpoints: a journal of large batches is folded into a checkpoint sooner
CHECKPOINT_BYTES = 256 << 20
#: notification rows kept per table (``Engine.notification_retention_rows``); older files go at checkpoints
NOTIFICATION_RETENTION_ROWS = 1_000_000
#: the engine's settings that change results (partitioning, routing, time units, executors): journaled
SETTINGS = ("parallelism", "join_partitions", "event_partitions", "filter_shard_size", "join_router_mode",
            "event_seconds_per_tick", "event_executor")

_log = logging.getLogger("sparksub.journal")
_PARAMS_META = b"sparksub.params"
_ENTRY_KIND = b"sparksub.entry"
_ENTRY_STREAMS = b"sparksub.streams"
#: the op kinds of issue 19's block (EngineJournal._replay_extra): a batch joining the refresh buffer, a timed apply
_EXTRA_OPS = ("refresh_buffer", "refresh_cost")


# ---- files ------------------------------------------------------------------------------------------------

def fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, write, sync: bool = True) -> int:
    """``write(fh)`` into a temporary file beside ``path``, fsynced and renamed onto it (a reader never sees
    half a file; a crash leaves the old file or none).  Returns the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
            size = fh.tell()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(path.parent)
    return size


def _write_arrow(path: Path, table: pa.Table, sync: bool = True) -> int:
    def write(fh):
        with pa.ipc.new_file(fh, table.schema) as writer:
            writer.write_table(table)
    return _write_atomic(path, write, sync)


def _read_arrow(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def _write_pickle(path: Path, value, sync: bool = True) -> int:
    raw = value if isinstance(value, (bytes, bytearray)) else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _write_atomic(path, lambda fh: fh.write(raw), sync)


def read_kept(path) -> pa.Table:
    """One publish's kept notifications as an Arrow table, its partitions in order (the directory's
    ``part-<partition>`` files by name: ``runtime/output.py`` writes them from the tasks), or the single
    file an engine kept before issue 16 item 3."""
    path = Path(path)
    if not path.is_dir():
        return pq.read_table(path)
    tables = [pq.read_table(p) for p in sorted(path.glob("part-*.parquet"))]
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


def remove_path(path: Path) -> None:
    """Delete a kept file or directory (a publish's notifications), if it is there."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_parquet_atomic(path, table: pa.Table, sync: bool = True) -> int:
    """``table`` as one Parquet file at ``path`` (temporary name, fsync, rename); returns its rows."""
    _write_atomic(Path(path), lambda fh: pq.write_table(table, fh), sync)
    return table.num_rows


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# ---- the journal file -------------------------------------------------------------------------------------

def _frame(record: dict) -> bytes:
    """One record as a line: ``<length> <crc32 hex> <json>\\n`` (a torn write fails one of the checks)."""
    body = _json(record).encode()
    return b"%d %08x " % (len(body), zlib.crc32(body)) + body + b"\n"


def read_records(path: Path) -> tuple[list[dict], int]:
    """The journal's whole records, oldest first, and the byte length they span; reading stops at the first
    record that is torn (short, or failing its length or CRC check)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    out, pos = [], 0
    while pos < len(data):
        sp1 = data.find(b" ", pos)
        sp2 = data.find(b" ", sp1 + 1) if sp1 >= 0 else -1
        if sp2 < 0:
            break
        try:
            n, crc = int(data[pos:sp1]), int(data[sp1 + 1:sp2], 16)
        except ValueError:
            break
        body = data[sp2 + 1:sp2 + 1 + n]
        if len(body) < n or data[sp2 + 1 + n:sp2 + 2 + n] != b"\n" or zlib.crc32(body) != crc:
            break
        try:
            out.append(json.loads(body))
        except ValueError:
            break
        pos = sp2 + 2 + n
    return out, pos


class _Lock:
    """``LOCK``: an exclusive ``flock`` held while the engine lives, the holder's pid written in it (for the
    message).  The kernel releases a dead process's flock, so a stale lock file is simply taken over."""

    def __init__(self, root: Path):
        self.path = root / "LOCK"
        self._fh = open(self.path, "a+b")
        try:
            try:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                gc.collect()    # an engine of this process no one references any more is not a live one
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._fh.seek(0)
            holder = self._fh.read().decode(errors="replace").strip() or "?"
            self._fh.close()
            raise DirectoryLocked(f"the engine directory {str(root)!r} is in use by another live Engine (process "
                                  f"{holder}): one engine per directory; close() it, or use another path") from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(str(os.getpid()).encode())
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def release(self) -> None:
        if not self._fh.closed:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()


# ---- parameter tables -------------------------------------------------------------------------------------

def _params_table(ids: np.ndarray, columns: dict) -> pa.Table:
    """A bulk subscription's ids and bound parameter columns as one Arrow table; each column's numpy dtype in
    the metadata, so that reading it back gives the arrays ``subscribe_many`` bound (an object column stays
    Python objects).  A column Arrow cannot hold (values of mixed types) is pickled, whole."""
    try:
        arrays = {"id": pa.array(np.asarray(ids, dtype=object), pa.string())}
        for name, values in columns.items():
            arrays[name] = pa.array(values.tolist() if values.dtype == object else values)
        meta = {name: str(values.dtype) for name, values in columns.items()}
        return pa.table(arrays).replace_schema_metadata({_PARAMS_META: _json(meta).encode()})
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        raw = pickle.dumps((ids, columns), protocol=pickle.HIGHEST_PROTOCOL)
        return pa.table({"pickle": pa.array([raw], pa.binary())})


#: the column of an event-query parameter file that holds the queries' names (no parameter is called so)
_EVENT_NAMES = "#name"
_EVENT_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def _event_params_table(names: list, columns: dict) -> pa.Table:
    """A bulk registration of event queries (``Engine.register_event_queries``): the names and the parameter
    columns as one Arrow table.  A column of one Python type is stored as that Arrow type; one of mixed types
    (ints and floats, numbers and strings) as JSON texts (field metadata ``json``), which read back exactly."""
    arrays, fields = [pa.array(names, pa.string())], [pa.field(_EVENT_NAMES, pa.string())]
    for name, values in columns.items():
        kinds = set(map(type, values))
        array = None
        if len(kinds) == 1 and next(iter(kinds)) in _EVENT_TYPES:
            try:
                array = pa.array(values, _EVENT_TYPES[next(iter(kinds))])
            except (pa.ArrowInvalid, OverflowError):      # an int beyond 64 bits
                array = None
        if array is None:
            arrays.append(pa.array([json.dumps(v) for v in values], pa.string()))
            fields.append(pa.field(name, pa.string(), metadata={b"json": b"1"}))
        else:
            arrays.append(array)
            fields.append(pa.field(name, array.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _event_params_columns(table: pa.Table) -> tuple[list, dict]:
    """:func:`_event_params_table` read back: ``(names, {parameter: values})``."""
    out = {}
    for f in table.schema:
        if f.name == _EVENT_NAMES:
            continue
        values = table.column(f.name).to_pylist()
        out[f.name] = [json.loads(v) for v in values] if (f.metadata or {}).get(b"json") else values
    return table.column(_EVENT_NAMES).to_pylist(), out


def _params_columns(table: pa.Table) -> tuple[np.ndarray, dict]:
    """:func:`_params_table` read back: ``(ids, {parameter: array})``."""
    meta = (table.schema.metadata or {}).get(_PARAMS_META)
    if meta is None:
        return pickle.loads(table.column("pickle")[0].as_py())
    dtypes = json.loads(meta)
    ids = np.empty(table.num_rows, dtype=object)
    ids[:] = table.column("id").to_pylist()
    out = {}
    for name, dtype in dtypes.items():
        column = table.column(name)
        if dtype == "object":
            values = np.empty(table.num_rows, dtype=object)
            values[:] = column.to_pylist()
        else:
            values = column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
        out[name] = values
    return ids, out


# ---- settings ---------------------------------------------------------------------------------------------

def _registered_in(groups: dict, ids: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Whether each id is a subscription of the group beside it (``groups``: group id -> the engine's entry): a
    subscription id lives in one group at a time.  One vectorised lookup per group where its registry has one
    (``known``): a checkpoint after a drop in a bulk of 100K took 15 s asking ``_find_group`` id by id."""
    keep = np.zeros(len(ids), dtype=bool)
    for gid in set(group_ids.tolist()):
        entry = groups.get(gid)
        if entry is None:
            continue
        mine = np.flatnonzero(group_ids == gid)
        known = getattr(entry.registry, "known", None)
        keep[mine] = (known(ids[mine]) if known is not None
                      else np.fromiter((sid in entry.registry for sid in ids[mine].tolist()), dtype=bool,
                                       count=len(mine)))
    return keep


class DurableSetting:
    """An ``Engine`` setting that changes results (:data:`SETTINGS`): setting it journals the new value, so a
    reopened engine runs with the settings in force when each operation was journaled."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, engine, owner=None):
        if engine is None:
            return self
        try:
            return engine.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    def __set__(self, engine, value):
        journal = engine.__dict__.get("_journal")
        if journal is not None:
            journal.setting(self.name, value)
        engine.__dict__[self.name] = value


# ---- the journal ------------------------------------------------------------------------------------------

class EngineJournal:
    """One engine's journal, checkpoints and kept notifications (module doc).  ``class_state`` builds the
    engine's ``EventClassState`` (cls, replicas, tick, failures, rejected) on reopen.  :meth:`open` reads
    back what the directory holds."""

    def __init__(self, engine, class_state):
        # weakly: an engine no one references is collected (and its lock released) without the cycle collector
        self.engine = weakref.proxy(engine)
        self.root: Path = engine.directory.root
        self.durable = not engine.directory.temporary
        self._class_state = class_state
        self.replaying = False
        self.closed = False
        self.broken: str | None = None          # why a commit failed half-way (then every change is refused)
        self.generation = 0                     # the checkpoint the journal follows (0: none yet)
        self.records = 0                        # records since it
        self.side_bytes = 0
        self._journal_fh = None
        self._lock: _Lock | None = None
        self.published: list[dict] = []         # per publish: table, first_seq, seqs, file, rows, batch_id
        self.publishes = 0                      # publish calls committed (ever)
        self._batches: dict = {}                # batch_id -> its entry of ``published``
        self.subscriptions: list[dict] = []     # the subscription batches (durable engines), registration order
        self._dropped = False                   # an unsubscribe since the last checkpoint
        self.event_queries: dict[str, dict] = {}  # name -> text, source, seconds_per_tick, since
        self._archived: dict[tuple, list] = {}  # (replica id, base id) -> [archive dir, entries archived]
        self._events: dict | None = None        # during a reopen: the event state, installed at the end
        self._init_extra()                      # issue 19's state (the block at the end of this class)

    # ---- opening and closing ----------------------------------------------------------------------------------
    def open(self) -> None:
        """Take the directory's lock and read back the engine it holds: the current checkpoint, then the
        journal's whole records (a torn last one is cut off)."""
        if not self.durable:
            return
        marker = self.root / "SPARKSUB"
        if not marker.exists():
            if any(self.root.iterdir()):   # never take over (nor clean up in) a directory of something else
                raise InvalidArgument(f"Engine(path={str(self.root)!r}): the directory holds files and no sparksub "
                                      f"engine; give a new or empty directory")
            _write_atomic(marker, lambda fh: fh.write(_json({"format": FORMAT}).encode()))
        elif json.loads(marker.read_text()).get("format") != FORMAT:
            raise SparksubError(f"engine directory {str(self.root)!r}: written in format "
                                f"{json.loads(marker.read_text()).get('format')!r}, this sparksub reads {FORMAT}")
        self._lock = _Lock(self.root)
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise

    def _open(self) -> None:
        # the runtime's files of the process before belong to no one now: groups rebuild from the rows, event
        # replicas are made again from events/, and a deliver() side left pending (its pinned files under seeds/)
        # is built from the reopened groups when asked for
        shutil.rmtree(self.root / "groups", ignore_errors=True)
        shutil.rmtree(self.root / "seeds", ignore_errors=True)
        current = self.root / "CURRENT"
        if current.exists():
            self.generation = int(json.loads(current.read_text())["checkpoint"])
        path = self._journal_path()
        records, valid = read_records(path)
        self.replaying = True
        try:
            if self.generation:
                self._restore_checkpoint(self.root / "checkpoints" / str(self.generation))
            for record in records:
                self._replay(record)
            self._install_events()
            self._install_stream_joins()
            self._install_refreshing()
        finally:
            self.replaying = False
        self.records = len(records)
        if path.exists() and path.stat().st_size > valid:
            _log.warning("engine directory %s: the journal's last record is torn (a kill mid-write); ignored",
                         self.root)
            with open(path, "r+b") as fh:
                fh.truncate(valid)
                os.fsync(fh.fileno())
        self._start_journal()

    def close(self, checkpoint: bool = True) -> None:
        """A last checkpoint (a durable engine; ``checkpoint=False``: none, the next open replays the journal),
        then the lock is released; the engine takes no more changes."""
        if self.closed:
            return
        try:
            if checkpoint and self.durable and self.broken is None:
                self.checkpoint()
        finally:
            self.closed = True
            if self._journal_fh is not None:
                self._journal_fh.close()
            if self._lock is not None:
                self._lock.release()

    def _journal_path(self) -> Path:
        return self.root / "journal" / f"{self.generation}.log"

    def _side(self, name: str) -> Path:
        return self.root / "journal" / str(self.generation) / name

    def _start_journal(self) -> None:
        path = self._journal_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        if self._journal_fh is not None:
            self._journal_fh.close()
        self._journal_fh = open(path, "ab")
        if fresh:
            os.fsync(self._journal_fh.fileno())
            fsync_dir(path.parent)

    # ---- writing records ----------------------------------------------------------------------------------
    def _usable(self) -> bool:
        """Whether this change is to be journaled (a durable engine, not replaying); refuses changes to a
        closed or broken engine."""
        if self.replaying:
            return False
        if self.closed:
            raise SparksubError("this Engine was closed; open its directory again: Engine(path=...)")
        if self.broken is not None:
            raise SparksubError(f"this Engine stopped accepting changes: {self.broken}; reopen its directory "
                                f"(Engine(path=...)) to continue from its last committed operation")
        return self.durable

    def _before_change(self) -> None:
        """Called where the engine's state is whole (the operation has changed nothing yet): a due checkpoint."""
        if self.records >= max(1, int(self.engine.checkpoint_interval)) or self.side_bytes >= CHECKPOINT_BYTES:
            self.checkpoint()

    def _append(self, record: dict, after_change: bool = False) -> None:
        """Write and fsync one record.  ``after_change``: the engine's memory already holds the operation, so
        a failure leaves the engine refusing changes (its directory is the truth)."""
        data = _frame(record)
        fh = self._journal_fh
        start = fh.tell()
        try:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        except OSError as err:
            try:
                fh.truncate(start)
            except OSError:
                after_change = True
            if after_change:
                self.broken = f"its directory could not be written ({err})"
            raise SparksubError(f"the engine's journal could not be written: {err}") from err
        self.records += 1

    def _name(self, kind: str, ext: str) -> str:
        return f"{kind}-{self.records}-{uuid.uuid4().hex[:8]}.{ext}"

    # ---- the operations ---------------------------------------------------------------------------------
    def create_table(self, tdef) -> None:
        """After the table is in the catalog (adding it is the check)."""
        if self._usable():
            self._append({"op": "create_table", "name": tdef.name, "columns": [list(c) for c in tdef.columns],
                          "key": tdef.key}, after_change=True)

    def load(self, tdef, batch: pa.Table) -> None:
        if self._usable():
            self._before_change()
            name = self._name("load", "arrow")
            self.side_bytes += _write_arrow(self._side(name), batch)
            self._append({"op": "load", "table": tdef.name, "rows": name})

    def subscribe(self, sub_id: str, sql: str, group_id: str) -> None:
        if self._usable():
            self._before_change()
            self._append({"op": "subscribe", "id": sub_id, "sql": sql, "group": group_id})
        if self.durable:
            # consecutive single subscriptions share one entry of three lists: a dict each cost ~230 B of driver
            # memory per subscription (issue 16 item 3)
            last = self.subscriptions[-1] if self.subscriptions else None
            if last is None or last["kind"] != "singles_run":
                last = {"kind": "singles_run", "ids": [], "sqls": [], "groups": []}
                self.subscriptions.append(last)
            last["ids"].append(sub_id)
            last["sqls"].append(sql)
            last["groups"].append(group_id)

    def subscribe_many(self, template: str, ids: np.ndarray, columns: dict, group_id: str) -> None:
        """The parameter table goes to ``subscriptions/`` (it stays there while any of its ids lives)."""
        entry = {"kind": "bulk", "template": template, "group": group_id, "count": int(len(ids)), "file": None}
        if self._usable():
            self._before_change()
            entry["file"] = f"{uuid.uuid4().hex}.arrow"
            self.side_bytes += _write_arrow(self.root / "subscriptions" / entry["file"], _params_table(ids, columns))
            self._append({"op": "subscribe_many", **entry})
        if self.durable:
            self.subscriptions.append(entry)

    def unsubscribe(self, sub_id: str) -> None:
        if self._usable():
            self._before_change()
            self._append({"op": "unsubscribe", "id": sub_id})
        self._dropped = True

    def register_event_query(self, name: str, text: str, source: str, plan, classes: dict) -> None:
        """At the commit point of a registration: ``plan`` and ``classes`` are what the engine is about to
        install (their replicas' files written).  ``source``: text that parses to the query."""
        query = {"text": text, "source": source, "seconds_per_tick": self.engine.event_seconds_per_tick,
                 "since": int(self.engine._next_seq)}
        if self._usable():
            self._before_change()
            events = self._event_state(plan, classes, self._resets_after(plan))
            self._append({"op": "register_event_query", "name": name, **query, "events": events})
        self.event_queries[name] = query

    def register_event_queries(self, template: str, columns: dict, names: list, plan, classes: dict) -> None:
        """At the commit point of a bulk registration (``Engine.register_event_queries``): the parameter table
        with the names goes to ``event_queries/`` (it stays there while any of its queries lives), and one
        record holds the template; a reopen registers them again in bulk (``_register_batch``)."""
        batch = {"template": template, "file": None, "seconds_per_tick": self.engine.event_seconds_per_tick,
                 "since": int(self.engine._next_seq)}
        if self._usable():
            self._before_change()
            batch["file"] = f"{uuid.uuid4().hex}.arrow"
            self.side_bytes += _write_arrow(self.root / "event_queries" / batch["file"],
                                            _event_params_table(names, columns))
            events = self._event_state(plan, classes, self._resets_after(plan))
            self._append({"op": "register_event_queries", **batch, "count": len(names), "events": events})
        for q in names:                          # one entry, shared by the batch's queries
            self.event_queries[q] = batch

    def unregister_event_query(self, name: str, plan, classes: dict) -> None:
        if self._usable():
            self._before_change()
            events = self._event_state(plan, classes, self._resets_after(plan, dropped=name))
            self._append({"op": "unregister_event_query", "name": name, "events": events})
        self.event_queries.pop(name, None)

    def _resets_after(self, plan, dropped: str | None = None) -> dict:
        """The engine's per-query state-reset counts once ``plan`` is installed (``Engine._commit_event_plan``)."""
        resets = dict(self.engine._event_resets)
        for q in plan.reset:
            resets[q] = resets.get(q, 0) + 1
        resets.pop(dropped, None)
        return resets

    def setting(self, name: str, value) -> None:
        if not self._usable():
            return
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidArgument(f"Engine.{name} = {value!r}: settings are kept in the engine's directory; use a "
                                  f"number, a string or None") from None
        self._before_change()
        self._append({"op": "setting", "name": name, "value": value})

    # ---- publish ------------------------------------------------------------------------------------------
    def committed(self, batch_id) -> dict | None:
        """The kept entry of the publish committed under ``batch_id`` (None: none was)."""
        return self._batches.get(batch_id)

    def publish_begin(self, tdef, first_seq: int, seqs: int, batch: pa.Table | None, batch_id, write_output) -> dict:
        """Before a publish changes anything: keep its notifications (``write_output(path) -> rows``, the
        engine's DataFrame writer) and, on a keyed table of a durable engine, the rows it applies.  Returns
        the entry :meth:`publish_commit` commits."""
        durable = self._usable()
        if durable:
            self._before_change()
        low = tdef.name.lower()
        taken = {e["file"] for e in self.published if e["table"] == low}
        name, k = f"{first_seq}.parquet", 1
        while name in taken:                      # an empty batch leaves the next one the same first seq
            name, k = f"{first_seq}-{k}.parquet", k + 1
        rows = int(write_output(self.root / "notifications" / safe_name(low) / name))
        entry = {"table": low, "first_seq": int(first_seq), "seqs": int(seqs), "file": name, "rows": rows,
                 "batch_id": batch_id, "applied": None}
        if durable and batch is not None and tdef.key is not None:
            entry["applied"] = self._name("publish", "arrow")
            self.side_bytes += _write_arrow(self._side(entry["applied"]), batch)
        return entry

    def publish_commit(self, entry: dict, tdef) -> None:
        """After the publish changed the engine's memory: copy its event replicas' new log entries and write
        the record -- the commit point."""
        if self._usable():
            engine = self.engine
            try:
                events = {cid: self._class_refs(c) for cid, c in engine._event_classes.items()
                          if tdef.name in c.cls.streams}
                joins = self._stream_join_refs(tdef)   # (issue 19: the stream joins' kept events, below)
            except OSError as err:
                self.broken = f"its directory could not be written ({err})"
                raise SparksubError(f"the engine's event state could not be kept: {err}") from err
            self._append({"op": "publish", **entry, "next_seq": int(engine._next_seq),
                          "clock": engine._event_clocks.get(tdef.name.lower()), "events": events,
                          **({"stream_joins": joins} if joins else {})}, after_change=True)
        self._index(entry)

    def _index(self, entry: dict) -> None:
        entry = {k: entry[k] for k in ("table", "first_seq", "seqs", "file", "rows", "batch_id")}
        self.published.append(entry)
        self.publishes += 1
        if entry["batch_id"] is not None:
            self._batches[entry["batch_id"]] = entry
        if not self.durable and self.publishes % CHECKPOINT_RECORDS == 0:
            for path in self._retain():
                remove_path(path)

    # ---- reading the kept notifications -----------------------------------------------------------------
    def notification_path(self, entry: dict) -> Path | None:
        if entry["file"] is None:
            return None
        return self.root / "notifications" / safe_name(entry["table"]) / entry["file"]

    def notification_files(self, tables=None, since_seq: int | None = None) -> list[str]:
        """The kept files of ``tables`` (lower-case names; None: all) that may hold rows with ``seq >=
        since_seq``, oldest first."""
        out = []
        for e in self.published:
            if e["file"] is None or (tables is not None and e["table"] not in tables):
                continue
            if since_seq is not None and e["first_seq"] + max(e["seqs"], 1) <= since_seq:
                continue
            out.append(str(self.notification_path(e)))
        return out

    def matches(self, name: str, attributes, tables) -> list[dict]:
        """The kept matches of event query ``name`` since its registration, as the engine's publish ordered
        them: per publish by ``t1`` and, for equal ``t1``, by partition (stable: a partition's rows in its
        executor's order); each a dict of the query's ``attributes`` (as it names them) plus ``t0``, ``t1``."""
        from sparksub.operators.events.partitions import match_dicts
        since = self.event_queries.get(name, {}).get("since", 0)
        out = []
        for path in self.notification_files(tables, since):
            out += match_dicts(read_kept(path), name, attributes)
        return out

    def _retain(self) -> list[Path]:
        """The retention window: per table the newest files holding at most ``notification_retention_rows``
        rows (the newest one always) stay.  Returns the files dropped, for the caller to delete once the index
        without them is durable; a dropped publish keeps its batch id."""
        limit = int(self.engine.notification_retention_rows)
        kept: dict[str, int] = {}
        dropped = []
        for e in reversed(self.published):
            if e["file"] is None:
                continue
            total = kept.get(e["table"])
            if total is None or total + e["rows"] <= limit:
                kept[e["table"]] = (total or 0) + e["rows"]
                continue
            dropped.append(self.notification_path(e))
            e["file"] = None
        self.published = [e for e in self.published if e["file"] is not None or e["batch_id"] is not None]
        return dropped

    # ---- event state ------------------------------------------------------------------------------------
    def _archive(self, rid: str, replica) -> list:
        """Copy into ``events/`` what of ``replica`` (``runtime/replicas.Replica``: a base and a log) is not
        there yet: its base once, then each new log entry.  Returns ``[archive dir, entries, rows]``."""
        key = (rid, replica.base_id)
        have = self._archived.get(key)
        if have is None:
            have = [uuid.uuid4().hex, 0]
            _write_pickle(self._archive_dir(rid, have[0]) / "base.pickle", replica.read_base())
            self._archived[key] = have
        if have[1] < replica.log_length:
            where = self._archive_dir(rid, have[0])
            for n, (kind, value, streams) in enumerate(replica.read_log(have[1], replica.log_length), start=have[1]):
                _write_entry(where / f"log-{n}.arrow", kind, value, streams)
            have[1] = replica.log_length
        return [have[0], int(replica.log_length), int(replica.logged_rows)]

    def _archive_dir(self, rid: str, archive: str) -> Path:
        return self.root / "events" / safe_name(rid) / archive

    def _class_refs(self, c) -> dict:
        return {"tick": c.tick, "failures": c.failures, "rejected": c.rejected,
                "replicas": {rid: self._archive(rid, r) for rid, r in c.replicas.items()}}

    def _event_state(self, plan, classes: dict, resets: dict) -> str:
        """The event plan and classes (their replicas archived) as a side file; returns its name."""
        state = {"plan": plan, "classes": {cid: self._class_refs(c) for cid, c in classes.items()},
                 "resets": resets}
        name = self._name("events", "pickle")
        self.side_bytes += _write_pickle(self._side(name), state)
        return name

    def _install_events(self) -> None:
        """End of a reopen: the event classes as the checkpoint and the journal left them, each replica a new
        runtime replica (runtime/replicas.py) made of its archived base and log."""
        if self._events is None:
            return
        from sparksub.runtime import replicas as runtime_replicas
        engine, plan = self.engine, self._events["plan"]
        classes = {}
        for cid, refs in self._events["classes"].items():
            replicas = {}
            for rid, (archive, length, _rows) in refs["replicas"].items():
                where = self._archive_dir(rid, archive)
                replica = runtime_replicas.new_base(engine.directory, engine.uid, rid,
                                                    (where / "base.pickle").read_bytes())
                for n in range(length):
                    _, value, streams = _read_entry(where / f"log-{n}.arrow")
                    replica = replica.append(value, streams)
                self._archived[(rid, replica.base_id)] = [archive, length]
                replicas[rid] = replica
            classes[cid] = self._class_state(plan.classes[cid], replicas, refs["tick"], refs["failures"],
                                             refs["rejected"])
        engine._event_plan, engine._event_classes = plan, classes
        engine._event_resets = dict(self._events["resets"])
        self._events = None

    # ---- replay -------------------------------------------------------------------------------------------
    def _replay(self, record: dict) -> None:
        engine, op = self.engine, record["op"]
        if op == "create_table":
            _create_table(engine, record)
        elif op == "load":
            self._apply_rows(record["table"], _read_arrow(self._side(record["rows"])))
        elif op == "subscribe":
            engine.subscribe(record["id"], record["sql"])
        elif op == "subscribe_many":
            self._subscribe_many(record)
        elif op == "unsubscribe":
            engine.unsubscribe(record["id"])
        elif op == "register_event_query":
            self._register(record["name"], record)
            self._events = _read_pickle(self._side(record["events"]))
        elif op == "register_event_queries":
            self._register_batch(record)
            self._events = _read_pickle(self._side(record["events"]))
        elif op == "unregister_event_query":
            engine._event_queries = {q: r for q, r in engine._event_queries.items() if q != record["name"]}
            self.event_queries.pop(record["name"], None)
            self._events = _read_pickle(self._side(record["events"]))
        elif op == "setting":
            setattr(engine, record["name"], record["value"])
        elif op == "publish":
            if record.get("applied"):
                self._apply_rows(record["table"], _read_arrow(self._side(record["applied"])))
            engine._next_seq = int(record["next_seq"])
            if record.get("clock") is not None:
                engine._event_clocks[record["table"]] = list(record["clock"])
            for cid, refs in record["events"].items():
                self._events["classes"][cid] = refs
            self._stream_joins.update(record.get("stream_joins") or {})
            self._index(record)
        elif op in _EXTRA_OPS:
            self._replay_extra(record)   # (issue 19's op kinds: the block at the end of this class)
        else:
            raise SparksubError(f"engine directory {str(self.root)!r}: unknown journal record {op!r} (written by "
                                f"another sparksub version?)")

    def _apply_rows(self, table: str, batch: pa.Table) -> None:
        engine = self.engine
        state = engine._table(table)
        engine._apply_rows(state, batch)
        for entry in engine._groups_on(state):
            engine._changed(entry, subscriptions=True)   # groups rebuild from the rows

    def _subscribe_many(self, batch: dict) -> None:
        ids, columns = _params_columns(_read_arrow(self.root / "subscriptions" / batch["file"]))
        self.engine.subscribe_many(batch["template"], {"id": ids, **columns})
        self.subscriptions[-1]["file"] = batch["file"]

    def _register(self, name: str, saved: dict) -> None:
        """An event query back in the engine's registry, analysed as when it was registered (with the
        ``seconds_per_tick`` then in force); its class comes with the event state."""
        from sparksub.grammar.events import parse_event_query
        engine = self.engine
        now = engine.__dict__.get("event_seconds_per_tick")
        engine.__dict__["event_seconds_per_tick"] = saved["seconds_per_tick"]
        try:
            record = engine._event_record(name, saved["text"], parse_event_query(saved["source"]))
        finally:
            engine.__dict__["event_seconds_per_tick"] = now
        engine._event_queries = {**engine._event_queries, name: record}
        self.event_queries[name] = {k: saved[k] for k in ("text", "source", "seconds_per_tick", "since")}

    def _register_batch(self, saved: dict) -> None:
        """A bulk registration of event queries back in the engine's registry, through the bulk path
        (``Engine._event_batch``: the template parsed once, each kind signature analysed once), with the
        ``seconds_per_tick`` then in force."""
        names, columns = _event_params_columns(_read_arrow(self.root / "event_queries" / saved["file"]))
        engine = self.engine
        now = engine.__dict__.get("event_seconds_per_tick")
        engine.__dict__["event_seconds_per_tick"] = saved["seconds_per_tick"]
        try:
            _, records = engine._event_batch(saved["template"], columns, names, replaying=True)
        finally:
            engine.__dict__["event_seconds_per_tick"] = now
        engine._event_queries = {**engine._event_queries, **records}
        batch = {k: saved[k] for k in ("template", "file", "seconds_per_tick", "since")}
        for q in names:
            self.event_queries[q] = batch

    def _event_query_entries(self) -> list[dict]:
        """The checkpoint's event queries in registration order: one entry per query registered alone, one per
        run of queries of one bulk registration (its parameter file; a new one with the run's rows when some
        of the batch were dropped)."""
        out: list[dict] = []
        run: list[str] = []

        def flush():
            if not run:
                return
            batch = self.event_queries[run[0]]
            table = _read_arrow(self.root / "event_queries" / batch["file"])
            if table.num_rows != len(run) or table.column(_EVENT_NAMES).to_pylist() != run:
                import pyarrow.compute as pc
                kept = table.filter(pc.is_in(table.column(_EVENT_NAMES), pa.array(run, pa.string())))
                batch = {**batch, "file": f"{uuid.uuid4().hex}.arrow"}
                _write_arrow(self.root / "event_queries" / batch["file"], kept)
                for q in run:
                    self.event_queries[q] = batch
            out.append({"batch": batch})
            run.clear()

        for q in self.engine._event_queries:
            entry = self.event_queries[q]
            if entry.get("file") is not None and "template" in entry:
                if run and self.event_queries[run[0]] is not entry:
                    flush()
                run.append(q)
                continue
            flush()
            out.append({"name": q, **entry})
        flush()
        return out

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write a full snapshot of the engine's state, make it the current one, restart the journal, and delete
        what no longer belongs to it (the old checkpoint and journal, dropped subscriptions' files, superseded
        event archives, notification files past the retention window)."""
        if not self.durable or self.replaying:
            return
        engine = self.engine
        n = self.generation + 1
        final = self.root / "checkpoints" / str(n)
        tmp = final.with_name(f".{n}.{uuid.uuid4().hex}.tmp")
        tmp.mkdir(parents=True)
        tables = []
        for tdef in engine.catalog:
            entry = {"name": tdef.name, "columns": [list(c) for c in tdef.columns], "key": tdef.key, "rows": None}
            if tdef.key is not None:
                entry["rows"] = f"rows-{safe_name(tdef.name.lower())}.parquet"
                write_parquet_atomic(tmp / entry["rows"], rows_table(tdef, engine._tables[tdef.name.lower()].rows))
            tables.append(entry)
        subscriptions = self._compacted_subscriptions()
        events = None
        if engine._event_classes or engine._event_resets:
            events = "events.pickle"
            _write_pickle(tmp / events, {"plan": engine._event_plan,
                                         "classes": {cid: self._class_refs(c) for cid, c in engine._event_classes.items()},
                                         "resets": dict(engine._event_resets)})
        dropped = self._retain()
        write_parquet_atomic(tmp / "published.parquet", _published_table(self.published))
        manifest = {"format": FORMAT, "checkpoint": n, "next_seq": int(engine._next_seq), "publishes": self.publishes,
                    "settings": {s: engine.__dict__[s] for s in SETTINGS if s in engine.__dict__},
                    "clocks": {k: list(v) for k, v in engine._event_clocks.items()}, "tables": tables,
                    "subscriptions": subscriptions,
                    "event_queries": self._event_query_entries(),
                    "events": events, **self._extra_manifest()}
        _write_atomic(tmp / "manifest.json", lambda fh: fh.write(_json(manifest).encode()))
        fsync_dir(tmp)
        shutil.rmtree(final, ignore_errors=True)   # a checkpoint a kill left before CURRENT named it
        os.replace(tmp, final)
        fsync_dir(final.parent)
        _write_atomic(self.root / "CURRENT", lambda fh: fh.write(_json({"checkpoint": n}).encode()))
        # the new checkpoint is the truth from here: restart the journal, delete what it does not reference
        self.generation, self.records, self.side_bytes, self._dropped = n, 0, 0, False
        self.subscriptions = subscriptions
        self._start_journal()
        for path in dropped:
            remove_path(path)
        self._collect_garbage()

    def _restore_checkpoint(self, where: Path) -> None:
        manifest = json.loads((where / "manifest.json").read_text())
        if manifest.get("format") != FORMAT:
            raise SparksubError(f"engine directory {str(self.root)!r}: checkpoint format {manifest.get('format')!r}, "
                                f"this sparksub reads format {FORMAT}")
        engine = self.engine
        for name, value in manifest["settings"].items():
            setattr(engine, name, value)
        for t in manifest["tables"]:
            tdef = _create_table(engine, t)
            if t["rows"] is not None:
                table = pq.read_table(where / t["rows"])
                engine._tables[tdef.name.lower()].rows = engine._row_store(tdef, table)
        engine._next_seq = int(manifest["next_seq"])
        engine._event_clocks = {k: list(v) for k, v in manifest["clocks"].items()}
        for e in pq.read_table(where / "published.parquet").to_pylist():
            e["batch_id"] = None if e["batch_id"] is None else json.loads(e["batch_id"])
            self._index(e)
        self.publishes = int(manifest["publishes"])
        for batch in manifest["subscriptions"]:
            if batch["kind"] == "singles":
                table = _read_arrow(self.root / "subscriptions" / batch["file"])
                for sub_id, sql in zip(table.column("id").to_pylist(), table.column("sql").to_pylist()):
                    engine.subscribe(sub_id, sql)
            else:
                self._subscribe_many(batch)
        for q in manifest["event_queries"]:
            if "batch" in q:
                self._register_batch(q["batch"])
            else:
                self._register(q["name"], q)
        if manifest["events"] is not None:
            self._events = _read_pickle(where / manifest["events"])
        self._restore_extra(where, manifest)

    def _compacted_subscriptions(self) -> list[dict]:
        """The live subscription batches, in registration order, as files: each run of single subscriptions in
        one table (id, sql, group); after an unsubscribe each batch keeps only its ids still registered in its
        group, the newest batch holding an id claiming it (an id dropped and registered again belongs to the
        later batch)."""
        batches = self.subscriptions
        keeps: list = [None] * len(batches)            # None: every row
        if self._dropped:
            claimed: set = set()
            groups = {e.group_id: e for e in self.engine._groups.values()}
            for i in range(len(batches) - 1, -1, -1):
                ids, group_ids = self._batch_ids(batches[i])
                keep = _registered_in(groups, np.array(ids, dtype=object), np.array(group_ids, dtype=object))
                if claimed:
                    keep &= np.fromiter((sid not in claimed for sid in ids), dtype=bool, count=len(ids))
                claimed.update(ids[j] for j in np.flatnonzero(keep).tolist())
                keeps[i] = keep
        out: list[dict] = []
        run: list[tuple] = []                          # single subscriptions waiting for their file

        def flush():
            if run:
                ids, sqls, group_ids = zip(*run)
                name = f"{uuid.uuid4().hex}.arrow"
                _write_arrow(self.root / "subscriptions" / name,
                             pa.table({"id": list(ids), "sql": list(sqls), "group": list(group_ids)}))
                out.append({"kind": "singles", "file": name, "count": len(run)})
                run.clear()

        for batch, keep in zip(batches, keeps):
            if batch["kind"] != "bulk":
                rows = self._single_rows(batch)
                run.extend(r for j, r in enumerate(rows) if keep is None or keep[j])
                continue
            flush()
            if keep is None or keep.all():
                out.append(batch)
            elif keep.any():
                ids, columns = _params_columns(_read_arrow(self.root / "subscriptions" / batch["file"]))
                name = f"{uuid.uuid4().hex}.arrow"
                _write_arrow(self.root / "subscriptions" / name,
                             _params_table(ids[keep], {k: v[keep] for k, v in columns.items()}))
                out.append({**batch, "file": name, "count": int(keep.sum())})
        flush()
        return out

    def _single_rows(self, batch: dict) -> list[tuple]:
        if batch["kind"] == "singles_run":
            return list(zip(batch["ids"], batch["sqls"], batch["groups"]))
        table = _read_arrow(self.root / "subscriptions" / batch["file"])
        return list(zip(*(table.column(c).to_pylist() for c in ("id", "sql", "group"))))

    def _batch_ids(self, batch: dict) -> tuple[list, list]:
        if batch["kind"] != "bulk":
            rows = self._single_rows(batch)
            return [r[0] for r in rows], [r[2] for r in rows]
        ids = _params_columns(_read_arrow(self.root / "subscriptions" / batch["file"]))[0].tolist()
        return ids, [batch["group"]] * len(ids)

    def _collect_garbage(self) -> None:
        """Delete what the current checkpoint and journal do not reference."""
        for path in (self.root / "checkpoints").iterdir():
            if path.name != str(self.generation):
                shutil.rmtree(path, ignore_errors=True)
        for path in (self.root / "journal").iterdir():
            if path.name not in (str(self.generation), f"{self.generation}.log"):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        live = {s["file"] for s in self.subscriptions if s.get("file")}
        for path in (self.root / "subscriptions").glob("*"):
            if path.name not in live:
                path.unlink(missing_ok=True)
        live = {id(e): e["file"] for e in self.event_queries.values() if e.get("file")}
        for path in (self.root / "event_queries").glob("*"):
            if path.name not in live.values():
                path.unlink(missing_ok=True)
        referenced = {(rid, self._archived[(rid, r.base_id)][0]) for c in self.engine._event_classes.values()
                      for rid, r in c.replicas.items()}
        self._archived = {k: v for k, v in self._archived.items() if (k[0], v[0]) in referenced}
        keep_dirs = {(safe_name(rid), archive) for rid, archive in referenced}
        for rid_dir in (self.root / "events").glob("*"):
            for archive in rid_dir.iterdir():
                if (rid_dir.name, archive.name) not in keep_dirs:
                    shutil.rmtree(archive, ignore_errors=True)
        kept = {(safe_name(e["table"]), e["file"]) for e in self.published if e["file"] is not None}
        for table_dir in (self.root / "notifications").glob("*"):
            for path in table_dir.iterdir():
                if (table_dir.name, path.name) not in kept:
                    remove_path(path)
        self._collect_extra()

    # ==== issue 19 (added block): the stream joins' kept events and the refresh buffer ============================
    # Kept beside the journal's own state through one-line hooks in __init__, _open, publish_commit, _replay
    # ('publish' and the op kinds below), checkpoint, _restore_checkpoint and _collect_garbage.
    #
    # Stream joins (003 ch. 3; operators/stream_joins): the engine keeps no rows of an event stream, so a
    # stream-join group's kept events live only in its runtime replica (a base carrying the operator + the batches
    # logged since).  Like an event replica, it is copied into the directory as it is committed -- the base once,
    # each new log entry with the publish that logged it (``stream_joins/<group>/<archive>/``) -- and the publish
    # record (and the checkpoint) names the archive and its length; a reopen makes a new runtime replica of them
    # and marks the group's base stale, so its next base carries that state into the subscriptions registered
    # again (``StreamJoinFamily.carry_state``).

    def _init_extra(self) -> None:
        self._stream_joins: dict = {}       # during a reopen: group id -> [archive, log length, rows], the newest
        self._sj_archived: dict = {}        # (group id, base id) -> [archive dir, entries archived]
        self._refresh_buffer: list = []     # during a reopen: the buffered batches (refresh_buffer records)
        self._refresh_costs: dict = {}      # during a reopen: table -> [(rows, seconds)] timed applies

    def _stream_join_entries(self, tdef=None) -> list:
        """The stream-join groups (the family that carries its state) holding a replica; on ``tdef``'s table."""
        out = []
        for e in self.engine._groups.values():
            if getattr(e.family, "carry_state", None) is None or e.replica is None:
                continue
            if tdef is None or tdef.name.lower() in e.family.tables(e.physical):
                out.append(e)
        return out

    def _stream_join_refs(self, tdef=None) -> dict:
        """group id -> [archive, log length, rows] of the stream-join groups on ``tdef`` (None: all), their new
        base and log entries copied first."""
        if not self.durable:
            return {}
        return {e.group_id: self._sj_archive(e.group_id, e.replica) for e in self._stream_join_entries(tdef)}

    def _sj_dir(self, gid: str, archive: str) -> Path:
        return self.root / "stream_joins" / safe_name(gid) / archive

    def _sj_archive(self, gid: str, replica) -> list:
        key = (gid, replica.base_id)
        have = self._sj_archived.get(key)
        if have is None:
            have = [uuid.uuid4().hex, 0]
            _write_pickle(self._sj_dir(gid, have[0]) / "base.pickle", replica.read_base())
            self._sj_archived[key] = have
        if have[1] < replica.log_length:
            where = self._sj_dir(gid, have[0])
            for n, (kind, value, streams) in enumerate(replica.read_log(have[1], replica.log_length), start=have[1]):
                _write_entry(where / f"log-{n}.arrow", kind, value, streams)
            have[1] = replica.log_length
        return [have[0], int(replica.log_length), int(replica.logged_rows)]

    def _install_stream_joins(self) -> None:
        """End of a reopen: each stream-join group's replica made again of its archived base and log."""
        refs, self._stream_joins = self._stream_joins, {}
        if not refs:
            return
        from sparksub.runtime import replicas as runtime_replicas
        engine = self.engine
        entries = {e.group_id: e for e in engine._groups.values() if getattr(e.family, "carry_state", None)}
        for gid, (archive, length, rows) in refs.items():
            e = entries.get(gid)
            if e is None:
                continue
            where = self._sj_dir(gid, archive)
            replica = runtime_replicas.new_base(engine.directory, engine.uid, gid, (where / "base.pickle").read_bytes())
            for n in range(length):
                _, value, streams = _read_entry(where / f"log-{n}.arrow")
                replica = replica.append(value, streams)
            self._sj_archived[(gid, replica.base_id)] = [archive, length]
            # the subscriptions were registered again: the next base carries this state into them
            e.replica, e.log_rows, e.base_stale = replica, int(rows), True

    def _extra_manifest(self) -> dict:
        """The checkpoint's part of this block: the stream joins' archives, the refresh buffer, the measured costs."""
        return {"stream_joins": self._stream_join_refs(), "refresh_buffer": self._refresh_buffer_entries(),
                "refresh_costs": {t: [list(x) for x in c.samples] for t, c in self.engine._costs.items()}}

    def _restore_extra(self, where: Path, manifest: dict) -> None:
        self._stream_joins = dict(manifest.get("stream_joins") or {})
        self._refresh_buffer = [dict(b) for b in manifest.get("refresh_buffer") or []]
        self._refresh_costs = {t: [tuple(x) for x in v] for t, v in (manifest.get("refresh_costs") or {}).items()}

    def _collect_extra(self) -> None:
        """Delete the stream-join archives and refresh-buffer files the current state does not reference."""
        keep = {(safe_name(e.group_id), self._sj_archived[(e.group_id, e.replica.base_id)][0])
                for e in self._stream_join_entries() if (e.group_id, e.replica.base_id) in self._sj_archived}
        self._sj_archived = {k: v for k, v in self._sj_archived.items() if (safe_name(k[0]), v[0]) in keep}
        for gdir in (self.root / "stream_joins").glob("*"):
            for archive in gdir.iterdir():
                if (gdir.name, archive.name) not in keep:
                    shutil.rmtree(archive, ignore_errors=True)
        live = {b["file"] for b in self._refresh_buffer_entries()}
        for path in (self.root / "refresh_buffer").glob("*"):
            if path.name not in live:
                path.unlink(missing_ok=True)

    # Refresh buffer (003 ch. 2; control/refreshing.py): with Engine.max_delay set, a publish's batch may wait in
    # the engine's buffer.  Each batch joining it is a side file (refresh_buffer/<id>.arrow) and a record
    # 'refresh_buffer' written before the buffer takes it; the apply of a buffered run publishes it under the
    # batch id 'refresh:<id of its last batch>', so the publish record that commits it also says which buffered
    # batches it consumed (a table's buffer drains from its front, in order).  A reopen restores the batches
    # journaled and not consumed, and the tables' timed applies ('refresh_cost' records: their cost functions),
    # so ``pending()`` is what it was.  A checkpoint lists the buffer and the samples.

    def refresh_buffered(self, table: str, rows: pa.Table, mode, buffer_id: str) -> None:
        """Before a batch joins the refresh buffer (``Refreshing._publish_buffered``): its rows and its record."""
        if not self._usable():
            return
        self._before_change()
        name = f"{buffer_id}.arrow"
        self.side_bytes += _write_arrow(self.root / "refresh_buffer" / name, rows)
        self._append({"op": "refresh_buffer", "table": table, "file": name, "mode": str(mode),
                      "variants": dict(getattr(mode, "variants", {}) or {}), "id": buffer_id})

    def refresh_cost(self, table: str, rows: int, seconds: float) -> None:
        """A timed apply of a table's buffer (its cost function's sample), after the publish that applied it."""
        if self._usable():
            self._append({"op": "refresh_cost", "table": table, "rows": int(rows), "seconds": float(seconds)},
                         after_change=True)

    def _replay_extra(self, record: dict) -> None:
        if record["op"] == "refresh_buffer":
            self._refresh_buffer.append({k: record[k] for k in ("table", "file", "mode", "variants", "id")})
        else:
            self._refresh_costs.setdefault(record["table"], []).append((record["rows"], record["seconds"]))

    def _refresh_buffer_entries(self) -> list:
        """The engine's buffered batches as the journal names them (those a durable engine journaled)."""
        out = []
        for table, batches in self.engine._buffered.items():
            for _rows, mode, buffer_id in batches:
                if buffer_id is not None:
                    out.append({"table": table, "file": f"{buffer_id}.arrow", "mode": str(mode),
                                "variants": dict(getattr(mode, "variants", {}) or {}), "id": buffer_id})
        return out

    def _install_refreshing(self) -> None:
        """End of a reopen: the buffered batches no committed publish consumed, and the measured costs, back in
        the engine (``Refreshing._restore_refreshing``)."""
        entries, self._refresh_buffer = self._refresh_buffer, []
        costs, self._refresh_costs = self._refresh_costs, {}
        kept: dict = {}
        for e in entries:
            kept.setdefault(e["table"], []).append(e)
        buffered = {}
        for table, batches in kept.items():
            consumed = max((i for i, e in enumerate(batches) if self.committed(f"refresh:{e['id']}") is not None),
                           default=-1)
            buffered[table] = [(_read_arrow(self.root / "refresh_buffer" / e["file"]), e["mode"], e["variants"], e["id"])
                               for e in batches[consumed + 1:]]
        if buffered or costs:
            self.engine._restore_refreshing(buffered, costs)

    def stats(self) -> dict:
        return {"directory": str(self.root), "durable": self.durable, "published": self.publishes,
                "last_batch_id": next((e["batch_id"] for e in reversed(self.published) if e["batch_id"] is not None),
                                      None),
                "checkpoint": self.generation, "journal_records": self.records}


# ---- helpers ------------------------------------------------------------------------------------------------

def _create_table(engine, saved: dict):
    from sparksub.planner.catalog import TableDef
    tdef = TableDef(saved["name"], tuple(tuple(c) for c in saved["columns"]), saved["key"])
    engine.create_table(tdef)
    return tdef


def _published_table(published: list[dict]) -> pa.Table:
    return pa.table({
        "table": pa.array([e["table"] for e in published], pa.string()),
        "first_seq": pa.array([e["first_seq"] for e in published], pa.int64()),
        "seqs": pa.array([e["seqs"] for e in published], pa.int64()),
        "file": pa.array([e["file"] for e in published], pa.string()),
        "rows": pa.array([e["rows"] for e in published], pa.int64()),
        "batch_id": pa.array([None if e["batch_id"] is None else _json(e["batch_id"]) for e in published],
                             pa.string())})


def _read_pickle(path: Path):
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _write_entry(path: Path, kind: str, value, streams) -> None:
    """One replica log entry (``Replica.read_log``'s ``(kind, value, streams)``) as an Arrow file."""
    table = value if kind != "change" else pa.table(
        {"pickle": pa.array([pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)], pa.binary())})
    meta = {_ENTRY_KIND: kind.encode()}
    if streams is not None:
        meta[_ENTRY_STREAMS] = _json(list(streams)).encode()
    _write_arrow(path, table.replace_schema_metadata({**(table.schema.metadata or {}), **meta}))


def _read_entry(path: Path):
    table = _read_arrow(path)
    meta = dict(table.schema.metadata or {})
    kind = meta.pop(_ENTRY_KIND, b"batch").decode()
    streams = tuple(json.loads(meta.pop(_ENTRY_STREAMS))) if _ENTRY_STREAMS in meta else None
    if kind == "change":
        return kind, pickle.loads(table.column("pickle")[0].as_py()), None
    return kind, table.replace_schema_metadata(meta or None), streams
