"""Bulk registration of event queries (issue 18 item 2): one CEL template with ``:name`` parameters and a
table of values, bound row by row into query ASTs -- the analogue of ``subscribe_many`` for event queries.
Pure (no Spark).

Cayuga's subscriptions come in *families*: many users ask the same question with their own constants
(004 §1 "parameterization"; Table 1's S2/S3/S4 with one symbol and threshold each).  Parsing each query's
text costs ~0.7 ms (lark), so 100,000 queries took 72 s; here the template is parsed **once**
(``grammar.events.parse_template``: a ``Param`` node wherever a constant may stand, and as a ``DUR`` bound)
and each row's values are substituted into the AST by a substitution plan compiled once: the nodes on a
path from the root to a parameter are rebuilt per row (through their constructors, so every check of a
hand-built AST applies), everything else is shared.  No user text is ever evaluated; a value is a
constant or an error.

Template syntax (``docs/events.md``)::

    SELECT * FROM FILTER{Price < :q}(FILTER{Name = :a AND Price > :p}(Stock) NEXT{$2.Name = :b} Stock)
    SELECT * FROM FILTER{DUR >= :d MIN}(FILTER{Name = :a}(Stock) FOLD{$2.Name = $.Name, $2.Price > $.Price,} Stock)

A parameter stands for one constant: a number, a string, or TRUE/FALSE; ``-:p`` negates a number.  The
parameter table is a ``pyarrow.Table`` / ``RecordBatch`` or a mapping of column name -> sequence (lists,
numpy arrays), one column per parameter (without the colon), plus optionally the query names.

Bad input raises ``AnalysisError`` before anything is registered, naming the row and the parameter: a
parameter without a column, a column that is no parameter, columns of different lengths, a NULL, NaN or
infinite value, a value that is not a number / string / boolean, a negative or non-numeric DUR bound, a
negated string, a missing, empty or duplicate query name.  (A value of the wrong *type* for its place --
``Price > :p`` with a string -- is refused by the registration type check, which names the row too.)

>>> b = bind_event_template("SELECT * FROM FILTER{Name = :a AND Price > :p}(Stock)",
...                         {"a": ["IBM", "MSFT"], "p": [100, 25.5]})
>>> [q.to_cel() for q in b]
["SELECT * FROM FILTER{Name = 'IBM' AND Price > 100}(Stock)", "SELECT * FROM FILTER{Name = 'MSFT' AND Price > 25.5}(Stock)"]
>>> bind_event_template("SELECT * FROM FILTER{Price > :p}(Stock)", {"p": [1.0, None]})
Traceback (most recent call last):
...
sparksub.errors.AnalysisError: row 1: parameter :p is NULL (a template parameter needs a value)
"""
from __future__ import annotations

import functools
import gc
import math
from dataclasses import fields
from typing import Any, Callable, Mapping, Sequence

from sparksub.errors import AnalysisError
from sparksub.grammar.event_ast import Const, Dur, Iteration, Neg, Node, Param, StreamExpr
from sparksub.grammar.event_ast import Sequence as SeqOp

__all__ = ["BoundTemplate", "bind_event_template", "template_parameters", "analysed_queries", "analysed_parts",
           "register_bound", "TemplateRows"]


def template_parameters(template: StreamExpr) -> tuple[str, ...]:
    """The parameter names of a template, in order of first appearance."""
    return tuple(dict.fromkeys(n.name for n in template.walk() if isinstance(n, Param)))


# ---------------------------------------------------------------------------------------------------
# The substitution plan: compiled once per template
# ---------------------------------------------------------------------------------------------------

_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(cls) -> tuple[str, ...]:
    """A node class's fields (``dataclasses.fields`` is slow)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return names


def _new(cls, **values):
    """A node built without its ``__post_init__`` checks (see ``_plan``)."""
    obj = object.__new__(cls)
    for f, x in values.items():
        object.__setattr__(obj, f, x)
    return obj


def _template_leaf(node) -> Callable | None:
    """The substitution of a template's parameter node (``:p``, ``-:p``, ``DUR op :p``), else None."""
    if isinstance(node, Param):
        name, pos = node.name, node.pos
        return lambda v: _new(Const, value=v[name], pos=pos)
    if isinstance(node, Neg) and isinstance(node.operand, Param):   # -:p: a negative constant (neg())
        name, pos = node.operand.name, node.pos
        return lambda v: _new(Const, value=-v[name], pos=pos)
    if isinstance(node, Dur) and isinstance(node.value, Param):
        name, op, unit, pos = node.value.name, node.op, node.unit, node.pos
        return lambda v: _new(Dur, op=op, value=v[name], unit=unit, pos=pos)
    return None


