"""Engine.stream over join groups (spark_join_stream): stream-static SELECT_JOIN / BAND_JOIN. The stream
updates R; S is the engine's rows when the stream starts. Notifications must equal the brute-force net
change of every subscription's result, update by update (``_seq`` = the update's position), across a
restart from the checkpoint (no loss, no repeat), with malformed rows rejected once; under PySpark's
TwsTester the cached and rebuilt operators agree."""
from __future__ import annotations

import json
import math
import os
import random

import pandas as pd
import pytest

from sparksub import Engine
from sparksub.runtime import join_stream as sjs
from sparksub.operators.shared.schemas import EVENT_PREFIX

# a running stream's plan is where the extension only adds its pass-through node: run once (tests/conftest.py)
pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

QUERIES = {"j1": (1, 4, 2, 5), "j2": (-math.inf, math.inf, 3, math.inf), "j3": (0, 6, -math.inf, 2)}
BANDS = {"b1": (-1, 1), "b2": (2, 3)}


def workload(seed=7):
    rnd = random.Random(seed)
    r0 = {k: {"a": float(rnd.randint(0, 6)), "b": rnd.randint(0, 3)} for k in range(8)}
    s0 = {k: {"b": float(rnd.randint(0, 3)), "c": float(rnd.randint(0, 6))} for k in range(8)}
    files, live, seq = [], dict(r0), 0
    for f in range(3):
        lines = []
        for j in range(12):
            if j == 5 and f == 1:
                lines.append(({"rk": 99, "_op": "delete", "_seq": seq}, "unknown key"))
            elif j == 7 and f == 2:
                lines.append(({"rk": None, "a": 1.0, "b": 1, "_seq": seq}, "null key"))
            else:
                k = rnd.randint(0, 11)
                if k in live and rnd.random() < 0.25:
                    lines.append(({"rk": k, "_op": "delete", "_seq": seq}, None))
                    del live[k]
                else:
                    row = {"a": None if rnd.random() < 0.1 else float(rnd.randint(0, 6)), "b": rnd.randint(0, 3)}
                    lines.append(({"rk": k, **row, "_seq": seq}, None))
                    live[k] = row
            seq += 1
        files.append(lines)
    return r0, s0, files


R0, S0, FILES = workload()


def make_engine(spark):
    e = Engine(spark)
    e.join_partitions = 2
    e.sql("CREATE TABLE r (rk BIGINT PRIMARY KEY, a DOUBLE, b BIGINT)")
    e.sql("CREATE TABLE s (sk BIGINT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    e.load("r", [{"rk": k, **v} for k, v in R0.items()])
    e.load("s", [{"sk": k, **v} for k, v in S0.items()])
    e.subscribe_many("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :alo AND :ahi AND s.c BETWEEN :clo AND :chi",
                     {"id": list(QUERIES), **{n: [q[i] for q in QUERIES.values()]
                                              for i, n in enumerate(("alo", "ahi", "clo", "chi"))}})
    e.subscribe_many("SELECT * FROM r JOIN s ON s.b - r.b BETWEEN :lo AND :hi",
                     {"id": list(BANDS), "lo": [b[0] for b in BANDS.values()], "hi": [b[1] for b in BANDS.values()]})
    return e


def results(rows_r):
    """Each subscription's result tuples, each with its row of selected columns (``SELECT *``: rk, a, r.b,
    sk, s.b, c): a kept pair whose selected values change leaves and re-enters (DESIGN §1)."""
    def row(rk, r, sk, s):
        return (rk, r["a"], r["b"], sk, s["b"], s["c"])
    out = {}
    for q, (a_lo, a_hi, c_lo, c_hi) in QUERIES.items():
        out[q] = {(str(rk), str(sk), row(rk, r, sk, s)) for rk, r in rows_r.items() for sk, s in S0.items()
                  if r["a"] is not None and a_lo <= r["a"] <= a_hi and float(r["b"]) == s["b"] and c_lo <= s["c"] <= c_hi}
    for q, (lo, hi) in BANDS.items():
        out[q] = {(str(rk), str(sk), row(rk, r, sk, s)) for rk, r in rows_r.items() for sk, s in S0.items()
                  if lo <= s["b"] - r["b"] <= hi}
    return out


def expected():
    rows = {k: dict(v) for k, v in R0.items()}
    want, rejected = set(), set()
    for lines in FILES:
        for row, bad in lines:
            if bad:
                rejected.add((row["_seq"], bad))
                continue
            before = results(rows)
            if row.get("_op") == "delete":
                del rows[row["rk"]]
            else:
                rows[row["rk"]] = {"a": row["a"], "b": row["b"]}
            after = results(rows)
            for q in after:
                want |= {(q, "insert", row["_seq"], *p) for p in after[q] - before[q]}
                want |= {(q, "delete", row["_seq"], *p) for p in before[q] - after[q]}
    return want, rejected


def notes(rows):
    """The notifications with the selected columns they carry (a null cell read back as None; the processor's
    own rows, before the engine names them, carry them under EVENT_PREFIX)."""
    def v(r, c):
        x = r[c] if c in r else r[EVENT_PREFIX + c]
        return None if x is None or x != x else x
    return {(r["subscription_id"], r["op"], r["seq"], r["left_key"], r["right_key"],
             tuple(v(r, c) for c in ("rk", "a", "r.b", "sk", "s.b", "c"))) for r in rows if r["op"] != "rejected"}


def check_rejected(rows, want):
    got = [(r["seq"], r["reason"]) for r in rows if r["op"] == "rejected"]
    assert len(got) == len(want)
    for seq, what in want:
        assert any(s == seq and what in reason for s, reason in got), (seq, what, got)


def test_join_stream_equals_brute_force_across_a_restart(spark, tmp_path):
    e = make_engine(spark)
    inp, ck, outp = tmp_path / "in", tmp_path / "ck", tmp_path / "out"
    os.makedirs(inp)
    schema = "rk bigint, a double, b bigint, _op string, _seq bigint"

    def start():
        src = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(inp))
        df = e.stream("r", src)
        return df, (df.writeStream.format("parquet").option("path", str(outp))
                    .option("checkpointLocation", str(ck)).outputMode("append").start())

    def drop(f):
        tmp = tmp_path / f".f{f}"
        tmp.write_text("".join(json.dumps(row) + "\n" for row, _ in FILES[f]))
        os.rename(tmp, inp / f"part-{f}.json")

    df, q = start()
    try:
        for f in (0, 1):  # one file at a time: the file source orders files by modification time
            drop(f)
            q.processAllAvailable()
    finally:
        q.stop()
    df, q = start()  # a new run from the checkpoint: rebuilt from the state store, nothing replayed
    try:
        drop(2)
        q.processAllAvailable()
        plan = df._jdf.queryExecution().toString()
    finally:
        q.stop()
    got = [r.asDict() for r in spark.read.parquet(str(outp)).collect()]
    want, rejected = expected()
    assert notes(got) == want
    assert len([r for r in got if r["op"] != "rejected"]) == len(want)  # no repeats
    check_rejected(got, rejected)
    assert "band_join_and_select_join_groups_stream" in plan


