"""The timeline's event tracks: per GPU its ops by (process, stream) and its idle gaps (with their
cause and the findings whose saving comes from each), per host thread its NVTX ranges and CUDA API
calls nested together and its NVTX marks, and each finding as an instant at the start of the time
it claims."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.frames import group_rows
from nsysan.report.perfetto.events import (
    GPU_PID,
    IDLE_TID,
    Tracks,
    Writer,
    emit,
    json_names,
    meta,
    nest_lanes,
    nesting_order,
    us,
)
from nsysan.units import fmt_ns


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


def finding_time(f: Any) -> int:
    w = f.window or {}
    lo, hi = int(w.get("start_ns", 0)), int(w.get("end_ns", 0))
    if f.claims is not None and len(f.claims[0]):
        cs, ce = (np.asarray(x, dtype=np.int64) for x in f.claims)
        inside = cs[(ce > lo) & (cs < hi)] if hi > lo else cs
        if len(inside):
            return max(int(inside.min()), lo)
    starts = [int(e["start_ns"]) for e in f.evidence if isinstance(e.get("start_ns"), (int, np.integer))]
    return min(starts) if starts else lo


def gpu_tracks(w: Writer, a: Any, t0: int) -> None:
    ops, gaps, gpus = a.ops, a.gaps, a.trace.gpus
    devices = sorted({*ops["device_id"].astype("int64").tolist(), *gaps["device_id"].astype("int64").tolist()})
    gpu_name = {int(d): str(n) for d, n in zip(gpus["device_id"].tolist(), gpus["name"].tolist())} if len(gpus) else {}
    tracks: dict[int, Tracks] = {}
    for dev in devices:
        pid = GPU_PID + dev
        label = f"GPU {dev}" + (f" ({gpu_name[dev]})" if dev in gpu_name else "")
        meta(w, "process_name", pid, None, {"name": label})
        meta(w, "process_sort_index", pid, None, {"sort_index": dev})
        tracks[dev] = Tracks(w, pid)
    if len(gaps):
        gs_all = gaps["start_ns"].to_numpy(np.int64)
        ge_all = gaps["end_ns"].to_numpy(np.int64)
        claimed = _claimed_by(a, gs_all, ge_all)
        for (dev,), rows in group_rows(gaps["device_id"].to_numpy(np.int64)):
            rows = rows[nesting_order(gs_all[rows], ge_all[rows])]
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

            emit(w, "gap", GPU_PID + dev, tids, gs - t0, ge - t0,
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
        rows = rows[nesting_order(s_all[rows], e_all[rows])]
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
            emit(w, kind, GPU_PID + dev, tids[sel], s[sel] - t0, e[sel] - t0,
                  lambda idx, r=r: json_names(ops["name"], r[idx]), args)


def host_tracks(w: Writer, a: Any, t0: int) -> None:
    t = a.trace
    rg, api, marks = a.nvtx_ranges, t.cuda_api, t.nvtx.loc[t.nvtx["style"] == "Mark"] if len(t.nvtx) else t.nvtx
    pids = sorted({*rg["pid"].tolist(), *api["pid"].tolist(), *marks["pid"].tolist()})
    if not pids:
        return
    pnames, tnames = t.process_names(), t.thread_names()
    tracks: dict[int, Tracks] = {}
    for i, pid in enumerate(pids):
        meta(w, "process_name", pid, None, {"name": pnames.get(pid, f"process {pid}")})
        meta(w, "process_sort_index", pid, None, {"sort_index": 1000 + i})
        tracks[pid] = Tracks(w, pid)
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
            rows = rows[nesting_order(bs[rows], be[rows])]
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
                emit(w, cat, pid, tids[sel], s[sel] - t0, e[sel] - t0,
                      lambda idx, df=df, r=r: json_names(df["name"], r[idx]), args)
    if len(marks):
        ms = marks["start_ns"].to_numpy(np.int64)
        names = json_names(marks["name"], np.arange(len(marks)))
        lines = []
        for pid, tid, ts, n in zip(marks["pid"].tolist(), marks["tid"].tolist(), ms.tolist(), names):
            tracks[pid].name(tid, tnames.get((pid, tid), f"thread {tid}"), tid)
            lines.append(f'{{"ph":"i","s":"t","cat":"nvtx_mark","pid":{pid},"tid":{tid},"ts":{us(ts - t0)},'
                         f'"name":{n}}}')
        w.extend(lines, "nvtx_mark")


def finding_events(w: Writer, a: Any, t0: int) -> None:
    lines = []
    for rank, f in enumerate(a.findings, 1):
        ev = {"ph": "i", "s": "g", "cat": "finding", "pid": GPU_PID, "tid": IDLE_TID,
              "name": f"#{rank} {f.rule}: saves {fmt_ns(f.impact_ns)}",
              "args": {"rule": f.rule, "severity": f.severity.name.lower(), "title": f.title,
                       "impact_ns": int(f.impact_ns), "message": f.message}}
        lines.append(json.dumps(ev, separators=(",", ":"))[:-1] + f',"ts":{us(finding_time(f) - t0)}}}')
    w.extend(lines, "finding")
