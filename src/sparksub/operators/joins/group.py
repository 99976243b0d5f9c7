"""Join subscription groups as engine operators: SELECT_JOIN (the plan router over the select-join plans)
and BAND_JOIN (BJ-SSI), one *partition* of a group per Spark task (pure core, no pyspark).

Issue 5 items 1, 7 and 8: the engine's groups for ``SELECT … FROM R JOIN S ON R.b = S.b WHERE R.a BETWEEN …
AND S.c BETWEEN …`` and ``… ON S.b - R.b BETWEEN lo AND hi`` (003 §4.3).  Updates to either table are
notifications: every affected subscription gets the result tuples (r, s) that enter or leave its result.

What this module adds to the algorithm cores (:mod:`~sparksub.operators.joins.select`,
:mod:`~sparksub.operators.joins.router`, :mod:`~sparksub.operators.joins.band`):

* **Rows, not tuples.**  A batch holds the updated table's columns (``EVENT_PREFIX`` + name, the form
  FILTER groups read), ``op`` (insert / delete: the engine turns an upsert of a known key into the delete of
  its old row and the insert of the new one, both with the update's ``seq``) and ``j_side`` (0 = R, 1 = S).
  A row whose join value is NULL, or whose selection column of this group is NULL (SQL: ``NULL BETWEEN …``
  is not true), joins nothing in this group: it is kept aside (so that its delete is recognised) and never
  reaches the core.
* **Net changes per update.**  An upsert that keeps a result tuple (say R.a moves inside every range that
  held it) would be a delete and an insert of the same pair; the two cancel, as X-moves do for the range
  classes (``docs/range_min.md``).  The notifications of one ``seq`` are the net change.
* **Partitions** (003 §4.2.1 meets Spark; issue 5 item 8).  SELECT_JOIN: R and S rows by a hash of the
  join value (:func:`join_value_partition`), every partition holding the whole query set (and its SSI):
  an update meets all its join partners in one partition -- or, sharded (``joins/shards.py``, issue 16 item 4),
  row partitions holding no subscription, whose messages (000 §4) subscription shards match.  BAND_JOIN: S by ranges of S.b
  (:func:`band_cuts`: quantiles), R replicated into every partition whose S range meets ``[r.b + lo_min,
  r.b + hi_max]`` (the widest band): every pair (r, s) is found exactly once, in s's partition.
* **Query changes in the log** (003 §4.2.3, dynamic maintenance).  Subscriptions added or removed between
  batches travel as :class:`QueryChange` entries of the partitions' update log, so a warm worker applies
  them to its cached operator (the dynamic stabbing partition's insert / delete) instead of rebuilding;
  only a band wider than the partitioning's reach forces a new base.
* **The reformulated form of select-joins** (000 §4): one message per result tuple of δ ⋈ partner
  (:data:`JOIN_MESSAGE_SCHEMA`; its number does not depend on the subscriptions), and a stateless
  subscriber predicate ``a_lo <= left_value <= a_hi AND c_lo <= right_value <= c_hi``
  (:class:`JoinSubscribers`).  Band joins have no reformulated form here (the union of all bands'
  result tuples can be far larger than any subscriber's share).

Keys and join values travel as text in notifications (``left_key`` / ``right_key``); join values are
compared as float64 when both join columns are numeric (``R.b = 3`` joins ``S.b = 3.0``), else as text.
"""
from __future__ import annotations

import math
import struct
import zlib
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparksub.errors import DuplicateSubscription, UnknownSubscription
from sparksub.operators.shared.schemas import EVENT_PREFIX
from sparksub.operators.joins.band import BJSSI
from sparksub.operators.shared.schemas import DELETE
from sparksub.operators.joins.router import DYNAMIC, PAPER_PLANS, Router
from sparksub.operators.shared.ssi import stabbing_number

__all__ = ["JOIN_ITEM_SCHEMA", "JOIN_MESSAGE_SCHEMA", "JoinSubscriptions", "JoinGroupSnapshot", "SelectJoinGroup",
           "BandJoinGroup", "QueryChange", "MessageColumns", "JoinSubscribers", "join_value_partition", "band_cuts",
           "band_partitions", "key_text"]

SELECT_JOIN, BAND_JOIN = "SELECT_JOIN", "BAND_JOIN"
L, R = 0, 1  # j_side: the left (R) and right (S) table of the join

#: the columns a join notification adds to the unicast rows: the result tuple, by the two tables' keys
JOIN_ITEM_SCHEMA = pa.schema([("left_key", pa.string()), ("right_key", pa.string())])
#: the reformulated messages of a select-join group (000 §4): one per result tuple of δ ⋈ partner
JOIN_MESSAGE_SCHEMA = pa.schema([
    ("group_id", pa.string()), ("seq", pa.int64()), ("op", pa.string()),
    ("left_key", pa.string()), ("right_key", pa.string()),
    ("left_value", pa.float64()), ("right_value", pa.float64()), ("msg_no", pa.int64()),
])
_UNICAST_COLUMNS = ("subscription_id", "op", "seq", "group_id", "left_key", "right_key")


def key_text(k) -> str:
    """A key as notifications carry it (integral floats print as integers: key 3 and 3.0 are one key)."""
    if isinstance(k, float) and k.is_integer():
        return str(int(k))
    return str(k)


