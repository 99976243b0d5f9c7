"""The pure parts of a sharded range group (``operators/shared/range_shards.py``; issue 16 item 4): the rows'
operator without subscriptions emits per-update messages, the subscriptions split by a hash of their id into
shards whose subscribers (``XSubscribers.from_seed``) keep their results -- and the shards' union of unicast rows
equals the whole group's unicast rows, row for row, on random batches (upserts, deletes, X-moves, a key repeated
in a batch, NULL x and y, ties, empty ranges x1 > x2, k larger than the range), batch after batch, with
subscriptions added (a new k: the rows' ``PaintedKs`` entry) and shards rebuilt from the rows' core between
batches; reformulated batches (the rows in ``rows_mode``) equal the whole group's, and logged to the shards.
No Spark."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.agg.group import AggSnapshot
from sparksub.operators.distinct.group import DistinctSnapshot
from sparksub.operators.shared.range_shards import (
    RangeShardBase,
    ShardedRangeView,
    rows_extra,
    rows_mode,
    shard_bases,
)
from sparksub.operators.shared.variants import with_variant
from sparksub.operators.topk.group import PaintedKs, TopkSnapshot

SNAPSHOTS = {"topk": (TopkSnapshot, True), "topk_asc": (TopkSnapshot, False), "distinct": (DistinctSnapshot, None),
             "sum": (AggSnapshot, "sum"), "avg": (AggSnapshot, "avg"), "count": (AggSnapshot, "count")}
#: the key kinds a table may have as a top-k core ranks them: int, or text (``families.key_type``)
KEYS = {"int": (lambda i: i, int), "str": (lambda i: f"k{i}", str)}


def snapshot(kind, rows, ids, x1, x2, k, extra=None):
    cls, option = SNAPSHOTS[kind]
    keys = np.array(list(rows), dtype=object)
    xs = np.array([np.nan if r[0] is None else r[0] for r in rows.values()], dtype=np.float64)
    if kind == "distinct":
        ys = np.array([r[2] for r in rows.values()], dtype=object)
    elif kind == "count":        # COUNT(*): the engine's snapshot reads x as y (any row with an x counts)
        ys = xs.copy()
    else:
        ys = np.array([np.nan if r[1] is None else r[1] for r in rows.values()], dtype=np.float64)
    return cls("g", "t", "x", None if kind == "count" else "y", option, np.asarray(ids, dtype=object),
               np.asarray(x1, dtype=np.float64), np.asarray(x2, dtype=np.float64), np.asarray(k, dtype=np.int64),
               keys, xs, ys, extra=extra or {})


def gen_batch(rnd, key_of, seq, n, distinct, count=False):
    """A batch as the engine gives a group (``RangeFamily.group_batch``): a text DISTINCT's values in ``y_text``
    (its float ``y`` null), COUNT(*)'s ``y`` zeros."""
    cols = {"key": [], "x": [], "y": [], "op": [], "seq": [], "y_text": []}
    for i in range(n):
        roll = rnd.random()
        cols["key"].append(key_of(rnd.randint(0, 11)))
        cols["x"].append(None if roll < 0.12 else float(rnd.randint(0, 9)))
        cols["y"].append(None if distinct else 0.0 if count else
                         None if 0.12 <= roll < 0.18 else float(rnd.randint(0, 3)))     # few values: ties
        cols["op"].append(1 if roll > 0.8 else 0)
        cols["seq"].append(seq + i)
        cols["y_text"].append(rnd.choice(["a", "b", "c", None]))
    key_type = pa.string() if isinstance(cols["key"][0], str) else \
        pa.float64() if isinstance(cols["key"][0], float) else pa.int64()
    t = {"key": pa.array(cols["key"], key_type), "x": pa.array(cols["x"], pa.float64()),
         "y": pa.array(cols["y"], pa.float64()), "op": pa.array(cols["op"], pa.int8()),
         "seq": pa.array(cols["seq"], pa.int64())}
    if distinct:
        t["y_text"] = pa.array(cols["y_text"], pa.string())
    return pa.table(t)


def apply_rows(rows, batch, distinct):
    for r in batch.to_pylist():
        if r["op"] == 1:
            rows.pop(r["key"], None)
        else:
            rows[r["key"]] = (r["x"], r["y"], r.get("y_text") if distinct else r["y"])


def subscriptions(rnd, prefix, n):
    ids = [f"{prefix}{i}" for i in range(n)]
    x1 = [float(rnd.randint(0, 8)) for _ in ids]
    x2 = [a + rnd.randint(-2, 5) for a in x1]          # some empty ranges (x1 > x2)
    k = [rnd.randint(1, 5) for _ in ids]               # some k larger than the range
    return ids, x1, x2, k


def rows_table_counter(t: pa.Table) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in t.to_pylist())


def two_forms(rnd, kind, n_shards, key_of, parse):
    """Random rows and subscriptions, and the group in both forms: ``(rows, (ids, x1, x2, k), whole group, rows'
    operator without subscriptions, {shard: RangeShard})``."""
    distinct = kind == "distinct"
    rows = {}
    apply_rows(rows, gen_batch(rnd, key_of, 0, 8, distinct, kind == "count"), distinct)
    ids, x1, x2, k = subscriptions(rnd, "s", rnd.randint(1, 12))
    whole = snapshot(kind, rows, ids, x1, x2, k).build()
    rows_group = snapshot(kind, rows, [], [], [], [], rows_extra(whole.kind, k)).build()
    shards = {j: b.build() for j, b in shard_bases(rows_group, "g", ids, x1, x2, k, n_shards, parse).items()}
    return rows, (ids, x1, x2, k), whole, rows_group, shards


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(sorted(SNAPSHOTS)), n_shards=st.integers(1, 4),
       key=st.sampled_from(sorted(KEYS)))
