"""The RANGE_AGG group operator (000 §4: relaxed range subscriptions): COUNT(*) / SUM / AVG over a range,
the aggregate core (``agg/core.py``) with the group's subscriptions; the frame every range class shares is
``shared/range_classes.py``.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sparksub.operators.agg import core as range_agg
from sparksub.operators.agg.subscribers import AggSubscribers
from sparksub.operators.shared.range_classes import RangeClassGroup, RangeClassSnapshot, update_rows

__all__ = ["AggGroup", "AggSnapshot"]


class AggGroup(RangeClassGroup):
    """RANGE_AGG: relaxed delta messages ⟨x, Δcount, Δsum⟩ (000 §4) or exact new values per subscription."""

    kind = "RANGE_AGG"
    _extent_name = "X extent"

    def __init__(self, snap: RangeClassSnapshot):
        super().__init__(snap)
        self.func = str(snap.option).lower()
        self.core = range_agg.RangeAggCore(self.func)
        self.unicast = None
        self._sorted_bounds = None     # (sorted x1, sorted x2) of the non-empty ranges: EXPLAIN's reach

    def load(self, keys, xs, ys) -> None:
        ok = self._valid(xs, ys)
        ys = np.zeros(len(xs)) if self.y is None else np.asarray(ys, dtype=np.float64)
        self.core.load(np.asarray(keys, dtype=object)[ok].tolist(), np.asarray(xs, dtype=np.float64)[ok], ys[ok])
        self._resync()

    def _resync(self) -> None:
        # S-UN state from the core: range_agg.AggUnicast answers each message's stabbing rectangle
        # (-inf, X] x [X, +inf) over its own layout of the subscription points (000 §3-§4)
        self.unicast = range_agg.AggUnicast(self.func, self.x1, self.x2, self.core)

    @staticmethod
    def _rectangle(m) -> tuple:
        return None, m.x, m.x, -math.inf, math.inf

    def _count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        # ranges with x1 <= X <= x2 = #(x1 <= X) - #(x2 < X) over the non-empty ranges (x2 < X implies x1 < X)
        if self._sorted_bounds is None:
            live = self.x1 <= self.x2
            self._sorted_bounds = (np.sort(self.x1[live]), np.sort(self.x2[live]))
        a, b = self._sorted_bounds
        return int(np.searchsorted(a, inner_l, "right") - np.searchsorted(b, inner_l, "left"))

    def _upsert(self, key, x, y):
        return self.core.upsert(key, x, 0.0 if self.y is None else float(y))

    def _delete(self, key):
        return self.core.delete(key)

    def result_of(self, x1: float, x2: float, k: int = 1):
        return self.core.value(x1, x2)

    subscribers_class = AggSubscribers

    def shard_seed(self, x1, x2, k) -> tuple:
        return self.core.states(x1, x2)     # exact (count, scaled sum) per range; an empty range holds nothing

    def subscriber_option(self):
        return self.func

    @staticmethod
    def merge_seeds(parts, option=None, k=None) -> tuple:
        """The exact states of ranges over rows split into X zones (``shared/range_zones.py``): each zone's
        ``shard_seed`` added up -- counts and exact scaled sums are additive over disjoint sets of rows (000 §4);
        ``option`` and ``k`` unused (the signature top-k's needs).

        >>> AggGroup.merge_seeds([(np.array([1, 0]), np.array([3, 0], dtype=object)),
        ...                       (np.array([2, 1]), np.array([4, 5], dtype=object))])
        (array([3, 1]), array([7, 5], dtype=object))
        """
        counts = sum(np.asarray(c, dtype=np.int64) for c, _ in parts)
        sums = np.zeros(len(counts), dtype=object)
        for _, s in parts:
            sums = sums + np.asarray(s, dtype=object)
        return counts, sums

    @staticmethod
    def value_of_seed(seed, func) -> object:
        """The SQL value of the first range of a seed (:meth:`merge_seeds`), as ``core.value`` gives it."""
        return range_agg.AggState(int(seed[0][0]), int(seed[1][0])).value(str(func).lower())

    def _notifications(self, outcome, seq: int, mode: str) -> list[dict]:
        if mode == "reformulated":
            return [{"seq": seq, "op": "DELTA", "new_value": m.d_sum, "d_count": m.d_count,
                     "inner_l": m.x, "inner_r": m.x, "outer_l": -math.inf, "outer_r": math.inf}
                    for m in outcome.messages]
        # unicast: the subscriptions whose value changed, in subscription order, as columns (``update_rows``)
        idx, vals = self.unicast.apply(outcome)
        idx = np.asarray(idx, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.float64)
        order = np.argsort(idx, kind="stable")
        return update_rows(self.ids[idx[order]], vals[order], seq, self.group_id)

    def explain(self) -> dict:
        c = self.core.counters
        n = max(c["updates"], 1)
        return {
            "class": "RANGE_AGG", "group": self.group_id, "subscriptions": len(self), "tuples": len(self.core),
            "aggregate": f"{self.func.upper()}({self.y or '*'})",
            "algorithm": "relaxed range subscriptions: an update reaches the ranges holding its old or new "
                         "X; updates touching neither attribute are dropped (000 §4); exact integer sums",
            "message format": "<X, D_COUNT, D_SUM> (at most 2 per update)",
            "reformulated predicate": "x1 <= X <= x2",
            "messages per update": round(c["messages"] / n, 3),
            "subscription index": f"the subscriptions as points (x1, x2) ({len(self)} points): a stabbing "
                                  f"query x1 <= X <= x2, the rectangle (-inf, X] x [X, +inf), per message",
            **self._explain_network(c["messages"] / n),
        }


@dataclass
class AggSnapshot(RangeClassSnapshot):
    """A RANGE_AGG group's snapshot (``option``: the function, COUNT / SUM / AVG; ``y`` None for COUNT(*))."""
    kind: ClassVar[str] = "RANGE_AGG"
    group_class: ClassVar[type] = AggGroup
