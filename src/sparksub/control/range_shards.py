"""How many subscription shards a range group runs with (issue 16 item 4): the decision ``Engine.range_subscription_shards``
makes, shared by ``publish`` (RANGE_TOPK, RANGE_DISTINCT, RANGE_AGG in ``unicast``: stage 1 the group's rows, which
hold no subscription and emit the class's reformulated messages; stage 2 the subscriptions by a hash of their id,
each shard's subscribers a logged replica) and ``stream()`` (RANGE_MIN / RANGE_MAX in ``unicast``: the stream's
stateful stage the rows, the shards a second stage in the same query).

Why subscription shards and not X zones for these: the reformulated messages do not depend on the subscriptions
(000 §2.3.1, 002 §II-C), so the subscriber side -- each subscription's point in the subscription space and, for the
stateful classes, its current result -- splits by any partition of the subscriptions, with no second round; the
rows' side is one core.  (RANGE_MIN's publish splits its rows too, into DS-CN's X zones: ``control/zones.py``.)
"""
from __future__ import annotations

__all__ = ["RANGE_SHARD_SUBSCRIPTIONS", "range_shard_count"]

#: subscriptions of a range group from which it runs with its subscriptions in shards by default
#: (``Engine.range_subscription_shards = None``): below it one task holding them costs less than a second stage
RANGE_SHARD_SUBSCRIPTIONS = 200_000


def range_shard_count(setting, subscriptions: int, parallelism: int) -> int:
    """Subscription shards for a range group of ``subscriptions`` under the setting; 0: whole.

    >>> range_shard_count(None, 1_000, 2), range_shard_count(None, 200_000, 2), range_shard_count(4, 10, 2)
    (0, 2, 4)
    >>> range_shard_count(1, 10**6, 2), range_shard_count(0, 10**6, 2), range_shard_count(None, 10**6, 1)
    (0, 0, 0)
    """
    if setting is None:
        if subscriptions < RANGE_SHARD_SUBSCRIPTIONS:
            return 0
        setting = parallelism
    return int(setting) if int(setting) >= 2 else 0
