"""A subscription's SELECT list as its output columns (DESIGN §1: "a subscription's SELECT list is its output:
notifications and ``result()`` carry the selected columns under their aliases"; issue 15 item 8).

The plan IR keeps a projection's *columns* (``Project``, the operator nodes' ``columns``), which is what
grouping and EXPLAIN need; the names a subscriber sees are decided here, once, at registration:

* ``col AS name`` -> ``name``; a bare ``col`` (or ``t.col``) -> ``col``;
* ``*`` -> every column of every table in FROM order (Spark's order), ``t.*`` -> every column of ``t``;
* in a join, a name that two unaliased output columns share (``SELECT *`` over ``r(k, b)`` and ``s(k, b)``)
  is qualified by the table as the query spells it (its FROM alias, else its name): ``r.b``, ``s.b`` --
  Spark's own qualified name, which no unquoted alias can spell, so it never collides with an alias;
* two explicit aliases with one name are an error (a row cannot hold both).

Pure: no pyspark, no operators.

>>> from sparksub.grammar import parse_select
>>> from sparksub.planner.catalog import Catalog, TableDef
>>> cat = Catalog()
>>> cat.add(TableDef("r", (("rk", "bigint"), ("b", "bigint")), "rk"))
>>> cat.add(TableDef("s", (("sk", "bigint"), ("b", "double")), "sk"))
>>> [c.name for c in join_output_columns(parse_select("SELECT * FROM s JOIN r ON r.b = s.b"), cat, "r", "s")]
['sk', 's.b', 'rk', 'r.b']
>>> join_output_columns(parse_select("SELECT x.rk AS rid, s.sk FROM r x, s WHERE x.b = s.b"), cat, "r", "s")
(OutputColumn(name='rid', side=0, column='rk'), OutputColumn(name='sk', side=1, column='sk'))
"""
from __future__ import annotations

from typing import NamedTuple

from sqlglot import exp

from sparksub.errors import AnalysisError, UnsupportedSubscription
from sparksub.planner.catalog import Catalog
from sparksub.planner.classes import SUPPORTED_CLASSES

__all__ = ["OutputColumn", "join_output_columns", "table_output_columns"]


class OutputColumn(NamedTuple):
    """One column of a subscription's output: its ``name``, and where it comes from: ``side`` (a join's
    R = 0 / S = 1, the catalog's order as in the plan's ``left`` / ``right``; 0 for one table) and the
    table's ``column``."""
    name: str
    side: int
    column: str


def _from_tables(select: exp.Select) -> list[exp.Table]:
    from_ = select.args.get("from_") or select.args.get("from")
    tables = [from_.this] + [j.this for j in select.args.get("joins") or []]
    if not all(isinstance(t, exp.Table) for t in tables):
        raise AnalysisError("a subscription reads declared tables, not subqueries")
    return tables


def table_output_columns(select: exp.Select, catalog: Catalog) -> tuple[OutputColumn, ...]:
    """The output columns of a one-table SELECT (``*``, columns, aliases; aggregates are not columns)."""
    table = catalog.get(_from_tables(select)[0].name)
    out: list[OutputColumn] = []
    for p in select.expressions:
        e = p.unalias()
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            out.extend(OutputColumn(c, 0, c) for c in table.column_names)
        elif isinstance(e, exp.Column):
            table.type_of(e.name)  # unknown column -> AnalysisError naming it
            out.append(OutputColumn(p.alias or e.name, 0, e.name))
        else:
            raise UnsupportedSubscription(f"an expression in the SELECT list ({p.sql('spark')}): select columns",
                                          SUPPORTED_CLASSES)
    return _checked(out)


def join_output_columns(select: exp.Select, catalog: Catalog, left: str, right: str) -> tuple[OutputColumn, ...]:
    """The output columns of a two-table join SELECT whose plan's R is ``left`` and S is ``right``."""
    tables = [(t.alias_or_name, catalog.get(t.name)) for t in _from_tables(select)]
    side_of = [0 if t.name.lower() == left.lower() else 1 for _, t in tables]
    qualifier: dict[tuple[int, str], str] = {}  # (side, column) -> the table as the query spells it
    out: list[OutputColumn] = []
    explicit: set[int] = set()

    def add_table(i: int) -> None:
        for c in tables[i][1].column_names:
            out.append(OutputColumn(c, side_of[i], c))
            qualifier[(side_of[i], c)] = tables[i][0]

    for p in select.expressions:
        e = p.unalias()
        if isinstance(e, exp.Star):
            for i in range(len(tables)):
                add_table(i)
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            add_table(_table_index(tables, e.table))
        elif isinstance(e, exp.Column):
            i = _table_index(tables, e.table) if e.table else _owner(tables, e.name)
            tables[i][1].type_of(e.name)  # unknown column -> AnalysisError naming the table
            if p.alias:
                explicit.add(len(out))
            out.append(OutputColumn(p.alias or e.name, side_of[i], e.name))
            qualifier[(side_of[i], e.name)] = tables[i][0]
        else:
            raise UnsupportedSubscription(f"an expression in the SELECT list ({p.sql('spark')}): select columns",
                                          SUPPORTED_CLASSES)
    names = [c.name for c in out]
    # Spark keeps duplicate names and a subscriber could not tell them apart: qualify the unaliased ones
    out = [c if j in explicit or names.count(c.name) == 1 or c.name != c.column
           else c._replace(name=f"{qualifier[(c.side, c.column)]}.{c.column}") for j, c in enumerate(out)]
    return _checked(out)


def _table_index(tables, name: str) -> int:
    for i, (alias, _) in enumerate(tables):
        if alias.lower() == name.lower():
            return i
    raise AnalysisError(f"unknown table or alias {name!r} in the SELECT list")


def _owner(tables, column: str) -> int:
    having = [i for i, (_, t) in enumerate(tables) if column in t.column_names]
    if len(having) != 1:
        raise AnalysisError(f"column {column!r} in the SELECT list is {'ambiguous' if having else 'unknown'}")
    return having[0]


def _checked(out: list[OutputColumn]) -> tuple[OutputColumn, ...]:
    seen: dict[str, OutputColumn] = {}
    for c in out:
        if c.name in seen:
            if seen[c.name][1:] == c[1:]:
                continue  # the same column twice (SELECT a, a): one output column
            raise AnalysisError(f"two output columns are named {c.name!r}: alias one of them (a notification "
                                f"row holds each name once)")
        seen[c.name] = c
    return tuple(seen.values())
