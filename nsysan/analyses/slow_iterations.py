"""Slow iterations in the middle of a run: which, how much they cost, and what differs inside them.

**Which.** Per sequence (the iterations of one thread, ``iterations``), the steady iterations (warm-up
is only the leading ones, ``warmup-outlier``'s) whose period (time since the previous completion: what
the run waited for this iteration) exceeds ``factor`` (2) x the sequence's median steady period. The
first iteration of a sequence has no period and is never one. Each one's **cost** is its period
above that median; periods add up to the span of the completions, so costs never overlap.

**What differs inside them.** Each slow iteration's interval (previous completion, completion] is
compared with the same measure over the sequence's typical steady iterations (the others; median):

* ``gpu_busy_ns``: time the iteration's devices ran any GPU op (more GPU work: an evaluation step);
* ``kernels``: kernels launched in the interval by the process, and ``new_kernels``: kernel names no
  typical iteration launched (autotuning tries candidates, a recompiled step brings new kernels);
* ``alloc_calls``: allocation calls (``cudaMalloc``, ``cuMemAlloc``...) in the interval;
* ``setup_calls``: library and module set-up calls (``cuModuleLoad*``, ``cuLibraryLoad*``, handle
  creation: ``cublasCreate``, ``cudnnCreate``, stream and event creation), and ``setup_ns`` their time;
* ``io_ns``: OS runtime time in file and pipe I/O calls (``write``, ``fsync``, ``open``...: a
  checkpoint, logging) on the process's threads;
* ``wait_ns``: OS runtime time of the iteration's own thread blocked waiting for another thread or
  process (``sem_wait``, ``pthread_cond_wait``, ``futex``, ``poll``...: a queue of batches a data
  loader's workers fill, a lock), with ``wait_call`` the call that holds most of it;
* ``extra_ranges``: the program's own NVTX ranges (not the iteration range, not library ranges) that
  start in the interval and in no typical iteration (``checkpoint``, ``evaluate``);
* ``untraced_ns``: time of the iteration's thread inside the interval covered by no CUDA call, no OS
  runtime call and no GPU work of its process: CPU work nothing recorded (garbage collection,
  Python), less the typical iteration's.

``cause`` names the largest difference: ``new kernels`` (new kernels or set-up calls: first use of code,
autotuning or recompilation), ``allocation``, ``file I/O``, ``waiting`` (blocked on another thread or
process: input not ready), ``extra work`` (extra NVTX ranges, or more GPU work), ``untraced CPU``.
``periodic`` is the interval between slow iterations when it is regular (every N).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses import libranges
from nsysan.analyses.frames import category_mask, name_in
from nsysan.analyses.iterations import steady_periods

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Busy
    from nsysan.analyses.iterations import Iterations
    from nsysan.trace.model import Trace

FACTOR = 2.0
MIN_STEADY = 5  # a sequence needs this many steady periods for its median to mean anything

ALLOC_APIS = ("cudaMalloc", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc", "cudaMallocAsync",
              "cudaMallocPitch", "cuMemAlloc", "cuMemAllocHost", "cuMemHostAlloc", "cuMemAllocManaged",
              "cuMemAllocAsync", "cuMemCreate")
SETUP_PREFIXES = ("cuModuleLoad", "cuLibraryLoad", "cudaStreamCreate", "cudaEventCreate", "cublasCreate",
                  "cublasLtCreate", "cudnnCreate", "cuModuleGetFunction", "cuLibraryGetKernel", "cudaFuncGetAttributes",
                  "cuCtxCreate", "cudaGraphInstantiate", "cuGraphInstantiate", "nvrtcCompileProgram")
IO_CALLS = ("write", "pwrite", "pwrite64", "writev", "fsync", "fdatasync", "open", "open64", "openat", "openat64",
            "close", "read", "pread", "pread64", "readv", "fwrite", "fread", "fflush", "rename", "unlink", "ftruncate",
            "msync", "sync_file_range")
WAIT_CALLS = ("sem_wait", "sem_timedwait", "sem_clockwait", "pthread_cond_wait", "pthread_cond_timedwait",
              "pthread_cond_clockwait", "pthread_join", "pthread_mutex_lock", "pthread_rwlock_rdlock",
              "pthread_rwlock_wrlock", "futex", "poll", "ppoll", "select", "pselect", "pselect6", "epoll_wait",
              "epoll_pwait", "waitpid", "wait4", "waitid", "recv", "recvfrom", "recvmsg", "msgrcv")
CAUSES = ("new kernels", "allocation", "file I/O", "waiting", "extra work", "untraced CPU")


@dataclass(frozen=True)
class SlowIterations:
    factor: float
    table: pd.DataFrame  # one row per slow iteration (columns: see ``slow_iterations``)
    typical: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)  # per sequence: median measures
    steady_span_ns: int = 0  # the sum of the steady periods of the sequences judged
    periodic: dict[tuple[int, int], int] = field(default_factory=dict)  # sequence -> every N iterations

    @property
    def cost_ns(self) -> int:
        return int(self.table["cost_ns"].sum()) if len(self.table) else 0


def headline(s: SlowIterations | None, fired: bool) -> tuple[int, int, float] | None:
    """(slow iterations, their cost, its share of the steady iterations' time) of ``s`` (the analysis'
    ``slow_iterations``) when the ``slow-iterations`` rule fired (``fired``: they matter), else None: the
    headline names them beside the typical period."""
    if s is None or not s.steady_span_ns or not fired:
        return None
    return len(s.table), s.cost_ns, s.cost_ns / s.steady_span_ns


def headline_of(s: SlowIterations | None, findings: Iterable[Any]) -> tuple[int, int, float] | None:
    """``headline``, the rule's firing read from ``findings`` (the analysis' findings)."""
    return headline(s, any(f.rule == "slow-iterations" for f in findings))


_COLUMNS = ["index", "pid", "tid", "start_ns", "end_ns", "period_ns", "median_ns", "cost_ns", "gpu_busy_ns",
            "kernels", "new_kernels", "alloc_calls", "setup_calls", "setup_ns", "io_ns", "wait_ns", "wait_call",
            "extra_ranges", "untraced_ns", "cause"]


def _covered(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    if len(starts) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    ms, me = iv.merge(starts, ends)
    return iv.covered_between(ms, me, lo, hi)


def _in_span(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Which intervals (s, e) can cover time inside the windows (lo, hi]: those that reach past the
    first window's start and begin before the last window's end. The others add as much to every
    window's covered-before at both ends (or nothing), so leaving them out of the union changes no
    window's covered time, and the merge sorts fewer."""
    if len(lo) == 0:
        return np.zeros(len(s), dtype=bool)
    return (e > lo.min()) & (s < hi.max())


