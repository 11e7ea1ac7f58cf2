"""``gpu.Busy`` over broadcast columns."""

from __future__ import annotations

import numpy as np
import pandas as pd


def test_busy_stream_keys_of_broadcast_columns_equal_packed_keys():
    """Busy.stream_keys over the loader's broadcast pid and stream columns gives the packed key of
    every selected op, as over full columns."""
    from nsysan.analyses import gpu
    from nsysan.trace.model import constant_column

    n = 5000
    st_ = np.arange(n, dtype=np.int64) * 10
    for pid, stream in ((constant_column(77, n, np.int32), constant_column(13, n, np.int32)),
                        (np.full(n, 77, np.int32), np.full(n, 13, np.int32))):
        ops = pd.DataFrame({"start_ns": st_, "end_ns": st_ + 5, "device_id": constant_column(0, n, np.int32),
                            "stream_id": stream, "pid": pid, "op": pd.Categorical(["kernel"] * n),
                            "role": pd.Categorical(["compute"] * n), "kind": pd.Categorical([""] * n)}, copy=False)
        b = gpu.Busy(ops)
        sel = (st_ % 3) == 0
        keys = b.stream_keys(sel)
        assert keys.tolist() == [(77 << 32) | 13] * int(sel.sum())
