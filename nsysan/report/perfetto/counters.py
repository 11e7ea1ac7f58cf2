"""The timeline's counter tracks: GPU metrics (SMs active, tensor active, DRAM read and write, in %
of peak; bucket means above the cap), live device memory per device and process, and unified
memory's running totals (bytes migrated each way, GPU and CPU page faults; evenly spaced above the
cap), each in its "GPU N" process (named here when nothing else named it) or its host process."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from nsysan.analyses.frames import group_rows
from nsysan.report.perfetto.events import CHUNK, GPU_PID, Writer, meta, us

MAX_COUNTER_SAMPLES = 200_000  # counter events per metric track at most (above: bucket averages)
COUNTERS = (("sm_active", "SMs active"), ("tensor_active", "Tensor active"), ("dram_read", "DRAM read"),
            ("dram_write", "DRAM write"))
METRIC_PID = GPU_PID + (1 << 20)  # a metric source not mapped to a GPU: process METRIC_PID + its index


def metric_sources(a: Any) -> list[Any]:
    """The GPU metric sources (``trace.metrics.Source``) with samples; [] without GPU metrics."""
    g = a.gpu_metrics
    return [s for s in (getattr(g, "sources", None) or []) if len(s.ts)]


def bucket_means(ts: np.ndarray, v: np.ndarray, cap: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """(times, values, bucket): the samples as they are when at most ``cap`` (default
    ``MAX_COUNTER_SAMPLES``), else the means of consecutive buckets of ``bucket = ceil(n / cap)``
    samples, each at its first sample's time."""
    cap = MAX_COUNTER_SAMPLES if cap is None else max(1, int(cap))
    n = len(ts)
    if n <= cap:
        return ts, v.astype(np.float64), 1
    k = -(-n // cap)
    starts = np.arange(0, n, k)
    sums = np.add.reduceat(v.astype(np.float64), starts)
    sizes = np.diff(np.append(starts, n))
    return ts[starts], sums / sizes, int(k)


def metric_counters(w: Writer, a: Any, t0: int, named: set[int], cap: int = MAX_COUNTER_SAMPLES) -> dict[str, Any]:
    """A counter track per metric source and metric of ``COUNTERS`` (``bucket_means`` above ``cap``
    samples); the ``otherData`` note."""
    note: dict[str, Any] = {}
    for i, src in enumerate(metric_sources(a)):
        dev = src.device_id
        pid = GPU_PID + int(dev) if dev is not None else METRIC_PID + i
        if pid not in named:  # a sampled GPU without ops or gaps, or a source of no known GPU
            label = src.label + (f" ({src.device_name})" if src.device_name else "")
            meta(w, "process_name", pid, None, {"name": label})
            meta(w, "process_sort_index", pid, None, {"sort_index": int(dev) if dev is not None else 10_000 + i})
            named.add(pid)
        for key, title in COUNTERS:
            v = src.values.get(key)
            if v is None:
                continue
            ok = ~np.isnan(v)
            ts, vals, bucket = bucket_means(src.ts[ok], v[ok], cap)
            head = f'{{"ph":"C","cat":"gpu_metric","pid":{pid},"name":{json.dumps(title)},"ts":'
            for lo in range(0, len(ts), CHUNK):
                w.extend([f'{head}{us(t)},"args":{{"%":{x:.6g}}}}}'
                          for t, x in zip((ts[lo:lo + CHUNK] - t0).tolist(), vals[lo:lo + CHUNK].tolist())],
                         "gpu_metric")
            note[f"{src.label} {title}"] = {"samples": int(ok.sum()), "events": len(ts), "bucket": bucket}
    return note


def _um_pid(global_pid: np.ndarray) -> np.ndarray:
    """The OS process id of nsys's ``globalPid`` (bits 24..47)."""
    return (global_pid.astype(np.int64) >> 24) & 0xFFFFFF


def _running(w: Writer, cat: str, pid: int, name: str, key: str, ts: np.ndarray, v: np.ndarray, t0: int,
             scale: float = 1.0, cap: int = MAX_COUNTER_SAMPLES) -> int:
    """A counter track of the running total of ``v`` at the (sorted) times ``ts``; at most ``cap``
    events, evenly spaced, each the exact total at its time. Returns the events."""
    order = np.argsort(ts, kind="stable")
    ts, tot = ts[order], np.cumsum(v[order].astype(np.float64)) / scale
    if len(ts) > cap:
        pick = np.unique(np.linspace(0, len(ts) - 1, cap).astype(np.int64))
        ts, tot = ts[pick], tot[pick]
    _level(w, cat, pid, name, key, ts, tot, t0)
    return len(ts)


def _level(w: Writer, cat: str, pid: int, name: str, key: str, ts: np.ndarray, v: np.ndarray, t0: int) -> None:
    head = f'{{"ph":"C","cat":"{cat}","pid":{pid},"name":{json.dumps(name)},"ts":'
    for lo in range(0, len(ts), CHUNK):
        w.extend([f'{head}{us(t)},"args":{{"{key}":{x:.12g}}}}}'
                  for t, x in zip((ts[lo:lo + CHUNK] - t0).tolist(), v[lo:lo + CHUNK].tolist())], cat)


def _gpu_process(w: Writer, a: Any, dev: int, named: set[int]) -> int:
    """The "GPU N" process of device ``dev``, named here when no op, gap or metric named it."""
    pid = GPU_PID + int(dev)
    if pid not in named:
        gpus = a.trace.gpus
        names = {int(d): str(n) for d, n in zip(gpus["device_id"].tolist(), gpus["name"].tolist())} if len(gpus) else {}
        meta(w, "process_name", pid, None, {"name": f"GPU {dev}" + (f" ({names[dev]})" if dev in names else "")})
        meta(w, "process_sort_index", pid, None, {"sort_index": int(dev)})
        named.add(pid)
    return pid


MIB = float(1 << 20)


def memory_counters(w: Writer, a: Any, t0: int, named: set[int]) -> dict[str, Any]:
    """Live device memory per device and process (``memory.series``): the report's memory lane."""
    m = a.memory
    if m is None or not getattr(m, "recorded", False) or not len(m.series):
        return {}
    out = {}
    for (dev, pid), g in m.series.groupby(["device_id", "pid"], sort=True):
        gp = _gpu_process(w, a, int(dev), named)
        name = f"Device memory, pid {int(pid)}"
        _level(w, "device_memory", gp, name, "MiB", g["t_ns"].to_numpy(np.int64),
               g["live_bytes"].to_numpy(np.float64) / MIB, t0)
        out[f"GPU {int(dev)} {name}"] = {"events": len(g), "peak_bytes": int(g["live_bytes"].max())}
    return out


UM_KINDS = {11: "to device", 12: "to host"}  # CUPTI copy kinds of unified-memory migrations (HtoD, DtoH)


def um_counters(w: Writer, a: Any, t0: int, named: set[int], cap: int = MAX_COUNTER_SAMPLES) -> dict[str, Any]:
    """Unified memory: bytes migrated so far each way and GPU page faults so far per device; CPU page
    faults so far per host process (``cap`` events a track at most)."""
    t, out = a.trace, {}
    mc = t.memcpy
    if len(mc) and "copy_kind" in mc:
        kinds = mc["copy_kind"].to_numpy(np.int64)
        for code, way in UM_KINDS.items():
            sel = kinds == code
            if not sel.any():
                continue
            for (dev,), rows in group_rows(mc["device_id"].to_numpy(np.int64)[sel]):
                gp = _gpu_process(w, a, int(dev), named)
                idx = np.flatnonzero(sel)[rows]
                name = f"Unified memory migrated {way}"
                n = _running(w, "unified_memory", gp, name, "MiB", mc["start_ns"].to_numpy(np.int64)[idx],
                             mc["bytes"].to_numpy(np.int64)[idx], t0, MIB, cap=cap)
                out[f"GPU {int(dev)} {name}"] = {"events": n, "rows": len(idx)}
    gf = t.um_gpu_faults
    if len(gf):
        for (dev,), rows in group_rows(gf["device_id"].to_numpy(np.int64)):
            gp = _gpu_process(w, a, int(dev), named)
            n = _running(w, "unified_memory", gp, "GPU page faults", "faults", gf["start_ns"].to_numpy(np.int64)[rows],
                         gf["faults"].to_numpy(np.int64)[rows], t0, cap=cap)
            out[f"GPU {int(dev)} GPU page faults"] = {"events": n, "rows": len(rows)}
    cf = t.um_cpu_faults
    if len(cf):
        pids = _um_pid(cf["global_pid"].to_numpy(np.int64))
        for (pid,), rows in group_rows(pids):
            n = _running(w, "unified_memory", int(pid), "CPU page faults", "faults",
                         cf["start_ns"].to_numpy(np.int64)[rows], np.ones(len(rows), np.int64), t0, cap=cap)
            out[f"pid {int(pid)} CPU page faults"] = {"events": n, "rows": len(rows)}
    return out
