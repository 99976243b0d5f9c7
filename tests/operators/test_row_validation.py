"""row_validation.check_rows, the one row check of publish and every stream path (DESIGN §7), against a
reference written row by row from the rules of its docstring (hypothesis: nulls, NaN, ±inf, unreadable
text, bad ``_op``, deletes, event intervals); and the batch-level errors that raise instead."""
from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksub.errors import BadUpdate
from sparksub.operators.shared.row_validation import (DELETE, UPSERT, RowShape, check_rows, interval_reason,
                                               rejected_rows, unknown_key_reason)

STOCK = RowShape("stock", (("symbol", "string"), ("risk", "double"), ("n", "bigint")), "symbol")
EVENTS = RowShape("Ev", (("Name", "string"), ("Price", "double")), None)

numbers = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64))
texts = st.one_of(st.none(), st.sampled_from(["1.5", "-2", "abc", "", "inf", "1e400", " 7"]))
ops = st.one_of(st.none(), st.sampled_from(["upsert", "DELETE", "Upsert", "delete", "merge", ""]))


def reference(row: dict, shape: RowShape, text_risk: bool):
    """(reason or None, op) of one row, by the rules in row_validation's docstring, value by value."""
    o = row.get("_op")
    op = DELETE if o is not None and o.lower() == "delete" else UPSERT
    if o is not None and o.lower() not in ("upsert", "delete"):
        return f"_op must be 'upsert' or 'delete', got '{o}'", op
    if shape.key is None and op == DELETE:
        return f"{shape.name!r} is an append-only stream: no deletes", op
    if shape.key is None and ("t0" in row or "t1" in row):
        t0, t1 = row.get("t0", row.get("t1")), row.get("t1", row.get("t0"))
        if t0 is None or t1 is None or t0 > t1:
            return interval_reason(t0, t1), op
    if shape.key is not None and row.get(shape.key) is None:
        return f"null key {shape.key!r} in an update to {shape.name!r}", op
    for c, t in shape.columns:
        if op == DELETE and c != shape.key:
            continue
        v = row.get(c)
        if v is None:
            continue
        if t == "double":
            if isinstance(v, str):
                try:
                    v = float(pa.array([v]).cast(pa.float64())[0].as_py())   # pyarrow's parse of text
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    return f"column {c!r} of {shape.name!r} is double, cannot read {v}", op
            if math.isnan(v):
                return f"NaN in numeric column {c!r} of {shape.name!r} (use null for a missing value)", op
            if math.isinf(v):
                return (f"{v} in numeric column {c!r} of {shape.name!r} (a number must be finite or null: "
                        f"±inf is rejected as NaN is)"), op
    return None, op


def batch_of(rows: list, shape: RowShape, text_risk: bool, more: tuple = ()) -> pa.Table:
    names = list(dict.fromkeys(k for r in rows for k in r)) or [c for c, _ in shape.columns] + list(more)
    types = {"risk": pa.string() if text_risk else pa.float64(), "Price": pa.float64(), "n": pa.int64(),
             "symbol": pa.string(), "Name": pa.string(), "_op": pa.string(), "t0": pa.int64(), "t1": pa.int64()}
    return pa.table({k: pa.array([r.get(k) for r in rows], types[k]) for k in names})


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_keyed_rows_get_the_reference_reasons(data):
    text_risk = data.draw(st.booleans())
    row = st.fixed_dictionaries({"symbol": st.one_of(st.none(), st.sampled_from("abc")),
                                 "risk": texts if text_risk else numbers,
                                 "n": st.one_of(st.none(), st.integers(-5, 5))},
                                optional={"_op": ops})
    rows = data.draw(st.lists(row, max_size=8))
    if any("_op" in r for r in rows):
        rows = [dict(r, _op=r.get("_op")) for r in rows]
    checked = check_rows(batch_of(rows, STOCK, text_risk), STOCK)
    want = [reference(r, STOCK, text_risk) for r in rows]
    assert list(checked.reasons) == [w[0] for w in want]
    assert checked.ops.tolist() == [w[1] for w in want]
    # a valid row's values are read as they are (text parsed as pyarrow parses it)
    for i, r in enumerate(rows):
        if want[i][0] is None and want[i][1] == UPSERT:
            got = checked.columns["risk"][i].as_py()
            v = r.get("risk")
            assert got == (None if v is None else float(pa.array([v]).cast(pa.float64())[0].as_py()))


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_event_rows_and_their_intervals(data):
    which = data.draw(st.sampled_from([("t0", "t1"), ("t0",), ("t1",), ()]))
    tick = st.one_of(st.none(), st.integers(0, 6))
    row = st.fixed_dictionaries({"Name": st.one_of(st.none(), st.just("IBM")), "Price": numbers,
                                 **{t: tick for t in which}}, optional={"_op": ops})
    rows = data.draw(st.lists(row, max_size=8))
    if any("_op" in r for r in rows):
        rows = [dict(r, _op=r.get("_op")) for r in rows]
    checked = check_rows(batch_of(rows, EVENTS, False, which), EVENTS)
    assert list(checked.reasons) == [reference(r, EVENTS, False)[0] for r in rows]
    if which:   # one column alone: an instantaneous event (t0 = t1)
        assert checked.t0.to_pylist() == [r.get("t0", r.get("t1")) for r in rows]
        assert checked.t1.to_pylist() == [r.get("t1", r.get("t0")) for r in rows]
    else:
        assert checked.t0 is None and checked.t1 is None


