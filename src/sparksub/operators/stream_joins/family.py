"""STREAM_JOIN and STREAM_BAND_JOIN behind the subscription contract (``operators/contract.py``): joins of two
event streams with a bounded state (003 ch. 3; issue 19 item 2), run by :class:`~sparksub.operators.
stream_joins.group.StreamJoinGroup` over the pure core.

One group per (streams, join predicate, ``WITH`` options) -- the state's contents depend on all three --, its
subscriptions differing in their local selections' constants (as BAND_JOIN's: registry columns
``L:<col>:lo`` ..., NaN where a template does not select on a column).  The group is one
:data:`~sparksub.operators.contract.ONE` replica (one Spark task, as a range group: the state's bound is the
group's, one policy decides over the whole side).  The engine keeps no rows of a stream, so the state lives
only in the replica: a new base (subscriptions changed, log compaction, a failure) carries the operator as it
is (:meth:`StreamJoinFamily.carry_state`, which ``control/publishing.py`` calls).  Pure.
"""
from __future__ import annotations

import json

import pyarrow as pa

from sparksub.errors import InvalidArgument, InvalidSubscription, UnsupportedSubscription
from sparksub.operators.contract import ONE
from sparksub.operators.joins import group as join_groups
from sparksub.operators.joins.family import selected_columns, selection_columns, with_join_columns
from sparksub.operators.joins.group import JOIN_ITEM_SCHEMA, JoinSubscriptions
from sparksub.operators.shared import json_text
from sparksub.operators.shared.families import FamilyBase, PassThrough, SlotOutputs
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import EVENT_PREFIX, UNICAST_ROW_SCHEMA, UNICAST_SCHEMA, with_unicast_rows
from sparksub.operators.stream_joins.group import StreamJoinGroup, StreamJoinSnapshot
from sparksub.operators.stream_joins.options import from_options, parse_state_options
from sparksub.planner import ir
from sparksub.planner.classifier import bind_stream_join

__all__ = ["StreamJoinFamily", "StreamJoinRegistry", "STREAM_JOINS", "checked_options"]

L, R = 0, 1


def checked_options(node) -> dict:
    """The node's ``WITH (...)`` options checked (``options.parse_state_options``, then the bounds positive and
    the operator built once, so that a contradiction shows now): a bad one raises InvalidSubscription naming
    the option, its value and the join, before anything is registered."""
    where = f"in WITH (...) of the stream join {node.left} JOIN {node.right}"
    try:
        options = parse_state_options(dict(node.options))
        for name in ("max_state_rows", "shared_state_rows"):
            v = options.get(name)
            for n in (v if isinstance(v, tuple) else (v,)):
                if n is not None and n < 1:
                    raise InvalidSubscription(f"option {name}: expected a positive integer (rows of state), "
                                              f"got {dict(node.options)[name]!r}")
        from_options(options, band=node.band)
    except (InvalidSubscription, InvalidArgument) as err:
        raise InvalidSubscription(f"{err} ({where})") from None
    return options


class StreamJoinRegistry(JoinSubscriptions):
    """A stream-join group's registry: the subscriptions' selection bounds (:class:`~sparksub.operators.joins.
    group.JoinSubscriptions`: ``L:<col>:lo`` ... per side, NaN = no selection on that column), their output
    columns and the two streams' definitions."""

    def __init__(self, group_id: str, left, right):
        super().__init__()
        self.group_id = group_id
        self.left, self.right = left, right
        self.column_types = {(d, c): arrow_type(t) for d, tdef in enumerate((left, right)) for c, t in tdef.columns}
        self.outputs = SlotOutputs()

    def output_types(self) -> dict:
        return join_groups.output_types(self.outputs.outputs, self.column_types)


