"""A replica's state in files and the worker cache of it (``runtime/replicas.py``, issue 16 item 3), without
Spark: the base and each logged entry are files under the engine's directory; a replica value (what a task's
closure carries) stays small whatever the group's size; a cold process rebuilds from the files to the same
operator as one that applied every batch; every outcome (hit, catch-up, rebuild) is counted in files any
process can add to; a new base deletes the superseded files.  The oracle is a plain model operator whose state
is the list of entries it applied."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pytest

from sparksub.directory import EngineDirectory
from sparksub.operators.joins.group import QueryChange
from sparksub.runtime import replicas


@dataclass
class Model:
    """An operator that remembers what it was given (``apply``) after a base (``seed``)."""
    seed: int
    applied: list = field(default_factory=list)
    stateless: bool = False

    def apply(self, entry, mode):
        self.applied.append(entry.to_pylist() if isinstance(entry, pa.Table) else ("change", list(entry.add_ids)))


@dataclass
class ModelSnapshot:
    seed: int
    padding: bytes = b""
    stateless: bool = False

    def build(self):
        return Model(self.seed, stateless=self.stateless)


def batch(n: int) -> pa.Table:
    return pa.table({"key": [f"k{n}"], "x": [float(n)], "op": pa.array([0], pa.int8())})


@pytest.fixture
def directory(tmp_path):
    return EngineDirectory(tmp_path / "engine")


@pytest.fixture(autouse=True)
def fresh_cache():
    saved = dict(replicas._CACHE)
    replicas._CACHE.clear()
    yield
    replicas._CACHE.clear()
    replicas._CACHE.update(saved)


def test_files_and_a_small_replica(directory):
    big = ModelSnapshot(7, b"x" * 5_000_000)
    r = replicas.new_base(directory, "uid", "min:stock.per@risk", big)
    assert len(pickle.dumps(r)) < 600                      # what a task closure carries: paths and counts
    base_dir = directory.area("groups", "min:stock.per@risk", "whole") / r.base_id
    assert r.directory == str(base_dir) and (base_dir / "base.pickle").stat().st_size > 5_000_000
    r = r.append(batch(0)).append(QueryChange(np.array(["a"], dtype=object), {})).append(batch(1))
    assert (r.log_length, r.logged_rows) == (3, 2)
    assert sorted(p.name for p in base_dir.iterdir()) == ["base.pickle", "log-0.arrow", "log-1.arrow", "log-2.arrow"]
    assert not list(base_dir.glob(".*tmp"))             # written under temporary names, then renamed
    kinds = [k for k, _, _ in r.read_log()]
    assert kinds == ["batch", "change", "batch"]
    # a partition's replica: groups/<group>/<partition>/
    p = replicas.new_base(directory, "uid", "select_join:r.b=s.b@*,*#1", ModelSnapshot(1))
    assert p.directory == str(directory.area("groups", "select_join:r.b=s.b@*,*", "1") / p.base_id)


def test_cold_warm_and_behind_give_the_same_operator_and_are_counted(directory):
    r = replicas.new_base(directory, "uid", "g", ModelSnapshot(3))
    entries = [batch(0), QueryChange(np.array(["a"], dtype=object), {}), batch(1), batch(2)]
    want = Model(3)
    for e in entries:
        want.apply(e, "none")
    # warm: one step at a time, each task remembering its operator
    op = replicas.materialize(r)                       # cold: built from the base file
    for e in entries:
        op.apply(e, "none")
        r = r.append(e)
        replicas.remember(r, r.log_length, op)
        op = replicas.materialize(r)                   # hit
    assert op == want
    replicas.remember(r, r.log_length, op)
    # behind by two entries: caught up from the log files
    replicas._CACHE[("uid", "g")] = ("x", 0, None)      # (another base: ignored)
    stale = replicas.materialize(r)
    assert stale == want
    behind = Model(3)
    for e in entries[:2]:
        behind.apply(e, "none")
    replicas.remember(r, 2, behind)
    assert replicas.materialize(r) == want
    # a cold process: a new base id over the same files (no cache holds it)
    assert replicas.materialize(replicas.cold(r)) == want
    counts = r.counters.read()
    assert counts["rebuilds"] == 3 and counts["hits"] == 4 and counts["catch_ups"] == 1
    assert counts["log_replayed"] == 4 + 2 + 4
    total = replicas.read_counts(directory.root / "groups")
    assert total["rebuilds"] == 3 and total["driver"]["rebuilds"] == 3 and total["by_label"]["g"]["hits"] == 4


def test_a_stateless_operator_skips_the_log(directory):
    r = replicas.new_base(directory, "uid", "f#0", ModelSnapshot(0, stateless=True)).append(batch(0))
    assert replicas.materialize(r).applied == []        # (FILTER: the subscriptions are all there is)


def test_compaction_deletes_the_superseded_files_and_a_pinned_copy_outlives_it(directory, tmp_path):
    r = replicas.new_base(directory, "uid", "g", ModelSnapshot(1)).append(batch(0))
    pinned = replicas.pin(r, tmp_path / "stream")
    new = replicas.new_base(directory, "uid", "g", ModelSnapshot(2), replaces=r)
    assert not (directory.root / "groups" / "g" / "whole" / r.base_id).exists()
    assert replicas.materialize(new).seed == 2
    again = replicas.materialize(pinned)                 # the stream's links: the old base and its log
    assert (again.seed, again.applied) == (1, [batch(0).to_pylist()])
    assert pinned.base_id == r.base_id and replicas.StoredValue(pinned.base_path).get() == ModelSnapshot(1)


def test_a_broken_base_raises_where_the_task_reports_it(directory):
    r = replicas.new_base(directory, "uid", "g", b"not a snapshot")
    with pytest.raises(pickle.UnpicklingError):
        replicas.materialize(r)


def test_counter_files_of_several_processes_are_summed(tmp_path, monkeypatch):
    c = replicas.CounterFile(tmp_path, "s1")
    c.add({"micro_batches": 1, "rebuilt": 1})
    c.add({"micro_batches": 1})
    monkeypatch.setattr(replicas, "_PROCESS", [None, None])   # as a forked worker: its own file
    replicas.CounterFile(tmp_path, "s1").add({"micro_batches": 5})
    assert len(list(tmp_path.glob("counts-driver-*.json"))) == 2
    assert replicas.CounterFile(tmp_path).read() == {"micro_batches": 7, "rebuilt": 1}
    assert pickle.loads(pickle.dumps(c)).read() == {"micro_batches": 7, "rebuilt": 1}


def test_a_compacted_base_continues_a_worker_cache_at_the_end_of_the_old_log(directory):
    """Compaction (``new_base(..., continues=True)``): the new base is the old one with its log applied, so a
    cache holding the old replica at the end of its log goes on from there -- the same operator, the new log
    entries applied -- and counts no rebuild; a cache behind that point, or a new base that is not a
    compaction, rebuilds from the new base."""
    from sparksub.runtime import placement
    old = replicas.new_base(directory, "uid", "g", ModelSnapshot(1)).append(batch(0)).append(batch(1))
    replicas.remember(old, old.log_length, replicas.materialize(old))
    new = replicas.new_base(directory, "uid", "g", ModelSnapshot(2), replaces=old, continues=True).append(batch(2))
    assert new.continues == (old.base_id, 2) and placement.held([new]) == [0]
    got = replicas.materialize(new)
    assert (got.seed, got.applied) == (1, [batch(n).to_pylist() for n in range(3)])
    assert new.counters.read() == {"rebuilds": 1, "catch_ups": 1, "log_replayed": 3}   # the one rebuild: the first

    behind = replicas.new_base(directory, "uid", "h", ModelSnapshot(1)).append(batch(0)).append(batch(1))
    replicas.remember(behind, 1, replicas.materialize(behind))      # the cache stands one entry short
    later = replicas.new_base(directory, "uid", "h", ModelSnapshot(2), replaces=behind, continues=True)
    assert placement.held([later]) == [] and replicas.materialize(later).seed == 2

    other = replicas.new_base(directory, "uid", "i", ModelSnapshot(1)).append(batch(0))
    replicas.remember(other, 1, replicas.materialize(other))
    changed = replicas.new_base(directory, "uid", "i", ModelSnapshot(2), replaces=other)   # not a compaction
    assert changed.continues is None and replicas.materialize(changed).seed == 2
