"""The iteration model: which NVTX range is one iteration, its period and latency, warm-up, steady state.

**Which range.** ``--iteration-range NAME`` (the range label ``domain:text`` or its text) or, by
default, chosen from the user's own ranges:

1. closed push/pop or start/end ranges, not library ranges (``libranges``: NCCL, CCCL/cub, cuDNN,
   cuBLAS, cuDF, TensorRT layers, PyTorch op ranges, pyprof markers, XLA thunks ...);
2. repeated at least 3 times on one thread (a sequence; several processes or threads each have one);
3. with GPU work launched below them (in at least half of the instances) when the trace recorded
   GPU activity; when it recorded none, ranges of at least 10 us judged on the CPU alone;
4. not sub-microsecond (median instance, GPU work included);
5. of those, the ones whose instances launched (nearly) the most GPU time (>= 80% of the best
   coverage, and at least 25% of all GPU time), and of these the one that repeats most often on a
   thread (the finest unit that still holds the GPU work: a decode loop's ``decode_token`` rather
   than its ``request`` ranges, a training loop's ``train_step`` rather than its ``epoch`` ranges),
   then the outermost (smallest median nesting depth), then the longest in total. A range nested in
   the iteration that also launches nearly all of its GPU work (one range per layer, say) would win:
   ``--iteration-range`` then names the iteration.

**Steps within steps.** When one qualifying range runs inside another (``NEST_MIN`` = 75% of its
instances inside one of the other's, on the same thread), the iteration is the unit the loop
repeats and the finer unit its breakdown, not a rival: the outer range is the iteration when each of
its instances holds the same number k >= 2 of the inner one (in ``REGULAR_MIN`` = 75% of them: k
micro-batches per optimizer step, the all-reduce in the last and the optimizer after them; L layers
per step) and it repeats at least ``MIN_OUTER`` = 5 times on a thread; the inner range's verdict
then says it is a sub-step. Otherwise (a varying number per instance: tokens of requests of
different lengths, the steps of partial epochs; or an outer range with few instances, an epoch)
the rules above pick the finer one. Either way ``levels`` shows the other levels: the ranges of the
program's own repeated on a thread (GPU work or not) inside the iterations, with their count and CPU and launched GPU
time per iteration (``substeps``: one row per iteration and sub-step, counted on the iteration's
thread inside its CPU range; the GPU time is that of the ops launched inside the sub-step's
instances from their thread or from a thread of the process that runs no iteration, as for the
completion below), and the ranges that enclose iterations.

**A range around itself.** A push/pop instance of the iteration range that encloses later instances
of the same name on its thread (an outer ``train_step`` around the next 14, a decorated function that
calls itself) is a region around iterations, not one: the innermost instances (those that enclose
no other) are the iterations, the count and every per-iteration number are theirs, and
``stats.enclosing_instances`` says how many were set aside (``why`` says so too). Candidates'
counts still list every instance (what the export holds).

**Several threads, each its own loop**: each (pid, tid) is a sequence with its own period; the
per-sequence summaries (``sequences``) carry the thread's name (``threads``).

**XLA fallback.** When no range of the program's own qualifies (JAX's own annotations missing, or
lost in export), the executions of a jitted XLA module (``XlaModule:#hlo_module=jit_step,...#``,
``libranges.xla_module``) are the iterations, judged by the same coverage and repetition tests
(``how`` = ``XLA_HOW``); never an XLA compile pass or thunk range. Then the TensorRT fallback.

GPU work launched by a thread of the same process that has no instance of the range itself (PyTorch
launches the backward pass from its autograd thread, a DataLoader pins memory on another) belongs to
the iteration during which it was launched: it counts towards the coverage and the completion.

``how`` says how the range was chosen; ``candidates`` lists the ranges considered, each with its
verdict, so a reader sees the runners-up and why the others were rejected. When no range fits,
there is no iteration and the whole capture is judged, except in one case:

**TensorRT fallback.** When no range of the program's own qualifies and the trace holds TensorRT
engine executions (``ExecutionContext::execute``/``enqueue``, see ``tensorrt``), each execution is
one iteration (``how`` = ``TENSORRT_HOW``; even one execution). A range of the user's own around
each execution qualifies by the rules above and wins; a TensorRT layer range never becomes the
iteration (layers are library ranges and are not executions).

**Per iteration** (one row per instance, per ``(pid, tid)`` sequence, in start order):

* ``cpu_ns``: the range's CPU duration;
* ``gpu_proj_ns``: first to last GPU op launched inside it (see ``nvtx.ranges``);
* ``end_ns`` (completion): max(range end, end of its GPU work);
* ``latency_ns``: range start -> completion. When the CPU runs ahead of the GPU this includes
  the time the work waited in the queue behind earlier iterations;
* ``period_ns``: completion minus the latest earlier completion in the same sequence (the time
  between consecutive completions: what gets faster when the program gets faster; 0 for an
  iteration whose work completed before an earlier one's, never negative, and a sequence's
  periods add up to the span of its completions); -1 here for a sequence's first iteration, which
  has none (the outputs show null, an empty CSV cell, "-": ``report.jsonout.no_sentinels``);
* ``queue_depth``: how many later iterations of the sequence the CPU had already started when this
  one completed (0: the loop waits for each iteration; 40: the CPU runs 40 iterations ahead);
* ``service_ns``: completion - max(start, latest earlier completion), at least 0: the time this
  iteration alone held the pipeline (= latency when iterations do not overlap, ~ period when they
  queue). Service times never overlap: their sum counts each nanosecond once.

**Warm-up**: per sequence, the leading iterations whose service time exceeds ``warmup_factor`` x the
median of the rest (at most half of them). Steady state = the remaining iterations; its window runs
from the first steady iteration's start to the last one's completion.

**Statistics** (steady state): ``period_*`` and ``latency_*`` (mean, std, min, max, p50/p90/p99);
``p50_ns``, ``mean_ns`` ... without a prefix are the headline iteration time: the period where a
sequence has two or more steady iterations and a period p50 above 0 (most instances completing
inside an earlier one's work say nothing about the loop: ``overlapping_instances`` counts them), else
the latency. ``throughput_per_s`` = 1 / mean
period (iterations per second per sequence). ``latency_includes_queueing`` is true when the CPU
runs ahead (median queue depth >= 1) and latency p50 exceeds the period p50 by 20% or more.
"""

from nsysan.analyses.iterations.choice import (
    COVERAGE_CLOSE,
    MIN_COVERAGE,
    MIN_INSTANCES,
    TENSORRT_HOW,
    XLA_HOW,
    candidates,
    pick_range,
)
from nsysan.analyses.iterations.model import Iterations, iterations
from nsysan.analyses.iterations.nesting import MIN_OUTER, NEST_MIN, REGULAR_MIN, encloses_same
from nsysan.analyses.iterations.timing import QUEUEING_RATIO, steady_periods
from nsysan.analyses.iterations.values import Candidate, Choice, IterationStats, Reason, Rejection

__all__ = ["COVERAGE_CLOSE", "MIN_COVERAGE", "MIN_INSTANCES", "MIN_OUTER", "NEST_MIN", "QUEUEING_RATIO",
           "REGULAR_MIN", "TENSORRT_HOW", "XLA_HOW", "Candidate", "Choice", "IterationStats", "Iterations", "Reason",
           "Rejection", "candidates", "encloses_same", "iterations", "pick_range", "steady_periods"]
