"""``intervals.merge`` against a sweep."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from nsysan.analyses import intervals as iv


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(-5, 10**4)), max_size=60), st.integers(0, 4))
@example([(0, 5), (6, 9)], 0)  # apart: the inputs themselves
@example([(0, 5), (5, 9)], 0)  # touching: merged
@example([(0, 5), (7, 3)], 0)  # an interval ending before it starts
def test_merge_returns_disjoint_inputs_themselves_and_unions_others(pairs, spread):
    """``intervals.merge`` equals a sweep for any intervals; when they are sorted, apart and each
    ends at or after its start, the result is the input arrays themselves (no copy)."""
    s = np.array([a << spread for a, _ in pairs], dtype=np.int64)
    e = s + np.array([d for _, d in pairs], dtype=np.int64)
    ms, me = iv.merge(s, e)
    order = np.argsort(s, kind="stable")
    ss, ee = s[order], e[order]
    want_s: list[int] = []
    want_e: list[int] = []
    run = None
    for a, b in zip(ss.tolist(), ee.tolist()):  # the groups as the general path forms them
        if run is None or a > run:
            want_s.append(a)
            want_e.append(b)
        else:
            want_e[-1] = max(want_e[-1], b)
        run = b if run is None else max(run, b)
    assert ms.tolist() == want_s and me.tolist() == want_e
    apart = len(s) > 0 and bool((np.diff(s) > 0).all()) and bool((s[1:] > e[:-1]).all()) and bool((e >= s).all())
    assert (ms is s and me is e) == apart
