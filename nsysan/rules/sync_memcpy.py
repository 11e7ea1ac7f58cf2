"""Synchronous copies and memsets block the host in the steady state.

**Why it matters**: cudaMemcpy/cudaMemset (and async copies from pageable memory) return only when
the transfer is done, so the submitting thread cannot queue more work and the copy cannot overlap
compute. (nsys analyze: cuda_memcpy_sync, cuda_memset_sync.)

**Fix**: use cudaMemcpyAsync/cudaMemsetAsync on a non-default stream with pinned host memory, and
synchronize once per batch with an event (cudaEventRecord + cudaStreamWaitEvent/cudaEventSynchronize).

Impact: the host time spent inside those calls beyond the GPU time of their copies is not counted;
the estimate is the GPU time of the blocking copies that could have overlapped compute
(capped by the steady-state compute time), claimed on those copies' wall-clock time (shared with
pageable-memcpy and serial-copy-compute, never counted twice). Silent when the trace has no copy
activity for these calls (no MEMCPY/MEMSET table: WSL2, ``-t osrt``): their GPU time is unknown.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.analyses.frames import name_in
from nsysan.rules._base import Finding, Severity, claims_of, finding, rule, top_records
from nsysan.rules._helpers import call_sites, steady
from nsysan.units import fmt_ns

SYNC_COPY_APIS = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
                  "cudaMemset", "cudaMemset2D", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpy", "cuMemsetD8",
                  "cuMemsetD32")


@rule("sync-memcpy", "Synchronous copies block the host", min_total_ns=100_000)
def check(ctx: Any, *, min_total_ns: int) -> Iterator[Finding]:
    api = ctx.trace.cuda_api
    calls = steady(api.loc[name_in(api["name"], SYNC_COPY_APIS)], ctx)
    ops = ctx.a.ops
    copies = ops.loc[ops["op"].isin(["memcpy", "memset"]).to_numpy() & name_in(ops["api_name"], SYNC_COPY_APIS)]
    w = ctx.window
    copies = copies.loc[(copies["api_start_ns"] < w.end_ns) & (copies["api_end_ns"] > w.start_ns)]
    if len(calls) == 0 or len(copies) == 0:
        return
    gpu = int(copies["dur_ns"].sum())
    host = int(calls["dur_ns"].sum())
    if host < min_total_ns:
        return
    compute = int(ctx.a.busy_steady["compute_ns"].sum()) if len(ctx.a.busy_steady) else 0
    impact = min(gpu, compute)
    names = ", ".join(sorted(calls["name"].astype(str).unique()))
    yield finding(ctx, "sync-memcpy", severity=Severity.WARNING, impact_ns=impact,
                  claims=claims_of(copies["start_ns"], copies["end_ns"]),
                  message=f"{len(calls)} blocking calls ({names}) held the host for {fmt_ns(host)}; their copies ran "
                          f"{fmt_ns(gpu)} on the GPU with nothing else to overlap."
                          + call_sites(ctx, calls["name"].astype(str).unique()),
                  evidence=top_records(calls.assign(name=calls["name"].astype(str)), "dur_ns", 10,
                                       ["name", "start_ns", "dur_ns", "tid"]))
