"""``intervals.intersect`` (two binary searches per interval of the smaller set) against its
definition, the overlap of every pair of intervals, on merged sets with touching and empty cases."""

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


def intersect_by_pairs(a, b):
    """The definition: the non-empty overlap of every interval of ``a`` with every one of ``b``, by
    start (merged sets: the overlaps are disjoint)."""
    got = sorted((max(s1, s2), min(e1, e2)) for s1, e1 in zip(a[0].tolist(), a[1].tolist())
                 for s2, e2 in zip(b[0].tolist(), b[1].tolist()) if max(s1, s2) < min(e1, e2))
    return np.array([x for x, _ in got], np.int64), np.array([y for _, y in got], np.int64)


@given(merged_sets(), merged_sets())
def test_intersect_equals_the_pairs(a, b):
    got = iv.intersect(a, b)
    want = intersect_by_pairs(a, b)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert iv.total(*got) == iv.total(*iv.intersect(b, a))
