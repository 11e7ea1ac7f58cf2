"""The HTML view model: everything the template shows, already computed and formatted.

No pandas past this point. Strings from the trace stay raw here; Jinja2 autoescaping escapes them
in HTML, and ``tojson`` escapes ``<``, ``>`` and ``&`` in embedded JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.program import program_records
from nsysan.analyses.slow_iterations import headline_of as slow_headline
from nsysan.report import metrics_view
from nsysan.report.jsonout import ranks_to_dict
from nsysan.report.ranks_view import ranks_view
from nsysan.report.resources_view import resources_tables
from nsysan.report.samples_view import samples_view
from nsysan.report.tables import BREAKDOWN_PARTS, MAX_TABLE_ROWS, SHOW_ROWS, Table, breakdown_rows, capture_rows, table  # noqa: F401
from nsysan.report.timeline import build_timeline, evidence_span
from nsysan.units import fmt_bytes, fmt_ns, fmt_pct, fmt_rate


@dataclass
class FindingView:
    rule: str
    severity: str
    title: str
    message: str
    suggestion: str
    impact: str
    evidence: Table | None


@dataclass
class Bar:
    label: str
    value: str
    frac: float  # 0..1 of the largest


# the loader's warning that long names or NVTX texts were shortened (nsysan/trace/strings.py)
_SHORTENED = re.compile(r"[0-9]+ name\(s\) or NVTX text\(s\) longer than [0-9,]+ characters were shortened")


@dataclass
class Report:
    title: str
    generated_by: str
    headline: list[tuple[str, str]]
    info: list[tuple[str, str]]
    findings: list[FindingView]
    tables: list[Table]
    kernel_bars: list[Bar]
    overlap_bars: list[Bar]
    timeline: dict[str, Any]
    rules_log: list[tuple[str, str]]
    warnings: list[str] = field(default_factory=list)
    # warnings that change no number (long names shortened): at the end of the report, off the first screen
    late_warnings: list[str] = field(default_factory=list)
    capture: list[tuple[str, str]] = field(default_factory=list)
    # where one iteration's time goes: (label, [(part, width %, css class, text)]) per row
    breakdown: list[tuple[str, list[tuple[str, float, str, str]]]] = field(default_factory=list)
    # where every second of the capture went: start-up, GPU busy, idle by cause, tail (one bar)
    capture_time: list[tuple[str, list[tuple[str, float, str, str]]]] = field(default_factory=list)
    # several ranks in this export: the ranks panel (report/ranks_view.py), shared with summary.html
    ranks_view: dict[str, Any] = field(default_factory=dict)
    # the first screen: the top fixes (rank, severity, title, rule, saving, share of the window, anchor)
    top_fixes: list[tuple[int, str, str, str, str, str, str]] = field(default_factory=list)
    savings_total: str = ""
    iteration_plot: Plot | None = None
    util_plot: Plot | None = None
    subtitle: str = ""
    samples_view: dict[str, Any] = field(default_factory=dict)  # report/samples_view.py
    gpu_metrics: dict[str, Any] | None = None  # the metrics section (report/metrics_view.py), None without metrics
    # panels left out because they would show nothing: (panel, why), said once in the plots section
    not_shown: list[tuple[str, str]] = field(default_factory=list)
    steady_label: str = "steady state"  # the window the findings judge ("steady state", "GPU-active part", ...)


@dataclass
class Plot:
    """An SVG line plot with axes, drawn by the template: coordinates already in the plot's pixels."""
    width: int
    height: int
    left: int  # the plot area: x in [left, width - 8], y in [8, height - bottom]
    bottom: int
    series: list[tuple[str, str, str]]  # (css class, legend text, polyline points)
    dots: list[tuple[str, float, float, str]]  # (css class, x, y, title)
    xticks: list[tuple[float, str]]
    yticks: list[tuple[float, str]]
    xlabel: str
    ylabel: str
    label: str  # the aria label: what the plot shows


def _largest_in_window(df: pd.DataFrame, col: str, start_ns: int, end_ns: int) -> pd.DataFrame:
    """``in_window(df, ...)`` (or ``df``)``.nlargest(MAX_TABLE_ROWS, col)``, the same rows in the same
    order, choosing on ``col`` alone: only the rows shown are copied (not every gap of the window)."""
    s = df["start_ns"].to_numpy()
    mask = (s >= start_ns) & (s < end_ns)
    rows = None if bool(mask.all()) else np.flatnonzero(mask)
    del mask
    v = df[col].to_numpy()
    top = pd.Series(v if rows is None else v[rows]).nlargest(MAX_TABLE_ROWS).index.to_numpy()
    pos = top if rows is None else rows[top]
    return pd.DataFrame({c: df[c].array.take(pos) for c in df.columns}, copy=False)


