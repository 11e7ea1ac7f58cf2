"""``_launch_wait._in_iterations`` against its definition, one call at a time: a call belongs to the
last iteration starting by it (ties: the later one) when that iteration has not ended before it."""

from __future__ import annotations

import numpy as np


def test_in_iterations_equals_the_per_call_definition():
    from nsysan.rules._launch_wait import _in_iterations, _kept

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 200))
        a = np.sort(rng.integers(0, 10_000, size=n)).astype(np.int64)
        m = int(rng.integers(1, 12))
        s_it = np.sort(rng.integers(0, 10_000, size=m)).astype(np.int64)
        e_it = s_it + rng.integers(-5, 3_000, size=m)
        want_k, want_rows = [], []
        for i, x in enumerate(a.tolist()):
            k = max((j for j in range(m) if s_it[j] <= x), default=-1)
            if k >= 0 and x <= e_it[k]:
                want_k.append(k)
                want_rows.append(i)
        k, rows = _in_iterations(a, s_it, e_it)
        assert k.tolist() == want_k
        got_rows = list(range(n)) if rows is None else np.arange(n)[rows].tolist()
        assert got_rows == want_rows
        if rows is not None:  # the kept columns are those rows, views for one run
            (kept,) = _kept(rows, [a])
            assert kept.tolist() == a[want_rows].tolist()
            one_run = len(want_rows) > 0 and want_rows[-1] - want_rows[0] + 1 == len(want_rows)
            assert isinstance(rows, slice) == one_run
