"""SQL differential check (issue 15): random keyed tables (NULLs, ties, duplicated values, keys reused and
deleted), random subscriptions of every SQL class, random batches of upserts and deletes published through
``engine.publish``; after EVERY publish

- ``engine.result(id)`` equals DuckDB running the subscription's SQL over the current table contents (kept
  by the test as plain dicts, ``oracles/duckdb_oracle.py``);
- the notifications are exactly the changes of those DuckDB results, update by update (each row of a batch
  is one update with its own ``seq``): the subscriptions whose result changed, with the new value; FILTER
  notifications are DuckDB's selection of the batch's upserted rows;
- in reformulated mode, ``engine.deliver(messages)`` gives the same rows (top-k: the net change over the
  batch, at its last seq — docs/range_classes.md, Paint-Batch).

One comparison class per kind of result (``Scalar``, ``Distinct``, ``Topk``, ``Filter``, ``Join`` below):
adapt the contract there. The documented readings the oracle applies beyond the SQL text (ties in
top-k broken by the key, NULL y in no top-k list and no DISTINCT set: docs/range_classes.md) are in those
classes too. A failing case is printed as a script (``Case.__repr__``); ``SPARKSUB_SQL_FUZZ_EXAMPLES``
sets the example count, ``SPARKSUB_SQL_FUZZ_SHRINK=1`` lets hypothesis shrink (slow: every step publishes).
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

from duckdb_oracle import DuckDBOracle, TableContents
from sparksub import BadUpdate, Engine, InvalidSubscription, SparksubError, UnsupportedSubscription

pytestmark = [pytest.mark.spark, pytest.mark.catalyst_passthrough]   # the extension wraps publish only


#: Known-open mismatches, each with its strict-xfail reproduction at the end of this module; the fuzzer
#: tolerates exactly these, and the lead removes the entry with the xfail when the fix lands: none now.
#: (Items 1, 5, 6 and 8 were found here too and are fixed, as are deliver_rejected -- deliver() refused a
#: reformulated output holding a ``rejected`` row, which it now passes through -- and deliver_event_column -- a
#: FILTER / BAND_JOIN row deliver() passed through lost a column whose name the messages also use, the table's
#: ``k`` beside a top-k message's ``k``: their reproductions stay as regression tests.)
KNOWN_OPEN = frozenset()
#: what the running case tolerates: KNOWN_OPEN for the fuzzer, nothing for the reproductions
OPEN = KNOWN_OPEN

#: ±inf in the random rows (item 5): each row holding one is handled exactly or set aside at the boundary (a
#: ``rejected`` row, or the batch refused with BadUpdate). SPARKSUB_SQL_FUZZ_INF=0 leaves them out.
WITH_INFINITIES = os.environ.get("SPARKSUB_SQL_FUZZ_INF", "1") == "1"

EXAMPLES = int(os.environ.get("SPARKSUB_SQL_FUZZ_EXAMPLES", "8"))
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + (
    [Phase.shrink] if os.environ.get("SPARKSUB_SQL_FUZZ_SHRINK") == "1" else [])

T_COLUMNS = [("k", "BIGINT"), ("x", "DOUBLE"), ("z", "BIGINT"), ("y", "DOUBLE"), ("s", "STRING"),
             ("b", "BIGINT")]
U_COLUMNS = [("uk", "BIGINT"), ("b", "BIGINT"), ("c", "DOUBLE")]
DDL = ["CREATE TABLE t (k BIGINT PRIMARY KEY, x DOUBLE, z BIGINT, y DOUBLE, s STRING, b BIGINT)",
       "CREATE TABLE u (uk BIGINT PRIMARY KEY, b BIGINT, c DOUBLE)"]
TYPES = dict(T_COLUMNS) | {"c": "DOUBLE", "uk": "BIGINT"}
INF = math.inf

# Small domains: ties and duplicates are frequent. Finite y are halves below 2^47, so every sum of a few is
# exact in any order (DuckDB sums doubles in input order; the engine sums exactly: docs/range_classes.md).
X_VALUES = [None, -1.0, 0.0, 0.5, 1.0, 2.0, 2.0, 3.0, 4.5]
Z_VALUES = [None, -1, 0, 1, 2, 2, 3]
Y_VALUES = [None, -2.0, 0.0, 1.0, 1.0, 1.5, 3.0, 1e14]
S_VALUES = [None, "", "a", "a", "b", "B", "ab"]
B_VALUES = [None, 0, 1, 1, 2, 3]
C_VALUES = [None, -1.0, 0.0, 1.0, 2.5]
CONSTANTS = [-1, 0, 0.5, 1, 1.5, 2, 3, 5]
T_KEYS, U_KEYS = 8, 6


def literal(v) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


# ---- the oracle's value space ------------------------------------------------------------------------

def norm(v):
    """A value as both sides can be compared: numbers as float (BIGINT results come back as int from DuckDB
    and as float64 in notifications), NaN as a marker (inf - inf), the rest as is."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    v = float(v)
    return "NaN" if math.isnan(v) else v


def norm_row(d: dict) -> tuple:
    return tuple(sorted((k, norm(v)) for k, v in d.items()))


# ---- one comparison per subscription class ---------------------------------------------------------------
# Each class: ``state(db, sub)`` the oracle's result from DuckDB; ``same(got, want)`` engine.result() vs
# that; ``notes(before, after, seq)`` the unicast rows a change implies; ``got_note(sub, row)`` a unicast
# row in the same form. ``net_per_batch``: the classes whose deliver() reports the batch's net change at its
# last seq (docs/range_classes.md); the others' deliver() rows equal the unicast rows.

class Scalar:
    """RANGE_MIN / RANGE_MAX / BOX_MIN / BOX_MAX / RANGE_AGG: a value (None for an empty range; COUNT 0)."""
    net_per_batch = ()

    @staticmethod
    def state(db, sub):
        return norm(db.scalar(sub.oracle))

    @staticmethod
    def same(got, want):
        return norm(got) == want

    @staticmethod
    def notes(before, after, seq):
        return [(seq, "update", after)] if before != after else []

    @staticmethod
    def got_note(sub, row):
        return (row["seq"], row["op"], norm(row["value"]))


