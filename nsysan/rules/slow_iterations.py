"""A few iterations in the middle of the run take far longer than the rest.

**Why it matters**: a step that takes seconds instead of milliseconds every so often (a checkpoint,
evaluation or logging every N steps, garbage collection, a new input shape that re-triggers cuDNN
autotuning or recompilation) can cost more than everything the steady steps could still gain, and
it hides in the mean: the median step looks fine.

**Fix**: by cause (named in the message): new kernels -> warm up every code path (or eager module
loading) and use fixed or bucketed input shapes (pad to a few sizes), ``torch.backends.cudnn.benchmark =
False`` for dynamic shapes, ``torch.compile(dynamic=True)`` or marking the dynamic dimension; file I/O -> checkpoint and log from a background thread or
process (asynchronous checkpointing), less often; waiting (the thread blocked on another thread or
process: a DataLoader's workers that do not keep up) -> more workers, ``persistent_workers=True``, a
larger ``prefetch_factor``; extra work (an evaluation or a ``checkpoint``
range) -> run it less often or elsewhere; untraced CPU -> garbage collection (``gc.freeze()`` after
set-up, ``gc.disable()`` with collections at chosen points) or Python work between steps: profile it
with Python sampling (``nsys profile --python-sampling=true``).

Read from ``analyses/slow_iterations.py``: steady iterations (warm-up is only the leading ones:
``warmup-outlier``) whose period exceeds ``factor`` x their thread's median period, less those holding a range that names set-up work (build,
compile, warm-up, init: the program entering a new phase, a one-time cost). Fires when they
cost at least ``min_share`` of the steady iterations' total period. Impact: their periods above the
median (each iteration's period is its own, so nothing is counted twice), claimed on their
intervals.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.analyses.program import Program
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.rules._window import ONE_TIME_NAMES
from nsysan.units import fmt_ns

ADVICE = {
    "new kernels": ("New kernels or set-up calls (module loads, library handles) appear in these iterations: code that "
                    "runs for the first time mid-run (lazy module loading: run every code path in the warm-up, or set "
                    "``CUDA_MODULE_LOADING=EAGER``), or new input shapes that re-trigger autotuning or recompilation: use "
                    "fixed or bucketed shapes (pad to a few sizes)."),
    "file I/O": ("These iterations spend their extra time in file I/O (a checkpoint, logging): write from a background "
                 "thread or process (asynchronous checkpointing: copy the state to the host, then save outside the "
                 "loop), and less often."),
    "waiting": ("These iterations' thread sat blocked waiting for another thread or process (the call named): input "
                "that is not ready in time, a queue or lock another thread holds. With a PyTorch DataLoader the "
                "workers do not keep up every few steps: more workers (``num_workers``), ``persistent_workers=True``, "
                "a larger ``prefetch_factor``, lighter per-sample work; host-bound-gap names the thread it waited "
                "for where the trace records scheduling."),
    "extra work": ("These iterations run extra work (the ranges named, or more GPU work): run evaluation, checkpoints "
                   "and logging less often, asynchronously, or outside the timed loop."),
    "untraced CPU": ("Nothing traced explains the extra time: CPU work outside any CUDA call, OS call or range, such as "
                     "Python's garbage collector (``gc.freeze()`` after set-up; ``gc.disable()`` with ``gc.collect()`` "
                     "at chosen points) or Python work between steps. Record with Python sampling "
                     "(``--python-sampling=true``) to see where."),
    "allocation": ("These iterations allocate device memory: the allocator grows or a buffer is created mid-run; "
                   "allocate it before the loop and keep shapes fixed."),
}


SHAPES = {"torch": (" With PyTorch, ``torch.backends.cudnn.benchmark = False`` when shapes vary and "
                    "``torch.compile(dynamic=True)`` (or ``torch._dynamo.mark_dynamic``) for a compiled model."),
          "jax": " With JAX, pad to a few shapes so the jitted step is not recompiled."}


def new_kernels_advice(p: Program) -> str:
    """The advice for iterations with new kernels, in the program's terms (PyTorch's and JAX's only for them)."""
    return ADVICE["new kernels"] + (SHAPES["torch"] if p.torch else "") + (SHAPES["jax"] if p.jax else "")


