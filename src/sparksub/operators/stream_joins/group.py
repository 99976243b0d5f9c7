"""A stream-stream join group as an engine operator (issue 19 item 2): the subscriptions of one
``StreamJoinGroupScan`` over the bounded core :class:`~sparksub.operators.stream_joins.operator.BoundedStreamJoin`
(003 ch. 3).  Pure (numpy / pyarrow; never pyspark).

Semantics (``docs/bounded_joins.md``, "Through the engine"):

* **One publish = one step** (003 §3.2: discrete time; our micro-batch is a step's arrivals).  A publish holds
  the events of one stream, so each event joins the *other* stream's kept events (the state) -- events of one
  publish never join each other -- and then enters its own side's state.
* **Only what some subscription can use is kept.**  An event that passes no live subscription's selection on
  its side can produce no notification: it never reaches the state (memory is the bottleneck, 003 §3.1).  So
  with one subscription the group is exactly the core run on the events its selections pass.
* **The bound and the policy** are the core's (``max_state_rows`` per side, HEEB by default: 003 §3.4.3; ECB
  dominance with ``state_dominance``: Corollary 2; LRU, LFU, PROB, LIFE, RAND, FIFO, WATERMARK, FLOWEXPECT).
  Without a bound everything is kept.  The equality join's state is partitioned by join value inside the core
  (its rows sorted by key: one binary search per arrival).
* **Notifications**: one row per (subscription, result tuple) whose selections on both sides hold (SQL: a NULL
  in a selected column passes no range), ``op = 'insert'`` (a stream's result only grows), ``seq`` = the
  arriving event's, ``left_key`` / ``right_key`` = the seqs of the two events (an event's identity: streams have
  no key), the subscription's selected columns under their names (DESIGN §1).
* **The error** is MAX-subset (003 §3.1): the core's audit counts the result tuples an unbounded state would have
  produced from the kept events, ``missed`` = that − produced; ``stats()`` and EXPLAIN report it.

A subscription change gives the group a new base *carrying the core as it is* (:meth:`StreamJoinSnapshot.carrying`):
the state is the only copy of the kept events (the engine keeps no rows of a stream).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.joins.group import JOIN_ITEM_SCHEMA
from sparksub.operators.shared.schemas import EVENT_PREFIX
from sparksub.operators.stream_joins.operator import BoundedStreamJoin
from sparksub.operators.stream_joins.options import from_options

__all__ = ["StreamJoinSnapshot", "StreamJoinGroup", "SEQ", "PREFIXES", "selection_columns"]

#: the column an event's seq travels in through the core (the core keeps whole rows: their seqs and columns)
SEQ = "seq"
#: the core's output prefixes of the left (R) and right (S) side
PREFIXES = ("left_", "right_")
#: pairs x subscriptions evaluated at once when matching the selections (a boolean matrix)
_CHUNK_CELLS = 4_000_000


def selection_columns(columns: dict) -> list[tuple[int, str]]:
    """The ``(side, column)`` of every local selection in a registry's columns (``L:<col>:lo`` / ``R:<col>:lo``)."""
    return [(0 if name[0] == "L" else 1, name[2:-3]) for name in columns if name.endswith(":lo")]


@dataclass
class StreamJoinSnapshot:
    """A stream-join group's base: its definition, the live subscriptions and the core's state.

    ``sides[d]`` = (table, join column, the table's columns as ``((name, Arrow type), ...)``) of the left
    (d = 0) and right stream; ``band`` None (equality) or ``(lo, hi)`` on ``right − left``; ``options`` the
    checked ``WITH (...)`` options; ``sub_columns`` the registry's selection columns (``L:<col>:lo`` ...,
    NaN = no selection on that column); ``sub_outputs[i]`` subscription i's projection ``((name, side,
    column), ...)`` and ``output_types`` name -> Arrow type over all of them; ``core`` the core's
    :meth:`~BoundedStreamJoin.snapshot` (None: empty state) and ``counters`` the group's own."""

    group_id: str
    sides: tuple
    band: tuple | None
    options: dict
    sub_ids: np.ndarray
    sub_columns: dict
    sub_outputs: list = ()
    output_types: dict = field(default_factory=dict)
    core: bytes | None = None
    counters: dict | None = None
    stateless = False

    def build(self) -> "StreamJoinGroup":
        return StreamJoinGroup(self)

    def __len__(self) -> int:
        return len(self.sub_ids)

    def carrying(self, group: "StreamJoinGroup") -> "StreamJoinSnapshot":
        """This base (new subscriptions) with ``group``'s state: the kept events, the policy's and the models'
        statistics, the audit log and the counters -- as if the group had never been rebuilt."""
        return dataclasses.replace(self, core=group.core.snapshot(), counters=dict(group.counters))


