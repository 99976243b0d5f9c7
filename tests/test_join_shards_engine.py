"""SELECT_JOIN groups with their subscriptions in shards (issue 16 item 4; control/join_shards.py): row partitions
that hold no subscription (stage 1: the messages of 000 §4), subscription shards by a hash of the id (stage 2,
unicast).  Checked against the same engine run whole (every partition holding every subscription) and against a
brute-force nested loop over the tables, update by update: unicast rows and reformulated messages equal row for
row, ``result()`` equal to the oracle, across NULL join and selection values, rejected rows (±inf, deletes of
unknown keys), duplicate keys in one batch, upserts moving rows in and out of ranges, and subscriptions added and
dropped between publishes; the replicas' bases hold what they should (no subscription in a row partition, each
shard its own ids only, no new row-partition base for a subscription change); a group past
``driver_operator_limit`` is read where its row partitions live, and a worker keeps one row partition and one shard
per group."""
from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub import Engine
from sparksub.operators.joins.shards import subscription_shard

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

STAR = (("rk", "r", "rk"), ("a", "r", "a"), ("r.b", "r", "b"), ("tag", "r", "tag"), ("sk", "s", "sk"),
        ("s.b", "s", "b"), ("c", "s", "c"))
PROJ = (("a", "r", "a"), ("c", "s", "c"))
TEMPLATE = ("SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :lo AND :hi AND s.c BETWEEN :clo AND :chi")


def oracle_pairs(rows, q):
    """The result of rectangle ``q`` = (a_lo, a_hi, c_lo, c_hi) over the rows: a nested loop (SQL: a NULL join
    or selection value joins nothing; ``a_lo`` None: no selection on r.a, so a NULL r.a joins)."""
    a_lo, a_hi, c_lo, c_hi = q
    return {(str(rk), str(sk)) for rk, r in rows["r"].items() for sk, s in rows["s"].items()
            if r["b"] is not None and s["b"] is not None and float(r["b"]) == float(s["b"])
            and (a_lo is None or (r["a"] is not None and a_lo <= r["a"] <= a_hi))
            and s["c"] is not None and c_lo <= s["c"] <= c_hi}


def projected(spec, rows, pair):
    keys = {"r": int(pair[0]), "s": int(pair[1])}
    return tuple((name, keys[t] if col == t + "k" else rows[t][keys[t]].get(col)) for name, t, col in spec)


def engines(spark, mode_shards):
    out = []
    for shards in mode_shards:
        e = Engine(spark)
        e.join_partitions = 2
        e.join_subscription_shards = shards
        e.sql("CREATE TABLE r (rk INT PRIMARY KEY, a DOUBLE, b BIGINT, tag STRING)")
        e.sql("CREATE TABLE s (sk INT PRIMARY KEY, b DOUBLE, c DOUBLE)")
        out.append(e)
    return out


def valid(u):
    """Whether the engine applies update ``u`` (row validation: no ±inf in a numeric column)."""
    return not any(isinstance(v, float) and math.isinf(v) for v in u.values())


def apply_oracle(rows, table, batch, queries, specs, seq0):
    """The unicast rows the batch must produce, replayed update by update (an update's net change per
    subscription); ``rows`` updated."""
    key = table + "k"

    def view(q):
        return {(*p, projected(specs.get(q, STAR), rows, p)) for p in oracle_pairs(rows, queries[q])}
    want, seq = Counter(), seq0
    for u in batch:
        this = seq
        seq += 1
        if not valid(u) or (u.get("_op") == "delete" and u[key] not in rows[table]):
            continue     # rejected (its row comes out with op = 'rejected')
        before = {q: view(q) for q in queries}
        if u.get("_op") == "delete":
            del rows[table][u[key]]
        else:
            rows[table][u[key]] = {c: v for c, v in u.items() if c != key}
        for q in queries:
            after = view(q)
            want.update((q, "insert", this, *p) for p in after - before[q])
            want.update((q, "delete", this, *p) for p in before[q] - after)
    return want


def unicast_rows(out, specs):
    return Counter((r.subscription_id, r.op, r.seq, r.left_key, r.right_key,
                    tuple((name, r[name]) for name, _, _ in specs.get(r.subscription_id, STAR)))
                   for r in out if r.op in ("insert", "delete"))


def full_rows(out):
    return Counter(tuple(sorted(r.asDict().items(), key=lambda kv: kv[0])) for r in out)


