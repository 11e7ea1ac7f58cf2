"""``nsysan diff``'s and ``nsysan compare``'s tables: on the terminal (rich), as Markdown, and their
HTML page; a metric's value with its unit."""

from __future__ import annotations

from typing import Any

from nsysan._version import __version__
from nsysan.report.terminal.text import table_console
from nsysan.units import clean_text


def fmt_metric(metric: str, v: float | None, signed: bool = False) -> str:
    """A metric's value with its unit (``metric`` is its id: the suffix says the unit)."""
    from nsysan.units import fmt_bytes, fmt_ns, fmt_pct

    if v is None:
        return "-"
    sign = "+" if signed and v > 0 else ""
    if metric.endswith("_ns"):
        return sign + fmt_ns(v)
    if "frac" in metric:
        return (f"{v * 100:+.1f} pt" if signed else fmt_pct(v))
    if metric.endswith("bytes_per_s"):
        return sign + fmt_bytes(v) + "/s"
    if metric.endswith("_per_s"):
        return f"{sign}{v:,.2f}/s"
    return f"{sign}{v:,.2f}"


def compare_html(**ctx: Any) -> str:
    from nsysan.report.html import environment

    return environment().get_template("compare.html.j2").render(
        fmt=fmt_metric, generated_by=f"nsysan {__version__}", **ctx)


def print_diff(d: Any) -> None:
    from rich.table import Table
    from rich.text import Text as _Text

    from nsysan.report.names import short_names
    from nsysan.units import fmt_ns

    def Text(text: object, **kw: Any) -> _Text:  # labels and names come from files
        return _Text(clean_text(text), **kw)

    c = table_console()
    for w in d.warnings:
        c.print(Text(f"{w['level']}: {w['message']}", style="yellow" if w["level"] == "warning" else None))
    if d.gate:
        c.print(Text(f"gate: {d.gate['rule']}"))
        if d.gate.get("note"):
            c.print(Text(f"note: {d.gate['note']}", style="yellow"))
    t = Table(title=Text(f"{d.base} -> {d.new}"))
    t.add_column("metric", overflow="fold", ratio=3)
    for col in (d.base, d.new):
        t.add_column(Text(col), overflow="fold", justify="right", ratio=2)
    t.add_column("change", overflow="fold", justify="right", ratio=2)
    t.add_column("ratio", justify="right", ratio=1)
    t.add_column("verdict", overflow="fold", ratio=4)
    styles = {"better": "green", "worse": "red"}
    for m in d.metrics:
        if m["base"] is None and m["new"] is None:
            continue
        t.add_row(*(Text(x) for x in (m["label"], fmt_metric(m["metric"], m["base"]),
                                      fmt_metric(m["metric"], m["new"]),
                                      fmt_metric(m["metric"], m["delta"], signed=True),
                                      f"{m['ratio']:.3f}" if m["ratio"] is not None else "-")),
                  Text(m["verdict_text"], style=styles.get(m["verdict"] or "")))
    c.print(t)
    c.print(Text(f"noise: {d.noise['note']} ({d.noise['base_samples']} vs {d.noise['new_samples']} iterations); "
                 f"{d.noise['spread_note']}"))
    for k in ("resolved", "remaining", "new"):
        names = ", ".join(f["rule"] for f in d.findings[k]) or "none"
        c.print(Text(f"findings {k}: {names}"))
    for label, rows in (("Kernels", d.kernels), ("NVTX ranges", d.nvtx)):
        top = [r for r in rows if r["delta_total_ns"] != 0][:5]
        if not top:
            continue
        short = short_names([r["name"] for r in rows], width=max(40, c.width - 40))
        kt = Table(title=Text(f"{label}: largest changes in total time"), title_justify="left")
        kt.add_column("name", overflow="fold", ratio=6)
        kt.add_column("status")
        kt.add_column("count", justify="right")
        kt.add_column("change", justify="right")
        for r in top:
            kt.add_row(Text(short[r["name"]]), Text(r["status"]), Text(f"{r['base_count']} -> {r['new_count']}"),
                       Text(("+" if r["delta_total_ns"] > 0 else "") + fmt_ns(r["delta_total_ns"])))
        c.print(kt)
    _gpu_metric_deltas(c, d, Text)
    for n in d.other_notes:
        c.print(Text(f"note: {n}", style="yellow"))
    if d.gate:
        c.print(Text(("REGRESSION: " if d.gate["failed"] else "gate passed: ") + d.gate["message"],
                     style="bold red" if d.gate["failed"] else "green"))


