"""Run every analysis on a trace once and collect the results (frames and small dicts).

``analyze(trace)`` is the Python entry point; ``Analysis.to_dict()`` is the JSON shape documented
in the README (schema ``nsysan.analysis/1``). Windows: ``capture`` is the whole session;
``steady`` is the steady state of the iteration range when one is found, else the capture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from nsysan.analyses import gaps as gaps_mod
from nsysan.analyses import gpu, launch, nsys_rules, nvtx, summaries
from nsysan.analyses.gpu import Window
from nsysan.analyses.iterations import Iterations, iterations
from nsysan.trace.model import Trace

SCHEMA = "nsysan.analysis/1"


@dataclass(frozen=True)
class Params:
    iteration_range: str | None = None
    min_gap_ns: int = 10_000
    launch_gap_ns: int = 10_000
    utilization_bins: int = 200
    warmup_factor: float = 1.5


@dataclass
class Analysis:
    trace: Trace
    params: Params
    capture: Window
    steady: Window
    ops: pd.DataFrame
    kernels: pd.DataFrame
    kernel_configs: pd.DataFrame
    cuda_api: pd.DataFrame
    osrt: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame
    nvtx_ranges: pd.DataFrame
    nvtx: pd.DataFrame
    launches: pd.DataFrame
    launch_summary: dict[str, Any]
    launch_per_kernel: pd.DataFrame
    busy_capture: pd.DataFrame
    busy_steady: pd.DataFrame
    utilization: pd.DataFrame
    concurrency: pd.DataFrame
    overlap: pd.DataFrame
    stream_pairs: pd.DataFrame
    owned: pd.DataFrame
    gaps: pd.DataFrame
    gap_summary: dict[str, Any]
    iterations: Iterations
    nsys_rules: pd.DataFrame = field(default_factory=pd.DataFrame)
    nsys_instances: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Any] = field(default_factory=list)
    rule_log: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from nsysan.report.jsonout import analysis_to_dict

        return analysis_to_dict(self)


def _capture_window(trace: Trace, ops: pd.DataFrame) -> Window:
    m = trace.meta
    if m.start_ns is not None and m.end_ns is not None and m.end_ns > m.start_ns:
        return Window(m.start_ns, m.end_ns, "capture")
    if len(ops):
        return Window(int(ops["start_ns"].min()), int(ops["end_ns"].max()), "gpu activity")
    return Window(0, 0, "empty")


def analyze(trace: Trace, params: Params | None = None, *, rules: bool = True,
            rule_config: dict[str, dict[str, Any]] | None = None) -> Analysis:
    """All analyses (and, unless ``rules=False``, all rules) on ``trace``."""
    p = params or Params()
    ops = summaries.gpu_ops(trace)
    capture = _capture_window(trace, ops)
    owned = nvtx.owned_ops(trace, ops)
    rg = nvtx.ranges(trace, ops, owned)
    its = iterations(rg, name=p.iteration_range, warmup_factor=p.warmup_factor)
    steady = its.steady if its.steady is not None else capture
    lau = launch.launches(trace, ops)
    busy = gpu.Busy(ops)
    gp = gaps_mod.idle_gaps(trace, ops, capture, min_gap_ns=p.min_gap_ns, launch_gap_ns=p.launch_gap_ns)
    a = Analysis(
        trace=trace, params=p, capture=capture, steady=steady, ops=ops,
        kernels=summaries.kernel_summary(trace), kernel_configs=summaries.kernel_config_summary(trace),
        cuda_api=summaries.api_summary(trace), osrt=summaries.osrt_summary(trace), memcpy=summaries.memcpy_summary(trace),
        memset=summaries.memset_summary(trace), nvtx_ranges=rg, nvtx=nvtx.range_summary(rg),
        launches=lau, launch_summary=launch.launch_summary(lau), launch_per_kernel=launch.per_kernel(lau),
        busy_capture=gpu.device_busy(ops, capture, busy), busy_steady=gpu.device_busy(ops, steady, busy),
        utilization=gpu.utilization_series(ops, capture, bins=p.utilization_bins, busy=busy),
        concurrency=gpu.concurrency(ops, capture, busy), overlap=gpu.copy_compute_overlap(ops, steady, busy),
        stream_pairs=gpu.stream_pair_overlap(ops, steady, busy=busy), owned=owned, gaps=gp,
        gap_summary=gaps_mod.gap_summary(gp, capture), iterations=its,
    )
    if rules:
        from nsysan.rules import run_rules

        a.findings, a.rule_log = run_rules(a, rule_config or {})
    a.nsys_instances = nsys_rules.instances(trace, ops=ops)
    a.nsys_rules = nsys_rules.cross_check(a.nsys_instances, steady, {f.rule for f in a.findings})
    return a


def in_window(df: pd.DataFrame, w: Window, start: str = "start_ns", end: str = "end_ns") -> pd.DataFrame:
    """Rows overlapping the window."""
    return df.loc[(df[start] < w.end_ns) & (df[end] > w.start_ns)]
