"""BOX_MIN / BOX_MAX / BOX_TOPK groups with their subscriptions in shards, the rows copied in each (issue 16 item 4;
control/box_shards.py, operators/box/shards.py): each shard a whole box group over the subscriptions whose id hashes
to it and every row.  Checked in-process (hypothesis: the shards' unicast rows together are the whole group's, row
for row; shard 0's reformulated messages are the whole group's, the others send none and keep following the rows)
and through the engine against the same engine run whole (``range_subscription_shards = 0``) row for row, every
column, and against a brute force recomputed from the table, with 2 and 3 forced shards: NULL x / x2 / y, ties in y,
deletes, the same key twice in a batch, boxes holding no row, infinite bounds, ±inf values (rejected); subscriptions
added and dropped between publishes rebuild only the shards their ids hash to (``stats()``); ``result()`` read on
the driver and where the shards live; reformulated publishes and ``deliver()``; a durable engine reopens and goes on.
"""
from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.box.group import BoxClassSnapshot
from sparksub.operators.box.shards import shard_digests, shard_snapshots, shards_layout
from sparksub.operators.joins.shards import subscription_shard

KINDS = [("BOX_MIN", False), ("BOX_MAX", True), ("BOX_TOPK", False), ("BOX_TOPK", True)]


# ---- in-process: the shards of one snapshot against the whole group ---------------------------------------------
def _key(r: dict) -> tuple:
    return tuple(sorted(r.items()))


coord = st.one_of(st.none(), st.integers(0, 6).map(float))


@st.composite
def scenario(draw):
    n = draw(st.integers(0, 14))
    boxes = []
    for _ in range(n):
        sides = []
        for _ in range(2):
            a = draw(st.integers(-1, 6))
            b = a + draw(st.integers(0, 4))
            sides += [-math.inf if a < 0 else float(a), math.inf if b > 5 else float(b)]
        boxes.append(sides)
    ks = [draw(st.integers(1, 3)) for _ in range(n)]
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        rows = []
        for _ in range(draw(st.integers(1, 8))):
            key = draw(st.integers(0, 6))          # few keys: duplicates in a batch, deletes of known keys
            if draw(st.integers(0, 5)) == 0:
                rows.append((key, None, None, None, 1))
            else:
                rows.append((key, draw(coord), draw(coord), draw(st.one_of(st.none(), st.integers(0, 2).map(float))),
                             0))
        batches.append(rows)
    modes = [draw(st.sampled_from(["unicast", "reformulated", "none"])) for _ in batches]
    return boxes, ks, batches, modes


def _snapshot(kind, option, boxes, ks, rows=()):
    b = np.array(boxes, dtype=np.float64).reshape(-1, 4)
    keys = np.array([r[0] for r in rows], dtype=object)
    cols = [np.array([np.nan if r[i] is None else r[i] for r in rows], dtype=np.float64) for i in (1, 2, 3)]
    return BoxClassSnapshot(kind, "g", "t", "x", "x2", "y", option,
                            np.array([f"s{i}" for i in range(len(boxes))], dtype=object), b[:, 0], b[:, 1], b[:, 2],
                            b[:, 3], np.array(ks, dtype=np.int64) if kind == "BOX_TOPK" else None, keys, *cols)


