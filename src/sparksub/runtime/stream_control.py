"""Subscriptions as data for running streams (issue 16 item 5): the files through which the engine tells its
streams about subscription changes and new groups, and the streams tell the engine which rows they applied.

A stream (``Engine.stream``) keeps its files in its own directory, ``stream_files/<stream id>/`` of the
engine's directory (``stream.new_stream_id``); the tasks read them directly (one file system, as
``runtime/replicas.py``)::

    changes/<group>/<version>/       the group's whole subscription set after the stream's change <version>
        subscriptions.pickle         (range groups: the family's snapshot without table rows; a join group:
                                     its stream snapshot, ``joins.family.stream_snapshot``)
        <shard>/base.pickle          (a FILTER group: its shards, cut as the stream cut them at its start;
                                     a SELECT_JOIN group the stream runs in two stages: its subscription
                                     shards, ``joins.shards.JoinShardBase``)
        message_payload.pickle       (that SELECT_JOIN group: the columns its messages carry, per side)
        <shard>/base.pickle          (a RANGE_MIN / RANGE_MAX group the stream runs in two stages: its x1
        shards.json                  shards, ``ShardBase``, at the stream's cut points; a shard the change
                                     left as it was is a hard link to its previous file, and ``shards.json``
                                     says per shard the change that wrote it, 0: the stream's start)
                                     (a RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group the stream runs in two
                                     stages: ``subscriptions.pickle`` is its whole set with births,
                                     ``range_shard_stream.ShardMembers``)
    changes/<group>#b<j>/<version>/  subscription shard j of a BOX_MIN / BOX_MAX / BOX_TOPK group the stream runs
        subscriptions.pickle         in shards (a state partition each): the shard's own subscriptions
                                     (``box.shards.shard_snapshots``, no rows), written only for the shards a
                                     change touches (``box.stream_shards.changed_shards``)
    range_class_shards/<group>/<shard>/   that group's subscription shards' state (``runtime/stream.py``):
        base-<batch>.pickle          a compaction: the shard as of the start of micro-batch <batch>
        log-<batch>.pickle           what the shard applied in micro-batch <batch> (its change, its messages)
        change-<batch>.pickle        the change stage 1 sent it at micro-batch <batch>, with the added seeds
        zone-<i>/change-<batch>.pickle   (a RANGE_AGG group with its rows in X zones: zone i's change, its seeds
                                     the zone's rows' partial states, which the shard adds up)
    groups/<group>.pickle            a range group the stream did not host when it started (its GroupSpec:
                                     columns, base, the last micro-batch its base holds)
    batches/<batch>.json             what micro-batch <batch> applies: per group the newest change version,
                                     and the groups added -- fixed by the first task that asks, so every task
                                     of the micro-batch, and a replay of it, apply the same subscriptions
    applied/<batch>.arrow            the micro-batch's valid rows in seq order (the checked columns): what the
                                     engine follows, so that ``result()`` agrees with the stream
    query.json, events-changed       the streaming query running an event stream; why its plan is stale
    followed.json                    the stream's table and the last micro-batch whose applied rows the engine
                                     took in (``note_followed``): an engine reopened on the directory takes in
                                     the rest (``Engine._adopt_streams``), whether or not the stream is restarted

Versions count the stream's changes (1, 2, ...; 0 is the base the stream started from).  Each change is
written whole, under a temporary name renamed into place, before the statement that made it returns; the
micro-batches that start after that apply it before their rows (the tasks of a micro-batch already running
may or may not: the batch file decides, for all of them alike).  A change directory holds the *whole* set
rather than the difference: a task that missed versions (a cold worker, a restart from the checkpoint) needs
only the newest, and it is what the range groups rebuild from anyway (their index is rebuilt from the state
store's rows and the new set; the join partitions take the difference in place, 003 §4.2.3).

Pure: files and pyarrow only; the task's micro-batch id comes from Spark's task context when there is one.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from sparksub.directory import safe_name
from sparksub.runtime.replicas import (
    BASE_FILE,
    Replica,
    _write_arrow,
    _write_atomic,
    link_value,
)

__all__ = ["StreamControl", "LiveStream", "LiveReplicas", "batch_id", "publish_subscriptions", "publish_shards",
           "publish_join_shards", "publish_range_shards", "RangeShards", "RangeClassShards", "publish_group",
           "applied_batches", "forget_applied", "mark_stale", "running_query", "KEEP_VERSIONS", "note_followed",
           "followed", "unfollowed_since"]

#: change versions kept per group (a task needs the newest; a replayed micro-batch the one it pinned)
KEEP_VERSIONS = 4
#: applied-row files kept after the engine took them in (a new group's first micro-batch replays those after
#: its base: one or two, unless the stream runs far ahead of the engine)
KEEP_APPLIED = 64
#: the local property Spark's micro-batch execution sets on every task of a micro-batch
_BATCH_ID = "streaming.sql.batchId"
_SUBSCRIPTIONS = "subscriptions.pickle"
_MESSAGE_PAYLOAD = "message_payload.pickle"
_RANGE_SHARDS = "shards.json"
_STALE = "events-changed"
_QUERY = "query.json"
_FOLLOWED = "followed.json"
_CLASS_SHARDS = "range_class_shards"
#: per process: (directory, what) -> value read (change snapshots, group specs, batch plans); bounded
_READ: dict = {}
_READ_ENTRIES = 16


def batch_id() -> int | None:
    """The micro-batch id of the running task (None outside a streaming task)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    tc = TaskContext.get()
    value = tc.getLocalProperty(_BATCH_ID) if tc is not None else None
    return int(value) if value is not None else None


