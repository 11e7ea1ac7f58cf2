"""``frames.top_rows`` against its definition: the n rows with the largest values, largest first,
ties in row order (a stable sort of all of them), with repeated values around the cut."""

from __future__ import annotations

import numpy as np


def test_top_rows_equals_a_stable_sort_of_all():
    from nsysan.analyses.frames import top_rows

    rng = np.random.default_rng(1)
    for _ in range(300):
        values = rng.integers(0, int(rng.choice([3, 50, 10**6])), size=int(rng.integers(0, 80))).astype(np.int64)
        rows = np.sort(rng.choice(len(values), size=int(rng.integers(0, len(values) + 1)), replace=False))
        n = int(rng.integers(0, 15))
        want = rows[np.argsort(-values[rows], kind="stable")[:n]]
        before = values.copy()
        assert top_rows(values, rows, n).tolist() == want.tolist()
        assert values.tolist() == before.tolist()  # the caller's column is left as it was
