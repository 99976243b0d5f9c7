"""The Catalyst extension (issue 7): our statements through ``spark.sql``, our operators as named nodes in
Spark's plans, the range-join rewrite, and the build.  Each ``spark.sql`` statement is checked against the
same statement through ``engine.sql`` on a twin engine; the rewrite against Spark's own plan (the rule
switched off) on random data.  The tests that need the extension skip when the suite runs with
``SPARKSUB_CATALYST=off`` (the pure-Python pass of ``.ci/run``)."""
from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparksub import Engine
from sparksub.errors import CatalystUnavailable
from sparksub.jvm import EXTENSION_CLASS, bridge, build

pytestmark = pytest.mark.spark
RULE_CONF = "spark.sparksub.rangeJoinRewrite"


@pytest.fixture
def on(spark):
    if not bridge.loaded(spark):
        pytest.skip("this session runs without the Catalyst extension (SPARKSUB_CATALYST=off)")
    return spark




def rows_of(df) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def engine_answer_as_rows(answer) -> list[dict]:
    """``engine.sql``'s answer in the shape ``spark.sql(...).collect()`` gives it."""
    if answer is None:
        return []
    if isinstance(answer, str):
        return [{"plan": answer}]
    return rows_of(answer)   # SHOW SUBSCRIPTIONS / SHOW SUBSCRIPTION GROUPS: a DataFrame


# ---- statements ------------------------------------------------------------------------------------

STATEMENTS = [
    "CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)",
    "CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60",
    "CREATE SUBSCRIPTION top2 AS SELECT * FROM stock WHERE risk BETWEEN 15 AND 45 ORDER BY per DESC LIMIT 2",
    "-- a comment first\nCREATE SUBSCRIPTION cheap AS SELECT * FROM stock WHERE per < 3",
    "CREATE TABLE Trades (Name STRING, Price DOUBLE) USING sparksub",
    "CREATE EVENT QUERY jump AS SELECT * FROM Trades NEXT{$1.Name = $2.Name AND $2.Price > $1.Price} Trades",
    "SHOW SUBSCRIPTIONS",
    "SHOW SUBSCRIPTION GROUPS",
    "EXPLAIN SUBSCRIPTION alice",
    "DROP SUBSCRIPTION top2",
    "DROP SUBSCRIPTION IF EXISTS nobody",
    "EXPLAIN SUBSCRIPTION SELECT MAX(per) FROM stock WHERE risk >= 25",
    "SHOW SUBSCRIPTIONS",
]


def test_statements_through_spark_sql_equal_engine_sql(on, explain_snapshot):
    direct = Engine(on)
    via = Engine(on)  # attached last: spark.sql's statements go to it
    assert via.catalyst and direct.catalyst
    for stmt in STATEMENTS:
        want = engine_answer_as_rows(direct.sql(stmt))
        got = rows_of(on.sql(stmt))
        if stmt.startswith("EXPLAIN"):
            normalise = explain_snapshot.normalise
            assert [normalise(r["plan"]) for r in got] == [normalise(r["plan"]) for r in want], stmt
            assert "SubscriptionGroupExec" in got[0]["plan"]
        else:
            assert got == want, stmt
    assert via.subscription_ids() == direct.subscription_ids() == ["alice", "cheap"]
    # the same effect: both engines now notify alike
    rows = [{"symbol": "a", "risk": 30.0, "per": 2.0}, {"symbol": "b", "risk": 50.0, "per": 1.0},
            {"symbol": "a", "risk": 70.0, "per": 2.5}]
    for engine in (direct, via):
        engine.load("stock", rows[:1])
    out = [sorted((r.subscription_id, r.op, r.value) for r in e.publish("stock", rows[1:]).collect())
           for e in (direct, via)]
    assert out[0] == out[1] and out[0]
    assert direct.result("alice") == via.result("alice") == 1.0
    events = [{"Name": "x", "Price": 1.0}, {"Name": "x", "Price": 2.0}]
    assert (sorted(map(str, rows_of(direct.publish("Trades", events))))
            == sorted(map(str, rows_of(via.publish("Trades", events)))))
    assert direct.matches("jump") == via.matches("jump") != []
    on.sql("DROP EVENT QUERY jump")
    assert via.event_queries() == []