def _plan(node: Node, leaf: Callable = _template_leaf) -> Callable[[Mapping[str, Any]], Node] | None:
    """``build(values) -> node`` with the parameters replaced (``leaf(node)``: a leaf's substitution or
    None), or None when ``node`` has none (then it is shared by every row).

    Nodes are built without their constructors' checks: those read the structure (scopes, items, operator
    names), which binding does not change -- they held for the template -- and the values' own checks
    (``Const``: a finite number, a string or a boolean; ``Dur``: a non-negative number) are made once per
    column by ``_check_values``.  (The checks walked the whole predicate per node: 15 s per 100,000 rows.)
    The one structural rule a value can change -- a literal TRUE as θ / rebind condition is stored as
    None -- goes through the constructor."""
    own = leaf(node)
    if own is not None:
        return own
    static: dict[str, Any] = {}
    dynamic: list[tuple[str, Callable]] = []
    for f in _field_names(type(node)):
        value = getattr(node, f)
        if isinstance(value, Node):
            sub = _plan(value, leaf)
            if sub is None:
                static[f] = value
            else:
                dynamic.append((f, sub))
        elif isinstance(value, tuple) and any(isinstance(x, Node) for x in value):
            parts = [(_plan(x, leaf) if isinstance(x, Node) else None, x) for x in value]
            if any(p for p, _ in parts):
                dynamic.append((f, lambda v, parts=parts: tuple(p(v) if p else x for p, x in parts)))
            else:
                static[f] = value
        else:
            static[f] = value
    if not dynamic:
        return None
    cls = type(node)
    checked = isinstance(node, (SeqOp, Iteration)) and any(leaf(getattr(node, f)) for f, _ in dynamic)
    make = cls if checked else functools.partial(_new, cls)

    def build(v):
        kw = dict(static)
        for f, fn in dynamic:
            kw[f] = fn(v)
        return make(**kw)
    return build


# ---------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------

def _columns(params) -> dict[str, list]:
    """The parameter table as column name -> list of Python values."""
    if hasattr(params, "column_names") and hasattr(params, "column"):          # pyarrow Table / RecordBatch
        return {c: params.column(c).to_pylist() for c in params.column_names}
    if not isinstance(params, Mapping):
        raise AnalysisError(f"the parameter table is a pyarrow Table or a mapping of column -> values, "
                            f"got {type(params).__name__}")
    out = {}
    for c, values in params.items():
        if not isinstance(c, str):
            raise AnalysisError(f"parameter column names are strings, got {c!r}")
        if hasattr(values, "to_pylist"):
            values = values.to_pylist()
        elif hasattr(values, "tolist"):                                        # numpy: Python scalars
            values = values.tolist()
        elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise AnalysisError(f"parameter column {c!r} is not a sequence of values: {type(values).__name__}")
        out[c] = list(values)
    return out


def _kind(v) -> str:
    return "bool" if isinstance(v, bool) else "num" if isinstance(v, (int, float)) else "str"


def _check_values(name: str, values: list, negated: bool, dur: bool) -> list:
    """The column's values, checked (errors name the row and the parameter); numpy scalars as Python's."""
    out = values
    for i, v in enumerate(values):
        if isinstance(v, (bool, int, str)):
            pass
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise AnalysisError(f"row {i}: parameter :{name} is {v!r} (a template parameter needs a finite "
                                    f"number, a string or a boolean)")
        elif v is None:
            raise AnalysisError(f"row {i}: parameter :{name} is NULL (a template parameter needs a value)")
        elif hasattr(v, "item") and not isinstance(v, (list, tuple, dict)):     # a numpy scalar
            if out is values:
                out = list(values)
            out[i] = v = v.item()
            if isinstance(v, float) and not math.isfinite(v) or v is None or \
                    not isinstance(v, (bool, int, float, str)):
                raise AnalysisError(f"row {i}: parameter :{name} is {v!r}, not a finite number, a string or "
                                    f"a boolean")
        else:
            raise AnalysisError(f"row {i}: parameter :{name} is {v!r} ({type(v).__name__}), not a number, a "
                                f"string or a boolean")
        if (dur or negated) and (isinstance(v, (bool, str))):
            where = "a DUR bound" if dur else "negated (-:" + name + ")"
            raise AnalysisError(f"row {i}: parameter :{name} is {where} in the template and needs a number, "
                                f"got {v!r}")
        if dur and v < 0:
            raise AnalysisError(f"row {i}: parameter :{name} is a DUR bound and must not be negative, got {v!r}")
    return out


