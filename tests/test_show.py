"""SHOW SUBSCRIPTIONS (one row per subscription: name, class, group, template, parameters) and SHOW SUBSCRIPTION
GROUPS (issue 15 item 9), checked against what each test registered: the names and constants it chose,
recomputed here (a strict bound is the next float, an open end is null), whatever the engine did since —
drops, re-registrations, bulk templates, every class.  Through ``engine.subscription_table()`` (no Spark),
``engine.sql`` and, with the Catalyst extension, ``spark.sql``; and at 100K bulk subscriptions, that the
answer is a DataFrame built from columns, with no Python object per subscription."""
from __future__ import annotations

import json
import math
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub import Engine, ParseError
from sparksub.grammar import parse_select
from sparksub.jvm import bridge
from sparksub.planner.classifier import plan_subscription

DDL = ["CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE, sector STRING, vol DOUBLE)",
       "CREATE TABLE R (rk BIGINT PRIMARY KEY, a DOUBLE, b DOUBLE)",
       "CREATE TABLE S (sk BIGINT PRIMARY KEY, b DOUBLE, c DOUBLE)",
       "CREATE TABLE Ev (Name STRING, Price DOUBLE)"]
UP = math.inf


def _engine(spark=None, catalyst=None) -> Engine:
    e = Engine(spark, catalyst=catalyst)   # without a session: registration starts no Spark
    for ddl in DDL:
        e.sql(ddl)
    return e


# ---- what a test registers, and what SHOW SUBSCRIPTIONS must then say about it ------------------------------
# Each registration: (name, class, group, SQL or bulk template, bulk params or None, expected parameters).

def _num(v: float):
    return None if math.isinf(v) else v


numbers = st.integers(-50, 50).map(float) | st.floats(-1e6, 1e6, allow_nan=False, width=64)
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)


