"""Buffered publishing under a response-time bound (issue 19 part 1; 003 ch. 2): with ``Engine.max_delay``
set, ``publish`` keeps a keyed table's updates buffered and the refresh scheduler (``scheduling/refresh.py``)
decides, at every publish, which tables' buffered updates to apply now -- all of a table's, or none (003 §2.3,
greedy) -- so that applying everything still buffered would take at most ``max_delay`` seconds, at the least
total cost.  A part of the Engine facade (``engine.py``).

Time steps are publish calls (the chapter's discrete times; a streaming job that publishes per micro-batch,
``foreachBatch``, makes them its micro-batches).  A *refresh* -- ``refresh()``, ``result()`` of a subscription
on a buffered table, ``close()`` -- applies everything buffered for the tables it needs (the chapter's
refresh at T, which the bound keeps within ``max_delay``).

The cost functions f_i are measured on this system, per table, as the engine runs: every apply of a table's
buffer is timed and ``f_i(k) = a_i·k + b_i`` fitted to the last ``COST_WINDOW`` (rows, seconds) pairs by
least squares, a and b kept >= 0 (003 §2.3.3's linear model: b the start-up cost of a Spark job, a the
per-row cost; Theorem 2 makes OPT^LGM optimal for it).  Until a table has been timed twice, its first
buffered publishes are applied at once to measure it.

Durable engines (``Engine(path=...)``) journal the buffer (``journal.py``, its issue-19 block): a batch joining it
is a side file and a ``refresh_buffer`` record written before the buffer takes it; an apply publishes under the
batch id ``refresh:<id of the run's last batch>``, so the commit of that publish also says which batches left the
buffer; each timed apply is a ``refresh_cost`` record.  A reopen -- after ``close()`` applied it, or after a kill
with rows still buffered -- restores ``pending()`` exactly (the rows, their modes, the measured costs).
``max_delay``, ``refresh_policy`` and ``refresh_costs`` are not journaled: they change *when* updates apply, not
what the results are.  Event streams (tables without a key) are never buffered: an event's interval is its arrival
order, which buffering would change.

Streams (``Engine.stream`` over a keyed table with ``max_delay`` set) decide per micro-batch with the same
scheduler, inside the stream (``scheduling/stream_gate.py``): the gate's cost is fixed when the stream starts --
``refresh_costs[table]`` (a, b), else the table's measured f_i --, its decisions are kept per micro-batch id in
the stream's directory (a replay decides the same), and ``refresh()`` asks the stream to apply everything at its
next micro-batch.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparksub.errors import InvalidArgument
from sparksub.operators.shared.schemas import publish_schema
from sparksub.operators.shared.variants import with_variant
from sparksub.runtime import frames as spark_frames
from sparksub.scheduling.refresh import POLICIES, Linear, RefreshScheduler
from sparksub.scheduling import stream_gate
from sparksub.control.inputs import to_arrow

__all__ = ["Refreshing", "MeasuredCost", "COST_WINDOW"]

#: the (rows, seconds) pairs a table's cost function is fitted to: the most recent ones
COST_WINDOW = 20


@dataclass
class MeasuredCost:
    """f(k) = a·k + b fitted to the timed applies of one table (003 §2.3.3; see the module docstring)."""

    samples: list = field(default_factory=list)   # [(rows, seconds)]
    a: float = 0.0
    b: float = 0.0

    def __call__(self, k: int) -> float:
        return 0.0 if k <= 0 else self.a * k + self.b

    @property
    def measured(self) -> bool:
        return len(self.samples) >= 2

    def observe(self, rows: int, seconds: float) -> None:
        self.samples = (self.samples + [(int(rows), float(seconds))])[-COST_WINDOW:]
        k = np.array([s[0] for s in self.samples], dtype=float)
        t = np.array([s[1] for s in self.samples], dtype=float)
        if len(self.samples) < 2 or np.ptp(k) == 0:
            self.a, self.b = 0.0, float(np.median(t))     # one size seen: all of it is start-up cost
            return
        a, b = np.polyfit(k, t, 1)
        if b < 0:                                          # keep the model monotone and subadditive
            a, b = float(np.dot(k, t) / np.dot(k, k)), 0.0
        if a < 0:
            a, b = 0.0, float(np.median(t))
        self.a, self.b = float(a), float(b)


class Refreshing:
    """The Engine's buffered publishing (a mixin of ``engine.Engine``: its methods use the engine's state)."""

    def _init_refreshing(self) -> None:
        #: seconds (None: every publish applies at once, the default): the response-time bound of 003 ch. 2
        self.max_delay: float | None = None
        #: the scheduler's policy: 'online' (003 §2.4.4, the default), 'naive' (§2.5) or 'immediate'
        self.refresh_policy = "online"
        #: table -> (a, b) seconds: f(k) = a·k + b given instead of measured (publish) -- and the cost a stream's
        #: refresh gate decides with when the engine has not measured the table yet (scheduling/stream_gate.py)
        self.refresh_costs: dict = {}
        self._buffered: dict[str, list] = {}            # table (lower) -> [(Arrow rows, mode, buffer id), ...]
        self._costs: dict[str, MeasuredCost] = {}       # table (lower) -> its measured f_i
        self._scheduler: RefreshScheduler | None = None
        self._applying = False                           # inside an apply of buffered rows: publish at once

    # ---- the public side ------------------------------------------------------------------------------------
    def pending(self) -> dict:
        """The updates buffered per table (``max_delay``), and the seconds applying all of them would take by the
        tables' measured costs (``'delay'``; the bound keeps it <= ``max_delay`` after every publish)."""
        with self._lock:
            counts = {t: sum(b[0].num_rows for b in batches) for t, batches in self._buffered.items() if batches}
            streams = {}
            for sid, live in self._live_streams.items():   # the streams' gates (issue 19 item 1)
                gate = getattr(live, "refresh_gate", None)
                got = stream_gate.gate_state(gate.directory) if gate is not None else None
                if got is not None:
                    streams[sid] = {"table": live.table, **{k: got[k] for k in ("batch", "buffered", "load")}}
            # (a table buffered with a given cost, reopened without it, counts by its measured fit, maybe none yet)
            return {"tables": counts, "delay": sum((self._cost_of(t) or self._costs.get(t) or MeasuredCost())(k)
                                                   for t, k in counts.items()),
                    "costs": {t: {"a": c.a, "b": c.b, "samples": len(c.samples)} for t, c in self._costs.items()},
                    "streams": streams}

    def refresh(self, tables=None):
        """Apply every buffered update of ``tables`` (names; None: all) now; returns their notifications (a Spark
        DataFrame, the columns of each mode's output merged by name).  A running stream over one of them (with
        ``max_delay`` set when it started) applies its buffered rows at its next micro-batch
        (``scheduling/stream_gate.py``): its notifications come out of the stream."""
        with self._lock:
            names = list(self._buffered) if tables is None else [self._table(t).definition.name.lower() for t in tables]
            for live in self._live_streams.values():
                gate = getattr(live, "refresh_gate", None)
                if gate is not None and (tables is None or live.table in names):
                    stream_gate.request_refresh(gate.directory)
            outs = [self._apply_buffered(t) for t in names if self._buffered.get(t)]
            if self._scheduler is not None and tables is None:
                self._scheduler.step({t: 0 for t in self._scheduler.names}, force=True)   # a new period
            return self._union(outs, "unicast")

    # ---- publish's side -------------------------------------------------------------------------------------
    def _buffering(self, table: str) -> bool:
        """Whether ``publish(table, ...)`` buffers (``max_delay`` set, a keyed table, not applying a buffer)."""
        if self.max_delay is None or self._applying:
            return False
        return self._table(table).definition.key is not None

    def _publish_buffered(self, table: str, updates, mode: str, variant, batch_id):
        """``publish`` with ``max_delay`` set: buffer, then apply what the scheduler picks (module docstring)."""
        self._check_refresh_settings()
        if batch_id is not None:
            raise InvalidArgument("publish(batch_id=...) applies a batch once, exactly when it is called; with "
                                  "Engine.max_delay set the engine decides when: set max_delay = None to use batch ids")
        mode = with_variant(mode, variant)
        with self._lock:
            state = self._table(table)
            rows = to_arrow(updates)
            self._validated(state, rows)   # a malformed batch raises here, before it is buffered (DESIGN §7)
            name = state.definition.name.lower()
            # journaled before the buffer takes it (a durable engine: journal.py's refresh_buffer record), so a
            # reopen after a kill restores it; its id names the publish that will apply it (_apply_buffered)
            buffer_id = uuid.uuid4().hex if self._journal.durable else None
            if buffer_id is not None:
                self._journal.refresh_buffered(name, rows, mode, buffer_id)
            self._buffered.setdefault(name, []).append((rows, mode, buffer_id))
            self._costs.setdefault(name, MeasuredCost())
            if self._cost_of(name) is None:   # not timed twice yet (nor given): apply now, to measure f_i
                return self._union([self._apply_buffered(name)], mode)
            scheduler = self._refresh_scheduler()
            counts = {t: sum(b[0].num_rows for b in self._buffered.get(t, [])) for t in scheduler.names}
            chosen = scheduler.step(counts)
            return self._union([self._apply_buffered(t) for t in scheduler.names if t in chosen and counts[t]], mode)

    def _refresh_for(self, tables) -> None:
        """Bring ``tables`` (lower-case names) up to date before a read (``result()``): the chapter's refresh."""
        for name in tables:
            if self._buffered.get(name):
                self._apply_buffered(name)

    # ---- helpers --------------------------------------------------------------------------------------------
    def _check_refresh_settings(self) -> None:
        d = self.max_delay
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not d >= 0:
            raise InvalidArgument(f"Engine.max_delay = {d!r}: a number of seconds >= 0, or None")
        costs = self.refresh_costs
        if not isinstance(costs, dict):
            raise InvalidArgument(f"Engine.refresh_costs = {costs!r}: a dict table -> (a, b) seconds")
        for t, ab in costs.items():
            ok = isinstance(ab, (tuple, list)) and len(ab) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 and x != float("inf") for x in ab)
            if not isinstance(t, str) or not ok:
                raise InvalidArgument(f"Engine.refresh_costs[{t!r}] = {ab!r}: expected (a, b), two finite numbers "
                                      f">= 0 (seconds per row, seconds per apply: f(k) = a·k + b, 003 §2.3.3)")
            self._table(t)   # an unknown table raises, naming it
        if self.refresh_policy not in ("online", "naive", "immediate"):
            raise InvalidArgument(f"Engine.refresh_policy = {self.refresh_policy!r}: one of 'online', 'naive', "
                                  f"'immediate' ('simulate' needs a known period: scheduling/refresh.py)")

    def _refresh_scheduler(self) -> RefreshScheduler:
        """One scheduler over every buffered table with a measured cost; a new one when the set, the bound or
        the policy changes (its period restarts)."""
        names = tuple(sorted(t for t in set(self._costs) | set(self._given_costs()) if self._cost_of(t) is not None))
        s = self._scheduler
        given = self._given_costs()
        if s is None or s.names != names or s.max_delay != self.max_delay or s.policy != self.refresh_policy \
                or getattr(s, "given", None) != given:
            assert self.refresh_policy in POLICIES
            self._scheduler = RefreshScheduler({t: self._cost_of(t) for t in names}, float(self.max_delay),
                                               self.refresh_policy)
            self._scheduler.given = given
        return self._scheduler

    def _restore_refreshing(self, buffered: dict, costs: dict) -> None:
        """A reopened durable engine's buffer and measured costs (``journal.py``, issue 19 block): ``buffered``
        table -> [(rows, mode, variants, buffer id)] in arrival order, ``costs`` table -> [(rows, seconds)]."""
        for name, samples in costs.items():
            cost = self._costs.setdefault(name, MeasuredCost())
            for rows, seconds in samples:
                cost.observe(rows, seconds)
        for name, batches in buffered.items():
            self._costs.setdefault(name, MeasuredCost())   # (as _publish_buffered left it: a buffered table has one)
            self._buffered[name] = [(rows, with_variant(mode, list(variants.values()) or None), bid)
                                    for rows, mode, variants, bid in batches]

    def _given_costs(self) -> dict:
        """``refresh_costs`` by lower-case table name, as Linear costs."""
        return {t.lower(): Linear(float(a), float(b)) for t, (a, b) in (self.refresh_costs or {}).items()}

    def _cost_of(self, name: str):
        """Table ``name``'s f_i: given (``refresh_costs``), else measured (timed twice), else None."""
        given = self._given_costs().get(name)
        if given is not None:
            return given
        c = self._costs.get(name)
        return c if c is not None and c.measured else None

    def _stream_gate(self, state, control):
        """The refresh gate of a stream over ``state``'s table (issue 19 item 1; ``scheduling/stream_gate.py``), or
        None: without ``max_delay``, on an event stream (never buffered: an event's interval is its arrival order),
        or with nothing to decide (``'immediate'``).  Its cost is fixed now: ``refresh_costs``, else the table's
        measured f_i (a copy: replays decide alike); neither raises, naming the table, before the stream exists."""
        if self.max_delay is None or state.definition.key is None:
            return None
        self._check_refresh_settings()
        if self.refresh_policy == "immediate":
            return None
        name = state.definition.name.lower()
        cost = self._cost_of(name)
        if cost is None:
            raise InvalidArgument(f"stream({state.definition.name!r}) with Engine.max_delay = {self.max_delay!r}: "
                                  f"the cost of applying rows of {state.definition.name!r} is not known yet; set "
                                  f"Engine.refresh_costs[{state.definition.name!r}] = (a, b) (seconds per row, per "
                                  f"apply) or publish to it twice with max_delay set (measured), or set max_delay = None")
        if isinstance(cost, MeasuredCost):
            cost = Linear(cost.a, cost.b)
        return stream_gate.StreamRefreshGate(str(control._path("refresh")), name, cost, float(self.max_delay),
                                             self.refresh_policy)

    def _apply_buffered(self, name: str):
        """Publish table ``name``'s buffer now, in order (consecutive batches of one mode as one call), timing it
        for the table's cost function; returns the notifications (a DataFrame) or None."""
        batches, self._buffered[name] = self._buffered.get(name, []), []
        outs = []
        self._applying = True
        try:
            i = 0
            while i < len(batches):
                j = i
                while j < len(batches) and _same_mode(batches[j][1], batches[i][1]):
                    j += 1
                rows = pa.concat_tables([b[0] for b in batches[i:j]], promote_options="default")
                # a durable engine: the publish's batch id names the last buffered batch it applies, so that its
                # commit also says what left the buffer (a reopen drops those: journal.py, issue 19 block)
                last = batches[j - 1][2]
                started = time.perf_counter()
                df = self.publish(name, rows, batches[i][1], batch_id=None if last is None else f"refresh:{last}")
                seconds = time.perf_counter() - started
                self._costs.setdefault(name, MeasuredCost()).observe(rows.num_rows, seconds)
                self._journal.refresh_cost(name, rows.num_rows, seconds)
                outs.append(df)
                i = j
        finally:
            self._applying = False
        if self._scheduler is not None and name in self._scheduler.index:
            self._scheduler.applied_outside(name)   # (a no-op when the scheduler chose it: nothing is left)
        return self._union(outs, batches[0][1] if batches else "unicast")

    def _union(self, frames, mode: str):
        frames = [f for f in frames if f is not None]
        if not frames:
            return spark_frames.empty_frame(self.spark, publish_schema(mode))
        out = frames[0]
        for f in frames[1:]:
            out = out.unionByName(f, allowMissingColumns=True)
        return out


def _same_mode(a, b) -> bool:
    """Whether two publish modes are one (``with_variant``'s Mode compares as its string: compare the variants too)."""
    return str(a) == str(b) and getattr(a, "variants", {}) == getattr(b, "variants", {})
