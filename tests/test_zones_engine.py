"""RANGE_MIN / RANGE_MAX groups run in X zones in Spark (DS-CN, 000 §2.3.2; issue 16 item 4: ``Engine.range_zones``,
control/zones.py, runtime/zones.py) against two independent oracles: the whole-group engine (one task, the S-CN
core) as a twin fed the same operations -- output row for row -- and a brute-force MIN / MAX recomputed from the
table's rows (``result`` and the unicast / delivered notifications).  Few and small: every publish here is a
Spark job or three."""
from __future__ import annotations

import os
import random

import pytest

from sparksub import Engine

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

TABLE = "CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)"


def oracle(rows: dict, lo, hi, maximum: bool):
    ys = [y for x, y in rows.values() if x is not None and y is not None and lo <= x <= hi]
    return (max(ys) if maximum else min(ys)) if ys else None


def workload(seed: int, n_rows=60, n_batches=4, batch=40):
    """Rows with tied X and Y, then batches of inserts, deletes, NULL X / Y, X-moves (across zone edges: X
    is drawn afresh) and the same key more than once in a batch; one row with an infinite Y (rejected)."""
    rnd = random.Random(seed)
    rows = {f"k{i}": (float(rnd.randint(0, 30)), float(rnd.randint(0, 20))) for i in range(n_rows)}
    live, nxt, batches = dict(rows), n_rows, []
    for b in range(n_batches):
        out = []
        for _ in range(batch):
            r = rnd.random()
            if r < 0.12 and live:
                k = rnd.choice(sorted(live))
                out.append({"symbol": k, "risk": None, "per": None, "_op": "delete"})
                live.pop(k)
            elif r < 0.25:
                k = f"k{nxt}"
                nxt += 1
                live[k] = (float(rnd.randint(0, 30)), float(rnd.randint(0, 20)))
                out.append({"symbol": k, "risk": live[k][0], "per": live[k][1], "_op": "upsert"})
            elif r < 0.32 and live:   # a NULL X or Y: out of every range (the row stays in the table)
                k = rnd.choice(sorted(live))
                x, y = live[k]
                x, y = (None, y) if rnd.random() < 0.5 else (x, None)
                live[k] = (x, y)
                out.append({"symbol": k, "risk": x, "per": y, "_op": "upsert"})
            elif live:
                k = rnd.choice(sorted(live))
                x = float(rnd.randint(0, 30)) if r < 0.6 or live[k][0] is None else live[k][0]
                live[k] = (x, float(rnd.randint(0, 20)))
                out.append({"symbol": k, "risk": x, "per": live[k][1], "_op": "upsert"})
        if b == 1:
            out.insert(3, {"symbol": "bad", "risk": 1.0, "per": float("inf"), "_op": "upsert"})
        batches.append(out)
    return rows, batches


