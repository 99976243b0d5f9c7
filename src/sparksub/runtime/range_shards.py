"""RANGE_TOPK, RANGE_DISTINCT and RANGE_AGG groups with their subscriptions split into shards, in Spark (issue 16
item 4): the two stages of a ``unicast`` publish.  The pure parts are ``operators/shared/range_shards.py`` (the
rows' per-update messages, a shard's subscribers); the driver's orchestration is ``control/range_shards.py``.

The stages are the SELECT_JOIN shards' jobs (``runtime/join_shards.py``), which they share:

* **Stage 1** (:func:`run_rows`, one job, collected): one task per sharded group, its rows' replica placed as any
  replica (``groups.placed_frame``: claimed by the task whose worker caches it).  The rows hold **no
  subscription**; the task applies the group's part of the batch in ``reformulated`` form -- per update (top-k:
  Paint-Dense, 002 §III-A; the rows' snapshot says so) -- and writes the messages to
  ``<publish folder>/m-r0.arrow``.
* **Stage 2** (:func:`output_frame`, lazy, checkpointed by the caller): one task per subscription shard
  (``spark.range(0, n, 1, n)``, the shard claimed through ``placement.claim``: never two in one task).  A shard is a
  replica whose base is its subscriptions with their results and whose log is the message batches it applied; its
  worker caches it (hit / catch-up / rebuild, counted as for every replica), delivers the publish's messages to its
  subscribers (the group's unicast rows for them) and stands one log entry further, which the driver logs when the
  publish commits.

* **A ``reformulated`` publish** (:func:`messages_frame`): stage 1 alone, in the mode's Paint variant (the default
  Paint-Batch, as the whole group): its messages are the output, one task per group reading its folder.  No shard
  runs; the driver appends the messages to each stateful shard's log, which a worker's cached shard replays when
  it next runs (a catch-up), so the shards follow the rows without a rebuild.

* **A shard's new base** (:func:`seed_shards`) is seeded where the rows are cached: one task on the rows' replica
  computes each rebuilt shard's results from the rows' core and writes its base; the driver names the base
  directories and adopts them.  So the driver never holds the rows' core nor the shards' results (issue 16 item 3;
  it did, ~10 s and +58 MB at 200K top-k subscriptions).  Past ``driver_operator_limit`` ``result()``, ``stats()``,
  EXPLAIN and deliver()'s seed read the rows there too (:func:`seeded_base`, ``remote.RemoteOperator``).

A Python worker keeps one rows replica and one shard per group (``replicas.keep_one_per_group``, as the zones and
the join shards), so an executor holds its share of the subscriptions, not all of them.
"""
from __future__ import annotations

import os
import pickle
import shutil

import pyarrow as pa

from sparksub.operators.distinct.zones import zone_answers
from sparksub.operators.shared.range_shards import RangeShardBase, shard_bases
from sparksub.operators.shared.range_zones import ZonedRows
from sparksub.runtime import join_shards
from sparksub.runtime.groups import one_row_batch, placed_frame, remove_folder, write_table
from sparksub.runtime.remote import call_frame, call_on_each
from sparksub.runtime.replicas import (
    Replica,
    StoredValue,
    keep_one_per_group,
    materialize,
    remember,
    write_base,
    write_value,
)

__all__ = ["ShardPart", "messages_frame", "messages_in", "output_frame", "publish_folder", "remote_zones", "rows_frame",
           "run_rows", "run_second_round", "second_round_frame", "seed_frames", "seed_shards", "seed_stream_shards",
           "seeded_base", "write_zone_edges", "zone_edges_frame"]

ShardPart = join_shards.ShardPart
messages_in = join_shards.messages_in
publish_folder = join_shards.publish_folder


#: stage 1's task, as Spark's EXPLAIN prints it
ROWS_NAME = "range_rows_per_update_messages"


def run_rows(spark, replicas: dict, tables: dict, folders: dict, slots: int = 1, mode: str = "reformulated") -> dict:
    """Stage 1 of the sharded range groups (``replicas``: ``<group>#r0`` -> the rows' replica; ``tables``: its batch,
    in seq order; ``folders``: the group's publish folder; ``mode``: plain for a unicast publish -- the rows' own
    per-update variant --, or the reformulated publish's mode and variant): ``{replica id: (error or None,
    messages)}``."""
    return join_shards.run_row_partitions(spark, replicas, tables, folders, slots, name=ROWS_NAME, mode=mode)


