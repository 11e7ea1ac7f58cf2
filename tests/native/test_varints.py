"""The C varint columns (``_btree.varints``) against the numpy encoding."""

from __future__ import annotations

import numpy as np
import pytest

from nsysan.report import timeline
from nsysan.trace import direct

needs_c = pytest.mark.skipif(not hasattr(direct._btree, "lane"), reason="the C extension is not built")


@needs_c
def test_c_varints_equal_numpy():
    rng = np.random.default_rng(7)
    edges = np.array([0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**62, 2**63 - 1], dtype=np.int64)
    for _ in range(200):
        cols = tuple(rng.integers(0, 2 ** int(rng.integers(1, 63)), size=int(rng.integers(0, 500)), dtype=np.int64)
                     for _ in range(int(rng.integers(1, 6)))) + (edges,)
        assert direct._btree.varints(list(cols)) == b"".join(timeline.varint(c) for c in cols)
    with pytest.raises(ValueError):
        direct._btree.varints([np.array([3, -1], dtype=np.int64)])
    with pytest.raises(TypeError):
        direct._btree.varints([np.array([1.5])])
