"""GPU idle gaps and their causes.

A gap is a hole of at least ``min_gap_ns`` between consecutive busy periods of one device (busy =
union of kernels, graph launches, memcpy, memset of every process on it). Time before the first
and after the last GPU operation of the window is not a gap.

Cause, from the operation that ends the gap and the CUDA API call that launched it:

* ``host``: the call started after the GPU went idle -- the CPU was late to submit. What the
  submitting thread did *during that very gap* (up to the launching call's start) is broken down
  by overlap (``thread_activity``) into CUDA API calls, OS runtime calls and NVTX ranges, each
  nanosecond given to one activity only, the most specific traced one (a CUDA API call, else an OS
  runtime call, else the innermost NVTX range: an OS call inside a CUDA call, or a call inside a
  range, counts once), so a gap's shares add up to at most 1 and the rest is untraced. ``activity`` names the activity
  covering over half of it, else ``UNTRACED`` when untraced time does, else the largest activity;
  ``gap_activity.activity_time`` sums the time per activity over any set of gaps, each nanosecond
  of a thread once.
* ``sync``: as ``host``, but the submitting thread spent most of the gap blocked in a CUDA
  synchronization call (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize...).
* ``dependency``: the work was submitted before the gap but waited (an event / stream wait).
* ``launch``: submitted in time and the gap is shorter than ``launch_gap_ns``: launch latency.
* ``other``: no launching call in the trace, or none of the above. An op that no call launched (a
  unified memory migration started by page faults) does not end a gap for this purpose: the next op
  on the device that a call launched does, so GPU idle time while the launching thread ran CPU work
  with no CUDA call is ``host``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan._native import c_pass
from nsysan._native.windows import window_best, window_best_numpy
from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import (
    compact,
    count_sum,
    distinct,
    group_rows,
    one_key,
    rows_of,
    take,
    top_rows,
)
from nsysan.analyses.gap_activity import GapActivity, activity_time, joined, label_ids, with_overlaps
from nsysan.analyses.gpu import Window
from nsysan.analyses.join import with_launch_calls
from nsysan.analyses.thread_activity import SOURCES, ThreadActivity
from nsysan.trace.model import Trace, as_column, constant_column

# Calls that block the host until GPU work finishes (rules/sync_api.py uses the same list).
BLOCKING_SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                      "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")
CAUSES = ("host", "sync", "dependency", "launch", "other")
SYNC_APIS = (*BLOCKING_SYNC_APIS, "cudaStreamWaitEvent", "cudaStreamQuery", "cudaEventQuery")
UNTRACED = "mostly untraced CPU work"  # the label when untraced time covers over half of a gap
EXPLAIN_CHUNK = 1 << 16  # host gaps of one thread explained together (explain_gaps: the working set's bound)


def idle_gaps(trace: Trace, ops: pd.DataFrame, window: Window, *, min_gap_ns: int = 10_000,
              launch_gap_ns: int = 10_000, explain_top: int = 300) -> pd.DataFrame:
    """The frame of ``idle_gaps_with_activity`` (its ``GapActivity`` let go)."""
    return idle_gaps_with_activity(trace, ops, window, min_gap_ns=min_gap_ns, launch_gap_ns=launch_gap_ns,
                                   explain_top=explain_top)[0]


def idle_gaps_with_activity(trace: Trace, ops: pd.DataFrame, window: Window, *, min_gap_ns: int = 10_000,
                            launch_gap_ns: int = 10_000,
                            explain_top: int = 300) -> tuple[pd.DataFrame, GapActivity]:
    """The gaps, and what their submitting threads did in them (``GapActivity``: every host and
    sync gap's exclusive time per activity, found in the same pass as each gap's ``activity``; what
    ``activity_time`` sums). The frame's columns: device_id, start_ns, end_ns, gap_ns, cause, pid,
    tid (submitting thread), api_name, api_start_ns, next_op, activity (what the submitting thread
    was doing during the gap, by coverage: see ``explain_gaps``; every host and sync gap has one,
    others ""), breakdown (list of {source, name, ns, share} for the ``explain_top`` longest host
    gaps, None elsewhere), sorted by start. Causes and activities cover every gap: the per-gap work
    is vectorised per thread."""
    ops = with_launch_calls(trace, ops)
    dev_all = ops["device_id"].to_numpy()
    parts = [p for p in (_device_gaps(ops, dev_all == dev, int(dev), window, min_gap_ns) for dev in distinct(dev_all))
             if p is not None]
    cols = ["device_id", "start_ns", "end_ns", "gap_ns", "cause", "pid", "tid", "api_name", "api_start_ns",
            "next_op", "activity", "breakdown"]
    if not parts or sum(len(p) for p in parts) == 0:
        return pd.DataFrame(columns=cols), GapActivity(np.empty(0, np.int64), np.empty(0, np.int32),
                                                       np.empty(0, np.int64), [], 0)
    out = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    api_start = out["api_start_ns"].to_numpy()
    has_api = api_start >= 0
    causes = np.array(CAUSES, dtype=object)
    i8 = np.int8  # the cause codes as int8 throughout (no int64 array per gap on the way)
    cause = np.where(~has_api, i8(4), np.where(api_start > out["start_ns"].to_numpy(), i8(0),
                                              np.where(out["gap_ns"].to_numpy() < launch_gap_ns, i8(3), i8(2))))
    o_start, o_end, o_pid, o_tid = (out[c].to_numpy() for c in ("start_ns", "end_ns", "pid", "tid"))
    host = np.flatnonzero(cause == 0)
    detail = top_rows(out["gap_ns"].to_numpy(), host, explain_top)
    spent: list[Any] = []
    act_codes, act_cats, breakdown, is_sync = explain_gaps(trace, host, o_start[host],
                                                          np.minimum(api_start[host], o_end[host]),
                                                          o_pid[host], o_tid[host], detail, len(out), spent)
    sp_rows, sp_label, sp_ns, sp_labels = spent
    table = GapActivity(sp_rows, sp_label, sp_ns, sp_labels, n=len(out))
    del spent, sp_rows, sp_label, sp_ns, sp_labels
    table = with_overlaps(trace, table, host, o_start[host], np.minimum(api_start[host], o_end[host]), o_end[host],
                          o_pid[host], o_tid[host], detail)
    cause[host[is_sync]] = 1
    api_name = out["api_name"].array  # categorical already: no round trip through Python strings
    out = out.assign(cause=pd.Categorical.from_codes(cause, categories=pd.Index(causes, dtype=object)),
                     activity=pd.Categorical.from_codes(act_codes, categories=pd.Index(act_cats, dtype=object)),
                     breakdown=breakdown,
                     tid=as_column(out, compact(np.where(has_api, o_tid, -1))),
                     api_name=api_name.add_categories([""]).fillna("") if "" not in api_name.categories
                     else api_name.fillna(""))
    if not (len(parts) == 1 and bool((o_start[1:] >= o_start[:-1]).all())):  # one device: in order already
        order = np.lexsort((out["device_id"].to_numpy(), o_start))
        if not bool((order[1:] > order[:-1]).all()):
            out = out.take(order).reset_index(drop=True)
            table = table.reordered(order)
    return out[cols], table


def _spent_types(n: int, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[type, type]:
    """The ``spent`` table's columns as narrow as they can be, each chunk's part narrowed as it comes
    (its entries number a few per gap: 1.6M on the 245 MB trace's 751k gaps): gap rows below 2^31,
    and an entry's time, at most its window's span, in int32 when every span is below 2^31."""
    row_t = np.int32 if n < 1 << 31 else np.int64
    ns_t = np.int32 if len(rows) == 0 or int(np.max(hi - lo)) < 1 << 31 else np.int64
    return row_t, ns_t


def explain_gaps(trace: Trace, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, pid: np.ndarray,
                 tid: np.ndarray, detail: np.ndarray, n: int,
                 spent: list[Any] | None = None) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """What the submitting thread did during each host gap ``rows`` (windows [lo, hi): the gap up to
    the launching call's start), for every gap, vectorised per thread.

    Returns (activity code per gap of the ``n`` gaps, the code -> label table, breakdown per gap --
    a list of {source, name, ns, share} for the gaps in ``detail`` and None elsewhere -- and, per
    ``rows`` entry, whether the thread spent over half the gap in a synchronization call).

    Time is exclusive (``ThreadActivity.exclusive_sums``): each nanosecond of a window goes to one
    activity, the most specific traced one (CUDA API call > OS runtime call > innermost NVTX range),
    so a gap's shares add up to at most 1 and the rest is untraced. The activity label is the
    activity covering over half of the window; else ``UNTRACED`` when untraced time covers over half
    of it; else (no one thing covers half) the largest traced activity. Non-host gaps get the empty
    label. ``spent``: when given, receives ``(gap rows, label ids, ns, label table)``: every host
    gap's exclusive time per activity ("source:name"), the sparse table ``GapActivity`` holds."""
    act = np.zeros(n, dtype=np.int32)
    breakdown = np.empty(n, dtype=object)
    is_sync = np.zeros(len(rows), dtype=bool)
    labels: dict[str, int] = {"": 0, UNTRACED: 1}
    sp_rows: list[np.ndarray] = []
    sp_label: list[np.ndarray] = []
    sp_ns: list[np.ndarray] = []
    row_t, ns_t = _spent_types(n, rows, lo, hi)
    if len(rows) == 0:
        if spent is not None:
            spent.extend([np.empty(0, row_t), np.empty(0, np.int32), np.empty(0, ns_t), list(labels)])
        return act, [""], breakdown, is_sync
    chosen = np.ones(len(rows), dtype=np.int32)  # label ids: a few thousand at most
    span = np.maximum(hi - lo, 1)
    is_detail = np.zeros(len(rows), dtype=bool)
    is_detail[np.searchsorted(rows, detail)] = True
    index = ThreadActivity(trace)
    only = one_key(pid, tid)
    one = only is not None
    # one submitting thread (the usual case): its windows are all of them, no positions or copies
    groups: list[tuple[Any, Any]] = [(only, slice(None))] if one else group_rows(pid, tid)
    fast = _fast_window_best()
    for (p, t), sel in groups:
        t_lo, t_hi, sp = (lo, hi, span) if one else (lo[sel], hi[sel], span[sel])
        det_local = np.flatnonzero(is_detail if one else is_detail[sel])
        sweep = index.nvtx_swept(p, t, t_lo, t_hi)
        # the windows a chunk at a time: each window's sums, best entry and label depend on it alone,
        # so the chunks give what all the windows at once give, with a bounded working set (all the
        # 600k gaps of a launch loop at once: 112 MiB of per-window entries and their copies)
        for a in range(0, len(t_lo), EXPLAIN_CHUNK):
            b = min(a + EXPLAIN_CHUNK, len(t_lo))
            det_c = det_local[np.searchsorted(det_local, a):np.searchsorted(det_local, b)] - a
            names, win, src, code, ns = index.exclusive_sums(p, t, t_lo[a:b], t_hi[a:b], det_c, sweep)
            if len(win) == 0:
                continue
            sp_c = np.ascontiguousarray(sp[a:b], dtype=np.int64)
            best, sync = _best_and_sync(fast, names, win, src, code, ns, sp_c)
            at = slice(a, b) if one else sel[a:b]  # these windows' positions in ``rows``
            is_sync[at] = sync
            has = _named_windows(best, win, ns, sp_c)
            ids = label_ids(labels, names, src, code)
            here = np.ones(b - a, dtype=np.int32)
            here[has] = ids[best[has]]
            chosen[at] = here
            del best, sync, has, here
            if spent is not None:
                sp_rows.append(rows[at][win].astype(row_t, copy=False))
                sp_label.append(ids)
                sp_ns.append(ns.astype(ns_t, copy=False))
            del ids
            if len(det_c):
                _fill_breakdowns(breakdown, rows[at], det_c, names, win, src, code, ns, sp_c)
            del names, win, src, code, ns
        index.forget(p, t)  # each thread comes once: its copied rows would only pile up
    for r in detail.tolist():  # explained gaps with nothing traced on their thread
        if breakdown[r] is None:
            breakdown[r] = []
    text = sorted(labels, key=labels.__getitem__)
    act[rows], cats = _label_codes(text, chosen)
    if spent is not None:
        spent.extend([joined(sp_rows, row_t), joined(sp_label, np.int32), joined(sp_ns, ns_t), text])
    return act, cats, breakdown, is_sync


def _best_and_sync(fast: Any, names: dict[str, np.ndarray], win: np.ndarray, src: np.ndarray, code: np.ndarray,
                   ns: np.ndarray, sp_c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each window's largest entry (-1 none) and sync flag, by the C pass ``fast`` (else numpy);
    exclusive entries: at most one covers over half of a window, and it is then the largest."""
    args = (win, src, code, ns, sp_c, _sync_table(names.get("cuda_api")))
    return window_best(fast(*args, 0.0)) if fast is not None else window_best_numpy(*args, 0.0)


def _named_windows(best: np.ndarray, win: np.ndarray, ns: np.ndarray, sp_c: np.ndarray) -> np.ndarray:
    """The windows (positions) that their largest activity names: all that have one, unless it covers
    at most half of the window while untraced time covers over half."""
    traced = np.bincount(win, weights=ns, minlength=len(sp_c)).astype(np.int64)
    has = np.flatnonzero(best >= 0)
    top = ns[best[has]]
    return has[(top * 2 > sp_c[has]) | ((sp_c[has] - traced[has]) * 2 <= sp_c[has])]


def _fill_breakdowns(breakdown: np.ndarray, gap_rows: np.ndarray, det_c: np.ndarray, names: dict[str, np.ndarray],
                     win: np.ndarray, src: np.ndarray, code: np.ndarray, ns: np.ndarray, sp_c: np.ndarray) -> None:
    """The breakdown of each detail window ``det_c`` (positions in this chunk, whose gaps are
    ``gap_rows``): a list of {source, name, ns, share}, largest first."""
    a_, b_ = np.searchsorted(win, det_c), np.searchsorted(win, det_c, side="right")
    for wl, i0, i1 in zip(det_c.tolist(), a_.tolist(), b_.tolist()):
        items: list[dict[str, Any]] = [{"source": SOURCES[s_], "name": str(names[SOURCES[s_]][c_]) if c_ >= 0 else "",
                  "ns": int(v_), "share": round(int(v_) / int(sp_c[wl]), 4)}
                 for s_, c_, v_ in zip(src[i0:i1].tolist(), code[i0:i1].tolist(), ns[i0:i1].tolist())]
        breakdown[gap_rows[wl]] = sorted(items, key=lambda x: (-int(x["ns"]), str(x["source"]), str(x["name"])))


def _label_codes(text: list[str], chosen: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The label ids ``chosen`` (into ``text``) as codes into the sorted labels used (the empty
    label always among them), and those labels."""
    used = np.unique(np.concatenate([[0], chosen]))
    cats = sorted(text[i] for i in used.tolist())
    remap = np.zeros(len(text), dtype=np.int32)
    for i in used.tolist():
        remap[i] = cats.index(text[i])
    return remap[chosen], cats


def _fast_window_best() -> Any:
    """``_btree.window_best`` when the extension has it, else None (the numpy path)."""
    return c_pass("window_best")


def _sync_table(cats: np.ndarray | None) -> np.ndarray:
    """Per CUDA API name code (code -1 at the last slot), whether it is a synchronization call."""
    if cats is None:
        return np.zeros(1, dtype=bool)
    return np.array([str(c).startswith(SYNC_APIS) for c in cats.tolist()] + [False], dtype=bool)


def _device_gaps(ops: pd.DataFrame, on_device: np.ndarray, dev: int, window: Window,
                 min_gap_ns: int) -> pd.DataFrame | None:
    """One device's gaps of at least ``min_gap_ns`` between its merged busy intervals in ``window``,
    with the op that ends each gap and its launching call (a function of its own: its 1M-row
    temporaries are gone before the gaps are explained)."""
    rows = np.flatnonzero(on_device & (ops["end_ns"].to_numpy() > window.start_ns)
                          & (ops["start_ns"].to_numpy() < window.end_ns))
    if len(rows) < 2:
        return None
    st, en = rows_of(ops["start_ns"].to_numpy(), rows), rows_of(ops["end_ns"].to_numpy(), rows)
    ms, me = iv.merge(st, en)
    # iv.gaps' holes as views (it copies them), copied once by the selection below
    gs, ge = (me[:-1], ms[1:]) if ms.size >= 2 else (np.empty(0, np.int64), np.empty(0, np.int64))
    keep = (ge - gs) >= min_gap_ns
    gs, ge = gs[keep], ge[keep]
    del ms, me, keep
    nxt = iv.search(st, ge, side="left")
    # an op no call launched (a unified memory migration the CPU's page faults started) does not say
    # what the GPU waited for: the next op on the device that a call launched does (its thread, late
    # while it ran CPU work with no CUDA call, makes the gap host-caused, not "other")
    api = rows_of(ops["api_start_ns"].to_numpy(), rows)
    if len(nxt) and bool((api[np.minimum(nxt, len(api) - 1)] < 0).any()):
        launched = np.flatnonzero(api >= 0)
        if len(launched):
            k = np.searchsorted(st[launched], ge, side="left")
            sub = launched[np.minimum(k, len(launched) - 1)]
            nxt = np.where((api[np.minimum(nxt, len(api) - 1)] < 0) & (k < len(launched)), sub, nxt)
    nxt = nxt if len(rows) == len(ops) else rows[nxt]  # the op that ends the gap (rows: ascending)
    # copy=False: the new columns as they are, not consolidated into one more block of all of them;
    # the device id is one read-only value for every gap (a view, not a column)
    return pd.DataFrame({
        "device_id": constant_column(dev, len(gs), np.int64), "start_ns": gs, "end_ns": ge, "gap_ns": ge - gs,
        "pid": take(ops["pid"].to_numpy(), nxt), "tid": take(ops["tid"].to_numpy(), nxt),
        "api_start_ns": ops["api_start_ns"].to_numpy()[nxt],
        "api_name": ops["api_name"].array.take(nxt, allow_fill=False),
        "next_op": ops["name"].array.take(nxt, allow_fill=False)}, copy=False)


def gap_summary(gaps: pd.DataFrame, activity: GapActivity, window: Window) -> dict[str, object]:
    """Totals by cause, and where the host and sync gaps' time went (``activity_time``: each
    activity's overlap with the gaps, each nanosecond once, then the untraced rest and the
    launching calls' tails; ``count``: the gaps it ran in): the 20 largest, adding up to at most
    the host and sync gaps' total."""
    if len(gaps) == 0:
        return {"count": 0, "total_ns": 0, "by_cause": {}, "by_activity": []}
    by_cause = {str(k): {"count": int(v["count"]), "total_ns": int(v["sum"])}
                for k, v in count_sum(gaps["cause"], gaps["gap_ns"]).iterrows()}
    act = activity_time(gaps, activity).head(20)
    by_activity = [{"activity": str(a), "count": int(c), "total_ns": int(v)}
                   for a, c, v in zip(act["activity"].tolist(), act["gaps"].tolist(), act["ns"].tolist())]
    return {"count": len(gaps), "total_ns": int(gaps["gap_ns"].sum()), "by_cause": by_cause,
            "by_activity": by_activity, "window": window.to_dict()}
