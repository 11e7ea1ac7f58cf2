"""The C clipped sums (``_native.windows.range_sums``) against the numpy path."""

from __future__ import annotations

import numpy as np
import pytest

from nsysan.trace import direct

needs_c = pytest.mark.skipif(not hasattr(direct._btree, "lane"), reason="the C extension is not built")


@needs_c
@pytest.mark.parametrize("code_type", [np.int8, np.int16, np.int32, np.int64])
def test_c_clipped_sums_equal_numpy(code_type, monkeypatch):
    """``range_sums`` through the C pass (name codes in their own width, windows and codes back
    as int32) equals the numpy path, with and without row positions and the end filter."""
    import types

    from nsysan import _native
    from nsysan._native.windows import range_sums

    rng = np.random.default_rng(5)
    for k in range(60):
        n = int(rng.integers(0, 300))
        st_ = np.sort(rng.integers(0, 10**6, size=n)).astype(np.int64)
        en = st_ + rng.integers(0, 5000, size=n)
        codes = rng.integers(-1, 100, size=n).astype(code_type)
        cats = np.array([f"n{i}" for i in range(100)], dtype=object)
        m = int(rng.integers(0, 50))
        lo = np.sort(rng.integers(0, 10**6, size=m)).astype(np.int64)
        hi = lo + rng.integers(1, 20000, size=m)
        rows = np.sort(rng.choice(n, size=n // 2, replace=False)) if (k % 2 and n) else None
        base_s, base_e = (st_, en) if rows is None else (st_[rows], en[rows])
        i0 = np.searchsorted(np.maximum.accumulate(base_e) if len(base_e) else base_e, lo, side="right")
        i1 = np.searchsorted(base_s, hi, side="left")
        filt = bool(k % 3 == 0)
        fast = range_sums(0, st_, en, codes, len(cats), lo, hi, i0, i1, rows, filt)
        with monkeypatch.context() as mp:
            mp.setattr(_native, "_btree", types.SimpleNamespace())
            slow = range_sums(0, st_, en, codes, len(cats), lo, hi, i0, i1, rows, filt)
        assert fast[0].dtype == np.int32 and fast[2].dtype == np.int32
        for x, y in zip(fast, slow):
            assert x.tolist() == y.tolist()