class _Notifications:
    """Unicast rows, built column by column (a batch can carry hundreds of thousands of them): the result
    tuple's keys and, per row, the payload values of its two rows, projected per subscription at the end."""

    __slots__ = ("group", "subs", "ops", "seqs", "lefts", "rights", "lvals", "rvals", "_text")

    def __init__(self, group=None):
        self.group = group
        self.subs, self.ops, self.seqs, self.lefts, self.rights = [], [], [], [], []
        self.lvals, self.rvals = [], []
        self._text: dict = {}  # key -> its text (partners repeat across updates)

    def _t(self, k) -> str:
        t = self._text.get(k)
        if t is None:
            t = self._text[k] = key_text(k)
        return t

    def add(self, changes: dict, sign: int, seq: int, d: int = L, vals=None) -> None:
        """The pairs ``changes`` of one incoming row of side ``d`` whose payload values are ``vals``."""
        # one pass per column over all pairs (usually one or two per subscription): no per-subscription calls
        subs = [sub for sub, pairs in changes.items() for _ in pairs]
        flat = [p for pairs in changes.values() for p in pairs]
        m = len(subs)
        self.subs += subs
        self.ops += ["insert" if sign > 0 else "delete"] * m
        self.seqs += [seq] * m
        get, t = self._text.get, self._t
        self.lefts += [get(p[0]) or t(p[0]) for p in flat]
        self.rights += [get(p[1]) or t(p[1]) for p in flat]
        if self.group is not None and any(self.group.payload):
            partner = self.group.values[1 - d]
            if d == L:
                self.lvals += [vals] * m
                self.rvals += [partner.get(p[1]) for p in flat]
            else:
                self.lvals += [partner.get(p[0]) for p in flat]
                self.rvals += [vals] * m

    def add_one(self, sub, pair: tuple, sign: int, seq: int, lv, rv) -> None:
        self.subs.append(sub)
        self.ops.append("insert" if sign > 0 else "delete")
        self.seqs.append(seq)
        self.lefts.append(self._t(pair[0]))
        self.rights.append(self._t(pair[1]))
        if self.group is not None and any(self.group.payload):
            self.lvals.append(lv)
            self.rvals.append(rv)

    def table(self, group_id: str) -> pa.Table:
        n = len(self.subs)
        out = {"subscription_id": pa.array(self.subs, pa.string()), "op": pa.array(self.ops, pa.string()),
               "seq": pa.array(self.seqs, pa.int64()),
               "group_id": pa.array([group_id] * n, pa.string()),
               "left_key": pa.array(self.lefts, pa.string()), "right_key": pa.array(self.rights, pa.string())}
        g = self.group
        if g is not None and n and self.lvals:
            # each row carries its subscription's selected columns (DESIGN §1), the others null; the columns
            # travel under EVENT_PREFIX, as a FILTER notification's do, and get their names in the engine
            cols: dict = {}
            for i, (sub, lv, rv) in enumerate(zip(self.subs, self.lvals, self.rvals)):
                for name, v in g.project(sub, lv, rv).items():
                    column = cols.get(name)
                    if column is None:   # (not setdefault: its default, n Nones, would be built for every row)
                        column = cols[name] = [None] * n
                    column[i] = v
            for name, vals in cols.items():
                out[EVENT_PREFIX + name] = _arrow_column(vals, g.output_types.get(name))
        return pa.table(out)


# ---- partitioning (issue 5 item 8) ---------------------------------------------------------------------------
def canonical_join_value(v, numeric: bool):
    """The join value as the core compares it: float64 when both join columns are numeric, else text."""
    if v is None:
        return None
    if numeric:
        f = float(v)
        return None if f != f else f
    return str(v)


def join_value_partition(v, numeric: bool, partitions: int) -> int:
    """The SELECT_JOIN partition of a (canonical, non-null) join value: a CRC32 of its bytes, the same in
    every process (Python's ``hash`` of text is salted per process)."""
    if partitions <= 1:
        return 0
    raw = struct.pack("<d", v + 0.0) if numeric else v.encode("utf-8")
    return zlib.crc32(raw) % partitions


