"""A sharded RANGE_AGG group's rows split into X zones (``operators/shared/range_zones.py``; issue 16 item 4): each
zone routes the group's whole batch itself and emits the messages at the X it owns; merged, the zones' messages
are the whole rows operator's, row for row and in order (``msg_no`` too), on random batches -- upserts, deletes,
X-moves within and across cuts, a key repeated in a batch, NULL x and y, ties, keys that leave every zone -- and
the zones' merged states are the whole operator's for random ranges (empty x1 > x2, ±inf bounds, a range on a
cut): the seeds of subscription shards and ``result()``.  Subscription shards fed the zones' messages give the
whole group's unicast rows.  No Spark."""
from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.operators.shared.range_shards import shard_bases
from sparksub.operators.shared.range_zones import (
    RowsZoneSnapshot,
    ZonedRows,
    merge_zone_messages,
    zone_batch,
    zone_cuts,
    zone_rows,
)
from tests.operators.test_range_shards import apply_rows, gen_batch, rows_table_counter, snapshot, subscriptions

AGG_KINDS = ("sum", "avg", "count")


def zones_of(kind, rows, n_zones):
    """The rows' operator whole, and split into zones at equal-count cuts of the rows' X."""
    whole = snapshot(kind, rows, [], [], [], []).build()
    snap = snapshot(kind, rows, [], [], [], [])
    cuts = zone_cuts(snap.xs, n_zones)
    zones = []
    for z in range(len(cuts) + 1):
        keys, xs, ys = zone_rows(snap.keys, snap.xs, snap.ys, cuts, z)
        part = snapshot(kind, {}, [], [], [], [])
        part.keys, part.xs, part.ys = keys, xs, ys
        zones.append(RowsZoneSnapshot(part, z, cuts).build())
    return whole, zones, cuts


def ranges(rnd, n, cuts):
    edges = [float(c) for c in cuts] + [-math.inf, math.inf]
    x1 = [rnd.choice([float(rnd.randint(-1, 10)), rnd.choice(edges)]) for _ in range(n)]
    x2 = [rnd.choice([a + rnd.randint(-2, 6), rnd.choice(edges)]) for a in x1]   # some empty (x1 > x2)
    return np.asarray(x1, np.float64), np.asarray(x2, np.float64), np.ones(n, np.int64)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(AGG_KINDS), n_zones=st.integers(1, 4))
def test_zones_emit_the_whole_rows_messages_and_hold_its_states(seed, kind, n_zones):
    rnd = random.Random(seed)
    rows: dict = {}
    apply_rows(rows, gen_batch(rnd, int, 0, 12, False, kind == "count"), False)
    whole, zones, cuts = zones_of(kind, rows, n_zones)
    view = ZonedRows.of_zones(zones)
    ids, x1, x2, k = subscriptions(rnd, "s", rnd.randint(1, 10))
    shards = {j: b.build() for j, b in shard_bases(view, "g", ids, x1, x2, k, 2, int).items()}
    whole_group = snapshot(kind, rows, ids, x1, x2, k).build()
    seq = 100
    for step in range(4):
        batch = gen_batch(rnd, int, seq, rnd.randint(1, 14), False, kind == "count")
        seq += batch.num_rows
        want = whole.apply(batch, "reformulated")
        got = merge_zone_messages([z.apply(batch, "reformulated") for z in zones])
        assert got.to_pylist() == want.to_pylist(), (kind, step)     # row for row, in order, msg_no too
        unicast = whole_group.apply(batch, "unicast")
        delivered = pa.concat_tables([s.unicast(got) for s in shards.values()])
        assert rows_table_counter(delivered) == rows_table_counter(unicast), (kind, step)
        apply_rows(rows, batch, False)
        # every zone holds exactly the rows it owns now
        for z in zones:
            held = {key for key, (x, y, _) in rows.items() if x is not None and (y is not None or kind == "count")
                    and z.lo <= x < z.hi}
            assert {key for key in held if key in z.group.core} == held and len(z.group.core) == len(held)
        a, b, kk = ranges(rnd, 12, cuts)
        merged = view.shard_seed(a, b, kk)
        alone = whole.shard_seed(a, b, kk)
        assert merged[0].tolist() == alone[0].tolist() and merged[1].tolist() == alone[1].tolist()
        for lo, hi in zip(a.tolist(), b.tolist()):
            assert view.result_of(lo, hi) == whole.result_of(lo, hi), (lo, hi)
    assert sum(view.stats()["zone_rows"]) == len(whole.core)
    assert f"{len(zones)} X zones" in view.explain()["zones"]


def test_a_zone_routes_moves_deletes_and_nulls_of_the_keys_it_holds():
    """Zone [0, 5): a key it holds moving out becomes a delete; a NULL X or Y of a key it holds, a delete; rows of
    keys it never held, elsewhere, are not its business; a key moving in and out again within the batch."""
    b = pa.table({"key": [1, 2, 3, 4, 4, 5], "x": [7.0, 2.0, None, 6.0, 1.0, 9.0],
                  "y": [0.0, 1.0, 1.0, 1.0, 2.0, 3.0], "op": pa.array([0, 0, 0, 0, 0, 1], pa.int8()),
                  "seq": [1, 2, 3, 4, 5, 6]})
    held = {1, 3, 4}
    part, deletes = zone_batch(b, 0.0, 5.0, held.__contains__)
    assert part.column("key").to_pylist() == [1, 2, 3, 4, 4]
    assert part.column("op").to_pylist() == [1, 0, 1, 1, 0]
    assert sorted(deletes) == [1, 3, 4]
    part, deletes = zone_batch(b, 5.0, math.inf, set().__contains__)
    assert part.column("key").to_pylist() == [1, 4, 4] and part.column("op").to_pylist() == [0, 0, 1]
    assert sorted(deletes) == [5]
