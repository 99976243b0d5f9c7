"""The subscription contract (operators/contract.py, issue 16 item 1): every family the registry knows
implements it, and a group registered *through the contract* -- ``bind``, ``register``, ``snapshot`` ->
``build``, ``group_batch`` -- notifies exactly as the same group operator built and driven directly from the
raw constants and rows (the operator's own API, no family code), on random tables, subscriptions and
batches; unregistering subscriptions and registering them again leaves the registry, and the notifications,
as they were.  Pure (no Spark)."""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sparksub.control.groups import TableState
from sparksub.grammar.statements import parse_select
from sparksub.operators import contract
from sparksub.operators.agg.group import AggSnapshot
from sparksub.operators.box.group import BoxClassSnapshot
from sparksub.operators.distinct.group import DistinctSnapshot
from sparksub.operators.filters.group import FilterGroup
from sparksub.operators.joins.group import JoinGroupSnapshot, payload_columns, side_columns
from sparksub.operators.range_min.group import RangeMinGroup
from sparksub.operators.registry import FAMILIES, FAMILY_OF_NODE, family_of
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import DELETE, UPSERT
from sparksub.operators.topk.group import TopkSnapshot
from sparksub.planner import ir
from sparksub.planner.catalog import Catalog, TableDef
from sparksub.planner.classifier import plan_subscription

T = TableDef("t", (("k", "bigint"), ("x", "double"), ("x2", "double"), ("y", "double"), ("c", "string")), "k")
R = TableDef("r", (("rk", "bigint"), ("a", "double"), ("b", "double")), "rk")
S = TableDef("s", (("sk", "bigint"), ("b", "double"), ("c", "double")), "sk")
CATALOG = Catalog()
for _t in (T, R, S):
    CATALOG.add(_t)

#: one template per class of every family: (SQL, parameter names bound per subscription)
TEMPLATES = {
    "RANGE_MIN": "SELECT MIN(y) FROM t WHERE x BETWEEN :lo AND :hi",
    "RANGE_TOPK": "SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y LIMIT :k",
    "RANGE_DISTINCT": "SELECT DISTINCT c FROM t WHERE x BETWEEN :lo AND :hi",
    "RANGE_AGG": "SELECT SUM(y) FROM t WHERE x BETWEEN :lo AND :hi",
    "BOX_MIN": "SELECT MIN(y) FROM t WHERE x BETWEEN :lo AND :hi AND x2 BETWEEN :lo2 AND :hi2",
    "FILTER": "SELECT * FROM t WHERE x BETWEEN :lo AND :hi",
    "SELECT_JOIN": "SELECT r.rk, s.sk, s.c FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN :lo AND :hi "
                   "AND s.c BETWEEN :lo2 AND :hi2",
    "BAND_JOIN": "SELECT r.rk, s.sk FROM r JOIN s ON s.b - r.b BETWEEN :lo AND :hi WHERE r.a BETWEEN :lo2 AND :hi2",
}
JOINS = ("SELECT_JOIN", "BAND_JOIN")


def planned(klass: str):
    p = plan_subscription(parse_select(TEMPLATES[klass]), CATALOG)
    assert p.klass == klass
    return p


# ---- the protocol ---------------------------------------------------------------------------------------------
def test_every_registered_family_implements_the_protocol():
    group_scans = {v for v in vars(ir).values() if isinstance(v, type) and v.__name__.endswith("GroupScan")}
    assert set(FAMILY_OF_NODE) == group_scans            # every plan node class has one family
    members = [n for n in dir(contract.SubscriptionFamily) if not n.startswith("_")]
    for family in FAMILIES:
        assert isinstance(family, contract.SubscriptionFamily), family.name
        assert all(callable(getattr(family, m)) for m in members), family.name
        assert family.placement in contract.PLACEMENTS
        assert isinstance(family.item_schema, pa.Schema) and isinstance(family.stateless, bool)
        for node_type in family.node_types:
            assert FAMILY_OF_NODE[node_type] is family
    for klass in TEMPLATES:
        p = planned(klass)
        family = family_of(p.physical)
        assert family.algorithm(p.physical) and family.operator_name(p.physical)
        assert set(family.tables(p.physical)) <= {"t", "r", "s"}


