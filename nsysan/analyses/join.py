"""GPU operations joined to the CUDA API call that launched them, once, in O(n log n).

The join key is (process, correlation id): correlation ids are unique only within a process. Where
a corrupt export repeats a key, the first call (in trace order) wins, as a ``drop_duplicates`` would.
Where the keys of the table are dense (one process: correlation ids count up), the match is a
direct-address table (linear); else a stable sort of the keys, which are nearly sorted (the API
table is sorted by start time and correlation ids grow with time: timsort is close to linear).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses.frames import compact, compact_codes
from nsysan.analyses.frames import take as take_rows
from nsysan.trace.model import Trace, as_column


def pack_keys(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """(pid, correlation id) as one int64: pid < 2^24, correlation id taken modulo 2^32."""
    pid, corr = np.asarray(pid), np.asarray(corr)
    if pid.dtype.kind == "i" and corr.dtype.kind == "i":
        # int32 ids (as the loader narrows them) widen inside the ufuncs, a chunk at a time: no
        # int64 copy of each column first
        key = np.left_shift(pid, 32, dtype=np.int64)
        key |= np.bitwise_and(corr, 0xFFFFFFFF, dtype=np.int64)
        return key
    return (pid.astype(np.int64) << 32) | (corr.astype(np.int64) & 0xFFFFFFFF)


def call_keys(call_pid: np.ndarray, call_corr: np.ndarray, op_pid: np.ndarray,
              op_corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys that join GPU ops to their launching calls: ``pack_keys`` of each side, or, when one
    process made every call and op and the ids lie in [0, 2^32) (where the packing is exact), the
    correlation ids themselves (no int64 copy of 4M calls' keys)."""
    from nsysan.analyses.frames import distinct

    if len(call_pid) and len(op_pid):
        procs = distinct(np.concatenate([distinct(call_pid), distinct(op_pid)]))
        in_range = all(len(c) == 0 or (int(c.min()) >= 0 and int(c.max()) < 2**32) for c in (call_corr, op_corr))
        if len(procs) == 1 and in_range:
            return np.asarray(call_corr), np.asarray(op_corr)
    return pack_keys(call_pid, call_corr), pack_keys(op_pid, op_corr)


def first_match(table_keys: np.ndarray, query_keys: np.ndarray) -> np.ndarray:
    """Index into ``table_keys`` of the first row equal to each query key, or -1."""
    if len(table_keys) == 0 or len(query_keys) == 0:
        return np.full(len(query_keys), -1, dtype=np.int64)
    n = len(table_keys)
    if n > 1 and bool((table_keys[1:] >= table_keys[:-1]).all()):
        # keys in order (one process's calls in time order carry rising correlation ids): a binary
        # search finds each key's first row, with no table of the ids' whole span (18M slots, 72 MB,
        # for the 329 MB trace's 4M calls)
        q = np.asarray(query_keys)
        pos = np.searchsorted(table_keys, q, side="left")  # (worked in place: one int64 per query)
        past = pos >= n
        np.minimum(pos, n - 1, out=pos)
        past |= table_keys[pos] != q
        pos[past] = -1
        return pos
    lo, hi = int(table_keys.min()), int(table_keys.max())
    if hi - lo < 8 * len(table_keys) + 1024 and len(table_keys) < 2**31:
        # dense keys (one process: CUPTI's correlation ids span 3.7-4.5 times the traced calls in our
        # traces): a direct-address table, 4 bytes a slot; offsets in the keys' own width (int32 ids:
        # no int64 copies), and no key twice when every key filled a slot of its own
        slot = np.full(hi - lo + 1, -1, dtype=np.int32)
        width = table_keys.dtype if hi - lo < 2**31 else np.int64
        slot[np.subtract(table_keys, lo, dtype=width)] = np.arange(len(table_keys), dtype=np.int32)
        if int(np.count_nonzero(slot >= 0)) == len(table_keys):  # (else: the sort below)
            q = np.asarray(query_keys)
            inside = (q >= lo) & (q <= hi)
            if bool(inside.all()):
                return slot[np.subtract(q, lo, dtype=q.dtype)].astype(np.int64)
            return np.where(inside, slot[np.where(inside, q - lo, 0)], -1).astype(np.int64)
    order = np.argsort(table_keys, kind="stable")
    sk = table_keys[order]
    pos = np.searchsorted(sk, query_keys, side="left")
    pc = np.minimum(pos, len(sk) - 1)
    hit = (pos < len(sk)) & (sk[pc] == query_keys)
    return np.where(hit, order[pc], -1)


def launched(ops: pd.DataFrame) -> np.ndarray:
    """Which ops have their launching call in the trace (``attach_launch_calls``: api_name set; the
    call's start is -1 where it is missing, and a real call's time may be negative in a test trace)."""
    if "api_name" in ops.columns:
        return ops["api_name"].notna().to_numpy()
    if "api_start_ns" in ops.columns:
        return ops["api_start_ns"].to_numpy() != -1
    return np.zeros(len(ops), dtype=bool)


def with_launch_calls(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with the launching-call columns: as given when ``gpu_ops`` already joined them."""
    return ops if "api_start_ns" in ops.columns else attach_launch_calls(trace, ops)


def attach_launch_calls(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` plus the launching call: tid, api_start_ns, api_end_ns (-1 when the call is not in the
    trace) and api_name (categorical, NaN when missing)."""
    api = trace.cuda_api
    idx = first_match(*call_keys(api["pid"].to_numpy(), api["correlation_id"].to_numpy(),
                                 ops["pid"].to_numpy(), ops["correlation_id"].to_numpy()))
    ok = idx >= 0
    every = bool(ok.all())  # the common case: every launching call is in the trace
    safe = idx if every else np.where(ok, idx, 0)

    def take(col: str) -> np.ndarray:
        if len(api) == 0:
            return np.full(len(ops), -1, dtype=np.int64)
        values = take_rows(api[col].to_numpy(), safe)  # one thread's tid: one broadcast value
        return values if every else np.where(ok, values, -1)

    if len(api):
        names = api["name"].array
        codes = np.asarray(names.codes)[safe]
        codes = codes if every else np.where(ok, codes, -1)
        api_name = pd.Categorical.from_codes(codes, categories=names.categories, validate=False)
    else:
        api_name = pd.Categorical.from_codes(np.full(len(ops), -1), categories=pd.Index([], dtype=object))
    # one launching thread (the usual case): its tid and name codes as broadcast values, no columns
    return ops.assign(tid=as_column(ops, compact(take("tid"))), api_start_ns=take("start_ns"),
                      api_end_ns=take("end_ns"), api_name=as_column(ops, compact_codes(api_name)))
