"""The columns and constants several subscription families share (DESIGN §5's output forms).

One home for what more than one family reads or writes: the op codes of an update batch, the unicast
row and the range-min message (also the base of every ``publish`` / ``stream`` output, to which each
family adds its columns: ``operators/contract.py``), the item columns of the range classes and box groups,
the prefix under which a table's columns travel to the tasks, and the columns ``deliver`` needs of a
unicast row passed through.  Pure (pyarrow only).
"""
from __future__ import annotations

import pyarrow as pa

__all__ = ["UPSERT", "DELETE", "MESSAGE_SCHEMA", "UNICAST_SCHEMA", "ITEM_SCHEMA", "UNICAST_ITEMS_SCHEMA",
           "RANGE_MESSAGE_SCHEMA", "UNICAST_ROW_SCHEMA", "EVENT_PREFIX", "MODES", "with_reason", "with_unicast_rows",
           "mode_schema", "publish_schema", "spark_type_name"]

#: an update batch's ``op`` column (int8): a row replaces the row with its key, or deletes it
UPSERT, DELETE = 0, 1

#: the output forms of ``publish`` and ``stream`` (DESIGN §5)
MODES = ("unicast", "reformulated")

#: a range-min message ⟨NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R⟩ (000 §3); the reformulated output's
#: base columns, which the other families extend
MESSAGE_SCHEMA = pa.schema([
    ("group_id", pa.string()), ("seq", pa.int64()), ("step", pa.int8()), ("op", pa.string()),
    ("new_value", pa.float64()), ("inner_l", pa.float64()), ("inner_r", pa.float64()),
    ("outer_l", pa.float64()), ("outer_r", pa.float64()),
])
#: one notification per affected subscription (S-UN); the unicast output's base columns
UNICAST_SCHEMA = pa.schema([
    ("subscription_id", pa.string()), ("op", pa.string()), ("value", pa.float64()), ("seq", pa.int64()),
    ("group_id", pa.string()),
])

#: Columns a range-class (top-k, DISTINCT, aggregate) or box notification adds to ``UNICAST_SCHEMA``
#: (null where they do not apply): which object entered / left a top-k, which string joined a DISTINCT set.
ITEM_SCHEMA = pa.schema([("item_key", pa.string()), ("item_x", pa.float64()), ("item_text", pa.string())])

#: A range-class unicast row: :data:`UNICAST_SCHEMA` + :data:`ITEM_SCHEMA`.
UNICAST_ITEMS_SCHEMA = pa.schema([*UNICAST_SCHEMA, *ITEM_SCHEMA])

#: The messages of the range classes' reformulated form (``op``: the core's message kind); box groups add
#: their second attribute's columns (``box/group.py``).
RANGE_MESSAGE_SCHEMA = pa.schema([
    ("group_id", pa.string()), ("seq", pa.int64()), ("op", pa.string()), ("k", pa.int64()),
    ("new_value", pa.float64()), ("item_text", pa.string()), ("item_key", pa.string()),
    ("item_x", pa.float64()), ("d_count", pa.int64()),
    ("inner_l", pa.float64()), ("inner_r", pa.float64()), ("outer_l", pa.float64()), ("outer_r", pa.float64()),
    # the message's position in its group's output for the batch: a subscriber applies one seq's messages
    # in this order (002 §II-A, footnote 6: an object's new value before its replacement), whatever a
    # shuffle does to the rows on the way
    ("msg_no", pa.int64()),
])

#: what a unicast row of a class without messages (FILTER, BAND_JOIN) must carry to reach its subscriber
#: through ``deliver``
UNICAST_ROW_SCHEMA = pa.schema([("subscription_id", pa.string()), ("op", pa.string()), ("seq", pa.int64())])

#: A table's columns travel to the tasks under this prefix (FILTER events, join rows, a join's selected
#: columns), so they never collide with the range groups' batch columns (key, x, y) in the combined batch of
#: one publish; the output names them back (``event_<name>`` where one of ours has the name).
EVENT_PREFIX = "e__"


def with_reason(schema: pa.Schema) -> pa.Schema:
    """An output schema plus the nullable ``reason`` of rejected (stream) or failed (group) rows."""
    return schema.append(pa.field("reason", pa.string()))


def spark_type_name(t: pa.DataType) -> str:
    """The Spark SQL type name of an Arrow type (as ``DataFrame.dtypes`` spells it)."""
    return {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.bool_(): "boolean",
            pa.timestamp("us"): "timestamp", pa.date32(): "date", pa.int8(): "tinyint"}.get(t, "string")


def with_unicast_rows(schema: pa.Schema) -> pa.Schema:
    """Reformulated output that also carries unicast rows (FILTER, BAND_JOIN: no reformulated form; issue 15
    item 6): their ``subscription_id`` first."""
    return schema if "subscription_id" in schema.names else schema.insert(0, pa.field("subscription_id", pa.string()))


def mode_schema(mode: str) -> pa.Schema:
    """The base columns of ``mode``'s output: unicast rows or range-min messages."""
    schemas = {"unicast": UNICAST_SCHEMA, "reformulated": MESSAGE_SCHEMA}
    if mode not in schemas:
        raise ValueError(f"unknown mode {mode!r}; expected 'unicast' or 'reformulated'")
    return schemas[mode]


def publish_schema(mode: str) -> pa.Schema:
    """The output schema of ``publish`` and ``stream`` before any family adds its columns: the mode's
    columns plus a nullable ``reason``."""
    return with_reason(mode_schema(mode))