# ---- random data ---------------------------------------------------------------------------------------------
def _bounds(draw, n, lo=0, hi=12):
    out = []
    for _ in range(n):
        a = draw(st.integers(lo, hi))
        out.append((float(a), float(a + draw(st.integers(0, 6)))))
    return out


@st.composite
def table_case(draw):
    """Rows of t, subscriptions (lo, hi, lo2, hi2, k) and a batch of upserts / deletes (``op``)."""
    keys = draw(st.lists(st.integers(0, 20), unique=True, max_size=12))
    y = st.one_of(st.none(), st.integers(0, 9).map(float))
    rows = {k: (k, float(draw(st.integers(0, 18))), float(draw(st.integers(0, 18))), draw(y),
                draw(st.one_of(st.none(), st.sampled_from("pqr")))) for k in keys}
    n = draw(st.integers(1, 6))
    subs = [(f"s{i}", *b1, *b2, draw(st.integers(1, 3))) for i, (b1, b2) in
            enumerate(zip(_bounds(draw, n), _bounds(draw, n)))]
    batch = []
    for _ in range(draw(st.integers(1, 8))):
        k = draw(st.integers(0, 24))
        if k in rows and draw(st.booleans()):
            batch.append((*rows[k], DELETE))
        else:
            batch.append((k, float(draw(st.integers(0, 18))), float(draw(st.integers(0, 18))), draw(y),
                          draw(st.one_of(st.none(), st.sampled_from("pqr"))), UPSERT))
    return rows, subs, batch


@st.composite
def join_case(draw):
    """Rows of r and s, subscriptions (lo, hi, lo2, hi2) and a batch of inserts of new keys and deletes of
    present rows per table (how the runtime hands a join its rows: an upsert already split)."""
    b = st.one_of(st.none(), st.integers(0, 6).map(float))
    rrows = {k: (k, float(draw(st.integers(0, 10))), draw(b)) for k in draw(st.lists(st.integers(0, 9), unique=True,
                                                                                      max_size=8))}
    srows = {k: (k, draw(b), float(draw(st.integers(0, 10)))) for k in draw(st.lists(st.integers(0, 9), unique=True,
                                                                                      max_size=8))}
    n = draw(st.integers(1, 5))
    subs = [(f"q{i}", *b1, *b2) for i, (b1, b2) in enumerate(zip(_bounds(draw, n, -3, 6), _bounds(draw, n, 0, 8)))]
    batches = []
    for rows, new in ((rrows, lambda k: (k, float(draw(st.integers(0, 10))), draw(b))),
                      (srows, lambda k: (k, draw(b), float(draw(st.integers(0, 10)))))):
        ops = []
        for k in draw(st.lists(st.integers(0, 14), unique=True, max_size=5)):
            ops.append((*rows[k], DELETE) if k in rows else (*new(k), UPSERT))
        batches.append(ops)
    return rrows, srows, subs, batches


def _tables(**rows) -> dict:
    # the engine's own TableState: its rows a RowStore (row_store.py), as the families read them
    return {name: TableState(CATALOG.get(name), rows=dict(r)) for name, r in rows.items()}


def _update_batch(tdef: TableDef, ops) -> tuple[pa.Table, np.ndarray]:
    """Updates as ``publish`` hands them on (its ``_validated``): the table's columns and an int8 ``op``."""
    cols = list(zip(*ops)) if ops else [[] for _ in range(len(tdef.columns) + 1)]
    data = {c: pa.array(list(v), arrow_type(t)) for (c, t), v in zip(tdef.columns, cols)}
    data["op"] = pa.array(list(cols[-1]), pa.int8())
    return pa.table(data), np.arange(100, 100 + len(ops), dtype=np.int64)


