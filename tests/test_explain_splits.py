"""EXPLAIN's Spark section for groups that run split (issue 16 items 4 and 8): one plan per Spark job of a publish,
each headed by what it runs, each showing as many partitions as the job runs tasks.

The oracle is Spark's own account of a real publish of the group, independent of the EXPLAIN code: the jobs the
publish ran (``statusTracker`` job ids before and after, classic session) and each job's task count.  A publish of
split groups runs the jobs EXPLAIN lists, in that order, then one job that writes the kept output
(``runtime/output.write_notifications``); a whole group's one job writes its output itself
(``runtime/groups.write_groups``).  The session's worker keep-alive (``runtime/keepalive.py``) is stopped for
the module: its jobs would interleave, and its task slots add tasks to placed jobs (a plan shows one per replica).
Run once (``catalyst_passthrough``): the extension only puts its pass-through node over the last job's plan.
"""
from __future__ import annotations

import re

import pytest

from sparksub import Engine
from sparksub.runtime import keepalive

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]

_HEADING = re.compile(r"^-- job (\d+) of (\d+): (.+) --$", re.M)
_SPLITS = re.compile(r"Range \(0, (\d+), step=1, splits=(\d+)\)")


@pytest.fixture(scope="module")
def quiet(spark):
    """The session with no keep-alive job running (stopped, its thread ended: ``slots_of`` None)."""
    keeper = keepalive._KEEPERS.get(spark)
    if keeper is not None:
        keeper.stop()
        keeper._thread.join(timeout=15)
    assert keepalive.slots_of(spark) is None
    return spark


@pytest.fixture(scope="module")
def eng(quiet):
    e = Engine(quiet)
    e.keep_workers_warm = None
    return e


def _table(e, name: str, n: int = 40):
    e.sql(f"CREATE TABLE {name} (k BIGINT PRIMARY KEY, x DOUBLE, y DOUBLE)")
    e.load(name, {"k": list(range(n)), "x": [float(i) for i in range(n)], "y": [float((i * 37) % n) for i in range(n)]})


def _batch(start: int, n: int = 6) -> list[dict]:
    """Rows spread over X (every zone gets some) and both new and known keys."""
    return [{"k": start + 7 * i, "x": float((13 * i + start) % 40) + 0.5, "y": float(i)} for i in range(n)]


def _ranges(e, select: str, prefix: str) -> None:
    """Six subscriptions ``<prefix>0..5`` of ``select`` over overlapping X ranges (``:lo``, ``:hi``)."""
    e.subscribe_many(select, {"id": [f"{prefix}{i}" for i in range(6)], "lo": [0, 5, 10, 15, 20, 25],
                              "hi": [30, 35, 39, 20, 25, 30]})


def explained_jobs(text: str) -> list[tuple[str, int]]:
    """EXPLAIN's Spark section as ``[(what, partitions)]``, one per job; a whole group's one plan: ``(None, n)``."""
    section = text.split("== Physical plan (Spark", 1)[-1].split("== Spark physical plan ==", 1)[-1]
    heads = list(_HEADING.finditer(section))
    if not heads:
        return [(None, _partitions(section))]
    assert [int(h.group(1)) for h in heads] == list(range(1, len(heads) + 1))
    assert {int(h.group(2)) for h in heads} == {len(heads)}
    ends = [h.start() for h in heads[1:]] + [len(section)]
    return [(h.group(3), _partitions(section[h.end():end])) for h, end in zip(heads, ends)]


def _partitions(plan: str) -> int:
    found = _SPLITS.findall(plan)
    assert len(found) == 1, plan     # each job: one MapInArrow over one explicit Range
    n, splits = found[0]
    assert n == splits
    return int(splits)


