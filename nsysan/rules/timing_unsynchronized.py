"""An NVTX range used for timing closes long before the GPU work it launched finishes.

**Why it matters**: GPU work is asynchronous. A CPU timer around such a range measures the launches,
not the work: it under-reports by the time the work kept running after the range closed.

**Fix**: time with CUDA events (cudaEventRecord before and after, cudaEventElapsedTime), or
synchronize (torch.cuda.synchronize / cudaStreamSynchronize) before stopping the timer; warm up first
and report statistics over many iterations. The suggestion is written in the program's terms
(PyTorch, JAX, CuPy, OpenACC, OpenMP offload or CUDA, as recognised in the trace).

Judged over the whole capture (timing ranges are often outside the steady state). A range name
qualifies when its instances' GPU work outlives the range by more than ``min_after_frac`` of the
range's duration on average, and by at least ``min_after_ns``. Library ranges (NCCL, cuDF,
PyTorch ops...: ``nsysan.analyses.libranges``) are never judged: they are not the user's timers.
One finding for the whole pattern, however many range names qualify (nested phase ranges of one
loop are one pattern); the evidence lists the worst names.

**A CPU timer only where the trace shows one.** An NVTX range is an annotation: it measures nothing
by itself, and most ranges (a training ``step``, a ``decode_token``) are not timed. The trace shows a
CPU timer around a range by (``timer_evidence`` in the evidence): its name, or an enclosing range's,
reading as a timer (``timer``, ``timing``, ``timed``, ``elapsed``, ``latency``, ``benchmark``/
``bench``, ``measure``, ``stopwatch``, ``tic``/``toc``, ``timeit``, ``perf_counter``, ``walltime``;
the bare word ``time`` is not enough: ``time_step`` is a simulation step), or clock calls
(``clock_gettime``, ``gettimeofday``, ``clock``, ``time``, ``times``, ``ftime``, ``timespec_get``) in
the OS runtime trace on the range's thread inside its late instances. What it cannot show:
``time.perf_counter``/``time.time`` are C builtins (no Python frame in samples or backtraces) and
``clock_gettime`` is a vDSO call the OS runtime trace does not see, so a program timing a plainly
named range is not recognised; the finding then says only what the trace shows. Only with such
evidence does the finding say a CPU timer under-reports, and it is a warning where that timer would
really mislead: the late instances last at least 100 us on the CPU (a timed region, not a launch
wrapper) and their GPU work runs on for at least as long again (the timer reports under half the
real time). Otherwise informational: the GPU work outlives the ranges, read their CPU time as
launch time. Impact: 0 -- this is a measurement error, not run time to save; the message gives the
sum over the instances of how long each closed before its GPU work finished (a sum of lags, not an
amount of GPU work: work queued behind earlier work counts in every range it outlives).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.analyses.frames import name_in
from nsysan.analyses.libranges import library_mask
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.rules._window import has_gpu_activity
from nsysan.rules._wording import call_sites_in
from nsysan.units import fmt_ns

MIN_TIMER_NS = 100_000  # a late instance shorter than this on the CPU is a launch wrapper, not a timed region
# words of a range name that say it is timed (``time`` alone is not: ``time_step``, ``time loop``)
TIMER_WORDS = frozenset({"timer", "timers", "timing", "timings", "timed", "elapsed", "latency", "latencies",
                         "stopwatch", "benchmark", "benchmarks", "bench", "measure", "measured", "measurement",
                         "tic", "toc", "timeit", "walltime", "wallclock"})
TIMER_PHRASES = ("perf_counter", "wall_time", "wall time", "wall-clock", "wall_clock", "time it")
# clock reads an OS runtime trace may record (glibc; ``clock_gettime`` itself is usually vDSO, unseen)
TIMER_CALLS = ("clock_gettime", "clock_gettime64", "gettimeofday", "clock", "time", "times", "ftime", "timespec_get")
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def timer_named(name: str) -> bool:
    """Whether a range name reads as a timer: one of ``TIMER_WORDS`` among its words (split at
    case changes, digits and punctuation: ``TimedForward``, ``bench_step``, ``fwd-latency``), or a
    ``TIMER_PHRASES`` phrase."""
    low = name.lower()
    return any(p in low for p in TIMER_PHRASES) or any(w.lower() in TIMER_WORDS for w in _WORD.findall(name))


def clock_calls_inside(osrt: pd.DataFrame, ranges: pd.DataFrame) -> int:
    """The OS runtime clock reads (``TIMER_CALLS``) made on each range's thread inside it, summed."""
    if len(osrt) == 0 or len(ranges) == 0:
        return 0
    c = osrt.loc[name_in(osrt["name"], TIMER_CALLS)]
    if len(c) == 0:
        return 0
    n = 0
    for (pid, tid), r in ranges.groupby(["pid", "tid"], sort=False):
        st = np.sort(c.loc[(c["pid"].to_numpy() == pid) & (c["tid"].to_numpy() == tid), "start_ns"].to_numpy())
        if len(st):
            n += int((np.searchsorted(st, r["end_ns"].to_numpy(), side="right")
                      - np.searchsorted(st, r["start_ns"].to_numpy(), side="left")).sum())
    return n


def timer_evidence(ranges: pd.DataFrame, rows: np.ndarray, name: str, osrt: pd.DataFrame) -> str:
    """What in the trace shows a CPU timer around the ranges at positions ``rows`` of ``ranges`` (one
    name's late instances): "name", "enclosing range 'X'", "N clock calls", or "" (nothing)."""
    if timer_named(name):
        return "name"
    parent, names = ranges["parent"].to_numpy(), ranges["name"].to_numpy()
    cur = np.unique(parent[rows])
    for _ in range(64):  # the enclosing ranges, a level at a time (distinct names judged once each)
        cur = cur[cur >= 0]
        if len(cur) == 0:
            break
        hit = [n for n in sorted({str(x) for x in names[cur]}) if timer_named(n)]
        if hit:
            return f"enclosing range '{hit[0][:80]}'"
        cur = np.unique(parent[cur])
    n = clock_calls_inside(osrt, ranges.iloc[rows])
    return f"{n} clock calls" if n else ""


