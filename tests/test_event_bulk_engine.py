"""Bulk registration of event queries through the Engine (issue 18 item 2): ``register_event_queries(template,
params, names)`` registers the same queries as ``CREATE EVENT QUERY`` one by one -- the same matches on random
streams (both kinds in one engine, so one publish feeds both) --, all or nothing on errors, kept by a durable
engine across a reopen (from the checkpoint and from the journal), and each query dropped alone."""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from event_strategies import stock_events
from cayuga_reference import evaluate_queries
from sparksub import Engine
from sparksub.control.event_queries import BulkEventQueryRecord
from sparksub.errors import AnalysisError, DuplicateSubscription, InvalidSubscription, ParseError
from sparksub.grammar.events import parse_event_query

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]   # the extension wraps publish only

STOCK_DDL = "CREATE TABLE Stock (Name STRING, Price BIGINT)"

# An S2-like NEXT with a string and two number parameters, an S4-like FOLD with a DUR bound, a stateless one.
TEMPLATES = {
    "nx": "SELECT * FROM FILTER{Price < :q}(FILTER{Name = :a AND Price > :p}(Stock) NEXT{$2.Name = :b} Stock)",
    "fd": "SELECT * FROM FILTER{DUR >= :d}(FILTER{Name = :a}(Stock) FOLD{$2.Name = $.Name, $2.Price >= $.Price,} "
          "Stock)",
    "st": "SELECT Name, Price * :k AS scaled FROM FILTER{Price >= :p}(Stock)",
}
NAMES = ("IBM", "MSFT")


def literal(v) -> str:
    return "'" + v + "'" if isinstance(v, str) else repr(v)


def bound_text(template: str, row: dict) -> str:
    """The template with the row's values written in (the text a user would give CREATE EVENT QUERY)."""
    for p in sorted(row, key=len, reverse=True):
        template = template.replace(":" + p, literal(row[p]))
    return template


def rows_for(kind: str):
    number = st.one_of(st.integers(0, 7), st.sampled_from([1.5, 3.5, 5.25]))
    if kind == "nx":
        return st.fixed_dictionaries({"a": st.sampled_from(NAMES), "b": st.sampled_from(NAMES), "p": number,
                                      "q": number})
    if kind == "fd":
        return st.fixed_dictionaries({"a": st.sampled_from(NAMES), "d": st.integers(1, 4)})
    return st.fixed_dictionaries({"k": st.integers(1, 3), "p": number})


def multiset(events):
    def canon(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return Counter(repr(sorted((k, canon(v)) for k, v in e.items())) for e in events)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(TEMPLATES)), st.data())
def test_bulk_registration_equals_create_event_query_one_by_one(spark, kind, data):
    rows = data.draw(st.lists(rows_for(kind), min_size=1, max_size=6), label="rows")
    events = data.draw(stock_events(max_size=12, names=NAMES, prices=(1, 8)), label="events")
    cut = data.draw(st.integers(0, len(events)), label="cut")
    e = Engine(spark)
    e.event_partitions = 2
    e.sql(STOCK_DDL)
    table = rows if kind == "nx" else pa.Table.from_pylist(rows)    # a list of dicts (kinds may mix), a table
    assert e.register_event_queries(TEMPLATES[kind], table, prefix="bulk") == len(rows)
    for i, row in enumerate(rows):
        e.sql(f"CREATE EVENT QUERY one_{i} AS {bound_text(TEMPLATES[kind], row)}")
    assert all(isinstance(e._event_queries[f"bulk_{i}"], BulkEventQueryRecord) for i in range(len(rows)))
    for chunk in (events[:cut], events[cut:]):
        if chunk:
            e.publish("Stock", chunk)
    for i in range(len(rows)):
        assert multiset(e.matches(f"bulk_{i}")) == multiset(e.matches(f"one_{i}")), (i, rows[i])


