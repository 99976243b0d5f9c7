"""range_join_aggregate_df (operators/spark_range_join) against Spark's own plan of the same SQL:
``SELECT keys, AGG(y) FROM p JOIN d ON x >= lo AND x <= hi GROUP BY keys`` over the same DataFrames.
Random small tables from small grids (ties, duplicates, NULLs, NaN, -0.0), every aggregate Spark can be
rewritten for (MIN, MAX, COUNT, COUNT(*), SUM of integers), strict and non-strict bounds, 1-3 parts (so
some parts have parameter rows and no data or the reverse)."""
from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.runtime.range_join import range_join_aggregate_df

pytestmark = pytest.mark.spark

NAN = math.nan
GRIDS = {"bigint": [-1, 0, 1, 2, 3], "double": [-1.0, -0.0, 0.0, 1.0, 1.5, 2.0, NAN, math.inf],
         "string": ["a", "b", ""]}
SQL_AGG = {"min": "MIN({})", "max": "MAX({})", "count": "COUNT({})", "count_star": "COUNT(*)", "sum": "SUM({})"}


def canon(row, n_keys: int) -> tuple:
    """NaN == NaN, NULL apart; the sign of a zero counts in keys only (Spark shows a -0.0 group as 0.0; a
    zero MIN / MAX keeps whichever zero Spark met first)."""
    out = []
    for j, v in enumerate(row):
        if isinstance(v, float) and math.isnan(v):
            out.append(("NaN",))
        elif v is None:
            out.append(("NULL",))
        elif isinstance(v, float) and j < n_keys:
            out.append((v, math.copysign(1.0, v)))
        else:
            out.append(v)
    return tuple(out)


@st.composite
def cases(draw):
    key_types = draw(st.lists(st.sampled_from(["string", "bigint", "double"]), min_size=1, max_size=2))
    aggs = draw(st.lists(st.sampled_from(sorted(SQL_AGG)), min_size=1, max_size=4))
    lo_t, hi_t, x_t = (draw(st.sampled_from(["bigint", "double"])) for _ in range(3))
    y_ts = ["bigint" if a == "sum" else draw(st.sampled_from(["bigint", "double"])) for a in aggs]

    def value(t):
        return draw(st.sampled_from(GRIDS[t] + [None]))

    p_cols = [(f"k{j}", t) for j, t in enumerate(key_types)] + [("__lo", lo_t), ("__hi", hi_t)]
    d_cols = [("__x", x_t)] + [(f"__y{i}", t) for i, t in enumerate(y_ts)]
    p_rows = [tuple(value(t) for _, t in p_cols) for _ in range(draw(st.integers(1, 15)))]
    d_rows = [tuple(value(t) for _, t in d_cols) for _ in range(draw(st.integers(1, 15)))]
    return (p_cols, p_rows, d_cols, d_rows, aggs, draw(st.booleans()), draw(st.booleans()),
            draw(st.sampled_from([None, 1, 3])))


def _ddl(cols) -> str:
    return ", ".join(f"{n} {t}" for n, t in cols)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases())
def test_matches_spark_sql(spark, case):
    p_cols, p_rows, d_cols, d_rows, aggs, lo_strict, hi_strict, partitions = case
    p = spark.createDataFrame(p_rows, _ddl(p_cols))
    d = spark.createDataFrame(d_rows, _ddl(d_cols))
    p.createOrReplaceTempView("rja_p")
    d.createOrReplaceTempView("rja_d")
    keys = [n for n, _ in p_cols[:-2]]
    y_types = dict(d_cols)
    result_types = [y_types[f"__y{i}"] if a in ("min", "max") else "bigint" for i, a in enumerate(aggs)]
    select = ", ".join([f"p.{k}" for k in keys] + [
        SQL_AGG[a].format(f"d.__y{i}") + f" AS __a{i}" for i, a in enumerate(aggs)])
    sql = (f"SELECT {select} FROM rja_p p JOIN rja_d d ON d.__x {'>' if lo_strict else '>='} p.__lo "
           f"AND d.__x {'<' if hi_strict else '<='} p.__hi GROUP BY {', '.join('p.' + k for k in keys)}")
    expected = spark.sql(sql)

    got = range_join_aggregate_df(p, d, keys, aggs, lo_strict, hi_strict, result_types, partitions=partitions)
    assert got.schema.simpleString() == expected.schema.simpleString()
    n = len(keys)
    assert (Counter(canon(tuple(r), n) for r in got.collect())
            == Counter(canon(tuple(r), n) for r in expected.collect())), sql


def test_explain_names_the_function(spark):
    p = spark.createDataFrame([("a", 1, 3)], "k string, __lo bigint, __hi bigint")
    d = spark.createDataFrame([(2, 5.0)], "__x bigint, __y0 double")
    df = range_join_aggregate_df(p, d, ["k"], ["max"], False, True, ["double"], name="rja_probe_fn")
    assert "rja_probe_fn" in df._jdf.queryExecution().executedPlan().toString()
    assert [tuple(r) for r in df.collect()] == [("a", 5.0)]


def test_float_sum_is_refused_at_plan_time(spark):
    p = spark.createDataFrame([("a", 1, 3)], "k string, __lo bigint, __hi bigint")
    d = spark.createDataFrame([(2, 5.0)], "__x bigint, __y0 double")
    with pytest.raises(ValueError, match="sum over floating point"):
        range_join_aggregate_df(p, d, ["k"], ["sum"], False, False, ["double"])


@pytest.mark.parametrize("empty", ["params", "data"])
def test_empty_side(spark, empty):
    p = spark.createDataFrame([] if empty == "params" else [("a", 1, 3), ("b", 0, 9)],
                              "k string, __lo bigint, __hi bigint")
    d = spark.createDataFrame([] if empty == "data" else [(2, 5)], "__x bigint, __y0 bigint")
    df = range_join_aggregate_df(p, d, ["k"], ["min", "count_star"], False, False, ["bigint", "bigint"], partitions=3)
    assert df.collect() == []
    assert df.schema.simpleString() == "struct<k:string,__a0:bigint,__a1:bigint>"
