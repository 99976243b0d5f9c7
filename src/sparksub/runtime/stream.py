"""Thin Spark wrapper: the range group operators on Structured Streaming -- RANGE_MIN / RANGE_MAX
(``range_min_group``) and RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG (``range_groups``).

``run_stream`` turns a streaming DataFrame of table updates into a streaming DataFrame of
notifications. The plan (names as Spark's EXPLAIN prints them)::

    TransformWithStateInPySpark range_min_group_stream(...)      one state partition per group
                                 (range_topk_group_stream, range_min_and_range_agg_groups_stream, ...:
                                 named after the operator families it runs)
    +- Exchange hashpartitioning(group_id), REQUIRED_BY_STATEFUL_OPERATOR
       +- MapInArrow range_min_group_stream_route(...)            every row goes to every group the
          |                                                       micro-batch hosts (stream_control)
          +- Filter isnull(sparksub_reason)                       the valid rows (checked_updates)
             +- MapInArrow range_min_group_stream_order(...)      seq from the input order (without ``_seq``);
                |                                                 the valid rows to ``applied/<micro-batch>``
                +- Exchange RoundRobinPartitioning(1)
                   +- MapInArrow range_min_group_stream_check(...)   row_validation.check_rows
                      +- <the user's streaming source>

**State** (Spark's state store, RocksDB, per ``group_id``):

* MapState ``rows``: table key -> ``(x, y, t, x2)`` for every row of the table: X and Y as doubles, or,
  for a DISTINCT over a string column, Y as text in ``t``; ``x2`` the second attribute of a 2-d box group
  (null otherwise). Nulls are allowed: a row with a null X or Y is kept (it is in no range, but it exists
  for a later delete);
* ValueState ``meta``: ``(applied, rebuilds)`` -- micro-batches applied to this group so far, and how
  often the index was rebuilt from the MapState;
* ListStates ``log0`` .. ``log3``: a ring holding the valid rows ``(batch, key, x, y, t, x2, op, seq)`` of the
  last ``LOG_SLOTS`` micro-batches (slot ``batch % LOG_SLOTS``);
* ValueState ``subs``: ``(stream id, change version)`` -- the subscriptions the last micro-batch applied.

**Subscriptions as data** (issue 16 item 5, ``stream_control``).  The engine publishes every subscription change
of a group the stream hosts to the stream's directory, as the group's whole new subscription set under the next
change version, before the statement returns; a range group that did not exist when the stream started is
published there too (its columns, a base holding the rows the stream applied so far and the micro-batch it is
as of).  Each micro-batch pins, in a file, the newest change version of each group and the groups added: the
router sends the rows to every group hosted, and a group whose version moved is rebuilt from the MapState's
rows and the new set before the micro-batch's rows (counted ``rebuilt`` and ``subscription_changes``); an added
group is seeded from its base, replays the micro-batches between its base and this one from the stream's
``applied/`` files, and is counted ``groups_added``.  A replayed micro-batch applies what its first attempt
pinned.

The state is the truth; the in-memory index (a materialised group: for MIN/MAX a :class:`RangeMinGroup`,
A2B-tree + the subscriptions' point index; for the other classes a ``range_groups`` group, whose
unicast state is rebuilt from its core after a log replay) is a cache in the Python worker, keyed by
(engine uid, group, stream id) and usable only by the same streaming query *run* (``spark.jobGroup.id`` is
the run id). If its ``applied`` counter equals the state's, it is used as is; if it is behind by at most ``LOG_SLOTS``
(Spark gives a group's next task to whichever Python worker is idle, so a worker often last saw the
group a batch or two ago), the missing micro-batches are replayed from the log ring; otherwise -- a
first task in this worker, a restart (new run id), a replayed or retried micro-batch (the cache is
*ahead* of the state store) -- the index is rebuilt from the MapState plus the subscriptions of the
base snapshot, a file the stream keeps under the engine's directory (``stream_files/<stream id>/``, a link to
the group's base when the stream starts: ``runtime/replicas.py``). On the first micro-batch (no state yet)
the rows come from the base snapshot and are written into the MapState, a slice of :data:`SEED_SLICE` rows at a
time; the base is read anew for the build and dropped after it, and a build of ``BULK_ROWS`` rows or more gives the
freed pages back (``process_memory``), so a worker does not keep the base's size once the index is built (an X zone's
rebuild keeps only its own rows as it reads the state store). State writes per micro-batch: one
MapState write per distinct key touched (one round trip each to the JVM), one ListState put, one ValueState update.

**A large RANGE_MIN / RANGE_MAX group in two stages** (issue 16 item 4; ``Engine.range_subscription_shards``,
decided when the stream starts, ``control/range_shards.py``; a ``unicast`` stream only -- a reformulated one has no
subscription side on the server).  Holding every subscription in the group's one task is what sharding avoids: the
S-CN core's messages do not depend on the subscriptions (000 §2.3.1, Theorem 2), so such a group runs as::

    MapInArrow <name>_shards(...)                     stage 2: one task per x1 subscription shard
    +- Exchange hashpartitioning(j_slot, Q)
       +- MapInArrow <name>_to_shards(...)             each message to the shards its rectangle can reach
          +- TransformWithStateInPySpark <name>(...)   stage 1: the rows (state as above), NO subscription
             +- Exchange hashpartitioning(group_id) ... as above

*Stage 1* is the stateful operator above, the group built from a base without subscriptions
(``GroupSpec.shards`` set): each micro-batch's rows go through ``apply(batch, "reformulated")``, S-CN's
messages ⟨NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R⟩ per step of each update, out in the operator's columns
:data:`MESSAGE_FIELDS` beside the stream's own, with the one thing S-UN needs that a message does not carry: an
X-move's old Y (``subscription_shards.step0_old_values``: a subscription both steps reach whose value ends where
it was gets no row, 000 §2.3, digest C.8), and the message's place in the group's micro-batch (a shard applies
them in that order).  It never applies a subscription change.  *Stage 2* (``runtime/shard_stage.py``, shared with
the SELECT_JOIN stream): the subscriptions are cut into x1 shards at equal-count cut points fixed when the stream
starts (``subscription_shards.shard_bases``, as publish's zoned groups cut theirs); a message goes to the shards
whose x1 interval meets its ``(OUTER_L, INNER_L]`` (``visited_shards``; most messages have a short Mar and reach
one or two), and each shard's task runs S-UN over its own point index (``ShardOperator.unicast``, 000 §3.3): the
union of the shards' rows is the whole group's, row for row.  Every other row of the operator (another group's
notifications, a rejected row) passes through the shard tasks, spread over them.  A shard's base is a file of the
stream's directory (``range-<n>-s<j>.pickle``; a change's: ``stream_control.publish_range_shards``), the shard
cached in the Python worker per (stream, group, shard, the change that wrote it) -- a change leaves the shards it
does not touch, and their cached operators, as they were (``stream_stats``: ``shard_builds``,
``shard_cache_hits``).  Why x1 shards and not a hash of the id as the SELECT_JOIN stream's: a message's rectangle
is a narrow band in x1, so x1 shards each see a fraction of the messages and query a fraction of the points, where
hash shards would each see every message; the price is a shard that grows with the subscriptions added in its x1
interval (the cuts stay while the stream runs).  Like the join stream's, whether a group runs in two stages is
fixed at the ``stream()`` call; the state store holds the same rows either way, but a stream restarted from
its checkpoint with the other decision is not covered by the tests.

**A large RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group in two stages** (issue 16 item 4; the same setting, a
``unicast`` stream; the pure parts in ``operators/shared/range_shard_stream.py``).  The stages are publish's sharded
form (``operators/shared/range_shards.py``) in one query, through the same stage 2 (``runtime/shard_stage.py``):
*stage 1* is the stateful operator, the group built from a base with the rows and no subscription (``GroupSpec.hashed``;
``rows_extra``: top-k paints per update, Paint-Dense, 002 §III-A), its micro-batch applied in ``reformulated`` form,
each update's messages out in :data:`CLASS_MESSAGE_FIELDS` (:func:`stage_one_classes`); *stage 2* is one task per
subscription shard by a CRC32 of the id, every message to every shard of its group (a hash leaves no shard a narrower
band of the messages), each shard delivering them to its subscribers (002 §II-A; 000 §4): the union of the shards'
rows is the whole group's, row for row.  Top-k and aggregate subscribers are stateful (each list, each exact count
and sum) and a shard is no state-store partition (it sees every stage-1 partition's messages), so a shard's state is
files of the stream's directory (``StreamControl``'s ``range_class_shards/<group>/<shard>/``): a base -- the
``RangeShardBase`` at the stream's start (seeded in a Spark task from the rows' base:
``range_shards.seed_stream_shards``), later a compaction its task wrote (``base-<micro-batch>``, every
:data:`SHARD_COMPACTION_BATCHES` micro-batches or :data:`SHARD_COMPACTION_MESSAGES` logged messages) -- and one log
file per micro-batch it applied (``log-<micro-batch>``: the change it took, and its messages but for DISTINCT's,
whose subscribers keep nothing), written by its task under the micro-batch's id.  A replayed micro-batch rewrites
the same file: stage 1's state store rolls back with it and the batch file pins its subscriptions.  The worker caches
the shard per streaming-query run with the micro-batch it stands before (:func:`_class_shard`): there, used; behind,
caught up from the logs between; ahead (a retried or replayed micro-batch) or missing (a cold worker, a restart),
rebuilt from the newest base at or before the micro-batch and the logs after it (``stream_stats``:
``shard_cache_hits``, ``shard_caught_up``, ``shard_builds``, ``shard_compactions``).  A subscription change reaches
the shards through stage 1 (:func:`_stage_one_change`): the engine publishes the group's whole set with each id's
*birth* (the change version since which it holds its bounds); the micro-batch that applies a version finds the
subscriptions born after the version its state store says the group last applied, seeds them from its rows before
the micro-batch's rows (``group.shard_seed``, as the whole group rebuilds its subscriptions before its rows), writes
each shard its ``ShardChange`` (its ids after the change, the added with their seeds; ``change-<micro-batch>``: the
stateful output has no binary column) and sends it a row (``op`` :data:`SHARD_CHANGE`) through the exchange; the
shard drops what the set no longer holds and adds the seeded, before the messages.  A top-k stage 1 paints for the k
values of the change's subscriptions too.

**A two-stage RANGE_AGG group's rows in X zones** (issue 16 item 4; ``Engine.range_zones``, publish's setting and rule
-- ``control/range_shards.range_zone_count`` over the table's rows -- fixed when the stream starts; the pure parts in
``operators/shared/range_zone_stream.py``).  Stage 1 is then Z keys of the stateful operator, ``<group>#r<i>`` (salted
as the box shards' keys, ``~<salt>``, until no two share a state partition), each an X zone at equal-count cut points
of the table's X at the start (``range_zones.zone_cuts``): its state store holds **every row** (the router copies each
row to every zone's key, as to a box shard's; a delete's key check is then the table's in every zone, and the
stream's first key alone emits a rejection), its index (``range_zones.RowsZone``, :func:`_built`) only the rows it
owns, ``cuts[i-1] <= x < cuts[i]``.  Each zone takes its part of the micro-batch itself (``zone_batch``: an upsert at
an X it owns, a delete / NULL / move-out of a key it holds as a delete) and emits the aggregate messages at the X it
owns -- ``<X, D_COUNT, D_SUM>`` reads that X's tuples alone (000 §4), so no second round; an X-move across a cut is the
old zone's delete and the new zone's insert -- tagged with its zone and half (:data:`ZONE_MESSAGE_FIELDS`).  A stage-2
shard gets every zone's messages and merges them (``range_zone_stream.merged_messages``: by seq, a move's delete half
first, zone order, ``msg_no`` anew) before delivering and logging them: the whole group's messages, row for row.  A
subscription change: each zone seeds the added from its own rows and writes each shard its ``ShardChange``
(``range_class_shards/<group>/<shard>/zone-<i>/change-<micro-batch>``), the shard adds the zones' partial states up
(``merged_change``: ``AggGroup.merge_seeds``) -- the driver holds no row and no result.  At the start one Spark task
seeds the shards from the zones' rows, one zone's core at a time (:func:`seed_zoned_stream_shards`).  ``stream_stats``:
``zones`` (the zone partitions the stream started with), ``zone_batches``, ``zone_builds``.

**A two-stage RANGE_DISTINCT group's rows in X zones** (the same setting and layout; ``distinct/zone_stream.py``).  A
DISTINCT message's Mar ends (000 §4) read the nearest tuple of its value on each side, which may lie in another zone:
publish closes them in a second job over the zones (``distinct/zones.py``), and a stream has no second stateful
stage.  But each zone reads the whole micro-batch and its state store holds every row, so it knows each update's old
row and new row, hence every question another zone's message can ask: stage 1's zone
(:func:`stage_one_distinct_zone`) emits its messages, their ends open where it holds no tuple of the value on that
side, and its answers -- its nearest X of the value as of the message's seq (a REMOVE's after it, an ADD's before)
-- as rows beside them (``range_zone_stream.answer_rows``: ``op`` ``zone_answer``; rows, not files: a few numbers per
update that must reach every shard, as the messages do).  The old rows of keys its index does not hold it reads from
its state store, one read per such key of the micro-batch.  A stage-2 shard closes each end at the nearest answer
and merges (``range_zone_stream.merged_messages``): the whole group's messages, row for row.  DISTINCT subscribers
keep nothing, so neither the start nor a change seeds anything from the zones.  A reformulated stream
keeps the group whole (its output is the messages: zoned, they would need a merge task per group after an exchange,
a second stage that stream does not have).

**A two-stage RANGE_MIN / RANGE_MAX group's rows in X zones** (issue 16 item 4; the same setting, rule and keys; the
pure parts in ``operators/range_min/zone_stream.py``).  DS-CN (000 §2.3.2) across the two stages: each zone partition
(``zone_stream.MinStreamZone``, :func:`_built`: a ``zones.Zone`` over the rows it owns, its state store every row)
takes its part of the micro-batch (``zones.route_zone``: an X-move across a cut is the old zone's step 0, the new
zone's step 1) and runs **round 1** (:func:`stage_one_min_zone`): the messages of the steps settled inside it, each
with its version (:data:`VERSION_COLUMN`, ``2 * position + step``), and one row (``op`` :data:`ZONE_ROUND1`) carrying
its ``Round1`` -- the deferred steps, the edge staircases per version, the X-moves' old Y -- pickled in a string cell
(:data:`ROUND1_COLUMN`: the stateful output has no binary column; a row, not a file, so a replay re-emits it and
nothing is written or cleaned up).  Stage 2 sends the settled messages where the whole group's go
(``visited_shards``) and every zone's ``Round1`` row to every shard of the group (:func:`_min_zone_records`): a
deferred step's rectangle is known only after **round 2**, so each shard runs round 2 for every deferred step of the
group (few: the steps whose walk reaches a cut) and keeps what visits it, then merges by version
(:func:`min_zone_messages`: ``zone_stream.shard_messages``) before S-UN -- the whole group's messages and X-moves' old
Y, so the union of the shards' rows is the whole two-stage group's, row for row.  Subscription changes go to the
shards alone, as for the whole group.

**A two-stage RANGE_TOPK group's rows in X zones** (issue 16 item 4; the same setting, rule and keys; the pure part in
``operators/topk/zone_stream.py``).  A top-k step reads past its zone (its first_k walks, a lowering step's sweep, 002
§II-B, §III-A), but only objects of depth < kmax from a cut (``topk/zones.py``), and each zone's state store holds
every row: so each zone (``zone_stream.TopkStreamZone``, :func:`_built` from every row -- a rebuild reads them all)
keeps in its index its own rows and a halo beyond each cut of a guaranteed depth, which it keeps across
micro-batches.  Before a micro-batch (:func:`stage_one_topk_zone`) it counts the updates that could lower its halo's
objects; if the halo could then fall below kmax it refills it from its state store's rows (``stream_stats``:
``halo_refills``).  It applies the whole micro-batch, paints the steps at the X it owns, and tags each message with its
zone and half, which the shards merge as the aggregate zones' (``merged_messages``); an added subscription's seed is
the best k of the zones' lists over their own rows (``TopkGroup.merge_seeds``, ``StreamZone.option`` its order).

**A large BOX_MIN / BOX_MAX / BOX_TOPK group in subscription shards** (issue 16 item 4; the same setting, decided
when the stream starts, in either mode; the pure parts in ``operators/box/stream_shards.py``).  Publish's box shards
(``operators/box/shards.py``) as state partitions: the group is Q keys of the stateful operator, ``<group>#b<j>``
(salted, ``~<salt>``, until each is in a state partition of its own: ``stream_shards.shard_keys``), each a whole
box group over the subscriptions whose id hashes to j (publish's CRC32, so both agree where an id lives)
and **every row of the table** -- the router sends each row to every shard's key, as it sends it to every group
(the rows copied: 002 §II-C, a box subscription's notifications depend only on the rows and itself).  Each key is an
ordinary partition of this operator (its MapState, log ring, cache entry; ``GroupSpec.box_shard``), so the union of
the shards' unicast rows is the whole group's, row for row, and in a reformulated stream shard 0 alone sends the
messages (its top-k cores for every k of the group, ``extra['ks']``), the others none.  A delete of an unknown key
is emitted by the stream's first key alone, as for any groups.  A subscription change is published per shard under
the shard's key, to the shards whose subscriptions it changed only (and shard 0 when the group's k values moved:
``box.stream_shards.changed_shards``): the others keep their index and cached operator.  ``stream_stats`` counts a
shard partition's build (seeded, rebuilt) as ``shard_builds``, a cache hit as ``shard_cache_hits``, a catch-up as
``shard_caught_up``.  A box group added while the stream runs is hosted whole.

**Order.** Every row gets its ``seq`` in ``checked_updates``, before any path sees it (the range groups
here, FILTER, joins and event queries alike): ``_seq`` when the stream has that integer column; without
it ``(micro-batch id << 32) + rank``, the rank in input order -- ``(input partition id << 33) + row position
in the partition``, what ``monotonically_increasing_id()`` computes (that function itself is not allowed on
streams) --, ranked in one task after a one-partition exchange. Within one micro-batch rows apply in
``seq`` order. A file source replays a micro-batch, under the same id, from the same files (the offset log
records them), split the same way while ``spark.sql.files.maxPartitionBytes``/``openCostInBytes`` and the
default parallelism are unchanged, so the derived order is deterministic on replay; rows of one file keep
their line order, but Spark orders the splits of *several* files in one micro-batch by size, not by
name: give the stream a ``_seq`` when that order matters.

**Malformed rows** (DESIGN §7) are found by ``row_validation.check_rows`` -- the check ``publish`` makes,
with the same reasons: null key, unknown ``_op``, null ``_seq``, a value that does not cast to the
column's type, NaN or ±inf in a numeric column of an upsert -- and emitted once (``rejected_updates``:
``op = 'rejected'``, ``seq``, ``reason``, counted in ``stream_stats``); the stream goes on, and a replayed
micro-batch replays its rejections. The engine hands the paths only the valid rows. A delete of an
unknown key is found by the operator (it needs the state): the first group (by id) emits it.
"""
from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import pickle
import shutil
import tempfile
import uuid
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.operators.distinct.zone_stream import batch_answers
from sparksub.operators.range_min.subscription_shards import (
    step0_old_values,
    visited_shards,
)
from sparksub.operators.range_min.zone_stream import (
    MinStreamZone,
    round1_of,
    round1_text,
    shard_messages,
)
from sparksub.operators.shared import row_validation
from sparksub.operators.shared.range_shard_stream import (
    ShardLogEntry,
    painted_ks,
    shard_changes,
    shard_of_base,
)
from sparksub.operators.shared.range_zone_stream import (
    PART_MESSAGE_COLUMN,
    ZONE_COLUMN,
    StreamZone,
    answer_rows,
    merged_change,
    merged_messages,
    zone_operator,
    zoned_shard_bases,
)
from sparksub.operators.shared.range_zones import (
    PART_COLUMN,
    RowsZone,
    zone_bounds,
    zone_rows,
)
from sparksub.operators.shared.schemas import (
    DELETE,
    RANGE_MESSAGE_SCHEMA,
    UNICAST_ITEMS_SCHEMA,
    UNICAST_SCHEMA,
    UPSERT,
    with_reason,
)
from sparksub.operators.topk.zone_stream import TopkStreamZone
from sparksub.process_memory import BULK_ROWS, release_freed_memory
from sparksub.runtime import shard_stage, stateful, stream_control
from sparksub.runtime.replicas import CounterFile, StoredValue, write_value
from sparksub.runtime.stateful import StreamLogic, note_subscriptions

