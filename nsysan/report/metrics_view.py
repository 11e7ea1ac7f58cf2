"""GPU metrics in the outputs: the JSON block, the report's metrics section (``_metrics.html.j2``) and
the timeline's metric lanes (drawn by ``templates/static/metrics_lane.js``).

**Timeline lanes.** One lane per metric source (device), three rows: SMs active, tensor active and
DRAM bandwidth (read + write, capped at 100% of peak). Every sample is shipped, up to
``MAX_LANE_SAMPLES`` a device (beyond that, consecutive samples are averaged into that many bins):
sample times as varint deltas, each series as one byte per sample (percent, rounded; 255 = not
sampled), deflated and base64-encoded like the other lanes. The browser averages the samples that
fall in each pixel column at the current zoom (zoomed in past the sampling period, a column shows
the sample that covers it), so the lane is right at every zoom without shipping several resolutions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.metrics import MIN_SAMPLES, SHOWN
from nsysan.report import deflate
from nsysan.report.encoding import varint
from nsysan.report.records import records
from nsysan.report.tables import table
from nsysan.units import fmt_ns

MAX_LANE_SAMPLES = 400_000
LANE_SERIES = (("sm_active", "SMs active"), ("tensor_active", "tensor active"), ("dram", "DRAM bandwidth"))
NO_METRICS = "no GPU metrics in this trace: record with nsys profile --gpu-metrics-devices=all"
NOTE = ("means of GPU metric samples (% of peak) per device: by_range inside each user range's instances (their GPU "
        "span) and the steady window; by_iteration per iteration; by_kernel per kernel group in the steady window "
        "(samples whose timestamp lies inside the group's ops); samples = how many, coverage = samples x period / "
        "duration; verdict from tensor, DRAM, PCIe, GR and SM activity")


def to_dict(gm: Any) -> dict[str, Any]:
    """The JSON ``gpu_metrics`` block; a trace without GPU metrics keeps the block it always had."""
    if gm is None:
        return {"by_range": [], "note": NO_METRICS}
    return {"devices": records(gm.devices), "by_range": records(gm.by_range),
            "by_iteration": records(gm.by_iteration), "by_kernel": records(gm.by_kernel),
            "note": NOTE + (f"; {gm.note}" if gm.note else "")}


# -- the report section -------------------------------------------------------------------------

def _pct(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else f"{float(v):.1f}%"


def _cov(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else f"{float(v) * 100:.0f}%"


COLS = [("Samples", "samples", lambda v: f"{int(v):,}"), ("Coverage", "coverage", _cov),
        ("GR active", "gr_active", _pct), ("SMs active", "sm_active", _pct), ("SM issue", "sm_issue", _pct),
        ("Tensor active", "tensor_active", _pct), ("Warps in flight", "warps_in_flight", _pct),
        ("DRAM read", "dram_read", _pct), ("DRAM write", "dram_write", _pct), ("PCIe RX", "pcie_rx", _pct),
        ("PCIe TX", "pcie_tx", _pct), ("NVLink RX", "nvlink_rx", _pct), ("NVLink TX", "nvlink_tx", _pct)]


def _present(df: pd.DataFrame) -> list[tuple[str, str, Any]]:
    """The metric columns this trace sampled (a column all None is left out)."""
    return [c for c in COLS if c[1] not in SHOWN or (c[1] in df and df[c[1]].notna().any())]


def view(a: Any) -> dict[str, Any] | None:
    """The report's metrics section: per device, a line on the source and the tables (by range, by
    kernel group, by iteration); None without GPU metrics (the report says so in one line)."""
    gm = a.gpu_metrics
    if gm is None:
        return None
    t0 = int(a.capture.start_ns)
    devices = []
    for d in gm.devices.to_dict("records"):
        src = int(d["source"])
        who = f"{d['device']}" + (f" ({d['name']})" if d.get("name") else "")
        line = (f"{who}: {int(d['samples']):,} samples every {fmt_ns(d['period_ns'])}; device identified by "
                f"{d['mapped_by']} (metric source {d['type_id']})")
        rg = gm.by_range.loc[gm.by_range["source"] == src]
        kg = gm.by_kernel.loc[gm.by_kernel["source"] == src]
        it = gm.by_iteration.loc[gm.by_iteration["source"] == src]
        tables = []
        cols = _present(rg)
        tables.append(table(f"gpu-metrics-{src}-ranges", f"{d['device']}: by NVTX range", rg,
                             [("Range", "range", lambda v: str(v)[:100]), ("Instances", "instances", None), *cols,
                              ("Verdict", "verdict", None)],
                             note="Each range's instances span their GPU work (first to last GPU op they launched)."))
        if len(kg):
            tables.append(table(f"gpu-metrics-{src}-kernels", f"{d['device']}: by kernel group ({a.steady.label})", kg,
                                 [("Group", "group", lambda v: str(v)[:100]), ("Kind", "kind", None),
                                  ("Ops", "ops", lambda v: f"{int(v):,}"), ("Busy", "busy_ns", fmt_ns),
                                  ("Measured", "measured_ns", fmt_ns), *_present(kg),
                                  ("Verdict", "verdict", None)],
                                 note="Samples whose sampling period lies inside the group's ops (merged). Measured: "
                                      "the busy time in runs long enough to hold a sample; ops shorter than the "
                                      "sampling period alone are not measured, and the rules do not judge them."))
        if len(it):
            t = table(f"gpu-metrics-{src}-iterations", f"{d['device']}: by iteration", it,
                       [("Iteration", "iteration", None), ("Start", "start_ns", lambda v: fmt_ns(v - t0)),
                        ("Duration", "end_ns", None), ("Warm-up", "warmup", lambda v: "yes" if v else ""),
                        *_present(it)])
            for row, rec in zip(t.rows, it.to_dict("records")):
                row[2] = fmt_ns(int(rec["end_ns"]) - int(rec["start_ns"]))
            t.spans = [(int(r["start_ns"]) - t0, int(r["end_ns"]) - t0) for r in it.to_dict("records")]
            tables.append(t)
        devices.append({"line": line, "tables": tables})
    return {"devices": devices, "note": gm.note,
            "legend": f"Mean % of peak over the samples inside each interval; fewer than {MIN_SAMPLES} samples: no "
                      "verdict. Tensor-bound: tensor active >= 40%; memory-bound: DRAM read + write >= 60% with tensor "
                      "active < 10%; PCIe-bound: PCIe RX or TX >= 60%; SMs mostly idle: SMs active < 0.4 x GR "
                      "active; GPU idle much of the time: GR active < 50%."}


def terminal_lines(a: Any) -> list[str]:
    """One line per metric device for the terminal summary: the steady window's means and verdict."""
    gm = a.gpu_metrics
    if gm is None:
        return []
    out = []
    for d in gm.devices.to_dict("records"):
        rows = gm.by_range.loc[(gm.by_range["source"] == d["source"]) & gm.by_range["range"].str.startswith("[")]
        if not len(rows):
            continue
        r = rows.iloc[0].to_dict()

        def v(k: str, r: dict[str, Any] = r) -> str:
            x = r.get(k)
            return "-" if x is None or x != x else f"{float(x):.0f}%"

        out.append(f"{d['device']} metrics ({a.steady.label}, {int(r['samples']):,} samples every "
                   f"{fmt_ns(d['period_ns'])}): SMs active {v('sm_active')}, tensor {v('tensor_active')}, DRAM read "
                   f"{v('dram_read')} + write {v('dram_write')}, PCIe RX {v('pcie_rx')} / TX {v('pcie_tx')}"
                   + (f"; {r['verdict']}" if r.get("verdict") else ""))
    return out


