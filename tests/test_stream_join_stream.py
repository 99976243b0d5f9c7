"""Stream-stream joins over Structured Streaming (issue 19 item 2's ``stream()``; 003 ch. 3).

``Engine.stream('a', source)`` on a stream of a STREAM_JOIN / STREAM_BAND_JOIN group: each micro-batch is one step
of the bounded join, as one ``publish`` of its rows.  One bounded file source (one file per micro-batch), after
both streams were published to (the stream starts from the group's kept events), with a subscription added while
it runs.  Oracles: a twin engine publishing the same batches in the same order (bounded groups: the same evictions,
so exactly the same result tuples), and the nested-loop join of ``tests/oracles/bounded_join_oracle.py`` for the
unbounded group."""
from __future__ import annotations

import json
import os
import random

import pytest

from bounded_join_oracle import nested_loop
from sparksub import Engine

STREAMS = ("CREATE TABLE a (sensor STRING, loc BIGINT, temp DOUBLE, t BIGINT); "
           "CREATE TABLE b (sensor STRING, loc BIGINT, hum DOUBLE, t BIGINT)")
SUBS = {"all": "SELECT * FROM a JOIN b ON a.loc = b.loc",
        "heeb": "SELECT a.sensor, b.sensor AS bs FROM a JOIN b ON a.loc = b.loc WHERE a.temp > 28 "
                "WITH (max_state_rows = 5)",
        "band": "SELECT a.t, b.t FROM a JOIN b ON a.t BETWEEN b.t - 2 AND b.t + 2 "
                "WITH (max_state_rows = 6, state_policy = 'LRU')"}
LATE = ("heeb_late", SUBS["heeb"])   # added after the first streamed micro-batch: same group, a change version
SCHEMA = "sensor string, loc bigint, temp double, t bigint, _seq bigint"
FILE_SEQ = 1 << 40   # the streamed events' _seq: FILE_SEQ + (file no << 16) + row no


def events(rnd, stream, n):
    col = "temp" if stream == "a" else "hum"
    return [{"sensor": f"{stream}{rnd.randrange(4)}", "loc": None if rnd.random() < 0.1 else rnd.randrange(5),
             col: float(rnd.randrange(20, 40)), "t": rnd.randrange(0, 20)} for _ in range(n)]


def engine(spark):
    e = Engine(spark)
    e.sql(STREAMS)
    for name, sql in SUBS.items():
        e.sql(f"CREATE SUBSCRIPTION {name} AS {sql}")
    return e


