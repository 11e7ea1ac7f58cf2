"""Per-name summaries with the same numbers as ``nsys stats`` (cuda_gpu_kern_sum, cuda_api_sum,
cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum, nvtx_sum), plus the unified GPU-operation frame."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.trace.model import Trace

STAT_COLUMNS = ["count", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns"]


def duration_stats(df: pd.DataFrame, keys: list[str], dur: str = "dur_ns") -> pd.DataFrame:
    """count, total, mean, median, min, max and sample standard deviation (ddof=1, 0 for one sample)
    of ``dur`` per ``keys``, as nsys computes them; sorted by total descending, then keys."""
    if len(df) == 0:
        return pd.DataFrame({**{k: pd.Series(dtype=object) for k in keys},
                             **{c: pd.Series(dtype="float64") for c in STAT_COLUMNS}})
    g = df.groupby(keys, sort=True, observed=True, dropna=False)[dur]
    out = g.agg(count="count", total_ns="sum", avg_ns="mean", med_ns="median", min_ns="min", max_ns="max",
                std_ns="std").reset_index()
    out = out.assign(std_ns=out["std_ns"].fillna(0.0))
    for k in keys:
        if isinstance(out[k].dtype, pd.CategoricalDtype):
            out[k] = out[k].astype(str)
    return out.sort_values(["total_ns", *keys], ascending=[False, *([True] * len(keys))],
                           kind="stable").reset_index(drop=True)


def with_share(df: pd.DataFrame) -> pd.DataFrame:
    tot = df["total_ns"].sum()
    return df.assign(share=(df["total_ns"] / tot) if tot else 0.0)


def kernel_summary(trace: Trace) -> pd.DataFrame:
    """Per kernel name (demangled): stats of kernel duration and share of all kernel time.
    Matches ``nsys stats -r cuda_gpu_kern_sum`` (Instances = count; StdDev is the sample std)."""
    return with_share(duration_stats(trace.kernels, ["name"]))


def kernel_config_summary(trace: Trace) -> pd.DataFrame:
    """Per kernel name and launch configuration (grid and block dimensions)."""
    k = trace.kernels.assign(
        grid=lambda d: d["grid_x"].astype(str) + "x" + d["grid_y"].astype(str) + "x" + d["grid_z"].astype(str),
        block=lambda d: d["block_x"].astype(str) + "x" + d["block_y"].astype(str) + "x" + d["block_z"].astype(str),
    ) if len(trace.kernels) else trace.kernels.assign(grid=pd.Series(dtype=str), block=pd.Series(dtype=str))
    return with_share(duration_stats(k, ["name", "grid", "block"]))


def api_summary(trace: Trace) -> pd.DataFrame:
    """Per CUDA runtime/driver API name (version suffix stripped): stats of the call duration.
    Same rows as ``nsys stats -r cuda_api_sum``."""
    return with_share(duration_stats(trace.cuda_api, ["name"]))


MEMCPY_LABEL = {
    "HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device", "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer", "HtoA": "Host-to-Array", "AtoH": "Array-to-Host", "AtoA": "Array-to-Array",
    "AtoD": "Array-to-Device", "DtoA": "Device-to-Array", "UVM HtoD": "Unified Host-to-Device",
    "UVM DtoH": "Unified Device-to-Host", "UVM DtoD": "Unified Device-to-Device", "Unknown": "Unknown",
}


def memcpy_summary(trace: Trace) -> pd.DataFrame:
    """Per copy kind: duration stats, bytes, throughput (bytes / busy time of that kind), and the host
    memory split (pageable vs pinned, from the export's own enum: 0 pageable, 1 pinned)."""
    m = trace.memcpy
    if len(m) == 0:
        return pd.DataFrame(columns=["kind", *STAT_COLUMNS, "total_bytes", "throughput_bytes_per_s",
                                     "pageable_count", "pinned_count", "pageable_bytes", "pinned_bytes"])
    stats = duration_stats(m, ["kind"])
    pageable = (m["host_mem"] == "Pageable").astype("int64")
    pinned = (m["host_mem"] == "Pinned").astype("int64")
    extra = (m.assign(pageable_count=pageable, pinned_count=pinned, pageable_bytes=m["bytes"] * pageable,
                      pinned_bytes=m["bytes"] * pinned)
             .groupby("kind", sort=True, observed=True)
             .agg(total_bytes=("bytes", "sum"), pageable_count=("pageable_count", "sum"),
                  pinned_count=("pinned_count", "sum"), pageable_bytes=("pageable_bytes", "sum"),
                  pinned_bytes=("pinned_bytes", "sum"))
             .reset_index())
    out = stats.merge(extra, on="kind", how="left")
    thr = np.where(out["total_ns"] > 0, out["total_bytes"] / (out["total_ns"] / 1e9), 0.0)
    return out.assign(throughput_bytes_per_s=thr, operation=out["kind"].map(MEMCPY_LABEL).fillna(out["kind"]))


def memset_summary(trace: Trace) -> pd.DataFrame:
    m = trace.memset
    stats = duration_stats(m.assign(kind="memset"), ["kind"])
    if len(m) == 0:
        return stats.assign(total_bytes=pd.Series(dtype="int64"))
    return stats.assign(total_bytes=int(m["bytes"].sum()))


def nvtx_summary(trace: Trace) -> pd.DataFrame:
    """Per NVTX range name (``domain:text``) and style: stats of the CPU range duration. Matches
    ``nsys stats -r nvtx_sum`` (ranges still open at the end of the capture are left out)."""
    r = trace.nvtx.loc[(trace.nvtx["style"] != "Mark") & trace.nvtx["end_ns"].notna()]
    r = r.assign(dur_ns=r["dur_ns"].astype("int64"), name=r["name"].astype(str))
    return with_share(duration_stats(r, ["name", "style"]))


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """All GPU activity in one frame, sorted by start: kernels, memcpy, memset and CUDA Graph launches
    traced as a whole (graph mode). Columns: start_ns, end_ns, dur_ns, device_id, stream_id, pid,
    correlation_id, op ("kernel", "memcpy", "memset", "graph"), name, bytes, kind."""
    cols = ["start_ns", "end_ns", "dur_ns", "device_id", "stream_id", "pid", "correlation_id"]
    parts = []
    if len(trace.kernels):
        parts.append(trace.kernels[cols].assign(op="kernel", name=trace.kernels["name"].astype(str), bytes=0,
                                                kind=""))
    if len(trace.memcpy):
        parts.append(trace.memcpy[cols].assign(op="memcpy", name=("[memcpy " + trace.memcpy["kind"] + "]")
                                               .astype(str), bytes=trace.memcpy["bytes"],
                                               kind=trace.memcpy["kind"].astype(str)))
    if len(trace.memset):
        parts.append(trace.memset[cols].assign(op="memset", name="[memset]", bytes=trace.memset["bytes"],
                                               kind="memset"))
    if len(trace.graph_launches):
        g = trace.graph_launches
        parts.append(g[cols].assign(op="graph", name=("[CUDA graph " + g["graph_id"].astype(str) + "]"),
                                    bytes=0, kind="graph"))
    if not parts:
        return pd.DataFrame({**{c: pd.Series(dtype="int64") for c in cols},
                             "op": pd.Series(dtype=object), "name": pd.Series(dtype=object),
                             "bytes": pd.Series(dtype="int64"), "kind": pd.Series(dtype=object)})
    ops = pd.concat(parts, ignore_index=True)
    return ops.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
