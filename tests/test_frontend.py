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
from sparksub.planner.classifier import (bind_band_join, bind_filter_columns, bind_range, bind_select_join,
                                         parameters_of, plan_subscription)

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
    ("SELECT MIN(per) FROM stock WHERE sector BETWEEN 1 AND 2", AnalysisError, "'sector'.*string, compared with"),
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
    shown = e.subscription_groups()   # SHOW SUBSCRIPTION GROUPS' rows (no Spark needed)
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
    groups = {r["group"] for r in e.subscription_groups()}
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



# ---- joins (003 §4.3): SELECT_JOIN and BAND_JOIN, classified and bound (the engine wiring is separate) ----

JCAT = Catalog()
JCAT.add(TableDef("supply", (("sid", "string"), ("qty", "double"), ("prod", "bigint"), ("tag", "string")), "sid"))
JCAT.add(TableDef("demand", (("did", "string"), ("prod", "bigint"), ("qty", "double"), ("tag", "string"),
                             ("price", "double")), "did"))
SJ_KEY = ("SELECT_JOIN", "supply", "demand", "prod", "prod", "qty", "qty")


def jplan(sql: str):
    return plan_subscription(parse_select(sql), JCAT)


SELECT_JOIN_SPELLINGS = [
    "SELECT * FROM supply JOIN demand ON supply.prod = demand.prod "
    "WHERE supply.qty BETWEEN 10 AND 20 AND demand.qty BETWEEN 1 AND 5",
    "SELECT * FROM demand JOIN supply ON demand.prod = supply.prod "
    "WHERE demand.qty >= 1 AND demand.qty <= 5 AND 10 <= supply.qty AND supply.qty <= 20",
    "SELECT * FROM supply AS s JOIN demand d ON d.prod = s.prod WHERE s.qty BETWEEN 10 AND 20 AND d.qty BETWEEN 1 AND 5",
    "SELECT * FROM supply s, demand d WHERE s.prod = d.prod AND s.qty BETWEEN 10 AND 20 AND d.qty BETWEEN 1 AND 5",
    "SELECT * FROM supply s INNER JOIN demand d ON s.prod = d.prod AND d.qty BETWEEN 1 AND 5 "
    "WHERE s.qty BETWEEN 10 AND 20",
    "SELECT * FROM supply JOIN demand USING (prod) WHERE supply.qty BETWEEN 10 AND 20 AND demand.qty BETWEEN 1 AND 5",
]


@pytest.mark.parametrize("sql", SELECT_JOIN_SPELLINGS)
def test_select_join_spellings_classify_alike(sql):
    p = jplan(sql)
    assert p.klass == "SELECT_JOIN" and p.physical.group_key == SJ_KEY
    assert p.template == ("SelectJoinGroupScan[* of supply JOIN demand ON supply.prod = demand.prod "
                          "WHERE supply.qty IN [?, ?] AND demand.qty IN [?, ?]]")
    assert [c.tolist() for c in bind_select_join(p.physical, {}, 1)] == [[10.0], [20.0], [1.0], [5.0]]


def test_select_join_absent_selection_and_parameters():
    p = jplan("SELECT s.qty, d.* FROM supply s JOIN demand d ON s.prod = d.prod WHERE price < :p")
    assert p.klass == "SELECT_JOIN"
    assert p.physical.group_key == ("SELECT_JOIN", "supply", "demand", "prod", "prod", None, "price")
    assert p.physical.columns == ("supply.qty", "demand.*")
    assert parameters_of(p.physical) == ("p",)
    a_lo, a_hi, c_lo, c_hi = bind_select_join(p.physical, {"p": np.array([5.0, 7.0])}, 2)
    assert a_lo.tolist() == [-math.inf] * 2 and a_hi.tolist() == [math.inf] * 2
    assert c_lo.tolist() == [-math.inf] * 2 and c_hi.tolist() == [NEXT(5.0, -9), NEXT(7.0, -9)]
    # a string join column is fine for an equality join
    q = jplan("SELECT * FROM supply JOIN demand ON supply.tag = demand.tag")
    assert q.physical.group_key == ("SELECT_JOIN", "supply", "demand", "tag", "tag", None, None)


def test_select_join_binding_errors_name_subscription_and_column():
    p = jplan("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod "
              "WHERE s.qty BETWEEN :lo AND :hi AND d.qty >= :c")
    ids = np.array(["a", "b"], dtype=object)
    with pytest.raises(InvalidSubscription, match="'b'.*empty range.*supply.qty"):
        bind_select_join(p.physical, {"lo": np.array([1.0, 5.0]), "hi": np.array([2.0, 3.0]),
                                      "c": np.array([0.0, 0.0])}, 2, ids=ids)
    with pytest.raises(InvalidSubscription, match="'b'.*range on demand.qty.*no real value"):
        bind_select_join(p.physical, {"lo": np.array([1.0, 1.0]), "hi": np.array([2.0, 3.0]),
                                      "c": np.array([0.0, math.inf])}, 2, ids=ids)
    with pytest.raises(InvalidSubscription, match="'a'.*NaN.*demand.qty"):
        bind_select_join(p.physical, {"lo": np.array([1.0, 1.0]), "hi": np.array([2.0, 3.0]),
                                      "c": np.array([np.nan, 0.0])}, 2, ids=ids)


