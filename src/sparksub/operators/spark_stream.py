"""Thin Spark wrapper: the range group operators on Structured Streaming -- RANGE_MIN / RANGE_MAX
(``range_min_group``) and RANGE_TOPK / RANGE_DISTINCT / RANGE_AGG (``range_groups``).

``run_stream`` turns a streaming DataFrame of table updates into a streaming DataFrame of
notifications. The plan (names as Spark's EXPLAIN prints them)::

    TransformWithStateInPySpark range_min_group_stream(...)      one state partition per group
                                 (range_topk_group_stream, range_min_and_range_agg_groups_stream, ...:
                                 named after the operator families it runs)
    +- Exchange hashpartitioning(group_id), REQUIRED_BY_STATEFUL_OPERATOR
       +- Generate explode([group structs])                       every row goes to every group
          +- MapInArrow range_min_group_stream_order(...)         input order (only without ``_seq``)
             +- <the user's streaming source>

**State** (Spark's state store, RocksDB, per ``group_id``):

* MapState ``rows``: table key -> ``(x, y, t, x2)`` for every row of the table: X and Y as doubles, or,
  for a DISTINCT over a string column, Y as text in ``t``; ``x2`` the second attribute of a 2-d box group
  (null otherwise). Nulls are allowed: a row with a null X or Y is kept (it is in no range, but it exists
  for a later delete);
* ValueState ``meta``: ``(applied, rebuilds)`` -- micro-batches applied to this group so far, and how
  often the index was rebuilt from the MapState;
* ListStates ``log0`` .. ``log3``: a ring holding the valid rows ``(batch, key, x, y, t, x2, op, seq)`` of the
  last ``LOG_SLOTS`` micro-batches (slot ``batch % LOG_SLOTS``).

The state is the truth; the in-memory index (a materialised group: for MIN/MAX a :class:`RangeMinGroup`,
A2B-tree + the subscriptions' point index; for the other classes a ``range_groups`` group, whose
unicast state is rebuilt from its core after a log replay) is a cache in the Python worker, keyed by (engine uid, group, stream id)
and usable only by the same streaming query *run* (``spark.jobGroup.id`` is the run id). If its
``applied`` counter equals the state's, it is used as is; if it is behind by at most ``LOG_SLOTS``
(Spark gives a group's next task to whichever Python worker is idle, so a worker often last saw the
group a batch or two ago), the missing micro-batches are replayed from the log ring; otherwise -- a
first task in this worker, a restart (new run id), a replayed or retried micro-batch (the cache is
*ahead* of the state store) -- the index is rebuilt from the MapState plus the subscriptions of the
broadcast base snapshot. On the first micro-batch (no state yet) the rows come from the base snapshot
and are written into the MapState. State writes per micro-batch: one MapState write per distinct key
touched (one round trip each to the JVM), one ListState put, one ValueState update.

**Order.** Within one micro-batch rows apply in ascending ``_seq`` when the stream has that integer
column (``seq`` of the notifications = ``_seq``). Without it the order is derived by
``range_min_group_stream_order``: ``(input partition id << 33) + row position in the partition`` (what
``monotonically_increasing_id()`` computes -- that function itself is not allowed on streams), and the
notifications carry ``seq = (applied << 32) + rank`` where ``applied`` is the micro-batch's ordinal
for this stream (0-based, micro-batches without rows do not count) and ``rank`` the row's position in
that order. A file source replays a micro-batch from the same files (the offset log records them),
split the same way while ``spark.sql.files.maxPartitionBytes``/``openCostInBytes`` and the default
parallelism are unchanged, so the derived order is deterministic on replay; rows of one file keep
their line order, but Spark orders the splits of *several* files in one micro-batch by size, not by
name: give the stream a ``_seq`` when that order matters.

**Malformed rows** (DESIGN §7) are set aside, counted, and emitted with ``op = 'rejected'`` and a
``reason``; the stream goes on. Row-local checks run in Spark SQL (null key, unknown ``_op``, null
``_seq``, a value that does not cast to the column's type, NaN in a numeric column of an upsert); a
delete of an unknown key is found by the operator (it needs the state). Every group sees every row and
skips the rejected ones; only the first group (by id) emits them, so each appears once.
"""
from __future__ import annotations