def rows_frame(spark, replicas: dict, tables: dict, folders: dict, mode: str = "reformulated"):
    """:func:`run_rows`'s job, not run (nothing written): the plan EXPLAIN shows, a partition per rows replica."""
    return join_shards.row_partitions_frame(spark, replicas, tables, folders, 1, ROWS_NAME, mode, stage=False)[0]


_ZONE_STEP_SCHEMA = pa.schema([("replica", pa.string()), ("error", pa.string())])


def _on_each_zone_frame(spark, replicas: dict, step, name: str, slots: int, stage: bool = True):
    """:func:`_on_each_zone`'s job, ``(DataFrame, board folder)``; ``stage`` False: not to run (EXPLAIN's plan)."""
    def body(replica: Replica, _trigger: pa.Table):
        try:
            keep_one_per_group(replica)
            zone = materialize(replica)
            step(zone, replica)
            remember(replica, replica.log_length, zone)   # a read: the position does not move
            row = {"replica": [replica.replica_id], "error": [None]}
        except Exception as err:  # noqa: BLE001 - reported to the driver: the group's 'error' row
            row = {"replica": [replica.replica_id], "error": [f"{type(err).__name__}: {err}"]}
        yield pa.RecordBatch.from_pydict(row, schema=_ZONE_STEP_SCHEMA)
    trigger = {rid: one_row_batch() for rid in replicas}
    return placed_frame(spark, replicas, trigger, body, "replica string, error string", name, slots, stage)


def _on_each_zone(spark, replicas: dict, step, name: str, slots: int) -> dict:
    """``step(zone, replica)`` on each zone (``replicas``: replica id -> replica), one job, a task per zone where it
    is cached, one zone per group in a worker (as the zones' own job keeps): ``{replica id: error or None}``, a
    zone's error its group's (the group's ``'error'`` row)."""
    df, board = _on_each_zone_frame(spark, replicas, step, name, slots)
    try:
        return {r["replica"]: r["error"] for r in df.collect()}
    finally:
        remove_folder(board)


#: the DISTINCT zones' round 2 and the top-k zones' edges, as Spark's EXPLAIN prints their tasks
SECOND_ROUND_NAME = "range_distinct_zones_second_round"
EDGES_NAME = "range_topk_zone_edges"


def _second_round_step(folders: dict):
    def answer(zone, replica: Replica) -> None:
        # the zone at the batch's end: where round 1 left it (a hit), else rebuilt from its files -- the batch
        # replayed records the same steps (``DistinctRowsZone.apply``)
        folder = folders[replica.replica_id]
        write_table(join_shards.answer_file(folder, zone.zone), zone_answers(zone, join_shards.zone_messages(folder)))
    return answer


def run_second_round(spark, replicas: dict, folders: dict, slots: int = 1) -> dict:
    """Round 2 of RANGE_DISTINCT groups whose rows run in X zones (``operators/distinct/zones.py``), one job: a
    task per zone (``replicas``: zone replica id -> the replica *with the batch logged*, so the worker that ran
    its round 1 hits its cache), answering the open Mar ends of the other zones' round-1 messages in ``folders``
    (replica id -> the group's publish folder) as of each message's seq.  ``{replica id: error or None}``."""
    return _on_each_zone(spark, replicas, _second_round_step(folders), SECOND_ROUND_NAME, slots)


def second_round_frame(spark, replicas: dict, folders: dict):
    """:func:`run_second_round`'s job, not run: the plan EXPLAIN shows, a partition per zone."""
    return _on_each_zone_frame(spark, replicas, _second_round_step(folders), SECOND_ROUND_NAME, 1, stage=False)[0]


def _edges_step(depths: dict, folders: dict):
    def write(zone, replica: Replica) -> None:
        group = replica.replica_id.rpartition("#")[0]
        zone.write_edges(folders[group], depths[group])
    return write