def test_errors_surface_as_spark_exceptions_and_lose_nothing(on):
    from pyspark.errors import AnalysisException, ParseException
    e = Engine(on)
    on.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    on.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60")
    with pytest.raises(ParseException) as err:
        on.sql("CREATE SUBSCRIPTION bob AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 15 AND")
    assert "line 1, pos 76" in str(err.value) and "^^^" in str(err.value)
    with pytest.raises(AnalysisException, match="DuplicateSubscription: duplicate subscription id 'alice'"):
        on.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 2")
    with pytest.raises(AnalysisException, match="nope"):
        on.sql("CREATE SUBSCRIPTION carol AS SELECT MIN(per) FROM nope WHERE risk > 1")
    with pytest.raises(AnalysisException, match="UnknownSubscription"):
        on.sql("DROP SUBSCRIPTION nobody")
    with pytest.raises(AnalysisException, match=r"UnsupportedSubscription: unsupported subscription shape: GroupBy\[per\]"):
        on.sql("CREATE SUBSCRIPTION dave AS SELECT per, COUNT(*) FROM stock GROUP BY per")
    with pytest.raises(AnalysisException, match="UnsupportedSubscription: unsupported subscription shape"):
        on.sql("CREATE SUBSCRIPTION erin AS SELECT symbol FROM stock WHERE per > risk")
    assert e.subscription_ids() == ["alice"]
    assert [r.template for r in on.sql("SHOW SUBSCRIPTIONS").collect()] == [
        "RangeMinGroupScan[MIN(per) over risk IN [?, ?] of stock]"]
    # no engine attached: a clear error, and attaching again restores it
    on._jvm.sparksub.SparksubExtensions.detach()
    try:
        with pytest.raises(AnalysisException, match="no Engine is attached"):
            on.sql("SHOW SUBSCRIPTIONS")
    finally:
        e.attach()
    assert len(on.sql("SHOW SUBSCRIPTIONS").collect()) == 1


def test_other_statements_go_to_spark_untouched(on):
    Engine(on)
    assert on.sql("SELECT :x + 1 AS y", args={"x": 41}).collect()[0].y == 42
    on.sql("CREATE OR REPLACE TEMPORARY VIEW subscription_words AS SELECT 'CREATE SUBSCRIPTION' AS w")
    assert on.sql("SELECT w FROM subscription_words").collect()[0].w == "CREATE SUBSCRIPTION"
    assert "Project" in on.sql("EXPLAIN SELECT 1").collect()[0].plan
    from pyspark.errors import ParseException
    with pytest.raises(ParseException, match="PARSE_SYNTAX_ERROR"):  # Spark's own error for Spark's syntax
        on.sql("SELEC 1")


# ---- named nodes -------------------------------------------------------------------------------------

def test_explain_snapshots_batch_and_streaming(on, tmp_path, explain_snapshot):
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType
    e = Engine(on)
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", {"symbol": ["a", "b"], "risk": [10.0, 20.0], "per": [4.0, 3.0]})
    e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                     {"id": ["m1", "m2", "m3"], "lo": [0, 15, 25], "hi": [20, 35, 45]})
    explain_snapshot("range_min_group", e.explain("m2"))
    notes = e.publish("stock", [{"symbol": "c", "risk": 17.0, "per": 2.0}])
    batch_plan = on._jvm.PythonSQLUtils.explainString(notes._jdf.queryExecution(), "formatted")
    assert "SubscriptionGroupExec" in batch_plan and "publish to stock (ran once, kept)" in batch_plan
    assert sorted((r.subscription_id, r.value) for r in notes.collect()) == [("m1", 2.0), ("m2", 2.0)]
    schema = StructType([StructField("symbol", StringType()), StructField("risk", DoubleType()),
                         StructField("per", DoubleType())])
    (tmp_path / "in").mkdir()
    stream = e.stream("stock", on.readStream.schema(schema).json(str(tmp_path / "in")))
    plan = on._jvm.PythonSQLUtils.explainString(stream._jdf.queryExecution(), "formatted")
    assert "SubscriptionGroupExec" in plan
    explain_snapshot("range_min_stream", plan)
    # and a running stream's own plan (IncrementalExecution plans it with the session's strategies)
    (tmp_path / "in" / "1.json").write_text('{"symbol": "c", "risk": 17.0, "per": 1.0}\n')
    q = stream.writeStream.format("memory").queryName("catalyst_stream_plan").option(
        "checkpointLocation", str(tmp_path / "ck")).start()
    try:
        q.processAllAvailable()
        running = q._jsq.explainInternal(False)
    finally:
        q.stop()
    assert "SubscriptionGroupExec" in running
    got = sorted((r.subscription_id, r.value) for r in on.sql("SELECT * FROM catalyst_stream_plan").collect())
    assert got == [("m1", 1.0), ("m2", 1.0)]  # the stream starts from the engine's rows (17 -> 2.0 included)


