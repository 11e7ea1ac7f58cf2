"""The canonical machine output: ``nsysan.analysis/2`` JSON (sorted keys, integer nanoseconds),
and the same tables as CSV (formula-injection safe)."""

from __future__ import annotations

import csv
import io
import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.breakdown import breakdown_summary
from nsysan.analyses.frames import distinct
from nsysan.analyses.iterations.values import Choice
from nsysan.report import metrics_view
from nsysan.report.records import clean as _clean
from nsysan.report.records import records
from nsysan.units import clean_text

SCHEMA = "nsysan.analysis/2"


def _graph_launches(a: Any) -> dict[str, Any]:
    """The CUDA Graph launches: ``count`` the launch calls that ran on the GPU at either tracing level
    (``analyses/launch.py``: node-level records of one launch are its nodes, not launches);
    ``total_ns`` the GPU time of graphs traced whole (their kernels are in no kernel table), 0 at node
    level (their kernels are in the kernel tables, counted there)."""
    g = a.trace.graph_launches
    if len(g):
        return {"count": len(g), "total_ns": int(g["dur_ns"].sum()), "node_ops": 0,
                "note": "CUDA Graph launches traced as a whole (--cuda-graph-trace=graph): their "
                        "kernels are not in the kernel tables"}
    graphs = a.launch_summary.get("graphs") or {}
    return {"count": int(graphs.get("count", 0)), "total_ns": 0, "node_ops": int(graphs.get("node_ops", 0)),
            "note": "CUDA Graph launches traced at node level (--cuda-graph-trace=node): count is the graph "
                    "launch calls that ran; the GPU operations of their graphs (node_ops) are in the kernel, "
                    "copy and memset tables, counted there" if graphs.get("count") else
                    "no CUDA Graph launch in the trace"}


def ranks_to_dict(r: Any) -> dict[str, Any]:
    """``analyses.ranks.RankAnalysis`` as JSON: the per-rank table, the straggler and the verdict."""
    return {"ranks": records(r.ranks), "not_aligned": list(r.not_aligned), "straggler": _clean(r.straggler),
            "verdict": r.verdict, "collectives_aligned": r.collectives_aligned,
            "lanes": {int(k): v for k, v in (getattr(r, "lanes", None) or {}).items()}}


def metrics_dict(gm: Any) -> dict[str, Any]:
    """GPU metrics (``analyses/metrics.py``) as JSON (``report/metrics_view.py``)."""
    return metrics_view.to_dict(gm)


def _samples_dict(s: Any) -> dict[str, Any]:
    """Which sampling inputs the export holds (and which it lacks, with the flag that adds each), the
    functions sampled in host-caused GPU idle time, per gap class and over the steady loop, and the
    call sites of the steady state's CUDA calls (``analyses/samples.py``)."""
    if s is None:
        return {}

    def group(g: Any) -> dict[str, Any]:
        return {**_clean({k: v for k, v in g.to_dict().items() if k not in ("functions", "stacks")}),
                "functions": records(g.table, 20), "stacks": _clean(g.stacks)}

    return {"inputs": _clean(dict(s.inputs)), "missing_inputs": _clean(list(getattr(s, "missing", []))),
            "source": getattr(s, "source", ""), "idle_samples": int(s.samples_in_gaps), "idle_gap_ns": int(s.gap_ns),
            "note": s.note, "idle_functions": records(s.table, 50),
            "by_gap_class": [group(g) for g in getattr(s, "classes", [])],
            "steady_loop": group(s.steady) if getattr(s, "steady", None) is not None else None,
            "min_samples": 10,
            "about": "samples on the submitting thread inside the host-caused idle gaps of the steady state (all, "
                     "and per gap class: the gap's activity label), and every sample on the launching thread(s) "
                     "over the steady window (steady_loop); self = the innermost own-code frame, inclusive = "
                     "anywhere on the stack; Python frames first, else native ones (module = library); fewer "
                     "than min_samples are not attributed",
            "call_sites": records(getattr(s, "sites", None), 50)}


def _trace_dict(a: Any, show_env: bool) -> dict[str, Any]:
    """The ``trace`` block: the export, its GPUs and processes, the capture and the loader's warnings."""
    t = a.trace
    m = t.meta
    gpus = records(t.gpus[["device_id", "name", "sm_count", "total_memory_bytes", "compute_major", "compute_minor"]])
    procs = sorted(set(distinct(a.ops["pid"].to_numpy()).tolist()) | set(distinct(t.cuda_api["pid"].to_numpy()).tolist()))
    pnames = dict(zip(t.processes["pid"].tolist(), t.processes["name"].astype(str).tolist())) if len(t.processes) else {}
    trace: dict[str, Any] = {
        "path": Path(m.path).name, "nsys_version": m.nsys_version, "schema_version": m.schema_version,
        "platform": m.platform, "version_source": m.version_source, "gpus": gpus,
        "processes": [{"pid": int(p), "name": pnames.get(p)} for p in procs],
        "start_ns": m.start_ns, "end_ns": m.end_ns, "duration_ns": m.duration_ns, "counts": t.counts(),
        "gpu_activity_recorded": bool(len(a.ops)), "cuda_graph_trace": a.graph_trace,
        "warnings": list(m.warnings),
    }
    if show_env:
        trace["capture"] = [{"name": k, "value": v} for k, v in m.capture]
    return trace


