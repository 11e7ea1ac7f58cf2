"""Running or blocked: whether a thread was on a CPU, from the context switches nsys records.

``SCHED_EVENTS`` (recorded by default, ``--cpuctxsw=process-tree``; absent with ``--cpuctxsw=none``)
holds one row per switch of a thread onto a CPU (``is_in``) or off it. A thread runs from a switch-in
to its next switch-out; before its first switch (when that is a switch-out) it was running since
before the capture, after its last switch-in it runs to the end. Off-CPU time is everything else
between the thread's first and last switch: blocked (a lock, a queue, I/O, a sleep) or runnable but
waiting for a CPU, which the switches alone do not tell apart.

For any set of intervals on one thread (the host-caused GPU idle gaps up to the launching call, an
NVTX range's instances) ``thread_time`` splits the time into **running** and **off CPU**, and the
off-CPU time into the OS runtime call the thread sat in (by name, innermost call each nanosecond) or
**not in a traced call** (a ``readv`` on a pipe, a futex of a lock nsys does not trace: its blocking
is still visible here). Nothing is counted twice: each nanosecond of an interval set (merged first)
is running, in one call, or untraced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import group_rows, text_codes

if TYPE_CHECKING:
    from nsysan.trace.model import Trace

FLAG = "--cpuctxsw=process-tree"
NOT_IN_A_CALL = "not in a traced call"


@dataclass(frozen=True)
class ThreadTime:
    total_ns: int
    running_ns: int
    off_ns: int
    off_by_call: dict[str, int] = field(default_factory=dict)  # OS runtime call -> off-CPU ns inside it
    off_untraced_ns: int = 0  # off CPU, in no traced OS runtime call

    @property
    def running_share(self) -> float:
        return self.running_ns / self.total_ns if self.total_ns else 0.0

    @property
    def off_share(self) -> float:
        return self.off_ns / self.total_ns if self.total_ns else 0.0

    def top_calls(self, n: int = 3) -> list[tuple[str, int]]:
        return sorted(self.off_by_call.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def to_dict(self) -> dict[str, Any]:
        return {"total_ns": self.total_ns, "running_ns": self.running_ns, "off_cpu_ns": self.off_ns,
                "running_share": round(self.running_share, 4), "off_cpu_share": round(self.off_share, 4),
                "off_cpu_in_calls": [{"call": k, "ns": v} for k, v in self.top_calls(10)],
                "off_cpu_untraced_ns": self.off_untraced_ns}


def add(a: ThreadTime, b: ThreadTime) -> ThreadTime:
    calls = dict(a.off_by_call)
    for k, v in b.off_by_call.items():
        calls[k] = calls.get(k, 0) + v
    return ThreadTime(a.total_ns + b.total_ns, a.running_ns + b.running_ns, a.off_ns + b.off_ns, calls,
                      a.off_untraced_ns + b.off_untraced_ns)


ZERO = ThreadTime(0, 0, 0)


class Schedule:
    """The on-CPU intervals of every thread in ``sched`` (start_ns, pid, tid, is_in), and the OS runtime
    calls (``osrt``: start_ns, end_ns, pid, tid, name) to name where off-CPU time was spent."""

    def __init__(self, sched: pd.DataFrame, osrt: pd.DataFrame | None = None) -> None:
        self.recorded = len(sched) > 0
        self._on: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._span: dict[tuple[int, int], tuple[int, int]] = {}
        if self.recorded:
            self._thread_switches(sched)
        self._osrt = osrt if osrt is not None else pd.DataFrame(columns=["start_ns", "end_ns", "pid", "tid", "name"])
        self._segments: dict[tuple[int, int], dict[str, tuple[np.ndarray, np.ndarray]]] = {}

    def _thread_switches(self, sched: pd.DataFrame) -> None:
        """Each thread's on-CPU intervals and span from its switches in time order (ties: the table's
        order): per thread its rows, sorted by time where they are not (no sorted copy of the table)."""
        st, inn = sched["start_ns"].to_numpy(np.int64), sched["is_in"].to_numpy()
        for (pid, tid), idx in group_rows(sched["pid"].to_numpy(), sched["tid"].to_numpy()):
            t = st[idx]
            b = inn[idx].astype(bool, copy=False)
            if len(t) > 1 and not bool((t[1:] >= t[:-1]).all()):
                o = np.argsort(t, kind="stable")
                t = t[o]  # (each column's unsorted copy let go as its sorted one is made)
                b = b[o]
                del o
            self._on[(pid, tid)] = _on_intervals(t, b)
            self._span[(pid, tid)] = (int(t[0]), int(t[-1]))
            del t, b

    def threads(self) -> list[tuple[int, int]]:
        return sorted(self._on)

    def on_intervals(self, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """The thread's merged on-CPU intervals (empty when it has no switch)."""
        z = np.zeros(0, np.int64)
        return self._on.get((int(pid), int(tid)), (z, z))

    def knows(self, pid: int, tid: int) -> bool:
        return (int(pid), int(tid)) in self._on

    def thread_time(self, pid: int, tid: int, starts: np.ndarray, ends: np.ndarray) -> ThreadTime:
        """Running / off CPU (by OS call) over the union of the intervals [starts, ends) on one thread,
        restricted to the span its context switches cover (before its first and after its last switch
        nothing is known)."""
        key = (int(pid), int(tid))
        if key not in self._on or len(starts) == 0:
            return ZERO
        lo, hi = self._span[key]
        s, e = iv.clip(np.asarray(starts, np.int64), np.asarray(ends, np.int64), lo, hi)
        keep = e > s
        ms, me = iv.merge(s[keep], e[keep])
        total = int((me - ms).sum())
        if total == 0:
            return ZERO
        on_s, on_e = self._on[key]
        running = int(iv.total(*iv.intersect((ms, me), (on_s, on_e)))) if len(on_s) else 0
        off_s, off_e = iv.subtract((ms, me), (on_s, on_e)) if len(on_s) else (ms, me)
        by_call, in_calls = self._off_in_calls(key, off_s, off_e)
        off = total - running
        return ThreadTime(total, running, off, by_call, max(0, off - in_calls))

    def _calls(self, key: tuple[int, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The thread's OS runtime calls as disjoint segments per call name, each nanosecond given to the
        innermost call (a call nested in another takes its time); computed once per thread."""
        if key in self._segments:
            return self._segments[key]
        o = self._osrt
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        m = (o["pid"].to_numpy() == key[0]) & (o["tid"].to_numpy() == key[1]) if len(o) else np.zeros(0, bool)
        if m.any():
            rows = np.flatnonzero(m)
            cs, ce = o["start_ns"].to_numpy(np.int64)[rows], o["end_ns"].to_numpy(np.int64)[rows]
            codes, names = text_codes(o["name"].iloc[rows])
            order = np.argsort(cs, kind="stable")
            cs, ce, codes = cs[order], ce[order], codes[order]
            is_, ie, ids = iv.innermost(cs, ce)
            for (name,), part in group_rows(codes[ids]):  # names in order, each one's segments in time order
                out[names[name]] = (is_[part], ie[part])
        self._segments[key] = out
        return out

    def _off_in_calls(self, key: tuple[int, int], off_s: np.ndarray, off_e: np.ndarray) -> tuple[dict[str, int], int]:
        if len(off_s) == 0:
            return {}, 0
        out: dict[str, int] = {}
        for name, seg in self._calls(key).items():
            ps, pe = iv.intersect(seg, (off_s, off_e))
            t = int((pe - ps).sum())
            if t:
                out[name] = t
        return out, sum(out.values())


def _on_intervals(t: np.ndarray, inn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """On-CPU intervals from one thread's sorted switches: each switch-in to the next switch; before a
    leading switch-out the thread was running since its span's start (its first switch), after a
    trailing switch-in until its last."""
    if len(t) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    at = np.flatnonzero(inn)  # each switch-in, and the switch after it (the last: itself)
    s = t[at]
    at += 1
    np.minimum(at, len(t) - 1, out=at)
    e = t[at]
    del at
    keep = e > s
    return iv.merge(s, e) if bool(keep.all()) else iv.merge(s[keep], e[keep])


def gap_thread_time(schedule: Schedule, gaps: pd.DataFrame,
                    causes: tuple[str, ...] = ("host",)) -> dict[str, ThreadTime]:
    """Per gap cause: running / off CPU of the submitting thread during the gaps of that cause, each gap
    up to its launching call's start (what the thread did before it submitted the work)."""
    out: dict[str, ThreadTime] = {}
    if not schedule.recorded or len(gaps) == 0:
        return out
    for cause in causes:
        g = gaps.loc[gaps["cause"].astype(str).to_numpy() == cause]
        if len(g) == 0:
            continue
        end = np.minimum(g["end_ns"].to_numpy(np.int64), g["api_start_ns"].to_numpy(np.int64))
        tt = ZERO
        for (pid, tid), sub in g.assign(_e=end).groupby(["pid", "tid"], sort=True):
            if pid < 0 or not schedule.knows(pid, tid):
                continue
            tt = add(tt, schedule.thread_time(int(pid), int(tid), sub["start_ns"].to_numpy(np.int64),
                                              sub["_e"].to_numpy(np.int64)))
        if tt.total_ns:
            out[cause] = tt
    return out


def range_thread_time(schedule: Schedule, ranges: pd.DataFrame, threads: set[tuple[int, int]]) -> pd.DataFrame:
    """Per (pid, tid, range name) of the given NVTX ranges on the given threads (the launching ones):
    instances, total time (merged), running, off CPU, the call most of the off-CPU time sat in."""
    cols = ["pid", "tid", "name", "instances", "total_ns", "running_ns", "off_cpu_ns", "off_cpu_share",
            "top_call", "top_call_ns", "off_cpu_untraced_ns"]
    rows = []
    if not schedule.recorded or len(ranges) == 0:
        return pd.DataFrame(columns=cols)
    r = ranges.loc[ranges["end_ns"].notna().to_numpy()]
    for (pid, tid, name), g in r.groupby(["pid", "tid", r["name"].astype(str)], sort=True):
        if (int(pid), int(tid)) not in threads or not schedule.knows(pid, tid):
            continue
        tt = schedule.thread_time(int(pid), int(tid), g["start_ns"].to_numpy(np.int64),
                                  g["end_ns"].to_numpy(np.int64))
        if not tt.total_ns:
            continue
        top = tt.top_calls(1)
        rows.append({"pid": int(pid), "tid": int(tid), "name": name, "instances": len(g), "total_ns": tt.total_ns,
                     "running_ns": tt.running_ns, "off_cpu_ns": tt.off_ns, "off_cpu_share": round(tt.off_share, 4),
                     "top_call": top[0][0] if top else NOT_IN_A_CALL,
                     "top_call_ns": top[0][1] if top else tt.off_untraced_ns,
                     "off_cpu_untraced_ns": tt.off_untraced_ns})
    return pd.DataFrame(rows, columns=cols)


@dataclass(frozen=True)
class ThreadStates:
    """The schedule of the trace's threads and, per program range on a thread that launches GPU work,
    its running and off-CPU time (``range_thread_time``); ``recorded`` is False without
    ``SCHED_EVENTS`` (``--cpuctxsw=none``), and then nothing is claimed."""

    schedule: Schedule
    ranges: pd.DataFrame

    @property
    def recorded(self) -> bool:
        return self.schedule.recorded

    def to_dict(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "ranges": self.ranges.to_dict("records")}


def calling_threads(cuda_api: pd.DataFrame) -> set[tuple[int, int]]:
    """The (pid, tid) pairs that made CUDA calls."""
    if len(cuda_api) == 0:
        return set()
    key = (cuda_api["pid"].to_numpy(np.int64) << 32) | cuda_api["tid"].to_numpy(np.int64)
    return {(int(k >> 32), int(k & 0xFFFFFFFF)) for k in np.unique(key).tolist()}


def thread_states(trace: Trace) -> ThreadStates:
    """Running or blocked for the program's own NVTX ranges on launching threads (library ranges left
    out: ``libranges``)."""
    from nsysan.analyses import libranges

    sc = Schedule(trace.sched, trace.osrt)
    if not sc.recorded:
        return ThreadStates(sc, range_thread_time(sc, pd.DataFrame(), set()))
    nv = trace.nvtx
    if len(nv):
        closed = nv["end_ns"].notna().to_numpy() & (nv["style"].astype(str).to_numpy() != "Mark")
        nv = nv.loc[closed]
        nv = nv.loc[~libranges.library_mask(nv["name"].astype(str), nv["domain"])]
    return ThreadStates(sc, range_thread_time(sc, nv, calling_threads(trace.cuda_api)))
