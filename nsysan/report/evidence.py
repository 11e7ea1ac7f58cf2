"""A finding's evidence as a table: its rows with headers a reader understands and values formatted
by their keys (times from the capture start, durations, shares, bytes), each row linked to its span
on the timeline."""

from __future__ import annotations

from typing import Any

from nsysan.report.tables import Table
from nsysan.report.timeline import evidence_span
from nsysan.units import fmt_bytes, fmt_ns, fmt_pct

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


def finding_evidence(ev: tuple[Any, ...], t0: int = 0) -> Table | None:
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