@st.composite
def registration(draw, name: str):
    """One subscription of a random class with random constants, and the parameters SHOW must list."""
    lo, hi = sorted(draw(st.tuples(numbers, numbers)))
    kind = draw(st.sampled_from(["min", "max_strict", "topk", "box", "filter_bulk", "select_join", "band_join",
                                 "range_bulk", "filter_one", "distinct", "sum", "box_topk", "filter_in_bulk"]))
    if kind in ("distinct", "sum"):
        head, klass, group = (("DISTINCT sector", "RANGE_DISTINCT", "range_distinct:stock.sector@risk")
                              if kind == "distinct" else ("SUM(per)", "RANGE_AGG", "sum:stock.per@risk"))
        return (name, klass, group, f"SELECT {head} FROM stock WHERE risk BETWEEN {lo!r} AND {hi!r}", None,
                {"risk": [lo, hi]})
    if kind == "box_topk":            # k a parameter, per subscription
        k, hi2 = draw(st.integers(1, 9)), draw(numbers)
        return (name, "BOX_TOPK", "box_topk:stock.per@risk,vol",
                "SELECT symbol FROM stock WHERE risk BETWEEN :lo AND :hi AND vol <= :v ORDER BY per LIMIT :k",
                {"lo": lo, "hi": hi, "v": hi2, "k": k}, {"risk": [lo, hi], "vol": [None, hi2], "limit": k})
    if kind == "filter_in_bulk":      # a list holding a parameter: one list per subscription
        s = draw(texts)
        return (name, "FILTER", "filter:stock", "SELECT * FROM stock WHERE sector IN (:s, 'z')", {"s": s},
                {"where": [[["sector", "in", [s, "z"]]]]})
    if kind == "min":
        return (name, "RANGE_MIN", "range_min:stock.per@risk",
                f"SELECT MIN(per) FROM stock WHERE risk BETWEEN {lo!r} AND {hi!r}", None, {"risk": [lo, hi]})
    if kind == "max_strict":          # a strict lower bound is held as the next float up; no upper bound
        return (name, "RANGE_MAX", "range_max:stock.per@risk", f"SELECT MAX(per) FROM stock WHERE risk > {lo!r}",
                None, {"risk": [math.nextafter(lo, UP), None]})
    if kind == "topk":
        k = draw(st.integers(1, 20))
        return (name, "RANGE_TOPK", "range_topk:stock.per@risk",
                f"SELECT symbol, per FROM stock WHERE risk BETWEEN {lo!r} AND {hi!r} ORDER BY per LIMIT {k}", None,
                {"risk": [lo, hi], "limit": k})
    if kind == "box":
        lo2, hi2 = sorted(draw(st.tuples(numbers, numbers)))
        return (name, "BOX_MIN", "box_min:stock.per@risk,vol",
                f"SELECT MIN(per) FROM stock WHERE vol BETWEEN {lo2!r} AND {hi2!r} AND risk BETWEEN {lo!r} AND {hi!r}",
                None, {"risk": [lo, hi], "vol": [lo2, hi2]})
    if kind == "select_join":
        return (name, "SELECT_JOIN", "select_join:R.b=S.b@a,*",
                f"SELECT R.rk, S.sk FROM R JOIN S ON R.b = S.b WHERE R.a BETWEEN {lo!r} AND {hi!r}", None,
                {"R.a": [lo, hi]})
    if kind == "band_join":
        return (name, "BAND_JOIN", "band_join:S.b-R.b",
                f"SELECT R.rk, S.sk FROM R JOIN S ON S.b - R.b BETWEEN {lo!r} AND {hi!r} WHERE S.c <= {hi!r}", None,
                {"S.b - R.b": [lo, hi], "S.c": [None, hi]})
    if kind == "range_bulk":          # a bound of ±inf is an open end
        open_hi = draw(st.booleans())
        return (name, "RANGE_MIN", "range_min:stock.per@risk",
                "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                {"lo": lo, "hi": UP if open_hi else hi}, {"risk": [lo, None if open_hi else hi]})
    if kind == "filter_bulk":         # any text, through parameters: quotes, backslashes, control characters
        s = draw(texts)
        return (name, "FILTER", "filter:stock",
                "SELECT * FROM stock WHERE sector = :s AND per BETWEEN :lo AND :hi OR vol IS NULL",
                {"s": s, "lo": lo, "hi": hi},
                {"where": [[["sector", "=", s], ["per", "between", lo, hi]], [["vol", "is_null"]]]})
    return (name, "FILTER", "filter:Ev", f"SELECT * FROM Ev WHERE Name IN ('a', 'b') AND Price <= {hi!r}", None,
            {"where": [[["Name", "in", ["a", "b"]], ["Price", "<=", hi]]]})


@st.composite
def workload(draw):
    """Registrations (bulk ones in batches of one template), then drops, then re-registrations of some
    dropped names with new constants."""
    n = draw(st.integers(1, 14))
    regs = [draw(registration(f"s{i}")) for i in range(n)]
    dropped = draw(st.lists(st.sampled_from([r[0] for r in regs]), unique=True, max_size=n))
    again = [draw(registration(name)) for name in draw(st.lists(st.sampled_from(dropped), unique=True))] \
        if dropped else []
    return regs, dropped, again


def _register(e: Engine, reg) -> None:
    name, _, _, sql, params, _ = reg
    if params is None:
        e.sql(f"CREATE SUBSCRIPTION {name} AS {sql}")
    else:
        e.subscribe_many(sql, {"id": [name], **{k: [v] for k, v in params.items()}})


def _run(e: Engine, regs, dropped, again) -> dict:
    """Register, drop, re-register; returns the oracle: name -> the row SHOW SUBSCRIPTIONS must give."""
    expected = {}
    for reg in regs:
        _register(e, reg)
        expected[reg[0]] = reg
    for name in dropped:
        e.sql(f"DROP SUBSCRIPTION {name}")
        del expected[name]
    for reg in again:
        _register(e, reg)
        expected[reg[0]] = reg
    return expected


def _canonical(klass: str, parameters):
    """Numbers as floats (JSON's 20 is 20.0; -0.0 is 0.0, the same bound); FILTER's DNF as a set of conjunctions
    (the planner may order predicates)."""
    def floats(v):
        if isinstance(v, list):
            return [floats(x) for x in v]
        if isinstance(v, dict):
            return {k: floats(x) for k, x in v.items()}
        return float(v) + 0.0 if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    parameters = floats(parameters)
    if klass != "FILTER" or parameters is None:
        return parameters
    return sorted(sorted(json.dumps(p) for p in conj) for conj in parameters["where"])


def _check(e: Engine, rows: list[dict], expected: dict) -> None:
    assert sorted(r["name"] for r in rows) == sorted(expected)
    for r in rows:
        name, klass, group, sql, params, want = expected[r["name"]]
        assert (r["class"], r["group"]) == (klass, group), name
        assert _canonical(klass, json.loads(r["parameters"])) == _canonical(klass, want), name
        # the template is the one the planner gives this subscription's text (bulk: the template's)
        assert r["template"] == plan_subscription(parse_select(sql), e.catalog).template, name
    # the group view counts the same subscriptions, per group and template
    per_template = {}
    for r in rows:
        per_template[(r["group"], r["template"])] = per_template.get((r["group"], r["template"]), 0) + 1
    assert {(g["group"], g["template"]): g["subscriptions"] for g in e.subscription_groups()} == per_template


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload())
def test_show_subscriptions_lists_each_subscription_with_its_constants(work):
    e = _engine()
    expected = _run(e, *work)
    table = e.subscription_table()
    assert table.schema.names == ["name", "class", "group", "template", "parameters"]
    _check(e, table.to_pylist(), expected)


