"""The range-min slice end to end on Spark: publish runs the operator inside Spark tasks and must
equal both the pure operator and a brute-force recomputation of every subscription's MIN."""
from __future__ import annotations

import random

import pytest

from sparksub import AnalysisError, BadUpdate, Engine
from sparksub.operators.range_min.group import RangeMinGroup

pytestmark = pytest.mark.spark

FIG1 = [("t2", 20, 3), ("t3", 30, 8), ("t4", 40, 12), ("t5", 50, 5), ("t6", 70, 6), ("t8", 100, 2)]


def fig1_engine(spark) -> Engine:
    e = Engine(spark)
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", [{"symbol": s, "risk": float(x), "per": float(y)} for s, x, y in FIG1])
    return e


def messages(df):
    return sorted((r.new_value, r.inner_l, r.inner_r, r.outer_l, r.outer_r) for r in df.collect())


def test_paper_figure1_worked_examples(spark):
    e = fig1_engine(spark)
    e.sql("CREATE SUBSCRIPTION s AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 0 AND 1000")
    good = e.publish("stock", [{"symbol": "t4", "risk": 40.0, "per": 4.0}], mode="reformulated")
    assert messages(good) == [(4.0, 40.0, 40.0, 20.0, 100.0)]
    e2 = fig1_engine(spark)
    e2.sql("CREATE SUBSCRIPTION s AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 0 AND 1000")
    bad = e2.publish("stock", [{"symbol": "t5", "risk": 50.0, "per": 9.0}], mode="reformulated")
    assert messages(bad) == [(6.0, 50.0, 70.0, 20.0, 100.0), (8.0, 30.0, 50.0, 20.0, 70.0),
                             (9.0, 50.0, 50.0, 30.0, 70.0)]


def oracle(rows: dict, lo: float, hi: float, maximum: bool):
    ys = [y for (x, y) in rows.values() if x is not None and y is not None and lo <= x <= hi]
    return (max(ys) if maximum else min(ys)) if ys else None


def random_workload(seed: int, n_rows=60, n_subs=80, n_updates=150):
    rnd = random.Random(seed)
    rows = {f"k{i}": (float(rnd.randint(0, 30)), float(rnd.randint(0, 20))) for i in range(n_rows)}
    subs = {}
    for i in range(n_subs):
        a, b = sorted((rnd.randint(-2, 32), rnd.randint(-2, 32)))
        subs[f"s{i}"] = (a, b)
    updates, live, nxt = [], set(rows), n_rows
    for _ in range(n_updates):
        r = rnd.random()
        if r < 0.15 and live:
            k = rnd.choice(sorted(live))
            updates.append({"symbol": k, "risk": None, "per": None, "_op": "delete"})
            live.discard(k)
        elif r < 0.3:
            k = f"k{nxt}"
            nxt += 1
            updates.append({"symbol": k, "risk": float(rnd.randint(0, 30)), "per": float(rnd.randint(0, 20)),
                            "_op": "upsert"})
            live.add(k)
        elif live:
            k = rnd.choice(sorted(live))
            x = float(rnd.randint(0, 30)) if r < 0.45 else None  # None: keep x (filled below)
            updates.append({"symbol": k, "risk": x, "per": float(rnd.randint(0, 20)), "_op": "upsert"})
    return rows, subs, updates


