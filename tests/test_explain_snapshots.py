"""EXPLAIN SUBSCRIPTION snapshots (``fixtures/explain/<name>.txt``, ``fixtures/explain_catalyst/`` with the
Catalyst extension: conftest's ``explain_snapshot``). Spark's expression ids (``#123``) and plan ids are
normalised away; everything else must match line for line. To accept a deliberate
change, run with ``SPARKSUB_UPDATE_SNAPSHOTS=1`` and review the diff."""
from __future__ import annotations

import pytest

from sparksub import Engine

pytestmark = pytest.mark.spark


@pytest.fixture
def stock_engine(spark):
    e = Engine(spark)
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", {"symbol": ["a", "b", "c", "d"], "risk": [10.0, 20.0, 30.0, 40.0], "per": [4.0, 3.0, 2.0, 1.0]})
    return e


def test_explain_single_subscription(stock_engine, explain_snapshot):
    stock_engine.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE 20 < risk AND risk <= 60")
    explain_snapshot("alice", stock_engine.sql("EXPLAIN SUBSCRIPTION alice"))


def test_explain_bulk_template_and_unregistered_select(stock_engine, explain_snapshot):
    stock_engine.subscribe_many("SELECT MAX(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                                {"id": ["m1", "m2", "m3"], "lo": [0, 15, 25], "hi": [20, 35, 45]})
    explain_snapshot("bulk_max", stock_engine.explain("m2"))
    explain_snapshot("unregistered", stock_engine.explain("SELECT MIN(per) FROM stock WHERE risk >= 25"))


def test_explain_filter(spark, explain_snapshot):
    e = Engine(spark)
    e.sql("CREATE TABLE trades (name STRING, price DOUBLE, volume BIGINT)")
    e.sql("CREATE SUBSCRIPTION ibm AS SELECT * FROM trades WHERE name = 'IBM' AND price > 50")
    e.subscribe_many("SELECT name FROM trades WHERE name = :n AND volume IN (:v, 7) OR price IS NULL",
                     {"id": ["a", "b", "c"], "n": ["X", "Y", "X"], "v": [1, 2, 3]})
    explain_snapshot("filter_ibm", e.explain("ibm"))
    explain_snapshot("filter_bulk", e.explain("b"))


def test_explain_topk_distinct_agg(stock_engine, explain_snapshot):
    stock_engine.sql("CREATE SUBSCRIPTION top2 AS SELECT * FROM stock WHERE risk BETWEEN 15 AND 45 "
                     "ORDER BY per DESC LIMIT 2")
    stock_engine.sql("CREATE SUBSCRIPTION pers AS SELECT DISTINCT per FROM stock WHERE risk <= 30")
    stock_engine.sql("CREATE SUBSCRIPTION mean AS SELECT AVG(per) FROM stock WHERE risk BETWEEN 10 AND 30")
    stock_engine.publish("stock", [{"symbol": "e", "risk": 25.0, "per": 5.0}])
    explain_snapshot("topk", stock_engine.explain("top2"))
    explain_snapshot("distinct", stock_engine.explain("pers"))
    explain_snapshot("agg", stock_engine.explain("mean"))


def test_explain_boxes(spark, explain_snapshot):
    e = Engine(spark)
    e.sql("CREATE TABLE pts (id INT PRIMARY KEY, a DOUBLE, b DOUBLE, v DOUBLE)")
    e.load("pts", {"id": [1, 2, 3, 4], "a": [1.0, 2.0, 3.0, 4.0], "b": [4.0, 3.0, 2.0, 1.0], "v": [5.0, 6.0, 7.0, 8.0]})
    e.sql("CREATE SUBSCRIPTION bmin AS SELECT MIN(v) FROM pts WHERE a BETWEEN 1 AND 3 AND b >= 2")
    e.sql("CREATE SUBSCRIPTION btop AS SELECT id, v FROM pts WHERE b BETWEEN 0 AND 5 AND a BETWEEN 2 AND 4 "
          "ORDER BY v DESC LIMIT 2")
    e.publish("pts", [{"id": 5, "a": 2.5, "b": 2.5, "v": 1.0}])
    explain_snapshot("box_min", e.explain("bmin"))
    explain_snapshot("box_topk", e.explain("btop"))


def test_explain_joins(spark, explain_snapshot):
    e = Engine(spark)
    e.join_partitions = 2
    e.sql("CREATE TABLE supply (sid BIGINT PRIMARY KEY, qty DOUBLE, prod BIGINT)")
    e.sql("CREATE TABLE demand (did BIGINT PRIMARY KEY, prod BIGINT, price DOUBLE)")
    e.load("supply", {"sid": [1, 2, 3], "qty": [5.0, 15.0, 25.0], "prod": [1, 1, 2]})
    e.load("demand", {"did": [1, 2], "prod": [1, 2], "price": [10.0, 20.0]})
    e.sql("CREATE SUBSCRIPTION sj AS SELECT * FROM supply s JOIN demand d ON s.prod = d.prod "
          "WHERE s.qty BETWEEN 10 AND 30 AND d.price <= 15")
    e.subscribe_many("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod "
                     "WHERE s.qty BETWEEN :lo AND :hi AND d.price BETWEEN :p AND :q",
                     {"id": ["x", "y"], "lo": [0, 20], "hi": [30, 40], "p": [5, 12], "q": [15, 25]})
    explain_snapshot("select_join", e.explain("sj"))
    e.sql("CREATE SUBSCRIPTION bj AS SELECT * FROM supply JOIN demand ON demand.price - supply.qty BETWEEN -5 AND 5 "
          "WHERE supply.qty >= 10")
    explain_snapshot("band_join", e.explain("bj"))