def _levels_tables(a: Any) -> list[Table]:
    """Steps within steps, beneath the iterations: the sub-steps of the iteration (ranges of the
    program's own inside each iteration: how many per iteration, their time per iteration) and the
    ranges that enclose iterations; then, when several threads each run their own loop, one row per
    thread. Only when there is something to show (the report's other sections stay as they were)."""
    it = a.iterations
    out: list[Table] = []
    levels = getattr(it, "levels", None) or []
    if levels:
        rows = []
        for lv in levels:
            if lv["role"] == "sub-step":
                per = (f"{lv['per_iteration_p50']:g}" + (f" ({lv['per_iteration_min']}-{lv['per_iteration_max']})"
                                                         if lv["per_iteration_min"] != lv["per_iteration_max"] else ""))
                rows.append({"name": lv["name"], "role": f"sub-step of each '{it.range_name}'",
                             "instances": lv["instances"], "per": per,
                             "cpu": lv["cpu_per_iteration_mean_ns"], "gpu": lv["gpu_per_iteration_mean_ns"],
                             "share": lv["cpu_share"]})
            else:
                per = (f"{lv['iterations_per_instance_p50']:g} iterations"
                       + (f" ({lv['iterations_per_instance_min']}-{lv['iterations_per_instance_max']})"
                          if lv["iterations_per_instance_min"] != lv["iterations_per_instance_max"] else ""))
                rows.append({"name": lv["name"], "role": f"encloses '{it.range_name}' iterations",
                             "instances": lv["instances"], "per": per, "cpu": None, "gpu": None, "share": None})
        out.append(table("iteration_levels", f"Steps within the iteration ('{it.range_name}')", pd.DataFrame(rows), [
            ("Range", "name", lambda v: str(v)[:140]), ("Level", "role", None),
            ("Instances", "instances", lambda v: f"{int(v):,}"), ("Per iteration", "per", None),
            ("CPU per iteration", "cpu", fmt_ns), ("GPU launched per iteration", "gpu", fmt_ns),
            ("Share of the iteration's CPU time", "share", fmt_pct)],
            note="Ranges of the program's own inside each iteration (its breakdown: how many per iteration, "
                 "steady-state means of their CPU time and of the GPU time launched inside them, from their "
                 "thread or a helper thread of the process such as the autograd thread) and ranges around "
                 "iterations. Every iteration's counts are in --json (iterations.substeps)."))
    seqs = getattr(it, "sequences", None) or []
    if len(seqs) > 1:
        out.append(table("iteration_threads", "Loops per thread", pd.DataFrame(seqs), [
            ("Thread", "thread", lambda v: str(v)[:80]), ("pid", "pid", None), ("tid", "tid", None),
            ("Iterations", "count", lambda v: f"{int(v):,}"), ("Warm-up", "warmup", lambda v: f"{int(v):,}"),
            ("Period p50", "period_p50_ns", fmt_ns), ("Latency p50", "latency_p50_ns", fmt_ns)],
            note="Each thread (or process) that runs the iteration range runs its own loop: one sequence each, "
                 "with its own period."))
    return out


def _tensorrt_table(a: Any) -> Table:
    """The per-layer table of every engine, with a bar per layer (its share of the execution: GPU
    time when recorded, else host time), in execution order; sortable like the other tables."""
    tr = a.tensorrt
    if tr is None or not tr.found or len(tr.table) == 0:
        return Table("tensorrt", "TensorRT layers", [], [], [],
                     "No TensorRT engine executions (ExecutionContext::execute/enqueue NVTX ranges) in this trace."
                     if tr is None or not tr.found else
                     "TensorRT executions without layer ranges: build with --profilingVerbosity=detailed.")
    t = tr.table
    gpu = tr.gpu_recorded
    share_col = "gpu_share" if gpu else "cpu_share"
    cols: list[tuple[str, str, Any]] = [
        ("Engine", "engine", None), ("#", "order", lambda v: str(v) if v < 10**9 else "-"),
        ("Layer", "layer", lambda v: str(v)[:200]), ("Kind", "kind", None), ("Count", "count", lambda v: f"{int(v):,}"),
        ("CPU avg", "cpu_avg_ns", fmt_ns)]
    if gpu:
        cols += [("GPU avg", "gpu_avg_ns", fmt_ns), ("GPU total", "gpu_total_ns", fmt_ns)]
    cols += [("Share of execution" + (" (GPU)" if gpu else " (CPU)"), share_col, fmt_pct)]
    if gpu:
        cols += [("Precision", "precision", None)]
    cols += [("Reformat", "reformat_by", lambda v: v or ""), ("Fused ONNX nodes", "fused", lambda v: f"{int(v)}"),
             ("Nodes", "nodes", lambda v: str(v)[:300])]
    tab = table("tensorrt", "TensorRT layers per engine", t, cols)
    shares = pd.to_numeric(t[share_col], errors="coerce").fillna(0.0).to_numpy(float)[:MAX_TABLE_ROWS]
    top = float(shares.max()) if len(shares) else 0.0
    tab.bar_column = [c[1] for c in cols].index(share_col)
    tab.bars = [float(x / top) if top > 0 else 0.0 for x in shares]
    eng = "; ".join(
        f"{r['label']}: {int(r['executions'])} executions ({int(r['steady_executions'])} in the steady state), "
        f"{int(r['contexts'])} thread/stream pair(s), CPU p50 {fmt_ns(r['cpu_p50_ns'])}"
        + (f", GPU p50 {fmt_ns(r['gpu_p50_ns'])}" if gpu else "")
        + (f", {int(r['sync_executions'])} synchronous (execute)" if r["sync_executions"] else "")
        + (f", {int(r['captured_executions'])} captured into a CUDA Graph, {int(r['graph_replays'])} graph replays"
           if r["captured_executions"] else "")
        for r in tr.engines.to_dict("records"))
    tab.note = " ".join(x for x in [
        f"Executions of the {tr.table_window}. {eng}.",
        "GPU time: ops launched inside the layer's range (sum of durations); share: of the engine's execution "
        + ("GPU time." if gpu else "host time."),
        *[n[0].upper() + n[1:] + "." for n in tr.notes], tab.note] if x)
    return tab


