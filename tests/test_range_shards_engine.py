"""RANGE_TOPK, RANGE_DISTINCT and RANGE_AGG groups with their subscriptions in shards (issue 16 item 4;
control/range_shards.py): the rows in one replica that holds no subscription (stage 1: the per-update messages),
the subscriptions split by a hash of their id into shards whose subscribers keep their results (stage 2, unicast).
Checked against the same engine run whole (``range_subscription_shards = 0``) row for row, every column, and
against a brute-force recomputation from the table (each subscription's result after every publish, and the
notifications replayed on a local copy of each result), across upserts, deletes, X-moves, the same key twice in
one batch, NULL x and y, ties in y, k larger than the range (ranges with x1 > x2, which ``subscribe`` refuses,
are in tests/operators/test_range_shards.py), and subscriptions added and
dropped between publishes; the replicas' bases hold what they should (no subscription in the rows, each shard its
own ids only, no new rows base for a subscription change, only the changed shards rebuilt); EXPLAIN and stats()
name the layout; a durable engine reopens and goes on; a worker keeps one rows replica and one shard per group."""
from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from sparksub import Engine
from sparksub.operators.joins.shards import subscription_shard

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

TOPK = "SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y LIMIT :k"
DISTINCT = "SELECT DISTINCT tag FROM t WHERE x BETWEEN :lo AND :hi"
SUM = "SELECT SUM(y) FROM t WHERE x BETWEEN :lo AND :hi"
COUNT = "SELECT COUNT(*) FROM t WHERE x BETWEEN :lo AND :hi"


def make_engines(spark, settings, path=None):
    out = []
    for q in settings:
        e = Engine(spark, path=path) if path else Engine(spark)
        e.range_subscription_shards = q
        e.sql("CREATE TABLE t (k INT PRIMARY KEY, x DOUBLE, y DOUBLE, tag STRING)")
        out.append(e)
    return out


# ---- the oracle: brute force over the table's rows -------------------------------------------------------------
def in_range(r, lo, hi):
    return r["x"] is not None and lo <= r["x"] <= hi


def oracle(rows, kind, lo, hi, k=None, desc=False):
    live = {key: r for key, r in rows.items() if in_range(r, lo, hi)}
    if kind == "topk":
        ranked = sorted((r["y"] * (-1 if desc else 1), key) for key, r in live.items() if r["y"] is not None)
        return [key for _, key in ranked[:k]]
    if kind == "distinct":
        return {r["tag"] for r in live.values() if r["tag"] is not None}
    if kind == "count":
        return len(live)      # COUNT(*): every row in the range
    ys = [r["y"] for r in live.values() if r["y"] is not None]
    return sum(ys) if ys else None


def result_of(engine, sid, kind):
    got = engine.result(sid)
    if kind == "topk":
        return [row["k"] for row in got]
    if kind == "distinct":
        return set(got)
    return got


def replay(local, out):
    """The notifications replayed on each subscription's local result (a top-k as key -> y, a set, a value)."""
    for r in out:
        if r.item_key is not None and r.op in ("enter", "update"):
            local.setdefault(r.subscription_id, {})[int(r.item_key)] = r.value
        elif r.op == "leave":
            local[r.subscription_id].pop(int(r.item_key))
        elif r.op in ("add", "remove"):
            (local.setdefault(r.subscription_id, set()).add if r.op == "add"
             else local.setdefault(r.subscription_id, set()).discard)(r.item_text)
        elif r.op == "update":
            local[r.subscription_id] = r.value


def full_rows(out):
    return Counter(tuple(sorted(r.asDict().items(), key=lambda kv: kv[0])) for r in out)


def gen_batch(rnd, n, rows):
    out = []
    for _ in range(n):
        key = rnd.randint(0, 14)
        roll = rnd.random()
        if roll < 0.15 and key in rows:
            out.append({"k": key, "_op": "delete"})
            continue
        x = None if roll < 0.22 else float(rnd.randint(0, 9))
        y = None if 0.22 <= roll < 0.28 else float(rnd.randint(0, 3))     # few values: ties
        out.append({"k": key, "x": x, "y": y, "tag": rnd.choice(["a", "b", "c", None])})
    return out