BAND_SPELLINGS = [
    "SELECT * FROM supply JOIN demand ON demand.qty - supply.qty BETWEEN :lo AND :hi",
    "SELECT * FROM supply JOIN demand ON supply.qty BETWEEN demand.qty - :hi AND demand.qty - :lo",
    "SELECT * FROM supply JOIN demand ON demand.qty BETWEEN supply.qty + :lo AND supply.qty + :hi",
    "SELECT * FROM supply s JOIN demand d ON d.qty - s.qty >= :lo AND d.qty - s.qty <= :hi",
    "SELECT * FROM demand d JOIN supply s ON d.qty >= s.qty + :lo AND s.qty + :hi >= d.qty",
    "SELECT * FROM supply s, demand d WHERE (d.qty - s.qty) BETWEEN :lo AND :hi",
]


@pytest.mark.parametrize("sql", BAND_SPELLINGS)
def test_band_join_spellings_classify_alike(sql):
    p = jplan(sql)
    assert p.klass == "BAND_JOIN"
    assert p.physical.group_key == ("BAND_JOIN", "supply", "demand", "qty", "qty")
    bound = bind_band_join(p.physical, {"lo": np.array([-1.0, 0.0]), "hi": np.array([2.0, 0.0])}, 2)
    assert bound.low.tolist() == [-1.0, 0.0] and bound.high.tolist() == [2.0, 0.0]
    assert bound.left_where == {} and bound.right_where == {}


def test_band_join_negated_strict_and_selections():
    # R - S spelled: the band on S - R is negated, also for parameters
    p = jplan("SELECT * FROM supply s JOIN demand d ON s.prod - d.prod BETWEEN :lo AND :hi")
    b = bind_band_join(p.physical, {"lo": np.array([1.0]), "hi": np.array([3.0])}, 1)
    assert (b.low.tolist(), b.high.tolist()) == ([-3.0], [-1.0])
    # integral difference: prod - prod < 2.5 is demand.prod - supply.prod >= -2
    p = jplan("SELECT * FROM supply s JOIN demand d ON s.prod - d.prod < :x")
    b = bind_band_join(p.physical, {"x": np.array([2.5])}, 1)
    assert (b.low.tolist(), b.high.tolist()) == ([-2.0], [math.inf])
    p = jplan("SELECT s.qty, d.price FROM supply s JOIN demand d ON d.qty - s.qty BETWEEN -5 AND 5 "
              "WHERE s.qty > 1 AND d.price BETWEEN :plo AND :phi AND d.qty <= 100")
    assert p.klass == "BAND_JOIN" and parameters_of(p.physical) == ("plo", "phi")
    assert p.template == ("BandJoinGroupScan[supply.qty, demand.price of supply JOIN demand ON demand.qty - "
                          "supply.qty IN [?, ?] WHERE supply.qty IN [?, unbounded] AND demand.qty IN "
                          "[unbounded, ?] AND demand.price IN [:plo, :phi]]")
    b = bind_band_join(p.physical, {"plo": np.array([1.0]), "phi": np.array([2.0])}, 1)
    assert (b.low.tolist(), b.high.tolist()) == ([-5.0], [5.0])
    assert {c: (lo.tolist(), hi.tolist()) for c, (lo, hi) in b.left_where.items()} == \
        {"qty": ([NEXT(1.0, 9)], [math.inf])}
    assert {c: (lo.tolist(), hi.tolist()) for c, (lo, hi) in b.right_where.items()} == \
        {"qty": ([-math.inf], [100.0]), "price": ([1.0], [2.0])}


def test_band_join_binding_errors():
    p = jplan("SELECT * FROM supply s JOIN demand d ON d.qty - s.qty BETWEEN :lo AND :hi WHERE d.price >= :p")
    ids = np.array(["u", "v"], dtype=object)
    ok = {"lo": np.array([0.0, 0.0]), "hi": np.array([1.0, 1.0]), "p": np.array([0.0, 0.0])}
    with pytest.raises(InvalidSubscription, match="'v'.*empty range.*demand.qty - supply.qty"):
        bind_band_join(p.physical, {**ok, "hi": np.array([1.0, -1.0])}, 2, ids=ids)
    with pytest.raises(InvalidSubscription, match="'u'.*NaN.*demand.price"):
        bind_band_join(p.physical, {**ok, "p": np.array([np.nan, 0.0])}, 2, ids=ids)
    with pytest.raises(InvalidSubscription, match="'u'.*band on demand.qty - supply.qty.*no real value"):
        bind_band_join(p.physical, {**ok, "lo": np.array([math.inf, 0.0]), "hi": np.array([math.inf, 1.0])}, 2,
                       ids=ids)