def _stat_cols(first: list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    return first + [("Count", "count", lambda v: f"{int(v):,}"), ("Total", "total_ns", fmt_ns),
                    ("Share", "share", fmt_pct), ("Avg", "avg_ns", fmt_ns), ("Med", "med_ns", fmt_ns),
                    ("Min", "min_ns", fmt_ns), ("Max", "max_ns", fmt_ns), ("StdDev", "std_ns", fmt_ns)]


EVIDENCE_LABELS = {"device_id": "GPU", "tid": "Thread", "pid": "Process", "start_ns": "Start", "dur_ns": "Duration",
                   "gap_ns": "Idle", "next_api": "Next API call", "next_op": "Next GPU op", "activity": "Thread was in",
                   "api_name": "API", "api_ns": "API call", "gpu_ns": "GPU time", "queue_ns": "Queued",
                   "copy_ns": "Copies", "compute_ns": "Compute", "overlap_ns": "Overlapped", "busy_ns": "Busy",
                   "idle_ns": "Idle", "busy_frac": "Busy", "latency_ns": "Latency", "index": "Iteration",
                   "total_ns": "Total", "count": "Count", "name": "Name", "kind": "Kind", "bytes": "Bytes",
                   "stream_id": "Stream", "rank": "Rank", "trace": "Trace", "iterations": "Iterations",
                   "period_p50_ns": "Period p50", "arrived_last": "Arrived last", "collectives": "Collectives",
                   "host_idle_activity": "Host was in"}


def evidence_label(key: str) -> str:
    """A column name a reader understands: ``wait_exposed_per_iter_ns`` -> ``Wait exposed / it``."""
    if key in EVIDENCE_LABELS:
        return EVIDENCE_LABELS[key]
    k = key.removesuffix("_ns").removesuffix("_frac")
    k = k.replace("_per_iter", " / it").replace("_", " ").strip()
    return (k[:1].upper() + k[1:]) or key


def evidence_value(key: str, v: Any, t0: int) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, (int, float)):
        if key.startswith("start") and key.endswith("_ns"):
            return "at " + fmt_ns(v - t0)
        if key.endswith("_ns"):
            return fmt_ns(v)
        if key.endswith("_frac") or key == "share":
            return fmt_pct(v)
        if key == "bytes":
            return fmt_bytes(v)
        return f"{v:,}" if isinstance(v, int) else f"{v:,.3g}"
    if isinstance(v, (list, tuple)):
        return f"{len(v)} item(s)"
    return str(v)


def _evidence(ev: tuple[Any, ...], t0: int = 0) -> Table | None:
    """A finding's evidence rows with readable headers and values (times from the capture start)."""
    if not ev:
        return None
    cols = [k for k in ev[0] if k != "breakdown" and not isinstance(ev[0].get(k), (list, dict))]
    rows, keys = [], []
    for e in ev[:10]:
        r = [evidence_value(c, e.get(c), t0) for c in cols]
        if e.get("breakdown"):
            r.append("; ".join(f"{b['source']}:{b['name']} {fmt_pct(b.get('share', 0))}" for b in e["breakdown"][:4]))
        rows.append(r)
        keys.append(r)
    labels = [evidence_label(c) for c in cols]
    if "breakdown" in ev[0]:
        labels.append("During the gap (share)")
    note = f"The first 10 of {len(ev)}." if len(ev) > 10 else ""
    return Table("", "", labels, rows, keys, note, spans=[evidence_span(e, t0) for e in ev[:10]])


def nice_ticks(hi: float, n: int = 4) -> list[float]:
    """About ``n`` round tick values from 0 to at least ``hi`` (1, 2, 2.5 or 5 times a power of ten)."""
    if not hi > 0:
        return [0.0, 1.0]
    raw = hi / n
    mag = 10 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [float(k * step) for k in range(int(np.ceil(hi / step - 1e-9)) + 1)]


def _fmt_s(ns: float) -> str:
    return fmt_ns(int(ns)) if ns else "0"


