"""``frames.rows_of``: views of runs, copies otherwise."""

from __future__ import annotations

import numpy as np


def test_rows_of_gives_views_of_runs_and_copies_otherwise():
    from nsysan.analyses.frames import rows_of

    v = np.arange(5000, dtype=np.int64) * 3
    assert rows_of(v, np.arange(5000)) is v
    run = rows_of(v, np.arange(10, 4000))
    assert np.shares_memory(run, v) and run.tolist() == v[10:4000].tolist()
    holes = np.r_[np.arange(10, 2000), np.arange(2001, 4000)]
    got = rows_of(v, holes)
    assert not np.shares_memory(got, v) and got.tolist() == v[holes].tolist()
