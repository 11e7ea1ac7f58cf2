"""Unified (managed) memory migrates on page faults inside the loop.

**Why it matters**: a kernel that touches managed memory resident on the host stalls while the
driver services its page faults and migrates the pages a few KiB at a time; when the CPU then
touches the same memory, it migrates back. Each iteration pays the round trip at fault speed
instead of bulk-copy speed, and the kernels run many times longer than they need.

**Fix**: prefetch the managed memory to the device before the kernels that use it
(``cudaMemPrefetchAsync(ptr, bytes, device, stream)``; CuPy: ``cupy.cuda.runtime.memPrefetchAsync``;
PyTorch tensors over managed memory: the same call on ``tensor.data_ptr()``) and back to the host
(``cudaCpuDeviceId``) before the CPU reads it; set ``cudaMemAdvise`` preferred location and
accessed-by hints; better, keep the data in explicit device buffers and move the CPU-side updates
onto the GPU so nothing migrates each iteration.

Read from ``analyses/unified.py``. Fires when, in the steady state, kernels ran while GPU page
faults of their device were pending (``--cuda-um-gpu-page-faults=true``) for at least ``min_share``
of the window, or, without fault tracing, when page-fault migrations move data both ways in most
iterations (thrashing; the message then names the flags that add the faults). Saving: the kernel time
while faults were pending less the time the migrated bytes take at bulk rate (the trace's own
prefetch rate, else its fastest migration); without fault tracing, the fault-driven migrations' own
time (a lower bound of the stall). Claimed on the kernel time while faults were pending.
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.units import fmt_bytes, fmt_ns


@rule("unified-memory-faults", "Unified memory migrates on page faults", min_share=0.02)
def check(ctx: RuleContext, *, min_share: float) -> Iterator[Finding]:
    u = ctx.a.unified
    if u is None or not u.present:
        return
    w = ctx.window.dur_ns
    faulted = int(u.per_kernel["faulted_ns"].sum()) if len(u.per_kernel) else 0
    fault_mig = u.by_cause.get("page fault", {})
    if u.faults_recorded:
        if faulted < min_share * w:
            return
        impact = u.saving_ns
    else:
        if not u.thrashing or not fault_mig:
            return
        impact = int(fault_mig.get("ns", 0))
    per = u.per_iteration
    top = u.per_kernel.head(3)
    kernels = "; ".join(f"{r.name[:60]} {fmt_ns(int(r.faulted_ns))} of {fmt_ns(int(r.total_ns))}"
                        for r in top.itertuples() if r.faulted_ns > 0)
    each = (f"per steady iteration {per['gpu_faults'].median():,.0f} GPU faults, {per['cpu_faults'].median():,.0f} CPU "
            f"faults, {fmt_bytes(int(per['bytes_htod'].median()))} to the device and "
            f"{fmt_bytes(int(per['bytes_dtoh'].median()))} back" if len(per) else "")
    causes = ", ".join(f"{c} {fmt_bytes(v['bytes'])} in {v['count']:,} migrations" for c, v in u.by_cause.items())
    thrash = " The same memory moves both ways in most iterations (thrashing)." if u.thrashing else ""
    how = (f"kernels ran {fmt_ns(faulted)} while page faults were pending ({kernels}); at the bulk rate "
           f"({fmt_bytes(int(u.bulk_rate_bytes_per_s))}/s) the {fmt_bytes(u.fault_bytes)} moved by faults take "
           f"{fmt_ns(max(0, faulted - impact))}" if u.faults_recorded else
           f"page faults are not recorded (add {' '.join(u.missing)}); the fault-driven migrations alone took "
           f"{fmt_ns(impact)}")
    yield finding(ctx, "unified-memory-faults", severity=Severity.CRITICAL if impact >= 0.1 * w else Severity.WARNING,
                  impact_ns=impact, claims=claims_of(*u.faulted) if u.faults_recorded else None,
                  message=(f"Managed memory migrates on demand: {each}. Migrations: {causes}.{thrash} In "
                           f"{ctx.window.named} {how}."),
                  evidence=tuple({"kernel": r.name, "count": int(r.count), "total_ns": int(r.total_ns),
                                  "faulted_ns": int(r.faulted_ns)} for r in top.itertuples()))
