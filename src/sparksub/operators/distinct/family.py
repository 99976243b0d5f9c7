"""RANGE_DISTINCT behind the subscription contract (``operators/contract.py``): ``SELECT DISTINCT y FROM t WHERE
x BETWEEN lo AND hi`` (000 §4: Mar over the tuples sharing a y value), one group per (table, x, y)
(:class:`~sparksub.operators.distinct.group.DistinctGroup`).  A text ``y`` travels as strings.  Pure.
"""
from __future__ import annotations

import pyarrow as pa

from sparksub.operators.distinct.group import DistinctSnapshot
from sparksub.operators.distinct.subscribers import DistinctSubscribers
from sparksub.operators.shared.families import RangeClassFamily
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.planner import ir

__all__ = ["DistinctFamily", "DISTINCT"]


class DistinctFamily(RangeClassFamily):
    name = "distinct"
    node_types = (ir.RangeDistinctGroupScan,)
    snapshot_class, subscribers_class = DistinctSnapshot, DistinctSubscribers
    object_values = True
    algorithms = {"RANGE_DISTINCT": "Mar over duplicates (000 §4)"}
    operator_names = {ir.RangeDistinctGroupScan: "range_distinct"}

    def y_is_text(self, node, table) -> bool:
        """A DISTINCT over a non-numeric column: its values travel as strings (``y_text``), not floats."""
        t = arrow_type(table.type_of(node.y))
        return not (pa.types.is_floating(t) or pa.types.is_integer(t))

    def _y_values(self, node, table, batch):
        if self.y_is_text(node, table):
            # strings beside the float ``y`` every group's batch shares (shared/range_classes.batch_columns)
            return pa.nulls(batch.num_rows, pa.float64()), {"y_text": batch.column(node.y).cast(pa.string())}
        return super()._y_values(node, table, batch)


DISTINCT = DistinctFamily()
