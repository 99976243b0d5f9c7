"""The command line, in-process (it reuses the test session's SparkSession through getOrCreate)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
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
    assert main(["run", str(script), "--events", str(events)]) == 0   # a malformed row is set aside (DESIGN §7)
    out = capsys.readouterr().out
    assert re.search(r"^\s*None\s+rejected\s+\S+\s+1\s.*delete of unknown key 'zz'", out, flags=re.M), out
    assert "1 rows rejected" in out
    script.write_text("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE, y DOUBLE)")
    events.write_text('{"k": "a", "x": 0.5, "y": 1, "z": 2}\n')   # a malformed batch: an error naming it
    assert main(["run", str(script), "--events", str(events)]) == 2
    assert "unknown column(s) ['z']" in capsys.readouterr().err


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


def test_a_statement_typo_is_a_clean_error_positioned_in_the_file(spark, tmp_path, capsys):
    """A typo Spark's parser refuses (our keyword misspelt) or ours: no traceback, the file's line and
    column, and nothing of the script ran (the CSV is never published)."""
    events = tmp_path / "e.csv"
    events.write_text("k,x\na,1\n")
    for typo, marker in (("CREATE SUBSCRIPTON s2 AS SELECT MIN(x) FROM t", "SUBSCRIPTON"),
                         ("CREATE SUBSCRIPTION s2 AS SELECT MIN(x) FROM t WHERE x > 'abc'", "'abc'")):
        text = ("CREATE TABLE t (k STRING PRIMARY KEY, x DOUBLE);\n\n"
                "CREATE SUBSCRIPTION s AS SELECT MIN(x) FROM t WHERE x BETWEEN 0 AND 2;\n" + typo + ";\n")
        script = tmp_path / "typo.sql"
        script.write_text(text)
        assert main(["run", str(script), "--events", str(events)]) == 2
        out = capsys.readouterr()
        at = text.index(marker)
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        assert f"(line {line}, column {column})" in out.err and "Traceback" not in out.err
        assert "events" not in out.out  # nothing was published


def test_version(capsys):
    from importlib.metadata import version
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"sparksub {version('sparksub')}"


def _readme_use_block() -> str:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    use = readme[readme.index("## Use"):]
    return use[use.index("```python") + len("```python"):use.index("```", use.index("```python") + 3)]


def test_the_readme_use_block_runs_as_pasted(engine, spark, tmp_path, capsys, monkeypatch):
    """The README's Use block, verbatim, on the session's engine with small data; its results against a
    recomputation from the rows (MIN) and the reference interpreter (the event query)."""
    import pandas as pd

    import sparksub
    from sparksub.grammar.events import parse_event_query
    from cayuga_reference import evaluate

    rng = np.random.default_rng(7)
    stocks = pd.DataFrame({"symbol": [f"s{i}" for i in range(20)], "risk": rng.uniform(0, 100, 20).round(1),
                           "per": rng.uniform(0, 50, 20).round(2)})
    updates = [{"symbol": f"s{i}", "risk": float(rng.uniform(0, 100)), "per": float(rng.uniform(0, 50))}
               for i in rng.integers(0, 20, 6)]
    lo = rng.uniform(0, 80, 30)
    events = [{"Name": n, "Price": p, "Volume": v} for n, p, v in
              [("IBM", 10.0, 1), ("MSFT", 5.0, 2), ("IBM", 11.0, 3), ("SAP", 7.0, 4), ("MSFT", 4.0, 5),
               ("IBM", 9.5, 6)]]
    (tmp_path / "stream").mkdir()
    monkeypatch.setattr(sparksub, "Engine", lambda *a, **k: engine)   # the block's `import sparksub` sees it
    namespace = {
        "stocks_df": stocks,
        "ids": [f"t{i}" for i in range(30)], "lo": lo, "hi": lo + 20, "updates": updates, "events": events,
        "streaming_df": spark.readStream.schema("symbol STRING, risk DOUBLE, per DOUBLE").json(str(tmp_path / "stream")),
    }
    exec(compile(_readme_use_block(), "README.md", "exec"), namespace)
    assert "alice" in capsys.readouterr().out  # the EXPLAIN printed
    rows = stocks.set_index("symbol")
    for u in updates:
        rows.loc[u["symbol"], ["risk", "per"]] = [u["risk"], u["per"]]
    inside = rows[(rows.risk >= 20) & (rows.risk <= 60)].per
    assert engine.result("alice") == (float(inside.min()) if len(inside) else None)
    expected = evaluate(parse_event_query("SELECT * FROM ticks NEXT{$1.Name = $2.Name} ticks"), {"ticks": events})
    assert engine.matches("jump") == expected
