"""Thin Spark wrapper: the second stage of a stream that runs a large group in two stages (issue 16 item 4) --
every message of the stateful stage to the subscription shards it concerns, one Spark task per shard, in the
same streaming query.  Shared by the SELECT_JOIN stream (``runtime/join_stream.py``) and the range groups' stream
(``runtime/stream.py``: RANGE_MIN / RANGE_MAX by x1 shards; RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG by id)::

    MapInArrow <name>_shards(...)              one task per slot: its shard matches the messages it got
    +- Exchange hashpartitioning(j_slot, n)
       +- MapInArrow <name>_to_shards(...)     each row copied to the slots it concerns (column ``j_slot``)
          +- <the stateful stage's output>

A *slot* is one subscription shard of one group (slot i of n).  ``j_slot`` holds, for slot i, a value that
Spark's hash partitioning sends to partition i (:func:`partition_keys`), so no two shards share a task.  Why
not a second stateful operator keyed by shard: a shard must see *every* stage-1 partition's messages, and it
keeps no state worth a checkpoint (its truth is its base file and the stream's change versions: the shards are
cached in the Python worker, :func:`cached_shard`).  The stateful subscribers of a top-k or aggregate shard keep
theirs in files too -- a base and one log file per micro-batch, written by the shard's task under the micro-batch's
id, which a replay rewrites alike (``runtime/stream.py``) -- not in a state store, which would tie the shard's rows
to one state partition's exchange.

What a kind decides: which slots a row goes to (``targets``) and what a slot's task makes of its rows
(``match``); the plumbing -- the slot column, the exchange, one group of rows per slot -- is here.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.runtime import stateful

__all__ = ["SLOT_COLUMN", "cached_shard", "fan_out_function", "partition_keys", "shard_function", "shard_stage"]

#: the column that sends a row's copy to its shard's Spark partition (stage 2)
SLOT_COLUMN = "j_slot"


def partition_keys(n: int) -> list[int]:
    """For each partition i of Spark's ``repartition(n, c)`` over an int column ``c``, a value of ``c`` that Spark
    sends there: ``pmod(hash(value), n) == i`` (``HashPartitioning``: Murmur3 of the value, seed 42), so that each
    subscription shard gets a task of its own (a shard number as the value would let two shards share a task)."""
    keys: list = [None] * n
    value, found = 0, 0
    while found < n:
        p = _spark_hash_int(value) % n   # (Python's % of a positive n is Spark's pmod)
        if keys[p] is None:
            keys[p] = value
            found += 1
        value += 1
    return keys


def _spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt(value, seed)`` (what ``hash(c)`` and hash partitioning give an int), as a
    signed 32-bit int."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask
    k1 = rotl((value & mask) * 0xCC9E2D51 & mask, 15) * 0x1B873593 & mask
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def shard_stage(rows, in_schema: pa.Schema, n_slots: int, targets, match, out_schema: pa.Schema, name: str):
    """Stage 2 over the streaming DataFrame ``rows`` (``in_schema``): each row to the slots ``targets`` names, one
    Spark partition per slot, ``match`` in each; the result in ``out_schema``.  ``targets(batch)`` yields ``(rows,
    slot)`` pairs, ``slot`` one slot number for all of ``rows`` or an array of one per row; ``match(slot, table)``
    yields the slot's output (tables or record batches) for its rows of the micro-batch (``SLOT_COLUMN``
    dropped)."""
    keys = partition_keys(n_slots)
    fanned = rows.mapInArrow(fan_out_function(keys, targets, f"{name}_to_shards"),
                             stateful.output_ddl(in_schema.append(pa.field(SLOT_COLUMN, pa.int32()))))
    return fanned.repartition(n_slots, SLOT_COLUMN).mapInArrow(
        shard_function(keys, match, f"{name}_shards"), stateful.output_ddl(out_schema))


def fan_out_function(keys: list, targets, name: str):
    key_of = np.asarray(keys, dtype=np.int32)

    def fan_out(batches):
        """Each row to the slots ``targets`` names (column ``j_slot``: the slot's partition key)."""
        for rb in batches:
            if not rb.num_rows:
                continue
            for rows, slot in targets(rb):
                if rows.num_rows:
                    slots = np.full(rows.num_rows, key_of[slot], np.int32) if np.ndim(slot) == 0 else key_of[slot]
                    yield rows.append_column(SLOT_COLUMN, pa.array(slots, pa.int32()))
    fan_out.__name__ = name   # what Spark's EXPLAIN prints
    return fan_out


def shard_function(keys: list, match, name: str):
    slot_of = {key: i for i, key in enumerate(keys)}

    def shards(batches):
        """A task's rows of the micro-batch, per slot (one, unless Spark's partitioning differs from
        :func:`partition_keys`), through ``match``."""
        got = [rb for rb in batches if rb.num_rows]
        if not got:
            return
        table = pa.Table.from_batches(got)
        slot = table.column(SLOT_COLUMN)
        for key in sorted(pc.unique(slot).to_pylist()):
            part = table.filter(pc.equal(slot, key)).drop_columns([SLOT_COLUMN])
            for out in match(slot_of[key], part):
                yield from (out.to_batches() if isinstance(out, pa.Table) else (out,))
    shards.__name__ = name
    return shards


def cached_shard(worker: stateful.StreamCache, stats, key, build):
    """The shard ``key`` names, from the Python worker's cache (``worker``) or ``build()`` (its base file); counted
    in the stream's ``shard_builds`` / ``shard_cache_hits`` (``stats``: the stream's counters, or None)."""
    built = []

    def make():
        built.append(True)
        return build()
    shard = worker.shared(key, make)
    if stats is not None:
        stats.add({"shard_builds" if built else "shard_cache_hits": 1})
    return shard