class StreamJoinFamily(FamilyBase):
    name = "stream_joins"
    node_types = (ir.StreamJoinGroupScan,)
    placement = ONE
    item_schema = JOIN_ITEM_SCHEMA
    algorithms = {"STREAM_JOIN": "bounded stream-stream equality join, HEEB / ECB / LRU / LFU / PROB / LIFE "
                                 "replacement (003 ch. 3)",
                  "STREAM_BAND_JOIN": "bounded stream-stream band join, HEEB / ECB / LRU / LFU / PROB / LIFE "
                                      "replacement (003 ch. 3)"}
    operator_names = {ir.StreamJoinGroupScan: "stream_join"}

    # ---- planning and registration ---------------------------------------------------------------------------
    def tables(self, node) -> tuple[str, ...]:
        return (node.left.lower(), node.right.lower())

    def check_tables(self, node, catalog) -> None:
        for t in (node.left, node.right):   # (the planner makes this node for two streams only)
            if catalog.get(t).key is not None:
                raise UnsupportedSubscription(f"{node.klass} over the keyed table {t!r}: a stream-stream join reads "
                                              f"two event streams (tables without a PRIMARY KEY)",
                                              ("SELECT_JOIN", "BAND_JOIN"))
        checked_options(node)

    def group_id(self, node) -> str:
        on = (f"{node.left}.{node.left_on}={node.right}.{node.right_on}" if node.band is None else
              f"{node.right}.{node.right_on}-{node.left}.{node.left_on}@[{node.band[0]:g},{node.band[1]:g}]")
        opts = ",".join(f"{k}={v}" for k, v in node.options)
        return f"stream_join:{on}" + (f"#{opts}" if opts else "")

    def new_registry(self, node, catalog, group_id) -> StreamJoinRegistry:
        return StreamJoinRegistry(group_id, catalog.get(node.left), catalog.get(node.right))

    def bind(self, node, params, ids, catalog) -> dict:
        checked_options(node)
        left, right = bind_stream_join(node, params, ids.size, ids=ids)
        return {"columns": selection_columns(left, right)}

    def output_columns(self, planned, catalog) -> tuple:
        return selected_columns(planned, catalog)

    def register(self, registry, node, ids, bound, outputs=None):
        slots = registry.add(ids, bound["columns"])
        if outputs is not None:
            registry.outputs.note(slots, outputs)
        return slots

    # ---- the data path ---------------------------------------------------------------------------------------
    def reformulated(self, node) -> bool:
        return False   # every result tuple is its own notification: unicast rows in either mode

    def output_schema(self, schema, mode, groups, table):
        types: dict = {}
        for _, registry in groups:
            if registry is not None:
                for name, t in registry.output_types().items():
                    types[name] = join_groups.unify_types(types.get(name), t)
        schema = with_join_columns(schema, "unicast", [pa.field(EVENT_PREFIX + n, t) for n, t in types.items()])
        return with_unicast_rows(schema) if mode == "reformulated" else schema

    @staticmethod
    def side_of(node, table) -> int:
        return L if table.name.lower() == node.left.lower() else R

    def group_batch(self, node, table, batch, seqs) -> pa.Table:
        """A publish's events of one stream: the table's columns under EVENT_PREFIX, ``op``, ``seq`` and
        ``j_side`` (which stream)."""
        cols = {EVENT_PREFIX + c: batch.column(c) for c in table.column_names}
        return pa.table({**cols, "op": batch.column("op"), "seq": pa.array(seqs, pa.int64()),
                         "j_side": pa.array([self.side_of(node, table)] * batch.num_rows, pa.int8())})

    def snapshot(self, registry, node, group_id, tables) -> StreamJoinSnapshot:
        """The group's definition and live subscriptions, with an empty state (a base replacing one that held
        state gets it through :meth:`carry_state`)."""
        ids, cols = registry.rows()
        sides = tuple((t.name, on, tuple((c, arrow_type(ty)) for c, ty in t.columns))
                      for t, on in ((registry.left, node.left_on), (registry.right, node.right_on)))
        return StreamJoinSnapshot(group_id, sides, node.band, checked_options(node), ids, cols,
                                  registry.outputs.of(registry.live_slots()), registry.output_types())

    @staticmethod
    def carry_state(snapshot: StreamJoinSnapshot, operator: StreamJoinGroup) -> StreamJoinSnapshot:
        """A new base for the group: ``snapshot`` (the subscriptions as of now) carrying ``operator``'s state
        (the group as of the last committed publish): the kept events exist nowhere else."""
        return snapshot.carrying(operator)

    def stream_columns(self, node, table):
        # (Engine.stream runs a stream join through its own stateful operator, runtime/stream_join_stream.py --
        # one step of the bounded join per micro-batch -- never through the range groups' columns)
        raise UnsupportedSubscription(f"the stream join {node.left} JOIN {node.right} has no range-group columns: "
                                      f"Engine.stream runs it as a stream join", ("stream",))

    # ---- reading the state -----------------------------------------------------------------------------------
    def result(self, registry, node, operator, sub_id, tables):
        return None   # a stream's join result only grows: its rows are the notifications (as FILTER's)

    def explain_lines(self, registry, node, operator) -> dict:
        if operator is not None:
            return operator.explain()
        o = checked_options(node)
        bound = o.get("max_state_rows", o.get("shared_state_rows"))
        return {"algorithm": self.algorithms[node.klass],
                "state bound": "unbounded" if bound is None else (
                    f"max_state_rows={bound}" if "max_state_rows" in o else f"shared_state_rows={bound}"),
                "replacement policy": o.get("state_policy", "HEEB"),
                "MAX-subset error": "0 (no events yet)"}

    def parameters(self, registry, node):
        """The selections as ``{"<table>.<column>": [lo, hi], ...}`` (every selection column of the group; null
        ends where a subscription does not select on one) and the state's options."""
        slots = registry.live_slots()
        ids, columns = registry.rows(slots)
        fields = []
        for pre, table in (("L:", node.left), ("R:", node.right)):
            for name in columns:
                if name.startswith(pre) and name.endswith(":lo"):
                    col = name[2:-3]
                    fields.append((f"{table}.{col}", json_text.pair(columns[name], columns[f"{pre}{col}:hi"])))
        fields += [(k, json.dumps(v)) for k, v in node.options]
        if not fields:
            return slots, ids, json_text.broadcast("{}", len(slots))
        return slots, ids, json_text.broadcast(json_text.object_text(fields), len(slots))

    # ---- deliver() ------------------------------------------------------------------------------------------
    def message_schema(self, node):
        return UNICAST_ROW_SCHEMA

    def subscribers(self, registry, node, operator, tables):
        return PassThrough(UNICAST_SCHEMA.names, [f.name for f in JOIN_ITEM_SCHEMA] + list(registry.output_types()))


STREAM_JOINS = StreamJoinFamily()
