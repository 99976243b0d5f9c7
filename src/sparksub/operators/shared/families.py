"""What the subscription families (``operators/contract.py``) share: the defaults of the contract, the
per-slot output columns, the frame of the single-table range classes, and the subscriber side of a class
without messages.

:class:`RangeFamily` is the frame of every class over one keyed table whose subscriptions are ranges on an
attribute ``x`` of a value ``y`` (RANGE_MIN / RANGE_MAX, RANGE_TOPK, RANGE_DISTINCT, RANGE_AGG and the box
classes, which add a second attribute): one :data:`~sparksub.operators.contract.ONE` replica per group,
subscriptions bound by ``classifier.bind_range`` into a
:class:`~sparksub.operators.range_min.delivery.SubscriptionPoints` registry, batches of ``key, x, y, op,
seq``, snapshots of the table's ``(key, x, y)`` rows.  Each family fills in what its class adds.  Pure
(numpy / pyarrow).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.errors import UnsupportedSubscription
from sparksub.operators.contract import ONE
from sparksub.operators.range_min.delivery import SubscriptionPoints
from sparksub.operators.shared import json_text
from sparksub.operators.shared.range_classes import with_range_class_columns
from sparksub.operators.shared.schemas import ITEM_SCHEMA, RANGE_MESSAGE_SCHEMA, UNICAST_ITEMS_SCHEMA
from sparksub.planner.catalog import INTEGRAL_TYPES
from sparksub.planner.classifier import bind_range

__all__ = ["FamilyBase", "RangeFamily", "RangeClassFamily", "SlotOutputs", "PassThrough", "grown", "key_type"]


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    """A numeric column as float64, null = NaN (an integer past 2**53 rounds, as float() does)."""
    return column.cast(pa.float64(), safe=False).fill_null(np.nan).to_numpy()


def grown(column: np.ndarray, slots: np.ndarray, fill) -> np.ndarray:
    """A per-slot column grown (geometrically, new rows = ``fill``) to hold ``slots``."""
    if not slots.size or slots.max() < column.shape[0]:
        return column
    grown = np.full((max(int(slots.max()) + 1, 2 * column.shape[0]),) + column.shape[1:], fill, dtype=column.dtype)
    grown[: column.shape[0]] = column
    return grown


def key_type(table) -> type:
    """The Python type of a table's key as subscribers rank it: keys travel as text, and a top-k subscriber
    ranks ties by the key itself (002 §II-A), so an int-keyed table ranks 2 before 10."""
    return int if table.type_of(table.key) in INTEGRAL_TYPES else str


class SlotOutputs:
    """Each slot's output columns (a subscription's SELECT list, DESIGN §1: ``((name, side, column), ...)``),
    kept as the distinct projections and one index per slot (a million subscriptions of one template share
    one tuple)."""

    def __init__(self):
        self.outputs: list = []                               # distinct projections
        self.output_of = np.zeros(0, dtype=np.int32)          # slot -> index into outputs

    def note(self, slots: np.ndarray, outputs: tuple) -> None:
        if outputs not in self.outputs:
            self.outputs.append(outputs)
        self.output_of = grown(self.output_of, slots, 0)
        self.output_of[slots] = self.outputs.index(outputs)

    def of(self, slots) -> list:
        """The output columns of each of ``slots``."""
        slots = np.asarray(slots, dtype=np.int64)
        if not self.outputs:
            return [()] * len(slots)
        return [self.outputs[i] for i in self.output_of[slots].tolist()]


class FamilyBase:
    """The contract's defaults: a class over keyed tables, with a reformulated form, one replica per group,
    no output columns of its own, no query changes logged, the operator's own result / EXPLAIN / stats."""

    name = ""
    node_types: tuple = ()
    placement = ONE
    stateless = False
    item_schema = pa.schema([])
    #: class -> what its operator runs (``algorithm``); plan node type -> its operator's name
    algorithms: dict = {}
    operator_names: dict = {}
    #: why an append-only stream cannot be this class's table (the refusal's second half)
    stream_refusal = "only FILTER subscriptions read streams (a range aggregate needs a table with a key)"

    def tables(self, node) -> tuple[str, ...]:
        return (node.table.lower(),)

    def check_tables(self, node, catalog) -> None:
        if catalog.get(node.table).key is None:
            raise UnsupportedSubscription(f"{node.klass} over the append-only stream {node.table!r}: "
                                          f"{self.stream_refusal}", ("FILTER",))

    def output_columns(self, planned, catalog):
        return None

    def unregister(self, registry, node, ids) -> None:
        registry.remove(list(ids))

    def take_change(self, registry):
        return None

    def reformulated(self, node) -> bool:
        return True

    def stream_columns(self, node, table):
        return None

    def result(self, registry, node, operator, sub_id, tables):
        return operator.result(sub_id)

    def explain_lines(self, registry, node, operator):
        return None if operator is None else operator.explain()

    def stats(self, registry, node, operator) -> dict:
        return operator.stats()

    def operator_name(self, node) -> str:
        return self.operator_names[type(node)]

    def algorithm(self, node) -> str:
        return self.algorithms[node.klass]


