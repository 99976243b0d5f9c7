"""The flat layout of ``TopkSubscribers`` (``operators/topk/subscribers.py``: per k, slot × k arrays of y, x and a
key code into one key table, a length per slot) against a brute force that keeps every subscriber's list as a
Python list and applies the 002 §II-A protocol to it: random subscriptions (±inf bounds, empty ranges x1 > x2,
several k), seeds, messages (any k or every k, deletes, a NULL value on a PUT, ties in y, the same key twice in a
seq, keys no list holds), removals and re-registrations (a freed slot reused), a key table compacted often --
the rows of ``receive`` and ``deliver`` row for row and every ``result``.  And through the group: after random
unicast batches (NULL x / y, deletes, a key repeated in a batch), each subscriber's list is the brute-force
top k of the rows, whole or rebuilt as a shard from its seed.  No Spark."""
from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.shared.range_shards import rows_extra, shard_bases
from sparksub.operators.shared.schemas import RANGE_MESSAGE_SCHEMA
from sparksub.operators.topk.group import TopkSnapshot
from sparksub.operators.topk.subscribers import TopkLists, TopkSubscribers

INF = math.inf
BOUNDS = [-INF, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, INF]
VALUES = [-INF, -1.0, 0.0, 1.0, 2.0, INF]          # few values: ties, broken by the key
KEY_KINDS = {"int": (lambda i: i, int), "str": (lambda i: f"k{i:02d}", str)}


# ---- the brute force ----------------------------------------------------------------------------------------
class BruteSubscribers:
    """Each subscriber's list a Python list of (rank y, key, x, y), best first; a message reaches a subscriber by
    the rectangle's predicate written out (OUTER_L < x1 <= INNER_L, INNER_R <= x2 < OUTER_R, an infinite outer
    bound closed; an empty range x1 > x2 never)."""

    def __init__(self, descending: bool):
        self.descending = descending
        self.subs: dict = {}          # sid -> [x1, x2, k, list]; insertion order = row order

    def rank(self, y):
        return -y if self.descending else y

    def add(self, sid, x1, x2, k, items):
        self.subs[sid] = [x1, x2, k, sorted((self.rank(y), key, x, y) for key, x, y in items)]

    def remove(self, sid):
        del self.subs[sid]

    def result(self, sid):
        return [(key, x, y) for _, key, x, y in self.subs[sid][3]]

    @staticmethod
    def reaches(m, x1, x2, k):
        mk, il, ir, ol, orr = m[:5]
        if mk is not None and mk != k or not x1 <= x2:
            return False
        left = (ol < x1 or (ol == -INF and x1 == -INF)) and x1 <= il
        right = ir <= x2 and (x2 < orr or (orr == INF and x2 == INF))
        return left and right

    def receive(self, messages, seq):
        rows = []
        for sid, (x1, x2, k, lst) in self.subs.items():
            old = list(lst)
            for m in messages:
                if not self.reaches(m, x1, x2, k):
                    continue
                key, x, y = m[5:]
                held = any(e[1] == key for e in lst)
                lst[:] = [e for e in lst if e[1] != key]
                if y is None:
                    continue
                lst.append((self.rank(y), key, x, y))
                lst.sort()
                if not held and len(lst) > k:
                    lst.pop()
            if lst == old:
                continue
            was = {e[1]: e for e in old}
            for e in lst:
                prev = was.pop(e[1], None)
                if prev is None or prev[2:] != e[2:]:
                    rows.append({"subscription_id": sid, "op": "enter" if prev is None else "update", "value": e[3],
                                 "seq": seq, "item_key": str(e[1]), "item_x": e[2]})
            rows += [{"subscription_id": sid, "op": "leave", "value": e[3], "seq": seq, "item_key": str(e[1]),
                      "item_x": e[2]} for e in old if e[1] in was]
        return rows


# ---- strategies ---------------------------------------------------------------------------------------------
def seed_list(draw, key_of, k):
    keys = draw(st.lists(st.integers(0, 9), unique=True, max_size=k))
    return [(key_of(i), float(draw(st.integers(0, 5))), draw(st.sampled_from(VALUES))) for i in keys]


def message(draw, key_of, ks):
    il, ir = sorted(draw(st.lists(st.sampled_from(BOUNDS), min_size=2, max_size=2)))
    il, ir = (il, ir) if draw(st.booleans()) else (ir, il)
    ol = draw(st.sampled_from([b for b in BOUNDS if b <= il]))
    orr = draw(st.sampled_from([b for b in BOUNDS if b >= ir]))
    k = None if draw(st.integers(0, 5)) == 0 else draw(st.sampled_from(ks))
    y = None if draw(st.integers(0, 4)) == 0 else draw(st.sampled_from(VALUES))
    return (k, il, ir, ol, orr, key_of(draw(st.integers(0, 11))), float(draw(st.integers(0, 5))), y)


