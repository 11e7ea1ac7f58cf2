"""Compare analyses: a before/after diff, a ladder table over many traces, and a regression gate.

Everything here works on the JSON form of an analysis (schema ``nsysan.analysis/2``), so a saved
``--json`` output from an earlier run (for example a CI artifact) is as good a baseline as a trace.

Matching is by **name** only -- kernel names, NVTX range names (``domain:text``), rule ids, copy
directions -- never by process, thread or stream ids, which change from run to run.

**Iteration time is the period** (time between consecutive iterations' completions): it gets
smaller when the program gets faster, also when the CPU queues work ahead of the GPU, where the
latency (start to completion) grows with the queue even as the program speeds up. The latency is
shown beside it, never gated by default.

Noise: the per-iteration periods of the steady state (warm-up excluded) of both runs are compared
with a two-sided Mann-Whitney U test (normal approximation with tie correction), the latencies
likewise for the latency. ``verdict`` is the one place that turns a change into words: better or
worse (faster or slower) only when the test says ``p < alpha``, or, for a metric without a test of
its own, when the change exceeds the run-to-run spread of the periods; else "no clear change". The
gate fails when the chosen metric got worse by more than the allowed percentage *and* the test does
not call it noise. With fewer than ``MIN_SAMPLES`` iterations on a side, no test is possible and the
verdict says so (the threshold alone decides).

The modules: ``jsonio`` (an analysis in, from saved JSON or a trace; a diff or ladder out as strict
JSON), ``metrics`` (the metric catalogue and each metric read from one analysis), ``stats`` (the
noise test and the verdict), ``changes`` (the diff of two analyses and what makes them not like for
like), ``gate`` (``--fail-on-regression``), ``ladder`` (one row per analysis).
"""

from __future__ import annotations

from nsysan.compare.changes import Diff, diff
from nsysan.compare.jsonio import dumps, load
from nsysan.compare.metrics import GATE_METRICS, METRICS

__all__ = ["GATE_METRICS", "METRICS", "Diff", "diff", "dumps", "load"]