@rule("timing-unsynchronized", "CPU timing range closes before its GPU work ends", min_after_frac=0.2,
      min_after_ns=100_000, min_instances=3)
def check(ctx: RuleContext, *, min_after_frac: float, min_after_ns: int, min_instances: int) -> Iterator[Finding]:
    ranges = ctx.a.nvtx_ranges
    if len(ranges) == 0 or not has_gpu_activity(ctx):
        return
    r = ranges.loc[ranges["gpu_ops"].to_numpy() > 0]
    if len(r) == 0:
        return
    r = r.loc[~library_mask(r["name"], r["domain"] if "domain" in r else None)]
    rows = []
    for name, g in r.groupby("name", sort=True):
        if len(g) < min_instances:
            continue
        after = int(g["gpu_after_end_ns"].sum())
        cpu = int(g["dur_ns"].sum())
        if after <= 0 or after < min_after_ns * len(g) or after < min_after_frac * cpu:
            continue  # (no GPU work after the range: nothing to report, whatever the thresholds)
        late = g.loc[g["gpu_after_end_ns"] > 0]
        worst = late.loc[late["gpu_after_end_ns"].idxmax()]
        late_after, late_dur = float(late["gpu_after_end_ns"].mean()), float(late["dur_ns"].mean())
        timer = timer_evidence(ranges, ranges.index.get_indexer(late.index), str(name), ctx.trace.osrt)
        rows.append({"name": str(name)[:160], "instances": len(g), "late": len(late),
                     "after_avg_ns": int(late_after), "range_avg_ns": int(late_dur), "under_report_ns": after,
                     "worst_start_ns": int(worst["start_ns"]), "worst_after_ns": int(worst["gpu_after_end_ns"]),
                     "timer_evidence": timer,
                     "misleads": bool(timer and late_dur >= MIN_TIMER_NS and late_after >= late_dur), "key": name})
    if not rows:
        return
    rows.sort(key=lambda x: (-x["under_report_ns"], x["name"]))
    misleading = [x for x in rows if x["misleads"]]
    timed = [x for x in rows if x["timer_evidence"]]
    top = (misleading or timed or rows)[0]
    others = f" and {len(rows) - 1} other range name(s) with the same pattern" if len(rows) > 1 else ""
    head = (f"NVTX range '{top['name']}'{others}: in {top['late']} of {top['instances']} instances its GPU work kept "
            f"running after the range closed on the CPU (by {fmt_ns(top['after_avg_ns'])} on average, range "
            f"{fmt_ns(top['range_avg_ns'])})")
    ev = top["timer_evidence"]
    shown = ("its name reads as a timer" if ev == "name" else f"its {ev} reads as a timer"
             if ev.startswith("enclosing") else f"{ev} inside it")
    if ev:
        tail = (f"; a CPU timer around it under-reports by {fmt_ns(top['under_report_ns'])} in total ({shown})."
                + (" A CPU timer around it reports under half the real time." if top["misleads"] else
                   " The ranges are short launch wrappers or their work overlaps on purpose: the timer misleads "
                   "only if read as the GPU time."))
    else:
        tail = (f"; the ranges closed {fmt_ns(top['under_report_ns'])} in total before their GPU work finished (a "
                "sum of per-instance lags: work queued behind earlier work counts in each range it outlives). "
                "Nothing in the trace "
                "shows the program timing them with a CPU timer (no timer-like name, no clock calls traced "
                "inside them): read their CPU time as the time to launch the work, not the work's time.")
    yield finding(ctx, "timing-unsynchronized", severity=Severity.WARNING if misleading else Severity.INFO,
                  impact_ns=0, window=ctx.a.capture.to_dict(), suggestion=advice(ctx.program),
                  **({} if ev else {"title": "NVTX range closes before its GPU work ends"}),
                  message=head + tail
                          + call_sites_in(ctx, r.loc[(r["name"] == top["key"]).to_numpy()
                                                     & (r["gpu_after_end_ns"].to_numpy() > 0)]),
                  evidence=tuple({k: v for k, v in x.items() if k not in ("misleads", "key")} for x in rows[:10]))


TAIL = " Warm up first and report statistics (median, spread) over many iterations."
ADVICE = Advice(
    torch=("Time GPU work with ``torch.cuda.Event(enable_timing=True)`` (record before and after, "
           "``end.synchronize()``, ``start.elapsed_time(end)``), or call ``torch.cuda.synchronize()`` before "
           "stopping a CPU timer." + TAIL),
    jax="Call ``.block_until_ready()`` on the step's outputs before stopping a CPU timer." + TAIL,
    cupy=("Time GPU work with ``cupy.cuda.Event`` pairs and ``cupy.cuda.get_elapsed_time``, or synchronize "
          "the stream before stopping a CPU timer." + TAIL),
    openacc="Put ``#pragma acc wait`` before stopping a CPU timer around asynchronous regions." + TAIL,
    openmp="Put ``#pragma omp taskwait`` before stopping a CPU timer around ``nowait`` target regions." + TAIL,
    default=("Time GPU work with CUDA events (cudaEventRecord before and after, cudaEventSynchronize, "
             "cudaEventElapsedTime), or cudaStreamSynchronize before stopping a CPU timer." + TAIL))


def advice(p: Program) -> str:
    """How to time GPU work, in the program's terms (``analyses/program.py``)."""
    return choose(ADVICE, p)
