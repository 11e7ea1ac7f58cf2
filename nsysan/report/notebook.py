"""Short summaries of an ``Analysis`` for the Python API: ``repr()`` (a few lines of plain text) and
``_repr_html_`` (a compact HTML fragment for Jupyter and other notebooks: headline numbers, where one
iteration's time goes, the top findings with their savings). No scripts; every string from the trace
is escaped (Jinja2 autoescaping) in HTML and stripped of control characters in text."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsysan.report.html import environment
from nsysan.report.tables import breakdown_rows
from nsysan.units import clean_text, fmt_ns, fmt_pct

MAX_NAME = 80  # characters of a trace-provided name in the text summary
TOP_FINDINGS = 5

BREAKDOWN_COLORS = {"bd-compute": "#2f6fdb", "bd-comm": "#d97706", "bd-copy": "#0f9d58", "bd-idle": "#d33"}


def _short(text: object, n: int = MAX_NAME) -> str:
    s = clean_text(text)
    return s if len(s) <= n else s[: n - 3] + "..."


def _iterations_line(a: Any) -> str:
    it = a.iterations
    st = it.stats
    if not st.count:
        return f"iterations: none ({_short(it.why or 'no repeated NVTX range', 120)})"
    if st.headline == "period":
        head = (f"period p50 {fmt_ns(st.p50_ns)} ({st.throughput_per_s or 0:,.1f}/s), "
                f"latency p50 {fmt_ns(st.latency_p50_ns)}")
    else:
        head = f"latency p50 {fmt_ns(st.p50_ns)}"
    return f"iterations: {_short(it.range_name)!r} x{st.count} steady, {head}"


def _busy(a: Any) -> list[tuple[str, str]]:
    b = a.busy_steady
    if not len(a.ops):
        return [("GPU", "activity not recorded")]
    return [(f"GPU {int(r.device_id)} busy", fmt_pct(float(r.busy_frac))) for r in b.itertuples()][:8]


def text_summary(a: Any) -> str:
    """``repr(analysis)``: at most a handful of lines, whatever the trace holds."""
    m = a.trace.meta
    name = _short(Path(m.path).name if m.path else "trace")
    busy = ", ".join(f"{k} {v}" for k, v in _busy(a))
    lines = [f"<nsysan.Analysis of {name!r} (nsys {_short(m.nsys_version or 'unknown', 30)})",
             "  " + _iterations_line(a),
             f"  window: {_short(a.steady.label, 40)} {fmt_ns(a.steady.dur_ns)}; {busy}"]
    if a.findings:
        f = a.findings[0]
        lines.append(f"  findings: {len(a.findings)}; top: {f.rule} saves {fmt_ns(f.impact_ns)} "
                     f"({_short(f.title, 100)})>")
    else:
        lines.append("  findings: none>")
    return "\n".join(lines)


@dataclass
class NotebookView:
    title: str
    nsys: str
    headline: list[tuple[str, str]]
    breakdown: list[tuple[str, list[tuple[str, float, str, str]]]]
    findings: list[dict[str, str]]
    more_findings: int
    colors: dict[str, str] = field(default_factory=lambda: dict(BREAKDOWN_COLORS))


def notebook_view(a: Any) -> NotebookView:
    """The fragment's content, computed (strings raw: the template escapes them)."""
    m = a.trace.meta
    st = a.iterations.stats
    head: list[tuple[str, str]] = []
    if st.count:
        period = st.headline == "period"
        head += [("Iteration range", f"{a.iterations.range_name} (x{st.count} steady, "
                                     f"{a.iterations.warmup} warm-up)"),
                 ("Iteration p50" + (" (period)" if period else " (latency)"), fmt_ns(st.p50_ns))]
        if period:
            head += [("Throughput", f"{st.throughput_per_s or 0:,.1f} it/s"),
                     ("Latency p50", fmt_ns(st.latency_p50_ns))]
    else:
        head.append(("Iterations", f"none ({a.iterations.why or 'no repeated NVTX range'})"))
    head.append(("Window", f"{a.steady.label}: {fmt_ns(a.steady.dur_ns)}"))
    head += _busy(a)
    findings = [{"rule": f.rule, "severity": f.severity.name.lower(), "saves": fmt_ns(f.impact_ns),
                 "title": f.title, "message": f.message, "fix": f.suggestion} for f in a.findings[:TOP_FINDINGS]]
    return NotebookView(title=Path(m.path).name if m.path else "trace", nsys=m.nsys_version or "unknown",
                        headline=head, breakdown=breakdown_rows(a), findings=findings,
                        more_findings=max(0, len(a.findings) - TOP_FINDINGS))


def html_summary(a: Any) -> str:
    """``analysis._repr_html_()``: a self-contained fragment (inline styles, no scripts)."""
    return environment().get_template("notebook.html.j2").render(v=notebook_view(a))