def gen_batch(rnd, table, n, rows):
    key = table + "k"
    out = []
    for _ in range(n):
        k = rnd.randint(0, 9)
        roll = rnd.random()
        if roll < 0.2:
            out.append({key: k if k in rows[table] or rnd.random() < 0.5 else 50 + k, "_op": "delete"})
            continue
        if table == "r":
            row = {key: k, "a": rnd.choice([None, float(rnd.randint(0, 6)), math.inf]) if roll < 0.3
                   else float(rnd.randint(0, 6)), "b": None if rnd.random() < 0.1 else rnd.randint(0, 3),
                   "tag": rnd.choice(["x", "y", None])}
        else:
            row = {key: k, "b": None if rnd.random() < 0.1 else float(rnd.randint(0, 3)),
                   "c": rnd.choice([None, -math.inf]) if roll < 0.27 else float(rnd.randint(0, 6))}
        out.append(row)
    return out


def subscribe_all(engs, rnd, queries, specs, names):
    lo = [float(rnd.randint(0, 4)) for _ in names]
    clo = [rnd.choice([-math.inf, float(rnd.randint(0, 4))]) for _ in names]
    chi = [math.inf if rnd.random() < 0.3 or c == -math.inf else c + 3 for c in clo]
    for e in engs:
        e.subscribe_many(TEMPLATE, {"id": names, "lo": lo, "hi": [x + 2 for x in lo], "clo": clo, "chi": chi})
    queries.update({i: (lo[n], lo[n] + 2, clo[n], chi[n]) for n, i in enumerate(names)})


def group_of(e):
    return next(g for g in e._groups.values() if g.group_id.startswith("select_join"))


def check_bases(e, gid):
    js = e._join_shard_states[gid]
    assert js.partitions and len(js.partitions) == 2
    for r in js.partitions.values():
        snap = r.read_base()
        assert len(snap.sub_ids) == 0 and not snap.sub_outputs      # stage 1 holds no subscription
    for j, r in enumerate(js.shards):
        base = r.read_base()
        assert base.shard == j
        assert (subscription_shard(base.ids.tolist(), len(js.shards)) == j).all()
    return {rid: r.base_id for rid, r in js.partitions.items()}


def test_sharded_select_join_equals_whole_and_the_oracle(spark):
    rnd = random.Random(11)
    sharded, _ = engs = engines(spark, [3, 0])
    rows = {"r": {k: {"a": float(rnd.randint(0, 6)), "b": rnd.randint(0, 3), "tag": "x"} for k in range(6)},
            "s": {k: {"b": float(rnd.randint(0, 3)), "c": float(rnd.randint(0, 6))} for k in range(6)}}
    rows["r"][6] = {"a": None, "b": 1, "tag": None}
    rows["s"][6] = {"b": None, "c": 2.0}
    for e in engs:
        e.load("r", [{"rk": k, **v} for k, v in rows["r"].items()])
        e.load("s", [{"sk": k, **v} for k, v in rows["s"].items()])
        e.sql("CREATE SUBSCRIPTION j1 AS SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 1 AND 4 "
              "AND s.c BETWEEN 2 AND 5")
        e.sql("CREATE SUBSCRIPTION j2 AS SELECT r.a, s.c FROM s JOIN r ON s.b = r.b WHERE s.c >= 3")
    queries = {"j1": (1, 4, 2, 5), "j2": (None, None, 3, math.inf)}   # j2: no selection on r.a
    specs = {"j2": PROJ}
    subscribe_all(engs, rnd, queries, specs, [f"m{i}" for i in range(12)])
    gids = [g.group_id for g in sharded._groups.values() if g.group_id.startswith("select_join")]
    assert len(gids) == 2    # j2 has no selection on r.a: a group of its own
    part_bases, rejected = None, 0
    for step in range(6):
        if step == 3:   # subscriptions change between publishes: only the shards' bases
            for e in engs:
                e.unsubscribe("m0")
                e.subscribe("late", "SELECT r.a, s.c FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 0 AND 6 "
                                    "AND s.c <= 4")
            del queries["m0"]
            queries["late"] = (0, 6, -math.inf, 4)
            specs["late"] = PROJ
        if step == 5:
            subscribe_all(engs, rnd, queries, specs, [f"n{i}" for i in range(4)])
            for e in engs:
                e.sql("DROP SUBSCRIPTION j1")
            del queries["j1"]
        table = "r" if step % 2 == 0 else "s"
        batch = gen_batch(rnd, table, 10, rows)
        if step == 1:   # the same key twice in one batch, moving in and out of every range
            batch += [{"sk": 2, "b": 1.0, "c": 3.0}, {"sk": 2, "b": 1.0, "c": 9.0}, {"sk": 2, "b": 2.0, "c": 3.0}]
        seq0 = sharded._next_seq
        got = [e.publish(table, batch).collect() for e in engs]
        assert [r.reason for r in got[0] if r.op == "error"] == []
        want = apply_oracle(rows, table, batch, queries, specs, seq0)
        assert unicast_rows(got[0], specs) == want
        assert full_rows(got[0]) == full_rows(got[1])       # row for row, every column (rejected rows too)
        rejected += sum(r.op == "rejected" for r in got[0])
        bases = {gid: check_bases(sharded, gid) for gid in gids}
        if part_bases is not None and step in (3, 5):
            assert bases == part_bases      # a subscription change gave no row partition a new base
        part_bases = bases
        for q, rect in queries.items():
            want_res = Counter(projected(specs.get(q, STAR), rows, pp) for pp in oracle_pairs(rows, rect))
            assert Counter(tuple(d.items()) for d in sharded.result(q)) == want_res, q
    assert rejected > 0     # ±inf values and deletes of unknown keys were set aside (the same rows in both)
    stats = sharded.stats()
    for gid in gids:
        assert stats[gid]["subscription_shards"] == 3 and stats[gid]["partitions"] == 2
        assert stats[gid]["partition_subscriptions"] == [0, 0]
    assert sum(x["subscriptions"] for gid in gids for x in stats[gid]["shards"]) == len(queries)
    text = sharded.explain("j2")
    assert "2 row partitions × 3 subscription shards" in text
    runtime = sharded.stats()["runtime"]
    assert runtime["hits"] + runtime["catch_ups"] + runtime["rebuilds"] > 0


