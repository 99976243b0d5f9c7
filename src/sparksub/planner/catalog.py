"""The conceptual database's schema: tables declared with ``CREATE TABLE … PRIMARY KEY``."""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from sparksub.errors import AnalysisError

__all__ = ["TableDef", "Catalog", "NUMERIC_TYPES", "INTEGRAL_TYPES"]

INTEGRAL_TYPES = frozenset({"tinyint", "smallint", "int", "bigint"})
NUMERIC_TYPES = INTEGRAL_TYPES | {"float", "double", "decimal"}

# sqlglot DataType names -> Spark SQL type names (the ones Arrow/Spark schemas use).
_SPARK_TYPE = {
    "TEXT": "string", "VARCHAR": "string", "CHAR": "string", "STRING": "string",
    "DOUBLE": "double", "FLOAT": "float", "DECIMAL": "decimal", "INT": "int", "BIGINT": "bigint",
    "SMALLINT": "smallint", "TINYINT": "tinyint", "BOOLEAN": "boolean", "TIMESTAMP": "timestamp",
    "DATE": "date",
}


@dataclass(frozen=True)
class TableDef:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, spark type)
    key: str | None  # None: an append-only event stream (a later issue)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)

    def type_of(self, column: str) -> str:
        for c, t in self.columns:
            if c == column:
                return t
        raise AnalysisError(f"unknown column {column!r} in table {self.name!r} "
                            f"(columns: {', '.join(self.column_names)})")

    def ddl(self) -> str:
        return ", ".join(f"{c} {t}" for c, t in self.columns)

    @classmethod
    def from_create(cls, stmt: exp.Create) -> "TableDef":
        schema = stmt.this
        if not isinstance(schema, exp.Schema):
            raise AnalysisError("CREATE TABLE needs a column list: CREATE TABLE t (k STRING PRIMARY KEY, ...)")
        name = schema.this.name
        columns, keys = [], []
        for col in schema.expressions:
            if isinstance(col, exp.ColumnDef):
                kind = col.args.get("kind")
                tname = kind.this.name if kind is not None else "TEXT"
                if tname not in _SPARK_TYPE:
                    raise AnalysisError(f"column {col.name!r} of table {name!r}: unsupported type {kind.sql()}")
                columns.append((col.name, _SPARK_TYPE[tname]))
                if any(isinstance(c.args.get("kind"), exp.PrimaryKeyColumnConstraint)
                       for c in col.args.get("constraints") or []):
                    keys.append(col.name)
            elif isinstance(col, exp.PrimaryKey):
                keys.extend(e.name for e in col.expressions)
        names = [c for c, _ in columns]
        if len(set(names)) != len(names):
            raise AnalysisError(f"table {name!r} declares a column twice: {names}")
        if len(keys) > 1:
            raise AnalysisError(f"table {name!r}: composite primary keys are not supported ({keys})")
        for k in keys:
            if k not in names:
                raise AnalysisError(f"table {name!r}: primary key {k!r} is not a column")
        return cls(name, tuple(columns), keys[0] if keys else None)


class Catalog:
    def __init__(self) -> None:
        self._tables: dict[str, TableDef] = {}

    def add(self, table: TableDef) -> None:
        if table.name.lower() in self._tables:
            raise AnalysisError(f"table {table.name!r} already exists")
        self._tables[table.name.lower()] = table

    def get(self, name: str) -> TableDef:
        try:
            return self._tables[name.lower()]
        except KeyError:
            known = ", ".join(sorted(t.name for t in self._tables.values())) or "none"
            raise AnalysisError(f"unknown table {name!r} (tables: {known})") from None

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._tables

    def copy(self) -> "Catalog":
        """A catalog with the same tables, to which tables can be added without changing this one (a
        script's check, ``Engine._check_script``; TableDefs are immutable)."""
        out = Catalog()
        out._tables = dict(self._tables)
        return out

    def __iter__(self):
        return iter(self._tables.values())
