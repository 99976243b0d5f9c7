"""FILTER subscriptions: conjunctions of ``attr op const`` predicates over events (seed 001).

Fabret et al. (SIGMOD 2001) match events in two phases (001 §2.2):

* :mod:`.predicates` -- phase 1: :class:`PredicateIndex` interns distinct predicates and
  evaluates them all for a batch of events with one index per attribute, yielding the
  predicate bit vector (:class:`Satisfied`).
* :mod:`.le_subscribe` -- the clustered two-phase engine ("Le Subscribe"): access predicates,
  subscription clusters by size and equality conjunctions, multi-attribute hashing (001 §2-4).
* Baselines the paper compares with (001 §5, §6): :mod:`.counting` (:class:`CountingMatcher`,
  per-subscription hit counters) and propagation (single equality access predicates).
"""
from sparksub.operators.filters.counting import CountingMatcher
from sparksub.operators.filters.predicates import OPS, Pred, PredicateIndex, Satisfied

__all__ = ["OPS", "CountingMatcher", "Pred", "PredicateIndex", "Satisfied"]
