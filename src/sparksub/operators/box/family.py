"""BOX_MIN / BOX_MAX / BOX_TOPK behind the subscription contract (``operators/contract.py``): a range class over
a 2-d box ``x IN [lo, hi] AND x2 IN [lo2, hi2]`` (002 §IV-C: a box subscription is a point of the 4-d
subscription space), one group per (table, x, x2, y, MIN|MAX|order) (``box/group.py``).  A BOX_TOPK result
is its top k as rows of its selected columns, as RANGE_TOPK's (``topk/family.py``).  Pure.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.operators.box.group import BOX_COLUMNS, BOX_MESSAGE_SCHEMA, BoxClassSnapshot, BoxSubscribers
from sparksub.operators.range_min.delivery import SubscriptionPoints
from sparksub.operators.shared import json_text
from sparksub.operators.shared.families import RangeFamily, grown, key_type
from sparksub.operators.shared.range_classes import with_range_class_columns
from sparksub.operators.shared.schemas import ITEM_SCHEMA
from sparksub.operators.topk.family import TopkRegistry, bind_k, ranked_output_columns, ranked_rows
from sparksub.planner import ir
from sparksub.planner.classifier import bind_box

__all__ = ["BoxFamily", "BoxRegistry", "BoxTopkRegistry", "BOX"]

_ALGORITHM = "4-d box messages, 2x2-d stabbing index"


class BoxRegistry(SubscriptionPoints):
    """A box group's registry: the ranges on ``x`` in the point index, and per slot its ``[low, high]`` on
    the second attribute ``x2``."""

    def __init__(self):
        super().__init__()
        self.x2_of = np.zeros((0, 2), dtype=np.float64)

    def note_box(self, slots: np.ndarray, x2_lo: np.ndarray, x2_hi: np.ndarray) -> None:
        self.x2_of = grown(self.x2_of, slots, np.nan)
        self.x2_of[slots, 0], self.x2_of[slots, 1] = x2_lo, x2_hi


class BoxTopkRegistry(BoxRegistry, TopkRegistry):
    """A BOX_TOPK group's registry: a box's, and a top-k's ``k`` and output columns per slot."""


class BoxFamily(RangeFamily):
    name = "box"
    node_types = (ir.BoxMinGroupScan, ir.BoxTopkGroupScan)
    item_schema = ITEM_SCHEMA
    algorithms = {"BOX_MIN": _ALGORITHM, "BOX_MAX": _ALGORITHM, "BOX_TOPK": _ALGORITHM}
    operator_names = {ir.BoxMinGroupScan: "box_min", ir.BoxTopkGroupScan: "box_topk"}

    @staticmethod
    def _topk(node) -> bool:
        return isinstance(node, ir.BoxTopkGroupScan)

    def group_id(self, node) -> str:
        if self._topk(node) and node.descending:
            gid = f"{node.klass.lower()}:{node.table}.{node.y}_desc@{node.x}"
        else:
            gid = super().group_id(node)
        return f"{gid},{node.x2}"

    def new_registry(self, node, catalog, group_id):
        return BoxTopkRegistry() if self._topk(node) else BoxRegistry()

    def bind(self, node, params, ids, catalog) -> dict:
        out = dict(zip(("x1", "x2", "x2_lo", "x2_hi"), bind_box(node, params, ids.size, ids=ids)))
        if self._topk(node):
            out["k"] = bind_k(node, params, ids)
        return out

    def output_columns(self, planned, catalog):
        return ranked_output_columns(planned, catalog) if self._topk(planned.physical) else None

    def register(self, registry, node, ids, bound, outputs=None):
        slots = super().register(registry, node, ids, bound)
        registry.note_box(slots, bound["x2_lo"], bound["x2_hi"])
        if self._topk(node):
            registry.note_ranked(slots, bound["k"], outputs)
        return slots

    def _y_values(self, node, table, batch):
        y, extra = super()._y_values(node, table, batch)
        return y, {**extra, "x_2": batch.column(node.x2).cast(pa.float64())}

    def output_schema(self, schema, mode, groups, table):
        return with_range_class_columns(schema, mode, BOX_COLUMNS)

    def snapshot(self, registry, node, group_id, tables) -> BoxClassSnapshot:
        keys, xs, ys = self.table_rows(node, tables)
        state = tables[node.table.lower()]
        ix2 = state.definition.column_names.index(node.x2)
        x2s = np.array([np.nan if row[ix2] is None else row[ix2] for row in state.rows.values()], dtype=np.float64)
        slots, ids, x1, x2 = self.live(registry)
        topk = self._topk(node)
        return BoxClassSnapshot(node.klass, group_id, node.table, node.x, node.x2, node.y,
                                node.descending if topk else node.maximum, ids, x1, x2,
                                registry.x2_of[slots, 0].copy(), registry.x2_of[slots, 1].copy(),
                                registry.k_of[slots].copy() if topk else None, keys, xs, x2s, ys)

    def result(self, registry, node, operator, sub_id, tables):
        got = operator.result(sub_id)
        return ranked_rows(registry, node, got, sub_id, tables) if self._topk(node) else got

    def _more_parameters(self, registry, node, slots):
        fields = [(node.x2, json_text.pair(registry.x2_of[slots, 0], registry.x2_of[slots, 1]))]
        if self._topk(node):
            fields.append(("limit", json_text.numbers_text(registry.k_of[slots])))
        return fields

    def message_schema(self, node):
        return BOX_MESSAGE_SCHEMA

    def subscribers(self, registry, node, operator, tables) -> BoxSubscribers:
        return BoxSubscribers(operator(), key_type(tables[node.table.lower()].definition))


BOX = BoxFamily()
