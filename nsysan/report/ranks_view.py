"""The ranks panel's view model (report and ``summary.html``): per rank a stacked bar (compute /
exposed transfer / idle waiting / exposed copies / idle, per iteration) and a timeline with one lane
per rank over the same two iterations on the common clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsysan.units import fmt_ns

PARTS = (("compute_per_iter_ns", "compute", "bd-compute"),
         ("comm_transfer_exposed_per_iter_ns", "communication moving data (exposed)", "bd-comm"),
         ("wait_exposed_per_iter_ns", "waiting for another rank (GPU idle)", "bd-wait"),
         ("copy_exposed_per_iter_ns", "copies alone", "bd-copy"),
         ("idle_per_iter_ns", "idle", "bd-idle"))
LANE_W, LANE_H = 1000, 22



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