def test_sharded_reformulated_messages_equal_the_whole_groups(spark):
    rnd = random.Random(3)
    sharded, _ = engs = engines(spark, [3, 0])
    rows = {"r": {}, "s": {}}
    for e in engs:
        e.sql("CREATE SUBSCRIPTION j2 AS SELECT r.a, s.c FROM r JOIN s ON r.b = s.b WHERE r.a >= 1 AND s.c >= 1")
    gid = group_of(sharded).group_id
    bases = None
    for step in range(4):
        if step == 2:   # the group's subscriptions now select every column: the messages carry them (a log entry)
            subscribe_all(engs, rnd, {}, {}, [f"m{i}" for i in range(6)])
            for e in engs:
                e.unsubscribe("m1")
        table = "r" if step % 2 == 0 else "s"
        batch = gen_batch(rnd, table, 12, rows)
        got = [e.publish(table, batch, mode="reformulated").collect() for e in engs]
        assert full_rows(got[0]) == full_rows(got[1])      # the same messages, columns, msg_no
        assert [r.reason for r in got[0] if r.op == "error"] == []
        apply_oracle(rows, table, batch, {}, {}, 0)
        now = check_bases(sharded, gid)
        assert bases is None or now == bases                 # no row partition got a new base
        bases = now
    assert not sharded._join_shard_states[gid].shards     # reformulated: no stage 2, no shard was built
    assert "2 row partitions × 3 subscription shards" in sharded.explain("j2")
    # publish's ordinary job runs the row partitions in reformulated mode: a worker keeps one of them per group too
    # (run here in the driver's process one after the other)
    import pyarrow as pa

    from sparksub.runtime import groups as spark_groups
    from sparksub.runtime.replicas import _CACHE
    js = sharded._join_shard_states[gid]
    schema = pa.schema([("group_id", pa.string()), ("op", pa.string()), ("seq", pa.int64()), ("reason", pa.string())])
    for rid, replica in sorted(js.partitions.items()):
        # no row (R's columns: an empty batch is read as R's side), so that the state stays as it is
        empty = next(v for kind, v, _ in replica.read_log() if kind == "batch" and "e__rk" in v.column_names)
        out = list(spark_groups._run_group(replica, empty.slice(0, 0), "reformulated", schema))
        assert "error" not in [op for b in out for op in b.column("op").to_pylist()], out
        assert sorted(k[1] for k in _CACHE if k[0] == sharded.uid and k[1].startswith(f"{gid}#r")) == [rid]


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), shards=st.integers(2, 4))
def test_sharded_matches_whole_on_random_instances(spark, seed, shards):
    rnd = random.Random(seed)
    sharded, _ = engs = engines(spark, [shards, 1])
    rows = {"r": {}, "s": {}}
    queries: dict = {}
    subscribe_all(engs, rnd, queries, {}, [f"h{i}" for i in range(rnd.randint(1, 8))])
    for step in range(3):
        table = rnd.choice("rs")
        batch = gen_batch(rnd, table, rnd.randint(1, 10), rows)
        seq0 = sharded._next_seq
        got = [e.publish(table, batch).collect() for e in engs]
        assert full_rows(got[0]) == full_rows(got[1])
        assert unicast_rows(got[0], {}) == apply_oracle(rows, table, batch, queries, {}, seq0)