def band_cuts(values: np.ndarray, partitions: int) -> np.ndarray:
    """``partitions − 1`` increasing cut points of S.b (quantiles of the current S values): partition p owns
    S.b in [cuts[p−1], cuts[p])."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if partitions <= 1 or not v.size:
        return np.zeros(0)
    return np.unique(np.quantile(v, np.arange(1, partitions) / partitions))


def band_partitions(side: int, b: float, cuts: np.ndarray, reach: tuple[float, float]) -> range:
    """The BAND_JOIN partitions a row goes to: an S row to the one owning its b, an R row to every partition
    whose S range meets [b + lo_min, b + hi_max] (``reach``), so that s's partition holds every r that can
    pair with it."""
    if side == L:  # the left table, R of 003 §4.3
        lo, hi = b + reach[0], b + reach[1]
        # the pair test ``lo <= s - r <= hi`` is decided in floating point: widen by a few ulps of the
        # operands so that rounding never puts a pair's s outside r's partitions (s = 1e-57, r = 1, band -1)
        finite = [abs(x) for x in (b, lo, hi) if math.isfinite(x)]
        if finite:
            slack = 4 * float(np.spacing(max(finite)))
            lo, hi = lo - slack, hi + slack
        first = bisect_right(cuts.tolist(), lo) if lo == lo else 0
        last = bisect_right(cuts.tolist(), hi) if hi == hi else len(cuts)
        return range(first, last + 1)
    p = bisect_right(cuts.tolist(), b)
    return range(p, p + 1)


# ---- subscriptions -------------------------------------------------------------------------------------------
#: a registry column's value for a subscription that has no selection on that column (not an open range)
NO_SELECTION = math.nan


class JoinSubscriptions:
    """The registry of a join group (the engine's ``entry.points``): id <-> slot and one float64 column per
    bound end (SELECT_JOIN: a_lo, a_hi, c_lo, c_hi; BAND_JOIN: lo, hi and ``L:<col>:lo`` / ``L:<col>:hi`` …
    per local selection, ±inf for an open end).

    A BAND_JOIN group holds templates with different selection columns; a subscription that does not
    select on a column has NaN (:data:`NO_SELECTION`) in that column's two ends, never (−inf, +inf): SQL's
    ``a >= -inf`` is not true for a NULL ``a``, while "no selection on a" keeps the row (issue 15 item 1)."""

    def __init__(self):
        self._slot_of: dict = {}
        self._ids: list = []
        self._live: list[bool] = []
        self.columns: dict[str, list] = {}

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, sub_id) -> bool:
        return sub_id in self._slot_of

    def add(self, ids: np.ndarray, columns: dict[str, np.ndarray]) -> np.ndarray:
        seen = set()
        for i in ids.tolist():
            if i in self._slot_of or i in seen:
                raise DuplicateSubscription(f"subscription {i!r} already exists")
            seen.add(i)
        start = len(self._ids)
        n = len(ids)
        for name in set(self.columns) | set(columns):
            # a template without this selection does not select on the column at all (NULLs pass): NaN
            col = self.columns.setdefault(name, [NO_SELECTION] * start)
            col.extend(np.asarray(columns[name], dtype=np.float64).tolist() if name in columns
                       else [NO_SELECTION] * n)
        for j, i in enumerate(ids.tolist()):
            self._slot_of[i] = start + j
        self._ids.extend(ids.tolist())
        self._live.extend([True] * n)
        return np.arange(start, start + n, dtype=np.int64)

    def remove(self, ids) -> None:
        missing = [i for i in ids if i not in self._slot_of]
        if missing:
            raise UnknownSubscription(f"no subscription {missing[0]!r}")
        for i in ids:
            self._live[self._slot_of.pop(i)] = False

    def live_slots(self) -> np.ndarray:
        return np.flatnonzero(np.asarray(self._live, dtype=bool)).astype(np.int64)

    def ids_of(self, slots) -> np.ndarray:
        return np.asarray([self._ids[s] for s in np.asarray(slots).tolist()], dtype=object)

    def slot_of(self, sub_id) -> int:
        return self._slot_of[sub_id]

    def rows(self, slots=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(ids, {column: values}) of the given (default: live) slots."""
        slots = self.live_slots() if slots is None else np.asarray(slots, dtype=np.int64)
        return self.ids_of(slots), {k: np.asarray(v, dtype=np.float64)[slots] for k, v in self.columns.items()}


@dataclass
class QueryChange:
    """Subscriptions added / removed between two update batches, as an entry of a partition's update log
    (003 §4.2.3: the SSI follows query insertions and deletions without a rebuild); ``add_outputs`` the added
    subscriptions' projections (one per id, see :class:`JoinGroupSnapshot`)."""

    add_ids: np.ndarray
    add_columns: dict
    remove_ids: tuple = ()
    add_outputs: list = ()
    output_types: dict | None = None


@dataclass
class MessageColumns:
    """The columns a sharded group's row partition puts in its messages (``payload[d]``: side d's), as an entry of
    its log: a row partition keeps every column of both tables (``JoinFamily.partition_snapshots(subscriptions=
    False)``), and its messages carry, as the whole group's do, the columns its subscriptions select -- which
    change with the subscriptions, without a new base."""

    payload: tuple


# ---- projections: a subscription's SELECT list is its output (DESIGN §1; issue 15 item 8) ----------------------
def side_columns(side: tuple) -> tuple:
    """The columns a partition keeps of one side's rows: key, join column, selection columns, and the columns
    the subscriptions' projections select (``side[4]``)."""
    return tuple(dict.fromkeys((side[1], side[2], *side[3], *(side[4] if len(side) > 4 else ()))))


def payload_columns(projections) -> tuple[tuple, tuple]:
    """Per side, the columns the projections (each ``((name, side, column), ...)``) select, in first use order."""
    out: tuple[dict, dict] = ({}, {})
    for proj in projections:
        for _, d, col in proj:
            out[d][col] = None
    return tuple(out[L]), tuple(out[R])


def unify_types(a: pa.DataType | None, b: pa.DataType) -> pa.DataType:
    """One Arrow type for a column two sources fill: equal types stay, numbers become float64, else text."""
    if a is None or a == b:
        return b
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in (a, b)):
        return pa.float64()
    return pa.string()


def output_types(projections, column_types: dict) -> dict:
    """name -> Arrow type of every output column of ``projections`` (``column_types``: (side, column) -> type;
    a name two projections fill from columns of different types gets :func:`unify_types`)."""
    out: dict = {}
    for proj in projections:
        for name, d, col in proj:
            out[name] = unify_types(out.get(name), column_types[(d, col)])
    return out


def message_column(table: str, column: str) -> str:
    """A reformulated select-join message carries the result tuple's selected columns as ``table.column``."""
    return f"{table}.{column}"


def _arrow_column(values: list, typ: pa.DataType | None) -> pa.Array:
    if typ is None:
        return pa.array(values)
    if pa.types.is_string(typ):
        values = [None if v is None else v if isinstance(v, str) else key_text(v) for v in values]
    return pa.array(values, typ)


# ---- the group's definition and state (what Spark broadcasts) -------------------------------------------------
@dataclass
class JoinGroupSnapshot:
    """One partition of a join group: its definition, the subscriptions and the partition's rows.

    ``sides[d]`` = (table, key column, join column, selection columns, selected columns) of the left (d = 0)
    / right table; SELECT_JOIN's selection columns are ``(a,)`` / ``(c,)`` (empty when the template has none),
    BAND_JOIN's the local-selection columns of its templates; the selected columns those the projections read
    (:func:`payload_columns`).  ``rows[d]`` = {column: list of values} of the partition's rows of that table
    (:func:`side_columns`).  ``sub_outputs[i]`` is subscription i's projection, ``((name, side, column),
    ...)``: its notifications and result rows carry those columns under those names (DESIGN §1);
    ``output_types`` name -> Arrow type over all of them."""

    kind: str
    group_id: str           # the logical group (what notifications carry)
    partition_id: str       # this partition's id (the replica's)
    sides: tuple
    numeric_join: bool
    sub_ids: np.ndarray
    sub_columns: dict
    rows: tuple
    router_mode: str = DYNAMIC
    router_plans: tuple = PAPER_PLANS
    domains: dict = field(default_factory=dict)
    sub_outputs: list = ()
    output_types: dict = field(default_factory=dict)
    payload_types: dict = field(default_factory=dict)   # (side, column) -> Arrow type of a selected column
    message_payload: tuple | None = None   # the columns its messages carry per side (None: its payload's)
    stateless = False

    def build(self):
        group = (SelectJoinGroup if self.kind == SELECT_JOIN else BandJoinGroup)(self)
        return group


