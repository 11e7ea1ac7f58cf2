"""Launch overhead: each GPU operation joined to the CUDA API call that launched it.

The join is on correlation id AND process (correlation ids are unique only within a process).
Per launch: api_ns (the call's CPU duration), queue_ns (API start -> GPU start: launch latency
plus time queued behind earlier work), gpu_ns, and launch_dominated (api_ns > gpu_ns). CUDA Graph
launches (``cudaGraphLaunch``) are kept apart: ``is_graph``. Compare ``nsys stats -r cuda_kern_exec_sum``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses.frames import category_mask
from nsysan.analyses.join import with_launch_calls
from nsysan.trace.model import Trace


def launches(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """Kernels and graph launches with their launching API call. Columns: start_ns, end_ns, gpu_ns,
    device_id, stream_id, pid, tid, correlation_id, name, op, api_name, api_start_ns, api_end_ns, api_ns,
    queue_ns, launch_dominated, is_graph. Operations whose API call is not in the trace are dropped."""
    ops = with_launch_calls(trace, ops)
    keep = ops["op"].isin(["kernel", "graph"]).to_numpy() & (ops["api_start_ns"].to_numpy() >= 0)
    j = ops.loc[keep]
    graph_api = category_mask(j["api_name"], lambda s: s.startswith(("cudaGraphLaunch", "cuGraphLaunch")))
    j = j.assign(gpu_ns=j["dur_ns"], api_ns=j["api_end_ns"] - j["api_start_ns"],
                 queue_ns=j["start_ns"] - j["api_start_ns"])
    j = j.assign(launch_dominated=j["api_ns"] > j["gpu_ns"],
                 is_graph=(j["op"] == "graph").to_numpy() | graph_api)
    cols = ["start_ns", "end_ns", "gpu_ns", "device_id", "stream_id", "pid", "tid", "correlation_id", "name", "op",
            "api_name", "api_start_ns", "api_end_ns", "api_ns", "queue_ns", "launch_dominated", "is_graph"]
    j = j[cols]
    order = np.lexsort((j["correlation_id"].to_numpy(), j["start_ns"].to_numpy()))
    if not (order[1:] > order[:-1]).all():
        j = j.take(order)
    return j.reset_index(drop=True)


def launch_summary(lau: pd.DataFrame) -> dict[str, object]:
    """Totals over launches, split into ordinary launches and graph launches."""

    def part(d: pd.DataFrame) -> dict[str, object]:
        if len(d) == 0:
            return {"count": 0}
        return {
            "count": int(len(d)),
            "api_total_ns": int(d["api_ns"].sum()),
            "api_med_ns": int(round(float(d["api_ns"].median()))),
            "gpu_total_ns": int(d["gpu_ns"].sum()),
            "gpu_med_ns": int(round(float(d["gpu_ns"].median()))),
            "queue_med_ns": int(round(float(d["queue_ns"].median()))),
            "launch_dominated_count": int(d["launch_dominated"].sum()),
            "launch_dominated_frac": float(d["launch_dominated"].mean()),
        }

    return {"kernels": part(lau.loc[~lau["is_graph"]]), "graphs": part(lau.loc[lau["is_graph"]])}


def per_kernel(lau: pd.DataFrame) -> pd.DataFrame:
    """Per (api_name, kernel name): count, median API/queue/GPU times, share launch-dominated."""
    if len(lau) == 0:
        return pd.DataFrame(columns=["api_name", "name", "count", "api_med_ns", "queue_med_ns", "gpu_med_ns",
                                     "launch_dominated_frac"])
    g = lau.groupby(["api_name", "name"], sort=True, observed=True)
    out = g.agg(count=("gpu_ns", "size"), api_med_ns=("api_ns", "median"), queue_med_ns=("queue_ns", "median"),
                gpu_med_ns=("gpu_ns", "median"), launch_dominated_frac=("launch_dominated", "mean")).reset_index()
    return out.sort_values(["count", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def median_int(values: pd.Series) -> int:
    return int(round(float(np.median(values)))) if len(values) else 0