@rule("slow-iterations", "Slow iterations in the middle of the run", min_share=0.05)
def check(ctx: RuleContext, *, min_share: float) -> Iterator[Finding]:
    s = ctx.a.slow_iterations
    if s is None or len(s.table) == 0 or s.steady_span_ns <= 0:
        return
    t = s.table
    # a slow "iteration" that holds set-up ranges (build, compile, warm-up...) is the program moving to
    # a new phase, a one-time cost: left out (as host-bound-gap leaves one-time gaps out)
    setup = t["extra_ranges"].map(lambda v: any(ONE_TIME_NAMES.search(str(x)) for x in v)).to_numpy(dtype=bool)
    t = t.loc[~setup]
    if len(t) == 0:
        return
    cost = int(t["cost_ns"].sum())
    if cost < min_share * s.steady_span_ns:
        return
    by = t.groupby("cause")["cost_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    med = int(t["median_ns"].median())
    parts = "; ".join(f"{c}: {int(r['count'])} ({fmt_ns(int(r['sum']))}{_ranges(t, c)})" for c, r in by.iterrows())
    rows = t.sort_values("cost_ns", ascending=False)
    listed = ", ".join(f"#{int(r.index)} {fmt_ns(int(r.period_ns))}" for r in rows.head(6).itertuples())
    inside = _inside(rows.iloc[0])
    periodic = ""
    if s.periodic:
        every = sorted(set(s.periodic.values()))
        periodic = f" They recur every {', '.join(str(e) for e in every)} iterations."
    prog = ctx.program
    advice = " ".join((new_kernels_advice(prog) if c == "new kernels" else ADVICE.get(c, ADVICE["extra work"]))
                      if not c.startswith("start of each") else
                      f"The first iteration of each {c[len('start of each '):]} does that range's own set-up: "
                      "count it as that range's cost, or move the set-up off the loop."
                      for c in by.index[:2])
    yield finding(ctx, "slow-iterations", severity=Severity.CRITICAL if cost >= 0.25 * s.steady_span_ns else Severity.WARNING,
                  impact_ns=cost, claims=claims_of(t["start_ns"].to_numpy(np.int64), t["end_ns"].to_numpy(np.int64)),
                  suggestion=advice,
                  message=(f"{len(t)} of the steady iterations {'takes' if len(t) == 1 else 'take'} over {s.factor:g}x the typical period "
                           f"({fmt_ns(med)}): {listed}; together {fmt_ns(cost)} above the typical period, "
                           f"{cost / s.steady_span_ns:.0%} of the steady iterations' time. By cause: {parts}. "
                           f"The slowest: {inside}.{periodic}"),
                  evidence=top_records(t.assign(new_kernels=t["new_kernels"].map(lambda v: ", ".join(v[:3])),
                                                extra_ranges=t["extra_ranges"].map(lambda v: ", ".join(v[:3]))),
                                       "cost_ns", 10, ["index", "pid", "tid", "start_ns", "period_ns", "cost_ns", "cause",
                                                       "gpu_busy_ns", "kernels", "new_kernels", "alloc_calls", "io_ns",
                                                       "extra_ranges", "untraced_ns"]))


def _ranges(t: pd.DataFrame, cause: str) -> str:
    """The extra NVTX ranges of one cause's iterations, each named once: "; ranges 'checkpoint' x3"."""
    seen: dict[str, int] = {}
    for v in t.loc[t["cause"] == cause, "extra_ranges"]:
        for x in v:
            seen[x] = seen.get(x, 0) + 1
    if not seen:
        return ""
    return "; ranges " + ", ".join(f"'{k}'" + (f" x{n}" if n > 1 else "") for k, n in sorted(seen.items())[:5])


def _inside(r: pd.Series) -> str:
    """What one slow iteration (a row of ``SlowIterations.table``) held beyond a typical one."""
    bits = [f"#{int(r['index'])} ({fmt_ns(int(r['period_ns']))})"]
    if r["new_kernels"]:
        bits.append(f"{len(r['new_kernels'])} kernel names no typical iteration launches")
    if r["setup_calls"]:
        bits.append(f"{int(r['setup_calls'])} set-up calls ({fmt_ns(int(r['setup_ns']))})")
    if r["alloc_calls"]:
        bits.append(f"{int(r['alloc_calls'])} allocation calls")
    if r["io_ns"]:
        bits.append(f"{fmt_ns(int(r['io_ns']))} in file I/O")
    if r.get("wait_ns"):
        bits.append(f"{fmt_ns(int(r['wait_ns']))} blocked waiting" + (f" (mostly {r['wait_call']})" if r.get("wait_call")
                                                                      else ""))
    if r["extra_ranges"]:
        bits.append("ranges " + ", ".join(f"'{x}'" for x in r["extra_ranges"][:3]))
    bits.append(f"GPU busy {fmt_ns(int(r['gpu_busy_ns']))}, {int(r['kernels'])} kernels")
    bits.append(f"{fmt_ns(int(r['untraced_ns']))} untraced")
    return ", ".join(bits)