class _JoinGroup(ABC):
    """Common part of the two join group operators: row handling, NULLs, netting, output."""

    stateless = False

    def __init__(self, snap: JoinGroupSnapshot):
        self.snap = snap
        self.group_id = snap.group_id
        self.kind = snap.kind
        self.sides = snap.sides
        self.numeric_join = snap.numeric_join
        self.inert = (set(), set())        # keys kept aside: their row joins nothing here
        self.sub_cols: dict = {}           # subscription id -> its bounds (SELECT_JOIN) / True (BAND_JOIN)
        self.notifications = 0
        self.updates = 0
        # projections (DESIGN §1): subscription id -> ((name, side, column), ...); the rows' selected values
        self.payload = tuple(tuple(side[4]) if len(side) > 4 else () for side in self.sides)
        self.values: tuple[dict, dict] = ({}, {})   # key -> tuple of its payload values (joining rows only)
        self._idx = tuple({c: i for i, c in enumerate(cols)} for cols in self.payload)
        self.message_payload = tuple(snap.message_payload) if snap.message_payload is not None else self.payload
        self.outputs: dict = {}
        self.output_types = dict(snap.output_types)
        self._init_core()
        ids = np.asarray(snap.sub_ids, dtype=object)
        self._add_queries(ids, snap.sub_columns)
        self._add_outputs(ids, snap.sub_outputs)
        self._load(snap.rows)
        self._load_values(snap.rows)

    @abstractmethod
    def _row(self, d: int, row: dict):
        """The core's view of a row of side ``d`` (join value, selection value(s)), None when it joins nothing."""

    @abstractmethod
    def _load(self, rows) -> None:
        """Bulk-load the snapshot's rows of both sides (no notifications)."""

    @abstractmethod
    def _init_core(self) -> None:
        """Create the algorithm core (``self.core``)."""

    @abstractmethod
    def _add_queries(self, ids: np.ndarray, columns: dict) -> None:
        """Register subscriptions from their bound columns."""

    def _remove_queries(self, ids) -> None:
        """Drop subscriptions (both cores take one id at a time)."""
        for i in ids:
            self.core.remove_query(i)
            self.sub_cols.pop(i, None)
            self.outputs.pop(i, None)

    def _add_outputs(self, ids, outputs) -> None:
        if len(outputs):
            self.outputs.update(zip(ids.tolist(), outputs))

    def _load_values(self, rows) -> None:
        for d in (L, R):
            if not self.payload[d]:
                continue
            table = rows[d]
            keys = table.get(self.sides[d][1], [])
            cols = [table[c] for c in self.payload[d]]
            inert = self.inert[d]
            self.values[d].update((k, tuple(c[i] for c in cols)) for i, k in enumerate(keys) if k not in inert)

    def project(self, sub_id, left: tuple | None, right: tuple | None) -> dict:
        """The output row of ``sub_id`` for a result tuple whose rows' payload values are ``left`` / ``right``."""
        proj = self.outputs.get(sub_id, ())
        if not proj:
            return {}
        idx = self._idx
        vals = (left, right)
        return {name: vals[d][idx[d][col]] for name, d, col in proj}

    def result_rows(self, sub_id) -> list[tuple[tuple, dict]]:
        """``[((left key, right key), output row), ...]``: the current result of ``sub_id`` in this partition,
        each tuple with its projection (DESIGN §1)."""
        vl, vr = self.values
        return [(pair, self.project(sub_id, vl.get(pair[0]), vr.get(pair[1]))) for pair in self.result(sub_id)]

    @abstractmethod
    def result(self, sub_id) -> list[tuple]:
        """The current result tuples (left key, right key) of ``sub_id`` in this partition."""

    @abstractmethod
    def _insert(self, d: int, key, core_row) -> dict:
        """Insert a row; {subscription: [(left key, right key), ...]} of the result tuples it adds."""

    @abstractmethod
    def _delete(self, d: int, key) -> dict:
        """Delete a row; {subscription: [(left key, right key), ...]} of the result tuples it removes."""

    @abstractmethod
    def _size(self, d: int) -> int:
        """Rows of side ``d`` in the core."""

    # ---- batches ---------------------------------------------------------------------------------------------
    def apply(self, batch, mode: str) -> pa.Table:
        """Apply a :class:`QueryChange` or an update batch (rows in ``seq`` order); return the notifications
        for ``mode`` ('unicast', 'reformulated' or 'none')."""
        if isinstance(batch, MessageColumns):
            self.message_payload = tuple(tuple(cols) for cols in batch.payload)
            return self._empty(mode)
        if isinstance(batch, QueryChange):
            if len(batch.remove_ids):
                self._remove_queries(list(batch.remove_ids))
            if len(batch.add_ids):
                ids = np.asarray(batch.add_ids, dtype=object)
                self._add_queries(ids, batch.add_columns)
                self._add_outputs(ids, batch.add_outputs)
            if batch.output_types is not None:
                self.output_types = dict(batch.output_types)
            return self._empty(mode)
        # delete before insert within one seq (an upsert's two rows): Spark's sort does not keep their order
        batch = batch.sort_by([("seq", "ascending"), ("op", "descending")])
        sides = batch.column("j_side").to_numpy()
        ops = batch.column("op").to_numpy()
        seqs = batch.column("seq").to_numpy()
        d0 = int(sides[0]) if len(sides) else L
        cols = {c: batch.column(EVENT_PREFIX + c).to_pylist() for c in side_columns(self.sides[d0])}
        out = _Notifications(self)
        # a band join has no reformulated form: in that mode it answers with its unicast rows (issue 15 item 6)
        self._collect = mode == "reformulated" and self.kind == SELECT_JOIN
        emit = mode == "unicast" or (mode == "reformulated" and not self._collect)
        n = batch.num_rows
        i = 0
        while i < n:
            j = i + 1
            while j < n and seqs[j] == seqs[i]:
                j += 1
            self._seq = seq = int(seqs[i])
            if j - i == 1:  # one row for this update: its changes are already net
                d = int(sides[i])
                changes, sign, vals = self._one(d, ops[i], {c: cols[c][i] for c in cols})
                if changes and emit:
                    out.add(changes, sign, seq, d, vals)
            else:  # an upsert's delete + insert: a result tuple it keeps, with the same output, cancels out
                pending: dict = {}  # sub id -> Counter of (pair, output row) (+1 insert, -1 delete)
                rows: dict = {}     # (sub, pair, output row) -> the rows' payload values (left, right)
                for k in range(i, j):
                    d = int(sides[k])
                    changes, sign, vals = self._one(d, ops[k], {c: cols[c][k] for c in cols})
                    if not emit:
                        continue
                    for sub, pairs in changes.items():
                        counter = pending.setdefault(sub, Counter())
                        for pair in pairs:
                            lv, rv = self._pair_values(d, pair, vals)
                            # a kept pair whose selected columns changed leaves and re-enters (DESIGN §1)
                            ident = (pair, tuple(self.project(sub, lv, rv).items()))
                            counter[ident] += sign
                            rows[(sub, ident)] = (lv, rv)
                for sub, counter in pending.items():
                    for ident, net in counter.items():
                        if net:
                            out.add_one(sub, ident[0], net, seq, *rows[(sub, ident)])
            i = j
        return self._table(out, mode)

    def _one(self, d: int, op, row: dict) -> tuple[dict, int, tuple | None]:
        """Apply one row: ({subscription: pairs}, +1 for the pairs it adds / -1 for those it removes, the
        row's payload values as the pairs carry them: the old row's for a delete, the new one's for an insert)."""
        key = row[self.sides[d][1]]
        self.updates += 1
        if op == DELETE:
            if key in self.inert[d]:
                self.inert[d].discard(key)
                return {}, -1, None
            changes = self._delete(d, key)
            return changes, -1, self.values[d].pop(key, None)
        core_row = self._row(d, row)
        if core_row is None:
            self.inert[d].add(key)
            return {}, 1, None
        vals = self.values[d][key] = tuple(row[c] for c in self.payload[d])
        return self._insert(d, key, core_row), 1, vals

    def _pair_values(self, d: int, pair: tuple, vals) -> tuple:
        """(left, right) payload values of a result tuple of the incoming row of side ``d`` (values ``vals``)."""
        if d == L:
            return vals, self.values[R].get(pair[1])
        return self.values[L].get(pair[0]), vals

    def _empty(self, mode: str) -> pa.Table:
        return self._table(_Notifications(self), mode)

    _collect = False  # reformulated mode: the select-join group records its messages (000 §4)
    _seq = 0

    def _table(self, out: "_Notifications", mode: str) -> pa.Table:
        # (BAND_JOIN in 'reformulated' mode: its unicast rows, never nothing -- issue 15 item 6)
        self.notifications += len(out.subs)
        return out.table(self.group_id)

    # ---- reading ---------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        return {"class": self.kind, "partition": self.snap.partition_id, "subscriptions": len(self.sub_cols),
                "left_rows": self._size(L), "right_rows": self._size(R),
                "inert_rows": len(self.inert[L]) + len(self.inert[R]), "updates": self.updates,
                "notifications": self.notifications}



