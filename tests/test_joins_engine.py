"""SELECT_JOIN and BAND_JOIN through the engine and Spark (issue 5 items 1, 7, 8): subscriptions over two
tables, updates published to either, notifications = the net change of every subscription's result
recomputed from the rows (brute force) after every batch; subscriptions added and removed between batches
(logged to the partitions, no new base); the reformulated form delivered; EXPLAIN and stats."""
from __future__ import annotations

import math
import random

import pytest

from sparksub import BadUpdate, Engine, UnsupportedSubscription

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]   # the extension wraps publish only


def sj_result(rows_r, rows_s, q):
    a_lo, a_hi, c_lo, c_hi = q
    return {(str(rk), str(sk)) for rk, r in rows_r.items() for sk, s in rows_s.items()
            if r["b"] is not None and s["b"] is not None and float(r["b"]) == float(s["b"])
            and r["a"] is not None and a_lo <= r["a"] <= a_hi and s["c"] is not None and c_lo <= s["c"] <= c_hi}


def bj_result(rows_r, rows_s, q):
    """``a_lo`` None: no selection on r.a (a NULL a joins; issue 15 item 1), else SQL's ``a BETWEEN``."""
    lo, hi, a_lo, a_hi = q
    return {(str(rk), str(sk)) for rk, r in rows_r.items() for sk, s in rows_s.items()
            if r["b"] is not None and s["b"] is not None and lo <= s["b"] - r["b"] <= hi
            and (a_lo is None or (r["a"] is not None and a_lo <= r["a"] <= a_hi))}


#: ``SELECT *`` over r(rk, a, b) JOIN s(sk, b, c): the output columns (name, table, column) -- the shared
#: name ``b`` qualified by the table (DESIGN §1: a subscription's SELECT list is its output)
STAR = (("rk", "r", "rk"), ("a", "r", "a"), ("r.b", "r", "b"), ("sk", "s", "sk"), ("s.b", "s", "b"), ("c", "s", "c"))


def projected(spec, rows, pair) -> tuple:
    """The output row (as (name, value) pairs) of result tuple ``pair`` (key texts) under ``spec``."""
    keys = {"r": int(pair[0]), "s": int(pair[1])}
    return tuple((name, keys[t] if col == t + "k" else rows[t][keys[t]].get(col)) for name, t, col in spec)


def random_batch(rnd, rows, keycol, cols, n):
    batch = []
    pending = dict(rows)
    for _ in range(n):
        k = rnd.randint(0, 9)
        if k in pending and rnd.random() < 0.25:
            batch.append({keycol: k, "_op": "delete"})
            del pending[k]
        else:
            row = {keycol: k, **{c: (None if rnd.random() < 0.1 else gen(rnd)) for c, gen in cols.items()}}
            batch.append(row)
            pending[k] = row
    return batch


def publish_and_check(e, table, batch, rows, oracle, queries, specs=None):
    """Publish ``batch`` and compare the notifications with the oracle replayed update by update: each
    update (one seq) notifies the net change of every result it touches -- a result tuple's row is its
    subscription's selected columns (``specs``, default :data:`STAR`), so a kept pair whose selected values
    change leaves and re-enters; the notifications carry those columns, ``result()`` is those rows."""
    specs = specs or {}
    seq0 = e._next_seq
    out = e.publish(table, batch).collect()
    assert [r.reason for r in out if r.op == "error"] == []
    got = [(r.subscription_id, r.op, r.seq, r.left_key, r.right_key,
            tuple((name, r[name]) for name, _, _ in specs.get(r.subscription_id, STAR))) for r in out]
    assert len(set(got)) == len(got)  # one row per change

    def view(q, b):
        return {(*p, projected(specs.get(q, STAR), rows, p)) for p in oracle(rows["r"], rows["s"], b)}
    keycol = "rk" if table == "r" else "sk"
    want = set()
    for i, u in enumerate(batch):
        before = {q: view(q, b) for q, b in queries.items()}
        if u.get("_op") == "delete":
            del rows[table][u[keycol]]
        else:
            rows[table][u[keycol]] = {c: v for c, v in u.items() if c != keycol}
        for q, b in queries.items():
            after = view(q, b)
            want |= {(q, "insert", seq0 + i, *p) for p in after - before[q]}
            want |= {(q, "delete", seq0 + i, *p) for p in before[q] - after}
    assert set(got) == want
    for q, b in queries.items():
        res = e.result(q)
        assert sorted(tuple(d.items()) for d in res) == sorted(p[2] for p in view(q, b)), q
    return out


