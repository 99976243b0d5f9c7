"""The *propagation* matcher of 001 §6: clustering with single access predicates only.

Paper ``001`` = Fabret et al., SIGMOD 2001.  §6 compares three versions of the clustered
two-phase algorithm of §2: "The simple propagation algorithm uses only single equality
predicates as access predicates", while the static and dynamic algorithms also build
multi-attribute hash tables keyed by conjunctions of equality predicates (§3, §4).  The data
structures are otherwise the same (phase-1 predicate bit vector, clusters keyed by access
predicate and size, subscriptions stored column-wise -- §2.2, Figure 1).

So propagation is a **configuration** of :class:`~.le_subscribe.LeSubscribe`:

* ``dynamic=False`` -- the §4 maintenance algorithm never runs, so no table is ever created;
* ``max_schema=1`` -- the schema enumeration only knows single attributes, so every
  subscription with an equality predicate is placed in the cluster of its most selective
  equality predicate (the "natural clustering" of §3.2: ``pid -> clusters``, which comes for
  free with the phase-1 result).  Subscriptions without equalities use their most selective
  predicate of any operator, and empty conjunctions sit in the always-checked cluster, as in
  :class:`LeSubscribe`;
* :meth:`recluster_static` and :meth:`maintain` are no-ops, so no multi-attribute hash table
  can be built by a caller either.

Matching (``match``), insertion (``add``), deletion (``remove``), ``stats`` and ``explain``
are inherited unchanged: a subscription is reported for an event iff the event satisfies its
access predicate and every remaining predicate.  The vectorised matcher has no analogue of
the paper's ``propagation`` vs ``propagation-wp`` (prefetch) split: numpy's gathers are what
they are.
"""
from __future__ import annotations

from .clustering import CostParams
from .le_subscribe import LeSubscribe
from .predicates import PredicateIndex

__all__ = ["PropagationMatcher"]


class PropagationMatcher(LeSubscribe):
    """Clustered two-phase matching with single access predicates only (001 §6 "propagation").

    Same API as :class:`LeSubscribe`: ``add(slots, conjunctions)``, ``remove(slots)``,
    ``match(events) -> (event_idx, slot)`` sorted by (event, slot), ``stats()``, ``explain()``.
    Never builds multi-attribute hash tables (``stats()["tables"] == 0`` always).
    """

    def __init__(self, params: CostParams = CostParams(), *, chunk_bytes: int = 16 << 20,
                 stats_halflife: float = 200_000.0,
                 predicate_index: PredicateIndex | None = None):
        super().__init__(params, dynamic=False, max_schema=1, chunk_bytes=chunk_bytes,
                         stats_halflife=stats_halflife, predicate_index=predicate_index)

    def recluster_static(self, space_bound: float = float("inf"), sample=None, seed: int = 0) -> dict:
        """No-op: propagation has no multi-attribute hash tables to choose (001 §6)."""
        return {"schemas": [], "steps": []}

    def maintain(self) -> dict:
        """No-op: propagation does not adapt its clustering (001 §6)."""
        return {"redistributed": 0, "created": [], "dropped": []}

    def explain(self) -> dict:
        out = super().explain()
        out["algorithm"] = "propagation (single access predicates only, 001 §6)"
        return out
