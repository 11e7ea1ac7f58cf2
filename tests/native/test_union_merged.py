"""The C union of two merged interval sets (``_btree.union_merged``, read by ``intervals.union``)
against the numpy path and against ``merge`` of both sets together."""

from __future__ import annotations

import numpy as np
import pytest

from nsysan.trace import direct

needs_c = pytest.mark.skipif(direct.c_pass("union_merged") is None, reason="the C extension is not built")


def _merged(rng, n):
    from nsysan.analyses import intervals as iv

    s = rng.integers(0, 5_000, size=n).astype(np.int64)
    return iv.merge(s, s + rng.integers(0, 300, size=n))


@needs_c
def test_c_union_equals_numpy_and_merge_of_both(monkeypatch):
    from nsysan.analyses import intervals as iv

    rng = np.random.default_rng(9)
    for _ in range(400):
        a, b = _merged(rng, int(rng.integers(0, 40))), _merged(rng, int(rng.integers(0, 40)))
        fast = iv.union(a, b)
        with monkeypatch.context() as mp:
            mp.setattr(iv, "c_pass", lambda name: None)
            slow = iv.union(a, b)
        want = iv.merge(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
        for x, y, z in zip(fast, slow, want):
            assert x.tolist() == y.tolist() == z.tolist()


@needs_c
def test_c_union_refuses_bad_input():
    fast = direct.c_pass("union_merged")
    a = np.arange(3, dtype=np.int64)
    out = np.empty(6, np.int64), np.empty(6, np.int64)
    with pytest.raises(ValueError):
        fast(a, a[:2], a, a, *out)  # ends of another length
    with pytest.raises(ValueError):
        fast(a, a, a, a, out[0][:5], out[1])  # no room for both sets
    with pytest.raises(TypeError):
        fast(a.astype(np.float64), a, a, a, *out)
    with pytest.raises(TypeError):
        fast(a, a, a, a, out[0].astype(np.int32), out[1])
    with pytest.raises((TypeError, ValueError, BufferError)):
        ro = out[0].copy()
        ro.flags.writeable = False
        fast(a, a, a, a, ro, out[1])  # an output it may not write
    k = fast(np.array([0, 10], np.int64), np.array([5, 12], np.int64), np.array([5, 20], np.int64),
             np.array([7, 25], np.int64), *out)
    # [0,5) and [5,7) touch: one interval
    assert k == 3 and out[0][:k].tolist() == [0, 10, 20] and out[1][:k].tolist() == [7, 12, 25]