JOIN_REJECTED = [
    ("SELECT * FROM supply JOIN demand ON supply.prod = demand.prod AND supply.tag = demand.tag",
     "supply.prod = demand.prod AND supply.tag = demand.tag"),
    ("SELECT * FROM supply JOIN demand ON supply.prod != demand.prod", "supply.prod != demand.prod"),
    ("SELECT * FROM supply JOIN demand ON supply.qty + demand.qty BETWEEN 1 AND 2", "supply.qty + demand.qty"),
    ("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod WHERE s.qty < 1 OR d.qty > 2", "OR"),
    ("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod WHERE s.qty BETWEEN 1 AND 2 AND s.prod > 3",
     "Filter[qty IN [?, ?] AND prod IN"),
    ("SELECT * FROM supply s JOIN demand d ON d.qty - s.qty BETWEEN :lo + 1 AND :hi", ":lo + ?"),
    ("SELECT * FROM supply x JOIN supply y ON x.prod = y.prod", "Join[x.prod = y.prod](Scan[supply], Scan[supply])"),
    ("SELECT * FROM supply LEFT JOIN demand ON supply.prod = demand.prod", "LEFT OUTER"),
    ("SELECT COUNT(*) FROM supply JOIN demand ON supply.prod = demand.prod", "Aggregate[COUNT(*)](Join"),
    ("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod ORDER BY d.qty LIMIT 3", "Limit[?]"),
]


@pytest.mark.parametrize("sql,shape_part", JOIN_REJECTED)
def test_rejected_join_shapes_name_themselves(sql, shape_part):
    with pytest.raises(UnsupportedSubscription) as info:
        jplan(sql)
    assert shape_part in info.value.shape, info.value.shape
    assert "SELECT_JOIN" in str(info.value) and "BAND_JOIN" in str(info.value)


def test_three_tables_are_not_a_join_class():
    cat = Catalog()
    for name in ("r", "s", "t"):
        cat.add(TableDef(name, ((f"{name}id", "string"), ("b", "double")), f"{name}id"))
    with pytest.raises(UnsupportedSubscription, match="Join.*Join"):
        plan_subscription(parse_select("SELECT * FROM r JOIN s ON r.b = s.b JOIN t ON s.b = t.b"), cat)


@pytest.mark.parametrize("sql,error,needle", [
    ("SELECT * FROM supply JOIN demand ON prod = prod", AnalysisError, "ambiguous column 'prod'.*supply.prod"),
    ("SELECT * FROM supply JOIN demand ON supply.prod = demand.prod WHERE qty > 1", AnalysisError,
     "ambiguous column 'qty'"),
    ("SELECT * FROM supply JOIN demand ON supply.prod = demand.prod WHERE nope > 1", AnalysisError,
     "unknown column 'nope'"),
    ("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod WHERE d.sid > 1", AnalysisError,
     "unknown column 'sid' in table 'demand'"),
    ("SELECT * FROM supply s JOIN demand d ON s.prod = x.prod", AnalysisError, "unknown table or alias 'x'"),
    ("SELECT * FROM supply s JOIN nope d ON s.prod = d.prod", AnalysisError, "unknown table 'nope'"),
    ("SELECT * FROM supply s JOIN demand s ON s.prod = s.prod", AnalysisError, "'s' is given to two tables"),
    ("SELECT * FROM supply s JOIN demand d ON d.tag - s.tag BETWEEN 1 AND 2", AnalysisError,
     "band join attribute 'tag'.*not numeric"),
    ("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod WHERE s.tag BETWEEN 'a' AND 'b'", AnalysisError,
     "selection attribute 'tag'.*not numeric"),
    ("SELECT d.prod, COUNT(*) FROM supply s JOIN demand d ON s.prod = d.prod GROUP BY d.prod", UnsupportedSubscription,
     "GroupBy"),
    ("SELECT * FROM supply s JOIN demand d ON s.prod = d.prod WHERE s.qty BETWEEN 9 AND 2", InvalidSubscription,
     "empty range: supply.qty"),
    ("SELECT * FROM supply s JOIN demand d ON d.qty - s.qty BETWEEN 9 AND 2", InvalidSubscription,
     "empty range: demand.qty - supply.qty"),
])
def test_bad_join_subscriptions(sql, error, needle):
    with pytest.raises(error, match=needle):
        jplan(sql)


def test_an_event_query_body_ends_at_its_statement():
    from sparksub.grammar import statements as st
    stmts = st.parse_statements("CREATE EVENT QUERY a AS SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock;\n"
                                "DROP EVENT QUERY IF EXISTS b")
    assert [type(s).__name__ for s in stmts] == ["CreateEventQuery", "DropEventQuery"]
    assert stmts[0].args["expression"].this == "SELECT * FROM Stock NEXT{$1.Name = $2.Name} Stock"
    assert stmts[1].this.name == "b" and stmts[1].args.get("exists")
