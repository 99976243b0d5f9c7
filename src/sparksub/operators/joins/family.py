"""SELECT_JOIN and BAND_JOIN behind the subscription contract (``operators/contract.py``): the join groups of
``joins/group.py`` (003 ch. 4), one family for both (they share the registry, the partitions, the projections
and the notification columns; what differs is read from the node).

A join group's rows are routed to :data:`~sparksub.operators.contract.ROW_PARTITIONS` by the join value
(SELECT_JOIN: a hash of it; BAND_JOIN: S by ranges of S.b, R replicated over the widest band), each partition
holding every subscription (or, sharded: row partitions without subscriptions and the subscriptions in shards by
a hash of their id, ``joins/shards.py``); its registry (:class:`JoinRegistry`) remembers how the partitions were cut when
their base was built, and the subscription change waiting to be logged to them (003 §4.2.3: queries change
while data flows).  A subscription's SELECT list is its output (DESIGN §1): notifications and result rows
carry the selected columns under their names.  Pure.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.errors import UnsupportedSubscription
from sparksub.grammar import statements as st
from sparksub.operators.contract import ROW_PARTITIONS
from sparksub.operators.joins import group as join_groups
from sparksub.operators.joins import shards as join_shards
from sparksub.operators.joins.group import (JOIN_ITEM_SCHEMA, JOIN_MESSAGE_SCHEMA, L, R, JoinGroupDescription,
                                            JoinGroupSnapshot, JoinGroupView, JoinSubscribers, JoinSubscriptions,
                                            QueryChange)
from sparksub.operators.joins.router import DYNAMIC
from sparksub.operators.shared import json_text
from sparksub.operators.shared.families import FamilyBase, PassThrough, SlotOutputs
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import (EVENT_PREFIX, UNICAST_ROW_SCHEMA, UNICAST_SCHEMA, with_unicast_rows)
from sparksub.planner import ir
from sparksub.planner.catalog import NUMERIC_TYPES
from sparksub.planner.classifier import bind_band_join, bind_select_join
from sparksub.planner.projection import join_output_columns

__all__ = ["JoinFamily", "JoinRegistry", "JOINS", "with_join_columns"]


class JoinRegistry(JoinSubscriptions):
    """A join group's registry: the subscriptions' bounds (:class:`~sparksub.operators.joins.group.
    JoinSubscriptions`), their output columns, the two tables' definitions, the partitions' ``layout`` as of
    their base (None before one) and the :class:`QueryChange` not yet logged to them."""

    def __init__(self, group_id: str, left, right):
        super().__init__()
        self.group_id = group_id
        self.left, self.right = left, right            # TableDefs of R and S
        #: (side, column) -> Arrow type of every column of the join's two tables
        self.column_types = {(d, c): arrow_type(t) for d, tdef in enumerate((left, right)) for c, t in tdef.columns}
        self.outputs = SlotOutputs()
        self.layout: dict | None = None
        self.pending_change: QueryChange | None = None

    def live_outputs(self) -> list:
        """The output columns of each live subscription, in ``rows()`` order."""
        return self.outputs.of(self.live_slots())

    def output_types(self) -> dict:
        """Output name -> Arrow type over the group's projections (``join_groups.output_types``)."""
        return join_groups.output_types(self.outputs.outputs, self.column_types)


def with_join_columns(schema: pa.Schema, mode: str, selected=()) -> pa.Schema:
    """The columns a join notification adds (``joins/group.py``): the result tuple's keys; reformulated, the
    message's selection values and its position; and ``selected`` (the subscriptions' selected columns, the
    messages' ``table.column`` values, under EVENT_PREFIX), which share their names with the FILTER event
    columns (one column, one type: ``join_groups.unify_types``)."""
    extra = list(JOIN_ITEM_SCHEMA) if mode == "unicast" else [f for f in JOIN_MESSAGE_SCHEMA
                                                              if f.name not in ("group_id", "seq", "op")]
    for f in extra:
        if f.name not in schema.names:
            schema = schema.insert(len(schema) - 1, f)  # before ``reason``
    for f in selected:
        i = schema.get_field_index(f.name)
        if i < 0:
            schema = schema.insert(len(schema) - 1, f)
        elif schema.field(i).type != f.type:
            schema = schema.set(i, pa.field(f.name, join_groups.unify_types(schema.field(i).type, f.type)))
    return schema