def test_catalyst_false_puts_no_node(on):
    e = Engine(on, catalyst=False)
    assert e.catalyst is False
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60")
    text = e.explain("alice")
    assert "SubscriptionGroupExec" not in text and "== Spark physical plan ==" in text


# ---- the range-join rewrite --------------------------------------------------------------------------

def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _answer(spark, sql: str, rewrite: bool):
    spark.conf.set(RULE_CONF, str(rewrite).lower())
    try:
        before = bridge.rewrites(spark)
        df = spark.sql(sql)
        rows = sorted((tuple(r) for r in df.collect()), key=repr)
        return rows, bridge.rewrites(spark) - before, df
    finally:
        spark.conf.unset(RULE_CONF)


def _assert_rows_equal(got, want, sql):
    assert len(got) == len(want), (sql, got, want)
    for g, w in zip(got, want):
        assert all(_same(x, y) for x, y in zip(g, w)), (sql, got, want)


def _views(spark, params, data):
    spark.createDataFrame(params, "id INT, k2 STRING, lo DOUBLE, hi DOUBLE, c BIGINT, w BIGINT") \
        .createOrReplaceTempView("rq")
    spark.createDataFrame(data, "x DOUBLE, y DOUBLE, n BIGINT, ix BIGINT").createOrReplaceTempView("rt")


#: the shapes the rule claims; each is answered by our operator and must equal Spark's own answer
REWRITTEN = [
    "SELECT q.id, MIN(t.y) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi GROUP BY q.id",
    "SELECT q.id AS sid, MAX(t.y) AS m, COUNT(*) AS n FROM rt t JOIN rq q ON q.lo <= t.x AND t.x < q.hi GROUP BY q.id",
    "SELECT q.id, q.k2, COUNT(t.y), SUM(t.n), MIN(t.n) FROM rq q, rt t WHERE t.x > q.lo AND t.x <= q.hi "
    "GROUP BY q.id, q.k2",
    # the band formulation: the bounds are expressions over the parameter row
    "SELECT q.id, MIN(t.y), COUNT(*) FROM rq q JOIN rt t ON t.ix BETWEEN q.c - q.w AND q.c + q.w GROUP BY q.id",
    "SELECT q.k2, MAX(t.n) FROM rq q JOIN rt t ON t.x >= q.lo AND q.hi >= t.x GROUP BY q.k2",
    # the DISTINCT analogue (and DISTINCT of the keys alone: the keys that join anything)
    "SELECT DISTINCT q.id, t.n FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi",
    "SELECT q.k2, t.y FROM rq q JOIN rt t ON t.x > q.lo AND t.x <= q.hi GROUP BY q.k2, t.y",
    "SELECT DISTINCT q.id FROM rq q JOIN rt t ON t.ix BETWEEN q.c - q.w AND q.c + q.w",
    # the top-k analogue (ROW_NUMBER among ties is arbitrary: only the ordering column and rn are compared)
    "SELECT id, y, rn FROM (SELECT q.id, t.y, ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY t.y) AS rn "
    "FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi) WHERE rn <= 2",
    "SELECT * FROM (SELECT q.k2, t.n, ROW_NUMBER() OVER (PARTITION BY q.k2 ORDER BY t.n DESC) AS rn "
    "FROM rq q JOIN rt t ON t.x >= q.lo AND t.x < q.hi) WHERE rn < 4",
]