def test_select_join_through_spark_both_tables_and_query_changes(spark):
    rnd = random.Random(5)
    e = Engine(spark)
    e.join_partitions = 3
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b BIGINT)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    rows_r = {k: {"a": float(rnd.randint(0, 6)), "b": rnd.randint(0, 3)} for k in range(6)}
    rows_s = {k: {"b": float(rnd.randint(0, 3)), "c": float(rnd.randint(0, 6))} for k in range(6)}
    e.load("r", [{"rk": k, **v} for k, v in rows_r.items()])
    e.load("s", [{"sk": k, **v} for k, v in rows_s.items()])
    e.sql("CREATE SUBSCRIPTION j1 AS SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 1 AND 4 "
          "AND s.c BETWEEN 2 AND 5")
    e.sql("CREATE SUBSCRIPTION j2 AS SELECT r.a, s.c FROM s JOIN r ON s.b = r.b WHERE s.c >= 3")  # FROM order
    queries = {"j1": (1, 4, 2, 5), "j2": (-math.inf, math.inf, 3, math.inf)}
    specs = {"j2": (("a", "r", "a"), ("c", "s", "c"))}
    ids = [f"m{i}" for i in range(5)]
    lo = [float(rnd.randint(0, 4)) for _ in ids]
    clo = [float(rnd.randint(0, 4)) for _ in ids]
    e.subscribe_many("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :lo AND :hi AND s.c BETWEEN :clo AND :chi",
                     {"id": ids, "lo": lo, "hi": [x + 2 for x in lo], "clo": clo, "chi": [x + 3 for x in clo]})
    queries.update({i: (lo[n], lo[n] + 2, clo[n], clo[n] + 3) for n, i in enumerate(ids)})
    e.result("j1")  # builds the partitions' bases
    entry = next(g for g in e._groups.values() if g.group_id.startswith("select_join"))
    bases = {rid: r.base_id for rid, r in entry.shards.items()}
    gen_r = {"a": lambda r: float(r.randint(0, 6)), "b": lambda r: r.randint(0, 3)}
    gen_s = {"b": lambda r: float(r.randint(0, 3)), "c": lambda r: float(r.randint(0, 6))}
    for step in range(6):
        if step == 2:  # queries change while data flows: logged to the partitions (003 §4.2.3)
            e.unsubscribe("m0")
            del queries["m0"]
            e.subscribe("late", "SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 0 AND 6 AND s.c <= 4")
            queries["late"] = (0, 6, -math.inf, 4)
        table = "r" if step % 2 == 0 else "s"
        rows = {"r": rows_r, "s": rows_s}
        batch = random_batch(rnd, rows[table], table + "k", gen_r if table == "r" else gen_s, 8)
        publish_and_check(e, table, batch, rows, sj_result, queries, specs)
    assert {rid: r.base_id for rid, r in entry.shards.items()} == bases  # no rebuild for the query changes
    text = e.explain("j1")
    for needle in ("Class: SELECT_JOIN", "stabbing number", "router decisions", "router recent choices",
                   "hotspots", "select_join_group"):
        assert needle in text, needle
    st = e.stats()[entry.group_id]
    assert st["partitions"] == 3 and sum(st["decisions"].values()) > 0