__all__ = ["run_stream", "stream_stats", "output_schema", "checked_updates", "valid_updates", "rejected_updates",
           "typed_updates", "new_stream_id", "REJECTED", "STAT_NAMES"]

REJECTED = row_validation.REJECTED
STAT_NAMES = ("micro_batches", "seeded", "cache_hits", "caught_up", "rebuilt", "updates", "rejected",
              "notifications", "subscription_changes", "groups_added", "shard_builds", "shard_cache_hits",
              "shard_caught_up", "shard_compactions", "zones", "zone_builds", "zone_batches", "halo_refills")
#: Micro-batches of valid rows kept in the state (a ring of ListStates), to bring a stale cached index
#: up to date instead of rebuilding it: Spark hands a group's task to any idle Python worker.
LOG_SLOTS = 4
#: Groups cached per Python worker (each entry is a whole index).
CACHE_ENTRIES = 32
_NO_SEQ = -(2 ** 63)  # a null _seq (the row is rejected; its seq comes out null)
#: rows a first micro-batch writes to the MapState per slice of the base (:func:`_seed`)
SEED_SLICE = 20_000

#: Worker-process cache (``stateful.StreamCache``): (engine uid, group id, stream id) -> (query id, run id, applied,
#: (group, null_keys, subscription change version)).
_CACHE: dict[tuple[str, str, str], tuple] = {}
_WORKER = stateful.StreamCache(CACHE_ENTRIES, lambda: _CACHE)

#: subscription shards (stage 2 of a range group run in two stages) cached per Python worker: Spark ties no shard
#: to a worker.  (engine uid, stream id, group id, shard, the change version its base was written at) -> its
#: ``ShardOperator`` (``shard_stage.cached_shard``)
SHARD_CACHE_ENTRIES = 8
_SHARDS: dict = {}
_SHARD_WORKER = stateful.StreamCache(SHARD_CACHE_ENTRIES, lambda: _SHARDS)
#: Stage 1's columns beyond the stream's output, for a group run in two stages: its messages (000 §2.3.1: S-CN's
#: ⟨NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R⟩ and the step of the update), the X-move's old Y (unicast's no-op
#: rule, which the messages alone do not carry) and the message's place in the group's micro-batch (a shard
#: applies them in that order, whatever the exchange does to the rows)
MESSAGE_FIELDS = (pa.field("m_step", pa.int8()), pa.field("m_new_value", pa.float64()),
                  pa.field("m_inner_l", pa.float64()), pa.field("m_inner_r", pa.float64()),
                  pa.field("m_outer_l", pa.float64()), pa.field("m_outer_r", pa.float64()),
                  pa.field("m_old_value", pa.float64()), pa.field("m_msg_no", pa.int64()))
#: a message's value and rectangle (``MESSAGE_SCHEMA``), ``m_``-prefixed between the stages
_RECTANGLE = ("new_value", "inner_l", "inner_r", "outer_l", "outer_r")
#: Stage 1's columns beyond those, for a RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group in two stages: the rest of a
#: per-update message (``RANGE_MESSAGE_SCHEMA``: 002 §II-A's object, k and new value; DISTINCT's value; the
#: aggregate delta's count) and, on a micro-batch that applies a subscription change, one row per shard naming it
#: (``m_shard``): its ``ShardChange`` -- the added subscriptions' seeds -- is a file stage 1 wrote
#: (``StreamControl.write_shard_change``: Spark's stateful output has no binary column)
CLASS_MESSAGE_FIELDS = (pa.field("m_k", pa.int64()), pa.field("m_item_text", pa.string()),
                        pa.field("m_item_key", pa.string()), pa.field("m_item_x", pa.float64()),
                        pa.field("m_d_count", pa.int64()), pa.field("m_shard", pa.int32()))
