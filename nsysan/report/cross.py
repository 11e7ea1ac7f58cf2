"""The cross-rank view: several exports (one per rank, or any set of traces) side by side, and the
ranks of one job aligned on their collectives.

``cross_summary(results)`` is the JSON (``--out-dir``/summary.json, schema ``nsysan.cross/2``);
``ranks_view(ranks_dict)`` turns the ranks part (of that summary, or of one multi-process export's
analysis) into what the HTML draws: a stacked bar per rank (compute / exposed transfer / idle
waiting / exposed copies / idle, per iteration) and a timeline with one lane per rank over the same
two iterations on the common clock; ``render_cross_html(summary)`` is the page (``summary.html``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from nsysan.units import fmt_ns

PARTS = (("compute_per_iter_ns", "compute", "bd-compute"),
         ("comm_transfer_exposed_per_iter_ns", "communication moving data (exposed)", "bd-comm"),
         ("wait_exposed_per_iter_ns", "waiting for another rank (GPU idle)", "bd-wait"),
         ("copy_exposed_per_iter_ns", "copies alone", "bd-copy"),
         ("idle_per_iter_ns", "idle", "bd-idle"))
LANE_W, LANE_H = 1000, 22


def cross_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-trace (per-rank) busy/idle, iteration time p50, slowest kernel, as JSON. When the traces
    hold the ranks of one job (processes with communication kernels in several exports), the ranks
    are aligned on their collectives on the exports' common clock (``analyses/ranks.combine``) and
    the straggler is the rank the others wait for; otherwise a trace whose iteration time p50 exceeds
    1.2x the median is marked slower."""
    p50s = [r["p50_ns"] for r in results if r.get("p50_ns")]
    med = statistics.median(p50s) if p50s else None
    payloads = [p for r in results for p in (r.get("rank_payloads") or [])]
    ranks = None
    if len({p["trace"] for p in payloads}) >= 2:
        from nsysan.analyses.ranks import combine

        ranks = combine(payloads)
    late = {ranks.straggler["rank"]} if ranks is not None and ranks.straggler else set()
    late_traces = {str(ranks.ranks.loc[ranks.ranks["rank"] == k, "trace"].iloc[0]) for k in late} if late else set()
    rows = []
    for r in results:
        straggler = (str(r["trace"]) in late_traces) if ranks is not None else \
            bool(med and r.get("p50_ns") and r["p50_ns"] > 1.2 * med)
        rows.append({"trace": r["trace"], "p50_ns": r.get("p50_ns"), "iterations": r.get("iterations"),
                     "busy": [{"device_id": d, "busy_frac": round(f, 4), "idle_ns": i} for d, f, i in r["busy"]],
                     "top_finding": r["findings"][0][0] if r["findings"] else None,
                     "slowest_kernel": r["slowest_kernel"], "straggler": straggler})
    out: dict[str, Any] = {
        "schema": "nsysan.cross/2", "median_p50_ns": med,
        "straggler_rule": ("the rank that arrives last at the aligned collectives (see ranks)" if ranks is not None
                           else "no communication across the traces: iteration time p50 > 1.2 x median p50"),
        "traces": rows}
    if ranks is not None:
        from nsysan.report.jsonout import ranks_to_dict

        out["ranks"] = ranks_to_dict(ranks)
    return out


def ranks_view(r: dict[str, Any]) -> dict[str, Any]:
    """What the ranks panel draws, from ``ranks_to_dict`` output: per rank a stacked bar (parts in
    ns and as % of the longest rank's iteration) and a timeline lane (rects in a 0..LANE_W box over
    the common time span of the lanes)."""
    rows = r.get("ranks") or []
    if len(rows) < 2:
        return {}
    s = r.get("straggler") or {}
    longest = max((sum(int(x.get(k) or 0) for k, _, _ in PARTS) for x in rows), default=0) or 1
    bars = []
    for x in rows:
        parts = [{"label": lab, "cls": cls, "ns": int(x.get(k) or 0),
                  "pct": round(100.0 * int(x.get(k) or 0) / longest, 3)} for k, lab, cls in PARTS]
        bars.append({"rank": x["rank"], "trace": Path(str(x.get("trace") or "")).name, "pid": x["pid"],
                     "device_id": x["device_id"], "parts": parts, "straggler": s.get("rank") == x["rank"],
                     "total_ns": sum(p["ns"] for p in parts)})
    lanes = r.get("lanes") or {}
    spans = [(int(v["t0"]), int(v["t1"])) for v in lanes.values() if v and "t0" in v]
    timeline: dict[str, Any] = {}
    if spans:
        t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)
        scale = LANE_W / max(t1 - t0, 1)
        rects, marks = [], []
        for i, x in enumerate(rows):
            lane = lanes.get(x["rank"]) or lanes.get(str(x["rank"])) or {}
            y = i * (LANE_H + 6)
            for role, cls in (("compute", "tl-compute"), ("memcpy", "tl-copy"), ("comm", "tl-comm")):
                for a, b in lane.get(role, []):
                    w = max((b - a) * scale, 0.3)
                    rects.append({"x": round((a - t0) * scale, 2), "y": y, "w": round(w, 2), "h": LANE_H,
                                  "cls": cls, "title": f"rank {x['rank']} {role}: {fmt_ns(b - a)}"})
            for a, b in lane.get("iterations", []):
                marks.append({"x": round((b - t0) * scale, 2), "y": y, "h": LANE_H})
        timeline = {"w": LANE_W, "h": len(rows) * (LANE_H + 6), "rects": rects, "marks": marks,
                    "labels": [{"y": i * (LANE_H + 6) + LANE_H - 6, "text": f"rank {x['rank']}"}
                               for i, x in enumerate(rows)],
                    "span": fmt_ns(t1 - t0)}
    return {"bars": bars, "parts": [{"label": lab, "cls": cls} for _, lab, cls in PARTS], "timeline": timeline,
            "verdict": r.get("verdict", ""), "straggler": s or None, "rows": rows}


def render_cross_html(summary: dict[str, Any]) -> str:
    from nsysan.report.html import environment

    view = ranks_view(summary.get("ranks") or {})
    return environment().get_template("cross.html.j2").render(s=summary, rv=view)
