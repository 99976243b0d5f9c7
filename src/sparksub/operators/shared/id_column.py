"""Slot -> subscription id as one UTF-8 byte buffer, not a Python string per slot (issue 16 item 3).

A registry's ids were an object array of Python strings: at a million subscriptions that is about 59 MB
(a short ``str`` costs ~50 bytes of header, plus the 8-byte pointer), where the ids' own bytes are ~7 MB.
:class:`IdColumn` keeps the bytes of every id in one ``uint8`` buffer and, per slot, where its bytes start
(int64) and how many there are (int32; -1: no id, the slot is free), so a million short ids cost their
bytes plus 12 bytes each.  Arrow's own layout (one offsets array, ids in slot order) cannot take the
registries' slot reuse -- a freed slot gets a new id of another length -- so a rewritten slot's bytes are
appended at the end and its old bytes become dead; when the dead bytes pass half of the buffer, the live
ones are copied into a fresh buffer in slot order (the slots do not move: the registries never renumber
them, so nothing outside sees it).

Every bulk operation is vectorised: encoding goes through ``pyarrow`` (one C pass), reading builds an Arrow
string array from gathered bytes, and comparing candidates (:meth:`IdColumn.equals`, what
``id_index.IdIndex.lookup`` confirms its hash hits with) compares byte runs with numpy, never a Python loop
per id.  An id with a lone surrogate (no UTF-8 form; the engine refuses those, the pure registries did not)
is kept with Python's ``surrogatepass`` bytes, which are as unambiguous; reads then take a per-id path.

>>> col = IdColumn()
>>> col.append(["a", "bé", ""]).tolist()
[0, 1, 2]
>>> col[1], col[np.array([2, 0])].tolist(), len(col)
('bé', ['', 'a'], 3)
>>> col.remove([0]); col.set([2], ["long id"]); col.tolist()
[None, 'bé', 'long id']
>>> col.equals(np.array([1, 2, 0]), np.array(["bé", "long", None], dtype=object)).tolist()
[True, False, False]
>>> col.take([2, 0]).to_pylist()
['long id', None]
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.operators.shared.arrays import concat_ranges

__all__ = ["IdColumn"]

#: per chunk of a gather: bounds its int64 byte-index temporaries to 16x this many bytes (1 MB), which would
#: otherwise be 16 bytes per byte read -- more than the Python strings the column replaces
_GATHER_BYTES = 1 << 16
#: the dead bytes a buffer may hold before :meth:`IdColumn._compact` (beside: more than half of it)
_DEAD_FLOOR = 1 << 16
_NOT_STR = -2          # an encoded query item that is not a string: equal to nothing
#: up to this many items, reads and comparisons go id by id: cheaper than the vectorised path's fixed cost
#: (one id's ``in`` / ``slot()`` / ``result()``), which pays off from a few dozen ids on
_SMALL = 16


def _encode(ids) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """``ids`` as UTF-8: (offsets int64 [n + 1], lengths int64 [n], bytes uint8, plain).  An item that is not a
    string gets the length ``_NOT_STR`` and no bytes; ``plain`` is False when an id needed ``surrogatepass``."""
    try:
        arr = pa.array(ids, type=pa.large_string())
    except (pa.ArrowException, UnicodeEncodeError, TypeError):
        arr = None                         # a non-string or a lone surrogate: the per-item path below
    if arr is not None and not arr.null_count:
        bufs = arr.buffers()
        offs = np.frombuffer(bufs[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
        data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
        return offs, np.diff(offs), data, True
    items = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    raw = [x.encode("utf-8", "surrogatepass") if isinstance(x, str) else None for x in items]
    lens = np.array([_NOT_STR if b is None else len(b) for b in raw], dtype=np.int64)
    offs = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(np.maximum(lens, 0), out=offs[1:])
    data = np.frombuffer(b"".join(b for b in raw if b), dtype=np.uint8)
    return offs, lens, data, all(b is None or _is_utf8(b) for b in raw)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _chunks(lens: np.ndarray):
    """Item ranges ``[a, b)`` whose byte total is about ``_GATHER_BYTES`` (at least one item each)."""
    n = lens.size
    if n == 0:
        return
    cum = np.cumsum(lens)
    total = int(cum[-1])
    if total <= _GATHER_BYTES:
        yield 0, n
        return
    cuts = np.searchsorted(cum, np.arange(_GATHER_BYTES, total, _GATHER_BYTES), side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [n]]))
    yield from zip(bounds[:-1].tolist(), bounds[1:].tolist())


def _gather(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The bytes of runs ``[starts[i], starts[i] + lens[i])`` of ``buf``, concatenated (in chunks, so the int64
    byte index never holds more than ``_GATHER_BYTES`` entries).  Runs that follow each other in ``buf`` -- the
    usual case: ids written in bulk, read back by ascending slot -- are one slice of it, a view (the column
    only appends to its buffer, so the bytes under a view never change)."""
    if lens.size and (starts[1:] == starts[:-1] + lens[:-1]).all():
        return buf[int(starts[0]): int(starts[0]) + int(lens.sum())]
    out = np.empty(int(lens.sum()), dtype=np.uint8)
    at = 0
    for a, b in _chunks(lens):
        piece = buf[concat_ranges(starts[a:b], lens[a:b])]
        out[at: at + piece.size] = piece
        at += piece.size
    return out