def test_fractional_ticks_are_rows_a_text_tick_column_is_the_batch():
    checked = check_rows(pa.table({"Name": ["a", "b", "c"], "Price": [1.0, 2.0, 3.0], "t0": [1.0, 2.5, math.nan]}),
                         EVENTS)
    assert list(checked.reasons) == [None, "t0 must be an integer, got 2.5", "t0 must be an integer, got nan"]
    with pytest.raises(BadUpdate, match="t1 must be an integer column"):
        check_rows(pa.table({"Name": ["a"], "Price": [1.0], "t1": ["late"]}), EVENTS)


def test_batch_level_errors_raise():
    with pytest.raises(BadUpdate, match=r"unknown column\(s\) \['colour'\].*'stock'"):
        check_rows(pa.table({"symbol": ["a"], "risk": [1.0], "n": [1], "colour": ["red"]}), STOCK)
    with pytest.raises(BadUpdate, match="need the key column 'symbol'"):
        check_rows(pa.table({"risk": [1.0]}), STOCK)
    with pytest.raises(BadUpdate, match="lacks column 'n'"):
        check_rows(pa.table({"symbol": ["a"], "risk": [1.0]}), STOCK)
    with pytest.raises(BadUpdate, match=r"lacks column\(s\) \['n'\]"):   # a stream needs every column
        check_rows(pa.table({"symbol": ["a"], "risk": [1.0], "_op": ["delete"]}), STOCK, all_columns=True)
    with pytest.raises(BadUpdate, match="_seq must be an integer column"):
        check_rows(pa.table({"symbol": ["a"], "risk": [1.0], "n": [1], "_seq": ["x"]}), STOCK,
                   extra=("_op", "_seq"))
    # a batch of deletes needs only the key; a null _seq is a row's reason
    checked = check_rows(pa.table({"symbol": ["a", "b"], "_op": ["delete", "delete"], "_seq": [1, None]}), STOCK,
                         extra=("_op", "_seq"))
    assert list(checked.reasons) == [None, "null _seq"] and checked.ops.tolist() == [DELETE, DELETE]


def test_rejected_rows_carry_seq_reason_and_the_given_columns():
    schema = pa.schema([("subscription_id", pa.string()), ("op", pa.string()), ("seq", pa.int64()),
                        ("group_id", pa.string()), ("reason", pa.string()), ("Price", pa.float64())])
    out = rejected_rows(schema, [4, None], ["why", unknown_key_reason("k", "t")], {"Price": [1.5, None]})
    assert out.to_pylist() == [
        {"subscription_id": None, "op": "rejected", "seq": 4, "group_id": None, "reason": "why", "Price": 1.5},
        {"subscription_id": None, "op": "rejected", "seq": None, "group_id": None,
         "reason": "delete of unknown key 'k' from 't'", "Price": None}]