class RangeFamily(FamilyBase):
    """The frame of the single-table range classes (module docstring)."""

    def group_id(self, node) -> str:
        return f"{node.klass.lower()}:{node.table}.{node.y or '*'}@{node.x}"

    def new_registry(self, node, catalog, group_id: str):
        return SubscriptionPoints()

    def bind(self, node, params, ids, catalog) -> dict:
        x1, x2 = bind_range(node, params, ids.size, ids=ids)
        return {"x1": x1, "x2": x2}

    def register(self, registry, node, ids, bound, outputs=None) -> np.ndarray:
        return registry.add(ids, bound["x1"], bound["x2"])

    # ---- the data path -----------------------------------------------------------------------------------
    def output_schema(self, schema, mode, groups, table) -> pa.Schema:
        return schema

    def group_batch(self, node, table, batch, seqs) -> pa.Table:
        y, extra = self._y_values(node, table, batch)
        return pa.table({
            "key": batch.column(table.key),
            "x": batch.column(node.x).cast(pa.float64()),
            "y": y,
            "op": batch.column("op"),
            "seq": pa.array(seqs, pa.int64()),
            **extra,
        })

    def _y_values(self, node, table, batch) -> tuple:
        """The batch's ``y`` column (float64) and any further columns the group reads."""
        return batch.column(node.y).cast(pa.float64()), {}

    def y_is_text(self, node, table) -> bool:
        """Whether the group's y values travel as strings (a DISTINCT over a text column)."""
        return False

    def stream_columns(self, node, table):
        return node.x, node.y, self.y_is_text(node, table), getattr(node, "x2", None)

    def table_rows(self, node, tables, text: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The table's rows as the snapshot holds them: keys, x (float64, NaN = null) and y (float64, NaN =
        null; ``text``: objects, None = null)."""
        state = tables[node.table.lower()]
        rows = state.rows.table()   # the engine's RowStore (row_store.py): Arrow columns, the rows' order
        keys = np.array(rows.column(state.definition.key).to_pylist(), dtype=object)
        xs = _floats(rows.column(node.x))
        y = rows.column(node.y if node.y is not None else node.x)
        ys = np.array(y.to_pylist(), dtype=object) if text else _floats(y)
        return keys, xs, ys

    @staticmethod
    def live(registry) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The live slots, their ids and ``[x1, x2]`` bounds (copies: a snapshot outlives the registry's state)."""
        slots = registry.live_slots()
        return slots, registry.ids_of(slots), registry.x1[slots].copy(), registry.x2[slots].copy()

    # ---- reading the state ---------------------------------------------------------------------------------
    def parameters(self, registry, node):
        slots = registry.live_slots()
        fields = [(node.x, json_text.pair(registry.x1[slots], registry.x2[slots]))]
        fields += self._more_parameters(registry, node, slots)
        return slots, registry.id_array(slots), json_text.object_text(fields)   # Arrow: no str per id

    def _more_parameters(self, registry, node, slots) -> list:
        """SHOW SUBSCRIPTIONS' fields beyond the range on ``x``: ``(name, JSON text part)`` pairs."""
        return []


class RangeClassFamily(RangeFamily):
    """The frame of RANGE_TOPK, RANGE_DISTINCT and RANGE_AGG (``shared/range_classes.py``): notifications with
    the item columns, messages in ``RANGE_MESSAGE_SCHEMA``, the class's ``RangeClassSnapshot`` subclass and
    subscriber side (``snapshot_class``, ``subscribers_class``)."""

    item_schema = ITEM_SCHEMA
    snapshot_class: type
    subscribers_class: type
    #: the snapshot keeps y as objects (DISTINCT: numbers or strings), else as float64
    object_values = False

    def option(self, node):
        """The snapshot's ``option``: what the class's group reads beyond x and y (top-k: the order)."""
        return None

    def limits(self, registry, slots: np.ndarray) -> np.ndarray:
        """Each subscription's ``k`` in the snapshot (1 but for top-k)."""
        return np.ones(len(slots), np.int64)

    def output_schema(self, schema, mode, groups, table):
        return with_range_class_columns(schema, mode)

    def snapshot(self, registry, node, group_id, tables):
        keys, xs, ys = self.table_rows(node, tables, text=self.object_values)
        slots, ids, x1, x2 = self.live(registry)
        return self.snapshot_class(group_id, node.table, node.x, node.y, self.option(node), ids, x1, x2,
                                   self.limits(registry, slots), keys, xs, ys)

    def message_schema(self, node):
        return RANGE_MESSAGE_SCHEMA

    def subscribers(self, registry, node, operator, tables):
        return self.subscribers_class.from_group(operator())


class PassThrough:
    """The subscriber side of a class without messages (FILTER, BAND_JOIN; issue 15 item 6): its unicast rows
    among reformulated output reach their subscribers as they are -- the unicast columns and the columns its
    rows carry (``carried``: the event's; the result tuple's keys and selected columns) under the names a
    unicast publish gives them: a reformulated publish renames a carried column that collides with a message
    column (``k`` beside top-k messages' ``k``) to ``event_<name>``, which a unicast publish does only for the
    unicast form's own columns (``control/event_queries._rename_event_columns``).

    >>> rows = pa.table({"subscription_id": ["f"], "op": ["match"], "k": pa.nulls(1, pa.int64()), "event_k": [7],
    ...                  "y": [2.0]})
    >>> PassThrough(["subscription_id", "op"], ["k", "y"]).deliver(rows).to_pylist()
    [{'subscription_id': 'f', 'op': 'match', 'k': 7, 'y': 2.0}]
    """

    def __init__(self, unicast_names, carried):
        self.unicast_names = list(unicast_names)
        self.carried = list(carried)

    def deliver(self, rows: pa.Table) -> pa.Table:
        cols = {c: rows.column(c) for c in self.unicast_names if c in rows.column_names}
        reserved = {*UNICAST_ITEMS_SCHEMA.names, "reason"}
        for c in self.carried:
            source = f"event_{c}" if f"event_{c}" in rows.column_names else c if c in rows.column_names else None
            if source is not None:
                cols.setdefault(f"event_{c}" if c in reserved else c, rows.column(source))
        return pa.table(cols)