def test_select_join_reformulated_messages_deliver_the_unicast_rows(spark):
    rnd = random.Random(9)
    twins = [Engine(spark), Engine(spark)]
    for e in twins:
        e.join_partitions = 2
        e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b STRING)")
        e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b STRING, c DOUBLE)")
        e.subscribe_many("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :lo AND :hi AND s.c <= :c",
                         {"id": ["x", "y", "z"], "lo": [0.0, 2.0, 1.0], "hi": [3.0, 5.0, 1.0], "c": [4.0, 6.0, 2.0]})
    gen_r = {"a": lambda r: float(r.randint(0, 5)), "b": lambda r: r.choice("pq")}
    gen_s = {"b": lambda r: r.choice("pq"), "c": lambda r: float(r.randint(0, 6))}
    rows = {"r": {}, "s": {}}
    for step in range(4):
        table = "r" if step % 2 == 0 else "s"
        batch = random_batch(rnd, rows[table], table + "k", gen_r if table == "r" else gen_s, 6)
        uni = twins[0].publish(table, batch).collect()
        msgs = twins[1].publish(table, batch, mode="reformulated")
        assert {r.op for r in msgs.collect()} <= {"insert", "delete"}
        names = [name for name, _, _ in STAR]  # the selected columns travel in the messages (DESIGN §1)
        got = sorted((r.subscription_id, r.op, r.seq, r.left_key, r.right_key, *(r[n] for n in names))
                     for r in twins[1].deliver(msgs).collect())
        assert got == sorted((r.subscription_id, r.op, r.seq, r.left_key, r.right_key, *(r[n] for n in names))
                             for r in uni)
        for u in batch:
            if u.get("_op") == "delete":
                del rows[table][u[table + "k"]]
            else:
                rows[table][u[table + "k"]] = u


def test_band_join_through_spark_with_selection_and_partitions(spark):
    rnd = random.Random(11)
    e = Engine(spark)
    e.join_partitions = 3
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b DOUBLE)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE)")
    rows_r = {k: {"a": float(rnd.randint(0, 5)), "b": float(rnd.randint(0, 20))} for k in range(8)}
    rows_s = {k: {"b": float(rnd.randint(0, 20))} for k in range(8)}
    e.load("r", [{"rk": k, **v} for k, v in rows_r.items()])
    e.load("s", [{"sk": k, **v} for k, v in rows_s.items()])
    e.sql("CREATE SUBSCRIPTION near AS SELECT * FROM r JOIN s ON s.b - r.b BETWEEN -1 AND 1")
    e.sql("CREATE SUBSCRIPTION ahead AS SELECT * FROM r JOIN s ON s.b BETWEEN r.b + 2 AND r.b + 4 WHERE r.a <= 3")
    queries = {"near": (-1, 1, None, None), "ahead": (2, 4, -math.inf, 3)}
    star = STAR[:-1]  # s has no c
    gen_r = {"a": lambda r: float(r.randint(0, 5)), "b": lambda r: float(r.randint(0, 20))}
    gen_s = {"b": lambda r: float(r.randint(0, 20))}
    for step in range(6):
        if step == 3:  # a narrower band fits the partitions' reach: logged; a wider one rebuilds
            e.subscribe("same", "SELECT * FROM r JOIN s ON s.b - r.b BETWEEN 0 AND 0")
            queries["same"] = (0, 0, None, None)
            e.subscribe("wide", "SELECT * FROM r JOIN s ON s.b - r.b BETWEEN -6 AND 9")
            queries["wide"] = (-6, 9, None, None)
        table = "r" if step % 2 == 0 else "s"
        rows = {"r": rows_r, "s": rows_s}
        batch = random_batch(rnd, rows[table], table + "k", gen_r if table == "r" else gen_s, 8)
        publish_and_check(e, table, batch, rows, bj_result, queries, dict.fromkeys(queries, star))
    text = e.explain("near")
    assert "BJ-SSI" in text and "stabbing number" in text and "band_join_group" in text


