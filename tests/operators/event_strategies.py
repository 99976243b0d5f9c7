"""Hypothesis strategies for Cayuga event queries (the AST of sparksub.grammar.event_ast) and event lists.

Shared by the grammar round-trip tests and the interpreter tests, and meant for the NFA-vs-oracle tests
of the rest of issue 6.  Names avoid every keyword of both grammars.
"""
from __future__ import annotations

from hypothesis import strategies as st

from sparksub.grammar.event_ast import (
    ARITH_OPS, COMPARE_OPS, DUR_UNITS, Aggregate, Attr, BinOp, Call, Compare, Const, Dur, Item,
    Iteration, Not, Project, Publish, Rename, Scope, Select, Sequence, Stream, Union, and_, neg, or_,
)

ATTRIBUTE_NAMES = ["Name", "Price", "Volume", "a", "b_1", "x2", "cnt", "Price_1"]
STREAM_NAMES = ["Stock", "posts", "S", "T5"]
FUNCTION_NAMES = ["contains", "lower", "f"]

names = st.sampled_from(ATTRIBUTE_NAMES)
stream_names = st.sampled_from(STREAM_NAMES)

#: Which attribute scopes each position may read (DESIGN §4; checked by the AST nodes).  Inside the
#: braces a plain name is CEL's unqualified name (left input first, resolved against schemas), which the
#: algebra cannot spell: the scopes with it are for CEL-only round trips.
PLAIN_ONLY = (Scope.PLAIN,)
NEXT_SCOPES = (Scope.LEFT, Scope.RIGHT)
FOLD_SCOPES = (Scope.LEFT, Scope.RIGHT, Scope.LAST)
NEXT_SCOPES_CEL = (Scope.PLAIN,) + NEXT_SCOPES
FOLD_SCOPES_CEL = tuple(Scope)

constants = st.one_of(
    st.integers(-10**6, 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(alphabet="ab '%_\n", max_size=5),
    st.booleans(),
).map(Const)


def expressions(scopes=FOLD_SCOPES, max_leaves: int = 8):
    """Any expression tree (not type-checked: the grammar does not type-check either)."""
    leaves = st.one_of(
        constants,
        st.builds(Attr, names, st.sampled_from(scopes)),
        st.builds(Dur, st.sampled_from([o for o in COMPARE_OPS if o != "LIKE"]),
                  st.one_of(st.integers(0, 1000), st.floats(0, 1e6)),
                  st.one_of(st.none(), st.sampled_from(DUR_UNITS))),
    )

    def extend(children):
        return st.one_of(
            st.builds(neg, children),
            st.builds(BinOp, st.sampled_from(ARITH_OPS), children, children),
            st.builds(Compare, st.sampled_from(COMPARE_OPS), children, children),
            st.builds(lambda xs: and_(*xs), st.lists(children, min_size=2, max_size=3)),
            st.builds(lambda xs: or_(*xs), st.lists(children, min_size=2, max_size=3)),
            st.builds(Not, children),
            st.builds(Call, st.sampled_from(FUNCTION_NAMES), st.lists(children, max_size=3).map(tuple)),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def item_lists(scopes, min_size: int = 1):
    """Items with distinct names."""
    return st.lists(st.tuples(expressions(scopes, 4), names), min_size=min_size, max_size=3,
                    unique_by=lambda t: t[1]).map(lambda ts: tuple(Item(e, n) for e, n in ts))


def stream_expressions(cel_only: bool = False, max_leaves: int = 5, plain_in_braces: bool = False):
    """Random stream expressions; ``cel_only`` leaves out what CEL cannot spell (RENAME, UNION);
    ``plain_in_braces`` (CEL only) lets NEXT / FOLD braces hold unqualified names."""
    optional = lambda scopes: st.one_of(st.none(), expressions(scopes, 5))  # noqa: E731
    next_scopes, fold_scopes = (NEXT_SCOPES_CEL, FOLD_SCOPES_CEL) if plain_in_braces else (NEXT_SCOPES, FOLD_SCOPES)

    def extend(children):
        options = [
            st.builds(Select, children, expressions(PLAIN_ONLY, 5)),
            st.builds(Project, children, item_lists(PLAIN_ONLY)),
            st.builds(Aggregate, children, item_lists(PLAIN_ONLY)),
            st.builds(Sequence, children, children, optional(next_scopes)),
            st.builds(Iteration, children, children, optional(fold_scopes), optional(fold_scopes),
                      item_lists(fold_scopes, min_size=0)),
            st.builds(Publish, children, stream_names),
        ]
        if not cel_only:
            options += [
                st.builds(Union, children, children),
                st.builds(Rename, children, st.lists(st.tuples(names, names), min_size=1, max_size=2,
                                                     unique_by=(lambda t: t[0], lambda t: t[1]))),
            ]
        return st.one_of(*options)

    return st.recursive(st.builds(Stream, stream_names), extend, max_leaves=max_leaves)


@st.composite
def stock_events(draw, max_size: int = 9, names=("IBM", "MSFT"), prices=(1, 6), intervals: bool = True):
    """A small stock stream in end-time order, with simultaneous and (optionally) interval events."""
    n = draw(st.integers(0, max_size))
    t1 = 0
    events = []
    for _ in range(n):
        t1 += draw(st.integers(0, 2))                      # 0: simultaneous with the previous event
        d = draw(st.integers(0, 2)) if intervals else 0
        events.append({"Name": draw(st.sampled_from(names)),
                       "Price": draw(st.integers(*prices)),
                       "t0": max(0, t1 - d), "t1": t1})
    return events
