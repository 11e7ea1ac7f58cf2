"""``finish._drop_nested_duplicates`` against a brute-force reading of its rule."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.trace import finish as finish_mod


def _kept_by_definition(df: pd.DataFrame) -> list[int]:
    """Rows kept: a row is dropped when an earlier row of its thread has its (positive) correlation
    id and its interval contains the row's."""
    first: dict[tuple[int, int], int] = {}
    kept = []
    for i, (tid, corr, st, en) in enumerate(zip(df["global_tid"], df["correlation_id"], df["start_ns"], df["end_ns"])):
        c = -1 if corr is pd.NA else int(corr)
        key = (int(tid), c)
        if c > 0 and key in first:
            j = first[key]
            if st >= df["start_ns"].iloc[j] and en <= df["end_ns"].iloc[j]:
                continue
        first.setdefault(key, i)
        kept.append(i)
    return kept


def test_nested_duplicates_dropped_as_defined():
    rng = np.random.default_rng(3)
    for k in range(300):
        n = int(rng.integers(2, 120))
        corr = rng.integers(-2, int(rng.integers(2, 40)), size=n)
        if k % 5 == 0:
            corr = rng.permutation(n) + int(rng.integers(-1, 3))  # every id once: the bitmap's answer
        if k % 7 == 0:
            corr = corr + 10**12  # ids too large for the bitmap
        ids = pd.array(corr, dtype="Int64")
        if k % 3 == 0:
            ids[rng.integers(0, n, size=2)] = pd.NA
        start = rng.integers(0, 1000, size=n)
        # threads of one process, or of several (ids repeat across processes: no row is a repeat then)
        pids = rng.integers(0, 3, size=n) if k % 2 else np.zeros(n, dtype=np.int64)
        gtid = (pids << 24) | rng.integers(0, 3, size=n)
        df = pd.DataFrame({"correlation_id": ids, "global_tid": gtid, "start_ns": start,
                           "end_ns": start + rng.integers(0, 200, size=n)})
        got = finish_mod._drop_nested_duplicates(df)
        want = df.iloc[_kept_by_definition(df)].reset_index(drop=True)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
        # the global ids left out (an extra column): pid and tid say the thread
        split = df.drop(columns="global_tid").assign(pid=(gtid >> 24).astype(np.int32),
                                                     tid=(gtid & 0xFFFFFF).astype(np.int32))
        got = finish_mod._drop_nested_duplicates(split)
        pd.testing.assert_frame_equal(got.reset_index(drop=True),
                                      split.iloc[_kept_by_definition(df)].reset_index(drop=True))
