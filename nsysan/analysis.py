"""Run every analysis on a trace once and collect the results (frames and small dicts).

``analyze(trace)`` is the Python entry point; the result, the frozen ``Analysis``, and the ``Params``
it is built with are ``nsysan/result.py``'s (``Analysis.to_dict()`` is the JSON shape documented in
docs/json.md, schema ``nsysan.analysis/2``). Windows: ``capture`` is the whole session;
``steady`` is the steady state of the iteration range when one is found, else the capture.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from nsysan import _memory, _spill
from nsysan._executor import default_workers, event_rows, threads
from nsysan.analyses import breakdown as breakdown_mod
from nsysan.analyses import comm as comm_mod
from nsysan.analyses import gaps as gaps_mod
from nsysan.analyses import gpu, launch, nsys_rules, nvtx, summaries
from nsysan.analyses import phases as phases_mod
from nsysan.analyses.gap_activity import GapActivity
from nsysan.analyses.gpu import Window
from nsysan.analyses.iterations import Iterations, iterations
from nsysan.analyses.join import launched
from nsysan.analyses.program import program
from nsysan.analyses.ranks import RankInputs, analyze_ranks
from nsysan.analyses.tensorrt import analyze_tensorrt
from nsysan.result import Analysis, Params
from nsysan.trace.model import Trace

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Busy
    from nsysan.analyses.metrics import GpuMetrics
    from nsysan.analyses.samples import IdleAttribution
    from nsysan.analyses.syncs import Syncs
    from nsysan.options import RuleConfig

SCHEMA = "nsysan.analysis/2"


def _capture_window(trace: Trace, ops: pd.DataFrame) -> Window:
    m = trace.meta
    if m.start_ns is not None and m.end_ns is not None and m.end_ns > m.start_ns:
        return Window(m.start_ns, m.end_ns, "capture", "capture")
    if len(ops):
        return Window(int(ops["start_ns"].min()), int(ops["end_ns"].max()), "gpu activity", "gpu_activity")
    return Window(0, 0, "empty", "empty")


def gpu_active(ops: pd.DataFrame, capture: Window) -> Window:
    """The GPU-active part of the capture: its first GPU operation's start to its last one's end (the
    judged window of a trace without iterations: never the start-up before the first GPU work nor the
    tail after the last); the capture when nothing ran on the GPU. Only operations a call of the
    program launched count where there are any: unified-memory migrations that CPU page faults start
    after the last kernel (the host reading results back) are the tail's, not GPU work."""
    if len(ops) == 0:
        return capture
    done = launched(ops)
    if done.any() and not done.all():
        ops = ops.loc[done]
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    if capture.kind == "capture":
        lo, hi = max(lo, capture.start_ns), min(hi, capture.end_ns)
    return Window(lo, hi, "GPU-active part", "gpu_active") if hi > lo else capture


def _gaps(trace: Trace, ops: pd.DataFrame, capture: Window,
          p: Params) -> tuple[pd.DataFrame, GapActivity, dict[str, Any]]:
    gp, act = gaps_mod.idle_gaps_with_activity(trace, ops, capture, min_gap_ns=p.min_gap_ns,
                                               launch_gap_ns=p.launch_gap_ns)
    return gp, act, gaps_mod.gap_summary(gp, act, capture)


def _launches(trace: Trace, ops: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any], pd.DataFrame]:
    lau = launch.launches(trace, ops)
    return lau, launch.launch_summary(lau), launch.per_kernel(lau)


def _nvtx(trace: Trace, ops: pd.DataFrame, p: Params) -> tuple[pd.DataFrame, Iterations, pd.DataFrame]:
    """The NVTX ranges, the iterations and the ranges' summary. The ops with their launching thread
    (``owned_ops``, a sorted copy of seven columns of every op) serve both and are let go here."""
    owned = nvtx.owned_ops(trace, ops)
    rg = nvtx.ranges(trace, ops, owned)
    its = iterations(rg, name=p.iteration_range, warmup_factor=p.warmup_factor, owned=owned,
                     gpu_recorded=len(ops) > 0, threads=trace.threads, ops=ops)
    return rg, its, nvtx.range_summary(rg)


