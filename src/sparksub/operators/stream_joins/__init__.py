"""Stream-stream joins with a bounded state (003 ch. 3, "Caching and Joining Data Streams"): pure core.

Both inputs are streams and both sides are kept in state; when the state of a side is over
``max_state_rows`` a replacement policy decides which rows to drop, and the dropped rows' future results are
lost.  The error is MAX-subset: the number of missing result tuples (003 §3.1).

* :mod:`.operator` -- :class:`BoundedStreamJoin`, the equality / band join driven per micro-batch
  (``apply`` on Arrow batches, ``apply_keys`` on numpy keys, ``snapshot`` / ``restore``, ``stats`` /
  ``explain`` with produced vs missed results);
* :mod:`.policies` -- the :class:`ReplacementPolicy` protocol, HEEB (003 §3.4.3), PROB / LIFE [DGR03],
  LRU, LFU, RAND, FIFO, WATERMARK, FlowExpect (003 §3.3), the replay of OPT-offline, and the ECB dominance
  test (003 §3.4.2, Corollary 2);
* :mod:`.models` -- the streams' stochastic models the look-ahead policies use (003 §3.5: stationary,
  offline, linear trend + bounded noise, random walk, Markov / AR(1), and the reference stream of the
  caching reduction);
* :mod:`.flow` -- min-cost flow: OPT-offline [DGR03] and FlowExpect;
* :mod:`.reduction` -- the caching problem as a join (003 §3.2.1, Theorem 7);
* :mod:`.options` -- the SQL / engine options (``max_state_rows``, ``state_policy``, ...).
* :mod:`.group` / :mod:`.family` -- the engine's STREAM_JOIN / STREAM_BAND_JOIN groups over the core (issue 19
  item 2: two event streams joined from SQL, ``WITH (max_state_rows = ..., state_policy = ...)``).

Never imports pyspark, the engine or the runtime (``tests/test_layering.py``).  ``docs/bounded_joins.md``
explains the model and the policies; ``bench/bounded_joins.py`` reproduces the chapter's experiments.
"""
from sparksub.operators.stream_joins.flow import OfflinePlan, flow_expect, opt_offline
from sparksub.operators.stream_joins.models import (
    MarkovModel,
    RandomWalkModel,
    ReferenceModel,
    ScheduleModel,
    StationaryModel,
    StreamModel,
    TrendModel,
)
from sparksub.operators.stream_joins.operator import BoundedStreamJoin
from sparksub.operators.stream_joins.options import (
    STATE_OPTIONS,
    from_options,
    parse_state_options,
)
from sparksub.operators.stream_joins.policies import (
    FIFO,
    HEEB,
    LFU,
    LIFE,
    LRU,
    POLICIES,
    PROB,
    RAND,
    WATERMARK,
    Candidates,
    FlowExpect,
    Planned,
    ReplacementPolicy,
)
from sparksub.operators.stream_joins.reduction import caching_as_join

__all__ = [
    "FIFO",
    "HEEB",
    "LFU",
    "LIFE",
    "LRU",
    "POLICIES",
    "PROB",
    "RAND",
    "STATE_OPTIONS",
    "WATERMARK",
    "BoundedStreamJoin",
    "Candidates",
    "FlowExpect",
    "MarkovModel",
    "OfflinePlan",
    "Planned",
    "RandomWalkModel",
    "ReferenceModel",
    "ReplacementPolicy",
    "ScheduleModel",
    "StationaryModel",
    "StreamModel",
    "TrendModel",
    "caching_as_join",
    "flow_expect",
    "from_options",
    "opt_offline",
    "parse_state_options",
]