def _cached(key, load):
    if key in _READ:
        value = _READ.pop(key)   # the most recently used last
    else:
        value = load()
    _READ[key] = value
    while len(_READ) > _READ_ENTRIES:
        _READ.pop(next(iter(_READ)))
    return value


class StreamControl:
    """The stream's side of its directory (module docstring): what its tasks read and write.  Pickles as its
    paths alone."""

    def __init__(self, directory, engine_uid: str = "", stream_id: str = ""):
        self.directory, self.engine_uid, self.stream_id = str(directory), engine_uid, stream_id

    def __getstate__(self):
        return {"directory": self.directory, "engine_uid": self.engine_uid, "stream_id": self.stream_id}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def _path(self, *parts) -> Path:
        return Path(self.directory).joinpath(*parts)

    # ---- what a micro-batch applies -------------------------------------------------------------------
    def plan(self, batch: int | None = None) -> dict:
        """``{"versions": {group: newest change version}, "groups": [groups added]}`` for micro-batch ``batch``:
        fixed by the first caller (a file), the same for every task and replay; ``batch`` None: as of now."""
        if batch is None:
            return self._current()
        path = self._path("batches", f"{batch:012d}.json")

        def load():
            if not path.exists():
                _create_once(path, json.dumps(self._current()).encode())
            return json.loads(path.read_text())
        return _cached((self.directory, "batch", batch), load)

    def _current(self) -> dict:
        versions = {}
        changes = self._path("changes")
        if changes.is_dir():
            for gdir in changes.iterdir():
                done = [int(p.name) for p in gdir.iterdir() if p.name.isdigit()] if gdir.is_dir() else []
                if done:
                    versions[_unsafe(gdir.name)] = max(done)
        groups = self._path("groups")
        added = sorted(_unsafe(p.name[:-len(".pickle")]) for p in groups.glob("*.pickle")) if groups.is_dir() else []
        return {"versions": versions, "groups": added}

    def version(self, group_id: str, batch: int | None = None) -> int:
        """The change version of ``group_id`` that micro-batch ``batch`` applies (0: the stream's base)."""
        return int(self.plan(batch)["versions"].get(group_id, 0))

    def subscriptions(self, group_id: str, version: int):
        """The subscription snapshot of change ``version`` (read once per process); the newest kept one when a
        replayed micro-batch's version was pruned meanwhile."""
        path = self._change_file(group_id, version, _SUBSCRIPTIONS)
        return _cached((self.directory, "subs", group_id, path.parent.name), lambda: _read_pickle(path))

    def message_payload(self, group_id: str, version: int) -> tuple:
        """The columns a two-stage SELECT_JOIN group's messages carry as of change ``version`` (per side)."""
        path = self._change_file(group_id, version, _MESSAGE_PAYLOAD)
        return _cached((self.directory, "payload", group_id, path.parent.name), lambda: _read_pickle(path))

    def join_shard(self, group_id: str, version: int, shard: int):
        """Subscription shard ``shard`` of a two-stage SELECT_JOIN group as of change ``version`` (a
        ``JoinShardBase``; not kept here: the task caches the shard it builds from it)."""
        return _read_pickle(self._change_file(group_id, version, Path(str(shard), BASE_FILE)))

    def range_shard_origin(self, group_id: str, version: int, shard: int) -> int:
        """The change that last wrote shard ``shard`` of a two-stage RANGE_MIN / RANGE_MAX group, as of change
        ``version`` (0: the stream's start): the worker's shard built from it serves every version that kept it."""
        path = self._change_file(group_id, version, _RANGE_SHARDS)
        return int(_cached((self.directory, "origins", group_id, path.parent.name),
                           lambda: json.loads(path.read_text()))["origins"][shard])

    def range_shard(self, group_id: str, version: int, shard: int):
        """Shard ``shard`` of a two-stage RANGE_MIN / RANGE_MAX group as of change ``version`` (a ``ShardBase``)."""
        return _read_pickle(self._change_file(group_id, version, Path(str(shard), BASE_FILE)))

    def _change_file(self, group_id: str, version: int, name) -> Path:
        """``name`` in change ``version``'s directory, or in the newest kept change's when a replayed micro-batch's
        version was pruned meanwhile."""
        path = self._change_dir(group_id, version) / name
        if not path.exists():
            newest = self._current()["versions"].get(group_id, 0)
            path = self._change_dir(group_id, newest) / name
        return path

    def shard_replica(self, replica_id: str, version: int) -> Replica:
        """A FILTER shard as of change ``version``: a replica over that change's shard base (a base id of its
        own, so a worker's cached shard of another version is rebuilt)."""
        group_id, _, part = replica_id.rpartition("#")
        where = self._change_dir(group_id, version) / part
        return Replica(self.engine_uid, replica_id, str(where), f"{self.stream_id}:{version}")

    def new_group(self, group_id: str):
        """The GroupSpec of a group added while the stream runs (``publish_group``)."""
        path = self._path("groups", f"{safe_name(group_id)}.pickle")
        return _cached((self.directory, "group", group_id), lambda: _read_pickle(path))

    def _change_dir(self, group_id: str, version: int) -> Path:
        return self._path("changes", safe_name(group_id), f"{version:010d}")

    # ---- the rows the stream applied ------------------------------------------------------------------
    def write_applied(self, batch: int, table: pa.Table) -> None:
        """Micro-batch ``batch``'s valid rows, in seq order (each attempt writes the same rows: a replayed
        micro-batch reads the same input)."""
        where = self._path("applied")
        where.mkdir(parents=True, exist_ok=True)
        _write_atomic(where / f"{batch:012d}.arrow", lambda fh: _write_arrow(fh, table))

    def applied(self, batch: int) -> pa.Table | None:
        path = self._path("applied", f"{batch:012d}.arrow")
        return _read_arrow(path) if path.exists() else None

    # ---- a two-stage RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group's shards (``runtime/stream.py``) ----------
    def _class_shard_dir(self, group_id: str, shard: int) -> Path:
        return self._path(_CLASS_SHARDS, safe_name(group_id), str(shard))

    def _shard_change_dir(self, group_id: str, shard: int, zone: int | None) -> Path:
        where = self._class_shard_dir(group_id, shard)
        return where if zone is None else where / f"zone-{zone}"

    def write_shard_change(self, group_id: str, shard: int, batch: int, change, zone: int | None = None) -> None:
        """What micro-batch ``batch``'s subscription change does to shard ``shard`` (a ``ShardChange``: the ids it
        keeps, the added ones with their seeds), written by stage 1 before the micro-batch's rows; its replay writes
        the same (the state store rolls back, the batch file pins the change).  ``zone``: X zone ``zone`` of a zoned
        group wrote it, its seeds its rows' partial states (``zone-<zone>/``; the shard adds the zones' up)."""
        where = self._shard_change_dir(group_id, shard, zone)
        where.mkdir(parents=True, exist_ok=True)
        _write_atomic(where / f"change-{batch:012d}.pickle", lambda fh: pickle.dump(change, fh, protocol=5))

    def shard_change(self, group_id: str, shard: int, batch: int, zone: int | None = None):
        """The ``ShardChange`` stage 1 (its X zone ``zone``) wrote for shard ``shard`` at micro-batch ``batch``."""
        return _read_pickle(self._shard_change_dir(group_id, shard, zone) / f"change-{batch:012d}.pickle")

    def write_shard_log(self, group_id: str, shard: int, batch: int, entry) -> None:
        """Shard ``shard``'s micro-batch ``batch`` (a ``ShardLogEntry``), written by its task: a replayed
        micro-batch rewrites the same (stage 1's state store rolls back with it, so its messages are the same)."""
        where = self._class_shard_dir(group_id, shard)
        where.mkdir(parents=True, exist_ok=True)
        _write_atomic(where / f"log-{batch:012d}.pickle", lambda fh: pickle.dump(entry, fh, protocol=5))

    def shard_logs(self, group_id: str, shard: int, after: int, before: int) -> list:
        """``(micro-batch, ShardLogEntry)`` of the shard's logged micro-batches ``after <= b < before``, in order (a
        micro-batch without a file gave the shard nothing)."""
        where = self._class_shard_dir(group_id, shard)
        found = sorted(b for b in _numbered(where, "log-") if after <= b < before)
        return [(b, _read_pickle(where / f"log-{b:012d}.pickle")) for b in found]

    def write_shard_base(self, group_id: str, shard: int, as_of: int, value) -> None:
        """A compaction: the shard as of the start of micro-batch ``as_of`` (its logs before it applied).  The
        previous base and the logs after it stay (a replay of the micro-batch that wrote this base rebuilds from
        them); older ones go."""
        where = self._class_shard_dir(group_id, shard)
        where.mkdir(parents=True, exist_ok=True)
        _write_atomic(where / f"base-{as_of:012d}.pickle", lambda fh: pickle.dump(value, fh, protocol=5))
        bases = sorted(_numbered(where, "base-"))
        if len(bases) > 2:
            keep = bases[-2]
            for b in bases[:-2]:
                (where / f"base-{b:012d}.pickle").unlink(missing_ok=True)
            zones = [p for p in where.iterdir() if p.is_dir() and p.name.startswith("zone-")]
            for folder, prefix in [(where, "log-"), (where, "change-"), *((z, "change-") for z in zones)]:
                for b in _numbered(folder, prefix):
                    if b < keep:
                        (folder / f"{prefix}{b:012d}.pickle").unlink(missing_ok=True)

    def shard_base(self, group_id: str, shard: int, batch: int) -> tuple | None:
        """``(as_of, value)`` of the shard's newest compaction base usable by micro-batch ``batch`` (as of it or
        before), or None: the base the stream started with."""
        where = self._class_shard_dir(group_id, shard)
        usable = [b for b in _numbered(where, "base-") if b <= batch]
        if not usable:
            return None
        return usable[-1], _read_pickle(where / f"base-{max(usable):012d}.pickle")

    # ---- event streams --------------------------------------------------------------------------------
    def check_stale(self) -> None:
        """Fail the micro-batch when the engine's event queries on the stream changed after it was built."""
        path = self._path(_STALE)
        if path.exists():
            from sparksub.errors import AnalysisError
            raise AnalysisError(path.read_text())

    def note_query(self, query_id: str | None) -> None:
        """Record the streaming query running the stream (the engine asks Spark whether it is active)."""
        if not query_id or _READ.get((self.directory, "query")) == query_id:
            return
        _write_atomic(self._path(_QUERY), lambda fh: fh.write(json.dumps({"query_id": query_id}).encode()))
        _READ[(self.directory, "query")] = query_id


