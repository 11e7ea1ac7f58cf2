"""An NVTX range used for timing closes long before the GPU work it launched finishes.

**Why it matters**: GPU work is asynchronous. A CPU timer around such a range measures the launches,
not the work: it under-reports by the time the work kept running after the range closed.

**Fix**: time with CUDA events (cudaEventRecord before and after, cudaEventElapsedTime), or
synchronize (torch.cuda.synchronize / cudaStreamSynchronize) before stopping the timer; warm up first
and report statistics over many iterations.

Judged over the whole capture (timing ranges are often outside the steady state). A range name
qualifies when its instances' GPU work outlives the range by more than ``min_after_frac`` of the
range's duration on average, and by at least ``min_after_ns``. Library ranges (NCCL, cuDF,
PyTorch ops...: ``nsysan.analyses.libranges``) are never judged: they are not the user's timers.
One finding for the whole pattern, however many range names qualify (nested phase ranges of one
loop are one pattern); the evidence lists the worst names. A warning only where a CPU timer around
the range would really mislead: its late instances last at least 100 us on the CPU (a timed region,
not a launch wrapper) and their GPU work runs on for at least as long again (the timer reports
under half the real time); otherwise (asynchronous on purpose) informational. Impact: 0 -- this is
a measurement error, not run time to save; the total under-reported time is in the message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.analyses.libranges import library_mask
from nsysan.rules._base import Finding, Severity, finding, rule
from nsysan.rules._helpers import call_sites_in, has_gpu_activity
from nsysan.units import fmt_ns

MIN_TIMER_NS = 100_000  # a late instance shorter than this on the CPU is a launch wrapper, not a timed region


@rule("timing-unsynchronized", "CPU timing range closes before its GPU work ends", min_after_frac=0.2,
      min_after_ns=100_000, min_instances=3)
def check(ctx: Any, *, min_after_frac: float, min_after_ns: int, min_instances: int) -> Iterator[Finding]:
    rg = ctx.a.nvtx_ranges
    if len(rg) == 0 or not has_gpu_activity(ctx):
        return
    r = rg.loc[rg["gpu_ops"].to_numpy() > 0]
    if len(r) == 0:
        return
    r = r.loc[~library_mask(r["name"], r["domain"] if "domain" in r else None)]
    rows = []
    for name, g in r.groupby("name", sort=True):
        if len(g) < min_instances:
            continue
        after = int(g["gpu_after_end_ns"].sum())
        cpu = int(g["dur_ns"].sum())
        if after < min_after_ns * len(g) or after < min_after_frac * cpu:
            continue
        late = g.loc[g["gpu_after_end_ns"] > 0]
        worst = late.loc[late["gpu_after_end_ns"].idxmax()]
        late_after, late_dur = float(late["gpu_after_end_ns"].mean()), float(late["dur_ns"].mean())
        rows.append({"name": str(name)[:160], "instances": int(len(g)), "late": int(len(late)),
                     "after_avg_ns": int(late_after), "range_avg_ns": int(late_dur), "under_report_ns": after,
                     "worst_start_ns": int(worst["start_ns"]), "worst_after_ns": int(worst["gpu_after_end_ns"]),
                     "misleads": bool(late_dur >= MIN_TIMER_NS and late_after >= late_dur), "key": name})
    if not rows:
        return
    rows.sort(key=lambda x: (-x["under_report_ns"], x["name"]))
    misleading = [x for x in rows if x["misleads"]]
    top = (misleading or rows)[0]
    others = f" and {len(rows) - 1} other range name(s) with the same pattern" if len(rows) > 1 else ""
    tail = (" A CPU timer around it reports under half the real time." if misleading else
            " The ranges are short launch wrappers or their work overlaps on purpose: a CPU timer around them "
            "would mislead only if it were read as the GPU time.")
    yield finding(ctx, "timing-unsynchronized", severity=Severity.WARNING if misleading else Severity.INFO,
                  impact_ns=0, window=ctx.a.capture.to_dict(),
                  message=f"NVTX range '{top['name']}'{others}: in {top['late']} of {top['instances']} instances its "
                          f"GPU work kept running after the range closed on the CPU (by {fmt_ns(top['after_avg_ns'])} "
                          f"on average, range {fmt_ns(top['range_avg_ns'])}); a CPU timer around it under-reports by "
                          f"{fmt_ns(top['under_report_ns'])} in total.{tail}"
                          + call_sites_in(ctx, r.loc[(r["name"] == top["key"]).to_numpy()
                                                     & (r["gpu_after_end_ns"].to_numpy() > 0)]),
                  evidence=tuple({k: v for k, v in x.items() if k not in ("misleads", "key")} for x in rows[:10]))