def apply_rows(rows, batch):
    for u in batch:
        if u.get("_op") == "delete":
            rows.pop(u["k"], None)
        else:
            rows[u["k"]] = {c: u[c] for c in ("x", "y", "tag")}


def subscribe_all(engs, rnd, queries, prefix, n):
    ids = [f"{prefix}{i}" for i in range(n)]
    lo = [float(rnd.randint(0, 8)) for _ in ids]
    hi = [a + rnd.randint(0, 5) for a in lo]           # (x1 > x2 is refused at subscribe: the pure tests have it)
    ks = [rnd.randint(1, 6) for _ in ids]               # some k larger than the range
    for template, kind, tag in ((TOPK, "topk", "t"), (DISTINCT, "distinct", "d"), (SUM, "sum", "s"),
                                (COUNT, "count", "c")):
        params = {"id": [f"{tag}{i}" for i in ids], "lo": lo, "hi": hi}
        if kind == "topk":
            params["k"] = ks
        for e in engs:
            e.subscribe_many(template, params)
        for n_, i in enumerate(ids):
            queries[f"{tag}{i}"] = (kind, lo[n_], hi[n_], ks[n_] if kind == "topk" else None, False)


def check_results(engine, rows, queries, local):
    for sid, (kind, lo, hi, k, desc) in queries.items():
        want = oracle(rows, kind, lo, hi, k, desc)
        got = result_of(engine, sid, kind)
        if kind == "sum" and want is not None:
            assert got is not None and math.isclose(got, want), sid
        else:
            assert got == want, (sid, got, want)
        mine = local.get(sid)
        if kind == "topk":
            assert sorted((mine or {}).items(), key=lambda kv: ((-1 if desc else 1) * kv[1], kv[0])) == \
                [(key, rows[key]["y"]) for key in want], sid
        elif kind == "distinct":
            assert (mine or set()) == want, sid
        elif kind == "count":
            assert (mine or 0) == want, sid
        elif want is None or mine is None:
            assert mine is None and want is None, sid
        else:
            assert math.isclose(mine, want), sid


def range_groups(e):
    return [g for g in e._groups.values() if g.physical.klass in ("RANGE_TOPK", "RANGE_DISTINCT", "RANGE_AGG")]


def check_bases(e, n_shards):
    """No subscription in a rows base, each shard its own ids; {group: (rows base id, [shard base ids])}."""
    out = {}
    for g in range_groups(e):
        rs = e._range_shard_states[g.group_id]
        snap = rs.rows.read_base()
        assert len(snap.sub_ids) == 0 and len(snap.keys) >= 0
        assert len(rs.shards) == n_shards
        total = 0
        for j, r in enumerate(rs.shards):
            base = r.read_base()
            assert base.shard == j and (subscription_shard(base.ids.tolist(), n_shards) == j).all()
            total += len(base)
        assert total == len(g.registry)
        out[g.group_id] = (rs.rows.base_id, [r.base_id for r in rs.shards])
    return out


