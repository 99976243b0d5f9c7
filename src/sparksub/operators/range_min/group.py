"""The RANGE_MIN / RANGE_MAX group operator: every subscription over one (table, x, y, MIN|MAX).

It joins the server core (:class:`~sparksub.operators.range_min.core.RangeMinCore`: A2B-tree, update
classification, Mar / Hull / EMar reformulation — 000 §2–3) with the group's subscriptions, held as
columns in :class:`~sparksub.operators.range_min.delivery.SubscriptionPoints` (a 2-d point index over
``(x1, x2)``), and produces either output form of DESIGN §5:

* ``reformulated`` (S-CN): the messages ⟨NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R⟩, never looking
  at a subscription — the cost is independent of their number (000 §3, Theorem 2);
* ``unicast`` (S-UN): one row per affected subscription, found by one rectangle query per message
  (000 §3.3; dissertation §5.3.3) — never a scan of all subscriptions;
* ``multicast`` (S-MN, 000 §2.1.2 and §3 "S-UN and S-MN Support"): S-UN's rows grouped by update message,
  one multicast message per (update, new value) listing its subscriptions (``targets``);
* ``cn_plus`` (CN+, 000 §2.2.2): no server work at all -- each update enters the network as it is, one
  message per step (an X-move: a deletion at the old X, then an insertion), ⟨key, X, NEW_VALUE⟩ with the
  initial cutoff point (OUTER_L, OUTER_R) = (-inf, +inf); the network and the subscribers do the rest
  (``cn_plus.py``, ``delivery.Subscribers``);
* ``cn_relax`` (the CN baseline, 000 §2.2.1): the number of (update, subscription) deliveries when every
  update is sent to every range containing its old or new X (counted, not materialised);
* ``none``: maintain the index only (replaying a log).

The engine asks for ``reformulated`` and names the variant in the mode (``operators/shared/variants.py``):
``S-CN`` is ``reformulated``, ``S-MN`` ``multicast``, ``CN+`` ``cn_plus``.

This module is pure (numpy / pyarrow); ``runtime/groups.py`` runs it inside Spark tasks.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparksub.operators.range_min.core import RangeMinCore
from sparksub.operators.range_min.delivery import (MESSAGE_BYTES, UNICAST_ROW_BYTES, SubscriptionPoints,
                                                   multicast, unicast)
from sparksub.operators.shared.range_classes import key_text
from sparksub.operators.shared.schemas import DELETE, MESSAGE_SCHEMA, UNICAST_SCHEMA
from sparksub.operators.shared.variants import variant_of

__all__ = ["RangeMinGroup", "GroupSnapshot", "MODES", "VARIANT_MODES", "group_mode", "MULTICAST_SCHEMA",
           "CN_PLUS_SCHEMA"]

#: the group's modes: the output forms (shared/schemas.py), the interfaces of 000 §2 and the baseline's
#: count, or index upkeep only
MODES = ("unicast", "reformulated", "multicast", "cn_plus", "cn_relax", "none")
#: a reformulated variant (``operators/shared/variants.py``) -> the mode that sends it
VARIANT_MODES = {"S-CN": "reformulated", "S-MN": "multicast", "CN+": "cn_plus"}

CN_RELAX_SCHEMA = pa.schema([("group_id", pa.string()), ("seq", pa.int64()), ("deliveries", pa.int64())])
#: S-MN's messages: the message columns (rectangle null) and the subscriptions listed (a JSON array of ids)
MULTICAST_SCHEMA = MESSAGE_SCHEMA.append(pa.field("targets", pa.string()))
#: CN+'s messages: the update (NEW_VALUE, INNER_L = INNER_R = X, the key) and the cutoff point (OUTER_L, OUTER_R)
CN_PLUS_SCHEMA = MESSAGE_SCHEMA.append(pa.field("item_key", pa.string()))


def group_mode(mode: str) -> str:
    """The group's own mode for an engine mode: ``reformulated`` naming a variant is that variant's mode."""
    if mode == "reformulated":
        return VARIANT_MODES[variant_of(mode, "range_min") or "S-CN"]
    return str(mode)


@dataclass
class GroupSnapshot:
    """Everything needed to rebuild a group: its definition, its subscriptions and the table's rows.

    Plain numpy arrays, so it pickles compactly (it is what Spark broadcasts to the tasks).
    """
    group_id: str
    table: str
    x: str
    y: str
    maximum: bool
    sub_ids: np.ndarray
    sub_x1: np.ndarray
    sub_x2: np.ndarray
    keys: np.ndarray
    xs: np.ndarray
    ys: np.ndarray
    templates: dict = field(default_factory=dict)

    def build(self) -> "RangeMinGroup":
        return RangeMinGroup.from_snapshot(self)


class RangeMinGroup:
    stateless = False

    def __init__(self, group_id: str, table: str, x: str, y: str, maximum: bool):
        self.group_id, self.table, self.x, self.y, self.maximum = group_id, table, x, y, maximum
        self.core = RangeMinCore(maximum)
        self.points = SubscriptionPoints()
        self.counters = {"batches": 0, "unicast_rows": 0, "cn_relax_deliveries": 0, "multicast_messages": 0,
                         "multicast_targets": 0, "cn_plus_messages": 0}

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_snapshot(cls, snap: GroupSnapshot) -> "RangeMinGroup":
        g = cls(snap.group_id, snap.table, snap.x, snap.y, snap.maximum)
        if len(snap.sub_ids):
            g.points.add(snap.sub_ids, snap.sub_x1, snap.sub_x2)
        g.load(snap.keys, snap.xs, snap.ys)
        return g

    def load(self, keys, xs, ys) -> None:
        """Bulk-load table rows; rows with a null (NaN) X or Y are not in any range (SQL MIN ignores
        nulls, and a null X satisfies no BETWEEN)."""
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        ok = ~(np.isnan(xs) | np.isnan(ys))
        keys = np.asarray(keys, dtype=object)
        if len(self.core):
            for k, x, y in zip(keys[ok], xs[ok], ys[ok]):
                self.core.upsert(k, x, y)
        else:
            self.core.load(keys[ok], xs[ok], ys[ok])

    # ---- the operator interface (DESIGN §2) -------------------------------------------------------
    def register(self, ids, x1, x2) -> None:
        self.points.add(ids, x1, x2)

    def unregister(self, ids) -> None:
        self.points.remove(ids)

    def __contains__(self, sub_id) -> bool:
        return sub_id in self.points

    def __len__(self) -> int:
        return len(self.points)

    def result(self, sub_id: str) -> float | None:
        x1, x2 = self.points.bounds(sub_id)
        return self.core.range_value(x1, x2)

    def results(self, ids) -> np.ndarray:
        """Vectorised :meth:`result` (NaN = empty), for seeding the subscriber side in bulk."""
        slots = self.points.slots_of(ids)
        return self.core.range_values(self.points.x1[slots], self.points.x2[slots])

    def apply(self, batch, mode: str = "unicast") -> pa.Table:
        """Apply one batch of updates in ``seq`` order; return the notifications in ``mode``'s form.

        ``batch``: a pyarrow Table (or mapping of arrays) with ``key``, ``x``, ``y`` (float64; NaN or
        null = null), ``op`` (0 upsert, 1 delete) and ``seq`` (int64). A null X or Y removes the row
        from every range (a deletion for the index), as SQL's MIN would ignore it.
        """
        mode = group_mode(mode)
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        cols = _columns(batch)
        keys, xs, ys, ops, seqs = cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]
        core, points = self.core, self.points
        self.counters["batches"] += 1
        want_messages = mode in ("unicast", "reformulated", "multicast")
        m_seq, m_step, m_val, m_il, m_ir, m_ol, m_or, m_key = [], [], [], [], [], [], [], []
        old_value: dict[int, float] = {}
        deliveries = np.zeros(len(keys), dtype=np.int64) if mode == "cn_relax" else None
        nan = math.nan
        for i in range(len(keys)):
            key, x, y, op, seq = keys[i], xs[i], ys[i], ops[i], int(seqs[i])
            prev = core.get(key)
            if op == DELETE or x != x or y != y:  # NaN != NaN: a null X or Y
                if prev is None:
                    continue
                outcome = core.delete(key)
            else:
                outcome = core.upsert(key, x, y)
            if deliveries is not None:
                # CN relaxation: the update goes to every subscription whose range holds its old
                # or new X (000 §2.2), however ignorable.
                n = points.index.stab_count(prev[0]) if prev is not None else 0
                if op != DELETE and x == x and y == y and (prev is None or prev[0] != x):
                    n += points.index.stab_count(x)
                deliveries[i] = n
                continue
            if mode == "cn_plus":
                # 000 §2.2.2: the update itself enters the network (a step per message), cutoff (-inf, +inf)
                cur = core.get(key)
                steps = []
                if prev is not None and (cur is None or cur[0] != prev[0]):
                    steps.append((prev[0], nan))          # a deletion, or an X-move's first step
                if cur is not None and cur != prev:
                    steps.append(cur)
                for step_no, (sx, sy) in enumerate(steps):
                    m_seq.append(seq)
                    m_step.append(step_no)
                    m_val.append(sy)
                    m_il.append(sx)
                    m_key.append(key)
                continue
            if not want_messages:
                continue
            steps = outcome.steps
            if len(steps) == 2 and prev is not None:
                old_value[seq] = prev[1]
            for step_no, step in enumerate(steps):
                for msg in step.messages:
                    m_seq.append(seq)
                    m_step.append(step_no)
                    m_val.append(nan if msg.new_value is None else msg.new_value)
                    m_il.append(msg.inner_l)
                    m_ir.append(msg.inner_r)
                    m_ol.append(msg.outer_l)
                    m_or.append(msg.outer_r)
        if mode == "none":
            return MESSAGE_SCHEMA.empty_table()
        if mode == "cn_relax":
            self.counters["cn_relax_deliveries"] += int(deliveries.sum())
            return pa.table({"group_id": pa.array([self.group_id] * len(keys), pa.string()),
                             "seq": pa.array(np.asarray(seqs, dtype=np.int64)),
                             "deliveries": pa.array(deliveries)}, schema=CN_RELAX_SCHEMA)
        vals = np.asarray(m_val, dtype=np.float64)
        if mode == "cn_plus":
            n = len(m_seq)
            self.counters["cn_plus_messages"] += n
            return pa.table({
                "group_id": pa.array([self.group_id] * n, pa.string()),
                "seq": pa.array(m_seq, pa.int64()), "step": pa.array(m_step, pa.int8()),
                "op": pa.array(["CN_PLUS"] * n, pa.string()),
                "new_value": pa.array(vals, pa.float64(), mask=np.isnan(vals)),
                "inner_l": pa.array(m_il, pa.float64()), "inner_r": pa.array(m_il, pa.float64()),
                "outer_l": pa.array(np.full(n, -np.inf)), "outer_r": pa.array(np.full(n, np.inf)),
                "item_key": pa.array([key_text(k) for k in m_key], pa.string()),
            }, schema=CN_PLUS_SCHEMA)
        messages = pa.table({
            "group_id": pa.array([self.group_id] * len(m_seq), pa.string()),
            "seq": pa.array(m_seq, pa.int64()),
            "step": pa.array(m_step, pa.int8()),
            "op": pa.array(["NEW_MAX" if self.maximum else "NEW_MIN"] * len(m_seq), pa.string()),
            "new_value": pa.array(vals, pa.float64(), mask=np.isnan(vals)),
            "inner_l": pa.array(m_il, pa.float64()), "inner_r": pa.array(m_ir, pa.float64()),
            "outer_l": pa.array(m_ol, pa.float64()), "outer_r": pa.array(m_or, pa.float64()),
        }, schema=MESSAGE_SCHEMA)
        if mode == "reformulated":
            return messages
        if mode == "multicast":
            out = multicast(points, messages, old_value)
            self.counters["multicast_messages"] += out.num_rows
            self.counters["multicast_targets"] += sum(len(json.loads(t)) for t in out.column("targets").to_pylist())
            if "group_id" not in out.column_names:
                out = out.append_column("group_id", pa.array([self.group_id] * out.num_rows, pa.string()))
            return out.select(MULTICAST_SCHEMA.names).cast(MULTICAST_SCHEMA)
        rows = unicast(points, messages, old_value)
        self.counters["unicast_rows"] += rows.num_rows
        return rows.select(UNICAST_SCHEMA.names).cast(UNICAST_SCHEMA)

    # ---- introspection ---------------------------------------------------------------------------
    def explain(self) -> dict:
        c = self.core.counters
        non_ignorable = max(c["good"] + c["bad"], 1)
        return {
            "class": "RANGE_MAX" if self.maximum else "RANGE_MIN",
            "group": self.group_id,
            "subscriptions": len(self.points),
            "tuples": len(self.core),
            "algorithm": "update classification (ignorable/good/bad) + Mar, upper Hull, EMar "
                         "reformulation (000 §2-3)",
            "data index": f"A2B-tree on {self.x} with min-{self.y} fields: "
                          f"{self.core.tree.num_leaves} leaves, {self.core.tree.distinct_x()} distinct X",
            "subscription index": _describe_index(self.points.index.stats()),
            "message format": f"<{'NEW_MAX' if self.maximum else 'NEW_MIN'}, INNER_L, INNER_R, OUTER_L, "
                              f"OUTER_R> ({MESSAGE_BYTES} bytes)",
            "reformulated predicate": "(OUTER_L < x1 <= INNER_L) AND (INNER_R <= x2 < OUTER_R) "
                                      "(an infinite OUTER bound admits an infinite end)",
            "cost per update": "O(k log N) for k messages (S-CN), independent of the number of "
                               "subscriptions; unicast adds one rectangle query per message, O(#buckets + hits)",
            "updates seen (ignorable / good / bad)": f"{c['updates']} ({c['ignorable']} / {c['good']} / {c['bad']})",
            "messages per non-ignorable update": round(c["messages"] / non_ignorable, 3),
        }

    def stats(self) -> dict:
        return {**self.core.counters, **self.counters, "subscriptions": len(self.points),
                "tuples": len(self.core), "unicast_row_bytes": UNICAST_ROW_BYTES,
                "message_bytes": MESSAGE_BYTES}


def _describe_index(s: dict) -> str:
    return (f"2-d point index over (x1, x2): {s['points']} points, {s['buckets']} buckets of "
            f"<= {s['bucket_size']} (sorted by x1, then x2), {s['delta_live']} in the unmerged delta")


def _columns(batch) -> dict:
    if isinstance(batch, pa.Table):
        out = {}
        for name in ("key", "x", "y", "op", "seq"):
            col = batch.column(name)
            if name in ("x", "y"):
                out[name] = col.to_numpy(zero_copy_only=False).astype(np.float64)
                if col.null_count:
                    out[name][np.asarray(col.is_null())] = np.nan
            elif name == "key":
                out[name] = col.to_pylist()
            else:
                out[name] = col.to_numpy(zero_copy_only=False)
        return out
    return {k: (list(v) if k == "key" else np.asarray(v)) for k, v in batch.items()}