@dataclass
class LiveStream:
    """The engine's record of a stream it built on one table: where its files are, the groups it hosts (its
    plan's operators and output columns are fixed when it starts), the next change version and the last
    micro-batch whose applied rows the engine took in (``Engine._follow_streams``)."""
    stream_id: str
    table: str                    # lower case
    directory: str
    mode: str = "unicast"
    ranges: set = field(default_factory=set)        # range groups hosted by its range operator
    range_schema: pa.Schema | None = None            # that operator's output columns (None: it has none)
    filter_group: str | None = None
    filter_shards: int = 0
    joins: dict = field(default_factory=dict)        # join group -> the side of the join the table is
    join_shards: dict = field(default_factory=dict)  # join group run in two stages -> its subscription shards
    range_shards: dict = field(default_factory=dict)  # range group run in two stages -> its RangeShards
    range_class_shards: dict = field(default_factory=dict)  # top-k / DISTINCT / agg group in two stages -> its
    #                                                          RangeClassShards
    box_shards: dict = field(default_factory=dict)   # box group in subscription shards -> its BoxStreamShards
    #                                                  (``operators/box/stream_shards.py``; partitions ``<group>#b<j>``)
    events: bool = False
    version: int = 0
    absorbed: int = -1
    warned: set = field(default_factory=set)         # groups it cannot host, said once

    def next_version(self) -> int:
        self.version += 1
        return self.version