def as_table(seqs: list, gid="g") -> pa.Table:
    """Messages (per seq, in order) as ``RANGE_MESSAGE_SCHEMA`` rows, shuffled: ``msg_no`` orders them back."""
    rows = [{"group_id": gid, "seq": seq, "op": "DELETE" if m[7] is None else "PUT", "k": m[0],
             "new_value": m[7], "item_key": str(m[5]), "item_x": m[6], "inner_l": m[1], "inner_r": m[2],
             "outer_l": m[3], "outer_r": m[4], "msg_no": n} for seq, msgs in seqs for n, m in enumerate(msgs)]
    random.Random(len(rows)).shuffle(rows)
    return pa.Table.from_pylist(rows, schema=RANGE_MESSAGE_SCHEMA)


def same_rows(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert {n: g[n] for n in w} == w


def check_results(subs: TopkSubscribers, brute: BruteSubscribers) -> None:
    assert len(subs) == len(brute.subs)
    for sid in brute.subs:
        assert sid in subs
        assert subs.result(sid) == brute.result(sid), sid


# ---- the layout against the brute force ---------------------------------------------------------------------
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), descending=st.booleans(), key_kind=st.sampled_from(sorted(KEY_KINDS)),
       via=st.sampled_from(["receive", "deliver"]), slack=st.sampled_from([-10**9, 4096]))
def test_the_flat_lists_follow_the_brute_force(data, descending, key_kind, via, slack):
    draw = data.draw
    key_of, key_type = KEY_KINDS[key_kind]
    ks = sorted(set(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))))
    subs = TopkSubscribers(descending, key_type=key_type, group_id="g")
    subs.KEY_TABLE_SLACK = slack      # -10**9: the key table is compacted at every receive that changes a list
    brute = BruteSubscribers(descending)
    n_ids = 0
    seq = 10
    for _ in range(draw(st.integers(1, 6))):
        action = draw(st.sampled_from(["add", "add", "remove", "messages", "messages", "messages"]))
        if action == "add":
            n = draw(st.integers(1, 5))
            ids = [f"s{n_ids + i}" for i in range(n)]
            n_ids += n
            if brute.subs and draw(st.booleans()):   # an id removed before comes back (its old slot is free)
                ids[0] = draw(st.sampled_from(sorted(brute.subs)))
                subs.remove([ids[0]])
                brute.remove(ids[0])
            x1 = [draw(st.sampled_from(BOUNDS)) for _ in ids]
            x2 = [draw(st.sampled_from(BOUNDS)) for _ in ids]      # x1 > x2: an empty range
            k = [draw(st.sampled_from(ks)) for _ in ids]
            seeds = [seed_list(draw, key_of, kk) if a <= b else [] for a, b, kk in zip(x1, x2, k)]
            subs.add(ids, x1, x2, k, results=TopkLists(seeds) if draw(st.booleans()) else seeds)
            for sid, a, b, kk, items in zip(ids, x1, x2, k, seeds):
                brute.add(sid, a, b, kk, items)
        elif action == "remove" and brute.subs:
            gone = draw(st.lists(st.sampled_from(sorted(brute.subs)), min_size=1, max_size=3, unique=True))
            subs.remove(gone)
            for sid in gone:
                brute.remove(sid)
        elif action == "messages":
            seqs = []
            for _ in range(draw(st.integers(1, 3))):
                seqs.append((seq, [message(draw, key_of, ks) for _ in range(draw(st.integers(1, 6)))]))
                seq += 1
            want = [r for s, msgs in seqs for r in brute.receive(msgs, s)]
            if via == "receive":
                got = [r for s, msgs in seqs for r in subs.receive(msgs, s)]
            else:
                got = subs.deliver(as_table(seqs)).to_pylist()
                assert all(r["group_id"] == "g" and r["item_text"] is None for r in got)
            same_rows(got, want)
        check_results(subs, brute)


def test_registration_errors_leave_the_subscribers_as_they_were():
    subs = TopkSubscribers(key_type=int)
    subs.add(["a", "b", "e"], [0.0, 1.0, 3.0], [2.0, 3.0, 1.0], [2, 2, 1], results=[[(1, 0.5, 1.0)], [], []])
    with pytest.raises(DuplicateSubscription, match="'b'"):
        subs.add(["c", "b"], [0.0, 0.0], [1.0, 1.0], [1, 1])
    with pytest.raises(DuplicateSubscription, match="'e'"):      # the empty range's id is registered too
        subs.add(["e"], [0.0], [1.0], [1])
    with pytest.raises(DuplicateSubscription, match="'d'"):
        subs.add(["d", "d"], [0.0, 0.0], [1.0, 1.0], [1, 1])
    with pytest.raises(ValueError, match="longer than its k"):
        subs.add(["f"], [0.0], [1.0], [1], results=[[(1, 0.5, 1.0), (2, 0.5, 2.0)]])
    with pytest.raises(UnknownSubscription, match="'zz'"):
        subs.remove(["a", "zz"])
    assert len(subs) == 3 and "c" not in subs and "d" not in subs and "f" not in subs
    assert subs.result("a") == [(1, 0.5, 1.0)] and subs.result("e") == []
    with pytest.raises(UnknownSubscription):
        subs.result("c")


