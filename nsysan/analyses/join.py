"""GPU operations joined to the CUDA API call that launched them, once, in O(n log n).

The join key is (process, correlation id): correlation ids are unique only within a process. Where
a corrupt export repeats a key, the first call (in trace order) wins, as a ``drop_duplicates`` would.
The API table is sorted by start time and correlation ids grow with time, so the stable sort below
runs over nearly sorted keys (timsort: close to linear).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.trace.model import Trace


def pack_keys(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """(pid, correlation id) as one int64: pid < 2^24, correlation id taken modulo 2^32."""
    return (np.asarray(pid, dtype=np.int64) << 32) | (np.asarray(corr, dtype=np.int64) & 0xFFFFFFFF)


def first_match(table_keys: np.ndarray, query_keys: np.ndarray) -> np.ndarray:
    """Index into ``table_keys`` of the first row equal to each query key, or -1."""
    if len(table_keys) == 0 or len(query_keys) == 0:
        return np.full(len(query_keys), -1, dtype=np.int64)
    order = np.argsort(table_keys, kind="stable")
    sk = table_keys[order]
    pos = np.searchsorted(sk, query_keys, side="left")
    pc = np.minimum(pos, len(sk) - 1)
    hit = (pos < len(sk)) & (sk[pc] == query_keys)
    return np.where(hit, order[pc], -1)


def with_launch_calls(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with the launching-call columns: as given when ``gpu_ops`` already joined them."""
    return ops if "api_start_ns" in ops.columns else attach_launch_calls(trace, ops)


def attach_launch_calls(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` plus the launching call: tid, api_start_ns, api_end_ns (-1 when the call is not in the
    trace) and api_name (categorical, NaN when missing)."""
    api = trace.cuda_api
    idx = first_match(pack_keys(api["pid"].to_numpy(), api["correlation_id"].to_numpy()),
                      pack_keys(ops["pid"].to_numpy(), ops["correlation_id"].to_numpy()))
    ok = idx >= 0
    safe = np.where(ok, idx, 0)

    def take(col: str) -> np.ndarray:
        if len(api) == 0:
            return np.full(len(ops), -1, dtype=np.int64)
        return np.where(ok, api[col].to_numpy()[safe], -1)

    if len(api):
        names = api["name"].array
        codes = np.where(ok, np.asarray(names.codes)[safe], -1)
        api_name = pd.Categorical.from_codes(codes, categories=names.categories, validate=False)
    else:
        api_name = pd.Categorical.from_codes(np.full(len(ops), -1), categories=pd.Index([], dtype=object))
    return ops.assign(tid=take("tid"), api_start_ns=take("start_ns"), api_end_ns=take("end_ns"), api_name=api_name)
