"""GPU busy/idle time, utilization over time, concurrency, and copy/compute overlap, per device.

Busy time is the **union** of kernels, CUDA Graph launches, memcpy and memset on a device, over every
process that used it -- never a sum -- so it can never exceed the window and a utilization never
exceeds 100%. Every percentage is per device. Streams are keyed by (device, process, stream): two
processes' stream 7 are two streams. Every number states its window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import distinct, group_rows, name_in, rows_of
from nsysan.trace.model import constant_column, is_constant_column


# what a window is: the capture's bounds ("capture"), the first to the last GPU op of an export without
# capture bounds ("gpu_activity"), the capture's GPU-active part ("gpu_active"), the iteration model's
# steady state ("steady"), nothing ("empty")
WindowKind = Literal["capture", "gpu_activity", "gpu_active", "steady", "empty"]


@dataclass(frozen=True)
class Window:
    """A time window [start_ns, end_ns): ``kind`` says what it is, for code to decide by; ``label`` is
    its text for people ("capture", "gpu activity", "GPU-active part", "steady state", "empty")."""

    start_ns: int
    end_ns: int
    label: str
    kind: WindowKind = "capture"  # every window nsysan makes says its kind; tests' windows may leave it out

    @property
    def dur_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def named(self) -> str:
        """What a message calls this window, by its kind: "the steady state" with an iteration model,
        else "the whole capture" ("the span of GPU activity" for an export without capture bounds,
        "the GPU-active part" when that is what is judged). A whole-capture window is never called a
        steady state."""
        return ("the steady state" if self.kind == "steady" else "the span of GPU activity"
                if self.kind == "gpu_activity" else "the GPU-active part" if self.kind == "gpu_active"
                else "the whole capture")

    @property
    def adjective(self) -> str:
        """What a message puts before a noun said of this window ("steady-state executions"):
        "steady-state " for a steady state, else nothing (the noun alone is of the whole capture)."""
        return "steady-state " if self.kind == "steady" else ""

    def to_dict(self) -> dict[str, object]:
        return {"start_ns": self.start_ns, "end_ns": self.end_ns, "dur_ns": self.dur_ns, "label": self.label}


Intervals = tuple[np.ndarray, np.ndarray]
COMPUTE_OPS = ("kernel", "graph")


class Busy:
    """Merged busy intervals of the GPU ops, built once (the ops are grouped with one sort and each
    group merged once) and clipped to any window: clipping a merged set keeps it merged, so the
    capture and steady-state numbers, concurrency, overlap and the plots share one pass.

    ``per_pid_dev[(pid, dev)]``: {"all", "compute", "memcpy", "memset"} intervals plus ops/streams
    counts; ``per_dev[dev]``: {"all", "compute", "memcpy", "memset", "memcpy:<kind>"};
    ``per_stream[(dev, pid, stream)]``: intervals.
    """

    def __init__(self, ops: pd.DataFrame) -> None:
        self.per_pid_dev: dict[tuple[int, int], dict[str, Any]] = {}  # intervals, and counts
        self.per_dev: dict[int, dict[str, Intervals]] = {}
        self.per_stream: dict[tuple[int, int, int], Intervals] = {}
        self.op_start = np.zeros(0, dtype=np.int64)
        self.op_end = np.zeros(0, dtype=np.int64)
        self.op_dev = np.zeros(0, dtype=np.int64)
        self._op_pid = self._op_stream = np.zeros(0, dtype=np.int64)
        if len(ops) == 0:
            return
        st, en = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
        role = ops["role"] if "role" in ops else None
        is_comm = name_in(role, ("communication",)) if role is not None else np.zeros(len(ops), dtype=bool)
        is_compute = name_in(ops["op"], COMPUTE_OPS) & ~is_comm  # per category, not per row
        is_copy, is_memset = name_in(ops["op"], ("memcpy",)), name_in(ops["op"], ("memset",))
        kind = ops["kind"] if "kind" in ops else pd.Series(pd.Categorical([""] * len(ops)))
        dev_all, stream_all = ops["device_id"].to_numpy(), ops["stream_id"].to_numpy()

        memo: dict[tuple[int, int, int], tuple[np.ndarray, Intervals]] = {}

        def merged(rows: np.ndarray) -> Intervals:
            """rows ascending (ops sorted by start stay sorted). The same row set (one process, one
            device, one stream, kernels only: common) is merged once and its arrays shared."""
            if len(rows) == 0:
                return iv.merge(st[rows], en[rows])
            key = (len(rows), int(rows[0]), int(rows[-1]))
            hit = memo.get(key)
            if hit is not None and (hit[0] is rows or np.array_equal(hit[0], rows)):
                return hit[1]
            out = iv.merge(rows_of(st, rows), rows_of(en, rows))
            memo[key] = (rows, out)
            return out

        def pick(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
            """``rows[mask[rows]]``; ``rows`` itself when the mask keeps them all (every op a
            compute kernel: no second array of every position)."""
            m = mask if len(rows) == len(mask) else mask[rows]
            return rows if bool(m.all()) else rows[m]

        for (pid, dev), rows in group_rows(ops["pid"].to_numpy(), dev_all):
            self.per_pid_dev[(pid, dev)] = {
                "all": merged(rows), "compute": merged(pick(rows, is_compute)), "comm": merged(pick(rows, is_comm)),
                "memcpy": merged(pick(rows, is_copy)), "memset": merged(pick(rows, is_memset)),
                "ops": len(rows), "streams": len(distinct(rows_of(stream_all, rows)))}
        for (dev,), rows in group_rows(dev_all):
            d = {"all": merged(rows), "compute": merged(pick(rows, is_compute)), "comm": merged(pick(rows, is_comm)),
                 "memcpy": merged(pick(rows, is_copy)), "memset": merged(pick(rows, is_memset))}
            copy_rows = pick(rows, is_copy)
            copy_kind = kind.iloc[copy_rows].astype(str).to_numpy()  # copies are few: strings are fine
            for k in sorted(set(copy_kind.tolist())):
                d[f"memcpy:{k}"] = merged(copy_rows[copy_kind == k])
            self.per_dev[dev] = d
        pid_all = ops["pid"].to_numpy()
        for (dev, pid, stream), rows in group_rows(dev_all, pid_all, stream_all):
            self.per_stream[(dev, pid, stream)] = merged(rows)
        # the ops' own columns (no int64 copies); a (process, stream) key only for the rows asked
        self.op_start, self.op_end, self.op_dev = st, en, dev_all
        self._op_pid, self._op_stream = pid_all, stream_all

    def stream_keys(self, sel: np.ndarray) -> np.ndarray:
        """One integer per (process, stream) of the ops selected by the mask ``sel``: distinct
        streams of a window without tuples; one key broadcast when the process and stream columns
        are each one value (the loader's broadcast columns)."""
        p, s = self._op_pid, self._op_stream
        if is_constant_column(p) and is_constant_column(s):
            return constant_column((int(p[0]) << 32) | (int(s[0]) & 0xFFFFFFFF), int(np.count_nonzero(sel)), np.int64)
        return (p[sel].astype(np.int64) << 32) | (s[sel].astype(np.int64) & 0xFFFFFFFF)


def _in(ivs: Intervals, w: Window) -> Intervals:
    return iv.clip_merged(ivs[0], ivs[1], w.start_ns, w.end_ns)  # Busy's intervals are all merged


def _len(ivs: Intervals) -> int:
    return int((ivs[1] - ivs[0]).sum())


def device_busy(ops: pd.DataFrame, window: Window, busy: Busy | None = None) -> pd.DataFrame:
    """Per device, in ``window``: busy_ns (union of all GPU ops of every process on it), compute_ns
    (kernels + graphs that are not communication, see ``opclass``), comm_ns (communication kernels),
    comm_exposed_ns (communication while no compute ran on the device: what overlapping it would
    save), copy_ns (memcpy), memset_ns, idle_ns = window - busy, busy_frac, and the ops, streams
    ((process, stream) pairs) and processes with work in the window."""
    b = busy or Busy(ops)
    rows = []
    dur = window.dur_ns
    in_win = (b.op_start < window.end_ns) & (b.op_end > window.start_ns) if len(b.op_start) else b.op_start > 0
    for dev, d in sorted(b.per_dev.items()):
        total = _len(_in(d["all"], window))
        sel = in_win & (b.op_dev == dev)
        keys = b.stream_keys(sel)
        comm = _in(d["comm"], window)
        comm_ns = _len(comm)
        hidden = _len(iv.intersect(comm, _in(d["compute"], window))) if comm_ns else 0
        rows.append({"device_id": int(dev), "processes": int(len(distinct(keys >> 32))) if len(keys) else 0,
                     "ops": int(sel.sum()), "busy_ns": total,
                     "compute_ns": _len(_in(d["compute"], window)), "comm_ns": comm_ns,
                     "comm_exposed_ns": comm_ns - hidden, "copy_ns": _len(_in(d["memcpy"], window)),
                     "memset_ns": _len(_in(d["memset"], window)),
                     "idle_ns": max(0, dur - total), "busy_frac": total / dur if dur else 0.0,
                     "streams": int(len(distinct(keys))) if len(keys) else 0})
    return pd.DataFrame(rows, columns=["device_id", "processes", "ops", "busy_ns", "compute_ns", "comm_ns",
                                       "comm_exposed_ns", "copy_ns", "memset_ns", "idle_ns", "busy_frac", "streams"])


def process_busy(ops: pd.DataFrame, window: Window, busy: Busy | None = None) -> pd.DataFrame:
    """Per (pid, device_id), in ``window``: the same columns as ``device_busy`` for one process's
    own ops (what each process contributed; the device's busy time is ``device_busy``)."""
    b = busy or Busy(ops)
    rows = []
    dur = window.dur_ns
    for (pid, dev), d in sorted(b.per_pid_dev.items()):
        total = _len(_in(d["all"], window))  # type: ignore[arg-type]
        rows.append({"pid": int(pid), "device_id": int(dev), "busy_ns": total,
                     "compute_ns": _len(_in(d["compute"], window)),  # type: ignore[arg-type]
                     "comm_ns": _len(_in(d["comm"], window)),  # type: ignore[arg-type]
                     "copy_ns": _len(_in(d["memcpy"], window)),  # type: ignore[arg-type]
                     "memset_ns": _len(_in(d["memset"], window)),  # type: ignore[arg-type]
                     "busy_frac": total / dur if dur else 0.0})
    return pd.DataFrame(rows, columns=["pid", "device_id", "busy_ns", "compute_ns", "comm_ns", "copy_ns",
                                       "memset_ns", "busy_frac"])


def utilization_series(ops: pd.DataFrame, window: Window, *, bins: int = 200, busy: Busy | None = None) -> pd.DataFrame:
    """Busy fraction of each device in ``bins`` equal time bins over ``window`` (a plot series).
    Columns: device_id, bin_start_ns, bin_end_ns, busy_frac (0..1)."""
    if window.dur_ns <= 0 or len(ops) == 0:
        return pd.DataFrame(columns=["device_id", "bin_start_ns", "bin_end_ns", "busy_frac"])
    b = busy or Busy(ops)
    edges = np.linspace(window.start_ns, window.end_ns, bins + 1).round().astype(np.int64)
    frames = []
    for dev, d in sorted(b.per_dev.items()):
        ms, me = _in(d["all"], window)
        cov = iv.coverage_in_bins(ms, me, edges)
        width = np.diff(edges)
        frames.append(pd.DataFrame({"device_id": int(dev), "bin_start_ns": edges[:-1], "bin_end_ns": edges[1:],
                                    "busy_frac": np.where(width > 0, cov / np.maximum(width, 1), 0.0)}))
    return pd.concat(frames, ignore_index=True)


def concurrency(ops: pd.DataFrame, window: Window, busy: Busy | None = None) -> pd.DataFrame:
    """Per device: the most streams busy at once, and the time-weighted mean number of busy streams
    while the device is busy (each stream's own activity merged first)."""
    b = busy or Busy(ops)
    rows = []
    for dev in sorted(b.per_dev):
        parts = [_in(ivs, window) for (d, _, _), ivs in sorted(b.per_stream.items()) if d == dev]
        if len(parts) == 1:  # one stream, merged: never more than one interval open at a time
            mx, mean = (1 if len(parts[0][0]) else 0), (1.0 if _len(parts[0]) > 0 else 0.0)
        else:
            # time-weighted mean depth = the streams' busy time over the time any is busy (their
            # union: the device's merged ops); the most open at once from a merge of the streams
            union = _len(_in(b.per_dev[dev]["all"], window))  # type: ignore[arg-type]
            mx, mean = iv.max_open(parts), (sum(_len(p) for p in parts) / union if union else 0.0)
        rows.append({"device_id": int(dev), "max_streams": mx, "mean_streams_when_busy": round(mean, 3),
                     "streams_used": len(parts)})
    return pd.DataFrame(rows, columns=["device_id", "max_streams", "mean_streams_when_busy", "streams_used"])


def copy_compute_overlap(ops: pd.DataFrame, window: Window, busy: Busy | None = None) -> pd.DataFrame:
    """Per device and copy direction (``all`` plus each memcpy kind): copy_ns (union of copies),
    compute_ns (union of kernels/graphs), overlap_ns (both at once), overlap_frac_of_copy, and the
    copy-engine and compute busy fractions of the window."""
    b = busy or Busy(ops)
    rows = []
    for dev, d in sorted(b.per_dev.items()):
        compute = _in(d["compute"], window)
        comp_ns = _len(compute)
        groups = [("all", d["memcpy"])] + [(k.split(":", 1)[1], v) for k, v in d.items() if k.startswith("memcpy:")]
        for kind, ivs in groups:
            cp = _in(ivs, window)
            cp_ns = _len(cp)
            ov_ns = _len(iv.intersect(cp, compute))
            rows.append({"device_id": int(dev), "direction": kind, "copy_ns": cp_ns, "compute_ns": comp_ns,
                         "overlap_ns": ov_ns, "overlap_frac_of_copy": ov_ns / cp_ns if cp_ns else 0.0,
                         "copy_busy_frac": cp_ns / window.dur_ns if window.dur_ns else 0.0,
                         "compute_busy_frac": comp_ns / window.dur_ns if window.dur_ns else 0.0})
    return pd.DataFrame(rows, columns=["device_id", "direction", "copy_ns", "compute_ns", "overlap_ns",
                                       "overlap_frac_of_copy", "copy_busy_frac", "compute_busy_frac"])


def stream_pair_overlap(ops: pd.DataFrame, window: Window, *, top: int = 20, busy: Busy | None = None) -> pd.DataFrame:
    """Time two streams of one device were busy at the same moment, for the ``top`` pairs (a stream is
    a (pid, stream) pair: streams of two processes on one device are distinct)."""
    b = busy or Busy(ops)
    rows = []
    for dev in sorted(b.per_dev):
        merged = {(p, s): _in(ivs, window) for (d, p, s), ivs in b.per_stream.items() if d == dev}
        keys = sorted(merged)
        if len(keys) > 64:  # bound the quadratic pairing; busiest streams first
            keys = sorted(keys, key=lambda s: -_len(merged[s]))[:64]
        for i, a in enumerate(keys):
            for c in keys[i + 1:]:
                ns = _len(iv.intersect(merged[a], merged[c]))
                if ns:
                    rows.append({"device_id": int(dev), "pid_a": int(a[0]), "stream_a": int(a[1]),
                                 "pid_b": int(c[0]), "stream_b": int(c[1]), "overlap_ns": ns})
    out = pd.DataFrame(rows, columns=["device_id", "pid_a", "stream_a", "pid_b", "stream_b", "overlap_ns"])
    return out.sort_values(["overlap_ns", "device_id", "stream_a", "stream_b"], ascending=[False, True, True, True],
                           kind="stable").head(top).reset_index(drop=True)


def in_window(df: pd.DataFrame, w: Window, start: str = "start_ns", end: str = "end_ns") -> pd.DataFrame:
    """Rows overlapping the window."""
    return df.loc[(df[start] < w.end_ns) & (df[end] > w.start_ns)]