NOT_REWRITTEN = [
    "SELECT q.id, MIN(t.y) FROM rq q LEFT JOIN rt t ON t.x BETWEEN q.lo AND q.hi GROUP BY q.id",
    "SELECT q.id, AVG(t.y) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi GROUP BY q.id",
    "SELECT q.id, SUM(t.y) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi GROUP BY q.id",
    "SELECT q.id, COUNT(DISTINCT t.y) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi GROUP BY q.id",
    "SELECT q.id, MIN(t.y) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi AND t.n = q.c GROUP BY q.id",
    "SELECT q.id, MIN(t.y) FROM rq q JOIN rt t ON t.x >= q.lo OR t.x <= q.hi GROUP BY q.id",
    "SELECT t.n, MIN(q.lo) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi GROUP BY t.n",
    "SELECT MIN(t.y) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi",
    "SELECT q.id, MIN(t.y) FROM rq q JOIN rt t ON q.lo BETWEEN t.x AND t.y GROUP BY q.id",
    "SELECT q.id, MIN(q.hi) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi GROUP BY q.id",
    "SELECT DISTINCT q.id, t.y, t.n FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi",
    "SELECT * FROM (SELECT q.id, t.y, RANK() OVER (PARTITION BY q.id ORDER BY t.y) AS rn "
    "FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi) WHERE rn <= 2",
    "SELECT * FROM (SELECT q.id, t.y, ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY t.y) AS rn "
    "FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi) WHERE rn <= 101",
    "SELECT * FROM (SELECT q.id, q.lo, t.y, ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY t.y) AS rn "
    "FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi) WHERE rn <= 2",
]

#: a top-k whose ordering column has no ties in the data below: the payload columns are determined too
TOPK_WITH_PAYLOAD = ("SELECT * FROM (SELECT q.id, t.x, t.n, t.y, ROW_NUMBER() OVER (PARTITION BY q.id ORDER BY "
                     "t.n DESC NULLS FIRST) AS rn FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi) WHERE rn <= 2")

_grid = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 1.5, 2.0, 3.0, 5.0, float("nan")]))
_int = st.one_of(st.none(), st.integers(-3, 6))
_params = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.sampled_from(["a", "b", None]),
                             _grid, _grid, _int, st.one_of(st.none(), st.integers(0, 3))), max_size=12)
_data = st.lists(st.tuples(_grid, _grid, _int, _int), max_size=14)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=_params, data=_data, which=st.integers(0, len(REWRITTEN) - 1))
@example(params=[], data=[], which=0)
@example(params=[(1, "a", 1.0, 3.0, 1, 1), (1, "a", 2.0, 5.0, 1, 1), (2, None, 3.0, 1.0, None, 0)],
         data=[(1.0, 7.0, 1, 1), (2.0, None, 2, 2), (3.0, float("nan"), None, 0), (None, 1.0, 5, None)], which=1)
def test_rewrite_returns_sparks_answer(on, params, data, which):
    Engine(on)  # the bridge the rule calls
    _views(on, params, data)
    sql = REWRITTEN[which]
    want, fired_off, _ = _answer(on, sql, rewrite=False)
    got, fired, df = _answer(on, sql, rewrite=True)
    assert fired_off == 0 and fired >= 1
    _assert_rows_equal(got, want, sql)


def test_rewrite_fires_only_on_its_shapes(on):
    Engine(on)
    _views(on, [(1, "a", 1.0, 3.0, 2, 1), (2, "b", 0.0, 9.0, 4, 2)],
           [(1.0, 2.0, 3, 1), (2.5, 1.0, 1, 2), (8.0, 0.5, 2, 4)])
    for sql in REWRITTEN:
        got, fired, df = _answer(on, sql, rewrite=True)
        want, _, _ = _answer(on, sql, rewrite=False)
        assert fired >= 1, sql
        assert "SubscriptionGroupExec" in df._jdf.queryExecution().executedPlan().toString()
        _assert_rows_equal(got, want, sql)
    got, fired, _ = _answer(on, TOPK_WITH_PAYLOAD, rewrite=True)
    want, _, _ = _answer(on, TOPK_WITH_PAYLOAD, rewrite=False)
    assert fired >= 1 and got == want == [(1, 1.0, 3, 2.0, 1), (1, 2.5, 1, 1.0, 2), (2, 1.0, 3, 2.0, 1),
                                          (2, 8.0, 2, 0.5, 2)]
    for sql in NOT_REWRITTEN:
        got, fired, df = _answer(on, sql, rewrite=True)
        assert fired == 0, sql
        assert "SubscriptionGroupExec" not in df._jdf.queryExecution().executedPlan().toString()


