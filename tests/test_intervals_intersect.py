"""``intervals.intersect`` (two binary searches per interval of the smaller set) against its
definition, a sweep over every boundary point, on merged sets with touching and empty cases."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from nsysan.analyses import intervals as iv


@st.composite
def merged_sets(draw):
    pts = sorted(draw(st.sets(st.integers(0, 400), max_size=40)))
    s, e = np.array(pts[0::2][: len(pts) // 2], np.int64), np.array(pts[1::2][: len(pts) // 2], np.int64)
    touch = draw(st.lists(st.booleans(), min_size=len(s), max_size=len(s)))
    for i in range(1, len(s)):  # some intervals touch the previous one (merged sets from clipping do)
        if touch[i]:
            s[i] = e[i - 1]
    keep = e > s
    return s[keep], e[keep]


@given(merged_sets(), merged_sets())
def test_intersect_equals_the_sweep(a, b):
    got = iv.intersect(a, b)
    want = iv._intersect_sweep(a, b) if a[0].size and b[0].size else (np.empty(0, np.int64),) * 2
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert iv.total(*got) == iv.total(*iv.intersect(b, a))
