"""The refresh gate of a stream (issue 19 item 1; ``scheduling/stream_gate.py``) against a brute-force oracle.

For one table with a linear cost f(k) = a·k + b, every LGM policy is the lazy plan (003 §2.3, Lemma 1 and
Definition 3; one table has one minimal set): keep the rows buffered while f(buffered) <= dT, apply all of them
when it would not hold, and apply everything at a refresh.  The oracle runs that rule on the arrival counts; the
gate must release exactly those rows, in seq order, each once -- also when micro-batches are replayed (the same
id again: a retried task, a restart from the checkpoint), which must release what the first attempt did."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from sparksub.scheduling.refresh import Linear
from sparksub.scheduling.stream_gate import StreamRefreshGate, gate_state, request_refresh

pytestmark = pytest.mark.catalyst_independent


def rows(batch: int, n: int) -> pa.Table:
    return pa.table({"k": [f"r{batch}-{j}" for j in range(n)], "sparksub_seq": [(batch << 32) + j for j in range(n)],
                     "sparksub_reason": pa.nulls(n, pa.string())})


def lazy_oracle(arrivals, refresh_at, f, bound):
    """Per micro-batch, the (batch, row) pairs applied then."""
    buffered, out = [], []
    for b, n in enumerate(arrivals):
        buffered += [(b, j) for j in range(n)]
        if b in refresh_at or f(len(buffered)) > bound:
            out.append(buffered)
            buffered = []
        else:
            out.append([])
    return out, buffered


@settings(max_examples=40, deadline=None)
@given(arrivals=st.lists(st.integers(0, 9), min_size=1, max_size=25),
       a=st.sampled_from([0.5, 1.0, 2.0]), b=st.sampled_from([0.0, 1.0, 5.0]), bound=st.integers(0, 30),
       refresh_at=st.sets(st.integers(0, 24), max_size=3), replay=st.sets(st.integers(0, 24), max_size=5),
       policy=st.sampled_from(["online", "naive"]))
def test_gate_releases_what_the_lazy_plan_applies(tmp_path_factory, arrivals, a, b, bound, refresh_at, replay, policy):
    where = tmp_path_factory.mktemp("gate")
    f = Linear(a, b)
    gate = StreamRefreshGate(str(where), "t", f, float(bound), policy)
    want, left = lazy_oracle(arrivals, refresh_at, f, bound)
    for batch, n in enumerate(arrivals):
        if batch in refresh_at:
            request_refresh(where)
        got = gate.decide(batch, rows(batch, n), "sparksub_seq")
        if batch in replay:   # a replay (the request, if any, was consumed): the first attempt's decision
            again = gate.decide(batch, rows(batch, n), "sparksub_seq")
            assert again.equals(got)
        seqs = got.column("sparksub_seq").to_pylist()
        assert seqs == sorted(seqs)
        assert [(s >> 32, s & 0xFFFFFFFF) for s in seqs] == want[batch]
        state = gate_state(where)
        assert state["batch"] == batch and f(state["buffered"]) <= bound   # 003 §2.2's invariant
        assert state["load"] == f(state["buffered"])
    assert gate_state(where)["buffered"] == len(left)


def test_a_restart_continues_from_the_newest_decision(tmp_path):
    """A new gate object (a restarted query: the stream's directory survives) goes on from the kept buffer."""
    f = Linear(1.0, 0.0)
    first = StreamRefreshGate(str(tmp_path), "t", f, 10.0)
    assert first.decide(0, rows(0, 6), "sparksub_seq").num_rows == 0
    again = StreamRefreshGate(str(tmp_path), "t", f, 10.0)
    out = again.decide(1, rows(1, 6), "sparksub_seq")      # 12 > 10: all of both
    assert out.column("k").to_pylist() == [f"r0-{j}" for j in range(6)] + [f"r1-{j}" for j in range(6)]