class IdColumn:
    """Slot -> id (``str``, or ``None`` for a free slot), packed (module docstring)."""

    def __init__(self, n: int = 0):
        self._data = np.empty(0, dtype=np.uint8)      # the ids' bytes, in write order; [0, _used) in use
        self._used = 0
        self._dead = 0                                # bytes of removed or rewritten ids within [0, _used)
        self._start = np.zeros(n, dtype=np.int64)     # per slot: where its bytes start
        self._len = np.full(n, -1, dtype=np.int32)    # per slot: how many (-1: no id)
        self._plain = True                            # every id written was valid UTF-8 (the Arrow read path)

    # ---- size ------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._len.size)

    @property
    def nbytes(self) -> int:
        """What the column holds in memory (buffer capacity included)."""
        return int(self._data.nbytes + self._start.nbytes + self._len.nbytes)

    def grow(self, n: int) -> None:
        """At least ``n`` slots (new ones free); never shrinks."""
        if n <= self._len.size:
            return
        start = np.zeros(n, dtype=np.int64)
        start[: self._start.size] = self._start
        lens = np.full(n, -1, dtype=np.int32)
        lens[: self._len.size] = self._len
        self._start, self._len = start, lens

    # ---- writing ---------------------------------------------------------------------------------------
    def append(self, ids) -> np.ndarray:
        """Add ``ids`` in new slots at the end; returns those slots."""
        n = len(ids)
        slots = np.arange(len(self), len(self) + n, dtype=np.int64)
        self.grow(len(self) + n)
        self.set(slots, ids)
        return slots

    def set(self, slots, ids) -> None:
        """Write ``ids[i]`` (strings) at ``slots[i]`` (existing slots, distinct); a slot's old id is dropped."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        offs, lens, data, plain = _encode(ids)
        if lens.size != slots.size:
            raise ValueError(f"length mismatch: {slots.size} slots, {lens.size} ids")
        if (lens == _NOT_STR).any():
            bad = ids[int(np.argmax(lens == _NOT_STR))]
            raise TypeError(f"subscription ids must be strings, got {bad!r}")
        if lens.size and int(lens.max()) > np.iinfo(np.int32).max:
            raise ValueError("an id of 2 GiB or more")
        first, last = int(offs[0]), int(offs[-1])
        base = self._reserve(last - first)
        self._data[base: base + last - first] = data[first:last]
        self._used = base + last - first
        old = self._len[slots]
        self._dead += int(old[old > 0].sum())
        self._start[slots] = base + offs[:-1] - first
        self._len[slots] = lens
        self._plain &= plain
        self._maybe_compact()

    def remove(self, slots) -> None:
        """Free ``slots`` (their id becomes ``None``)."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        old = self._len[slots]
        self._dead += int(old[old > 0].sum())
        self._len[slots] = -1
        self._maybe_compact()

    def _reserve(self, extra: int) -> int:
        """Room for ``extra`` more bytes; returns where they go."""
        need = self._used + extra
        if need > self._data.size:
            # an exact fit for the first bulk write (a million ids in one call), doubling after
            cap = need if not self._used else max(need, 2 * self._data.size)
            data = np.empty(cap, dtype=np.uint8)
            data[: self._used] = self._data[: self._used]
            self._data = data
        return self._used

    def _maybe_compact(self) -> None:
        if self._dead > max(_DEAD_FLOOR, self._used >> 1):
            self._compact()

    def _compact(self) -> None:
        """Copy the live ids' bytes into a fresh buffer, in slot order; slots keep their ids."""
        live = np.flatnonzero(self._len >= 0)
        lens = self._len[live].astype(np.int64)
        data = _gather(self._data, self._start[live], lens)
        if data.base is not None:   # a view of the old buffer would keep its dead bytes alive
            data = data.copy()
        self._start[live] = np.cumsum(lens) - lens
        self._data, self._used, self._dead = data, int(data.size), 0
        if not self._plain:
            self._plain = all(_is_utf8(b) for b in self._pieces(live))

    # ---- reading ---------------------------------------------------------------------------------------
    def _pieces(self, slots: np.ndarray) -> list:
        return [self._data[s: s + n].tobytes() for s, n in zip(self._start[slots].tolist(),
                                                               self._len[slots].tolist())]

    def get(self, slot: int):
        """The id at one slot, ``None`` if free."""
        n = int(self._len[slot])
        if n < 0:
            return None
        s = int(self._start[slot])
        return self._data[s: s + n].tobytes().decode("utf-8", "surrogatepass")

    def take(self, slots) -> pa.LargeStringArray:
        """The ids at ``slots`` as an Arrow array (null for a free slot), no Python string per id.  Only for
        columns whose ids all have a UTF-8 form (:attr:`plain`)."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        lens = self._len[slots].astype(np.int64)
        valid = lens >= 0
        lens[~valid] = 0
        offs = np.zeros(slots.size + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        data = _gather(self._data, self._start[slots], lens)
        nulls = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.LargeStringArray.from_buffers(slots.size, pa.py_buffer(offs), pa.py_buffer(data), nulls,
                                                int(slots.size - valid.sum()))

    @property
    def plain(self) -> bool:
        """Whether every id has a UTF-8 form (so :meth:`take` reads them all)."""
        return self._plain

    def __getitem__(self, slots):
        """One slot's id, or an object array of the ids (``None`` for free slots) at an array of slots."""
        if np.ndim(slots) == 0:
            return self.get(int(slots))
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if self._plain and slots.size > _SMALL:
            return self.take(slots).to_numpy(zero_copy_only=False)
        out = np.empty(slots.size, dtype=object)
        out[:] = [self.get(s) for s in slots.tolist()]
        return out

    def tolist(self) -> list:
        """Every slot's id (``None`` for free ones), in slot order."""
        return self[np.arange(len(self))].tolist()

    def equals(self, slots, ids) -> np.ndarray:
        """``self[slots[i]] == ids[i]`` for each i, as a bool array, comparing bytes (vectorised): what an
        id index confirms its hash hits with.  A free slot or a non-string equals nothing."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if slots.size <= _SMALL:
            items = ids.tolist() if hasattr(ids, "tolist") else list(ids)
            return np.array([isinstance(x, str) and self.get(s) == x for s, x in zip(slots.tolist(), items)],
                            dtype=bool)
        offs, q_len, data, _ = _encode(ids)
        out = self._len[slots].astype(np.int64) == q_len
        check = np.flatnonzero(out & (q_len > 0))   # equal lengths of 0 are equal already
        if check.size:
            lens = q_len[check]
            mine = _gather(self._data, self._start[slots[check]], lens)
            theirs = _gather(data, offs[check], lens)
            first = np.cumsum(lens) - lens
            differ = np.add.reduceat((mine != theirs).astype(np.int64), first) > 0
            out[check[differ]] = False
        return out

    # ---- pickling (a registry in a replica's base file) ----------------------------------------------------
    def __getstate__(self):
        return {"data": self._data[: self._used].copy(), "start": self._start, "len": self._len,
                "plain": self._plain}

    def __setstate__(self, state):
        self._data, self._start, self._len = state["data"], state["start"], state["len"]
        self._used, self._dead, self._plain = int(self._data.size), 0, bool(state["plain"])

    @classmethod
    def from_objects(cls, ids) -> IdColumn:
        """A column holding ``ids`` (an object array, ``None`` for a free slot) slot for slot."""
        ids = np.asarray(ids, dtype=object).reshape(-1)
        col = cls(ids.size)
        held = np.flatnonzero(np.array([x is not None for x in ids.tolist()], dtype=bool))
        if held.size:
            col.set(held, ids[held])
        return col