import dataclasses
import pickle
import threading
import uuid
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from sparksub.errors import BadUpdate
from sparksub.operators.range_min_group import DELETE, UPSERT, with_reason

__all__ = ["run_stream", "stream_stats", "output_schema", "typed_updates", "REJECTED", "STAT_NAMES"]

REJECTED = "rejected"
STAT_NAMES = ("micro_batches", "seeded", "cache_hits", "caught_up", "rebuilt", "updates", "rejected",
              "notifications")
#: Micro-batches of valid rows kept in the state (a ring of ListStates), to bring a stale cached index
#: up to date instead of rebuilding it: Spark hands a group's task to any idle Python worker.
LOG_SLOTS = 4
#: Groups cached per Python worker (each entry is a whole index).
CACHE_ENTRIES = 32
_NO_SEQ = -(2 ** 63)  # a null _seq (the row is rejected; its seq comes out null)

#: Worker-process cache: (engine uid, group id, stream id) -> (query id, run id, applied, group, null_keys).
_CACHE: dict[tuple[str, str, str], tuple] = {}

#: Driver side: stream id -> the Spark accumulator of that stream's counters.
_STATS: dict[str, object] = {}

_SPARK_DDL = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint", pa.int8(): "tinyint"}
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_NAME_LOCK = threading.Lock()


def output_schema(schema: pa.Schema) -> pa.Schema:
    """The mode's schema plus a nullable ``reason`` (set on rejected rows only)."""
    return with_reason(schema)


class _Deferred:
    """Holds a Broadcast pickled, unpickled on first use. transformWithStateInPandas unpickles the
    processor in a driver-side Python process too (to learn the state schemas), where no broadcast is
    loaded; pickling the Broadcast inside this wrapper still registers it with the UDF, so the
    executors' workers do get it."""

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


@dataclass
class GroupSpec:
    """One group as the stream needs it: its columns and where its base snapshot lives."""
    group_id: str
    x: str
    y: str | None     # None: COUNT(*) (any row with an X counts)
    base: _Deferred   # a Broadcast of the pickled GroupSnapshot / RangeClassSnapshot (or those bytes)
    text: bool = False  # Y is a string column (DISTINCT): it travels in ``t``, not ``y``
    x2: str | None = None  # a 2-d box group's second attribute

    def snapshot(self):
        base = self.base.get()
        return pickle.loads(base.value if hasattr(base, "value") else base)


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
    seq_given: bool           # the stream has _seq: seq = _seq; else seq = (applied << 32) + rank
    stats: object = None      # an Accumulator of dict counters, or None (e.g. Spark Connect)


# ---- Spark side (driver) ---------------------------------------------------------------------------

@dataclass
class TypedUpdates:
    """A stream of updates to one table, checked row by row in Spark SQL (shared by the range and join
    streams): ``df`` the table's columns (+ ``_op``, ``_seq``/``_ord``), ``typed`` each column cast to its
    canonical type, ``op`` the lower-cased ``_op``, ``order`` the apply order, ``reason`` why a row is
    rejected (null when valid), ``key`` the typed key (never null), ``key_type`` its canonical type."""
    df: object
    typed: dict
    op: object
    order: object
    reason: object
    key: object
    key_type: str
    seq_given: bool