def frames(file_no: int, rid: str, parts: int):
    recs = []
    for row, bad in FILES[file_no]:
        k = row.get("rk")
        if k is not None and sjs.key_partition(k, parts) != int(rid.rsplit("#", 1)[1]):
            continue
        if k is None and not rid.endswith("#0"):
            continue
        reason = "null key 'rk' in an update to 'r'" if bad == "null key" else None
        recs.append({"rk": k if k is not None else 0, "a": row.get("a"), "b": row.get("b"),
                     "j_key": k if k is not None else 0, "j_op": row.get("_op"), "j_ord": row["_seq"], "j_reason": reason})
    return pd.DataFrame.from_records(recs, columns=["rk", "a", "b", "j_key", "j_op", "j_ord", "j_reason"])


@pytest.mark.parametrize("schedule", ["one worker", "restarts"])
def test_join_stream_processor_under_tws_tester(schedule):
    from pyspark.sql.streaming.tws_tester import TwsTester

    import pickle
    from sparksub.operators.joins import group as join_groups
    from sparksub.operators.shared.row_validation import arrow_type
    from sparksub.operators.shared.schemas import publish_schema
    from sparksub.runtime.stream import _Deferred
    e = make_engine(None)
    state = e._tables["r"]
    groups = {}
    for entry in e._groups.values():
        # the base the engine's stream starts from: s's rows now, none of r's (the streamed side)
        snap = entry.family.stream_snapshot(entry.registry, entry.physical, entry.group_id, e._tables, join_groups.L)
        groups[entry.group_id] = sjs.JoinStreamGroup(entry.group_id, join_groups.L, 2, _Deferred(pickle.dumps(snap)),
                                                     _Deferred(pickle.dumps(dict(state.rows))))
    tdef = state.definition
    schema = e._output_schema(publish_schema("unicast"), "unicast", list(e._groups.values()), tdef)
    spec = sjs.JoinStreamSpec("uid", "sid", "r", tdef.column_names, tuple(arrow_type(t) for _, t in tdef.columns),
                              "rk", "bigint", "unicast", schema,
                              groups, min(groups), True)
    tester = TwsTester(sjs._processor_class()(spec))
    saved, worker = sjs._CACHE, {}
    got = []
    try:
        for f in range(len(FILES)):
            sjs._CACHE = {} if schedule == "restarts" and f % 2 else worker
            for gid in sorted(groups):
                for p in range(2):
                    rid = f"{gid}#{p}"
                    got.extend(tester.testInPandas(rid, frames(f, rid, 2)).to_dict("records"))
    finally:
        sjs._CACHE = saved
    want, rejected = expected()
    assert notes(got) == want
    check_rejected(got, rejected)
