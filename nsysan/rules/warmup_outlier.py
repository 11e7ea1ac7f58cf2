"""The first iterations are much slower than the steady state.

**Why it matters**: the first iterations pay for lazy module loading, cuDNN/cuBLAS autotuning,
allocator growth and engine/graph setup. Timing them with the rest inflates the mean and the tail.

**Fix**: run warm-up iterations before timing (and before capturing CUDA Graphs); report the
steady state separately, with mean, spread and percentiles over many samples.

Warm-up iterations are those leading iterations slower than ``warmup_factor`` (see
``--warmup-factor``) x the median of the rest. Impact: 0 -- warm-up costs the measurement, not the steady-state run time; the extra latency over
the steady-state median is in the message and evidence.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.rules._base import Finding, Severity, finding, rule
from nsysan.units import fmt_ns


@rule("warmup-outlier", "Warm-up iterations are outliers")
def check(ctx: Any) -> Iterator[Finding]:
    it = ctx.a.iterations
    if it.warmup == 0 or len(it.table) == 0:
        return
    warm = it.table.loc[it.table["warmup"]]
    p50 = int(it.stats.get("p50_ns", 0) or 0)
    extra = int((warm["latency_ns"] - p50).clip(lower=0).sum())
    ev = tuple({"index": int(r["index"]), "latency_ns": int(r["latency_ns"]), "start_ns": int(r["start_ns"])}
               for _, r in warm.iterrows())
    yield finding(ctx, "warmup-outlier", severity=Severity.INFO, impact_ns=0, window=ctx.a.capture.to_dict(),
                  message=f"The first {it.warmup} '{it.range_name}' iteration(s) took {fmt_ns(warm['latency_ns'].mean())} "
                          f"on average vs a steady-state median of {fmt_ns(p50)}; {fmt_ns(extra)} of extra "
                          f"latency, excluded from steady-state numbers.",
                  evidence=ev)