class Distinct:
    """RANGE_DISTINCT: the set of distinct non-NULL values (docs/range_classes.md: a NULL y is in no set,
    as MIN skips it; SQL's DISTINCT would list NULL once)."""
    net_per_batch = ()

    @staticmethod
    def state(db, sub):
        return frozenset(norm(r["v"]) for r in db.rows(sub.oracle) if r["v"] is not None)

    @staticmethod
    def same(got, want):
        got = [norm(v) for v in got]
        return len(got) == len(set(got)) and set(got) == want

    @staticmethod
    def notes(before, after, seq):
        return [(seq, "add", v) for v in after - before] + [(seq, "remove", v) for v in before - after]

    @staticmethod
    def got_note(sub, row):
        return (row["seq"], row["op"], row["item_text"] if sub.text_value else norm(row["value"]))


class Topk:
    """RANGE_TOPK / BOX_TOPK: the selected columns of the first k rows in rank order, ties by the key
    (docs/range_classes.md), rows with a NULL y in no list. Notifications: enter / leave / update per
    object of the list: ``item_key``, ``item_x`` and ``value`` = its x and y (the new ones; the old ones
    for leave); ``update`` when a member's x or y changed (the object as the notification describes it)."""
    net_per_batch = ("RANGE_TOPK",)  # Paint-Batch; BOX_TOPK's exact box messages are per update

    @staticmethod
    def state(db, sub):
        out = []
        for r in db.rows(sub.oracle):
            item = (str(r.pop("__key")), norm(r.pop("__x")), norm(r.pop("__rank")))
            out.append((item, norm_row(r)))
        return tuple(out)

    @staticmethod
    def same(got, want):
        return [norm_row(d) for d in got] == [row for _, row in want]

    @staticmethod
    def notes(before, after, seq):
        b = {key: (x, y) for (key, x, y), _ in before}
        a = {key: (x, y) for (key, x, y), _ in after}
        return ([(seq, "enter", key, *a[key]) for key in a.keys() - b.keys()]
                + [(seq, "leave", key, *b[key]) for key in b.keys() - a.keys()]
                + [(seq, "update", key, *a[key]) for key in a.keys() & b.keys() if a[key] != b[key]])

    @staticmethod
    def got_note(sub, row):
        return (row["seq"], row["op"], row["item_key"], norm(row["item_x"]), norm(row["value"]))


class Filter:
    """FILTER: stateless (result() is None); notifications are DuckDB's selection of the batch's upserted
    rows: the event's columns, those outside the projection null (docs/filters.md)."""
    net_per_batch = ()

    @staticmethod
    def state(db, sub):
        return None

    @staticmethod
    def same(got, want):
        return got is None

    @staticmethod
    def batch_notes(sub, upserts):
        """``upserts``: [(seq, row)]; the expected match rows, from DuckDB over the batch's rows."""
        db = DuckDBOracle()
        try:
            tbl = TableContents("t", T_COLUMNS, "k")
            db.register("t", tbl.arrow({"__seq": (pa.int64(), [s for s, _ in upserts])},
                                       rows=[r for _, r in upserts]))
            out = []
            for r in db.rows(f"SELECT __seq, * FROM t WHERE {sub.where}"):
                out.append((r["__seq"], "match",
                            tuple(norm(r[c]) if c in sub.projection else None for c, _ in T_COLUMNS)))
            return out
        finally:
            db.close()

    @staticmethod
    def got_note(sub, row):
        # a column named like one of the output's own (``k``: a top-k message's k) is ``event_<name>``
        return (row["seq"], row["op"], tuple(norm(row[f"event_{c}" if f"event_{c}" in row else c])
                                             for c, _ in T_COLUMNS))


class Join:
    """SELECT_JOIN / BAND_JOIN: the selected columns of the result tuples under their aliases (a multiset;
    DESIGN §1); notifications: insert / delete per result tuple with its selected columns, a tuple whose
    selected values change leaving (old values) and re-entering (new values) (docs/joins.md). Every join
    subscription here selects ``t.k AS rk, u.uk AS sk``, so a tuple is known by its keys."""
    net_per_batch = ()

    @staticmethod
    def state(db, sub):
        out = {}
        for r in db.rows(sub.oracle):
            pair = (str(r.pop("__rk")), str(r.pop("__sk")))
            out[pair] = norm_row(r)
        return out

    @staticmethod
    def same(got, want):
        return Counter(norm_row(d) for d in got) == Counter(want.values())

    @staticmethod
    def notes(before, after, seq):
        return ([(seq, "insert", *pair, row) for pair, row in after.items() if before.get(pair) != row]
                + [(seq, "delete", *pair, row) for pair, row in before.items() if after.get(pair) != row])

    @staticmethod
    def got_note(sub, row):
        return (row["seq"], row["op"], str(row["rk"]), str(row["sk"]),
                norm_row({c: row[f"event_{c}" if f"event_{c}" in row else c] for c in sub.projection}))


# ---- subscriptions -------------------------------------------------------------------------------------

@dataclass
class Sub:
    sid: str
    cls: str            # the class the classifier must pick
    sql: str            # the text registered (CREATE SUBSCRIPTION sid AS sql)
    oracle: str         # what DuckDB runs (the same FROM/WHERE; extra hidden columns for keys and ranks)
    kind: type          # the comparison class
    tables: tuple = ("t",)
    may_be_empty: bool = False   # a constant range that is empty: InvalidSubscription is legal (DESIGN §7)
    may_be_unsupported: bool = False  # a shape outside the documented ones: UnsupportedSubscription is legal
    where: str = ""              # FILTER: its WHERE, which DuckDB runs over the batch's rows
    projection: tuple = ()       # FILTER: the event columns it keeps; joins: the output columns
    text_value: bool = False     # DISTINCT over a string column
    bulk: tuple | None = None    # (template, {param: value}) when registered through subscribe_many

    def __repr__(self):
        if self.bulk:
            params = {"id": [self.sid]} | {p: [v] for p, v in self.bulk[1].items()}
            return f"subscribe_many({self.bulk[0]!r}, {params})"
        return f"CREATE SUBSCRIPTION {self.sid} AS {self.sql}"


def strictness(form: str):
    """(strict lo?, strict hi?) of a range form; None for an open end."""
    return {"between": (False, False), "le_le": (False, False), "lt_lt": (True, True), "ge_lt": (False, True),
            "reversed": (True, False), "ge": (False, None), "gt": (True, None), "le": (None, False),
            "lt": (None, True), "none": (None, None)}[form]


