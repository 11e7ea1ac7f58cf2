"""Host-to-device copies and kernels run back to back instead of overlapping.

**Why it matters**: a GPU has copy engines that run beside its SMs. When every batch copies its
input and only then computes, the copy time adds to each iteration instead of hiding behind the
previous batch's compute.

**Fix**: use a copy stream and a compute stream with events (cudaEventRecord on the copy stream,
cudaStreamWaitEvent on the compute stream), double-buffer the device input, and prefetch batch i+1
while batch i computes; host memory must be pinned for the copy to be asynchronous.

Impact: the HtoD copy time not already overlapped, capped by the compute time it could hide behind,
claimed on those copies' wall-clock time (shared with pageable-memcpy and sync-memcpy, never
counted twice). Every percentage is per device; one finding for all devices, whose impact is the
largest device's (devices copy at the same time: the saving is wall-clock).
Fires when less than ``max_overlap_frac`` of the HtoD copy time overlaps compute.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from nsysan.rules._base import Finding, Severity, claims_of, finding, rule
from nsysan.units import fmt_ns, fmt_pct


@rule("serial-copy-compute", "Copies and compute do not overlap", max_overlap_frac=0.5, min_copy_ns=200_000)
def check(ctx: Any, *, max_overlap_frac: float, min_copy_ns: int) -> Iterator[Finding]:
    ov = ctx.a.overlap
    rows = ov.loc[ov["direction"] == "HtoD"] if len(ov) else ov
    ops, w = ctx.a.ops, ctx.window
    parts, evidence, starts, ends = [], [], [], []
    estimate = 0
    for _, r in rows.iterrows():
        if r["copy_ns"] < min_copy_ns or r["compute_ns"] == 0 or r["overlap_frac_of_copy"] >= max_overlap_frac:
            continue
        estimate = max(estimate, int(min(r["copy_ns"] - r["overlap_ns"], r["compute_ns"] - r["overlap_ns"])))
        cp = ops.loc[(ops["op"] == "memcpy").to_numpy() & (ops["kind"] == "HtoD").to_numpy()
                     & (ops["device_id"] == r["device_id"]).to_numpy()
                     & (ops["start_ns"] < w.end_ns).to_numpy() & (ops["end_ns"] > w.start_ns).to_numpy()]
        starts.append(cp["start_ns"].to_numpy())
        ends.append(cp["end_ns"].to_numpy())
        parts.append(f"Device {int(r['device_id'])}: {fmt_ns(r['copy_ns'])} of host-to-device copies and "
                     f"{fmt_ns(r['compute_ns'])} of compute in the steady state, only "
                     f"{fmt_pct(r['overlap_frac_of_copy'])} of the copy time overlapped compute")
        evidence.append({"device_id": int(r["device_id"]), "copy_ns": int(r["copy_ns"]),
                         "compute_ns": int(r["compute_ns"]), "overlap_ns": int(r["overlap_ns"])})
    if not parts:
        return
    # devices copy at once: the saving is the largest device's, claimed on the union of the copies
    yield finding(ctx, "serial-copy-compute", severity=Severity.WARNING, impact_ns=estimate,
                  claims=claims_of(np.concatenate(starts), np.concatenate(ends)),
                  message="; ".join(parts) + ".", evidence=tuple(evidence))
