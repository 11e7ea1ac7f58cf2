"""Shared by the GPU-metric rules (``tensor_cores_idle``, ``memory_bound``, ``sms_mostly_idle``,
``pcie_bound_copies``): the kernel groups of the steady window and their ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.metrics import MIN_SAMPLES
from nsysan.rules._base import RuleContext


def metric_rows(ctx: RuleContext, kinds: tuple[str, ...] = ("kernel",)) -> pd.DataFrame:
    """The kernel-group rows (``GpuMetrics.by_kernel``) of these kinds with enough samples; empty
    without GPU metrics."""
    metrics = ctx.a.gpu_metrics
    if metrics is None or len(metrics.by_kernel) == 0:
        return pd.DataFrame()
    groups = metrics.by_kernel
    return groups.loc[groups["kind"].isin(list(kinds)).to_numpy() & (groups["samples"].to_numpy() >= MIN_SAMPLES)
                      & groups["device_id"].notna().to_numpy()]


def group_ops(ctx: RuleContext, device: int, kind: str, group: str) -> tuple[np.ndarray, np.ndarray]:
    """The runs of one kernel group's ops on ``device`` in the steady window that the GPU metrics
    measured (``GpuMetrics.measured``: the runs holding a sample; ops shorter than the sampling
    period alone are not judged by the metrics, so not claimed)."""
    metrics = ctx.a.gpu_metrics
    got = None if metrics is None else metrics.group_spans.get((int(device), kind, group))
    if metrics is None or got is None:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return metrics.measured(int(device), *got)


def union(spans: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The merged union of several groups' op runs (``group_ops``), for their wall-clock time."""
    from nsysan.analyses import intervals as iv

    if not spans:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return iv.merge(np.concatenate([x[0] for x in spans]), np.concatenate([x[1] for x in spans]))


def evidence(rows: pd.DataFrame, cols: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    out = []
    for rec in rows.to_dict("records"):
        r = {c: (rec[c].item() if hasattr(rec[c], "item") else rec[c]) for c in cols if c in rec}
        if "group" in r:
            r["group"] = str(r["group"])[:160]
        out.append(r)
    return tuple(out)
