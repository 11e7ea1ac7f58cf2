"""Device or pinned memory is allocated and freed inside the steady-state loop.

**Why it matters**: cudaMalloc/cudaFree (and cudaHostAlloc/cudaFreeHost) are slow host calls, and
cudaFree synchronizes the device; doing them per batch adds their full cost to every iteration.

**Fix**: allocate device and pinned host buffers once before the loop and reuse them (a buffer pool,
or a framework caching allocator); free them after the loop.

Fires when the steady state has at least ``min_calls_per_iteration`` allocation/free calls per
iteration (or ``min_calls`` when no iteration range is found). Impact: the measured host time of
those calls in the steady state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.analyses.frames import name_in
from nsysan.rules._base import Finding, Severity, finding, rule, top_records
from nsysan.rules._helpers import n_iterations, steady
from nsysan.units import fmt_ns

ALLOC_APIS = ("cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc", "cudaMallocAsync",
              "cudaFreeAsync", "cudaMallocManaged", "cudaMallocPitch", "cuMemAlloc", "cuMemFree", "cuMemHostAlloc",
              "cuMemFreeHost", "cuMemAllocHost")


@rule("alloc-in-loop", "Memory allocated and freed every iteration", min_calls_per_iteration=1.0, min_calls=10)
def check(ctx: Any, *, min_calls_per_iteration: float, min_calls: int) -> Iterator[Finding]:
    api = ctx.trace.cuda_api
    calls = steady(api.loc[name_in(api["name"], ALLOC_APIS)], ctx)
    iters = n_iterations(ctx)
    need = max(1, int(min_calls_per_iteration * iters)) if iters else min_calls
    if len(calls) < need:
        return
    total = int(calls["dur_ns"].sum())
    by = calls.groupby(calls["name"].astype(str))["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    parts = ", ".join(f"{n} x{int(r['count'])} ({fmt_ns(r['sum'])})" for n, r in by.iterrows())
    per = f"{len(calls) / iters:.1f} per iteration, " if iters else ""
    yield finding(ctx, "alloc-in-loop", severity=Severity.WARNING if total < 0.05 * ctx.window.dur_ns else Severity.CRITICAL,
                  impact_ns=total,
                  message=f"{len(calls)} allocation/free calls in the steady state ({per}{fmt_ns(total)} of host time): {parts}.",
                  evidence=top_records(calls.assign(name=calls["name"].astype(str)), "dur_ns", 10,
                                       ["name", "start_ns", "dur_ns", "tid"]))
