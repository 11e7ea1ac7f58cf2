"""Many short kernels whose launch costs as much as or more than their execution.

**Why it matters**: each launch costs the CPU a few microseconds; when kernels run for less than
that, the GPU idles between them and the loop runs at the speed of the launching thread.

**Fix**: capture the repeated sequence once as a CUDA Graph and replay it (cudaStreamBeginCapture /
cudaGraphInstantiate / cudaGraphLaunch; ``torch.cuda.CUDAGraph``; TensorRT: capture
``execute_async_v3``), or fuse kernels (torch.compile, TensorRT).

Impact: the steady-state CPU launch time of launch-dominated kernels minus their GPU time (the
launch cost a graph would remove), bounded by the GPU idle time between launches. Graph launches
(``cudaGraphLaunch``) are recognised and reported apart; they are not counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.rules._base import Finding, Severity, finding, rule, top_records
from nsysan.rules._helpers import steady
from nsysan.units import fmt_ns, fmt_pct


@rule("launch-bound", "Kernel launches cost more than the kernels", min_kernels=100, min_dominated_frac=0.3,
      max_kernel_ns=50_000)
def check(ctx: Any, *, min_kernels: int, min_dominated_frac: float, max_kernel_ns: int) -> Iterator[Finding]:
    lau = steady(ctx.a.launches, ctx)
    plain = lau.loc[~lau["is_graph"]]
    graphs = lau.loc[lau["is_graph"]]
    if len(plain) < min_kernels:
        return
    dom = plain.loc[plain["launch_dominated"] & (plain["gpu_ns"] <= max_kernel_ns)]
    frac = len(dom) / len(plain)
    if frac < min_dominated_frac:
        return
    saving = int((dom["api_ns"] - dom["gpu_ns"]).clip(lower=0).sum())
    gaps = ctx.a.gaps
    idle = int(gaps.loc[(gaps["start_ns"] >= ctx.window.start_ns) & (gaps["end_ns"] <= ctx.window.end_ns)]["gap_ns"].sum())
    idle += int(ctx.a.busy_steady["idle_ns"].sum()) if len(gaps) == 0 else 0
    impact = min(saving, idle) if idle else saving
    graph_note = (f" {len(graphs)} CUDA Graph launches are already used for part of the work." if len(graphs) else "")
    yield finding(ctx, "launch-bound", severity=Severity.WARNING, impact_ns=impact,
                  message=f"{len(dom)} of {len(plain)} kernel launches in the steady state ({fmt_pct(frac)}) took longer "
                          f"to launch (median {fmt_ns(dom['api_ns'].median())}) than to run (median "
                          f"{fmt_ns(dom['gpu_ns'].median())}).{graph_note}",
                  evidence=top_records(dom.assign(name=dom["name"].str.slice(0, 160)), "api_ns", 10,
                                       ["name", "api_name", "api_ns", "gpu_ns", "queue_ns", "start_ns"]))
