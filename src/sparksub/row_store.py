"""A keyed table's current rows for the engine's own reads, kept in a file rather than in driver objects
(issue 16 item 3: the driver's memory must not grow with rows).

The engine reads a table's rows in three places: validation (a delete of a key the table does not hold is
set aside), a join's routing (an upsert retracts the key's old row first) and a group's base snapshot (every
row).  Until now it kept them as a dict of key -> tuple, about 270 bytes a row of three columns.
:class:`RowStore` keeps them as

* a *base*: an Arrow table written to an IPC file under the engine's directory and memory-mapped, so its
  pages belong to the file (the kernel may drop and re-read them) and not to the process's heap;
* the base keys' 64-bit hashes, sorted, with their positions: 16 bytes a row, the only per-row memory;
* an *overlay* of the changes applied since: the base positions replaced (``_replaced``) or deleted
  (``_dead``), and the keys added (``_added``).  When the overlay grows past a quarter of the base a new
  base is written (:meth:`_compact`) and the overlay emptied.

It is a ``MutableMapping`` (key -> tuple in column order) that iterates in a dict's order -- a replaced key
keeps its place, a deleted and re-added one goes last -- because the operators' bases were built from a dict
and ties among equal values follow that order.  Batch operations (:meth:`apply`, :meth:`get_many`,
:meth:`contains_many`) look a whole batch's keys up with one ``searchsorted``; the single-key methods are
for the few rows a statement touches.  Pure: pyarrow, numpy, pandas and the file system.

>>> from types import SimpleNamespace as NS
>>> tdef = NS(key="k", columns=[("k", "string"), ("x", "double")], column_names=["k", "x"])
>>> rows = RowStore(tdef)
>>> rows.apply(pa.table({"k": ["a", "b", "a"], "x": [1.0, 2.0, 3.0], "op": pa.array([0, 0, 0], pa.int8())}))
>>> rows["a"], len(rows), "c" in rows
(('a', 3.0), 2, False)
>>> rows.apply(pa.table({"k": ["a"], "x": [None], "op": pa.array([1], pa.int8())})); list(rows.items())
[('b', ('b', 2.0))]
"""
from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import DELETE

__all__ = ["RowStore", "rows_table"]

#: the overlay is folded into a new base when it holds more than this many entries and a quarter of the base
COMPACT_MIN = 4096
_CHUNK = 65536


def _hashes(keys) -> np.ndarray:
    """64-bit hashes of keys (pandas' vectorised SipHash over an object array: no Python loop)."""
    return pd.util.hash_array(np.asarray(keys, dtype=object), categorize=False)


def rows_table(tdef, rows) -> pa.Table:
    """A keyed table's rows -- a :class:`RowStore`, or a mapping key -> tuple in column order -- as Arrow,
    typed as validation casts them."""
    if isinstance(rows, RowStore):
        return rows.table()
    columns = list(zip(*rows.values())) or [[] for _ in tdef.columns]
    return pa.table({c: pa.array(list(v), arrow_type(t)) for (c, t), v in zip(tdef.columns, columns)})


