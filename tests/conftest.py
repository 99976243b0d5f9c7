"""One SparkSession for the whole test run (session-scoped, never stopped: stopping costs ~1 s and a
second session in one process would be slower still)."""
from __future__ import annotations

import os
import sys

import pytest


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
