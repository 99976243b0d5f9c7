"""``SHOW SUBSCRIPTIONS`` and ``SHOW SUBSCRIPTION GROUPS`` as Arrow tables, built column by column.

A million subscriptions are a million rows of SHOW SUBSCRIPTIONS: every column here is made from the
registries' own columns (ids, bounds, ``k``, FILTER blocks, join bounds) with Arrow compute, never a
Python dict per subscription, and the engine hands the table to Spark whole (``createDataFrame`` of an
Arrow table).  Pure: no pyspark here.

``parameters`` is a JSON object of a subscription's bound constants, keyed by what they bound, with the
values the group's registry holds (a strict bound is already moved to the next float, as the operator
uses it; an open end is ``null``):

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

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.planner import ir

__all__ = ["SUBSCRIPTIONS_SCHEMA", "GROUPS_SCHEMA", "subscriptions_table", "groups_table"]

#: SHOW SUBSCRIPTIONS: one row per subscription and per event query
SUBSCRIPTIONS_SCHEMA = pa.schema([("name", pa.string()), ("class", pa.string()), ("group", pa.string()),
                                  ("template", pa.string()), ("parameters", pa.string())])
#: SHOW SUBSCRIPTION GROUPS: one row per group and template (``name``: NULL but for event queries)
GROUPS_SCHEMA = pa.schema([("group", pa.string()), ("class", pa.string()), ("template", pa.string()),
                           ("subscriptions", pa.int64()), ("name", pa.string())])

_BOX = (ir.BoxMinGroupScan, ir.BoxTopkGroupScan)
_TOPK = (ir.RangeTopkGroupScan, ir.BoxTopkGroupScan)


def groups_table(rows: list[dict]) -> pa.Table:
    """The engine's group rows (``Engine.subscription_groups``) with the fixed columns of GROUPS_SCHEMA."""
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in GROUPS_SCHEMA},
                    schema=GROUPS_SCHEMA)


def subscriptions_table(groups, event_queries) -> pa.Table:
    """SHOW SUBSCRIPTIONS' rows: ``groups`` the engine's group entries (each with ``group_id``,
    ``physical``, ``points`` — the registry —, ``templates`` / ``template_of``, and ``k_of`` / ``x2_of``
    for top-k and box groups), in order, each by slot; then ``event_queries``, ``(name, group, text)``
    triples, in registration order."""
    parts = [_group_rows(entry) for entry in groups if len(entry.points)]
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
    physical, points = entry.physical, entry.points
    if isinstance(physical, ir.FilterGroupScan):
        slots, ids, parameters = _filter_parameters(points)
    elif isinstance(physical, (ir.SelectJoinGroupScan, ir.BandJoinGroupScan)):
        slots = points.live_slots()
        ids, columns = points.rows(slots)
        parameters = _join_parameters(physical, columns)
    else:
        slots = points.live_slots()
        ids = points.ids_of(slots)
        parameters = _range_parameters(entry, physical, points, slots)
    n = len(slots)
    zeros = np.zeros(n, dtype=np.int32)
    return pa.table({
        "name": pa.array(ids, pa.string()),
        "class": pc.take(pa.array([physical.klass], pa.string()), zeros),
        "group": pc.take(pa.array([entry.group_id], pa.string()), zeros),
        "template": pc.take(pa.array(entry.templates, pa.string()), entry.template_of[slots]),
        # a group whose subscriptions have no constants (a join without selections) gives one text for all
        "parameters": _broadcast(parameters, n)}, schema=SUBSCRIPTIONS_SCHEMA)


# ---- per family: the registry's columns as JSON text ---------------------------------------------------

def _range_parameters(entry, physical, points, slots) -> pa.Array:
    fields = [(physical.x, _pair(points.x1[slots], points.x2[slots]))]
    if isinstance(physical, _BOX):
        fields.append((physical.x2, _pair(entry.x2_of[slots, 0], entry.x2_of[slots, 1])))
    if isinstance(physical, _TOPK):
        fields.append(("limit", _numbers(entry.k_of[slots])))
    return _object(fields)


def _join_parameters(physical, columns: dict) -> pa.Array:
    if isinstance(physical, ir.SelectJoinGroupScan):
        sel = [(f"{physical.left}.{physical.a}", "a"), (f"{physical.right}.{physical.c}", "c")]
        fields = [(what, _pair(columns[f"{p}_lo"], columns[f"{p}_hi"]))
                  for (what, p), col in zip(sel, (physical.a, physical.c)) if col is not None]
    else:
        fields = [(f"{physical.right}.{physical.right_on} - {physical.left}.{physical.left_on}",
                   _pair(columns["lo"], columns["hi"]))]
        for pre, table, where in (("L:", physical.left, physical.left_where),
                                  ("R:", physical.right, physical.right_where)):
            fields += [(f"{table}.{col}", _pair(columns[f"{pre}{col}:lo"], columns[f"{pre}{col}:hi"]))
                       for col, _, _ in where]
    return _object(fields)