def published_jobs(spark, publish) -> list[int]:
    """The task count of each Spark job ``publish()`` ran, in job order (the stages of a job: their tasks summed)."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    publish()
    out = []
    for job in sorted(set(tracker.getJobIdsForGroup(None)) - before):
        info = tracker.getJobInfo(job)
        assert info is not None and info.status == "SUCCEEDED"
        out.append(sum(tracker.getStageInfo(s).numTasks for s in info.stageIds))
    return out


def check_split(e, spark, table: str, sub_id: str, start: int, batch=None, writes: int = 1) -> list[tuple[str, int]]:
    """The group runs split: EXPLAIN lists its jobs, and the next publish runs them -- as many, each with as many
    tasks -- then the ``writes`` jobs writing its output (none: its one job's tasks write it).  Before the first
    publish (the split's replicas and shards still to build: a range group's shards seeded in jobs of their own) and
    after it.  The jobs after it."""
    for step in range(2):
        jobs = explained_jobs(e.explain(sub_id))
        assert len(jobs) >= 1 and all(what is not None for what, _ in jobs), jobs
        ran = published_jobs(spark, lambda: e.publish(table, batch or _batch(start + step)))
        assert len(ran) == len(jobs) + writes, (step, jobs, ran)
        assert ran[:len(jobs)] == [n for _, n in jobs], (step, jobs, ran)
    return jobs


def test_whole_group_one_plan(eng, quiet):
    """A whole group: one plan, no heading, and its publish one job (its tasks write the output)."""
    eng.range_zones, eng.range_subscription_shards = 0, 0
    _table(eng, "whole_t")
    eng.sql("CREATE SUBSCRIPTION w1 AS SELECT SUM(y) FROM whole_t WHERE x BETWEEN 5 AND 30")
    eng.publish("whole_t", _batch(600))
    jobs = explained_jobs(eng.explain("w1"))
    assert jobs == [(None, 1)]
    assert published_jobs(quiet, lambda: eng.publish("whole_t", _batch(601))) == [1]



def test_zoned_range_agg(eng, quiet):
    eng.range_zones, eng.range_subscription_shards = 2, 2
    _table(eng, "agg_t")
    _ranges(eng, "SELECT SUM(y) FROM agg_t WHERE x BETWEEN :lo AND :hi", "a")
    jobs = check_split(eng, quiet, "agg_t", "a1", 100)
    assert [n for _, n in jobs] == [2, 2]
    assert "rows in 2 X zones" in jobs[0][0] and "2 subscription shards" in jobs[1][0]


def test_zoned_range_min(eng, quiet):
    eng.range_zones, eng.range_subscription_shards = 2, 2
    _table(eng, "min_t")
    _ranges(eng, "SELECT MIN(y) FROM min_t WHERE x BETWEEN :lo AND :hi", "m")
    jobs = check_split(eng, quiet, "min_t", "m1", 200)
    assert [n for _, n in jobs] == [2, 2]
    assert "round 1 in 2 X zones" in jobs[0][0] and "2 subscription shards by x1" in jobs[1][0]


def test_zoned_sharded_range_topk_and_distinct(eng, quiet):
    # top-k in X zones: the zones' edges first; DISTINCT in X zones: a second round after the rows
    eng.range_zones, eng.range_subscription_shards = 2, 3
    _table(eng, "top_t")
    _ranges(eng, "SELECT * FROM top_t WHERE x BETWEEN :lo AND :hi ORDER BY y DESC LIMIT 2", "t")
    jobs = check_split(eng, quiet, "top_t", "t1", 300)
    assert [n for _, n in jobs] == [2, 2, 3]
    assert "edge objects of 2 X zones" in jobs[0][0] and "rows in 2 X zones" in jobs[1][0]
    _table(eng, "dis_t")
    _ranges(eng, "SELECT DISTINCT y FROM dis_t WHERE x BETWEEN :lo AND :hi", "d")
    jobs = check_split(eng, quiet, "dis_t", "d1", 400)
    assert [n for _, n in jobs] == [2, 2, 3]
    assert "round 2 of the 2 X zones" in jobs[1][0]


def test_sharded_range_topk_rows_whole(eng, quiet):
    eng.range_zones, eng.range_subscription_shards = 0, 2
    _table(eng, "top1_t")
    eng.subscribe_many("SELECT * FROM top1_t WHERE x BETWEEN :lo AND :hi ORDER BY y DESC LIMIT 2",
                       {"id": [f"u{i}" for i in range(4)], "lo": [0, 5, 10, 15], "hi": [30, 35, 39, 20]})
    jobs = check_split(eng, quiet, "top1_t", "u1", 500)
    assert [n for _, n in jobs] == [1, 2]
    assert "rows in one replica" in jobs[0][0]


def test_sharded_select_join(eng, quiet):
    eng.join_partitions, eng.join_subscription_shards = 2, 2
    eng.sql("CREATE TABLE supply (sid BIGINT PRIMARY KEY, qty DOUBLE, prod BIGINT)")
    eng.sql("CREATE TABLE demand (did BIGINT PRIMARY KEY, prod BIGINT, price DOUBLE)")
    eng.load("supply", {"sid": list(range(12)), "qty": [float(i) for i in range(12)],
                        "prod": [i % 6 for i in range(12)]})
    eng.load("demand", {"did": list(range(6)), "prod": list(range(6)), "price": [float(5 * i) for i in range(6)]})
    eng.subscribe_many("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod "
                       "WHERE s.qty BETWEEN :lo AND :hi AND d.price BETWEEN :p AND :q",
                       {"id": [f"j{i}" for i in range(5)], "lo": [0, 2, 4, 6, 0], "hi": [8, 10, 12, 12, 3],
                        "p": [0, 5, 0, 10, 0], "q": [30, 20, 10, 30, 25]})

    def rows(start):   # every join value: each row partition gets a part of the batch
        return [{"sid": start + i, "qty": float(i), "prod": i % 6} for i in range(12)]
    jobs = check_split(eng, quiet, "supply", "j1", 0, rows(100))
    assert [n for _, n in jobs] == [2, 2]
    assert "2 row partitions" in jobs[0][0] and "2 subscription shards" in jobs[1][0]


def test_box_shards(eng, quiet):
    eng.range_subscription_shards = 3
    eng.sql("CREATE TABLE pts (id BIGINT PRIMARY KEY, a DOUBLE, b DOUBLE, v DOUBLE)")
    eng.load("pts", {"id": list(range(20)), "a": [float(i) for i in range(20)], "b": [float(20 - i) for i in range(20)],
                     "v": [float((i * 7) % 20) for i in range(20)]})
    eng.subscribe_many("SELECT MIN(v) FROM pts WHERE a BETWEEN :lo AND :hi AND b >= :b",
                       {"id": [f"b{i}" for i in range(9)], "lo": list(range(9)), "hi": [10 + i for i in range(9)],
                        "b": [float(i) for i in range(9)]})

    def rows(start):
        return [{"id": start + i, "a": float(i), "b": float(5 + i), "v": float(i)} for i in range(4)]
    # publish's ordinary job, whose tasks write the output (runtime/groups.write_groups): one job in all
    jobs = check_split(eng, quiet, "pts", "b1", 0, rows(100), writes=0)
    assert [n for _, n in jobs] == [3]
    assert "3 subscription shards" in jobs[0][0]


def test_join_partitions_and_filter_shards(eng, quiet):
    """Groups that run in several replicas of publish's ordinary job: a join's partitions, a FILTER group's
    shards -- one job (its tasks write the output), a task per replica."""
    eng.join_partitions, eng.join_subscription_shards, eng.filter_shard_size = 2, 0, 2
    eng.sql("CREATE TABLE sup2 (sid BIGINT PRIMARY KEY, qty DOUBLE, prod BIGINT)")
    eng.sql("CREATE TABLE dem2 (did BIGINT PRIMARY KEY, prod BIGINT, price DOUBLE)")
    eng.load("dem2", {"did": list(range(6)), "prod": list(range(6)), "price": [float(5 * i) for i in range(6)]})
    eng.sql("CREATE SUBSCRIPTION pj AS SELECT * FROM sup2 s JOIN dem2 d ON s.prod = d.prod WHERE s.qty <= 8")
    rows = [{"sid": i, "qty": float(i), "prod": i % 6} for i in range(12)]
    jobs = check_split(eng, quiet, "sup2", "pj", 0, rows, writes=0)
    assert jobs[0][1] == 2 and "2 join partitions" in jobs[0][0]
    _table(eng, "flt_t")
    eng.subscribe_many("SELECT * FROM flt_t WHERE x > :lo", {"id": [f"f{i}" for i in range(5)], "lo": list(range(5))})
    jobs = check_split(eng, quiet, "flt_t", "f1", 700, writes=0)
    assert jobs[0][1] == 2 and "2 subscription shards" in jobs[0][0]


def test_a_job_whose_plan_cannot_be_built_says_why(quiet):
    """EXPLAIN still returns: the failing job says why in its place, the others show their plans."""
    from sparksub.runtime.groups import jobs_text

    def broken():
        raise RuntimeError("no zones here")
    text = jobs_text([("rows in 2 X zones", broken), ("2 subscription shards", lambda: quiet.range(0, 2, 1, 2))])
    first, second = text.split("-- job 2 of 2: 2 subscription shards --")
    assert first == "-- job 1 of 2: rows in 2 X zones --\n(Spark plan unavailable: no zones here)\n"
    assert "Range (0, 2, step=1, splits=2)" in second
    assert jobs_text([(None, broken)]) == "(Spark plan unavailable: no zones here)"