def write_zone_edges(spark, zones: list, depths: dict, folders: dict, slots: int = 1) -> dict:
    """Before a publish's zones run: every top-k zone (``zones``: their replicas, of any groups) writes its edge
    objects of depth ``depths[group]`` into its group's publish folder ``folders[group]``, one job, a task per zone
    where it is cached (``topk/zones.py``; the zones' job then folds each zone's halos from them,
    ``TopkRowsZone.prepare``): ``{replica id: error or None}``."""
    return _on_each_zone(spark, {r.replica_id: r for r in zones}, _edges_step(depths, folders), EDGES_NAME, slots)


def zone_edges_frame(spark, zones: list, depths: dict, folders: dict):
    """:func:`write_zone_edges`'s job, not run: the plan EXPLAIN shows, a partition per zone."""
    return _on_each_zone_frame(spark, {r.replica_id: r for r in zones}, _edges_step(depths, folders), EDGES_NAME, 1,
                               stage=False)[0]


def output_frame(spark, parts: list, schema):
    """The sharded range groups' unicast rows: one task per subscription shard (``parts``: ``ShardPart`` each)."""
    return join_shards.output_frame(spark, parts, schema, name="range_subscription_shards_unicast")



def messages_frame(spark, parts: list, schema):
    """A reformulated publish's output of the sharded range groups: each group's stage-1 messages (``parts``:
    ``ShardPart`` each, no shard), one task per group, lazily."""
    return join_shards.output_frame(spark, parts, schema, name="range_rows_reformulated")


def _shard_base(rows_group, group_id: str, key_type, shard: int, ids, x1, x2, k) -> RangeShardBase:
    base = shard_bases(rows_group, group_id, ids, x1, x2, k, 1, key_type)[0]
    base.shard = shard
    return base


def _written_bases(rows_group, group_id: str, key_type, places: dict) -> bool:
    # in the task that holds the rows: one base at a time, so the worker holds one shard's results at most
    for j, (where, ids, x1, x2, k) in places.items():
        write_base(where, _shard_base(rows_group, group_id, key_type, j, ids, x1, x2, k))
    return bool(rows_group.shard_stateless)


def _partial_file(folder: str, zone: int, shard: int) -> str:
    return os.path.join(folder, f"z{zone}-q{shard}.pickle")


def _written_partials(zone, folder: str, places: dict) -> bool:
    # in a zone's task (zones 1..): its rows' partial states of each rebuilt shard's ranges, for zone 0's task
    for j, (_, ids, x1, x2, k) in places.items():
        with open(_partial_file(folder, zone.zone, j), "wb") as f:
            pickle.dump(zone.shard_seed(x1, x2, k), f, protocol=pickle.HIGHEST_PROTOCOL)
    return True


def _merged_bases(zone0, group_id: str, key_type, places: dict, folder: str, n_zones: int) -> bool:
    # in zone 0's task: its own partial states and the other zones' files merged into each shard's base
    def partials_of(j):
        def partials(x1, x2, k):
            others = []
            for z in range(1, n_zones):
                with open(_partial_file(folder, z, j), "rb") as f:
                    others.append(pickle.load(f))
            return [zone0.shard_seed(x1, x2, k), *others]
        return partials
    for j, (where, ids, x1, x2, k) in places.items():
        view = ZonedRows(type(zone0.group), zone0.group.subscriber_option(), zone0.cuts, partials_of(j),
                         lambda: [], lambda: {})
        write_base(where, _shard_base(view, group_id, key_type, j, ids, x1, x2, k))
    return bool(zone0.group.shard_stateless)


def _seed_jobs(zones: list, group_id: str, key_type, places: dict, folder: str, stateless: bool) -> list:
    """:func:`seed_shards`' jobs in order, ``[(replicas, function, args, name)]``: one on the rows' replica (the rows in
    one, or DISTINCT's stateless shards); else the zones but the first writing their partial states, then zone 0
    merging them into the bases."""
    if len(zones) == 1 or stateless:
        return [(zones[:1], _written_bases, (group_id, key_type, places), "range_shard_seeds")]
    return [(zones[1:], _written_partials, (folder, places), "range_zone_partial_seeds"),
            (zones[:1], _merged_bases, (group_id, key_type, places, folder, len(zones)), "range_shard_seeds")]


