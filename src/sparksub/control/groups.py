"""Subscriptions and their groups as the engine keeps them: binding, registering and dropping them through their
family (``operators/registry.py``: one lookup from plan node to family), the group entries and their templates, and the
listings (SHOW SUBSCRIPTIONS).  A part of the Engine facade (``engine.py``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparksub.process_memory import BULK_ROWS, release_freed_memory
from sparksub.errors import (DuplicateSubscription, InvalidSubscription, UnknownSubscription)
from sparksub import listing
from sparksub.planner import ir
from sparksub.planner.catalog import TableDef
from sparksub.planner.classifier import Planned, parameters_of
from sparksub.operators.contract import SubscriptionFamily
from sparksub.operators.registry import family_of
from sparksub.operators.shared.families import grown
from sparksub.row_files import RowFiles
from sparksub.row_store import RowStore, rows_table
from sparksub.runtime import replicas as spark_replicas
from sparksub.control.inputs import checked_ids, param_columns


#: FILTER subscriptions per shard (one Spark task each, every event to every shard), up to the
#: session's default parallelism.
FILTER_SHARD_SIZE = 250_000
#: a group larger than this (subscriptions + its table's rows) is read in the workers, not built on the driver
#: (``Engine.driver_operator_limit``, runtime/remote.py)
DRIVER_OPERATOR_LIMIT = 200_000


@dataclass
class TableState:
    """A declared table as the engine keeps it: its definition and its current rows (a keyed table's: a
    ``RowStore``, key -> tuple of column values in table column order, whose base is a file under the engine's
    directory: issue 16 item 3; an event stream keeps none), and, once Spark has read them, the files it reads
    them from."""
    definition: TableDef
    rows: "RowStore | dict | None" = None
    #: the rows as files Spark reads (row_files.py): made on first use (Engine.table, a view), then kept current
    files: RowFiles | None = None

    def __post_init__(self):
        # a table the engine does not keep on disk (a stream's stand-in): its store in memory
        if self.definition.key is None:
            self.rows = {}
        elif not isinstance(self.rows, RowStore):
            self.rows = RowStore(self.definition, rows=None if not self.rows else rows_table(self.definition, self.rows))

    def column_index(self, name: str) -> int:
        return self.definition.column_names.index(name)


@dataclass
class SubscriptionRecord:
    """What EXPLAIN needs about one subscription: the plan it came from (shared by a bulk template)."""
    planned: Planned
    group_id: str
    bulk: bool = False


@dataclass
class GroupEntry:
    """A subscription group as the engine keeps it: its plan node, its family (the class's contract,
    ``operators/registry.py``) and the family's registry of its subscriptions, its templates, and the
    runtime's record of its replicas."""
    group_id: str
    physical: ir.Node  # the group's operator node (a planner.ir.*GroupScan)
    family: SubscriptionFamily
    registry: object  # the family's registry: the subscriptions and what the class keeps per subscription
    templates: list = field(default_factory=list)  # template texts; template_of[slot] indexes it
    template_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    replica: spark_replicas.Replica | None = None
    shards: dict | None = None  # FILTER shards / join partitions: replica id -> replica
    base_stale: bool = False  # subscriptions or loaded rows changed since the replica's base
    log_rows: int = 0
    subscribers: object = None  # the deliver() side (``family.subscribers``), seeded lazily
    #: builds ``subscribers`` as of before the last reformulated publish, at the first deliver() after it (None:
    #: seeded, or nothing to seed): a user who never calls deliver() never has every subscriber on the driver
    subscribers_seed: object = None
    subscribers_version: int = -1
    subscribers_variant: str | None = None  # the reformulated variant it was seeded for (issue 19)
    version: int = 0  # bumps on every publish and registration change


def check_single(sub_id, planned: Planned) -> None:
    """What ``subscribe`` / ``CREATE SUBSCRIPTION`` ask of one subscription beyond its plan."""
    if not isinstance(sub_id, str) or not sub_id:
        raise InvalidSubscription(f"subscription ids are non-empty strings, got {sub_id!r}")
    if parameters_of(planned.physical):
        raise InvalidSubscription(f"subscription {sub_id!r} has parameters "
                                  f"{list(parameters_of(planned.physical))}: use subscribe_many")


