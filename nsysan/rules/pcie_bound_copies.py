"""Host-device copies limited by the PCIe link (GPU metrics).

**Why it matters**: a copy that already moves data at the PCIe link's peak cannot be made faster by
pinning memory or by larger transfers: every byte crossing the link costs its share of the link's
bandwidth, and the GPU waits for it unless the copy overlaps compute.

**Fix**: move fewer bytes across the link: keep data resident on the GPU between steps, transfer
compact forms (uint8 images, BF16 instead of FP32, compressed) and expand them on the GPU, avoid
device-to-host round trips (``.item()``, ``.cpu()`` of whole tensors); hide the rest behind compute
(pinned memory, ``non_blocking=True`` on a copy stream, prefetch the next batch). On systems with
NVLink-C2C or GPUDirect Storage, use them.

Measured: the GPU metric samples taken during the steady state's host-to-device (PCIe RX) and
device-to-host (PCIe TX) copies on each device (samples whose period lies inside the copies) show
that direction's throughput at least ``min_pcie_pct`` of peak, with at least ``min_samples``
samples. Impact 0: at the link's peak the copy time can only shrink by moving fewer bytes (how many
the program could avoid, the trace does not say) or be hidden behind compute, which
``serial-copy-compute`` estimates on the same copies.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.rules._metric_groups import evidence, metric_rows
from nsysan.units import fmt_bytes, fmt_ns, fmt_pct

DIRECTIONS = {"memcpy HtoD": ("pcie_rx", "host-to-device", "RX"), "memcpy DtoH": ("pcie_tx", "device-to-host", "TX")}


@rule("pcie-bound-copies", "Copies limited by the PCIe link", min_pcie_pct=60.0, min_samples=20, min_share=0.05)
def check(ctx: RuleContext, *, min_pcie_pct: float, min_samples: int, min_share: float) -> Iterator[Finding]:
    k = metric_rows(ctx, ("role",))
    if len(k) == 0:
        return
    w = ctx.window
    for dev, rows in k.groupby("device_id", sort=True):
        said, ev, busy = [], [], 0
        for rec in rows.to_dict("records"):
            d = DIRECTIONS.get(str(rec["group"]))
            v = rec.get(d[0]) if d else None
            if d is None or v is None or v != v or v < min_pcie_pct or rec["samples"] < min_samples:
                continue
            ops = ctx.a.ops
            sel = (ops["device_id"].to_numpy() == dev) & np.asarray(ops["op"] == "memcpy", dtype=bool) \
                & np.asarray(ops["kind"].astype(object) == rec["group"].split()[-1], dtype=bool) \
                & (ops["start_ns"].to_numpy() >= w.start_ns) & (ops["end_ns"].to_numpy() <= w.end_ns)
            nbytes, dur = int(ops["bytes"].to_numpy()[sel].sum()), int(ops["dur_ns"].to_numpy()[sel].sum())
            rate = f", {fmt_bytes(nbytes / dur * 1e9)}/s" if dur else ""
            said.append(f"{d[1]} copies ran {fmt_ns(int(rec['busy_ns']))} with PCIe {d[2]} at {v:.0f}% of peak "
                        f"({fmt_bytes(nbytes)}{rate}, {int(rec['samples']):,} samples)")
            ev.append({**evidence(rows.loc[rows["group"] == rec["group"]],
                                  ("group", "ops", "busy_ns", "samples", "coverage", "pcie_rx", "pcie_tx"))[0],
                       "bytes": nbytes})
            busy += int(rec["busy_ns"])
        if not said or busy < min_share * w.dur_ns:
            continue
        yield finding(ctx, "pcie-bound-copies", severity=Severity.WARNING if busy >= 0.1 * w.dur_ns else Severity.INFO,
                      impact_ns=0,
                      message=f"GPU {int(dev)}: {'; '.join(said)} ({fmt_pct(busy / w.dur_ns)} of the {w.label}): the "
                              "link is the limit, so pinning or larger transfers will not make these copies faster. "
                              "No time estimate: only fewer bytes or overlap with compute (serial-copy-compute) save "
                              "time.",
                      evidence=tuple(ev))
