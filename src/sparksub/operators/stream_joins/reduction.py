"""The caching problem as a join (003 §3.2.1, Theorem 7).

A reference stream R joins a database relation (every reference joins exactly one tuple); a cache of k
database tuples gives a hit when the referenced tuple is cached.  The reduction builds a *supply* stream S:
at each reference r_v, S delivers the tuple s_v it joins.  To make every tuple distinct, the i-th occurrence
of v becomes the key (v, i − 1) in R and (v, i) in S (003 §3.2.1):

    R: a b a c a  ->  (a,0) (b,0) (a,1) (c,0) (a,2)
    S:            ->  (a,1) (b,1) (a,2) (c,1) (a,3)

so s_(v,i) joins only r_(v,i), the *next* reference of v, and an R tuple joins nothing later.  With R's
state bound to 0 rows and S's to k, and a *reasonable* policy (003 Appendix Definition 9: a row that can
never join again leaves first -- here ``unique_keys=True``: a supply row that has joined is dead), the join
produces exactly as many result tuples as the cache has hits: H(C0, R, P) = J(C0, R, S, P) (Theorem 7).
Keys are encoded as int64 ``code·M + i`` (M = :data:`~sparksub.operators.stream_joins.models.
REFERENCE_MULTIPLIER`); :class:`~sparksub.operators.stream_joins.models.ReferenceModel` decodes them.

>>> r, s = caching_as_join([0, 1, 0, 2, 0])
>>> [(int(k) >> 32, int(k) & 0xffffffff) for k in r]
[(0, 0), (1, 0), (0, 1), (2, 0), (0, 2)]
>>> [(int(k) >> 32, int(k) & 0xffffffff) for k in s]
[(0, 1), (1, 1), (0, 2), (2, 1), (0, 3)]
"""
from __future__ import annotations

import numpy as np

from sparksub.operators.stream_joins.models import REFERENCE_MULTIPLIER

__all__ = ["caching_as_join", "reference_codes"]


def reference_codes(references) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values): each reference's integer code (0..distinct − 1, in sorted value order) and the
    distinct values."""
    values, codes = np.unique(np.asarray(references), return_inverse=True)
    return codes.astype(np.int64), values


def caching_as_join(codes, multiplier: int = REFERENCE_MULTIPLIER) -> tuple[np.ndarray, np.ndarray]:
    """The reference stream R and the supply stream S of 003 §3.2.1 for a sequence of non-negative integer
    reference ``codes`` (one reference per step): int64 keys code·M + (occurrence − 1) and code·M + occurrence."""
    c = np.asarray(codes, dtype=np.int64)
    if c.size and (c.min() < 0 or c.max() >= (1 << 31)):
        raise ValueError("reference codes must be in [0, 2^31)")
    occurrence = np.zeros(c.size, dtype=np.int64)
    seen: dict[int, int] = {}
    for i, v in enumerate(c.tolist()):
        seen[v] = seen.get(v, 0) + 1
        occurrence[i] = seen[v]
    base = c * int(multiplier)
    return base + occurrence - 1, base + occurrence