def range_is_empty(col: str, form: str, lo, hi) -> bool:
    """Whether the range holds no value of ``col``'s type (strict bounds closed as docs/range_min.md does)."""
    slo, shi = strictness(form)
    if slo is None or shi is None:
        return False
    if TYPES[col] == "BIGINT":
        lo2 = math.floor(lo) + 1 if slo else math.ceil(lo)
        hi2 = math.ceil(hi) - 1 if shi else math.floor(hi)
        return lo2 > hi2
    return lo > hi or (lo == hi and (slo or shi))


def range_text(col: str, form: str, lo, hi) -> str:
    lo, hi = literal(lo), literal(hi)
    return {"between": f"{col} BETWEEN {lo} AND {hi}", "le_le": f"{lo} <= {col} AND {col} <= {hi}",
            "lt_lt": f"{col} > {lo} AND {col} < {hi}", "ge_lt": f"{col} >= {lo} AND {hi} > {col}",
            "reversed": f"{hi} >= {col} AND {lo} < {col}", "ge": f"{col} >= {lo}", "gt": f"{lo} < {col}",
            "le": f"{col} <= {hi}", "lt": f"{hi} > {col}", "none": ""}[form]


RANGE_FORMS = ["between", "le_le", "lt_lt", "ge_lt", "reversed", "ge", "gt", "le", "lt", "none"]


@st.composite
def ranges(draw, cols=("x", "z"), forms=RANGE_FORMS, qualifier="", widths=(0.5, 1, 1, 2, 2, 3, 4, 0, -1)):
    """(WHERE text or '', may the range be empty?) on one of ``cols``."""
    col = draw(st.sampled_from(cols))
    form = draw(st.sampled_from(forms))
    lo = draw(st.sampled_from(CONSTANTS))
    # mostly a legal range, at times a point (x BETWEEN 2 AND 2) or an empty / inverted one
    hi = lo + draw(st.sampled_from(widths))
    return range_text(qualifier + col, form, lo, hi), range_is_empty(col, form, lo, hi)


def and_all(*parts) -> str:
    parts = [p for p in parts if p]
    return " WHERE " + " AND ".join(parts) if parts else ""


@st.composite
def min_max_subs(draw, sid):
    agg = draw(st.sampled_from(["MIN", "MAX"]))
    where, empty = draw(ranges())
    alias = draw(st.sampled_from(["", " AS m"]))
    sql = f"SELECT {agg}(y){alias} FROM t{and_all(where)}"
    return Sub(sid, f"RANGE_{agg}", sql, sql, Scalar, may_be_empty=empty)


@st.composite
def agg_subs(draw, sid):
    agg = draw(st.sampled_from(["COUNT(*)", "COUNT(y)", "SUM(y)", "AVG(y)"]))
    where, empty = draw(ranges())
    sql = f"SELECT {agg} FROM t{and_all(where)}"
    # COUNT(y) is not among the documented shapes (docs/range_classes.md): refused, or checked if supported
    return Sub(sid, "RANGE_AGG", sql, sql, Scalar, may_be_empty=empty, may_be_unsupported=agg == "COUNT(y)")


@st.composite
def distinct_subs(draw, sid):
    col = draw(st.sampled_from(["y", "s", "z"]))
    where, empty = draw(ranges(cols=[c for c in ("x", "z") if c != col]))
    return distinct_sub(sid, col, where, empty)


def distinct_sub(sid, col, where, empty=False):
    sql = f"SELECT DISTINCT {col} FROM t{and_all(where)}"
    return Sub(sid, "RANGE_DISTINCT", sql, f"SELECT DISTINCT {col} AS v FROM t{and_all(where)}", Distinct,
               may_be_empty=empty, text_value=col == "s")


TOPK_COLUMNS = ["*", "k, y", "k, x, y", "s, y", "y AS v, k"]


def topk_sub(sid, cls, where, empty, cols, desc, k):
    order = " DESC" if desc else ""
    sql = f"SELECT {cols} FROM t{and_all(where)} ORDER BY y{order} LIMIT {k}"
    # item_x is the range attribute: z when only z is constrained, else x (a box's first attribute); without
    # a WHERE the engine ranges over y itself
    xcol = "y" if not where else "z" if re.search(r"\bz\b", where) and not re.search(r"\bx\b", where) else "x"
    # documented reading (docs/range_classes.md): ties by the key, a NULL y in no list
    oracle = (f"SELECT {cols}, k AS __key, {xcol} AS __x, y AS __rank FROM t{and_all(where, 'y IS NOT NULL')} "
              f"ORDER BY y{order}, k LIMIT {k}")
    return Sub(sid, cls, sql, oracle, Topk, may_be_empty=empty)


@st.composite
def topk_subs(draw, sid):
    where, empty = draw(ranges())
    return topk_sub(sid, "RANGE_TOPK", where, empty, draw(st.sampled_from(TOPK_COLUMNS)), draw(st.booleans()),
                    draw(st.integers(1, 5)))


BOX_FORMS = [f for f in RANGE_FORMS if f != "none"]


@st.composite
def box_subs(draw, sid):
    wide = (1, 2, 3, 4, 6, 0, -1)  # two ranges: wider ones, so that boxes hold rows
    wx, ex = draw(ranges(cols=["x"], forms=BOX_FORMS, widths=wide))
    wz, ez = draw(ranges(cols=["z"], forms=BOX_FORMS, widths=wide))
    where = " AND ".join(draw(st.permutations([wx, wz])))
    if draw(st.booleans()):
        return topk_sub(sid, "BOX_TOPK", where, ex or ez, draw(st.sampled_from(TOPK_COLUMNS)), draw(st.booleans()),
                        draw(st.integers(1, 4)))
    agg = draw(st.sampled_from(["MIN", "MAX"]))
    sql = f"SELECT {agg}(y) FROM t WHERE {where}"
    return Sub(sid, f"BOX_{agg}", sql, sql, Scalar, may_be_empty=ex or ez)


@st.composite
def atoms(draw):
    col = draw(st.sampled_from(["x", "z", "y", "s", "b"]))
    if col == "s":
        op = draw(st.sampled_from(["=", "!=", "<", ">=", "in", "is_null", "is_not_null"]))
        const = lambda: literal(draw(st.sampled_from(["", "a", "b", "B", "ab", "c"])))  # noqa: E731
    else:
        op = draw(st.sampled_from(["=", "=", "!=", "<", "<=", ">", ">=", "between", "in", "is_null",
                                   "is_not_null"]))
        const = lambda: literal(draw(st.sampled_from(CONSTANTS)))  # noqa: E731
    if op == "between":
        return f"{col} BETWEEN {const()} AND {const()}"
    if op == "in":
        return f"{col} IN ({', '.join(const() for _ in range(draw(st.integers(1, 3))))})"
    if op == "is_null":
        return f"{col} IS NULL"
    if op == "is_not_null":
        return f"{col} IS NOT NULL"
    return f"{col} {op} {const()}"


