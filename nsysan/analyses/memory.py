"""GPU memory over time: live device memory per device and process, its peak, and its growth per iteration.

**From the memory usage events** (``--cuda-memory-usage=true``: ``CUDA_GPU_MEMORY_USAGE_EVENTS``, point
events): each allocation adds its bytes, each deallocation takes them away, per (device, process) in
time order; rows of host kinds (pageable, pinned) are not device memory and are left out. A
deallocation whose bytes the export leaves at 0 takes away the bytes of the allocation at its address
(the latest one before it), when the export has addresses. ``live`` is what the program holds
through the CUDA driver, which for a framework with a caching allocator (PyTorch, JAX, CuPy) is its
pool: memory it keeps but does not use counts as live.

**Without them**, only the allocation and free calls of the CUDA API are known (how many, not how
many bytes): ``source`` = "allocation calls" and ``missing`` names the flag that adds the rest.

**Growth per iteration** (with an iteration model): counted on the CPU's iteration boundaries, where
the allocation calls are. Steady iteration i of a process (its longest sequence's) owns the CPU time
from its start to the next one's start (the last: to the end of its CPU range), and every allocation
or free of the process whose call starts there (the call joined by process and correlation id; an
event without a call: its own time, which lies inside the call that made it) counts towards it.
``live_first``/``live_last`` = live bytes at the first iteration's start and the last one's CPU end,
growth = (live_last - live_first) / steady iterations (= the mean of the iterations' net
allocations), ``grew_in`` = how many iterations allocated more than they freed, ``grew_in_quarters``
= in how many of the steady iterations' quarters (consecutive, min(4, n) of them) live memory rose
(a pool that asks the driver for memory in chunks grows in some iterations only, but in every
quarter), ``allocated_bytes``/``freed_bytes`` and the calls = what the iterations allocated and freed.
Not the GPU's completions: an allocation happens when the CPU queues the step, and when the CPU runs
many iterations ahead, live memory read at the completions lags it (flat once the CPU has finished,
whatever the loop keeps). Memory that grows every iteration and is never freed is a leak
(references kept alive across iterations); memory allocated and freed each iteration is churn
(``alloc-in-loop``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

FLAG = "--cuda-memory-usage=true"
HOST_KINDS = (0, 1)  # ENUM_CUDA_MEM_KIND: pageable, pinned (host memory)
ALLOC, FREE = 0, 1  # ENUM_CUDA_DEV_MEM_EVENT_OPER
LANE_POINTS = 20_000  # at most this many points per (device, process) kept for the timeline lane

ALLOC_CALLS = ("cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cudaMallocPitch", "cuMemAlloc",
               "cuMemAllocManaged", "cuMemAllocAsync", "cuMemCreate", "cudaMalloc3D")
FREE_CALLS = ("cudaFree", "cudaFreeAsync", "cuMemFree", "cuMemFreeAsync", "cuMemRelease")


@dataclass(frozen=True)
class MemoryUse:
    source: str  # "usage events", "allocation calls" or "none"
    per_process: pd.DataFrame  # device_id, pid, allocations, frees, allocated_bytes, freed_bytes, peak_bytes,
    #                            peak_ns, live_end_bytes, device_total_bytes
    series: pd.DataFrame  # device_id, pid, t_ns, live_bytes (at most LANE_POINTS per pair, peaks kept)
    growth: pd.DataFrame  # per (pid): device ids, steps (steady iterations), growth_per_iteration_bytes, grew_in,
    #                       grew_in_quarters, quarters, live_first/last, allocated_bytes, freed_bytes, alloc_calls,
    #                       free_calls (in the iterations' CPU time), first_ns/last_ns (its bounds)
    missing: list[str] = field(default_factory=list)  # flags that would add what this trace lacks

    @property
    def recorded(self) -> bool:
        return self.source == "usage events"


_PP = ["device_id", "pid", "allocations", "frees", "allocated_bytes", "freed_bytes", "peak_bytes", "peak_ns",
       "live_end_bytes", "device_total_bytes"]
_GROWTH = ["pid", "devices", "steps", "growth_per_iteration_bytes", "grew_in", "grew_in_quarters", "quarters",
           "live_first_bytes", "live_last_bytes", "allocated_bytes", "freed_bytes", "alloc_calls", "free_calls",
           "first_ns", "last_ns"]


def _signed(events: pd.DataFrame) -> np.ndarray:
    """+bytes for an allocation, -bytes for a deallocation (0-byte frees: the bytes allocated at their
    address, when the export has addresses)."""
    b = events["bytes"].to_numpy(np.int64)
    op = events["operation"].to_numpy()
    free = op == FREE
    if "address" in events and (free & (b == 0)).any():
        b = b.copy()
        last: dict[tuple[int, int, int], int] = {}
        for i, (d, p, ad, o, n) in enumerate(zip(events["device_id"].tolist(), events["pid"].tolist(),
                                                   events["address"].tolist(), op.tolist(), b.tolist())):
            if o == ALLOC:
                last[(d, p, ad)] = n
            elif o == FREE:  # a 0-byte free takes its allocation's bytes; a later one at that address none
                b[i] = last.pop((d, p, ad), 0) if n == 0 else b[i]
    return np.where(free, -b, np.where(op == ALLOC, b, 0))


def _live(delta: np.ndarray) -> np.ndarray:
    """Live bytes after each event: the running sum of ``delta``, never below 0 (a free of memory
    not held takes nothing; the loader sets such frees aside, this holds for what it cannot see:
    a 0-byte free of an address freed before)."""
    live = np.cumsum(delta)
    if len(live) and int(live.min()) < 0:
        live = live - np.minimum(np.minimum.accumulate(live), 0)
    return live


def _downsample(t: np.ndarray, live: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` (t, live) pairs: per time bin the highest live value (peaks survive)."""
    if len(t) <= points:
        return t, live
    edges = np.linspace(t[0], t[-1], points + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
    order = np.lexsort((-live, b))
    first = np.concatenate([[True], b[order][1:] != b[order][:-1]])
    pick = np.sort(order[first])
    return t[pick], live[pick]


def memory_use(a: Any) -> MemoryUse:
    """GPU memory of ``a`` (an ``Analysis``): from the usage events when recorded, else the calls."""
    tr = a.trace
    ev = tr.gpu_memory_usage
    totals = dict(zip(tr.gpus["device_id"].tolist(), tr.gpus["total_memory_bytes"].tolist())) if len(tr.gpus) else {}
    totals = {d: int(v) if pd.notna(v) and v > 0 else 0 for d, v in totals.items()}  # NULL, <= 0: unknown (0)
    if len(ev):
        ev = ev.loc[~np.isin(ev["mem_kind"].to_numpy(), HOST_KINDS)]
    if len(ev) == 0:
        return _from_calls(a)
    ev = ev.sort_values("start_ns", kind="stable").reset_index(drop=True)
    delta = _signed(ev)
    pp, series = [], []
    for (dev, pid), g in ev.groupby(["device_id", "pid"], sort=True):
        idx = g.index.to_numpy()
        live = _live(delta[idx])
        t = g["start_ns"].to_numpy(np.int64)
        k = int(np.argmax(live))
        op = g["operation"].to_numpy()
        pp.append({"device_id": int(dev), "pid": int(pid), "allocations": int((op == ALLOC).sum()),
                   "frees": int((op == FREE).sum()), "allocated_bytes": int(delta[idx][op == ALLOC].sum()),
                   "freed_bytes": int(-delta[idx][op == FREE].sum()), "peak_bytes": int(live[k]), "peak_ns": int(t[k]),
                   "live_end_bytes": int(live[-1]), "device_total_bytes": totals.get(int(dev), 0)})
        st, sl = _downsample(t, live, LANE_POINTS)
        series.append(pd.DataFrame({"device_id": int(dev), "pid": int(pid), "t_ns": st, "live_bytes": sl}))
    per = pd.DataFrame(pp, columns=_PP)
    ser = pd.concat(series, ignore_index=True) if series else pd.DataFrame(columns=["device_id", "pid", "t_ns",
                                                                                      "live_bytes"])
    return MemoryUse("usage events", per, ser, _growth(a, ev, delta), [])


def _steady_bounds(a: Any) -> dict[int, np.ndarray]:
    """Per process: the CPU boundaries of its steady iterations (its longest sequence's): each one's
    start, then the end of the last one's CPU range (n + 1 values; iteration i owns [b[i], b[i+1]))."""
    it = a.iterations.table
    if len(it) == 0:
        return {}
    st = it.loc[~it["warmup"].to_numpy(dtype=bool)]
    out: dict[int, np.ndarray] = {}
    for (pid, _tid), g in st.groupby(["pid", "tid"], sort=True):
        s = g["start_ns"].to_numpy(np.int64)
        o = np.argsort(s, kind="stable")
        s, cpu_end = s[o], s[o] + g["cpu_ns"].to_numpy(np.int64)[o]
        if int(pid) not in out or len(s) >= len(out[int(pid)]):
            out[int(pid)] = np.append(s, max(int(cpu_end[-1]), int(s[-1]) + 1))
    return out


def _call_times(a: Any, ev: pd.DataFrame) -> np.ndarray:
    """Each usage event's CPU time: the start of the call that made it (same process and correlation
    id), else the event's own time (it lies inside that call)."""
    from nsysan.analyses.join import call_keys, first_match

    t = ev["start_ns"].to_numpy(np.int64)
    api = a.trace.cuda_api
    if len(api) == 0 or "correlation_id" not in ev.columns or len(ev) == 0:
        return t
    corr = ev["correlation_id"].to_numpy()
    ok = pd.notna(corr)
    corr = np.where(ok, corr, -1).astype(np.int64)
    idx = first_match(*call_keys(api["pid"].to_numpy(), api["correlation_id"].to_numpy(),
                                 ev["pid"].to_numpy(), corr))
    hit = ok & (corr > 0) & (idx >= 0)
    return np.where(hit, api["start_ns"].to_numpy(np.int64)[np.where(hit, idx, 0)], t)


def _growth(a: Any, ev: pd.DataFrame, delta: np.ndarray) -> pd.DataFrame:
    rows = []
    api = a.trace.cuda_api
    cpu_t = None
    for pid, b in _steady_bounds(a).items():
        n = len(b) - 1
        m = ev["pid"].to_numpy() == pid
        if n < 2 or not m.any():
            continue
        cpu_t = _call_times(a, ev) if cpu_t is None else cpu_t
        o = np.argsort(cpu_t[m], kind="stable")
        t, d = cpu_t[m][o], delta[m][o]
        live = _live(d)  # over every device of the process, in the order of the calls
        at = np.searchsorted(t, b, side="left") - 1  # the events before each boundary
        lv = np.where(at >= 0, live[np.clip(at, 0, None)], 0)
        net = np.diff(lv)  # per iteration: what its calls allocated less what they freed
        parts = np.array_split(net, min(4, n))
        inside = d[(t >= b[0]) & (t < b[-1])]
        rows.append({"pid": pid, "devices": sorted(set(ev["device_id"].to_numpy()[m].tolist())), "steps": n,
                     "growth_per_iteration_bytes": float(lv[-1] - lv[0]) / n, "grew_in": int((net > 0).sum()),
                     "grew_in_quarters": int(sum(int(q.sum()) > 0 for q in parts)), "quarters": len(parts),
                     "live_first_bytes": int(lv[0]), "live_last_bytes": int(lv[-1]),
                     "allocated_bytes": int(inside[inside > 0].sum()), "freed_bytes": int(-inside[inside < 0].sum()),
                     **_calls_between(api, pid, int(b[0]), int(b[-1])), "first_ns": int(b[0]), "last_ns": int(b[-1])})
    return pd.DataFrame(rows, columns=_GROWTH)


def _calls_between(api: pd.DataFrame, pid: int, lo: int, hi: int) -> dict[str, int]:
    """The process's allocation and free calls starting in [lo, hi). The names are matched per
    category (no string per row), and only the rows of those names are read further: a trace without
    such calls costs two passes over the name codes, not a string per call."""
    from nsysan.analyses.frames import name_in

    names = api["name"]
    alloc = np.asarray(name_in(names, ALLOC_CALLS))
    free = np.asarray(name_in(names, FREE_CALLS))
    rows = np.flatnonzero(alloc | free)
    if len(rows) == 0:
        return {"alloc_calls": 0, "free_calls": 0}
    st = api["start_ns"].to_numpy(np.int64)[rows]
    m = (api["pid"].to_numpy()[rows] == pid) & (st >= lo) & (st < hi)
    return {"alloc_calls": int(alloc[rows][m].sum()), "free_calls": int(free[rows][m].sum())}


def _from_calls(a: Any) -> MemoryUse:
    """No usage events: the allocation and free calls per steady window of each process."""
    api = a.trace.cuda_api
    rows = []
    for pid, b in _steady_bounds(a).items():
        if len(b) < 3:
            continue
        c = _calls_between(api, pid, int(b[0]), int(b[-1]))
        rows.append({"pid": pid, "devices": [], "steps": len(b) - 1, "growth_per_iteration_bytes": float("nan"),
                     "grew_in": 0, "grew_in_quarters": 0, "quarters": 0, "live_first_bytes": 0, "live_last_bytes": 0,
                     "allocated_bytes": 0, "freed_bytes": 0, **c, "first_ns": int(b[0]), "last_ns": int(b[-1])})
    any_calls = len(api) > 0
    return MemoryUse("allocation calls" if any_calls else "none", pd.DataFrame(columns=_PP),
                     pd.DataFrame(columns=["device_id", "pid", "t_ns", "live_bytes"]),
                     pd.DataFrame(rows, columns=_GROWTH), [FLAG])
