"""One validation of table rows for ``publish`` and every ``stream`` path (DESIGN §7).

A published batch and a micro-batch of a stream go through :func:`check_rows`, so a malformed row gets the
same ``reason`` on both paths, is set aside as a ``rejected`` row (:func:`rejected_rows`), and the rest goes
on.  Pure: Arrow in, Arrow and numpy out, no pyspark.  (``Engine.publish`` calls it on the driver;
``spark_stream.checked_updates`` inside a ``mapInArrow`` task.)

**Batch-level errors** raise :class:`BadUpdate` and nothing is applied: a column the table does not have, a
keyed table's batch without its key column, an ``_seq``/``t0``/``t1`` column that is not an integer column,
an upsert batch lacking one of the table's columns.

**Row-level reasons** (the first that applies wins, in this order):

* ``_op`` is neither ``'upsert'`` nor ``'delete'`` (case-insensitive; null is ``'upsert'``);
* a delete on an append-only stream (a table without a key);
* a null ``_seq`` (streams only);
* an event's interval (tables without a key, when ``t0``/``t1`` are given): a null ``t0`` or ``t1`` (one
  *column* alone is an instantaneous event; a null *value* is malformed), a tick that is not an integer,
  ``t0 > t1``;
* a null key;
* per column in table order (for a delete only the key is read): a value that does not cast to the column's
  type, NaN, or ±inf in a floating column.

**Why ±inf is rejected** rather than supported: the range cores use ±inf as their markers of "nothing
there".  An insertion is an update from Y = +inf and a deletion an update to +inf (000 Corollary 1,
dissertation §5.3.1), the A2B-tree pads its leaves and answers an empty range with +inf and ends every Mar /
hull scan at a virtual point X = ±inf, and an infinite OUTER end of a reformulated message means "open" (it
admits an open subscription end).  A stored Y = +inf would be indistinguishable from an absent row, and a
stored X = ±inf from the end of the axis; RANGE_AGG's exact sums are integers over finite doubles.  Giving the
cores a second "absent" marker is a redesign of every range class and of the subscriber side; until then a
number must be finite or null, in every table, as NaN already had to be.  Subscription bounds may be ±inf:
they are open range ends, not data.

A delete of a key the table does not hold is a row-level reason too, but it needs the table's rows: the
caller finds it (``Engine.publish`` in its rows, a stream in its state store) and words it with
:func:`unknown_key_reason`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparksub.errors import BadUpdate
from sparksub.operators.shared.schemas import DELETE, UPSERT

__all__ = ["RowShape", "CheckedRows", "check_rows", "rejected_rows", "interval_reason", "unknown_key_reason", "arrow_type",
           "UPSERT", "DELETE", "REJECTED"]

#: ``op`` of a row set aside (publish and stream alike)
REJECTED = "rejected"
_INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})


def arrow_type(spark_type: str) -> pa.DataType:
    """The Arrow type a column of Spark SQL type ``spark_type`` is held in (integers as int64, every
    fractional type as float64)."""
    if spark_type in _INTEGRAL:
        return pa.int64()
    if spark_type in ("double", "float", "decimal"):
        return pa.float64()
    return {"string": pa.string(), "boolean": pa.bool_(), "timestamp": pa.timestamp("us"),
            "date": pa.date32()}[spark_type]


@dataclass(frozen=True)
class RowShape:
    """What validation knows of a table: its name, columns ``(name, Spark SQL type)`` and key (None: an
    append-only event stream)."""
    name: str
    columns: tuple
    key: str | None

    @classmethod
    def of(cls, table_def) -> "RowShape":
        """From a ``planner.catalog.TableDef`` (or anything with ``name``, ``columns``, ``key``)."""
        return cls(table_def.name, tuple(table_def.columns), table_def.key)

    @property
    def names(self) -> tuple:
        return tuple(c for c, _ in self.columns)


@dataclass
class CheckedRows:
    """A checked batch: ``columns`` every table column in its Arrow type (null where a value could not be
    read, or the batch lacks the column), ``ops`` UPSERT/DELETE per row, ``reasons`` per row (None: valid),
    ``seqs`` the ``_seq`` column (None: not given), ``t0``/``t1`` the events' ticks (None: not given)."""
    columns: dict
    ops: np.ndarray
    reasons: np.ndarray
    seqs: pa.Array | None = None
    t0: pa.Array | None = None
    t1: pa.Array | None = None

    @property
    def ok(self) -> np.ndarray:
        return np.fromiter((r is None for r in self.reasons), dtype=bool, count=len(self.reasons))

    def table(self, shape: RowShape) -> pa.Table:
        """The table's columns (in order) plus an int8 ``op``."""
        out = pa.table({c: self.columns[c] for c in shape.names})
        return out.append_column("op", pa.array(self.ops, pa.int8()))


