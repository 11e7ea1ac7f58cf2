"""How hard the GPU works while busy: GPU metric means per NVTX range, per iteration window and for
the steady state (``trace/metrics.py`` reads them).

For a set of time intervals (the instances of one range, merged), a metric's value is the mean of
its samples whose timestamp lies inside them; ``samples`` says how many there were (a mean over a
handful of samples is shown with its count, and not judged under ``MIN_SAMPLES``). Ranges are the
program's own closed push/pop ranges (library ranges left out, ``libranges``), by name.

The verdict per range, from the means (Hopper-style metric names; thresholds are in percent of peak):

* ``tensor-bound``: tensor active >= 40%;
* ``memory-bound``: DRAM read + write >= 50% with tensor active < 10%;
* ``SMs mostly idle``: GR active >= 50% (the GPU has work) but SMs active < 40% (tiny kernels,
  few blocks, low occupancy);
* ``GPU idle much of the time``: GR active < 50% (launch gaps, waiting for the host);
* otherwise no verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.libranges import library_of

MIN_SAMPLES = 20
SHOWN = ("gr_active", "sm_active", "sm_issue", "tensor_active", "warps_in_flight", "dram_read", "dram_write",
         "pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx")


def _means(src: Any, s: np.ndarray, e: np.ndarray) -> dict[str, Any]:
    """Mean of each metric over the samples inside the merged intervals [s, e)."""
    ts = src.ts
    lo = np.searchsorted(ts, s, side="left")
    hi = np.searchsorted(ts, e, side="left")
    idx = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if len(lo) else np.empty(0, np.int64)
    out: dict[str, Any] = {"samples": int(idx.size)}
    for k in SHOWN:
        v = src.values.get(k)
        if v is None or idx.size == 0:
            out[k] = None
            continue
        x = v[idx]
        x = x[~np.isnan(x)]
        out[k] = round(float(x.mean()), 2) if x.size else None
    return out


def verdict(r: dict[str, Any]) -> str:
    if r.get("samples", 0) < MIN_SAMPLES:
        return ""
    t, dr, dw = r.get("tensor_active"), r.get("dram_read"), r.get("dram_write")
    gr, sm = r.get("gr_active"), r.get("sm_active")
    if t is not None and t >= 40:
        return "tensor-bound"
    if dr is not None and dw is not None and dr + dw >= 50 and (t is None or t < 10):
        return "memory-bound"
    if gr is not None and sm is not None and gr >= 50 and sm < 40:
        return "SMs mostly idle"
    if gr is not None and gr < 50:
        return "GPU idle much of the time"
    return ""


def by_range(metrics: Any, ranges: pd.DataFrame, steady: Any) -> pd.DataFrame:
    """Per metric source and user range name (and the steady window): samples, means, verdict."""
    cols = ["source", "range", "instances", "samples", *SHOWN, "verdict"]
    if metrics is None or not metrics.sources:
        return pd.DataFrame(columns=cols)
    rows = []
    rg = ranges
    if len(rg):
        rg = rg.loc[rg["end_ns"].notna().to_numpy() & (rg["end_ns"].to_numpy() > rg["start_ns"].to_numpy())]
    for i, src in enumerate(metrics.sources):
        r = {"source": i, "range": f"[{steady.label}]", "instances": 1,
             **_means(src, np.array([steady.start_ns]), np.array([steady.end_ns]))}
        rows.append(r)
        if len(rg) == 0:
            continue
        for name, g in rg.groupby(rg["name"].astype(str), sort=True):
            if library_of(name, str(g["domain"].iloc[0]) if "domain" in g else ""):
                continue
            s, e = iv.merge(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
            rows.append({"source": i, "range": name, "instances": int(len(g)), **_means(src, s, e)})
    out = pd.DataFrame(rows)
    out["verdict"] = [verdict(r) for r in out.to_dict("records")]
    return out[cols].sort_values(["source", "samples"], ascending=[True, False], kind="stable").reset_index(drop=True)
