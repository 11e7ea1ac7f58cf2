"""The metric catalogue (id, human name, direction, help) and each metric read from the JSON form of
one analysis: the headline numbers, the steady-state per-iteration samples, the GPU metric means."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# id -> (human name, direction): +1 means higher is better, -1 lower is better. The ids are the
# machine names (JSON, --metric); the human names are what a person reads (terminal, HTML).
METRICS: dict[str, tuple[str, int]] = {
    "iter_p50_ns": ("Iteration time p50 (period)", -1),
    "iter_p90_ns": ("Iteration time p90 (period)", -1),
    "iter_p99_ns": ("Iteration time p99 (period)", -1),
    "iter_mean_ns": ("Iteration time mean (period)", -1),
    "throughput_per_s": ("Iterations per second", +1),
    "iter_latency_p50_ns": ("Iteration latency p50 (start to completion)", -1),
    "timed_region_ns": ("Timed region (CPU)", -1),
    "timed_region_gpu_ns": ("Timed region with its GPU work", -1),
    "gpu_busy_frac": ("GPU busy (steady)", +1),
    "gpu_idle_ns": ("GPU idle (steady)", -1),
    "overlap_frac_of_copy": ("Copy time overlapped with compute", +1),
    "kernel_total_ns": ("Kernel time, total", -1),
    "launch_api_med_ns": ("Kernel launch call, median", -1),
    "launch_dominated_frac": ("Kernels shorter than their launch call", -1),
    "htod_throughput_bytes_per_s": ("Host-to-device copy throughput", +1),
    "gap_total_ns": ("GPU idle gaps, total", -1),
}
# What each metric means, for a tooltip and the docs.
METRIC_HELP: dict[str, str] = {
    "iter_p50_ns": "median time between consecutive iterations' completions, steady state (warm-up excluded)",
    "iter_p90_ns": "90th percentile of the iteration period, steady state",
    "iter_p99_ns": "99th percentile of the iteration period, steady state",
    "iter_mean_ns": "mean iteration period, steady state",
    "throughput_per_s": "iterations completed per second, steady state",
    "iter_latency_p50_ns": "median time from an iteration's start to its completion; includes queueing when the "
                           "CPU runs ahead of the GPU",
    "timed_region_ns": "the first 'Total Elapsed Time' NVTX range, on the CPU",
    "timed_region_gpu_ns": "the same range until its last GPU op ended",
    "gpu_busy_frac": "share of the steady-state window with at least one GPU op running (all devices)",
    "gpu_idle_ns": "time in the steady-state window with no GPU op running (all devices)",
    "overlap_frac_of_copy": "share of copy time during which a compute kernel ran",
    "kernel_total_ns": "sum of kernel durations, CUDA Graph launches included",
    "launch_api_med_ns": "median duration of the CUDA calls that launched kernels",
    "launch_dominated_frac": "share of kernels that ran shorter than the call that launched them",
    "htod_throughput_bytes_per_s": "bytes copied host to device per second of copy time",
    "gap_total_ns": "sum of the GPU idle gaps of the capture",
}
# metrics whose better/worse reads as faster/slower
SPEED_METRICS = {"iter_p50_ns", "iter_p90_ns", "iter_p99_ns", "iter_mean_ns", "throughput_per_s", "iter_latency_p50_ns",
          "timed_region_ns", "timed_region_gpu_ns"}
# metrics the per-iteration samples test: the periods (the latencies for the latency)
TESTED_BY = {"iter_p50_ns": "period", "iter_p90_ns": "period", "iter_p99_ns": "period", "iter_mean_ns": "period",
              "throughput_per_s": "period", "iter_latency_p50_ns": "latency"}
GATE_METRICS = ("iter_p50_ns", "iter_p90_ns", "iter_p99_ns", "iter_mean_ns", "iter_latency_p50_ns", "timed_region_ns",
                "timed_region_gpu_ns", "kernel_total_ns", "gpu_idle_ns")



def headline(d: dict[str, Any]) -> dict[str, float | None]:
    """The metrics of ``METRICS`` from one analysis (None where the trace has no such thing)."""
    st = (d.get("iterations") or {}).get("stats") or {}
    regions = (d.get("iterations") or {}).get("timed_regions") or []
    steady = (d.get("gpu") or {}).get("steady") or []
    overlap = [r for r in (d.get("overlap") or {}).get("by_direction") or [] if r.get("direction") == "all"]
    launch = (d.get("launch") or {}).get("kernels") or {}
    htod = [r for r in (d.get("memcpy") or {}).get("by_kind") or [] if r.get("kind") == "HtoD"]
    gaps = ((d.get("gaps") or {}).get("summary") or {})
    busy = sum(float(r.get("busy_ns", 0)) for r in steady)
    span = sum(float(r.get("busy_ns", 0)) + float(r.get("idle_ns", 0)) for r in steady)

    def num(v: Any) -> float | None:
        return None if v is None else float(v)

    copy_ns = sum(float(r.get("copy_ns", 0)) for r in overlap)
    return {
        "iter_p50_ns": num(st.get("p50_ns")), "iter_p90_ns": num(st.get("p90_ns")),
        "iter_p99_ns": num(st.get("p99_ns")), "iter_mean_ns": num(st.get("mean_ns")),
        "throughput_per_s": num(st.get("throughput_per_s")),
        "iter_latency_p50_ns": num(st.get("latency_p50_ns")),
        "timed_region_ns": num(regions[0]["cpu_ns"]) if regions else None,
        "timed_region_gpu_ns": num(regions[0]["with_gpu_ns"]) if regions else None,
        "gpu_busy_frac": busy / span if span else None,
        "gpu_idle_ns": sum(float(r.get("idle_ns", 0)) for r in steady) if steady else None,
        "overlap_frac_of_copy": (sum(float(r.get("overlap_ns", 0)) for r in overlap) / copy_ns) if copy_ns else None,
        "kernel_total_ns": float(sum(r["total_ns"] for r in (d.get("kernels") or {}).get("by_name") or []))
        + float((d.get("graph_launches") or {}).get("total_ns") or 0),
        "launch_api_med_ns": num(launch.get("api_med_ns")),
        "launch_dominated_frac": num(launch.get("launch_dominated_frac")),
        "htod_throughput_bytes_per_s": num(htod[0].get("throughput_bytes_per_s")) if htod else None,
        "gap_total_ns": num(gaps.get("total_ns")),
    }


def steady_periods(d: dict[str, Any]) -> np.ndarray:
    """The steady-state iteration periods (a sequence's first iteration has none); the latencies
    when no sequence has two steady iterations (the headline falls back the same way)."""
    rows = [r for r in (d.get("iterations") or {}).get("per_iteration") or [] if not r.get("warmup")]
    per = [r["period_ns"] for r in rows if r.get("period_ns") is not None and r["period_ns"] >= 0]
    return np.array(per if per else [r["latency_ns"] for r in rows], dtype=np.float64)



def steady_latencies(d: dict[str, Any]) -> np.ndarray:
    """The steady-state iterations' latencies (start to completion), warm-up excluded."""
    rows = [r for r in (d.get("iterations") or {}).get("per_iteration") or [] if not r.get("warmup")]
    return np.array([r["latency_ns"] for r in rows], dtype=np.float64)



def saved_pct(v: Any) -> float | None:
    """A metric mean from a saved analysis: a finite number, else None (saved files are untrusted)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def steady_gpu_metrics(d: dict[str, Any]) -> dict[str, Any]:
    """``{"gpu_metrics": {device: {sm_active, tensor_active, dram (read + write), samples}}}``: the
    steady-window means of an analysis with GPU metrics (a ladder row's extra), else ``{}``."""
    g = d.get("gpu_metrics") if isinstance(d.get("gpu_metrics"), dict) else {}
    if not g.get("devices") or not isinstance(g.get("by_range"), list):
        return {}
    out = {}
    for r in g.get("by_range") or []:
        if isinstance(r, dict) and str(r.get("range", "")).startswith("["):
            dr, dw = saved_pct(r.get("dram_read")), saved_pct(r.get("dram_write"))
            out[str(r.get("device"))] = {"sm_active": saved_pct(r.get("sm_active")),
                                         "tensor_active": saved_pct(r.get("tensor_active")),
                                         "dram": None if dr is None or dw is None else round(dr + dw, 2),
                                         "samples": None if saved_pct(r.get("samples")) is None else int(r["samples"])}
    return {"gpu_metrics": out} if out else {}


GPU_METRIC_KEYS = ("gr_active", "sm_active", "tensor_active", "dram_read", "dram_write", "pcie_rx", "pcie_tx",
                   "nvlink_rx", "nvlink_tx")
