"""BOX_MIN / BOX_MAX / BOX_TOPK groups with their subscriptions split into shards, the rows copied in each: the pure
parts (issue 16 item 4).  Pure (numpy, pyarrow; no pyspark).

A large box group runs as Q **subscription shards** by a CRC32 of the subscription id
(``joins.shards.subscription_shard``, the SELECT_JOIN and range shards' hash: every shard gets 1/Q of them
whatever the workload, and a subscription change touches only the shards its ids hash to).  Each shard is a whole
box group (``group.BoxMinGroup`` / ``BoxTopkGroup``) over its own subscriptions **and every row of the table**: its
base a :class:`~sparksub.operators.box.group.BoxClassSnapshot` of them (:func:`shard_snapshots`), its log the
update batches, exactly like the whole group's replica; one Spark task per shard (``control/box_shards.py``).

Why not the range classes' split (rows in one replica emitting messages, subscribers in shards:
``operators/shared/range_shards.py``): a box message is an exact 4-d tile (002 §IV-C), ~100-1,000 per update
(``group.py``'s table), and a box subscriber side tests every subscription per message
(``group.BoxSubscribers``): far slower at 100K subscriptions per shard than each shard stabbing its own
subscriptions' index per update from the rows it holds.  The price: every shard holds every row (the rows are
copied, as BAND_JOIN copies its subscriptions); each shard holds its share of the subscriptions and their kept
results.

* ``unicast``: a subscription's notifications depend only on the rows and itself (its box, its k: the kept result
  follows the orthant θ of each update, 002 §II-C / §IV-C), so the union of the shards' rows is the whole group's
  unicast, row for row.
* ``reformulated``: the messages depend only on the rows (002 §II-C: subscription-oblivious), so shard 0 alone
  emits them (its BOX_TOPK cores for every k of the group: ``extra['ks']``); the other shards apply the batch as a
  log replay does and keep their kept results following the rows (``extra['emits_messages']`` False): the same
  messages as the whole group's, row for row.

:class:`ShardedBoxView` is the group as ``result()``, ``stats()`` and EXPLAIN read it: a subscription from the
shard its id hashes to.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from sparksub.operators.box.group import BoxClassSnapshot
from sparksub.operators.joins.shards import subscription_shard

__all__ = ["BOX_SHARD_CLASSES", "ShardedBoxView", "shard_digests", "shard_snapshots", "shards_layout"]

#: the classes whose large group runs in subscription shards, the rows copied in each
BOX_SHARD_CLASSES = ("BOX_MIN", "BOX_MAX", "BOX_TOPK")
#: counters a shard's ``stats()`` keeps for its own subscriptions: summed over the shards (the rest is the rows'
#: work, the same in every shard, or shard 0's messages: read from shard 0)
_PER_SUBSCRIPTION_COUNTERS = ("unicast_rows", "recomputed", "stab_candidates")


def shards_layout(n_shards: int) -> str:
    """What EXPLAIN and ``stats()`` say of the layout."""
    return f"{n_shards} subscription shards, rows copied in each"


def _which(snap: BoxClassSnapshot, n_shards: int) -> np.ndarray:
    return subscription_shard(np.asarray(snap.sub_ids, dtype=object).tolist(), n_shards)


def shard_digests(snap: BoxClassSnapshot, n_shards: int) -> list[tuple[int, str]]:
    """Per shard, ``(subscriptions, digest)`` of what its base holds -- its ids in id order with their boxes and k --
    which tells whether a shard's base still holds them (a subscription change rebuilds only the shards whose
    subscriptions changed); a digest, not the ids: the driver keeps no Python object per subscription for it."""
    which = _which(snap, n_shards)
    ids = np.asarray(snap.sub_ids, dtype=object)
    k = np.asarray(snap.sub_k if snap.sub_k is not None else np.zeros(len(ids)), dtype=np.int64)
    out = []
    for j in range(n_shards):
        mine = np.flatnonzero(which == j)
        mine = mine[np.argsort(ids[mine].astype(str), kind="stable")]
        h = hashlib.blake2b(digest_size=16)
        h.update("\x00".join(map(str, ids[mine].tolist())).encode("utf-8"))
        for c in ("sub_p1", "sub_q1", "sub_p2", "sub_q2"):
            h.update(np.ascontiguousarray(np.asarray(getattr(snap, c), dtype=np.float64)[mine]).tobytes())
        h.update(np.ascontiguousarray(k[mine]).tobytes())
        out.append((int(mine.size), h.hexdigest()))
    return out


def shard_snapshots(snap: BoxClassSnapshot, n_shards: int, only=None) -> dict:
    """``{shard: BoxClassSnapshot}``: the whole group's snapshot ``snap`` (every subscription, the table's rows) split
    by subscription shard, each with every row (``only``: just those shards).  Shard 0 emits the group's
    reformulated messages (its top-k cores for every k of the group); the others none (module docstring)."""
    which = _which(snap, n_shards)
    ks = sorted({int(k) for k in snap.sub_k}) if snap.sub_k is not None else []
    out = {}
    for j in range(n_shards):
        if only is not None and j not in only:
            continue
        mine = np.flatnonzero(which == j)
        extra = {**snap.extra, "shard": j, "shards": n_shards, "emits_messages": j == 0}
        if j == 0 and ks:
            extra["ks"] = ks
        out[j] = replace(snap, sub_ids=np.asarray(snap.sub_ids, dtype=object)[mine],
                         sub_p1=np.asarray(snap.sub_p1)[mine], sub_q1=np.asarray(snap.sub_q1)[mine],
                         sub_p2=np.asarray(snap.sub_p2)[mine], sub_q2=np.asarray(snap.sub_q2)[mine],
                         sub_k=None if snap.sub_k is None else np.asarray(snap.sub_k)[mine], extra=extra)
    return out


class ShardedBoxView:
    """A sharded box group as ``result()``, ``stats()`` and EXPLAIN read it: ``read(shards, method, args)`` calls
    ``method(*args)`` on each listed shard's group -- on the driver, or where the shards live (a group past
    ``driver_operator_limit``: ``control/box_shards.py``) -- and returns the values in that order; a
    subscription is read from the shard its id hashes to.  ``shards``: per shard its ``{"shard",
    "subscriptions", ...}``."""

    def __init__(self, read: Callable, subscriptions: int, shards: list, info: dict | None = None):
        self.read = read
        self.subscriptions = subscriptions
        self.shards = shards
        self.info = dict(info or {})

    def __len__(self) -> int:
        return self.subscriptions

    def shard_of(self, sub_id) -> int:
        return int(subscription_shard([sub_id], len(self.shards))[0])

    def result(self, sub_id):
        return self.read([self.shard_of(sub_id)], "result", (sub_id,))[0]

    def _layout(self) -> dict:
        return {"layout": shards_layout(len(self.shards)), "subscription_shards": len(self.shards),
                "shard_subscriptions": [s["subscriptions"] for s in self.shards]}

    def stats(self) -> dict:
        each = self.read(list(range(len(self.shards))), "stats", ())
        out = dict(each[0])    # the rows' counters (the same in every shard) and shard 0's messages
        for name in _PER_SUBSCRIPTION_COUNTERS:
            out[name] = sum(s.get(name, 0) for s in each)
        shards = [{**s, "unicast_rows": st.get("unicast_rows", 0), "recomputed": st.get("recomputed", 0),
                   "rebuilds": st.get("rebuilds", 0)} for s, st in zip(self.shards, each)]
        return {**out, "subscriptions": self.subscriptions, **self._layout(), "shards": shards, **self.info}

    def explain(self) -> dict:
        lines = dict(self.read([0], "explain", ())[0])
        layout = self._layout()
        lines["subscriptions"] = self.subscriptions
        lines["layout"] = (f"{layout['layout']} (issue 16 item 4): each shard a whole box group over the "
                           f"subscriptions whose id hashes to it (sizes {layout['shard_subscriptions']}) and every "
                           f"row of the table, one Spark task each; reformulated: shard 0 sends the messages (they "
                           f"depend only on the rows, 002 §II-C)")
        lines["subscription index"] = f"per shard: {lines.get('subscription index', '')}"
        return lines
