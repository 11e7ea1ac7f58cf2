"""The phases of a capture and where every second of it went.

A capture has a **start-up** (from its start to the first GPU operation: imports, CUDA context
creation, module loading, model building), a **GPU-active part** (first GPU operation to the last
one's end; of the operations a call launched, where there are any: ``analysis.gpu_active``) and a
**tail** (after the last GPU operation: writing results, reading managed memory back, tear-down). The judged
window (``Analysis.steady``: the steady iterations, or the GPU-active part when there is no
iteration) lies inside the GPU-active part; what of it comes before the window (warm-up iterations,
the work before the loop) and after it is its own line.

Inside the judged window, per device, the time is GPU busy (any operation of any process on it) or
idle, and every idle nanosecond has a cause: the idle gaps of at least ``min_gap_ns`` by their cause
(``gaps.py``: host, sync, dependency, launch, other) and the idle time in shorter gaps
(``short gaps``: the slivers between back-to-back launches). The parts add up to the capture,
exactly: ``parts()``.

What filled the start-up: the CUDA API calls (context creation, module loading, allocations ...) and
OS runtime calls of the thread that launched the first GPU work, each nanosecond once (a call
inside another counts once, for the outer one), the rest untraced CPU work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import text_codes
from nsysan.analyses.gpu import Window
from nsysan.analyses.join import launched

CAUSE_ORDER = ("host", "sync", "dependency", "launch", "other", "short gaps")
MAX_FILLED = 6


@dataclass(frozen=True)
class Phases:
    capture: Window
    gpu_active: Window | None  # None: no GPU work recorded
    judged: Window
    device_id: int | None  # the device the window's busy and idle lines are of (the busiest)
    startup_ns: int = 0
    before_ns: int = 0  # GPU-active part before the judged window (warm-up, work before the loop)
    busy_ns: int = 0
    idle_by_cause: dict[str, int] = field(default_factory=dict)
    after_ns: int = 0  # GPU-active part after the judged window
    tail_ns: int = 0
    startup_filled: list[dict[str, Any]] = field(default_factory=list)  # {"what", "ns"}, largest first

    @property
    def idle_ns(self) -> int:
        return sum(self.idle_by_cause.values())

    def parts(self) -> list[tuple[str, int]]:
        """(part, ns) in time order; they add up to the capture's duration."""
        out = [("start-up", self.startup_ns), ("before the window", self.before_ns), ("GPU busy", self.busy_ns)]
        out += [(f"GPU idle: {c}", v) for c, v in self.idle_by_cause.items()]
        return out + [("after the window", self.after_ns), ("tail", self.tail_ns)]

    def to_dict(self) -> dict[str, Any]:
        return {"capture_ns": self.capture.dur_ns, "startup_ns": self.startup_ns, "before_window_ns": self.before_ns,
                "window": self.judged.to_dict(), "device_id": self.device_id, "busy_ns": self.busy_ns,
                "idle_ns": self.idle_ns, "idle_by_cause": dict(self.idle_by_cause), "after_window_ns": self.after_ns,
                "tail_ns": self.tail_ns,
                "gpu_active": self.gpu_active.to_dict() if self.gpu_active is not None else None,
                "startup_filled": list(self.startup_filled)}


def phases(capture: Window, ops: pd.DataFrame, active: Window, judged: Window, busy_steady: pd.DataFrame,
           gaps: pd.DataFrame, cuda_api: pd.DataFrame | None = None, osrt: pd.DataFrame | None = None) -> Phases:
    """The capture's phases and its time accounted for (module doc). ``active``: the GPU-active part
    (``analysis.gpu_active``); ``busy_steady``: per device the busy and idle time of the judged window
    (``gpu.device_busy``); ``gaps``: the idle gaps."""
    if len(ops) == 0 or capture.dur_ns <= 0:
        return Phases(capture, None, judged, None, busy_ns=0, idle_by_cause={}, tail_ns=0,
                      before_ns=0, startup_ns=capture.dur_ns)
    c0, c1 = capture.start_ns, capture.end_ns
    g0 = min(max(active.start_ns, c0), c1)
    g1 = max(min(active.end_ns, c1), g0)
    w0 = min(max(judged.start_ns, g0), g1)
    w1 = min(max(judged.end_ns, w0), g1)
    dev, busy = None, 0
    if len(busy_steady):
        top = busy_steady.sort_values(["busy_ns", "device_id"], ascending=[False, True], kind="stable").iloc[0]
        dev, busy = int(top["device_id"]), int(top["busy_ns"])
    span = w1 - w0
    busy = min(max(busy, 0), span)
    idle = _idle_by_cause(gaps, dev, w0, w1, span - busy)
    main = None
    if "tid" in ops.columns:
        done = ops.loc[launched(ops)]
        if len(done):
            first = done.iloc[int(np.argmin(done["start_ns"].to_numpy()))]
            main = (int(first["pid"]), int(first["tid"]))
    filled = _startup_filled(cuda_api, osrt, c0, g0, main)
    return Phases(capture, Window(g0, g1, "GPU-active part", "gpu_active"), Window(w0, w1, judged.label, judged.kind),
                  dev, startup_ns=g0 - c0, before_ns=w0 - g0, busy_ns=busy, idle_by_cause=idle, after_ns=g1 - w1,
                  tail_ns=c1 - g1, startup_filled=filled)