def _sorted_starts(df: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    return np.sort(df["start_ns"].to_numpy(np.int64)[mask])


def _labels(values: Any) -> tuple[np.ndarray, list[str]]:
    """An integer label per row and each label's text, the text being ``str`` of the value as
    ``astype(str)`` writes it (a categorical's missing value: "nan"); equal texts share one label.
    Decided once per distinct value: no string per row."""
    arr = values.array if isinstance(values, pd.Series) else values
    if isinstance(arr, pd.Categorical):
        texts = [str(c) for c in arr.categories] + ["nan"]
        codes = np.asarray(arr.codes).astype(np.int64)
        codes[codes < 0] = len(texts) - 1
    else:
        codes, uniq = pd.factorize(np.asarray(arr, dtype=object), use_na_sentinel=False)
        texts = [str(u) for u in uniq]
    canon: dict[str, int] = {}
    remap = np.array([canon.setdefault(t, len(canon)) for t in texts], dtype=np.int64)
    return (remap[codes] if len(codes) else np.zeros(0, dtype=np.int64)), list(canon)


def _new_names(codes: np.ndarray, texts: list[str], left: np.ndarray, right: np.ndarray,
               slow: np.ndarray) -> list[list[str]]:
    """Per interval i (rows ``left[i]:right[i]`` of the time-sorted ``codes``): for a slow one, the
    sorted texts of its rows that no typical (not slow) interval's rows hold; [] for the others."""
    out: list[list[str]] = [[] for _ in range(len(left))]
    if len(codes) == 0 or not slow.any():
        return out
    typ = np.flatnonzero(~slow & (right > left))
    depth = np.zeros(len(codes) + 1, dtype=np.int64)  # how many typical intervals hold each row
    np.add.at(depth, left[typ], 1)
    np.add.at(depth, right[typ], -1)
    seen = np.zeros(len(texts), dtype=bool)
    seen[codes[np.cumsum(depth[:-1]) > 0]] = True
    new = ~seen[codes]
    before = np.concatenate([[0], np.cumsum(new, dtype=np.int64)])
    for i in np.flatnonzero(slow & (right > left)):
        if before[right[i]] > before[left[i]]:
            c = codes[left[i]:right[i]][new[left[i]:right[i]]]
            out[i] = sorted(texts[k] for k in np.unique(c).tolist())
    return out


def slow_iterations(trace: Trace, its: Iterations, ops: pd.DataFrame, busy: Busy | None,
                    factor: float = FACTOR) -> SlowIterations:
    """The slow steady iterations of the iteration model ``its``, measured in the trace's calls and
    ranges, its GPU operations ``ops`` and their merged busy intervals ``busy`` (``gpu.Busy``)."""
    it = its.table
    empty = SlowIterations(factor, pd.DataFrame(columns=_COLUMNS))
    if len(it) == 0 or "period_ns" not in it:
        return empty
    st = steady_periods(it)
    rows: list[pd.DataFrame] = []
    typical: dict[tuple[int, int], dict[str, float]] = {}
    periodic: dict[tuple[int, int], int] = {}
    span = 0
    for (pid, tid), g in st.groupby(["pid", "tid"], sort=True):
        per = g["period_ns"].to_numpy(np.int64)
        if len(per) < MIN_STEADY:
            continue
        span += int(per.sum())
        med = float(np.median(per))
        slow = per > factor * med
        if not slow.any():
            continue
        lo, hi = g["lo_ns"].to_numpy(np.int64), g["hi_ns"].to_numpy(np.int64)
        m = _measures(trace, its, ops, busy, int(pid), int(tid), lo, hi, slow)
        typ = {k: float(np.median(v[~slow])) if (~slow).any() else 0.0 for k, v in m.items()
               if k not in ("new_kernels", "extra_ranges", "wait_call")}
        typical[(int(pid), int(tid))] = {"period_ns": med, **typ}
        idx = g["index"].to_numpy()[slow]
        if len(idx) >= 3:
            d = np.diff(np.sort(idx))
            if len(set(d.tolist())) == 1:
                periodic[(int(pid), int(tid))] = int(d[0])
        df = pd.DataFrame({
            "index": idx, "pid": int(pid), "tid": int(tid), "start_ns": lo[slow], "end_ns": hi[slow],
            "period_ns": per[slow], "median_ns": round(med),
            "cost_ns": (per[slow] - round(med)).astype(np.int64),
            "gpu_busy_ns": m["gpu_busy_ns"][slow], "kernels": m["kernels"][slow],
            "new_kernels": [m["new_kernels"][i] for i in np.flatnonzero(slow)],
            "alloc_calls": m["alloc_calls"][slow], "setup_calls": m["setup_calls"][slow],
            "setup_ns": m["setup_ns"][slow], "io_ns": m["io_ns"][slow], "wait_ns": m["wait_ns"][slow],
            "wait_call": [m["wait_call"][i] for i in np.flatnonzero(slow)],
            "extra_ranges": [m["extra_ranges"][i] for i in np.flatnonzero(slow)],
            "untraced_ns": m["untraced_ns"][slow]})
        df["cause"] = [_cause(r, typical[(int(pid), int(tid))]) for r in df.itertuples(index=False)]
        first = _first_in_enclosing(trace.nvtx, its, int(pid), int(tid), g["start_ns"].to_numpy(np.int64)[slow])
        if first is not None:
            df.loc[first, "cause"] = f"start of each '{enclosing_range(its)}'"
        rows.append(df)
    if not rows:
        return SlowIterations(factor, empty.table, typical, span, periodic)
    return SlowIterations(factor, pd.concat(rows, ignore_index=True)[_COLUMNS], typical, span, periodic)


def _measures(tr: Trace, its: Iterations, ops: pd.DataFrame, busy_iv: Busy | None, pid: int, tid: int,
              lo: np.ndarray, hi: np.ndarray, slow: np.ndarray) -> dict[str, Any]:
    """Per interval (lo, hi] of one sequence: the measures the module doc lists. Vectorised: the
    names through their categories' codes, the busy intervals the analysis merged (``busy_iv``)."""
    n = len(lo)
    op_pid = ops["pid"].to_numpy()
    of_pid = op_pid == pid
    if busy_iv is not None:
        devs = sorted(d for (p, d) in busy_iv.per_pid_dev if p == pid)
    else:
        devs = np.unique(ops["device_id"].to_numpy()[of_pid]).tolist()
    busy = np.zeros(n, dtype=np.int64)
    gpu_s: list[np.ndarray] = []
    gpu_e: list[np.ndarray] = []
    for d in devs:
        if busy_iv is not None and d in busy_iv.per_dev:
            ms, me = busy_iv.per_dev[d]["all"]
            busy += iv.covered_between(ms, me, lo, hi)
            ps, pe = busy_iv.per_pid_dev[(pid, d)]["all"]
            gpu_s.append(np.asarray(ps, dtype=np.int64))
            gpu_e.append(np.asarray(pe, dtype=np.int64))
        else:
            dm = ops["device_id"].to_numpy() == d
            busy += _covered(ops["start_ns"].to_numpy(np.int64)[dm], ops["end_ns"].to_numpy(np.int64)[dm], lo, hi)
    if busy_iv is None or not devs:
        gpu_s = [ops["start_ns"].to_numpy(np.int64)[of_pid]]
        gpu_e = [ops["end_ns"].to_numpy(np.int64)[of_pid]]
    # kernels launched by the process in each interval (by their launching call's start)
    krows = np.flatnonzero(of_pid & np.asarray(name_in(ops["op"], ("kernel",)))) if len(ops) else np.zeros(0, np.int64)
    kt = ops["api_start_ns"].to_numpy(np.int64)[krows] if len(krows) else np.zeros(0, dtype=np.int64)
    ko = np.argsort(kt, kind="stable")
    kt = kt[ko]
    kcodes, ktexts = _labels(ops["name"].iloc[krows[ko]]) if len(krows) else (np.zeros(0, np.int64), [])
    kernels = iv.sums_between(kt, lo, hi)
    left = np.searchsorted(kt, lo, side="right")
    right = np.searchsorted(kt, hi, side="right")
    new_kernels = _new_names(kcodes, ktexts, left, right, slow)
    api = tr.cuda_api
    apid = api["pid"].to_numpy() == pid
    anames = api["name"]
    alloc = _sorted_starts(api, apid & np.asarray(name_in(anames, ALLOC_APIS)))
    sm = apid & np.asarray(category_mask(anames, lambda x: x.startswith(SETUP_PREFIXES)))
    setup = _sorted_starts(api, sm)
    setup_ns = _covered(api["start_ns"].to_numpy(np.int64)[sm], api["end_ns"].to_numpy(np.int64)[sm], lo, hi)
    osrt = tr.osrt
    opid = osrt["pid"].to_numpy() == pid
    io = opid & np.asarray(name_in(osrt["name"], IO_CALLS))
    io_s, io_e = osrt["start_ns"].to_numpy(np.int64)[io], osrt["end_ns"].to_numpy(np.int64)[io]
    io_ns = _covered(io_s, io_e, lo, hi)
    wait = opid & (osrt["tid"].to_numpy() == tid) & np.asarray(name_in(osrt["name"], WAIT_CALLS))
    wait_s, wait_e = osrt["start_ns"].to_numpy(np.int64)[wait], osrt["end_ns"].to_numpy(np.int64)[wait]
    wait_ns = _covered(wait_s, wait_e, lo, hi)
    wait_call = _top_call(osrt["name"].to_numpy()[wait], wait_s, wait_e, lo, hi, slow)
    # the thread's traced time: its CUDA and OS calls, and its process's GPU work (only what reaches
    # into the sequence's span counts: the rest adds as much to both ends of every window)
    th_api = apid & (api["tid"].to_numpy() == tid)
    th_os = opid & (osrt["tid"].to_numpy() == tid)
    parts = [(api["start_ns"].to_numpy(np.int64)[th_api], api["end_ns"].to_numpy(np.int64)[th_api]),
             (osrt["start_ns"].to_numpy(np.int64)[th_os], osrt["end_ns"].to_numpy(np.int64)[th_os]),
             *zip(gpu_s, gpu_e)]
    keep = [_in_span(ps, pe, lo, hi) for ps, pe in parts]
    s = np.concatenate([ps[k] for (ps, _), k in zip(parts, keep)])
    e = np.concatenate([pe[k] for (_, pe), k in zip(parts, keep)])
    untraced = (hi - lo) - _covered(s, e, lo, hi)
    return {"gpu_busy_ns": busy, "kernels": kernels, "new_kernels": new_kernels,
            "alloc_calls": iv.sums_between(alloc, lo, hi), "setup_calls": iv.sums_between(setup, lo, hi),
            "setup_ns": setup_ns,
            "io_ns": io_ns, "wait_ns": wait_ns, "wait_call": wait_call,
            "extra_ranges": _extra_ranges(tr.nvtx, its.range_name, pid, lo, hi, slow), "untraced_ns": untraced}


def _top_call(names: np.ndarray, s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              slow: np.ndarray) -> list[str]:
    """Per interval, for the slow ones: the call name holding the most of the calls' time in it."""
    out = [""] * len(lo)
    if len(s) == 0:
        return out
    order = np.argsort(s, kind="stable")
    s, e, names = s[order], e[order], names[order]
    for i in np.flatnonzero(slow).tolist():
        a, b = np.searchsorted(s, lo[i], side="left"), np.searchsorted(s, hi[i], side="right")
        if b <= a:
            continue
        d = np.minimum(e[a:b], hi[i]) - s[a:b]
        per: dict[str, int] = {}
        for n, x in zip(names[a:b].tolist(), d.tolist()):
            per[str(n)] = per.get(str(n), 0) + int(x)
        out[i] = max(per, key=lambda k: per[k])
    return out


def _extra_ranges(nv: pd.DataFrame, rng: str | None, pid: int, lo: np.ndarray, hi: np.ndarray,
                  slow: np.ndarray) -> list[list[str]]:
    """Per interval: the names of the program's own NVTX ranges (``nv``: the trace's) of the process
    starting in it that no typical interval holds (library ranges and the iteration range ``rng`` left out)."""
    out: list[list[str]] = [[] for _ in range(len(lo))]
    if len(nv) == 0:
        return out
    m = (nv["pid"].to_numpy() == pid) & nv["end_ns"].notna().to_numpy()
    sub = nv.loc[m]
    if len(sub) == 0:
        return out
    names = sub["name"].astype(str)
    own = ~libranges.library_mask(names, sub["domain"])
    keep = own & (names.to_numpy() != rng) & (sub["text"].astype(str).to_numpy() != rng)
    t = sub["start_ns"].to_numpy(np.int64)[keep]
    nm = names.to_numpy()[keep]
    o = np.argsort(t, kind="stable")
    t, nm = t[o], nm[o]
    left, right = np.searchsorted(t, lo, side="right"), np.searchsorted(t, hi, side="right")
    codes, texts = _labels(nm)
    return _new_names(codes, texts, left, right, slow)


def enclosing_range(its: Iterations) -> str | None:
    """The program's range that encloses the iterations (a request around its tokens), if any."""
    for lv in its.levels:
        if str(lv.get("role", "")).startswith("encloses"):
            return str(lv["name"])
    return None


def _first_in_enclosing(nv: pd.DataFrame, iters: Iterations, pid: int, tid: int,
                        starts: np.ndarray) -> np.ndarray | None:
    """Which of the iterations starting at ``starts`` are the first iteration inside an instance of the
    enclosing range on their thread (the per-request work before a request's first token); ``nv``:
    the trace's NVTX ranges."""
    name = enclosing_range(iters)
    if name is None or len(starts) == 0:
        return None
    m = ((nv["pid"].to_numpy() == pid) & (nv["tid"].to_numpy() == tid) & nv["end_ns"].notna().to_numpy()
         & (nv["name"].astype(str).to_numpy() == name))
    enc = nv.loc[m]
    if len(enc) == 0:
        return None
    es = np.sort(enc["start_ns"].to_numpy(np.int64))
    it = iters.table
    mine = it.loc[(it["pid"].to_numpy() == pid) & (it["tid"].to_numpy() == tid)]
    its = np.sort(mine["start_ns"].to_numpy(np.int64))
    # the first iteration after each enclosing instance's start
    firsts = set(its[np.clip(np.searchsorted(its, es, side="left"), 0, len(its) - 1)].tolist())
    return np.array([s in firsts for s in starts.tolist()], dtype=bool)


def _cause(r: Any, typ: dict[str, float]) -> str:
    """The largest difference between a slow iteration and the typical one, in time where it can be."""
    if r.new_kernels or r.setup_calls > typ.get("setup_calls", 0):
        return "new kernels"
    excess = {
        "allocation": 1.0 if r.alloc_calls > typ.get("alloc_calls", 0) + 0.5 else 0.0,
        "file I/O": max(0.0, r.io_ns - typ.get("io_ns", 0.0)),
        "waiting": max(0.0, r.wait_ns - typ.get("wait_ns", 0.0)),
        "extra work": max(0.0, r.gpu_busy_ns - typ.get("gpu_busy_ns", 0.0)) + (1.0 if r.extra_ranges else 0.0),
        "untraced CPU": max(0.0, r.untraced_ns - typ.get("untraced_ns", 0.0)),
    }
    if r.extra_ranges:
        return "extra work"
    best = max(excess, key=lambda k: excess[k])
    return best if excess[best] > 0 else "untraced CPU"
