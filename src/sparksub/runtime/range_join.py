"""Thin Spark wrapper: a grouped range-join aggregate evaluated by the pure core
``operators/range_join_aggregate`` instead of a nested-loop join.  A Catalyst rule replaces
``SELECT q.k..., AGG_i(t.y_i) FROM q JOIN t ON t.x >= lo(q) AND t.x <= hi(q) GROUP BY q.k...`` by this plan
(names as Spark's EXPLAIN prints them)::

    FlatMapCoGroupsInArrow [__rja_part], [__rja_part], range_join_aggregate(...)
    :- Sort [__rja_part] <- Exchange hashpartitioning(__rja_part, P')
    :  +- Project [keys..., __lo, __hi, pmod(xxhash64(keys...), P) AS __rja_part]   parameter rows: one part
    :     +- Filter isnotnull(__lo) AND isnotnull(__hi)
    +- Sort [__rja_part] <- Exchange hashpartitioning(__rja_part, P')
       +- Generate explode(sequence(0, P - 1)) AS __rja_part                        data rows: every part
          +- Filter isnotnull(__x)

The parameter rows are split into P parts by a hash of their key columns, so all rows of one key are in one
part and the core pools duplicates locally; every part sees the whole data table (the core indexes it once
per part: O(|t| log |t|) per part, then one binary search and O(1) per parameter row and aggregate).  P is
``partitions`` or ``spark.sql.shuffle.partitions`` (P' = the shuffle's own partition count).  Float key
columns are hashed after -0.0 -> 0.0 and NaN -> one NaN, the normalisation GROUP BY applies, so a group never
straddles two parts.

Rows with a NULL X or bound are dropped before the shuffle (they join nothing).  Nothing here runs a Spark
action: the Catalyst rule calls it while it optimises a query.
"""
from __future__ import annotations

import pyarrow as pa

from sparksub.operators.range_join.aggregate import AGGREGATES, range_join_aggregate

__all__ = ["range_join_aggregate_df", "range_join_topk_df", "range_join_distinct_df", "rewrite_range_join", "PART"]

#: The part column (never a key: the core's inputs have it dropped).
PART = "__rja_part"


def range_join_aggregate_df(params_df, data_df, keys: list[str], aggregates: list[str], lo_strict: bool,
                            hi_strict: bool, result_types: list[str], partitions: int | None = None,
                            name: str = "range_join_aggregate"):
    """The DataFrame ``SELECT keys..., agg_i(__y{i}) AS __a{i} FROM params_df JOIN data_df ON __x >= __lo
    AND __x <= __hi GROUP BY keys`` (``lo_strict`` / ``hi_strict``: ``>`` / ``<``), lazily: no Spark action.
    ``params_df``: the key columns and ``__lo``, ``__hi``; ``data_df``: ``__x`` and ``__y{i}`` (absent for
    ``count_star`` is fine).  ``result_types``: the Spark SQL type of each ``__a{i}`` (e.g. ``"double"``,
    ``"bigint"``).  ``name`` names the Python function in EXPLAIN.  Semantics: the core's module docstring
    (a float SUM raises ``ValueError`` here already, at plan time)."""
    from pyspark.sql.types import DoubleType, FloatType

    keys, aggregates, result_types = list(keys), list(aggregates), list(result_types)
    if not keys:
        raise ValueError("range_join_aggregate_df needs at least one key column")
    if len(result_types) != len(aggregates):
        raise ValueError(f"{len(aggregates)} aggregates but {len(result_types)} result types")
    for a in aggregates:
        if a not in AGGREGATES:
            raise ValueError(f"unknown aggregate {a!r}; one of {AGGREGATES}")
    fields = {f.name: f for f in params_df.schema.fields}
    missing = [c for c in keys + ["__lo", "__hi"] if c not in fields]
    if missing:
        raise ValueError(f"params_df lacks {missing}; columns: {list(fields)}")
    y_cols = [f"__y{i}" for i, a in enumerate(aggregates) if a != "count_star" or f"__y{i}" in data_df.columns]
    y_types = {f.name: f.dataType for f in data_df.schema.fields}
    for i, a in enumerate(aggregates):
        if a == "sum" and isinstance(y_types.get(f"__y{i}"), (FloatType, DoubleType)):
            raise ValueError("sum over floating point is not exact; not rewritten")

    ddl = _ddl([(k, fields[k].dataType.simpleString()) for k in keys]
               + [(f"__a{i}", t) for i, t in enumerate(result_types)])
    return _cogrouped(params_df, data_df, keys, ["__x", *y_cols], partitions, ddl, name,
                      lambda left, right: range_join_aggregate(left, right, keys, aggregates, lo_strict, hi_strict))


def range_join_topk_df(params_df, data_df, keys: list[str], k: int, descending: bool, nulls_first: bool,
                       lo_strict: bool, hi_strict: bool, payload: list[str], partitions: int | None = None,
                       name: str = "range_join_topk"):
    """The DataFrame of ``range_join_enumerate.range_join_topk`` (``ROW_NUMBER() OVER (PARTITION BY keys
    ORDER BY __y) <= k`` over the range join), lazily: the key columns, ``payload`` (columns of
    ``data_df``), ``__rn`` int.  Partitioned as ``range_join_aggregate_df``."""
    from sparksub.operators.range_join.enumerate import range_join_topk

    fields = {f.name: f for f in params_df.schema.fields}
    dfields = {f.name: f for f in data_df.schema.fields}
    ddl = _ddl([(c, fields[c].dataType.simpleString()) for c in keys]
               + [(c, dfields[c].dataType.simpleString()) for c in payload] + [("__rn", "int")])
    return _cogrouped(params_df, data_df, keys, ["__x", "__y", *payload], partitions, ddl, name,
                      lambda left, right: range_join_topk(left, right, keys, k, descending, nulls_first,
                                                          lo_strict, hi_strict, payload))