# ---------------------------------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------------------------------

class BoundTemplate(Sequence):
    """A template bound to a parameter table: a sequence of query ASTs, one per row, each built when first
    read (``bulk registration`` of a family never needs most of them), with what bulk registration needs
    beside them -- the template, the validated columns, each row's value kinds, the query names (if
    given)."""

    def __init__(self, template: StreamExpr, text: str | None, columns: dict[str, list],
                 names: list[str] | None, n: int, build: Callable):
        self.template, self.text, self.columns, self.names = template, text, columns, names
        self.parameters = template_parameters(template)
        self.build = build                  # values -> query AST (the substitution plan)
        self._queries: list = [None] * n

    def __len__(self) -> int:
        return len(self._queries)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        q = self._queries[i]
        if q is None:
            try:
                q = self._queries[i] = self.build(self.values(i))
            except AnalysisError as err:    # a node's own check (e.g. TRUE where a predicate must be)
                raise AnalysisError(f"{self.describe_row(i)}: {err}") from None
        return q

    @property
    def queries(self) -> list[StreamExpr]:
        """Every row's query (built now)."""
        was = gc.isenabled()
        gc.disable()                        # (many small objects: the collector's passes dominate)
        try:
            return [self[i] for i in range(len(self))]
        finally:
            if was:
                gc.enable()

    def values(self, i: int) -> dict[str, Any]:
        """Row ``i``'s parameter values."""
        return {p: self.columns[p][i] for p in self.parameters}

    def kinds(self) -> list[tuple[str, ...]]:
        """Per row, the kind of each parameter's value (``num``, ``str``, ``bool``): rows of one kind
        signature type-check alike."""
        per_column = []
        for p in self.parameters:
            c = self.columns[p]
            types = set(map(type, c))
            per_column.append(_kind(c[0]) if len(types) == 1 else [_kind(v) for v in c])
        if all(isinstance(k, str) for k in per_column):        # (the usual case: one kind per column)
            return [tuple(per_column)] * len(self)
        return list(zip(*[[k] * len(self) if isinstance(k, str) else k for k in per_column]))

    def describe_row(self, i: int) -> str:
        who = f"query {self.names[i]!r} (row {i})" if self.names else f"row {i}"
        return who + " with " + ", ".join(f":{p} = {v!r}" for p, v in self.values(i).items())


