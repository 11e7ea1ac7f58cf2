"""The report's first screen and the trace's facts: the headline numbers (iteration time, throughput,
latency, GPU busy, overlap, slow iterations, savings), the top fixes with their savings, the
subtitle, and the facts of the trace (export, nsys, GPUs, capture, the region analysed and why,
the program)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from nsysan.analyses.program import program_records
from nsysan.analyses.slow_iterations import headline_of as slow_headline
from nsysan.units import fmt_ns, fmt_pct


def headline(a: Any) -> list[tuple[str, str]]:
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


def gpus_text(t: Any, used: set[int] | None = None) -> str:
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


def trace_info(a: Any, gpus: str) -> list[tuple[str, str]]:
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
        info.append(("CUDA Graphs", "traced as whole graph launches (--cuda-graph-trace=graph)"
                     if a.graph_trace == "graph" else "traced per node (--cuda-graph-trace=node)"))
    for r in a.iterations.timed_regions:
        info.append((str(r["name"]), f"{fmt_ns(r['cpu_ns'])} CPU, {fmt_ns(r['with_gpu_ns'])} with GPU work"))
    return info


def first_screen(a: Any, gpus: str) -> tuple[list[tuple[int, str, str, str, str, str, str]], str, str]:
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