@st.composite
def filter_subs(draw, sid):
    conjunctions = [" AND ".join(draw(st.lists(atoms(), min_size=1, max_size=3)))
                    for _ in range(draw(st.integers(1, 2)))]
    where = " OR ".join(f"({c})" if len(conjunctions) > 1 else c for c in conjunctions)
    return filter_sub(sid, draw(st.sampled_from(["*", "k, y", "k, s, x"])), where)


def filter_sub(sid, cols, where):
    projection = tuple(c for c, _ in T_COLUMNS) if cols == "*" else tuple(c.strip() for c in cols.split(","))
    sql = f"SELECT {cols} FROM t WHERE {where}"
    # an empty BETWEEN anywhere may be refused (DESIGN §7: an empty range is bad input)
    return Sub(sid, "FILTER", sql, sql, Filter, where=where, projection=projection, may_be_empty=True)


JOIN_EXTRA = ["", ", t.x AS tx", ", u.c AS uc, t.s"]


@st.composite
def join_subs(draw, sid, band=None):
    band = draw(st.booleans()) if band is None else band
    if band:
        lo = draw(st.integers(-2, 1))
        hi = lo + draw(st.integers(0, 2))
        on = draw(st.sampled_from([f"u.b - t.b BETWEEN {lo} AND {hi}", f"u.b BETWEEN t.b + {lo} AND t.b + {hi}"]))
    else:
        on = "t.b = u.b"
    shape = draw(st.sampled_from([(), ("t",), ("u",), ("t", "u")]))  # local selections, each optional
    parts, empty = [], False
    if "t" in shape:
        w, e = draw(ranges(cols=["x"], qualifier="t."))
        parts.append(w)
        empty |= e
    if "u" in shape:
        w, e = draw(ranges(cols=["c"], qualifier="u."))
        parts.append(w)
        empty |= e
    extra = draw(st.sampled_from(JOIN_EXTRA))
    frm = draw(st.sampled_from(["t JOIN u ON {on}", "u JOIN t ON {on}"])).format(on=on)
    return join_sub(sid, band, frm, parts, extra, empty)


def join_sub(sid, band, frm, parts=(), extra="", empty=False):
    sql = f"SELECT t.k AS rk, u.uk AS sk{extra} FROM {frm}{and_all(*parts)}"
    oracle = f"SELECT t.k AS rk, u.uk AS sk{extra}, t.k AS __rk, u.uk AS __sk FROM {frm}{and_all(*parts)}"
    names = ("rk", "sk") + tuple(c.split(" AS ")[-1].split(".")[-1].strip() for c in extra.split(",") if c.strip())
    return Sub(sid, "BAND_JOIN" if band else "SELECT_JOIN", sql, oracle, Join, tables=("t", "u"),
               may_be_empty=empty, projection=names)


@st.composite
def bulk_subs(draw, prefix):
    """subscribe_many: MIN over :lo/:hi, or top-k with a per-subscription :k."""
    n = draw(st.integers(1, 3))
    subs = []
    topk = draw(st.booleans())
    template = ("SELECT k, y FROM t WHERE x BETWEEN :lo AND :hi ORDER BY y LIMIT :k" if topk
                else "SELECT MIN(y) FROM t WHERE x BETWEEN :lo AND :hi")
    for i in range(n):
        lo = draw(st.sampled_from(CONSTANTS))
        hi = lo + draw(st.sampled_from([0, 0.5, 1, 3]))
        params = {"lo": float(lo), "hi": float(hi)} | ({"k": draw(st.integers(1, 4))} if topk else {})
        bound = template.replace(":lo", literal(float(lo))).replace(":hi", literal(float(hi)))
        if topk:
            where = f"x BETWEEN {literal(float(lo))} AND {literal(float(hi))}"
            sub = topk_sub(f"{prefix}{i}", "RANGE_TOPK", where, False, "k, y", False, params["k"])
        else:
            sub = Sub(f"{prefix}{i}", "RANGE_MIN", bound, bound, Scalar)
        sub.bulk = (template, params)
        subs.append(sub)
    return subs


# ---- cases ---------------------------------------------------------------------------------------------

@dataclass
class Batch:
    table: str
    mode: str
    rows: list

    def __repr__(self):
        return f"publish({self.table!r}, {self.rows!r}, mode={self.mode!r})"


@dataclass
class Case:
    t_rows: list
    u_rows: list
    subs: list
    batches: list
    load_after_subscribe: bool = False

    def _repr_pretty_(self, p, cycle):  # hypothesis prints the failing case through this
        p.text(repr(self))

    def __repr__(self):
        lines = ["", *DDL]
        load = [f"load('t', {self.t_rows!r})", f"load('u', {self.u_rows!r})"]
        subs = [repr(s) for s in self.subs]
        lines += (subs + load) if self.load_after_subscribe else (load + subs)
        lines += [repr(b) for b in self.batches]
        return "\n  ".join(lines)


def double(draw, values):
    """One of ``values``, or now and then ±inf (WITH_INFINITIES)."""
    if WITH_INFINITIES and draw(st.integers(0, 24)) == 0:
        return draw(st.sampled_from([INF, -INF]))
    return draw(st.sampled_from(values))


def t_row(draw, k):
    return {"k": k, "x": double(draw, X_VALUES), "z": draw(st.sampled_from(Z_VALUES)), "y": double(draw, Y_VALUES),
            "s": draw(st.sampled_from(S_VALUES)), "b": draw(st.sampled_from(B_VALUES))}


def u_row(draw, k):
    return {"uk": k, "b": draw(st.sampled_from(B_VALUES)), "c": double(draw, C_VALUES)}


