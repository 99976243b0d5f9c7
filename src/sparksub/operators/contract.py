"""The one contract every subscription family implements (issue 16 item 1): what the engine asks of a class.

A *family* is the code of one subscription class -- or of a few classes that share one plan node family
(MIN and MAX, the three box classes, the two joins) -- behind one protocol, as an Ibis backend is behind
Ibis' one expression API and as Materialize's ``render`` dispatches a plan node to its operator.  The engine
(``engine.py``) and the runtime (``runtime/``) never branch on a class: they look the family of a plan node up
in :mod:`sparksub.operators.registry` (one dict, node type -> family) and call it.  Every family is pure
(numpy / pyarrow, the planner's nodes and binding; never pyspark), so everything here runs in a test without
Spark (``tests/operators/test_contract.py``).

What a family owns, and who calls it:

* **the registry** (:meth:`SubscriptionFamily.new_registry`): the group's subscriptions on the driver -- ids
  <-> slots and each subscription's bound constants as columns, plus whatever else the class keeps per
  subscription (a top-k's ``k`` and output columns, a box's second range, a join's partition layout and the
  query change waiting to be logged).  It answers ``len``, ``in``, ``live_slots()``, ``ids_of(slots)`` and
  ``remove(ids)`` for the engine's bookkeeping (SHOW, unique ids);
* **planning and registration** (``Engine.subscribe`` / ``subscribe_many`` / ``unsubscribe``):
  :meth:`~SubscriptionFamily.tables`, :meth:`~SubscriptionFamily.check_tables`,
  :meth:`~SubscriptionFamily.group_id`, :meth:`~SubscriptionFamily.bind` (constants checked, nothing
  registered: a bad one raises before any change, DESIGN §7), :meth:`~SubscriptionFamily.output_columns`,
  :meth:`~SubscriptionFamily.register`, :meth:`~SubscriptionFamily.unregister`,
  :meth:`~SubscriptionFamily.take_change`;
* **the data path** (``Engine.publish`` / ``stream`` and the runtime's tasks):
  :attr:`~SubscriptionFamily.placement` (how the runtime splits the group among tasks),
  :meth:`~SubscriptionFamily.output_schema` (the columns its notifications add),
  :meth:`~SubscriptionFamily.group_batch` (an update batch as its operator reads it),
  :meth:`~SubscriptionFamily.snapshot` (the base a task builds the operator from: ``snapshot(...).build()``
  is the operator -- what the runtime calls ``new_state``; it then ``apply(batch, mode)``s batches);
* **reading the state** (``Engine.result`` / ``explain`` / ``stats``, SHOW SUBSCRIPTIONS):
  :meth:`~SubscriptionFamily.result`, :meth:`~SubscriptionFamily.explain_lines`,
  :meth:`~SubscriptionFamily.stats`, :meth:`~SubscriptionFamily.parameters`,
  :meth:`~SubscriptionFamily.operator_name`, :meth:`~SubscriptionFamily.algorithm`;
* **deliver()** (the subscribers' side of the reformulated form):
  :meth:`~SubscriptionFamily.message_schema`, :attr:`~SubscriptionFamily.item_schema`,
  :meth:`~SubscriptionFamily.reformulated`, :meth:`~SubscriptionFamily.subscribers`.

``node`` is always the group's physical plan node (``planner.ir.*GroupScan``); ``tables`` maps a table's
lower-case name to its :class:`TableRows`; ``operator`` is the group's operator as of now, materialised in
the driver (for :data:`ROW_PARTITIONS`, a dict of the partitions' operators by replica id).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

__all__ = ["SubscriptionFamily", "TableRows", "ONE", "SUBSCRIPTION_SHARDS", "ROW_PARTITIONS", "PLACEMENTS"]

#: How the runtime places a group's state among tasks (issue 16 item 4) -- the one thing about a class the
#: runtime's partition lifecycle reads:
#: one replica holds the whole group, its rows and subscriptions (RANGE_*, BOX_*);
ONE = "one"
#: the subscriptions are split into shards and every row goes to every shard (FILTER: stateless, 001);
SUBSCRIPTION_SHARDS = "subscription_shards"
#: the rows are routed to partitions by their join value and every partition holds every subscription
#: (SELECT_JOIN, BAND_JOIN: 003 §4.2.1).
ROW_PARTITIONS = "row_partitions"
PLACEMENTS = (ONE, SUBSCRIPTION_SHARDS, ROW_PARTITIONS)


class TableRows(Protocol):
    """A table as the families read it: its definition and its rows (``Engine``'s ``TableState``)."""
    definition: Any            # planner.catalog.TableDef
    rows: dict                 # key -> tuple of the row's values, in the table's column order


@runtime_checkable
class SubscriptionFamily(Protocol):
    """One subscription family: the methods the engine and the runtime call (module docstring)."""

    #: the family's name (its package under ``operators/``)
    name: str
    #: the plan nodes it serves (``planner.ir``); ``operators/registry.py`` maps each to this family
    node_types: tuple[type, ...]
    #: :data:`ONE`, :data:`SUBSCRIPTION_SHARDS` or :data:`ROW_PARTITIONS`
    placement: str
    #: True when the operator keeps no state beyond its subscriptions: its registry is the operator itself (FILTER),
    #: and the runtime never logs a batch for it
    stateless: bool
    #: the columns its unicast rows add to ``UNICAST_SCHEMA`` (what ``deliver``'s output carries for it)
    item_schema: pa.Schema

    # ---- planning and registration (the engine, on the driver) ---------------------------------------------
    def tables(self, node) -> tuple[str, ...]:
        """The tables (lower case) whose updates the group reads: one, or a join's two."""

    def check_tables(self, node, catalog) -> None:
        """Refuse a plan over tables the class cannot serve (an append-only stream where it needs keys)."""

    def group_id(self, node) -> str:
        """The id of the group ``node`` belongs to (every subscription with the same ``node.group_key``)."""

    def new_registry(self, node, catalog, group_id: str):
        """An empty registry for the group (module docstring)."""

    def bind(self, node, params: Mapping[str, np.ndarray], ids: np.ndarray, catalog) -> dict:
        """Every constant of ``ids.size`` subscriptions of one plan bound as columns and checked (NaN, empty
        ranges, LIMIT k, parameter types against ``catalog``'s column types), nothing registered: what
        :meth:`register` adds.  ``params``: a column per template parameter (none for a single subscription)."""

    def output_columns(self, planned, catalog) -> tuple | None:
        """A subscription's output columns ``((name, side, column), ...)`` (its SELECT list, DESIGN §1) where
        its result rows and notifications carry them (top-k, joins); None for the other classes.  Raises for
        a SELECT list no row can hold (checked when planning, before anything changes)."""

    def register(self, registry, node, ids: np.ndarray, bound: dict, outputs: tuple | None = None) -> np.ndarray:
        """Add the subscriptions (constants from :meth:`bind`, output columns from :meth:`output_columns`) to
        the registry; returns their slots.  A duplicate id raises and registers nothing."""

    def unregister(self, registry, node, ids) -> None:
        """Remove subscriptions from the registry (an unknown id raises and removes nothing)."""

    def take_change(self, registry):
        """The subscription change registered since the last call, when the group's partitions can take it as
        an entry of their update log instead of a new base (003 §4.2.3: a join's partitions follow query
        inserts and deletes), else None; the registry forgets it either way."""

    # ---- the data path ---------------------------------------------------------------------------------------
    def reformulated(self, node) -> bool:
        """Whether the class has a reformulated form (messages); without one, ``mode='reformulated'`` gives its
        unicast rows and ``deliver`` passes them through (issue 15 item 6)."""

    def output_schema(self, schema: pa.Schema, mode: str, groups: Sequence[tuple], table) -> pa.Schema:
        """``schema`` (``publish``'s / ``stream``'s output so far, ending with ``reason``) with the columns the
        notifications of ``groups`` -- ``(node, registry)`` pairs of this family on the published ``table``
        (a TableDef); registry None: only what every group has -- add in ``mode``."""

    def group_batch(self, node, table, batch: pa.Table, seqs: np.ndarray) -> pa.Table:
        """An update batch of ``table`` (its columns cast to the table's types plus an int8 ``op``) as the
        group's operator reads it, each row with its ``seq``."""

    def snapshot(self, registry, node, group_id: str, tables: Mapping[str, TableRows]):
        """The base a task rebuilds the operator from: the definition, the live subscriptions and the tables'
        rows (a join's as one partition); ``snapshot(...).build()`` is the operator."""

    # (a ROW_PARTITIONS family also cuts the group into partitions and routes rows to them: ``joins/family.py``'s
    # ``partition_snapshots``, ``targets``, ``side_of``, ``stream_snapshot``, which the runtime's join path calls)

    def stream_columns(self, node, table) -> tuple | None:
        """:data:`ONE` placement: ``(x, y, y_is_text, x2)``, the row shape the stream's state keeps per key
        (``runtime/stream.py``); None for the other placements."""

    # ---- reading the state -----------------------------------------------------------------------------------
    def result(self, registry, node, operator, sub_id: str, tables: Mapping[str, TableRows]):
        """``sub_id``'s current result (DESIGN §1): a value, a set, a list of row dicts, or None (FILTER)."""

    def explain_lines(self, registry, node, operator) -> dict | None:
        """EXPLAIN's operator section (label -> text); ``operator`` None when the group is empty or does not
        exist (then what it would run, or None for the default text)."""

    def stats(self, registry, node, operator) -> dict:
        """The operator's counters for ``Engine.stats()``."""

    def parameters(self, registry, node) -> tuple[np.ndarray, np.ndarray, pa.Array]:
        """SHOW SUBSCRIPTIONS' rows of the group: the live slots, their ids and each one's bound constants as
        JSON text (``listing``), built from the registry's columns (no Python object per subscription)."""

    def operator_name(self, node) -> str:
        """The operator's name in Spark's EXPLAIN (``range_min``, ``filter``, ``select_join`` ...)."""

    def algorithm(self, node) -> str:
        """What the operator runs, with the paper's section (the ``SubscriptionGroup`` node shows it)."""

    # ---- deliver() ------------------------------------------------------------------------------------------
    def message_schema(self, node) -> pa.Schema:
        """The columns ``deliver`` needs of the group's messages (of its unicast rows when it has no
        reformulated form), checked before any subscriber sees one (``deliver_input``)."""

    def subscribers(self, registry, node, operator: Callable[[], Any], tables: Mapping[str, TableRows]):
        """The group's subscriber side, seeded with every subscriber's current result; ``operator()``
        materialises the group when the seed needs it.  ``.deliver(messages)`` returns the unicast rows the
        messages cause (for a class without messages: its unicast rows passed through)."""