def line_plot(xs: np.ndarray, ys: np.ndarray, *, warm: np.ndarray | None = None, xlabel: str, ylabel: str,
              yfmt: Callable[[float], str], xfmt: Callable[[float], str], label: str, series: str,
              cls: str = "line", ymax: float | None = None, width: int = 600, height: int = 190) -> Plot | None:
    """A line plot with both axes ticked and labelled; warm-up points (``warm``) drawn as red dots
    and left out of the line, so a single warm-up iteration still shows."""
    if xs.size == 0:
        return None
    left, bottom, top, right = 80, 34, 8, 12
    warm = np.zeros(xs.size, dtype=bool) if warm is None else warm.astype(bool)
    steady_y = ys[~warm] if (~warm).any() else ys
    yt = nice_ticks(float(ymax if ymax is not None else steady_y.max()) or 1.0)
    ytop = yt[-1] or 1.0
    x0, x1 = float(xs.min()), float(xs.max())
    xspan = (x1 - x0) or 1.0
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / xspan * pw

    def py(y: float) -> float:
        return top + ph - min(max(y, 0.0), ytop) / ytop * ph  # off the scale: drawn at the top

    pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, w in zip(xs, ys, warm) if not w)
    dots = [("dot-warm", px(x), py(y), f"warm-up: {yfmt(y)}") for x, y, w in zip(xs, ys, warm) if w]
    if len(xs) <= 60:
        dots += [("dot", px(x), py(y), yfmt(y)) for x, y, w in zip(xs, ys, warm) if not w]
    xt = [x0 + v for v in nice_ticks(xspan, 5) if v <= xspan * (1 + 1e-9)] if x1 > x0 else [x0]
    plot_series = [(cls, series, pts)]
    if warm.any():
        off = int((ys[warm] > ytop).sum())
        plot_series.append(("dot-warm", "warm-up (excluded)" + (f"; {off} off the scale, drawn at the top" if off else ""),
                            ""))
    return Plot(width, height, left, bottom, plot_series, dots, [(px(x), xfmt(x)) for x in xt],
                [(py(y), yfmt(y)) for y in yt], xlabel, ylabel, label)


def _iteration_plot(a: Any) -> Plot | None:
    it = a.iterations.table
    if not len(it):
        return None
    # the period (time since the previous completion on the thread), or the service time for a
    # sequence's first iteration (no previous completion)
    y = np.where(it["period_ns"].to_numpy() >= 0, it["period_ns"].to_numpy(), it["service_ns"].to_numpy())
    return line_plot(it["index"].to_numpy(float), y.astype(float), warm=it["warmup"].to_numpy(dtype=bool),
                     xlabel=f"iteration ('{a.iterations.range_name}')", ylabel="time per iteration",
                     yfmt=_fmt_s, xfmt=lambda v: f"{v:,.0f}", series="period (time between completions)",
                     label="time per iteration, by iteration")


def _util_plot(a: Any) -> Plot | None:
    u = a.utilization
    if not len(u):
        return None
    u0 = u.groupby("bin_start_ns", sort=True)["busy_frac"].max()
    t = u0.index.to_numpy(float) - a.capture.start_ns
    return line_plot(t, u0.to_numpy(float) * 100, xlabel="time since capture start", ylabel="GPU busy",
                     yfmt=lambda v: f"{v:.0f}%", xfmt=_fmt_s, series="busy (the busiest GPU, per bin)",
                     label="GPU utilization over the capture", cls="line util", ymax=100.0, height=160)


def build(a: Any, *, show_env: bool = False, generated_by: str = "nsysan", timeline: Any = None) -> Report:
    """The report's view model: every section computed and formatted (strings from the trace raw).
    ``timeline``: its lanes begun early (``timeline.start(a)``), or None to build them here."""
    m = a.trace.meta
    used = {int(d) for d in a.ops["device_id"].unique().tolist()} if len(a.ops) else set()
    gpus = _gpus_text(a.trace, used)
    top_fixes, savings_total, subtitle = _first_screen(a, gpus)
    tables = [*_summary_tables(a), *_iteration_tables(a), *resources_tables(a)]
    rv = _ranks_view(a)
    if rv:  # the ranks panel shows this table (with its bars and lanes): not twice
        tables = [tb for tb in tables if tb.id != "ranks"]
    # a section with no rows is left out (no TensorRT, no communication, one rank...); the iterations'
    # stays: its note says why none was found and how to choose one
    tables = [tb for tb in tables if tb.rows or (tb.alt is not None and tb.alt.rows) or tb.id == "iterations"]
    rules_log = [(r["rule"], f"not checked ({r['reason']})" if r["status"] == "not_checked" else r["status"])
                 for r in a.rule_log]
    capture = [(k, v) for k, v in m.capture] if show_env else []
    findings = [FindingView(f.rule, f.severity.name.lower(), f.title, f.message, f.suggestion, fmt_ns(f.impact_ns),
                            _evidence(f.evidence, a.capture.start_ns)) for f in a.findings]
    rep = Report(title=f"nsysan: {Path(m.path).name}", generated_by=generated_by, headline=_headline(a),
                 info=_info(a, gpus), findings=findings, tables=tables, kernel_bars=_kernel_bars(a),
                 breakdown=breakdown_rows(a), capture_time=capture_rows(a.phases),
                 iteration_plot=_iteration_plot(a), util_plot=_util_plot(a),
                 overlap_bars=_overlap_bars(a),
                 timeline=build_timeline(a, timeline), rules_log=rules_log,
                 warnings=[w for w in m.warnings if not _SHORTENED.match(w)],
                 late_warnings=[w for w in m.warnings if _SHORTENED.match(w)], capture=capture,
                 ranks_view=rv, top_fixes=top_fixes, savings_total=savings_total, subtitle=subtitle,
                 samples_view=samples_view(a), gpu_metrics=metrics_view.view(a))
    _one_list_of_what_it_lacks(rep)
    rep.steady_label = a.steady.label
    rep.not_shown = _not_shown(a, rep)
    if any("Who kept the GPU waiting" in p for p, _ in rep.not_shown):
        rep.samples_view = {}
    return rep


