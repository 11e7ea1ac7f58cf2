"""GPU idle gaps and their causes.

A gap is a hole of at least ``min_gap_ns`` between consecutive busy periods of one device (busy =
union of kernels, graph launches, memcpy, memset of every process on it). Time before the first
and after the last GPU operation of the window is not a gap.

Cause, from the operation that ends the gap and the CUDA API call that launched it:

* ``host``: the call started after the GPU went idle -- the CPU was late to submit. What the
  submitting thread did *during that very gap* (clipped to it) is broken down into NVTX ranges
  (innermost), CUDA API calls and OS runtime calls, with shares; ``activity`` names the largest.
* ``sync``: as ``host``, but the submitting thread spent most of the gap blocked in a CUDA
  synchronization call (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize...).
* ``dependency``: the work was submitted before the gap but waited (an event / stream wait).
* ``launch``: submitted in time and the gap is shorter than ``launch_gap_ns``: launch latency.
* ``other``: no launching call in the trace, or none of the above.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.gpu import Window
from nsysan.trace.model import Trace

# Calls that block the host until GPU work finishes (rules/sync_api.py uses the same list).
BLOCKING_SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                      "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")
SYNC_APIS = (*BLOCKING_SYNC_APIS, "cudaStreamWaitEvent", "cudaStreamQuery", "cudaEventQuery")


class ThreadActivity:
    """Per-thread CUDA API, OS runtime and NVTX intervals, indexed once for clipped look-ups."""

    def __init__(self, trace: Trace) -> None:
        self._parts: dict[tuple[int, int], list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]] = {}
        nv = trace.nvtx.loc[(trace.nvtx["style"] != "Mark") & trace.nvtx["end_ns"].notna()]
        nv = nv.assign(end_ns=nv["end_ns"].astype("int64"))
        for source, df in (("cuda_api", trace.cuda_api), ("osrt", trace.osrt), ("nvtx", nv)):
            if len(df) == 0:
                continue
            for (pid, tid), g in df.groupby(["pid", "tid"], sort=False):
                g = g.sort_values("start_ns", kind="stable")
                self._parts.setdefault((int(pid), int(tid)), []).append(
                    (source, g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["name"].astype(str).to_numpy()))

    def items(self, pid: int, tid: int, lo: int, hi: int) -> list[dict[str, object]]:
        """What thread (pid, tid) did in [lo, hi): time per (source, name), clipped to the window.
        NVTX time goes to the innermost range (the latest-starting range open at each moment)."""
        out: list[dict[str, object]] = []
        for source, st, en, names in self._parts.get((pid, tid), []):
            # ranges/calls starting before hi; long-running ones may start well before lo
            j = np.searchsorted(st, hi, side="left")
            sel = np.flatnonzero(en[:j] > lo)
            if sel.size == 0:
                continue
            s, e = np.clip(st[sel], lo, hi), np.clip(en[sel], lo, hi)
            nm = names[sel]
            acc: dict[str, int] = {}
            if source == "nvtx":
                for i in range(s.size):
                    inner = iv.total(*iv.clip(s[i + 1:], e[i + 1:], int(s[i]), int(e[i])))
                    acc[nm[i]] = acc.get(nm[i], 0) + int(e[i] - s[i]) - inner
            else:
                for name in np.unique(nm):
                    m = nm == name
                    acc[str(name)] = iv.total(s[m], e[m])
            out += [{"source": source, "name": str(k), "ns": int(v)} for k, v in acc.items() if v > 0]
        return sorted(out, key=lambda x: (-int(x["ns"]), str(x["source"]), str(x["name"])))  # type: ignore[call-overload]


def idle_gaps(trace: Trace, ops: pd.DataFrame, window: Window, *, min_gap_ns: int = 10_000,
              launch_gap_ns: int = 10_000, explain_top: int = 300) -> pd.DataFrame:
    """Columns: device_id, start_ns, end_ns, gap_ns, cause, pid, tid (submitting thread), api_name,
    api_start_ns, next_op, activity (largest item on the submitting thread during the gap),
    breakdown (list of {source, name, ns} for the ``explain_top`` longest gaps), sorted by start."""
    parts = []
    for dev, d in ops.groupby("device_id", sort=True):
        d = d.loc[(d["end_ns"] > window.start_ns) & (d["start_ns"] < window.end_ns)]
        if len(d) < 2:
            continue
        ms, me = iv.merge(d["start_ns"].to_numpy(), d["end_ns"].to_numpy())
        gs, ge = iv.gaps(ms, me)
        keep = (ge - gs) >= min_gap_ns
        gs, ge = gs[keep], ge[keep]
        nxt = np.searchsorted(d["start_ns"].to_numpy(), ge, side="left")  # the op that ends the gap
        parts.append(pd.DataFrame({
            "device_id": int(dev), "start_ns": gs, "end_ns": ge, "gap_ns": ge - gs,
            "pid": d["pid"].to_numpy()[nxt], "correlation_id": d["correlation_id"].to_numpy()[nxt],
            "next_op": d["name"].to_numpy()[nxt].astype(str)}))
    cols = ["device_id", "start_ns", "end_ns", "gap_ns", "cause", "pid", "tid", "api_name", "api_start_ns",
            "next_op", "activity", "breakdown"]
    if not parts or sum(len(p) for p in parts) == 0:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    api = trace.cuda_api[["pid", "tid", "correlation_id", "start_ns", "name"]].drop_duplicates(
        ["pid", "correlation_id"]).rename(columns={"start_ns": "api_start_ns", "name": "api_name"})
    out = out.merge(api, on=["pid", "correlation_id"], how="left")
    has_api = out["api_start_ns"].notna().to_numpy()
    api_start = out["api_start_ns"].fillna(-1).astype("int64").to_numpy()
    cause = np.where(~has_api, "other",
                     np.where(api_start > out["start_ns"].to_numpy(), "host",
                              np.where(out["gap_ns"].to_numpy() < launch_gap_ns, "launch", "dependency")))
    out = out.assign(cause=cause, api_start_ns=api_start, tid=out["tid"].fillna(-1).astype("int64"),
                     api_name=out["api_name"].astype(object).where(has_api, "").astype(str))
    activity = [""] * len(out)
    breakdown: list[list[dict[str, object]]] = [[] for _ in range(len(out))]
    causes = out["cause"].to_list()
    explain = out.loc[out["cause"] == "host"].nlargest(explain_top, "gap_ns").index
    activity_index = ThreadActivity(trace) if len(explain) else None
    for i in explain:
        r = out.loc[i]
        lo, hi = int(r["start_ns"]), int(min(r["api_start_ns"], r["end_ns"]))
        assert activity_index is not None
        items = activity_index.items(int(r["pid"]), int(r["tid"]), lo, hi)
        span = max(hi - lo, 1)
        api_items = [x for x in items if x["source"] == "cuda_api"]
        sync_ns = sum(int(x["ns"]) for x in api_items if str(x["name"]).startswith(SYNC_APIS))
        if sync_ns > span / 2:
            causes[i] = "sync"
        for x in items:
            x["share"] = round(int(x["ns"]) / span, 4)
        breakdown[i] = items
        nvtx_items = [x for x in items if x["source"] == "nvtx"]
        top = api_items[0] if api_items and int(api_items[0]["ns"]) > span / 2 else (
            nvtx_items[0] if nvtx_items else (items[0] if items else None))
        activity[i] = f"{top['source']}:{top['name']}" if top else "untraced CPU work"
    out = out.assign(cause=causes, activity=activity, breakdown=breakdown)
    return out[cols].sort_values(["start_ns", "device_id"], kind="stable").reset_index(drop=True)


def gap_summary(gaps: pd.DataFrame, window: Window) -> dict[str, object]:
    """Totals by cause, and the activities that cost the most idle time."""
    if len(gaps) == 0:
        return {"count": 0, "total_ns": 0, "by_cause": {}, "by_activity": []}
    by_cause = {str(k): {"count": int(len(g)), "total_ns": int(g["gap_ns"].sum())}
                for k, g in gaps.groupby("cause", sort=True)}
    act = gaps.loc[gaps["activity"] != ""].groupby("activity", sort=True)["gap_ns"].agg(["count", "sum"])
    by_activity = [{"activity": str(k), "count": int(v["count"]), "total_ns": int(v["sum"])}
                   for k, v in act.sort_values("sum", ascending=False).head(20).iterrows()]
    return {"count": int(len(gaps)), "total_ns": int(gaps["gap_ns"].sum()), "by_cause": by_cause,
            "by_activity": by_activity, "window": window.to_dict()}
