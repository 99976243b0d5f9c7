"""The rows of a sharded RANGE_AGG group split into X zones (issue 16 item 4): the pure parts.  Pure (numpy,
pyarrow; no pyspark).

A sharded range group (``shared/range_shards.py``) runs its rows as the group's operator holding no
subscription, whose reformulated messages the subscription shards apply.  Past ``Engine.range_zones`` rows those
rows are themselves split along X, as DS-CN places tuples on the diagonal (000 §2.3.2): zone ``i`` owns the rows
with ``cuts[i-1] <= x < cuts[i]`` (equal-count cut points, ``range_min.zones.equal_count_cuts``), one replica and
one Spark task each.

Why aggregates split with no second round: a RANGE_AGG message is ``⟨X, D_COUNT, D_SUM⟩`` at the update's old or
new X (000 §4), computed from that X's own tuples only, so the zone owning X alone emits it.  An X-move across a
boundary is the old zone's delete (``⟨x_o, -1, -y_o⟩``) and the new zone's insert (``⟨x_n, +1, y_n⟩``): the two
messages the whole group's core emits for it.  (RANGE_DISTINCT's Mar reads the nearest tuple of the same value,
which may sit in another zone: its zones (``distinct/zones.py``) run this round, then a second one that closes the
open Mar ends, as RANGE_MIN's DS-CN has one.  Top-k's painting reads the k-th better neighbour: its rows run
whole.)

* :func:`zone_batch` -- a zone's part of the group's whole batch, built in the zone alone (every zone task reads
  the whole batch, as ``range_min.zones.route_zone``: a zone knows the keys it holds, so no key -> X directory
  exists anywhere): an upsert at an X the zone owns as is; a delete, a NULL, or an upsert elsewhere of a key the
  zone holds as a delete.
* :class:`RowsZone` -- one zone's operator: the class's group over the zone's rows, whose ``apply`` routes the
  batch first and tags each message with its part of the update (0: a delete half, 1: the rest).
* :func:`merge_zone_messages` -- the zones' messages as the whole group emits them: by seq, a move's delete half
  before its insert half (the order of the core's two messages), ``msg_no`` numbered anew.
* :class:`ZonedRows` -- the zones together as the rows' operator is read (``result_of``, ``shard_seed``,
  ``stats``, EXPLAIN): each zone's exact partial state merged by the class (``AggGroup.merge_seeds``), local
  operators or remote ones alike (``partials``: how each zone's ``shard_seed`` is asked).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.range_min.zones import equal_count_cuts
from sparksub.operators.shared.range_classes import RangeClassSnapshot, batch_columns, is_null
from sparksub.operators.shared.schemas import DELETE, UPSERT  # noqa: F401 - UPSERT: the doctest

__all__ = [
    "HALO_CLASSES",
    "PART_COLUMN",
    "SECOND_ROUND_CLASSES",
    "ZONED_ROWS_CLASSES",
    "RowsZone",
    "RowsZoneSnapshot",
    "ZonedRows",
    "merge_zone_messages",
    "with_halves",
    "zone_batch",
    "zone_bounds",
    "zone_cuts",
    "zone_rows",
    "zones_layout",
]

#: the classes whose rows split into X zones (module docstring): RANGE_AGG with no second round, RANGE_DISTINCT
#: with one (``distinct/zones.py``: ``SECOND_ROUND_CLASSES``), RANGE_TOPK with a halo of its neighbours per zone
#: (``topk/zones.py``: ``HALO_CLASSES``)
ZONED_ROWS_CLASSES = ("RANGE_AGG", "RANGE_DISTINCT", "RANGE_TOPK")
#: the zoned classes whose messages' open ends a second job over the zones closes (``distinct/zones.py``)
SECOND_ROUND_CLASSES = ("RANGE_DISTINCT",)
#: the zoned classes whose zones read their neighbours' edge objects, written by a job before theirs
HALO_CLASSES = ("RANGE_TOPK",)
#: a zone's messages carry their part of the update until they are merged (:func:`merge_zone_messages`)
PART_COLUMN = "_part"


def zone_cuts(xs, n_zones: int) -> tuple:
    """Equal-count cut points of the rows' X (NULLs ignored; fewer zones when values repeat).

    >>> zone_cuts([5.0, 1.0, 3.0, float("nan"), 2.0, 4.0, 6.0], 2)
    (4.0,)
    """
    return tuple(float(c) for c in equal_count_cuts(np.asarray(xs, dtype=np.float64), n_zones))


def zone_rows(keys, xs, ys, cuts: Sequence[float], zone: int):
    """The rows zone ``zone`` owns (``cuts[zone-1] <= x < cuts[zone]``); a row with a NULL X is in no range and
    held by no zone (the group's core does not hold it either)."""
    xs = np.asarray(xs, dtype=np.float64)
    lo, hi = zone_bounds(cuts, zone)
    mine = np.flatnonzero((xs >= lo) & (xs < hi))
    return np.asarray(keys, dtype=object)[mine], xs[mine], np.asarray(ys)[mine]


def zone_bounds(cuts: Sequence[float], zone: int) -> tuple[float, float]:
    """Zone ``zone``'s X interval ``[lo, hi)`` at ``cuts`` (the first zone from -inf, the last to +inf)."""
    lo = -np.inf if zone == 0 else float(cuts[zone - 1])
    hi = np.inf if zone == len(cuts) else float(cuts[zone])
    return lo, hi


def _null_row(x, y) -> bool:
    # the group's rule (range_classes.RangeClassGroup.apply): a NULL X or Y is in no range, the row is deleted
    return x is None or x != x or is_null(y)


def zone_batch(batch: pa.Table, lo: float, hi: float, holds: Callable, text: bool = False) -> tuple[pa.Table, set]:
    """A zone's part of the group's whole batch (``key, x, y, op, seq`` in seq order), and the seqs of the
    delete halves it took (an X-move out of the zone, or a delete / NULL of a key it holds).  ``holds(key)``:
    whether the zone held the key before the batch.

    >>> b = pa.table({"key": [1, 2, 1], "x": [5.0, 1.0, 9.0], "y": [0.0, 1.0, 2.0],
    ...               "op": pa.array([UPSERT] * 3, pa.int8()), "seq": [7, 8, 9]})
    >>> part, deletes = zone_batch(b, 0.0, 6.0, lambda k: False)
    >>> part.column("key").to_pylist(), part.column("op").to_pylist() == [UPSERT, UPSERT, DELETE], sorted(deletes)
    ([1, 2, 1], True, [9])
    """
    cols = batch_columns(batch, text=text)
    held: dict = {}
    take: list[int] = []
    as_delete: list[bool] = []
    deletes: set = set()
    for i, (key, x, y, op, seq) in enumerate(zip(cols["key"], cols["x"], cols["y"], cols["op"], cols["seq"])):
        had = held[key] if key in held else holds(key)
        mine = op != DELETE and not _null_row(x, y) and lo <= x < hi
        if mine:
            take.append(i)
            as_delete.append(False)
        elif had:
            take.append(i)
            as_delete.append(True)
            deletes.add(int(seq))
        held[key] = mine
    part = batch.take(pa.array(take, pa.int64()))
    if any(as_delete):
        ops = pc.if_else(pa.array(as_delete, pa.bool_()), pa.scalar(DELETE, part.schema.field("op").type),
                         part.column("op"))
        part = part.set_column(part.schema.get_field_index("op"), "op", ops)
    return part, deletes


@dataclass
class RowsZoneSnapshot:
    """One zone's replica base: the class's rows snapshot of the rows it owns (no subscription), its index and the
    group's cut points."""

    rows: RangeClassSnapshot
    zone: int
    cuts: tuple

    def build(self) -> RowsZone:
        return RowsZone(self.rows.build(), self.zone, self.cuts)


class RowsZone:
    """One X zone of a sharded group's rows (module docstring): ``apply(batch, mode)`` takes the group's whole
    batch; ``group`` is the class's operator over the zone's rows."""

    def __init__(self, group, zone: int, cuts: tuple):
        self.group = group
        self.zone = zone
        self.cuts = tuple(cuts)
        self.lo, self.hi = zone_bounds(self.cuts, zone)

    def __len__(self) -> int:
        return len(self.group.core)

    def apply(self, batch, mode: str = "reformulated") -> pa.Table:
        if not isinstance(batch, pa.Table):   # a log entry of another kind than a batch
            return self.group.apply(batch, mode)
        part, deletes = zone_batch(batch, self.lo, self.hi, self.group.core.__contains__,
                                   text=self.group.kind == "RANGE_DISTINCT")
        self._routed(part)
        return with_halves(self.group.apply(part, mode), deletes)

    def _routed(self, part: pa.Table) -> None:
        """The zone's part of a batch, before the zone applies it (a DISTINCT zone records its steps:
        ``distinct/zones.py``)."""

    # what the rows' operator answers (``ZonedRows`` asks each zone)
    def shard_seed(self, x1, x2, k):
        return self.group.shard_seed(x1, x2, k)

    def stats(self) -> dict:
        return {**self.group.stats(), "zone": self.zone, "x_from": self.lo, "x_to": self.hi}

    def explain(self) -> dict:
        return self.group.explain()


def with_halves(messages: pa.Table, deletion_seqs) -> pa.Table:
    """A zone's messages tagged with their half of the update (``PART_COLUMN``: 0 at the seqs whose part in the zone
    was an X-move's delete half, ``deletion_seqs``; else 1), by which :func:`merge_zone_messages` orders them."""
    seqs = messages.column("seq").to_numpy(zero_copy_only=False)
    deletions = np.fromiter(deletion_seqs, np.int64, len(deletion_seqs))
    halves = np.where(np.isin(seqs, deletions), 0, 1).astype(np.int8)
    return messages.append_column(PART_COLUMN, pa.array(halves, pa.int8()))


def merge_zone_messages(tables: Sequence[pa.Table]) -> pa.Table | None:
    """The zones' message tables of one batch as the whole group's: by seq, within a seq the delete half of an
    update before its other part (the core's order for an X-move: old X, then new X), each zone's own order
    kept, ``msg_no`` numbered anew; ``PART_COLUMN`` dropped.  None when there are none."""
    tables = [t for t in tables if t is not None]
    if not tables:
        return None
    merged = pa.concat_tables(tables, promote_options="default")
    if PART_COLUMN not in merged.column_names:
        return merged
    order = pc.sort_indices(merged, sort_keys=[("seq", "ascending"), (PART_COLUMN, "ascending"),
                                                ("msg_no", "ascending")])
    merged = merged.take(order).drop_columns([PART_COLUMN])
    if "msg_no" in merged.column_names:
        i = merged.schema.get_field_index("msg_no")
        merged = merged.set_column(i, "msg_no", pa.array(np.arange(merged.num_rows, dtype=np.int64)))
    return merged


def zones_layout(n_zones: int, n_shards: int) -> str:
    """What EXPLAIN and ``stats()`` say of a zoned group's layout."""
    return f"rows in {n_zones} X zones × {n_shards} subscription shards"


class ZonedRows:
    """A zoned group's rows as one operator (module docstring).  ``partials(x1, x2, k)``: each zone's
    ``shard_seed`` for those ranges, in zone order (local zones, or one Spark job over their replicas);
    ``zone_stats()``: each zone's ``stats()``; ``explain_zone()``: one zone's EXPLAIN lines; ``group_class``:
    the class's group operator, which merges the zones' partial states (``merge_seeds``, ``value_of_seed``)."""

    def __init__(self, group_class: type, option, cuts: Sequence[float], partials: Callable, zone_stats: Callable,
                 explain_zone: Callable):
        self.group_class = group_class
        self.option = option
        self.cuts = tuple(cuts)
        self.partials = partials
        self.zone_stats = zone_stats
        self.explain_zone = explain_zone
        # what a subscription shard's base needs from the rows' operator (``range_shards.shard_bases``)
        self.subscribers_class = group_class.subscribers_class
        self.shard_stateless = group_class.shard_stateless

    @classmethod
    def of_zones(cls, zones: Sequence[RowsZone]) -> ZonedRows:
        """Zones held in this process."""
        g = zones[0].group
        return cls(type(g), g.subscriber_option(), zones[0].cuts,
                   lambda x1, x2, k: [z.shard_seed(x1, x2, k) for z in zones],
                   lambda: [z.stats() for z in zones], zones[0].explain)

    def zone_of(self, x: float) -> int:
        return bisect_right(self.cuts, x)

    def subscriber_option(self):
        return self.option

    def shard_seed(self, x1, x2, k):
        return self.group_class.merge_seeds(self.partials(x1, x2, k), self.option, k)

    def result_of(self, x1: float, x2: float, k: int = 1):
        seed = self.shard_seed(np.array([x1], np.float64), np.array([x2], np.float64), np.array([k], np.int64))
        return self.group_class.value_of_seed(seed, self.option)

    def stats(self) -> dict:
        per_zone = self.zone_stats()
        summed = {name: sum(s[name] for s in per_zone) for name, v in per_zone[0].items()
                  if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and name != "zone"}
        rows = [s.get("tuples", 0) for s in per_zone]
        return {**summed, "zones": len(per_zone), "zone_rows": rows}

    def explain(self) -> dict:
        lines = dict(self.explain_zone())
        stats = self.stats()
        lines["tuples"] = sum(stats["zone_rows"])
        note = getattr(self.group_class, "zones_note", "each zone alone emits the messages at the X it owns (000 §4)")
        lines["zones"] = (f"{stats['zones']} X zones, rows per zone {stats['zone_rows']} (cut points "
                          f"{list(self.cuts)}): {note}, an X-move across a cut is the old zone's delete and the new "
                          f"zone's insert")
        return lines
