"""One SparkSession for the whole test run (session-scoped, never stopped: stopping costs ~1 s and a
second session in one process would be slower still)."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from sparksub.engine import spark_session
    return spark_session("local[2]", "sparksub-tests")


@pytest.fixture
def engine(spark):
    from sparksub import Engine
    return Engine(spark)


def normalise_plan(text: str) -> str:
    """What changes from run to run in an EXPLAIN, replaced by placeholders: expression, plan and RDD ids,
    call sites, Java identity hash codes, UUIDs, temporary paths."""
    text = re.sub(r"#\d+L?", "#N", text)
    text = re.sub(r"plan_id=\d+", "plan_id=N", text)
    text = re.sub(r"RDD\[\d+\] at \w+ at [^,]+", "RDD[N]", text)
    text = re.sub(r"@[0-9a-f]{6,}\b", "@H", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", text)
    return re.sub(r"FileSource\[[^\]]*\]", "FileSource[PATH]", text)


@pytest.fixture
def explain_snapshot(spark):
    """``check(name, text)``: an EXPLAIN, normalised (``normalise_plan``), must equal
    ``fixtures/explain/<name>.txt`` -- or ``fixtures/explain_catalyst/<name>.txt`` when the session has the
    Catalyst extension, whose EXPLAIN shows one physical plan (Spark's, with our SubscriptionGroupExec).
    A missing file is written; ``SPARKSUB_UPDATE_SNAPSHOTS=1`` rewrites them all (review the diff)."""
    from sparksub.jvm import bridge
    folder = FIXTURES / ("explain_catalyst" if bridge.loaded(spark) else "explain")

    def check(name: str, text: str) -> None:
        path = folder / f"{name}.txt"
        text = normalise_plan(text).rstrip() + "\n"
        if os.environ.get("SPARKSUB_UPDATE_SNAPSHOTS") or not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
        assert text == path.read_text()

    check.normalise = normalise_plan
    return check


#: test files of a minute or more (Spark children, a Connect server, a local cluster, a killed server), collected
#: first: ``-n 2 --dist loadfile`` hands files out in collection order, so the long ones start first and the
#: short ones fill in beside them, rather than one long file starting last on a worker the other waits for
LONG_FILES = ("test_durable.py", "test_connect.py", "test_cluster.py", "test_serve_recovery.py",
              "test_sql_differential.py", "test_catalyst.py", "test_stream.py", "test_zones_engine.py",
              "test_durable_issue19.py", "test_stream_subscriptions.py", "test_serve_streams.py",
              "test_join_shards_engine.py", "test_stream_join_shards.py", "test_range_shards_engine.py",
              "test_stream_range_shards_classes.py", "test_box_shards_engine.py", "test_stream_box_shards.py",
              "test_topk_zones_engine.py", "test_stream_agg_zones.py",
              "test_stream_distinct_zones.py", "test_stream_min_zones.py", "test_stream_reopen.py",
              "test_explain_splits.py", "test_stream_topk_zones.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: LONG_FILES.index(item.path.name) if item.path.name in LONG_FILES
               else len(LONG_FILES))   # stable: the order within a file, and of the other files, stays
    _skip_in_the_catalyst_off_run(items)


def _skip_in_the_catalyst_off_run(items):
    """``.ci/run`` runs the Spark tests a second time with ``SPARKSUB_CATALYST=off`` (the pure-Python path
    of our statements). Run in the first run only: tests marked ``catalyst_independent`` -- their engines run
    without the Catalyst extension in both runs (a Spark Connect session; child processes; a local-cluster
    child whose subject is the executors) -- and tests marked ``catalyst_passthrough``, whose path the
    extension only wraps in its pass-through node (running streams: tests/test_stream_validation.py streams
    every kind of table in both runs; the classes' engine tests, whose ``publish`` output it wraps the same
    way, the SQL differential among them: tests/test_engine_spark.py, test_explain_snapshots.py, test_show.py and
    test_bad_input.py run in both)."""
    if os.environ.get("SPARKSUB_CATALYST", "").lower() not in ("off", "false", "0"):
        return
    skip = pytest.mark.skip(reason="does not depend on the Catalyst extension: covered by the first run")
    for item in items:
        if item.get_closest_marker("catalyst_independent") or item.get_closest_marker("catalyst_passthrough"):
            item.add_marker(skip)
