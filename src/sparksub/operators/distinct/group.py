"""The RANGE_DISTINCT group operator (000 §4: Mar over the tuples sharing a y value): the DISTINCT core
(``distinct/core.py``) with the group's subscriptions; the frame every range class shares is
``shared/range_classes.py``.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sparksub.operators.distinct import core as range_distinct
from sparksub.operators.distinct.subscribers import DistinctSubscribers
from sparksub.operators.shared.range_classes import RangeClassGroup, RangeClassSnapshot

__all__ = ["DistinctGroup", "DistinctSnapshot"]


class DistinctGroup(RangeClassGroup):
    """RANGE_DISTINCT: the Mar-for-duplicates messages (000 §4) or per-subscription add/remove rows."""

    kind = "RANGE_DISTINCT"
    _extent_name = "Mar width"

    def __init__(self, snap: RangeClassSnapshot):
        super().__init__(snap)
        self.core = range_distinct.RangeDistinctCore()
        # a match is a change (000 §4), so unicast needs only the index, no per-subscription sets
        self.subscribers = DistinctSubscribers(keep_sets=False, group_id=self.group_id)
        self.subscribers.add(self.ids, self.x1, self.x2)

    @staticmethod
    def _rectangle(m) -> tuple:
        return None, m.inner_l, m.inner_r, m.outer_l, m.outer_r

    def _count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        return self.subscribers.count(inner_l, inner_r, outer_l, outer_r)

    def load(self, keys, xs, ys) -> None:
        ok = self._valid(xs, ys)
        self.core.load(np.asarray(keys, dtype=object)[ok].tolist(), np.asarray(xs, dtype=np.float64)[ok],
                       np.asarray(ys, dtype=object)[ok].tolist())

    def _upsert(self, key, x, y):
        return self.core.upsert(key, x, y)

    def _delete(self, key):
        return self.core.delete(key)

    def result_of(self, x1: float, x2: float, k: int = 1) -> list:
        return sorted(self.core.distinct_values(x1, x2), key=lambda v: (isinstance(v, str), v))

    # a shard's subscribers keep no sets: every match of a per-update Mar message is a change (000 §4)
    subscribers_class = DistinctSubscribers
    shard_stateless = True

    #: what EXPLAIN says of the rows in X zones (``range_zones.ZonedRows``; ``distinct/zones.py``)
    zones_note = ("each zone closes a Mar end at its own nearest tuple of the value; an end with none in the zone is "
                  "closed in a second round by the zones beyond it, each answering as of the message's seq (000 §4)")

    @staticmethod
    def merge_seeds(parts, option=None, k=None) -> list:
        """The values of ranges over rows split into X zones (``distinct/zones.py``: a zone's ``shard_seed`` is
        its set per range): their union per range (``option``, ``k``: unused, the signature top-k's needs)."""
        return [set().union(*sets) for sets in zip(*parts)]

    @staticmethod
    def value_of_seed(seed, option) -> list:
        """The result of the first range of a merged seed, as :meth:`result_of` gives it."""
        return sorted(seed[0], key=lambda v: (isinstance(v, str), v))

    @staticmethod
    def _value_columns(v) -> dict:
        return {"item_text": v} if isinstance(v, str) else {"new_value": float(v), "value": float(v)}

    def _notifications(self, outcome, seq: int, mode: str) -> list[dict]:
        if mode == "reformulated":
            out = []
            for m in outcome.messages:
                row = {"seq": seq, "op": m.op, "inner_l": m.inner_l, "inner_r": m.inner_r,
                       "outer_l": m.outer_l, "outer_r": m.outer_r, **self._value_columns(m.value)}
                row.pop("value", None)
                out.append(row)
            return out
        # unicast: one rectangle query per message; every match is an add / remove (000 §4)
        return self.subscribers.receive(outcome.messages, seq)

    def explain(self) -> dict:
        c = self.core.counters
        n = max(c["updates"], 1)
        return {
            "class": "RANGE_DISTINCT", "group": self.group_id, "subscriptions": len(self), "tuples": len(self.core),
            "algorithm": "Mar extended to duplicates: the widest X range around an insertion or deletion "
                         "holding no other tuple with the same Y (000 §4)",
            "data index": f"per-{self.y} sorted X lists ({self.core.num_values()} distinct values)",
            "message format": "<ADD|REMOVE, y, INNER_L, INNER_R, OUTER_L, OUTER_R>",
            "reformulated predicate": "(OUTER_L < x1 <= INNER_L) AND (INNER_R <= x2 < OUTER_R)",
            "messages per update": round(c["messages"] / n, 3),
            "subscription index": f"a 2-d point index over (x1, x2) ({len(self)} points): one rectangle "
                                  f"query per message",
            **self._explain_network(c["messages"] / n),
        }


@dataclass
class DistinctSnapshot(RangeClassSnapshot):
    """A RANGE_DISTINCT group's snapshot (``ys``: numbers, or strings for a text column)."""
    kind: ClassVar[str] = "RANGE_DISTINCT"
    group_class: ClassVar[type] = DistinctGroup
