"""Synchronizations inside an iteration: every point where the host waited for the GPU in the steady
iterations, per iteration and per call site, and what each costs the GPU afterwards.

A *sync call* is a blocking synchronize (``cudaStreamSynchronize``/``cudaDeviceSynchronize``/
``cudaEventSynchronize`` and the driver's ``cuStreamSynchronize``/``cuCtxSynchronize``/
``cuEventSynchronize``: ``gaps.BLOCKING_SYNC_APIS``) or a blocking device-to-host copy: a copy of
kind DtoH (its kind and host memory known from the copy the call launched, joined by process and
correlation id) made by a synchronous copy call (``cudaMemcpy``, ``cuMemcpyDtoH``...), or by an
asynchronous one into pageable memory (``cudaMemcpyAsync`` into pageable host memory returns only
once the copy is done). PyTorch's ``.item()``, ``.cpu()``, ``print(tensor)``, ``.tolist()``,
``nonzero``, boolean-mask indexing and ``torch.unique`` each make one (a pageable ``cudaMemcpyAsync``
then a ``cudaStreamSynchronize``).

A *sync point* is the calls of one thread in one iteration after which the same GPU operation is the
next to start on the device (the copy and the synchronize of one ``.item()`` are one point). Its *drain* is the GPU
idle time that follows it while the host refills the queue: the device's idle time from when the
awaited work finished (the end of the last GPU operation before the point's end; never before the
point began: idle time before the wait is the host's) to the start of the next GPU operation on that
device, through the point's end (the host resumes); zero when other work kept the device busy. At
least the time from the point's end to that next start when the device is idle there, at most the
time from the point's start to it. Drains are subsets of the device's idle time in the window, so
they never exceed it; a host that does not wait queues the next work before the GPU runs dry.

Its *cost* (the saving a finding claims) is the drain, at most the GPU work queued before the point
(the device's busy time from the previous point's next operation on that thread, or the window's
start, to the point's end): a host that runs ahead hides the refill behind the work it queued, and
no more than that. A loop that waits for its input after a sync (the drain is the data loading) is
charged only the step's GPU work, not the input wait.

The call site of a point is its first call's own-code frame from Python backtraces (else CUDA
backtraces: ``call_sites.site_calls``), else the API name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsysan.analyses.frames import group_rows, name_in
from nsysan.analyses.gaps import BLOCKING_SYNC_APIS

SYNC_COPY_APIS = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyFromSymbol", "cuMemcpyDtoH",
                  "cuMemcpy", "cuMemcpy2D", "cuMemcpy3D")  # blocking whatever the host memory
ASYNC_COPY_APIS = ("cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyFromSymbolAsync",
                   "cuMemcpyDtoHAsync", "cuMemcpyAsync", "cuMemcpy2DAsync", "cuMemcpy3DAsync")  # blocking into pageable

POINT_COLUMNS = ["pid", "tid", "iteration", "device_id", "start_ns", "end_ns", "wait_ns", "next_start_ns",
                 "drain_start_ns", "drain_end_ns", "drain_ns", "queued_ns", "cost_ns", "calls", "api", "site", "source"]
SITE_COLUMNS = ["site", "api", "source", "points", "calls", "per_iteration", "drain_ns", "cost_ns", "other_thread"]


@dataclass(frozen=True)
class Syncs:
    """The host synchronizations of the steady iterations (module docstring).

    ``points``: one row per sync point (``POINT_COLUMNS``; ``iteration`` the iteration table's
    ``index``), by start; ``per_iteration``: per steady iteration (pid, tid, index, start_ns) its
    ``calls``, ``points``, ``drain_ns`` and ``cost_ns``; ``sites``: per call site (``SITE_COLUMNS``),
    most drain first; ``iterations``: the steady iterations, ``with_syncs`` those holding a point;
    ``calls``/``drain_ns``/``cost_ns``: totals; ``source``: where the sites come from."""

    points: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=POINT_COLUMNS))
    per_iteration: pd.DataFrame = field(default_factory=pd.DataFrame)
    sites: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SITE_COLUMNS))
    iterations: int = 0
    with_syncs: int = 0
    calls: int = 0
    drain_ns: int = 0
    cost_ns: int = 0
    source: str = "API names"

    @property
    def per_step(self) -> float:
        """Sync points per steady iteration (mean)."""
        return len(self.points) / self.iterations if self.iterations else 0.0


def sync_calls(cuda_api: pd.DataFrame, memcpy: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Every blocking sync call and blocking device-to-host copy call of the trace: pid, tid,
    start_ns, end_ns, correlation_id, api, device_id (-1 when the call names none: a synchronize),
    by start."""
    cols = ["pid", "tid", "start_ns", "end_ns", "correlation_id", "api", "device_id"]
    api = cuda_api.loc[name_in(cuda_api["name"], BLOCKING_SYNC_APIS)] if len(cuda_api) else cuda_api
    parts = [pd.DataFrame({"pid": api["pid"].to_numpy(np.int64), "tid": api["tid"].to_numpy(np.int64),
                           "start_ns": api["start_ns"].to_numpy(np.int64), "end_ns": api["end_ns"].to_numpy(np.int64),
                           "correlation_id": api["correlation_id"].to_numpy(np.int64),
                           "api": api["name"].astype(str).to_numpy(), "device_id": np.full(len(api), -1, np.int64)})]
    if len(ops) and "api_name" in ops.columns:
        c = ops.loc[name_in(ops["op"], ("memcpy",)) & name_in(ops["kind"], ("DtoH",))
                    & (ops["api_start_ns"].to_numpy() >= 0)]
        if len(c):
            sync_api = name_in(c["api_name"], SYNC_COPY_APIS)
            async_api = name_in(c["api_name"], ASYNC_COPY_APIS)
            pageable = _host_mem(c, memcpy) == "Pageable"
            c = c.loc[sync_api | (async_api & pageable)]
            parts.append(pd.DataFrame({
                "pid": c["pid"].to_numpy(np.int64), "tid": c["tid"].to_numpy(np.int64),
                "start_ns": c["api_start_ns"].to_numpy(np.int64), "end_ns": c["api_end_ns"].to_numpy(np.int64),
                "correlation_id": c["correlation_id"].to_numpy(np.int64), "api": c["api_name"].astype(str).to_numpy(),
                "device_id": c["device_id"].to_numpy(np.int64)}))
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) \
        else pd.DataFrame({k: pd.Series(dtype="int64" if k != "api" else object) for k in cols})
    return out.sort_values(["start_ns", "tid"], kind="stable").reset_index(drop=True)[cols]