def analysis_to_dict(a: Any, *, show_env: bool = False, limit: int = 500) -> dict[str, Any]:
    """The ``nsysan.analysis/2`` document (docs/json.md) of an analysis, JSON-ready."""
    ss = a.steady_summaries
    out = {
        "schema": SCHEMA,
        "trace": _trace_dict(a, show_env),
        "windows": {"capture": a.capture.to_dict(), "steady": a.steady.to_dict()},
        "phases": a.phases.to_dict() if a.phases is not None else None,
        "kernels": {"by_name": records(a.kernels, limit), "by_config": records(a.kernel_configs, limit),
                    "steady_by_name": records(ss["kernels"], limit) if "kernels" in ss else []},
        "cuda_api": {"by_name": records(a.cuda_api, limit),
                     "steady_by_name": records(ss["cuda_api"], limit) if "cuda_api" in ss else []},
        "os_runtime": {"by_name": records(a.osrt, limit)},
        "memcpy": {"by_kind": records(a.memcpy), "steady_by_kind": records(ss["memcpy"]) if "memcpy" in ss else []},
        "memset": {"by_kind": records(a.memset)},
        "graph_launches": _graph_launches(a),
        "nvtx": {"by_name": records(a.nvtx, limit),
                 "containment": "a GPU op belongs to a range when its launching API call started on the range's "
                                "thread inside the range"},
        "launch": {**a.launch_summary, "per_kernel": records(a.launch_per_kernel, limit)},
        "overlap": {"window": a.steady.to_dict(), "by_direction": records(a.overlap),
                    "stream_pairs": records(a.stream_pairs)},
        "gpu": {"capture": records(a.busy_capture), "steady": records(a.busy_steady),
                "steady_by_process": records(a.busy_by_process),
                "note": "capture/steady: one row per device, busy = union of the ops of every process on it",
                "concurrency": records(a.concurrency),
                "utilization": {"window": a.capture.to_dict(), "bins": records(a.utilization)}},
        "gaps": {"summary": _clean(a.gap_summary), "min_gap_ns": a.params.min_gap_ns,
                 "largest": records(no_sentinels(a.gaps.nlargest(limit, "gap_ns").sort_values("start_ns")
                                                 if len(a.gaps) else a.gaps))},
        "communication": {
            "collectives": records(a.collectives), "nccl_calls": records(a.nccl_calls, limit),
            "per_iteration": records(a.comm_per_iteration),
            "note": "communication kernels (NCCL ...) per device and collective in the steady state; exposed = "
                    "no compute kernel ran on the device meanwhile; nccl_calls: NCCL's NVTX enqueue ranges. "
                    "Message sizes are in NCCL's NVTX payloads, which exports do not carry."},
        "samples": _samples_dict(a.idle_samples),
        "gpu_metrics": metrics_dict(a.gpu_metrics),
        "ranks": {**(ranks_to_dict(a.ranks) if a.ranks is not None else {}),
                  "note": "one row per process that ran communication kernels; collectives aligned by order per "
                          "type; wait = last rank's arrival - this rank's; transfer = end - last arrival"},
        "iterations": _iterations_dict(a, limit),
        **_beyond_time(a, limit),
        "tensorrt": _tensorrt(a, limit),
        "program": a.program.to_dict() if a.program is not None else None,
        # in ``rules.ranked`` order; per_iteration_ns: the saving per steady iteration (None for a
        # whole-capture finding or one without a saving)
        "findings": [{**f.to_dict(), "per_iteration_ns": getattr(f, "per_iteration_ns", None)} for f in a.findings],
        "nsys_analyze": {"rules": records(a.nsys_rules),
                         "instances": {k: records(no_sentinels(v.nlargest(10, "dur_ns")))
                                       for k, v in a.nsys_instances.items()},
                         "note": "what nsys analyze (2022.4 rules, 2023+ names) would list on this trace, split into "
                                 "the steady state and the time outside it, with the nsysan rules that judge it; "
                                 "instances: the 10 longest per rule"},
        "rules": _clean(a.rule_log),
    }
    return _clean(out)