def _float_or_none(v):
    if v is None:
        return None
    f = float(v)
    return None if f != f else f


class SelectJoinGroup(_JoinGroup):
    """A SELECT_JOIN partition: the router (003 §4.5) over the select-join plans, per incoming tuple."""

    def _init_core(self) -> None:
        self.core = Router(self.snap.router_plans, mode=self.snap.router_mode, domains=self.snap.domains or None)
        self.messages: list = []

    def _sel(self, d: int):
        sel = self.sides[d][3]
        return sel[0] if sel else None

    def _row(self, d: int, row: dict):
        b = canonical_join_value(row[self.sides[d][2]], self.numeric_join)
        if b is None:
            return None
        col = self._sel(d)
        x = 0.0 if col is None else _float_or_none(row[col])  # no selection on this side: every row passes
        if x is None:
            return None
        return b, x

    def _load(self, rows) -> None:
        loaded = []
        for d in (L, R):
            table = rows[d]
            keys = table.get(self.sides[d][1], [])
            good = []
            for i, k in enumerate(keys):
                core_row = self._row(d, {c: v[i] for c, v in table.items()})
                if core_row is None:
                    self.inert[d].add(k)
                else:
                    good.append((k, core_row))
            loaded.append(good)
        self.core.load(r_rows=[(k, x, b) for k, (b, x) in loaded[L]],
                       s_rows=[(k, b, x) for k, (b, x) in loaded[R]])

    def _add_queries(self, ids, columns) -> None:
        if not len(ids):
            return
        c = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
        self.core.add_queries(zip(ids.tolist(), c["a_lo"].tolist(), c["a_hi"].tolist(), c["c_lo"].tolist(),
                                  c["c_hi"].tolist()))
        for j, i in enumerate(ids.tolist()):
            self.sub_cols[i] = (c["a_lo"][j], c["a_hi"][j], c["c_lo"][j], c["c_hi"][j])

    def _insert(self, d, key, core_row) -> dict:
        b, x = core_row
        if self._collect:  # reformulated: the messages are the output; nothing is routed (000 §4)
            self._reformulate(d, key, x, b, "insert")
            self.core.update("R" if d == L else "S", True, key, x, b)
            return {}
        return self.core.insert_r(key, x, b) if d == L else self.core.insert_s(key, b, x)

    def _delete(self, d, key) -> dict:
        if self._collect:
            x, b = self.core.tables.table(d).lookup(key)
            self._reformulate(d, key, x, b, "delete")
            self.core.update("R" if d == L else "S", False, key)
            return {}
        return self.core.delete_r(key) if d == L else self.core.delete_s(key)

    # 000 §4: δR becomes one message per result tuple of δR ⋈ S (δS symmetrically), whatever the subscriptions
    def _reformulate(self, d: int, key, x: float, b, op: str) -> None:
        run = self.core.tables.partner(d).runs.get(b)
        if run is None:
            return
        mine, partner = self.values[d].get(key), self.values[1 - d]
        for v, k in zip(run.xs, run.keys):
            lk, rk, lv, rv = (key, k, x, v) if d == L else (k, key, v, x)
            # the result tuple's selected columns travel with it: subscribers project them (DESIGN §1)
            lp, rp = (mine, partner.get(k)) if d == L else (partner.get(k), mine)
            self.messages.append((self._seq, op, key_text(lk), key_text(rk), lv, rv, lp, rp))

    def _table(self, out, mode: str) -> pa.Table:
        if mode != "reformulated":
            return super()._table(out, mode)
        msgs, self.messages = self.messages, []
        n = len(msgs)
        cols = list(zip(*msgs)) if msgs else [[] for _ in range(8)]
        self.notifications += n
        out = pa.table({
            "group_id": pa.array([self.group_id] * n, pa.string()),
            "seq": pa.array(list(cols[0]), pa.int64()), "op": pa.array(list(cols[1]), pa.string()),
            "left_key": pa.array(list(cols[2]), pa.string()), "right_key": pa.array(list(cols[3]), pa.string()),
            "left_value": pa.array(list(cols[4]), pa.float64()), "right_value": pa.array(list(cols[5]), pa.float64()),
            # a subscriber applies one seq's messages in this order, whatever a shuffle does to the rows
            "msg_no": pa.array(np.arange(n, dtype=np.int64)),
        }, schema=JOIN_MESSAGE_SCHEMA)
        for d, payload in ((L, cols[6]), (R, cols[7])):
            types = self.snap.payload_types
            for c in self.message_payload[d]:
                j = self._idx[d][c]
                name = message_column(self.sides[d][0], c)
                out = out.append_column(EVENT_PREFIX + name, _arrow_column([None if p is None else p[j] for p in payload],
                                                                         types.get((d, c))))
        return out

    def result(self, sub_id) -> list[tuple]:
        """The current result tuples (left key, right key) of ``sub_id`` in this partition (a scan of R)."""
        if sub_id not in self.sub_cols:
            raise UnknownSubscription(f"no subscription {sub_id!r}")
        return self.result_in(*self.sub_cols[sub_id])

    def result_in(self, a_lo: float, a_hi: float, c_lo: float, c_hi: float) -> list[tuple]:
        """The result tuples in this partition of the rectangle ``[a_lo, a_hi] × [c_lo, c_hi]`` (a scan of R): a
        sharded group's row partitions hold no subscription, so its reader passes the bounds (``ShardedJoinView``)."""
        out = []
        S = self.core.tables.S
        for rk, (a, b) in self.core.tables.R.rows.items():
            if not a_lo <= a <= a_hi:
                continue
            run = S.runs.get(b)
            if run is None:
                continue
            i, j = bisect_left(run.xs, c_lo), bisect_right(run.xs, c_hi)
            out.extend((rk, sk) for sk in run.keys[i:j])
        return out

    def _size(self, d: int) -> int:
        return len(self.core.tables.table(d))

    def stats(self) -> dict:
        s = self.core.stats()
        out = super().stats()
        out.update({"router_mode": s["mode"], "plans": s["plans"], "decisions": s["decisions"],
                    "recent": s["recent"], "hot_groups": s["hot_groups"]})
        for name, plan in self.core.plans.items():
            ps = plan.stats()
            if "hotspots" in ps:
                out["hotspots"] = ps["hotspots"]
                out["hot_queries"] = ps["hot_queries"]
                out["scattered_queries"] = ps["scattered_queries"]
        return out


