"""The result of one trace's analysis: the frozen ``Analysis`` and the ``Params`` it was built with.

Its own module, below the rules (which read it) and above the analyses (whose results it holds), so
that a rule can name the type it reads without importing the code that runs the analyses
(``nsysan/analysis.py``, which builds it). ``Analysis.to_dict()`` is the JSON shape documented in
docs/json.md (schema ``nsysan.analysis/2``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from nsysan._defaults import MIN_GAP_NS, WARMUP_FACTOR
from nsysan._registry import output
from nsysan.analyses.gap_activity import GapActivity
from nsysan.analyses.gpu import Busy, Window
from nsysan.analyses.iterations import Iterations
from nsysan.trace.model import Trace

if TYPE_CHECKING:  # the results of the analyses run after the first ones (imported where they run)
    from nsysan.analyses.memory import MemoryUse
    from nsysan.analyses.metrics import GpuMetrics
    from nsysan.analyses.phases import Phases
    from nsysan.analyses.program import Program
    from nsysan.analyses.ranks import RankAnalysis
    from nsysan.analyses.samples import IdleAttribution
    from nsysan.analyses.sched import ThreadStates
    from nsysan.analyses.slow_iterations import SlowIterations
    from nsysan.analyses.stages import Stages
    from nsysan.analyses.syncs import Syncs
    from nsysan.analyses.tensorrt import TensorRT
    from nsysan.analyses.unified import UnifiedMemory


@dataclass(frozen=True)
class Params:
    iteration_range: str | None = None
    min_gap_ns: int = MIN_GAP_NS
    launch_gap_ns: int = 10_000
    utilization_bins: int = 200
    warmup_factor: float = WARMUP_FACTOR


@dataclass(frozen=True)
class Analysis:
    """Every analysis of one trace, built once by ``analyze`` and frozen (its frames are shared, not
    copied: read them, do not change them). Rendering and writing are ``nsysan.api``'s functions,
    also reachable as the methods below."""

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
    gaps: pd.DataFrame
    gap_activity: GapActivity  # what the submitting threads did in the host and sync gaps
    gap_summary: dict[str, Any]
    iterations: Iterations
    busy_by_process: pd.DataFrame = field(default_factory=pd.DataFrame)
    busy: Busy | None = None  # the merged busy intervals per device (all, compute, comm, memcpy, memset)
    comm: pd.DataFrame = field(default_factory=pd.DataFrame)  # communication ops (comm.comm_ops)
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)  # steady state, per device and type
    comm_per_iteration: pd.DataFrame = field(default_factory=pd.DataFrame)
    nccl_calls: pd.DataFrame = field(default_factory=pd.DataFrame)
    gpu_metrics: GpuMetrics | None = None  # GPU metric means per device (analyses/metrics.py), or None
    idle_samples: IdleAttribution | None = None  # Python samples in host-caused GPU idle time
    ranks: RankAnalysis | None = None  # processes aligned on their collectives, the straggler
    breakdown: pd.DataFrame = field(default_factory=pd.DataFrame)  # per iteration: compute, comm, copy, idle
    # the kernel, CUDA API and copy summaries of the steady window ("kernels", "cuda_api", "memcpy")
    steady_summaries: dict[str, pd.DataFrame] = field(default_factory=dict)
    tensorrt: TensorRT | None = None  # engine executions, per-layer table
    program: Program | None = None  # training or inference, Python or not, the libraries (rules' advice)
    graph_trace: str = "none"
    # beyond time: device memory over time, unified memory, running or blocked, pipeline
    # stages and GPUs taking turns, slow iterations mid-run; and the inputs the trace lacks for them
    memory: MemoryUse | None = None
    unified: UnifiedMemory | None = None
    thread_states: ThreadStates | None = None
    stages: Stages | None = None
    slow_iterations: SlowIterations | None = None
    phases: Phases | None = None  # start-up, GPU-active part, tail; every second of the capture by cause
    syncs: Syncs | None = None  # host synchronizations in the steady iterations, their call sites and drains
    inputs_missing: list[dict[str, str]] = field(default_factory=list)
    nsys_rules: pd.DataFrame = field(default_factory=pd.DataFrame)
    nsys_instances: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Any] = field(default_factory=list)  # rules._base.Finding (the rules sit above this module)
    rule_log: list[dict[str, Any]] = field(default_factory=list)

    # -- conveniences for the Python API and notebooks: the functions of ``nsysan.api`` (registered in
    # ``nsysan._registry`` when the package is imported; the analysis imports no renderer)

    def to_dict(self, *, show_env: bool = False) -> dict[str, Any]:
        """``nsysan.api.to_dict(self)``: the JSON-ready dict (schema ``nsysan.analysis/2``)."""
        return output("to_dict")(self, show_env=show_env)

    def __repr__(self) -> str:
        """``nsysan.api.summary_text(self)``: the trace, the iterations, the window, GPU busy, the findings."""
        return output("summary_text")(self)

    def _repr_html_(self) -> str:
        """``nsysan.api.summary_html(self)``: a compact, self-contained HTML fragment for notebooks."""
        return output("summary_html")(self)

    def to_json(self, path: str | os.PathLike[str] | None = None, *, show_env: bool = False,
                force: bool = False) -> str:
        """``nsysan.api.to_json(self, ...)``: the JSON text ``nsysan analyze --json`` writes; also written
        to ``path`` when given (never over a file nsysan did not write without ``force``, nor the trace)."""
        return output("to_json")(self, path, show_env=show_env, force=force)

    def to_html(self, *, show_env: bool = False) -> str:
        """``nsysan.api.to_html(self)``: the self-contained HTML report of ``nsysan analyze --html``."""
        return output("to_html")(self, show_env=show_env)

    def write_html(self, path: str | os.PathLike[str], *, force: bool = False, show_env: bool = False) -> Path:
        """``nsysan.api.write_html(self, path)``: the HTML report written atomically (same overwrite
        rules as ``to_json``; ``OutputExistsError`` without ``force``, ``UsageError`` over the trace)."""
        return output("write_html")(self, path, force=force, show_env=show_env)

    def write_perfetto(self, path: str | os.PathLike[str], *, force: bool = False) -> Path:
        """``nsysan.api.write_perfetto(self, path)``: the timeline as Chrome trace-event JSON (Perfetto UI),
        as ``nsysan analyze --perfetto`` writes it; same overwrite rules as ``write_html``."""
        return output("write_perfetto")(self, path, force=force)
