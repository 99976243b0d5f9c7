"""FILTER subscriptions: conjunctions of ``attr op const`` predicates over events (seed 001).

Fabret et al. (SIGMOD 2001) match events in two phases (001 §2.2):

* :mod:`.predicates` -- phase 1: :class:`PredicateIndex` interns distinct predicates and
  evaluates them all for a batch of events with one index per attribute, yielding the
  predicate bit vector (:class:`Satisfied`).
* :mod:`.le_subscribe` -- the clustered two-phase engine ("Le Subscribe"): access predicates,
  subscription clusters by size and equality conjunctions, multi-attribute hashing (001 §2-4).
* Baselines the paper compares with (001 §5, §6): :mod:`.counting` (:class:`CountingMatcher`,
  per-subscription hit counters) and :mod:`.propagation` (:class:`PropagationMatcher`, single
  equality access predicates, no multi-attribute tables).
* :mod:`.clustering` -- the cost model and the greedy static clustering (001 §3).

Every matcher has the same interface: ``add(slots, conjunctions)``, ``remove(slots)``,
``match(events) -> (event_idx, slot)``, ``stats()``.
"""
from sparksub.operators.filters.counting import CountingMatcher
from sparksub.operators.filters.le_subscribe import LeSubscribe
from sparksub.operators.filters.predicates import OPS, Pred, PredicateIndex, Satisfied
from sparksub.operators.filters.propagation import PropagationMatcher

__all__ = ["OPS", "CountingMatcher", "LeSubscribe", "Pred", "PredicateIndex", "PropagationMatcher", "Satisfied"]