@st.composite
def cases(draw, n_batches=3):
    t_keys = draw(st.sets(st.integers(0, T_KEYS - 1), max_size=7))
    u_keys = draw(st.sets(st.integers(0, U_KEYS - 1), max_size=5))
    t_rows = [t_row(draw, k) for k in sorted(t_keys)]
    u_rows = [u_row(draw, k) for k in sorted(u_keys)]
    subs = []
    for prefix, strategy, n in [("mm", min_max_subs, 3), ("ag", agg_subs, 3), ("ds", distinct_subs, 2),
                                ("tk", topk_subs, 2), ("bx", box_subs, 3), ("fl", filter_subs, 2)]:
        subs += [draw(strategy(f"{prefix}{i}")) for i in range(draw(st.integers(1, n)))]
    subs += [draw(join_subs("jn0", band=False)), draw(join_subs("jn1", band=True))]
    subs += [draw(join_subs(f"jn{i}")) for i in range(2, 2 + draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        subs += draw(bulk_subs("bk"))
    keys = {"t": set(t_keys), "u": set(u_keys)}
    reformulated_at = draw(st.sampled_from([None, *range(n_batches)]))
    batches = []
    for i in range(n_batches):
        table = draw(st.sampled_from(["t", "t", "u"]))
        live, rows = keys[table], []
        for _ in range(draw(st.integers(1, 6))):
            if live and draw(st.integers(0, 3)) == 0:
                k = draw(st.sampled_from(sorted(live)))
                live.discard(k)
                key = "k" if table == "t" else "uk"
                cols = T_COLUMNS if table == "t" else U_COLUMNS
                rows.append({c: (k if c == key else None) for c, _ in cols} | {"_op": "delete"})
            else:
                k = draw(st.integers(0, (T_KEYS if table == "t" else U_KEYS) - 1))
                live.add(k)
                rows.append((t_row(draw, k) if table == "t" else u_row(draw, k)) | {"_op": "upsert"})
        batches.append(Batch(table, "reformulated" if i == reformulated_at else "unicast", rows))
    return Case(t_rows, u_rows, subs, batches, draw(st.booleans()))


# ---- running a case ------------------------------------------------------------------------------------

class Mismatch(AssertionError):
    pass


def tally(what: str) -> None:
    """Count what the examples exercised (``pytest --hypothesis-show-statistics``)."""
    if currently_in_test_context():
        event(what)


def register(engine: Engine, subs: list) -> list:
    """Register every subscription; a refused one must be an empty constant range and leave nothing
    registered. Returns the registered ones."""
    kept = []
    for sub in [s for s in subs if not s.bulk]:
        before = set(engine.subscription_ids())
        try:
            engine.sql(f"CREATE SUBSCRIPTION {sub.sid} AS {sub.sql}")
        except UnsupportedSubscription as err:
            if not sub.may_be_unsupported:
                raise Mismatch(f"{sub!r} refused: {err}") from err
            if set(engine.subscription_ids()) != before:
                raise Mismatch(f"{sub!r} refused but the registered ids changed") from err
            tally("undocumented shape refused")
            continue
        except InvalidSubscription as err:
            if not sub.may_be_empty:
                raise Mismatch(f"{sub!r} refused: {err}") from err
            if set(engine.subscription_ids()) != before:
                raise Mismatch(f"{sub!r} refused but the registered ids changed") from err
            tally(f"{sub.cls}: empty constant range refused")
            continue
        kept.append(sub)
    bulk = [s for s in subs if s.bulk]
    if bulk:
        template = bulk[0].bulk[0]
        params = {"id": [s.sid for s in bulk]}
        for name in bulk[0].bulk[1]:
            params[name] = [s.bulk[1][name] for s in bulk]
        engine.subscribe_many(template, params)
        kept += bulk
    classes = {r["name"]: r["class"] for r in engine.subscription_table().to_pylist()}  # SHOW SUBSCRIPTIONS
    for sub in kept:
        if classes.get(sub.sid) != sub.cls:
            raise Mismatch(f"{sub!r}: expected class {sub.cls}, SHOW SUBSCRIPTIONS says {classes.get(sub.sid)}")
    return kept


def oracle_states(db: DuckDBOracle, subs: list, tables: dict) -> dict:
    db.load(*tables.values())
    return {s.sid: s.kind.state(db, s) for s in subs}


def rows_of(df) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def check_results(engine: Engine, subs: list, want: dict, when: str) -> None:
    for sub in subs:
        got = engine.result(sub.sid)
        try:
            same = sub.kind.same(got, want[sub.sid])
        except (TypeError, ValueError, AttributeError, KeyError) as err:  # another shape than the contract's
            same = f"{type(err).__name__}: {err}"
        if same is not True:
            raise Mismatch(f"{when}: result({sub.sid!r}) for {sub.sql}\n  engine: {got!r}\n  duckdb: "
                           f"{want[sub.sid]!r}" + (f"\n  ({same})" if same else ""))


def check_notes(subs: list, rows: list, expected: dict, when: str) -> None:
    """``rows``: the unicast rows; ``expected``: sid -> [note]. Exactly those, no others."""
    by_sid: dict = {}
    for r in rows:
        by_sid.setdefault(r["subscription_id"], []).append(r)
    known = {s.sid: s for s in subs}
    stray = set(by_sid) - set(known)
    if stray:
        raise Mismatch(f"{when}: notifications for unknown subscriptions {sorted(map(str, stray))}: "
                       f"{[r for r in rows if r['subscription_id'] in stray][:3]}")
    for sid, want in expected.items():
        sub = known[sid]
        try:
            got = Counter(sub.kind.got_note(sub, r) for r in by_sid.get(sid, []))
        except KeyError as err:
            raise Mismatch(f"{when}: notifications of {sid!r} lack column {err}: {by_sid[sid][:2]}") from None
        if got != Counter(want):
            raise Mismatch(f"{when}: notifications of {sid!r} ({sub.sql})\n  engine: "
                           f"{sorted(got.elements(), key=str)}\n  duckdb: {sorted(want, key=str)}")


def has_infinity(row: dict) -> bool:
    return any(isinstance(v, float) and math.isinf(v) for v in row.values())


def refusable(rows: list, contents: TableContents, skipped: set) -> dict:
    """Which of ``rows`` the engine may set aside (index -> why), the rows in ``skipped`` not applied:
    an upsert holding ±inf (item 5: rejecting them at the boundary is legal), a delete of a key the table
    does not hold (counting the rows before it)."""
    contents = contents.copy()
    out = {}
    for j, row in enumerate(rows):
        if row["_op"] == "upsert" and has_infinity(row):
            out[j] = "±inf"
        elif row["_op"] == "delete" and row[contents.key] not in contents.rows:
            out[j] = "delete of an unknown key"
        if j not in skipped:
            if j in out and row["_op"] == "delete":
                return out  # the engine applied a delete of an unknown key: not refusable, stop here
            contents.apply(row)
    return out


def run_case(spark, case: Case, open_items=KNOWN_OPEN) -> None:
    """Run ``case`` and compare after every publish; ``open_items``: the known-open items tolerated."""
    global OPEN
    saved, OPEN = OPEN, frozenset(open_items)
    try:
        _run_case(spark, case)
    finally:
        OPEN = saved


def _run_case(spark, case: Case) -> None:
    engine = Engine(spark)
    for ddl in DDL:
        engine.sql(ddl)
    tables = {"t": TableContents("t", T_COLUMNS, "k"), "u": TableContents("u", U_COLUMNS, "uk")}

    def load():
        for name, rows in (("t", case.t_rows), ("u", case.u_rows)):
            if rows:
                try:
                    engine.load(name, rows)
                except BadUpdate as err:
                    if not any(has_infinity(r) for r in rows):
                        raise Mismatch(f"load({name!r}) refused: {err}") from err
                    continue  # item 5: ±inf rejected at the boundary, the whole load refused
                for r in rows:
                    tables[name].apply(r)

    if not case.load_after_subscribe:
        load()
    subs = register(engine, case.subs)
    if case.load_after_subscribe:
        load()
    db = DuckDBOracle()
    try:
        current = oracle_states(db, subs, tables)
        check_results(engine, subs, current, "after load")
        seq = 0
        for i, batch in enumerate(case.batches):
            when = f"batch {i} ({batch.mode} to {batch.table})"
            try:
                df = engine.publish(batch.table, batch.rows, mode=batch.mode)
            except BadUpdate as err:
                infinite = {j for j, r in enumerate(batch.rows) if r["_op"] == "upsert" and has_infinity(r)}
                reasons = refusable(batch.rows, tables[batch.table], infinite)
                if not reasons:
                    raise Mismatch(f"{when}: refused: {err}") from err
                tally("batch refused")
                continue  # the whole batch refused before any change: no seq used
            out = rows_of(df)
            if batch.mode == "reformulated":
                delivered = rows_of(engine.deliver(df.where(df.op != "rejected") if "deliver_rejected" in OPEN
                                                   else df))
            errors = [r for r in out if r["op"] == "error"]
            if errors:
                raise Mismatch(f"{when}: error rows: {[r.get('reason') for r in errors]}")
            rejected_reasons = {r["seq"] - seq: r["reason"] for r in out if r["op"] == "rejected"}
            rejected = set(rejected_reasons)
            if rejected - set(refusable(batch.rows, tables[batch.table], rejected)):
                raise Mismatch(f"{when}: rejected rows {[r for r in out if r['op'] == 'rejected']}")
            out = [r for r in out if r["op"] != "rejected"]
            if batch.mode == "reformulated":   # deliver() passes the rejected rows through, as they are
                passed = sorted((r["seq"], r["reason"]) for r in delivered if r["op"] == "rejected")
                if "deliver_rejected" not in OPEN and passed != sorted((seq + j, reason) for j, reason in
                                                                       rejected_reasons.items()):
                    raise Mismatch(f"{when}: deliver's rejected rows {passed}")
                delivered = [r for r in delivered if r["op"] != "rejected"]
            # the oracle, update by update
            reading = [s for s in subs if batch.table in s.tables]
            states = [{s.sid: current[s.sid] for s in reading}]
            upserts = []
            for j, row in enumerate(batch.rows):
                if j not in rejected:
                    tables[batch.table].apply(row)
                    if row["_op"] == "upsert" and batch.table == "t":
                        upserts.append((seq + j, {c: row[c] for c, _ in T_COLUMNS}))
                states.append(oracle_states(db, reading, tables))
            # a batch's net change is reported at its last applied seq
            last = seq + max([j for j in range(len(batch.rows)) if j not in rejected], default=0)
            per_seq = {s.sid: [] for s in subs}  # the subscriptions of other tables: nothing
            net = dict(per_seq)
            for s in reading:
                if s.kind is Filter:
                    per_seq[s.sid] = net[s.sid] = Filter.batch_notes(s, upserts)
                    continue
                per_seq[s.sid] = [n for j in range(len(batch.rows))
                                  for n in s.kind.notes(states[j][s.sid], states[j + 1][s.sid], seq + j)]
                net[s.sid] = (s.kind.notes(states[0][s.sid], states[-1][s.sid], last)
                              if s.cls in s.kind.net_per_batch else per_seq[s.sid])
            for s in reading:
                if per_seq[s.sid]:
                    tally(f"{s.cls} notified ({batch.mode})")
            if batch.mode == "unicast":
                check_notes(subs, out, per_seq, when)
            else:
                # FILTER and BAND_JOIN have no messages: their unicast rows come beside them (item 6), and
                # deliver() passes them through
                unicast_only = {s.sid for s in subs if s.kind is Filter or s.cls == "BAND_JOIN"}
                beside = [r for r in out if r.get("subscription_id") is not None]
                check_notes(subs, beside, {sid: per_seq[sid] if sid in unicast_only else [] for sid in per_seq},
                            when + " beside the messages")
                want = {sid: per_seq[sid] if sid in unicast_only else net[sid] for sid in per_seq}
                if "deliver_event_column" in OPEN:  # the rows deliver() passes through go unchecked
                    delivered = [r for r in delivered if r["subscription_id"] not in unicast_only]
                    want = {sid: w for sid, w in want.items() if sid not in unicast_only}
                check_notes(subs, delivered, want, when + " deliver")
            current.update(states[-1])
            check_results(engine, subs, current, when)
            seq += len(batch.rows)
    finally:
        db.close()


def scalar_sub(sid, cls, sql):
    return Sub(sid, cls, sql, sql, Scalar)


def t_rows(*rows):
    return [dict(zip([c for c, _ in T_COLUMNS], r)) for r in rows]


def u_rows(*rows):
    return [dict(zip([c for c, _ in U_COLUMNS], r)) for r in rows]


def upserts(maker, *rows):
    return [r | {"_op": "upsert"} for r in maker(*rows)]


def deletes(maker, *keys):
    return [r | {"_op": "delete"} for r in maker(*[(k,) + (None,) * 5 for k in keys])]


#: every class at once, by hand: NULL x/y/s/b, ties in y, deletes, a key coming back, k beyond the rows,
#: a reformulated batch; the generated cases add the variety
EVERY_CLASS = Case(
    t_rows((0, 1.0, 1, 2.0, "a", 1), (1, 2.0, 2, 2.0, "a", 1), (2, None, 0, 1.0, None, None),
           (3, 3.0, None, None, "b", 2)),
    u_rows((0, 1, 0.0), (1, None, 1.0), (2, 2, None)),
    [scalar_sub("mn", "RANGE_MIN", "SELECT MIN(y) FROM t WHERE x BETWEEN 1 AND 3"),
     scalar_sub("mx", "RANGE_MAX", "SELECT MAX(y) FROM t WHERE z > 0.5"),
     scalar_sub("ag0", "RANGE_AGG", "SELECT COUNT(*) FROM t WHERE x >= 1"),
     scalar_sub("ag1", "RANGE_AGG", "SELECT SUM(y) FROM t WHERE x <= 2"),
     scalar_sub("ag2", "RANGE_AGG", "SELECT AVG(y) FROM t WHERE 0 < x AND x < 3"),
     distinct_sub("ds0", "s", "x BETWEEN 0 AND 5"),
     distinct_sub("ds1", "y", "z >= 0"),
     topk_sub("tk0", "RANGE_TOPK", "x BETWEEN 0 AND 5", False, "k, y", True, 2),
     topk_sub("tk1", "RANGE_TOPK", "z <= 3", False, "*", False, 10),
     scalar_sub("bx0", "BOX_MIN", "SELECT MIN(y) FROM t WHERE x BETWEEN 0 AND 3 AND z BETWEEN 0 AND 2"),
     topk_sub("bx1", "BOX_TOPK", "x >= 1 AND z < 3", False, "k, y", False, 2),
     filter_sub("fl0", "k, y", "s IS NULL OR y BETWEEN 1 AND 2"),
     filter_sub("fl1", "*", "b IN (1, 2) AND x != 2"),
     join_sub("sj0", False, "t JOIN u ON t.b = u.b", ["t.x BETWEEN 0 AND 3"]),
     join_sub("sj1", False, "u JOIN t ON t.b = u.b", [], ", u.c AS uc, t.s"),
     join_sub("bj0", True, "t JOIN u ON u.b - t.b BETWEEN 0 AND 1", ["u.c >= 0"])],
    [Batch("t", "unicast", upserts(t_rows, (1, 2.0, 2, 0.0, "a", 1)) + deletes(t_rows, 0)
           + upserts(t_rows, (4, 1.0, 1, None, "a", 2), (2, 2.0, 0, 1.0, None, None))),
     Batch("t", "reformulated", upserts(t_rows, (3, 3.0, None, 5.0, "b", 2), (5, 0.5, 2, -1.0, "c", 1))
           + deletes(t_rows, 1) + upserts(t_rows, (0, 1.0, 1, 2.0, "a", 1))),
     Batch("u", "unicast", upserts(u_rows, (1, 1, 1.0)) + deletes(u_rows, 0)
           + upserts(u_rows, (3, 2, 2.5)))])


@settings(max_examples=EXAMPLES, deadline=None, phases=PHASES, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=cases())
@example(case=EVERY_CLASS)
def test_every_sql_class_agrees_with_duckdb_after_every_publish(spark, case):
    run_case(spark, case)


# ---- the minimal reproductions of what the fuzzer found: fixed ones as regression tests, known-open ones as
# strict xfails (they fail the run once the fix lands: then remove the item from KNOWN_OPEN, which also turns
# the fuzzer's check back on) ---------------------------------------------------------------------------------

def _open_item(item: str, reason: str):
    return pytest.mark.xfail(item in KNOWN_OPEN, strict=True, raises=(Mismatch, SparksubError),
                             reason=f"issue 15 {reason}")


def test_topk_result_is_rows_of_the_selected_columns(spark):
    """Issue 15 item 8 (DESIGN §1): rows of the selected columns under their aliases, in rank order."""
    case = Case(t_rows((1, 1.0, 0, 5.0, "a", 0), (2, 2.0, 0, 7.0, "b", 0)), [],
                [topk_sub("top", "RANGE_TOPK", "x BETWEEN 0 AND 3", False, "s, y AS v", True, 1)],
                [Batch("t", "unicast", upserts(t_rows, (3, 1.5, 0, 6.0, "c", 0)))])
    run_case(spark, case, frozenset())


def test_join_result_and_notifications_carry_the_selected_columns(spark):
    """Issue 15 item 8 (DESIGN §1): join rows and notifications carry the selected columns' aliases."""
    case = Case(t_rows((1, 1.0, 0, 5.0, "a", 3)), u_rows((1, 3, 2.0)),
                [join_sub("sj", False, "t JOIN u ON t.b = u.b", [], ", u.c AS uc")],
                [Batch("u", "unicast", upserts(u_rows, (2, 3, 4.0)))])
    run_case(spark, case, frozenset())


def test_reformulated_publish_keeps_the_unicast_only_subscribers(spark):
    """Issue 15 item 6: FILTER and BAND_JOIN rows come beside the messages, not dropped."""
    case = Case(t_rows((1, 1.0, 0, 5.0, "a", 3)), u_rows((1, 3, 2.0)),
                [filter_sub("f", "*", "y > 1"),
                 join_sub("band", True, "t JOIN u ON u.b - t.b BETWEEN 0 AND 1")],
                [Batch("t", "reformulated", upserts(t_rows, (2, 2.0, 0, 6.0, "b", 4)))])
    run_case(spark, case, frozenset())


def test_band_join_null_in_a_selection_excludes_only_its_subscriptions(spark):
    """Issue 15 item 1: a NULL in a selection column excludes the row only where it is selected on."""
    # the reproduction of issue 15 item 1 (R side), then the same on the S side: b1 must keep (1, 1)
    case = Case(t_rows((1, 1.0, 0, 5.0, "a", 5)), u_rows((1, 5, 1.0)),
                [join_sub("b1", True, "t JOIN u ON u.b - t.b BETWEEN 0 AND 0"),
                 join_sub("b2", True, "t JOIN u ON u.b - t.b BETWEEN 0 AND 0", ["t.x >= 0"]),
                 join_sub("b3", True, "t JOIN u ON u.b - t.b BETWEEN 0 AND 1", ["u.c <= 1.5"])],
                [Batch("t", "unicast", upserts(t_rows, (1, None, 0, 5.0, "a", 5))),
                 Batch("t", "unicast", upserts(t_rows, (1, 1.0, 0, 5.0, "a", 5))),
                 Batch("u", "unicast", upserts(u_rows, (1, 5, None)))])
    run_case(spark, case, frozenset())


# ---- the checks can fail ----------------------------------------------------------------------------------

def test_the_comparisons_catch_wrong_answers():
    """Without Spark: a wrong value, a wrong top-k order, a missing or an extra notification, a FILTER
    match outside the WHERE are all reported."""
    class Answers:  # stands in for the engine's result()
        def __init__(self, results):
            self.results = results

        def result(self, sid):
            return self.results[sid]

    tables = {"t": TableContents("t", T_COLUMNS, "k")}
    for r in t_rows((1, 1.0, 0, 5.0, "a", 0), (2, 2.0, 0, 7.0, None, 0), (3, 9.0, 0, 1.0, "b", 0)):
        tables["t"].apply(r)
    mn = scalar_sub("mn", "RANGE_MIN", "SELECT MIN(y) FROM t WHERE x BETWEEN 0 AND 3")
    ds = distinct_sub("ds", "s", "x <= 3")
    tk = topk_sub("tk", "RANGE_TOPK", "x <= 9", False, "k, y", True, 2)
    fl = filter_sub("fl", "k, y", "y > 4")
    db = DuckDBOracle()
    want = oracle_states(db, [mn, ds, tk], tables)
    assert want == {"mn": 5.0, "ds": frozenset({"a"}),
                    "tk": ((("2", 2.0, 7.0), norm_row({"k": 2, "y": 7.0})),
                           (("1", 1.0, 5.0), norm_row({"k": 1, "y": 5.0})))}
    right_topk = [{"k": 2, "y": 7.0}, {"k": 1, "y": 5.0}]
    check_results(Answers({"mn": 5.0, "ds": ["a"], "tk": right_topk}), [mn, ds, tk], want, "right")
    for wrong in [{"mn": 1.0}, {"ds": ["a", None]}, {"ds": ["a", "a"]}, {"tk": right_topk[::-1]}]:
        with pytest.raises(Mismatch):
            check_results(Answers({"mn": 5.0, "ds": ["a"], "tk": right_topk} | wrong), [mn, ds, tk], want, "wrong")
    note = {"subscription_id": "mn", "op": "update", "value": 5.0, "seq": 0}
    check_notes([mn], [note], {"mn": [(0, "update", 5.0)]}, "right")
    for rows, expected in [([], [(0, "update", 5.0)]), ([note, note], [(0, "update", 5.0)]),
                           ([note | {"value": 4.0}], [(0, "update", 5.0)]), ([note], [])]:
        with pytest.raises(Mismatch):
            check_notes([mn], rows, {"mn": expected}, "wrong")
    matches = Filter.batch_notes(fl, [(7, r) for r in t_rows((4, 0.0, 0, 5.0, "c", 0), (5, 0.0, 0, 3.0, "d", 0))])
    assert matches == [(7, "match", (4.0, None, None, 5.0, None, None))]


@_open_item("deliver_event_column", "item 6: deliver() drops the FILTER event's k beside top-k messages' k")
def test_deliver_passes_filter_rows_through_whole(spark):
    case = Case(t_rows((1, 1.0, 0, 5.0, "a", 0)), [],
                [filter_sub("f", "k, y", "y > 1"),
                 topk_sub("top", "RANGE_TOPK", "x >= 0", False, "k, y", False, 2)],
                [Batch("t", "reformulated", upserts(t_rows, (2, 1.0, 0, 2.0, "b", 0)))])
    run_case(spark, case, KNOWN_OPEN - {"deliver_event_column"})


def test_show_subscriptions_lists_a_join_without_selections(spark):
    engine = Engine(spark)
    for ddl in DDL:
        engine.sql(ddl)
    for sid in ("j1", "j2"):
        engine.sql(f"CREATE SUBSCRIPTION {sid} AS SELECT t.k AS rk, u.uk AS sk FROM t JOIN u ON t.b = u.b")
    rows = engine.subscription_table().to_pylist()
    assert [(r["name"], r["class"], json.loads(r["parameters"])) for r in rows] == [
        ("j1", "SELECT_JOIN", {}), ("j2", "SELECT_JOIN", {})]


@_open_item("deliver_rejected", "items 5 + 6: deliver() refuses the rejected rows of a reformulated publish")
def test_deliver_takes_a_reformulated_output_with_rejected_rows(spark):
    case = Case(t_rows((1, 1.0, 0, 5.0, "a", 0)), [],
                [scalar_sub("mn", "RANGE_MIN", "SELECT MIN(y) FROM t WHERE x BETWEEN 0 AND 5")],
                [Batch("t", "reformulated", upserts(t_rows, (2, 1.0, 0, 2.0, "b", 0), (3, INF, 0, 1.0, "c", 0)))])
    run_case(spark, case, KNOWN_OPEN - {"deliver_rejected"})


def test_infinities_are_exact_or_rejected(spark):
    """Issue 15 item 5: a row with ±inf is handled exactly or set aside, never an 'error' for the group."""
    case = Case(t_rows((1, 1.0, 0, 5.0, "a", 0), (2, 2.0, 1, 7.0, "b", 0)), [],
                [scalar_sub("mn", "RANGE_MIN", "SELECT MIN(y) FROM t WHERE x BETWEEN 0 AND 40"),
                 scalar_sub("mx", "RANGE_MAX", "SELECT MAX(y) FROM t WHERE x >= 0"),
                 scalar_sub("n", "RANGE_AGG", "SELECT COUNT(*) FROM t WHERE x <= 3"),
                 scalar_sub("sm", "RANGE_AGG", "SELECT SUM(y) FROM t WHERE x >= 0"),
                 topk_sub("tk", "RANGE_TOPK", "x >= 0", False, "k, y", True, 2)],
                [Batch("t", "unicast", upserts(t_rows, (6, 30.0, 0, INF, "c", 0), (7, -INF, 0, 1.0, "d", 0))),
                 Batch("t", "unicast", upserts(t_rows, (8, 1.5, 0, -INF, "e", 0)))])
    run_case(spark, case, frozenset())