def typed_updates(streaming_df, table_def) -> TypedUpdates:
    """Check the stream's columns (unknown or missing ones raise ``BadUpdate``) and build the row-local
    checks of DESIGN §7 as Spark SQL columns (module docstring: malformed rows)."""
    from pyspark.sql import functions as F

    cols = list(streaming_df.columns)
    names = table_def.column_names
    unknown = sorted(set(cols) - set(names) - {"_op", "_seq"})
    if unknown:
        raise BadUpdate(f"unknown column(s) {unknown} in the stream of updates to {table_def.name!r} "
                        f"(columns: {', '.join(names)}, and optional _op, _seq)")
    missing = [c for c in names if c not in cols]
    if missing:
        raise BadUpdate(f"the stream of updates to {table_def.name!r} lacks column(s) {missing}")
    types = dict(streaming_df.dtypes)
    seq_given = "_seq" in cols
    if seq_given and types["_seq"] not in _INTEGRAL:
        raise BadUpdate(f"_seq must be an integer column, got {types['_seq']}", None, "_seq")

    df = streaming_df.select(*names, *(["_op"] if "_op" in cols else []), *(["_seq"] if seq_given else []))
    if seq_given:
        order = F.coalesce(F.col("_seq").cast("bigint"), F.lit(_NO_SEQ).cast("bigint"))
    else:
        df = df.mapInArrow(_order_function(), _add_field(df.schema, "_ord"))
        order = F.col("_ord")

    tname = table_def.name
    op = F.lower(F.col("_op").cast("string")) if "_op" in cols else F.lit(None).cast("string")
    is_delete = F.coalesce(op == F.lit("delete"), F.lit(False))
    typed = {}
    reason = F.when(F.col(table_def.key).isNull(),
                    F.lit(f"null key {table_def.key!r} in an update to {tname!r}"))
    if "_op" in cols:
        reason = reason.when(op.isNotNull() & ~op.isin("upsert", "delete"),
                             F.concat(F.lit("_op must be 'upsert' or 'delete', got '"),
                                      F.col("_op").cast("string"), F.lit("'")))
    if seq_given:
        reason = reason.when(F.col("_seq").isNull(), F.lit("null _seq"))
    for c, ctype in table_def.columns:
        target = _canonical_type(ctype)
        typed[c] = F.col(c) if types[c] == target else F.col(c).try_cast(target)
        if types[c] != target:
            reason = reason.when(~is_delete & F.col(c).isNotNull() & typed[c].isNull(),
                                 F.concat(F.lit(f"column {c!r} of {tname!r} is {ctype}, cannot read "),
                                          F.col(c).cast("string")))
        if target == "double":
            reason = reason.when(~is_delete & F.coalesce(F.isnan(typed[c]), F.lit(False)),
                                 F.lit(f"NaN in numeric column {c!r} of {tname!r} "
                                       f"(use null for a missing value)"))
    key_type = _canonical_type(table_def.type_of(table_def.key))
    key = typed[table_def.key]
    if key_type in ("bigint", "double"):  # keep a pandas integer column free of nulls (rejected anyway)
        key = F.coalesce(key, F.lit(0).cast(key_type))

    return TypedUpdates(df, typed, op, order, reason, key, key_type, seq_given)


def run_stream(spark, streaming_df, table_def, groups: dict, mode: str, schema: pa.Schema,
               engine_uid: str, name: str = "range_min_group_stream"):
    """The streaming DataFrame of notifications. ``groups``: group_id -> (x column, y column or None,
    base, y is text, second box attribute or None), ``base`` being the broadcast pickled snapshot (``GroupReplica.base``); ``name``:
    what Spark's EXPLAIN calls the stateful operator."""
    from pyspark.sql import functions as F

    u = typed_updates(streaming_df, table_def)
    df, typed, op, order, reason, key, key_type, seq_given = (u.df, u.typed, u.op, u.order, u.reason, u.key,
                                                              u.key_type, u.seq_given)
    tname = table_def.name

    def y_of(y, text):
        if y is None:  # COUNT(*): a constant Y, so only a null X leaves the ranges
            return F.lit(0.0), F.lit(None).cast("string")
        if text:
            return F.lit(None).cast("double"), typed[y].cast("string")
        return typed[y].cast("double"), F.lit(None).cast("string")

    structs = []
    for gid, (x, y, _, text, x2) in sorted(groups.items()):
        yd, yt = y_of(y, text)
        x2d = typed[x2].cast("double") if x2 is not None else F.lit(None).cast("double")
        structs.append(F.struct(F.lit(gid).alias("group_id"), typed[x].cast("double").alias("x"),
                                yd.alias("y"), yt.alias("t"), x2d.alias("x2")))
    rows = (df.select(F.explode(F.array(*structs)).alias("g"), key.alias("key"), op.alias("op"),
                      order.alias("ord"), reason.alias("reason"))
              .select("g.group_id", "key", "g.x", "g.y", "g.t", "g.x2", "op", "ord", "reason"))

    stream_id = uuid.uuid4().hex
    stats = _new_stats(spark, stream_id)
    spec = StreamSpec(engine_uid, stream_id, tname, key_type, mode, output_schema(schema),
                      {gid: GroupSpec(gid, x, y, _Deferred(base), text, x2)
                       for gid, (x, y, base, text, x2) in groups.items()},
                      min(groups), seq_given, stats)
    processor = _processor_class()(spec)
    out_ddl = ", ".join(f"`{f.name}` {_SPARK_DDL[f.type]}" for f in spec.schema)
    out = _transform_with_state(rows.groupBy("group_id"), processor, out_ddl, name)
    out.sparksub_stream_id = stream_id  # for stream_stats(out)
    return out


