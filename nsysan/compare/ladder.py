"""An optimization ladder (``nsysan compare``): one row per analysis in order, with the chosen metric
and the speedup of each step."""

from __future__ import annotations

from typing import Any

from nsysan.compare.metrics import METRICS, headline, steady_gpu_metrics
from nsysan.errors import UsageError


def ladder(items: list[tuple[str, dict[str, Any]]], metric: str | None = None) -> dict[str, Any]:
    """One row per analysis in order, with the chosen metric and the speedup of each step.

    Default metric: the timed region ("Total Elapsed Time") when every trace has one, else the
    steady-state iteration p50."""
    heads = [(label, headline(d), d) for label, d in items]
    if metric is None:
        metric = "timed_region_ns" if all(h["timed_region_ns"] for _, h, _ in heads) else "iter_p50_ns"
    if metric not in METRICS:
        raise UsageError(f"--metric {metric!r}: choose one of {', '.join(METRICS)}")
    rows = []
    first = prev = None
    for label, h, d in heads:
        v = h[metric]
        top = (d.get("findings") or [{}])[0] if d.get("findings") else {}
        rows.append({"label": label, "value": v,
                     "step_speedup": (prev / v) if (prev and v) else None,
                     "total_speedup": (first / v) if (first and v) else None,
                     "iter_p50_ns": h["iter_p50_ns"], "gpu_busy_frac": h["gpu_busy_frac"],
                     "top_finding": top.get("rule"), "top_impact_ns": top.get("impact_ns"),
                     **steady_gpu_metrics(d)})
        if v:
            first = first or v
            prev = v
    return {"schema": "nsysan.ladder/1", "metric": metric, "label": METRICS[metric][0], "rows": rows}
