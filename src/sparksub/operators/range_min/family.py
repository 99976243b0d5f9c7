"""RANGE_MIN / RANGE_MAX behind the subscription contract (``operators/contract.py``): ``MIN(y)`` (``MAX(y)``)
over ``x`` in a closed range, every subscription of one (table, x, y, MIN|MAX) in one group
(:class:`~sparksub.operators.range_min.group.RangeMinGroup`; 000 §2-3).  Pure.

The reformulated form has three variants, named in the mode (``operators/shared/variants.py``): S-CN's
rectangles (the default, 000 §2.3.1), S-MN's listed targets (000 §2.1.2: column ``targets``) and CN+'s raw
updates (000 §2.2.2: column ``item_key``); the group reads the variant from the mode it is applied in
(``group.group_mode``), :meth:`RangeMinFamily.output_schema` adds the variant's column, and the subscriber
side takes the messages of any of them (``delivery.Subscribers``), CN+'s from a copy of the table.
"""
from __future__ import annotations

import pyarrow as pa

from sparksub.operators.range_min.delivery import Subscribers
from sparksub.operators.range_min.group import GroupSnapshot
from sparksub.operators.shared.families import RangeFamily
from sparksub.operators.shared.schemas import MESSAGE_SCHEMA
from sparksub.operators.shared.variants import variant_of
from sparksub.planner import ir

__all__ = ["RangeMinFamily", "RANGE_MIN", "VARIANT_COLUMNS"]

_ALGORITHM = "A2B-tree + update classification, Mar/Hull/EMar (000 §2-3)"
#: the column each reformulated variant adds to the messages (000 §2.1.2 S-MN, §2.2.2 CN+)
VARIANT_COLUMNS = {"S-MN": pa.field("targets", pa.string()), "CN+": pa.field("item_key", pa.string())}


class RangeMinFamily(RangeFamily):
    name = "range_min"
    node_types = (ir.RangeMinGroupScan,)
    algorithms = {"RANGE_MIN": _ALGORITHM, "RANGE_MAX": _ALGORITHM}
    operator_names = {ir.RangeMinGroupScan: "range_min"}

    def snapshot(self, registry, node, group_id, tables) -> GroupSnapshot:
        keys, xs, ys = self.table_rows(node, tables)
        _, ids, x1, x2 = self.live(registry)
        return GroupSnapshot(group_id, node.table, node.x, node.y, node.maximum, ids, x1, x2, keys, xs, ys)

    def output_schema(self, schema, mode, groups, table) -> pa.Schema:
        """The messages' columns: S-MN's ``targets`` or CN+'s ``item_key`` when the mode names that variant,
        before ``reason``."""
        f = VARIANT_COLUMNS.get(variant_of(mode, "range_min")) if mode == "reformulated" else None
        if f is not None and f.name not in schema.names:
            schema = schema.insert(len(schema) - 1, f)
        return schema

    def message_schema(self, node):
        return MESSAGE_SCHEMA

    def subscribers(self, registry, node, operator, tables) -> Subscribers:
        """Every subscriber seeded with its range's value from the group's core (DESIGN §5's S-CN side), and the
        table as of now for CN+'s network (000 §2.2.2: it keeps the table along its diagonal)."""
        _, ids, x1, x2 = self.live(registry)
        core = operator().core
        subs = Subscribers()
        subs.add(ids, x1, x2, values=core.range_values(x1, x2))
        subs.attach_table(*core.rows(), maximum=node.maximum)
        return subs


RANGE_MIN = RangeMinFamily()
