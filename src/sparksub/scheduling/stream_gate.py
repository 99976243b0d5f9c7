"""The refresh scheduler inside a stream's micro-batches (issue 19 item 1; 003 ch. 2): ``Engine.stream`` over a
keyed table with ``Engine.max_delay`` set keeps the micro-batches' valid rows buffered and, per micro-batch, lets
the :class:`~sparksub.scheduling.refresh.RefreshScheduler` decide whether to apply the table's buffered rows now
-- all of them, in seq order, together with the micro-batch's own (003 §2.3: greedy) -- or to keep them, so that
applying what stays buffered would take at most ``max_delay`` (the chapter's invariant, §2.2).

003 §2.2's time steps are the micro-batches here, and its tables the stream's one table: a stream carries the
updates of one table, so its scope is that table alone, and for one table every LGM policy is the lazy plan --
apply when the bound would break (a refresh forces it earlier).  The engine-level buffer of ``publish``
(``control/refreshing.py``) is where several tables share one scope.

**Replays decide the same.**  The decision for micro-batch ``b`` is a pure function of ``b``'s rows and the
state after the micro-batch before it, and it is kept: ``<directory>/<b>.pickle`` holds the rows released
(applied) at ``b``, the rows still buffered after it and the scheduler after its step (its period, its rate
estimate: pickled), written once (temporary name, rename).  A replayed micro-batch (a task retried, the query
restarted from its checkpoint) finds its file and releases exactly what the first attempt did; a new micro-batch
starts from the file of the newest micro-batch before it.  So the buffer survives a restart of the stream from
its checkpoint: it lives in the stream's directory beside the checkpoint.

**A refresh** (``Engine.refresh()``) is a request file in the same directory: the first micro-batch that decides
after it applies everything buffered (``force``: 003's refresh at T) and consumes the request.  A stream runs a
micro-batch only when new rows arrive, so buffered rows wait for the next micro-batch.

Pure: files, pickle, pyarrow (no pyspark): ``runtime/stream.py`` calls :meth:`StreamRefreshGate.decide` from the
one task that orders each micro-batch.
"""
from __future__ import annotations

import os
import pickle
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sparksub.scheduling.refresh import RefreshScheduler

__all__ = ["StreamRefreshGate", "request_refresh", "gate_state", "KEEP_DECISIONS"]

#: decision files kept (a replay needs its own; a new micro-batch the newest before it)
KEEP_DECISIONS = 8
_REQUEST = "refresh-request-"


@dataclass
class StreamRefreshGate:
    """One stream's refresh gate (module docstring).  ``cost``: the table's f (seconds for k rows; fixed when the
    stream starts, so that every micro-batch and replay decides with the same function); ``policy``: one of
    ``RefreshScheduler``'s."""

    directory: str
    table: str
    cost: object
    max_delay: float
    policy: str = "online"

    def _path(self, batch: int) -> Path:
        return Path(self.directory) / f"{batch:012d}.pickle"

    def decide(self, batch: int, valid: pa.Table, seq_column: str) -> pa.Table:
        """The rows to apply at micro-batch ``batch`` (``valid``: its valid rows), in ``seq_column`` order."""
        path = self._path(batch)
        if path.exists():                         # a replay: what the first attempt decided
            return _read(path)["released"]
        before = _newest(Path(self.directory), below=batch)
        if before is not None:
            state = _read(before)
            buffer, scheduler = state["buffer"], state["scheduler"]
        else:
            buffer = valid.schema.empty_table()
            scheduler = RefreshScheduler({self.table: self.cost}, float(self.max_delay), self.policy)
        pending = pa.concat_tables([buffer, valid], promote_options="default") if buffer.num_rows else valid
        requests = sorted(Path(self.directory).glob(_REQUEST + "*"))
        chosen = scheduler.step({self.table: pending.num_rows}, force=bool(requests))
        if self.table in chosen:
            released, buffer = pending.sort_by(seq_column), pending.slice(0, 0)
        else:
            released, buffer = pending.slice(0, 0), pending
        _write(path, {"released": released, "buffer": buffer, "scheduler": scheduler, "forced": bool(requests),
                      "applied": self.table in chosen, "arrived": valid.num_rows,
                      "load": float(self.cost(buffer.num_rows))})
        for r in requests:                        # consumed: the decision that took them is kept
            r.unlink(missing_ok=True)
        _prune(Path(self.directory), batch)
        return released


def request_refresh(directory) -> None:
    """Ask the stream whose gate lives in ``directory`` to apply everything buffered at its next micro-batch."""
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{_REQUEST}{uuid.uuid4().hex}").touch()


def gate_state(directory) -> dict | None:
    """After the newest micro-batch decided: ``{"batch", "buffered" (rows), "load" (modelled seconds), "applied",
    "forced", "scheduler" (its stats())}``; None before the first."""
    newest = _newest(Path(directory), below=None)
    if newest is None:
        return None
    s = _read(newest)
    return {"batch": int(newest.stem), "buffered": s["buffer"].num_rows, "load": s["load"], "applied": s["applied"],
            "forced": s["forced"], "scheduler": s["scheduler"].stats()}


def _decisions(where: Path) -> list[Path]:
    return sorted(p for p in where.glob("*.pickle") if p.stem.isdigit()) if where.is_dir() else []


def _newest(where: Path, below: int | None) -> Path | None:
    found = [p for p in _decisions(where) if below is None or int(p.stem) < below]
    return found[-1] if found else None


def _prune(where: Path, batch: int) -> None:
    for p in _decisions(where):
        if int(p.stem) <= batch - KEEP_DECISIONS:
            p.unlink(missing_ok=True)


def _read(path: Path) -> dict:
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _write(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