@pytest.mark.parametrize("n_shards", [3])
def test_sharded_range_groups_equal_whole_and_the_oracle(spark, n_shards):
    rnd = random.Random(7)
    sharded, whole = engs = make_engines(spark, [n_shards, 0])
    rows = {key: {"x": float(rnd.randint(0, 9)), "y": float(rnd.randint(0, 3)), "tag": rnd.choice("abc")}
            for key in range(8)}
    rows[8] = {"x": None, "y": 1.0, "tag": "a"}
    rows[9] = {"x": 3.0, "y": None, "tag": "b"}
    queries: dict = {}
    for e in engs:
        e.load("t", [{"k": key, **r} for key, r in rows.items()])
        e.sql("CREATE SUBSCRIPTION best AS SELECT * FROM t WHERE x BETWEEN 2 AND 7 ORDER BY y DESC LIMIT 3")
        e.sql("CREATE SUBSCRIPTION avg1 AS SELECT AVG(y) FROM t WHERE x BETWEEN 1 AND 6")
    queries["best"] = ("topk", 2, 7, 3, True)
    subscribe_all(engs, rnd, queries, "a", 8)
    local: dict = {}
    # the local copies start from the results as loaded
    for sid, (kind, lo, hi, k, desc) in queries.items():
        want = oracle(rows, kind, lo, hi, k, desc)
        local[sid] = {key: rows[key]["y"] for key in want} if kind == "topk" else want
    before = None
    for step in range(4):
        if step == 2:   # subscriptions change between publishes: only the shards their ids hash to
            for e in engs:
                e.unsubscribe("ta0")
                e.unsubscribe("da1")
            del queries["ta0"], queries["da1"]
        if step == 3:
            subscribe_all(engs, rnd, queries, "b", 3)
            for sid, (kind, lo, hi, k, desc) in queries.items():
                if sid.startswith(("tb", "db", "sb", "cb")):
                    want = oracle(rows, kind, lo, hi, k, desc)
                    local[sid] = {key: rows[key]["y"] for key in want} if kind == "topk" else want
        batch = gen_batch(rnd, 14, rows)
        if step == 1:   # the same key three times in one batch, moving in and out of ranges; an X-move with ties
            batch += [{"k": 3, "x": 2.0, "y": 1.0, "tag": "a"}, {"k": 3, "x": 8.0, "y": 1.0, "tag": "c"},
                      {"k": 3, "x": 5.0, "y": 0.0, "tag": "b"}]
        seq0 = sharded._next_seq
        got = [e.publish("t", batch).collect() for e in engs]
        assert [r.reason for r in got[0] if r.op == "error"] == []
        assert full_rows(got[0]) == full_rows(got[1])        # row for row, every column
        assert {r.seq for r in got[0]} <= set(range(seq0, seq0 + len(batch)))
        apply_rows(rows, batch)
        replay(local, got[0])
        check_results(sharded, rows, queries, local)
        bases = check_bases(sharded, n_shards)
        if before is not None and step in (2, 3):
            for gid, (rows_base, shard_bases_now) in bases.items():
                assert rows_base == before[gid][0]            # a subscription change gave the rows no new base
                changed = sum(a != b for a, b in zip(shard_bases_now, before[gid][1]))
                assert changed <= n_shards
        before = bases
    assert sharded.result("best") == whole.result("best")
    stats = sharded.stats()
    for g in range_groups(sharded):
        st = stats[g.group_id]
        assert st["subscription_shards"] == n_shards and sum(st["shard_subscriptions"]) == len(g.registry)
        assert st["layout"] == f"rows in 1 replica × {n_shards} subscription shards"
    assert f"rows in 1 replica × {n_shards} subscription shards" in sharded.explain("best")
    runtime = sharded.stats()["runtime"]
    assert runtime["hits"] + runtime["catch_ups"] + runtime["rebuilds"] > 0
    # reformulated publishes run sharded too: the rows alone, in the publish's Paint variant (Paint-Batch by
    # default), their messages the output -- the whole engine's row for row; no shard is rebuilt, the stateful
    # shards log the messages; a variant whose server needs the subscriptions (Paint-Sparse) runs the group whole
    states = sharded._range_shard_states
    shard_rebuilds = {gid: rs.shard_rebuilds for gid, rs in states.items()}
    for variant in (None, "Paint-Dense", "Paint-Sparse"):
        if variant == "Paint-Dense":   # a subscription change first: its shard is rebuilt at the next unicast
            subscribe_all(engs, rnd, queries, "c", 2)
        logged = {gid: rs.rows.log_length for gid, rs in states.items()}
        batch = gen_batch(rnd, 6, rows)
        frames = [e.publish("t", batch, mode="reformulated", variant=variant) for e in engs]
        got = [f.collect() for f in frames]
        assert [r.reason for r in got[0] if r.op == "error"] == []
        assert full_rows(got[0]) == full_rows(got[1])
        apply_rows(rows, batch)
        delivered = [e.deliver(f.filter("op != 'rejected'")).collect() for e, f in zip(engs, frames)]
        assert full_rows(delivered[0]) == full_rows(delivered[1])
        ran_sharded = {gid: gid in states and not states[gid].rows_stale and states[gid].rows.log_length
                       == logged[gid] + 1 for gid in logged}
        expect = variant != "Paint-Sparse"
        for g in range_groups(sharded):
            # Paint-Sparse: the top-k group runs whole; the others have no variant and shard
            assert ran_sharded[g.group_id] == (expect or g.physical.klass != "RANGE_TOPK"), (variant, g.group_id)
        assert {gid: rs.shard_rebuilds for gid, rs in states.items()} == shard_rebuilds
    # the next unicast publishes shard again: the shards replay the logged messages (or, the top-k group, which
    # ran whole, and the shards the new subscriptions hash to, are rebuilt from the rows as they are now)
    for _ in range(2):
        batch = gen_batch(rnd, 8, rows)
        got = [e.publish("t", batch).collect() for e in engs]
        assert full_rows(got[0]) == full_rows(got[1])
        apply_rows(rows, batch)
    for sid, (kind, lo, hi, k, desc) in queries.items():
        assert result_of(sharded, sid, kind) == result_of(whole, sid, kind), sid
        want = oracle(rows, kind, lo, hi, k, desc)
        got = result_of(sharded, sid, kind)
        assert (math.isclose(got, want) if kind == "sum" and want is not None else got == want), sid


