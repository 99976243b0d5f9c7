"""What ``Engine.deliver`` accepts: the messages ``publish(..., mode='reformulated')`` returns, checked before
any subscriber sees one (DESIGN §7: a clear error naming what and where, nothing changed).

Every message names a registered group (``group_id``), and carries the columns that group's subscribers
read, of their types (DESIGN §5: a range group's ``⟨NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R⟩``, a
top-k / DISTINCT / aggregate or box group's rectangle and item, a select-join's result tuple); the unicast
rows of the classes without a reformulated form (FILTER, BAND_JOIN) carry at least their subscription,
``op`` and ``seq``.  A column of another type is cast when Arrow can do it safely (``seq`` read as a
double), else refused.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import BadUpdate
from sparksub.operators.registry import family_of
from sparksub.planner import ir

__all__ = ["message_schema", "checked_messages", "without_rejected"]

#: the columns of a ``rejected`` row that ``deliver`` passes through: the unicast form's and the reason
REJECTED_COLUMNS = ("subscription_id", "op", "value", "seq", "group_id", "reason")


def message_schema(physical: ir.Node) -> pa.Schema:
    """The columns ``deliver`` needs of a group's messages, by the group's operator node: its family's
    (``operators/contract.py``; of its unicast rows for a class without messages)."""
    return family_of(physical).message_schema(physical)


def without_rejected(table: pa.Table) -> tuple[pa.Table, pa.Table | None]:
    """``(messages, rejected rows)`` of a reformulated publish's output: its ``rejected`` rows (a malformed update
    set aside with its reason, DESIGN §7: no group, so no subscriber) are no messages; ``deliver`` passes them
    through as the unicast form carries them (their ``REJECTED_COLUMNS``).  None: there are none."""
    if "op" not in table.column_names or not table.num_rows:
        return table, None
    op = table.column("op")
    if not pa.types.is_string(op.type) and not pa.types.is_large_string(op.type):
        return table, None
    mask = pc.fill_null(pc.equal(op, "rejected"), False)
    if not pc.any(mask).as_py():
        return table, None
    rejected = table.filter(mask)
    return table.filter(pc.invert(mask)), rejected.select([c for c in REJECTED_COLUMNS if c in rejected.column_names])


def checked_messages(table: pa.Table, groups: dict) -> pa.Table:
    """``table`` (the messages) with every column a present group needs cast to its type; ``groups`` maps
    each registered group id to its operator node.  Raises :class:`BadUpdate` naming the row of a message
    without a group or of an unknown group, or a missing or unreadable column and the group that needs it."""
    if not table.num_rows:
        return table
    if "group_id" not in table.column_names:
        raise BadUpdate("deliver(): messages need a group_id column (the output of publish(..., "
                        "mode='reformulated'))", None, "group_id")
    gids = table.column("group_id")
    if not pa.types.is_string(gids.type) and not pa.types.is_large_string(gids.type):
        raise BadUpdate(f"deliver(): group_id must be a string column, got {gids.type}", None, "group_id")
    if gids.null_count:
        row = pc.index(pc.is_null(gids), True).as_py()
        raise BadUpdate("deliver(): a message without a group_id", row, "group_id")
    present = pc.unique(gids).to_pylist()
    unknown = [g for g in present if g not in groups]
    if unknown:
        row = pc.index(gids, unknown[0]).as_py()
        known = ", ".join(sorted(groups)) or "none"
        raise BadUpdate(f"deliver(): messages of unknown group {unknown[0]!r} (groups: {known})", row, "group_id")
    needed: dict[str, tuple[pa.Field, str]] = {}
    for gid in present:
        for f in message_schema(groups[gid]):
            needed.setdefault(f.name, (f, gid))
    for name, (f, gid) in needed.items():
        if name not in table.column_names:
            raise BadUpdate(f"deliver(): the messages of group {gid!r} need a column {name!r} ({f.type}); "
                            f"pass publish(..., mode='reformulated')'s output", None, name)
        col = table.column(name)
        if col.type == f.type:
            continue
        try:
            col = col.cast(f.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
            raise BadUpdate(f"deliver(): column {name!r} of group {gid!r}'s messages is {f.type}, cannot read "
                            f"{col.type} values: {err}", None, name) from None
        table = table.set_column(table.schema.get_field_index(name), name, col)
    return table
