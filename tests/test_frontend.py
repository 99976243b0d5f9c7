"""The SQL front end and the classifier: every accepted spelling classifies the same, every rejected
shape names itself, and bad statements fail with a position and change nothing."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sparksub import (AnalysisError, DuplicateSubscription, Engine, InvalidSubscription, ParseError,
                      UnknownSubscription, UnsupportedSubscription)
from sparksub.grammar import parse_select
from sparksub.planner.catalog import Catalog, TableDef
from sparksub.planner.classifier import bind_filter_columns, bind_range, plan_subscription

CAT = Catalog()
CAT.add(TableDef("stock", (("symbol", "string"), ("risk", "double"), ("per", "double"), ("rank", "bigint"),
                           ("sector", "string")), "symbol"))


def classify(sql: str, params=None):
    p = plan_subscription(parse_select(sql), CAT)
    x1, x2 = bind_range(p.physical, params or {}, 1)
    return p.klass, p.physical.group_key, (float(x1[0]), float(x2[0]))


NEXT = math.nextafter
SPELLINGS = [
    ("SELECT MIN(per) FROM stock WHERE risk BETWEEN 20 AND 60", (20.0, 60.0)),
    ("SELECT MIN(per) FROM stock WHERE 20 <= risk AND risk <= 60", (20.0, 60.0)),
    ("SELECT MIN(per) FROM stock WHERE risk <= 60 AND risk >= 20", (20.0, 60.0)),
    ("SELECT MIN(per) FROM stock WHERE 60 >= risk AND 20 <= risk", (20.0, 60.0)),
    ("select min(per) from stock where (risk >= 20) and (risk <= 60)", (20.0, 60.0)),
    ("SELECT MIN(per) AS m FROM stock WHERE risk BETWEEN 20 AND 60", (20.0, 60.0)),
    ("SELECT MIN(per) FROM stock WHERE risk > 20 AND risk < 60", (NEXT(20, 99), NEXT(60, -99))),
    ("SELECT MIN(per) FROM stock WHERE 20 < risk AND 60 > risk", (NEXT(20, 99), NEXT(60, -99))),
    ("SELECT MIN(per) FROM stock WHERE risk >= 20", (20.0, math.inf)),
    ("SELECT MIN(per) FROM stock WHERE risk < 60", (-math.inf, NEXT(60, -99))),
    ("SELECT MIN(per) FROM stock WHERE risk BETWEEN -5 AND 0", (-5.0, 0.0)),
]


@pytest.mark.parametrize("sql,bounds", SPELLINGS)
def test_accepted_spellings_classify_as_range_min(sql, bounds):
    klass, key, got = classify(sql)
    assert klass == "RANGE_MIN" and key == ("RANGE_MIN", "stock", "risk", "per")
    assert got == bounds


def test_max_and_integral_strict_bounds():
    assert classify("SELECT MAX(per) FROM stock WHERE risk BETWEEN 1 AND 2")[0] == "RANGE_MAX"
    # over a BIGINT column, rank > 2 is rank >= 3 and rank < 7 is rank <= 6
    klass, key, got = classify("SELECT MIN(per) FROM stock WHERE rank > 2 AND rank < 7")
    assert key == ("RANGE_MIN", "stock", "rank", "per") and got == (3.0, 6.0)


def test_named_parameters_bind_vectorised():
    p = plan_subscription(parse_select("SELECT MIN(per) FROM stock WHERE risk > :lo AND risk <= :hi"), CAT)
    x1, x2 = bind_range(p.physical, {"lo": np.array([1.0, 5.0]), "hi": np.array([2.0, 9.0])}, 2)
    assert x1.tolist() == [NEXT(1.0, 9), NEXT(5.0, 9)] and x2.tolist() == [2.0, 9.0]
    with pytest.raises(InvalidSubscription, match="'b'.*empty range"):
        bind_range(p.physical, {"lo": np.array([1.0, 5.0]), "hi": np.array([2.0, 3.0])}, 2,
                   ids=np.array(["a", "b"], dtype=object))


REJECTED = [
    ("SELECT COUNT(per) FROM stock WHERE risk BETWEEN 1 AND 2", "Aggregate[COUNT(per)]"),
    ("SELECT SUM(per) FROM stock WHERE risk BETWEEN 1 AND 2 AND rank = 3", "Aggregate[SUM(per)]"),
    ("SELECT symbol, per FROM stock WHERE risk BETWEEN 1 AND 2 ORDER BY per, risk LIMIT 5",
     "Limit[?](Sort[per, risk]"),
    ("SELECT DISTINCT per, risk FROM stock WHERE risk BETWEEN 1 AND 2", "Distinct[]"),
    ("SELECT * FROM stock WHERE risk > per", "risk > per"),
    ("SELECT symbol, per + 1 FROM stock WHERE risk > 3", "per + ?"),
    ("SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 2 OR risk > 9", "OR"),
    # two ranges are a BOX_MIN (tests/operators/test_box_groups.py); three are not
    ("SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 2 AND per < 3 AND rank > 1", "per IN"),
    ("SELECT MIN(per) FROM stock WHERE risk = 5", "risk = ?"),
    ("SELECT MIN(per) FROM stock WHERE risk >= :a AND risk >= :b", "risk IN [:a"),
    ("SELECT MIN(per), MAX(per) FROM stock WHERE risk BETWEEN 1 AND 2", "MULTI"),
]


@pytest.mark.parametrize("sql,shape_part", REJECTED)
def test_rejected_shapes_name_themselves(sql, shape_part):
    with pytest.raises(UnsupportedSubscription) as info:
        classify(sql)
    err = info.value
    assert shape_part in err.shape, err.shape
    assert "RANGE_MIN" in str(err) and "RANGE_MAX" in str(err)


@pytest.mark.parametrize("sql,error,needle", [
    ("SELECT MIN(per) FROM nope WHERE risk BETWEEN 1 AND 2", AnalysisError, "unknown table 'nope'"),
    ("SELECT MIN(per) FROM stock WHERE riskk BETWEEN 1 AND 2", AnalysisError, "unknown column 'riskk'"),
    ("SELECT MIN(pe) FROM stock WHERE risk BETWEEN 1 AND 2", AnalysisError, "unknown column 'pe'"),
    ("SELECT MIN(per) FROM stock WHERE sector BETWEEN 1 AND 2", AnalysisError, "'sector'.*not numeric"),
    ("SELECT MIN(sector) FROM stock WHERE risk BETWEEN 1 AND 2", AnalysisError, "'sector'.*not numeric"),
    ("SELECT MIN(per) FROM stock WHERE risk BETWEEN 9 AND 2", InvalidSubscription, "empty range"),
    ("SELECT MIN(per) FROM stock WHERE risk > 5 AND risk < 5", InvalidSubscription, "empty range"),
])
def test_bad_subscriptions(sql, error, needle):
    with pytest.raises(error, match=needle):
        classify(sql)


def test_parse_errors_carry_line_and_column():
    with pytest.raises(ParseError) as info:
        parse_select("SELECT MIN(per)\nFROM stock WHERE risk BETWEEN 1 AND")
    assert info.value.line == 2 and "^" in str(info.value)
    with pytest.raises(ParseError) as info:
        Engine().sql("CREATE SUBSCRIPTION AS SELECT MIN(per) FROM stock")
    assert (info.value.line, info.value.column) == (1, 21) and "subscription name" in str(info.value)


def _engine() -> Engine:
    e = Engine()  # no Spark is started by DDL and registration
    e.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE, sector STRING)")
    return e


def test_bad_statements_lose_nothing():
    e = _engine()
    e.sql("CREATE SUBSCRIPTION a AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 5")
    e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                     {"id": ["b", "c"], "lo": [1, 2], "hi": [3, 4]})
    before = sorted(e.subscription_ids())
    bad = [
        ("CREATE SUBSCRIPTION a AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 1 AND 5", DuplicateSubscription),
        ("CREATE SUBSCRIPTION d AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 6 AND 5", InvalidSubscription),
        ("CREATE SUBSCRIPTION d AS SELECT COUNT(*) FROM stock", UnsupportedSubscription),
        ("CREATE SUBSCRIPTION d AS SELECT MIN(per) FROM stocks", AnalysisError),
        ("CREATE SUBSCRIPTION d AS SELECT MIN(per FROM stock", ParseError),
        ("DROP SUBSCRIPTION zz", UnknownSubscription),
        ("CREATE TABLE stock (k STRING PRIMARY KEY)", AnalysisError),
    ]
    for sql, err in bad:
        with pytest.raises(err):
            e.sql(sql)
    with pytest.raises(DuplicateSubscription, match="'c'"):
        e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                         {"id": ["x", "c"], "lo": [1, 2], "hi": [3, 4]})
    with pytest.raises(DuplicateSubscription, match="'y'"):
        e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                         {"id": ["y", "y"], "lo": [1, 2], "hi": [3, 4]})
    with pytest.raises(InvalidSubscription, match="'z'.*empty range"):
        e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                         {"id": ["w", "z"], "lo": [1, 5], "hi": [3, 4]})
    with pytest.raises(InvalidSubscription, match="lack columns.*hi"):
        e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi", {"id": ["q"], "lo": [1]})
    assert sorted(e.subscription_ids()) == before
    e.sql("DROP SUBSCRIPTION b; DROP SUBSCRIPTION IF EXISTS b")
    assert sorted(e.subscription_ids()) == ["a", "c"]
    shown = e.sql("SHOW SUBSCRIPTIONS")
    assert sum(r["subscriptions"] for r in shown) == 2


def test_subscribe_many_one_group_many_templates():
    e = _engine()
    n = 50_000
    rng = np.random.default_rng(1)
    lo = rng.uniform(0, 100, n)
    e.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                     {"id": [f"s{i}" for i in range(n)], "lo": lo, "hi": lo + 5})
    e.sql("CREATE SUBSCRIPTION one AS SELECT MIN(per) FROM stock WHERE 3 <= risk AND risk < 4")
    e.sql("CREATE SUBSCRIPTION top AS SELECT MAX(per) FROM stock WHERE risk >= 3")
    groups = {r["group"] for r in e.sql("SHOW SUBSCRIPTIONS")}
    assert groups == {"range_min:stock.per@risk", "range_max:stock.per@risk"}
    assert len(e.subscription_ids()) == n + 2


@pytest.mark.parametrize("sql,dnf", [
    ("SELECT * FROM stock WHERE risk > 3", [[("risk", ">=", (NEXT(3, 9),))]]),
    ("SELECT symbol FROM stock WHERE sector = 'tech' AND rank IN (1, 2)",
     [[("sector", "=", ("tech",)), ("rank", "in", (1.0, 2.0))]]),
    ("SELECT * FROM stock WHERE sector IS NULL OR (sector != 'x' AND risk BETWEEN 1 AND 2)",
     [[("sector", "is_null", ())], [("sector", "!=", ("x",)), ("risk", "between", (1.0, 2.0))]]),
    ("SELECT * FROM stock WHERE 'm' < sector", [[("sector", ">", ("m",))]]),
    ("SELECT * FROM stock", [[]]),
])
def test_filter_shapes_classify_and_bind(sql, dnf):
    p = plan_subscription(parse_select(sql), CAT)
    assert p.klass == "FILTER" and p.physical.group_key == ("FILTER", "stock")
    assert _bound_row(bind_filter_columns(p.physical, {}, 1), 0) == dnf


def _bound_row(disjuncts, i):
    """Row ``i`` of bound columns, as the DNF of (attr, op, values) triples it stands for."""
    def at(c):
        v = c if np.ndim(c) == 0 else c[i]
        return v.item() if isinstance(v, np.generic) else v
    out = []
    for conj in disjuncts:
        triples = []
        for a, op, col in conj:
            if col is None:
                v = ()
            elif op == "between":
                v = (at(col[0]), at(col[1]))
            elif op == "in":
                v = col if isinstance(col, tuple) else tuple(col[i])
            else:
                v = (at(col),)
            triples.append((a, op, tuple(v)))
        out.append(triples)
    return out


def test_filter_parameters_bind_as_columns():
    p = plan_subscription(parse_select("SELECT * FROM stock WHERE sector = :s AND risk BETWEEN :lo AND :hi"), CAT)
    got = bind_filter_columns(p.physical, {"s": np.array(["a", "b"]), "lo": np.array([1, 5]),
                                           "hi": np.array([2, 9])}, 2)
    assert [_bound_row(got, i) for i in range(2)] == [
        [[("sector", "=", ("a",)), ("risk", "between", (1, 2))]],
        [[("sector", "=", ("b",)), ("risk", "between", (5, 9))]]]
    with pytest.raises(InvalidSubscription, match="'r'.*NULL"):
        bind_filter_columns(p.physical, {"s": np.array(["a", None], dtype=object), "lo": np.array([1, 2]),
                                         "hi": np.array([2, 3])}, 2, ids=np.array(["q", "r"], dtype=object))
    with pytest.raises(InvalidSubscription, match="'q'.*empty range"):
        bind_filter_columns(p.physical, {"s": np.array(["a"]), "lo": np.array([5]), "hi": np.array([2])}, 1,
                            ids=np.array(["q"], dtype=object))