#: Stage 1's columns beyond those, for a two-stage RANGE_AGG / RANGE_DISTINCT group with its rows in X zones: a
#: message's zone and its half of the update (0: an X-move's delete half; ``range_zones.RowsZone``), which stage 2
#: merges by (a DISTINCT zone's answer: the asking zone, the update's REMOVE 0 or ADD 1, ``range_zone_stream``)
ZONE_MESSAGE_FIELDS = (pa.field(ZONE_COLUMN, pa.int32()), pa.field(PART_MESSAGE_COLUMN, pa.int8()))
#: Stage 1's columns beyond those, for a two-stage RANGE_MIN / RANGE_MAX group with its rows in X zones (DS-CN's round 1
#: per zone, round 2 in the shards: ``range_min/zone_stream.py``): a settled message's version (``2 * position + step``:
#: the batch order the shard merges by) and, on the zone's one row per micro-batch (``op`` :data:`ZONE_ROUND1`), its
#: ``Round1`` record pickled (``zone_stream.round1_text``: the stateful output has no binary column)
VERSION_COLUMN, ROUND1_COLUMN = "m_version", "m_round1"
MIN_ZONE_FIELDS = (pa.field(VERSION_COLUMN, pa.int64()), pa.field(ROUND1_COLUMN, pa.string()))
#: stage 1's row that carries a RANGE_MIN / RANGE_MAX zone's ``Round1`` to every shard of its group (``op``)
ZONE_ROUND1 = "zone_round1"
#: a range-class message's columns, ``m_``-prefixed between the stages (all but group_id, seq and op)
_CLASS_MESSAGE = tuple(f.name for f in RANGE_MESSAGE_SCHEMA if f.name not in ("group_id", "seq", "op"))
#: stage 1's row that tells a shard its micro-batch applies a subscription change (``op``)
SHARD_CHANGE = "shard_change"
#: a two-stage top-k / DISTINCT / aggregate shard writes a new base (a compaction) when the micro-batches or the
#: messages logged since its base reach these: a cold worker replays them (~25 us a top-k message)
SHARD_COMPACTION_BATCHES = 64
SHARD_COMPACTION_MESSAGES = 2_000_000
#: those shards cached per Python worker, per streaming query run: (engine uid, stream id, group id, shard) ->
#: (the micro-batch it stands before, (StreamRangeShard, its base's micro-batch, messages logged since))
_CLASS_SHARDS: dict = {}
_CLASS_SHARD_WORKER = stateful.StreamCache(SHARD_CACHE_ENTRIES, lambda: _CLASS_SHARDS)

#: Driver side: stream id -> the stream's counters (a CounterFile in its directory: every task adds to it,
#: from any process, without an accumulator -- Spark Connect has none).
_STATS: dict[str, CounterFile] = {}

_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
#: a box group's subscription shard (a state partition of its own) in the shards' counters: built from its base or
#: the state store's rows, found in the worker, caught up from the log ring
_BOX_SHARD_HOW = {"seeded": "shard_builds", "rebuilt": "shard_builds", "cache_hits": "shard_cache_hits",
                  "caught_up": "shard_caught_up"}


def output_schema(schema: pa.Schema) -> pa.Schema:
    """The mode's schema plus a nullable ``reason`` (set on rejected rows only)."""
    return with_reason(schema)


class _Deferred:
    """Holds a value pickled, unpickled on first use (``get``), as ``replicas.StoredValue`` holds one in a
    file: the stream's specs take either (tests hand values in; the engine hands files)."""

    def __init__(self, obj):
        self._obj, self._raw = obj, None

    def __getstate__(self):
        raw = self._raw if self._obj is None else pickle.dumps(self._obj, protocol=pickle.HIGHEST_PROTOCOL)
        return {"raw": raw}

    def __setstate__(self, state):
        self._obj, self._raw = None, state["raw"]

    def get(self):
        if self._obj is None:
            self._obj = pickle.loads(self._raw)
        return self._obj

    def read(self):
        """The value unpickled anew, not kept (``StoredValue.read``)."""
        return pickle.loads(self._raw) if self._obj is None else self._obj


@dataclass
class GroupSpec:
    """One group as the stream needs it: its columns and where its base snapshot lives."""
    group_id: str
    x: str
    y: str | None     # None: COUNT(*) (any row with an X counts)
    base: object      # the pickled GroupSnapshot / RangeClassSnapshot: a StoredValue (its file) or a _Deferred
    text: bool = False  # Y is a string column (DISTINCT): it travels in ``t``, not ``y``
    x2: str | None = None  # a 2-d box group's second attribute
    # a group added while the stream runs (``stream_control.publish_group``): the stream's change version its
    # base's subscriptions are as of, and the last micro-batch whose rows its base holds (-1: none)
    version: int = 0
    as_of: int | None = None
    # a RANGE_MIN / RANGE_MAX group run in two stages (a unicast stream; its ``base`` then holds no subscription):
    # its subscription shards' bases (``ShardBase``, each stored as ``base``) and the x1 cut points between them;
    # None: the group runs whole
    shards: tuple | None = None
    cuts: tuple = ()
    # a RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group run in two stages: its shards are by a CRC32 of the id (each a
    # ``RangeShardBase``), not x1 cuts; ``ks`` the k values its stage 1 painted for at the start (top-k)
    hashed: bool = False
    ks: tuple = ()
    # subscription shard j of a BOX_MIN / BOX_MAX / BOX_TOPK group (its key ``<group>#b<j>``: every row of the table,
    # the subscriptions whose id hashes to j, ``operators/box/stream_shards.py``); None: not a box shard
    box_shard: int | None = None
    # an X zone of a two-stage RANGE_AGG / RANGE_DISTINCT / RANGE_MIN / RANGE_MAX / RANGE_TOPK group (its key
    # ``<group>#r<i>``: every row of the table in its state store, the zone's rows in its index -- a top-k zone's with
    # its halos; ``operators/shared/range_zone_stream.py``); None: not a zone
    zone: StreamZone | None = None

    def snapshot(self):
        """The partition's base, read anew (a build reads it once; kept, the table's rows would outlive it)."""
        return _loaded(self.base.read())

    def staged(self, mode: str) -> bool:
        """Whether the group runs in two stages in a stream of ``mode`` (stage 1 here: its rows, no subscription)."""
        return self.shards is not None and mode == "unicast"

    @property
    def logical_id(self) -> str:
        """The group this partition is of: its own id, or a zone's group's (its notifications and changes')."""
        return self.zone.group_id if self.zone is not None else self.group_id


def _loaded(value):
    """A stored value as it was handed in: bytes (pickled) are unpickled."""
    return pickle.loads(value) if isinstance(value, (bytes, bytearray)) else value


@dataclass
class StreamSpec:
    engine_uid: str
    stream_id: str
    table: str
    key_type: str             # the key's Spark type in the state (bigint, double, string, ...)
    mode: str
    schema: pa.Schema         # output_schema(mode's schema)
    groups: dict              # group_id -> GroupSpec
    primary: str              # the group that emits rejected rows
    seq_given: bool           # ord is the seq (checked_updates numbers every row); else seq = (applied << 32) + rank
    stats: object = None      # where the counters go (a CounterFile, anything with ``add(dict)``), or None
    control: object = None    # the stream's directory (``stream_control.StreamControl``): subscription changes,
    #                           groups added, the micro-batches' applied rows; None: the groups as given, fixed
    key: str | None = None    # the table's key column (the routed rows' ``key``)

    def group(self, gid: str) -> GroupSpec:
        """A group the stream started with, or one added since (``stream_control``)."""
        got = self.groups.get(gid)
        return got if got is not None else self.control.new_group(gid)

    def staged_groups(self) -> dict:
        """group id -> GroupSpec of the groups run in two stages, a zoned group once (its first zone's spec: the
        zones share the shards)."""
        out: dict = {}
        for key in sorted(self.groups):
            g = self.groups[key]
            if g.staged(self.mode):
                out.setdefault(g.logical_id, g)
        return dict(sorted(out.items()))

    def hosted(self, plan: dict | None) -> dict:
        """group id -> GroupSpec of every group a micro-batch with ``plan`` (``StreamControl.plan``) routes to."""
        out = dict(self.groups)
        for gid in (plan or {}).get("groups", ()):
            out.setdefault(gid, self.control.new_group(gid))
        return out


# ---- Spark side (driver) ---------------------------------------------------------------------------

#: Columns the row check adds to a stream of updates (``checked_updates``); no leading underscore, which
#: PySpark's state API would rename.
OP_COLUMN, SEQ_COLUMN, REASON_COLUMN = "sparksub_op", "sparksub_seq", "sparksub_reason"
_ORD_COLUMN = "sparksub_ord"


def checked_updates(streaming_df, table_def, name: str = "updates", applied=None, gate=None):
    """The stream of updates to ``table_def``, every row checked by ``row_validation.check_rows`` -- the
    checks ``publish`` makes, in a ``mapInArrow`` task named ``<name>_check`` -- and numbered: the table's
    columns in their canonical Spark types, an event stream's ``t0``/``t1`` (bigint; one given alone fills
    the other), ``sparksub_op`` (tinyint UPSERT/DELETE), ``sparksub_seq`` and ``sparksub_reason`` (null:
    valid).  ``sparksub_seq`` is ``_seq`` when the stream has that column, else ``(micro-batch id << 32) +
    rank``, the rank of the row in input order (input partitions in turn, each in row order), computed in
    one task (``<name>_order``, after a one-partition exchange) because a rank needs the whole micro-batch;
    a replayed micro-batch has the same id and, from the same files, the same order.  Batch-level errors
    (unknown or missing columns, a non-integer ``_seq``/``t0``/``t1`` column) raise ``BadUpdate`` here.

    ``applied`` (a ``stream_control.StreamControl``): the valid rows of each micro-batch also go, in seq order,
    to a file of the stream's directory (``applied/<micro-batch>.arrow``), written by the one task that orders
    the micro-batch (with ``_seq``, one more task after a one-partition exchange): the engine follows them, so
    that ``result()`` agrees with what the stream applied (``Engine._follow_streams``).

    ``gate`` (a ``scheduling.stream_gate.StreamRefreshGate``; ``Engine.max_delay`` set): the ordering task also
    decides, by the refresh scheduler, whether the micro-batch's valid rows and those buffered before apply now
    or stay buffered (003 ch. 2); the paths see only the rows it releases, and ``applied`` holds those."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ByteType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    shape = row_validation.RowShape.of(table_def)
    # only the column names and kinds are checked here; a timestamp column needs some zone to be typed
    source = to_arrow_schema(streaming_df.schema, timezone="UTC")
    row_validation.check_rows(source.empty_table(), shape, extra=("_op", "_seq"), all_columns=True)
    cols = streaming_df.columns
    ticks = (("t0", "t1") if table_def.key is None and ("t0" in cols or "t1" in cols) else ())
    ticks = tuple(t for t in ticks if t not in shape.names)
    seq_given = "_seq" in cols
    data = [StructField(c, _spark_type(_canonical_type(t))) for c, t in table_def.columns]
    data += [StructField(t, LongType()) for t in ticks]
    checked_schema = StructType(data + [StructField(OP_COLUMN, ByteType(), False),
                                        StructField(SEQ_COLUMN if seq_given else _ORD_COLUMN, LongType()),
                                        StructField(REASON_COLUMN, StringType())])
    check = _check_function(shape, to_arrow_schema(checked_schema, timezone="UTC"), ticks, seq_given, f"{name}_check")
    checked = streaming_df.mapInArrow(check, checked_schema)
    if seq_given and applied is None and gate is None:
        return checked
    ordered_schema = StructType(data + [StructField(OP_COLUMN, ByteType(), False), StructField(SEQ_COLUMN, LongType()),
                                        StructField(REASON_COLUMN, StringType())])
    order = _order_function(to_arrow_schema(ordered_schema, timezone="UTC"), f"{name}_order", applied,
                            renumber=not seq_given, gate=gate)
    return checked.repartition(1).mapInArrow(order, ordered_schema)


def _check_function(shape, out: pa.Schema, ticks: tuple, seq_given: bool, name: str):
    def check(batches):
        """``row_validation.check_rows`` on each batch; ``sparksub_ord`` = (input partition id << 33) + position
        in the partition (what ``monotonically_increasing_id`` computes; not allowed on streams) unless the
        stream has ``_seq``."""
        from pyspark import TaskContext
        tc = TaskContext.get()
        pos = (tc.partitionId() if tc is not None else 0) << 33
        for rb in batches:
            n = rb.num_rows
            c = row_validation.check_rows(pa.Table.from_batches([rb]), shape, extra=("_op", "_seq"),
                                          all_columns=True)
            arrays = [c.columns[col] for col in shape.names]
            arrays += [c.t0 if t == "t0" else c.t1 for t in ticks]
            order = c.seqs if seq_given else pa.array(np.arange(pos, pos + n, dtype=np.int64))
            pos += n
            arrays += [pa.array(c.ops, pa.int8()), order, pa.array(c.reasons, pa.string())]
            yield pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(arrays, out)], schema=out)
    check.__name__ = name  # what Spark's EXPLAIN prints
    return check


def _order_function(out: pa.Schema, name: str, applied=None, renumber: bool = True, gate=None):
    def order(batches):
        """The micro-batch's rows (all of them: one partition) by ``sparksub_ord``, ``sparksub_seq`` =
        (micro-batch id << 32) + rank (``renumber``; else by the given ``sparksub_seq``); the valid ones to
        ``applied``'s file of the micro-batch."""
        tables = [pa.Table.from_batches([rb]) for rb in batches if rb.num_rows]
        batch_id = stream_control.batch_id()
        if gate is not None and batch_id is not None:
            yield from _gated(out, tables, batch_id, applied, renumber, gate)
            return
        if not tables:
            if applied is not None and batch_id is not None:
                applied.write_applied(batch_id, out.empty_table().drop_columns([REASON_COLUMN]))
            return
        table = pa.concat_tables(tables)
        if renumber:
            table = table.sort_by(_ORD_COLUMN)
            seqs = (np.int64(batch_id or 0) << np.int64(32)) + np.arange(table.num_rows, dtype=np.int64)
            table = table.set_column(table.column_names.index(_ORD_COLUMN), SEQ_COLUMN, pa.array(seqs))
        table = table.cast(out)
        if applied is not None and batch_id is not None:
            valid = table.filter(pc.is_null(table.column(REASON_COLUMN)))
            applied.write_applied(batch_id, valid.sort_by(SEQ_COLUMN).drop_columns([REASON_COLUMN]))
        for rb in table.to_batches():
            yield rb
    order.__name__ = name
    return order


