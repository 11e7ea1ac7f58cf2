"""The HTML view model: everything the template shows, already computed and formatted.

No pandas past this point. Strings from the trace stay raw here; Jinja2 autoescaping escapes them
in HTML, and ``tojson`` escapes ``<``, ``>`` and ``&`` in embedded JSON.

``build`` assembles the ``Report`` from its parts: the first screen and the trace's facts
(``first_screen.py``), the table sections (``section_tables.py``), the line plots (``plots.py``), a
finding's evidence (``evidence.py``), the timeline (``timeline.py``) and the panels (``ranks_view``,
``samples_view``, ``metrics_view``, ``resources_view``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nsysan.report import metrics_view
from nsysan.report.evidence import finding_evidence
from nsysan.report.first_screen import first_screen, gpus_text, headline, trace_info
from nsysan.report.jsonout import ranks_to_dict
from nsysan.report.plots import Plot, iteration_plot, util_plot
from nsysan.report.ranks_view import ranks_view
from nsysan.report.resources_view import resources_tables
from nsysan.report.samples_view import samples_view
from nsysan.report.section_tables import iteration_tables, summary_tables
from nsysan.report.tables import Table, breakdown_rows, capture_rows, table
from nsysan.report.timeline import build_timeline
from nsysan.units import fmt_ns, fmt_pct


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


def build(a: Any, *, show_env: bool = False, generated_by: str = "nsysan", timeline: Any = None) -> Report:
    """The report's view model: every section computed and formatted (strings from the trace raw).
    ``timeline``: its lanes begun early (``timeline.start(a)``), or None to build them here."""
    m = a.trace.meta
    used = {int(d) for d in a.ops["device_id"].unique().tolist()} if len(a.ops) else set()
    gpus = gpus_text(a.trace, used)
    top_fixes, savings_total, subtitle = first_screen(a, gpus)
    tables = [*summary_tables(a), *iteration_tables(a), *resources_tables(a)]
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
                            finding_evidence(f.evidence, a.capture.start_ns)) for f in a.findings]
    rep = Report(title=f"nsysan: {Path(m.path).name}", generated_by=generated_by, headline=headline(a),
                 info=trace_info(a, gpus), findings=findings, tables=tables, kernel_bars=_kernel_bars(a),
                 breakdown=breakdown_rows(a), capture_time=capture_rows(a.phases),
                 iteration_plot=iteration_plot(a), util_plot=util_plot(a),
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


def _kernel_bars(a: Any) -> list[Bar]:
    kdf = a.steady_summaries.get("kernels", a.kernels)
    kmax = (float(kdf["total_ns"].max()) if len(kdf) else 0.0) or 1.0  # all-zero durations happen
    return [Bar(str(r["name"]), f"{fmt_ns(r['total_ns'])} ({fmt_pct(r['share'])})", float(r["total_ns"]) / kmax)
            for _, r in kdf.head(15).iterrows()]


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


def _ranks_view(a: Any) -> dict[str, Any]:
    if a.ranks is None or len(a.ranks.ranks) < 2:
        return {}
    return ranks_view(ranks_to_dict(a.ranks))