def test_only_the_changed_shards_get_new_bases_and_a_durable_engine_reopens(spark, tmp_path):
    """A subscription change rebuilds the bases of the shards its ids hash to only (not the rows'); a load makes
    the rows and every shard stale; ``Engine(path=...)`` reopened goes on (its shards rebuilt from the rows)."""
    rnd = random.Random(5)
    path = tmp_path / "eng"
    sharded, = make_engines(spark, [2], path=str(path))
    whole, = make_engines(spark, [0])
    rows: dict = {}
    queries: dict = {}
    subscribe_all([sharded, whole], rnd, queries, "p", 6)
    for step in range(1):
        batch = gen_batch(rnd, 12, rows)
        got = [e.publish("t", batch).collect() for e in (sharded, whole)]
        assert full_rows(got[0]) == full_rows(got[1])
        apply_rows(rows, batch)
    before = check_bases(sharded, 2)
    new_id = next(f"tz{i}" for i in range(100) if subscription_shard([f"tz{i}"], 2)[0] == 1)
    for e in (sharded, whole):
        e.subscribe(new_id, "SELECT k, y FROM t WHERE x BETWEEN 1 AND 8 ORDER BY y LIMIT 2")
    queries[new_id] = ("topk", 1, 8, 2, False)
    batch = gen_batch(rnd, 10, rows)
    got = [e.publish("t", batch).collect() for e in (sharded, whole)]
    assert full_rows(got[0]) == full_rows(got[1])
    apply_rows(rows, batch)
    after = check_bases(sharded, 2)
    gid = sharded._find_group(new_id).group_id
    assert after[gid][0] == before[gid][0]                       # the rows: the same base
    assert after[gid][1][0] == before[gid][1][0] and after[gid][1][1] != before[gid][1][1]   # only shard 1
    for g in before:
        if g != gid:
            assert after[g] == before[g]                          # the other groups: nothing rebuilt
    # a load: the rows changed behind the replicas' back, every base is rebuilt
    rows[14] = {"x": 4.0, "y": 0.0, "tag": "a"}
    for e in (sharded, whole):
        e.load("t", [{"k": 14, "x": 4.0, "y": 0.0, "tag": "a"}])
    batch = gen_batch(rnd, 10, rows)
    got = [e.publish("t", batch).collect() for e in (sharded, whole)]
    assert full_rows(got[0]) == full_rows(got[1])
    apply_rows(rows, batch)
    rebuilt = check_bases(sharded, 2)
    assert all(rebuilt[g][0] != after[g][0] and all(a != b for a, b in zip(rebuilt[g][1], after[g][1])
                                                   if sharded._range_shard_states[g].kind != "RANGE_DISTINCT")
               for g in rebuilt)
    for sid, (kind, lo, hi, k, desc) in queries.items():
        assert result_of(sharded, sid, kind) == oracle(rows, kind, lo, hi, k, desc) or kind == "sum"
    sharded.close()
    reopened = Engine(spark, path=str(path))
    reopened.range_subscription_shards = 2
    batch = gen_batch(rnd, 10, rows)
    got = [e.publish("t", batch).collect() for e in (reopened, whole)]
    assert full_rows(got[0]) == full_rows(got[1])
    apply_rows(rows, batch)
    for sid, (kind, lo, hi, k, desc) in queries.items():
        assert result_of(reopened, sid, kind) == result_of(whole, sid, kind), sid
    reopened.close()


