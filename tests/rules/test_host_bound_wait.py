"""``host_bound_gap._wait_ns`` against its definition: each gap's wait is the sum of the gaps of its
device that end at the same launching call, on gaps in (device, call) order (the runs as they
stand) and out of it (the sort)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def test_wait_ns_equals_the_sum_over_its_device_and_call():
    from nsysan.rules.host_bound_gap import _wait_ns

    rng = np.random.default_rng(3)
    for k in range(200):
        n = int(rng.integers(0, 60))
        dev = rng.integers(0, 3, size=n)
        call = rng.integers(0, 8, size=n) * 1000
        if k % 2:  # in (device, call) order: the path without a sort
            o = np.lexsort((call, dev))
            dev, call = dev[o], call[o]
        full = pd.DataFrame({"device_id": dev, "api_start_ns": call, "gap_ns": rng.integers(1, 500, size=n)})
        rows = np.sort(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)) if n else np.zeros(0, np.int64)
        got = _wait_ns(full, rows)
        d, c, g = (full[x].to_numpy()[rows] for x in ("device_id", "api_start_ns", "gap_ns"))
        want = [int(g[(d == d[i]) & (c == c[i])].sum()) for i in range(len(rows))]
        assert np.asarray(got).tolist() == want
