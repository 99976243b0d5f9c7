"""Group operators for the 2-d box classes: BOX_MIN / BOX_MAX and BOX_TOPK.

::

    SELECT MIN(y) FROM t WHERE x BETWEEN a AND b AND x2 BETWEEN c AND d              (BoxMinGroup)
    SELECT cols FROM t WHERE x BETWEEN a AND b AND x2 BETWEEN c AND d
        ORDER BY y [DESC] LIMIT k                                                   (BoxTopkGroup)

Each group holds one table's rows on (key, x, x2, y) and the subscriptions of one (table, x, x2, y,
...) as columns, and turns a batch of updates (in ``seq`` order) into notifications, with the
interface of :class:`~sparksub.operators.topk.group.TopkGroup` (``apply(batch, mode)``,
``result``, ``explain``, ``stats``, ``load``, ``len``, ``in``).  The server cores are
:class:`~sparksub.operators.box.core.BoxMinCore` / :class:`~sparksub.operators.box.core.BoxTopkCore`
(002 §IV-C: a box ``[l1, r1] x [l2, r2]`` is the point (l1, r1, l2, r2) of the 4-d subscription
space, an object the orthant of the boxes holding it; 000 §4: Mar and Hull in 2-d).

Batch: ``key, x, x_2, y`` (float64; NaN or null = null), ``op`` (int8: 0 upsert, 1 delete), ``seq``
(int64).  A null x, x2 or y puts the row in no box (SQL: a NULL fails BETWEEN, MIN ignores NULLs):
for the operator it is a deletion.  ±inf coordinates are rejected (:class:`BadUpdate`, nothing
applied), as the cores need finite values.

Modes
-----
* ``unicast``: one row per (update, subscription whose result it changed) — notified iff changed —
  in ``UNICAST_SCHEMA + ITEM_SCHEMA`` (the range classes' schema, unchanged): BOX_MIN rows are
  ``op='update'`` with the new MIN in ``value`` (null: the box became empty); BOX_TOPK rows are
  ``enter`` / ``update`` / ``leave`` with the object's ``y`` in ``value``, ``item_key`` and its x in
  ``item_x`` (its x2 is not in ITEM_SCHEMA: an ``update`` may change only x2).
  Found without scanning the subscriptions: a subscription can only change when its box holds the
  update's old or new point (002 §II-C, the orthant θ_i), so each update makes two *stabbing*
  queries on a 2x2-d index (:class:`StabIndex`: one :class:`~sparksub.operators.shared.point_index.
  PointIndex2D` over (x_low, x_high), one over (x2_low, x2_high); the more selective answers, the
  other coordinate is filtered with numpy), then decides per hit from the subscription's kept result:
  MIN = min(MIN, y_new); a top-k list takes the new object iff it beats the list's last; only a
  subscription whose MIN / list held the changed object and got worse is recomputed (a vectorised
  scan of the rows in rank order).  Kept results are built lazily on the first unicast batch and
  then followed in every mode.
* ``reformulated``: the cores' messages, whose number depends only on the rows (subscription-
  oblivious), one update at a time (no Paint-Batch for boxes: a subscriber is exact after each
  ``seq``), in :data:`BOX_MESSAGE_SCHEMA` = ``RANGE_MESSAGE_SCHEMA`` plus :data:`BOX_COLUMNS`:

  - the x-part of the 4-d box in the 1-d columns ``inner_l, inner_r, outer_l, outer_r`` and the
    x2-part in the added ``inner_l_2, inner_r_2, outer_l_2, outer_r_2``; a message reaches the box
    ``[a, b] x [c, d]`` iff ``(outer_l < a <= inner_l) AND (inner_r <= b < outer_r) AND
    (outer_l_2 < c <= inner_l_2) AND (inner_r_2 <= d < outer_r_2)`` (000 §2.3.1 per attribute; an
    infinite OUTER bound also admits the same infinite end; :func:`box_reaches`), and for top-k
    ``k = k_s`` too;
  - BOX_MIN: ``op`` ``NEW_MIN`` / ``NEW_MAX``: the receiver's value becomes ``new_value`` (null:
    empty); relaxed falling messages ``MIN_IF_IN`` / ``MAX_IF_IN`` carry the point in ``item_x,
    item_x_2`` (added column): if it lies in the receiver's box, value := min (max) of both;
  - BOX_TOPK: ``op`` ``PUT`` / ``DELETE``, ``k``, the object (``item_key, item_x, item_x_2`` and
    ``new_value`` = y, null for DELETE); the receiver applies 002 §II-A's protocol with the
    containment filter (:class:`BoxTopkReceiver`).

  **Exact by default** (``relax=False``): the messages are disjoint exact 4-d tiles of the changed
  regions.  BOX_MIN exact: every subscription whose MIN changes receives exactly one message and no
  other does (0 false positives).  BOX_TOPK exact: zero false positives except an x-move (a
  deletion step then an insertion step, 002 footnote 4), whose two messages may cancel out at a
  subscription.  ``relax=True`` (BOX_MIN: the falling region as one covering box;
  BOX_TOPK: per-cell bounding boxes) or ``relax="region"`` (BOX_TOPK: one bounding box per region)
  send relaxed bounding regions and rely on subscriber-side filtering (000 §4), with false
  positives.  Measured with :func:`measure_false_positives` (uniform rows in the unit square,
  random boxes, each side half-open with probability 0.1; 25% inserts / 20% deletes / 30% y-changes /
  25% moves with a new y; the
  rate is deliveries that changed nothing / deliveries; every receiver ended exact in every run)::

      400 rows, 1,000 subscriptions, 150 updates, k = 3, seed 0:
                            msgs/update  deliveries  false-positive rate  unicast rows
      BOX_MIN exact             107.1          472          0.000               472
      BOX_MIN relaxed            80.2       13,403          0.965               472
      BOX_MAX exact             121.7          592          0.000               592
      BOX_TOPK exact          1,151.4        1,918          0.000             2,435
      BOX_TOPK relax=True       634.3        2,750          0.303             2,435
      BOX_TOPK relax=region      19.7       39,493          0.951             2,435
      BOX_TOPK DESC exact     1,305.1        2,863          0.000             3,474

  (top-k unicast rows count enter / update / leave rows, up to two per changed list; no x-move of
  this stream cancelled at a subscriber.)  Exact boxes cost many messages in 4-d (002 Theorem 5:
  O((k ln n)^3) expected for d = 2), relaxed ones many deliveries: exact is the default.  Unicast at
  20,000 rows x 20,000 boxes: ~1.5 ms per update for either class, 0.1 s (MIN) / 0.7 s (top-5) to
  build the kept results.
* ``none``: maintain the rows (and the kept unicast results, once built) only: a log replay.

Ties in y: MIN/MAX take the value only; top-k ranks by ``(y, key)`` in ASC and ``(-y, key)`` in DESC
order — ties by key ascending in both, as RANGE_TOPK.  Keys of one table compare among themselves
(str or int).  One :class:`BoxTopkCore` per distinct k in use (its messages carry that k).

Cost (missing pieces, see ``box_range``): the cores scan their rows with numpy per update (no 2-d
range tree); recomputing a subscription's result scans the rows in rank order in blocks (all
subscriptions at once when the kept results are built: O(S x n) cells at worst, far fewer when the
boxes hold rows).  Pure (numpy / pyarrow): ``spark_groups`` can run it in tasks.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparksub.errors import BadUpdate, InvalidSubscription, SparksubError, UnknownSubscription
from sparksub.operators.box.core import (BoxMessage, BoxMinCore, BoxTopkCore, BoxTopkMessage,
                                          BoxTopkSubscriber, box_matches)
from sparksub.operators.shared.point_index import PointIndex2D
from sparksub.operators.shared.range_classes import notification_table
from sparksub.operators.shared.schemas import DELETE, ITEM_SCHEMA, RANGE_MESSAGE_SCHEMA, UNICAST_SCHEMA

__all__ = ["BoxClassSnapshot", "BoxMinGroup", "BoxTopkGroup", "BOX_COLUMNS", "BOX_MESSAGE_SCHEMA",
           "BOX_UNICAST_SCHEMA", "StabIndex", "box_reaches", "BoxMinReceiver", "BoxTopkReceiver",
           "deliver", "measure_false_positives", "MODES"]

MODES = ("unicast", "reformulated", "none")

#: The columns a box message adds to ``RANGE_MESSAGE_SCHEMA``: the object's (or relaxed MIN
#: message's point's) x2, and the x2-part of the 4-d box (the x-part is ``inner_l .. outer_r``).
BOX_COLUMNS = pa.schema([
    ("item_x_2", pa.float64()),
    ("inner_l_2", pa.float64()), ("inner_r_2", pa.float64()),
    ("outer_l_2", pa.float64()), ("outer_r_2", pa.float64()),
])
BOX_MESSAGE_SCHEMA = pa.schema(list(RANGE_MESSAGE_SCHEMA) + list(BOX_COLUMNS))
#: Unicast rows: exactly the range classes' (``range_groups``) columns.
BOX_UNICAST_SCHEMA = pa.schema(list(UNICAST_SCHEMA) + list(ITEM_SCHEMA))

_EMPTY_I = np.empty(0, dtype=np.int64)
_DIRECT = 4             # recompute up to this many subscriptions by one row mask each
_CELLS = 1 << 22        # box x row cells per block of the rank-order scan (bounded memory)


@dataclass
class BoxClassSnapshot:
    """A box group's definition, subscriptions and the table's rows (what Spark broadcasts).

    ``sub_p1, sub_q1`` are each subscription's bounds ``[low, high]`` on ``x``, and ``sub_p2,
    sub_q2`` its bounds on ``x2`` (``classifier.bind_box`` gives them in this order); ±inf for an
    open end.  (Not box_range's naming, where p and q are the two attributes.)"""

    kind: str            # BOX_MIN | BOX_MAX | BOX_TOPK
    group_id: str
    table: str
    x: str
    x2: str
    y: str
    option: object       # maximum (BOX_MIN / BOX_MAX) | descending (BOX_TOPK)
    sub_ids: np.ndarray
    sub_p1: np.ndarray   # x low
    sub_q1: np.ndarray   # x high
    sub_p2: np.ndarray   # x2 low
    sub_q2: np.ndarray   # x2 high
    sub_k: np.ndarray | None
    keys: np.ndarray
    xs: np.ndarray
    x2s: np.ndarray
    ys: np.ndarray
    relax: bool | str = False    # reformulated messages: exact (False) or relaxed (module docstring)
    extra: dict = field(default_factory=dict)

    def build(self):
        cls = {"BOX_MIN": BoxMinGroup, "BOX_MAX": BoxMinGroup, "BOX_TOPK": BoxTopkGroup}.get(self.kind)
        if cls is None:
            raise SparksubError(f"unknown box group kind {self.kind!r}; expected BOX_MIN, BOX_MAX or BOX_TOPK")
        g = cls(self)
        g.load(self.keys, self.xs, self.x2s, self.ys)
        return g


def _key_text(key) -> str:
    return key if isinstance(key, str) else str(key)


def _opt(v: float) -> float | None:
    return None if v != v else v


class StabIndex:
    """The boxes containing a point, from a 2x2-d index (static: a group's subscriptions are fixed).

    One :class:`PointIndex2D` holds the points (x_low, x_high), another (x2_low, x2_high); a stab
    of (p, q) counts both 1-d stabs (``x_low <= p <= x_high``, resp. for q), reports the smaller and
    filters the other attribute with numpy: O(#buckets log S + min(|stab p|, |stab q|)).

    >>> ix = StabIndex(np.array([0., 5.]), np.array([9., 9.]), np.array([0., 0.]), np.array([1., 9.]))
    >>> ix.stab(6.0, 2.0).tolist(), ix.stab(1.0, 0.5).tolist()
    ([1], [0])
    """

    def __init__(self, x_lo: np.ndarray, x_hi: np.ndarray, x2_lo: np.ndarray, x2_hi: np.ndarray):
        self.x_lo, self.x_hi, self.x2_lo, self.x2_hi = x_lo, x_hi, x2_lo, x2_hi
        self.n = len(x_lo)
        slots = np.arange(self.n, dtype=np.int64)
        self.by_x, self.by_x2 = PointIndex2D(), PointIndex2D()
        if self.n:
            self.by_x.add_many(slots, x_lo, x_hi)
            self.by_x2.add_many(slots, x2_lo, x2_hi)
            self.by_x.rebuild()
            self.by_x2.rebuild()
        self.candidates = 0     # reported by the 1-d stab before the other attribute's filter

    def stab(self, p: float, q: float) -> np.ndarray:
        """Sorted slots of the boxes with ``x_lo <= p <= x_hi`` and ``x2_lo <= q <= x2_hi``."""
        if not self.n:
            return _EMPTY_I
        if self.by_x.stab_count(p) <= self.by_x2.stab_count(q):
            s = self.by_x.stab(p)
            s = s[(self.x2_lo[s] <= q) & (q <= self.x2_hi[s])]
        else:
            s = self.by_x2.stab(q)
            s = s[(self.x_lo[s] <= p) & (p <= self.x_hi[s])]
        self.candidates += int(s.size)
        return np.sort(s)

    def describe(self) -> str:
        a, b = self.by_x.stats(), self.by_x2.stats()
        return (f"2x2-d stabbing index: PointIndex2D over (x_low, x_high) with {a['buckets']} buckets and over "
                f"(x2_low, x2_high) with {b['buckets']} buckets; the smaller 1-d stab is filtered on the "
                f"other attribute")


def _columns(batch) -> dict:
    """``key`` (list), ``x, x_2, y`` (float64, null -> NaN), ``op``, ``seq`` (int64)."""
    if not isinstance(batch, pa.Table):
        batch = pa.table(dict(batch))
    out = {"key": batch.column("key").to_pylist()}
    for name in ("x", "x_2", "y"):
        col = batch.column(name)
        arr = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64).copy()
        if col.null_count:
            arr[np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = np.nan
        out[name] = arr
    out["op"] = np.asarray(batch.column("op").to_numpy(zero_copy_only=False), dtype=np.int64)
    out["seq"] = np.asarray(batch.column("seq").to_numpy(zero_copy_only=False), dtype=np.int64)
    return out


def _check_finite(keys, cols, upsert: np.ndarray, what: str) -> None:
    """±inf in a non-null upsert: BadUpdate naming the row, before anything is applied."""
    for name, arr in cols:
        bad = np.flatnonzero(upsert & np.isinf(arr))
        if bad.size:
            i = int(bad[0])
            raise BadUpdate(f"{what}: {name} of key {keys[i]!r} is {arr[i]}; box groups need finite "
                            f"values (NULL puts a row in no box)", row=i, column=name)


class _BoxGroup:
    stateless = False
    kind = ""

    def __init__(self, snap: BoxClassSnapshot):
        self.group_id, self.table = snap.group_id, snap.table
        self.x, self.x2, self.y = snap.x, snap.x2, snap.y
        self.ids = np.asarray(snap.sub_ids, dtype=object)
        n = len(self.ids)
        cols = []
        for name in ("sub_p1", "sub_q1", "sub_p2", "sub_q2"):
            col = np.asarray(getattr(snap, name), dtype=np.float64)
            if col.shape != (n,):
                raise InvalidSubscription(f"{name} has {col.size} values for {n} subscriptions")
            cols.append(col)
        self.x_lo, self.x_hi, self.x2_lo, self.x2_hi = cols
        for attr, lo, hi in ((self.x, self.x_lo, self.x_hi), (self.x2, self.x2_lo, self.x2_hi)):
            bad = np.isnan(lo) | np.isnan(hi) | (lo > hi)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InvalidSubscription(f"subscription {self.ids[i]!r} has a NaN bound or an empty range "
                                          f"[{lo[i]}, {hi[i]}] on {attr}")
        self.slot = {sid: i for i, sid in enumerate(self.ids.tolist())}
        if len(self.slot) != n:
            raise InvalidSubscription(f"group {self.group_id!r}: a subscription id appears twice")
        self.relax = snap.relax
        # a subscription shard of a sharded group (operators/box/shards.py) other than shard 0 sends no message in
        # ``reformulated`` mode: the messages depend only on the rows (002 §II-C), so shard 0's are the group's
        self.emits_messages = bool(snap.extra.get("emits_messages", True))
        self.index = StabIndex(self.x_lo, self.x_hi, self.x2_lo, self.x2_hi)
        self._ready = False     # kept per-subscription results (unicast) built?
        self.counters = {"batches": 0, "unicast_rows": 0, "reformulated_messages": 0, "recomputed": 0,
                         "rebuilds": 0}

    # ---- the subclass hooks ------------------------------------------------------------------------
    sign = 1.0                  # rank value r = sign * y: MIN / ASC ranks by y, MAX / DESC by -y

    @property
    def store(self):
        """The rows as the cores keep them (``box_range._Store``: slot arrays P, Q, Y = r, alive, keys)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, sub_id) -> bool:
        return sub_id in self.slot

    def _slot_of(self, sub_id) -> int:
        try:
            return self.slot[sub_id]
        except KeyError:
            raise UnknownSubscription(f"no subscription {sub_id!r} in group {self.group_id!r}") from None

    def load(self, keys, xs, x2s, ys) -> None:
        """Bulk-load table rows (no notifications); a row with a null x, x2 or y is in no box."""
        keys = np.asarray(keys, dtype=object)
        xs, x2s, ys = (np.asarray(np.where(np.equal(np.asarray(a, dtype=object), None), np.nan, a),
                                  dtype=np.float64) for a in (xs, x2s, ys))
        ok = ~(np.isnan(xs) | np.isnan(x2s) | np.isnan(ys))
        _check_finite(keys, ((self.x, xs), (self.x2, x2s), (self.y, ys)), ok, "load")
        for key in keys[~ok].tolist():
            if self.store.get(key) is not None:
                self._core_set(key, None)
        self._core_load(keys[ok].tolist(), xs[ok], x2s[ok], ys[ok])
        self._ready = False     # kept results: rebuilt when next needed

    def apply(self, batch, mode: str = "unicast") -> pa.Table:
        """Apply one batch of updates (``key, x, x_2, y, op, seq``) in ``seq`` order (module docstring)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} for {self.kind}; expected one of {MODES}")
        if mode == "reformulated" and not self.emits_messages:
            # a silent shard (operators/box/shards.py): the same rows and kept results as a log replay leaves them
            # (the cores' messages change nothing but their counters), no message (shard 0 sends them)
            self.apply(batch, "none")
            return notification_table([], BOX_MESSAGE_SCHEMA, self.group_id)
        c = _columns(batch)
        keys = c["key"]
        null = np.isnan(c["x"]) | np.isnan(c["x_2"]) | np.isnan(c["y"])
        _check_finite(keys, ((self.x, c["x"]), (self.x2, c["x_2"]), (self.y, c["y"])),
                      (c["op"] != DELETE) & ~null, "update")
        self.counters["batches"] += 1
        if mode == "unicast" and not self._ready:
            self._rebuild()
        rows: list[dict] = []
        sign = self.sign
        for i, key in enumerate(keys):
            old = self.store.get(key)
            if c["op"][i] == DELETE or null[i]:
                if old is None:
                    continue
                new = None
            else:
                new = (float(c["x"][i]), float(c["x_2"][i]), sign * float(c["y"][i]))
                if old == new:
                    continue
            seq = int(c["seq"][i])
            if mode == "reformulated":
                rows.extend(self._messages(key, new, seq))
            else:
                self._core_set(key, new)
            if self._ready:
                out = self._follow(key, old, new, seq)
                if mode == "unicast":
                    rows.extend(out)
        if mode == "none":
            return BOX_MESSAGE_SCHEMA.empty_table()
        schema = BOX_MESSAGE_SCHEMA if mode == "reformulated" else BOX_UNICAST_SCHEMA
        self.counters["reformulated_messages" if mode == "reformulated" else "unicast_rows"] += len(rows)
        # (reformulated: msg_no numbers the messages in the apply order, as range_groups.RANGE_MESSAGE_SCHEMA's)
        return notification_table(rows, schema, self.group_id)

    # ---- recomputation: the rows in rank order, scanned in blocks ------------------------------------
    def _rank_order(self, by_key: bool) -> np.ndarray:
        """Live store slots sorted by r (then by key: top-k's tie-break)."""
        st = self.store
        live = np.flatnonzero(st.alive)
        if by_key and live.size > 1:
            keys = np.empty(live.size, dtype=object)
            keys[:] = [st.keys[s] for s in live.tolist()]
            live = live[np.argsort(keys, kind="stable")]
        return live[np.argsort(st.Y[live], kind="stable")]

    def _first_in_boxes(self, subs: np.ndarray, need: np.ndarray, by_key: bool) -> list[list[int]]:
        """For each subscription slot in ``subs``, the store slots of the first ``need`` rows of its
        box in rank order.  Small sets: one row mask each; larger: one pass over the rows in rank
        order, in blocks of growing width, each block tested against every unfinished box at once
        (a box finishes early when it holds rows of low rank)."""
        st = self.store
        self.counters["recomputed"] += int(subs.size)
        if subs.size <= _DIRECT:
            out = []
            for s, k in zip(subs.tolist(), need.tolist()):
                idx = np.flatnonzero(st.box_mask(self.x_lo[s], self.x_hi[s], self.x2_lo[s], self.x2_hi[s]))
                if idx.size > k:    # keep the k lowest r (with their ties) before sorting in Python
                    kth = np.partition(st.Y[idx], k - 1)[k - 1]
                    idx = idx[st.Y[idx] <= kth]
                order = sorted(idx.tolist(), key=(lambda j: (st.Y[j], st.keys[j])) if by_key else st.Y.__getitem__)
                out.append(order[:k])
            return out
        order = self._rank_order(by_key)
        P, Q, n = st.P[order], st.Q[order], order.size
        a1, b1, a2, b2 = self.x_lo[subs], self.x_hi[subs], self.x2_lo[subs], self.x2_hi[subs]
        need = np.asarray(need, dtype=np.int64)
        got = np.zeros(subs.size, dtype=np.int64)
        hits: list[list[int]] = [[] for _ in range(subs.size)]
        rem = np.arange(subs.size)
        start, width = 0, 64
        while rem.size and start < n:
            width = max(1, min(width, _CELLS // rem.size))
            end = min(n, start + width)
            bp, bq = P[start:end], Q[start:end]
            m = ((a1[rem, None] <= bp) & (bp <= b1[rem, None]) & (a2[rem, None] <= bq) & (bq <= b2[rem, None]))
            r, cidx = np.nonzero(m)     # row-major: by box, then by rank
            if r.size:
                first = np.searchsorted(r, r, "left")
                who = rem[r]
                take = got[who] + (np.arange(r.size) - first) < need[who]
                for w, j in zip(who[take].tolist(), (order[start + cidx[take]]).tolist()):
                    hits[w].append(j)
                got += np.bincount(who[take], minlength=subs.size)
            rem = rem[got[rem] < need[rem]]
            start = end
            width *= 2
        return hits

    def stats(self) -> dict:
        return {**self._core_counters(), **self.counters, "subscriptions": len(self), "tuples": len(self.store),
                "stab_candidates": self.index.candidates}


class BoxMinGroup(_BoxGroup):
    """BOX_MIN / BOX_MAX: exact (or relaxed) 4-d box messages from :class:`BoxMinCore` (000 §2-4 lifted to
    boxes), or one ``update`` row per subscription whose MIN changed."""

    def __init__(self, snap: BoxClassSnapshot):
        super().__init__(snap)
        self.maximum = bool(snap.option)
        if snap.kind in ("BOX_MIN", "BOX_MAX") and (snap.kind == "BOX_MAX") != self.maximum:
            raise SparksubError(f"box group {snap.group_id!r}: kind {snap.kind} with option maximum={snap.option!r}")
        if snap.relax not in (False, True):
            raise SparksubError(f"BOX_MIN relax is True or False, got {snap.relax!r}")
        self.kind = "BOX_MAX" if self.maximum else "BOX_MIN"
        self.sign = -1.0 if self.maximum else 1.0
        self.core = BoxMinCore(self.maximum, relax=bool(snap.relax))
        self.cur = np.full(len(self.ids), np.inf)    # kept MIN per subscription, as r (+inf: empty box)

    @property
    def store(self):
        return self.core.store

    def _core_counters(self) -> dict:
        return dict(self.core.counters)

    def _core_load(self, keys, xs, x2s, ys) -> None:
        self.core.load(zip(keys, xs.tolist(), x2s.tolist(), ys.tolist()))

    def _core_set(self, key, new) -> None:
        """The row without messages (unicast / none): straight into the core's rows."""
        if new is None:
            self.core.store.pop(key)
        else:
            self.core.store.put(key, *new)      # r = sign * y is what BoxMinCore keeps

    def _messages(self, key, new, seq: int) -> list[dict]:
        msgs = self.core.delete(key) if new is None else self.core.upsert(key, new[0], new[1], self.sign * new[2])
        name = "MAX" if self.maximum else "MIN"
        return [{"seq": seq, "op": f"NEW_{name}" if m.mode == "set" else f"{name}_IF_IN", "new_value": m.new_value,
                 "inner_l": m.p_inner_l, "inner_r": m.p_inner_r, "outer_l": m.p_outer_l, "outer_r": m.p_outer_r,
                 "inner_l_2": m.q_inner_l, "inner_r_2": m.q_inner_r, "outer_l_2": m.q_outer_l,
                 "outer_r_2": m.q_outer_r, "item_x": _opt(m.px), "item_x_2": _opt(m.qx)} for m in msgs]

    def _mins(self, subs: np.ndarray) -> np.ndarray:
        hits = self._first_in_boxes(subs, np.ones(subs.size, dtype=np.int64), by_key=False)
        Y = self.store.Y
        return np.array([Y[h[0]] if h else np.inf for h in hits], dtype=np.float64)

    def _rebuild(self) -> None:
        self.counters["rebuilds"] += 1
        self.cur = self._mins(np.arange(len(self.ids))) if len(self.ids) else np.zeros(0)
        self._ready = True

    def _follow(self, key, old, new, seq: int) -> list[dict]:
        """The kept MINs after one update (the rows already changed); rows for those that changed.
        Only boxes holding the old or the new point can change (the orthants θ, 002 §IV-C)."""
        a = self.index.stab(old[0], old[1]) if old is not None else _EMPTY_I
        b = self.index.stab(new[0], new[1]) if new is not None else _EMPTY_I
        if not a.size and not b.size:
            return []
        touched = np.union1d(a, b)
        cur = self.cur[touched]
        nv = cur.copy()
        in_b = np.isin(touched, b, assume_unique=True)
        if new is not None:
            nv[in_b] = np.minimum(nv[in_b], new[2])
        if old is not None:
            # the old row was this box's MIN (or tied with it) and the new one does not replace it:
            # the next lowest row of the box is needed (000's bad update)
            lost = np.isin(touched, a, assume_unique=True) & (cur == old[2])
            if new is not None:
                lost &= ~(in_b & (new[2] <= old[2]))
            if lost.any():
                nv[lost] = self._mins(touched[lost])
        changed = nv != cur
        slots, vals = touched[changed], nv[changed]
        self.cur[slots] = vals
        ids, sign = self.ids, self.sign
        return [{"subscription_id": ids[s], "op": "update", "value": None if math.isinf(v) else sign * v,
                 "seq": seq} for s, v in zip(slots.tolist(), vals.tolist())]

    def result(self, sub_id) -> float | None:
        """The MIN (MAX) over the subscription's box now, None when it holds no row (from the rows)."""
        i = self._slot_of(sub_id)
        return self.core.value(self.x_lo[i], self.x_hi[i], self.x2_lo[i], self.x2_hi[i])

    def explain(self) -> dict:
        c = self.core.counters
        n = max(c["updates"], 1)
        name = "MAX" if self.maximum else "MIN"
        return {
            "class": self.kind, "group": self.group_id, "subscriptions": len(self), "tuples": len(self.store),
            "aggregate": f"{name}({self.y}) over {self.x} x {self.x2}",
            "algorithm": "2-d Mar / exposed-object regions as disjoint 4-d tiles (002 §IV-C, 000 §4)"
                         + ("; falling region relaxed to one covering box, subscriber filters" if self.relax
                            else "; exact: one message per changed subscription, 0 false positives"),
            "data index": f"slot arrays on ({self.x}, {self.x2}, {self.y}), numpy scan per update "
                          f"(box_range.BoxMinCore)",
            "subscription index": self.index.describe(),
            "message format": f"<NEW_{name} | {name}_IF_IN, new_value, item_x, item_x_2, INNER_L, INNER_R, "
                              f"OUTER_L, OUTER_R, INNER_L_2, INNER_R_2, OUTER_L_2, OUTER_R_2>",
            "reformulated predicate": "(OUTER_L < x_lo <= INNER_L) AND (INNER_R <= x_hi < OUTER_R) AND "
                                      "(OUTER_L_2 < x2_lo <= INNER_L_2) AND (INNER_R_2 <= x2_hi < OUTER_R_2)",
            "unicast": "stab the old and new point, MIN := min(MIN, y); recompute only boxes that lost their MIN",
            "messages per update": round(c["messages"] / n, 3),
        }


class BoxTopkGroup(_BoxGroup):
    """BOX_TOPK: Paint-Dense on boxes (002 §III-A, §IV-C; one core per k in use), or per-subscription
    enter / update / leave rows."""

    kind = "BOX_TOPK"

    def __init__(self, snap: BoxClassSnapshot):
        super().__init__(snap)
        self.descending = bool(snap.option)
        self.sign = -1.0 if self.descending else 1.0
        k = np.asarray(snap.sub_k if snap.sub_k is not None else np.ones(len(self.ids)))
        if k.shape != (len(self.ids),) or (k.size and (np.any(k != np.floor(k)) or k.min() < 1)):
            raise InvalidSubscription(f"group {self.group_id!r}: sub_k must be one positive integer per subscription")
        self.k = k.astype(np.int64)
        if snap.relax not in (False, True, "cell", "region"):
            raise SparksubError(f"BOX_TOPK relax is False, True / 'cell' or 'region', got {snap.relax!r}")
        # 002 fixes one k per message: one core (one row copy) per distinct k in use -- a sharded group's shard 0
        # also for the other shards' k (``extra['ks']``): its messages are the whole group's (operators/box/shards.py)
        ks = set(self.k.tolist()) | {int(kk) for kk in snap.extra.get("ks", ())}
        self.cores = {kk: BoxTopkCore(kk, relax=snap.relax) for kk in sorted(ks) or [1]}
        self._store = next(iter(self.cores.values())).store
        self.lists: list[list[tuple]] = [[] for _ in range(len(self.ids))]   # (key, p, q, r) by rank
        self.full = np.zeros(len(self.ids), dtype=bool)
        self.worst = np.full(len(self.ids), np.inf)                           # r of a full list's last
        self.holders: dict = {}                                               # key -> set of slots

    @property
    def store(self):
        return self._store

    def _core_counters(self) -> dict:
        out: dict = {}
        for core in self.cores.values():
            for name, v in core.counters.items():
                out[name] = out.get(name, 0) + v
        return out

    def _core_load(self, keys, xs, x2s, ys) -> None:
        rows = list(zip(keys, xs.tolist(), x2s.tolist(), (self.sign * ys).tolist()))
        for core in self.cores.values():
            core.load(rows)

    def _core_set(self, key, new) -> None:
        for core in self.cores.values():
            if new is None:
                core.store.pop(key)
            else:
                core.store.put(key, *new)

    def _messages(self, key, new, seq: int) -> list[dict]:
        out = []
        sign = self.sign
        for k, core in self.cores.items():
            msgs: tuple[BoxTopkMessage, ...] = core.delete(key) if new is None else core.upsert(key, *new)
            out.extend({"seq": seq, "op": "DELETE" if m.y is None else "PUT", "k": k,
                        "new_value": None if m.y is None else sign * m.y, "item_key": _key_text(m.key),
                        "item_x": m.p, "item_x_2": m.q, "inner_l": m.p_inner_l, "inner_r": m.p_inner_r,
                        "outer_l": m.p_outer_l, "outer_r": m.p_outer_r, "inner_l_2": m.q_inner_l,
                        "inner_r_2": m.q_inner_r, "outer_l_2": m.q_outer_l, "outer_r_2": m.q_outer_r}
                       for m in msgs)
        return out

    def _tops(self, subs: np.ndarray) -> list[list[tuple]]:
        st = self.store
        hits = self._first_in_boxes(subs, self.k[subs], by_key=True)
        return [[(st.keys[j], st.P.item(j), st.Q.item(j), st.Y.item(j)) for j in h] for h in hits]

    def _rebuild(self) -> None:
        self.counters["rebuilds"] += 1
        self.holders = {}
        self.lists = [[] for _ in range(len(self.ids))]
        self.full[:] = False
        self.worst[:] = np.inf
        for s, lst in enumerate(self._tops(np.arange(len(self.ids))) if len(self.ids) else []):
            self._set_list(s, lst, 0)
        self._ready = True

    def _set_list(self, s: int, new: list[tuple], seq: int) -> list[dict]:
        """Keep ``new`` as subscription ``s``'s list; the enter / update / leave rows of the change."""
        old = self.lists[s]
        self.lists[s] = new
        k = int(self.k[s])
        self.full[s] = len(new) >= k
        self.worst[s] = new[-1][3] if len(new) >= k else np.inf
        before = {t[0]: t for t in old}
        after = {t[0]: t for t in new}
        sid, sign = self.ids[s], self.sign
        out = []
        for key, t in after.items():
            b = before.get(key)
            if b is None:
                self.holders.setdefault(key, set()).add(s)
                out.append({"subscription_id": sid, "op": "enter", "value": sign * t[3], "seq": seq,
                            "item_key": _key_text(key), "item_x": t[1]})
            elif _shown(b) != _shown(t):
                out.append({"subscription_id": sid, "op": "update", "value": sign * t[3], "seq": seq,
                            "item_key": _key_text(key), "item_x": t[1]})
        for key, t in before.items():
            if key not in after:
                h = self.holders.get(key)
                if h is not None:
                    h.discard(s)
                    if not h:
                        del self.holders[key]
                out.append({"subscription_id": sid, "op": "leave", "value": sign * t[3], "seq": seq,
                            "item_key": _key_text(key), "item_x": t[1]})
        return out

    def _follow(self, key, old, new, seq: int) -> list[dict]:
        """The kept lists after one update (the rows already changed), from the lists alone except for
        full lists that held the object and lost it or saw it fall (002 §III-A: the exposed objects)."""
        b = self.index.stab(new[0], new[1]) if new is not None else _EMPTY_I
        held = np.array(sorted(self.holders.get(key, ())), dtype=np.int64)
        out: list[dict] = []
        redo = []
        if held.size:
            in_b = np.isin(held, b, assume_unique=True)
            for s, inside in zip(held.tolist(), in_b.tolist()):
                lst = [t for t in self.lists[s] if t[0] != key]
                if inside and (new[2] <= old[2] or not self.full[s]):
                    # still in the box and not worse (or every row of the box is listed): stays
                    lst.append((key, *new))
                    lst.sort(key=lambda t: (t[3], t[0]))
                    out.extend(self._set_list(s, lst, seq))
                elif not inside and not self.full[s]:
                    out.extend(self._set_list(s, lst, seq))    # left; nobody else was waiting
                else:
                    redo.append(s)
        if new is not None and b.size:
            fresh = b[~np.isin(b, held, assume_unique=True)] if held.size else b
            r = new[2]
            enter = ~self.full[fresh] | (r < self.worst[fresh])
            tie = np.flatnonzero(self.full[fresh] & (r == self.worst[fresh]))
            for i in tie.tolist():
                enter[i] = key < self.lists[int(fresh[i])][-1][0]
            for s in fresh[enter].tolist():
                lst = self.lists[s] + [(key, *new)]
                lst.sort(key=lambda t: (t[3], t[0]))
                out.extend(self._set_list(s, lst[:int(self.k[s])], seq))
        if redo:
            subs = np.array(redo, dtype=np.int64)
            for s, lst in zip(redo, self._tops(subs)):
                out.extend(self._set_list(s, lst, seq))
        return out

    def result(self, sub_id) -> list[tuple]:
        """The subscription's top k now, ``[(key, x, x2, y)]`` in rank order (from the rows)."""
        i = self._slot_of(sub_id)
        st = self.store
        k = int(self.k[i])
        idx = np.flatnonzero(st.box_mask(self.x_lo[i], self.x_hi[i], self.x2_lo[i], self.x2_hi[i]))
        top = sorted(idx.tolist(), key=lambda j: (st.Y[j], st.keys[j]))[:k]
        return [(st.keys[j], st.P.item(j), st.Q.item(j), self.sign * st.Y.item(j)) for j in top]

    def explain(self) -> dict:
        c = self._core_counters()
        n = max(c.get("updates", 0), 1)
        relax = {False: "exact", True: "relaxed per cell", "cell": "relaxed per cell",
                 "region": "relaxed per region"}[self.relax]
        return {
            "class": "BOX_TOPK", "group": self.group_id, "subscriptions": len(self), "tuples": len(self.store),
            "order": f"{self.y} {'DESC' if self.descending else 'ASC'}, ties by key ascending",
            "k values": sorted(self.cores),
            "algorithm": f"Paint-Dense on boxes (002 §III-A, §IV-C), {relax} 4-d tiles, one core per k; "
                         f"x-moves as delete + insert (002 footnote 4)",
            "data index": f"slot arrays on ({self.x}, {self.x2}, {self.y}), numpy scan per update "
                          f"(box_range.BoxTopkCore) x {len(self.cores)} k",
            "subscription index": self.index.describe(),
            "message format": "Msg(k, key, x, x2, y, INNER_L, INNER_R, OUTER_L, OUTER_R, INNER_L_2, INNER_R_2, "
                              "OUTER_L_2, OUTER_R_2) (002 §II-A per attribute)",
            "reformulated predicate": "k = k_s AND (OUTER_L < x_lo <= INNER_L) AND (INNER_R <= x_hi < OUTER_R) AND "
                                      "(OUTER_L_2 < x2_lo <= INNER_L_2) AND (INNER_R_2 <= x2_hi < OUTER_R_2); "
                                      "receiver drops an object outside its box",
            "unicast": "stab the new point, insert where it beats the list's last; recompute full lists "
                       "that held the object and lost it",
            "messages per update": round(c.get("messages", 0) / n, 3),
        }


# ---- the subscriber side (what a CN and its subscribers do with the reformulated messages) ----------

def box_reaches(msg: dict, x_lo: float, x_hi: float, x2_lo: float, x2_hi: float, k: int | None = None) -> bool:
    """Whether one message row reaches the box subscription ``[x_lo, x_hi] x [x2_lo, x2_hi]`` (with
    top-k's ``k``): 000 §2.3.1's predicate on each attribute (``box_range.box_matches``).

    >>> m = {"k": None, "inner_l": 4.0, "inner_r": 4.0, "outer_l": 2.0, "outer_r": 9.0,
    ...      "inner_l_2": 1.0, "inner_r_2": 1.0, "outer_l_2": -math.inf, "outer_r_2": math.inf}
    >>> box_reaches(m, 3.0, 5.0, -math.inf, 1.0), box_reaches(m, 1.0, 5.0, 0.0, 1.0)
    (True, False)
    """
    mk = msg.get("k")
    if mk is not None and k is not None and int(mk) != int(k):
        return False
    return box_matches(BoxMessage(None, msg["inner_l"], msg["inner_r"], msg["outer_l"], msg["outer_r"],
                                  msg["inner_l_2"], msg["inner_r_2"], msg["outer_l_2"], msg["outer_r_2"]),
                       x_lo, x_hi, x2_lo, x2_hi)


class BoxMinReceiver:
    """A BOX_MIN (BOX_MAX) subscriber, maintained only from the message rows that reach it."""

    def __init__(self, x_lo, x_hi, x2_lo, x2_hi, value: float | None = None, maximum: bool = False):
        self.box = (float(x_lo), float(x_hi), float(x2_lo), float(x2_hi))
        self.value, self.maximum, self.k = value, maximum, None

    def receive(self, msg: dict) -> bool:
        """Apply one message row; whether the value changed."""
        before = self.value
        if msg["op"].startswith("NEW_"):
            self.value = msg["new_value"]
        else:       # relaxed: MIN_IF_IN / MAX_IF_IN, the subscriber filters (000 §4)
            a, b, c, d = self.box
            v = msg["new_value"]
            if a <= msg["item_x"] <= b and c <= msg["item_x_2"] <= d and \
                    (before is None or (v > before if self.maximum else v < before)):
                self.value = v
        return self.value != before


class BoxTopkReceiver:
    """A BOX_TOPK subscriber: its list ``[(key, x, x2, y)]`` from the message rows that reach it (002 §II-A
    protocol with the containment filter, :class:`box_range.BoxTopkSubscriber`).  Keys arrive as text
    (``item_key``): ``key_of`` turns them back (e.g. ``int``), so that ties in y rank as on the server."""

    def __init__(self, x_lo, x_hi, x2_lo, x2_hi, k: int, items=(), descending: bool = False, key_of=None):
        self.sign = -1.0 if descending else 1.0
        self.k = int(k)
        self.key_of = key_of or _key_text
        self.sub = BoxTopkSubscriber(x_lo, x_hi, x2_lo, x2_hi, k,
                                     [(self.key_of(_key_text(key)), p, q, self.sign * y) for key, p, q, y in items])

    @property
    def items(self) -> list[tuple]:
        return [(key, p, q, self.sign * r) for key, p, q, r in self.sub.items]

    def receive(self, msg: dict) -> bool:
        y = msg["new_value"]
        return self.sub.receive(BoxTopkMessage(
            self.key_of(msg["item_key"]), msg["item_x"], msg["item_x_2"], None if y is None else self.sign * y,
            *(msg[c] for c in ("inner_l", "inner_r", "outer_l", "outer_r", "inner_l_2", "inner_r_2",
                               "outer_l_2", "outer_r_2"))))


def _reached(boxes: np.ndarray, ks: np.ndarray, msg: dict) -> np.ndarray:
    """The receivers (rows of ``boxes`` = x_lo, x_hi, x2_lo, x2_hi; ``ks`` their k or -1) one message row
    reaches: 000 §2.3.1's predicate on each attribute, vectorised (an infinite OUTER bound also admits
    the same infinite subscription end)."""
    ninf, inf = -math.inf, math.inf
    a1, b1, a2, b2 = boxes.T

    def side(lo, hi, il, ir, ol, orr):
        return (((ol < lo) | ((lo == ol) & (ol == ninf))) & (lo <= il) & (ir <= hi)
                & ((hi < orr) | ((hi == orr) & (orr == inf))))

    m = side(a1, b1, msg["inner_l"], msg["inner_r"], msg["outer_l"], msg["outer_r"]) & \
        side(a2, b2, msg["inner_l_2"], msg["inner_r_2"], msg["outer_l_2"], msg["outer_r_2"])
    if msg.get("k") is not None:
        m &= ks == int(msg["k"])
    return m


class BoxSubscribers:
    """The network and the subscribers of one box group, for ``engine.deliver``: one receiver per
    subscription, seeded with its current result; :meth:`deliver` plays the group's reformulated
    messages (in ``seq``, then ``msg_no`` order) and returns the unicast rows they cause -- one
    ``update`` row per BOX_MIN/MAX subscriber whose value changed, the ``enter`` / ``update`` / ``leave``
    rows of a BOX_TOPK subscriber's net list change per ``seq`` -- as the group's unicast mode does.
    Routing is one vectorised predicate per message over the receivers' boxes (no 4-d index yet)."""

    def __init__(self, group: "_BoxGroup", key_type=None):
        """``key_type``: the table key's Python type (``int`` or ``str``): keys travel as text and ties in
        y rank by the key itself (002 §II-A); inferred from the rows when None (``str`` when empty)."""
        self.group_id = group.group_id
        self.topk = isinstance(group, BoxTopkGroup)
        if key_type is None:
            ints = any(isinstance(k, (int, np.integer)) for k in group.store.keys if k is not None)
            key_type = int if ints else str
        key_of = int if key_type is int else None
        self.ids = list(group.ids.tolist())
        self.recv = []
        for i, sid in enumerate(self.ids):
            box = (group.x_lo[i], group.x_hi[i], group.x2_lo[i], group.x2_hi[i])
            if self.topk:
                self.recv.append(BoxTopkReceiver(*box, int(group.k[i]), group.result(sid),
                                                 descending=group.descending, key_of=key_of))
            else:
                self.recv.append(BoxMinReceiver(*box, group.result(sid), maximum=group.maximum))
        self.boxes = np.array([(group.x_lo[i], group.x_hi[i], group.x2_lo[i], group.x2_hi[i])
                               for i in range(len(self.ids))], dtype=np.float64).reshape(-1, 4)
        self.ks = np.asarray(group.k if self.topk else np.full(len(self.ids), -1), dtype=np.int64)

    @classmethod
    def merged(cls, parts: list[BoxSubscribers]) -> BoxSubscribers:
        """One group's subscribers from its subscription shards' (``operators/box/shards.py``): each receiver
        depends only on its box and the messages (000 §4), so the shards' receivers side by side are the group's."""
        out = cls.__new__(cls)
        out.group_id = parts[0].group_id
        out.topk = parts[0].topk
        out.ids = [sid for p in parts for sid in p.ids]
        out.recv = [r for p in parts for r in p.recv]
        out.boxes = np.concatenate([p.boxes for p in parts]).reshape(-1, 4)
        out.ks = np.concatenate([p.ks for p in parts]).astype(np.int64)
        return out

    def result(self, sid):
        r = self.recv[self.ids.index(sid)]
        return r.items if self.topk else r.value

    def deliver(self, messages: pa.Table) -> pa.Table:
        rows = messages.to_pylist()
        rows.sort(key=lambda r: (r["seq"], r.get("msg_no") or 0))  # stable: row order without msg_no
        out: list[dict] = []
        i = 0
        while i < len(rows):
            seq = rows[i]["seq"]
            before: dict = {}
            while i < len(rows) and rows[i]["seq"] == seq:
                msg = rows[i]
                for s in np.flatnonzero(_reached(self.boxes, self.ks, msg)).tolist():
                    r = self.recv[s]
                    if s not in before:
                        before[s] = list(r.items) if self.topk else r.value
                    r.receive(msg)
                i += 1
            for s in sorted(before):
                out.extend(self._changes(s, before[s], seq))
        return notification_table(out, BOX_UNICAST_SCHEMA, self.group_id)

    def _changes(self, s: int, old, seq: int) -> list[dict]:
        sid, r = self.ids[s], self.recv[s]
        if not self.topk:
            return [] if r.value == old else [{"subscription_id": sid, "op": "update", "value": r.value, "seq": seq}]
        before = {t[0]: t for t in old}
        after = {t[0]: t for t in r.items}
        rows = [{"subscription_id": sid, "op": "enter" if key not in before else "update", "value": t[3],
                 "seq": seq, "item_key": _key_text(key), "item_x": t[1]}
                for key, t in after.items() if key not in before or _shown(before[key]) != _shown(t)]
        rows += [{"subscription_id": sid, "op": "leave", "value": t[3], "seq": seq, "item_key": _key_text(key),
                  "item_x": t[1]} for key, t in before.items() if key not in after]
        return rows


def _shown(entry: tuple) -> tuple:
    """What a top-k list entry ``(key, X, X2, Y)`` shows in a notification: its X and its value.  A member whose
    second box coordinate moved inside the box, its X and Y as they were, changed nothing a subscriber sees (the
    notification carries no X2), so it is no ``update``."""
    return entry[1], entry[3]


def deliver(messages, receivers: dict, counters: dict | None = None) -> dict:
    """Play the CN: every message row (a table or a list of dicts, in order) to every receiver it
    reaches (:func:`box_reaches`, vectorised over the receivers).  ``counters`` gains
    ``deliveries`` and ``false_positives`` (deliveries that changed nothing); returns them."""
    rows = messages.to_pylist() if isinstance(messages, pa.Table) else list(messages)
    c = counters if counters is not None else {}
    c.setdefault("deliveries", 0)
    c.setdefault("false_positives", 0)
    recv = list(receivers.values())
    if not rows or not recv:
        return c
    boxes = np.array([r.box if isinstance(r, BoxMinReceiver) else (r.sub.p1, r.sub.p2, r.sub.q1, r.sub.q2)
                      for r in recv], dtype=np.float64).reshape(-1, 4)
    a1, b1, a2, b2 = boxes.T
    ks = np.array([-1 if r.k is None else r.k for r in recv], dtype=np.int64)
    ninf, inf = -math.inf, math.inf

    def side(lo, hi, il, ir, ol, orr):
        return (((ol < lo) | ((lo == ol) & (ol == ninf))) & (lo <= il) & (ir <= hi)
                & ((hi < orr) | ((hi == orr) & (orr == inf))))

    for msg in rows:
        m = side(a1, b1, msg["inner_l"], msg["inner_r"], msg["outer_l"], msg["outer_r"]) & \
            side(a2, b2, msg["inner_l_2"], msg["inner_r_2"], msg["outer_l_2"], msg["outer_r_2"])
        if msg.get("k") is not None:
            m &= ks == int(msg["k"])
        for i in np.flatnonzero(m).tolist():
            c["deliveries"] += 1
            if not recv[i].receive(msg):
                c["false_positives"] += 1
    return c


def measure_false_positives(kind: str = "BOX_MIN", relax: bool | str = False, n_rows: int = 400,
                            n_subs: int = 1000, n_updates: int = 150, k: int = 3, seed: int = 0,
                            option: bool = False) -> dict:
    """One random stream through a group in ``reformulated`` mode (receivers seeded from ``result``)
    and through a twin in ``unicast`` mode: messages per update, deliveries, false positives and
    their rate, unicast rows, and whether every receiver ended equal to ``result``."""
    rng = random.Random(seed)

    def side():
        a, b = sorted((rng.random(), rng.random()))
        w = rng.random()
        return (-math.inf, b) if w < 0.05 else (a, math.inf) if w < 0.1 else (a, b)

    boxes = [side() + side() for _ in range(n_subs)]
    rows = {f"r{i}": (rng.random(), rng.random(), rng.random()) for i in range(n_rows)}
    nxt = n_rows
    updates = []
    live = sorted(rows)
    for _ in range(n_updates):
        u = rng.random()
        if u < 0.25 or not live:
            key = f"r{nxt}"
            nxt += 1
            live.append(key)
            updates.append((key, rng.random(), rng.random(), rng.random(), 0))
        elif u < 0.45:
            key = live.pop(rng.randrange(len(live)))
            updates.append((key, None, None, None, 1))
        else:
            key = live[rng.randrange(len(live))]
            updates.append((key, rng.random(), rng.random(), rng.random(), 0) if u >= 0.75
                           else (key, None, None, rng.random(), 0))   # y change: x, x2 filled in below

    def snapshot():
        keys = sorted(rows)
        return BoxClassSnapshot(
            kind, "m", "t", "x", "x2", "y", option, np.array([f"s{j}" for j in range(n_subs)], dtype=object),
            *(np.array([b[i] for b in boxes]) for i in (0, 1, 2, 3)),
            np.full(n_subs, k) if kind == "BOX_TOPK" else None, np.array(keys, dtype=object),
            np.array([rows[r][0] for r in keys]), np.array([rows[r][1] for r in keys]),
            np.array([rows[r][2] for r in keys]), relax=relax)

    g, twin = snapshot().build(), snapshot().build()
    if kind == "BOX_TOPK":
        recv = {s: BoxTopkReceiver(*boxes[i], k, g.result(s), descending=option) for i, s in enumerate(g.ids)}
    else:
        recv = {s: BoxMinReceiver(*boxes[i], g.result(s), maximum=option) for i, s in enumerate(g.ids)}
    counters: dict = {}
    messages = unicast_rows = 0
    state = dict(rows)
    for seq, (key, x, x2, y, op) in enumerate(updates):
        if op == 0 and x is None:
            x, x2 = state[key][:2]
        state.pop(key, None) if op == 1 else state.__setitem__(key, (x, x2, y))
        batch = {"key": [key], "x": pa.array([x], pa.float64()), "x_2": pa.array([x2], pa.float64()),
                 "y": pa.array([y], pa.float64()), "op": pa.array([op], pa.int8()), "seq": pa.array([seq], pa.int64())}
        out = g.apply(batch, "reformulated")
        messages += out.num_rows
        deliver(out, recv, counters)
        unicast_rows += twin.apply(batch, "unicast").num_rows
    if kind == "BOX_TOPK":
        correct = all(recv[s].items == g.result(s) for s in g.ids)
    else:
        correct = all(recv[s].value == g.result(s) for s in g.ids)
    return {"messages_per_update": messages / max(len(updates), 1), "deliveries": counters["deliveries"],
            "false_positives": counters["false_positives"],
            "false_positive_rate": counters["false_positives"] / max(counters["deliveries"], 1),
            "unicast_rows": unicast_rows, "correct": correct}
