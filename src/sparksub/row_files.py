"""A keyed table's current rows as files Spark reads: what makes the engine's tables live views (issue 16
item 3).

The folder (``<engine directory>/tables/<table>/``) holds one *base* file -- the rows at the last compaction
-- and one *delta* file per batch applied since (the batch's rows with ``_op``, upsert 0 / delete 1, and
``_v``, the order in which they were applied).  The current rows are, per key, the row with the largest
``_v``, unless it is a delete: :meth:`RowFiles.current_sql` says that in SQL over the folder.  A temporary
view defined by that SQL is analysed again at every use (Spark keeps a SQL view's text, not its analysed
plan: ``spark.sql.legacy.storeAnalyzedPlanForView`` is false), so it lists the folder again and sees every
batch applied since -- without a row passing through the driver.

Every ``COMPACT_AFTER`` deltas a new base replaces them.  The files it supersedes are deleted at the
compaction after it, not at once, so that a DataFrame analysed before the compaction (its file list fixed)
still reads.  Pure: pyarrow and the file system, no pyspark.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import DELETE
from sparksub.row_store import rows_table

__all__ = ["RowFiles", "rows_table", "COMPACT_AFTER"]

#: deltas kept before a new base replaces them (a read lists and merges base + deltas)
COMPACT_AFTER = 32

_OP, _V = "_op", "_v"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class RowFiles:
    """The base and delta files of one keyed table (see the module's docstring)."""

    def __init__(self, folder: Path, tdef):
        self.folder = Path(folder)
        self.tdef = tdef
        self.version = 0          # batches written: the high bits of _v
        self.deltas = 0           # delta files since the base
        self._superseded: list[Path] = []

    def reset(self, rows: pa.Table) -> None:
        """A new base holding ``rows`` (the table's current rows); the deltas it replaces go at the next
        reset.  The first reset of a process also deletes what an earlier process left in the folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        first = self.version == 0
        for path in self._superseded:
            path.unlink(missing_ok=True)
        self.version += 1
        keep = self._write(f"base-{self.version:012d}.parquet", rows, np.zeros(rows.num_rows, dtype=np.int8))
        self._superseded = [p for p in self.folder.iterdir() if p != keep]
        if first:  # files of an earlier process: no DataFrame of this one has read them
            for path in self._superseded:
                path.unlink(missing_ok=True)
            self._superseded = []
        self.deltas = 0

    def append(self, batch: pa.Table) -> bool:
        """Keep ``batch`` (the table's columns and ``op``, as ``Engine.publish`` applies it) as a delta; True
        when the caller should :meth:`reset` (``COMPACT_AFTER`` deltas)."""
        if batch.num_rows:
            self.version += 1
            self._write(f"delta-{self.version:012d}.parquet", batch.select(self.tdef.column_names),
                        batch.column("op").to_numpy(zero_copy_only=False).astype(np.int8))
            self.deltas += 1
        return self.deltas >= COMPACT_AFTER

    def _write(self, name: str, rows: pa.Table, ops: np.ndarray) -> Path:
        # _v: the batch's number in the high bits, the row's position in the low ones (a later row of one
        # batch replaces an earlier one with its key, as Engine.publish applies them)
        order = (np.int64(self.version) << np.int64(32)) + np.arange(rows.num_rows, dtype=np.int64)
        table = pa.table({**{c: rows.column(c).cast(arrow_type(t)) for c, t in self.tdef.columns},
                          _OP: pa.array(ops, pa.int8()), _V: pa.array(order, pa.int64())})
        path = self.folder / name
        tmp = path.with_name(f".{name}.{uuid.uuid4().hex}.tmp")   # a reader never lists half a file
        pq.write_table(table, tmp)
        tmp.replace(path)
        return path

    def current_sql(self) -> str:
        """A SELECT of the table's current rows over the folder (Spark SQL: ``parquet.`<folder>```)."""
        key, names = _quote(self.tdef.key), ", ".join(_quote(c) for c in self.tdef.column_names)
        folder = str(self.folder.resolve()).replace("`", "``")
        return (f"SELECT {names} FROM (SELECT *, row_number() OVER (PARTITION BY {key} ORDER BY {_V} DESC) "
                f"AS _rank FROM parquet.`{folder}`) WHERE _rank = 1 AND {_OP} <> {int(DELETE)}")