# -- the timeline lanes -------------------------------------------------------------------------

def _b64(raw: bytes) -> str:
    return deflate.text([raw])


def _bytes(v: np.ndarray) -> bytes:
    x = np.where(np.isnan(v), 255, np.clip(np.rint(v), 0, 100)).astype(np.uint8)
    return x.tobytes()


def lanes(a: Any, t0: int) -> list[dict[str, Any]]:
    """The metric lanes of the timeline (module docstring); [] without GPU metrics."""
    gm = a.gpu_metrics
    if gm is None:
        return []
    out = []
    for src in gm.sources:
        ts = np.asarray(src.ts, dtype=np.int64)
        if len(ts) == 0:
            continue
        vals = {k: src.values[k].astype(np.float64) for k in ("sm_active", "tensor_active") if k in src.values}
        if "dram_read" in src.values or "dram_write" in src.values:
            r = src.values.get("dram_read")
            w = src.values.get("dram_write")
            parts = [x.astype(np.float64) for x in (r, w) if x is not None]
            vals["dram"] = np.minimum(np.sum(parts, axis=0), 100.0) if parts else None
        period = src.period_ns
        if len(ts) > MAX_LANE_SAMPLES:  # average runs of consecutive samples
            k = -(-len(ts) // MAX_LANE_SAMPLES)
            n = len(ts) // k * k
            ts = ts[k - 1:n:k]
            for key, v in vals.items():
                with np.errstate(invalid="ignore"):
                    vals[key] = np.nanmean(v[:n].reshape(-1, k), axis=1)
            period *= k
        rel = ts - t0
        first = int(rel[0])
        series = [{"key": key, "label": label, "data": _b64(_bytes(vals[key]))}
                  for key, label in LANE_SERIES if vals.get(key) is not None]
        if not series:
            continue
        out.append({"label": f"{src.label} · GPU metrics: " + " / ".join(
                        {"sm_active": "SMs", "tensor_active": "tensor", "dram": "DRAM"}[s["key"]] for s in series),
                    "group": "metrics", "n": int(len(ts)), "first": first, "period": int(period),
                    "t": _b64(varint(np.diff(rel, prepend=first))), "series": series})
    return out
