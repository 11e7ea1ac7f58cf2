"""What ``nsysan analyze`` keeps of one trace's analysis: ``RunSummary``, built by
``pipeline.summary``, printed by ``terminal.print_summary`` and, for several traces, gathered into
the cross-trace JSON (``cross.cross_summary``). Plain values only: it travels back from a worker
process or a Dask worker (pickled), so it holds no frame and no analysis object."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# (part, ns, share of the capture) and (what filled the start-up, ns)
CapturePart = tuple[str, int, float]
# (label, mean period ns, [(part, mean ns, share)]): where one steady iteration's time goes, per group
BreakdownLine = tuple[str, int, list[tuple[str, int, float]]]


@dataclass(frozen=True)
class FixLine:
    """One finding as the summary lists it under "Fixes"."""

    rule: str
    severity: str  # "critical", "warning", "info"
    impact_ns: int
    per_iteration_ns: int | None
    title: str
    message: str
    suggestion: str


@dataclass(frozen=True)
class CaptureTime:
    """Where every second of the capture went (``analyses.phases``): the parts, the start-up's
    fillers (the four largest), the judged window's idle share and its label."""

    capture_ns: int
    parts: list[CapturePart]
    startup_filled: list[tuple[str, int]]
    window_idle_frac: float
    window: str


@dataclass(frozen=True)
class RunSummary:
    """One analysed trace, as the terminal prints it and a run of many traces collects it.

    Iteration fields are None (``iterations`` 0) when no iteration was found; ``capture_time`` is
    None without the capture's phases."""

    trace: str
    seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)  # the files written, in order
    program: str | None = None  # the program the trace recorded (traces of one program: ranks of one job)
    fixes: list[FixLine] = field(default_factory=list)
    breakdown: list[BreakdownLine] = field(default_factory=list)
    capture_time: CaptureTime | None = None
    gpu_metrics: list[str] = field(default_factory=list)  # lines
    top_kernels: list[tuple[str, int, float, int]] = field(default_factory=list)  # (name, ns, share, count)
    kernel_ns: int = 0
    # the iteration: its range, steady count, the headline figure and the period's companions
    p50_ns: int | None = None
    iterations: int = 0
    range_name: str | None = None
    slow: tuple[int, int, float] | None = None  # (slow iterations, their cost ns, share of the steady time)
    latency_p50_ns: int | None = None
    queueing: bool = False
    queue_depth_p50: float | None = None
    headline: str | None = None  # "period" or "latency"
    throughput_per_s: float | None = None
    why: str = ""
    sequences: int | None = None
    loops: list[tuple[str, int, int, int, int | None]] = field(default_factory=list)  # (thread, pid, tid, n, p50)
    gpu_recorded: bool = True
    busy: list[tuple[int, float, int]] = field(default_factory=list)  # (device, busy share, idle ns) in the window
    window: str = ""
    window_ns: int = 0
    nsys: str | None = None
    slowest_kernel: str | None = None
    # per process with communication: a few numbers and 3 values per collective, on the UTC clock, so
    # the ranks of several exports (or cluster workers) can be aligned (``analyses.ranks.rank_payloads``)
    rank_payloads: list[dict[str, Any]] = field(default_factory=list)
    ranks_verdict: str | None = None
    warnings: list[str] = field(default_factory=list)
    # how each rule ended: (rule, fired/passed/not_checked/disabled, reason); the JSON's "rules" carries the same
    rules_run: list[tuple[str, str, str | None]] = field(default_factory=list)
    nsys_rules: list[tuple[str, int, int]] = field(default_factory=list)  # (nsys rule, count, steady count)

    def straggler_inputs(self) -> dict[str, Any]:
        """What ``analyses.ranks.cross_stragglers`` reads of a trace (it takes plain mappings)."""
        return {"trace": self.trace, "p50_ns": self.p50_ns, "program": self.program,
                "rank_payloads": self.rank_payloads}
