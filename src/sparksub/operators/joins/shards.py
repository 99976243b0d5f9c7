"""SELECT_JOIN's subscription side split into shards: the second stage of a sharded select-join group (issue 16
item 4).  Pure (numpy, pyarrow; no pyspark).

A sharded SELECT_JOIN group runs in two stages (``control/join_shards.py``, ``runtime/join_shards.py``):

1. **Row partitions** (stage 1): R and S rows by a hash of the join value (``group.join_value_partition``), as
   the whole group's partitions, but holding **no subscription**.  Each update δ meets its join partners there
   and yields the reformulated messages of 000 §4 (``group.JOIN_MESSAGE_SCHEMA``: one per result tuple of
   δ ⋈ partner, an upsert as the delete of the old row and the insert of the new with one seq).  Their number
   does not depend on the subscriptions, so the partitions never change when subscriptions do.  In
   ``reformulated`` mode these messages are the output.
2. **Subscription shards** (stage 2, unicast): the subscriptions split by a CRC32 of their id
   (:func:`subscription_shard`).  A shard (:class:`JoinShard`) indexes its subscriptions' rectangles
   ``[c_lo, c_hi] × [a_lo, a_hi]`` in the R-tree of SJ-JoinFirst-E (``select.RectIndex``: 003 §4.3.2 and
   §4.5.1, Theorem 15 -- "probe a 2-d index over all query rectangles with each join result point"), probes it
   with every message's point ``(right_value, left_value)`` -- the stateless predicate ``a_lo <= left_value <=
   a_hi AND c_lo <= right_value <= c_hi`` of :class:`~sparksub.operators.joins.group.JoinSubscribers`, without a
   scan over the subscriptions -- and nets each (seq, subscription, result tuple, output row), as the whole
   group's unicast does per update.  The union of the shards' rows is the whole group's unicast output, row for
   row.

Why a hash of the id, not ranges of one selection: a shard's share of the subscriptions and (in expectation) of
the output is 1/Q whatever the workload -- ranges of R.a or S.c would put a hotspot (003 §4.6.3) in one shard --
and a subscription added or dropped touches exactly the shard its id hashes to, with no cut points to keep
balanced.  What it costs: every shard reads every message of the batch (a shard cannot skip a message by its
point); the messages are few beside the unicast rows (their number does not grow with the subscriptions), and
the R-tree's leaf test rejects a message in a shard in one vectorised comparison.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.joins.group import (
    _UNICAST_COLUMNS,
    _arrow_column,
    _RowPartitionReader,
    message_column,
)
from sparksub.operators.joins.select import RectIndex, _Queries
from sparksub.operators.shared.schemas import EVENT_PREFIX

__all__ = ["SHARD_MESSAGES_CHUNK", "JoinShard", "JoinShardBase", "RowPartitionsInPlace", "partition_result_rows",
           "partition_stats", "shard_bases", "subscription_shard"]

#: messages probed at once (the R-tree's leaf test is a leaves × messages matrix)
SHARD_MESSAGES_CHUNK = 2048


def subscription_shard(ids, shards: int) -> np.ndarray:
    """The shard of each subscription id: a CRC32 of its text (the same in every process), modulo ``shards``."""
    if shards <= 1:
        return np.zeros(len(ids), dtype=np.int64)
    return np.fromiter((zlib.crc32(str(i).encode("utf-8")) % shards for i in ids), dtype=np.int64, count=len(ids))


@dataclass
class JoinShardBase:
    """One subscription shard of a SELECT_JOIN group (a replica's base): its subscriptions' ids, rectangles
    (columns a_lo, a_hi, c_lo, c_hi), projections (``((name, side, column), ...)`` each, DESIGN §1), the
    output columns' types, and the two tables' names (a message carries a selected column as ``table.column``)."""

    group_id: str
    shard: int
    ids: np.ndarray
    bounds: np.ndarray           # (n, 4): a_lo, a_hi, c_lo, c_hi
    outputs: list
    output_types: dict = field(default_factory=dict)
    tables: tuple = ("", "")
    stateless = True

    def __len__(self) -> int:
        return len(self.ids)

    def build(self) -> JoinShard:
        return JoinShard(self)


def shard_bases(group_id: str, ids: np.ndarray, columns: dict, outputs: list, output_types: dict, tables: tuple,
                shards: int, only=None) -> dict:
    """``{shard: JoinShardBase}`` of the live subscriptions ``ids`` (``columns``: a_lo, a_hi, c_lo, c_hi;
    ``outputs``: their projections, in ``ids`` order); ``only``: just those shards."""
    ids = np.asarray(ids, dtype=object)
    which = subscription_shard(ids.tolist(), shards)
    bounds = np.stack([np.asarray(columns[k], dtype=np.float64) for k in ("a_lo", "a_hi", "c_lo", "c_hi")],
                      axis=1) if len(ids) else np.zeros((0, 4))
    outs = list(outputs) if len(outputs) else [()] * len(ids)
    out = {}
    for j in range(max(1, shards)):
        if only is not None and j not in only:
            continue
        mine = np.flatnonzero(which == j)
        out[j] = JoinShardBase(group_id, j, ids[mine], bounds[mine], [outs[i] for i in mine.tolist()],
                               dict(output_types), tuple(tables))
    return out


class JoinShard:
    """A shard's subscriptions indexed for stage 2 (module docstring): ``unicast(messages)`` -> the unicast rows
    of its subscriptions, in the partitions' form (``subscription_id, op, seq, group_id, left_key, right_key``
    and each selected column under EVENT_PREFIX)."""

    stateless = True

    def __init__(self, base: JoinShardBase):
        self.base = base
        self.group_id = base.group_id
        self.ids = np.asarray(base.ids, dtype=object)
        self.outputs = base.outputs
        q = _Queries()
        for i, (a_lo, a_hi, c_lo, c_hi) in enumerate(base.bounds.tolist()):
            q.add(i, a_lo, a_hi, c_lo, c_hi)    # slot i = row i of the base (bounds checked when subscribed)
        self.queries = q
        self.index = RectIndex.of(q)
        # the distinct projections, and each subscription's (output columns are built per projection)
        self.projections: list = []
        seen: dict = {}
        self.projection_of = np.fromiter((seen.setdefault(p, len(seen)) for p in map(tuple, self.outputs)),
                                         dtype=np.int64, count=len(self.outputs))
        self.projections = list(seen)
        self.counters = {"index_probes": 0, "nodes_visited": 0, "queries_visited": 0, "rebuilds": 0}
        self.messages = 0
        self.notifications = 0

    def __len__(self) -> int:
        return len(self.ids)

    def apply(self, batch, mode: str):   # a shard has no log (a subscription change gives it a new base)
        raise TypeError("a subscription shard takes no log entries")

    def match(self, messages: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """``(message row, subscription slot)`` of every subscription whose rectangle holds a message's point
        (003 §4.3.2: the join result point (s.c, r.a) = (right_value, left_value))."""
        n = messages.num_rows
        if not n or not len(self.ids):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        px = messages.column("right_value").to_numpy(zero_copy_only=False).astype(np.float64)
        py = messages.column("left_value").to_numpy(zero_copy_only=False).astype(np.float64)
        parts_p, parts_s = [], []
        for start in range(0, n, SHARD_MESSAGES_CHUNK):
            p, s = self.index.stab(px[start:start + SHARD_MESSAGES_CHUNK], py[start:start + SHARD_MESSAGES_CHUNK],
                                   self.counters)
            parts_p.append(p + start)
            parts_s.append(s)
        return np.concatenate(parts_p), np.concatenate(parts_s)

    def unicast(self, messages: pa.Table) -> pa.Table:
        """The unicast rows of this shard's subscriptions for ``messages`` (every row partition's, one batch)."""
        self.messages += messages.num_rows
        p, s = self.match(messages)
        if p.size:   # rows by (message, subscription): the output follows the messages' order
            order = np.lexsort((s, p))
            p, s = p[order], s[order]
        sign = np.where(pc.equal(messages.column("op"), "insert").to_numpy(zero_copy_only=False), 1, -1) \
            if messages.num_rows else np.empty(0, dtype=np.int64)
        seq = messages.column("seq").to_numpy(zero_copy_only=False)
        lk = messages.column("left_key")
        rk = messages.column("right_key")
        # net change per (seq, subscription, result tuple, output row), as the whole group's unicast nets an
        # upsert's delete + insert: a pair can only repeat within one seq when the upsert keeps it
        values = self._selected(messages, p, s)
        keep = np.ones(p.size, dtype=bool)
        op = sign[p] if p.size else np.empty(0, dtype=np.int64)
        if p.size:
            pair = pc.binary_join_element_wise(pc.cast(pa.array(seq, pa.int64()), pa.string()), lk, rk, "\x1f")
            pair_no = pc.index_in(pair, pc.unique(pair)).to_numpy(zero_copy_only=False).astype(np.int64)
            key = pair_no[p] * max(len(self.ids), 1) + s
            _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
            if (counts > 1).any():
                op = op.copy()
                for k in np.flatnonzero(counts > 1).tolist():
                    rows = np.flatnonzero(inverse == k)
                    net: dict = {}
                    for r in rows.tolist():
                        ident = tuple(v[r].as_py() for v in values.values()) if values else ()
                        net.setdefault(ident, []).append(r)
                    for ident, rs in net.items():
                        total = int(sum(op[r] for r in rs))
                        keep[rs] = False
                        if total:
                            keep[rs[0]] = True
                            op[rs[0]] = 1 if total > 0 else -1
        p, s, op = p[keep], s[keep], op[keep]
        n = int(p.size)
        self.notifications += n
        pidx = pa.array(p, pa.int64())
        out = {"subscription_id": pa.array(self.ids[s].tolist() if n else [], pa.string()),
               "op": pa.array(np.where(op > 0, "insert", "delete").tolist() if n else [], pa.string()),
               "seq": pa.array(seq[p] if n else np.empty(0, dtype=np.int64), pa.int64()),
               "group_id": pa.array([self.group_id] * n, pa.string()),
               "left_key": lk.take(pidx), "right_key": rk.take(pidx)}
        assert tuple(out)[:6] == _UNICAST_COLUMNS
        for name, vals in values.items():
            out[EVENT_PREFIX + name] = vals.filter(pa.array(keep))
        return pa.table(out)

    def _selected(self, messages: pa.Table, p: np.ndarray, s: np.ndarray) -> dict:
        """Output name -> the selected column's values for each matched (message, subscription): a message
        carries the result tuple's columns as ``table.column`` (``group.message_column``); a subscription whose
        projection lacks the name gets null (as the whole group's rows)."""
        names: dict = {}
        for k, proj in enumerate(self.projections):
            for name, d, col in proj:
                names.setdefault(name, []).append((k, d, col))
        if not names or not p.size:
            return {name: pa.nulls(int(p.size), self.base.output_types.get(name, pa.null())) for name in names} \
                if names else {}
        pk = self.projection_of[s]
        out = {}
        for name, uses in names.items():
            typ = self.base.output_types.get(name)
            pieces, positions = [], []
            for k, d, col in uses:
                rows = np.flatnonzero(pk == k)
                if not rows.size:
                    continue
                column = EVENT_PREFIX + message_column(self.base.tables[d], col)
                src = messages.column(column) if column in messages.column_names else \
                    pa.nulls(messages.num_rows, typ or pa.null())
                taken = src.take(pa.array(p[rows], pa.int64()))
                taken = taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken
                if typ is not None and taken.type != typ:
                    taken = _arrow_column(taken.to_pylist(), typ)    # text of a number as the rows print it
                pieces.append(taken)
                positions.append(rows)
            covered = np.concatenate(positions) if positions else np.empty(0, dtype=np.int64)
            rest = np.setdiff1d(np.arange(p.size), covered, assume_unique=True)
            if rest.size:
                pieces.append(pa.nulls(int(rest.size), typ or (pieces[0].type if pieces else pa.null())))
                positions.append(rest)
            full = pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
            where = np.concatenate(positions)
            inv = np.empty_like(where)
            inv[where] = np.arange(where.size)
            out[name] = full.take(pa.array(inv, pa.int64()))
        return out

    def stats(self) -> dict:
        return {"shard": self.base.shard, "subscriptions": len(self.ids), "messages": self.messages,
                "notifications": self.notifications, **self.counters}


# ---- a sharded group read where its row partitions live (issue 16 item 3) -----------------------------------------
def partition_result_rows(partition, bounds: tuple, projection: tuple) -> list[tuple[tuple, dict]]:
    """In the row partition's task: its part of the result of the subscription with ``bounds`` (a_lo, a_hi, c_lo,
    c_hi) and ``projection`` -- the partition holds no subscription, so the driver sends both (as
    ``ShardedJoinView`` reads a partition on the driver)."""
    return _RowPartitionReader(partition, lambda _: bounds, lambda _: projection, 0).result_rows(None)


def partition_stats(partition, subscriptions: int) -> dict:
    """In the row partition's task: its stats as ``ShardedJoinView`` gives them (``subscriptions``: the group's)."""
    return _RowPartitionReader(partition, None, None, subscriptions).stats()


class RowPartitionsInPlace(dict):
    """A sharded SELECT_JOIN group too large to build on the driver, as ``result()``, ``stats()`` and EXPLAIN read
    it: ``ShardedJoinView``'s shape -- replica id -> a row partition's reader, and ``shards`` -- but each read runs
    where the partitions live.  ``each(function, args)`` gives ``function(partition, *args)`` of every row
    partition in ``replica_ids`` order, in one call (``runtime/remote.py``: one job, one placed task per
    partition); the first reader asked makes the call and its siblings hand out their parts of it, so a
    subscription's result is one job, and the driver holds the answers, never a partition."""

    def __init__(self, replica_ids, each, bounds_of, outputs_of, subscriptions: int, shards: list):
        super().__init__({rid: _PartitionInPlace(self, i) for i, rid in enumerate(replica_ids)})
        self.shards = shards
        self._each, self._bounds_of, self._outputs_of, self._subscriptions = each, bounds_of, outputs_of, subscriptions
        self._last: tuple = (None, None)     # (what was read, every partition's part): the last read only

    def _part(self, what: tuple, function, args: tuple, i: int):
        if self._last[0] != what:
            self._last = (what, self._each(function, args))
        return self._last[1][i]

    def result_rows(self, sub_id, i: int) -> list[tuple[tuple, dict]]:
        return self._part(("result", sub_id), partition_result_rows,
                          (self._bounds_of(sub_id), tuple(self._outputs_of(sub_id))), i)

    def stats(self, i: int) -> dict:
        return self._part(("stats",), partition_stats, (self._subscriptions,), i)


class _PartitionInPlace:
    """One row partition of :class:`RowPartitionsInPlace`: its part of the group's read."""

    def __init__(self, group: RowPartitionsInPlace, i: int):
        self._group, self._i = group, i

    def result_rows(self, sub_id) -> list[tuple[tuple, dict]]:
        return self._group.result_rows(sub_id, self._i)

    def stats(self) -> dict:
        return self._group.stats(self._i)
