"""Issue 19 part 3 through the engine: ``publish(..., mode='reformulated', variant=...)`` selects S-MN or CN+ for
range-MIN / MAX groups (000 §2.1.2, §2.2.2) and Paint-Sparse / Paint(ε) / Paint-Batch over Paint-Sparse for top-k
groups (002 §III-B, §IV-B, §IV-A); ``deliver`` turns each variant's messages into the rows a twin engine publishing
the same updates in unicast mode gives (per update for the per-update variants, as the net change of the batch
for Paint-Batch), and every subscriber's result stays the oracle's.  A bad variant raises before any change.

(The variant parameter is the engine change the helper's report gives; ``operators/shared/variants.py`` parses
it, the families read it from the mode.)"""
from __future__ import annotations

import random

import pytest

from sparksub import Engine

# publish(variant=...) is a path the extension only wraps in its pass-through node: run once (tests/conftest.py)
pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

MIN_SUBS = {
    "m1": "SELECT MIN(a) FROM r WHERE b BETWEEN 0 AND 2",
    "m2": "SELECT MIN(a) FROM r WHERE b BETWEEN 1 AND 1",
    "m3": "SELECT MIN(a) FROM r WHERE b >= 2",                   # an open end
    "m4": "SELECT MAX(a) FROM r WHERE b <= 1",
    "m5": "SELECT MAX(a) FROM r WHERE b BETWEEN 0 AND 3",
}
TOPK_SUBS = {
    "t1": "SELECT rk, a FROM r WHERE b BETWEEN 0 AND 2 ORDER BY a LIMIT 2",
    "t2": "SELECT rk, a FROM r WHERE b BETWEEN 1 AND 3 ORDER BY a LIMIT 3",
    "t3": "SELECT rk, a FROM r WHERE b >= 0 ORDER BY a DESC LIMIT 1",
    "t4": "SELECT rk FROM r WHERE b BETWEEN 2 AND 2 ORDER BY a LIMIT 2",
}


def engine(spark, subs):
    e = Engine(spark)
    e.sql("CREATE TABLE r (rk BIGINT PRIMARY KEY, a DOUBLE, b DOUBLE)")
    e.load("r", [{"rk": k, "a": float(k % 3), "b": float(k % 4)} for k in range(6)])
    for q, sql in subs.items():
        e.subscribe(q, sql)
    return e


def batches(seed=19, n=3, size=7):
    """Upserts with ties and NULLs, x-moves (b changes), deletes, a key twice in a batch."""
    rnd = random.Random(seed)
    live, out = set(range(6)), []
    for _ in range(n):
        batch = []
        for _ in range(size):
            k = rnd.randint(0, 8)
            if k in live and rnd.random() < 0.2:
                batch.append({"rk": k, "_op": "delete"})
                live.discard(k)
            else:
                batch.append({"rk": k, "a": rnd.choice([None, 0.0, 1.0, 1.0, 2.0, 5.0]),
                              "b": rnd.choice([None, 0.0, 1.0, 2.0, 3.0])})
                live.add(k)
        out.append(batch)
    return out


def rows(df, cols=("subscription_id", "op", "value", "seq", "item_key", "item_x")) -> list:
    def v(r, c):
        x = r.get(c)
        return None if x is None or x != x else x
    return sorted((tuple(v(r.asDict(), c) for c in cols) for r in df.collect()), key=repr)


@pytest.mark.parametrize("variant", ["S-MN", "CN+", "S-CN"])
def test_range_min_interfaces_deliver_the_unicast_rows(spark, variant):
    uni, ref = engine(spark, MIN_SUBS), engine(spark, MIN_SUBS)
    for batch in batches():
        msgs = ref.publish("r", batch, mode="reformulated", variant=variant)
        cols = msgs.columns
        assert ("targets" in cols) == (variant == "S-MN") and ("item_key" in cols) == (variant == "CN+")
        got = rows(ref.deliver(msgs), ("subscription_id", "op", "value", "seq"))
        assert got == rows(uni.publish("r", batch), ("subscription_id", "op", "value", "seq"))
    for q in MIN_SUBS:
        assert ref.result(q) == uni.result(q)