def _beyond_time(a: Any, limit: int) -> dict[str, Any]:
    """Memory, unified memory, running or blocked, stages, slow iterations, and the inputs the trace
    lacks for them (docs/json.md)."""
    m, sl = a.memory, a.slow_iterations
    u, th, st = a.unified, a.thread_states, a.stages
    return {
        "memory": None if m is None else {
            "source": m.source, "per_process": records(m.per_process), "growth": records(m.growth),
            "series": records(m.series, 4 * limit), "missing_flags": list(m.missing),
            "note": "live device memory (allocations - deallocations, host kinds left out) per device and process; "
                    "growth: the allocations and frees whose calls lie in each steady iteration's CPU time"},
        "unified_memory": None if u is None or not u.present else u.to_dict(),
        "thread_states": None if th is None else th.to_dict(),
        "stages": None if st is None else st.to_dict(),
        "slow_iterations": None if sl is None else {
            "factor": sl.factor, "cost_ns": sl.cost_ns, "steady_span_ns": sl.steady_span_ns,
            "periodic": [{"pid": k[0], "tid": k[1], "every": v} for k, v in sorted(sl.periodic.items())],
            "iterations": records(sl.table.assign(
                new_kernel_count=sl.table["new_kernels"].map(len),
                new_kernels=sl.table["new_kernels"].map(lambda v: list(v[:10]))), limit)},
        "inputs_missing": list(a.inputs_missing),
    }


def _iterations_dict(a: Any, limit: int) -> dict[str, Any]:
    """The ``iterations`` block: the range chosen and why, the candidates, the steady window, the
    statistics, each iteration, the levels of steps and the breakdown of an iteration's time."""
    it = a.iterations
    return {"range": it.range_name, "how": it.how, "why": it.why, "warmup": it.warmup,
            "candidates": _clean([c.to_json() for c in sorted(it.candidates, key=lambda c: (
                c.chosen not in (Choice.AUTO, Choice.OPTION), -c.gpu_coverage, -c.count, c.name))[:limit]]),
            "steady": it.steady.to_dict() if it.steady else None, "stats": _clean(it.stats.to_json()),
            "timed_regions": _clean(it.timed_regions), "per_iteration": records(iteration_table(it.table)),
            # steps within steps: the other levels (sub-steps inside each iteration, ranges
            # enclosing iterations), the sub-steps per iteration, one summary per thread's loop
            "levels": _clean(getattr(it, "levels", [])),
            "substeps": records(getattr(it, "substeps", pd.DataFrame())),
            "sequences": _clean(getattr(it, "sequences", [])),
            "breakdown": {"steady_mean": _clean(breakdown_summary(a.breakdown)),
                          "per_iteration": records(a.breakdown),
                          "note": "each iteration's period (since the previous completion on its "
                                  "thread) split on its process's device into compute, exposed "
                                  "communication, exposed copies and idle; the parts add up to the span"}}


# Columns whose analyses mark "none" with a negative number (-1): the outputs show null (JSON) or an
# empty cell (CSV) instead, never the sentinel. ``True``: any negative value is the sentinel (an id,
# a period); an int: that value only (a time, which can be negative on a shifted clock).
SENTINELS: dict[str, bool | int] = {"period_ns": True, "tid": True, "device_id": True, "stream_id": True,
                                    "api_start_ns": -1, "proj_start_ns": -1, "proj_end_ns": -1}


def no_sentinels(t: pd.DataFrame) -> pd.DataFrame:
    """``t`` with each ``SENTINELS`` value of an integer column missing (a nullable integer column)."""
    if t is None or len(t) == 0:
        return t
    new = {}
    for col, how in SENTINELS.items():
        if col not in t or not (isinstance(t[col].dtype, np.dtype) and t[col].dtype.kind == "i"):
            continue
        v = t[col].to_numpy(np.int64)
        none = v < 0 if how is True else v == how
        if none.any():
            new[col] = pd.arrays.IntegerArray(np.where(none, 0, v), none)
    return t.assign(**new) if new else t


def iteration_table(t: pd.DataFrame) -> pd.DataFrame:
    """The iterations as the outputs show them: a sequence's first iteration has no period (null in
    the JSON, an empty CSV cell; ``analyses.iterations`` marks it -1, which is never written)."""
    return no_sentinels(t)


def _tensorrt(a: Any, limit: int) -> dict[str, Any]:
    tr = a.tensorrt
    note = ("TensorRT engine executions (ExecutionContext::execute/enqueue NVTX ranges) and their layer ranges; "
            "layers: per engine and layer over the executions of table_window; gpu_*: GPU ops launched inside "
            "the range (sum of durations); gpu_share: of the engine's execution GPU time; cpu_share: of its "
            "execution host time")
    if tr is None or not tr.found:
        return {"found": False, "note": note}
    return {"found": tr.found, "gpu_recorded": tr.gpu_recorded, "table_window": tr.table_window,
            "engines": records(tr.engines), "layers": records(tr.table, limit),
            "executions": records(no_sentinels(tr.executions), limit), "notes": list(tr.notes), "note": note}


