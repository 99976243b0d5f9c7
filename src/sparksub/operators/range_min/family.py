"""RANGE_MIN / RANGE_MAX behind the subscription contract (``operators/contract.py``): ``MIN(y)`` (``MAX(y)``)
over ``x`` in a closed range, every subscription of one (table, x, y, MIN|MAX) in one group
(:class:`~sparksub.operators.range_min.group.RangeMinGroup`; 000 §2-3).  Pure.
"""
from __future__ import annotations

from sparksub.operators.range_min.delivery import Subscribers
from sparksub.operators.range_min.group import GroupSnapshot
from sparksub.operators.shared.families import RangeFamily
from sparksub.operators.shared.schemas import MESSAGE_SCHEMA
from sparksub.planner import ir

__all__ = ["RangeMinFamily", "RANGE_MIN"]

_ALGORITHM = "A2B-tree + update classification, Mar/Hull/EMar (000 §2-3)"


class RangeMinFamily(RangeFamily):
    name = "range_min"
    node_types = (ir.RangeMinGroupScan,)
    algorithms = {"RANGE_MIN": _ALGORITHM, "RANGE_MAX": _ALGORITHM}
    operator_names = {ir.RangeMinGroupScan: "range_min"}

    def snapshot(self, registry, node, group_id, tables) -> GroupSnapshot:
        keys, xs, ys = self.table_rows(node, tables)
        _, ids, x1, x2 = self.live(registry)
        return GroupSnapshot(group_id, node.table, node.x, node.y, node.maximum, ids, x1, x2, keys, xs, ys)

    def message_schema(self, node):
        return MESSAGE_SCHEMA

    def subscribers(self, registry, node, operator, tables) -> Subscribers:
        """Every subscriber seeded with its range's value from the group's core (DESIGN §5's S-CN side)."""
        slots, ids, x1, x2 = self.live(registry)
        subs = Subscribers()
        subs.add(ids, x1, x2, values=operator().core.range_values(x1, x2))
        return subs


RANGE_MIN = RangeMinFamily()
