"""Give the memory a bulk operation freed back to the system (issue 16 item 3: the driver's memory must not
grow with subscriptions or rows it no longer holds).

A bulk call (``subscribe_many`` of a million rows, ``load``, a large ``publish``) builds large temporaries --
numpy and Arrow columns, Python strings -- and frees them before it returns.  Neither allocator gives that
memory back by itself: glibc's malloc keeps freed blocks in its arenas (it trims only the top of the heap),
and Arrow's pool (mimalloc or jemalloc) caches pages for reuse.  The process then looks a few hundred MB
larger than what it holds (measured: +227 MB of RSS at 1M subscriptions where the live data grew 19 MB;
bench/runtime.py's memory part).  :func:`release_freed_memory` asks both to return free pages: Arrow's
``release_unused`` and glibc's ``malloc_trim(0)``, which madvises every free page of every arena (not only
the heap's top).  It frees nothing in use, so it cannot change a result; it costs a few ms to tens of ms,
so the engine calls it after bulk calls only (:data:`BULK_ROWS` rows or more).
"""
from __future__ import annotations

import ctypes
import ctypes.util

import pyarrow as pa

__all__ = ["release_freed_memory", "BULK_ROWS"]

#: calls that took at least this many rows or subscriptions release the memory they freed
BULK_ROWS = 50_000


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc.malloc_trim if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:   # not glibc (musl, macOS): nothing to trim
        return None


_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Return the pages the process freed to the system (Arrow's pool, then glibc's arenas)."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)
