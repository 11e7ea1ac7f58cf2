"""``thread_activity``: a thread's rows by comparison or by sort, and ``Reach`` against the
running maximum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from test_gaps import _same_gaps

from nsysan.analyses import intervals as iv


@pytest.mark.parametrize("name", ["two_procs", "train_dataloader", "hf_generate", "ddp_straggler", "waits_python"])
def test_thread_rows_by_comparison_equal_the_sorted_grouping(analysis, load, name, monkeypatch):
    """A thread's rows of a source several threads share: found by a comparison for the first
    threads asked for, by one sort by thread after that; the same gaps either way."""
    from nsysan.analyses import gaps as G
    from nsysan.analyses import thread_activity as TA

    a = analysis(name)
    if len(a.ops) == 0:
        pytest.skip("no GPU ops")
    by_compare = G.idle_gaps(load(name), a.ops, a.capture)
    monkeypatch.setattr(TA, "FEW_THREADS", 0)
    _same_gaps(G.idle_gaps(load(name), a.ops, a.capture), by_compare)
    t = load(name)
    index = TA.ThreadActivity(t)
    for source, df in index._sources:  # rows by hand: the thread's, ascending; every row as a slice
        for p, tid in set(zip(df["pid"].tolist(), df["tid"].tolist())):
            got = index._thread_rows(source, df, int(p), int(tid))
            want = np.flatnonzero((df["pid"].to_numpy() == p) & (df["tid"].to_numpy() == tid))
            assert (np.arange(len(df))[got] if isinstance(got, slice) else got).tolist() == want.tolist()


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 300)), max_size=60),
       st.lists(st.integers(-10, 900), min_size=1, max_size=12), st.sampled_from([1, 2, 3, 4096]), st.data())
@example([(0, 300), (10, 5), (20, 5), (400, 1)], [15, 0, 299, 300], 2, None)  # one long call keeps the maximum up
def test_reach_searches_equal_the_running_maximum(calls, xs, block, data):
    """``thread_activity.Reach`` (block prefix maxima, the exact running maximum only over the rows a search
    needs) answers as ``searchsorted`` on the full running maximum of the ends, capped at ``stop``;
    and ``_touching`` with it gives exactly the calls that overlap a window (brute force)."""
    from nsysan.analyses import thread_activity as G

    calls.sort()
    s = np.array([c[0] for c in calls], np.int64)
    e = s + np.array([c[1] for c in calls], np.int64)
    x = np.array(xs, np.int64)
    saved = G.REACH_BLOCK
    G.REACH_BLOCK = block
    try:
        r = G.Reach(e)
        stop = data.draw(st.integers(0, len(e))) if data is not None else len(e)
        want = np.minimum(np.searchsorted(np.maximum.accumulate(e), x, side="right"), stop) if len(e) else 0 * x
        assert r.search(x, stop).tolist() == (want if r.blocks is not None else
                                               np.searchsorted(e, x, side="right")).tolist()
        wl, wh = iv.merge(x, x + 7)
        rows = G._touching(s, e, r, wl, wh)
        hit = [i for i in range(len(s)) if any(s[i] < b and a < e[i] for a, b in zip(wl.tolist(), wh.tolist()))]
        if rows is None:  # every call, and they never overlap (calls touching no window add nothing)
            assert len(s) < 2 or bool((s[1:] >= e[:-1]).all())
        else:
            assert rows.tolist() == hit
    finally:
        G.REACH_BLOCK = saved