class BandJoinGroup(_JoinGroup):
    """A BAND_JOIN partition: BJ-SSI (003 §4.3.1) over the bands; local selections as per-query filters."""

    def _init_core(self) -> None:
        self.core = BJSSI()

    def _row(self, d: int, row: dict):
        b = _float_or_none(row[self.sides[d][2]])
        if b is None:
            return None
        attrs = {c: _float_or_none(row[c]) for c in self.sides[d][3]}
        return b, attrs

    def _load(self, rows) -> None:
        for d in (L, R):
            table = rows[d]
            good = []
            for i, k in enumerate(table.get(self.sides[d][1], [])):
                core_row = self._row(d, {c: v[i] for c, v in table.items()})
                if core_row is None:
                    self.inert[d].add(k)
                else:
                    good.append((k, core_row[0], core_row[1] or None))
            (self.core.load_r if d == L else self.core.load_s)(good)

    @staticmethod
    def _where(columns: dict, j: int, d: int) -> dict | None:
        """Subscription ``j``'s local selection on side ``d``: only the columns it selects on (a NaN end is
        :data:`NO_SELECTION`: another template's column, which this subscription does not read)."""
        prefix = "L:" if d == L else "R:"
        where = {}
        for name, v in columns.items():
            if name.startswith(prefix) and name.endswith(":lo") and not math.isnan(v[j]):
                col = name[2:-3]
                where[col] = (float(v[j]), float(columns[f"{prefix}{col}:hi"][j]))
        return where or None

    def _add_queries(self, ids, columns) -> None:
        if not len(ids):
            return
        c = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
        rows = []
        for j, i in enumerate(ids.tolist()):
            rows.append((i, float(c["lo"][j]), float(c["hi"][j]), self._where(c, j, L), self._where(c, j, R)))
            self.sub_cols[i] = True
        if len(rows) == 1:
            i, lo, hi, rw, sw = rows[0]
            self.core.add_query(i, lo, hi, r_where=rw, s_where=sw)
        else:
            self.core.add_queries(rows)

    def _insert(self, d, key, core_row) -> dict:
        b, attrs = core_row
        attrs = attrs or None
        return self.core.insert_r(key, b, attrs) if d == L else self.core.insert_s(key, b, attrs)

    def _delete(self, d, key) -> dict:
        return self.core.delete_r(key) if d == L else self.core.delete_s(key)

    def result(self, sub_id) -> list[tuple]:
        return self.core.result(sub_id)

    def _size(self, d: int) -> int:
        return len(self.core.r_index if d == L else self.core.s_index)

    def stats(self) -> dict:
        out = super().stats()
        part = self.core.partition
        out.update({"algorithm": self.core.name, "stabbing_groups": part.stabbing_number,
                    "stabbing_points": [round(p, 6) for p, _ in part.stabbing_points()[:8]],
                    **{f"bj_{k}": v for k, v in self.core.counters.items()}})
        return out


