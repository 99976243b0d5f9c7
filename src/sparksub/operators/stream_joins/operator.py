"""The stream-stream join with a bounded state (003 ch. 3): both sides in state, at most ``max_state_rows``.

Model (003 §3.2)
----------------
Time is discrete.  At step t each stream delivers its arrivals (a micro-batch: any number of rows per side,
the chapter's one tuple per stream being the special case).  The step first joins

    arrivals(L) ⋈ state(R)  ∪  state(L) ⋈ arrivals(R)  ∪  arrivals(L) ⋈ arrivals(R)

(the state as of the end of step t − 1; the last part is produced whatever the state holds, 003 §3.3.1),
then decides the new state: when a budget is over its bound the replacement policy keeps ``capacity`` of the
*candidates* = the cached rows plus the step's arrivals and the rest are gone for good (003 §3.1: unlike a
cache miss, "a discarded stream tuple is irrevocably gone, along with all result tuples it could generate").
The bound is ``max_state_rows`` per side (an int, or (left, right); None: unbounded) or
``shared_state_rows`` over both sides (the chapter's single cache, whose split between the streams the policy
decides, 003 §3.7.6).  The join is an equality join (SELECT_JOIN's ``R.b = S.b``) or, with ``band=(lo, hi)``,
a band join (BAND_JOIN's ``lo <= S.b − R.b <= hi``, left = R, right = S).

Options:

* ``window`` (steps): the sliding-window join of 003 §3.6: a pair joins only if the rows arrived at most
  ``window`` steps apart; a row older than that leaves the state for free (not an eviction).
* ``unique_keys``: each key occurs at most once per stream (a key join; the reduced streams of Theorem 7),
  so a row that has joined once is dead and leaves first (Definition 9's "reasonable" policy).
* ``dominance``: settle each decision by ECB dominance first (003 Corollary 2), then the policy;
  ``stats()['dominance']`` counts the decisions dominance proves optimal.
* ``models`` = (left, right): the streams' models (``models.py``) the look-ahead policies and the dominance
  test use; default: past frequencies (:class:`~sparksub.operators.stream_joins.models.StationaryModel`).
* ``audit`` (default True): count the result tuples an unbounded state would have produced (a log of every
  key seen, within the window: one number per row, not the rows), hence ``missed`` = true − produced, the
  MAX-subset error (003 §3.1).  Off: ``missed`` is unknown.

Driving it (the runtime, per micro-batch):

* ``apply(left, right) -> pa.Table``: Arrow tables / record batches / dicts of columns (either may be None or
  empty); the join columns ``left_key`` / ``right_key``; rows may carry their step in ``time_column``
  (a batch then covers as many steps as it has distinct times, processed in order; a time at or before the
  last step processed counts as ``late`` and joins at the next step); without it each call is one step.
  Returns the result pairs, each side's columns prefixed (``left_`` / ``right_``).
* ``apply_keys(left_keys, right_keys, left_times=None, right_times=None)`` -> (left row ids, right row ids):
  the same on bare numpy keys (row ids number each side's rows from 0 in arrival order).  One instance uses
  one of the two.
* ``snapshot() -> bytes`` / ``BoundedStreamJoin.restore(bytes)``: the whole state (rows, policy, models,
  counters), to continue elsewhere exactly as if uninterrupted.
* ``stats()`` (counters) and ``explain()`` (text) for ``Engine.stats()`` / EXPLAIN.

Cost per step: O((n + k) log(n + k)) to match n arrivals against a state of k rows (a sort of the state and
one binary search per arrival) plus the policy (HEEB: O(horizon · (k + n)) look-ups in the partner model;
FlowExpect: a min-cost flow on O((k + l)·l) nodes).
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa

from sparksub.errors import BadUpdate, InvalidArgument
from sparksub.operators.joins.band import _band as checked_band
from sparksub.operators.stream_joins.keys import (
    KeyLog,
    arrow_keys,
    join_pairs,
    normalize,
)
from sparksub.operators.stream_joins.models import StationaryModel
from sparksub.operators.stream_joins.policies import (
    Candidates,
    FlowExpect,
    dominated_subset,
    ecb,
    make_policy,
)

__all__ = ["SIDES", "BoundedStreamJoin"]

SIDES = ("left", "right")
_NO_IDS = np.zeros(0, dtype=np.int64)
#: columns of a side's numeric state matrix: event time, arrival step, last use, results so far, row id
EV, AR, LU, HI, RI = range(5)


class _State:
    """One side's rows in state: ``key`` (float64 or str) and a float64 matrix of their numbers (one
    fancy-index per decision, whatever the column count)."""

    def __init__(self):
        self.key = np.zeros(0)
        self.num = np.zeros((0, 5))

    def __len__(self) -> int:
        return int(self.num.shape[0])

    def take(self, idx) -> None:
        self.key = self.key[idx]
        self.num = self.num[idx]

    @property
    def rid(self) -> np.ndarray:
        return self.num[:, RI].astype(np.int64)


class BoundedStreamJoin:
    """An equality or band stream-stream join whose state holds at most ``max_state_rows`` rows per side
    (module docstring)."""

    def __init__(self, *, band: tuple[float, float] | None = None, left_key: str = "key", right_key: str = "key",
                 time_column: str | None = None, event_time: str | None = None, max_state_rows=None,
                 shared_state_rows: int | None = None, policy: Any = "HEEB", models=None,
                 window: int | None = None, unique_keys: bool = False, dominance: bool = False,
                 dominance_horizon: int = 64, audit: bool = True, prefixes: tuple[str, str] = ("left_", "right_")):
        self.band = None if band is None else checked_band(*band)
        self.key_columns = (left_key, right_key)
        self.time_column, self.event_column = time_column, event_time
        if shared_state_rows is not None and max_state_rows is not None:
            raise InvalidArgument("give max_state_rows (per side) or shared_state_rows (both sides), not both")
        self.shared = None if shared_state_rows is None else _count(shared_state_rows, "shared_state_rows")
        if max_state_rows is None or np.isscalar(max_state_rows):
            caps = (max_state_rows, max_state_rows)
        else:
            caps = tuple(max_state_rows)
            if len(caps) != 2:
                raise InvalidArgument("max_state_rows: an int or (left, right)")
        self.caps = tuple(None if c is None else _count(c, "max_state_rows") for c in caps)
        self.window = None if window is None else _count(window, "window")
        self.unique_keys, self.dominance = bool(unique_keys), bool(dominance)
        self.dominance_horizon = int(dominance_horizon)
        self.policy = make_policy(policy)
        if models is None:                           # past frequencies, when something looks ahead
            looks = self.dominance or getattr(self.policy, "needs_models", False)
            models = (StationaryModel(), StationaryModel()) if looks else (None, None)
        self.models = tuple(models)
        self.prefixes = tuple(prefixes)
        self.state = (_State(), _State())
        self.logs = (KeyLog(self.window), KeyLog(self.window)) if audit else None
        self.t = -1                                  # the last step processed
        self.next_rid = [0, 0]
        self.key_kind: str | None = None             # 'f' numeric or 'U' text, fixed by the first keys
        self.mode: str | None = None                 # 'arrow' or 'keys'
        self.stores: list = [None, None]             # arrow: each side's rows in state (+ recent), by rid
        self.store_rids = [np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)]
        self.counters = {"steps": 0, "rows": [0, 0], "null_keys": [0, 0], "late_rows": 0, "results": 0,
                         "same_step_results": 0, "true_results": 0, "evicted": [0, 0], "expired": [0, 0],
                         "dead": [0, 0], "peak_state_rows": [0, 0], "decisions": 0,
                         "dominance": {"decisions": 0, "settled": 0, "partly": 0, "evicted": 0}}

    # ------------------------------------------------------------------------------------------------------------
    # input
    # ------------------------------------------------------------------------------------------------------------
    def apply(self, left=None, right=None) -> pa.Table:
        """Join a micro-batch of each side (Arrow tables / record batches / dicts of columns / None) and
        update the state; returns the result pairs (each side's columns prefixed)."""
        self._set_mode("arrow")
        tables = [_as_table(left), _as_table(right)]
        sides = []
        for d, tbl in enumerate(tables):
            if tbl is None or tbl.num_rows == 0:
                sides.append(None)
                if tbl is not None and self.stores[d] is None and not any(pa.types.is_null(f.type) for f in tbl.schema):
                    self.stores[d] = tbl.slice(0, 0)        # a typed empty batch fixes the side's columns
                continue
            what = f"{SIDES[d]} key column {self.key_columns[d]!r}"
            if self.key_columns[d] not in tbl.column_names:
                raise BadUpdate(f"{SIDES[d]} batch has no join column {self.key_columns[d]!r}")
            keys, valid = arrow_keys(tbl.column(self.key_columns[d]), what)
            times = self._arrow_ints(tbl, self.time_column, d) if self.time_column else None
            event = None
            if self.event_column:
                event = arrow_keys(tbl.column(self.event_column), f"{SIDES[d]} event time")[0]
            sides.append((keys, valid, times, event))
            if self.stores[d] is not None and tbl.schema != self.stores[d].schema:
                try:
                    tbl = tbl.cast(self.stores[d].schema)
                except (pa.ArrowInvalid, ValueError, TypeError) as e:
                    raise BadUpdate(f"{SIDES[d]} batch schema {tbl.schema} differs from the first batch's") from e
            tables[d] = tbl
        result = self._output(*self._process(sides, tables))
        self._compact()                  # after the output: rows evicted in this batch may be in its results
        return result

    def apply_keys(self, left_keys=None, right_keys=None, left_times=None, right_times=None,
                   left_event=None, right_event=None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`apply` on bare keys (numpy / lists; None = NULL): returns (left row ids, right row ids) of
        the result pairs."""
        self._set_mode("keys")
        sides = []
        for d, (k, tm, ev) in enumerate(((left_keys, left_times, left_event), (right_keys, right_times, right_event))):
            if k is None or len(k) == 0:
                sides.append(None)
                continue
            keys, valid = normalize(k, f"{SIDES[d]} keys")
            times = None if tm is None else np.asarray(tm, dtype=np.int64)
            if times is not None and times.size != keys.size:
                raise BadUpdate(f"{SIDES[d]} times: {times.size} values for {keys.size} keys")
            event = None if ev is None else np.asarray(ev, dtype=np.float64)
            sides.append((keys, valid, times, event))
        return self._process(sides, (None, None))

    def _set_mode(self, mode: str) -> None:
        if self.mode is None:
            self.mode = mode
        elif self.mode != mode:
            raise InvalidArgument(f"this operator was fed with {self.mode} batches; apply and apply_keys do not mix")

    def _arrow_ints(self, tbl: pa.Table, column: str, d: int) -> np.ndarray:
        if column not in tbl.column_names:
            raise BadUpdate(f"{SIDES[d]} batch has no time column {column!r}")
        col = tbl.column(column)
        if col.null_count:
            raise BadUpdate(f"{SIDES[d]} batch: NULL in time column {column!r}")
        return np.asarray(col.to_numpy(zero_copy_only=False)).astype(np.int64)

    # ------------------------------------------------------------------------------------------------------------
    # the steps
    # ------------------------------------------------------------------------------------------------------------
    def _process(self, sides, tables):
        prepared = []
        all_times = []
        for d, s in enumerate(sides):
            if s is None:
                prepared.append(None)
                continue
            keys, valid, times, event = s
            if self.key_kind is None and valid.any():
                self.key_kind = "f" if keys.dtype.kind == "f" else "U"
            if valid.any() and (keys.dtype.kind == "f") != (self.key_kind == "f"):
                raise BadUpdate(f"{SIDES[d]} keys: numeric and text join values do not join")
            if self.band is not None and valid.any() and keys.dtype.kind != "f":
                raise BadUpdate(f"{SIDES[d]} keys: a band join needs numeric join values")
            n = keys.size
            if times is None:
                times = np.full(n, self.t + 1, dtype=np.int64)
            else:
                late = times <= self.t
                if late.any():
                    self.counters["late_rows"] += int(late.sum())
                    times = np.where(late, self.t + 1, times)
            if event is None:
                event = keys if keys.dtype.kind == "f" else times.astype(np.float64)
            rids = self.next_rid[d] + np.arange(n, dtype=np.int64)
            self.next_rid[d] += n
            self.counters["rows"][d] += n
            self.counters["null_keys"][d] += int(n - valid.sum())
            if tables[d] is not None:
                self._store(d, tables[d].filter(pa.array(valid)), rids[valid])
            order = np.argsort(times[valid], kind="stable")
            sel = np.flatnonzero(valid)[order]
            prepared.append((keys[sel], times[sel], event[sel], rids[sel]))
            if sel.size:
                all_times.append(times[sel])
        if not all_times:
            if any(s is not None for s in sides):            # only NULL keys: still a step
                self.t += 1
                self.counters["steps"] += 1
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        steps = np.unique(np.concatenate(all_times))
        bounds = []
        for p in prepared:
            bounds.append(None if p is None else (np.searchsorted(p[1], steps, "left"),
                                                  np.searchsorted(p[1], steps, "right")))
        out_l, out_r = [], []
        none = (np.zeros(0, dtype=self._dtype()), np.zeros(0), np.zeros(0, np.int64))
        for si, t in enumerate(steps.tolist()):
            arr = []
            for d, p in enumerate(prepared):
                if p is None:
                    arr.append(none)
                    continue
                a, b = bounds[d][0][si], bounds[d][1][si]
                arr.append((p[0][a:b], p[2][a:b], p[3][a:b]))
            lr, rr = self._step(int(t), arr)
            out_l.append(lr)
            out_r.append(rr)
        return np.concatenate(out_l), np.concatenate(out_r)

    def _dtype(self):
        return np.float64 if self.key_kind != "U" else str

    def _step(self, t: int, arr) -> tuple[np.ndarray, np.ndarray]:
        """One step: join the arrivals with the state and each other, audit, observe, decide the state."""
        self.t = t
        c = self.counters
        c["steps"] += 1
        st = self.state
        if self.window is not None:                           # rows out of the window join nothing now
            for d in (0, 1):
                gone = t - st[d].num[:, AR] > self.window
                if gone.any():
                    c["expired"][d] += int(gone.sum())
                    st[d].take(~gone)
        (lk, lev, lrid), (rk, rev, rrid) = arr
        nl, nr = lk.size, rk.size
        hl = np.zeros(nl, dtype=np.int64)
        hr = np.zeros(nr, dtype=np.int64)
        pl, pr = [], []
        produced = 0
        # arrivals(L) x state(R), state(L) x arrivals(R): the state's rows gain results
        for d, (k, rid, h) in ((0, (lk, lrid, hl)), (1, (rk, rrid, hr))):
            partner = st[1 - d]
            if not k.size or not len(partner):
                continue
            i, j = join_pairs(k, partner.key, self.band, d)
            if not i.size:
                continue
            produced += i.size
            (pl if d == 0 else pr).append(rid[i])
            (pr if d == 0 else pl).append(partner.num[j, RI].astype(np.int64))
            h += np.bincount(i, minlength=k.size)
            hs = np.bincount(j, minlength=len(partner))
            partner.num[:, HI] += hs
            partner.num[hs > 0, LU] = t
        same = 0
        if nl and nr:                                         # arrivals(L) x arrivals(R)
            i, j = join_pairs(lk, rk, self.band, 0)
            if i.size:
                same = i.size
                pl.append(lrid[i])
                pr.append(rrid[j])
                hl += np.bincount(i, minlength=nl)
                hr += np.bincount(j, minlength=nr)
        c["results"] += produced + same
        c["same_step_results"] += same
        if self.logs is not None:
            true_prev = 0
            if nl and self.logs[1].rows:
                true_prev += int(self.logs[1].count(lk, self.band, 0, t).sum())
            if nr and self.logs[0].rows:
                true_prev += int(self.logs[0].count(rk, self.band, 1, t).sum())
            c["true_results"] += true_prev + same
            self.logs[0].add(lk, t)
            self.logs[1].add(rk, t)
        # the models and the policy see the step's arrivals before its decision (history up to t0 = t)
        for d, k in ((0, lk), (1, rk)):
            if self.models[d] is not None:
                self.models[d].observe(t, k)
        observe = getattr(self.policy, "observe", None)
        if observe is not None:
            observe(t, lk, rk)
        # candidates = state + arrivals
        for d, (k, ev, rid, hits) in ((0, (lk, lev, lrid, hl)), (1, (rk, rev, rrid, hr))):
            if not k.size:
                continue
            s = st[d]
            block = np.empty((k.size, 5))
            block[:, EV], block[:, AR], block[:, LU], block[:, HI], block[:, RI] = ev, t, t, hits, rid
            s.key = np.concatenate([s.key, k]) if s.key.size else k
            s.num = np.concatenate([s.num, block]) if s.num.size else block
        self._decide(t)
        for d in (0, 1):
            c["peak_state_rows"][d] = max(c["peak_state_rows"][d], len(st[d]))
        if not pl:
            return _NO_IDS, _NO_IDS
        return np.concatenate(pl), np.concatenate(pr)

    def _drop_dead(self, t: int) -> None:
        """Rows that can join nothing after this step leave first: out of the window at t + 1 (003 §3.6), or
        already joined under ``unique_keys`` (Definition 9)."""
        if self.window is None and not self.unique_keys:
            return
        for d in (0, 1):
            s = self.state[d]
            if not len(s):
                continue
            gone = np.zeros(len(s), dtype=bool)
            if self.window is not None:
                gone = t + 1 - s.num[:, AR] > self.window
                self.counters["expired"][d] += int(gone.sum())
            if self.unique_keys:
                dead = (s.num[:, HI] > 0) & ~gone
                self.counters["dead"][d] += int(dead.sum())
                gone = gone | dead
            if gone.any():
                s.take(~gone)

    def _decide(self, t: int) -> None:
        self._drop_dead(t)
        groups = [((0, 1), self.shared)] if self.shared is not None else [((0,), self.caps[0]), ((1,), self.caps[1])]
        for sides, cap in groups:
            if cap is None or sum(len(self.state[d]) for d in sides) <= cap:
                continue
            cand = self._candidates(t, sides)
            keep = self._choose(cand, cap)
            mask = np.zeros(cand.n, dtype=bool)
            mask[keep] = True
            offset = 0
            for d in sides:
                n = len(self.state[d])
                m = mask[offset:offset + n]
                self.counters["evicted"][d] += int(n - m.sum())
                self.state[d].take(m)
                offset += n

    def _candidates(self, t: int, sides) -> Candidates:
        parts = [self.state[d] for d in sides]
        if len(parts) == 1:
            key, num = parts[0].key, parts[0].num
            side = np.full(len(parts[0]), sides[0], dtype=np.int8)
        else:
            keys = [p.key for p in parts if p.key.size]
            key = np.concatenate(keys) if len(keys) > 1 else (keys[0] if keys else np.zeros(0))
            num = np.concatenate([parts[0].num, parts[1].num])
            side = np.repeat(np.array(sides, dtype=np.int8), [len(p) for p in parts])
        return Candidates(t, side, key, num[:, AR], num[:, LU], num[:, HI], num[:, RI].astype(np.int64), num[:, EV],
                          models=self.models, band=self.band, window=self.window, budget_sides=tuple(sides))

    def _choose(self, cand: Candidates, cap: int) -> np.ndarray:
        self.counters["decisions"] += 1
        rest = np.arange(cand.n)
        if self.dominance and cand.n <= 2048:
            dom = self.counters["dominance"]
            dom["decisions"] += 1
            need = cand.n - cap
            hint = cand.horizon_hint()
            h = self.dominance_horizon if hint is None else max(1, min(self.dominance_horizon, hint))
            out = dominated_subset(ecb(cand, h), need)
            if out.size:
                dom["evicted"] += int(out.size)
                dom["settled" if out.size == need else "partly"] += 1
                if out.size == need:
                    return np.setdiff1d(rest, out)
                rest = np.setdiff1d(rest, out)
                cand = cand.subset(rest)
        keep = np.asarray(self.policy.keep(cand, cap), dtype=np.int64)
        return rest[keep]

    # ------------------------------------------------------------------------------------------------------------
    # rows (arrow mode)
    # ------------------------------------------------------------------------------------------------------------
    def _store(self, d: int, tbl: pa.Table, rids: np.ndarray) -> None:
        self.stores[d] = tbl if self.stores[d] is None else pa.concat_tables([self.stores[d], tbl])
        self.store_rids[d] = np.concatenate([self.store_rids[d], rids])

    def _compact(self) -> None:
        """Drop the stored rows no longer in state once they outnumber those in state (amortised O(1))."""
        if self.mode != "arrow":
            return
        for d in (0, 1):
            if self.stores[d] is None:
                continue
            live = np.sort(self.state[d].rid)
            if self.stores[d].num_rows > 2 * live.size + 1024:
                pos = np.searchsorted(self.store_rids[d], live)
                self.stores[d] = self.stores[d].take(pa.array(pos)).combine_chunks()
                self.store_rids[d] = live

    def output_schema(self) -> pa.Schema:
        """The result columns: each side's columns (as first seen) with its prefix."""
        fields = []
        for d in (0, 1):
            if self.stores[d] is not None:
                fields += [pa.field(self.prefixes[d] + f.name, f.type) for f in self.stores[d].schema]
        return pa.schema(fields)

    def _output(self, lr: np.ndarray, rr: np.ndarray) -> pa.Table:
        schema = self.output_schema()
        if not lr.size or self.stores[0] is None or self.stores[1] is None:
            return schema.empty_table()
        cols, names = [], []
        for d, ids in ((0, lr), (1, rr)):
            pos = np.searchsorted(self.store_rids[d], ids)
            part = self.stores[d].take(pa.array(pos))
            cols += part.columns
            names += [self.prefixes[d] + n for n in part.column_names]
        return pa.Table.from_arrays(cols, names=names)

    # ------------------------------------------------------------------------------------------------------------
    # snapshot / restore, stats, explain
    # ------------------------------------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The whole operator (rows in state, policy and models with their statistics, counters) as bytes."""
        return pickle.dumps(self.__dict__, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def restore(cls, blob: bytes) -> BoundedStreamJoin:
        """The operator :meth:`snapshot` saved, ready to take the next batch."""
        op = cls.__new__(cls)
        op.__dict__.update(pickle.loads(blob))
        return op

    def state_rows(self) -> tuple[int, int]:
        return len(self.state[0]), len(self.state[1])

    def candidates(self, sides=(0, 1)) -> Candidates:
        """The rows in state as a :class:`Candidates` view at the current step (for inspection)."""
        return self._candidates(self.t, tuple(sides))

    def stats(self) -> dict:
        """Counters for ``Engine.stats()``: rows in / in state (per side), results produced, true results and
        missed ones (the MAX-subset error, with ``audit``), evictions, expirations, dominance decisions."""
        c = self.counters
        out = {"kind": "band" if self.band is not None else "equality", "policy": self._policy_text(),
               "budget": self._budget_text(), "steps": c["steps"], "rows": list(c["rows"]),
               "null_keys": list(c["null_keys"]), "late_rows": c["late_rows"], "state_rows": list(self.state_rows()),
               "peak_state_rows": list(c["peak_state_rows"]), "results": c["results"],
               "same_step_results": c["same_step_results"], "evicted": list(c["evicted"]),
               "expired": list(c["expired"]), "dead": list(c["dead"]), "decisions": c["decisions"]}
        if self.logs is not None:
            out["true_results"] = c["true_results"]
            out["missed"] = c["true_results"] - c["results"]
            out["recall"] = c["results"] / c["true_results"] if c["true_results"] else 1.0
            out["audit_keys"] = sum(log.rows for log in self.logs)
        else:
            out["true_results"] = out["missed"] = out["recall"] = None
        if self.dominance:
            out["dominance"] = dict(c["dominance"])
        if isinstance(self.policy, FlowExpect):
            out["flow_solves"] = self.policy.solves
        return out

    def _policy_text(self) -> str:
        d = getattr(self.policy, "describe", None)
        return d() if d is not None else getattr(self.policy, "name", type(self.policy).__name__)

    def _budget_text(self) -> str:
        if self.shared is not None:
            return f"shared_state_rows={self.shared} (both sides)"
        if self.caps == (None, None):
            return "unbounded"
        return "max_state_rows=" + "/".join("∞" if c is None else str(c) for c in self.caps) + " (left/right)"

    def explain(self) -> str:
        """EXPLAIN's text: the join, the bound, the policy, and the counters with the MAX-subset error."""
        s = self.stats()
        pred = (f"{self.band[0]:g} <= right.{self.key_columns[1]} - left.{self.key_columns[0]} <= {self.band[1]:g}"
                if self.band is not None else f"left.{self.key_columns[0]} = right.{self.key_columns[1]}")
        lines = [f"BoundedStreamJoin [{s['kind']}: {pred}] (003 ch. 3: join state as a bounded cache)",
                 (f"  state bound: {s['budget']}; in state now {s['state_rows'][0]}/{s['state_rows'][1]}, "
                  f"peak {s['peak_state_rows'][0]}/{s['peak_state_rows'][1]}"),
                 f"  replacement policy: {s['policy']}"
                 + ("; ECB dominance first (003 Corollary 2)" if self.dominance else "")]
        if self.window is not None:
            lines.append(f"  sliding window: {self.window} steps (003 §3.6)")
        if self.unique_keys:
            lines.append("  unique keys per stream: a row that joined once leaves first (003 Definition 9)")
        models = ", ".join(type(m).__name__ if m is not None else "none" for m in self.models)
        lines.append(f"  stream models (left, right): {models}")
        lines.append(f"  steps {s['steps']}, rows in {s['rows'][0]}/{s['rows'][1]} (NULL keys {s['null_keys'][0]}/"
                     f"{s['null_keys'][1]}, late {s['late_rows']}), decisions {s['decisions']}, evicted "
                     f"{s['evicted'][0]}/{s['evicted'][1]}, expired {s['expired'][0]}/{s['expired'][1]}")
        if s["true_results"] is not None:
            lines.append(f"  results produced {s['results']:,} of {s['true_results']:,} (missed {s['missed']:,}: "
                         f"MAX-subset error; recall {100 * s['recall']:.1f}%; audit log {s['audit_keys']:,} keys)")
        else:
            lines.append(f"  results produced {s['results']:,} (audit off: missed results not counted)")
        if self.dominance:
            dm = s["dominance"]
            lines.append(f"  dominance: {dm['settled']} of {dm['decisions']} decisions proven optimal, {dm['partly']} in "
                         f"part ({dm['evicted']} rows evicted by dominance)")
        return "\n".join(lines)


def _count(v, what: str) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{what} must be a non-negative integer, got {v!r}") from None
    if n != v or n < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, got {v!r}")
    return n


def _as_table(x) -> pa.Table | None:
    if x is None:
        return None
    if isinstance(x, pa.Table):
        return x
    if isinstance(x, pa.RecordBatch):
        return pa.Table.from_batches([x])
    if isinstance(x, dict):
        return pa.table(x)
    if hasattr(x, "to_pandas") or hasattr(x, "columns"):
        return pa.Table.from_pandas(x, preserve_index=False)
    raise InvalidArgument(f"a batch must be an Arrow table / record batch or a dict of columns, got {type(x).__name__}")

