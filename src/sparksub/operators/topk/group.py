"""The RANGE_TOPK group operator (002): the top-k core (``topk/core.py``) with the group's subscriptions.

Reformulated: by default Paint-Batch's messages over the whole publish batch (002 §IV-A; subscribers are exact
at the batch's end); the mode may name another Paint variant (``operators/shared/variants.py``):
``Paint-Batch-Sparse`` (Paint-Batch over Paint-Sparse), or per update, each update's messages at its seq,
``Paint-Dense`` (§III-A), ``Paint-Sparse`` (§III-B: the server uses the subscriptions, which the group
registers in its core the first time), ``Paint-Dense(ε)`` / ``Paint-Sparse(ε)`` (§IV-B, Theorem 4: fewer
messages, subscriptions hear objects ranked up to (1 + ε)k and drop them by the §II-A protocol).  Unicast:
each update's Paint-Dense messages routed to the subscribers they reach (002 §II-A / §III-A), rows by list
diff.  The frame every range class shares is ``shared/range_classes.py``.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sparksub.operators.shared.range_classes import RangeClassGroup, RangeClassSnapshot, key_text
from sparksub.operators.shared.schemas import DELETE
from sparksub.operators.shared.variants import paint_of, variant_of
from sparksub.operators.topk import core as topk
from sparksub.operators.topk.subscribers import TopkLists, TopkSubscribers

__all__ = ["PaintedKs", "TopkGroup", "TopkSnapshot"]


@dataclass(frozen=True)
class PaintedKs:
    """A log entry of a sharded group's rows (``control/range_shards.py``): paint for these k values from now on
    (a subscription with a new k joined a shard).  The core's messages for a k depend on the rows alone (002
    §II-A: one sweep per k), so the rows take it without a new base."""

    ks: tuple


class TopkGroup(RangeClassGroup):
    """RANGE_TOPK: Paint-Batch messages (reformulated) or per-subscription changes (unicast: each
    update's Paint-Dense messages routed to the subscribers they reach, 002 §II-A / §III-A)."""

    kind = "RANGE_TOPK"
    _extent_name = "X extent"

    def __init__(self, snap: RangeClassSnapshot):
        super().__init__(snap)
        self.descending = bool(snap.option)
        self.k = np.asarray(snap.sub_k, dtype=np.int64)
        # the reformulated form paints for the k values in use (002 §II-A, one sweep for the largest); a sharded
        # group's rows hold no subscription and paint for the k values the snapshot names (``extra['ks']``)
        ks = snap.extra.get("ks") or sorted(set(self.k.tolist())) or [1]
        self.core = topk.TopkCore("dense", descending=self.descending, ks=sorted(ks))
        #: the Paint variant of a reformulated batch whose mode names none: Paint-Batch, or, for a sharded
        #: group's rows (stage 1), Paint-Dense -- per update, so that its shards' union is unicast exactly
        self.default_variant = snap.extra.get("variant") or "Paint-Batch"
        self._in_core = False          # the subscriptions registered in the core (Paint-Sparse needs them)
        self._paint_batch = True       # the reformulated form of the batch being applied: Paint-Batch
        self.variants: dict = {}       # reformulated variant -> batches this copy applied in it (tests)

    def apply(self, batch, mode: str = "unicast"):
        """The frame's ``apply`` with the Paint variant the mode names set on the core for a reformulated batch
        (module docstring); unicast always routes Paint-Dense's exact messages.  A :class:`PaintedKs` entry
        (replayed from a sharded group's log) sets the k values painted for."""
        if isinstance(batch, PaintedKs):
            self.core.paint_for(batch.ks)
            return None
        if mode == "reformulated":
            variant = variant_of(mode, "topk") or self.default_variant
            paint, epsilon, self._paint_batch = paint_of(variant)
            self.variants[variant] = self.variants.get(variant, 0) + 1
        else:
            paint, epsilon = "dense", None
        if paint == "sparse" and not self._in_core:
            ok = self.x1 <= self.x2        # an empty range is in no message's rectangle
            self.core.subscriptions.add_many(self.ids[ok].tolist(), self.x1[ok], self.x2[ok], self.k[ok])
            self._in_core = True
        self.core.mode, self.core.epsilon = paint, epsilon
        try:
            return super().apply(batch, mode)
        finally:
            self.core.mode, self.core.epsilon = "dense", None

    def _batched(self, mode) -> bool:
        return self._paint_batch

    def load(self, keys, xs, ys) -> None:
        ok = self._valid(xs, ys)
        self.core.load(np.asarray(keys, dtype=object)[ok].tolist(), np.asarray(xs, dtype=np.float64)[ok],
                       np.asarray(ys, dtype=np.float64)[ok])
        self._resync()

    def _resync(self) -> None:
        # the subscriber lists from the core; the index over (x1, x2) per k is built once
        if self.subscribers is None:
            self.subscribers = TopkSubscribers.from_group(self)
        else:
            self.subscribers.reseed(self.core)

    @staticmethod
    def _rectangle(m) -> tuple:
        return m[:5]  # TopkMessage's first fields: k, inner_l, inner_r, outer_l, outer_r (one slice per message)

    def _count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        if self.subscribers is None:
            return 0
        return self.subscribers.count(k, inner_l, inner_r, outer_l, outer_r)

    def _upsert(self, key, x, y):
        return self.core.upsert(key, x, float(y))

    def _delete(self, key):
        return self.core.delete(key)

    def result_of(self, x1: float, x2: float, k: int = 1) -> list[tuple]:
        return self.core.top_k(x1, x2, int(k))

    subscribers_class = TopkSubscribers

    def shard_seed(self, x1, x2, k) -> TopkLists:
        # each subscription's top-k list [(key, x, y)] now (an empty range's is empty: x1 > x2 holds nothing), flat
        # with a key object per distinct key: what the shard's worker unpickles and builds its subscribers from
        return TopkLists(self.core.top_k(a, b, int(kk)) if a <= b else []
                         for a, b, kk in zip(x1.tolist(), x2.tolist(), k.tolist()))

    def subscriber_option(self):
        return self.descending

    @staticmethod
    def merge_seeds(parts, descending: bool, k) -> TopkLists:
        """The top-k lists of ranges over rows split into X zones (``topk/zones.py``): per range, the best ``k``
        of the zones' own lists (each zone's list holds its best k in the range, so the best k overall are among
        them), ranked as the core ranks them: by y (descending: largest first), ties by key.

        >>> a = TopkLists([[("a", 1.0, 5.0), ("b", 2.0, 7.0)]]); b = TopkLists([[("c", 9.0, 6.0)]])
        >>> TopkGroup.merge_seeds([a, b], False, [2])[0], TopkGroup.merge_seeds([a, b], True, [2])[0]
        ([('a', 1.0, 5.0), ('c', 9.0, 6.0)], [('b', 2.0, 7.0), ('c', 9.0, 6.0)])
        """
        sign = -1.0 if descending else 1.0
        ks = np.asarray(k, dtype=np.int64).tolist()
        return TopkLists(sorted((item for part in parts for item in part[i]),
                                key=lambda it: (sign * it[2], it[0]))[: ks[i]] for i in range(len(ks)))

    @staticmethod
    def value_of_seed(seed, option) -> list:
        """The result of the first range of a seed (:meth:`merge_seeds`), as ``result_of`` gives it."""
        return seed[0]

    def _batch_messages(self, cols) -> list[dict]:
        """A whole batch through Paint-Batch (002 §IV-A): subscribers are exact at the batch's end;
        every message carries the batch's last ``seq``."""
        events, alive = [], {}         # alive: key -> exists at this point of the batch
        for key, x, y, op, seq in zip(cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]):
            null = x is None or x != x or y is None or y != y
            exists = alive[key] if key in alive else self.core.get(key) is not None
            if op == DELETE or null:
                if exists:
                    events.append(("delete", key))
                    alive[key] = False
            else:
                events.append(("upsert", key, float(x), float(y)))
                alive[key] = True
        if not events:
            return []
        last = int(cols["seq"][-1])
        outcome = self.core.apply_batch(events)
        self._observe(outcome.messages)
        self._stale = True             # the unicast lists did not follow
        return [{"seq": last, "op": "DELETE" if m.y is None else "PUT", "k": m.k, "new_value": m.y,
                 "item_key": key_text(m.key), "item_x": m.x, "inner_l": m.inner_l, "inner_r": m.inner_r,
                 "outer_l": m.outer_l, "outer_r": m.outer_r} for m in outcome.messages]

    def _notifications(self, outcome, seq: int, mode: str) -> list[dict]:
        if mode == "reformulated":
            return [{"seq": seq, "op": "DELETE" if m.y is None else "PUT", "k": m.k,
                     "new_value": m.y, "item_key": key_text(m.key), "item_x": m.x,
                     "inner_l": m.inner_l, "inner_r": m.inner_r, "outer_l": m.outer_l, "outer_r": m.outer_r}
                    for m in outcome.messages]
        # unicast: the update's Paint-Dense messages reach exactly the subscriptions whose top-k may
        # change (002 §III-A, Theorem 1); each applies them by the §II-A protocol and the ones whose list
        # changed get the diff as rows (the change a unicast server sends, 002 §V)
        return self.subscribers.receive(outcome.messages, seq)

    def explain(self) -> dict:
        c = self.core.counters
        n = max(c["updates"], 1)
        return {
            "class": "RANGE_TOPK", "group": self.group_id, "subscriptions": len(self), "tuples": len(self.core),
            "order": f"{self.y} {'DESC' if self.descending else 'ASC'}, ties by key ascending",
            "k values": sorted(set(self.k.tolist())),
            "algorithm": "influence regions (Lemma 2) + Paint-Dense (002 §III-A), Paint-Batch per "
                         "publish batch (002 §IV-A); unicast: each update's messages routed to the "
                         "subscribers they reach, rows by list diff",
            "data index": f"A2B-tree on {self.x} (first_k / min_y, 002 §II-B): "
                          f"{self.core.tree.num_leaves} leaves",
            "message format": "Msg(k, INNER_L, INNER_R, OUTER_L, OUTER_R, key, x, y) (002 §II-A)",
            "reformulated predicate": "k = k_s AND (OUTER_L < x1 <= INNER_L) AND (INNER_R <= x2 < OUTER_R)",
            "calls per update (first_k / min_y / snap)": f"{c['first_k'] / n:.2f} / {c['min_y'] / n:.2f} / "
                                                         f"{c['snap'] / n:.2f}",
            "messages per update": round(c["messages"] / n, 3),
            "calls so far (first_k / min_y / snap)": f"{c['first_k']} / {c['min_y']} / {c['snap']}",
            "subscription index": f"a 2-d point index over (x1, x2) per k ({len(self)} points): one "
                                  f"rectangle query per message and k (002 §II-A)",
            **self._explain_network(c["messages"] / n),
        }


@dataclass
class TopkSnapshot(RangeClassSnapshot):
    """A RANGE_TOPK group's snapshot (``option``: descending; ``sub_k``: each subscription's k)."""
    kind: ClassVar[str] = "RANGE_TOPK"
    group_class: ClassVar[type] = TopkGroup
