"""RANGE_TOPK behind the subscription contract (``operators/contract.py``): ``SELECT cols FROM t WHERE x
BETWEEN lo AND hi ORDER BY y [DESC] LIMIT k`` (002), one group per (table, x, y, order) whatever k
(:class:`~sparksub.operators.topk.group.TopkGroup`).  A subscription's result is its top k as rows of its
selected columns, in rank order (DESIGN §1).  Pure.
"""
from __future__ import annotations

import numpy as np

from sparksub.errors import InvalidSubscription
from sparksub.grammar import statements as st
from sparksub.operators.range_min.delivery import SubscriptionPoints
from sparksub.operators.shared import json_text
from sparksub.operators.shared.families import RangeClassFamily, SlotOutputs, grown, key_type
from sparksub.operators.topk.group import TopkSnapshot
from sparksub.operators.topk.subscribers import TopkSubscribers
from sparksub.planner import ir
from sparksub.planner.logical import MAX_K
from sparksub.planner.projection import table_output_columns

__all__ = ["TopkFamily", "TopkRegistry", "TOPK", "bind_k", "ranked_rows"]


class TopkRegistry(SubscriptionPoints):
    """A top-k group's registry: the ranges, and per slot its LIMIT ``k`` and its output columns."""

    def __init__(self):
        super().__init__()
        self.k_of = np.zeros(0, dtype=np.int64)
        self.outputs = SlotOutputs()

    def note_ranked(self, slots: np.ndarray, k: np.ndarray, outputs) -> None:
        self.k_of = grown(self.k_of, slots, 1)
        self.k_of[slots] = k
        if outputs is not None:
            self.outputs.note(slots, outputs)


def bind_k(node, params: dict, ids: np.ndarray) -> np.ndarray:
    """LIMIT k per subscription: a template constant or a parameter column of positive integers up to
    ``MAX_K`` (k is an int64 column); a bad one is named with its subscription."""
    v = node.k
    if isinstance(v, ir.Const):
        # the planner bounds a constant LIMIT by MAX_K exactly; its float may round up to 2**63
        return np.full(ids.size, min(int(v.value), MAX_K), dtype=np.int64)
    col = np.asarray(params[v.name], dtype=object)
    if col.shape != (ids.size,):
        raise InvalidSubscription(f"parameter {v.name!r} has {col.size} values, expected {ids.size}")
    values = col.tolist()
    bad = next((i for i, k in enumerate(values)
                if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, float, np.integer, np.floating))
                or k != k or k < 1 or k > MAX_K or k != int(k)), None)
    if bad is not None:
        raise InvalidSubscription(f"subscription {ids[bad]!r}: LIMIT :{v.name} must be a positive integer up "
                                  f"to {MAX_K}, got {values[bad]!r:.40}")
    return np.array(values, dtype=np.int64)


def ranked_rows(registry, node, items, sub_id, tables) -> list[dict]:
    """A top-k result ``[(key, x, ..., y)]`` as rows of the subscription's selected columns, in rank order
    (DESIGN §1), read from the table's current rows."""
    outputs = registry.outputs.of([registry.slot(sub_id)])[0]
    state = tables[node.table.lower()]
    names = state.definition.column_names
    at = {c: names.index(c) for _, _, c in outputs}
    return [{name: state.rows[item[0]][at[c]] for name, _, c in outputs} for item in items]


def ranked_output_columns(planned, catalog) -> tuple:
    """A top-k subscription's output columns (``planner.projection``), as plain tuples."""
    return tuple(tuple(c) for c in table_output_columns(st.parse_select(planned.sql), catalog))


class TopkFamily(RangeClassFamily):
    name = "topk"
    node_types = (ir.RangeTopkGroupScan,)
    snapshot_class, subscribers_class = TopkSnapshot, TopkSubscribers
    algorithms = {"RANGE_TOPK": "influence regions + Paint-Batch (002)"}
    operator_names = {ir.RangeTopkGroupScan: "range_topk"}

    def group_id(self, node) -> str:
        if node.descending:
            return f"{node.klass.lower()}:{node.table}.{node.y}_desc@{node.x}"
        return super().group_id(node)

    def new_registry(self, node, catalog, group_id):
        return TopkRegistry()

    def bind(self, node, params, ids, catalog) -> dict:
        return {**super().bind(node, params, ids, catalog), "k": bind_k(node, params, ids)}

    def output_columns(self, planned, catalog):
        return ranked_output_columns(planned, catalog)

    def register(self, registry, node, ids, bound, outputs=None):
        slots = super().register(registry, node, ids, bound)
        registry.note_ranked(slots, bound["k"], outputs)
        return slots

    def option(self, node):
        return node.descending

    def limits(self, registry, slots):
        return registry.k_of[slots].copy()

    def result(self, registry, node, operator, sub_id, tables):
        return ranked_rows(registry, node, operator.result(sub_id), sub_id, tables)

    def _more_parameters(self, registry, node, slots):
        return [("limit", json_text.numbers_text(registry.k_of[slots]))]

    def subscribers(self, registry, node, operator, tables) -> TopkSubscribers:
        return TopkSubscribers.from_group(operator(), key_type=key_type(tables[node.table.lower()].definition))


TOPK = TopkFamily()