def to_json(a: Any, *, show_env: bool = False) -> str:
    return dumps(analysis_to_dict(a, show_env=show_env))


def dumps(d: dict[str, Any]) -> str:
    """Sorted keys, one top-level section per line. ``json.dumps(indent=...)`` falls back to the pure
    Python encoder (1.1 s for a 1.5 MB report); each section goes through the C encoder instead."""
    body = ",\n".join(f"{json.dumps(str(k))}: {json.dumps(d[k], sort_keys=True, ensure_ascii=False)}"
                      for k in sorted(d))
    return "{\n" + body + "\n}\n"


# what a spreadsheet skips before it decides that a cell is a formula: white space of every kind
# (a tab, NBSP, U+3000 ideographic space), invisible format characters (U+200B zero-width space,
# U+FEFF, soft hyphen, direction marks, variation selectors, tags, ...) and characters that draw
# nothing (the Hangul fillers U+115F, U+1160, U+3164, U+FFA0, the blank braille pattern U+2800,
# the combining grapheme joiner U+034F, Khmer's inherent vowels U+17B4-5, musical format marks)
_CSV_SKIP = re.compile(r"[\s\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                       r"\u2060-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001d173-\U0001d17a"
                       r"\U000e0000-\U000e0fff]*")
_CSV_FORMULA = frozenset("=+-@\u2212")  # with NFKC, also the full-width and small forms (＝ ＋ － ＠ ﹦ ...)


def csv_safe(v: Any) -> Any:
    """Neutralise spreadsheet formula injection in a text cell: control characters (a carriage
    return or newline inside a name, which a reader may take for a new row) are written escaped as
    the terminal shows them (``\\x0a``, ``clean_text``), and a cell whose first visible character
    is ``= + - @`` (after white space and invisible characters, and in its NFKC form: ``＝ ＋ － ＠``
    and the like) gets a leading ``'``."""
    if not isinstance(v, str) or not v:
        return v
    v = clean_text(v)
    c = v[0]
    if " " < c < "\x7f":  # the common case: a visible ASCII character first
        return "'" + v if c in _CSV_FORMULA else v
    i = _CSV_SKIP.match(v).end()  # type: ignore[union-attr]
    while i < len(v):
        first = unicodedata.normalize("NFKC", v[i])
        if first and not _CSV_SKIP.fullmatch(first):
            return "'" + v if first[0] in _CSV_FORMULA else v
        i = _CSV_SKIP.match(v, i + 1).end()  # type: ignore[union-attr]  # a character NFKC makes a space
    return v


def to_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_safe(str(c)) for c in df.columns])
    for row in df.itertuples(index=False):
        w.writerow([csv_safe(_clean(v)) for v in row])
    return buf.getvalue()


def csv_tables(a: Any) -> dict[str, pd.DataFrame]:
    return {"kernels": a.kernels, "kernel_configs": a.kernel_configs, "cuda_api": a.cuda_api, "os_runtime": a.osrt,
            "memcpy": a.memcpy,
            "memset": a.memset, "nvtx": a.nvtx, "launches": a.launch_per_kernel, "overlap": a.overlap,
            "gpu_busy": a.busy_capture, "gaps": no_sentinels(a.gaps.drop(columns=["breakdown"], errors="ignore")),
            "iterations": iteration_table(a.iterations.table), "iteration_breakdown": a.breakdown,
            "collectives": a.collectives,
            "ranks": a.ranks.ranks if a.ranks is not None else pd.DataFrame(),
            "nsys_analyze": a.nsys_rules,
            **({"tensorrt_layers": a.tensorrt.table, "tensorrt_executions": no_sentinels(a.tensorrt.executions),
                "tensorrt_engines": a.tensorrt.engines}
               if a.tensorrt is not None and a.tensorrt.found else {}),
            **({"gpu_metrics_by_range": a.gpu_metrics.by_range, "gpu_metrics_by_iteration": a.gpu_metrics.by_iteration,
                "gpu_metrics_by_kernel": a.gpu_metrics.by_kernel}
               if a.gpu_metrics is not None else {}),
            "findings": pd.DataFrame([{k: v for k, v in f.to_dict().items() if k not in ("evidence", "window")}
                                      for f in a.findings])}


def write_csv(a: Any, folder: Path, *, force: bool, protect: Any = ()) -> None:
    """``--csv DIR``: each of ``csv_tables`` as ``DIR/<name>.csv``."""
    from nsysan.outputs import write_atomic

    for name, df in csv_tables(a).items():
        write_atomic(Path(folder) / f"{name}.csv", to_csv(df), force=force, protect=protect)
