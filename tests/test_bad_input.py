"""Bad input (issue 15 item 7, DESIGN §7): every bad statement, id, parameter or argument gets a clear
SparksubError naming what and where, and changes nothing -- checked case by case, and by fuzzing the SQL
front end (random token sequences, mutated valid subscriptions, random scripts against a statement-by-
statement oracle).  Only the last few tests need Spark."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparksub import (AnalysisError, BadUpdate, DuplicateSubscription, Engine, InvalidArgument, InvalidSubscription,
                      ParseError, SparksubError, UnknownSubscription, UnsupportedSubscription)

DDL = "CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE, sector STRING, rank BIGINT)"
RANGE = "SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi"
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _engine() -> Engine:
    """An engine with a table, single and bulk subscriptions of two classes (no Spark is started)."""
    e = Engine(catalyst=False)
    e.sql(DDL)
    e.sql("CREATE SUBSCRIPTION a AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 5")
    e.subscribe_many(RANGE, {"id": ["b", "c"], "lo": [1.0, 2.0], "hi": [3.0, 4.0]})
    e.sql("CREATE SUBSCRIPTION f AS SELECT * FROM stock WHERE sector = 'x'")
    return e


def _state(e: Engine):
    """What a statement could change, read without Spark: ids, tables (with their columns), groups and
    their templates, event queries."""
    return (sorted(e.subscription_ids()), sorted((t.name, t.columns, t.key) for t in e.catalog),
            sorted((r["group"], r["template"], r["subscriptions"]) for r in e.subscription_groups()),
            e.event_queries())


def _where(text: str, marker: str) -> tuple[int, int]:
    """1-based (line, column) of ``marker`` in ``text`` (the oracle for positions)."""
    at = text.index(marker)
    before = text[:at]
    return before.count("\n") + 1, at - (before.rfind("\n") + 1) + 1


# (statement body, error, what the message names, the text the error points at or None)
BAD = [
    ("WITH s AS (SELECT 1) SELECT MIN(per) FROM stock", UnsupportedSubscription, "With", None),
    ("SELECT symbol , , symbol FROM stock", ParseError, "after ','", ", ,"),
    ("SELECT COUNT( ) FROM stock WHERE risk > 1", ParseError, "COUNT needs an argument", "COUNT"),
    ("SELECT MIN(per) FROM stock WHERE risk IN (1, 2,)", ParseError, "after ','", ",)"),
    ("SELECT * FROM stock WHERE per = True", AnalysisError, "'per'.*double.*boolean TRUE", "per ="),
    ("SELECT MIN(per) FROM stock WHERE risk BETWEEN 'a' AND 'b'", AnalysisError, "'risk'.*string 'a'", "'a'"),
    ("SELECT MIN(per) FROM stock WHERE risk > 'abc'", AnalysisError, "'risk'.*string 'abc'", "'abc'"),
    ("SELECT * FROM stock WHERE sector IN ('x', 7)", AnalysisError, "'sector'.*string.*number 7", "7"),
    ("SELECT * FROM stock WHERE rank = 'x'", AnalysisError, "'rank'.*bigint.*string 'x'", "'x'"),
    ("SELECT symbol FROM stock WHERE risk BETWEEN 1 AND 2 ORDER BY per LIMIT " + "1" + "0" * 30,
     InvalidSubscription, "LIMIT 10+: k is a positive integer up to 9223372036854775807", None),
    ("SELECT * FROM stock WHERE per = 1" + "0" * 400, ParseError, "outside the range of DOUBLE", "1000"),
    ("SELECT * FROM stock WHERE per < -1e400", ParseError, "1e400 is outside the range of DOUBLE", "1e400"),
    ("SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 2 GROUP BY sector", UnsupportedSubscription,
     r"GroupBy\[sector\]", None),
    ("SELECT MIN(per) FROM stock WHERE risk IN (SELECT risk FROM stock)", UnsupportedSubscription,
     r"Subquery\[\(SELECT risk FROM stock\)\]", None),
    ("SELECT MIN(per) FROM (SELECT * FROM stock)", UnsupportedSubscription, "Subquery", None),
    ("SELECT MIN(per + 1) FROM stock WHERE risk BETWEEN 1 AND 2", UnsupportedSubscription,
     r"Aggregate\[MIN\(per \+ 1\)\]", None),
    ("SELECT MIN(per) FROM stock UNION SELECT MIN(per) FROM stock", UnsupportedSubscription, "Union", None),
    ("SELECT MIN(pe + 1) FROM stock", AnalysisError, "unknown column 'pe'", "pe +"),
    ("SELECT MIN(per) FROM stock WHERE riskk BETWEEN 1 AND 2", AnalysisError, "unknown column 'riskk'", "riskk"),
    ("SELECT MIN(per) FROM stocks", AnalysisError, "unknown table 'stocks'", "stocks"),
]


@pytest.mark.parametrize("body,error,needle,marker", BAD, ids=[b[:48] for b, *_ in BAD])
def test_bad_subscription_named_at_its_place_changes_nothing(body, error, needle, marker):
    e = _engine()
    before = _state(e)
    text = f"CREATE SUBSCRIPTION d AS {body}"
    with pytest.raises(error, match=needle) as info:
        e.sql(text)
    if marker is not None:
        assert (info.value.line, info.value.column) == _where(text, marker)
        assert "^" in str(info.value)
    assert "supported classes" in str(info.value) or error is not UnsupportedSubscription
    # the same statement second in a script: positioned in the script, the first statement undone
    script = "CREATE SUBSCRIPTION ok AS SELECT MAX(per) FROM stock WHERE risk > 0;\n\n  " + text
    with pytest.raises(error, match=needle) as info:
        e.sql(script)
    if marker is not None:
        assert (info.value.line, info.value.column) == _where(script, marker)
    assert _state(e) == before


@pytest.mark.parametrize("last,error,needle", [
    ("CREATE EVENT QUERY q1 AS SELECT * FROM ev NEXT{$1.Name = $2.Name} ev", DuplicateSubscription, "'q1'"),
    ("CREATE EVENT QUERY q2 AS SELECT * FROM nostream NEXT{$1.Name = $2.Name} nostream", AnalysisError,
     "nostream"),
    ("DROP EVENT QUERY q9", UnknownSubscription, "no event query 'q9'"),
    ("CREATE SUBSCRIPTION q1 AS SELECT MIN(per) FROM stock", DuplicateSubscription, "'q1' is already an event query"),
    ("CREATE TABLE EV (x DOUBLE)", AnalysisError, "already exists"),
])
def test_a_script_with_event_queries_is_all_or_nothing(last, error, needle):
    """Checked before anything runs (no Spark is started): the table and the first query are not kept."""
    e = _engine()
    before = _state(e)
    script = ("CREATE TABLE ev (Name STRING, Price DOUBLE);\n"
              "CREATE EVENT QUERY q1 AS SELECT * FROM ev NEXT{$1.Name = $2.Name} ev;\n" + last)
    with pytest.raises(error, match=needle) as info:
        e.sql(script)
    assert any("statement 3 of the script (line 3)" in n for n in getattr(info.value, "__notes__", ())) \
        or info.value.line == 3
    assert _state(e) == before and e._spark is None


def test_sql_takes_text():
    e = _engine()
    for bad in (42, None, b"SHOW SUBSCRIPTIONS", ["SHOW SUBSCRIPTIONS"]):
        with pytest.raises(InvalidArgument, match="string") as info:
            e.sql(bad)
        assert isinstance(info.value, TypeError)  # as Python's own argument errors


def test_explain_of_an_unknown_name():
    e = _engine()
    with pytest.raises(UnknownSubscription, match="no subscription or event query 'nosuch'"):
        e.explain("nosuch")
    with pytest.raises(UnknownSubscription, match="no subscription or event query 'nosuch'"):
        e.sql("EXPLAIN SUBSCRIPTION nosuch")


def _bad_row(values) -> int:
    return next(i for i, v in enumerate(values) if not isinstance(v, str) or not v)


@pytest.mark.parametrize("ids", [
    ["p", None, "q"], ["p", "q", 3], ["p", "", "q"], np.array([1, 2, 3]), ["p", 4.5, "q"],
], ids=["none", "int-last", "empty-middle", "numpy-ints", "float"])
def test_subscribe_many_checks_every_id(ids):
    e = _engine()
    before = _state(e)
    with pytest.raises(InvalidSubscription, match=f"row {_bad_row(list(ids))} of 'id'"):
        e.subscribe_many(RANGE, {"id": ids, "lo": [1.0] * 3, "hi": [2.0] * 3})
    with pytest.raises(DuplicateSubscription, match=r"'q' \(rows 1 and 3"):
        e.subscribe_many(RANGE, {"id": ["p", "q", "r", "q"], "lo": [1.0] * 4, "hi": [2.0] * 4})
    with pytest.raises(DuplicateSubscription, match="duplicate subscription id 'c': it already exists"):
        e.subscribe_many(RANGE, {"id": ["p", "c"], "lo": [1.0] * 2, "hi": [2.0] * 2})
    assert _state(e) == before


def test_an_id_without_a_utf8_form_is_refused():
    e = _engine()
    before = _state(e)
    with pytest.raises(InvalidSubscription, match="row 1 of 'id'.*no UTF-8 form"):
        e.subscribe_many(RANGE, {"id": ["p", "a\ud800", "q"], "lo": [1.0] * 3, "hi": [2.0] * 3})
    assert _state(e) == before
    e.subscription_table()  # SHOW still answers


@pytest.mark.parametrize("template,column,values,needle", [
    ("SELECT * FROM stock WHERE per = :v", "v", [1.0, True, 2.0], r"'s1' binds parameter :v to True \(bool\)"),
    ("SELECT * FROM stock WHERE per = :v", "v", np.array([True, False, True]), "'s0' binds parameter :v to True"),
    ("SELECT * FROM stock WHERE per BETWEEN :v AND 9", "v", [1.0, 2.0, "abc"], "'s2' binds.*'abc'.*not a number"),
    ("SELECT * FROM stock WHERE per = :v", "v", [1.0, 10 ** 400, 2.0], "'s1' binds.*beyond the range of DOUBLE"),
    ("SELECT * FROM stock WHERE sector = :v", "v", ["x", 1.5, "y"], "'s1' binds.*1.5.*column 'sector' is a string"),
    ("SELECT * FROM stock WHERE rank IN (:v, 3)", "v", [1, 2, "x"], "'s2' binds parameter :v to 'x'"),
    (RANGE.replace(":lo", ":v"), "v", [0.0, False, 0.0], "'s1' binds parameter :v to False"),
    (RANGE.replace(":lo", ":v"), "v", ["0", "1", "2"], "'s0' binds parameter :v to '0'"),
    (RANGE.replace(":lo", ":v"), "v", [0, 10 ** 400, 0], "'s1'.*beyond the range of DOUBLE"),
    ("SELECT symbol FROM stock WHERE risk BETWEEN 0 AND 9 ORDER BY per LIMIT :v", "v", [1, 2 ** 63, 2],
     "'s1'.*LIMIT :v must be a positive integer up to 9223372036854775807, got 9223372036854775808"),
    ("SELECT symbol FROM stock WHERE risk BETWEEN 0 AND 9 ORDER BY per LIMIT :v", "v", [1, 2, 1e19],
     "'s2'.*LIMIT :v must be a positive integer up to"),
    ("SELECT symbol FROM stock WHERE risk BETWEEN 0 AND 9 ORDER BY per LIMIT :v", "v", [True, 2, 1],
     "'s0'.*LIMIT :v must be a positive integer"),
])
def test_parameters_of_the_wrong_type_are_named(template, column, values, needle):
    e = _engine()
    before = _state(e)
    params = {"id": ["s0", "s1", "s2"], column: values}
    if ":hi" in template:
        params["hi"] = [9.0] * 3
    with pytest.raises(InvalidSubscription, match=needle):
        e.subscribe_many(template, params)
    assert _state(e) == before


def test_a_limit_of_the_largest_k_is_accepted():
    e = _engine()
    e.sql(f"CREATE SUBSCRIPTION t AS SELECT symbol FROM stock WHERE risk > 0 ORDER BY per LIMIT {2 ** 63 - 1}")
    e.subscribe_many("SELECT symbol FROM stock WHERE risk BETWEEN 0 AND 9 ORDER BY per LIMIT :k",
                     {"id": ["k1"], "k": [2 ** 63 - 1]})
    assert {"t", "k1"} <= set(e.subscription_ids())


def test_deliver_names_unknown_groups_and_bad_columns():
    e = _engine()
    gid = next(r["group"] for r in e.subscription_groups() if r["group"].startswith("range_min"))
    good = {"group_id": [gid], "seq": [0], "step": [0], "op": ["NEW_MIN"], "new_value": [1.0], "inner_l": [1.0],
            "inner_r": [2.0], "outer_l": [0.0], "outer_r": [3.0]}
    with pytest.raises(BadUpdate, match=r"unknown group 'nope' \(groups: .*range_min.*\) \(row 1, column 'group_id'"):
        e.deliver(pa.table({k: v * 2 if k != "group_id" else [gid, "nope"] for k, v in good.items()}))
    with pytest.raises(BadUpdate, match="without a group_id.*row 0"):
        e.deliver(pa.table({**good, "group_id": pa.array([None], pa.string())}))
    with pytest.raises(BadUpdate, match=f"group {re.escape(repr(gid))} need a column 'inner_r'"):
        e.deliver(pa.table({k: v for k, v in good.items() if k != "inner_r"}))
    with pytest.raises(BadUpdate, match="column 'new_value' of group .* is double, cannot read string"):
        e.deliver(pa.table({**good, "new_value": ["high"]}))
    with pytest.raises(BadUpdate, match="need a group_id column"):
        e.deliver({"seq": [1]})
    with pytest.raises(BadUpdate, match="cannot read rows from a int"):
        e.deliver(42)


def test_stream_takes_a_streaming_dataframe():
    e = _engine()
    with pytest.raises(InvalidArgument, match="streaming DataFrame.*got a DataFrame"):
        e.stream("stock", pd.DataFrame({"symbol": ["a"], "risk": [1.0], "per": [2.0]}))


def test_rows_of_no_one_type_are_named():
    e = _engine()
    row = {"symbol": ["a", "b"], "risk": [1.0, 2.0], "sector": ["x", "y"], "rank": [1, 2]}
    with pytest.raises(BadUpdate, match="column 'per'"):
        e.load("stock", {**row, "per": [1.0, "high"]})
    with pytest.raises(BadUpdate, match="column 'per' of 'stock' is double"):
        e.load("stock", {**row, "per": ["high", "low"]})
    with pytest.raises(BadUpdate, match="different lengths"):
        e.load("stock", {**row, "per": [1.0]})


def test_pandas_nan_is_refused_a_missing_value_is_null():
    e = _engine()
    frame = pd.DataFrame({"symbol": ["a", "b"], "risk": [1.0, 2.0], "per": [1.0, np.nan], "sector": ["x", "y"],
                          "rank": [1, 2]})
    with pytest.raises(BadUpdate, match=r"NaN in numeric column 'per'.*row 1"):
        e.load("stock", frame)
    frame["per"] = pd.array([1.0, None], dtype="Float64")  # pandas' own missing value
    frame["sector"] = ["x", np.nan]                         # NaN in an object column: pandas' missing marker
    assert e.load("stock", frame) == 2


# ---- fuzzing the front end ---------------------------------------------------------------------------

TOKENS = ["SELECT", "MIN(", "MAX(", "COUNT(", "SUM(", "AVG(", "DISTINCT", ")", "(", "*", ",", "per", "risk",
          "sector", "symbol", "rank", "nope", "stock", "FROM", "WHERE", "AND", "OR", "NOT", "BETWEEN", "IN", "IS",
          "NULL", ">", "<", "=", "!=", ">=", "<=", "+", "-", "1", "2.5", "-3", "1e400", "'abc'", "TRUE", ":lo",
          "?", "ORDER BY", "LIMIT", "10", "0", "DESC", "GROUP BY", "HAVING", "WITH", "AS", "JOIN", "ON", ";",
          "UNION", "`x`", "'", "--", "/*", "9" * 40]
VALID = [
    "SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 5",
    "SELECT MAX(per) FROM stock WHERE risk > 2 AND risk <= 9",
    "SELECT symbol, per FROM stock WHERE risk BETWEEN 0 AND 9 ORDER BY per DESC LIMIT 3",
    "SELECT DISTINCT per FROM stock WHERE risk BETWEEN 0 AND 9",
    "SELECT COUNT(*) FROM stock WHERE risk >= 1",
    "SELECT * FROM stock WHERE sector = 'x' AND per > 3 OR rank IN (1, 2)",
    "SELECT symbol FROM stock WHERE sector IS NULL",
]


def _try(e: Engine, text: str) -> BaseException | None:
    """Run ``text``; the error if any, asserting it is ours and that it changed nothing."""
    before = _state(e)
    try:
        e.sql(text)
    except SparksubError as err:
        assert _state(e) == before, text
        return err
    return None


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14))
def test_fuzz_random_subscription_bodies(tokens):
    e = _engine()
    _try(e, "CREATE SUBSCRIPTION fz AS " + " ".join(tokens))


@st.composite
def _mutated(draw):
    tokens = re.findall(r"'[^']*'|\w+|[^\s\w]", draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(tokens) - 1))
        kind = draw(st.sampled_from(["drop", "repeat", "replace", "insert"]))
        if kind == "drop" and len(tokens) > 1:
            del tokens[i]
        elif kind == "repeat":
            tokens.insert(i, tokens[i])
        elif kind == "replace":
            tokens[i] = draw(st.sampled_from(TOKENS))
        else:
            tokens.insert(i, draw(st.sampled_from(TOKENS)))
    return " ".join(tokens)


@FUZZ
@given(_mutated())
@example("SELECT symbol IN per FROM stock WHERE risk BETWEEN 0 AND 9 ORDER BY per DESC LIMIT 3")   # found by it
def test_fuzz_mutated_subscriptions(body):
    e = _engine()
    err = _try(e, "CREATE SUBSCRIPTION fz AS " + body)
    assert (err is None) == ("fz" in e.subscription_ids())


@FUZZ
@given(st.lists(st.one_of(
    st.builds(lambda i, body: f"CREATE SUBSCRIPTION s{i} AS {body}", st.integers(0, 3),
              st.sampled_from(VALID + [b for b, *_ in BAD[:8]])),
    st.builds(lambda i, ex: f"DROP SUBSCRIPTION {'IF EXISTS ' if ex else ''}s{i}", st.integers(0, 3), st.booleans()),
    st.sampled_from(["DROP SUBSCRIPTION a", "DROP SUBSCRIPTION b", "CREATE TABLE t2 (k STRING PRIMARY KEY, v DOUBLE)",
                     "CREATE SUBSCRIPTION s9 AS SELECT MIN(v) FROM t2 WHERE v > 1", DDL,
                     "CREATE SUBSCRIPTION c AS SELECT MIN(per) FROM stock"])), min_size=2, max_size=6))
def test_fuzz_scripts_are_all_or_nothing(statements):
    """The oracle runs the statements one by one on another engine: a script fails iff one of them does,
    with the first one's error class (a statement that does not parse first: the whole script is parsed
    before any statement is checked), and then changes nothing; else it ends where the oracle does."""
    from sparksub.grammar.statements import parse_statements
    oracle, e = _engine(), _engine()
    before = _state(e)
    failed = None
    for s in statements:
        try:
            parse_statements(s)
        except ParseError as err:
            failed = err
            break
    for s in statements if failed is None else ():
        try:
            oracle.sql(s)
        except SparksubError as err:
            failed = err
            break
    script = ";\n".join(statements)
    if failed is None:
        e.sql(script)
        assert _state(e) == _state(oracle)
    else:
        with pytest.raises(type(failed)):
            e.sql(script)
        assert _state(e) == before


@FUZZ
@given(st.lists(st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.text(max_size=3),
                          st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=4),
       st.sampled_from(["lo", "k", "v"]))
def test_fuzz_parameter_values(values, which):
    """Any parameter values: either registered or a SparksubError that changed nothing."""
    templates = {"lo": RANGE, "k": "SELECT symbol FROM stock WHERE risk BETWEEN :lo AND :hi ORDER BY per LIMIT :k",
                 "v": "SELECT * FROM stock WHERE per > :v AND sector IN (:lo, 'z')"}
    n = len(values)
    params = {"id": [f"p{i}" for i in range(n)], "lo": [0.0] * n, "hi": [9.0] * n, "k": [1] * n, "v": [0.0] * n}
    params[which] = values
    if which == "v":
        params["lo"] = ["x"] * n
    e = _engine()
    before = _state(e)
    try:
        e.subscribe_many(templates[which], params)
    except SparksubError:
        assert _state(e) == before
    else:
        assert set(params["id"]) <= set(e.subscription_ids())


# ---- with Spark -------------------------------------------------------------------------------------------

@pytest.mark.spark
def test_stream_refuses_a_batch_dataframe(engine, spark):
    engine.sql(DDL)
    with pytest.raises(InvalidArgument, match="got a batch DataFrame"):
        engine.stream("stock", spark.createDataFrame([("a", 1.0, 2.0, "x", 1)], "symbol string, risk double, "
                                                     "per double, sector string, rank bigint"))


@pytest.mark.spark
def test_a_spark_statement_typo_in_a_script(engine):
    engine.sql(DDL)
    script = "CREATE SUBSCRIPTION ok AS SELECT MIN(per) FROM stock;\n\nCREATE SUBSCRIPTON s2 AS SELECT 1"
    with pytest.raises(ParseError, match="SUBSCRIPTON") as info:
        engine.sql(script)
    assert (info.value.line, info.value.column) == _where(script, "SUBSCRIPTON")
    assert engine.subscription_ids() == []


@pytest.mark.spark
def test_pandas_missing_values_are_null(engine):
    """pd.NA is null (outside every MIN), NaN is refused: the result against a recomputation."""
    engine.sql(DDL)
    engine.sql("CREATE SUBSCRIPTION m AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 0 AND 10")
    frame = pd.DataFrame({"symbol": ["a", "b", "c"], "risk": [1.0, 2.0, 30.0],
                          "per": pd.array([None, 7.0, 1.0], dtype="Float64"), "sector": ["x", None, "y"],
                          "rank": pd.array([1, None, 3], dtype="Int64")})
    engine.load("stock", frame)
    inside = frame[(frame.risk >= 0) & (frame.risk <= 10)]["per"].dropna()
    assert engine.result("m") == float(inside.min())
    nan_row = pd.DataFrame({"symbol": ["b"], "risk": [2.0], "per": [math.nan], "sector": ["x"], "rank": [1]})
    with pytest.raises(BadUpdate, match="NaN in numeric column 'per'"):
        engine.load("stock", nan_row)
    try:   # publish: refused, or set aside as a 'rejected' row (DESIGN §7), never read as NULL
        out = engine.publish("stock", nan_row).collect()
        assert [(r.op, "NaN" in r.reason) for r in out] == [("rejected", True)]
    except BadUpdate as err:
        assert "NaN" in str(err)
    assert engine.result("m") == float(inside.min())


@pytest.mark.spark
def test_deliver_passes_the_rejected_rows_of_a_reformulated_publish_through(engine):
    """A reformulated publish's output as it comes, its malformed row set aside as 'rejected' with its reason
    (DESIGN §7): deliver() plays the messages and passes the rejected row through, as the unicast form carries
    it, where it refused the whole output ("a message without a group_id")."""
    engine.sql(DDL)
    engine.sql("CREATE SUBSCRIPTION m AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 0 AND 10")
    engine.load("stock", [{"symbol": "a", "risk": 1.0, "per": 5.0, "sector": "x", "rank": 1}])
    batch = [{"symbol": "b", "risk": 2.0, "per": 3.0, "sector": "x", "rank": 2},
             {"symbol": "c", "risk": math.inf, "per": 1.0, "sector": "x", "rank": 3}]
    out = engine.publish("stock", batch, mode="reformulated")
    rejected = [r for r in out.collect() if r.op == "rejected"]
    assert len(rejected) == 1
    delivered = engine.deliver(out).collect()
    assert [(r.op, r.seq, r.reason) for r in delivered if r.op == "rejected"] == \
        [("rejected", rejected[0].seq, rejected[0].reason)]
    assert [(r.subscription_id, r.value) for r in delivered if r.op != "rejected"] == [("m", 3.0)]
    assert engine.result("m") == 3.0


@pytest.mark.spark
def test_a_session_passed_is_never_changed(spark, caplog):
    """Engine(spark), and Engine() or spark_session() while a session runs, set no option and no log level
    on it (issue 15 item 12); what spark_session() could not apply is logged, not warned."""
    from sparksub import spark_session
    log4j = spark._jvm.org.apache.logging.log4j.LogManager

    def seen():
        return dict(spark.conf.getAll), str(log4j.getRootLogger().getLevel())

    spark.conf.set("spark.sql.shuffle.partitions", "3")
    spark.sparkContext.setLogLevel("WARN")
    try:
        before = seen()
        e = Engine(spark)
        e.sql(DDL)
        e.sql("CREATE SUBSCRIPTION m AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 0 AND 10")
        e.publish("stock", [{"symbol": "a", "risk": 1.0, "per": 2.0, "sector": "x", "rank": 1}]).collect()
        assert e.result("m") == 2.0
        with caplog.at_level("WARNING", logger="sparksub.engine"):
            assert Engine().spark is spark
            assert spark_session(conf={"spark.sql.shuffle.partitions": "7"}) is spark
        assert any("not applied: spark.sql.shuffle.partitions" in r.getMessage() for r in caplog.records)
        assert seen() == before
        with pytest.raises(InvalidArgument, match="conf is for the session Engine"):
            Engine(spark, conf={"spark.sql.shuffle.partitions": "5"})
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        spark.sparkContext.setLogLevel("ERROR")
