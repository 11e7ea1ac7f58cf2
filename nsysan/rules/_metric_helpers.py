"""Shared by the GPU-metric rules (``tensor_cores_idle``, ``memory_bound``, ``sms_mostly_idle``,
``pcie_bound_copies``): the kernel groups of the steady window and their ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.metrics import MIN_SAMPLES, kernel_groups


def metric_rows(ctx: Any, kinds: tuple[str, ...] = ("kernel",)) -> pd.DataFrame:
    """The kernel-group rows (``GpuMetrics.by_kernel``) of these kinds with enough samples; empty
    without GPU metrics."""
    gm = getattr(ctx.a, "gpu_metrics", None)
    if gm is None or len(gm.by_kernel) == 0:
        return pd.DataFrame()
    k = gm.by_kernel
    return k.loc[k["kind"].isin(list(kinds)).to_numpy() & (k["samples"].to_numpy() >= MIN_SAMPLES)
                 & k["device_id"].notna().to_numpy()]


def group_ops(ctx: Any, device: int, kind: str, group: str) -> tuple[np.ndarray, np.ndarray]:
    """The runs of one kernel group's ops on ``device`` in the steady window that the GPU metrics
    measured (``GpuMetrics.measured``: the runs holding a sample; ops shorter than the sampling
    period alone are not judged by the metrics, so not claimed)."""
    w, ops = ctx.window, ctx.a.ops
    for k, g, m in kernel_groups(ops, int(device), w.start_ns, w.end_ns):
        if k == kind and g == group:
            s, e = iv.clip(ops["start_ns"].to_numpy(np.int64)[m], ops["end_ns"].to_numpy(np.int64)[m],
                           w.start_ns, w.end_ns)
            return ctx.a.gpu_metrics.measured(int(device), s, e)
    return np.empty(0, np.int64), np.empty(0, np.int64)


def evidence(rows: pd.DataFrame, cols: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    out = []
    for rec in rows.to_dict("records"):
        r = {c: (rec[c].item() if hasattr(rec[c], "item") else rec[c]) for c in cols if c in rec}
        if "group" in r:
            r["group"] = str(r["group"])[:160]
        out.append(r)
    return tuple(out)
