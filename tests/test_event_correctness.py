"""Issue 15 items 2–3 through the engine (``publish`` in Spark tasks) and the streaming operator:
Cayuga's resolution of unqualified names and the registration type check (positioned errors, nothing
registered changes), and a run-time error charged to the query that raised it — its neighbours in the
event class, the replica, the static index and the family keep every match.

Oracle: the reference interpreter (``cayuga_reference.evaluate_queries``) over the published events, each
query on its own; and hand-written Python for the issue's example.
"""
from __future__ import annotations

import collections

import pandas as pd
import pyarrow as pa
import pytest

from sparksub import Engine
from sparksub.errors import AnalysisError
from sparksub.grammar.events import parse_event_query
from sparksub.operators.events import partitions as evp
from sparksub.runtime import event_stream as ses
from sparksub.runtime import events as spark_events
from sparksub.runtime import replicas as spark_replicas
from cayuga_reference import evaluate_queries

STOCK_DDL = "CREATE TABLE Stock (Name STRING, Price DOUBLE, Volume BIGINT)"


def oracle(queries: dict, events: list, errors: dict | None = None) -> dict:
    return evaluate_queries({n: parse_event_query(q) for n, q in queries.items()}, {"Stock": events}, errors=errors)


def numbered(events):
    return [{**e, "t0": i, "t1": i} for i, e in enumerate(events)]


def stock(*rows):
    return [{"Name": n, "Price": float(p), "Volume": v} for n, p, v in rows]


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_unqualified_names_and_type_errors_through_the_engine(spark, explain_snapshot):
    e = Engine(spark)
    e.sql(STOCK_DDL)
    # The example: `IBMPrice` is the left input's (IBM_PAIR has it, Stock does not).
    e.sql("CREATE EVENT QUERY pair AS SELECT Price AS IBMPrice FROM FILTER{Name = 'IBM'}(Stock) PUBLISH IBM_PAIR;\n"
          "CREATE EVENT QUERY above AS SELECT * FROM IBM_PAIR NEXT{IBMPrice < $2.Price} Stock")
    assert "NEXT{$1.IBMPrice < $2.Price}" in e.explain("above")          # resolved as it runs
    before = (e.event_queries(), explain_snapshot.normalise(e.explain("above")))
    bad = {"SELECT * FROM Stock NEXT{Nope = $2.Name} Stock": ("unknown attribute Nope", 1, 26),
           "SELECT * FROM Stock NEXT{$1.Name = $2.Name AND $2.Price > 'abc'} Stock": ("cannot compare", 1, 57),
           "SELECT * FROM FILTER{Name > 20}(Stock)": ("cannot compare Name (a string) with 20", 1, 27),
           "SELECT Name + 'x' AS s FROM Stock": ("arithmetic '+' needs numbers", 1, 8),
           "SELECT Nope FROM Stock": ("unknown attribute Nope", 1, 8),
           "SELECT * FROM FILTER{Volume}(Stock)": ("not a predicate", 1, 22)}
    for text, (words, line, column) in bad.items():
        with pytest.raises(AnalysisError) as info:
            e.sql(f"CREATE EVENT QUERY bad AS {text}")
        assert words in str(info.value) and (info.value.line, info.value.column) == (line, column), str(info.value)
        assert "^" in str(info.value)
    assert (e.event_queries(), explain_snapshot.normalise(e.explain("above"))) == before
    events = stock(("IBM", 100, 1), ("MSFT", 50, 1), ("IBM", 90, 1), ("MSFT", 120, 1), ("IBM", 95, 1),
                   ("ORCL", 99, 1), ("IBM", 101, 1))
    e.publish("Stock", events[:3])
    e.publish("Stock", events[3:])
    expected = []                          # independent: each IBM event, the first later one priced above
    for i, a in enumerate(events):
        if a["Name"] == "IBM":
            b = next((b for b in events[i + 1:] if b["Price"] > a["Price"]), None)
            if b is not None:
                expected.append((a["Price"], b["Name"], b["Price"], i, events.index(b)))
    assert expected == [(100.0, "MSFT", 120.0, 0, 3), (90.0, "MSFT", 120.0, 2, 3), (95.0, "ORCL", 99.0, 4, 5)]
    assert [(m["IBMPrice"], m["Name"], m["Price"], m["t0"], m["t1"]) for m in e.matches("above")] == expected


