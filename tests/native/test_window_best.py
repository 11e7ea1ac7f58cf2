"""The C window choice (``_btree.window_best``) against the numpy path and by hand."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURE_NAMES


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_the_c_window_choice_equals_the_numpy_one(analysis, load, name, monkeypatch):
    """``_btree.window_best`` (each gap's sync flag and best entry in one C pass) gives the gap
    frame the numpy path gives: causes, activities, breakdowns, on every fixture."""
    from nsysan.analyses import gaps as G

    if G._fast_window_best() is None:
        pytest.skip("the C extension is not built")
    a = analysis(name)
    if len(a.ops) == 0:
        pytest.skip("no GPU ops")
    fast = G.idle_gaps(load(name), a.ops, a.capture)
    monkeypatch.setattr(G, "_fast_window_best", lambda: None)
    slow = G.idle_gaps(load(name), a.ops, a.capture)
    assert fast["cause"].astype(str).tolist() == slow["cause"].astype(str).tolist()
    assert fast["activity"].astype(str).tolist() == slow["activity"].astype(str).tolist()
    assert fast["breakdown"].tolist() == slow["breakdown"].tolist()
    assert fast.drop(columns=["breakdown"]).equals(slow.drop(columns=["breakdown"]))


def test_window_best_by_hand():
    """Ties go to the first entry; source 0 over half the span wins, then source 1, then any source
    with at least the share; the sync flag sums source 0's sync codes (code -1 at the last slot)."""
    from nsysan.trace import direct

    fast = getattr(direct._btree, "window_best", None)
    if fast is None:
        pytest.skip("the C extension is not built")
    win = np.array([0, 0, 0, 1, 1, 3], dtype=np.int32)
    src = np.array([0, 1, 0, 1, 2, 2], dtype=np.int8)
    code = np.array([1, 0, -1, 0, 4, 0], dtype=np.int32)
    ns = np.array([60, 90, 60, 40, 40, 5], dtype=np.int64)
    span = np.array([100, 100, 10, 100], dtype=np.int64)
    sync = np.array([False, True, True])  # codes 0, 1; code -1 at the last slot (a sync call too)
    b, s = fast(win, src, code, ns, span, sync, 0.1)
    # window 0: source 0's best is 60 (first of the tie) and over half: entry 0; sync 60 + 60 > 100
    # window 1: no source 0; source 1's 40 is not over half; any source: 40 (first) >= 10: entry 3
    # window 2: no entries; window 3: 5 < 0.1 * 100: none
    assert np.frombuffer(b, np.int64).tolist() == [0, 3, -1, -1]
    assert np.frombuffer(s, np.uint8).tolist() == [1, 0, 0, 0]
    with pytest.raises(ValueError):  # windows not ascending
        fast(win[::-1].copy(), src, code, ns, span, sync, 0.1)
    with pytest.raises(ValueError):  # a source-0 code beyond the sync table
        fast(win, src, np.array([5, 0, -1, 0, 4, 0], np.int32), ns, span, sync, 0.1)
    with pytest.raises(TypeError):
        fast(win.astype(np.float64), src, code, ns, span, sync, 0.1)