def _headline(a: Any) -> list[tuple[str, str]]:
    """The first screen's numbers: iteration time, throughput, latency, GPU busy, overlap, savings."""
    st = a.iterations.stats
    busy = a.busy_steady
    ov = a.overlap.loc[a.overlap["direction"] == "all"] if len(a.overlap) else a.overlap
    has_it = bool(st.count)
    judged = "steady" if a.steady.kind == "steady" else a.steady.label  # the window the numbers are of
    period = st.headline == "period"
    latency = fmt_ns(st.latency_p50_ns) if has_it else "-"
    if has_it and st.latency_includes_queueing:
        latency += f" (queued: CPU {st.queue_depth_p50 or 0:g} ahead)"
    return [
        ("Iteration time p50" + (" (period)" if period else " (latency)"), fmt_ns(st.p50_ns) if has_it else "-"),
        ("Throughput", f"{st.throughput_per_s or 0:.1f} it/s" if has_it else "-"),
        ("Latency p50", latency),
        *(((f"GPU {int(r['device_id'])} busy ({judged})" if len(busy) > 1 else f"GPU busy ({judged})",
            fmt_pct(float(r["busy_frac"]))) for _, r in busy.iterrows()) if len(busy) else
          [("GPU busy", "not recorded" if not len(a.ops) else "-")]),
        ("Copy/compute overlap", fmt_pct(float(ov["overlap_frac_of_copy"].iloc[0]))
         if len(ov) and float(ov["copy_ns"].iloc[0]) > 0 else "-"),
        *_slow_headline(a),
        ("Est. savings (all findings)", (fmt_ns(sum(f.impact_ns for f in a.findings))
                                         + (f" ({fmt_pct(sum(f.impact_ns for f in a.findings) / a.steady.dur_ns)})"
                                            if a.steady.dur_ns else "")) if a.findings else "-"),
    ]


def _slow_headline(a: Any) -> list[tuple[str, str]]:
    """The slow iterations' cost beside the typical period, when they matter (``slow_iterations.headline``)."""
    got = slow_headline(a.slow_iterations, a.findings)
    if got is None:
        return []
    n, cost, share = got
    return [(f"{n} slow iteration{'s' if n != 1 else ''}", f"{fmt_ns(cost)} ({fmt_pct(share)})")]


def _gpus_text(t: Any, used: set[int] | None = None) -> str:
    """The GPUs of the trace, or only those the program ran work on (``used``: device ids with GPU
    activity) and how many more the machine had, idle."""
    g = t.gpus
    if used and len(g) and "device_id" in g:
        on = g[g["device_id"].astype("int64").isin(sorted(used))]
        if 0 < len(on) < len(g):
            idle = len(g) - len(on)
            return _gpus_text_of(on) + f" (used; {idle} more GPU{'s' if idle > 1 else ''} idle)"
    return _gpus_text_of(g)


def _gpus_text_of(g: pd.DataFrame) -> str:
    return ", ".join(f"{r['name']} ({int(r['sm_count']) if pd.notna(r['sm_count']) else '?'} SMs)"
                     for _, r in g.iterrows()) or "none recorded"


def _info(a: Any, gpus: str) -> list[tuple[str, str]]:
    """The trace's facts: export, nsys, GPUs, capture, the region analysed and why, the program."""
    m = a.trace.meta
    st = a.iterations.stats
    info = [("Trace", Path(m.path).name), ("nsys", m.nsys_version or "unknown"), ("GPUs", gpus),
            ("Capture", fmt_ns(m.duration_ns)),
            ("Region analysed", f"{a.steady.label}: {fmt_ns(a.steady.dur_ns)}"
             + (f" ({st.count or 0} '{a.iterations.range_name}' iterations, {a.iterations.warmup} warm-up excluded)"
                if a.iterations.range_name else "")),
            ("Iteration range", a.iterations.why or "-"),
            ]
    if a.program is not None:  # what the advice is worded for, and why
        info.extend(program_records(a.program))
    if not len(a.ops):
        info.append(("GPU activity", ("not recorded in this trace: record it with nsys profile -t cuda "
                                     "(WSL2 captures have none)")))
    if a.graph_trace != "none":
        info.append(("CUDA Graphs", "traced as whole graph launches (--cuda-graph-trace=graph)" if a.graph_trace == "graph"
                     else "traced per node (--cuda-graph-trace=node)"))
    for r in a.iterations.timed_regions:
        info.append((str(r["name"]), f"{fmt_ns(r['cpu_ns'])} CPU, {fmt_ns(r['with_gpu_ns'])} with GPU work"))
    return info