def range_join_distinct_df(params_df, data_df, keys: list[str], lo_strict: bool, hi_strict: bool,
                           partitions: int | None = None, name: str = "range_join_distinct"):
    """The DataFrame of ``range_join_enumerate.range_join_distinct`` (``SELECT DISTINCT keys, __y`` of the
    range join), lazily.  Partitioned as ``range_join_aggregate_df``."""
    from sparksub.operators.range_join.enumerate import range_join_distinct

    fields = {f.name: f for f in params_df.schema.fields}
    ddl = _ddl([(c, fields[c].dataType.simpleString()) for c in keys]
               + [("__y", data_df.schema["__y"].dataType.simpleString())])
    return _cogrouped(params_df, data_df, keys, ["__x", "__y"], partitions, ddl, name,
                      lambda left, right: range_join_distinct(left, right, keys, lo_strict, hi_strict))


def rewrite_range_join(spec, params, data):
    """The plan that replaces the range join the Catalyst rule recognised (``catalyst_rules.range_join``:
    ``spec`` is its :class:`~sparksub.catalyst_rules.range_join.RangeJoinSpec`), from the rule's two sides as
    DataFrames (``params``: ``__k0..``, ``__lo``, ``__hi``; ``data``: ``__x`` and the aggregated / listed
    columns), lazily; None to keep Spark's plan (a shape the cores decline, e.g. a float SUM)."""
    # The analyser made x and the bounds one type; the cores compare int64 exactly or float64.
    for column in ("__lo", "__hi"):
        params = _numeric(params, column)
    data = _numeric(data, "__x")
    keys = list(spec.keys)
    try:
        if spec.kind == "distinct":
            return range_join_distinct_df(params, data, keys, spec.lo_strict, spec.hi_strict)
        if spec.kind == "topk":
            return range_join_topk_df(params, _numeric(data, "__y"), keys, spec.k, spec.descending,
                                      spec.nulls_first, spec.lo_strict, spec.hi_strict,
                                      [f"__d{i}" for i in range(spec.payload)])
        for i, kind in enumerate(spec.aggregates):
            if kind != "count_star":
                data = _numeric(data, f"__y{i}")
        return range_join_aggregate_df(params, data, keys, list(spec.aggregates), spec.lo_strict, spec.hi_strict,
                                       [t.lower() for t in spec.result_types])
    except ValueError:  # a shape the core declines: Spark's plan stays
        return None


def _numeric(df, column: str):
    """``column`` as the cores compare it: double when Spark's type is a float, else bigint."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType
    t = df.schema[column].dataType
    return df.withColumn(column, F.col(column).cast("double" if isinstance(t, (DoubleType, FloatType)) else "bigint"))


def _cogrouped(params_df, data_df, keys: list[str], data_columns: list[str], partitions, ddl: str, name: str,
               core):
    """``core(params part, data)`` per part: the parameter rows hashed by key into P parts, the data rows
    replicated to every part (``FlatMapCoGroupsInArrow <name>``); ``ddl`` is the output's schema."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import DataType, DoubleType, FloatType

    fields = {f.name: f for f in params_df.schema.fields}
    spark = params_df.sparkSession
    parts = int(partitions or spark.conf.get("spark.sql.shuffle.partitions"))
    if parts < 1:
        raise ValueError(f"partitions must be >= 1, not {parts}")

    def hashed(k):
        c, dt = F.col(_quote(k)), fields[k].dataType
        if isinstance(dt, (FloatType, DoubleType)):  # GROUP BY's normalisation, so one group = one part
            c = F.when(F.isnan(c), F.lit(float("nan")).cast(dt)).when(c == 0, F.lit(0.0).cast(dt)).otherwise(c)
        return c

    part_of_key = F.pmod(F.xxhash64(*[hashed(k) for k in keys]), F.lit(parts)).cast("int")
    params = (params_df.where(F.col("__lo").isNotNull() & F.col("__hi").isNotNull())
              .select(*[F.col(_quote(c)) for c in keys + ["__lo", "__hi"]], part_of_key.alias(PART)))
    data = (data_df.where(F.col("__x").isNotNull())
            .select(*[F.col(_quote(c)) for c in data_columns],
                    F.explode(F.sequence(F.lit(0), F.lit(parts - 1))).alias(PART)))
    # The Arrow schema the Python worker enforces (without casting): the same type conversion, including the
    # large-string convention of the session.
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    schema = pa.schema([pa.field(f.name, to_arrow_type(f.dataType, prefers_large_types=large))
                        for f in DataType.fromDDL(ddl).fields])

    def fn(left: pa.Table, right: pa.Table) -> pa.Table:
        left, right = left.drop_columns([PART]), right.drop_columns([PART])
        if left.num_rows == 0 or right.num_rows == 0:  # a part with only one side joins nothing
            return schema.empty_table()
        return core(left, right).rename_columns(schema.names).cast(schema)

    fn.__name__ = fn.__qualname__ = name
    return params.groupBy(PART).cogroup(data.groupBy(PART)).applyInArrow(fn, ddl)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ddl(columns: list[tuple[str, str]]) -> str:
    """A struct DDL string of (name, Spark SQL type) pairs, names quoted.

    >>> _ddl([("k", "string"), ("we`ird", "bigint"), ("__a0", "double")])
    '`k` string, `we``ird` bigint, `__a0` double'
    """
    return ", ".join(f"{_quote(n)} {t}" for n, t in columns)
