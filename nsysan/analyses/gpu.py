"""GPU busy/idle time, utilization over time, concurrency, and copy/compute overlap, per device.

Busy time is the **union** of kernels, CUDA Graph launches, memcpy and memset on a (process, device)
-- never a sum -- so it can never exceed the window and a utilization never exceeds 100%. Streams are
keyed by (device, stream). Every number states its window: ``window_start_ns``/``window_end_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv


@dataclass(frozen=True)
class Window:
    """A time window [start_ns, end_ns) with a label saying what it is."""

    start_ns: int
    end_ns: int
    label: str  # "capture", "gpu activity", "steady state", "range:<name>"

    @property
    def dur_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    def to_dict(self) -> dict[str, object]:
        return {"start_ns": self.start_ns, "end_ns": self.end_ns, "dur_ns": self.dur_ns, "label": self.label}


def _clip(df: pd.DataFrame, w: Window) -> tuple[np.ndarray, np.ndarray]:
    return iv.clip(df["start_ns"].to_numpy(), df["end_ns"].to_numpy(), w.start_ns, w.end_ns)


def device_busy(ops: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Per (pid, device_id): busy_ns (union of all GPU ops), compute_ns (kernels + graphs),
    copy_ns (memcpy), memset_ns, idle_ns = window - busy, busy_frac, and ops count, in ``window``."""
    rows = []
    for (pid, dev), d in ops.groupby(["pid", "device_id"], sort=True):
        busy = iv.total(*_clip(d, window))
        compute = iv.total(*_clip(d.loc[d["op"].isin(["kernel", "graph"])], window))
        copy = iv.total(*_clip(d.loc[d["op"] == "memcpy"], window))
        memset = iv.total(*_clip(d.loc[d["op"] == "memset"], window))
        dur = window.dur_ns
        rows.append({"pid": int(pid), "device_id": int(dev), "ops": len(d), "busy_ns": busy, "compute_ns": compute,
                     "copy_ns": copy, "memset_ns": memset, "idle_ns": max(0, dur - busy),
                     "busy_frac": busy / dur if dur else 0.0, "streams": int(d["stream_id"].nunique())})
    return pd.DataFrame(rows, columns=["pid", "device_id", "ops", "busy_ns", "compute_ns", "copy_ns", "memset_ns",
                                       "idle_ns", "busy_frac", "streams"])


def utilization_series(ops: pd.DataFrame, window: Window, *, bins: int = 200) -> pd.DataFrame:
    """Busy fraction of each device in ``bins`` equal time bins over ``window`` (a plot series).
    Columns: device_id, bin_start_ns, bin_end_ns, busy_frac (0..1)."""
    if window.dur_ns <= 0 or len(ops) == 0:
        return pd.DataFrame(columns=["device_id", "bin_start_ns", "bin_end_ns", "busy_frac"])
    edges = np.linspace(window.start_ns, window.end_ns, bins + 1).round().astype(np.int64)
    frames = []
    for dev, d in ops.groupby("device_id", sort=True):
        ms, me = iv.merge(*_clip(d, window))
        cov = iv.coverage_in_bins(ms, me, edges)
        width = np.diff(edges)
        frames.append(pd.DataFrame({"device_id": int(dev), "bin_start_ns": edges[:-1], "bin_end_ns": edges[1:],
                                    "busy_frac": np.where(width > 0, cov / np.maximum(width, 1), 0.0)}))
    return pd.concat(frames, ignore_index=True)


def concurrency(ops: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Per device: the most streams busy at once, and the time-weighted mean number of busy streams
    while the device is busy (each stream's own activity merged first)."""
    rows = []
    for dev, d in ops.groupby("device_id", sort=True):
        ss, ee = [], []
        for _, sd in d.groupby("stream_id", sort=True):
            ms, me = iv.merge(*_clip(sd, window))
            ss.append(ms)
            ee.append(me)
        mx, mean = iv.max_depth(np.concatenate(ss), np.concatenate(ee)) if ss else (0, 0.0)
        rows.append({"device_id": int(dev), "max_streams": mx, "mean_streams_when_busy": round(mean, 3),
                     "streams_used": int(d["stream_id"].nunique())})
    return pd.DataFrame(rows, columns=["device_id", "max_streams", "mean_streams_when_busy", "streams_used"])


def copy_compute_overlap(ops: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Per device and copy direction (``all`` plus each memcpy kind): copy_ns (union of copies),
    compute_ns (union of kernels/graphs), overlap_ns (both at once), overlap_frac_of_copy, and the
    copy-engine and compute busy fractions of the window."""
    rows = []
    for dev, d in ops.groupby("device_id", sort=True):
        compute = iv.merge(*_clip(d.loc[d["op"].isin(["kernel", "graph"])], window))
        comp_ns = int((compute[1] - compute[0]).sum())
        copies = d.loc[d["op"] == "memcpy"]
        groups = [("all", copies)] + [(str(k), c) for k, c in copies.groupby("kind", sort=True)]
        for kind, c in groups:
            cp = iv.merge(*_clip(c, window))
            cp_ns = int((cp[1] - cp[0]).sum())
            ov = iv.intersect(cp, compute)
            ov_ns = int((ov[1] - ov[0]).sum())
            rows.append({"device_id": int(dev), "direction": kind, "copy_ns": cp_ns, "compute_ns": comp_ns,
                         "overlap_ns": ov_ns, "overlap_frac_of_copy": ov_ns / cp_ns if cp_ns else 0.0,
                         "copy_busy_frac": cp_ns / window.dur_ns if window.dur_ns else 0.0,
                         "compute_busy_frac": comp_ns / window.dur_ns if window.dur_ns else 0.0})
    return pd.DataFrame(rows, columns=["device_id", "direction", "copy_ns", "compute_ns", "overlap_ns",
                                       "overlap_frac_of_copy", "copy_busy_frac", "compute_busy_frac"])


def stream_pair_overlap(ops: pd.DataFrame, window: Window, *, top: int = 20) -> pd.DataFrame:
    """Time two streams of one device were busy at the same moment, for the ``top`` pairs."""
    rows = []
    for dev, d in ops.groupby("device_id", sort=True):
        merged = {int(s): iv.merge(*_clip(sd, window)) for s, sd in d.groupby("stream_id", sort=True)}
        keys = sorted(merged)
        if len(keys) > 64:  # bound the quadratic pairing; busiest streams first
            keys = sorted(keys, key=lambda s: -int((merged[s][1] - merged[s][0]).sum()))[:64]
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                ov = iv.intersect(merged[a], merged[b])
                ns = int((ov[1] - ov[0]).sum())
                if ns:
                    rows.append({"device_id": int(dev), "stream_a": a, "stream_b": b, "overlap_ns": ns})
    out = pd.DataFrame(rows, columns=["device_id", "stream_a", "stream_b", "overlap_ns"])
    return out.sort_values(["overlap_ns", "device_id", "stream_a", "stream_b"], ascending=[False, True, True, True],
                           kind="stable").head(top).reset_index(drop=True)