# ---- the subscriber side of the reformulated form (000 §4) ------------------------------------------------------
class JoinSubscribers:
    """The network and the subscribers of a select-join group: each subscription is the stateless predicate
    ``a_lo <= left_value <= a_hi AND c_lo <= right_value <= c_hi`` (000 §4: p ∧ pR ∧ pS; the join predicate
    holds by construction).  ``deliver(messages)`` -> the unicast rows (net per subscription, seq and output
    row), each with its subscription's selected columns (``outputs[i]``: ``((name, side, column), ...)``) taken
    from the message's ``table.column`` values (:func:`message_column`; ``tables``: R's and S's names)."""

    def __init__(self, group_id: str, ids: np.ndarray, columns: dict, outputs=(), tables=("", ""),
                 output_types: dict | None = None):
        self.group_id = group_id
        self.ids = np.asarray(ids, dtype=object)
        self.bounds = np.stack([np.asarray(columns[k], dtype=np.float64)
                                for k in ("a_lo", "a_hi", "c_lo", "c_hi")], axis=1) if len(ids) else np.zeros((0, 4))
        self.outputs = list(outputs) if len(outputs) else [()] * len(self.ids)
        self.tables = tables
        self.output_types = dict(output_types or {})

    def deliver(self, messages: pa.Table) -> pa.Table:
        t = messages.sort_by([("seq", "ascending"), ("msg_no", "ascending")])
        lv = t.column("left_value").to_numpy(zero_copy_only=False)
        rv = t.column("right_value").to_numpy(zero_copy_only=False)
        lk, rk = t.column("left_key").to_pylist(), t.column("right_key").to_pylist()
        ops, seqs = t.column("op").to_pylist(), t.column("seq").to_numpy()
        payload: dict = {}  # (side, column) -> the messages' values (None when the messages lack it)
        for proj in self.outputs:
            for _, d, col in proj:
                if (d, col) not in payload:
                    name = message_column(self.tables[d], col)
                    payload[(d, col)] = t.column(name).to_pylist() if name in t.column_names else [None] * t.num_rows
        lo_a, hi_a, lo_c, hi_c = (self.bounds[:, i] for i in range(4))
        out = []
        pending: dict = {}
        current = None
        for i in range(t.num_rows):
            if seqs[i] != current:
                _emit(pending, current, self.group_id, out)
                current = seqs[i]
            # every subscription tests the message: what a content-based network's matching does
            hit = np.flatnonzero((lo_a <= lv[i]) & (lv[i] <= hi_a) & (lo_c <= rv[i]) & (rv[i] <= hi_c))
            sign = 1 if ops[i] == "insert" else -1
            for s in hit.tolist():
                row = tuple((name, payload[(d, col)][i]) for name, d, col in self.outputs[s])
                pending.setdefault(self.ids[s], Counter())[(lk[i], rk[i], row)] += sign
        _emit(pending, current, self.group_id, out)
        cols = list(zip(*out)) if out else [[] for _ in range(len(_UNICAST_COLUMNS) + 1)]
        table = {c: pa.array(list(v), pa.int64() if c == "seq" else pa.string())
                 for c, v in zip(_UNICAST_COLUMNS, cols)}
        rows = cols[len(_UNICAST_COLUMNS)]
        selected: dict = {}
        for i, row in enumerate(rows):
            for name, v in row:
                column = selected.get(name)
                if column is None:   # (not setdefault: its default would be built for every row)
                    column = selected[name] = [None] * len(rows)
                column[i] = v
        for name, vals in selected.items():
            # a selected column named as one of ours comes out as ``event_<name>``, as in publish's output
            table[name if name not in table else f"event_{name}"] = _arrow_column(vals, self.output_types.get(name))
        return pa.table(table)


def _emit(pending: dict, seq, group_id: str, out: list) -> None:
    for sub, counter in pending.items():
        for (lk, rk, row), n in counter.items():
            if n:
                out.append((sub, "insert" if n > 0 else "delete", int(seq), group_id, lk, rk, row))
    pending.clear()


def stabbing_numbers(columns: dict, kind: str) -> dict:
    """τ of the subscriptions' ranges (003 §4.2.1): the C (S-side) and A ranges of a select-join group, the
    bands of a band-join group — what EXPLAIN reports beside the partitions' live statistics."""
    def tau(lo, hi):
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        return stabbing_number(list(zip(lo.tolist(), hi.tolist()))) if lo.size else 0
    if kind == SELECT_JOIN:
        return {"stabbing_number_c": tau(columns["c_lo"], columns["c_hi"]),
                "stabbing_number_a": tau(columns["a_lo"], columns["a_hi"])}
    return {"stabbing_number_band": tau(columns["lo"], columns["hi"])}


class _RowPartitionReader:
    """A sharded group's row partition (no subscriptions) read for one subscription: its bounds and projection come
    from the registry (``ShardedJoinView``)."""

    def __init__(self, group: SelectJoinGroup, bounds_of, outputs_of, subscriptions: int):
        self.group, self._bounds_of, self._outputs_of, self._subscriptions = group, bounds_of, outputs_of, subscriptions

    def result_rows(self, sub_id) -> list[tuple[tuple, dict]]:
        g = self.group
        vl, vr = g.values
        proj = self._outputs_of(sub_id)
        idx = g._idx

        def project(left, right):
            vals = (left, right)
            return {name: (None if vals[d] is None else vals[d][idx[d][col]]) for name, d, col in proj}
        return [(pair, project(vl.get(pair[0]), vr.get(pair[1]))) for pair in g.result_in(*self._bounds_of(sub_id))]

    def stats(self) -> dict:
        out = self.group.stats()
        out["subscriptions"] = self._subscriptions   # the group's (held by the shards, not by this partition)
        out["partition_subscriptions"] = len(self.group.sub_cols)
        return out


class ShardedJoinView(dict):
    """A sharded SELECT_JOIN group as ``result()``, ``stats()`` and EXPLAIN read it: its row partitions (replica id
    -> reader), which hold no subscription, and ``shards`` (per subscription shard: its subscriptions).  The
    subscriptions' bounds and projections are the registry's (``bounds_of``, ``outputs_of``)."""

    def __init__(self, partitions: dict, bounds_of, outputs_of, subscriptions: int, shards: list):
        super().__init__({rid: _RowPartitionReader(g, bounds_of, outputs_of, subscriptions)
                          for rid, g in partitions.items()})
        self.shards = shards


