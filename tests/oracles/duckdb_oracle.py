"""DuckDB as the SQL oracle for subscriptions (tests only; production code never imports this).

The test keeps every table's current contents itself, as plain Python dicts (key -> row dict), applies each
published row to them in order, loads them into an in-process DuckDB and runs a subscription's SQL there.
DuckDB and Spark agree on what these shapes mean: NULL satisfies no comparison, MIN/MAX/SUM/AVG skip NULL,
COUNT(*) counts rows, an empty range gives NULL (COUNT gives 0), strings compare byte-wise, and a BIGINT
column compares exactly with a fractional constant.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

#: The engine's SQL column types -> the Arrow types the oracle loads them as.
ARROW_TYPES = {"DOUBLE": pa.float64(), "BIGINT": pa.int64(), "INT": pa.int32(), "STRING": pa.string()}


@dataclass
class TableContents:
    """One keyed table as the test sees it: ``columns`` [(name, SQL type)], ``key`` the key column,
    ``rows`` key -> row dict (every column present)."""
    name: str
    columns: list
    key: str
    rows: dict = field(default_factory=dict)

    @property
    def column_names(self) -> list:
        return [c for c, _ in self.columns]

    def apply(self, row: dict) -> None:
        """One published row: ``_op = 'delete'`` removes its key, anything else replaces/inserts the row."""
        k = row[self.key]
        if row.get("_op") == "delete":
            del self.rows[k]
        else:
            self.rows[k] = {c: row.get(c) for c in self.column_names}

    def arrow(self, extra: dict | None = None, rows: list | None = None) -> pa.Table:
        """The rows (or ``rows``) as an Arrow table with the declared types, plus ``extra`` columns
        (name -> (arrow type, values))."""
        rows = list(self.rows.values()) if rows is None else rows
        data = {c: pa.array([r[c] for r in rows], ARROW_TYPES[t]) for c, t in self.columns}
        for c, (typ, values) in (extra or {}).items():
            data[c] = pa.array(values, typ)
        return pa.table(data)

    def copy(self) -> "TableContents":
        return TableContents(self.name, self.columns, self.key, dict(self.rows))


class DuckDBOracle:
    """An in-process DuckDB holding the current contents of the test's tables (as views over Arrow)."""

    def __init__(self):
        self.con = duckdb.connect()
        self._held = {}  # the registered Arrow tables: DuckDB reads them in place

    def load(self, *tables: TableContents) -> None:
        for t in tables:
            self.register(t.name, t.arrow())

    def register(self, name: str, table: pa.Table) -> None:
        self._held[name] = table
        self.con.register(name, table)

    def rows(self, sql: str) -> list[dict]:
        cur = self.con.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def scalar(self, sql: str):
        (row,) = self.con.execute(sql).fetchall()
        (value,) = row
        return value

    def close(self) -> None:
        self.con.close()