def test_a_worker_keeps_one_rows_replica_and_one_shard_per_group(spark, tmp_path):
    """Stage 1 and stage 2 keep one rows replica and one subscription shard per group in a worker
    (``replicas.keep_one_per_group``), run here in the driver's process one after the other; each shard's task
    moves its stateful cache one step (the driver logs the messages when the publish commits)."""
    import pyarrow as pa

    from sparksub.runtime import join_shards as spark_join_shards
    from sparksub.runtime.replicas import _CACHE
    rnd = random.Random(3)
    sharded, = make_engines(spark, [2])
    rows: dict = {}
    subscribe_all([sharded], rnd, {}, "w", 8)
    batch = gen_batch(rnd, 10, rows)
    sharded.publish("t", batch).collect()
    entry = next(g for g in range_groups(sharded) if g.physical.klass == "RANGE_TOPK")
    rs = sharded._range_shard_states[entry.group_id]

    def cached(kind):
        return sorted(k[1] for k in _CACHE if k[0] == sharded.uid and k[1].startswith(f"{entry.group_id}#{kind}"))
    part = next(v for kind, v, _ in rs.rows.read_log() if kind == "batch")
    out = list(spark_join_shards._row_partition_body({rs.rows.replica_id: str(tmp_path)})(rs.rows, part.slice(0, 1)))
    assert out[0].column("error")[0].as_py() is None and cached("r") == [rs.rows.replica_id]
    schema = pa.schema([("group_id", pa.string()), ("op", pa.string()), ("seq", pa.int64()),
                        ("subscription_id", pa.string()), ("reason", pa.string())])
    parts = [spark_join_shards.ShardPart(entry.group_id, str(tmp_path), 0, shard=q) for q in rs.shards]
    task = spark_join_shards._shard_task(parts, schema)
    for i, q in enumerate(rs.shards):
        list(task(iter([pa.record_batch({"id": [i]})])))
        assert cached("q") == [q.replica_id]
        assert _CACHE[(sharded.uid, q.replica_id)][1] == q.log_length + 1     # stateful: one step further


AGGREGATES = ((SUM, "sum", "s"), (COUNT, "count", "c"), ("SELECT AVG(y) FROM t WHERE x BETWEEN :lo AND :hi", "avg",
                                                         "v"))


