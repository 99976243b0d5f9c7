"""A group of one subscription family driven the way the engine drives it, through the contract alone and
without Spark (``Engine.subscribe_many``, ``_replica``, ``_sync_subscribers``, ``publish``): a template planned,
its subscriptions bound and registered, the operator built from the family's snapshot, the subscriber side
seeded from it, batches published as ``publish`` hands them on.  For the tests of the reformulated variants
(issue 19: ``test_range_min_interfaces.py``, ``test_topk_variants.py``)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa

from sparksub.grammar.statements import parse_select
from sparksub.operators.registry import family_of
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.planner.catalog import Catalog, TableDef
from sparksub.planner.classifier import plan_subscription
from sparksub.row_store import RowStore, rows_table

#: the table every variant test runs on: a key, a range attribute x, a value y
T = TableDef("t", (("k", "bigint"), ("x", "double"), ("y", "double")), "k")
CATALOG = Catalog()
CATALOG.add(T)


class FamilyGroup:
    """One group: ``sql`` a template over ``T``, ``subs`` ``[(id, value of each parameter ...)]`` in the order of
    ``params``, ``rows`` the table's rows (key -> (k, x, y)).  ``operator`` and ``subscribers`` as the engine
    holds them; :meth:`publish` applies a batch of ``(k, x, y, op)`` rows in ``mode``."""

    def __init__(self, sql: str, params: tuple, subs, rows: dict):
        planned = plan_subscription(parse_select(sql), CATALOG)
        self.node = planned.physical
        self.family = family_of(self.node)
        gid = self.family.group_id(self.node)
        self.registry = self.family.new_registry(self.node, CATALOG, gid)
        ids = np.array([s[0] for s in subs], dtype=object)
        values = {p: np.array([s[1 + i] for s in subs]) for i, p in enumerate(params)}
        self.family.register(self.registry, self.node, ids, self.family.bind(self.node, values, ids, CATALOG),
                             self.family.output_columns(planned, CATALOG))
        # the engine's TableState holds a RowStore (row_store.py), which snapshots read as Arrow
        self.tables = {"t": SimpleNamespace(definition=T, rows=RowStore(T, rows=rows_table(T, dict(rows))))}
        self.operator = self.family.snapshot(self.registry, self.node, gid, self.tables).build()
        self.subscribers = self.reseed()

    def reseed(self):
        """The subscriber side as the engine seeds it (from the operator as of now)."""
        return self.family.subscribers(self.registry, self.node, lambda: self.operator, self.tables)

    def publish(self, ops, seq0: int, mode) -> pa.Table:
        cols = list(zip(*ops))
        batch = pa.table({c: pa.array(list(v), arrow_type(t)) for (c, t), v in zip(T.columns, cols)} |
                         {"op": pa.array(list(cols[-1]), pa.int8())})
        seqs = np.arange(seq0, seq0 + len(ops), dtype=np.int64)
        return self.operator.apply(self.family.group_batch(self.node, T, batch, seqs), mode)