def bind_event_template(template: str | StreamExpr, params, *, names: str | Sequence[str] | None = None
                        ) -> BoundTemplate:
    """Substitute each row of ``params`` into ``template`` (CEL/algebra text with ``:name`` parameters,
    parsed once, or a template AST): a ``BoundTemplate`` -- the queries, in row order (each built when
    first read; every value is checked here).  ``names``: the query names, as a sequence or as the name of
    a column of ``params`` (which is then no parameter)."""
    text = None
    if isinstance(template, str):
        from sparksub.grammar.events import parse_template
        text, template = template, parse_template(template)
    elif not isinstance(template, StreamExpr):
        raise AnalysisError(f"an event-query template is CEL / algebra text or an event_ast expression, got "
                            f"{type(template).__name__}")
    wanted = template_parameters(template)
    if not wanted:
        raise AnalysisError("the template has no :name parameter (register a single query instead)")
    columns = _columns(params)
    name_list = None
    if isinstance(names, str):
        if names not in columns:
            raise AnalysisError(f"names={names!r}: no such column in the parameter table "
                                f"(columns: {', '.join(columns) or 'none'})")
        name_list = columns.pop(names)
    elif names is not None:
        name_list = list(names.to_pylist() if hasattr(names, "to_pylist") else names)
    missing = [p for p in wanted if p not in columns]
    if missing:
        raise AnalysisError(f"template parameter{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(':' + p for p in missing)} ha{'ve' if len(missing) > 1 else 's'} no "
                            f"column in the parameter table (columns: {', '.join(columns) or 'none'})")
    extra = [c for c in columns if c not in wanted]
    if extra:
        raise AnalysisError(f"column{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} of the parameter "
                            f"table {'are' if len(extra) > 1 else 'is'} not a parameter of the template "
                            f"(parameters: {', '.join(':' + p for p in wanted)})")
    lengths = {c: len(v) for c, v in columns.items()}
    n = len(columns[wanted[0]])
    if len(set(lengths.values())) > 1 or (name_list is not None and len(name_list) != n):
        if name_list is not None:
            lengths["(names)"] = len(name_list)
        raise AnalysisError(f"the parameter table's columns have different lengths: {lengths}")
    negated = {n_.operand.name for n_ in template.walk() if isinstance(n_, Neg) and isinstance(n_.operand, Param)}
    durs = {n_.value.name for n_ in template.walk() if isinstance(n_, Dur) and isinstance(n_.value, Param)}
    cols = {p: _check_values(p, columns[p], p in negated, p in durs) for p in wanted}
    if name_list is not None:
        seen: dict[str, int] = {}
        for i, q in enumerate(name_list):
            if not isinstance(q, str) or not q:
                raise AnalysisError(f"row {i}: the query name is {q!r}; event query names are non-empty strings")
            j = seen.setdefault(q, i)
            if j != i:
                raise AnalysisError(f"row {i}: query name {q!r} is also the name of row {j}")
    build = _plan(template)
    return BoundTemplate(template, text, cols, name_list, n, build)


# ---------------------------------------------------------------------------------------------------
# Registration into a family executor
# ---------------------------------------------------------------------------------------------------

def _sentinels(bound: BoundTemplate, kinds: tuple[str, ...]) -> dict[str, Any] | None:
    """A unique placeholder value per parameter, of its kind (None: a boolean, which no slot takes)."""
    taken = {n.value for n in bound.template.walk() if isinstance(n, (Const, Dur)) and not isinstance(n.value, Param)}
    out = {}
    for k, (p, kind) in enumerate(zip(bound.parameters, kinds)):
        if kind == "bool":
            return None
        v = f"\x00:{p}:{k}\x00" if kind == "str" else 1.2345678901234e-300 * (k + 1)
        if v in taken:
            return None
        out[p] = v
    return out


class _LazyQuery:
    """A bulk-registered query's resolved AST, built on first use from row ``i`` of ``bound``
    (registration stays cheap)."""

    __slots__ = ("build", "bound", "i")

    def __init__(self, build, bound: BoundTemplate, i: int):
        self.build, self.bound, self.i = build, bound, i

    def __call__(self):
        return self.build(self.bound.values(self.i))