class RowStore(MutableMapping):
    """The current rows of one keyed table (see the module's docstring).  ``folder``: where the base files go
    (None: the base stays in memory -- a table made outside an engine directory)."""

    def __init__(self, tdef, folder: Path | None = None, rows: pa.Table | None = None):
        self.tdef = tdef
        self.folder = None if folder is None else Path(folder)
        self._schema = pa.schema([(c, arrow_type(t)) for c, t in tdef.columns])
        self._key_at = tdef.column_names.index(tdef.key)
        self._path: Path | None = None
        if self.folder is not None and self.folder.is_dir():
            # what an earlier process left: the journal, not these files, is the truth a reopen rebuilds from
            # (a mapping still open in this process keeps its pages after the unlink)
            for stale in self.folder.glob("rows-*.arrow"):
                stale.unlink(missing_ok=True)
        self._set_base(self._schema.empty_table() if rows is None else self._conform(rows))

    # -- the base and its key index -------------------------------------------------------------------
    def _conform(self, rows: pa.Table) -> pa.Table:
        return pa.table({f.name: rows.column(f.name).cast(f.type) for f in self._schema}, schema=self._schema)

    def _set_base(self, table: pa.Table) -> None:
        table = table.combine_chunks()
        old = self._path
        if self.folder is not None and table.num_rows:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"rows-{uuid.uuid4().hex}.arrow"
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            # memory-mapped: the base's pages are the file's, not the heap's (the kernel may drop them)
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
            self._path = path
        else:
            self._path = None
        if old is not None:
            old.unlink(missing_ok=True)   # a mapping still open keeps its pages until it is released
        self._base = table
        self._base_keys = table.column(self._key_at)
        n = table.num_rows
        # hashed from the keys' Python values, as lookups pass them (one conversion for every key type)
        hashes = _hashes(self._base_keys.to_pylist()) if n else np.empty(0, np.uint64)
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._positions = hashes[order], order.astype(np.int64)
        self._dead = np.zeros(n, dtype=bool)
        self._replaced: dict[int, tuple] = {}
        self._added: dict = {}
        self._len = n

    def _base_positions(self, keys) -> np.ndarray:
        """The base position of each key, -1 where the base does not hold it (deleted or not: see ``_dead``)."""
        keys = np.asarray(keys, dtype=object)
        out = np.full(keys.size, -1, dtype=np.int64)
        if not (self._hashes.size and keys.size):
            return out
        h = _hashes(keys)
        at = np.searchsorted(self._hashes, h)
        inside = at < self._hashes.size
        at = np.where(inside, at, 0)
        hit = inside & (self._hashes[at] == h)
        cand = np.where(hit, self._positions[at], 0)
        # confirm each candidate against the base's key (Python values: a key of another type is just absent)
        ok = hit.copy()
        stored = self._base_keys.take(pa.array(cand[hit])).to_pylist()
        ok[hit] = [a == b for a, b in zip(stored, keys[hit].tolist())]
        out[ok] = cand[ok]
        # an equal-hash run of more than one key (a collision): walk it
        for i in np.flatnonzero(hit & ~ok).tolist():
            j = int(at[i])
            while j < self._hashes.size and self._hashes[j] == h[i]:
                p = int(self._positions[j])
                if self._base_keys[p].as_py() == keys[i]:
                    out[i] = p
                    break
                j += 1
        return out

    def _base_row(self, p: int) -> tuple:
        return self._replaced[p] if p in self._replaced else tuple(c[p].as_py() for c in self._base.columns)

    # -- batch operations -----------------------------------------------------------------------------
    def apply(self, batch: pa.Table) -> None:
        """Apply a validated batch (the table's columns and ``op``: upsert 0 / delete 1) in row order, as
        ``Engine.publish`` does: a later row of the batch replaces an earlier one with its key."""
        if not batch.num_rows:
            return
        names = self.tdef.column_names
        keys = batch.column(self.tdef.key).to_pylist()
        deletes = batch.column("op").to_numpy(zero_copy_only=False) == DELETE
        if self._merges_whole(batch):
            if self._replaced or self._added or self._dead.any():
                # the overlay first (one take), then the batch as one merge: row by row, a 100K-row batch
                # after a few small ones cost 0.55 s (0.08 s of _set, then a compaction of 100K overlay rows)
                self._compact()
            self._merge(batch, keys, self._base_positions(keys), deletes)
            return
        positions = self._base_positions(keys)
        positions, deletes = positions.tolist(), deletes.tolist()
        rows = zip(*(batch.column(c).to_pylist() for c in names))
        for k, p, delete, row in zip(keys, positions, deletes, rows):
            if delete:
                self._delete(k, p)
            else:
                self._set(k, p, row)
        if len(self._replaced) + len(self._added) + int(self._dead.sum()) > max(COMPACT_MIN, self._base.num_rows >> 2):
            self._compact()

    def _merges_whole(self, batch: pa.Table) -> bool:
        """Whether to apply ``batch`` as one Arrow merge into a new base rather than row by row: a batch big
        enough to compact the store anyway (the overlay is folded into the base first)."""
        return batch.num_rows > max(COMPACT_MIN, self._base.num_rows >> 2)

    def _merge(self, batch: pa.Table, keys: list, positions: np.ndarray, deletes: np.ndarray) -> None:
        """The batch's net effect per key, in a dict's order, as one ``take`` (a key may come several times: a
        100K-row publish over 20K keys took 0.55 s row by row, 0.1 s here).  Per key: its last row decides
        whether it stays; a base key never deleted in the batch keeps its place with its last row; any other
        kept key goes last, in the order of the upsert that (re-)inserted it -- the first after its last
        delete -- as ``del d[k]; d[k] = v`` does."""
        n, m = self._base.num_rows, batch.num_rows
        codes = pd.factorize(np.asarray(keys, dtype=object))[0]
        k = int(codes.max()) + 1
        at = np.arange(m, dtype=np.int64)
        first, last = np.full(k, m, np.int64), np.full(k, -1, np.int64)
        np.minimum.at(first, codes, at)
        np.maximum.at(last, codes, at)
        last_delete = np.full(k, -1, np.int64)
        np.maximum.at(last_delete, codes[deletes], at[deletes])
        reinsert = ~deletes & (at > last_delete[codes])
        inserted = np.full(k, m, np.int64)
        np.minimum.at(inserted, codes[reinsert], at[reinsert])
        kept = ~deletes[last]
        base_at = positions[first]
        held = base_at >= 0
        in_place = held & kept & (last_delete < 0)
        index = np.arange(n, dtype=np.int64)
        index[base_at[in_place]] = n + last[in_place]   # a held key: its last row, in its place
        stays = np.ones(n, dtype=bool)
        stays[base_at[held & ~in_place]] = False
        moved = np.flatnonzero(kept & ~in_place)
        moved = moved[np.argsort(inserted[moved], kind="stable")]
        index = np.concatenate([index[stays], n + last[moved]])
        self._set_base(pa.concat_tables([self._base, self._conform(batch)]).take(pa.array(index)))

    def get_many(self, keys) -> list:
        """The row of each key (None where the table does not hold it)."""
        keys = list(keys)
        positions = self._base_positions(keys).tolist()
        return [self._lookup(k, p) for k, p in zip(keys, positions)]

    def contains_many(self, keys) -> np.ndarray:
        """Whether the table holds each key."""
        keys = list(keys)
        positions = self._base_positions(keys).tolist()
        return np.fromiter((k in self._added or (p >= 0 and not self._dead[p]) for k, p in zip(keys, positions)),
                           dtype=bool, count=len(keys))

    def table(self) -> pa.Table:
        """The current rows as Arrow, in the mapping's order."""
        n = self._base.num_rows
        index = np.arange(n, dtype=np.int64)
        parts = [self._base]
        if self._replaced:
            replaced = sorted(self._replaced)
            index[replaced] = n + np.arange(len(replaced))
            parts.append(self._rows_arrow([self._replaced[p] for p in replaced]))
        index = index[~self._dead]
        if self._added:
            start = sum(t.num_rows for t in parts)
            index = np.concatenate([index, start + np.arange(len(self._added))])
            parts.append(self._rows_arrow(list(self._added.values())))
        if len(parts) == 1 and index.size == n:
            return self._base
        return pa.concat_tables(parts).take(pa.array(index))

    def _rows_arrow(self, rows: list) -> pa.Table:
        columns = list(zip(*rows))
        return pa.table({f.name: pa.array(list(v), f.type) for f, v in zip(self._schema, columns)}, schema=self._schema)

    def _compact(self) -> None:
        """Fold the overlay into a new base file (the current rows, in order)."""
        self._set_base(self.table())

    # -- one key --------------------------------------------------------------------------------------
    def _lookup(self, key, p: int):
        if key in self._added:
            return self._added[key]
        if p >= 0 and not self._dead[p]:
            return self._base_row(p)
        return None

    def _set(self, key, p: int, row: tuple) -> None:
        if key in self._added:
            self._added[key] = row
        elif p >= 0 and not self._dead[p]:
            self._replaced[p] = row
        else:                       # new, or deleted from the base and added again: last, as in a dict
            self._added[key] = row
            self._len += 1

    def _delete(self, key, p: int) -> bool:
        if key in self._added:
            del self._added[key]
        elif p >= 0 and not self._dead[p]:
            self._dead[p] = True
            self._replaced.pop(p, None)
        else:
            return False
        self._len -= 1
        return True

    def _position(self, key) -> int:
        return int(self._base_positions([key])[0])

    def __getitem__(self, key) -> tuple:
        row = self._lookup(key, self._position(key))
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key) -> bool:
        return key in self._added or self._lookup(key, self._position(key)) is not None

    def __setitem__(self, key, row) -> None:
        self._set(key, self._position(key), tuple(row))

    def __delitem__(self, key) -> None:
        if not self._delete(key, self._position(key)):
            raise KeyError(key)

    def __len__(self) -> int:
        return self._len

    def __iter__(self):
        for k, _ in self.items():
            yield k

    def items(self):
        """``(key, row)`` in the mapping's order, a chunk of the base at a time."""
        for start in range(0, self._base.num_rows, _CHUNK):
            part = self._base.slice(start, _CHUNK)
            rows = zip(*(c.to_pylist() for c in part.columns))
            for p, row in enumerate(rows, start):
                if not self._dead[p]:
                    row = self._replaced.get(p, row)
                    yield row[self._key_at], row
        yield from self._added.items()

    def values(self):
        for _, row in self.items():
            yield row

    def __repr__(self) -> str:
        return f"RowStore({self.tdef.key!r}: {self._len} rows, {self._base.num_rows} in the base)"
