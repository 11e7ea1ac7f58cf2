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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsysan.analyses.frames import group_rows, one_key
from nsysan.trace.model import constant_column, is_constant_column

if TYPE_CHECKING:
    from nsysan.analyses.iterations import Iterations
    from nsysan.trace.model import Trace

FLAG = "--cuda-memory-usage=true"
HOST_KINDS = (0, 1)  # ENUM_CUDA_MEM_KIND: pageable, pinned (host memory)
ALLOC, FREE = 0, 1  # ENUM_CUDA_DEV_MEM_EVENT_OPER
_PART = 1 << 18  # rows matched or summed at a time (``_call_times``, ``_differences``)
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


def _signed(b: np.ndarray, op: np.ndarray,
            keys: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """+bytes for an allocation, -bytes for a deallocation, 0 for another operation, in ``b`` (int64, the
    caller's own array: changed in place and returned). A 0-byte free takes the bytes allocated at its
    address; ``keys()`` gives the (device, process, address) arrays of the rows when the export has
    addresses (None: it has not)."""
    free = op == FREE
    zero = free & (b == 0)
    if keys is not None and zero.any():
        dev, pid, addr = keys()
        last: dict[tuple[int, int, int], int] = {}
        alloc = op == ALLOC
        rows = np.flatnonzero(alloc | zero)  # only these read or change what is held at an address
        for i, d, p, ad, o, n in zip(rows.tolist(), dev[rows].tolist(), pid[rows].tolist(), addr[rows].tolist(),
                                     alloc[rows].tolist(), b[rows].tolist()):
            if o:
                last[(d, p, ad)] = n
            else:  # a 0-byte free takes its allocation's bytes; a later one at that address none
                b[i] = last.pop((d, p, ad), 0)
    b[~(free | (op == ALLOC))] = 0
    np.negative(b, out=b, where=free)
    return b


def _live(delta: np.ndarray, in_place: bool = False) -> np.ndarray:
    """Live bytes after each event: the running sum of ``delta``, never below 0 (a free of memory
    not held takes nothing; the loader sets such frees aside, this holds for what it cannot see:
    a 0-byte free of an address freed before). ``in_place``: summed into ``delta`` itself."""
    live = np.cumsum(delta, out=delta if in_place else None)
    if len(live) and int(live.min()) < 0:
        live = live - np.minimum(np.minimum.accumulate(live), 0)
    return live


def _differences(c: np.ndarray) -> None:
    """A running sum undone where it is (``_live(in_place=True)``): each value less the one before,
    a part at a time from the end. Exact: an int64 sum that wraps around is undone by the
    difference that wraps back."""
    for hi in range(len(c), 1, -_PART):
        lo = max(hi - _PART, 1)
        np.subtract(c[lo:hi], c[lo - 1:hi - 1], out=c[lo:hi])  # (the overlap read as before the write)


def _downsample(t: np.ndarray, live: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` (t, live) pairs: per time bin the highest live value (peaks survive; of equal
    ones the first). ``t`` in time order, as the events are: each bin is a run of rows, and its
    highest value is found in the run (no sort of all the rows)."""
    if len(t) <= points:
        return t, live
    edges = np.linspace(t[0], t[-1], points + 1)
    bounds = _runs(t, edges)
    if bounds is None:
        b = np.searchsorted(edges, t, side="right")
        b -= 1
        np.clip(b, 0, points - 1, out=b)
        if not bool((b[1:] >= b[:-1]).all()):  # not in time order: a sort by (bin, -live)
            order = np.lexsort((-live, b))
            first = np.concatenate([[True], b[order][1:] != b[order][:-1]])
            pick = np.sort(order[first])
            return t[pick], live[pick]
        bounds = [0, *(np.flatnonzero(b[1:] != b[:-1]) + 1).tolist(), len(b)]
        del b
    pick = np.fromiter((lo + int(np.argmax(live[lo:hi])) for lo, hi in zip(bounds[:-1], bounds[1:])),
                       dtype=np.int64, count=len(bounds) - 1)
    return t[pick], live[pick]


def _runs(t: np.ndarray, edges: np.ndarray) -> list[int] | None:
    """The rows where each non-empty bin of ``edges`` begins, and ``len(t)``, found by a binary
    search of each edge in ``t`` (no bin number per row), or None (``_downsample`` numbers the rows):
    ``t`` not in time order, or beyond 2^53 where an int64 time and its float differ. A row is in
    bin k from the first time at or past ``edges[k]``, which for an exact integer time is the
    edge's ceiling, so the runs are the rows' ``searchsorted(edges, t, "right") - 1`` bins'."""
    n = len(t)
    if not (-2**53 < int(t[0]) and int(t[-1]) < 2**53) or not bool((t[1:] >= t[:-1]).all()):
        return None
    starts = np.searchsorted(t, np.ceil(edges[1:-1]).astype(np.int64), side="left")
    starts = starts[(starts > 0) & (starts < n)]
    return [0, *np.unique(starts).tolist(), n]


@dataclass
class _Events:
    """The device memory events (host kinds left out) in time order (ties: the table's order), as
    arrays: ``rows`` their rows in the table (None: all, in its order), a column of one value one
    broadcast value (``column``), ``delta`` the signed bytes (``_signed``). ``_growth`` uses them up
    (its call times take the place of ``t``, its live memory that of ``delta``)."""

    ev: pd.DataFrame
    rows: np.ndarray | None
    t: np.ndarray
    own_t: bool = False  # ``t`` is a copy of its own (else a view of the table's column)
    delta: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        op = self.column("operation")
        keys = (lambda: (self.column("device_id"), self.column("pid"), self.column("address"))) \
            if "address" in self.ev else None
        b = self.column("bytes")  # (a copy of its own, taken by rows, or one made here)
        self.delta = _signed(b if self.rows is not None and b.flags.writeable and b.dtype == np.int64
                             else b.astype(np.int64), op, keys)

    def __len__(self) -> int:
        return len(self.t)

    def let_go(self) -> None:
        """The row index let go (``_call_times``, once it has every column it reads): a column
        taken after it is empty."""
        self.rows = np.empty(0, np.int32)

    def column(self, name: str) -> np.ndarray:
        v = self.ev[name].to_numpy()
        if self.rows is None:
            return v
        if is_constant_column(v):  # one value (the loader's broadcast): one value still
            return constant_column(v[0], len(self.rows), v.dtype)
        return v[self.rows]


def _device_events(ev: pd.DataFrame) -> _Events | None:
    """``_Events`` of the usage events ``ev``, None when none is of device memory."""
    if len(ev) == 0:
        return None
    keep = ~np.isin(ev["mem_kind"].to_numpy(), HOST_KINDS)
    rows = None if bool(keep.all()) else np.flatnonzero(keep)
    del keep
    narrow = len(ev) < 2**31  # the index in half the width
    rows = rows.astype(np.int32) if rows is not None and narrow else rows
    t = ev["start_ns"].to_numpy(np.int64)
    t = t if rows is None else t[rows]
    if len(t) == 0:
        return None
    own = rows is not None
    if not bool((t[1:] >= t[:-1]).all()):
        o = np.argsort(t, kind="stable")
        if own:
            t.sort(kind="stable")  # (the same times as t[o], sorted where they are)
        else:
            t = t[o]
        rows = (o.astype(np.int32) if narrow else o) if rows is None else rows[o]
        del o
        own = True
    return _Events(ev, rows, t, own)


def _pairs(e: _Events) -> list[tuple[int, int, np.ndarray | slice]]:
    """(device, process, its rows of ``e``: a slice for all of them) per pair, in (device, process)
    order, each pair's rows in time order."""
    dev, pid = e.column("device_id"), e.column("pid")
    one = one_key(dev, pid)
    if one is not None:
        return [(one[0], one[1], slice(None))]
    return [(d, p, idx) for (d, p), idx in group_rows(dev, pid)]


def memory_use(trace: Trace, iterations: Iterations) -> MemoryUse:
    """GPU memory of ``trace`` (its usage events, GPUs and CUDA calls), its growth counted on the
    steady iterations of ``iterations``: from the usage events when recorded, else the calls."""
    g = trace.gpus
    totals = dict(zip(g["device_id"].tolist(), g["total_memory_bytes"].tolist())) if len(g) else {}
    totals = {d: int(v) if pd.notna(v) and v > 0 else 0 for d, v in totals.items()}  # NULL, <= 0: unknown (0)
    e = _device_events(trace.gpu_memory_usage)
    if e is None:
        return _from_calls(trace.cuda_api, iterations.table)
    pp, series = [], []
    op_all = e.column("operation")
    for dev, pid, idx in _pairs(e):
        d, t, op = e.delta[idx], e.t[idx], op_all[idx]
        alloc, free = op == ALLOC, op == FREE
        sums = {"allocations": int(np.count_nonzero(alloc)), "frees": int(np.count_nonzero(free)),
                "allocated_bytes": int(np.sum(d, where=alloc)), "freed_bytes": int(-np.sum(d, where=free))}
        del alloc, free, op
        live = _live(d, in_place=True)  # (d: a copy of the pair's deltas, or all of them, restored below)
        k = int(np.argmax(live))
        pp.append({"device_id": dev, "pid": pid, **sums, "peak_bytes": int(live[k]), "peak_ns": int(t[k]),
                   "live_end_bytes": int(live[-1]), "device_total_bytes": totals.get(dev, 0)})
        st, sl = _downsample(t, live, LANE_POINTS)
        series.append(pd.DataFrame({"device_id": dev, "pid": pid, "t_ns": st, "live_bytes": sl}))
        del t, live
        if isinstance(idx, slice):  # the running sum written over ``e.delta``: the deltas again
            _differences(d)
        del d
    per = pd.DataFrame(pp, columns=_PP)
    ser = pd.concat(series, ignore_index=True) if series else pd.DataFrame(columns=["device_id", "pid", "t_ns",
                                                                                      "live_bytes"])
    return MemoryUse("usage events", per, ser, _growth(trace.cuda_api, iterations.table, e), [])


def _steady_bounds(table: pd.DataFrame) -> dict[int, np.ndarray]:
    """Per process: the CPU boundaries of its steady iterations (its longest sequence's): each one's
    start, then the end of the last one's CPU range (n + 1 values; iteration i owns [b[i], b[i+1]))."""
    it = table
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


def _call_times(api: pd.DataFrame, e: _Events) -> np.ndarray:
    """Each usage event's CPU time: the start of the call that made it (same process and correlation
    id), else the event's own time (it lies inside that call). Matched ``_PART`` events at a time
    (the temporaries of a part, not of every event) and written over ``e.t`` where the events own
    it; ``e``'s row index is let go (``_Events.let_go``)."""
    from nsysan.analyses.join import call_keys, first_match

    t = e.t
    if len(api) == 0 or "correlation_id" not in e.ev.columns or len(e) == 0:
        return t
    corr, pids = e.column("correlation_id"), e.column("pid")
    e.let_go()
    call_pid, call_corr = api["pid"].to_numpy(), api["correlation_id"].to_numpy()
    start = api["start_ns"].to_numpy(np.int64)
    out = t if e.own_t else np.empty_like(t)
    for lo in range(0, len(t), _PART):
        c, hi = corr[lo:lo + _PART], min(lo + _PART, len(t))
        if c.dtype.kind in "iu":  # (the loader's: no NULL left)
            hit = c > 0
        else:
            ok = pd.notna(c)
            c = np.where(ok, c, -1).astype(np.int64)
            hit = ok & (c > 0)
        idx = first_match(*call_keys(call_pid, call_corr, pids[lo:hi], c))
        hit &= idx >= 0
        out[lo:hi] = np.where(hit, start[np.where(hit, idx, 0)], t[lo:hi])
    return out


def _growth(api: pd.DataFrame, table: pd.DataFrame, e: _Events) -> pd.DataFrame:
    """Per process: its live memory over its steady iterations (``table``'s), from the events ``e``
    placed at their calls' times (``api``: the CUDA API table). Uses ``e`` up: where one process
    made every event, its call times and live memory are worked out in ``e``'s own arrays."""
    rows = []
    cpu_t = None
    pids, devs = e.column("pid"), e.column("device_id")
    one_pid = one[0] if (one := one_key(pids)) is not None else None
    calls = _AllocCalls(api)
    for pid, b in _steady_bounds(table).items():
        n = len(b) - 1
        m = None if one_pid == pid else pids == pid  # None: every event (and no other process counted)
        if n < 2 or (one_pid is not None and one_pid != pid) or (m is not None and not m.any()):
            continue
        cpu_t = _call_times(api, e) if cpu_t is None else cpu_t
        t = cpu_t if m is None else cpu_t[m]
        d = e.delta if m is None else e.delta[m]
        if not bool((t[1:] >= t[:-1]).all()):  # (never the table's own column: that is in time order)
            e.delta, d = e.delta if m is not None else np.empty(0, np.int64), _sort_together(t, d)
        inside = (t >= b[0]) & (t < b[-1])
        allocated, freed = int(np.sum(d, where=inside & (d > 0))), int(-np.sum(d, where=inside & (d < 0)))
        del inside
        at = np.searchsorted(t, b, side="left") - 1  # the events before each boundary
        del t
        live = _live(d, in_place=True)  # over every device of the process, in the order of the calls
        lv = np.where(at >= 0, live[np.clip(at, 0, None)], 0)
        del live, d
        net = np.diff(lv)  # per iteration: what its calls allocated less what they freed
        parts = np.array_split(net, min(4, n))
        devices = [one_dev[0]] if (one_dev := one_key(devs)) is not None else \
            np.unique(devs if m is None else devs[m]).tolist()
        rows.append({"pid": pid, "devices": devices, "steps": n,
                     "growth_per_iteration_bytes": float(lv[-1] - lv[0]) / n, "grew_in": int((net > 0).sum()),
                     "grew_in_quarters": int(sum(int(q.sum()) > 0 for q in parts)), "quarters": len(parts),
                     "live_first_bytes": int(lv[0]), "live_last_bytes": int(lv[-1]),
                     "allocated_bytes": allocated, "freed_bytes": freed,
                     **calls.between(pid, int(b[0]), int(b[-1])), "first_ns": int(b[0]), "last_ns": int(b[-1])})
    return pd.DataFrame(rows, columns=_GROWTH)


def _sort_together(t: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``t`` sorted where it is (stable) and ``d`` in that order, written over the sort's own index
    (a part at a time: each part of the index is read before it is written): the caller lets ``d``
    go, and the sort costs one array, not two."""
    o = np.argsort(t, kind="stable")
    t.sort(kind="stable")  # the same times as t[o]
    if o.dtype != d.dtype:  # (an index narrower than the deltas: a copy)
        return d[o]
    for lo in range(0, len(o), _PART):
        o[lo:lo + _PART] = d[o[lo:lo + _PART]]
    return o


class _AllocCalls:
    """The allocation and free calls of the CUDA API table, found once (a process's are then picked
    from them): the names are matched per category (no string per row), and only the rows of those
    names are read further: a trace without such calls costs two passes over the name codes, not a
    string per call, and 64 processes cost those two passes once, not 64 times."""

    def __init__(self, api: pd.DataFrame) -> None:
        self.api = api
        self.found: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _find(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        from nsysan.analyses.frames import name_in

        if self.found is None:
            api = self.api
            names = api["name"]
            alloc = np.asarray(name_in(names, ALLOC_CALLS))
            free = np.asarray(name_in(names, FREE_CALLS))
            rows = np.flatnonzero(alloc | free)
            self.found = (alloc[rows], free[rows], api["start_ns"].to_numpy(np.int64)[rows],
                          api["pid"].to_numpy()[rows])
        return self.found

    def between(self, pid: int, lo: int, hi: int) -> dict[str, int]:
        """The process's allocation and free calls starting in [lo, hi)."""
        alloc, free, st, pids = self._find()
        if len(st) == 0:
            return {"alloc_calls": 0, "free_calls": 0}
        m = (pids == pid) & (st >= lo) & (st < hi)
        return {"alloc_calls": int(alloc[m].sum()), "free_calls": int(free[m].sum())}


def _from_calls(api: pd.DataFrame, table: pd.DataFrame) -> MemoryUse:
    """No usage events: the allocation and free calls (``api``) per steady window of each process
    (``table``: the iterations)."""
    calls = _AllocCalls(api)
    rows = []
    for pid, b in _steady_bounds(table).items():
        if len(b) < 3:
            continue
        c = calls.between(pid, int(b[0]), int(b[-1]))
        rows.append({"pid": pid, "devices": [], "steps": len(b) - 1, "growth_per_iteration_bytes": float("nan"),
                     "grew_in": 0, "grew_in_quarters": 0, "quarters": 0, "live_first_bytes": 0, "live_last_bytes": 0,
                     "allocated_bytes": 0, "freed_bytes": 0, **c, "first_ns": int(b[0]), "last_ns": int(b[-1])})
    any_calls = len(api) > 0
    return MemoryUse("allocation calls" if any_calls else "none", pd.DataFrame(columns=_PP),
                     pd.DataFrame(columns=["device_id", "pid", "t_ns", "live_bytes"]),
                     pd.DataFrame(rows, columns=_GROWTH), [FLAG])