def pairs(rows, ident) -> dict:
    """subscription -> sorted [(left event, right event)], each event named by ``ident(seq)``."""
    out: dict = {}
    for r in rows:
        if r["subscription_id"] is not None and r["op"] == "insert":
            out.setdefault(r["subscription_id"], []).append((ident(int(r["left_key"])), ident(int(r["right_key"]))))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_stream_equals_publishing_the_same_batches(spark, tmp_path):
    rnd = random.Random(1919)
    before = [("b", events(rnd, "b", 12)), ("a", events(rnd, "a", 10)), ("b", events(rnd, "b", 12))]
    files = [events(rnd, "a", 14) for _ in range(3)]
    e, twin = engine(spark), engine(spark)
    ids: dict = {}   # seq -> the event's identity, ("b"|"a", publish no, row no) or ("file", file no, row no)
    for engine_ in (e, twin):
        for i, (stream, evs) in enumerate(before):
            seq0 = engine_._next_seq
            engine_.publish(stream, evs)
            ids.update({seq0 + j: (stream, i, j) for j in range(len(evs))})
    # the twin: each file one publish, the late subscription after the first
    twin_rows = []
    for k, evs in enumerate(files):
        if k == 1:
            twin.sql(f"CREATE SUBSCRIPTION {LATE[0]} AS {LATE[1]}")
        seq0 = twin._next_seq
        twin_rows += [r.asDict() for r in twin.publish("a", evs).collect()]
        ids.update({seq0 + j: ("file", k, j) for j in range(len(evs))})

    src_dir, tmp = tmp_path / "in", tmp_path / "tmp"
    src_dir.mkdir()
    tmp.mkdir()
    src = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src_dir))
    out = e.stream("a", src)
    q = (out.writeStream.format("memory").queryName("stream_join_out").outputMode("append")
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        for k, evs in enumerate(files):
            if k == 1:
                e.sql(f"CREATE SUBSCRIPTION {LATE[0]} AS {LATE[1]}")   # published to the running stream
            path = tmp / f"{k}.json"
            path.write_text("".join(json.dumps({**ev, "_seq": FILE_SEQ + (k << 16) + j}) + "\n" for j, ev in enumerate(evs)))
            os.rename(path, src_dir / f"part-{k:02d}.json")
            q.processAllAvailable()
        stream_rows = [r.asDict() for r in spark.table("stream_join_out").collect()]
    finally:
        q.stop()
    assert [r for r in stream_rows if r["op"] in ("rejected", "error")] == []

    def stream_ident(seq):   # a streamed event's seq is its _seq
        return ("file", (seq - FILE_SEQ) >> 16, (seq - FILE_SEQ) & 0xFFFF) if seq >= FILE_SEQ else ids[seq]
    got, want = pairs(stream_rows, stream_ident), pairs(twin_rows, ids.get)
    assert set(want) == {"all", "heeb", "band", "heeb_late"}
    assert got == want   # the bounded groups evicted exactly as the twin's publishes did

    # the unbounded group against the nested loop: one step per publish / micro-batch, the first three before
    steps = [(([], [ev["loc"] for ev in evs]) if s == "b" else ([ev["loc"] for ev in evs], [])) for s, evs in before]
    steps += [([ev["loc"] for ev in evs], []) for evs in files]
    left = [("a", 1, j) for j in range(len(before[1][1]))] + [("file", k, j) for k, evs in enumerate(files)
                                                            for j in range(len(evs))]
    right = [("b", i, j) for i in (0, 2) for j in range(len(before[i][1]))]
    streamed = [p for p in got["all"] if p[0][0] == "file"]
    oracle = sorted((left[li], right[ri]) for li, ri in nested_loop(steps) if left[li][0] == "file")
    assert streamed == oracle
    # the late subscription sees only pairs of events streamed after it was added
    assert got["heeb_late"] == [p for p in got["heeb"] if p[0][:2] in (("file", 1), ("file", 2))]
    # the rows carry the subscription's selected columns, from the pair's events
    ev = {("file", k, j): x for k, evs in enumerate(files) for j, x in enumerate(evs)}
    for r in stream_rows:
        if r["subscription_id"] == "band":
            assert r["a.t"] == ev[stream_ident(int(r["left_key"]))]["t"]


# ---- the stateful function without Spark: every path to the operator agrees ------------------------------------
class _Value:
    """A ValueState look-alike."""

    def __init__(self):
        self.v = None

    def exists(self):
        return self.v is not None

    def get(self):
        return self.v

    def update(self, v):
        self.v = v


@pytest.mark.catalyst_independent
def test_state_store_paths_agree_with_the_group():
    """Micro-batches applied with the worker's cached operator, or restored from the state each time (a restart,
    a replayed micro-batch, another worker), give the notifications ``StreamJoinGroup.apply`` gives on the same
    steps -- a replayed micro-batch (the state as of before it) gives its first attempt's."""
    import pandas as pd

    from sparksub.runtime import stream_join_stream as sjs
    from sparksub.runtime.stream import _Deferred

    e = Engine(catalyst=False)
    e.sql(STREAMS)
    e.sql(f"CREATE SUBSCRIPTION heeb AS {SUBS['heeb']}")
    entry = next(iter(e._groups.values()))
    snap = entry.family.snapshot(entry.registry, entry.physical, entry.group_id, e._tables)
    rnd = random.Random(7)
    steps = [("ab"[i % 2], events(rnd, "ab"[i % 2], 12)) for i in range(8)]

    def frame(evs, base):
        return pd.DataFrame({**{c: [x[c] for x in evs] for c in evs[0]}, "j_seq": [base + j for j in range(len(evs))]})

    def run(restore_each_time: bool, replay_at: int | None = None):
        specs = {d: sjs.StreamJoinStreamSpec("u", f"s{d}{restore_each_time}", "ab"[d], ("sensor", "loc", "temp", "t")
                                             if d == 0 else ("sensor", "loc", "hum", "t"),
                                             "unicast", _schema(e, entry), {entry.group_id: sjs.StreamJoinStreamGroup(
                                                 entry.group_id, d, _Deferred(snap))}) for d in (0, 1)}
        state = sjs.StreamJoinState(_Value(), _Value(), None)
        outs = []
        for i, (stream, evs) in enumerate(steps):
            if restore_each_time:
                sjs._CACHE.clear()
            spec = specs[0 if stream == "a" else 1]
            if i == replay_at:   # a first attempt whose commit is lost: the state store gives the state before it
                saved = (state.core.v, state.meta.v)
                sjs.apply_stream_join_micro_batch(spec, entry.group_id, frame(evs, 100 * i), state)
                state.core.v, state.meta.v = saved
            out = sjs.apply_stream_join_micro_batch(spec, entry.group_id, frame(evs, 100 * i), state)
            outs.append(sorted(zip(out["subscription_id"], out["left_key"], out["right_key"])))
        return outs

    group = snap.build()
    want = []
    for i, (stream, evs) in enumerate(steps):
        batch = entry.family.group_batch(entry.physical, e._tables[stream].definition,
                                         _events_table(e, stream, evs), [100 * i + j for j in range(len(evs))])
        notes = group.apply(batch, "unicast")
        want.append(sorted(zip(notes.column("subscription_id").to_pylist(), notes.column("left_key").to_pylist(),
                               notes.column("right_key").to_pylist())))
    assert sum(map(len, want)) > 0
    assert run(False) == want
    assert run(True) == want
    assert run(False, replay_at=5) == want


def _schema(e, entry):
    from sparksub.operators.shared.schemas import publish_schema
    return e._output_schema(publish_schema("unicast"), "unicast", [entry], e._tables["a"].definition)


def _events_table(e, stream, evs):
    state = e._tables[stream]
    batch, reasons, _ = e._validated(state, evs)
    assert all(r is None for r in reasons)
    return batch