def _idle_by_cause(gaps: pd.DataFrame, dev: int | None, w0: int, w1: int, idle: int) -> dict[str, int]:
    """The window's idle time on ``dev`` by the cause of its gaps (clipped to the window), the rest
    in short gaps; adds up to ``idle``."""
    out: dict[str, int] = {}
    if len(gaps) and dev is not None:
        d = gaps["device_id"].to_numpy() == dev
        st = np.clip(gaps["start_ns"].to_numpy()[d], w0, w1)
        en = np.clip(gaps["end_ns"].to_numpy()[d], w0, w1)
        ns = np.maximum(en - st, 0)
        codes, uniq = pd.factorize(gaps["cause"].iloc[np.flatnonzero(d)])  # a few causes: no text per gap
        for c in CAUSE_ORDER[:-1]:
            hit = np.flatnonzero(np.asarray(uniq, dtype=object) == c)
            v = int(ns[codes == hit[0]].sum()) if len(hit) else 0
            if v > 0:
                out[c] = v
    total = sum(out.values())
    if total > idle:  # gaps measured on the device's own busy intervals never exceed its idle time; guard anyway
        scale = idle / total if total else 0.0
        out = {c: int(v * scale) for c, v in out.items()}
        total = sum(out.values())
    if idle - total > 0:
        out["short gaps"] = idle - total
    return out


def _startup_filled(cuda_api: pd.DataFrame | None, osrt: pd.DataFrame | None, c0: int, g0: int,
                    main: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """What the thread that launched the first GPU work (``main``; else the thread with the most traced
    time there) spent the start-up in: its CUDA API and OS runtime calls by name (each nanosecond once,
    outer calls first), the rest untraced CPU work (or the thread not yet started)."""
    span = g0 - c0
    if span <= 0:
        return []
    frames: list[pd.DataFrame] = []
    texts: list[str] = []  # each call's name as a code into ``texts`` (text made only per distinct name)
    for df in (cuda_api, osrt):
        if df is None or len(df) == 0:
            continue
        st, en = df["start_ns"].to_numpy(), df["end_ns"].to_numpy()
        m = np.flatnonzero((st < g0) & (en > c0))
        if not len(m):
            continue
        codes, names = text_codes(df["name"].iloc[m])
        frames.append(pd.DataFrame({"tid": df["tid"].to_numpy()[m].astype(np.int64),
                                    "pid": df["pid"].to_numpy()[m].astype(np.int64),
                                    "start": np.clip(st[m], c0, g0), "end": np.clip(en[m], c0, g0),
                                    "name": codes.astype(np.int64) + len(texts)}))
        texts += names
    if not frames:
        return [{"what": "untraced CPU work", "ns": span}]
    f = pd.concat(frames, ignore_index=True)
    f = f.loc[f["end"] > f["start"]]
    if len(f) == 0:
        return [{"what": "untraced CPU work", "ns": span}]
    per = f.assign(d=f["end"] - f["start"]).groupby(["pid", "tid"])["d"].sum()
    pid, tid = main if main is not None else per.idxmax()
    f = f.loc[(f["pid"] == pid) & (f["tid"] == tid)].sort_values(["start", "end"], ascending=[True, False])
    # each nanosecond once: a call is credited only the part no earlier-starting call covers
    st, en = f["start"].to_numpy(), f["end"].to_numpy()
    reach = np.maximum.accumulate(np.concatenate([[c0], en[:-1]]))
    own = np.maximum(en - np.maximum(st, reach), 0)
    by = _sum_by_name(own, f["name"].to_numpy(), texts)
    out: list[dict[str, Any]] = [{"what": k, "ns": v} for k, v in by if v > 0][:MAX_FILLED]
    traced = int(own.sum())
    shown = sum(x["ns"] for x in out)
    if traced - shown > 0:
        out.append({"what": "other traced calls", "ns": traced - shown})
    us, ue = iv.merge(st, en)
    untraced = span - int((ue - us).sum())
    if untraced > 0:
        out.append({"what": "untraced CPU work", "ns": untraced})
    return sorted(out, key=lambda x: -x["ns"])


def _sum_by_name(own: np.ndarray, codes: np.ndarray, texts: list[str]) -> list[tuple[str, int]]:
    """The time of each name (``codes`` into ``texts``; names alike in text are one), largest first,
    ties in name order."""
    if not len(codes):
        return []
    names, key = np.unique(np.array(texts, dtype=object), return_inverse=True)
    row_key = key[codes]
    sums = np.zeros(len(names), dtype=np.int64)
    np.add.at(sums, row_key, own.astype(np.int64))
    present = np.zeros(len(names), dtype=bool)
    present[row_key] = True
    keep = np.flatnonzero(present)
    order = keep[np.argsort(-sums[keep], kind="stable")]
    return [(str(names[i]), int(sums[i])) for i in order]
