"""The command line, in-process (it reuses the test session's SparkSession through getOrCreate)."""
from __future__ import annotations

import re

import pytest

from sparksub.cli import main, stock_workload

pytestmark = pytest.mark.spark


def test_run_script_against_csv_events(spark, tmp_path, capsys):
    script = tmp_path / "subs.sql"
    script.write_text("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE);\n"
                      "CREATE SUBSCRIPTION lowrisk AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 10 AND 50;\n"
                      "CREATE SUBSCRIPTION anyrisk AS SELECT MAX(per) FROM stock WHERE risk >= 0;\n")
    events = tmp_path / "events.csv"
    events.write_text("symbol,risk,per,_op\nA,20,5,upsert\nB,30,3,upsert\nC,60,1,upsert\nB,,,delete\n")
    assert main(["run", str(script), "--events", str(events)]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s*(lowrisk|anyrisk)\s+update\s+(\S+)\s+(\d+)", out, flags=re.M)
    # lowrisk: 5 (A), 3 (B), - (C is out of range), 5 (B deleted); anyrisk: 5 (A), then unchanged
    assert rows == [("lowrisk", "5.0", "0"), ("anyrisk", "5.0", "0"), ("lowrisk", "3.0", "1"),
                    ("lowrisk", "5.0", "3")]
    assert "4 events, 4 notifications" in out


def test_run_reports_bad_events_with_rows(spark, tmp_path, capsys):
    script = tmp_path / "subs.sql"
    script.write_text("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE);"
                      "CREATE SUBSCRIPTION s AS SELECT MIN(y) FROM t WHERE x BETWEEN 0 AND 1")
    events = tmp_path / "events.jsonl"
    events.write_text('{"k": "a", "x": 0.5, "y": 1}\n{"k": "zz", "_op": "delete"}\n')
    assert main(["run", str(script), "--events", str(events)]) == 2
    err = capsys.readouterr().err
    assert "delete of unknown key 'zz'" in err and "row 1" in err


def test_run_reports_script_errors_with_position(spark, tmp_path, capsys):
    script = tmp_path / "bad.sql"
    script.write_text("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE);\nCREATE SUBSCRIPTION s AS SELECT MIN(x FROM t")
    events = tmp_path / "e.csv"
    events.write_text("k,x\na,1\n")
    assert main(["run", str(script), "--events", str(events)]) == 2
    assert "line 2" in capsys.readouterr().err


def test_demo_small(spark, capsys):
    assert main(["demo", "--stocks", "300", "--subscriptions", "2000", "--updates", "600", "--batch", "300"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"messages, reformulated \(S-CN\)\s+([\d,]+)", out)
    u = re.search(r"notifications, unicast \(S-UN\)\s+([\d,]+)", out)
    kinds = re.search(r"ignorable / good / bad\s+([\d,]+) / ([\d,]+) / ([\d,]+)", out)
    assert m and u and kinds
    assert sum(int(k.replace(",", "")) for k in kinds.groups()) == 600  # every update classified once


def test_stock_workload_follows_table1():
    symbols, risk, per, lo, hi, who, new_per = stock_workload(1000, 20000, 5000, seed=3)
    assert (lo <= hi).all() and lo.min() >= 0 and hi.max() <= 10_000
    assert abs(((lo + hi) / 2).mean() - 5000) < 100
    assert new_per.min() >= 0 and new_per.max() <= 10_000
