"""The C timeline lane (``_btree.lane``, ``encode_lane``, ``encode_lane_rows``) against the numpy
encoding of the same ops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from nsysan.analyses import intervals as iv
from nsysan.report import timeline
from nsysan.trace import direct

needs_c = pytest.mark.skipif(not hasattr(direct._btree, "lane"), reason="the C extension is not built")


@needs_c
def test_c_lane_equals_numpy_encoding():
    rng = np.random.default_rng(11)
    for k in range(300):
        n = int(rng.integers(0, 400))
        start = rng.integers(-10**6, 10**12, size=n)
        if k % 3 == 0:
            start = np.sort(start)
        end = start + rng.integers(-1000, 10**7, size=n)  # some end before their start
        if k % 4 == 0 and n:
            start[: n // 2] = start[0]  # ties
        name, kind = rng.integers(0, 300, size=n), rng.integers(0, 10, size=n)
        depth = None if k % 2 else rng.integers(-2, 6, size=n)
        t0 = int(rng.integers(-10**6, 10**9))
        text_np, order_np = timeline.encode_ops(start - t0, end - t0, name, kind, depth)
        if k % 5 == 1:  # one kind for every op, as an int
            kind = np.full(n, 3)
            text_np, _ = timeline.encode_ops(start - t0, end - t0, name, kind, depth)
            kind = 3
        elif k % 5 == 2:  # narrow name ids and kind codes, taken as they are
            name, kind = name.astype(np.int32), kind.astype(np.int8)
        text, order, covered = timeline.encode_lane(start, end, name, kind, depth, t0)
        assert text == text_np
        # None: the rows as they are, only when the starts are sorted
        assert order is None or not bool((np.diff(start) >= 0).all())
        assert np.array_equal(np.arange(n) if order is None else order, order_np)
        ms, me = iv.merge(start, end) if n else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert covered == int(np.sum(me - ms))
    with pytest.raises(ValueError):
        direct._btree.lane(np.array([0]), np.array([5]), np.array([6]), np.array([-1]), np.array([0]), None, 0)
    with pytest.raises(IndexError):
        direct._btree.lane(np.array([3]), np.array([5]), np.array([6]), np.array([1]), np.array([0]), None, 0)


@needs_c
@given(st.lists(st.tuples(st.integers(-50, 10**6), st.integers(-5, 10**4), st.integers(0, 5), st.booleans()),
                min_size=1, max_size=120), st.integers(-10**6, 10**6), st.booleans())
@example([(5, 3, 1, True), (2, 4, 0, True)], 0, False)  # starts that decrease along the rows: no result
@example([(-40, 3, 1, True), (7, -2, 2, False), (9, 1, 0, True)], 0, True)  # a start before t0: clamped
def test_a_lane_read_through_its_rows_equals_its_copies(ops, t0, sort):
    """``encode_lane_rows`` (the C lane reading the whole columns at the lane's positions) gives the
    text and busy length that ``encode_lane`` gives on copies of the lane's rows, or None (starts
    that decrease along the rows) and the caller copies."""
    if sort:
        ops = sorted(ops)
    s = np.array([o[0] for o in ops], np.int64)
    e = s + np.array([o[1] for o in ops], np.int64)
    name = np.array([o[2] for o in ops], np.int8)
    kind = np.array([o[2] % 3 for o in ops], np.int8)
    rows = np.flatnonzero([o[3] for o in ops])
    if len(rows) == 0:
        return
    got = timeline.encode_lane_rows(s, e, name, kind, rows, t0)
    if bool((np.diff(s[rows]) < 0).any()):
        assert got is None
        return
    text, _, covered = timeline.encode_lane(s[rows], e[rows], name[rows], kind[rows], None, t0)
    assert got == (text, covered)
    assert timeline.encode_lane_rows(s, e, name, 4, rows, t0) == timeline.encode_lane(s[rows], e[rows], name[rows], 4,
                                                                                        None, t0)[::2]
