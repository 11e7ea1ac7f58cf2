"""An NVTX range used for timing closes long before the GPU work it launched finishes.

**Why it matters**: GPU work is asynchronous. A CPU timer around such a range measures the launches,
not the work: it under-reports by the time the work kept running after the range closed.

**Fix**: time with CUDA events (cudaEventRecord before and after, cudaEventElapsedTime), or
synchronize (torch.cuda.synchronize / cudaStreamSynchronize) before stopping the timer; warm up first
and report statistics over many iterations.

Judged over the whole capture (timing ranges are often outside the steady state). Fires for a range
name whose instances' GPU work outlives the range by more than ``min_after_frac`` of the range's
duration on average, and by at least ``min_after_ns``. Impact: 0 -- this is a measurement error, not run time to save; the total under-reported time is
in the message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.rules._base import Finding, Severity, finding, rule, top_records
from nsysan.units import fmt_ns


@rule("timing-unsynchronized", "CPU timing range closes before its GPU work ends", min_after_frac=0.2,
      min_after_ns=100_000, min_instances=3)
def check(ctx: Any, *, min_after_frac: float, min_after_ns: int, min_instances: int) -> Iterator[Finding]:
    rg = ctx.a.nvtx_ranges
    if len(rg) == 0:
        return
    r = rg.loc[rg["gpu_ops"] > 0]
    for name, g in r.groupby("name", sort=True):
        if len(g) < min_instances:
            continue
        after = int(g["gpu_after_end_ns"].sum())
        cpu = int(g["dur_ns"].sum())
        if after < min_after_ns * len(g) or after < min_after_frac * cpu:
            continue
        late = g.loc[g["gpu_after_end_ns"] > 0]
        yield finding(ctx, "timing-unsynchronized", severity=Severity.WARNING, impact_ns=0,
                      window=ctx.a.capture.to_dict(),
                      message=f"NVTX range '{name}': in {len(late)} of {len(g)} instances its GPU work kept running after "
                              f"the range closed on the CPU (by {fmt_ns(late['gpu_after_end_ns'].mean())} on average, "
                              f"range {fmt_ns(late['dur_ns'].mean())}); a CPU timer around it under-reports by "
                              f"{fmt_ns(after)} in total.",
                      evidence=top_records(g, "gpu_after_end_ns", 10,
                                           ["start_ns", "dur_ns", "proj_ns", "gpu_after_end_ns", "gpu_ops", "tid"]))
