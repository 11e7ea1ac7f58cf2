"""Copies to or from pageable host memory.

**Why it matters**: the driver stages pageable copies through an internal pinned buffer in chunks,
so they run at a fraction of the link's bandwidth, block the host, and cannot overlap compute.
(nsys analyze: cuda_memcpy_async.) Memory kinds come from the export's own enum (0 = pageable,
1 = pinned), not CUPTI's numbering.

**Fix**: allocate host buffers as pinned memory: cudaHostAlloc / cudaMallocHost (C++, cuda-python),
``tensor.pin_memory()`` or ``DataLoader(pin_memory=True)`` (PyTorch), then copy with cudaMemcpyAsync.

Impact: for each direction, the copies' GPU time minus the time the same bytes take at the pinned
throughput measured in this trace for that direction, or at ``assumed_speedup`` x the pageable
throughput when the trace has no pinned copy to compare with; claimed on those copies' wall-clock
time (shared with sync-memcpy and serial-copy-compute, never counted twice).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.rules._base import Finding, Severity, claims_of, finding, rule, top_records
from nsysan.rules._helpers import call_sites, steady
from nsysan.units import fmt_bytes, fmt_ns, fmt_rate


@rule("pageable-memcpy", "Copies use pageable host memory", min_total_ns=100_000, assumed_speedup=2.0)
def check(ctx: Any, *, min_total_ns: int, assumed_speedup: float) -> Iterator[Finding]:
    m = steady(ctx.trace.memcpy, ctx)
    pageable = m.loc[(m["host_mem"] == "Pageable") & m["kind"].isin(["HtoD", "DtoH"])]
    if len(pageable) == 0 or int(pageable["dur_ns"].sum()) < min_total_ns:
        return
    allm = ctx.trace.memcpy
    impact, notes = 0, []
    for kind, g in pageable.groupby(pageable["kind"].astype(str)):
        dur, nbytes = int(g["dur_ns"].sum()), int(g["bytes"].sum())
        pinned = allm.loc[(allm["kind"] == kind) & (allm["host_mem"] == "Pinned") & (allm["bytes"] >= 1 << 20)]
        page_rate = nbytes / (dur / 1e9) if dur else 0.0
        if len(pinned) and pinned["dur_ns"].sum() > 0:
            rate, basis = pinned["bytes"].sum() / (pinned["dur_ns"].sum() / 1e9), "measured pinned"
        else:
            rate, basis = page_rate * assumed_speedup, f"assumed {assumed_speedup:g}x"
        est = int(nbytes / rate * 1e9) if rate else dur
        impact += max(0, dur - est)
        notes.append(f"{kind}: {len(g)} copies, {fmt_bytes(nbytes)} in {fmt_ns(dur)} ({fmt_rate(page_rate)}; "
                     f"{basis} rate {fmt_rate(rate)})")
    yield finding(ctx, "pageable-memcpy", severity=Severity.WARNING, impact_ns=impact,
                  claims=claims_of(pageable["start_ns"], pageable["end_ns"]),
                  message="Pageable host memory in the steady state: " + "; ".join(notes) + "."
                          + call_sites(ctx, None, correlation=zip(pageable["pid"].tolist(),
                                                                  pageable["correlation_id"].tolist())),
                  evidence=top_records(pageable.assign(kind=pageable["kind"].astype(str)), "dur_ns", 10,
                                       ["kind", "bytes", "start_ns", "dur_ns", "stream_id"]))
