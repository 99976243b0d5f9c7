"""``SHOW SUBSCRIPTIONS`` and ``SHOW SUBSCRIPTION GROUPS`` as Arrow tables, built column by column.

A million subscriptions are a million rows of SHOW SUBSCRIPTIONS: every column here is made from the
registries' own columns (ids, bounds, ``k``, FILTER blocks, join bounds) with Arrow compute, never a
Python dict per subscription, and the engine hands the table to Spark whole (``createDataFrame`` of an
Arrow table).  Pure: no pyspark here.

``parameters`` is a JSON object of a subscription's bound constants, keyed by what they bound, with the
values the group's registry holds (a strict bound is already moved to the next float, as the operator
uses it; an open end is ``null``; each family's ``parameters`` renders its own, ``operators/*/family.py``):

- RANGE_* and BOX_*: ``{"<x>": [low, high]}`` (and ``"<x2>": [low2, high2]`` for a box), top-k adds
  ``"limit": k``;
- SELECT_JOIN: ``{"<R>.<a>": [low, high], "<S>.<c>": [low, high]}``, the selections the template has;
- BAND_JOIN: ``{"<S>.<b> - <R>.<b>": [low, high]}`` and one ``"<table>.<column>": [low, high]`` per
  range selection;
- FILTER: ``{"where": [[[attr, op, value...], ...], ...]}``, the DNF (``between`` has two values, ``in``
  one list, ``is_null`` / ``is_not_null`` none);
- EVENT: ``null`` (the query's text, in ``template``, holds its constants).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.shared import json_text

__all__ = ["SUBSCRIPTIONS_SCHEMA", "GROUPS_SCHEMA", "subscriptions_table", "groups_table"]

#: SHOW SUBSCRIPTIONS: one row per subscription and per event query
SUBSCRIPTIONS_SCHEMA = pa.schema([("name", pa.string()), ("class", pa.string()), ("group", pa.string()),
                                  ("template", pa.string()), ("parameters", pa.string())])
#: SHOW SUBSCRIPTION GROUPS: one row per group and template (``name``: NULL but for event queries)
GROUPS_SCHEMA = pa.schema([("group", pa.string()), ("class", pa.string()), ("template", pa.string()),
                           ("subscriptions", pa.int64()), ("name", pa.string())])


def groups_table(rows: list[dict]) -> pa.Table:
    """The engine's group rows (``Engine.subscription_groups``) with the fixed columns of GROUPS_SCHEMA."""
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in GROUPS_SCHEMA},
                    schema=GROUPS_SCHEMA)


def subscriptions_table(groups, event_queries) -> pa.Table:
    """SHOW SUBSCRIPTIONS' rows: ``groups`` the engine's group entries (each with ``group_id``,
    ``physical``, ``family`` and its ``registry``, ``templates`` / ``template_of``), in order, each by slot;
    then ``event_queries``, ``(name, group, text)`` triples, in registration order."""
    parts = [_group_rows(entry) for entry in groups if len(entry.registry)]
    if event_queries:
        names, group, text = (list(c) for c in zip(*event_queries))
        parts.append(pa.table({"name": pa.array(names, pa.string()),
                               "class": pa.array(["EVENT"] * len(names), pa.string()),
                               "group": pa.array(group, pa.string()), "template": pa.array(text, pa.string()),
                               "parameters": pa.nulls(len(names), pa.string())}, schema=SUBSCRIPTIONS_SCHEMA))
    if not parts:
        return SUBSCRIPTIONS_SCHEMA.empty_table()
    return pa.concat_tables(parts)


def _group_rows(entry) -> pa.Table:
    """One group's rows: its family (``entry.family``, ``operators/contract.py``) renders each live
    subscription's bound constants as JSON text from the registry's columns."""
    slots, ids, parameters = entry.family.parameters(entry.registry, entry.physical)
    n = len(slots)
    zeros = np.zeros(n, dtype=np.int32)
    return pa.table({
        "name": pa.array(ids, pa.string()),
        "class": pc.take(pa.array([entry.physical.klass], pa.string()), zeros),
        "group": pc.take(pa.array([entry.group_id], pa.string()), zeros),
        "template": pc.take(pa.array(entry.templates, pa.string()), entry.template_of[slots]),
        # a group whose subscriptions have no constants (a join without selections) gives one text for all
        "parameters": json_text.broadcast(parameters, n)}, schema=SUBSCRIPTIONS_SCHEMA)
