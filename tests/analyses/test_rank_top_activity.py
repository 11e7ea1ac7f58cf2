"""``ranks._top_activity`` against the group-by it stands for: the activity with the most host-caused
idle time (its sum per name), on categorical and plain columns, with names missing, unused and tied."""

from __future__ import annotations

import numpy as np
import pandas as pd


def test_top_activity_equals_the_group_by():
    from nsysan.analyses.ranks import _top_activity

    rng = np.random.default_rng(4)
    names = ["cuda_api:cudaStreamSynchronize", "osrt:poll", "nvtx:step", "untraced"]
    for k in range(300):
        n = int(rng.integers(0, 12))
        act = rng.choice(names + [None], size=n)
        gap = rng.choice([10_000, 20_000, 30_000], size=n)  # few values: ties are common
        cats = names if k % 3 else names[:3] + ["unused"] + names[3:]
        col = pd.Categorical(act, categories=cats) if k % 2 else pd.array(act, dtype=object)
        host = pd.DataFrame({"activity": col, "gap_ns": gap.astype(np.int64)})
        want = ""
        if len(host):
            act_sum = host.groupby("activity", sort=True)["gap_ns"].sum().sort_values(ascending=False)
            want = str(act_sum.index[0]) if len(act_sum) else ""
        assert _top_activity(host) == want