def engines(spark, rows, subs, maximum, zones=3, path=None):
    agg = "MAX" if maximum else "MIN"
    out = []
    for z in (0, zones):
        e = Engine(spark, path=path if z else None)
        e.range_zones = z
        e.sql(TABLE)
        e.load("stock", [{"symbol": k, "risk": x, "per": y} for k, (x, y) in rows.items()])
        e.subscribe_many(f"SELECT {agg}(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                         {"id": list(subs), "lo": [a for a, _ in subs.values()], "hi": [b for _, b in subs.values()]})
        out.append(e)
    return out


def apply_rows(state: dict, batch: list) -> None:
    for u in batch:
        if u["per"] == float("inf"):
            continue
        if u["_op"] == "delete":
            state.pop(u["symbol"], None)
        else:
            state[u["symbol"]] = (u["risk"], u["per"])


def rows_of(df):
    return df.collect()


def test_zoned_equals_whole_group_and_brute_force(spark, maximum=False):
    rows, batches = workload(11 + maximum)
    rnd = random.Random(3)
    subs = {f"s{i}": tuple(sorted((float(rnd.randint(-2, 32)), float(rnd.randint(-2, 32))))) for i in range(50)}
    whole, zoned = engines(spark, rows, subs, maximum)
    gid = next(iter(zoned.stats()))
    state = dict(rows)
    for n, batch in enumerate(batches):
        mode = "unicast" if n % 2 else "reformulated"
        if n == 2:   # a subscription added between publishes: new shard bases, the zones' bases unchanged
            zs = zoned._zone_states[gid]
            zone_bases, shard_bases = [r.base_id for r in zs.zones], [r.base_id for r in zs.shards]
            for e in (whole, zoned):
                e.subscribe("late", f"SELECT {'MAX' if maximum else 'MIN'}(per) FROM stock WHERE risk BETWEEN 4 AND 17")
            subs["late"] = (4.0, 17.0)
        a = whole.publish("stock", batch, mode=mode)
        b = zoned.publish("stock", batch, mode=mode)
        got, want = rows_of(b), rows_of(a)
        before = dict(state)
        apply_rows(state, batch)
        if mode == "reformulated":
            assert got == want                     # message for message, in batch order
            da, db = rows_of(whole.deliver(a)), rows_of(zoned.deliver(b))
            assert sorted(db, key=repr) == sorted(da, key=repr)
            got = db
        else:
            assert sorted(got, key=repr) == sorted(want, key=repr)
        assert any(r.op == "rejected" for r in rows_of(b)) == (n == 1)
        if n == 2:
            zs = zoned._zone_states[gid]
            assert [r.base_id for r in zs.zones] == zone_bases
            assert [r.base_id for r in zs.shards] != shard_bases or mode != "unicast"
        # brute force over the whole batch: each subscription's last notified value is its new MIN / MAX
        notified = {}
        for r in sorted((r for r in got if r.op not in ("rejected", "error")), key=lambda r: r.seq):
            notified[r.subscription_id] = r.value
        for s, (lo, hi) in subs.items():
            if oracle(state, lo, hi, maximum) != oracle(before, lo, hi, maximum):
                assert s in notified and notified[s] == oracle(state, lo, hi, maximum)
        for s, (lo, hi) in subs.items():
            assert zoned.result(s) == oracle(state, lo, hi, maximum)
    st = zoned.stats()[gid]
    assert st["zoned"] and len(st["zones"]) == 3 and sum(z["rows"] for z in st["zones"]) == st["tuples"]
    assert sorted(z["partition"] for z in st["zones"]) == [0, 1, 2]        # one zone per task
    assert 0 < st["round1_fraction"] <= 1 and sum(s["subscriptions"] for s in st["shards"]) == len(subs)
    text = zoned.explain("late")
    assert "3 X zones cut at" in text and "shards by x1" in text


def test_a_large_zoned_group_is_read_where_its_zones_live(spark):
    """Past ``driver_operator_limit`` a zoned group's ``result()`` and deliver()'s seed run one task per zone
    (``runtime/remote.py``'s ``call_on_each``): the answers equal the rows' and the whole-group twin's, and the
    driver builds no zone (its rebuild counter stays 0, where reading on the driver builds every zone)."""
    rows, batches = workload(21, n_batches=3)
    rnd = random.Random(5)
    subs = {f"s{i}": tuple(sorted((float(rnd.randint(-2, 32)), float(rnd.randint(-2, 32))))) for i in range(30)}
    whole, zoned = engines(spark, rows, subs, maximum=False)
    zoned.driver_operator_limit = 0
    state = dict(rows)
    for n, batch in enumerate(batches):
        mode = "reformulated" if n == 2 else "unicast"
        a, b = whole.publish("stock", batch, mode=mode), zoned.publish("stock", batch, mode=mode)
        apply_rows(state, batch)
        for s, (lo, hi) in subs.items():
            assert zoned.result(s) == oracle(state, lo, hi, False) == whole.result(s), (n, s)
    # the deliver() side seeded from the zones where they live (every subscription's value, the rows for CN+)
    da, db = rows_of(whole.deliver(a)), rows_of(zoned.deliver(b))
    assert sorted(db, key=repr) == sorted(da, key=repr) and db
    driver = zoned.runtime_stats()["runtime"].get("driver", {})
    assert driver.get("rebuilds", 0) == 0 and driver.get("catch_ups", 0) == 0, driver


def test_failed_zone_is_an_error_row_then_rebuilt_and_durable_reopen(spark, tmp_path):
    from sparksub.runtime import replicas as spark_replicas
    rows, batches = workload(5, n_batches=4)
    rnd = random.Random(9)
    subs = {f"s{i}": tuple(sorted((float(rnd.randint(-2, 32)), float(rnd.randint(-2, 32))))) for i in range(30)}
    whole, zoned = engines(spark, rows, subs, True, zones=2, path=tmp_path / "eng")   # MAX here
    gid = next(iter(zoned.stats()))
    a, b = whole.publish("stock", batches[0]), zoned.publish("stock", batches[0])
    assert sorted(rows_of(b), key=repr) == sorted(rows_of(a), key=repr)
    # zone 1 loses its base file and no worker holds it: its task fails
    zs = zoned._zone_states[gid]
    os.unlink(zs.zones[1].base_path)
    zs.zones[1] = spark_replicas.cold(zs.zones[1])
    out = rows_of(zoned.publish("stock", batches[1]))
    assert [r.group_id for r in out if r.op == "error"] == [gid] and all(r.op in ("error", "rejected") for r in out)
    whole.publish("stock", batches[1])
    # rebuilt from the table's rows next time: equal again
    a, b = whole.publish("stock", batches[2], mode="unicast"), zoned.publish("stock", batches[2], mode="unicast")
    assert sorted(rows_of(b), key=repr) == sorted(rows_of(a), key=repr)
    zoned.close()
    again = Engine(spark, path=tmp_path / "eng")
    again.range_zones = 2
    a = whole.publish("stock", batches[3], mode="reformulated")
    b = again.publish("stock", batches[3], mode="reformulated")
    assert rows_of(b) == rows_of(a)
    assert again.stats()[gid]["zoned"]
    state = dict(rows)
    for batch in batches:
        apply_rows(state, batch)
    for s, (lo, hi) in subs.items():
        assert again.result(s) == oracle(state, lo, hi, True)
    again.close()


def test_zoned_s_mn_and_cn_plus_equal_the_whole_groups_and_brute_force(spark):
    """The two other reformulated variants run zoned: S-MN (000 §2.1.2: the shards' S-UN entries merged into one
    message per (seq, new value), ``targets`` in the registry's slot order) and CN+ (000 §2.2.2: the updates
    themselves, from round 1).  A MIN and a MAX group on one table (one job for both groups' zones, one for
    their shards), the variants alternating (deliver() re-seeds from the zones at each switch, as it does for
    the whole group), subscriptions dropped and added between publishes (the registry reuses their slots),
    empty ranges; against the whole-group twin row for row and the brute force through deliver()."""
    rows, batches = workload(31, n_batches=4)
    rnd = random.Random(7)
    subs = {f"s{i}": tuple(sorted((float(rnd.randint(-2, 32)), float(rnd.randint(-2, 32))))) for i in range(36)}
    subs.update({"e1": (-5.0, -1.0), "e2": (30.5, 30.9)})      # empty ranges, always
    whole, zoned = (Engine(spark) for _ in range(2))
    zoned.range_zones = 3
    for e in (whole, zoned):
        e.sql(TABLE)
        e.load("stock", [{"symbol": k, "risk": x, "per": y} for k, (x, y) in rows.items()])
        for agg in ("MIN", "MAX"):
            e.subscribe_many(f"SELECT {agg}(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                             {"id": [f"{agg}{s}" for s in subs], "lo": [a for a, _ in subs.values()],
                              "hi": [b for _, b in subs.values()]})
    state = dict(rows)
    variants = ["S-MN", "CN+", "S-MN", "CN+"]
    for n, (batch, variant) in enumerate(zip(batches, variants)):
        if n == 2:   # a subscription dropped and two added: their slots are reused, the shards rebuilt
            for e in (whole, zoned):
                for agg in ("MIN", "MAX"):
                    e.unsubscribe(f"{agg}s3")
                    e.subscribe(f"{agg}late", f"SELECT {agg}(per) FROM stock WHERE risk BETWEEN 4 AND 17")
                    e.subscribe(f"{agg}wide", f"SELECT {agg}(per) FROM stock WHERE risk BETWEEN -9 AND 99")
            subs.pop("s3")
            subs.update({"late": (4.0, 17.0), "wide": (-9.0, 99.0)})
        counted = {g: dict(zs.counters) for g, zs in zoned._zone_states.items()}
        a = whole.publish("stock", batch, mode="reformulated", variant=variant)
        b = zoned.publish("stock", batch, mode="reformulated", variant=variant)
        for g, zs in zoned._zone_states.items():   # CN+: no step deferred, no round 2 (S-MN: some, on this seed)
            c, c0 = zs.counters, counted.get(g, {"updates": 0, "updates_round1": 0})
            deferred = (c["updates"] - c0["updates"]) - (c["updates_round1"] - c0["updates_round1"])
            assert (deferred == 0) == (variant == "CN+"), (n, g, deferred)
        got, want = rows_of(b), rows_of(a)
        # message for message within each group, targets lists included (the two groups' rows come in either
        # order: the whole groups' job and the zones' job are unioned)
        for g in {r.group_id for r in got + want}:
            assert [r for r in got if r.group_id == g] == [r for r in want if r.group_id == g], (n, variant, g)
        assert len(got) == len(want) and got
        messages = [r for r in got if r.op not in ("rejected", "error")]
        assert messages and all((r.asDict().get("targets") is not None) == (variant == "S-MN") for r in messages)
        assert all((r.asDict().get("item_key") is not None) == (variant == "CN+") for r in messages)
        # (a rejected row has no group: deliver() refuses it, whole or zoned alike)
        da, db = (rows_of(e.deliver(df.filter("op <> 'rejected'"))) for e, df in ((whole, a), (zoned, b)))
        assert sorted(db, key=repr) == sorted(da, key=repr) and db
        before = dict(state)
        apply_rows(state, batch)
        notified = {}
        for r in sorted(db, key=lambda r: r.seq):
            notified[r.subscription_id] = r.value
        for agg, maximum in (("MIN", False), ("MAX", True)):
            for s, (lo, hi) in subs.items():
                now = oracle(state, lo, hi, maximum)
                if now != oracle(before, lo, hi, maximum):
                    assert notified[f"{agg}{s}"] == now, (n, agg, s)
                else:
                    assert f"{agg}{s}" not in notified or notified[f"{agg}{s}"] == now
                assert zoned.result(f"{agg}{s}") == now
    assert len(zoned._zone_states) == 2
    for gid in zoned._zone_states:
        st = zoned.stats()[gid]
        assert st["zoned"] and st["batches"] == len(batches) and len(st["zones"]) == 3, gid
    # a subscription shard that loses its base (held by no worker) fails S-MN's shard task: its group's 'error'
    # row, the other group's messages as the whole group's
    from sparksub.runtime import replicas as spark_replicas
    gid = sorted(zoned._zone_states)[0]
    zs = zoned._zone_states[gid]
    os.unlink(zs.shards[1].base_path)
    zs.shards[1] = spark_replicas.cold(zs.shards[1])
    move = [{"symbol": "k1", "risk": 15.5, "per": 0.5, "_op": "upsert"}]
    got = rows_of(zoned.publish("stock", move, mode="reformulated", variant="S-MN"))
    want = rows_of(whole.publish("stock", move, mode="reformulated", variant="S-MN"))
    assert [r.group_id for r in got if r.op == "error"] == [gid]
    assert [r for r in got if r.group_id != gid] == [r for r in want if r.group_id != gid]


