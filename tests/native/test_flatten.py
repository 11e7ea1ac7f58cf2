"""The C sweep ``_btree.flatten`` (``ThreadActivity.exclusive_sums``' one layer) against the numpy
passes it replaces (per-source innermost, difference and interleave), on random nested calls of many
rows and windows, and its refusals of bad input."""

from __future__ import annotations

import numpy as np
import pytest

from nsysan.trace import direct

needs_c = pytest.mark.skipif(direct.c_pass("flatten") is None, reason="the C extension is not built")


def _layers(rng, n_sources):
    """Random start-sorted calls per source, nested and overlapping, with their Reach."""
    from nsysan.analyses.thread_activity import SOURCES, Reach

    out = []
    for source in SOURCES[:n_sources]:
        n = int(rng.integers(0, 400))
        st = np.sort(rng.integers(0, 200_000, size=n)).astype(np.int64)
        en = st + rng.integers(0, int(rng.choice([50, 2_000, 40_000])), size=n)
        codes = rng.integers(-1, 30, size=n).astype(rng.choice([np.int8, np.int16, np.int32, np.int64]))
        cats = np.array([f"{source}{i}" for i in range(30)], dtype=object)
        out.append((source, st, en, codes, cats, Reach(en)))
    return out


@needs_c
def test_c_flatten_sums_equal_the_numpy_layer():
    """Per window and (source, name), the time of the C sweep's pieces equals that of the numpy
    layer (``_flatten``) summed by ``_flat_sums``; the pieces are disjoint, start-sorted and inside the
    windows."""
    from nsysan.analyses import intervals as iv
    from nsysan.analyses import thread_activity as G

    rng = np.random.default_rng(11)
    fast = direct.c_pass("flatten")
    for _ in range(200):
        layers = _layers(rng, int(rng.integers(1, 4)))
        m = int(rng.integers(1, 60))
        lo = np.sort(rng.integers(0, 210_000, size=m)).astype(np.int64)
        hi = lo + rng.integers(1, 8_000, size=m)
        if rng.random() < 0.5:  # sorted, disjoint windows (one device's gaps), some touching
            hi = np.minimum(hi, np.append(lo[1:], hi[-1]))
            keep = hi > lo
            lo, hi = lo[keep], hi[keep]
        base = np.zeros(len(G.SOURCES) + 1, dtype=np.int64)
        for si, source in enumerate(G.SOURCES):
            base[si + 1] = base[si] + sum(len(c) + 1 for s, _a, _b, _c, c, _r in layers if s == source)
        names_c: dict = {}
        names_n: dict = {}
        got = G._flatten_c(fast, layers, lo, hi, base, names_c, False)
        assert got is not None
        (s, e, c), swept = got
        want, _ = G._flatten(layers, lo, hi, base, names_n, False)
        assert swept is None
        assert bool((e > s).all()) and bool((s[1:] >= e[:-1]).all())
        wl, wh = iv.merge(lo, hi)
        k = np.searchsorted(wl, s, side="right") - 1
        assert bool((k >= 0).all()) and bool((e <= wh[k]).all())
        got_sums = G._flat_sums((s, e, c), lo, hi, base) if s.size else None
        want_sums = G._flat_sums(want, lo, hi, base) if want[0].size else None
        if got_sums is None or want_sums is None:
            assert got_sums is None or int(got_sums[3].sum()) == 0
            assert want_sums is None or int(want_sums[3].sum()) == 0
            continue
        for x, y in zip(got_sums, want_sums):
            assert x.tolist() == y.tolist()
        if bool((lo[1:] >= hi[:-1]).all()):  # the sums straight from the sweep, no pieces
            given, _ = G._c_layers(layers, int(lo[0]), int(hi[-1]), base, {}, False, (lo, hi))
            w, c, v = (np.frombuffer(b, dtype=t)
                       for b, t in zip(fast(given, lo, hi, True), (np.int32, np.int64, np.int64)))
            direct_sums = G._by_source(w, c, v, base)
            for x, y in zip(direct_sums, want_sums):
                assert x.tolist() == y.tolist()
        for si in set(got_sums[1].tolist()):  # the name tables of the sources with time
            assert names_c[G.SOURCES[si]] is names_n[G.SOURCES[si]]


@needs_c
def test_c_flatten_refuses_bad_input():
    fast = direct.c_pass("flatten")
    st = np.arange(4, dtype=np.int64)
    w = np.array([0], np.int64), np.array([10], np.int64)
    with pytest.raises(ValueError):
        fast([(st, st[:3] + 1, st, 0, 0, 4)], *w)  # ends of another length
    with pytest.raises(ValueError):
        fast([(st, st + 1, st, 0, 0, 5)], *w)  # rows past the columns
    with pytest.raises(ValueError):
        fast([(st, st + 1, st, 0, 0, 4)] * 9, *w)  # more layers than the sweep holds
    with pytest.raises(TypeError):
        fast([(st.astype(np.float64), st + 1, st, 0, 0, 4)], *w)  # starts not int64
    with pytest.raises(ValueError):
        fast([(st, st + 1, st, 0, 0, 4)], w[0], np.array([1, 2], np.int64))  # windows of two lengths
    with pytest.raises(ValueError):  # overlapping windows
        fast([(st, st + 1, st, 0, 0, 4)], np.array([0, 3], np.int64), np.array([5, 8], np.int64), True)
    s, e, c = (np.frombuffer(b, np.int64) for b in fast([(st, st + 2, st, 100, 0, 4)], *w))
    # calls [0,2) [1,3) [2,4) [3,5): the latest-starting open one owns each moment
    assert s.tolist() == [0, 1, 2, 3] and e.tolist() == [1, 2, 3, 5] and c.tolist() == [100, 101, 102, 103]
    # the same, summed in windows [0, 2) and [2, 10): window, code, ns
    w_, c_, v_ = (np.frombuffer(b, t) for b, t in zip(fast([(st, st + 2, st, 100, 0, 4)], np.array([0, 2], np.int64),
                                                           np.array([2, 10], np.int64), True),
                                                      (np.int32, np.int64, np.int64)))
    assert w_.tolist() == [0, 0, 1, 1] and c_.tolist() == [100, 101, 102, 103] and v_.tolist() == [1, 1, 1, 2]