def stream_stats(df_or_id) -> dict:
    """The counters of one stream (a DataFrame returned by ``run_stream``/``Engine.stream``, or its
    ``sparksub_stream_id``), summed over all tasks so far: micro_batches (group micro-batches applied),
    seeded (groups whose state was seeded from the base snapshot), cache_hits, caught_up (a stale
    cached index brought up to date from the log ring), rebuilt (index rebuilt from the state store),
    updates (valid rows applied, summed over groups), rejected (rows set aside),
    notifications (output rows other than rejected ones)."""
    sid = df_or_id if isinstance(df_or_id, str) else df_or_id.sparksub_stream_id
    acc = _STATS.get(sid)
    value = dict(acc.value) if acc is not None else {}
    return {k: int(value.get(k, 0)) for k in STAT_NAMES}


def _new_stats(spark, stream_id: str):
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no accumulators, no counters
        return None
    from pyspark.accumulators import AccumulatorParam

    class _DictSum(AccumulatorParam):
        def zero(self, value):
            return {}

        def addInPlace(self, a, b):
            for k, v in b.items():
                a[k] = a.get(k, 0) + v
            return a

    acc = sc.accumulator({}, _DictSum())
    _STATS[stream_id] = acc
    return acc


def _transform_with_state(grouped, processor, out_ddl: str, name: str):
    """``grouped.transformWithStateInPandas`` with the Python function named ``name`` in EXPLAIN.

    PySpark names the UDF after ``TransformWithStateInPandasUdfUtils.transformWithStateUDF`` and offers
    no parameter for it; the name is read once, when the UDF is built, so it is swapped for that call.
    """
    from pyspark.sql.streaming import stateful_processor_util as spu

    fn = getattr(spu.TransformWithStateInPandasUdfUtils, "transformWithStateUDF", None)
    with _NAME_LOCK:
        old = getattr(fn, "__name__", None)
        try:
            if fn is not None:
                fn.__name__ = name
            return grouped.transformWithStateInPandas(statefulProcessor=processor, outputStructType=out_ddl,
                                                      outputMode="Append", timeMode="None")
        finally:
            if fn is not None and old is not None:
                fn.__name__ = old


def _order_function():
    def range_min_group_stream_order(batches):
        """Append ``_ord`` = (partition id << 33) + position in the partition (= monotonically_increasing_id)."""
        from pyspark import TaskContext
        tc = TaskContext.get()
        base = (tc.partitionId() if tc is not None else 0) << 33
        i = 0
        for rb in batches:
            yield rb.append_column("_ord", pa.array(np.arange(base + i, base + i + rb.num_rows, dtype=np.int64)))
            i += rb.num_rows
    return range_min_group_stream_order


def _add_field(schema, name: str):
    from pyspark.sql.types import LongType, StructField, StructType
    return StructType(list(schema.fields) + [StructField(name, LongType(), False)])


def _canonical_type(spark_type: str) -> str:
    if spark_type in _INTEGRAL:
        return "bigint"
    if spark_type in ("float", "double", "decimal"):
        return "double"
    return spark_type


# ---- the stateful processor (runs in the Python workers) -------------------------------------------

def _processor_class():
    from pyspark.sql.streaming import StatefulProcessor

    class RangeGroupStream(StatefulProcessor):
        """One group's updates of one micro-batch -> its notifications, state in the state store."""

        def __init__(self, spec: StreamSpec):
            self.spec = spec

        def init(self, handle) -> None:
            kt = self.spec.key_type
            self.state = GroupState(
                rows=handle.getMapState("rows", f"key {kt}", "x double, y double, t string, x2 double"),
                meta=handle.getValueState("meta", "applied long, rebuilds long"),
                log=[handle.getListState(f"log{i}", f"batch long, key {kt}, x double, y double, t string, "
                                                    f"x2 double, op int, seq long") for i in range(LOG_SLOTS)])

        def handleInputRows(self, key, rows, timerValues):
            frames = [pdf for pdf in rows if len(pdf)]
            if frames:
                pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
                yield apply_micro_batch(self.spec, key[0], pdf, self.state)

        def close(self) -> None:
            pass

    return RangeGroupStream