def _gated(out: pa.Schema, tables: list, batch_id: int, applied, renumber: bool, gate):
    """``_order_function`` with a refresh gate (issue 19 item 1; ``scheduling/stream_gate.py``): the micro-batch's
    rows numbered as without it, its rejected rows out at once, its valid rows handed to the gate, which returns
    the rows to apply now (the buffered ones and these, or none: the decision is kept per micro-batch, so a replay
    releases the same); those go on, and to ``applied``."""
    table = pa.concat_tables(tables) if tables else out.empty_table()
    if renumber and table.num_rows:
        table = table.sort_by(_ORD_COLUMN)
        seqs = (np.int64(batch_id) << np.int64(32)) + np.arange(table.num_rows, dtype=np.int64)
        table = table.set_column(table.column_names.index(_ORD_COLUMN), SEQ_COLUMN, pa.array(seqs))
    table = table.cast(out)
    rejected = table.filter(pc.is_valid(table.column(REASON_COLUMN)))
    released = gate.decide(batch_id, table.filter(pc.is_null(table.column(REASON_COLUMN))), SEQ_COLUMN)
    if applied is not None:
        applied.write_applied(batch_id, released.drop_columns([REASON_COLUMN]))
    for part in (rejected, released.cast(out)):
        yield from part.to_batches()