@pytest.mark.spark
def test_event_queries_are_listed_with_their_text_and_no_parameters(spark):
    e = _engine(spark)               # (an event query's partition count reads the session's parallelism)
    e.sql("CREATE SUBSCRIPTION cheap AS SELECT * FROM Ev WHERE Price < 3")
    text = "SELECT * FROM Ev NEXT{$1.Name = $2.Name} Ev"
    e.sql(f"CREATE EVENT QUERY jump AS {text}")
    rows = {r["name"]: r for r in e.subscription_table().to_pylist()}
    assert set(rows) == {"cheap", "jump"}
    assert (rows["jump"]["class"], rows["jump"]["template"], rows["jump"]["parameters"]) == ("EVENT", text, None)
    groups = {g["name"]: g["group"] for g in e.subscription_groups() if g.get("name")}
    assert rows["jump"]["group"] == groups["jump"] and groups["jump"].startswith("events:")
    e.sql("DROP EVENT QUERY jump")
    assert e.subscription_table().column("name").to_pylist() == ["cheap"]


@pytest.mark.parametrize("text,column", [("SHOW SUBSCRIPTION", 6), ("SHOW SUBSCRIPTION GROUP", 19),
                                         ("SHOW SUBSCRIPTIONS extra", 20)])
def test_a_malformed_show_is_our_parse_error(text, column):
    e = _engine()
    with pytest.raises(ParseError) as err:
        e.sql(text)
    assert err.value.column == column


# ---- through Spark: engine.sql, spark.sql (with the extension), and 100K bulk subscriptions ------------------

@pytest.mark.spark
def test_show_through_engine_sql_and_spark_sql(spark):
    on, off = _engine(spark), _engine(spark, catalyst=False)   # the extension's path (when the session has
    assert on.sql("SHOW SUBSCRIPTIONS").count() == 0            # it) and the pure-Python one; empty: no rows,
    assert on.sql("SHOW SUBSCRIPTIONS").columns == ["name", "class", "group", "template", "parameters"]
    rng = np.random.default_rng(15)
    regs = []
    for i in range(24):                                         # every kind, random constants
        lo, hi = np.sort(rng.uniform(-100, 100, 2)).tolist()
        regs.append(_fixed_registration(f"s{i}", i % 9, lo, hi, rng))
    again = [_fixed_registration("s7", 2, -1.0, 1.0, rng)]
    for e in (on, off):
        expected = _run(e, regs, ["s3", "s7", "s11"], again)
        _check(e, [r.asDict() for r in e.sql("SHOW SUBSCRIPTIONS").collect()], expected)
        assert [r.asDict() for r in e.sql("SHOW SUBSCRIPTION GROUPS").collect()] == _groups(e)
    if bridge.loaded(spark):                                    # spark.sql: to the engine attached last
        on.attach()
        _check(on, [r.asDict() for r in spark.sql("SHOW SUBSCRIPTIONS").collect()], expected)
        assert [r.asDict() for r in spark.sql("SHOW SUBSCRIPTION GROUPS").collect()] == _groups(on)
        from pyspark.errors import ParseException
        with pytest.raises(ParseException, match="Expected GROUPS"):
            spark.sql("SHOW SUBSCRIPTION")


def _groups(e: Engine) -> list[dict]:
    """``subscription_groups()`` with every column (``name`` NULL but for event queries)."""
    return [{c: g.get(c) for c in ("group", "class", "template", "subscriptions", "name")}
            for g in e.subscription_groups()]