def _kernel_bars(a: Any) -> list[Bar]:
    kdf = a.steady_summaries.get("kernels", a.kernels)
    kmax = (float(kdf["total_ns"].max()) if len(kdf) else 0.0) or 1.0  # all-zero durations happen
    return [Bar(str(r["name"]), f"{fmt_ns(r['total_ns'])} ({fmt_pct(r['share'])})", float(r["total_ns"]) / kmax)
            for _, r in kdf.head(15).iterrows()]


def _first_screen(a: Any, gpus: str) -> tuple[list[tuple[int, str, str, str, str, str, str]], str, str]:
    """The top fixes, the savings of all of them, and the subtitle (GPUs, nsys, iterations, window)."""
    m = a.trace.meta
    st = a.iterations.stats
    has_it = bool(st.count)
    wdur = a.steady.dur_ns
    top_fixes = [(i, f.severity.name.lower(), f.title, f.rule,
                  fmt_ns(f.impact_ns) if f.impact_ns > 0 else "no estimate",
                  fmt_pct(f.impact_ns / wdur) if f.impact_ns > 0 and wdur else "", f"finding-{i}")
                 for i, f in enumerate(a.findings, 1)]
    total_saving = sum(f.impact_ns for f in a.findings)
    savings_total = (f"{fmt_ns(total_saving)} in all ({fmt_pct(total_saving / wdur)} of the {a.steady.label}; "
                     "no time counted twice)") if total_saving and wdur else ""
    it_txt = (f"'{a.iterations.range_name}' x{st.count or 0}, one every {fmt_ns(st.p50_ns)}"
              if has_it else "no iteration range")
    subtitle = " · ".join(x for x in [gpus if len(a.trace.gpus) else "", f"nsys {m.nsys_version or '?'}", it_txt,
                                      f"judged on the {a.steady.label}: {fmt_ns(a.steady.dur_ns)}"] if x)
    return top_fixes, savings_total, subtitle


def _overlap_bars(a: Any) -> list[Bar]:
    """Per device and copy direction with copy time: the share of it that ran under compute (the bar),
    of how much. None when no copy ran (a chart of 0% of 0 ns says nothing)."""
    ovb = []
    for _, r in a.overlap.iterrows():
        if not float(r["copy_ns"]) > 0:
            continue
        frac = float(r["overlap_frac_of_copy"])
        ovb.append(Bar(f"GPU {r['device_id']} {r['direction']}", f"{fmt_pct(frac)} of {fmt_ns(r['copy_ns'])}", frac))
    return ovb


# what each input of the samples panel tells, in the one list of what the trace lacks
_SAMPLES_FOR = {"CPU samples": "which functions the launching thread ran while the GPU waited",
                "Python samples": "which Python functions the launching thread ran while the GPU waited",
                "CUDA backtraces": "where in the program each CUDA call was made",
                "Python backtraces": "which Python line made each CUDA call",
                "GPU metrics": "how hard the GPU works inside its busy time (SMs, tensor cores, DRAM, PCIe)"}


def _one_list_of_what_it_lacks(rep: Report) -> None:
    """The inputs the samples panel lacks join the table of what the trace lacks (one list, each input
    once with its flag); the panel then names them and links there."""
    missing = (rep.samples_view or {}).get("missing") or []
    if not missing:
        return
    at = next((i for i, t in enumerate(rep.tables) if t.id == "inputs_missing"), None)
    rows = [dict(zip(("input", "flag", "for"), r)) for r in (rep.tables[at].rows if at is not None else [])]
    have = {r["flag"] for r in rows}
    rows += [{"input": m["label"], "flag": m["flag"], "for": _SAMPLES_FOR.get(m["label"], "")}
             for m in missing if m["flag"] not in have]
    t = table("inputs_missing", "What this trace lacks, and the flag that adds it", pd.DataFrame(rows), [
        ("Input", "input", None), ("nsys profile flag", "flag", None), ("What it would tell", "for", None)],
        note="Recorded data some analyses need; nsysan profile --diagnose records them.")
    if at is None:
        rep.tables.append(t)
    else:
        rep.tables[at] = t


