"""RANGE_AGG behind the subscription contract (``operators/contract.py``): ``SELECT COUNT(*) | SUM(y) | AVG(y)
FROM t WHERE x BETWEEN lo AND hi`` (000 §4: relaxed range subscriptions), one group per (table, x, y,
function) (:class:`~sparksub.operators.agg.group.AggGroup`).  Pure.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.operators.agg.group import AggSnapshot
from sparksub.operators.agg.subscribers import AggSubscribers
from sparksub.operators.shared.families import RangeClassFamily
from sparksub.planner import ir

__all__ = ["AggFamily", "AGG"]


class AggFamily(RangeClassFamily):
    name = "agg"
    node_types = (ir.RangeAggGroupScan,)
    snapshot_class, subscribers_class = AggSnapshot, AggSubscribers
    algorithms = {"RANGE_AGG": "relaxed range deltas with exact sums (000 §4)"}
    operator_names = {ir.RangeAggGroupScan: "range_agg"}

    def group_id(self, node) -> str:
        return f"{node.func.lower()}:{node.table}.{node.y or '*'}@{node.x}"

    def option(self, node):
        return node.func

    def _y_values(self, node, table, batch):
        if node.y is None:
            return pa.array(np.zeros(batch.num_rows)), {}            # COUNT(*): any non-null y
        return super()._y_values(node, table, batch)


AGG = AggFamily()