def interval_reason(t0, t1) -> str | None:
    """Why an event's interval is malformed (None: it is not): a null tick, or ``t0 > t1``."""
    if t0 is None:
        return "null t0"
    if t1 is None:
        return "null t1"
    return f"t0={t0} > t1={t1}" if t0 > t1 else None


def unknown_key_reason(key, table: str) -> str:
    """The reason of a delete whose key the table does not hold."""
    return f"delete of unknown key {key!r} from {table!r}"


def check_rows(batch: pa.Table, shape: RowShape, *, extra: tuple = ("_op",), all_columns: bool = False) -> CheckedRows:
    """Check ``batch`` against ``shape`` (module docstring).  ``extra``: the non-table columns the caller
    accepts (``_op``; a stream also ``_seq``; an event stream's ``t0``/``t1`` are always accepted);
    ``all_columns``: every table column must be present (a stream's schema), else an upsert batch must have
    them all and a batch of deletes needs only the key."""
    names = batch.column_names
    table_names = shape.names
    times = ("t0", "t1") if shape.key is None else ()
    unknown = sorted(set(names) - set(table_names) - set(extra) - set(times))
    if unknown:
        raise BadUpdate(f"unknown column(s) {unknown} for table {shape.name!r} (columns: {', '.join(table_names)}"
                        + (f"; and optional {', '.join(e for e in extra + times)})" if extra or times else ")"))
    if shape.key is not None and shape.key not in names:
        raise BadUpdate(f"updates to {shape.name!r} need the key column {shape.key!r}")
    missing = [c for c in table_names if c not in names]
    if missing and all_columns:
        raise BadUpdate(f"the stream of updates to {shape.name!r} lacks column(s) {missing}")
    n = batch.num_rows
    reasons = np.full(n, None, dtype=object)
    flagged = np.zeros(n, dtype=bool)   # rows with a reason already (the first reason wins)

    def reject(mask: np.ndarray, why) -> None:
        """``why`` (a string, or a function of the row index) for the rows in ``mask`` without a reason yet."""
        mask = mask & ~flagged
        if not mask.any():
            return
        idx = np.flatnonzero(mask)
        flagged[idx] = True
        for i in idx.tolist():
            reasons[i] = why if isinstance(why, str) else why(i)

    ops = np.zeros(n, dtype=np.int8)
    if "_op" in names:
        raw = batch.column("_op")
        text = raw if pa.types.is_string(raw.type) else raw.cast(pa.string())
        low = pc.utf8_lower(text)
        ops[_mask(pc.equal(low, "delete"))] = DELETE
        bad = ~_mask(pc.is_in(low, value_set=pa.array(["upsert", "delete"]))) & _mask(pc.is_valid(low))
        values = text.to_pylist() if bad.any() else None
        reject(bad, lambda i: f"_op must be 'upsert' or 'delete', got '{values[i]}'")
    deletes = ops == DELETE
    if shape.key is None:
        reject(deletes, f"{shape.name!r} is an append-only stream: no deletes")
    seqs = None
    if "_seq" in names:
        seqs = _integral_column(batch.column("_seq"), "_seq", reject)
        reject(~_mask(pc.is_valid(seqs)), "null _seq")
    t0 = t1 = None
    given = [t for t in times if t in names]
    if given:
        ticks = {t: _integral_column(batch.column(t), t, reject) for t in given}
        t0, t1 = ticks.get("t0", ticks.get("t1")), ticks.get("t1", ticks.get("t0"))
        odd = ~_mask(pc.is_valid(t0)) | ~_mask(pc.is_valid(t1)) | _mask(pc.greater(t0, t1))
        if odd.any():
            a, b = t0.to_pylist(), t1.to_pylist()
            reject(odd, lambda i: interval_reason(a[i], b[i]))
    if shape.key is not None:
        reject(~_mask(pc.is_valid(batch.column(shape.key))), f"null key {shape.key!r} in an update to {shape.name!r}")
    upserts = ~deletes
    if missing and upserts.any():
        i = int(np.flatnonzero(upserts)[0])
        raise BadUpdate(f"upsert into {shape.name!r} lacks column {missing[0]!r}", i, missing[0])
    columns = {}
    for cname, ctype in shape.columns:
        target = arrow_type(ctype)
        if cname not in names:
            columns[cname] = pa.nulls(n, target)
            continue
        read = cname == shape.key or upserts   # a delete reads only the key
        col, unreadable = _cast(batch.column(cname), target)
        if unreadable is not None:
            raw = batch.column(cname)
            reject(unreadable & read, lambda i: f"column {cname!r} of {shape.name!r} is {ctype}, cannot read "
                                                f"{_text(raw[i].as_py())}")
        if pa.types.is_floating(target):
            nan = _mask(pc.is_nan(col))
            reject(nan & read, f"NaN in numeric column {cname!r} of {shape.name!r} (use null for a missing value)")
            inf = _mask(pc.is_inf(col))
            if inf.any():
                vals = col.to_numpy(zero_copy_only=False)
                reject(inf & read, lambda i: f"{vals[i]} in numeric column {cname!r} of {shape.name!r} (a number "
                                             f"must be finite or null: ±inf is rejected as NaN is)")
        columns[cname] = col
    return CheckedRows(columns, ops, reasons, seqs, t0, t1)