def _not_shown(a: Any, rep: Report) -> list[tuple[str, str]]:
    """The plots and panels with nothing to show, each with why (said once, in the plots section)."""
    out = []
    kdf = a.steady_summaries.get("kernels", a.kernels)
    no_gpu = not len(a.ops)
    gpu_why = "GPU activity was not recorded" if no_gpu else ""
    if not rep.kernel_bars:
        out.append(("GPU time by kernel", gpu_why or ("no kernels in the " + a.steady.label if not len(kdf) else
                                                      "every kernel took 0 ns")))
    if rep.iteration_plot is None:
        out.append(("Time per iteration", "no iteration range (see Iterations)"))
    if rep.util_plot is None:
        out.append(("GPU utilization", gpu_why or "no GPU activity"))
    if not rep.overlap_bars:
        out.append(("Copy/compute overlap", gpu_why or "no memory copies in the " + a.steady.label))
    sv = rep.samples_view
    if sv is not None and not sv.get("groups") and not sv.get("sites"):
        out.append(("Who kept the GPU waiting", "no CPU or Python samples and no backtraces in this trace"
                    + ("; What this trace lacks says how to record them" if sv.get("missing") else "")))
    by_why: dict[str, list[str]] = {}  # one reason said once, for every panel it empties
    for panel, why in out:
        by_why.setdefault(why, []).append(panel)
    return [(", ".join(panels[:-1]) + " and " + panels[-1] if len(panels) > 1 else panels[0], why)
            for why, panels in by_why.items()]


def _steady_first(a: Any, tid: str, title: str, steady_df: Any, capture_df: pd.DataFrame,
                  cols: list[tuple[str, str, Any]], note: str = "") -> Table:
    """The steady-state table, with the whole capture's one click away (or only the capture's
    when the steady window is the capture)."""
    if steady_df is None or a.steady.kind == "capture":
        return table(tid, title, capture_df, cols, note)
    t = table(tid, title, steady_df, cols, note)
    t.alt = table(tid + "-capture", title, capture_df, cols, note)
    t.alt_label = f"{a.steady.label} ({fmt_ns(a.steady.dur_ns)})|whole capture ({fmt_ns(a.capture.dur_ns)}, with warm-up)"
    return t


def _summary_tables(a: Any) -> list[Table]:
    """Kernels, CUDA API, OS runtime, copies, memsets, NVTX ranges, launches and idle gaps."""
    ss = a.steady_summaries
    g = a.gaps
    gap_cols = [("Device", "device_id", None), ("Start", "start_ns", lambda v: fmt_ns(v - a.capture.start_ns)),
                ("Gap", "gap_ns", fmt_ns), ("Cause", "cause", None), ("Submitting thread was in", "activity", None),
                ("Next API", "api_name", None), ("Next op", "next_op", lambda v: str(v)[:120])]
    gaps_steady = None
    if len(g):  # a window owns the gaps that start in it, as it owns ops and calls
        gaps_steady = _largest_in_window(g, "gap_ns", a.steady.start_ns, a.steady.end_ns)
    return [
        _steady_first(a, "kernels", "Kernels", ss.get("kernels"), a.kernels, _stat_cols([("Name", "name", None)])),
        _steady_first(a, "api", "CUDA API", ss.get("cuda_api"), a.cuda_api, _stat_cols([("Name", "name", None)])),
        table("osrt", "OS runtime calls", a.osrt, _stat_cols([("Function", "name", None)]),
              note="libc calls traced by nsys -t osrt (only calls longer than its --osrt-threshold)."),
        _steady_first(a, "memcpy", "Memory copies", ss.get("memcpy"), a.memcpy, _stat_cols([("Kind", "kind", None)]) + [
            ("Bytes", "total_bytes", fmt_bytes), ("Throughput", "throughput_bytes_per_s", fmt_rate),
            ("Pageable", "pageable_count", lambda v: f"{int(v):,}"), ("Pinned", "pinned_count", lambda v: f"{int(v):,}")]),
        table("memset", "Memsets", a.memset, _stat_cols([("Kind", "kind", None)]) + [("Bytes", "total_bytes", fmt_bytes)]),
        table("nvtx", "NVTX ranges", a.nvtx, [c for c in _stat_cols([("Range", "name", None), ("Style", "style", None)])
                                              if c[1] != "share"] + [
            ("Self total", "self_total_ns", fmt_ns), ("GPU proj. total", "proj_total_ns", fmt_ns),
            ("GPU ops", "gpu_ops", lambda v: f"{int(v):,}"), ("Max GPU after end", "max_gpu_after_end_ns", fmt_ns)],
            note="A GPU op belongs to a range when its launching API call started on the range's thread inside it. "
                 "No share column: ranges nest, so their times overlap and would add up past 100%."),
        table("launches", "Launches (API call vs kernel)", a.launch_per_kernel, [
            ("API", "api_name", None), ("Kernel", "name", None), ("Count", "count", lambda v: f"{int(v):,}"),
            ("API med", "api_med_ns", fmt_ns), ("Queue med", "queue_med_ns", fmt_ns), ("GPU med", "gpu_med_ns", fmt_ns),
            ("Launch > run", "launch_dominated_frac", fmt_pct)]),
        _steady_first(a, "gaps", "Largest GPU idle gaps", gaps_steady,
                      g.nlargest(MAX_TABLE_ROWS, "gap_ns") if len(g) else g, gap_cols,
                      note="Every idle gap longer than --min-gap-us, longest first, with its cause."),
    ]


