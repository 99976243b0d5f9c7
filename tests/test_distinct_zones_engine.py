"""RANGE_DISTINCT's rows in X zones with a second round, through Spark (``Engine.range_zones``;
``operators/distinct/zones.py``, ``runtime/range_shards.run_second_round``): a task per zone emits its messages with
the Mar ends its own tuples close, a second job over the zones answers the open ends as of each message's seq, and
whoever reads the publish's messages closes and merges them.  Unicast and reformulated publishes and deliver() equal
the whole engine's row for row (every column, ``msg_no`` too); every result equals a brute-force DISTINCT over the
table, on the driver and read where the zones are cached; values shared across the cuts, text and numbers, NULL x and
y, deletes, keys moving across every cut and back in one batch; an empty table stays one replica; a load rebuilds
the zones, a change of the zone count re-cuts them."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.test_range_shards_engine import apply_rows, gen_batch, in_range, make_engines

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

QUERIES = (("SELECT DISTINCT tag FROM t WHERE x BETWEEN :lo AND :hi", "tag", "d"),
           ("SELECT DISTINCT y FROM t WHERE x BETWEEN :lo AND :hi", "y", "n"))


def full_rows(out):
    return [tuple(sorted(r.asDict().items())) for r in out]


def multiset(out):
    """Unicast rows as a multiset: the shards' tasks give them in no set order."""
    return Counter(full_rows(out))


def test_distinct_rows_in_x_zones_equal_whole_and_the_oracle(spark):
    rnd = random.Random(23)
    zoned, whole = engs = make_engines(spark, [2, 0])
    zoned.range_zones = 3
    rows: dict = {}
    queries: dict = {}
    bounds = [(float(a), float(a + rnd.randint(0, 5))) for a in (rnd.randint(0, 8) for _ in range(12))]
    for template, column, tag in QUERIES:
        ids = [f"{tag}{i}" for i in range(len(bounds))]
        for e in engs:
            e.subscribe_many(template, {"id": ids, "lo": [a for a, _ in bounds], "hi": [b for _, b in bounds]})
        queries.update({sid: (column, *ab) for sid, ab in zip(ids, bounds)})

    def publish(batch, mode="unicast"):
        frames = [e.publish("t", batch, mode=mode) for e in engs]
        got = [f.collect() for f in frames]
        assert [r.reason for r in got[0] if r.op == "error"] == []
        if mode == "reformulated":     # the messages themselves: row for row in (seq, msg_no) order
            ordered = [sorted(full_rows(g), key=lambda r: (dict(r)["group_id"], dict(r)["seq"], dict(r)["msg_no"]))
                       for g in got]
            assert ordered[0] == ordered[1]
            delivered = [e.deliver(f.filter("op != 'rejected'")).collect() for e, f in zip(engs, frames)]
            assert multiset(delivered[0]) == multiset(delivered[1])
        else:
            assert multiset(got[0]) == multiset(got[1])
        apply_rows(rows, batch)

    def check():
        for sid, (column, a, b) in queries.items():
            want = {r[column] for r in rows.values() if in_range(r, a, b) and r[column] is not None}
            got = zoned.result(sid)
            assert got == whole.result(sid), sid
            assert set(got) == want, (sid, got, want)

    publish(gen_batch(rnd, 5, rows))      # an empty table: no cut points, the rows in one replica
    check()
    states = [zoned._range_shard_states[g.group_id] for g in zoned._groups.values()
              if g.physical.klass == "RANGE_DISTINCT"]
    assert len(states) == 2 and all(len(rs.zones) == 1 and not rs.cuts for rs in states)
    loaded = {100 + i: {"x": float(rnd.randint(0, 9)), "y": float(rnd.randint(0, 2)), "tag": rnd.choice("ab")}
              for i in range(16)}
    for e in engs:     # the rows change behind the replicas' back: new bases from the table's rows, cut now
        e.load("t", [{"k": key, **r} for key, r in loaded.items()])
    rows.update(loaded)
    for step in range(4):
        batch = gen_batch(rnd, 16, rows)
        if step == 1:     # one key across every cut and back within one batch, its values unchanged
            batch += [{"k": 100, "x": x, "y": rows[100]["y"], "tag": rows[100]["tag"]} for x in (0.0, 9.0, 4.0)]
        publish(batch, "reformulated" if step in (2, 3) else "unicast")
        check()
    assert all(len(rs.zones) == 3 and len(rs.cuts) == 2 for rs in states)
    assert all(rs.timings["second_round_job_s"] > 0 for rs in states)
    stats = zoned.stats()
    for g in zoned._groups.values():
        if g.physical.klass == "RANGE_DISTINCT":
            assert stats[g.group_id]["layout"] == "rows in 3 X zones × 2 subscription shards"
            column = g.physical.y
            assert sum(stats[g.group_id]["zone_rows"]) == sum(r["x"] is not None and r[column] is not None
                                                               for r in rows.values())
    assert "second round" in zoned.explain("d0")
    zoned.driver_operator_limit = 0        # read where the zones are cached
    check()
    # another zone count: new cuts, new zone bases
    zoned.range_zones = 2
    publish(gen_batch(rnd, 12, rows))
    check()
    assert all(len(rs.zones) == 2 and len(rs.cuts) == 1 for rs in states)
