"""The GPU waits while the submitting CPU thread does other work.

**Why it matters**: between submissions the GPU idles while the thread that feeds it runs Python,
prints results, does I/O or pre-processing. Every such gap adds directly to iteration latency.
nsys' gap rule only looks at gaps over 500 ms; here the threshold is relative to the iteration.

**Fix**: move that work off the submitting thread (a worker thread or process for result
handling, printing, I/O), or queue the next batch before doing it; for many small launches, see
launch-bound.

Evidence names what the submitting thread was doing during each gap, clipped to the gap: the
innermost NVTX range, the CUDA API call, or the OS runtime call. Fires when host-caused idle time
in the steady state exceeds ``min_frac`` of the steady window. Impact: that idle time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.rules._base import Finding, Severity, finding, rule
from nsysan.units import fmt_ns, fmt_pct


@rule("host-bound-gap", "GPU idle while the CPU does other work", min_frac=0.05, min_gap_frac_of_iteration=0.02)
def check(ctx: Any, *, min_frac: float, min_gap_frac_of_iteration: float) -> Iterator[Finding]:
    g = ctx.a.gaps
    if len(g) == 0:
        return
    w = ctx.window
    p50 = int(ctx.a.iterations.stats.get("p50_ns", 0) or 0)
    min_gap = int(p50 * min_gap_frac_of_iteration) if p50 else 0
    g = g.loc[(g["start_ns"] >= w.start_ns) & (g["end_ns"] <= w.end_ns) & g["cause"].isin(["host", "sync"])
              & (g["gap_ns"] >= min_gap)]
    total = int(g["gap_ns"].sum())
    if total < min_frac * w.dur_ns or total == 0:
        return
    by = g.groupby("activity")["gap_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    parts = "; ".join(f"{a or 'untraced CPU work'}: {int(r['count'])} gaps, {fmt_ns(r['sum'])}" for a, r in by.head(5).iterrows())
    ev = []
    for _, r in g.nlargest(10, "gap_ns").iterrows():
        ev.append({"start_ns": int(r["start_ns"]), "gap_ns": int(r["gap_ns"]), "tid": int(r["tid"]),
                   "activity": r["activity"], "next_api": r["api_name"], "next_op": r["next_op"][:120],
                   "breakdown": [dict(x) for x in (r["breakdown"] or [])[:5]]})
    yield finding(ctx, "host-bound-gap", severity=Severity.CRITICAL if total > 0.2 * w.dur_ns else Severity.WARNING,
                  impact_ns=total,
                  message=f"The GPU sat idle {fmt_ns(total)} ({fmt_pct(total / w.dur_ns)} of the steady state) waiting "
                          f"for the CPU to submit work. What the submitting thread was doing: {parts}.",
                  evidence=tuple(ev))