def _iteration_tables(a: Any) -> list[Table]:
    """The iterations and their levels, TensorRT, communication, ranks, the iteration's candidates, nsys."""
    it = a.iterations.table
    return [
        table("iterations", f"Iterations ({a.iterations.range_name or 'none found'})", it, [
            ("#", "index", None), ("Period", "period_ns", lambda v: fmt_ns(v) if v >= 0 else "-"),
            ("Latency", "latency_ns", fmt_ns), ("Queued ahead", "queue_depth", lambda v: f"{int(v)}"),
            ("CPU", "cpu_ns", fmt_ns),
            ("GPU projection", "gpu_proj_ns", fmt_ns), ("GPU after range end", "gpu_after_end_ns", fmt_ns),
            ("Warm-up", "warmup", lambda v: "yes" if v else "")],
            note="Period: time since the previous iteration of the same thread completed (what gets faster when "
                 "the program does). Latency: range start to the end of its GPU work; when the CPU queues "
                 "iterations ahead of the GPU it includes the wait in the queue.") if len(it) else
        Table("iterations", "Iterations", [], [], [],
              (a.iterations.why or "No repeated NVTX range found.") + " (choose one with --iteration-range NAME)"),
        *_levels_tables(a),
        _tensorrt_table(a),
        table("collectives", "Communication (steady state)", a.collectives, [
            ("Device", "device_id", None), ("Collective", "collective", None),
            ("Count", "count", lambda v: f"{int(v):,}"), ("Total", "total_ns", fmt_ns),
            ("Exposed (no compute)", "exposed_ns", fmt_ns), ("Hidden under compute", "hidden_ns", fmt_ns),
            ("Mean", "mean_ns", fmt_ns), ("Max", "max_ns", fmt_ns)],
            note="Communication kernels (NCCL and the like) per device. Exposed time ran while no compute kernel "
                 "ran on the device: overlapping it with compute (DDP buckets, FSDP prefetch) would save it.")
        if len(a.collectives) else
        Table("collectives", "Communication", [], [], [], "No communication kernels (NCCL ...) in the steady state."),
        table("ranks", "Ranks (processes with communication), aligned on their collectives",
              a.ranks.ranks if a.ranks is not None else pd.DataFrame(), [
            ("Rank", "rank", None), ("pid", "pid", None), ("GPU", "device_id", None),
            ("Iterations", "iterations", None), ("Period p50", "period_p50_ns", fmt_ns),
            ("Compute / it", "compute_per_iter_ns", fmt_ns), ("Comm / it", "comm_per_iter_ns", fmt_ns),
            ("Comm exposed / it", "comm_exposed_per_iter_ns", fmt_ns), ("Waiting / it", "wait_per_iter_ns", fmt_ns),
            ("Transfer / it", "transfer_per_iter_ns", fmt_ns), ("Host late / it", "host_idle_per_iter_ns", fmt_ns),
            ("Arrived last", "arrived_last", None)],
            note=(a.ranks.verdict if a.ranks is not None else "") + ". Waiting: time in a collective before the last "
                 "rank arrived; transfer: after it.")
        if a.ranks is not None and len(a.ranks.ranks) > 1 else
        Table("ranks", "Ranks", [], [], [], "One process with communication, or none: no ranks to align."),
        table("iteration_candidates", "Which range is the iteration", pd.DataFrame([c.to_json() for c in sorted(
            a.iterations.candidates, key=lambda c: (c.chosen is None, -c.gpu_coverage, -c.count,
                                                    c.name))[:MAX_TABLE_ROWS]]), [
            ("Range", "name", lambda v: str(v)[:140]), ("Instances", "count", lambda v: f"{int(v):,}"),
            ("Most on one thread", "per_thread_max", lambda v: f"{int(v):,}"),
            ("Median", "median_ns", fmt_ns), ("GPU time launched", "gpu_coverage", fmt_pct),
            ("Library", "library", lambda v: v or ""), ("Verdict", "verdict", None)],
            note="Repeated NVTX ranges considered as the iteration, and why each was or was not chosen.")
        if a.iterations.candidates else
        Table("iteration_candidates", "Which range is the iteration", [], [], [], "No repeated NVTX range."),
        table("nsys", "nsys analyze, cross-checked", a.nsys_rules, [
            ("nsys rule", "nsys_rule", None), ("What", "what", None), ("Count", "count", lambda v: f"{int(v):,}"),
            ("Total", "total_ns", fmt_ns), ("In steady state", "steady_count", lambda v: f"{int(v):,}"),
            ("Outside (one-time)", "outside_count", lambda v: f"{int(v):,}"), ("nsysan", "verdict", None)],
            note="What nsys analyze would list on this trace (its own definitions), where it falls, and which "
                 "nsysan rule judges it. Setup, warm-up and teardown are reported apart, not ranked."),
    ]


def _ranks_view(a: Any) -> dict[str, Any]:
    if a.ranks is None or len(a.ranks.ranks) < 2:
        return {}
    return ranks_view(ranks_to_dict(a.ranks))