def _batch(rows, seq0):
    return pa.table({"key": [r[0] for r in rows], "x": pa.array([r[1] for r in rows], pa.float64()),
                     "x_2": pa.array([r[2] for r in rows], pa.float64()),
                     "y": pa.array([r[3] for r in rows], pa.float64()), "op": pa.array([r[4] for r in rows], pa.int8()),
                     "seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64())})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), st.sampled_from(KINDS), st.sampled_from([2, 3]))
def test_shards_together_are_the_whole_group(sc, kind_opt, n_shards):
    kind, option = kind_opt
    boxes, ks, batches, modes = sc
    loaded = [(9, 1.0, 1.0, 0.0, 0), (10, 2.0, 2.0, 0.0, 0)]     # a tie in y with the rows to come
    snap = _snapshot(kind, option, boxes, ks, loaded)
    whole = snap.build()
    parts = shard_snapshots(snap, n_shards)
    assert sorted(parts) == list(range(n_shards))
    assert sum(len(p.sub_ids) for p in parts.values()) == len(boxes)
    shards = [parts[j].build() for j in range(n_shards)]
    for j, g in enumerate(shards):
        assert (subscription_shard(list(g.ids), n_shards) == j).all() and len(g.store) == len(whole.store)
    seq = 0
    for rows, mode in zip(batches, modes):
        t = _batch(rows, seq)
        seq += len(rows)
        want = whole.apply(t, mode)
        got = [g.apply(t, mode) for g in shards]
        if mode == "reformulated":   # shard 0 sends the group's messages (every k), the others none
            assert got[0].to_pylist() == want.to_pylist()
            assert all(o.num_rows == 0 for o in got[1:])
        else:
            assert Counter(_key(r) for o in got for r in o.to_pylist()) == Counter(_key(r) for r in want.to_pylist())
    for g in shards:
        for sid in g.ids.tolist():
            assert g.result(sid) == whole.result(sid)
    # ±inf is rejected by every shard as by the whole group, nothing applied
    for g in [whole, *shards]:
        with pytest.raises(BadUpdate):
            g.apply(_batch([(1, 1.0, math.inf, 1.0, 0)], seq), "unicast")


def test_shard_digests_and_layout():
    snap = _snapshot("BOX_TOPK", False, [[0, 1, 0, 1], [0, 2, 0, 2], [1, 3, -math.inf, math.inf]], [1, 2, 5])
    digests = shard_digests(snap, 2)
    assert sum(n for n, _ in digests) == 3 and digests == shard_digests(snap, 2)
    moved = _snapshot("BOX_TOPK", False, [[0, 1, 0, 1], [0, 2, 0, 2], [1, 3, -math.inf, 9.0]], [1, 2, 5])
    changed = [a != b for a, b in zip(digests, shard_digests(moved, 2))]
    assert changed == [j == subscription_shard(["s2"], 2)[0] for j in range(2)]   # only s2's shard
    parts = shard_snapshots(snap, 2)
    assert parts[0].extra["ks"] == [1, 2, 5] and parts[0].extra["emits_messages"]
    assert "ks" not in parts[1].extra and not parts[1].extra["emits_messages"]
    assert sorted(parts[0].build().cores) == [1, 2, 5]     # shard 0 paints for every k of the group
    assert shards_layout(3) == "3 subscription shards, rows copied in each"


# ---- through the engine ----------------------------------------------------------------------------------------
TEMPLATES = {
    "mn": ("SELECT MIN(v) FROM pts WHERE a BETWEEN :a1 AND :a2 AND b BETWEEN :b1 AND :b2", "min", False),
    "mx": ("SELECT MAX(v) FROM pts WHERE a BETWEEN :a1 AND :a2 AND b BETWEEN :b1 AND :b2", "max", False),
    "ta": ("SELECT id, v FROM pts WHERE a BETWEEN :a1 AND :a2 AND b BETWEEN :b1 AND :b2 ORDER BY v LIMIT :k",
           "topk", False),
    "td": ("SELECT id, v FROM pts WHERE a BETWEEN :a1 AND :a2 AND b BETWEEN :b1 AND :b2 ORDER BY v DESC LIMIT :k",
           "topk", True),
}


def make_engines(spark, settings_, path=None):
    from sparksub import Engine
    out = []
    for q in settings_:
        e = Engine(spark, path=path) if path else Engine(spark)
        e.range_subscription_shards = q
        e.keep_workers_warm = None
        e.sql("CREATE TABLE pts (id INT PRIMARY KEY, a DOUBLE, b DOUBLE, v DOUBLE)")
        out.append(e)
    return out


def subscribe(engs, rnd, queries, prefix, n, tags=TEMPLATES):
    for tag in tags:
        template, kind, desc = TEMPLATES[tag]
        ids = [f"{tag}{prefix}{i}" for i in range(n)]
        a1 = [float(rnd.randint(-1, 6)) for _ in ids]
        b1 = [float(rnd.randint(-1, 6)) for _ in ids]
        box = [(-math.inf if x < 0 else x, x + rnd.randint(0, 4), -math.inf if y < 0 else y,
                math.inf if rnd.random() < 0.2 else y + rnd.randint(0, 4)) for x, y in zip(a1, b1)]
        ks = [rnd.randint(1, 4) for _ in ids]
        params = {"id": ids, **{c: [bx[j] for bx in box] for j, c in enumerate(("a1", "a2", "b1", "b2"))}}
        if kind == "topk":
            params["k"] = ks
        for e in engs:
            e.subscribe_many(template, params)
        for sid, bx, k in zip(ids, box, ks):
            queries[sid] = (kind, desc, bx, k)


def oracle(rows, kind, desc, box, k):
    a1, a2, b1, b2 = box
    inside = [(key, r) for key, r in rows.items() if None not in (r["a"], r["b"], r["v"])
              and a1 <= r["a"] <= a2 and b1 <= r["b"] <= b2]
    if kind == "topk":
        ranked = sorted(inside, key=lambda kr: ((-1 if desc else 1) * kr[1]["v"], kr[0]))[:k]
        return [{"id": key, "v": r["v"]} for key, r in ranked]
    vals = [r["v"] for _, r in inside]
    return (max(vals) if kind == "max" else min(vals)) if vals else None


def replay(local, out):
    for r in out:
        if r.op in ("enter", "update") and r.item_key is not None:
            local.setdefault(r.subscription_id, {})[int(r.item_key)] = r.value
        elif r.op == "leave":
            local[r.subscription_id].pop(int(r.item_key))
        elif r.op == "update":
            local[r.subscription_id] = r.value


def check(engine, rows, queries, local=None):
    for sid, (kind, desc, box, k) in queries.items():
        want = oracle(rows, kind, desc, box, k)
        assert engine.result(sid) == want, sid
        if local is not None:
            mine = local.get(sid)
            if kind == "topk":
                assert sorted((mine or {}).items(), key=lambda kv: ((-1 if desc else 1) * kv[1], kv[0])) == \
                    [(w["id"], w["v"]) for w in want], sid
            else:
                assert mine == want, sid


def full_rows(out):
    return Counter(tuple(sorted(r.asDict().items(), key=lambda kv: kv[0])) for r in out)


def gen_batch(rnd, n):
    out = []
    for _ in range(n):
        key = rnd.randint(0, 11)
        roll = rnd.random()
        if roll < 0.15:
            out.append({"id": key, "_op": "delete"})     # an unknown key is set aside ('rejected'), as whole
            continue
        out.append({"id": key, "a": None if roll < 0.2 else float(rnd.randint(0, 8)),
                    "b": None if 0.2 <= roll < 0.25 else float(rnd.randint(0, 8)),
                    "v": None if 0.25 <= roll < 0.3 else float(rnd.randint(0, 3))})     # few values: ties
    return out


def apply_rows(rows, batch, out, seq0):
    rejected = {r.seq - seq0 for r in out if r.op == "rejected"}
    for i, u in enumerate(batch):
        if i in rejected:
            continue
        if u.get("_op") == "delete":
            rows.pop(u["id"], None)
        else:
            rows[u["id"]] = {c: u[c] for c in ("a", "b", "v")}


def box_groups(e):
    return [g for g in e._groups.values() if g.physical.klass.startswith("BOX_")]


def shard_bases(e):
    """{group: [bases written per shard]} (``stats()``: a subscription change rebuilds only its shards')."""
    stats = e.stats()
    return {g.group_id: [s["bases"] for s in stats[g.group_id]["shards"]] for g in box_groups(e)}


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_sharded_box_groups_equal_whole_and_brute_force(spark):
    rnd = random.Random(11)
    engs = make_engines(spark, [0, 2, 3])
    whole = engs[0]
    rows = {key: {"a": float(rnd.randint(0, 8)), "b": float(rnd.randint(0, 8)), "v": float(rnd.randint(0, 3))}
            for key in range(6)}
    rows[6] = {"a": None, "b": 1.0, "v": 0.0}
    rows[7] = {"a": 2.0, "b": 2.0, "v": None}
    for e in engs:
        e.load("pts", [{"id": key, **r} for key, r in rows.items()])
    queries: dict = {}
    subscribe(engs, rnd, queries, "p", 5)
    local = {sid: ({w["id"]: w["v"] for w in oracle(rows, *q)} if q[0] == "topk" else oracle(rows, *q))
             for sid, q in queries.items()}
    seq = 0
    for step in range(3):
        before = {q: shard_bases(e) for q, e in zip((2, 3), engs[1:])} if step else None
        batch = gen_batch(rnd, 10)
        if step == 1:
            # a subscription dropped: only the shard its id hashes to is rebuilt (and shard 0 if the group's k
            # values changed: it paints for each)
            for e in engs:
                e.unsubscribe("tap1")
            ks_changed = queries["tap1"][3] not in {q[3] for sid, q in queries.items() if sid.startswith("ta")
                                                    and sid != "tap1"}
            changed = {q: ("box_topk:pts.v@a,b", {int(subscription_shard(["tap1"], q)[0])} | ({0} if ks_changed
                                                                                              else set()))
                       for q in (2, 3)}
            del queries["tap1"], local["tap1"]
            # the same key three times in one batch; an infinite value (rejected); a tie
            batch += [{"id": 3, "a": 1.0, "b": 1.0, "v": 0.0}, {"id": 3, "a": 7.0, "b": 2.0, "v": 1.0},
                      {"id": 3, "a": 4.0, "b": 4.0, "v": 1.0}, {"id": 4, "a": 1.0, "b": 1.0, "v": math.inf},
                      {"id": 5, "a": 4.0, "b": 4.0, "v": 1.0}]
        if step == 2:   # a subscription added: only its shard rebuilt
            new_id = next(f"mnz{i}" for i in range(100) if subscription_shard([f"mnz{i}"], 3)[0] == 2)
            for e in engs:
                e.subscribe(new_id, "SELECT MIN(v) FROM pts WHERE a BETWEEN 0 AND 5 AND b >= 1")
            box = (0.0, 5.0, 1.0, math.inf)
            queries[new_id] = ("min", False, box, 1)
            local[new_id] = oracle(rows, "min", False, box, 1)
            changed = {q: ("box_min:pts.v@a,b", {int(subscription_shard([new_id], q)[0])}) for q in (2, 3)}
        got = [e.publish("pts", batch).collect() for e in engs]
        assert [r.reason for r in got[1] + got[2] if r.op == "error"] == []
        assert full_rows(got[1]) == full_rows(got[0]) and full_rows(got[2]) == full_rows(got[0])
        assert {r.seq for r in got[0]} <= set(range(seq, seq + len(batch)))
        if step == 1:
            assert any(r.op == "rejected" and r.seq == seq + len(batch) - 2 for r in got[1])
        apply_rows(rows, batch, got[0], seq)
        seq += len(batch)
        replay(local, got[1])
        check(engs[1], rows, queries, local)
        for q, e in zip((2, 3), engs[1:]) if before else ():
            after = shard_bases(e)
            for gid, bases in after.items():
                grew = {j for j, (a, b) in enumerate(zip(bases, before[q][gid])) if a != b}
                assert grew == (changed[q][1] if gid == changed[q][0] else set()), (q, gid, grew)
    for q, e in zip((2, 3), engs[1:]):
        stats = e.stats()
        for g in box_groups(e):
            st_ = stats[g.group_id]
            assert st_["subscription_shards"] == q and sum(st_["shard_subscriptions"]) == len(g.registry)
            assert st_["layout"] == shards_layout(q)
        assert shards_layout(q) in e.explain("mnp0")
    # reformulated: shard 0's messages are the whole group's; deliver() seeded from the shards
    batch = gen_batch(rnd, 8)
    frames = [e.publish("pts", batch, mode="reformulated") for e in engs]
    got = [f.collect() for f in frames]
    assert full_rows(got[1]) == full_rows(got[0]) and full_rows(got[2]) == full_rows(got[0])
    apply_rows(rows, batch, got[0], seq)
    delivered = [e.deliver(f.filter("op != 'rejected'")).collect() for e, f in zip(engs, frames)]
    assert full_rows(delivered[1]) == full_rows(delivered[0]) and full_rows(delivered[2]) == full_rows(delivered[0])
    replay(local, delivered[2])
    check(engs[2], rows, queries, local)
    # past driver_operator_limit: result() and stats() read where the shards live
    engs[2].driver_operator_limit = 0
    for sid in ("mnp0", "tap2", "tdp3"):
        assert engs[2].result(sid) == whole.result(sid), sid
    assert engs[2].stats()[whole._find_group("mnp0").group_id]["subscription_shards"] == 3


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_a_durable_sharded_engine_reopens_and_goes_on(spark, tmp_path, monkeypatch):
    """A load rebuilds every shard from the rows; ``Engine(path=...)`` reopened rebuilds its shards from the rows
    kept and goes on equal to the whole engine, through a compaction of the shards' logs."""
    from sparksub import Engine
    from sparksub.control import box_shards
    rnd = random.Random(4)
    path = str(tmp_path / "eng")
    sharded, = make_engines(spark, [2], path=path)
    whole, = make_engines(spark, [0])
    rows: dict = {}
    queries: dict = {}
    subscribe([sharded, whole], rnd, queries, "d", 4, tags=("mn", "td"))
    batch = gen_batch(rnd, 12)
    seq0 = whole.next_seq
    got = [e.publish("pts", batch).collect() for e in (sharded, whole)]
    assert full_rows(got[0]) == full_rows(got[1])
    apply_rows(rows, batch, got[1], seq0)
    before = shard_bases(sharded)
    for e in (sharded, whole):
        e.load("pts", [{"id": 20, "a": 3.0, "b": 3.0, "v": -1.0}])
    rows[20] = {"a": 3.0, "b": 3.0, "v": -1.0}
    batch = gen_batch(rnd, 10)
    seq0 = whole.next_seq
    got = [e.publish("pts", batch).collect() for e in (sharded, whole)]
    assert full_rows(got[0]) == full_rows(got[1])
    apply_rows(rows, batch, got[1], seq0)
    assert all(a == b + 1 for g in before for a, b in zip(shard_bases(sharded)[g], before[g]))
    check(sharded, rows, queries)
    sharded.close()
    reopened = Engine(spark, path=path)
    reopened.range_subscription_shards = 2
    reopened.keep_workers_warm = None
    monkeypatch.setattr(box_shards, "LOG_COMPACTION_ROWS", 5)   # the second publish compacts every shard's log
    for _ in range(2):
        batch = gen_batch(rnd, 10)
        seq0 = whole.next_seq
        got = [e.publish("pts", batch).collect() for e in (reopened, whole)]
        assert full_rows(got[0]) == full_rows(got[1])
        apply_rows(rows, batch, got[1], seq0)
    assert list(shard_bases(reopened).values()) == [[2, 2], [2, 2]]   # built from the rows kept, then compacted
    check(reopened, rows, queries)
    reopened.close()