def test_a_large_sharded_group_is_read_where_its_row_partitions_live(spark, tmp_path):
    """Past ``driver_operator_limit`` a sharded group's ``result()``, ``stats()`` and EXPLAIN run one placed task per
    row partition (``runtime/remote.py``'s ``call_on_each``, as a zoned group's): the results equal the nested loop's
    and the whole-group twin's, and the driver builds no partition (its rebuild counter stays 0).  A ``load`` makes
    the row partitions stale (the ``_rows_changed`` hook).  Then the worker cache's policy: stage 1 and stage 2 keep
    one row partition and one subscription shard per group, run here in the driver's process one after the other."""
    import pyarrow as pa

    from sparksub.runtime import join_shards as spark_join_shards
    from sparksub.runtime.replicas import _CACHE
    rnd = random.Random(5)
    sharded, whole = engs = engines(spark, [2, 0])
    sharded.driver_operator_limit = 0
    rows = {"r": {k: {"a": float(rnd.randint(0, 6)), "b": rnd.randint(0, 3), "tag": "x"} for k in range(8)},
            "s": {k: {"b": float(rnd.randint(0, 3)), "c": float(rnd.randint(0, 6))} for k in range(8)}}
    queries, specs = {"p": (0, 6, 1, 4)}, {"p": PROJ}
    for e in engs:
        e.load("r", [{"rk": k, **v} for k, v in rows["r"].items()])
        e.load("s", [{"sk": k, **v} for k, v in rows["s"].items()])
        e.subscribe("p", "SELECT r.a, s.c FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN 0 AND 6 AND s.c BETWEEN 1 AND 4")
    subscribe_all(engs, rnd, queries, specs, [f"m{i}" for i in range(3)])
    entry = sharded._find_group("p")
    assert [g for g in sharded._groups.values() if g.group_id.startswith("select_join")] == [entry]

    def check_results():
        for q, rect in queries.items():
            want = Counter(projected(specs.get(q, STAR), rows, pair) for pair in oracle_pairs(rows, rect))
            got = sharded.result(q)
            assert Counter(tuple(d.items()) for d in got) == want and got == whole.result(q), q
    for table in ("r", "s"):
        batch = gen_batch(rnd, table, 10, rows)
        got = [e.publish(table, batch).collect() for e in engs]
        assert full_rows(got[0]) == full_rows(got[1])
        apply_oracle(rows, table, batch, {}, {}, 0)
    check_results()
    js = sharded._join_shard_states[entry.group_id]
    assert js.rebuilds == 1       # reading built no base either
    # (a part of a batch as stage 1 takes it, without its rows: for the cache policy's check below)
    empty = next(v for r in js.partitions.values() for kind, v, _ in r.read_log() if kind == "batch").slice(0, 0)
    # a load: the row partitions are rebuilt from the rows (a base, on the driver), then read where they live
    rows["s"][3] = {"b": 1.0, "c": 2.0}
    for e in engs:
        e.load("s", [{"sk": 3, "b": 1.0, "c": 2.0}])
    assert js.rows_stale
    check_results()
    assert js.rebuilds == 2 and not js.rows_stale
    stats = sharded.stats()[entry.group_id]
    assert "2 row partitions × 2 subscription shards" in sharded.explain("p")
    driver = sharded.runtime_stats()["runtime"].get("driver", {})
    assert driver.get("rebuilds", 0) == 0 and driver.get("catch_ups", 0) == 0, driver
    # the same state as the group built on the driver (the output counters are the workers')
    sharded.driver_operator_limit = None
    here = sharded.stats()[entry.group_id]
    state = ("partitions", "subscriptions", "left_rows", "right_rows", "subscription_shards", "shards",
             "partition_subscriptions")
    assert {k: stats[k] for k in state} == {k: here[k] for k in state} and stats["left_rows"] > 0

    # the cache policy: one row partition (stage 1) and one shard (stage 2) per group in a worker
    def cached(kind):
        return sorted(k[1] for k in _CACHE if k[0] == sharded.uid and k[1].startswith(f"{entry.group_id}#{kind}"))
    for rid, replica in sorted(js.partitions.items()):
        out = list(spark_join_shards._row_partition_body({rid: str(tmp_path)})(replica, empty))
        assert out[0].column("error")[0].as_py() is None and cached("r") == [rid]
    schema = pa.schema([("group_id", pa.string()), ("op", pa.string()), ("seq", pa.int64()), ("reason", pa.string())])
    parts = [spark_join_shards.ShardPart(entry.group_id, str(tmp_path), 0, shard=q) for q in js.shards]
    task = spark_join_shards._shard_task(parts, schema)
    for i, q in enumerate(js.shards):
        assert list(task(iter([pa.record_batch({"id": [i]})]))) == [] and cached("q") == [q.replica_id]
    assert len(cached("r")) == 1
    # a stream's micro-batch taken in (Streaming._absorb) makes the row partitions stale too (the same hook)
    assert not js.rows_stale
    sharded._absorb(sharded._tables["s"], pa.table({"sk": [4], "b": [2.0], "c": [3.0], "sparksub_op": [0],
                                                    "sparksub_seq": [sharded._next_seq]}))
    assert js.rows_stale