def test_rewrite_explain_snapshot(on, explain_snapshot):
    Engine(on)
    _views(on, [(1, "a", 1.0, 3.0, 2, 1)], [(1.0, 2.0, 3, 1)])
    plan = on.sql("EXPLAIN FORMATTED SELECT q.id, MIN(t.y) FROM rq q JOIN rt t ON t.x BETWEEN q.lo AND q.hi "
                  "GROUP BY q.id").collect()[0].plan
    explain_snapshot("range_join_rewrite", plan)


# ---- build and fallbacks -----------------------------------------------------------------------------

def test_build_from_sources_into_a_fresh_cache(tmp_path):
    import zipfile
    with pytest.raises(CatalystUnavailable, match="not built yet"):
        build.jar_path(build=False, cache=tmp_path)
    jar = build.jar_path(cache=tmp_path)
    assert build.last_build_seconds is not None and jar.parent.parent == tmp_path
    names = zipfile.ZipFile(jar).namelist()
    assert {"sparksub/SparksubExtensions.class", "sparksub/StatementParser.class", "sparksub/RangeJoinRule.class",
            "sparksub/SubscriptionGroup$Exec.class"} <= set(names)
    assert build.jar_path(cache=tmp_path) == jar and build.last_build_seconds is None  # cached
    conf = build.extension_conf(jar, existing_jars="/x/other.jar")
    assert conf == {"spark.jars": f"/x/other.jar,{jar}", "spark.sql.extensions": EXTENSION_CLASS}


def test_no_javac_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CatalystUnavailable, match="no javac found"):
        build.jar_path(cache=tmp_path)


def test_session_without_the_extension(spark, monkeypatch, caplog):
    import sparksub.engine as engine_module
    monkeypatch.setattr(bridge, "loaded", lambda s: False)
    with pytest.raises(CatalystUnavailable, match="spark.sql.extensions"):
        Engine(spark, catalyst=True)
    monkeypatch.setattr(engine_module, "_catalyst_warned", False)
    with caplog.at_level("WARNING", logger="sparksub.engine"):   # logging, not warnings (issue 15 item 12)
        e = Engine(spark, catalyst="auto")
        Engine(spark, catalyst="auto")
    said = [r for r in caplog.records if "Catalyst extension is off" in r.getMessage()]
    assert len(said) == 1 and said[0].name == "sparksub.engine"   # once per process, not per engine
    assert e.catalyst is False and "spark.sql.extensions" in e.catalyst_reason
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60")
    assert [r.value for r in e.publish("stock", [{"symbol": "a", "risk": 30.0, "per": 2.0}]).collect()] == [2.0]
    with pytest.raises(ValueError, match="catalyst must be"):
        Engine(spark, catalyst="sometimes")


USER_SESSION = """
import sys
from pyspark.sql import SparkSession
import sparksub, sparksub.jvm
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.jars", str(sparksub.jvm.jar_path()))
         .config("spark.sql.extensions", "sparksub.SparksubExtensions").getOrCreate())
engine = sparksub.Engine(spark, catalyst=True)
spark.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
spark.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60")
rows = engine.publish("stock", [{"symbol": "a", "risk": 30.0, "per": 2.0}]).collect()
print("RESULT", engine.catalyst, [(r.subscription_id, r.value) for r in rows],
      [(r.name, r.parameters) for r in spark.sql("SHOW SUBSCRIPTIONS").collect()],
      [r.subscriptions for r in spark.sql("SHOW SUBSCRIPTION GROUPS").collect()])
"""


def test_a_session_the_user_built_with_the_two_settings(on, tmp_path):
    import subprocess
    import sys
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-c", USER_SESSION], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line == """RESULT True [('alice', 2.0)] [('alice', '{"risk": [20, 60]}')] [1]""", proc.stderr[-3000:]
