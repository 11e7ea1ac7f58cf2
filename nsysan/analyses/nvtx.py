"""NVTX ranges: nesting (self vs total time) and GPU projection.

**Containment rule.** A GPU operation (kernel, memcpy, memset, graph launch) belongs to an NVTX
range when the CUDA API call that launched it *started* on the range's thread inside the range
[start, end]. Nested ranges each count it (a range's projection covers its children's work), but
``self_ns`` counts CPU time only once: a push/pop range's self time is its duration minus its
direct children's durations.

**Projection.** A range's GPU projection is [first owned GPU op start, last owned GPU op end];
``gpu_after_end_ns`` is how long that work kept running after the range closed on the CPU (what a
CPU timer around the range would miss). Computed in O(n log n): per thread, launches sorted by API
start, a binary search per range and a sparse-table min/max (nsys 2022.4 did not finish at 1M kernels).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.frames import group_rows, one_key, sort_rows
from nsysan.analyses.intervals import min_max_over
from nsysan.analyses.join import with_launch_calls
from nsysan.trace.model import Trace


def owned_ops(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """Every GPU op with its launching call's thread and API start (join on pid + correlation id),
    sorted by (pid, tid, api_start_ns, correlation_id)."""
    ops = with_launch_calls(trace, ops)
    cols = ["pid", "correlation_id", "start_ns", "end_ns", "op", "tid", "api_start_ns"]
    found = ops["api_start_ns"].to_numpy() >= 0
    j = ops[cols] if bool(found.all()) else ops.loc[found, cols]  # all found: columns shared, no copy
    return sort_rows(j, (j["correlation_id"].to_numpy(), j["api_start_ns"].to_numpy(), j["tid"].to_numpy(),
                         j["pid"].to_numpy()))


def _nesting(r: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """depth, parent index (-1 for roots) and self time of push/pop ranges, per thread."""
    n = len(r)
    depth = [0] * n
    parent = [-1] * n
    child_sum = [0] * n
    starts_a, ends_a = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    # Python lists in the loop: a list item is read about ten times faster than a numpy scalar
    starts, ends = starts_a.tolist(), ends_a.tolist()
    pushpop = (r["style"] == "PushPop").to_numpy().tolist()
    for _, idx in r.groupby(["pid", "tid"], sort=False).indices.items():
        stack: list[int] = []
        for i in idx.tolist():  # r is sorted by start asc, duration desc
            if not pushpop[i]:
                continue
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            if stack and ends[i] <= ends[stack[-1]]:
                parent[i] = stack[-1]
                depth[i] = len(stack)
                child_sum[stack[-1]] += ends[i] - starts[i]
            stack.append(i)
    if child_sum and max(child_sum) >= 1 << 63:  # as int64 sums wrapped (a hostile trace's times)
        child_sum = [(c + (1 << 63)) % (1 << 64) - (1 << 63) for c in child_sum]
    return (np.array(depth, dtype=np.int64), np.array(parent, dtype=np.int64),
            (ends_a - starts_a) - np.array(child_sum, dtype=np.int64))


def ranges(trace: Trace, ops: pd.DataFrame, owned: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per closed NVTX range: name, style, pid, tid, start_ns, end_ns, dur_ns, domain, depth, parent,
    self_ns, gpu_ops (launches with GPU work: distinct correlation ids), proj_start_ns, proj_end_ns, proj_ns, gpu_after_end_ns (projection columns are
    -1/0 when the range launched no GPU work). ``owned`` is ``owned_ops(trace, ops)`` when the caller
    already has it."""
    nv = trace.nvtx
    r = nv.loc[(nv["style"] != "Mark") & nv["end_ns"].notna()]
    r = r.assign(end_ns=r["end_ns"].astype("int64"), dur_ns=r["dur_ns"].astype("int64"),
                 name=r["name"].astype(str)).reset_index(drop=True)
    r = r[["name", "style", "pid", "tid", "start_ns", "end_ns", "dur_ns", "domain"]]
    if len(r) == 0:
        return r.assign(depth=0, parent=0, self_ns=0, gpu_ops=0, proj_start_ns=0, proj_end_ns=0, proj_ns=0,
                        gpu_after_end_ns=0)
    depth, parent, self_ns = _nesting(r)
    n = len(r)
    gpu_count = np.zeros(n, dtype=np.int64)
    p_start = np.full(n, -1, dtype=np.int64)
    p_end = np.full(n, -1, dtype=np.int64)
    if owned is None:
        owned = owned_ops(trace, ops)
    o_pid, o_tid = owned["pid"].to_numpy(), owned["tid"].to_numpy()
    only = one_key(o_pid, o_tid)
    # one thread: all of owned (None), no array of every row's position
    by_thread: dict[Any, Any] = {only: None} if only is not None else dict(group_rows(o_pid, o_tid))
    for key, idx in r.groupby(["pid", "tid"], sort=False).indices.items():
        if key not in by_thread:
            continue
        rows = by_thread[key]
        # owned is sorted by (pid, tid, api_start_ns), so each slice is too; one thread: no copy
        o = owned if rows is None or len(rows) == len(owned) else owned.iloc[rows]
        api_start = o["api_start_ns"].to_numpy()
        corr = o["correlation_id"].to_numpy()
        first = np.ones(len(o), dtype=bool)  # one launch = one correlation id (graph nodes share it)
        np.not_equal(corr[1:], corr[:-1], out=first[1:])
        # launches before each position: int32 where they fit (a count per op of a million-op thread)
        launches_before = np.zeros(len(o) + 1, dtype=np.int32 if len(o) < 1 << 31 else np.int64)
        np.cumsum(first, out=launches_before[1:])
        del first
        lo = np.searchsorted(api_start, r["start_ns"].to_numpy()[idx], side="left")
        hi = np.searchsorted(api_start, r["end_ns"].to_numpy()[idx], side="right")
        has = hi > lo
        gpu_count[idx] = launches_before[hi] - launches_before[lo]
        if has.any():
            mn, mx = min_max_over(o["start_ns"].to_numpy(), o["end_ns"].to_numpy(), lo[has], hi[has])
            p_start[idx[has]] = mn
            p_end[idx[has]] = mx
    has_gpu = gpu_count > 0
    proj = np.where(has_gpu, p_end - p_start, 0)
    after = np.where(has_gpu, np.maximum(p_end - r["end_ns"].to_numpy(), 0), 0)
    return r.assign(depth=depth, parent=parent, self_ns=self_ns, gpu_ops=gpu_count, proj_start_ns=p_start,
                    proj_end_ns=p_end, proj_ns=proj, gpu_after_end_ns=after)