def test_aggregate_rows_in_x_zones_equal_whole_and_the_oracle(spark):
    """RANGE_AGG's rows split into X zones (``Engine.range_zones``; ``operators/shared/range_zones.py``): a task
    per zone, each emitting the messages at the X it owns, X-moves across the cuts the old zone's delete and the
    new zone's insert; the subscriptions in shards as before.  Unicast and reformulated publishes and deliver()
    equal the whole engine's row for row; every result equals a brute force, on the driver and read where the
    zones are cached (``driver_operator_limit = 0``); an empty table has no cut points (the rows in one replica
    until their next new bases); a load rebuilds the zones; a change of the zone count re-cuts them."""
    rnd = random.Random(11)
    zoned, whole = engs = make_engines(spark, [2, 0])
    zoned.range_zones = 3
    rows: dict = {}
    queries: dict = {}
    ids = [f"z{i}" for i in range(10)]
    lo = [float(rnd.randint(0, 8)) for _ in ids]
    hi = [a + rnd.randint(0, 5) for a in lo]
    for template, kind, tag in AGGREGATES:
        for e in engs:
            e.subscribe_many(template, {"id": [f"{tag}{i}" for i in ids], "lo": lo, "hi": hi})
        queries.update({f"{tag}{i}": (kind, lo[n], hi[n]) for n, i in enumerate(ids)})

    def publish(batch, mode="unicast"):
        frames = [e.publish("t", batch, mode=mode) for e in engs]
        got = [f.collect() for f in frames]
        assert [r.reason for r in got[0] if r.op == "error"] == []
        assert full_rows(got[0]) == full_rows(got[1])
        if mode == "reformulated":
            delivered = [e.deliver(f.filter("op != 'rejected'")).collect() for e, f in zip(engs, frames)]
            assert full_rows(delivered[0]) == full_rows(delivered[1])
        apply_rows(rows, batch)

    def check():
        for sid, (kind, a, b) in queries.items():
            live = [r for r in rows.values() if in_range(r, a, b) and (r["y"] is not None or kind == "count")]
            want = len(live) if kind == "count" else None if not live else \
                sum(r["y"] for r in live) / (len(live) if kind == "avg" else 1)
            got = zoned.result(sid)
            assert got == whole.result(sid), sid
            assert (got is None and want is None) or math.isclose(got, want), (sid, got, want)

    publish(gen_batch(rnd, 4, rows))      # an empty table: no cut points, the rows in one replica
    check()
    states = [zoned._range_shard_states[g.group_id] for g in range_groups(zoned)]
    assert all(len(rs.zones) == 1 and not rs.cuts for rs in states)
    loaded = {100 + i: {"x": float(rnd.randint(0, 9)), "y": float(rnd.randint(0, 3)), "tag": None} for i in range(12)}
    for e in engs:     # the rows change behind the replicas' back: new bases from the table's rows, cut now
        e.load("t", [{"k": key, **r} for key, r in loaded.items()])
    rows.update(loaded)
    for step in range(4):
        batch = gen_batch(rnd, 16, rows)
        if step == 1:     # one key across every cut and back within one batch
            batch += [{"k": 2, "x": x, "y": y, "tag": None} for x, y in ((0.0, 1.0), (9.0, 2.0), (4.0, 0.5))]
        if step == 2:     # another load: rebuilt from the table's rows
            for e in engs:
                e.load("t", [{"k": 20, "x": 5.0, "y": 3.0, "tag": None}])
            rows[20] = {"x": 5.0, "y": 3.0, "tag": None}
        publish(batch, "reformulated" if step == 3 else "unicast")
        check()
    assert all(len(rs.zones) == 3 and len(rs.cuts) == 2 for rs in states)
    assert all(rs.rebuilds == 3 for rs in states)        # the first publish, the two loads
    stats = zoned.stats()
    for g in range_groups(zoned):
        assert stats[g.group_id]["layout"] == "rows in 3 X zones × 2 subscription shards"
        counted = g.physical.func.upper() == "COUNT"    # COUNT(*) counts a row whatever its y
        assert sum(stats[g.group_id]["zone_rows"]) == sum(r["x"] is not None and (counted or r["y"] is not None)
                                                           for r in rows.values())
    assert "3 X zones" in zoned.explain("s" + ids[0])
    zoned.driver_operator_limit = 0        # read where the zones are cached; new shards seeded there too
    check()
    for e in engs:
        e.subscribe("s-late", "SELECT SUM(y) FROM t WHERE x BETWEEN 1 AND 7")
    queries["s-late"] = ("sum", 1.0, 7.0)
    # another zone count (new cuts: new zone bases, but the shards' results stand), and no subscription shards
    # asked: the zones hold no subscription, so the group keeps one shard (new bases: the count changed)
    zoned.range_zones, zoned.range_subscription_shards = 2, 0
    publish(gen_batch(rnd, 12, rows))
    check()
    assert all(len(rs.zones) == 2 and len(rs.shards) == 1 for rs in states) and all(rs.rebuilds == 3 for rs in states)
    assert zoned.stats()[states[0].group_id]["layout"] == "rows in 2 X zones × 1 subscription shards"