def register_bound(engine, bound: BoundTemplate, *, schemas=None) -> list[str]:
    """Register the queries of ``bound`` (named) into ``engine`` (a ``FamilyEngine``): the rows whose values
    have the same kinds form one family, analysed once -- the template with a placeholder per parameter is
    type-checked and resolved (``event_analysis``) and templated (``families.template_of``), the first
    row registered with every check, and each other row becomes a row of the family's parameter table
    directly (a placeholder in a slot -> that row's value).  Where a parameter does not land in a slot
    (e.g. inside a function call) the rows are registered one by one.  All or nothing: an error
    unregisters what this call registered and names the row."""
    from sparksub.operators.events.families import _LazyCompiled, template_of
    from sparksub.operators.events.nfa import resolve_query
    names = bound.names
    if names is None:
        raise AnalysisError("bulk registration needs the query names (bind_event_template(..., names=...))")
    for i, q in enumerate(names):
        if q in engine.queries:
            raise AnalysisError(f"row {i}: event query {q!r} is already registered")
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(bound.kinds()):
        groups.setdefault(k, []).append(i)
    done: list[str] = []
    i = None
    try:
        for kinds, rows in groups.items():
            i = rows[0]
            fast = _family_rows(engine, bound, kinds, schemas, template_of, resolve_query)
            engine.register(names[i], bound[i], schemas=schemas)
            done.append(names[i])
            m = engine._member.get(names[i])
            if fast is None or m is None or (m[0].template, tuple(m[0].kinds)) != fast[0]:
                for i in rows[1:]:             # one by one
                    engine.register(names[i], bound[i], schemas=schemas)
                    done.append(names[i])
                continue
            fam = m[0]
            _, slots, build = fast
            cols = bound.columns
            rest = rows[1:]
            values = []
            for p, sign, v in slots:           # the family's parameter columns, extended at once
                if p is None:
                    values.append([v] * len(rest))
                else:
                    c = cols[p]
                    values.append([c[i] for i in rest] if sign > 0 else [-c[i] for i in rest])
            new_names = [names[i] for i in rest]
            first = fam.add_many(new_names, values)
            member, queries = engine._member, engine.queries
            for k, (q, i) in enumerate(zip(new_names, rest)):
                member[q] = (fam, first + k)
                lazy = queries[q] = _LazyCompiled(q, None, engine)
                lazy.query = _LazyQuery(build, bound, i)
            done.extend(new_names)
            joined = getattr(engine, "_joined", None)
            if joined is not None:
                joined(names[rows[-1]])
    except AnalysisError as err:
        for q in reversed(done):
            engine.unregister(q)
        raise AnalysisError(f"{bound.describe_row(i)}: {err}") from None
    return list(names)


class _Probe:
    """The template of one kind signature with a unique placeholder per parameter, analysed once
    (``analyse(name, query) -> query``: the registration type check and Cayuga's name resolution): the
    analysed probe, placeholder value -> (parameter, sign), and ``build(values)``: the analysed query of a
    row (its values put where the placeholders are)."""

    def __init__(self, bound: BoundTemplate, kinds, analyse: Callable):
        self.ok = False
        sentinels = _sentinels(bound, kinds)
        if sentinels is None:
            return
        try:
            self.analysed = analyse("__bulk_probe__", bound.build(sentinels))
        except AnalysisError:
            return                              # the real rows report it, one by one
        back = {}
        for p, v in sentinels.items():
            back[v] = (p, 1)
            if not isinstance(v, str):
                back[-v] = (p, -1)
        found = {back[n.value][0] for n in self.analysed.walk() if isinstance(n, (Const, Dur))
                 and not isinstance(n.value, (bool, Param)) and n.value in back}
        if found != set(bound.parameters):      # a placeholder lost or folded by the analysis
            return
        self.back, self.ok = back, True

        def leaf(node):
            if isinstance(node, Const) and not isinstance(node.value, bool) and node.value in back:
                p, sign = back[node.value]
                pos = node.pos
                return lambda v: _new(Const, value=sign * v[p], pos=pos)
            if isinstance(node, Dur) and node.value in back:
                p, _ = back[node.value]
                op, unit, pos = node.op, node.unit, node.pos
                return lambda v: _new(Dur, op=op, value=v[p], unit=unit, pos=pos)
            return None
        self.build = _plan(self.analysed, leaf)

    def template(self) -> StreamExpr:
        """The analysed probe with each placeholder back as its parameter (``:p``, ``-:p``, ``DUR op :p``):
        the *analysed template*, which ``bind_event_template`` turns into each row's analysed query (what
        ``build`` gives) -- a form that pickles, unlike ``build``."""
        back = self.back

        def leaf(node):
            if isinstance(node, Const) and not isinstance(node.value, bool) and node.value in back:
                p, sign = back[node.value]
                param = _new(Param, name=p, pos=node.pos)
                if sign > 0:
                    return lambda v: param
                return lambda v, pos=node.pos: _new(Neg, operand=param, pos=pos)
            if isinstance(node, Dur) and node.value in back:
                p, _ = back[node.value]
                op, unit, pos = node.op, node.unit, node.pos
                return lambda v: _new(Dur, op=op, value=_new(Param, name=p, pos=pos), unit=unit, pos=pos)
            return None
        return _plan(self.analysed, leaf)({})


