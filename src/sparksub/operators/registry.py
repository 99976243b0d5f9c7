"""Plan node type -> subscription family (``operators/contract.py``): the one lookup the engine makes instead
of branching on a class (issue 16 item 8).

:data:`FAMILIES` is also the order in which the families add their columns to an output schema
(``publish`` / ``stream``), so the columns come in the same order whatever groups a table has.  Event
queries have no plan node (they are not planned from SQL): their family is :data:`EVENTS`, apart.
"""
from __future__ import annotations

from sparksub.errors import UnsupportedSubscription
from sparksub.operators.agg.family import AGG
from sparksub.operators.box.family import BOX
from sparksub.operators.contract import SubscriptionFamily
from sparksub.operators.distinct.family import DISTINCT
from sparksub.operators.events.family import EVENTS
from sparksub.operators.filters.family import FILTER
from sparksub.operators.joins.family import JOINS
from sparksub.operators.range_min.family import RANGE_MIN
from sparksub.operators.stream_joins.family import STREAM_JOINS
from sparksub.operators.topk.family import TOPK

__all__ = ["FAMILIES", "FAMILY_OF_NODE", "EVENTS", "family_of", "in_order"]

#: every family of a planned subscription class, in output-column order
FAMILIES: tuple[SubscriptionFamily, ...] = (FILTER, RANGE_MIN, TOPK, DISTINCT, AGG, BOX, JOINS, STREAM_JOINS)
#: the registry: plan node type -> its family
FAMILY_OF_NODE: dict[type, SubscriptionFamily] = {t: f for f in FAMILIES for t in f.node_types}


def family_of(node) -> SubscriptionFamily:
    """The family serving the plan node ``node`` (a ``planner.ir.*GroupScan``)."""
    try:
        return FAMILY_OF_NODE[type(node)]
    except KeyError:
        raise UnsupportedSubscription(f"no subscription family serves the plan node {type(node).__name__}") from None


def in_order(items, node_of=lambda item: item):
    """``items`` (each with a plan node: ``node_of(item)``) grouped by family, families in :data:`FAMILIES`
    order: ``[(family, [item, ...]), ...]``, the families without items left out."""
    by_family: dict = {}
    for item in items:
        by_family.setdefault(family_of(node_of(item)).name, []).append(item)
    return [(f, by_family[f.name]) for f in FAMILIES if f.name in by_family]