class JoinFamily(FamilyBase):
    name = "joins"
    node_types = (ir.SelectJoinGroupScan, ir.BandJoinGroupScan)
    placement = ROW_PARTITIONS
    item_schema = JOIN_ITEM_SCHEMA
    algorithms = {"SELECT_JOIN": "SJ-SSI on hotspots, SJ-SelectFirst/JoinFirst routed per tuple (003 ch. 4)",
                  "BAND_JOIN": "BJ-SSI over a dynamic stabbing partition (003 ch. 4)"}
    operator_names = {ir.SelectJoinGroupScan: "select_join", ir.BandJoinGroupScan: "band_join"}

    @staticmethod
    def _select(node) -> bool:
        return isinstance(node, ir.SelectJoinGroupScan)

    # ---- planning and registration ---------------------------------------------------------------------------
    def tables(self, node) -> tuple[str, ...]:
        return (node.left.lower(), node.right.lower())

    def check_tables(self, node, catalog) -> None:
        for t in (node.left, node.right):   # (a self-join never gets here: the planner wants two tables)
            if catalog.get(t).key is None:
                raise UnsupportedSubscription(f"{node.klass} over the append-only stream {t!r}: join "
                                              f"subscriptions need tables with a PRIMARY KEY (a result tuple "
                                              f"is a pair of keys)", ("FILTER",))

    def group_id(self, node) -> str:
        p = node
        if self._select(p):
            return f"select_join:{p.left}.{p.left_on}={p.right}.{p.right_on}@{p.a or '*'},{p.c or '*'}"
        return f"band_join:{p.right}.{p.right_on}-{p.left}.{p.left_on}"

    def new_registry(self, node, catalog, group_id) -> JoinRegistry:
        return JoinRegistry(group_id, catalog.get(node.left), catalog.get(node.right))

    def bind(self, node, params, ids, catalog) -> dict:
        """The bound constants as the registry's float64 columns (``JoinSubscriptions``)."""
        if self._select(node):
            a_lo, a_hi, c_lo, c_hi = bind_select_join(node, params, ids.size, ids=ids)
            return {"columns": {"a_lo": a_lo, "a_hi": a_hi, "c_lo": c_lo, "c_hi": c_hi}}
        bound = bind_band_join(node, params, ids.size, ids=ids)
        return {"columns": {"lo": bound.low, "hi": bound.high,
                            **selection_columns(bound.left_where, bound.right_where)}}

    def output_columns(self, planned, catalog) -> tuple:
        return selected_columns(planned, catalog)

    def register(self, registry, node, ids, bound, outputs=None):
        """Add the subscriptions; the partitions get them as a log entry (003 §4.2.3), with their output
        columns (DESIGN §1), at the next :meth:`take_change`."""
        columns = bound["columns"]
        slots = registry.add(ids, columns)
        change = QueryChange(ids, columns)
        if outputs is not None:
            registry.outputs.note(slots, outputs)
            change.add_outputs = [outputs] * int(slots.size)
            change.output_types = registry.output_types()
        registry.pending_change = change
        return slots

    def unregister(self, registry, node, ids) -> None:
        registry.remove(list(ids))
        registry.pending_change = QueryChange(np.array([], dtype=object), {}, tuple(ids))

    def take_change(self, registry):
        change, registry.pending_change = registry.pending_change, None
        return change if change is not None and self._fits_layout(registry.layout, change) else None

    @staticmethod
    def _fits_layout(layout: dict | None, change: QueryChange) -> bool:
        """Can the partitions take ``change`` as a log entry?  Not if it adds a local-selection column their
        rows lack, or (BAND_JOIN) a band wider than the reach R rows were replicated over."""
        if layout is None:
            return False
        cols = change.add_columns
        if not len(change.add_ids):
            return True
        for d, pre in enumerate(("L:", "R:")):
            wanted = {n[2:-3] for n in cols if n.startswith(pre) and n.endswith(":lo")}
            if not wanted <= layout["selections"][d]:
                return False
        # a projection selecting a column the partitions' rows lack (DESIGN §1): a new base
        if not all(set(cols) <= layout["payload"][d] for d, cols in
                   enumerate(join_groups.payload_columns(dict.fromkeys(change.add_outputs)))):
            return False
        if layout["kind"] == "BAND_JOIN":
            lo, hi = layout["reach"]
            return bool(np.min(cols["lo"]) >= lo and np.max(cols["hi"]) <= hi)
        return True

    # ---- the partitions --------------------------------------------------------------------------------------
    def sides(self, registry, node) -> tuple:
        """(table, key, join column, selection columns, selected columns) of the left (R) and right (S)
        table (``join_groups.JoinGroupSnapshot``)."""
        p = node
        left, right = registry.left, registry.right
        if self._select(p):
            sel = ((p.a,) if p.a else (), (p.c,) if p.c else ())
        else:  # every local-selection column any template of the group uses (registry columns L:<col>:lo)
            sel = tuple(tuple(sorted({n[2:-3] for n in registry.columns if n.startswith(pre) and n.endswith(":lo")}))
                        for pre in ("L:", "R:"))
        payload = join_groups.payload_columns(registry.outputs.outputs)
        return ((left.name, left.key, p.left_on, sel[0], payload[0]),
                (right.name, right.key, p.right_on, sel[1], payload[1]))

    @staticmethod
    def numeric(registry, node) -> bool:
        """Join values compare as numbers when both join columns are numeric (else as text)."""
        return (registry.left.type_of(node.left_on) in NUMERIC_TYPES
                and registry.right.type_of(node.right_on) in NUMERIC_TYPES)

    @staticmethod
    def side_of(node, table) -> int:
        """Which side of the join ``table`` (a TableDef) is."""
        return L if table.name.lower() == node.left.lower() else R

    @staticmethod
    def targets(node, layout: dict, side: int, row: tuple, names: tuple) -> range:
        """The partitions a row of ``side`` goes to (join_groups: hash of the join value / S.b ranges)."""
        on = node.left_on if side == L else node.right_on
        v = row[names.index(on)]
        if layout["kind"] == "SELECT_JOIN":
            b = join_groups.canonical_join_value(v, layout["numeric"])
            p = 0 if b is None else join_groups.join_value_partition(b, layout["numeric"], layout["partitions"])
            return range(p, p + 1)
        b = None if v is None else float(v)
        if b is None or b != b:
            return range(0, 1)  # joins nothing; kept in one partition so that its delete finds it
        return join_groups.band_partitions(side, b, layout["cuts"], layout["reach"])

    def domains(self, registry, node, tables) -> dict:
        """The spans of R.a, S.b and S.c in the current rows: the router's histograms cover them (003 §4.5.1)."""
        p = node
        if not self._select(p):
            return {}
        left, right = tables[p.left.lower()], tables[p.right.lower()]

        def span(*columns):
            v = np.array([r[i] for state, i in ((tbl, tbl.definition.column_names.index(c)) for tbl, c in columns)
                          for r in state.rows.values() if r[i] is not None], dtype=np.float64)
            v = v[np.isfinite(v)]
            return (float(v.min()), float(v.max()) + 1.0) if v.size else (0.0, 1.0)
        return {"A": span((left, p.a)) if p.a else (0.0, 1.0), "C": span((right, p.c)) if p.c else (0.0, 1.0),
                "B": span((left, p.left_on), (right, p.right_on)) if self.numeric(registry, p) else (0.0, 1.0)}

    def partition_snapshots(self, registry, node, group_id: str, tables, partitions: int,
                            router_mode: str = DYNAMIC, subscriptions: bool = True,
                            rid_prefix: str = "") -> tuple[dict, dict]:
        """``(layout, {replica id: JoinGroupSnapshot})``: the group cut into partitions, each with its rows and
        every subscription (module docstring); ``layout`` says how, for routing later rows
        (:meth:`targets`) and deciding whether a subscription change fits (:meth:`take_change`).

        ``subscriptions`` False (SELECT_JOIN only): a sharded group's row partitions (stage 1, ``joins/shards.py``)
        -- no subscription, and every column of both tables kept (the messages carry whatever a subscription may
        select), so that no subscription change ever needs them rebuilt; replica ids ``<group>#<rid_prefix><i>``."""
        p = node
        sides = self.sides(registry, p)
        numeric = self.numeric(registry, p)
        ids, cols = registry.rows()
        message_payload = None
        if not subscriptions:
            ids, cols = ids[:0], {k: v[:0] for k, v in cols.items()}
            message_payload = tuple(side[4] for side in sides)
            sides = tuple((side[0], side[1], side[2], side[3], tuple(tables[side[0].lower()].definition.column_names))
                          for side in sides)
        n_parts = partitions
        left, right = tables[p.left.lower()], tables[p.right.lower()]
        layout = {"kind": p.klass, "partitions": n_parts, "numeric": numeric,
                  "selections": tuple(set(side[3]) for side in sides), "payload": tuple(set(side[4]) for side in sides)}
        if not self._select(p):
            ib = right.definition.column_names.index(p.right_on)
            sb = np.array([np.nan if r[ib] is None else float(r[ib]) for r in right.rows.values()], dtype=np.float64)
            layout["cuts"] = join_groups.band_cuts(sb, n_parts)
            layout["reach"] = ((float(cols["lo"].min()), float(cols["hi"].max())) if len(ids) else (0.0, 0.0))
            n_parts = len(layout["cuts"]) + 1
        rows = [[{c: [] for c in join_groups.side_columns(side)} for _ in range(n_parts)] for side in sides]
        for d, state in ((L, left), (R, right)):
            names = state.definition.column_names
            want = [(c, names.index(c)) for c in rows[d][0]]
            for row in state.rows.values():
                for part in self.targets(p, layout, d, row, names):
                    target = rows[d][part]
                    for c, i in want:
                        target[c].append(row[i])
        common = dict(router_mode=router_mode, domains=self.domains(registry, p, tables),
                      sub_outputs=registry.live_outputs() if subscriptions else [],
                      output_types=registry.output_types() if subscriptions else {},
                      payload_types=registry.column_types, message_payload=message_payload)
        snaps = {}
        for part in range(n_parts):
            rid = f"{group_id}#{rid_prefix}{part}"
            snaps[rid] = JoinGroupSnapshot(p.klass, group_id, rid, sides, numeric, ids, cols,
                                           (rows[0][part], rows[1][part]), **common)
        return layout, snaps

    def message_payload(self, registry, node) -> tuple:
        """Per side, the columns a select-join group's messages carry: those its subscriptions select."""
        return tuple(side[4] for side in self.sides(registry, node))

    def shard_bases(self, registry, node, shards: int, only=None) -> dict:
        """A sharded SELECT_JOIN group's subscription shards (stage 2, ``joins/shards.py``): ``{shard:
        JoinShardBase}`` of the live subscriptions by a hash of their id (``only``: just those shards)."""
        ids, cols = registry.rows()
        tables = tuple(side[0] for side in self.sides(registry, node))
        return join_shards.shard_bases(registry.group_id, ids, cols, registry.live_outputs(), registry.output_types(),
                                       tables, shards, only)

    def snapshot(self, registry, node, group_id, tables) -> JoinGroupSnapshot:
        """The group as one partition (every row, every subscription)."""
        _, snaps = self.partition_snapshots(registry, node, group_id, tables, 1)
        return next(iter(snaps.values()))

    def stream_snapshot(self, registry, node, group_id: str, tables, side: int,
                        router_mode: str = DYNAMIC) -> JoinGroupSnapshot:
        """The base of a stream-static join over updates of ``side``'s table: the partner's rows as of now,
        none of the streamed side (its rows live in the stream's state store, ``runtime/join_stream.py``)."""
        p = node
        sides = self.sides(registry, p)
        partner = tables[(p.right if side == L else p.left).lower()]
        names = partner.definition.column_names
        wanted = join_groups.side_columns(sides[1 - side])
        rows = [None, None]
        rows[1 - side] = {c: [r[names.index(c)] for r in partner.rows.values()] for c in wanted}
        rows[side] = {c: [] for c in join_groups.side_columns(sides[side])}
        ids, cols = registry.rows()
        return JoinGroupSnapshot(p.klass, group_id, f"{group_id}#stream", sides, self.numeric(registry, p), ids,
                                 cols, tuple(rows), router_mode=router_mode, domains=self.domains(registry, p, tables),
                                 sub_outputs=registry.live_outputs(), output_types=registry.output_types(),
                                 payload_types=registry.column_types)

    # ---- the data path ---------------------------------------------------------------------------------------
    def reformulated(self, node) -> bool:
        return self._select(node)   # a band join answers with its unicast rows (issue 15 item 6)

    def output_fields(self, groups, mode: str) -> list:
        """The selected columns' fields (under EVENT_PREFIX, as the tasks emit them) of ``groups`` in
        ``mode``'s output: unicast rows (and a band join's rows in any mode) carry their subscription's
        output columns; a select-join's messages the ``table.column`` values any of its subscriptions
        selects (``join_groups.message_column``)."""
        types: dict = {}
        for node, registry in groups:
            if registry is None:
                continue
            if mode == "reformulated" and self._select(node):
                ct, sides = registry.column_types, self.sides(registry, node)
                mine = {join_groups.message_column(sides[d][0], c): ct[(d, c)]
                        for d, cols in enumerate(join_groups.payload_columns(registry.outputs.outputs)) for c in cols}
            else:
                mine = registry.output_types()
            for name, t in mine.items():
                types[name] = join_groups.unify_types(types.get(name), t)
        return [pa.field(EVENT_PREFIX + name, t) for name, t in types.items()]

    def output_schema(self, schema, mode, groups, table):
        schema = with_join_columns(schema, mode, self.output_fields(groups, mode))
        if mode == "reformulated" and not all(self.reformulated(node) for node, _ in groups):
            schema = with_unicast_rows(schema)
        return schema

    def group_batch(self, node, table, batch, seqs) -> pa.Table:
        """Rows of ``table`` as a partition reads them: the table's columns under EVENT_PREFIX, ``op``, ``seq``
        and ``j_side``; an upsert of a known key arrives split into the delete of its old row and the insert of
        the new one, and routed (``group_id`` = the partition), by the runtime (``Engine._join_batch``)."""
        cols = {EVENT_PREFIX + c: batch.column(c) for c in table.column_names}
        side = self.side_of(node, table)
        return pa.table({**cols, "op": batch.column("op"), "seq": pa.array(seqs, pa.int64()),
                         "j_side": pa.array([side] * batch.num_rows, pa.int8())})

    # ---- reading the state -----------------------------------------------------------------------------------
    def result(self, registry, node, operator, sub_id, tables) -> list[dict]:
        """The union over the partitions (each pair lives in exactly one), ordered by the pair's keys: each
        result tuple as a row of the selected columns (DESIGN §1)."""
        out = [r for g in operator.values() for r in g.result_rows(sub_id)]
        return [row for _, row in sorted(out, key=lambda t: (str(t[0][0]), str(t[0][1])))]

    def _view(self, registry, node, operator) -> JoinGroupView:
        _, cols = registry.rows()
        return JoinGroupView(node.klass, registry.group_id, operator, cols, registry.layout or {})

    def explain_lines(self, registry, node, operator) -> dict:
        if operator is None:
            return JoinGroupDescription(node.klass).explain()
        return self._view(registry, node, operator).explain()

    def stats(self, registry, node, operator) -> dict:
        return self._view(registry, node, operator).stats()

    def parameters(self, registry, node):
        """The bounds as ``{"<R>.<a>": [lo, hi], "<S>.<c>": [lo, hi]}`` (SELECT_JOIN, the selections the
        template has) or ``{"<S>.<b> - <R>.<b>": [lo, hi], "<table>.<column>": [lo, hi] ...}`` (BAND_JOIN)."""
        p = node
        slots = registry.live_slots()
        ids, columns = registry.rows(slots)
        if self._select(p):
            sel = [(f"{p.left}.{p.a}", "a"), (f"{p.right}.{p.c}", "c")]
            fields = [(what, json_text.pair(columns[f"{c}_lo"], columns[f"{c}_hi"]))
                      for (what, c), col in zip(sel, (p.a, p.c)) if col is not None]
        else:
            fields = [(f"{p.right}.{p.right_on} - {p.left}.{p.left_on}", json_text.pair(columns["lo"], columns["hi"]))]
            for pre, table, where in (("L:", p.left, p.left_where), ("R:", p.right, p.right_where)):
                fields += [(f"{table}.{col}", json_text.pair(columns[f"{pre}{col}:lo"], columns[f"{pre}{col}:hi"]))
                           for col, _, _ in where]
        return slots, ids, json_text.object_text(fields)

    # ---- deliver() ------------------------------------------------------------------------------------------
    def message_schema(self, node):
        return JOIN_MESSAGE_SCHEMA if self._select(node) else UNICAST_ROW_SCHEMA

    def subscribers(self, registry, node, operator, tables):
        """SELECT_JOIN: stateless subscribers, the predicate p ∧ pR ∧ pS over each message (000 §4);
        BAND_JOIN: its unicast rows passed through with the result tuple's keys and selected columns."""
        if not self._select(node):
            return PassThrough(UNICAST_SCHEMA.names, [f.name for f in JOIN_ITEM_SCHEMA] + list(registry.output_types()))
        ids, cols = registry.rows()
        return JoinSubscribers(registry.group_id, ids, cols, registry.live_outputs(),
                               tuple(side[0] for side in self.sides(registry, node)), registry.output_types())


JOINS = JoinFamily()


def selection_columns(left_where: dict, right_where: dict) -> dict:
    """A join's bound range selections as registry columns: ``L:<col>:lo`` / ``L:<col>:hi`` for the left
    table's, ``R:...`` for the right's (band joins here, stream joins in ``operators/stream_joins``)."""
    cols = {}
    for pre, where in (("L:", left_where), ("R:", right_where)):
        for col, (lo, hi) in where.items():
            cols[f"{pre}{col}:lo"], cols[f"{pre}{col}:hi"] = lo, hi
    return cols


def selected_columns(planned, catalog) -> tuple:
    """A join subscription's SELECT list as (name, table, column) tuples (DESIGN §1; ``join_output_columns``)."""
    p = planned.physical
    return tuple(tuple(c) for c in join_output_columns(st.parse_select(planned.sql), catalog, p.left, p.right))