class LiveReplicas:
    """replica id -> the replica a FILTER shard's task runs: the shard the stream started with, or the shard of
    the newest change its micro-batch applies (``runtime/groups.py`` looks replicas up by id)."""

    def __init__(self, start: dict, control: StreamControl):
        self.start, self.control = dict(start), control

    def __iter__(self):
        return iter(self.start)

    def __len__(self) -> int:
        return len(self.start)

    def __getitem__(self, replica_id: str) -> Replica:
        version = self.control.version(replica_id.rpartition("#")[0], batch_id())
        return self.start[replica_id] if version == 0 else self.control.shard_replica(replica_id, version)


# ---- the engine's side ---------------------------------------------------------------------------------

def publish_subscriptions(directory, group_id: str, version: int, snapshot) -> None:
    """Change ``version`` of ``group_id``: its whole subscription snapshot."""
    _publish_change(directory, group_id, version,
                    lambda tmp: _write_atomic(tmp / _SUBSCRIPTIONS, lambda fh: pickle.dump(snapshot, fh, protocol=5)))


def publish_shards(directory, group_id: str, version: int, shards: list) -> None:
    """Change ``version`` of a FILTER group: one base per shard (``<shard>/base.pickle``)."""
    _publish_change(directory, group_id, version, lambda tmp: _write_shards(tmp, dict(enumerate(shards))))