def _fixed_registration(name: str, kind: int, lo: float, hi: float, rng) -> tuple:
    """``registration``'s kinds with given constants (for the Spark test, which draws no hypothesis examples)."""
    s = "".join(rng.choice(list("ab'\"\\\n é"), 4))
    table = [
        (name, "RANGE_MIN", "range_min:stock.per@risk", f"SELECT MIN(per) FROM stock WHERE risk BETWEEN {lo!r} AND {hi!r}",
         None, {"risk": [lo, hi]}),
        (name, "RANGE_MAX", "range_max:stock.per@risk", f"SELECT MAX(per) FROM stock WHERE risk > {lo!r}", None,
         {"risk": [math.nextafter(lo, UP), None]}),
        (name, "RANGE_TOPK", "range_topk:stock.per@risk",
         f"SELECT symbol, per FROM stock WHERE risk BETWEEN {lo!r} AND {hi!r} ORDER BY per LIMIT 3", None,
         {"risk": [lo, hi], "limit": 3}),
        (name, "BOX_MIN", "box_min:stock.per@risk,vol",
         f"SELECT MIN(per) FROM stock WHERE risk BETWEEN {lo!r} AND {hi!r} AND vol BETWEEN 0 AND {hi + 200!r}", None,
         {"risk": [lo, hi], "vol": [0, hi + 200]}),
        (name, "SELECT_JOIN", "select_join:R.b=S.b@a,*",
         f"SELECT R.rk, S.sk FROM R JOIN S ON R.b = S.b WHERE R.a BETWEEN {lo!r} AND {hi!r}", None, {"R.a": [lo, hi]}),
        (name, "BAND_JOIN", "band_join:S.b-R.b", f"SELECT R.rk, S.sk FROM R JOIN S ON S.b - R.b BETWEEN {lo!r} AND {hi!r}",
         None, {"S.b - R.b": [lo, hi]}),
        (name, "RANGE_MIN", "range_min:stock.per@risk", "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
         {"lo": lo, "hi": UP}, {"risk": [lo, None]}),
        (name, "FILTER", "filter:stock", "SELECT * FROM stock WHERE sector = :s AND per BETWEEN :lo AND :hi OR vol IS NULL",
         {"s": s, "lo": lo, "hi": hi}, {"where": [[["sector", "=", s], ["per", "between", lo, hi]], [["vol", "is_null"]]]}),
        (name, "FILTER", "filter:Ev", f"SELECT * FROM Ev WHERE Name IN ('a', 'b') AND Price <= {hi!r}", None,
         {"where": [[["Name", "in", ["a", "b"]], ["Price", "<=", hi]]]}),
    ]
    return table[kind]


@pytest.mark.spark
def test_a_hundred_thousand_bulk_subscriptions_are_a_dataframe_built_from_columns(spark):
    from pyspark.sql import DataFrame
    e = _engine(spark)
    n = 100_000
    rng = np.random.default_rng(9)
    lo = rng.uniform(0, 100, n)
    hi = lo + rng.uniform(0, 10, n)
    ids = np.array([f"b{i}" for i in range(n)], dtype=object)
    e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi", {"id": ids, "lo": lo, "hi": hi})
    e.sql("CREATE SUBSCRIPTION alice AS SELECT MAX(per) FROM stock WHERE risk BETWEEN 20 AND 60")
    # no Python object per subscription: a dict per row alone would be ~200 bytes each (Arrow's own buffers,
    # where the rows are, are not Python allocations and are not counted)
    tracemalloc.start()
    start = time.perf_counter()
    table = e.subscription_table()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 80 * n, f"{peak} bytes of Python objects for {n} subscriptions"
    assert seconds < 10, seconds
    want = {"alice": [20.0, 60.0], **{i: [a, b] for i, a, b in zip(ids.tolist(), lo.tolist(), hi.tolist())}}
    names = table.column("name").to_pylist()
    assert sorted(names) == sorted(want)
    assert [json.loads(p)["risk"] for p in table.column("parameters").to_pylist()] == [want[i] for i in names]
    # the same rows as a Spark DataFrame (one Arrow table handed to Spark, not rows from Python)
    df = e.sql("SHOW SUBSCRIPTIONS")
    assert isinstance(df, DataFrame) and df.count() == n + 1
    sample = ["alice"] + rng.choice(ids, 20, replace=False).tolist()
    got = {r.name: json.loads(r.parameters)["risk"] for r in df.where(df.name.isin(sample)).collect()}
    assert got == {i: want[i] for i in sample}