class JoinGroupView:
    """A join group as a whole (all its partitions, materialised in the driver): what EXPLAIN and
    ``engine.stats()`` show — the stabbing numbers, hotspots, the plans, the router's decisions and recent
    choices, the partitioning."""

    def __init__(self, kind: str, group_id: str, partitions: dict, columns: dict, layout: dict):
        self.kind, self.group_id, self.partitions, self.columns, self.layout = kind, group_id, partitions, columns, layout
        #: a sharded group's subscription shards (``ShardedJoinView``), else None
        self.shards = getattr(partitions, "shards", None)

    def stats(self) -> dict:
        parts = [g.stats() for g in self.partitions.values()]
        first = parts[0] if parts else {}
        out = {"class": self.kind, "partitions": len(parts),
               "subscriptions": first.get("subscriptions", 0),
               "left_rows": sum(p["left_rows"] for p in parts), "right_rows": sum(p["right_rows"] for p in parts),
               "updates": sum(p["updates"] for p in parts),
               "notifications": sum(p["notifications"] for p in parts),
               **stabbing_numbers(self.columns, self.kind)}
        if self.kind == SELECT_JOIN:
            decisions = Counter()
            for p in parts:
                decisions.update(p["decisions"])
            out.update({"router_mode": first.get("router_mode"), "plans": first.get("plans"),
                        "decisions": dict(decisions),
                        "recent": [c for p in parts for c in p["recent"]][-10:],
                        # every partition holds every subscription: the same hotspots in each
                        "hotspots": first.get("hotspots", (0, 0)),
                        "hot_queries": first.get("hot_queries"), "scattered_queries": first.get("scattered_queries")})
            if self.shards is not None:
                out["subscription_shards"] = len(self.shards)
                out["shards"] = list(self.shards)
                out["partition_subscriptions"] = [p.get("partition_subscriptions", 0) for p in parts]
        else:
            out.update({"stabbing_groups": [p["stabbing_groups"] for p in parts],
                        "pairs_found": sum(p.get("bj_pairs", 0) for p in parts)})
        return out

    def explain(self) -> dict:
        s = self.stats()
        lay = self.layout
        if self.kind == SELECT_JOIN:
            total = sum(s["decisions"].values()) or 1
            share = ", ".join(f"{k} {v} ({v / total:.0%})" for k, v in sorted(s["decisions"].items())) or "none yet"
            return {
                "algorithm": f"per-tuple plan routing (003 §4.5), mode {s['router_mode']}, over {', '.join(s['plans'])}"
                             " (SJ-Hotspot: SJ-SSI on the α-hotspots, SJ-SelectFirst on the scattered queries, "
                             "003 §4.3.2)",
                "cost model": "003 §4.5.1 formulas, coefficients fitted on this machine (sparksub calibrate-router)",
                "indexes": "per table a B-tree on (join value, selection value); per plan its query index "
                           "(R-tree of rectangles, priority-search index of the own ranges, SSI per stabbing group)",
                "stabbing number": f"C ranges τ = {s['stabbing_number_c']}, A ranges τ = {s['stabbing_number_a']} "
                                   "(canonical partition, 003 Lemma 10)",
                "hotspots": f"α-hotspot groups for R tuples {s['hotspots'][L]}, for S tuples {s['hotspots'][R]}; "
                            f"hot / scattered queries per direction {s['hot_queries']} / {s['scattered_queries']}",
                "partitions": (f"{s['partitions']} row partitions × {s['subscription_shards']} subscription shards: "
                               f"rows by a hash of the join value, no subscription in them (stage 1: the messages of "
                               f"000 §4); subscriptions by a hash of their id "
                               f"({', '.join(str(x['subscriptions']) for x in s['shards'])}), each shard an R-tree of "
                               f"its rectangles probed with the messages' points (stage 2, unicast)")
                if self.shards is not None else
                f"{s['partitions']}, by a hash of the join value; each holds every subscription (its SSI replicated)",
                "router decisions": share,
                "router recent choices": " ".join(f"{side}:{plan}" for side, plan in s["recent"]) or "-",
                "rows": f"left {s['left_rows']}, right {s['right_rows']}",
                "message format (reformulated)": "<op, left_key, right_key, left_value, right_value> per result "
                                                 "tuple of δ ⋈ partner (000 §4)",
                "reformulated predicate": "a_lo <= left_value <= a_hi AND c_lo <= right_value <= c_hi",
                "notifications": "one row per (subscription, result tuple) that enters (insert) or leaves (delete)",
            }
        cuts = lay.get("cuts", np.zeros(0))
        return {
            "algorithm": "BJ-SSI (003 §4.3.1, Theorem 14): per stabbing group one lookup at p_j + b, two scans, a "
                         "walk of the partner index; local selections as per-query filters",
            "indexes": "per table a B-tree on the join value; per stabbing group the bands by left end and by "
                       "right end; a dynamic (1+ε) stabbing partition (003 §4.2.3)",
            "stabbing number": f"bands τ = {s['stabbing_number_band']} (canonical); groups per partition "
                               f"{s['stabbing_groups']}",
            "partitions": f"{s['partitions']}, S by ranges of the join value (cuts {np.round(cuts, 6).tolist()}), "
                          f"R replicated over the widest band {lay.get('reach')}",
            "rows": f"left {s['left_rows']} (with replicas), right {s['right_rows']}",
            "notifications": "one row per (subscription, result tuple) that enters (insert) or leaves (delete)",
        }


class JoinGroupDescription:
    """EXPLAIN's operator section for a join SELECT that has no group yet (nothing registered): the plan it
    would run, without live figures."""

    def __init__(self, kind: str):
        self.kind = kind

    def explain(self) -> dict:
        if self.kind == SELECT_JOIN:
            return {"algorithm": f"per-tuple plan routing (003 §4.5) over {', '.join(PAPER_PLANS)}",
                    "partitions": "by a hash of the join value; each holds every subscription",
                    "message format (reformulated)": "<op, left_key, right_key, left_value, right_value> (000 §4)",
                    "reformulated predicate": "a_lo <= left_value <= a_hi AND c_lo <= right_value <= c_hi"}
        return {"algorithm": "BJ-SSI (003 §4.3.1, Theorem 14) over a dynamic stabbing partition of the bands",
                "partitions": "S by ranges of the join value, R replicated over the widest band"}