def _busy(ops: pd.DataFrame, capture: Window, p: Params) -> tuple[gpu.Busy, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    busy = gpu.Busy(ops)
    return (busy, gpu.device_busy(ops, capture, busy),
            gpu.utilization_series(ops, capture, bins=p.utilization_bins, busy=busy),
            gpu.concurrency(ops, capture, busy))


def _steady(ops: pd.DataFrame, steady: Window, busy: gpu.Busy) -> tuple[pd.DataFrame, ...]:
    return (gpu.device_busy(ops, steady, busy), gpu.copy_compute_overlap(ops, steady, busy),
            gpu.stream_pair_overlap(ops, steady, busy=busy), gpu.process_busy(ops, steady, busy))


def graph_trace_mode(trace: Trace) -> str:
    """How CUDA Graphs were traced: "graph" (``--cuda-graph-trace=graph``: one record per graph
    launch, its kernels absent from the kernel table), "node" (each graph kernel a kernel row with a
    graph node id), or "none" (no graph execution recorded)."""
    if len(trace.graph_launches):
        return "graph"
    k = trace.kernels
    if len(k) and "graph_node_id" in k and bool(k["graph_node_id"].notna().any()):
        return "node"
    return "none"


def _summaries(trace: Trace) -> tuple[pd.DataFrame, ...]:
    return (summaries.kernel_summary(trace), summaries.api_summary(trace), summaries.osrt_summary(trace),
            summaries.memcpy_summary(trace), summaries.memset_summary(trace))


def options(*, iteration_range: str | None = None, min_gap_us: float | None = None,
            warmup_factor: float | None = None, rule_config: Mapping[str, Any] | None = None,
            config: str | os.PathLike[str] | None = None, set: Mapping[str, Any] | Iterable[str] | None = None,
            disable: Iterable[str] | None = None) -> tuple[Params, RuleConfig]:
    """The analysis options of ``nsysan analyze``, under the CLI's names and units, checked as the CLI
    checks them (``ValueError`` with the CLI's words): ``Params`` and the rules' config. ``config``: a
    JSON file as ``--config``; ``rule_config``: the same ``{rule: {threshold: value}}`` as a dict;
    ``set``: ``{"rule.threshold": value}`` or ``["rule.threshold=value", ...]`` as ``--set`` (applied
    after the two others); ``disable``: rule ids, as ``--disable`` (``RuleConfig.from_api``)."""
    from nsysan.errors import UsageError
    from nsysan.options import RuleConfig, check_number

    def number(name: str, v: Any, **kw: Any) -> Any:
        try:
            return check_number(v, **kw)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None

    kw: dict[str, Any] = {}
    if iteration_range is not None:
        if not isinstance(iteration_range, str):
            raise ValueError(f"iteration_range: {iteration_range!r}: expected an NVTX range name (str)")
        kw["iteration_range"] = iteration_range
    if min_gap_us is not None:
        kw["min_gap_ns"] = int(number("min_gap_us", min_gap_us) * 1000)  # as cmd_analyze converts --min-gap-us
    if warmup_factor is not None:
        kw["warmup_factor"] = number("warmup_factor", warmup_factor, strict=True)
    try:
        rules = RuleConfig.from_api(config, rule_config, set, disable)
    except UsageError as e:
        raise ValueError(str(e)) from None
    return Params(**kw), rules


def analyze(trace: Trace, params: Params | None = None, *, iteration_range: str | None = None,
            min_gap_us: float | None = None, warmup_factor: float | None = None, rules: bool = True,
            rule_config: Mapping[str, Any] | None = None, config: str | os.PathLike[str] | None = None,
            set: Mapping[str, Any] | Iterable[str] | None = None, disable: Iterable[str] | None = None,
            workers: int | None = None, on_analyses: Callable[[Analysis], None] | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> Analysis:
    """All analyses (and, unless ``rules=False``, all rules) on ``trace``.

    Options as ``nsysan analyze`` takes them, with the CLI's names and units (``options``):
    ``iteration_range`` (NVTX range name), ``min_gap_us`` (microseconds), ``warmup_factor``,
    ``rule_config`` / ``config`` / ``set`` (rule thresholds), ``disable`` (rule ids). Invalid values
    raise ``ValueError`` with the CLI's message. ``params`` (a ``Params``) is the older spelling of the
    first three; give one or the other.

    The analyses are pure functions of the trace, so independent ones run on ``workers`` threads
    (default: ``default_workers(event_rows(trace))``): their sorts, searches and C passes release the GIL (on 2
    cores, 245 MB: 1.6-1.8 s against 1.9 s on one thread). The result does not depend on ``workers``.

    ``on_analyses(a)``, when given, is called once every analysis is in ``a`` and before the rules run
    (``a.findings`` still empty; the same object is returned, with the rules' findings): the command
    line starts the report's timeline encoding there, so it overlaps the rules and the JSON. It must
    not change ``a`` (frozen: it cannot reassign a field).

    ``progress(stage, done, total)``, when given, is called from this thread as the analyses finish
    (``done`` of ``total`` steps; the command line shows it on a terminal): on the 2-core machine a
    2.5 GB trace's analyses and rules took 21.5 of its 35 s, its load 8.3 (a test suite running beside it)."""
    p, rule_options = _checked_options(params, iteration_range=iteration_range, min_gap_us=min_gap_us,
                                       warmup_factor=warmup_factor, rule_config=rule_config, config=config,
                                       set=set, disable=disable)
    with _spill.scope():  # a trace loaded into files (larger than memory): this thread's arrays too
        return _analyze(trace, p, rule_options, rules, workers, on_analyses, progress)


def _analyze(trace: Trace, p: Params, rule_options: Any, rules: bool, workers: int | None,
             on_analyses: Callable[[Analysis], None] | None,
             progress: Callable[[str, int, int], None] | None) -> Analysis:
    """``analyze``'s work, once its options are checked."""
    step = _Steps(progress, STEPS)
    with threads(workers or default_workers(event_rows(trace)), "nsysan-analyze") as pool:
        a, nsys_f = _analyses(trace, p, pool, step)
        if on_analyses is not None:
            on_analyses(a)
        # the analyses' temporaries are freed, but the heap keeps their pages (fragmented among the
        # results): hand them back before the rules, so their temporaries do not stack on top
        _memory.release(before_peak=True)
        findings: list[Any] = []
        rule_log: list[dict[str, Any]] = []
        if rules:
            from nsysan.rules import run_rules

            step("rules")
            findings, rule_log = run_rules(a, rule_options.thresholds, pool=pool, disabled=rule_options.disabled)
        step("nsys's own rules")
        instances = nsys_f.result()
    # the last fields, into the object ``on_analyses`` was given (the command line's timeline keys on
    # it): the only assignments to the frozen result, before anyone but ``analyze`` holds it
    _fill(a, findings=findings, rule_log=rule_log, nsys_instances=instances,
          nsys_rules=nsys_rules.cross_check(instances, a.steady, {f.rule for f in findings}))
    step.done()
    _memory.release()  # and the rules' pages, before the report's temporaries
    return a


def _fill(a: Analysis, **fields: Any) -> None:
    """Set fields of the frozen ``a`` while ``analyze`` finishes it (``dataclasses.replace`` would
    make another object than the one ``on_analyses`` saw)."""
    for name, value in fields.items():
        object.__setattr__(a, name, value)


def _checked_options(params: Params | None, **given: Any) -> tuple[Params, RuleConfig]:
    """``analyze``'s options checked (``options``): ``Params`` (``params`` when given) and the rules' config."""
    if params is not None and not isinstance(params, Params):
        raise TypeError(f"params: expected nsysan.analysis.Params, got {type(params).__name__}; or pass the "
                        "options as keywords (iteration_range=..., min_gap_us=..., warmup_factor=...)")
    if params is not None and (given["iteration_range"], given["min_gap_us"],
                               given["warmup_factor"]) != (None, None, None):
        raise TypeError("pass params= or iteration_range/min_gap_us/warmup_factor, not both")
    p, rules = options(**given)
    return params or p, rules


def _analyses(trace: Trace, p: Params, pool: Executor, step: _Steps) -> tuple[Analysis, Future[Any]]:
    """Every analysis of ``analyze`` (findings still empty) on ``pool``, and nsys's own rules' instances
    still running there."""
    # the summaries need no GPU-op table: they run while this thread builds it
    sums_f = pool.submit(_summaries, trace)
    config_f = pool.submit(summaries.kernel_config_summary, trace)
    step("GPU operations")
    ops = summaries.gpu_ops(trace)
    capture = _capture_window(trace, ops)
    step("NVTX ranges and iterations")
    # longest first, so the threads finish together; the NVTX ranges early, as the steady-state
    # window (their iterations) and the busy intervals start the steady-state analyses
    gaps_f = pool.submit(_gaps, trace, ops, capture, p)
    nvtx_f = pool.submit(_nvtx, trace, ops, p)
    busy_f = pool.submit(_busy, ops, capture, p)
    launch_f = pool.submit(_launches, trace, ops)
    nsys_f = pool.submit(nsys_rules.instances, trace, ops=ops)
    rg, its, nvtx_summary = nvtx_f.result()
    step("GPU busy time")
    active = gpu_active(ops, capture)  # the judged window without iterations, and the phases' middle
    steady = its.steady if its.steady is not None else active
    trt_f = pool.submit(analyze_tensorrt, trace, ops, rg, steady)
    busy, busy_capture, utilization, concurrency = busy_f.result()
    step("steady state")
    busy_steady, overlap, stream_pairs, by_process = pool.submit(_steady, ops, steady, busy).result()
    comm_ops = comm_mod.comm_ops(ops, busy)
    step("summaries")
    kernels, cuda_api, osrt, memcpy, memset = sums_f.result()
    window_f = pool.submit(summaries.window_summaries, trace, steady.start_ns, steady.end_ns,
                           {"kernels": kernels, "cuda_api": cuda_api, "memcpy": memcpy})
    # what needs neither the gaps nor the launches runs while they finish
    early_f = pool.submit(_without_gaps, trace, ops, its, steady, busy, comm_ops)
    # the hidden syncs too, where the export has no call sites (``_beyond_time`` waits for them)
    syncs_f = None if _sample_tables(trace) else pool.submit(_syncs, trace, ops, its, steady, None)
    step("launches")
    lau, launch_summary, per_kernel = launch_f.result()
    step("idle gaps and their causes")
    gp, gap_activity, gap_summary = gaps_f.result()
    step("communication, ranks and samples")
    a = Analysis(
        trace=trace, params=p, capture=capture, steady=steady, ops=ops,
        kernels=kernels, kernel_configs=config_f.result(), cuda_api=cuda_api, osrt=osrt, memcpy=memcpy,
        memset=memset, nvtx_ranges=rg, nvtx=nvtx_summary, launches=lau, launch_summary=launch_summary,
        launch_per_kernel=per_kernel, busy_capture=busy_capture, busy_steady=busy_steady,
        utilization=utilization, concurrency=concurrency, overlap=overlap, stream_pairs=stream_pairs,
        gaps=gp, gap_activity=gap_activity, gap_summary=gap_summary, iterations=its,
        busy_by_process=by_process,
        graph_trace=graph_trace_mode(trace), comm=comm_ops, busy=busy, nccl_calls=comm_mod.nccl_calls(rg),
        steady_summaries=window_f.result(), **early_f.result(),
        phases=phases_mod.phases(capture, ops, active, steady, busy_steady, gp, trace.cuda_api,
                                 trace.osrt),
    )
    # the analyses that read the others
    a = replace(a, ranks=analyze_ranks(RankInputs.of(a)), idle_samples=_idle_samples(trace, a),
                gpu_metrics=_gpu_metrics(trace, a), tensorrt=trt_f.result())
    a = replace(a, program=program(trace, nvtx_summary, a.tensorrt))
    return _beyond_time(trace, a, syncs_f), nsys_f


def _without_gaps(trace: Trace, ops: pd.DataFrame, its: Iterations, steady: Window, busy: Busy,
                  comm_ops: pd.DataFrame) -> dict[str, Any]:
    """The analyses that read neither the gaps nor the launches (a task of ``_analyses``' pool, beside
    them): communication per iteration, the iteration breakdown, and the analyses of resources other
    than time and of outliers but the hidden syncs (``_syncs``). Fields of ``Analysis``."""
    from nsysan.analyses.memory import memory_use
    from nsysan.analyses.recorded import missing_inputs
    from nsysan.analyses.sched import thread_states
    from nsysan.analyses.slow_iterations import slow_iterations
    from nsysan.analyses.stages import stages
    from nsysan.analyses.unified import unified_memory

    return dict(collectives=comm_mod.collectives(comm_ops, steady, busy),
                comm_per_iteration=comm_mod.comm_per_iteration(comm_ops, its.table, busy),
                breakdown=breakdown_mod.iteration_breakdown(ops, its.table, busy),
                memory=memory_use(trace, its), unified=unified_memory(trace, its, steady),
                thread_states=thread_states(trace), stages=stages(comm_ops, busy, steady, its),
                slow_iterations=slow_iterations(trace, its, ops, busy), inputs_missing=missing_inputs(trace))


def _syncs(trace: Trace, ops: pd.DataFrame, its: Iterations, steady: Window, sites: pd.DataFrame | None) -> Syncs:
    from nsysan.analyses.syncs import hidden_syncs

    return hidden_syncs(trace.cuda_api, trace.memcpy, ops, its.table, (steady.start_ns, steady.end_ns), sites)


def _beyond_time(trace: Trace, a: Analysis, syncs_f: Future[Syncs] | None) -> Analysis:
    """The hidden syncs: ``syncs_f``'s, or, for exports with call sites (read by ``_idle_samples``
    from their sampling or backtrace tables), found here with them."""
    if syncs_f is not None:
        return replace(a, syncs=syncs_f.result())
    sites = a.idle_samples.site_calls if a.idle_samples is not None else None
    return replace(a, syncs=_syncs(trace, a.ops, a.iterations, a.steady, sites))


def _sample_tables(trace: Trace) -> bool:
    """Whether ``_idle_samples`` reads samples and call sites from this export."""
    tables = set(getattr(trace.meta, "tables", ()) or ())
    return bool(tables & {"NVTX_PAYLOAD_SCHEMA_ENTRIES", "COMPOSITE_EVENTS", "CUDA_CALLCHAINS"}) \
        and bool(trace.meta.path)


STEPS = 10  # the calls of ``_Steps`` in ``analyze``, the rules' included


class _Steps:
    """``analyze``'s progress: each call names the step now being waited for (``done`` counts the
    steps before it); ``done()`` reports them all finished. Nothing without a callback."""

    def __init__(self, progress: Callable[[str, int, int], None] | None, total: int) -> None:
        self.progress, self.total, self.count = progress, total, 0

    def __call__(self, stage: str) -> None:
        if self.progress is not None:
            self.progress(stage, min(self.count, self.total), self.total)
        self.count += 1

    def done(self) -> None:
        if self.progress is not None:
            self.progress("done", self.total, self.total)


def _idle_samples(trace: Trace, a: Analysis) -> IdleAttribution:
    """CPU and Python samples in the host-caused idle gaps of the steady state, per gap class and over the
    steady loop on the launching thread(s), and the call sites of the steady state's CUDA calls
    (``analyses/samples.py``); read only from exports that hold sampling or backtrace tables, and only
    the samples of the steady window on the threads that matter."""
    from nsysan.analyses.samples import IdleAttribution, call_sites_of, idle_attribution, launching_threads

    tables = set(getattr(trace.meta, "tables", ()) or ())
    if not _sample_tables(trace):
        return idle_attribution(None, a.gaps, a.steady, tables=tables)
    import sqlite3

    from nsysan.trace.samples import read_samples

    launch = launching_threads(a.launches, a.steady)
    g = a.gaps
    threads = set(launch)
    if len(g):
        h = g.loc[g["cause"].isin(["host", "sync"]).to_numpy()]
        threads |= set(zip(h["pid"].astype("int64").tolist(), h["tid"].astype("int64").tolist()))
    try:
        samples = read_samples(trace.meta.path, window=(a.steady.start_ns, a.steady.end_ns), threads=sorted(threads))
    except (sqlite3.Error, ValueError, KeyError, IndexError, TypeError) as e:  # damaged sampling tables
        return IdleAttribution(note=f"the sampling tables of this export could not be read ({type(e).__name__})")
    out = idle_attribution(samples, a.gaps, a.steady, launch_threads=launch, tables=tables)
    call_sites_of(out, samples, trace.cuda_api, a.steady)
    return out


def _gpu_metrics(trace: Trace, a: Analysis) -> GpuMetrics | None:
    """GPU metric means per device, range, iteration and kernel group (``analyses/metrics.py``), from
    the samples the loader read (``Trace.gpu_metrics``); None when the export has no GPU metrics."""
    from nsysan.analyses.metrics import analyze_metrics

    return analyze_metrics(getattr(trace, "gpu_metrics", None), a.nvtx_ranges, a.steady, a.iterations.table, a.ops)