def seed_shards(spark, zones: list, group_id: str, key_type, places: dict, folder: str,
                stateless: bool = False) -> bool:
    """Write the bases of a sharded group's rebuilt shards where its rows are cached (``places``: shard ->
    ``(base directory, ids, x1, x2, k)``, the directories from ``replicas.base_place``); ``zones``: the rows'
    replicas -- one: one task on it; X zones (``shared/range_zones.py``): a task per zone but the first writes its
    partial states to ``folder``, then zone 0's task merges them with its own into the bases (the driver holds no
    result either way); ``stateless`` (DISTINCT: no results kept): zone 0's task alone writes the bases, no
    partial state is asked of the others.  Whether the shards are stateless."""
    jobs = _seed_jobs(zones, group_id, key_type, places, folder, stateless)
    if len(jobs) > 1:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    try:
        return [call_on_each(spark, replicas, (), args, name=name, function=function)
                for replicas, function, args, name in jobs][-1][0]
    finally:
        if len(jobs) > 1:
            shutil.rmtree(folder, ignore_errors=True)


def seed_frames(spark, zones: list, stateless: bool = False) -> list:
    """:func:`seed_shards`' jobs, not run (placeholder arguments), ``[frame]`` in order, ``frame()`` the job's
    DataFrame: the plans EXPLAIN shows, a partition per replica each."""
    return [lambda job=job: call_frame(spark, job[0], (), job[2], name=job[3], function=job[1], stage=False)[0]
            for job in _seed_jobs(zones, "", None, {}, "", stateless)]


def _stream_seed_task(rows_base, group_id: str, key_type, ids, x1, x2, k, paths: list):
    def range_stream_shard_seeds(batches):
        for _ in batches:   # one empty input row: the task's trigger
            pass
        try:
            # the rows' core is built here, never on the driver; one base at a time, as publish's seeds
            rows = rows_base.get().build()
            for j, path in enumerate(paths):
                base = shard_bases(rows, group_id, ids, x1, x2, k, len(paths), key_type, only={j})[j]
                write_value(path, base)
            error = None
        except Exception as err:  # noqa: BLE001 - raised on the driver, naming the group
            error = f"{type(err).__name__}: {err}"
        yield pa.RecordBatch.from_pydict({"error": pa.array([error], pa.string())})
    return range_stream_shard_seeds


def seed_stream_shards(spark, rows_base, group_id: str, key_type, ids, x1, x2, k, paths: list) -> list:
    """A stream's subscription shards of a top-k / DISTINCT / aggregate group at its start (``control/streaming.py``):
    one Spark task reads the rows' base (``rows_base``, a ``replicas.StoredValue``), builds the rows' core, seeds
    each shard's subscriptions from it and writes shard j's base to ``paths[j]``, as publish's shards are seeded
    where the rows are (:func:`seed_shards`): the driver holds neither the core nor a result.  The bases, stored."""
    task = _stream_seed_task(rows_base, group_id, key_type, ids, x1, x2, k, list(paths))
    error = spark.range(0, 1, 1, 1).mapInArrow(task, "error string").collect()[0][0]
    if error is not None:
        raise RuntimeError(f"seeding the stream's subscription shards of group {group_id!r} failed in its Spark "
                           f"task: {error}")
    return [StoredValue(path) for path in paths]


def remote_zones(spark, zones: list, group_class: type, option, cuts) -> ZonedRows:
    """A zoned group's rows read where its zones are cached: each read one Spark job, a task per zone
    (``result()``, ``stats()``, EXPLAIN, deliver()'s seed past ``driver_operator_limit``)."""
    return ZonedRows(group_class, option, cuts,
                     lambda x1, x2, k: call_on_each(spark, zones, ("shard_seed",), (x1, x2, k), name="range_zones"),
                     lambda: call_on_each(spark, zones, ("stats",), name="range_zones"),
                     lambda: call_on_each(spark, zones[:1], ("explain",), name="range_zones")[0])


def seeded_base(spark, rows: Replica, group_id: str, key_type, ids, x1, x2, k) -> RangeShardBase:
    """One shard of the subscriptions ``ids`` seeded from the rows' core, computed where the rows are cached and
    sent back (deliver()'s side of a group read in place)."""
    return call_on_each(spark, [rows], (), (group_id, key_type, 0, ids, x1, x2, k), name="range_shard_seed",
                        function=_shard_base)[0]