@pytest.mark.spark
@pytest.mark.catalyst_passthrough
def test_a_run_time_error_belongs_to_the_query_that_raised_it(spark):
    # After the type check a numeric overflow remains possible (Price ^ Volume).  `boom_*` raise on some
    # events; their neighbours share the keyed class and its replicas, the unkeyed replica, the static
    # index (Price > 2) and a family (fam_1/fam_2 differ only in constants).
    queries = {
        "boom_k": "SELECT * FROM Stock NEXT{$1.Name = $2.Name AND $2.Price ^ $1.Volume > 1} Stock",
        "fine_k": "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock",
        "boom_u": "SELECT Name, Price ^ Volume AS big FROM FILTER{Price > 2}(Stock)",
        "fam_1": "SELECT * FROM FILTER{Price > 2}(Stock) NEXT{$2.Price > $1.Price} Stock",
        "fam_2": "SELECT * FROM FILTER{Price > 3}(Stock) NEXT{$2.Price > $1.Price} Stock",
        "fine_u": "SELECT * FROM FILTER{Price > 2}(Stock)"}
    e = Engine(spark)
    e.event_partitions = 2
    e.sql(STOCK_DDL)
    for name, text in queries.items():
        e.register_event_query(name, text)
    plan = e._event_plan.class_of
    assert plan["boom_k"] == plan["fine_k"] == "Name@Stock"
    assert any(plan["boom_u"] == plan[q] for q in ("fam_1", "fam_2", "fine_u"))   # a shared unkeyed replica
    events = stock(("IBM", 3, 1), ("MSFT", 10, 400), ("IBM", 6, 400), ("MSFT", 7, 1), ("IBM", 4, 2),
                   ("MSFT", 10, 1), ("IBM", 5, 1))
    rows = e.publish("Stock", events[:4]).collect() + e.publish("Stock", events[4:]).collect()
    assert not [r for r in rows if r.op == "error"]
    errors: dict = {}
    expected = oracle(queries, numbered(events), errors)
    for name in queries:
        assert e.matches(name) == expected[name], name
        alone = oracle({name: queries[name]}, numbered(events))[name]
        assert e.matches(name) == alone                                      # as if alone
    for name in ("fine_k", "fam_1", "fam_2", "fine_u"):
        assert expected[name] and not errors[name]
    rejected = sorted((r.query, r.seq, r.Name, r.t1) for r in rows if r.op == "rejected")
    # boom_u: 10 ^ 400 and 6 ^ 400 overflow; boom_k: the MSFT chain from (10, 400) meets 7 and 10: 7 ^ 400,
    # 10 ^ 400 (the pairs of other names the instance index never visits; the oracle also reports them)
    assert rejected == [("boom_k", 3, "MSFT", 3), ("boom_k", 5, "MSFT", 5), ("boom_u", 1, "MSFT", 1),
                        ("boom_u", 2, "IBM", 2)]
    assert all("cannot apply ^" in r.reason for r in rows if r.op == "rejected")
    assert {(q, t1) for q, _, _, t1 in rejected} <= {(q, t1) for q, errs in errors.items() for _, t1, _ in errs}
    # Cold workers replay the logs (kept whole): the same state, the same errors dropped again.
    for c in e._event_classes.values():
        c.replicas = {rid: spark_replicas.cold(r) for rid, r in c.replicas.items()}
    spark_events._CACHE.clear()
    more = stock(("MSFT", 11, 1), ("IBM", 9, 1))
    e.publish("Stock", more)
    expected = oracle(queries, numbered(events + more))
    for name in queries:
        assert e.matches(name) == expected[name], name


class _Value:
    """A ValueState look-alike (the streaming operator's state, without a streaming query)."""

    def __init__(self):
        self.value = None

    def exists(self):
        return self.value is not None

    def get(self):
        return self.value

    def update(self, v):
        self.value = v


def test_the_streaming_operator_charges_a_run_time_error_to_its_query_alone():
    queries = {"boom": "SELECT Name, Price ^ Volume AS big FROM Stock",
               "next": "SELECT * FROM Stock NEXT{$2.Price > $1.Price} Stock",
               "fine": "SELECT * FROM FILTER{Price > 2}(Stock)"}
    columns = {"Name": pa.string(), "Price": pa.float64(), "Volume": pa.int64()}
    spec = ses.event_stream_spec("Stock", columns, queries, partitions=1)
    events = numbered(stock(("A", 3, 1), ("B", 10, 400), ("C", 4, 1)))
    by_replica = collections.defaultdict(list)
    for n, ev in enumerate(events):
        for c in spec.classes:
            by_replica[evp.replica_id(c.id, 0)].append({"a0": ev["Name"], "a1": ev["Price"], "a2": ev["Volume"],
                                                        "ev_t0": ev["t0"], "ev_t1": ev["t1"], "ev_ord": n})
    rows = []
    saved, ses._CACHE = ses._CACHE, {}
    try:
        for rid, got in by_replica.items():
            pdf = pd.DataFrame(got, columns=["a0", "a1", "a2", "ev_t0", "ev_t1", "ev_ord"])
            rows += ses.apply_event_micro_batch(spec, rid, pdf, _Value()).to_dict("records")
    finally:
        ses._CACHE = saved
    expected = oracle(queries, events)
    for name in queries:
        got = [r for r in rows if r["op"] == ses.MATCH and r["query"] == name]
        assert [(r["t0"], r["t1"]) for r in got] == [(m["t0"], m["t1"]) for m in expected[name]], name
    assert expected["next"] and expected["fine"]
    [r] = [r for r in rows if r["op"] == ses.REJECTED]
    assert (r["query"], r["t1"], r["Name"]) == ("boom", 1, "B") and "cannot apply ^" in r["reason"]
