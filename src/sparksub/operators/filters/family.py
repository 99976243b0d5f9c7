"""FILTER behind the subscription contract (``operators/contract.py``): a stateless selection ``SELECT cols
FROM t WHERE`` a DNF of ``attr op value`` (001), one group per table (:class:`~sparksub.operators.filters.group.
FilterGroup`, whose registry is the operator itself).  Its notifications are the matching events with the
subscription's projection; it has no reformulated form (unicast rows in either mode) and no result.  The
only class that reads an append-only stream.  Pure.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.operators.contract import SUBSCRIPTION_SHARDS
from sparksub.operators.filters.group import Block, FilterGroup
from sparksub.operators.shared import json_text
from sparksub.operators.shared.families import FamilyBase, PassThrough
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import EVENT_PREFIX, UNICAST_ROW_SCHEMA, UNICAST_SCHEMA, with_unicast_rows
from sparksub.planner import ir
from sparksub.planner.classifier import bind_filter_columns

__all__ = ["FilterFamily", "FILTER", "with_event_columns"]


def with_event_columns(schema: pa.Schema, table) -> pa.Schema:
    """A FILTER notification carries the event: the table's columns, in the task under EVENT_PREFIX."""
    for c, t in table.columns:
        schema = schema.append(pa.field(EVENT_PREFIX + c, arrow_type(t)))
    return schema


class FilterFamily(FamilyBase):
    name = "filters"
    node_types = (ir.FilterGroupScan,)
    placement = SUBSCRIPTION_SHARDS
    stateless = True
    algorithms = {"FILTER": "two-phase matching, clusters, multi-attribute hashing (001)"}
    operator_names = {ir.FilterGroupScan: "filter"}

    def check_tables(self, node, catalog) -> None:
        catalog.get(node.table)   # a keyed table or an append-only stream: both hold events

    def group_id(self, node) -> str:
        return f"filter:{node.table}"

    def new_registry(self, node, catalog, group_id) -> FilterGroup:
        tdef = catalog.get(node.table)
        return FilterGroup(group_id, tdef.name, [(c, arrow_type(t)) for c, t in tdef.columns])

    def bind(self, node, params, ids, catalog) -> dict:
        types = dict(catalog.get(node.table).columns)
        return {"disjuncts": bind_filter_columns(node, params, ids.size, ids=ids, types=types)}

    def register(self, registry, node, ids, bound, outputs=None):
        return registry.add_block(Block(ids, bound["disjuncts"], node.columns))

    # ---- the data path ---------------------------------------------------------------------------------------
    def reformulated(self, node) -> bool:
        return False

    def output_schema(self, schema, mode, groups, table):
        if mode == "reformulated":
            schema = with_unicast_rows(schema)
        return with_event_columns(schema, table)

    def group_batch(self, node, table, batch, seqs) -> pa.Table:
        cols = {EVENT_PREFIX + c: batch.column(c) for c in table.column_names}
        return pa.table({**cols, "op": batch.column("op"), "seq": pa.array(seqs, pa.int64())})

    def snapshot(self, registry, node, group_id, tables):
        return registry.snapshot()   # stateless: the subscriptions are all there is

    # ---- reading the state -----------------------------------------------------------------------------------
    def result(self, registry, node, operator, sub_id, tables):
        return None   # stateless: its matches are the notifications

    def parameters(self, registry, node):
        """The live subscriptions block by block (``FilterGroup.snapshot``: in slot order, the constants still
        columns): their slots, ids and DNFs as ``{"where": [[[attr, op, value...], ...], ...]}``."""
        slots = registry.live_slots()
        ids, texts = [], []
        for block in registry.snapshot().blocks:
            n = len(block)
            conjunctions = [json_text.join_text("[", json_text.commas([_predicate(attr, op, col, n)
                                                                        for attr, op, col in conj]), "]")
                            for conj in block.disjuncts]
            texts.append(json_text.broadcast(json_text.join_text('{"where": [', json_text.commas(conjunctions),
                                                                 "]}"), n))
            ids.append(block.ids)
        if len(slots) != sum(len(i) for i in ids):   # (snapshot and live_slots read the same registry)
            raise AssertionError("FILTER registry: snapshot and live slots disagree")
        return slots, (np.concatenate(ids) if ids else np.empty(0, dtype=object)), \
            (pa.concat_arrays(texts) if texts else pa.array([], pa.string()))

    # ---- deliver() ------------------------------------------------------------------------------------------
    def message_schema(self, node):
        return UNICAST_ROW_SCHEMA

    def subscribers(self, registry, node, operator, tables) -> PassThrough:
        return PassThrough(UNICAST_SCHEMA.names, tables[node.table.lower()].definition.column_names)


def _predicate(attr: str, op: str, col, n: int):
    """One predicate of a DNF as JSON text ``[attr, op, value...]`` (``between`` two values, ``in`` a list,
    ``is_null`` / ``is_not_null`` none)."""
    head = f"[{json_text.text(attr)}, {json_text.text(op)}"
    if op in ("is_null", "is_not_null"):
        return head + "]"
    if op == "between":
        values = [json_text.values_text(col[0], n), json_text.values_text(col[1], n)]
    elif op == "in":
        if isinstance(col, tuple):                   # the template's own list
            items = [json_text.values_text(v, n) for v in col]
        else:                                        # a list per subscription (parameters in the list)
            items = [json_text.values_text(np.asarray(c, dtype=object), n) for c in zip(*col)] if n else []
        values = [json_text.join_text("[", json_text.commas(items), "]")]
    else:
        values = [json_text.values_text(col, n)]
    return json_text.join_text(head + ", ", json_text.commas(values), "]")


FILTER = FilterFamily()
