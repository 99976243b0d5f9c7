"""Cost functions f_i measured on this system: time our operators per batch size and fit f_i (003 §2.5).

The chapter measures, per update stream, the cost of propagating 1..400 updates in steps of 5 and
interpolates (Figure 2.4); its model needs f_i monotone and subadditive (§2.2), and its bounds for unknown
refresh times assume f_i(k) = a_i·k + b_i (§2.3.3, Theorems 5-6).  Here:

* :func:`time_batches` times ``apply(batch)`` for batches of each size (batches built off the clock, an
  optional ``undo`` after each timed call, off the clock too, so that the operator's state does not drift),
  with a CPU clock by default (``time.process_time``: the machine is shared);
* :func:`fit_linear` fits a :class:`~sparksub.scheduling.refresh.Linear` to the medians by least squares on
  the *relative* error (a batch of 1 weighs as much as a batch of 500: the start-up cost b is what the
  scheduling is about), a, b >= 0; :func:`fit_tabulated` keeps the measured curve itself;
* two workloads over our real operators, each with ``batch(side, k)`` / ``apply`` / ``undo``:
  :class:`SelectJoinWorkload` (a SELECT_JOIN group, ``operators/joins/group.py``: its R side and its S side
  are two inputs with asymmetric costs: an R tuple meets many S tuples, an S tuple few R tuples) and
  :class:`FilterWorkload` (a FILTER group, ``operators/filters/group.py``: vectorised matching, a high
  per-batch cost and a small per-row one: the shape of 003 Figure 2.1's c_ΔR).

Pure: operators, numpy and pyarrow; no pyspark, no engine, no runtime.  ``bench/refresh.py`` uses it.  The
operators (and pyarrow) are imported by the workloads only, so the timing and fitting functions are cheap to
import.

>>> samples = time_batches(lambda b: None, lambda k: k, (1, 10), repeats=3, clock=iter(range(100)).__next__)
>>> samples
{1: [1, 1, 1], 10: [1, 1, 1]}
>>> f, r2 = fit_linear({1: 7.0, 10: 25.0, 100: 205.0})     # 2k + 5
>>> round(f.a, 9), round(f.b, 9), r2
(2.0, 5.0, 1.0)
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Mapping, Sequence

import numpy as np

from sparksub.scheduling.refresh import Linear, Tabulated

__all__ = ["time_batches", "medians", "fit_linear", "fit_tabulated", "SelectJoinWorkload", "FilterWorkload",
           "measure"]


def time_batches(apply: Callable, make_batch: Callable[[int], object], sizes: Sequence[int], *, repeats: int = 5,
                 warmup: int = 1, clock: Callable[[], float] = time.process_time,
                 undo: Callable | None = None) -> dict[int, list[float]]:
    """Seconds of ``apply(make_batch(k))`` for each k in ``sizes``, ``repeats`` times each (after ``warmup``
    untimed calls per size); ``undo(batch)`` runs after each call, untimed.  The sizes are visited round-robin
    (one batch of each size per round) so that a change of load on the machine touches every size alike."""
    out: dict[int, list[float]] = {k: [] for k in sizes}
    for rnd in range(warmup + repeats):
        for k in sizes:
            batch = make_batch(k)
            t0 = clock()
            apply(batch)
            dt = clock() - t0
            if undo is not None:
                undo(batch)
            if rnd >= warmup:
                out[k].append(dt)
    return out


def medians(samples: Mapping[int, float | Sequence[float]]) -> dict[int, float]:
    """Per batch size, the median of its timings (a number stays as it is)."""
    return {k: (statistics.median(v) if isinstance(v, (list, tuple)) else float(v)) for k, v in samples.items()}


def fit_linear(samples: Mapping[int, float | Sequence[float]]) -> tuple[Linear, float]:
    """f(k) = a·k + b (003 §2.3.3) through the medians, least squares on the relative error, a, b >= 0;
    returns (the fit, R² of the fit on the medians, absolute)."""
    m = medians(samples)
    ks = np.array(sorted(m), dtype=float)
    ys = np.array([m[int(k)] for k in ks], dtype=float)
    if len(ks) < 2 or np.any(ys <= 0):
        raise ValueError("fit_linear needs two or more batch sizes with positive timings")
    w = 1.0 / ys                                          # minimise Σ ((a k + b - y) / y)²
    a, b = np.linalg.lstsq(np.stack([ks * w, w], axis=1), ys * w, rcond=None)[0]
    if b < 0:                                             # a through the origin
        b = 0.0
        a = float(np.sum(ks * w * w * ys) / np.sum((ks * w) ** 2))
    if a < 0:                                             # flat: the weighted mean
        a = 0.0
        b = float(np.sum(w * w * ys) / np.sum(w * w))
    a, b = float(a), float(b)
    pred = a * ks + b
    ss = float(np.sum((ys - ys.mean()) ** 2))
    r2 = 1.0 - float(np.sum((ys - pred) ** 2)) / ss if ss > 0 else 1.0
    return Linear(a, b), round(r2, 12)


def fit_tabulated(samples: Mapping[int, float | Sequence[float]]) -> Tabulated:
    """The measured medians as a cost curve (003 §2.5 interpolates its measured points)."""
    return Tabulated(tuple(sorted(medians(samples).items())))


# ---- workloads over our operators ------------------------------------------------------------------------------
def _rows_batch(columns: dict, ops: Sequence[int], seq0: int, side: int | None):
    import pyarrow as pa
    from sparksub.operators.shared.schemas import EVENT_PREFIX
    t = pa.table({EVENT_PREFIX + c: v for c, v in columns.items()})
    n = len(ops)
    t = (t.append_column("op", pa.array(ops, pa.int8()))
          .append_column("seq", pa.array(np.arange(seq0, seq0 + n, dtype=np.int64), pa.int64())))
    if side is not None:
        t = t.append_column("j_side", pa.array(np.full(n, side, np.int8), pa.int8()))
    return t


class SelectJoinWorkload:
    """A SELECT_JOIN group (``SELECT * FROM r JOIN s ON r.b = s.b WHERE r.a BETWEEN … AND s.c BETWEEN …``,
    003 §4.3.2) on synthetic tables: ``r_rows`` R rows and ``s_rows`` S rows over ``join_values`` join values
    (uniform), ``subscriptions`` queries whose ranges cover ``selectivity`` of A and of C.  An incoming R row
    meets s_rows / join_values S rows, an S row r_rows / join_values R rows: the two sides' costs differ by
    that ratio.  Sides: 0 = R, 1 = S; ``batch(side, k)`` = k new rows (inserts), ``undo`` deletes them."""

    sides = ("R", "S")

    def __init__(self, r_rows: int = 2_000, s_rows: int = 20_000, join_values: int = 200,
                 subscriptions: int = 1_000, selectivity: float = 0.1, seed: int = 1, mode: str = "unicast"):
        from sparksub.operators.joins.group import SELECT_JOIN, JoinGroupSnapshot
        self.rng = np.random.default_rng(seed)
        self.join_values, self.mode = join_values, mode
        rng = self.rng
        sides = (("r", "rk", "b", ("a",)), ("s", "sk", "b", ("c",)))
        r = {"rk": list(range(r_rows)), "b": rng.integers(0, join_values, r_rows).astype(float).tolist(),
             "a": rng.uniform(0, 1000, r_rows).tolist()}
        s = {"sk": list(range(s_rows)), "b": rng.integers(0, join_values, s_rows).astype(float).tolist(),
             "c": rng.uniform(0, 1000, s_rows).tolist()}
        width = 1000 * selectivity
        lo_a, lo_c = rng.uniform(0, 1000 - width, subscriptions), rng.uniform(0, 1000 - width, subscriptions)
        cols = {"a_lo": lo_a, "a_hi": lo_a + width, "c_lo": lo_c, "c_hi": lo_c + width}
        ids = np.array([f"q{i}" for i in range(subscriptions)], dtype=object)
        self.group = JoinGroupSnapshot(SELECT_JOIN, "refresh", "refresh#0", sides, True, ids, cols, (r, s),
                                       domains={"A": (0.0, 1000.0), "B": (0.0, float(join_values)),
                                                "C": (0.0, 1000.0)}).build()
        self._key = 10 ** 9
        self._seq = 0

    def batch(self, side: int, k: int):
        from sparksub.operators.shared.schemas import UPSERT
        keys = np.arange(self._key, self._key + k, dtype=np.int64)
        self._key += k
        b = self.rng.integers(0, self.join_values, k).astype(float)
        x = self.rng.uniform(0, 1000, k)
        cols = {"rk": keys, "b": b, "a": x} if side == 0 else {"sk": keys, "b": b, "c": x}
        self._seq += k
        return _rows_batch(cols, [UPSERT] * k, self._seq - k, side)

    def apply(self, batch) -> None:
        self.group.apply(batch, self.mode)

    def undo(self, batch) -> None:
        from sparksub.operators.shared.schemas import DELETE, EVENT_PREFIX
        side = int(batch.column("j_side")[0].as_py())
        key = "rk" if side == 0 else "sk"
        k = batch.num_rows
        cols = {c[len(EVENT_PREFIX):]: batch.column(c) for c in batch.column_names if c.startswith(EVENT_PREFIX)}
        self._seq += k
        self.group.apply(_rows_batch({key: cols[key], **{c: v for c, v in cols.items() if c != key}},
                                     [DELETE] * k, self._seq - k, side), "none")


class FilterWorkload:
    """A FILTER group (001; ``operators/filters/group.py``) of ``subscriptions`` subscriptions
    ``symbol = :sym AND per BETWEEN :lo AND :hi`` over ``symbols`` symbols (bench/runtime.py's FILTER shape):
    every batch is matched at once (vectorised), so its cost is mostly per batch.  One side (0); stateless,
    so ``undo`` does nothing."""

    sides = ("stock",)

    def __init__(self, subscriptions: int = 20_000, symbols: int = 20_000, seed: int = 1):
        import pyarrow as pa
        from sparksub.operators.filters.group import Block, FilterGroup
        rng = self.rng = np.random.default_rng(seed)
        self.symbols = np.array([f"k{i}" for i in range(symbols)], dtype=object)
        mid, length = rng.uniform(0, 10_000, subscriptions), rng.uniform(0, 4_000, subscriptions)
        lo, hi = np.floor((mid - length / 2) / 250) * 250, np.ceil((mid + length / 2) / 250) * 250
        self.group = FilterGroup("refresh", "stock", [("symbol", pa.string()), ("risk", pa.float64()),
                                                      ("per", pa.float64())])
        sym = self.symbols[rng.integers(0, symbols, subscriptions)]
        self.group.register_block(Block(np.array([f"f{i}" for i in range(subscriptions)], dtype=object),
                                        [[("symbol", "=", sym), ("per", "between", (lo, hi))]], ("*",)))
        self._seq = 0

    def batch(self, side: int, k: int):
        import pyarrow as pa
        from sparksub.operators.shared.schemas import UPSERT
        rng = self.rng
        cols = {"symbol": pa.array(self.symbols[rng.integers(0, len(self.symbols), k)].tolist(), pa.string()),
                "risk": pa.array(rng.uniform(0, 10_000, k)), "per": pa.array(rng.uniform(0, 10_000, k))}
        self._seq += k
        return _rows_batch(cols, [UPSERT] * k, self._seq - k, None)

    def apply(self, batch) -> None:
        self.group.apply(batch, "unicast")

    def undo(self, batch) -> None:
        pass


def measure(workload, side: int, sizes: Sequence[int], *, repeats: int = 5, warmup: int = 1,
            clock: Callable[[], float] = time.process_time) -> dict[int, list[float]]:
    """:func:`time_batches` on one input (``side``) of one of the workloads above."""
    return time_batches(workload.apply, lambda k: workload.batch(side, k), sizes, repeats=repeats,
                        warmup=warmup, clock=clock, undo=workload.undo)