@dataclass
class GroupState:
    """One group's state variables (the handles of the state store; in tests, any look-alike)."""
    rows: object      # MapState  key -> (x, y, t, x2)
    meta: object      # ValueState (applied, rebuilds)
    log: list         # LOG_SLOTS ListStates: slot b % LOG_SLOTS holds micro-batch b's valid rows


def apply_micro_batch(spec: StreamSpec, gid: str, pdf: pd.DataFrame, state: GroupState) -> pd.DataFrame:
    """Apply one micro-batch of one group (``pdf``: key, x, y, [t, x2,] op, ord, reason) against its state."""
    stats = dict.fromkeys(STAT_NAMES, 0)
    stats["micro_batches"] = 1
    pdf = pdf.iloc[np.argsort(pdf["ord"].to_numpy(), kind="stable")]
    query_id, run_id = _query_identity()
    ident = (spec.engine_uid, gid, spec.stream_id)
    group, null_keys, applied, rebuilds, how = _group_for(spec, gid, state, ident, query_id, run_id)
    stats[how] = 1

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
    core = group.core if hasattr(group, "core") else group.store  # box groups keep their rows in a store
    for i in range(n):
        reason = reasons[i]
        if reason is None or reason != reason:  # None or NaN (pandas' null)
            k = keys[i]
            if ops[i] == "delete":
                exists = final[k] is not None if k in final else (k in null_keys or core.get(k) is not None)
                if exists:
                    final[k] = None
                    valid[i], valid_ops[i] = True, DELETE
                else:
                    reason = f"delete of unknown key {k!r} from {spec.table!r}"
            else:
                final[k] = (xs[i], ys[i], ts[i], x2s[i])
                valid[i], valid_ops[i] = True, UPSERT
        if not valid[i] and gid == spec.primary:
            rej_seq.append(None if seqs[i] == _NO_SEQ else int(seqs[i]))
            rej_reason.append(str(reason))

    idx = np.flatnonzero(valid)
    gspec = spec.groups[gid]
    batch = _batch([keys[i] for i in idx], xs[idx], ys[idx], [ts[i] for i in idx] if gspec.text else None,
                   x2s[idx] if gspec.x2 else None, valid_ops[idx], seqs[idx])
    notes = group.apply(batch, spec.mode) if len(idx) else None
    _track_null_keys(null_keys, final, gspec)

    for k, v in final.items():  # the state store: one write per key touched
        if v is None:
            state.rows.removeKey((k,))
        else:
            state.rows.updateValue((k,), (_opt(v[0]), _opt(v[1]), v[2], _opt(v[3])))
    slot = state.log[applied % LOG_SLOTS]
    if len(idx):
        slot.put([(applied, keys[i], _opt(xs[i]), _opt(ys[i]), ts[i], _opt(x2s[i]), int(valid_ops[i]),
                   int(seqs[i])) for i in idx])
    else:
        slot.clear()
    state.meta.update((applied + 1, rebuilds))
    _remember(ident, (query_id, run_id, applied + 1, group, null_keys))

    out = _output(spec, gid, notes, rej_seq, rej_reason)
    stats["updates"] = int(len(idx))
    stats["rejected"] = len(rej_seq)
    stats["notifications"] = out.num_rows - len(rej_seq)
    if spec.stats is not None:
        spec.stats.add(stats)
    return out.to_pandas()


def _group_for(spec: StreamSpec, gid: str, state: GroupState, ident, query_id, run_id):
    """(group, null_keys, applied, rebuilds, how): the group's index as of the state store's version,
    ``how`` one of seeded / cache_hits / caught_up / rebuilt."""
    group_spec = spec.groups[gid]
    if not state.meta.exists():
        group, null_keys = _seed(group_spec, state.rows)
        return group, null_keys, 0, 0, "seeded"
    applied, rebuilds = (int(v) for v in state.meta.get())
    cached = _CACHE.pop(ident, None)
    if cached is not None and cached[:2] == (query_id, run_id):
        at, group, null_keys = cached[2], cached[3], cached[4]
        if at == applied:
            return group, null_keys, applied, rebuilds, "cache_hits"
        if at < applied <= at + LOG_SLOTS and _catch_up(group, null_keys, state.log, at, applied, group_spec):
            return group, null_keys, applied, rebuilds, "caught_up"
    group, null_keys = _rebuild(group_spec, state.rows)
    return group, null_keys, applied, rebuilds + 1, "rebuilt"


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