def test_range_min_variant_changes_between_publishes(spark):
    """The deliver side follows a change of variant (CN+'s network keeps a copy of the table: seeded again)."""
    uni, ref = engine(spark, MIN_SUBS), engine(spark, MIN_SUBS)
    for variant, batch in zip(["S-CN", "CN+", "S-MN", "CN+", "CN+"], batches(seed=5, n=5)):
        got = rows(ref.deliver(ref.publish("r", batch, mode="reformulated", variant=variant)),
                   ("subscription_id", "op", "value", "seq"))
        assert got == rows(uni.publish("r", batch), ("subscription_id", "op", "value", "seq")), variant
    for q in MIN_SUBS:
        assert ref.result(q) == uni.result(q)


@pytest.mark.parametrize("variant", ["Paint-Sparse", "Paint-Dense(0.5)", "Paint-Sparse(0.25)", "Paint-Dense"])
def test_topk_per_update_variants_deliver_the_unicast_rows(spark, variant):
    uni, ref = engine(spark, TOPK_SUBS), engine(spark, TOPK_SUBS)
    for batch in batches(seed=7):
        got = rows(ref.deliver(ref.publish("r", batch, mode="reformulated", variant=variant)))
        assert got == rows(uni.publish("r", batch))
    for q in TOPK_SUBS:
        assert ref.result(q) == uni.result(q)


@pytest.mark.parametrize("variant", ["Paint-Batch", "Paint-Batch-Sparse"])
def test_topk_batch_variants_end_each_batch_exact(spark, variant):
    """Paint-Batch's subscribers are exact at the end of each batch: deliver's rows (each subscriber's net
    change over the batch), replayed on the lists before, give the lists a unicast twin ends with."""
    uni, ref = engine(spark, TOPK_SUBS), engine(spark, TOPK_SUBS)
    lists = {q: {str(r["rk"]) for r in ref.result(q)} for q in TOPK_SUBS}
    for batch in batches(seed=11):
        for r in ref.deliver(ref.publish("r", batch, mode="reformulated", variant=variant)).collect():
            if r["op"] == "leave":
                lists[r["subscription_id"]].discard(r["item_key"])
            else:
                lists[r["subscription_id"]].add(r["item_key"])
        uni.publish("r", batch).collect()
        for q in TOPK_SUBS:
            assert lists[q] == {str(r["rk"]) for r in uni.result(q)}, (variant, q)
            assert ref.result(q) == uni.result(q)


def test_both_families_in_one_publish(spark):
    subs = {**MIN_SUBS, **TOPK_SUBS}
    uni, ref = engine(spark, subs), engine(spark, subs)
    for batch in batches(seed=3):
        msgs = ref.publish("r", batch, mode="reformulated", variant=["CN+", "Paint-Sparse(1)"])
        assert rows(ref.deliver(msgs)) == rows(uni.publish("r", batch))


def test_a_bad_variant_changes_nothing(spark):
    e = engine(spark, {**MIN_SUBS, **TOPK_SUBS})
    before = {q: e.result(q) for q in (*MIN_SUBS, *TOPK_SUBS)}
    batch = batches(seed=1, n=1)[0]
    with pytest.raises(ValueError, match="needs mode='reformulated'"):
        e.publish("r", batch, mode="unicast", variant="S-MN")
    with pytest.raises(ValueError, match="unknown variant 'S-XX'"):
        e.publish("r", batch, mode="reformulated", variant="S-XX")
    with pytest.raises(ValueError, match=r"ε must be a number in \(0, 1\]"):
        e.publish("r", batch, mode="reformulated", variant="Paint-Sparse(0)")
    with pytest.raises(ValueError, match="both choose"):
        e.publish("r", batch, mode="reformulated", variant=["S-MN", "CN+"])
    assert {q: e.result(q) for q in before} == before
