"""The C galloping search (``_btree.search_sorted``, ``intervals.search``) against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st


@given(st.lists(st.integers(-2**62, 2**62), max_size=300), st.lists(st.integers(-2**62, 2**62), max_size=300),
       st.booleans(), st.sampled_from(["left", "right"]), st.integers(0, 5))
@example([], [5, 3], False, "left", 0)
@example([1, 1, 1, 2, 2], [1, 2, 0, 3, 1], False, "right", 0)
def test_galloping_search_equals_numpy(a, v, in_order, side, spread):
    """``intervals.search`` (the C gallop from the previous answer) gives numpy's positions for any
    needles, in order or not, duplicates and the int64 extremes included."""
    from nsysan.analyses import intervals as iv
    from nsysan.trace import direct

    if getattr(direct._btree, "search_sorted", None) is None:
        pytest.skip("the C extension is not built")
    hay = np.sort(np.array([x >> spread for x in a], dtype=np.int64))
    nee = np.array(sorted(v) if in_order else v, dtype=np.int64)
    out = np.empty(len(nee), dtype=np.int64)
    direct._btree.search_sorted(hay, nee, side == "right", out)  # the C pass itself, whatever the size
    assert out.tolist() == np.searchsorted(hay, nee, side=side).tolist()
    assert iv.search(hay, nee, side).tolist() == np.searchsorted(hay, nee, side=side).tolist()


def test_galloping_search_rejects_bad_buffers():
    from nsysan.trace import direct

    if getattr(direct._btree, "search_sorted", None) is None:
        pytest.skip("the C extension is not built")
    with pytest.raises(TypeError):
        direct._btree.search_sorted(np.zeros(3, np.int32), np.zeros(2, np.int64), False, np.zeros(2, np.int64))
    with pytest.raises(ValueError):
        direct._btree.search_sorted(np.zeros(3, np.int64), np.zeros(2, np.int64), False, np.zeros(3, np.int64))
    with pytest.raises(ValueError):  # a float64 output of the right size is not taken either
        direct._btree.search_sorted(np.zeros(3, np.int64), np.zeros(2, np.int64), False, np.zeros(2, np.float64))
