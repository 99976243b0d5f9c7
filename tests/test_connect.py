"""Spark Connect (issue 15 item 11): until the runtime is Connect-clean, ``Engine`` refuses a Connect
session at once — given (``Engine(spark)``) or made by ``Engine()`` because the environment asks for Connect —
with ``SparkConnectUnsupported`` naming Spark Connect and what to pass instead, before the catalyst warning
and before anything is registered (it used to take DDL and fail at the first publish).

The session is a real one (``SparkSession.builder.remote("local[2]")``: a local Connect server) in a
subprocess, since a Connect session in this process would clash with the session-scoped classic one."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from sparksub.engine import catalyst_mode
from sparksub.runtime.connect import is_connect_session

pytestmark = pytest.mark.spark

#: pyspark's ``connect`` extra (the test extra installs it): the modules a Connect client imports
CONNECT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard")

SCRIPT = r"""
import os, warnings
from pyspark.sql import SparkSession
try:
    from pyspark.sql.connect.utils import check_dependencies
    check_dependencies()
except ImportError as err:
    print("SKIP", err)
    raise SystemExit(0)
import sparksub
from sparksub.errors import SparkConnectUnsupported
from sparksub.runtime.connect import is_connect_session
spark = SparkSession.builder.remote("local[2]").getOrCreate()
print("CONNECT", type(spark).__module__, is_connect_session(spark))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        sparksub.Engine(spark)
        print("GIVEN accepted")
    except SparkConnectUnsupported as err:
        print("GIVEN refused", err)
print("WARNINGS", sum("sparksub" in str(w.message) for w in caught))
os.environ["SPARK_API_MODE"] = "connect"      # the embedded session's builder now makes a Connect session
try:
    sparksub.Engine(catalyst=False).spark
    print("EMBEDDED accepted")
except SparkConnectUnsupported as err:
    print("EMBEDDED refused", err)
"""


def test_the_classic_session_is_not_connect(spark):
    assert not is_connect_session(spark)


def test_engine_refuses_a_spark_connect_session(tmp_path):
    missing = [m for m in CONNECT_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"pyspark's connect extra is not installed ({', '.join(missing)} missing): "
                    f"pip install 'pyspark[connect]' (the test extra has it)")
    if catalyst_mode() is False:
        pytest.skip("runs once, in the pass with the extension (a Connect session never has it: the check is "
                    "the same in both passes, and a Connect server takes ~15 s to start)")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for var in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_API_MODE", "SPARK_LOCAL_REMOTE"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=900,
                          env=env, cwd=tmp_path)
    lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in proc.stdout.splitlines() if " " in ln}
    if "SKIP" in lines:
        pytest.skip(f"a Spark Connect client cannot start here: {lines['SKIP']}")
    assert lines.get("CONNECT") == "pyspark.sql.connect.session True", proc.stderr[-3000:]
    given = lines.get("GIVEN", "")
    assert given.startswith("refused sparksub does not run on Spark Connect"), given or proc.stderr[-3000:]
    assert "SparkSession.builder.remote" in given and "classic SparkSession" in given and "Engine()" in given
    # no "Catalyst extension is off" before the refusal (as a warning or a log line)
    assert lines.get("WARNINGS") == "0" and "Catalyst extension is off" not in proc.stderr
    embedded = lines.get("EMBEDDED", "")
    assert embedded.startswith("refused") and "SPARK_API_MODE" in embedded, embedded or proc.stderr[-3000:]
