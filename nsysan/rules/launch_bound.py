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

import numpy as np

from nsysan.analyses.frames import top_rows
from nsysan.rules._base import Finding, Severity, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct


@rule("launch-bound", "Kernel launches cost more than the kernels", min_kernels=100, min_dominated_frac=0.3,
      max_kernel_ns=50_000)
def check(ctx: Any, *, min_kernels: int, min_dominated_frac: float, max_kernel_ns: int) -> Iterator[Finding]:
    # masks over the launch frame (a million rows on big traces): only the dominated launches'
    # few needed columns are ever copied
    lau, w = ctx.a.launches, ctx.window
    if len(lau) == 0:
        return
    inside = (lau["start_ns"].to_numpy() < w.end_ns) & (lau["end_ns"].to_numpy() > w.start_ns)
    is_graph = lau["is_graph"].to_numpy(dtype=bool)
    n_plain, n_graphs = int((inside & ~is_graph).sum()), int((inside & is_graph).sum())
    if n_plain < min_kernels:
        return
    gpu_ns, api_ns = lau["gpu_ns"].to_numpy(), lau["api_ns"].to_numpy()
    dom = np.flatnonzero(inside & ~is_graph & lau["launch_dominated"].to_numpy(dtype=bool) & (gpu_ns <= max_kernel_ns))
    frac = len(dom) / n_plain
    if frac < min_dominated_frac:
        return
    saving = int(np.clip(api_ns[dom] - gpu_ns[dom], 0, None).sum())
    gaps = ctx.a.gaps
    within = (gaps["start_ns"].to_numpy() >= w.start_ns) & (gaps["end_ns"].to_numpy() <= w.end_ns)
    idle = int(gaps["gap_ns"].to_numpy()[within].sum())
    idle += int(ctx.a.busy_steady["idle_ns"].sum()) if len(gaps) == 0 else 0
    impact = min(saving, idle) if idle else saving
    graph_note = (f" {n_graphs} CUDA Graph launches are already used for part of the work." if n_graphs else "")
    cols = ["name", "api_name", "api_ns", "gpu_ns", "queue_ns", "start_ns"]
    top = lau[cols].iloc[top_rows(api_ns, dom, 10)]
    yield finding(ctx, "launch-bound", severity=Severity.WARNING, impact_ns=impact,
                  message=f"{len(dom)} of {n_plain} kernel launches in the steady state ({fmt_pct(frac)}) took longer "
                          f"to launch (median {fmt_ns(np.median(api_ns[dom]))}) than to run (median "
                          f"{fmt_ns(np.median(gpu_ns[dom]))}).{graph_note}",
                  evidence=top_records(top.assign(name=top["name"].astype(str).str.slice(0, 160)), "api_ns", 10, cols))