def test_a_seed_of_lists_reads_back_as_given():
    seed = TopkLists([[("b", 1.0, 2.0), ("a", 0.5, 2.0)], [], [("c", 3.0, -1.0)]])
    assert len(seed) == 3 and seed[0] == [("b", 1.0, 2.0), ("a", 0.5, 2.0)] and seed[1] == [] and seed[-1] == \
        [("c", 3.0, -1.0)]
    with pytest.raises(IndexError):
        seed[3]
    subs = TopkSubscribers.from_seed("g", False, str, ["p", "q", "r"], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0], [2, 2, 1],
                                     seed)
    assert subs.result("p") == [("a", 0.5, 2.0), ("b", 1.0, 2.0)]        # a tie in y: the lower key first


# ---- through the group: the brute-force top k of the rows ----------------------------------------------------
def brute_top_k(rows: dict, x1, x2, k, descending):
    inside = [(-y if descending else y, key, x, y) for key, (x, y) in rows.items()
              if x is not None and y is not None and x1 <= x <= x2]
    return [(key, x, y) for _, key, x, y in sorted(inside)[:k]]


def batch_table(rnd, key_of, seq, n):
    cols = {"key": [], "x": [], "y": [], "op": [], "seq": []}
    for i in range(n):
        roll = rnd.random()
        cols["key"].append(key_of(rnd.randint(0, 9)))
        cols["x"].append(None if roll < 0.1 else float(rnd.randint(0, 6)))
        cols["y"].append(None if 0.1 <= roll < 0.2 else float(rnd.choice([-1, 0, 1, 2])))
        cols["op"].append(1 if roll > 0.8 else 0)
        cols["seq"].append(seq + i)
    key_type = pa.string() if isinstance(cols["key"][0], str) else pa.int64()
    return pa.table({"key": pa.array(cols["key"], key_type), "x": pa.array(cols["x"], pa.float64()),
                     "y": pa.array(cols["y"], pa.float64()), "op": pa.array(cols["op"], pa.int8()),
                     "seq": pa.array(cols["seq"], pa.int64())})


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), descending=st.booleans(), key_kind=st.sampled_from(sorted(KEY_KINDS)))
def test_whole_and_shard_lists_are_the_brute_force_top_k(seed, descending, key_kind):
    rnd = random.Random(seed)
    key_of, key_type = KEY_KINDS[key_kind]
    rows: dict = {}
    ids = [f"s{i}" for i in range(rnd.randint(1, 10))]
    x1 = [rnd.choice(BOUNDS) for _ in ids]
    x2 = [rnd.choice(BOUNDS) for _ in ids]
    k = [rnd.randint(1, 4) for _ in ids]

    def snap(sub_ids, a, b, kk, extra=None):
        keys = np.empty(len(rows), dtype=object)
        keys[:] = list(rows)
        return TopkSnapshot("g", "t", "x", "y", descending, np.asarray(sub_ids, dtype=object), np.asarray(a),
                            np.asarray(b), np.asarray(kk, dtype=np.int64), keys,
                            np.array([v[0] for v in rows.values()], dtype=np.float64),
                            np.array([v[1] for v in rows.values()], dtype=np.float64), extra=extra or {})

    for r in batch_table(rnd, key_of, 0, 8).to_pylist():
        if r["op"] == 0 and r["x"] is not None and r["y"] is not None:
            rows[r["key"]] = (r["x"], r["y"])
    whole = snap(ids, x1, x2, k).build()
    rows_group = snap([], [], [], [], rows_extra("RANGE_TOPK", k)).build()
    shard = shard_bases(rows_group, "g", ids, x1, x2, k, 1, key_type)[0].build()
    seq = 100
    for _ in range(3):
        batch = batch_table(rnd, key_of, seq, rnd.randint(1, 10))
        seq += batch.num_rows
        whole.apply(batch, "unicast")
        shard.unicast(rows_group.apply(batch, "reformulated"))
        for r in batch.to_pylist():
            if r["op"] == 1 or r["x"] is None or r["y"] is None:
                rows.pop(r["key"], None)
            else:
                rows[r["key"]] = (r["x"], r["y"])
        for sid, a, b, kk in zip(ids, x1, x2, k):
            want = brute_top_k(rows, a, b, kk, descending)
            assert whole.subscribers.result(sid) == want
            assert shard.subscribers.result(sid) == want
