"""The variants of the reformulated form (issue 19 part 3): which of 000's interfaces a range-min group
speaks and which of 002's Paint algorithms a top-k group runs, chosen per ``publish`` beside
``mode='reformulated'``.

Range-min / range-max groups (000 §2; ``range_min/``):

* ``'S-CN'`` (the default): ⟨NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R⟩ messages for a content-based
  network (000 §2.3.1);
* ``'S-MN'``: one multicast message per distinct change of an update, listing the subscriptions it goes to
  (000 §2.1.2; column ``targets``);
* ``'CN+'``: the raw update, which enters the network at its event point; the network cuts its forwarding
  off with the subscribers' own state and the table it keeps along its diagonal (000 §2.2.2; column
  ``item_key``).

(S-UN is ``mode='unicast'``; CN, the relaxation, and CN+'s delivery counts are the pure operators' and the
benchmark's, ``bench/range_min.py``.)

Top-k groups (002; ``topk/``):

* ``'Paint-Batch'`` (the default): Paint-Batch over Paint-Dense, once per publish batch (002 §IV-A);
* ``'Paint-Batch-Sparse'``: Paint-Batch over Paint-Sparse;
* ``'Paint-Dense'`` / ``'Paint-Sparse'``: per update (002 §III-A / §III-B), each update's messages at its seq;
* ``'Paint-Dense(ε)'`` / ``'Paint-Sparse(ε)'`` with ``0 < ε <= 1``: the approximate algorithms per update
  (002 §IV-B, Theorem 4; Paint-Batch's regions are exact, so ε has no batch form).

A variant travels inside the mode: :func:`with_variant` turns ``'reformulated'`` into a :class:`Mode`, a
``str`` equal to (and hashing as) ``'reformulated'``, so whatever compares modes -- the engine, the runtime,
the families without variants -- sees the plain mode, while the two families read theirs with
:func:`variant_of`.  It pickles (Spark ships it to the tasks inside the operator's closure).  Pure.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence

from sparksub.errors import InvalidArgument

__all__ = ["Mode", "RANGE_MIN_VARIANTS", "TOPK_VARIANTS", "with_variant", "variant_of", "parse_variant",
           "paint_of"]

#: range-min's interfaces (000 §2) as a reformulated variant names them, the default first
RANGE_MIN_VARIANTS = ("S-CN", "S-MN", "CN+")
#: top-k's Paint algorithms (002), the default first; ``(ε)`` takes a number in (0, 1]
TOPK_VARIANTS = ("Paint-Batch", "Paint-Batch-Sparse", "Paint-Dense", "Paint-Sparse", "Paint-Dense(ε)",
                 "Paint-Sparse(ε)")

_PAINT = re.compile(r"PAINT-(DENSE|SPARSE)(?:\((.*)\))?")
_EXPECTED = ("expected one of " + ", ".join(repr(v) for v in RANGE_MIN_VARIANTS) + " (RANGE_MIN / RANGE_MAX) "
             "or " + ", ".join(repr(v) for v in TOPK_VARIANTS) + " with 0 < ε <= 1 (RANGE_TOPK)")


class Mode(str):
    """``'reformulated'`` naming a variant per family (``variants``: family name -> canonical variant).

    >>> m = Mode("reformulated", {"topk": "Paint-Sparse"})
    >>> m == "reformulated", m in ("unicast", "reformulated"), {"reformulated": 1}[m], variant_of(m, "topk")
    (True, True, 1, 'Paint-Sparse')
    """

    def __new__(cls, value: str, variants=()):
        self = super().__new__(cls, value)
        self.variants = dict(variants)
        return self

    def __reduce__(self):
        return Mode, (str(self), tuple(self.variants.items()))

    def __repr__(self) -> str:
        return f"Mode({str(self)!r}, {self.variants!r})"


def parse_variant(name) -> tuple[str, str]:
    """``(family, canonical name)`` of a variant, case and ``_``/space for ``-`` forgiven.

    >>> parse_variant("s_mn"), parse_variant("cn+"), parse_variant("paint-sparse(0.25)")
    (('range_min', 'S-MN'), ('range_min', 'CN+'), ('topk', 'Paint-Sparse(0.25)'))
    """
    if not isinstance(name, str):
        raise InvalidArgument(f"a variant is a string, got {type(name).__name__}: {name!r:.60}")
    norm = re.sub(r"[\s_]+", "-", name.strip()).upper()
    for v in RANGE_MIN_VARIANTS:
        if norm == v:
            return "range_min", v
    if norm in ("PAINT-BATCH", "PAINT-BATCH-DENSE"):
        return "topk", "Paint-Batch"
    if norm == "PAINT-BATCH-SPARSE":
        return "topk", "Paint-Batch-Sparse"
    m = _PAINT.fullmatch(norm)
    if m:
        base = f"Paint-{m.group(1).capitalize()}"
        if m.group(2) is None:
            return "topk", base
        try:
            eps = float(m.group(2).removeprefix("Ε=").removeprefix("EPSILON="))
        except ValueError:
            eps = math.nan
        if not 0 < eps <= 1:   # NaN fails too
            raise ValueError(f"variant {name!r}: ε must be a number in (0, 1] (002 §IV-B), got {m.group(2)!r}")
        return "topk", f"{base}({eps:g})"
    raise ValueError(f"unknown variant {name!r}; {_EXPECTED}")


def with_variant(mode: str, variant) -> str:
    """``mode`` naming ``variant`` (a name, or a sequence of names, one per family): a :class:`Mode`; ``mode``
    itself when ``variant`` is None.  A variant needs ``mode='reformulated'`` (``ValueError`` otherwise, and
    for an unknown name or two names for one family) -- checked before anything changes."""
    if variant is None:
        return mode
    if mode != "reformulated":
        raise ValueError(f"variant={variant!r} chooses how the reformulated form is built: it needs "
                         f"mode='reformulated', not mode={mode!r}")
    names = [variant] if isinstance(variant, str) else variant
    if not isinstance(names, Sequence) or not names:
        raise InvalidArgument(f"variant takes a name or a list of names, got {variant!r:.60}")
    chosen: dict[str, str] = {}
    for name in names:
        family, canonical = parse_variant(name)
        if family in chosen and chosen[family] != canonical:
            raise ValueError(f"variant: {chosen[family]!r} and {canonical!r} both choose for "
                             f"{'RANGE_MIN / RANGE_MAX' if family == 'range_min' else 'RANGE_TOPK'} groups")
        chosen[family] = canonical
    return Mode(str(mode), chosen)


def variant_of(mode: str, family: str) -> str | None:
    """The canonical variant ``mode`` names for ``family`` (``'range_min'``, ``'topk'``), None for its default."""
    return getattr(mode, "variants", {}).get(family)


def paint_of(variant: str | None) -> tuple[str, float | None, bool]:
    """A top-k variant as ``TopkCore``'s ``(mode, epsilon)`` and whether it runs Paint-Batch.

    >>> paint_of(None), paint_of("Paint-Sparse(0.5)"), paint_of("Paint-Batch-Sparse")
    (('dense', None, True), ('sparse', 0.5, False), ('sparse', None, True))
    """
    if variant is None or variant == "Paint-Batch":
        return "dense", None, True
    if variant == "Paint-Batch-Sparse":
        return "sparse", None, True
    m = re.fullmatch(r"Paint-(Dense|Sparse)(?:\((.*)\))?", variant)
    if m is None:
        raise ValueError(f"not a top-k variant: {variant!r}")
    return m.group(1).lower(), (float(m.group(2)) if m.group(2) else None), False