def _gpu_metric_deltas(c: Any, d: Any, Text: Any) -> None:
    """GPU metric means per device and range on both sides (``compare.gpu_metric_deltas``)."""
    from rich.table import Table

    if not d.gpu_metrics:
        return
    t = Table(title=Text("GPU metrics (mean % of peak): base -> new"), title_justify="left")
    t.add_column("device / range", overflow="fold", ratio=3)
    for k in ("SMs active", "tensor", "DRAM rd+wr", "PCIe rx/tx"):
        t.add_column(k, justify="right", ratio=2)
    t.add_column("verdict", overflow="fold", ratio=3)

    def pair(r: dict[str, Any], *keys: str) -> str:
        got = [r.get(k) for k in keys]
        if any(g is None for g in got):
            return "-"
        b = sum(g["base"] or 0 for g in got)
        n = sum(g["new"] or 0 for g in got)
        return f"{b:.1f} -> {n:.1f}"

    for r in d.gpu_metrics:
        v = (r["base_verdict"] if r["base_verdict"] == r["new_verdict"]
             else f"{r['base_verdict'] or '-'} -> {r['new_verdict'] or '-'}")
        t.add_row(Text(f"{r['device']} {r['range']}"), Text(pair(r, "sm_active")), Text(pair(r, "tensor_active")),
                  Text(pair(r, "dram_read", "dram_write")),
                  Text(f"{pair(r, 'pcie_rx')} / {pair(r, 'pcie_tx')}"), Text(v))
    c.print(t)


def print_ladder(lad: dict[str, Any]) -> None:
    """``nsysan compare``'s table (``compare.ladder``) on the terminal."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(clean_text(lad["label"])))
    gm = any(r.get("gpu_metrics") for r in lad["rows"])  # steady GPU metric means (compare.steady_gpu_metrics)
    for col in ("trace", "value", "step", "total", "iteration p50", "GPU busy", "top finding",
                *(("SMs / tensor / DRAM (steady, % of peak)",) if gm else ())):
        t.add_column(col)
    for r in lad["rows"]:
        t.add_row(*(Text(clean_text(x)) for x in (
            r["label"], fmt_metric(lad["metric"], r["value"]),
            f"{r['step_speedup']:.2f}x" if r["step_speedup"] else "-",
            f"{r['total_speedup']:.2f}x" if r["total_speedup"] else "-",
            fmt_metric("iter_p50_ns", r["iter_p50_ns"]), fmt_metric("busy_frac", r["gpu_busy_frac"]),
            r["top_finding"] or "-", *((_gpu_metrics_cell(r),) if gm else ()))))
    table_console().print(t)


def _gpu_metrics_cell(r: dict[str, Any]) -> str:
    def pct(v: Any) -> str:
        return "-" if v is None else f"{float(v):.1f}"

    return "; ".join(f"{dev}: {pct(m['sm_active'])} / {pct(m['tensor_active'])} / {pct(m['dram'])}"
                     for dev, m in (r.get("gpu_metrics") or {}).items()) or "-"


def ladder_markdown(lad: dict[str, Any]) -> str:
    # steady-state GPU metric means (compare.steady_gpu_metrics), only when a trace has them; blank
    # for a trace without; "GPU N: v" per device when a trace has several
    gm = any(r.get("gpu_metrics") for r in lad["rows"])
    extra = ("SMs active % (steady)", "tensor active % (steady)", "DRAM read+write % (steady)") if gm else ()
    lines = [f"| trace | {lad['label']} | step speedup | total speedup | GPU busy | top finding |"
             + "".join(f" {c} |" for c in extra),
             "|---|---:|---:|---:|---:|---|" + "---:|" * len(extra)]
    def md(text: object) -> str:  # one table cell: no escapes, no column breaks
        return clean_text(text).replace("|", "\\|")

    def metric_cell(r: dict[str, Any], key: str) -> str:
        devs = r.get("gpu_metrics") or {}
        vals = [(dev, m.get(key)) for dev, m in devs.items()]
        if len(vals) == 1:
            return "-" if vals[0][1] is None else f"{float(vals[0][1]):.1f}"
        return md("; ".join(f"{dev}: {'-' if v is None else format(float(v), '.1f')}" for dev, v in vals))

    for r in lad["rows"]:
        lines.append(f"| {md(r['label'])} | {fmt_metric(lad['metric'], r['value'])} | "
                     f"{(format(r['step_speedup'], '.2f') + 'x') if r['step_speedup'] else '-'} | "
                     f"{(format(r['total_speedup'], '.2f') + 'x') if r['total_speedup'] else '-'} | "
                     f"{fmt_metric('busy_frac', r['gpu_busy_frac'])} | {md(r['top_finding'] or '-')} |"
                     + "".join(f" {metric_cell(r, k)} |"
                               for k in (("sm_active", "tensor_active", "dram") if gm else ())))
    return "\n".join(lines) + "\n"