def publish_join_shards(directory, group_id: str, version: int, payload: tuple, shards: dict) -> None:
    """Change ``version`` of a SELECT_JOIN group a stream runs in two stages (``runtime/join_stream.py``): the
    columns its messages carry (``payload``, per side) and ``shards``, {shard: its base} (none in a reformulated
    stream, which has no second stage)."""
    def write(tmp: Path):
        _write_atomic(tmp / _MESSAGE_PAYLOAD, lambda fh: pickle.dump(tuple(payload), fh, protocol=5))
        _write_shards(tmp, shards)
    _publish_change(directory, group_id, version, write)


@dataclass
class RangeShards:
    """The engine's record of a RANGE_MIN / RANGE_MAX group a stream runs in two stages: the x1 cut points fixed
    when it started, and per shard its digest (``subscription_shards.shard_digest``), its newest file and the change
    that wrote it (0: the stream's start)."""
    cuts: tuple
    digests: list
    files: list
    origins: list


@dataclass
class RangeClassShards:
    """The engine's record of a RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group a stream runs in two stages: its
    subscription shards (by a CRC32 of the id) and its subscriptions' ``(x1, x2, k, birth)`` as of the stream's last
    change (``range_shard_stream.MemberRecord``: what a change publishes is the whole set with births)."""
    shards: int
    members: object


def publish_range_shards(directory, group_id: str, version: int, record: RangeShards, bases: list,
                         digests: list) -> list:
    """Change ``version`` of a RANGE_MIN / RANGE_MAX group a stream runs in two stages: ``bases``, its shards'
    new ``ShardBase`` at the stream's cuts, and their ``digests``.  Only a shard whose digest changed is written;
    the others are hard links to their previous file (a copy where the file system has none), their origin kept,
    so a worker's cached shard goes on.  Updates ``record``; returns the shards written."""
    changed = [j for j, d in enumerate(digests) if d != record.digests[j]]

    def write(tmp: Path):
        for j, base in enumerate(bases):
            (tmp / str(j)).mkdir()
            if j in changed:
                _write_atomic(tmp / str(j) / BASE_FILE, lambda fh, b=base: pickle.dump(b, fh, protocol=5))
            else:
                link_value(record.files[j], tmp / str(j) / BASE_FILE)
        origins = [version if j in changed else record.origins[j] for j in range(len(bases))]
        _write_atomic(tmp / _RANGE_SHARDS, lambda fh: fh.write(json.dumps({"origins": origins}).encode()))
    _publish_change(directory, group_id, version, write)
    where = Path(directory) / "changes" / safe_name(group_id) / f"{version:010d}"
    for j in changed:
        record.digests[j], record.origins[j] = digests[j], version
    record.files = [str(where / str(j) / BASE_FILE) for j in range(len(bases))]
    return changed


def _write_shards(tmp: Path, shards: dict) -> None:
    for i, snap in shards.items():
        (tmp / str(i)).mkdir()
        _write_atomic(tmp / str(i) / BASE_FILE, lambda fh, s=snap: pickle.dump(s, fh, protocol=5))


