"""Spark Connect (issue 16 item 7): the runtime uses only DataFrame APIs a Connect client has (state in files
under the engine's directory, no broadcasts, accumulators, ``sparkContext`` or ``_jdf`` on the data path), so
``Engine(spark)`` on a Connect session publishes and streams with the same output as on a classic session.

One scenario (:func:`scenario`) runs twice: here, on the tests' classic session, and in a subprocess on a real
Connect session (a local[2] session serving Connect on a free port, and its client: what
``SparkSession.builder.remote("local[2]")`` does, but on a free port), since a Connect
session in this process would clash with the session-scoped classic one.  Its output -- every row of
every publish, the results, the matches and the stream's rows, sorted -- must be equal.  The scenario covers
a range-min group (unicast and reformulated, with ``deliver``), a FILTER group, a SELECT_JOIN group, an event
query, and ``stream()`` of a range-min group over a bounded file source (``availableNow``).  The oracle is the
classic run: the classes' own tests check it against theirs."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparksub.engine import catalyst_mode
from sparksub.runtime.connect import is_connect_session

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_independent]   # engines without the extension in both runs

#: pyspark's ``connect`` extra (a dependency of the package): the modules a Connect client imports
CONNECT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard")

RUN_ON_CONNECT = r"""
import json, sys
from pyspark.sql import SparkSession
try:
    from pyspark.sql.connect.utils import check_dependencies
    check_dependencies()
except ImportError as err:
    print("SKIP", err)
    raise SystemExit(0)
