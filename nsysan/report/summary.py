"""What ``nsysan analyze`` keeps of one trace's analysis: ``RunSummary``, built by
``run_summary``, printed by ``terminal.print_summary`` and, for several traces, gathered into
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


def run_summary(a: Any, trace: Any, trace_path: str, outputs: list[str], seconds: float) -> RunSummary:
    """What ``nsysan analyze`` prints of an analysis (``report.terminal.print_summary``), and what a
    run of many traces collects per trace: plain values (``RunSummary``). The modules it reads are
    imported when a summary is built, not when the command line starts."""
    from nsysan.trace.launched_program import launched_program

    st = a.iterations.stats
    kernels = a.steady_summaries.get("kernels", a.kernels)
    return RunSummary(
        trace=trace_path, seconds=seconds, outputs=outputs,
        # the program the trace recorded (only traces of one program are ranks of one job: a straggler)
        program=launched_program(trace.meta.capture),
        fixes=[FixLine(rule=f.rule, severity=f.severity.name.lower(), impact_ns=int(f.impact_ns),
                       per_iteration_ns=f.per_iteration_ns, title=f.title, message=f.message,
                       suggestion=f.suggestion) for f in a.findings],
        breakdown=_breakdown_lines(a), capture_time=_capture_lines(a), gpu_metrics=_gpu_metrics_lines(a),
        top_kernels=[(str(r["name"]), int(r["total_ns"]), float(r["share"]), int(r["count"]))
                     for r in kernels.head(5).to_dict("records")],
        kernel_ns=int(kernels["total_ns"].sum()),
        p50_ns=st.p50_ns, iterations=st.count or 0, range_name=a.iterations.range_name,
        slow=slow_share(a), latency_p50_ns=st.latency_p50_ns,
        queueing=bool(st.latency_includes_queueing), queue_depth_p50=st.queue_depth_p50,
        headline=st.headline, throughput_per_s=st.throughput_per_s, why=a.iterations.why,
        sequences=st.sequences,
        # per thread or rank that runs the loop: its name, steady iterations and period
        loops=[(str(q.get("thread") or f"pid {q['pid']} tid {q['tid']}"), int(q["pid"]), int(q["tid"]),
                int(q["count"]), q.get("period_p50_ns")) for q in a.iterations.sequences],
        gpu_recorded=bool(len(a.ops)),
        busy=[(int(r.device_id), float(r.busy_frac), int(r.idle_ns)) for r in a.busy_steady.itertuples()],
        window=a.steady.label, window_ns=a.steady.dur_ns, nsys=trace.meta.nsys_version,
        slowest_kernel=(a.kernels.iloc[0]["name"] if len(a.kernels) else None),
        rank_payloads=_rank_payloads(a, trace_path),
        ranks_verdict=(a.ranks.verdict if a.ranks is not None and len(a.ranks.ranks) > 1 else None),
        warnings=list(trace.meta.warnings),
        # how each rule ended: fired, passed (it looked at the data), not_checked (with the input the
        # trace lacks), disabled; the JSON's "rules" and the report's "Rules run" carry the same
        rules_run=[(r["rule"], r["status"], r.get("reason")) for r in a.rule_log],
        nsys_rules=[(r["nsys_rule"], int(r["count"]), int(r["steady_count"])) for r in
                    a.nsys_rules.to_dict("records") if r["count"]])


def _gpu_metrics_lines(a: Any) -> list[str]:
    from nsysan.report.metrics_view import terminal_lines

    return terminal_lines(a)


def slow_share(a: Any) -> tuple[int, int, float] | None:
    """``analyses.slow_iterations.headline`` (imported when a summary is built: not at start-up)."""
    from nsysan.analyses.slow_iterations import headline_of

    return headline_of(a.slow_iterations, a.findings)


def _capture_lines(a: Any) -> CaptureTime | None:
    """Where every second of the capture went (``analyses.phases``): the parts, the start-up's fillers,
    the window's idle share."""
    from nsysan.report.tables import capture_parts

    ph = a.phases
    if ph is None:
        return None
    span = ph.judged.dur_ns
    return CaptureTime(capture_ns=ph.capture.dur_ns, parts=capture_parts(ph),
                       startup_filled=[(x["what"], int(x["ns"]))
                                       for x in sorted(ph.startup_filled, key=lambda x: -x["ns"])[:4]],
                       window_idle_frac=(ph.idle_ns / span) if span else 0.0, window=ph.judged.label)


def _breakdown_lines(a: Any) -> list[tuple[str, int, list[tuple[str, int, float]]]]:
    """Where one steady iteration's time goes, per sequence group (``report.view`` draws the same
    numbers as a stacked bar): (label, mean period ns, [(part, mean ns, share)])."""
    from nsysan.analyses.breakdown import breakdown_groups
    from nsysan.report.tables import BREAKDOWN_PARTS

    return [(label, int(sm["span_mean_ns"]), [(name, int(sm[k + "_mean_ns"]), float(sm[k + "_frac"]))
                                              for k, name, _ in BREAKDOWN_PARTS if sm[k + "_mean_ns"] > 0])
            for label, sm in breakdown_groups(a.breakdown)]


def _rank_payloads(a: Any, trace_path: str) -> list[dict[str, Any]]:
    from nsysan.analyses.ranks import rank_payloads

    return rank_payloads(a, offset_ns=a.trace.meta.epoch_offset_ns or 0, trace=str(trace_path))