def test_shards_union_is_the_whole_groups_unicast(seed, kind, n_shards, key):
    rnd = random.Random(seed)
    key_of, parse = KEYS[key]
    distinct = kind == "distinct"
    rows, (ids, x1, x2, k), whole, rows_group, shards = two_forms(rnd, kind, n_shards, key_of, parse)
    seq = 100
    for step in range(4):
        if step == 2:   # new subscriptions (new k values): the rows paint for them, their shards get new bases
            more = subscriptions(rnd, "n", rnd.randint(1, 4))
            ids, x1, x2, k = ids + more[0], x1 + more[1], x2 + more[2], k + more[3]
            if whole.kind == "RANGE_TOPK":
                rows_group.apply(PaintedKs(tuple(sorted(set(k)))), "none")
            whole = snapshot(kind, rows, ids, x1, x2, k).build()
            touched = {j for j, b in shard_bases(rows_group, "g", more[0], more[1], more[2], more[3], n_shards,
                                                 parse).items() if len(b)}
            rebuilt = shard_bases(rows_group, "g", ids, x1, x2, k, n_shards, parse, only=touched)
            shards.update({j: b.build() for j, b in rebuilt.items()})
        batch = gen_batch(rnd, key_of, seq, rnd.randint(1, 12), distinct, kind == "count")
        seq += batch.num_rows
        want = whole.apply(batch, "unicast")
        messages = rows_group.apply(batch, "reformulated")
        assert set(messages.column("seq").to_pylist()) <= set(batch.column("seq").to_pylist())   # per update
        got = pa.concat_tables([s.unicast(messages) for s in shards.values()])
        assert rows_table_counter(got) == rows_table_counter(want), (kind, step)
        apply_rows(rows, batch, distinct)
    # the view reads each result from the rows' core, as the whole group does
    view = ShardedRangeView(rows_group, lambda sid: (x1[ids.index(sid)], x2[ids.index(sid)], k[ids.index(sid)]),
                            len(ids), [{"shard": j, "subscriptions": len(s)} for j, s in shards.items()])
    for sid in ids:
        assert view.result(sid) == whole.result(sid)
    assert view.stats()["layout"] == f"rows in 1 replica × {n_shards} subscription shards"
    assert "rows in 1 replica" in view.explain()["layout"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(sorted(SNAPSHOTS)), n_shards=st.integers(1, 3),
       variant=st.sampled_from([None, "Paint-Dense"]))
def test_reformulated_batches_are_the_whole_groups_and_the_shards_follow_them(seed, kind, n_shards, variant):
    """A reformulated publish of a sharded group: the rows' messages in ``rows_mode`` equal the whole group's
    reformulated output row for row (Paint-Batch by default), and shards that only *apply* them (the log entry a
    worker's cached shard replays) go on to give the whole group's unicast rows."""
    rnd = random.Random(seed)
    distinct = kind == "distinct"
    rows, _, whole, rows_group, shards = two_forms(rnd, kind, n_shards, int, int)
    shards = list(shards.values())
    mode = with_variant("reformulated", variant)
    seq = 100
    for step in range(5):
        batch = gen_batch(rnd, int, seq, rnd.randint(1, 12), distinct, kind == "count")
        seq += batch.num_rows
        if step % 2 == 0:
            want = whole.apply(batch, mode)
            messages = rows_group.apply(batch, rows_mode(mode))
            assert rows_table_counter(messages) == rows_table_counter(want), (kind, step)
            for s in shards:
                if not s.stateless:
                    s.apply(messages)
        else:
            want = whole.apply(batch, "unicast")
            messages = rows_group.apply(batch, rows_mode("unicast"))
            got = pa.concat_tables([s.unicast(messages) for s in shards])
            assert rows_table_counter(got) == rows_table_counter(want), (kind, step)
        apply_rows(rows, batch, distinct)


@pytest.mark.parametrize("kind", ["topk", "avg"])
def test_a_shard_replays_its_log_and_a_rebuilt_base_continues_it(kind):
    """A shard's log (the message batches it applied) replayed on its base gives the state a base seeded from the
    rows' core now gives (what a compaction's ``continues`` relies on); DISTINCT's shard takes no log."""
    rnd = random.Random(4)
    rows = {}
    apply_rows(rows, gen_batch(rnd, int, 0, 10, False), False)
    ids, x1, x2, k = subscriptions(rnd, "s", 10)
    rows_group = snapshot(kind, rows, [], [], [], [], rows_extra(SNAPSHOTS[kind][0].kind, k)).build()
    base = shard_bases(rows_group, "g", ids, x1, x2, k, 1, int)[0]
    assert isinstance(base, RangeShardBase) and not base.stateless
    log = []
    for step in range(3):
        log.append(rows_group.apply(gen_batch(rnd, int, 10 * (step + 1), 8, False), "reformulated"))
    replayed = base.build()
    for m in log:
        replayed.apply(m)
    fresh = shard_bases(rows_group, "g", ids, x1, x2, k, 1, int)[0].build()
    batch = gen_batch(rnd, int, 99, 10, False)
    messages = rows_group.apply(batch, "reformulated")
    assert rows_table_counter(replayed.unicast(messages)) == rows_table_counter(fresh.unicast(messages))
    for sid in ids:
        assert replayed.subscribers.result(sid) == fresh.subscribers.result(sid)
    d = snapshot("distinct", {}, [], [], [], []).build()
    shard = shard_bases(d, "g", ids, x1, x2, k, 1, int)[0].build()
    assert shard.stateless
    with pytest.raises(TypeError):
        shard.apply(messages)