def rejected_updates(checked, table_def, stream_id: str | None = None, name: str = "updates"):
    """The rows ``checked_updates`` set aside, as ``publish`` emits them (``row_validation.rejected_rows``):
    ``op = 'rejected'``, ``seq``, ``reason``, ``group_id`` null; on an event stream also the event's columns
    (named as match rows name them) and ``t0``/``t1``.  Counted in the stream's ``rejected`` stat."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparksub.operators.events.partitions import output_column

    # only columns every mode's output has (a union by name fills in the others)
    fields = [StructField("op", StringType()), StructField("seq", LongType()), StructField("group_id", StringType()),
              StructField("reason", StringType())]
    carried = {}
    if table_def.key is None:   # an event: its columns and interval come along, as in publish
        carried = {c: output_column(c) for c in table_def.column_names}
        fields += [StructField(carried[c], _spark_type(_canonical_type(t))) for c, t in table_def.columns]
        fields += [StructField(t, LongType()) for t in ("t0", "t1") if t not in carried.values()]
        carried.update({t: t for t in ("t0", "t1") if t in checked.columns and t not in carried})
    out = StructType(fields)
    schema = to_arrow_schema(out, timezone="UTC")
    counters = _STATS.get(stream_id) if stream_id is not None else None

    def rejected(batches):
        for rb in batches:
            if not rb.num_rows:
                continue
            columns = {out: rb.column(c) for c, out in carried.items()}
            table = row_validation.rejected_rows(schema, rb.column(SEQ_COLUMN), rb.column(REASON_COLUMN).to_pylist(),
                                                 columns)
            if counters is not None:
                counters.add({"rejected": table.num_rows})
            yield from table.to_batches()
    rejected.__name__ = f"{name}_rejected"
    return checked.where(F.col(REASON_COLUMN).isNotNull()).mapInArrow(rejected, out)


def valid_updates(checked):
    """The rows ``checked_updates`` found valid."""
    from pyspark.sql import functions as F
    return checked.where(F.col(REASON_COLUMN).isNull())


def new_stream_id(directory=None, owner=None, stream_id: str | None = None) -> str:
    """A new stream's id (``stream_id``, else a new one), with its counters (``stream_stats``) in
    ``directory/<id>/`` (the engine's ``streams`` area; without one, a temporary directory removed at exit).
    ``owner``: what keeps ``directory`` on disk (the engine's ``EngineDirectory``, whose temporary directory
    goes with it): held for the life of the process, since the streaming query outlives the engine and its
    DataFrame."""
    stream_id = stream_id or uuid.uuid4().hex
    if owner is not None:
        _OWNERS[stream_id] = owner
    if isinstance(directory, (str, os.PathLike)):
        where = os.path.join(directory, stream_id)
    else:
        where = tempfile.mkdtemp(prefix=f"sparksub-stream-{stream_id[:8]}-")
        _TEMPORARY.append(where)
    os.makedirs(where, exist_ok=True)
    _STATS[stream_id] = CounterFile(where, stream_id)
    return stream_id


def stream_directory(stream_id: str) -> str:
    """Where a stream (``new_stream_id``) keeps its files: counters and the bases it started from."""
    return _STATS[stream_id].directory


_TEMPORARY: list = []
_OWNERS: dict = {}


def _remove_temporary() -> None:
    for where in _TEMPORARY:
        shutil.rmtree(where, ignore_errors=True)


atexit.register(_remove_temporary)


def known_key_updates(checked, table_def, initial_keys, name: str = "updates"):
    """``checked`` (valid rows of ``checked_updates``) with a delete of a key the table does not hold given
    its reason (``row_validation.unknown_key_reason``), as ``publish`` finds it in its rows.  For a stream
    no other operator keeps the table's rows for (FILTER alone on a keyed table): one ValueState per key
    (``present``), seeded from ``initial_keys`` (the set of keys when the stream starts, in a file:
    ``replicas.StoredValue``), grouped by the key (``<name>_keys`` in EXPLAIN)."""
    spec = KeySpec(table_def.name, initial_keys)
    return stateful.run(checked.groupBy(table_def.key), KEY_PRESENCE, spec, checked.schema, f"{name}_keys")


@dataclass
class KeySpec:
    table: str
    initial: object   # the set of the keys the table held when the stream started (StoredValue or _Deferred)

    def initial_keys(self) -> set:
        return _loaded(self.initial.get())


@dataclass
class KeyState:
    """A key's state (``known_key_updates``): the ValueState ``present`` (or a look-alike) and the initial keys,
    loaded once per processor (``keys``)."""
    present: object
    keys: set | None = None


class KeyPresenceLogic(StreamLogic):
    """One key's rows of one micro-batch, in seq order: a delete while the key is absent is rejected."""

    def state_variables(self, spec: KeySpec) -> dict:
        return {"present": stateful.value_state("present boolean")}

    def state(self, handles) -> KeyState:
        return KeyState(handles["present"])

    def apply(self, spec: KeySpec, key, pdf: pd.DataFrame, state: KeyState) -> pd.DataFrame:
        return apply_key_presence(spec, key, pdf, state.present, state)


KEY_PRESENCE = KeyPresenceLogic()


def apply_key_presence(spec: KeySpec, key, pdf: pd.DataFrame, present, cache) -> pd.DataFrame:
    """``pdf`` (one key's checked rows) with the reason of each delete of an absent key; ``present`` the key's
    ValueState (or a look-alike); ``cache.keys`` holds the initial keys once loaded."""
    pdf = pdf.iloc[np.argsort(pdf[SEQ_COLUMN].to_numpy(), kind="stable")].reset_index(drop=True)
    if present.exists():
        here = bool(present.get()[0])
    else:
        if cache.keys is None:
            cache.keys = spec.initial_keys()
        here = key in cache.keys
    reasons = pdf[REASON_COLUMN].tolist()
    for i, op in enumerate(pdf[OP_COLUMN].tolist()):
        if reasons[i] is not None and reasons[i] == reasons[i]:
            continue
        if op == DELETE:
            if not here:
                reasons[i] = row_validation.unknown_key_reason(key.item() if isinstance(key, np.generic) else key,
                                                               spec.table)
                continue
            here = False
        else:
            here = True
    present.update((here,))
    return pdf.assign(**{REASON_COLUMN: pd.Series(reasons, dtype=object)})


@dataclass
class TypedUpdates:
    """A stream of updates to one table as the range and join streams read it (from ``checked_updates``):
    ``df`` the checked stream, ``typed`` each table column (canonical type), ``op`` ``'upsert'``/``'delete'``,
    ``order`` the apply order (= the ``seq`` of notifications), ``reason`` why a row is rejected (null when
    valid), ``key`` the key (never null), ``key_type`` its canonical type; ``seq_given``: ``order`` is the
    ``seq`` (always, now that ``checked_updates`` numbers every row)."""
    df: object
    typed: dict
    op: object
    order: object
    reason: object
    key: object
    key_type: str
    seq_given: bool


def typed_updates(streaming_df, table_def) -> TypedUpdates:
    """``streaming_df`` (raw, or already ``checked_updates``) as :class:`TypedUpdates`: unknown or missing
    columns raise ``BadUpdate``; malformed rows carry their reason (module docstring)."""
    from pyspark.sql import functions as F

    df = streaming_df if REASON_COLUMN in streaming_df.columns else checked_updates(streaming_df, table_def)
    typed = {c: F.col(c) for c in table_def.column_names}
    op = F.when(F.col(OP_COLUMN) == F.lit(DELETE), F.lit("delete")).otherwise(F.lit("upsert"))
    order = F.coalesce(F.col(SEQ_COLUMN), F.lit(_NO_SEQ).cast("bigint"))
    key_type = _canonical_type(table_def.type_of(table_def.key))
    key = typed[table_def.key]
    if key_type in ("bigint", "double"):  # keep a pandas integer column free of nulls (rejected anyway)
        key = F.coalesce(key, F.lit(0).cast(key_type))
    return TypedUpdates(df, typed, op, order, F.col(REASON_COLUMN), key, key_type, True)


def run_stream(spark, streaming_df, table_def, groups: dict, mode: str, schema: pa.Schema,
               engine_uid: str, name: str = "range_min_group_stream", stream_id: str | None = None, control=None,
               shards: dict | None = None):
    """The streaming DataFrame of notifications. ``groups``: group_id -> (x column, y column or None,
    base, y is text, second box attribute or None), ``base`` being the group's base snapshot in a file
    (``replicas.StoredValue``; or a ``_Deferred``); ``name``:
    what Spark's EXPLAIN calls the stateful operator; ``stream_id``: the stream's counters (``new_stream_id``;
    None: new ones).  ``streaming_df``: raw updates, or ``checked_updates`` (then rows with a reason are
    emitted as ``rejected`` by the first group; the engine passes only the valid ones).  ``control``: the
    stream's directory (``stream_control.StreamControl``), through which the engine adds groups and changes
    subscriptions while the stream runs; each micro-batch's rows go to every group it hosts then
    (``<name>_route``, a ``mapInArrow`` that reads the micro-batch's plan there).  ``shards``: group_id -> (x1 cut
    points, the stored ``ShardBase`` of each shard) of the RANGE_MIN / RANGE_MAX groups run in two stages, (None,
    the stored ``RangeShardBase`` of each shard, the k values stage 1 paints for) of the top-k / DISTINCT / aggregate
    ones (their ``base`` without subscriptions; a ``unicast`` stream: :func:`range_shard_stage`).  A box group in
    subscription shards is one ``groups`` entry per shard, keyed ``<group>#b<j>`` (``box.stream_shards.shard_key``),
    its base the shard's (every row, its subscriptions) and a sixth element, ``j``; a two-stage RANGE_AGG / DISTINCT /
    MIN / MAX group with its rows in X zones is one entry per zone, keyed ``<group>#r<i>``
    (``range_zone_stream.zone_keys``), its base the table's rows and a sixth element, its ``StreamZone`` (its
    ``shards`` entry under the group's id)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    u = typed_updates(streaming_df, table_def)
    if stream_id is None:
        stream_id = new_stream_id()
    shards = shards or {}
    spec = StreamSpec(engine_uid, stream_id, table_def.name, u.key_type, mode, output_schema(schema),
                      {gid: GroupSpec(gid, x, y, base, text, x2, **_part_fields(gid, part, shards))
                       for gid, (x, y, base, text, x2, *part) in groups.items()},
                      min(groups), u.seq_given, _STATS.get(stream_id), control, table_def.key)
    first = stage_one_spec(spec)
    staged = first is not spec
    routed = StructType([StructField("group_id", StringType(), False), StructField("key", _spark_type(u.key_type)),
                         StructField("x", DoubleType()), StructField("y", DoubleType()), StructField("t", StringType()),
                         StructField("x2", DoubleType()), StructField("op", StringType(), False),
                         StructField("ord", LongType(), False), StructField("reason", StringType())])
    rows = u.df.select(*table_def.column_names, OP_COLUMN, SEQ_COLUMN, REASON_COLUMN).mapInArrow(
        _route_function(spec, to_arrow_schema(routed), f"{name}_route"), routed)
    out = stateful.run(rows.groupBy("group_id"), RANGE_GROUPS, first, stateful.output_ddl(first.schema), name)
    if staged:
        out = range_shard_stage(out, first, spec.schema, name)
    out.sparksub_stream_id = stream_id  # for stream_stats(out)
    return out


# ---- a large RANGE_MIN / RANGE_MAX group in two stages (unicast; issue 16 item 4) -----------------------------
def _part_fields(gid: str, part: list, shards: dict) -> dict:
    """A GroupSpec's fields from ``run_stream``'s entry beyond the first five: a box shard's number, or a zone's
    ``StreamZone`` (its two-stage fields are its group's)."""
    zone = part[0] if part and isinstance(part[0], StreamZone) else None
    if zone is not None:
        return {**_staged_fields(shards.get(zone.group_id)), "zone": zone}
    return {**_staged_fields(shards.get(gid)), "box_shard": part[0] if part else None}


def _staged_fields(shards: tuple | None) -> dict:
    """A GroupSpec's two-stage fields from ``run_stream``'s ``shards`` entry: ``(x1 cuts, stored ShardBases)`` for
    RANGE_MIN / RANGE_MAX, ``(None, stored RangeShardBases, painted k values)`` for top-k, DISTINCT, aggregates."""
    if shards is None:
        return {}
    cuts, stored, *ks = shards
    if cuts is None:
        return {"shards": tuple(stored), "hashed": True, "ks": tuple(ks[0]) if ks else ()}
    return {"shards": tuple(stored), "cuts": tuple(cuts)}


def stage_one_spec(spec: StreamSpec) -> StreamSpec:
    """The stateful operator's spec: ``spec`` itself, or, with groups in two stages, its schema with the message
    columns stage 2 reads (:data:`MESSAGE_FIELDS`; :data:`CLASS_MESSAGE_FIELDS` too for a top-k, DISTINCT or
    aggregate group)."""
    staged = [g for g in spec.groups.values() if g.staged(spec.mode)]
    if not staged:
        return spec
    more = CLASS_MESSAGE_FIELDS if any(g.hashed for g in staged) else ()
    zones = ZONE_MESSAGE_FIELDS if any(g.zone is not None for g in staged) else ()
    zones += MIN_ZONE_FIELDS if any(g.zone is not None and not g.hashed for g in staged) else ()
    return dataclasses.replace(spec, schema=pa.schema([*spec.schema, *MESSAGE_FIELDS, *more, *zones]))


def range_shard_stage(stage1, spec: StreamSpec, schema: pa.Schema, name: str):
    """Stage 2 over the stateful operator's output ``stage1`` (``spec.schema``: the stream's columns and
    :data:`MESSAGE_FIELDS`; module docstring): each message of a group run in two stages to the subscription
    shards whose x1 interval meets its ``(OUTER_L, INNER_L]`` (``visited_shards``), one Spark task per shard, which
    matches them (S-UN, 000 §3.3: ``ShardOperator.unicast``) -- a top-k / DISTINCT / aggregate group's to every
    shard of the group, its change rows each to its own shard (:func:`_class_shard_rows`); every other row (another
    group's notification, a rejected row) passes through a shard's task, spread over them.  The result in
    ``schema``, the stream's."""
    slots = shard_slots(spec)
    return shard_stage.shard_stage(stage1, spec.schema, len(slots), _range_targets(spec, slots),
                                   _range_match(spec, slots, schema), schema, name)


def shard_slots(spec: StreamSpec) -> list:
    """Stage 2's slots: ``(group id, shard)`` of every shard of every group in two stages (a zoned group's once)."""
    return [(gid, j) for gid, g in spec.staged_groups().items() for j in range(len(g.shards))]


def _range_targets(spec: StreamSpec, slots: list):
    first = {}
    for i, (gid, _) in enumerate(slots):
        first.setdefault(gid, i)
    staged = spec.staged_groups()
    hashed = {gid for gid in first if staged[gid].hashed}
    cuts = {gid: np.asarray(staged[gid].cuts, dtype=np.float64) for gid in first if gid not in hashed}

    def targets(rb):
        """A message to the shards it can match in (000 §2.3.2: a message's rectangle meets few x1 intervals when
        its Mar is short); any other row to one task, round robin."""
        message = pc.is_valid(rb.column("m_msg_no"))
        rows = rb.filter(pc.invert(message))
        yield rows, np.arange(rows.num_rows) % len(slots)
        gids = rb.column("group_id")
        for gid, at in first.items():
            rows = rb.filter(pc.and_(message, pc.fill_null(pc.equal(gids, gid), False)))
            if not rows.num_rows:
                continue
            if gid in hashed:   # shards by id: every message to every shard (as publish), a change row to its own
                change = pc.is_valid(rows.column("m_shard"))
                signals = rows.filter(change)
                if signals.num_rows:
                    yield signals, at + signals.column("m_shard").to_numpy().astype(np.int64)
                rows = rows.filter(pc.invert(change))
                for j in range(len(staged[gid].shards)):
                    yield rows, at + j
                continue
            if staged[gid].zone is not None:   # a zoned RANGE_MIN group: each zone's Round1 to every shard
                rows = yield from _min_zone_records(rows, at, len(cuts[gid]) + 1)
            lo, hi = visited_shards(cuts[gid], pa.table({"outer_l": rows.column("m_outer_l"),
                                                         "inner_l": rows.column("m_inner_l")}))
            for j in range(len(cuts[gid]) + 1):
                yield rows.filter(pa.array((lo <= j) & (j <= hi))), at + j
    return targets


def _range_match(spec: StreamSpec, slots: list, schema: pa.Schema):
    staged = spec.staged_groups()

    def match(i: int, part: pa.Table):
        """A shard's messages of one micro-batch -> its subscriptions' unicast rows, the other rows as they are."""
        message = pc.is_valid(part.column("m_msg_no"))
        passing = part.filter(pc.invert(message))
        if passing.num_rows:
            yield passing.select(schema.names)
        mine = part.filter(message).sort_by("m_msg_no")   # the group's order: by seq, step, message (000 §3.3)
        if not mine.num_rows:
            return
        gid, j = slots[i]
        if staged[gid].hashed:
            rows = _class_shard_rows(spec, gid, j, mine)
            if spec.stats is not None:
                spec.stats.add({"notifications": rows.num_rows})
            yield stateful.output_table(schema, rows.select(UNICAST_ITEMS_SCHEMA.names).cast(UNICAST_ITEMS_SCHEMA))
            return
        if staged[gid].zone is not None:   # a zoned RANGE_MIN group: round 2 and the merge first
            messages, old = min_zone_messages(gid, mine)
        else:
            old = {q: v for q, v in zip(mine.column("seq").to_pylist(), mine.column("m_old_value").to_pylist())
                   if v is not None}
            messages = pa.table({"group_id": mine.column("group_id"), "seq": mine.column("seq"),
                                 "step": mine.column("m_step"), "op": mine.column("op"),
                                 **{c: mine.column(f"m_{c}") for c in _RECTANGLE}})
        rows = _range_shard(spec, gid, j).unicast(messages, old)
        if spec.stats is not None:
            spec.stats.add({"notifications": rows.num_rows})
        yield stateful.output_table(schema, rows.select(UNICAST_SCHEMA.names).cast(UNICAST_SCHEMA))
    return match


def _min_zone_records(rows: pa.Table, at: int, n_shards: int):
    """Stage 2's routing of a zoned RANGE_MIN / RANGE_MAX group's rows: yields each zone's ``Round1`` row to every
    shard of the group (slots ``at ..``: every shard runs round 2 for the group's deferred steps, whose rectangles no
    one knows before it, and keeps what visits it; they are few) and returns the settled messages, which go where the
    whole group's would (``visited_shards``)."""
    record = pc.is_valid(rows.column(ROUND1_COLUMN))
    records = rows.filter(record)
    if records.num_rows:
        for j in range(n_shards):
            yield records, at + j
    return rows.filter(pc.invert(record))


def min_zone_messages(gid: str, mine: pa.Table) -> tuple[pa.Table, dict]:
    """A shard's rows of a zoned RANGE_MIN / RANGE_MAX group in one micro-batch (the settled messages that visit it,
    every zone's ``Round1`` row) -> ``(messages, X-moves' old Y)`` as the whole group's stage 1 would have sent them:
    round 2 and the merge, ``zone_stream.shard_messages``."""
    record = pc.is_valid(mine.column(ROUND1_COLUMN))
    round1s = [round1_of(text) for text in mine.filter(record).column(ROUND1_COLUMN).to_pylist()]
    settled = mine.filter(pc.invert(record))
    settled = pa.table({"group_id": settled.column("group_id"), "seq": settled.column("seq"),
                        "step": settled.column("m_step"), "op": settled.column("op"),
                        **{c: settled.column(f"m_{c}") for c in _RECTANGLE},
                        "_v": settled.column(VERSION_COLUMN), "_i": settled.column("m_msg_no")})
    return shard_messages(gid, settled, round1s)


def _class_shard_rows(spec: StreamSpec, gid: str, j: int, mine: pa.Table) -> pa.Table:
    """Shard ``j`` of a two-stage top-k / DISTINCT / aggregate group over its rows of the micro-batch (``mine``, in
    the group's message order): the subscription change stage 1 sent it first (its ``ShardChange``), then the
    messages (002 §II-A: each subscriber applies them in order) -> its subscriptions' unicast rows.  The shard is
    the worker's, brought to this micro-batch (:func:`_class_shard`); what it applied is logged under the
    micro-batch's id, and the worker keeps it one micro-batch on."""
    batch = stream_control.batch_id()
    if batch is None:
        raise RuntimeError("a two-stage range group's shard runs in a streaming task only")
    shard, base_at, logged = _class_shard(spec, gid, j, batch)
    zone = spec.staged_groups()[gid].zone
    signalled = pc.any(pc.is_valid(mine.column("m_shard"))).as_py()
    if not signalled:
        change = None
    elif zone is None:
        change = spec.control.shard_change(gid, j, batch)
    else:   # each zone's change, its partial seeds, added up: the whole group's stage 1 would have sent this
        change = merged_change([spec.control.shard_change(gid, j, batch, zone=i) for i in range(zone.n_zones)],
                               zone.group_class.merge_seeds, zone.option)
    if change is not None:
        shard.change(change)
    mine = mine.filter(pc.is_null(mine.column("m_shard")))
    if zone is not None:   # the zones' messages as the whole group emits them (range_zones.merge_zone_messages)
        mine = merged_messages(mine, mine.column_names)
    messages = pa.table({"group_id": mine.column("group_id"), "seq": mine.column("seq"), "op": mine.column("op"),
                         **{c: mine.column(f"m_{c}") for c in _CLASS_MESSAGE}}).cast(RANGE_MESSAGE_SCHEMA)
    rows = shard.unicast(messages) if messages.num_rows else UNICAST_ITEMS_SCHEMA.empty_table()
    kept = None if shard.stateless else messages
    spec.control.write_shard_log(gid, j, batch, ShardLogEntry(change, kept))
    logged += 0 if kept is None else kept.num_rows
    if batch + 1 - base_at >= SHARD_COMPACTION_BATCHES or logged >= SHARD_COMPACTION_MESSAGES:
        # a compaction: the shard as it stands is the base of the next micro-batch (its logs before it go)
        spec.control.write_shard_base(gid, j, batch + 1, shard)
        base_at, logged = batch + 1, 0
        if spec.stats is not None:
            spec.stats.add({"shard_compactions": 1})
    _CLASS_SHARD_WORKER.keep((spec.engine_uid, spec.stream_id, gid, j), batch + 1, (shard, base_at, logged))
    return rows


def _class_shard(spec: StreamSpec, gid: str, j: int, batch: int) -> tuple:
    """``(shard, its base's micro-batch, messages logged since)``: shard ``j`` of a two-stage top-k / DISTINCT /
    aggregate group as of the start of micro-batch ``batch``.  The worker's copy (this streaming query run's) when
    it stands there; one behind (another worker ran the shard's last tasks) caught up from the shard's logs; one
    ahead (a retried or replayed micro-batch) or none rebuilt: the newest base at or before ``batch`` (a compaction,
    else the stream's start) and the logs from it (``stream_stats``: ``shard_cache_hits``, ``shard_caught_up``,
    ``shard_builds``)."""
    got = _CLASS_SHARD_WORKER.take((spec.engine_uid, spec.stream_id, gid, j))
    if got is not None and got[0] <= batch:
        at, (shard, base_at, logged) = got
        how = "shard_cache_hits" if at == batch else "shard_caught_up"
    else:
        stored = spec.control.shard_base(gid, j, batch)
        if stored is None:
            at, base_at, shard = 0, 0, shard_of_base(_loaded(spec.staged_groups()[gid].shards[j].get()))
        else:
            at = base_at = stored[0]
            shard = shard_of_base(stored[1])
        logged, how = 0, "shard_builds"
    for _, entry in spec.control.shard_logs(gid, j, at, batch):
        shard.replay(entry)
        logged += 0 if entry.messages is None else entry.messages.num_rows
    if spec.stats is not None:
        spec.stats.add({how: 1})
    return shard, base_at, logged


def _zoned_seed_task(rows_base, zones: list, group_id: str, key_type, ids, x1, x2, k, paths: list):
    def range_zone_stream_shard_seeds(batches):
        for _ in batches:   # one empty input row: the task's trigger
            pass
        try:
            snap = _loaded(rows_base.read())

            def zone_groups():   # one zone's core at a time (the task holds one zone's rows' index at most)
                for zone in zones:
                    keys, xs, ys = zone_rows(snap.keys, snap.xs, snap.ys, zone.cuts, zone.zone)
                    yield dataclasses.replace(snap, keys=keys, xs=xs, ys=ys).build()
            bases = zoned_shard_bases(zone_groups(), group_id, ids, x1, x2, k, len(paths), key_type, zones[0].cuts)
            for j, path in enumerate(paths):
                write_value(path, bases[j])
            snap = bases = None
            release_freed_memory()   # the rows' base and the zones' cores: this worker goes on to run other tasks
            error = None
        except Exception as err:  # noqa: BLE001 - raised on the driver, naming the group
            error = f"{type(err).__name__}: {err}"
        yield pa.RecordBatch.from_pydict({"error": pa.array([error], pa.string())})
    return range_zone_stream_shard_seeds


def seed_zoned_stream_shards(spark, rows_base, zones: list, group_id: str, key_type, ids, x1, x2, k,
                             paths: list) -> list:
    """A stream's subscription shards of a RANGE_AGG / RANGE_DISTINCT group whose rows it keeps in X ``zones``
    (``StreamZone`` each), at its start: one Spark task reads the rows' base, builds each zone's core in turn and adds
    the zones' exact partial states of each shard's ranges up (``zoned_shard_bases``: ``AggGroup.merge_seeds``; a
    DISTINCT shard starts from nothing), writing shard j's base to ``paths[j]`` -- the driver holds neither a core
    nor a result (as ``range_shards.seed_stream_shards``).  The bases, stored."""
    task = _zoned_seed_task(rows_base, list(zones), group_id, key_type, ids, x1, x2, k, list(paths))
    error = spark.range(0, 1, 1, 1).mapInArrow(task, "error string").collect()[0][0]
    if error is not None:
        raise RuntimeError(f"seeding the stream's subscription shards of group {group_id!r} from its X zones failed "
                           f"in its Spark task: {error}")
    return [StoredValue(path) for path in paths]


def _range_shard(spec: StreamSpec, gid: str, j: int):
    """Shard ``j`` of group ``gid`` with the subscriptions of the micro-batch's change version: the worker's (the
    same while a change leaves the shard as it was), else built from its base file (the stream's start, or the
    change that last wrote it: ``stream_control.publish_range_shards``)."""
    version = spec.control.version(gid, stream_control.batch_id()) if spec.control is not None else 0
    origin = spec.control.range_shard_origin(gid, version, j) if version else 0

    def build():
        base = spec.staged_groups()[gid].shards[j].get() if not origin else spec.control.range_shard(gid, version, j)
        return _loaded(base).build()   # a ShardBase -> its ShardOperator
    return shard_stage.cached_shard(_SHARD_WORKER, spec.stats, (spec.engine_uid, spec.stream_id, gid, j, origin),
                                    build)


def _route_function(spec: StreamSpec, out: pa.Schema, name: str):
    def route(batches):
        """Every checked row to every group the micro-batch hosts (those the stream started with and those
        its plan adds), as the group reads it: ``key, x, y, t, x2`` (``routed_rows``), ``op``, ``ord``,
        ``reason``."""
        plan = spec.control.plan(stream_control.batch_id()) if spec.control is not None else None
        groups = sorted(spec.hosted(plan).items())
        for rb in batches:
            if not rb.num_rows:
                continue
            table = pa.Table.from_batches([rb])
            for gid, g in groups:
                cols = routed_rows(table, g, spec.key)
                cols["group_id"] = pa.array([gid] * table.num_rows, pa.string())
                yield from pa.table({f.name: cols[f.name] for f in out}).cast(out).to_batches()
    route.__name__ = name
    return route


def routed_rows(table: pa.Table, g: GroupSpec, key: str) -> dict:
    """Checked rows (``checked_updates``' columns) as group ``g`` reads them: ``key``; X, Y and a box's X2 as
    doubles (a COUNT(*)'s Y a constant 0, so that only a null X leaves the ranges; a text Y in ``t``);
    ``op`` ('upsert' / 'delete'); ``ord`` (the seq); ``reason`` (null: valid)."""
    n = table.num_rows
    no_double, no_text = pa.nulls(n, pa.float64()), pa.nulls(n, pa.string())
    if g.y is None:
        y, t = pa.array(np.zeros(n)), no_text
    elif g.text:
        y, t = no_double, table.column(g.y).cast(pa.string())
    else:
        y, t = table.column(g.y).cast(pa.float64()), no_text
    keys = table.column(key)
    if pa.types.is_integer(keys.type) or pa.types.is_floating(keys.type):
        keys = pc.fill_null(keys, 0)   # a null key is rejected anyway: keep a pandas integer column null-free
    reason = table.column(REASON_COLUMN) if REASON_COLUMN in table.column_names else no_text
    return {"key": keys, "x": table.column(g.x).cast(pa.float64()), "y": y, "t": t,
            "x2": table.column(g.x2).cast(pa.float64()) if g.x2 is not None else no_double,
            "op": pc.if_else(pc.equal(table.column(OP_COLUMN), DELETE), "delete", "upsert"),
            "ord": pc.fill_null(table.column(SEQ_COLUMN), _NO_SEQ), "reason": reason}


def stream_stats(df_or_id) -> dict:
    """The counters of one stream (a DataFrame returned by ``run_stream``/``Engine.stream``, or its
    ``sparksub_stream_id``), summed over all tasks so far: micro_batches (group micro-batches applied),
    seeded (groups whose state was seeded from the base snapshot), cache_hits, caught_up (a stale
    cached index brought up to date from the log ring), rebuilt (index rebuilt from the state store),
    updates (valid rows applied, summed over groups), rejected (rows set aside),
    notifications (output rows other than rejected ones), subscription_changes (a group's micro-batch applied
    another subscription set than its previous one: ``stream_control``), groups_added (groups the stream
    took on while it ran), shard_builds / shard_cache_hits (a two-stage join or range group's subscription shard
    built from its base file / found in the worker, ``join_stream``, :func:`range_shard_stage`; a two-stage range
    group's notifications are counted by its shards), shard_caught_up / shard_compactions (a two-stage top-k,
    DISTINCT or aggregate shard brought up to date from its logs / given a new base, :func:`_class_shard`; a box
    group's shard partition counts its build, cache hit and catch-up as ``shard_builds`` / ``shard_cache_hits`` /
    ``shard_caught_up`` too), zones / zone_batches / zone_builds (a two-stage RANGE_AGG / RANGE_DISTINCT / RANGE_MIN /
    RANGE_MAX / RANGE_TOPK group's X zones: the zone partitions the stream started with, the micro-batches they
    applied, a zone's index seeded or rebuilt), halo_refills (a top-k zone's halos read anew from its state store
    before a micro-batch they were too shallow for, ``topk/zone_stream.py``).  Read from the stream's counter files
    (``replicas.CounterFile``), which every task adds to."""
    sid = df_or_id if isinstance(df_or_id, str) else df_or_id.sparksub_stream_id
    counters = _STATS.get(sid)
    value = counters.read() if counters is not None else {}
    return {k: int(value.get(k, 0)) for k in STAT_NAMES}


def _spark_type(canonical: str):
    """The PySpark type of a canonical Spark SQL type name (``_canonical_type``)."""
    from pyspark.sql import types as T
    return {"bigint": T.LongType(), "double": T.DoubleType(), "string": T.StringType(), "boolean": T.BooleanType(),
            "timestamp": T.TimestampType(), "date": T.DateType()}[canonical]


def _canonical_type(spark_type: str) -> str:
    if spark_type in _INTEGRAL:
        return "bigint"
    if spark_type in ("float", "double", "decimal"):
        return "double"
    return spark_type


@dataclass
class GroupState:
    """One group's state variables (the handles of the state store; in tests, any look-alike)."""
    rows: object      # MapState  key -> (x, y, t, x2)
    meta: object      # ValueState (applied, rebuilds)
    log: list         # LOG_SLOTS ListStates: slot b % LOG_SLOTS holds micro-batch b's valid rows
    subs: object = None  # ValueState (stream id, change version): the subscriptions the last micro-batch applied


class RangeGroupLogic(StreamLogic):
    """A range group on the one stream runtime (``stateful``): one partition per group, its state the module
    docstring's (rows, meta, the log ring, subs)."""

    def state_variables(self, spec: StreamSpec) -> dict:
        kt = spec.key_type
        log = stateful.list_state(f"batch long, key {kt}, x double, y double, t string, x2 double, op int, seq long")
        return {"rows": stateful.map_state(f"key {kt}", "x double, y double, t string, x2 double"),
                "meta": stateful.META, **{f"log{i}": log for i in range(LOG_SLOTS)}, "subs": stateful.SUBS}

    def state(self, handles) -> GroupState:
        return GroupState(handles["rows"], handles["meta"], [handles[f"log{i}"] for i in range(LOG_SLOTS)],
                          handles["subs"])

    def apply(self, spec: StreamSpec, key, pdf: pd.DataFrame, state: GroupState) -> pd.DataFrame:
        return apply_micro_batch(spec, key, pdf, state)


RANGE_GROUPS = RangeGroupLogic()


def _processor_class():
    """The range groups' processor, constructed as ``(spec)`` (tests drive it with ``TwsTester``)."""
    return functools.partial(stateful.processor_class(), RANGE_GROUPS)


@dataclass
class _Applied:
    """One micro-batch applied to a group (``_apply_frame``): its notifications, rejected rows, the rows it
    applied (to log) and the state writes (key -> (x, y, t, x2), None: deleted)."""
    notes: object
    rej_seq: list
    rej_reason: list
    logged: list
    final: dict


def apply_micro_batch(spec: StreamSpec, gid: str, pdf: pd.DataFrame, state: GroupState) -> pd.DataFrame:
    """Apply one micro-batch of one group (``pdf``: key, x, y, [t, x2,] op, ord, reason) against its state:
    first the subscription changes the micro-batch applies (``stream_control``: the group is rebuilt from the
    state store's rows and the new subscriptions), then its rows."""
    stats = dict.fromkeys(STAT_NAMES, 0)
    stats["micro_batches"] = 1
    pdf = pdf.iloc[np.argsort(pdf["ord"].to_numpy(), kind="stable")]
    ident = (spec.engine_uid, gid, spec.stream_id)
    gspec = spec.group(gid)
    batch = stream_control.batch_id() if spec.control is not None else None
    # stage 1 of a group in two stages holds no subscription: their changes go to the shards alone
    changes = spec.control is not None and not gspec.staged(spec.mode)
    version = max(gspec.version, spec.control.version(gid, batch) if changes else 0)
    group, null_keys, applied, rebuilds, how, skip = _group_for(spec, gid, gspec, state, ident, version, batch, stats)
    stats[how] = 1
    if gspec.box_shard is not None:   # a box group's subscription shard: counted as the shards are too
        stats[_BOX_SHARD_HOW[how]] = 1
    if gspec.zone is not None:   # an X zone of a two-stage aggregate group
        stats["zone_batches"] = 1
        stats["zone_builds"] = int(how in ("seeded", "rebuilt"))
    signals, applies = None, version
    if gspec.staged(spec.mode) and gspec.hashed:
        # a top-k / DISTINCT / aggregate group in two stages: its change goes to the shards, seeded from these rows
        # (its stage-1 index holds no subscription: cached as of version 0 whatever the shards apply)
        applies = spec.control.version(gspec.logical_id, batch) if spec.control is not None else 0
        signals = _stage_one_change(spec, gid, gspec, group, _version_applied(state.subs, spec.stream_id), applies,
                                    batch)
    stats["subscription_changes"] = note_subscriptions(state.subs, spec.stream_id, applies)

    # a group added while the stream runs whose base already holds this micro-batch's rows: nothing to apply
    # (a zone's index holds its zone's rows; its state store every row: a key held elsewhere is read there)
    # (read once per key: the delete check and a DISTINCT zone's old rows ask the same keys, before the writes)
    stored = functools.cache(lambda k: state.rows.getValue((k,))) if gspec.zone is not None else None
    refills = getattr(group, "refills", 0)   # a top-k zone's halos read anew from every row (the state store's)
    done = _apply_frame(spec, gid, gspec, group, null_keys, pdf.iloc[:0] if skip else pdf, applied, spec.mode,
                        stored, lambda: _stored_rows(state.rows, gspec.text)[:3])
    stats["halo_refills"] = getattr(group, "refills", 0) - refills
    if signals is not None:
        done.notes = signals if done.notes is None else pa.concat_tables([signals, done.notes],
                                                                         promote_options="default")
    _write_rows(state.rows, done.final)
    slot = state.log[applied % LOG_SLOTS]
    if done.logged:
        slot.put([(applied,) + r for r in done.logged])
    else:
        slot.clear()
    stateful.close_partition(state.meta, _WORKER, ident, applied, rebuilds, (group, null_keys, version))

    out = stateful.output_table(spec.schema, done.notes, done.rej_seq, done.rej_reason, by_seq=True)
    stats["updates"] = len(done.logged)
    stats["rejected"] = len(done.rej_seq)
    # (stage 1's messages are not notifications: stage 2 counts the rows it makes of them)
    stats["notifications"] = 0 if gspec.staged(spec.mode) else out.num_rows - len(done.rej_seq)
    if spec.stats is not None:
        spec.stats.add(stats)
    return out.to_pandas()


def _apply_frame(spec: StreamSpec, gid: str, gspec: GroupSpec, group, null_keys: set, pdf: pd.DataFrame,
                 applied: int, mode: str, stored=None, every_row=None) -> _Applied:
    """Apply ``pdf``'s rows (in ``ord`` order) to ``group`` in ``mode``: a delete of a key the group does not
    hold is rejected (emitted by the primary group alone); returns what :class:`_Applied` holds.  ``stored(key)``:
    the table's row ``(x, y, t, x2)`` of a key the group's index may not hold (an X zone's: held by another zone)
    before the micro-batch, None if none; ``every_row()``: every row of the table then, (keys, xs, ys) (a top-k
    zone's halos refilled, :func:`stage_one_topk_zone`)."""
    n = len(pdf)
    keys = pdf["key"].tolist()
    xs = pdf["x"].to_numpy(dtype=np.float64, na_value=np.nan)
    ys = pdf["y"].to_numpy(dtype=np.float64, na_value=np.nan)
    ts = [None if v is None or v != v else str(v) for v in pdf["t"].tolist()] if "t" in pdf else [None] * len(pdf)
    x2s = pdf["x2"].to_numpy(dtype=np.float64, na_value=np.nan) if "x2" in pdf else np.full(len(pdf), np.nan)
    ops = pdf["op"].tolist()
    reasons = pdf["reason"].tolist()
    if spec.seq_given:
        seqs = pdf["ord"].to_numpy(dtype=np.int64)
    else:
        seqs = (np.int64(applied) << np.int64(32)) + np.arange(n, dtype=np.int64)

    valid = np.zeros(n, dtype=bool)
    valid_ops = np.zeros(n, dtype=np.int8)
    final: dict = {}  # key -> (x, y, t, x2) or None (deleted): the state writes of this micro-batch
    rej_seq, rej_reason = [], []
    core = _core_of(group)
    for i in range(n):
        reason = reasons[i]
        if reason is None or reason != reason:  # None or NaN (pandas' null)
            k = keys[i]
            if ops[i] == "delete":
                exists = final[k] is not None if k in final else (k in null_keys or core.get(k) is not None
                                                                  or (stored is not None and stored(k) is not None))
                if exists:
                    final[k] = None
                    valid[i], valid_ops[i] = True, DELETE
                else:
                    reason = row_validation.unknown_key_reason(k, spec.table)
            else:
                final[k] = (xs[i], ys[i], ts[i], x2s[i])
                valid[i], valid_ops[i] = True, UPSERT
        if not valid[i] and gid == spec.primary:
            rej_seq.append(None if seqs[i] == _NO_SEQ else int(seqs[i]))
            rej_reason.append(str(reason))

    idx = np.flatnonzero(valid)
    batch = _batch([keys[i] for i in idx], xs[idx], ys[idx], [ts[i] for i in idx] if gspec.text else None,
                   x2s[idx] if gspec.x2 else None, valid_ops[idx], seqs[idx])
    if not len(idx):
        notes = None
    elif gspec.staged(mode) and isinstance(group, MinStreamZone):   # a zoned RANGE_MIN group: DS-CN's round 1
        notes = stage_one_min_zone(group, batch)
    elif gspec.staged(mode) and isinstance(group, TopkStreamZone):   # a zoned top-k group: its halos, its steps
        notes = stage_one_topk_zone(group, batch, every_row)
    elif gspec.staged(mode) and gspec.zone is not None:   # stage 1 of a zoned DISTINCT / aggregate group: its part
        notes = stage_one_distinct_zone(group, batch, stored, gspec.text) if group.group.kind == "RANGE_DISTINCT" \
            else stage_one_zone(group, batch)
    elif gspec.staged(mode) and gspec.hashed:   # stage 1 of a top-k / DISTINCT / aggregate group: per update
        notes = stage_one_classes(group, batch)
    elif gspec.staged(mode):   # stage 1: the messages, with what unicast needs beside them
        notes = stage_one(group, batch, step0_old_values(group.core, batch.column("key").to_pylist(), xs[idx],
                                                         ys[idx], valid_ops[idx], seqs[idx]))
    else:
        notes = group.apply(batch, mode)
    _track_null_keys(null_keys, final, gspec)
    logged = [(keys[i], _opt(xs[i]), _opt(ys[i]), ts[i], _opt(x2s[i]), int(valid_ops[i]), int(seqs[i])) for i in idx]
    return _Applied(notes, rej_seq, rej_reason, logged, final)


def stage_one(group, batch: pa.Table, old_values: dict) -> pa.Table:
    """Stage 1 of a RANGE_MIN / RANGE_MAX group in two stages: ``batch`` applied to ``group`` (its rows, no
    subscription) as S-CN's reformulated messages (000 §2.3.1: their number and content do not depend on the
    subscriptions), in the stream's output columns ``op``, ``seq``, ``group_id`` and :data:`MESSAGE_FIELDS`:
    each message's X-move old Y (``old_values``, ``subscription_shards.step0_old_values``) and place."""
    messages = group.apply(batch, "reformulated")
    n = messages.num_rows
    seqs = messages.column("seq").to_pylist()
    return pa.table({"group_id": messages.column("group_id"), "seq": messages.column("seq"),
                     "op": messages.column("op"), "m_step": messages.column("step"),
                     **{f"m_{c}": messages.column(c) for c in _RECTANGLE},
                     "m_old_value": pa.array([old_values.get(q) for q in seqs], pa.float64()),
                     "m_msg_no": pa.array(np.arange(n, dtype=np.int64))})


def stage_one_classes(group, batch: pa.Table) -> pa.Table:
    """Stage 1 of a RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG group in two stages: ``batch`` applied to ``group`` (its
    rows, no subscription) in ``reformulated`` form, each update's messages at its seq (top-k: Paint-Dense, 002
    §III-A, which the base's ``rows_extra`` names; DISTINCT's Mar messages and the aggregate deltas, 000 §4, are per
    update anyway), in the stream's ``group_id``, ``seq``, ``op`` and the ``m_``-prefixed message columns."""
    messages = group.apply(batch, "reformulated")
    return pa.table({"group_id": messages.column("group_id"), "seq": messages.column("seq"),
                     "op": messages.column("op"), **{f"m_{c}": messages.column(c) for c in _CLASS_MESSAGE}})


def stage_one_zone(zone, batch: pa.Table) -> pa.Table:
    """Stage 1 of one X zone of a two-stage RANGE_AGG group (a DISTINCT one's messages): the group's whole
    micro-batch, of which the zone takes its part (``range_zones.RowsZone``: an upsert at an X it owns, a delete of a
    key it holds; 000 §4: the message at X is the zone's alone), as :func:`stage_one_classes`' columns plus the zone
    and each message's half of the update (:data:`ZONE_MESSAGE_FIELDS`), by which stage 2 merges the zones'
    messages."""
    messages = zone.apply(batch, "reformulated")
    return pa.table({"group_id": messages.column("group_id"), "seq": messages.column("seq"),
                     "op": messages.column("op"), **{f"m_{c}": messages.column(c) for c in _CLASS_MESSAGE},
                     ZONE_COLUMN: pa.array(np.full(messages.num_rows, zone.zone, np.int32)),
                     PART_MESSAGE_COLUMN: messages.column(PART_COLUMN)})


def stage_one_distinct_zone(zone, batch: pa.Table, stored, text: bool) -> pa.Table:
    """Stage 1 of one X zone of a two-stage RANGE_DISTINCT group: :func:`stage_one_zone`'s messages (their Mar ends
    open where the zone holds no tuple of the value on that side, 000 §4) and the zone's answers to every question
    another zone's message of the micro-batch can ask (``distinct/zone_stream.batch_answers``), which stage 2 closes
    the ends with (``range_zone_stream.merged_messages``).  The keys' rows before the micro-batch: the zone's own
    from its index, the others' from its state store (``stored``), which holds every row."""
    core = zone.group.core
    old = {}
    for key in set(batch.column("key").to_pylist()):   # before the zone applies the batch
        old[key] = core.get(key) if key in core else _distinct_row(stored(key), text)
    messages = stage_one_zone(zone, batch)
    answers = answer_rows(zone.group.group_id, batch_answers(zone, batch, old))
    return pa.concat_tables([messages, answers], promote_options="default")


def stage_one_topk_zone(zone: TopkStreamZone, batch: pa.Table, every_row) -> pa.Table:
    """Stage 1 of one X zone of a two-stage RANGE_TOPK group: its halos made deep enough for the group's whole
    micro-batch -- refilled from ``every_row()``, the state store's rows, only when they are not
    (``topk/zone_stream.TopkStreamZone.ensure``) -- then :func:`stage_one_zone`'s messages: the Paint-Dense messages
    (002 §III-A) of the steps at the X the zone owns, each with its zone and half."""
    zone.ensure(batch, every_row)
    return stage_one_zone(zone, batch)


def _distinct_row(row, text: bool):
    """A state store row ``(x, y, t, x2)`` as a DISTINCT core holds it, ``(x, value)``; None: none, or in no range."""
    if row is None:
        return None
    x, value = row[0], row[2] if text else row[1]
    return None if x is None or _is_null(value) else (float(x), value)


def stage_one_min_zone(zone: MinStreamZone, batch: pa.Table) -> pa.Table:
    """Stage 1 of one X zone of a two-stage RANGE_MIN / RANGE_MAX group: DS-CN's round 1 (000 §2.3.2) of the zone's
    part of the group's whole micro-batch (``zone_stream.MinStreamZone.round1``) -- its settled messages in
    :func:`stage_one`'s columns, each with its version (:data:`VERSION_COLUMN`; ``m_msg_no`` its index in the zone's
    output; no ``m_old_value``: the shards read the X-moves' old Y from the records) -- and one row (``op``
    :data:`ZONE_ROUND1`, ``m_msg_no`` -1) carrying the zone's ``Round1`` to the shards, which run round 2."""
    messages, r1 = zone.round1(batch)
    n = messages.num_rows
    where = zone.zone.index
    settled = pa.table({"group_id": messages.column("group_id"), "seq": messages.column("seq"),
                        "op": messages.column("op"), "m_step": messages.column("step"),
                        **{f"m_{c}": messages.column(c) for c in _RECTANGLE},
                        "m_old_value": pa.nulls(n, pa.float64()), "m_msg_no": messages.column("_i"),
                        VERSION_COLUMN: messages.column("_v"), ZONE_COLUMN: pa.array(np.full(n, where, np.int32))})
    record = pa.table({"group_id": pa.array([zone.group_id], pa.string()), "seq": pa.nulls(1, pa.int64()),
                       "op": pa.array([ZONE_ROUND1], pa.string()), "m_msg_no": pa.array([-1], pa.int64()),
                       ZONE_COLUMN: pa.array([where], pa.int32()), ROUND1_COLUMN: pa.array([round1_text(r1)])})
    return pa.concat_tables([settled, record], promote_options="default")


def _core_of(group):
    """The rows' core of a stream partition's operator (a box group keeps its rows in a store; an X zone's group
    is its ``RowsZone``'s)."""
    if isinstance(group, RowsZone):
        return group.group.core
    return group.core if hasattr(group, "core") else group.store


def _version_applied(subs_state, stream_id: str) -> int:
    """The change version the group's previous micro-batch applied in this stream (0: the stream's start, or a
    state another stream left: a new stream's shard bases hold every subscription as of its start)."""
    was = tuple(subs_state.get()) if subs_state is not None and subs_state.exists() else None
    return int(was[1]) if was is not None and was[0] == stream_id else 0


def _stage_one_change(spec: StreamSpec, gid: str, gspec: GroupSpec, group, since: int, version: int,
                      batch: int | None) -> pa.Table | None:
    """Before a micro-batch's rows, in stage 1 of a top-k / DISTINCT / aggregate group in two stages: the k values
    painted for (002 §II-A: those of the change's subscriptions too), and, when the micro-batch moves the group from
    change ``since`` to ``version``, each shard's ``ShardChange`` -- the subscriptions born after ``since`` seeded
    from the rows as they stand -- written for the shard (``StreamControl.write_shard_change``) and one row per
    shard telling it so (``op`` :data:`SHARD_CHANGE`, ``m_shard``; ``m_msg_no`` -1: before the messages)."""
    logical, zone = gspec.logical_id, gspec.zone
    members = spec.control.subscriptions(logical, version) if version else None
    # an X zone seeds the added from its own rows: the shard adds the zones' partial states up (merged_change)
    rows_group = group if zone is None else group.group
    if rows_group.kind == "RANGE_TOPK":   # (a top-k zone paints for them too: its halo follows the largest k)
        rows_group.core.paint_for(painted_ks(members, gspec.ks))
    if version == since or members is None:
        return None
    if batch is None:
        raise RuntimeError("a subscription change of a two-stage group applies in a streaming task only")
    n = len(gspec.shards)
    for j, change in shard_changes(rows_group, members, since, version, n).items():
        spec.control.write_shard_change(logical, j, batch, change, zone=None if zone is None else zone.zone)
    signals = {"group_id": pa.array([logical] * n, pa.string()), "seq": pa.nulls(n, pa.int64()),
               "op": pa.array([SHARD_CHANGE] * n, pa.string()),
               "m_shard": pa.array(np.arange(n, dtype=np.int32)), "m_msg_no": pa.array(np.full(n, -1))}
    if zone is not None:
        signals[ZONE_COLUMN] = pa.array(np.full(n, zone.zone, np.int32))
    return pa.table(signals)


def _write_rows(rows_state, final: dict) -> None:
    """The state store: one write per key touched."""
    for k, v in final.items():
        if v is None:
            rows_state.removeKey((k,))
        else:
            rows_state.updateValue((k,), (_opt(v[0]), _opt(v[1]), v[2], _opt(v[3])))


def _group_for(spec: StreamSpec, gid: str, gspec: GroupSpec, state: GroupState, ident, version: int,
               batch: int | None, stats: dict):
    """(group, null_keys, applied, rebuilds, how, skip): the group's index as of the state store's version with
    the subscriptions of change ``version`` (0: the base's), ``how`` one of seeded / cache_hits / caught_up /
    rebuilt; ``skip``: the micro-batch's rows are already in the base of a group added while the stream runs."""
    subs = spec.control.subscriptions(gid, version) if version > gspec.version else None
    part = stateful.open_partition(state.meta, _WORKER, ident)
    if part is None:
        group, null_keys = _seed(gspec, state.rows, subs)
        skip = False
        if gspec.as_of is not None and batch is not None:
            # added while the stream ran: its base holds the rows of micro-batches up to ``as_of``; those
            # after it, before this one, come from the files the stream wrote (stream_control)
            skip = batch <= gspec.as_of
            for b in range(gspec.as_of + 1, batch):
                rows = spec.control.applied(b)
                if rows is not None and rows.num_rows:
                    frame = pa.table(routed_rows(rows, gspec, spec.key)).to_pandas()
                    _write_rows(state.rows, _apply_frame(spec, gid, gspec, group, null_keys, frame, 0, "none").final)
            stats["groups_added"] = 1
        return group, null_keys, 0, 0, "seeded", skip
    applied, rebuilds = part.applied, part.rebuilds
    if part.cached is not None and part.cached[1][2] == version:
        at, (group, null_keys, _) = part.cached
        if at == applied:
            return group, null_keys, applied, rebuilds, "cache_hits", False
        if at < applied <= at + LOG_SLOTS and _catch_up(group, null_keys, state.log, at, applied, gspec):
            return group, null_keys, applied, rebuilds, "caught_up", False
    # (a change of the subscriptions too: the range classes' indexes are rebuilt with the new set)
    group, null_keys = _rebuild(gspec, state.rows, subs)
    return group, null_keys, applied, rebuilds + 1, "rebuilt", False


def _batch(keys: list, xs, ys, ts, x2s, ops, seqs) -> pa.Table:
    """A group's batch (``key, x, y, op, seq``; ``y_text`` for a string Y, as ``range_groups`` reads it;
    ``x_2`` for a box group, as ``box_groups`` reads it)."""
    cols = {"key": pa.array(keys), "x": pa.array(xs, pa.float64()), "y": pa.array(ys, pa.float64()),
            "op": pa.array(ops, pa.int8()), "seq": pa.array(seqs, pa.int64())}
    if ts is not None:
        cols["y_text"] = pa.array(ts, pa.string())
    if x2s is not None:
        cols["x_2"] = pa.array(x2s, pa.float64())
    return pa.table(cols)


def _catch_up(group, null_keys: set, log: list, at: int, applied: int, gspec: GroupSpec) -> bool:
    """Replay micro-batches ``at .. applied-1`` from the log slots into a cached group that another
    worker's tasks left behind. False (the group is then discarded) if a slot does not hold them."""
    batches = []
    for b in range(at, applied):
        rows = list(log[b % LOG_SLOTS].get())
        if any(r[0] != b for r in rows):
            return False
        batches.append(rows)
    for rows in batches:
        if not rows:
            continue
        keys, xs, ys, ts, x2s, ops, seqs = (list(c) for c in zip(*(r[1:8] for r in rows)))
        nan = [np.nan if v is None else v for v in x2s]
        group.apply(_batch(keys, xs, ys, ts if gspec.text else None, nan if gspec.x2 else None, ops, seqs), "none")
        final = {}
        for k, x, y, t, x2, op in zip(keys, xs, ys, ts, nan, ops):
            final[k] = None if op == DELETE else (np.nan if x is None else x, np.nan if y is None else y, t, x2)
        _track_null_keys(null_keys, final, gspec)
    return True


def _track_null_keys(null_keys: set, final: dict, gspec: GroupSpec) -> None:
    """Keys of rows with a null X or Y (or box X2): in no range (not in the index) but present (deletable)."""
    for k, v in final.items():
        if v is not None and _null_row(v[0], v[1], v[2], v[3], gspec):
            null_keys.add(k)
        else:
            null_keys.discard(k)


def _null_row(x, y, t, x2, gspec: GroupSpec) -> bool:
    return x != x or (t is None if gspec.text else _is_null(y)) or (gspec.x2 is not None and _is_null(x2))


def _opt(v):
    return None if v is None or v != v else float(v)


def _is_null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _seed(group_spec: GroupSpec, rows_state, subs=None):
    """First micro-batch: the group from the base snapshot (with the subscriptions of ``subs``, a change's
    snapshot, when given), its rows written to the MapState :data:`SEED_SLICE` rows at a time."""
    snap = group_spec.snapshot()
    if subs is not None:   # the change's snapshot holds no rows: the base's go into it
        more = {"x2s": snap.x2s} if group_spec.x2 else {}
        snap = dataclasses.replace(subs, keys=snap.keys, xs=snap.xs, ys=snap.ys, **more)
    text = group_spec.text
    null_keys = set()
    # a slice at a time: the table's rows as Python objects all at once would be the worker's high-water mark,
    # kept after the seed (the allocator does not give it back), which an X zone -- its index a part of the rows,
    # its state store every row -- would pay as the whole group does
    for lo in range(0, len(snap.keys), SEED_SLICE):
        at = slice(lo, lo + SEED_SLICE)
        x2s = snap.x2s[at].tolist() if group_spec.x2 else [None] * len(snap.keys[at])
        for k, x, y, x2 in zip(snap.keys[at].tolist(), snap.xs[at].tolist(), snap.ys[at].tolist(), x2s):
            t = None if not text or _is_null(y) else str(y)
            rows_state.updateValue((k,), (None if x != x else x, None if text or _is_null(y) else float(y), t,
                                          None if _is_null(x2) else float(x2)))
            if x != x or _is_null(y) or (group_spec.x2 and _is_null(x2)):
                null_keys.add(k)
    group, rows = _built(group_spec, snap), len(snap.keys)
    del snap
    return _released(group, rows), null_keys


def _released(group, rows: int):
    """``group``, after the worker gave back the pages a build from ``rows`` rows freed (``process_memory``: the
    allocators keep them otherwise, and the worker lives on with the base's whole size)."""
    if rows >= BULK_ROWS:
        release_freed_memory()
    return group


def _rebuild(group_spec: GroupSpec, rows_state, subs=None):
    """The group from the rows in the state store and the subscriptions of the base snapshot (of ``subs``, a
    change's snapshot, when given)."""
    snap = subs if subs is not None else group_spec.snapshot()
    text = group_spec.text
    # an X zone keeps the rows it owns (and the NULL-X rows, in no zone's index but deletable) as it reads the
    # state store, which holds every row: its worker never holds the table's rows at once (a top-k zone reads
    # them all: its halos, ``topk/zone_stream.py``)
    zone = group_spec.zone
    lo, hi = zone_bounds(zone.cuts, zone.zone) if zone is not None and not zone.keeps_halos \
        else (-np.inf, np.inf)
    keys, xs, ys, x2s = _stored_rows(rows_state, text, lo, hi)
    xs_a = np.asarray(xs, dtype=np.float64)
    ys_a = np.empty(len(ys), dtype=object) if text else np.asarray(ys, dtype=np.float64)
    if text:
        ys_a[:] = ys
    keys_a = np.empty(len(keys), dtype=object)
    keys_a[:] = keys
    more = {"x2s": np.asarray(x2s, dtype=np.float64)} if group_spec.x2 else {}
    snap = dataclasses.replace(snap, keys=keys_a, xs=xs_a, ys=ys_a, **more)
    null_keys = {k for k, x, y, x2 in zip(keys, xs_a, ys, x2s) if _null_row(x, y, y, x2, group_spec)}
    group, rows = _built(group_spec, snap), len(keys)
    del snap, keys, xs, ys, x2s, xs_a, ys_a, keys_a
    return _released(group, rows), null_keys


def _stored_rows(rows_state, text: bool, lo: float = -np.inf, hi: float = np.inf) -> tuple:
    """(keys, xs, ys, x2s) of the state store's rows with ``lo <= x < hi`` or a NULL X (NaN for a NULL; ys the text
    column's for a ``text`` group)."""
    keys, xs, ys, x2s = [], [], [], []
    for (k,), (x, y, t, x2) in rows_state.iterator():
        if x is not None and not lo <= x < hi:
            continue
        keys.append(k)
        xs.append(np.nan if x is None else x)
        ys.append(t if text else (np.nan if y is None else y))
        x2s.append(np.nan if x2 is None else x2)
    return keys, xs, ys, x2s


def _built(group_spec: GroupSpec, snap):
    """The partition's operator from a snapshot of every row: the group, or an X zone's ``RowsZone`` over the rows it
    owns (``range_zone_stream.zone_operator`` at the stream's cuts; its state store keeps them all)."""
    return snap.build() if group_spec.zone is None else zone_operator(snap, group_spec.zone)