def _remember(ident, entry) -> None:
    _CACHE.pop(ident, None)
    _CACHE[ident] = entry
    while len(_CACHE) > CACHE_ENTRIES:  # oldest first: a stopped stream's groups go eventually
        _CACHE.pop(next(iter(_CACHE)))


def _output(spec: StreamSpec, gid: str, notes, rej_seq, rej_reason) -> pa.Table:
    schema = spec.schema
    parts = []
    if notes is not None and notes.num_rows:
        # the groups of one stream may differ in columns (MIN messages vs top-k items): nulls fill in
        parts.append(pa.table({f.name: notes.column(f.name) if f.name in notes.column_names
                               else pa.nulls(notes.num_rows, f.type) for f in schema}))
    if rej_seq:
        m = len(rej_seq)
        cols = {f.name: pa.nulls(m, f.type) for f in schema}
        cols["op"] = pa.array([REJECTED] * m, pa.string())
        cols["seq"] = pa.array(rej_seq, pa.int64())
        cols["group_id"] = pa.array([gid] * m, pa.string())
        cols["reason"] = pa.array(rej_reason, pa.string())
        parts.append(pa.table(cols, schema=schema))
    if not parts:
        return schema.empty_table()
    out = pa.concat_tables([p.select(schema.names).cast(schema) for p in parts])
    return out.sort_by([("seq", "ascending")]) if len(parts) > 1 else out


def _query_identity() -> tuple:
    """(query id, run id) of the streaming query running this task, (None, None) outside one."""
    from pyspark import TaskContext
    tc = TaskContext.get()
    if tc is None:
        return None, None
    return tc.getLocalProperty("sql.streaming.queryId"), tc.getLocalProperty("spark.jobGroup.id")


def _is_null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _seed(group_spec: GroupSpec, rows_state):
    """First micro-batch: the group from the base snapshot, its rows written to the MapState."""
    snap = group_spec.snapshot()
    text = group_spec.text
    null_keys = set()
    x2s = snap.x2s.tolist() if group_spec.x2 else [None] * len(snap.keys)
    for k, x, y, x2 in zip(snap.keys.tolist(), snap.xs.tolist(), snap.ys.tolist(), x2s):
        t = None if not text or _is_null(y) else str(y)
        rows_state.updateValue((k,), (None if x != x else x, None if text or _is_null(y) else float(y), t,
                                      None if _is_null(x2) else float(x2)))
        if x != x or _is_null(y) or (group_spec.x2 and _is_null(x2)):
            null_keys.add(k)
    return snap.build(), null_keys


def _rebuild(group_spec: GroupSpec, rows_state):
    """The group from the rows in the state store and the subscriptions of the base snapshot."""
    snap = group_spec.snapshot()
    text = group_spec.text
    keys, xs, ys, x2s = [], [], [], []
    for (k,), (x, y, t, x2) in rows_state.iterator():
        keys.append(k)
        xs.append(np.nan if x is None else x)
        ys.append(t if text else (np.nan if y is None else y))
        x2s.append(np.nan if x2 is None else x2)
    xs_a = np.asarray(xs, dtype=np.float64)
    ys_a = np.empty(len(ys), dtype=object) if text else np.asarray(ys, dtype=np.float64)
    if text:
        ys_a[:] = ys
    keys_a = np.empty(len(keys), dtype=object)
    keys_a[:] = keys
    more = {"x2s": np.asarray(x2s, dtype=np.float64)} if group_spec.x2 else {}
    snap = dataclasses.replace(snap, keys=keys_a, xs=xs_a, ys=ys_a, **more)
    null_keys = {k for k, x, y, x2 in zip(keys, xs_a, ys, x2s) if _null_row(x, y, y, x2, group_spec)}
    return snap.build(), null_keys
