"""The cross-rank view: several exports (one per rank, or any set of traces) side by side, and the
ranks of one job aligned on their collectives.

``cross_summary(results)`` is the JSON (``--out-dir``/summary.json, schema ``nsysan.cross/2``), with
the straggler of ``analyses/ranks.cross_stragglers``; ``render_cross_html(summary)`` is the page
(``summary.html``), its ranks panel drawn from ``report/ranks_view.py`` as the report's is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsysan.analyses.ranks import cross_stragglers
from nsysan.report.html import environment
from nsysan.report.jsonout import ranks_to_dict
from nsysan.report.ranks_view import ranks_view

if TYPE_CHECKING:
    from nsysan.report.summary import RunSummary


def cross_summary(results: list[RunSummary]) -> dict[str, Any]:
    """Per-trace (per-rank) busy/idle, iteration time p50, slowest kernel, as JSON. When the traces
    hold the ranks of one job (processes with communication kernels in several exports), the ranks
    are aligned on their collectives on the exports' common clock (``analyses/ranks.combine``) and
    the straggler is the rank the others wait for; otherwise a trace whose iteration time p50 exceeds
    1.2x the median of the traces of its program (``program`` per result) is marked slower."""
    med, ranks, late = cross_stragglers([r.straggler_inputs() for r in results])
    rows = []
    for r, straggler in zip(results, late):
        rows.append({"trace": r.trace, "p50_ns": r.p50_ns, "iterations": r.iterations,
                     "busy": [{"device_id": d, "busy_frac": round(f, 4), "idle_ns": i} for d, f, i in r.busy],
                     "top_finding": r.fixes[0].rule if r.fixes else None,
                     "slowest_kernel": r.slowest_kernel, "straggler": straggler})
    out: dict[str, Any] = {
        "schema": "nsysan.cross/2", "median_p50_ns": med,
        "straggler_rule": ("the rank that arrives last at the aligned collectives (see ranks)" if ranks is not None
                           else "no communication across the traces: iteration time p50 > 1.2 x the median p50 of the "
                           "traces of the same program (unrelated programs have no straggler)"),
        "traces": rows}
    if ranks is not None:
        out["ranks"] = ranks_to_dict(ranks)
    return out


def cross_view(summary: dict[str, Any]) -> dict[str, Any]:
    """What ``summary.html`` shows, formatted: the headline (traces, median iteration time, the
    straggler), a bar per trace of its iteration time p50, and the table's rows with their sort keys
    and each trace's own report (``<stem>.html`` beside the page, as ``--out-dir`` names it; this
    layer imports nothing of the pipeline, so a name too long for one path component gets no link)."""
    import os
    from pathlib import Path
    from urllib.parse import quote

    from nsysan.units import fmt_ns, fmt_pct

    traces = summary.get("traces") or []
    top = max((t.get("p50_ns") or 0 for t in traces), default=0) or 1
    rows, bars = [], []
    for t in traces:
        p50 = t.get("p50_ns")
        name = str(t["trace"])
        busy = [(int(b["device_id"]), float(b["busy_frac"])) for b in t.get("busy") or []]
        own = Path(name).stem + ".html"  # as --out-dir names it; a name past NAME_MAX is shortened there: no link
        rows.append({"trace": name, "report": quote(own) if len(os.fsencode(own)) <= 255 else "",
                     "p50": fmt_ns(p50) if p50 else "-", "p50_k": p50 or 0,
                     "iterations": f"{int(t['iterations']):,}" if t.get("iterations") is not None else "-",
                     "iterations_k": t.get("iterations") or 0,
                     "busy": ", ".join(f"GPU {d}: {fmt_pct(f)}" for d, f in busy) or "-",
                     "busy_k": max((f for _, f in busy), default=0.0),
                     "top_finding": t.get("top_finding") or "-", "slowest_kernel": str(t.get("slowest_kernel") or "-"),
                     "straggler": bool(t.get("straggler"))})
        if p50:
            bars.append({"label": name + (" (straggler)" if t.get("straggler") else ""), "value": fmt_ns(p50),
                         "frac": float(p50) / top})
    med = summary.get("median_p50_ns")
    late = [r["trace"] for r in rows if r["straggler"]]
    headline = [("Traces", f"{len(rows):,}"), ("Iteration time p50, median", fmt_ns(med) if med else "-"),
                ("Straggler", ", ".join(late) if late else "none")]
    return {"rows": rows, "bars": bars, "headline": headline}


def render_cross_html(summary: dict[str, Any]) -> str:
    """``summary.html``: the cross-rank summary and its ranks panel, in the report's look."""
    view = ranks_view(summary.get("ranks") or {})
    return environment().get_template("cross.html.j2").render(s=summary, rv=view, v=cross_view(summary))