class SubscriptionGroups:
    """The Engine's groups (a mixin of ``engine.Engine``: its methods use the engine's state)."""

    # ---- subscriptions -----------------------------------------------------------------------------
    def subscribe(self, sub_id: str, sql: str) -> None:
        """Register one subscription (same as ``CREATE SUBSCRIPTION sub_id AS sql``)."""
        self._subscribe_planned(sub_id, self._plan(sql))

    def _subscribe_planned(self, sub_id: str, planned: Planned) -> None:
        check_single(sub_id, planned)
        with self._lock:
            ids = np.array([sub_id], dtype=object)
            bound = family_of(planned.physical).bind(planned.physical, {}, ids, self.catalog)
            self._check_new_ids(ids)
            entry = self._group_for(planned.physical)
            self._journal.subscribe(sub_id, planned.sql, entry.group_id)   # the commit point
            self._register(entry, planned, ids, bound)
            # its SELECT alone (EXPLAIN plans it again): ~100 bytes a subscription, not its plan's ~1.8 KB
            self._records[sub_id] = planned.sql
            self._changed(entry, subscriptions=True)

    def subscribe_many(self, template: str, params) -> int:
        """Register one subscription per row of ``params`` (an ``id`` column and one column per named
        parameter) against one template. Vectorised: 1M subscriptions take seconds. Returns the count."""
        n = self._subscribe_many(template, params)
        if n >= BULK_ROWS:   # its temporaries are gone now: give their pages back (process_memory.py)
            release_freed_memory()
        return n

    def _subscribe_many(self, template: str, params) -> int:
        planned = self._plan(template)
        cols = param_columns(params)
        if "id" not in cols:
            raise InvalidSubscription(f"params need an 'id' column (got columns {sorted(cols)})")
        ids = checked_ids(cols.pop("id"))
        needed = parameters_of(planned.physical)
        missing = [p for p in needed if p not in cols]
        if missing:
            raise InvalidSubscription(f"params lack columns for template parameters {missing} "
                                      f"(template: {template})")
        with self._lock:
            bound = family_of(planned.physical).bind(planned.physical, cols, ids, self.catalog)
            self._check_new_ids(ids)
            entry = self._group_for(planned.physical)
            self._journal.subscribe_many(template if isinstance(template, str) else planned.sql, ids, cols,
                                         entry.group_id)   # the commit point: the parameter table kept
            self._register(entry, planned, ids, bound)
            self._bulk.setdefault(entry.group_id, []).append(SubscriptionRecord(planned, entry.group_id, True))
            self._changed(entry, subscriptions=True)
        return int(ids.size)

    def _register(self, entry: GroupEntry, planned: Planned, ids: np.ndarray, bound: dict) -> np.ndarray:
        """Add the subscriptions of ``planned`` -- their constants bound and checked by the family, their output
        columns (their SELECT list, DESIGN §1) -- to the group's registry, and note their template."""
        family = entry.family
        self._seeded(entry)   # a pending deliver() side is built from the subscriptions it was due with
        slots = family.register(entry.registry, planned.physical, ids, bound,
                                family.output_columns(planned, self.catalog))
        self._note_template(entry, slots, planned.template)
        return slots

    def _check_new_ids(self, ids) -> None:
        """Ids are unique per engine (a batch's among themselves: :func:`checked_ids`): check them against
        every group and against the event queries' names (one namespace: SHOW / EXPLAIN SUBSCRIPTION list
        both), before any group is touched."""
        if self._event_queries:
            clash = next((i for i in ids if i in self._event_queries), None)
            if clash is not None:
                raise DuplicateSubscription(f"{clash!r} is already an event query")
        for entry in self._groups.values():
            if not len(entry.registry):
                continue
            known = getattr(entry.registry, "known", None)   # a registry without a dict: one vectorised lookup
            if known is not None:
                hit = known(ids)
                clash = ids[int(np.argmax(hit))] if hit.any() else None
            else:
                clash = next((i for i in ids if i in entry.registry), None)
            if clash is not None:
                raise DuplicateSubscription(f"duplicate subscription id {clash!r}: it already exists")

    def unsubscribe(self, sub_id: str) -> None:
        with self._lock:
            if sub_id in self._event_queries:
                raise UnknownSubscription(f"{sub_id!r} is an event query: DROP EVENT QUERY {sub_id} "
                                          f"(unregister_event_query)")
            entry = self._find_group(sub_id)
            self._journal.unsubscribe(sub_id)   # the commit point
            self._seeded(entry)
            entry.family.unregister(entry.registry, entry.physical, [sub_id])
            self._records.pop(sub_id, None)
            self._changed(entry, subscriptions=True)

    @staticmethod
    def _note_template(entry: GroupEntry, slots: np.ndarray, template: str) -> None:
        if template not in entry.templates:
            entry.templates.append(template)
        entry.template_of = grown(entry.template_of, slots, 0)
        entry.template_of[slots] = entry.templates.index(template)

    def _find_group(self, sub_id: str, required: bool = True) -> GroupEntry | None:
        for entry in self._groups.values():
            if sub_id in entry.registry:
                return entry
        if required:
            raise UnknownSubscription(f"no subscription {sub_id!r}")
        return None

    def _group_for(self, physical) -> GroupEntry:
        key = physical.group_key
        entry = self._groups.get(key)
        if entry is None:
            family = family_of(physical)
            gid = family.group_id(physical)
            entry = GroupEntry(gid, physical, family, family.new_registry(physical, self.catalog, gid))
            self._groups[key] = entry
        return entry

    def _changed(self, entry: GroupEntry, subscriptions: bool = False) -> None:
        entry.version += 1
        change = entry.family.take_change(entry.registry)   # a change the partitions' layout can take, or None
        # (a group left without subscriptions is skipped by publish, so its partitions miss batches: rebuild)
        if subscriptions and change is not None and entry.shards is not None and not entry.base_stale \
                and len(entry.registry):
            # 003 §4.2.3: the partitions' operators follow query inserts / deletes (their dynamic stabbing
            # partitions), logged like update batches; no new base
            entry.shards = {rid: replica.append(change) for rid, replica in entry.shards.items()}
            entry.log_rows += max(len(change.add_ids), len(change.remove_ids))
        elif subscriptions:
            entry.base_stale = True  # the base snapshot holds the subscriptions: rebuild it lazily
        if subscriptions and self._live_streams:
            self._publish_to_streams(entry)   # before the statement returns: the streams' next micro-batch applies it

    # ---- a table's rows changed outside a publish ------------------------------------------------------
    def load(self, table: str, data) -> int:
        n = super().load(table, data)   # Publishing.load (control/publishing.py)
        self._rows_changed(table)
        return n

    def _rows_changed(self, table: str) -> None:
        """Hook: ``table``'s rows changed behind the back of the state a mixin keeps of them (``load``; a stream's
        rows taken in, ``Streaming._absorb``).  The mixins that keep rows of their own (X zones, a sharded join's
        row partitions) mark them stale here and pass it on (``super()``)."""

    # ---- internals ----------------------------------------------------------------------------------
    def _groups_on(self, state: TableState) -> list[GroupEntry]:
        name = state.definition.name.lower()
        return [e for e in self._groups.values() if name in e.family.tables(e.physical) and len(e.registry)]

    def subscriptions(self):
        """SHOW SUBSCRIPTIONS, a Spark DataFrame: one row per subscription (``name, class, group, template,
        parameters`` -- its bound constants as JSON, see ``listing``) and per event query (class EVENT, its
        group the event class it runs in, its text as the template, no parameters).  Built from the
        registries' columns through Arrow: a million subscriptions are a million rows, no Python dict each.
        (It was the per-group list, now ``subscription_groups``.)"""
        return self.spark.createDataFrame(self.subscription_table())

    def subscription_table(self) -> pa.Table:
        """SHOW SUBSCRIPTIONS' rows as an Arrow table (``listing.SUBSCRIPTIONS_SCHEMA``; no Spark needed)."""
        with self._lock:
            return listing.subscriptions_table(
                list(self._groups.values()),
                [(name, f"events:{self._event_plan.class_of[name]}", rec.text)
                 for name, rec in self._event_queries.items()])

    def subscription_groups(self) -> list[dict]:
        """SHOW SUBSCRIPTION GROUPS: one row per group and template (a million bulk subscriptions are one
        row); one row per event query (class EVENT, its group the event class it runs in, its text)."""
        out = []
        for entry in self._groups.values():
            counts = np.bincount(entry.template_of[entry.registry.live_slots()], minlength=len(entry.templates))
            for template, n in zip(entry.templates, counts.tolist()):
                if n:
                    out.append({"group": entry.group_id, "class": entry.physical.klass,
                                "template": template, "subscriptions": n})
        for name, rec in self._event_queries.items():
            out.append({"group": f"events:{self._event_plan.class_of[name]}", "class": "EVENT",
                        "template": rec.text, "subscriptions": 1, "name": name})
        return out

    def subscription_ids(self) -> list[str]:
        return [str(i) for e in self._groups.values() for i in e.registry.ids_of(e.registry.live_slots())]
