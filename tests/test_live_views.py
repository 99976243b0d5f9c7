"""The engine's tables as live views (issue 16 item 3): once ``engine.sql`` has named a table, a plain
``spark.sql`` over it sees every batch applied since, read from the table's files (``row_files.py``), never
from rows collected on the driver.  Oracle: the batches replayed into a dict, last writer wins."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sparksub import Engine
from sparksub import row_files

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

KEYS = [f"k{i}" for i in range(6)]
VALUES = st.one_of(st.none(), st.floats(-5, 5, allow_nan=False), st.sampled_from([0.0, -0.0, 1.5]))
ROW = st.fixed_dictionaries({"id": st.sampled_from(KEYS), "price": VALUES,
                             "_op": st.sampled_from(["upsert", "upsert", "delete"])})


def _replay(current: dict, batch: list[dict]) -> None:
    for row in batch:
        if row["_op"] == "delete":
            current.pop(row["id"], None)   # a delete of a key the table lacks is set aside: no change either way
        else:
            current[row["id"]] = row["price"]


def _rows(df) -> dict:
    return {r["id"]: r["price"] for r in df.collect()}


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(ROW, min_size=1, max_size=6), min_size=1, max_size=4))
def test_a_plain_spark_sql_sees_every_publish(spark, monkeypatch, batches):
    monkeypatch.setattr(row_files, "COMPACT_AFTER", 2)   # compactions within a few publishes
    engine = Engine(spark)
    engine.sql("CREATE TABLE stocks (id STRING, price DOUBLE, PRIMARY KEY (id))")
    engine.load("stocks", [{"id": "k0", "price": 1.0}, {"id": "k1", "price": None}])
    current = {"k0": 1.0, "k1": None}
    assert _rows(engine.sql("SELECT id, price FROM stocks")) == current
    for batch in batches:
        engine.publish("stocks", [dict(r) for r in batch]).count()
        _replay(current, batch)
        # not through the engine: the view engine.sql made is live
        assert _rows(spark.sql("SELECT id, price FROM stocks")) == current


def test_a_table_frame_made_before_a_compaction_still_reads(spark, monkeypatch):
    monkeypatch.setattr(row_files, "COMPACT_AFTER", 1)
    engine = Engine(spark)
    engine.sql("CREATE TABLE t (id STRING, price DOUBLE, PRIMARY KEY (id))")
    engine.load("t", [{"id": "a", "price": 1.0}])
    before = engine.table("t")
    engine.publish("t", [{"id": "b", "price": 2.0}]).count()   # compacts: the old base is superseded
    assert _rows(before) == {"a": 1.0}
    assert _rows(engine.table("t")) == {"a": 1.0, "b": 2.0}
    folder = engine._tables["t"].files.folder
    engine.publish("t", [{"id": "a", "_op": "delete"}]).count()   # compacts again: the first base goes
    assert _rows(engine.table("t")) == {"b": 2.0}
    assert len([p for p in folder.iterdir() if p.name.startswith("base-")]) == 2


def test_a_reopened_engine_rewrites_its_views_from_its_rows(spark, tmp_path):
    with Engine(spark, path=tmp_path / "e") as engine:
        engine.sql("CREATE TABLE t (id STRING, price DOUBLE, PRIMARY KEY (id))")
        engine.load("t", [{"id": "a", "price": 1.0}, {"id": "b", "price": 2.0}])
        assert _rows(engine.sql("SELECT * FROM t")) == {"a": 1.0, "b": 2.0}
        engine.publish("t", [{"id": "a", "_op": "delete"}]).count()
    with Engine(spark, path=tmp_path / "e") as engine:
        assert _rows(engine.sql("SELECT * FROM t")) == {"b": 2.0}
        engine.publish("t", [{"id": "c", "price": 3.0}]).count()
        assert _rows(spark.sql("SELECT * FROM t")) == {"b": 2.0, "c": 3.0}
