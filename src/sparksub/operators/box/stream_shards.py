"""A large BOX_MIN / BOX_MAX / BOX_TOPK group in a running stream, in subscription shards (issue 16 item 4): the pure
parts of ``runtime/stream.py``'s "a large box group in subscription shards".  Pure (numpy; no pyspark).

The shards are publish's (``operators/box/shards.py``): Q shards by a CRC32 of the subscription id
(``joins.shards.subscription_shard``, so that publish and stream agree on where an id lives), each a whole box group
over its own subscriptions and **every row of the table** (002 §II-C: a box subscription's notifications depend only
on the rows and itself).  In a stream each shard is a state partition of its own, keyed ``<group>#b<j>``
(:func:`shard_key`): the router sends every row of the table to every shard's key (the rows copied, as publish's
shards each see the group's whole batch), a subscription lives only in the shard its id hashes to.

Spark places a key in a state partition by its hash: two shards of a group in one partition would run in one task,
one after the other, on one Python worker, so a shard's key is salted (``<group>#b<j>~<salt>``) until its partition
holds no other shard of the group (:func:`shard_keys`, :func:`spark_partition`: Spark's Murmur3 of the key).

A subscription change is published per shard, under the shard's key (``stream_control.publish_subscriptions``):
only the shards whose subscriptions changed -- their digest (``shards.shard_digests``) moved -- and shard 0 when the
group's set of top-k k values moved (in a reformulated stream shard 0 sends the group's messages, its cores for every
k: ``extra['ks']``) get a new version (:func:`changed_shards`), so the other shards' partitions keep their index and
their workers' caches.
"""
from __future__ import annotations

from dataclasses import dataclass

from sparksub.operators.box.group import BoxClassSnapshot
from sparksub.operators.box.shards import shard_digests, shard_snapshots

__all__ = ["BoxStreamShards", "changed_shards", "group_ks", "salted_keys", "shard_key", "shard_keys",
           "spark_partition", "stream_shard_bases"]

#: salts tried per shard for a key whose state partition no other shard of the group has (:func:`shard_keys`)
KEY_SALTS = 256
_M32 = 0xFFFFFFFF


def shard_key(group_id: str, shard: int, salt: int = 0) -> str:
    """The state partition key (the stateful operator's key) of subscription shard ``shard`` of box group
    ``group_id``: ``<group>#b<j>``, as publish names the shard's replica (``~<salt>`` after it: :func:`shard_keys`)."""
    return f"{group_id}#b{shard}" + (f"~{salt}" if salt else "")


def shard_keys(group_id: str, n_shards: int, partitions: int) -> list:
    """The keys of the group's ``n_shards`` shards, each, when ``partitions`` (the stream's state partitions,
    ``spark.sql.shuffle.partitions`` at its start) allows, in a state partition no other shard of the group is in:
    Spark places a key by its hash (:func:`spark_partition`), and two shards in one partition run one after the other
    in one task, on one Python worker -- the split would buy neither time nor memory (:func:`salted_keys`)."""
    return salted_keys([shard_key(group_id, j) for j in range(n_shards)], partitions)


def salted_keys(names: list, partitions: int) -> list:
    """State partition keys for ``names`` (one group's parts: box shards, a RANGE_AGG group's X zones), each salted
    (``<name>~<salt>``) until its partition (:func:`spark_partition`) holds no other of them, when ``partitions`` is at
    least their number (at most :data:`KEY_SALTS` tries; then it shares); else as named."""
    keys, taken = [], set()
    for name in names:
        key = name
        if partitions >= len(names):
            for salt in range(KEY_SALTS):
                candidate = f"{name}~{salt}" if salt else name
                if spark_partition(candidate, partitions) not in taken:
                    key = candidate
                    break
        keys.append(key)
        if partitions:
            taken.add(spark_partition(key, partitions))
    return keys


def spark_partition(key: str, partitions: int) -> int:
    """The state partition Spark's ``hashpartitioning(group_id, partitions)`` gives the string ``key``:
    ``pmod(Murmur3Hash(key, seed 42), partitions)`` -- ``Murmur3_x86_32.hashUnsafeBytes``, whose tail bytes are mixed
    one by one as signed ints (not the reference Murmur3's)."""
    data = key.encode("utf-8")
    h1 = 42
    aligned = len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for b in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & _M32))
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    signed = h1 - (1 << 32) if h1 & 0x80000000 else h1
    return signed % partitions   # (Python's % is pmod for a positive divisor)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * 0xCC9E2D51) & _M32, 15) * 0x1B873593) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M32


def group_ks(snap: BoxClassSnapshot) -> tuple:
    """The group's top-k k values (shard 0 paints for each); () for BOX_MIN / BOX_MAX."""
    return tuple(sorted({int(k) for k in snap.sub_k})) if snap.sub_k is not None else ()


@dataclass
class BoxStreamShards:
    """The engine's record of a box group a stream runs in subscription shards: their number, per shard its state
    partition key (:func:`shard_keys`) and the digest of the subscriptions its partition holds as of the stream's last
    change, and the group's k values then."""
    shards: int
    keys: list
    digests: list
    ks: tuple


def stream_shard_bases(snap: BoxClassSnapshot, n_shards: int, partitions: int) -> tuple[dict, BoxStreamShards]:
    """The stream's start: ``({shard: BoxClassSnapshot}, its record)``: ``snap`` (the whole group's: every
    subscription, the table's rows) split by subscription shard, the rows in each (``shards.shard_snapshots``), the
    shards' keys each in a state partition of its own among the stream's ``partitions`` where it can."""
    return shard_snapshots(snap, n_shards), BoxStreamShards(n_shards, shard_keys(snap.group_id, n_shards, partitions),
                                                             shard_digests(snap, n_shards), group_ks(snap))


def changed_shards(record: BoxStreamShards, snap: BoxClassSnapshot) -> dict:
    """A subscription change: ``{shard: its BoxClassSnapshot}`` (``snap``'s rows, none in a change) of the shards whose
    subscriptions differ from what ``record`` says their partitions hold, and shard 0 when the group's k values moved;
    ``record`` updated.  The shards left out keep their subscriptions (the change does not reach them)."""
    digests, ks = shard_digests(snap, record.shards), group_ks(snap)
    changed = {j for j in range(record.shards) if digests[j] != record.digests[j]}
    if ks != record.ks:
        changed.add(0)
    record.digests, record.ks = digests, ks
    return shard_snapshots(snap, record.shards, only=changed) if changed else {}
