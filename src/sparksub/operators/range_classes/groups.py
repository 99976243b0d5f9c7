"""Group operators for the range classes beyond MIN/MAX: RANGE_TOPK, RANGE_DISTINCT, RANGE_AGG.

Each group holds one table's rows on (key, x, y) in its core and the subscriptions of one
(table, x, y, ...) as columns, and turns a batch of updates (in ``seq`` order) into notifications,
as :class:`~sparksub.operators.range_min.group.RangeMinGroup` does for MIN/MAX:

* ``unicast``: one row per (affected subscription, change): ``subscription_id, op, value, seq,
  group_id`` plus the item columns of :data:`ITEM_SCHEMA` (which object entered / left a top-k, which
  string value joined a DISTINCT set).  The core's messages of each update are routed through the
  subscription index of :mod:`~sparksub.operators.range_classes.subscribers` to the subscribers they reach,
  which apply them (002 §II-A for top-k, 000 §4 for DISTINCT and aggregates): an update costs its
  messages plus the subscriptions they reach, never a pass over all subscriptions;
* ``reformulated``: the core's messages, whose number does not depend on the subscriptions
  (Paint-Batch over the whole batch for top-k, 002 §IV-A, so subscribers are exact at the batch's
  end; the DISTINCT Mar messages and the relaxed aggregate deltas per update, 000 §4), in
  :data:`RANGE_MESSAGE_SCHEMA`;
* ``none``: maintain the core only (replaying a log).

Cores: :mod:`~sparksub.operators.topk.core`, :mod:`~sparksub.operators.distinct.core`,
:mod:`~sparksub.operators.agg.core`.  Every mode records the influence-region sizes of the core's
messages (:class:`~sparksub.operators.range_classes.subscribers.RegionStats`) for EXPLAIN.  Pure (numpy /
pyarrow); ``spark_groups`` runs them in tasks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparksub.operators.agg import core as range_agg
from sparksub.operators.distinct import core as range_distinct
from sparksub.operators.topk import core as topk
from sparksub.operators.range_min.group import DELETE
from sparksub.operators.range_classes.subscribers import (ITEM_SCHEMA, UNICAST_ITEMS_SCHEMA, DistinctSubscribers,
                                                  RegionStats, TopkSubscribers, key_text)

__all__ = ["RangeClassSnapshot", "TopkGroup", "DistinctGroup", "AggGroup", "ITEM_SCHEMA",
           "RANGE_MESSAGE_SCHEMA"]

#: The messages of the reformulated form (``op``: the core's message kind).
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


@dataclass
class RangeClassSnapshot:
    """A range-class group's definition, subscriptions and the table's rows (what Spark broadcasts)."""

    kind: str            # RANGE_TOPK | RANGE_DISTINCT | RANGE_AGG
    group_id: str
    table: str
    x: str
    y: str | None
    option: object       # descending (top-k) | func (agg) | None
    sub_ids: np.ndarray
    sub_x1: np.ndarray
    sub_x2: np.ndarray
    sub_k: np.ndarray | None
    keys: np.ndarray
    xs: np.ndarray
    ys: np.ndarray
    extra: dict = field(default_factory=dict)

    def build(self):
        cls = {"RANGE_TOPK": TopkGroup, "RANGE_DISTINCT": DistinctGroup, "RANGE_AGG": AggGroup}[self.kind]
        g = cls(self)
        g.load(self.keys, self.xs, self.ys)
        return g


_key_text = key_text


class _RangeClassGroup:
    stateless = False
    kind = ""

    def __init__(self, snap: RangeClassSnapshot):
        self.group_id, self.table, self.x, self.y = snap.group_id, snap.table, snap.x, snap.y
        self.ids = np.asarray(snap.sub_ids, dtype=object)
        self.x1 = np.asarray(snap.sub_x1, dtype=np.float64)
        self.x2 = np.asarray(snap.sub_x2, dtype=np.float64)
        self.slot = {sid: i for i, sid in enumerate(self.ids.tolist())}
        self._stale = False
        self.counters = {"batches": 0, "unicast_rows": 0, "reformulated_messages": 0, "unicast_updates": 0}
        self.regions = RegionStats()   # influence-region sizes of the core's messages (EXPLAIN)
        self.subscribers = None        # range_subscribers: the index and, where kept, each result

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, sub_id) -> bool:
        return sub_id in self.slot

    @staticmethod
    def _valid(xs, ys) -> np.ndarray:
        """Rows in some range: a null (NaN / None) X or Y is in none (SQL ignores it)."""
        xs = np.asarray(xs, dtype=np.float64)
        bad_y = np.fromiter((y is None or (isinstance(y, float) and y != y) for y in np.asarray(ys, dtype=object)),
                            dtype=bool, count=len(xs))
        return ~(np.isnan(xs) | bad_y)

    def apply(self, batch, mode: str = "unicast") -> pa.Table:
        """Apply one batch of updates (``key, x, y, op, seq``) in ``seq`` order (module docstring)."""
        if mode not in ("unicast", "reformulated", "none"):
            raise ValueError(f"unknown mode {mode!r} for {self.kind}; expected 'unicast' or 'reformulated'")
        cols = _columns(batch, text=self.kind == "RANGE_DISTINCT")
        self.counters["batches"] += 1
        if mode != "unicast":
            # the per-subscription unicast state does not follow a replay or a reformulated batch:
            # recomputed from the core when next needed
            self._stale = True
        elif self._stale:
            self._resync()
            self._stale = False
        rows: list = []
        if mode == "reformulated" and hasattr(self, "_batch_messages"):
            rows = self._batch_messages(cols)
            self.counters["reformulated_messages"] += len(rows)
            out = {f.name: [r.get(f.name) for r in rows] for f in RANGE_MESSAGE_SCHEMA}
            out["group_id"] = [self.group_id] * len(rows)
            out["msg_no"] = list(range(len(rows)))
            return pa.table(out, schema=RANGE_MESSAGE_SCHEMA)
        for key, x, y, op, seq in zip(cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]):
            null = x is None or x != x or y is None or (isinstance(y, float) and y != y)
            prev = self._x_of(key)
            if op == DELETE or null:
                if prev is None:
                    continue
                outcome = self._delete(key)
            else:
                outcome = self._upsert(key, float(x), y)
            self._observe(outcome.messages)
            if mode == "unicast":
                self.counters["unicast_updates"] += 1
            if mode != "none":
                rows.extend(self._notifications(outcome, int(seq), mode))
        if mode == "none":
            return RANGE_MESSAGE_SCHEMA.empty_table()
        schema = RANGE_MESSAGE_SCHEMA if mode == "reformulated" else _UNICAST_ITEMS
        self.counters["reformulated_messages" if mode == "reformulated" else "unicast_rows"] += len(rows)
        out = {f.name: [r.get(f.name) for r in rows] for f in schema}
        out["group_id"] = [self.group_id] * len(rows)
        if mode == "reformulated":
            out["msg_no"] = list(range(len(rows)))
        return pa.table(out, schema=schema)

    def _x_of(self, key):
        """The X a row has in the core (every core's ``get`` gives ``(x, y)``), or None."""
        r = self.core.get(key)
        return None if r is None else r[0]

    def _resync(self) -> None:
        """Rebuild what unicast keeps per subscription from the core (after a log replay)."""

    def _observe(self, messages) -> None:
        """Record the rectangles of the core's messages (every mode: a replay counts too)."""
        observe = self.regions.observe
        for m in messages:
            observe(*self._rectangle(m))

    def _explain_network(self, messages_per_update: float) -> dict:
        """The EXPLAIN lines every range class shares: the influence regions of the messages so far (this
        copy of the group: a replayed log counts), their reach in the subscription index and the expected
        traffic per update (keys in a fixed order)."""
        mean, top, n = self.regions.reach(self._count)
        return {
            "influence regions": self.regions.extent(self._extent_name),
            "subscriptions reached per message (index count, last messages)":
                f"mean {mean:.2f} / max {top} over {n} messages",
            # deliveries = messages x reach: what the network hands to subscribers per update
            "expected per update (messages / deliveries)":
                f"{messages_per_update:.3f} / {messages_per_update * mean:.3f}",
        }

    def stats(self) -> dict:
        return {**self.core.counters, **self.counters, "subscriptions": len(self), "tuples": len(self.core)}


_UNICAST_ITEMS = UNICAST_ITEMS_SCHEMA


def _columns(batch, text: bool = False) -> dict:
    """``key, x, y, op, seq`` as Python lists; ``text``: y from ``y_text`` where the engine put a
    string column's values (DISTINCT takes strings; other groups of the batch see nulls there)."""
    if not isinstance(batch, pa.Table):
        batch = pa.table(dict(batch))
    out = {name: batch.column(name).to_pylist() for name in ("key", "x", "y", "op", "seq")}
    if text and "y_text" in batch.column_names:
        out["y"] = [t if t is not None else y for t, y in zip(batch.column("y_text").to_pylist(), out["y"])]
    return out


class TopkGroup(_RangeClassGroup):
    """RANGE_TOPK: Paint-Batch messages (reformulated) or per-subscription changes (unicast: each
    update's Paint-Dense messages routed to the subscribers they reach, 002 §II-A / §III-A)."""

    kind = "RANGE_TOPK"
    _extent_name = "X extent"

    def __init__(self, snap: RangeClassSnapshot):
        super().__init__(snap)
        self.descending = bool(snap.option)
        self.k = np.asarray(snap.sub_k, dtype=np.int64)
        # the reformulated form paints for the k values in use (002 §II-A, one sweep for the largest)
        self.core = topk.TopkCore("dense", descending=self.descending, ks=sorted(set(self.k.tolist())) or [1])

    def load(self, keys, xs, ys) -> None:
        ok = self._valid(xs, ys)
        self.core.load(np.asarray(keys, dtype=object)[ok].tolist(), np.asarray(xs, dtype=np.float64)[ok],
                       np.asarray(ys, dtype=np.float64)[ok])
        self._resync()

    def _resync(self) -> None:
        # the subscriber lists from the core; the index over (x1, x2) per k is built once
        if self.subscribers is None:
            self.subscribers = TopkSubscribers.from_group(self)
        else:
            self.subscribers.reseed(self.core)

    @staticmethod
    def _rectangle(m) -> tuple:
        return m.k, m.inner_l, m.inner_r, m.outer_l, m.outer_r

    def _count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        if self.subscribers is None:
            return 0
        return self.subscribers.count(k, inner_l, inner_r, outer_l, outer_r)

    def _upsert(self, key, x, y):
        return self.core.upsert(key, x, float(y))

    def _delete(self, key):
        return self.core.delete(key)

    def result(self, sub_id) -> list[tuple]:
        i = self.slot[sub_id]
        return self.core.top_k(self.x1[i], self.x2[i], int(self.k[i]))

    def _batch_messages(self, cols) -> list[dict]:
        """A whole batch through Paint-Batch (002 §IV-A): subscribers are exact at the batch's end;
        every message carries the batch's last ``seq``."""
        events, alive = [], {}         # alive: key -> exists at this point of the batch
        for key, x, y, op, seq in zip(cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"]):
            null = x is None or x != x or y is None or y != y
            exists = alive[key] if key in alive else self.core.get(key) is not None
            if op == DELETE or null:
                if exists:
                    events.append(("delete", key))
                    alive[key] = False
            else:
                events.append(("upsert", key, float(x), float(y)))
                alive[key] = True
        if not events:
            return []
        last = int(cols["seq"][-1])
        outcome = self.core.apply_batch(events)
        self._observe(outcome.messages)
        self._stale = True             # the unicast lists did not follow
        return [{"seq": last, "op": "DELETE" if m.y is None else "PUT", "k": m.k, "new_value": m.y,
                 "item_key": _key_text(m.key), "item_x": m.x, "inner_l": m.inner_l, "inner_r": m.inner_r,
                 "outer_l": m.outer_l, "outer_r": m.outer_r} for m in outcome.messages]

    def _notifications(self, outcome, seq: int, mode: str) -> list[dict]:
        if mode == "reformulated":
            return [{"seq": seq, "op": "DELETE" if m.y is None else "PUT", "k": m.k,
                     "new_value": m.y, "item_key": _key_text(m.key), "item_x": m.x,
                     "inner_l": m.inner_l, "inner_r": m.inner_r, "outer_l": m.outer_l, "outer_r": m.outer_r}
                    for m in outcome.messages]
        # unicast: the update's Paint-Dense messages reach exactly the subscriptions whose top-k may
        # change (002 §III-A, Theorem 1); each applies them by the §II-A protocol and the ones whose list
        # changed get the diff as rows (the change a unicast server sends, 002 §V)
        return self.subscribers.receive(outcome.messages, seq)

    def explain(self) -> dict:
        c = self.core.counters
        n = max(c["updates"], 1)
        return {
            "class": "RANGE_TOPK", "group": self.group_id, "subscriptions": len(self), "tuples": len(self.core),
            "order": f"{self.y} {'DESC' if self.descending else 'ASC'}, ties by key ascending",
            "k values": sorted(set(self.k.tolist())),
            "algorithm": "influence regions (Lemma 2) + Paint-Dense (002 §III-A), Paint-Batch per "
                         "publish batch (002 §IV-A); unicast: each update's messages routed to the "
                         "subscribers they reach, rows by list diff",
            "data index": f"A2B-tree on {self.x} (first_k / min_y, 002 §II-B): "
                          f"{self.core.tree.num_leaves} leaves",
            "message format": "Msg(k, INNER_L, INNER_R, OUTER_L, OUTER_R, key, x, y) (002 §II-A)",
            "reformulated predicate": "k = k_s AND (OUTER_L < x1 <= INNER_L) AND (INNER_R <= x2 < OUTER_R)",
            "calls per update (first_k / min_y / snap)": f"{c['first_k'] / n:.2f} / {c['min_y'] / n:.2f} / "
                                                         f"{c['snap'] / n:.2f}",
            "messages per update": round(c["messages"] / n, 3),
            "calls so far (first_k / min_y / snap)": f"{c['first_k']} / {c['min_y']} / {c['snap']}",
            "subscription index": f"a 2-d point index over (x1, x2) per k ({len(self)} points): one "
                                  f"rectangle query per message and k (002 §II-A)",
            **self._explain_network(c["messages"] / n),
        }


class DistinctGroup(_RangeClassGroup):
    """RANGE_DISTINCT: the Mar-for-duplicates messages (000 §4) or per-subscription add/remove rows."""

    kind = "RANGE_DISTINCT"
    _extent_name = "Mar width"

    def __init__(self, snap: RangeClassSnapshot):
        super().__init__(snap)
        self.core = range_distinct.RangeDistinctCore()
        # a match is a change (000 §4), so unicast needs only the index, no per-subscription sets
        self.subscribers = DistinctSubscribers(keep_sets=False, group_id=self.group_id)
        self.subscribers.add(self.ids, self.x1, self.x2)

    @staticmethod
    def _rectangle(m) -> tuple:
        return None, m.inner_l, m.inner_r, m.outer_l, m.outer_r

    def _count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        return self.subscribers.count(inner_l, inner_r, outer_l, outer_r)

    def load(self, keys, xs, ys) -> None:
        ok = self._valid(xs, ys)
        self.core.load(np.asarray(keys, dtype=object)[ok].tolist(), np.asarray(xs, dtype=np.float64)[ok],
                       np.asarray(ys, dtype=object)[ok].tolist())

    def _upsert(self, key, x, y):
        return self.core.upsert(key, x, y)

    def _delete(self, key):
        return self.core.delete(key)

    def result(self, sub_id) -> list:
        i = self.slot[sub_id]
        return sorted(self.core.distinct_values(self.x1[i], self.x2[i]), key=lambda v: (isinstance(v, str), v))

    @staticmethod
    def _value_columns(v) -> dict:
        return {"item_text": v} if isinstance(v, str) else {"new_value": float(v), "value": float(v)}

    def _notifications(self, outcome, seq: int, mode: str) -> list[dict]:
        if mode == "reformulated":
            out = []
            for m in outcome.messages:
                row = {"seq": seq, "op": m.op, "inner_l": m.inner_l, "inner_r": m.inner_r,
                       "outer_l": m.outer_l, "outer_r": m.outer_r, **self._value_columns(m.value)}
                row.pop("value", None)
                out.append(row)
            return out
        # unicast: one rectangle query per message; every match is an add / remove (000 §4)
        return self.subscribers.receive(outcome.messages, seq)

    def explain(self) -> dict:
        c = self.core.counters
        n = max(c["updates"], 1)
        return {
            "class": "RANGE_DISTINCT", "group": self.group_id, "subscriptions": len(self), "tuples": len(self.core),
            "algorithm": "Mar extended to duplicates: the widest X range around an insertion or deletion "
                         "holding no other tuple with the same Y (000 §4)",
            "data index": f"per-{self.y} sorted X lists ({self.core.num_values()} distinct values)",
            "message format": "<ADD|REMOVE, y, INNER_L, INNER_R, OUTER_L, OUTER_R>",
            "reformulated predicate": "(OUTER_L < x1 <= INNER_L) AND (INNER_R <= x2 < OUTER_R)",
            "messages per update": round(c["messages"] / n, 3),
            "subscription index": f"a 2-d point index over (x1, x2) ({len(self)} points): one rectangle "
                                  f"query per message",
            **self._explain_network(c["messages"] / n),
        }


class AggGroup(_RangeClassGroup):
    """RANGE_AGG: relaxed delta messages ⟨x, Δcount, Δsum⟩ (000 §4) or exact new values per subscription."""

    kind = "RANGE_AGG"
    _extent_name = "X extent"

    def __init__(self, snap: RangeClassSnapshot):
        super().__init__(snap)
        self.func = str(snap.option).lower()
        self.core = range_agg.RangeAggCore(self.func)
        self.unicast = None
        self._sorted_bounds = None     # (sorted x1, sorted x2) of the non-empty ranges: EXPLAIN's reach

    def load(self, keys, xs, ys) -> None:
        ok = self._valid(xs, ys)
        ys = np.zeros(len(xs)) if self.y is None else np.asarray(ys, dtype=np.float64)
        self.core.load(np.asarray(keys, dtype=object)[ok].tolist(), np.asarray(xs, dtype=np.float64)[ok], ys[ok])
        self._resync()

    def _resync(self) -> None:
        # S-UN state from the core: range_agg.AggUnicast answers each message's stabbing rectangle
        # (-inf, X] x [X, +inf) over its own layout of the subscription points (000 §3-§4)
        self.unicast = range_agg.AggUnicast(self.func, self.x1, self.x2, self.core)

    @staticmethod
    def _rectangle(m) -> tuple:
        return None, m.x, m.x, -math.inf, math.inf

    def _count(self, k, inner_l, inner_r, outer_l, outer_r) -> int:
        # ranges with x1 <= X <= x2 = #(x1 <= X) - #(x2 < X) over the non-empty ranges (x2 < X implies x1 < X)
        if self._sorted_bounds is None:
            live = self.x1 <= self.x2
            self._sorted_bounds = (np.sort(self.x1[live]), np.sort(self.x2[live]))
        a, b = self._sorted_bounds
        return int(np.searchsorted(a, inner_l, "right") - np.searchsorted(b, inner_l, "left"))

    def _upsert(self, key, x, y):
        return self.core.upsert(key, x, 0.0 if self.y is None else float(y))

    def _delete(self, key):
        return self.core.delete(key)

    def result(self, sub_id):
        i = self.slot[sub_id]
        return self.core.value(self.x1[i], self.x2[i])

    def _notifications(self, outcome, seq: int, mode: str) -> list[dict]:
        if mode == "reformulated":
            return [{"seq": seq, "op": "DELTA", "new_value": m.d_sum, "d_count": m.d_count,
                     "inner_l": m.x, "inner_r": m.x, "outer_l": -math.inf, "outer_r": math.inf}
                    for m in outcome.messages]
        # unicast: the subscriptions whose value changed, in subscription order
        idx, vals = self.unicast.apply(outcome)
        idx = np.asarray(idx, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.float64)
        order = np.argsort(idx, kind="stable")
        return [{"subscription_id": self.ids[i], "op": "update", "seq": seq, "value": None if v != v else v}
                for i, v in zip(idx[order].tolist(), vals[order].tolist())]

    def explain(self) -> dict:
        c = self.core.counters
        n = max(c["updates"], 1)
        return {
            "class": "RANGE_AGG", "group": self.group_id, "subscriptions": len(self), "tuples": len(self.core),
            "aggregate": f"{self.func.upper()}({self.y or '*'})",
            "algorithm": "relaxed range subscriptions: an update reaches the ranges holding its old or new "
                         "X; updates touching neither attribute are dropped (000 §4); exact integer sums",
            "message format": "<X, D_COUNT, D_SUM> (at most 2 per update)",
            "reformulated predicate": "x1 <= X <= x2",
            "messages per update": round(c["messages"] / n, 3),
            "subscription index": f"the subscriptions as points (x1, x2) ({len(self)} points): a stabbing "
                                  f"query x1 <= X <= x2, the rectangle (-inf, X] x [X, +inf), per message",
            **self._explain_network(c["messages"] / n),
        }