def analysed_parts(bound: BoundTemplate, analyse: Callable[[str, StreamExpr], StreamExpr]) -> list[tuple]:
    """The rows of ``bound`` by kind signature, each signature's template analysed once (a placeholder
    per parameter, ``analyse(name, query) -> query`` as for :func:`analysed_queries`): a list of ``(rows,
    analysed template or None, build or None)`` in order of first row.  ``build(values)`` is a row's
    analysed query (its values where the placeholders are, ~30 µs); the analysed template is the same with
    ``Param`` nodes there (:meth:`_Probe.template`: it pickles, and ``bind_event_template`` binds it).  None:
    these kinds take no placeholder (a boolean, a parameter the analysis folds) -- analyse those rows one
    by one.  The rows themselves are not analysed here (the caller checks each signature's first row
    fully); an ``AnalysisError`` of the probe is swallowed (that first row reports it)."""
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(bound.kinds()):
        groups.setdefault(k, []).append(i)
    out = []
    for kinds, rows in groups.items():
        probe = _Probe(bound, kinds, analyse)
        out.append((rows, probe.template(), probe.build) if probe.ok else (rows, None, None))
    return out


class TemplateRows:
    """Rows of one template as a replica base keeps them (``partitions.ReplicaBase``): the template (an
    analysed one, :func:`analysed_parts`), the parameter columns of those rows and their names -- what
    pickles in place of one AST per query; :meth:`bind` makes the ``BoundTemplate`` that
    ``BatchEngine.register_template`` registers."""

    __slots__ = ("template", "columns", "names")

    def __init__(self, template: StreamExpr, columns: dict[str, list], names: list[str]):
        self.template, self.columns, self.names = template, columns, names

    def __getstate__(self):
        return (self.template, self.columns, self.names)

    def __setstate__(self, state):
        self.template, self.columns, self.names = state

    def __len__(self) -> int:
        return len(self.names)

    def bind(self) -> BoundTemplate:
        return bind_event_template(self.template, self.columns, names=self.names)


def analysed_queries(bound: BoundTemplate, analyse: Callable[[str, StreamExpr], StreamExpr]) -> list:
    """Every row's query as ``analyse(name, query)`` returns it (for an engine: its registration check,
    ``event_analysis.analyse_query`` against the streams' schemas), analysing the template once per kind
    signature (a placeholder per parameter) and substituting each row's values into the result -- about
    30 µs a row instead of ~2 ms.  The first row of each signature is also analysed itself (its errors, with
    the row named, are the real ones); rows whose kinds take no placeholder (booleans) are analysed one by
    one.  ``analyse`` raises ``AnalysisError`` to refuse."""
    names = bound.names or [f"row {i}" for i in range(len(bound))]
    out: list = [None] * len(bound)
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(bound.kinds()):
        groups.setdefault(k, []).append(i)
    for kinds, rows in groups.items():
        i = rows[0]
        try:
            out[i] = analyse(names[i], bound[i])
            probe = _Probe(bound, kinds, analyse)
            rest = rows[1:]
            if probe.ok:
                for i in rest:
                    out[i] = probe.build(bound.values(i))
            else:
                for i in rest:
                    out[i] = analyse(names[i], bound[i])
        except AnalysisError as err:
            raise AnalysisError(f"{bound.describe_row(i)}: {err}") from None
    return out


def _family_rows(engine, bound: BoundTemplate, kinds, schemas, template_of, resolve_query):
    """((template, slot kinds), per slot (parameter or None, sign, constant), build of the resolved AST)
    for the rows of one kind signature, or None: register them one by one."""
    probe = _Probe(bound, kinds, lambda name, q: engine._analyse(name, q, schemas).query)
    if not probe.ok:
        return None
    try:
        resolved = resolve_query("__bulk_probe__", probe.analysed, publish_right_inputs=engine.publish_right_inputs)
    except AnalysisError:
        return None
    if len(resolved) != 1 or resolved[0].publishes:
        return None
    template, values, skinds = template_of(resolved[0].expr)
    back = probe.back
    slots = []
    for v in values:
        hit = back.get(v) if isinstance(v, (str, float)) and not isinstance(v, bool) else None
        slots.append((hit[0], hit[1], None) if hit else (None, 1, v))
    if {p for p, _, _ in slots if p} != set(bound.parameters):
        return None                             # a parameter outside the slots: families differ per value
    return (template, tuple(skinds)), slots, probe.build