def test_the_zone_setting(monkeypatch):
    """``range_zones``: None = one task below RANGE_ZONE_ROWS rows, else ``parallelism`` zones; an int >= 2 forces
    it; 0 / 1 one task; every reformulated variant alike (no Spark job runs here)."""
    from sparksub.control import zones
    from sparksub.operators.shared.variants import with_variant
    e = Engine()
    e.sql(TABLE)
    e.load("stock", [{"symbol": f"k{i}", "risk": float(i), "per": 1.0} for i in range(10)])
    e.subscribe("s", "SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 5")
    entry = next(iter(e._groups.values()))
    state = e._table("stock")
    e.parallelism = 3
    assert e._zone_count(state, entry, "reformulated") == 0
    monkeypatch.setattr(zones, "RANGE_ZONE_ROWS", 10)
    assert e._zone_count(state, entry, "reformulated") == 3 and e._zone_count(state, entry, "unicast") == 3
    assert e._zone_count(state, entry, with_variant("reformulated", "S-MN")) == 3
    assert e._zone_count(state, entry, with_variant("reformulated", "CN+")) == 3
    e.range_zones = 1
    assert e._zone_count(state, entry, "unicast") == 0
    e.range_zones = 4
    assert e._zone_count(state, entry, "unicast") == 4