def _params(klass, subs) -> dict:
    cols = {"lo": [s[1] for s in subs], "hi": [s[2] for s in subs], "lo2": [s[3] for s in subs],
            "hi2": [s[4] for s in subs], "k": [s[5] for s in subs] if klass == "RANGE_TOPK" else None}
    needed = {v for v in ("lo", "hi", "lo2", "hi2", "k") if f":{v}" in TEMPLATES[klass]}
    return {k: np.asarray(v) for k, v in cols.items() if k in needed}


def _sorted_rows(table: pa.Table) -> list:
    return sorted((tuple(sorted(r.items())) for r in table.to_pylist()), key=repr)


# ---- the contract's path and the direct one ----------------------------------------------------------------
class ViaContract:
    """A group registered and built the way the engine does it, through the family only."""

    def __init__(self, klass: str, subs):
        self.planned = planned(klass)
        self.node = self.planned.physical
        self.family = family_of(self.node)
        self.group_id = self.family.group_id(self.node)
        self.registry = self.family.new_registry(self.node, CATALOG, self.group_id)
        self.klass = klass
        self.register(subs)

    def register(self, subs) -> None:
        ids = np.array([s[0] for s in subs], dtype=object)
        bound = self.family.bind(self.node, _params(self.klass, subs), ids, CATALOG)
        self.family.register(self.registry, self.node, ids, bound, self.family.output_columns(self.planned, CATALOG))

    def unregister(self, ids) -> None:
        self.family.unregister(self.registry, self.node, ids)

    def state(self) -> dict:
        """id -> its bound constants, as SHOW SUBSCRIPTIONS renders them from the registry."""
        slots, ids, text = self.family.parameters(self.registry, self.node)
        return dict(zip(ids.tolist(), text.to_pylist() if isinstance(text, pa.Array) else [text] * len(ids)))

    def operator(self, tables):
        return self.family.snapshot(self.registry, self.node, self.group_id, tables).build()

    def batch(self, tdef, ops):
        batch, seqs = _update_batch(tdef, ops)
        return self.family.group_batch(self.node, tdef, batch, seqs)


def direct_operator(klass: str, subs, rows: dict, outputs=None):
    """The group operator built from the raw constants and rows with its own API (no family code)."""
    ids = np.array([s[0] for s in subs], dtype=object)
    lo, hi, lo2, hi2 = (np.array([s[i] for s in subs], dtype=float) for i in (1, 2, 3, 4))
    keys = np.array(list(rows), dtype=object)
    col = {name: [r[i] for r in rows.values()] for i, name in enumerate(("k", "x", "x2", "y", "c"))}
    num = {name: np.array([np.nan if v is None else v for v in col[name]], dtype=float) for name in ("x", "x2", "y")}
    ones = np.ones(len(subs), dtype=np.int64)
    if klass == "RANGE_MIN":
        g = RangeMinGroup("g", "t", "x", "y", False)
        g.register(ids, lo, hi)
        g.load(keys, num["x"], num["y"])
        return g
    if klass == "RANGE_TOPK":
        return TopkSnapshot("g", "t", "x", "y", False, ids, lo, hi, np.array([s[5] for s in subs], dtype=np.int64),
                            keys, num["x"], num["y"]).build()
    if klass == "RANGE_DISTINCT":
        return DistinctSnapshot("g", "t", "x", "c", None, ids, lo, hi, ones, keys, num["x"],
                                np.array(col["c"], dtype=object)).build()
    if klass == "RANGE_AGG":
        return AggSnapshot("g", "t", "x", "y", "sum", ids, lo, hi, ones, keys, num["x"], num["y"]).build()
    if klass == "BOX_MIN":
        return BoxClassSnapshot("BOX_MIN", "g", "t", "x", "x2", "y", False, ids, lo, hi, lo2, hi2, None, keys,
                                num["x"], num["x2"], num["y"]).build()
    if klass == "FILTER":
        g = FilterGroup("g", "t", [(c, arrow_type(t)) for c, t in T.columns])
        g.register(ids.tolist(), [((("x", "between", (a, b)),),) for a, b in zip(lo, hi)], [("*",)] * len(subs))
        return g
    raise AssertionError(klass)


