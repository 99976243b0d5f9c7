"""Small numpy building blocks the operator cores share.

>>> concat_ranges(np.array([5, 0]), np.array([2, 3])).tolist()
[5, 6, 0, 1, 2]
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["concat_ranges", "id_list"]


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``arange(s, s + n)`` for each (s, n), vectorised (int64)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offs = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(np.asarray(starts, dtype=np.int64) - offs, lengths)


def id_list(ids) -> list:
    """Subscription ids as a list, from a list, numpy / Arrow array or pandas Series (not one string)."""
    if isinstance(ids, str):
        raise TypeError("ids must be a sequence of strings, not a single string")
    if isinstance(ids, (pa.Array, pa.ChunkedArray)):
        return ids.to_pylist()
    if isinstance(ids, np.ndarray):
        return ids.reshape(-1).tolist()
    if hasattr(ids, "tolist") and not isinstance(ids, list):   # pandas Series / Index
        return list(ids.tolist())
    return list(ids)