def _filter_parameters(group) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """A FILTER group's live subscriptions block by block (``FilterGroup.snapshot``: in slot order, the
    constants still columns): their slots, ids and DNFs."""
    slots = group.live_slots()
    ids, texts = [], []
    for block in group.snapshot().blocks:
        n = len(block)
        conjunctions = [_join("[", _commas([_predicate(attr, op, col, n) for attr, op, col in conj]), "]")
                        for conj in block.disjuncts]
        texts.append(_broadcast(_join('{"where": [', _commas(conjunctions), "]}"), n))
        ids.append(block.ids)
    if len(slots) != sum(len(i) for i in ids):   # (snapshot and live_slots read the same registry)
        raise AssertionError("FILTER registry: snapshot and live slots disagree")
    return slots, (np.concatenate(ids) if ids else np.empty(0, dtype=object)), \
        (pa.concat_arrays(texts) if texts else pa.array([], pa.string()))


def _predicate(attr: str, op: str, col, n: int):
    head = f"[{_text(attr)}, {_text(op)}"
    if op in ("is_null", "is_not_null"):
        return head + "]"
    if op == "between":
        values = [_values(col[0], n), _values(col[1], n)]
    elif op == "in":
        if isinstance(col, tuple):                   # the template's own list
            items = [_values(v, n) for v in col]
        else:                                        # a list per subscription (parameters in the list)
            items = [_values(np.asarray(c, dtype=object), n) for c in zip(*col)] if n else []
        values = [_join("[", _commas(items), "]")]
    else:
        values = [_values(col, n)]
    return _join(head + ", ", _commas(values), "]")


# ---- JSON text, vectorised -----------------------------------------------------------------------------
# A part is a Python str (the same for every row) or a pa.Array of strings (one per row).

def _object(fields: list) -> pa.Array:
    parts = ["{"]
    for i, (key, value) in enumerate(fields):
        parts += [(", " if i else "") + _text(key) + ": ", value]
    return _join("", parts, "}")


def _pair(low: np.ndarray, high: np.ndarray):
    return _join("[", [_numbers(low), ", ", _numbers(high)], "]")


def _commas(values: list) -> list:
    out = []
    for i, v in enumerate(values):
        out += ([", "] if i else []) + [v]
    return out


def _join(head: str, parts: list, tail: str):
    parts = [head, *parts, tail]
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return pc.binary_join_element_wise(*[pa.scalar(p, pa.string()) if isinstance(p, str) else p
                                         for p in parts], "")


def _broadcast(part, n: int) -> pa.Array:
    if isinstance(part, str):
        return pc.take(pa.array([part], pa.string()), np.zeros(n, dtype=np.int32))
    return part


def _numbers(values) -> pa.Array:
    """Numbers as JSON text: Arrow's shortest round-trip form; an infinite bound (an open end) is null."""
    arr = values if isinstance(values, pa.Array) else pa.array(np.asarray(values))
    text = pc.cast(arr, pa.string())
    if pa.types.is_floating(arr.type):
        text = pc.if_else(pc.is_finite(arr), text, pa.scalar("null", pa.string()))
    return text


def _values(col, n: int):
    """FILTER constants (a scalar the template fixes, or a column) as JSON text."""
    if np.ndim(col) == 0:
        v = col.item() if isinstance(col, np.generic) else col
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return "null" if isinstance(v, float) and not math.isfinite(v) else _numbers([v])[0].as_py()
        return _text(str(v))
    arr = pa.array(np.asarray(col).tolist() if np.asarray(col).dtype.kind == "U" else np.asarray(col))
    if pa.types.is_boolean(arr.type):
        return pc.if_else(arr, pa.scalar("true"), pa.scalar("false"))
    if pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type):
        return _numbers(arr)
    return _quoted(pc.cast(arr, pa.string()))


def _text(s: str) -> str:
    """One JSON string literal, UTF-8 as the vectorised ones (``_quoted``) are."""
    return json.dumps(s, ensure_ascii=False)


def _quoted(strings: pa.Array) -> pa.Array:
    """JSON string literals (RFC 8259 §7: backslash, quote and control characters escaped)."""
    s = pc.replace_substring(strings, "\\", "\\\\")
    s = pc.replace_substring(s, '"', '\\"')
    if pc.any(pc.match_substring_regex(s, r"[\x00-\x1f]")).as_py():
        for code in range(32):
            s = pc.replace_substring(s, chr(code), f"\\u{code:04x}")
    return pc.binary_join_element_wise(pa.scalar('"'), s, pa.scalar('"'), "")
