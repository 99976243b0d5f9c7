"""Input conversion and checks shared by the Engine's parts: what a caller may pass as rows or parameters
(Spark, pandas or Arrow frames, dicts of arrays, lists of rows), turned into Arrow and numpy."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparksub.errors import BadUpdate, DuplicateSubscription, InvalidSubscription
from sparksub.operators.shared import row_validation

arrow_type = row_validation.arrow_type  # a column's Arrow type, as validation casts it


def param_array(values) -> np.ndarray:
    """A parameter column as numpy.  A list of values of more than one type, or of integers beyond int64,
    stays an object array: numpy would make ``[1.0, True]`` two floats and ``[1, "x"]`` two strings, and
    the binding could then neither refuse the boolean nor name the bad row."""
    if isinstance(values, np.ndarray) or not isinstance(values, (list, tuple)):
        return np.asarray(values)
    kinds = {type(v) for v in values if v is not None}
    if len(kinds) == 1 and kinds != {int}:
        out = np.asarray(values)
        if out.dtype != object:
            return out
    elif kinds == {int} and None not in values and all(-2 ** 63 <= v < 2 ** 63 for v in values):
        return np.asarray(values, dtype=np.int64)
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def arrow_columns(columns: dict) -> pa.Table:
    """A dict of columns as an Arrow table; a column whose values are of no one type (``["x", 1.0]``) or of
    another length is a BadUpdate naming it, not a raw pyarrow error."""
    arrays = {}
    for name, values in columns.items():
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            arrays[name] = values
            continue
        try:
            arrays[name] = pa.array(values if isinstance(values, np.ndarray) else list(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError) as err:
            raise BadUpdate(f"column {name!r}: its values are not of one type Arrow can hold ({err})",
                            None, str(name)) from None
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise BadUpdate(f"columns of different lengths: {lengths}")
    return pa.table(arrays)


def param_columns(params) -> dict:
    if isinstance(params, dict):
        return {k: param_array(v) for k, v in params.items()}
    table = to_arrow(params)
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}


def checked_ids(ids) -> np.ndarray:
    """``subscribe_many``'s ids as an object array, every one checked -- a non-empty string (not None, not
    an int, which would be silently ``str()``ed), none twice -- naming the first bad row."""
    ids = np.asarray(ids, dtype=object)
    if ids.ndim != 1:
        raise InvalidSubscription(f"the 'id' column must be one-dimensional, got shape {ids.shape}")
    values = ids.tolist()
    bad = next((i for i, x in enumerate(values) if not isinstance(x, str) or not x), None)
    if bad is not None:
        raise InvalidSubscription(f"subscription ids are non-empty strings: row {bad} of 'id' holds "
                                  f"{values[bad]!r} ({type(values[bad]).__name__})")
    try:  # ids travel as Arrow (UTF-8) strings: SHOW, notifications
        pa.array(values, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        bad = next(i for i, x in enumerate(values) if not utf8_encodable(x))
        raise InvalidSubscription(f"subscription ids are valid Unicode text: row {bad} of 'id' holds "
                                  f"{values[bad]!r}, which has no UTF-8 form (a lone surrogate)") from None
    if len(set(values)) != len(values):
        seen: dict = {}
        for i, x in enumerate(values):
            if x in seen:
                raise DuplicateSubscription(f"duplicate subscription id {x!r} (rows {seen[x]} and {i} of 'id')")
            seen[x] = i
    return ids


def to_arrow(data) -> pa.Table:
    """Spark DataFrame, pandas DataFrame, Arrow table/batch, a dict of arrays, or a list of rows."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    mod = type(data).__module__
    if mod.startswith("pyspark"):
        return data.toArrow()
    if mod.startswith("pandas"):
        table = pa.Table.from_pandas(data, preserve_index=False)
        # NaN in a float column is the value NaN -- refused like a NaN from any other source (DESIGN §7) --,
        # not pandas' missing marker, which from_pandas makes it: a missing value is None / NaN in an object
        # column or pd.NA in a nullable column (Float64, Int64), which are null
        for i, name in enumerate(table.column_names):
            column = data.iloc[:, i]
            if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f":   # not pandas' nullable Float64
                table = table.set_column(i, name, pa.array(column.to_numpy(), from_pandas=False))
        return table
    if isinstance(data, dict):
        return arrow_columns(data)
    if isinstance(data, (list, tuple)):
        if not data:
            raise BadUpdate("an empty list of rows has no columns; pass a DataFrame or dict of arrays")
        if hasattr(data[0], "asDict"):
            data = [r.asDict() for r in data]
        if isinstance(data[0], dict):
            # pyarrow takes the schema from the first row; rows may differ (a delete has only the key)
            names = list(dict.fromkeys(k for row in data for k in row))
            return arrow_columns({k: [row.get(k) for row in data] for k in names})
    raise BadUpdate(f"cannot read rows from a {type(data).__name__}: pass a Spark or pandas DataFrame, "
                    f"an Arrow table, a dict of arrays or a list of dicts")


def utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
