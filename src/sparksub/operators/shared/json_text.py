"""JSON text built column-wise with Arrow compute: SHOW SUBSCRIPTIONS' ``parameters`` (``listing``), one string
per subscription from the registries' columns, never a Python object per subscription.

A *part* is a Python str (the same for every row) or a ``pa.Array`` of strings (one per row); the
functions join parts into parts.  Pure (numpy / pyarrow).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["object_text", "pair", "commas", "join_text", "broadcast", "numbers_text", "values_text", "text",
           "quoted"]



def object_text(fields: list) -> pa.Array:
    parts = ["{"]
    for i, (key, value) in enumerate(fields):
        parts += [(", " if i else "") + text(key) + ": ", value]
    return join_text("", parts, "}")


def pair(low: np.ndarray, high: np.ndarray):
    return join_text("[", [numbers_text(low), ", ", numbers_text(high)], "]")


def commas(values: list) -> list:
    out = []
    for i, v in enumerate(values):
        out += ([", "] if i else []) + [v]
    return out


def join_text(head: str, parts: list, tail: str):
    parts = [head, *parts, tail]
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return pc.binary_join_element_wise(*[pa.scalar(p, pa.string()) if isinstance(p, str) else p
                                         for p in parts], "")


def broadcast(part, n: int) -> pa.Array:
    if isinstance(part, str):
        return pc.take(pa.array([part], pa.string()), np.zeros(n, dtype=np.int32))
    return part


def numbers_text(values) -> pa.Array:
    """Numbers as JSON text: Arrow's shortest round-trip form; an infinite bound (an open end) is null."""
    arr = values if isinstance(values, pa.Array) else pa.array(np.asarray(values))
    out = pc.cast(arr, pa.string())
    if pa.types.is_floating(arr.type):
        out = pc.if_else(pc.is_finite(arr), out, pa.scalar("null", pa.string()))
    return out


def values_text(col, n: int):
    """FILTER constants (a scalar the template fixes, or a column) as JSON text."""
    if np.ndim(col) == 0:
        v = col.item() if isinstance(col, np.generic) else col
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return "null" if isinstance(v, float) and not math.isfinite(v) else numbers_text([v])[0].as_py()
        return text(str(v))
    arr = pa.array(np.asarray(col).tolist() if np.asarray(col).dtype.kind == "U" else np.asarray(col))
    if pa.types.is_boolean(arr.type):
        return pc.if_else(arr, pa.scalar("true"), pa.scalar("false"))
    if pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type):
        return numbers_text(arr)
    return quoted(pc.cast(arr, pa.string()))


def text(s: str) -> str:
    """One JSON string literal, UTF-8 as the vectorised ones (:func:`quoted`) are."""
    return json.dumps(s, ensure_ascii=False)


def quoted(strings: pa.Array) -> pa.Array:
    """JSON string literals (RFC 8259 §7: backslash, quote and control characters escaped)."""
    s = pc.replace_substring(strings, "\\", "\\\\")
    s = pc.replace_substring(s, '"', '\\"')
    if pc.any(pc.match_substring_regex(s, r"[\x00-\x1f]")).as_py():
        for code in range(32):
            s = pc.replace_substring(s, chr(code), f"\\u{code:04x}")
    return pc.binary_join_element_wise(pa.scalar('"'), s, pa.scalar('"'), "")
