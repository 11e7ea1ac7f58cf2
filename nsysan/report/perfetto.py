"""The timeline as Chrome trace-event JSON, for the Perfetto UI (ui.perfetto.dev) and chrome://tracing.

The "JSON Object Format" of the Trace Event Format: ``{"traceEvents": [...], "displayTimeUnit": "ns",
"otherData": {...}}``. Times are microseconds (``ts``, ``dur``), written as exact decimals of the
trace's integer nanoseconds (``12.345``) from ``t0_ns`` (``otherData``: the capture start, or the
earliest event when one starts before it), so a reader that rounds ``ts * 1000`` gets the nanoseconds
back. What is in it, all of it (nothing is capped):

* a process "GPU N" per device (pid ``GPU_PID + N``): a thread per (process, stream) with the GPU
  ops (``cat`` kernel, memcpy, memset, graph: CUDA graph launches traced whole), and a thread "GPU N
  idle" with the idle gaps (``cat`` gap; args ``cause``, ``activity``: what the submitting thread was
  doing, the next API call and op, and ``findings``: the rules whose estimated saving comes from
  that gap);
* per host process (its pid) and thread (its tid, named from the trace's ThreadNames), the NVTX
  ranges (``cat`` nvtx) and the CUDA API calls (``cat`` cuda_api) together, so calls nest under the
  ranges they ran in; NVTX marks as thread-scoped instant events (``cat`` nvtx_mark);
* each finding as a global instant event (``cat`` finding) at the start of the time it claims, with
  its rule, severity, estimated saving and message;
* with GPU metrics (``nsys profile --gpu-metrics-devices``), a counter track (``ph`` C, ``cat``
  gpu_metric, arg ``%``) per device and metric in the "GPU N" process: SMs active, tensor active,
  DRAM read, DRAM write, in % of peak, from the samples the loader already read (a sample without
  the metric is left out). Above ``MAX_COUNTER_SAMPLES`` samples a track, consecutive samples are
  averaged in buckets of ``ceil(n / MAX_COUNTER_SAMPLES)`` (at the first sample's time; the last
  bucket may be smaller); ``otherData.gpu_metrics`` says, per track, the samples and the bucket.
  Traces without metrics give the same bytes as before.
* with GPU memory usage events (``--cuda-memory-usage=true``), a counter track per device and process
  in the "GPU N" process (``cat`` device_memory, arg ``MiB``): live device memory, the series the
  report's memory lane draws (at most ``LANE_POINTS`` points a pair, its peaks kept);
* with unified memory, counter tracks in the "GPU N" process (``cat`` unified_memory): the bytes
  migrated so far to and from the device (``MiB``, from the unified-memory copies), the GPU page
  faults so far (``faults``); and per host process its CPU page faults so far. A track above
  ``MAX_COUNTER_SAMPLES`` events keeps that many, evenly spaced (the running total is exact at each).

``X`` events on one thread must nest (a child inside its parent) for the viewers. Events that
overlap without nesting (NVTX start/end ranges, or any other overlap in a trace) go on an extra
thread of the same process, named after the first with ``(overlap K)``, so every thread of the file
holds properly nested events only.

Written as a stream, one event per line, through the atomic writer (never half a file, never over
an input, never over an existing file without ``force``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from nsysan.analyses.frames import group_rows
from nsysan.units import fmt_ns

GPU_PID = 1 << 30  # "GPU N" is process GPU_PID + N: far above any OS process id (at most 2**22 on Linux)
IDLE_TID = 0  # the "GPU N idle" thread; streams get 1, 2, ... in order
OVERLAP_TID = 1 << 24  # extra threads for overlapping events: above any OS thread id of the trace's 24-bit field
CHUNK = 20_000  # events per write
MAX_COUNTER_SAMPLES = 200_000  # counter events per metric track at most (above: bucket averages)
COUNTERS = (("sm_active", "SMs active"), ("tensor_active", "Tensor active"), ("dram_read", "DRAM read"),
            ("dram_write", "DRAM write"))
METRIC_PID = GPU_PID + (1 << 20)  # a metric source not mapped to a GPU: process METRIC_PID + its index


def _us(ns: int) -> str:
    """Non-negative integer nanoseconds as exact decimal microseconds."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def nest_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For events sorted by (start ascending, end descending): a lane per event such that the events
    of each lane nest properly (each one either inside the previous open one or after it ends). Lane
    0 takes all it can; an event overlapping an open one without fitting inside goes to the first
    lane where it fits, or a new one."""
    n = len(start)
    out = np.zeros(n, dtype=np.int64)
    if n < 2:
        return out
    open_end = np.maximum.accumulate(end)
    if bool((start[1:] >= open_end[:-1]).all()):  # nothing overlaps: the usual case, no loop
        return out
    stacks: list[list[int]] = []
    for i, (a, b) in enumerate(zip(start.tolist(), end.tolist())):
        for k, st in enumerate(stacks):
            while st and st[-1] <= a:
                st.pop()
            if not st or b <= st[-1]:
                st.append(b)
                out[i] = k
                break
        else:
            stacks.append([b])
            out[i] = len(stacks) - 1
    return out


class _Writer:
    """Comma-separated events, one per line, written in chunks; counts per category."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.first = True
        self.buf: list[str] = []
        self.counts: dict[str, int] = {}

    def add(self, line: str, cat: str | None = None) -> None:
        self.buf.append(line)
        if cat is not None:
            self.counts[cat] = self.counts.get(cat, 0) + 1
        if len(self.buf) >= CHUNK:
            self.flush()

    def extend(self, lines: list[str], cat: str) -> None:
        self.buf += lines
        self.counts[cat] = self.counts.get(cat, 0) + len(lines)
        if len(self.buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            text = ",\n".join(self.buf)
            self.f.write(((",\n" if not self.first else "") + text).encode("utf-8", "backslashreplace"))
            self.first = False
            self.buf = []


def _meta(w: _Writer, what: str, pid: int, tid: int | None, args: dict[str, Any]) -> None:
    ev: dict[str, Any] = {"ph": "M", "name": what, "pid": pid, "args": args}
    if tid is not None:
        ev["tid"] = tid
    w.add(json.dumps(ev, separators=(",", ":")), "metadata")


def _names(values: pd.Series, rows: np.ndarray) -> list[str]:
    """JSON string literals of ``values[rows]``, each distinct value encoded once."""
    arr = values.array
    if isinstance(arr, pd.Categorical):
        cats = [json.dumps(str(c)) for c in arr.categories] + ['""']
        codes = np.asarray(arr.codes)[rows]
        return [cats[c] for c in codes.tolist()]
    cache: dict[Any, str] = {}
    out = []
    for v in arr.take(rows):
        key = None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v
        s = cache.get(key)
        if s is None:
            s = cache[key] = json.dumps("" if key is None else str(key))
        out.append(s)
    return out


def _emit(w: _Writer, cat: str, pid: int, tids: np.ndarray, s: np.ndarray, e: np.ndarray,
          names: Callable[[np.ndarray], list[str]], args: Callable[[np.ndarray], list[str]]) -> None:
    """Complete events, CHUNK at a time (a thread with millions of calls is never held as text at
    once): ``names(idx)`` / ``args(idx)`` give the JSON texts of the events at positions ``idx``."""
    head = f'{{"ph":"X","cat":"{cat}","pid":{pid},"tid":'
    for lo in range(0, len(s), CHUNK):
        idx = np.arange(lo, min(lo + CHUNK, len(s)))
        w.extend([f'{head}{t},"ts":{_us(a)},"dur":{_us(b - a)},"name":{n},"args":{g}}}'
                  for t, a, b, n, g in zip(tids[idx].tolist(), s[idx].tolist(), e[idx].tolist(), names(idx), args(idx))],
                 cat)


class _Tracks:
    """Thread ids and names within one process: real threads keep their tid, extra threads for
    overlapping events get fresh ids above OVERLAP_TID."""

    def __init__(self, w: _Writer, pid: int) -> None:
        self.w, self.pid = w, pid
        self.next_extra = OVERLAP_TID
        self.named: set[int] = set()

    def name(self, tid: int, name: str, sort_index: int) -> None:
        if tid in self.named:
            return
        self.named.add(tid)
        _meta(self.w, "thread_name", self.pid, tid, {"name": name})
        _meta(self.w, "thread_sort_index", self.pid, tid, {"sort_index": sort_index})

    def lanes(self, tid: int, name: str, sort_index: int, lane: np.ndarray) -> np.ndarray:
        """The thread id of each event given its lane (0: ``tid`` itself); names the threads used."""
        self.name(tid, name, sort_index)
        n_lanes = int(lane.max()) + 1 if len(lane) else 1
        ids = [tid]
        for k in range(1, n_lanes):
            extra = self.next_extra
            self.next_extra += 1
            self.name(extra, f"{name} (overlap {k})", sort_index)
            ids.append(extra)
        return np.asarray(ids, dtype=np.int64)[lane]


def _sorted(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Order by start ascending, end descending (a parent before the events inside it)."""
    return np.lexsort((-e, s))


def _claimed_by(a: Any, gs: np.ndarray, ge: np.ndarray) -> list[list[str]]:
    """Per gap, the rules whose findings claim time inside it (their saving comes from it)."""
    out: list[list[str]] = [[] for _ in range(len(gs))]
    for f in a.findings:
        if f.claims is None or int(f.impact_ns) <= 0:
            continue
        cs, ce = (np.asarray(x, dtype=np.int64) for x in f.claims)
        if len(cs) == 0:
            continue
        order = np.argsort(cs, kind="stable")
        cs, ce = cs[order], np.maximum.accumulate(ce[order])
        # the first claim ending after the gap starts, and whether it starts before the gap ends
        i = np.searchsorted(ce, gs, side="right")
        hit = np.flatnonzero((i < len(cs)) & (cs[np.minimum(i, len(cs) - 1)] < ge))
        for j in hit.tolist():
            out[j].append(f.rule)
    return out


def _finding_time(f: Any) -> int:
    w = f.window or {}
    lo, hi = int(w.get("start_ns", 0)), int(w.get("end_ns", 0))
    if f.claims is not None and len(f.claims[0]):
        cs, ce = (np.asarray(x, dtype=np.int64) for x in f.claims)
        inside = cs[(ce > lo) & (cs < hi)] if hi > lo else cs
        if len(inside):
            return max(int(inside.min()), lo)
    starts = [int(e["start_ns"]) for e in f.evidence if isinstance(e.get("start_ns"), (int, np.integer))]
    return min(starts) if starts else lo


def _metric_sources(a: Any) -> list[Any]:
    """The GPU metric sources (``trace.metrics.Source``) with samples; [] without GPU metrics."""
    g = a.gpu_metrics
    return [s for s in (getattr(g, "sources", None) or []) if len(s.ts)]


def _origin(a: Any) -> int:
    t0 = int(a.capture.start_ns)
    for df in (a.ops, a.gaps, a.nvtx_ranges, a.trace.cuda_api, a.trace.nvtx):
        if len(df):
            t0 = min(t0, int(df["start_ns"].min()))
    for src in _metric_sources(a):
        t0 = min(t0, int(src.ts[0]))
    m = a.memory
    if m is not None and getattr(m, "recorded", False) and len(m.series):
        t0 = min(t0, int(m.series["t_ns"].min()))
    for df in (a.trace.um_gpu_faults, a.trace.um_cpu_faults):
        if len(df):
            t0 = min(t0, int(df["start_ns"].min()))
    for f in a.findings:
        t0 = min(t0, _finding_time(f))
    return t0


def _gpu(w: _Writer, a: Any, t0: int) -> None:
    ops, gaps, gpus = a.ops, a.gaps, a.trace.gpus
    devices = sorted({*ops["device_id"].astype("int64").tolist(), *gaps["device_id"].astype("int64").tolist()})
    gpu_name = {int(d): str(n) for d, n in zip(gpus["device_id"].tolist(), gpus["name"].tolist())} if len(gpus) else {}
    tracks: dict[int, _Tracks] = {}
    for dev in devices:
        pid = GPU_PID + dev
        label = f"GPU {dev}" + (f" ({gpu_name[dev]})" if dev in gpu_name else "")
        _meta(w, "process_name", pid, None, {"name": label})
        _meta(w, "process_sort_index", pid, None, {"sort_index": dev})
        tracks[dev] = _Tracks(w, pid)
    if len(gaps):
        gs_all = gaps["start_ns"].to_numpy(np.int64)
        ge_all = gaps["end_ns"].to_numpy(np.int64)
        claimed = _claimed_by(a, gs_all, ge_all)
        for (dev,), rows in group_rows(gaps["device_id"].to_numpy(np.int64)):
            rows = rows[_sorted(gs_all[rows], ge_all[rows])]
            gs, ge = gs_all[rows], ge_all[rows]
            tids = tracks[dev].lanes(IDLE_TID, f"GPU {dev} idle", -1, nest_lanes(gs, ge))
            causes = np.asarray([str(c) for c in gaps["cause"].array.take(rows)], dtype=object)
            extra = {key: [None if v is None or v is pd.NA or str(v) in ("", "nan") else str(v)
                           for v in gaps[col].array.take(rows)]
                     for key, col in (("activity", "activity"), ("next_api", "api_name"), ("next_op", "next_op"))
                     if col in gaps}

            def gap_args(idx: np.ndarray, rows: np.ndarray = rows, gs: np.ndarray = gs, ge: np.ndarray = ge,
                         causes: np.ndarray = causes, extra: dict[str, list[Any]] = extra) -> list[str]:
                out = []
                for j in idx.tolist():
                    rec: dict[str, Any] = {"cause": causes[j], "gap_ns": int(ge[j] - gs[j])}
                    rec.update((k, v[j]) for k, v in extra.items() if v[j] is not None)
                    if claimed[rows[j]]:
                        rec["findings"] = claimed[rows[j]]
                    out.append(json.dumps(rec, separators=(",", ":")))
                return out

            _emit(w, "gap", GPU_PID + dev, tids, gs - t0, ge - t0,
                  lambda idx, causes=causes: [json.dumps(f"idle: {c}") for c in causes[idx]], gap_args)
    if not len(ops):
        return
    s_all, e_all = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    pids = ops["pid"].to_numpy(np.int64)
    corr = ops["correlation_id"].to_numpy(np.int64)
    nbytes = ops["bytes"].to_numpy(np.int64) if "bytes" in ops else np.zeros(len(ops), np.int64)
    groups = list(group_rows(ops["device_id"].to_numpy(np.int64), pids, ops["stream_id"].to_numpy(np.int64)))
    procs_on = {}
    for (dev, pid, _), _rows in groups:
        procs_on.setdefault(dev, set()).add(pid)
    sort = {dev: 0 for dev in devices}
    for (dev, pid, stream), rows in groups:
        sort[dev] += 1
        tid = sort[dev]
        name = f"stream {stream}" + (f" (pid {pid})" if len(procs_on[dev]) > 1 else "")
        rows = rows[_sorted(s_all[rows], e_all[rows])]
        s, e = s_all[rows], e_all[rows]
        tids = tracks[dev].lanes(tid, name, tid, nest_lanes(s, e))
        opk = np.asarray([str(x) for x in ops["op"].array.take(rows)], dtype=object)
        kinds = (np.asarray([str(x) for x in ops["kind"].array.take(rows)], dtype=object) if "kind" in ops
                 else np.full(len(rows), "", dtype=object))
        # one category per op kind: each kind's events with their own ``cat``
        for kind in dict.fromkeys(opk.tolist()):
            sel = np.flatnonzero(opk == kind)
            r = rows[sel]
            if kind in ("memcpy", "memset"):
                def args(idx: np.ndarray, r: np.ndarray = r, sel: np.ndarray = sel, pid: int = pid) -> list[str]:
                    return [f'{{"correlation_id":{c},"pid":{pid},"bytes":{b},"kind":{json.dumps(k)}}}'
                            for c, b, k in zip(corr[r[idx]].tolist(), nbytes[r[idx]].tolist(), kinds[sel[idx]])]
            else:
                def args(idx: np.ndarray, r: np.ndarray = r, pid: int = pid) -> list[str]:
                    return [f'{{"correlation_id":{c},"pid":{pid}}}' for c in corr[r[idx]].tolist()]
            _emit(w, kind, GPU_PID + dev, tids[sel], s[sel] - t0, e[sel] - t0,
                  lambda idx, r=r: _names(ops["name"], r[idx]), args)


def _host(w: _Writer, a: Any, t0: int) -> None:
    t = a.trace
    rg, api, marks = a.nvtx_ranges, t.cuda_api, t.nvtx.loc[t.nvtx["style"] == "Mark"] if len(t.nvtx) else t.nvtx
    pids = sorted({*rg["pid"].tolist(), *api["pid"].tolist(), *marks["pid"].tolist()})
    if not pids:
        return
    pnames, tnames = t.process_names(), t.thread_names()
    tracks: dict[int, _Tracks] = {}
    for i, pid in enumerate(pids):
        _meta(w, "process_name", pid, None, {"name": pnames.get(pid, f"process {pid}")})
        _meta(w, "process_sort_index", pid, None, {"sort_index": 1000 + i})
        tracks[pid] = _Tracks(w, pid)
    # NVTX ranges and CUDA API calls of one thread together, nested by time
    frames = [("nvtx", rg), ("cuda_api", api)]
    parts = []
    for cat, df in frames:
        if len(df):
            parts.append(pd.DataFrame({"pid": df["pid"].to_numpy(np.int64), "tid": df["tid"].to_numpy(np.int64),
                                       "start_ns": df["start_ns"].to_numpy(np.int64),
                                       "end_ns": df["end_ns"].to_numpy(np.int64),
                                       "src": cat, "row": np.arange(len(df))}))
    if parts:
        both = pd.concat(parts, ignore_index=True)
        bs, be = both["start_ns"].to_numpy(np.int64), both["end_ns"].to_numpy(np.int64)
        src, row = both["src"].to_numpy(), both["row"].to_numpy(np.int64)
        for (pid, tid), rows in group_rows(both["pid"].to_numpy(np.int64), both["tid"].to_numpy(np.int64)):
            rows = rows[_sorted(bs[rows], be[rows])]
            s, e = bs[rows], be[rows]
            tname = tnames.get((pid, tid), f"thread {tid}")
            tids = tracks[pid].lanes(tid, tname, tid, nest_lanes(s, e))
            for cat, df in frames:
                sel = np.flatnonzero(src[rows] == cat)
                if not len(sel):
                    continue
                r = row[rows[sel]]
                if cat == "nvtx":
                    def args(idx: np.ndarray, df: pd.DataFrame = df, r: np.ndarray = r) -> list[str]:
                        return [f'{{"style":{json.dumps(str(st))}}}' for st in df["style"].array.take(r[idx])]
                else:
                    corr = df["correlation_id"].to_numpy(np.int64)

                    def args(idx: np.ndarray, corr: np.ndarray = corr, r: np.ndarray = r) -> list[str]:
                        return [f'{{"correlation_id":{c}}}' for c in corr[r[idx]].tolist()]
                _emit(w, cat, pid, tids[sel], s[sel] - t0, e[sel] - t0,
                      lambda idx, df=df, r=r: _names(df["name"], r[idx]), args)
    if len(marks):
        ms = marks["start_ns"].to_numpy(np.int64)
        names = _names(marks["name"], np.arange(len(marks)))
        lines = []
        for pid, tid, ts, n in zip(marks["pid"].tolist(), marks["tid"].tolist(), ms.tolist(), names):
            tracks[pid].name(tid, tnames.get((pid, tid), f"thread {tid}"), tid)
            lines.append(f'{{"ph":"i","s":"t","cat":"nvtx_mark","pid":{pid},"tid":{tid},"ts":{_us(ts - t0)},"name":{n}}}')
        w.extend(lines, "nvtx_mark")


def _findings(w: _Writer, a: Any, t0: int) -> None:
    lines = []
    for rank, f in enumerate(a.findings, 1):
        ev = {"ph": "i", "s": "g", "cat": "finding", "pid": GPU_PID, "tid": IDLE_TID,
              "name": f"#{rank} {f.rule}: saves {fmt_ns(f.impact_ns)}",
              "args": {"rule": f.rule, "severity": f.severity.name.lower(), "title": f.title,
                       "impact_ns": int(f.impact_ns), "message": f.message}}
        lines.append(json.dumps(ev, separators=(",", ":"))[:-1] + f',"ts":{_us(_finding_time(f) - t0)}}}')
    w.extend(lines, "finding")


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


def _counters(w: _Writer, a: Any, t0: int, named: set[int]) -> dict[str, Any]:
    """A counter track per metric source and metric of ``COUNTERS``; the ``otherData`` note."""
    note: dict[str, Any] = {}
    for i, src in enumerate(_metric_sources(a)):
        dev = src.device_id
        pid = GPU_PID + int(dev) if dev is not None else METRIC_PID + i
        if pid not in named:  # a sampled GPU without ops or gaps, or a source of no known GPU
            label = src.label + (f" ({src.device_name})" if src.device_name else "")
            _meta(w, "process_name", pid, None, {"name": label})
            _meta(w, "process_sort_index", pid, None, {"sort_index": int(dev) if dev is not None else 10_000 + i})
            named.add(pid)
        for key, title in COUNTERS:
            v = src.values.get(key)
            if v is None:
                continue
            ok = ~np.isnan(v)
            ts, vals, bucket = bucket_means(src.ts[ok], v[ok])
            head = f'{{"ph":"C","cat":"gpu_metric","pid":{pid},"name":{json.dumps(title)},"ts":'
            for lo in range(0, len(ts), CHUNK):
                w.extend([f'{head}{_us(t)},"args":{{"%":{x:.6g}}}}}'
                          for t, x in zip((ts[lo:lo + CHUNK] - t0).tolist(), vals[lo:lo + CHUNK].tolist())],
                         "gpu_metric")
            note[f"{src.label} {title}"] = {"samples": int(ok.sum()), "events": len(ts), "bucket": bucket}
    return note


def _um_pid(global_pid: np.ndarray) -> np.ndarray:
    """The OS process id of nsys's ``globalPid`` (bits 24..47)."""
    return (global_pid.astype(np.int64) >> 24) & 0xFFFFFF


def _running(w: _Writer, cat: str, pid: int, name: str, key: str, ts: np.ndarray, v: np.ndarray, t0: int,
             scale: float = 1.0) -> int:
    """A counter track of the running total of ``v`` at the (sorted) times ``ts``; at most
    ``MAX_COUNTER_SAMPLES`` events, evenly spaced, each the exact total at its time. Returns the events."""
    order = np.argsort(ts, kind="stable")
    ts, tot = ts[order], np.cumsum(v[order].astype(np.float64)) / scale
    if len(ts) > MAX_COUNTER_SAMPLES:
        pick = np.unique(np.linspace(0, len(ts) - 1, MAX_COUNTER_SAMPLES).astype(np.int64))
        ts, tot = ts[pick], tot[pick]
    _level(w, cat, pid, name, key, ts, tot, t0)
    return len(ts)


def _level(w: _Writer, cat: str, pid: int, name: str, key: str, ts: np.ndarray, v: np.ndarray, t0: int) -> None:
    head = f'{{"ph":"C","cat":"{cat}","pid":{pid},"name":{json.dumps(name)},"ts":'
    for lo in range(0, len(ts), CHUNK):
        w.extend([f'{head}{_us(t)},"args":{{"{key}":{x:.12g}}}}}'
                  for t, x in zip((ts[lo:lo + CHUNK] - t0).tolist(), v[lo:lo + CHUNK].tolist())], cat)


def _gpu_process(w: _Writer, a: Any, dev: int, named: set[int]) -> int:
    """The "GPU N" process of device ``dev``, named here when no op, gap or metric named it."""
    pid = GPU_PID + int(dev)
    if pid not in named:
        gpus = a.trace.gpus
        names = {int(d): str(n) for d, n in zip(gpus["device_id"].tolist(), gpus["name"].tolist())} if len(gpus) else {}
        _meta(w, "process_name", pid, None, {"name": f"GPU {dev}" + (f" ({names[dev]})" if dev in names else "")})
        _meta(w, "process_sort_index", pid, None, {"sort_index": int(dev)})
        named.add(pid)
    return pid


MIB = float(1 << 20)


def _memory_counters(w: _Writer, a: Any, t0: int, named: set[int]) -> dict[str, Any]:
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


def _um_counters(w: _Writer, a: Any, t0: int, named: set[int]) -> dict[str, Any]:
    """Unified memory: bytes migrated so far each way and GPU page faults so far per device; CPU page
    faults so far per host process."""
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
                             mc["bytes"].to_numpy(np.int64)[idx], t0, MIB)
                out[f"GPU {int(dev)} {name}"] = {"events": n, "rows": len(idx)}
    gf = t.um_gpu_faults
    if len(gf):
        for (dev,), rows in group_rows(gf["device_id"].to_numpy(np.int64)):
            gp = _gpu_process(w, a, int(dev), named)
            n = _running(w, "unified_memory", gp, "GPU page faults", "faults", gf["start_ns"].to_numpy(np.int64)[rows],
                         gf["faults"].to_numpy(np.int64)[rows], t0)
            out[f"GPU {int(dev)} GPU page faults"] = {"events": n, "rows": len(rows)}
    cf = t.um_cpu_faults
    if len(cf):
        pids = _um_pid(cf["global_pid"].to_numpy(np.int64))
        for (pid,), rows in group_rows(pids):
            n = _running(w, "unified_memory", int(pid), "CPU page faults", "faults",
                         cf["start_ns"].to_numpy(np.int64)[rows], np.ones(len(rows), np.int64), t0)
            out[f"pid {int(pid)} CPU page faults"] = {"events": n, "rows": len(rows)}
    return out


def write_events(a: Any, f: IO[bytes]) -> dict[str, Any]:
    """Stream the whole trace-event JSON document to ``f``; returns ``otherData`` (the counts per
    category, ``t0_ns``)."""
    t0 = _origin(a)
    f.write(b'{"traceEvents":[\n')
    w = _Writer(f)
    steps: Sequence[Callable[[_Writer, Any, int], None]] = (_gpu, _host, _findings)
    for step in steps:
        step(w, a, t0)
    named = {GPU_PID + d for d in (*a.ops["device_id"].astype("int64").tolist(),
                                   *a.gaps["device_id"].astype("int64").tolist())}
    gm = _counters(w, a, t0, named) if _metric_sources(a) else {}
    mem = _memory_counters(w, a, t0, named)
    um = _um_counters(w, a, t0, named)
    w.flush()
    from nsysan._version import __version__

    other = {"generator": f"nsysan {__version__}", "trace": Path(a.trace.meta.path).name if a.trace.meta.path else "",
             "t0_ns": t0, "time_unit": "ts and dur in microseconds from t0_ns", "capped": False,
             "counts": dict(sorted(w.counts.items()))}
    if gm:  # only with GPU metrics: the bytes of other traces stay as they were
        other["gpu_metrics"] = {"unit": "% of peak", "max_events_per_track": MAX_COUNTER_SAMPLES, "tracks": gm}
    if mem:  # only with memory usage events, as above
        other["device_memory"] = {"unit": "MiB live", "tracks": mem}
    if um:
        other["unified_memory"] = {"unit": "running totals: MiB migrated, faults",
                                   "max_events_per_track": MAX_COUNTER_SAMPLES, "tracks": um}
    f.write(b'\n],"displayTimeUnit":"ns","otherData":' + json.dumps(other, separators=(",", ":")).encode() + b"}\n")
    return other


def write_perfetto(a: Any, path: Path, *, force: bool = False, protect: Sequence[tuple[int, int]] = ()) -> dict[str, Any]:
    """Write ``a``'s timeline to ``path`` (atomically; see ``nsysan.outputs.atomic_file``)."""
    from nsysan.outputs import atomic_file

    with atomic_file(Path(path), force=force, protect=protect) as f:
        return write_events(a, f)