def range_summary(rg: pd.DataFrame) -> pd.DataFrame:
    """Per (name, style): count, CPU duration stats (as nvtx_sum), self_total_ns, proj_total_ns (as
    nvtx_gpu_proj_sum's Total Proj Time), gpu_ops, max_gpu_after_end_ns."""
    from nsysan.analyses.summaries import duration_stats, with_share

    stats = with_share(duration_stats(rg, ["name", "style"]))
    if len(rg) == 0:
        return stats.assign(self_total_ns=0, proj_total_ns=0, gpu_ops=0, max_gpu_after_end_ns=0)
    fast = _extra_by_codes(rg, stats)
    if fast is not None:
        return fast
    extra = rg.groupby(["name", "style"], sort=True).agg(
        self_total_ns=("self_ns", "sum"), proj_total_ns=("proj_ns", "sum"), gpu_ops=("gpu_ops", "sum"),
        max_gpu_after_end_ns=("gpu_after_end_ns", "max")).reset_index()
    return stats.merge(extra, on=["name", "style"], how="left")


def _extra_by_codes(rg: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame | None:
    """``stats`` (one row per (name, style) of ``rg``) with range_summary's four extra columns, exact
    per (name, style) (``frames.per_key``: no group-by and no merge); None when a key is missing or
    not a string, or a column is not int64 (pandas then)."""
    from nsysan.analyses.frames import per_key

    got = per_key([rg["name"], rg["style"]],
                  {"self_total_ns": (rg["self_ns"].to_numpy(), "sum"), "proj_total_ns": (rg["proj_ns"].to_numpy(), "sum"),
                   "gpu_ops": (rg["gpu_ops"].to_numpy(), "sum"),
                   "max_gpu_after_end_ns": (rg["gpu_after_end_ns"].to_numpy(), "max")},
                  [stats["name"].tolist(), stats["style"].tolist()])
    return None if got is None else stats.assign(**got)