sys.path.insert(0, sys.argv[1])
import test_connect
# What builder.remote("local[2]") does -- a local[2] session whose Connect plugin serves gRPC, and a client
# of it -- on a free port: remote("local[...]") always binds 15002, which a second run (CI beside a
# benchmark, two test processes) finds taken.
import socket
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
(SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
 .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
 .config("spark.connect.grpc.binding.port", str(port))
 .config("spark.sql.streaming.stateStore.providerClass",
         "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
import os
os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"   # as remote("local") sets it: functions build Connect columns
from pyspark.sql.connect.session import SparkSession as ConnectSession
spark = ConnectSession.builder.remote(f"sc://localhost:{port}").getOrCreate()
out = test_connect.scenario(spark, sys.argv[2])
with open(sys.argv[3], "w") as fh:
    json.dump(out, fh)
print("DONE")
"""


def _rows(df) -> list:
    """A DataFrame's rows as sorted JSON texts (every column; the order of rows is not part of the contract)."""
    return sorted(json.dumps(r.asDict(), sort_keys=True, default=str) for r in df.collect())


def scenario(spark, tmp: str) -> dict:
    """Publish to each class and stream a range-min group; everything the engine answered, comparable.  Then the
    range-min, top-k and select-join workloads and the stream again on an engine with every split forced (X zones,
    the range classes' and the select-join's subscription shards, the stream's two stages), whose rows must equal
    the whole groups' (``split_*``)."""
    from sparksub import Engine

    out: dict = {}
    e = Engine(spark, catalyst="auto", path=os.path.join(tmp, "engine"))
    out["catalyst"] = e.catalyst if is_connect_session(spark) else None
    _range_part(e, out, "")
    # FILTER
    e.sql("CREATE TABLE trades (name STRING, price DOUBLE, volume BIGINT)")
    e.sql("CREATE SUBSCRIPTION ibm AS SELECT * FROM trades WHERE name = 'IBM' AND price > 50")
    e.subscribe_many("SELECT * FROM trades WHERE price BETWEEN :lo AND :hi",
                     {"id": [f"f{i}" for i in range(6)], "lo": [10.0 * i for i in range(6)],
                      "hi": [10.0 * i + 25 for i in range(6)]})
    out["filter"] = _rows(e.publish("trades", [{"name": n, "price": float(p), "volume": v}
                                              for n, p, v in (("IBM", 60, 1), ("SAP", 15, 2), ("IBM", 30, 3),
                                                              ("ORCL", 55, 4))]))
    _join_part(e, out, "")
    # an event query
    e.sql("CREATE TABLE Ticks (Name STRING, Price BIGINT)")
    e.register_event_query("up", "SELECT * FROM Ticks NEXT{$1.Name = $2.Name AND $2.Price > $1.Price} Ticks")
    ticks = [{"Name": n, "Price": p} for n, p in (("A", 1), ("B", 5), ("A", 3), ("B", 4), ("A", 2), ("B", 9))]
    out["events"] = _rows(e.publish("Ticks", ticks))
    out["matches"] = e.matches("up")
    _stream_part(spark, e, out, "", Path(tmp, "stream"))
    runtime = e.stats()["runtime"]
    out["counted"] = {"rebuilds": runtime["rebuilds"] > 0, "stream_micro_batches": runtime["streams"].get(
        "micro_batches", 0) > 0}
    split = Engine(spark, catalyst="auto", path=os.path.join(tmp, "engine_split"))
    split.range_zones = split.range_subscription_shards = split.join_subscription_shards = 2
    _range_part(split, out, "split_")
    split.sql("CREATE TABLE ranked (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    split.load("ranked", [{"symbol": f"t{i}", "risk": float(10 * i), "per": float((7 * i) % 13)} for i in range(12)])
    split.subscribe_many("SELECT symbol, per FROM ranked WHERE risk BETWEEN :lo AND :hi ORDER BY per LIMIT 2",
                         {"id": [f"k{i}" for i in range(5)], "lo": [float(10 * i) for i in range(5)],
                          "hi": [float(10 * i + 50) for i in range(5)]})
    out["split_topk"] = _rows(split.publish("ranked", [{"symbol": "t4", "risk": 45.0, "per": 0.2},
                                                       {"symbol": "t9", "_op": "delete"}]))
    _join_part(split, out, "split_")
    # EXPLAIN: the jobs of each split group's publish and each job's partitions (plan_text reads a Connect plan)
    out["split_explain"] = {s: _jobs_explained(split.explain(s)) for s in ("m1", "k1", "j1")}
    _stream_part(spark, split, out, "split_", Path(tmp, "stream_split"))
    return out


def _jobs_explained(text: str) -> list:
    """EXPLAIN's Spark jobs: each heading and each job's ``Range`` (its partitions), in order."""
    return re.findall(r"^-- job .* --$|Range \(0, \d+, step=1, splits=\d+\)", text, re.M)


def _range_part(e, out: dict, prefix: str) -> None:
    """range-min: unicast, reformulated (+ deliver), result."""
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", [{"symbol": f"t{i}", "risk": float(10 * i), "per": float((7 * i) % 13)} for i in range(12)])
    e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                     {"id": [f"m{i}" for i in range(8)], "lo": [float(5 * i) for i in range(8)],
                      "hi": [float(5 * i + 40) for i in range(8)]})
    out[prefix + "range_unicast"] = _rows(e.publish("stock", [{"symbol": "t3", "risk": 30.0, "per": 0.5},
                                                              {"symbol": "t20", "risk": 25.0, "per": 1.5},
                                                              {"symbol": "t5", "_op": "delete"}]))
    reformulated = e.publish("stock", [{"symbol": "t3", "risk": 30.0, "per": 9.0},
                                       {"symbol": "t7", "risk": 55.0, "per": 0.25}], mode="reformulated")
    out[prefix + "range_reformulated"] = _rows(reformulated)
    out[prefix + "range_delivered"] = _rows(e.deliver(reformulated))
    out[prefix + "range_results"] = {f"m{i}": e.result(f"m{i}") for i in range(8)}


def _join_part(e, out: dict, prefix: str) -> None:
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b BIGINT)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    e.load("r", [{"rk": k, "a": float(k % 5), "b": k % 3} for k in range(9)])
    e.load("s", [{"sk": k, "b": float(k % 3), "c": float(k % 4)} for k in range(7)])
    e.sql("CREATE SUBSCRIPTION j1 AS SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 1 AND 3")
    e.sql("CREATE SUBSCRIPTION j2 AS SELECT r.a, s.c FROM r JOIN s ON r.b = s.b WHERE s.c >= 2")
    out[prefix + "join_r"] = _rows(e.publish("r", [{"rk": 1, "a": 2.0, "b": 2}, {"rk": 30, "a": 3.0, "b": 0}]))
    out[prefix + "join_s"] = _rows(e.publish("s", [{"sk": 2, "b": 1.0, "c": 3.0}, {"sk": 4, "_op": "delete"}]))
    out[prefix + "join_results"] = {s: e.result(s) for s in ("j1", "j2")}


def _stream_part(spark, e, out: dict, prefix: str, where: Path) -> None:
    """stream() of the range-min group over a bounded file source."""
    src = Path(where, "in")
    src.mkdir(parents=True)
    for n, batch in enumerate(([{"symbol": "t1", "risk": 12.0, "per": 0.1, "_seq": 100},
                                {"symbol": "t9", "risk": 35.0, "per": 3.0, "_seq": 101}],
                               [{"symbol": "t1", "_op": "delete", "_seq": 102},
                                {"symbol": "zz", "risk": 33.0, "per": float("nan"), "_seq": 103}])):
        path = Path(src, f"part-{n}.json")
        path.write_text("".join(json.dumps(row) + "\n" for row in batch))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))   # the file source takes files by mtime
    stream_in = (spark.readStream.schema("symbol STRING, risk DOUBLE, per DOUBLE, _op STRING, _seq BIGINT")
                 .option("maxFilesPerTrigger", 1).json(str(src)))
    query = (e.stream("stock", stream_in).writeStream.format("parquet")
             .option("path", str(Path(where, "out")))
             .option("checkpointLocation", str(Path(where, "ck")))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    out[prefix + "stream"] = _rows(spark.read.parquet(str(Path(where, "out"))))


def test_the_classic_session_is_not_connect(spark):
    assert not is_connect_session(spark)


def test_publish_and_stream_on_spark_connect_equal_the_classic_session(spark, tmp_path):
    missing = [m for m in CONNECT_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"pyspark's connect extra is not installed ({', '.join(missing)} missing): "
                    f"pip install 'pyspark[connect]' (a dependency of sparksub)")
    if catalyst_mode() is False:
        pytest.skip("runs once, in the pass with the extension (a Connect session never has it: the run is "
                    "the same in both passes, and a Connect server takes ~25 s to start)")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for var in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_API_MODE", "SPARK_LOCAL_REMOTE"):
        env.pop(var, None)
    remote = tmp_path / "connect"
    remote.mkdir()
    answer = tmp_path / "connect.json"
    proc = subprocess.Popen([sys.executable, "-c", RUN_ON_CONNECT, str(Path(__file__).parent), str(remote),
                             str(answer)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)
    classic_dir = tmp_path / "classic"
    classic_dir.mkdir()
    classic = json.loads(json.dumps(scenario(spark, str(classic_dir))))   # (as JSON, like the subprocess's)
    stdout, stderr = proc.communicate(timeout=1200)
    if stdout.startswith("SKIP"):
        pytest.skip(f"a Spark Connect client cannot start here: {stdout.strip()}")
    assert "DONE" in stdout, stderr[-4000:]
    connect = json.loads(answer.read_text())
    assert connect.pop("catalyst") is False      # the Catalyst extension is classic-only: skipped, not failing
    classic.pop("catalyst")
    assert classic["counted"] == {"rebuilds": True, "stream_micro_batches": True}
    for part in classic:
        assert connect[part] == classic[part], part
    assert classic["range_unicast"] and classic["filter"] and classic["join_r"] and classic["matches"]
    assert classic["stream"] and classic["split_topk"]
    # every split gives the whole groups' rows (the stream in two stages too); the join publishes' seqs differ by
    # the rows each engine published before them (the split engine has no FILTER or event table)
    for part in ("range_unicast", "range_reformulated", "range_delivered", "range_results", "join_results",
                 "stream"):
        assert classic["split_" + part] == classic[part], part
    for part in ("join_r", "join_s"):
        assert _without_seq(classic["split_" + part]) == _without_seq(classic[part]), part


def _without_seq(rows: list) -> list:
    return sorted(json.dumps({k: v for k, v in json.loads(r).items() if k != "seq"}, sort_keys=True) for r in rows)
