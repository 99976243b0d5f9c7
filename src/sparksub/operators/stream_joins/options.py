"""How the engine and SQL set a bounded stream join up: the subscription options (``WITH (...)``) and the
engine's defaults, parsed and checked here (pure), turned into a
:class:`~sparksub.operators.stream_joins.operator.BoundedStreamJoin` by :func:`from_options`.

=====================  ====================================================================  =================
option                 meaning                                                               default
=====================  ====================================================================  =================
``max_state_rows``     rows of state per side (an int; ``'left/right'`` for two bounds)      unbounded
``shared_state_rows``  one bound over both sides (003's single cache)                        --
``state_policy``       HEEB, PROB, LIFE, LRU, LFU, RAND, FIFO, WATERMARK, FLOWEXPECT          HEEB
``state_window``       sliding window in steps (003 §3.6)                                    none
``state_lifetime``     HEEB's mean lifetime 1 / (1 − e^{−α}) in steps                        the bound
``state_model``        the streams' model: ``stationary``, ``trend`` (learnt linear trend +   stationary
                       noise, 003 §3.5.3-4) or ``walk`` (random walk, §3.5.5)
``state_dominance``    settle decisions by ECB dominance first (003 Corollary 2)             false
``state_unique_keys``  each key occurs once per stream (Definition 9)                        false
``state_audit``        count missed results (MAX-subset error) with a key log                true
``state_lookahead``    FlowExpect's look-ahead in steps                                      5
=====================  ====================================================================  =================

>>> parse_state_options({"max_state_rows": "1000", "state_policy": "lru"})["max_state_rows"]
1000
"""
from __future__ import annotations

from collections.abc import Mapping

from sparksub.errors import InvalidSubscription
from sparksub.operators.stream_joins.models import (
    RandomWalkModel,
    StationaryModel,
    TrendModel,
)
from sparksub.operators.stream_joins.operator import BoundedStreamJoin
from sparksub.operators.stream_joins.policies import (
    HEEB,
    POLICIES,
    FlowExpect,
    make_policy,
)

__all__ = ["MODELS", "STATE_OPTIONS", "from_options", "parse_state_options"]

STATE_OPTIONS = ("max_state_rows", "shared_state_rows", "state_policy", "state_window", "state_lifetime",
                 "state_model", "state_dominance", "state_unique_keys", "state_audit", "state_lookahead")
MODELS = ("stationary", "trend", "walk")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _int(name: str, v, *, allow_pair: bool = False):
    if allow_pair and isinstance(v, str) and "/" in v:
        return tuple(_int(name, x) for x in v.split("/", 1))
    if isinstance(v, (tuple, list)) and allow_pair and len(v) == 2:
        return tuple(_int(name, x) for x in v)
    try:
        n = int(str(v).strip()) if not isinstance(v, int) or isinstance(v, bool) else v
    except ValueError:
        raise InvalidSubscription(f"option {name}: expected a non-negative integer, got {v!r}") from None
    if isinstance(n, bool) or n < 0:
        raise InvalidSubscription(f"option {name}: expected a non-negative integer, got {v!r}")
    return n


def _bool(name: str, v) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise InvalidSubscription(f"option {name}: expected true or false, got {v!r}")


def parse_state_options(options: Mapping) -> dict:
    """The checked options (names lower-cased; unknown names, bad values and contradictions raise
    :class:`~sparksub.errors.InvalidSubscription`): a dict of the keys of :data:`STATE_OPTIONS` present."""
    out = {}
    for raw, v in options.items():
        name = str(raw).strip().lower()
        if name not in STATE_OPTIONS:
            raise InvalidSubscription(f"unknown stream-join option {raw!r}; expected one of {', '.join(STATE_OPTIONS)}")
        if name == "max_state_rows":
            out[name] = _int(name, v, allow_pair=True)
        elif name in ("shared_state_rows", "state_window", "state_lookahead"):
            out[name] = _int(name, v)
        elif name == "state_lifetime":
            try:
                out[name] = float(v)
            except (TypeError, ValueError):
                raise InvalidSubscription(f"option {name}: expected a number of steps, got {v!r}") from None
            if not out[name] >= 1.0:
                raise InvalidSubscription(f"option {name}: a mean lifetime is at least 1 step, got {v!r}")
        elif name == "state_policy":
            if str(v).upper() not in POLICIES:
                raise InvalidSubscription(f"option state_policy: unknown policy {v!r}; expected one of {', '.join(POLICIES)}")
            out[name] = str(v).upper()
        elif name == "state_model":
            if str(v).lower() not in MODELS:
                raise InvalidSubscription(f"option state_model: expected one of {', '.join(MODELS)}, got {v!r}")
            out[name] = str(v).lower()
        else:
            out[name] = _bool(name, v)
    if "max_state_rows" in out and "shared_state_rows" in out:
        raise InvalidSubscription("options max_state_rows (per side) and shared_state_rows (both sides) exclude each other")
    if out.get("state_policy") == "LIFE" and "state_window" not in out:
        raise InvalidSubscription("state_policy LIFE needs a state_window (its remaining lifetime)")
    return out


def _model(kind: str):
    if kind == "trend":
        return TrendModel(learn=True)
    if kind == "walk":
        return RandomWalkModel()
    return StationaryModel()


def from_options(options: Mapping, *, band=None, left_key: str = "key", right_key: str = "key",
                 time_column: str | None = None, defaults: Mapping | None = None) -> BoundedStreamJoin:
    """The operator for a subscription's options over the engine's ``defaults`` (same names)."""
    o = parse_state_options({**dict(defaults or {}), **dict(options)})
    name = o.get("state_policy", "HEEB")
    if name == "HEEB":
        policy = HEEB(lifetime=o.get("state_lifetime"))
    elif name == "FLOWEXPECT":
        policy = FlowExpect(lookahead=o.get("state_lookahead", 5))
    else:
        policy = make_policy(name)
    kind = o.get("state_model", "stationary")
    return BoundedStreamJoin(band=band, left_key=left_key, right_key=right_key, time_column=time_column,
                             max_state_rows=o.get("max_state_rows"), shared_state_rows=o.get("shared_state_rows"),
                             policy=policy, models=(_model(kind), _model(kind)), window=o.get("state_window"),
                             unique_keys=o.get("state_unique_keys", False), dominance=o.get("state_dominance", False),
                             audit=o.get("state_audit", True))