def test_errors_change_nothing(spark):
    e = Engine(spark)
    e.sql(STOCK_DDL)
    e.sql("CREATE TABLE kv (k STRING PRIMARY KEY, v DOUBLE)")
    e.sql("CREATE SUBSCRIPTION sub AS SELECT * FROM Stock WHERE Price > 1")
    e.register_event_queries(TEMPLATES["st"], {"name": ["s0", "s1"], "k": [1, 2], "p": [3, 4]})
    before, queries = e.subscription_table(), e.event_queries()
    nx = TEMPLATES["nx"]
    good = {"a": ["IBM", "MSFT", "IBM"], "b": ["MSFT", "IBM", "IBM"], "p": [1, 2, 3], "q": [4, 5, 6]}
    bad = [
        (ParseError, None, "SELECT * FROM FILTER{Price > :p}(Stock NEXT{", {"p": [1]}, "x"),
        (AnalysisError, r"row 2: parameter :p is NULL", nx, {**good, "p": [1, 2, None]}, "x"),
        (AnalysisError, r"row 1: parameter :q is nan", nx, {**good, "q": [1.0, float("nan"), 2.0]}, "x"),
        (AnalysisError, r"query 'x_0' \(row 0\).*cannot compare", nx, {**good, "p": ["a", "b", "c"]}, "x"),
        (AnalysisError, r"row 1: query name 'x' is also the name of row 0", nx, good, ["x", "x", "y"]),
        (DuplicateSubscription, r"row 1: event query 's1' already exists", nx, good, ["n0", "s1", "n2"]),
        (DuplicateSubscription, r"row 2: 'sub' is already a subscription", nx, good, ["n0", "n1", "sub"]),
        (AnalysisError, r"unknown stream 'Trades'", "SELECT * FROM FILTER{Price > :p}(Trades)", {"p": [1]}, "x"),
        (AnalysisError, r"PRIMARY KEY", "SELECT * FROM FILTER{v > :p}(kv) NEXT{} kv", {"p": [1]}, "x"),
        (AnalysisError, r"\(row 1\) .*the template PUBLISHes 'Up'", "SELECT * FROM FILTER{Price > :p}(Stock) "
         "NEXT{} Stock PUBLISH Up", {"p": [1, 2]}, "x"),
        (AnalysisError, r"column 'zz' of the parameter table is not a parameter", nx, {**good, "zz": [1, 2, 3]}, "x"),
        (AnalysisError, r"row 1: no value for column 'q'", nx, [{"a": "I", "b": "I", "p": 1, "q": 2},
                                                                 {"a": "I", "b": "I", "p": 1}], "x"),
        (InvalidSubscription, r"needs the queries' names", nx, good, None),
    ]
    for error, message, template, params, names in bad:
        kwargs = {"prefix": names} if isinstance(names, str) else {"names": names}
        with pytest.raises(error, match=message):
            e.register_event_queries(template, params, **kwargs)
        assert e.event_queries() == queries and e.subscription_table() == before, message
    assert e.register_event_queries(nx, good, names=["n0", "n1", "n2"]) == 3       # and then it goes through
    assert e.event_queries() == queries + ["n0", "n1", "n2"]


def test_durable_reopen_keeps_them_and_one_drops_alone(spark, tmp_path):
    events = [{"Name": NAMES[i % 3 == 0], "Price": (i * 7) % 9 + 1, "t0": i, "t1": i} for i in range(40)]
    rows = [{"name": f"f{i}", "a": NAMES[i % 2], "d": 1 + i % 3} for i in range(30)]
    e = Engine(spark, catalyst=False, path=tmp_path / "e")
    e.event_partitions = 2
    e.sql(STOCK_DDL)
    e.register_event_queries(TEMPLATES["fd"], pa.Table.from_pylist(rows))      # names: the `name` column
    e.register_event_query("single", "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock")
    e.publish("Stock", events[:15])
    e.sql("DROP EVENT QUERY f3")
    names = e.event_queries()
    assert "f3" not in names and len(names) == 30
    shown = e.subscription_table().to_pylist()
    assert [r["name"] for r in shown if r["class"] == "EVENT"] == names
    f4 = parse_event_query(bound_text(TEMPLATES["fd"], {"a": "IBM", "d": 2})).to_cel()
    assert next(r for r in shown if r["name"] == "f4")["template"] == f4
    e.close(checkpoint=False)                       # reopened from the journal: the bulk record replayed
    e = Engine(spark, catalyst=False, path=tmp_path / "e")
    assert e.event_queries() == names and isinstance(e._event_queries["f4"], BulkEventQueryRecord)
    e.publish("Stock", events[15:28])
    e.close()                                       # reopened from the checkpoint (a new file without f3's row)
    e = Engine(spark, catalyst=False, path=tmp_path / "e")
    assert e.event_queries() == names and isinstance(e._event_queries["f29"], BulkEventQueryRecord)
    assert len(list((tmp_path / "e" / "event_queries").iterdir())) == 1
    e.publish("Stock", events[28:])
    texts = {r["name"]: bound_text(TEMPLATES["fd"], {"a": r["a"], "d": r["d"]}) for r in rows}
    texts["single"] = "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock"
    expected = evaluate_queries({q: parse_event_query(texts[q]) for q in names}, {"Stock": events})
    for q in names:                                 # (a drop leaves the others' partial matches as they were)
        assert multiset(e.matches(q)) == multiset(expected[q]), q
    assert sum(len(e.matches(q)) for q in names) > 0
    e.close()