@pytest.mark.parametrize("maximum", [False, True])
def test_publish_equals_pure_operator_and_oracle(spark, maximum):
    rows, subs, updates = random_workload(7 + maximum)
    agg = "MAX" if maximum else "MIN"
    e = Engine(spark)
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    e.load("stock", [{"symbol": k, "risk": x, "per": y} for k, (x, y) in rows.items()])
    e.subscribe_many(f"SELECT {agg}(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                     {"id": list(subs), "lo": [a for a, _ in subs.values()], "hi": [b for _, b in subs.values()]})
    state = dict(rows)
    # fill "keep x" updates with the current x, so every update carries the full row
    for u in updates:
        if u["_op"] == "upsert" and u["risk"] is None:
            u["risk"] = state[u["symbol"]][0]
        if u["_op"] == "delete":
            state.pop(u["symbol"])
        else:
            state[u["symbol"]] = (u["risk"], u["per"])
    # the pure operator, from the same snapshot
    pure = RangeMinGroup("g", "stock", "risk", "per", maximum)
    pure.register(list(subs), [a for a, _ in subs.values()], [b for _, b in subs.values()])
    pure.load(list(rows), [x for x, _ in rows.values()], [y for _, y in rows.values()])

    state = dict(rows)
    for start in range(0, len(updates), 50):
        chunk = updates[start:start + 50]
        mode = "unicast" if start % 100 == 0 else "reformulated"
        out = e.publish("stock", chunk, mode=mode)
        got = out.collect() if mode == "unicast" else e.deliver(out).collect()
        # brute force: replay the chunk row by row and diff every subscription's result
        expected = {}
        for i, u in enumerate(chunk):
            before = {s: oracle(state, a, b, maximum) for s, (a, b) in subs.items()}
            if u["_op"] == "delete":
                state.pop(u["symbol"])
            else:
                state[u["symbol"]] = (u["risk"], u["per"])
            after = {s: oracle(state, a, b, maximum) for s, (a, b) in subs.items()}
            changed = {s: v for s, v in after.items() if v != before[s]}
            if changed:
                expected[i] = changed
        got_by_pos = {}
        for r in got:
            got_by_pos.setdefault(r.seq, {})[r.subscription_id] = r.value
        offs = start  # one engine numbers the rows of its publishes consecutively from 0
        assert {p + offs: d for p, d in expected.items()} == got_by_pos
        # and the pure operator agrees row for row in unicast
        batch = pure_batch(chunk, offs)
        pure_rows = pure.apply(batch, "unicast").to_pylist()
        assert sorted((r["seq"], r["subscription_id"], r["value"]) for r in pure_rows) == \
            sorted((r.seq, r.subscription_id, r.value) for r in got)
        for s, (a, b) in subs.items():
            assert e.result(s) == oracle(state, a, b, maximum)


def pure_batch(chunk, offs):
    import pyarrow as pa
    return pa.table({
        "key": [u["symbol"] for u in chunk],
        "x": pa.array([u["risk"] if u["_op"] == "upsert" else None for u in chunk], pa.float64()),
        "y": pa.array([u["per"] if u["_op"] == "upsert" else None for u in chunk], pa.float64()),
        "op": pa.array([1 if u["_op"] == "delete" else 0 for u in chunk], pa.int8()),
        "seq": pa.array(range(offs, offs + len(chunk)), pa.int64()),
    })


def test_bad_updates_change_nothing(spark):
    e = fig1_engine(spark)
    e.sql("CREATE SUBSCRIPTION s AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 25 AND 60")
    assert e.result("s") == 5.0
    batch_errors = [   # the batch itself is malformed: an error, nothing applied
        ([{"risk": 1.0, "per": 1.0}], "key column 'symbol'"),
        ([{"symbol": "t3", "risk": 30.0, "per": 1.0, "bogus": 1}], "unknown column"),
        ([{"symbol": "t3", "risk": 30.0}], "lacks column 'per'"),
    ]
    for rows, needle in batch_errors:
        with pytest.raises(BadUpdate, match=needle):
            e.publish("stock", rows)
    with pytest.raises(AnalysisError, match="unknown table"):
        e.publish("stocks", [{"symbol": "t3"}])
    row_errors = [     # a row is malformed: set aside as a 'rejected' row with its reason (DESIGN §7)
        ([{"symbol": None, "risk": 1.0, "per": 1.0}], "null key 'symbol' in an update to 'stock'"),
        ([{"symbol": "zz", "_op": "delete"}], "delete of unknown key 'zz' from 'stock'"),
        ([{"symbol": "t3", "risk": 30.0, "per": float("nan")}], "NaN in numeric column 'per' of 'stock'"),
        ([{"symbol": "t3", "risk": 30.0, "per": float("-inf")}], "-inf in numeric column 'per' of 'stock'"),
        ([{"symbol": "t3", "risk": float("inf"), "per": 1.0}], "inf in numeric column 'risk' of 'stock'"),
        ([{"symbol": "t3", "risk": 30.0, "per": "cheap"}], "column 'per' of 'stock' is double, cannot read cheap"),
        ([{"symbol": "t3", "risk": 30.0, "per": 1.0, "_op": "merge"}], "_op must be 'upsert' or 'delete', got 'merge'"),
    ]
    for rows, needle in row_errors:
        seq = e._next_seq
        [r] = e.publish("stock", rows).collect()
        assert (r.op, r.seq, r.subscription_id, r.group_id) == ("rejected", seq, None, None)
        assert r.reason.startswith(needle), (r.reason, needle)
    assert e.result("s") == 5.0
    with pytest.raises(BadUpdate, match=r"load into 'stock': inf in numeric column 'per'.*row 1"):   # all or nothing
        e.load("stock", [{"symbol": "t9", "risk": 30.0, "per": 0.0}, {"symbol": "t8", "risk": 30.0, "per": float("inf")}])
    assert e.result("s") == 5.0
    # a delete then a re-insert of the same key in one batch is fine (each row is one update, notified
    # in order), and a null leaves every range
    out = e.publish("stock", [{"symbol": "t5", "_op": "delete"},
                              {"symbol": "t5", "risk": 50.0, "per": 1.0},
                              {"symbol": "t3", "risk": 30.0, "per": None}]).collect()
    assert [(r.subscription_id, r.value) for r in sorted(out, key=lambda r: r.seq)] == [("s", 8.0), ("s", 1.0)]
    assert e.result("s") == 1.0
    e.publish("stock", [{"symbol": "t5", "_op": "delete"}, {"symbol": "t4", "_op": "delete"}])
    assert e.result("s") is None
    # the rest of a batch goes on: a delete of a key deleted earlier in the batch is rejected, not the batch
    seq = e._next_seq
    out = e.publish("stock", [{"symbol": "t5", "risk": 50.0, "per": 2.0}, {"symbol": "t5", "_op": "delete"},
                              {"symbol": "t5", "_op": "delete"}]).collect()
    assert sorted((r.seq - seq, r.op, r.value, r.reason) for r in out) == [
        (0, "update", 2.0, None), (1, "update", None, None),
        (2, "rejected", None, "delete of unknown key 't5' from 'stock'")]
    assert e.result("s") is None


def test_explain_shows_plan_trace_operator_and_spark_plan(spark):
    e = fig1_engine(spark)
    e.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE 20 < risk AND risk <= 60")
    text = e.sql("EXPLAIN SUBSCRIPTION alice")
    for needle in ("Class: RANGE_MIN", "Template: RangeMinGroupScan[MIN(per) over risk IN [?, ?] of stock]",
                   "close_strict_bounds", "A2B-tree", "NEW_MIN, INNER_L", "OUTER_L < x1 <= INNER_L",
                   "MapInArrow range_min_group_unicast", "Range (0, 1, step=1, splits=1)"):
        assert needle in text, needle
    assert "Class: RANGE_MAX" in e.explain("SELECT MAX(per) FROM stock WHERE risk >= 3")


def test_a_failing_group_does_not_stop_the_others(spark):
    import pyarrow as pa

    from sparksub.runtime import groups as spark_groups
    from sparksub.runtime import replicas as spark_replicas

    e = fig1_engine(spark)
    e.sql("CREATE SUBSCRIPTION lo AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 25 AND 60")
    e.sql("CREATE SUBSCRIPTION hi AS SELECT MAX(per) FROM stock WHERE risk BETWEEN 25 AND 60")
    # Corrupt the MAX group's shipped state: its task fails, the MIN group's must not.
    state = e._tables["stock"]
    entries = {en.physical.klass: en for en in e._groups.values()}
    good = e._replica(state, entries["RANGE_MIN"])
    broken = spark_replicas.new_base(e.directory, e.uid, entries["RANGE_MAX"].group_id, b"not a snapshot")
    spark_groups._CACHE.clear()
    batch = pa.table({"key": ["t3"], "x": [30.0], "y": [1.0], "op": pa.array([0], pa.int8()),
                      "seq": pa.array([0], pa.int64())})
    combined = pa.concat_tables([batch.append_column("group_id", pa.array([g.replica_id], pa.string()))
                                 for g in (good, broken)])
    from sparksub.operators.shared.schemas import publish_schema
    df, failed = spark_groups.run_groups(spark, {good.replica_id: good, broken.replica_id: broken}, combined,
                                         "unicast", publish_schema("unicast"))
    rows = sorted(df.collect(), key=lambda r: r.op)
    assert failed == {broken.replica_id}
    assert [(r.op, r.group_id) for r in rows] == [("error", broken.replica_id), ("update", good.replica_id)]
    assert "UnpicklingError" in rows[0].reason and rows[1].value == 1.0 and rows[1].reason is None
    # Through the engine: a failed group is rebuilt from the rows, so later results stay exact.
    entries["RANGE_MAX"].replica, entries["RANGE_MAX"].base_stale = broken, False
    out = e.publish("stock", [{"symbol": "t3", "risk": 30.0, "per": 1.0}]).collect()
    assert {(r.subscription_id, r.op) for r in out} == {("lo", "update"), (None, "error")}
    assert e.result("hi") == 12.0 and e.result("lo") == 1.0
    out = e.publish("stock", [{"symbol": "t4", "risk": 40.0, "per": 20.0}]).collect()
    assert [(r.subscription_id, r.value) for r in out] == [("hi", 20.0)]


def engine_with_a_broken_filter_shard(spark):
    """``(engine, the FILTER group's entry, the broken shard's id)``: a FILTER group of two subscriptions in two
    shards, built by a publish, then one shard's shipped state corrupted."""
    from sparksub.runtime import replicas as spark_replicas

    e = Engine(spark)
    e.filter_shard_size = 1   # two subscriptions: two shards (parallelism 2)
    e.sql("CREATE TABLE trades (name STRING, price DOUBLE)")
    e.sql("CREATE SUBSCRIPTION cheap AS SELECT * FROM trades WHERE price < 50")
    e.sql("CREATE SUBSCRIPTION any_ibm AS SELECT * FROM trades WHERE name = 'IBM'")
    e.publish("trades", [{"name": "SAP", "price": 1.0}]).collect()   # builds the shards
    entry = next(iter(e._groups.values()))
    assert len(entry.shards) == 2
    broken_id = sorted(entry.shards)[1]
    entry.shards[broken_id] = spark_replicas.new_base(e.directory, e.uid, broken_id, b"not a snapshot")
    spark_replicas._CACHE.clear()
    return e, entry, broken_id


def test_a_failing_shard_s_error_row_names_its_group(spark):
    """A FILTER group in shards, one shard's shipped state corrupted: the error row's group_id is the group's
    (what a user filters on), its reason names the shard; the other shard's matches still come out, and the
    group is rebuilt from its subscriptions for the next publish (DESIGN §7)."""
    e, entry, broken_id = engine_with_a_broken_filter_shard(spark)
    out = e.publish("trades", [{"name": "IBM", "price": 10.0}]).collect()
    assert_one_error_row_names_the_group(out, entry.group_id, broken_id)
    out = e.publish("trades", [{"name": "IBM", "price": 20.0}]).collect()
    assert sorted(r.subscription_id for r in out) == ["any_ibm", "cheap"]


def assert_one_error_row_names_the_group(out, group_id: str, broken_id: str) -> None:
    """The output's one error row names the group and, in its reason, the broken shard; the healthy shard's
    subscription matched."""
    errors = [r for r in out if r.op == "error"]
    assert [r.group_id for r in errors] == [group_id] and group_id != broken_id
    assert f"in {broken_id}: " in errors[0].reason and "UnpicklingError" in errors[0].reason
    matched = {r.subscription_id for r in out if r.op != "error"}
    assert len(matched) == 1 and matched < {"cheap", "any_ibm"}   # the healthy shard's subscription


def test_plain_spark_sql_sees_current_rows(spark):
    e = fig1_engine(spark)
    e.publish("stock", [{"symbol": "t4", "_op": "delete"}, {"symbol": "zz", "risk": 1.0, "per": 2.0}])
    rows = e.sql("SELECT symbol, per FROM stock WHERE risk < 35 ORDER BY symbol").collect()
    assert [(r.symbol, r.per) for r in rows] == [("t2", 3.0), ("t3", 8.0), ("zz", 2.0)]
    assert e.table("stock").count() == len(FIG1)