def rejected_rows(schema: pa.Schema, seqs, reasons, columns: dict | None = None) -> pa.Table:
    """The ``rejected`` rows of ``schema`` (an output schema with ``op``, ``seq``, ``reason``): ``op =
    'rejected'``, the row's ``seq`` and ``reason``, ``columns`` (output column -> values) where the schema has
    them, every other column null (``group_id`` too: a malformed row belongs to no group)."""
    n = len(reasons)
    data = {f.name: pa.nulls(n, f.type) for f in schema}
    data["op"] = pa.array([REJECTED] * n, pa.string())
    data["seq"] = pa.array(seqs, pa.int64())
    data["reason"] = pa.array(list(reasons), pa.string())
    for c, values in (columns or {}).items():
        if c in data and c not in ("op", "seq", "reason"):
            arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
            try:
                data[c] = arr.cast(schema.field(c).type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # a value that does not fit the output column stays null (the row is rejected anyway)
    return pa.table(data, schema=schema)


# ---- helpers ---------------------------------------------------------------------------------------------

def _mask(arr) -> np.ndarray:
    """A boolean Arrow array as numpy, null as False."""
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _text(v) -> str:
    """A value as the reason quotes it (as Spark's ``CAST(v AS STRING)`` would, for the common types)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _cast(col, target: pa.DataType):
    """``col`` cast to ``target``: (array, None), or, when some values do not cast, (array with those values
    null, their mask)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.type == target:
        return col, None
    try:
        return col.cast(target), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    values, bad = [], np.zeros(len(col), dtype=bool)
    for i, v in enumerate(col):   # the slow path: only a batch holding a bad value takes it
        if not v.is_valid:
            values.append(None)
            continue
        try:
            values.append(pa.array([v.as_py()], col.type).cast(target)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            values.append(None)
            bad[i] = True
    return pa.array(values, target), bad


def _integral_column(col, name: str, reject) -> pa.Array:
    """An ``_seq``/``t0``/``t1`` column as int64: an integer (or all-null) column as is; a floating one's
    values must be integers (others are rejected rows: NaN, 1.5); any other type is a batch-level error."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_integer(col.type) or pa.types.is_null(col.type):
        return col.cast(pa.int64())
    if pa.types.is_floating(col.type):
        vals = col.to_numpy(zero_copy_only=False)
        valid = _mask(pc.is_valid(col))
        whole = valid & np.isfinite(vals) & (np.floor(np.where(np.isfinite(vals), vals, 0)) == vals)
        bad = valid & ~whole
        reject(bad, lambda i: f"{name} must be an integer, got {float(vals[i])!r}")
        out = np.where(whole, vals, 0).astype(np.int64)
        return pa.array(out, pa.int64(), mask=~whole)
    what = "tick" if name != "_seq" else "column"
    raise BadUpdate(f"{name} must be an integer column, got {col.type}"
                    + (" (ticks)" if what == "tick" else ""), None, name)
