"""RANGE_TOPK's rows in X zones through Spark (``Engine.range_zones``; ``operators/topk/zones.py``; issue 16 item 4):
per publish one job where each zone writes its edge objects, then the zones' job, each painting Paint-Dense's steps
at the X it owns over its rows and its halos; the subscriptions in shards as before.  Against the same engine run
whole (``range_subscription_shards = 0``) row for row -- unicast, reformulated in Paint-Dense and deliver() -- and
every result against a brute force over the table (ascending and descending, ties in y, NULL x and y, deletes,
X-moves across the cuts and back within a batch, a key several times in a batch, a new k mid-run); a reformulated
publish in the default Paint-Batch runs the group whole (its messages span the zones) and the zones are rebuilt
after; results read where the zones are cached agree."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from sparksub.operators.shared.variants import with_variant

sys.path.insert(0, str(Path(__file__).parent))   # the sharded range classes' engine test: engines, batches, rows
from test_range_shards_engine import apply_rows, full_rows, gen_batch, in_range, make_engines  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

ASC = "SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y LIMIT :k"
DESC = "SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y DESC LIMIT :k"


def top(rows, lo, hi, k, desc):
    live = [((-r["y"] if desc else r["y"]), key) for key, r in rows.items()
            if in_range(r, lo, hi) and r["y"] is not None]
    return [key for _, key in sorted(live)[:k]]


def test_topk_rows_in_x_zones_equal_whole_and_the_oracle(spark):
    rnd = random.Random(5)
    zoned, whole = engs = make_engines(spark, [2, 0])
    zoned.range_zones = 3
    rows: dict = {100 + i: {"x": float(rnd.randint(0, 9)), "y": float(rnd.randint(0, 3)), "tag": None}
                  for i in range(14)}
    for e in engs:
        e.load("t", [{"k": key, **r} for key, r in rows.items()])
    queries: dict = {}
    ids = [f"{i}" for i in range(12)]
    lo = [float(rnd.randint(0, 8)) for _ in ids]
    hi = [a + rnd.randint(0, 5) for a in lo]
    ks = [rnd.randint(1, 4) for _ in ids]
    for template, desc, tag in ((ASC, False, "a"), (DESC, True, "d")):
        for e in engs:
            e.subscribe_many(template, {"id": [f"{tag}{i}" for i in ids], "lo": lo, "hi": hi, "k": ks})
        queries.update({f"{tag}{i}": (lo[n], hi[n], ks[n], desc) for n, i in enumerate(ids)})

    def publish(batch, mode="unicast"):
        frames = [e.publish("t", batch, mode=mode) for e in engs]
        got = [f.collect() for f in frames]
        assert [r.reason for r in got[0] if r.op == "error"] == []
        assert full_rows(got[0]) == full_rows(got[1])
        if mode != "unicast":
            delivered = [e.deliver(f.filter("op != 'rejected'")).collect() for e, f in zip(engs, frames)]
            assert full_rows(delivered[0]) == full_rows(delivered[1])
        apply_rows(rows, batch)

    def check():
        for sid, (a, b, k, desc) in queries.items():
            got = [r["k"] for r in zoned.result(sid)]
            assert got == [r["k"] for r in whole.result(sid)], sid
            assert got == top(rows, a, b, k, desc), sid

    dense = with_variant("reformulated", "paint-dense")
    for step in range(5):
        batch = gen_batch(rnd, 14, rows)
        if step == 1:     # one key across every cut and back within one batch
            batch += [{"k": 2, "x": x, "y": y, "tag": None} for x, y in ((0.0, 1.0), (9.0, 2.0), (4.0, 0.5))]
        if step == 3:     # a k no subscription had: the zones paint for it from now on (a log entry)
            for e in engs:
                e.subscribe("a-late", "SELECT k, y FROM t WHERE x BETWEEN 2 AND 8 ORDER BY y LIMIT 6")
            queries["a-late"] = (2.0, 8.0, 6, False)
        publish(batch, dense if step == 2 else "unicast")
        check()
    states = [zoned._range_shard_states[g.group_id] for g in zoned._groups.values()]
    assert all(len(rs.zones) == 3 and len(rs.cuts) == 2 and rs.rebuilds == 1 for rs in states)
    assert all(rs.timings.get("edges_job_s", 0) > 0 for rs in states)
    stats = zoned.stats()
    for g in zoned._groups.values():
        assert stats[g.group_id]["layout"] == "rows in 3 X zones × 2 subscription shards"
        assert sum(stats[g.group_id]["zone_rows"]) == sum(r["x"] is not None and r["y"] is not None
                                                           for r in rows.values())
    # the default reformulated form (Paint-Batch) spans the zones: the group runs whole, its zones rebuilt after
    publish(gen_batch(rnd, 10, rows), "reformulated")
    check()
    publish(gen_batch(rnd, 10, rows))
    check()
    assert all(rs.rebuilds == 2 for rs in states)
    zoned.driver_operator_limit = 0        # read where the zones are cached
    check()
    # a zone whose state cannot be read fails the edges job: its group's error row (the group in group_id, the zone
    # in the reason), the other group's notifications still out; the group is rebuilt, so what follows is exact
    from sparksub.runtime import replicas as spark_replicas
    broken_rs = states[0]
    gid, rid = broken_rs.zones[1].replica_id.rpartition("#")[0], broken_rs.zones[1].replica_id
    broken_rs.zones[1] = spark_replicas.new_base(zoned.directory, zoned.uid, rid, b"not a snapshot")
    batch = gen_batch(rnd, 10, rows)
    got, want = (e.publish("t", batch).collect() for e in engs)
    apply_rows(rows, batch)
    errors = [r for r in got if r.op == "error"]
    assert [r.group_id for r in errors] == [gid]
    assert f"edge objects: {rid}: " in errors[0].reason and "UnpicklingError" in errors[0].reason
    other = states[1].zones[0].replica_id.rpartition("#")[0]
    assert full_rows(r for r in got if r.group_id == other) == full_rows(r for r in want if r.group_id == other)
    assert not [r for r in got if r.group_id == gid and r.op != "error"]
    check()
    publish(gen_batch(rnd, 10, rows))
    check()