def direct_join(klass: str, subs, rrows: dict, srows: dict, outputs) -> object:
    """A join group (one partition) from a snapshot written out by hand: sides, rows as columns, bounds."""
    payload = payload_columns([outputs])
    sel = (("a",), ("c",)) if klass == "SELECT_JOIN" else (("a",), ())
    sides = (("r", "rk", "b", sel[0], payload[0]), ("s", "sk", "b", sel[1], payload[1]))
    rows = []
    for d, (tdef, table) in enumerate(((R, rrows), (S, srows))):
        names = tdef.column_names
        rows.append({c: [r[names.index(c)] for r in table.values()] for c in side_columns(sides[d])})
    lo, hi, lo2, hi2 = (np.array([s[i] for s in subs], dtype=float) for i in (1, 2, 3, 4))
    cols = ({"a_lo": lo, "a_hi": hi, "c_lo": lo2, "c_hi": hi2} if klass == "SELECT_JOIN"
            else {"lo": lo, "hi": hi, "L:a:lo": lo2, "L:a:hi": hi2})
    types = {(d, c): arrow_type(t) for d, tdef in enumerate((R, S)) for c, t in tdef.columns}
    out_types = {name: types[(d, c)] for name, d, c in outputs}
    return JoinGroupSnapshot(klass, "g", "g#0", sides, True, np.array([s[0] for s in subs], dtype=object), cols,
                             tuple(rows), sub_outputs=[outputs] * len(subs), output_types=out_types,
                             payload_types=types).build()


def _modes(via: ViaContract) -> list[str]:
    return ["unicast", "reformulated"] if via.family.reformulated(via.node) else ["unicast"]


def _same(a: pa.Table, b: pa.Table) -> None:
    a = a.drop_columns([c for c in ("group_id",) if c in a.column_names])   # the group's id is the family's
    b = b.drop_columns([c for c in ("group_id",) if c in b.column_names])
    assert _sorted_rows(a) == _sorted_rows(b)


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("klass", [k for k in TEMPLATES if k not in JOINS])
@SETTINGS
@given(case=table_case(), drop=st.sets(st.integers(0, 5), max_size=3))
def test_contract_path_notifies_as_the_operator_driven_directly(klass, case, drop):
    rows, subs, ops = case
    via = ViaContract(klass, subs)
    tables = _tables(t=rows)
    for mode in _modes(via):
        got = via.operator(tables).apply(via.batch(T, ops), mode)
        direct = direct_operator(klass, subs, rows)
        want = direct.apply(via.batch(T, ops), mode)
        _same(got, want)
    # unregister some, register them again: the same registry state, the same notifications
    gone = [s for i, s in enumerate(subs) if i in drop]
    before = via.state()
    via.unregister([s[0] for s in gone])
    assert set(via.state()) == set(before) - {s[0] for s in gone}
    if gone:
        via.register(gone)
    assert via.state() == before
    for mode in _modes(via):
        _same(via.operator(tables).apply(via.batch(T, ops), mode),
              direct_operator(klass, subs, rows).apply(via.batch(T, ops), mode))


@pytest.mark.parametrize("klass", JOINS)
@SETTINGS
@given(case=join_case(), drop=st.sets(st.integers(0, 4), max_size=2))
def test_join_contract_path_notifies_as_the_operator_driven_directly(klass, case, drop):
    rrows, srows, subs, (rops, sops) = case
    via = ViaContract(klass, subs)
    outputs = via.family.output_columns(via.planned, CATALOG)

    def run(mode):
        got, want = via.operator(_tables(r=rrows, s=srows)), direct_join(klass, subs, rrows, srows, outputs)
        for tdef, ops in ((R, rops), (S, sops)):
            if ops:   # (the runtime hands a partition only the rows routed to it: never an empty batch)
                _same(got.apply(via.batch(tdef, ops), mode), want.apply(via.batch(tdef, ops), mode))

    for mode in _modes(via):
        run(mode)
    gone = [s for i, s in enumerate(subs) if i in drop]
    before = via.state()
    via.unregister([s[0] for s in gone])
    if gone:
        via.register(gone)
    assert via.state() == before
    for mode in _modes(via):
        run(mode)