def _publish_change(directory, group_id: str, version: int, write) -> None:
    root = Path(directory) / "changes" / safe_name(group_id)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{version}.{uuid.uuid4().hex}.tmp"
    tmp.mkdir()
    try:
        write(tmp)
        os.replace(tmp, root / f"{version:010d}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    done = sorted(p for p in root.iterdir() if p.name.isdigit())
    for old in done[:-KEEP_VERSIONS]:
        shutil.rmtree(old, ignore_errors=True)


def publish_group(directory, group_spec) -> None:
    """A group the stream hosts from its next micro-batch on (a ``stream.GroupSpec`` with ``as_of``)."""
    where = Path(directory) / "groups"
    where.mkdir(parents=True, exist_ok=True)
    _write_atomic(where / f"{safe_name(group_spec.group_id)}.pickle",
                  lambda fh: pickle.dump(group_spec, fh, protocol=5))


def applied_batches(directory, after: int) -> list[tuple[int, pa.Table]]:
    """``(micro-batch id, valid rows)`` of every micro-batch after ``after`` the stream wrote, in order."""
    where = Path(directory) / "applied"
    if not where.is_dir():
        return []
    batches = sorted(int(p.stem) for p in where.glob("*.arrow") if p.stem.isdigit())
    return [(b, _read_arrow(where / f"{b:012d}.arrow")) for b in batches if b > after]


def note_followed(directory, table: str, absorbed: int) -> None:
    """The engine took in the applied rows of ``table``'s stream up to micro-batch ``absorbed`` (-1: none yet).
    Written after the rows are in the engine's journal: a crash in between takes a micro-batch in twice on the
    next open, which leaves the table as once (a micro-batch's last row per key decides it, and a delete of a key
    no longer held is dropped)."""
    body = json.dumps({"table": table, "absorbed": int(absorbed)}).encode()
    _write_atomic(Path(directory) / _FOLLOWED, lambda fh: fh.write(body))


def followed(directory) -> tuple[str, int] | None:
    """``(table, last micro-batch taken in)`` of a stream's directory (:func:`note_followed`); None without one."""
    try:
        got = json.loads((Path(directory) / _FOLLOWED).read_text())
    except (OSError, ValueError):
        return None
    return got["table"], int(got["absorbed"])


def unfollowed_since(directory, after: int) -> float | None:
    """When the stream wrote its first applied rows after micro-batch ``after`` (the file's modification time;
    names and times only, nothing read); None when it wrote none."""
    where = Path(directory) / "applied"
    if not where.is_dir():
        return None
    times = [p.stat().st_mtime for p in where.glob("*.arrow") if p.stem.isdigit() and int(p.stem) > after]
    return min(times, default=None)


def forget_applied(directory, upto: int) -> None:
    """Delete the applied-row files the engine took in, but those of the last ``KEEP_APPLIED`` micro-batches: a
    group added while the stream runs replays the micro-batches after its base from them."""
    where = Path(directory) / "applied"
    if where.is_dir():
        for p in where.glob("*.arrow"):
            if p.stem.isdigit() and int(p.stem) <= upto - KEEP_APPLIED:
                p.unlink(missing_ok=True)


def mark_stale(directory, message: str) -> None:
    _write_atomic(Path(directory) / _STALE, lambda fh: fh.write(message.encode()))


def running_query(directory) -> str | None:
    """The id of the streaming query that last ran the stream (None before its first micro-batch)."""
    path = Path(directory) / _QUERY
    try:
        return json.loads(path.read_text())["query_id"]
    except (OSError, ValueError, KeyError):
        return None


# ---- files ------------------------------------------------------------------------------------------------

def _create_once(path: Path, raw: bytes) -> None:
    """Write ``path`` unless it exists; of concurrent writers the first wins (a hard link cannot replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(raw)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError:   # a file system without hard links: first rename wins as near as it can
        if not path.exists():
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _numbered(where: Path, prefix: str) -> list[int]:
    """The numbers of ``<prefix><number>.pickle`` in ``where``, ascending."""
    if not where.is_dir():
        return []
    names = (p.name[len(prefix):-len(".pickle")] for p in where.iterdir()
             if p.name.startswith(prefix) and p.name.endswith(".pickle"))
    return sorted(int(n) for n in names if n.isdigit())


def _read_pickle(path: Path):
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _read_arrow(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as fh:
        return pa.ipc.open_file(fh).read_all()


def _unsafe(name: str) -> str:
    """The inverse of ``directory.safe_name``."""
    import re
    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), name)