class StreamJoinGroup:
    """The operator of one stream-join group (module docstring): ``apply(batch, mode)`` per publish."""

    stateless = False

    def __init__(self, snap: StreamJoinSnapshot):
        self.group_id = snap.group_id
        self.sides = snap.sides
        self.band = snap.band
        self.options = dict(snap.options)
        self.ids = np.asarray(snap.sub_ids, dtype=object)
        self.sel = {(d, col): (np.asarray(snap.sub_columns[f"{'LR'[d]}:{col}:lo"], dtype=np.float64),
                               np.asarray(snap.sub_columns[f"{'LR'[d]}:{col}:hi"], dtype=np.float64))
                    for d, col in selection_columns(snap.sub_columns)}
        self.output_types = dict(snap.output_types)
        outputs = list(snap.sub_outputs) if len(snap.sub_outputs) else [()] * len(self.ids)
        self.projections = list(dict.fromkeys(outputs))
        self.projection_of = np.array([self.projections.index(o) for o in outputs], dtype=np.int64)
        #: the columns of each side's rows as the core keeps them: the table's columns (EVENT_PREFIX) and the seq
        self.schemas = tuple(pa.schema([pa.field(EVENT_PREFIX + c, t) for c, t in side[2]] + [pa.field(SEQ, pa.int64())])
                             for side in self.sides)
        if snap.core is not None:
            self.core = BoundedStreamJoin.restore(snap.core)
        else:
            self.core = from_options(self.options, band=self.band, left_key=EVENT_PREFIX + self.sides[0][1],
                                     right_key=EVENT_PREFIX + self.sides[1][1])
            self.core.prefixes = PREFIXES
        self.counters = dict(snap.counters) if snap.counters else {
            "publishes": 0, "events": [0, 0], "kept_out": [0, 0], "result_tuples": 0, "notifications": 0}

    # ---- the data path -------------------------------------------------------------------------------------
    def apply(self, batch: pa.Table, mode: str) -> pa.Table:
        """One publish's events of one stream (``group_batch``'s columns: the table's under EVENT_PREFIX,
        ``op``, ``seq``, ``j_side``): join them with the other stream's state, then keep them (module
        docstring).  Returns the unicast notifications (any ``mode``: a stream join has no reformulated
        form); ``mode = 'none'`` (a log replay) only moves the state."""
        if batch.num_rows == 0:
            return self._empty()
        sides = pc.unique(batch.column("j_side")).to_pylist()
        if len(sides) != 1:
            raise ValueError(f"stream join {self.group_id}: one batch holds the events of one stream, got sides {sides}")
        d = int(sides[0])
        events = pa.table({f.name: batch.column(f.name).cast(f.type) for f in self.schemas[d]}, schema=self.schemas[d])
        c = self.counters
        c["publishes"] += 1
        c["events"][d] += events.num_rows
        if self.sel:
            keep = self._matches(d, events).any(axis=1) if len(self.ids) else np.zeros(events.num_rows, dtype=bool)
            if not keep.all():
                c["kept_out"][d] += int(events.num_rows - keep.sum())
                events = events.filter(pa.array(keep))
        if not events.num_rows:
            return self._empty()
        pairs = self.core.apply(left=events) if d == 0 else self.core.apply(right=events)
        c["result_tuples"] += pairs.num_rows
        if mode == "none" or not pairs.num_rows or not len(self.ids):
            return self._empty()
        p, s = self._pair_subscriptions(pairs)
        c["notifications"] += int(p.size)
        return self._notifications(pairs, p, s, d)

    def _values(self, table: pa.Table, column: str) -> np.ndarray:
        col = table.column(column)
        return pc.fill_null(col.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False)

    def _matches(self, d: int, events: pa.Table) -> np.ndarray:
        """events x subscriptions: each event passes the subscription's selections on its side (003 §4.3's
        local selections; NULL passes no range, no selection passes everything)."""
        m = np.ones((events.num_rows, len(self.ids)), dtype=bool)
        for (side, col), (lo, hi) in self.sel.items():
            if side != d:
                continue
            v = self._values(events, EVENT_PREFIX + col)[:, None]
            with np.errstate(invalid="ignore"):
                m &= np.isnan(lo)[None, :] | ((v >= lo[None, :]) & (v <= hi[None, :]))
        return m

    def _pair_subscriptions(self, pairs: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(pair index, subscription index) of every result tuple and subscription whose selections on both
        sides it passes, in pair order."""
        n, k = pairs.num_rows, len(self.ids)
        values = {key: self._values(pairs, PREFIXES[key[0]] + EVENT_PREFIX + key[1]) for key in self.sel}
        step = max(1, _CHUNK_CELLS // max(k, 1))
        out_p, out_s = [], []
        for start in range(0, n, step):
            stop = min(n, start + step)
            m = np.ones((stop - start, k), dtype=bool)
            for key, (lo, hi) in self.sel.items():
                v = values[key][start:stop, None]
                with np.errstate(invalid="ignore"):
                    m &= np.isnan(lo)[None, :] | ((v >= lo[None, :]) & (v <= hi[None, :]))
            p, s = np.nonzero(m)
            out_p.append(p + start)
            out_s.append(s)
        return np.concatenate(out_p), np.concatenate(out_s)

    def _notifications(self, pairs: pa.Table, p: np.ndarray, s: np.ndarray, d: int) -> pa.Table:
        n = int(p.size)
        take = pa.array(p)
        seqs = [pairs.column(PREFIXES[side] + SEQ).take(take) for side in (0, 1)]
        out = {"subscription_id": pa.array(self.ids[s].tolist(), pa.string()),
               "op": pa.array(["insert"] * n, pa.string()),
               "value": pa.nulls(n, pa.float64()),
               "seq": seqs[d],
               "group_id": pa.array([self.group_id] * n, pa.string()),
               "left_key": pc.cast(seqs[0], pa.string()),
               "right_key": pc.cast(seqs[1], pa.string())}
        # each row carries its subscription's selected columns (DESIGN §1), under EVENT_PREFIX as a FILTER
        # event's do (the engine names them); a column another projection selects is null in it
        proj = self.projection_of[s]
        columns: dict = {}
        for k, projection in enumerate(self.projections):
            rows = proj == k
            if not rows.any():
                continue
            for name, side, col in projection:
                typ = self.output_types.get(name)
                src = pairs.column(PREFIXES[side] + EVENT_PREFIX + col)
                idx = np.where(rows, p, -1)
                vals = src.take(pa.array(idx, mask=~rows))
                if typ is not None:
                    vals = vals.cast(typ)
                columns[name] = vals if name not in columns else pc.if_else(pa.array(rows), vals, columns[name])
        for name, vals in columns.items():
            out[EVENT_PREFIX + name] = vals
        return pa.table(out)

    def _empty(self) -> pa.Table:
        fields = [("subscription_id", pa.string()), ("op", pa.string()), ("value", pa.float64()),
                  ("seq", pa.int64()), ("group_id", pa.string()), *JOIN_ITEM_SCHEMA]
        return pa.schema(fields).empty_table()

    # ---- reading the state -----------------------------------------------------------------------------------
    def stats(self) -> dict:
        """The core's counters (rows, state, evictions, ``results``, ``true_results``, ``missed`` -- the MAX-subset
        error -- and ``recall``) and the group's: subscriptions, publishes, events per stream, events no
        selection kept (``kept_out``), result tuples and notifications."""
        c = self.counters
        return {**self.core.stats(), "class": "STREAM_BAND_JOIN" if self.band is not None else "STREAM_JOIN",
                "subscriptions": int(len(self.ids)), "publishes": c["publishes"], "events": list(c["events"]),
                "kept_out": list(c["kept_out"]), "result_tuples": c["result_tuples"],
                "notifications": c["notifications"]}

    def explain(self) -> dict:
        """EXPLAIN's operator section: the algorithm, the state's bound and policy, the error."""
        s = self.core.stats()
        missed = ("not counted (state_audit = false)" if s["missed"] is None else
                  f"{s['missed']:,} of {s['true_results']:,} result tuples missed (recall {100 * s['recall']:.1f}%)")
        return {"algorithm": "bounded stream-stream join (003 ch. 3): each event joins the other stream's state, "
                             "then enters its own side's; a full side drops what the replacement policy chooses",
                "state bound": s["budget"],
                "replacement policy": s["policy"] + ("; ECB dominance first (003 Corollary 2)"
                                                     if self.core.dominance else ""),
                "MAX-subset error": missed,
                "state": self.core.explain().replace("\n", "\n    "),
                "subscriptions": f"{len(self.ids)} (selections matched per result tuple; events no selection "
                                 f"passes are not kept: {self.counters['kept_out'][0]}/{self.counters['kept_out'][1]})"}