def test_join_errors_are_clear_and_lose_nothing(spark):
    e = Engine(spark)
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b DOUBLE)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    e.subscribe("j", "SELECT * FROM r JOIN s ON r.b = s.b WHERE s.c BETWEEN 0 AND 10")
    with pytest.raises(UnsupportedSubscription, match="two different tables"):
        e.subscribe("self", "SELECT * FROM r JOIN r AS r2 ON r.b = r2.b")
    with pytest.raises(Exception, match="already exists"):
        e.subscribe("j", "SELECT * FROM r JOIN s ON r.b = s.b WHERE s.c BETWEEN 0 AND 3")
    [bad] = e.publish("s", [{"sk": 1, "_op": "delete"}]).collect()   # a malformed row: set aside (DESIGN §7)
    assert (bad.op, bad.reason) == ("rejected", "delete of unknown key 1 from 's'")
    e.publish("s", [{"sk": 1, "b": 1.0, "c": 2.0}])
    out = e.publish("r", [{"rk": 7, "a": 0.0, "b": 1.0}]).collect()
    assert [(r.subscription_id, r.op, r.left_key, r.right_key) for r in out] == [("j", "insert", "7", "1")]
    with pytest.raises(BadUpdate, match=r"unknown column\(s\) \['timestamp', 'value'\].*'r'"):
        e.stream("r", spark.readStream.format("rate").load())
    assert e.subscription_ids() == ["j"] and e.result("j") == [{"rk": 7, "a": 0.0, "r.b": 1.0, "sk": 1,
                                                                "s.b": 1.0, "c": 2.0}]


def test_join_group_emptied_and_refilled_sees_the_rows_published_meanwhile(spark):
    """A group without subscriptions is skipped by publish; its partitions must not be reused stale."""
    e = Engine(spark)
    e.join_partitions = 2
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b DOUBLE)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    e.subscribe("j", "SELECT * FROM r JOIN s ON r.b = s.b")
    e.publish("s", [{"sk": 1, "b": 1.0, "c": 0.0}, {"sk": 2, "b": 2.0, "c": 0.0}]).collect()
    e.unsubscribe("j")
    e.publish("r", [{"rk": 1, "a": 0.0, "b": 1.0}]).collect()  # no subscriptions: nothing runs
    e.publish("s", [{"sk": 2, "_op": "delete"}]).collect()
    e.subscribe("k", "SELECT r.rk, s.sk AS s_key FROM r JOIN s ON r.b = s.b")
    assert e.result("k") == [{"rk": 1, "s_key": 1}]
    out = e.publish("r", [{"rk": 3, "a": 0.0, "b": 2.0}, {"rk": 4, "a": 0.0, "b": 1.0}]).collect()
    assert [(r.subscription_id, r.op, r.left_key, r.right_key) for r in out] == [("k", "insert", "4", "1")]


def test_band_join_in_a_reformulated_publish_answers_with_its_unicast_rows(spark):
    """BAND_JOIN has no reformulated form: a reformulated publish gives its unicast rows (issue 15 item 6),
    deliver passes them through, and the group stays correct."""
    e = Engine(spark)
    e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b DOUBLE)")
    e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE, c DOUBLE)")
    e.subscribe("near", "SELECT r.rk, s.sk FROM r JOIN s ON s.b - r.b BETWEEN 0 AND 1")
    e.subscribe("eq", "SELECT * FROM r JOIN s ON r.b = s.b")
    e.publish("s", [{"sk": 1, "b": 1.0, "c": 0.0}]).collect()
    msgs = e.publish("r", [{"rk": 1, "a": 0.0, "b": 0.5}], mode="reformulated")
    rows = [(m.subscription_id, m.op, m.left_key, m.right_key, m.rk, m.sk) for m in msgs.collect()
            if m.group_id.startswith("band_join")]
    assert rows == [("near", "insert", "1", "1", 1, 1)]
    assert [(m.subscription_id, m.op, m.rk, m.sk) for m in e.deliver(msgs).collect()] == [("near", "insert", 1, 1)]
    assert e.result("near") == [{"rk": 1, "sk": 1}]
    out = e.publish("s", [{"sk": 2, "b": 1.5, "c": 0.0}]).collect()
    assert sorted((r.subscription_id, r.left_key, r.right_key) for r in out) == [("near", "1", "2")]
