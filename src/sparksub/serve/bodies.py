"""Notification bodies (the JSON text of a routed row) built column by column with Arrow, not row by row.

A publish of 1,000 updates over a large group routes ~120K rows.  Building each body as a dict of
``json_value``s and ``json.dumps`` costs ~10 us a row in the engine's worker thread, which holds the GIL
the event loop needs to send the previous batch.  Here each column is turned into its JSON text once
(integers and booleans by Arrow casts, floats by ``float.__repr__`` -- what ``json.dumps`` writes --, strings
by the json module's C escaper, once per distinct value; anything else falls back to ``json.dumps`` of
``json_value``, per value of that column only), and the rows are joined by Arrow's
``binary_join_element_wise``.  The text is the same ``json.dumps(body, separators=(",", ":"))`` of
``service.py``'s rule: the core columns always (null included), then the other columns that hold a value in
table order; ``subscription_id`` is the client's name, and an event-query match's ``query`` too
(``tests/test_serve.py`` checks the two against each other).
"""
from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["json_texts", "bodies", "json_value"]


def json_value(v):
    """A value as JSON can hold it: NaN as null, infinities as strings, dates as ISO text, bytes as hex."""
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _strings(arr: pa.Array) -> pa.Array:
    """Each string as a JSON string literal (ASCII, as ``json.dumps`` writes): the distinct values escaped
    once (ops, group ids repeat on every row)."""
    enc = pc.dictionary_encode(arr)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    words = pa.array([encode_basestring_ascii(w) for w in enc.dictionary.to_pylist()], pa.string())
    return words.take(enc.indices)


def _floats(arr: pa.Array) -> pa.Array:
    """Each float as ``json.dumps(json_value(v))`` writes it: ``repr``, NaN as null, infinities as strings."""
    vals = arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
    out = np.array(list(map(float.__repr__, vals.tolist())), dtype=object)
    out[np.isnan(vals)] = "null"
    out[np.isposinf(vals)] = '"Infinity"'
    out[np.isneginf(vals)] = '"-Infinity"'
    texts = pa.array(out, pa.string())
    return pc.if_else(arr.is_valid(), texts, pa.scalar(None, pa.string()))


def json_texts(col) -> pa.Array:
    """The JSON text of every value of ``col`` (an Arrow array or chunked array); null where it is null."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _strings(arr.cast(pa.string()))
    if pa.types.is_integer(t):
        return arr.cast(pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(arr, "true", "false")
    if pa.types.is_floating(t):
        return _floats(arr)
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    return pa.array([None if v is None else dumps(json_value(v)) for v in arr.to_pylist()], pa.string())


def bodies(table: pa.Table, names: pa.Array, core: tuple[str, ...]) -> pa.Array:
    """The body of every row of ``table`` (rows a remote client owns), ``names`` their owners' names for
    them (what ``subscription_id`` -- and an event-query match's ``query`` -- become)."""
    n = table.num_rows
    cols = table.column_names
    name_json = _strings(names)
    is_query_match = pc.is_null(table.column("subscription_id")) if "subscription_id" in cols \
        else pa.array(np.ones(n, bool))
    pieces = []
    for k in core:
        if k == "subscription_id":
            value = name_json
        elif k in cols:
            value = json_texts(table.column(k)).fill_null("null")
        else:
            value = pa.array(["null"] * n, pa.string())
        pieces.append(pc.binary_join_element_wise(("{" if not pieces else ",") + encode_basestring_ascii(k) + ":",
                                                  value, ""))
    for k in cols:
        if k in core:
            continue
        value = json_texts(table.column(k))
        if k == "query":   # an event-query match: its query is the subscription, known by its name
            value = pc.if_else(pc.and_(is_query_match, value.is_valid()), name_json, value)
        # null: the key is left out (a row never shows another class's columns)
        pieces.append(pc.binary_join_element_wise("," + encode_basestring_ascii(k) + ":", value, ""))
    if not pieces:
        return pa.array(["{}"] * n, pa.string())
    return pc.binary_join_element_wise(*pieces, "}", "", null_handling="replace", null_replacement="")