def _host_mem(copies: pd.DataFrame, memcpy: pd.DataFrame) -> np.ndarray:
    """Per copy op, its host memory kind ("Pageable", "Pinned"...) from the copy table, by (pid,
    correlation id); "" when not found."""
    out = np.full(len(copies), "", dtype=object)
    if len(memcpy) == 0 or "host_mem" not in memcpy.columns:
        return out
    m = memcpy.loc[(memcpy["kind"].astype(str) == "DtoH").to_numpy()]
    look = dict(zip(zip(m["pid"].to_numpy(np.int64).tolist(), m["correlation_id"].to_numpy(np.int64).tolist()),
                    m["host_mem"].astype(str).tolist()))
    keys = zip(copies["pid"].to_numpy(np.int64).tolist(), copies["correlation_id"].to_numpy(np.int64).tolist())
    return np.array([look.get(k, "") for k in keys], dtype=object)


def _devices(calls: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Each call's device: its copy's, else the device of the last GPU op its thread launched before
    it, else its process's most used device (-1 when the process launched nothing)."""
    dev = calls["device_id"].to_numpy(np.int64).copy()
    if len(ops) == 0 or "api_start_ns" not in ops.columns:
        return dev
    m = ops["api_start_ns"].to_numpy() >= 0  # the launched ops: four columns of them, not a frame
    lp, lt = ops["pid"].to_numpy(np.int64)[m], ops["tid"].to_numpy(np.int64)[m]
    ls, ld = ops["api_start_ns"].to_numpy(np.int64)[m], ops["device_id"].to_numpy(np.int64)[m]
    cp, ct, cs = calls["pid"].to_numpy(np.int64), calls["tid"].to_numpy(np.int64), calls["start_ns"].to_numpy(np.int64)
    todo = np.flatnonzero(dev < 0)
    if len(todo) == 0:
        return dev
    # the launched ops of each process and of each thread, found once (not a scan of every op per thread)
    by_pid = dict(group_rows(lp))
    by_thread = dict(group_rows(lp, lt))
    for (pid,), rows_p in group_rows(cp[todo]):
        mine = by_pid.get((pid,))
        if mine is None:
            continue
        u, n = np.unique(ld[mine], return_counts=True)
        fallback = int(u[np.argmax(n)])
        for (tid,), rows in group_rows(ct[todo[rows_p]]):
            rows = todo[rows_p[rows]]
            sel = by_thread.get((pid, tid))
            if sel is None:
                dev[rows] = fallback
                continue
            o = sel[np.argsort(ls[sel], kind="stable")]
            i = np.searchsorted(ls[o], cs[rows], side="right") - 1
            dev[rows] = np.where(i >= 0, ld[o][np.clip(i, 0, None)], fallback)
    return dev


def _iteration_of(calls: pd.DataFrame, steady_its: pd.DataFrame) -> np.ndarray:
    """Each call's steady iteration (the table's ``index``; -1 outside every one): one of its own
    thread's when that thread runs iterations, else its process's (lowest thread id first) whose CPU
    range (start, start + cpu_ns) holds the call's start."""
    out = np.full(len(calls), -1, dtype=np.int64)
    if len(steady_its) == 0 or len(calls) == 0:
        return out
    cp, ct, cs = calls["pid"].to_numpy(np.int64), calls["tid"].to_numpy(np.int64), calls["start_ns"].to_numpy(np.int64)
    seqs = sorted({(int(p), int(t)) for p, t in zip(steady_its["pid"], steady_its["tid"])})
    own = {(p, t) for p, t in seqs}
    # each call's thread runs iterations of its own or not; the calls of each process, found once
    # (a Python step per call and a scan of every call per sequence grew with processes x calls)
    in_own = np.array([(p, t) in own for p, t in zip(cp.tolist(), ct.tolist())], dtype=bool)
    by_pid = pd.Series(np.arange(len(cp))).groupby(cp).indices
    its_by_thread = steady_its.groupby(["pid", "tid"], sort=False).indices
    for pid, tid in seqs:
        g = steady_its.iloc[its_by_thread[(pid, tid)]].sort_values("start_ns", kind="stable")
        s, idx = g["start_ns"].to_numpy(np.int64), g["index"].to_numpy(np.int64)
        # its CPU range (the table's end is the completion, which overlaps the next iteration's start)
        e = s + g["cpu_ns"].to_numpy(np.int64) if "cpu_ns" in g.columns else g["end_ns"].to_numpy(np.int64)
        mine = by_pid.get(pid, np.zeros(0, dtype=np.int64))
        rows = mine[(out[mine] < 0) & (~in_own[mine] | (ct[mine] == tid))]
        if len(rows) == 0:
            continue
        k = np.searchsorted(s, cs[rows], side="right") - 1
        ok = (k >= 0) & (cs[rows] < e[np.clip(k, 0, None)])
        out[rows[ok]] = idx[k[ok]]
    return out


def _sites(calls: pd.DataFrame, site_calls: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """Each call's site ('loss_mask() train.py:55') and its source ('python', 'native', 'api')."""
    from nsysan.analyses.stack_frames import where

    site = calls["api"].astype(str).to_numpy().astype(object)
    source = np.full(len(calls), "api", dtype=object)
    if site_calls is None or len(site_calls) == 0:
        return site, source
    look = {(int(r["pid"]), int(r["correlation_id"])): (where(r), str(r["source"]))
            for r in site_calls.to_dict("records")}
    for j, k in enumerate(zip(calls["pid"].tolist(), calls["correlation_id"].tolist())):
        hit = look.get((int(k[0]), int(k[1])))
        if hit is not None:
            site[j], source[j] = hit
    return site, source


def _queued(pts: pd.DataFrame, nx: np.ndarray, ops: pd.DataFrame, window: tuple[int, int]) -> np.ndarray:
    """Per point, the device's busy time from the previous point of its thread (its next op start; its
    end when it had none) or the window's start, to the point's end: the GPU work queued before it."""
    from nsysan.analyses import intervals as iv

    out = np.zeros(len(pts), dtype=np.int64)
    od = ops["device_id"].to_numpy(np.int64)
    end = pts["end_ns"].to_numpy(np.int64)
    mark = np.where(nx >= 0, nx, end)
    dev, pid, tid = (pts[c].to_numpy(np.int64) for c in ("device_id", "pid", "tid"))
    for d in np.unique(dev).tolist():
        sel = od == d
        if not sel.any():
            continue
        ms, me = iv.merge(ops["start_ns"].to_numpy(np.int64)[sel], ops["end_ns"].to_numpy(np.int64)[sel])
        cum = np.concatenate([[0], np.cumsum(me - ms)])
        on = np.flatnonzero(dev == d)  # its points per thread, found once (not a scan of them per thread)
        for rows in pd.Series(on).groupby([pid[on], tid[on]]).indices.values():
            rows = on[rows]
            rows = rows[np.argsort(end[rows], kind="stable")]
            lo = np.concatenate([[window[0]], mark[rows][:-1]])
            hi = end[rows]
            out[rows] = np.maximum(_busy_before(ms, me, cum, hi) - _busy_before(ms, me, cum, lo), 0)
    return out


def _busy_before(ms: np.ndarray, me: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time of the merged intervals (ms, me) before each time t."""
    k = np.searchsorted(ms, t, side="right")
    part = np.where(k > 0, np.minimum(me[np.clip(k - 1, 0, None)], t) - ms[np.clip(k - 1, 0, None)], 0)
    return cum[k - np.where(k > 0, 1, 0)] + np.where(k > 0, np.maximum(part, 0), 0)


def hidden_syncs(cuda_api: pd.DataFrame, memcpy: pd.DataFrame, ops: pd.DataFrame, iterations: pd.DataFrame | None,
                 window: tuple[int, int], site_calls: pd.DataFrame | None = None) -> Syncs:
    """The sync points of the steady iterations of ``iterations`` (the iteration table: its rows
    without ``warmup``), their drains and call sites (module docstring). ``ops``: the GPU ops
    (``summaries.gpu_ops``: launching call's thread and times, copy kind); ``memcpy``: the copy table
    (host memory kind); ``window``: (start, end) ns, the steady window the drains are clipped to;
    ``site_calls``: ``call_sites.site_calls`` (None without backtraces)."""
    if iterations is None or len(iterations) == 0:
        return Syncs()
    its = iterations.loc[~iterations["warmup"].to_numpy(dtype=bool)]
    n_its = len(its)
    if n_its == 0:
        return Syncs()
    calls = sync_calls(cuda_api, memcpy, ops)
    it = _iteration_of(calls, its)
    calls = calls.loc[it >= 0].assign(iteration=it[it >= 0]).reset_index(drop=True)
    per_it_keys = its[["pid", "tid", "index", "start_ns"]].reset_index(drop=True)
    if len(calls) == 0:
        return Syncs(per_iteration=per_it_keys.assign(calls=0, points=0, drain_ns=0, cost_ns=0),
                     iterations=n_its)
    calls = calls.assign(device_id=_devices(calls, ops))
    site, source = _sites(calls, site_calls)
    calls = calls.assign(site=site, source=source)
    calls = _next_ops(calls, ops)
    pts = _points(calls)
    pts, drain = _drains(pts, ops, window)
    per_it = per_it_keys.assign(**_per_iteration(pts, per_it_keys["index"].to_numpy(np.int64)))
    sites = _per_site(pts, its, n_its)
    srcs = set(pts["source"].tolist())
    found_by = ("Python backtraces" if "python" in srcs else "CUDA backtraces" if "native" in srcs else "API names")
    return Syncs(points=pts, per_iteration=per_it, sites=sites, iterations=n_its,
                 with_syncs=int((per_it["points"] > 0).sum()), calls=int(pts["calls"].sum()),
                 drain_ns=int(drain.sum()), cost_ns=int(pts["cost_ns"].sum()), source=found_by)


def _per_iteration(pts: pd.DataFrame, index: np.ndarray) -> dict[str, np.ndarray]:
    """Per iteration ``index``: its points, calls, drain_ns and cost_ns (sums over its points; 0 without
    any), int64, by one reduction each (no groupby and join)."""
    it = pts["iteration"].to_numpy(np.int64)
    u, inv = np.unique(it, return_inverse=True)
    pos = np.clip(np.searchsorted(u, index), 0, max(len(u) - 1, 0))
    hit = (pos < len(u)) & (u[pos] == index) if len(u) else np.zeros(len(index), dtype=bool)
    out = {}
    for name, col in (("points", None), ("calls", "calls"), ("drain_ns", "drain_ns"), ("cost_ns", "cost_ns")):
        tot = np.zeros(len(u), dtype=np.int64)
        np.add.at(tot, inv.ravel(), 1 if col is None else pts[col].to_numpy(np.int64))
        out[name] = np.where(hit, tot[pos] if len(u) else 0, 0).astype(np.int64)
    return out


def _next_ops(calls: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """``calls`` with, per call, the first GPU op start at or after its end on its device
    (``next_start_ns``, -1 after the device's last op) and the latest end of the ops started before
    it (``cover_ns``)."""
    # per call: the first GPU op start at or after its end on its device
    nxt = np.full(len(calls), -1, dtype=np.int64)
    ce, cd = calls["end_ns"].to_numpy(np.int64), calls["device_id"].to_numpy(np.int64)
    od, ost = ops["device_id"].to_numpy(np.int64), ops["start_ns"].to_numpy(np.int64)
    oen = ops["end_ns"].to_numpy(np.int64)
    cover = np.full(len(calls), np.iinfo(np.int64).min, dtype=np.int64)  # the latest end of ops started before
    for d in np.unique(cd).tolist():
        rows = np.flatnonzero(cd == d)
        sel = np.flatnonzero(od == d)
        if len(sel) == 0:
            continue
        o = sel[np.argsort(ost[sel], kind="stable")]
        s_sorted, e_run = ost[o], np.maximum.accumulate(oen[o])
        k = np.searchsorted(s_sorted, ce[rows], side="left")  # first op starting at or after the end
        ok = k < len(o)
        nxt[rows[ok]] = s_sorted[k[ok]]
        before = k - 1
        has = before >= 0
        cover[rows[has]] = e_run[before[has]]
    # a call after the device's last op (or on a device without ops) has no drain: next start -1
    return calls.assign(next_start_ns=nxt, cover_ns=cover)


def _points(calls: pd.DataFrame) -> pd.DataFrame:
    """The sync points: the calls of one thread sharing the next op start, each named by its call site
    (a backtrace's over an API name)."""
    # points: the calls of one thread sharing the next op start, numbered in order of first appearance;
    # one sort of the calls and a reduction per column (pandas' named aggregations cost ~20 ms however
    # few the points)
    keys = ("pid", "tid", "device_id", "next_start_ns", "iteration")
    gid, first = _first_seen_groups([calls[k].to_numpy(np.int64) for k in keys])
    order = np.argsort(gid, kind="stable")  # each group's calls in their order
    bounds = np.flatnonzero(np.concatenate([[True], gid[order][1:] != gid[order][:-1]]))
    site, source = calls["site"].to_numpy(), calls["source"].to_numpy()
    lead = order[bounds]  # each group's first call
    # a site named by a backtrace wins over an API name within the point: the group's first such call
    named = np.flatnonzero(source != "api")
    if len(named):
        g_named, at = np.unique(gid[named], return_index=True)
        lead = lead.copy()
        lead[g_named] = named[at]
    cols = {k: calls[k].to_numpy(np.int64)[first] for k in keys}
    cols.update(start_ns=np.minimum.reduceat(calls["start_ns"].to_numpy(np.int64)[order], bounds),
                end_ns=np.maximum.reduceat(calls["end_ns"].to_numpy(np.int64)[order], bounds),
                cover_ns=np.maximum.reduceat(calls["cover_ns"].to_numpy(np.int64)[order], bounds),
                calls=np.diff(np.append(bounds, len(order))).astype(np.int64),
                site=site[lead], source=source[lead], api=_api_names(calls["api"], gid, len(first)))
    return pd.DataFrame(cols)


def _first_seen_groups(keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group number over the integer key arrays, groups numbered in order of their first
    row (pandas' ``groupby(sort=False).ngroup()``), and each group's first row."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys[::-1])
    change = np.zeros(n - 1, dtype=bool)
    for k in keys:
        ks = k[order]
        change |= ks[1:] != ks[:-1]
    sorted_gid = np.concatenate([[0], np.cumsum(change)])
    gid = np.empty(n, dtype=np.int64)
    gid[order] = sorted_gid
    starts = order[np.concatenate([[0], np.flatnonzero(change) + 1])]  # lexsort is stable: first rows
    rank = np.empty(len(starts), dtype=np.int64)
    rank[np.argsort(starts, kind="stable")] = np.arange(len(starts))
    return rank[gid], np.sort(starts)


def _api_names(api: pd.Series, group: np.ndarray, n: int) -> np.ndarray:
    """Per group (``group``: each call's group number, ``n`` groups), its calls' API names joined with
    " + " in the order they first appear among all calls: one bit per name OR-ed over the group (no
    Python step per group: a trace holds tens of thousands of points and a few distinct names)."""
    codes, names = pd.factorize(api.astype(str))
    out = np.empty(n, dtype=object)
    if len(names) > 62:  # more names than bits: one Python step per group
        for k, idx in pd.Series(np.arange(len(group))).groupby(group).indices.items():
            out[k] = " + ".join(dict.fromkeys(names[codes[idx]].tolist()))
        return out
    mask = np.zeros(n, dtype=np.int64)
    np.bitwise_or.at(mask, group, np.left_shift(np.int64(1), codes.astype(np.int64)))
    for m in np.unique(mask).tolist():
        out[mask == m] = " + ".join(str(names[b]) for b in range(len(names)) if m >> b & 1)
    return out


def _drains(pts: pd.DataFrame, ops: pd.DataFrame, window: tuple[int, int]) -> tuple[pd.DataFrame, np.ndarray]:
    """The points with their wait, drain (clipped to ``window``, once per op start and device) and
    cost (the drain, at most the GPU work queued before the sync); and the drains."""
    end, nx, cov = pts["end_ns"].to_numpy(np.int64), pts["next_start_ns"].to_numpy(np.int64), pts["cover_ns"].to_numpy(np.int64)
    # idle from when the awaited work finished (the last op before the point's end), never before the
    # point began (idle before it is the host's, not the wait's), to the next op start
    d_start = np.maximum(pts["start_ns"].to_numpy(np.int64), cov)
    d_start, d_end = np.clip(d_start, window[0], window[1]), np.clip(nx, window[0], window[1])
    drain = np.where(nx >= 0, np.maximum(d_end - d_start, 0), 0)
    d_start = np.where(drain > 0, d_start, d_end)
    # points of several threads before one op start: the drain counted once (the latest-ending point's)
    order = np.lexsort((d_start, pts["device_id"].to_numpy(np.int64), nx))
    dup = np.zeros(len(pts), dtype=bool)
    same = (np.diff(nx[order]) == 0) & (np.diff(pts["device_id"].to_numpy(np.int64)[order]) == 0)
    dup[order[:-1][same & (nx[order][:-1] >= 0)]] = True  # all but the last-starting drain of an (op start, device)
    drain = np.where(dup, 0, drain)
    d_start = np.where(dup, d_end, d_start)
    wait = (end - pts["start_ns"].to_numpy(np.int64)).astype(np.int64)
    queued = _queued(pts, nx, ops, window)
    cols = {c: pts[c].to_numpy() for c in pts.columns}
    cols.update(wait_ns=wait, drain_start_ns=d_start, drain_end_ns=d_end, drain_ns=drain, queued_ns=queued,
                cost_ns=np.minimum(drain, queued))
    order = np.lexsort((cols["tid"], cols["start_ns"]))  # by start, then thread; stable (pandas' sort_values)
    return pd.DataFrame({c: cols[c][order] for c in POINT_COLUMNS}), drain


def _per_site(pts: pd.DataFrame, its: pd.DataFrame, n_its: int) -> pd.DataFrame:
    """Per call site: its points, calls, drain and cost, per iteration, and whether it runs on a thread
    other than the iterations'."""
    # per site, in order of first appearance (pandas' groupby(sort=False)), by one reduction per column
    main_threads = {(int(p), int(t)) for p, t in zip(its["pid"], its["tid"])}
    other = np.array([(int(p), int(t)) not in main_threads for p, t in zip(pts["pid"], pts["tid"])], dtype=bool)
    site_code, _ = pd.factorize(pts["site"])
    source_code, _ = pd.factorize(pts["source"])
    gid, first = _first_seen_groups([site_code.astype(np.int64), source_code.astype(np.int64)])
    n = len(first)
    api_code, api_names = pd.factorize(pts["api"])
    _, at = np.unique(gid * (len(api_names) + 1) + api_code, return_index=True)
    names: list[dict[str, None]] = [{} for _ in range(n)]
    for g, c in zip(gid[np.sort(at)].tolist(), api_code[np.sort(at)].tolist()):  # a site's API names, first seen first
        names[g].update(dict.fromkeys(str(api_names[c]).split(" + ")))

    def total(col: str) -> np.ndarray:
        out = np.zeros(n, dtype=np.int64)
        np.add.at(out, gid, pts[col].to_numpy(np.int64))
        return out
    sites = pd.DataFrame({"site": pts["site"].to_numpy()[first], "source": pts["source"].to_numpy()[first],
                          "api": np.array([" + ".join(d) for d in names], dtype=object),
                          "points": np.bincount(gid, minlength=n).astype(np.int64), "calls": total("calls"),
                          "drain_ns": total("drain_ns"), "cost_ns": total("cost_ns"),
                          "other_thread": np.bincount(gid, weights=~other, minlength=n) == 0})
    sites = sites.assign(per_iteration=sites["points"] / n_its)
    return sites.sort_values(["drain_ns", "points", "site"], ascending=[False, False, True],
                              kind="stable").reset_index(drop=True)[SITE_COLUMNS]
